"""lidarxdp: LiDAR decoders (Velodyne, Hesai, Ouster, RoboSense) in Rust, frames as numpy arrays.

The same decoders as the lidarxdp daemon and ``lidarxdp decode``, from Python::

    import lidarxdp
    for frame in lidarxdp.read_pcap("scan.pcap", calibration="VLP16db.yaml"):
        print(frame.seq, frame.points["x"].mean(), frame.xyz().shape)

- ``read_pcap(path, sensor=None, calibration=..., **options)`` yields each frame as it closes;
- ``Decoder(sensor, calibration, **options).push(payload, host_ns)`` decodes packets from
  anywhere and returns the frames they close;
- ``subscribe("127.0.0.1:7510")`` iterates over a running daemon's frames (TCP), and
  ``subscribe("zenoh:/lidar/NAME/points")`` over its ROS 2 topic (zenoh, shared memory);
- ``Frame.points`` is a read-only numpy structured array (``POINT_DTYPE``, 32 bytes per
  point) viewing the decoder's buffer, no copy; ``Frame.xyz()`` an ``(N, 3)`` float32 view.

Options (those of ``lidarxdp decode``): ``cut_angle`` (deg, [0, 360]; 360 is 0), ``fov`` (``(min, max)``
deg or ``"MIN:MAX"``; ``(0, 360)`` is the full circle, the same as none), ``min_range``/``max_range`` (m), ``stamp`` (``"sensor"`` or
``"host"``), ``source`` (IPv4 or IPv6 address; ``fe80::1%eth0`` form accepted), ``port`` (UDP destination port), ``nebula_compat``
(Velodyne: decode as Tier IV Nebula), ``hesai_skip_crc``, ``point_type`` (the points' layout,
one of ``POINT_TYPES``: ``"autoware"`` by default, ``"velodyne"``, ``"ouster"``, ...; the
dtype of ``Frame.points`` is the layout's). A refused option or an unreadable
file raises ``LidarxdpError`` with the CLI's message.
"""

import numpy as _np

from ._lidarxdp import (  # noqa: F401
    POINT_SIZE,
    POINT_TYPES,
    Decoder,
    Frame,
    LidarxdpError,
    PcapReader,
    Points,
    Subscription,
    ZenohSubscription,
    read_pcap,
    subscribe,
)

#: One point, ``PointXYZIRCAEDT`` (Autoware): the layout of ``Frame.points`` and of
#: docs/protocol.md's frame payload.
POINT_DTYPE = _np.dtype(
    {
        "names": [
            "x",
            "y",
            "z",
            "intensity",
            "return_type",
            "channel",
            "azimuth",
            "elevation",
            "distance",
            "time_stamp",
        ],
        "formats": ["<f4", "<f4", "<f4", "u1", "u1", "<u2", "<f4", "<f4", "<f4", "<u4"],
        "offsets": [0, 4, 8, 12, 13, 14, 16, 20, 24, 28],
        "itemsize": POINT_SIZE,
    }
)

__all__ = [
    "POINT_DTYPE",
    "POINT_SIZE",
    "POINT_TYPES",
    "Decoder",
    "Frame",
    "LidarxdpError",
    "PcapReader",
    "Subscription",
    "ZenohSubscription",
    "read_pcap",
    "subscribe",
]
