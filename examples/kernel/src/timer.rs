//! A periodic timer interrupt: the PIT (channel 0, rate generator) through
//! the legacy 8259 PIC, remapped to vectors 32-47, IRQ 0 alone unmasked.
//! The handler only counts ticks ("jiffies"); work driven by the timer
//! (kcompactd's proactive check) runs in the idle loop of the CPU that the
//! tick woke from `hlt`, never inside the handler, so it can take the
//! allocator's locks.

use core::sync::atomic::{AtomicU64, Ordering};
use x86_64::instructions::port::Port;

/// Ticks per second.
pub const HZ: u64 = 100;
/// The PIT's input clock.
const PIT_HZ: u64 = 1_193_182;
/// The vector IRQ 0 arrives on.
pub const VECTOR: u8 = 32;

/// Ticks since [`init`].
static TICKS: AtomicU64 = AtomicU64::new(0);

core::arch::global_asm!(
    r#"
    .section .text
    .p2align 4
    .global timer_stub
timer_stub:
    push %rax
    lock incq {ticks}(%rip)
    mov $0x20, %al
    out %al, $0x20
    pop %rax
    iretq
"#,
    ticks = sym TICKS,
    options(att_syntax)
);

unsafe extern "C" {
    fn timer_stub();
}

/// The handler's address, for the IDT.
pub fn stub_addr() -> u64 {
    timer_stub as *const () as usize as u64
}

/// Remaps the PIC, masks every IRQ but 0 and starts the PIT at [`HZ`].
/// Interrupts stay disabled: only [`wait_tick`] enables them, around `hlt`.
pub fn init() {
    let mut cmd1: Port<u8> = Port::new(0x20);
    let mut data1: Port<u8> = Port::new(0x21);
    let mut cmd2: Port<u8> = Port::new(0xa0);
    let mut data2: Port<u8> = Port::new(0xa1);
    let mut pit_cmd: Port<u8> = Port::new(0x43);
    let mut pit0: Port<u8> = Port::new(0x40);
    let divisor = (PIT_HZ / HZ) as u16;
    // SAFETY: the standard 8259 initialisation sequence (ICW1-ICW4) and the
    // PIT mode command, on ports nothing else in the kernel uses (the TSC
    // calibration used PIT channel 2 and is done).
    unsafe {
        cmd1.write(0x11);
        cmd2.write(0x11);
        data1.write(VECTOR);
        data2.write(VECTOR + 8);
        data1.write(4);
        data2.write(2);
        data1.write(1);
        data2.write(1);
        data1.write(0xfe);
        data2.write(0xff);
        pit_cmd.write(0x34);
        pit0.write(divisor as u8);
        pit0.write((divisor >> 8) as u8);
    }
}

/// Ticks so far.
pub fn ticks() -> u64 {
    TICKS.load(Ordering::Relaxed)
}

/// Now on the tick clock, in nanoseconds.
pub fn now_ns() -> u64 {
    ticks() * (1_000_000_000 / HZ)
}

/// Idles (`sti; hlt`) until the tick count passes `last`; returns it.
pub fn wait_tick(last: u64) -> u64 {
    loop {
        let t = ticks();
        if t > last {
            return t;
        }
        // SAFETY: `sti; hlt` enables interrupts only while halted (the
        // instruction after `sti` runs before any interrupt), so the handler
        // cannot interrupt code holding a lock; `cli` restores the state.
        unsafe { core::arch::asm!("sti", "hlt", "cli", options(nostack)) };
    }
}
