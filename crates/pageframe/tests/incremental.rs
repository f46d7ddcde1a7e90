//! `boot::Incremental`: memory handed over one range at a time before any
//! zone exists, the machine built over it when first needed, ranges added
//! later onlined or refused.

use std::alloc::Layout;
use std::sync::atomic::{AtomicPtr, Ordering::Relaxed};

use pageframe::boot::{AddError, Incremental, PlanError};
use pageframe::{Gfp, MachineConfig, NodeId, Order, Pfn, PfnRange, PhysAddr};

/// Simulated physical memory: host memory stands for physical memory from
/// 0, 64 MiB for each test (the tests run at once, each machine writing
/// its metadata into its own part).
const PART: u64 = if cfg!(miri) { 1024 } else { 16384 };
const RAM_FRAMES: u64 = 8 * PART;
static BASE: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());

fn virt(pa: PhysAddr) -> *mut u8 {
    assert!(pa.get() < RAM_FRAMES * 4096, "{pa:?} is not simulated RAM");
    // Pointer arithmetic, so the pointer keeps the buffer's provenance.
    BASE.load(Relaxed).wrapping_add(pa.get() as usize)
}

fn ram() {
    if BASE.load(Relaxed).is_null() {
        let l = Layout::from_size_align((RAM_FRAMES * 4096) as usize, 4096).unwrap();
        // SAFETY: a non-zero size; leaked for the test's life.
        let p = unsafe { std::alloc::alloc_zeroed(l) };
        if BASE
            .compare_exchange(std::ptr::null_mut(), p, Relaxed, Relaxed)
            .is_err()
        {
            // Another test won the race: give this copy back.
            // SAFETY: allocated just above with `l`, never shared.
            unsafe { std::alloc::dealloc(p, l) };
        }
    }
}

/// Test `k`'s machine, and its ranges: `r(a, b)` is frames `a..b` of its
/// part of memory.
fn leaked(k: u64) -> (&'static Incremental<8>, impl Fn(u64, u64) -> PfnRange) {
    ram();
    let r = move |a: u64, b: u64| PfnRange::new(Pfn(k * PART + a), Pfn(k * PART + b));
    let inc = Box::leak(Box::new(Incremental::new(
        MachineConfig::SINGLE_NODE,
        r(0, PART),
        virt,
    )));
    (inc, r)
}

/// The ranges OSTD hands over on a small QEMU guest, scaled down: low
/// memory in two pieces, then memory above 1 MiB around the kernel image.
const RANGES: [(u64, u64); 4] = [(0, 8), (9, 0x9f), (0x100, 0x1776), (0x1777, 0x3000)];

#[test]
fn the_machine_is_built_over_the_ranges_gathered_and_hands_out_only_them() {
    let (inc, r) = leaked(1);
    assert!(inc.built().is_none());
    for (a, b) in RANGES {
        // SAFETY: simulated RAM, mapped at `virt`, given up for good.
        unsafe { inc.add(r(a, b)) }.unwrap();
    }
    assert!(inc.built().is_none(), "built before anyone asked");
    let gathered = inc.gathered_frames();
    assert_eq!(gathered, RANGES.iter().map(|(a, b)| b - a).sum::<u64>());
    let m = inc.machine().unwrap();
    assert!(std::ptr::eq(m, inc.built().unwrap()));
    // Everything gathered is managed, less what the build carved (a few
    // dozen frames of metadata and the machine).
    let carved = gathered - m.inspect().managed_pages();
    assert!(carved > 0 && carved < 200, "carved {carved}");
    // Every frame handed out is one that was added.
    let mut got = Vec::new();
    while let Ok(b) = m.alloc(NodeId::ZERO, Gfp::KERNEL | Gfp::MEMALLOC, Order::ZERO) {
        assert!(
            RANGES.iter().any(|&(a, e)| r(a, e).contains(b.pfn())),
            "{:?} was never added",
            b.pfn()
        );
        got.push(b);
    }
    assert_eq!(got.len() as u64, m.inspect().managed_pages());
    for b in got {
        m.free(b).unwrap();
    }
    m.validate().unwrap();
}

#[test]
fn overlaps_and_memory_outside_the_zones_are_refused_with_nothing_taken() {
    let (inc, r) = leaked(2);
    // SAFETY: every `add` here hands over simulated RAM for good, or a
    // range the call refuses.
    unsafe {
        inc.add(r(0x100, 0x2000)).unwrap();
        assert_eq!(
            inc.add(r(0x1fff, 0x2100)),
            Err(AddError::Overlap(r(0x1fff, 0x2100)))
        );
        assert_eq!(
            inc.add(r(0x1000, 0x1001)),
            Err(AddError::Overlap(r(0x1000, 0x1001)))
        );
        inc.add(r(0x2000, 0x2001)).unwrap(); // adjacent is fine
    }
    let m = inc.machine().unwrap();
    let managed = m.inspect().managed_pages();
    // SAFETY: as above.
    unsafe {
        // A hole inside the zone's span (0x100..0x2001): still refused,
        // it is not one.
        assert!(matches!(
            inc.add(r(0x2001, 0x2100)),
            Err(AddError::NotCovered(_))
        ));
        assert!(matches!(
            inc.add(r(0x10, 0x20)),
            Err(AddError::NotCovered(_))
        ));
        assert_eq!(
            inc.add(r(0x1800, 0x1801)),
            Err(AddError::Overlap(r(0x1800, 0x1801)))
        );
    }
    assert_eq!(m.inspect().managed_pages(), managed);
    m.validate().unwrap();
}

#[test]
fn memory_added_after_the_build_inside_a_zone_is_onlined() {
    let (inc, r) = leaked(3);
    // SAFETY: simulated RAM given up for good.
    unsafe {
        inc.add(r(0x100, 0x1000)).unwrap();
        inc.add(r(0x2000, 0x3000)).unwrap();
    }
    let m = inc.machine().unwrap();
    let managed = m.inspect().managed_pages();
    // The hole between the two ranges lies inside the zone's span.
    // SAFETY: as above.
    unsafe { inc.add(r(0x1000, 0x2000)) }.unwrap();
    assert_eq!(m.inspect().managed_pages(), managed + 0x1000);
    // SAFETY: handed over twice: refused.
    let again = unsafe { inc.add(r(0x1800, 0x1900)) };
    assert_eq!(again, Err(AddError::Overlap(r(0x1800, 0x1900))));
    // Everything merges: an order-10 block from the onlined middle exists.
    let b = m
        .alloc(NodeId::ZERO, Gfp::KERNEL, Order::new(10).unwrap())
        .unwrap();
    m.free(b).unwrap();
    m.validate().unwrap();
}

#[test]
fn asking_before_any_memory_fails_and_can_be_asked_again() {
    let (inc, r) = leaked(4);
    assert_eq!(inc.machine().err(), Some(PlanError::NoMemory));
    // SAFETY: simulated RAM given up for good.
    unsafe { inc.add(r(0x100, 0x800)) }.unwrap();
    assert!(inc.machine().is_ok());
}

#[test]
fn more_disjoint_ranges_than_gathered_are_refused() {
    let (inc, r) = leaked(5);
    for i in 0..8 {
        // SAFETY: simulated RAM given up for good.
        unsafe { inc.add(r(0x100 + 2 * i, 0x101 + 2 * i)) }.unwrap();
    }
    // SAFETY: a range the call refuses.
    let refused = unsafe { inc.add(r(0x200, 0x201)) };
    assert_eq!(refused, Err(AddError::TooManyRanges));
    // Adjacent to one gathered: merges, no new range needed.
    // SAFETY: simulated RAM given up for good.
    unsafe { inc.add(r(0x10f, 0x1000)) }.unwrap();
}

#[test]
fn cpus_asking_at_once_get_the_one_machine() {
    let (inc, r) = leaked(6);
    // SAFETY: simulated RAM given up for good.
    unsafe { inc.add(r(0x100, 0x3000)) }.unwrap();
    let ptrs: Vec<usize> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|_| s.spawn(|| std::ptr::from_ref(inc.machine().unwrap()) as usize))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(ptrs.windows(2).all(|w| w[0] == w[1]));
}

/// Also run under Miri: the machine, its metadata and the caches' memory
/// written through `virt`'s raw pointers.
#[test]
fn miri_per_cpu_caches_are_set_up_at_the_build_from_the_machine_itself() {
    ram();
    let k = 7;
    let r = move |a: u64, b: u64| PfnRange::new(Pfn(k * PART + a), Pfn(k * PART + b));
    fn two() -> u32 {
        2
    }
    let inc: &'static Incremental<8> = Box::leak(Box::new(
        Incremental::new(MachineConfig::SINGLE_NODE, r(0, PART), virt).with_pcp(two),
    ));
    // SAFETY: simulated RAM given up for good.
    unsafe { inc.add(r(0x100, PART.min(0x3000))) }.unwrap();
    let m = inc.machine().unwrap();
    assert_eq!(m.inspect().pcp_cpus(), 2);
    // The caches' memory is allocated from the machine, for good.
    assert!(m.inspect().free_pages() < m.inspect().managed_pages());
    let b = m
        .alloc_on(pageframe::CpuId(1), NodeId::ZERO, Gfp::KERNEL, Order::ZERO)
        .unwrap();
    m.free_on(pageframe::CpuId(1), b).unwrap();
    m.validate().unwrap();
}

#[test]
fn memory_beyond_the_address_width_is_refused_at_the_door() {
    let (inc, r) = leaked(0);
    let limit = MachineConfig::SINGLE_NODE.pfn_limit();
    let beyond = [
        PfnRange::new(limit, limit + 16),
        PfnRange::new(Pfn(limit.get() - 1), limit + 1),
        PfnRange::new(Pfn(1 << 48), Pfn(u64::MAX)),
    ];
    // SAFETY: simulated RAM given up for good, or ranges the call refuses.
    unsafe {
        inc.add(r(0x100, 0x2000)).unwrap();
        for far in beyond {
            assert_eq!(
                inc.add(far),
                Err(AddError::AddressWidth {
                    pfn: far.start.max(limit)
                }),
                "{far:?} before the build"
            );
        }
    }
    assert_eq!(inc.gathered_frames(), 0x1f00, "nothing taken");
    // The machine is built over what was taken...
    let m = inc.machine().unwrap();
    let b = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO).unwrap();
    m.free(b).unwrap();
    // ...and refuses the same after the build.
    let managed = m.inspect().managed_pages();
    for far in beyond {
        // SAFETY: refused.
        let after = unsafe { inc.add(far) };
        assert_eq!(
            after,
            Err(AddError::AddressWidth {
                pfn: far.start.max(limit)
            }),
            "{far:?} after the build"
        );
    }
    assert_eq!(m.inspect().managed_pages(), managed);
    m.validate().unwrap();
}
