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
//!    (`Machine<'static, (YourIrqLock, NoHooks)>`, any
//!    `lock_api::RawMutex`: see [`crate::lock::Platform`]).
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
mod map;
#[cfg(feature = "multiboot2")]
mod multiboot2;
mod plan;
#[cfg(feature = "uefi")]
mod uefi;

pub use builder::Builder;
pub use incremental::{AddError, Incremental};
pub use map::{FrameRanges, MapError};
pub use plan::{Plan, PlanError, PlannedZone};
