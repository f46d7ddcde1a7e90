//! The peer: llfree-rs's `LLFree` over the same frames, set up as its own
//! tests do (`Classing::simple`: one class for small and one for huge
//! frames, one local reservation a core), allocations kept as frame
//! numbers (`FrameId`), which is what it hands out.

use llfree::{Alloc, Classing, FrameId, HUGE_ORDER, Init, LLFree, MetaData, MetaSize, Request};

use crate::frames::{Frames, Settled};

/// LLFree asks for its buffers aligned to a cache line.
const ALIGN: usize = 64;

/// A zeroed buffer of `len` bytes whose usable part starts on a cache line.
struct Buffer(Box<[u8]>);

impl Buffer {
    fn new(len: usize) -> Buffer {
        Buffer(vec![0; len + ALIGN].into_boxed_slice())
    }
    fn aligned(&mut self, len: usize) -> &mut [u8] {
        let off = self.0.as_ptr().align_offset(ALIGN);
        &mut self.0[off..off + len]
    }
}

/// Orders up to `HUGE_ORDER`, each with the request `Classing::simple`
/// makes for it on one core.
pub type Requests = [Request; HUGE_ORDER + 1];

/// Bytes of LLFree's metadata over `frames` frames for `cores` cores.
pub fn metadata_bytes(frames: u64, cores: usize) -> usize {
    let (classing, _) = Classing::simple(cores);
    let MetaSize {
        local,
        trees,
        lower,
    } = LLFree::metadata_size(&classing, frames as usize);
    local + trees + lower
}

/// Runs `f` on an `LLFree` over `frames` frames, all free, with local
/// reservations for `cores` cores, and each core's requests by order.
pub fn with_llfree<T>(
    frames: u64,
    cores: usize,
    f: impl FnOnce(&LLFree<'_>, &[Requests]) -> T,
) -> T {
    let (classing, request) = Classing::simple(cores);
    let size = LLFree::metadata_size(&classing, frames as usize);
    let (mut local, mut trees, mut lower) = (
        Buffer::new(size.local),
        Buffer::new(size.trees),
        Buffer::new(size.lower),
    );
    let meta = MetaData {
        local: local.aligned(size.local),
        trees: trees.aligned(size.trees),
        lower: lower.aligned(size.lower),
    };
    let a = LLFree::new(frames as usize, Init::FreeAll, &classing, meta).expect("LLFree::new");
    let requests: Vec<Requests> = (0..cores)
        .map(|core| std::array::from_fn(|order| request(order, core)))
        .collect();
    f(&a, &requests)
}

/// One core's handle: the shared allocator and that core's requests.
pub struct Peer<'s, 'a> {
    /// The allocator.
    pub a: &'s LLFree<'a>,
    /// The core's request for each order.
    pub requests: &'s Requests,
}

impl Frames for Peer<'_, '_> {
    type Handle = u64;
    #[inline]
    fn alloc(&mut self, order: u8) -> Option<u64> {
        let (frame, _) = self.a.get(None, self.requests[order as usize]).ok()?;
        Some(frame.into_bits())
    }
    #[inline]
    fn free(&mut self, pfn: u64, order: u8) {
        self.a
            .put(FrameId::from_bits(pfn), self.requests[order as usize])
            .expect("put");
    }
    #[inline]
    fn pfn(pfn: &u64) -> u64 {
        *pfn
    }
    fn settle(&mut self) -> Settled {
        self.a.drain();
        let s = self.a.stats();
        Settled {
            frames: s.free_frames as u64,
            huge_blocks: s.free_huge as u64,
        }
    }
}
