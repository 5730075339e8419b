//! Our own AF_XDP socket (XSK): UMEM, fill/RX/completion rings, bind, statistics.
//!
//! Built directly on `libc` (syscalls, the `if_xdp.h` structs and constants) and `memmap2`
//! (the UMEM and ring mappings). It follows the kernel's
//! `Documentation/networking/af_xdp.rst` and `include/uapi/linux/if_xdp.h`; the ring
//! bookkeeping (cached producer/consumer indices, masks, acquire/release on the shared
//! indices) follows libxdp's `xsk.h`.
//!
//! One module per concern:
//! - [`ring`]: the single-producer/single-consumer rings shared with the kernel, with the
//!   index arithmetic kept sans-IO so it is unit-tested without a socket;
//! - [`umem`]: the UMEM area (2 MiB huge pages when possible) and UMEM frames as ownership
//!   tokens on a free list;
//! - [`socket`]: [`XskSocket`]: socket, `XDP_UMEM_REG`, ring sizes, ring mmaps, bind (with
//!   zero-copy → copy fallback and `EBUSY` retry), the RX burst loop;
//! - [`stats`]: the kernel's `XDP_STATISTICS` and our own lock-free [`XskCounters`];
//! - [`hugepage`]: reserving 2 MiB huge pages ([`reserve_hugepages`]).
//!
//! This socket is RX-only: it has a fill, an RX and a completion ring (the kernel requires
//! both UMEM rings before bind) and no TX ring.
//!
//! Minimum kernel: 5.4 (ring `flags` / `XDP_USE_NEED_WAKEUP`, `XDP_OPTIONS`); the six-field
//! `XDP_STATISTICS` needs 5.9 (older kernels report the last three as 0).

pub mod hugepage;
pub mod ring;
pub mod socket;
pub mod stats;
pub mod umem;

use std::io;
use std::time::Duration;

pub use hugepage::{HUGE_PAGE_SIZE, huge_pages_for, reserve_hugepages};
pub use socket::XskSocket;
pub use stats::{
    SharedXdpStatisticsValues, XSK_COUNTERS, XdpStatistics, XskCounters, XskCountersSnapshot,
};
pub use umem::FrameAddr;

/// Bytes at the start of every UMEM chunk that the kernel reserves as XDP headroom
/// (`XDP_PACKET_HEADROOM`, `include/uapi/linux/bpf.h`): a received frame starts after them.
pub const XDP_PACKET_HEADROOM: u32 = 256;

/// Bytes of Ethernet framing an MTU does not count: the 14-byte header plus one 4-byte
/// 802.1Q tag (the XDP program accepts one VLAN tag; FCS is not delivered).
pub const ETH_OVERHEAD: u32 = 14 + 4;

/// The largest interface MTU whose every frame fits one UMEM chunk of `frame_size` bytes:
/// `frame_size - XDP_PACKET_HEADROOM - ETH_OVERHEAD` (1774 for 2048-byte chunks, 3822 for
/// 4096). Up to it a frame arrives in one RX descriptor; above it the socket is bound for
/// multi-buffer (`XDP_USE_SG`) and a frame arrives as a chain of descriptors
/// ([`max_mtu_multi_buffer`]).
pub fn max_mtu(frame_size: u32) -> u32 {
    frame_size.saturating_sub(XDP_PACKET_HEADROOM + ETH_OVERHEAD)
}

/// UMEM chunks one frame may span in multi-buffer mode: 18. In copy mode the kernel chains at
/// most `CONFIG_MAX_SKB_FRAGS + 1` buffers and drops a longer frame whole; the config's
/// minimum is 17 (Documentation/networking/af_xdp.rst, "Multi-Buffer Support").
pub const MAX_CHAIN_CHUNKS: u32 = 18;

/// The largest interface MTU a multi-buffer socket takes with `frame_size`-byte chunks:
/// [`MAX_CHAIN_CHUNKS`] chunks of `frame_size - XDP_PACKET_HEADROOM` bytes, less
/// [`ETH_OVERHEAD`] (32,238 for 2048-byte chunks): a jumbo MTU of 9000 spans 6 chunks.
pub fn max_mtu_multi_buffer(frame_size: u32) -> u32 {
    (MAX_CHAIN_CHUNKS * frame_size.saturating_sub(XDP_PACKET_HEADROOM)).saturating_sub(ETH_OVERHEAD)
}

/// How an interface's MTU fits the UMEM chunks ([`check_mtu`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MtuFit {
    /// The interface's MTU, bytes.
    pub mtu: u32,
    /// Its frames may exceed one chunk: the socket binds with `XDP_USE_SG`.
    pub multi_buffer: bool,
}

/// Checks that interface `ifname` (in the calling thread's network namespace) has an MTU the
/// AF_XDP path takes with UMEM chunks of `frame_size` bytes: up to [`max_mtu`] in one chunk,
/// up to [`max_mtu_multi_buffer`] as a chain of chunks.
///
/// # Errors
/// [`XskError::MtuTooLarge`] naming the interface, its MTU, the chunk size and the largest
/// MTU taken; [`XskError::NoSuchInterface`] when the MTU cannot be read (`SIOCGIFMTU`).
pub fn check_mtu(ifname: &str, frame_size: u32) -> Result<MtuFit, XskError> {
    let mtu = crate::sys::net::if_mtu(ifname).map_err(|source| XskError::NoSuchInterface {
        ifname: ifname.to_owned(),
        call: "ioctl(SIOCGIFMTU)",
        source,
    })?;
    let max = max_mtu_multi_buffer(frame_size);
    if mtu > max {
        return Err(XskError::MtuTooLarge {
            ifname: ifname.to_owned(),
            mtu,
            frame_size,
            max_mtu: max,
        });
    }
    Ok(MtuFit {
        mtu,
        multi_buffer: mtu > max_mtu(frame_size),
    })
}

/// Whether the UMEM is backed by 2 MiB huge pages (`MAP_HUGETLB | MAP_HUGE_2MB`).
///
/// Huge pages cut TLB misses on the packet buffers; reserve them first with
/// [`reserve_hugepages`] (or `echo N > /proc/sys/vm/nr_hugepages`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HugePages {
    /// Huge pages or fail with [`XskError::HugePages`].
    Require,
    /// Huge pages when enough are free, otherwise normal 4 KiB pages and one `log::warn`
    /// per process.
    #[default]
    Prefer,
    /// Normal pages.
    Off,
}

/// UMEM geometry and UMEM ring sizes.
///
/// The UMEM is `frame_count * frame_size` bytes in aligned-chunk mode (one packet per
/// frame, no headroom). All sizes must be powers of two (kernel requirement for the rings
/// and for aligned chunks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UmemConfig {
    /// Number of frames (power of two, e.g. 4096).
    pub frame_count: u32,
    /// Bytes per frame: 2048 or 4096 (aligned chunks: a power of two in
    /// `2048..=PAGE_SIZE`). Bounds the largest receivable Ethernet frame.
    pub frame_size: u32,
    /// Fill ring entries (power of two). `>= frame_count` lets every frame sit on the ring.
    pub fill_size: u32,
    /// Completion ring entries (power of two; unused for RX but required by the kernel).
    pub comp_size: u32,
    /// RX ring entries (power of two).
    pub rx_size: u32,
    /// Huge page policy for the UMEM.
    pub huge_pages: HugePages,
}

impl Default for UmemConfig {
    /// 4096 frames of 2048 bytes (8 MiB, four 2 MiB huge pages); fill and RX rings of
    /// 4096, completion ring of 64; [`HugePages::Prefer`].
    fn default() -> Self {
        Self {
            frame_count: 4096,
            frame_size: 2048,
            fill_size: 4096,
            comp_size: 64,
            rx_size: 4096,
            huge_pages: HugePages::Prefer,
        }
    }
}

impl UmemConfig {
    /// UMEM size in bytes (`frame_count * frame_size`).
    pub fn umem_bytes(&self) -> usize {
        self.frame_count as usize * self.frame_size as usize
    }

    /// Checks the constraints the kernel enforces at `XDP_UMEM_REG` / ring setup, so a bad
    /// value is reported by name instead of as a bare `EINVAL`.
    pub fn validate(&self) -> Result<(), XskError> {
        let pow2 = |name: &str, v: u32| {
            if v == 0 || !v.is_power_of_two() {
                Err(XskError::InvalidConfig(format!(
                    "{name} = {v} must be a non-zero power of two"
                )))
            } else {
                Ok(())
            }
        };
        pow2("frame_count", self.frame_count)?;
        pow2("fill_size", self.fill_size)?;
        pow2("comp_size", self.comp_size)?;
        pow2("rx_size", self.rx_size)?;
        if self.frame_size != 2048 && self.frame_size != 4096 {
            return Err(XskError::InvalidConfig(format!(
                "frame_size = {} must be 2048 or 4096",
                self.frame_size
            )));
        }
        // XDP_UMEM_REG wants a whole number of 4 KiB pages.
        if !self.umem_bytes().is_multiple_of(4096) {
            return Err(XskError::InvalidConfig(format!(
                "UMEM of {} bytes (frame_count * frame_size) must be a multiple of 4096",
                self.umem_bytes()
            )));
        }
        Ok(())
    }
}

/// How to bind: `sockaddr_xdp.sxdp_flags` `XDP_ZEROCOPY` / `XDP_COPY`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BindMode {
    /// Try zero-copy; on `EOPNOTSUPP` or `EINVAL` fall back to copy mode.
    #[default]
    Auto,
    /// `XDP_COPY`: the kernel copies each packet into a UMEM frame (works on any driver).
    Copy,
    /// `XDP_ZEROCOPY`: the driver DMAs into the UMEM; fails if the driver cannot.
    ZeroCopy,
}

/// The mode the socket is actually bound in (read back with `getsockopt(XDP_OPTIONS)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BoundMode {
    /// Copy mode.
    Copy,
    /// Zero-copy mode.
    ZeroCopy,
}

/// Which interface queue to bind and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XskConfig {
    /// Interface name (in the calling thread's network namespace).
    pub ifname: String,
    /// RX queue id (the XDP program redirects with `ctx->rx_queue_index` as XSKMAP key).
    pub queue: u32,
    /// Zero-copy / copy policy.
    pub mode: BindMode,
    /// Bind with `XDP_USE_NEED_WAKEUP`: the kernel sets `XDP_RING_NEED_WAKEUP` on the fill
    /// ring when it wants a syscall; [`XskSocket::rx_burst`] then wakes it with `recvfrom`.
    pub need_wakeup: bool,
    /// Retry `bind` failing with `EBUSY` (queue still held by a recently closed socket) with
    /// exponential backoff (10 ms doubling to 500 ms) for up to this long. Zero: no retry.
    pub bind_retry: Duration,
}

impl XskConfig {
    /// Queue `queue` of `ifname`, [`BindMode::Auto`], need-wakeup on, 5 s `EBUSY` retry.
    pub fn new(ifname: impl Into<String>, queue: u32) -> Self {
        Self {
            ifname: ifname.into(),
            queue,
            mode: BindMode::Auto,
            need_wakeup: true,
            bind_retry: Duration::from_secs(5),
        }
    }
}

/// Errors from opening or querying an [`XskSocket`].
///
/// Syscall failures name the call and carry the `io::Error` (whose text ends in
/// `(os error N)`, the errno); [`XskError::raw_os_error`] returns that errno.
#[derive(Debug, thiserror::Error)]
pub enum XskError {
    /// A configuration value the kernel would reject (checked before any syscall).
    #[error("invalid AF_XDP configuration: {0}")]
    InvalidConfig(String),
    /// No such interface in this network namespace (`if_nametoindex(3)` or the `SIOCGIFMTU`
    /// ioctl failed).
    #[error("interface {ifname:?}: {call}: {source}")]
    NoSuchInterface {
        /// The name looked up.
        ifname: String,
        /// The failing lookup: `if_nametoindex` or `ioctl(SIOCGIFMTU)`.
        call: &'static str,
        /// Its errno (usually `ENODEV`).
        #[source]
        source: io::Error,
    },
    /// The interface's MTU admits frames longer than a chain of [`MAX_CHAIN_CHUNKS`] UMEM
    /// chunks holds: the kernel would drop every such frame. Refused at start-up instead
    /// ([`check_mtu`]).
    #[error(
        "interface {ifname} has MTU {mtu}, but a frame may span at most {MAX_CHAIN_CHUNKS} AF_XDP \
         UMEM chunks of {frame_size} bytes, each holding {} bytes ({frame_size} minus the \
         kernel's {XDP_PACKET_HEADROOM}-byte XDP headroom), so the largest MTU taken is \
         {max_mtu} (with a 14-byte Ethernet header and one 4-byte VLAN tag); longer frames \
         would be dropped by the kernel. Lower the MTU on both ends of the link (`ip link set \
         dev {ifname} mtu {max_mtu}`) or use a socket backend (`--backend recvmmsg`); see \
         docs/deploy.md, \"MTU\"",
        frame_size - XDP_PACKET_HEADROOM
    )]
    MtuTooLarge {
        /// Interface name.
        ifname: String,
        /// Its MTU (`SIOCGIFMTU`), bytes.
        mtu: u32,
        /// UMEM chunk size, bytes.
        frame_size: u32,
        /// [`max_mtu_multi_buffer`] of `frame_size`.
        max_mtu: u32,
    },
    /// The MTU needs multi-buffer AF_XDP (frames longer than one chunk) and the bind with
    /// `XDP_USE_SG` failed: the driver or the attach mode cannot chain buffers.
    #[error(
        "interface {ifname} has MTU {mtu}, above the {max_single} bytes one AF_XDP UMEM chunk \
         holds, so the socket binds with multi-buffer (XDP_USE_SG), which {mode} mode on this \
         interface refused: {source}. Use a mode whose driver supports multi-buffer XDP \
         (NETDEV_XDP_ACT_RX_SG; copy mode needs Linux 6.6 or later), or lower the MTU to \
         {max_single} on both ends of the link; see docs/deploy.md, \"MTU\""
    )]
    MultiBuffer {
        /// Interface name.
        ifname: String,
        /// Its MTU, bytes.
        mtu: u32,
        /// [`max_mtu`] of the chunk size.
        max_single: u32,
        /// The bind mode tried (`copy`, `zero-copy`).
        mode: &'static str,
        /// The bind's errno.
        #[source]
        source: io::Error,
    },
    /// A syscall failed; `call` names it and its argument, e.g. `setsockopt(XDP_UMEM_REG)`.
    #[error("{call}: {source}")]
    Syscall {
        /// The syscall, with the sockopt or mmap offset in parentheses.
        call: &'static str,
        /// The errno.
        #[source]
        source: io::Error,
    },
    /// [`HugePages::Require`] and the huge-page mmap failed (usually `ENOMEM`: too few free).
    #[error(
        "mmap(MAP_HUGETLB|MAP_HUGE_2MB) of {bytes} bytes ({pages} huge pages of 2 MiB) for the UMEM: {source}; reserve them with `echo N > /proc/sys/vm/nr_hugepages`"
    )]
    HugePages {
        /// Mapping size in bytes (rounded up to 2 MiB).
        bytes: usize,
        /// 2 MiB pages needed.
        pages: u32,
        /// The errno.
        #[source]
        source: io::Error,
    },
    /// `bind` failed (after the `EBUSY` retries and zero-copy fallback, if any).
    #[error("bind(AF_XDP {ifname} queue {queue}, {mode}) after {attempts} attempt(s): {source}")]
    Bind {
        /// Interface name.
        ifname: String,
        /// Queue id.
        queue: u32,
        /// The flags of the last attempt: `XDP_COPY` or `XDP_ZEROCOPY`.
        mode: &'static str,
        /// How many binds were tried in this mode.
        attempts: u32,
        /// The errno (`EBUSY`: another socket still holds the queue).
        #[source]
        source: io::Error,
    },
    /// The kernel's answer is unusable: too old (no ring `flags` offset: Linux < 5.4) or
    /// inconsistent (ring offsets outside the mapping).
    #[error("unusable AF_XDP kernel interface: {0}")]
    Unsupported(&'static str),
}

impl XskError {
    /// The errno behind this error, if it came from a syscall.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            XskError::NoSuchInterface { source, .. }
            | XskError::Syscall { source, .. }
            | XskError::HugePages { source, .. }
            | XskError::Bind { source, .. }
            | XskError::MultiBuffer { source, .. } => source.raw_os_error(),
            XskError::InvalidConfig(_)
            | XskError::Unsupported(_)
            | XskError::MtuTooLarge { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_umem_config_is_valid() {
        let c = UmemConfig::default();
        c.validate().unwrap();
        assert_eq!(c.umem_bytes(), 8 << 20);
    }

    #[test]
    fn umem_config_rejects_bad_values() {
        let ok = UmemConfig::default();
        for bad in [
            UmemConfig {
                frame_count: 3000,
                ..ok.clone()
            },
            UmemConfig {
                frame_size: 1024,
                ..ok.clone()
            },
            UmemConfig {
                rx_size: 0,
                ..ok.clone()
            },
            UmemConfig {
                fill_size: 100,
                ..ok.clone()
            },
            UmemConfig {
                frame_count: 1,
                ..ok.clone()
            },
        ] {
            assert!(
                matches!(bad.validate(), Err(XskError::InvalidConfig(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn largest_mtu_per_chunk_size() {
        assert_eq!(max_mtu(2048), 1774);
        assert_eq!(max_mtu(4096), 3822);
        assert_eq!(max_mtu_multi_buffer(2048), 32_238);
        let mtu = crate::sys::net::if_mtu("lo").unwrap();
        assert_eq!(
            check_mtu("lo", 2048).unwrap_err().to_string(),
            format!(
                "interface lo has MTU {mtu}, but a frame may span at most 18 AF_XDP UMEM chunks \
                 of 2048 bytes, each holding 1792 bytes (2048 minus the kernel's 256-byte XDP \
                 headroom), so the largest MTU taken is 32238 (with a 14-byte Ethernet header \
                 and one 4-byte VLAN tag); longer frames would be dropped by the kernel. Lower \
                 the MTU on both ends of the link (`ip link set dev lo mtu 32238`) or use a \
                 socket backend (`--backend recvmmsg`); see docs/deploy.md, \"MTU\""
            )
        );
        assert_eq!(
            check_mtu("lxdp-no-such0", 2048).unwrap_err().to_string(),
            "interface \"lxdp-no-such0\": ioctl(SIOCGIFMTU): No such device (os error 19)"
        );
    }

    #[test]
    fn error_carries_errno_and_call() {
        let e = XskError::Syscall {
            call: "socket(AF_XDP)",
            source: io::Error::from_raw_os_error(libc::EPERM),
        };
        assert_eq!(e.raw_os_error(), Some(libc::EPERM));
        let s = e.to_string();
        assert!(s.starts_with("socket(AF_XDP): "), "{s}");
        assert!(s.contains("os error 1"), "{s}");
    }
}
