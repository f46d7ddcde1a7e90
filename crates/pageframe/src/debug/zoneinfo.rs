//! `/proc/zoneinfo`: each zone's watermarks, sizes, lowmem protection, free
//! blocks by order and migratetype, the free huge pages its pageblock pool
//! keeps, and its per-CPU caches' `count`,
//! `high` and `batch`.
//!
//! A cache is read by claiming it for a moment: one its CPU holds (a
//! [`crate::CpuCache`] handle kept by that CPU) shows as `in use`.

use core::fmt;

use pageframe_buddy::Order;
use pageframe_mobility::MigrateType;
use pageframe_pcp::CpuId;

use crate::lock::{Platform, RawMutex};
use crate::machine::Machine;
use crate::zone_core::Zone;
use crate::zone_kind::ZoneKind;

/// A machine's `/proc/zoneinfo`; see [`crate::debug::Inspect::zoneinfo`].
pub struct ZoneInfo<'m, 'a, P: Platform>(pub(crate) &'m Machine<'a, P>);

impl<P: Platform> fmt::Display for ZoneInfo<'_, '_, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for z in self.0.all_zones() {
            zone(f, z, self.0.pcp_cpus())?;
        }
        Ok(())
    }
}

fn zone<R: RawMutex>(f: &mut fmt::Formatter<'_>, z: &Zone<'_, R>, cpus: u32) -> fmt::Result {
    let w = z.watermarks();
    writeln!(f, "Node {}, zone {:>8}", z.node().index(), z.kind().name())?;
    writeln!(f, "  pages free     {}", z.free_pages())?;
    writeln!(f, "        min      {}", w.min)?;
    writeln!(f, "        low      {}", w.low)?;
    writeln!(f, "        high     {}", w.high)?;
    writeln!(f, "        promo    {}", w.promo)?;
    writeln!(f, "        spanned  {}", z.span().len())?;
    // Frames handed over: the allocator cannot tell RAM the kernel kept
    // from holes, so present and managed agree.
    writeln!(f, "        present  {}", z.managed_pages())?;
    writeln!(f, "        managed  {}", z.managed_pages())?;
    // Free huge pages the zone keeps off its lists (part of `pages free`).
    writeln!(
        f,
        "        pooled   {} (pageblock pool, slots {})",
        z.pooled_frames(),
        z.pool_slots()
    )?;
    write!(f, "        protection: (")?;
    for (i, k) in ZoneKind::ALL.into_iter().enumerate() {
        let sep = if i == 0 { "" } else { ", " };
        write!(f, "{sep}{}", z.lowmem_reserve(k))?;
    }
    writeln!(f, ")")?;
    z.inspect(|mz| -> fmt::Result {
        let c = mz.superpageblock_counts();
        let spb = mz.mobility().pageblocks().superpageblocks();
        writeln!(
            f,
            "  superpageblocks {} (of {} frames): tainted {}, clean {}, free {}",
            c.whole,
            spb.frames(),
            c.tainted,
            c.clean,
            c.free
        )?;
        write!(f, "        map      ")?;
        for u in (0..spb.len()).filter_map(|i| mz.superpageblock_use(i)) {
            write!(f, "{}", u.symbol())?;
        }
        writeln!(f)?;
        let max = mz.buddy().max_order().get();
        write!(f, "  free blocks by order        ")?;
        for o in 0..=max {
            write!(f, " {o:>6}")?;
        }
        writeln!(f)?;
        for mt in MigrateType::ALL {
            write!(f, "        {:>12}        ", mt.name())?;
            for o in 0..=max {
                write!(f, " {:>6}", mz.free_blocks_of(Order::new_truncated(o), mt))?;
            }
            writeln!(f)?;
        }
        Ok(())
    })?;
    let Some(set) = &z.pcp else {
        return Ok(());
    };
    writeln!(f, "  pagesets")?;
    for c in 0..cpus {
        writeln!(f, "    cpu: {c}")?;
        match set.claim(CpuId(c)) {
            Ok(mut l) => {
                let batch = l.inspect(|p| p.sizing().batch());
                writeln!(f, "              count: {}", l.count())?;
                writeln!(f, "              high:  {}", l.high())?;
                writeln!(f, "              batch: {batch}")?;
            }
            Err(_) => writeln!(f, "              in use")?,
        }
    }
    Ok(())
}
