#!/usr/bin/env python3
"""An independent Foxglove WebSocket client for lidarxdp's CI tests (userspace/tests/live).

It speaks to `lidarxdp run --foxglove` only through the `websockets` library, following the
Foxglove WebSocket protocol specification (foxglove/ws-protocol `docs/spec.md`: text messages
are JSON objects with an "op"; binary server messages start with a one-byte opcode, 1 being
"Message Data": u32 subscription id, u64 log time in ns, payload, little-endian). It decodes the
PointCloud2 messages twice, independently of lidarxdp's code: with `mcap_ros2`, from the
`ros2msg` schema text the server advertised (so a wrong schema fails), and with rosbags' ROS 2
Jazzy type store (so a schema and an encoder agreeing on the same mistake fail too).

Subcommands (each writes one JSON object to --out and exits 0; a protocol violation prints a
message on stderr and exits 1):

  handshake  connect offering --protocols; record the HTTP status when refused, else the
             negotiated subprotocol, serverInfo and the advertised channels, then close
  watch      the same, then subscribe to --topics, print "ready" on stdout, and record every
             message until --expect-frames PointCloud2 messages arrived and a diagnostics
             message counts them all (or --timeout seconds passed); the point bytes of each
             cloud go to OUT.bin
  count      (the soak, `cargo xtask soak`) connect, wait until --topics are advertised,
             subscribe, print "ready", and count the messages of each topic without decoding
             or storing them (a cloud's CDR encapsulation header is checked) until the server
             closes the connection or stdin gives "stop" or ends; OUT.json is
             {"messages": {TOPIC: N}, "bytes": B, "closed_by": "server"|"stdin"}
  churn      (the soak) over and over until stdin gives "stop" or ends: connect, subscribe to
             --topics, read one message, close, then wait --every seconds; OUT.json is
             {"cycles": N, "messages": M, "errors": E} (E: cycles that got no message within
             --timeout or failed to connect; counted, not fatal)
  (count and churn also stop on SIGTERM or SIGINT, and still write OUT.json)
"""

import argparse
import base64
import json
import signal
import struct
import sys
import threading
import time

from mcap_ros2._dynamic import generate_dynamic
from rosbags.typesys import Stores, get_typestore
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

POINTCLOUD2 = "sensor_msgs/msg/PointCloud2"
# Server binary opcode "Message Data" (spec: "Binary messages", server to client).
OP_MESSAGE_DATA = 1


def fail(msg):
    """Prints `msg` on stderr and exits with status 1."""
    print(f"foxglove_client: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def open_ws(url, protocols, timeout):
    """Connects offering `protocols`, retrying refused connections for `timeout` seconds.
    Returns (websocket, None), or (None, HTTP status) when the server refused the handshake."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            ws = connect(
                url,
                subprotocols=protocols,
                open_timeout=10,
                max_size=None,
                compression=None,
            )
            return ws, None
        except InvalidStatus as e:
            return None, e.response.status_code
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def recv_json(ws, timeout):
    """The next text message as JSON (a binary message here is a protocol error)."""
    msg = ws.recv(timeout=timeout)
    if not isinstance(msg, str):
        fail(f"binary message before the channels were advertised: {msg[:16]!r}")
    return json.loads(msg)


def normalise(advertise, schemas):
    """The channels of an `advertise` message as (id, topic, encoding, schemaName, schema,
    schemaEncoding) dicts: `foxglove.sdk.v1` carries the schema in each channel,
    `foxglove.sdk.v1.1` references a per-connection schema table (`schemas`, updated here)."""
    for s in advertise.get("schemas", []):
        data = s["data"]
        if s["encoding"] not in ("ros2msg", "jsonschema", "ros1msg", "omgidl", "ros2idl"):
            data = base64.b64decode(data).decode()
        schemas[s["id"]] = {"name": s["name"], "encoding": s["encoding"], "data": data}
    out = []
    for c in advertise["channels"]:
        if "schemaId" in c:
            s = schemas[c["schemaId"]]
            name, encoding, text = s["name"], s["encoding"], s["data"]
        else:
            name = c.get("schemaName")
            encoding = c.get("schemaEncoding")
            text = c.get("schema")
        out.append(
            {
                "id": c["id"],
                "topic": c["topic"],
                "encoding": c["encoding"],
                "schemaName": name,
                "schemaEncoding": encoding,
                "schema": text,
            }
        )
    return out


def hello(ws, channels, timeout):
    """Reads serverInfo (the first message) then advertisements until `channels` channels are
    known. Returns (serverInfo, channels, schema table)."""
    info = recv_json(ws, timeout)
    if info.get("op") != "serverInfo":
        fail(f"first message is not serverInfo: {info}")
    schemas = {}
    known = []
    while len(known) < channels:
        m = recv_json(ws, timeout)
        if m.get("op") == "advertise":
            known.extend(normalise(m, schemas))
        elif m.get("op") not in ("status", "advertiseServices"):
            fail(f"unexpected message before the advertisements: {m}")
    return info, known, schemas


def decode_cloud(payload, schema_text, typestore, decoders):
    """The PointCloud2 in `payload` decoded by mcap_ros2 (from the advertised schema) and by
    rosbags; fails unless both agree. Returns (record, data bytes)."""
    key = schema_text
    if key not in decoders:
        decoders[key] = generate_dynamic(POINTCLOUD2, schema_text)[POINTCLOUD2]
    a = decoders[key](payload)
    b = typestore.deserialize_cdr(payload, POINTCLOUD2)
    rec = {
        "payload_len": len(payload),
        "cdr_header": payload[:4].hex(),
        "sec": a.header.stamp.sec,
        "nanosec": a.header.stamp.nanosec,
        "frame_id": a.header.frame_id,
        "height": a.height,
        "width": a.width,
        "fields": [[f.name, f.offset, f.datatype, f.count] for f in a.fields],
        "is_bigendian": bool(a.is_bigendian),
        "point_step": a.point_step,
        "row_step": a.row_step,
        "is_dense": bool(a.is_dense),
    }
    other = {
        "payload_len": len(payload),
        "cdr_header": payload[:4].hex(),
        "sec": b.header.stamp.sec,
        "nanosec": b.header.stamp.nanosec,
        "frame_id": b.header.frame_id,
        "height": b.height,
        "width": b.width,
        "fields": [[f.name, f.offset, f.datatype, f.count] for f in b.fields],
        "is_bigendian": bool(b.is_bigendian),
        "point_step": b.point_step,
        "row_step": b.row_step,
        "is_dense": bool(b.is_dense),
    }
    if rec != other:
        fail(f"mcap_ros2 and rosbags disagree: {rec} != {other}")
    data = bytes(a.data)
    if data != bytes(b.data):
        fail("mcap_ros2 and rosbags decoded different point bytes")
    return rec, data


def handshake(args):
    ws, status = open_ws(args.url, args.protocols.split(","), args.timeout)
    if ws is None:
        return {"refused": status}
    with ws:
        info, channels, _ = hello(ws, args.channels, args.timeout)
        return {"subprotocol": ws.subprotocol, "serverInfo": info, "channels": channels}


def watch(args):
    ws, status = open_ws(args.url, args.protocols.split(","), args.timeout)
    if ws is None:
        fail(f"handshake refused with HTTP {status}")
    typestore = get_typestore(Stores.ROS2_JAZZY)
    decoders = {}
    clouds = []
    diagnostics = []
    with ws, open(args.out + ".bin", "wb") as binf:
        info, channels, _ = hello(ws, args.channels, args.timeout)
        by_topic = {c["topic"]: c for c in channels}
        subs = {}
        wanted = [t for t in args.topics.split(",") if t]
        for i, topic in enumerate(wanted):
            if topic not in by_topic:
                fail(f"{topic} not advertised: {sorted(by_topic)}")
            subs[100 + i] = by_topic[topic]
        ws.send(
            json.dumps(
                {
                    "op": "subscribe",
                    "subscriptions": [
                        {"id": sid, "channelId": c["id"]} for sid, c in subs.items()
                    ],
                }
            )
        )
        offset = [0]

        def receive(left):
            """Records the next message; False when none came within `left` seconds."""
            try:
                msg = ws.recv(timeout=max(left, 0.001))
            except TimeoutError:
                return False
            if isinstance(msg, str):
                m = json.loads(msg)
                if m.get("op") not in ("status", "removeStatus", "advertise"):
                    fail(f"unexpected text message: {m}")
                return True
            if len(msg) < 13 or msg[0] != OP_MESSAGE_DATA:
                fail(f"unexpected binary message: opcode {msg[0]}, {len(msg)} bytes")
            sid, log_time = struct.unpack_from("<IQ", msg, 1)
            payload = msg[13:]
            if sid not in subs:
                fail(f"message on unknown subscription {sid}")
            c = subs[sid]
            if c["encoding"] == "cdr":
                rec, data = decode_cloud(payload, c["schema"], typestore, decoders)
                rec.update(
                    topic=c["topic"],
                    log_time=log_time,
                    data_offset=offset[0],
                    data_len=len(data),
                )
                binf.write(data)
                offset[0] += len(data)
                clouds.append(rec)
            elif c["encoding"] == "json":
                d = json.loads(payload)
                d["log_time"] = log_time
                diagnostics.append(d)
            else:
                fail(f"unexpected encoding {c['encoding']}")
            return True

        # The server handles one subscribe message's subscriptions in order, so the first
        # diagnostics message (about once a second) shows the clouds' subscription is in place.
        deadline = time.monotonic() + args.timeout
        if args.wait_diagnostics:
            while not diagnostics:
                if not receive(deadline - time.monotonic()):
                    fail("no diagnostics message within the timeout")
        print("ready", flush=True)
        deadline = time.monotonic() + args.timeout
        while True:
            done_clouds = len(clouds) >= args.expect_frames
            counted = bool(diagnostics) and sum(
                s["totals"]["frames"] for s in diagnostics[-1]["sensors"]
            ) >= args.expect_frames
            if done_clouds and (counted or not args.wait_diagnostics):
                break
            if not receive(deadline - time.monotonic()):
                break
        return {
            "subprotocol": ws.subprotocol,
            "serverInfo": info,
            "channels": channels,
            "clouds": clouds,
            "diagnostics": diagnostics,
        }


def advertised(ws, topics, timeout):
    """Reads serverInfo then advertisements until every topic of `topics` is known; returns
    {topic: channel}."""
    info = recv_json(ws, timeout)
    if info.get("op") != "serverInfo":
        fail(f"first message is not serverInfo: {info}")
    schemas = {}
    by_topic = {}
    deadline = time.monotonic() + timeout
    while not all(t in by_topic for t in topics):
        m = recv_json(ws, max(deadline - time.monotonic(), 0.001))
        if m.get("op") == "advertise":
            for c in normalise(m, schemas):
                by_topic[c["topic"]] = c
        elif m.get("op") == "unadvertise":
            continue
        elif m.get("op") not in ("status", "removeStatus", "advertiseServices"):
            fail(f"unexpected message before the advertisements: {m}")
    return by_topic


def subscribe(ws, topics, by_topic):
    """Subscribes to `topics` (ids 100, 101, ...); returns {subscription id: topic}."""
    subs = {100 + i: t for i, t in enumerate(topics)}
    ws.send(
        json.dumps(
            {
                "op": "subscribe",
                "subscriptions": [
                    {"id": sid, "channelId": by_topic[t]["id"]} for sid, t in subs.items()
                ],
            }
        )
    )
    return subs


def stopper():
    """An Event set when stdin gives a line "stop" or reaches end of file, or on SIGTERM or
    SIGINT (so the result is still written)."""
    stop = threading.Event()

    def watch_stdin():
        for line in sys.stdin:
            if line.strip() == "stop":
                break
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    threading.Thread(target=watch_stdin, daemon=True).start()
    return stop


def count(args):
    topics = [t for t in args.topics.split(",") if t]
    ws, status = open_ws(args.url, args.protocols.split(","), args.timeout)
    if ws is None:
        fail(f"handshake refused with HTTP {status}")
    messages = {t: 0 for t in topics}
    total = 0
    closed_by = "stdin"
    stop = stopper()
    with ws:
        subs = subscribe(ws, topics, advertised(ws, topics, args.timeout))
        print("ready", flush=True)
        while not stop.is_set():
            try:
                msg = ws.recv(timeout=0.5)
            except TimeoutError:
                continue
            except Exception:  # the server closed the connection (the daemon stopped)
                closed_by = "server"
                break
            if isinstance(msg, str):
                continue
            if len(msg) < 13 or msg[0] != OP_MESSAGE_DATA:
                fail(f"unexpected binary message: opcode {msg[0]}, {len(msg)} bytes")
            sid, _ = struct.unpack_from("<IQ", msg, 1)
            if sid not in subs:
                fail(f"message on unknown subscription {sid}")
            # CDR little-endian encapsulation (CDR_LE, options 0), as a PointCloud2 starts.
            if msg[13:17] != b"\x00\x01\x00\x00":
                fail(f"{subs[sid]}: payload does not start with a CDR_LE header: {msg[13:17]!r}")
            messages[subs[sid]] += 1
            total += len(msg) - 13
    return {"messages": messages, "bytes": total, "closed_by": closed_by}


def churn(args):
    topics = [t for t in args.topics.split(",") if t]
    protocols = args.protocols.split(",")
    stop = stopper()
    cycles = messages = errors = 0
    while not stop.is_set():
        cycles += 1
        try:
            ws = connect(args.url, subprotocols=protocols, open_timeout=5, close_timeout=2,
                         max_size=None, compression=None)
            with ws:
                subscribe(ws, topics, advertised(ws, topics, args.timeout))
                deadline = time.monotonic() + args.timeout
                got = False
                while not got and not stop.is_set() and time.monotonic() < deadline:
                    try:
                        msg = ws.recv(timeout=0.5)
                    except TimeoutError:
                        continue
                    got = isinstance(msg, bytes) and msg[:1] == bytes([OP_MESSAGE_DATA])
                if got:
                    messages += 1
                elif not stop.is_set():
                    errors += 1
        except Exception:  # refused, timed out or closed: counted
            errors += 1
        stop.wait(args.every)
    return {"cycles": cycles, "messages": messages, "errors": errors}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("count", "churn"):
        s = sub.add_parser(name)
        s.add_argument("--url", required=True)
        s.add_argument("--protocols", required=True, help="comma-separated subprotocols")
        s.add_argument("--topics", required=True, help="comma-separated topics")
        s.add_argument("--out", required=True)
        s.add_argument("--timeout", type=float, default=30.0)
        if name == "churn":
            s.add_argument("--every", type=float, default=1.0, help="seconds between cycles")
    for name in ("handshake", "watch"):
        s = sub.add_parser(name)
        s.add_argument("--url", required=True)
        s.add_argument("--protocols", required=True, help="comma-separated subprotocols")
        s.add_argument("--channels", type=int, required=True, help="channels to wait for")
        s.add_argument("--out", required=True)
        s.add_argument("--timeout", type=float, default=30.0)
        if name == "watch":
            s.add_argument("--topics", required=True, help="comma-separated topics")
            s.add_argument("--expect-frames", type=int, required=True)
            s.add_argument("--wait-diagnostics", action="store_true")
    args = p.parse_args()
    result = {"handshake": handshake, "watch": watch, "count": count, "churn": churn}[args.cmd](
        args
    )
    with open(args.out + ".json", "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
