//! Leaving QEMU through the `isa-debug-exit` device with a status (the
//! `qemu-exit` crate).

use qemu_exit::QEMUExit;

/// I/O port of `-device isa-debug-exit,iobase=0xf4,iosize=0x04`.
const DEBUG_EXIT_PORT: u16 = 0xf4;

/// The kernel's verdict. QEMU exits with `(value << 1) | 1`: 33 for
/// [`Pass`](Self::Pass), 35 for [`Fail`](Self::Fail). A triple fault under
/// `-no-reboot` exits 0, which the host must read as failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum ExitCode {
    /// Every requested check passed.
    Pass = 0x10,
    /// A check failed, the kernel panicked or took an exception.
    Fail = 0x11,
}

/// Exits QEMU; halts forever if the device is absent.
pub fn exit(code: ExitCode) -> ! {
    // SAFETY: `qemu.sh` gives QEMU `isa-debug-exit` at this port; without
    // the device the write is ignored. 33 is the pass status.
    let dev = unsafe { qemu_exit::X86::new(DEBUG_EXIT_PORT, 33) };
    dev.exit(code as u32)
}
