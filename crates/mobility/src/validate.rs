//! Invariants of the mobility layer on top of the buddy core's.

use pageframe_buddy::{BlockInfo, PfnRange, ValidateError};

use crate::MigrateType;
use crate::zone::MobileZone;

fn bad(rule: &'static str, pfn: Option<pageframe_buddy::Pfn>) -> ValidateError {
    ValidateError { rule, pfn }
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
        if self.mobility().placement {
            for i in 0..blocks.len() {
                let start = blocks.block_start(i);
                let mut used = 0u64;
                for (p, info) in self
                    .buddy
                    .walk(PfnRange::new(start, start + blocks.pages()))
                {
                    if let BlockInfo::Allocated { head, order, .. } = info {
                        let end = (head + order.pages()).min(start + blocks.pages());
                        let mut q = p.max(start);
                        while q < end {
                            if !blocks.marked(i, q).1 {
                                return Err(bad(
                                    "allocated frame not marked in its pageblock's bitmap",
                                    Some(q),
                                ));
                            }
                            q = q + 1;
                        }
                        used += end - p.max(start);
                    }
                }
                if u64::from(blocks.marked(i, start).0) != used {
                    return Err(bad(
                        "pageblock bitmap marks frames that are not allocated",
                        Some(start),
                    ));
                }
                if used != u64::from(blocks.used(start)) {
                    return Err(bad(
                        "pageblock allocated-frame count disagrees with its blocks",
                        Some(start),
                    ));
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
        Ok(())
    }
}
