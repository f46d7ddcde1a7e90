//! Fragmentation maps: one character a pageblock, counts that add up to
//! the zone's.

mod common;

use common::*;
use pageframe::{
    Gfp, ZoneKind,
    zone::{MAP_WIDTH, MigrateType},
};

#[test]
fn each_pageblock_shows_its_type_and_fill() {
    let m = machine_with(pageframe::MachineConfig::SINGLE_NODE);
    // 8 pageblocks spanned, the last two never handed over (a hole).
    let span = r(4 * GIB, 4 * GIB + 8 * PB);
    zone(
        m,
        n(0),
        ZoneKind::Normal,
        span,
        r(4 * GIB, 4 * GIB + 6 * PB),
    );
    let z = m.inspect().zone_of(span.start).unwrap();
    assert_eq!(
        z.fragmentation_map().to_string(),
        format!("{:#010x} ......__\n", 4 * GIB),
        "all free, then the hole"
    );
    // A full movable pageblock, a partly used one, an unmovable one.
    let big = m.alloc(n(0), Gfp::HIGHUSER_MOVABLE, o(9)).unwrap();
    let small = m.alloc(n(0), Gfp::HIGHUSER_MOVABLE, o(3)).unwrap();
    let k = m.alloc(n(0), Gfp::KERNEL, o(0)).unwrap();
    let map = z.fragmentation_map().to_string();
    let line = map.split_whitespace().nth(1).unwrap();
    assert_eq!(line.len(), 8);
    let at = |p: pageframe::Pfn| line.as_bytes()[((p.get() - 4 * GIB) / PB) as usize] as char;
    assert_eq!(at(big.pfn()), 'M');
    assert_eq!(at(small.pfn()), 'm');
    assert_eq!(at(k.pfn()), 'u');
    assert_eq!(line.matches('.').count(), 3);
    assert!(line.ends_with("__"));
    let blocks: Vec<_> = z.pageblocks().collect();
    assert_eq!(blocks.len(), 8);
    assert_eq!(blocks.iter().map(|b| b.free).sum::<u64>(), z.free_pages());
    assert_eq!(
        blocks.iter().map(|b| b.managed).sum::<u64>(),
        z.managed_pages()
    );
    let kb = blocks.iter().find(|b| b.range.contains(k.pfn())).unwrap();
    assert_eq!(
        (kb.migratetype, kb.managed, kb.free),
        (Some(MigrateType::Unmovable), PB, PB - 1)
    );
    m.free(big).unwrap();
    m.free(small).unwrap();
    m.free(k).unwrap();
    assert!(!z.fragmentation_map().to_string().contains('M'));
}

#[test]
fn long_zones_wrap_and_unaligned_edges_count_only_their_frames() {
    let m = machine_with(pageframe::MachineConfig::SINGLE_NODE);
    // 100 pageblocks and a half, starting half-way into a pageblock.
    let span = r(4 * GIB + PB / 2, 4 * GIB + 101 * PB);
    zone(m, n(0), ZoneKind::Normal, span, span);
    let z = m.inspect().zone_of(span.start).unwrap();
    let map = z.fragmentation_map().to_string();
    let lines: Vec<_> = map.lines().collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0].split_whitespace().nth(1).unwrap().len(), MAP_WIDTH);
    assert_eq!(
        lines[1].split_whitespace().nth(1).unwrap().len(),
        101 - MAP_WIDTH
    );
    let blocks: Vec<_> = z.pageblocks().collect();
    assert_eq!(
        blocks[0].managed,
        PB / 2,
        "the first pageblock is half in the span"
    );
    assert_eq!(blocks.iter().map(|b| b.managed).sum::<u64>(), span.len());
    assert!(map.lines().all(|l| {
        l.split_whitespace()
            .nth(1)
            .unwrap()
            .chars()
            .all(|c| c == '.')
    }));
}

/// One level up: one character a 1 GiB region, counts that match it, and
/// the same figures in vmstat and zoneinfo.
#[test]
fn the_superpageblock_map_shows_tainted_clean_and_free_1gib_pages() {
    let m = machine_with(pageframe::MachineConfig::SINGLE_NODE);
    // Half a region (it can never be a 1 GiB page), then three whole ones.
    let span = r(4 * GIB + GIB / 2, 8 * GIB);
    zone(m, n(0), ZoneKind::Normal, span, span);
    let m = &*m;
    let z = m.inspect().zone_of(span.start).unwrap();
    let line = |z: &pageframe::zone::Zone<'_>| {
        let map = z.superpageblock_map().to_string();
        map.lines()
            .nth(1)
            .unwrap()
            .split_whitespace()
            .nth(1)
            .unwrap()
            .to_string()
    };
    assert_eq!(line(z), "cFFF");
    // The first unmovable memory taints the half region, not a whole one.
    let k = m.alloc(n(0), Gfp::KERNEL, o(0)).unwrap();
    assert!(k.pfn() < r(5 * GIB, 5 * GIB).start);
    assert_eq!(line(z), "tFFF");
    // Movable memory leaves a region clean but no longer free.
    let mv = m.alloc(n(0), Gfp::HIGHUSER_MOVABLE, o(9)).unwrap();
    let i = (mv.pfn().get() / GIB - 4) as usize;
    let mut want: Vec<char> = "tFFF".chars().collect();
    if i > 0 {
        want[i] = 'C';
    }
    assert_eq!(line(z), want.iter().collect::<String>());
    let c = z.superpageblock_counts();
    let free = want.iter().filter(|&&ch| ch == 'F').count() as u64;
    assert_eq!((c.whole, c.tainted, c.clean, c.free), (3, 1, 3, free));
    let text = z.superpageblock_map().to_string();
    assert!(text.starts_with(&format!(
        "superpageblocks: 3 could be 1 GiB pages, 1 tainted, 3 clean, {free} free now\n"
    )));
    let v = m.inspect().vmstat();
    assert_eq!(
        (
            v.nr_superpageblocks,
            v.nr_superpageblocks_tainted,
            v.nr_superpageblocks_clean,
            v.nr_superpageblocks_free
        ),
        (3, 1, 3, free)
    );
    assert_eq!(
        (v.superpageblock_fallback_tainting, v.superpageblock_tainted),
        (1, 1)
    );
    let vm = v.to_string();
    assert!(vm.contains("nr_superpageblocks_tainted 1\n"));
    assert!(
        m.inspect()
            .zoneinfo()
            .to_string()
            .contains("  superpageblocks 3 (of 262144 frames): tainted 1, clean 3")
    );
    // Freed, the unmovable pageblock stays unmovable: the region is still
    // tainted (ready for more), and every superpageblock adds up. The huge
    // page waits in the zone's pageblock pool for the next one (its region
    // clean, not free) until the pool is drained.
    m.free(k).unwrap();
    m.free(mv).unwrap();
    assert_eq!(line(z), want.iter().collect::<String>());
    assert_eq!(z.pooled_frames(), o(9).pages());
    m.drain_stripes();
    assert_eq!(line(z), "tFFF");
    let spbs: Vec<_> = z.superpageblocks().collect();
    assert_eq!(spbs.iter().map(|s| s.free).sum::<u64>(), z.free_pages());
    m.validate().unwrap();
}
