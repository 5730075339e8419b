//! Privileged end-to-end tests of sensors on IPv6 (issue 39, fault class 6): the real XDP
//! program on a veth in throwaway namespaces that have only the IPv6 addresses the test gives
//! them (added `nodad`: usable at once; the kernel's own link-local addresses are flushed, so
//! the sender's source address is the one the daemon is configured with), the real AF_XDP
//! socket, the real daemon, and `lidarxdp replay` sending a capture's datagrams over IPv6.
//!
//! - A VLP-16 from a link-local source (`--source fe80::77:1%<iface>`): every datagram is
//!   steered and decoded, the frames equal offline decoding of the capture; ICMPv6 (Neighbor
//!   Discovery is never configured statically here, so the ping only works if it passes), UDP to
//!   another port and UDP to the sensor's port from another IPv6 source still reach the kernel.
//! - An Ouster OS1-32 from a global source over a 1500-byte MTU: the kernel fragments each
//!   6,472-byte UDP datagram into IPv6 fragments (4 × 1448 + 680 bytes); the XDP program
//!   tracks the first fragment of each and steers the later ones by (source, destination,
//!   identification), the daemon reassembles them, and the frame equals offline decoding. Another
//!   datagram's fragments to a kernel socket are passed and reach it whole.
//!
//! Run as root by `cargo xtask test`.
use crate::common;

use std::{net::UdpSocket, time::Duration};

use common::{Daemon, NetnsPair, collect_frames, data, get, in_netns, privileged, sh};
use lidarxdp_core::sensor::{SensorConfig, SensorModel};

const DUAL: &str = "velodyne/vlp16/vlp16_dual_nebula_603pkt.pcap";
const VLP16_CAL: &str = "velodyne/vlp16/calibration/VLP16db.yaml";
const OS1_32: &str = "ouster/os1-32/OS-1-32-G_v2.1.1_1024x10.pcap";
const OS1_CAL: &str = "ouster/os1-32/OS-1-32-G_v2.1.1_1024x10.json";

const SENSOR_LL: &str = "fe80::77:1";
const HOST_LL: &str = "fe80::77:2";
const SENSOR_GUA: &str = "fd00:77::1";
/// Another host on the sensor's link, in another /64, so that the kernel picks the sensor's
/// address as the replay's source (RFC 6724 rule 8, longest matching prefix).
const OTHER_GUA: &str = "fd00:78::3";
const HOST_GUA: &str = "fd00:77::2";

/// Replaces the kernel's link-local addresses on both veth ends with fixed ones and adds the
/// global ones (sensor side: the sensor's and a second host's), all `nodad`.
fn add_ipv6(net: &NetnsPair) {
    for (ns, ifname, addrs) in [
        (
            &net.sensor_ns,
            &net.sensor_if,
            &[SENSOR_LL, SENSOR_GUA, OTHER_GUA][..],
        ),
        (&net.host_ns, &net.host_if, &[HOST_LL, HOST_GUA][..]),
    ] {
        sh(&[
            "ip", "-n", ns, "-6", "addr", "flush", "dev", ifname, "scope", "link",
        ]);
        for a in addrs {
            let cidr = format!("{a}/64");
            sh(&["ip", "-n", ns, "addr", "add", &cidr, "dev", ifname, "nodad"]);
        }
    }
}

/// The interface index of `ifname` in namespace `ns` (the zone of a link-local address in a
/// socket address).
fn ifindex(ns: &str, ifname: &str) -> u32 {
    let out = sh(&["ip", "-n", ns, "-o", "link", "show", "dev", ifname]);
    out.split(':').next().unwrap().trim().parse().unwrap()
}

/// `ping -6 -c COUNT TARGET` from namespace `ns`, which must succeed.
fn ping6(ns: &str, target: &str, count: u32) {
    let count = count.to_string();
    let ping = NetnsPair::exec(
        ns,
        &["ping", "-6", "-c", &count, "-i", "0.2", "-W", "2", target],
    )
    .output()
    .unwrap();
    assert!(
        ping.status.success(),
        "ping -6 {target} failed: {}",
        String::from_utf8_lossy(&ping.stdout)
    );
}

/// `lidarxdp replay PCAP --to TO` in the sensor namespace; its JSON report.
fn replay_to(net: &NetnsPair, pcap: &str, to: &str) -> serde_json::Value {
    let out = NetnsPair::exec(&net.sensor_ns, &[env!("CARGO_BIN_EXE_lidarxdp"), "replay"])
        .arg(data(pcap))
        .args(["--to", to, "--rate", "realtime", "--json"])
        .output()
        .expect("run replay");
    assert!(
        out.status.success(),
        "replay: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("replay JSON")
}

/// A VLP-16 sending from a link-local address, configured with its zone: all 603 datagrams are
/// steered and decoded into the frames offline decoding gives; other IPv6 traffic passes.
#[test]
fn link_local_sensor_arrives_whole_and_other_ipv6_traffic_passes() {
    if !privileged() {
        return;
    }
    let net = NetnsPair::new("v6ll");
    add_ipv6(&net);
    let source = format!("{SENSOR_LL}%{}", net.host_if);
    let daemon = Daemon::start(&net.host_ns, &net.host_if, 7621, &["--source", &source]);
    let subscriber = collect_frames(&net.host_ns, 7621);
    std::thread::sleep(Duration::from_millis(200));

    let to = format!(
        "[{HOST_LL}%{}]:2368",
        ifindex(&net.sensor_ns, &net.sensor_if)
    );
    let v = replay_to(&net, DUAL, &to);
    assert_eq!(get(&v, &["sent"]), 603, "{v}");

    // ICMPv6 echo to the host's link-local address: needs Neighbor Discovery through XDP.
    let target = format!("{HOST_LL}%{}", net.sensor_if);
    ping6(&net.sensor_ns, &target, 3);
    // UDP to another port, and to the sensor's port from another source, reach kernel sockets.
    let other_port = in_netns(&net.host_ns, || UdpSocket::bind("[::]:9999").unwrap());
    let sensor_port = in_netns(&net.host_ns, || UdpSocket::bind("[::]:2368").unwrap());
    for s in [&other_port, &sensor_port] {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    }
    in_netns(&net.sensor_ns, || {
        let s = UdpSocket::bind(format!("[{OTHER_GUA}]:0")).unwrap();
        s.send_to(b"not a sensor", format!("[{HOST_GUA}]:9999"))
            .unwrap();
        s.send_to(b"another source", format!("[{HOST_GUA}]:2368"))
            .unwrap();
    });
    let mut buf = [0u8; 64];
    let (n, from) = other_port.recv_from(&mut buf).expect("UDP to port 9999");
    assert_eq!(
        (&buf[..n], from.ip()),
        (&b"not a sensor"[..], OTHER_GUA.parse().unwrap())
    );
    let (n, _) = sensor_port
        .recv_from(&mut buf)
        .expect("UDP to the sensor port from another source reached the kernel");
    assert_eq!(&buf[..n], b"another source");

    std::thread::sleep(Duration::from_millis(300));
    let stats = daemon.stop();
    let live = subscriber.join().unwrap();
    assert_eq!(get(&stats, &["xdp", "redirected"]), 603, "{stats}");
    assert_eq!(get(&stats, &["xdp", "no_socket"]), 0, "{stats}");
    assert_eq!(get(&stats, &["xdp", "malformed"]), 0, "{stats}");
    assert!(
        get(&stats, &["xdp", "passed"]) >= 8,
        "NDP, ping and the two UDP datagrams passed: {stats}"
    );
    assert_eq!(
        get(&stats, &["capture", "sensor_datagrams"]),
        603,
        "{stats}"
    );
    assert_eq!(get(&stats, &["capture", "not_udp"]), 0, "{stats}");
    assert_eq!(get(&stats, &["sensors", "0", "decoded"]), 603, "{stats}");
    assert_eq!(get(&stats, &["sensors", "0", "malformed"]), 0, "{stats}");
    common::assert_no_xsk_loss(&stats);

    let cfg = SensorConfig::new(0, SensorModel::Vlp16, data(VLP16_CAL));
    let (offline, _) = lidarxdp::offline::decode_pcap(&data(DUAL), &cfg, Some(2368)).unwrap();
    assert_eq!(
        get(&stats, &["capture", "frames_out"]),
        offline.len() as u64
    );
    common::assert_frames_equal(&live, &offline);
}

/// An OS1-32 sending from a global IPv6 address over a 1500-byte MTU: 64 datagrams of 6,472
/// bytes leave as 320 IPv6 fragments, all steered (64 tracked first fragments), reassembled and
/// decoded into the frame offline decoding gives; another host's fragmented datagram to a
/// kernel socket is passed (its 3 later fragments counted `frag_passed`) and arrives whole.
#[test]
fn fragmented_ipv6_ouster_is_steered_reassembled_and_decoded() {
    if !privileged() {
        return;
    }
    let net = NetnsPair::new("v6frag");
    net.set_mtu(1500).unwrap();
    add_ipv6(&net);
    let calib = data(OS1_CAL);
    let daemon = Daemon::start_with(
        &net.host_ns,
        &net.host_if,
        7622,
        &[
            "--sensor",
            "ouster",
            "--port",
            "7502",
            "--source",
            SENSOR_GUA,
            "--calibration",
            calib.to_str().unwrap(),
        ],
    );
    let subscriber = collect_frames(&net.host_ns, 7622);
    std::thread::sleep(Duration::from_millis(200));
    // Resolve the host's address (Neighbor Discovery through the XDP program) first: while a
    // neighbour is unresolved the kernel queues at most `unres_qlen_bytes` and refuses more.
    ping6(&net.sensor_ns, HOST_GUA, 1);
    let v = replay_to(&net, OS1_32, &format!("[{HOST_GUA}]:7502"));
    assert_eq!(get(&v, &["sent"]), 64, "{v}");
    assert_eq!(get(&v, &["bytes"]), 64 * 6464, "{v}");

    // 5,000 bytes from another source to a kernel socket: 4 fragments (3 × 1448 + 664).
    let udp = in_netns(&net.host_ns, || UdpSocket::bind("[::]:9999").unwrap());
    udp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let big: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
    let sent = big.clone();
    in_netns(&net.sensor_ns, move || {
        let s = UdpSocket::bind(format!("[{OTHER_GUA}]:0")).unwrap();
        s.send_to(&sent, format!("[{HOST_GUA}]:9999")).unwrap();
    });
    let mut buf = vec![0u8; 8192];
    let (n, _) = udp
        .recv_from(&mut buf)
        .expect("fragmented IPv6 datagram to port 9999 reached the kernel");
    assert_eq!(&buf[..n], &big[..]);

    std::thread::sleep(Duration::from_millis(300));
    let stats = daemon.stop();
    let xdp = |k: &str| get(&stats, &["xdp", k]);
    assert_eq!(xdp("frag_tracked"), 64, "{stats}");
    assert_eq!(xdp("frag_redirected"), 320, "{stats}");
    assert_eq!(xdp("redirected"), 320, "{stats}");
    assert_eq!(xdp("frag_passed"), 3, "{stats}");
    assert_eq!(xdp("frag_track_failed"), 0, "{stats}");
    assert_eq!(xdp("no_socket"), 0, "{stats}");
    assert_eq!(xdp("malformed"), 0, "{stats}");
    let cap = |k: &str| get(&stats, &["capture", k]);
    assert_eq!(cap("rx_frames"), 320, "{stats}");
    assert_eq!(cap("fragments"), 320, "{stats}");
    assert_eq!(cap("sensor_datagrams"), 64, "{stats}");
    assert_eq!(cap("not_udp"), 0, "{stats}");
    let ra = |k: &str| get(&stats, &["reassembly", k]);
    assert_eq!(ra("fragments"), 320, "{stats}");
    assert_eq!(ra("completed"), 64, "{stats}");
    assert_eq!(ra("completed_bytes"), 64 * 6472, "{stats}");
    assert_eq!(ra("failed"), 0, "{stats}");
    let s0 = |k: &str| get(&stats, &["sensors", "0", k]);
    assert_eq!(s0("reassembled"), 64, "{stats}");
    assert_eq!(s0("decoded"), 64, "{stats}");
    assert_eq!((s0("ignored"), s0("malformed")), (0, 0), "{stats}");
    common::assert_no_xsk_loss(&stats);

    let live = subscriber.join().unwrap();
    let cfg = SensorConfig::new(0, SensorModel::Ouster, data(OS1_CAL));
    let (offline, _) = lidarxdp::offline::decode_pcap(&data(OS1_32), &cfg, Some(7502)).unwrap();
    assert_eq!(offline.len(), 1, "the capture holds one frame");
    assert_eq!(live[0].1.len(), 27_310, "points in the OS1-32 frame");
    common::assert_frames_equal(&live, &offline);
}
