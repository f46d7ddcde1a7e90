//! Fuzz compaction: bytes decode into a zone (size, offset, pageblock size),
//! a fragmentation recipe, and a sequence of operations
//! (allocations, frees, pins, skip hints, direct compaction at every
//! priority, whole-zone compaction, kcompactd ticks and wakeups, refusal
//! rates, aborts, a migrator moving whole batches, one panicking in the
//! middle of a batch). The shared model checks after every step that no frame
//! is lost, every owner finds its data, nothing stays isolated, and that
//! the scanners never crossed and respected honoured skip hints.
#![no_main]

use std::mem::MaybeUninit;

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use pageframe_buddy::{BuddyConfig, Order, Pfn, PfnRange};
use pageframe_models::compact::{Op, World};
use pageframe_mobility::{MobileZone, MobilityConfig};

fn op(u: &mut Unstructured<'_>) -> Result<Op> {
    Ok(match u.int_in_range(0..=21u8)? {
        20 => Op::Batched(u.arbitrary()?),
        // A no-op where panics abort (cargo-fuzz's default build).
        21 => Op::PanicInBatch(u.arbitrary()?),
        0..=2 => Op::Alloc(u.arbitrary()?, u.arbitrary()?),
        3..=5 => Op::Free(u.arbitrary()?),
        6 => Op::Pin(u.arbitrary()?, u.arbitrary()?),
        7 | 8 => Op::Skip(u.arbitrary()?, u.arbitrary()?),
        9..=12 => Op::Direct(u.arbitrary()?, u.arbitrary()?, u.arbitrary()?),
        13 => Op::Full,
        14 | 15 => Op::Tick(u.int_in_range(0..=3000)?, u.arbitrary()?),
        16 => Op::Wake(u.arbitrary()?),
        17 => Op::Refuse(u.int_in_range(0..=100)?, u.int_in_range(0..=100)?),
        _ => Op::Abort(u.int_in_range(0..=16)?),
    })
}

fn run(data: &[u8]) -> Result<()> {
    let mut u = Unstructured::new(data);
    let pb = u.int_in_range(2..=5u8)?;
    let blocks = u.int_in_range(1..=24u64)?;
    let offset = u.int_in_range(0..=100u64)?;
    let cfg = MobilityConfig {
        buddy: BuddyConfig::new(Order::new(pb + 2).unwrap_or_default()),
        pageblock_order: Order::new(pb).unwrap_or_default(),
        grouping: true,
        ..MobilityConfig::DEFAULT
    };
    let span = PfnRange::new(Pfn(offset), Pfn(offset + (blocks << pb)));
    let mut meta = vec![MaybeUninit::uninit(); MobileZone::metadata_bytes(span, cfg)];
    let mut zone = MobileZone::new(span, cfg, &mut meta).unwrap();
    zone.add_free_range(span).unwrap();
    let seed: u64 = u.arbitrary()?;
    let mut w = World::new(zone, seed);
    let max_order = u.int_in_range(0..=3u8)?;
    let unmovable_in = u.int_in_range(0..=10u64)?;
    let pin_in = u.int_in_range(0..=10u64)?;
    let free_pct = u.int_in_range(0..=100u64)?;
    w.fragment(max_order, unmovable_in, pin_in, free_pct);
    let setup = format!("{cfg:?} {span:?} seed {seed} fragment({max_order}, {unmovable_in}, {pin_in}, {free_pct})");
    if let Err(e) = w.check() {
        panic!("{setup}: after fragmenting: {e}");
    }
    let mut done = Vec::new();
    while !u.is_empty() {
        let o = op(&mut u)?;
        done.push(o);
        if let Err(e) = w.step(&o) {
            panic!("{setup}\n{done:?}\n{o:?}: {e}");
        }
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(data);
});
