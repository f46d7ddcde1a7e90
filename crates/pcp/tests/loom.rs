//! Loom model of the drain protocol (owner-honoured requests, hand-over of
//! a released cache). Run with:
//! `RUSTFLAGS="--cfg loom" cargo test -p pageframe-pcp --test loom --release`
#![cfg(loom)]

use loom::sync::Mutex;
use loom::thread;
use pageframe_pcp::{
    CpuId, HomeFree, LocalPcp, MigrateType, Order, PcpConfig, PcpSet, PcpSizing, PcpSlot, PcpZone,
    PerCpuPages, Pfn, RefillSink, Slot, SpillBatch,
};

struct LoomZone {
    free: Mutex<Vec<u64>>,
}

impl PcpZone for LoomZone {
    fn refill(&self, _o: Order, _mt: MigrateType, sink: &mut RefillSink<'_, '_>) {
        let mut v = self.free.lock().unwrap();
        while sink.remaining() > 0 {
            let Some(f) = v.pop() else { break };
            if let Err(b) = sink.push(Pfn(f)) {
                v.push(b.0);
                break;
            }
        }
    }
    fn spill(&self, batch: &mut SpillBatch<'_, '_>) {
        let mut v = self.free.lock().unwrap();
        for (f, _) in batch {
            v.push(f.get());
        }
    }
}

fn leak_set(cpus: usize) -> &'static PcpSet<'static, 'static> {
    let sizing = PcpSizing::new(1, 8, 8).unwrap();
    let slots: Vec<PcpSlot<'static>> = (0..cpus)
        .map(|_| {
            let mem: &'static mut [Slot] = Box::leak(vec![Slot::EMPTY; 4].into_boxed_slice());
            PcpSlot::new(PerCpuPages::new(mem, sizing, PcpConfig::X86_64).unwrap())
        })
        .collect();
    Box::leak(Box::new(PcpSet::new(Box::leak(slots.into_boxed_slice()))))
}

fn leak_zone() -> &'static LoomZone {
    Box::leak(Box::new(LoomZone {
        free: Mutex::new(Vec::new()),
    }))
}

fn builder() -> loom::model::Builder {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    // The waits are spin loops (with yields): give them room.
    b.max_branches = 100_000;
    b
}

/// A drainer waits for an owner that polls a little and then leaves: the
/// frame cached before the request always ends up in the zone.
#[test]
fn drain_completes_whether_owner_honours_or_leaves() {
    builder().check(|| {
        let set = leak_set(1);
        let zone = leak_zone();
        let mut owner = set.claim(CpuId(0)).unwrap();
        owner
            .free(zone, Pfn(7), Order::new_truncated(0), MigrateType::Movable)
            .unwrap();
        let t = thread::spawn(move || {
            owner.poll(zone);
            thread::yield_now();
            owner.poll(zone);
            drop(owner);
        });
        set.drain_cpu(zone, CpuId(0), None, |_| thread::yield_now())
            .unwrap();
        assert_eq!(*zone.free.lock().unwrap(), vec![7]);
        t.join().unwrap();
        assert_eq!(set.claim(CpuId(0)).unwrap().count(), 0);
    });
}

/// Two owners drain everything at the same time: each honours the other's
/// request while waiting, so neither deadlocks, and both frames come back.
#[test]
fn concurrent_drain_all_does_not_deadlock() {
    builder().check(|| {
        let set = leak_set(2);
        let zone = leak_zone();
        let mut a = set.claim(CpuId(0)).unwrap();
        let mut b = set.claim(CpuId(1)).unwrap();
        a.free(zone, Pfn(1), Order::new_truncated(0), MigrateType::Movable)
            .unwrap();
        b.free(zone, Pfn(2), Order::new_truncated(0), MigrateType::Movable)
            .unwrap();
        let t = thread::spawn(move || {
            set.drain_all(zone, Some(&mut b), |_| thread::yield_now());
            assert_eq!(b.count(), 0);
            drop(b);
        });
        set.drain_all(zone, Some(&mut a), |_| thread::yield_now());
        assert_eq!(a.count(), 0);
        // The contract: an owner that stops operating releases its cache,
        // or the other drainer could wait for it forever.
        drop(a);
        t.join().unwrap();
        let mut v = zone.free.lock().unwrap().clone();
        v.sort();
        assert_eq!(v, vec![1, 2]);
    });
}

/// Two zones, two CPUs, each owning its cache of both zones, drain every
/// cache of both zones at once (requests to all caches first, then the
/// waits), each serving every request addressed to it while it waits: both
/// drains end, whatever the interleaving, and every frame is in its zone.
/// The earlier protocol, which served only the zone being waited on,
/// deadlocks here: CPU 0 waits in zone B for CPU 1, which waits in zone A
/// without polling its cache of zone B.
#[test]
fn concurrent_drains_of_two_zones_end() {
    builder().check(|| {
        let sets = [leak_set(2), leak_set(2)];
        let zones = [leak_zone(), leak_zone()];
        let mut locals: Vec<_> = (0..2u32)
            .map(|cpu| {
                let mut mine = [
                    sets[0].claim(CpuId(cpu)).unwrap(),
                    sets[1].claim(CpuId(cpu)).unwrap(),
                ];
                for (z, l) in mine.iter_mut().enumerate() {
                    let f = Pfn(u64::from(cpu) * 2 + z as u64);
                    l.free(zones[z], f, Order::new_truncated(0), MigrateType::Movable)
                        .unwrap();
                }
                mine
            })
            .collect();
        let drain = move |cpu: u32, mine: &mut [pageframe_pcp::LocalPcp<'static, 'static>; 2]| {
            for z in 0..2 {
                sets[z].request_drain_all(zones[z], Some(&mut mine[z]));
            }
            for z in 0..2 {
                sets[z].wait_drain_all(zones[z], Some(CpuId(cpu)), |_| {
                    for (zz, l) in mine.iter_mut().enumerate() {
                        l.poll(zones[zz]);
                    }
                    thread::yield_now();
                });
            }
        };
        let mut b = locals.pop().unwrap();
        let mut a = locals.pop().unwrap();
        let t = thread::spawn(move || {
            drain(1, &mut b);
            drop(b);
        });
        drain(0, &mut a);
        // An owner that stops operating releases its caches.
        drop(a);
        t.join().unwrap();
        for (z, zone) in zones.iter().enumerate() {
            let mut v = zone.free.lock().unwrap().clone();
            v.sort();
            assert_eq!(v, vec![z as u64, 2 + z as u64]);
        }
    });
}

/// One CPU's cache with homes of four frames and batches of `batch`.
fn homed_set(batch: u32) -> &'static PcpSet<'static, 'static> {
    let sizing = PcpSizing::new(batch, 8, 8).unwrap();
    let config = PcpConfig::X86_64
        .with_home(Order::new_truncated(2))
        .unwrap();
    let mem: &'static mut [Slot] = Box::leak(vec![Slot::EMPTY; 4].into_boxed_slice());
    let slots = Box::leak(
        vec![PcpSlot::new(PerCpuPages::new(mem, sizing, config).unwrap())].into_boxed_slice(),
    );
    Box::leak(Box::new(PcpSet::new(slots)))
}

/// Runs `work` on CPU 0's cache in a thread of its own (then honours any
/// request and lets the cache go) while this thread drains CPU 0; drains
/// once more after both and returns the zone's free frames, sorted.
fn against_a_drain(
    set: &'static PcpSet<'static, 'static>,
    zone: &'static LoomZone,
    mut owner: LocalPcp<'static, 'static>,
    work: impl FnOnce(&mut LocalPcp<'static, 'static>) + Send + 'static,
) -> Vec<u64> {
    let t = thread::spawn(move || {
        work(&mut owner);
        owner.poll(zone);
        drop(owner);
    });
    set.drain_cpu(zone, CpuId(0), None, |_| thread::yield_now())
        .unwrap();
    t.join().unwrap();
    set.drain_cpu(zone, CpuId(0), None, |_| {}).unwrap();
    let mut v = zone.free.lock().unwrap().clone();
    v.sort();
    v
}

/// With a home ([`PcpConfig::with_home`]): a drainer and an owner whose
/// cache holds frames of its home and a foreign free at once; whatever the
/// interleaving, every frame ends up in the zone and the owner keeps
/// working.
#[test]
fn drain_takes_home_and_foreign_frames() {
    builder().check(|| {
        let set = homed_set(2);
        let zone = leak_zone();
        zone.free.lock().unwrap().extend([1, 0]);
        let mut owner = set.claim(CpuId(0)).unwrap();
        let mt = MigrateType::Movable;
        let o0 = Order::new_truncated(0);
        // A refill of two from region 0 (frames 0..4): the home.
        let a = owner.alloc(zone, o0, mt).unwrap();
        let v = against_a_drain(set, zone, owner, move |owner| {
            owner.free(zone, a, o0, mt).unwrap();
            owner.free(zone, Pfn(9), o0, mt).unwrap();
        });
        assert_eq!(v, vec![0, 1, 9]);
    });
}

/// CPU 0's cache with homes of four frames, claimed, after a refill of
/// four movable frames (frames 0..4 of a zone that had just those, the
/// home) that handed out frame 0: the set, the zone, the owner, frame 0.
type HomeOfFour = (
    &'static PcpSet<'static, 'static>,
    &'static LoomZone,
    LocalPcp<'static, 'static>,
    Pfn,
);

fn home_of_four() -> HomeOfFour {
    let set = homed_set(4);
    let zone = leak_zone();
    zone.free.lock().unwrap().extend([3, 2, 1, 0]);
    let mut owner = set.claim(CpuId(0)).unwrap();
    let a = owner
        .alloc(zone, Order::new_truncated(0), MigrateType::Movable)
        .unwrap();
    (set, zone, owner, a)
}

/// A run taken from the home and given back whole while another CPU
/// drains the cache: whatever the interleaving, the run is taken whole or
/// not at all, and every frame ends up in the zone.
#[test]
fn runs_and_a_drain() {
    builder().check(|| {
        let (set, zone, owner, a) = home_of_four();
        let (mt, o0) = (MigrateType::Movable, Order::new_truncated(0));
        let v = against_a_drain(set, zone, owner, move |owner| {
            if let Some(p) = owner.alloc_run(zone, 2, mt) {
                assert_eq!(p, Pfn(1), "the lowest run");
                assert!(owner.free_run(zone, p, 2, mt).is_some());
            }
            owner.free(zone, a, o0, mt).unwrap();
        });
        assert_eq!(v, vec![0, 1, 2, 3]);
    });
}

/// A home hit while another CPU drains the cache: whatever the
/// interleaving, the hit takes a frame the drain did not also give back
/// (it leaves the cache alone once a request is posted, so the owner's
/// next full operation honours the drain), and every frame ends up in the
/// zone or in the owner's hand.
#[test]
fn home_hits_and_a_drain() {
    builder().check(|| {
        let (set, zone, owner, a) = home_of_four();
        let (mt, o0) = (MigrateType::Movable, Order::new_truncated(0));
        let v = against_a_drain(set, zone, owner, move |owner| {
            if let Some(p) = owner.alloc_home_hit(mt) {
                assert_eq!(p, Pfn(1), "the home's lowest frame");
                owner.free(zone, p, o0, mt).unwrap();
            }
            owner.free(zone, a, o0, mt).unwrap();
        });
        assert_eq!(v, vec![0, 1, 2, 3]);
    });
}

/// Home free hits while another CPU drains the cache: a frame of the home
/// goes into it only while no request is posted, the drain then takes it;
/// a foreign frame goes to the foreign list ([`LocalPcp::free_foreign`]);
/// anything else the full free takes. Whatever the interleaving, every
/// frame ends up in the zone.
#[test]
fn home_free_hits_and_a_drain() {
    builder().check(|| {
        let (set, zone, owner, a) = home_of_four();
        let (mt, o0) = (MigrateType::Movable, Order::new_truncated(0));
        let v = against_a_drain(set, zone, owner, move |owner| {
            for f in [a, Pfn(9)] {
                match owner.free_home_hit(zone, f, mt) {
                    HomeFree::Hit => assert_eq!(f, a, "a frame of the home"),
                    HomeFree::Foreign => {
                        assert_eq!(f, Pfn(9), "a frame outside the home");
                        owner.free_foreign(zone, f).unwrap();
                    }
                    HomeFree::Other => {
                        owner.free(zone, f, o0, mt).unwrap();
                    }
                }
            }
        });
        assert_eq!(v, vec![0, 1, 2, 3, 9]);
    });
}
