//! Who holds each block (Linux's `page_owner`, feature `page-owner`): every
//! allocation (a block, a contiguous range, a CMA buffer) records its
//! caller's tag, the call site and an allocation sequence number; the
//! record follows the block when it is split or migrated and stays after
//! it is freed (the last owner, for use-after-free reports). A range is
//! held as the blocks that tile it, each with the range's record.
//!
//! The tag is the kernel's ([`crate::Machine::alloc_tagged`]: a task id, a
//! subsystem, a return address) or, for the untagged entry points, the
//! call site's address; the call site itself (file and line, through
//! `#[track_caller]`) is kept either way. Each frame of a block gets the
//! record (as in Linux, an allocation of order `k` writes `2^k` of them).
//! Records take 24 bytes a frame of each zone's span, inside the zone's
//! metadata ([`crate::Machine::zone_metadata_bytes`] counts them).
//!
//! ```
//! # use pageframe::{Gfp, Machine, MachineConfig, NodeId, Order, Pfn, PfnRange, ZoneKind};
//! # let mut m: Box<Machine<'static>> = pageframe::boot::Builder::new(MachineConfig::SINGLE_NODE).build_boxed();
//! # let span = PfnRange::new(Pfn(0x10_0000), Pfn(0x10_4000));
//! # let meta = Box::leak(vec![core::mem::MaybeUninit::uninit(); m.zone_metadata_bytes(span)].into_boxed_slice());
//! # m.add_zone(NodeId::ZERO, ZoneKind::Normal, span, meta).unwrap();
//! # m.add_free_range(span).unwrap();
//! let since = m.inspect().owner_seq();
//! let a = m.alloc_tagged(NodeId::ZERO, Gfp::KERNEL, Order::new(2).unwrap(), 0xd15c).unwrap();
//! let b = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO).unwrap(); // never freed: a leak
//! // Who holds the third frame of `a`?
//! let held = m.inspect().owner_of(a.pfn() + 2).unwrap();
//! assert_eq!((held.pfn, held.owner.tag, held.live), (a.pfn(), 0xd15c, true));
//! m.free(a).unwrap();
//! // What is still held of what was allocated since `since`: the leak, and
//! // where in the source it was allocated.
//! let mut leaks = Vec::new();
//! m.inspect().for_each_owned(|o| if o.owner.seq >= since { leaks.push(o) });
//! assert_eq!(leaks.len(), 1);
//! assert_eq!(leaks[0].owner.site.unwrap().file(), file!());
//! # let _ = b;
//! ```

use core::fmt;
use core::panic::Location;

use pageframe_buddy::{Order, Pfn};

use crate::block::Block;
use crate::debug::Caller;
use crate::error::AllocError;
use crate::frame_state::State;
use crate::gfp::Gfp;
use crate::lock::Platform;
use crate::machine::Machine;
use crate::node_id::NodeId;

pub use super::owner_record::{OwnedBlock, Owner};

/// The allocation the kernel tags, and the reads of the records.
impl<P: Platform> Machine<'_, P> {
    /// [`Machine::alloc`] recording `tag` as the block's owner
    /// ([`crate::debug::owner`], feature `page-owner`).
    #[track_caller]
    pub fn alloc_tagged(
        &self,
        node: NodeId,
        gfp: Gfp,
        order: Order,
        tag: u64,
    ) -> Result<Block, AllocError> {
        self.traced(node, gfp, order, None, Caller::tagged(tag), || {
            self.alloc_fast(node, gfp, order, None)
        })
    }

    /// See [`crate::debug::Inspect::owner_of`].
    pub(crate) fn owner_of(&self, pfn: Pfn) -> Option<OwnedBlock> {
        let z = self.zone_of(pfn)?;
        let max = z.inspect(|mz| mz.buddy().max_order());
        for k in 0..=max.get() {
            let order = Order::new_truncated(k);
            let head = pfn.align_down(order);
            if !z.span().contains(head) {
                break;
            }
            if let State::Allocated(o, _) | State::Isolated(o) = z.states.get(head)
                && o == order
            {
                return Some(OwnedBlock {
                    pfn: head,
                    order,
                    owner: z.owners.get(head)?,
                    live: true,
                });
            }
        }
        let (pfn, order, owner) = z.owners.last_holder(pfn)?;
        Some(OwnedBlock {
            pfn,
            order,
            owner,
            live: false,
        })
    }

    /// See [`crate::debug::Inspect::for_each_owned`].
    pub(crate) fn for_each_owned(&self, mut f: impl FnMut(OwnedBlock)) {
        for z in self.all_zones() {
            let mut p = z.span().start;
            while p < z.span().end {
                let step = match z.states.get(p) {
                    State::Allocated(order, _) | State::Isolated(order) => {
                        if let Some(owner) = z.owners.get(p) {
                            f(OwnedBlock {
                                pfn: p,
                                order,
                                owner,
                                live: true,
                            });
                        }
                        order.pages()
                    }
                    _ => 1,
                };
                p = p + step;
            }
        }
    }
}

/// At most this many owners in a [`OwnerDump`]; the rest are summed in one
/// line.
pub const DUMP_GROUPS: usize = 64;

/// Live blocks grouped by owner tag; see [`crate::debug::Inspect::page_owners`].
pub struct OwnerDump<'m, 'a, P: Platform>(pub(crate) &'m Machine<'a, P>);

#[derive(Clone, Copy)]
struct Group {
    tag: u64,
    site: Option<&'static Location<'static>>,
    blocks: u64,
    pages: u64,
    oldest: u64,
}

impl<P: Platform> fmt::Display for OwnerDump<'_, '_, P> {
    /// One line an owner, most pages first: pages, blocks, the oldest
    /// allocation's sequence number, the tag and the call site.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut groups = [None::<Group>; DUMP_GROUPS];
        let (mut other_blocks, mut other_pages) = (0u64, 0u64);
        self.0.for_each_owned(|b| {
            let pages = b.order.pages();
            let slot = groups
                .iter_mut()
                .find(|g| g.is_none_or(|g| g.tag == b.owner.tag));
            match slot {
                Some(Some(g)) => {
                    g.blocks += 1;
                    g.pages += pages;
                    g.oldest = g.oldest.min(b.owner.seq);
                }
                Some(slot) => {
                    *slot = Some(Group {
                        tag: b.owner.tag,
                        site: b.owner.site,
                        blocks: 1,
                        pages,
                        oldest: b.owner.seq,
                    })
                }
                None => {
                    other_blocks += 1;
                    other_pages += pages;
                }
            }
        });
        let mut list: [Group; DUMP_GROUPS] = [Group {
            tag: 0,
            site: None,
            blocks: 0,
            pages: 0,
            oldest: 0,
        }; DUMP_GROUPS];
        let mut n = 0;
        for g in groups.into_iter().flatten() {
            list[n] = g;
            n += 1;
        }
        let list = &mut list[..n];
        list.sort_unstable_by(|a, b| b.pages.cmp(&a.pages).then(a.oldest.cmp(&b.oldest)));
        writeln!(
            f,
            "{:>10} {:>8} {:>10}  {:<18}  site",
            "pages", "blocks", "oldest", "tag"
        )?;
        for g in list.iter() {
            write!(
                f,
                "{:>10} {:>8} {:>10}  {:#018x}  ",
                g.pages, g.blocks, g.oldest, g.tag
            )?;
            match g.site {
                Some(l) => writeln!(f, "{}:{}", l.file(), l.line())?,
                None => writeln!(f, "?")?,
            }
        }
        if other_blocks > 0 {
            writeln!(
                f,
                "{other_pages:>10} {other_blocks:>8} {:>10}  (other owners)",
                ""
            )?;
        }
        Ok(())
    }
}
