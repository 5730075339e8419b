#!/usr/bin/env python3
"""Reference points for tests/decode/decode_velodyne_reference.rs from an independent Velodyne decoder.

Decodes the shared Velodyne captures (../../shared/data/velodyne, see its README.md) one data
packet at a time with velodyne-decoder (PyPI `velodyne-decoder`, Martin Valgur, BSD-3; tested
with 3.1.0 on Python 3.11), loaded with the same calibration YAML as the Rust test, and writes
a compact reference, `velodyne_decoder_ref.json` next to this script:

* `counts`: points per data packet for every data packet of the capture;
* `samples`: every point of a few packets (every `stride`-th point for the VLS-128), as
  `[column, ring, return, x, y, z, time_ns]`, x/y/z in m (1 µm), time after the packet
  stamp in ns.

Inputs the Rust test rebuilds byte for byte:
* `hdl32e_from_vlp32c`: the VLP-32C capture with product byte 1205 set to 0x21 (HDL-32E), decoded
  as an HDL-32E with the VLP-32C calibration (exercises the HDL-32E firing timing);
* `vls128_dual`: each VLS-128 single-return packet becomes three dual-return packets (one
  per firing sequence s = 0..2): blocks 4s..4s+3 each twice (last, strongest), the strongest
  copy's raw distance + 100 on every slot k % 3 == 0 with a return, then four padding blocks
  (zero bytes), stamp + 55·s µs, return byte 0x39.

velodyne-decoder settings: min_range 0, max_range 1000 m (the Rust side uses (0, 1000)); the
VLS-128 YAML's `distance_resolution: 0.007` is replaced by 0.004 m (the sensor's unit, which
lidarxdp always uses for that model).

Usage: python3 -m venv /tmp/vd && /tmp/vd/bin/pip install velodyne-decoder==3.1.0 dpkt &&
       /tmp/vd/bin/python velodyne_decoder_ref.py
"""
import json
import struct
from pathlib import Path

import dpkt
import velodyne_decoder as vd

HERE = Path(__file__).resolve().parent
DATA = HERE.parent.parent.parent.parent / "shared" / "data" / "velodyne"

CAPTURES = [
    # name, pcap, calibration, model, transform, sample packets, stride
    ("vlp16_strongest", "vlp16/vlp16_strongest_84pkt.pcap", "vlp16/calibration/VLP16db.yaml",
     "VLP16", None, [0, 41, 83], 1),
    ("vlp16_dual", "vlp16/vlp16_dual_nebula_603pkt.pcap", "vlp16/calibration/VLP16_nebula.yaml",
     "VLP16", None, [1, 300, 602], 1),
    ("vlp32c", "vlp32c/vlp32c_strongest_fov270to90_nebula_379pkt.pcap",
     "vlp32c/calibration/VLP32_nebula.yaml", "VLP32C", None, [0, 190, 377], 1),
    ("hdl32e_from_vlp32c", "vlp32c/vlp32c_strongest_fov270to90_nebula_379pkt.pcap",
     "vlp32c/calibration/VLP32_nebula.yaml", "HDL32E", "hdl32e", [0, 190, 377], 1),
    ("vls128", "vls128/vls128_strongest_nebula_2193pkt.pcap",
     "vls128/calibration/VLS128_nebula.yaml", "VLS128", None, [5, 1100, 2192], 1),
    ("vls128_dual", "vls128/vls128_strongest_nebula_2193pkt.pcap",
     "vls128/calibration/VLS128_nebula.yaml", "VLS128", "vls128_dual", [5, 3300, 6578], 1),
]


def payloads(path):
    """(record time s, UDP payload) of every UDP datagram of a classic pcap."""
    with open(path, "rb") as f:
        for ts, buf in dpkt.pcap.Reader(f):
            ip = dpkt.ethernet.Ethernet(buf).data
            if isinstance(ip, dpkt.ip.IP) and isinstance(ip.data, dpkt.udp.UDP):
                yield ts, bytes(ip.data.data)


def transform(kind, packets):
    for ts, p in packets:
        if kind is None:
            yield ts, p
        elif kind == "hdl32e":
            yield ts, p[:1205] + b"\x21"
        elif kind == "vls128_dual":
            blocks = [bytearray(p[i * 100:(i + 1) * 100]) for i in range(12)]
            stamp, _, model = struct.unpack("<IBB", p[1200:1206])
            for s in range(3):
                out = []
                for b in range(4):
                    last = bytes(blocks[4 * s + b])
                    strong = bytearray(last)
                    for k in range(0, 32, 3):
                        o = 4 + 3 * k
                        raw = struct.unpack_from("<H", strong, o)[0]
                        if raw != 0:
                            struct.pack_into("<H", strong, o, min(raw + 100, 65535))
                    out += [last, bytes(strong)]
                out += [bytes(100)] * 4
                tail = struct.pack("<IBB", stamp + 55 * s, 0x39, model)
                yield ts + 55e-6 * s, b"".join(out) + tail


def calibration(path, model):
    text = Path(path).read_text()
    if model == "VLS128":
        text = "\n".join(
            "distance_resolution: 0.004" if l.startswith("distance_resolution") else l
            for l in text.splitlines())
    return vd.Calibration.from_string(text)


def main():
    ref = {"generator": "tests/ref/velodyne_decoder_ref.py",
           "velodyne_decoder": getattr(vd, "__version__", "3.1.0"), "captures": []}
    for name, pcap, cal, model, kind, samples, stride in CAPTURES:
        cfg = vd.Config(model=getattr(vd.Model, model), calibration=calibration(DATA / cal, model),
                        min_range=0.0, max_range=1000.0)
        dec = vd.ScanDecoder(cfg)
        counts, sample_out = [], []
        data = [(ts, p) for ts, p in transform(kind, payloads(DATA / pcap)) if len(p) == 1206]
        for i, (ts, p) in enumerate(data):
            _, pts = dec.decode([vd.VelodynePacket(ts, p)])
            counts.append(int(len(pts)))
            if i in samples:
                rows = [[int(r[5]), int(r[6]), int(r[7]), round(float(r[0]), 6),
                         round(float(r[1]), 6), round(float(r[2]), 6),
                         int(round(float(r[4]) * 1e9))]
                        for r in pts[::stride]]
                sample_out.append({"packet": i, "stride": stride, "points": rows})
        ref["captures"].append({"name": name, "pcap": pcap, "calibration": cal, "model": model,
                                "transform": kind, "counts": counts, "samples": sample_out})
        print(name, len(counts), sum(counts), [len(s["points"]) for s in sample_out])
    out = HERE / "velodyne_decoder_ref.json"
    with open(out, "w") as f:
        json.dump(ref, f, separators=(",", ":"))
        f.write("\n")
    print(out, out.stat().st_size)


if __name__ == "__main__":
    main()
