//! Link the kernel with its own linker script, as a non-PIE image at 1 MiB.

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    println!("cargo:rerun-if-changed=linker.ld");
    println!("cargo:rerun-if-changed=build.rs");
    // Only for the bare-metal target: a host `cargo check` of this package
    // must not receive these arguments.
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("none") {
        // The 32-bit boot stub holds absolute 32-bit addresses, which lld
        // refuses in the target's default static-PIE output.
        println!("cargo:rustc-link-arg-bins=--no-pie");
        println!("cargo:rustc-link-arg-bins=-T{dir}/linker.ld");
    }
}
