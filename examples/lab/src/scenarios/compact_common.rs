//! Shared pieces of the compaction scenarios: a `pageframe`
//! machine of one zone whose frames are backed by real memory (so a
//! migration copies 4 KiB for real), the owners' reverse map, the
//! kernel-side migrator, and the Gupta fragmentation pattern. Allocation,
//! compaction and kcompactd go through the machine's public API: what the
//! lab measures is what a kernel gets.

use std::mem::MaybeUninit;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use pageframe::{
    Gfp, Machine, MachineConfig, Migrator, NodeId, ZoneKind,
    compact::{MigrateError, MigrateMode, SlowPathHooks},
};
use pageframe::{Order, PAGE_SIZE, Pfn, PfnRange};
use rand::SeedableRng;
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;

/// Frames per 2 MiB pageblock.
pub const PB: u64 = 512;
/// The huge-page order.
pub const HUGE: Order = Order::HUGE_2M;
const PAGE: usize = PAGE_SIZE as usize;

/// Anonymous memory, populated up front, one 4 KiB page per frame.
pub struct Memory {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: `Memory` is a plain buffer; the compaction protocol gives each
// page one writer at a time (a source is isolated by one compactor, a
// destination taken from the free lists by one compactor), so sharing the
// pointer between the allocating thread and the background compactor is
// sound.
unsafe impl Send for Memory {}
// SAFETY: as above: all access goes through raw-pointer copies of pages
// that the protocol gives to a single thread at a time.
unsafe impl Sync for Memory {}

impl Memory {
    /// `frames` pages of populated anonymous memory.
    pub fn new(frames: u64) -> Result<Memory, String> {
        let len = frames as usize * PAGE;
        // SAFETY: an anonymous private mapping with no address hint; the
        // result is checked against MAP_FAILED before use.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(format!("mmap of {} MiB failed", len >> 20));
        }
        let base = NonNull::new(p.cast::<u8>()).ok_or("mmap returned null")?;
        Ok(Memory { base, len })
    }

    fn page(&self, pfn: u64) -> *mut u8 {
        debug_assert!((pfn as usize + 1) * PAGE <= self.len);
        // SAFETY: every caller passes a frame of the zone, which spans the
        // mapping exactly, so the offset stays inside it.
        unsafe { self.base.as_ptr().add(pfn as usize * PAGE) }
    }

    /// Writes `tag` at both ends of the page: the owner's data.
    pub fn write_tag(&self, pfn: u64, tag: u64) {
        let p = self.page(pfn).cast::<u64>();
        // SAFETY: the page is in the mapping and 8-byte aligned (pages are
        // 4 KiB aligned); the caller owns the frame.
        unsafe {
            p.write(tag);
            p.add(PAGE / 8 - 1).write(!tag);
        }
    }

    /// The tag at the start of the page.
    pub fn tag(&self, pfn: u64) -> u64 {
        // SAFETY: as in `write_tag`; the caller owns the frame.
        unsafe { self.page(pfn).cast::<u64>().read() }
    }

    /// Whether the page holds `tag` at both ends.
    pub fn has_tag(&self, pfn: u64, tag: u64) -> bool {
        let p = self.page(pfn).cast::<u64>();
        // SAFETY: as in `write_tag`; the caller owns the frame.
        unsafe { p.read() == tag && p.add(PAGE / 8 - 1).read() == !tag }
    }

    /// Copies `pages` pages from `src` to `dst`.
    pub fn copy(&self, src: u64, dst: u64, pages: u64) {
        // SAFETY: both ranges lie in the mapping; a source and a destination
        // block of one migration are distinct blocks of the zone, so they
        // do not overlap, and the protocol gives both to this thread.
        unsafe {
            std::ptr::copy_nonoverlapping(self.page(src), self.page(dst), pages as usize * PAGE)
        };
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`, once.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

/// The owners' view: where each owner's page is (the page table of the
/// simulated processes, which keeps frame numbers: each allocated block was
/// given up with `Block::into_raw` when it was mapped). The owner's
/// identity is also in its page (the tag), so a migration reads it from the
/// copy it just made, as a kernel finds the mapping to update through the
/// page it moves.
pub struct Owners {
    pfn_of: Vec<AtomicU64>,
}

impl Owners {
    fn new() -> Owners {
        Owners { pfn_of: Vec::new() }
    }

    /// Every owner's page still holds its data.
    pub fn verify(&self, mem: &Memory) -> Result<(), String> {
        for (id, p) in self.pfn_of.iter().enumerate() {
            let pfn = p.load(Relaxed);
            if !mem.has_tag(pfn, id as u64 + 1) {
                return Err(format!("owner {id} lost its page at {pfn:#x}"));
            }
        }
        Ok(())
    }
}

/// How the 3/4 of each 2 MiB block are freed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Pattern {
    /// Keep every fourth frame: free blocks of one and two frames only.
    Stride,
    /// Keep 128 frames chosen at random in each block.
    Random,
}

impl Pattern {
    pub fn parse(s: &str) -> Result<Pattern, String> {
        match s {
            "stride" => Ok(Pattern::Stride),
            "random" => Ok(Pattern::Random),
            _ => Err(format!("unknown --pattern `{s}` (stride, random)")),
        }
    }
}

/// A machine of one zone over real memory, fragmented the Gupta way.
pub struct World {
    /// The allocator (leaked: the lab keeps it for the run).
    pub machine: &'static Machine<'static>,
    /// Page contents.
    pub mem: Memory,
    /// Owners of the in-use frames.
    pub owners: Owners,
    /// Frames in the zone.
    pub frames: u64,
}

/// The machine's only node.
pub const NODE: NodeId = NodeId::ZERO;

impl World {
    /// A machine with one Normal zone of `frames` frames (a multiple of
    /// 512) over fresh memory, Linux's default watermarks for its size.
    pub fn new(frames: u64) -> Result<World, String> {
        let span = PfnRange::new(Pfn(0), Pfn(frames));
        let m: &'static mut Machine<'static> =
            Box::leak(pageframe::boot::Builder::new(MachineConfig::SINGLE_NODE).build_boxed());
        let meta: &'static mut [MaybeUninit<u8>] =
            Box::leak(Box::new_uninit_slice(m.zone_metadata_bytes(span)));
        m.add_zone(NODE, ZoneKind::Normal, span, meta)
            .map_err(|e| e.to_string())?;
        m.add_free_range(span).map_err(|e| e.to_string())?;
        Ok(World {
            machine: m,
            mem: Memory::new(frames)?,
            owners: Owners::new(),
            frames,
        })
    }

    /// The Gupta pattern: allocate every frame movable, then free 3/4 of
    /// the frames of every 2 MiB block. Each kept frame gets an owner whose
    /// data (a tag) is written into the page. Returns the free frames.
    pub fn fragment(&mut self, pattern: Pattern, seed: u64) -> u64 {
        let m = self.machine;
        let mut all = Vec::with_capacity(self.frames as usize);
        // MEMALLOC: take every frame, the watermark reserve included.
        while let Ok(a) = m.alloc(NODE, Gfp::HIGHUSER_MOVABLE | Gfp::MEMALLOC, Order::ZERO) {
            all.push(a);
        }
        all.sort_unstable_by_key(|b| b.pfn());
        let all: Vec<(u64, pageframe::Block)> =
            all.into_iter().map(|b| (b.pfn().get(), b)).collect();
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut keep = vec![false; self.frames as usize];
        for block in all.chunks(PB as usize) {
            match pattern {
                Pattern::Stride => {
                    for &(p, _) in block {
                        keep[p as usize] = p % 4 == 0;
                    }
                }
                Pattern::Random => {
                    let mut b: Vec<u64> = block.iter().map(|&(p, _)| p).collect();
                    b.shuffle(&mut rng);
                    for &p in b.iter().take(block.len() / 4) {
                        keep[p as usize] = true;
                    }
                }
            }
        }
        for (p, b) in all {
            if keep[p as usize] {
                // Mapped: the page table keeps the number.
                let _ = b.into_raw();
                let id = self.owners.pfn_of.len() as u64;
                self.owners.pfn_of.push(AtomicU64::new(p));
                self.mem.write_tag(p, id + 1);
            } else {
                let _ = m.free(b);
            }
        }
        m.inspect().free_pages()
    }

    /// Pins (or unpins) every owner's frame: compaction cannot move them.
    /// Returns how many.
    pub fn set_pins(&self, on: bool) -> u64 {
        let mut n = 0;
        for p in &self.owners.pfn_of {
            // SAFETY: the owner's page: its number is this page table's, and
            // the block made of it goes back to a number at once.
            let b = unsafe {
                self.machine
                    .block_from_raw(Pfn(p.load(Relaxed)), Order::ZERO)
            };
            if let Ok(b) = b {
                n += u64::from(self.machine.set_pinned(&b, on).is_ok());
                let _ = b.into_raw();
            }
        }
        n
    }

    /// The fewest 4 KiB moves that leave all in-use frames in the fewest
    /// pageblocks: keep the fullest blocks, empty the rest.
    pub fn min_moves(&self) -> u64 {
        let mut used = vec![0u64; (self.frames / PB) as usize];
        for p in &self.owners.pfn_of {
            used[(p.load(Relaxed) / PB) as usize] += 1;
        }
        let total: u64 = used.iter().sum();
        let keep = total.div_ceil(PB) as usize;
        used.sort_unstable_by(|a, b| b.cmp(a));
        total - used[..keep].iter().sum::<u64>()
    }

    /// Free frames in free blocks of the huge-page order or larger.
    pub fn huge_free(&self) -> u64 {
        let z = self
            .machine
            .inspect()
            .node(NODE)
            .and_then(|n| n.zone(ZoneKind::Normal))
            .expect("the zone");
        z.inspect(|z| {
            (HUGE.get()..=z.buddy().max_order().get())
                .filter_map(Order::new)
                .map(|o| z.buddy().free_blocks(o) << o.get())
                .sum()
        })
    }

    /// A 2 MiB block for a costly movable request that may retry
    /// (`__GFP_RETRY_MAYFAIL`, spec 01 §10) through the machine: its free
    /// lists first ([`Machine::alloc`]), then its slow path with direct
    /// compaction ([`Machine::alloc_slow`]), moving pages with `mig`.
    pub fn alloc_huge(&self, mig: &mut LabMigrator<'_>) -> Option<(pageframe::Block, Served)> {
        let gfp = Gfp::TRANSHUGE | Gfp::RETRY_MAYFAIL;
        if let Ok(a) = self.machine.alloc(NODE, gfp, HUGE) {
            return Some((a, Served::Fast));
        }
        let a = self.machine.alloc_slow(NODE, gfp, HUGE, mig).ok()?;
        Some((a, Served::Compacted))
    }
}

/// The kernel side of migration in the lab: hands over the owner's page
/// (made a block again from its page-table number), copies it, updates the
/// owner's mapping, and keeps the new page as a number. Optionally records
/// every move and honours a stop flag.
pub struct LabMigrator<'m> {
    machine: &'m Machine<'static>,
    mem: &'m Memory,
    owners: &'m Owners,
    stop: Option<&'m AtomicBool>,
    /// Moves made: (source, destination, order).
    pub log: Option<Vec<(u64, u64, u8)>>,
    /// Frames copied.
    pub copied: u64,
}

impl<'m> LabMigrator<'m> {
    pub fn new(m: &'m World) -> Self {
        LabMigrator {
            machine: m.machine,
            mem: &m.mem,
            owners: &m.owners,
            stop: None,
            log: None,
            copied: 0,
        }
    }

    /// Aborts runs once `stop` is set.
    pub fn with_stop(mut self, stop: &'m AtomicBool) -> Self {
        self.stop = Some(stop);
        self
    }
}

impl Migrator for LabMigrator<'_> {
    fn isolate(&mut self, pfn: Pfn, order: Order) -> Option<pageframe::Block> {
        // Only an owner's mapped page moves: the tag names the owner, whose
        // page table must point here.
        let id = self.mem.tag(pfn.get()).checked_sub(1)?;
        let at = self.owners.pfn_of.get(id as usize)?.load(Relaxed);
        if at != pfn.get() {
            return None;
        }
        // SAFETY: the owner's page table holds this number; the block made
        // of it is handed to the allocator and comes back through
        // `putback` or `migrated`, which turn it into a number again.
        unsafe { self.machine.block_from_raw(pfn, order) }.ok()
    }

    fn putback(&mut self, block: pageframe::Block) {
        let _ = block.into_raw();
    }

    fn migrated(&mut self, block: pageframe::Block, _from: Pfn) {
        // `migrate` already pointed the owner's page table at the new page.
        let _ = block.into_raw();
    }

    fn migrate(
        &mut self,
        src: Pfn,
        dst: Pfn,
        order: Order,
        _: MigrateMode,
    ) -> Result<(), MigrateError> {
        let (s, d) = (src.get(), dst.get());
        self.mem.copy(s, d, order.pages());
        for i in 0..order.pages() {
            // Remap: the owner named in the page now finds it at `d + i`.
            let id = self.mem.tag(d + i);
            if let Some(slot) = id
                .checked_sub(1)
                .and_then(|k| self.owners.pfn_of.get(k as usize))
            {
                slot.store(d + i, Relaxed);
            }
        }
        self.copied += order.pages();
        if let Some(log) = &mut self.log {
            log.push((s, d, order.get()));
        }
        Ok(())
    }

    fn checkpoint(&mut self, _: Pfn, _: Pfn) -> bool {
        self.stop.is_some_and(|s| s.load(Relaxed))
    }
}

impl SlowPathHooks for LabMigrator<'_> {}

/// How an allocation was served.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Served {
    /// From the free lists.
    Fast,
    /// Through the slow path (direct compaction).
    Compacted,
}

/// The `q`-quantile (0..=1) of sorted values.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}
