//! Reserving, releasing and removing arbitrary frame ranges (firmware and
//! kernel image holes discovered late, contiguous allocations, memory
//! offline).

use crate::error::RangeError;
use crate::frame::State;
use crate::policy::MergePolicy;
use crate::zone::BuddyZone;
use crate::{Order, PfnRange};

impl<P: MergePolicy> BuddyZone<'_, P> {
    /// Allocates every frame of `range`, as the largest aligned blocks that
    /// fit. Fails, changing nothing, if any frame is a hole or not free.
    pub fn reserve_range(&mut self, range: PfnRange) -> Result<(), RangeError> {
        self.check_range(range)?;
        let mut p = range.start;
        while p < range.end {
            match self.containing(self.idx(p)) {
                None => return Err(RangeError::Hole { pfn: p }),
                Some((h, f)) if f.state == State::FreeHead => {
                    p = (self.pfn(h) + (1 << f.order)).min(range.end)
                }
                Some(_) => return Err(RangeError::Busy { pfn: p }),
            }
        }
        let mut p = range.start;
        while p < range.end {
            let (_, f) = self
                .containing(self.idx(p))
                .unwrap_or_else(|| unreachable!());
            let align = p.get().trailing_zeros().min(63) as u8;
            let fit = (63 - (range.end - p).leading_zeros()) as u8;
            let o = Order::new_truncated(align.min(fit).min(f.order));
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
            let order = Order::new_truncated(self.view(self.idx(p)).order);
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
            let i = self.idx(p);
            let order = self.view(i).order;
            self.policy.freed(p, Order::new_truncated(order));
            if order == self.max_order && !self.frames.is_init(i) {
                // A whole max-order block never split: its head speaks for
                // every frame.
                self.set(i, State::Hole, 0);
            } else {
                for t in i..i + (1 << order) {
                    self.set(t, State::Hole, 0);
                }
            }
            p = p + (1u64 << order);
        }
        self.managed -= range.len();
        Ok(())
    }

    /// Whether allocated blocks tile `range` exactly; the first frame where
    /// they do not, otherwise.
    fn check_tiled(&self, range: PfnRange) -> Result<(), RangeError> {
        self.check_range(range)?;
        let mut p = range.start;
        while p < range.end {
            let f = self.view(self.idx(p));
            match f.state {
                State::AllocHead if p + (1 << f.order) <= range.end => p = p + (1 << f.order),
                State::AllocHead => return Err(RangeError::NotBlockAligned { pfn: p }),
                State::Tail => {
                    let in_free = matches!(self.containing(self.idx(p)), Some((_, h)) if h.state == State::FreeHead);
                    return Err(if in_free {
                        RangeError::Busy { pfn: p }
                    } else {
                        RangeError::NotBlockAligned { pfn: p }
                    });
                }
                State::Hole => return Err(RangeError::Hole { pfn: p }),
                State::FreeHead => return Err(RangeError::Busy { pfn: p }),
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
