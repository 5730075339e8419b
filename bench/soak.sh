#!/bin/bash
# Soak (issue 25): 10 VLP-16s (dual return) at 7,540 pps into one daemon (XDP, generic mode,
# on a veth pair in two namespaces it creates and deletes) with every sink on: TCP, zenoh
# (shared memory), DDS, Foxglove, the view, metrics and the pcap recording; one TCP subscriber
# and zenoh subscribers of sensors 0 and 9. Prints the sinks' drop counters from the daemon's
# stats JSON at exit. Root. Sends only inside its namespaces.
#
# Usage: bench/soak.sh DAEMON SECONDS OUT [--pcap FILE]
#   DAEMON   the release daemon (target/release/lidarxdp, built by `cargo xtask build`)
#   SECONDS  how long the generator sends
#   OUT      folder for the configuration, logs, recording and stats.json (its earlier ones
#            are removed first)
#   --pcap   the VLP-16 capture looped (default: the dual-return one in ../shared/data)
set -u
[ $# -ge 3 ] || { echo "usage: $0 DAEMON SECONDS OUT [--pcap FILE]" >&2; exit 2; }
D=$1; SECS=$2; OUT=$3
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH=$ROOT/target/release/lidarxdp-bench
DATA=$ROOT/../shared/data/velodyne/vlp16
PCAP=$DATA/vlp16_dual_nebula_603pkt.pcap
if [ "${4:-}" = "--pcap" ]; then PCAP=$5; fi
mkdir -p "$OUT"
rm -f "$OUT"/{soak.toml,zpub.json5,zsub.json5,daemon.log,sub_*.log,gen.log,gen.json,stats.json} "$OUT"/rec*.pcap
A=lxsoak-a; B=lxsoak-b
ip netns del $A 2>/dev/null; ip netns del $B 2>/dev/null
ip netns add $A; ip netns add $B
ip link add lxsk0 type veth peer name lxsk1
ip link set lxsk0 netns $A; ip link set lxsk1 netns $B
ip -n $A addr add 10.77.0.1/24 dev lxsk0; ip -n $B addr add 10.77.0.2/24 dev lxsk1
ip -n $A link set lxsk0 up; ip -n $B link set lxsk1 up; ip -n $A link set lo up; ip -n $B link set lo up
cat > $OUT/zpub.json5 <<J
{ mode: "peer", listen: { endpoints: ["tcp/127.0.0.1:7447"] }, scouting: { multicast: { enabled: false } } }
J
cat > $OUT/zsub.json5 <<J
{ mode: "peer", connect: { endpoints: ["tcp/127.0.0.1:7447"] }, listen: { endpoints: [] }, scouting: { multicast: { enabled: false } } }
J
{
echo '[capture]'; echo 'backend = "xdp"'; echo 'iface = "lxsk0"'; echo 'xdp_mode = "generic"'
echo '[process]'; echo "stats_json = \"$OUT/stats.json\""
echo '[tcp]'; echo 'listen = "127.0.0.1:7510"'
echo '[zenoh]'; echo 'enabled = true'; echo "config = \"$OUT/zpub.json5\""
echo '[dds]'; echo 'enabled = true'
echo '[foxglove]'; echo 'listen = "127.0.0.1:8765"'
echo '[view]'; echo 'listen = "127.0.0.1:8088"'
echo '[metrics]'; echo 'listen = "127.0.0.1:9751"'
echo '[recording]'; echo "pcap = \"$OUT/rec.pcap\""; echo 'split_size_mb = 256'
for i in $(seq 0 9); do
  echo '[[sensors]]'; echo "name = \"s$i\""; echo 'model = "vlp16"'
  echo "calibration = \"$DATA/calibration/VLP16db.yaml\""; echo "port = $((2368+i))"
done
} > $OUT/soak.toml
ip netns exec $A $D run --config $OUT/soak.toml > $OUT/daemon.log 2>&1 &
DPID=$!
sleep 4
ip netns exec $A $D subscribe 127.0.0.1:7510 --stats > $OUT/sub_tcp.log 2>&1 &
S1=$!
ip netns exec $A $D subscribe zenoh:/lidar/s0/points --zenoh-config $OUT/zsub.json5 --stats > $OUT/sub_z0.log 2>&1 &
S2=$!
ip netns exec $A $D subscribe zenoh:/lidar/s9/points --zenoh-config $OUT/zsub.json5 --stats > $OUT/sub_z9.log 2>&1 &
S3=$!
sleep 3
ip netns exec $B $BENCH gen --pcap $PCAP --to 10.77.0.1 --sensors 10 --pps 7540 --duration $SECS --report $OUT/gen.json > $OUT/gen.log 2>&1
sleep 2
kill -INT $S1 $S2 $S3; sleep 1
kill -INT $DPID; wait $DPID
ip netns del $A; ip netns del $B
python3 - $OUT/stats.json <<P
import json,sys
s=json.load(open(sys.argv[1]))
z=s.get("zenoh",{}); d=s.get("dds",{}); f=s.get("foxglove",{}); p=s.get("publisher",{})
print("capture frames_out", s.get("capture",{}).get("frames_out"))
print("zenoh", {k:z.get(k) for k in ["published","dropped","loaned","copied_bytes","loans","loans_refused","shm_exhausted","errors"]})
print("dds", {k:d.get(k) for k in ["published","dropped","errors"]})
print("foxglove", {k:f.get(k) for k in ["dropped","unwatched"]})
print("publisher", {k:p.get(k) for k in p if "drop" in k or k in ("frames_in","frames_sent")})
P
