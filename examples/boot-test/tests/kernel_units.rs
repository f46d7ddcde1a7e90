//! Host unit tests of the kernel's hardware-free modules. The kernel builds
//! only for x86_64-unknown-none, so its pure logic (range sets, command
//! line, permutation) is compiled here from its sources (the command line
//! by the harness, which budgets boots with it).

#[path = "../../kernel/src/memmap.rs"]
#[allow(dead_code)]
mod memmap;
#[path = "../../kernel/src/permutation.rs"]
#[allow(dead_code)]
mod permutation;

use memmap::{CapacityError, E820Entry, MemoryMap, PhysRange, RangeSet};
use pageframe_boot_test::cmdline::{CmdlineError, DEFAULT_SEED, Modes, parse};
use permutation::Permutation;

fn set(ranges: &[(u64, u64)]) -> RangeSet {
    let mut s = RangeSet::new();
    for &(a, b) in ranges {
        s.insert(PhysRange::new(a, b)).unwrap();
    }
    s
}

fn pairs(s: &RangeSet) -> Vec<(u64, u64)> {
    s.ranges().map(|r| (r.start, r.end)).collect()
}

#[test]
fn insert_merges_overlapping_and_adjacent_ranges() {
    let s = set(&[
        (0x5000, 0x6000),
        (0x1000, 0x2000),
        (0x2000, 0x3000),
        (0x2800, 0x5800),
    ]);
    assert_eq!(pairs(&s), [(0x1000, 0x6000)]);
    let s = set(&[(0x8000, 0x9000), (0x1000, 0x2000), (0x4000, 0x5000)]);
    assert_eq!(
        pairs(&s),
        [(0x1000, 0x2000), (0x4000, 0x5000), (0x8000, 0x9000)]
    );
}

#[test]
fn remove_splits_and_trims() {
    let mut s = set(&[(0, 0x10000), (0x20000, 0x30000)]);
    s.remove(PhysRange::new(0x4000, 0x5000)).unwrap();
    s.remove(PhysRange::new(0xf000, 0x21000)).unwrap();
    assert_eq!(
        pairs(&s),
        [(0, 0x4000), (0x5000, 0xf000), (0x21000, 0x30000)]
    );
    assert!(!s.contains(0x4fff) && s.contains(0x5000) && !s.contains(0x30000));
}

#[test]
fn full_set_refuses_and_stays_unchanged() {
    // Three-page ranges, a page apart, until the set is full.
    let mut s = RangeSet::new();
    let mut i = 0;
    while s
        .insert(PhysRange::new(i * 0x4000, i * 0x4000 + 0x3000))
        .is_ok()
    {
        i += 1;
    }
    let before = pairs(&s);
    assert_eq!(
        s.insert(PhysRange::new(i * 0x4000, i * 0x4000 + 0x1000)),
        Err(CapacityError)
    );
    // Splitting a range (its middle page out) would need one more slot.
    assert_eq!(s.remove(PhysRange::new(0x1000, 0x2000)), Err(CapacityError));
    assert_eq!(pairs(&s), before);
    // A sub-page range takes its whole page; trimming needs no slot.
    s.remove(PhysRange::new(0x2400, 0x2800)).unwrap();
    assert_eq!(pairs(&s)[0], (0, 0x2000));
    // Merging needs none.
    s.insert(PhysRange::new(0x2000, 0x4000)).unwrap();
    assert_eq!(s.ranges().len(), before.len() - 1);
}

#[test]
fn memory_map_ram_is_whole_pages_of_usable_entries() {
    let mut m = MemoryMap::new();
    for (addr, size, kind) in [
        (0, 0x9fc00, 1),
        (0x9fc00, 0x400, 2),
        (0x10_0000, 0x7fed_f000, 1),
    ] {
        m.push(E820Entry { addr, size, kind }).unwrap();
    }
    assert_eq!(
        pairs(&m.ram().unwrap()),
        [(0, 0x9f000), (0x10_0000, 0x7ffd_f000)]
    );
    assert_eq!(m.ram_bytes(), 0x9fc00 + 0x7fed_f000);
}

#[test]
fn command_line_selects_modes_and_seed() {
    assert_eq!(parse("").unwrap().modes, Modes::DEFAULT);
    assert_eq!(parse("").unwrap().seed, DEFAULT_SEED);
    let o = parse("  bench   seed=0x2a ").unwrap();
    assert_eq!((o.modes, o.seed), (Modes::BENCH, 42));
    assert_eq!(
        parse("selftest bench seed=7").unwrap().modes,
        Modes::SELFTEST | Modes::BENCH
    );
    assert_eq!(
        parse("selftest bogus"),
        Err(CmdlineError::UnknownWord("bogus"))
    );
    assert_eq!(parse("seed=0xzz"), Err(CmdlineError::BadSeed("0xzz")));
    assert_eq!(
        parse("migrate unmovable thp-swap smp").unwrap().modes,
        Modes::MIGRATE | Modes::UNMOVABLE | Modes::THP_SWAP | Modes::SMP
    );
    // Words match whole: a prefix of a mode is not that mode.
    assert_eq!(parse("thp-swa"), Err(CmdlineError::UnknownWord("thp-swa")));
}

#[test]
fn permutation_visits_each_value_once() {
    for n in [1u64, 2, 3, 5, 64, 1000, 4097] {
        let mut seen: Vec<u64> = Permutation::new(n, 9).iter().collect();
        assert_eq!(seen.len() as u64, n);
        seen.sort_unstable();
        assert!(seen.iter().copied().eq(0..n), "n = {n}");
    }
}

#[test]
fn permutation_depends_on_the_seed_and_shuffles() {
    let a: Vec<u64> = Permutation::new(10_000, 1).iter().collect();
    let b: Vec<u64> = Permutation::new(10_000, 2).iter().collect();
    assert_ne!(a, b);
    let in_place = a
        .iter()
        .enumerate()
        .filter(|&(i, &v)| i as u64 == v)
        .count();
    assert!(in_place < 100, "{in_place} values in place");
}
