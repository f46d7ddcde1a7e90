//! The owner records a zone keeps (feature `page-owner`): one a frame,
//! carved with the zone's metadata and written on every allocation. They
//! sit at the bottom of the facade with the other state a zone embeds;
//! [`crate::debug::owner`] is where they are read and reported.
//!
//! Without the feature this module keeps only [`Owners`] and [`OwnerSeq`],
//! zero-sized: no metadata, nothing recorded, and the calls on the
//! allocation paths compile to nothing.

#[cfg(not(feature = "page-owner"))]
use core::marker::PhantomData;
use core::mem::MaybeUninit;
#[cfg(feature = "page-owner")]
use core::panic::Location;
#[cfg(feature = "page-owner")]
use core::ptr;
#[cfg(feature = "page-owner")]
use core::sync::atomic::{AtomicPtr, Ordering::Relaxed};

use pageframe_buddy::{Order, Pfn, PfnRange};
#[cfg(feature = "page-owner")]
use pageframe_types::atomic::AtomicU64;

use crate::debug::Caller;

/// Who allocated a block.
#[cfg(feature = "page-owner")]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Owner {
    /// The caller's tag (the call site's address when it gave none).
    pub tag: u64,
    /// Where in the source the allocation was made.
    pub site: Option<&'static Location<'static>>,
    /// The allocation's place in the machine's sequence
    /// ([`crate::debug::Inspect::owner_seq`]).
    pub seq: u64,
}

#[cfg(feature = "page-owner")]
impl Owner {
    /// The record of `caller`'s allocation numbered `seq`.
    pub(crate) fn of(caller: Caller, seq: u64) -> Owner {
        Owner {
            tag: caller
                .tag
                .unwrap_or(core::ptr::from_ref(caller.site) as usize as u64),
            site: Some(caller.site),
            seq,
        }
    }
}

/// A block and its owner record.
#[cfg(feature = "page-owner")]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct OwnedBlock {
    /// Its first frame.
    pub pfn: Pfn,
    /// Its order.
    pub order: Order,
    /// Who allocated it.
    pub owner: Owner,
    /// Whether it is allocated now (`false`: the frame is free and this is
    /// its last owner).
    pub live: bool,
}

/// One frame's record (written at block heads).
#[cfg(feature = "page-owner")]
pub(crate) struct Record {
    site: AtomicPtr<Location<'static>>,
    tag: AtomicU64,
    /// The sequence number, the block's order in the top bits.
    seq: AtomicU64,
}

/// Where a record keeps the block's order.
#[cfg(feature = "page-owner")]
const ORDER_SHIFT: u32 = 58;
#[cfg(feature = "page-owner")]
const SEQ_MASK: u64 = (1 << ORDER_SHIFT) - 1;

/// The records of a zone's span.
#[cfg(feature = "page-owner")]
pub(crate) struct Owners<'a> {
    base: Pfn,
    recs: &'a [Record],
}

#[cfg(feature = "page-owner")]
impl<'a> Owners<'a> {
    /// Whether records are kept (a path may skip finding a zone's when
    /// not).
    pub(crate) const KEPT: bool = true;

    /// Bytes for `span`'s records, alignment slack included.
    pub(crate) const fn bytes(span: PfnRange) -> usize {
        match pageframe_types::carve::bytes_for::<Record>(span.len() as usize) {
            Some(b) => b,
            None => usize::MAX,
        }
    }

    /// Carves the records of `span` off the front of `mem`; returns them
    /// and the rest.
    pub(crate) fn carve(
        span: PfnRange,
        mem: &'a mut [MaybeUninit<u8>],
    ) -> Option<(Self, &'a mut [MaybeUninit<u8>])> {
        let (recs, rest) =
            pageframe_types::carve::carve_init(mem, span.len() as usize, |_| Record {
                site: AtomicPtr::new(ptr::null_mut()),
                tag: AtomicU64::new(0),
                seq: AtomicU64::new(u64::MAX),
            })?;
        Some((
            Owners {
                base: span.start,
                recs,
            },
            rest,
        ))
    }

    /// Records `caller` as the owner of the block of `order` at `pfn`, the
    /// next in `seq`.
    #[inline]
    pub(crate) fn record(&self, pfn: Pfn, order: Order, caller: Caller, seq: &OwnerSeq) {
        self.set(pfn, order, Owner::of(caller, seq.next()));
    }

    /// The block of `order` at `pfn` was split at `upper`: both halves keep
    /// its owner.
    pub(crate) fn split(&self, pfn: Pfn, upper: Pfn, order: Order) {
        if let Some(o) = self.get(pfn) {
            let half = Order::new_truncated(order.get() - 1);
            self.set(pfn, half, o);
            self.set(upper, half, o);
        }
    }

    fn rec(&self, pfn: Pfn) -> Option<&Record> {
        self.recs
            .get(pfn.get().checked_sub(self.base.get())? as usize)
    }

    /// Records `owner` for the block of `order` at `pfn`, in each of its
    /// frames (as Linux does: a frame's record names its last owner even
    /// after its block is freed and another block starts at its head).
    pub(crate) fn set(&self, pfn: Pfn, order: Order, owner: Owner) {
        for i in 0..order.pages() {
            self.set_frame(pfn + i, order, owner);
        }
    }

    fn set_frame(&self, pfn: Pfn, order: Order, owner: Owner) {
        if let Some(r) = self.rec(pfn) {
            let site = owner
                .site
                .map_or(ptr::null_mut(), |l| ptr::from_ref(l).cast_mut());
            r.site.store(site, Relaxed);
            r.tag.store(owner.tag, Relaxed);
            let packed = (owner.seq & SEQ_MASK) | u64::from(order.get()) << ORDER_SHIFT;
            r.seq.store(packed, Relaxed);
        }
    }

    /// The record at `pfn`, if one was ever written.
    pub(crate) fn get(&self, pfn: Pfn) -> Option<Owner> {
        self.get_with_order(pfn).map(|(o, _)| o)
    }

    /// The last block that held `pfn`: its head, order and owner.
    pub(crate) fn last_holder(&self, pfn: Pfn) -> Option<(Pfn, Order, Owner)> {
        let (o, order) = self.get_with_order(pfn)?;
        Some((pfn.align_down(order), order, o))
    }

    /// The record at `pfn` and the order it was made for.
    pub(crate) fn get_with_order(&self, pfn: Pfn) -> Option<(Owner, Order)> {
        let r = self.rec(pfn)?;
        let packed = r.seq.load(Relaxed);
        if packed == u64::MAX {
            return None;
        }
        let seq = packed & SEQ_MASK;
        let order = Order::new_truncated((packed >> ORDER_SHIFT) as u8);
        let site = r.site.load(Relaxed);
        // SAFETY: `site` is null or was stored by `set` from a
        // `&'static Location<'static>`: it points to a location the
        // compiler made, valid for the program's life.
        let site = unsafe { site.as_ref() };
        Some((
            Owner {
                tag: r.tag.load(Relaxed),
                site,
                seq,
            },
            order,
        ))
    }
}

/// The machine's allocation sequence: each owner record takes the next
/// number ([`crate::debug::Inspect::owner_seq`]).
#[cfg(feature = "page-owner")]
pub(crate) struct OwnerSeq(AtomicU64);

#[cfg(feature = "page-owner")]
impl OwnerSeq {
    pub(crate) const fn new() -> OwnerSeq {
        OwnerSeq(AtomicU64::new(0))
    }

    /// The number the next allocation gets.
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }

    /// A new allocation's number.
    pub(crate) fn next(&self) -> u64 {
        self.0.fetch_add(1, Relaxed)
    }
}

/// No records without the feature.
#[cfg(not(feature = "page-owner"))]
pub(crate) struct Owners<'a>(PhantomData<&'a ()>);

#[cfg(not(feature = "page-owner"))]
impl<'a> Owners<'a> {
    pub(crate) const KEPT: bool = false;

    pub(crate) const fn bytes(_: PfnRange) -> usize {
        0
    }

    /// Takes nothing off `mem`.
    #[inline(always)]
    pub(crate) fn carve(
        _: PfnRange,
        mem: &'a mut [MaybeUninit<u8>],
    ) -> Option<(Self, &'a mut [MaybeUninit<u8>])> {
        Some((Owners(PhantomData), mem))
    }

    #[inline(always)]
    pub(crate) fn record(&self, _: Pfn, _: Order, _: Caller, _: &OwnerSeq) {}

    #[inline(always)]
    pub(crate) fn split(&self, _: Pfn, _: Pfn, _: Order) {}
}

/// No sequence without the feature.
#[cfg(not(feature = "page-owner"))]
pub(crate) struct OwnerSeq;

#[cfg(not(feature = "page-owner"))]
impl OwnerSeq {
    pub(crate) const fn new() -> OwnerSeq {
        OwnerSeq
    }
}
