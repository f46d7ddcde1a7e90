//! Fuzz the per-CPU page cache: bytes decode into a sizing, slot memory and
//! a sequence of operations on two CPUs' caches over a reference zone
//! (allocs and frees of cached and uncached orders, remote drain requests,
//! ownership hand-overs, decay, pressure flags, resizes, bad values). After
//! every step each cache must validate, `high` must stay in bounds and
//! every frame must be in exactly one place.
#![no_main]

use std::collections::BTreeSet;

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use pageframe_models::pcp::RefZone;
use pageframe_pcp::{
    AllocMiss, CpuId, LocalPcp, MigrateType, Order, Pfn, PcpConfig, PcpError, PcpSet, PcpSizing,
    PcpSlot, PerCpuPages, Slot, ZoneFlags,
};

const INITIAL: [(u8, u64, u64); 5] = [
    (0, 0, 300),
    (1, 1_000, 40),
    (2, 2_000, 20),
    (3, 3_000, 10),
    (9, 1 << 20, 3),
];

fn total_pages() -> u64 {
    INITIAL.iter().map(|&(o, _, n)| n << o).sum()
}

fn check(zone: &RefZone, cpus: &mut [Option<LocalPcp<'_, '_>>], held: &[(Pfn, Order)]) {
    let mut cached = 0u64;
    let mut seen = BTreeSet::new();
    for c in cpus.iter_mut().flatten() {
        c.inspect(|p| {
            p.validate().expect("validate");
            let s = p.sizing();
            assert!(p.high() >= s.high_min() && p.high() <= s.high_max());
            cached += p.count() as u64;
            let thp = p.config().thp_order().unwrap();
            p.for_each_block(|li, f| {
                assert!(seen.insert((li.order(thp).get(), f.get())), "duplicate in cache")
            });
        });
    }
    for &(f, o) in held {
        assert!(seen.insert((o.get(), f.get())), "held frame also cached");
    }
    for &(o, _, _) in &INITIAL {
        for f in zone.blocks(Order::new_truncated(o)) {
            assert!(seen.insert((o, f)), "frame both free in zone and elsewhere");
        }
    }
    let held_pages: u64 = held.iter().map(|&(_, o)| o.pages() as u64).sum();
    // Caches that are not owned right now hold pages too: count them via the
    // frame set instead of `cached`.
    let in_set: u64 = seen.iter().map(|&(o, _)| 1u64 << o).sum();
    assert_eq!(in_set, total_pages(), "pages lost or invented");
    let _ = (cached, held_pages);
}

fn run(data: &[u8]) -> Result<()> {
    let mut u = Unstructured::new(data);
    let batch = u.int_in_range(0..=20u32)?;
    let lo = u.int_in_range(0..=200u32)?;
    let hi = u.int_in_range(0..=600u32)?;
    let sizing = match PcpSizing::new(batch, lo, hi) {
        Ok(s) => s,
        Err(e) => {
            assert_eq!(e, PcpError::InvalidSizing);
            PcpSizing::BOOT
        }
    };
    let nslots = u.int_in_range(1..=300usize)?;
    // Linux's lists, or order-0 lists that keep to a home (spec 04 §5.6)
    // of 2^0 .. 2^10 frames.
    let config = match u.int_in_range(0..=13u8)? {
        h @ 0..=10 => PcpConfig::X86_64
            .with_home(Order::new_truncated(h))
            .expect("a home of at most 2^10 frames"),
        _ => PcpConfig::X86_64,
    };
    let zone = RefZone::new();
    for (o, first, n) in INITIAL {
        zone.add_blocks(Order::new_truncated(o), first, n);
    }
    let mut mems: Vec<Vec<Slot>> = (0..2).map(|_| vec![Slot::EMPTY; nslots]).collect();
    let slots: Vec<PcpSlot<'_>> = mems
        .iter_mut()
        .map(|m| PcpSlot::new(PerCpuPages::new(m, sizing, config).unwrap()))
        .collect();
    let set = PcpSet::new(&slots);
    let mut cpus: Vec<Option<LocalPcp<'_, '_>>> =
        vec![set.claim(CpuId(0)).ok(), set.claim(CpuId(1)).ok()];
    let mut held: Vec<(Pfn, Order)> = Vec::new();
    while !u.is_empty() {
        let cpu = u.int_in_range(0..=1usize)?;
        match u.int_in_range(0..=13u8)? {
            0..=4 => {
                let o = Order::new_truncated(*u.choose(&[0u8, 1, 2, 3, 9, 4, 10])?);
                let raw = u.int_in_range(0..=5u8)?;
                let mt = MigrateType::from_value(raw).expect("0..=5 are types");
                if let Some(c) = cpus[cpu].as_mut() {
                    match c.alloc(&zone, o, mt) {
                        Ok(f) => held.push((f, o)),
                        Err(AllocMiss::NotCached) => {
                            assert!((o.get() > 3 && o.get() != 9) || !mt.has_pcp_lists())
                        }
                        Err(AllocMiss::ZoneEmpty) => {}
                        Err(AllocMiss::Busy) => panic!("alloc waits: it never answers Busy"),
                    }
                }
            }
            5..=8 => {
                if !held.is_empty() {
                    let i = u.int_in_range(0..=held.len() - 1)?;
                    let block_type = MigrateType::from_value(u.int_in_range(0..=5u8)?)
                        .expect("0..=5 are types");
                    if let Some(c) = cpus[cpu].as_mut() {
                        let (f, o) = held.swap_remove(i);
                        match pageframe_pcp::pcp_list_type(block_type) {
                            Some(mt) => match c.free(&zone, f, o, mt) {
                                Ok(_) => {}
                                Err(PcpError::NotCached | PcpError::NoRoom) => zone.put(f, o),
                                Err(e) => panic!("free: {e}"),
                            },
                            // ISOLATE and unknown types bypass the PCP.
                            None => zone.put(f, o),
                        }
                    }
                }
            }
            9 => {
                if let Some(c) = cpus[cpu].as_mut() {
                    c.decay(&zone);
                }
            }
            10 => {
                // Remote drain of the other CPU, or a hand-over.
                let other = 1 - cpu;
                let t = set.request_drain(CpuId(other as u32)).unwrap();
                if u.arbitrary()? {
                    cpus[other] = None; // owner leaves without honouring
                    set.drain_cpu(&zone, CpuId(other as u32), cpus[cpu].as_mut(), |_| {})
                        .unwrap();
                    assert!(set.is_drained(t));
                    cpus[other] = set.claim(CpuId(other as u32)).ok();
                } else if let Some(c) = cpus[other].as_mut() {
                    c.poll(&zone);
                    assert!(set.is_drained(t));
                    assert_eq!(c.count(), 0);
                }
            }
            11 => {
                // drain_all from one CPU; the "IPI" (kick) makes the other
                // owner poll, as a kernel would.
                let (a, b) = cpus.split_at_mut(1);
                let (local, other) = if cpu == 0 {
                    (&mut a[0], &mut b[0])
                } else {
                    (&mut b[0], &mut a[0])
                };
                set.drain_all(&zone, local.as_mut(), |_| {
                    if let Some(o) = other.as_mut() {
                        o.poll(&zone);
                    }
                });
                for c in cpus.iter_mut().flatten() {
                    assert_eq!(c.count(), 0);
                }
            }
            12 => zone.set_flags(ZoneFlags::from_bits_truncate(u.int_in_range(0..=3u8)?)),
            _ => {
                let b = u.int_in_range(1..=20u32)?;
                let lo = u.int_in_range(0..=200u32)?;
                let span = u.int_in_range(0..=400u32)?;
                set.update_sizing(PcpSizing::new(b, lo, lo + span).unwrap());
            }
        }
        check(&zone, &mut cpus, &held);
    }
    cpus.clear();
    set.drain_all(&zone, None, |_| {});
    for (f, o) in held {
        zone.put(f, o);
    }
    assert_eq!(zone.free_pages(), total_pages());
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(data);
});
