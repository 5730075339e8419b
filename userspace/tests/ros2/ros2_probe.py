#!/usr/bin/env python3
"""An independent ROS 2-over-zenoh client for lidarxdp's CI tests (userspace/tests/ros2).

It speaks to the daemon only through eclipse-zenoh (PyPI) and decodes the messages only with
rosbags (the CDR deserialiser of its ROS 2 Jazzy type store), so a fault shared by lidarxdp's
encoder and its own reader cannot hide. Nothing here imports lidarxdp code.

Subcommands (each prints a line "ready" on stdout once set up, where that matters):

  listen      subscribe to one key expression; on end of stdin (or a line "stop") write one
              JSON line per message to OUT.jsonl and the message's point bytes to OUT.bin
  router      run a zenoh router until end of stdin
  liveliness  query the liveliness tokens `@ros2_lv/**` and print them, with the session ids
              this session sees, as one JSON object
  pcap-imu    print the Ouster IMU packets of a pcap, read with `struct` at the documented
              offsets, as one JSON array (no zenoh)
  pcap-position  the same for Velodyne position packets (PPS status, NMEA, RMC fields)
  pcap-drop   copy a pcap without every N-th datagram to a port (a lossy link)
  decode-raw  decode a DDS subscriber's raw samples (dds_sub_fastdds --raw-type) with rosbags

Errors print a message on stderr and exit with status 1 (2 for bad arguments, from argparse).
"""

import argparse
import json
import sys
import threading
import time

import zenoh
from rosbags.typesys import Stores, get_typestore

POINTCLOUD2 = "sensor_msgs/msg/PointCloud2"
IMU = "sensor_msgs/msg/Imu"
DIAGNOSTIC_ARRAY = "diagnostic_msgs/msg/DiagnosticArray"
# rmw_zenoh's attachment: i64 sequence number, i64 source time (ns), LEB128 length 16, GID.
ATTACHMENT_LEN = 33


def fail(msg):
    """Prints `msg` on stderr and exits with status 1."""
    print(f"ros2_probe: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def session_config(mode, connect, listen, shm, tls=None):
    """A zenoh configuration: `mode`, endpoints to connect to and listen on, no multicast
    scouting (the tests give every endpoint explicitly), shared memory on (zenoh's default)
    or off (`shm` false: every sample then crosses the TCP link), and `tls`, the keys of
    zenoh's `transport/link/tls` section (certificate files), when given."""
    conf = {
        "mode": mode,
        "scouting": {"multicast": {"enabled": False}},
    }
    transport = {}
    if not shm:
        transport["shared_memory"] = {"enabled": False}
    if tls:
        transport["link"] = {"tls": tls}
    if transport:
        conf["transport"] = transport
    if connect:
        conf["connect"] = {"endpoints": connect}
    if listen:
        conf["listen"] = {"endpoints": listen}
    return zenoh.Config.from_json5(json.dumps(conf))


def tls_section(args):
    """zenoh's `transport/link/tls` keys from `--tls-ca` (trust it, check the server's name)
    and `--tls-cert`/`--tls-key` (this session's certificate when it listens), or None."""
    tls = {}
    if args.tls_ca:
        tls["root_ca_certificate"] = args.tls_ca
        tls["verify_name_on_connect"] = True
    if args.tls_cert:
        tls["listen_certificate"] = args.tls_cert
    if args.tls_key:
        tls["listen_private_key"] = args.tls_key
    return tls or None


def open_session(args):
    """Opens the session the arguments describe, retrying every 100 ms for `--timeout` seconds
    (a client fails at once when its endpoint does not accept yet); exits on failure."""
    deadline = time.monotonic() + args.timeout
    while True:
        try:
            return zenoh.open(session_config(args.mode, args.connect, args.listen,
                                             not args.no_shm, tls_section(args)))
        except Exception as e:  # zenoh raises ZError; anything else is as fatal
            if time.monotonic() >= deadline:
                fail(f"cannot open a zenoh session ({args.mode}, connect {args.connect}, "
                     f"listen {args.listen}) within {args.timeout} s: {e}")
        time.sleep(0.1)


def liveliness_keys(session, timeout):
    """The key expressions of every liveliness token `@ros2_lv/**` visible now."""
    keys = []
    for reply in session.liveliness().get("@ros2_lv/**", timeout=timeout):
        if reply.ok is not None:
            keys.append(str(reply.ok.key_expr))
    return sorted(keys)


def wait_tokens(session, contains, count, timeout):
    """Queries the liveliness tokens until at least `count` of them contain `contains`;
    returns all tokens seen then, or exits after `timeout` seconds with what was seen."""
    deadline = time.monotonic() + timeout
    keys = []
    while True:
        keys = liveliness_keys(session, 2.0)
        if sum(contains in k for k in keys) >= count:
            return keys
        if time.monotonic() >= deadline:
            fail(f"after {timeout} s, fewer than {count} liveliness tokens contain "
                 f"{contains!r}: {keys}")
        time.sleep(0.1)


def wait_stop():
    """Blocks until stdin ends or carries a line "stop"."""
    for line in sys.stdin:
        if line.strip() == "stop":
            return


def hexs(b):
    """Lowercase hex of a bytes-like value."""
    return bytes(b).hex()


def cmd_listen(args):
    session = open_session(args)
    received = []  # (key, payload bytes, attachment bytes or None, arrival time)
    lock = threading.Lock()
    # --notify-within S: one line on stdout, "have N" as soon as --expect samples are in, or
    # "short N" after S seconds of waiting (after "ready"), whichever comes first.
    told = [False]

    def tell(word):
        with lock:
            if told[0]:
                return
            told[0] = True
            n = len(received)
        print(f"{word} {n}", flush=True)

    def on_sample(sample):
        att = sample.attachment
        item = (
            str(sample.key_expr),
            sample.payload.to_bytes(),
            None if att is None else att.to_bytes(),
            time.monotonic(),
        )
        with lock:
            received.append(item)
            full = args.expect is not None and len(received) >= args.expect
        if full and args.notify_within is not None:
            tell("have")

    sub = session.declare_subscriber(args.key, on_sample)
    if args.wait_token:
        wait_tokens(session, args.wait_token, 1, args.timeout)
    print("ready", flush=True)
    if args.notify_within is not None:
        timer = threading.Timer(args.notify_within, tell, args=("short",))
        timer.daemon = True
        timer.start()
    wait_stop()
    # The daemon has stopped (or the test is done): let the samples still on their way in
    # arrive, until `--expect` of them are there (if given) and none came for half a second
    # (so that one too many is seen too), for at most `--timeout` seconds.
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        with lock:
            n = len(received)
            last = received[-1][3] if received else 0.0
        if (args.expect is None or n >= args.expect) and time.monotonic() - last > 0.5:
            break
        time.sleep(0.05)
    sub.undeclare()
    session.close()
    with lock:
        items = list(received)

    typestore = get_typestore(Stores.ROS2_JAZZY)
    offset = 0
    with open(args.out + ".jsonl", "w") as js, open(args.out + ".bin", "wb") as bins:
        for i, (key, payload, att, _) in enumerate(items):
            try:
                msg = typestore.deserialize_cdr(payload, args.type)
            except Exception as e:
                fail(f"message {i} on {key}: rosbags cannot decode it as "
                     f"{args.type}: {e}")
            if args.type != POINTCLOUD2:
                rec = other_record(args.type, msg)
                rec["key"] = key
                rec["cdr_header"] = hexs(payload[:4])
                if att is not None and len(att) == ATTACHMENT_LEN:
                    rec["seq"] = int.from_bytes(att[0:8], "little", signed=True)
                js.write(json.dumps(rec) + "\n")
                continue
            data = msg.data.tobytes()
            rec = {
                "key": key,
                "payload_len": len(payload),
                "cdr_header": hexs(payload[:4]),
                "sec": int(msg.header.stamp.sec),
                "nanosec": int(msg.header.stamp.nanosec),
                "frame_id": msg.header.frame_id,
                "height": int(msg.height),
                "width": int(msg.width),
                "fields": [[f.name, int(f.offset), int(f.datatype), int(f.count)]
                           for f in msg.fields],
                "is_bigendian": bool(msg.is_bigendian),
                "point_step": int(msg.point_step),
                "row_step": int(msg.row_step),
                "is_dense": bool(msg.is_dense),
                "data_offset": offset,
                "data_len": len(data),
                "attachment": None if att is None else hexs(att),
            }
            if att is not None and len(att) == ATTACHMENT_LEN:
                rec["seq"] = int.from_bytes(att[0:8], "little", signed=True)
                rec["time_ns"] = int.from_bytes(att[8:16], "little", signed=True)
                rec["gid_len"] = att[16]
                rec["gid"] = hexs(att[17:33])
            bins.write(data)
            offset += len(data)
            js.write(json.dumps(rec) + "\n")
    print(f"wrote {len(items)} messages", flush=True)


def other_record(type_name, msg):
    """The JSON record of a decoded `sensor_msgs/msg/Imu` or
    `diagnostic_msgs/msg/DiagnosticArray` (every field, floats as Python floats)."""
    head = {
        "sec": int(msg.header.stamp.sec),
        "nanosec": int(msg.header.stamp.nanosec),
        "frame_id": msg.header.frame_id,
    }
    if type_name == IMU:
        vec = lambda v: [float(v.x), float(v.y), float(v.z)]
        q = msg.orientation
        head.update({
            "orientation": [float(q.x), float(q.y), float(q.z), float(q.w)],
            "orientation_covariance": [float(x) for x in msg.orientation_covariance],
            "angular_velocity": vec(msg.angular_velocity),
            "angular_velocity_covariance": [float(x) for x in msg.angular_velocity_covariance],
            "linear_acceleration": vec(msg.linear_acceleration),
            "linear_acceleration_covariance":
                [float(x) for x in msg.linear_acceleration_covariance],
        })
        return head
    head["status"] = [{
        "level": int(st.level),
        "name": st.name,
        "message": st.message,
        "hardware_id": st.hardware_id,
        "values": [[kv.key, kv.value] for kv in st.values],
    } for st in msg.status]
    return head


def pcap_records(path):
    """Yields (record header bytes, frame bytes) of a classic little-endian pcap (its 24-byte
    file header is `pcap_records.header` after the first call), and the UDP destination port
    and payload of an unfragmented Ethernet/IPv4/UDP frame, else (None, None)."""
    import struct
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != bytes.fromhex("d4c3b2a1"):
        fail(f"{path}: not a little-endian classic pcap")
    pcap_records.header = data[:24]
    pos = 24
    while pos + 16 <= len(data):
        incl = struct.unpack_from("<I", data, pos + 8)[0]
        rec, frame = data[pos:pos + 16], data[pos + 16:pos + 16 + incl]
        pos += 16 + incl
        port, payload = None, None
        if len(frame) >= 14 + 20 + 8 and frame[12:14] == b"\x08\x00" and frame[23] == 17:
            udp = 14 + (frame[14] & 0x0F) * 4
            port = struct.unpack_from(">H", frame, udp + 2)[0]
            payload = frame[udp + 8:]
        yield rec, frame, port, payload


def cmd_pcap_imu(args):
    """Prints, as one JSON array, every Ouster IMU packet (48-byte UDP payload to `--port`) of
    a classic little-endian pcap of Ethernet frames, read with `struct` at the offsets of
    Ouster's "IMU Data Format" and converted as ouster-ros does (g * 9.80665 m/s2, deg/s to
    rad/s): sys_ts, accel_ts, gyro_ts (ns), linear_acceleration, angular_velocity."""
    import math
    import struct
    out = []
    for _, _, port, payload in pcap_records(args.pcap):
        if port != args.port or len(payload) != 48:
            continue
        sys_ts, accel_ts, gyro_ts, ax, ay, az, gx, gy, gz = struct.unpack("<QQQ6f", payload)
        out.append({
            "sys_ts": sys_ts, "accel_ts": accel_ts, "gyro_ts": gyro_ts,
            "linear_acceleration": [a * 9.80665 for a in (ax, ay, az)],
            "angular_velocity": [math.radians(g) for g in (gx, gy, gz)],
        })
    print(json.dumps(out))


def cmd_pcap_position(args):
    """Prints, as one JSON array, every Velodyne position packet (512- or 554-byte payload to
    `--port`) of a classic pcap, read at the VLP-16 user manual's offsets ("Position Packet"):
    the top-of-hour time stamp (u32 LE at 198, us), the PPS status byte (202: 0 absent,
    1 synchronizing, 2 locked, 3 error) and the NMEA sentence (from 206 to the first NUL, CR
    or LF), with the RMC status ("A" valid, "V" invalid, else null) and time of day (s) when
    the sentence is an RMC."""
    import struct
    names = {0: "absent", 1: "synchronizing", 2: "locked", 3: "error"}
    out = []
    for _, _, port, payload in pcap_records(args.pcap):
        if port != args.port or len(payload) not in (512, 554):
            continue
        ts = struct.unpack_from("<I", payload, 198)[0]
        nmea = payload[206:]
        for stop in (b"\x00", b"\r", b"\n"):
            nmea = nmea.split(stop)[0]
        nmea = nmea.decode("ascii")
        fields = nmea.split(",")
        rmc = len(fields) > 2 and fields[0].startswith("$") and fields[0].endswith("RMC")
        tod = None
        if rmc and len(fields[1]) >= 6:
            tod = int(fields[1][0:2]) * 3600 + int(fields[1][2:4]) * 60 + float(fields[1][4:])
        out.append({
            "top_of_hour_us": ts,
            "pps": names.get(payload[202], f"unknown {payload[202]}"),
            "nmea": nmea,
            "rmc_status": fields[2] if rmc and fields[2] in ("A", "V") else None,
            "rmc_time_of_day_s": tod,
        })
    print(json.dumps(out))


def cmd_pcap_drop(args):
    """Writes a copy of a classic pcap without every `--every`-th datagram to `--port` (the
    first kept), and prints how many it dropped."""
    dropped, n = 0, 0
    records = pcap_records(args.pcap)
    with open(args.out, "wb") as out:
        first = True
        for rec, frame, port, _ in records:
            if first:
                out.write(pcap_records.header)
                first = False
            if port == args.port:
                n += 1
                if n % args.every == 0:
                    dropped += 1
                    continue
            out.write(rec)
            out.write(frame)
    print(json.dumps({"dropped": dropped, "kept": n - dropped}))


def cmd_decode_raw(args):
    """Decodes the samples a DDS subscriber wrote as bytes (dds_sub_fastdds --raw-type: one
    JSON line each with `payload_hex`) with rosbags as `--type`, and writes one record per
    sample (as `listen` does for that type) to OUT.jsonl."""
    typestore = get_typestore(Stores.ROS2_JAZZY)
    with open(args.input) as src, open(args.out + ".jsonl", "w") as js:
        for i, line in enumerate(src):
            raw = json.loads(line)
            payload = bytes.fromhex(raw["payload_hex"])
            try:
                msg = typestore.deserialize_cdr(payload, args.type)
            except Exception as e:
                fail(f"sample {i} on {raw['key']}: rosbags cannot decode it as {args.type}: {e}")
            rec = other_record(args.type, msg)
            rec["key"] = raw["key"]
            rec["cdr_header"] = hexs(payload[:4])
            js.write(json.dumps(rec) + "\n")


def cmd_router(args):
    session = open_session(args)
    print("ready", flush=True)
    wait_stop()
    session.close()


def cmd_liveliness(args):
    session = open_session(args)
    if args.wait_contains:
        keys = wait_tokens(session, args.wait_contains, args.wait_count, args.timeout)
    else:
        keys = liveliness_keys(session, args.timeout)
    info = session.info
    out = {
        "zid": str(info.zid()),
        "peers": sorted(str(z) for z in info.peers_zid()),
        "routers": sorted(str(z) for z in info.routers_zid()),
        "tokens": keys,
    }
    session.close()
    print(json.dumps(out), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)

    def common(sp, mode):
        sp.add_argument("--mode", default=mode, choices=["client", "peer", "router"],
                        help=f"zenoh mode (default {mode})")
        sp.add_argument("--connect", action="append", default=[], metavar="ENDPOINT",
                        help="endpoint to connect to, e.g. tcp/127.0.0.1:7447 (repeatable)")
        sp.add_argument("--listen", action="append", default=[], metavar="ENDPOINT",
                        help="endpoint to listen on (repeatable)")
        sp.add_argument("--no-shm", action="store_true",
                        help="disable zenoh's shared-memory transport for this session")
        sp.add_argument("--tls-ca", metavar="PEM", help="CA certificate trusted for tls/ endpoints")
        sp.add_argument("--tls-cert", metavar="PEM", help="certificate served on tls/ listen endpoints")
        sp.add_argument("--tls-key", metavar="PEM", help="private key of --tls-cert")
        sp.add_argument("--timeout", type=float, default=30.0,
                        help="seconds to wait for tokens or late samples (default 30)")

    sp = sub.add_parser("listen", help="subscribe and dump what arrives")
    common(sp, "client")
    sp.add_argument("--key", required=True, help="key expression to subscribe to")
    sp.add_argument("--out", required=True, help="output path prefix (.jsonl and .bin)")
    sp.add_argument("--expect", type=int, help="messages to wait for after stdin ends")
    sp.add_argument("--notify-within", type=float, metavar="S",
                    help='print "have N" once --expect messages are in, or "short N" after S '
                         'seconds')
    sp.add_argument("--wait-token", metavar="TEXT",
                    help="before printing ready, wait for a liveliness token containing TEXT")
    sp.add_argument("--type", default=POINTCLOUD2, choices=[POINTCLOUD2, IMU, DIAGNOSTIC_ARRAY],
                    help="the messages' ROS 2 type (default PointCloud2)")
    sp.set_defaults(func=cmd_listen)

    sp = sub.add_parser("pcap-imu", help="print a pcap's Ouster IMU packets as JSON")
    sp.add_argument("pcap")
    sp.add_argument("--port", type=int, default=7503)
    sp.set_defaults(func=cmd_pcap_imu)

    sp = sub.add_parser("decode-raw", help="decode a DDS subscriber's raw samples with rosbags")
    sp.add_argument("--input", required=True, help="the subscriber's .jsonl")
    sp.add_argument("--type", required=True, choices=[IMU, DIAGNOSTIC_ARRAY])
    sp.add_argument("--out", required=True, help="output path prefix (.jsonl)")
    sp.set_defaults(func=cmd_decode_raw)

    sp = sub.add_parser("pcap-position", help="print a pcap's Velodyne position packets as JSON")
    sp.add_argument("pcap")
    sp.add_argument("--port", type=int, default=8308)
    sp.set_defaults(func=cmd_pcap_position)

    sp = sub.add_parser("pcap-drop", help="copy a pcap without every N-th datagram to a port")
    sp.add_argument("pcap")
    sp.add_argument("--out", required=True)
    sp.add_argument("--port", type=int, required=True)
    sp.add_argument("--every", type=int, required=True)
    sp.set_defaults(func=cmd_pcap_drop)

    sp = sub.add_parser("router", help="run a zenoh router until stdin ends")
    common(sp, "router")
    sp.set_defaults(func=cmd_router)

    sp = sub.add_parser("liveliness", help="print the @ros2_lv/** tokens as JSON")
    common(sp, "client")
    sp.add_argument("--wait-contains", metavar="TEXT",
                    help="query until --wait-count tokens contain TEXT")
    sp.add_argument("--wait-count", type=int, default=1)
    sp.set_defaults(func=cmd_liveliness)

    args = p.parse_args()
    if args.func in (cmd_pcap_imu, cmd_pcap_position, cmd_pcap_drop, cmd_decode_raw):
        return args.func(args)
    if not args.connect and not args.listen:
        p.error("give --connect or --listen")
    args.func(args)


if __name__ == "__main__":
    main()
