"""The Python package against the CLI and the peers, on every shared capture.

Run by `cargo xtask test` (python/tests, pytest in the peers' venv, the wheel installed):
LIDARXDP_DATA is ../shared/data, LIDARXDP_EXE the `lidarxdp` binary whose `decode --json` and
`--pcd` outputs the frames must equal.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import lidarxdp

DATA = Path(os.environ.get("LIDARXDP_DATA", Path(__file__).resolve().parents[2] / "../shared/data"))
EXE = os.environ.get("LIDARXDP_EXE", "lidarxdp")

#: (capture, sensor, calibration) of every shared capture, paths under DATA.
CAPTURES = [
    ("velodyne/vlp16/vlp16_dual_nebula_603pkt.pcap", "vlp16", "velodyne/vlp16/calibration/VLP16db.yaml"),
    ("velodyne/vlp16/vlp16_strongest_84pkt.pcap", "vlp16", "velodyne/vlp16/calibration/VLP16db.yaml"),
    (
        "velodyne/vlp16/vlp16_strongest_prodid0x21_with_position_pkts.pcap",
        "vlp16",
        "velodyne/vlp16/calibration/VLP16db.yaml",
    ),
    (
        "velodyne/vlp32c/vlp32c_strongest_fov270to90_nebula_379pkt.pcap",
        "vlp32c",
        "velodyne/vlp32c/calibration/VLP32_nebula.yaml",
    ),
    ("velodyne/vls128/vls128_strongest_nebula_2193pkt.pcap", "vls128", "velodyne/vls128/calibration/VLS128.yaml"),
    ("hesai/pandar40p/pandar40p_nebula.pcap", "pandar40p", "hesai/pandar40p/Pandar40P.csv"),
    ("hesai/pandar64/pandar64_nebula.pcap", "pandar64", "hesai/pandar64/Pandar64.csv"),
    ("hesai/pandarqt64/pandarqt64_nebula.pcap", "pandarqt64", "hesai/pandarqt64/PandarQT64.csv"),
    ("hesai/pandarqt128/pandarqt128_nebula.pcap", "pandarqt128", "hesai/pandarqt128/PandarQT128.csv"),
    ("hesai/pandarxt32/pandarxt32_nebula.pcap", "pandarxt32", "hesai/pandarxt32/PandarXT32.csv"),
    ("hesai/pandarxt32m/pandarxt32m_nebula.pcap", "pandarxt32m", "hesai/pandarxt32m/PandarXT32M.csv"),
    ("ouster/os0-32/OS-0-32-U1_v2.2.0_1024x10.pcap", "ouster", "ouster/os0-32/OS-0-32-U1_v2.2.0_1024x10.json"),
    ("ouster/os0-128/OS-0-128-U1_v2.3.0_1024x10.pcap", "ouster", "ouster/os0-128/OS-0-128-U1_v2.3.0_1024x10.json"),
    ("ouster/os1-32/OS-1-32-G_v2.1.1_1024x10.pcap", "ouster", "ouster/os1-32/OS-1-32-G_v2.1.1_1024x10.json"),
    ("ouster/os1-64/os1-64_legacy_fw1.1x_3frames.pcap", "ouster", "ouster/os1-64/os1-64_legacy_fw1.1x_3frames.json"),
    ("ouster/os2-128/OS-2-128-U1_v2.3.0_1024x10.pcap", "ouster", "ouster/os2-128/OS-2-128-U1_v2.3.0_1024x10.json"),
    ("robosense/helios16p/helios16p_nebula_pr79.pcap", "helios16p", "robosense/helios16p/RobosenseHelios16P.csv"),
]

#: `decode --json` keys and the Frame attributes they equal.
HEADER = {
    "seq": "seq",
    "start_ns": "start_ns",
    "host_ns": "host_ns",
    "clock": "clock",
    "packets": "packets",
    "expected_packets": "expected_packets",
    "malformed": "malformed",
    "frames_lost_before": "frames_lost_before",
}


def pcd_points(path):
    """The binary PCD written by `lidarxdp decode --pcd`: its data section as bytes."""
    raw = path.read_bytes()
    end = raw.index(b"DATA binary\n") + len(b"DATA binary\n")
    return raw[end:]


@pytest.mark.parametrize("capture,sensor,calibration", CAPTURES, ids=[Path(c[0]).stem for c in CAPTURES])
def test_frames_equal_the_cli(capture, sensor, calibration, tmp_path):
    """Every frame: the header `decode --json` prints, the points its PCD holds, byte for byte."""
    cap, cal = DATA / capture, DATA / calibration
    out = subprocess.run(
        [EXE, "decode", "--pcap", str(cap), "--sensor", sensor, "--calibration", str(cal), "--json", "--pcd", str(tmp_path)],
        check=True,
        capture_output=True,
        text=True,
    )
    lines = [json.loads(l) for l in out.stdout.splitlines()]
    cli, summary = lines[:-1], lines[-1]["summary"]
    reader = lidarxdp.read_pcap(cap, sensor, cal)
    frames = list(reader)
    assert len(frames) == len(cli) > 0
    for f, c in zip(frames, cli):
        for key, attr in HEADER.items():
            assert getattr(f, attr) == c[key], (f, key)
        assert len(f) == c["points"]
        pts = f.points
        assert pts.dtype == lidarxdp.POINT_DTYPE and pts.shape == (c["points"],)
        assert pts.tobytes() == pcd_points(tmp_path / f"{c['seq']:06}.pcd"), f
        xyz = f.xyz()
        assert xyz.shape == (len(f), 3) and xyz.dtype == np.float32
        assert np.array_equal(xyz[:, 2], pts["z"])
    s = reader.summary
    for key in ("records", "datagrams", "packets", "decoded", "malformed", "ignored", "frames", "points"):
        assert s[key] == summary[key], key


def test_decoder_push_gives_the_same_frames():
    """`Decoder.push` over the capture's payloads gives read_pcap's frames."""
    cap, sensor, cal = CAPTURES[0]
    want = list(lidarxdp.read_pcap(DATA / cap, sensor, DATA / cal))
    dpkt = pytest.importorskip("dpkt")
    dec = lidarxdp.Decoder(sensor, DATA / cal)
    got = []
    with open(DATA / cap, "rb") as fh:
        for ts, buf in dpkt.pcap.Reader(fh):
            ip = dpkt.ethernet.Ethernet(buf).data
            got += dec.push(bytes(ip.data.data), round(ts * 1e9))
    got += dec.flush()
    assert [f.seq for f in got] == [f.seq for f in want]
    for a, b in zip(got, want):
        assert a.points.tobytes() == b.points.tobytes()
    assert dec.counters["frames"] == len(want)


def test_points_are_a_read_only_view_of_the_rust_buffer():
    """No copy: the array's memory is the Rust buffer (same address each time), and numpy
    refuses writes to it."""
    cap, sensor, cal = CAPTURES[0]
    f = next(iter(lidarxdp.read_pcap(DATA / cap, sensor, DATA / cal)))
    a, b = f.points, f.points
    addr = a.__array_interface__["data"][0]
    assert addr == b.__array_interface__["data"][0] != 0
    assert f.xyz().__array_interface__["data"][0] == addr
    assert not a.flags.writeable and not a.flags.owndata
    with pytest.raises(ValueError, match="read-only"):
        a["x"][0] = 1.0
    del f
    assert a["x"].size > 0  # the array keeps the buffer alive


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"cut_angle": 400}, "cut_angle: 400 is out of range; valid [0, 360] deg"),
        (
            {"fov": (10, 10)},
            "fov: 10:10 is out of range; valid MIN:MAX with MIN and MAX in [0, 360] deg",
        ),
        ({"max_range": 2000}, "max_range: 2000 is out of range; valid [0, 1000] m"),
        ({"port": 70000}, "port: 70000 is out of range; valid 1..=65535"),
        ({"stamp": "gps"}, "stamp: "),
        ({"sensor": "vlp17"}, "sensor: "),
        ({"min_range": 50, "max_range": 10}, "--max-range: 10 is out of range"),
    ],
)
def test_bad_options_raise_the_cli_message(kwargs, message):
    cap, sensor, cal = CAPTURES[0]
    args = {"sensor": sensor, **kwargs}
    with pytest.raises(lidarxdp.LidarxdpError) as e:
        lidarxdp.read_pcap(DATA / cap, calibration=DATA / cal, **args)
    assert str(e.value).startswith(message), str(e.value)


def test_missing_files_name_them(tmp_path):
    cap, sensor, cal = CAPTURES[0]
    with pytest.raises(lidarxdp.LidarxdpError, match="nope.pcap"):
        lidarxdp.read_pcap(tmp_path / "nope.pcap", sensor, DATA / cal)
    with pytest.raises(lidarxdp.LidarxdpError, match="nope.yaml"):
        lidarxdp.read_pcap(DATA / cap, sensor, tmp_path / "nope.yaml")
    with pytest.raises(lidarxdp.LidarxdpError, match="calibration: required"):
        lidarxdp.read_pcap(DATA / cap, sensor)


def test_garbage_never_crashes_the_interpreter():
    """Every decoder gets truncated, bit-flipped and random payloads: counted, never a crash."""
    rng = np.random.default_rng(7)
    for cap, sensor, cal in CAPTURES[::3]:
        dec = lidarxdp.Decoder(sensor, DATA / cal)
        for n in (0, 1, 42, 1206, 1500, 9000):
            dec.push(rng.integers(0, 256, n, dtype=np.uint8).tobytes(), 1)
        c = dec.counters
        assert c["packets"] == 6
        fates = ("decoded", "malformed", "ignored", "auxiliary", "time_jumps", "duplicates", "late", "held")
        assert sum(c[k] for k in fates) == 6, c


def test_memory_stays_flat_with_the_recording_length():
    """Peak memory (the process's maximum RSS, in a fresh interpreter) after one pass over the
    VLS-128 capture and after six: a decoder or a frame kept alive per frame would add its
    points (about 7 MB per VLS-128 frame) on every pass."""
    cap, sensor, cal = CAPTURES[4]
    script = (
        "import resource, sys, lidarxdp\n"
        "def once():\n"
        "    for f in lidarxdp.read_pcap(sys.argv[1], sys.argv[2], sys.argv[3]):\n"
        "        f.points['x'].sum()\n"
        "once()\n"
        "a = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "for _ in range(5):\n"
        "    once()\n"
        "b = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "print(a, b)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(DATA / cap), sensor, str(DATA / cal)],
        check=True,
        capture_output=True,
        text=True,
    )
    one, six = (int(v) for v in out.stdout.split())
    assert six - one < 8 * 1024, f"max RSS {one} KiB after one pass, {six} KiB after six"


def free_port(kind):
    import socket

    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_subscribe_receives_a_running_daemons_frames():
    """A daemon (socket backend on loopback) fed the demo's capture: `subscribe` yields its
    frames, equal point for point to `read_pcap`'s, named as the daemon names the sensor,
    and ends when the daemon stops."""
    import socket
    import time

    cap, sensor, cal = CAPTURES[0]
    udp, tcp = free_port(socket.SOCK_DGRAM), free_port(socket.SOCK_STREAM)
    daemon = subprocess.Popen(
        [EXE, "run", "--backend", "socket", "--bind", "127.0.0.1", "--sensor", sensor, "--port", str(udp),
         "--calibration", str(DATA / cal), "--listen", f"127.0.0.1:{tcp}", "--name", "front"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                sub = lidarxdp.subscribe(f"127.0.0.1:{tcp}", connect_timeout=1.0)
                break
            except lidarxdp.LidarxdpError:
                assert daemon.poll() is None and time.monotonic() < deadline, "daemon did not start"
                time.sleep(0.1)
        assert sub.sensors == {0: "front"}
        subprocess.run([EXE, "replay", str(DATA / cap), "--to", f"127.0.0.1:{udp}", "--rate", "realtime"],
                       check=True, capture_output=True)
        want = list(lidarxdp.read_pcap(DATA / cap, sensor, DATA / cal))
        got = [next(sub) for _ in want]
        for g, w in zip(got, want):
            assert (g.sensor, g.seq, g.packets) == ("front", w.seq, w.packets)
            # A Velodyne's hour comes from the host clock (now, not the record time).
            hour = 3_600_000_000_000
            assert g.start_ns % hour == w.start_ns % hour
            assert g.points.tobytes() == w.points.tobytes()
        daemon.terminate()
        assert daemon.wait(timeout=30) == 0
        with pytest.raises(StopIteration):
            next(sub)
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()


def test_subscribe_to_nothing_names_the_address():
    port = free_port(__import__("socket").SOCK_STREAM)
    with pytest.raises(lidarxdp.LidarxdpError, match=f"subscribe 127.0.0.1:{port}: "):
        lidarxdp.subscribe(f"127.0.0.1:{port}", connect_timeout=1.0)


@pytest.mark.parametrize(
    "capture,sensor,calibration",
    [c for c in CAPTURES if c[1] == "ouster"],
    ids=[Path(c[0]).stem for c in CAPTURES if c[1] == "ouster"],
)
def test_ouster_points_equal_ouster_sdk_within_a_millimetre(capture, sensor, calibration):
    """ouster-sdk (pinned as the peer bench pins it) on the same capture: the same frames;
    every point of ours sits at a pixel of its frame (row = channel, column = the one whose
    timestamp is `start_ns + time_stamp`) and lies within 1 mm of `XYZLut` (without
    extrinsics) at that pixel's RANGE or, for a second return, RANGE2; and the points that
    match the first return are exactly the pixels with a non-zero RANGE."""
    core = pytest.importorskip("ouster.sdk.core")
    opcap = pytest.importorskip("ouster.sdk.pcap")
    src = opcap.PcapFrameSetSource(str(DATA / capture), meta=[str(DATA / calibration)])
    lut = core.XYZLut(src.sensor_info[0], use_extrinsics=False)
    sdk = [f for fs in src for f in fs if f is not None]
    ours = list(lidarxdp.read_pcap(DATA / capture, sensor, DATA / calibration))
    assert len(ours) == len(sdk) > 0
    for o, f in zip(ours, sdk):
        p = o.points
        column = {int(t) - o.start_ns: c for c, t in enumerate(f.timestamp) if t}
        cols = np.array([column.get(int(t), -1) for t in p["time_stamp"]])
        assert (cols >= 0).all(), f"frame {o.seq}: points at no column's time"
        rows = p["channel"].astype(int)
        rng = f.field(core.ChanField.RANGE)
        mine = o.xyz()
        first = np.abs(mine - lut(rng)[rows, cols]).max(axis=1)
        err = first
        if core.ChanField.RANGE2 in list(f.fields):
            second = np.abs(mine - lut(f.field(core.ChanField.RANGE2))[rows, cols]).max(axis=1)
            err = np.minimum(first, second)
        assert err.max() <= 1e-3, f"frame {o.seq}: {err.max()} m"
        assert (first <= 1e-3).sum() == (rng > 0).sum(), f"frame {o.seq}"


#: The fuzz targets' decoder inputs (`fuzz/corpus/<target>`, written by `cargo xtask fuzz` and
#: grown by its runs), by target: the family's sensors from CAPTURES.
FUZZ_TARGETS = {
    "velodyne": ["vlp16", "vlp32c", "vls128"],
    "hesai": ["pandar40p", "pandar64", "pandarqt64", "pandarqt128", "pandarxt32", "pandarxt32m"],
    "ouster": ["ouster"],
    "robosense": ["helios16p"],
}


def fuzz_records(data):
    """The `(gap, payload)` records of a decoder fuzz input (fuzz/src/shared.rs: a selector
    byte, then `len: u16 LE, gap: u16 LE, len bytes` each; a short last record as it is)."""
    at = 1
    while at + 4 <= len(data):
        n = int.from_bytes(data[at : at + 2], "little")
        gap = int.from_bytes(data[at + 2 : at + 4], "little")
        yield gap, data[at + 4 : at + 4 + n]
        at += 4 + n


def test_the_fuzz_corpus_never_crashes_the_interpreter():
    """Every input of the decoder fuzz targets' corpus, pushed through `Decoder.push` of each
    sensor of its family (every calibration of CAPTURES): no exception, no crash, and every
    datagram accounted for exactly once (decoded, malformed, ignored, auxiliary, dropped as a
    time jump, a duplicate or late, or held after a time jump)."""
    corpus = os.environ.get("LIDARXDP_FUZZ_CORPUS")
    if corpus is None:
        pytest.skip("LIDARXDP_FUZZ_CORPUS not set (cargo xtask test sets it after its fuzz run)")
    corpus = Path(corpus)
    pushed = 0
    for target, sensors in FUZZ_TARGETS.items():
        files = sorted((corpus / target).iterdir())
        assert files, f"no corpus for {target} in {corpus}"
        for sensor in sensors:
            cal = next(c for _, s, c in CAPTURES if s == sensor)
            for f in files:
                dec = lidarxdp.Decoder(sensor, DATA / cal)
                t, n = 1_700_000_000_000_000_000, 0
                for gap, payload in fuzz_records(f.read_bytes()):
                    t += gap * 10_000
                    for frame in dec.push(payload, t):
                        assert frame.points.shape == (len(frame),)
                    n += 1
                dec.flush()
                c = dec.counters
                assert c["packets"] == n, f
                fates = ("decoded", "malformed", "ignored", "auxiliary", "time_jumps", "duplicates", "late", "held")
                assert sum(c[k] for k in fates) == n, (f, c)
                pushed += n
    assert pushed > 0


def test_subscribe_over_zenoh_reads_the_daemons_topic(tmp_path):
    """A daemon publishing on zenoh (`--zenoh`, its peer listening on loopback): `subscribe`
    with `zenoh:/lidar/front/points` yields its PointCloud2 messages as frames, points equal
    to `read_pcap`'s, named by `header.frame_id`, with the publisher's sequence numbers."""
    import socket
    import threading
    import time

    cap, sensor, cal = CAPTURES[0]
    udp, tcp, zport = free_port(socket.SOCK_DGRAM), free_port(socket.SOCK_STREAM), free_port(socket.SOCK_STREAM)
    listen = tmp_path / "daemon.json5"
    listen.write_text(
        '{ mode: "peer", listen: { endpoints: ["tcp/127.0.0.1:%d"] }, '
        "scouting: { multicast: { enabled: false } } }" % zport
    )
    connect = tmp_path / "sub.json5"
    connect.write_text(
        '{ mode: "peer", connect: { endpoints: ["tcp/127.0.0.1:%d"] }, '
        "scouting: { multicast: { enabled: false } } }" % zport
    )
    daemon = subprocess.Popen(
        [EXE, "run", "--backend", "socket", "--bind", "127.0.0.1", "--sensor", sensor, "--port", str(udp),
         "--calibration", str(DATA / cal), "--listen", f"127.0.0.1:{tcp}", "--name", "front",
         "--zenoh", "--zenoh-config", str(listen), "--ros-domain-id", "0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:  # the daemon is up once its TCP publisher accepts
            try:
                lidarxdp.subscribe(f"127.0.0.1:{tcp}", connect_timeout=1.0)
                break
            except lidarxdp.LidarxdpError:
                assert daemon.poll() is None and time.monotonic() < deadline, "daemon did not start"
                time.sleep(0.1)
        sub = lidarxdp.subscribe("zenoh:/lidar/front/points", zenoh_config=connect, domain_id=0)
        time.sleep(1.0)
        subprocess.run([EXE, "replay", str(DATA / cap), "--to", f"127.0.0.1:{udp}", "--rate", "realtime"],
                       check=True, capture_output=True)
        want = list(lidarxdp.read_pcap(DATA / cap, sensor, DATA / cal))
        got = []
        reader = threading.Thread(target=lambda: got.extend(next(sub) for _ in want), daemon=True)
        reader.start()
        reader.join(30)  # a topic never ends: bound the wait, never hang the suite
        assert len(got) == len(want), f"{len(got)} of {len(want)} frames over zenoh in 30 s"
        for g, w in zip(got, want):
            assert g.sensor == "front"
            assert g.points.tobytes() == w.points.tobytes()
            assert not g.points.flags.writeable
        assert [g.seq for g in got] == list(range(got[0].seq, got[0].seq + len(got)))
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
