//! `cargo xtask python`: the Python package (python/) as one abi3 wheel, its extension module
//! from the workspace's one cargo build, packed by python/pack_wheel.py (pypa's `wheel`,
//! pinned in python/requirements-build.txt, in a venv of its own), and its tests: a clean
//! venv that installs nothing but the wheel (numpy comes with it from PyPI) and decodes the
//! demo's capture, then pytest (python/tests) in the peers' venv, where velodyne-decoder and
//! ouster-sdk are, against the installed wheel (after `cargo xtask test`'s fuzz run, whose
//! corpus the tests push through `Decoder`).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::{build_release, peers, root, run, target_dir};

/// Builds the extension module with everything else ([`build_release`], so its dependencies
/// are compiled once, with the features the tests use) and packs the wheel ([`pack_wheel`]).
pub fn build_wheel(obj: &Path) -> Result<PathBuf> {
    build_release(obj)?;
    pack_wheel()
}

/// Packs the extension module [`build_release`] compiled into a wheel in `<target>/wheels`
/// (the older ones removed); returns its path. The module is stripped of its symbol table
/// (`objcopy --strip-all`; the dynamic symbols Python loads it by stay), and
/// python/pack_wheel.py, in a venv of pinned packaging tools (python/requirements-build.txt),
/// lays it out with python/lidarxdp and the metadata of python/pyproject.toml.
///
/// Errors: `objcopy` (GNU binutils), the venv or the packing failing.
pub fn pack_wheel() -> Result<PathBuf> {
    let r = root();
    let python = peers::pinned_venv(
        &r.join("target/pybuild/venv"),
        &r.join("python/requirements-build.txt"),
        "python",
    )?;
    let release = target_dir().join("release");
    let module = release.join("pywheel/_lidarxdp.abi3.so");
    fs::create_dir_all(release.join("pywheel"))?;
    run(Command::new("objcopy")
        .arg("--strip-all")
        .arg(release.join("lib_lidarxdp.so"))
        .arg(&module))?;
    let out = target_dir().join("wheels");
    if out.exists() {
        fs::remove_dir_all(&out).with_context(|| format!("remove {}", out.display()))?;
    }
    run(Command::new(&python)
        .arg(r.join("python/pack_wheel.py"))
        .arg("--module")
        .arg(&module)
        .args(["--version", env!("CARGO_PKG_VERSION"), "--out"])
        .arg(&out))?;
    let wheel = fs::read_dir(&out)
        .with_context(|| format!("read {}", out.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .with_context(|| format!("pack_wheel.py wrote no wheel into {}", out.display()))?;
    eprintln!(
        "python: {} ({:.1} MB)",
        wheel.display(),
        fs::metadata(&wheel)?.len() as f64 / 1e6
    );
    Ok(wheel)
}

/// Installs `wheel` into a fresh venv with nothing else, and decodes the demo's capture there.
fn clean_install(wheel: &Path) -> Result<()> {
    let r = root();
    let dir = r.join("target/pyclean/venv");
    if dir.exists() {
        fs::remove_dir_all(&dir).with_context(|| format!("remove {}", dir.display()))?;
    }
    run(Command::new("python3").args(["-m", "venv"]).arg(&dir))?;
    run(Command::new(dir.join("bin/pip"))
        .args([
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-input",
        ])
        .arg(wheel))?;
    let data = r.join("../shared/data/velodyne/vlp16");
    let check = "import sys, lidarxdp\n\
        frames = list(lidarxdp.read_pcap(sys.argv[1], calibration=sys.argv[2]))\n\
        assert len(frames) == 4, len(frames)\n\
        assert frames[0].points.dtype == lidarxdp.POINT_DTYPE\n\
        print('python: a clean venv with only the wheel decodes', len(frames), 'frames,',\n\
              sum(len(f) for f in frames), 'points')\n";
    run(Command::new(dir.join("bin/python"))
        .args(["-c", check])
        .arg(data.join("vlp16_dual_nebula_603pkt.pcap"))
        .arg(data.join("calibration/VLP16db.yaml")))
}

/// Installs `wheel` (alone: its numpy is already there) into the venv of `python`.
pub fn install(python: &Path, wheel: &Path) -> Result<()> {
    run(Command::new(python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-input",
            "--no-deps",
            "--force-reinstall",
        ])
        .arg(wheel))
}

/// What a pytest exit status means (pytest's `ExitCode`).
fn pytest_failure(code: Option<i32>) -> &'static str {
    match code {
        Some(1) => "tests failed",
        Some(2) => "interrupted",
        Some(3) => "internal error",
        Some(4) => "usage error",
        Some(5) => "no tests were collected",
        _ => "killed by a signal",
    }
}

/// The package's tests: the clean install, then pytest against the installed wheel in the
/// peers' venv. `daemon` is the `lidarxdp` binary whose `decode --json` the frames must match.
pub fn test(wheel: &Path, daemon: &Path) -> Result<()> {
    clean_install(wheel)?;
    let r = root();
    let python = peers::venv()?;
    install(&python, wheel)?;
    let status = Command::new(&python)
        .args([
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:asyncio",
            "python/tests",
        ])
        .current_dir(&r)
        .env("LIDARXDP_DATA", r.join("../shared/data"))
        .env("LIDARXDP_EXE", daemon)
        .env("LIDARXDP_FUZZ_CORPUS", r.join("fuzz/corpus"))
        .status()
        .context("run pytest")?;
    if !status.success() {
        bail!(
            "pytest python/tests: {} (exit status {status})",
            pytest_failure(status.code())
        );
    }
    Ok(())
}
