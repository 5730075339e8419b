//! The daemon's rmw_zenoh liveliness tokens (node `NN`, publisher `MP`), as an independent
//! client sees them with `liveliness().get("@ros2_lv/**")`, and the options that change them
//! (`--ros-domain-id`, `--ros-distro humble`, `--topic`, `--frame-id`).
use std::time::Duration;

use crate::common::{self, Daemon, NetnsPair, collect_frames, get, privileged, python_available};
use crate::probe::{
    Listen, NOTIFY, Probe, Scratch, assert_messages_equal_offline, assert_zenoh_counters,
    liveliness, now_ns, offline, peer_config, read_messages,
};
use lidarxdp_core::sensor::SensorModel;

/// The zenoh session id of the daemon, the one peer the probe (a client of the daemon's peer)
/// is connected to: lowercase hex, at most 32 digits (a 128-bit id).
fn daemon_zid(v: &serde_json::Value) -> String {
    let peers = v["peers"].as_array().expect("peers");
    assert_eq!(peers.len(), 1, "the probe's peers: {v}");
    let zid = peers[0].as_str().expect("zid").to_owned();
    assert!(
        (1..=32).contains(&zid.len())
            && zid
                .chars()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)),
        "zid {zid:?} is not lowercase hex"
    );
    zid
}

/// Splits the tokens into the node token, which must be exactly `node`, and the publisher
/// token, which must be `<pub_head>/<eid>/MP/<pub_tail>` with `eid` a decimal number other
/// than the node's 0; returns the publisher token.
fn assert_tokens(v: &serde_json::Value, node: &str, pub_head: &str, pub_tail: &str) -> String {
    let tokens: Vec<&str> = v["tokens"]
        .as_array()
        .expect("tokens")
        .iter()
        .map(|t| t.as_str().expect("token"))
        .collect();
    assert_eq!(
        tokens.len(),
        3,
        "one node token, one points and one /diagnostics publisher token: {tokens:?}"
    );
    assert!(tokens.contains(&node), "node token {node} in {tokens:?}");
    // The /diagnostics publisher (issue 26): reliable, volatile, keep last 10.
    let diag = format!("{pub_head}/");
    let diag = tokens
        .iter()
        .find(|t| {
            t.starts_with(&diag)
                && t.contains(
                    "/MP/%/%/lidarxdp/%diagnostics/diagnostic_msgs::msg::dds_::DiagnosticArray_/",
                )
        })
        .unwrap_or_else(|| panic!("no /diagnostics publisher token in {tokens:?}"));
    assert!(diag.ends_with("/::,10:,:,:,,"), "{diag}");
    let publisher = tokens
        .iter()
        .find(|t| **t != node && *t != diag)
        .expect("publisher token");
    let eid = publisher
        .strip_prefix(pub_head)
        .and_then(|r| r.strip_prefix('/'))
        .and_then(|r| r.split('/').next())
        .unwrap_or_else(|| panic!("publisher token {publisher} does not start with {pub_head}/"));
    assert!(
        !eid.is_empty() && eid.chars().all(|c| c.is_ascii_digit()) && eid != "0",
        "publisher entity id {eid:?} in {publisher}"
    );
    assert_eq!(*publisher, format!("{pub_head}/{eid}/MP/{pub_tail}"));
    publisher.to_string()
}

/// With the defaults (ROS domain 0, Jazzy, topic `/lidar/<sensor name>/points` for the VLP-16,
/// whose name defaults to its model name), the daemon declares exactly rmw_zenoh's node token
/// and publisher token, with its own zenoh session id, best effort / volatile / keep last 5.
#[test]
fn liveliness_tokens_announce_node_and_publisher() {
    if !privileged() || !python_available() {
        return;
    }
    let _alone = crate::one_at_a_time();
    let net = NetnsPair::new("zl");
    let s = Scratch::new("liveliness");
    let cfg = s.write("zenoh.json5", &peer_config(17449));
    let daemon = Daemon::start(
        &net.host_ns,
        &net.host_if,
        7703,
        &["--zenoh", "--zenoh-config", &cfg],
    );
    let v = liveliness(&net.host_ns, "tcp/127.0.0.1:17449", "lidarxdp", 2);
    let zid = daemon_zid(&v);
    // The sensor's default name is its model's (`VLP16`), hence the default topic
    // `/lidar/VLP16/points`.
    assert_tokens(
        &v,
        &format!("@ros2_lv/0/{zid}/0/0/NN/%/%/lidarxdp"),
        &format!("@ros2_lv/0/{zid}/0"),
        "%/%/lidarxdp/%lidar%VLP16%points/sensor_msgs::msg::dds_::PointCloud2_/\
         RIHS01_9198cabf7da3796ae6fe19c4cb3bdd3525492988c70522628af5daa124bae2b5/2::,5:,:,:,,",
    );
    daemon.stop();
}

/// `--ros-domain-id 42 --ros-distro humble --topic /robot/front/points --frame-id
/// front_lidar`: the tokens and the key carry domain 42, the topic and Humble's
/// `TypeHashNotSupported`; a subscriber to every key gets the capture's frames on that key
/// alone, equal to offline decoding, stamped with that frame_id.
#[test]
fn domain_distro_topic_and_frame_id_options_shape_keys_and_tokens() {
    if !privileged() || !python_available() {
        return;
    }
    let _alone = crate::one_at_a_time();
    const PCAP: &str = "velodyne/vlp16/vlp16_strongest_84pkt.pcap";
    const KEY: &str =
        "42/robot/front/points/sensor_msgs::msg::dds_::PointCloud2_/TypeHashNotSupported";
    let offline = offline(
        PCAP,
        SensorModel::Vlp16,
        "velodyne/vlp16/calibration/VLP16db.yaml",
        2368,
    );
    assert_eq!(offline.len(), 2, "frames of the 84-packet capture");
    let net = NetnsPair::new("zh");
    let s = Scratch::new("humble");
    let cfg = s.write("zenoh.json5", &peer_config(17450));
    let daemon = Daemon::start(
        &net.host_ns,
        &net.host_if,
        7705,
        &[
            "--zenoh",
            "--zenoh-config",
            &cfg,
            "--ros-domain-id",
            "42",
            "--ros-distro",
            "humble",
            "--topic",
            "/robot/front/points",
            "--frame-id",
            "front_lidar",
        ],
    );
    let ep = "tcp/127.0.0.1:17450";
    let v = liveliness(&net.host_ns, ep, "lidarxdp", 2);
    let zid = daemon_zid(&v);
    let publisher = assert_tokens(
        &v,
        &format!("@ros2_lv/42/{zid}/0/0/NN/%/%/lidarxdp"),
        &format!("@ros2_lv/42/{zid}/0"),
        "%/%/lidarxdp/%robot%front%points/sensor_msgs::msg::dds_::PointCloud2_/\
         TypeHashNotSupported/2::,5:,:,:,,",
    );

    let tcp = collect_frames(&net.host_ns, 7705);
    let out = s.path("sub");
    let mut sub = Probe::listen(
        &net.host_ns,
        "subscriber",
        &Listen {
            connect: ep,
            // Every point cloud of any key (the messages' keys are checked below); the
            // daemon's /diagnostics arrays are another type.
            key: "**/sensor_msgs::msg::dds_::PointCloud2_/**",
            out: &out,
            wait_token: &publisher,
            expect: Some(offline.len()),
            extra: &NOTIFY,
        },
    );
    std::thread::sleep(Duration::from_secs(1));
    let t0 = now_ns();
    let sent = get(&common::replay(&net, PCAP, 2368, "realtime"), &["sent"]);
    assert_eq!(sent, 84);
    // The daemon stops only once the subscriber has every frame (stopping it closes its zenoh
    // session, and with it a frame still on its way), or after 60 s: the assertions below then
    // say what is missing.
    sub.wait_notified();
    let stats = daemon.stop();
    let t1 = now_ns();
    let tcp = tcp.join().expect("TCP subscriber");
    sub.finish();
    common::assert_no_xsk_loss(&stats);
    common::assert_frames_equal(&tcp, &offline);
    let msgs = read_messages(&out);
    assert_messages_equal_offline(&msgs, &offline, &tcp, KEY, "front_lidar", (t0, t1));
    assert_zenoh_counters(&stats, offline.len(), &msgs);
}
