//! Fuzz the mobility layer: bytes decode into a zone (grouping on or off)
//! and operations (allocations of every type and mode, frees and bad frees,
//! isolation, retyping, highatomic reserve, pinning); the shared model
//! checks hygiene (`validate`) and conservation after every step.
#![no_main]

use std::mem::MaybeUninit;

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use pageframe_buddy::{Pfn, PfnRange};
use pageframe_models::mobility::{Model, Op};
use pageframe_mobility::{MobileZone, MobilityConfig};

fn op(u: &mut Unstructured<'_>) -> Result<Op> {
    Ok(match u.int_in_range(0..=20u8)? {
        0..=6 => Op::Alloc(u.int_in_range(0..=10)?, u.arbitrary()?, u.arbitrary()?),
        7..=12 => Op::Free(u.arbitrary()?),
        13 => Op::FreeAny(u.int_in_range(0..=7000)?, u.int_in_range(0..=11)?),
        14 => Op::Isolate(u.arbitrary()?),
        15 => Op::Unisolate(u.arbitrary()?),
        16 => Op::SetType(u.arbitrary()?, u.arbitrary()?),
        17 => Op::Reserve(u.arbitrary()?),
        18 => Op::Unreserve(u.arbitrary()?, u.arbitrary()?),
        19 => Op::TakeFree(u.arbitrary()?),
        _ => Op::Pin(u.arbitrary()?, u.arbitrary()?),
    })
}

fn run(data: &[u8]) -> Result<()> {
    let mut u = Unstructured::new(data);
    let blocks = u.int_in_range(1..=12u64)?;
    let offset = u.int_in_range(0..=1000u64)?;
    let grouping: bool = u.arbitrary()?;
    // Pageblocks below, at and above the core's largest chunk order.
    let pageblock = *u.choose(&[4u8, 9, 10])?;
    let span = PfnRange::new(Pfn(offset), Pfn(offset + blocks * 512));
    let cfg = MobilityConfig {
        grouping,
        pageblock_order: pageframe_buddy::Order::new(pageblock).unwrap(),
        ..MobilityConfig::default()
    };
    let mut meta = vec![MaybeUninit::uninit(); MobileZone::metadata_bytes(span, cfg)];
    let mut zone = MobileZone::new(span, cfg, &mut meta).unwrap();
    zone.add_free_range(span).unwrap();
    let mut model = Model::default();
    while !u.is_empty() {
        let o = op(&mut u)?;
        if let Err(e) = model.step(&mut zone, &o) {
            panic!("{o:?}: {e}");
        }
    }
    model.free_all(&mut zone).unwrap();
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(data);
});
