//! Types shared by the lidarxdp XDP program (`ebpf/`) and userspace.
//!
//! Everything here is `#[repr(C)]`, `Copy` and free of padding holes the verifier could
//! trip over, because the same bytes are written by userspace into BPF maps and read by
//! the XDP program. The `user` feature implements [`aya::Pod`] for the map key and value.
//!
//! Byte orders: ports are stored in host order (the XDP program converts from network
//! order); IPv4 addresses are stored as the four address octets in wire order
//! (`u32::from_ne_bytes(octets)`), so `0` means "any source".
#![no_std]

/// Name of the BPF hash map from [`FilterKey`] to [`FilterValue`].
pub const FILTER_MAP: &str = "SENSORS";
/// Name of the `BPF_MAP_TYPE_XSKMAP` keyed by RX queue index (kernel doc: `Documentation/networking/af_xdp.rst`).
pub const XSK_MAP: &str = "XSKS";
/// Name of the `BPF_MAP_TYPE_PERCPU_ARRAY` of `u64` counters indexed by [`Counter`].
pub const COUNTER_MAP: &str = "COUNTERS";
/// Name of the XDP program inside the object file.
pub const PROGRAM_NAME: &str = "lidarxdp";
/// Maximum number of (port, source) entries the filter map holds.
pub const FILTER_MAP_CAPACITY: u32 = 256;
/// Maximum RX queue index + 1 the XSKMAP can hold.
pub const XSK_MAP_CAPACITY: u32 = 64;
/// Name of the `BPF_MAP_TYPE_LRU_HASH` from [`FragKey`] to [`FragValue`]: IPv4 datagrams of a
/// sensor whose first fragment was seen, so their later fragments (which carry no UDP header)
/// are steered to the same AF_XDP socket.
pub const FRAG_MAP: &str = "FRAGS";
/// Entries of [`FRAG_MAP`]. Each lives only while its datagram's fragments arrive (microseconds);
/// 1024 covers every datagram in flight of many sensors. The LRU evicts the oldest when full.
pub const FRAG_MAP_CAPACITY: u32 = 1024;
/// How long, in ns (`bpf_ktime_get_ns`, CLOCK_MONOTONIC), a [`FRAG_MAP`] entry steers later
/// fragments after its first fragment: 1 s. Bounds the effect of a stale entry when the 16-bit IP
/// identification wraps (>= 25 s at an Ouster's 2,560 datagrams/s). Userspace reassembly uses the
/// same timeout by default.
pub const FRAG_TRACK_NS: u64 = 1_000_000_000;

/// Key of the sensor filter map: which UDP destination port (and optionally which IPv4
/// source) belongs to a sensor.
///
/// Layout (8 bytes): `dst_port` u16 host order @0, `_pad` u16 = 0 @2, `src_ip` @4 as the
/// four wire-order octets of the IPv4 source address, or `0` for "any source".
/// The XDP program looks up `(port, src)` first and then `(port, 0)`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct FilterKey {
    /// UDP destination port, host byte order.
    pub dst_port: u16,
    /// Always zero; keeps the key free of uninitialised padding.
    pub _pad: u16,
    /// IPv4 source address octets in wire order read as a native `u32`; `0` = any.
    pub src_ip: u32,
}

impl FilterKey {
    /// Key for `dst_port` from the source with wire-order octets `src` (`[0; 4]` = any).
    pub const fn new(dst_port: u16, src: [u8; 4]) -> Self {
        Self {
            dst_port,
            _pad: 0,
            src_ip: u32::from_ne_bytes(src),
        }
    }
}

/// Value of the sensor filter map (4 bytes): `sensor_id` u16 @0, `flags` u16 @2 (reserved, 0).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct FilterValue {
    /// Index of the sensor in the daemon's configuration.
    pub sensor_id: u16,
    /// Reserved for future use; must be 0.
    pub flags: u16,
}

/// Key of [`FRAG_MAP`]: RFC 791's identity of a datagram, (source, destination, protocol,
/// identification), as read from the IPv4 header of every fragment.
///
/// Layout (12 bytes, no padding): `src_ip` @0 and `dst_ip` @4 as wire-order octets read as a
/// native `u32` (like [`FilterKey::src_ip`]), `id` u16 host order @8, `protocol` u8 @10,
/// `_pad` u8 = 0 @11.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct FragKey {
    /// IPv4 source address octets in wire order read as a native `u32`.
    pub src_ip: u32,
    /// IPv4 destination address octets in wire order read as a native `u32`.
    pub dst_ip: u32,
    /// IPv4 identification field, host byte order.
    pub id: u16,
    /// IPv4 protocol number (17 = UDP).
    pub protocol: u8,
    /// Always zero; keeps the key free of uninitialised padding.
    pub _pad: u8,
}

impl FragKey {
    /// Key for the datagram `id` of `protocol` from `src` to `dst` (wire-order octets).
    pub const fn new(src: [u8; 4], dst: [u8; 4], id: u16, protocol: u8) -> Self {
        Self {
            src_ip: u32::from_ne_bytes(src),
            dst_ip: u32::from_ne_bytes(dst),
            id,
            protocol,
            _pad: 0,
        }
    }
}

/// Value of [`FRAG_MAP`] (16 bytes): `first_ns` u64 @0, the `bpf_ktime_get_ns` time the first
/// fragment was seen; `sensor_id` u16 @8 from the matching [`FilterValue`]; `_pad` @10 = 0.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct FragValue {
    /// CLOCK_MONOTONIC time of the first fragment, ns.
    pub first_ns: u64,
    /// Sensor the datagram belongs to.
    pub sensor_id: u16,
    /// Always zero.
    pub _pad: [u16; 3],
}

/// Index of each per-CPU counter kept by the XDP program in [`COUNTER_MAP`].
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// Every frame the program was run on.
    Seen = 0,
    /// Sensor frames handed to an AF_XDP socket by `bpf_redirect_map`.
    Redirected = 1,
    /// Frames passed to the kernel stack because they are not sensor traffic.
    Passed = 2,
    /// Frames whose Ethernet/VLAN/IPv4/UDP headers were truncated or invalid (then passed).
    Malformed = 3,
    /// Sensor frames passed to the kernel because no AF_XDP socket is bound on their RX queue.
    NoSocket = 4,
    /// First fragments (offset 0, MF set) of sensor datagrams recorded in [`FRAG_MAP`].
    FragTracked = 5,
    /// IPv4 fragments, first or later, redirected to an AF_XDP socket (also in `Redirected`).
    FragRedirected = 6,
    /// Later fragments (offset != 0) passed because no live [`FRAG_MAP`] entry matched them: not
    /// a sensor's, first fragment not seen, or older than [`FRAG_TRACK_NS`] (also in `Passed`).
    FragPassed = 7,
    /// First fragments of sensor datagrams whose [`FRAG_MAP`] insert failed (their later
    /// fragments will be passed); the first fragment itself is still redirected.
    FragTrackFailed = 8,
}

impl Counter {
    /// Number of counters, i.e. the length of [`COUNTER_MAP`].
    pub const COUNT: u32 = 9;
    /// All counters in index order.
    pub const ALL: [Counter; Self::COUNT as usize] = [
        Counter::Seen,
        Counter::Redirected,
        Counter::Passed,
        Counter::Malformed,
        Counter::NoSocket,
        Counter::FragTracked,
        Counter::FragRedirected,
        Counter::FragPassed,
        Counter::FragTrackFailed,
    ];
    /// Stable snake_case name used in logs and metrics.
    pub const fn name(self) -> &'static str {
        match self {
            Counter::Seen => "seen",
            Counter::Redirected => "redirected",
            Counter::Passed => "passed",
            Counter::Malformed => "malformed",
            Counter::NoSocket => "no_socket",
            Counter::FragTracked => "frag_tracked",
            Counter::FragRedirected => "frag_redirected",
            Counter::FragPassed => "frag_passed",
            Counter::FragTrackFailed => "frag_track_failed",
        }
    }
}

// SAFETY: FilterKey is #[repr(C)], Copy, consists only of integers, and has no padding
// (2 + 2 + 4 bytes, 4-byte aligned), so every bit pattern is valid and all bytes are initialised.
#[cfg(feature = "user")]
unsafe impl aya::Pod for FilterKey {}
// SAFETY: FilterValue is #[repr(C)], Copy, two u16 fields without padding.
#[cfg(feature = "user")]
unsafe impl aya::Pod for FilterValue {}
// SAFETY: FragKey is #[repr(C)], Copy, integers only, no padding (4 + 4 + 2 + 1 + 1 bytes,
// 4-byte aligned).
#[cfg(feature = "user")]
unsafe impl aya::Pod for FragKey {}
// SAFETY: FragValue is #[repr(C)], Copy, integers only, no padding (8 + 2 + 6 bytes, 8-aligned).
#[cfg(feature = "user")]
unsafe impl aya::Pod for FragValue {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_have_no_padding() {
        assert_eq!(core::mem::size_of::<FilterKey>(), 8);
        assert_eq!(core::mem::size_of::<FragKey>(), 12);
        assert_eq!(core::mem::size_of::<FragValue>(), 16);
        assert_eq!(Counter::ALL.len(), Counter::COUNT as usize);
        for (i, c) in Counter::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i);
        }
    }
}
