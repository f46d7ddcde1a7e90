//! `/proc/buddyinfo` for the whole machine: a line a zone, its free
//! blocks by order.

use core::fmt;

use crate::debug::NoHooks;
use crate::lock::{Platform, SpinLock};
use crate::machine::Machine;

/// A machine's `/proc/buddyinfo`; see [`crate::debug::Inspect::buddyinfo`].
pub struct MachineBuddyInfo<'m, 'a, P: Platform = (SpinLock, NoHooks)>(
    pub(crate) &'m Machine<'a, P>,
);

impl<P: Platform> fmt::Display for MachineBuddyInfo<'_, '_, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for n in self.0.nodes() {
            write!(f, "{}", n.buddyinfo())?;
        }
        Ok(())
    }
}
