//! A reference model and operation language for the mobility layer, shared
//! by the property tests and the fuzz target (host only, `std` feature).

use std::collections::BTreeMap;
use std::format;
use std::string::String;
use std::vec::Vec;

use pageframe_buddy::{BlockInfo, FreeError, Order, Pfn};

use crate::{AllocMode, MigrateType, MobileZone};

/// One operation.
#[derive(Clone, Debug)]
pub enum Op {
    /// Allocate `order` as type (0..3) with mode bits.
    Alloc(u8, u8, u8),
    /// Free the n-th live block.
    Free(usize),
    /// Free an arbitrary frame/order (usually bad input).
    FreeAny(u64, u8),
    /// Isolate the n-th pageblock.
    Isolate(usize),
    /// Un-isolate the n-th pageblock.
    Unisolate(usize),
    /// Retype the n-th pageblock to a type value.
    SetType(usize, u8),
    /// Try to reserve the n-th live block's pageblock as highatomic.
    Reserve(usize),
    /// Give a highatomic block back (requester type, force).
    Unreserve(u8, bool),
    /// Pin or unpin the n-th live block.
    Pin(usize, bool),
    /// Take the free block holding frame `start + n` whole (compaction's free scanner).
    TakeFree(u64),
}

macro_rules! ensure {
    ($c:expr, $($t:tt)*) => { if !$c { return Err(format!($($t)*)); } };
}

/// Live allocations and the frames they own.
#[derive(Default)]
pub struct Model {
    live: BTreeMap<u64, (u8, MigrateType)>,
}

fn basic(v: u8) -> MigrateType {
    [
        MigrateType::Unmovable,
        MigrateType::Movable,
        MigrateType::Reclaimable,
    ][(v % 3) as usize]
}

impl Model {
    /// Applies `op` and checks the zone against the model.
    pub fn step(&mut self, z: &mut MobileZone<'_>, op: &Op) -> Result<(), String> {
        let blocks = z.mobility().pageblocks().len().max(1);
        let block = |n: usize| z.mobility().pageblocks().block_start(n % blocks);
        match *op {
            Op::Alloc(k, t, mode) => {
                let Some(order) = Order::new(k % (z.buddy().max_order().get() + 1)) else {
                    return Ok(());
                };
                let mt = basic(t);
                let mode = AllocMode::from_bits_truncate(mode);
                // Memory a fallback-capable request may use: any free block of
                // a basic type at this order or above.
                let usable = (order.get()..=z.buddy().max_order().get()).any(|o| {
                    let o = Order::new(o).unwrap_or_default();
                    [
                        MigrateType::Unmovable,
                        MigrateType::Movable,
                        MigrateType::Reclaimable,
                    ]
                    .iter()
                    .any(|m| z.free_blocks_of(o, *m) > 0)
                });
                match z.alloc(order, mt, mode) {
                    Ok(p) => {
                        ensure!(p.is_aligned(order), "misaligned {p:?}");
                        let end = p.get() + order.pages();
                        let clash = self
                            .live
                            .range(..end)
                            .next_back()
                            .is_some_and(|(&q, &(qk, _))| q + (1 << qk) > p.get());
                        ensure!(!clash, "{p:?} overlaps a live block");
                        let want = if z.mobility().grouping() {
                            mt
                        } else {
                            MigrateType::Unmovable
                        };
                        ensure!(z.allocated_type(p) == Some(want), "tag lost the type");
                        self.live.insert(p.get(), (order.get(), want));
                    }
                    Err(e) => ensure!(
                        mode.contains(AllocMode::NOFRAGMENT) || !usable,
                        "alloc of order {} as {mt:?} failed ({e:?}) although basic-type memory was free",
                        order.get()
                    ),
                }
            }
            Op::Free(n) => {
                if let Some((&p, &(k, _))) = self.live.iter().nth(n % self.live.len().max(1)) {
                    z.free(Pfn(p), Order::new(k).unwrap_or_default())
                        .map_err(|e| format!("free: {e:?}"))?;
                    self.live.remove(&p);
                }
            }
            Op::FreeAny(p, k) => {
                let Some(order) = Order::new(k % 16) else {
                    return Ok(());
                };
                let before = z.free_pages();
                let res = z.free(Pfn(p), order);
                if self.live.get(&p).map(|v| v.0) == Some(order.get()) {
                    ensure!(res.is_ok(), "valid free refused: {res:?}");
                    self.live.remove(&p);
                } else {
                    ensure!(res.is_err(), "bad free of {p:#x}/{k} accepted");
                    ensure!(z.free_pages() == before, "refused free changed state");
                    ensure!(
                        !matches!(res, Err(FreeError::WrongOrder { .. }))
                            || self.live.contains_key(&p),
                        "wrong order on a non-head"
                    );
                }
            }
            Op::Isolate(n) => {
                let b = block(n);
                let before = z.free_pages();
                if z.isolate_block(b).is_err() {
                    ensure!(z.free_pages() == before, "refused isolation changed state");
                }
            }
            Op::Unisolate(n) => {
                let _ = z.unisolate_block(block(n));
            }
            Op::SetType(n, t) => {
                let mt = MigrateType::from_value(t % 6).unwrap_or(MigrateType::Movable);
                let before = (z.free_pages(), z.highatomic_reserved());
                if z.set_block_type(block(n), mt).is_err() {
                    ensure!(
                        (z.free_pages(), z.highatomic_reserved()) == before,
                        "refused retype changed state"
                    );
                }
            }
            Op::Reserve(n) => {
                if let Some((&p, &(k, _))) = self.live.iter().nth(n % self.live.len().max(1)) {
                    z.reserve_highatomic(Pfn(p), Order::new(k).unwrap_or_default());
                }
            }
            Op::Unreserve(t, force) => {
                z.unreserve_highatomic(basic(t), force);
            }
            Op::TakeFree(n) => {
                let span = z.span();
                let pfn = Pfn(span.start.get() + n % span.len().max(1));
                if let Some(BlockInfo::Free { head, order, .. }) = z.buddy().block_at(pfn) {
                    let res = z.take_free_block(head, MigrateType::Movable);
                    ensure!(res == Ok(order), "take of a free block: {res:?}");
                    self.live
                        .insert(head.get(), (order.get(), MigrateType::Movable));
                }
            }
            Op::Pin(n, on) => {
                if let Some((&p, _)) = self.live.iter().nth(n % self.live.len().max(1)) {
                    ensure!(z.set_pinned(Pfn(p), on), "pin refused on a live head");
                }
            }
        }
        self.check(z)
    }

    /// `validate()` and conservation: free + isolated-free + allocated =
    /// managed, with every live block allocated in the zone.
    pub fn check(&self, z: &MobileZone<'_>) -> Result<(), String> {
        z.validate().map_err(|e| format!("validate: {e:?}"))?;
        let allocated: u64 = self.live.values().map(|&(k, _)| 1u64 << k).sum();
        let isolated = z.free_pages_of(MigrateType::Isolate);
        ensure!(
            z.free_pages() + isolated + allocated == z.buddy().managed_pages(),
            "conservation: free {} + isolated {isolated} + allocated {allocated} != managed {}",
            z.free_pages(),
            z.buddy().managed_pages()
        );
        for (&p, &(k, _)) in &self.live {
            let ok = matches!(z.buddy().block_at(Pfn(p)), Some(BlockInfo::Allocated { head, order, .. }) if head == Pfn(p) && order.get() == k);
            ensure!(ok, "live block {p:#x} not allocated in the zone");
        }
        Ok(())
    }

    /// Frees everything and un-isolates every block: all memory must be free again.
    pub fn free_all(&mut self, z: &mut MobileZone<'_>) -> Result<(), String> {
        for (p, (k, _)) in core::mem::take(&mut self.live) {
            z.set_pinned(Pfn(p), false);
            z.free(Pfn(p), Order::new(k).unwrap_or_default())
                .map_err(|e| format!("final free: {e:?}"))?;
        }
        for i in 0..z.mobility().pageblocks().len() {
            let b = z.mobility().pageblocks().block_start(i);
            let _ = z.unisolate_block(b);
        }
        self.check(z)?;
        ensure!(
            z.free_pages() == z.buddy().managed_pages(),
            "memory lost: {} of {}",
            z.free_pages(),
            z.buddy().managed_pages()
        );
        Ok(())
    }

    /// Live blocks.
    pub fn live(&self) -> &BTreeMap<u64, (u8, MigrateType)> {
        &self.live
    }
}

/// Keeps `Vec` in scope for users building op lists.
pub type Ops = Vec<Op>;
