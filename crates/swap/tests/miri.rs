//! A small end-to-end run meant for Miri (`cargo +nightly miri test -p
//! pageframe-swap --test miri`): metadata and continuation storage carved
//! from caller memory that is not leaked, then every kind of operation,
//! including across threads.

use std::mem::MaybeUninit;

use pageframe_swap::{
    DeviceFlags, Order, Slot, SlotState, SwapConfig, SwapCpu, SwapDevice, SwapinDecision,
    SwapinPolicy, VmaFlags,
};

#[test]
fn carve_operate_and_share() {
    let cfg = SwapConfig::new(4 * 8 + 3)
        .with_cluster_order(3)
        .with_flags(DeviceFlags::BLOCK_DEVICE | DeviceFlags::PAGE_DISCARD);
    // Deliberately misaligned buffers: carving must align them itself.
    let mut meta = vec![MaybeUninit::uninit(); SwapDevice::metadata_bytes(&cfg) + 1];
    let mut cont = vec![MaybeUninit::uninit(); SwapDevice::continuation_bytes(&cfg, 1) + 1];
    let mut dev = SwapDevice::new(cfg, &mut meta[1..], Some(&mut cont[1..])).unwrap();
    let mut cpu = SwapCpu::new();
    let k = dev.huge_order();

    let h = dev.alloc_huge(&mut cpu).unwrap();
    dev.duplicate(h, k).unwrap();
    dev.put_cache(h, k).unwrap();
    assert_eq!(
        dev.swapin_huge(h, SwapinPolicy::Never, VmaFlags::empty()),
        Ok(SwapinDecision::Split)
    );
    for i in 0..8 {
        assert_eq!(dev.put_map(Slot::new(h.get() + i), Order::ZERO), Ok(1));
    }
    assert_eq!(dev.run_discards(&mut |_: Slot, _: u32| {}), 1);

    let s = dev.alloc(&mut cpu, Order::ZERO).unwrap();
    for _ in 0..70 {
        dev.duplicate(s, Order::ZERO).unwrap(); // crosses into continuation
    }
    assert_eq!(
        dev.slot_state(s),
        Ok(SlotState::InUse {
            map_count: 70,
            cached: true
        })
    );
    dev.validate().unwrap();
    for _ in 0..70 {
        dev.put_map(s, Order::ZERO).unwrap();
    }
    dev.free(s, Order::ZERO).unwrap();

    std::thread::scope(|sc| {
        for _ in 0..2 {
            sc.spawn(|| {
                let mut cpu = SwapCpu::new();
                for _ in 0..20 {
                    if let Ok(s) = dev.alloc(&mut cpu, Order::ZERO) {
                        dev.free(s, Order::ZERO).unwrap();
                    }
                }
            });
        }
    });
    assert_eq!(dev.inuse_slots(), 0);
    dev.validate().unwrap();
}
