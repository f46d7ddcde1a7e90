//! `/proc/pagetypeinfo`-style report and fragmentation indices.

use core::fmt;

use pageframe_buddy::Order;

use crate::zone::MobileZone;
use crate::{MigrateType, fragindex};

impl MobileZone<'_> {
    /// Linux's fragmentation index ×1000 at `order` (spec 03 §4.4).
    pub fn fragmentation_index(&self, order: Order) -> i32 {
        fragindex::fragmentation_index(&self.nr_free(), order.get() as usize)
    }

    /// Unusable free space index ×1000 at `order`.
    pub fn unusable_index(&self, order: Order) -> u32 {
        fragindex::unusable_index(&self.nr_free(), order.get() as usize)
    }

    /// External fragmentation percent at `order` (proactive compaction's score).
    pub fn extfrag_percent(&self, order: Order) -> u32 {
        fragindex::extfrag_percent(&self.nr_free(), order.get() as usize)
    }

    /// A `/proc/pagetypeinfo`-style report whose lines `label` starts (the
    /// facade prints `Node N, zone Normal` there, as Linux does).
    pub fn pagetypeinfo<'s>(&'s self, label: &'s dyn fmt::Display) -> PageTypeInfo<'s> {
        PageTypeInfo { zone: self, label }
    }
}

/// Free blocks per order per type, and pageblocks per type.
pub struct PageTypeInfo<'z> {
    zone: &'z MobileZone<'z>,
    label: &'z dyn fmt::Display,
}

impl fmt::Display for PageTypeInfo<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let z = self.zone;
        let max = z.buddy().max_order().get();
        write!(f, "Free pages count per migrate type at order      ")?;
        for o in 0..=max {
            write!(f, " {o:>6}")?;
        }
        writeln!(f)?;
        for mt in MigrateType::ALL {
            write!(f, "{}, type {:>12} ", self.label, mt.name())?;
            for o in 0..=max {
                write!(
                    f,
                    " {:>6}",
                    z.free_blocks_of(Order::new(o).unwrap_or_default(), mt)
                )?;
            }
            writeln!(f)?;
        }
        write!(f, "\nNumber of blocks type    ")?;
        for mt in MigrateType::ALL {
            write!(f, " {:>12}", mt.name())?;
        }
        write!(f, "\n{}             ", self.label)?;
        for n in z.pageblocks_by_type() {
            write!(f, " {n:>12}")?;
        }
        writeln!(f)
    }
}
