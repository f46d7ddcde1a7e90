//! An OSTD kernel whose frame allocator is pageframe.
#![no_std]
#![deny(unsafe_code)]

use ostd::mm::{FrameAllocOptions, PAGE_SIZE};
use ostd::prelude::*;
use pageframe_ostd::FrameAllocator;

#[ostd::global_frame_allocator]
static FRAMES: FrameAllocator = FrameAllocator::for_ostd();

#[ostd::main]
fn kernel_main() {
    let m = FRAMES.machine().expect("OSTD allocated before main");
    println!(
        "pageframe: {} frames managed, {} free",
        m.managed_pages(),
        m.free_pages()
    );
    let seg = FrameAllocOptions::new().alloc_segment(512).unwrap();
    println!("segment of 512 frames at {:#x}", seg.paddr());
    drop(seg);
    let _ = PAGE_SIZE;
    println!("counters: {:?}", FRAMES.counters());
}
