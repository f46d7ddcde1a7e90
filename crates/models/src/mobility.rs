//! A reference model and operation language for the mobility layer, shared
//! by the property tests and the fuzz target (host only, `std` feature).

use std::collections::BTreeMap;
use std::format;
use std::string::String;
use std::vec::Vec;

use pageframe_buddy::{BlockInfo, FreeError, Order, Pfn};

use pageframe_mobility::{AllocMode, MigrateType, MobileZone, Placement};

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
                let before = (z.mobility().grouping() && (mode - AllocMode::NOFRAGMENT).is_empty())
                    .then(|| Blocks::read(z, &self.live));
                match z.alloc(order, mt, mode) {
                    Ok(p) => {
                        if let Some(before) = &before {
                            before.check_fallback(z, p, order, mt, mode)?;
                        }
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

/// The fallback table (spec 02 §5.1), written out here so the model does
/// not take the rule from the code under test.
fn fallback_table(mt: MigrateType) -> &'static [MigrateType] {
    use MigrateType::{Movable as M, Reclaimable as R, Unmovable as U};
    match mt {
        U => &[R, M],
        M => &[R, U],
        R => &[U, M],
        _ => &[],
    }
}

/// One pageblock as an allocation found it.
#[derive(Clone, Copy, Debug)]
struct Block {
    start: u64,
    ty: Option<MigrateType>,
    /// Its type under the isolate bit.
    base: Option<MigrateType>,
    /// Frames in free blocks inside it.
    free: u64,
    /// Frames of live movable allocations inside it.
    movable: u64,
    /// Bit `o`: a free block of order `o` lies inside it (or covers it).
    free_orders: u32,
    /// Wholly inside the zone (one straddling its edge is never claimed
    /// partially).
    inside: bool,
}

/// Every pageblock's type and contents, and the free lists by order and
/// type, before an allocation: what the fallback rules decide from.
struct Blocks {
    pb_order: u8,
    pb_pages: u64,
    max_order: u8,
    blocks: Vec<Block>,
    /// `free[o][t]`: free blocks of order `o` on type `t`'s lists.
    free: Vec<[u64; 3]>,
    placement: Placement,
    /// Log2 of a superpageblock's frames.
    spb_shift: u8,
    /// The zone's span.
    span: (u64, u64),
}

/// Whether [`Blocks::check_in`] accepts a claim of the roomiest pageblock
/// that Linux's rule would not make.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Forced {
    /// Never (Linux's rule, or the neighbour's).
    No,
    /// Unless NOFRAGMENT.
    Fragmenting,
}

/// Whether a pageblock of type `t` taints its superpageblock (written out
/// here, as the fallback table is).
fn taints(t: Option<MigrateType>) -> bool {
    matches!(
        t,
        Some(MigrateType::Unmovable | MigrateType::Reclaimable | MigrateType::HighAtomic)
    )
}

const BASIC: [MigrateType; 3] = [
    MigrateType::Unmovable,
    MigrateType::Movable,
    MigrateType::Reclaimable,
];

fn basic_index(mt: MigrateType) -> Option<usize> {
    BASIC.iter().position(|&b| b == mt)
}

impl Blocks {
    fn read(z: &MobileZone<'_>, live: &BTreeMap<u64, (u8, MigrateType)>) -> Blocks {
        let pbs = z.mobility().pageblocks();
        let pb_pages = pbs.pages();
        let span = z.span();
        let blocks = (0..pbs.len())
            .map(|i| {
                let start = pbs.block_start(i);
                let full = pbs.block_range(start);
                let range = full.intersect(&span);
                let (mut free, mut free_orders) = (0u64, 0u32);
                for (_, info) in z.buddy().walk(range) {
                    if let BlockInfo::Free { head, order, .. } = info {
                        let end = (head.get() + order.pages()).min(range.end.get());
                        free += end - head.get().max(range.start.get());
                        free_orders |= 1 << order.get();
                    }
                }
                let movable = live
                    .range(..range.end.get())
                    .filter(|(_, (_, t))| *t == MigrateType::Movable)
                    .map(|(&q, &(k, _))| {
                        let end = (q + (1u64 << k)).min(range.end.get());
                        end.saturating_sub(q.max(range.start.get()))
                    })
                    .sum();
                Block {
                    start: start.get(),
                    ty: pbs.get(start),
                    base: pbs.base(start),
                    free,
                    movable,
                    free_orders,
                    inside: range == full,
                }
            })
            .collect();
        let max_order = z.buddy().max_order().get();
        let free = (0..=max_order)
            .map(|o| {
                let o = Order::new(o).unwrap_or_default();
                BASIC.map(|t| z.free_blocks_of(o, t))
            })
            .collect();
        Blocks {
            pb_order: z.pageblock_order().get(),
            pb_pages,
            max_order,
            blocks,
            free,
            placement: z.placement(),
            spb_shift: pbs.superpageblocks().shift(),
            span: (span.start.get(), span.end.get()),
        }
    }

    /// The superpageblock of frame `p`.
    fn region(&self, p: u64) -> u64 {
        p >> self.spb_shift
    }

    /// Pageblocks of region `r` whose type taints it.
    fn taint(&self, r: u64) -> usize {
        self.blocks
            .iter()
            .filter(|b| self.region(b.start) == r && taints(b.base))
            .count()
    }

    /// Whether a block `in_set` has a free block of order `o` on type
    /// `t`'s lists.
    fn has_in(&self, in_set: &dyn Fn(&Block) -> bool, o: u8, t: MigrateType) -> bool {
        self.blocks
            .iter()
            .any(|b| in_set(b) && b.ty == Some(t) && b.free_orders & (1 << o) != 0)
    }

    /// Whether a block `in_set` has a free block of a fallback type of
    /// `mt` of order `o` or more.
    fn fallback_in(&self, in_set: &dyn Fn(&Block) -> bool, o: u8, mt: MigrateType) -> bool {
        (o..=self.max_order).any(|c| {
            fallback_table(mt)
                .iter()
                .any(|&t| self.has_in(in_set, c, t))
        })
    }

    /// The superpageblock placement's guard: a movable claim of a block of
    /// a tainting type that holds memory that cannot move, the last such
    /// block of its region, is refused.
    fn guarded(&self, b: &Block, mt: MigrateType) -> bool {
        self.placement == Placement::Superpageblock
            && !taints(Some(mt))
            && taints(b.base)
            && b.free + b.movable < self.pb_pages
            && self.taint(self.region(b.start)) == 1
    }

    /// spec 02 §5.3: the frames of block `b` compatible with a request of
    /// type `mt` claiming it from type `fb`.
    fn alike(&self, b: &Block, mt: MigrateType, fb: MigrateType) -> u64 {
        match (mt, fb) {
            (MigrateType::Movable, _) => b.movable,
            (_, MigrateType::Movable) => self.pb_pages - b.free - b.movable,
            _ => 0,
        }
    }

    /// Whether a list of type `t` had a block of order `o` or above.
    fn has_at_or_above(&self, o: u8, t: MigrateType) -> bool {
        let Some(i) = basic_index(t) else {
            return false;
        };
        (o..=self.max_order).any(|o| self.free[o as usize][i] > 0)
    }

    /// The pinned-neighbour rule (`fallback.rs`, not Linux's): for an
    /// unmovable or reclaimable request, the blocks of a fallback type,
    /// wholly inside the zone, that share a maximum-order region with a
    /// block of the request's type and hold a free block of an order from
    /// `min` to the pageblock order: those with the most free frames. The
    /// request claims one of them before anything else it would fall back
    /// to.
    fn pinned_best(&self, mt: MigrateType, min: u8) -> Vec<Block> {
        if !matches!(mt, MigrateType::Unmovable | MigrateType::Reclaimable)
            || self.placement == Placement::Linux
        {
            return Vec::new();
        }
        let region = |b: &Block| b.start >> self.max_order;
        let orders = if min > self.pb_order {
            0
        } else {
            ((1u32 << (self.pb_order + 1)) - 1) & !((1u32 << min) - 1)
        };
        let cands: Vec<Block> = self
            .blocks
            .iter()
            .filter(|b| {
                b.inside
                    && b.ty
                        .is_some_and(|t| t != mt && fallback_table(mt).contains(&t))
                    && b.free_orders & orders != 0
                    && self
                        .blocks
                        .iter()
                        .any(|o| region(o) == region(b) && o.ty == Some(mt))
            })
            .copied()
            .collect();
        let most = cands.iter().map(|b| b.free).max().unwrap_or(0);
        cands.into_iter().filter(|b| b.free == most).collect()
    }

    /// spec 02 §5.2-5.4: after `z` served `order` as `mt` with block `p`:
    /// its own lists first (no retype); else a claim, which retypes only
    /// pageblocks it may (`should_try_claim_block`, whole free blocks or
    /// `free + alike >= half`; never below pageblock order with
    /// NOFRAGMENT); else a steal (never with NOFRAGMENT) of the smallest
    /// fallback block, from the first type of the fallback table that has
    /// one at that order. Under the superpageblock placement an unmovable
    /// or reclaimable request claims inside the regions tainted before it
    /// (by that rule, else, without NOFRAGMENT, their roomiest fallback
    /// pageblock whatever it holds), and only when they had no fallback
    /// block at all, in the clean region that can never be a 1 GiB page,
    /// else the least free (by the rule, else, without NOFRAGMENT, its
    /// roomiest pageblock), under NOFRAGMENT only when no region was
    /// tainted; it never steals.
    fn check_fallback(
        &self,
        z: &MobileZone<'_>,
        p: Pfn,
        order: Order,
        mt: MigrateType,
        mode: AllocMode,
    ) -> Result<(), String> {
        let k = order.get();
        let nofrag = mode.contains(AllocMode::NOFRAGMENT);
        let pbs = z.mobility().pageblocks();
        let retyped: Vec<(Block, Option<MigrateType>)> = self
            .blocks
            .iter()
            .map(|b| (*b, pbs.get(Pfn(b.start))))
            .filter(|(b, now)| b.ty != *now)
            .collect();
        if self.has_at_or_above(k, mt) {
            ensure!(
                retyped.is_empty(),
                "own type had a block, yet {retyped:?} were retyped"
            );
            ensure!(
                z.block_type(p) == Some(mt),
                "own type had a block, served from {:?}",
                z.block_type(p)
            );
            return Ok(());
        }
        // A pinned neighbour is claimed first, whatever it holds and
        // even under NOFRAGMENT (not under Linux's placement).
        let pinned = self.pinned_best(mt, k);
        if !pinned.is_empty() {
            let first = retyped.first().map(|(b, _)| b.start);
            ensure!(
                retyped.len() == 1 && pinned.iter().any(|b| Some(b.start) == first),
                "served {p:?} retyping {retyped:?}, not a pinned neighbour of {pinned:?}"
            );
            return Ok(());
        }
        let regions: BTreeMap<u64, usize> = self
            .blocks
            .iter()
            .map(|b| self.region(b.start))
            .map(|r| (r, self.taint(r)))
            .collect();
        let steered = self.placement == Placement::Superpageblock
            && matches!(mt, MigrateType::Unmovable | MigrateType::Reclaimable)
            && regions.values().any(|&t| t == 0);
        if !steered {
            return self.check_in(z, p, order, mt, mode, &retyped, &|_| true, Forced::No);
        }
        let rp = self.region(p.get());
        let tainted = |b: &Block| regions.get(&self.region(b.start)).is_some_and(|&t| t > 0);
        if regions.get(&rp).is_some_and(|&t| t > 0) {
            return self.check_in(
                z,
                p,
                order,
                mt,
                mode,
                &retyped,
                &tainted,
                Forced::Fragmenting,
            );
        }
        // Under NOFRAGMENT a clean region is tainted only when none is.
        ensure!(
            !nofrag || regions.values().all(|&t| t == 0),
            "{mt:?} order {k} tainted region {rp:#x} under NOFRAGMENT"
        );
        // Tainting region `rp`: the tainted ones had nothing to give.
        let min = if nofrag && k < self.pb_order {
            self.pb_order
        } else {
            k
        };
        let lowest = if nofrag { min } else { k };
        ensure!(
            !self.fallback_in(&tainted, k, mt),
            "{mt:?} order {k} tainted region {rp:#x} though a tainted region had fallback memory"
        );
        let eligible = |r: u64| {
            regions.get(&r) == Some(&0)
                && self.fallback_in(&|b: &Block| self.region(b.start) == r, lowest, mt)
        };
        ensure!(eligible(rp), "region {rp:#x} had no block to give");
        // Whole: inside the span (the tests hand the whole span over).
        let whole =
            |r: u64| r << self.spb_shift >= self.span.0 && (r + 1) << self.spb_shift <= self.span.1;
        let free = |r: u64| -> u64 {
            self.blocks
                .iter()
                .filter(|b| self.region(b.start) == r)
                .map(|b| b.free)
                .sum()
        };
        let others: Vec<u64> = regions.keys().copied().filter(|&r| eligible(r)).collect();
        if others.iter().any(|&r| !whole(r)) {
            ensure!(
                !whole(rp),
                "tainted whole region {rp:#x} while {others:?} held one that never is"
            );
        } else {
            ensure!(
                others.iter().all(|&r| free(rp) <= free(r)),
                "tainted region {rp:#x} ({} free), not the least free of {others:?}",
                free(rp)
            );
        }
        let inside = |b: &Block| self.region(b.start) == rp;
        self.check_in(
            z,
            p,
            order,
            mt,
            mode,
            &retyped,
            &inside,
            Forced::Fragmenting,
        )
    }

    /// [`Blocks::check_fallback`]'s rules over the blocks `in_set`: a claim
    /// (largest order first) or a steal (smallest first); where `forced`
    /// allows, a claim of the roomiest pageblock instead, and no steal.
    #[allow(clippy::too_many_arguments)]
    fn check_in(
        &self,
        z: &MobileZone<'_>,
        p: Pfn,
        order: Order,
        mt: MigrateType,
        mode: AllocMode,
        retyped: &[(Block, Option<MigrateType>)],
        in_set: &dyn Fn(&Block) -> bool,
        forced: Forced,
    ) -> Result<(), String> {
        let k = order.get();
        let nofrag = mode.contains(AllocMode::NOFRAGMENT);
        let Some((first, _)) = retyped.first() else {
            ensure!(!nofrag, "NOFRAGMENT stole from another type");
            ensure!(
                forced == Forced::No,
                "a steal under the superpageblock placement"
            );
            let first_fb = |cur: u8| {
                fallback_table(mt)
                    .iter()
                    .copied()
                    .find(|&t| self.has_in(in_set, cur, t))
            };
            let smallest = (k..=self.max_order).find_map(first_fb);
            ensure!(
                smallest.is_some() && z.block_type(p) == smallest,
                "steal for {mt:?} order {k} took a {:?} block, the rule says {smallest:?}",
                z.block_type(p)
            );
            return Ok(());
        };
        let claim = self.check_claim(k, mt, nofrag, retyped, in_set);
        let may_force = match forced {
            Forced::No => false,
            Forced::Fragmenting => !nofrag,
        };
        if claim.is_ok() || !may_force {
            return claim;
        }
        // The roomiest fallback pageblock with a block of order `k` or
        // more, claimed whole whatever it holds, once no whole pageblock
        // was left to claim.
        ensure!(
            retyped.len() == 1,
            "a forced claim retyped {} blocks",
            retyped.len()
        );
        let holds = |b: &Block| {
            in_set(b)
                && b.ty.is_some_and(|t| fallback_table(mt).contains(&t))
                && b.free_orders >> k != 0
        };
        ensure!(
            holds(first),
            "forced claim of {first:?}, which had no fallback block of order {k} ({claim:?})"
        );
        ensure!(
            !self.fallback_in(in_set, self.pb_order.max(k), mt),
            "forced claim while a whole pageblock could be claimed ({claim:?})"
        );
        // Chunks are pageblocks up to order 9: the claim's measure of room.
        if self.pb_order <= 9 {
            let most = self
                .blocks
                .iter()
                .filter(|b| holds(b))
                .map(|b| b.free)
                .max();
            ensure!(
                Some(first.free) == most,
                "forced claim of {first:?} with {} free, the roomiest has {most:?} ({claim:?})",
                first.free
            );
        }
        Ok(())
    }

    /// A claim that retyped `retyped`, by Linux's rule over the blocks
    /// `in_set`.
    fn check_claim(
        &self,
        k: u8,
        mt: MigrateType,
        nofrag: bool,
        retyped: &[(Block, Option<MigrateType>)],
        in_set: &dyn Fn(&Block) -> bool,
    ) -> Result<(), String> {
        // A claim: of a block of the fallback type the table lists
        // first at the claimed order `cur`, where claiming is allowed
        // (`should_try_claim_block`: cur >= pageblock_order / 2, or a
        // non-movable request); the retyped pageblocks hold that block.
        let first = &retyped[0].0;
        let fb = first.ty.unwrap_or(MigrateType::Isolate);
        ensure!(
            fallback_table(mt).contains(&fb),
            "claimed a {fb:?} block for {mt:?}"
        );
        for (b, now) in retyped {
            ensure!(
                *now == Some(mt),
                "claim retyped block {:#x} to {now:?}, not {mt:?}",
                b.start
            );
            ensure!(b.ty == first.ty, "one claim retyped blocks of two types");
            ensure!(
                in_set(b),
                "claimed block {:#x} outside the regions it may use",
                b.start
            );
        }
        let min = if nofrag && k < self.pb_order {
            self.pb_order
        } else {
            k
        };
        let may_claim = |cur: u8| cur >= self.pb_order / 2 || mt != MigrateType::Movable;
        let first_fb = |cur: u8| {
            fallback_table(mt)
                .iter()
                .copied()
                .find(|&t| self.has_in(in_set, cur, t))
        };
        let cur = (min..=self.max_order).rev().find(|&cur| {
            may_claim(cur)
                && first_fb(cur) == Some(fb)
                && retyped.iter().all(|(b, _)| b.free_orders & (1 << cur) != 0)
        });
        let Some(cur) = cur else {
            return Err(format!(
                "claim of {} {fb:?} block(s) for {mt:?} order {k} matches no order the rule allows",
                retyped.len()
            ));
        };
        // Largest first: every higher order with a fallback block was
        // tried before and refused, which only a partial claim can be
        // (whole pageblocks are always claimed), and only where some
        // block of that type and order fails the half rule (or the
        // superpageblock guard).
        for c in cur + 1..=self.max_order {
            let Some(t) = first_fb(c) else { continue };
            ensure!(
                c < self.pb_order,
                "claimed at order {cur}, but a whole {t:?} block of order {c} was free"
            );
            let refusable = self.blocks.iter().any(|b| {
                in_set(b)
                    && b.ty == Some(t)
                    && b.free_orders & (1 << c) != 0
                    && (!b.inside
                        || b.free + self.alike(b, mt, t) < self.pb_pages / 2
                        || self.guarded(b, mt))
            });
            ensure!(
                refusable,
                "claimed at order {cur}, but order {c} had a claimable {t:?} block"
            );
        }
        if cur < self.pb_order {
            let b = &retyped[0].0;
            let alike = self.alike(b, mt, fb);
            ensure!(
                retyped.len() == 1,
                "a partial claim retyped {} blocks",
                retyped.len()
            );
            ensure!(
                b.inside,
                "block {:#x} straddles the zone edge, yet was claimed",
                b.start
            );
            ensure!(
                b.free + alike >= self.pb_pages / 2,
                "block {:#x} claimed with free {} + alike {alike} < half",
                b.start,
                b.free
            );
            ensure!(
                !self.guarded(b, mt),
                "block {:#x} claimed for {mt:?}, leaving its region clean with unmovable memory",
                b.start
            );
        }
        Ok(())
    }
}

/// Keeps `Vec` in scope for users building op lists.
pub type Ops = Vec<Op>;
