//! The kernel developer's toolbox, as Linux has it (a tool behind a
//! feature is named, not linked: it exists only with the feature):
//!
//! | tool | Linux | here | off |
//! |---|---|---|---|
//! | event counters | `/proc/vmstat` | `debug::vmstat`: `Inspect::vmstat` | feature `vmstat` |
//! | zone report | `/proc/zoneinfo` | [`crate::debug::Inspect::zoneinfo`] | (a read) |
//! | who holds a block | `page_owner` | `debug::owner`: `Inspect::owner_of`, `Inspect::page_owners` | feature `page-owner` |
//! | trace events | `kmem`, `compaction` tracepoints | [`Hooks::event`], [`Event`] | [`NoHooks`] |
//! | fault injection | `fail_page_alloc` | `debug::fail`: `Inspect::fail_page_alloc` | feature `fail-alloc` |
//! | memory init, poisoning | `init_on_alloc`, `init_on_free`, `page_poison` | [`Poisoning`] through [`Hooks::fill`], [`Hooks::check`] | [`NoHooks`] |
//! | consistency check | `CONFIG_DEBUG_VM` | [`crate::Machine::validate`]: the structure, the rule and the frame | (a read) |
//!
//! "Off" is what a kernel that does not ask for the tool gets: no code on
//! its paths. `cargo xtask debug-costs` measures each tool on.
//!
//! Trace events (Linux's `kmem` and `compaction` tracepoints) and
//! poisoning go to a [`Hooks`] value the machine owns.
//!
//! A machine is generic over its hooks (the `Hooks` of its
//! [`crate::lock::Platform`]), [`NoHooks`] by default, so calls into them
//! are static: with [`NoHooks`] every call is an empty inline
//! function and the paths compile to what they were without it. A kernel
//! that wants events builds its machine with
//! [`crate::boot::Builder::hooks`], and reads them back through
//! [`Inspect::hooks`]. [`Inspect`] (from [`crate::Machine::inspect`]) is
//! also where the reports and tools below are reached.
//!
//! Hooks run on the path that raised the event, sometimes with a zone lock
//! held or inside the per-CPU fast path: they must not allocate from the
//! machine or block, and should be short (count, timestamp, push to a
//! ring). The allocation from any context ([`crate::Machine::try_alloc`],
//! possibly an NMI handler) raises no event; it calls only
//! [`Hooks::poisoning`], [`Hooks::fill`] and [`Hooks::check`], which touch
//! memory and nothing else.
//!
//! ```
//! use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
//! use pageframe::debug::{Event, Hooks};
//! use pageframe::{Gfp, Machine, MachineConfig, NodeId, Order, Pfn, PfnRange, ZoneKind};
//!
//! /// Allocations by order, as a trace consumer would count them.
//! #[derive(Default)]
//! struct ByOrder([AtomicU64; 11]);
//!
//! impl Hooks for ByOrder {
//!     fn event(&self, e: &Event) {
//!         if let Event::Alloc { order, .. } = e {
//!             self.0[usize::from(order.get())].fetch_add(1, Relaxed);
//!         }
//!     }
//! }
//!
//! let mut m = pageframe::boot::Builder::new(MachineConfig::SINGLE_NODE).hooks(ByOrder::default()).build_boxed();
//! # let span = PfnRange::new(Pfn(0x1000), Pfn(0x5000));
//! # let meta = Box::leak(vec![core::mem::MaybeUninit::uninit(); m.zone_metadata_bytes(span)].into_boxed_slice());
//! # m.add_zone(NodeId::ZERO, ZoneKind::Normal, span, meta).unwrap();
//! # m.add_free_range(span).unwrap();
//! let b = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::new(2).unwrap()).unwrap();
//! assert_eq!(m.inspect().hooks().0[2].load(Relaxed), 1);
//! m.free(b).unwrap();
//! ```

mod buddyinfo;
#[cfg(feature = "fail-alloc")]
pub mod fail;
mod hooks;
mod inspect;
#[cfg(feature = "page-owner")]
pub mod owner;
// The state a zone and the machine embed is there in every build (empty
// without the feature); the reports are the features'.
pub(crate) mod owner_record;
mod poison;
#[cfg(feature = "vmstat")]
pub mod vmstat;
#[cfg(not(feature = "vmstat"))]
pub(crate) mod vmstat;
#[cfg(feature = "vmstat")]
mod vmstat_sum;
mod zoneinfo;

pub use buddyinfo::MachineBuddyInfo;
pub(crate) use hooks::Caller;
pub use hooks::{Event, Hooks, NoHooks, PAGE_POISON, Poisoning};
pub use inspect::Inspect;
pub use zoneinfo::ZoneInfo;
