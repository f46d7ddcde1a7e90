//! Reserving, releasing and removing arbitrary frame ranges (firmware and
//! kernel image holes discovered late, contiguous allocations, memory
//! offline).

use crate::chunk::Mode;
use crate::error::RangeError;
use crate::frame::Word;
use crate::policy::MergePolicy;
use crate::zone::{BlockInfo, BuddyZone};
use crate::{Order, PfnRange};

impl<P: MergePolicy> BuddyZone<'_, P> {
    /// Allocates every frame of `range`, as the largest aligned blocks that
    /// fit. Fails, changing nothing, if any frame is a hole or not free.
    pub fn reserve_range(&mut self, range: PfnRange) -> Result<(), RangeError> {
        self.check_range(range)?;
        let mut p = range.start;
        while p < range.end {
            match self.block_at(p) {
                Some(BlockInfo::Free { head, order, .. }) => {
                    p = (head + order.pages()).min(range.end)
                }
                Some(BlockInfo::Hole) | None => return Err(RangeError::Hole { pfn: p }),
                Some(BlockInfo::Allocated { .. }) => return Err(RangeError::Busy { pfn: p }),
            }
        }
        let mut p = range.start;
        while p < range.end {
            let Some(BlockInfo::Free { order: f, .. }) = self.block_at(p) else {
                unreachable!("checked free above")
            };
            let align = p.get().trailing_zeros().min(63) as u8;
            let fit = (63 - (range.end - p).leading_zeros()) as u8;
            let o = Order::new_truncated(align.min(fit).min(f.get()));
            // Checked above: the whole block lies in one free block.
            self.alloc_at(p, o)
                .map_err(|_| RangeError::Busy { pfn: p })?;
            p = p + o.pages();
        }
        Ok(())
    }

    /// Frees every allocated block of `range`. The range must be tiled
    /// exactly by allocated blocks (as `reserve_range` leaves it); otherwise
    /// nothing changes and the first frame where the tiling breaks is named.
    pub fn release_range(&mut self, range: PfnRange) -> Result<(), RangeError> {
        self.check_tiled(range)?;
        let mut p = range.start;
        while p < range.end {
            let Some(BlockInfo::Allocated { order, .. }) = self.block_at(p) else {
                unreachable!("checked tiled above")
            };
            self.free(p, order)
                .map_err(|_| RangeError::Busy { pfn: p })?;
            p = p + order.pages();
        }
        Ok(())
    }

    /// Takes the frames of `range` out of the zone (memory offline): the
    /// range must be tiled exactly by allocated blocks (as `reserve_range`
    /// leaves it); every frame becomes a hole, no longer managed, until
    /// `add_free_range` hands it over again. Otherwise nothing changes and
    /// the first frame where the tiling breaks is named.
    pub fn remove_range(&mut self, range: PfnRange) -> Result<(), RangeError> {
        self.check_tiled(range)?;
        let mut p = range.start;
        while p < range.end {
            let Some(BlockInfo::Allocated { order, .. }) = self.block_at(p) else {
                unreachable!("checked tiled above")
            };
            let i = self.idx(p);
            let o = order.get();
            if o >= self.c {
                let k = self.chunk_of(i);
                for n in 0..1u32 << (o - self.c) {
                    self.chunks[k + n].mode = Mode::Hole;
                }
            } else {
                for t in i..i + (1 << o) {
                    self.frames.set(t, Word::HOLE);
                }
            }
            p = p + order.pages();
        }
        self.managed -= range.len();
        Ok(())
    }

    /// Whether allocated blocks tile `range` exactly; the first frame where
    /// they do not, otherwise.
    fn check_tiled(&self, range: PfnRange) -> Result<(), RangeError> {
        self.check_range(range)?;
        // A reserved chunk's frames are the reservation's to give back.
        let chunk = Order::new_truncated(self.c);
        let mut s = range.start.align_down(chunk);
        while s < range.end {
            if self.chunks[self.chunk_of(self.idx(s))].mode == crate::chunk::Mode::Reserved {
                return Err(RangeError::Busy {
                    pfn: s.max(range.start),
                });
            }
            s = s + chunk.pages();
        }
        let mut p = range.start;
        while p < range.end {
            match self.block_at(p) {
                Some(BlockInfo::Allocated { head, order, .. }) if head == p => {
                    if p + order.pages() > range.end {
                        return Err(RangeError::NotBlockAligned { pfn: p });
                    }
                    p = p + order.pages();
                }
                Some(BlockInfo::Allocated { .. }) => {
                    return Err(RangeError::NotBlockAligned { pfn: p });
                }
                Some(BlockInfo::Free { .. }) => return Err(RangeError::Busy { pfn: p }),
                Some(BlockInfo::Hole) | None => return Err(RangeError::Hole { pfn: p }),
            }
        }
        Ok(())
    }

    fn check_range(&self, range: PfnRange) -> Result<(), RangeError> {
        if range.is_empty() {
            return Err(RangeError::Empty);
        }
        if !self.span.contains_range(&range) {
            return Err(RangeError::OutOfSpan);
        }
        Ok(())
    }
}
