//! Shared test helpers: devices over leaked host memory and a full dump of
//! the observable state (to check that refused operations change nothing).
#![allow(dead_code)]

use std::mem::MaybeUninit;

use pageframe_swap::{
    ClusterIndex, ClusterSnapshot, DeviceStats, Slot, SlotState, SwapConfig, SwapDevice,
};

/// A device with `cont_pages` continuation pages; the memory is leaked so
/// the device can be `'static` and shared by threads.
pub fn device(cfg: SwapConfig, cont_pages: usize) -> SwapDevice<'static> {
    let meta =
        Box::leak(vec![MaybeUninit::uninit(); SwapDevice::metadata_bytes(&cfg)].into_boxed_slice());
    let cont = (cont_pages > 0).then(|| {
        let b: &'static mut [MaybeUninit<u8>] = Box::leak(
            vec![MaybeUninit::uninit(); SwapDevice::continuation_bytes(&cfg, cont_pages)]
                .into_boxed_slice(),
        );
        b
    });
    SwapDevice::new(cfg, meta, cont).expect("valid test config")
}

/// Everything a caller can observe.
#[derive(PartialEq, Eq, Debug)]
pub struct Dump {
    pub slots: Vec<SlotState>,
    pub clusters: Vec<ClusterSnapshot>,
    pub stats: DeviceStats,
}

pub fn dump(dev: &SwapDevice<'_>) -> Dump {
    let slots = (0..dev.config().slots)
        .map(|s| dev.slot_state(Slot::new(s)).unwrap())
        .collect();
    let clusters = (0..dev.nr_clusters())
        .map(|c| dev.cluster(ClusterIndex::new(c)).unwrap())
        .collect();
    let mut stats = dev.stats();
    // Reading state takes the list lock; that counter is not "state".
    stats.list_lock_acquisitions = 0;
    Dump {
        slots,
        clusters,
        stats,
    }
}
