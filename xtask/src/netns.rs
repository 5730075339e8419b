//! `cargo xtask netns up|down`: the demo's test network. Two namespaces joined by one veth pair
//! with a single RX/TX queue each (AF_XDP binds queue 0):
//!
//! ```text
//!  netns lxdemo-sensor                    netns lxdemo-host
//!  lxd-sensor 10.77.0.1/24  <--- veth --->  lxd-host 10.77.0.2/24   (XDP + AF_XDP here)
//! ```
use std::process::Command;

use anyhow::Result;

use crate::{run, run_quiet};

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

/// Creates the namespaces and veth pair (removing leftovers from an earlier run first).
pub fn up() -> Result<()> {
    down();
    run(Command::new("ip").args(["netns", "add", SENSOR_NS]))?;
    run(Command::new("ip").args(["netns", "add", HOST_NS]))?;
    run(Command::new("ip").args([
        "link",
        "add",
        SENSOR_IF,
        "numrxqueues",
        "1",
        "numtxqueues",
        "1",
        "netns",
        SENSOR_NS,
        "type",
        "veth",
        "peer",
        "name",
        HOST_IF,
        "numrxqueues",
        "1",
        "numtxqueues",
        "1",
        "netns",
        HOST_NS,
    ]))?;
    for (ns, ifname, ip) in [
        (SENSOR_NS, SENSOR_IF, SENSOR_IP),
        (HOST_NS, HOST_IF, HOST_IP),
    ] {
        run(Command::new("ip").args([
            "-n",
            ns,
            "addr",
            "add",
            &format!("{ip}/24"),
            "dev",
            ifname,
        ]))?;
        run(Command::new("ip").args(["-n", ns, "link", "set", ifname, "up"]))?;
        run(Command::new("ip").args(["-n", ns, "link", "set", "lo", "up"]))?;
    }
    eprintln!("netns: {SENSOR_NS}/{SENSOR_IF} {SENSOR_IP} <-> {HOST_NS}/{HOST_IF} {HOST_IP}");
    Ok(())
}

/// Removes the namespaces (and with them the veth pair); silent when absent.
pub fn down() {
    for ns in [SENSOR_NS, HOST_NS] {
        let _ = run_quiet(Command::new("ip").args(["netns", "del", ns]));
    }
}
