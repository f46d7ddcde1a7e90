//! Typed errors. Every error leaves the cache unchanged.

use core::fmt;

/// Why a PCP operation was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PcpError {
    /// The order is not cached by the PCP (`pcp_allowed_order` is false,
    /// spec 04 §2.2): use the zone path.
    NotCached,
    /// `batch` is 0, `high_min > high_max`, or a bound does not fit the cache.
    InvalidSizing,
    /// The sysctl-style fraction is between 1 and 7 (spec 04 §10: EINVAL).
    InvalidHighFraction,
    /// `scale_max` above 6 or a THP order that collides with the low orders.
    InvalidConfig,
    /// The caller's slot memory is empty or larger than `u32` indices allow.
    InvalidStorage,
    /// The CPU's cache is held by another owner (claim failed).
    Busy,
    /// No cache exists for that CPU number.
    NoSuchCpu,
    /// The slot memory is full and the zone took nothing back: free the
    /// block to the zone directly.
    NoRoom,
}

impl fmt::Display for PcpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            PcpError::NotCached => "order is not cached by the per-CPU lists",
            PcpError::InvalidSizing => "invalid batch/high_min/high_max",
            PcpError::InvalidHighFraction => "high fraction must be 0 or at least 8",
            PcpError::InvalidConfig => "invalid PCP configuration",
            PcpError::InvalidStorage => "slot storage is empty or too large",
            PcpError::Busy => "the CPU's cache is owned by someone else",
            PcpError::NoSuchCpu => "no cache for that CPU",
            PcpError::NoRoom => "no list slot free; free to the zone directly",
        };
        f.write_str(s)
    }
}

impl core::error::Error for PcpError {}

/// Why an allocation through the PCP returned no frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocMiss {
    /// The order bypasses the PCP: allocate from the zone directly.
    NotCached,
    /// The list was empty and the zone gave nothing on refill: the caller
    /// falls back to the zone path / slow path (spec 04 §4.1).
    ZoneEmpty,
    /// A caller that must not wait was not served: the cache has remote
    /// requests to honour first, or its list is empty and a refill would
    /// have to wait for the zone or spill first
    /// ([`crate::LocalPcp::try_alloc`]). Nothing changed.
    Busy,
}
