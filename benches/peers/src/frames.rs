//! What every column is asked: one block of an order, give one back, and,
//! once the timed part is over, how much is free.

/// Free memory once caches and reservations have given their frames back.
#[derive(Clone, Copy, Debug)]
pub struct Settled {
    /// Free frames.
    pub frames: u64,
    /// Free, aligned 2 MiB blocks (whole, or inside a larger free block).
    pub huge_blocks: u64,
}

/// One allocator as one thread uses it, keeping its allocations the
/// column's way (frame numbers or owning blocks).
pub trait Frames {
    /// What the caller keeps for an allocation.
    type Handle;
    /// `2^order` frames; `None` when none are left.
    fn alloc(&mut self, order: u8) -> Option<Self::Handle>;
    /// Gives back a block of `order` this handle allocated.
    fn free(&mut self, handle: Self::Handle, order: u8);
    /// The first frame of a kept allocation (what a caller looks at).
    fn pfn(handle: &Self::Handle) -> u64;
    /// Empties this handle's caches and the allocator's reservations into
    /// the free pool, then counts what is free.
    fn settle(&mut self) -> Settled;
}

/// Frames in a 2 MiB block.
pub const HUGE_FRAMES: u64 = 512;

/// A column that keeps each allocation of `F` in two words, the first the
/// frame number and the second unused: the size of a `Block`. What a
/// caller keeps moves through its caches with every step of a test that
/// picks allocations at random (the scattered test's frees), so a column
/// of `Block`s is compared with the peer's on the same memory this way.
pub struct TwoWords<F>(pub F);

impl<F: Frames<Handle = u64>> Frames for TwoWords<F> {
    type Handle = [u64; 2];
    #[inline]
    fn alloc(&mut self, order: u8) -> Option<[u64; 2]> {
        self.0.alloc(order).map(|pfn| [pfn, 0])
    }
    #[inline]
    fn free(&mut self, handle: [u64; 2], order: u8) {
        self.0.free(handle[0], order);
    }
    #[inline]
    fn pfn(handle: &[u64; 2]) -> u64 {
        handle[0]
    }
    fn settle(&mut self) -> Settled {
        self.0.settle()
    }
}
