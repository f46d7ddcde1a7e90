//! `cargo xtask` (in progress).
fn main() {}
