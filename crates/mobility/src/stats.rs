//! Fallback event counters (spec 02 §6).

/// What the fallback paths did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FallbackStats {
    /// Allocations served from the requested type's own lists.
    pub own: u64,
    /// Whole free blocks of pageblock order or more claimed from a fallback type.
    pub claims_whole: u64,
    /// Pageblocks claimed because enough of them was free or alike.
    pub claims_partial: u64,
    /// Claim attempts that found too little free or alike memory.
    pub claims_refused: u64,
    /// Single blocks stolen from a fallback type without retyping.
    pub steals: u64,
    /// Claims and steals below pageblock order (Linux "fragmenting" events;
    /// each one would boost the watermarks).
    pub fragmenting: u64,
    /// Unmovable and reclaimable fallbacks kept inside a superpageblock
    /// that was tainted already ([`crate::Placement::Superpageblock`]).
    pub superpageblock_kept: u64,
    /// Unmovable and reclaimable fallbacks that tainted a clean
    /// superpageblock (no tainted one had fallback memory to give).
    pub superpageblock_tainting: u64,
    /// Pageblocks of tainted superpageblocks emptied by migration to make
    /// room for memory that cannot move (`MobileZone::room_to_make`).
    pub superpageblock_room_made: u64,
    /// Searches that read the chunks of every tainted superpageblock for
    /// fallback memory (the costly part of keeping to them).
    pub superpageblock_searches: u64,
    /// Movable allocations served from CMA pageblocks.
    pub cma: u64,
    /// Allocations served from the highatomic reserve.
    pub highatomic_used: u64,
    /// Pageblocks reserved as highatomic / given back.
    pub highatomic_reserved: u64,
    /// Pageblocks given back from the highatomic reserve.
    pub highatomic_unreserved: u64,
    /// Allocations that found nothing.
    pub failures: u64,
}
