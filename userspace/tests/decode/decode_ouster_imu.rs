//! Ouster IMU packets of the shared captures (issue 26): every datagram to port 7503 parses,
//! and the first sample of the OS0-128 capture has the values Python's `struct.unpack('<QQQ6f')`
//! reads from its bytes.

use std::path::Path;

use lidarxdp::offline::udp_payloads;
use lidarxdp_core::sensor::ouster::imu;

fn samples(rel: &str) -> Vec<imu::ImuSample> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/data/ouster")
        .join(rel);
    udp_payloads(&path)
        .unwrap()
        .map(|d| d.unwrap())
        .filter(|d| d.dst_port == 7503)
        .map(|d| imu::parse(&d.payload).unwrap())
        .collect()
}

/// Ten IMU packets in each of the OS0-128, OS0-32 and OS2-128 captures; sensor times rising;
/// the OS0-128's first sample field by field (the f32 values as Python prints them, widened).
#[test]
// The literals are the f32 values exactly as Python prints them; clippy reads some as too precise.
#[allow(clippy::excessive_precision)]
fn imu_packets_of_the_ouster_captures() {
    let os0 = samples("os0-128/OS-0-128-U1_v2.3.0_1024x10.pcap");
    assert_eq!(os0.len(), 10);
    let s = os0[0];
    assert_eq!(
        (s.sys_ts_ns, s.accel_ts_ns, s.gyro_ts_ns),
        (1_462_581_976_430, 1_462_582_190_980, 1_462_582_413_750)
    );
    assert_eq!(
        s.accel_g.map(f64::from),
        [0.1171875, 0.00634765625, 1.04150390625]
    );
    assert_eq!(
        s.gyro_dps,
        [-0.54168701171875, -0.91552734375, 0.40435791015625]
    );
    for rel in [
        "os0-32/OS-0-32-U1_v2.2.0_1024x10.pcap",
        "os2-128/OS-2-128-U1_v2.3.0_1024x10.pcap",
    ] {
        let v = samples(rel);
        assert_eq!(v.len(), 10, "{rel}");
        assert!(
            v.windows(2).all(|w| w[0].accel_ts_ns < w[1].accel_ts_ns),
            "{rel}"
        );
    }
    assert!(os0.windows(2).all(|w| w[0].accel_ts_ns < w[1].accel_ts_ns));
}
