//! Loom model of the per-CPU cluster protocol: two CPUs, each with its own
//! current cluster, allocate from one small device at once (a whole-cluster
//! THP entry on one, base slots on the other, so both reach for free and
//! non-full clusters through the list lock and `try_lock` on cluster
//! locks), then free. Every interleaving loom explores within its bounds
//! hands each slot to one owner and ends with the device all free and
//! valid. Run with `cargo xtask loom`.
#![cfg(loom)]

use std::mem::MaybeUninit;
use std::sync::Arc;

use loom::thread;
use pageframe_swap::{Order, Slot, SwapConfig, SwapCpu, SwapDevice};

/// Three clusters (the first holds the reserved header slot): one per CPU
/// and one they may race for.
fn device() -> SwapDevice<'static> {
    let cfg = SwapConfig::new(3 * 512);
    let meta =
        Box::leak(vec![MaybeUninit::uninit(); SwapDevice::metadata_bytes(&cfg)].into_boxed_slice());
    SwapDevice::new(cfg, meta, None).expect("valid config")
}

/// The slots `(start, count)` of an entry.
fn span(s: Slot, order: Order) -> (u32, u32) {
    (s.get(), order.pages() as u32)
}

#[test]
fn two_cpus_allocating_never_share_a_slot() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    b.check(|| {
        RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dev = Arc::new(device());
        let huge = dev.huge_order();
        // CPU 1: a whole-cluster entry and a base slot, then frees the base
        // slot while CPU 0 may still be allocating.
        let t = {
            let dev = dev.clone();
            thread::spawn(move || {
                let mut cpu = SwapCpu::new();
                let h = dev.alloc(&mut cpu, huge).ok().map(|s| span(s, huge));
                let b = dev.alloc(&mut cpu, Order::ZERO).expect("a base slot");
                dev.free(b, Order::ZERO).unwrap();
                h.into_iter()
                    .chain([span(b, Order::ZERO)])
                    .collect::<Vec<_>>()
            })
        };
        // CPU 0: two base slots.
        let mut cpu = SwapCpu::new();
        let a = dev.alloc(&mut cpu, Order::ZERO).expect("a base slot");
        let b = dev.alloc(&mut cpu, Order::ZERO).expect("another base slot");
        let theirs = t.join().unwrap();
        // CPU 1's freed base slot may have been given to CPU 0 meanwhile, so
        // check overlaps among the entries held at the same time.
        let freed = *theirs.last().unwrap();
        let mut spans = vec![span(a, Order::ZERO), span(b, Order::ZERO)];
        spans.extend(theirs.iter().copied().filter(|&s| s != freed));
        spans.sort_unstable();
        for w in spans.windows(2) {
            assert!(w[0].0 + w[0].1 <= w[1].0, "overlapping entries {spans:?}");
        }
        // With three clusters and base slots in at most two, a free cluster
        // is always left for the huge entry.
        assert_eq!(spans.len(), 3, "the huge entry failed: {spans:?}");
        for &(s, n) in &spans {
            let order = if n == 1 { Order::ZERO } else { huge };
            dev.free(Slot::new(s), order).unwrap();
        }
        let mut dev = Arc::try_unwrap(dev).ok().expect("the other CPU is done");
        dev.validate().unwrap();
        assert_eq!(dev.inuse_slots(), 0, "every slot back");
        // Cluster 0 holds the reserved header slot; the others are free.
        assert_eq!(
            dev.stats().free_clusters,
            2,
            "every other cluster free again"
        );
    });
    println!(
        "interleavings: {}",
        RUNS.load(std::sync::atomic::Ordering::Relaxed)
    );
}
