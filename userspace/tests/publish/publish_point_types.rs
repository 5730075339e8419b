//! `lidarxdp decode --point-type T --pcd DIR` for every point layout (docs/sensors.md, "Point
//! layouts"), on the real VLP-16 dual-return capture: each frame's PCD, read back by pypcd4
//! (`pcd_check.py`, an independent PCD parser), has exactly the layout's fields (names, sizes,
//! types, counts, in order), the frame's point count, and every field's values (x, y, z
//! included) equal to offline decoding of the capture into that layout
//! (`lidarxdp::offline::decode_pcap` with the layout's `SensorConfig`). No privileges.

use std::path::PathBuf;
use std::process::Command;

use crate::layout_check::{assert_pcd_equal, offline_as, read_pcds};
use lidarxdp_core::layout::POINT_TYPES;
use lidarxdp_core::sensor::SensorModel;
use lidarxdp_testkit::{daemon_exe, data, python_available};

const DUAL: &str = "velodyne/vlp16/vlp16_dual_nebula_603pkt.pcap";
const CALIB: &str = "velodyne/vlp16/calibration/VLP16db.yaml";

#[test]
fn decode_pcd_of_every_point_type_reads_back_with_pypcd4() {
    if !python_available() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("lidarxdp-pcd-types-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut files: Vec<PathBuf> = Vec::new();
    let mut expected = Vec::new();
    for t in POINT_TYPES {
        let out = dir.join(t.name());
        let o = Command::new(daemon_exe())
            .arg("decode")
            .arg("--pcap")
            .arg(data(DUAL))
            .arg("--calibration")
            .arg(data(CALIB))
            .args(["--sensor", "vlp16", "--port", "2368"])
            .args(["--point-type", t.name(), "--pcd"])
            .arg(&out)
            .output()
            .expect("run lidarxdp decode");
        assert!(
            o.status.success(),
            "decode --point-type {t}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let offline = offline_as(DUAL, SensorModel::Vlp16, CALIB, 2368, t);
        assert_eq!(offline.len(), 4, "offline frames as {t}");
        let mut names: Vec<String> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        let want: Vec<String> = (offline.iter())
            .map(|f| format!("{:06}.pcd", f.header.sequence))
            .collect();
        assert_eq!(names, want, "PCDs of {t}");
        for f in offline {
            files.push(out.join(format!("{:06}.pcd", f.header.sequence)));
            expected.push((t, f));
        }
    }
    let pcds = read_pcds(&files, &dir.join("check"));
    for ((p, path), (t, f)) in pcds.iter().zip(&files).zip(&expected) {
        assert_eq!(&p.path, path, "pcd_check.py record order");
        assert_pcd_equal(&format!("{} ({t})", p.path.display()), *t, p, f, 0);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
