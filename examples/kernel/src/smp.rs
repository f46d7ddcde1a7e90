//! The other CPUs: a real-mode trampoline below 1 MiB, INIT-SIPI-SIPI
//! through the local APIC, and a way to run a job on them.
//!
//! The trampoline (copied to [`TRAMPOLINE`]) goes from real mode through
//! 32-bit protected mode to long mode with the kernel's own page tables
//! (CR3 is below 4 GiB: its root came from DMA32), on its own GDT whose
//! 64-bit code selector (0x08) matches the boot GDT's, so the shared IDT's
//! gates work on both CPUs. It then calls [`ap_entry`] on a stack taken
//! from the allocator. Which CPUs to start (their APIC ids) and their NUMA
//! nodes come from the ACPI MADT and SRAT (`acpi.rs`); they start one at a
//! time (they share the trampoline page). CPU 0 is the bootstrap CPU; CPU
//! 1, the first application processor, is the one the migration modes let
//! read user pages (TLB shootdowns go to it).

use crate::bringup::{KernelMachine, NODE};
use crate::time::{Instant, TscRate};
use crate::user_pages::Tables;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, AtomicU32, AtomicU64, Ordering};
use pageframe::{Gfp, Order};
use x86_64::VirtAddr;
use x86_64::instructions::tlb;
use x86_64::registers::control::Cr3;
use x86_64::structures::paging::PageTableFlags as F;

/// Physical (and identity-mapped) address of the trampoline: page 8, in
/// low memory the allocator never manages.
pub const TRAMPOLINE: u64 = 0x8000;
/// The local APIC's registers (identity-mapped, uncached, by [`start_ap`]).
const LAPIC: u64 = 0xfee0_0000;
const ICR_LOW: u64 = 0x300;
const ICR_HIGH: u64 = 0x310;
const APIC_ID: u64 = 0x20;
/// Most CPUs run.
pub const MAX_CPUS: usize = crate::acpi::MAX_CPUS;

core::arch::global_asm!(
    r#"
    .section .rodata.ap_trampoline, "a"
    .p2align 12
    .global ap_tramp_start
    .global ap_tramp_end
ap_tramp_start:
    .code16
    cli
    cld
    xor %ax, %ax
    mov %ax, %ds
    lgdtl (tr_gdtr - ap_tramp_start + 0x8000)
    mov %cr0, %eax
    or $1, %eax
    mov %eax, %cr0
    ljmpl $0x18, $(tr_pm - ap_tramp_start + 0x8000)
    .code32
tr_pm:
    mov $0x10, %ax
    mov %ax, %ds
    mov %ax, %es
    mov %ax, %ss
    mov %cr4, %eax
    or $0x20, %eax
    mov %eax, %cr4
    mov (tr_cr3 - ap_tramp_start + 0x8000), %eax
    mov %eax, %cr3
    mov $0xc0000080, %ecx
    rdmsr
    or $0x900, %eax
    wrmsr
    mov %cr0, %eax
    or $0x80010000, %eax
    mov %eax, %cr0
    ljmpl $0x08, $(tr_lm - ap_tramp_start + 0x8000)
    .code64
tr_lm:
    mov $0x10, %ax
    mov %ax, %ds
    mov %ax, %es
    mov %ax, %ss
    xor %ax, %ax
    mov %ax, %fs
    mov %ax, %gs
    movq (tr_stack - ap_tramp_start + 0x8000), %rsp
    movq (tr_entry - ap_tramp_start + 0x8000), %rax
    call *%rax
2:
    hlt
    jmp 2b
    .p2align 3
tr_gdt:
    .quad 0
    .quad 0x00af9a000000ffff
    .quad 0x00cf92000000ffff
    .quad 0x00cf9a000000ffff
tr_gdtr:
    .word 31
    .long tr_gdt - ap_tramp_start + 0x8000
    .p2align 3
    .global ap_tramp_cr3
ap_tramp_cr3:
tr_cr3:
    .quad 0
tr_stack:
    .quad 0
tr_entry:
    .quad 0
ap_tramp_end:
    .text
"#,
    options(att_syntax)
);

/// The vector of the TLB shootdown IPI.
pub const SHOOTDOWN_VECTOR: u8 = 0xf0;
/// The vector of the IPI that wakes a halted application processor for a
/// job.
pub const WAKE_VECTOR: u8 = 0xf1;
/// The local APIC's spurious-interrupt vector.
pub const SPURIOUS_VECTOR: u8 = 0xff;
const SVR: u64 = 0xf0;

/// The address the shootdown handler invalidates, or [`FLUSH_ALL`].
static SHOOT_ADDR: AtomicU64 = AtomicU64::new(0);
/// [`SHOOT_ADDR`] asking for the whole TLB (a batch of pages).
const FLUSH_ALL: u64 = u64::MAX;
/// Shootdowns the application processor acknowledged.
static SHOOT_ACK: AtomicU64 = AtomicU64::new(0);

core::arch::global_asm!(
    r#"
    .section .text
    .p2align 4
    .global shootdown_stub
shootdown_stub:
    push %rax
    mov {addr}(%rip), %rax
    cmp $-1, %rax
    je 1f
    invlpg (%rax)
    jmp 2f
1:
    mov %cr3, %rax
    mov %rax, %cr3
2:
    lock incq {ack}(%rip)
    mov $0xfee000b0, %rax
    movl $0, (%rax)
    pop %rax
    iretq
    .p2align 4
    .global wake_stub
wake_stub:
    push %rax
    mov $0xfee000b0, %rax
    movl $0, (%rax)
    pop %rax
    iretq
    .p2align 4
    .global spurious_stub
spurious_stub:
    iretq
"#,
    addr = sym SHOOT_ADDR,
    ack = sym SHOOT_ACK,
    options(att_syntax)
);

unsafe extern "C" {
    fn shootdown_stub();
    fn wake_stub();
    fn spurious_stub();
}

/// The shootdown handler's address, for the IDT: invalidates
/// `SHOOT_ADDR` (the whole TLB for [`FLUSH_ALL`]), acknowledges, signals
/// end of interrupt to the local APIC.
pub fn shootdown_stub_addr() -> u64 {
    shootdown_stub as *const () as usize as u64
}

/// The wake handler's address, for the IDT: only signals end of interrupt
/// (the halted CPU resumes after its `hlt` and finds its job).
pub fn wake_stub_addr() -> u64 {
    wake_stub as *const () as usize as u64
}

/// The spurious-interrupt handler's address (no end of interrupt due).
pub fn spurious_stub_addr() -> u64 {
    spurious_stub as *const () as usize as u64
}

/// Whether the first application processor (CPU 1) runs.
pub fn ap_up() -> bool {
    ALIVE[1].load(Ordering::Acquire)
}

/// CPUs running (the bootstrap CPU included).
pub fn cpus_up() -> usize {
    CPUS_UP.load(Ordering::Acquire) as usize
}

/// The node of CPU `i` (from the SRAT; 0 without one).
pub fn cpu_node(i: usize) -> pageframe::NodeId {
    let n = CPU_NODE.get(i).map_or(0, |n| n.load(Ordering::Relaxed));
    pageframe::NodeId::new(usize::from(n)).unwrap_or(NODE)
}

/// The calling CPU's index (its place in the MADT's list, the bootstrap
/// CPU 0).
pub fn cpu_index() -> usize {
    let id = cpu_id();
    CPU_APIC
        .iter()
        .take(MAX_CPUS)
        .position(|a| a.load(Ordering::Acquire) == id)
        .unwrap_or(0)
}

/// Invalidates `virt` in the application processor's TLB, if it runs, and
/// waits for its acknowledgement (an IPI to [`SHOOTDOWN_VECTOR`]). The
/// caller has already flushed its own TLB. One shootdown at a time: only
/// the bootstrap CPU changes mappings.
pub fn flush_remote(virt: u64) {
    shoot(virt);
}

/// Flushes the application processor's whole TLB, if it runs, and waits
/// for its acknowledgement: one shootdown for a batch of pages (the caller
/// has flushed its own TLB).
pub fn flush_remote_all() {
    shoot(FLUSH_ALL);
}

/// Sends one shootdown for `what` (an address or [`FLUSH_ALL`]) to the
/// application processor while it may hold user translations, and waits.
fn shoot(what: u64) {
    core::sync::atomic::fence(Ordering::SeqCst);
    if !ap_up() || !REMOTE_USER.load(Ordering::SeqCst) {
        return;
    }
    let before = SHOOT_ACK.load(Ordering::Acquire);
    SHOOT_ADDR.store(what, Ordering::Release);
    send_ipi(
        CPU_APIC[1].load(Ordering::Relaxed),
        0x0000_4000 | u32::from(SHOOTDOWN_VECTOR),
    );
    while SHOOT_ACK.load(Ordering::Acquire) == before {
        core::hint::spin_loop();
    }
}

/// Whether the application processor may hold translations of the user
/// regions (Linux's `mm_cpumask`): only then do unmaps and moves need a
/// shootdown IPI.
static REMOTE_USER: AtomicBool = AtomicBool::new(false);

/// Called on the application processor before it touches the user
/// regions: from now on their changes are shot down to it.
pub fn enter_user_regions() {
    REMOTE_USER.store(true, Ordering::SeqCst);
    core::sync::atomic::fence(Ordering::SeqCst);
}

/// Called on the application processor when it stops touching the user
/// regions: it flushes its whole TLB, so later changes need no shootdown.
pub fn leave_user_regions() {
    tlb::flush_all();
    REMOTE_USER.store(false, Ordering::SeqCst);
}

/// Whether the application processor has entered the user regions.
pub fn user_regions_shared() -> bool {
    REMOTE_USER.load(Ordering::SeqCst)
}

/// Shootdowns acknowledged so far.
pub fn shootdowns() -> u64 {
    SHOOT_ACK.load(Ordering::Relaxed)
}

unsafe extern "C" {
    static ap_tramp_start: u8;
    static ap_tramp_end: u8;
    static ap_tramp_cr3: u8;
}

/// APIC id of each CPU (index 0: the bootstrap CPU).
static CPU_APIC: [AtomicU32; MAX_CPUS] = [const { AtomicU32::new(u32::MAX) }; MAX_CPUS];
/// Node of each CPU.
static CPU_NODE: [AtomicU8; MAX_CPUS] = [const { AtomicU8::new(0) }; MAX_CPUS];
/// CPUs running.
static CPUS_UP: AtomicU32 = AtomicU32::new(1);
/// Set by each application processor once it runs Rust code.
static ALIVE: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];
/// Each application processor's job: a pointer to a `&(dyn Fn() + Sync)`
/// on the poster's stack; null when idle.
static JOB: [AtomicPtr<()>; MAX_CPUS] = [const { AtomicPtr::new(core::ptr::null_mut()) }; MAX_CPUS];
/// Jobs each application processor finished.
static JOBS_DONE: [AtomicU32; MAX_CPUS] = [const { AtomicU32::new(0) }; MAX_CPUS];

/// Why the second CPU did not come up.
#[derive(Debug, Clone, Copy)]
pub enum SmpError {
    /// No frame for the stack or the APIC's page table.
    NoMemory,
    /// The trampoline page's mapping is not a 4 KiB page of the direct map.
    Trampoline,
    /// The application processor did not report in time.
    Timeout,
}

impl core::fmt::Display for SmpError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::NoMemory => write!(f, "no memory for the AP's stack or tables"),
            Self::Trampoline => write!(f, "trampoline page not mappable"),
            Self::Timeout => write!(f, "the AP did not start"),
        }
    }
}

fn lapic_read(reg: u64) -> u32 {
    // SAFETY: the APIC page is mapped uncached at its physical address
    // (start_ap); `reg` is a register offset inside it.
    unsafe { ((LAPIC + reg) as *const u32).read_volatile() }
}

fn lapic_write(reg: u64, v: u32) {
    // SAFETY: as in `lapic_read`.
    unsafe { ((LAPIC + reg) as *mut u32).write_volatile(v) }
}

/// The calling CPU's APIC id.
pub fn cpu_id() -> u32 {
    lapic_read(APIC_ID) >> 24
}

fn delay(rate: &TscRate, us: u64) {
    let t = Instant::now();
    let cycles = rate.hz() / 1_000_000 * us;
    while t.elapsed().0 < cycles {
        core::hint::spin_loop();
    }
}

fn send_ipi(apic: u32, icr_low: u32) {
    lapic_write(ICR_HIGH, apic << 24);
    lapic_write(ICR_LOW, icr_low);
    // Delivery status (bit 12) clears once the IPI is sent.
    while lapic_read(ICR_LOW) & (1 << 12) != 0 {
        core::hint::spin_loop();
    }
}

/// Brings up every CPU `platform` lists, one after the other (INIT, then
/// two STARTUPs, spec'd delays 10 ms and 200 us); each then waits for jobs.
/// Returns the CPUs running.
pub fn start_aps(
    machine: &KernelMachine,
    rate: &TscRate,
    platform: &crate::acpi::Platform,
) -> Result<usize, SmpError> {
    if CPUS_UP.load(Ordering::Acquire) > 1 {
        return Ok(cpus_up());
    }
    for (i, &apic) in platform.apic_ids().iter().enumerate().take(MAX_CPUS) {
        CPU_APIC[i].store(apic, Ordering::Release);
        CPU_NODE[i].store(platform.cpu_node(i), Ordering::Relaxed);
    }
    map_apic_and_trampoline(machine)?;
    for (i, &apic) in platform.apic_ids().iter().enumerate().skip(1) {
        start_one(machine, rate, i, apic)?;
        CPUS_UP.store(i as u32 + 1, Ordering::Release);
    }
    Ok(cpus_up())
}

/// Maps the local APIC's page (identity, uncached) and lifts no-execute
/// on the trampoline page.
fn map_apic_and_trampoline(machine: &KernelMachine) -> Result<(), SmpError> {
    let mut tables = Tables::current();
    // Table frames stay in the tables (as numbers) for the kernel's life.
    let mut take = || {
        machine
            .alloc(NODE, Gfp::KERNEL | Gfp::DMA32 | Gfp::ZERO, Order::ZERO)
            .ok()
            .map(|a| a.into_raw().0.get() * 4096)
    };
    // The APIC page: identity, uncached, not executable.
    let e = tables
        .entry(LAPIC, 1, Some(&mut take))
        .map_err(|_| SmpError::NoMemory)?
        .ok_or(SmpError::NoMemory)?;
    e.set_addr(
        x86_64::PhysAddr::new(LAPIC),
        F::PRESENT | F::WRITABLE | F::NO_CACHE | F::WRITE_THROUGH | F::NO_EXECUTE,
    );
    tlb::flush(VirtAddr::new(LAPIC));
    // The trampoline page runs code in long mode for a few instructions:
    // lift the direct map's no-execute bit on it.
    let e = tables
        .entry(TRAMPOLINE, 1, None)
        .map_err(|_| SmpError::Trampoline)?
        .ok_or(SmpError::Trampoline)?;
    e.set_flags(e.flags() - F::NO_EXECUTE);
    tlb::flush(VirtAddr::new(TRAMPOLINE));
    Ok(())
}

/// Starts CPU `i` (APIC id `apic`) and waits until it runs Rust code.
fn start_one(machine: &KernelMachine, rate: &TscRate, i: usize, apic: u32) -> Result<(), SmpError> {
    // 64 KiB: the CPU may compact, and compaction keeps a batch of up to
    // 512 moves on the stack.
    let stack_order = Order::new(4).expect("order 4 exists");
    // The CPU's stack for the kernel's life: kept as its address.
    let (stack, _) = machine
        .alloc(NODE, Gfp::KERNEL, stack_order)
        .map_err(|_| SmpError::NoMemory)?
        .into_raw();
    let stack_top = (stack.get() + stack_order.pages()) * 4096;

    // SAFETY: the trampoline's bytes are a static blob between the two
    // symbols; page 8 is low memory no one else uses (the boot data was
    // copied out at entry); the three words patched are its data slots.
    unsafe {
        let start = &raw const ap_tramp_start;
        let end = &raw const ap_tramp_end;
        let len = end as usize - start as usize;
        core::ptr::copy_nonoverlapping(start, TRAMPOLINE as *mut u8, len);
        let data = TRAMPOLINE + (&raw const ap_tramp_cr3 as u64 - start as u64);
        let data = data as *mut u64;
        data.write_volatile(Cr3::read().0.start_address().as_u64());
        data.add(1).write_volatile(stack_top);
        data.add(2)
            .write_volatile(ap_entry as *const () as usize as u64);
    }

    send_ipi(apic, 0x0000_4500); // INIT, level assert
    delay(rate, 10_000);
    for _ in 0..2 {
        send_ipi(apic, 0x0000_4600 | (TRAMPOLINE >> 12) as u32); // STARTUP
        delay(rate, 200);
    }
    let t = Instant::now();
    while !ALIVE[i].load(Ordering::Acquire) {
        if t.elapsed().0 > rate.hz() {
            return Err(SmpError::Timeout);
        }
        core::hint::spin_loop();
    }
    Ok(())
}

/// Where the application processor enters Rust, on its own stack.
extern "C" fn ap_entry() -> ! {
    crate::exceptions::load_on_this_cpu();
    // Software-enable the local APIC so it accepts the shootdown IPI, and
    // take interrupts from now on (only IPIs reach this CPU: the PIC's
    // timer goes to the bootstrap CPU).
    lapic_write(SVR, 0x100 | u32::from(SPURIOUS_VECTOR));
    x86_64::instructions::interrupts::enable();
    let me = cpu_index();
    ALIVE[me].store(true, Ordering::Release);
    loop {
        // Idle CPUs halt (under TCG a spinning vCPU takes a host core from
        // the working ones). Interrupts off between the check and `hlt`:
        // `sti; hlt` takes a wake IPI sent in between when `hlt` runs.
        x86_64::instructions::interrupts::disable();
        let job = JOB[me].load(Ordering::Acquire);
        if job.is_null() {
            x86_64::instructions::interrupts::enable_and_hlt();
            continue;
        }
        x86_64::instructions::interrupts::enable();
        // SAFETY: `post` published a pointer to a live `&(dyn Fn() + Sync)`
        // and keeps it alive until this CPU's JOBS_DONE moves.
        let f = unsafe { *(job as *const &(dyn Fn() + Sync)) };
        f();
        JOB[me].store(core::ptr::null_mut(), Ordering::Release);
        JOBS_DONE[me].fetch_add(1, Ordering::AcqRel);
    }
}

/// Posts `job` (a pointer to a `&(dyn Fn() + Sync)` the caller keeps alive
/// until [`wait`] returns) to CPU `i`; returns its jobs-done count before.
fn post(i: usize, job: *const &(dyn Fn() + Sync)) -> u32 {
    let done = JOBS_DONE[i].load(Ordering::Acquire);
    JOB[i].store(job as *mut (), Ordering::Release);
    send_ipi(
        CPU_APIC[i].load(Ordering::Relaxed),
        0x0000_4000 | u32::from(WAKE_VECTOR),
    );
    done
}

/// Waits until CPU `i` finished the job posted when its count was `done`.
fn wait(i: usize, done: u32) {
    while JOBS_DONE[i].load(Ordering::Acquire) == done {
        core::hint::spin_loop();
    }
}

/// Runs `job` on CPU 1 while `main` runs here; returns `main`'s result
/// once both have finished.
pub fn with_ap_job<R>(job: &(dyn Fn() + Sync), main: impl FnOnce() -> R) -> R {
    let r: &(dyn Fn() + Sync) = job;
    let done = post(1, &r);
    let out = main();
    // `r` (and `job`) must outlive the AP's use of them: wait for it.
    wait(1, done);
    out
}

/// Runs `f` on every running CPU at once and returns when all have
/// finished.
pub fn run_all(f: &(dyn Fn() + Sync)) {
    let r: &(dyn Fn() + Sync) = f;
    let n = cpus_up();
    let mut done = [0u32; MAX_CPUS];
    for (i, d) in done.iter_mut().enumerate().take(n).skip(1) {
        *d = post(i, &r);
    }
    f();
    // `r` (and `f`) must outlive the APs' use of them: wait for each.
    for (i, &d) in done.iter().enumerate().take(n).skip(1) {
        wait(i, d);
    }
}
