//! The frame faults of issue 23, one rule for every vendor where the fault can occur, each
//! built in code from a shared capture and asserted exactly against the same capture decoded
//! without the fault:
//! 1. duplicated datagrams (port mirrors, bonded links, replay tools);
//! 2. a packet reordered inside a turn (and two swapped packets);
//! 3. a small step back in azimuth (encoder jitter) inside a turn;
//! 4. a pause on the receiving side with nothing lost;
//! 6. a restart: the packets before it is confirmed are decoded, not dropped.
//!
//! Captures: VLP-16 dual return (603 packets), Pandar XT32 and Pandar64 (Nebula's), RS-Helios-16P
//! (Nebula PR 79), OS2-128 (one frame replicated into consecutive frames).

use std::path::Path;

use lidarxdp::replay::read_udp_datagrams;
use lidarxdp_core::frame::Frame;
use lidarxdp_core::point::PointXYZIRCAEDT;
use lidarxdp_core::sensor::hesai::layout;
use lidarxdp_core::sensor::{DecodeCounters, PipelineOptions, SensorConfig, SensorModel};
use lidarxdp_core::valid::{Degrees, Fov, RangeGate};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data/");

/// `(payload, host_ns)` of every datagram to `port` in `rel` (under shared/data).
fn capture(rel: &str, port: u16) -> Vec<(Vec<u8>, u64)> {
    let (d, _) = read_udp_datagrams(Path::new(&format!("{DATA}{rel}")), Some(port)).unwrap();
    d.into_iter()
        .map(|d| (d.payload, d.timestamp.as_nanos() as u64))
        .collect()
}

/// One vendor's stream: its configuration, its datagrams, and how to move a packet's block
/// azimuths (0.01°) for the jitter case.
struct Stream {
    name: &'static str,
    cfg: SensorConfig,
    input: Vec<(Vec<u8>, u64)>,
    shift_azimuth: Option<fn(&mut [u8], i32)>,
}

/// Adds `d` (0.01°) to every block azimuth of a packet whose `blocks` azimuths are u16 at
/// `offset(b)`, little- or big-endian.
fn shift_blocks(p: &mut [u8], d: i32, blocks: usize, offset: impl Fn(usize) -> usize, be: bool) {
    for b in 0..blocks {
        let o = offset(b);
        let raw = [p[o], p[o + 1]];
        let az = if be {
            u16::from_be_bytes(raw)
        } else {
            u16::from_le_bytes(raw)
        };
        let az = (i32::from(az) + d).rem_euclid(36_000) as u16;
        let bytes = if be {
            az.to_be_bytes()
        } else {
            az.to_le_bytes()
        };
        p[o..o + 2].copy_from_slice(&bytes);
    }
}

fn vlp16() -> Stream {
    Stream {
        name: "VLP16",
        cfg: SensorConfig::new(
            2,
            SensorModel::Vlp16,
            format!("{DATA}velodyne/vlp16/calibration/VLP16db.yaml"),
        ),
        input: capture("velodyne/vlp16/vlp16_dual_nebula_603pkt.pcap", 2368),
        shift_azimuth: Some(|p, d| shift_blocks(p, d, 12, |b| 100 * b + 2, false)),
    }
}

fn hesai(model: SensorModel, dir: &str, csv: &str) -> Stream {
    let name = model.name();
    let l = layout::layout(model).unwrap();
    assert!(!l.body_crc, "{name}: the jitter case rewrites azimuths");
    Stream {
        name,
        cfg: SensorConfig::new(1, model, format!("{DATA}hesai/{dir}/{csv}")),
        input: capture(&format!("hesai/{dir}/{dir}_nebula.pcap"), 2368),
        shift_azimuth: Some(match model {
            SensorModel::PandarXt32 => |p, d| {
                let l = layout::layout(SensorModel::PandarXt32).unwrap();
                shift_blocks(p, d, l.blocks, |b| l.azimuth_offset(b), false)
            },
            _ => |p, d| {
                let l = layout::layout(SensorModel::Pandar64).unwrap();
                shift_blocks(p, d, l.blocks, |b| l.azimuth_offset(b), false)
            },
        }),
    }
}

fn helios16p() -> Stream {
    Stream {
        name: "Helios16P",
        cfg: SensorConfig {
            range: RangeGate::from_m(0.2, 200.0).unwrap(),
            ..SensorConfig::new(
                3,
                SensorModel::Helios16p,
                format!("{DATA}robosense/helios16p/RobosenseHelios16P.csv"),
            )
        },
        input: capture("robosense/helios16p/helios16p_nebula_pr79.pcap", 6699),
        shift_azimuth: Some(|p, d| shift_blocks(p, d, 12, |b| 42 + 100 * b + 2, true)),
    }
}

/// Packet `p` as a packet of frame `frame_id + df`, its column time stamps and host time
/// `df` × 100 ms later (RNG19: 16 columns of 12 + 128·12 bytes after a 32-byte header).
fn os2_shifted(p: &(Vec<u8>, u64), df: u16) -> (Vec<u8>, u64) {
    let mut v = p.0.clone();
    let id = u16::from_le_bytes([v[2], v[3]]).wrapping_add(df);
    v[2..4].copy_from_slice(&id.to_le_bytes());
    let dt = u64::from(df) * 100_000_000;
    for col in 0..16 {
        let o = 32 + col * (12 + 128 * 12);
        let ts = u64::from_le_bytes(v[o..o + 8].try_into().unwrap()) + dt;
        v[o..o + 8].copy_from_slice(&ts.to_le_bytes());
    }
    (v, p.1 + dt)
}

fn os2() -> Stream {
    let rel = "ouster/os2-128/OS-2-128-U1_v2.3.0_1024x10";
    let one = capture(&format!("{rel}.pcap"), 7502);
    Stream {
        name: "OS2-128",
        cfg: SensorConfig::new(5, SensorModel::Ouster, format!("{DATA}{rel}.json")),
        input: (0..3u16)
            .flat_map(|f| one.iter().map(move |p| os2_shifted(p, f)))
            .collect(),
        shift_azimuth: None,
    }
}

fn every_vendor() -> Vec<Stream> {
    vec![
        vlp16(),
        hesai(SensorModel::PandarXt32, "pandarxt32", "PandarXT32.csv"),
        hesai(SensorModel::Pandar64, "pandar64", "Pandar64.csv"),
        helios16p(),
        os2(),
    ]
}

/// Decodes `input` with `cfg`; also returns, per datagram, how many frames its push emitted.
fn decode(
    cfg: &SensorConfig,
    input: &[(Vec<u8>, u64)],
) -> (Vec<Frame>, DecodeCounters, Vec<usize>) {
    let mut p =
        lidarxdp::calibration::pipeline_with_options(cfg, PipelineOptions::default()).unwrap();
    let mut out = Vec::new();
    let mut emitted = Vec::with_capacity(input.len());
    for (payload, t) in input {
        let before = out.len();
        p.push(payload, *t, &mut out);
        emitted.push(out.len() - before);
    }
    p.flush(&mut out);
    assert_eq!(p.held(), 0);
    (out, *p.counters(), emitted)
}

/// What a frame says about itself, without the host time.
fn header(f: &Frame) -> (u64, u64, u32, u32, u32) {
    let h = &f.header;
    (
        h.sequence,
        h.start_ns,
        h.packets_received,
        h.packets_expected,
        h.frames_lost_before,
    )
}

/// A frame's points in a canonical order (arrival order differs for a late packet).
fn sorted(f: &Frame) -> Vec<PointXYZIRCAEDT> {
    let mut v = f.points.autoware().to_vec();
    v.sort_by_key(|p| {
        (
            p.time_stamp,
            p.channel,
            p.return_type,
            p.distance.to_bits(),
            p.azimuth.to_bits(),
        )
    });
    v
}

/// Packet indices in the middle of the capture with no frame boundary within `margin` packets
/// either side (mid-turn), `n` of them spread over the capture.
fn mid_turn(emitted: &[usize], margin: usize, n: usize) -> Vec<usize> {
    let quiet = |i: usize| {
        emitted[i.saturating_sub(margin)..(i + margin + 1).min(emitted.len())]
            .iter()
            .all(|&e| e == 0)
    };
    let step = emitted.len() / (n + 1);
    (1..=n)
        .map(|k| {
            (k * step..emitted.len() - margin)
                .find(|&i| quiet(i))
                .expect("a mid-turn packet")
        })
        .collect()
}

/// Class 1: every fifth datagram repeated at once and every seventh three datagrams later. A
/// frame never holds the same packet's returns twice: the frames are the capture's, bit for
/// bit, and every copy is counted in `duplicates`.
#[test]
fn duplicated_datagrams_are_dropped_and_counted() {
    for s in every_vendor() {
        let (want, wc, _) = decode(&s.cfg, &s.input);
        let mut input = Vec::new();
        let mut copies = 0u64;
        for (i, d) in s.input.iter().enumerate() {
            input.push(d.clone());
            if i % 5 == 0 {
                input.push(d.clone());
                copies += 1;
            }
            if i % 7 == 3 && i >= 3 {
                let earlier = s.input[i - 3].clone();
                input.push((earlier.0, d.1));
                copies += 1;
            }
        }
        let (got, c, _) = decode(&s.cfg, &input);
        assert_eq!(got, want, "{}", s.name);
        assert_eq!(c.duplicates, copies, "{}", s.name);
        assert_eq!(
            (c.decoded, c.packets),
            (wc.decoded, wc.packets + copies),
            "{}",
            s.name
        );
    }
}

/// Classes 2 and 6b: inside a turn, a packet arriving two packets late, and two swapped
/// packets, land in their frame: the same frames with the same points, every one as whole as
/// without the fault (`received`, `expected` unchanged), nothing counted late or jumped.
#[test]
fn reordered_packets_inside_a_turn_land_in_their_frame() {
    for s in every_vendor() {
        let (want, wc, emitted) = decode(&s.cfg, &s.input);
        let mut input = s.input.clone();
        let at = mid_turn(&emitted, 6, 2);
        // Two packets late: i arrives after i+1 and i+2 (with their host times).
        let (i, j) = (at[0], at[1]);
        let late = input.remove(i);
        input.insert(i + 2, (late.0, input[i + 1].1));
        // Swapped: j+1 before j.
        input.swap(j, j + 1);
        let t = input[j + 1].1;
        input[j + 1].1 = input[j].1;
        input[j].1 = t;
        let (got, c, _) = decode(&s.cfg, &input);
        assert_eq!(got.len(), want.len(), "{}", s.name);
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(header(g), header(w), "{} frame {k}", s.name);
            assert_eq!(sorted(g), sorted(w), "{} frame {k}", s.name);
        }
        assert_eq!(
            (c.decoded, c.late, c.time_jumps),
            (wc.decoded, 0, 0),
            "{}",
            s.name
        );
    }
}

/// Block `b`'s azimuth (0.01°) of a stream's packet.
fn block_azimuth(model: SensorModel, p: &[u8], b: usize) -> i32 {
    match model {
        SensorModel::Vlp16 => i32::from(u16::from_le_bytes([p[100 * b + 2], p[100 * b + 3]])),
        SensorModel::Helios16p => i32::from(u16::from_be_bytes([
            p[42 + 100 * b + 2],
            p[42 + 100 * b + 3],
        ])),
        m => {
            let o = layout::layout(m).unwrap().azimuth_offset(b);
            i32::from(u16::from_le_bytes([p[o], p[o + 1]]))
        }
    }
}

/// Blocks per packet of a stream's model.
fn blocks(model: SensorModel) -> usize {
    match model {
        SensorModel::Vlp16 | SensorModel::Helios16p => 12,
        m => layout::layout(m).unwrap().blocks,
    }
}

/// Class 3: encoder jitter inside a turn is no new turn. At three places mid-turn a packet's
/// blocks are moved 0.3° behind the firing before them (the previous packet's last block),
/// and, where frames are cut on packets' first blocks (Velodyne, RoboSense), 0.3° behind the
/// previous packet's first block too. As many frames as without it, with the same headers:
/// every frame as whole as before, the packet in the frame of its turn.
#[test]
fn an_azimuth_step_back_inside_a_turn_is_no_new_turn() {
    for s in every_vendor() {
        let Some(shift) = s.shift_azimuth else {
            continue;
        };
        let m = s.cfg.model;
        let (want, wc, emitted) = decode(&s.cfg, &s.input);
        let packet_cut = matches!(m, SensorModel::Vlp16 | SensorModel::Helios16p);
        for behind_first in [false, true] {
            if behind_first && !packet_cut {
                continue;
            }
            let mut input = s.input.clone();
            for i in mid_turn(&emitted, 6, 3) {
                let reference = if behind_first {
                    block_azimuth(m, &input[i].0, 0)
                } else {
                    block_azimuth(m, &input[i].0, blocks(m) - 1)
                };
                let d = reference - 30 - block_azimuth(m, &input[i + 1].0, 0);
                shift(&mut input[i + 1].0, d);
                assert_eq!(
                    (reference - block_azimuth(m, &input[i + 1].0, 0)).rem_euclid(36_000),
                    30
                );
            }
            let (got, c, _) = decode(&s.cfg, &input);
            assert_eq!(got.len(), want.len(), "{} {behind_first}", s.name);
            for (k, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(header(g), header(w), "{} {behind_first} frame {k}", s.name);
            }
            assert_eq!(c.decoded, wc.decoded, "{}", s.name);
        }
    }
}

/// Class 4: from the middle of the capture on, every packet reaches us 1 s later (the decoder
/// stalled, the packets waited in the ring; or the capture's record times jump) while the
/// sensor times run on: no turn is cut. The frames are the capture's, points and headers, with
/// only the host times moved.
#[test]
fn a_pause_on_the_receiving_side_cuts_no_turn() {
    for s in every_vendor() {
        let (want, _, emitted) = decode(&s.cfg, &s.input);
        let at = mid_turn(&emitted, 4, 1)[0];
        let input: Vec<_> = s
            .input
            .iter()
            .enumerate()
            .map(|(i, (p, t))| (p.clone(), if i >= at { t + 1_000_000_000 } else { *t }))
            .collect();
        let (got, _, _) = decode(&s.cfg, &input);
        assert_eq!(got.len(), want.len(), "{}", s.name);
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(header(g), header(w), "{} frame {k}", s.name);
            assert_eq!(g.points, w.points, "{} frame {k}", s.name);
        }
    }
}

/// `(received, expected)` of the first three frames of `rel` decoded with `fov` and `cut`.
fn fov_counts(
    cfg: SensorConfig,
    rel: &str,
    port: u16,
    fov: (f64, f64),
    cut: f64,
) -> Vec<(u32, u32)> {
    let cfg = SensorConfig {
        cut_angle: Degrees::new(cut).unwrap(),
        ..cfg
    };
    let opts = PipelineOptions {
        fov: Some(Fov::from_deg(fov.0, fov.1).unwrap()),
        ..Default::default()
    };
    let mut p = lidarxdp::calibration::pipeline_with_options(&cfg, opts).unwrap();
    let mut out = Vec::new();
    for (payload, t) in capture(rel, port) {
        p.push(&payload, t, &mut out);
    }
    out.iter()
        .take(3)
        .map(|f| (f.header.packets_received, f.header.packets_expected))
        .collect()
}

/// Class 5: under a field of view a frame counts only the packets that meet it, and the
/// first frame (opened mid-turn) expects only the packets the field of view holds between the
/// cut and its first packet. The VLP-32C capture comes from a sensor whose own field of view is
/// 270°..90° (it sends nothing else): with `--fov 270:90` its first frame expects 77 packets
/// as every whole frame does, not 152 (cut 0°) or 114. The XT32 sends the whole turn; with
/// `--fov 40:310` a whole frame counts its 377 packets inside, the first one 375.
#[test]
fn the_first_frame_under_a_field_of_view_expects_only_its_packets() {
    let vlp32c = || {
        SensorConfig::new(
            0,
            SensorModel::Vlp32c,
            format!("{DATA}velodyne/vlp32c/calibration/VLP32_nebula.yaml"),
        )
    };
    let rel = "velodyne/vlp32c/vlp32c_strongest_fov270to90_nebula_379pkt.pcap";
    assert_eq!(
        fov_counts(vlp32c(), rel, 2368, (270.0, 90.0), 0.0),
        [(38, 76), (77, 77), (77, 77)]
    );
    assert_eq!(
        fov_counts(vlp32c(), rel, 2368, (270.0, 90.0), 300.0),
        [(13, 77), (77, 77), (77, 77)]
    );
    let xt32 = SensorConfig::new(
        1,
        SensorModel::PandarXt32,
        format!("{DATA}hesai/pandarxt32/PandarXT32.csv"),
    );
    let rel = "hesai/pandarxt32/pandarxt32_nebula.pcap";
    assert_eq!(
        fov_counts(xt32.clone(), rel, 2368, (40.0, 310.0), 100.0),
        [(84, 375), (377, 377), (377, 377)]
    );
    assert_eq!(
        fov_counts(xt32, rel, 2368, (40.0, 310.0), 309.0),
        [(374, 375), (377, 377), (377, 377)]
    );
}
