//! The versioned handshake: sensors chosen by name, point fields chosen by name (one packed copy
//! per distinct field set, shared), the default subscription, and rejection of bad requests and
//! garbage with a logged reason. It installs the process's logger to check the reasons: no
//! other module of the `publish` test binary installs one.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lidarxdp::publish::{BufferPool, FrameSender, Publisher, PublisherConfig, PublisherHandle};
use lidarxdp_client::{ClientError, Subscriber};
use lidarxdp_core::frame::{Frame, FrameHeader};
use lidarxdp_core::point::PointXYZIRCAEDT;
use lidarxdp_core::protocol::{self, Message, Parsed, SensorEntry, Subscribe, error_code};

/// Keeps every warning logged by the publisher.
struct Capture(Mutex<Vec<String>>);

impl log::Log for Capture {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.level() <= log::Level::Info
    }
    fn log(&self, r: &log::Record) {
        if r.level() <= log::Level::Warn {
            self.0.lock().unwrap().push(r.args().to_string());
        }
    }
    fn flush(&self) {}
}

static LOGS: Capture = Capture(Mutex::new(Vec::new()));

fn logged(needle: &str) -> bool {
    LOGS.0.lock().unwrap().iter().any(|l| l.contains(needle))
}

fn init() {
    let _ = log::set_logger(&LOGS);
    log::set_max_level(log::LevelFilter::Info);
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn spawn() -> (PublisherHandle, FrameSender) {
    init();
    let cfg = PublisherConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        queue_depth: 16,
        frame_queue: 32,
        sensors: vec![
            SensorEntry {
                id: 0,
                name: "front".into(),
                model: "VLP16".into(),
            },
            SensorEntry {
                id: 1,
                name: "roof".into(),
                model: "Pandar128E4X".into(),
            },
        ],
        ..PublisherConfig::default()
    };
    Publisher::spawn(cfg, Arc::new(BufferPool::new(8))).unwrap()
}

fn frame(sensor: u16, seq: u64, n: usize) -> Frame {
    Frame {
        header: FrameHeader {
            sensor_id: sensor,
            sequence: seq,
            start_ns: 1_000 + seq,
            ..Default::default()
        },
        points: (0..n)
            .map(|j| PointXYZIRCAEDT {
                x: j as f32,
                y: -(j as f32),
                z: 0.5 * sensor as f32,
                intensity: (j % 256) as u8,
                return_type: 3,
                channel: (j % 16) as u16,
                azimuth: 0.25,
                elevation: -0.1,
                distance: 2.0 + j as f32,
                time_stamp: 100 * j as u32,
            })
            .collect(),
    }
}

#[test]
fn sensors_and_fields_by_name() {
    let (publisher, sender) = spawn();
    let addr = publisher.local_addr();
    let mut all = Subscriber::connect(addr).unwrap();
    let h = all.hello().clone();
    assert_eq!(h.min_version, 4);
    assert_eq!(h.sensors.len(), 2);
    assert_eq!((h.sensors[1].id, h.sensors[1].name.as_str()), (1, "roof"));
    let want = Subscribe {
        sensors: vec!["roof".into()],
        fields: vec!["z".into(), "x".into(), "channel".into()],
        ..Subscribe::default()
    };
    let mut a = Subscriber::connect_with(addr, &want).unwrap();
    let mut b = Subscriber::connect_with(addr, &want).unwrap();
    let ack = a.subscription().unwrap().clone();
    assert_eq!(ack.sensor_ids, vec![1]);
    assert_eq!(ack.point_step, 10);
    let names: Vec<&str> = ack.fields.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["x", "z", "channel"]);
    let front_only = Subscribe {
        sensors: vec!["front".into()],
        fields: vec![],
        ..Subscribe::default()
    };
    let mut f = Subscriber::connect_with(addr, &front_only).unwrap();
    assert_eq!(f.subscription().unwrap().point_step, 32);
    wait_for("4 subscribers", || publisher.counters().subscribers == 4);

    for seq in 0..3 {
        assert!(sender.send(frame(0, seq, 50)));
        assert!(sender.send(frame(1, seq, 70)));
    }
    for s in [&mut all, &mut a, &mut b, &mut f] {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    }
    // Default subscription: both sensors, full points.
    for seq in 0..3 {
        for sensor in [0, 1] {
            let got = all.next_frame().unwrap().unwrap();
            let want = frame(sensor, seq, if sensor == 0 { 50 } else { 70 });
            assert_eq!(got.header(), &want.header);
            assert_eq!(got.points(), want.points.autoware());
        }
    }
    // Field subset of "roof": 10-byte packed points, read through typed views.
    for s in [&mut a, &mut b] {
        for seq in 0..3 {
            let got = s.next_frame().unwrap().unwrap();
            assert_eq!((got.header().sensor_id, got.header().sequence), (1, seq));
            assert!(!got.is_full_layout());
            assert!(got.points().is_empty());
            assert_eq!((got.point_count(), got.point_step()), (70, 10));
            assert_eq!(got.payload_bytes().len(), 700);
            let x: Vec<f32> = got.field::<f32>("x").unwrap().iter().collect();
            let z = got.field::<f32>("z").unwrap();
            let ch = got.field::<u16>("channel").unwrap();
            assert_eq!(x[69], 69.0);
            assert_eq!(z.get(5), Some(0.5));
            assert_eq!(ch.get(17), Some(1));
            assert_eq!(ch.get(70), None);
            assert!(got.field::<f32>("y").is_none());
            assert!(got.field::<u8>("x").is_none(), "wrong type");
            // Bytes of point 3: x = 3.0, z = 0.5, channel = 3.
            assert_eq!(
                &got.payload_bytes()[30..40],
                &[0, 0, 0x40, 0x40, 0, 0, 0, 0x3f, 3, 0]
            );
        }
    }
    // Only "front".
    for seq in 0..3 {
        let got = f.next_frame().unwrap().unwrap();
        assert_eq!((got.header().sensor_id, got.header().sequence), (0, seq));
        assert_eq!(got.points(), frame(0, seq, 50).points.autoware());
    }
    let c = publisher.shutdown().unwrap();
    assert_eq!(c.subscriptions, 3);
    // One packed copy per roof frame, shared by the two subscribers with the same field set.
    assert_eq!(c.packed_encodings, 3);
    assert_eq!(c.frames_sent, 6 + 3 + 3 + 3);
    assert_eq!(c.protocol_errors, 0);
}

#[test]
fn unknown_sensor_or_field_is_refused_with_reason() {
    let (publisher, _sender) = spawn();
    let addr = publisher.local_addr();
    let bad = Subscribe {
        sensors: vec!["rear".into()],
        fields: vec![],
        ..Subscribe::default()
    };
    match Subscriber::connect_with(addr, &bad) {
        Err(ClientError::Server { code, reason }) => {
            assert_eq!(code, error_code::UNKNOWN_SENSOR);
            assert_eq!(
                reason,
                "unknown sensor 'rear'; this server has: front, roof"
            );
        }
        other => panic!("{other:?}"),
    }
    let bad = Subscribe {
        sensors: vec![],
        fields: vec!["x".into(), "rgb".into()],
        ..Subscribe::default()
    };
    match Subscriber::connect_with(addr, &bad) {
        Err(ClientError::Server { code, reason }) => {
            assert_eq!(code, error_code::UNKNOWN_FIELD);
            assert_eq!(
                reason,
                "sensor 'front': unknown field 'rgb' for point_type autoware; valid: x, y, z, \
                 intensity, return_type, channel, azimuth, elevation, distance, time_stamp"
            );
        }
        other => panic!("{other:?}"),
    }
    wait_for("2 disconnects", || {
        publisher.counters().subscribers_disconnected == 2
    });
    assert!(logged("unknown sensor 'rear'"));
    assert!(logged("unknown field 'rgb'"));
    assert_eq!(publisher.shutdown().unwrap().protocol_errors, 2);
}

/// Reads the hello, then everything until EOF; returns the messages after the hello.
fn read_after_hello(s: &mut TcpStream) -> Vec<Message> {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut bytes = Vec::new();
    s.read_to_end(&mut bytes).unwrap();
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        match protocol::parse_header(&bytes[at..]).unwrap() {
            Parsed::Complete {
                message,
                header_len,
                payload_len,
            } => {
                out.push(message);
                at += header_len + payload_len;
            }
            Parsed::Incomplete { needed } => panic!("truncated at {at}, needs {needed}"),
        }
    }
    assert!(matches!(out.first(), Some(Message::Hello(_))), "{out:?}");
    out.remove(0);
    out
}

#[test]
fn garbage_is_disconnected_with_a_logged_reason() {
    let (publisher, _sender) = spawn();
    let addr = publisher.local_addr();
    // An HTTP request.
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let msgs = read_after_hello(&mut s);
    match &msgs[..] {
        [Message::Error(e)] => {
            assert_eq!(e.code, error_code::MALFORMED);
            assert!(
                e.reason.starts_with("magic (offset 0) is [47, 45, 54, 20]"),
                "{e:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    // A version-1 client.
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"LXDP\x01\x00\x03\x00\x18\x00\x00\x00")
        .unwrap();
    match &read_after_hello(&mut s)[..] {
        [Message::Error(e)] => {
            assert_eq!(e.code, error_code::UNSUPPORTED_VERSION);
            assert_eq!(
                e.reason,
                "version (offset 4) is 1, this decoder supports only 4"
            );
        }
        other => panic!("{other:?}"),
    }
    // A server-only message type (an error message sent by the client).
    let mut s = TcpStream::connect(addr).unwrap();
    let mut m = Vec::new();
    protocol::encode_error(1, "hi", &mut m);
    s.write_all(&m).unwrap();
    match &read_after_hello(&mut s)[..] {
        [Message::Error(e)] => {
            assert_eq!(e.code, error_code::UNEXPECTED_MESSAGE);
            assert_eq!(
                e.reason,
                "expected a subscribe message, got a error message"
            );
        }
        other => panic!("{other:?}"),
    }
    // A subscribe request trickled byte by byte, then garbage: the request is applied, the
    // garbage rejected.
    let mut s = TcpStream::connect(addr).unwrap();
    let mut m = Vec::new();
    protocol::encode_subscribe(
        &Subscribe {
            sensors: vec!["front".into()],
            fields: vec![],
            ..Subscribe::default()
        },
        &mut m,
    );
    for b in &m {
        s.write_all(&[*b]).unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
    s.write_all(&[0xff; 40]).unwrap();
    match &read_after_hello(&mut s)[..] {
        [Message::Subscribed(a), Message::Error(e)] => {
            assert_eq!(a.sensor_ids, vec![0]);
            assert_eq!(e.code, error_code::MALFORMED);
        }
        other => panic!("{other:?}"),
    }
    let c = publisher.shutdown().unwrap();
    assert_eq!(c.protocol_errors, 4);
    assert_eq!(c.subscriptions, 1);
    assert_eq!(c.subscribers, 0);
    assert!(logged(
        "protocol error 1: magic (offset 0) is [47, 45, 54, 20]"
    ));
    assert!(logged("protocol error 2: version (offset 4) is 1"));
    assert!(logged("protocol error 5: expected a subscribe message"));
}
