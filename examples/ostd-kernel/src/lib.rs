//! An OSTD kernel whose frame allocator is pageframe.
#![no_std]
#![deny(unsafe_code)]

use ostd::mm::FrameAllocOptions;
use ostd::prelude::*;
use pageframe_ostd::FrameAllocator;

#[ostd::global_frame_allocator]
static FRAMES: FrameAllocator = FrameAllocator::for_ostd();

mod bench;

#[ostd::main]
fn kernel_main() {
    let m = FRAMES.inspect().expect("OSTD allocated before main");
    println!(
        "pageframe: {} frames managed, {} free, {} adopted from OSTD's early allocator",
        m.managed_pages(),
        m.free_pages(),
        FRAMES.counters().adopted_frames
    );
    let seg = FrameAllocOptions::new().alloc_segment(512).unwrap();
    println!("pageframe: a segment of 512 frames at {:#x}", seg.paddr());
    drop(seg);
    bench::run(&FRAMES);
    FRAMES.validate().unwrap();
    println!("pageframe: counters {:?}", FRAMES.counters());
    println!("pageframe-ostd-kernel: OK");
}

#[cfg(ktest)]
mod test {
    extern crate alloc;

    use alloc::boxed::Box;
    use alloc::vec::Vec;
    use core::any::Any;

    use ostd::prelude::*;
    use ostd_test::KtestError;

    use ostd::mm::{FrameAllocOptions, PAGE_SIZE, Split};
    use pageframe::PhysAddr;
    use pageframe::debug::Inspect;

    /// Free frames with every per-CPU cache emptied into the zones (the
    /// caches hold freed frames back from the zones' counts).
    fn settled(m: Inspect<'static, 'static>) -> u64 {
        super::FRAMES.drain_caches();
        m.free_pages()
    }

    #[ktest]
    fn ostd_allocations_come_from_pageframe() {
        let m = super::FRAMES
            .inspect()
            .expect("built at OSTD's first allocation");
        let before = settled(m);
        let seg = FrameAllocOptions::new().alloc_segment(16).unwrap();
        let pfn = PhysAddr::new(seg.paddr() as u64).pfn_down();
        assert!(m.zone_of(pfn).is_some());
        assert_eq!(settled(m), before - 16);
        drop(seg);
        assert_eq!(settled(m), before);
    }

    #[ktest]
    fn segments_come_back_in_pieces_in_any_order() {
        let m = super::FRAMES.inspect().unwrap();
        let before = settled(m);
        for n in [2usize, 3, 37, 512, 1000] {
            let seg = FrameAllocOptions::new().alloc_segment(n).unwrap();
            assert_eq!(seg.size(), n * PAGE_SIZE);
            // Cut into a first frame, a middle, and the rest; drop the
            // middle, then the last, then the first.
            let (first, rest) = seg.split(PAGE_SIZE);
            if n > 2 {
                let (middle, last) = rest.split(PAGE_SIZE * (n / 2));
                drop(middle);
                drop(last);
            } else {
                drop(rest);
            }
            drop(first);
            assert_eq!(settled(m), before, "{} frames", n);
        }
        // Frame by frame, as a segment's iterator hands them out: the odd
        // ones first, then the even ones from the top.
        let seg = FrameAllocOptions::new().alloc_segment(64).unwrap();
        let mut frames: Vec<_> = seg.into_iter().map(Some).collect();
        for i in (1..64).step_by(2) {
            frames[i] = None;
        }
        assert_eq!(settled(m), before - 32);
        while let Some(f) = frames.pop() {
            drop(f);
        }
        assert_eq!(settled(m), before);
        super::FRAMES.validate().unwrap();
    }

    #[ktest]
    fn segments_beyond_a_buddy_block_are_contiguous_ranges() {
        let m = super::FRAMES.inspect().unwrap();
        let before = settled(m);
        // 12 MiB: more than the largest buddy block (4 MiB).
        let seg = FrameAllocOptions::new().alloc_segment(3000).unwrap();
        assert_eq!(seg.size(), 3000 * PAGE_SIZE);
        assert_eq!(settled(m), before - 3000);
        let (a, b) = seg.split(1234 * PAGE_SIZE);
        drop(b);
        drop(a);
        assert_eq!(settled(m), before);
        super::FRAMES.validate().unwrap();
    }

    /// Every ktest of OSTD itself, run as it is with pageframe underneath.
    #[ktest]
    fn ostd_own_ktests() {
        let catch: fn(fn()) -> Result<(), Box<dyn Any + Send>> =
            ostd::panic::catch_unwind::<(), fn()>;
        let mut passed = 0;
        let mut failed = Vec::new();
        for t in ostd_test::KtestIter::new() {
            let info = t.info();
            if info.package != "ostd" {
                continue;
            }
            match t.run(&catch) {
                Ok(()) => passed += 1,
                Err(e) => failed.push((info.module_path, info.fn_name, e)),
            }
        }
        println!("OSTD ktests: {} passed, {} failed", passed, failed.len());
        for (module, name, e) in &failed {
            match e {
                KtestError::Panic(p) => println!("  FAILED {}::{}: {}", module, name, p),
                KtestError::ExpectedPanicNotMatch(want, p) => {
                    println!("  FAILED {}::{}: wanted {}, got {}", module, name, want, p)
                }
                KtestError::ShouldPanicButNoPanic => {
                    println!("  FAILED {}::{}: did not panic", module, name)
                }
                KtestError::Unknown => println!("  FAILED {}::{}", module, name),
            }
        }
        super::FRAMES.validate().unwrap();
        assert!(failed.is_empty());
        assert_eq!(super::FRAMES.counters().refused_frees, 0);
    }
}
