//! `free_bulk` must be indistinguishable from freeing one block at a time,
//! and `alloc_bulk` must hand out distinct frames and keep conservation.

use pageframe_models::pcp::RefZone;
use pageframe_pcp::{
    ListIndex, MigrateType, Order, PCP_LIST_TYPES, PcpConfig, PcpSizing, PerCpuPages, Pfn, Slot,
    ZoneFlags,
};
use proptest::prelude::*;

/// count, high, free_count, alloc_factor, flags, frees, blocks by list.
type Snapshot = (u32, u32, u32, u8, u8, u64, Vec<(usize, u64)>);

fn snapshot(c: &PerCpuPages<'_>) -> Snapshot {
    let mut blocks = Vec::new();
    c.for_each_block(|li, f| blocks.push((li.get(), f.get())));
    (
        c.count(),
        c.high(),
        c.free_count(),
        c.alloc_factor(),
        c.flags().bits(),
        c.stats().frees,
        blocks,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn free_bulk_equals_single_frees(
        slots in 14usize..400,
        batch in 1u32..16,
        lo in 0u32..64,
        span in 0u32..256,
        warm in 0usize..300,
        runs in proptest::collection::vec((1usize..200, 0u8..3, 0u8..4, any::<bool>()), 1..8),
    ) {
        let sizing = PcpSizing::new(batch, lo, lo + span).unwrap();
        let (za, zb) = (RefZone::with_blocks(Order::new_truncated(0), 0, 3000), RefZone::with_blocks(Order::new_truncated(0), 0, 3000));
        let (mut ma, mut mb) = (vec![Slot::EMPTY; slots], vec![Slot::EMPTY; slots]);
        let mut a = PerCpuPages::new(&mut ma, sizing, PcpConfig::X86_64).unwrap();
        let mut b = PerCpuPages::new(&mut mb, sizing, PcpConfig::X86_64).unwrap();
        let mut held = Vec::new();
        for _ in 0..warm {
            let fa = a.alloc(&za, Order::new_truncated(0), MigrateType::Movable);
            let fb = b.alloc(&zb, Order::new_truncated(0), MigrateType::Movable);
            prop_assert_eq!(fa, fb);
            if let Ok(f) = fa {
                held.push(f);
            }
        }
        for (n, mt, flags, realloc) in runs {
            za.set_flags(ZoneFlags::from_bits_truncate(flags));
            zb.set_flags(ZoneFlags::from_bits_truncate(flags));
            let n = n.min(held.len());
            let batch: Vec<Pfn> = held.drain(..n).collect();
            let mt = PCP_LIST_TYPES[(mt) as usize];
            for &f in &batch {
                a.free(&za, f, Order::new_truncated(0), mt).unwrap();
            }
            prop_assert_eq!(b.free_bulk(&zb, &batch, Order::new_truncated(0), mt), Ok(n));
            prop_assert_eq!(snapshot(&a), snapshot(&b));
            prop_assert_eq!(za.blocks(Order::new_truncated(0)), zb.blocks(Order::new_truncated(0)));
            b.validate().unwrap();
            if realloc {
                for _ in 0..n {
                    let fa = a.alloc(&za, Order::new_truncated(0), mt);
                    prop_assert_eq!(fa, b.alloc(&zb, Order::new_truncated(0), mt));
                    if let Ok(f) = fa {
                        held.push(f);
                    }
                }
            }
        }
    }

    #[test]
    fn alloc_bulk_conserves_frames(
        batch in 1u32..64,
        lo in 0u32..256,
        span in 0u32..2048,
        sizes in proptest::collection::vec(1usize..700, 1..10),
    ) {
        let zone = RefZone::with_blocks(Order::new_truncated(0), 0, 2000);
        let sizing = PcpSizing::new(batch, lo, lo + span).unwrap();
        let mut mem = vec![Slot::EMPTY; sizing.suggested_slots(PcpConfig::X86_64)];
        let mut c = PerCpuPages::new(&mut mem, sizing, PcpConfig::X86_64).unwrap();
        let mut held: Vec<u64> = Vec::new();
        for n in sizes {
            let mut out = vec![Pfn(u64::MAX); n];
            let got = c.alloc_bulk(&zone, Order::new_truncated(0), MigrateType::Unmovable, &mut out).unwrap();
            // Short only when the zone and this list (unmovable, list 0) are dry;
            // frames cached on the movable list do not serve this type.
            let list0 = ListIndex::new(0).unwrap();
            prop_assert!(got == n || zone.free_pages() == 0 && c.list_len(list0) == 0);
            held.extend(out[..got].iter().map(|f| f.get()));
            let mut all: Vec<u64> = held.clone();
            all.extend(zone.blocks(Order::new_truncated(0)));
            c.for_each_block(|_, f| all.push(f.get()));
            all.sort_unstable();
            prop_assert_eq!(all, (0..2000).collect::<Vec<_>>());
            c.validate().unwrap();
            if held.len() > 1000 {
                let back: Vec<Pfn> = held.drain(..500).map(Pfn).collect();
                prop_assert_eq!(c.free_bulk(&zone, &back, Order::new_truncated(0), MigrateType::Movable), Ok(500));
            }
        }
    }
}
