//! Ownership, drain requests and sizing updates (single-threaded parts).

use pageframe_models::pcp::RefZone;
use pageframe_pcp::{
    CpuId, MigrateType, Order, PcpConfig, PcpError, PcpSet, PcpSizing, PcpSlot, PerCpuPages, Pfn,
    Slot,
};

const O0: Order = Order::new_truncated(0);
const U: MigrateType = MigrateType::Unmovable;

fn slots<'m>(mems: &'m mut [Vec<Slot>], s: PcpSizing) -> Vec<PcpSlot<'m>> {
    mems.iter_mut()
        .map(|m| PcpSlot::new(PerCpuPages::new(m, s, PcpConfig::X86_64).unwrap()))
        .collect()
}

fn sizing() -> PcpSizing {
    PcpSizing::new(4, 16, 64).unwrap()
}

#[test]
fn one_owner_at_a_time() {
    let mut mems = vec![vec![Slot::EMPTY; 64]; 2];
    let s = slots(&mut mems, sizing());
    let set = PcpSet::new(&s);
    let a = set.claim(CpuId(0)).unwrap();
    assert_eq!(set.claim(CpuId(0)).err(), Some(PcpError::Busy));
    assert!(set.claim(CpuId(1)).is_ok(), "other CPUs are independent");
    assert_eq!(set.claim(CpuId(2)).err(), Some(PcpError::NoSuchCpu));
    drop(a);
    assert!(set.claim(CpuId(0)).is_ok());
}

#[test]
fn cache_contents_survive_a_change_of_owner() {
    let zone = RefZone::with_blocks(O0, 0, 100);
    let mut mems = vec![vec![Slot::EMPTY; 64]; 1];
    let s = slots(&mut mems, sizing());
    let set = PcpSet::new(&s);
    let mut a = set.claim(CpuId(0)).unwrap();
    a.alloc(&zone, O0, U).unwrap();
    let count = a.count();
    assert!(count > 0);
    drop(a);
    let mut b = set.claim(CpuId(0)).unwrap();
    assert_eq!(b.count(), count);
    b.inspect(|c| c.validate()).unwrap();
}

#[test]
fn drain_request_is_honoured_at_the_next_operation() {
    let zone = RefZone::new();
    let mut mems = vec![vec![Slot::EMPTY; 64]; 2];
    let s = slots(&mut mems, sizing());
    let set = PcpSet::new(&s);
    let mut owner = set.claim(CpuId(1)).unwrap();
    for i in 0..5 {
        owner.free(&zone, Pfn(i), O0, U).unwrap();
    }
    let t = set.request_drain(CpuId(1)).unwrap();
    assert!(!set.is_drained(t));
    assert_eq!(owner.count(), 5, "a remote request never touches the lists");
    // The owner's next operation drains first, then frees.
    owner.free(&zone, Pfn(99), O0, U).unwrap();
    assert!(set.is_drained(t));
    assert_eq!(owner.count(), 1);
    assert_eq!(zone.free_pages(), 5);
    assert_eq!(owner.stats().drains, 1);
}

/// A caller that must not wait never honours a pending drain (that
/// spills to the zone, and acknowledging it with frames left would let the
/// requester go on too early): it leaves the cache alone, hits included,
/// and the request stays pending until the owner's next operation.
#[test]
fn try_alloc_leaves_a_cache_with_a_pending_request_alone() {
    let zone = RefZone::with_blocks(O0, 0, 100);
    let mut mems = vec![vec![Slot::EMPTY; 64]; 1];
    let s = slots(&mut mems, sizing());
    let set = PcpSet::new(&s);
    let mut owner = set.claim(CpuId(0)).unwrap();
    let f = owner.alloc(&zone, O0, U).unwrap();
    owner.free(&zone, f, O0, U).unwrap();
    let (count, stats) = (owner.count(), owner.stats());
    assert!(count > 0);
    let t = set.request_drain(CpuId(0)).unwrap();
    assert_eq!(
        owner.try_alloc(&zone, O0, U),
        Err(pageframe_pcp::AllocMiss::Busy)
    );
    assert_eq!((owner.count(), owner.stats()), (count, stats));
    assert!(!set.is_drained(t));
    // The owner's next operation honours it, and then serves.
    owner.poll(&zone);
    assert!(set.is_drained(t));
    assert_eq!((owner.count(), zone.free_pages()), (0, 100));
    assert!(owner.try_alloc(&zone, O0, U).is_ok());
}

#[test]
fn drain_all_empties_unowned_and_local_caches() {
    let zone = RefZone::with_blocks(O0, 0, 1000);
    let mut mems = vec![vec![Slot::EMPTY; 128]; 3];
    let s = slots(&mut mems, sizing());
    let set = PcpSet::new(&s);
    for cpu in 0..3 {
        let mut l = set.claim(CpuId(cpu)).unwrap();
        let f = l.alloc(&zone, O0, U).unwrap();
        l.free(&zone, f, O0, U).unwrap();
        assert!(l.count() > 0);
    }
    let mut local = set.claim(CpuId(2)).unwrap();
    set.drain_all(&zone, Some(&mut local), |_| {});
    assert_eq!(local.count(), 0);
    drop(local);
    for cpu in 0..3 {
        assert_eq!(set.claim(CpuId(cpu)).unwrap().count(), 0);
    }
    assert_eq!(zone.free_pages(), 1000);
}

#[test]
fn drain_cpu_finishes_a_request_left_by_a_departed_owner() {
    let zone = RefZone::new();
    let mut mems = vec![vec![Slot::EMPTY; 64]; 1];
    let s = slots(&mut mems, sizing());
    let set = PcpSet::new(&s);
    let mut owner = set.claim(CpuId(0)).unwrap();
    owner.free(&zone, Pfn(7), O0, U).unwrap();
    let t = set.request_drain(CpuId(0)).unwrap();
    drop(owner); // leaves without honouring
    assert!(!set.is_drained(t));
    set.drain_cpu(&zone, CpuId(0), None, |_| {}).unwrap();
    assert!(set.is_drained(t));
    assert_eq!(zone.blocks(O0), vec![7]);
}

#[test]
fn sizing_updates_reach_owned_and_unowned_caches() {
    let zone = RefZone::new();
    let mut mems = vec![vec![Slot::EMPTY; 64]; 2];
    let s = slots(&mut mems, sizing());
    let set = PcpSet::new(&s);
    let mut owner = set.claim(CpuId(0)).unwrap();
    let new = PcpSizing::new(2, 8, 8).unwrap().with_free_high_batch(true);
    set.update_sizing(new);
    assert_eq!(owner.inspect(|c| c.sizing()), sizing(), "applied lazily");
    owner.poll(&zone);
    assert_eq!(owner.inspect(|c| c.sizing()), new);
    assert_eq!(owner.high(), 8);
    drop(owner);
    let mut other = set.claim(CpuId(1)).unwrap();
    assert_eq!(
        other.inspect(|c| c.sizing()),
        new,
        "applied at once when unowned"
    );
}
