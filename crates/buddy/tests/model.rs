//! Property tests: random operation sequences against a reference model that
//! knows, frame by frame, what is a hole, free or allocated.

mod common;

use common::{config, meta, o};
use pageframe_buddy::{
    AllocError, BuddyZone, FreeError, ListId, Order, Pfn, PfnRange, RangeError, SingleList,
};
use proptest::prelude::*;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum F {
    Hole,
    Free,
    /// Allocated; `true` on a block head.
    Used(bool),
}

#[derive(Clone, Debug)]
enum Op {
    Alloc(u8),
    /// Free the n-th live block (modulo their number).
    Free(usize),
    /// Free an arbitrary frame with an arbitrary order: usually bad input.
    FreeAny(u64, u8),
    AllocAt(u64, u8),
    Reserve(u64, u64),
    /// Release the n-th reserved range.
    Release(usize),
}

struct Model {
    base: u64,
    frames: Vec<F>,
    /// Live blocks by head: order.
    live: std::collections::BTreeMap<u64, u8>,
    reserved: Vec<(u64, u64)>,
}

impl Model {
    fn at(&self, p: u64) -> F {
        self.frames[(p - self.base) as usize]
    }
    fn all_free(&self, a: u64, b: u64) -> bool {
        (a..b).all(|p| self.at(p) == F::Free)
    }
    fn set(&mut self, a: u64, b: u64, f: F) {
        for p in a..b {
            self.frames[(p - self.base) as usize] = f;
        }
    }
    fn take(&mut self, p: u64, k: u8) {
        self.set(p, p + (1 << k), F::Used(false));
        self.frames[(p - self.base) as usize] = F::Used(true);
        self.live.insert(p, k);
    }
    fn free_count(&self) -> u64 {
        self.frames.iter().filter(|f| **f == F::Free).count() as u64
    }
    fn fits(&self, k: u8, span: PfnRange) -> bool {
        let n = 1u64 << k;
        let first = span.start.get().div_ceil(n) * n;
        (first..span.end.get())
            .step_by(n as usize)
            .any(|p| p + n <= span.end.get() && self.all_free(p, p + n))
    }
}

fn scenario() -> impl Strategy<Value = (u8, u64, u64, Vec<(u64, u64)>, Vec<Op>)> {
    (
        prop_oneof![Just(3u8), Just(5u8), Just(10u8)],
        0u64..5000,
        64u64..3000,
    )
        .prop_flat_map(|(max, start, len)| {
            let ranges = prop::collection::vec((0..len, 1..len), 1..4);
            let op = prop_oneof![
                4 => (0..=max + 1).prop_map(Op::Alloc),
                4 => any::<usize>().prop_map(Op::Free),
                1 => (0..len + 8, 0..=max + 1).prop_map(move |(p, k)| Op::FreeAny(start + p, k)),
                1 => (0..len + 8, 0..=max).prop_map(move |(p, k)| Op::AllocAt(start + p, k)),
                1 => (0..len + 8, 1u64..200).prop_map(move |(p, n)| Op::Reserve(start + p, n)),
                1 => any::<usize>().prop_map(Op::Release),
            ];
            (
                Just(max),
                Just(start),
                Just(len),
                ranges,
                prop::collection::vec(op, 1..120),
            )
        })
}

fn cases() -> ProptestConfig {
    ProptestConfig {
        cases: if cfg!(miri) { 3 } else { 256 },
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(cases())]

    #[test]
    fn buddy_matches_model((max, start, len, ranges, ops) in scenario()) {
        let span = PfnRange::new(Pfn(start), Pfn(start + len));
        let mut m = meta(span, max);
        let mut z = BuddyZone::new(span, config(max), &mut m, SingleList).unwrap();
        let mut model = Model { base: start, frames: vec![F::Hole; len as usize], live: Default::default(), reserved: vec![] };
        for (a, n) in ranges {
            let r = PfnRange::new(Pfn(start + a), Pfn((start + a + n).min(start + len)));
            let clash = (r.start.get()..r.end.get()).find(|&p| model.at(p) != F::Hole);
            match z.add_free_range(r) {
                Ok(()) => { prop_assert!(clash.is_none()); model.set(r.start.get(), r.end.get(), F::Free); }
                Err(RangeError::Overlap { pfn }) => prop_assert_eq!(Some(pfn.get()), clash),
                Err(e) => prop_assert!(r.is_empty() && e == RangeError::Empty, "{e:?}"),
            }
        }
        z.validate().unwrap();
        prop_assert_eq!(z.free_pages(), model.free_count());

        for op in ops {
            match op {
                Op::Alloc(k) => {
                    let res = z.alloc(Order::new(k).unwrap(), ListId::DEFAULT);
                    if k > max { prop_assert_eq!(res, Err(AllocError::OrderTooLarge)); continue; }
                    let possible = model.fits(k, span);
                    match res {
                        Ok(p) => {
                            prop_assert!(possible);
                            prop_assert!(p.is_aligned(o(k)));
                            prop_assert!(model.all_free(p.get(), p.get() + (1 << k)), "handed out a busy frame");
                            model.take(p.get(), k);
                        }
                        Err(e) => { prop_assert_eq!(e, AllocError::OutOfMemory); prop_assert!(!possible, "refused although a block fits"); }
                    }
                }
                Op::Free(n) => {
                    if model.live.is_empty() { continue; }
                    let (&p, &k) = model.live.iter().nth(n % model.live.len()).unwrap();
                    z.free(Pfn(p), o(k)).unwrap();
                    model.live.remove(&p);
                    model.set(p, p + (1 << k), F::Free);
                    model.reserved.retain(|&(a, b)| !(a <= p && p < b));
                }
                Op::FreeAny(p, k) => {
                    let before = (z.free_pages(), z.stats());
                    let res = z.free(Pfn(p), Order::new(k).unwrap());
                    let valid = model.live.get(&p) == Some(&k);
                    if valid {
                        prop_assert_eq!(res, Ok(()));
                        model.live.remove(&p);
                        model.set(p, p + (1 << k), F::Free);
                        model.reserved.retain(|&(a, b)| !(a <= p && p < b));
                    } else {
                        let e = res.unwrap_err();
                        prop_assert_eq!((z.free_pages(), z.stats()), before);
                        let expect_kind = if k > max { FreeError::OrderTooLarge }
                            else if !span.contains(Pfn(p)) { FreeError::OutOfRange }
                            else if p % (1 << k) != 0 { FreeError::Misaligned }
                            else { match model.at(p) { F::Hole => FreeError::Hole, F::Free => FreeError::AlreadyFree, _ => e } };
                        prop_assert_eq!(e, expect_kind);
                        if let FreeError::NotBlockHead { head, order } = e {
                            prop_assert_eq!(model.live.get(&head.get()), Some(&order.get()));
                            prop_assert!(head.get() < p && p < head.get() + (1 << order.get()));
                        }
                        if let FreeError::WrongOrder { allocated } = e {
                            prop_assert_eq!(model.live.get(&p), Some(&allocated.get()));
                        }
                    }
                }
                Op::AllocAt(p, k) => {
                    let end = p + (1 << k);
                    let ok = span.contains(Pfn(p)) && end <= span.end.get() && p % (1 << k) == 0 && model.all_free(p, end);
                    let res = z.alloc_at(Pfn(p), o(k));
                    prop_assert_eq!(res.is_ok(), ok, "{:?}", res);
                    if ok { model.take(p, k); }
                }
                Op::Reserve(a, n) => {
                    let b = (a + n).min(span.end.get());
                    let ok = a < b && span.contains(Pfn(a)) && model.all_free(a, b);
                    let res = z.reserve_range(PfnRange::new(Pfn(a), Pfn(b)));
                    prop_assert_eq!(res.is_ok(), ok, "{:?}", res);
                    if ok {
                        let mut p = a;
                        while p < b {
                            let Some(pageframe_buddy::BlockInfo::Allocated { head, order }) = z.block_at(Pfn(p)) else { panic!("not allocated") };
                            prop_assert_eq!(head.get(), p);
                            model.take(p, order.get());
                            p += order.pages();
                        }
                        prop_assert_eq!(p, b);
                        model.reserved.push((a, b));
                    }
                }
                Op::Release(n) => {
                    if model.reserved.is_empty() { continue; }
                    let (a, b) = model.reserved.remove(n % model.reserved.len());
                    z.release_range(PfnRange::new(Pfn(a), Pfn(b))).unwrap();
                    model.live.retain(|&p, _| !(a <= p && p < b));
                    model.set(a, b, F::Free);
                }
            }
            z.validate().map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
            prop_assert_eq!(z.free_pages(), model.free_count());
        }

        // Free everything: the zone must be back to maximal blocks (runs of
        // usable frames tiled by the largest aligned blocks).
        for (&p, &k) in &model.live {
            z.free(Pfn(p), o(k)).unwrap();
        }
        z.validate().unwrap();
        let mut want = vec![0u64; max as usize + 1];
        let mut p = start;
        while p < start + len {
            if model.at(p) == F::Hole { p += 1; continue; }
            let q = (p..start + len).find(|&q| model.at(q) == F::Hole).unwrap_or(start + len);
            for (_, k) in PfnRange::new(Pfn(p), Pfn(q)).blocks(o(max)) { want[k.get() as usize] += 1; }
            p = q;
        }
        let got: Vec<u64> = (0..=max).map(|k| z.free_blocks(o(k))).collect();
        prop_assert_eq!(got, want);
    }
}
