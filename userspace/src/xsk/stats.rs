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

/// The kernel's per-socket counters, `struct xdp_statistics` in `if_xdp.h`
/// (read with `getsockopt(SOL_XDP, XDP_STATISTICS)`). All are packet/descriptor counts
/// since bind. The last three exist since Linux 5.9; older kernels report them as 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XdpStatistics {
    /// Dropped for reasons other than invalid descriptors (e.g. frame too small).
    pub rx_dropped: u64,
    /// Dropped because of invalid fill-ring descriptors (address outside the UMEM).
    pub rx_invalid_descs: u64,
    /// TX descriptors rejected as invalid (always 0 here: no TX ring).
    pub tx_invalid_descs: u64,
    /// Dropped because the RX ring was full: the consumer is too slow.
    pub rx_ring_full: u64,
    /// Packets that found the fill ring empty: refilling is too slow.
    pub rx_fill_ring_empty_descs: u64,
    /// TX found its ring empty (always 0 here: no TX ring).
    pub tx_ring_empty_descs: u64,
}

impl XdpStatistics {
    /// Counter increments since `earlier` (saturating, for periodic reports).
    pub fn delta_since(&self, earlier: &XdpStatistics) -> XdpStatistics {
        XdpStatistics {
            rx_dropped: self.rx_dropped.saturating_sub(earlier.rx_dropped),
            rx_invalid_descs: self
                .rx_invalid_descs
                .saturating_sub(earlier.rx_invalid_descs),
            tx_invalid_descs: self
                .tx_invalid_descs
                .saturating_sub(earlier.tx_invalid_descs),
            rx_ring_full: self.rx_ring_full.saturating_sub(earlier.rx_ring_full),
            rx_fill_ring_empty_descs: self
                .rx_fill_ring_empty_descs
                .saturating_sub(earlier.rx_fill_ring_empty_descs),
            tx_ring_empty_descs: self
                .tx_ring_empty_descs
                .saturating_sub(earlier.tx_ring_empty_descs),
        }
    }

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

/// Our per-socket counters: single writer (the socket's owner), any number of readers.
/// See the module note.
#[derive(Debug, Default)]
#[repr(align(64))]
pub struct XskCounters {
    /// Packets handed to the `rx_burst` callback.
    pub packets: AtomicU64,
    /// Bytes handed to the callback (Ethernet header to end of packet).
    pub bytes: AtomicU64,
    /// `rx_burst` calls that found at least one descriptor.
    pub bursts: AtomicU64,
    /// `recvfrom` wakeups issued because the fill ring had `XDP_RING_NEED_WAKEUP`.
    pub wakeups: AtomicU64,
    /// RX descriptors whose `addr + len` was not inside one UMEM frame: counted and dropped;
    /// the frame goes back to the fill ring (unless it is also counted in `frames_lost`).
    pub invalid_descs: AtomicU64,
    /// Invalid RX descriptors (part of `invalid_descs`) that named no frame the kernel held
    /// (outside the UMEM, or a frame delivered twice): the kernel used a fill-ring frame that
    /// cannot be identified, so the UMEM has one frame fewer in circulation for each.
    pub frames_lost: AtomicU64,
    /// Times the fill ring had no room for all frames we held (only possible when
    /// `fill_size < frame_count`).
    pub fill_ring_full: AtomicU64,
}

impl XskCounters {
    /// Adds `n` to `c`. Single writer only: a Relaxed load + store, not an atomic RMW.
    #[inline]
    pub(crate) fn add(c: &AtomicU64, n: u64) {
        if n != 0 {
            c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
        }
    }

    /// A plain copy of all counters (Relaxed loads; see the module note).
    pub fn snapshot(&self) -> XskCountersSnapshot {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        XskCountersSnapshot {
            packets: l(&self.packets),
            bytes: l(&self.bytes),
            bursts: l(&self.bursts),
            wakeups: l(&self.wakeups),
            invalid_descs: l(&self.invalid_descs),
            frames_lost: l(&self.frames_lost),
            fill_ring_full: l(&self.fill_ring_full),
        }
    }
}

/// A point-in-time copy of [`XskCounters`]; same fields and units.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XskCountersSnapshot {
    /// See [`XskCounters::packets`].
    pub packets: u64,
    /// See [`XskCounters::bytes`].
    pub bytes: u64,
    /// See [`XskCounters::bursts`].
    pub bursts: u64,
    /// See [`XskCounters::wakeups`].
    pub wakeups: u64,
    /// See [`XskCounters::invalid_descs`].
    pub invalid_descs: u64,
    /// See [`XskCounters::frames_lost`].
    pub frames_lost: u64,
    /// See [`XskCounters::fill_ring_full`].
    pub fill_ring_full: u64,
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
        let d = b.delta_since(&a);
        assert_eq!(d.rx_ring_full, 4);
        assert_eq!(d.rx_lost(), 5);
    }
}
