//! Invariants of the mobility layer on top of the buddy core's.

use pageframe_buddy::{BlockInfo, ValidateError};

use crate::MigrateType;
use crate::zone::MobileZone;

/// The mobility layer's rules are about the pageblock types.
fn bad(rule: &'static str, pfn: Option<pageframe_buddy::Pfn>) -> ValidateError {
    ValidateError {
        structure: "pageblock types",
        rule,
        pfn,
    }
}

impl MobileZone<'_> {
    /// The buddy core's invariants, then: every free block sits on the list
    /// of the type of every pageblock it covers (spec 02 §11.1, isolated
    /// blocks on the isolate list); the highatomic count matches the
    /// highatomic pageblocks and stays within its cap (§11.6).
    pub fn validate(&self) -> Result<(), ValidateError> {
        self.buddy.validate()?;
        let blocks = &self.mobility().blocks;
        for (p, info) in self.buddy.walk(self.span()) {
            if let BlockInfo::Free { head, order, list } = info {
                let mut q = head.max(p);
                while q < head + order.pages() {
                    if blocks.get(q).map(crate::list_of) != Some(list) {
                        return Err(bad(
                            "free block on a list other than its pageblock's type",
                            Some(head),
                        ));
                    }
                    q = q.align_down(blocks.order()) + blocks.pages();
                }
            }
        }
        let by_type = blocks.count_by_type();
        let isolated_highatomic = (0..blocks.len())
            .filter(|&i| {
                let s = blocks.block_start(i);
                blocks.is_isolated(s) && blocks.base(s) == Some(MigrateType::HighAtomic)
            })
            .count() as u64;
        let ha_blocks = by_type[MigrateType::HighAtomic as usize] + isolated_highatomic;
        if self.highatomic_reserved() != ha_blocks * blocks.pages() {
            return Err(bad(
                "highatomic count disagrees with highatomic pageblocks",
                None,
            ));
        }
        if self.highatomic_reserved() > self.highatomic_limit() {
            return Err(bad("highatomic reserve above its cap", None));
        }
        // Each superpageblock counts the pageblocks that taint it (the
        // table's pageblocks run in address order, region by region).
        let spb = blocks.superpageblocks();
        let (mut counts, mut tainted) = ((0usize, 0u32), 0usize);
        let mut check = |(r, c): (usize, u32)| {
            tainted += usize::from(c > 0);
            if spb.count(r) == c {
                Ok(())
            } else {
                Err(bad(
                    "superpageblock taint count disagrees with its pageblocks",
                    Some(spb.range(r).start),
                ))
            }
        };
        for i in 0..blocks.len() {
            let s = blocks.block_start(i);
            let r = spb.index_of(s).unwrap_or(usize::MAX);
            if r != counts.0 {
                check(counts)?;
                counts = (r, 0);
            }
            counts.1 += u32::from(blocks.base(s).is_some_and(crate::superpageblock::taints));
        }
        check(counts)?;
        if spb.tainted() != tainted {
            return Err(bad("tainted superpageblocks miscounted", None));
        }
        Ok(())
    }
}
