//! Replays a real capture to a loopback UDP socket and checks every datagram byte for byte.
//! Sends to 127.0.0.1 only.

use std::fs::File;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::time::Duration;

use lidarxdp::replay::{Rate, ReplayConfig, replay};

const VLP16: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/data/velodyne/vlp16/vlp16_strongest_84pkt.pcap"
);

/// UDP payloads of the capture, parsed independently of `lidarxdp::replay`: fixed Ethernet (14)
/// + IPv4 (IHL) + UDP (8) offsets, as in this capture.
fn expected_payloads() -> Vec<(Duration, Vec<u8>)> {
    let mut r =
        pcap_file::pcap::PcapReader::new(File::open(VLP16).expect("capture present")).unwrap();
    let mut v = Vec::new();
    while let Some(p) = r.next_packet() {
        let p = p.unwrap();
        let d = &p.data;
        assert_eq!(&d[12..14], &[0x08, 0x00], "IPv4 ethertype");
        let ihl = usize::from(d[14] & 0x0f) * 4;
        let udp = 14 + ihl;
        let len = usize::from(u16::from_be_bytes([d[udp + 4], d[udp + 5]])) - 8;
        v.push((p.timestamp, d[udp + 8..udp + 8 + len].to_vec()));
    }
    v
}

fn receiver() -> UdpSocket {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    // Room for the whole burst even if the receiving thread is not scheduled: as root,
    // SO_RCVBUFFORCE passes net.core.rmem_max; otherwise SO_RCVBUF (capped) is tried.
    let size: libc::c_int = 8 << 20;
    for opt in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
        // SAFETY: passes a pointer to a live c_int and its exact size.
        let r = unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&raw const size).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r == 0 {
            break;
        }
    }
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    // Turn on kernel receive timestamps (the first SIOCGSTAMPNS enables them; ENOENT now).
    let _ = kernel_rx_time(&s);
    s
}

/// Linux `SIOCGSTAMPNS`: kernel arrival time of the last datagram read from the socket.
const SIOCGSTAMPNS: libc::c_ulong = 0x8907;

/// Arrival time stamped by the kernel, independent of when the reading thread got scheduled.
fn kernel_rx_time(s: &UdpSocket) -> Option<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: SIOCGSTAMPNS writes one `timespec` through the pointer, which is live and valid.
    let r = unsafe { libc::ioctl(s.as_raw_fd(), SIOCGSTAMPNS, &raw mut ts) };
    (r == 0).then(|| Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

fn receive(sock: &UdpSocket, n: usize) -> Vec<(Duration, Vec<u8>)> {
    let mut buf = vec![0u8; 65536];
    (0..n)
        .map(|i| {
            let len = sock
                .recv(&mut buf)
                .unwrap_or_else(|e| panic!("datagram {i} of {n}: {e}"));
            let at = kernel_rx_time(sock).expect("kernel receive timestamp");
            (at, buf[..len].to_vec())
        })
        .collect()
}

#[test]
fn max_rate_replay_delivers_all_84_datagrams_byte_exact() {
    let expected = expected_payloads();
    assert_eq!(expected.len(), 84);
    let rx = receiver();
    let to = rx.local_addr().unwrap();
    assert!(to.ip().is_loopback());
    let reader = std::thread::spawn(move || receive(&rx, 84));
    let stats = replay(&ReplayConfig {
        pcap: VLP16.into(),
        to,
        rate: Rate::Max,
        loops: 1,
        udp_port_filter: None,
    })
    .unwrap();
    let got = reader.join().unwrap();
    assert_eq!(stats.sent, 84);
    assert_eq!(stats.bytes, 84 * 1206);
    assert_eq!(stats.send_errors, 0);
    assert_eq!(stats.skipped, 0);
    assert_eq!(got.len(), 84);
    for (i, ((_, g), (_, e))) in got.iter().zip(&expected).enumerate() {
        assert_eq!(g.len(), 1206, "datagram {i}");
        assert!(g == e, "datagram {i} differs");
    }
}

#[test]
fn port_filter_and_loops() {
    let rx = receiver();
    let to = rx.local_addr().unwrap();
    // The capture's destination port is 2368: a filter on another port sends nothing.
    let none = replay(&ReplayConfig {
        pcap: VLP16.into(),
        to,
        rate: Rate::Max,
        loops: 1,
        udp_port_filter: Some(2369),
    })
    .unwrap();
    assert_eq!((none.sent, none.skipped), (0, 84));
    let reader = std::thread::spawn(move || receive(&rx, 168));
    let two = replay(&ReplayConfig {
        pcap: VLP16.into(),
        to,
        rate: Rate::Max,
        loops: 2,
        udp_port_filter: Some(2368),
    })
    .unwrap();
    assert_eq!(two.sent, 168);
    let got = reader.join().unwrap();
    let expected = expected_payloads();
    for (i, (_, g)) in got.iter().enumerate() {
        assert!(g == &expected[i % 84].1, "datagram {i}");
    }
}

/// Fixed-rate and recorded-timing pacing hold their schedule: never early (hard bounds, on the
/// sender's clock and on kernel arrival stamps), and not grossly late (loose upper bounds: a
/// loaded 2-core CI machine can preempt the sender).
#[test]
fn pacing_follows_the_schedule() {
    let expected = expected_payloads();
    // 84 datagrams at 2000 pps: the last is due 83/2000 s = 41.5 ms after the first.
    let recorded: Vec<Duration> = expected.iter().map(|(t, _)| *t - expected[0].0).collect();
    let fixed: Vec<Duration> = (0..84u64).map(|i| Duration::from_micros(i * 500)).collect();
    for (rate, dues) in [(Rate::Pps(2000), fixed), (Rate::Realtime, recorded)] {
        let due = dues[83];
        let rx = receiver();
        let to = rx.local_addr().unwrap();
        let reader = std::thread::spawn(move || receive(&rx, 84));
        let s = replay(&ReplayConfig {
            pcap: VLP16.into(),
            to,
            rate,
            loops: 1,
            udp_port_filter: None,
        })
        .unwrap();
        let got = reader.join().unwrap();
        // Kernel arrival stamps and `start_unix_ns` are both CLOCK_REALTIME.
        let before = Duration::from_nanos(s.start_unix_ns);
        let span = got[83].0 - got[0].0;
        let last = got[83].0 - before;
        eprintln!(
            "{rate}: last due at {due:?}, arrived at {last:?}; arrival span {span:?}, sender elapsed {:?}, late {}, max lag {:?}",
            s.elapsed, s.late, s.max_lag
        );
        assert_eq!(s.sent, 84);
        assert!(
            s.elapsed >= due,
            "{rate}: elapsed {:?} < {due:?}",
            s.elapsed
        );
        assert!(
            s.elapsed < due + Duration::from_secs(1),
            "{rate}: elapsed {:?}",
            s.elapsed
        );
        // Never early: each datagram arrives no sooner than its due time after the start. (The
        // span alone proves little: the first datagram may be delayed by preemption.)
        let mut lateness = Vec::new();
        for (i, ((at, _), d)) in got.iter().zip(&dues).enumerate() {
            let t = *at - before;
            assert!(
                t + Duration::from_micros(100) >= *d,
                "{rate}: datagram {i} at {t:?}, due {d:?}"
            );
            lateness.push(t.saturating_sub(*d));
        }
        // Not bunched up late either (soft: the median, on a possibly loaded machine).
        lateness.sort();
        assert!(
            lateness[42] < due / 4,
            "{rate}: median lateness {:?}",
            lateness[42]
        );
        assert!(
            lateness[83] < Duration::from_secs(1),
            "{rate}: max lateness {:?}",
            lateness[83]
        );
        assert!(span < due + Duration::from_secs(1), "{rate}: span {span:?}");
    }
}
