//! `validate()`: walks every invariant of spec 01 §13 that applies to one zone.

use crate::Order;
use crate::error::ValidateError;
use crate::frame::{Idx, NIL, State};
use crate::policy::{ListId, MAX_LISTS, MergePolicy};
use crate::zone::BuddyZone;

fn bad(rule: &'static str, pfn: Option<crate::Pfn>) -> ValidateError {
    ValidateError { rule, pfn }
}

impl<P: MergePolicy> BuddyZone<'_, P> {
    /// Checks the zone's invariants; O(frames). Used by tests, fuzzers and
    /// a kernel's self-test. An error is a bug in this crate, never bad input.
    ///
    /// Checked: list links and lengths; every listed block is a free head of
    /// that order and list, aligned, and inside the span (§13.1); frames tile
    /// into holes and blocks with no overlap (§13.2); free buddies on the
    /// same list merged (§13.2); per-list free-page counts (§13.3-4); the lazy-init
    /// rule (an unwritten max-order block is wholly free or wholly a hole).
    pub fn validate(&self) -> Result<(), ValidateError> {
        let max = self.max_order;
        let mut listed_blocks = 0u64;
        for l in (0..MAX_LISTS as u8).filter_map(ListId::new) {
            let mut pages = 0u64;
            for o in 0..=crate::ORDER_LIMIT {
                let lh = *self.areas.head(o, l);
                if o > max && lh.len != 0 {
                    return Err(bad("block above max order on a list", None));
                }
                let bit = self.areas.nonempty_mask(l) & (1 << o) != 0;
                if bit != (lh.len != 0) {
                    return Err(bad("non-empty mask disagrees with list length", None));
                }
                let (mut i, mut prev, mut n) = (lh.head, NIL, 0u32);
                while i != NIL {
                    let p = self.pfn(i);
                    if i as usize >= self.frames.len() || n > lh.len {
                        return Err(bad("list link out of range or cycle", Some(p)));
                    }
                    let f = self.view(i);
                    if f.state != State::FreeHead || f.order != o || f.list != l.get() {
                        return Err(bad(
                            "listed block is not a free head of this order and list",
                            Some(p),
                        ));
                    }
                    if f.prev != prev {
                        return Err(bad("broken back link", Some(p)));
                    }
                    let ord = Order::new_truncated(o);
                    if !p.is_aligned(ord)
                        || !self.span.contains(p)
                        || !self.span.contains(p + (ord.pages() - 1))
                    {
                        return Err(bad("free block misaligned or outside the span", Some(p)));
                    }
                    pages += ord.pages();
                    n += 1;
                    prev = i;
                    i = f.next;
                }
                if n != lh.len || prev != lh.tail {
                    return Err(bad("list length or tail disagrees with links", None));
                }
                listed_blocks += n as u64;
            }
            if pages != self.areas.pages(l) {
                return Err(bad("per-list free page count disagrees with lists", None));
            }
        }

        // Walk every frame: holes and blocks must tile the table.
        let (mut i, end) = (0 as Idx, self.frames.len() as Idx);
        let (mut free_heads, mut managed) = (0u64, 0u64);
        while i < end {
            let h = self.span_head(i);
            if i == h {
                let hf = self.frames.get(h);
                if !self.frames.is_init(h) {
                    let whole =
                        hf.order == max && matches!(hf.state, State::FreeHead | State::AllocHead);
                    if hf.state != State::Hole && !whole {
                        return Err(bad(
                            "unwritten max-order block is neither a hole nor a whole block",
                            Some(self.pfn(h)),
                        ));
                    }
                }
            }
            let f = self.view(i);
            let p = self.pfn(i);
            match f.state {
                State::Hole => {
                    i += 1;
                    continue;
                }
                State::Tail => return Err(bad("frame belongs to no block", Some(p))),
                State::FreeHead | State::AllocHead => {}
            }
            let o = f.order;
            if o > max || i & ((1 << o) - 1) != 0 {
                return Err(bad("block head misaligned or above max order", Some(p)));
            }
            if (i..i + (1 << o)).any(|t| !self.span.contains(self.pfn(t))) {
                return Err(bad("block leaves the span", Some(p)));
            }
            if let Some(t) = (i + 1..i + (1 << o)).find(|&t| self.view(t).state != State::Tail) {
                return Err(bad("blocks overlap", Some(self.pfn(t))));
            }
            managed += 1 << o;
            if f.state == State::FreeHead {
                free_heads += 1;
                if o < max {
                    let b = i ^ (1 << o);
                    let bf = self.view(b);
                    // Buddies on different lists may stay apart (a policy
                    // may retype memory without re-merging); on one list
                    // they must have merged.
                    if bf.state == State::FreeHead && bf.order == o && bf.list == f.list {
                        return Err(bad("two free buddies left unmerged", Some(p)));
                    }
                }
            }
            i += 1 << o;
        }
        if free_heads != listed_blocks {
            return Err(bad("a free block is on no list", None));
        }
        if managed != self.managed {
            return Err(bad("managed frames disagree with blocks", None));
        }
        Ok(())
    }
}
