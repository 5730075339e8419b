//! Types shared by the lidarxdp XDP program (`ebpf/`) and userspace.
//!
//! Everything here is `#[repr(C)]`, `Copy` and free of padding holes the verifier could
//! trip over, because the same bytes are written by userspace into BPF maps and read by
//! the XDP program. The `user` feature implements [`aya::Pod`] for the map key and value.
//!
//! Byte orders: ports are stored in host order (the XDP program converts from network
//! order); addresses are stored as 16 wire-order octets: an IPv6 address as it is, an IPv4
//! address IPv4-mapped (`::ffff:a.b.c.d`, RFC 4291 section 2.5.5.2, [`ipv4_mapped`]), so one
//! map serves both families and all-zero (`::`) means "any source".
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

/// The IPv4-mapped IPv6 form `::ffff:a.b.c.d` of the IPv4 address `a` (wire-order octets),
/// as the maps store IPv4 addresses (RFC 4291 section 2.5.5.2).
#[inline(always)]
pub const fn ipv4_mapped(a: [u8; 4]) -> [u8; 16] {
    [
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a[0], a[1], a[2], a[3],
    ]
}

/// Key of the sensor filter map: which UDP destination port (and optionally which IPv4 or
/// IPv6 source) belongs to a sensor.
///
/// Layout (20 bytes, 2-byte aligned): `dst_port` u16 host order @0, `_pad` u16 = 0 @2,
/// `src_ip` @4 as 16 wire-order octets (IPv6 as is, IPv4 IPv4-mapped), all zero for "any
/// source". The XDP program looks up `(port, src)` first and then `(port, ::)`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct FilterKey {
    /// UDP destination port, host byte order.
    pub dst_port: u16,
    /// Always zero; keeps the key free of uninitialised padding.
    pub _pad: u16,
    /// Source address octets in wire order (IPv4 IPv4-mapped); all zero = any.
    pub src_ip: [u8; 16],
}

impl FilterKey {
    /// Key for `dst_port` from the source with wire-order octets `src` (IPv4 IPv4-mapped,
    /// [`ipv4_mapped`]; `[0; 16]` = any).
    #[inline(always)]
    pub const fn new(dst_port: u16, src: [u8; 16]) -> Self {
        Self {
            dst_port,
            _pad: 0,
            src_ip: src,
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

/// Key of [`FRAG_MAP`]: the identity of a datagram as read from every fragment, RFC 791's
/// (source, destination, protocol, identification) for IPv4, RFC 8200's (source, destination,
/// identification) for IPv6 (`protocol` 0), as userspace reassembly keys them.
///
/// Layout (40 bytes, 4-byte aligned, no padding): `src_ip` @0 and `dst_ip` @16 as 16 wire-order
/// octets (IPv4 IPv4-mapped, like [`FilterKey::src_ip`]), `id` u32 host order @32 (IPv4's
/// 16-bit field widened), `protocol` u8 @36, `_pad` [u8; 3] = 0 @37.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct FragKey {
    /// Source address octets in wire order (IPv4 IPv4-mapped).
    pub src_ip: [u8; 16],
    /// Destination address octets in wire order (IPv4 IPv4-mapped).
    pub dst_ip: [u8; 16],
    /// Identification, host byte order (IPv4: 16 bits, IPv6: 32 bits).
    pub id: u32,
    /// IPv4 protocol number (17 = UDP); 0 for IPv6.
    pub protocol: u8,
    /// Always zero; keeps the key free of uninitialised padding.
    pub _pad: [u8; 3],
}

impl FragKey {
    /// Key for the datagram `id` of `protocol` (0 for IPv6) from `src` to `dst` (16 wire-order
    /// octets each).
    #[inline(always)]
    pub const fn new(src: [u8; 16], dst: [u8; 16], id: u32, protocol: u8) -> Self {
        Self {
            src_ip: src,
            dst_ip: dst,
            id,
            protocol,
            _pad: [0; 3],
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
    /// Frames whose Ethernet/VLAN/IPv4/IPv6/UDP headers were truncated or invalid (IPv4 IHL
    /// below 5, IPv6 extension headers beyond the walk's bound), then passed.
    Malformed = 3,
    /// Sensor frames passed to the kernel because no AF_XDP socket is bound on their RX queue.
    NoSocket = 4,
    /// First fragments (offset 0, MF set) of sensor datagrams recorded in [`FRAG_MAP`].
    FragTracked = 5,
    /// IPv4 and IPv6 fragments, first or later, redirected to an AF_XDP socket (also in `Redirected`).
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
// (2 + 2 + 16 bytes, 2-byte aligned), so every bit pattern is valid and all bytes are initialised.
#[cfg(feature = "user")]
unsafe impl aya::Pod for FilterKey {}
// SAFETY: FilterValue is #[repr(C)], Copy, two u16 fields without padding.
#[cfg(feature = "user")]
unsafe impl aya::Pod for FilterValue {}
// SAFETY: FragKey is #[repr(C)], Copy, integers only, no padding (16 + 16 + 4 + 1 + 3 bytes,
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
        assert_eq!(core::mem::size_of::<FilterKey>(), 20);
        assert_eq!(core::mem::size_of::<FragKey>(), 40);
        assert_eq!(
            ipv4_mapped([192, 168, 1, 201]),
            [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 168, 1, 201]
        );
        assert_eq!(core::mem::size_of::<FragValue>(), 16);
        assert_eq!(Counter::ALL.len(), Counter::COUNT as usize);
        for (i, c) in Counter::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i);
        }
    }
}
