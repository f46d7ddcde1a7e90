//! A CPU's hot frames (spec 04 §5.7): the few order-0 frames of its homes
//! it freed last, handed out again first, newest first.
//!
//! A kernel frees a frame and soon wants one again (a page table, a
//! buffer): the frame it just freed is the cheapest answer, still in the
//! CPU's data cache, and a stack of numbers is the cheapest book to keep
//! it in (a push and a pop, where the home's bitmap needs its membership
//! test and two bit scans). Only a frame of its list's home goes hot: one
//! the home would hand out soon anyway, so the zone's placement (§5.6) is
//! kept; a frame of a sparse region still goes back towards the zone.

use crate::types::{MigrateType, PCP_LIST_TYPES, PCP_TYPES, Pfn};

/// Order-0 frames a CPU's cache of one zone keeps hot.
pub const HOT_FRAMES: usize = 8;

/// An entry's type takes its low two bits: the list type's value.
const TAG_BITS: u32 = 2;
const TAG_MASK: u64 = (1 << TAG_BITS) - 1;

/// The stack: `frame << 2 | type`, oldest first.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Hot {
    len: usize,
    frames: [u64; HOT_FRAMES],
}

/// The tag of a list type (Unmovable, Movable, Reclaimable: 0..3).
#[inline(always)]
fn tag(mt: MigrateType) -> u64 {
    mt as u64 & TAG_MASK
}

/// The list type a tag names.
fn type_of(e: u64) -> MigrateType {
    PCP_LIST_TYPES
        .get((e & TAG_MASK) as usize)
        .copied()
        .unwrap_or(MigrateType::Movable)
}

impl Hot {
    pub(crate) const EMPTY: Hot = Hot {
        len: 0,
        frames: [0; HOT_FRAMES],
    };

    /// Frames held.
    #[inline(always)]
    pub(crate) fn len(&self) -> u32 {
        self.len as u32
    }

    /// Whether a frame may be pushed.
    #[inline(always)]
    pub(crate) fn has_room(&self) -> bool {
        self.len < HOT_FRAMES
    }

    /// The newest frame if its type is `mt`, now taken; `None`, nothing
    /// changed, otherwise (a request of another type leaves it).
    #[inline(always)]
    pub(crate) fn pop(&mut self, mt: MigrateType) -> Option<Pfn> {
        if self.len == 0 {
            return None;
        }
        let top = self.len - 1;
        // The mask changes nothing (`len` is at most `HOT_FRAMES`, a power
        // of two) but spares the index a bounds check.
        let e = self.frames[top & (HOT_FRAMES - 1)];
        if e & TAG_MASK != tag(mt) {
            return None;
        }
        self.len = top;
        Some(Pfn(e >> TAG_BITS))
    }

    /// Holds `frame`, an order-0 frame of list type `mt`; `false`, nothing
    /// changed, when full.
    #[inline(always)]
    pub(crate) fn push(&mut self, frame: Pfn, mt: MigrateType) -> bool {
        debug_assert!(PCP_LIST_TYPES.contains(&mt), "{mt:?} is no list type");
        let Some(slot) = self.frames.get_mut(self.len) else {
            return false;
        };
        *slot = frame.get() << TAG_BITS | tag(mt);
        self.len += 1;
        true
    }

    /// Takes the newest frame whatever its type.
    pub(crate) fn pop_any(&mut self) -> Option<(Pfn, MigrateType)> {
        let top = self.len.checked_sub(1)?;
        self.len = top;
        let e = self.frames[top];
        Some((Pfn(e >> TAG_BITS), type_of(e)))
    }

    /// Visits every frame held, newest first, with its type.
    pub(crate) fn for_each(&self, mut f: impl FnMut(Pfn, MigrateType)) {
        for &e in self.frames[..self.len].iter().rev() {
            f(Pfn(e >> TAG_BITS), type_of(e));
        }
    }

    /// Whether the entries are well formed: each frame once, each tag a
    /// list type's.
    pub(crate) fn check(&self) -> Result<(), &'static str> {
        let held = self.frames.get(..self.len).ok_or("hot length")?;
        for (i, &e) in held.iter().enumerate() {
            if e & TAG_MASK >= PCP_TYPES as u64 {
                return Err("a hot frame of no list type");
            }
            if held[..i].iter().any(|&o| o >> TAG_BITS == e >> TAG_BITS) {
                return Err("a hot frame held twice");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_first_and_only_to_its_type() {
        let mut h = Hot::EMPTY;
        assert!(h.push(Pfn(7), MigrateType::Unmovable));
        assert!(h.push(Pfn(9), MigrateType::Movable));
        assert_eq!(h.pop(MigrateType::Unmovable), None, "the top is movable");
        assert_eq!(h.pop(MigrateType::Movable), Some(Pfn(9)));
        assert_eq!(h.pop(MigrateType::Unmovable), Some(Pfn(7)));
        assert_eq!(h.pop(MigrateType::Unmovable), None);
        h.check().unwrap();
    }

    #[test]
    fn full_refuses_and_pop_any_empties() {
        let mut h = Hot::EMPTY;
        for i in 0..HOT_FRAMES as u64 {
            assert!(h.push(Pfn(100 + i), MigrateType::Reclaimable));
        }
        assert!(!h.has_room());
        assert!(!h.push(Pfn(1), MigrateType::Reclaimable));
        let mut seen = std::vec::Vec::new();
        h.for_each(|f, mt| seen.push((f, mt)));
        let newest = (Pfn(100 + HOT_FRAMES as u64 - 1), MigrateType::Reclaimable);
        assert_eq!((seen.len(), seen[0]), (HOT_FRAMES, newest));
        assert_eq!(h.pop_any(), Some(newest));
        while h.pop_any().is_some() {}
        assert_eq!(h.len(), 0);
    }

    #[test]
    fn a_frame_held_twice_fails_the_check() {
        let mut h = Hot::EMPTY;
        h.push(Pfn(5), MigrateType::Movable);
        h.push(Pfn(5), MigrateType::Movable);
        assert_eq!(h.check(), Err("a hot frame held twice"));
    }
}
