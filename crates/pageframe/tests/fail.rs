//! Fault injection (`fail_page_alloc`): which requests fail, how many,
//! and that the same seed fails the same ones.

mod common;

use common::{Words, leak, machine_with, o, r};
use pageframe::debug::fail::FailConfig;
use pageframe::{AllocError, CpuId, Gfp, Machine, MachineConfig, NodeId, Order, ZoneKind};

/// One Normal zone of 64 MiB at 4 GiB, two CPUs with caches.
fn machine() -> &'static Machine<'static> {
    let m = machine_with(MachineConfig::SINGLE_NODE);
    let span = r(1 << 20, (1 << 20) + (1 << 14));
    m.add_zone(
        NodeId::ZERO,
        ZoneKind::Normal,
        span,
        leak(m.zone_metadata_bytes(span)),
    )
    .unwrap();
    m.add_free_range(span).unwrap();
    let mem = leak(m.pcp_bytes(2).unwrap());
    m.enable_pcp(2, mem).unwrap();
    m
}

/// Which of `n` order-0 requests succeed; every block is given back.
fn pattern(m: &Machine<'static>, n: usize) -> Vec<bool> {
    let mut held = Vec::new();
    let out = (0..n)
        .map(|_| match m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO) {
            Ok(b) => {
                held.push(b);
                true
            }
            Err(e) => {
                assert_eq!(e, AllocError::OutOfMemory);
                false
            }
        })
        .collect();
    for b in held {
        m.free(b).unwrap();
    }
    out
}

#[test]
fn probability_fails_about_that_share_and_the_seed_repeats_it() {
    let m = machine();
    let half = FailConfig {
        probability_ppm: 250_000,
        seed: 42,
        ..FailConfig::ALWAYS
    };
    m.inspect().fail_page_alloc().set(half);
    let a = pattern(m, 4000);
    let failed = a.iter().filter(|&&ok| !ok).count();
    assert!((800..1200).contains(&failed), "{failed} of 4000 at 25%");
    assert_eq!(m.inspect().fail_page_alloc().injected(), failed as u64);
    // The same seed, the same failures; another seed, others.
    m.inspect().fail_page_alloc().set(half);
    assert_eq!(pattern(m, 4000), a);
    m.inspect()
        .fail_page_alloc()
        .set(FailConfig { seed: 43, ..half });
    assert_ne!(pattern(m, 4000), a);
    m.inspect().fail_page_alloc().disable();
    assert!(pattern(m, 1000).iter().all(|&ok| ok));
    assert_eq!(
        m.inspect().free_pages(),
        m.inspect().managed_pages(),
        "no frame lost"
    );
}

#[test]
fn interval_and_times_bound_the_failures() {
    let m = machine();
    m.inspect().fail_page_alloc().set(FailConfig {
        interval: 4,
        times: Some(3),
        ..FailConfig::ALWAYS
    });
    let p = pattern(m, 20);
    let failed: Vec<usize> = (0..20).filter(|&i| !p[i]).collect();
    assert_eq!(failed, [3, 7, 11], "every 4th, three times");
    assert!(m.inspect().fail_page_alloc().enabled());
}

#[test]
fn small_orders_and_requests_that_must_not_fail_are_spared() {
    let m = machine();
    m.inspect().fail_page_alloc().set(FailConfig {
        min_order: o(2),
        ..FailConfig::ALWAYS
    });
    for k in 0..2 {
        let b = m.alloc(NodeId::ZERO, Gfp::KERNEL, o(k)).unwrap();
        m.free(b).unwrap();
    }
    assert!(m.alloc(NodeId::ZERO, Gfp::KERNEL, o(2)).is_err());
    assert!(m.alloc(NodeId::ZERO, Gfp::KERNEL, o(9)).is_err());
    for spared in [Gfp::NOFAIL, Gfp::MEMALLOC] {
        let b = m.alloc(NodeId::ZERO, Gfp::KERNEL | spared, o(3)).unwrap();
        m.free(b).unwrap();
    }
    // ignore-gfp-wait: requests that may reclaim are spared, atomic ones
    // are not.
    m.inspect().fail_page_alloc().set(FailConfig {
        ignore_reclaim: true,
        ..FailConfig::ALWAYS
    });
    let b = m.alloc(NodeId::ZERO, Gfp::KERNEL, o(0)).unwrap();
    m.free(b).unwrap();
    assert!(m.alloc(NodeId::ZERO, Gfp::ATOMIC, o(0)).is_err());
    assert_eq!(m.inspect().fail_page_alloc().injected(), 3);
}

#[test]
fn every_allocation_entry_point_is_covered() {
    let m = machine();
    let mut c = m.cpu(CpuId(0), NodeId::ZERO).unwrap();
    // Warm the cache: a hit must fail too.
    let b = c.alloc(Gfp::KERNEL, Order::ZERO).unwrap();
    c.free(b).unwrap();
    m.inspect().fail_page_alloc().set(FailConfig::ALWAYS);
    assert_eq!(
        c.alloc(Gfp::KERNEL, Order::ZERO).unwrap_err(),
        AllocError::OutOfMemory
    );
    assert!(
        m.alloc_on(CpuId(1), NodeId::ZERO, Gfp::KERNEL, Order::ZERO)
            .is_err()
    );
    let mut w = Words::default();
    assert!(
        m.alloc_slow(NodeId::ZERO, Gfp::KERNEL, o(3), &mut w)
            .is_err()
    );
    assert!(m.alloc_thp(NodeId::ZERO, true, &mut w).is_err());
    assert_eq!(m.inspect().fail_page_alloc().injected(), 4);
    m.inspect().fail_page_alloc().disable();
    let b = c.alloc(Gfp::KERNEL, Order::ZERO).unwrap();
    c.free(b).unwrap();
    drop(c);
    m.validate().unwrap();
}
