//! Every point layout (`point_type`, docs/sensors.md "Point layouts") through the daemon, read
//! back by implementations that share no code with lidarxdp's encoders: one daemon with eight
//! VLP-16 sensors on one interface and queue (ports 2368..2375, one layout each, named after
//! it), the real dual-return capture replayed to each in turn over the veth, and every output
//! of every layout checked against offline decoding of the same capture into that layout
//! ([`layout_check`](crate::layout_check)):
//! - DDS: a Fast DDS subscriber per topic (`dds_sub_fastdds.cpp`, its own CDR deserializer)
//!   across the veth;
//! - zenoh: the Python probe (`ros2_probe.py`: eclipse-zenoh, rosbags' CDR deserializer)
//!   subscribed to every sensor's rmw_zenoh key at once;
//! - MCAP: `lidarxdp subscribe --mcap` on the daemon's TCP stream, read back by `mcap` and
//!   `mcap-ros2-support` (`mcap_points.py`);
//! - PCD: the same subscriber's `--pcd`, read back by pypcd4 (`pcd_check.py`);
//! - TCP: the frames' field list and payload as the client library receives them.
//!
//! In each PointCloud2: `fields` (name, offset, datatype, count) and `point_step` are the
//! layout's ([`PointType::fields`], [`PointType::point_step`]), `row_step`, `width`, the CDR
//! length follow from them, and `data` is the offline decode's bytes.
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::common::{self, Daemon, NetnsPair, get, in_netns, privileged, python_available};
use crate::layout_check::{
    HOUR_NS, assert_layout_bytes, assert_pcd_equal, fields_of, offline_as, read_pcds,
};
use crate::probe::{
    DUAL, Listen, Msg, NOTIFY, Probe, Scratch, VLP16_CALIB, assert_zenoh_counters, peer_config,
    read_messages,
};
use lidarxdp_core::frame::{Frame, FrameHeader};
use lidarxdp_core::layout::{POINT_TYPES, PointType};
use lidarxdp_core::sensor::SensorModel;

/// The RIHS01 type hash of Jazzy's `sensor_msgs/msg/PointCloud2` in rmw_zenoh's keys.
const HASH: &str = "RIHS01_9198cabf7da3796ae6fe19c4cb3bdd3525492988c70522628af5daa124bae2b5";
/// The first sensor's UDP port; sensor `i` (layout `POINT_TYPES[i]`) listens on this + `i`.
const PORT0: u16 = 2368;
/// The daemon's TCP publisher port, inside the host namespace.
const TCP_PORT: u16 = 7791;
/// The daemon's zenoh peer port, on loopback inside the host namespace.
const ZENOH_PORT: u16 = 17491;

/// A frame as the TCP client received it.
struct TcpFrame {
    header: FrameHeader,
    fields: Vec<(String, u32, u8, u32)>,
    point_step: usize,
    payload: Vec<u8>,
}

/// Subscribes to the daemon at 127.0.0.1:`port` inside `ns` on a new thread and collects
/// every frame, its field list and payload as received, until the stream ends.
fn collect_tcp(ns: &str, port: u16) -> JoinHandle<Vec<TcpFrame>> {
    let ns = ns.to_owned();
    std::thread::spawn(move || {
        in_netns(&ns, move || {
            let addr = format!("127.0.0.1:{port}").parse().expect("address");
            let mut sub = lidarxdp_client::Subscriber::connect(addr).expect("subscribe");
            let mut frames = Vec::new();
            while let Some(f) = sub.next_frame().expect("frame") {
                frames.push(TcpFrame {
                    header: *f.header(),
                    fields: (f.fields().iter())
                        .map(|w| (w.name.clone(), w.offset, w.datatype, w.count))
                        .collect(),
                    point_step: f.point_step(),
                    payload: f.payload_bytes().to_vec(),
                });
            }
            frames
        })
    })
}

/// The `[[sensors]]` of the daemon's configuration: sensor `i` is a VLP-16 named after
/// layout `POINT_TYPES[i]`, on port [`PORT0`] + `i`, publishing that layout.
fn sensors_toml() -> String {
    let calib = common::data(VLP16_CALIB);
    POINT_TYPES
        .iter()
        .enumerate()
        .map(|(i, t)| {
            format!(
                "[[sensors]]\nname = \"{t}\"\nmodel = \"vlp16\"\ncalibration = \"{}\"\n\
                 port = {}\npoint_type = \"{t}\"\n",
                calib.display(),
                PORT0 + i as u16
            )
        })
        .collect()
}

/// Length of a CDR little-endian (XCDR1) `sensor_msgs/msg/PointCloud2` with `frame_id`, the
/// fields of `t` and `data_len` data bytes: the 4-byte encapsulation header, then the
/// members, each primitive aligned to its size counted from the end of that header.
fn cdr_len(frame_id: &str, t: PointType, data_len: usize) -> usize {
    let a4 = |n: usize| n.div_ceil(4) * 4;
    let mut n = 8; // stamp
    n += 4 + frame_id.len() + 1; // frame_id
    n = a4(n) + 4 + 4 + 4; // height, width, fields length
    for f in t.fields() {
        n = a4(n) + 4 + f.name.len() + 1; // name
        n = a4(n) + 4; // offset
        n += 1; // datatype
        n = a4(n) + 4; // count
    }
    n += 1; // is_bigendian
    n = a4(n) + 4 + 4 + 4; // point_step, row_step, data length
    n += data_len + 1; // data, is_dense
    4 + n
}

/// Asserts message `m` (`who`, its `i`-th on the topic) is offline frame `off` of layout `t`
/// from sensor `name`: header stamp `start_ns` (the frame start the TCP client saw, whole
/// hours from the offline one), `frame_id`, height 1, width, the layout's `fields` and
/// `point_step`, `row_step`, little-endian, dense, CDR little-endian (no end padding) of the
/// exact length, and `data` equal to the offline decode's.
fn assert_cloud(who: &str, t: PointType, name: &str, m: &Msg, off: &Frame, start_ns: u64) {
    let n = off.points.len() as u64;
    let step = t.point_step() as u64;
    assert_eq!(m.frame_id, name, "{who}: frame_id");
    assert_eq!(m.fields, fields_of(t), "{who}: fields of {t}");
    assert_eq!(
        (m.height, m.width, m.point_step, m.row_step),
        (1, n, step, step * n),
        "{who}: height, width, point_step, row_step of {t}"
    );
    assert!(
        !m.is_bigendian && m.is_dense,
        "{who}: is_bigendian, is_dense"
    );
    assert_eq!(
        m.cdr_header, "00010000",
        "{who}: CDR little-endian encapsulation"
    );
    assert_eq!(
        m.payload_len,
        cdr_len(name, t, (step * n) as usize),
        "{who}: CDR length"
    );
    let stamp = m.sec as u64 * 1_000_000_000 + m.nanosec;
    assert!(m.nanosec < 1_000_000_000, "{who}: nanosec {}", m.nanosec);
    assert_eq!(stamp, start_ns, "{who}: stamp vs the frame start");
    let delta = i128::from(stamp) - i128::from(off.header.start_ns);
    assert_eq!(
        delta % i128::from(HOUR_NS),
        0,
        "{who}: stamp {stamp} vs offline {} past the hour",
        off.header.start_ns
    );
    assert_layout_bytes(who, t, &m.data, off, delta);
}

/// The messages of `msgs` on `key`, in order.
fn on<'a>(msgs: &'a [Msg], key: &str) -> Vec<&'a Msg> {
    msgs.iter().filter(|m| m.key == key).collect()
}

/// Eight sensors, one per layout, on one daemon with DDS and zenoh on, a TCP client and
/// `lidarxdp subscribe --mcap --pcd`: for every layout, every frame of the replayed capture
/// reaches a Fast DDS subscriber (across the veth), the zenoh subscriber (rosbags), the MCAP
/// recording (mcap + mcap-ros2-support), the PCDs (pypcd4) and the TCP client, each with the
/// layout's fields and point step, and points equal to offline decoding into that layout;
/// the daemon dropped nothing on any output.
#[test]
fn every_point_type_reaches_dds_zenoh_mcap_pcd_and_tcp_equal_offline() {
    if !privileged() || !python_available() {
        return;
    }
    let _alone = crate::one_at_a_time();
    let started = Instant::now();
    let offline: Vec<Vec<Frame>> = POINT_TYPES
        .iter()
        .map(|&t| offline_as(DUAL, SensorModel::Vlp16, VLP16_CALIB, PORT0, t))
        .collect();
    for (t, frames) in POINT_TYPES.iter().zip(&offline) {
        assert_eq!(frames.len(), 4, "offline frames as {t}");
    }
    let frames = offline[0].len();
    let net = NetnsPair::new("pt");
    let scratch = Scratch::new("point-types");
    crate::dds::checkers();
    let cfg = scratch.write("sensors.toml", &sensors_toml());
    let zcfg = scratch.write("zenoh.json5", &peer_config(ZENOH_PORT));
    let daemon = Daemon::start_with(
        &net.host_ns,
        &net.host_if,
        TCP_PORT,
        &[
            "--config",
            &cfg,
            "--dds",
            "--zenoh",
            "--zenoh-config",
            &zcfg,
        ],
    );
    let tcp = collect_tcp(&net.host_ns, TCP_PORT);

    // The recorder: MCAP and PCDs of every sensor, from the TCP stream.
    let (mcap, pcd_dir, ready) = (
        scratch.path("rec.mcap"),
        scratch.path("pcd"),
        scratch.path("ready"),
    );
    let exe = common::daemon_exe();
    let s = |p: &Path| p.to_str().expect("UTF-8 path").to_owned();
    let addr = format!("127.0.0.1:{TCP_PORT}");
    let (exe_s, mcap_s, pcd_s, ready_s) = (s(&exe), s(&mcap), s(&pcd_dir), s(&ready));
    let recorder = Probe::spawn_exe(
        &net.host_ns,
        "lidarxdp subscribe --mcap --pcd",
        &[
            &exe_s,
            "subscribe",
            &addr,
            "--mcap",
            &mcap_s,
            "--pcd",
            &pcd_s,
            "--ready-file",
            &ready_s,
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready.exists() {
        assert!(Instant::now() < deadline, "subscribe not connected in 30 s");
        std::thread::sleep(Duration::from_millis(20));
    }

    // A Fast DDS subscriber per topic in the sensor namespace: every message crosses the veth.
    let expect = frames.to_string();
    let dds_outs: Vec<PathBuf> = (POINT_TYPES.iter())
        .map(|t| scratch.path(&format!("dds-{t}")))
        .collect();
    let fastdds = s(&crate::dds::checkers().fastdds);
    let mut dds: Vec<Probe> = (POINT_TYPES.iter().zip(&dds_outs))
        .map(|(t, out)| {
            let topic = format!("rt/lidar/{t}/points");
            Probe::spawn_exe(
                &net.sensor_ns,
                &format!("Fast DDS subscriber of {topic}"),
                &[
                    &fastdds,
                    "--topic",
                    &topic,
                    "--out",
                    &s(out),
                    "--expect",
                    &expect,
                    "--timeout-s",
                    "60",
                ],
            )
        })
        .collect();
    for p in &mut dds {
        p.wait_ready();
    }
    // One zenoh subscriber for every sensor's key, ready once the last sensor's publisher
    // token is visible (the daemon declares them all at start).
    let zout = scratch.path("zenoh");
    let zkey = format!("0/lidar/*/points/sensor_msgs::msg::dds_::PointCloud2_/{HASH}");
    let ztoken = format!(
        "/MP/%/%/lidarxdp/%lidar%{}%points/",
        POINT_TYPES[POINT_TYPES.len() - 1]
    );
    let zconnect = format!("tcp/127.0.0.1:{ZENOH_PORT}");
    let mut zsub = Probe::listen(
        &net.host_ns,
        "zenoh subscriber",
        &Listen {
            connect: &zconnect,
            key: &zkey,
            out: &zout,
            wait_token: &ztoken,
            expect: Some(frames * POINT_TYPES.len()),
            extra: &NOTIFY,
        },
    );
    std::thread::sleep(Duration::from_secs(1));

    for i in 0..POINT_TYPES.len() {
        let sent = get(
            &common::replay(&net, DUAL, PORT0 + i as u16, "realtime"),
            &["sent"],
        );
        assert_eq!(sent, 603, "replay to sensor {i}");
    }
    let dds_rest: Vec<String> = dds.into_iter().map(Probe::finish).collect();
    // The daemon reads its DDS writers' statuses once a second.
    std::thread::sleep(Duration::from_millis(1200));
    // The daemon stops only once the zenoh subscriber has every frame (stopping it closes its
    // session, and with it a frame still on its way), or after 60 s.
    zsub.wait_notified();
    let stats = daemon.stop();
    let tcp = tcp.join().expect("TCP subscriber");
    zsub.finish();
    let recorder_rest = recorder.finish();
    eprintln!(
        "point_types: daemon run done in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // The daemon: every datagram decoded by its own sensor, every frame on every output.
    let total = (frames * POINT_TYPES.len()) as u64;
    common::assert_no_xsk_loss(&stats);
    assert_eq!(get(&stats, &["capture", "unknown_sensor"]), 0, "{stats}");
    for i in 0..POINT_TYPES.len() {
        let s = i.to_string();
        assert_eq!(get(&stats, &["sensors", &s, "decoded"]), 603, "{stats}");
    }
    assert_eq!(get(&stats, &["capture", "frames_out"]), total, "{stats}");
    let zmsgs = read_messages(&zout);
    assert_zenoh_counters(&stats, total as usize, &zmsgs);
    let d = |k: &str| get(&stats, &["dds", k]);
    assert_eq!(
        (d("published"), d("dropped"), d("errors")),
        (total, 0, 0),
        "dds published, dropped, errors: {stats}"
    );

    // TCP: per sensor, its frames in order with the layout's field list and step.
    assert_eq!(tcp.len() as u64, total, "TCP frames");
    let mut starts: Vec<Vec<u64>> = Vec::new();
    for (i, (&t, off)) in POINT_TYPES.iter().zip(&offline).enumerate() {
        let mine: Vec<&TcpFrame> = (tcp.iter())
            .filter(|f| usize::from(f.header.sensor_id) == i)
            .collect();
        assert_eq!(mine.len(), off.len(), "TCP frames of sensor {t}");
        for (k, (f, o)) in mine.iter().zip(off).enumerate() {
            let who = format!("TCP {t} frame {k}");
            assert_eq!(f.header.sequence, o.header.sequence, "{who}: sequence");
            assert_eq!(
                f.header.packets_received, o.header.packets_received,
                "{who}: packets"
            );
            assert_eq!(f.fields, fields_of(t), "{who}: fields");
            assert_eq!(f.point_step, t.point_step(), "{who}: point_step");
            let delta = i128::from(f.header.start_ns) - i128::from(o.header.start_ns);
            assert_layout_bytes(&who, t, &f.payload, o, delta);
        }
        starts.push(mine.iter().map(|f| f.header.start_ns).collect());
    }

    // DDS (Fast DDS's deserializer), zenoh (rosbags), MCAP (mcap-ros2-support).
    let mcap_msgs = mcap_messages(&mcap, &scratch.path("mcap"));
    let mut dds_bytes = 0;
    for (i, (&t, off)) in POINT_TYPES.iter().zip(&offline).enumerate() {
        let name = t.name();
        let fast = read_messages(&dds_outs[i]);
        assert_eq!(
            summary_received(&dds_rest[i]),
            off.len() as u64,
            "Fast DDS {t}: {}",
            dds_rest[i]
        );
        let zkey_t = format!("0/lidar/{name}/points/sensor_msgs::msg::dds_::PointCloud2_/{HASH}");
        let mtopic = format!("/lidar/{name}/points");
        let dtopic = format!("rt/lidar/{name}/points");
        for (who, msgs) in [
            ("Fast DDS", on(&fast, &dtopic)),
            ("zenoh", on(&zmsgs, &zkey_t)),
            ("MCAP", on(&mcap_msgs, &mtopic)),
        ] {
            assert_eq!(msgs.len(), off.len(), "{who} messages of {t}");
            for (k, (m, o)) in msgs.iter().zip(off).enumerate() {
                assert_cloud(
                    &format!("{who} {t} message {k}"),
                    t,
                    name,
                    m,
                    o,
                    starts[i][k],
                );
                if who == "zenoh" {
                    assert_eq!(m.seq, Some(k as i64 + 1), "zenoh {t} message {k} sequence");
                }
            }
        }
        assert_eq!(fast.len(), off.len(), "Fast DDS messages of {t}");
        dds_bytes += fast.iter().map(|m| m.payload_len as u64).sum::<u64>();
    }
    assert_eq!(
        d("bytes"),
        dds_bytes,
        "dds bytes vs the samples received: {stats}"
    );
    assert_eq!(zmsgs.len() as u64, total, "zenoh messages");
    assert_eq!(mcap_msgs.len() as u64, total, "MCAP messages");

    // PCDs of `subscribe --pcd`: `<sensor name>_<sequence>.pcd`, read back by pypcd4.
    let mut files = Vec::new();
    let mut expected = Vec::new();
    for (i, (&t, off)) in POINT_TYPES.iter().zip(&offline).enumerate() {
        for (k, o) in off.iter().enumerate() {
            files.push(pcd_dir.join(format!("{t}_{:06}.pcd", o.header.sequence)));
            let delta = i128::from(starts[i][k]) - i128::from(o.header.start_ns);
            expected.push((t, o, delta));
        }
    }
    let listed = std::fs::read_dir(&pcd_dir).expect("PCD folder").count();
    assert_eq!(listed, files.len(), "PCD files written: {recorder_rest}");
    let pcds = read_pcds(&files, &scratch.path("pcdcheck"));
    for (p, (t, o, delta)) in pcds.iter().zip(expected) {
        assert_pcd_equal(&format!("{}", p.path.display()), t, p, o, delta);
    }
    eprintln!(
        "point_types: checked in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// `received` of a Fast DDS subscriber's closing JSON line.
fn summary_received(rest: &str) -> u64 {
    let line = rest
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .unwrap_or_else(|| panic!("no summary line in {rest:?}"));
    let v: serde_json::Value =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("summary {line}: {e}"));
    v["received"]
        .as_u64()
        .unwrap_or_else(|| panic!("received in {v}"))
}

/// The messages of the MCAP file `path` as `mcap_points.py` read them (written to `out`), after
/// checking the file: profile `ros2`, one channel per sensor (`/lidar/<layout>/points`, CDR,
/// schema `sensor_msgs/msg/PointCloud2` as `ros2msg`), one message per frame.
fn mcap_messages(path: &Path, out: &Path) -> Vec<Msg> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/ros2/mcap_points.py");
    let o = std::process::Command::new(common::python())
        .arg(script)
        .arg("--out")
        .arg(out)
        .arg(path)
        .output()
        .expect("run mcap_points.py");
    assert!(
        o.status.success(),
        "mcap_points.py: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("mcap_points.py JSON");
    let files = v["files"].as_array().expect("files");
    assert_eq!(files.len(), 1, "{v}");
    let f = &files[0];
    assert_eq!(f["profile"], "ros2", "{f}");
    let channels = f["channels"].as_array().expect("channels");
    let topics: Vec<&str> = channels
        .iter()
        .map(|c| c["topic"].as_str().unwrap_or_default())
        .collect();
    let want: Vec<String> = (POINT_TYPES.iter())
        .map(|t| format!("/lidar/{t}/points"))
        .collect();
    assert_eq!(topics, want, "MCAP channels, in the order of the replays");
    for c in channels {
        assert_eq!(
            (&c["message_encoding"], &c["schema"], &c["schema_encoding"]),
            (
                &serde_json::json!("cdr"),
                &serde_json::json!("sensor_msgs/msg/PointCloud2"),
                &serde_json::json!("ros2msg")
            ),
            "{c}"
        );
    }
    read_messages(out)
}
