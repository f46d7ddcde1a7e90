//! The invariant walk (spec 05 §12), for tests, fuzzers and self-tests.

use crate::cluster::ClusterFlag;
use crate::device::SwapDevice;
use crate::error::ValidateError;
use crate::lists::ListId;
use crate::map::{Digits, MAP_BAD};
use crate::slot::Slot;

impl<'a> SwapDevice<'a> {
    /// Checks every invariant. Takes `&mut self`: it must see a quiescent
    /// device (no operation in flight), so it needs no lock.
    pub fn validate(&mut self) -> Result<(), ValidateError> {
        let cs = self.cs;
        let limit = self.cfg.slots as usize;
        let huge_order = self.cfg.cluster_order;
        let lists = self.lists.get_mut();
        if !lists.check() {
            return Err(ValidateError::BrokenList);
        }
        let mut in_flight = 0;
        let mut attached = 0;
        for (i, cell) in self.clusters.iter().enumerate() {
            let cluster = i as u32;
            // SAFETY-free exclusive access: `&mut self` means no guard exists.
            let g = &mut *cell.0.lock();
            let actual = g.map.iter().filter(|&&b| b != 0).count() as u32;
            if actual != g.count {
                return Err(ValidateError::CountMismatch {
                    cluster,
                    count: g.count,
                    actual,
                });
            }
            let on = lists.list_of(cluster);
            match g.flag {
                ClusterFlag::None => return Err(ValidateError::Orphan { cluster }),
                ClusterFlag::Discard if on == ListId::OFF => in_flight += 1,
                f if on != ListId::for_flag(f, g.order) => {
                    return Err(ValidateError::ListMismatch { cluster });
                }
                _ => {}
            }
            if matches!(g.flag, ClusterFlag::Free | ClusterFlag::Discard)
                && (g.count != 0 || g.order != 0 || g.huge || g.cont.iter().any(|c| c.is_some()))
            {
                return Err(ValidateError::DirtyFree { cluster });
            }
            if (g.flag == ClusterFlag::Full) != (g.count as usize == cs) {
                return Err(ValidateError::FullMismatch { cluster });
            }
            if g.count == 0 && g.flag != ClusterFlag::Free && g.flag != ClusterFlag::Discard {
                return Err(ValidateError::DirtyFree { cluster });
            }
            if g.huge
                && (g.flag != ClusterFlag::Full
                    || g.order != huge_order
                    || g.map.iter().any(|&b| b != g.map[0]))
            {
                return Err(ValidateError::BadHuge { cluster });
            }
            if g.map[..(g.hint as usize).min(cs)].contains(&0)
                || crate::scan::summarize(g.map) != g.summary
            {
                return Err(ValidateError::HintPastFree { cluster });
            }
            attached += g.cont.iter().filter(|c| c.is_some()).count();
            for off in 0..cs {
                let s = i * cs + off;
                let b = g.map[off];
                let must_be_bad = s == 0 || s >= limit;
                if must_be_bad != (b == MAP_BAD) {
                    return Err(ValidateError::BadSlotLost);
                }
                if !(Digits {
                    levels: &mut g.cont,
                    index: off,
                })
                .consistent(b)
                {
                    return Err(ValidateError::Continuation {
                        slot: Slot::new(s as u32),
                    });
                }
            }
        }
        if in_flight != lists.discarding {
            return Err(ValidateError::ListMismatch { cluster: u32::MAX });
        }
        let pool = self.pool.get_mut();
        if attached + pool.available() != pool.total() {
            return Err(ValidateError::PoolLeak);
        }
        Ok(())
    }
}
