//! A block that frees itself: the RAII guard over a [`Block`]. It holds
//! the machine it frees into, so it sits with the machine, above the
//! plain values in `block.rs`.

use core::fmt;

use pageframe_buddy::FreeError;

use crate::block::{Block, Call, Refused};
use crate::debug::NoHooks;
use crate::lock::{Platform, SpinLock};
use crate::machine::Machine;

/// # A block that frees itself
impl<'a, P: Platform> Machine<'a, P> {
    /// A block that frees itself when dropped ([`BlockGuard`]); a block of
    /// another machine is refused.
    pub fn guard(&self, block: Block) -> Result<BlockGuard<'_, 'a, P>, Refused<Block>> {
        if block.machine() != self.id {
            return Err(Refused::by(Call::Guard, block, FreeError::Foreign));
        }
        Ok(BlockGuard::new(self, block))
    }
}

/// A block that frees itself when dropped, for code that wants RAII:
/// scratch buffers, memory held for the length of a call. A kernel's
/// long-lived records keep plain [`Block`]s (they move into and out of its
/// data structures and its migrator); a guard borrows the machine.
///
/// ```
/// # use pageframe::{Gfp, Machine, MachineConfig, NodeId, Order, Pfn, PfnRange, ZoneKind};
/// # let mut m: Box<Machine<'static>> = pageframe::boot::Builder::new(MachineConfig::SINGLE_NODE).build_boxed();
/// # let span = PfnRange::new(Pfn(1 << 20), Pfn((1 << 20) + 4096));
/// # let meta = Box::leak(vec![core::mem::MaybeUninit::uninit(); m.zone_metadata_bytes(span)].into_boxed_slice());
/// # m.add_zone(NodeId::ZERO, ZoneKind::Normal, span, meta).unwrap();
/// # m.add_free_range(span).unwrap();
/// let free = m.inspect().free_pages();
/// {
///     let scratch = m.guard(m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::new(2).unwrap()).unwrap()).unwrap();
///     assert_eq!(scratch.order().pages(), 4);
/// } // freed here
/// assert_eq!(m.inspect().free_pages(), free);
/// ```
pub struct BlockGuard<'m, 'a, P: Platform = (SpinLock, NoHooks)> {
    machine: &'m Machine<'a, P>,
    block: Option<Block>,
}

impl<'m, 'a, P: Platform> BlockGuard<'m, 'a, P> {
    /// Made by [`crate::Machine::guard`], for a block of that machine.
    pub(crate) fn new(machine: &'m Machine<'a, P>, block: Block) -> Self {
        BlockGuard {
            machine,
            block: Some(block),
        }
    }

    /// The block back, no longer freed on drop.
    pub fn into_inner(mut self) -> Block {
        self.block.take().unwrap_or_else(|| unreachable!())
    }
}

impl<P: Platform> core::ops::Deref for BlockGuard<'_, '_, P> {
    type Target = Block;
    fn deref(&self) -> &Block {
        self.block.as_ref().unwrap_or_else(|| unreachable!())
    }
}

impl<P: Platform> Drop for BlockGuard<'_, '_, P> {
    fn drop(&mut self) {
        if let Some(b) = self.block.take() {
            // The guard was made for a block of this machine: the free
            // cannot be refused.
            let _ = self.machine.free(b);
        }
    }
}

impl<P: Platform> fmt::Debug for BlockGuard<'_, '_, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("BlockGuard").field(&self.block).finish()
    }
}
