//! The zero-copy path end to end, in one process: points written by a "decoder" into a buffer
//! lent by the zenoh sink's pool ([`super::ShmFrames`]) reach a zenoh subscriber session as
//! the very bytes the decoder wrote, at the same offset of the same `/dev/shm` segment, and
//! the sink copies nothing.

use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lidarxdp_core::frame::{Frame, FrameHeader};
use lidarxdp_core::point::{POINT_SIZE, PointXYZIRCAEDT};
use lidarxdp_core::ros2::{Distro, Qos, topic_key_expr};
use lidarxdp_core::scan::BufferSource;
use zenoh::Wait;

use super::{SessionConfig, ShmPool, TopicPlan, ZenohSettings, ZenohSink};
use crate::publish::{BufferPool, Publisher, PublisherConfig};

/// Runs test `name` of this binary alone in a child process and says so (`true`: the caller
/// returns); `false` in that child, which runs the test's body. [`ShmPool::create`] refuses
/// to run while another thread of the process starts (it would keep the start-up
/// capabilities), and in a test binary the other tests start threads at any time.
fn alone(name: &str) -> bool {
    const CHILD: &str = "LIDARXDP_TEST_ALONE";
    if std::env::var_os(CHILD).is_some() {
        return false;
    }
    let exe = std::env::current_exe().unwrap();
    let status = std::process::Command::new(exe)
        .args([name, "--exact", "--test-threads=1", "--nocapture"])
        .env(CHILD, "1")
        .status()
        .unwrap();
    assert!(status.success(), "{name} in a child process: {status}");
    true
}

/// The mapped file and the offset in it of address `addr` of this process
/// (`/proc/self/maps`, proc(5): `start-end perms offset dev inode path`).
fn file_offset(addr: usize) -> Option<(String, usize)> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let (range, _perms, off) = (f.next()?, f.next()?, f.next()?);
        let path = f.nth(2)?.to_owned();
        let (a, b) = range.split_once('-')?;
        let (a, b) = (
            usize::from_str_radix(a, 16).ok()?,
            usize::from_str_radix(b, 16).ok()?,
        );
        let off = usize::from_str_radix(off, 16).ok()?;
        (a <= addr && addr < b).then(|| (path, addr - a + off))
    })
}

fn pt(frame: u32, i: u32) -> PointXYZIRCAEDT {
    PointXYZIRCAEDT {
        x: i as f32,
        y: frame as f32,
        channel: (i % 128) as u16,
        time_stamp: i * 10,
        ..Default::default()
    }
}

/// Three frames of 1,000 points each: every one is lent a chunk, the subscriber's payload is
/// in shared memory, its `data` lies at the decoder's write address (same segment file, same
/// offset) and holds the points written; the sink's counters say 3 loaned, 0 bytes copied.
#[test]
fn the_subscriber_reads_the_bytes_the_decoder_wrote() {
    if alone("ros2_zenoh::tests::the_subscriber_reads_the_bytes_the_decoder_wrote") {
        return;
    }
    // 2 MiB: within an unprivileged RLIMIT_MEMLOCK (8 MiB) with the subscriber's mapping.
    let pool = match ShmPool::create(2 << 20) {
        Ok(p) => p,
        Err(e) => {
            assert!(
                std::env::var_os("LIDARXDP_REQUIRE_PRIVILEGED").is_none(),
                "shared-memory pool: {e}"
            );
            eprintln!("skipped: {e}");
            return;
        }
    };
    // The subscriber listens on a loopback port the kernel picks; the sink connects to it.
    let config = zenoh::Config::from_json5(
        r#"{ mode: "peer", listen: { endpoints: ["tcp/127.0.0.1:0"] },
             scouting: { multicast: { enabled: false } },
             transport: { shared_memory: { enabled: true } } }"#,
    )
    .unwrap();
    let sub_session = zenoh::open(config).wait().unwrap();
    let locator = sub_session.info().locators().wait()[0].to_string();
    let key = topic_key_expr(0, "/zc/points", Distro::Jazzy);
    let sub = sub_session.declare_subscriber(&key).wait().unwrap();
    let over = |k: &str, v: &str| (k.to_owned(), v.to_owned());
    let (sink, handle) = ZenohSink::start(
        &ZenohSettings {
            session: SessionConfig {
                file: None,
                overrides: vec![
                    over("mode", "\"peer\""),
                    over("listen/endpoints", "[]"),
                    over("connect/endpoints", &format!("[\"{locator}\"]")),
                    over("scouting/multicast/enabled", "false"),
                    over("transport/shared_memory/enabled", "true"),
                ],
            },
            domain_id: 0,
            distro: Distro::Jazzy,
            qos: Qos::LIDAR,
            queue: 4,
            topics: vec![TopicPlan {
                sensor_id: 3,
                topic: "/zc/points".into(),
                frame_id: "zc".into(),
            }],
        },
        Some(pool),
    )
    .unwrap();
    let heap = Arc::new(BufferPool::new(4));
    let frames = handle.buffer_source(heap.clone()).expect("a pool");
    let (publisher, sender) = Publisher::spawn_on(
        TcpListener::bind("127.0.0.1:0").unwrap(),
        PublisherConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            ..PublisherConfig::default()
        },
        heap,
        vec![Box::new(sink)],
    )
    .unwrap();
    // A sensor without a topic gets heap buffers.
    assert!(
        frames
            .take_buffer(4, 10)
            .is_none_or(|b| b.memory().is_none())
    );

    const N: u32 = 1_000;
    let data_len = N as usize * POINT_SIZE;
    let headroom = lidarxdp_core::ros2::points_prefix(0, "zc", N as usize)
        .unwrap()
        .len();
    // Where each frame's points were written: (segment file, offset), by frame number.
    let mut written_at = std::collections::HashMap::new();
    let mut seq = 0u64;
    let mut got = 0u32;
    let t0 = Instant::now();
    // Frames go out until three arrived (the first ones may precede the sessions' link); every
    // sample that arrives is checked against its own frame, however late.
    while got < 3 {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{got} of 3 frames arrived"
        );
        let mut points = frames.take_buffer(3, N as usize).expect("a lent buffer");
        assert!(
            points.memory().is_some(),
            "lent from the shared-memory pool"
        );
        for i in 0..N {
            points.push(pt(seq as u32, i));
        }
        assert_eq!(points.moves(), 0, "written where it was lent");
        let written = file_offset(points.as_ptr() as usize).expect("the decoder's mapping");
        assert!(
            written.0.ends_with(".zenoh"),
            "a zenoh segment: {}",
            written.0
        );
        written_at.insert(seq as u32, written);
        assert!(sender.send(Frame {
            header: FrameHeader {
                sensor_id: 3,
                sequence: seq,
                start_ns: 1_700_000_000_123_456_789 + seq,
                ..Default::default()
            },
            points,
        }));
        seq += 1;
        let mut wait = Duration::from_millis(500);
        while let Ok(Some(sample)) = sub.recv_timeout(wait) {
            wait = Duration::ZERO;
            let payload = sample.payload();
            let shm = payload.as_shm().expect("delivered through shared memory");
            let msg: &[u8] = shm;
            assert_eq!(
                msg.len(),
                headroom + data_len + 1,
                "prefix, points, is_dense"
            );
            let frame_no = sample_frame(msg, headroom);
            let read =
                file_offset(msg[headroom..].as_ptr() as usize).expect("the subscriber's mapping");
            assert_eq!(
                Some(&read),
                written_at.get(&frame_no),
                "frame {frame_no}: the subscriber's data is the decoder's memory"
            );
            let expect: Vec<PointXYZIRCAEDT> = (0..N).map(|i| pt(frame_no, i)).collect();
            assert_eq!(
                &msg[headroom..headroom + data_len],
                bytemuck::cast_slice::<_, u8>(&expect)
            );
            assert_eq!(msg[headroom + data_len], 1, "is_dense");
            got += 1;
        }
    }
    publisher.shutdown().unwrap();
    let c = handle.counters();
    assert_eq!(c.copied_bytes, 0, "{c:?}");
    assert_eq!((c.loaned, c.published), (seq, seq), "{c:?}");
    assert_eq!(
        c.loans, seq,
        "one chunk per frame, none for sensor 4: {c:?}"
    );
}

/// The frame number a test point carries (`y` of the first point).
fn sample_frame(msg: &[u8], headroom: usize) -> u32 {
    let y = f32::from_le_bytes(msg[headroom + 4..headroom + 8].try_into().unwrap());
    y as u32
}

/// Mappings of `path` in this process now (`/proc/self/maps`).
fn mappings_of(path: &str) -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|l| l.split_whitespace().nth(5) == Some(path))
        .count()
}

/// A subscriber maps the sink's announced segment when it subscribes, before any message, and
/// its first message comes through that mapping (no second mapping of the segment).
#[test]
fn a_subscriber_maps_the_pool_when_it_subscribes() {
    if alone("ros2_zenoh::tests::a_subscriber_maps_the_pool_when_it_subscribes") {
        return;
    }
    let pool = match ShmPool::create(2 << 20) {
        Ok(p) => p,
        Err(e) => {
            assert!(
                std::env::var_os("LIDARXDP_REQUIRE_PRIVILEGED").is_none(),
                "shared-memory pool: {e}"
            );
            eprintln!("skipped: {e}");
            return;
        }
    };
    let over = |k: &str, v: &str| (k.to_owned(), v.to_owned());
    let (sink, handle) = ZenohSink::start(
        &ZenohSettings {
            session: SessionConfig {
                file: None,
                overrides: vec![
                    over("mode", "\"peer\""),
                    over("listen/endpoints", "[\"tcp/127.0.0.1:0\"]"),
                    over("scouting/multicast/enabled", "false"),
                    over("transport/shared_memory/enabled", "true"),
                ],
            },
            domain_id: 7,
            distro: Distro::Jazzy,
            qos: Qos::LIDAR,
            queue: 4,
            topics: vec![TopicPlan {
                sensor_id: 0,
                topic: "/pm/points".into(),
                frame_id: "pm".into(),
            }],
        },
        Some(pool.clone()),
    )
    .unwrap();
    let (_, segment) = pool.segment().expect("the pool's segment");
    let path = format!("/dev/shm/{segment}.zenoh");
    assert_eq!(mappings_of(&path), 1, "the sink's own mapping of {path}");
    let locator = handle.locators()[0].clone();
    let sub = lidarxdp_client::zenoh::ZenohSubscriber::open(
        &SessionConfig {
            file: None,
            overrides: vec![
                over("mode", "\"peer\""),
                over("listen/endpoints", "[]"),
                over("connect/endpoints", &format!("[\"{locator}\"]")),
                over("scouting/multicast/enabled", "false"),
                over("transport/shared_memory/enabled", "true"),
            ],
        },
        7,
        "/pm/points",
        Distro::Jazzy,
    )
    .unwrap();
    // Mapped on subscribing (or by the token's late arrival), before any frame is sent.
    let t0 = Instant::now();
    while sub.segments_mapped() == 0 && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(sub.segments_mapped(), 1);
    assert_eq!(mappings_of(&path), 2, "the subscriber's mapping of {path}");
    let heap = Arc::new(BufferPool::new(4));
    let frames = handle.buffer_source(heap.clone()).expect("a pool");
    let (publisher, sender) = Publisher::spawn_on(
        TcpListener::bind("127.0.0.1:0").unwrap(),
        PublisherConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            ..PublisherConfig::default()
        },
        heap,
        vec![Box::new(sink)],
    )
    .unwrap();
    let t0 = Instant::now();
    let frame = loop {
        assert!(t0.elapsed() < Duration::from_secs(20), "no frame arrived");
        let mut points = frames.take_buffer(0, 100).expect("a lent buffer");
        points.extend((0..100).map(|i| pt(0, i)));
        assert!(sender.send(Frame {
            header: FrameHeader::default(),
            points,
        }));
        if let Some(f) = sub.recv_timeout(Duration::from_millis(500)) {
            break f;
        }
    };
    assert!(frame.in_shared_memory());
    assert_eq!(frame.points().unwrap().len(), 100);
    assert_eq!(
        mappings_of(&path),
        2,
        "the first message used the subscriber's mapping"
    );
    assert_eq!(sub.segments_mapped(), 1);
    drop(frame);
    publisher.shutdown().unwrap();
}
