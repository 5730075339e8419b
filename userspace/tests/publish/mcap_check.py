"""Independent reader of `lidarxdp subscribe --mcap` recordings for the publish tests.

Reads each MCAP file given on the command line with the Python `mcap` package (PyPI `mcap`,
Foxglove's reference reader) and decodes every message with `mcap-ros2-support`
(`mcap_ros2.decoder.DecoderFactory`, which parses the `ros2msg` schema text itself), then prints
one JSON object describing the files on stdout. The Rust test asserts the values.

Per file it checks, and fails (exit 1) otherwise:
- a streaming pass over every record with CRC validation (chunk CRCs and the data section CRC in
  DataEnd), ending with the footer;
- the indexed reader (`make_reader(..., validate_crcs=True)` on a seekable file) finds the
  summary: statistics, chunk indexes (one per chunk), channels with their schema;
- every message decodes as its channel's schema: `sensor_msgs/msg/PointCloud2`, or
  `sensor_msgs/msg/Imu` (IMU readings recorded from the protocol's `imu` messages).

Usage: python mcap_check.py FILE...
"""

import json
import sys

from mcap.reader import make_reader
from mcap.records import DataEnd, Footer, Header
from mcap.stream_reader import StreamReader
from mcap_ros2.decoder import DecoderFactory


def stream_pass(path):
    """Every record of `path` in file order with CRC checks; returns (header, record kinds)."""
    header = None
    kinds = []
    with open(path, "rb") as f:
        for record in StreamReader(f, validate_crcs=True).records:
            kinds.append(type(record).__name__)
            if isinstance(record, Header):
                header = record
    if header is None or DataEnd.__name__ not in kinds or kinds[-1] != Footer.__name__:
        raise SystemExit(f"{path}: incomplete MCAP, records {kinds[-3:]}")
    return header, kinds


def check(path):
    header, kinds = stream_pass(path)
    with open(path, "rb") as f:
        reader = make_reader(f, validate_crcs=True, decoder_factories=[DecoderFactory()])
        summary = reader.get_summary()
        if summary is None:
            raise SystemExit(f"{path}: no summary section")
        stats = summary.statistics
        if stats is None:
            raise SystemExit(f"{path}: no statistics record")
        if len(summary.chunk_indexes) != stats.chunk_count:
            raise SystemExit(
                f"{path}: {len(summary.chunk_indexes)} chunk indexes for {stats.chunk_count} chunks"
            )
        channels = [
            {
                "topic": c.topic,
                "message_encoding": c.message_encoding,
                "schema": summary.schemas[c.schema_id].name,
                "schema_encoding": summary.schemas[c.schema_id].encoding,
                "metadata": dict(c.metadata),
            }
            for c in sorted(summary.channels.values(), key=lambda c: c.id)
        ]
        messages = []
        for schema, channel, message, cloud in reader.iter_decoded_messages(log_time_order=False):
            h = cloud.header
            record = {
                "topic": channel.topic,
                "sequence": message.sequence,
                "log_time": message.log_time,
                "publish_time": message.publish_time,
                "stamp_ns": h.stamp.sec * 1_000_000_000 + h.stamp.nanosec,
                "frame_id": h.frame_id,
            }
            if schema.name == "sensor_msgs/msg/Imu":
                messages.append(
                    {
                        **record,
                        "orientation": [
                            cloud.orientation.x,
                            cloud.orientation.y,
                            cloud.orientation.z,
                            cloud.orientation.w,
                        ],
                        "orientation_covariance": list(cloud.orientation_covariance),
                        "angular_velocity": [
                            cloud.angular_velocity.x,
                            cloud.angular_velocity.y,
                            cloud.angular_velocity.z,
                        ],
                        "linear_acceleration": [
                            cloud.linear_acceleration.x,
                            cloud.linear_acceleration.y,
                            cloud.linear_acceleration.z,
                        ],
                    }
                )
                continue
            if schema.name != "sensor_msgs/msg/PointCloud2":
                raise SystemExit(f"{path}: unexpected schema {schema.name}")
            messages.append(
                {
                    **record,
                    "height": cloud.height,
                    "width": cloud.width,
                    "point_step": cloud.point_step,
                    "row_step": cloud.row_step,
                    "fields": [[p.name, p.offset, p.datatype, p.count] for p in cloud.fields],
                    "is_bigendian": cloud.is_bigendian,
                    "is_dense": cloud.is_dense,
                    "data_len": len(cloud.data),
                    "cdr_len": len(message.data),
                }
            )
    return {
        "path": path,
        "profile": header.profile,
        "library": header.library,
        "records": len(kinds),
        "message_count": stats.message_count,
        "chunk_count": stats.chunk_count,
        "chunk_indexes": len(summary.chunk_indexes),
        "channels": channels,
        "messages": messages,
    }


def main():
    files = [check(p) for p in sys.argv[1:]]
    json.dump({"files": files}, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
