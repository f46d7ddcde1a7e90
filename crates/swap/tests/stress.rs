//! Multi-threaded stress: several CPUs share one device, each with its own
//! `SwapCpu`, allocating entries of mixed orders, referencing, splitting and
//! freeing them. A shared ownership bitmap proves no slot is handed out
//! twice; at the end everything is freed and the device must be back to
//! all-free with every invariant intact. Bounded in iterations.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};

use common::device;
use pageframe_swap::{
    ClusterFlag, ClusterIndex, MthpSearch, Order, Slot, SwapConfig, SwapCpu, SwapDevice,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const THREADS: usize = 4;
const STEPS: usize = if cfg!(miri) { 24 } else { 20_000 };

struct Owned {
    bits: Vec<AtomicU64>,
}

impl Owned {
    fn claim(&self, s: Slot, n: u32) {
        for i in s.get()..s.get() + n {
            let prev = self.bits[i as usize / 64].fetch_or(1 << (i % 64), Ordering::Relaxed);
            assert_eq!(prev & (1 << (i % 64)), 0, "slot {i} handed out twice");
        }
    }

    fn release(&self, s: Slot, n: u32) {
        for i in s.get()..s.get() + n {
            let prev = self.bits[i as usize / 64].fetch_and(!(1 << (i % 64)), Ordering::Relaxed);
            assert_ne!(prev & (1 << (i % 64)), 0, "slot {i} released twice");
        }
    }
}

fn worker(dev: &SwapDevice<'_>, owned: &Owned, seed: u64) -> u64 {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut cpu = SwapCpu::new();
    let huge = dev.huge_order();
    // (slot, order, map refs) of live entries held by this thread.
    let mut live: Vec<(Slot, Order, u32)> = Vec::new();
    for _ in 0..STEPS {
        match rng.gen_range(0..10) {
            0..=4 => {
                let k = match rng.gen_range(0..10) {
                    0 => huge,
                    1..=3 => Order::new(rng.gen_range(1..5)).unwrap(),
                    _ => Order::ZERO,
                };
                if let Ok(s) = dev.alloc(&mut cpu, k) {
                    owned.claim(s, k.pages() as u32);
                    // Swap-out: map the entry, drop the cache.
                    dev.duplicate(s, k).unwrap();
                    dev.put_cache(s, k).unwrap();
                    live.push((s, k, 1));
                }
            }
            5 if !live.is_empty() => {
                let i = rng.gen_range(0..live.len());
                dev.duplicate(live[i].0, live[i].1).unwrap();
                live[i].2 += 1;
            }
            6 if !live.is_empty() => {
                // Split a huge entry into base entries.
                let i = rng.gen_range(0..live.len());
                let (s, k, refs) = live[i];
                if k == huge {
                    dev.split_huge(s).unwrap();
                    live.swap_remove(i);
                    live.extend(
                        (0..(k.pages() as u32))
                            .map(|j| (Slot::new(s.get() + j), Order::ZERO, refs)),
                    );
                }
            }
            _ if !live.is_empty() => {
                // Swap-in / unmap: drop one reference; the last one frees.
                let i = rng.gen_range(0..live.len());
                let (s, k, refs) = live[i];
                if refs == 1 {
                    live.swap_remove(i);
                    owned.release(s, k.pages() as u32);
                    assert_eq!(dev.put_map(s, k).unwrap(), k.pages() as u32);
                } else {
                    dev.put_map(s, k).unwrap();
                    live[i].2 -= 1;
                }
            }
            _ => {}
        }
    }
    for (s, k, refs) in live {
        owned.release(s, k.pages() as u32);
        for _ in 0..refs {
            dev.put_map(s, k).unwrap();
        }
    }
    cpu.stats().alloc.iter().sum()
}

#[test]
fn threads_share_a_device_without_losing_or_doubling_slots() {
    // Under Miri one search: the threads' sharing is the same in both.
    let searches: &[MthpSearch] = if cfg!(miri) {
        &[MthpSearch::Linux]
    } else {
        &[MthpSearch::Linux, MthpSearch::Exhaustive]
    };
    for &search in searches {
        let clusters = if cfg!(miri) { 8 } else { 24 };
        let cfg = SwapConfig::new(clusters * 512).with_mthp_search(search);
        let mut dev = device(cfg, 64);
        let owned = Owned {
            bits: (0..cfg.slots.div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
        };
        let total: u64 = std::thread::scope(|sc| {
            let handles: Vec<_> = (0..THREADS)
                .map(|t| {
                    sc.spawn({
                        let (dev, owned) = (&dev, &owned);
                        move || worker(dev, owned, t as u64 + 1)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert!(
            total > (THREADS * STEPS / 8) as u64,
            "too few allocations: {total}"
        );
        assert_eq!(dev.inuse_slots(), 0);
        dev.validate().unwrap();
        for c in 1..dev.nr_clusters() {
            assert_eq!(
                dev.cluster(ClusterIndex::new(c)).unwrap().flag,
                ClusterFlag::Free
            );
        }
    }
}
