//! IPv4 reassembly of a real Ouster capture: the OS1-32 pcap stores its 64 lidar datagrams
//! (6,464-byte payloads, port 7502) unfragmented. Here they are cut into Ethernet frames the way
//! Linux fragments them for a 1500-byte MTU (1480 payload bytes per fragment: 4 × 1480 + 552),
//! parsed with `net::parse_ipv4` and reassembled; every datagram must come back byte-for-byte.
//! (The privileged `e2e_fragments` test does the same with fragments made by the kernel.)

use lidarxdp::replay::read_udp_datagrams;
use lidarxdp_core::{
    net::{self, NetError},
    reassembly::{Fragment, Reassembler, ReassemblyConfig, ReassemblyCounters},
};

const OS1_32: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/data/ouster/os1-32/OS-1-32-G_v2.1.1_1024x10.pcap"
);

/// Ethernet + IPv4 fragments of the UDP datagram `udp` (header included), `mtu`-sized.
fn fragment(udp: &[u8], id: u16, mtu: usize) -> Vec<Vec<u8>> {
    let chunk = (mtu - 20) / 8 * 8;
    let n = udp.len().div_ceil(chunk);
    udp.chunks(chunk)
        .enumerate()
        .map(|(i, c)| {
            let mut f = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00];
            let total = (20 + c.len()) as u16;
            let off = (i * chunk / 8) as u16 | if i + 1 < n { 0x2000 } else { 0 };
            f.extend_from_slice(&[0x45, 0]);
            f.extend_from_slice(&total.to_be_bytes());
            f.extend_from_slice(&id.to_be_bytes());
            f.extend_from_slice(&off.to_be_bytes());
            f.extend_from_slice(&[64, 17, 0, 0, 192, 168, 1, 201, 192, 168, 1, 100]);
            f.extend_from_slice(c);
            f
        })
        .collect()
}

fn udp_datagram(payload: &[u8]) -> Vec<u8> {
    let len = (8 + payload.len()) as u16;
    let mut v = vec![0x1d, 0x4e, 0x1d, 0x4e];
    v.extend_from_slice(&len.to_be_bytes());
    v.extend_from_slice(&[0, 0]);
    v.extend_from_slice(payload);
    v
}

/// Feeds frames through parse_ipv4 + the reassembler; returns the UDP payloads completed.
fn reassemble(r: &mut Reassembler, frames: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for f in frames {
        assert_eq!(net::parse_udp_frame(f), Err(NetError::Fragment));
        let ip = net::parse_ip(f).unwrap();
        let frag = Fragment::from_ip(&ip).expect("a fragment");
        if let Some(d) = r.push(&frag, 0).unwrap() {
            let u = d.udp().unwrap();
            assert_eq!((u.src_port, u.dst_port), (7502, 7502));
            assert_eq!(u.src_ip, std::net::IpAddr::from([192, 168, 1, 201]));
            out.push(u.payload.to_vec());
        }
    }
    out
}

#[test]
fn os1_32_datagrams_fragmented_for_1500_mtu_reassemble_byte_exact() {
    let (datagrams, skipped) = read_udp_datagrams(OS1_32.as_ref(), Some(7502)).unwrap();
    assert_eq!((datagrams.len(), skipped), (64, 0));
    assert!(datagrams.iter().all(|d| d.payload.len() == 6464));
    let per: Vec<Vec<Vec<u8>>> = datagrams
        .iter()
        .enumerate()
        .map(|(i, d)| fragment(&udp_datagram(&d.payload), 1000 + i as u16, 1500))
        .collect();
    assert!(per.iter().all(|f| f.len() == 5));
    assert_eq!(per[0][4].len(), 14 + 20 + 552);
    let expected: Vec<Vec<u8>> = datagrams.iter().map(|d| d.payload.clone()).collect();
    let want = ReassemblyCounters {
        fragments: 320,
        completed: 64,
        completed_bytes: 64 * 6472,
        ..Default::default()
    };

    // In order.
    let mut r = Reassembler::new(ReassemblyConfig::default());
    let frames: Vec<Vec<u8>> = per.iter().flatten().cloned().collect();
    assert_eq!(reassemble(&mut r, &frames), expected);
    assert_eq!(*r.counters(), want);

    // Each datagram's fragments reversed (last first), datagrams still in order.
    let mut r = Reassembler::new(ReassemblyConfig::default());
    let frames: Vec<Vec<u8>> = per.iter().flat_map(|f| f.iter().rev()).cloned().collect();
    assert_eq!(reassemble(&mut r, &frames), expected);
    assert_eq!(*r.counters(), want);

    // Four datagrams interleaved at a time (fragment k of d0..d3, then k+1...): at most 4 in
    // flight with 4 slots, so none is evicted.
    let mut r = Reassembler::new(ReassemblyConfig {
        max_datagrams: 4,
        ..ReassemblyConfig::default()
    });
    let mut frames = Vec::new();
    for group in per.chunks(4) {
        for k in 0..5 {
            for d in group {
                frames.push(d[k].clone());
            }
        }
    }
    assert_eq!(reassemble(&mut r, &frames), expected);
    assert_eq!(*r.counters(), want);
    assert_eq!(r.in_progress(), 0);
}
