//! A CPU's foreign frames: order-0 frames freed outside their list's home
//! (see [`crate::PcpConfig::with_home`]), on their way back to the zone.
//!
//! They are never allocated from and leave all together (a spill takes
//! the newest first, and a partial spill leaves the oldest), so a stack of
//! frame numbers inside the cache holds them: a push and a pop each, where
//! a linked list in the slot memory would take and link a slot (and touch
//! its neighbour's) for every frame. The stack is small, since a free
//! streak spills it a batch at a time: its size bounds that batch.

use crate::types::Pfn;

/// The most foreign frames a CPU's cache of one zone holds; a batch
/// larger than this spills at this many.
pub const FOREIGN_FRAMES: usize = 64;

/// The stack, oldest first.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Foreign {
    len: usize,
    frames: [Pfn; FOREIGN_FRAMES],
}

impl Foreign {
    pub(crate) const EMPTY: Foreign = Foreign {
        len: 0,
        frames: [Pfn(0); FOREIGN_FRAMES],
    };

    /// Frames held.
    #[inline(always)]
    pub(crate) fn len(&self) -> u32 {
        self.len as u32
    }

    /// Whether no frame may be pushed.
    #[inline(always)]
    pub(crate) fn is_full(&self) -> bool {
        self.len >= FOREIGN_FRAMES
    }

    /// Holds `frame`; `false`, nothing changed, when full.
    #[inline(always)]
    pub(crate) fn push(&mut self, frame: Pfn) -> bool {
        let Some(slot) = self.frames.get_mut(self.len) else {
            return false;
        };
        *slot = frame;
        self.len += 1;
        true
    }

    /// The frames held, oldest first.
    #[inline(always)]
    pub(crate) fn frames(&self) -> &[Pfn] {
        &self.frames[..self.len.min(FOREIGN_FRAMES)]
    }

    /// Forgets the newest `n` frames (those a spill took).
    #[inline(always)]
    pub(crate) fn drop_newest(&mut self, n: usize) {
        self.len -= n.min(self.len);
    }

    /// Whether `frame` is held (for checks, not the fast path).
    pub(crate) fn holds(&self, frame: Pfn) -> bool {
        self.frames().contains(&frame)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pushes_until_full_and_drops_the_newest() {
        let mut f = Foreign::EMPTY;
        for i in 0..FOREIGN_FRAMES as u64 {
            assert!(f.push(Pfn(100 + i)));
        }
        assert!(f.is_full());
        assert!(!f.push(Pfn(7)), "a full stack refuses");
        assert_eq!(f.len() as usize, FOREIGN_FRAMES);
        assert!(!f.holds(Pfn(7)));
        f.drop_newest(FOREIGN_FRAMES - 2);
        assert_eq!(f.frames(), &[Pfn(100), Pfn(101)], "the oldest stay");
        f.drop_newest(5);
        assert_eq!(f.len(), 0, "more than held empties it");
        assert!(f.push(Pfn(7)) && f.holds(Pfn(7)));
    }
}
