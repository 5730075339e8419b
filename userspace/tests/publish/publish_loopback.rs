//! Publisher ↔ subscriber over loopback TCP: ordering, byte-exactness, slow-subscriber
//! isolation, disconnects, limits, shutdown.

use std::io::Read;
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use lidarxdp::publish::{
    BufferPool, FrameSender, FrameSink, Publisher, PublisherConfig, PublisherHandle, SharedFrame,
};
use lidarxdp_client::Subscriber;
use lidarxdp_core::frame::{Frame, FrameHeader};
use lidarxdp_core::point::PointXYZIRCAEDT;
use lidarxdp_core::protocol::{self, FRAME_HEADER_LEN};

fn header(seq: u64, n: usize) -> FrameHeader {
    FrameHeader {
        sensor_id: 7,
        sequence: seq,
        start_ns: 1_700_000_000_000_000_000 + seq * 100_000_000,
        host_ns: 1_700_000_000_000_500_000 + seq * 100_000_000,
        packets_received: n as u32 / 384 + 1,
        packets_expected: n as u32 / 384 + 2,
        packets_malformed: (seq % 3) as u32,
        ..Default::default()
    }
}

fn point(seq: u64, j: usize) -> PointXYZIRCAEDT {
    PointXYZIRCAEDT {
        x: seq as f32 * 1000.0 + j as f32,
        y: -(j as f32) * 0.25,
        z: 0.5,
        intensity: (j * 7 % 256) as u8,
        return_type: (j % 11) as u8,
        channel: (j % 128) as u16,
        azimuth: (j % 3600) as f32 * 0.001_745,
        elevation: -0.26,
        distance: 1.0 + (j % 1000) as f32 * 0.1,
        time_stamp: (j as u32).wrapping_mul(2_304) ^ seq as u32,
    }
}

fn frame(seq: u64, n: usize) -> Frame {
    Frame {
        header: header(seq, n),
        points: (0..n).map(|j| point(seq, j)).collect(),
    }
}

fn wire_bytes(f: &Frame) -> Vec<u8> {
    let mut v = Vec::new();
    protocol::encode_frame_header(
        &f.header,
        lidarxdp_core::layout::PointType::Autoware,
        f.points.len() as u32,
        &mut v,
    );
    v.extend_from_slice(bytemuck::cast_slice(f.points.autoware()));
    v
}

fn wait_for(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn spawn(queue_depth: usize, max_subscribers: usize) -> (PublisherHandle, FrameSender) {
    let cfg = PublisherConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        max_subscribers,
        queue_depth,
        frame_queue: 32,
        ..PublisherConfig::default()
    };
    Publisher::spawn(cfg, Arc::new(BufferPool::new(8))).expect("spawn publisher")
}

const SIZES: [usize; 20] = [
    0, 1, 2, 31, 100, 30_000, 0, 384, 29_999, 5, 1, 12_345, 30_000, 0, 7, 1_000, 2_048, 3, 30_000,
    64,
];

#[test]
fn three_subscribers_receive_every_frame_in_order_byte_exact() {
    let (publisher, sender) = spawn(32, 16);
    let addr = publisher.local_addr();
    assert_ne!(addr.port(), 0);
    let frames: Vec<Frame> = SIZES
        .iter()
        .enumerate()
        .map(|(i, &n)| frame(i as u64, n))
        .collect();

    let mut subs: Vec<Subscriber> = (0..3)
        .map(|_| Subscriber::connect(addr).expect("connect"))
        .collect();
    for s in &subs {
        let h = s.hello();
        assert_eq!(h.queue_depth, 32);
        assert_eq!(h.max_subscribers, 16);
        assert!(h.server_name.starts_with("lidarxdp/"), "{h:?}");
    }
    // A fourth, raw reader checks the bytes on the wire.
    let mut raw = TcpStream::connect(addr).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    wait_for("4 subscribers", Duration::from_secs(5), || {
        publisher.counters().subscribers == 4
    });

    let readers: Vec<_> = subs
        .drain(..)
        .map(|mut s| {
            let expected = frames.clone();
            std::thread::spawn(move || {
                s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                for want in &expected {
                    let got = s.next_frame().expect("frame").expect("not closed");
                    assert_eq!(got.header(), &want.header);
                    assert_eq!(got.points().len(), want.points.len());
                    assert_eq!(
                        got.payload_bytes(),
                        bytemuck::cast_slice::<_, u8>(want.points.autoware())
                    );
                    assert_eq!(got.points(), want.points.autoware());
                }
                assert_eq!(s.sequence_gaps(), 0);
                // After shutdown: clean end of stream.
                assert!(s.next_frame().expect("clean close").is_none());
            })
        })
        .collect();

    for f in &frames {
        assert!(sender.send(f.clone()), "input queue full");
    }
    assert_eq!(sender.counters().frames_queued, 20);
    assert_eq!(sender.counters().frames_dropped_input_full, 0);

    // Raw stream: hello (variable: server time), then exactly the encoded frames.
    let mut prefix = [0u8; protocol::PREFIX_LEN];
    raw.read_exact(&mut prefix).unwrap();
    let hello_len = u32::from_le_bytes(prefix[8..12].try_into().unwrap()) as usize;
    let mut hello = prefix.to_vec();
    hello.resize(hello_len, 0);
    raw.read_exact(&mut hello[protocol::PREFIX_LEN..]).unwrap();
    assert!(matches!(
        protocol::parse_header(&hello),
        Ok(protocol::Parsed::Complete { .. })
    ));
    let expected: Vec<u8> = frames.iter().flat_map(wire_bytes).collect();
    let mut got = vec![0u8; expected.len()];
    raw.read_exact(&mut got).unwrap();
    assert!(got == expected, "wire bytes differ");

    // Readers finish their 20 frames, then block until shutdown closes their connection.
    wait_for("80 frames sent", Duration::from_secs(10), || {
        publisher.counters().frames_sent == 80
    });
    let c = publisher.shutdown().expect("clean shutdown");
    let frame_bytes: u64 = SIZES
        .iter()
        .map(|&n| (FRAME_HEADER_LEN + 32 * n) as u64)
        .sum();
    assert_eq!(c.frames_in, 20);
    assert_eq!(c.frames_sent, 80);
    assert_eq!(c.frames_dropped_queue_full, 0);
    assert_eq!(c.bytes_sent, 4 * (frame_bytes + hello_len as u64));
    assert_eq!(c.subscribers, 0);
    assert_eq!(c.subscribers_accepted, 4);
    for r in readers {
        r.join().unwrap();
    }
    // Raw reader also sees EOF right at the message boundary.
    let mut rest = Vec::new();
    raw.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty());
}

#[test]
fn a_subscriber_that_never_reads_does_not_block_the_others() {
    const N: u64 = 30;
    const POINTS: usize = 200_000; // 6.4 MB per frame: far more than the socket buffers hold
    let (publisher, sender) = spawn(2, 16);
    let addr = publisher.local_addr();
    let stalled = TcpStream::connect(addr).unwrap(); // connected, never read (until the end)
    let (tx, rx) = mpsc::channel::<(usize, u64)>();
    let fast: Vec<_> = (0..2)
        .map(|k| {
            let mut s = Subscriber::connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let tx = tx.clone();
            std::thread::spawn(move || {
                for seq in 0..N {
                    let f = s.next_frame().unwrap().unwrap();
                    assert_eq!(f.header().sequence, seq);
                    assert_eq!(f.points().len(), POINTS);
                    assert_eq!(f.points()[POINTS - 1], point(seq, POINTS - 1));
                    tx.send((k, seq)).unwrap();
                }
                assert_eq!(s.sequence_gaps(), 0);
            })
        })
        .collect();
    wait_for("3 subscribers", Duration::from_secs(5), || {
        publisher.counters().subscribers == 3
    });
    let start = Instant::now();
    for seq in 0..N {
        assert!(sender.send(frame(seq, POINTS)));
        // Lock-step with the fast subscribers: each frame arrives before the next is pushed,
        // so only the stalled subscriber's queue can overflow.
        for _ in 0..2 {
            let (_, got) = rx
                .recv_timeout(Duration::from_secs(20))
                .expect("fast subscriber progress");
            assert_eq!(got, seq);
        }
    }
    for f in fast {
        f.join().unwrap();
    }
    let elapsed = start.elapsed();
    let c = publisher.counters();
    assert_eq!(c.frames_in, N);
    assert!(
        c.frames_dropped_queue_full > 0,
        "stalled subscriber never overflowed: {c:?}"
    );
    assert!(c.frames_dropped_queue_full < N, "{c:?}");
    eprintln!("{N} frames of {POINTS} points to 2 readers + 1 stalled in {elapsed:?}; {c:?}");

    // Now the stalled subscriber reads: a valid stream, newest frame last, gaps = drops.
    let mut late = Subscriber::from_stream(stalled).unwrap();
    late.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut seqs = Vec::new();
    loop {
        let f = late.next_frame().unwrap().unwrap();
        assert_eq!(
            f.points()[POINTS / 2],
            point(f.header().sequence, POINTS / 2)
        );
        seqs.push(f.header().sequence);
        if f.header().sequence == N - 1 {
            break;
        }
    }
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    assert_eq!(
        late.sequence_gaps(),
        c.frames_dropped_queue_full,
        "received {seqs:?}"
    );
    assert_eq!(seqs.len() as u64 + c.frames_dropped_queue_full, N);
    let t = Instant::now();
    let c = publisher.shutdown().unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "shutdown took {:?}",
        t.elapsed()
    );
    assert_eq!(c.frames_sent, 2 * N + seqs.len() as u64);
    assert!(late.next_frame().unwrap().is_none());
}

#[test]
fn shutdown_with_a_stalled_subscriber_joins_after_linger() {
    let cfg = PublisherConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        linger: Duration::from_millis(200),
        frame_queue: 4,
        ..PublisherConfig::default()
    };
    let (publisher, sender) = Publisher::spawn(cfg, Arc::new(BufferPool::new(8))).unwrap();
    let _stalled = TcpStream::connect(publisher.local_addr()).unwrap();
    wait_for("subscriber", Duration::from_secs(5), || {
        publisher.counters().subscribers == 1
    });
    for seq in 0..4 {
        assert!(sender.send(frame(seq, 200_000)));
    }
    wait_for("frames taken", Duration::from_secs(5), || {
        publisher.counters().frames_in == 4
    });
    let t = Instant::now();
    let c = publisher.shutdown().unwrap();
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(150) && took < Duration::from_secs(2),
        "shutdown took {took:?}"
    );
    assert_eq!(c.subscribers, 0);
    assert!(c.frames_sent < 4, "{c:?}");
}

#[test]
fn disconnects_are_noticed_and_limits_enforced() {
    let (publisher, sender) = spawn(4, 2);
    let addr = publisher.local_addr();
    let mut a = Subscriber::connect(addr).unwrap();
    let b = Subscriber::connect(addr).unwrap();
    wait_for("2 subscribers", Duration::from_secs(5), || {
        publisher.counters().subscribers == 2
    });
    // Third one is over max_subscribers: closed before any hello.
    let third = Subscriber::connect(addr);
    assert!(third.is_err(), "third subscriber accepted");
    wait_for("rejection counted", Duration::from_secs(5), || {
        publisher.counters().subscribers_rejected == 1
    });

    // An idle subscriber that hangs up is removed without any send.
    drop(b);
    wait_for("hang-up noticed", Duration::from_secs(5), || {
        let c = publisher.counters();
        c.subscribers == 1 && c.subscribers_disconnected == 1
    });
    // A frame sent to an idle publisher wakes it.
    assert!(sender.send(frame(0, 10)));
    a.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let f = a.next_frame().unwrap().unwrap();
    assert_eq!(f.points(), frame(0, 10).points.autoware());

    // The freed slot can be used again.
    let mut c2 = Subscriber::connect(addr).unwrap();
    c2.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    wait_for("2 subscribers again", Duration::from_secs(5), || {
        publisher.counters().subscribers == 2
    });
    assert!(sender.send(frame(1, 3)));
    assert_eq!(a.next_frame().unwrap().unwrap().header().sequence, 1);
    assert_eq!(c2.next_frame().unwrap().unwrap().header().sequence, 1);

    // Recycled buffer: both subscribers are done with frame 1.
    wait_for("frames sent", Duration::from_secs(5), || {
        publisher.counters().frames_sent == 3
    });
    let buf = sender.recycled_buffer().expect("recycled points buffer");
    assert!(buf.is_empty() && buf.capacity() >= 3);
    let c = publisher.shutdown().unwrap();
    assert_eq!(c.subscribers_accepted, 3);
    assert_eq!(c.subscribers_rejected, 1);
}

/// A sink that holds the publisher thread in its first `offer` until released (a decoder
/// burst meeting a busy publisher), and records the sequence of every frame offered.
struct GateSink {
    entered: mpsc::Sender<()>,
    release: Option<mpsc::Receiver<()>>,
    seen: Arc<std::sync::Mutex<Vec<u64>>>,
}

impl FrameSink for GateSink {
    fn name(&self) -> &str {
        "gate"
    }

    fn offer(&mut self, frame: &Arc<SharedFrame>, _now: Instant) {
        self.seen.lock().unwrap().push(frame.header().sequence);
        if let Some(r) = self.release.take() {
            self.entered.send(()).unwrap();
            r.recv().unwrap();
        }
    }
}

#[test]
fn input_queue_full_drops_and_counts_without_blocking() {
    let (entered_tx, entered) = mpsc::channel();
    let (release, release_rx) = mpsc::channel();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = GateSink {
        entered: entered_tx,
        release: Some(release_rx),
        seen: seen.clone(),
    };
    let cfg = PublisherConfig {
        frame_queue: 2,
        ..PublisherConfig::default()
    };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let (publisher, sender) = Publisher::spawn_on(
        listener,
        cfg,
        Arc::new(BufferPool::new(8)),
        vec![Box::new(sink)],
    )
    .unwrap();
    assert!(sender.send(frame(0, 1)));
    // The publisher thread is now held in the sink with frame 0: the queue fills.
    entered.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(sender.send(frame(1, 1)));
    assert!(sender.send(frame(2, 1)));
    assert_eq!(sender.queued(), 2);
    let rejected = sender.try_send(frame(3, 5)).unwrap_err();
    assert_eq!(rejected.header.sequence, 3);
    assert!(
        !sender.send(frame(4, 5)),
        "full: dropped, buffer to the pool"
    );
    let c = sender.counters();
    assert_eq!((c.frames_queued, c.frames_dropped_input_full), (3, 2));
    assert_eq!(publisher.counters().frames_dropped_input_full, 2);
    assert_eq!(publisher.counters().pool.returned, 1);
    release.send(()).unwrap();
    let c = publisher.shutdown().unwrap();
    assert_eq!(c.frames_in, 3, "every queued frame is published");
    assert_eq!(c.frames_queued, 3);
    assert_eq!(*seen.lock().unwrap(), [0, 1, 2]);
}

#[test]
fn ten_sensors_completing_at_once_are_all_delivered_at_depth_3() {
    // Issue 12: every sensor completes a frame at the same cut. A subscriber that keeps up
    // gets every frame of every sensor, even though a burst (10 frames of ~1 MB) is far more
    // than the queue depth of 3.
    const SENSORS: u16 = 10;
    const CUTS: u64 = 6;
    let cfg = PublisherConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        queue_depth: 3,
        frame_queue: 32,
        sensors: (0..SENSORS)
            .map(|id| protocol::SensorEntry {
                id,
                name: format!("vlp16-{id}"),
                model: "VLP16".into(),
            })
            .collect(),
        ..PublisherConfig::default()
    };
    let (publisher, sender) = Publisher::spawn(cfg, Arc::new(BufferPool::new(16))).unwrap();
    let mut sub = Subscriber::connect(publisher.local_addr()).unwrap();
    sub.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    wait_for("subscriber", Duration::from_secs(5), || {
        publisher.counters().subscribers == 1
    });
    let mut got = Vec::new();
    for cut in 0..CUTS {
        for sensor in 0..SENSORS {
            let mut f = frame(cut, 30_000);
            f.header.sensor_id = sensor;
            assert!(sender.send(f));
        }
        for _ in 0..SENSORS {
            let f = sub.next_frame().unwrap().unwrap();
            assert_eq!(f.points().len(), 30_000);
            got.push((f.header().sensor_id, f.header().sequence));
        }
    }
    let want: Vec<(u16, u64)> = (0..CUTS)
        .flat_map(|cut| (0..SENSORS).map(move |s| (s, cut)))
        .collect();
    assert_eq!(got, want, "every frame of every sensor, in arrival order");
    let c = publisher.shutdown().unwrap();
    assert_eq!(c.frames_dropped_queue_full, 0);
    assert_eq!(c.frames_sent, u64::from(SENSORS) * CUTS);
}
