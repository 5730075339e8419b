//! A subscriber that disconnects in the middle of a frame and reconnects gets whole frames
//! again, byte-exact, while another subscriber is not disturbed.

use std::io::Read;
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lidarxdp::publish::{BufferPool, Publisher, PublisherConfig};
use lidarxdp_client::Subscriber;
use lidarxdp_core::frame::{Frame, FrameHeader};
use lidarxdp_core::point::PointXYZIRCAEDT;

fn frame(seq: u64, n: usize) -> Frame {
    Frame {
        header: FrameHeader {
            sequence: seq,
            start_ns: 5_000 + seq,
            packets_received: 7,
            packets_expected: 7,
            ..Default::default()
        },
        points: (0..n)
            .map(|j| PointXYZIRCAEDT {
                x: (seq * 1_000_000 + j as u64) as f32,
                channel: (j % 32) as u16,
                time_stamp: j as u32,
                ..Default::default()
            })
            .collect(),
    }
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn disconnect_mid_frame_then_reconnect() {
    const N: usize = 400_000; // 12.8 MB: more than both socket buffers hold, so still being written when the reader leaves
    let cfg = PublisherConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        sndbuf: 0, // kernel autotuning: the frame cannot sit whole in the socket buffer
        ..PublisherConfig::default()
    };
    let (publisher, sender) = Publisher::spawn(
        PublisherConfig {
            frame_queue: 8,
            ..cfg
        },
        Arc::new(BufferPool::new(8)),
    )
    .unwrap();
    let addr = publisher.local_addr();
    let mut steady = Subscriber::connect(addr).unwrap();
    steady
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut leaving = TcpStream::connect(addr).unwrap();
    wait_for("2 subscribers", || publisher.counters().subscribers == 2);
    assert!(sender.send(frame(0, N)));
    // Read the hello and the first 100 kB of frame 0, then vanish mid-frame.
    let mut part = vec![0u8; 100_000];
    leaving
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    leaving.read_exact(&mut part).unwrap();
    assert_eq!(&part[..4], b"LXDP");
    drop(leaving);
    let got = steady.next_frame().unwrap().unwrap();
    assert_eq!(got.points(), frame(0, N).points.autoware());
    wait_for("disconnect noticed", || {
        publisher.counters().subscribers_disconnected == 1
    });

    // Back again: a clean stream from a message boundary, every later frame whole.
    let mut back = Subscriber::connect(addr).unwrap();
    back.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    wait_for("2 subscribers again", || {
        publisher.counters().subscribers == 2
    });
    for seq in 1..4 {
        assert!(sender.send(frame(seq, N / (seq as usize))));
    }
    for seq in 1..4 {
        let want = frame(seq, N / (seq as usize));
        for s in [&mut steady, &mut back] {
            let got = s.next_frame().unwrap().unwrap();
            assert_eq!(got.header(), &want.header);
            assert_eq!(got.points(), want.points.autoware());
        }
    }
    assert_eq!(back.sequence_gaps(), 0);
    assert_eq!(steady.sequence_gaps(), 0);
    let c = publisher.shutdown().unwrap();
    assert_eq!(c.frames_sent, 1 + 3 + 3);
    assert_eq!(c.subscribers_accepted, 3);
    assert_eq!(c.frames_dropped_queue_full, 0);
    assert_eq!(c.frames_alive, 0);
}
