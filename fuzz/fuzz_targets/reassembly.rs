//! IPv4 and IPv6 reassembler: a sequence of fragments (of four IPv4 and four IPv6 datagram
//! keys), raw Ethernet frames (IPv4 or IPv6 with extension headers) and timeout polls built from
//! the input (format: [`lidarxdp_fuzz::shared::ReassemblyOp`]) never panics, never allocates
//! after `Reassembler::new` (memory stays bounded by the slots allocated up front), and keeps
//! its counters consistent with what each call returned:
//! - `fragments` counts exactly the pushes that were fragments;
//! - each error moves exactly its own counter (`Overlap` → `overlaps`, ...);
//! - each completed datagram moves `completed` by one and `completed_bytes` by its length, is
//!   at most `max_payload_len` long, has the pushed fragment's key and holds that fragment's
//!   bytes at its offset;
//! - `completed + failed + in_progress <= fragments` and `in_progress <= max_datagrams`.
#![no_main]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

use libfuzzer_sys::fuzz_target;
use lidarxdp_core::net::parse_ip;
use lidarxdp_core::reassembly::{Fragment, FragmentError, Reassembler, ReassemblyCounters};
use lidarxdp_fuzz::shared::{
    GAP_UNIT_NS, REASSEMBLY_KEYS, ReassemblyOp, reassembly_config, reassembly_ops,
};

/// The system allocator, counting allocations (to prove `push` allocates nothing).
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so the
// `GlobalAlloc` contract holds exactly as it does for `System`; the counter has no effect on
// the memory handed out.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged; the caller upholds `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged; the caller upholds `alloc_zeroed`'s contract.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was returned by `System` (through this allocator) for `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: `ptr` was returned by `System` for `layout`; the caller upholds `realloc`'s
        // contract for `new_size`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Checks the counter deltas of one push against its result (see the module docs).
fn check_push(
    before: &ReassemblyCounters,
    after: &ReassemblyCounters,
    result: &Result<Option<usize>, FragmentError>,
) {
    let d = |f: fn(&ReassemblyCounters) -> u64| f(after) - f(before);
    match result {
        Err(FragmentError::NotAFragment) => {
            assert_eq!(after, before, "a whole datagram moved a counter");
            return;
        }
        Ok(Some(_)) => assert_eq!(d(|c| c.completed), 1),
        Ok(None) => assert_eq!(d(|c| c.completed), 0),
        Err(e) => {
            assert_eq!(d(|c| c.completed), 0);
            let moved = match e {
                FragmentError::Overlap { .. } => d(|c| c.overlaps),
                FragmentError::Duplicate { .. } => d(|c| c.duplicates),
                FragmentError::TooBig { .. } => d(|c| c.too_big),
                FragmentError::Misaligned { .. } | FragmentError::Inconsistent { .. } => {
                    d(|c| c.malformed)
                }
                FragmentError::DatagramFailed => d(|c| c.dropped_fragments),
                FragmentError::NotAFragment => unreachable!(),
            };
            assert_eq!(moved, 1, "{e:?} did not move its counter: {after:?}");
        }
    }
    assert_eq!(d(|c| c.fragments), 1);
}

fuzz_target!(|data: &[u8]| {
    let Some((cfg, ops)) = data.split_first_chunk::<3>() else {
        return;
    };
    let cfg = reassembly_config(*cfg);
    let mut r = Reassembler::new(cfg);
    let mut now_ns = 0u64;
    let mut pushes = 0u64;
    let mut completed_bytes = 0u64;
    for op in reassembly_ops(ops) {
        let (gap, frag) = match op {
            ReassemblyOp::Fragment {
                key,
                offset,
                more,
                gap,
                payload,
            } => (
                gap,
                Some({
                    let key = REASSEMBLY_KEYS[usize::from(key & 7)];
                    Fragment {
                        key,
                        // IPv6 keys carry no protocol: their fragments start with UDP.
                        protocol: if key.protocol == 0 { 17 } else { key.protocol },
                        offset,
                        more_fragments: more,
                        payload,
                    }
                }),
            ),
            ReassemblyOp::Raw { gap, frame } => (
                gap,
                parse_ip(frame).ok().and_then(|p| Fragment::from_ip(&p)),
            ),

            ReassemblyOp::Poll { gap } => {
                now_ns += u64::from(gap) * GAP_UNIT_NS;
                let before = *r.counters();
                let allocs = ALLOCATIONS.load(Ordering::Relaxed);
                let n = r.poll_timeout(now_ns);
                assert_eq!(
                    ALLOCATIONS.load(Ordering::Relaxed),
                    allocs,
                    "poll allocated"
                );
                assert_eq!(r.counters().timed_out - before.timed_out, n);
                continue;
            }
        };
        now_ns += u64::from(gap) * GAP_UNIT_NS;
        let Some(frag) = frag else { continue };
        let before = *r.counters();
        let allocs = ALLOCATIONS.load(Ordering::Relaxed);
        let result = r.push(&frag, now_ns).map(|done| {
            done.map(|d| {
                assert!(d.payload.len() <= cfg.max_payload_len);
                assert!(d.payload.len() <= frag.key.max_payload_len());
                assert!(d.fragments >= 1);
                assert_eq!(d.key, frag.key);
                let at = usize::from(frag.offset);
                let own = d.payload.get(at..at + frag.payload.len());
                assert_eq!(
                    own,
                    Some(frag.payload),
                    "completing fragment's bytes differ"
                );
                let _ = d.udp();
                d.payload.len()
            })
        });
        assert_eq!(
            ALLOCATIONS.load(Ordering::Relaxed),
            allocs,
            "push allocated"
        );
        let after = *r.counters();
        check_push(&before, &after, &result);
        if let Ok(Some(len)) = result {
            completed_bytes += len as u64;
        }
        if !matches!(result, Err(FragmentError::NotAFragment)) {
            pushes += 1;
        }
        let c = r.counters();
        assert_eq!(c.fragments, pushes);
        assert_eq!(c.completed_bytes, completed_bytes);
        assert!(r.in_progress() <= r.config().max_datagrams);
        assert!(
            c.completed + c.failed() + r.in_progress() as u64 <= c.fragments,
            "more datagrams than fragments: {c:?}, {} in progress",
            r.in_progress()
        );
    }
});
