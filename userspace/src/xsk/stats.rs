//! Kernel `XDP_STATISTICS` and our own per-socket counters.
//!
//! Design note (after Firecracker's `metrics.rs`): counters are plain `AtomicU64`s with a
//! single writer, the decoder thread that owns the [`XskSocket`](super::XskSocket). The
//! writer adds with a Relaxed load + store (no locked read-modify-write on the hot path),
//! once per burst, not per packet; any thread may read them through an
//! `Arc<XskCounters>` at any time with Relaxed loads. Values are monotonic; a reader may see
//! `packets` and `bytes` from adjacent bursts, never torn values. The struct is cache-line
//! aligned so it does not share a line with other hot data.
//!
//! Loss accounting: the kernel's `rx_ring_full` (we drained too slowly) and
//! `rx_fill_ring_empty_descs` (we refilled too slowly) explain drops at the socket;
//! [`XskCounters`] explains what we did with what we got.

use std::sync::atomic::{AtomicU64, Ordering};

/// The AF_XDP socket counters of one (interface, queue): the kernel's `XDP_STATISTICS`
/// ([`XdpStatistics`]) and ours ([`XskCountersSnapshot`]); `lidarxdp_xsk_*{iface,queue}`.
pub const XSK_COUNTERS: lidarxdp_core::counters::Group = lidarxdp_core::counters::Group {
    name: "xsk",
    labels: &["iface", "queue"],
};

lidarxdp_core::counter_set! {
    /// The kernel's per-socket counters, `struct xdp_statistics` in `if_xdp.h`
    /// (read with `getsockopt(SOL_XDP, XDP_STATISTICS)`). All are packet/descriptor counts
    /// since bind. The last three exist since Linux 5.9; older kernels report them as 0.
    pub struct XdpStatistics in XSK_COUNTERS;
    shared
    /// [`XdpStatistics`] shared with other threads.
    pub struct SharedXdpStatisticsValues;
    {
        /// E.g. a frame too small.
        rx_dropped: Counter "packets" "XDP_STATISTICS: RX packets dropped for other reasons.",
        /// Address outside the UMEM.
        rx_invalid_descs: Counter "packets" "XDP_STATISTICS: RX packets dropped for invalid fill descriptors.",
        /// Always 0 here: no TX ring.
        tx_invalid_descs: Counter "descriptors" "XDP_STATISTICS: invalid TX descriptors.",
        /// The consumer is too slow.
        rx_ring_full: Counter "packets" "XDP_STATISTICS: RX packets dropped because the RX ring was full.",
        /// Refilling is too slow.
        rx_fill_ring_empty_descs: Counter "packets" "XDP_STATISTICS: packets that found the fill ring empty.",
        /// Always 0 here: no TX ring.
        tx_ring_empty_descs: Counter "descriptors" "XDP_STATISTICS: TX ring found empty.",
    }
}

impl XdpStatistics {
    /// Packets the kernel dropped on the way into this socket's RX ring
    /// (`rx_dropped + rx_invalid_descs + rx_ring_full`).
    pub fn rx_lost(&self) -> u64 {
        self.rx_dropped + self.rx_invalid_descs + self.rx_ring_full
    }
}

impl From<libc::xdp_statistics> for XdpStatistics {
    fn from(s: libc::xdp_statistics) -> Self {
        Self {
            rx_dropped: s.rx_dropped,
            rx_invalid_descs: s.rx_invalid_descs,
            tx_invalid_descs: s.tx_invalid_descs,
            rx_ring_full: s.rx_ring_full,
            rx_fill_ring_empty_descs: s.rx_fill_ring_empty_descs,
            tx_ring_empty_descs: s.tx_ring_empty_descs,
        }
    }
}

lidarxdp_core::counter_set! {
    /// A point-in-time copy of [`XskCounters`], our per-socket counters.
    pub struct XskCountersSnapshot in XSK_COUNTERS;
    shared
    /// Our per-socket counters: single writer (the socket's owner), any number of readers.
    /// See the module note.
    #[repr(align(64))]
    pub struct XskCounters;
    {
        /// Ethernet header to end of packet.
        packets: Counter "packets" "Packets taken from the AF_XDP RX ring by the capture thread.",
        bytes: Counter "bytes" "Bytes (whole Ethernet frames) taken from the AF_XDP RX ring.",
        bursts: Counter "bursts" "RX ring reads that found at least one descriptor.",
        wakeups: Counter "wakeups" "recvfrom wake-ups issued because the fill ring had XDP_RING_NEED_WAKEUP.",
        /// Its frame goes back to the fill ring, unless it is also counted in `frames_lost`.
        invalid_descs: Counter "descriptors" "RX descriptors whose addr + len was not inside one UMEM frame, counted and dropped.",
        /// The kernel used a fill-ring frame that cannot be identified: the UMEM has one frame
        /// fewer in circulation for each.
        frames_lost: Counter "frames" "Invalid RX descriptors that named no frame the kernel held (outside the UMEM, or delivered twice).",
        /// Only possible when `fill_size < frame_count`.
        fill_ring_full: Counter "events" "Times the fill ring had no room for all frames held.",
        /// Multi-buffer (`XDP_USE_SG`, a jumbo MTU): of `packets`, those that came as a chain
        /// of descriptors and were copied together. A chain with an invalid part, or longer
        /// than [`super::MAX_CHAIN_CHUNKS`] chunks, is counted once in `invalid_descs` per
        /// invalid descriptor or dropped packet.
        multi_buffer: Counter "packets" "Packets received as a chain of descriptors (frames longer than one UMEM chunk, multi-buffer AF_XDP).",
    }
}

impl XskCounters {
    /// Adds `n` to `c`. Single writer only: a Relaxed load + store, not an atomic RMW.
    #[inline]
    pub(crate) fn add(c: &AtomicU64, n: u64) {
        if n != 0 {
            c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_add_and_snapshot() {
        let c = XskCounters::default();
        XskCounters::add(&c.packets, 3);
        XskCounters::add(&c.packets, 2);
        XskCounters::add(&c.bytes, 1500);
        let s = c.snapshot();
        assert_eq!(s.packets, 5);
        assert_eq!(s.bytes, 1500);
        assert_eq!(s.invalid_descs, 0);
        assert_eq!(std::mem::align_of::<XskCounters>(), 64);
    }

    #[test]
    fn statistics_delta() {
        let a = XdpStatistics {
            rx_ring_full: 5,
            ..Default::default()
        };
        let b = XdpStatistics {
            rx_ring_full: 9,
            rx_dropped: 1,
            ..Default::default()
        };
        let d = b.minus(&a);
        assert_eq!(d.rx_ring_full, 4);
        assert_eq!(d.rx_lost(), 5);
    }
}
