//! Owner records (`page_owner`): recorded on every allocation path, kept
//! through splits, partial frees and migration, and found again by frame.

mod common;

use common::{GIB, PB, Words, leak, o, one_zone};
use pageframe::debug::owner::OwnedBlock;
use pageframe::{CpuId, Gfp, NodeId, Order, PfnRange};

#[test]
fn each_entry_point_records_tag_site_and_sequence() {
    let m = one_zone(1 << 14);
    let mem = leak(m.pcp_bytes(2).unwrap());
    m.enable_pcp(2, mem).unwrap();
    let m = &*m;
    let mut c = m.cpu(CpuId(0), NodeId::ZERO).unwrap();
    let s0 = m.inspect().owner_seq();
    let (a, la) = (m.alloc(NodeId::ZERO, Gfp::KERNEL, o(1)).unwrap(), line!());
    let (b, lb) = (c.alloc(Gfp::KERNEL, Order::ZERO).unwrap(), line!());
    let lt = line!() + 1;
    let t = c.alloc_tagged(Gfp::KERNEL, Order::ZERO, 77).unwrap();
    let ld = line!() + 1;
    let d = m.alloc_on(CpuId(1), NodeId::ZERO, Gfp::KERNEL, o(3));
    let mut w = Words::default();
    let le = line!() + 1;
    let e = m.alloc_slow(NodeId::ZERO, Gfp::KERNEL, o(2), &mut w);
    let lg = line!() + 1;
    let g = m.alloc_tagged(NodeId::ZERO, Gfp::KERNEL, o(4), 99);
    let (d, e, g) = (d.unwrap(), e.unwrap(), g.unwrap());
    assert_eq!(m.inspect().owner_seq(), s0 + 6);
    for (i, (blk, line)) in [(&a, la), (&b, lb), (&t, lt), (&d, ld), (&e, le), (&g, lg)]
        .into_iter()
        .enumerate()
    {
        let got = m.inspect().owner_of(blk.pfn()).unwrap();
        assert!(got.live);
        assert_eq!((got.pfn, got.order), (blk.pfn(), blk.order()));
        let site = got.owner.site.unwrap();
        assert_eq!(
            (site.file(), site.line()),
            (file!(), line),
            "allocation {i}"
        );
        assert_eq!(got.owner.seq, s0 + i as u64);
    }
    assert_eq!(m.inspect().owner_of(t.pfn()).unwrap().owner.tag, 77);
    assert_eq!(m.inspect().owner_of(g.pfn()).unwrap().owner.tag, 99);
    // Untagged blocks of one call site share a tag; other sites differ.
    let tags: std::collections::HashSet<u64> = [&a, &b, &d, &e]
        .iter()
        .map(|x| m.inspect().owner_of(x.pfn()).unwrap().owner.tag)
        .collect();
    assert_eq!(tags.len(), 4);
    for x in [a, d, e, g] {
        m.free(x).unwrap();
    }
    c.free(b).unwrap();
    c.free(t).unwrap();
}

#[test]
fn an_interior_frame_finds_its_block_and_a_freed_one_its_last_owner() {
    let m: &_ = one_zone(1 << 12);
    let a = m.alloc_tagged(NodeId::ZERO, Gfp::KERNEL, o(5), 5).unwrap();
    let inside = m.inspect().owner_of(a.pfn() + 17).unwrap();
    assert_eq!(
        (inside.pfn, inside.order, inside.live),
        (a.pfn(), o(5), true)
    );
    let p = a.pfn();
    m.free(a).unwrap();
    let gone = m.inspect().owner_of(p).unwrap();
    assert_eq!((gone.live, gone.owner.tag), (false, 5));
    // A frame never allocated has no record.
    assert_eq!(m.inspect().owner_of(pageframe::Pfn(p.get() + 2048)), None);
}

#[test]
fn splits_and_partial_frees_keep_the_owner() {
    let m: &_ = one_zone(1 << 12);
    let a = m.alloc_tagged(NodeId::ZERO, Gfp::KERNEL, o(3), 3).unwrap();
    let (lo, hi) = m.split(a).unwrap();
    for half in [&lo, &hi] {
        let got = m.inspect().owner_of(half.pfn()).unwrap();
        assert_eq!((got.pfn, got.order, got.owner.tag), (half.pfn(), o(2), 3));
    }
    // Give back frames 1..3 of the lower half by number: frames 0 and 3
    // stay, each a block with the owner.
    let base = lo.pfn();
    let (p, _) = lo.into_raw();
    // SAFETY: the lower half was allocated above, its only copy is `p`.
    unsafe { m.free_raw(PfnRange::new(p + 1, p + 3)).unwrap() };
    for kept in [base, base + 3] {
        let got = m.inspect().owner_of(kept).unwrap();
        assert_eq!((got.pfn, got.live, got.owner.tag), (kept, true, 3));
    }
    // SAFETY: frames 0 and 3 of the half are still ours, held as numbers.
    unsafe {
        m.free_raw(PfnRange::new(base, base + 1)).unwrap();
        m.free_raw(PfnRange::new(base + 3, base + 4)).unwrap();
    }
    m.free(hi).unwrap();
    assert_eq!(m.inspect().free_pages(), m.inspect().managed_pages());
}

#[test]
fn migration_carries_the_owner_to_the_new_frames() {
    let m: &_ = one_zone(1 << 13);
    let mut w = Words::default();
    let kept = common::fragment(m, 0, &mut w);
    // Tag what the kernel keeps: each block its own number.
    let before: Vec<(u64, u64)> = kept
        .iter()
        .map(|&p| {
            let o = m.inspect().owner_of(p).unwrap().owner;
            (o.tag, o.seq)
        })
        .collect();
    m.compact_node(NodeId::ZERO, &mut w).unwrap();
    assert!(w.moves > 0);
    let mut after: Vec<(u64, u64)> = Vec::new();
    m.inspect()
        .for_each_owned(|b: OwnedBlock| after.push((b.owner.tag, b.owner.seq)));
    let mut before = before;
    before.sort_unstable();
    after.sort_unstable();
    assert_eq!(
        after, before,
        "every block kept its record through the moves"
    );
    // And each block the kernel holds now is where its record says.
    for b in w.blocks.values() {
        assert_eq!(m.inspect().owner_of(b.pfn()).unwrap().pfn, b.pfn());
    }
    w.free_all(m);
}

#[test]
fn the_dump_groups_live_blocks_by_owner_and_finds_a_leak() {
    let m: &_ = one_zone(1 << 14);
    let since = m.inspect().owner_seq();
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(
            m.alloc_tagged(NodeId::ZERO, Gfp::KERNEL, o(2), 0xaa)
                .unwrap(),
        );
    }
    held.push(
        m.alloc_tagged(NodeId::ZERO, Gfp::KERNEL, o(0), 0xbb)
            .unwrap(),
    );
    let leaked = m
        .alloc_tagged(NodeId::ZERO, Gfp::KERNEL, o(6), 0xcc)
        .unwrap();
    let text = m.inspect().page_owners().to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert!(lines[1].contains("0x00000000000000cc") && lines[1].trim_start().starts_with("64 "));
    assert!(lines[2].contains("0x00000000000000aa") && lines[2].trim_start().starts_with("12 "));
    assert!(lines[3].contains("0x00000000000000bb"));
    assert!(lines[1].contains(file!()));
    for b in held {
        m.free(b).unwrap();
    }
    let mut left = Vec::new();
    m.inspect().for_each_owned(|b| {
        if b.owner.seq >= since {
            left.push(b)
        }
    });
    assert_eq!(left.len(), 1);
    assert_eq!((left[0].pfn, left[0].owner.tag), (leaked.pfn(), 0xcc));
    m.free(leaked).unwrap();
}

#[test]
fn records_are_counted_in_the_zone_metadata() {
    let m = common::machine_with(pageframe::MachineConfig::SINGLE_NODE);
    let span = common::r(1 << 20, (1 << 20) + (1 << 12));
    let need = m.zone_metadata_bytes(span);
    assert!(need >= 24 << 12, "24 bytes a frame for the records");
    // One byte short is refused: the records are not optional.
    assert!(
        m.add_zone(
            NodeId::ZERO,
            pageframe::ZoneKind::Normal,
            span,
            leak(need - 1)
        )
        .is_err()
    );
}

/// Small enough for Miri: records written, read back (their call-site
/// pointers turned into references) and carried through a split.
#[test]
fn miri_records_round_trip() {
    let m = common::machine_with(pageframe::MachineConfig::SINGLE_NODE);
    let span = common::r(1 << 20, (1 << 20) + 1024);
    m.add_zone(
        NodeId::ZERO,
        pageframe::ZoneKind::Normal,
        span,
        leak(m.zone_metadata_bytes(span)),
    )
    .unwrap();
    m.add_free_range(span).unwrap();
    let m: &_ = m;
    let line = line!() + 1;
    let a = m.alloc(NodeId::ZERO, Gfp::KERNEL, o(1)).unwrap();
    let (lo, hi) = m.split(a).unwrap();
    for b in [&lo, &hi] {
        let site = m.inspect().owner_of(b.pfn()).unwrap().owner.site.unwrap();
        assert_eq!((site.file(), site.line()), (file!(), line));
    }
    m.free(lo).unwrap();
    m.free(hi).unwrap();
}

/// Contiguous ranges and CMA buffers get records of their own: a range
/// taken over a freed block names its taker, never the block's last
/// owner as live.
#[test]
fn contiguous_ranges_and_cma_buffers_record_their_owner() {
    let m = one_zone(64 * PB);
    let base = m
        .inspect()
        .zone_of(pageframe::Pfn(4 * GIB))
        .unwrap()
        .span()
        .start;
    let cma = m
        .add_cma_area(PfnRange::new(base + 32 * PB, base + 40 * PB))
        .unwrap();
    let m = &*m;
    let mut w = Words::default();
    let old = m.alloc_tagged(NodeId::ZERO, Gfp::KERNEL, o(3), 42).unwrap();
    let p = old.pfn();
    m.free(old).unwrap();
    let pb = PfnRange::new(
        p.align_down(Order::HUGE_2M),
        p.align_down(Order::HUGE_2M) + PB,
    );
    let s0 = m.inspect().owner_seq();
    let line = line!() + 1;
    let seg = m.alloc_contig_range(pb, &mut w).unwrap();
    let lc = line!() + 1;
    let buf = m.cma_alloc(cma, 3 * PB / 2, 1, &mut w).unwrap();
    let la = line!() + 1;
    let any = m.alloc_contig(NodeId::ZERO, Gfp::KERNEL, 1000, 8, &mut w);
    let any = any.unwrap();
    for (range, line, seq) in [
        (seg.range(), line, s0),
        (buf.range(), lc, s0 + 1),
        (any.range(), la, s0 + 2),
    ] {
        let last = pageframe::Pfn(range.end.get() - 1);
        for f in [range.start, p, range.start + range.len() / 2, last] {
            if !range.contains(f) {
                continue;
            }
            let got = m.inspect().owner_of(f).unwrap();
            assert!(got.live);
            assert!(
                range.contains_range(&PfnRange::new(got.pfn, got.pfn + got.order.pages())),
                "{f:?}: a block of the range, not the old one: {got:?}"
            );
            assert_eq!(got.owner.seq, seq, "{f:?}");
            assert_ne!(got.owner.tag, 42, "{f:?}");
            let site = got.owner.site.unwrap();
            assert_eq!((site.file(), site.line()), (file!(), line), "{f:?}");
        }
    }
    assert_eq!(m.inspect().owner_seq(), s0 + 3, "one record a range");
    // Every frame listed is covered once, by the range's own record.
    let mut listed = 0;
    m.inspect().for_each_owned(|b: OwnedBlock| {
        if seg.range().contains(b.pfn) {
            assert_eq!(b.owner.seq, s0, "{b:?}");
            listed += b.order.pages();
        }
    });
    assert_eq!(listed, PB);
    m.free_segment(seg).unwrap();
    m.cma_release(buf).unwrap();
    m.free_segment(any).unwrap();
    // Freed, each frame names the range as its last owner.
    let last = m.inspect().owner_of(p).unwrap();
    assert!(!last.live);
    assert_eq!(last.owner.seq, s0);
    m.validate().unwrap();
}

/// Hot-added memory: its zone starts with no records, and every
/// allocation from it (a block, a range) records its owner; memory taken
/// offline and brought back names its last owner, never a live one.
#[test]
fn hot_added_memory_records_its_owners() {
    let m = pageframe::boot::Builder::new(pageframe::MachineConfig::SINGLE_NODE).build_boxed();
    let m = Box::leak(m);
    let boot = PfnRange::new(pageframe::Pfn(4 * GIB), pageframe::Pfn(4 * GIB + 16 * PB));
    common::zone(m, NodeId::ZERO, pageframe::ZoneKind::Normal, boot, boot);
    let dimm = PfnRange::new(pageframe::Pfn(8 * GIB), pageframe::Pfn(8 * GIB + 16 * PB));
    m.declare_hotplug(NodeId::ZERO, pageframe::ZoneKind::Movable, dimm)
        .unwrap();
    let m = &*m;
    m.hot_add_zone(
        NodeId::ZERO,
        pageframe::ZoneKind::Movable,
        dimm,
        leak(m.zone_metadata_bytes(dimm)),
    )
    .unwrap();
    assert!(m.inspect().owner_of(dimm.start).is_none(), "no record yet");
    m.add_free_range(dimm).unwrap();
    let b = m
        .alloc_tagged(NodeId::ZERO, Gfp::HIGHUSER_MOVABLE, o(2), 5)
        .unwrap();
    assert!(dimm.contains(b.pfn()));
    let got = m.inspect().owner_of(b.pfn() + 3).unwrap();
    assert_eq!((got.pfn, got.owner.tag, got.live), (b.pfn(), 5, true));
    let mut w = Words::default();
    let line = line!() + 1;
    let seg = m.alloc_contig_range(PfnRange::new(dimm.start + PB, dimm.start + 2 * PB), &mut w);
    let seg = seg.unwrap();
    let got = m.inspect().owner_of(seg.start()).unwrap();
    assert_eq!((got.live, got.owner.site.unwrap().line()), (true, line));
    m.free_segment(seg).unwrap();
    let off = PfnRange::new(dimm.start + 8 * PB, dimm.start + 9 * PB);
    m.offline_range(off, &mut w).unwrap();
    m.add_free_range(off).unwrap();
    assert!(m.inspect().owner_of(off.start).is_none_or(|o| !o.live));
    m.free(b).unwrap();
    m.validate().unwrap();
}
