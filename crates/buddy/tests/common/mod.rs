//! Helpers shared by the buddy integration tests.
#![allow(dead_code)]

use std::mem::MaybeUninit;

use pageframe_buddy::{BuddyConfig, BuddyZone, Order, PfnRange, SingleList};

/// An uninitialised metadata buffer big enough for `span` (never touched by
/// the host until the zone writes it).
pub fn meta(span: PfnRange, max_order: u8) -> Box<[MaybeUninit<u8>]> {
    let cfg = config(max_order);
    Box::new_uninit_slice(BuddyZone::<SingleList>::metadata_bytes(span, cfg))
}

pub fn config(max_order: u8) -> BuddyConfig {
    BuddyConfig::new(Order::new(max_order).unwrap())
}

/// A config whose chunks are single frames: every block is linked on the
/// free lists, as in Linux (for the tests of list order and list moves).
pub fn linked(max_order: u8) -> BuddyConfig {
    BuddyConfig {
        chunk_order: Order::ZERO,
        ..config(max_order)
    }
}

pub fn o(n: u8) -> Order {
    Order::new(n).unwrap()
}

/// Free blocks per order, for comparing states.
pub fn snapshot(z: &BuddyZone<'_, SingleList>) -> Vec<u64> {
    (0..=z.max_order().get())
        .map(|k| z.free_blocks(o(k)))
        .collect()
}
