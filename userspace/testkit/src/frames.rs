//! Subscribing to a daemon in a namespace and comparing what it published with offline
//! decoding (feature `frames`).
use std::thread::JoinHandle;

use lidarxdp_core::frame::{Frame, FrameHeader};
use lidarxdp_core::point::PointXYZIRCAEDT;

use crate::netns::in_netns;

/// A received frame: header and points.
pub type ReceivedFrame = (FrameHeader, Vec<PointXYZIRCAEDT>);

/// Subscribes to the daemon at 127.0.0.1:`port` inside `ns` on a new thread and collects every
/// frame until the stream ends (the daemon stops).
pub fn collect_frames(ns: &str, port: u16) -> JoinHandle<Vec<ReceivedFrame>> {
    let ns = ns.to_string();
    std::thread::spawn(move || {
        in_netns(&ns, move || {
            let addr = format!("127.0.0.1:{port}").parse().expect("address");
            let mut sub = lidarxdp_client::Subscriber::connect(addr).expect("subscribe");
            let mut frames = Vec::new();
            while let Some(f) = sub.next_frame().expect("frame") {
                frames.push((*f.header(), f.points().to_vec()));
            }
            frames
        })
    })
}

/// Asserts the frames a subscriber received equal offline decoding of the same capture: same
/// count, and per frame the same sequence, packets received and points (bit for bit).
pub fn assert_frames_equal(live: &[ReceivedFrame], offline: &[Frame]) {
    assert_eq!(live.len(), offline.len(), "frame count");
    for (i, ((h, pts), off)) in live.iter().zip(offline).enumerate() {
        assert_eq!(h.sequence, off.header.sequence, "frame {i}");
        assert_eq!(h.packets_received, off.header.packets_received, "frame {i}");
        assert_eq!(pts.len(), off.points.len(), "frame {i} point count");
        assert!(
            pts[..] == off.points.autoware()[..],
            "frame {i}: points differ from offline decoding"
        );
    }
}

/// The PointCloud2 `data` of `points`, written field by field at the documented offsets
/// (little-endian), independently of the struct's memory layout.
pub fn point_bytes(points: &[PointXYZIRCAEDT]) -> Vec<u8> {
    let mut out = Vec::with_capacity(points.len() * 32);
    for p in points {
        out.extend_from_slice(&p.x.to_le_bytes());
        out.extend_from_slice(&p.y.to_le_bytes());
        out.extend_from_slice(&p.z.to_le_bytes());
        out.push(p.intensity);
        out.push(p.return_type);
        out.extend_from_slice(&p.channel.to_le_bytes());
        out.extend_from_slice(&p.azimuth.to_le_bytes());
        out.extend_from_slice(&p.elevation.to_le_bytes());
        out.extend_from_slice(&p.distance.to_le_bytes());
        out.extend_from_slice(&p.time_stamp.to_le_bytes());
    }
    out
}
