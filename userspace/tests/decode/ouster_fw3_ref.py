#!/usr/bin/env python3
"""ouster-sdk's reading of Ouster lidar packets, as one JSON object on stdout, for lidarxdp's
firmware 3.x test (userspace/tests/decode/decode_ouster_fw3.rs). Run with the peers'
environment (bench/peers/py/requirements.txt pins ouster-sdk 1.0.1); imports no lidarxdp code.

Usage: ouster_fw3_ref.py METADATA.json PACKETS.bin

PACKETS.bin: the lidar payloads, each as a u32 little-endian length then its bytes.

Output:
* "format": what ouster-sdk made of the metadata: udp_profile_lidar, header_type (names),
  lidar_packet_size, max_frame_id, columns_per_frame, pixels_per_column;
* "packets": per payload, ouster-sdk's PacketFormat header reads: packet_type, frame_id,
  init_id, prod_sn, alert_flags, countdown_thermal_shutdown, countdown_shot_limiting,
  thermal_shutdown, shot_limiting (ints), crc (the footer CRC, null where the format has none)
  and calculated_crc, and per column timestamp, measurement_id, status;
* "frames": the frames its FrameBatcher builds, in order: frame_id, timestamp, measurement_id
  and status (one per column, indexed by measurement_id) and, per channel field, its dtype
  and the md5 of the h x w image (row-major, the field's own dtype), plus the count of
  non-zero RANGE and of non-zero RANGE2 differing from RANGE.
"""

import hashlib
import json
import struct
import sys

import numpy as np
from ouster.sdk import core


def payloads(path):
    data = open(path, "rb").read()
    out, i = [], 0
    while i < len(data):
        (n,) = struct.unpack_from("<I", data, i)
        out.append(data[i + 4:i + 4 + n])
        i += 4 + n
    return out


def frame_json(frame):
    fields = {}
    for name in frame.fields:
        img = np.ascontiguousarray(frame.field(name))
        fields[str(name)] = {
            "dtype": str(img.dtype),
            "md5": hashlib.md5(img.tobytes()).hexdigest(),
        }
    rng = frame.field("RANGE").astype(np.int64)
    out = {
        "frame_id": int(frame.frame_id),
        "timestamp": [int(t) for t in frame.timestamp],
        "measurement_id": [int(m) for m in frame.measurement_id],
        "status": [int(s) for s in frame.status],
        "fields": fields,
        "nonzero_range": int((rng != 0).sum()),
    }
    if "RANGE2" in frame.fields:
        r2 = frame.field("RANGE2").astype(np.int64)
        out["second_returns"] = int(((r2 != 0) & (r2 != rng)).sum())
    return out


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    with open(sys.argv[1]) as f:
        info = core.SensorInfo(f.read())
    fmt = core.PacketFormat(info)
    result = {
        "format": {
            "udp_profile_lidar": str(info.format.udp_profile_lidar),
            "header_type": str(info.format.header_type),
            "lidar_packet_size": int(fmt.lidar_packet_size),
            "max_frame_id": int(fmt.max_frame_id),
            "columns_per_frame": int(info.format.columns_per_frame),
            "pixels_per_column": int(info.format.pixels_per_column),
        },
        "packets": [],
        "frames": [],
    }
    batcher = core.FrameBatcher(info)
    frame = core.LidarFrame(info)
    pending = False
    for p in payloads(sys.argv[2]):
        lp = core.LidarPacket(fmt)
        if len(p) != len(lp.buf):
            result["packets"].append(None)
            continue
        lp.buf[:] = np.frombuffer(p, dtype=np.uint8)
        buf = lp.buf
        crc = fmt.crc(buf)
        cols = []
        for c in range(fmt.columns_per_packet):
            cols.append({
                "timestamp": int(fmt.packet_header(core.ColHeader.TIMESTAMP, buf)[c]),
                "measurement_id": int(fmt.packet_header(core.ColHeader.MEASUREMENT_ID, buf)[c]),
                "status": int(fmt.packet_header(core.ColHeader.STATUS, buf)[c]),
            })
        result["packets"].append({
            "packet_type": int(fmt.packet_type(buf)),
            "frame_id": int(fmt.frame_id(buf)),
            "init_id": int(fmt.init_id(buf)),
            "prod_sn": int(fmt.prod_sn(buf)),
            "alert_flags": int(fmt.alert_flags(buf)),
            "countdown_thermal_shutdown": int(fmt.countdown_thermal_shutdown(buf)),
            "countdown_shot_limiting": int(fmt.countdown_shot_limiting(buf)),
            "thermal_shutdown": int(fmt.thermal_shutdown(buf)),
            "shot_limiting": int(fmt.shot_limiting(buf)),
            "crc": None if crc is None else int(crc),
            "calculated_crc": int(fmt.calculate_crc(buf)),
            "columns": cols,
        })
        pending = True
        if batcher.batch(lp, frame):
            result["frames"].append(frame_json(frame))
            frame = core.LidarFrame(info)
            pending = False
    if pending and any(int(s) & 1 for s in frame.status):
        result["frames"].append(frame_json(frame))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
