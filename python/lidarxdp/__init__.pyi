"""Type stubs of lidarxdp (shapes and units in the docstrings)."""

from os import PathLike
from typing import Iterator, List, Optional, Tuple, Union

import numpy as np
import numpy.typing as npt

#: Bytes per point: 32.
POINT_SIZE: int
#: ``PointXYZIRCAEDT``: x, y, z (float32, m), intensity (uint8), return_type (uint8),
#: channel (uint16, ring), azimuth, elevation (float32, rad), distance (float32, m),
#: time_stamp (uint32, ns since ``Frame.start_ns``).
POINT_DTYPE: np.dtype
#: The ``point_type`` names: autoware, autoware_xyzirc, xyzi, velodyne, ouster, ouster_xyzir,
#: hesai, robosense (docs/sensors.md, "Point layouts"); ``Frame.points``'s dtype is the
#: layout's fields at their offsets, ``itemsize`` its ``point_step``.
POINT_TYPES: List[str]

_Path = Union[str, "PathLike[str]"]
_Fov = Union[Tuple[float, float], str]

class LidarxdpError(Exception):
    """A refused option, an unreadable file or a capture that cannot be decoded; the message
    is ``lidarxdp decode``'s (the field, its value and its valid range, or the file)."""

class Points:
    """One frame's point buffer, owned by Rust, lent to numpy (``numpy.asarray``)."""

    def __len__(self) -> int: ...

class Frame:
    """A frame (scan): its header and its points."""

    #: Per-sensor frame number, +1 per frame.
    seq: int
    #: The sensor's id (0 offline).
    sensor_id: int
    #: The sensor's name (offline: the model name, e.g. ``"VLP16"``).
    sensor: str
    #: Frame start, ns since the Unix epoch, on the clock ``clock`` names.
    start_ns: int
    #: Host receive time of the frame's first packet, ns (offline: its pcap record time).
    host_ns: int
    #: ``"sensor"`` or ``"host"``.
    clock: str
    #: Data packets in the frame.
    packets: int
    #: Data packets the sensor sent for the frame.
    expected_packets: int
    #: Packets rejected as malformed while the frame was built.
    malformed: int
    #: Whole frames lost just before this one.
    frames_lost_before: int

    @property
    def points(self) -> npt.NDArray[np.void]:
        """Shape ``(N,)``, dtype ``POINT_DTYPE``: a read-only view of the decoder's buffer."""
    def xyz(self) -> npt.NDArray[np.float32]:
        """Shape ``(N, 3)``, float32, m: x, y, z, a read-only view (row stride 32 bytes)."""
    def __len__(self) -> int: ...

class PcapReader(Iterator[Frame]):
    """The frames of a capture file as they close."""

    def __iter__(self) -> "PcapReader": ...
    def __next__(self) -> Frame: ...
    @property
    def summary(self) -> dict:
        """``records``, ``datagrams``, ``skipped_records`` and every decoder counter."""
    @property
    def sensor(self) -> str:
        """The model decoded, e.g. ``"VLP16"``."""

def read_pcap(
    path: _Path,
    sensor: Optional[str] = None,
    calibration: Optional[_Path] = None,
    *,
    cut_angle: float = 0.0,
    fov: Optional[_Fov] = None,
    min_range: Optional[float] = None,
    max_range: Optional[float] = None,
    stamp: str = "sensor",
    source: Optional[str] = None,
    port: Optional[int] = None,
    nebula_compat: bool = False,
    hesai_skip_crc: bool = False,
    point_type: str = "autoware",
) -> PcapReader:
    """Decodes the pcap/pcapng capture at ``path``, yielding each frame as it closes.

    ``sensor``: model name (``"vlp16"``, ``"pandarxt32"``, ``"ouster"``, ...); ``None``
    identifies it from the packets where they name it (Velodyne, Hesai). ``calibration`` is
    required. Raises ``LidarxdpError``."""

class Decoder:
    """A decoder for packets from anywhere: a socket, a bag of packets, a custom reader."""

    def __init__(
        self,
        sensor: str,
        calibration: _Path,
        *,
        cut_angle: float = 0.0,
        fov: Optional[_Fov] = None,
        min_range: Optional[float] = None,
        max_range: Optional[float] = None,
        stamp: str = "sensor",
        nebula_compat: bool = False,
        hesai_skip_crc: bool = False,
        point_type: str = "autoware",
    ) -> None: ...
    def push(self, payload: bytes, host_ns: int) -> List[Frame]:
        """Decodes one UDP payload received at ``host_ns`` (ns since the Unix epoch); returns
        the frames it closed. A malformed packet is counted and dropped."""
    def flush(self) -> List[Frame]:
        """Closes the frame in progress and returns it."""
    @property
    def counters(self) -> dict:
        """``packets``, ``decoded``, ``malformed``, ``ignored``, ``frames``, ``points``, ...
        and ``held``; ``packets == decoded + malformed + ignored + auxiliary + time_jumps +
        duplicates + late + held``."""
    @property
    def sensor(self) -> str: ...

class Subscription(Iterator[Frame]):
    """A running daemon's frames over its TCP publisher (docs/protocol.md)."""

    def __iter__(self) -> "Subscription": ...
    def __next__(self) -> Frame:
        """The next frame; ``StopIteration`` when the daemon closes the connection. Ctrl-C
        interrupts the wait within 100 ms."""
    @property
    def sensors(self) -> dict:
        """The sensors the daemon announced: ``{id: name}``."""

class ZenohSubscription(Iterator[Frame]):
    """A daemon's ROS 2 ``PointCloud2`` topic over zenoh, read in place (shared memory on the
    same host). ``seq`` is the publisher's sequence number, ``start_ns`` ``header.stamp``,
    ``host_ns`` the publication time, ``sensor`` ``header.frame_id``; the packet counts are 0
    (a ``PointCloud2`` does not carry them)."""

    def __iter__(self) -> "ZenohSubscription": ...
    def __next__(self) -> Frame:
        """The next message; a topic never ends. Ctrl-C interrupts the wait within 100 ms."""

def subscribe(
    address: str = "127.0.0.1:7510",
    *,
    connect_timeout: float = 5.0,
    domain_id: Optional[int] = None,
    zenoh_config: Optional[_Path] = None,
    distro: str = "jazzy",
) -> Union[Subscription, ZenohSubscription]:
    """``"HOST:PORT"``: the daemon's TCP publisher (every sensor, every field).
    ``"zenoh:/TOPIC"``: its ROS 2 topic over zenoh, in ROS domain ``domain_id`` (default
    ``$ROS_DOMAIN_ID``, else 0), the session configured by ``zenoh_config`` (default rmw_zenoh's
    environment variables), with ``distro``'s key expressions (``"jazzy"`` or ``"humble"``).
    Raises ``LidarxdpError`` naming the address or the setting."""
