//! Issue 5 acceptance: 16 subscribers of a real VLP-16 decoder — 14 fast, one that never reads,
//! one that reads one frame per second. The fast ones receive every frame, in order, byte-exact;
//! the decoder loses nothing and never waits; memory stays bounded (pool, queues, live frames);
//! the stalled one is disconnected after the stall timeout; the slow one sees only drops.

use std::net::TcpStream;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lidarxdp::offline::udp_payloads;
use lidarxdp::publish::{BufferPool, MAX_BATCH, Publisher, PublisherConfig};
use lidarxdp_client::Subscriber;
use lidarxdp_core::frame::Frame;
use lidarxdp_core::protocol::{self, SensorEntry};
use lidarxdp_core::sensor::{SensorConfig, SensorModel};

const PCAP: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/data/velodyne/vlp16/vlp16_dual_nebula_603pkt.pcap"
);
const CALIB: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/data/velodyne/vlp16/calibration/VLP16db.yaml"
);

/// A 64-bit FNV-style hash over the exact bytes (8 at a time; the tail byte-wise).
fn fnv(bytes: &[u8], mut h: u64) -> u64 {
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        h ^= u64::from_le_bytes(w.try_into().unwrap());
        h = h.wrapping_mul(0x100_0000_01b3).rotate_left(29);
    }
    for &b in words.remainder() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

/// Voluntary context switches of the calling thread so far: a call that blocks (lock, full
/// queue, blocking syscall) adds at least one; preemption by other threads does not.
fn voluntary_switches() -> i64 {
    // SAFETY: rusage is plain data, filled by the kernel for the calling thread.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: passes a pointer to a live rusage.
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) }, 0);
    ru.ru_nvcsw
}

fn wire_hash(f: &Frame) -> u64 {
    let mut hdr = Vec::new();
    protocol::encode_frame_header(
        &f.header,
        lidarxdp_core::layout::PointType::Autoware,
        f.points.len() as u32,
        &mut hdr,
    );
    fnv(
        bytemuck::cast_slice(f.points.autoware()),
        fnv(&hdr, 0xcbf2_9ce4_8422_2325),
    )
}

fn wait_for(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn sixteen_subscribers_one_stalled_one_slow() {
    const DEPTH: usize = 2;
    const POOL_CAP: usize = 8;
    const PASSES: usize = 18; // ~4 frames per pass of the capture
    let cfg = PublisherConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        max_subscribers: 16,
        queue_depth: DEPTH,
        // The slow subscriber below reads a frame a second: the stall timeout stays well above
        // that period plus a loaded 2-core machine's scheduling delay (at 1.5 s, a CI run with
        // the other publish tests beside it once took the slow one for stalled), and the
        // stalled one (which never reads) is still removed long before the end.
        stall_timeout: Duration::from_millis(3000),
        linger: Duration::from_millis(500),
        frame_queue: 8,
        sensors: vec![SensorEntry {
            id: 0,
            name: "front".into(),
            model: "VLP16".into(),
        }],
        ..PublisherConfig::default()
    };
    let pool = Arc::new(BufferPool::new(POOL_CAP));
    let (publisher, sender) = Publisher::spawn(cfg, pool.clone()).unwrap();
    let addr = publisher.local_addr();

    // 14 fast subscribers: (sequence, wire hash) of every frame until the clean close.
    let fast: Vec<_> = (0..14)
        .map(|_| {
            let mut s = Subscriber::connect(addr).unwrap();
            assert_eq!(s.hello().sensors[0].name, "front");
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            std::thread::spawn(move || {
                let mut got = Vec::new();
                while let Some(f) = s.next_frame().expect("fast subscriber read") {
                    let mut hdr = Vec::new();
                    protocol::encode_frame_header(
                        f.header(),
                        lidarxdp_core::layout::PointType::Autoware,
                        f.points().len() as u32,
                        &mut hdr,
                    );
                    let h = fnv(f.payload_bytes(), fnv(&hdr, 0xcbf2_9ce4_8422_2325));
                    got.push((f.header().sequence, h));
                }
                (got, s.sequence_gaps())
            })
        })
        .collect();
    // One that never reads.
    let stalled = TcpStream::connect(addr).unwrap();
    // One that reads one frame per second.
    let mut slow = Subscriber::connect(addr).unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    // It reads one frame per second while the stream runs, then drains up to the last frame
    // (whose sequence it is told), so it sees the frames dropped for it meanwhile as gaps.
    let (last_tx, last_rx) = mpsc::channel::<u64>();
    let slow_thread = std::thread::spawn(move || {
        let mut seqs = Vec::new();
        let last = loop {
            let f = slow.next_frame().expect("slow read").expect("not closed");
            assert!(f.points().len() > 10_000);
            seqs.push(f.header().sequence);
            std::thread::sleep(Duration::from_secs(1));
            if let Ok(last) = last_rx.try_recv() {
                break last;
            }
        };
        while seqs.last() != Some(&last) {
            let f = slow.next_frame().expect("slow read").expect("not closed");
            seqs.push(f.header().sequence);
        }
        (seqs, slow.sequence_gaps())
    });
    wait_for("16 subscribers", Duration::from_secs(5), || {
        publisher.counters().subscribers == 16
    });

    // The decoder thread: the real VLP-16 pipeline, point buffers from the publisher's pool,
    // frames paced at 20 Hz.
    let payloads: Vec<Vec<u8>> = udp_payloads(std::path::Path::new(PCAP))
        .unwrap()
        .map(|d| d.unwrap().payload)
        .collect();
    let expected = Arc::new(Mutex::new(Vec::<(u64, u64)>::new()));
    let exp2 = expected.clone();
    let decoder = std::thread::spawn(move || {
        let mut p =
            lidarxdp::calibration::pipeline(&SensorConfig::new(0, SensorModel::Vlp16, CALIB))
                .unwrap();
        p.set_buffer_source(pool);
        let mut out = Vec::new();
        let mut blocked = 0i64;
        let mut pushed = 0u64;
        for _ in 0..PASSES {
            for pl in &payloads {
                p.push(pl, lidarxdp::sys::clock::host_time(), &mut out);
                pushed += 1;
                for f in out.drain(..) {
                    exp2.lock()
                        .unwrap()
                        .push((f.header.sequence, wire_hash(&f)));
                    let before = voluntary_switches();
                    assert!(sender.send(f), "input queue full: the decoder lost a frame");
                    blocked += voluntary_switches() - before;
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
        (*p.counters(), pushed, blocked, sender.counters())
    });
    let (dc, pushed, blocked, sc) = decoder.join().unwrap();
    let expected = expected.lock().unwrap().clone();
    let n = expected.len() as u64;
    eprintln!("decoder: {dc:?}, {pushed} payloads");
    assert_eq!(dc.packets, pushed);
    // The capture loops: each loop steps the sensor time back (a restart: 2 packets dropped).
    assert_eq!(dc.decoded + dc.ignored + dc.time_jumps, pushed, "{dc:?}");
    assert_eq!(dc.frames, n);
    assert!(n >= 60, "only {n} frames");
    assert_eq!((sc.frames_queued, sc.frames_dropped_input_full), (n, 0));
    assert_eq!(blocked, 0, "FrameSender::send blocked");
    last_tx.send(n - 1).unwrap();
    let (seqs, slow_gaps) = slow_thread.join().unwrap();
    wait_for(
        "stalled subscriber removed",
        Duration::from_secs(10),
        || publisher.counters().subscribers_stalled == 1,
    );
    wait_for("fast subscribers served", Duration::from_secs(10), || {
        publisher.counters().frames_sent >= 14 * n
    });
    let before = publisher.counters();
    let c = publisher.shutdown().unwrap();
    eprintln!("publisher: {c:?}");
    drop(stalled);

    for t in fast {
        let (got, gaps) = t.join().unwrap();
        assert_eq!(gaps, 0);
        assert_eq!(
            got, expected,
            "fast subscriber: every frame, in order, byte-exact"
        );
    }
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    assert!(slow_gaps > 0, "slow subscriber saw no drop: {seqs:?}");
    assert_eq!(seqs.len() as u64 + slow_gaps, n, "{seqs:?}");

    assert_eq!(c.frames_in, n);
    assert_eq!(c.frames_dropped_input_full, 0);
    assert_eq!(c.subscribers_stalled, 1);
    assert_eq!(c.protocol_errors, 0);
    assert!(c.frames_dropped_queue_full >= slow_gaps, "{c:?}");
    // Memory bounds: queues never above the watermark, the pool never above its cap, and the
    // frames alive bounded by the stalled + slow subscribers' backlog plus the fast window.
    assert_eq!(before.queue_high_water, DEPTH as u64);
    assert!(c.pool.high_water <= POOL_CAP as u64, "{c:?}");
    assert!(c.pool.len <= POOL_CAP as u64);
    let bound = 3 * (MAX_BATCH + DEPTH) as u64 + 1;
    assert!(
        c.frames_alive_high_water <= bound,
        "{} frames alive > {bound}",
        c.frames_alive_high_water
    );
    assert_eq!(c.frames_alive, 0, "every buffer released after shutdown");
    // The decoder reused pooled buffers instead of allocating.
    assert!(c.pool.hits >= n / 2, "{c:?}");
}
