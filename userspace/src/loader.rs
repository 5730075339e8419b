//! Loading the XDP program, attaching it to an interface, and filling its maps (aya).
//!
//! The program is attached through a BPF link where the kernel supports it (Linux >= 5.9), so
//! it is detached by the kernel when the daemon exits for any reason, including SIGKILL.
//! Map layouts are the shared types in [`lidarxdp_common`].

use std::os::fd::AsRawFd;

use aya::{
    Ebpf, EbpfLoader,
    maps::{HashMap, MapData, PerCpuArray, XskMap},
    programs::{Xdp, XdpMode},
};
use lidarxdp_common::{
    COUNTER_MAP, Counter, FILTER_MAP, FilterKey, FilterValue, PROGRAM_NAME, XSK_MAP,
};

/// The XDP object embedded at build time by `cargo xtask build-ebpf` (empty when the daemon was
/// built without it; then [`XdpProgram::load_and_attach`] needs an object file).
pub static EMBEDDED_OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/lidarxdp.bpf.o"));

/// How to attach the XDP program (kernel `XDP_FLAGS_*`, `include/uapi/linux/if_link.h`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AttachMode {
    /// Native (driver) mode, falling back to generic when the driver refuses.
    Auto,
    /// Native (driver) XDP only (`XDP_FLAGS_DRV_MODE`).
    Native,
    /// Generic XDP in the kernel stack (`XDP_FLAGS_SKB_MODE`); works on every interface.
    Generic,
}

/// Errors from loading or attaching the program or touching its maps.
#[derive(Debug, thiserror::Error)]
pub enum LoaderError {
    /// The daemon was built without an embedded object and none was given.
    #[error(
        "no XDP object: this build has none embedded; build with `cargo xtask build` or pass --bpf-object FILE"
    )]
    NoObject,
    /// The kernel or aya refused the object.
    #[error("loading the XDP object: {0}")]
    Load(#[from] aya::EbpfError),
    /// A program-level failure (verifier, attach).
    #[error("XDP program {what}: {source}")]
    Program {
        /// What was being done.
        what: String,
        /// Underlying error.
        #[source]
        source: aya::programs::ProgramError,
    },
    /// Attaching failed with `ERANGE` ("Numerical result out of range"): the driver refuses
    /// XDP at the interface's MTU. The program is multi-buffer aware (`xdp.frags`), so a
    /// driver that supports multi-buffer XDP takes any MTU (veth does); one that does not
    /// refuses frames longer than one page with headroom.
    #[error(
        "XDP program attach to {iface} ({mode}) failed with ERANGE (\"Numerical result out of \
         range\"): the driver refuses XDP at MTU {mtu}: it does not support multi-buffer XDP \
         (NETDEV_XDP_ACT_RX_SG) and a frame must fit one page with headroom; lidarxdp's \
         AF_XDP path takes MTU {max_mtu} at most where multi-buffer works (see \
         docs/deploy.md, \"MTU\"): lower the MTU on both ends of the link, or try the other \
         XDP mode (--xdp-mode generic)"
    )]
    AttachMtu {
        /// Interface name.
        iface: String,
        /// `native` or `generic`.
        mode: &'static str,
        /// The interface's MTU (`SIOCGIFMTU`), or `unknown`.
        mtu: String,
        /// [`crate::xsk::max_mtu`] of the default UMEM chunk size.
        max_mtu: u32,
        /// The attach error (`ERANGE`), boxed to keep the error small.
        #[source]
        source: Box<aya::programs::ProgramError>,
    },
    /// A map is missing from the object or has the wrong type.
    #[error("XDP map {name}: {source}")]
    Map {
        /// Map name.
        name: &'static str,
        /// Underlying error.
        #[source]
        source: aya::maps::MapError,
    },
    /// A map named in `lidarxdp_common` is not in the object.
    #[error("XDP object has no map named {0}")]
    MissingMap(&'static str),
}

/// The XDP program's counters: daemon-wide, no labels (`lidarxdp_xdp_*`).
pub const XDP_COUNTERS: lidarxdp_core::counters::Group = lidarxdp_core::counters::Group {
    name: "xdp",
    labels: &[],
};

lidarxdp_core::counter_set! {
    /// Sums of the XDP program's per-CPU counters ([`Counter`]), over CPUs (and, in the
    /// daemon's exports, over interfaces).
    pub struct ProgramCounters in XDP_COUNTERS;
    {
        seen: Counter "frames" "Frames the XDP program ran on.",
        redirected: Counter "frames" "Frames redirected into an AF_XDP socket.",
        passed: Counter "frames" "Frames passed to the kernel stack.",
        malformed: Counter "frames" "Frames with truncated or invalid headers (passed).",
        no_socket: Counter "frames" "Sensor frames passed because no AF_XDP socket was bound on their queue.",
        frag_tracked: Counter "fragments" "First IPv4 and IPv6 fragments of sensor datagrams tracked.",
        /// Part of `redirected`.
        frag_redirected: Counter "fragments" "IPv4 and IPv6 fragments redirected into an AF_XDP socket.",
        /// Part of `passed`.
        frag_passed: Counter "fragments" "Later IPv4 and IPv6 fragments passed (no tracked datagram).",
        /// Their later fragments pass.
        frag_track_failed: Counter "fragments" "First fragments whose tracking entry could not be written.",
    }
}

/// The loaded and attached XDP program with handles to its maps. Dropping it detaches the
/// program and unloads it.
pub struct XdpProgram {
    _ebpf: Ebpf,
    filter: HashMap<MapData, FilterKey, FilterValue>,
    xsks: XskMap<MapData>,
    counters: PerCpuArray<MapData, u64>,
    mode: AttachMode,
}

impl XdpProgram {
    /// Loads `object` (or [`EMBEDDED_OBJECT`] when `None`), verifies it and attaches it to
    /// `iface` in `mode`. With [`AttachMode::Auto`], native mode is tried first and generic mode
    /// used when the driver refuses.
    ///
    /// Errors: [`LoaderError::NoObject`], verifier or attach failures (unknown interface,
    /// another program already attached, missing CAP_BPF/CAP_NET_ADMIN),
    /// [`LoaderError::AttachMtu`] when the driver refuses XDP at the interface's MTU
    /// (`ERANGE`; with [`AttachMode::Auto`] only when generic mode refuses too).
    pub fn load_and_attach(
        object: Option<&[u8]>,
        iface: &str,
        mode: AttachMode,
    ) -> Result<Self, LoaderError> {
        let bytes = object.unwrap_or(EMBEDDED_OBJECT);
        if bytes.is_empty() {
            return Err(LoaderError::NoObject);
        }
        let mut ebpf = EbpfLoader::new().load(bytes)?;
        let program: &mut Xdp = ebpf
            .program_mut(PROGRAM_NAME)
            .ok_or(LoaderError::MissingMap(PROGRAM_NAME))?
            .try_into()
            .map_err(|source| LoaderError::Program {
                what: "type".into(),
                source,
            })?;
        program.load().map_err(|source| LoaderError::Program {
            what: "load (verifier)".into(),
            source,
        })?;
        let used = match mode {
            AttachMode::Generic => {
                attach(program, iface, XdpMode::Skb)?;
                AttachMode::Generic
            }
            AttachMode::Native => {
                attach(program, iface, XdpMode::Driver)?;
                AttachMode::Native
            }
            AttachMode::Auto => match attach(program, iface, XdpMode::Driver) {
                Ok(()) => AttachMode::Native,
                Err(e) => {
                    log::info!("native XDP refused on {iface} ({e}); using generic XDP");
                    attach(program, iface, XdpMode::Skb)?;
                    AttachMode::Generic
                }
            },
        };
        let filter = take_map(&mut ebpf, FILTER_MAP)?;
        let filter = HashMap::try_from(filter).map_err(|source| LoaderError::Map {
            name: FILTER_MAP,
            source,
        })?;
        let xsks =
            XskMap::try_from(take_map(&mut ebpf, XSK_MAP)?).map_err(|source| LoaderError::Map {
                name: XSK_MAP,
                source,
            })?;
        let counters =
            PerCpuArray::try_from(take_map(&mut ebpf, COUNTER_MAP)?).map_err(|source| {
                LoaderError::Map {
                    name: COUNTER_MAP,
                    source,
                }
            })?;
        Ok(Self {
            _ebpf: ebpf,
            filter,
            xsks,
            counters,
            mode: used,
        })
    }

    /// The attach mode actually in use ([`AttachMode::Native`] or [`AttachMode::Generic`]).
    pub fn mode(&self) -> AttachMode {
        self.mode
    }

    /// Steers UDP packets to `dst_port` from source `src` (IPv4 or IPv6, over either family's
    /// fragments too; `None` = any source) to the sensor `sensor_id`.
    pub fn add_sensor(
        &mut self,
        dst_port: u16,
        src: Option<std::net::IpAddr>,
        sensor_id: u16,
    ) -> Result<(), LoaderError> {
        let key = FilterKey::new(dst_port, src.map_or([0; 16], filter_addr));
        let value = FilterValue {
            sensor_id,
            flags: 0,
        };
        self.filter
            .insert(key, value, 0)
            .map_err(|source| LoaderError::Map {
                name: FILTER_MAP,
                source,
            })
    }

    /// Puts the AF_XDP socket `fd` into the XSKMAP slot for RX queue `queue`, after which
    /// matching packets on that queue are redirected to it.
    pub fn bind_socket(&mut self, queue: u32, fd: impl AsRawFd) -> Result<(), LoaderError> {
        self.xsks
            .set(queue, fd, 0)
            .map_err(|source| LoaderError::Map {
                name: XSK_MAP,
                source,
            })
    }

    /// Reads and sums the per-CPU counters.
    pub fn counters(&self) -> Result<ProgramCounters, LoaderError> {
        let mut sums = [0u64; Counter::COUNT as usize];
        for (i, sum) in sums.iter_mut().enumerate() {
            let values = self
                .counters
                .get(&(i as u32), 0)
                .map_err(|source| LoaderError::Map {
                    name: COUNTER_MAP,
                    source,
                })?;
            *sum = values.iter().sum();
        }
        Ok(ProgramCounters {
            seen: sums[Counter::Seen as usize],
            redirected: sums[Counter::Redirected as usize],
            passed: sums[Counter::Passed as usize],
            malformed: sums[Counter::Malformed as usize],
            no_socket: sums[Counter::NoSocket as usize],
            frag_tracked: sums[Counter::FragTracked as usize],
            frag_redirected: sums[Counter::FragRedirected as usize],
            frag_passed: sums[Counter::FragPassed as usize],
            frag_track_failed: sums[Counter::FragTrackFailed as usize],
        })
    }
}

fn attach(program: &mut Xdp, iface: &str, mode: XdpMode) -> Result<(), LoaderError> {
    program
        .attach(iface, mode)
        .map(|_| ())
        .map_err(|source| attach_error(iface, mode, source))
}

/// The errno behind an attach failure (`bpf_link_create`, or the netlink fallback).
fn attach_errno(e: &aya::programs::ProgramError) -> Option<i32> {
    use aya::programs::{ProgramError, xdp::XdpError};
    match e {
        ProgramError::SyscallError(s) => s.io_error.raw_os_error(),
        ProgramError::XdpError(XdpError::NetlinkError(n)) => n.raw_os_error(),
        _ => None,
    }
}

/// [`LoaderError::AttachMtu`] for `ERANGE`, [`LoaderError::Program`] otherwise.
fn attach_error(iface: &str, mode: XdpMode, source: aya::programs::ProgramError) -> LoaderError {
    if attach_errno(&source) == Some(libc::ERANGE) {
        return LoaderError::AttachMtu {
            iface: iface.to_owned(),
            mode: match mode {
                XdpMode::Skb => "generic",
                _ => "native",
            },
            mtu: crate::sys::net::if_mtu(iface)
                .map_or_else(|_| "unknown".to_owned(), |m| m.to_string()),
            max_mtu: crate::xsk::max_mtu_multi_buffer(crate::xsk::UmemConfig::default().frame_size),
            source: Box::new(source),
        };
    }
    LoaderError::Program {
        what: format!("attach to {iface} ({mode:?})"),
        source,
    }
}

/// The 16 address bytes of `ip` in the XDP filter's key ([`FilterKey::src_ip`]): an IPv6
/// address as it is, an IPv4 one IPv4-mapped (`::ffff:a.b.c.d`, RFC 4291 section 2.5.5.2).
pub fn filter_addr(ip: std::net::IpAddr) -> [u8; 16] {
    match ip {
        std::net::IpAddr::V4(a) => lidarxdp_common::ipv4_mapped(a.octets()),
        std::net::IpAddr::V6(a) => a.octets(),
    }
}

fn take_map(ebpf: &mut Ebpf, name: &'static str) -> Result<aya::maps::Map, LoaderError> {
    ebpf.take_map(name).ok_or(LoaderError::MissingMap(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erange_at_attach_explains_the_mtu() {
        let source = aya::programs::ProgramError::SyscallError(aya::sys::SyscallError {
            call: "bpf_link_create",
            io_error: std::io::Error::from_raw_os_error(libc::ERANGE),
        });
        let e = attach_error("lxdp-no-such0", XdpMode::Driver, source);
        assert_eq!(
            e.to_string(),
            "XDP program attach to lxdp-no-such0 (native) failed with ERANGE (\"Numerical result \
             out of range\"): the driver refuses XDP at MTU unknown: it does not support \
             multi-buffer XDP (NETDEV_XDP_ACT_RX_SG) and a frame must fit one page with \
             headroom; lidarxdp's AF_XDP path takes MTU 32238 at most where multi-buffer works \
             (see docs/deploy.md, \"MTU\"): lower the MTU on both ends of the link, or try the \
             other XDP mode (--xdp-mode generic)"
        );
        let other = aya::programs::ProgramError::SyscallError(aya::sys::SyscallError {
            call: "bpf_link_create",
            io_error: std::io::Error::from_raw_os_error(libc::EBUSY),
        });
        assert!(matches!(
            attach_error("lo", XdpMode::Skb, other),
            LoaderError::Program { .. }
        ));
    }
}
