//! Time stamps from `rdtsc`, calibrated once against the PIT.

use core::fmt;
use x86_64::instructions::port::Port;

/// A number of TSC cycles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Cycles(pub u64);

/// A TSC reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Instant(u64);

impl Instant {
    /// Reads the time stamp counter.
    pub fn now() -> Self {
        // SAFETY: rdtsc only reads a counter (CR4.TSD is clear).
        Self(unsafe { core::arch::x86_64::_rdtsc() })
    }

    /// The counter's value.
    #[cfg_attr(not(feature = "debug"), allow(dead_code))]
    pub fn cycles(self) -> u64 {
        self.0
    }

    /// Cycles since `self`.
    pub fn elapsed(self) -> Cycles {
        Cycles(Self::now().0.wrapping_sub(self.0))
    }
}

/// The PIT's input clock.
const PIT_HZ: u64 = 1_193_182;
/// Calibration window: 10 ms of PIT ticks.
const CALIBRATION_TICKS: u16 = (PIT_HZ / 100) as u16;

/// TSC frequency, measured against PIT channel 2.
#[derive(Debug, Clone, Copy)]
pub struct TscRate {
    hz: u64,
}

impl TscRate {
    /// Counts TSC cycles over a 10 ms PIT one-shot (mode 0 on channel 2,
    /// whose output is readable in bit 5 of port 0x61, gated by bit 0).
    pub fn calibrate() -> Self {
        let mut gate = Port::<u8>::new(0x61);
        let mut command = Port::<u8>::new(0x43);
        let mut channel2 = Port::<u8>::new(0x42);
        // SAFETY: programming the PIT's channel 2 and the speaker gate
        // affects no memory; nothing else in the kernel uses them.
        let cycles = unsafe {
            let g = gate.read();
            gate.write((g & !0x02) | 0x01);
            command.write(0b1011_0000); // channel 2, lobyte/hibyte, mode 0
            let [lo, hi] = CALIBRATION_TICKS.to_le_bytes();
            channel2.write(lo);
            channel2.write(hi);
            let start = Instant::now();
            while gate.read() & 0x20 == 0 {
                core::hint::spin_loop();
            }
            start.elapsed()
        };
        Self {
            hz: cycles.0 * PIT_HZ / u64::from(CALIBRATION_TICKS),
        }
    }

    /// Cycles per second.
    pub fn hz(&self) -> u64 {
        self.hz
    }

    /// Converts a cycle count to a duration.
    pub fn duration(&self, c: Cycles) -> Micros {
        Micros(u128::from(c.0) * 1_000_000 / u128::from(self.hz.max(1)))
    }
}

/// A duration in microseconds, printed in ms with three decimals.
#[derive(Debug, Clone, Copy)]
pub struct Micros(pub u128);

impl fmt::Display for Micros {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:03} ms", self.0 / 1000, self.0 % 1000)
    }
}
