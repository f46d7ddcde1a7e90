//! vmstat counters and the zoneinfo report: counted exactly, per CPU and
//! summed right at each scope, and agreeing with the caches' own counters.

mod common;

use std::collections::HashMap;

use common::{GIB, Words, leak, n, numa, o, one_zone, r};
use pageframe::debug::fail::FailConfig;
use pageframe::{CpuId, Gfp, NodeId, Order, ZoneKind};
use rand::{Rng, SeedableRng, rngs::StdRng};

#[test]
fn allocations_and_frees_are_counted_by_order_on_every_path() {
    let m = one_zone(1 << 16);
    let mem = leak(m.pcp_bytes(2).unwrap());
    m.enable_pcp(2, mem).unwrap();
    let m = &*m;
    let mut c = m.cpu(CpuId(0), NodeId::ZERO).unwrap();
    let mut rng = StdRng::seed_from_u64(7);
    let mut made: HashMap<u8, u64> = HashMap::new();
    let mut held = Vec::new();
    let mut freed_pages = 0;
    for i in 0..5000 {
        let k = [0u8, 0, 0, 1, 2, 3, 5, 9][rng.gen_range(0..8)];
        let b = match i % 3 {
            0 => m.alloc(NodeId::ZERO, Gfp::KERNEL, o(k)),
            1 => c.alloc(Gfp::HIGHUSER_MOVABLE, o(k)),
            _ => m.alloc_on(CpuId(1), NodeId::ZERO, Gfp::KERNEL, o(k)),
        };
        if let Ok(b) = b {
            *made.entry(k).or_default() += 1;
            held.push(b);
        }
        if held.len() > 200 {
            let b = held.swap_remove(rng.gen_range(0..held.len()));
            freed_pages += b.order().pages();
            match i % 2 {
                0 => m.free(b).unwrap(),
                _ => c.free(b).unwrap(),
            }
        }
    }
    let v = m.inspect().vmstat();
    for k in 0..=10 {
        assert_eq!(
            v.pgalloc(ZoneKind::Normal, o(k)),
            made.get(&k).copied().unwrap_or(0),
            "order {k}"
        );
    }
    assert_eq!(v.pgalloc_pages(ZoneKind::Dma32), 0);
    assert_eq!(v.pgfree, freed_pages);
    assert_eq!(v.alloc_fail, 0);
    assert_eq!(v.nr_free_pages, m.inspect().free_pages());
    assert_eq!(v.nr_managed_pages, m.inspect().managed_pages());
    for b in held {
        m.free(b).unwrap();
    }
    drop(c);
}

#[test]
fn per_cpu_counters_agree_with_the_caches_own() {
    let m = one_zone(1 << 16);
    let mem = leak(m.pcp_bytes(2).unwrap());
    m.enable_pcp(2, mem).unwrap();
    let m = &*m;
    // Two CPUs at once, each through its handle.
    let stats: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|cpu| {
                s.spawn(move || {
                    let mut c = m.cpu(CpuId(cpu), NodeId::ZERO).unwrap();
                    let mut rng = StdRng::seed_from_u64(cpu as u64);
                    let mut held = Vec::new();
                    for _ in 0..20_000 {
                        if held.len() < 1500 && rng.gen_bool(0.55) {
                            held.push(c.alloc(Gfp::HIGHUSER_MOVABLE, Order::ZERO).unwrap());
                        } else if let Some(b) = held.pop() {
                            c.free(b).unwrap();
                        }
                    }
                    for b in held {
                        c.free(b).unwrap();
                    }
                    c.drain();
                    c.cache_info(NodeId::ZERO, ZoneKind::Normal).unwrap().stats
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let v = m.inspect().vmstat();
    let sum = |f: fn(&pageframe::pcp::PcpStats) -> u64| stats.iter().map(f).sum::<u64>();
    assert_eq!(v.pcp_hit, sum(|s| s.local_hits));
    assert_eq!(v.pcp_refill, sum(|s| s.refills));
    assert_eq!(v.pcp_refill_blocks, sum(|s| s.refilled_blocks));
    assert_eq!(v.pcp_spill, sum(|s| s.spills));
    assert_eq!(v.pcp_spill_pages, sum(|s| s.spilled_pages));
    assert_eq!(v.pcp_free, sum(|s| s.frees));
    assert_eq!(v.pgalloc(ZoneKind::Normal, Order::ZERO), sum(|s| s.allocs));
    assert_eq!(v.pgfree, v.pgalloc_pages(ZoneKind::Normal));
    assert_eq!(m.inspect().free_pages(), m.inspect().managed_pages());
}

#[test]
fn scopes_add_up_node_by_node() {
    let m: &_ = numa(2, 16);
    let a = m.alloc(n(1), Gfp::KERNEL | Gfp::THISNODE, o(2)).unwrap();
    let b = m.alloc(n(0), Gfp::KERNEL | Gfp::THISNODE, o(0)).unwrap();
    let (v0, v1, all) = (
        m.inspect().node_vmstat(n(0)),
        m.inspect().node_vmstat(n(1)),
        m.inspect().vmstat(),
    );
    assert_eq!(v0.pgalloc_pages(ZoneKind::Normal), 1);
    assert_eq!(v1.pgalloc_pages(ZoneKind::Normal), 4);
    assert_eq!(all.pgalloc_pages(ZoneKind::Normal), 5);
    let z1 = m
        .inspect()
        .node(n(1))
        .unwrap()
        .zone(ZoneKind::Normal)
        .unwrap();
    assert_eq!(z1.vmstat().pgalloc(ZoneKind::Normal, o(2)), 1);
    assert_eq!(all.nr_free_pages, v0.nr_free_pages + v1.nr_free_pages);
    m.free(a).unwrap();
    m.free(b).unwrap();
    assert_eq!(m.inspect().vmstat().pgfree, 5);
}

#[test]
fn failures_ranges_and_compaction_are_counted() {
    let m = one_zone(1 << 14);
    let id = m
        .add_cma_area(r(4 * GIB + (1 << 13), 4 * GIB + (1 << 14)))
        .unwrap();
    let m = &*m;
    m.inspect().fail_page_alloc().set(FailConfig {
        times: Some(3),
        ..FailConfig::ALWAYS
    });
    for _ in 0..5 {
        if let Ok(b) = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO) {
            m.free(b).unwrap();
        }
    }
    assert!(m.alloc(NodeId::ZERO, Gfp::KERNEL, o(15)).is_err());
    let mut w = Words::default();
    let seg = m
        .alloc_contig(NodeId::ZERO, Gfp::KERNEL, 1024, 1, &mut w)
        .unwrap();
    assert!(
        m.alloc_contig(NodeId::ZERO, Gfp::KERNEL, 1 << 20, 1, &mut w)
            .is_err()
    );
    let buf = m.cma_alloc(id, 512, 1, &mut w).unwrap();
    assert!(m.cma_alloc(id, 1 << 20, 1, &mut w).is_err());
    let v = m.inspect().vmstat();
    assert_eq!(v.alloc_fail, 4, "three injected, one impossible order");
    assert_eq!((v.contig_alloc_success, v.contig_alloc_fail), (1, 1));
    assert_eq!((v.cma_alloc_success, v.cma_alloc_fail), (1, 1));
    let before = m.inspect().vmstat().pgfree;
    m.free_segment(seg).unwrap();
    m.cma_release(buf).unwrap();
    assert_eq!(
        m.inspect().vmstat().pgfree,
        before + 1024 + 512,
        "ranges count as frees"
    );
    // Compaction: a fragmented zone and an order-9 request that stalls.
    let kept = common::fragment(m, 0, &mut w);
    assert!(!kept.is_empty());
    let got = m.alloc_slow(NodeId::ZERO, Gfp::KERNEL | Gfp::MOVABLE, o(9), &mut w);
    let v = m.inspect().vmstat();
    assert!(v.compact_stall >= 1, "{v}");
    assert_eq!(v.compact_stall, m.inspect().total_stats().compact.stall);
    assert_eq!(
        v.pgmigrate_success,
        m.inspect().total_stats().compact.migrate_success
    );
    assert!(v.pgmigrate_success > 0);
    assert_eq!(v.allocstall, m.inspect().total_stats().stalls);
    if let Ok(b) = got {
        m.free(b).unwrap();
    }
    w.free_all(m);
}

#[test]
fn zoneinfo_reports_each_zone_and_the_caches_it_can_read() {
    let m = common::two_zones(1 << 14, 1 << 15);
    let mem = leak(m.pcp_bytes(2).unwrap());
    m.enable_pcp(2, mem).unwrap();
    let m = &*m;
    let mut c = m.cpu(CpuId(1), NodeId::ZERO).unwrap();
    let b = c.alloc(Gfp::KERNEL, Order::ZERO).unwrap();
    // A huge page through the zone path waits in the pageblock pool.
    let h = m
        .alloc(NodeId::ZERO, Gfp::HIGHUSER_MOVABLE, Order::new(9).unwrap())
        .unwrap();
    m.free(h).unwrap();
    let text = m.inspect().zoneinfo().to_string();
    let normal = m
        .inspect()
        .node(NodeId::ZERO)
        .unwrap()
        .zone(ZoneKind::Normal)
        .unwrap();
    let w = normal.watermarks();
    let section = &text[text.find("zone   Normal").unwrap()..];
    for line in [
        format!("  pages free     {}\n", normal.free_pages()),
        format!("        min      {}\n", w.min),
        format!("        low      {}\n", w.low),
        format!("        high     {}\n", w.high),
        format!("        spanned  {}\n", 4 * GIB),
        format!("        present  {}\n", 1 << 15),
        format!("        managed  {}\n", 1 << 15),
        "        pooled   512 (pageblock pool, slots 1)\n".to_string(),
    ] {
        assert!(section.contains(&line), "{line:?} in\n{section}");
    }
    assert!(text.contains("zone    DMA32\n"));
    // CPU 0's cache is free to read (empty); CPU 1's is held.
    let pagesets = &section[section.find("  pagesets").unwrap()..];
    assert!(
        pagesets.starts_with("  pagesets\n    cpu: 0\n              count: 0\n"),
        "{pagesets}"
    );
    assert!(pagesets.contains("    cpu: 1\n              in use\n"));
    c.free(b).unwrap();
    let count = c.cache_info(NodeId::ZERO, ZoneKind::Normal).unwrap().count;
    drop(c);
    let text = m.inspect().zoneinfo().to_string();
    let section = &text[text.find("zone   Normal").unwrap()..];
    assert!(section.contains(&format!("    cpu: 1\n              count: {count}\n")));
}

#[test]
fn free_blocks_are_listed_once_each_and_add_up() {
    let m = common::two_zones(1 << 13, 1 << 14);
    let m = &*m;
    let mut held = Vec::new();
    let mut rng = StdRng::seed_from_u64(3);
    for _ in 0..2000 {
        if let Ok(b) = m.alloc(NodeId::ZERO, Gfp::KERNEL, o(rng.gen_range(0..4))) {
            held.push(b);
        }
    }
    for i in (0..held.len()).rev().step_by(3) {
        m.free(held.swap_remove(i)).unwrap();
    }
    m.drain_stripes();
    let mut seen: Vec<(u64, u64)> = Vec::new();
    m.inspect().for_each_free_block(|p, order| {
        assert!(p.is_aligned(order), "{p:?} of order {order:?}");
        seen.push((p.get(), p.get() + order.pages()));
    });
    seen.sort_unstable();
    assert!(seen.windows(2).all(|w| w[0].1 <= w[1].0), "no overlap");
    let total: u64 = seen.iter().map(|(a, b)| b - a).sum();
    assert_eq!(total, m.inspect().free_pages());
    // None of them is held.
    for b in &held {
        let p = b.pfn().get();
        assert!(!seen.iter().any(|&(a, e)| a <= p && p < e));
    }
    for b in held {
        m.free(b).unwrap();
    }
}
