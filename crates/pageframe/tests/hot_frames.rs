//! A CPU handle's hot frames (spec 04 §5.7): an order-0 frame of its home
//! freed through the handle is handed out again first, with its ownership
//! byte cached meanwhile; frees of anything else take the cache's other
//! paths; a drain, local or asked by another CPU, sends them to the zone.

mod common;

use common::*;
use pageframe::pcp::HOT_FRAMES;
use pageframe::{CpuId, FreeError, Gfp, Machine, NodeId, Order, Pfn, ZoneKind};

const FRAMES: u64 = if cfg!(miri) { 4 << 10 } else { 64 << 10 };

/// One zone with per-CPU caches for two CPUs, every frame allocatable.
fn machine() -> &'static Machine<'static> {
    let m = machine_with(pageframe::MachineConfig::SINGLE_NODE);
    let span = r(4 * GIB, 4 * GIB + FRAMES);
    zone(m, NodeId::ZERO, ZoneKind::Normal, span, span);
    m.tunables().set_min_free_kbytes(0);
    let bytes = m.pcp_bytes(2).unwrap();
    m.enable_pcp(2, leak(bytes)).unwrap();
    m
}

/// Everything back in the zone and the books agree.
fn settled(m: &Machine<'static>) {
    m.drain_pcp(None, |_| std::thread::yield_now());
    m.drain_stripes();
    assert_eq!(m.inspect().free_pages(), m.inspect().managed_pages());
    m.validate().unwrap();
}

const O0: Order = Order::ZERO;

#[test]
fn the_frame_freed_last_comes_back_first() {
    let m = machine();
    let mut c = m.cpu(CpuId(0), NodeId::ZERO).unwrap();
    let a = c.alloc(Gfp::KERNEL, O0).unwrap();
    let b = c.alloc(Gfp::KERNEL, O0).unwrap();
    let (pa, pb) = (a.pfn(), b.pfn());
    let info = c.cache_info(NodeId::ZERO, ZoneKind::Normal).unwrap();
    c.free(a).unwrap();
    c.free(b).unwrap();
    assert_eq!(c.hot_frames(NodeId::ZERO, ZoneKind::Normal), 2);
    // Counted with the cache's frames, and as its frees.
    let hot = c.cache_info(NodeId::ZERO, ZoneKind::Normal).unwrap();
    assert_eq!(hot.count, info.count + 2);
    assert_eq!(hot.stats.frees, info.stats.frees + 2);
    let b = c.alloc(Gfp::KERNEL, O0).unwrap();
    assert_eq!(b.pfn(), pb, "newest first");
    let a = c.alloc(Gfp::KERNEL, O0).unwrap();
    assert_eq!(a.pfn(), pa);
    assert_eq!(c.hot_frames(NodeId::ZERO, ZoneKind::Normal), 0);
    let after = c.cache_info(NodeId::ZERO, ZoneKind::Normal).unwrap();
    assert_eq!(after.count, info.count, "the home gave nothing");
    assert_eq!(after.stats.local_hits, info.stats.local_hits + 2);
    c.free(a).unwrap();
    c.free(b).unwrap();
    drop(c);
    settled(m);
}

#[test]
fn a_hot_frame_freed_again_is_refused_and_nothing_changes() {
    let m = machine();
    let mut c = m.cpu(CpuId(0), NodeId::ZERO).unwrap();
    let (first, order) = c.alloc(Gfp::KERNEL, O0).unwrap().into_raw();
    let (p, _) = c.alloc(Gfp::KERNEL, O0).unwrap().into_raw();
    // SAFETY: the frames were just allocated, held only as these numbers.
    // The first free by number looks the zone up (the general path);
    // the next one finds it at once.
    unsafe {
        c.free_raw(first, order).unwrap();
        c.free_raw(p, order).unwrap();
    }
    assert_eq!(c.hot_frames(NodeId::ZERO, ZoneKind::Normal), 1);
    let info = c.cache_info(NodeId::ZERO, ZoneKind::Normal).unwrap();
    // SAFETY: a second free of a number the caller no longer owns is the
    // misuse under test: the allocator refuses it.
    let twice = unsafe { c.free_raw(p, order) }.unwrap_err();
    assert_eq!((twice.pfn, twice.why), (p, FreeError::AlreadyFree));
    // SAFETY: as above.
    assert!(unsafe { m.block_from_raw(p, order) }.is_err());
    assert_eq!(c.hot_frames(NodeId::ZERO, ZoneKind::Normal), 1);
    assert_eq!(c.cache_info(NodeId::ZERO, ZoneKind::Normal).unwrap(), info);
    m.validate().unwrap();
    drop(c);
    settled(m);
}

#[test]
fn frames_outside_the_home_do_not_go_hot() {
    let m = machine();
    let mut c = m.cpu(CpuId(0), NodeId::ZERO).unwrap();
    let mine = c.alloc(Gfp::KERNEL, O0).unwrap();
    // Frames of the zone path, of a type whose list in this cache has no
    // home yet (movable frames lie in other pageblocks anyway).
    let movable = Gfp::KERNEL | Gfp::MOVABLE;
    let theirs: Vec<_> = (0..4)
        .map(|_| m.alloc(NodeId::ZERO, movable, O0).unwrap())
        .collect();
    let chunk = |p: Pfn| p.get() >> 9;
    assert!(theirs.iter().all(|b| chunk(b.pfn()) != chunk(mine.pfn())));
    let info = c.cache_info(NodeId::ZERO, ZoneKind::Normal).unwrap();
    for b in theirs {
        c.free(b).unwrap();
    }
    assert_eq!(c.hot_frames(NodeId::ZERO, ZoneKind::Normal), 0, "not hot");
    let after = c.cache_info(NodeId::ZERO, ZoneKind::Normal).unwrap();
    assert_eq!(after.count, info.count + 4, "on the foreign list");
    c.free(mine).unwrap();
    assert_eq!(c.hot_frames(NodeId::ZERO, ZoneKind::Normal), 1);
    drop(c);
    settled(m);
}

#[test]
fn a_request_of_another_type_leaves_them() {
    let m = machine();
    let mut c = m.cpu(CpuId(0), NodeId::ZERO).unwrap();
    let movable = Gfp::KERNEL | Gfp::MOVABLE;
    let b = c.alloc(movable, O0).unwrap();
    let p = b.pfn();
    c.free(b).unwrap();
    assert_eq!(c.hot_frames(NodeId::ZERO, ZoneKind::Normal), 1);
    let k = c.alloc(Gfp::KERNEL, O0).unwrap();
    assert_ne!(
        k.pfn(),
        p,
        "an unmovable request does not get a movable frame"
    );
    assert_eq!(c.hot_frames(NodeId::ZERO, ZoneKind::Normal), 1);
    let b = c.alloc(movable, O0).unwrap();
    assert_eq!(b.pfn(), p);
    c.free(b).unwrap();
    c.free(k).unwrap();
    drop(c);
    settled(m);
}

#[test]
fn a_full_stack_sends_the_next_free_home() {
    let m = machine();
    let mut c = m.cpu(CpuId(0), NodeId::ZERO).unwrap();
    let live: Vec<_> = (0..=HOT_FRAMES)
        .map(|_| c.alloc(Gfp::KERNEL, O0).unwrap())
        .collect();
    let before = c.cache_info(NodeId::ZERO, ZoneKind::Normal).unwrap().count;
    for b in live {
        c.free(b).unwrap();
    }
    assert_eq!(
        c.hot_frames(NodeId::ZERO, ZoneKind::Normal),
        HOT_FRAMES as u32
    );
    let after = c.cache_info(NodeId::ZERO, ZoneKind::Normal).unwrap().count;
    assert_eq!(after, before + HOT_FRAMES as u32 + 1, "one into the home");
    drop(c);
    settled(m);
}

#[test]
fn a_drain_sends_them_to_the_zone_and_a_new_handle_finds_them() {
    let m = machine();
    let free = m.inspect().free_pages();
    let mut c = m.cpu(CpuId(0), NodeId::ZERO).unwrap();
    let b = c.alloc(Gfp::KERNEL, O0).unwrap();
    c.free(b).unwrap();
    assert_eq!(c.hot_frames(NodeId::ZERO, ZoneKind::Normal), 1);
    c.drain();
    assert_eq!(c.hot_frames(NodeId::ZERO, ZoneKind::Normal), 0);
    m.drain_stripes();
    assert_eq!(m.inspect().free_pages(), free, "drained to the zone");
    let b = c.alloc(Gfp::KERNEL, O0).unwrap();
    let p = b.pfn();
    c.free(b).unwrap();
    drop(c);
    // The hot frames are the CPU's cache's, not the handle's.
    let mut c = m.cpu(CpuId(0), NodeId::ZERO).unwrap();
    assert_eq!(c.hot_frames(NodeId::ZERO, ZoneKind::Normal), 1);
    let b = c.alloc(Gfp::KERNEL, O0).unwrap();
    assert_eq!(b.pfn(), p);
    c.free(b).unwrap();
    drop(c);
    settled(m);
}

#[test]
fn a_remote_drain_takes_them_at_the_owners_next_call() {
    let m = machine();
    let c = std::cell::RefCell::new(m.cpu(CpuId(0), NodeId::ZERO).unwrap());
    let b = c.borrow_mut().alloc(Gfp::KERNEL, O0).unwrap();
    c.borrow_mut().free(b).unwrap();
    assert_eq!(c.borrow_mut().hot_frames(NodeId::ZERO, ZoneKind::Normal), 1);
    // The drain asks the owner and waits; the owner answers its kick.
    m.drain_pcp(None, |_| c.borrow_mut().poll());
    assert_eq!(c.borrow_mut().hot_frames(NodeId::ZERO, ZoneKind::Normal), 0);
    m.drain_stripes();
    assert_eq!(m.inspect().free_pages(), m.inspect().managed_pages());
    drop(c);
    settled(m);
}

#[test]
fn calls_without_a_handle_use_them_too() {
    let m = machine();
    let hot = |m: &'static Machine<'static>| {
        let mut c = m.cpu(CpuId(0), NodeId::ZERO).unwrap();
        c.hot_frames(NodeId::ZERO, ZoneKind::Normal)
    };
    let b = m.alloc_on(CpuId(0), NodeId::ZERO, Gfp::KERNEL, O0).unwrap();
    let p = b.pfn();
    m.free_on(CpuId(0), b).unwrap();
    assert_eq!(hot(m), 1);
    let b = m.alloc_on(CpuId(0), NodeId::ZERO, Gfp::KERNEL, O0).unwrap();
    assert_eq!((b.pfn(), hot(m)), (p, 0));
    m.free_on(CpuId(0), b).unwrap();
    // The any-context call (a request that may not sleep) takes it as
    // well.
    let b = m
        .try_alloc(CpuId(0), NodeId::ZERO, Gfp::empty(), O0)
        .unwrap();
    assert_eq!((b.pfn(), hot(m)), (p, 0));
    m.free(b).unwrap();
    settled(m);
}
