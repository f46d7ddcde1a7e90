//! Fuzz the whole machine: bytes decode into operations on two nodes with
//! per-CPU caches, through CPU handles and the machine, with bad frees,
//! the slow path and huge pages compacting with a content-moving migrator,
//! kcompactd, pinning, drains, tunables, contiguous ranges, a CMA area,
//! memory offline/online, a zone hot-added at run time, free page
//! reporting, blocks split and given back in parts, runs of single frames
//! from a CPU's cache given back by range, and the `unsafe` raw
//! paths within their contract. The reference model
//! (`pageframe_models::machine`) checks after every step that no frame has two
//! owners, none is lost, every bad input got its typed error and changed
//! nothing, and `validate()` holds.
#![no_main]

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use pageframe_models::machine::{GFPS, Op, run};

fn op(u: &mut Unstructured<'_>) -> Result<Op> {
    let cpu = u.int_in_range(0..=2u8)?;
    Ok(match u.int_in_range(0..=35u8)? {
        34 => Op::AllocRun { cpu: cpu % 2, frames: u.int_in_range(0..=70u8)? },
        35 => Op::FreeRun { index: u.arbitrary()?, len: u.arbitrary()?, cpu: cpu % 2, overrun: u.ratio(1u8, 4)? },
        31 => Op::Split { index: u.arbitrary()? },
        33 => Op::Batching { on: u.arbitrary()?, refuse_every: u.int_in_range(0..=5u8)? },
        32 => Op::FreePart { index: u.arbitrary()?, from: u.arbitrary()?, len: u.arbitrary()? },
        0..=7 => Op::Alloc {
            node: u.int_in_range(0..=2u8)?,
            cpu,
            gfp: u.int_in_range(0..=GFPS.len() as u8 - 1)?,
            order: if u.ratio(1u8, 5)? { u.int_in_range(4..=12u8)? } else { u.int_in_range(0..=3u8)? },
        },
        8..=13 => Op::Free { index: u.arbitrary()?, cpu },
        14..=15 => Op::BadFree { kind: u.int_in_range(0..=6u8)?, index: u.arbitrary()?, raw: u.arbitrary()?, cpu },
        16 => Op::Slow { node: u.int_in_range(0..=1u8)?, gfp: u.int_in_range(0..=8u8)?, order: u.int_in_range(0..=10u8)?, refuse: u.arbitrary()? },
        17 => Op::Thp { node: u.int_in_range(0..=1u8)?, madvised: u.arbitrary()?, policy: u.arbitrary()?, refuse: u.arbitrary()? },
        18 => Op::Kcompactd { node: u.int_in_range(0..=1u8)?, now: u.arbitrary()? },
        19 => Op::CompactNode { node: u.int_in_range(0..=1u8)? },
        20 => Op::Pin { index: u.arbitrary()?, pinned: u.arbitrary()? },
        21 => if u.arbitrary()? { Op::Drain { cpu } } else { Op::Tick { cpu: cpu % 2 } },
        23 => Op::Contig { zone: u.int_in_range(0..=2u8)?, offset: u.arbitrary()?, len: u.arbitrary()?, refuse: u.ratio(1u8, 5)? },
        24 => Op::FreeContig { index: u.arbitrary()?, raw: if u.ratio(1u8, 3)? { Some((u.int_in_range(0..=2u8)?, u.arbitrary()?, u.arbitrary()?)) } else { None } },
        26 => Op::Offline { zone: u.int_in_range(0..=2u8)?, block: u.arbitrary()?, blocks: u.arbitrary()?, refuse: u.ratio(1u8, 5)? },
        27 => Op::Online { index: u.arbitrary()? },
        28 => Op::Cma { frames: u.arbitrary()?, refuse: u.ratio(1u8, 5)? },
        29 => Op::HotAdd { blocks: u.arbitrary()?, short: u.arbitrary()? },
        // A no-op where panics abort (cargo-fuzz's default build).
        30 => Op::Panic { node: u.int_in_range(0..=1u8)?, at: u.arbitrary()?, contig: u.arbitrary()? },
        25 => Op::Report { min: u.int_in_range(0..=11u8)?, refuse: u.ratio(1u8, 4)?, churn: u.int_in_range(0..=7u8)? },
        _ => Op::Tunable { which: u.arbitrary()?, value: if u.arbitrary()? { u.int_in_range(0..=5000u32)? } else { u.arbitrary()? } },
    })
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let mut ops = Vec::new();
    while !u.is_empty() && ops.len() < 400 {
        match op(&mut u) {
            Ok(o) => ops.push(o),
            Err(_) => break,
        }
    }
    if let Err(e) = run(&ops) {
        panic!("{e}");
    }
});
