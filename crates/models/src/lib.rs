//! Reference models of the pageframe crates and the operation languages
//! that drive them, shared by the property tests and the fuzz targets so
//! both check the same rules. A host crate, never published: the
//! allocator crates ship only the mechanisms.
//!
//! | module | models |
//! |---|---|
//! | [`buddy`] | one buddy zone, frame by frame (hole, free, allocated) |
//! | [`mobility`] | a zone grouped by mobility: pageblock types, fallback |
//! | [`compact`] | compaction over a node: owners, contents, deferral |
//! | [`pcp`] | a reference zone behind the per-CPU caches |
//! | [`machine`] | a whole machine through the public API of `pageframe` |

pub mod buddy;
pub mod compact;
pub mod machine;
pub mod mobility;
pub mod pcp;
