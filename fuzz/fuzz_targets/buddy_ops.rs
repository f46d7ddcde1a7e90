//! Fuzz the buddy core: bytes decode into a zone with holes and a sequence
//! of operations (including bad input); after every step the zone must agree
//! with the reference model and pass `validate()`.
#![no_main]

use std::mem::MaybeUninit;

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use pageframe_models::buddy::{Model, Op};
use pageframe_buddy::{BuddyConfig, BuddyZone, Order, Pfn, PfnRange, SingleList};

fn op(u: &mut Unstructured<'_>, start: u64, len: u64, max: u8) -> Result<Op> {
    let frame = |u: &mut Unstructured<'_>| -> Result<u64> { Ok(start + u.int_in_range(0..=len + 8)?) };
    Ok(match u.int_in_range(0..=18u8)? {
        0..=3 => Op::Alloc(u.int_in_range(0..=max + 1)?),
        4..=7 => Op::Free(u.arbitrary()?),
        8 => Op::FreeAny(frame(u)?, u.int_in_range(0..=max + 1)?),
        9 => Op::AllocAt(frame(u)?, u.int_in_range(0..=max)?),
        10 => Op::Reserve(frame(u)?, u.int_in_range(1..=300)?),
        11 => Op::Release(u.arbitrary()?),
        12 => Op::Hold,
        13 => Op::HeldAlloc(u.arbitrary()?),
        14 => Op::HeldFree(u.arbitrary()?, u.arbitrary()?),
        15 => Op::Unhold(u.arbitrary()?),
        16 => Op::AllocRun(u.int_in_range(0..=70)?),
        17 => Op::FreeRun(frame(u)?, u.int_in_range(0..=70)?),
        _ => Op::FreeLiveRun(u.arbitrary()?, u.int_in_range(1..=20)?),
    })
}

fn run(data: &[u8]) -> Result<()> {
    let mut u = Unstructured::new(data);
    let max = *u.choose(&[2u8, 4, 6, 10])?;
    let start = u.int_in_range(0..=4096u64)?;
    let len = u.int_in_range(1..=4096u64)?;
    let span = PfnRange::new(Pfn(start), Pfn(start + len));
    let chunk = u.int_in_range(0..=max.min(9))?;
    let config = BuddyConfig {
        max_order: Order::new(max).unwrap(),
        chunk_order: Order::new(chunk).unwrap(),
    };
    let mut meta = vec![MaybeUninit::uninit(); BuddyZone::<SingleList>::metadata_bytes(span, config)];
    let mut zone = BuddyZone::new(span, config, &mut meta, SingleList).unwrap();
    let mut model = Model::new(span, config.max_order);
    for _ in 0..u.int_in_range(1..=4u8)? {
        let a = start + u.int_in_range(0..=len)?;
        let b = a + u.int_in_range(0..=len)?;
        model.add_range(&mut zone, PfnRange::new(Pfn(a), Pfn(b))).unwrap();
    }
    while !u.is_empty() {
        let o = op(&mut u, start, len, max)?;
        if let Err(e) = model.step(&mut zone, &o) {
            panic!("{o:?}: {e}");
        }
    }
    model.free_all_and_check(&mut zone).unwrap();
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(data);
});
