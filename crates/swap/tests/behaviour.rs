//! Behaviour of the allocator against spec 05, one rule per test.

mod common;

use common::{device, dump};
use pageframe_swap::{
    AllocError, ClusterFlag, ClusterIndex, DeviceFlags, FallbackReason, MAP_MAX, MthpSearch, Order,
    Slot, SlotState, SwapConfig, SwapCpu, SwapError, SwapinDecision, SwapinPolicy, VmaFlags,
};

fn o(k: u8) -> Order {
    Order::new(k).unwrap()
}

#[test]
fn header_is_bad_and_its_cluster_starts_nonfull() {
    let dev = device(SwapConfig::new(4 * 512), 0);
    assert_eq!(dev.slot_state(Slot::HEADER), Ok(SlotState::Bad));
    let c0 = dev.cluster(ClusterIndex::new(0)).unwrap();
    assert_eq!((c0.flag, c0.count), (ClusterFlag::Nonfull, 1));
    assert_eq!(
        dev.cluster(ClusterIndex::new(1)).unwrap().flag,
        ClusterFlag::Free
    );
    assert_eq!(dev.usable_slots(), 4 * 512 - 1);
    assert_eq!(dev.inuse_slots(), 0);
}

#[test]
fn partial_last_cluster_is_padded_with_bad_slots() {
    let mut dev = device(SwapConfig::new(512 + 100), 0);
    assert_eq!(dev.nr_clusters(), 2);
    let c1 = dev.cluster(ClusterIndex::new(1)).unwrap();
    assert_eq!((c1.flag, c1.count), (ClusterFlag::Nonfull, 412));
    assert_eq!(dev.slot_state(Slot::new(612)), Err(SwapError::OutOfRange));
    // No cluster is entirely free: a THP cannot go out.
    let mut cpu = SwapCpu::new();
    assert_eq!(
        dev.alloc_huge(&mut cpu),
        Err(AllocError::NoSpace(FallbackReason::NoFreeCluster))
    );
    // But every usable slot can be had one by one, and never a padding slot.
    let mut got = Vec::new();
    while let Ok(s) = dev.alloc(&mut cpu, Order::ZERO) {
        assert!(s.get() > 0 && s.get() < 612);
        got.push(s);
    }
    assert_eq!(got.len(), 611);
    assert_eq!(cpu.stats().reasons[FallbackReason::DeviceFull.index()], 1);
    dev.validate().unwrap();
}

#[test]
fn huge_allocation_takes_a_whole_free_aligned_cluster() {
    let mut dev = device(SwapConfig::new(4 * 512), 0);
    let mut cpu = SwapCpu::new();
    // Fragment cluster 1 with an order-0 slot: it must not be chosen.
    let small = dev.alloc(&mut cpu, Order::ZERO).unwrap();
    let c_small = small.get() / 512;
    let mut huge = Vec::new();
    while let Ok(h) = dev.alloc_huge(&mut cpu) {
        assert_eq!(h.get() % 512, 0);
        assert_ne!(h.get() / 512, c_small);
        let c = dev.cluster(ClusterIndex::new(h.get() / 512)).unwrap();
        assert_eq!(
            (c.flag, c.count, c.huge, c.order),
            (ClusterFlag::Full, 512, true, 9)
        );
        huge.push(h);
    }
    // Cluster 0 has the header and one cluster holds the base slot.
    let expected = if c_small == 0 { 3 } else { 2 };
    assert_eq!(huge.len(), expected);
    assert_eq!(cpu.stats().alloc[9], expected as u64);
    assert_eq!(cpu.stats().fallback[9], 1);
    assert_eq!(
        cpu.stats().reasons[FallbackReason::NoFreeCluster.index()],
        1
    );
    dev.validate().unwrap();
}

#[test]
fn freeing_a_huge_entry_frees_the_cluster_in_one_step() {
    let mut dev = device(SwapConfig::new(4 * 512), 0);
    let mut cpu = SwapCpu::new();
    let h = dev.alloc_huge(&mut cpu).unwrap();
    assert_eq!(dev.free(h, o(9)), Ok(()));
    let c = dev.cluster(ClusterIndex::new(h.get() / 512)).unwrap();
    assert_eq!(
        (c.flag, c.count, c.huge, c.order),
        (ClusterFlag::Free, 0, false, 0)
    );
    assert_eq!(dev.stats().huge_freed, 1);
    dev.validate().unwrap();
}

#[test]
fn huge_entry_is_one_unit_until_split() {
    let mut dev = device(SwapConfig::new(4 * 512), 0);
    let mut cpu = SwapCpu::new();
    let h = dev.alloc_huge(&mut cpu).unwrap();
    let inner = Slot::new(h.get() + 7);
    assert_eq!(dev.put_cache(inner, Order::ZERO), Err(SwapError::HugeEntry));
    assert_eq!(dev.duplicate(h, o(4)), Err(SwapError::HugeEntry));
    dev.split_huge(h).unwrap();
    assert_eq!(dev.split_huge(h), Err(SwapError::NotHuge));
    assert_eq!(dev.stats().splits, 1);
    // Now single slots go their own way; the cluster goes NONFULL[9].
    assert_eq!(dev.put_cache(inner, Order::ZERO), Ok(1));
    let c = dev.cluster(ClusterIndex::new(h.get() / 512)).unwrap();
    assert_eq!(
        (c.flag, c.count, c.order, c.huge),
        (ClusterFlag::Nonfull, 511, 9, false)
    );
    // Order 0 steals the hole (spec 05 §5.4 last line), but only after the
    // NONFULL[0] and FREE clusters are used up.
    let mut last = None;
    while let Ok(s) = dev.alloc(&mut cpu, Order::ZERO) {
        last = Some(s);
    }
    assert_eq!(last, Some(inner));
    assert_eq!(dev.inuse_slots(), dev.usable_slots());
    dev.validate().unwrap();
}

#[test]
fn mthp_entries_are_aligned_in_clusters_of_their_order() {
    let mut dev = device(SwapConfig::new(10 * 512), 0);
    let mut cpu = SwapCpu::new();
    for k in 1..9u8 {
        for _ in 0..3 {
            let s = dev.alloc(&mut cpu, o(k)).unwrap();
            assert!(s.is_aligned(o(k)), "order {k} at {s}");
            assert_eq!(
                dev.cluster(ClusterIndex::new(s.get() / 512)).unwrap().order,
                k
            );
            for i in 0..(1u32 << k) {
                assert_eq!(
                    dev.slot_state(Slot::new(s.get() + i)),
                    Ok(SlotState::InUse {
                        map_count: 0,
                        cached: true
                    })
                );
            }
        }
    }
    dev.validate().unwrap();
}

#[test]
fn per_cpu_cluster_serves_without_the_list_lock() {
    let dev = device(SwapConfig::new(16 * 512), 0);
    let mut cpu = SwapCpu::new();
    dev.alloc(&mut cpu, Order::ZERO).unwrap();
    let before = dev.stats().list_lock_acquisitions;
    for _ in 0..400 {
        dev.alloc(&mut cpu, Order::ZERO).unwrap();
    }
    // All 400 came from the cached cluster (cluster 0 has 511 usable slots)
    // except when it moved between lists: at most two list moves.
    assert_eq!(cpu.stats().fast, 400);
    assert!(dev.stats().list_lock_acquisitions - before <= 3);
}

#[test]
fn two_cpus_get_different_clusters() {
    let dev = device(SwapConfig::new(16 * 512), 0);
    let (mut a, mut b) = (SwapCpu::new(), SwapCpu::new());
    // Each CPU takes a free cluster of its own for order 4.
    let x = dev.alloc(&mut a, o(4)).unwrap();
    let y = dev.alloc(&mut b, o(4)).unwrap();
    // b found a's cluster on FRAG[4] and may share it (Linux does); but a's
    // next allocation continues right after its last one.
    let x2 = dev.alloc(&mut a, o(4)).unwrap();
    assert_ne!(x, y);
    assert_ne!(x2, y);
    assert_eq!(a.stats().fast, 1);
}

#[test]
fn mthp_falls_back_when_only_other_orders_have_room_unless_exhaustive() {
    for (search, expect_ok) in [(MthpSearch::Linux, false), (MthpSearch::Exhaustive, true)] {
        let dev = device(SwapConfig::new(2 * 512).with_mthp_search(search), 0);
        let mut cpu = SwapCpu::new();
        // Fill everything with order-0 slots, then free an aligned run of 16
        // inside an order-0 cluster.
        let mut all = Vec::new();
        while let Ok(s) = dev.alloc(&mut cpu, Order::ZERO) {
            all.push(s);
        }
        for s in 32..48 {
            dev.free(Slot::new(s), Order::ZERO).unwrap();
        }
        let r = dev.alloc(&mut cpu, o(4));
        if expect_ok {
            assert_eq!(r, Ok(Slot::new(32)));
        } else {
            assert_eq!(r, Err(AllocError::NoSpace(FallbackReason::NoAlignedRun)));
            assert_eq!(cpu.stats().fallback[4], 1);
        }
    }
}

#[test]
fn swap_files_take_base_slots_only() {
    let dev = device(SwapConfig::new(4 * 512).with_flags(DeviceFlags::empty()), 0);
    let mut cpu = SwapCpu::new();
    assert_eq!(
        dev.alloc(&mut cpu, o(4)),
        Err(AllocError::NoSpace(FallbackReason::NotBlockDevice))
    );
    assert_eq!(
        dev.alloc_huge(&mut cpu),
        Err(AllocError::NoSpace(FallbackReason::NotBlockDevice))
    );
    assert!(dev.alloc(&mut cpu, Order::ZERO).is_ok());
    assert_eq!(
        cpu.stats().reasons[FallbackReason::NotBlockDevice.index()],
        2
    );
}

#[test]
fn discarded_clusters_wait_for_the_discard() {
    let mut dev = device(
        SwapConfig::new(2 * 512).with_flags(DeviceFlags::BLOCK_DEVICE | DeviceFlags::PAGE_DISCARD),
        0,
    );
    let mut cpu = SwapCpu::new();
    let h = dev.alloc_huge(&mut cpu).unwrap();
    dev.free(h, o(9)).unwrap();
    let c = dev.cluster(ClusterIndex::new(1)).unwrap();
    assert_eq!(c.flag, ClusterFlag::Discard);
    // Not reusable before the discard ran (spec 05 §12.9).
    assert_eq!(
        dev.alloc_huge(&mut cpu),
        Err(AllocError::NoSpace(FallbackReason::DiscardPending))
    );
    assert_eq!(dev.pending_discards(), 1);
    let mut seen = Vec::new();
    let h2 = dev
        .alloc_or_discard(&mut cpu, o(9), &mut |first: Slot, nr: u32| {
            seen.push((first, nr))
        })
        .unwrap();
    assert_eq!(seen, vec![(Slot::new(512), 512)]);
    assert_eq!(h2, h);
    assert_eq!(dev.stats().discarded, 1);
    dev.validate().unwrap();
}

#[test]
fn counts_carry_into_continuation_and_borrow_back() {
    let mut dev = device(SwapConfig::new(2 * 512), 4);
    let mut cpu = SwapCpu::new();
    let s = dev.alloc(&mut cpu, Order::ZERO).unwrap();
    let n = 63 * 128 * 2 + 5; // crosses the low digit and the first continuation digit
    for i in 1..=n {
        dev.duplicate(s, Order::ZERO).unwrap();
        if i % 997 == 0 || i == MAP_MAX as u64 + 1 {
            assert_eq!(
                dev.slot_state(s),
                Ok(SlotState::InUse {
                    map_count: i,
                    cached: true
                })
            );
        }
    }
    assert_eq!(dev.stats().cont_pages_used, 2);
    dev.validate().unwrap();
    for i in (0..n).rev() {
        dev.put_map(s, Order::ZERO).unwrap();
        if i % 991 == 0 {
            assert_eq!(
                dev.slot_state(s),
                Ok(SlotState::InUse {
                    map_count: i,
                    cached: true
                })
            );
            dev.validate().unwrap();
        }
    }
    assert_eq!(
        dev.put_map(s, Order::ZERO),
        Err(SwapError::CountUnderflow(s))
    );
    assert_eq!(dev.put_cache(s, Order::ZERO), Ok(1));
    // The cluster emptied: its continuation pages went back to the pool.
    assert_eq!(dev.stats().cont_pages_used, 0);
    dev.validate().unwrap();
}

#[test]
fn count_overflow_without_continuation_storage_changes_nothing() {
    let mut dev = device(SwapConfig::new(2 * 512), 0);
    let mut cpu = SwapCpu::new();
    let s = dev.alloc(&mut cpu, o(2)).unwrap();
    // Bring one slot of the entry to the maximum the byte holds.
    dev.split_huge(s).unwrap_err();
    for _ in 0..MAP_MAX {
        dev.duplicate(Slot::new(s.get() + 2), Order::ZERO).unwrap();
    }
    let before = dump(&dev);
    assert_eq!(
        dev.duplicate(s, o(2)),
        Err(SwapError::CountOverflow(Slot::new(s.get() + 2)))
    );
    assert_eq!(dump(&dev), before);
    dev.validate().unwrap();
}

#[test]
fn swapin_policy_decides_whole_or_split() {
    let cases = [
        (SwapinPolicy::Always, VmaFlags::empty(), true),
        (SwapinPolicy::Always, VmaFlags::NOHUGEPAGE, false),
        (SwapinPolicy::Madvise, VmaFlags::empty(), false),
        (SwapinPolicy::Madvise, VmaFlags::HUGEPAGE, true),
        (
            SwapinPolicy::Madvise,
            VmaFlags::HUGEPAGE | VmaFlags::THP_DISABLED,
            false,
        ),
        (SwapinPolicy::Never, VmaFlags::HUGEPAGE, false),
    ];
    for (policy, vma, whole) in cases {
        assert_eq!(policy.allows(vma), whole);
        let dev = device(SwapConfig::new(2 * 512), 0);
        let mut cpu = SwapCpu::new();
        let h = dev.alloc_huge(&mut cpu).unwrap();
        let d = dev.swapin_huge(h, policy, vma).unwrap();
        assert_eq!(d == SwapinDecision::Whole, whole);
        assert_eq!(dev.is_huge(h), Ok(whole));
        let st = dev.stats();
        assert_eq!(
            (st.huge_swapin, st.huge_swapin_fallback),
            if whole { (1, 0) } else { (0, 1) }
        );
        if whole {
            dev.abort_huge_swapin(h).unwrap();
            let st = dev.stats();
            assert_eq!(
                (st.huge_swapin, st.huge_swapin_fallback, dev.is_huge(h)),
                (0, 1, Ok(false))
            );
        }
    }
}

#[test]
fn swap_cycle_of_a_huge_page_whole_out_and_in() {
    let mut dev = device(SwapConfig::new(4 * 512), 0);
    let mut cpu = SwapCpu::new();
    let k = dev.huge_order();
    let h = dev.alloc_huge(&mut cpu).unwrap();
    dev.duplicate(h, k).unwrap(); // PMD swap entry installed
    assert_eq!(dev.put_cache(h, k), Ok(0)); // folio written back and freed
    assert_eq!(
        dev.swapin_huge(h, SwapinPolicy::Always, VmaFlags::empty()),
        Ok(SwapinDecision::Whole)
    );
    dev.swapcache_prepare(h, k).unwrap();
    assert_eq!(dev.swapcache_prepare(h, k), Err(SwapError::CacheExists(h)));
    assert_eq!(dev.put_map(h, k), Ok(0)); // mapped as a PMD again
    assert_eq!(dev.put_cache(h, k), Ok(512));
    assert_eq!(dev.inuse_slots(), 0);
    dev.validate().unwrap();
}
