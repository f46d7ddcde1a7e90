//! Where a frame's metadata lies, known without the zone: a caller about
//! to take the lock that guards a [`BuddyZone`] for a frame (or about to
//! free the next frame of a batch) asks the processor to start loading the
//! lines the core will read for it, the chunk's entry and the bitmap word,
//! so that their cache misses overlap instead of following one another. A
//! frame freed in random order over gigabytes misses the first-level cache
//! on each of them.

use core::mem::{offset_of, size_of};

use pageframe_types::prefetch::prefetch;

use crate::chunk::Chunk;
use crate::zone::BuddyZone;
use crate::{MergePolicy, Pfn};

/// The addresses of a zone's chunk table and free bitmap, as numbers: a
/// copy kept outside the zone's lock. It reads nothing itself; a hint for
/// an address that is no longer the zone's (the zone gone) is harmless,
/// a prefetch never faults.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Prefetch {
    base: u64,
    /// Address of the `mode` field of chunk 0.
    chunks: usize,
    /// Address of bitmap word 0.
    fbits: usize,
    /// Chunk order.
    c: u8,
    /// The shift from a frame's index to its bitmap word's: a chunk below
    /// 64 frames has one word, a larger one a word every 64 frames.
    wshift: u8,
}

impl Prefetch {
    /// Starts loading the lines a free of the block at `pfn` reads first
    /// in the core: its chunk's entry and its bitmap word. For a frame of
    /// the zone's span; another frame's hint names some other address,
    /// which costs a wasted load at most.
    #[inline(always)]
    pub fn frame(&self, pfn: Pfn) {
        for a in self.lines(pfn) {
            prefetch(core::ptr::without_provenance::<u8>(a));
        }
    }

    /// The addresses [`Prefetch::frame`] hints for `pfn`: its chunk's
    /// `mode` and its bitmap word.
    #[inline(always)]
    fn lines(&self, pfn: Pfn) -> [usize; 2] {
        let i = pfn.0.wrapping_sub(self.base) as usize;
        let chunk = (i >> self.c).wrapping_mul(size_of::<Chunk>());
        let word = (i >> self.wshift).wrapping_mul(size_of::<u64>());
        [
            self.chunks.wrapping_add(chunk),
            self.fbits.wrapping_add(word),
        ]
    }
}

impl<P: MergePolicy> BuddyZone<'_, P> {
    /// Where this zone's metadata lies, for [`Prefetch::frame`].
    pub fn prefetch(&self) -> Prefetch {
        Prefetch {
            base: self.base.0,
            chunks: self.chunks.slots.as_ptr().addr() + offset_of!(Chunk, mode),
            fbits: self.fbits.as_ptr().addr(),
            c: self.c,
            wshift: self.c.min(6),
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec;

    use core::mem::MaybeUninit;
    use core::ptr::addr_of;

    use crate::{BuddyConfig, BuddyZone, Order, Pfn, PfnRange, SingleList};

    #[test]
    fn the_hints_name_the_chunk_and_the_word_the_core_reads() {
        // Chunks below one bitmap word and of several words; a span that
        // starts off the max-order alignment.
        for c in [3u8, 6, 9] {
            let span = PfnRange::new(Pfn(0x1234), Pfn(0x1234 + 3000));
            let config = BuddyConfig {
                max_order: Order::new(10).expect("order"),
                chunk_order: Order::new(c).expect("order"),
            };
            let mut meta =
                vec![MaybeUninit::uninit(); BuddyZone::<SingleList>::metadata_bytes(span, config)];
            let z = BuddyZone::new(span, config, &mut meta, SingleList).expect("zone");
            let p = z.prefetch();
            for f in (span.start.0..span.end.0).step_by(if cfg!(miri) { 509 } else { 1 }) {
                let i = (f - z.base.0) as u32;
                let k = z.chunk_of(i);
                let x = z.bit(i);
                let chunk = addr_of!(z.chunks.slots[k as usize].mode).addr();
                let word = addr_of!(z.words(k)[(x / 64) as usize]).addr();
                assert_eq!(
                    p.lines(Pfn(f)),
                    [chunk, word],
                    "chunk order {c}, frame {f:#x}"
                );
            }
        }
    }
}
