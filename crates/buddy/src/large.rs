//! Blocks of at least the chunk order: split and merge on the free lists,
//! chunk by chunk (spec 01 §5-6 at chunk granularity).

use crate::Order;
use crate::chunk::{Mode, REPORTED};
use crate::frame::Idx;
use crate::policy::{ListId, MergePolicy};
use crate::zone::BuddyZone;

impl<P: MergePolicy> BuddyZone<'_, P> {
    /// The head chunk of the large (free or allocated) block holding chunk
    /// `k`; `None` for a hole or a split chunk.
    pub(crate) fn large_containing(&self, k: Idx) -> Option<Idx> {
        let ch = &self.chunks[k];
        match ch.mode {
            Mode::FreeHead | Mode::AllocHead => Some(k),
            Mode::Covered => (self.c + 1..=self.max_order).find_map(|o| {
                let h = k & !((1 << (o - self.c)) - 1);
                let hc = &self.chunks[h];
                let head = matches!(hc.mode, Mode::FreeHead | Mode::AllocHead);
                (head && hc.order >= o && h + (1 << (hc.order - self.c)) > k).then_some(h)
            }),
            Mode::Hole | Mode::Split | Mode::Reserved => None,
        }
    }

    /// Inserts the block of `order` (at least the chunk order) headed by
    /// chunk `k` on `list`, merging upward with free buddies on the same
    /// list, and with buddies on other lists too if `cross` and the policy
    /// allows (spec 01 §5). Returns the final head chunk and order.
    pub(crate) fn large_insert(
        &mut self,
        mut k: Idx,
        mut order: u8,
        list: ListId,
        to_tail: bool,
        cross: bool,
    ) -> (Idx, u8) {
        let c = self.c;
        while order < self.max_order {
            let b = k ^ (1 << (order - c));
            let bc = &self.chunks[b];
            if bc.mode != Mode::FreeHead || bc.order != order {
                break;
            }
            let blist = ListId::from_stored(bc.list);
            if blist != list
                && !(cross
                    && self
                        .policy
                        .can_merge(Order::new_truncated(order), list, blist))
            {
                break;
            }
            self.areas.remove(&mut self.chunks, b);
            if blist != list {
                let bp = self.pfn(self.first(b));
                self.policy.merged(bp, Order::new_truncated(order), list);
            }
            // The higher of the two heads becomes an ordinary chunk.
            self.chunks[k.max(b)].mode = Mode::Covered;
            k = k.min(b);
            order += 1;
            self.stats.merges += 1;
        }
        let tail = to_tail
            || self.large_merge_likely(k, order)
            || self.policy.keep_for_last(self.pfn(self.first(k)), list);
        self.areas.push(&mut self.chunks, k, order, list, tail);
        (k, order)
    }

    /// spec 01 §5.1 (`buddy_merge_likely`) at chunk granularity: if the
    /// parent's buddy one order up is already free, this block is likely to
    /// merge two levels up once its own buddy comes back, so it should be
    /// allocated last.
    fn large_merge_likely(&self, k: Idx, order: u8) -> bool {
        if order + 1 >= self.max_order {
            return false;
        }
        let s = order - self.c;
        let parent = k & !(1 << s);
        let uncle = parent ^ (1 << (s + 1));
        let u = &self.chunks[uncle];
        u.mode == Mode::FreeHead && u.order == order + 1
    }

    /// Splits the unlinked free block at chunk `k` from order `high` down
    /// to `low`, returning the upper halves to the head of `list`'s lists
    /// (spec 01 §6.2: ascending addresses are handed out first).
    #[inline]
    pub(crate) fn large_expand(&mut self, k: Idx, low: u8, mut high: u8, list: ListId) {
        while high > low {
            high -= 1;
            let half = k + (1 << (high - self.c));
            self.areas.push(&mut self.chunks, half, high, list, false);
            self.stats.splits += 1;
        }
    }

    /// Splits the unlinked free block at chunk `cur` of order `o` down to
    /// order `want` (at least the chunk order) around chunk `target`; the
    /// halves not holding it go back free on `list`. Returns the head chunk
    /// of the order-`want` block holding `target` (unlinked; its mode is
    /// the caller's to set).
    pub(crate) fn large_split_toward(
        &mut self,
        mut cur: Idx,
        mut o: u8,
        target: Idx,
        want: u8,
        list: ListId,
    ) -> Idx {
        while o > want {
            o -= 1;
            let upper = cur + (1 << (o - self.c));
            let (keep, give) = if target >= upper {
                (upper, cur)
            } else {
                (cur, upper)
            };
            self.areas.push(&mut self.chunks, give, o, list, false);
            self.stats.splits += 1;
            cur = keep;
        }
        cur
    }

    /// Marks the unlinked block at chunk `k` allocated with `order`.
    pub(crate) fn large_mark_allocated(&mut self, k: Idx, order: u8, tag: u32) {
        let ch = &mut self.chunks[k];
        ch.mode = Mode::AllocHead;
        ch.order = order;
        ch.tag = tag;
        ch.flags &= !REPORTED;
        self.stats.allocs += 1;
    }
}
