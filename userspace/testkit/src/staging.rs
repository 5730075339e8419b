//! Files the tests put in the system temporary folder: world-readable staging copies, and
//! content-addressed calibration files.
use std::hash::{Hash, Hasher};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A fresh folder under the system temporary directory holding copies of the daemon binary and
/// of data files, readable (and the binary executable) by every user; removed on drop.
///
/// Tests that run the daemon as another user (`nobody`) use it, so that they do not depend on
/// the permissions of the folder the repository was cloned into (a checkout under a 0700 home
/// folder is unreachable for `nobody`). The copies live only as long as the value.
pub struct Staging {
    /// The folder (mode 0755).
    pub dir: PathBuf,
}

impl Staging {
    /// Creates `<tmp>/lidarxdp-<tag>-<pid>-<n>` (mode 0755, `n` a per-process counter), whose
    /// every ancestor must be searchable by all users (`/tmp` is, mode 1777); panics otherwise.
    pub fn new(tag: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("lidarxdp-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create staging folder");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
            .expect("chmod staging folder");
        for a in dir.ancestors().skip(1) {
            let mode = std::fs::metadata(a)
                .expect("stat ancestor")
                .permissions()
                .mode();
            assert!(
                mode & 0o001 != 0,
                "{} (mode {mode:o}) is not searchable by other users: set TMPDIR to a folder \
                 that is",
                a.display()
            );
        }
        Self { dir }
    }

    /// Copies `src` into the folder as `name` with `mode` (e.g. 0o644, 0o755); returns the
    /// copy's path.
    pub fn copy(&self, src: &Path, name: &str, mode: u32) -> PathBuf {
        let dst = self.dir.join(name);
        std::fs::copy(src, &dst).unwrap_or_else(|e| panic!("copy {}: {e}", src.display()));
        std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(mode))
            .expect("chmod staged copy");
        dst
    }

    /// A copy of the `lidarxdp` binary under test ([`daemon_exe`](crate::daemon_exe)),
    /// mode 0755.
    pub fn daemon(&self) -> PathBuf {
        self.copy(&crate::daemon_exe(), "lidarxdp", 0o755)
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Returns the path of a temp-dir file holding exactly `bytes`, named
/// `lidarxdp-test-<hash>.<ext>`, creating it if needed.
///
/// The name is a hash of the content, so every run and every parallel test thread that needs
/// the same table shares one file (written once, atomically through a unique temporary name and
/// a rename), and repeated runs do not pile files up in the temp directory.
pub fn content_file(ext: &str, bytes: &[u8]) -> PathBuf {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    let path = std::env::temp_dir().join(format!("lidarxdp-test-{:016x}.{ext}", h.finish()));
    if std::fs::read(&path).ok().as_deref() != Some(bytes) {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let tmp = path.with_extension(format!("{ext}.{}.{n}", std::process::id()));
        std::fs::write(&tmp, bytes).expect("write temporary calibration file");
        std::fs::rename(&tmp, &path).expect("rename temporary calibration file");
    }
    path
}
