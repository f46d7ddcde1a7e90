//! Turning the firmware memory map into `pageframe` zones.
//!
//! Usable RAM is the map's RAM minus low memory (below 1 MiB: real-mode
//! structures and the boot data), the kernel image and the boot data. Each
//! zone (DMA32 below 4 GiB, Normal above, as the map dictates) spans its
//! usable RAM, holes included; its metadata is carved from the top of that
//! same zone's usable RAM and the rest is handed over. Nothing is sized for
//! one machine: metadata scales with the span the map reports.

use crate::bringup::{KernelMachine, NODE};
use crate::memmap::{CapacityError, PAGE_SIZE, PhysRange, RangeSet};
use crate::time::{Cycles, Instant};
use core::fmt;
use core::mem::MaybeUninit;
use pageframe::{Pfn, PfnRange, ZoneKind};

/// Everything below this address stays out of the allocator.
pub const LOW_MEMORY_END: u64 = 1 << 20;
/// The DMA32 zone ends at 4 GiB.
pub const DMA32_END: u64 = 1 << 32;

/// The address window of a zone kind the kernel creates.
pub const fn window(kind: ZoneKind) -> PhysRange {
    match kind {
        ZoneKind::Dma32 => PhysRange::new(0, DMA32_END),
        ZoneKind::Normal => PhysRange::new(DMA32_END, u64::MAX),
        // Not created: no ISA DMA devices, no movable carve-out.
        ZoneKind::Dma | ZoneKind::Movable => PhysRange::EMPTY,
    }
}

/// Why RAM could not be handed to the allocator.
#[derive(Debug)]
pub enum ZoneSetupError {
    /// A range set overflowed (a memory map with absurdly many holes).
    TooManyRanges,
    /// No usable range in the zone is large enough for its metadata.
    NoRoomForMetadata {
        /// The zone.
        kind: ZoneKind,
        /// Bytes needed.
        bytes: usize,
    },
    /// The machine refused the zone or a usable range.
    Setup(ZoneKind, pageframe::SetupError),
}

impl fmt::Display for ZoneSetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooManyRanges => write!(f, "memory map too fragmented"),
            Self::NoRoomForMetadata { kind, bytes } => {
                write!(f, "no room for {bytes} bytes of {kind} metadata")
            }
            Self::Setup(kind, e) => write!(f, "zone {kind}: {e}"),
        }
    }
}

impl From<CapacityError> for ZoneSetupError {
    fn from(_: CapacityError) -> Self {
        Self::TooManyRanges
    }
}

/// Usable RAM: `ram` without low memory, the kernel image and the boot
/// data, in whole pages (a partly reserved page is reserved).
pub fn usable_ram(
    ram: &RangeSet,
    kernel: PhysRange,
    boot_data: &[PhysRange],
) -> Result<RangeSet, CapacityError> {
    let mut usable = ram.clone();
    usable.remove(PhysRange::new(0, LOW_MEMORY_END))?;
    for r in core::iter::once(&kernel).chain(boot_data) {
        usable.remove(PhysRange::new(
            r.start / PAGE_SIZE * PAGE_SIZE,
            r.end.next_multiple_of(PAGE_SIZE),
        ))?;
    }
    Ok(usable)
}

/// What setting up one zone did, for the report.
#[derive(Debug, Clone, Copy)]
pub struct ZoneSetup {
    /// The zone.
    pub kind: ZoneKind,
    /// Its span, holes included.
    pub span: PfnRange,
    /// Where its metadata lives.
    pub metadata: PhysRange,
    /// Bytes of metadata the zone asked for.
    pub metadata_bytes: usize,
    /// Usable ranges handed over.
    pub ranges: usize,
    /// Time to create the zone and hand the ranges over.
    pub cycles: Cycles,
}

/// Adds the zone of `kind` to `machine`, spanning the part of `spans`
/// inside its window, and hands the part of `usable` inside it over. Its metadata is carved out of
/// `usable`, which afterwards holds exactly the frames handed over.
/// `Ok(None)` when the window holds no usable RAM.
///
/// # Safety
/// Every address in `usable ∩ window` must be RAM that nothing else uses
/// and that is identity-mapped, writable, for the rest of the kernel's life.
pub unsafe fn build_zone(
    machine: &mut KernelMachine,
    kind: ZoneKind,
    usable: &mut RangeSet,
    spans: &RangeSet,
) -> Result<Option<ZoneSetup>, ZoneSetupError> {
    let start = Instant::now();
    let window = window(kind);
    if usable.clipped(window).ranges().len() == 0 {
        return Ok(None);
    }
    let inside = spans.clipped(window);
    let (Some(first), Some(last)) = (inside.ranges().next(), inside.ranges().last()) else {
        return Ok(None);
    };
    let span = PfnRange::new(
        Pfn::new(first.start / PAGE_SIZE),
        Pfn::new(last.end / PAGE_SIZE),
    );
    let bytes = machine.zone_metadata_bytes(span);
    let metadata = usable
        .take_top(bytes as u64, window)
        .ok_or(ZoneSetupError::NoRoomForMetadata { kind, bytes })?;
    // SAFETY: `metadata` was usable RAM inside the window and is now removed
    // from `usable`, so nothing else will use it; the caller guarantees it
    // is mapped at its physical address for the kernel's lifetime.
    let meta: &'static mut [MaybeUninit<u8>] =
        unsafe { core::slice::from_raw_parts_mut(metadata.start as *mut MaybeUninit<u8>, bytes) };
    let setup = |e| ZoneSetupError::Setup(kind, e);
    machine.add_zone(NODE, kind, span, meta).map_err(setup)?;
    let handed = usable.clipped(window);
    for r in handed.ranges() {
        let range = PfnRange::new(Pfn::new(r.start / PAGE_SIZE), Pfn::new(r.end / PAGE_SIZE));
        machine.add_free_range(range).map_err(setup)?;
    }
    Ok(Some(ZoneSetup {
        kind,
        span,
        metadata,
        metadata_bytes: bytes,
        ranges: handed.ranges().len(),
        cycles: start.elapsed(),
    }))
}
