//! Fuzz the swap-slot allocator: byte-coded operation sequences through the
//! public API on a small device with two CPUs and a tiny continuation pool,
//! with a shadow ownership map (no slot handed out twice, refused
//! operations change nothing) and `validate()` after every step.
#![no_main]

use std::mem::MaybeUninit;

use libfuzzer_sys::fuzz_target;
use pageframe_swap::{
    DeviceFlags, MthpSearch, Order, Slot, SlotState, SwapConfig, SwapCpu, SwapDevice, SwapinPolicy, VmaFlags,
};

const CLUSTER_ORDER: u8 = 4;

fn states(dev: &SwapDevice<'_>) -> Vec<SlotState> {
    (0..dev.config().slots).map(|s| dev.slot_state(Slot::new(s)).unwrap()).collect()
}

fuzz_target!(|data: &[u8]| {
    let Some((&head, ops)) = data.split_first() else { return };
    let mut flags = DeviceFlags::BLOCK_DEVICE;
    if head & 1 != 0 {
        flags |= DeviceFlags::PAGE_DISCARD;
    }
    if head & 2 != 0 {
        flags.remove(DeviceFlags::BLOCK_DEVICE);
    }
    let search = if head & 4 != 0 { MthpSearch::Exhaustive } else { MthpSearch::Linux };
    let slots = 5 * (1u32 << CLUSTER_ORDER) - (head as u32 >> 5);
    let cfg = SwapConfig::new(slots).with_cluster_order(CLUSTER_ORDER).with_flags(flags).with_mthp_search(search);
    let mut meta = vec![MaybeUninit::uninit(); SwapDevice::metadata_bytes(&cfg)];
    let mut cont = vec![MaybeUninit::uninit(); SwapDevice::continuation_bytes(&cfg, 2)];
    let mut dev = SwapDevice::new(cfg, &mut meta, Some(&mut cont)).unwrap();
    let mut cpus = [SwapCpu::new(), SwapCpu::new()];
    let mut owned = vec![false; slots as usize];
    let mut entries: Vec<(Slot, Order)> = Vec::new();

    for chunk in ops.chunks(3) {
        let [a, b, c] = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let k = Order::new(b % (CLUSTER_ORDER + 2)).unwrap_or(Order::ZERO);
        // Target: a live entry (as allocated or one of its slots) or raw.
        let (slot, order) = match (c % 4, entries.is_empty()) {
            (0 | 1, false) => entries[b as usize % entries.len()],
            (2, false) => {
                let (s, o) = entries[b as usize % entries.len()];
                (Slot::new(s.get() + (c as u32 >> 2) % (o.pages() as u32)), Order::ZERO)
            }
            _ => (Slot::new(c as u32 % (slots + 2)), k),
        };
        let before = states(&dev);
        let refused = match a % 10 {
            0 | 1 => match dev.alloc(&mut cpus[(a >> 4) as usize & 1], k) {
                Ok(s) => {
                    assert!(s.is_aligned(k));
                    for i in s.get()..s.get() + (k.pages() as u32) {
                        assert!(!owned[i as usize], "slot {i} handed out twice");
                        owned[i as usize] = true;
                    }
                    entries.push((s, k));
                    false
                }
                Err(_) => true,
            },
            2 => dev.duplicate(slot, order).is_err(),
            3 => dev.put_map(slot, order).is_err(),
            4 => dev.put_cache(slot, order).is_err(),
            5 => dev.free(slot, order).is_err(),
            6 => dev.swapcache_prepare(slot, order).is_err(),
            7 => dev.split_huge(slot).is_err(),
            8 => {
                let p = [SwapinPolicy::Always, SwapinPolicy::Madvise, SwapinPolicy::Never][b as usize % 3];
                dev.swapin_huge(slot, p, VmaFlags::from_bits_truncate(c)).is_err()
            }
            _ => {
                dev.run_discards(&mut |_: Slot, _: u32| {});
                false
            }
        };
        let after = states(&dev);
        if refused {
            assert_eq!(before, after, "a refused operation changed slot states");
        }
        // Slots that became free are no longer owned.
        for (i, st) in after.iter().enumerate() {
            if *st == SlotState::Free {
                owned[i] = false;
            }
        }
        entries.retain(|&(s, o)| (s.get()..s.get() + (o.pages() as u32)).any(|i| owned[i as usize]));
        dev.validate().unwrap();
    }
});
