//! `cargo xtask setup`: installs, idempotently, what building and running lidarxdp needs, from
//! Debian packages, crates.io, PyPI and npm only (docs/architecture.md, "Toolchain"):
//! - Debian packages: LLVM 22 (for bpf-linker), iproute2, ping;
//! - `bpf-linker` 0.13.0 built against LLVM 22 with `cargo install`;
//! - Debian's `rustc-web` 1.96 with its prebuilt `core` for `bpfel-unknown-none`, unpacked into
//!   a cache folder (never installed system-wide: it would shadow rustup's rustc);
//! - 2 MiB hugepages, reserved when fewer than wanted are free;
//! - the live view's three.js, `npm ci` in `web/` from its `package-lock.json`;
//! - a Python virtual environment in `<workspace root>/target/pyenv` with pinned PyPI packages
//!   (eclipse-zenoh, rosbags, numpy, mcap, mcap-ros2-support, websockets) for the independent
//!   checkers of the zenoh, recording and Foxglove tests (`userspace/tests/ros2/ros2_probe.py`, ...), rebuilt only when the pinned list changes.
use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result, bail};

use crate::run;

/// Debian packages needed to build bpf-linker and the daemon without its optional sinks, and
/// to run it in namespaces: all that `cargo xtask demo` needs.
const DEMO_APT_PACKAGES: &[&str] = &[
    "g++",
    // `objcopy` for `cargo xtask build`'s binary without debug information and its debug
    // file (docs/deploy.md, "Symbolising a crash"); g++ pulls it in too.
    "binutils",
    "llvm-22-dev",
    "libpolly-22-dev",
    "zlib1g-dev",
    "libzstd-dev",
    "iproute2",
    // The daemon's allocator: the `tikv-jemalloc-sys` crate builds jemalloc with its
    // `configure` script and make (issue 40).
    "make",
];

/// The further Debian packages the full daemon (DDS sink), the tests, the benches and their
/// independent checkers need.
const APT_PACKAGES: &[&str] = &[
    "iputils-ping",
    "tcpdump",
    "python3-venv",
    "openssl",
    // `cargo xtask bench --peers` builds Hesai's vendor SDK with CMake (issue 15).
    "cmake",
    // The live view's browser test (headless) and its screenshots.
    "chromium",
    // The DDS sink (issue 22): the `cyclors` crate builds its vendored Cyclone DDS with CMake
    // and generates its bindings with bindgen, which loads libclang.
    "libclang-dev",
    // The DDS tests' independent subscribers: Fast DDS 2.9 (C++) and Cyclone DDS 0.10.2 (C,
    // its IDL compiler `idlc`), Debian's builds.
    "libfastrtps-dev",
    "cyclonedds-dev",
    "cyclonedds-tools",
    // libfaketime: the clock-step test steps the daemon's CLOCK_REALTIME (never the machine's).
    "faketime",
];
/// Debian packages whose files make the BPF-capable rustc (unpacked, not installed).
/// Pinned to the version whose bpfel `core` matches aya-ebpf 0.2.1 (bookworm-security).
const RUSTC_DEBS: &[&str] = &[
    "rustc-web=1.96.0+dfsg1-1~deb12u2",
    "libstd-rust-web-1.96=1.96.0+dfsg1-1~deb12u2",
    "libstd-rust-web-dev=1.96.0+dfsg1-1~deb12u2",
    "libstd-rust-web-dev-bpf=1.96.0+dfsg1-1~deb12u2",
];
const BPF_LINKER_VERSION: &str = "0.13.0";
/// What `pip install` puts in the tests' Python environment, pinned exactly (with the
/// dependencies of rosbags, so a new upstream release cannot change a CI run). eclipse-zenoh
/// matches the `zenoh` crate of the daemon (Cargo.lock) so both speak the same protocol version.
pub const PYTHON_REQUIREMENTS: &[&str] = &[
    "eclipse-zenoh==1.10.2",
    "rosbags==0.11.9",
    "numpy==2.4.6",
    "ruamel.yaml==0.19.1",
    "lz4==4.4.5",
    "backports.zstd==1.8.0",
    "apsw==3.54.1.0",
    "typing_extensions==4.16.0",
    // Recordings (issue 14): the MCAP reader (summary, CRCs) and its ROS 2 CDR decoder.
    "mcap==1.6.0",
    "mcap-ros2-support==0.6.0",
    "zstandard==0.25.0",
    // The Foxglove WebSocket protocol test's independent client.
    "websockets==17.4",
    // The point layout tests' independent PCD reader, with its dependencies.
    "pypcd4==1.5.1",
    "pydantic==2.14.4",
    "pydantic_core==2.50.5",
    "annotated-types==0.8.0",
    "typing-inspection==0.4.5",
    "python-neo-lzf==0.3.5",
];
/// File in the environment holding the requirement list it was built from, written last.
const PYENV_MARKER: &str = "lidarxdp-requirements.txt";
/// Hugepages (2 MiB each) the daemon and tests want free: 64 = 128 MiB.
pub const HUGEPAGES_WANTED: u64 = 64;

/// Where the unpacked Debian rustc lives (`LIDARXDP_TOOLCHAIN_CACHE` overrides).
pub fn toolchain_dir() -> PathBuf {
    std::env::var_os("LIDARXDP_TOOLCHAIN_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/lidarxdp-toolchain"))
}

/// The BPF-capable rustc and the library path it needs.
pub struct BpfToolchain {
    /// Path of Debian's rustc 1.96.
    pub rustc: PathBuf,
    /// `LD_LIBRARY_PATH` for it.
    pub ld_library_path: PathBuf,
}

/// What a command needs set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// `cargo xtask demo`: the BPF toolchain, hugepages and `ip`; the daemon is built without
    /// its optional sinks, so no DDS, browser, Python or npm packages.
    Demo,
    /// Everything else: the full daemon, the tests and their checkers, the benches.
    Full,
}

/// Runs every set-up step `purpose` needs; cheap when everything is already there.
pub fn setup(purpose: Purpose) -> Result<BpfToolchain> {
    apt_packages(DEMO_APT_PACKAGES)?;
    if purpose == Purpose::Full {
        apt_packages(APT_PACKAGES)?;
    }
    bpf_linker()?;
    let tc = debian_rustc()?;
    hugepages(HUGEPAGES_WANTED)?;
    socket_buffer_limits();
    if purpose == Purpose::Full {
        python_env()?;
        web_packages()?;
    }
    Ok(tc)
}

/// File in `web/node_modules` holding the `package-lock.json` it was installed from.
const WEB_MARKER: &str = ".lidarxdp-package-lock.json";

/// The live view's npm packages (three.js): `npm ci` in `<workspace root>/web`, exactly as
/// `web/package-lock.json` pins them, when `web/node_modules` is missing or was installed from
/// another lockfile; `userspace/build.rs` embeds them in the daemon. Without `npm` on the
/// machine this only warns: the daemon still builds, and refuses `--view`.
fn web_packages() -> Result<()> {
    let web = crate::root().join("web");
    let lock = fs::read(web.join("package-lock.json")).context("read web/package-lock.json")?;
    let marker = web.join("node_modules").join(WEB_MARKER);
    if fs::read(&marker).is_ok_and(|m| m == lock) {
        return Ok(());
    }
    if Command::new("npm").arg("--version").output().is_err() {
        eprintln!(
            "setup: warning: npm not found; the live view's three.js is not installed and \
             `lidarxdp run --view` will be refused (install Node.js and npm, then run setup again)"
        );
        return Ok(());
    }
    eprintln!("setup: installing the live view's npm packages (npm ci in web/)");
    run(Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
        .current_dir(&web))?;
    fs::write(&marker, &lock).with_context(|| format!("write {}", marker.display()))?;
    Ok(())
}

/// The tests' Python virtual environment, `<workspace root>/target/pyenv` (inside the
/// git-ignored `target/`, wherever the repository is cloned).
pub fn pyenv_dir() -> PathBuf {
    crate::root().join("target/pyenv")
}

/// The interpreter of [`pyenv_dir`], which the tests find through `LIDARXDP_PYTHON`.
pub fn pyenv_python() -> PathBuf {
    pyenv_dir().join("bin/python")
}

/// Creates [`pyenv_dir`] with `python3 -m venv` and installs [`PYTHON_REQUIREMENTS`] from PyPI;
/// does nothing when the marker file holds the same list (a changed list, or an interrupted
/// earlier run, rebuilds the environment from scratch).
fn python_env() -> Result<()> {
    let dir = pyenv_dir();
    let wanted = PYTHON_REQUIREMENTS.join("\n") + "\n";
    let marker = dir.join(PYENV_MARKER);
    if pyenv_python().exists() && fs::read_to_string(&marker).is_ok_and(|m| m == wanted) {
        return Ok(());
    }
    eprintln!(
        "setup: creating the Python environment {} ({})",
        dir.display(),
        PYTHON_REQUIREMENTS.join(", ")
    );
    if dir.exists() {
        fs::remove_dir_all(&dir).with_context(|| format!("remove {}", dir.display()))?;
    }
    run(Command::new("python3").arg("-m").arg("venv").arg(&dir))?;
    let requirements = dir.join("requirements.txt");
    fs::write(&requirements, &wanted)
        .with_context(|| format!("write {}", requirements.display()))?;
    run(Command::new(dir.join("bin/pip"))
        .args([
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-input",
            "-r",
        ])
        .arg(&requirements))?;
    fs::write(&marker, &wanted).with_context(|| format!("write {}", marker.display()))?;
    Ok(())
}

fn dpkg_installed(pkg: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", pkg])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
        .unwrap_or(false)
}

fn apt_packages(wanted: &[&str]) -> Result<()> {
    let missing: Vec<&str> = wanted
        .iter()
        .copied()
        .filter(|p| !dpkg_installed(p))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!("setup: installing Debian packages {missing:?}");
    let install = |pkgs: &[&str]| {
        Command::new("apt-get")
            .args(["install", "-y", "-qq", "--no-install-recommends"])
            .args(pkgs)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    };
    if !install(&missing) {
        run(Command::new("apt-get").args(["update", "-qq"]))?;
        if !install(&missing) {
            bail!("apt-get install {missing:?} failed");
        }
    }
    Ok(())
}

/// `$CARGO_HOME/bin/NAME` (`~/.cargo/bin`), where `cargo install` puts binaries.
pub fn cargo_bin(name: &str) -> PathBuf {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cargo")
        });
    home.join("bin").join(name)
}

fn bpf_linker() -> Result<()> {
    let bin = cargo_bin("bpf-linker");
    if let Ok(out) = Command::new(&bin).arg("--version").output()
        && String::from_utf8_lossy(&out.stdout).contains(BPF_LINKER_VERSION)
    {
        return Ok(());
    }
    eprintln!(
        "setup: building bpf-linker {BPF_LINKER_VERSION} against LLVM 22 (a few minutes, once)"
    );
    run(Command::new("cargo")
        .args([
            "install",
            "bpf-linker",
            "--version",
            BPF_LINKER_VERSION,
            "--no-default-features",
            "--features",
            "llvm-22",
            "--locked",
        ])
        .env("LLVM_PREFIX", "/usr/lib/llvm-22"))
}

fn debian_rustc() -> Result<BpfToolchain> {
    let dir = toolchain_dir();
    let root = dir.join("root");
    let tc = BpfToolchain {
        rustc: root.join("usr/bin/rustc"),
        ld_library_path: root.join("usr/lib/x86_64-linux-gnu"),
    };
    let bpf_core = root.join("usr/lib/rustlib/bpfel-unknown-none");
    if tc.rustc.exists() && bpf_core.exists() {
        return Ok(tc);
    }
    eprintln!(
        "setup: fetching Debian rustc-web 1.96 with the bpfel core into {}",
        dir.display()
    );
    let debs = dir.join("debs");
    let _ = fs::remove_dir_all(&debs);
    fs::create_dir_all(&debs).with_context(|| format!("create {}", debs.display()))?;
    let download = || {
        Command::new("apt-get")
            .arg("download")
            .args(RUSTC_DEBS)
            .current_dir(&debs)
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    };
    if !download() {
        run(Command::new("apt-get").args(["update", "-qq"]))?;
        if !download() {
            bail!("apt-get download {RUSTC_DEBS:?} failed");
        }
    }
    let tmp = dir.join("root.partial");
    let _ = fs::remove_dir_all(&tmp);
    fs::create_dir_all(&tmp)?;
    for entry in fs::read_dir(&debs)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "deb") {
            run(Command::new("dpkg").arg("-x").arg(&path).arg(&tmp))?;
        }
    }
    let _ = fs::remove_dir_all(&root);
    fs::rename(&tmp, &root)?;
    if !tc.rustc.exists() || !bpf_core.exists() {
        bail!("unpacked Debian rustc is incomplete in {}", root.display());
    }
    Ok(tc)
}

fn meminfo(field: &str) -> Result<u64> {
    let text = fs::read_to_string("/proc/meminfo")?;
    text.lines()
        .find_map(|l| {
            l.strip_prefix(field)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .with_context(|| format!("{field} missing from /proc/meminfo"))
}

/// Largest socket buffers unprivileged sockets may ask for (`net.core.rmem_max`,
/// `net.core.wmem_max`), bytes: 32 MiB, what a DDS subscriber of 15 MB best-effort point clouds
/// needs to hold a whole frame (docs/deploy.md, "ROS 2 over DDS"). The DDS tests' independent
/// subscribers ask for that much.
pub const SOCKET_BUFFER_MAX: u64 = 32 << 20;

/// Raises `net.core.rmem_max` and `net.core.wmem_max` to at least [`SOCKET_BUFFER_MAX`] (never
/// lowers them). These are global limits, writable only from the initial network namespace.
/// Not fatal when they cannot be written (a warning says so).
pub fn socket_buffer_limits() {
    for key in ["rmem_max", "wmem_max"] {
        let path = Path::new("/proc/sys/net/core").join(key);
        let now: u64 = fs::read_to_string(&path)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        if now >= SOCKET_BUFFER_MAX {
            continue;
        }
        match fs::write(&path, SOCKET_BUFFER_MAX.to_string()) {
            Ok(()) => eprintln!("setup: net.core.{key} {now} -> {SOCKET_BUFFER_MAX}"),
            Err(e) => eprintln!("setup: warning: cannot raise net.core.{key}: {e}"),
        }
    }
}

/// Makes sure at least `wanted` 2 MiB hugepages are free, raising `vm.nr_hugepages`.
/// Not fatal when the kernel cannot provide them (the daemon then falls back to normal pages
/// with a warning).
pub fn hugepages(wanted: u64) -> Result<()> {
    let free = meminfo("HugePages_Free:")?;
    if free >= wanted {
        return Ok(());
    }
    let total = meminfo("HugePages_Total:")?;
    let target = total + (wanted - free);
    let path = Path::new("/proc/sys/vm/nr_hugepages");
    if let Err(e) = fs::write(path, target.to_string()) {
        eprintln!("setup: warning: cannot raise vm.nr_hugepages to {target}: {e}");
        return Ok(());
    }
    let now = meminfo("HugePages_Free:")?;
    if now < wanted {
        eprintln!(
            "setup: warning: only {now} of {wanted} hugepages free after raising nr_hugepages"
        );
    } else {
        eprintln!("setup: reserved hugepages: {now} free");
    }
    Ok(())
}
