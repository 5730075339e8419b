//! `cargo xtask fuzz [--seconds N] [--target NAME]`: seeds the fuzz targets of `fuzz/` from the
//! shared captures and runs each for N seconds with cargo-fuzz (docs/fuzzing.md).
//!
//! 1. cargo-fuzz [`CARGO_FUZZ_VERSION`] is installed into `~/.cargo/bin` if missing (a debug
//!    build: it only drives cargo and libFuzzer, and builds in about half the time).
//! 2. `userspace/examples/fuzz_seeds.rs` writes `fuzz/corpus/<target>/seed-*` (git-ignored).
//! 3. `cargo fuzz build`, then `cargo fuzz run <target> -- -max_total_time=N` per target, with
//!    `RUSTC_BOOTSTRAP=1` (cargo-fuzz passes nightly-only `-Z` flags), AddressSanitizer and 16
//!    codegen units. A crash leaves its input in `fuzz/artifacts/<target>/` and fails the
//!    command after every target has run.
use std::{
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Result, bail};

use crate::{root, run, setup::cargo_bin};

/// cargo-fuzz release known to build and work with Rust 1.95.
pub const CARGO_FUZZ_VERSION: &str = "0.13.2";

/// Every fuzz target, in the order they run.
pub const TARGETS: &[&str] = &[
    "velodyne",
    "hesai",
    "ouster",
    "robosense",
    "reassembly",
    "protocol",
];

/// Build flags of `cargo fuzz build` and `run` (the same for both, or `run` rebuilds):
/// AddressSanitizer, and 16 codegen units instead of cargo-fuzz's 1 (the build takes half the
/// time for about the same fuzzing speed; see docs/fuzzing.md).
const BUILD_FLAGS: &[&str] = &["-s", "address", "--codegen-units", "16"];

fn ensure_cargo_fuzz() -> Result<()> {
    let bin = cargo_bin("cargo-fuzz");
    if let Ok(out) = Command::new(&bin).arg("--version").output()
        && String::from_utf8_lossy(&out.stdout).contains(CARGO_FUZZ_VERSION)
    {
        return Ok(());
    }
    let t = Instant::now();
    eprintln!("fuzz: installing cargo-fuzz {CARGO_FUZZ_VERSION} (about 1.5 min, once)");
    run(Command::new("cargo").args([
        "install",
        "cargo-fuzz",
        "--version",
        CARGO_FUZZ_VERSION,
        "--locked",
        "--debug",
    ]))?;
    eprintln!(
        "fuzz: cargo-fuzz installed in {:.0} s",
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `cargo fuzz SUBCOMMAND BUILD_FLAGS ARGS`.
fn cargo_fuzz(subcommand: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new("cargo");
    cmd.args(["fuzz", subcommand])
        .args(BUILD_FLAGS)
        .args(args)
        .current_dir(root())
        .env("RUSTC_BOOTSTRAP", "1")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS");
    cmd
}

/// Seeds the corpora, builds every target and runs `target` (or all) for `seconds` each.
/// `obj` is the XDP object the rest of xtask builds the library with, passed on so that
/// building the seed writer reuses the release build of `cargo xtask test`.
pub fn fuzz(obj: &Path, seconds: u64, target: Option<&str>) -> Result<()> {
    let targets: Vec<&str> = match target {
        Some(t) if TARGETS.contains(&t) => vec![t],
        Some(t) => bail!("unknown fuzz target '{t}'; valid: {}", TARGETS.join(", ")),
        None => TARGETS.to_vec(),
    };
    let total = Instant::now();
    ensure_cargo_fuzz()?;

    let t = Instant::now();
    // Built with `--workspace`, so the dependencies' features are unified as in `cargo test
    // --workspace --release`, whose build of this example is then reused; `cargo run -p
    // lidarxdp` resolved other features and rebuilt the library and its dependencies (6 min
    // of a CI run).
    run(Command::new("cargo")
        .args([
            "build",
            "--quiet",
            "--release",
            "--workspace",
            "--example",
            "fuzz_seeds",
        ])
        .current_dir(root())
        .env("LIDARXDP_BPF_OBJ", obj))?;
    run(
        Command::new(crate::target_dir().join("release/examples/fuzz_seeds"))
            .arg(root().join("fuzz/corpus"))
            .current_dir(root()),
    )?;
    eprintln!("fuzz: seeds written in {:.1} s", t.elapsed().as_secs_f64());

    let t = Instant::now();
    run(&mut cargo_fuzz("build", &[]))?;
    eprintln!(
        "fuzz: {} targets built in {:.1} s",
        TARGETS.len(),
        t.elapsed().as_secs_f64()
    );

    let mut failed = Vec::new();
    let mut times: Vec<(&str, Duration)> = Vec::new();
    for t in &targets {
        let start = Instant::now();
        let max_time = format!("-max_total_time={seconds}");
        let status = cargo_fuzz(
            "run",
            &[
                t,
                "--",
                &max_time,
                "-timeout=10",
                "-rss_limit_mb=2048",
                "-print_final_stats=1",
            ],
        )
        .status()?;
        times.push((t, start.elapsed()));
        if !status.success() {
            eprintln!("fuzz: {t} FAILED ({status}); the input is in fuzz/artifacts/{t}/");
            failed.push(*t);
        }
    }
    for (t, d) in &times {
        eprintln!("fuzz: {t}: {:.1} s", d.as_secs_f64());
    }
    eprintln!(
        "fuzz: {} targets in {:.0} s",
        targets.len(),
        total.elapsed().as_secs_f64()
    );
    if !failed.is_empty() {
        bail!(
            "fuzz targets failed: {} (reproduce: RUSTC_BOOTSTRAP=1 cargo fuzz run TARGET fuzz/artifacts/TARGET/FILE)",
            failed.join(", ")
        );
    }
    Ok(())
}
