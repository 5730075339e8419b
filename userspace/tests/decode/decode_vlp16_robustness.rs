//! Damaged input and timeouts on real VLP-16 packets (`vlp16_strongest_84pkt.pcap`).

use std::path::Path;

use lidarxdp::offline::{UdpDatagram, udp_payloads};
use lidarxdp_core::frame::Frame;
use lidarxdp_core::sensor::{DecodeCounters, SensorConfig, SensorModel};

const DIR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/data/velodyne/vlp16/"
);

fn cfg() -> SensorConfig {
    SensorConfig::new(
        1,
        SensorModel::Vlp16,
        format!("{DIR}calibration/VLP16db.yaml"),
    )
}

fn packets() -> Vec<UdpDatagram> {
    udp_payloads(Path::new(&format!("{DIR}vlp16_strongest_84pkt.pcap")))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn run(input: &[(Vec<u8>, u64)]) -> (Vec<Frame>, DecodeCounters) {
    let mut p = lidarxdp::calibration::pipeline(&cfg()).unwrap();
    let mut out = Vec::new();
    for (payload, t) in input {
        p.push(payload, *t, &mut out);
    }
    p.flush(&mut out);
    (out, *p.counters())
}

#[test]
fn malformed_packets_are_counted_and_do_not_disturb_the_frame() {
    let pk = packets();
    let clean: Vec<(Vec<u8>, u64)> = pk.iter().map(|d| (d.payload.clone(), d.ts_ns)).collect();
    let (good, gc) = run(&clean);

    // Inject, after packet 10 (frame 0 in progress): a truncated packet (1205 B), a padded one
    // (1207 B) and one whose block 5 flag is corrupted, all copies of real packet 11.
    let src = &pk[11].payload;
    let truncated = src[..1205].to_vec();
    let mut padded = src.clone();
    padded.push(0);
    let mut bad_flag = src.clone();
    bad_flag[500] = 0x00;
    let t = pk[10].ts_ns;
    let mut dirty = clean.clone();
    dirty.splice(11..11, [(truncated, t), (padded, t), (bad_flag, t)]);
    let (frames, c) = run(&dirty);

    assert_eq!(
        (c.packets, c.decoded, c.malformed, c.ignored),
        (87, 84, 3, 0)
    );
    assert_eq!((c.frames, c.points), (gc.frames, gc.points));
    assert_eq!(frames.len(), good.len());
    for (i, (a, b)) in frames.iter().zip(&good).enumerate() {
        assert_eq!(a.points, b.points, "frame {i} points");
        let mut h = a.header;
        assert_eq!(h.packets_malformed, if i == 0 { 3 } else { 0 });
        h.packets_malformed = 0;
        assert_eq!(h, b.header, "frame {i} header");
    }
}

#[test]
fn fuzzed_packets_never_panic() {
    let pk = packets();
    let mut p = lidarxdp::calibration::pipeline(&cfg()).unwrap();
    let mut out = Vec::new();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for round in 0..3000u64 {
        let mut buf = pk[(rnd() % 84) as usize].payload.clone();
        match round % 4 {
            // Flip a few bytes anywhere (flags, azimuths, return mode, distances).
            0 | 1 => {
                for _ in 0..(rnd() % 8) {
                    let i = (rnd() % 1206) as usize;
                    buf[i] = rnd() as u8;
                }
            }
            // Arbitrary length.
            2 => buf.resize((rnd() % 1400) as usize, rnd() as u8),
            // Random bytes with valid flags.
            _ => {
                for b in buf.iter_mut() {
                    *b = rnd() as u8;
                }
                for blk in 0..12 {
                    buf[blk * 100] = 0xFF;
                    buf[blk * 100 + 1] = 0xEE;
                }
            }
        }
        // Host time mostly increasing, sometimes jumping back or far ahead.
        let host = 1_000_000_000_000 + round * 1_000_000 + (rnd() % 3) * 500_000_000;
        p.push(&buf, host, &mut out);
        if round % 100 == 0 {
            p.poll_timeout(host + 300_000_000, &mut out);
        }
    }
    p.flush(&mut out);
    let c = *p.counters();
    assert_eq!(c.packets, 3000);
    assert_eq!(c.packets, c.accounted());
    assert_eq!(c.frames, out.len() as u64);
    assert_eq!(
        c.points,
        out.iter().map(|f| f.points.len() as u64).sum::<u64>()
    );
    let (min, max) = SensorModel::Vlp16.datasheet_range_m();
    assert!(out.iter().all(|f| {
        f.points
            .autoware()
            .iter()
            .all(|p| p.distance > min && p.distance < max)
    }));
}

#[test]
fn frame_timeout_closes_the_frame_via_poll_timeout() {
    let pk = packets();
    let mut p = lidarxdp::calibration::pipeline(&cfg()).unwrap();
    let mut out = Vec::new();
    // Packets 0..10 of frame 0 (no cut among them), then the sensor goes silent.
    for d in &pk[..10] {
        p.push(&d.payload, d.ts_ns, &mut out);
        p.poll_timeout(d.ts_ns, &mut out);
    }
    assert!(out.is_empty());
    let last = pk[9].ts_ns;
    p.poll_timeout(last + 200_000_000, &mut out); // exactly the timeout: still open
    assert!(out.is_empty());
    p.poll_timeout(last + 200_000_001, &mut out);
    assert_eq!(out.len(), 1);
    let f = &out[0];
    // Packets 0-9 hold 375+381+378+377+353+378+378+362+372+375 = 3,729 points.
    assert_eq!(f.points.len(), 3_729);
    assert_eq!((f.header.sequence, f.header.packets_received), (0, 10));
    // Partial: 50 packets missing before (see decode_vlp16_strongest) and the rest of the
    // turn after packet 9 (at 277.1°): ceil(82.9° / 4.76°) - 1 = 17.
    assert_eq!(f.header.packets_expected, 10 + 50 + 17);
    assert_eq!((p.counters().frames, p.counters().points), (1, 3_729));
    // Nothing left to close; a second poll is a no-op.
    p.poll_timeout(last + 10_000_000_000, &mut out);
    p.flush(&mut out);
    assert_eq!(out.len(), 1);

    // When the sensor comes back, a new frame starts with the next sequence number.
    for d in &pk[10..20] {
        p.push(&d.payload, d.ts_ns + 1_000_000_000, &mut out);
    }
    p.flush(&mut out);
    assert_eq!(out.len(), 2);
    assert_eq!(out[1].header.sequence, 1);
    assert_eq!(out[1].header.packets_received, 10);
}

/// Fault class 4 of issue 23: a pause on the receiving side with nothing lost (packet 10
/// reaches us 1 s late, and every packet after it, while the sensor times run on) does not cut
/// the turn: the frames are those of the capture, shifted in host time only. A silence on both
/// clocks (the sensor time 1 s later too) closes the frame at packet 9, without a poll.
#[test]
fn a_host_pause_with_nothing_lost_does_not_cut_the_turn() {
    let pk = packets();
    let run = |pause_host: u64, pause_sensor_us: u32| {
        let mut p = lidarxdp::calibration::pipeline(&cfg()).unwrap();
        let mut out = Vec::new();
        for (i, d) in pk.iter().enumerate() {
            let mut payload = d.payload.clone();
            let (mut host, mut us) = (
                d.ts_ns,
                u32::from_le_bytes(payload[1200..1204].try_into().unwrap()),
            );
            if i >= 10 {
                host += pause_host;
                us += pause_sensor_us;
            }
            payload[1200..1204].copy_from_slice(&us.to_le_bytes());
            p.push(&payload, host, &mut out);
        }
        p.flush(&mut out);
        out
    };
    let want = run(0, 0);
    let got = run(1_000_000_000, 0);
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.points, w.points);
        let counts = |f: &lidarxdp_core::frame::Frame| {
            (
                f.header.sequence,
                f.header.start_ns,
                f.header.packets_received,
                f.header.packets_expected,
            )
        };
        assert_eq!(counts(g), counts(w));
    }
    let silent = run(1_000_000_000, 1_000_000);
    assert_eq!(silent[0].points.len(), 3_729);
    assert_eq!(silent[0].header.packets_received, 10);
    assert_eq!(silent.len(), want.len() + 1);
}
