//! The one test kit of the workspace, shared by the integration tests (`userspace/tests`), the
//! benchmark harness (`bench/`) and `cargo xtask netns|demo`:
//!
//! - [`NetnsPair`]: two network namespaces ("sensor" and "host") joined by a veth pair, with
//!   names unique to the process and call (pid + counter), removed on drop (also when a test
//!   panics); MTU, static neighbours, extra links, link reset; [`in_netns`] runs a closure and
//!   [`exec_in`] a command inside a namespace (ip-netns(8), setns(2));
//! - [`Daemon`]: `lidarxdp run` started in a namespace, ready when it sends `READY=1` to its
//!   `$NOTIFY_SOCKET` ([`NotifySocket`], [`wait_ready`]; sd_notify(3)), stopped with SIGTERM
//!   and its final counters read back; [`replay`] a capture from the sensor namespace with `lidarxdp replay`;
//! - [`data`]: the shared captures (`../shared/data` beside the repository), [`privileged`],
//!   [`Staging`] (world-readable copies for tests that run the daemon as `nobody`),
//!   [`content_file`];
//! - [`build_dds_checkers`]: the independent Fast DDS and Cyclone DDS subscribers, compiled;
//! - kernel counters of a namespace: [`udp_counters`] (`/proc/net/snmp` Udp) and
//!   [`link_drops`] (`ip -s -j link` stats64).
//!
//! Everything here runs `ip` (iproute2) and panics with the command's stderr on failure in the
//! test-facing helpers; the `Result` variants ([`NetnsPair::create`], [`run`]) serve bench/xtask.
//! Tests create only their own namespaces and send traffic only inside them or to loopback.

mod daemon;
mod dds;
#[cfg(feature = "frames")]
mod frames;
mod kstats;
mod netns;
mod python;
mod staging;

pub use daemon::{
    Daemon, NotifySocket, assert_no_xsk_loss, daemon_exe, get, lookup, replay, replay_to, wait,
    wait_ready, xdp_attached,
};
pub use dds::{DdsCheckers, build_dds_checkers, dds_checker_sources};
#[cfg(feature = "frames")]
pub use frames::{ReceivedFrame, assert_frames_equal, collect_frames, point_bytes};
pub use kstats::{
    LinkDrops, UdpCounters, link_drops, parse_link_drops, parse_snmp_udp, udp_counters,
};
pub use netns::{NetnsPair, PairSpec, delete_netns, exec_in, in_netns, run, set_mtu, sh};
pub use python::{peers_python, python, python_available};
pub use staging::{Staging, content_file};

use std::path::{Path, PathBuf};

/// True when the tests run as root (CI does). Privileged tests return early with a message when
/// not root, unless `LIDARXDP_REQUIRE_PRIVILEGED=1` (set by `cargo xtask test`), where this
/// panics instead.
pub fn privileged() -> bool {
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        assert!(
            std::env::var_os("LIDARXDP_REQUIRE_PRIVILEGED").is_none(),
            "privileged test needs root (LIDARXDP_REQUIRE_PRIVILEGED is set)"
        );
        eprintln!("skipping: needs root (run through `cargo xtask test`)");
    }
    root
}

/// The workspace root (the folder holding `userspace/`), wherever the repository is cloned.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("testkit lives at <root>/userspace/testkit")
        .to_path_buf()
}

/// Path of `rel` in the shared captures folder, `<workspace root>/../shared/data/` (read in
/// place, never copied; see `shared/data/README.md` for provenance).
pub fn data(rel: &str) -> PathBuf {
    workspace_root().join("../shared/data").join(rel)
}
