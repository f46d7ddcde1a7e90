//! Wraps a kernel ELF built against `bootloader_api` 0.11 into a UEFI disk
//! image that QEMU boots with OVMF:
//!
//! ```text
//! pageframe-bootloader-image KERNEL.elf OUT.img
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let [kernel, out] = args.as_slice() else {
        eprintln!("usage: pageframe-bootloader-image KERNEL.elf OUT.img");
        return ExitCode::from(2);
    };
    // The loader's own log stays off the serial port: the kernel's report
    // is all the boot test reads there.
    let mut config = bootloader::BootConfig::default();
    config.serial_logging = false;
    config.frame_buffer_logging = false;
    match bootloader::UefiBoot::new(kernel)
        .set_boot_config(&config)
        .create_disk_image(out)
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("creating {}: {e:#}", out.display());
            ExitCode::FAILURE
        }
    }
}
