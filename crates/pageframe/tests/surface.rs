//! The public surface as a user meets it: a glob import of the facade
//! beside the crates a kernel also uses, and the default lock type that
//! needs no annotation.

use pageframe::*;

/// `use pageframe::*` brings in no name that makes a path through the
/// `x86_64` crate ambiguous.
#[test]
fn a_glob_import_beside_the_x86_64_crate_resolves() {
    let a = x86_64::PhysAddr::new(0x20_1000);
    let p = PhysAddr::new(a.as_u64());
    assert_eq!(p.pfn_down(), Pfn(0x201));
}

/// A machine built without naming its lock gets the default one.
#[test]
fn the_default_lock_needs_no_annotation() {
    let mut m = pageframe::boot::Builder::new(MachineConfig::SINGLE_NODE).build_boxed();
    let span = PfnRange::new(Pfn(1 << 20), Pfn((1 << 20) + 4096));
    let meta = Box::leak(
        vec![core::mem::MaybeUninit::uninit(); m.zone_metadata_bytes(span)].into_boxed_slice(),
    );
    m.add_zone(NodeId::ZERO, ZoneKind::Normal, span, meta)
        .unwrap();
    m.add_free_range(span).unwrap();
    let b = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO).unwrap();
    m.free(b).unwrap();
    assert_eq!(m.inspect().free_pages(), 4096);
}
