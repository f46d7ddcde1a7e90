//! Buddy core benchmarks (being written).
fn main() {}
