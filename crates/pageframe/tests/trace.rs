//! Trace events: every path the hooks are told about, told once, with the
//! right frames.

mod common;

use std::sync::Mutex;

use common::{leak, r};
use pageframe::debug::{Event, Hooks};
use pageframe::{
    AllocError, CpuId, Gfp, Machine, MachineConfig, Migrator, NodeId, Order, Pfn, ZoneKind,
    compact::{CompactResult, MigrateError, MigrateMode},
    zone::MigrateType,
};

#[derive(Default)]
struct Recorder(Mutex<Vec<Event>>);

impl Hooks for Recorder {
    fn event(&self, e: &Event) {
        self.0.lock().unwrap().push(*e);
    }
}

impl Recorder {
    fn take(&self) -> Vec<Event> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

type Traced = Machine<'static, (pageframe::lock::SpinLock, Recorder)>;

/// One Normal zone of `frames` frames at 4 GiB, all free.
fn machine(frames: u64, cpus: u32) -> &'static Traced {
    let m = Box::leak(
        pageframe::boot::Builder::new(MachineConfig::SINGLE_NODE)
            .hooks(Recorder::default())
            .build_boxed(),
    );
    let span = r(1 << 20, (1 << 20) + frames);
    m.add_zone(
        NodeId::ZERO,
        ZoneKind::Normal,
        span,
        leak(m.zone_metadata_bytes(span)),
    )
    .unwrap();
    m.add_free_range(span).unwrap();
    if cpus > 0 {
        let mem = leak(m.pcp_bytes(cpus).unwrap());
        m.enable_pcp(cpus, mem).unwrap();
    }
    m.inspect().hooks().take();
    m
}

const MOVABLE: Gfp = Gfp::HIGHUSER_MOVABLE;

#[test]
fn zone_allocation_and_free_are_bracketed_and_named() {
    let m = machine(1 << 14, 0);
    let o2 = Order::new(2).unwrap();
    let b = m.alloc(NodeId::ZERO, MOVABLE, o2).unwrap();
    let pfn = b.pfn();
    let ev = m.inspect().hooks().take();
    assert_eq!(
        ev,
        [
            Event::AllocStart {
                order: o2,
                cpu: None
            },
            Event::Alloc {
                pfn,
                order: o2,
                gfp: MOVABLE,
                cpu: None
            }
        ]
    );
    m.free(b).unwrap();
    assert_eq!(
        m.inspect().hooks().take(),
        [Event::Free {
            pfn,
            order: o2,
            cpu: None
        }]
    );
    // A refused free is no free.
    let b = m.alloc(NodeId::ZERO, MOVABLE, Order::ZERO).unwrap();
    // SAFETY: a stale copy on purpose: the machine must refuse its free.
    let copy = unsafe { m.block_from_raw(b.pfn(), Order::ZERO) }.unwrap();
    m.free(b).unwrap();
    m.inspect().hooks().take();
    assert!(m.free(copy).is_err());
    assert!(m.inspect().hooks().take().is_empty());
}

#[test]
fn a_failed_request_says_why() {
    let m = machine(1 << 12, 0);
    let big = Order::new(11).unwrap();
    let e = m.alloc(NodeId::ZERO, Gfp::KERNEL, big).unwrap_err();
    let ev = m.inspect().hooks().take();
    assert_eq!(ev.len(), 2);
    assert_eq!(
        ev[1],
        Event::AllocFail {
            node: NodeId::ZERO,
            order: big,
            gfp: Gfp::KERNEL,
            error: e,
            cpu: None
        }
    );
    // Out of memory: the zone is 16 MiB, ask for more than it has.
    let mut held = Vec::new();
    while let Ok(b) = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::HUGE_2M) {
        held.push(b);
    }
    let fails: Vec<_> = m
        .inspect()
        .hooks()
        .take()
        .into_iter()
        .filter(|e| matches!(e, Event::AllocFail { .. }))
        .collect();
    assert_eq!(fails.len(), 1);
    assert!(matches!(
        fails[0],
        Event::AllocFail {
            error: AllocError::OutOfMemory,
            ..
        }
    ));
    for b in held {
        m.free(b).unwrap();
    }
}

#[test]
fn the_cached_path_reports_its_cpu_refills_and_spills() {
    let m = machine(1 << 15, 2);
    let mut c = m.cpu(CpuId(1), NodeId::ZERO).unwrap();
    let b = c.alloc(MOVABLE, Order::ZERO).unwrap();
    let ev = m.inspect().hooks().take();
    let refills: Vec<_> = ev
        .iter()
        .filter_map(|e| match e {
            Event::PcpRefill { cpu, blocks, .. } => Some((*cpu, *blocks)),
            _ => None,
        })
        .collect();
    let held = c.cache_info(NodeId::ZERO, ZoneKind::Normal).unwrap().count as u64;
    assert_eq!(refills, [(Some(CpuId(1)), held + 1)], "{ev:?}");
    assert_eq!(
        ev.last(),
        Some(&Event::Alloc {
            pfn: b.pfn(),
            order: Order::ZERO,
            gfp: MOVABLE,
            cpu: Some(CpuId(1))
        })
    );
    let pfn = b.pfn();
    c.free(b).unwrap();
    assert_eq!(
        m.inspect().hooks().take(),
        [Event::Free {
            pfn,
            order: Order::ZERO,
            cpu: Some(CpuId(1))
        }]
    );
    let cached = c.cache_info(NodeId::ZERO, ZoneKind::Normal).unwrap().count as u64;
    assert_eq!(c.drain(), cached);
    let spilled: u64 = m
        .inspect()
        .hooks()
        .take()
        .iter()
        .map(|e| match e {
            Event::PcpSpill {
                cpu: Some(CpuId(1)),
                pages,
                ..
            } => *pages,
            _ => 0,
        })
        .sum();
    assert_eq!(spilled, cached);
    // Without a handle: the CPU is named too.
    let b = m
        .alloc_on(CpuId(0), NodeId::ZERO, MOVABLE, Order::ZERO)
        .unwrap();
    assert!(m.inspect().hooks().take().iter().any(|e| matches!(
        e,
        Event::Alloc {
            cpu: Some(CpuId(0)),
            ..
        }
    )));
    m.free_on(CpuId(0), b).unwrap();
    assert!(matches!(
        m.inspect().hooks().take()[..],
        [Event::Free {
            cpu: Some(CpuId(0)),
            ..
        }]
    ));
}

#[test]
fn the_first_unmovable_request_falls_back_and_claims() {
    // Free memory starts out movable: an unmovable request has to claim.
    let m = machine(1 << 14, 0);
    let b = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO).unwrap();
    let fallbacks: Vec<_> = m
        .inspect()
        .hooks()
        .take()
        .into_iter()
        .filter(|e| matches!(e, Event::Fallback { .. }))
        .collect();
    assert_eq!(fallbacks.len(), 1, "{fallbacks:?}");
    assert!(matches!(
        fallbacks[0],
        Event::Fallback {
            wanted: MigrateType::Unmovable,
            claimed: true,
            ..
        }
    ));
    // The pageblock is unmovable now: the next one takes its own lists.
    let b2 = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO).unwrap();
    assert!(
        !m.inspect()
            .hooks()
            .take()
            .iter()
            .any(|e| matches!(e, Event::Fallback { .. }))
    );
    m.free(b).unwrap();
    m.free(b2).unwrap();
}

/// Moves every block it holds, counting the moves.
#[derive(Default)]
struct Mover {
    blocks: std::collections::HashMap<Pfn, pageframe::Block>,
    moved: u64,
}

impl Migrator for Mover {
    fn isolate(&mut self, pfn: Pfn, _: Order) -> Option<pageframe::Block> {
        self.blocks.remove(&pfn)
    }
    fn migrate(&mut self, _: Pfn, _: Pfn, _: Order, _: MigrateMode) -> Result<(), MigrateError> {
        self.moved += 1;
        Ok(())
    }
    fn putback(&mut self, b: pageframe::Block) {
        self.blocks.insert(b.pfn(), b);
    }
    fn migrated(&mut self, b: pageframe::Block, _: Pfn) {
        self.blocks.insert(b.pfn(), b);
    }
}

#[test]
fn compaction_is_bracketed_and_reports_each_move() {
    let m = machine(1 << 13, 0);
    let mut all = Vec::new();
    while let Ok(b) = m.alloc(NodeId::ZERO, MOVABLE, Order::ZERO) {
        all.push(b);
    }
    let mut mover = Mover::default();
    for b in all {
        if b.pfn().get() % 8 == 0 {
            mover.blocks.insert(b.pfn(), b);
        } else {
            m.free(b).unwrap();
        }
    }
    m.inspect().hooks().take();
    let out = m.compact_node(NodeId::ZERO, &mut mover).unwrap();
    let ev = m.inspect().hooks().take();
    assert!(mover.moved > 0);
    assert_eq!(
        ev.first(),
        Some(&Event::CompactBegin {
            node: NodeId::ZERO,
            order: None
        })
    );
    assert_eq!(
        ev.last(),
        Some(&Event::CompactEnd {
            node: NodeId::ZERO,
            order: None,
            result: out.result
        })
    );
    assert_ne!(out.result, CompactResult::Skipped);
    let moves: Vec<_> = ev
        .iter()
        .filter_map(|e| match e {
            Event::Migrate {
                from, to, moved, ..
            } => Some((*from, *to, *moved)),
            _ => None,
        })
        .collect();
    assert_eq!(moves.len() as u64, mover.moved);
    for (from, to, moved) in moves {
        assert!(moved);
        assert!(mover.blocks.contains_key(&to) || from != to);
    }
    for (_, b) in mover.blocks.drain() {
        m.free(b).unwrap();
    }
    m.validate().unwrap();
}

#[test]
fn a_contiguous_range_reports_its_isolation() {
    let m = machine(1 << 13, 0);
    let seg = m
        .alloc_contig(NodeId::ZERO, Gfp::KERNEL, 1024, 512, &mut Mover::default())
        .unwrap();
    let isolations: Vec<_> = m
        .inspect()
        .hooks()
        .take()
        .into_iter()
        .filter(|e| matches!(e, Event::Isolate { .. }))
        .collect();
    assert_eq!(
        isolations,
        [Event::Isolate {
            range: seg.range(),
            ok: true
        }]
    );
    let range = seg.range();
    m.free_segment(seg).unwrap();
    assert_eq!(m.inspect().hooks().take(), [Event::FreeRange { range }]);
    // Part of an allocation given back by number: the part, named.
    let b = m
        .alloc(NodeId::ZERO, MOVABLE, Order::new(2).unwrap())
        .unwrap();
    let (p, _) = b.into_raw();
    m.inspect().hooks().take();
    // SAFETY: the block was allocated above and is held only as `p`.
    unsafe { m.free_raw(pageframe::PfnRange::new(p, p + 4)) }.unwrap();
    assert_eq!(
        m.inspect().hooks().take(),
        [Event::FreeRange {
            range: pageframe::PfnRange::new(p, p + 4)
        }]
    );
}
