//! Output on the first 16550 UART (COM1), which QEMU connects to
//! `-serial stdio`.

use core::fmt::{self, Write};
use spin::Mutex;
use x86_64::instructions::port::Port;

/// I/O base of COM1.
const COM1: u16 = 0x3f8;

/// COM1 behind a lock, so lines from different contexts do not interleave.
static SERIAL: Mutex<Uart> = Mutex::new(Uart { base: COM1 });

struct Uart {
    base: u16,
}

impl Uart {
    fn out(&mut self, reg: u16, value: u8) {
        // SAFETY: the UART's registers are at base..base+8; writing them has
        // no effect on memory.
        unsafe { Port::new(self.base + reg).write(value) }
    }

    fn line_status(&mut self) -> u8 {
        // SAFETY: reading the line status register has no side effect.
        unsafe { Port::new(self.base + 5).read() }
    }

    fn init(&mut self) {
        self.out(1, 0x00); // no interrupts
        self.out(3, 0x80); // divisor latch access
        self.out(0, 0x01); // 115200 baud
        self.out(1, 0x00);
        self.out(3, 0x03); // 8 bits, no parity, one stop bit
        self.out(2, 0xc7); // FIFO on, cleared
        self.out(4, 0x03); // DTR, RTS
    }

    fn put(&mut self, byte: u8) {
        // Wait for the transmit holding register to empty (bit 5).
        while self.line_status() & 0x20 == 0 {
            core::hint::spin_loop();
        }
        self.out(0, byte);
    }
}

impl Write for Uart {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for b in s.bytes() {
            if b == b'\n' {
                self.put(b'\r');
            }
            self.put(b);
        }
        Ok(())
    }
}

/// Programs the UART; call once, first thing.
pub fn init() {
    SERIAL.lock().init();
}

/// Writes formatted text; used by [`print!`](crate::print).
pub fn write_fmt(args: fmt::Arguments<'_>) {
    // Printing cannot fail on this device: the Uart never returns an error.
    let _ = SERIAL.lock().write_fmt(args);
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
