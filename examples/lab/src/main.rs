//! The pageframe lab (work in progress).
fn main() {}
