//! Poisoning and memory initialisation through the kernel's memory-access
//! hooks, over simulated memory: freed memory is written, a write after
//! the free is reported with its frame and last owner, and nothing the
//! allocator does not own is ever written.

mod common;

use std::sync::Mutex;

use common::{Words, leak, o, r};
use pageframe::debug::{Event, Hooks, PAGE_POISON, Poisoning};
use pageframe::{
    CpuId, Gfp, Machine, MachineConfig, NodeId, Order, PAGE_SIZE, Pfn, PfnRange, PhysAddr, ZoneKind,
};

const BASE: u64 = 1 << 20;
const FRAMES: u64 = 4096;

/// A zone's memory, byte by byte, and the events seen.
struct Memory {
    mode: Poisoning,
    bytes: Mutex<Vec<u8>>,
    events: Mutex<Vec<Event>>,
}

impl Memory {
    fn offset(p: Pfn) -> usize {
        ((p.get() - BASE) * PAGE_SIZE) as usize
    }

    fn write(&self, addr: PhysAddr, byte: u8) {
        let i = (addr.get() - BASE * PAGE_SIZE) as usize;
        self.bytes.lock().unwrap()[i] = byte;
    }

    fn read(&self, frames: PfnRange) -> Vec<u8> {
        let b = self.bytes.lock().unwrap();
        b[Self::offset(frames.start)..Self::offset(frames.end)].to_vec()
    }

    fn uaf(&self) -> Vec<Event> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| matches!(e, Event::UseAfterFree { .. }))
            .copied()
            .collect()
    }
}

impl Hooks for Memory {
    fn event(&self, e: &Event) {
        self.events.lock().unwrap().push(*e);
    }
    fn poisoning(&self) -> Poisoning {
        self.mode
    }
    fn fill(&self, frames: PfnRange, byte: u8) {
        assert!(frames.start.get() >= BASE && frames.end.get() <= BASE + FRAMES);
        let mut b = self.bytes.lock().unwrap();
        b[Self::offset(frames.start)..Self::offset(frames.end)].fill(byte);
    }
    fn check(&self, frames: PfnRange, byte: u8) -> Option<PhysAddr> {
        let b = self.bytes.lock().unwrap();
        let start = Self::offset(frames.start);
        b[start..Self::offset(frames.end)]
            .iter()
            .position(|&x| x != byte)
            .map(|i| PhysAddr::new(BASE * PAGE_SIZE + (start + i) as u64))
    }
}

type Poisoned = Machine<'static, (pageframe::lock::SpinLock, Memory)>;

/// One zone over simulated memory that starts out as garbage (0x5a).
fn machine(mode: Poisoning) -> &'static mut Poisoned {
    let m = Box::leak(
        pageframe::boot::Builder::new(MachineConfig::SINGLE_NODE)
            .hooks(Memory {
                mode,
                bytes: Mutex::new(vec![0x5a; (FRAMES * PAGE_SIZE) as usize]),
                events: Mutex::new(Vec::new()),
            })
            .build_boxed(),
    );
    let span = r(BASE, BASE + FRAMES);
    let meta = leak(m.zone_metadata_bytes(span));
    m.add_zone(NodeId::ZERO, ZoneKind::Normal, span, meta)
        .unwrap();
    m.add_free_range(span).unwrap();
    m
}

fn frames(b: &pageframe::Block) -> PfnRange {
    PfnRange::new(b.pfn(), b.pfn() + b.order().pages())
}

#[test]
fn a_write_after_free_is_reported_with_its_frame_and_last_owner() {
    let m: &_ = machine(Poisoning::POISON);
    let mem = m.inspect().hooks();
    assert!(
        mem.read(r(BASE, BASE + FRAMES))
            .iter()
            .all(|&x| x == PAGE_POISON)
    );
    let a = m
        .alloc_tagged(NodeId::ZERO, Gfp::KERNEL, o(2), 0x0bad)
        .unwrap();
    mem.fill(frames(&a), 0x11); // its owner uses it
    let (p, _) = (a.pfn(), ());
    m.free(a).unwrap();
    assert!(
        mem.read(r(p.get(), p.get() + 4))
            .iter()
            .all(|&x| x == PAGE_POISON)
    );
    // A stale pointer writes into the third frame.
    let addr = PhysAddr::new((p.get() + 2) * PAGE_SIZE + 100);
    mem.write(addr, 0x42);
    // Whoever gets that frame next finds the write reported.
    let mut held = Vec::new();
    while let Ok(b) = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO) {
        held.push(b);
    }
    let uaf = mem.uaf();
    assert_eq!(uaf.len(), 1, "{uaf:?}");
    assert_eq!(
        uaf[0],
        Event::UseAfterFree {
            addr,
            pfn: Pfn(p.get() + 2),
            order: Order::ZERO,
            last_owner: Some(0x0bad),
        }
    );
    assert_eq!(m.inspect().use_after_free_reports(), 1);
    for b in held {
        m.free(b).unwrap();
    }
}

#[test]
fn init_on_alloc_and_init_on_free_zero_what_they_should() {
    let m: &_ = machine(Poisoning::INIT_ON_ALLOC);
    let mem = m.inspect().hooks();
    // Garbage everywhere (nothing written at hand-over)...
    assert!(mem.read(r(BASE, BASE + 8)).iter().all(|&x| x == 0x5a));
    let a = m.alloc(NodeId::ZERO, Gfp::KERNEL, o(3)).unwrap();
    // ...but a block handed out is zero.
    assert!(mem.read(frames(&a)).iter().all(|&x| x == 0));
    mem.fill(frames(&a), 0x77);
    let range = frames(&a);
    m.free(a).unwrap();
    assert!(
        mem.read(range).iter().all(|&x| x == 0x77),
        "no write on free"
    );

    let m: &_ = machine(Poisoning::INIT_ON_FREE);
    let mem = m.inspect().hooks();
    assert!(mem.read(r(BASE, BASE + FRAMES)).iter().all(|&x| x == 0));
    let a = m.alloc(NodeId::ZERO, Gfp::KERNEL, o(1)).unwrap();
    mem.fill(frames(&a), 0x77);
    let range = frames(&a);
    m.free(a).unwrap();
    assert!(mem.read(range).iter().all(|&x| x == 0));
    assert!(mem.uaf().is_empty());
}

#[test]
fn refused_frees_write_nothing() {
    let m: &_ = machine(Poisoning::POISON);
    let mem = m.inspect().hooks();
    // A block of another machine, at the same frame numbers: refused, and
    // this machine's memory (here a live block's) untouched.
    let other: &_ = machine(Poisoning::empty());
    let mine = m.alloc(NodeId::ZERO, Gfp::KERNEL, o(1)).unwrap();
    mem.fill(frames(&mine), 0x33);
    let foreign = other.alloc(NodeId::ZERO, Gfp::KERNEL, o(1)).unwrap();
    assert_eq!(foreign.pfn(), mine.pfn());
    let back = m.free(foreign).unwrap_err().into_inner();
    assert!(mem.read(frames(&mine)).iter().all(|&x| x == 0x33));
    other.free(back).unwrap();
    // A part-free over frames that are not all allocated: refused whole.
    let (p, _) = mine.into_raw();
    // SAFETY: frames p and p + 1 are ours as numbers; p + 2 is free, so
    // the call must refuse and change nothing.
    assert!(unsafe { m.free_raw(PfnRange::new(p, p + 3)) }.is_err());
    assert!(mem.read(PfnRange::new(p, p + 2)).iter().all(|&x| x == 0x33));
    // SAFETY: as above, the two frames are still ours.
    unsafe { m.free_raw(PfnRange::new(p, p + 2)) }.unwrap();
    assert!(
        mem.read(PfnRange::new(p, p + 2))
            .iter()
            .all(|&x| x == PAGE_POISON)
    );
}

/// [`machine`] poisoning frees, with a per-CPU cache for one CPU.
fn cached_machine() -> &'static Poisoned {
    let m = machine(Poisoning::POISON);
    let bytes = m.pcp_bytes(1).unwrap();
    m.enable_pcp(1, leak(bytes)).unwrap();
    m
}

#[test]
fn cached_frees_and_migration_leave_poison_behind() {
    let m = cached_machine();
    let mem = m.inspect().hooks();
    let mut c = m.cpu(CpuId(0), NodeId::ZERO).unwrap();
    let a = c.alloc(Gfp::KERNEL, Order::ZERO).unwrap();
    mem.fill(frames(&a), 0x44);
    let range = frames(&a);
    c.free(a).unwrap();
    assert!(mem.read(range).iter().all(|&x| x == PAGE_POISON));
    drop(c);
    // Movable memory everywhere, a quarter kept and written by its owner;
    // compaction moves what is kept out of the way: the frames it leaves
    // are free memory again, and must read as poison.
    let mut all = Vec::new();
    while let Ok(b) = m.alloc(
        NodeId::ZERO,
        Gfp::HIGHUSER_MOVABLE | Gfp::MEMALLOC,
        Order::ZERO,
    ) {
        all.push(b);
    }
    let mut w = Words::default();
    for b in all {
        if b.pfn().get() % 4 == 0 {
            mem.fill(frames(&b), 0x66);
            w.keep(b);
        } else {
            m.free(b).unwrap();
        }
    }
    m.compact_node(NodeId::ZERO, &mut w).unwrap();
    assert!(w.moves > 0);
    // (The kernel copies contents: here, each moved block's frame is
    // written by its owner again.)
    for b in w.blocks.values() {
        mem.fill(frames(b), 0x66);
    }
    let mut held = Vec::new();
    while let Ok(b) = m.alloc(NodeId::ZERO, Gfp::KERNEL | Gfp::MEMALLOC, Order::ZERO) {
        held.push(b);
    }
    assert!(mem.uaf().is_empty(), "{:?}", mem.uaf());
    for b in held {
        m.free(b).unwrap();
    }
    let kept: Vec<_> = w.blocks.drain().map(|(_, b)| b).collect();
    for b in kept {
        m.free(b).unwrap();
    }
}

/// A machine with hooks hands out guards that read as the block they hold.
#[test]
fn a_guard_of_a_machine_with_hooks_reads_as_its_block() {
    let m: &_ = machine(Poisoning::empty());
    let b = m.alloc(NodeId::ZERO, Gfp::KERNEL, o(2)).unwrap();
    let (pfn, free) = (b.pfn(), m.inspect().free_pages());
    {
        let g = m.guard(b).unwrap();
        assert_eq!((g.pfn(), g.order()), (pfn, o(2)));
        assert!(format!("{g:?}").contains("order 2"), "{g:?}");
    }
    assert_eq!(m.inspect().free_pages(), free + 4, "freed when dropped");
}

// The poison row of docs/block-state.md: what each transition writes.

/// A split writes nothing: both halves hold what their owner wrote.
#[test]
fn poison_split() {
    let m: &_ = machine(Poisoning::POISON);
    let mem = m.inspect().hooks();
    let b = m.alloc(NodeId::ZERO, Gfp::KERNEL, o(2)).unwrap();
    let all = frames(&b);
    mem.fill(all, 0x11);
    let (lo, hi) = m.split(b).unwrap();
    assert!(mem.read(all).iter().all(|&x| x == 0x11));
    m.free(lo).unwrap();
    m.free(hi).unwrap();
    assert!(mem.read(all).iter().all(|&x| x == PAGE_POISON));
}

/// A partial free poisons the frames freed and nothing else.
#[test]
fn poison_partial_free() {
    let m: &_ = machine(Poisoning::POISON);
    let mem = m.inspect().hooks();
    let b = m.alloc(NodeId::ZERO, Gfp::KERNEL, o(2)).unwrap();
    mem.fill(frames(&b), 0x22);
    let (p, _) = b.into_raw();
    // SAFETY: the block is ours, held as this number only.
    unsafe { m.free_raw(PfnRange::new(p + 2, p + 4)) }.unwrap();
    assert!(mem.read(PfnRange::new(p, p + 2)).iter().all(|&x| x == 0x22));
    assert!(
        mem.read(PfnRange::new(p + 2, p + 4))
            .iter()
            .all(|&x| x == PAGE_POISON)
    );
    // SAFETY: the rest is still ours.
    unsafe { m.free_raw(PfnRange::new(p, p + 2)) }.unwrap();
}

/// A migration poisons the source once the contents live at the
/// destination.
#[test]
fn poison_migration() {
    let m: &_ = machine(Poisoning::POISON);
    let mem = m.inspect().hooks();
    let b = m.alloc(NodeId::ZERO, Gfp::HIGHUSER_MOVABLE, o(2)).unwrap();
    let src = frames(&b);
    mem.fill(src, 0x66);
    let pb = PfnRange::new(
        b.pfn().align_down(Order::HUGE_2M),
        b.pfn().align_down(Order::HUGE_2M) + 512,
    );
    let mut w = Words::default();
    w.keep(b);
    let seg = m.alloc_contig_range(pb, &mut w).unwrap();
    assert_eq!(w.moves, 1);
    assert!(mem.read(src).iter().all(|&x| x == PAGE_POISON));
    m.free_segment(seg).unwrap();
    for (_, b) in w.blocks.drain() {
        m.free(b).unwrap();
    }
}

/// A free poisons the block; a write after it is reported when the frame
/// is handed out again.
#[test]
fn poison_free() {
    let m: &_ = machine(Poisoning::POISON);
    let mem = m.inspect().hooks();
    let b = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO).unwrap();
    let f = frames(&b);
    mem.fill(f, 0x33);
    m.free(b).unwrap();
    assert!(mem.read(f).iter().all(|&x| x == PAGE_POISON));
    mem.write(f.start.addr(), 0x01);
    let again = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO).unwrap();
    assert_eq!(again.pfn(), f.start);
    assert_eq!(mem.uaf().len(), 1);
    m.free(again).unwrap();
}

/// A free into a CPU's cache poisons the block on the way in; the cache's
/// next owner gets it checked.
#[test]
fn poison_cache() {
    let m = machine(Poisoning::POISON);
    m.enable_pcp(1, leak(m.pcp_bytes(1).unwrap())).unwrap();
    let m: &_ = m;
    let mem = m.inspect().hooks();
    let mut c = m.cpu(CpuId(0), NodeId::ZERO).unwrap();
    let b = c.alloc(Gfp::KERNEL, Order::ZERO).unwrap();
    let f = frames(&b);
    mem.fill(f, 0x44);
    c.free(b).unwrap();
    assert!(mem.read(f).iter().all(|&x| x == PAGE_POISON));
    mem.write(f.start.addr(), 0x01);
    let again = c.alloc(Gfp::KERNEL, Order::ZERO).unwrap();
    assert_eq!(again.pfn(), f.start, "the cache's last frame first");
    assert_eq!(mem.uaf().len(), 1);
    c.free(again).unwrap();
}

/// A drain writes nothing (the frames were poisoned on their way into the
/// cache): a write made while cached is still there, and reported when
/// the zone hands the frame out.
#[test]
fn poison_drain() {
    let m = machine(Poisoning::POISON);
    m.enable_pcp(1, leak(m.pcp_bytes(1).unwrap())).unwrap();
    let m: &_ = m;
    let mem = m.inspect().hooks();
    let mut c = m.cpu(CpuId(0), NodeId::ZERO).unwrap();
    let b = c.alloc(Gfp::KERNEL, Order::ZERO).unwrap();
    let f = frames(&b);
    c.free(b).unwrap();
    mem.write(f.start.addr(), 0x01);
    assert!(c.drain() > 0);
    assert_eq!(mem.read(f)[0], 0x01, "the drain wrote nothing");
    drop(c);
    let mut held = Vec::new();
    while let Ok(b) = m.alloc(NodeId::ZERO, Gfp::KERNEL | Gfp::MEMALLOC, Order::ZERO) {
        held.push(b);
    }
    assert_eq!(mem.uaf().len(), 1);
    for b in held {
        m.free(b).unwrap();
    }
}

#[test]
fn runs_of_single_frames_are_poisoned_when_given_back_and_not_before() {
    let m = cached_machine();
    let mem = m.inspect().hooks();
    let mut c = m.cpu(CpuId(0), NodeId::ZERO).unwrap();
    // A first frame fills the cache's home; a run of five comes from it.
    let first = c.alloc(Gfp::KERNEL, Order::ZERO).unwrap();
    let p = c
        .alloc_run_raw(Gfp::KERNEL, 5)
        .expect("a run from the home");
    let run = PfnRange::new(p, p + 5);
    mem.fill(run, 0x77);
    // Reaching one frame past the run (free, in the cache): refused whole,
    // the run's frames unwritten.
    // SAFETY: the run is ours as numbers; the frame past it is not
    // allocated, so the call must refuse and change nothing.
    assert!(unsafe { c.free_range_raw(PfnRange::new(p, p + 6)) }.is_err());
    assert!(mem.read(run).iter().all(|&x| x == 0x77));
    // SAFETY: the run, still ours, given back once.
    unsafe { c.free_range_raw(run) }.unwrap();
    assert!(mem.read(run).iter().all(|&x| x == PAGE_POISON));
    // A write after that free is reported when a frame of it is handed
    // out again.
    mem.write(PhysAddr::new((p.get() + 2) * PAGE_SIZE + 8), 0x01);
    let again: Vec<_> = (0..8)
        .map(|_| c.alloc(Gfp::KERNEL, Order::ZERO).unwrap())
        .collect();
    assert!(again.iter().any(|b| b.pfn() == p + 2));
    assert_eq!(mem.uaf().len(), 1);
    for b in again.into_iter().chain([first]) {
        c.free(b).unwrap();
    }
}
