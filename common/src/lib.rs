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
}

impl Counter {
    /// Number of counters, i.e. the length of [`COUNTER_MAP`].
    pub const COUNT: u32 = 5;
    /// All counters in index order.
    pub const ALL: [Counter; Self::COUNT as usize] = [
        Counter::Seen,
        Counter::Redirected,
        Counter::Passed,
        Counter::Malformed,
        Counter::NoSocket,
    ];
    /// Stable snake_case name used in logs and metrics.
    pub const fn name(self) -> &'static str {
        match self {
            Counter::Seen => "seen",
            Counter::Redirected => "redirected",
            Counter::Passed => "passed",
            Counter::Malformed => "malformed",
            Counter::NoSocket => "no_socket",
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
