//! What free memory a range holds, order by order: for a policy that
//! chooses *where* a block is taken, not only which list it comes from
//! (the mobility layer keeps unmovable memory inside the 1 GiB regions
//! that already hold some). One look at each chunk of the range.

use crate::bits;
use crate::chunk::Mode;
use crate::frame::Idx;
use crate::policy::{ListId, MergePolicy};
use crate::zone::BuddyZone;
use crate::{ORDER_LIMIT, Order, Pfn, PfnRange};

const ORDERS: usize = ORDER_LIMIT as usize + 1;

/// The free memory of a range, and of one list in it: see
/// [`BuddyZone::room`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Room {
    /// Free frames in the range on every list, in chunks and blocks lying
    /// wholly inside it (frames outside the zone are holes; frames a
    /// reservation holds are not counted).
    pub free: u64,
    /// Of those, the frames on the list asked for.
    pub on_list: u64,
    /// The range lies inside the zone and none of its chunks is a hole.
    pub whole: bool,
    /// Per order, a free block of exactly that order on the list, and the
    /// free frames of its chunk (below the chunk order: the chunk with the
    /// most; from the chunk order up: the lowest block, its own size).
    best: [Option<(Pfn, u64)>; ORDERS],
}

impl Room {
    /// No free memory at all.
    pub const EMPTY: Room = Room {
        free: 0,
        on_list: 0,
        whole: false,
        best: [None; ORDERS],
    };

    /// A free block of exactly `order` on the list, if the range has one.
    pub fn block(&self, order: Order) -> Option<Pfn> {
        self.best[usize::from(order.get())].map(|(p, _)| p)
    }

    /// [`Room::block`], with the free frames of its chunk (its own size
    /// from the chunk order up).
    pub fn candidate(&self, order: Order) -> Option<(Pfn, u64)> {
        self.best[usize::from(order.get())]
    }

    /// Whether the list has a free block of `order` or more in the range.
    pub fn has_at_or_above(&self, order: Order) -> bool {
        self.best[usize::from(order.get())..]
            .iter()
            .any(Option::is_some)
    }

    /// Adds `other` (another range's room for the same list): the totals
    /// add up, and each order keeps the candidate in the chunk with more
    /// free frames (the one already held on a tie).
    pub fn merge(&mut self, other: &Room) {
        self.free += other.free;
        self.on_list += other.on_list;
        self.whole &= other.whole;
        for (mine, theirs) in self.best.iter_mut().zip(other.best.iter()) {
            if let Some((_, r)) = theirs
                && mine.is_none_or(|(_, m)| *r > m)
            {
                *mine = *theirs;
            }
        }
    }
}

impl<P: MergePolicy> BuddyZone<'_, P> {
    /// The free memory of `range` and of `list` in it (see [`Room`]).
    /// Reads each chunk of the range once; blocks reaching outside it are
    /// left out.
    pub fn room(&self, range: PfnRange, list: ListId) -> Room {
        let [room] = self.rooms(range, [list]);
        room
    }

    /// [`BuddyZone::room`] of each of `lists` (distinct lists; a list
    /// named twice has an empty room the second time), in one reading of
    /// the range's chunks.
    pub fn rooms<const N: usize>(&self, range: PfnRange, lists: [ListId; N]) -> [Room; N] {
        let r = range.intersect(&self.span);
        let mut rooms = [Room {
            whole: r == range && !r.is_empty(),
            ..Room::EMPTY
        }; N];
        if r.is_empty() {
            return rooms;
        }
        // Chunks and blocks inside `range` count, even where it reaches
        // past the span (their frames there are holes).
        let (lo, hi) = (self.idx(r.start), self.idx(r.start) + r.len() as Idx);
        let inside_range = |first: Idx, len: u64| {
            let p = self.pfn(first);
            p >= range.start && p.get().saturating_add(len) <= range.end.get()
        };
        // Below the chunk order: the chunk, not yet the block.
        let mut split: [[Option<(Idx, u64)>; ORDERS]; N] = [[None; ORDERS]; N];
        let (mut free, mut whole) = (0, rooms[0].whole);
        let mut k = self.chunk_of(lo);
        while self.first(k) < hi {
            let ch = &self.chunks[k];
            let first = self.first(k);
            let mut step = 1;
            match ch.mode {
                Mode::Hole => whole = false,
                Mode::FreeHead | Mode::AllocHead => {
                    step = 1 << (ch.order - self.c);
                    if ch.mode == Mode::FreeHead && inside_range(first, 1 << ch.order) {
                        let n = 1u64 << ch.order;
                        free += n;
                        if let Some(i) = lists.iter().position(|l| ch.list == l.get()) {
                            let room = &mut rooms[i];
                            room.on_list += n;
                            let slot = &mut room.best[usize::from(ch.order) % ORDERS];
                            if slot.is_none() {
                                *slot = Some((self.pfn(first), n));
                            }
                        }
                    }
                }
                Mode::Split if ch.free > 0 && inside_range(first, 1 << self.c) => {
                    let n = u64::from(ch.free);
                    free += n;
                    if let Some(i) = lists.iter().position(|l| ch.list == l.get()) {
                        rooms[i].on_list += n;
                        let split = &mut split[i];
                        let mut m = ch.omask;
                        while m != 0 {
                            let o = m.trailing_zeros() as usize;
                            m &= m - 1;
                            if split[o % ORDERS].is_none_or(|(_, b)| n > b) {
                                split[o % ORDERS] = Some((k, n));
                            }
                        }
                    }
                }
                _ => {}
            }
            k += step;
        }
        for (room, split) in rooms.iter_mut().zip(split.iter()) {
            room.free = free;
            room.whole = whole;
            for (o, s) in split.iter().enumerate() {
                if let Some((k, n)) = *s
                    && let Some(x) = bits::find_maximal(self.words(k), o as u8)
                {
                    room.best[o] = Some((self.pfn(self.first(k) + x), n));
                }
            }
        }
        rooms
    }
}
