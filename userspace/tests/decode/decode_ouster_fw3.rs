//! Ouster firmware 3.x: the profiles `RNG15_RFL8_NIR8_DUAL` and `FUSA_RNG15_RFL8_NIR8_DUAL`,
//! the FUSA packet header (32-bit frame ids) and the nested 3.x metadata, on packets
//! re-encoded from the shared captures.
//!
//! * Inputs: the OS-0-128 capture (RNG15_RFL8_NIR8, one frame of 64 packets, no second
//!   return: one is made up for a third of the rows, equal to the first on a fifth) and the
//!   OS-0-32 capture (RNG19_RFL8_SIG16_NIR16_DUAL, real second returns), each pixel written as
//!   an 8-byte low-data-rate dual pixel (ranges ÷ 8, 15 bits; near-IR ÷ 16, 8 bits), the column
//!   headers copied, the packet header written in the STANDARD or the FUSA layout (footer
//!   CRC-64 in STANDARD), and the capture repeated as consecutive frames (column times + 100 ms
//!   each) with chosen frame ids. The metadata is the capture's, rewritten as firmware 3.x
//!   writes it (nested sections, `lidar_data_format.header_type` and `fps`).
//! * Expected values are the encoder's inputs. Our decoder's points must match them pixel by
//!   pixel (range, return type, reflectivity, near-IR, signal 0, channel, time stamp), and the
//!   frames their ids, packet counts and start times.
//! * ouster-sdk 1.0.1 (`ouster_fw3_ref.py`, through `LIDARXDP_PEERS_PYTHON`; skipped with a
//!   message when that python is missing, a failure under `LIDARXDP_REQUIRE_PRIVILEGED`)
//!   decodes the same packets with the same metadata: its profile, header type, packet size
//!   and frame-id range, every packet header field, every column's time stamp, measurement id
//!   and status, and for each frame it builds the md5 of each field image and the point
//!   counts, must equal ours (and so the encoder's inputs).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use lidarxdp::offline::udp_payloads;
use lidarxdp_core::HostTime;
use lidarxdp_core::frame::Frame;
use lidarxdp_core::layout::{OusterPoint, PointType};
use lidarxdp_core::sensor::ouster::OusterStream;
use lidarxdp_core::sensor::ouster::metadata::OusterMetadata;
use lidarxdp_core::sensor::ouster::packet::{
    ChanField, HeaderType, Packet, PacketFormat, Profile, crc64_xz, field_spec,
};
use lidarxdp_core::sensor::{PipelineOptions, Rejection, SensorConfig, SensorModel, VendorDecoder};
use lidarxdp_core::valid::RangeGate;
use serde_json::{Value, json};

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data/ouster/");
const REF_SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/decode/ouster_fw3_ref.py"
);
const OS0_128: &str = "os0-128/OS-0-128-U1_v2.3.0_1024x10";
const OS0_32: &str = "os0-32/OS-0-32-U1_v2.2.0_1024x10";
/// Frame period of the captures' `1024x10` mode, ns.
const PERIOD_NS: u64 = 100_000_000;

/// The values the encoder wrote into one pixel (ranges in mm, near-IR as decoded: × 16).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Px {
    range: u32,
    flags: u8,
    refl: u8,
    nir: u16,
    range2: u32,
    flags2: u8,
    refl2: u8,
    window: u8,
}

/// One column as encoded.
#[derive(Clone, Debug)]
struct Col {
    ts: u64,
    mid: u16,
    status: u16,
    px: Vec<Px>,
}

/// The re-encoded stream: metadata text, parsed metadata, payloads with host times, and per
/// payload its frame id and columns as encoded.
struct Fw3 {
    json: String,
    meta: OusterMetadata,
    packets: Vec<(Vec<u8>, u64)>,
    frame_ids: Vec<u32>,
    cols: Vec<Vec<Col>>,
}

/// Header values written into every packet (besides the frame id).
const INIT_ID: u32 = 0x00AB_CDEF;
const PROD_SN: u64 = 0x12_3456_789A;
const ALERT: u8 = 0x25;
const HDR_16_19: [u8; 4] = [7, 9, 0x01, 0x03];

fn quant(range_mm: u64) -> u32 {
    (range_mm / 8).min(0x7FFF) as u32 * 8
}

/// The capture's pixel as an 8-byte dual pixel (see the module docs).
fn source_px(src: &Packet<&[u8]>, col: usize, row: usize, m: usize) -> Px {
    let f = |c| src.field(c, col, row);
    let range = quant(f(ChanField::Range));
    let refl = f(ChanField::Reflectivity) as u8;
    let nir = (f(ChanField::NearIr) >> 4).min(255) as u16 * 16;
    if src.format().profile.returns() == 2 {
        Px {
            range,
            flags: f(ChanField::Flags) as u8 & 1,
            refl,
            nir,
            range2: quant(f(ChanField::Range2)),
            flags2: f(ChanField::Flags2) as u8 & 1,
            refl2: f(ChanField::Reflectivity2) as u8,
            window: f(ChanField::Window) as u8,
        }
    } else {
        let range2 = if range == 0 {
            0
        } else if row.is_multiple_of(5) {
            range
        } else if row.is_multiple_of(3) {
            quant(u64::from(range) + 8 * (row as u64 + 1))
        } else {
            0
        };
        Px {
            range,
            flags: f(ChanField::Flags) as u8,
            refl,
            nir,
            range2,
            flags2: (row & 1) as u8,
            refl2: if range2 == 0 { 0 } else { refl ^ 0x5A },
            window: (m + row) as u8,
        }
    }
}

fn put_px(out: &mut [u8], p: &Px) {
    let w0 = (p.range / 8)
        | (u32::from(p.flags) << 15)
        | (u32::from(p.refl) << 16)
        | (u32::from(p.nir / 16) << 24);
    let w1 = (p.range2 / 8)
        | (u32::from(p.flags2) << 15)
        | (u32::from(p.refl2) << 16)
        | (u32::from(p.window) << 24);
    out[..4].copy_from_slice(&w0.to_le_bytes());
    out[4..8].copy_from_slice(&w1.to_le_bytes());
}

/// The capture's flat 2.x metadata rewritten as firmware 3.x's nested metadata.
fn nested_metadata(src: &Value, profile: Profile, header: Option<HeaderType>) -> Value {
    let mut df = src["data_format"].clone();
    df["udp_profile_lidar"] = json!(profile.name());
    df["udp_profile_imu"] = json!("LEGACY");
    df["fps"] = json!(10);
    if let Some(h) = header {
        df["header_type"] = json!(h.name());
    }
    let mut config = json!({
        "lidar_mode": src["lidar_mode"], "udp_port_lidar": 7502, "udp_port_imu": 7503,
        "udp_dest": "127.0.0.1", "udp_profile_lidar": profile.name(), "udp_profile_imu": "LEGACY",
        "columns_per_packet": df["columns_per_packet"], "timestamp_mode": "TIME_FROM_INTERNAL_OSC",
        "azimuth_window": [0, 360000], "operating_mode": "NORMAL",
    });
    if let Some(h) = header {
        config["header_type"] = json!(h.name());
    }
    let mut beam = json!({
        "beam_altitude_angles": src["beam_altitude_angles"],
        "beam_azimuth_angles": src["beam_azimuth_angles"],
        "lidar_origin_to_beam_origin_mm": src["lidar_origin_to_beam_origin_mm"],
    });
    if let Some(t) = src.get("beam_to_lidar_transform") {
        beam["beam_to_lidar_transform"] = t.clone();
    }
    json!({
        "sensor_info": {
            "prod_line": src["prod_line"], "prod_pn": src["prod_pn"],
            "prod_sn": PROD_SN.to_string(), "initialization_id": INIT_ID,
            "build_rev": "v3.1.0", "build_date": "2024-01-01T00:00:00Z",
            "image_rev": "ousteros-image-prod-bootes-v3.1.0", "status": "RUNNING",
        },
        "beam_intrinsics": beam,
        "imu_intrinsics": {"imu_to_sensor_transform": src["imu_to_sensor_transform"]},
        "lidar_intrinsics": {"lidar_to_sensor_transform": src["lidar_to_sensor_transform"]},
        "config_params": config,
        "lidar_data_format": df,
        "imu_data_format": {"imu_measurements_per_packet": 1, "imu_packets_per_frame": 10},
        "calibration_status": {"reflectivity": {"valid": true, "timestamp": "2024-01-01T00:00:00"}},
        "ouster-sdk": {"client_version": "ouster_client 1.0.1"},
        "user_data": "",
    })
}

/// Re-encodes capture `rel` in `profile` (header `header`, written into the metadata when
/// `Some`, else its default) as one frame per entry of `frame_ids`.
fn reencode(rel: &str, profile: Profile, header: Option<HeaderType>, frame_ids: &[u32]) -> Fw3 {
    let base = format!("{DIR}{rel}");
    let src_json: Value =
        serde_json::from_slice(&std::fs::read(format!("{base}.json")).unwrap()).unwrap();
    let src_meta = OusterMetadata::from_json(&src_json.to_string()).unwrap();
    let sf = src_meta.format;
    let src: Vec<_> = udp_payloads(Path::new(&format!("{base}.pcap")))
        .unwrap()
        .map(Result::unwrap)
        .filter(|d| d.dst_port == 7502 && d.payload.len() == sf.packet_len())
        .collect();
    assert_eq!(src.len(), 64, "{rel}");
    let doc = nested_metadata(&src_json, profile, header);
    let json = serde_json::to_string_pretty(&doc).unwrap();
    let meta = OusterMetadata::from_json(&json).unwrap();
    let f = meta.format;
    assert_eq!(f.header, header.unwrap_or(HeaderType::default_for(profile)));
    let (h, pb) = (f.pixels_per_column, f.profile.pixel_bytes());
    let mut out = Fw3 {
        json,
        meta,
        packets: Vec::new(),
        frame_ids: Vec::new(),
        cols: Vec::new(),
    };
    for (rep, &fid) in frame_ids.iter().enumerate() {
        let shift = rep as u64 * PERIOD_NS;
        for d in &src {
            let sp = Packet::new_checked(&d.payload[..], sf).unwrap();
            let mut b = vec![0u8; f.packet_len()];
            match f.header {
                HeaderType::Standard => {
                    b[0..2].copy_from_slice(&1u16.to_le_bytes());
                    b[2..4].copy_from_slice(&(fid as u16).to_le_bytes());
                    b[4..7].copy_from_slice(&INIT_ID.to_le_bytes()[..3]);
                    b[7..12].copy_from_slice(&PROD_SN.to_le_bytes()[..5]);
                    b[12] = ALERT;
                }
                HeaderType::Fusa => {
                    b[0] = 1;
                    b[1..4].copy_from_slice(&INIT_ID.to_le_bytes()[..3]);
                    b[4..8].copy_from_slice(&fid.to_le_bytes());
                    b[8] = ALERT;
                    b[11..16].copy_from_slice(&PROD_SN.to_le_bytes()[..5]);
                }
            }
            b[16..20].copy_from_slice(&HDR_16_19);
            let mut cols = Vec::new();
            for col in 0..f.columns_per_packet {
                let o = 32 + col * f.col_len();
                let m = usize::from(sp.col_measurement_id(col));
                let c = Col {
                    ts: sp.col_timestamp(col) + shift,
                    mid: m as u16,
                    status: sp.col_status(col) as u16,
                    px: (0..h).map(|row| source_px(&sp, col, row, m)).collect(),
                };
                b[o..o + 8].copy_from_slice(&c.ts.to_le_bytes());
                b[o + 8..o + 10].copy_from_slice(&c.mid.to_le_bytes());
                b[o + 10..o + 12].copy_from_slice(&c.status.to_le_bytes());
                for (row, p) in c.px.iter().enumerate() {
                    let s = o + 12 + row * pb;
                    put_px(&mut b[s..s + pb], p);
                }
                cols.push(c);
            }
            if f.header == HeaderType::Standard {
                let n = b.len();
                let crc = crc64_xz(&b[..n - 8]);
                b[n - 8..].copy_from_slice(&crc.to_le_bytes());
            }
            out.packets.push((b, d.ts_ns + shift));
            out.frame_ids.push(fid);
            out.cols.push(cols);
        }
    }
    out
}

fn stream(fw: &Fw3, point_type: PointType) -> OusterStream {
    let cfg = SensorConfig {
        range: RangeGate::from_m(0.0, 1000.0).unwrap(),
        ..SensorConfig::new(4, SensorModel::Ouster, PathBuf::from("fw3.json"))
    };
    let mut s = OusterStream::new(&cfg, fw.json.as_bytes(), PipelineOptions::default()).unwrap();
    s.set_point_type(point_type);
    s
}

fn decode(fw: &Fw3, point_type: PointType) -> (Vec<Frame>, OusterStream) {
    let mut s = stream(fw, point_type);
    let mut out = Vec::new();
    for (p, t) in &fw.packets {
        s.push(p, HostTime::both(*t), &mut out).unwrap();
    }
    s.flush(&mut out);
    (out, s)
}

/// Our packet view reads back every header field and pixel the encoder wrote.
fn check_packet_view(fw: &Fw3) {
    let f = fw.meta.format;
    for (i, (b, _)) in fw.packets.iter().enumerate() {
        let p = Packet::new_checked(&b[..], f).unwrap();
        assert_eq!(
            (p.packet_type(), p.frame_id(), p.init_id(), p.prod_sn()),
            (1, fw.frame_ids[i], INIT_ID, PROD_SN)
        );
        assert_eq!(
            [
                p.alert_flags(),
                p.countdown_thermal_shutdown(),
                p.countdown_shot_limiting(),
                p.thermal_shutdown(),
                p.shot_limiting()
            ],
            [ALERT, 7, 9, 1, 3]
        );
        assert_eq!(p.crc().is_some(), f.header == HeaderType::Standard);
        for (col, c) in fw.cols[i].iter().enumerate() {
            assert_eq!(p.col_timestamp(col), c.ts);
            assert_eq!(p.col_measurement_id(col), c.mid);
            assert_eq!(p.col_status(col), u32::from(c.status));
            for (row, x) in c.px.iter().enumerate() {
                let g = |fl| p.field(fl, col, row);
                use ChanField::*;
                assert_eq!(
                    [g(Range), g(Flags), g(Reflectivity), g(NearIr)],
                    [
                        u64::from(x.range),
                        x.flags.into(),
                        x.refl.into(),
                        x.nir.into()
                    ]
                );
                assert_eq!(
                    [g(Range2), g(Flags2), g(Reflectivity2), g(Window)],
                    [
                        u64::from(x.range2),
                        x.flags2.into(),
                        x.refl2.into(),
                        x.window.into()
                    ]
                );
            }
        }
    }
}

/// Our frames equal the encoder's inputs: one frame per frame id, 64 of 64 packets, start at
/// the earliest column time, and pixel by pixel the points (autoware layout: range, return
/// type, reflectivity, channel, time stamp; ouster layout: signal 0, reflectivity and near-IR
/// per return). Returns the points per frame.
fn check_frames(fw: &Fw3) -> Vec<usize> {
    let (frames, s) = decode(fw, PointType::Autoware);
    let (oframes, _) = decode(fw, PointType::Ouster);
    let ids: Vec<u32> = fw.frame_ids.iter().step_by(64).copied().collect();
    assert_eq!(frames.len(), ids.len());
    assert_eq!(s.stats().crc_errors, 0);
    let h = fw.meta.format.pixels_per_column;
    let mut counts = Vec::new();
    for (k, (fr, ofr)) in frames.iter().zip(&oframes).enumerate() {
        let cols: Vec<&Col> = fw.cols[k * 64..(k + 1) * 64].iter().flatten().collect();
        let start = cols
            .iter()
            .filter(|c| c.status & 1 == 1)
            .map(|c| c.ts)
            .min()
            .unwrap();
        assert_eq!(
            (fr.header.packets_received, fr.header.packets_expected),
            (64, 64)
        );
        assert_eq!(fr.header.start_ns, start, "frame {k}");
        assert_eq!(fr.header.frames_lost_before, 0, "frame {k}");
        let by_t: HashMap<u32, &Col> = cols.iter().map(|c| ((c.ts - start) as u32, *c)).collect();
        let mut want = 0;
        for c in cols.iter().filter(|c| c.status & 1 == 1) {
            for x in &c.px {
                want +=
                    usize::from(x.range != 0) + usize::from(x.range2 != 0 && x.range2 != x.range);
            }
        }
        assert_eq!(fr.points.len(), want, "frame {k}");
        let op = ofr.points.typed::<OusterPoint>().unwrap();
        assert_eq!(op.len(), want);
        let mut seen = vec![[false; 2]; cols.len() * h];
        for (p, o) in fr.points.autoware().iter().zip(op) {
            let c = by_t[&p.time_stamp];
            let row = usize::from(p.channel);
            let x = &c.px[row];
            let second = p.return_type == 8;
            let (r, refl) = if second {
                (x.range2, x.refl2)
            } else {
                (x.range, x.refl)
            };
            let rt = if second {
                8
            } else if x.range2 == x.range {
                6
            } else {
                3
            };
            assert_eq!(
                (p.distance, p.intensity, p.return_type),
                (r as f32 / 1000.0, refl, rt),
                "frame {k} col {} row {row}",
                c.mid
            );
            assert_eq!(
                (o.intensity, o.reflectivity, o.ambient, o.ring, o.range, o.t),
                (0.0, u16::from(refl), x.nir, row as u16, r, p.time_stamp),
                "frame {k} col {} row {row}",
                c.mid
            );
            let slot = &mut seen[usize::from(c.mid) * h + row][usize::from(second)];
            assert!(!*slot, "frame {k} col {} row {row}: twice", c.mid);
            *slot = true;
        }
        counts.push(want);
    }
    eprintln!(
        "{} {}: frames {ids:?}, points {counts:?}",
        fw.meta.format.profile.name(),
        fw.meta.format.header.name()
    );
    counts
}

/// ouster-sdk's decode of the same packets (see the module docs), or `None` when the peers'
/// python is missing.
fn sdk_reference(fw: &Fw3, tag: &str) -> Option<Value> {
    let python = lidarxdp_testkit::peers_python()?;
    let dir = std::env::temp_dir().join(format!("lidarxdp-fw3-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let meta = dir.join("meta.json");
    std::fs::write(&meta, &fw.json).unwrap();
    let mut bin = Vec::new();
    for (p, _) in &fw.packets {
        bin.extend_from_slice(&(p.len() as u32).to_le_bytes());
        bin.extend_from_slice(p);
    }
    let packets = dir.join("packets.bin");
    std::fs::write(&packets, bin).unwrap();
    let r = Command::new(python)
        .arg(REF_SCRIPT)
        .arg(&meta)
        .arg(&packets)
        .output()
        .expect("run ouster_fw3_ref.py");
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    Some(serde_json::from_slice(&r.stdout).unwrap())
}

fn le(v: u64, n: usize) -> Vec<u8> {
    v.to_le_bytes()[..n].to_vec()
}

/// ouster-sdk reads our metadata and every packet as we do, and builds the same frames.
fn check_against_sdk(fw: &Fw3, tag: &str, points: &[usize]) {
    let Some(sdk) = sdk_reference(fw, tag) else {
        return;
    };
    let f = fw.meta.format;
    assert_eq!(
        sdk["format"],
        json!({
            "udp_profile_lidar": f.profile.name(),
            "header_type": f.header.name(),
            "lidar_packet_size": f.packet_len(),
            "max_frame_id": f.max_frame_id(),
            "columns_per_frame": f.columns_per_frame,
            "pixels_per_column": f.pixels_per_column,
        })
    );
    let pk = sdk["packets"].as_array().unwrap();
    assert_eq!(pk.len(), fw.packets.len());
    for (i, ((b, _), s)) in fw.packets.iter().zip(pk).enumerate() {
        let p = Packet::new_checked(&b[..], f).unwrap();
        let n = b.len();
        let crc = p.crc();
        if let Some(c) = crc {
            assert_eq!(c, crc64_xz(&b[..n - 8]));
        }
        let cols: Vec<Value> = (0..f.columns_per_packet)
            .map(|c| {
                json!({"timestamp": p.col_timestamp(c), "measurement_id": p.col_measurement_id(c),
                       "status": p.col_status(c)})
            })
            .collect();
        let ours = json!({
            "packet_type": p.packet_type(), "frame_id": p.frame_id(), "init_id": p.init_id(),
            "prod_sn": p.prod_sn(), "alert_flags": p.alert_flags(),
            "countdown_thermal_shutdown": p.countdown_thermal_shutdown(),
            "countdown_shot_limiting": p.countdown_shot_limiting(),
            "thermal_shutdown": p.thermal_shutdown(), "shot_limiting": p.shot_limiting(),
            "crc": crc, "calculated_crc": crc64_xz(&b[..n - 8]), "columns": cols,
        });
        assert_eq!(s, &ours, "packet {i}");
    }
    // The frames: ids, column headers, and each field image's md5 (h × w, row-major, the
    // field's value type), built from the encoder's inputs.
    let frames = sdk["frames"].as_array().unwrap();
    let ids: Vec<u32> = fw.frame_ids.iter().step_by(64).copied().collect();
    assert_eq!(frames.len(), ids.len());
    let (w, h) = (f.columns_per_frame, f.pixels_per_column);
    for (k, s) in frames.iter().enumerate() {
        assert_eq!(s["frame_id"], json!(ids[k]));
        let (mut ts, mut mid, mut st) = (vec![0u64; w], vec![0u64; w], vec![0u64; w]);
        let mut img: HashMap<&str, Vec<u64>> = HashMap::new();
        for c in fw.cols[k * 64..(k + 1) * 64]
            .iter()
            .flatten()
            .filter(|c| c.status & 1 == 1)
        {
            let m = usize::from(c.mid);
            (ts[m], mid[m], st[m]) = (c.ts, u64::from(c.mid), u64::from(c.status));
            for (row, x) in c.px.iter().enumerate() {
                for (name, v) in [
                    ("RANGE", x.range as u64),
                    ("FLAGS", x.flags.into()),
                    ("REFLECTIVITY", x.refl.into()),
                    ("NEAR_IR", x.nir.into()),
                    ("RANGE2", x.range2.into()),
                    ("FLAGS2", x.flags2.into()),
                    ("REFLECTIVITY2", x.refl2.into()),
                    ("WINDOW", x.window.into()),
                ] {
                    img.entry(name).or_insert_with(|| vec![0; w * h])[row * w + m] = v;
                }
            }
        }
        assert_eq!(s["timestamp"], json!(ts), "frame {k}");
        assert_eq!(s["measurement_id"], json!(mid), "frame {k}");
        assert_eq!(s["status"], json!(st), "frame {k}");
        let fields = s["fields"].as_object().unwrap();
        assert!(fields.len() >= 7, "{fields:?}");
        for (name, v) in fields {
            let field = match name.as_str() {
                "RANGE" => ChanField::Range,
                "FLAGS" => ChanField::Flags,
                "REFLECTIVITY" => ChanField::Reflectivity,
                "NEAR_IR" => ChanField::NearIr,
                "RANGE2" => ChanField::Range2,
                "FLAGS2" => ChanField::Flags2,
                "REFLECTIVITY2" => ChanField::Reflectivity2,
                "WINDOW" => ChanField::Window,
                other => panic!("ouster-sdk field {other} not in the profile"),
            };
            let n = field_spec(f.profile, field).unwrap().value_bytes();
            let bytes: Vec<u8> = img[name.as_str()].iter().flat_map(|&x| le(x, n)).collect();
            assert_eq!(
                v["md5"].as_str().unwrap(),
                format!("{:x}", md5::compute(bytes)),
                "frame {k} field {name} ({})",
                v["dtype"]
            );
        }
        assert_eq!(
            s["nonzero_range"].as_u64().unwrap() + s["second_returns"].as_u64().unwrap(),
            points[k] as u64,
            "frame {k}"
        );
    }
}

/// RNG15_RFL8_NIR8_DUAL with the STANDARD header (16-bit frame ids, footer CRC-64): the
/// OS-0-128 capture twice, frame ids 65535 and 0 (the 16-bit wrap).
#[test]
fn rng15_dual_standard_os0_128() {
    let fw = reencode(OS0_128, Profile::Rng15Rfl8Nir8Dual, None, &[65_535, 0]);
    assert_eq!(fw.meta.format.packet_len(), 16_640);
    check_packet_view(&fw);
    let points = check_frames(&fw);
    assert_eq!(points.len(), 2);
    assert_eq!(points[0], points[1]);
    check_against_sdk(&fw, "std128", &points);
}

/// FUSA_RNG15_RFL8_NIR8_DUAL (FUSA header by default, no `header_type` in the metadata):
/// the OS-0-32 capture's real dual returns, frame ids above 2^16 (70000, 70001, 70002).
#[test]
fn fusa_dual_os0_32_frame_ids_above_65535() {
    let fw = reencode(
        OS0_32,
        Profile::FusaRng15Rfl8Nir8Dual,
        None,
        &[70_000, 70_001, 70_002],
    );
    assert_eq!(fw.meta.format.header, HeaderType::Fusa);
    assert_eq!(fw.meta.format.packet_len(), 32 + 16 * (12 + 32 * 8) + 32);
    check_packet_view(&fw);
    let points = check_frames(&fw);
    assert_eq!(points.len(), 3);
    check_against_sdk(&fw, "fusa32", &points);
}

/// FUSA header named by `header_type` (firmware 3.2 metadata) on RNG15_RFL8_NIR8_DUAL, frame
/// ids through the 32-bit wrap: 2^32 - 2, 2^32 - 1, 0, 1 are four consecutive frames, none
/// lost, none taken as a jump. ouster-sdk 1.0.1's `FrameBatcher` throws on these ids ("32-bit
/// frame id did not increase since the last frame": it does not wrap FUSA frame ids), so it
/// is compared on two other large ids, 2^31 - 2 and 2^31 - 1.
#[test]
fn fusa_header_frame_ids_wrap_at_2_pow_32() {
    let ids = [u32::MAX - 1, u32::MAX, 0, 1];
    let fusa = Some(HeaderType::Fusa);
    let fw = reencode(OS0_128, Profile::Rng15Rfl8Nir8Dual, fusa, &ids);
    assert!(fw.json.contains("\"header_type\": \"FUSA\""));
    check_packet_view(&fw);
    let points = check_frames(&fw);
    assert_eq!(points.len(), 4);
    let high = [(1 << 31) - 2, (1 << 31) - 1];
    let high = reencode(OS0_128, Profile::Rng15Rfl8Nir8Dual, fusa, &high);
    check_against_sdk(&high, "high32", &points[..2]);
    // A frame id 2^16 ahead is a jump with the FUSA header (a 16-bit comparison would take it
    // for the same frame): dropped, the frame around it stays whole.
    let mut s = stream(&fw, PointType::Autoware);
    let mut out = Vec::new();
    let mut jumped = fw.packets[5].0.clone();
    jumped[4..8].copy_from_slice(&(ids[0].wrapping_add(65_536)).to_le_bytes());
    for (i, (p, t)) in fw.packets[..64].iter().enumerate() {
        s.push(p, HostTime::both(*t), &mut out).unwrap();
        if i == 10 {
            assert_eq!(
                s.push(&jumped, HostTime::both(*t), &mut out),
                Err(Rejection::TimeJump)
            );
        }
    }
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].header.packets_received, 64);
}

/// Malformed firmware 3.x packets are counted malformed, never decoded, never a panic: a
/// FUSA packet cut short or padded, one of another type, one with a measurement_id past the
/// frame, and (STANDARD header) a flipped bit under the footer CRC-64, which also counts in
/// `crc_errors`; a zero CRC (not sent) is accepted.
#[test]
fn malformed_fw3_packets_are_counted() {
    let fusa = reencode(OS0_32, Profile::FusaRng15Rfl8Nir8Dual, None, &[70_000]);
    let good = &fusa.packets[0].0;
    let t = fusa.packets[0].1;
    let mut bad: Vec<Vec<u8>> = vec![good[..good.len() - 1].to_vec(), {
        let mut b = good.clone();
        b.push(0);
        b
    }];
    let mut b = good.clone();
    b[0] = 2;
    bad.push(b);
    let mut b = good.clone();
    b[32 + 8..32 + 10].copy_from_slice(&1024u16.to_le_bytes());
    bad.push(b);
    let mut s = stream(&fusa, PointType::Autoware);
    let mut out = Vec::new();
    for b in &bad {
        assert_eq!(
            s.push(b, HostTime::both(t), &mut out),
            Err(Rejection::Malformed)
        );
    }
    // A FUSA packet has no CRC: a flipped pixel bit is decoded.
    let mut b = good.clone();
    b[100] ^= 0x10;
    assert_eq!(s.push(&b, HostTime::both(t), &mut out), Ok(()));
    assert_eq!(s.stats().crc_errors, 0);

    // STANDARD header: the first packet's CRC matches, so the sensor sends CRCs; then a
    // flipped pixel bit, a flipped CRC bit and a zeroed CRC are each malformed.
    let std = reencode(OS0_128, Profile::Rng15Rfl8Nir8Dual, None, &[7]);
    let mut s = stream(&std, PointType::Autoware);
    let (good, t) = (&std.packets[0].0, std.packets[0].1);
    assert_eq!(s.push(good, HostTime::both(t), &mut out), Ok(()));
    let n = good.len();
    let mut b = good.clone();
    b[100] ^= 0x10;
    let mut c = good.clone();
    c[n - 1] ^= 0x80;
    let mut z = good.clone();
    z[n - 8..].fill(0);
    for x in [&b, &c, &z] {
        assert_eq!(
            s.push(x, HostTime::both(t), &mut out),
            Err(Rejection::Malformed)
        );
    }
    assert_eq!(s.stats().crc_errors, 3);
    assert_eq!(
        s.push(&std.packets[1].0, HostTime::both(t), &mut out),
        Ok(())
    );
    s.flush(&mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(
        (
            out[0].header.packets_received,
            out[0].header.packets_malformed
        ),
        (2, 3)
    );
    // A sensor without CRCs (fw 2.3 writes a marker there): never checked, and after
    // CRC_PROBE_PACKETS packets no longer computed; the marker packets all decode.
    let mut s = stream(&std, PointType::Autoware);
    for (p, t) in &std.packets {
        let mut m = p.clone();
        m[n - 8..].copy_from_slice(&0xDEAD_BEEF_0000_C0DEu64.to_le_bytes());
        assert_eq!(s.push(&m, HostTime::both(*t), &mut out), Ok(()));
    }
    assert_eq!(s.stats().crc_errors, 0);
    out.clear();
    // A FUSA packet against STANDARD metadata (same size): type byte 1, the next byte (init_id)
    // makes the u16 type another number.
    let mut s = stream(&std, PointType::Autoware);
    let f = PacketFormat {
        header: HeaderType::Fusa,
        ..std.meta.format
    };
    assert_eq!(f.packet_len(), std.meta.format.packet_len());
    let mut b = good.clone();
    b[0] = 1;
    b[1] = 0xEF;
    assert_eq!(
        s.push(&b, HostTime::both(t), &mut out),
        Err(Rejection::Malformed)
    );
}
