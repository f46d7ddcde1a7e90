//! The one way to make a [`Machine`]: a [`Builder`] says what it is (the
//! [`MachineConfig`]), which lock its zones take and which hooks it
//! reports to, and then writes it where the kernel wants it: into memory
//! the caller owns ([`Builder::build_in`]), into a box on a host
//! ([`Builder::build_boxed`]), or into frames a [`Plan`] carved from RAM
//! ([`Plan::build`]).
//!
//! ```
//! use core::mem::MaybeUninit;
//! use pageframe::boot::Builder;
//! use pageframe::lock::SpinLock;
//! use pageframe::{Machine, MachineConfig};
//!
//! // A static, or memory carved from RAM.
//! let slot: &'static mut MaybeUninit<Machine<'static>> = Box::leak(Box::new_uninit());
//! let m = Builder::new(MachineConfig::SINGLE_NODE).build_in(slot);
//! assert_eq!(m.inspect().managed_pages(), 0); // no zones yet: add them
//!
//! // Another lock (one that disables interrupts, say) and the kernel's hooks.
//! let b = Builder::new(MachineConfig::SINGLE_NODE)
//!     .lock::<SpinLock>()
//!     .hooks(pageframe::debug::NoHooks);
//! let _boxed: Box<Machine<'static>> = b.build_boxed();
//! ```

use core::marker::PhantomData;
use core::mem::MaybeUninit;

use crate::debug::{Hooks, NoHooks};
use crate::lock::{Platform, RawMutex, SpinLock};
use crate::machine::{Machine, MachineConfig};

#[cfg(doc)]
use super::Plan;

/// What a machine is before it exists: its configuration and its
/// [`Platform`] `P`: the lock its zones take ([`crate::lock`]) and the
/// hooks it reports to ([`crate::debug`]). Start from [`Builder::new`]
/// (the default lock, no hooks), change either, then build.
pub struct Builder<P: Platform = (SpinLock, NoHooks)> {
    config: MachineConfig,
    hooks: P::Hooks,
    /// The lock is a type only: no value of it is held here.
    lock: PhantomData<fn() -> P::Lock>,
}

impl Builder {
    /// A machine of `config`, with [`SpinLock`] (right for a kernel that
    /// does not allocate in interrupt handlers, and for host programs) and
    /// [`NoHooks`] (nothing to call, nothing compiled in).
    pub const fn new(config: MachineConfig) -> Self {
        Builder {
            config,
            hooks: NoHooks,
            lock: PhantomData,
        }
    }
}

impl<P: Platform> Builder<P> {
    /// The same machine with zones that take the lock `L` (one that
    /// disables interrupts, say: see [`crate::lock`]).
    pub fn lock<L: RawMutex>(self) -> Builder<(L, P::Hooks)> {
        Builder {
            config: self.config,
            hooks: self.hooks,
            lock: PhantomData,
        }
    }

    /// The same machine reporting to `hooks` ([`crate::debug::Hooks`]:
    /// trace events, poisoning).
    pub fn hooks<K: Hooks>(self, hooks: K) -> Builder<(P::Lock, K)> {
        Builder {
            config: self.config,
            hooks,
            lock: PhantomData,
        }
    }

    /// The same machine for a kernel's own [`Platform`] `Q`, reporting to
    /// `hooks`: for a kernel that names its lock and hooks as one type
    /// rather than a pair.
    pub fn platform<Q: Platform>(self, hooks: Q::Hooks) -> Builder<Q> {
        Builder {
            config: self.config,
            hooks,
            lock: PhantomData,
        }
    }

    /// The configuration the machine gets.
    pub fn config(&self) -> &MachineConfig {
        &self.config
    }

    /// Writes an empty machine (every node of the configuration's
    /// topology, no zones) into `slot` and returns it. Nothing larger than
    /// a few hundred bytes is built on the stack, so this works on a 16 KiB
    /// boot stack. Zones come next ([`Machine::add_zone`]), then memory
    /// ([`Machine::add_free_range`]).
    pub fn build_in<'s, 'a>(
        self,
        slot: &'s mut MaybeUninit<Machine<'a, P>>,
    ) -> &'s mut Machine<'a, P> {
        Machine::write_in(slot, self.config, self.hooks)
    }

    /// An empty machine in a box (host programs and tests).
    #[cfg(feature = "std")]
    pub fn build_boxed<'a>(self) -> std::boxed::Box<Machine<'a, P>> {
        let mut b = std::boxed::Box::<Machine<'a, P>>::new_uninit();
        self.build_in(&mut b);
        // SAFETY: `build_in` initialised every field.
        unsafe { b.assume_init() }
    }
}
