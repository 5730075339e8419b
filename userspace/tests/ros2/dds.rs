//! The DDS sink (`lidarxdp run --dds`, issue 22) checked by two independent subscribers, each
//! written from its own implementation's public API with a hand-written PointCloud2 type:
//! `dds_sub_fastdds.cpp` on Debian's Fast DDS 2.9 (the default RMW of ROS 2 Jazzy,
//! rmw_fastrtps_cpp) and `dds_sub_cyclone.c` on Debian's Cyclone DDS 0.10.2 (Autoware's,
//! rmw_cyclonedds_cpp; its `--graph` mode reads the DDS built-in topics and
//! `ros_discovery_info`). Both are compiled once per run of this binary, into a scratch folder.
//!
//! The expected names, QoS and USER_DATA are written out literally from rmw_cyclonedds_cpp,
//! rmw_fastrtps_cpp and rmw_dds_common (docs/deploy.md, "ROS 2 over DDS"), not built with
//! lidarxdp's code.

use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use crate::common::{
    self, Daemon, NetnsPair, ReceivedFrame, collect_frames, get, privileged, python_available,
};
use crate::probe::{
    DUAL, KEY_VLP16_JAZZY, Listen, Msg, Probe, Scratch, VLP16_CALIB, assert_messages_equal_offline,
    assert_pointcloud2_equal, now_ns, offline, peer_config, read_messages,
};
use lidarxdp_core::frame::Frame;
use lidarxdp_core::sensor::SensorModel;

/// The DDS topic of `/lidar/vlp16/points`: `rt` + the ROS name (rmw_cyclonedds
/// `make_fqtopic`, rmw_fastrtps `_create_topic_name`).
const TOPIC: &str = "rt/lidar/vlp16/points";
/// `sensor_msgs/msg/PointCloud2`'s DDS type name (`<pkg>::msg::dds_::<Type>_`).
const TYPE: &str = "sensor_msgs::msg::dds_::PointCloud2_";
/// The endpoint USER_DATA of a Jazzy PointCloud2 writer (rmw_dds_common
/// `encode_type_hash_for_user_data_qos`).
const TYPEHASH: &str =
    "typehash=RIHS01_9198cabf7da3796ae6fe19c4cb3bdd3525492988c70522628af5daa124bae2b5;";

/// The endpoint USER_DATA of the Jazzy `ros_discovery_info` writer (the RIHS01 hash of
/// `rmw_dds_common/msg/ParticipantEntitiesInfo`).
const GRAPH_TYPEHASH: &str =
    "typehash=RIHS01_91a0593bacdcc50ea9bdcf849a938b128412cc1ea821245c663bcd26f83c295e;";

/// Compiles both subscribers (once per process) into a folder of the temporary directory
/// ([`common::build_dds_checkers`]).
pub(crate) fn checkers() -> &'static common::DdsCheckers {
    static C: OnceLock<common::DdsCheckers> = OnceLock::new();
    C.get_or_init(|| {
        let out =
            std::env::temp_dir().join(format!("lidarxdp-dds-checkers-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        common::build_dds_checkers(&out).unwrap_or_else(|e| panic!("{e}"))
    })
}

/// Which subscriber.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Impl {
    FastDds,
    Cyclone,
}

/// A subscriber's options.
pub(crate) struct Sub<'a> {
    pub(crate) which: Impl,
    pub(crate) out: &'a Path,
    pub(crate) expect: Option<usize>,
    pub(crate) reliable: bool,
    pub(crate) localhost: bool,
}

/// Starts subscriber `s` in `ns` on [`TOPIC`] and returns once it printed "ready" (matched the
/// daemon's writer; with `reliable`, once its reader exists).
pub(crate) fn subscribe(ns: &str, s: &Sub) -> Probe {
    let c = checkers();
    let (exe, name) = match s.which {
        Impl::FastDds => (&c.fastdds, "Fast DDS subscriber"),
        Impl::Cyclone => (&c.cyclone, "Cyclone DDS subscriber"),
    };
    let out = s.out.to_str().expect("UTF-8 path");
    let expect = s.expect.map(|n| n.to_string());
    let mut argv = vec![
        exe.to_str().expect("UTF-8 path"),
        "--topic",
        TOPIC,
        "--out",
        out,
        "--timeout-s",
        "60",
    ];
    if let Some(n) = &expect {
        argv.extend(["--expect", n.as_str()]);
    }
    if s.reliable {
        argv.push("--reliable");
    }
    if s.localhost {
        argv.push("--localhost");
    }
    let mut p = Probe::spawn_exe(ns, name, &argv);
    p.wait_ready();
    p
}

/// A subscriber's closing line.
#[derive(Debug, serde::Deserialize)]
struct Summary {
    received: u64,
    incompatible_qos: u64,
    last_policy: String,
}

fn summary(name: &str, rest: &str) -> Summary {
    let line = rest
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .unwrap_or_else(|| panic!("{name}: no summary line in {rest:?}"));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{name} summary {line}: {e}"))
}

/// Asserts a DDS subscriber's messages are exactly the capture's frames, in order, on
/// [`TOPIC`], each equal to offline decoding and stamped as the TCP subscriber saw it, with
/// no zenoh attachment, and DDS source times inside `[t0, t1]` that never go back.
fn assert_dds_messages(
    who: &str,
    msgs: &[Msg],
    offline: &[Frame],
    tcp: &[ReceivedFrame],
    (t0, t1): (u64, u64),
) {
    assert_eq!(
        msgs.len(),
        offline.len(),
        "{who}: messages vs offline frames"
    );
    let mut last = 0;
    for (i, ((m, off), (h, _))) in msgs.iter().zip(offline).zip(tcp).enumerate() {
        assert_eq!(m.key, TOPIC, "{who}: message {i} topic");
        assert_pointcloud2_equal(i, m, off, h.start_ns, "vlp16");
        assert_eq!(m.attachment, None, "{who}: message {i} attachment");
        let t = m.source_timestamp_ns.expect("source time") as u64;
        assert!(
            (t0..=t1).contains(&t) && t >= last,
            "{who}: message {i} source time {t} outside [{t0}, {t1}] or before {last}"
        );
        last = t;
    }
}

/// Asserts the daemon's `dds` counters: every frame written once, none dropped or failed,
/// the bytes equal to what a subscriber received, and `incompatible` readers reported.
fn assert_dds_counters(stats: &serde_json::Value, frames: u64, msgs: &[Msg], incompatible: u64) {
    let d = |k: &str| get(stats, &["dds", k]);
    assert_eq!(
        (d("published"), d("dropped"), d("errors")),
        (frames, 0, 0),
        "dds published, dropped, errors: {stats}"
    );
    let bytes: u64 = msgs.iter().map(|m| m.payload_len as u64).sum();
    assert_eq!(
        d("bytes"),
        bytes,
        "dds bytes vs the samples received: {stats}"
    );
    assert_eq!(
        d("incompatible_qos"),
        incompatible,
        "dds incompatible_qos: {stats}"
    );
}

/// What `dds_sub_cyclone --graph` saw: the daemon's participant, its publication and its
/// `ros_discovery_info` message.
fn graph(ns: &str, localhost: bool) -> serde_json::Value {
    let c = checkers();
    let mut argv = vec![
        c.cyclone.to_str().expect("UTF-8 path"),
        "--graph",
        "--wait-node",
        "lidarxdp",
        "--wait-topic",
        TOPIC,
        "--timeout-s",
        "30",
    ];
    if localhost {
        argv.push("--localhost");
    }
    let p = Probe::spawn_exe(ns, "Cyclone DDS graph reader", &argv);
    let rest = p.finish();
    let line = rest
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .unwrap_or_else(|| panic!("graph reader printed no JSON: {rest:?}"));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("graph JSON {line}: {e}"))
}

/// Asserts the ROS 2 graph as rmw_cyclonedds / rmw_fastrtps announce it: a participant with
/// USER_DATA `enclave=/;`; a publication of [`TOPIC`] with type [`TYPE`], SensorDataQoS (best
/// effort, volatile, keep last 5) and USER_DATA [`TYPEHASH`], of that participant; its
/// `ros_discovery_info` writer (reliable, transient local, USER_DATA [`GRAPH_TYPEHASH`]); and a
/// `ParticipantEntitiesInfo` whose GID is the participant's GUID, naming node `/lidarxdp` with
/// no reader and that publication's GUID as its one writer.
fn assert_graph(g: &serde_json::Value) {
    let s = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
    let pubs: Vec<&serde_json::Value> = g["publications"]
        .as_array()
        .expect("publications")
        .iter()
        .filter(|p| p["topic"] == TOPIC)
        .collect();
    assert_eq!(pubs.len(), 1, "publications of {TOPIC}: {g}");
    let p = pubs[0];
    assert_eq!(s(&p["type"]), TYPE, "{p}");
    assert_eq!(
        (
            s(&p["reliability"]),
            s(&p["durability"]),
            s(&p["history"]),
            p["depth"].as_u64()
        ),
        (
            "best_effort".into(),
            "volatile".into(),
            "keep_last".into(),
            Some(5)
        ),
        "SensorDataQoS: {p}"
    );
    assert_eq!(s(&p["user_data"]), TYPEHASH, "{p}");
    let ppant = s(&p["participant_guid"]);
    let parts: Vec<&serde_json::Value> = g["participants"]
        .as_array()
        .expect("participants")
        .iter()
        .filter(|x| s(&x["guid"]) == ppant)
        .collect();
    assert_eq!(parts.len(), 1, "participant {ppant}: {g}");
    let graph_pubs: Vec<&serde_json::Value> = g["publications"]
        .as_array()
        .expect("publications")
        .iter()
        .filter(|x| x["topic"] == "ros_discovery_info" && s(&x["participant_guid"]) == ppant)
        .collect();
    assert_eq!(
        graph_pubs.len(),
        1,
        "ros_discovery_info writer of {ppant}: {g}"
    );
    let gp = graph_pubs[0];
    assert_eq!(
        (
            s(&gp["type"]),
            s(&gp["reliability"]),
            s(&gp["durability"]),
            s(&gp["user_data"])
        ),
        (
            "rmw_dds_common::msg::dds_::ParticipantEntitiesInfo_".into(),
            "reliable".into(),
            "transient_local".into(),
            GRAPH_TYPEHASH.into()
        ),
        "ros_discovery_info writer: {gp}"
    );
    assert_eq!(s(&parts[0]["user_data"]), "enclave=/;", "{}", parts[0]);
    let infos: Vec<&serde_json::Value> = g["discovery_info"]
        .as_array()
        .expect("discovery_info")
        .iter()
        .filter(|x| s(&x["gid"]) == ppant)
        .collect();
    assert_eq!(infos.len(), 1, "ros_discovery_info of {ppant}: {g}");
    // The node's writers: the point cloud's, then /diagnostics' (issue 26), both of this
    // participant (the GUID prefix, its first 12 bytes, is the participant's).
    let writers = infos[0]["nodes"][0]["writers"].clone();
    let points = s(&p["guid"]);
    assert_eq!(
        infos[0]["nodes"],
        serde_json::json!([{
            "namespace": "/", "name": "lidarxdp", "readers": [], "writers": writers
        }]),
        "{}",
        infos[0]
    );
    let writers: Vec<String> = writers.as_array().unwrap().iter().map(s).collect();
    assert_eq!(writers.len(), 2, "{}", infos[0]);
    assert_eq!(writers[0], points, "{}", infos[0]);
    assert_eq!(writers[1][..24], points[..24], "{}", infos[0]);
    assert_ne!(writers[1], points, "{}", infos[0]);
}

/// Default discovery (`ROS_AUTOMATIC_DISCOVERY_RANGE` unset = SUBNET: multicast on the
/// namespace's veth): a Fast DDS subscriber in the other namespace, across the veth (a
/// 1500-byte link: every 14,720-byte datagram arrives as IPv4 fragments), and a Cyclone DDS
/// subscriber beside the daemon each get every frame of the replayed capture equal, point for
/// point, to offline decoding; the graph is rmw's; and a
/// third subscriber that asks for a reliable reader gets nothing and is counted by the daemon
/// as one incompatible reader (and by itself as RELIABILITY).
#[test]
fn dds_frames_reach_fast_dds_and_cyclone_dds_equal_offline() {
    if !privileged() {
        return;
    }
    let _alone = crate::one_at_a_time();
    let net = NetnsPair::new("dd");
    let scratch = Scratch::new("dds");
    let offline = offline(DUAL, SensorModel::Vlp16, VLP16_CALIB, 2368);
    assert_eq!(offline.len(), 4, "frames of the dual-return capture");
    checkers();
    let daemon = Daemon::start(
        &net.host_ns,
        &net.host_if,
        7711,
        &["--name", "vlp16", "--dds"],
    );
    let tcp = collect_frames(&net.host_ns, 7711);
    let sub = |ns: &str, which, name: &str, expect, reliable| {
        let out = scratch.path(name);
        let p = subscribe(
            ns,
            &Sub {
                which,
                out: &out,
                expect,
                reliable,
                localhost: false,
            },
        );
        (p, out)
    };
    let n = Some(offline.len());
    let (fast, fast_out) = sub(&net.sensor_ns, Impl::FastDds, "fastdds", n, false);
    let (cyc, cyc_out) = sub(&net.host_ns, Impl::Cyclone, "cyclone", n, false);
    let (rel, _) = sub(&net.host_ns, Impl::Cyclone, "reliable", None, true);
    assert_graph(&graph(&net.host_ns, false));

    let t0 = now_ns();
    let sent = get(&common::replay(&net, DUAL, 2368, "realtime"), &["sent"]);
    assert_eq!(sent, 603);
    let fast_rest = fast.finish();
    let cyc_rest = cyc.finish();
    // The daemon reads its writers' statuses once a second.
    std::thread::sleep(Duration::from_millis(1200));
    let stats = daemon.stop();
    let t1 = now_ns();
    let rel = summary("reliable subscriber", &rel.finish());
    let tcp = tcp.join().expect("TCP subscriber");

    common::assert_no_xsk_loss(&stats);
    assert_eq!(get(&stats, &["capture", "frames_out"]), 4, "{stats}");
    common::assert_frames_equal(&tcp, &offline);
    let fast_msgs = read_messages(&fast_out);
    assert_dds_messages("Fast DDS", &fast_msgs, &offline, &tcp, (t0, t1));
    assert_dds_messages(
        "Cyclone DDS",
        &read_messages(&cyc_out),
        &offline,
        &tcp,
        (t0, t1),
    );
    for (who, rest) in [("Fast DDS", &fast_rest), ("Cyclone DDS", &cyc_rest)] {
        let s = summary(who, rest);
        assert_eq!((s.received, s.incompatible_qos), (4, 0), "{who}: {rest}");
    }
    assert_eq!(
        (rel.received, rel.last_policy.as_str()),
        (0, "RELIABILITY"),
        "reliable subscriber: {rel:?}"
    );
    assert!(rel.incompatible_qos >= 1, "reliable subscriber: {rel:?}");
    assert_dds_counters(&stats, 4, &fast_msgs, 1);
}

/// `ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST` (no multicast, peer `localhost`, as
/// rmw_cyclonedds configures it) with zenoh on too: a Cyclone DDS subscriber on loopback gets
/// every frame equal to offline decoding and the graph is announced there; a Fast DDS
/// subscriber that is stopped (SIGSTOP) for the whole replay costs the TCP subscriber, the
/// zenoh subscriber (the independent Python client) and the capture nothing.
#[test]
fn a_stopped_dds_subscriber_costs_tcp_zenoh_and_capture_nothing() {
    if !privileged() || !python_available() {
        return;
    }
    let _alone = crate::one_at_a_time();
    let net = NetnsPair::new("ds");
    let scratch = Scratch::new("dds-stop");
    let offline = offline(DUAL, SensorModel::Vlp16, VLP16_CALIB, 2368);
    checkers();
    let zcfg = scratch.write("zenoh.json5", &peer_config(17461));
    let calib = common::data(VLP16_CALIB);
    let daemon = Daemon::start_wrapped(
        &net.host_ns,
        &["env", "ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST"],
        &net.host_if,
        7712,
        &[
            "--sensor",
            "vlp16",
            "--name",
            "vlp16",
            "--port",
            "2368",
            "--calibration",
            calib.to_str().expect("UTF-8 path"),
            "--dds",
            "--zenoh",
            "--zenoh-config",
            &zcfg,
        ],
    );
    let tcp = collect_frames(&net.host_ns, 7712);
    let zout = scratch.path("zenoh");
    let zsub = Probe::listen(
        &net.host_ns,
        "zenoh subscriber",
        &Listen {
            connect: "tcp/127.0.0.1:17461",
            key: KEY_VLP16_JAZZY,
            out: &zout,
            wait_token: "/MP/%/%/lidarxdp/%lidar%vlp16%points/",
            expect: Some(offline.len()),
            extra: &[],
        },
    );
    let cyc_out = scratch.path("cyclone");
    let cyc = subscribe(
        &net.host_ns,
        &Sub {
            which: Impl::Cyclone,
            out: &cyc_out,
            expect: Some(offline.len()),
            reliable: false,
            localhost: true,
        },
    );
    let stopped = subscribe(
        &net.host_ns,
        &Sub {
            which: Impl::FastDds,
            out: &scratch.path("stopped"),
            expect: None,
            reliable: false,
            localhost: true,
        },
    );
    assert_graph(&graph(&net.host_ns, true));
    stopped.signal(libc::SIGSTOP);

    std::thread::sleep(Duration::from_secs(1));
    let t0 = now_ns();
    let sent = get(&common::replay(&net, DUAL, 2368, "realtime"), &["sent"]);
    assert_eq!(sent, 603);
    let cyc_rest = cyc.finish();
    std::thread::sleep(Duration::from_millis(500));
    let stats = daemon.stop();
    let t1 = now_ns();
    let tcp = tcp.join().expect("TCP subscriber");
    zsub.finish();
    drop(stopped);

    common::assert_no_xsk_loss(&stats);
    assert_eq!(
        get(&stats, &["capture", "sensor_datagrams"]),
        603,
        "{stats}"
    );
    assert_eq!(get(&stats, &["capture", "frames_out"]), 4, "{stats}");
    common::assert_frames_equal(&tcp, &offline);
    let zmsgs = read_messages(&zout);
    assert_messages_equal_offline(&zmsgs, &offline, &tcp, KEY_VLP16_JAZZY, "vlp16", (t0, t1));
    let cmsgs = read_messages(&cyc_out);
    assert_dds_messages("Cyclone DDS (loopback)", &cmsgs, &offline, &tcp, (t0, t1));
    assert_eq!(summary("Cyclone DDS", &cyc_rest).received, 4, "{cyc_rest}");
    assert_dds_counters(&stats, 4, &cmsgs, 0);
    assert_eq!(get(&stats, &["zenoh", "published"]), 4, "{stats}");
    assert_eq!(get(&stats, &["zenoh", "dropped"]), 0, "{stats}");
    assert_eq!(
        get(&stats, &["publisher", "frames_dropped_queue_full"]),
        0,
        "{stats}"
    );
}
