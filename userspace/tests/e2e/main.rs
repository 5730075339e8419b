//! End-to-end tests of the daemon binary: XDP + AF_XDP in throwaway namespaces (privileged;
//! each test makes its own [`lidarxdp_testkit::NetnsPair`] with unique names, so they run in
//! parallel), and the replay / `run --listen` command-line checks over loopback. One test
//! binary, one module per former file. Run as root with `LIDARXDP_REQUIRE_PRIVILEGED=1` to fail
//! instead of skip when not root.

use lidarxdp_testkit as common;

mod e2e_backends;
mod e2e_clock_step;
mod e2e_config;
mod e2e_faults;
mod e2e_fragments;
mod e2e_ipv6;
mod e2e_metrics;
mod e2e_privs;
mod e2e_record_pcap;
mod e2e_reload;
mod e2e_wait;
mod e2e_xdp;
mod replay_loopback;
mod run_cli_listen;
