//! Privileged end-to-end tests: the real XDP program on a veth in throwaway namespaces, the real
//! AF_XDP socket, real replayed captures, real TCP subscribers. Run as root by `cargo xtask test`.
use crate::common;

use std::{
    net::{TcpListener, TcpStream, UdpSocket},
    time::Duration,
};

use common::{
    Daemon, NetnsPair, collect_frames, data, get, in_netns, privileged, wait, xdp_attached,
};
use lidarxdp_core::sensor::{SensorConfig, SensorModel};

const DUAL: &str = "velodyne/vlp16/vlp16_dual_nebula_603pkt.pcap";
const CALIB: &str = "velodyne/vlp16/calibration/VLP16db.yaml";

fn replay(net: &NetnsPair, pcap: &str, rate: &str) -> u64 {
    get(&common::replay(net, pcap, 2368, rate), &["sent"])
}

/// Every data packet of the replayed dual-return capture arrives through AF_XDP at the recorded
/// rate, the XDP program, our counters and XDP_STATISTICS agree, and the frames the subscriber
/// receives equal offline decoding of the same pcap, point for point.
#[test]
fn replayed_capture_arrives_whole_and_equals_offline_decode() {
    if !privileged() {
        return;
    }
    let net = NetnsPair::new("e2e");
    let daemon = Daemon::start(&net.host_ns, &net.host_if, 7601, &[]);
    let subscriber = collect_frames(&net.host_ns, 7601);
    std::thread::sleep(Duration::from_millis(200));
    let sent = replay(&net, DUAL, "realtime");
    assert_eq!(sent, 603);
    std::thread::sleep(Duration::from_millis(500));
    let stats = daemon.stop();
    let live = subscriber.join().unwrap();

    assert_eq!(
        get(&stats, &["capture", "sensor_datagrams"]),
        603,
        "{stats}"
    );
    assert_eq!(get(&stats, &["xdp", "redirected"]), 603, "{stats}");
    assert_eq!(get(&stats, &["xdp", "no_socket"]), 0, "{stats}");
    assert_eq!(get(&stats, &["sensors", "0", "decoded"]), 603, "{stats}");
    assert_eq!(get(&stats, &["sensors", "0", "malformed"]), 0, "{stats}");
    common::assert_no_xsk_loss(&stats);

    let cfg = SensorConfig::new(0, SensorModel::Vlp16, data(CALIB));
    let (offline, _) = lidarxdp::offline::decode_pcap(&data(DUAL), &cfg, Some(2368)).unwrap();
    assert_eq!(
        get(&stats, &["capture", "frames_out"]),
        offline.len() as u64
    );
    common::assert_frames_equal(&live, &offline);
}

/// A RoboSense Helios-16P with its MSOP (6699) and DIFOP (7788, on by default: no
/// `--extra-port`) ports both steered to the same pipeline: the DIFOP's angle table is applied
/// live, and the frames equal offline decoding.
#[test]
fn robosense_msop_and_difop_ports_feed_one_pipeline() {
    if !privileged() {
        return;
    }
    const PCAP: &str = "robosense/helios16p/helios16p_nebula_pr79.pcap";
    const CSV: &str = "robosense/helios16p/RobosenseHelios16P.csv";
    let net = NetnsPair::new("rs");
    let csv = data(CSV);
    let daemon = Daemon::start_with(
        &net.host_ns,
        &net.host_if,
        7604,
        &[
            "--sensor",
            "helios16p",
            "--port",
            "6699",
            "--calibration",
            csv.to_str().unwrap(),
        ],
    );
    let sub = collect_frames(&net.host_ns, 7604);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        get(&common::replay(&net, PCAP, 0, "realtime"), &["sent"]),
        751
    );
    std::thread::sleep(Duration::from_millis(500));
    let stats = daemon.stop();
    let live = sub.join().unwrap();
    assert_eq!(get(&stats, &["xdp", "redirected"]), 751, "{stats}");
    assert_eq!(get(&stats, &["sensors", "0", "decoded"]), 750, "{stats}");
    assert_eq!(
        get(&stats, &["sensors", "0", "ignored"]),
        1,
        "DIFOP: {stats}"
    );
    assert_eq!(
        get(&stats, &["sensors", "0", "robosense", "difop_packets"]),
        1,
        "the vendor decoder's own counter: {stats}"
    );
    assert_eq!(get(&stats, &["sensors", "0", "malformed"]), 0, "{stats}");
    let cfg = SensorConfig::new(0, SensorModel::Helios16p, csv);
    let (offline, _) = lidarxdp::offline::decode_pcap(&data(PCAP), &cfg, None).unwrap();
    assert_eq!(
        offline.iter().map(|f| f.points.len()).collect::<Vec<_>>(),
        // Default range: the Helios-16P datasheet's (0.2, 150) m (docs/sensors.md);
        // decode_robosense_helios16p.rs uses the Nebula PR's (0.2, 200) m and gets the PR's
        // counts.
        [15_256, 15_794, 15_782, 15_706, 15_785, 601]
    );
    common::assert_frames_equal(&live, &offline);
}

/// With the program attached, a ping, a UDP datagram to another port and a TCP connection to
/// the host side still reach the kernel; the malformed sensor packets are counted and dropped
/// and the daemon keeps running.
#[test]
fn other_traffic_passes_and_malformed_packets_are_counted() {
    if !privileged() {
        return;
    }
    let net = NetnsPair::new("pass");
    let daemon = Daemon::start(&net.host_ns, &net.host_if, 7602, &[]);
    assert!(xdp_attached(&net.host_ns, &net.host_if));

    // ping
    let ping = NetnsPair::exec(
        &net.sensor_ns,
        &["ping", "-c", "3", "-i", "0.2", "-W", "2", &net.host_ip],
    )
    .output()
    .unwrap();
    assert!(
        ping.status.success(),
        "ping failed: {}",
        String::from_utf8_lossy(&ping.stdout)
    );

    // UDP to another port reaches a kernel socket.
    let udp = in_netns(&net.host_ns, || UdpSocket::bind("0.0.0.0:9999").unwrap());
    udp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let host_ip = net.host_ip.clone();
    in_netns(&net.sensor_ns, move || {
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        s.send_to(b"not a sensor", format!("{host_ip}:9999"))
            .unwrap();
    });
    let mut buf = [0u8; 64];
    let (n, _) = udp
        .recv_from(&mut buf)
        .expect("UDP datagram to port 9999 reached the kernel");
    assert_eq!(&buf[..n], b"not a sensor");

    // TCP connection to a kernel listener.
    let listener = in_netns(&net.host_ns, || TcpListener::bind("0.0.0.0:9998").unwrap());
    let host_ip = net.host_ip.clone();
    in_netns(&net.sensor_ns, move || {
        let s = TcpStream::connect_timeout(
            &format!("{host_ip}:9998").parse().unwrap(),
            Duration::from_secs(5),
        );
        assert!(s.is_ok(), "TCP connect through XDP: {s:?}");
    });
    let (_conn, _) = listener.accept().unwrap();

    // Malformed sensor packets: truncated, and a corrupted block flag.
    let good = first_payload(DUAL);
    let mut bad_flag = good.clone();
    bad_flag[100] = 0x00; // block 1 flag byte 0 (must be 0xFF)
    let host_ip = net.host_ip.clone();
    in_netns(&net.sensor_ns, move || {
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        s.send_to(&good[..1205], format!("{host_ip}:2368")).unwrap();
        s.send_to(&bad_flag, format!("{host_ip}:2368")).unwrap();
    });
    std::thread::sleep(Duration::from_millis(300));
    // Still running, and still serving.
    let sent = replay(&net, "velodyne/vlp16/vlp16_strongest_84pkt.pcap", "max");
    assert_eq!(sent, 84);
    std::thread::sleep(Duration::from_millis(300));
    let stats = daemon.stop();
    assert_eq!(get(&stats, &["sensors", "0", "malformed"]), 2, "{stats}");
    assert_eq!(get(&stats, &["sensors", "0", "decoded"]), 84, "{stats}");
    assert_eq!(get(&stats, &["xdp", "redirected"]), 86, "{stats}");
    assert!(
        get(&stats, &["xdp", "passed"]) >= 6,
        "ping, UDP, TCP passed: {stats}"
    );
}

/// After SIGKILL no XDP program is left on the interface and sensor packets reach the kernel.
#[test]
fn sigkill_leaves_no_program_behind() {
    if !privileged() {
        return;
    }
    let net = NetnsPair::new("kill");
    let mut daemon = Daemon::start(&net.host_ns, &net.host_if, 7603, &[]);
    assert!(
        xdp_attached(&net.host_ns, &net.host_if),
        "program attached while running"
    );
    daemon.signal(libc::SIGKILL);
    let status = wait(&mut daemon.child, 10);
    assert!(!status.success());
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while xdp_attached(&net.host_ns, &net.host_if) {
        assert!(
            std::time::Instant::now() < deadline,
            "XDP program still attached after SIGKILL"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let udp = in_netns(&net.host_ns, || UdpSocket::bind("0.0.0.0:2368").unwrap());
    udp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let payload = first_payload(DUAL);
    let host_ip = net.host_ip.clone();
    let sent = payload.clone();
    in_netns(&net.sensor_ns, move || {
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        s.send_to(&sent, format!("{host_ip}:2368")).unwrap();
    });
    let mut buf = vec![0u8; 2048];
    let (n, _) = udp
        .recv_from(&mut buf)
        .expect("sensor packet reached the kernel after SIGKILL");
    assert_eq!(&buf[..n], &payload[..]);
}

fn first_payload(pcap: &str) -> Vec<u8> {
    let d = lidarxdp::offline::udp_payloads(&data(pcap))
        .unwrap()
        .next()
        .expect("capture has a datagram")
        .unwrap();
    d.payload.to_vec()
}
