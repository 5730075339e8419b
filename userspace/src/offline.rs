//! Offline input: UDP datagrams from pcap files, and decoding a pcap into frames.
//!
//! Reads classic libpcap files (µs or ns timestamps, either byte order) with the `pcap-file`
//! crate. Link types: Ethernet (with any number of 802.1Q / 802.1ad tags), Linux cooked (SLL),
//! raw IP. Only unfragmented IPv4/UDP datagrams are yielded; other records (ARP, IPv6, TCP,
//! IPv4 fragments, records too short for their headers) are skipped and counted in
//! [`UdpPayloads::skipped`].

use std::fs::File;
use std::io::BufReader;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use pcap_file::DataLink;
use pcap_file::pcap::PcapReader;

use crate::frame::Frame;
use crate::sensor::{ConfigError, DecodeCounters, PipelineOptions, ScanPipeline, SensorConfig};

/// Errors of offline decoding.
#[derive(Debug, thiserror::Error)]
pub enum OfflineError {
    /// The pcap file cannot be opened or read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not a valid classic pcap, or a record is damaged.
    #[error("{path}: invalid pcap: {source}")]
    Pcap {
        /// The file.
        path: PathBuf,
        /// The parser error.
        source: pcap_file::PcapError,
    },
    /// The sensor configuration or calibration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
}

/// One UDP datagram read from a capture.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UdpDatagram {
    /// IPv4 source address.
    pub src_ip: Ipv4Addr,
    /// IPv4 destination address.
    pub dst_ip: Ipv4Addr,
    /// UDP source port.
    pub src_port: u16,
    /// UDP destination port.
    pub dst_port: u16,
    /// UDP payload (trimmed to the UDP length field; shorter if the capture truncated it).
    pub payload: Vec<u8>,
    /// Record timestamp, ns since the Unix epoch.
    pub ts_ns: u64,
}

/// Iterator over the UDP datagrams of a pcap file, see [`udp_payloads`].
pub struct UdpPayloads {
    path: PathBuf,
    reader: Option<PcapReader<BufReader<File>>>,
    datalink: DataLink,
    skipped: u64,
}

impl UdpPayloads {
    /// Records skipped so far because they were not complete, unfragmented IPv4/UDP.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }
}

/// Opens `path` (classic pcap) and iterates over its UDP datagrams in file order.
/// A damaged record ends the iteration after yielding [`OfflineError::Pcap`].
///
/// # Errors
/// [`OfflineError::Io`] if the file cannot be opened, [`OfflineError::Pcap`] if its header is
/// not a pcap header.
pub fn udp_payloads(path: &Path) -> Result<UdpPayloads, OfflineError> {
    let f = File::open(path).map_err(|source| OfflineError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let reader = PcapReader::new(BufReader::new(f)).map_err(|source| OfflineError::Pcap {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(UdpPayloads {
        path: path.to_path_buf(),
        datalink: reader.header().datalink,
        reader: Some(reader),
        skipped: 0,
    })
}

impl Iterator for UdpPayloads {
    type Item = Result<UdpDatagram, OfflineError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let reader = self.reader.as_mut()?;
            let pkt = match reader.next_packet()? {
                Ok(p) => p,
                Err(source) => {
                    self.reader = None;
                    return Some(Err(OfflineError::Pcap {
                        path: self.path.clone(),
                        source,
                    }));
                }
            };
            let ts_ns = u64::try_from(pkt.timestamp.as_nanos()).unwrap_or(u64::MAX);
            match parse_udp(self.datalink, &pkt.data) {
                Some(d) => return Some(Ok(UdpDatagram { ts_ns, ..d })),
                None => self.skipped += 1,
            }
        }
    }
}

/// Strips link, IPv4 and UDP headers. `None` unless the record is an unfragmented IPv4/UDP
/// datagram whose UDP header is complete.
///
/// Deliberately more lenient than [`crate::net::parse_udp_ipv4`] (the strict parser for live
/// traffic): an IPv4 total length larger than the captured bytes is tolerated and the UDP
/// payload is cut at the UDP length or the end of the record, whichever is first. Real
/// captures need this: the position packets of
/// `vlp16_strongest_prodid0x21_with_position_pkts.pcap` claim 1234 bytes of IPv4 in 540.
/// A payload cut short by the capture then reaches the decoder and is counted there.
fn parse_udp(link: DataLink, frame: &[u8]) -> Option<UdpDatagram> {
    let ip = match link {
        DataLink::ETHERNET => {
            let mut ethertype = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
            let mut off = 14;
            // 802.1Q (0x8100) and 802.1ad (0x88a8) tags: 4 bytes each.
            while ethertype == 0x8100 || ethertype == 0x88a8 {
                ethertype = u16::from_be_bytes([*frame.get(off + 2)?, *frame.get(off + 3)?]);
                off += 4;
            }
            if ethertype != 0x0800 {
                return None;
            }
            frame.get(off..)?
        }
        DataLink::LINUX_SLL => {
            if frame.get(14..16)? != [0x08, 0x00] {
                return None;
            }
            frame.get(16..)?
        }
        DataLink::RAW | DataLink::IPV4 => frame,
        _ => return None,
    };
    let (
        &[
            vihl,
            _,
            t0,
            t1,
            _,
            _,
            f0,
            f1,
            _,
            proto,
            _,
            _,
            s0,
            s1,
            s2,
            s3,
            d0,
            d1,
            d2,
            d3,
        ],
        _,
    ) = ip.split_first_chunk::<20>()?;
    let ihl = usize::from(vihl & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([t0, t1]));
    // More-fragments flag or a non-zero offset: not a whole datagram.
    if vihl >> 4 != 4
        || ihl < 20
        || total < ihl
        || u16::from_be_bytes([f0, f1]) & 0x3fff != 0
        || proto != 17
    {
        return None;
    }
    let udp = ip.get(..total.min(ip.len()))?.get(ihl..)?;
    let (&[p0, p1, q0, q1, l0, l1, _, _], rest) = udp.split_first_chunk::<8>()?;
    let ulen = usize::from(u16::from_be_bytes([l0, l1]));
    if ulen < 8 {
        return None;
    }
    Some(UdpDatagram {
        src_ip: Ipv4Addr::new(s0, s1, s2, s3),
        dst_ip: Ipv4Addr::new(d0, d1, d2, d3),
        src_port: u16::from_be_bytes([p0, p1]),
        dst_port: u16::from_be_bytes([q0, q1]),
        payload: rest.get(..ulen - 8).unwrap_or(rest).to_vec(),
        ts_ns: 0,
    })
}

/// Decodes a pcap with default [`PipelineOptions`]: every UDP datagram (to `udp_port` only, if
/// given) is pushed with its record time as host time; the frame in progress is flushed at the
/// end of the file.
///
/// # Errors
/// [`OfflineError::Config`] for an invalid configuration, [`OfflineError::Io`] /
/// [`OfflineError::Pcap`] when the file cannot be read.
pub fn decode_pcap(
    path: &Path,
    cfg: &SensorConfig,
    udp_port: Option<u16>,
) -> Result<(Vec<Frame>, DecodeCounters), OfflineError> {
    decode_pcap_with_options(path, cfg, udp_port, PipelineOptions::default())
}

/// [`decode_pcap`] with explicit [`PipelineOptions`].
///
/// # Errors
/// As [`decode_pcap`].
pub fn decode_pcap_with_options(
    path: &Path,
    cfg: &SensorConfig,
    udp_port: Option<u16>,
    opts: PipelineOptions,
) -> Result<(Vec<Frame>, DecodeCounters), OfflineError> {
    let mut pipeline = ScanPipeline::with_options(cfg, opts)?;
    let mut frames = Vec::new();
    for d in udp_payloads(path)? {
        let d = d?;
        if udp_port.is_none_or(|p| p == d.dst_port) {
            pipeline.push(&d.payload, d.ts_ns, &mut frames);
        }
    }
    pipeline.flush(&mut frames);
    Ok((frames, *pipeline.counters()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eth_udp(vlan: bool, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0xffu8; 12];
        if vlan {
            f.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]);
        }
        f.extend_from_slice(&[0x08, 0x00]);
        let total = (20 + 8 + payload.len()) as u16;
        let mut ip = vec![
            0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0, 192, 168, 1, 201, 192, 168, 1, 100,
        ];
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        f.extend_from_slice(&ip);
        f.extend_from_slice(&2368u16.to_be_bytes());
        f.extend_from_slice(&2369u16.to_be_bytes());
        f.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        f.extend_from_slice(payload);
        f.extend_from_slice(&[0; 6]); // Ethernet padding must be trimmed
        f
    }

    #[test]
    fn parses_ethernet_vlan_and_trims_padding() {
        for vlan in [false, true] {
            let d = parse_udp(DataLink::ETHERNET, &eth_udp(vlan, b"hello")).unwrap();
            assert_eq!(
                (d.src_ip, d.dst_ip),
                (
                    Ipv4Addr::new(192, 168, 1, 201),
                    Ipv4Addr::new(192, 168, 1, 100)
                )
            );
            assert_eq!(
                (d.src_port, d.dst_port, &d.payload[..]),
                (2368, 2369, &b"hello"[..])
            );
        }
        let f = eth_udp(false, b"x");
        // Truncated headers, fragments and non-UDP are skipped, never a panic.
        for n in 0..42 {
            assert!(parse_udp(DataLink::ETHERNET, &f[..n]).is_none(), "{n}");
        }
        let mut frag = f.clone();
        frag[20] = 0x20; // MF
        assert!(parse_udp(DataLink::ETHERNET, &frag).is_none());
        let mut tcp = f.clone();
        tcp[23] = 6;
        assert!(parse_udp(DataLink::ETHERNET, &tcp).is_none());
        // IPv4 total length beyond the record: tolerated, payload cut at the record's end.
        let mut long = eth_udp(false, b"hello");
        long[16..18].copy_from_slice(&1234u16.to_be_bytes());
        long[38..40].copy_from_slice(&520u16.to_be_bytes());
        assert_eq!(
            parse_udp(DataLink::ETHERNET, &long).unwrap().payload.len(),
            5 + 6
        );
    }

    #[test]
    fn raw_ip_and_other_link_types() {
        let mut ip = vec![
            0x45, 0, 0, 33, 0, 0, 0x40, 0, 64, 17, 0, 0, 192, 168, 1, 201, 192, 168, 1, 100,
        ];
        ip.extend_from_slice(&[0x09, 0x40, 0x09, 0x41, 0, 13, 0, 0]);
        ip.extend_from_slice(b"hello");
        let d = parse_udp(DataLink::RAW, &ip).unwrap();
        assert_eq!(
            (d.src_ip, d.dst_ip),
            (
                Ipv4Addr::new(192, 168, 1, 201),
                Ipv4Addr::new(192, 168, 1, 100)
            )
        );
        assert_eq!(
            (d.src_port, d.dst_port, &d.payload[..]),
            (2368, 2369, &b"hello"[..])
        );
        // Headers cut: skipped; payload cut by the capture: shortened payload.
        for n in 0..ip.len() {
            let d = parse_udp(DataLink::RAW, &ip[..n]);
            assert_eq!(d.map(|d| d.payload.len()), n.checked_sub(28), "{n}");
        }
        assert!(parse_udp(DataLink::LINUX_SLL, &ip).is_none());
        assert!(parse_udp(DataLink::NULL, &ip).is_none());
    }

    #[test]
    fn reads_the_vlp16_capture_and_reports_missing_files() {
        let path = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../shared/data/velodyne/vlp16/vlp16_strongest_prodid0x21_with_position_pkts.pcap"
        ));
        let mut it = udp_payloads(path).unwrap();
        let all: Vec<UdpDatagram> = it.by_ref().map(Result::unwrap).collect();
        assert_eq!(all.len(), 100);
        assert_eq!(it.skipped(), 0);
        assert_eq!(
            all.iter()
                .filter(|d| d.dst_port == 2368 && d.payload.len() == 1206)
                .count(),
            84
        );
        assert_eq!(
            all.iter()
                .filter(|d| d.dst_port == 8308 && d.payload.len() == 512)
                .count(),
            16
        );
        assert!(all.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns));
        assert!(matches!(
            udp_payloads(Path::new("/nonexistent.pcap")),
            Err(OfflineError::Io { .. })
        ));
        let not_pcap = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"));
        assert!(matches!(
            udp_payloads(not_pcap),
            Err(OfflineError::Pcap { .. })
        ));
    }
}
