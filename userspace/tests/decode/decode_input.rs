//! Offline input (issue 11): pcap and pcapng, every supported link type, VLAN tags, IPv4
//! fragments, skipped records by reason, `--source` and two sources on one port, `--json`,
//! `--stamp`, `--min-range/--max-range`, and bounded calibration reading.
//!
//! Every capture here is written in code into the temp directory from the shared captures
//! (unique names, removed on drop); nothing is copied into the repository.

use std::borrow::Cow;
use std::fs::File;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use lidarxdp::offline::{
    CaptureReader, DatagramFilter, DecodeOptions, OfflineError, SkipCounts, UdpDatagram,
    decode_pcap, decode_pcap_each, udp_payloads,
};
use lidarxdp_core::frame::{Frame, FrameClock};
use lidarxdp_core::sensor::{SensorConfig, SensorModel, Stamp};
use lidarxdp_core::valid::RangeGate;
use pcap_file::DataLink;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};

use lidarxdp_testkit::data;

const VLP16: &str = "velodyne/vlp16/vlp16_strongest_84pkt.pcap";
const VLP16_CAL: &str = "velodyne/vlp16/calibration/VLP16db.yaml";
const OS1: &str = "ouster/os1-32/OS-1-32-G_v2.1.1_1024x10";

/// A temp file removed when dropped.
struct Temp(PathBuf);

impl Temp {
    fn new(name: &str) -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        Temp(std::env::temp_dir().join(format!(
            "lidarxdp-decode-input-{}-{n}-{name}",
            std::process::id()
        )))
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn vlp16_cfg() -> SensorConfig {
    SensorConfig::new(0, SensorModel::Vlp16, data(VLP16_CAL))
}

fn datagrams(rel: &str) -> Vec<UdpDatagram> {
    udp_payloads(&data(rel))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// IPv4 packet (IHL 5, TTL 64) with `frag` = flags/offset field.
fn ipv4(
    src: impl Into<IpAddr>,
    dst: impl Into<IpAddr>,
    id: u16,
    frag: u16,
    proto: u8,
    payload: &[u8],
) -> Vec<u8> {
    let octets = |a: IpAddr| match a {
        IpAddr::V4(a) => a.octets(),
        IpAddr::V6(a) => panic!("{a} is not IPv4"),
    };
    let mut v = vec![0x45, 0];
    v.extend_from_slice(&((20 + payload.len()) as u16).to_be_bytes());
    v.extend_from_slice(&id.to_be_bytes());
    v.extend_from_slice(&frag.to_be_bytes());
    v.extend_from_slice(&[64, proto, 0, 0]);
    v.extend_from_slice(&octets(src.into()));
    v.extend_from_slice(&octets(dst.into()));
    v.extend_from_slice(payload);
    v
}

/// UDP header + payload.
fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(8 + payload.len());
    v.extend_from_slice(&sport.to_be_bytes());
    v.extend_from_slice(&dport.to_be_bytes());
    v.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    v.extend_from_slice(&[0, 0]);
    v.extend_from_slice(payload);
    v
}

/// The IPv4 packet of a whole datagram.
fn whole(d: &UdpDatagram, id: u16) -> Vec<u8> {
    ipv4(
        d.src_ip,
        d.dst_ip,
        id,
        0x4000,
        17,
        &udp(d.src_port, d.dst_port, &d.payload),
    )
}

/// The datagram as IPv4 fragments for a 1500-byte MTU (1480 payload bytes each), as Linux
/// sends them.
fn fragments(d: &UdpDatagram, id: u16) -> Vec<Vec<u8>> {
    let u = udp(d.src_port, d.dst_port, &d.payload);
    let n = u.len().div_ceil(1480);
    u.chunks(1480)
        .enumerate()
        .map(|(i, c)| {
            let mf = if i + 1 < n { 0x2000 } else { 0 };
            ipv4(d.src_ip, d.dst_ip, id, mf | (i * 1480 / 8) as u16, 17, c)
        })
        .collect()
}

/// Ethernet II with the given VLAN tags (TPID, VID) before EtherType `ethertype`.
fn eth(tags: &[(u16, u16)], ethertype: u16, ip: &[u8]) -> Vec<u8> {
    let mut v = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1];
    for &(tpid, vid) in tags {
        v.extend_from_slice(&tpid.to_be_bytes());
        v.extend_from_slice(&vid.to_be_bytes());
    }
    v.extend_from_slice(&ethertype.to_be_bytes());
    v.extend_from_slice(ip);
    v
}

/// Linux cooked v1: packet type, ARPHRD_ETHER, address length 6, address, protocol.
fn sll(ip: &[u8]) -> Vec<u8> {
    let mut v = vec![0, 0, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0, 0x08, 0x00];
    v.extend_from_slice(ip);
    v
}

/// Linux cooked v2: protocol, reserved, ifindex, ARPHRD_ETHER, packet type, address length,
/// address.
fn sll2(ip: &[u8]) -> Vec<u8> {
    let mut v = vec![
        0x08, 0x00, 0, 0, 0, 0, 0, 3, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0,
    ];
    v.extend_from_slice(ip);
    v
}

/// Records of a classic pcap: `(time ns, record bytes)`.
type Records = Vec<(u64, Vec<u8>)>;

/// A classic pcap (ns resolution) of `(time ns, record)`.
fn write_pcap(path: &Path, link: DataLink, records: &[(u64, Vec<u8>)]) {
    let header = PcapHeader {
        datalink: link,
        ts_resolution: pcap_file::TsResolution::NanoSecond,
        ..PcapHeader::default()
    };
    let mut w = PcapWriter::with_header(File::create(path).unwrap(), header).unwrap();
    for (ns, r) in records {
        w.write_packet(&PcapPacket::new(
            Duration::from_nanos(*ns),
            r.len() as u32,
            r,
        ))
        .unwrap();
    }
}

/// A pcapng with `interfaces` (link type, `if_tsresol` or default µs) and records
/// `(interface, time ns, record)`; times are written in each interface's unit.
fn write_pcapng(
    path: &Path,
    interfaces: &[(DataLink, Option<u8>)],
    records: &[(u32, u64, Vec<u8>)],
) {
    let mut w = PcapNgWriter::new(File::create(path).unwrap()).unwrap();
    for &(link, resol) in interfaces {
        w.write_pcapng_block(InterfaceDescriptionBlock {
            linktype: link,
            snaplen: 0,
            options: resol
                .map(|r| vec![InterfaceDescriptionOption::IfTsResol(r)])
                .unwrap_or_default(),
        })
        .unwrap();
    }
    for (iface, ns, r) in records {
        // pcap-file 2 writes the Duration's ns as the raw time-stamp units.
        let raw = match interfaces[*iface as usize].1 {
            Some(9) => *ns,
            None | Some(6) => *ns / 1000,
            Some(other) => panic!("unit {other}"),
        };
        w.write_pcapng_block(EnhancedPacketBlock {
            interface_id: *iface,
            timestamp: Duration::from_nanos(raw),
            original_len: r.len() as u32,
            data: Cow::Borrowed(r),
            options: vec![],
        })
        .unwrap();
    }
}

fn decode(path: &Path, cfg: &SensorConfig, port: Option<u16>) -> Vec<Frame> {
    let (frames, _) = decode_pcap(path, cfg, port).unwrap();
    frames
}

/// tcpdump on a 1500-MTU Ouster link records fragments: every shared Ouster capture (OS0-32,
/// OS0-128, OS1-32, OS2-128; lidar and IMU datagrams), written as pcap (Ethernet) and pcapng
/// (SLL2, ns time stamps) with the fragments of every other datagram in reverse order, decodes
/// to exactly the frames of the unfragmented capture.
#[test]
fn fragmented_ouster_decodes_like_the_unfragmented_capture() {
    let mut eth_records = Vec::new();
    let mut ds = Vec::new();
    for base in [
        "ouster/os0-32/OS-0-32-U1_v2.2.0_1024x10",
        "ouster/os0-128/OS-0-128-U1_v2.3.0_1024x10",
        OS1,
        "ouster/os2-128/OS-2-128-U1_v2.3.0_1024x10",
    ] {
        let cfg = SensorConfig::new(0, SensorModel::Ouster, data(&format!("{base}.json")));
        let reference = decode(&data(&format!("{base}.pcap")), &cfg, Some(7502));
        assert!(!reference.is_empty());
        assert!(reference.iter().map(|f| f.points.len()).sum::<usize>() > 10_000);
        ds = datagrams(&format!("{base}.pcap"));
        assert_eq!(ds.iter().filter(|d| d.dst_port == 7502).count(), 64);
        eth_records.clear();
        let mut sll2_records = Vec::new();
        for (k, d) in ds.iter().enumerate() {
            let mut frags = fragments(d, 0x1000 + k as u16);
            assert!(
                d.dst_port != 7502 || frags.len() > 1,
                "{base}: {}",
                d.payload.len()
            );
            if k % 2 == 1 {
                frags.reverse();
            }
            for f in frags {
                eth_records.push((d.ts_ns, eth(&[], 0x0800, &f)));
                sll2_records.push((0, d.ts_ns, sll2(&f)));
            }
        }
        let n_records = eth_records.len() as u64;
        let pcap = Temp::new("ouster-frag.pcap");
        write_pcap(&pcap.0, DataLink::ETHERNET, &eth_records);
        let pcapng = Temp::new("ouster-frag.pcapng");
        write_pcapng(&pcapng.0, &[(DataLink::LINUX_SLL2, Some(9))], &sll2_records);
        for path in [&pcap.0, &pcapng.0] {
            assert_eq!(decode(path, &cfg, Some(7502)), reference, "{base} {path:?}");
            let mut r = udp_payloads(path).unwrap();
            let got: Vec<UdpDatagram> = r.by_ref().map(Result::unwrap).collect();
            assert_eq!(got, ds, "{base} {path:?}");
            assert_eq!((r.records(), r.skipped()), (n_records, 0), "{base}");
        }
    }
    // OS2-128 (the last one):
    // the last fragment missing: that datagram is lost and its fragments counted.
    let last = eth_records.len() - 1;
    let short = Temp::new("ouster-frag-short.pcap");
    write_pcap(&short.0, DataLink::ETHERNET, &eth_records[..last]);
    let mut r = udp_payloads(&short.0).unwrap();
    assert_eq!(r.by_ref().count(), ds.len() - 1);
    let lost = fragments(&ds[ds.len() - 1], 0).len() as u64 - 1;
    assert!(
        lost > 1,
        "the last datagram of the capture is a fragmented lidar packet"
    );
    assert_eq!(
        *r.skip_counts(),
        SkipCounts {
            fragment_incomplete: lost,
            ..SkipCounts::default()
        }
    );
}

/// The same datagrams through every supported link type (Ethernet with 802.1ad + 802.1Q tags,
/// Linux SLL and SLL2, raw IP, raw IPv4), in pcap and pcapng (µs default and ns units), decode
/// to exactly the frames of the original capture.
#[test]
fn every_link_type_decodes_like_the_original() {
    let reference = decode(&data(VLP16), &vlp16_cfg(), None);
    assert_eq!(reference.len(), 2);
    let ds = datagrams(VLP16);
    let ip: Vec<(u64, Vec<u8>)> = ds
        .iter()
        .enumerate()
        .map(|(k, d)| (d.ts_ns, whole(d, k as u16)))
        .collect();
    let map = |f: &dyn Fn(&[u8]) -> Vec<u8>| -> Vec<(u64, Vec<u8>)> {
        ip.iter().map(|(t, p)| (*t, f(p))).collect()
    };
    let cases: Vec<(&str, DataLink, Records)> = vec![
        (
            "qinq",
            DataLink::ETHERNET,
            map(&|p| eth(&[(0x88a8, 7), (0x8100, 100)], 0x0800, p)),
        ),
        ("sll", DataLink::LINUX_SLL, map(&sll)),
        ("raw", DataLink::RAW, map(&|p| p.to_vec())),
        ("ipv4", DataLink::IPV4, map(&|p| p.to_vec())),
    ];
    for (name, link, records) in &cases {
        let t = Temp::new(&format!("{name}.pcap"));
        write_pcap(&t.0, *link, records);
        assert_eq!(decode(&t.0, &vlp16_cfg(), None), reference, "{name}");
    }
    // pcapng, two interfaces: SLL2 with ns units and Ethernet with the default µs units,
    // records alternating between them (the capture's time stamps are whole µs).
    assert!(ds.iter().all(|d| d.ts_ns % 1000 == 0));
    let records: Vec<(u32, u64, Vec<u8>)> = ip
        .iter()
        .enumerate()
        .map(|(k, (t, p))| {
            if k % 2 == 0 {
                (0, *t, sll2(p))
            } else {
                (1, *t, eth(&[(0x8100, 5)], 0x0800, p))
            }
        })
        .collect();
    let t = Temp::new("two-ifaces.pcapng");
    write_pcapng(
        &t.0,
        &[(DataLink::LINUX_SLL2, Some(9)), (DataLink::ETHERNET, None)],
        &records,
    );
    assert_eq!(decode(&t.0, &vlp16_cfg(), None), reference);
    let got: Vec<UdpDatagram> = udp_payloads(&t.0).unwrap().map(Result::unwrap).collect();
    assert_eq!(got, ds);
}

/// Every record that yields no datagram is counted under exactly one reason.
#[test]
fn skipped_records_are_counted_by_reason() {
    let a = Ipv4Addr::new(192, 168, 1, 201);
    let b = Ipv4Addr::new(192, 168, 1, 202);
    let h = Ipv4Addr::new(192, 168, 1, 100);
    let good = ipv4(a, h, 1, 0, 17, &udp(2368, 2368, b"data"));
    let frag = |id: u16, port: u16| {
        let d = UdpDatagram {
            src_ip: a.into(),
            dst_ip: h.into(),
            src_port: port,
            dst_port: port,
            payload: vec![7; 2000],
            ts_ns: 0,
        };
        fragments(&d, id)
    };
    let mut bad_ihl = good.clone();
    bad_ihl[0] = 0x44;
    let mut udp_len_4 = good.clone();
    udp_len_4[24..26].copy_from_slice(&4u16.to_be_bytes());
    let mut cut_fragment = frag(9, 2368).remove(0);
    cut_fragment.truncate(600);
    let e = |ip: &[u8]| eth(&[], 0x0800, ip);
    let mut records: Vec<(u32, Vec<u8>)> = vec![
        (0, e(&good)),                      // yielded
        (0, eth(&[], 0x0806, &[0; 28])),    // ARP: not_ip
        (0, eth(&[], 0x86dd, &[0x60; 48])), // IPv6 cut by the capture, next header 96: not_udp
        (
            0,
            eth(&[(0x8100, 1), (0x8100, 2), (0x8100, 3)], 0x0800, &good),
        ), // 3 tags: not_ip
        (0, e(&good)[..10].to_vec()),       // truncated (Ethernet)
        (0, e(&good)[..24].to_vec()),       // truncated (IPv4)
        (0, e(&bad_ihl)),                   // bad_ip
        (0, e(&ipv4(a, h, 2, 0, 6, &[0; 20]))), // TCP: not_udp
        (0, e(&udp_len_4)),                 // bad_udp
        (0, e(&frag(3, 2368)[0])),          // lone fragment: incomplete
        (0, e(&cut_fragment)),              // cut fragment: truncated
        (0, e(&ipv4(a, h, 4, 0, 17, &udp(2368, 9999, b"x")))), // wrong_port
        (0, e(&ipv4(b, h, 5, 0, 17, &udp(2368, 2368, b"y")))), // wrong_source
        (1, e(&good)),                      // unsupported_link
    ];
    for f in frag(6, 2368) {
        records.push((0, e(&f))); // yielded, 2 records
    }
    for f in frag(7, 9999) {
        records.push((0, e(&f))); // wrong_port, 2 records
    }
    let t = Temp::new("reasons.pcapng");
    let records: Vec<(u32, u64, Vec<u8>)> = records
        .into_iter()
        .enumerate()
        .map(|(k, (i, r))| (i, k as u64 * 1000, r))
        .collect();
    write_pcapng(
        &t.0,
        &[(DataLink::ETHERNET, None), (DataLink::NULL, None)],
        &records,
    );
    let mut r = CaptureReader::open(
        &t.0,
        DatagramFilter {
            port: Some(2368),
            source: Some(a.into()),
        },
    )
    .unwrap();
    let got: Vec<UdpDatagram> = r.by_ref().map(Result::unwrap).collect();
    assert_eq!(got.len(), 2);
    assert_eq!((got[0].payload.as_slice(), got[0].ts_ns), (&b"data"[..], 0));
    assert_eq!(got[1].payload, vec![7; 2000]);
    let want = SkipCounts {
        unsupported_link: 1,
        truncated: 3,
        not_ip: 2,
        bad_ip: 1,
        not_udp: 2,
        bad_udp: 1,
        fragment_incomplete: 1,
        wrong_port: 3,
        wrong_source: 1,
    };
    assert_eq!(*r.skip_counts(), want);
    assert_eq!(r.records(), records.len() as u64);
    assert_eq!(r.records(), 3 + want.total());
    assert_eq!(
        want.to_string(),
        "unsupported_link 1, truncated 3, not_ip 2, bad_ip 1, not_udp 2, bad_udp 1, \
         fragment_incomplete 1, wrong_port 3, wrong_source 1"
    );
}

/// Two sources to one port: decoding stops before mixing them and names both; `--source`
/// decodes one of them.
#[test]
fn a_second_source_stops_decode_and_source_picks_one() {
    let ds = datagrams(VLP16);
    let a = ds[0].src_ip;
    let b = IpAddr::from([10, 9, 8, 7]);
    let records: Vec<(u64, Vec<u8>)> = ds
        .iter()
        .enumerate()
        .map(|(k, d)| {
            let mut d = d.clone();
            if k >= 40 && k % 2 == 0 {
                d.src_ip = b;
            }
            (d.ts_ns, eth(&[], 0x0800, &whole(&d, k as u16)))
        })
        .collect();
    let t = Temp::new("two-sources.pcap");
    write_pcap(&t.0, DataLink::ETHERNET, &records);
    let mut delivered = 0;
    let e = decode_pcap_each(&t.0, &vlp16_cfg(), &DecodeOptions::default(), |_| {
        delivered += 1;
        Ok(())
    })
    .unwrap_err();
    assert!(
        matches!(&e, OfflineError::MixedSources { sources, port: None, .. } if *sources == [a, b]),
        "{e}"
    );
    // Exactly the frames the first 40 datagrams closed; the frame in progress is dropped.
    let mut p = lidarxdp::calibration::pipeline(&vlp16_cfg()).unwrap();
    let mut closed = Vec::new();
    for d in &ds[..40] {
        p.push(&d.payload, d.ts_ns, &mut closed);
    }
    assert_eq!(delivered, closed.len());
    assert!(e.to_string().contains(&format!("({a}, {b})")), "{e}");
    assert!(e.to_string().contains("--source"), "{e}");
    for (src, n) in [(a, 62), (b, 22)] {
        let opts = DecodeOptions {
            source: Some(src),
            ..DecodeOptions::default()
        };
        let s = decode_pcap_each(&t.0, &vlp16_cfg(), &opts, |_| Ok(())).unwrap();
        assert_eq!((s.datagrams, s.counters.packets), (n, n));
        assert_eq!(
            s.skipped,
            SkipCounts {
                wrong_source: 84 - n,
                ..SkipCounts::default()
            }
        );
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lidarxdp"))
        .args(["decode", "--sensor", "vlp16", "--calibration"])
        .arg(data(VLP16_CAL))
        .arg(&t.0)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("2 IP sources (192.168.1.200, 10.9.8.7)"),
        "{err}"
    );
}

/// Traffic from other hosts that is no data packet of the model (PTP to port 319, a short
/// datagram to the sensor's own port) does not stop decoding: it is counted `ignored`, and the
/// frames equal those of the capture without it. A data packet from another host still stops.
#[test]
fn foreign_traffic_from_other_hosts_is_ignored_not_mixed() {
    let ds = datagrams(VLP16);
    let other = Ipv4Addr::new(10, 9, 8, 7);
    let mut records: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut k = 0u16;
    let mut push = |d: &UdpDatagram, records: &mut Vec<(u64, Vec<u8>)>| {
        records.push((d.ts_ns, eth(&[], 0x0800, &whole(d, k))));
        k += 1;
    };
    for (i, d) in ds.iter().enumerate() {
        if i % 10 == 0 {
            // A PTP-sized datagram to port 319 and a 100-byte one to the sensor's port, both
            // from another host, before every tenth data packet (the first one included).
            for (port, len) in [(319u16, 44usize), (d.dst_port, 100)] {
                let mut f = d.clone();
                f.src_ip = other.into();
                f.dst_port = port;
                f.payload = vec![0x5a; len];
                push(&f, &mut records);
            }
        }
        push(d, &mut records);
    }
    let t = Temp::new("foreign-traffic.pcap");
    write_pcap(&t.0, DataLink::ETHERNET, &records);
    let mut got = Vec::new();
    let s = decode_pcap_each(&t.0, &vlp16_cfg(), &DecodeOptions::default(), |f| {
        got.push(f);
        Ok(())
    })
    .unwrap();
    let mut want = Vec::new();
    let mut p = lidarxdp::calibration::pipeline(&vlp16_cfg()).unwrap();
    for d in &ds {
        p.push(&d.payload, d.ts_ns, &mut want);
    }
    p.flush(&mut want);
    assert_eq!(got, want);
    let foreign = 2 * ds.len().div_ceil(10) as u64;
    assert_eq!(
        (s.counters.packets, s.counters.decoded, s.counters.ignored),
        (ds.len() as u64 + foreign, ds.len() as u64, foreign)
    );
}

/// Streaming gives the same frames as the collecting helper, one callback per frame.
#[test]
fn streaming_matches_collecting() {
    let path = data("velodyne/vlp16/vlp16_dual_nebula_603pkt.pcap");
    let cfg = SensorConfig::new(
        0,
        SensorModel::Vlp16,
        data("velodyne/vlp16/calibration/VLP16_nebula.yaml"),
    );
    let (all, counters) = decode_pcap(&path, &cfg, Some(2368)).unwrap();
    let mut streamed = Vec::new();
    let opts = DecodeOptions {
        port: Some(2368),
        ..DecodeOptions::default()
    };
    let s = decode_pcap_each(&path, &cfg, &opts, |f| {
        streamed.push(f);
        Ok(())
    })
    .unwrap();
    assert_eq!(streamed, all);
    assert_eq!(s.counters, counters);
    assert_eq!((s.records, s.datagrams, s.skipped.total()), (603, 603, 0));
    assert_eq!(s.counters.frames, all.len() as u64);
}

/// `--stamp host`: start_ns is the first packet's receive (record) time and says so.
#[test]
fn stamp_host_rewrites_start_ns() {
    let sensor = decode(&data(VLP16), &vlp16_cfg(), None);
    let cfg = SensorConfig {
        stamp: Stamp::Host,
        ..vlp16_cfg()
    };
    let host = decode(&data(VLP16), &cfg, None);
    assert_eq!(sensor.len(), host.len());
    for (s, h) in sensor.iter().zip(&host) {
        assert_eq!(s.header.clock, FrameClock::Sensor);
        assert_eq!(h.header.clock, FrameClock::Host);
        assert_eq!(h.header.start_ns, s.header.host_ns);
        assert_ne!(s.header.start_ns, s.header.host_ns);
        assert_eq!(h.points, s.points, "point time stamps stay relative");
    }
}

/// Datasheet ranges are the defaults, and every vendor honours a configured range.
#[test]
fn every_vendor_honours_the_configured_range() {
    assert_eq!(SensorModel::Vlp16.datasheet_range_m(), (0.0, 100.0));
    assert_eq!(SensorModel::Hdl32e.datasheet_range_m(), (0.05, 100.0));
    assert_eq!(SensorModel::PandarXt32.datasheet_range_m(), (0.05, 120.0));
    assert_eq!(SensorModel::Rs16.datasheet_range_m(), (0.2, 150.0));
    for m in SensorModel::ALL {
        let c = SensorConfig::new(0, *m, "x");
        assert_eq!(
            (c.range.min().get(), c.range.max().get()),
            m.datasheet_range_m()
        );
    }
    let cases: [(SensorModel, &str, &str, Option<u16>); 4] = [
        (SensorModel::Vlp16, VLP16, VLP16_CAL, None),
        (
            SensorModel::PandarXt32,
            "hesai/pandarxt32/pandarxt32_nebula.pcap",
            "hesai/pandarxt32/PandarXT32.csv",
            None,
        ),
        (
            SensorModel::Ouster,
            "ouster/os1-32/OS-1-32-G_v2.1.1_1024x10.pcap",
            "ouster/os1-32/OS-1-32-G_v2.1.1_1024x10.json",
            Some(7502),
        ),
        (
            SensorModel::Helios16p,
            "robosense/helios16p/helios16p_nebula_pr79.pcap",
            "robosense/helios16p/RobosenseHelios16P.csv",
            None,
        ),
    ];
    for (model, pcap, cal, port) in cases {
        let wide = SensorConfig::new(0, model, data(cal));
        let narrow = SensorConfig {
            range: RangeGate::from_m(2.0, 10.0).unwrap(),
            ..wide.clone()
        };
        let all: Vec<f32> = decode(&data(pcap), &wide, port)
            .iter()
            .flat_map(|f| f.points.autoware().iter().map(|p| p.distance))
            .collect();
        let kept: Vec<f32> = decode(&data(pcap), &narrow, port)
            .iter()
            .flat_map(|f| f.points.autoware().iter().map(|p| p.distance))
            .collect();
        assert!(!kept.is_empty(), "{model}");
        assert!(kept.len() < all.len(), "{model}");
        assert!(
            kept.iter().all(|d| (2.0..=10.0).contains(d)),
            "{model}: {:?}",
            kept.iter().find(|d| !(2.0..=10.0).contains(*d))
        );
        // Up to the inclusive/exclusive edge (Hesai keeps both bounds, as Nebula), exactly the
        // points of the wide decode that fall in the window.
        let want = all.iter().filter(|d| **d > 2.0 && **d < 10.0).count();
        let edge = all.iter().filter(|d| **d == 2.0 || **d == 10.0).count();
        assert!(
            (want..=want + edge).contains(&kept.len()),
            "{model}: {} kept, {want} (+{edge}) expected",
            kept.len()
        );
    }
    // A gate whose minimum is not below its maximum cannot be configured at all.
    assert_eq!(
        RangeGate::from_m(5.0, 5.0).unwrap_err().to_string(),
        "5 is out of range; valid (min_range = 5, 1000] m"
    );
}

/// `decode --json` through the binary: one object per frame with the header fields, then a
/// summary object; the readable summary on stderr; `--pcap FILE` equals the positional form.
#[test]
fn decode_json_via_the_binary() {
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_lidarxdp"))
            .arg("decode")
            .args(args)
            .args(["--sensor", "vlp16", "--calibration"])
            .arg(data(VLP16_CAL))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        (
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    };
    let pcap = data(VLP16);
    let pcap = pcap.to_str().unwrap();
    let frames = decode(&data(VLP16), &vlp16_cfg(), None);
    let (out, err) = run(&["--json", "--pcap", pcap]);
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), frames.len() + 1);
    for (j, f) in lines.iter().zip(&frames) {
        let h = &f.header;
        assert_eq!(j["seq"], h.sequence);
        assert_eq!(j["start_ns"], h.start_ns);
        assert_eq!(j["host_ns"], h.host_ns);
        assert_eq!(j["clock"], "sensor");
        assert_eq!(j["points"], f.points.len());
        assert_eq!(j["packets"], h.packets_received);
        assert_eq!(j["expected_packets"], h.packets_expected);
        assert_eq!(j["malformed"], h.packets_malformed);
        assert_eq!(j["frames_lost_before"], h.frames_lost_before);
    }
    // Offline, host_ns is the record time of the frame's first packet.
    assert_eq!(lines[0]["host_ns"], datagrams(VLP16)[0].ts_ns);
    let s = &lines[frames.len()]["summary"];
    assert_eq!(
        (&s["records"], &s["datagrams"], &s["packets"], &s["decoded"]),
        (
            &serde_json::json!(84),
            &serde_json::json!(84),
            &serde_json::json!(84),
            &serde_json::json!(84)
        )
    );
    assert_eq!(s["frames"], frames.len());
    assert_eq!(s["skipped_records"], 0);
    assert_eq!(s["skipped"]["fragment_incomplete"], 0);
    // The summary is the last line (log lines such as the implausible sensor clock of this
    // capture come before it).
    assert!(
        err.lines().last().is_some_and(|l| l.starts_with(
            "decode: 84 records, 84 datagrams: 84 packets (84 decoded, 0 malformed, 0 ignored), "
        )),
        "{err}"
    );
    assert!(
        err.trim_end().ends_with("skipped records: 0 (none)"),
        "{err}"
    );
    // Text lines by default; the positional form is the same capture.
    let (text, _) = run(&[pcap]);
    let (text2, _) = run(&["--pcap", pcap]);
    assert_eq!(text, text2);
    assert_eq!(text.lines().count(), frames.len());
    assert!(text.starts_with(&format!(
        "frame seq=0 start_ns={} points={} ",
        frames[0].header.start_ns,
        frames[0].points.len()
    )));
    let (host, _) = run(&["--json", "--stamp", "host", pcap]);
    let first: serde_json::Value = serde_json::from_str(host.lines().next().unwrap()).unwrap();
    assert_eq!(first["clock"], "host");
    assert_eq!(first["start_ns"], first["host_ns"]);
}

/// Refusals through the binary: a capture with no decodable datagram exits non-zero and says
/// why (instead of printing nothing with exit 0), and a bad range names the flag and the range.
#[test]
fn decode_refuses_empty_input_and_bad_ranges() {
    let run = |pcap: &Path, extra: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_lidarxdp"))
            .arg("decode")
            .arg(pcap)
            .args(["--sensor", "vlp16", "--calibration"])
            .arg(data(VLP16_CAL))
            .args(extra)
            .output()
            .unwrap();
        (out.status.success(), String::from_utf8(out.stderr).unwrap())
    };
    let arp: Records = (0..3)
        .map(|k| (k * 1000, eth(&[], 0x0806, &[0; 28])))
        .collect();
    let t = Temp::new("arp.pcap");
    write_pcap(&t.0, DataLink::ETHERNET, &arp);
    let (ok, err) = run(&t.0, &[]);
    assert!(!ok);
    assert!(err.contains("skipped records: 3 (not_ip 3)"), "{err}");
    assert!(
        err.contains("no datagram decoded; skipped records: not_ip 3"),
        "{err}"
    );
    let (ok, err) = run(&data(VLP16), &["--min-range", "5", "--max-range", "2"]);
    assert!(!ok);
    assert!(
        err.contains("--max-range: 2 is out of range; valid (min_range = 5, 1000] m"),
        "{err}"
    );
    let (ok, err) = run(&data(VLP16), &["--min-range", "150"]);
    assert!(!ok);
    assert!(
        err.contains("--min-range: 150 is out of range; valid [0, 100) m (the VLP16 datasheet"),
        "{err}"
    );
    let (ok, err) = run(&data(VLP16), &["--stamp", "gps"]);
    assert!(!ok);
    assert!(
        err.contains("unknown stamp 'gps'; valid: sensor, host"),
        "{err}"
    );
}

/// `replay` reads captures with the same reader (here pcapng with SLL2 and IPv4 fragments) and
/// takes `--pcap FILE` as well as the positional form.
#[test]
fn replay_takes_pcap_flag_and_fragmented_pcapng() {
    let ds = datagrams(&format!("{OS1}.pcap"));
    let records: Vec<(u32, u64, Vec<u8>)> = ds
        .iter()
        .enumerate()
        .flat_map(|(k, d)| {
            fragments(d, k as u16)
                .into_iter()
                .map(|f| (0, d.ts_ns, sll2(&f)))
                .collect::<Vec<_>>()
        })
        .collect();
    let t = Temp::new("replay.pcapng");
    write_pcapng(&t.0, &[(DataLink::LINUX_SLL2, Some(9))], &records);
    let sink = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let to = sink.local_addr().unwrap().to_string();
    let path = t.0.to_str().unwrap();
    for args in [vec!["--pcap", path], vec![path]] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_lidarxdp"))
            .arg("replay")
            .args(&args)
            .args(["--to", &to, "--rate", "max", "--json"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!((&j["sent"], &j["skipped_records"]), (&64.into(), &0.into()));
        let bytes: usize = ds.iter().map(|d| d.payload.len()).sum();
        assert_eq!(j["bytes"], bytes);
    }
}

/// Damaged captures (random bytes flipped in a pcap and a pcapng holding VLAN, SLL2 and
/// fragmented records) never panic: the reader yields datagrams, counts skipped records, or
/// stops with `OfflineError::Pcap`.
#[test]
fn damaged_captures_never_panic() {
    let ds = datagrams(VLP16);
    let mut ng: Vec<(u32, u64, Vec<u8>)> = Vec::new();
    let mut classic: Records = Vec::new();
    for (k, d) in ds.iter().take(6).enumerate() {
        let mut big = d.clone();
        big.payload.extend_from_slice(&d.payload);
        for f in fragments(&big, k as u16) {
            ng.push((0, d.ts_ns, sll2(&f)));
        }
        ng.push((
            1,
            d.ts_ns,
            eth(&[(0x8100, 3)], 0x0800, &whole(d, 100 + k as u16)),
        ));
        classic.push((d.ts_ns, eth(&[], 0x0800, &whole(d, k as u16))));
    }
    let a = Temp::new("clean.pcapng");
    write_pcapng(
        &a.0,
        &[(DataLink::LINUX_SLL2, Some(9)), (DataLink::ETHERNET, None)],
        &ng,
    );
    let b = Temp::new("clean.pcap");
    write_pcap(&b.0, DataLink::ETHERNET, &classic);
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let bad = Temp::new("damaged.cap");
    for clean in [&a.0, &b.0] {
        let bytes = std::fs::read(clean).unwrap();
        for round in 0..300 {
            let mut v = bytes.clone();
            for _ in 0..1 + round % 8 {
                let i = (rnd() as usize) % v.len();
                v[i] = rnd() as u8;
            }
            if round % 10 == 0 {
                v.truncate((rnd() as usize) % v.len());
            }
            std::fs::write(&bad.0, &v).unwrap();
            let Ok(mut r) = udp_payloads(&bad.0) else {
                continue;
            };
            let mut yielded = 0u64;
            for d in r.by_ref() {
                match d {
                    Ok(_) => yielded += 1,
                    Err(OfflineError::Pcap { .. }) => break,
                    Err(e) => panic!("{e}"),
                }
            }
            assert!(r.records() >= yielded);
        }
    }
}

/// Calibration and metadata files are read bounded: `/dev/zero` and a sparse 1 GiB file are
/// refused with the file's name and the cap, for every vendor's reader.
#[test]
fn oversized_calibration_files_are_refused() {
    let sparse = Temp::new("sparse-1GiB.yaml");
    File::create(&sparse.0).unwrap().set_len(1 << 30).unwrap();
    let zero = PathBuf::from("/dev/zero");
    for path in [&zero, &sparse.0] {
        for model in [
            SensorModel::Vlp16,
            SensorModel::Pandar64,
            SensorModel::At128,
            SensorModel::Ouster,
            SensorModel::Rs16,
        ] {
            let e = lidarxdp::calibration::pipeline(&SensorConfig::new(0, model, path))
                .unwrap_err()
                .to_string();
            assert!(e.contains(&path.display().to_string()), "{model}: {e}");
            assert!(
                e.contains("capped at 16777216 bytes (16 MiB)"),
                "{model}: {e}"
            );
        }
    }
    let e = lidarxdp::calibration::pipeline(&SensorConfig::new(0, SensorModel::Vlp16, &sparse.0))
        .unwrap_err()
        .to_string();
    assert!(e.contains("file is 1073741824 bytes"), "{e}");
    // A FIFO with no writer does not block: it reads as empty and is refused, naming it.
    let fifo = Temp::new("calibration.fifo");
    let ok = std::process::Command::new("mkfifo")
        .arg(&fifo.0)
        .status()
        .unwrap()
        .success();
    assert!(ok, "mkfifo");
    for model in [
        SensorModel::Vlp16,
        SensorModel::Pandar64,
        SensorModel::Ouster,
    ] {
        let e = lidarxdp::calibration::pipeline(&SensorConfig::new(0, model, &fifo.0))
            .unwrap_err()
            .to_string();
        assert!(e.contains(&fifo.0.display().to_string()), "{model}: {e}");
    }
}

/// A pipeline cloned mid-frame decodes the rest of the capture exactly like the original.
#[test]
fn clone_decodes_like_the_original() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/data/velodyne/vlp16/vlp16_strongest_84pkt.pcap"
    );
    let (datagrams, _) = lidarxdp::replay::read_udp_datagrams(path.as_ref(), None).unwrap();
    let mut a = lidarxdp::calibration::pipeline(&vlp16_cfg()).unwrap();
    let (half, rest) = datagrams.split_at(datagrams.len() / 2);
    let (mut fa, mut fb) = (Vec::new(), Vec::new());
    for (i, d) in half.iter().enumerate() {
        a.push(&d.payload, i as u64 * 1_000_000, &mut fa);
    }
    // A copy taken mid-frame carries the frame in progress and the counters.
    let mut b = a.clone();
    assert_eq!(b.counters(), a.counters());
    fb.clone_from(&fa);
    for (i, d) in rest.iter().enumerate() {
        let t = (half.len() + i) as u64 * 1_000_000;
        a.push(&d.payload, t, &mut fa);
        b.push(&d.payload, t, &mut fb);
    }
    a.flush(&mut fa);
    b.flush(&mut fb);
    assert_eq!(a.counters(), b.counters());
    assert_eq!(a.counters().packets, 84);
    assert!(a.counters().frames >= 1);
    assert_eq!(fa, fb);
}

/// pcapng Simple Packet Blocks carry no time stamp (pcapng spec 4.4): each takes the time of
/// the last packet block that had one, never 0, so a capture mixing them decodes like the
/// capture with every record stamped.
#[test]
fn simple_packet_blocks_take_the_last_time_stamp() {
    use pcap_file::pcapng::blocks::simple_packet::SimplePacketBlock;
    let src = datagrams(VLP16);
    let path = Temp::new("spb.pcapng");
    let mut w = PcapNgWriter::new(File::create(&path.0).unwrap()).unwrap();
    w.write_pcapng_block(InterfaceDescriptionBlock {
        linktype: DataLink::ETHERNET,
        snaplen: 0,
        options: vec![],
    })
    .unwrap();
    // Every fourth record an Enhanced Packet Block (µs time stamps), the others Simple ones.
    for (i, d) in src.iter().enumerate() {
        let rec = eth(&[], 0x0800, &whole(d, i as u16));
        if i % 4 == 0 {
            w.write_pcapng_block(EnhancedPacketBlock {
                interface_id: 0,
                timestamp: Duration::from_nanos(d.ts_ns / 1000),
                original_len: rec.len() as u32,
                data: Cow::Borrowed(&rec),
                options: vec![],
            })
            .unwrap();
        } else {
            w.write_pcapng_block(SimplePacketBlock {
                original_len: rec.len() as u32,
                data: Cow::Borrowed(&rec),
            })
            .unwrap();
        }
    }
    drop(w);
    let got: Vec<UdpDatagram> = udp_payloads(&path.0).unwrap().map(Result::unwrap).collect();
    assert_eq!(got.len(), src.len());
    for (i, (g, s)) in got.iter().zip(&src).enumerate() {
        let stamped = src[i - i % 4].ts_ns / 1000 * 1000;
        assert_eq!((g.ts_ns, &g.payload), (stamped, &s.payload), "record {i}");
    }
    // The frames are those of the capture: the VLP-16's own clock cuts them.
    let want = decode(&data(VLP16), &vlp16_cfg(), None);
    let frames = decode(&path.0, &vlp16_cfg(), None);
    assert_eq!(frames.len(), want.len());
    for (f, w) in frames.iter().zip(&want) {
        assert_eq!(
            (f.header.start_ns, f.points.autoware()),
            (w.header.start_ns, w.points.autoware())
        );
    }
}
