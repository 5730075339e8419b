//! Content-addressed temporary files for tests that need a calibration file on disk.
//!
//! The file name is a hash of the content, so every run and every parallel test thread that
//! needs the same table shares one file (written once, atomically through a unique temporary
//! name and a rename), and repeated runs do not pile files up in the temp directory.
#![allow(dead_code)]

use std::hash::{Hash, Hasher};
use std::path::PathBuf;

/// Returns the path of a temp-dir file holding exactly `bytes`, named
/// `lidarxdp-test-<hash>.<ext>`, creating it if needed.
pub fn content_file(ext: &str, bytes: &[u8]) -> PathBuf {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    let path = std::env::temp_dir().join(format!("lidarxdp-test-{:016x}.{ext}", h.finish()));
    if std::fs::read(&path).ok().as_deref() != Some(bytes) {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = path.with_extension(format!("{ext}.{}.{n}", std::process::id()));
        std::fs::write(&tmp, bytes).expect("write temporary calibration file");
        std::fs::rename(&tmp, &path).expect("rename temporary calibration file");
    }
    path
}
