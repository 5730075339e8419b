#!/usr/bin/env python3
"""Independent reader of lidarxdp's PCD files for the point layout tests
(userspace/tests/publish/publish_point_types.rs, userspace/tests/ros2/point_types.rs).

It reads each PCD given with `pypcd4` (PyPI, pinned in xtask/src/setup.rs), which parses the
header itself (FIELDS, SIZE, TYPE, COUNT, WIDTH, HEIGHT, POINTS, DATA) and the binary records
into a numpy structured array; nothing here imports lidarxdp code. It also checks, and fails
(exit 1) otherwise, that the file is `DATA binary`, that WIDTH x HEIGHT = POINTS = the records
read, and that the file holds exactly the header and POINTS records of the declared fields'
sizes (no byte missing or left over).

Usage: python pcd_check.py --out PREFIX FILE...

Writes one JSON line per file, in the order given, to PREFIX.jsonl:
  {"path", "version", "fields": [[NAME, SIZE, TYPE, COUNT], ...], "width", "height",
   "points", "data", "columns": [{"name", "dtype", "offset", "len"}, ...]}
and to PREFIX.bin, for every field in order, its values of every point as little-endian
bytes (numpy's `tobytes` of the field's column in the declared type): `offset`/`len` say
where a column is in PREFIX.bin.

Errors print a message on stderr and exit with status 1.
"""

import argparse
import json
import os
import sys

import numpy as np
from pypcd4 import PointCloud


def fail(msg):
    """Prints `msg` on stderr and exits with status 1."""
    print(f"pcd_check: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def header_len(path):
    """Bytes up to and including the line `DATA ...` (the records start right after)."""
    with open(path, "rb") as f:
        head = f.read(4096)
    at = head.find(b"\nDATA ")
    if at < 0:
        fail(f"{path}: no DATA line in the first 4096 bytes")
    end = head.find(b"\n", at + 1)
    if end < 0:
        fail(f"{path}: DATA line not terminated")
    return end + 1


def check(path, bins, offset):
    pc = PointCloud.from_path(path)
    md = pc.metadata
    if md.data.value != "binary":
        fail(f"{path}: DATA {md.data.value}, not binary")
    if md.width * md.height != md.points:
        fail(f"{path}: WIDTH {md.width} x HEIGHT {md.height} != POINTS {md.points}")
    data = pc.pc_data
    if len(data) != md.points:
        fail(f"{path}: {len(data)} records read, POINTS {md.points}")
    record = sum(s * c for s, c in zip(md.size, md.count))
    size = os.path.getsize(path)
    if size != header_len(path) + md.points * record:
        fail(f"{path}: {size} bytes, header + {md.points} records of {record} bytes expected")
    columns = []
    for name in data.dtype.names:
        col = np.ascontiguousarray(data[name])
        raw = col.astype(col.dtype.newbyteorder("<"), copy=False).tobytes()
        columns.append({"name": name, "dtype": col.dtype.str, "offset": offset,
                        "len": len(raw)})
        bins.write(raw)
        offset += len(raw)
    return {
        "path": path,
        "version": md.version,
        "fields": [[f, s, t, c] for f, s, t, c in zip(md.fields, md.size, md.type, md.count)],
        "width": md.width,
        "height": md.height,
        "points": md.points,
        "data": md.data.value,
        "columns": columns,
    }, offset


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="output path prefix (.jsonl and .bin)")
    p.add_argument("files", nargs="+", metavar="FILE")
    args = p.parse_args()
    offset = 0
    with open(args.out + ".jsonl", "w") as js, open(args.out + ".bin", "wb") as bins:
        for path in args.files:
            rec, offset = check(path, bins, offset)
            js.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
