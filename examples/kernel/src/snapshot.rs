//! The allocator's observable state, to check it returns to where it was.

use crate::bringup::KernelMachine;
use pageframe::{Order, ZoneKind};

/// Most zones a machine has.
const ZONES_MAX: usize = 4;
/// Orders recorded (0..=15 covers any configured maximum).
const ORDERS: usize = 16;

/// Free pages and per-order free block counts of every zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    zones: [Option<ZoneState>; ZONES_MAX],
}

/// One zone's counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZoneState {
    /// Which zone.
    pub kind: ZoneKind,
    /// Free frames.
    pub free_pages: u64,
    /// Free blocks of each order.
    pub free_blocks: [u64; ORDERS],
}

impl Snapshot {
    /// Records `machine`'s counts now, after its order-0 stripes gave
    /// their reservations back (so that two snapshots compare block for
    /// block).
    pub fn take(machine: &KernelMachine) -> Self {
        machine.drain_stripes();
        let mut zones = [None; ZONES_MAX];
        for (slot, zone) in zones.iter_mut().zip(machine.inspect().all_zones()) {
            let mut free_blocks = [0; ORDERS];
            for (o, count) in free_blocks.iter_mut().enumerate() {
                *count = Order::new(o as u8).map_or(0, |order| zone.free_blocks(order));
            }
            *slot = Some(ZoneState {
                kind: zone.kind(),
                free_pages: zone.free_pages(),
                free_blocks,
            });
        }
        Self { zones }
    }

    /// The zones recorded.
    pub fn zones(&self) -> impl Iterator<Item = &ZoneState> {
        self.zones.iter().flatten()
    }

    /// Free frames over all zones.
    pub fn free_pages(&self) -> u64 {
        self.zones().map(|z| z.free_pages).sum()
    }

    /// The first difference from `other`: zone, order (`None` for the free
    /// page count), this value, other value.
    pub fn first_difference(&self, other: &Self) -> Option<(ZoneKind, Option<usize>, u64, u64)> {
        for (a, b) in self.zones().zip(other.zones()) {
            if a.free_pages != b.free_pages {
                return Some((a.kind, None, a.free_pages, b.free_pages));
            }
            for o in 0..ORDERS {
                if a.free_blocks[o] != b.free_blocks[o] {
                    return Some((a.kind, Some(o), a.free_blocks[o], b.free_blocks[o]));
                }
            }
        }
        None
    }
}
