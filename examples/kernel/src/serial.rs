//! Output on the first 16550 UART (COM1), which QEMU connects to
//! `-serial stdio`.

use core::fmt::{self, Write};
use spin::Mutex;
use uart_16550::backend::PioBackend;
use uart_16550::{Config, Uart16550Tty};

/// I/O base of COM1.
const COM1: u16 = 0x3f8;

/// COM1 behind a lock, so lines from different contexts do not interleave;
/// `None` until [`init`] (or if the UART failed its self-test: output is
/// then dropped, as on a machine without a serial port).
static SERIAL: Mutex<Option<Uart16550Tty<PioBackend>>> = Mutex::new(None);

/// Programs the UART (the `uart_16550` crate: 115200 8N1, FIFO on, with a
/// loopback self-test); call once, first thing.
pub fn init() {
    // SAFETY: COM1's eight registers are at 0x3f8..0x400 on a PC (QEMU's
    // `-serial stdio`), and only this module touches them.
    let uart = unsafe { Uart16550Tty::new_port(COM1, Config::default()) };
    *SERIAL.lock() = uart.ok();
}

/// Writes formatted text; used by [`print!`](crate::print).
pub fn write_fmt(args: fmt::Arguments<'_>) {
    // Printing to the UART cannot fail (it waits for room in the FIFO).
    if let Some(uart) = SERIAL.lock().as_mut() {
        let _ = uart.write_fmt(args);
    }
}

/// Writes formatted text even while another context holds the lock (the
/// panic path: the panicking code may be in the middle of a print).
pub fn write_fmt_unlocked(args: fmt::Arguments<'_>) {
    // SAFETY: the kernel runs on one CPU; the panic path never returns to
    // the interrupted writer, so at worst one line is garbled.
    unsafe { SERIAL.force_unlock() };
    write_fmt(args);
}

/// Prints to the serial port.
#[macro_export]
macro_rules! print {
    ($($arg:tt)*) => { $crate::serial::write_fmt(format_args!($($arg)*)) };
}

/// Prints a line to the serial port.
#[macro_export]
macro_rules! println {
    () => { $crate::print!("\n") };
    ($($arg:tt)*) => { $crate::serial::write_fmt(format_args!("{}\n", format_args!($($arg)*))) };
}
