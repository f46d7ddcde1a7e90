//! Where a fallback for memory that cannot move takes its pageblock: the
//! placement policy, and the superpageblock rule (ours, after Rik van
//! Riel's 2026 RFC for Linux): unmovable and reclaimable memory that must
//! fall back goes into a 1 GiB region that holds such memory already, and
//! only when none has fallback memory left does it taint a clean region,
//! the least free first. A region with one unmovable pageblock is no
//! 1 GiB page; keeping that memory together keeps the others possible.

use pageframe_buddy::{BlockInfo, COSTLY_ORDER, Order, Pfn, PfnRange, Room};

use crate::migratetype::list_of;
use crate::superpageblock::taints;
use crate::zone::{AllocMode, MobileZone};
use crate::{MigrateType, fallbacks};

/// Where a fallback for unmovable or reclaimable memory takes its
/// pageblock (a run-time tunable: `MobileZone::set_placement`). Movable
/// requests fall back by Linux's rule under every placement.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub enum Placement {
    /// Linux 6.18 (spec 02 §5.3-5.4): the largest fallback block wherever
    /// it lies, else a steal of the smallest.
    Linux,
    /// First a pageblock beside one of the request's type, in a
    /// maximum-order region that memory of that type pins already
    /// (`claim_pinned_neighbour`, ours); then Linux's rule.
    Neighbour,
    /// As [`Placement::Neighbour`], then inside the superpageblocks that
    /// are tainted already: Linux's claim, else the fallback pageblock
    /// with the most free memory is claimed whatever it holds, even under
    /// NOFRAGMENT (a tainted region is no 1 GiB page whatever its
    /// pageblocks hold: the 4 MiB rule of [`Placement::Neighbour`], one
    /// level up). Only when they have no fallback memory at all is a
    /// clean superpageblock tainted: one that can never be a 1 GiB page
    /// first (it reaches outside the zone or holds a hole), then the
    /// least free; there Linux's claim, else (unless NOFRAGMENT) the
    /// roomiest pageblock is claimed. Nothing is stolen without a
    /// retype, so that every region holding memory that cannot move is
    /// counted tainted. A movable claim that would leave a superpageblock
    /// clean while such memory stays in it is refused, and the highatomic
    /// reserve grows only in tainted superpageblocks. The default.
    #[default]
    Superpageblock,
}

impl Placement {
    /// Every placement, in the order the lab runs them.
    pub const ALL: [Placement; 3] = [
        Placement::Linux,
        Placement::Neighbour,
        Placement::Superpageblock,
    ];

    /// A short name (`linux`, `neighbour`, `superpageblock`).
    pub const fn name(self) -> &'static str {
        match self {
            Placement::Linux => "linux",
            Placement::Neighbour => "neighbour",
            Placement::Superpageblock => "superpageblock",
        }
    }
}

/// The room of each fallback type of a request (in table order) in some
/// superpageblocks.
type Rooms = [Room; 2];

/// When a search of the tainted superpageblocks under NOFRAGMENT found
/// nothing. Such a search looks only for free fallback blocks of at least
/// a pageblock (spec 02 §5.3), and the buddy core keeps those on its lists
/// of large blocks (the chunk order is never above the pageblock order):
/// until one goes onto a list or another region is tainted, the search
/// would find nothing again. A zone over a lower one (Normal over DMA32)
/// asks under NOFRAGMENT first on every allocation once its tainted
/// regions are full; without this, each asks by reading all their chunks.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Futile {
    /// The smallest order the search would have claimed.
    min: Order,
    /// The buddy core's large-list generation then.
    generation: u64,
    /// Regions tainted so far then.
    taints: u64,
}

impl MobileZone<'_> {
    /// Sets where fallbacks for memory that cannot move go.
    pub fn set_placement(&mut self, p: Placement) {
        self.buddy.policy_mut().placement = p;
    }

    /// Where fallbacks for memory that cannot move go.
    pub fn placement(&self) -> Placement {
        self.mobility().placement
    }

    /// Whether a fallback for `mt` keeps to the superpageblocks.
    pub(crate) fn steers(&self, mt: MigrateType) -> bool {
        let m = self.mobility();
        m.placement == Placement::Superpageblock
            && m.grouping
            && matches!(mt, MigrateType::Unmovable | MigrateType::Reclaimable)
    }

    /// Whether retyping the pageblock at `start` to `mt` would leave its
    /// superpageblock clean (it is the last pageblock tainting it), under
    /// the superpageblock placement.
    pub(crate) fn last_taint(&self, start: Pfn, mt: MigrateType) -> bool {
        let blocks = &self.mobility().blocks;
        let spb = blocks.superpageblocks();
        self.mobility().placement == Placement::Superpageblock
            && !taints(mt)
            && blocks.base(start).is_some_and(taints)
            && spb.index_of(start).is_some_and(|i| spb.count(i) == 1)
    }

    /// Whether the pageblock at `start` holds allocated memory that cannot
    /// move (or is pinned).
    pub(crate) fn holds_unmovable(&self, start: Pfn) -> bool {
        let block = self.mobility().blocks.block_range(start);
        self.buddy.walk(block).any(|(_, info)| {
            matches!(info, pageframe_buddy::BlockInfo::Allocated { .. })
                && crate::Blocker::of(&info).is_some()
        })
    }

    /// [`Placement::Superpageblock`]'s fallback for an unmovable or
    /// reclaimable request: the pinned neighbour; Linux's claim and steal
    /// inside the tainted superpageblocks; then a clean one.
    pub(crate) fn fallback_steered(
        &mut self,
        order: Order,
        mt: MigrateType,
        mode: AllocMode,
    ) -> Option<Pfn> {
        let nofrag = mode.contains(AllocMode::NOFRAGMENT);
        let min = self.claim_min(order, mode);
        // Nothing to fall back to anywhere: no need to look where (the
        // pinned neighbour may fragment even under NOFRAGMENT).
        if !self.any_fallback_block(order, mt) {
            return None;
        }
        let spb = self.mobility().blocks.superpageblocks();
        let (tainted, regions) = (spb.tainted(), spb.len());
        if tainted == regions {
            // No clean superpageblock to keep: Linux's rule (and the
            // neighbour's) as they are.
            if let Some(p) = self.claim(order, mt, mode) {
                return Some(p);
            }
            return if nofrag { None } else { self.steal(order, mt) };
        }
        if let Some(p) = self.claim_pinned_neighbour(order, mt) {
            self.buddy.policy_mut().stats.superpageblock_kept += 1;
            return Some(p);
        }
        if tainted > 0 {
            // Exact only where the blocks sought live on the large lists.
            let cached = nofrag && min >= self.buddy.chunk_order();
            let futile = cached.then(|| self.futile_key(min));
            let slot = usize::from(mt == MigrateType::Reclaimable);
            if futile.is_some() && self.mobility().futile[slot] == futile {
                debug_assert!(
                    !self.tainted_room_from(min, mt),
                    "a search kept as futile would find a block"
                );
                return None;
            }
            if let Some(p) = self.claim_tainted(order, min, mt, nofrag) {
                self.buddy.policy_mut().stats.superpageblock_kept += 1;
                return Some(p);
            }
            if futile.is_some() {
                // Read again: the search may have moved blocks (a claim
                // that split and failed), which counts as a change.
                self.buddy.policy_mut().futile[slot] = Some(self.futile_key(min));
            }
            // Tainting a clean region fragments at 1 GiB: under
            // NOFRAGMENT it waits until the slow path has tried to make
            // room in a tainted one ([`MobileZone::room_to_make`]).
            if nofrag {
                return None;
            }
        }
        let rooms = self.clean_region(order, min, mt, nofrag)?;
        let p = self
            .claim_from(&rooms, order, min, mt)
            .or_else(|| (!nofrag).then(|| self.claim_roomiest(&rooms, order, mt))?)?;
        self.buddy.policy_mut().stats.superpageblock_tainting += 1;
        // The region's free movable memory goes last from now on (see
        // `Mobility::keep_for_last`): it keeps room for more of `mt`.
        let spb = self.mobility().blocks.superpageblocks();
        if let Some(i) = spb.index_of(p) {
            let range = spb.range(i);
            self.buddy
                .requeue_last(range, list_of(MigrateType::Movable));
        }
        Some(p)
    }

    /// What a search of the tainted superpageblocks from `min` up depends
    /// on (see [`Futile`]).
    fn futile_key(&self, min: Order) -> Futile {
        Futile {
            min,
            generation: self.buddy.large_generation(),
            taints: self.mobility().blocks.superpageblocks().events().0,
        }
    }

    /// Whether some fallback type of `mt` has a free block of `order` or
    /// more anywhere in the zone (the counts, no walk).
    fn any_fallback_block(&self, order: Order, mt: MigrateType) -> bool {
        (order.get()..=self.buddy.max_order().get()).any(|o| {
            let o = Order::new_truncated(o);
            fallbacks(mt)
                .iter()
                .any(|&fb| self.free_blocks_of(o, fb) > 0)
        })
    }

    /// Where the slow path can make room for a request of type `mt` that
    /// found none in the tainted superpageblocks (each holds no free
    /// memory of a fallback type, and NOFRAGMENT keeps the clean ones
    /// clean): the first frame of the movable pageblock in a tainted
    /// superpageblock, wholly in the zone, holding only free memory and
    /// movable blocks no larger than the largest free movable block (or
    /// [`pageframe_buddy::COSTLY_ORDER`], which finds a new place as a
    /// small request does), with the most free frames. Once its movable memory has migrated out, it is a free
    /// pageblock the request claims. `None` if `mt` does not keep to the
    /// superpageblocks, or no region is tainted (or every one is), or a
    /// tainted one has a free pageblock of a fallback type already (the
    /// request failed for want of free memory, not of room: reclaim's
    /// business), or no pageblock qualifies.
    pub fn room_to_make(&self, mt: MigrateType) -> Option<Pfn> {
        if !self.steers(mt) {
            return None;
        }
        let blocks = &self.mobility().blocks;
        let spb = blocks.superpageblocks();
        if spb.tainted() == 0 || spb.tainted() == spb.len() {
            return None;
        }
        let pb = self.pageblock_order();
        let whole_free = (0..spb.len()).filter(|&i| spb.count(i) > 0).any(|i| {
            self.region_rooms(i, mt)
                .iter()
                .any(|r| r.has_at_or_above(pb))
        });
        if whole_free {
            return None;
        }
        let movable = list_of(MigrateType::Movable);
        // Each block that moves needs a free block of its order elsewhere.
        let fits = (0..=self.buddy.max_order().get())
            .rev()
            .find(|&o| self.free_blocks_of(Order::new_truncated(o), MigrateType::Movable) > 0)
            .unwrap_or(0)
            .max(COSTLY_ORDER);
        let small = |block: PfnRange| {
            self.buddy.walk(block).all(|(_, info)| match info {
                BlockInfo::Free { .. } => true,
                BlockInfo::Allocated { order, .. } => {
                    order.get() <= fits && crate::Blocker::of(&info).is_none()
                }
                BlockInfo::Hole => false,
            })
        };
        let mut best: Option<(u64, Pfn)> = None;
        for i in (0..spb.len()).filter(|&i| spb.count(i) > 0) {
            for start in blocks.block_starts_in(spb.range(i)) {
                let block = blocks.block_range(start);
                if blocks.get(start) != Some(MigrateType::Movable)
                    || !self.span().contains_range(&block)
                {
                    continue;
                }
                let (free, _) = self.buddy.free_room(block, movable);
                if free < block.len() && best.is_none_or(|(f, _)| free > f) && small(block) {
                    best = Some((free, start));
                }
            }
        }
        best.map(|(_, p)| p)
    }

    /// Counts room the slow path made ([`MobileZone::room_to_make`]).
    pub fn note_room_made(&mut self) {
        self.buddy.policy_mut().stats.superpageblock_room_made += 1;
    }

    /// Linux's claim inside the tainted superpageblocks, else a claim of
    /// their roomiest fallback pageblock. The zone-wide choice is taken as
    /// it is when it lies in one already (no walk); otherwise every tainted
    /// region is read once.
    fn claim_tainted(
        &mut self,
        order: Order,
        min: Order,
        mt: MigrateType,
        nofrag: bool,
    ) -> Option<Pfn> {
        let max = self.buddy.max_order().get();
        let widest = (min.get()..=max)
            .rev()
            .map_while(|cur| {
                let cur = Order::new_truncated(cur);
                self.widest_fallback(cur, mt).map(|c| (cur, c))
            })
            .find_map(|(cur, c)| c.map(|(head, fb)| (head, cur, fb)));
        if let Some((head, cur, fb)) = widest
            && self.mobility().blocks.superpageblocks().is_tainted_at(head)
            && let Some(p) = self.try_claim(head, cur, order, mt, fb)
        {
            return Some(p);
        }
        self.buddy.policy_mut().stats.superpageblock_searches += 1;
        let mut rooms = [Room::EMPTY; 2];
        let spb = self.mobility().blocks.superpageblocks();
        for i in (0..spb.len()).filter(|&i| spb.count(i) > 0) {
            let r = self.region_rooms(i, mt);
            for (all, one) in rooms.iter_mut().zip(r.iter()) {
                all.merge(one);
            }
        }
        if let Some(p) = self.claim_from(&rooms, order, min, mt) {
            return Some(p);
        }
        if nofrag {
            return None;
        }
        self.claim_roomiest(&rooms, order, mt)
    }

    /// Whether a tainted superpageblock holds a free block of a fallback
    /// type of `mt` of order `min` or more (what a search under
    /// NOFRAGMENT would claim).
    fn tainted_room_from(&self, min: Order, mt: MigrateType) -> bool {
        let spb = self.mobility().blocks.superpageblocks();
        (0..spb.len()).filter(|&i| spb.count(i) > 0).any(|i| {
            self.region_rooms(i, mt)
                .iter()
                .any(|r| r.has_at_or_above(min))
        })
    }

    /// The room of each fallback type of `mt` in superpageblock `i`.
    fn region_rooms(&self, i: usize, mt: MigrateType) -> Rooms {
        let range = self.mobility().blocks.superpageblocks().range(i);
        match *fallbacks(mt) {
            [a, b] => self.buddy.rooms(range, [list_of(a), list_of(b)]),
            _ => [Room::EMPTY; 2],
        }
    }

    /// The clean superpageblock a fallback for `mt` taints: of those with
    /// a fallback block it may take (a claim's from `min` up, or unless
    /// `nofrag` a steal's from `order` up), first one that can never be
    /// a 1 GiB page, then the one with the least free memory (the lowest
    /// on a tie). Its rooms.
    fn clean_region(
        &self,
        order: Order,
        min: Order,
        mt: MigrateType,
        nofrag: bool,
    ) -> Option<Rooms> {
        let lowest = if nofrag { min } else { order };
        let spb = self.mobility().blocks.superpageblocks();
        // The winner by its index, its rooms read again at the end: a
        // second copy of the rooms on the stack is a KiB.
        let mut best: Option<((bool, u64), usize)> = None;
        for i in (0..spb.len()).filter(|&i| spb.count(i) == 0) {
            let rooms = self.region_rooms(i, mt);
            if !rooms.iter().any(|r| r.has_at_or_above(lowest)) {
                continue;
            }
            let key = (rooms[0].whole, rooms[0].free);
            if best.is_none_or(|(k, _)| key < k) {
                best = Some((key, i));
            }
        }
        best.map(|(_, i)| self.region_rooms(i, mt))
    }

    /// Linux's claim loop (spec 02 §5.3) over the blocks of `rooms`:
    /// largest order first, the first fallback type that has one.
    fn claim_from(
        &mut self,
        rooms: &Rooms,
        order: Order,
        min: Order,
        mt: MigrateType,
    ) -> Option<Pfn> {
        for cur in (min.get()..=self.buddy.max_order().get()).rev() {
            let cur = Order::new_truncated(cur);
            if !self.should_try_claim(cur, mt) {
                break;
            }
            let Some((head, fb)) = pick(rooms, cur, mt) else {
                continue;
            };
            if let Some(p) = self.try_claim(head, cur, order, mt, fb) {
                return Some(p);
            }
        }
        None
    }

    /// Claims the pageblock of `rooms` with the most free memory that has
    /// a free block of `order` or more, whatever the rest of it holds (as
    /// `claim_pinned_neighbour` does at 4 MiB): its movable memory can
    /// still move, and as it is freed the pageblock serves `mt`.
    fn claim_roomiest(&mut self, rooms: &Rooms, order: Order, mt: MigrateType) -> Option<Pfn> {
        let mut best: Option<(u64, Pfn)> = None;
        for r in rooms {
            for o in order.get()..=self.buddy.max_order().get() {
                if let Some((h, n)) = r.candidate(Order::new_truncated(o))
                    && best.is_none_or(|(b, _)| n > b)
                {
                    best = Some((n, h));
                }
            }
        }
        let (_, head) = best?;
        let start = self.mobility().blocks.block_range(head).start;
        self.move_block_free_lists(start, mt);
        let s = &mut self.buddy.policy_mut().stats;
        s.claims_partial += 1;
        s.fragmenting += 1;
        self.smallest(order, mt, mt)
    }
}

/// The block of exactly `cur` in `rooms` of the first fallback type of
/// `mt` (table order) that has one.
fn pick(rooms: &Rooms, cur: Order, mt: MigrateType) -> Option<(Pfn, MigrateType)> {
    fallbacks(mt)
        .iter()
        .zip(rooms.iter())
        .find_map(|(&fb, r)| r.block(cur).map(|h| (h, fb)))
}
