"""One measurement of a Python peer decoder for `cargo xtask bench --peers` (issue 15).

Run by `lidarxdp-bench peers` in the venv the xtask makes (target/peers/venv, pinned in
requirements.txt next to this file). Prints one JSON object on stdout.

    peer.py velodyne|ouster imports
        Only the imports every other mode does (interpreter + library start-up). The bench runs
        it in the same rounds as `e2e` and subtracts its CPU time from `e2e`'s.
    peer.py velodyne decode --payloads F --warmup N --model VLP16 --calibration YAML
    peer.py ouster   decode --payloads F --warmup N --meta JSON
        Decode only, packets already in memory. F holds records of
        [u64 LE time ns][u32 LE length][UDP payload]; the first N packets are a warm-up, the
        rest are timed with this thread's CPU time (time.thread_time_ns, i.e.
        CLOCK_THREAD_CPUTIME_ID).
        velodyne-decoder: its fastest in-memory API, ScanDecoder.decode on one PacketVector per
        scan (packets grouped at the block-0 azimuth wrap before timing).
        ouster-sdk: FrameBatcher (the former ScanBatcher) into a new LidarFrame per frame, then
        XYZLut(frame) for every completed frame (H x W x 3 doubles: every pixel).
    peer.py velodyne e2e --pcap F --model VLP16 --calibration YAML
    peer.py ouster   e2e --pcap F --meta JSON
        Read and decode the whole file the way the library's users do: velodyne_decoder's
        read_pcap; ouster-sdk's PcapFrameSetSource and XYZLut per frame. The bench measures
        the whole process (CPU time and peak RSS from wait4); frames and points are printed so
        the bench can check every frame was decoded.
    peer.py lidarxdp imports
    peer.py lidarxdp e2e --pcap F --model MODEL --calibration FILE
        The Python rows: lidarxdp's own Python package (the wheel of `cargo xtask python`,
        installed in this venv) the way its users read a file: read_pcap, and per frame the
        (N, 3) float32 xyz() array and the structured points array.
"""

import argparse
import json
import struct
import sys
import time

LIB, MODE = sys.argv[1], sys.argv[2]
if LIB == "velodyne":
    import velodyne_decoder as vd  # noqa: E402
elif LIB == "ouster":
    import numpy as np  # noqa: E402
    from ouster.sdk import core  # noqa: E402
    from ouster.sdk import pcap as opcap  # noqa: E402
elif LIB == "lidarxdp":
    import lidarxdp  # noqa: E402
else:
    sys.exit(f"peer.py: unknown library {LIB!r}")


def out(**kw):
    print(json.dumps(kw), flush=True)


if MODE == "imports":
    out(lib=LIB, mode=MODE)
    sys.exit(0)

ap = argparse.ArgumentParser()
ap.add_argument("--payloads")
ap.add_argument("--warmup", type=int, default=0)
ap.add_argument("--pcap")
ap.add_argument("--model")
ap.add_argument("--calibration")
ap.add_argument("--meta")
args = ap.parse_args(sys.argv[3:])


def payloads(path):
    """(time s, payload) of every record of a payload file."""
    data = open(path, "rb").read()
    off, recs = 0, []
    while off + 12 <= len(data):
        ts, n = struct.unpack_from("<QI", data, off)
        off += 12
        recs.append((ts * 1e-9, data[off:off + n]))
        off += n
    if off != len(data):
        sys.exit(f"peer.py: {path}: truncated record at byte {off}")
    return recs


def velodyne_config():
    cal = vd.Calibration.from_string(open(args.calibration).read())
    return vd.Config(model=getattr(vd.Model, args.model), calibration=cal)


def velodyne_decode():
    recs = [(t, p) for t, p in payloads(args.payloads) if len(p) == vd.PACKET_SIZE]
    # One scan = the packets from one block-0 azimuth wrap to the next (cut angle 0).
    scans, cur, last_az, first_timed = [], [], None, None
    for i, (t, p) in enumerate(recs):
        az = p[2] | (p[3] << 8)
        if cur and last_az is not None and az < last_az:
            scans.append((cur[0][0], cur))
            cur = []
        if first_timed is None and i >= args.warmup and not cur:
            first_timed = len(scans)
        cur.append((i, vd.VelodynePacket(t, p)))
        last_az = az
    if cur:
        scans.append((cur[0][0], cur))
    if first_timed is None:
        first_timed = len(scans)
    vectors = [vd.PacketVector([p for _, p in s]) for _, s in scans]
    timed_packets = sum(len(s) for _, s in scans[first_timed:])
    dec = vd.ScanDecoder(velodyne_config())
    for v in vectors[:first_timed]:
        dec.decode(v)
    frames = points = 0
    t0 = time.thread_time_ns()
    for v in vectors[first_timed:]:
        _, pts = dec.decode(v)
        frames += 1
        points += len(pts)
    ns = time.thread_time_ns() - t0
    out(packets=timed_packets, frames=frames, points=points, ns=ns)


def velodyne_e2e():
    frames = points = 0
    for _, pts in vd.read_pcap(args.pcap, velodyne_config()):
        frames += 1
        points += len(pts)
    out(frames=frames, points=points)


def ouster_info():
    return core.SensorInfo(open(args.meta).read())


def ouster_decode():
    info = ouster_info()
    recs = payloads(args.payloads)
    fmt = core.PacketFormat(info)
    pkts = []
    for _, p in recs:
        lp = core.LidarPacket(fmt)
        if len(p) != len(lp.buf):
            continue  # not a lidar packet of this format (IMU, another profile)
        lp.buf[:] = np.frombuffer(p, dtype=np.uint8)
        pkts.append(lp)
    batcher = core.FrameBatcher(info)
    lut = core.XYZLut(info, use_extrinsics=False)
    frame = core.LidarFrame(info)
    for p in pkts[:args.warmup]:
        if batcher.batch(p, frame):
            lut(frame)
            frame = core.LidarFrame(info)
    frames = points = 0
    t0 = time.thread_time_ns()
    for p in pkts[args.warmup:]:
        if batcher.batch(p, frame):
            xyz = lut(frame)
            frames += 1
            points += xyz.shape[0] * xyz.shape[1]
            frame = core.LidarFrame(info)
    ns = time.thread_time_ns() - t0
    out(packets=len(pkts) - args.warmup, frames=frames, points=points, ns=ns)


def ouster_e2e():
    src = opcap.PcapFrameSetSource(args.pcap, meta=[args.meta])
    lut = core.XYZLut(src.sensor_info[0], use_extrinsics=False)
    frames = points = 0
    for fs in src:
        for frame in fs:
            if frame is None:
                continue
            xyz = lut(frame)
            frames += 1
            points += xyz.shape[0] * xyz.shape[1]
    out(frames=frames, points=points)


def lidarxdp_e2e():
    frames = points = 0
    for f in lidarxdp.read_pcap(args.pcap, args.model, args.calibration):
        xyz = f.xyz()
        f.points
        frames += 1
        points += xyz.shape[0]
    out(frames=frames, points=points)


{
    ("lidarxdp", "e2e"): lidarxdp_e2e,
    ("velodyne", "decode"): velodyne_decode,
    ("velodyne", "e2e"): velodyne_e2e,
    ("ouster", "decode"): ouster_decode,
    ("ouster", "e2e"): ouster_e2e,
}[(LIB, MODE)]()
