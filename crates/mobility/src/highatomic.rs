//! The highatomic reserve: about 1% of a zone kept for high-order atomic
//! requests (spec 02 §7).

use pageframe_buddy::{Order, Pfn, PfnRange};

use crate::migratetype::list_of;
use crate::zone::MobileZone;
use crate::{MigrateType, Placement};

impl MobileZone<'_> {
    /// The reserve's cap: `managed / 100` rounded up to whole pageblocks, 0
    /// for zones too small to spare a block per hundred.
    pub fn highatomic_limit(&self) -> u64 {
        let pb = self.mobility().blocks.pages();
        let raw = self.buddy.managed_pages() / 100;
        if raw < pb { 0 } else { raw.div_ceil(pb) * pb }
    }

    /// Frames currently in highatomic pageblocks.
    pub fn highatomic_reserved(&self) -> u64 {
        self.mobility().reserved_highatomic
    }

    /// After a successful high-order atomic allocation at `pfn` of `order`,
    /// turn its pageblock into reserve if the cap allows
    /// (`reserve_highatomic_pageblock`). Returns whether it did.
    pub fn reserve_highatomic(&mut self, pfn: Pfn, order: Order) -> bool {
        if !self.span().contains(pfn) {
            return false;
        }
        let pb = self.pageblock_order();
        let limit = self.highatomic_limit();
        // spec 02 §7 checks `reserved >= limit` only, so a block above a
        // pageblock could take the reserve past its cap; §11.6 says it never
        // is, so a reservation that would cross the cap is not made.
        let adds = order.max(pb).pages();
        if limit == 0 || self.highatomic_reserved() + adds > limit {
            return false;
        }
        let t = self.mobility().blocks.get(pfn);
        if !t.is_some_and(MigrateType::is_mergeable) {
            return false;
        }
        // The reserve is memory kept for what cannot move: it grows only
        // where such memory is already (see `Placement::Superpageblock`).
        if self.mobility().placement == Placement::Superpageblock
            && self.mobility().grouping
            && !self.mobility().blocks.superpageblocks().is_tainted_at(pfn)
        {
            return false;
        }
        let block = self.mobility().blocks.block_range(pfn);
        if order < pb {
            if !self.span().contains_range(&block) {
                return false;
            }
            self.move_block_free_lists(block.start, MigrateType::HighAtomic);
            self.buddy.policy_mut().reserved_highatomic += pb.pages();
        } else {
            self.retype_span(
                PfnRange::new(pfn, pfn + order.pages()),
                MigrateType::HighAtomic,
            );
            self.buddy.policy_mut().reserved_highatomic += order.pages();
        }
        self.buddy.policy_mut().stats.highatomic_reserved += 1;
        true
    }

    /// Gives one reserved pageblock back, to the type `requester` asked for
    /// (`unreserve_highatomic_pageblock`). Unless `force`, the last reserved
    /// block is kept. Returns whether a block was given back.
    pub fn unreserve_highatomic(&mut self, requester: MigrateType, force: bool) -> bool {
        let pb = self.pageblock_order();
        let reserved = self.highatomic_reserved();
        if reserved == 0 || (!force && reserved <= pb.pages()) || !requester.is_mergeable() {
            return false;
        }
        for o in 0..=self.buddy.max_order().get() {
            let Some(order) = Order::new(o) else { break };
            let Some(head) = self
                .buddy
                .first_free(order, list_of(MigrateType::HighAtomic))
            else {
                continue;
            };
            let size = order.pages().max(pb.pages());
            self.buddy.policy_mut().reserved_highatomic -= size.min(reserved);
            if order >= pb {
                self.retype_span(PfnRange::new(head, head + order.pages()), requester);
                self.buddy.move_free_block(head, list_of(requester));
            } else {
                self.move_block_free_lists(head.align_down(pb), requester);
            }
            self.buddy.policy_mut().stats.highatomic_unreserved += 1;
            return true;
        }
        false
    }
}
