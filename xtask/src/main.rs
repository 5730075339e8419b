//! Developer tasks for lidarxdp: `cargo xtask <command>`.
//!
//! Every command first runs `setup` (idempotent): Debian packages, bpf-linker, the BPF-capable
//! rustc, hugepages. See README.md.
mod demo;
mod fuzz;
mod netns;
mod peers;
mod python;
mod setup;
mod soak;

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "lidarxdp developer tasks")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Install the toolchain pieces and reserve hugepages (idempotent).
    Setup,
    /// Build the XDP program (ebpf/) for bpfel-unknown-none.
    BuildEbpf,
    /// Build the XDP program and the daemon (release), with the object embedded.
    Build,
    /// Build everything and run the daemon attached to an interface (extra args go to `lidarxdp run`).
    BuildAndLoad {
        /// Interface to attach the XDP program to.
        #[arg(long)]
        iface: String,
        /// Further `lidarxdp run` arguments, after `--`.
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// Create or remove the demo's network namespaces.
    Netns {
        #[arg(value_parser = ["up", "down"])]
        action: String,
    },
    /// Replay the bundled VLP-16 capture through XDP/AF_XDP to a subscriber and print a summary.
    Demo {
        /// Capture to replay (default: the bundled VLP-16 dual-return capture).
        #[arg(long)]
        pcap: Option<PathBuf>,
        /// Calibration for the capture.
        #[arg(long)]
        calibration: Option<PathBuf>,
    },
    /// Run formatting and lint checks, unit tests, the privileged integration tests and a
    /// quick benchmark suite (smoke test), a 10 s run of every fuzz target, and the Python
    /// package's tests against its wheel.
    Test,
    /// Build the Python package's abi3 wheel (python/) into target/wheels.
    Python,
    /// Build everything and run the AF_XDP vs socket benchmark suite (root; see
    /// docs/benchmarks.md).
    Bench {
        /// One repetition, short durations, a subset (under 2 minutes).
        #[arg(long)]
        quick: bool,
        /// Output directory (default bench/results/<YYYY-MM-DD>/).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Capture the generator loops (default: the bundled VLP-16 dual-return capture).
        #[arg(long)]
        pcap: Option<PathBuf>,
        /// Instead of the suite: lidarxdp against velodyne-decoder, ouster-sdk and Hesai's
        /// SDK on the shared captures (issue 15; no root; default output
        /// bench/results/<YYYY-MM-DD>/peers/, and a full run rewrites the peers section of
        /// docs/benchmarks.md).
        #[arg(long)]
        peers: bool,
        /// With --peers: HesaiLidar_SDK_2.0 source (default $LIDARXDP_HESAI_SDK, else
        /// <repo>/../shared/peers/HesaiLidar_SDK_2.0).
        #[arg(long, requires = "peers")]
        hesai_sdk: Option<PathBuf>,
    },
    /// Build everything and soak one daemon for an hour (root; issue 40): 10 VLP-16s, every
    /// sink on with steady and churning subscribers, three faults; samples the daemon's memory
    /// and says whether it stayed flat and every steady subscriber got every frame
    /// (xtask/src/soak.rs). A run of 30 minutes or more rewrites the soak section of
    /// docs/benchmarks.md unless --no-docs.
    Soak {
        /// Length of the run (the generator's sending time), minutes, in (0, 1440]; fractions
        /// allowed (0.5).
        #[arg(long, default_value_t = 60.0)]
        minutes: f64,
        /// Output directory (default bench/results/<YYYY-MM-DD>-soak/).
        #[arg(long)]
        out: Option<PathBuf>,
        /// The VLP-16 capture looped (default: the dual-return capture in
        /// ../shared/data/velodyne/vlp16/).
        #[arg(long)]
        pcap: Option<PathBuf>,
        /// Seconds between two samples of the daemon, in [1, 60].
        #[arg(long, default_value_t = 5.0)]
        sample_s: f64,
        /// Minutes of warm-up before the growth is measured, in [0, --minutes).
        #[arg(long, default_value_t = 5.0)]
        warmup_minutes: f64,
        /// Leave docs/benchmarks.md as it is (by default a run of 30 minutes or more rewrites
        /// its soak section and docs/soak-rss.svg).
        #[arg(long)]
        no_docs: bool,
    },
    /// Seed the fuzz targets from the shared captures and run them (docs/fuzzing.md).
    Fuzz {
        /// Seconds per target.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// Run only this target (velodyne, hesai, ouster, robosense, reassembly, protocol).
        #[arg(long)]
        target: Option<String>,
    },
}

/// Repository root (the parent of xtask/).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

/// Runs a command, failing with its name when it exits non-zero.
pub fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().with_context(|| format!("spawn {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed: {status}");
    }
    Ok(())
}

/// Cargo's target directory: `$CARGO_TARGET_DIR` (relative to the workspace root when
/// relative), else `<root>/target`.
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) if !d.is_empty() => root().join(d),
        _ => root().join("target"),
    }
}

/// Path of the built XDP object.
pub fn ebpf_object() -> PathBuf {
    root().join("ebpf/target/bpfel-unknown-none/release/lidarxdp")
}

fn build_ebpf(tc: &setup::BpfToolchain) -> Result<PathBuf> {
    let t = Instant::now();
    run(Command::new("cargo")
        .args(["build", "--release", "--target", "bpfel-unknown-none"])
        .current_dir(root().join("ebpf"))
        .env("RUSTC", &tc.rustc)
        .env("LD_LIBRARY_PATH", &tc.ld_library_path)
        .env("RUSTC_BOOTSTRAP", "1")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        // The XDP crate has its own compiler and its own target folder (`ebpf_object`), even
        // when the workspace's is moved with CARGO_TARGET_DIR.
        .env_remove("CARGO_TARGET_DIR"))?;
    eprintln!(
        "build-ebpf: {} in {:.1} s",
        ebpf_object().display(),
        t.elapsed().as_secs_f64()
    );
    Ok(ebpf_object())
}

/// Which of the daemon's optional sinks (cargo features `zenoh`, `dds`, `foxglove`, `view`)
/// a build includes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sinks {
    /// All of them: `cargo xtask build`, the daemon an operator installs.
    All,
    /// None: `cargo xtask demo` (XDP, AF_XDP, the decoders and the TCP publisher), so a first
    /// demo on a fresh machine compiles neither zenoh, nor Cyclone DDS, nor the Foxglove
    /// server's tokio stack.
    None,
}

/// Builds the daemon in release mode with the XDP object embedded; returns the binary path.
fn build_daemon(obj: &Path, sinks: Sinks) -> Result<PathBuf> {
    let mut cmd = Command::new("cargo");
    cmd.args(["build", "--release", "-p", "lidarxdp", "--bin", "lidarxdp"]);
    if sinks == Sinks::None {
        cmd.arg("--no-default-features");
    }
    run(cmd.current_dir(root()).env("LIDARXDP_BPF_OBJ", obj))?;
    Ok(target_dir().join("release/lidarxdp"))
}

/// The shipped pair `cargo xtask build` writes from the cargo-built daemon `bin`, in
/// `<target>/release/dist/`: `lidarxdp`, without debug information, and `lidarxdp.debug`, the
/// debug information alone (DWARF sections compressed with zlib). Returns their paths
/// `(binary, debug file)`.
///
/// The binary keeps its symbol table (`--strip-debug`, not `--strip-all`): a panic's
/// backtrace and `perf` still name functions without the debug file, for 1 % of the size. It
/// carries a `.gnu_debuglink` to `lidarxdp.debug` (name and CRC) and both keep the same
/// `.note.gnu.build-id`, so gdb, `addr2line` and `eu-stack` match them (docs/deploy.md,
/// "Symbolising a crash"). `bin` itself is left as cargo wrote it: `cargo test` and the demo
/// use it, and cargo would put its own copy back on the next build anyway.
///
/// Errors: `objcopy` (GNU binutils) missing or failing, or the dist directory not writable.
fn dist(bin: &Path) -> Result<(PathBuf, PathBuf)> {
    let dir = bin
        .parent()
        .context("the daemon binary has a directory")?
        .join("dist");
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    let shipped = dir.join("lidarxdp");
    let debug = dir.join("lidarxdp.debug");
    run(Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg("--compress-debug-sections=zlib")
        .arg(bin)
        .arg(&debug))?;
    // The link names the debug file as found: run from `dir` so only its file name is stored.
    run(Command::new("objcopy")
        .arg("--strip-debug")
        .arg("--add-gnu-debuglink=lidarxdp.debug")
        .arg(bin)
        .arg(&shipped)
        .current_dir(&dir))?;
    Ok((shipped, debug))
}

/// Size of the file at `p` in MB (10^6 bytes), for the build summary.
fn megabytes(p: &Path) -> Result<f64> {
    let len = std::fs::metadata(p)
        .with_context(|| format!("stat {}", p.display()))?
        .len();
    Ok(len as f64 / 1e6)
}

/// Builds the release daemon, the bench harness (`lidarxdp-bench`) and every library, the
/// Python extension module (`lib_lidarxdp.so`) among them, against the XDP object `obj`;
/// returns the paths `(daemon, bench)`.
///
/// One `cargo build --workspace` that also names an example: an example needs the
/// dev-dependencies, so cargo resolves the dependencies' features exactly as `cargo test
/// --workspace --release` does, and after `cargo xtask test` nothing but the harness and the
/// extension module is compiled. Built with `-p`, the features came out otherwise and the
/// library and its dependencies were compiled twice more (14 min of a CI run; the wheel,
/// built by maturin with `-p`, cost 4 min more).
pub fn build_release(obj: &Path) -> Result<(PathBuf, PathBuf)> {
    run(Command::new("cargo")
        .args([
            "build",
            "--release",
            "--workspace",
            "--lib",
            "--bin",
            "lidarxdp",
            "--bin",
            "lidarxdp-bench",
            "--example",
            "fuzz_seeds",
        ])
        .current_dir(root())
        .env("LIDARXDP_BPF_OBJ", obj))?;
    Ok((
        target_dir().join("release/lidarxdp"),
        target_dir().join("release/lidarxdp-bench"),
    ))
}

/// Builds the XDP object, the release daemon and the bench harness, then runs the suite.
fn bench(
    tc: &setup::BpfToolchain,
    quick: bool,
    out: Option<&Path>,
    pcap: Option<&Path>,
) -> Result<()> {
    let obj = build_ebpf(tc)?;
    let (daemon, bench) = build_release(&obj)?;
    let mut cmd = Command::new(bench);
    cmd.arg("suite")
        .arg("--daemon")
        .arg(&daemon)
        .current_dir(root());
    if quick {
        cmd.arg("--quick");
    }
    if let Some(o) = out {
        cmd.arg("--out").arg(o);
    }
    if let Some(p) = pcap {
        cmd.arg("--pcap").arg(p);
    }
    run(&mut cmd)
}

/// `cargo xtask bench --quick` into a temporary directory; fails unless the suite wrote its
/// summary, CSVs and plots.
fn bench_smoke(tc: &setup::BpfToolchain) -> Result<()> {
    let t = Instant::now();
    let dir = std::env::temp_dir().join(format!("lidarxdp-bench-smoke-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    bench(tc, true, Some(&dir), None)?;
    for f in [
        "summary.md",
        "ladder.csv",
        "contention.csv",
        "stall.csv",
        "latency.csv",
        "loss_vs_rate.svg",
        "stall_tolerance.svg",
    ] {
        let p = dir.join(f);
        if std::fs::metadata(&p).map_or(true, |m| m.len() == 0) {
            bail!("bench smoke test: {} missing or empty", p.display());
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!(
        "test: bench --quick smoke test passed in {:.0} s",
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

fn test(obj: &Path) -> Result<()> {
    let r = root();
    run(Command::new("cargo")
        .args(["fmt", "--all", "--check"])
        .current_dir(&r))?;
    run(Command::new("cargo")
        .args(["fmt", "--check", "--manifest-path", "ebpf/Cargo.toml"])
        .current_dir(&r))?;
    run(Command::new("cargo")
        .args(["fmt", "--check", "--manifest-path", "fuzz/Cargo.toml"])
        .current_dir(&r))?;
    run(Command::new("cargo")
        .args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ])
        .current_dir(&r)
        .env("LIDARXDP_BPF_OBJ", obj))?;
    // The privileged tests fail rather than skip under `cargo xtask test` (CI runs as root); a
    // plain `cargo test` as a normal user skips them with a message.
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        bail!("cargo xtask test runs privileged tests (XDP, AF_XDP, namespaces): run it as root");
    }
    // The peers' pinned venv (ouster-sdk): the IMU test's second reference.
    let peers_python = peers::venv()?;
    let mut cmd = Command::new("cargo");
    cmd.args(["test", "--workspace", "--release"])
        .current_dir(&r)
        .env("LIDARXDP_BPF_OBJ", obj)
        .env("LIDARXDP_REQUIRE_PRIVILEGED", "1")
        // The zenoh tests' independent ROS 2 client runs in the environment `setup` made.
        .env("LIDARXDP_PYTHON", setup::pyenv_python())
        .env("LIDARXDP_PEERS_PYTHON", &peers_python);
    run(&mut cmd)?;
    // A short run of every fuzz target (seeded from the captures), so a decoder change that
    // panics on the fuzzers' seeds or their first mutations fails here.
    fuzz::fuzz(obj, 10, None)?;
    // The Python package, built as its users get it, tested against the CLI the tests above
    // built, and fed the fuzz corpus just grown.
    let wheel = python::build_wheel(obj)?;
    python::test(&wheel, &target_dir().join("release/lidarxdp"))
}

/// Removes what `cargo run` told xtask about itself (`CARGO_MANIFEST_DIR`, `CARGO_PKG_*`, ...)
/// before xtask runs cargo: inherited, it reaches the build scripts of the builds xtask starts,
/// and a build script that reruns when one of them changes (ring's, on `CARGO_MANIFEST_DIR`)
/// makes those builds differ from a plain `cargo build`, which then compiles ring, rustls and
/// zenoh again (4 min), and back.
fn forget_cargo_run_env() {
    const SET_BY_CARGO_RUN: [&str; 5] = [
        "CARGO_MANIFEST_DIR",
        "CARGO_MANIFEST_PATH",
        "CARGO_CRATE_NAME",
        "CARGO_BIN_NAME",
        "CARGO_PRIMARY_PACKAGE",
    ];
    for (key, _) in std::env::vars_os() {
        let Some(k) = key.to_str() else { continue };
        if SET_BY_CARGO_RUN.contains(&k) || k.starts_with("CARGO_PKG_") {
            // SAFETY: called first thing in `main`, before xtask starts any thread, so no other
            // thread reads or writes the environment concurrently.
            unsafe { std::env::remove_var(&key) };
        }
    }
}

fn main() -> Result<()> {
    forget_cargo_run_env();
    let cli = Cli::parse();
    let t = Instant::now();
    let purpose = match cli.cmd {
        Cmd::Demo { .. } => setup::Purpose::Demo,
        _ => setup::Purpose::Full,
    };
    // The soak's checks (root, the shared capture, its options) before the set-up and the
    // build, so that a missing capture or a plain user is told at once.
    let soak_plan = match &cli.cmd {
        Cmd::Soak {
            minutes,
            out,
            pcap,
            sample_s,
            warmup_minutes,
            no_docs,
        } => Some(soak::check(soak::Options {
            minutes: *minutes,
            out: out.clone(),
            pcap: pcap.clone(),
            sample_s: *sample_s,
            warmup_minutes: *warmup_minutes,
            no_docs: *no_docs,
        })?),
        _ => None,
    };
    let tc = setup::setup(purpose)?;
    match cli.cmd {
        Cmd::Setup => {}
        Cmd::BuildEbpf => {
            build_ebpf(&tc)?;
        }
        Cmd::Build => {
            let obj = build_ebpf(&tc)?;
            let bin = build_daemon(&obj, Sinks::All)?;
            let (shipped, debug) = dist(&bin)?;
            eprintln!(
                "build: {} ({:.1} MB, with debug information) in {:.1} s",
                bin.display(),
                megabytes(&bin)?,
                t.elapsed().as_secs_f64()
            );
            eprintln!(
                "build: to ship: {} ({:.1} MB) and {} ({:.1} MB, its debug information)",
                shipped.display(),
                megabytes(&shipped)?,
                debug.display(),
                megabytes(&debug)?
            );
        }
        Cmd::BuildAndLoad { iface, args } => {
            let obj = build_ebpf(&tc)?;
            let bin = build_daemon(&obj, Sinks::All)?;
            run(Command::new(bin)
                .args(["run", "--iface", &iface])
                .args(args))?;
        }
        Cmd::Netns { action } => match action.as_str() {
            "up" => netns::up()?,
            _ => netns::down(),
        },
        Cmd::Demo { pcap, calibration } => {
            let obj = build_ebpf(&tc)?;
            let bin = build_daemon(&obj, Sinks::None)?;
            demo::demo(&bin, pcap, calibration)?;
        }
        Cmd::Bench {
            quick,
            out,
            pcap,
            peers: true,
            hesai_sdk,
        } => {
            if pcap.is_some() {
                anyhow::bail!("--pcap is for the suite; --peers uses every shared capture");
            }
            peers::peers(&tc, quick, out.as_deref(), hesai_sdk.as_deref())?;
        }
        Cmd::Bench {
            quick, out, pcap, ..
        } => {
            bench(&tc, quick, out.as_deref(), pcap.as_deref())?;
        }
        Cmd::Python => {
            python::build_wheel(&build_ebpf(&tc)?)?;
        }
        Cmd::Test => {
            let obj = build_ebpf(&tc)?;
            test(&obj)?;
            bench_smoke(&tc)?;
            eprintln!("test: all passed in {:.0} s", t.elapsed().as_secs_f64());
        }
        Cmd::Soak { .. } => {
            let plan = soak_plan.context("the soak was checked above")?;
            let obj = build_ebpf(&tc)?;
            let (daemon, bench) = build_release(&obj)?;
            soak::soak(&plan, &daemon, &bench)?;
        }
        Cmd::Fuzz { seconds, target } => {
            let obj = build_ebpf(&tc)?;
            fuzz::fuzz(&obj, seconds, target.as_deref())?;
        }
    }
    Ok(())
}
