//! Ownership in the types: blocks are owning values, and each rule that
//! follows from it is a test here. The misuses safe
//! code can no longer write (a stale free, a double free, a free of a
//! copied handle, a free by number, a release of a range no CMA area
//! handed out) are `compile_fail` examples in `src/block.rs`; what remains
//! to check at run time is here.

mod common;

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};

use common::*;
use pageframe::{
    Block, ContigError, FreeError, Gfp, Machine, MachineConfig, Migrator, NodeId, Order, Pfn,
    PfnRange, SetupError, ZoneKind,
    compact::{MigrateError, MigrateMode},
};

/// A block of one machine given to another is refused and handed back,
/// whole, through every path that takes one; nothing changes on either.
#[test]
fn a_block_of_one_machine_cannot_be_freed_into_another() {
    let a = one_zone(16 * PB);
    let b = one_zone(16 * PB);
    let (fa, fb) = (a.inspect().free_pages(), b.inspect().free_pages());
    let x = a.alloc(NodeId::ZERO, Gfp::KERNEL, o(2)).unwrap();
    let refused = b.free(x).unwrap_err();
    assert_eq!(refused.reason(), FreeError::Foreign);
    let x = refused.into_inner();
    let refused = b.guard(x).unwrap_err();
    assert_eq!(refused.reason(), FreeError::Foreign);
    let x = refused.into_inner();
    assert_eq!(
        (a.inspect().free_pages(), b.inspect().free_pages()),
        (fa - 4, fb)
    );
    // Through a CPU's cache of the other machine too.
    b.enable_pcp(1, leak(b.pcp_bytes(1).unwrap())).unwrap();
    let b: &'static Machine<'static> = b;
    let y = a.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO).unwrap();
    let mut cpu = b.cpu(pageframe::CpuId(0), NodeId::ZERO).unwrap();
    let y = cpu.free(y).unwrap_err().into_inner();
    // Segments likewise.
    let mut w = Words::default();
    let s = a
        .alloc_contig(NodeId::ZERO, Gfp::KERNEL, 100, 1, &mut w)
        .unwrap();
    let s = b.free_segment(s).unwrap_err().into_inner();
    assert_eq!(b.inspect().free_pages(), fb);
    // Each goes back where it came from.
    a.free(x).unwrap();
    a.free(y).unwrap();
    a.free_segment(s).unwrap();
    assert_eq!(a.inspect().free_pages(), fa);
    a.validate().unwrap();
    b.validate().unwrap();
}

/// `cma_release` takes only a buffer an area handed out (a
/// range does not compile); a buffer of another machine is refused with
/// every counter unchanged.
#[test]
fn a_cma_buffer_is_released_only_where_it_came_from() {
    let area = |m: &mut Machine<'static>| {
        m.add_cma_area(r(4 * GIB + 8 * PB, 4 * GIB + 16 * PB))
            .unwrap()
    };
    let m1 = one_zone(32 * PB);
    let id1 = area(m1);
    let m2 = one_zone(32 * PB);
    let id2 = area(m2);
    let mut w = Words::default();
    let buf = m1.cma_alloc(id1, 300, 1, &mut w).unwrap();
    let before = (
        m1.inspect().cma_stats(id1).unwrap(),
        m2.inspect().cma_stats(id2).unwrap(),
    );
    assert_eq!(before.0.held, 300);
    let back = m2.cma_release(buf).unwrap_err();
    assert_eq!(back.reason(), FreeError::Foreign);
    assert_eq!(
        (
            m1.inspect().cma_stats(id1).unwrap(),
            m2.inspect().cma_stats(id2).unwrap()
        ),
        before,
        "no counter moved"
    );
    m1.cma_release(back.into_inner()).unwrap();
    assert_eq!(
        m1.inspect().cma_stats(id1).unwrap().held,
        0,
        "no wrap-around"
    );
    m1.validate().unwrap();
}

/// Frames the `x86_64` crate cannot express (at or above 2^52
/// bytes) are refused and stay with the machine; the machine's address
/// width (the target's by default) keeps such memory out of zones and
/// plans in the first place.
#[cfg(feature = "x86_64")]
#[test]
fn frames_beyond_the_address_width_are_refused_not_lost() {
    use ::x86_64::structures::paging::{FrameAllocator, PhysFrame, Size4KiB};
    // A machine told its addresses reach 64 bits, with memory at 2^52
    // bytes: the adapter cannot hand it out.
    let m = machine_with(MachineConfig {
        phys_bits: 64,
        ..MachineConfig::SINGLE_NODE
    });
    let high = Pfn(1 << 40);
    let span = PfnRange::new(high, high + 4 * PB);
    zone(m, NodeId::ZERO, ZoneKind::Normal, span, span);
    let free = m.inspect().free_pages();
    // SAFETY: simulated frames, never touched.
    let mut adapter = unsafe { pageframe::paging::FrameAdapter::new(m, NodeId::ZERO, Gfp::KERNEL) };
    let f: Option<PhysFrame<Size4KiB>> = adapter.allocate_frame();
    assert!(f.is_none(), "no frame the crate cannot express");
    assert_eq!(m.inspect().free_pages(), free, "and the frame went back");
    m.validate().unwrap();
    // With the target's width, that memory is refused at set-up.
    let t = machine_with(MachineConfig::SINGLE_NODE);
    let meta = leak(t.zone_metadata_bytes(span));
    assert_eq!(
        t.add_zone(NodeId::ZERO, ZoneKind::Normal, span, meta).err(),
        Some(SetupError::AddressWidth { pfn: high })
    );
}

/// Memory past the address width is refused by the
/// zone, the hotplug declaration and the planner, naming the frame; a
/// span near `MAX_PFN` says so instead of "span too large".
#[test]
fn set_up_refuses_memory_past_the_address_width() {
    let limit = MachineConfig::SINGLE_NODE.pfn_limit();
    let m = machine_with(MachineConfig::SINGLE_NODE);
    for span in [
        PfnRange::new(limit, limit + 512),
        PfnRange::new(Pfn(limit.get() - 512), limit + 512),
        PfnRange::new(
            Pfn(pageframe::zone::MAX_PFN - 4096),
            Pfn(pageframe::zone::MAX_PFN),
        ),
    ] {
        let meta = leak(4096);
        assert_eq!(
            m.add_zone(NodeId::ZERO, ZoneKind::Normal, span, meta).err(),
            Some(SetupError::AddressWidth {
                pfn: span.start.max(limit)
            }),
            "{span:?}"
        );
        assert_eq!(
            m.declare_hotplug(NodeId::ZERO, ZoneKind::Movable, span),
            Err(SetupError::AddressWidth {
                pfn: span.start.max(limit)
            })
        );
    }
    let mut ram = pageframe::boot::FrameRanges::<8>::new();
    ram.add_usable(
        pageframe::PhysAddr::new(0x10_0000),
        pageframe::PhysAddr::new(0x4000_0000),
    )
    .unwrap();
    ram.add_usable(
        pageframe::PhysAddr::new(1 << 63),
        pageframe::PhysAddr::new((1 << 63) + (1 << 30)),
    )
    .unwrap();
    assert!(matches!(
        pageframe::boot::Plan::new(&ram, &[], MachineConfig::SINGLE_NODE),
        Err(pageframe::boot::PlanError::Setup(SetupError::AddressWidth { pfn }))
            if pfn == Pfn(1 << 51)
    ));
}

/// Each error names the real reason and the frame.
#[test]
fn errors_name_the_real_reason_and_the_frame() {
    // A zone whose start is not 2 MiB aligned: its first pageblock reaches
    // outside it, so a range over it cannot be isolated.
    let m = machine_with(MachineConfig::SINGLE_NODE);
    let span = r(4 * GIB + 100, 4 * GIB + 16 * PB);
    zone(m, NodeId::ZERO, ZoneKind::Normal, span, span);
    let mut w = Words::default();
    assert_eq!(
        m.alloc_contig_range(span, &mut w).map(|s| s.range()),
        Err(ContigError::PartialPageblock { pfn: span.start })
    );
    // A range offline already is not online.
    let off = r(4 * GIB + 4 * PB, 4 * GIB + 6 * PB);
    m.offline_range(off, &mut w).unwrap();
    assert_eq!(
        m.offline_range(off, &mut w),
        Err(ContigError::NotOnline { pfn: off.start })
    );
    // A number that is not a block: the frame and why.
    // SAFETY: offline memory is no live allocation: refused.
    let e = unsafe { m.block_from_raw(off.start + 3, Order::ZERO) }.unwrap_err();
    assert_eq!((e.pfn, e.why), (off.start + 3, FreeError::Hole));
    assert_eq!(
        e.to_string(),
        format!("frame {}: {}", off.start + 3, FreeError::Hole)
    );
    m.add_free_range(off).unwrap();
    m.validate().unwrap();
}

/// A moved page and migration keeping ownership true: the
/// owner of a page moved into a contiguous range holds the block of its
/// new frame; its old number is a piece of the range, nobody's to free.
#[test]
fn an_owner_follows_its_page_out_of_a_taken_range() {
    let m = one_zone(16 * PB);
    let mut w = Words::default();
    let page = m
        .alloc(NodeId::ZERO, Gfp::HIGHUSER_MOVABLE, Order::ZERO)
        .unwrap();
    let old = w.keep(page);
    let range = r(old.get() & !(PB - 1), (old.get() & !(PB - 1)) + PB);
    let seg = m.alloc_contig_range(range, &mut w).unwrap();
    assert_eq!(seg.moved(), 1);
    let (&new, b) = w.blocks.iter().next().unwrap();
    assert!(!range.contains(new) && b.pfn() == new);
    assert_eq!(
        w.word[&new.get()],
        old.get() ^ 0xabcd,
        "the data moved with it"
    );
    // SAFETY: the old number is a piece of the segment, not a block of
    // order 0 the caller owns: refused, naming the frame.
    let e = unsafe { m.block_from_raw(old, Order::ZERO) }.unwrap_err();
    assert_eq!(e.pfn, old);
    m.free_segment(seg).unwrap();
    w.free_all(m);
    assert_eq!(m.inspect().free_pages(), m.inspect().managed_pages());
}

/// A guard frees its block when dropped; `into_inner` takes it back out.
#[test]
fn a_guard_frees_its_block_on_drop() {
    let m = one_zone(16 * PB);
    let free = m.inspect().free_pages();
    {
        let g = m
            .guard(m.alloc(NodeId::ZERO, Gfp::KERNEL, o(3)).unwrap())
            .unwrap();
        assert_eq!(g.order(), o(3));
        assert_eq!(m.inspect().free_pages(), free - 8);
    }
    assert_eq!(m.inspect().free_pages(), free);
    let g = m
        .guard(m.alloc(NodeId::ZERO, Gfp::KERNEL, o(1)).unwrap())
        .unwrap();
    let b = g.into_inner();
    assert_eq!(m.inspect().free_pages(), free - 2, "taken out, not freed");
    m.free(b).unwrap();
    assert_eq!(m.inspect().free_pages(), free);
}

/// Which call of a [`Panicky`] migrator panics.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum PanicAt {
    Isolate(u32),
    Migrate(u32),
    Never,
}

/// A kernel (the common `Words`) whose migrator panics at a chosen call.
struct Panicky {
    words: Words,
    at: PanicAt,
    isolates: u32,
    migrates: u32,
}

impl Migrator for Panicky {
    fn isolate(&mut self, pfn: Pfn, order: Order) -> Option<Block> {
        self.isolates += 1;
        if self.at == PanicAt::Isolate(self.isolates) {
            panic!("isolate {}", self.isolates);
        }
        self.words.isolate(pfn, order)
    }
    fn migrate(&mut self, s: Pfn, d: Pfn, o: Order, mode: MigrateMode) -> Result<(), MigrateError> {
        self.migrates += 1;
        if self.at == PanicAt::Migrate(self.migrates) {
            panic!("migrate {}", self.migrates);
        }
        self.words.migrate(s, d, o, mode)
    }
    fn putback(&mut self, b: Block) {
        self.words.putback(b)
    }
    fn migrated(&mut self, b: Block, from: Pfn) {
        self.words.migrated(b, from)
    }
}

/// A machine of 16 pageblocks, every fourth frame kept movable by the
/// kernel `w` (with its word), the rest free.
fn fragmented() -> (&'static Machine<'static>, Words) {
    let m: &'static Machine<'static> = one_zone(16 * PB);
    let mut w = Words::default();
    fragment(m, 0, &mut w);
    (m, w)
}

/// A migrator that panics in a contiguous allocation, in
/// compaction, or a reporting callback that panics, leaves the machine as
/// a refusing one would: nothing isolated or busy (`validate`), every
/// block it was handed back with its kernel, the free count that of an
/// honest run, and the range takeable afterwards.
#[test]
fn a_panicking_migrator_leaves_the_machine_as_it_was() {
    let quiet = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let cases = [
        PanicAt::Isolate(1),
        PanicAt::Isolate(7),
        PanicAt::Migrate(1),
        PanicAt::Migrate(5),
    ];
    for at in cases {
        for contig in [true, false] {
            let (m, w) = fragmented();
            let blocks = w.blocks.len();
            let free = m.inspect().free_pages();
            let range = r(4 * GIB + 2 * PB, 4 * GIB + 4 * PB);
            let mut p = Panicky {
                words: w,
                at,
                isolates: 0,
                migrates: 0,
            };
            let r = catch_unwind(AssertUnwindSafe(|| {
                if contig {
                    let _ = m.alloc_contig_range(range, &mut p);
                } else {
                    m.compact_node(NodeId::ZERO, &mut p);
                }
            }));
            assert!(r.is_err(), "{at:?}: the migrator panicked");
            let case = format!("{at:?}, contig {contig}");
            m.validate().unwrap_or_else(|e| panic!("{case}: {e}"));
            // Moves completed before the panic stand; everything else came
            // back: every block is the kernel's again, its data with it.
            assert_eq!(p.words.blocks.len(), blocks, "{case}: blocks handed back");
            assert_eq!(m.inspect().free_pages(), free, "{case}: free count");
            for (pfn, b) in &p.words.blocks {
                assert_eq!(b.pfn(), *pfn);
                assert!(
                    p.words.word.contains_key(&pfn.get()),
                    "{case}: data of {pfn:?}"
                );
            }
            // The range is not left isolated: an honest migrator takes it.
            p.at = PanicAt::Never;
            let seg = m
                .alloc_contig_range(range, &mut p)
                .unwrap_or_else(|e| panic!("{case}: {e}"));
            m.free_segment(seg).unwrap();
            p.words.free_all(m);
            m.drain_stripes();
            assert_eq!(
                m.inspect().free_pages(),
                m.inspect().managed_pages(),
                "{case}"
            );
            m.validate().unwrap();
        }
    }
    // A reporting callback that panics: the batch comes back unmarked.
    let (m, mut w) = fragmented();
    w.free_all(m);
    let free = m.inspect().free_pages();
    let r = catch_unwind(AssertUnwindSafe(|| {
        m.report_free_pages(Order::HUGE_2M, |_| panic!("the balloon driver failed"))
    }));
    assert!(r.is_err());
    m.validate().unwrap();
    assert_eq!(m.inspect().free_pages(), free);
    assert_eq!(
        m.inspect().reported_pages(Order::HUGE_2M).1,
        0,
        "nothing marked"
    );
    std::panic::set_hook(quiet);
}

/// A kernel (the common `Words`) that checks, each time it hears of a
/// move, that the source is not yet the allocator's: a kernel's books by
/// frame (a reverse map) are settled before anyone can be handed the
/// source. It panics at its `panic_at`-th `migrated`, if set.
struct Settling {
    words: Words,
    m: &'static Machine<'static>,
    heard: u32,
    panic_at: Option<u32>,
}

impl Migrator for Settling {
    fn isolate(&mut self, pfn: Pfn, order: Order) -> Option<Block> {
        self.words.isolate(pfn, order)
    }
    fn migrate(&mut self, s: Pfn, d: Pfn, o: Order, mode: MigrateMode) -> Result<(), MigrateError> {
        self.words.migrate(s, d, o, mode)
    }
    fn putback(&mut self, b: Block) {
        self.words.putback(b)
    }
    fn migrated(&mut self, b: Block, from: Pfn) {
        self.heard += 1;
        let z = self.m.inspect().zone_of(from).unwrap();
        let source = z.inspect(|mz| mz.buddy().block_at(from));
        assert!(
            matches!(source, Some(pageframe::zone::BlockInfo::Allocated { head, .. }) if head == from),
            "source {from:?} went back before the kernel heard of its move: {source:?}"
        );
        if self.panic_at == Some(self.heard) {
            panic!("migrated {}", self.heard);
        }
        self.words.migrated(b, from)
    }
}

/// Compaction and contiguous ranges tell the kernel of a move before the
/// source goes back; a panic in `migrated` still gives the sources back,
/// and no frame ends up with two owners.
#[test]
fn the_kernel_hears_of_a_move_before_its_source_is_handed_out_again() {
    for panic_at in [None, Some(3)] {
        for contig in [true, false] {
            let (m, w) = fragmented();
            let held = w.blocks.len();
            let mut k = Settling {
                words: w,
                m,
                heard: 0,
                panic_at,
            };
            let range = r(4 * GIB + 2 * PB, 4 * GIB + 4 * PB);
            let run = catch_unwind(AssertUnwindSafe(|| {
                if contig {
                    m.alloc_contig_range(range, &mut k)
                        .map(|s| s.into_raw())
                        .ok();
                } else {
                    m.compact_node(NodeId::ZERO, &mut k);
                }
            }));
            let case = format!("panic at {panic_at:?}, contig {contig}");
            assert_eq!(run.is_err(), panic_at.is_some(), "{case}");
            assert!(k.heard >= 3, "{case}: {} moves", k.heard);
            m.validate().unwrap_or_else(|e| panic!("{case}: {e}"));
            // Only the block whose `migrated` panicked (and, in a batch, the
            // moves after it) can be lost to the kernel; the rest it holds.
            assert!(k.words.blocks.len() <= held, "{case}");
            if panic_at.is_some() {
                let batch = pageframe::compact::MIGRATE_BATCH_MAX as usize;
                assert!(k.words.blocks.len() >= held.saturating_sub(batch), "{case}");
            }
            // Every free frame can be taken, and none is a kernel's.
            let mut taken = Vec::new();
            while let Ok(b) = m.alloc(NodeId::ZERO, Gfp::HIGHUSER_MOVABLE, Order::ZERO) {
                assert!(
                    !k.words.blocks.contains_key(&b.pfn()),
                    "{case}: {:?} handed out while the kernel holds it",
                    b.pfn()
                );
                taken.push(b);
            }
            for b in taken {
                m.free(b).unwrap();
            }
        }
    }
}

/// A kernel keeping its blocks in a map hands them over by number; the
/// map has the new block after the move (for the docs' example shape).
#[test]
fn migration_hands_blocks_over_and_back() {
    let m = one_zone(16 * PB);
    let mut w = Words::default();
    let kept = fragment(m, 0, &mut w);
    let before: HashMap<u64, u64> = w.word.clone();
    let out = m.compact_node(NodeId::ZERO, &mut w).unwrap();
    assert!(out.stats.migrated > 0);
    assert_eq!(w.blocks.len(), kept.len(), "every block is the kernel's");
    let mut words: Vec<u64> = w.word.values().copied().collect();
    let mut was: Vec<u64> = before.values().copied().collect();
    words.sort_unstable();
    was.sort_unstable();
    assert_eq!(words, was, "every page's data, once");
    for p in w.blocks.keys() {
        assert!(w.word.contains_key(&p.get()), "a block where its data is");
    }
    w.free_all(m);
    m.drain_stripes();
    assert_eq!(m.inspect().free_pages(), m.inspect().managed_pages());
}

/// A kernel that keeps its mapped pages as numbers (in page-table entries)
/// and makes the block again when asked for it: `block_from_raw` in
/// `isolate`, `into_raw` when a block comes back.
#[derive(Default)]
struct Mapped {
    pages: std::collections::HashSet<Pfn>,
    machine: Option<&'static Machine<'static>>,
    moves: u64,
}

impl Migrator for Mapped {
    fn isolate(&mut self, pfn: Pfn, order: Order) -> Option<Block> {
        if order != Order::ZERO || !self.pages.contains(&pfn) {
            return None;
        }
        // SAFETY: a page this kernel maps; its number stands for the
        // block, which goes back into the map when it comes back.
        unsafe { self.machine?.block_from_raw(pfn, order) }.ok()
    }
    fn migrate(
        &mut self,
        src: Pfn,
        dst: Pfn,
        _: Order,
        _: MigrateMode,
    ) -> Result<(), MigrateError> {
        assert!(self.pages.remove(&src), "only mapped pages move");
        self.pages.insert(dst);
        self.moves += 1;
        Ok(())
    }
    fn putback(&mut self, b: Block) {
        assert!(self.pages.contains(&b.pfn()));
        let _ = b.into_raw();
    }
    fn migrated(&mut self, b: Block, from: Pfn) {
        assert!(self.pages.contains(&b.pfn()) && !self.pages.contains(&from));
        let _ = b.into_raw();
    }
}

impl pageframe::compact::SlowPathHooks for Mapped {}

/// Pages kept as numbers move under direct compaction, contiguous
/// allocation and proactive compaction as owned blocks do, and every
/// frame is accounted for after.
#[test]
fn pages_kept_as_numbers_move_and_nothing_appears() {
    for how in 0..3 {
        let m: &'static Machine<'static> = one_zone(16 * PB);
        let mut k = Mapped {
            machine: Some(m),
            ..Mapped::default()
        };
        let all: Vec<Pfn> = std::iter::from_fn(|| {
            m.alloc(NodeId::ZERO, Gfp::HIGHUSER_MOVABLE, Order::ZERO)
                .ok()
                .map(|b| b.into_raw().0)
        })
        .collect();
        for p in all {
            if p.get() % 4 == 0 {
                k.pages.insert(p);
            } else {
                // SAFETY: allocated above, its number is the only handle.
                m.free(unsafe { m.block_from_raw(p, Order::ZERO) }.unwrap())
                    .unwrap();
            }
        }
        let base = m.inspect().free_pages();
        let mut got = Vec::new();
        match how {
            0 => {
                while let Ok(b) = m.alloc_slow(
                    NodeId::ZERO,
                    Gfp::TRANSHUGE | Gfp::RETRY_MAYFAIL,
                    Order::HUGE_2M,
                    &mut k,
                ) {
                    got.push(b);
                }
            }
            1 => {
                let seg = m
                    .alloc_contig_range(r(4 * GIB + 2 * PB, 4 * GIB + 4 * PB), &mut k)
                    .unwrap();
                m.free_segment(seg).unwrap();
            }
            _ => {
                m.compact_node(NodeId::ZERO, &mut k).unwrap();
            }
        }
        assert!(k.moves > 0, "case {how}: pages moved");
        m.validate().unwrap();
        let taken = got.len() as u64 * 512;
        assert!(how != 0 || taken > 0, "2 MiB blocks made");
        assert_eq!(
            m.inspect().free_pages() + taken,
            base,
            "case {how}: conservation"
        );
        for b in got {
            m.free(b).unwrap();
        }
        for p in std::mem::take(&mut k.pages) {
            // SAFETY: as above, the number is the only handle.
            m.free(unsafe { m.block_from_raw(p, Order::ZERO) }.unwrap())
                .unwrap();
        }
        m.drain_stripes();
        assert_eq!(
            m.inspect().free_pages(),
            m.inspect().managed_pages(),
            "case {how}"
        );
        m.validate().unwrap();
    }
}
