//! Inputs of `peers` (issue 15): the captures compared, and the files made from them.
//!
//! * Payload files (decode only): records of `[u64 LE pcap time ns][u32 LE length][UDP
//!   payload]`, the capture's data packets looped `loops` times. Every tool loads the file into
//!   memory, decodes the first loop untimed (warm-up) and times the rest.
//! * Looped recordings (end to end, peak memory): a classic pcap (µs, Ethernet) with the
//!   capture's datagrams repeated `loops` times, each datagram written as one unfragmented
//!   Ethernet/IPv4/UDP record with the capture's addresses and ports.
//!
//! Loop `k` is shifted by `k` × the capture's span (last − first record time plus one mean
//! packet gap) in the pcap record time and, so that every decoder sees a continuing stream:
//! * Velodyne: the payload's time stamp (µs past the hour, bytes 1200..1204) by the same span,
//!   modulo one hour;
//! * Ouster: every column time stamp by the span, and the frame id (packet header, or each
//!   column for the LEGACY profile) by the capture's frame count, so a loop is new frames
//!   rather than a replay of the same `frame_id` (which both ouster-sdk's batcher and
//!   lidarxdp would merge or drop);
//! * Hesai: nothing (the frame cut is by azimuth; time stamps step back once per loop, as in
//!   `userspace/benches/hesai.rs`, which replays a capture the same way).

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use lidarxdp::offline::{UdpDatagram, udp_payloads};
use lidarxdp_core::sensor::SensorModel;
use lidarxdp_core::sensor::ouster::metadata::OusterMetadata;
use lidarxdp_core::sensor::ouster::packet::{Packet, PacketFormat, Profile};
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};

/// Vendor family of a capture, which names its peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Vendor {
    /// Peer: velodyne-decoder (Python, C++ core).
    Velodyne,
    /// Peer: ouster-sdk (Python, C++ core).
    Ouster,
    /// Peer: HesaiLidar_SDK_2.0 (C++, our harness).
    Hesai,
}

impl Vendor {
    /// Lower-case name (CSV, file names).
    pub fn name(self) -> &'static str {
        match self {
            Vendor::Velodyne => "velodyne",
            Vendor::Ouster => "ouster",
            Vendor::Hesai => "hesai",
        }
    }
    /// The peer's name in tables.
    pub fn peer(self) -> &'static str {
        match self {
            Vendor::Velodyne => "velodyne-decoder",
            Vendor::Ouster => "ouster-sdk",
            Vendor::Hesai => "Hesai SDK",
        }
    }
}

/// One capture of `../shared/data` both lidarxdp and the vendor's peer decode.
#[derive(Clone, Debug)]
pub struct Capture {
    /// Short name (rows, file names).
    pub name: &'static str,
    /// Vendor (and so the peer).
    pub vendor: Vendor,
    /// lidarxdp's model.
    pub model: SensorModel,
    /// velodyne-decoder's `Model` name (Velodyne only).
    pub vd_model: &'static str,
    /// The pcap, relative to the data folder.
    pub pcap: &'static str,
    /// Calibration (Velodyne YAML, Hesai CSV) or Ouster metadata JSON, relative to the data
    /// folder.
    pub calibration: &'static str,
}

const fn cap(
    name: &'static str,
    vendor: Vendor,
    model: SensorModel,
    vd_model: &'static str,
    pcap: &'static str,
    calibration: &'static str,
) -> Capture {
    Capture {
        name,
        vendor,
        model,
        vd_model,
        pcap,
        calibration,
    }
}

/// Every capture compared: all Velodyne, Ouster and Hesai captures of `../shared/data` (the
/// VLP-16 capture with position packets is the same sensor and mode as `vlp16_strongest`
/// and is left out).
pub const CAPTURES: &[Capture] = &[
    cap(
        "vlp16_strongest",
        Vendor::Velodyne,
        SensorModel::Vlp16,
        "VLP16",
        "velodyne/vlp16/vlp16_strongest_84pkt.pcap",
        "velodyne/vlp16/calibration/VLP16db.yaml",
    ),
    cap(
        "vlp16_dual",
        Vendor::Velodyne,
        SensorModel::Vlp16,
        "VLP16",
        "velodyne/vlp16/vlp16_dual_nebula_603pkt.pcap",
        "velodyne/vlp16/calibration/VLP16_nebula.yaml",
    ),
    cap(
        "vlp32c",
        Vendor::Velodyne,
        SensorModel::Vlp32c,
        "VLP32C",
        "velodyne/vlp32c/vlp32c_strongest_fov270to90_nebula_379pkt.pcap",
        "velodyne/vlp32c/calibration/VLP32_nebula.yaml",
    ),
    cap(
        "vls128",
        Vendor::Velodyne,
        SensorModel::Vls128,
        "VLS128",
        "velodyne/vls128/vls128_strongest_nebula_2193pkt.pcap",
        "velodyne/vls128/calibration/VLS128_nebula.yaml",
    ),
    cap(
        "os2-128",
        Vendor::Ouster,
        SensorModel::Ouster,
        "",
        "ouster/os2-128/OS-2-128-U1_v2.3.0_1024x10.pcap",
        "ouster/os2-128/OS-2-128-U1_v2.3.0_1024x10.json",
    ),
    cap(
        "os0-128",
        Vendor::Ouster,
        SensorModel::Ouster,
        "",
        "ouster/os0-128/OS-0-128-U1_v2.3.0_1024x10.pcap",
        "ouster/os0-128/OS-0-128-U1_v2.3.0_1024x10.json",
    ),
    cap(
        "os0-32_dual",
        Vendor::Ouster,
        SensorModel::Ouster,
        "",
        "ouster/os0-32/OS-0-32-U1_v2.2.0_1024x10.pcap",
        "ouster/os0-32/OS-0-32-U1_v2.2.0_1024x10.json",
    ),
    cap(
        "os1-32_legacy",
        Vendor::Ouster,
        SensorModel::Ouster,
        "",
        "ouster/os1-32/OS-1-32-G_v2.1.1_1024x10.pcap",
        "ouster/os1-32/OS-1-32-G_v2.1.1_1024x10.json",
    ),
    cap(
        "os1-64_legacy",
        Vendor::Ouster,
        SensorModel::Ouster,
        "",
        "ouster/os1-64/os1-64_legacy_fw1.1x_3frames.pcap",
        "ouster/os1-64/os1-64_legacy_fw1.1x_3frames.json",
    ),
    cap(
        "pandar40p",
        Vendor::Hesai,
        SensorModel::Pandar40p,
        "",
        "hesai/pandar40p/pandar40p_nebula.pcap",
        "hesai/pandar40p/Pandar40P.csv",
    ),
    cap(
        "pandar64",
        Vendor::Hesai,
        SensorModel::Pandar64,
        "",
        "hesai/pandar64/pandar64_nebula.pcap",
        "hesai/pandar64/Pandar64.csv",
    ),
    cap(
        "pandarqt64",
        Vendor::Hesai,
        SensorModel::PandarQt64,
        "",
        "hesai/pandarqt64/pandarqt64_nebula.pcap",
        "hesai/pandarqt64/PandarQT64.csv",
    ),
    cap(
        "pandarqt128",
        Vendor::Hesai,
        SensorModel::PandarQt128,
        "",
        "hesai/pandarqt128/pandarqt128_nebula.pcap",
        "hesai/pandarqt128/PandarQT128.csv",
    ),
    cap(
        "pandarxt32",
        Vendor::Hesai,
        SensorModel::PandarXt32,
        "",
        "hesai/pandarxt32/pandarxt32_nebula.pcap",
        "hesai/pandarxt32/PandarXT32.csv",
    ),
    cap(
        "pandarxt32m",
        Vendor::Hesai,
        SensorModel::PandarXt32m,
        "",
        "hesai/pandarxt32m/pandarxt32m_nebula.pcap",
        "hesai/pandarxt32m/PandarXT32M.csv",
    ),
];

/// Velodyne data packet length (bytes).
const VELODYNE_PACKET_LEN: usize = 1206;
/// One hour in µs: Velodyne time stamps count µs past the hour.
const HOUR_US: u64 = 3_600_000_000;

/// A capture read into memory, with what looping it needs.
pub struct Loaded {
    /// The capture's vendor.
    pub vendor: Vendor,
    /// Every UDP datagram, in capture order.
    pub datagrams: Vec<UdpDatagram>,
    /// Which datagrams are data packets of the sensor (the others: Velodyne position
    /// packets, Ouster IMU packets).
    pub is_data: Vec<bool>,
    /// Shift of one loop, ns (record span plus one mean gap).
    pub span_ns: u64,
    /// Ouster: the packet format, and frames per loop (frame ids spanned).
    pub ouster: Option<(PacketFormat, u16)>,
    /// Bytes of the capture's data payloads (one loop).
    pub data_bytes: u64,
}

/// Reads a capture and works out its loop shift.
pub fn load(data_dir: &Path, c: &Capture) -> Result<Loaded> {
    let path = data_dir.join(c.pcap);
    let datagrams: Vec<UdpDatagram> = udp_payloads(&path)
        .with_context(|| format!("open {}", path.display()))?
        .collect::<Result<_, _>>()
        .with_context(|| format!("read {}", path.display()))?;
    if datagrams.len() < 2 {
        bail!("{}: fewer than 2 datagrams", path.display());
    }
    let ouster_fmt = match c.vendor {
        Vendor::Ouster => {
            let p = data_dir.join(c.calibration);
            let bytes = std::fs::read(&p).with_context(|| format!("read {}", p.display()))?;
            let m = OusterMetadata::from_bytes(&bytes, &p)
                .map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?;
            Some(m.format)
        }
        _ => None,
    };
    let is_data: Vec<bool> = datagrams
        .iter()
        .map(|d| match (c.vendor, &ouster_fmt) {
            (Vendor::Velodyne, _) => d.payload.len() == VELODYNE_PACKET_LEN,
            (Vendor::Ouster, Some(f)) => d.payload.len() == f.packet_len(),
            _ => true,
        })
        .collect();
    let first = datagrams[0].ts_ns;
    let last = datagrams[datagrams.len() - 1].ts_ns;
    let gap = (last.saturating_sub(first)) / (datagrams.len() as u64 - 1);
    let span_ns = last.saturating_sub(first) + gap.max(1);
    let ouster = ouster_fmt.map(|f| {
        let ids: Vec<u16> = datagrams
            .iter()
            .zip(&is_data)
            .filter(|(_, d)| **d)
            // The benchmark captures have 16-bit frame ids (STANDARD header or LEGACY).
            .map(|(d, _)| Packet::new_unchecked(&d.payload[..], f).frame_id() as u16)
            .collect();
        let lo = ids.iter().copied().min().unwrap_or(0);
        let hi = ids.iter().copied().max().unwrap_or(0);
        (f, hi.wrapping_sub(lo).wrapping_add(1))
    });
    let data_bytes = datagrams
        .iter()
        .zip(&is_data)
        .filter(|(_, d)| **d)
        .map(|(d, _)| d.payload.len() as u64)
        .sum();
    Ok(Loaded {
        vendor: c.vendor,
        datagrams,
        is_data,
        span_ns,
        ouster,
        data_bytes,
    })
}

impl Loaded {
    /// The payload of datagram `i` in loop `k` (see the module doc for what changes).
    fn payload(&self, i: usize, k: u64) -> Vec<u8> {
        let d = &self.datagrams[i];
        let mut p = d.payload.clone();
        if k == 0 || !self.is_data[i] {
            return p;
        }
        let shift_ns = k * self.span_ns;
        if self.vendor == Vendor::Velodyne {
            let ts = u64::from(u32::from_le_bytes([p[1200], p[1201], p[1202], p[1203]]));
            let t = ((ts + shift_ns / 1000) % HOUR_US) as u32;
            p[1200..1204].copy_from_slice(&t.to_le_bytes());
        }
        if let Some((f, frames)) = self.ouster {
            let dfid = (k as u16).wrapping_mul(frames);
            let offsets: Vec<usize> = {
                let pk = Packet::new_unchecked(&p[..], f);
                (0..f.columns_per_packet)
                    .map(|c| pk.col_offset(c))
                    .collect()
            };
            let add16 = |p: &mut [u8], o: usize| {
                let v = u16::from_le_bytes([p[o], p[o + 1]]).wrapping_add(dfid);
                p[o..o + 2].copy_from_slice(&v.to_le_bytes());
            };
            if f.profile == Profile::Legacy {
                for &o in &offsets {
                    add16(&mut p, o + 10);
                }
            } else {
                add16(&mut p, 2);
            }
            for &o in &offsets {
                let mut b = [0u8; 8];
                b.copy_from_slice(&p[o..o + 8]);
                let v = u64::from_le_bytes(b).wrapping_add(shift_ns);
                p[o..o + 8].copy_from_slice(&v.to_le_bytes());
            }
        }
        p
    }

    /// Writes the data payloads looped `loops` times as a payload file; returns
    /// `(packets, packets of the first loop)`.
    pub fn write_payloads(&self, path: &Path, loops: u64) -> Result<(u64, u64)> {
        let f =
            std::fs::File::create(path).with_context(|| format!("create {}", path.display()))?;
        let mut w = BufWriter::new(f);
        let mut n = 0u64;
        let per_loop = self.is_data.iter().filter(|d| **d).count() as u64;
        for k in 0..loops {
            for (i, d) in self.datagrams.iter().enumerate() {
                if !self.is_data[i] {
                    continue;
                }
                let p = self.payload(i, k);
                w.write_all(&(d.ts_ns + k * self.span_ns).to_le_bytes())?;
                w.write_all(&(p.len() as u32).to_le_bytes())?;
                w.write_all(&p)?;
                n += 1;
            }
        }
        w.flush()
            .with_context(|| format!("write {}", path.display()))?;
        Ok((n, per_loop))
    }

    /// Writes every datagram looped `loops` times as a pcap; returns its size in bytes.
    pub fn write_pcap(&self, path: &Path, loops: u64) -> Result<u64> {
        let f =
            std::fs::File::create(path).with_context(|| format!("create {}", path.display()))?;
        let header = PcapHeader {
            snaplen: 262_144,
            ..PcapHeader::default()
        };
        let mut w = PcapWriter::with_header(BufWriter::new(f), header)
            .with_context(|| format!("write {}", path.display()))?;
        let mut frame = Vec::with_capacity(65_536);
        for k in 0..loops {
            for (i, d) in self.datagrams.iter().enumerate() {
                let p = self.payload(i, k);
                ethernet_ipv4_udp(&mut frame, d, &p)?;
                let ts = Duration::from_nanos(d.ts_ns + k * self.span_ns);
                w.write_packet(&PcapPacket::new(ts, frame.len() as u32, &frame))
                    .with_context(|| format!("write {}", path.display()))?;
            }
        }
        let mut inner = w.into_writer();
        inner
            .flush()
            .with_context(|| format!("write {}", path.display()))?;
        drop(inner);
        Ok(std::fs::metadata(path)?.len())
    }
}

/// One Ethernet II / IPv4 (no options, checksum set, DF) / UDP (no checksum) frame around
/// `payload`, with `d`'s addresses and ports; broadcast destination MAC.
fn ethernet_ipv4_udp(out: &mut Vec<u8>, d: &UdpDatagram, payload: &[u8]) -> Result<()> {
    let udp_len = 8 + payload.len();
    let ip_len = 20 + udp_len;
    if ip_len > usize::from(u16::MAX) {
        bail!(
            "datagram of {} bytes does not fit one IPv4 packet",
            payload.len()
        );
    }
    out.clear();
    out.extend_from_slice(&[0xff; 6]);
    out.extend_from_slice(&[0x60, 0x76, 0x88, 0x00, 0x00, 0x01]);
    out.extend_from_slice(&0x0800u16.to_be_bytes());
    let ip_start = out.len();
    out.extend_from_slice(&[0x45, 0]);
    out.extend_from_slice(&(ip_len as u16).to_be_bytes());
    out.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0]);
    // The peers' inputs are IPv4 captures; an IPv6 address (none in them) is written as 0.0.0.0.
    let v4 = |a: std::net::IpAddr| match a {
        std::net::IpAddr::V4(a) => a.octets(),
        std::net::IpAddr::V6(_) => [0; 4],
    };
    out.extend_from_slice(&v4(d.src_ip));
    out.extend_from_slice(&v4(d.dst_ip));
    let mut sum = 0u32;
    for w in out[ip_start..ip_start + 20].chunks(2) {
        sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    out[ip_start + 10..ip_start + 12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    out.extend_from_slice(&d.src_port.to_be_bytes());
    out.extend_from_slice(&d.dst_port.to_be_bytes());
    out.extend_from_slice(&(udp_len as u16).to_be_bytes());
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(payload);
    Ok(())
}

/// Loops needed for at least `bytes` of data payloads (at least `min`).
pub fn loops_for(l: &Loaded, bytes: u64, min: u64) -> u64 {
    bytes.div_ceil(l.data_bytes.max(1)).max(min)
}

/// `<work>/<capture>_<what>.<ext>`.
pub fn work_file(work: &Path, c: &Capture, what: &str) -> PathBuf {
    work.join(format!("{}_{what}", c.name))
}
