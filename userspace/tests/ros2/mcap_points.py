#!/usr/bin/env python3
"""Independent reader of MCAP recordings of PointCloud2 messages for the point layout tests
(userspace/tests/ros2/point_types.rs): their `fields`, `point_step` and `data` as written.

It reads each file with the Python `mcap` package (PyPI `mcap`, Foxglove's reference reader):
a streaming pass over every record with CRC validation (chunk CRCs and the data section's CRC
in DataEnd) ending with the footer, then the indexed reader (summary, statistics, one chunk
index per chunk), and decodes every message with `mcap-ros2-support`
(`mcap_ros2.decoder.DecoderFactory`, which parses the channel's `ros2msg` schema text itself).
Nothing here imports lidarxdp code.

Usage: python mcap_points.py --out PREFIX FILE...

Writes one JSON line per message, in file order, to PREFIX.jsonl and the message's `data`
bytes to PREFIX.bin, in the record format of ros2_probe.py's `listen` (`key` is the channel's
topic, `payload_len` the CDR message's length, `cdr_header` its first 4 bytes in hex,
`data_offset`/`data_len` where its `data` is in PREFIX.bin), plus `schema`, `sequence`,
`log_time` and `publish_time`; prints one JSON object on stdout:
{"files": [{"path", "profile", "message_count", "chunk_count", "channels": [{"topic",
"message_encoding", "schema", "schema_encoding", "metadata"}]}]}.

Errors print a message on stderr and exit with status 1.
"""

import argparse
import json
import sys

from pathlib import Path

from mcap.reader import make_reader
from mcap_ros2.decoder import DecoderFactory

# The recordings' whole-file check (every record's CRC, a complete file) is the publish tests'.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "publish"))
from mcap_check import stream_pass  # noqa: E402


def fail(msg):
    """Prints `msg` on stderr and exits with status 1."""
    print(f"mcap_points: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def dump(path, js, bins, offset):
    """Writes every message of `path` to `js`/`bins` from byte `offset` of the .bin; returns
    (the file's description, the next offset)."""
    header, _ = stream_pass(path)
    with open(path, "rb") as f:
        reader = make_reader(f, validate_crcs=True, decoder_factories=[DecoderFactory()])
        summary = reader.get_summary()
        if summary is None or summary.statistics is None:
            fail(f"{path}: no summary section or statistics")
        stats = summary.statistics
        if len(summary.chunk_indexes) != stats.chunk_count:
            fail(f"{path}: {len(summary.chunk_indexes)} chunk indexes, {stats.chunk_count} chunks")
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
        n = 0
        for schema, channel, message, cloud in reader.iter_decoded_messages(log_time_order=False):
            if schema.name != "sensor_msgs/msg/PointCloud2":
                fail(f"{path}: message {n} has schema {schema.name}")
            data = bytes(cloud.data)
            rec = {
                "key": channel.topic,
                "schema": schema.name,
                "sequence": message.sequence,
                "log_time": message.log_time,
                "publish_time": message.publish_time,
                "payload_len": len(message.data),
                "cdr_header": bytes(message.data[:4]).hex(),
                "sec": int(cloud.header.stamp.sec),
                "nanosec": int(cloud.header.stamp.nanosec),
                "frame_id": cloud.header.frame_id,
                "height": int(cloud.height),
                "width": int(cloud.width),
                "fields": [[p.name, int(p.offset), int(p.datatype), int(p.count)]
                           for p in cloud.fields],
                "is_bigendian": bool(cloud.is_bigendian),
                "point_step": int(cloud.point_step),
                "row_step": int(cloud.row_step),
                "is_dense": bool(cloud.is_dense),
                "data_offset": offset,
                "data_len": len(data),
                "attachment": None,
            }
            bins.write(data)
            offset += len(data)
            js.write(json.dumps(rec) + "\n")
            n += 1
        if n != stats.message_count:
            fail(f"{path}: {n} messages decoded, statistics say {stats.message_count}")
    return {
        "path": path,
        "profile": header.profile,
        "message_count": stats.message_count,
        "chunk_count": stats.chunk_count,
        "channels": channels,
    }, offset


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="output path prefix (.jsonl and .bin)")
    p.add_argument("files", nargs="+", metavar="FILE")
    args = p.parse_args()
    files = []
    offset = 0
    with open(args.out + ".jsonl", "w") as js, open(args.out + ".bin", "wb") as bins:
        for path in args.files:
            desc, offset = dump(path, js, bins, offset)
            files.append(desc)
    json.dump({"files": files}, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
