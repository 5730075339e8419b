//! Sensors on IPv6 in captures (issue 39, fault class 6): shared IPv4 captures rewritten in code
//! into IPv6 frames (into the temp directory; nothing is copied into the repository) decode to
//! exactly the frames of the original. Each datagram is sent from an IPv6 address (a
//! link-local one for the VLP-16, a unique-local one for the Ouster) behind a hop-by-hop
//! options header and a destination options header; a datagram larger than a 1500-byte MTU
//! allows is cut into fragments as Linux does (the hop-by-hop header in every fragment, the
//! destination options in the fragmentable part, 1448 bytes per fragment but the last), every
//! other fragmented datagram's fragments in reverse order.

use std::fs::File;
use std::net::Ipv6Addr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use lidarxdp::offline::udp_payloads;
use lidarxdp::offline::{CaptureReader, DatagramFilter, SkipCounts, UdpDatagram, decode_pcap};
use lidarxdp_core::sensor::{SensorConfig, SensorModel};
use lidarxdp_testkit::data;
use pcap_file::DataLink;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};

/// A temp file removed when dropped.
struct Temp(PathBuf);

impl Temp {
    fn new(name: &str) -> Self {
        Temp(std::env::temp_dir().join(format!(
            "lidarxdp-decode-ipv6-{}-{name}",
            std::process::id()
        )))
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// An 8-byte options header (hop-by-hop or destination options) naming `next`, padded with
/// PadN (RFC 8200 section 4.2).
fn options(next: u8) -> [u8; 8] {
    [next, 0, 1, 4, 0, 0, 0, 0]
}

/// Ethernet II + IPv6 from `src` to `dst` whose payload (after the fixed header) is `body`,
/// starting with header `first`.
fn ipv6_frame(src: Ipv6Addr, dst: Ipv6Addr, first: u8, body: &[u8]) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x86, 0xdd];
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&(body.len() as u16).to_be_bytes());
    f.extend_from_slice(&[first, 64]);
    f.extend_from_slice(&src.octets());
    f.extend_from_slice(&dst.octets());
    f.extend_from_slice(body);
    f
}

/// The IPv6 frames of datagram `d` from `src` (see the module docs), fragment identification
/// `id`; `reverse` sends the fragments last first.
fn ipv6_frames(d: &UdpDatagram, src: Ipv6Addr, id: u32, reverse: bool) -> Vec<Vec<u8>> {
    let dst: Ipv6Addr = "fe80::100".parse().unwrap();
    let udp_len = (8 + d.payload.len()) as u16;
    // Fragmentable part: destination options, then UDP (checksum 0: not verified).
    let mut part = options(17).to_vec();
    part.extend_from_slice(&d.src_port.to_be_bytes());
    part.extend_from_slice(&d.dst_port.to_be_bytes());
    part.extend_from_slice(&udp_len.to_be_bytes());
    part.extend_from_slice(&[0, 0]);
    part.extend_from_slice(&d.payload);
    // 1500-byte MTU: 40 fixed + 8 hop-by-hop (+ 8 fragment header).
    if 8 + part.len() <= 1500 - 40 {
        let mut body = options(60).to_vec();
        body.extend_from_slice(&part);
        return vec![ipv6_frame(src, dst, 0, &body)];
    }
    const CHUNK: usize = 1448;
    let n = part.len().div_ceil(CHUNK);
    let mut frames: Vec<Vec<u8>> = part
        .chunks(CHUNK)
        .enumerate()
        .map(|(i, c)| {
            let mut body = options(44).to_vec();
            let m = u16::from(i + 1 < n);
            body.extend_from_slice(&[60, 0]);
            body.extend_from_slice(&((i * CHUNK) as u16 | m).to_be_bytes());
            body.extend_from_slice(&id.to_be_bytes());
            body.extend_from_slice(c);
            ipv6_frame(src, dst, 0, &body)
        })
        .collect();
    if reverse {
        frames.reverse();
    }
    frames
}

/// Writes the IPv6 rewrite of `datagrams` (each at its own time) to `path`; the records
/// written and how many datagrams were fragmented.
fn write_ipv6(path: &Path, datagrams: &[UdpDatagram], src: Ipv6Addr) -> (u64, u64) {
    let header = PcapHeader {
        datalink: DataLink::ETHERNET,
        ts_resolution: pcap_file::TsResolution::NanoSecond,
        ..PcapHeader::default()
    };
    let mut w = PcapWriter::with_header(File::create(path).unwrap(), header).unwrap();
    let (mut records, mut fragmented) = (0, 0);
    for (k, d) in datagrams.iter().enumerate() {
        let frames = ipv6_frames(d, src, 0x8000_0000 | k as u32, k % 2 == 1);
        fragmented += u64::from(frames.len() > 1);
        for f in frames {
            w.write_packet(&PcapPacket::new(
                Duration::from_nanos(d.ts_ns),
                f.len() as u32,
                &f,
            ))
            .unwrap();
            records += 1;
        }
    }
    (records, fragmented)
}

/// Decodes `rel` and its IPv6 rewrite with `cfg` on `port`: the frames (headers and points)
/// and decoder counters are equal. Returns (records, fragmented datagrams, frames, points).
fn same_as_ipv4(rel: &str, cfg: &SensorConfig, port: u16, src: &str) -> (u64, u64, usize, usize) {
    let datagrams: Vec<UdpDatagram> = udp_payloads(&data(rel))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let src: Ipv6Addr = src.parse().unwrap();
    let t = Temp::new(&rel.replace('/', "_"));
    let (records, fragmented) = write_ipv6(&t.0, &datagrams, src);

    // Every record of the rewrite yields a datagram or is a fragment of one: nothing skipped,
    // each datagram from the IPv6 source with its ports and payload.
    let mut r = CaptureReader::open(&t.0, DatagramFilter::default()).unwrap();
    let got: Vec<UdpDatagram> = r.by_ref().map(Result::unwrap).collect();
    assert_eq!(*r.skip_counts(), SkipCounts::default());
    assert_eq!(r.records(), records);
    assert_eq!(got.len(), datagrams.len());
    for (g, d) in got.iter().zip(&datagrams) {
        assert_eq!(g.src_ip, std::net::IpAddr::V6(src));
        assert_eq!(
            (g.src_port, g.dst_port, &g.payload, g.ts_ns),
            (d.src_port, d.dst_port, &d.payload, d.ts_ns)
        );
    }

    let (v4, c4) = decode_pcap(&data(rel), cfg, Some(port)).unwrap();
    let (v6, c6) = decode_pcap(&t.0, cfg, Some(port)).unwrap();
    assert_eq!(c6, c4, "decoder counters");
    assert_eq!(v6.len(), v4.len(), "frames");
    for (i, (a, b)) in v6.iter().zip(&v4).enumerate() {
        assert_eq!(a.header, b.header, "frame {i} header");
        assert!(a.points == b.points, "frame {i} points differ");
    }
    let points = v6.iter().map(|f| f.points.len()).sum();
    (records, fragmented, v6.len(), points)
}

/// The VLP-16 dual-return capture from a link-local source: no datagram needs fragments.
#[test]
fn vlp16_dual_over_ipv6_with_extension_headers_equals_ipv4() {
    let cfg = SensorConfig::new(
        0,
        SensorModel::Vlp16,
        data("velodyne/vlp16/calibration/VLP16db.yaml"),
    );
    let got = same_as_ipv4(
        "velodyne/vlp16/vlp16_dual_nebula_603pkt.pcap",
        &cfg,
        2368,
        "fe80::201",
    );
    assert_eq!((got.0, got.1), (603, 0), "records, fragmented datagrams");
    assert_eq!((got.2, got.3), (4, 59_374), "frames, points");
}

/// The OS0-32 capture from a unique-local source: every lidar datagram (6,464 + 8 bytes of UDP,
/// + 8 of destination options) leaves as 5 fragments (4 × 1448 + 688).
#[test]
fn ouster_os0_32_over_ipv6_fragments_equals_ipv4() {
    let cfg = SensorConfig::new(
        0,
        SensorModel::Ouster,
        data("ouster/os0-32/OS-0-32-U1_v2.2.0_1024x10.json"),
    );
    let got = same_as_ipv4(
        "ouster/os0-32/OS-0-32-U1_v2.2.0_1024x10.pcap",
        &cfg,
        7502,
        "fd00::c0a8:1c9",
    );
    assert_eq!((got.0, got.1), (394, 64), "records, fragmented datagrams");
    assert_eq!((got.2, got.3), (1, 21_803), "frames, points");
}
