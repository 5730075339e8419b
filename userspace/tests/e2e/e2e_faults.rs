//! Privileged fault tests (issue 6, "a daemon operators can trust"): each fault is injected into
//! a daemon running on a veth pair in throwaway namespaces, and each test asserts, with exact
//! counter equations, that nothing was lost that could have been kept:
//!
//! - SIGKILL mid-stream, then an immediate restart on the same interface and queue;
//! - the interface going down and up (host side, then the sensor side);
//! - fill-ring starvation (a 64-frame UMEM and a stalled decoder), explained by XDP_STATISTICS;
//! - a subscriber vanishing (RST) in the middle of a frame;
//! - a flood of non-sensor UDP beside the sensor stream.
//!
//! Each test creates its own `NetnsPair` (removed on drop), listens on its own port in
//! 7650..=7669 and only sends to addresses inside the namespaces it created. Timing is polled
//! against deadlines, never assumed. Run as root by `cargo xtask test`.
use crate::common;

use std::{
    io::{Read, Write},
    net::TcpStream,
    process::{Child, Stdio},
    time::{Duration, Instant},
};

use common::{
    Daemon, LinkDrops, NetnsPair, UdpCounters, collect_frames, data, get, in_netns, privileged,
    wait,
};
use lidarxdp_core::sensor::{SensorConfig, SensorModel};

const DUAL: &str = "velodyne/vlp16/vlp16_dual_nebula_603pkt.pcap";
const CALIB: &str = "velodyne/vlp16/calibration/VLP16db.yaml";
/// Packets in [`DUAL`].
const DUAL_PACKETS: u64 = 603;
/// The daemon's metrics endpoint inside each test's host namespace.
const METRICS: &str = "127.0.0.1:9751";
/// How long `lidarxdp run` retries an `EBUSY` AF_XDP bind (`open_xsk` in `daemon/sources.rs`).
const BIND_RETRY: Duration = Duration::from_secs(10);

/// Polls `f` every 20 ms until it returns true; panics with `what` after `secs` seconds.
fn until(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(
            Instant::now() < deadline,
            "timed out after {secs} s: {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The daemon's live metrics (`GET /metrics` on [`METRICS`] inside `ns`), `None` when nothing
/// listens there.
fn try_scrape(ns: &str) -> Option<Vec<lidarxdp::metrics::Sample>> {
    let body = in_netns(ns, || {
        let mut s = TcpStream::connect(METRICS).ok()?;
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut resp = String::new();
        s.read_to_string(&mut resp).unwrap();
        resp.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())
    })?;
    Some(lidarxdp::metrics::parse(&body))
}

/// [`try_scrape`], panicking when the endpoint does not answer.
fn scrape(ns: &str) -> Vec<lidarxdp::metrics::Sample> {
    try_scrape(ns).expect("the daemon's metrics endpoint answers")
}

/// Sum of the samples of `name` (0 when the family is absent, e.g. `lidarxdp_xsk_*` before the
/// first `XDP_STATISTICS` read).
fn metric(samples: &[lidarxdp::metrics::Sample], name: &str) -> u64 {
    samples
        .iter()
        .filter(|s| s.name == name)
        .map(|s| s.value as u64)
        .sum()
}

/// One live metric of the daemon in `ns`.
fn live(ns: &str, name: &str) -> u64 {
    metric(&scrape(ns), name)
}

/// Starts `lidarxdp replay PCAP --to IP:PORT --rate RATE --loop LOOPS --json` in the sensor
/// namespace without waiting; its JSON report is on the child's stdout.
fn spawn_replay(net: &NetnsPair, pcap: &str, port: u16, rate: &str, loops: u32) -> Child {
    NetnsPair::exec(&net.sensor_ns, &[env!("CARGO_BIN_EXE_lidarxdp"), "replay"])
        .arg(data(pcap))
        .args(["--to", &format!("{}:{port}", net.host_ip)])
        .args(["--rate", rate, "--loop", &loops.to_string(), "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn replay")
}

/// Waits for a replay started by [`spawn_replay`] and returns its `sent`.
fn replay_sent(child: Child) -> u64 {
    let out = child.wait_with_output().expect("wait for replay");
    assert!(out.status.success(), "replay failed: {}", out.status);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("replay JSON");
    get(&v, &["sent"])
}

/// [`DUAL`] once to the sensor port at `rate`; asserts every datagram was sent.
fn replay_dual(net: &NetnsPair, rate: &str) {
    let r = common::replay(net, DUAL, 2368, rate);
    assert_eq!(get(&r, &["sent"]), DUAL_PACKETS, "{r}");
}

/// Ids of the XDP programs attached to `iface` (`prog/xdp id N` lines of `ip -d link`).
fn xdp_prog_ids(ns: &str, iface: &str) -> Vec<u32> {
    let text = common::sh(&["ip", "-n", ns, "-d", "link", "show", "dev", iface]);
    text.split("prog/xdp id ")
        .skip(1)
        .map(|rest| {
            let id: String = rest.chars().take_while(char::is_ascii_digit).collect();
            id.parse().expect("program id")
        })
        .collect()
}

/// `ip -s -j link` counters of `iface` in `ns`.
fn link_stats(ns: &str, iface: &str) -> LinkDrops {
    common::link_drops(ns, iface).unwrap()
}

/// Whether `iface` in `ns` reports `state UP` (carrier on).
fn link_up(ns: &str, iface: &str) -> bool {
    common::sh(&["ip", "-n", ns, "link", "show", "dev", iface]).contains("state UP")
}

/// The kernel's UDP MIB of `ns` (`/proc/net/snmp` Udp).
fn udp_mib(ns: &str) -> UdpCounters {
    common::udp_counters(ns).unwrap()
}

/// SIGKILL while a replay is streaming into the daemon, then a new daemon at once on the same
/// interface, queue and listen port: it starts within the bind-retry window (an `EBUSY` bind,
/// the old socket still being torn down by the kernel, is retried), exactly one XDP program is
/// attached (the new one: the old one went with its BPF link), the new socket is the one in the
/// XSKMAP, and the 603-packet capture replayed afterwards is decoded whole.
#[test]
fn sigkill_mid_stream_then_restart_receives_everything() {
    if !privileged() {
        return;
    }
    let net = NetnsPair::new("fkill");
    let (ns, ifc) = (&net.host_ns, &net.host_if);
    let mut old = Daemon::start(ns, ifc, 7650, &["--metrics", METRICS]);
    let old_progs = xdp_prog_ids(ns, ifc);
    assert_eq!(old_progs.len(), 1, "{old_progs:?}");

    let stream = spawn_replay(&net, DUAL, 2368, "realtime", 50);
    until("the old daemon decodes the stream", 10, || {
        live(ns, "lidarxdp_sensor_decoded_total") >= 100
    });
    old.signal(libc::SIGKILL);
    assert!(!wait(&mut old.child, 10).success());

    let t = Instant::now();
    let mut new = Daemon::start(ns, ifc, 7650, &["--metrics", METRICS]);
    // `Daemon::start` saw the publisher port accept, but that can still be the killed daemon's
    // listener: its io_uring holds the socket until the kernel's deferred ring clean-up runs
    // (the same clean-up that releases the old AF_XDP socket, hence the EBUSY the new bind
    // retries). The metrics endpoint is a plain socket closed at the old process's exit and
    // bound by the new one after its AF_XDP bind: when it answers, the new daemon is up.
    until("the new daemon serves metrics", 30, || {
        assert!(
            new.child.try_wait().unwrap().is_none(),
            "the restarted daemon exited"
        );
        try_scrape(ns).is_some()
    });
    let startup = t.elapsed();
    assert!(
        startup < BIND_RETRY,
        "restart took {startup:?}, longer than the bind retry window"
    );
    // The stream kept going through the restart; stop it (our own child) and let the new
    // daemon drain what reached it.
    let mut stream = stream;
    let _ = stream.kill();
    let _ = stream.wait();
    let mut base = (0, 0, 0, 0);
    until("the new daemon has decoded all it was steered", 10, || {
        let m = scrape(ns);
        base = (
            metric(&m, "lidarxdp_sensor_decoded_total"),
            metric(&m, "lidarxdp_xdp_redirected_total"),
            metric(&m, "lidarxdp_xdp_no_socket_total"),
            // Each loop of the replay steps the sensor time back: its first packets are time
            // jumps (a restart), counted, not decoded.
            metric(&m, "lidarxdp_sensor_time_jumps_total"),
        );
        base.0 + base.3 == base.1
    });

    let progs = xdp_prog_ids(ns, ifc);
    assert_eq!(progs.len(), 1, "exactly one program attached: {progs:?}");
    assert_ne!(progs, old_progs, "the old program is gone");

    replay_dual(&net, "realtime");
    // A replay that starts less than a frame timeout after the stream stopped steps the sensor
    // time back without a silence: its first packets are time jumps until the restart is
    // confirmed (counted, not decoded; docs/sensors.md "Time, loss and restarts"). Whether the
    // gap was shorter depends on scheduling, so count both.
    until("603 more decoded or counted as time jumps", 10, || {
        let m = scrape(ns);
        metric(&m, "lidarxdp_sensor_decoded_total") + metric(&m, "lidarxdp_sensor_time_jumps_total")
            == base.0 + base.3 + DUAL_PACKETS
    });
    let stats = new.stop();
    assert_eq!(
        get(&stats, &["sensors", "0", "decoded"]) + get(&stats, &["sensors", "0", "time_jumps"])
            - base.0
            - base.3,
        DUAL_PACKETS,
        "{stats}"
    );
    assert!(
        get(&stats, &["sensors", "0", "time_jumps"]) - base.3 <= 2,
        "at most the 2 packets before a restart is confirmed: {stats}"
    );
    assert_eq!(
        get(&stats, &["xdp", "redirected"]) - base.1,
        DUAL_PACKETS,
        "{stats}"
    );
    // Packets can only miss the socket between the attach and the XSKMAP update at start-up
    // (the stream was still running then), never afterwards: the new socket is in the map.
    assert_eq!(get(&stats, &["xdp", "no_socket"]), base.2, "{stats}");
    assert_eq!(get(&stats, &["sensors", "0", "malformed"]), 0, "{stats}");
    common::assert_no_xsk_loss(&stats);
    assert_eq!(
        get(&stats, &["backend", "received"]),
        get(&stats, &["sensors", "0", "decoded"]) + get(&stats, &["sensors", "0", "time_jumps"])
    );
}

/// `ip link set IF down` and `up`, on the daemon's side and then on the sensor's: the XDP
/// program stays attached, the AF_XDP socket stays bound and receives again (veth, copy mode;
/// measured, see docs/deploy.md "Link down/up"), every replayed packet is decoded, and each
/// flap is counted: two carrier transitions per flap in `backend.link_changes` and
/// `lidarxdp_capture_link_changes_total`.
#[test]
fn link_down_and_up_is_survived_and_counted() {
    if !privileged() {
        return;
    }
    let net = NetnsPair::new("fflap");
    let (ns, ifc) = (&net.host_ns, &net.host_if);
    let daemon = Daemon::start(ns, ifc, 7651, &["--metrics", METRICS]);
    let progs = xdp_prog_ids(ns, ifc);
    assert_eq!(progs.len(), 1);

    replay_dual(&net, "realtime");
    until("603 decoded", 10, || {
        live(ns, "lidarxdp_sensor_decoded_total") == DUAL_PACKETS
    });
    assert_eq!(live(ns, "lidarxdp_capture_link_changes_total"), 0);

    let mut total = DUAL_PACKETS;
    for (k, (flap_ns, flap_if)) in [(ns, ifc), (&net.sensor_ns, &net.sensor_if)]
        .into_iter()
        .enumerate()
    {
        common::sh(&["ip", "-n", flap_ns, "link", "set", flap_if, "down"]);
        until("carrier off", 5, || !link_up(ns, ifc));
        common::sh(&["ip", "-n", flap_ns, "link", "set", flap_if, "up"]);
        until("carrier on both sides", 5, || {
            link_up(ns, ifc) && link_up(&net.sensor_ns, &net.sensor_if)
        });
        let want = 2 * (k as u64 + 1);
        until("the flap is counted", 5, || {
            live(ns, "lidarxdp_capture_link_changes_total") == want
        });
        assert_eq!(xdp_prog_ids(ns, ifc), progs, "same program still attached");
        // The sensor side's neighbour entry went with its carrier: resolve it again before the
        // replay (the kernel queues only a few packets per unresolved neighbour).
        common::sh(&[
            "ip",
            "netns",
            "exec",
            &net.sensor_ns,
            "ping",
            "-c",
            "1",
            "-W",
            "2",
            &net.host_ip,
        ]);
        replay_dual(&net, "realtime");
        total += DUAL_PACKETS;
        // The flap can take less than the frame timeout: the replay then steps the sensor
        // time back without a silence, and its first packets are time jumps until the restart
        // is confirmed (counted, not decoded).
        until(
            "all decoded or counted as time jumps after the flap",
            10,
            || {
                let m = scrape(ns);
                metric(&m, "lidarxdp_sensor_decoded_total")
                    + metric(&m, "lidarxdp_sensor_time_jumps_total")
                    == total
            },
        );
    }

    let stats = daemon.stop();
    let jumps = get(&stats, &["sensors", "0", "time_jumps"]);
    assert!(jumps <= 2 * 2, "at most 2 per replay after a flap: {stats}");
    assert_eq!(
        get(&stats, &["sensors", "0", "decoded"]) + jumps,
        3 * DUAL_PACKETS,
        "{stats}"
    );
    assert_eq!(
        get(&stats, &["xdp", "redirected"]),
        3 * DUAL_PACKETS,
        "{stats}"
    );
    assert_eq!(get(&stats, &["xdp", "no_socket"]), 0, "{stats}");
    assert_eq!(
        get(&stats, &["backend", "received"]),
        3 * DUAL_PACKETS,
        "{stats}"
    );
    assert_eq!(get(&stats, &["backend", "link_changes"]), 4, "{stats}");
    common::assert_no_xsk_loss(&stats);
}

/// A 64-frame UMEM and a decoder that sleeps 300 ms every second, fed the 603-packet capture at
/// the sender's maximum rate until packets are lost (a replay landing in a stall loses all but
/// 64; outside a stall the decoder may also fall behind a burst with so few frames: both starve
/// the fill ring and are counted alike), and the loss is exactly what `XDP_STATISTICS` reports. In copy mode a packet redirected while the fill
/// ring is empty fails `xsk_buff_alloc` in the kernel's `__xsk_rcv`, which counts it in both
/// `rx_fill_ring_empty_descs` (the fill queue's empty count) and `rx_dropped`; `rx_ring_full`
/// cannot happen because the RX ring has as many slots as the UMEM has frames. So
/// `sent == decoded + rx_dropped + rx_ring_full`, `rx_fill_ring_empty_descs == rx_dropped`,
/// and veth counts the same failed redirects as its rx drops.
#[test]
fn fill_ring_starvation_is_explained_by_the_counters() {
    if !privileged() {
        return;
    }
    let net = NetnsPair::new("fstarve");
    let (ns, ifc) = (&net.host_ns, &net.host_if);
    let daemon = Daemon::start(
        ns,
        ifc,
        7652,
        &[
            "--umem-frames",
            "64",
            "--stall",
            "300:1000",
            "--metrics",
            METRICS,
        ],
    );
    let rx_dropped_before = link_stats(ns, ifc).rx_dropped;
    // Stalls start 1 s after the capture thread and last 300 ms; a replay at max takes a few
    // ms, so replaying back to back for a few seconds lands at least one inside a stall.
    let mut sent = 0;
    let deadline = Instant::now() + Duration::from_secs(8);
    loop {
        sent += replay_sent(spawn_replay(&net, DUAL, 2368, "max", 1));
        if live(ns, "lidarxdp_xsk_rx_dropped_total") > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "no loss in 8 s of stalls");
        std::thread::sleep(Duration::from_millis(50));
    }
    until("every packet decoded or counted lost", 10, || {
        let m = scrape(ns);
        // Back-to-back replays step the sensor time back without a silence: the first packets
        // of each are time jumps (a restart), counted, not decoded.
        metric(&m, "lidarxdp_sensor_decoded_total")
            + metric(&m, "lidarxdp_sensor_time_jumps_total")
            + metric(&m, "lidarxdp_xsk_rx_dropped_total")
            + metric(&m, "lidarxdp_xsk_rx_ring_full_total")
            == sent
    });
    let rx_dropped_after = link_stats(ns, ifc).rx_dropped;
    let stats = daemon.stop();
    eprintln!("sent {sent}: {}", stats["xsk"]);

    let decoded = get(&stats, &["sensors", "0", "decoded"]);
    let jumps = get(&stats, &["sensors", "0", "time_jumps"]);
    let dropped = get(&stats, &["xsk", "rx_dropped"]);
    let ring_full = get(&stats, &["xsk", "rx_ring_full"]);
    let fill_empty = get(&stats, &["xsk", "rx_fill_ring_empty_descs"]);
    assert!(dropped > 0, "{stats}");
    assert_eq!(get(&stats, &["xdp", "redirected"]), sent, "{stats}");
    assert_eq!(sent, decoded + jumps + dropped + ring_full, "{stats}");
    assert_eq!(ring_full, 0, "RX ring as large as the UMEM: {stats}");
    assert_eq!(
        fill_empty, dropped,
        "every drop found the fill ring empty: {stats}"
    );
    assert_eq!(get(&stats, &["xsk", "rx_invalid_descs"]), 0, "{stats}");
    assert_eq!(
        get(&stats, &["backend", "received"]),
        decoded + jumps,
        "{stats}"
    );
    assert_eq!(get(&stats, &["sensors", "0", "malformed"]), 0, "{stats}");
    assert_eq!(
        rx_dropped_after - rx_dropped_before,
        dropped,
        "veth rx_dropped counts the failed redirects"
    );
}

/// Connects from inside `ns` to 127.0.0.1:`port` with a 4 KiB receive buffer set before the
/// handshake (so the publisher soon has a frame half-written to it).
fn connect_small_rcvbuf(ns: &str, port: u16) -> TcpStream {
    in_netns(ns, move || {
        use std::os::fd::FromRawFd;
        // SAFETY: plain syscall with constant arguments.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        // SAFETY: `fd` was just created and is owned by nobody else; the stream closes it.
        let stream = unsafe { TcpStream::from_raw_fd(fd) };
        let size: libc::c_int = 4096;
        // SAFETY: `size` is a live c_int and its length is passed.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                (&size as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0, "SO_RCVBUF: {}", std::io::Error::last_os_error());
        let sa = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(std::net::Ipv4Addr::LOCALHOST).to_be(),
            },
            sin_zero: [0; 8],
        };
        // SAFETY: `sa` is a valid sockaddr_in and its size is passed.
        let rc = unsafe {
            libc::connect(
                fd,
                (&sa as *const libc::sockaddr_in).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0, "connect: {}", std::io::Error::last_os_error());
        stream
    })
}

/// Reads one protocol message's 12-byte prefix and returns (msg_type, header_len).
fn read_prefix(s: &mut TcpStream) -> (u16, u32) {
    let mut p = [0u8; 12];
    s.read_exact(&mut p).expect("message prefix");
    assert_eq!(&p[..4], b"LXDP");
    (
        u16::from_le_bytes([p[6], p[7]]),
        u32::from_le_bytes([p[8], p[9], p[10], p[11]]),
    )
}

/// Two subscribers; one reads the hello and 20 bytes of the first frame, then vanishes with an
/// RST (`SO_LINGER` 0) while the second frame is being written to it. The other receives every
/// frame, equal to offline decoding; the daemon keeps running and accepts a third subscriber.
#[test]
fn subscriber_vanishing_mid_write_harms_no_one_else() {
    if !privileged() {
        return;
    }
    let net = NetnsPair::new("fsub");
    let ns = &net.host_ns;
    let mut daemon = Daemon::start(ns, &net.host_if, 7653, &["--metrics", METRICS]);
    let mut vanishing = connect_small_rcvbuf(ns, 7653);
    let survivor = collect_frames(ns, 7653);
    until("two subscribers connected", 10, || {
        live(ns, "lidarxdp_publisher_subscribers") == 2
    });
    let (kind, len) = read_prefix(&mut vanishing);
    assert_eq!(kind, 1, "hello first");
    let mut rest = vec![0u8; len as usize - 12];
    vanishing.read_exact(&mut rest).unwrap();

    let replay = spawn_replay(&net, DUAL, 2368, "realtime", 1);
    vanishing
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let (kind, _) = read_prefix(&mut vanishing);
    assert_eq!(kind, 2, "a frame");
    let mut some = [0u8; 20];
    vanishing.read_exact(&mut some).unwrap();
    // Wait until the second frame (a whole rotation, ~480 KB) is being written to both: the
    // survivor has it, so the publisher has submitted it to the vanishing one too, where it
    // sits unread in the socket buffers when the reset discards it. (Whether that sendmsg has
    // completed into the daemon's send buffer depends on net.core.wmem_max, which caps the
    // SO_SNDBUF of a daemon without CAP_NET_ADMIN; partial sends cut by a reset are covered
    // with synthetic frames by tests/publish_sigpipe.rs.)
    until("the second frame is being written", 10, || {
        live(ns, "lidarxdp_publisher_frames_sent_total") >= 3
    });
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    {
        use std::os::fd::AsRawFd;
        // SAFETY: the fd is open (owned by `vanishing`); `linger` is live and its size passed.
        let rc = unsafe {
            libc::setsockopt(
                vanishing.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                (&linger as *const libc::linger).cast(),
                std::mem::size_of::<libc::linger>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0, "SO_LINGER: {}", std::io::Error::last_os_error());
    }
    drop(vanishing); // close with SO_LINGER 0: RST
    assert_eq!(replay_sent(replay), DUAL_PACKETS);

    let cfg = SensorConfig::new(0, SensorModel::Vlp16, data(CALIB));
    let (offline, _) = lidarxdp::offline::decode_pcap(&data(DUAL), &cfg, Some(2368)).unwrap();
    until("every frame sent to the survivor", 10, || {
        let m = scrape(ns);
        metric(&m, "lidarxdp_capture_frames_out_total") == offline.len() as u64
            && metric(&m, "lidarxdp_publisher_subscribers") == 1
    });
    assert!(
        daemon.child.try_wait().unwrap().is_none(),
        "daemon still running"
    );
    let m = scrape(ns);
    // The vanished subscriber.
    assert_eq!(
        metric(&m, "lidarxdp_publisher_subscribers_disconnected_total"),
        1
    );
    assert_eq!(
        metric(&m, "lidarxdp_publisher_subscribers_stalled_total"),
        0
    );

    let third = in_netns(ns, || {
        lidarxdp_client::Subscriber::connect_timeout(
            &"127.0.0.1:7653".parse().unwrap(),
            Duration::from_secs(5),
        )
        .map(|s| s.hello().sensors.len())
    });
    assert_eq!(third.expect("a third subscriber is served"), 1);
    until("third subscriber gone", 10, || {
        live(ns, "lidarxdp_publisher_subscribers") == 1
    });

    let stats = daemon.stop();
    let frames = survivor.join().unwrap();
    common::assert_frames_equal(&frames, &offline);
    // Vanishing, survivor, third.
    assert_eq!(
        get(&stats, &["publisher", "subscribers_accepted"]),
        3,
        "{stats}"
    );
    assert_eq!(
        get(&stats, &["sensors", "0", "decoded"]),
        DUAL_PACKETS,
        "{stats}"
    );
    assert_eq!(
        get(&stats, &["publisher", "frames_in"]),
        offline.len() as u64
    );
    // Every frame to the survivor; to the vanished subscriber the first and at most the second
    // (the one in flight when it reset), nothing after.
    let sent = get(&stats, &["publisher", "frames_sent"]) - offline.len() as u64;
    assert!(
        (1..=2).contains(&sent),
        "frames sent to the vanished one: {stats}"
    );
}

/// While the 603 sensor packets are replayed at the recorded rate, two senders flood UDP port
/// 9999 of the host address as fast as they go (603 × 200 datagrams each). Every sensor packet
/// is decoded; every flood datagram passes to the kernel (XDP `passed`), where it is counted
/// `Udp NoPorts` (nothing listens on 9999). IPv6 is disabled and the neighbours are static in
/// both namespaces, so no other packet arrives and the equations are exact:
/// `rx packets (veth) == seen == redirected + passed`, `passed == NoPorts delta`.
#[test]
fn non_sensor_flood_passes_to_the_kernel_and_loses_no_sensor_packet() {
    if !privileged() {
        return;
    }
    let net = NetnsPair::create(common::PairSpec::unique("fflood").static_neighbours()).unwrap();
    let (ns, ifc) = (&net.host_ns, &net.host_if);
    for (n, i) in [(ns, ifc), (&net.sensor_ns, &net.sensor_if)] {
        for key in ["all", "default", i.as_str()] {
            common::sh(&[
                "ip",
                "netns",
                "exec",
                n,
                "sysctl",
                "-qw",
                &format!("net.ipv6.conf.{key}.disable_ipv6=1"),
            ]);
        }
    }
    let daemon = Daemon::start(ns, ifc, 7654, &[]);
    let mib_before = udp_mib(ns);
    let host_before = link_stats(ns, ifc);
    let sensor_before = link_stats(&net.sensor_ns, &net.sensor_if);

    let floods: Vec<Child> = (0..2)
        .map(|_| spawn_replay(&net, DUAL, 9999, "max", 200))
        .collect();
    replay_dual(&net, "realtime");
    let flood_sent: u64 = floods.into_iter().map(replay_sent).sum();
    until("the kernel counted every flood datagram", 10, || {
        udp_mib(ns).no_ports - mib_before.no_ports >= flood_sent
    });
    let mib_after = udp_mib(ns);
    let host_after = link_stats(ns, ifc);
    let sensor_after = link_stats(&net.sensor_ns, &net.sensor_if);
    let stats = daemon.stop();
    eprintln!("flood: {flood_sent} datagrams; {}", stats["xdp"]);

    assert!(flood_sent > 100_000, "flood sent {flood_sent}");
    assert_eq!(
        get(&stats, &["sensors", "0", "decoded"]),
        DUAL_PACKETS,
        "{stats}"
    );
    assert_eq!(get(&stats, &["xdp", "redirected"]), DUAL_PACKETS, "{stats}");
    common::assert_no_xsk_loss(&stats);
    let passed = get(&stats, &["xdp", "passed"]);
    let seen = get(&stats, &["xdp", "seen"]);
    // Nothing was dropped before the program (veth ring) or after it.
    assert_eq!(
        host_after.rx_dropped - host_before.rx_dropped,
        0,
        "veth rx_dropped"
    );
    assert_eq!(
        sensor_after.tx_dropped - sensor_before.tx_dropped,
        0,
        "veth tx_dropped (peer ring full)"
    );
    assert_eq!(
        host_after.rx_packets - host_before.rx_packets,
        seen,
        "veth rx packets == XDP seen"
    );
    assert_eq!(seen, DUAL_PACKETS + passed, "{stats}");
    assert_eq!(
        passed, flood_sent,
        "every flood datagram reached XDP and passed"
    );
    assert_eq!(
        mib_after.no_ports - mib_before.no_ports,
        passed,
        "the kernel got every passed datagram"
    );
    assert_eq!(mib_after.in_datagrams - mib_before.in_datagrams, 0);
    assert_eq!(mib_after.in_errors - mib_before.in_errors, 0);
}

/// The interface removed under the daemon (`ip link del`): the kernel unbinds the AF_XDP socket
/// and sets `ENETDOWN` on it; the daemon, which cannot re-bind without the capabilities it
/// dropped, exits non-zero within a second with an error naming the interface (so
/// `Restart=on-failure` restarts it), after writing its counters.
#[test]
fn interface_removed_ends_the_daemon_with_an_error() {
    if !privileged() {
        return;
    }
    let net = NetnsPair::new("fgone");
    // Started by hand rather than with `Daemon::start`, to read its stderr.
    let stats_path =
        std::env::temp_dir().join(format!("lidarxdp-test-{}-7655.json", std::process::id()));
    let _ = std::fs::remove_file(&stats_path);
    let mut child = NetnsPair::exec(
        &net.host_ns,
        &[
            env!("CARGO_BIN_EXE_lidarxdp"),
            "run",
            "--iface",
            &net.host_if,
            "--listen",
            "127.0.0.1:7655",
            "--metrics",
            METRICS,
            "--sensor",
            "vlp16",
            "--calibration",
            data(CALIB).to_str().unwrap(),
        ],
    )
    .arg("--stats-json")
    .arg(&stats_path)
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    until("daemon up", 30, || {
        assert!(
            child.try_wait().unwrap().is_none(),
            "daemon exited at start"
        );
        try_scrape(&net.host_ns).is_some()
    });
    replay_dual(&net, "max");
    until("603 decoded", 10, || {
        live(&net.host_ns, "lidarxdp_sensor_decoded_total") == DUAL_PACKETS
    });
    common::sh(&["ip", "-n", &net.host_ns, "link", "del", &net.host_if]);
    let t = Instant::now();
    let status = wait(&mut child, 10);
    let took = t.elapsed();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(took < Duration::from_secs(2), "exit took {took:?}");
    let line = err
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_else(|| panic!("no final error in\n{err}"));
    assert!(
        line.contains(&format!("AF_XDP socket on {} queue 0", net.host_if))
            && line.contains("Network is down")
            && line.contains("supervisor"),
        "{line}"
    );
    let stats: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&stats_path).expect("stats written")).unwrap();
    let _ = std::fs::remove_file(&stats_path);
    assert_eq!(
        get(&stats, &["sensors", "0", "decoded"]),
        DUAL_PACKETS,
        "{stats}"
    );
}

/// A datagram longer than the socket backends' receive buffer (3,000 bytes to a VLP-16 port,
/// whose buffer holds 2,048; IPv4 reassembles the two fragments before the socket) is dropped
/// and counted while the daemon runs: `lidarxdp_capture_truncated_total` in `/metrics` is 3
/// after three of them, through each socket backend; the exit report's `backend.truncated`
/// and the stats JSON's `capture.truncated` hold the same 3, and nothing reached the decoder.
#[test]
fn oversized_datagrams_are_counted_live_as_truncated_by_the_socket_backends() {
    if !privileged() {
        return;
    }
    let net = NetnsPair::new("ftrunc");
    let ns = &net.host_ns;
    let to = format!("{}:2368", net.host_ip);
    for backend in ["socket", "recvmmsg", "uring"] {
        let daemon = Daemon::start(
            ns,
            &net.host_if,
            7656,
            &["--backend", backend, "--metrics", METRICS],
        );
        until("metrics answer", 10, || try_scrape(ns).is_some());
        in_netns(&net.sensor_ns, || {
            let s = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
            for _ in 0..3 {
                assert_eq!(s.send_to(&[0x5a; 3000], &to).unwrap(), 3000);
            }
        });
        until(&format!("{backend}: 3 truncated in /metrics"), 10, || {
            live(ns, "lidarxdp_capture_truncated_total") == 3
        });
        let stats = daemon.stop();
        assert_eq!(get(&stats, &["capture", "truncated"]), 3, "{stats}");
        assert_eq!(get(&stats, &["backend", "truncated"]), 3, "{stats}");
        assert_eq!(get(&stats, &["backend", "received"]), 0, "{stats}");
        assert_eq!(get(&stats, &["capture", "backpressure"]), 0, "{stats}");
        assert_eq!(get(&stats, &["sensors", "0", "packets"]), 0, "{stats}");
    }
}
