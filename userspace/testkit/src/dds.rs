//! The DDS tests' and benchmarks' independent subscribers (`userspace/tests/ros2/`): one on
//! Debian's Fast DDS 2.9 (`dds_sub_fastdds.cpp`), one on Debian's Cyclone DDS 0.10.2
//! (`dds_sub_cyclone.c` with `PointCloud2.idl` through Cyclone's `idlc`), compiled here with the
//! commands their headers give.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The two compiled subscribers.
#[derive(Clone, Debug)]
pub struct DdsCheckers {
    /// `dds_sub_fastdds`.
    pub fastdds: PathBuf,
    /// `dds_sub_cyclone`.
    pub cyclone: PathBuf,
}

/// Where the sources are: `<workspace root>/userspace/tests/ros2`.
pub fn dds_checker_sources() -> PathBuf {
    crate::workspace_root().join("userspace/tests/ros2")
}

/// A step of [`build_dds_checkers`] that failed: what it was, and why (the compiler's
/// output, or the error of starting it).
#[derive(Debug, thiserror::Error)]
#[error("{what}: {why}")]
pub struct CheckerBuildError {
    /// The step (`compile dds_sub_fastdds.cpp (Debian libfastrtps-dev)`, ...).
    pub what: String,
    /// Its exit status and output, or why it did not start.
    pub why: String,
}

fn run_ok(cmd: &mut Command, what: &str) -> Result<(), CheckerBuildError> {
    let fail = |why: String| CheckerBuildError {
        what: what.to_owned(),
        why,
    };
    let out = cmd.output().map_err(|e| fail(format!("cannot run: {e}")))?;
    if out.status.success() {
        return Ok(());
    }
    Err(fail(format!(
        "{}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )))
}

/// Compiles both subscribers into `out` (created if missing); the C++ compiler runs beside
/// `idlc` + `cc`.
///
/// # Errors
/// The step that failed with the compiler's output (the Debian packages `libfastrtps-dev`,
/// `cyclonedds-dev`, `cyclonedds-tools` missing, for example).
pub fn build_dds_checkers(out: &Path) -> Result<DdsCheckers, CheckerBuildError> {
    let src = dds_checker_sources();
    std::fs::create_dir_all(out).map_err(|e| CheckerBuildError {
        what: format!("create {}", out.display()),
        why: e.to_string(),
    })?;
    let fastdds = out.join("dds_sub_fastdds");
    let cyclone = out.join("dds_sub_cyclone");
    std::thread::scope(|s| {
        let fast = s.spawn(|| {
            run_ok(
                Command::new("c++")
                    .args(["-std=c++17", "-O2", "-o"])
                    .arg(&fastdds)
                    .arg(src.join("dds_sub_fastdds.cpp"))
                    .args(["-lfastrtps", "-lfastcdr"]),
                "compile dds_sub_fastdds.cpp (Debian libfastrtps-dev)",
            )
        });
        run_ok(
            Command::new("idlc")
                .arg("-o")
                .arg(out)
                .arg("PointCloud2.idl")
                .current_dir(&src),
            "idlc PointCloud2.idl (Debian cyclonedds-tools)",
        )?;
        run_ok(
            Command::new("cc")
                .args(["-O2", "-o"])
                .arg(&cyclone)
                .arg(src.join("dds_sub_cyclone.c"))
                .arg(out.join("PointCloud2.c"))
                .arg("-I")
                .arg(out)
                .arg("-lddsc"),
            "compile dds_sub_cyclone.c (Debian cyclonedds-dev)",
        )?;
        fast.join().map_err(|_| CheckerBuildError {
            what: "compile dds_sub_fastdds.cpp".into(),
            why: "the compile thread panicked".into(),
        })?
    })?;
    Ok(DdsCheckers { fastdds, cyclone })
}
