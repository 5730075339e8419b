#!/usr/bin/env python3
"""ouster-sdk's reading of the IMU packets of an Ouster capture, as one JSON array on stdout,
for lidarxdp's IMU test (userspace/tests/ros2/zenoh_health.rs). Run with the peers'
environment (bench/peers/py/requirements.txt pins ouster-sdk); imports no lidarxdp code.

Usage: ouster_imu_ref.py CAPTURE_WITHOUT_EXTENSION   (reads CAPTURE.pcap and CAPTURE.json)

Each element: sys_ts, accel_ts, gyro_ts (ns), linear_acceleration (m/s2) and angular_velocity
(rad/s) as ouster-sdk's ImuPacket gives them (accel(), gyro()), in packet order.
"""

import json
import sys

from ouster.sdk import core, pcap


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    base = sys.argv[1]
    with open(base + ".json") as f:
        info = core.SensorInfo(f.read())
    out = []
    for item in pcap.PcapPacketSource(base + ".pcap", sensor_info=[info]):
        pkt = item[1] if isinstance(item, tuple) else item
        if not isinstance(pkt, core.ImuPacket):
            continue
        accel = [float(v) for v in pkt.accel().reshape(-1)[:3]]
        gyro = [float(v) for v in pkt.gyro().reshape(-1)[:3]]
        out.append({
            "sys_ts": int(pkt.sys_ts()),
            "accel_ts": int(pkt.accel_ts()),
            "gyro_ts": int(pkt.gyro_ts()),
            "linear_acceleration": accel,
            "angular_velocity": gyro,
        })
    print(json.dumps(out))


if __name__ == "__main__":
    main()
