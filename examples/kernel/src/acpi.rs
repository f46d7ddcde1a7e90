//! What the firmware's ACPI tables say about CPUs and NUMA: the MADT's local
//! APICs (which CPUs to start) and the SRAT's memory and CPU affinity
//! (which node each range of RAM and each CPU belongs to), read through the
//! `acpi` crate (table discovery, checksums, the MADT). Version 5 of the
//! crate builds on stable Rust without its allocator features but has no
//! SRAT parser, so its entries are read here (`Srat`).
//!
//! Read early, while the boot tables identity-map the first 4 GiB, where
//! QEMU puts the tables and the RSDP.

use acpi::madt::{Madt, MadtEntry};
use acpi::sdt::{SdtHeader, Signature};
use acpi::{AcpiHandler, AcpiTable, AcpiTables, PhysicalMapping};
use core::fmt;
use core::ptr::NonNull;

/// Most CPUs the kernel starts.
pub const MAX_CPUS: usize = 8;
/// Most memory affinity ranges kept.
pub const MAX_RANGES: usize = 16;
/// Most NUMA nodes.
pub const MAX_NODES: usize = 4;

/// Maps ACPI tables at their physical address: the boot tables identity-
/// map the first 4 GiB.
#[derive(Clone, Copy, Debug)]
struct Identity;

impl AcpiHandler for Identity {
    unsafe fn map_physical_region<T>(&self, phys: usize, size: usize) -> PhysicalMapping<Self, T> {
        // SAFETY: identity-mapped below 4 GiB (the module docs); the crate
        // asks for regions that hold what it reads.
        unsafe {
            PhysicalMapping::new(
                phys,
                NonNull::new(phys as *mut T).expect("ACPI table at address 0"),
                size,
                size,
                *self,
            )
        }
    }

    fn unmap_physical_region<T>(_: &PhysicalMapping<Self, T>) {}
}

/// The System Resource Affinity Table: its header and 12 reserved bytes,
/// then entries of (type, length).
#[repr(C, packed)]
struct Srat {
    header: SdtHeader,
    _reserved: [u8; 12],
}

// SAFETY: the layout above is the SRAT's fixed part (ACPI 6.5 §5.2.16).
unsafe impl AcpiTable for Srat {
    const SIGNATURE: Signature = Signature::SRAT;
    fn header(&self) -> &SdtHeader {
        &self.header
    }
}

/// RAM of one NUMA node (from the SRAT).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemAffinity {
    /// First byte.
    pub base: u64,
    /// Bytes.
    pub len: u64,
    /// The node (the SRAT's proximity domain, renumbered from 0).
    pub node: u8,
}

/// The CPUs and NUMA layout the firmware describes.
#[derive(Clone, Copy, Debug)]
pub struct Platform {
    /// Local APIC ids of the enabled CPUs, the bootstrap CPU first.
    apic: [u32; MAX_CPUS],
    cpus: usize,
    /// The node of each CPU (same order).
    cpu_node: [u8; MAX_CPUS],
    mem: [MemAffinity; MAX_RANGES],
    ranges: usize,
    /// Nodes (1 without an SRAT).
    pub nodes: usize,
    /// Enabled CPUs the MADT listed beyond [`MAX_CPUS`] (not started).
    pub cpus_ignored: usize,
}

/// Why the tables could not be read.
#[derive(Debug)]
pub enum AcpiReadError {
    /// No RSDP, or a table failed its checks.
    Tables(acpi::AcpiError),
    /// No MADT.
    NoMadt,
}

impl fmt::Display for AcpiReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Tables(e) => write!(f, "ACPI tables: {e:?}"),
            Self::NoMadt => write!(f, "no MADT"),
        }
    }
}

impl Platform {
    /// One CPU (APIC id `bsp`), one node: what a machine without ACPI is.
    pub fn single(bsp: u32) -> Platform {
        let mut apic = [0; MAX_CPUS];
        apic[0] = bsp;
        Platform {
            apic,
            cpus: 1,
            cpu_node: [0; MAX_CPUS],
            mem: [MemAffinity::default(); MAX_RANGES],
            ranges: 0,
            nodes: 1,
            cpus_ignored: 0,
        }
    }

    /// Local APIC ids of the CPUs to run, the bootstrap CPU first.
    pub fn apic_ids(&self) -> &[u32] {
        &self.apic[..self.cpus]
    }

    /// The node of CPU `i` (its place in [`Platform::apic_ids`]).
    pub fn cpu_node(&self, i: usize) -> u8 {
        self.cpu_node.get(i).copied().unwrap_or(0)
    }

    /// RAM ranges with their nodes (empty without an SRAT).
    pub fn memory(&self) -> &[MemAffinity] {
        &self.mem[..self.ranges]
    }

    /// Reads the tables: from `rsdp` if the loader gave it, else by the
    /// BIOS search. `bsp` is the bootstrap CPU's APIC id.
    ///
    /// # Safety
    ///
    /// The ACPI tables (and, for the search, the BIOS areas) must be
    /// identity-mapped and readable.
    pub unsafe fn read(rsdp: u64, bsp: u32) -> Result<Platform, AcpiReadError> {
        // SAFETY: the caller's guarantee; the crate validates signatures
        // and checksums.
        let tables = unsafe {
            if rsdp != 0 {
                AcpiTables::from_rsdp(Identity, rsdp as usize)
            } else {
                AcpiTables::search_for_rsdp_bios(Identity)
            }
        }
        .map_err(AcpiReadError::Tables)?;
        let mut p = Platform::single(bsp);
        let madt = tables
            .find_table::<Madt>()
            .map_err(|_| AcpiReadError::NoMadt)?;
        for e in madt.get().entries() {
            let (id, enabled) = match e {
                MadtEntry::LocalApic(a) => (u32::from(a.apic_id), { a.flags } & 1 != 0),
                MadtEntry::LocalX2Apic(a) => ({ a.x2apic_id }, { a.flags } & 1 != 0),
                _ => continue,
            };
            if !enabled || id == bsp {
                continue;
            }
            if p.cpus < MAX_CPUS {
                p.apic[p.cpus] = id;
                p.cpus += 1;
            } else {
                p.cpus_ignored += 1;
            }
        }
        if let Ok(srat) = tables.find_table::<Srat>() {
            p.read_srat(&srat);
        }
        Ok(p)
    }

    /// Memory and CPU affinity entries; proximity domains become nodes 0,
    /// 1, ... in order of first appearance.
    fn read_srat(&mut self, srat: &PhysicalMapping<Identity, Srat>) {
        let mut domains = [0u32; MAX_NODES];
        let mut ndomains = 0;
        let mut node_of = |d: u32| -> Option<u8> {
            if let Some(i) = domains[..ndomains].iter().position(|&x| x == d) {
                return Some(i as u8);
            }
            (ndomains < MAX_NODES).then(|| {
                domains[ndomains] = d;
                ndomains += 1;
                (ndomains - 1) as u8
            })
        };
        let start = srat.virtual_start().as_ptr() as usize;
        let len = { srat.get().header.length } as usize;
        let mut at = core::mem::size_of::<Srat>();
        while at + 2 <= len {
            // SAFETY: inside the table, whose length the crate checked
            // against its checksum; entries are packed, read byte by byte.
            let byte = |off: usize| unsafe { ((start + at + off) as *const u8).read() };
            let word = |off: usize, n: usize| {
                (0..n).fold(0u64, |v, i| v | u64::from(byte(off + i)) << (8 * i))
            };
            let (kind, elen) = (byte(0), byte(1) as usize);
            if elen < 2 || at + elen > len {
                break;
            }
            match kind {
                // Processor local APIC affinity: domain bits 0..8 at 2 and
                // 8..32 at 9..12, APIC id at 3, flags at 4 (bit 0 enabled).
                0 if elen >= 16 && word(4, 4) & 1 != 0 => {
                    let d = (word(2, 1) | word(9, 3) << 8) as u32;
                    let id = word(3, 1) as u32;
                    if let (Some(n), Some(i)) =
                        (node_of(d), self.apic_ids().iter().position(|&a| a == id))
                    {
                        self.cpu_node[i] = n;
                    }
                }
                // Memory affinity: domain at 2, base at 8, length at 16,
                // flags at 28 (bit 0 enabled).
                1 if elen >= 40 && word(28, 4) & 1 != 0 => {
                    let d = word(2, 4) as u32;
                    let (base, size) = (word(8, 8), word(16, 8));
                    if let Some(n) = node_of(d)
                        && size > 0
                        && self.ranges < MAX_RANGES
                    {
                        self.mem[self.ranges] = MemAffinity {
                            base,
                            len: size,
                            node: n,
                        };
                        self.ranges += 1;
                    }
                }
                // Processor x2APIC affinity: domain at 4, x2APIC id at 8,
                // flags at 12.
                2 if elen >= 24 && word(12, 4) & 1 != 0 => {
                    let d = word(4, 4) as u32;
                    let id = word(8, 4) as u32;
                    if let (Some(n), Some(i)) =
                        (node_of(d), self.apic_ids().iter().position(|&a| a == id))
                    {
                        self.cpu_node[i] = n;
                    }
                }
                _ => {}
            }
            at += elen;
        }
        self.nodes = ndomains.max(1);
    }
}
