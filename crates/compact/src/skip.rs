//! Resetting the pageblock skip hints (`__reset_isolation_suitable`, spec 03
//! §6.3): clears the hints of blocks that may be worth scanning again and
//! moves the cached scanner positions to the first such blocks.

use core::sync::atomic::Ordering::Relaxed;

use pageframe_buddy::{BlockInfo, Pfn};
use pageframe_mobility::{MigrateType, MobileZone, tag as mtag};

use crate::access::locked;
use crate::{CompactState, ZoneLock};

/// Frames sampled per pageblock: every `2^PAGE_ALLOC_COSTLY_ORDER`th.
const SAMPLE: u64 = 1 << pageframe_buddy::COSTLY_ORDER;

/// Resets the skip hints if a direct compactor asked for it
/// (`reset_isolation_suitable`, run when kswapd goes to sleep; with no
/// kswapd here, [`crate::Kcompactd`] calls it before its work). Returns
/// whether it ran.
pub fn reset_isolation_suitable<Z: ZoneLock + ?Sized>(zone: &Z, state: &CompactState) -> bool {
    if !state.blockskip_flush.swap(false, Relaxed) {
        return false;
    }
    reset_skip_hints(zone, state);
    true
}

/// `__reset_isolation_suitable`: walks the zone from both ends at once, one
/// pageblock per step (one lock hold each), until the walks cross.
pub(crate) fn reset_skip_hints<Z: ZoneLock + ?Sized>(zone: &Z, state: &CompactState) {
    let Some((span, pb)) = locked(zone, |z| (z.span(), z.pageblock_order().pages())) else {
        return;
    };
    let (start, end) = (span.start.get(), span.end.get());
    let mut migrate = start;
    let mut free = (end - 1) & !(pb - 1);
    let (mut reset_migrate, mut reset_free) = (free, migrate);
    let (mut source_set, mut free_set) = (false, false);
    while migrate < free {
        let r = locked(zone, |z| {
            (
                reset_block(z, migrate, (start, end), true, source_set),
                reset_block(z, free, (start, end), free_set, true),
            )
        });
        let Some((src, tgt)) = r else { return };
        if src && migrate < reset_migrate {
            source_set = true;
            reset_migrate = migrate;
            state.init_migrate.store(migrate, Relaxed);
            state.cached_migrate[0].store(migrate, Relaxed);
            state.cached_migrate[1].store(migrate, Relaxed);
        }
        if tgt && free > reset_free {
            free_set = true;
            reset_free = free;
            state.init_free.store(free, Relaxed);
            state.cached_free.store(free, Relaxed);
        }
        migrate = (migrate & !(pb - 1)) + pb;
        free -= pb;
    }
    // No source below the first target: leave no distance to scan.
    if reset_migrate >= reset_free {
        state.cached_migrate[0].store(migrate, Relaxed);
        state.cached_migrate[1].store(migrate, Relaxed);
        state.cached_free.store(free, Relaxed);
    }
}

/// `__reset_isolation_pfn`: clears `pfn`'s block's skip hint if a sampled
/// frame lies in a movable in-use block (`check_source`) or is a free
/// block's head (`check_target`, movable blocks only when checking targets
/// alone).
fn reset_block(
    z: &mut MobileZone<'_>,
    pfn: u64,
    (start, end): (u64, u64),
    check_source: bool,
    check_target: bool,
) -> bool {
    let blocks = z.mobility().pageblocks();
    let range = blocks.block_range(Pfn(pfn));
    let first = range.start.get().max(start);
    let last = range.end.get().min(end);
    if first >= last {
        return false;
    }
    // A huge allocation owns the block for as long as it lives.
    if let Some(BlockInfo::Allocated { order, .. }) = z.buddy().block_at(Pfn(first))
        && order >= z.pageblock_order()
    {
        return false;
    }
    if check_source && check_target && !blocks.skip(Pfn(first)) {
        return true;
    }
    if !check_source && check_target && z.block_type(Pfn(first)) != Some(MigrateType::Movable) {
        return false;
    }
    // Linux samples frames 0, 8, 16, ... of the block; a regular pattern
    // (one in-use frame every fourth) then sees only in-use frames. The
    // sample offset rotates through the eight residues instead, at the
    // same cost.
    let mut k = 0;
    let mut p = first;
    while p < last {
        let hit = match z.buddy().block_at(Pfn(p)) {
            Some(BlockInfo::Allocated { tag, .. }) => {
                check_source && tag & mtag::MT_MASK == MigrateType::Movable as u32
            }
            Some(BlockInfo::Free { head, .. }) => check_target && head.get() == p,
            _ => false,
        };
        if hit {
            z.pageblocks_mut().set_skip(Pfn(first), false);
            return true;
        }
        k += 1;
        p = first + k * SAMPLE + k % SAMPLE;
    }
    false
}
