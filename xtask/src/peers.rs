//! `cargo xtask bench --peers [--quick] [--out DIR] [--hesai-sdk DIR]` (issue 15): lidarxdp
//! against the decoders users would otherwise pick, rerunnable on a fresh clone.
//!
//! 1. Builds the XDP object and `lidarxdp` (release; its `decode` is measured end to end) and
//!    `lidarxdp-bench`.
//! 2. Makes the peers' own Python venv, `target/peers/venv` (`python3 -m venv`), with the
//!    exact pins of `bench/peers/py/requirements.txt` (velodyne-decoder, ouster-sdk, numpy
//!    and their dependencies) from PyPI; reused while its copy of that file is unchanged.
//! 3. Builds Hesai's vendor SDK and our harness (`bench/peers/hesai`) with CMake, out of
//!    tree into `target/peers/hesai-build`, from the SDK source where it lies:
//!    `--hesai-sdk`, else `$LIDARXDP_HESAI_SDK`, else `<repo>/../shared/peers/HesaiLidar_SDK_2.0`.
//!    Without it the Hesai rows are skipped, with the reason in the summary.
//! 4. Runs `lidarxdp-bench peers` (bench/src/peers.rs) on `<repo>/../shared/data`
//!    (`$LIDARXDP_DATA` overrides). Results go to `--out`, else
//!    `bench/results/<UTC date>/peers` (full) or a temporary folder (`--quick`). A full run
//!    also rewrites the peers section of docs/benchmarks.md and docs/img/peers.svg.
//!
//! Nothing is written outside `target/`, the results folder and (full run) `docs/`. Root is
//! not needed by the measurement itself.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use anyhow::{Context, Result, bail};

use crate::{build_ebpf, build_release, root, run, setup::BpfToolchain};

/// The peers' venv, `<root>/target/peers/venv`.
fn venv_dir() -> PathBuf {
    root().join("target/peers/venv")
}

/// Pinned requirements of the venv (in the repository).
fn requirements() -> PathBuf {
    root().join("bench/peers/py/requirements.txt")
}

/// Creates or reuses the peers' venv; returns its Python (also `cargo xtask test`'s: the IMU
/// test compares with ouster-sdk, the Python package's tests with both peers).
pub fn venv() -> Result<PathBuf> {
    pinned_venv(&venv_dir(), &requirements(), "bench --peers")
}

/// Creates (or reuses, while `requirements` is unchanged) a venv in `dir` with exactly the
/// pinned wheels of `requirements` from PyPI; returns its Python. `what` names the user in
/// messages.
pub fn pinned_venv(dir: &Path, requirements: &Path, what: &str) -> Result<PathBuf> {
    let python = dir.join("bin/python");
    let wanted = fs::read_to_string(requirements)
        .with_context(|| format!("read {}", requirements.display()))?;
    let marker = dir.join("lidarxdp-requirements.txt");
    if python.exists() && fs::read_to_string(&marker).is_ok_and(|m| m == wanted) {
        return Ok(python);
    }
    eprintln!(
        "{what}: creating the Python venv {} from {}",
        dir.display(),
        requirements.display()
    );
    if dir.exists() {
        fs::remove_dir_all(dir).with_context(|| format!("remove {}", dir.display()))?;
    }
    let venv_ok = Command::new("python3")
        .args(["-m", "venv"])
        .arg(dir)
        .status()
        .map(|s| s.success());
    match venv_ok {
        Ok(true) => {}
        Ok(false) => bail!(
            "`python3 -m venv {}` failed: is python3-venv installed? (`apt-get install \
             python3-venv`; `cargo xtask setup` installs it)",
            dir.display()
        ),
        Err(e) => bail!("python3 not found ({e}): install python3 and python3-venv"),
    }
    let pip = Command::new(dir.join("bin/pip"))
        .args([
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-input",
            "--only-binary=:all:",
            "-r",
        ])
        .arg(requirements)
        .status()
        .context("run pip")?;
    if !pip.success() {
        bail!(
            "pip could not install the pinned wheels of {} from PyPI: is there network access \
             to pypi.org, and does this Python ({}) have wheels for them (Python 3.11, x86-64)?",
            requirements.display(),
            String::from_utf8_lossy(
                &Command::new(&python)
                    .arg("--version")
                    .output()
                    .map(|o| o.stdout)
                    .unwrap_or_default()
            )
            .trim()
        );
    }
    fs::write(&marker, &wanted).with_context(|| format!("write {}", marker.display()))?;
    Ok(python)
}

/// Where the Hesai SDK source is looked for.
fn hesai_sdk_dir(flag: Option<&Path>) -> PathBuf {
    flag.map(Path::to_path_buf)
        .or_else(|| std::env::var_os("LIDARXDP_HESAI_SDK").map(PathBuf::from))
        .unwrap_or_else(|| root().join("../shared/peers/HesaiLidar_SDK_2.0"))
}

/// The Hesai harness: built, or why its rows are skipped.
enum HesaiHarness {
    /// The harness binary.
    Built(PathBuf),
    /// The SDK source is not there (the message says where it was looked for).
    Missing(String),
}

/// Builds the Hesai harness against the SDK ([`HesaiHarness::Missing`] when the SDK is not
/// there).
///
/// Errors: a build tool missing, or the build failing.
fn hesai_harness(flag: Option<&Path>) -> Result<HesaiHarness> {
    let sdk = hesai_sdk_dir(flag);
    if !sdk.join("libhesai/CMakeLists.txt").exists() {
        let reason = format!(
            "no HesaiLidar_SDK_2.0 at {} (give --hesai-sdk DIR or LIDARXDP_HESAI_SDK)",
            sdk.display()
        );
        eprintln!("bench --peers: warning: {reason}; the Hesai rows are skipped");
        return Ok(HesaiHarness::Missing(reason));
    }
    let sdk = fs::canonicalize(&sdk).with_context(|| format!("resolve {}", sdk.display()))?;
    for (tool, pkg) in [("cmake", "cmake"), ("g++", "g++"), ("make", "make")] {
        if Command::new(tool).arg("--version").output().is_err() {
            bail!(
                "{tool} not found: the Hesai SDK harness needs it (`apt-get install {pkg}`; \
                 `cargo xtask setup` installs it)"
            );
        }
    }
    let build = root().join("target/peers/hesai-build");
    let t = Instant::now();
    run(Command::new("cmake")
        .arg("-S")
        .arg(root().join("bench/peers/hesai"))
        .arg("-B")
        .arg(&build)
        .arg(format!("-DHESAI_SDK_DIR={}", sdk.display()))
        .arg("-DCMAKE_BUILD_TYPE=Release")
        .stdout(std::process::Stdio::null()))
    .context("configure the Hesai SDK harness (cmake)")?;
    run(Command::new("cmake")
        .arg("--build")
        .arg(&build)
        .args(["-j2", "--target", "hesai_peer"])
        .stdout(std::process::Stdio::null()))
    .context("build the Hesai SDK harness")?;
    eprintln!(
        "bench --peers: Hesai SDK harness built from {} in {:.0} s",
        sdk.display(),
        t.elapsed().as_secs_f64()
    );
    Ok(HesaiHarness::Built(build.join("hesai_peer")))
}

/// Today's UTC date, `YYYY-MM-DD`.
pub fn utc_date() -> String {
    let days = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 86_400) as i64;
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Runs the whole comparison (see the module doc).
pub fn peers(
    tc: &BpfToolchain,
    quick: bool,
    out: Option<&Path>,
    hesai_sdk: Option<&Path>,
) -> Result<()> {
    let t = Instant::now();
    let data = std::env::var_os("LIDARXDP_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("../shared/data"));
    if !data.join("velodyne").is_dir() {
        bail!(
            "no captures at {} (the shared LiDAR captures; set LIDARXDP_DATA)",
            data.display()
        );
    }
    let obj = build_ebpf(tc)?;
    let (daemon, bench) = build_release(&obj)?;
    // Run copies: other builds in this tree must not swap the binaries between rounds.
    let bin = root().join("target/peers/bin");
    fs::create_dir_all(&bin).with_context(|| format!("create {}", bin.display()))?;
    let daemon_copy = bin.join("lidarxdp");
    let bench_copy = bin.join("lidarxdp-bench");
    for (from, to) in [(&daemon, &daemon_copy), (&bench, &bench_copy)] {
        let _ = fs::remove_file(to);
        fs::copy(from, to)
            .with_context(|| format!("copy {} to {}", from.display(), to.display()))?;
    }
    let python = venv()?;
    // The Python rows: lidarxdp's own wheel, in the same interpreter as the peers.
    let wheel = crate::python::pack_wheel()?;
    crate::python::install(&python, &wheel)?;
    let hesai = hesai_harness(hesai_sdk)?;
    let out = match out {
        Some(o) => o.to_path_buf(),
        None if quick => {
            std::env::temp_dir().join(format!("lidarxdp-peers-{}", std::process::id()))
        }
        None => root().join("bench/results").join(utc_date()).join("peers"),
    };
    let mut cmd = Command::new(&bench_copy);
    cmd.arg("peers")
        .arg("--daemon")
        .arg(&daemon_copy)
        .arg("--python")
        .arg(&python)
        .arg("--script")
        .arg(root().join("bench/peers/py/peer.py"))
        .arg("--data")
        .arg(&data)
        .arg("--work")
        .arg(root().join("target/peers/work"))
        .arg("--out")
        .arg(&out)
        .current_dir(root());
    match &hesai {
        HesaiHarness::Built(h) => cmd.arg("--hesai-peer").arg(h),
        HesaiHarness::Missing(reason) => cmd.arg("--hesai-missing").arg(reason),
    };
    if quick {
        cmd.arg("--quick");
    } else {
        cmd.arg("--docs")
            .arg(root().join("docs/benchmarks.md"))
            .arg("--docs-plot")
            .arg(root().join("docs/img/peers.svg"));
    }
    run(&mut cmd)?;
    eprintln!(
        "bench --peers: done in {:.0} s; results in {}",
        t.elapsed().as_secs_f64(),
        out.display()
    );
    Ok(())
}
