//! Disconnects in the middle of a frame must not kill the process with SIGPIPE, even where
//! SIGPIPE has its default action (a C host program, or a Rust binary with
//! `#[unix_sigpipe = "sig_dfl"]`). Own test binary: it changes a process-wide setting.
//!
//! A regression guard: the protection is `MSG_NOSIGNAL` on every send. On this kernel these
//! scenarios end with `ECONNRESET` or a cancelled send rather than `EPIPE`, so they also pass
//! without it; they catch a change that turns them into a raised signal.

use std::io::Read;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lidarxdp::publish::{BufferPool, Publisher, PublisherConfig};
use lidarxdp_core::frame::{Frame, FrameHeader};
use lidarxdp_core::point::PointXYZIRCAEDT;

#[test]
fn peer_reset_mid_frame_is_a_disconnect_not_sigpipe() {
    // SAFETY: sets the default disposition of SIGPIPE; no handler code is involved.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cfg = PublisherConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..PublisherConfig::default()
    };
    let (publisher, sender) = Publisher::spawn(cfg, Arc::new(BufferPool::new(8))).unwrap();
    let mut s = TcpStream::connect(publisher.local_addr()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while publisher.counters().subscribers != 1 {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(2));
    }
    for seq in 0..4 {
        let points = vec![
            PointXYZIRCAEDT {
                x: 1.0,
                ..Default::default()
            };
            500_000
        ];
        assert!(sender.send(Frame {
            header: FrameHeader {
                sequence: seq,
                ..Default::default()
            },
            points: points.into()
        }));
    }
    // Read a little so the send is under way, then reset the connection (SO_LINGER 0 + close).
    let mut buf = [0u8; 4096];
    s.read_exact(&mut buf).unwrap();
    let lin = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: passes a pointer to a live `linger` and its exact size.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&raw const lin).cast(),
            size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0);
    drop(s);
    let deadline = Instant::now() + Duration::from_secs(5);
    while publisher.counters().subscribers_disconnected != 1 {
        assert!(Instant::now() < deadline, "{:?}", publisher.counters());
        std::thread::sleep(Duration::from_millis(2));
    }
    let c = publisher.shutdown().unwrap();
    assert_eq!(c.subscribers, 0);
    assert!(c.frames_sent < 4, "{c:?}");
}

#[test]
fn forced_close_of_a_stalled_subscriber_is_not_sigpipe() {
    // SAFETY: sets the default disposition of SIGPIPE; no handler code is involved.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cfg = PublisherConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        linger: Duration::from_millis(50),
        // Kernel autotuning (a few MB), so the 16 MB frame cannot fit in the socket buffer.
        sndbuf: 0,
        ..PublisherConfig::default()
    };
    let (publisher, sender) = Publisher::spawn(cfg, Arc::new(BufferPool::new(8))).unwrap();
    let _stalled = TcpStream::connect(publisher.local_addr()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while publisher.counters().subscribers != 1 {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(2));
    }
    let points = vec![PointXYZIRCAEDT::default(); 500_000];
    assert!(sender.send(Frame {
        header: FrameHeader::default(),
        points: points.into()
    }));
    std::thread::sleep(Duration::from_millis(100)); // the send is now stuck on a full socket
    // Forced close after the linger time: our own shutdown(SHUT_RDWR) makes the pending send fail.
    let c = publisher.shutdown().unwrap();
    assert_eq!((c.subscribers, c.frames_sent), (0, 0));
}
