//! From a boot protocol's memory map to the frames a kernel hands to
//! [`crate::Machine::add_free_range`].
//!
//! [`FrameRanges`] is a set of frames kept as sorted, disjoint,
//! non-adjacent ranges in a fixed array (no heap): usable memory goes in
//! rounded inward to whole frames, anything else reported (reserved, ACPI,
//! bad RAM, firmware, the bootloader's own data) comes out rounded outward,
//! so that a frame half covered by a reserved entry is never handed over,
//! whatever order or overlap the firmware's entries have. Each boot
//! protocol has an adapter behind a feature, built on that protocol's own
//! crate:
//!
//! | feature | crate | call |
//! |---|---|---|
//! | `bootloader_api` | `bootloader_api` 0.11 (the `bootloader` crate's BIOS and UEFI loaders) | `FrameRanges::from_bootloader_api` |
//! | `limine` | `limine` 0.5 (0.6 needs nightly) | `FrameRanges::from_limine` |
//! | `multiboot2` | `multiboot2` 0.28 (GRUB) | `FrameRanges::from_multiboot2` |
//! | `uefi` | `uefi-raw` 0.17 (the memory map after `ExitBootServices`) | `FrameRanges::from_uefi` |
//!
//! Other maps (E820, a device tree's `/memory` nodes) go through
//! [`FrameRanges::add_usable`] and [`FrameRanges::reserve`].
//!
//! ## From the memory map to the first frame
//!
//! The [`Plan`] lays the zones out, carves their metadata and the machine
//! itself from the usable frames, and [`Plan::build`] writes them in place
//! through the kernel's direct map:
//!
//! ```
//! use pageframe::boot::{Builder, FrameRanges, Plan};
//! use pageframe::{Gfp, Machine, MachineConfig, NodeId, Order, PhysAddr};
//! # let ram = std::alloc::Layout::from_size_align(64 << 20, 4096).unwrap();
//! # let ram_base = unsafe { std::alloc::alloc_zeroed(ram) } as u64; // physical 0 on the host
//! # let phys_offset = ram_base;
//! # let memory_regions = [(0x10_0000u64, (64 << 20) - 0x10_0000, true), (0x9fc00, 0x400, false)];
//!
//! // bootloader_api: FrameRanges::from_bootloader_api(&boot_info.memory_regions)
//! let usable = FrameRanges::<128>::from_entries(memory_regions)?;
//! let config = MachineConfig::SINGLE_NODE;
//! let plan = Plan::new(&usable, &[], config)?;
//! // SAFETY: all RAM is mapped at `phys_offset` (the kernel's direct map),
//! // and the frames the plan carved are used by nothing else.
//! let machine: &Machine<'static> = unsafe {
//!     plan.build(Builder::new(config), |pa: PhysAddr| (phys_offset + pa.get()) as *mut u8)
//! }?;
//! let frame = machine.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO)?;
//! assert!(usable.contains(frame.pfn()));
//! machine.free(frame)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Per-CPU caches come next ([`crate::Machine::enable_pcp`], with memory
//! from [`crate::Machine::alloc_contig`] once the machine runs), and on
//! NUMA machines the plan takes the firmware's memory affinity ranges.
//!
//! ```
//! use pageframe::boot::FrameRanges;
//! use pageframe::{Pfn, PfnRange, PhysAddr};
//!
//! // An E820 map as QEMU's SeaBIOS reports it for 2 GiB.
//! let mut ram = FrameRanges::<16>::new();
//! ram.add_usable(PhysAddr::new(0), PhysAddr::new(0x9fc00)).unwrap();
//! ram.reserve(PhysAddr::new(0x9fc00), PhysAddr::new(0xa0000)).unwrap();
//! ram.reserve(PhysAddr::new(0xf0000), PhysAddr::new(0x10_0000)).unwrap();
//! ram.add_usable(PhysAddr::new(0x10_0000), PhysAddr::new(0x7ffd_f000)).unwrap();
//! ram.reserve(PhysAddr::new(0x7ffd_f000), PhysAddr::new(0x8000_0000)).unwrap();
//! assert_eq!(
//!     ram.ranges(),
//!     [
//!         PfnRange::new(Pfn::new(0), Pfn::new(0x9f)),
//!         PfnRange::new(Pfn::new(0x100), Pfn::new(0x7ffdf)),
//!     ]
//! );
//! ```
//!
//! ## A newcomer's path: from the repository to a frame in your kernel
//!
//! 1. **Boot it as it is.** `examples/kernel-bootloader/run.sh` builds a
//!    blog_os-style kernel (the `bootloader` crate 0.11, UEFI, OVMF) and
//!    boots it in QEMU: it reads `bootloader_api`'s memory map, plans,
//!    builds, enables a per-CPU cache, allocates every free frame once,
//!    takes a 2 MiB range with migration and prints a fragmentation map.
//!    `examples/kernel/run.sh` does everything else on a PVH kernel:
//!    ACPI CPUs and NUMA nodes, compaction, THP swap, 1 GiB pages, hotplug.
//! 2. **Add the crate** with your boot protocol's feature:
//!    `pageframe = { version = "0.1", features = ["bootloader_api"] }`
//!    (or `limine`, `multiboot2`, `uefi`; `x86_64` for the page-table
//!    adapter). It builds on stable, for x86-64, AArch64 and RISC-V.
//! 3. **Map physical memory** once, at an offset the plan's `build` closure
//!    adds (`bootloader_api`: `config.mappings.physical_memory =
//!    Some(Mapping::Dynamic)`). A kernel whose boot tables map only the
//!    first 4 GiB plans with [`Plan::new_within`] and builds its own direct
//!    map from the machine afterwards, as `examples/kernel` does.
//! 4. **Plan and build** as in the example above: the usable ranges, the
//!    firmware's NUMA affinity ranges if any (ACPI SRAT, parsed in
//!    `examples/kernel/src/acpi.rs`), a [`crate::MachineConfig`]. The plan
//!    says what it carves ([`Plan::carved_frames`], [`Plan::zones`]).
//! 5. **Share it.** `Plan::build` returns `&'static mut Machine`: enable the
//!    per-CPU caches, then keep it as `&'static Machine` and give each CPU
//!    its handle ([`crate::Machine::cpu`]). A kernel that allocates from
//!    interrupt handlers picks an interrupt-disabling lock
//!    (`Machine<'static, YourIrqLock>`, any `lock_api::RawMutex`).
//! 6. **Let it move pages** (optional): compaction, contiguous ranges and
//!    memory offline ask the kernel's [`crate::Migrator`] for the blocks
//!    they would move, then to copy them and fix their mappings;
//!    `examples/kernel-bootloader/src/main.rs` has a short one.

#[cfg(feature = "bootloader_api")]
mod bootloader_api;
mod builder;
mod incremental;
#[cfg(feature = "limine")]
mod limine;
#[cfg(feature = "multiboot2")]
mod multiboot2;
mod plan;
#[cfg(feature = "uefi")]
mod uefi;

use core::fmt;

use pageframe_types::{Pfn, PfnRange, PhysAddr};

pub use builder::Builder;
pub use incremental::{AddError, Incremental};
pub use plan::{Plan, PlanError, PlannedZone};

/// Why a memory map could not be read.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum MapError {
    /// More disjoint ranges than the set holds.
    TooManyRanges,
    /// An entry whose end lies before its start or past the address space.
    BadEntry {
        /// Its start address.
        start: u64,
        /// Its length in bytes.
        len: u64,
    },
}

impl fmt::Display for MapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MapError::TooManyRanges => f.write_str("more disjoint ranges than the set holds"),
            MapError::BadEntry { start, len } => {
                write!(
                    f,
                    "entry at {start:#x} of {len:#x} bytes leaves the address space"
                )
            }
        }
    }
}

impl core::error::Error for MapError {}

/// A set of frames: sorted, disjoint, non-adjacent ranges, at most `N`.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct FrameRanges<const N: usize = 128> {
    ranges: [PfnRange; N],
    len: usize,
}

impl<const N: usize> Default for FrameRanges<N> {
    fn default() -> Self {
        Self::new()
    }
}

const EMPTY: PfnRange = PfnRange::new(Pfn::new(0), Pfn::new(0));

impl<const N: usize> FrameRanges<N> {
    /// The empty set.
    pub const fn new() -> Self {
        FrameRanges {
            ranges: [EMPTY; N],
            len: 0,
        }
    }

    /// The ranges, by address.
    pub fn ranges(&self) -> &[PfnRange] {
        &self.ranges[..self.len]
    }

    /// Frames in the set.
    pub fn frames(&self) -> u64 {
        self.ranges().iter().map(PfnRange::len).sum()
    }

    /// Whether `pfn` is in the set.
    pub fn contains(&self, pfn: Pfn) -> bool {
        let i = self.ranges().partition_point(|r| r.end <= pfn);
        self.ranges().get(i).is_some_and(|r| r.contains(pfn))
    }

    /// Adds `r`, merged with the ranges it meets or touches. On error the
    /// set is unchanged.
    pub fn insert(&mut self, r: PfnRange) -> Result<(), MapError> {
        if r.is_empty() {
            return Ok(());
        }
        let first = self.ranges().partition_point(|x| x.end < r.start);
        let mut last = first;
        let mut merged = r;
        while last < self.len && self.ranges[last].start <= r.end {
            merged = PfnRange::new(
                merged.start.min(self.ranges[last].start),
                merged.end.max(self.ranges[last].end),
            );
            last += 1;
        }
        if last == first && self.len == N {
            return Err(MapError::TooManyRanges);
        }
        self.ranges.copy_within(last..self.len, first + 1);
        self.ranges[first] = merged;
        self.len = self.len + 1 - (last - first);
        Ok(())
    }

    /// Takes `r` out, splitting the range it falls inside. On error (the
    /// split needs one range more than the set holds) the set is unchanged.
    pub fn remove(&mut self, r: PfnRange) -> Result<(), MapError> {
        if r.is_empty() {
            return Ok(());
        }
        let first = self.ranges().partition_point(|x| x.end <= r.start);
        let last = self.ranges().partition_point(|x| x.start < r.end);
        if first >= last {
            return Ok(());
        }
        let head = PfnRange::new(self.ranges[first].start, r.start);
        let tail = PfnRange::new(r.end, self.ranges[last - 1].end);
        let keep = [head, tail].into_iter().filter(|p| p.start < p.end);
        let pieces = keep.clone().count();
        let len = self.len - (last - first) + pieces;
        if len > N {
            return Err(MapError::TooManyRanges);
        }
        // The ranges after the removed ones move into place (a memmove, in
        // either direction), then the pieces kept are written before them.
        self.ranges.copy_within(last..self.len, first + pieces);
        for (i, p) in keep.enumerate() {
            self.ranges[first + i] = p;
        }
        self.len = len;
        Ok(())
    }

    /// Adds the whole frames inside `[start, end)`.
    pub fn add_usable(&mut self, start: PhysAddr, end: PhysAddr) -> Result<(), MapError> {
        self.insert(PfnRange::new(
            start.pfn_up(),
            end.pfn_down().max(start.pfn_up()),
        ))
    }

    /// Takes out every frame `[start, end)` touches.
    pub fn reserve(&mut self, start: PhysAddr, end: PhysAddr) -> Result<(), MapError> {
        self.remove(PfnRange::new(
            start.pfn_down(),
            end.pfn_up().max(start.pfn_down()),
        ))
    }

    /// The part of the set inside `window`.
    pub fn clipped(&self, window: PfnRange) -> Self {
        let mut out = Self::new();
        for r in self.ranges() {
            let piece = r.intersect(&window);
            if !piece.is_empty() {
                out.ranges[out.len] = piece;
                out.len += 1;
            }
        }
        out
    }

    /// Takes `frames` frames from the top of the highest range inside
    /// `window` that holds them (where a kernel carves metadata), removes
    /// them and returns them. `None`, the set unchanged, when none does.
    pub fn take_top(&mut self, frames: u64, window: PfnRange) -> Option<PfnRange> {
        if frames == 0 {
            return None;
        }
        let found = self
            .clipped(window)
            .ranges()
            .iter()
            .rev()
            .find(|r| r.len() >= frames)
            .map(|r| PfnRange::new(Pfn::new(r.end.get() - frames), r.end))?;
        // The top of a range, or of its part inside the window: removing it
        // may split the range, which a full set refuses (`None`, unchanged).
        self.remove(found).ok()?;
        Some(found)
    }

    /// Builds a set from a map's entries: `(start, length in bytes,
    /// usable)`. Usable entries go in first, then every other entry comes
    /// out, so overlapping or unsorted maps are read safely.
    pub fn from_entries<I>(entries: I) -> Result<Self, MapError>
    where
        I: IntoIterator<Item = (u64, u64, bool)>,
        I::IntoIter: Clone,
    {
        let entries = entries.into_iter();
        let mut set = Self::new();
        let bounds = |(start, len, _): (u64, u64, bool)| {
            let end = start
                .checked_add(len)
                .ok_or(MapError::BadEntry { start, len })?;
            Ok::<_, MapError>((PhysAddr::new(start), PhysAddr::new(end)))
        };
        for e in entries.clone().filter(|e| e.2) {
            let (s, end) = bounds(e)?;
            set.add_usable(s, end)?;
        }
        for e in entries.filter(|e| !e.2) {
            let (s, end) = bounds(e)?;
            set.reserve(s, end)?;
        }
        Ok(set)
    }
}
