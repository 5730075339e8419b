//! Every frame of a replayed capture reaches the independent Python client through zenoh and
//! equals offline decoding: the client connected to the daemon's zenoh peer in the daemon's
//! namespace, and from another namespace through a zenoh router.
use std::path::Path;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::common::{
    self, Daemon, NetnsPair, ReceivedFrame, collect_frames, get, privileged, python_available,
};
use crate::probe::{
    DUAL, KEY_VLP16_JAZZY, Listen, NOTIFY, Probe, Scratch, VLP16_CALIB,
    assert_messages_equal_offline, assert_zenoh_counters, now_ns, offline, peer_config,
    read_messages,
};
use lidarxdp_core::frame::Frame;
use lidarxdp_core::sensor::SensorModel;

/// Text of the daemon's publisher token for `/lidar/vlp16/points` (the probe waits for it).
const VLP16_PUBLISHER: &str = "/MP/%/%/lidarxdp/%lidar%vlp16%points/";

/// Where the subscriber of [`vlp16_through_zenoh`] runs and how it connects.
pub(crate) struct Sub<'a> {
    /// Its namespace.
    pub ns: &'a str,
    /// The endpoint it connects to.
    pub connect: &'a str,
    /// Further probe arguments (e.g. `--tls-ca`).
    pub extra: &'a [&'a str],
}

/// Starts the daemon in the host namespace of `net` (VLP-16 named `vlp16`, TCP publisher on
/// `listen_port`, zenoh configuration file `cfg`), a TCP subscriber, and the Python
/// subscriber `sub` in `scratch`; then [`replay_and_check`].
pub(crate) fn vlp16_through_zenoh(
    net: &NetnsPair,
    scratch: &Scratch,
    listen_port: u16,
    cfg: &str,
    sub: &Sub,
) {
    let offline = offline(DUAL, SensorModel::Vlp16, VLP16_CALIB, 2368);
    assert_eq!(offline.len(), 4, "frames of the dual-return capture");
    let daemon = Daemon::start(
        &net.host_ns,
        &net.host_if,
        listen_port,
        &["--name", "vlp16", "--zenoh", "--zenoh-config", cfg],
    );
    let tcp = collect_frames(&net.host_ns, listen_port);
    let out = scratch.path("sub");
    let extra: Vec<&str> = sub.extra.iter().copied().chain(NOTIFY).collect();
    let probe = Probe::listen(
        sub.ns,
        "subscriber",
        &Listen {
            connect: sub.connect,
            key: KEY_VLP16_JAZZY,
            out: &out,
            wait_token: VLP16_PUBLISHER,
            expect: Some(offline.len()),
            extra: &extra,
        },
    );
    replay_and_check(net, daemon, probe, tcp, &offline, &out);
}

/// Replays the dual-return capture at its recorded rate once the subscriber `sub` is ready,
/// stops the daemon and checks: no capture loss, the TCP subscriber and the zenoh messages
/// (`out`) both equal offline decoding, the sink published every frame from shared memory and
/// dropped none.
fn replay_and_check(
    net: &NetnsPair,
    daemon: Daemon,
    mut sub: Probe,
    tcp: JoinHandle<Vec<ReceivedFrame>>,
    offline: &[Frame],
    out: &Path,
) {
    // The subscriber's declaration has reached the daemon with the token query's reply on the
    // direct link; through a router it may still be on its way.
    std::thread::sleep(Duration::from_secs(1));
    let t0 = now_ns();
    let sent = get(&common::replay(net, DUAL, 2368, "realtime"), &["sent"]);
    assert_eq!(sent, 603);
    // The daemon stops only once the subscriber has every frame (stopping it closes its zenoh
    // session, and with it a frame still on its way), or after 60 s: the assertions below then
    // say what is missing.
    sub.wait_notified();
    let stats = daemon.stop();
    let t1 = now_ns();
    let tcp = tcp.join().expect("TCP subscriber");
    sub.finish();

    common::assert_no_xsk_loss(&stats);
    assert_eq!(
        get(&stats, &["capture", "sensor_datagrams"]),
        603,
        "{stats}"
    );
    let n = offline.len() as u64;
    assert_eq!(get(&stats, &["capture", "frames_out"]), n, "{stats}");
    common::assert_frames_equal(&tcp, offline);
    let msgs = read_messages(out);
    assert_messages_equal_offline(&msgs, offline, &tcp, KEY_VLP16_JAZZY, "vlp16", (t0, t1));
    assert_zenoh_counters(&stats, offline.len(), &msgs);
}

/// The daemon is a zenoh peer listening on loopback in its namespace; the Python client
/// (eclipse-zenoh, rosbags) subscribes to rmw_zenoh's key of `/lidar/vlp16/points` before the
/// replay and gets every frame as a `sensor_msgs/msg/PointCloud2` equal, point for point, to
/// offline decoding, with rmw_zenoh's attachment (sequence 1, 2, ..., one GID).
#[test]
fn frames_through_zenoh_equal_offline_decode() {
    if !privileged() || !python_available() {
        return;
    }
    let _alone = crate::one_at_a_time();
    let net = NetnsPair::new("zf");
    let s = Scratch::new("frames");
    let cfg = s.write("zenoh.json5", &peer_config(17447));
    let sub = Sub {
        ns: &net.host_ns,
        connect: "tcp/127.0.0.1:17447",
        extra: &[],
    };
    vlp16_through_zenoh(&net, &s, 7701, &cfg, &sub);
}

/// Two namespaces and a zenoh router, as across two hosts: the router (a Python session in
/// router mode, standing in for a remote `rmw_zenohd`) listens on the sensor namespace's veth
/// address; the daemon in the host namespace is its client (client mode: every message goes
/// through the router, nothing depends on gossip or on the peers reaching each other), and the
/// Python subscriber in the sensor namespace, also its client, gets every frame equal to
/// offline decoding. Ten trials against the same router, each with a fresh daemon and
/// subscriber: the cross-host path must work every time, not most times.
#[test]
fn frames_cross_namespaces_through_a_zenoh_router() {
    if !privileged() || !python_available() {
        return;
    }
    let _alone = crate::one_at_a_time();
    let net = NetnsPair::new("zr");
    let s = Scratch::new("router");
    let router_ep = format!("tcp/{}:17448", net.sensor_ip);
    let router = Probe::router(&net.sensor_ns, &router_ep, &[]);
    let cfg = s.write(
        "zenoh.json5",
        &format!(
            r#"{{ mode: "client", connect: {{ endpoints: ["{router_ep}"] }},
  scouting: {{ multicast: {{ enabled: false }} }} }}"#
        ),
    );
    let sub = Sub {
        ns: &net.sensor_ns,
        connect: &router_ep,
        extra: &[],
    };
    for trial in 0..10u16 {
        eprintln!("cross-namespace trial {}", trial + 1);
        vlp16_through_zenoh(&net, &s, 7730 + trial, &cfg, &sub);
    }
    router.finish();
}

/// Without a configuration file the daemon's zenoh session is rmw_zenoh's default peer: it
/// listens on loopback only (never on every interface, zenoh's own peer default), so nothing
/// off the host reaches it unless a configuration asks. Every TCP socket the daemon listens
/// on (its publisher's and zenoh's) is bound to 127.0.0.1 or ::1, read from `ss` in its
/// namespace, which also has a veth address the session could have listened on.
#[test]
fn default_zenoh_session_listens_on_loopback_only() {
    if !privileged() {
        return;
    }
    let _alone = crate::one_at_a_time();
    let net = NetnsPair::new("zl");
    let daemon = Daemon::start(
        &net.host_ns,
        &net.host_if,
        7703,
        &["--zenoh", "--zenoh-shm-mb", "0"],
    );
    let pid = daemon.child.id();
    let out = common::exec_in(&net.host_ns)
        .args(["ss", "-Hltnp"])
        .output()
        .expect("run ss");
    assert!(out.status.success(), "ss: {out:?}");
    let out = String::from_utf8_lossy(&out.stdout).into_owned();
    let mine: Vec<&str> = out
        .lines()
        .filter(|l| l.contains(&format!("pid={pid},")))
        .collect();
    assert!(
        mine.len() >= 2,
        "publisher and zenoh listeners of pid {pid}: {out}"
    );
    for l in &mine {
        let local = l.split_whitespace().nth(3).unwrap_or_default();
        assert!(
            local.starts_with("127.0.0.1:") || local.starts_with("[::1]:"),
            "listening off loopback: {l}"
        );
    }
    let stats = daemon.stop();
    assert_eq!(get(&stats, &["zenoh", "errors"]), 0, "{stats}");
}
