//! The planner: zone layout, node-local metadata carved from usable
//! frames, the machine built in place over simulated physical memory.

use std::alloc::{Layout, alloc_zeroed};

use pageframe::boot::{Builder, FrameRanges, Plan, PlanError};
use pageframe::{
    Gfp, Machine, MachineConfig, NodeId, Order, Pfn, PfnRange, PhysAddr, ZoneKind,
    topology::Topology,
};

const GIB: u64 = 1 << 18;

fn r(a: u64, b: u64) -> PfnRange {
    PfnRange::new(Pfn::new(a), Pfn::new(b))
}

/// Host memory standing in for the carved frames: each carved range gets a
/// page-aligned buffer, and `virt` maps addresses inside it.
struct Carved(Vec<(PfnRange, *mut u8)>);

impl Carved {
    fn for_plan<const N: usize>(plan: &Plan<N>) -> Carved {
        let ranges = std::iter::once(plan.machine_frames()).chain(plan.zones().map(|z| z.metadata));
        Carved(
            ranges
                .map(|r| {
                    let layout = Layout::from_size_align((r.len() * 4096) as usize, 4096).unwrap();
                    // SAFETY: a non-zero size; leaked for the test's run.
                    (r, unsafe { alloc_zeroed(layout) })
                })
                .collect(),
        )
    }

    fn virt(&self, pa: PhysAddr) -> *mut u8 {
        let (r, base) = self
            .0
            .iter()
            .find(|(r, _)| r.contains(pa.pfn_down()))
            .expect("only carved frames are written");
        // SAFETY: inside the buffer of range `r`.
        unsafe { base.add((pa.get() - r.start.addr().get()) as usize) }
    }
}

/// QEMU's map of a 6 GiB guest: 3 GiB below the PCI hole, 3 above 4 GiB.
fn six_gib() -> FrameRanges<16> {
    let mut ram = FrameRanges::new();
    ram.add_usable(PhysAddr::new(0x10_0000), PhysAddr::new(0xbffd_f000))
        .unwrap();
    ram.add_usable(PhysAddr::new(1 << 32), PhysAddr::new(7 << 30))
        .unwrap();
    ram
}

#[test]
fn one_node_from_map_to_first_frame() {
    let ram = six_gib();
    let plan = Plan::new(&ram, &[], MachineConfig::SINGLE_NODE).unwrap();
    let zones: Vec<_> = plan.zones().map(|z| (z.node, z.kind, z.span)).collect();
    assert_eq!(
        zones,
        [
            (NodeId::ZERO, ZoneKind::Dma32, r(0x100, 0xbffdf)),
            (NodeId::ZERO, ZoneKind::Normal, r(4 * GIB, 7 * GIB)),
        ]
    );
    for z in plan.zones() {
        assert!(z.span.contains_range(&z.metadata), "node-local metadata");
        assert!(z.metadata.len() * 4096 >= z.metadata_bytes as u64);
        assert!(z.metadata.len() * 4096 < z.metadata_bytes as u64 + 4096);
    }
    assert_eq!(plan.free().frames() + plan.carved_frames(), ram.frames());
    for c in std::iter::once(plan.machine_frames()).chain(plan.zones().map(|z| z.metadata)) {
        assert!(!plan.free().contains(c.start) && !plan.free().contains(Pfn::new(c.end.get() - 1)));
        assert!(ram.contains(c.start));
    }
    let carved = Carved::for_plan(&plan);
    // SAFETY: `carved` maps every carved frame to host memory the test
    // leaks; nothing else uses it.
    let m: &mut Machine<'static> =
        unsafe { plan.build(Builder::new(*plan.config()), |pa| carved.virt(pa)) }.unwrap();
    assert_eq!(m.inspect().managed_pages(), plan.free().frames());
    let m: &Machine<'static> = m;
    let a = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO).unwrap();
    assert_eq!(a.zone(), ZoneKind::Normal);
    assert!(plan.free().contains(a.pfn()));
    let low = m
        .alloc(
            NodeId::ZERO,
            Gfp::KERNEL | Gfp::DMA32,
            Order::new(9).unwrap(),
        )
        .unwrap();
    assert!(low.pfn() < Pfn::new(4 * GIB));
    m.free(a).unwrap();
    m.free(low).unwrap();
    m.validate().unwrap();
}

#[test]
fn two_nodes_get_their_own_zones_and_metadata() {
    let ram = six_gib();
    // Node 0: everything below 4 GiB and the first GiB above; node 1: the
    // top 2 GiB.
    let affinity = [
        (NodeId::ZERO, r(0, 5 * GIB)),
        (NodeId::new(1).unwrap(), r(5 * GIB, 7 * GIB)),
    ];
    let cfg = MachineConfig::new(Topology::uniform(2).unwrap());
    let plan = Plan::new(&ram, &affinity, cfg).unwrap();
    let zones: Vec<_> = plan
        .zones()
        .map(|z| (z.node.index(), z.kind, z.span))
        .collect();
    assert_eq!(
        zones,
        [
            (0, ZoneKind::Dma32, r(0x100, 0xbffdf)),
            (0, ZoneKind::Normal, r(4 * GIB, 5 * GIB)),
            (1, ZoneKind::Normal, r(5 * GIB, 7 * GIB)),
        ]
    );
    for z in plan.zones() {
        assert!(z.span.contains_range(&z.metadata), "node-local metadata");
    }
    let carved = Carved::for_plan(&plan);
    // SAFETY: as in the test above.
    let m: &Machine<'static> =
        unsafe { plan.build(Builder::new(*plan.config()), |pa| carved.virt(pa)) }.unwrap();
    let one = NodeId::new(1).unwrap();
    let a = m
        .alloc(one, Gfp::KERNEL | Gfp::THISNODE, Order::ZERO)
        .unwrap();
    assert!(r(5 * GIB, 7 * GIB).contains(a.pfn()));
    assert_eq!(m.inspect().node_of(a.pfn()), Some(one));
    m.free(a).unwrap();
    m.validate().unwrap();
}

#[test]
fn memory_outside_every_affinity_range_is_left_out() {
    let ram = six_gib();
    let plan = Plan::new(
        &ram,
        &[(NodeId::ZERO, r(4 * GIB, 6 * GIB))],
        MachineConfig::SINGLE_NODE,
    )
    .unwrap();
    assert_eq!(plan.zones().count(), 1);
    assert_eq!(plan.free().frames() + plan.carved_frames(), 2 * GIB);
}

#[test]
fn impossible_plans_get_typed_errors() {
    let cfg = MachineConfig::SINGLE_NODE;
    assert_eq!(
        Plan::new(&FrameRanges::<4>::new(), &[], cfg).err(),
        Some(PlanError::NoMemory)
    );
    let ram = six_gib();
    assert_eq!(
        Plan::new(&ram, &[(NodeId::new(3).unwrap(), r(0, GIB))], cfg).err(),
        Some(PlanError::NoSuchNode(NodeId::new(3).unwrap()))
    );
    assert_eq!(
        Plan::new(&ram, &[(NodeId::ZERO, r(8 * GIB, 9 * GIB))], cfg).err(),
        Some(PlanError::NoMemory),
        "no usable frame on the named ranges"
    );
    let two = MachineConfig::new(Topology::uniform(2).unwrap());
    let interleaved = [
        (NodeId::ZERO, r(4 * GIB, 5 * GIB)),
        (NodeId::new(1).unwrap(), r(5 * GIB, 6 * GIB)),
        (NodeId::ZERO, r(6 * GIB, 7 * GIB)),
    ];
    assert_eq!(
        Plan::new(&ram, &interleaved, two).err(),
        Some(PlanError::Interleaved(
            NodeId::new(1).unwrap(),
            ZoneKind::Normal
        ))
    );
    // Frames scattered one in two: no range holds a zone's metadata.
    let mut sparse = FrameRanges::<512>::new();
    for i in 0..300 {
        sparse.insert(r(0x1000 + 2 * i, 0x1001 + 2 * i)).unwrap();
    }
    assert!(matches!(
        Plan::new(&sparse, &[], cfg),
        Err(PlanError::NoRoom { .. })
    ));
}

#[test]
fn a_misaligned_machine_address_is_refused() {
    let plan = Plan::new(&six_gib(), &[], MachineConfig::SINGLE_NODE).unwrap();
    let carved = Carved::for_plan(&plan);
    // SAFETY: nothing is written: the misalignment is caught first.
    let r = unsafe {
        plan.build(Builder::new(*plan.config()), |pa| {
            carved.virt(pa).wrapping_add(1)
        })
    };
    assert_eq!(r.err(), Some(PlanError::Misaligned));
}

/// Small enough for Miri: the machine and a zone's metadata written into
/// carved frames through raw pointers, then used.
#[test]
fn miri_a_plan_builds_its_machine_in_place() {
    let mut ram = FrameRanges::<4>::new();
    ram.insert(r(0x1000, 0x1000 + 4096)).unwrap();
    let plan = Plan::new(&ram, &[], MachineConfig::SINGLE_NODE).unwrap();
    let carved = Carved::for_plan(&plan);
    // SAFETY: as in the tests above.
    let m: &Machine<'static> =
        unsafe { plan.build(Builder::new(*plan.config()), |pa| carved.virt(pa)) }.unwrap();
    let a = m
        .alloc(NodeId::ZERO, Gfp::KERNEL, Order::new(3).unwrap())
        .unwrap();
    assert!(plan.free().contains(a.pfn()));
    m.free(a).unwrap();
    assert_eq!(m.inspect().free_pages(), plan.free().frames());
    m.validate().unwrap();
}

/// A plan builds a machine with hooks in the frames it carved; hooks too
/// large for them are refused before anything is written.
#[test]
fn a_plan_builds_a_machine_with_hooks() {
    use pageframe::debug::{Event, Hooks};
    use pageframe::lock::SpinLock;
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

    struct Allocs(AtomicU64);
    impl Hooks for Allocs {
        fn event(&self, e: &Event) {
            if let Event::Alloc { .. } = e {
                self.0.fetch_add(1, Relaxed);
            }
        }
    }
    static COUNT: Allocs = Allocs(AtomicU64::new(0));
    let mut ram = FrameRanges::<4>::new();
    ram.insert(r(0x1000, 0x1000 + 4096)).unwrap();
    let plan = Plan::new(&ram, &[], MachineConfig::SINGLE_NODE).unwrap();
    let carved = Carved::for_plan(&plan);
    // SAFETY: as in the tests above.
    let m: &Machine<'static, (SpinLock, &Allocs)> = unsafe {
        plan.build(Builder::new(*plan.config()).hooks(&COUNT), |pa| {
            carved.virt(pa)
        })
    }
    .unwrap();
    let a = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO).unwrap();
    assert_eq!(COUNT.0.load(Relaxed), 1);
    m.free(a).unwrap();

    /// Hooks of 64 KiB (their state never read: only their size counts).
    #[allow(dead_code)]
    struct Huge([u8; 1 << 16]);
    impl Hooks for Huge {}
    let carved = Carved::for_plan(&plan);
    // SAFETY: as above; the call must refuse before writing.
    let r = unsafe {
        let huge = Builder::new(*plan.config())
            .lock::<SpinLock>()
            .hooks(Huge([0; 1 << 16]));
        plan.build(huge, |pa| carved.virt(pa))
    };
    assert!(matches!(r, Err(PlanError::NoRoom { .. })));
}

#[test]
fn metadata_can_be_kept_where_the_boot_tables_map() {
    let ram = six_gib();
    let low = r(0, 4 * GIB);
    let plan = Plan::new_within(&ram, &[], MachineConfig::SINGLE_NODE, low).unwrap();
    assert!(
        low.contains_range(&plan.machine_frames()),
        "{:?}",
        plan.machine_frames()
    );
    for z in plan.zones() {
        assert!(low.contains_range(&z.metadata), "{z:?}");
    }
    let normal = plan.zones().find(|z| z.kind == ZoneKind::Normal).unwrap();
    assert_eq!(
        normal.span,
        r(4 * GIB, 7 * GIB),
        "the span is still the zone's"
    );
    let carved = Carved::for_plan(&plan);
    // SAFETY: as in the tests above.
    let m: &Machine<'static> =
        unsafe { plan.build(Builder::new(*plan.config()), |pa| carved.virt(pa)) }.unwrap();
    assert_eq!(m.inspect().managed_pages(), plan.free().frames());
    assert_eq!(
        Plan::new_within(&ram, &[], MachineConfig::SINGLE_NODE, r(0, 4)).err(),
        Some(PlanError::NoRoom {
            bytes: Plan::new(&ram, &[], MachineConfig::SINGLE_NODE)
                .unwrap()
                .zones()
                .next()
                .unwrap()
                .metadata_bytes
        }),
        "a window too small"
    );
}

/// The zones of a plan were laid out for its configuration: a builder of
/// another one is refused before anything is written.
#[test]
fn a_builder_of_another_configuration_is_refused() {
    let plan = Plan::new(&six_gib(), &[], MachineConfig::SINGLE_NODE).unwrap();
    let carved = Carved::for_plan(&plan);
    let other = MachineConfig {
        phys_bits: 40,
        ..MachineConfig::SINGLE_NODE
    };
    // SAFETY: nothing is written: the configuration is checked first.
    let r = unsafe { plan.build(Builder::new(other), |pa| carved.virt(pa)) };
    assert_eq!(r.err(), Some(PlanError::OtherConfig));
}
