//! Shared pieces of the compaction scenarios (issue 6): a zone whose frames
//! are backed by real memory (so a migration copies 4 KiB for real), the
//! owners' reverse map, the kernel-side migrator, the Gupta fragmentation
//! pattern, and the allocation slow path with direct compaction.

use std::mem::MaybeUninit;
use std::ptr::NonNull;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use pageframe::{DEFAULT_WATERMARK_SCALE_FACTOR, Watermarks, default_min_free_kbytes};
use pageframe_buddy::{BuddyConfig, Order, PAGE_SIZE, Pfn, PfnRange};
use pageframe_compact::{
    CompactRetry, CompactState, MigrateError, MigrateMode, Migrator, NodeZone, Priority, ZoneLock,
    ZoneMarks, reset_isolation_suitable, try_to_compact_pages, watermark_ok,
};
use pageframe_mobility::{AllocMode, MigrateType, MobileZone, MobilityConfig};
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
/// simulated processes). The owner's identity is also in its page (the
/// tag), so a migration reads it from the copy it just made, as a kernel
/// finds the mapping to update through the page it moves.
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

/// The zone behind a mutex.
pub struct LabZone(pub Mutex<MobileZone<'static>>);

impl ZoneLock for LabZone {
    fn with_locked(&self, f: &mut dyn FnMut(&mut MobileZone<'_>)) {
        if let Ok(mut z) = self.0.lock() {
            f(&mut z);
        }
    }
}

/// A zone over real memory, fragmented the Gupta way.
pub struct Machine {
    /// The zone.
    pub zone: LabZone,
    /// Its compaction state.
    pub state: CompactState,
    /// Its watermarks (Linux's defaults for its size).
    pub marks: ZoneMarks,
    /// Page contents.
    pub mem: Memory,
    /// Owners of the in-use frames.
    pub owners: Owners,
    /// Frames in the zone.
    pub frames: u64,
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

impl Machine {
    /// A zone of `frames` frames (a multiple of 512) over fresh memory.
    pub fn new(frames: u64) -> Result<Machine, String> {
        let span = PfnRange::new(Pfn(0), Pfn(frames));
        let cfg = MobilityConfig {
            buddy: BuddyConfig {
                max_order: Order::DEFAULT_MAX,
            },
            pageblock_order: HUGE,
            grouping: true,
            placement: false,
        };
        let meta: &'static mut [MaybeUninit<u8>] =
            Box::leak(Box::new_uninit_slice(MobileZone::metadata_bytes(span, cfg)));
        let mut z = MobileZone::new(span, cfg, meta).map_err(|e| format!("{e:?}"))?;
        z.add_free_range(span).map_err(|e| format!("{e:?}"))?;
        let pages_min = default_min_free_kbytes(frames * 4) / 4;
        let w = Watermarks::compute(pages_min, frames, DEFAULT_WATERMARK_SCALE_FACTOR);
        Ok(Machine {
            zone: LabZone(Mutex::new(z)),
            state: CompactState::new(),
            marks: ZoneMarks {
                min: w.min,
                low: w.low,
                high: w.high,
                reserve: 0,
            },
            mem: Memory::new(frames)?,
            owners: Owners::new(),
            frames,
        })
    }

    /// The node of one zone, as the entry points take it.
    pub fn node(&self) -> [NodeZone<'_, LabZone>; 1] {
        [NodeZone::new(&self.zone, &self.state, self.marks)]
    }

    /// The Gupta pattern: allocate every frame movable, then free 3/4 of
    /// the frames of every 2 MiB block. Each kept frame gets an owner whose
    /// data (a tag) is written into the page. Returns the free frames.
    pub fn fragment(&mut self, pattern: Pattern, seed: u64) -> u64 {
        let mut z = self.zone.0.lock().unwrap_or_else(|e| e.into_inner());
        let mut all = Vec::with_capacity(self.frames as usize);
        while let Ok(p) = z.alloc(Order::ZERO, MigrateType::Movable, AllocMode::empty()) {
            all.push(p.get());
        }
        all.sort_unstable();
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut keep = vec![false; self.frames as usize];
        for block in all.chunks(PB as usize) {
            match pattern {
                Pattern::Stride => {
                    for &p in block {
                        keep[p as usize] = p % 4 == 0;
                    }
                }
                Pattern::Random => {
                    let mut b = block.to_vec();
                    b.shuffle(&mut rng);
                    for &p in b.iter().take(block.len() / 4) {
                        keep[p as usize] = true;
                    }
                }
            }
        }
        for &p in &all {
            if keep[p as usize] {
                let id = self.owners.pfn_of.len() as u64;
                self.owners.pfn_of.push(AtomicU64::new(p));
                self.mem.write_tag(p, id + 1);
            } else {
                let _ = z.free(Pfn(p), Order::ZERO);
            }
        }
        z.free_pages()
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
        let z = self.zone.0.lock().unwrap_or_else(|e| e.into_inner());
        (HUGE.get()..=z.buddy().max_order().get())
            .filter_map(Order::new)
            .map(|o| z.buddy().free_blocks(o) << o.get())
            .sum()
    }
}

/// The kernel side of migration in the lab: copies the pages, updates the
/// owner's mapping. Optionally records every move and honours a stop flag.
pub struct LabMigrator<'m> {
    mem: &'m Memory,
    owners: &'m Owners,
    stop: Option<&'m AtomicBool>,
    /// Moves made: (source, destination, order).
    pub log: Option<Vec<(u64, u64, u8)>>,
    /// Frames copied.
    pub copied: u64,
}

impl<'m> LabMigrator<'m> {
    pub fn new(m: &'m Machine) -> Self {
        LabMigrator {
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

/// One allocation attempt of `order` against `mark`, under the lock.
fn try_alloc(m: &Machine, order: Order, mark: u64) -> Option<Pfn> {
    let mut z = m.zone.0.lock().unwrap_or_else(|e| e.into_inner());
    if !watermark_ok(&z, order, mark, 0) {
        return None;
    }
    z.alloc(order, MigrateType::Movable, AllocMode::empty())
        .ok()
}

/// How an allocation was served.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Served {
    /// From the free lists at the low watermark.
    Fast,
    /// After direct compaction (captured or allocated after it).
    Compacted,
}

/// The allocation slow path for a costly movable request that may retry
/// (`__GFP_RETRY_MAYFAIL`, spec 01 §10): the free lists at the low, then the
/// min watermark; then direct compaction, async first, then at the slow
/// path's priority with `should_compact_retry` deciding further rounds.
pub fn alloc_huge(m: &Machine, mig: &mut LabMigrator<'_>) -> Option<(Pfn, Served)> {
    if let Some(p) = try_alloc(m, HUGE, m.marks.low).or_else(|| try_alloc(m, HUGE, m.marks.min)) {
        return Some((p, Served::Fast));
    }
    let node = m.node();
    let mut prio = Priority::Async;
    let mut retry = CompactRetry::new(HUGE);
    loop {
        // The slow path wakes kswapd before each attempt; with nothing to
        // reclaim it goes straight back to sleep, and going to sleep resets
        // the skip hints if a direct compactor's scanners met (spec 03 §6.3).
        reset_isolation_suitable(&m.zone, &m.state);
        let out = try_to_compact_pages(&node, HUGE, MigrateType::Movable, prio, mig);
        let got = match out.captured {
            Some((_, p)) => Some(p),
            None => try_alloc(m, HUGE, m.marks.min),
        };
        out.finish(&node, got.map(|_| 0));
        if let Some(p) = got {
            return Some((p, Served::Compacted));
        }
        if prio == Priority::Async {
            prio = retry.priority();
            continue;
        }
        if !retry.should_retry(out.result, || false) {
            return None;
        }
        prio = retry.priority();
    }
}

/// The `q`-quantile (0..=1) of sorted values.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}
