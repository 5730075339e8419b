//! Privileged end-to-end test of IPv4 fragments (Ouster over a 1500-byte MTU): the real XDP
//! program on a 1500-MTU veth in throwaway namespaces, the real AF_XDP socket, the real daemon,
//! and `lidarxdp replay` sending the OS1-32 capture's 6,464-byte datagrams so that the kernel
//! fragments each into 5 IPv4 fragments (4 × 1480 + 552 payload bytes).
//!
//! The daemon runs the Ouster decoder with the capture's metadata: every reassembled datagram
//! reaches the sensor's pipeline (counted per sensor: packets, reassembled, bytes) and is
//! decoded, and the frame a TCP subscriber receives equals offline decoding of the capture,
//! point for point. Byte-exactness is checked on the fragments the kernel really sent: a `tcpdump` on the sensor
//! side records them and the test reassembles that recording with the same `Reassembler` the
//! daemon runs, comparing every datagram with the capture's payload.
//!
//! The MTU rule (`docs/deploy.md`, "MTU"): up to 1774 a frame fits one UMEM chunk; above it
//! (a jumbo MTU of 9000) the socket is multi-buffer and a frame arrives as a chain of chunks;
//! above 18 chunks (MTU 32,238) the daemon refuses to start with an error naming the MTU and
//! the UMEM chunk size. Run as root by `cargo xtask test`.
use crate::common;

use std::{
    io::{BufRead, BufReader},
    net::UdpSocket,
    process::Stdio,
    time::Duration,
};

use common::{Daemon, NetnsPair, data, get, in_netns, privileged};
use lidarxdp::replay::read_udp_datagrams;
use lidarxdp_core::{
    net,
    reassembly::{Fragment, Reassembler, ReassemblyConfig},
};

const OS1_32: &str = "ouster/os1-32/OS-1-32-G_v2.1.1_1024x10.pcap";
const CALIB: &str = "ouster/os1-32/OS-1-32-G_v2.1.1_1024x10.json";
const PORT: u16 = 7502;

/// Starts `lidarxdp run --sensor ouster --port 7502` with the OS1-32 metadata in `ns`.
fn start_daemon(ns: &str, iface: &str, listen_port: u16) -> Daemon {
    let calib = data(CALIB);
    let port = PORT.to_string();
    Daemon::start_with(
        ns,
        iface,
        listen_port,
        &[
            "--sensor",
            "ouster",
            "--port",
            &port,
            "--calibration",
            calib.to_str().unwrap(),
        ],
    )
}

/// A `tcpdump` writing what leaves the sensor side; stopped (SIGINT) and reaped on `finish`.
struct Tcpdump {
    child: std::process::Child,
    path: std::path::PathBuf,
    log: Option<std::thread::JoinHandle<String>>,
}

impl Tcpdump {
    fn start(ns: &str, iface: &str, filter: &str) -> Self {
        let path = std::env::temp_dir().join(format!("lidarxdp-frag-{}.pcap", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let mut child = NetnsPair::exec(
            ns,
            &[
                "tcpdump",
                "-i",
                iface,
                "-n",
                "-U",
                "--immediate-mode",
                "-B",
                "65536",
            ],
        )
        .arg("-w")
        .arg(&path)
        .arg(filter)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tcpdump");
        // tcpdump reports "listening on IFACE" once its socket is capturing.
        let mut line = String::new();
        let mut err = BufReader::new(child.stderr.take().unwrap());
        while !line.contains("listening on") {
            line.clear();
            assert!(
                err.read_line(&mut line).unwrap() > 0,
                "tcpdump exited before capturing"
            );
        }
        let log = std::thread::spawn(move || {
            let mut rest = String::new();
            let _ = std::io::Read::read_to_string(&mut err, &mut rest);
            rest
        });
        Self {
            child,
            path,
            log: Some(log),
        }
    }

    /// Stops the capture and returns its Ethernet frames and tcpdump's closing report.
    fn finish(mut self) -> (Vec<Vec<u8>>, String) {
        // SAFETY: kill(2) on our own unreaped child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        common::wait(&mut self.child, 10);
        let report = self
            .log
            .take()
            .map(|h| h.join().unwrap())
            .unwrap_or_default();
        let file = std::fs::File::open(&self.path).unwrap();
        let mut r = pcap_file::pcap::PcapReader::new(file).unwrap();
        let mut frames = Vec::new();
        while let Some(p) = r.next_packet() {
            frames.push(p.unwrap().data.into_owned());
        }
        let _ = std::fs::remove_file(&self.path);
        (frames, report)
    }
}

impl Drop for Tcpdump {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every OS1-32 datagram, fragmented by the kernel for a 1500-byte MTU, is steered by the XDP
/// program (first fragment by port, later ones by the tracked IP id), reassembled by the daemon
/// and handed to the sensor's pipeline: 64 datagrams from 320 fragments, no failure, and the XDP,
/// capture, reassembly and per-sensor counters agree. Another host's fragmented UDP to a kernel
/// socket still reaches the kernel whole. The fragments on the wire reassemble byte-exactly.
#[test]
fn ouster_datagrams_fragmented_on_1500_mtu_are_steered_and_reassembled() {
    if !privileged() {
        return;
    }
    let net = NetnsPair::new("frag");
    net.set_mtu(1500).unwrap();
    let (datagrams, _) = read_udp_datagrams(&data(OS1_32), Some(PORT)).unwrap();
    assert_eq!(datagrams.len(), 64);

    let daemon = start_daemon(&net.host_ns, &net.host_if, 7611);
    let subscriber = common::collect_frames(&net.host_ns, 7611);
    std::thread::sleep(Duration::from_millis(200));
    let dump = Tcpdump::start(
        &net.sensor_ns,
        &net.sensor_if,
        &format!("ip and src host {}", net.sensor_ip),
    );

    let v = common::replay(&net, OS1_32, PORT, "realtime");
    assert_eq!(get(&v, &["sent"]), 64, "{v}");
    assert_eq!(get(&v, &["bytes"]), 64 * 6464, "{v}");

    // A 5,000-byte datagram to a kernel socket (not a sensor port): 4 fragments, all passed.
    let udp = in_netns(&net.host_ns, || UdpSocket::bind("0.0.0.0:9999").unwrap());
    udp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let big: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
    let host_ip = net.host_ip.clone();
    let sent = big.clone();
    in_netns(&net.sensor_ns, move || {
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        lidarxdp::replay::allow_fragmentation(&s).unwrap();
        s.send_to(&sent, format!("{host_ip}:9999")).unwrap();
    });
    let mut buf = vec![0u8; 8192];
    let (n, _) = udp
        .recv_from(&mut buf)
        .expect("fragmented datagram to port 9999 reached the kernel");
    assert_eq!(&buf[..n], &big[..]);

    std::thread::sleep(Duration::from_millis(300));
    let (wire, report) = dump.finish();
    let stats = daemon.stop();

    // XDP: 64 first fragments tracked, 64 × 5 fragments redirected, the other datagram's 3
    // later fragments passed (its first fragment is passed as non-sensor UDP).
    let xdp = |k: &str| get(&stats, &["xdp", k]);
    assert_eq!(xdp("frag_tracked"), 64, "{stats}");
    assert_eq!(xdp("frag_redirected"), 320, "{stats}");
    assert_eq!(xdp("redirected"), 320, "{stats}");
    assert_eq!(xdp("frag_passed"), 3, "{stats}");
    assert_eq!(xdp("frag_track_failed"), 0, "{stats}");
    assert_eq!(xdp("no_socket"), 0, "{stats}");
    assert_eq!(xdp("malformed"), 0, "{stats}");
    // Capture thread and reassembly.
    let cap = |k: &str| get(&stats, &["capture", k]);
    assert_eq!(cap("rx_frames"), 320, "{stats}");
    assert_eq!(cap("fragments"), 320, "{stats}");
    assert_eq!(cap("sensor_datagrams"), 64, "{stats}");
    assert_eq!(cap("not_udp"), 0, "{stats}");
    assert_eq!(cap("unknown_sensor"), 0, "{stats}");
    let ra = |k: &str| get(&stats, &["reassembly", k]);
    assert_eq!(ra("fragments"), 320, "{stats}");
    assert_eq!(ra("completed"), 64, "{stats}");
    assert_eq!(ra("completed_bytes"), 64 * 6472, "{stats}");
    assert_eq!(ra("failed"), 0, "{stats}");
    assert_eq!(ra("dropped_fragments"), 0, "{stats}");
    // The sensor's pipeline got every datagram whole and decoded it.
    let s0 = |k: &str| get(&stats, &["sensors", "0", k]);
    assert_eq!(s0("packets"), 64, "{stats}");
    assert_eq!(s0("reassembled"), 64, "{stats}");
    assert_eq!(s0("bytes"), 64 * 6464, "{stats}");
    assert_eq!(s0("decoded"), 64, "{stats}");
    assert_eq!((s0("ignored"), s0("malformed")), (0, 0), "{stats}");
    // The frame the subscriber received equals offline decoding, point for point.
    let live = subscriber.join().unwrap();
    let cfg = lidarxdp_core::sensor::SensorConfig::new(
        0,
        lidarxdp_core::sensor::SensorModel::Ouster,
        data(CALIB),
    );
    let (offline, _) = lidarxdp::offline::decode_pcap(&data(OS1_32), &cfg, Some(PORT)).unwrap();
    assert_eq!(offline.len(), 1, "the capture holds one frame");
    assert_eq!(live.len(), offline.len(), "frames received");
    assert_eq!(s0("frames"), 1, "{stats}");
    let (h, pts) = &live[0];
    assert_eq!(h.packets_received, 64);
    assert_eq!(h.packets_expected, 64);
    assert_eq!(h.start_ns, offline[0].header.start_ns);
    assert_eq!(pts.len(), 27_310, "points in the OS1-32 frame");
    assert!(
        pts == &offline[0].points,
        "live frame differs from offline decoding"
    );
    for field in [
        "rx_dropped",
        "rx_invalid_descs",
        "rx_ring_full",
        "rx_fill_ring_empty_descs",
    ] {
        assert_eq!(get(&stats, &["xsk", field]), 0, "{field}: {stats}");
    }

    // The kernel's fragments, as they left the sensor side: 5 per Ouster datagram, 4 for the
    // other one; reassembled, the Ouster ones equal the capture's payloads byte for byte.
    let mut r = Reassembler::new(ReassemblyConfig::default());
    let mut sizes = Vec::new();
    let mut ouster = Vec::new();
    for f in &wire {
        let Ok(ip) = net::parse_ip(f) else { continue };
        let Some(frag) = Fragment::from_ip(&ip) else {
            continue;
        };
        sizes.push(frag.payload.len());
        if let Some(d) = r.push(&frag, 0).unwrap() {
            let u = d.udp().unwrap();
            if u.dst_port == PORT {
                ouster.push(u.payload.to_vec());
            } else {
                assert_eq!((u.dst_port, u.payload), (9999, &big[..]));
            }
        }
    }
    assert_eq!(sizes.len(), 324, "fragments on the wire; tcpdump: {report}");
    assert_eq!(sizes.iter().filter(|&&n| n == 1480).count(), 64 * 4 + 3);
    assert_eq!(sizes.iter().filter(|&&n| n == 552).count(), 64);
    assert_eq!(r.counters().completed, 65);
    assert_eq!(ouster.len(), 64);
    for (i, (got, want)) in ouster.iter().zip(&datagrams).enumerate() {
        assert!(
            got == &want.payload,
            "datagram {i} differs after reassembly"
        );
    }
}

/// An MTU above what a chain of 18 UMEM chunks holds (32,238 with 2 KiB chunks) is refused
/// in every XDP mode before any XDP program is attached, naming the MTU, the chunk size and
/// the largest MTU taken.
#[test]
fn mtu_above_a_chain_of_chunks_is_refused_at_start_up() {
    if !privileged() {
        return;
    }
    let net = NetnsPair::new("jumbo");
    net.set_mtu(32_239).unwrap();
    let calib = data(CALIB);
    let want = format!(
        "interface {} has MTU 32239, but a frame may span at most 18 AF_XDP UMEM chunks of \
         2048 bytes, each holding 1792 bytes (2048 minus the kernel's 256-byte XDP headroom), \
         so the largest MTU taken is 32238",
        net.host_if
    );
    for mode in ["auto", "native", "generic"] {
        let out = NetnsPair::exec(
            &net.host_ns,
            &[
                env!("CARGO_BIN_EXE_lidarxdp"),
                "run",
                "--iface",
                &net.host_if,
            ],
        )
        .args(["--listen", "127.0.0.1:7615", "--xdp-mode", mode])
        .args(["--sensor", "ouster", "--port", "7502", "--calibration"])
        .arg(&calib)
        .output()
        .expect("run the daemon");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "--xdp-mode {mode}: {stderr}");
        assert!(stderr.contains(&want), "--xdp-mode {mode}: {stderr}");
        assert!(
            !common::xdp_attached(&net.host_ns, &net.host_if),
            "--xdp-mode {mode}: no program left attached"
        );
    }
}

const OS2_128: &str = "ouster/os2-128/OS-2-128-U1_v2.3.0_1024x10";

/// Jumbo frames (issue 26): at MTU 9000, in native and in generic XDP mode, the OS2-128
/// capture's 24,832-byte lidar datagrams leave the sender as 3 IPv4 fragments of up to 9,014
/// bytes per frame, each longer than a 2 KiB UMEM chunk: the multi-buffer socket
/// (`XDP_USE_SG`, program `xdp.frags`) receives every one as a chain of descriptors, the
/// daemon reassembles the 64 datagrams and decodes the frame equal, point for point, to
/// offline decoding, and its 10 IMU packets (one chunk each) too. Nothing is lost. The
/// daemon's `--record-pcap` holds the 64 reassembled lidar datagrams and the 10 IMU datagrams,
/// byte for byte.
#[test]
fn jumbo_mtu_9000_decodes_every_datagram_in_native_and_generic_mode() {
    if !privileged() {
        return;
    }
    let cfg = lidarxdp_core::sensor::SensorConfig::new(
        0,
        lidarxdp_core::sensor::SensorModel::Ouster,
        data(&format!("{OS2_128}.json")),
    );
    let pcap = data(&format!("{OS2_128}.pcap"));
    let (offline, _) = lidarxdp::offline::decode_pcap(&pcap, &cfg, Some(PORT)).unwrap();
    assert_eq!(offline.len(), 1, "the capture holds one frame");
    for (mode, listen) in [("native", 7618u16), ("generic", 7619)] {
        let net = NetnsPair::new(if mode == "native" { "j9n" } else { "j9g" });
        net.set_mtu(9000).unwrap();
        let calib = data(&format!("{OS2_128}.json"));
        let rec =
            std::env::temp_dir().join(format!("lidarxdp-jumbo-{}-{mode}.pcap", std::process::id()));
        let daemon = Daemon::start_with(
            &net.host_ns,
            &net.host_if,
            listen,
            &[
                "--sensor",
                "ouster",
                "--calibration",
                calib.to_str().unwrap(),
                "--xdp-mode",
                mode,
                "--record-pcap",
                rec.to_str().unwrap(),
            ],
        );
        let subscriber = common::collect_frames(&net.host_ns, listen);
        std::thread::sleep(Duration::from_millis(200));
        // Each datagram to its recorded port: 7502 (lidar), 7503 (IMU).
        let v = common::replay(&net, &format!("{OS2_128}.pcap"), 0, "realtime");
        assert_eq!(get(&v, &["sent"]), 74, "{v}");
        std::thread::sleep(Duration::from_millis(300));
        let stats = daemon.stop();
        let g = |path: &[&str]| get(&stats, path);
        // 24,840-byte UDP datagrams in fragments of 8,976 + 8,976 + 6,888 payload bytes.
        assert_eq!(g(&["xdp", "redirected"]), 64 * 3 + 10, "{mode}: {stats}");
        assert_eq!(g(&["capture", "rx_frames"]), 64 * 3 + 10, "{mode}: {stats}");
        assert_eq!(g(&["xsk", "multi_buffer"]), 64 * 3, "{mode}: {stats}");
        assert_eq!(g(&["xsk", "invalid_descs"]), 0, "{mode}: {stats}");
        assert_eq!(g(&["reassembly", "completed"]), 64, "{mode}: {stats}");
        assert_eq!(g(&["sensors", "0", "decoded"]), 64, "{mode}: {stats}");
        assert_eq!(g(&["sensors", "0", "auxiliary"]), 10, "{mode}: {stats}");
        common::assert_no_xsk_loss(&stats);
        let live = subscriber.join().unwrap();
        assert_eq!(live.len(), 1, "{mode}: frames received");
        let (h, pts) = &live[0];
        assert_eq!(h.packets_received, 64, "{mode}");
        assert_eq!(h.start_ns, offline[0].header.start_ns, "{mode}");
        assert!(
            pts == &offline[0].points,
            "{mode}: live frame differs from offline decoding"
        );
        for port in [7502, 7503] {
            let (want, _) = read_udp_datagrams(&pcap, Some(port)).unwrap();
            let (got, _) = read_udp_datagrams(&rec, Some(port)).unwrap();
            assert_eq!(got.len(), want.len(), "{mode}: port {port} recorded");
            assert_eq!(want.len(), if port == 7502 { 64 } else { 10 });
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(g.payload == w.payload, "{mode}: port {port} datagram {i}");
            }
        }
        let _ = std::fs::remove_file(&rec);
    }
}

/// At the largest MTU that fits a 2 KiB chunk (1774) every fragment of every Ouster datagram
/// (1,752 payload bytes: 1,786-byte frames) arrives in one descriptor (the socket is not
/// multi-buffer): nothing is dropped at the socket.
#[test]
fn largest_mtu_that_fits_loses_nothing() {
    if !privileged() {
        return;
    }
    let net = NetnsPair::new("mtumax");
    net.set_mtu(1774).unwrap();
    let daemon = start_daemon(&net.host_ns, &net.host_if, 7616);
    let subscriber = common::collect_frames(&net.host_ns, 7616);
    std::thread::sleep(Duration::from_millis(200));
    let v = common::replay(&net, OS1_32, PORT, "realtime");
    assert_eq!(get(&v, &["sent"]), 64, "{v}");
    std::thread::sleep(Duration::from_millis(300));
    let stats = daemon.stop();
    // 6,472-byte UDP datagrams in 1,752-byte fragments: 3 × 1752 + 1216.
    assert_eq!(get(&stats, &["xdp", "redirected"]), 64 * 4, "{stats}");
    assert_eq!(get(&stats, &["capture", "rx_frames"]), 64 * 4, "{stats}");
    assert_eq!(get(&stats, &["reassembly", "completed"]), 64, "{stats}");
    assert_eq!(get(&stats, &["sensors", "0", "decoded"]), 64, "{stats}");
    assert_eq!(get(&stats, &["xsk", "multi_buffer"]), 0, "{stats}");
    for field in ["rx_dropped", "rx_invalid_descs", "rx_ring_full"] {
        assert_eq!(get(&stats, &["xsk", field]), 0, "{field}: {stats}");
    }
    let live = subscriber.join().unwrap();
    assert_eq!(live.len(), 1, "frames received");
    assert_eq!(live[0].0.packets_received, 64);
}

/// An MTU raised to 9000 while the daemon runs (generic XDP: veth lets both ends change) makes
/// the kernel drop every frame longer than a UMEM chunk holds: none is lost silently, each is
/// counted in `xsk.rx_dropped` (and the capture thread logs the change).
#[test]
fn mtu_raised_while_running_drops_are_counted() {
    if !privileged() {
        return;
    }
    let net = NetnsPair::new("mturun");
    net.set_mtu(1500).unwrap();
    let calib = data(CALIB);
    let port = PORT.to_string();
    let daemon = Daemon::start_with(
        &net.host_ns,
        &net.host_if,
        7617,
        &[
            "--sensor",
            "ouster",
            "--port",
            &port,
            "--calibration",
            calib.to_str().unwrap(),
            "--xdp-mode",
            "generic",
        ],
    );
    net.set_mtu(9000).unwrap();
    let v = common::replay(&net, OS1_32, PORT, "realtime");
    assert_eq!(get(&v, &["sent"]), 64, "{v}");
    std::thread::sleep(Duration::from_millis(300));
    let stats = daemon.stop();
    // Each 6,472-byte UDP datagram now leaves whole, in one 6,506-byte frame.
    assert_eq!(get(&stats, &["xdp", "redirected"]), 64, "{stats}");
    assert_eq!(get(&stats, &["xdp", "frag_tracked"]), 0, "{stats}");
    assert_eq!(get(&stats, &["xsk", "rx_dropped"]), 64, "{stats}");
    assert_eq!(get(&stats, &["capture", "rx_frames"]), 0, "{stats}");
    assert_eq!(get(&stats, &["sensors", "0", "decoded"]), 0, "{stats}");
}

/// Sends hand-made IPv4 packets (header included, `IPPROTO_RAW`) from inside namespace `ns`:
/// the kernel fills in the total length and checksum and sends each unchanged.
fn send_raw(ns: &str, dst: std::net::Ipv4Addr, packets: Vec<Vec<u8>>) {
    in_netns(ns, move || {
        // SAFETY: plain socket(2) call; the fd is closed below.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_RAW) };
        assert!(fd >= 0, "raw socket: {}", std::io::Error::last_os_error());
        let addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: 0,
            sin_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes(dst.octets()),
            },
            sin_zero: [0; 8],
        };
        for p in &packets {
            // SAFETY: `p` and `addr` are live for the call and their lengths are passed.
            let n = unsafe {
                libc::sendto(
                    fd,
                    p.as_ptr().cast(),
                    p.len(),
                    0,
                    (&addr as *const libc::sockaddr_in).cast(),
                    std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
                )
            };
            assert_eq!(n, p.len() as isize, "{}", std::io::Error::last_os_error());
            std::thread::sleep(Duration::from_millis(2));
        }
        // SAFETY: `fd` is ours and open.
        unsafe { libc::close(fd) };
    });
}

/// An IPv4 UDP fragment from `src` to `dst`: identification `id`, byte offset `offset`
/// (multiple of 8), MF flag `more`, fragment payload `payload`.
fn ip_fragment(
    src: [u8; 4],
    dst: [u8; 4],
    id: u16,
    offset: u16,
    more: bool,
    payload: &[u8],
) -> Vec<u8> {
    let frag = (offset / 8) | if more { 0x2000 } else { 0 };
    let mut v = vec![0x45, 0];
    v.extend_from_slice(&((20 + payload.len()) as u16).to_be_bytes());
    v.extend_from_slice(&id.to_be_bytes());
    v.extend_from_slice(&frag.to_be_bytes());
    v.extend_from_slice(&[64, 17, 0, 0]);
    v.extend_from_slice(&src);
    v.extend_from_slice(&dst);
    v.extend_from_slice(payload);
    v
}

/// Faults on the wire, each counted where it belongs, while the sensor keeps being served: a
/// datagram whose last fragment is lost (reassembly `timed_out`), one with an overlapping
/// fragment (`overlaps`, and its remaining fragment `dropped_fragments`), one whose first fragment
/// is sent twice (`duplicates`), and an orphan later fragment whose first fragment never came
/// (passed by XDP: `frag_passed`). The OS1-32 capture replayed afterwards is reassembled whole.
#[test]
fn fragment_faults_are_counted_and_the_sensor_keeps_being_served() {
    if !privileged() {
        return;
    }
    let net = NetnsPair::new("ffault");
    net.set_mtu(1500).unwrap();
    let daemon = start_daemon(&net.host_ns, &net.host_if, 7612);
    let src: std::net::Ipv4Addr = net.sensor_ip.parse().unwrap();
    let dst: std::net::Ipv4Addr = net.host_ip.parse().unwrap();
    let (s, d) = (src.octets(), dst.octets());
    // A 3000-byte UDP payload to the sensor port: UDP length 3008 = 1480 + 1480 + 48.
    let mut udp = vec![0x9c, 0x40, 0x1d, 0x4e, 0x0b, 0xc0, 0, 0];
    udp.extend((0..3000u32).map(|i| (i % 249) as u8));
    let f =
        |id, off: usize, end: usize, more| ip_fragment(s, d, id, off as u16, more, &udp[off..end]);
    let packets = vec![
        // X: last fragment lost.
        f(0x1001, 0, 1480, true),
        f(0x1001, 1480, 2960, true),
        // Y: a fragment at offset 8 overlaps the first; its last fragment is then dropped.
        f(0x1002, 0, 1480, true),
        f(0x1002, 8, 1488, true),
        f(0x1002, 2960, 3008, false),
        // Z: the first fragment twice.
        f(0x1003, 0, 1480, true),
        f(0x1003, 0, 1480, true),
        // An orphan last fragment (its first never sent).
        f(0x1004, 2960, 3008, false),
    ];
    send_raw(&net.sensor_ns, dst, packets);
    // Let X's 1 s reassembly timeout expire in the daemon.
    std::thread::sleep(Duration::from_millis(1300));

    common::replay(&net, OS1_32, PORT, "realtime");
    std::thread::sleep(Duration::from_millis(300));
    let stats = daemon.stop();

    let xdp = |k: &str| get(&stats, &["xdp", k]);
    assert_eq!(xdp("frag_tracked"), 3 + 1 + 64, "{stats}"); // X, Y, Z (twice), Ouster
    assert_eq!(xdp("frag_redirected"), 7 + 320, "{stats}");
    assert_eq!(xdp("frag_passed"), 1, "{stats}");
    let ra = |k: &str| get(&stats, &["reassembly", k]);
    assert_eq!(ra("fragments"), 7 + 320, "{stats}");
    assert_eq!(ra("completed"), 64, "{stats}");
    assert_eq!(ra("timed_out"), 1, "{stats}");
    assert_eq!(ra("overlaps"), 1, "{stats}");
    assert_eq!(ra("duplicates"), 1, "{stats}");
    assert_eq!(ra("dropped_fragments"), 1, "{stats}");
    assert_eq!(ra("failed"), 3, "{stats}");
    assert_eq!(
        (ra("too_big"), ra("too_many"), ra("malformed")),
        (0, 0, 0),
        "{stats}"
    );
    let s0 = |k: &str| get(&stats, &["sensors", "0", k]);
    assert_eq!((s0("packets"), s0("reassembled")), (64, 64), "{stats}");
}
