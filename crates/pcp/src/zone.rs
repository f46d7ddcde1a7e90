//! The zone side of the PCP, as a trait the facade implements.
//!
//! The PCP never takes a lock itself: a refill or a spill is one call into
//! the zone, which takes its lock once for the whole batch (spec 04 §4.1
//! `rmqueue_bulk`, §5.5 `free_pcppages_bulk`).

use crate::home::Home;
use crate::lists::Lists;
use crate::types::{ListIndex, MigrateType, NR_PCP_LISTS, Order, PCP_TYPES, Pfn};

bitflags::bitflags! {
    /// Zone state the PCP consults (spec 04 §2.3).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
    pub struct ZoneFlags: u8 {
        /// An allocation saw free pages below the high watermark: stop
        /// growing `high`, shrink it on frees (spec 04 §4.2, §5.3).
        const BELOW_HIGH = 1 << 0;
        /// kswapd is reclaiming this zone: keep caches small (spec 04 §5.3).
        const RECLAIM_ACTIVE = 1 << 1;
    }
}

/// What a zone must provide to back per-CPU caches.
///
/// Methods take `&self`: the zone is shared by all CPUs and serialises
/// itself (one lock acquisition per call).
pub trait PcpZone {
    /// `rmqueue_bulk`: under one acquisition of the zone lock, take up to
    /// [`RefillSink::remaining`] blocks of `order` for migratetype `mt`
    /// (fallbacks included, as the zone's own allocator would) and
    /// [`push`](RefillSink::push) each one, in the order taken. Stop early
    /// when the zone has nothing suitable. A frame the sink refuses stays
    /// with the zone.
    fn refill(&self, order: Order, mt: MigrateType, sink: &mut RefillSink<'_, '_>);

    /// [`PcpZone::refill`] for a caller that must not wait
    /// ([`crate::LocalPcp::try_alloc`]): `false`, with nothing pushed,
    /// when the zone cannot be taken at once (its lock is held, on this
    /// CPU too: an interrupted holder); `true` when it was, whatever it
    /// pushed. The default refuses: a zone that does not implement it
    /// serves such callers from what the cache holds.
    fn try_refill(&self, order: Order, mt: MigrateType, sink: &mut RefillSink<'_, '_>) -> bool {
        let _ = (order, mt, sink);
        false
    }

    /// `free_pcppages_bulk`: under one acquisition of the zone lock, free
    /// every block the batch yields (it yields `(frame, order)`, coldest
    /// first). The zone looks up each block's pageblock type itself (spec 04
    /// §5.1: the real type is re-read when a page leaves the PCP). Blocks
    /// not pulled from the iterator stay cached: nothing is lost.
    fn spill(&self, batch: &mut SpillBatch<'_, '_>);

    /// Current [`ZoneFlags`]; a relaxed read is enough.
    fn flags(&self) -> ZoneFlags {
        ZoneFlags::empty()
    }

    /// Called after a spill triggered by a free while `BELOW_HIGH` was set:
    /// the zone clears `BELOW_HIGH` if free pages are back above the high
    /// watermark (spec 04 §5.2, tail).
    fn recheck_below_high(&self) {}
}

/// Receives the blocks of one refill, appending them to the list's tail
/// (a home list's: into its bitmap, refusing blocks of another region).
pub struct RefillSink<'a, 'm> {
    lists: &'a mut Lists<'m>,
    home: Option<(&'a mut Home, u8)>,
    li: ListIndex,
    remaining: usize,
    taken: usize,
}

impl<'a, 'm> RefillSink<'a, 'm> {
    pub(crate) fn new(
        lists: &'a mut Lists<'m>,
        home: Option<(&'a mut Home, u8)>,
        li: ListIndex,
        max: usize,
    ) -> Self {
        RefillSink {
            lists,
            home,
            li,
            remaining: max,
            taken: 0,
        }
    }

    /// Files one block: on the list's tail, or in the home.
    #[inline]
    fn file(&mut self, frame: Pfn) -> Result<(), Pfn> {
        match &mut self.home {
            Some((h, shift)) => {
                if h.accept(frame, *shift) {
                    Ok(())
                } else {
                    Err(frame)
                }
            }
            None => self.lists.push_tail(self.li, frame),
        }
    }

    /// How many more blocks the cache wants in this refill (it may still
    /// refuse one if its slot memory fills up first).
    #[inline]
    pub fn remaining(&self) -> usize {
        self.remaining
    }

    /// Hands one block to the cache. `Err(frame)` (the zone keeps it) when
    /// the refill is complete.
    #[inline]
    pub fn push(&mut self, frame: Pfn) -> Result<(), Pfn> {
        if self.remaining == 0 {
            return Err(frame);
        }
        if let Err(f) = self.file(frame) {
            self.remaining = 0; // slot memory full, or another region
            return Err(f);
        }
        self.remaining -= 1;
        self.taken += 1;
        Ok(())
    }

    /// Hands order-0 frames a bitmap word at a time: the frames `base + b`
    /// for each bit `b` of `bits` (`base` aligned to 64 frames), at most
    /// [`RefillSink::remaining`] of them. Returns the bits taken, lowest
    /// first; the refill is complete when that is less than `bits`. A home
    /// list takes the word with one `or` (its bitmap has the chunk's
    /// layout); other lists take frame by frame.
    #[inline]
    pub fn push_word(&mut self, base: Pfn, bits: u64) -> u64 {
        let want = bits.count_ones() as usize;
        let got = match &mut self.home {
            Some((h, shift)) if want <= self.remaining => h.accept_word(base, bits, *shift),
            _ => return self.frame_by_frame(base, bits, Self::push),
        };
        let n = got.count_ones() as usize;
        self.remaining -= n;
        self.taken += n;
        if got != bits {
            self.remaining = 0; // another region
        }
        got
    }

    /// Hands one block beyond what the cache asked for: a zone may round a
    /// refill up (to keep two CPUs' caches off one line of its per-frame
    /// metadata, say). `Err(frame)` (the zone keeps it) when the slot
    /// memory is full or the block lies outside a home list's region.
    #[inline]
    pub fn push_extra(&mut self, frame: Pfn) -> Result<(), Pfn> {
        self.file(frame)?;
        self.taken += 1;
        Ok(())
    }

    /// [`RefillSink::push_word`] beyond what the cache asked for (see
    /// [`RefillSink::push_extra`]): every frame of `bits` the cache can
    /// file. Returns the bits taken, lowest first.
    #[inline]
    pub fn push_extra_word(&mut self, base: Pfn, bits: u64) -> u64 {
        match &mut self.home {
            Some((h, shift)) => {
                let got = h.accept_word(base, bits, *shift);
                self.taken += got.count_ones() as usize;
                got
            }
            None => self.frame_by_frame(base, bits, Self::push_extra),
        }
    }

    /// The frames `base + b` of `bits`, lowest first, through `push` until
    /// it refuses one: the bits taken.
    #[inline]
    fn frame_by_frame(
        &mut self,
        base: Pfn,
        bits: u64,
        push: fn(&mut Self, Pfn) -> Result<(), Pfn>,
    ) -> u64 {
        let mut got = 0;
        let mut rest = bits;
        while rest != 0 {
            let b = rest.trailing_zeros();
            if push(self, base + u64::from(b)).is_err() {
                break;
            }
            got |= 1 << b;
            rest &= rest - 1;
        }
        got
    }

    /// Blocks handed to the cache so far in this refill.
    pub fn taken(&self) -> usize {
        self.taken
    }
}

/// The blocks of one spill, popped lazily from the lists' tails in the
/// round-robin order of spec 04 §5.5.
pub struct SpillBatch<'a, 'm> {
    lists: &'a mut Lists<'m>,
    /// The home lists and the home order, with homes.
    homes: Option<(&'a mut [Home; PCP_TYPES], u8)>,
    thp: Order,
    idx: usize,
    in_list: bool,
    /// A spill of the foreign frames: these, newest first, and no list
    /// (empty in any other spill).
    foreign: &'a [Pfn],
    remaining: i64,
    pages: u64,
    blocks: u32,
}

impl<'a, 'm> SpillBatch<'a, 'm> {
    /// `pages` to free starting at list `start` (the list just freed to).
    pub(crate) fn new(
        lists: &'a mut Lists<'m>,
        homes: Option<(&'a mut [Home; PCP_TYPES], u8)>,
        thp: Order,
        pages: u32,
        start: ListIndex,
    ) -> Self {
        SpillBatch {
            lists,
            homes,
            thp,
            idx: (start.get() + NR_PCP_LISTS - 1) % NR_PCP_LISTS,
            in_list: false,
            foreign: &[],
            remaining: pages as i64,
            pages: 0,
            blocks: 0,
        }
    }

    /// The foreign frames `frames` (order 0), newest (last) first.
    pub(crate) fn foreign(lists: &'a mut Lists<'m>, frames: &'a [Pfn]) -> Self {
        SpillBatch {
            lists,
            homes: None,
            thp: Order::new_truncated(0),
            idx: ListIndex::FOREIGN.get(),
            in_list: true,
            foreign: frames,
            remaining: frames.len() as i64,
            pages: 0,
            blocks: 0,
        }
    }

    /// Base pages pulled so far.
    pub fn pages(&self) -> u64 {
        self.pages
    }

    /// Blocks pulled so far.
    pub fn blocks(&self) -> u32 {
        self.blocks
    }

    /// In a spill of the foreign list (frames freed outside the cache's
    /// home, seldom neighbours of one another, so that a zone gains by
    /// loading the next one's metadata while it frees this one), the frame
    /// the next call of `next` will hand out, left in place; `None` at the
    /// batch's end and in any other spill.
    #[inline]
    pub fn peek_foreign(&self) -> Option<Pfn> {
        if self.foreign.is_empty() || self.remaining <= 0 {
            return None;
        }
        self.foreign.get(self.remaining as usize - 1).copied()
    }
}

impl SpillBatch<'_, '_> {
    fn is_empty(&self, li: ListIndex) -> bool {
        match &self.homes {
            Some((homes, _)) if li.get() < PCP_TYPES => homes[li.get()].is_empty(),
            _ => self.lists.is_empty(li),
        }
    }

    /// The coldest block of list `li`: a linked list's tail, a home's
    /// highest frame.
    fn pop_cold(&mut self, li: ListIndex) -> Option<Pfn> {
        match &mut self.homes {
            Some((homes, _)) if li.get() < PCP_TYPES => homes[li.get()].take_high(),
            _ => self.lists.pop_tail(li),
        }
    }
}

impl Iterator for SpillBatch<'_, '_> {
    type Item = (Pfn, Order);

    #[inline]
    fn next(&mut self) -> Option<(Pfn, Order)> {
        if self.remaining <= 0 {
            return None;
        }
        if !self.foreign.is_empty() {
            // The foreign frames' spill, one frame a step: inline in the
            // caller's loop.
            let frame = *self.foreign.get(self.remaining as usize - 1)?;
            self.remaining -= 1;
            self.pages += 1;
            self.blocks += 1;
            return Some((frame, Order::new_truncated(0)));
        }
        self.next_round_robin()
    }
}

impl SpillBatch<'_, '_> {
    /// [`SpillBatch::next`] across the lists (spec 04 §5.5).
    #[inline(never)]
    fn next_round_robin(&mut self) -> Option<(Pfn, Order)> {
        let mut li = ListIndex::new(self.idx)?;
        if !self.in_list || self.is_empty(li) {
            // spec 04 §5.5: advance round robin to the next non-empty list.
            let mut tries = 0;
            loop {
                self.idx = (self.idx + 1) % NR_PCP_LISTS;
                li = ListIndex::new(self.idx)?;
                if !self.is_empty(li) {
                    break;
                }
                tries += 1;
                if tries == NR_PCP_LISTS {
                    return None;
                }
            }
            self.in_list = true;
        }
        let frame = self.pop_cold(li)?;
        let order = li.order(self.thp);
        let pages = order.pages() as u32;
        // Whole blocks leave, so the total may overshoot by < 2^order (§5.5).
        self.remaining -= pages as i64;
        self.pages += pages as u64;
        self.blocks += 1;
        Some((frame, order))
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use crate::lists::Slot;

    /// A refill by bitmap words: a home takes a word of its region whole,
    /// ends the refill at another region's, and a word beyond what the
    /// cache wants (or a list without a home) goes frame by frame, lowest
    /// first.
    #[test]
    fn words_go_into_the_home_whole_and_elsewhere_frame_by_frame() {
        let mut slots = std::vec![Slot::EMPTY; 8];
        let mut lists = Lists::new(&mut slots);
        let li = ListIndex::new(0).unwrap();
        let mut home = Home::EMPTY;
        let mut sink = RefillSink::new(&mut lists, Some((&mut home, 7)), li, 100);
        assert_eq!(sink.push_word(Pfn(128), 0xff), 0xff);
        assert_eq!(sink.push_word(Pfn(192), 0b11), 0b11);
        assert_eq!((sink.taken(), sink.remaining()), (10, 90));
        assert_eq!(sink.push_word(Pfn(256), 1), 0, "another region");
        assert_eq!(sink.remaining(), 0, "the refill ends there");
        assert_eq!(home.len(), 10);
        assert!(home.contains(Pfn(128), 7) && !home.contains(Pfn(0), 7));

        // More frames than wanted: the lowest, one by one.
        let mut home = Home::EMPTY;
        let mut sink = RefillSink::new(&mut lists, Some((&mut home, 7)), li, 3);
        assert_eq!(sink.push_word(Pfn(0), 0b1111_0000), 0b111_0000);
        assert_eq!((sink.taken(), sink.remaining()), (3, 0));
        assert_eq!(home.take(), Some(Pfn(4)));

        // No home: onto the list's tail, frame by frame.
        let mut sink = RefillSink::new(&mut lists, None, li, 10);
        assert_eq!(sink.push_word(Pfn(64), 0b101), 0b101);
        assert_eq!(sink.taken(), 2);
        assert_eq!(lists.len(li), 2);
        assert_eq!(lists.pop_head(li), Some(Pfn(64)));
        assert_eq!(lists.pop_head(li), Some(Pfn(66)));
    }

    /// Extra frames (past what the cache asked for) by word: a home takes
    /// the frames of its region whatever `remaining` says, and a list
    /// without a home takes them until its slots run out.
    #[test]
    fn extra_words_go_in_past_the_request_until_nothing_fits() {
        let mut slots = std::vec![Slot::EMPTY; 3];
        let mut lists = Lists::new(&mut slots);
        let li = ListIndex::new(0).unwrap();
        let mut home = Home::EMPTY;
        let mut sink = RefillSink::new(&mut lists, Some((&mut home, 7)), li, 1);
        assert_eq!(sink.push_word(Pfn(128), 1), 1);
        assert_eq!(sink.remaining(), 0);
        assert_eq!(sink.push_extra_word(Pfn(128), 0b1110), 0b1110);
        assert_eq!(sink.push_extra_word(Pfn(256), 1), 0, "another region");
        assert_eq!((sink.taken(), sink.remaining()), (4, 0));
        assert_eq!(home.len(), 4);

        // No home: three slots, so the fourth frame stays with the zone.
        let mut sink = RefillSink::new(&mut lists, None, li, 0);
        assert_eq!(sink.push_extra_word(Pfn(64), 0b1111), 0b111);
        assert_eq!(sink.taken(), 3);
        assert_eq!(lists.len(li), 3);
    }

    /// A spill of the foreign frames (in no order, whose metadata a zone
    /// loads ahead) names the frame it hands out next without taking it,
    /// another spill names none; the foreign frames go newest first, and
    /// the lists are left alone.
    #[test]
    fn a_foreign_spill_names_its_next_frame() {
        let mut slots = std::vec![Slot::EMPTY; 8];
        let mut lists = Lists::new(&mut slots);
        let li = ListIndex::new(0).unwrap();
        let foreign = [5, 900, 77].map(Pfn);
        for f in foreign {
            lists.push_head(li, Pfn(f.get() + 1)).unwrap();
        }
        let mut batch = SpillBatch::foreign(&mut lists, &foreign);
        let mut got = std::vec::Vec::new();
        while let Some(next) = batch.peek_foreign() {
            let (p, o) = batch.next().expect("the frame peeked at");
            assert_eq!((p, o.get()), (next, 0));
            got.push(p.get());
        }
        assert_eq!(got, [77, 900, 5]);
        assert_eq!((batch.next(), batch.pages()), (None, 3));
        assert_eq!(lists.len(li), 3, "the lists keep their blocks");

        let mut batch = SpillBatch::new(&mut lists, None, Order::new_truncated(9), 3, li);
        assert_eq!(batch.peek_foreign(), None);
        let got: std::vec::Vec<_> = batch.by_ref().map(|(p, _)| p.get()).collect();
        assert_eq!(got, [6, 901, 78]);
    }
}
