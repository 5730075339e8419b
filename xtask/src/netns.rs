//! `cargo xtask netns up|down`: the demo's test network, made by the test kit
//! ([`lidarxdp_testkit::NetnsPair`]) with fixed names. Two namespaces joined by one veth pair
//! with a single RX/TX queue each (AF_XDP binds queue 0):
//!
//! ```text
//!  netns lxdemo-sensor                    netns lxdemo-host
//!  lxd-sensor 10.77.0.1/24  <--- veth --->  lxd-host 10.77.0.2/24   (XDP + AF_XDP here)
//! ```
use anyhow::Result;
use lidarxdp_testkit::{NetnsPair, PairSpec, delete_netns};

/// Sensor-side namespace (the replayer runs here).
pub const SENSOR_NS: &str = "lxdemo-sensor";
/// Host-side namespace (the daemon runs here).
pub const HOST_NS: &str = "lxdemo-host";
/// Sensor-side veth.
pub const SENSOR_IF: &str = "lxd-sensor";
/// Host-side veth, where the XDP program is attached.
pub const HOST_IF: &str = "lxd-host";
/// Sensor-side address.
pub const SENSOR_IP: &str = "10.77.0.1";
/// Host-side address.
pub const HOST_IP: &str = "10.77.0.2";

/// Creates the namespaces and veth pair (removing leftovers from an earlier run first) and
/// leaves them in place for [`down`].
pub fn up() -> Result<()> {
    down();
    NetnsPair::create(PairSpec::named(
        SENSOR_NS, HOST_NS, SENSOR_IF, HOST_IF, SENSOR_IP, HOST_IP,
    ))?
    .persist();
    eprintln!("netns: {SENSOR_NS}/{SENSOR_IF} {SENSOR_IP} <-> {HOST_NS}/{HOST_IF} {HOST_IP}");
    Ok(())
}

/// Removes the namespaces (and with them the veth pair); silent when absent.
pub fn down() {
    for ns in [SENSOR_NS, HOST_NS] {
        delete_netns(ns);
    }
}
