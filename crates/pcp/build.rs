//! Declares the `loom` cfg so `cfg(loom)` model builds do not warn.
fn main() {
    println!("cargo::rustc-check-cfg=cfg(loom)");
}
