//! The zone's pageblock pool: free huge pages kept off the free lists for
//! the next request of their order and type, given back to the lists
//! whenever something needs them there.

mod common;

use common::{PB, o, one_zone};
use pageframe::ConfigError;
use pageframe::zone::{PAGEBLOCKS_PER_SLOT, POOL_SLOTS, Zone};
use pageframe::{FreeError, Gfp, Machine, NodeId, PfnRange};

fn zone<'m>(m: &'m Machine<'static>) -> &'m Zone<'static> {
    m.inspect().all_zones().next().unwrap()
}

/// Fallbacks (claims and steals) so far in the machine's one zone.
fn fallbacks(m: &Machine<'static>) -> u64 {
    let s = zone(m).fallback_stats();
    s.claims_whole + s.claims_partial + s.steals
}

#[test]
fn a_freed_huge_page_is_the_next_one_and_skips_the_free_lists() {
    let m = one_zone(PAGEBLOCKS_PER_SLOT * PB);
    assert_eq!(m.tunables().pageblock_pool(), 1);
    let free = m.inspect().free_pages();
    let a = m.alloc(NodeId::ZERO, Gfp::HIGHUSER_MOVABLE, o(9)).unwrap();
    let pa = a.pfn();
    let lists = |m: &Machine<'static>| (zone(m).free_blocks(o(9)), zone(m).free_blocks(o(10)));
    let before = lists(m);
    m.free(a).unwrap();
    // Kept whole off the lists (no merge), and still free memory.
    assert_eq!(lists(m), before);
    assert_eq!(zone(m).pooled_frames(), PB);
    assert_eq!(m.inspect().free_pages(), free);
    m.validate().unwrap();
    // The next huge page of the type is that one, and the lists never
    // saw it (no split either).
    let b = m.alloc(NodeId::ZERO, Gfp::HIGHUSER_MOVABLE, o(9)).unwrap();
    assert_eq!(b.pfn(), pa);
    assert_eq!(lists(m), before);
    assert_eq!(zone(m).pooled_frames(), 0);
    m.free(b).unwrap();
    m.drain_stripes();
    assert_eq!(zone(m).pooled_frames(), 0);
    assert_eq!(m.inspect().free_pages(), free);
    assert_eq!(zone(m).free_blocks(o(10)), PAGEBLOCKS_PER_SLOT / 2);
    m.validate().unwrap();
}

#[test]
fn a_pooled_block_freed_again_is_refused_and_stays_pooled() {
    let m = one_zone(PAGEBLOCKS_PER_SLOT * PB);
    let a = m.alloc(NodeId::ZERO, Gfp::KERNEL, o(9)).unwrap();
    let (pfn, order) = a.into_raw();
    // SAFETY: the block is this test's, held as a number only.
    let b = unsafe { m.block_from_raw(pfn, order) }.unwrap();
    m.free(b).unwrap();
    assert_eq!(zone(m).pooled_frames(), PB);
    // The number again: no live allocation any more.
    // SAFETY: a stale number, which the check refuses.
    let again = unsafe { m.block_from_raw(pfn, order) };
    assert_eq!(again.unwrap_err().why, FreeError::AlreadyFree);
    // SAFETY: as above (a range free of the stale number).
    let range = unsafe { m.free_raw(PfnRange::new(pfn, pfn + PB)) };
    assert_eq!(range.unwrap_err().why, FreeError::AlreadyFree);
    assert_eq!(zone(m).pooled_frames(), PB);
    m.validate().unwrap();
}

#[test]
fn only_a_request_of_the_blocks_type_takes_it() {
    let m = one_zone(PAGEBLOCKS_PER_SLOT * PB);
    let a = m.alloc(NodeId::ZERO, Gfp::HIGHUSER_MOVABLE, o(9)).unwrap();
    let pa = a.pfn();
    m.free(a).unwrap();
    let k = m.alloc(NodeId::ZERO, Gfp::KERNEL, o(9)).unwrap();
    assert_ne!(k.pfn(), pa, "an unmovable request took a movable block");
    assert_eq!(zone(m).pooled_frames(), PB);
    m.free(k).unwrap();
    m.drain_stripes();
    assert_eq!(m.inspect().free_pages(), PAGEBLOCKS_PER_SLOT * PB);
    m.validate().unwrap();
}

#[test]
fn a_pinned_huge_page_goes_back_to_the_free_lists() {
    let m = one_zone(PAGEBLOCKS_PER_SLOT * PB);
    let a = m.alloc(NodeId::ZERO, Gfp::HIGHUSER_MOVABLE, o(9)).unwrap();
    m.set_pinned(&a, true).unwrap();
    m.free(a).unwrap();
    assert_eq!(zone(m).pooled_frames(), 0);
    m.validate().unwrap();
}

#[test]
fn a_full_pool_sends_the_rest_to_the_free_lists() {
    let m = one_zone(2 * PAGEBLOCKS_PER_SLOT * PB);
    assert_eq!(m.tunables().pageblock_pool(), 2);
    let blocks: Vec<_> = (0..3)
        .map(|_| m.alloc(NodeId::ZERO, Gfp::HIGHUSER_MOVABLE, o(9)).unwrap())
        .collect();
    for b in blocks {
        m.free(b).unwrap();
    }
    assert_eq!(zone(m).pooled_frames(), 2 * PB);
    assert_eq!(m.inspect().free_pages(), 2 * PAGEBLOCKS_PER_SLOT * PB);
    m.validate().unwrap();
}

#[test]
fn a_zone_out_of_listed_memory_takes_the_pool_back() {
    // Two pageblocks: one block of the maximal order when whole.
    let m = one_zone(2 * PB);
    m.tunables().set_min_free_kbytes(0);
    m.tunables().set_pageblock_pool(2).unwrap();
    // The whole zone at once: the pool merges back first, for a request
    // of the blocks' type (before it would fall back) and of another
    // (when the zone has nothing else).
    for gfp in [Gfp::HIGHUSER_MOVABLE, Gfp::KERNEL] {
        let halves = [
            m.alloc(NodeId::ZERO, Gfp::HIGHUSER_MOVABLE, o(9)).unwrap(),
            m.alloc(NodeId::ZERO, Gfp::HIGHUSER_MOVABLE, o(9)).unwrap(),
        ];
        for b in halves {
            m.free(b).unwrap();
        }
        assert_eq!(zone(m).pooled_frames(), 2 * PB);
        let whole = m.alloc(NodeId::ZERO, gfp, o(10)).unwrap();
        assert_eq!(zone(m).pooled_frames(), 0);
        m.free(whole).unwrap();
        assert_eq!(zone(m).free_blocks(o(10)), 1);
    }
    m.validate().unwrap();
}

#[test]
fn a_request_that_would_fall_back_takes_its_types_block_from_the_pool() {
    let m = one_zone(2 * PB);
    m.tunables().set_min_free_kbytes(0);
    m.tunables().set_pageblock_pool(1).unwrap();
    // Every pageblock starts movable. A movable huge page splits the
    // zone's one block; an unmovable one then claims the other pageblock.
    let mv = m.alloc(NodeId::ZERO, Gfp::HIGHUSER_MOVABLE, o(9)).unwrap();
    let k = m.alloc(NodeId::ZERO, Gfp::KERNEL, o(9)).unwrap();
    let pk = k.pfn();
    assert_eq!(fallbacks(m), 1);
    m.free(k).unwrap();
    assert_eq!(zone(m).pooled_frames(), PB);
    // An unmovable frame finds no unmovable frame on the lists (nor a
    // movable one to steal); the pooled unmovable pageblock comes back
    // rather than the request failing or falling back.
    let f = m.alloc(NodeId::ZERO, Gfp::KERNEL, o(0)).unwrap();
    assert_eq!(fallbacks(m), 1);
    assert_eq!(f.pfn().align_down(o(9)), pk);
    assert_eq!(zone(m).pooled_frames(), 0);
    for b in [f, mv] {
        m.free(b).unwrap();
    }
    m.validate().unwrap();
}

#[test]
fn a_contiguous_range_over_a_pooled_block_is_found() {
    let m = one_zone(PAGEBLOCKS_PER_SLOT * PB);
    let a = m.alloc(NodeId::ZERO, Gfp::HIGHUSER_MOVABLE, o(9)).unwrap();
    let range = PfnRange::new(a.pfn(), a.pfn() + PB);
    m.free(a).unwrap();
    assert_eq!(zone(m).pooled_frames(), PB);
    let seg = m
        .alloc_contig_range(range, &mut pageframe::compact::NoMigration)
        .unwrap();
    assert_eq!(zone(m).pooled_frames(), 0);
    drop(seg);
    m.validate().unwrap();
}

#[test]
fn the_pool_size_is_a_tunable() {
    let m = one_zone(64 * PAGEBLOCKS_PER_SLOT * PB);
    let t = m.tunables();
    assert_eq!(t.pageblock_pool(), POOL_SLOTS);
    assert_eq!(
        t.set_pageblock_pool(POOL_SLOTS + 1),
        Err(ConfigError::PageblockPool(POOL_SLOTS + 1))
    );
    assert_eq!(t.pageblock_pool(), POOL_SLOTS);
    let blocks: Vec<_> = (0..POOL_SLOTS)
        .map(|_| m.alloc(NodeId::ZERO, Gfp::HIGHUSER_MOVABLE, o(9)).unwrap())
        .collect();
    for b in blocks {
        m.free(b).unwrap();
    }
    assert_eq!(zone(m).pooled_frames(), POOL_SLOTS as u64 * PB);
    // Fewer slots: the others' blocks go back to the lists.
    t.set_pageblock_pool(1).unwrap();
    assert_eq!(t.pageblock_pool(), 1);
    assert_eq!(zone(m).pooled_frames(), PB);
    // None: the pool is off, a freed huge page merges on the lists.
    t.set_pageblock_pool(0).unwrap();
    assert_eq!(zone(m).pooled_frames(), 0);
    let a = m.alloc(NodeId::ZERO, Gfp::HIGHUSER_MOVABLE, o(9)).unwrap();
    m.free(a).unwrap();
    assert_eq!(zone(m).pooled_frames(), 0);
    assert_eq!(m.inspect().free_pages(), 64 * PAGEBLOCKS_PER_SLOT * PB);
    m.validate().unwrap();
}

#[test]
fn the_slots_follow_the_memory_a_zone_manages() {
    let m = common::machine_with(pageframe::MachineConfig::SINGLE_NODE);
    let slot = PAGEBLOCKS_PER_SLOT * PB;
    let at = |k: u64| pageframe::Pfn(4 * common::GIB + k * slot);
    // A span of four slots' memory, one of them handed over.
    common::zone(
        m,
        NodeId::ZERO,
        pageframe::ZoneKind::Normal,
        PfnRange::new(at(0), at(4)),
        PfnRange::new(at(0), at(1)),
    );
    let t = m.tunables();
    assert_eq!(t.pageblock_pool(), 1);
    m.add_free_range(PfnRange::new(at(1), at(3))).unwrap();
    assert_eq!(t.pageblock_pool(), 3);
    // Memory leaving the zone takes its slots with it (and the pool's
    // blocks went back to the lists before the range was emptied).
    let blocks: Vec<_> = (0..3)
        .map(|_| m.alloc(NodeId::ZERO, Gfp::HIGHUSER_MOVABLE, o(9)).unwrap())
        .collect();
    for b in blocks {
        m.free(b).unwrap();
    }
    assert_eq!(zone(m).pooled_frames(), 3 * PB);
    let gone = PfnRange::new(at(2), at(3));
    m.offline_range(gone, &mut pageframe::compact::NoMigration)
        .unwrap();
    assert_eq!(t.pageblock_pool(), 2);
    assert_eq!(zone(m).pooled_frames(), 0);
    m.validate().unwrap();
    // Fixed by the tunable, the number stays.
    t.set_pageblock_pool(1).unwrap();
    m.add_free_range(gone).unwrap();
    m.add_free_range(PfnRange::new(at(3), at(4))).unwrap();
    assert_eq!(t.pageblock_pool(), 1);
    m.drain_stripes();
    assert_eq!(m.inspect().free_pages(), 4 * slot);
    m.validate().unwrap();
}
