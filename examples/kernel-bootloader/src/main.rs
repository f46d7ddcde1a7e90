//! A kernel in the style most Rust hobby kernels have (blog_os): booted by
//! the `bootloader` crate (0.11, UEFI), it adopts pageframe from the
//! `bootloader_api` memory map in a few lines, then puts the allocator to
//! work and checks it:
//!
//! 1. memory map to `Machine`: [`FrameRanges::from_bootloader_api`], a
//!    [`Plan`], [`Plan::build`] through the loader's physical-memory
//!    mapping;
//! 2. a per-CPU cache in memory the machine gives itself;
//! 3. every free frame allocated once through the cache (no frame twice,
//!    none lost), each written and read back, all freed;
//! 4. movable pages scattered over memory (kept as frame numbers in a
//!    table, as page tables keep them), then a 2 MiB range taken with
//!    [`Machine::alloc_contig_range`]: the pages inside move out through a
//!    [`Migrator`] that hands them over, copies them and repoints the
//!    table, and every page's data is checked;
//! 5. numbers that are not the caller's (a double free, a frame out of
//!    range, a wrong order) refused by the `unsafe` raw path;
//! 6. the fragmentation map of each zone, the machine's invariants.
//!
//! It prints `RESULT: PASS` and leaves QEMU with status 33 (the
//! `isa-debug-exit` device), or `RESULT: FAIL` and 35.

#![no_std]
#![no_main]

use bootloader_api::config::Mapping;
use bootloader_api::{BootInfo, BootloaderConfig, entry_point};
use core::fmt::{self, Write};
use core::mem::MaybeUninit;
use pageframe::CpuId;
use pageframe::boot::{Builder, FrameRanges, Plan};
use pageframe::{
    Block, Gfp, Machine, MachineConfig, Migrator, NodeId, Order, PAGE_SIZE, Pfn, PfnRange,
    PhysAddr,
    compact::{MigrateError, MigrateMode, NoMigration},
};
use qemu_exit::QEMUExit;
use spin::Mutex;
use uart_16550::backend::PioBackend;
use uart_16550::{Config, Uart16550Tty};

/// What the kernel asks of the loader: all physical memory mapped at an
/// offset it chooses (the direct map pageframe's metadata lives in).
const CONFIG: BootloaderConfig = {
    let mut c = BootloaderConfig::new_default();
    c.mappings.physical_memory = Some(Mapping::Dynamic);
    c.kernel_stack_size = 256 * 1024;
    c
};

entry_point!(kernel_main, config = &CONFIG);

/// COM1, which QEMU connects to `-serial stdio`.
static SERIAL: Mutex<Option<Uart16550Tty<PioBackend>>> = Mutex::new(None);

/// Prints a line to the serial port.
macro_rules! println {
    ($($arg:tt)*) => { serial(format_args!("{}\n", format_args!($($arg)*))) };
}

fn serial(args: fmt::Arguments<'_>) {
    if let Some(uart) = SERIAL.lock().as_mut() {
        let _ = uart.write_fmt(args);
    }
}

/// Leaves QEMU: status 33 for a pass, 35 for a failure.
fn exit(pass: bool) -> ! {
    // SAFETY: the boot test gives QEMU `isa-debug-exit` at port 0xf4;
    // without the device the write is ignored and the CPU halts below.
    let dev = unsafe { qemu_exit::X86::new(0xf4, 33) };
    dev.exit(if pass { 0x10 } else { 0x11 })
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    // SAFETY: one CPU; the panicking code never returns to a writer it
    // interrupted, so at worst one line is garbled.
    unsafe { SERIAL.force_unlock() };
    println!("PANIC: {info}");
    println!("RESULT: FAIL");
    exit(false)
}

fn kernel_main(info: &'static mut BootInfo) -> ! {
    // SAFETY: COM1's registers are at 0x3f8..0x400 on a PC, and only this
    // kernel touches them.
    *SERIAL.lock() = unsafe { Uart16550Tty::new_port(0x3f8, Config::default()) }.ok();
    println!("pageframe kernel: booted by bootloader 0.11 (UEFI)");
    match run(info) {
        Ok(()) => {
            println!("RESULT: PASS");
            exit(true)
        }
        Err(e) => {
            println!("FAILED: {e}");
            println!("RESULT: FAIL");
            exit(false)
        }
    }
}

/// A failed step.
#[derive(Debug)]
enum Failure {
    /// The loader did not map physical memory.
    NoDirectMap,
    /// A step returned an error (printed where it happened).
    Step(&'static str),
    /// A check did not hold.
    Check(&'static str),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoDirectMap => f.write_str("no physical-memory mapping from the loader"),
            Self::Step(what) => write!(f, "{what} returned an error"),
            Self::Check(what) => write!(f, "check failed: {what}"),
        }
    }
}

/// A step's error, printed, becomes a [`Failure`].
fn step<T, E: fmt::Debug>(what: &'static str, r: Result<T, E>) -> Result<T, Failure> {
    r.map_err(|e| {
        println!("{what}: {e:?}");
        Failure::Step(what)
    })
}

fn check(ok: bool, what: &'static str) -> Result<(), Failure> {
    if ok {
        Ok(())
    } else {
        Err(Failure::Check(what))
    }
}

/// Where the loader maps physical memory.
#[derive(Clone, Copy)]
struct DirectMap(u64);

impl DirectMap {
    fn ptr(self, pa: PhysAddr) -> *mut u8 {
        (self.0 + pa.get()) as *mut u8
    }

    /// The first words of frame `pfn`.
    fn words(self, pfn: Pfn) -> *mut u64 {
        self.ptr(pfn.addr()).cast()
    }
}

/// What a page written by this kernel holds in its first three words: the
/// next page of a list, a check word, an index into a table.
fn tag(pfn: Pfn, index: u64) -> u64 {
    pfn.get().wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ index
}

/// Moves movable pages for compaction and contiguous ranges. The pages
/// live in a table of frame numbers (this example's page tables): asked for
/// a page, the mover finds its entry through the page's index word and
/// makes the number a block again; it copies the page through the direct
/// map and, once moved, repoints the entry at the new frame's number.
struct Mover {
    machine: &'static Machine<'static>,
    map: DirectMap,
    table: &'static mut [u64],
    frames_moved: u64,
}

impl Mover {
    /// The table entry of the page at `pfn`, if it is a page of the table.
    fn entry(&mut self, pfn: Pfn) -> Option<&mut u64> {
        // SAFETY: the frame is allocated (the allocator asks about its own
        // allocations only); mapped at the direct map.
        let index = unsafe { self.map.words(pfn).add(2).read() };
        let e = self.table.get_mut(usize::try_from(index).ok()?)?;
        (*e == pfn.get()).then_some(e)
    }
}

impl Migrator for Mover {
    fn isolate(&mut self, pfn: Pfn, order: Order) -> Option<Block> {
        self.entry(pfn)?;
        // SAFETY: the table holds this page's number: the page is this
        // kernel's, and the block goes back to a number in `putback` or
        // `migrated`.
        unsafe { self.machine.block_from_raw(pfn, order) }.ok()
    }

    fn putback(&mut self, block: Block) {
        let _ = block.into_raw(); // the table still names it
    }

    fn migrate(
        &mut self,
        src: Pfn,
        dst: Pfn,
        order: Order,
        _: MigrateMode,
    ) -> Result<(), MigrateError> {
        // SAFETY: the allocator isolated `src` (allocated to this kernel)
        // and allocated `dst` for the move; both are mapped at the direct
        // map, `2^order` frames each, and do not overlap.
        unsafe {
            core::ptr::copy_nonoverlapping(
                self.map.ptr(src.addr()).cast_const(),
                self.map.ptr(dst.addr()),
                (PAGE_SIZE << order.get()) as usize,
            )
        };
        Ok(())
    }

    fn migrated(&mut self, block: Block, from: Pfn) {
        let (dst, order) = block.into_raw();
        if let Some(e) = self.entry(from) {
            *e = dst.get();
        }
        self.frames_moved += order.pages();
    }
}

/// The frames of `bytes`.
fn frames_for(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(PAGE_SIZE)
}

fn run(info: &'static mut BootInfo) -> Result<(), Failure> {
    let map = DirectMap(
        info.physical_memory_offset
            .into_option()
            .ok_or(Failure::NoDirectMap)?,
    );

    // 1. The adoption: memory map, plan, machine (the planner carves the
    // metadata and the machine itself from usable RAM).
    let usable = step(
        "memory map",
        FrameRanges::<512>::from_bootloader_api(&info.memory_regions),
    )?;
    let config = MachineConfig::SINGLE_NODE;
    let plan = step("plan", Plan::new(&usable, &[], config))?;
    // SAFETY: the loader maps all physical memory at the direct map,
    // writable, for good; the frames the plan carved are usable RAM that
    // nothing else uses.
    let machine: &'static mut Machine<'static> = step("build", unsafe {
        plan.build(Builder::new(config), |pa| map.ptr(pa))
    })?;
    println!(
        "memory map: {} regions, {} usable frames ({} MiB) in {} ranges",
        info.memory_regions.len(),
        usable.frames(),
        (usable.frames() * PAGE_SIZE) >> 20,
        usable.ranges().len()
    );
    for z in machine.inspect().all_zones() {
        let span = z.span();
        println!(
            "zone {} node {}: span pfn {:#x}..{:#x}, managed {} frames ({} MiB)",
            z.kind().name(),
            z.node().index(),
            span.start.get(),
            span.end.get(),
            z.managed_pages(),
            (z.managed_pages() * PAGE_SIZE) >> 20
        );
    }
    println!(
        "frames managed: {} of {} usable frames; {} carved for the metadata and the machine",
        machine.inspect().managed_pages(),
        usable.frames(),
        plan.carved_frames()
    );
    check(
        machine.inspect().managed_pages() + plan.carved_frames() == usable.frames(),
        "every usable frame is managed or carved",
    )?;

    // 2. A per-CPU cache, in frames the machine gives itself (kept for
    // good: nothing has moved yet, nothing needs to).
    let pcp_bytes = step("pcp size", machine.pcp_bytes(1))?;
    let pcp = step(
        "pcp memory",
        machine.alloc_contig(
            NodeId::ZERO,
            Gfp::KERNEL,
            frames_for(pcp_bytes),
            1,
            &mut NoMigration,
        ),
    )?
    .into_raw();
    // SAFETY: those frames are allocated to this kernel for good and mapped
    // at the direct map; nothing else refers to them.
    let pcp_mem = unsafe {
        core::slice::from_raw_parts_mut(
            map.ptr(pcp.start.addr()).cast::<MaybeUninit<u8>>(),
            pcp_bytes,
        )
    };
    step("enable pcp", machine.enable_pcp(1, pcp_mem))?;
    let machine: &'static Machine<'static> = machine;
    let mut mover = Mover {
        machine,
        map,
        table: &mut [],
        frames_moved: 0,
    };
    let mut cpu = step("cpu handle", machine.cpu(CpuId(0), NodeId::ZERO))?;
    println!(
        "per-CPU cache: 1 CPU, {} KiB at pfn {:#x}",
        pcp_bytes >> 10,
        pcp.start.get()
    );

    // 3. Every free frame once, through the cache: a bitmap of the frames
    // seen (from the machine too) catches one handed out twice.
    let end = machine
        .inspect()
        .all_zones()
        .map(|z| z.span().end.get())
        .max()
        .unwrap_or(0);
    let seen_bytes = end.div_ceil(8) as usize;
    let seen_mem = step(
        "bitmap memory",
        machine.alloc_contig(
            NodeId::ZERO,
            Gfp::KERNEL,
            frames_for(seen_bytes),
            1,
            &mut mover,
        ),
    )?;
    // SAFETY: as for the cache's memory (`seen_mem` is held until the end);
    // zeroed here before use.
    let seen =
        unsafe { core::slice::from_raw_parts_mut(map.ptr(seen_mem.start().addr()), seen_bytes) };
    seen.fill(0);
    let free_before = machine.inspect().free_pages();
    // Below the watermarks, and DMA32 last (its lowmem reserve keeps
    // ordinary requests out of it once Normal is empty).
    let take_all = [
        Gfp::KERNEL | Gfp::MEMALLOC,
        Gfp::KERNEL | Gfp::DMA32 | Gfp::MEMALLOC,
    ];
    let mut head = u64::MAX;
    let mut count = 0u64;
    while let Some(a) = take_all
        .iter()
        .find_map(|&gfp| cpu.alloc(gfp, Order::ZERO).ok())
    {
        // Linked through their first words, as numbers: the list is this
        // kernel's record of them.
        let (pfn, _) = a.into_raw();
        let w = map.words(pfn);
        // SAFETY: the frame was just allocated to this kernel; mapped.
        unsafe {
            w.write(head);
            w.add(1).write(tag(pfn, 0));
        }
        head = pfn.get();
        count += 1;
    }
    println!(
        "fill: {count} frames allocated one at a time through the cache ({} MiB); {} of {free_before} left free",
        (count * PAGE_SIZE) >> 20,
        machine.inspect().free_pages()
    );
    check(count == free_before, "every free frame could be allocated")?;
    let mut freed = 0u64;
    while head != u64::MAX {
        let pfn = Pfn::new(head);
        let (byte, bit) = ((head / 8) as usize, 1u8 << (head % 8));
        check(
            seen.get(byte).is_some_and(|b| b & bit == 0),
            "no frame handed out twice",
        )?;
        seen[byte] |= bit;
        let w = map.words(pfn);
        // SAFETY: still allocated to this kernel; mapped.
        let (next, word) = unsafe { (w.read(), w.add(1).read()) };
        check(word == tag(pfn, 0), "every frame kept what was written")?;
        // SAFETY: the list held the number; it leaves the list here.
        let block = step("a listed frame", unsafe {
            machine.block_from_raw(pfn, Order::ZERO)
        })?;
        step("free", cpu.free(block))?;
        head = next;
        freed += 1;
    }
    cpu.drain();
    check(
        freed == count && machine.inspect().free_pages() == free_before,
        "every frame back",
    )?;
    println!(
        "fill: every frame distinct, written, read back and freed; free frames back to {free_before}"
    );

    // 4. Movable pages over memory, then a 2 MiB range taken from under
    // them: the pages inside move out, their data intact.
    // Up to 16384 pages and as many spares: a quarter of memory at most.
    let pages = (machine.inspect().free_pages() / 8).min(16_384) as usize;
    let table_mem = step(
        "table memory",
        machine.alloc_contig(
            NodeId::ZERO,
            Gfp::KERNEL,
            frames_for(pages * 8),
            1,
            &mut mover,
        ),
    )?;
    // SAFETY: as above; every entry is written before it is read.
    let table = unsafe { core::slice::from_raw_parts_mut(map.words(table_mem.start()), pages) };
    let user = Gfp::HIGHUSER_MOVABLE;
    for (i, entry) in table.iter_mut().enumerate() {
        // Pages alternate with spares, freed once all are allocated: the
        // kept pages end up spread out, half of each pageblock free.
        // Both kept as numbers: the page in the table, the spare in the
        // page's fourth word.
        let (a, _) = step("movable page", cpu.alloc(user, Order::ZERO))?.into_raw();
        let (spare, _) = step("spare page", cpu.alloc(user, Order::ZERO))?.into_raw();
        let w = map.words(a);
        // SAFETY: allocated to this kernel; mapped.
        unsafe {
            w.add(1).write(tag(a, i as u64));
            w.add(2).write(i as u64);
            w.add(3).write(a.get());
            w.add(4).write(spare.get());
        }
        *entry = a.get();
    }
    for &p in table.iter() {
        // SAFETY: as above.
        let spare = Pfn::new(unsafe { map.words(Pfn::new(p)).add(4).read() });
        // SAFETY: the page's word held the spare's number, used only here.
        let block = step("a spare's number", unsafe {
            machine.block_from_raw(spare, Order::ZERO)
        })?;
        step("free spare", cpu.free(block))?;
    }
    cpu.drain();
    mover.table = table;
    let mut taken = None;
    for i in (0..pages).step_by(pages.div_ceil(16)) {
        let start = Pfn::new(mover.table[i] & !511);
        let range = PfnRange::new(start, Pfn::new(start.get() + 512));
        match machine.alloc_contig_range(range, &mut mover) {
            Ok(c) => {
                taken = Some(c);
                break;
            }
            Err(e) => println!("contig: {:#x}..: {e}, trying another range", start.get()),
        }
    }
    let taken = taken.ok_or(Failure::Check("a 2 MiB range with movable pages taken"))?;
    println!(
        "contig: 2 MiB at pfn {:#x} taken, {} frames migrated out of it ({} moves seen by the migrator)",
        taken.start().get(),
        taken.moved(),
        mover.frames_moved
    );
    check(
        taken.moved() > 0 && taken.moved() == mover.frames_moved,
        "pages moved out of the range",
    )?;
    for (i, &p) in mover.table.iter().enumerate() {
        let pfn = Pfn::new(p);
        check(!taken.range().contains(pfn), "no page left in the range")?;
        let w = map.words(pfn);
        // SAFETY: allocated to this kernel (moved or not); mapped.
        let (word, index, orig) = unsafe { (w.add(1).read(), w.add(2).read(), w.add(3).read()) };
        check(
            index == i as u64 && word == tag(Pfn::new(orig), i as u64),
            "moved pages kept their data",
        )?;
    }
    println!("contig: all {pages} pages verified after the move");

    // 5. Numbers that are not the caller's block: refused, nothing changed.
    // (Safe code cannot free twice: a block is consumed by its free.)
    let free_now = machine.inspect().free_pages();
    let some = Pfn::new(mover.table[0]);
    // SAFETY: no block lives there: refused.
    let out = unsafe { machine.block_from_raw(Pfn::new(end + 10), Order::ZERO) };
    check(out.is_err(), "a frame out of range is refused")?;
    // SAFETY: not a live allocation of order 3 (it is of order 0): refused.
    let wrong = unsafe { machine.block_from_raw(some, Order::new(3).unwrap_or(Order::ZERO)) };
    check(wrong.is_err(), "a wrong order is refused")?;
    // SAFETY: the table's entry 0, taken out of the table here for good.
    let first = step("the first page's number", unsafe {
        machine.block_from_raw(some, Order::ZERO)
    })?;
    step("free", machine.free(first))?;
    // SAFETY: freed just above and not handed out since: refused.
    let twice = unsafe { machine.block_from_raw(some, Order::ZERO) };
    check(twice.is_err(), "a double free is refused")?;
    check(
        machine.inspect().free_pages() == free_now + 1,
        "refusals changed nothing",
    )?;
    println!("bad input: out of range, wrong order and double free refused; state unchanged");

    // 6. A picture of memory with the pages and the range still held.
    for z in machine.inspect().all_zones() {
        println!(
            "fragmentation map of zone {} ({}):",
            z.kind().name(),
            pageframe::zone::MAP_LEGEND
        );
        serial(format_args!("{}", z.fragmentation_map()));
    }
    for &p in &mover.table[1..] {
        // SAFETY: the table held the page's number; nothing uses it after.
        let block = step("a page's number", unsafe {
            machine.block_from_raw(Pfn::new(p), Order::ZERO)
        })?;
        step("free", cpu.free(block))?;
    }
    step("free range", machine.free_segment(taken))?;
    step("free table", machine.free_segment(table_mem))?;
    step("free bitmap", machine.free_segment(seen_mem))?;
    cpu.drain();
    serial(format_args!("{}", machine.inspect().buddyinfo()));
    check(
        machine.inspect().free_pages() + pcp.len() == machine.inspect().managed_pages(),
        "all memory back but the cache's own",
    )?;
    step("validate", machine.validate())?;
    println!("checks: PASS");
    Ok(())
}
