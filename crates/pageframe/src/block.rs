//! Owned memory: what an allocation hands out and a free takes back.
//!
//! A [`Block`] (2^order frames), a [`Segment`] (a contiguous run of any
//! length) and a [`CmaBuffer`] (a segment of a CMA area) each own their
//! frames: they are neither `Copy` nor `Clone`, and the call that gives
//! them back consumes them. So a frame freed twice, freed through a stale
//! or copied handle, or freed by someone who only knows its number, does
//! not compile:
//!
//! ```compile_fail,E0382
//! # fn f(m: &pageframe::Machine<'static>) {
//! # use pageframe::{Gfp, NodeId, Order};
//! let a = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO).unwrap();
//! m.free(a).unwrap();
//! m.free(a).unwrap(); // double free: `a` moved into the first free
//! # }
//! ```
//!
//! ```compile_fail,E0382
//! # fn f(m: &pageframe::Machine<'static>) {
//! # use pageframe::{Gfp, NodeId, Order};
//! let a = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO).unwrap();
//! m.free(a).unwrap();
//! let b = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO).unwrap(); // may be a's frame
//! m.free(a).unwrap(); // a stale free of b's frame: `a` is gone
//! # let _ = b;
//! # }
//! ```
//!
//! ```compile_fail,E0382
//! # fn f(m: &pageframe::Machine<'static>) {
//! # use pageframe::{Gfp, NodeId, Order};
//! let a = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO).unwrap();
//! let copy = a; // a move, not a copy: one owner
//! m.free(copy).unwrap();
//! m.free(a).unwrap();
//! # }
//! ```
//!
//! ```compile_fail,E0599
//! # fn f(m: &pageframe::Machine<'static>) {
//! # use pageframe::{Gfp, NodeId, Order};
//! let a = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO).unwrap();
//! let copy = a.clone(); // blocks are not `Clone`
//! # }
//! ```
//!
//! ```compile_fail,E0061
//! # fn f(m: &pageframe::Machine<'static>, p: pageframe::Pfn) {
//! m.free(p, pageframe::Order::ZERO).unwrap(); // free by number: not in the safe API
//! # }
//! ```
//!
//! ```compile_fail,E0308
//! # fn f(m: &pageframe::Machine<'static>, range: pageframe::PfnRange) {
//! m.cma_release(range).unwrap(); // only a `CmaBuffer` its area handed out
//! # }
//! ```
//!
//! A kernel that must keep a frame as a number (a page-table entry, a
//! reverse map) turns a block into its number with [`Block::into_raw`] and
//! back with the `unsafe` [`crate::Machine::block_from_raw`], whose contract
//! is that the number is its to give back. Blocks are tied to the machine
//! that made them: a free into another machine is refused and the block
//! handed back ([`Refused`]).
//!
//! A dropped block stays allocated (leaked, as with `mem::forget`): give it
//! back with [`crate::Machine::free`], or hold it in a [`crate::BlockGuard`],
//! which frees it when dropped.

use core::fmt;
use core::num::NonZeroU64;
use core::sync::atomic::Ordering::Relaxed;

use pageframe_types::atomic::AtomicU64;

use pageframe_buddy::{FreeError, Order, Pfn, PfnRange, PhysAddr};

use crate::cma_area::CmaId;
use crate::node_id::NodeId;
use crate::zone_kind::{ZoneKind, ZoneRef};

/// Which machine a block belongs to: a number no other machine of this
/// program has (counted from 1). Sixty-four bits, so that it never comes
/// round again: a program that made a machine every nanosecond would need
/// five centuries to run the counter out. Never zero, so that an
/// `Option<Block>` or a `Result<Block, AllocError>` is as small as a
/// block: two words, not three, in a kernel's tables and on its stack.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) struct MachineId(NonZeroU64);

static NEXT_MACHINE: AtomicU64 = AtomicU64::new(1);

impl MachineId {
    /// A new machine's identity.
    pub(crate) fn next() -> MachineId {
        loop {
            // Zero comes only after the counter ran round (see above).
            if let Some(id) = NonZeroU64::new(NEXT_MACHINE.fetch_add(1, Relaxed)) {
                return MachineId(id);
            }
        }
    }
}

/// What every block of one zone of one machine carries besides its frame
/// and order ([`Block::zone_meta`]).
#[derive(Clone, Copy)]
pub(crate) struct ZoneMeta {
    machine: MachineId,
    /// The zone's index (below `MAX_ZONES`), shifted into place when a
    /// block is made: a block turned back into a number at once then
    /// leaves no trace of it (the compiler sees the frame's bits alone).
    zone: u8,
}

/// `2^order` naturally aligned frames of one machine, owned: handed out by
/// an allocation, consumed by [`crate::Machine::free`] (or a CPU's
/// [`crate::CpuCache::free`]).
#[must_use = "a block dropped without being freed stays allocated"]
#[derive(PartialEq, Eq, Hash)]
pub struct Block {
    /// The first frame (bits 0..52: every frame number is below
    /// [`pageframe_buddy::MAX_PFN`]), the order (52..56) and the zone's
    /// index, `node * NR_ZONE_KINDS + kind` (56..64). Two words, so that a
    /// block moves in two registers and through memory as two whole words
    /// (a struct of five fields goes through the stack field by field).
    head: u64,
    /// The machine's identity, whole.
    machine: MachineId,
}

const PFN_MASK: u64 = pageframe_buddy::MAX_PFN - 1;
const ORDER_SHIFT: u32 = 52;
const ORDER_MASK: u64 = 0xf;
const ZONE_SHIFT: u32 = 56;
// The head word holds every frame number and every order.
const _: () = assert!(pageframe_buddy::MAX_PFN == 1 << ORDER_SHIFT);
const _: () = assert!(pageframe_types::ORDER_LIMIT as u64 <= ORDER_MASK);

impl Block {
    /// Made by the machine only: for a block it just handed out, or one
    /// whose owner vouched for it (`unsafe` paths).
    #[inline]
    pub(crate) fn new(machine: MachineId, r: ZoneRef, pfn: Pfn, order: Order) -> Block {
        Self::with_zone_meta(Self::zone_meta(machine, r), pfn, order)
    }

    /// What every block of zone `r` of `machine` carries besides its frame
    /// and order (computed once, where blocks of one zone are made often).
    #[inline]
    pub(crate) fn zone_meta(machine: MachineId, r: ZoneRef) -> ZoneMeta {
        const { assert!(crate::zone_kind::MAX_ZONES <= 1 << (64 - ZONE_SHIFT)) };
        ZoneMeta {
            machine,
            zone: r.index() as u8,
        }
    }

    /// A block of the zone whose [`Block::zone_meta`] is `meta`.
    #[inline]
    pub(crate) fn with_zone_meta(meta: ZoneMeta, pfn: Pfn, order: Order) -> Block {
        Block {
            head: (pfn.get() & PFN_MASK)
                | u64::from(order.get()) << ORDER_SHIFT
                | u64::from(meta.zone) << ZONE_SHIFT,
            machine: meta.machine,
        }
    }

    /// The head word alone (frame, order, zone): what an out-of-line
    /// allocation returns, so that its `Result` comes back in two registers
    /// and the caller pairs it with the machine's identity
    /// ([`Block::from_head`]) in registers too.
    #[inline]
    pub(crate) fn head(self) -> u64 {
        self.head
    }

    /// The block whose head word [`Block::head`] gave, of `machine`.
    #[inline]
    pub(crate) fn from_head(head: u64, machine: MachineId) -> Block {
        Block { head, machine }
    }

    /// The first frame.
    #[inline]
    pub fn pfn(&self) -> Pfn {
        Pfn(self.head & PFN_MASK)
    }

    /// The first byte.
    #[inline]
    pub fn addr(&self) -> PhysAddr {
        self.pfn().addr()
    }

    /// The block's order: it holds `2^order` frames.
    #[inline]
    pub fn order(&self) -> Order {
        Order::new_truncated(((self.head >> ORDER_SHIFT) & ORDER_MASK) as u8)
    }

    /// Its frames.
    #[inline]
    pub fn range(&self) -> PfnRange {
        let pfn = self.pfn();
        PfnRange::new(pfn, pfn + self.order().pages())
    }

    /// The node whose memory it is.
    #[inline]
    pub fn node(&self) -> NodeId {
        self.zone_ref().node
    }

    /// The zone it came from.
    #[inline]
    pub fn zone(&self) -> ZoneKind {
        self.zone_ref().kind
    }

    #[inline]
    pub(crate) fn zone_ref(&self) -> ZoneRef {
        ZoneRef::from_index((self.head >> ZONE_SHIFT) as u8)
    }

    /// [`ZoneRef::index`] of the block's zone, without decoding it.
    #[inline]
    pub(crate) fn zone_index(&self) -> usize {
        (self.head >> ZONE_SHIFT) as usize % crate::zone_kind::MAX_ZONES
    }

    #[inline]
    pub(crate) fn machine(&self) -> MachineId {
        self.machine
    }

    /// Gives up the typed ownership: the block's first frame and order. It
    /// stays allocated; the number is the only record of it, and
    /// [`crate::Machine::block_from_raw`] makes it a block again.
    #[inline]
    pub fn into_raw(self) -> (Pfn, Order) {
        (self.pfn(), self.order())
    }
}

impl fmt::Debug for Block {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Block({}, order {}, {} {})",
            self.pfn(),
            self.order().get(),
            self.node(),
            self.zone()
        )
    }
}

/// A contiguous run of frames of one zone, owned: handed out by
/// [`crate::Machine::alloc_contig`] and
/// [`crate::Machine::alloc_contig_range`], consumed by
/// [`crate::Machine::free_segment`].
#[must_use = "a segment dropped without being freed stays allocated"]
#[derive(PartialEq, Eq, Hash)]
pub struct Segment {
    range: PfnRange,
    machine: MachineId,
    node: NodeId,
    zone: ZoneKind,
    moved: u64,
}

impl Segment {
    pub(crate) fn new(machine: MachineId, r: ZoneRef, range: PfnRange, moved: u64) -> Segment {
        Segment {
            range,
            machine,
            node: r.node,
            zone: r.kind,
            moved,
        }
    }

    /// Its frames.
    #[inline]
    pub fn range(&self) -> PfnRange {
        self.range
    }

    /// The first frame.
    #[inline]
    pub fn start(&self) -> Pfn {
        self.range.start
    }

    /// How many frames.
    #[inline]
    pub fn len(&self) -> u64 {
        self.range.len()
    }

    /// Never: a segment holds at least one frame (for clippy's sake).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.range.is_empty()
    }

    /// The node whose memory it is.
    #[inline]
    pub fn node(&self) -> NodeId {
        self.node
    }

    /// The zone it lies in.
    #[inline]
    pub fn zone(&self) -> ZoneKind {
        self.zone
    }

    /// Frames migrated out of the range to make it (0 when it was free).
    #[inline]
    pub fn moved(&self) -> u64 {
        self.moved
    }

    #[inline]
    pub(crate) fn machine(&self) -> MachineId {
        self.machine
    }

    /// Gives up the typed ownership: the range. It stays allocated;
    /// [`crate::Machine::segment_from_raw`] makes it a segment again.
    #[inline]
    pub fn into_raw(self) -> PfnRange {
        self.range
    }
}

impl fmt::Debug for Segment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Segment({}..{}, {} {})",
            self.range.start, self.range.end, self.node, self.zone
        )
    }
}

/// A segment of a CMA area, owned: handed out by
/// [`crate::Machine::cma_alloc`], consumed by
/// [`crate::Machine::cma_release`], and by nothing else (a range the area
/// never handed out cannot be released).
#[must_use = "a CMA buffer dropped without being released stays allocated"]
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct CmaBuffer {
    area: CmaId,
    segment: Segment,
}

impl CmaBuffer {
    pub(crate) fn new(area: CmaId, segment: Segment) -> CmaBuffer {
        CmaBuffer { area, segment }
    }

    /// The area it came from.
    #[inline]
    pub fn area(&self) -> CmaId {
        self.area
    }

    /// Its frames.
    #[inline]
    pub fn range(&self) -> PfnRange {
        self.segment.range
    }

    /// Frames migrated out of the area to make it.
    #[inline]
    pub fn moved(&self) -> u64 {
        self.segment.moved
    }

    pub(crate) fn into_parts(self) -> (CmaId, Segment) {
        (self.area, self.segment)
    }
}

/// A call the machine would not make with the memory given (a free, a
/// split, a guard, a release): the memory handed back to the caller,
/// still allocated and still the caller's, with the reason. From safe code
/// the reasons are [`FreeError::Foreign`] (it belongs to another machine)
/// and, for a split, [`FreeError::SingleFrame`] and [`FreeError::Busy`].
#[derive(Debug, PartialEq, Eq)]
pub struct Refused<T> {
    held: T,
    reason: FreeError,
    call: Call,
}

/// Which call refused (for the message).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Call {
    Free,
    Split,
    Guard,
    Release,
}

impl Call {
    fn name(self) -> &'static str {
        match self {
            Call::Free => "free",
            Call::Split => "split",
            Call::Guard => "guard",
            Call::Release => "release",
        }
    }
}

impl<T> Refused<T> {
    /// A refused free.
    #[cold]
    pub(crate) fn new(held: T, reason: FreeError) -> Self {
        Self::by(Call::Free, held, reason)
    }

    /// A refusal by `call`.
    #[cold]
    pub(crate) fn by(call: Call, held: T, reason: FreeError) -> Self {
        Refused { held, reason, call }
    }

    /// Why.
    pub fn reason(&self) -> FreeError {
        self.reason
    }

    /// The memory, back with its owner.
    pub fn into_inner(self) -> T {
        self.held
    }
}

impl<T: fmt::Debug> fmt::Display for Refused<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} of {:?} refused: {}",
            self.call.name(),
            self.held,
            self.reason
        )
    }
}

impl<T: fmt::Debug> core::error::Error for Refused<T> {}

/// A frame number that is not an allocation its caller may take back
/// ([`crate::Machine::block_from_raw`], [`crate::Machine::segment_from_raw`]):
/// the frame at fault and why.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct RawError {
    /// The frame.
    pub pfn: Pfn,
    /// What is wrong with it.
    pub why: FreeError,
}

impl fmt::Display for RawError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "frame {}: {}", self.pfn, self.why)
    }
}

impl core::error::Error for RawError {}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Ids keep counting where a 32-bit counter would have wrapped to a
    /// number an older machine has, and a block carries its whole id.
    #[test]
    fn machine_ids_never_come_round() {
        NEXT_MACHINE.fetch_max(u32::MAX as _, Relaxed);
        let a = MachineId::next();
        let b = MachineId::next();
        assert!(b.0 > a.0, "{a:?} then {b:?}");
        // The niche of the id keeps what a call returns at two words.
        assert_eq!(size_of::<Option<Block>>(), size_of::<Block>());
        assert_eq!(
            size_of::<Result<Block, crate::AllocError>>(),
            size_of::<Block>()
        );
        let last = ZoneRef::from_index(u8::MAX);
        for (pfn, order) in [
            (Pfn(0x1234), Order::new(3)),
            (Pfn(pageframe_buddy::MAX_PFN - 8), Order::new(3)),
            (Pfn(0), Order::new(pageframe_types::ORDER_LIMIT)),
        ] {
            let order = order.unwrap();
            let blk = Block::new(b, last, pfn, order);
            assert_eq!(blk.machine(), b);
            assert_eq!(blk.zone_ref(), last);
            assert_eq!(blk.into_raw(), (pfn, order));
        }
    }
}
