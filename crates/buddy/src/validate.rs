//! `validate()`: walks every invariant of spec 01 §13 that applies to one
//! zone, and those of the chunked representation.

use crate::bits;
use crate::chunk::{FILED, MAX_CHUNK_ORDER, Mode, RBITS};
use crate::error::ValidateError;
use crate::frame::{Idx, Kind, NIL};
use crate::partial_chunks::{BUCKETS, PartialIndex};
use crate::policy::{ListId, MAX_LISTS, MergePolicy};
use crate::zone::BuddyZone;
use crate::{Order, Pfn};

fn bad(structure: &'static str, rule: &'static str, pfn: Option<Pfn>) -> ValidateError {
    ValidateError {
        structure,
        rule,
        pfn,
    }
}

/// The structures the core's rules are about.
struct Structure;

impl Structure {
    const FREE_LISTS: &'static str = "free lists";
    const FREE_COUNTS: &'static str = "free counts";
    const CHUNK_LISTS: &'static str = "chunk lists";
    const CHUNK_RECORDS: &'static str = "chunk records";
    const FRAME_WORDS: &'static str = "frame words";
}

impl<P: MergePolicy> BuddyZone<'_, P> {
    /// Checks the zone's invariants; O(frames). Used by tests, fuzzers and
    /// a kernel's self-test. An error is a bug in this crate, never bad input.
    ///
    /// Checked: free-list links and lengths; every listed block is a free
    /// head of that order and list, aligned, and inside the span (§13.1);
    /// frames tile into holes and blocks with no overlap (§13.2); free
    /// buddies on the same list merged (§13.2, by construction below the
    /// chunk order); per-list free-page and free-block counts (§13.3-4);
    /// each split chunk's counts agree with its bitmap and it is filed by
    /// its fill; every frame's word agrees with the blocks.
    pub fn validate(&self) -> Result<(), ValidateError> {
        let c = self.c;
        let nchunks = self.chunks.len() as Idx;
        let mut listed = 0u64;
        for l in (0..MAX_LISTS as u8).filter_map(ListId::new) {
            let mut pages = 0u64;
            for o in 0..=crate::ORDER_LIMIT {
                let lh = *self.areas.head(o, l);
                if (o > self.max_order || o < c) && lh.len != 0 {
                    return Err(bad(
                        Structure::FREE_LISTS,
                        "block of a wrong order on a free list",
                        None,
                    ));
                }
                let bit = self.areas.nonempty_mask(l) & (1 << o) != 0;
                if bit != (lh.len != 0) {
                    return Err(bad(
                        Structure::FREE_LISTS,
                        "non-empty mask disagrees with list length",
                        None,
                    ));
                }
                let (mut k, mut prev, mut n) = (lh.head, NIL, 0u32);
                while k != NIL {
                    if k >= nchunks || n > lh.len {
                        return Err(bad(
                            Structure::FREE_LISTS,
                            "list link out of range or cycle",
                            None,
                        ));
                    }
                    let ch = &self.chunks[k];
                    let p = self.pfn(self.first(k));
                    if ch.mode != Mode::FreeHead || ch.order != o || ch.list != l.get() {
                        return Err(bad(
                            Structure::FREE_LISTS,
                            "listed block is not a free head of this order and list",
                            Some(p),
                        ));
                    }
                    if ch.prev != prev {
                        return Err(bad(Structure::FREE_LISTS, "broken back link", Some(p)));
                    }
                    let ord = Order::new_truncated(o);
                    if !p.is_aligned(ord)
                        || !self.span.contains(p)
                        || !self.span.contains(p + (ord.pages() - 1))
                    {
                        return Err(bad(
                            Structure::FREE_LISTS,
                            "free block misaligned or outside the span",
                            Some(p),
                        ));
                    }
                    pages += ord.pages();
                    n += 1;
                    prev = k;
                    k = ch.next;
                }
                if n != lh.len || prev != lh.tail {
                    return Err(bad(
                        Structure::FREE_LISTS,
                        "list length or tail disagrees with links",
                        None,
                    ));
                }
                listed += n as u64;
            }
            if pages != self.areas.pages(l) {
                return Err(bad(
                    Structure::FREE_COUNTS,
                    "per-list free page count disagrees with lists",
                    None,
                ));
            }
        }

        // The partial lists.
        let mut filed = 0u64;
        for l in 0..MAX_LISTS {
            for j in 0..MAX_CHUNK_ORDER as usize {
                for b in 0..BUCKETS {
                    let (mut k, mut prev, mut n) = (self.partial.head(l, j, b), NIL, 0u64);
                    if (k != NIL) != self.partial.marked(l, j, b) {
                        return Err(bad(
                            Structure::CHUNK_LISTS,
                            "partial mask disagrees with its list",
                            None,
                        ));
                    }
                    while k != NIL {
                        if k >= nchunks || n > nchunks as u64 {
                            return Err(bad(
                                Structure::CHUNK_LISTS,
                                "partial link out of range or cycle",
                                None,
                            ));
                        }
                        let ch = &self.chunks[k];
                        let p = Some(self.pfn(self.first(k)));
                        if ch.mode != Mode::Split
                            || ch.list as usize != l
                            || ch.class as usize != j
                            || ch.bucket as usize != b
                            || !PartialIndex::filed_right(ch, c)
                        {
                            return Err(bad(
                                Structure::CHUNK_LISTS,
                                "chunk filed on the wrong partial list",
                                p,
                            ));
                        }
                        if ch.prev != prev {
                            return Err(bad(Structure::CHUNK_LISTS, "broken partial back link", p));
                        }
                        n += 1;
                        prev = k;
                        k = ch.next;
                    }
                    filed += n;
                }
            }
        }

        // Every chunk, and every frame of split chunks.
        let mut sub_blocks = [[0u64; MAX_CHUNK_ORDER as usize]; MAX_LISTS];
        let mut sub_pages = [0u64; MAX_LISTS];
        let (mut free_heads, mut managed, mut split_filed) = (0u64, 0u64, 0u64);
        let mut reserved_free = 0u64;
        let mut k = 0;
        while k < nchunks {
            let ch = &self.chunks[k];
            let first = self.first(k);
            let p = Some(self.pfn(first));
            match ch.mode {
                Mode::Hole => {
                    k += 1;
                    continue;
                }
                Mode::Covered => {
                    return Err(bad(
                        Structure::CHUNK_RECORDS,
                        "chunk belongs to no block",
                        p,
                    ));
                }
                Mode::Reserved => {
                    // Its free frames are the reservation's: none counted,
                    // filed or flagged here; its frames tile as blocks.
                    if ch.flags != 0
                        || ch.omask != 0
                        || bits::count(self.words(k)) != u32::from(ch.free)
                    {
                        return Err(bad(
                            Structure::CHUNK_RECORDS,
                            "reserved chunk's own state is not empty",
                            p,
                        ));
                    }
                    self.validate_frames(k, true)?;
                    reserved_free += u64::from(ch.free);
                    managed += (first..first + (1 << c))
                        .filter(|&i| self.is_free_bit(i) || self.frames.get(i).kind() != Kind::Hole)
                        .count() as u64;
                    k += 1;
                    continue;
                }
                Mode::Split => {
                    self.validate_split(k)?;
                    let l = ch.list as usize & (MAX_LISTS - 1);
                    for (n, &k) in sub_blocks[l].iter_mut().zip(&ch.counts[..c as usize]) {
                        *n += u64::from(k);
                    }
                    sub_pages[l] += u64::from(ch.free);
                    split_filed += u64::from(ch.flags & FILED != 0);
                    managed += (first..first + (1 << c))
                        .filter(|&i| self.is_free_bit(i) || self.frames.get(i).kind() != Kind::Hole)
                        .count() as u64;
                    k += 1;
                    continue;
                }
                Mode::FreeHead | Mode::AllocHead => {}
            }
            let o = ch.order;
            let n = 1u32 << (o.saturating_sub(c));
            if o < c || o > self.max_order || k % n != 0 {
                return Err(bad(
                    Structure::FRAME_WORDS,
                    "block head misaligned or of a wrong order",
                    p,
                ));
            }
            let end = first + (1 << o);
            if !self.span.contains(self.pfn(first)) || !self.span.contains(self.pfn(end - 1)) {
                return Err(bad(Structure::FRAME_WORDS, "block leaves the span", p));
            }
            if let Some(t) = (k + 1..k + n).find(|&t| self.chunks[t].mode != Mode::Covered) {
                return Err(bad(
                    Structure::FRAME_WORDS,
                    "blocks overlap",
                    Some(self.pfn(self.first(t))),
                ));
            }
            managed += 1 << o;
            if ch.mode == Mode::FreeHead {
                free_heads += 1;
                if o < self.max_order {
                    let b = &self.chunks[k ^ n];
                    // Buddies on different lists may stay apart (a policy
                    // may retype memory without re-merging); on one list
                    // they must have merged.
                    if b.mode == Mode::FreeHead && b.order == o && b.list == ch.list {
                        return Err(bad(
                            Structure::FREE_LISTS,
                            "two free buddies left unmerged",
                            p,
                        ));
                    }
                }
            }
            k += n;
        }
        if free_heads != listed {
            return Err(bad(
                Structure::FREE_LISTS,
                "a free block is on no list",
                None,
            ));
        }
        if filed != split_filed {
            return Err(bad(
                Structure::CHUNK_LISTS,
                "a filed chunk is on no partial list",
                None,
            ));
        }
        for l in 0..MAX_LISTS {
            if sub_pages[l] != self.sub.pages(l)
                || (0..c).any(|o| sub_blocks[l][o as usize] != self.sub.blocks(l, o))
            {
                return Err(bad(
                    Structure::FREE_COUNTS,
                    "per-list counts below the chunk order disagree",
                    None,
                ));
            }
        }
        let lists = (0..MAX_LISTS as u8).filter_map(ListId::new);
        if lists.map(|l| self.free_pages_in(l)).sum::<u64>() != self.free_pages() {
            return Err(bad(
                Structure::FREE_COUNTS,
                "free page total disagrees with the lists",
                None,
            ));
        }
        if reserved_free != self.reserved_free {
            return Err(bad(
                Structure::FREE_COUNTS,
                "frames freed into reserved chunks miscounted",
                None,
            ));
        }
        if managed != self.managed {
            return Err(bad(
                Structure::FREE_COUNTS,
                "managed frames disagree with blocks",
                None,
            ));
        }
        Ok(())
    }

    /// The invariants of split chunk `k`.
    fn validate_split(&self, k: Idx) -> Result<(), ValidateError> {
        let c = self.c;
        let ch = &self.chunks[k];
        let first = self.first(k);
        let p = Some(self.pfn(first));
        let w = self.words(k);
        let free = bits::count(w);
        if free != u32::from(ch.free) || free >= 1 << c {
            return Err(bad(
                Structure::CHUNK_RECORDS,
                "split chunk's free count wrong, or chunk wholly free",
                p,
            ));
        }
        for o in 0..c {
            let n = bits::maximal_blocks(w, o).count() as u64;
            if n != u64::from(ch.counts[o as usize]) || (n != 0) != (ch.omask & (1 << o) != 0) {
                return Err(bad(
                    Structure::CHUNK_RECORDS,
                    "split chunk's block counts disagree with its bitmap",
                    p,
                ));
            }
        }
        if !self.filed_right(k) {
            return Err(bad(
                Structure::CHUNK_LISTS,
                "split chunk not filed by its fill",
                p,
            ));
        }
        if ch.flags & RBITS == 0 && self.rwords(k).iter().any(|&r| r != 0) {
            return Err(bad(
                Structure::CHUNK_RECORDS,
                "reported bits without the chunk's flag",
                p,
            ));
        }
        self.validate_frames(k, false)
    }

    /// The frames of split or reserved chunk `k` tile into free frames,
    /// holes and allocated blocks (and, reserved, frames handed over).
    fn validate_frames(&self, k: Idx, reserved: bool) -> Result<(), ValidateError> {
        let c = self.c;
        let first = self.first(k);
        if c < 6 && self.words(k)[0] >> (1u32 << c) != 0 {
            return Err(bad(
                Structure::CHUNK_RECORDS,
                "free bit beyond the chunk",
                Some(self.pfn(first)),
            ));
        }
        let mut i = first;
        while i < first + (1 << c) {
            let in_span = self.span.contains(self.pfn(i));
            if self.is_free_bit(i) {
                if !in_span {
                    return Err(bad(
                        Structure::FRAME_WORDS,
                        "free frame outside the span",
                        Some(self.pfn(i)),
                    ));
                }
                i += 1;
                continue;
            }
            let word = self.frames.get(i);
            match word.kind() {
                Kind::Hole => i += 1,
                Kind::Reserved if reserved && in_span => i += 1,
                Kind::Reserved => {
                    return Err(bad(
                        Structure::FRAME_WORDS,
                        "frame handed to a reservation outside a reserved chunk",
                        Some(self.pfn(i)),
                    ));
                }
                Kind::Tail => {
                    return Err(bad(
                        Structure::FRAME_WORDS,
                        "frame belongs to no block",
                        Some(self.pfn(i)),
                    ));
                }
                Kind::Head => {
                    let o = word.order();
                    let end = i + (1 << o);
                    if o >= c || i & ((1 << o) - 1) != 0 || !in_span {
                        return Err(bad(
                            Structure::FRAME_WORDS,
                            "block head misaligned or of a wrong order",
                            Some(self.pfn(i)),
                        ));
                    }
                    if let Some(t) = (i + 1..end)
                        .find(|&t| self.is_free_bit(t) || self.frames.get(t).kind() != Kind::Tail)
                    {
                        return Err(bad(
                            Structure::FRAME_WORDS,
                            "blocks overlap",
                            Some(self.pfn(t)),
                        ));
                    }
                    if !self.span.contains(self.pfn(end - 1)) {
                        return Err(bad(
                            Structure::FRAME_WORDS,
                            "block leaves the span",
                            Some(self.pfn(i)),
                        ));
                    }
                    i = end;
                }
            }
        }
        Ok(())
    }
}
