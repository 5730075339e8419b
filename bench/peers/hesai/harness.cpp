// Decode-only timing of Hesai's vendor parser (HesaiLidar_SDK_2.0, `UdpParser`), issue 15.
// Our own code: it only calls the SDK's public parser API, the way the SDK's driver loop
// (driver/hesai_lidar_sdk.hpp) does on one thread: `DecodePacket` (header checks, frame
// split, copy into the frame) then `ComputeXYZI` (every slot of every block to a 24-byte
// LidarPointXYZIRT), a frame handed on when the parser reports `scan_complete`.
//
// Usage: hesai_peer PAYLOADS CORRECTION_CSV WARMUP
//   PAYLOADS: records of [u64 LE pcap time ns][u32 LE length][payload], as written by
//   `lidarxdp-bench peers` from a capture (looped). The packets are loaded into memory
//   (as the SDK's UdpPacket) before timing; the first WARMUP packets are decoded untimed.
// Prints one JSON object for the timed packets: packets, frames completed, points (every slot
// the SDK emits: zero-range points and both returns included, unmerged), rejected packets and
// the thread CPU time (CLOCK_THREAD_CPUTIME_ID), ns. The last, open frame is not counted.
#include <time.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "udp_parser.h"

using hesai::lidar::LidarDecodedFrame;
using hesai::lidar::UdpPacket;
using hesai::lidar::UdpParser;
using Point = LidarPointXYZIRT;

namespace {

uint64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

bool load(const char* path, std::vector<UdpPacket>* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::vector<uint8_t> buf((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  size_t off = 0;
  while (off + 12 <= buf.size()) {
    uint64_t ts = 0;
    uint32_t len = 0;
    std::memcpy(&ts, &buf[off], 8);
    std::memcpy(&len, &buf[off + 8], 4);
    off += 12;
    if (off + len > buf.size()) return false;
    if (len <= hesai::lidar::kBufSize) {
      out->emplace_back(&buf[off], static_cast<uint16_t>(len), ts / 1000);
    }
    off += len;
  }
  return off == buf.size();
}

struct Pass {
  uint64_t frames = 0;
  uint64_t points = 0;
  uint64_t rejected = 0;
};

uint64_t frame_points(const LidarDecodedFrame<Point>& frame) {
  uint64_t n = 0;
  for (uint32_t i = 0; i < frame.packet_num; i++) n += frame.valid_points[i];
  return n;
}

// One pass over the packets, as the SDK's driver loop handles them on one thread.
Pass run(UdpParser<Point>& parser, LidarDecodedFrame<Point>& frame,
         const UdpPacket* begin, const UdpPacket* end) {
  Pass p;
  for (const UdpPacket* it = begin; it != end; ++it) {
    const UdpPacket& pkt = *it;
    if (parser.DecodePacket(frame, pkt) != 0) {
      p.rejected++;
      continue;
    }
    if (frame.scan_complete) {
      // The frame ends before this packet: hand it on, then this packet starts the next.
      p.points += frame_points(frame);
      p.frames++;
      frame.Update();
      if (parser.DecodePacket(frame, pkt) != 0 || frame.scan_complete) continue;
    }
    parser.ComputeXYZI(frame, frame.packet_num - 1);
  }
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s PAYLOADS CORRECTION_CSV WARMUP\n", argv[0]);
    return 2;
  }
  std::vector<UdpPacket> packets;
  if (!load(argv[1], &packets) || packets.empty()) {
    std::fprintf(stderr, "hesai_peer: cannot read payloads from %s\n", argv[1]);
    return 1;
  }
  const size_t warmup = static_cast<size_t>(std::max(0L, std::atol(argv[3])));
  if (warmup >= packets.size()) {
    std::fprintf(stderr, "hesai_peer: WARMUP %zu leaves no packet to time\n", warmup);
    return 1;
  }
  auto frame = std::make_unique<LidarDecodedFrame<Point>>();
  UdpParser<Point> parser;
  // The first packet names the protocol version: the SDK picks its parser from it.
  parser.DecodePacket(*frame, packets[0]);
  if (parser.GetGeneralParser() == nullptr) {
    std::fprintf(stderr, "hesai_peer: the SDK recognised no parser for the first packet\n");
    return 1;
  }
  parser.LoadCorrectionFile(argv[2]);
  if (!parser.isSetCorrectionSucc()) {
    std::fprintf(stderr, "hesai_peer: the SDK did not load the correction file %s\n", argv[2]);
    return 1;
  }
  parser.setFrameRightMemorySpace(*frame);
  const UdpPacket* all = packets.data();
  run(parser, *frame, all, all + warmup);  // warm-up, untimed
  const uint64_t t0 = thread_cpu_ns();
  const Pass timed = run(parser, *frame, all + warmup, all + packets.size());
  const uint64_t ns = thread_cpu_ns() - t0;
  std::printf(
      "{\"packets\": %zu, \"frames\": %llu, \"points\": %llu, \"rejected\": %llu, \"ns\": %llu}\n",
      packets.size() - warmup, static_cast<unsigned long long>(timed.frames),
      static_cast<unsigned long long>(timed.points),
      static_cast<unsigned long long>(timed.rejected), static_cast<unsigned long long>(ns));
  std::fflush(stdout);
  // The SDK's logger thread is not joined by its singleton; leave without running destructors.
  std::_Exit(0);
}
