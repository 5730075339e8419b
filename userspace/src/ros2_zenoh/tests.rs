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
use crate::publish::{BufferPool, FrameSender, Publisher, PublisherConfig, PublisherHandle};

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

/// One file mapping of this process: its address range, the file offset at its start and
/// the file's path.
struct Mapping {
    start: usize,
    end: usize,
    offset: usize,
    path: String,
}

/// This process's file mappings (`/proc/self/maps`, proc(5): `start-end perms offset dev inode
/// path`; anonymous ones, without a path, left out).
fn mappings() -> Vec<Mapping> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (range, _perms, off) = (f.next()?, f.next()?, f.next()?);
            let path = f.nth(2)?.to_owned();
            let (a, b) = range.split_once('-')?;
            Some(Mapping {
                start: usize::from_str_radix(a, 16).ok()?,
                end: usize::from_str_radix(b, 16).ok()?,
                offset: usize::from_str_radix(off, 16).ok()?,
                path,
            })
        })
        .collect()
}

/// The mapped file and the offset in it of address `addr` of this process.
fn file_offset(addr: usize) -> Option<(String, usize)> {
    mappings()
        .into_iter()
        .find(|m| m.start <= addr && addr < m.end)
        .map(|m| (m.path, addr - m.start + m.offset))
}

/// Mappings of `path` in this process now.
fn mappings_of(path: &str) -> usize {
    mappings().iter().filter(|m| m.path == path).count()
}

/// A 2 MiB pool (within an unprivileged 8 MiB `RLIMIT_MEMLOCK`, with a subscriber's mapping),
/// or `None` (the test is skipped) where it cannot be locked, unless
/// `LIDARXDP_REQUIRE_PRIVILEGED` is set (`cargo xtask test`), which makes that a failure.
fn pool() -> Option<ShmPool> {
    match ShmPool::create(2 << 20) {
        Ok(p) => Some(p),
        Err(e) => {
            assert!(
                std::env::var_os("LIDARXDP_REQUIRE_PRIVILEGED").is_none(),
                "shared-memory pool: {e}"
            );
            eprintln!("skipped: {e}");
            None
        }
    }
}

/// A zenoh peer session on loopback with shared memory, no multicast scouting, listening on
/// `listen` and connecting to `connect` (JSON5 lists of endpoints).
fn peer(listen: &str, connect: &str) -> SessionConfig {
    let over = |k: &str, v: &str| (k.to_owned(), v.to_owned());
    SessionConfig {
        file: None,
        overrides: vec![
            over("mode", "\"peer\""),
            over("listen/endpoints", listen),
            over("connect/endpoints", connect),
            over("scouting/multicast/enabled", "false"),
            over("transport/shared_memory/enabled", "true"),
        ],
    }
}

/// The zenoh sink on `session` with `pool`, one topic of sensor `sensor_id` in `domain_id`.
fn sink(
    session: SessionConfig,
    domain_id: u32,
    (sensor_id, topic, frame_id): (u16, &str, &str),
    pool: ShmPool,
) -> (ZenohSink, super::ZenohHandle) {
    ZenohSink::start(
        &ZenohSettings {
            session,
            domain_id,
            distro: Distro::Jazzy,
            qos: Qos::LIDAR,
            queue: 4,
            topics: vec![TopicPlan {
                sensor_id,
                topic: topic.into(),
                frame_id: frame_id.into(),
                imu_topic: None,
                imu_frame_id: String::new(),
            }],
        },
        Some(pool),
    )
    .unwrap()
}

/// A publisher whose only sink is `sink` (its TCP server on a free loopback port), and the
/// point buffers the zenoh sink's pool lends through `handle`.
fn publisher(
    sink: ZenohSink,
    handle: &super::ZenohHandle,
) -> (PublisherHandle, FrameSender, super::ShmFrames) {
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
    (publisher, sender, frames)
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
    let Some(pool) = pool() else { return };
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
    let connect = format!("[\"{locator}\"]");
    let (sink, handle) = sink(peer("[]", &connect), 0, (3, "/zc/points", "zc"), pool);
    let (publisher, sender, frames) = publisher(sink, &handle);
    // A sensor without a topic gets heap buffers.
    assert!(
        frames
            .take_buffer(4, lidarxdp_core::layout::PointType::Autoware, 10)
            .is_none_or(|b| b.memory().is_none())
    );

    const N: u32 = 1_000;
    let data_len = N as usize * POINT_SIZE;
    let headroom = lidarxdp_core::ros2::points_prefix(
        0,
        "zc",
        lidarxdp_core::layout::PointType::Autoware,
        N as usize,
    )
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
        let mut points = frames
            .take_buffer(3, lidarxdp_core::layout::PointType::Autoware, N as usize)
            .expect("a lent buffer");
        assert!(
            points.memory().is_some(),
            "lent from the shared-memory pool"
        );
        for i in 0..N {
            points.push(pt(seq as u32, i));
        }
        assert_eq!(points.moves(), 0, "written where it was lent");
        let written =
            file_offset(points.as_bytes().as_ptr() as usize).expect("the decoder's mapping");
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

/// A subscriber maps the sink's announced segment when it subscribes, before any message, and
/// its first message comes through that mapping (no second mapping of the segment).
#[test]
fn a_subscriber_maps_the_pool_when_it_subscribes() {
    if alone("ros2_zenoh::tests::a_subscriber_maps_the_pool_when_it_subscribes") {
        return;
    }
    let Some(pool) = pool() else { return };
    let (sink, handle) = sink(
        peer("[\"tcp/127.0.0.1:0\"]", "[]"),
        7,
        (0, "/pm/points", "pm"),
        pool.clone(),
    );
    let (_, segment) = pool.segment().expect("the pool's segment");
    let path = format!("/dev/shm/{segment}.zenoh");
    assert_eq!(mappings_of(&path), 1, "the sink's own mapping of {path}");
    let locator = handle.locators()[0].clone();
    let connect = format!("[\"{locator}\"]");
    let sub = lidarxdp_client::zenoh::ZenohSubscriber::open(
        &peer("[]", &connect),
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
    let (publisher, sender, frames) = publisher(sink, &handle);
    let t0 = Instant::now();
    let frame = loop {
        assert!(t0.elapsed() < Duration::from_secs(20), "no frame arrived");
        let mut points = frames
            .take_buffer(0, lidarxdp_core::layout::PointType::Autoware, 100)
            .expect("a lent buffer");
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

/// The pool's use ([`ShmPool::usage`]): the bytes of the chunks still referenced, the rest
/// free; a chunk every holder dropped leaves `used` at the next reading (which collects it).
#[test]
fn pool_usage_counts_the_chunks_still_referenced() {
    if alone("ros2_zenoh::tests::pool_usage_counts_the_chunks_still_referenced") {
        return;
    }
    let Some(pool) = pool() else { return };
    const POOL: u64 = 2 << 20;
    assert_eq!(pool.usage(), (0, POOL));
    let chunk = |bytes: usize| {
        pool.provider
            .alloc((bytes, zenoh::shm::AllocAlignment::new(3).unwrap()))
            .with_policy::<zenoh::shm::GarbageCollect>()
            .wait()
            .unwrap()
    };
    let a = chunk(4096);
    let b = chunk(65536);
    assert_eq!(pool.usage(), (69632, POOL - 69632));
    drop(a);
    assert_eq!(pool.usage(), (65536, POOL - 65536));
    // Shared (immutable, as the sink puts it): referenced until the last clone goes.
    let b: zenoh::shm::ZShm = b.into();
    let b2 = b.clone();
    drop(b);
    assert_eq!(pool.usage(), (65536, POOL - 65536));
    drop(b2);
    assert_eq!(pool.usage(), (0, POOL));
}
