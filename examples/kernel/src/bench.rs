//! Cycles per allocation and per free inside the VM, measured with `rdtsc`
//! over batches (alloc a batch, then free it newest first), median of
//! several rounds. Under QEMU's software emulation a "cycle" is host TSC
//! time spent emulating, so figures compare runs on one host, not hardware.

use crate::bringup::{KernelMachine, NODE};
use crate::time::Instant;
use alloc::vec::Vec;
use core::fmt;
use pageframe::CpuId;
use pageframe::{AllocError, Block, FreeError, Gfp, Order, Pfn};

/// Rounds per measurement; the median is reported.
const ROUNDS: usize = 9;

/// Which path the bench allocates through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// `Machine::alloc` / `Machine::free`: the zone under its lock.
    Zone,
    /// CPU 0's handle (`CpuCache`): its per-CPU cache, refilled in batches.
    Cached,
}

/// One order's result.
#[derive(Debug, Clone, Copy)]
pub struct BenchResult {
    /// The path measured.
    pub path: Path,
    /// Block order.
    pub order: Order,
    /// Blocks per batch.
    pub batch: usize,
    /// Median cycles per allocation.
    pub alloc: u64,
    /// Median cycles per free.
    pub free: u64,
    /// Fastest round's cycles per allocation.
    pub alloc_min: u64,
    /// Fastest round's cycles per free.
    pub free_min: u64,
}

/// A bench that could not run.
#[derive(Debug)]
pub enum BenchError {
    /// The heap could not hold the batch.
    NoBuffer,
    /// Not even one block of the order is free.
    NoMemory(Order),
    /// An allocation failed mid-batch.
    Alloc(AllocError),
    /// A free was refused.
    Free(Pfn, FreeError),
    /// CPU 0's handle is in use.
    Handle,
}

impl fmt::Display for BenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoBuffer => write!(f, "no heap memory for the batch"),
            Self::NoMemory(o) => write!(f, "no free block of order {}", o.get()),
            Self::Alloc(e) => write!(f, "allocation failed mid-batch: {e}"),
            Self::Free(pfn, e) => write!(f, "free of {:#x} refused: {e}", pfn.get()),
            Self::Handle => write!(f, "CPU 0's handle is in use"),
        }
    }
}

/// Measures `order` through `path` with batches of up to `batch` blocks
/// (fewer when the machine has less than twice that free).
pub fn run(
    machine: &KernelMachine,
    path: Path,
    order: Order,
    batch: usize,
    free_pages: u64,
) -> Result<BenchResult, BenchError> {
    let mut cpu = match path {
        Path::Cached => Some(
            machine
                .cpu(CpuId(0), NODE)
                .map_err(|_| BenchError::Handle)?,
        ),
        Path::Zone => None,
    };
    let batch = batch.min((free_pages / order.pages() / 2) as usize);
    if batch == 0 {
        return Err(BenchError::NoMemory(order));
    }
    let mut blocks: Vec<Block> = Vec::new();
    blocks
        .try_reserve_exact(batch)
        .map_err(|_| BenchError::NoBuffer)?;
    let mut alloc = [0u64; ROUNDS];
    let mut free = [0u64; ROUNDS];
    for round in 0..ROUNDS {
        let start = Instant::now();
        for _ in 0..batch {
            // Capacity reserved above: push never reallocates.
            let a = match cpu.as_mut() {
                Some(c) => c.alloc(Gfp::KERNEL, order),
                None => machine.alloc(NODE, Gfp::KERNEL, order),
            };
            blocks.push(a.map_err(BenchError::Alloc)?);
        }
        alloc[round] = start.elapsed().0 / batch as u64;
        let start = Instant::now();
        while let Some(b) = blocks.pop() {
            match cpu.as_mut() {
                Some(c) => c.free(b),
                None => machine.free(b),
            }
            .map_err(|e| BenchError::Free(e.into_inner().pfn(), FreeError::Foreign))?;
        }
        free[round] = start.elapsed().0 / batch as u64;
    }
    if let Some(c) = cpu.as_mut() {
        c.drain();
    }
    alloc.sort_unstable();
    free.sort_unstable();
    Ok(BenchResult {
        path,
        order,
        batch,
        alloc: alloc[ROUNDS / 2],
        free: free[ROUNDS / 2],
        alloc_min: alloc[0],
        free_min: free[0],
    })
}

impl fmt::Display for BenchResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "bench: order {} {} alloc {} cycles/op, free {} cycles/op (median of {ROUNDS} batches of {}; best {} / {})",
            self.order.get(),
            match self.path {
                Path::Zone => "zone  ",
                Path::Cached => "cached",
            },
            self.alloc,
            self.free,
            self.batch,
            self.alloc_min,
            self.free_min
        )
    }
}
