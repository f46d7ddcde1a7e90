//! What the machine tells a kernel's hooks and asks of them: trace
//! events, the [`Hooks`] trait and [`NoHooks`], poisoning, and who is
//! allocating (for the owner records). The module docs of
//! [`crate::debug`] say how they are used; this file holds the types, at
//! the bottom of the facade, because every path from the per-CPU caches
//! to the slow path raises events and reads the hooks.

use pageframe_buddy::{Order, Pfn, PfnRange, PhysAddr};
use pageframe_compact::{CompactResult, TickReport};
use pageframe_mobility::MigrateType;
use pageframe_pcp::CpuId;

use crate::error::AllocError;
use crate::gfp::Gfp;
use crate::node_id::NodeId;
use crate::zone_kind::ZoneRef;

/// One trace event. Frame numbers are the block's first frame.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum Event {
    /// An allocation is starting (`cpu`: the handle's CPU, `None` without
    /// one). With [`Event::Alloc`] or [`Event::AllocFail`] on the same CPU
    /// it brackets the allocation, for latency.
    AllocStart {
        /// The request's order.
        order: Order,
        /// The CPU, when the request came through its handle.
        cpu: Option<CpuId>,
    },
    /// A block was handed out (`mm_page_alloc`).
    Alloc {
        /// Its first frame.
        pfn: Pfn,
        /// Its order.
        order: Order,
        /// The request's flags.
        gfp: Gfp,
        /// The CPU, when the request came through its handle.
        cpu: Option<CpuId>,
    },
    /// A request failed (`mm_page_alloc` with no page).
    AllocFail {
        /// The node the request was for.
        node: NodeId,
        /// The request's order.
        order: Order,
        /// The request's flags.
        gfp: Gfp,
        /// Why.
        error: AllocError,
        /// The CPU, when the request came through its handle.
        cpu: Option<CpuId>,
    },
    /// A block was given back (`mm_page_free`, or `mm_page_free_batched`
    /// when it went to a per-CPU cache: `cpu` is then set).
    Free {
        /// Its first frame.
        pfn: Pfn,
        /// Its order.
        order: Order,
        /// The CPU, when it went through its handle.
        cpu: Option<CpuId>,
    },
    /// A request took memory of another migratetype (`mm_page_alloc_extfrag`,
    /// spec 02 §5): by claiming a whole pageblock (or most of one), or by
    /// stealing one block from it.
    Fallback {
        /// The zone.
        zone: ZoneRef,
        /// The type asked for.
        wanted: MigrateType,
        /// The request's order.
        order: Order,
        /// Whether the pageblock became `wanted`'s (claimed) rather than
        /// one block taken from it (stolen).
        claimed: bool,
    },
    /// Frames were given back other than as one block: a contiguous range
    /// ([`crate::Machine::free_segment`], a CMA buffer) or part of an
    /// allocation ([`crate::Machine::free_raw`]).
    FreeRange {
        /// The frames.
        range: PfnRange,
    },
    /// A per-CPU cache took blocks from its zone in one go (`rmqueue_bulk`).
    PcpRefill {
        /// The zone.
        zone: ZoneRef,
        /// The CPU whose cache it is.
        cpu: Option<CpuId>,
        /// The order of the blocks.
        order: Order,
        /// Blocks taken.
        blocks: u64,
    },
    /// A per-CPU cache gave frames back to its zone in one go, a full drain
    /// or a spill past its `high` (`free_pcppages_bulk`).
    PcpSpill {
        /// The zone.
        zone: ZoneRef,
        /// The CPU whose cache it is (`None`: drained by another CPU).
        cpu: Option<CpuId>,
        /// Base frames given back.
        pages: u64,
    },
    /// A direct or whole-node compaction run begins
    /// (`mm_compaction_begin`).
    CompactBegin {
        /// The node it compacts for (a direct run may reach its
        /// zonelist's other nodes).
        node: NodeId,
        /// The order compacted for (`None`: the whole node).
        order: Option<Order>,
    },
    /// The run [`Event::CompactBegin`] announced ended
    /// (`mm_compaction_end`).
    CompactEnd {
        /// The node.
        node: NodeId,
        /// The order compacted for (`None`: the whole node).
        order: Option<Order>,
        /// How it ended.
        result: CompactResult,
    },
    /// A kcompactd step compacted (`mm_compaction_kcompactd_wake` and the
    /// proactive run that followed).
    Kcompactd {
        /// The node.
        node: NodeId,
        /// What it did.
        report: TickReport,
    },
    /// One block was migrated, or failed to (`mm_migrate_pages`, one a
    /// block).
    Migrate {
        /// Where it was.
        from: Pfn,
        /// Where it went (for a failure: where it would have).
        to: Pfn,
        /// Its order.
        order: Order,
        /// Whether it moved.
        moved: bool,
    },
    /// A block handed out was not all [`PAGE_POISON`]: something wrote to
    /// it while it was free ([`Poisoning::POISON`]). The allocation goes on
    /// (the block is initialised as asked).
    UseAfterFree {
        /// The first byte found written.
        addr: PhysAddr,
        /// The block handed out.
        pfn: Pfn,
        /// Its order.
        order: Order,
        /// The tag of the last block that held that frame (feature
        /// `page-owner`; `None` without it or without a record).
        last_owner: Option<u64>,
    },
    /// A frame range's pageblocks were isolated for a contiguous allocation
    /// or offlining (`test_pages_isolated` and friends), or the isolation
    /// was refused.
    Isolate {
        /// The range.
        range: PfnRange,
        /// Whether it was isolated.
        ok: bool,
    },
}

/// What a kernel plugs into a machine to watch it. Every method has a
/// default that does nothing.
pub trait Hooks: Sync {
    /// Whether [`Hooks::event`] is called at all. Some events cost a little
    /// to find out (a snapshot of counters under the zone lock): with
    /// `false` that work compiles away. Left `true` by any implementation
    /// that does not say otherwise.
    const TRACE: bool = true;

    /// One trace event. Called on the path that raised it; see the module
    /// docs for what it may do.
    #[inline]
    fn event(&self, event: &Event) {
        let _ = event;
    }

    /// What the allocator writes into memory and checks ([`Poisoning`]);
    /// read on every allocation and free, so return a constant or a field
    /// set before the machine is shared. With any of it on, `fill` and
    /// `check` must reach every frame the machine manages.
    #[inline]
    fn poisoning(&self) -> Poisoning {
        Poisoning::empty()
    }

    /// Writes `byte` into every byte of `frames` (through the kernel's map
    /// of physical memory: the allocator never maps memory itself). Called
    /// from any context, [`crate::Machine::try_alloc`]'s included: write
    /// the memory and do nothing that may wait.
    #[inline]
    fn fill(&self, frames: PfnRange, byte: u8) {
        let _ = (frames, byte);
    }

    /// The address of the first byte of `frames` that is not `byte`. As
    /// [`Hooks::fill`], called from any context.
    #[inline]
    fn check(&self, frames: PfnRange, byte: u8) -> Option<PhysAddr> {
        let _ = (frames, byte);
        None
    }
}

bitflags::bitflags! {
    /// Memory initialisation and poisoning (Linux's `init_on_alloc`,
    /// `init_on_free` and `page_poison`), through [`Hooks::fill`] and
    /// [`Hooks::check`].
    ///
    /// Frames are written when they become free: handed over
    /// ([`crate::Machine::add_free_range`]), freed (blocks, segments, CMA
    /// buffers, parts of allocations), or left behind by a migration. A
    /// block is checked and initialised when it is handed out by an
    /// allocation entry point ([`crate::Machine::alloc`] and the others that
    /// return a [`crate::Block`]); contiguous ranges are not checked (they
    /// take in-use memory that migrated away). Free page reporting gives
    /// the host frames whose contents it may drop: do not report pages with
    /// `POISON` on.
    ///
    /// A kernel reads and writes frames through its map of physical memory;
    /// here a buffer stands for the zone's RAM:
    ///
    /// ```
    /// use std::sync::Mutex;
    /// use pageframe::debug::{Event, Hooks, Poisoning};
    /// use pageframe::{Gfp, Machine, MachineConfig, NodeId, Order, PAGE_SIZE, Pfn, PfnRange, PhysAddr, ZoneKind};
    ///
    /// const BASE: u64 = 0x1000;
    /// struct Ram(Mutex<Vec<u8>>, Mutex<Option<Event>>);
    ///
    /// impl Ram {
    ///     fn at(p: Pfn) -> usize { ((p.get() - BASE) * PAGE_SIZE) as usize }
    /// }
    ///
    /// impl Hooks for Ram {
    ///     fn poisoning(&self) -> Poisoning { Poisoning::POISON }
    ///     fn fill(&self, f: PfnRange, byte: u8) {
    ///         self.0.lock().unwrap()[Ram::at(f.start)..Ram::at(f.end)].fill(byte);
    ///     }
    ///     fn check(&self, f: PfnRange, byte: u8) -> Option<PhysAddr> {
    ///         let ram = self.0.lock().unwrap();
    ///         let i = ram[Ram::at(f.start)..Ram::at(f.end)].iter().position(|&b| b != byte)?;
    ///         Some(PhysAddr::new(f.start.get() * PAGE_SIZE + i as u64))
    ///     }
    ///     fn event(&self, e: &Event) {
    ///         if let Event::UseAfterFree { .. } = e { *self.1.lock().unwrap() = Some(*e); }
    ///     }
    /// }
    ///
    /// let ram = Ram(Mutex::new(vec![0; 64 * PAGE_SIZE as usize]), Mutex::new(None));
    /// let mut m = pageframe::boot::Builder::new(MachineConfig::SINGLE_NODE).hooks(ram).build_boxed();
    /// let span = PfnRange::new(Pfn(BASE), Pfn(BASE + 64));
    /// # let meta = Box::leak(vec![core::mem::MaybeUninit::uninit(); m.zone_metadata_bytes(span)].into_boxed_slice());
    /// # m.add_zone(NodeId::ZERO, ZoneKind::Normal, span, meta).unwrap();
    /// m.add_free_range(span).unwrap(); // poisoned as it is handed over
    /// let b = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO).unwrap();
    /// let at = Ram::at(b.pfn());
    /// m.free(b).unwrap();
    /// m.inspect().hooks().0.lock().unwrap()[at + 8] = 1; // a stale pointer writes
    /// let again = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO).unwrap();
    /// let report = m.inspect().hooks().1.lock().unwrap().take();
    /// assert!(matches!(report, Some(Event::UseAfterFree { pfn, .. }) if pfn == again.pfn()));
    /// ```
    #[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
    pub struct Poisoning: u8 {
        /// Zero blocks as they are handed out.
        const INIT_ON_ALLOC = 1 << 0;
        /// Zero frames as they become free.
        const INIT_ON_FREE = 1 << 1;
        /// Fill frames with [`PAGE_POISON`] as they become free (instead of
        /// zeroing them), and check a block is still all poison when it is
        /// handed out: a byte that is not was written after the free
        /// ([`Event::UseAfterFree`]).
        const POISON = 1 << 2;
    }
}

/// The byte freed memory is filled with under [`Poisoning::POISON`]
/// (Linux's `PAGE_POISON`).
pub const PAGE_POISON: u8 = 0xaa;

impl Poisoning {
    /// The byte frames get when they become free, if any.
    #[inline]
    pub(crate) fn free_byte(self) -> Option<u8> {
        if self.contains(Poisoning::POISON) {
            Some(PAGE_POISON)
        } else if self.contains(Poisoning::INIT_ON_FREE) {
            Some(0)
        } else {
            None
        }
    }
}

/// Who is allocating, for the owner records ([`crate::debug::owner`], feature
/// `page-owner`): nothing without the feature.
#[derive(Clone, Copy)]
pub(crate) struct Caller {
    #[cfg(feature = "page-owner")]
    pub(crate) tag: Option<u64>,
    #[cfg(feature = "page-owner")]
    pub(crate) site: &'static core::panic::Location<'static>,
}

impl Caller {
    /// The caller of the `#[track_caller]` entry point this runs in.
    #[cfg_attr(feature = "page-owner", track_caller)]
    #[inline(always)]
    pub(crate) fn here() -> Caller {
        Caller {
            #[cfg(feature = "page-owner")]
            tag: None,
            #[cfg(feature = "page-owner")]
            site: core::panic::Location::caller(),
        }
    }

    /// [`Caller::here`] with the kernel's tag.
    #[cfg(feature = "page-owner")]
    #[track_caller]
    #[inline(always)]
    pub(crate) fn tagged(tag: u64) -> Caller {
        Caller {
            tag: Some(tag),
            site: core::panic::Location::caller(),
        }
    }
}

/// No hooks: every call compiles away. A machine's default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NoHooks;

impl Hooks for NoHooks {
    const TRACE: bool = false;
}

impl<H: Hooks + ?Sized> Hooks for &H {
    const TRACE: bool = H::TRACE;
    #[inline]
    fn event(&self, event: &Event) {
        (**self).event(event)
    }
    #[inline]
    fn poisoning(&self) -> Poisoning {
        (**self).poisoning()
    }
    #[inline]
    fn fill(&self, frames: PfnRange, byte: u8) {
        (**self).fill(frames, byte)
    }
    #[inline]
    fn check(&self, frames: PfnRange, byte: u8) -> Option<PhysAddr> {
        (**self).check(frames, byte)
    }
}
