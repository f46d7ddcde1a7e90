//! Bad input gets a typed error and leaves every observable bit unchanged.

mod common;

use common::{device, dump};
use pageframe_swap::{
    AllocError, Order, Slot, SwapConfig, SwapCpu, SwapDevice, SwapError, SwapinPolicy, VmaFlags,
};

fn o(k: u8) -> Order {
    Order::new(k).unwrap()
}

/// Runs `op`, expects `err`, and checks the device did not change.
fn refused<T: std::fmt::Debug>(
    dev: &mut SwapDevice<'_>,
    err: SwapError,
    op: impl FnOnce(&SwapDevice<'_>) -> Result<T, SwapError>,
) {
    let before = dump(dev);
    let r = op(dev);
    assert_eq!(r.unwrap_err(), err);
    assert_eq!(
        dump(dev),
        before,
        "state changed by a refused operation ({err:?})"
    );
    dev.validate().unwrap();
}

#[test]
fn every_bad_input_is_refused_without_change() {
    let mut dev = device(SwapConfig::new(4 * 512 + 10), 0);
    let mut cpu = SwapCpu::new();
    let base = dev.alloc(&mut cpu, Order::ZERO).unwrap();
    let m = dev.alloc(&mut cpu, o(4)).unwrap();
    let h = dev.alloc_huge(&mut cpu).unwrap();
    dev.duplicate(base, Order::ZERO).unwrap();
    let free_slot = Slot::new(base.get() + 1);

    // Free of a free slot / double free.
    refused(&mut dev, SwapError::NotInUse(free_slot), |d| {
        d.free(free_slot, Order::ZERO)
    });
    refused(&mut dev, SwapError::NotInUse(free_slot), |d| {
        d.put_cache(free_slot, Order::ZERO)
    });
    refused(&mut dev, SwapError::NotInUse(free_slot), |d| {
        d.duplicate(free_slot, Order::ZERO)
    });
    refused(&mut dev, SwapError::NotInUse(free_slot), |d| {
        d.swapcache_prepare(free_slot, Order::ZERO)
    });
    // The header.
    refused(&mut dev, SwapError::BadSlot(Slot::HEADER), |d| {
        d.put_map(Slot::HEADER, Order::ZERO)
    });
    refused(&mut dev, SwapError::BadSlot(Slot::HEADER), |d| {
        d.duplicate(Slot::HEADER, o(1))
    });
    // Put below zero: only the cache holds the mTHP entry.
    refused(&mut dev, SwapError::CountUnderflow(m), |d| {
        d.put_map(m, o(4))
    });
    // A free that would drop a map reference.
    refused(&mut dev, SwapError::StillMapped(base), |d| {
        d.free(base, Order::ZERO)
    });
    // Claiming the cache twice.
    refused(&mut dev, SwapError::CacheExists(m), |d| {
        d.swapcache_prepare(m, o(4))
    });
    // Wrong order: misaligned, too large, past the end, a partial huge entry,
    // an entry larger than what was allocated (covers free slots).
    refused(&mut dev, SwapError::Misaligned, |d| {
        d.put_cache(Slot::new(m.get() + 1), o(4))
    });
    refused(&mut dev, SwapError::BadOrder, |d| d.put_cache(m, o(10)));
    refused(&mut dev, SwapError::OutOfRange, |d| {
        d.put_cache(Slot::new(4 * 512 + 10), Order::ZERO)
    });
    refused(&mut dev, SwapError::OutOfRange, |d| {
        d.put_cache(Slot::new(4 * 512), o(4))
    });
    refused(&mut dev, SwapError::HugeEntry, |d| d.put_cache(h, o(8)));
    refused(&mut dev, SwapError::HugeEntry, |d| {
        d.free(Slot::new(h.get() + 3), Order::ZERO)
    });
    refused(
        &mut dev,
        SwapError::NotInUse(Slot::new(m.get() + 16)),
        |d| d.put_cache(m, o(5)),
    );
    refused(&mut dev, SwapError::NotHuge, |d| {
        d.split_huge(Slot::new(m.get() & !511))
    });
    refused(&mut dev, SwapError::Misaligned, |d| {
        d.split_huge(Slot::new(h.get() + 16))
    });
    refused(&mut dev, SwapError::NotHuge, |d| {
        d.swapin_huge(
            Slot::new(m.get() & !511),
            SwapinPolicy::Always,
            VmaFlags::empty(),
        )
    });
    // Dropping a cache bit that is not there.
    dev.put_cache(base, Order::ZERO).unwrap();
    refused(&mut dev, SwapError::NoCache(base), |d| {
        d.put_cache(base, Order::ZERO)
    });
    refused(&mut dev, SwapError::NoCache(base), |d| {
        d.free(base, Order::ZERO)
    });

    // Allocation orders past the cluster order.
    assert_eq!(dev.alloc(&mut cpu, o(10)), Err(AllocError::BadOrder));
}

#[test]
fn init_errors_are_typed() {
    use pageframe_swap::InitError;
    use std::mem::MaybeUninit;
    let cfg = SwapConfig::new(1024);
    let mut small = vec![MaybeUninit::uninit(); SwapDevice::metadata_bytes(&cfg) - 1];
    assert!(matches!(
        SwapDevice::new(cfg, &mut small, None),
        Err(InitError::MetadataTooSmall { .. })
    ));
    let mut meta = vec![MaybeUninit::uninit(); 1 << 16];
    assert_eq!(
        SwapDevice::new(SwapConfig::new(1), &mut meta, None).err(),
        Some(InitError::TooFewSlots)
    );
    assert_eq!(
        SwapDevice::new(SwapConfig::new(1024).with_cluster_order(2), &mut meta, None).err(),
        Some(InitError::BadClusterOrder)
    );
    assert_eq!(
        SwapDevice::new(SwapConfig::new(u32::MAX), &mut meta, None).err(),
        Some(InitError::TooManySlots)
    );
}
