//! Migratetypes (spec 02 §2) as the mobility layer uses them: each type is
//! one of the buddy core's free lists per order, and the basic types fall
//! back to each other in a fixed order. The type itself is vocabulary,
//! defined in `pageframe-types`.

use pageframe_buddy::ListId;
pub use pageframe_types::{MIGRATE_TYPES, MigrateType, PCP_TYPES};

/// The buddy free list of `mt` (list number = the type's value).
#[inline]
pub const fn list_of(mt: MigrateType) -> ListId {
    match ListId::new(mt as u8) {
        Some(l) => l,
        None => ListId::DEFAULT,
    }
}

/// The type whose free list is `list`.
#[inline]
pub const fn type_of_list(list: ListId) -> MigrateType {
    match MigrateType::from_value(list.get()) {
        Some(t) => t,
        None => MigrateType::Unmovable,
    }
}

/// spec 02 §5.1: where each basic type falls back to, in order.
pub const fn fallbacks(mt: MigrateType) -> &'static [MigrateType] {
    match mt {
        MigrateType::Unmovable => &[MigrateType::Reclaimable, MigrateType::Movable],
        MigrateType::Movable => &[MigrateType::Reclaimable, MigrateType::Unmovable],
        MigrateType::Reclaimable => &[MigrateType::Unmovable, MigrateType::Movable],
        _ => &[],
    }
}
