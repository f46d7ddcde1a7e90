//! TEMPORARY stand-in for the `pageframe` facade (being written), over
//! `pageframe-buddy`, with the facade's sketched API. Removed once the
//! facade compiles.
#![allow(missing_docs, dead_code)]

use core::fmt;
use core::mem::MaybeUninit;
pub use pageframe_buddy::{
    AllocError, FreeError, InitError, Order, Pfn, PfnRange, PhysAddr, RangeError, ValidateError,
};
use pageframe_buddy::{BuddyConfig, BuddyZone, ListId};
use spin::Mutex;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZoneKind {
    Dma32,
    Normal,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gfp(u32);
impl Gfp {
    pub const KERNEL: Gfp = Gfp(0);
    pub const DMA32: Gfp = Gfp(1);
}

pub struct Zone<'a> {
    kind: ZoneKind,
    inner: Mutex<BuddyZone<'a>>,
}

impl<'a> Zone<'a> {
    pub fn metadata_bytes(span: PfnRange) -> usize {
        BuddyZone::<pageframe_buddy::SingleList>::metadata_bytes(span, BuddyConfig::default())
    }
    pub fn new(
        kind: ZoneKind,
        span: PfnRange,
        meta: &'a mut [MaybeUninit<u8>],
    ) -> Result<Self, InitError> {
        let z = BuddyZone::new(
            span,
            BuddyConfig::default(),
            meta,
            pageframe_buddy::SingleList,
        )?;
        Ok(Zone {
            kind,
            inner: Mutex::new(z),
        })
    }
    pub fn kind(&self) -> ZoneKind {
        self.kind
    }
    pub fn span(&self) -> PfnRange {
        self.inner.lock().span()
    }
    pub fn add_free_range(&self, r: PfnRange) -> Result<(), RangeError> {
        self.inner.lock().add_free_range(r)
    }
    pub fn free_pages(&self) -> u64 {
        self.inner.lock().free_pages()
    }
    pub fn managed_pages(&self) -> u64 {
        self.inner.lock().managed_pages()
    }
    pub fn free_blocks(&self, o: Order) -> u64 {
        self.inner.lock().free_blocks(o)
    }
    pub fn max_order(&self) -> Order {
        self.inner.lock().max_order()
    }
    pub fn alloc(&self, o: Order) -> Result<Pfn, AllocError> {
        self.inner.lock().alloc(o, ListId::DEFAULT)
    }
    pub fn free(&self, p: Pfn, o: Order) -> Result<(), FreeError> {
        self.inner.lock().free(p, o)
    }
    pub fn validate(&self) -> Result<(), ValidateError> {
        self.inner.lock().validate()
    }
}

pub struct Node<'a> {
    zones: [Option<Zone<'a>>; 2],
}

#[derive(Debug)]
pub struct ZoneExists;

impl<'a> Node<'a> {
    pub const fn new() -> Self {
        Node {
            zones: [None, None],
        }
    }
    pub fn add_zone(&mut self, z: Zone<'a>) -> Result<(), ZoneExists> {
        let i = z.kind as usize;
        if self.zones[i].is_some() {
            return Err(ZoneExists);
        }
        self.zones[i] = Some(z);
        Ok(())
    }
    pub fn zones(&self) -> impl Iterator<Item = &Zone<'a>> {
        self.zones.iter().flatten()
    }
    pub fn alloc(&self, gfp: Gfp, o: Order) -> Result<Pfn, AllocError> {
        let top = if gfp == Gfp::DMA32 { 0 } else { 1 };
        for z in self.zones[..=top].iter().rev().flatten() {
            if let Ok(p) = z.alloc(o) {
                return Ok(p);
            }
        }
        Err(AllocError::OutOfMemory)
    }
    pub fn free(&self, p: Pfn, o: Order) -> Result<(), FreeError> {
        for z in self.zones() {
            if z.span().contains(p) {
                return z.free(p, o);
            }
        }
        Err(FreeError::OutOfRange)
    }
    pub fn validate(&self) -> Result<(), ValidateError> {
        for z in self.zones() {
            z.validate()?;
        }
        Ok(())
    }
    pub fn buddyinfo(&self) -> BuddyInfo<'_, 'a> {
        BuddyInfo(self)
    }
}

pub struct BuddyInfo<'n, 'a>(&'n Node<'a>);
impl fmt::Display for BuddyInfo<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for z in self.0.zones() {
            write!(f, "Node 0, zone {:>8}", alloc_name(z.kind))?;
            for o in 0..=z.max_order().get() {
                write!(f, " {:>6}", z.free_blocks(Order::new(o).unwrap()))?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}
fn alloc_name(k: ZoneKind) -> &'static str {
    match k {
        ZoneKind::Dma32 => "DMA32",
        ZoneKind::Normal => "Normal",
    }
}

pub mod x86_64 {
    use super::{Gfp, Node, Order, Pfn};
    use x86_64::structures::paging::{FrameAllocator, PhysFrame, Size4KiB};
    pub struct FrameAdapter<'n, 'a> {
        node: &'n Node<'a>,
        gfp: Gfp,
    }
    impl<'n, 'a> FrameAdapter<'n, 'a> {
        pub fn new(node: &'n Node<'a>, gfp: Gfp) -> Self {
            Self { node, gfp }
        }
    }
    // SAFETY: frames come from the allocator, exclusive until freed.
    unsafe impl FrameAllocator<Size4KiB> for FrameAdapter<'_, '_> {
        fn allocate_frame(&mut self) -> Option<PhysFrame<Size4KiB>> {
            let p: Pfn = self.node.alloc(self.gfp, Order::ZERO).ok()?;
            PhysFrame::from_start_address(::x86_64::PhysAddr::new(p.addr().get())).ok()
        }
    }
}
