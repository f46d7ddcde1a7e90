//! Memory-map adapters: real-shaped maps of each boot protocol (holes,
//! reserved and ACPI regions, bad RAM, unaligned ends, overlaps, unsorted
//! entries), and the frame set against a model.

use std::collections::BTreeSet;

use pageframe::boot::{FrameRanges, MapError};
use pageframe::{Pfn, PfnRange, PhysAddr};
use proptest::prelude::*;

fn r(a: u64, b: u64) -> PfnRange {
    PfnRange::new(Pfn::new(a), Pfn::new(b))
}

#[test]
fn bootloader_api_bios_map_of_a_6_gib_guest() {
    use bootloader_api::info::{MemoryRegion, MemoryRegionKind::*};
    let m = |start, end, kind| MemoryRegion { start, end, kind };
    let regions = [
        m(0x0, 0x1000, Bootloader),
        m(0x1000, 0x9fc00, Usable),
        m(0x9fc00, 0xa0000, UnknownBios(2)),
        m(0xf0000, 0x10_0000, UnknownBios(2)),
        m(0x10_0000, 0x40_0000, Bootloader),
        m(0x40_0000, 0xbffd_f000, Usable),
        m(0xbffd_f000, 0xc000_0000, UnknownBios(2)),
        m(0xfeff_c000, 0xff00_0000, UnknownBios(2)),
        m(0xfffc_0000, 0x1_0000_0000, UnknownBios(2)),
        m(0x1_0000_0000, 0x1_c000_0000, Usable),
        // ACPI tables the loader reports inside usable memory.
        m(0x1_0000_0800, 0x1_0000_1000, UnknownBios(3)),
    ];
    let ram = FrameRanges::<16>::from_bootloader_api(&regions).unwrap();
    assert_eq!(
        ram.ranges(),
        [r(0x1, 0x9f), r(0x400, 0xbffdf), r(0x10_0001, 0x1c_0000)]
    );
    assert!(!ram.contains(Pfn::new(0x10_0000)), "the ACPI frame is out");
    assert!(ram.contains(Pfn::new(0x10_0001)));
}

#[test]
fn uefi_ovmf_map_after_exit_boot_services() {
    use uefi_raw::table::boot::{MemoryDescriptor, MemoryType};
    let d = |ty, phys_start: u64, pages: u64| MemoryDescriptor {
        ty,
        phys_start,
        page_count: pages,
        ..MemoryDescriptor::default()
    };
    // Unsorted, as firmware may hand it over; boot services memory next
    // to conventional memory merges with it.
    let map = [
        d(MemoryType::CONVENTIONAL, 0x10_0000, 0x700),
        d(MemoryType::BOOT_SERVICES_CODE, 0x0, 0xa0),
        d(MemoryType::LOADER_DATA, 0x80_0000, 0x100),
        d(MemoryType::BOOT_SERVICES_DATA, 0x90_0000, 0x3f00),
        d(MemoryType::ACPI_RECLAIM, 0x7fb_0000, 0x10),
        d(MemoryType::ACPI_NON_VOLATILE, 0x7fc_0000, 0x40),
        d(MemoryType::RUNTIME_SERVICES_DATA, 0x7f0_0000, 0x20),
        d(MemoryType::CONVENTIONAL, 0x80_0000 - 0x1000, 1),
        d(MemoryType::MMIO, 0xffc0_0000, 0x400),
        d(MemoryType::PERSISTENT_MEMORY, 0x2_0000_0000, 0x1000),
        d(MemoryType::CONVENTIONAL, 0x1_0000_0000, 0x4_0000),
        d(MemoryType::UNUSABLE, 0x1_0001_0000, 1),
    ];
    let ram = FrameRanges::<16>::from_uefi(&map).unwrap();
    assert_eq!(
        ram.ranges(),
        [
            r(0x0, 0xa0),
            r(0x100, 0x800),
            r(0x900, 0x4800),
            r(0x10_0000, 0x10_0010),
            r(0x10_0011, 0x14_0000)
        ]
    );
}

#[test]
fn multiboot2_map_with_unaligned_ends_and_bad_ram() {
    use multiboot2::{MemoryArea, MemoryAreaType};
    let a = |base, len, t| MemoryArea::new(base, len, t);
    let map = [
        a(0x0, 0x9fc00, MemoryAreaType::Available),
        a(0x9fc00, 0x400, MemoryAreaType::Reserved),
        a(0xf0000, 0x10000, MemoryAreaType::Reserved),
        a(0x10_0000, 0x7fe_0800 - 0x10_0000, MemoryAreaType::Available),
        a(0x7fe_0800, 0x1f800, MemoryAreaType::AcpiAvailable),
        a(0x7ff_f000, 0x1000, MemoryAreaType::ReservedHibernate),
        // A reserved sliver inside usable memory takes its whole frame.
        a(0x100_0010, 0x10, MemoryAreaType::Reserved),
        a(0x300_0000, 0x2000, MemoryAreaType::Defective),
        a(0x1_0000_0000, 0x4000_0fff, MemoryAreaType::Available),
    ];
    let ram = FrameRanges::<16>::from_multiboot2(&map).unwrap();
    assert_eq!(
        ram.ranges(),
        [
            r(0x0, 0x9f),
            r(0x100, 0x1000),
            r(0x1001, 0x3000),
            r(0x3002, 0x7fe0),
            r(0x10_0000, 0x14_0000)
        ]
    );
}

#[test]
fn limine_map_with_reclaimable_and_framebuffer() {
    use limine::memory_map::{Entry, EntryType};
    let e = |base, length, entry_type| Entry {
        base,
        length,
        entry_type,
    };
    let entries = [
        e(0x1_0000_0000, 0x8000_0000, EntryType::USABLE),
        e(0x1000, 0x9e000, EntryType::USABLE),
        e(0x10_0000, 0x20_0000, EntryType::EXECUTABLE_AND_MODULES),
        e(0x30_0000, 0x100_0000, EntryType::USABLE),
        e(0x130_0000, 0x10_0000, EntryType::BOOTLOADER_RECLAIMABLE),
        e(0xfd00_0000, 0x30_0000, EntryType::FRAMEBUFFER),
        e(0x1_4000_0000, 0x1000, EntryType::BAD_MEMORY),
    ];
    let refs: Vec<&Entry> = entries.iter().collect();
    let mut ram = FrameRanges::<16>::from_limine(&refs).unwrap();
    assert_eq!(
        ram.ranges(),
        [
            r(0x1, 0x9f),
            r(0x300, 0x1300),
            r(0x10_0000, 0x14_0000),
            r(0x14_0001, 0x18_0000)
        ]
    );
    // Once the kernel is done with the loader's data, it goes in too.
    ram.add_usable(PhysAddr::new(0x130_0000), PhysAddr::new(0x140_0000))
        .unwrap();
    assert_eq!(ram.ranges()[1], r(0x300, 0x1400));
}

#[test]
fn bad_maps_get_typed_errors() {
    assert_eq!(
        FrameRanges::<4>::from_entries([(u64::MAX - 0xfff, 0x2000, true)]),
        Err(MapError::BadEntry {
            start: u64::MAX - 0xfff,
            len: 0x2000
        })
    );
    assert_eq!(
        FrameRanges::<2>::from_entries([
            (0x0, 0x1000, true),
            (0x2000, 0x1000, true),
            (0x4000, 0x1000, true)
        ]),
        Err(MapError::TooManyRanges)
    );
    let empty = FrameRanges::<4>::from_entries([]).unwrap();
    assert_eq!((empty.ranges().len(), empty.frames()), (0, 0));
    // Sub-frame usable entries hold no frame.
    let tiny =
        FrameRanges::<4>::from_entries([(0x10, 0x800, true), (0x1800, 0x1000, true)]).unwrap();
    assert_eq!(tiny.frames(), 0);
}

#[test]
fn take_top_carves_metadata_from_the_highest_range_that_fits() {
    let mut ram = FrameRanges::<8>::new();
    ram.insert(r(0x100, 0x8000)).unwrap();
    ram.insert(r(0x10_0000, 0x10_0010)).unwrap();
    let before = ram.clone();
    assert_eq!(ram.take_top(0x20, r(0, u64::MAX)), Some(r(0x7fe0, 0x8000)));
    assert_eq!(ram.frames(), before.frames() - 0x20);
    assert_eq!(
        ram.take_top(0x10, r(0x10_0000, u64::MAX)),
        Some(r(0x10_0000, 0x10_0010))
    );
    assert_eq!(ram.take_top(0x1_0000, r(0, u64::MAX)), None);
    assert_eq!(ram.take_top(0, r(0, u64::MAX)), None);
    assert_eq!(ram.ranges(), [r(0x100, 0x7fe0)]);
}

#[derive(Clone, Debug)]
enum SetOp {
    Insert(u64, u64),
    Remove(u64, u64),
}

fn set_op() -> impl Strategy<Value = SetOp> {
    (any::<bool>(), 0u64..120, 0u64..24).prop_map(|(ins, a, l)| {
        if ins {
            SetOp::Insert(a, a + l)
        } else {
            SetOp::Remove(a, a + l)
        }
    })
}

proptest! {
    /// Every operation leaves sorted, disjoint, non-adjacent ranges that
    /// hold exactly the model's frames; one that would need more ranges
    /// than the set holds fails and changes nothing.
    #[test]
    fn frame_ranges_match_a_set_of_frames(ops in proptest::collection::vec(set_op(), 1..60)) {
        let mut set = FrameRanges::<6>::new();
        let mut model = BTreeSet::new();
        for op in ops {
            let before = set.clone();
            let (res, a, b, ins) = match op {
                SetOp::Insert(a, b) => (set.insert(r(a, b)), a, b, true),
                SetOp::Remove(a, b) => (set.remove(r(a, b)), a, b, false),
            };
            match res {
                Ok(()) => {
                    for p in a..b {
                        if ins { model.insert(p); } else { model.remove(&p); }
                    }
                }
                Err(e) => {
                    prop_assert_eq!(e, MapError::TooManyRanges);
                    prop_assert_eq!(&set, &before, "a failed operation changed the set");
                }
            }
            let rs = set.ranges();
            for w in rs.windows(2) {
                prop_assert!(w[0].end < w[1].start, "{:?} not sorted, disjoint, apart", rs);
            }
            prop_assert!(rs.iter().all(|x| !x.is_empty()));
            let frames: BTreeSet<u64> = rs.iter().flat_map(|x| x.start.get()..x.end.get()).collect();
            prop_assert_eq!(&frames, &model);
            prop_assert_eq!(set.frames(), model.len() as u64);
            for p in 0..150 {
                prop_assert_eq!(set.contains(Pfn::new(p)), model.contains(&p));
            }
        }
    }
}
