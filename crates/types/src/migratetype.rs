//! Migratetypes: the mobility class of a pageblock and of an allocation
//! (spec 02 §2).

use core::fmt;

/// The mobility class of memory: pageblocks carry one, allocations ask for
/// one, and the free lists are kept per type.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
#[repr(u8)]
pub enum MigrateType {
    /// Ordinary kernel allocations that cannot move.
    Unmovable = 0,
    /// Pages that can be migrated (user memory, page cache).
    Movable = 1,
    /// Pages a shrinker can free (caches).
    Reclaimable = 2,
    /// Reserve for high-order atomic allocations (spec 02 §7).
    HighAtomic = 3,
    /// Contiguous-memory-allocator areas: movable allocations only.
    Cma = 4,
    /// Quarantined for offlining or contiguous allocation (spec 02 §8).
    Isolate = 5,
}

/// Number of migratetypes.
pub const MIGRATE_TYPES: usize = 6;
/// The types that have per-CPU lists and take part in fallback.
pub const PCP_TYPES: usize = 3;

impl MigrateType {
    /// Every type, by value.
    pub const ALL: [MigrateType; MIGRATE_TYPES] = [
        MigrateType::Unmovable,
        MigrateType::Movable,
        MigrateType::Reclaimable,
        MigrateType::HighAtomic,
        MigrateType::Cma,
        MigrateType::Isolate,
    ];

    /// The type with value `v`, if any.
    pub const fn from_value(v: u8) -> Option<MigrateType> {
        if (v as usize) < MIGRATE_TYPES {
            Some(Self::ALL[v as usize])
        } else {
            None
        }
    }

    /// Whether blocks of this type take part in fallback and may merge with
    /// other mergeable types across pageblocks (spec 01 §5: values < 3).
    pub const fn is_mergeable(self) -> bool {
        (self as u8) < PCP_TYPES as u8
    }

    /// Whether this type has per-CPU page lists (the three basic types).
    pub const fn has_pcp_lists(self) -> bool {
        self.is_mergeable()
    }

    /// Linux's name (as in `/proc/pagetypeinfo`).
    pub const fn name(self) -> &'static str {
        match self {
            MigrateType::Unmovable => "Unmovable",
            MigrateType::Movable => "Movable",
            MigrateType::Reclaimable => "Reclaimable",
            MigrateType::HighAtomic => "HighAtomic",
            MigrateType::Cma => "CMA",
            MigrateType::Isolate => "Isolate",
        }
    }
}

impl fmt::Display for MigrateType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
