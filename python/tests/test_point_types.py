"""The point layouts from Python: ``read_pcap(..., point_type=NAME)`` and ``Decoder``.

Every layout's numpy dtype is its driver's field list (names, offsets, types, itemsize =
point_step, docs/sensors.md "Point layouts"), and its x, y, z equal the ``autoware`` decode of
the same capture bit for bit; an unknown name is refused naming the valid set.
"""

import os
from pathlib import Path

import numpy as np
import pytest

import lidarxdp

DATA = Path(os.environ.get("LIDARXDP_DATA", Path(__file__).resolve().parents[2] / "../shared/data"))

#: The drivers' layouts as numpy sees them: (name, numpy type, offset), itemsize.
LAYOUTS = {
    "autoware": (
        [
            ("x", "<f4", 0),
            ("y", "<f4", 4),
            ("z", "<f4", 8),
            ("intensity", "u1", 12),
            ("return_type", "u1", 13),
            ("channel", "<u2", 14),
            ("azimuth", "<f4", 16),
            ("elevation", "<f4", 20),
            ("distance", "<f4", 24),
            ("time_stamp", "<u4", 28),
        ],
        32,
    ),
    "autoware_xyzirc": (
        [
            ("x", "<f4", 0),
            ("y", "<f4", 4),
            ("z", "<f4", 8),
            ("intensity", "u1", 12),
            ("return_type", "u1", 13),
            ("channel", "<u2", 14),
        ],
        16,
    ),
    "xyzi": ([("x", "<f4", 0), ("y", "<f4", 4), ("z", "<f4", 8), ("intensity", "<f4", 12)], 16),
    "velodyne": (
        [
            ("x", "<f4", 0),
            ("y", "<f4", 4),
            ("z", "<f4", 8),
            ("intensity", "<f4", 12),
            ("ring", "<u2", 16),
            ("time", "<f4", 18),
        ],
        22,
    ),
    "ouster": (
        [
            ("x", "<f4", 0),
            ("y", "<f4", 4),
            ("z", "<f4", 8),
            ("intensity", "<f4", 16),
            ("t", "<u4", 20),
            ("reflectivity", "<u2", 24),
            ("ring", "<u2", 26),
            ("ambient", "<u2", 28),
            ("range", "<u4", 32),
        ],
        48,
    ),
    "ouster_xyzir": (
        [("x", "<f4", 0), ("y", "<f4", 4), ("z", "<f4", 8), ("intensity", "<f4", 16), ("ring", "<u2", 20)],
        32,
    ),
    "hesai": (
        [
            ("x", "<f4", 0),
            ("y", "<f4", 4),
            ("z", "<f4", 8),
            ("intensity", "<f4", 12),
            ("ring", "<u2", 16),
            ("timestamp", "<f8", 18),
        ],
        26,
    ),
    "robosense": (
        [
            ("x", "<f4", 0),
            ("y", "<f4", 4),
            ("z", "<f4", 8),
            ("intensity", "<f4", 12),
            ("ring", "<u2", 16),
            ("timestamp", "<f8", 18),
        ],
        26,
    ),
}

CAP = ("velodyne/vlp16/vlp16_dual_nebula_603pkt.pcap", "vlp16", "velodyne/vlp16/calibration/VLP16db.yaml")


def test_point_types_are_the_drivers():
    assert lidarxdp.POINT_TYPES == list(LAYOUTS)


@pytest.mark.parametrize("point_type", list(LAYOUTS))
def test_every_layout_is_its_dtype_with_the_autoware_xyz(point_type):
    cap, sensor, cal = CAP
    ref = list(lidarxdp.read_pcap(DATA / cap, sensor, DATA / cal))
    got = list(lidarxdp.read_pcap(DATA / cap, sensor, DATA / cal, point_type=point_type))
    assert len(got) == len(ref) == 4
    fields, step = LAYOUTS[point_type]
    for f, r in zip(got, ref):
        dt = f.points.dtype
        assert dt.itemsize == step
        assert [(n, dt.fields[n][0].str, dt.fields[n][1]) for n in dt.names] == [
            (n, np.dtype(t).str, o) for n, t, o in fields
        ]
        assert (f.seq, f.start_ns, len(f)) == (r.seq, r.start_ns, len(r))
        for axis in "xyz":
            assert np.array_equal(f.points[axis].view("<u4"), r.points[axis].view("<u4"))
        assert np.array_equal(f.xyz(), r.xyz())
        if "ring" in dt.names:
            assert np.array_equal(f.points["ring"], r.points["channel"])
        if point_type == "velodyne":
            want = (r.points["time_stamp"].astype(np.float64) * 1e-9).astype(np.float32)
            assert np.array_equal(f.points["time"], want)
        if point_type == "robosense":
            want = (f.start_ns + r.points["time_stamp"].astype(np.uint64)).astype(np.float64) * 1e-9
            assert np.array_equal(f.points["timestamp"], want)


def test_the_decoder_takes_a_point_type():
    cap, sensor, cal = CAP
    want = list(lidarxdp.read_pcap(DATA / cap, sensor, DATA / cal, point_type="velodyne"))
    import dpkt  # noqa: PLC0415  (in the test venv: test_decode uses it too)

    dec = lidarxdp.Decoder(sensor, DATA / cal, point_type="velodyne")
    got = []
    with open(DATA / cap, "rb") as fh:
        for ts, buf in dpkt.pcap.Reader(fh):
            ip = dpkt.ethernet.Ethernet(buf).data
            got += dec.push(bytes(ip.data.data), round(ts * 1e9))
    got += dec.flush()
    assert len(got) == len(want) == 4
    for a, b in zip(got, want):
        assert a.points.dtype == b.points.dtype
        assert a.points.dtype.itemsize == 22
        assert a.points.tobytes() == b.points.tobytes()


def test_an_unknown_point_type_names_the_valid_set():
    cap, sensor, cal = CAP
    with pytest.raises(lidarxdp.LidarxdpError) as e:
        lidarxdp.read_pcap(DATA / cap, sensor, DATA / cal, point_type="XYZI")
    assert str(e.value) == (
        "point_type: unknown point_type 'XYZI'; valid: autoware, autoware_xyzirc, xyzi, "
        "velodyne, ouster, ouster_xyzir, hesai, robosense"
    )
    with pytest.raises(lidarxdp.LidarxdpError):
        lidarxdp.Decoder(sensor, DATA / cal, point_type="pcl")
