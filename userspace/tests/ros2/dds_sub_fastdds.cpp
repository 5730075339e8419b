// dds_sub_fastdds.cpp: an independent ROS 2-over-DDS checker for lidarxdp's DDS sink, on
// eProsima Fast DDS 2.9 (Debian's libfastrtps-dev) with Fast CDR 1.0.
//
// It is written from Fast DDS's and Fast CDR's public C++ API only. The DDS type
// sensor_msgs::msg::dds_::PointCloud2_ is a hand-written TopicDataType whose (de)serializer
// follows the CDR rules (XCDR1, plain CDR, as for a @final type, see PointCloud2.idl beside
// this file) with eprosima::fastcdr; no generated code and nothing from lidarxdp is used, and
// lidarxdp's DDS sink runs on a different DDS implementation (Cyclone DDS 11), so the two
// sides share no encoder, decoder or discovery code.
//
// Compile (OUT is a scratch folder, run from this folder):
//   c++ -std=c++17 -O2 -o OUT/dds_sub_fastdds dds_sub_fastdds.cpp -lfastrtps -lfastcdr
//
// Usage:
//   dds_sub_fastdds --topic NAME --out PREFIX [--domain N] [--expect N] [--reliable]
//                   [--localhost] [--timeout-s S] [--no-data]
//
// It reads sensor_msgs::msg::dds_::PointCloud2_ samples from the DDS topic NAME (e.g.
// rt/lidar/vlp16/points) with a BEST_EFFORT (or, with --reliable, RELIABLE), VOLATILE,
// KEEP_LAST 10 reader, and for each sample appends its `data` bytes to PREFIX.bin and one JSON
// object line to PREFIX.jsonl (both flushed after every sample):
//   {"key":TOPIC,"payload_len":N,"cdr_header":"00010000","sec":S,"nanosec":NS,
//    "frame_id":STR,"height":H,"width":W,"fields":[[NAME,OFFSET,DATATYPE,COUNT],...],
//    "is_bigendian":B,"point_step":N,"row_step":N,"is_dense":B,"data_offset":N,
//    "data_len":N,"attachment":null,"seq":null,"time_ns":null,"gid_len":null,"gid":null,
//    "source_timestamp_ns":T,"recv_ns":R}
// R is when the sample was taken (CLOCK_REALTIME, ns), for latency measurements; with
// --no-data nothing is written to PREFIX.bin (data_offset stays 0: benchmarks of large frames).
// `payload_len` is the length of the received serialized payload (4-byte encapsulation header
// and any end padding included) and `cdr_header` its first 4 bytes, both as Fast DDS handed
// them to the type's deserialize().
//
// Stdout lines, each flushed: "ready" once the reader has matched a writer (with --reliable:
// once the reader exists, as it will never match a best-effort writer), and at exit one JSON
// object {"received":N,"matched":M,"matched_current":C,"incompatible_qos":K,
// "last_policy":"RELIABILITY"|"","lost":L,"rejected":R}, where M is the total count of writers
// ever matched, C the number matched at exit, K / last_policy the requested-incompatible-QoS
// status (total count, name of the last policy), and L / R the reader's sample-lost and
// sample-rejected total counts (diagnostics for dropped samples; null if not available).
// Fast DDS's own log goes to stderr only.
//
// Termination: with --expect N, exit 0 as soon as N samples were received, or exit 1 after
// --timeout-s seconds (default 60) without that (stdin is not read then). Without --expect,
// run until stdin gives a line "stop" or reaches end of file, then take the samples still
// arriving for up to 2 s (ending earlier once none arrived for 0.5 s), and exit 0.
//
// Transport: one UDPv4 transport (the builtin ones, shared memory included, are off) with a
// 32 MiB socket receive buffer (net.core.rmem_max must allow it), and a reader history that
// reallocates its payloads (PREALLOCATED_WITH_REALLOC), so samples of up to 16 MB and more are
// taken whole. --localhost whitelists 127.0.0.1 only, gives no multicast locator, and
// discovers peers by unicast: its initial peers are 127.0.0.1 at the metatraffic unicast port
// of participant ids 0..9 (7400 + 250 * domain + 10 + 2 * id).
//
// --raw-type NAME (e.g. sensor_msgs::msg::dds_::Imu_): any keyless type, taken as its serialized
// bytes; each sample is one JSON line {"key":TOPIC,"payload_len":N,"payload_hex":HEX,
// "source_timestamp_ns":T,"recv_ns":R} (HEX: the payload, encapsulation header included), to be
// decoded by another implementation (ros2_probe.py decode-raw, rosbags).
//
// Errors print a message on stderr and exit 1; a bad command line exits 2.

#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include <fastcdr/Cdr.h>
#include <fastcdr/FastBuffer.h>
#include <fastcdr/exceptions/Exception.h>

#include <fastdds/dds/core/policy/QosPolicies.hpp>
#include <fastdds/dds/core/status/BaseStatus.hpp>
#include <fastdds/dds/core/status/IncompatibleQosStatus.hpp>
#include <fastdds/dds/core/status/SampleRejectedStatus.hpp>
#include <fastdds/dds/core/status/SubscriptionMatchedStatus.hpp>
#include <fastdds/dds/domain/DomainParticipant.hpp>
#include <fastdds/dds/domain/DomainParticipantFactory.hpp>
#include <fastdds/dds/domain/qos/DomainParticipantQos.hpp>
#include <fastdds/dds/log/Log.hpp>
#include <fastdds/dds/log/StdoutErrConsumer.hpp>
#include <fastdds/dds/subscriber/DataReader.hpp>
#include <fastdds/dds/subscriber/SampleInfo.hpp>
#include <fastdds/dds/subscriber/Subscriber.hpp>
#include <fastdds/dds/subscriber/qos/DataReaderQos.hpp>
#include <fastdds/dds/topic/Topic.hpp>
#include <fastdds/dds/topic/TopicDataType.hpp>
#include <fastdds/dds/topic/TypeSupport.hpp>
#include <fastdds/rtps/common/Locator.h>
#include <fastdds/rtps/common/SerializedPayload.h>
#include <fastdds/rtps/transport/UDPv4TransportDescriptor.h>
#include <fastrtps/utils/IPLocator.h>

namespace fdds = eprosima::fastdds::dds;
namespace rtps = eprosima::fastrtps::rtps;
namespace fcdr = eprosima::fastcdr;
using eprosima::fastrtps::types::ReturnCode_t;

static const char* const PROG = "dds_sub_fastdds";

// ---------------------------------------------------------------------------------------------
// Errors, time, JSON output
// ---------------------------------------------------------------------------------------------

// Prints "dds_sub_fastdds: MESSAGE" on stderr and exits with status 1.
[[noreturn]] static void fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char* fmt, ...)
{
    va_list ap;
    std::fprintf(stderr, "%s: ", PROG);
    va_start(ap, fmt);
    std::vfprintf(stderr, fmt, ap);
    va_end(ap);
    std::fputc('\n', stderr);
    std::exit(1);
}

// Seconds on the monotonic clock.
static double now_s()
{
    using namespace std::chrono;
    return duration<double>(steady_clock::now().time_since_epoch()).count();
}

// Length of the valid UTF-8 sequence at s[0] (n bytes available), or 0.
static size_t utf8_seq_len(const unsigned char* s, size_t n)
{
    size_t len;
    uint32_t cp;
    if (s[0] >= 0xc2 && s[0] <= 0xdf) { len = 2; cp = s[0] & 0x1fu; }
    else if (s[0] >= 0xe0 && s[0] <= 0xef) { len = 3; cp = s[0] & 0x0fu; }
    else if (s[0] >= 0xf0 && s[0] <= 0xf4) { len = 4; cp = s[0] & 0x07u; }
    else return 0;
    if (len > n) return 0;
    for (size_t i = 1; i < len; i++)
    {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3fu);
    }
    // reject overlong forms, surrogates and code points past U+10FFFF
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
            (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

// Appends `s` as a JSON string: valid UTF-8 is kept, quotes, backslashes and control characters
// are escaped, and bytes that are not valid UTF-8 become \u00XX.
static void json_str(std::string& out, const std::string& str)
{
    const unsigned char* s = reinterpret_cast<const unsigned char*>(str.data());
    const size_t n = str.size();
    char esc[8];
    out += '"';
    for (size_t i = 0; i < n;)
    {
        const unsigned char c = s[i];
        if (c == '"' || c == '\\') { out += '\\'; out += static_cast<char>(c); i++; }
        else if (c == '\n') { out += "\\n"; i++; }
        else if (c == '\r') { out += "\\r"; i++; }
        else if (c == '\t') { out += "\\t"; i++; }
        else if (c < 0x20 || c == 0x7f) { std::snprintf(esc, sizeof(esc), "\\u%04x", c); out += esc; i++; }
        else if (c < 0x80) { out += static_cast<char>(c); i++; }
        else
        {
            const size_t len = utf8_seq_len(s + i, n - i);
            if (len == 0) { std::snprintf(esc, sizeof(esc), "\\u%04x", c); out += esc; i++; }
            else { out.append(str, i, len); i += len; }
        }
    }
    out += '"';
}

// Appends an unsigned / signed integer.
static void json_u(std::string& out, uint64_t v) { out += std::to_string(v); }
static void json_i(std::string& out, int64_t v) { out += std::to_string(v); }

// The DDS name of a QoS policy id (as in the DDS specification), for "last_policy".
static const char* policy_name(fdds::QosPolicyId_t id)
{
    switch (id)
    {
        case fdds::INVALID_QOS_POLICY_ID: return "";
        case fdds::USERDATA_QOS_POLICY_ID: return "USER_DATA";
        case fdds::DURABILITY_QOS_POLICY_ID: return "DURABILITY";
        case fdds::PRESENTATION_QOS_POLICY_ID: return "PRESENTATION";
        case fdds::DEADLINE_QOS_POLICY_ID: return "DEADLINE";
        case fdds::LATENCYBUDGET_QOS_POLICY_ID: return "LATENCY_BUDGET";
        case fdds::OWNERSHIP_QOS_POLICY_ID: return "OWNERSHIP";
        case fdds::OWNERSHIPSTRENGTH_QOS_POLICY_ID: return "OWNERSHIP_STRENGTH";
        case fdds::LIVELINESS_QOS_POLICY_ID: return "LIVELINESS";
        case fdds::TIMEBASEDFILTER_QOS_POLICY_ID: return "TIME_BASED_FILTER";
        case fdds::PARTITION_QOS_POLICY_ID: return "PARTITION";
        case fdds::RELIABILITY_QOS_POLICY_ID: return "RELIABILITY";
        case fdds::DESTINATIONORDER_QOS_POLICY_ID: return "DESTINATION_ORDER";
        case fdds::HISTORY_QOS_POLICY_ID: return "HISTORY";
        case fdds::RESOURCELIMITS_QOS_POLICY_ID: return "RESOURCE_LIMITS";
        case fdds::ENTITYFACTORY_QOS_POLICY_ID: return "ENTITY_FACTORY";
        case fdds::WRITERDATALIFECYCLE_QOS_POLICY_ID: return "WRITER_DATA_LIFECYCLE";
        case fdds::READERDATALIFECYCLE_QOS_POLICY_ID: return "READER_DATA_LIFECYCLE";
        case fdds::TOPICDATA_QOS_POLICY_ID: return "TOPIC_DATA";
        case fdds::GROUPDATA_QOS_POLICY_ID: return "GROUP_DATA";
        case fdds::TRANSPORTPRIORITY_QOS_POLICY_ID: return "TRANSPORT_PRIORITY";
        case fdds::LIFESPAN_QOS_POLICY_ID: return "LIFESPAN";
        case fdds::DURABILITYSERVICE_QOS_POLICY_ID: return "DURABILITY_SERVICE";
        case fdds::DATAREPRESENTATION_QOS_POLICY_ID: return "DATA_REPRESENTATION";
        case fdds::TYPECONSISTENCYENFORCEMENT_QOS_POLICY_ID: return "TYPE_CONSISTENCY_ENFORCEMENT";
        case fdds::DISABLEPOSITIVEACKS_QOS_POLICY_ID: return "DISABLE_POSITIVE_ACKS";
        default: return "UNKNOWN";
    }
}

// ---------------------------------------------------------------------------------------------
// The type: sensor_msgs::msg::dds_::PointCloud2_, XCDR1 (plain CDR), keyless
// ---------------------------------------------------------------------------------------------

struct PointField
{
    std::string name;
    uint32_t offset = 0;
    uint8_t datatype = 0;
    uint32_t count = 0;
};

struct PointCloud2
{
    // std_msgs/Header header { builtin_interfaces/Time stamp; string frame_id; }
    int32_t sec = 0;
    uint32_t nanosec = 0;
    std::string frame_id;
    uint32_t height = 0;
    uint32_t width = 0;
    std::vector<PointField> fields;
    bool is_bigendian = false;
    uint32_t point_step = 0;
    uint32_t row_step = 0;
    std::vector<uint8_t> data;
    bool is_dense = false;

    // Not message fields: what deserialize() saw of the serialized payload.
    uint32_t payload_len = 0;  // whole payload, encapsulation header included
    uint8_t cdr_header[4] = {0, 0, 0, 0};
};

// Plain-CDR size of `m`, 4-byte encapsulation header included (alignment is relative to the
// end of that header, as CDR has it).
static uint32_t cdr_size(const PointCloud2& m)
{
    size_t a = 0;
    auto align = [&a](size_t n) { a = (a + n - 1) & ~(n - 1); };
    auto str = [&](const std::string& s) { align(4); a += 4 + s.size() + 1; };
    align(4); a += 8;                     // stamp.sec, stamp.nanosec
    str(m.frame_id);
    align(4); a += 8;                     // height, width
    align(4); a += 4;                     // fields: length
    for (const PointField& f : m.fields)
    {
        str(f.name);
        align(4); a += 4;                 // offset
        a += 1;                           // datatype
        align(4); a += 4;                 // count
    }
    a += 1;                               // is_bigendian
    align(4); a += 8;                     // point_step, row_step
    align(4); a += 4 + m.data.size();     // data: length + bytes
    a += 1;                               // is_dense
    return static_cast<uint32_t>(4 + a);
}

class PointCloud2Type : public fdds::TopicDataType
{
public:

    PointCloud2Type()
    {
        setName("sensor_msgs::msg::dds_::PointCloud2_");
        // Only the initial size of the reader's payload buffers: with the
        // PREALLOCATED_WITH_REALLOC history they grow to whatever size arrives.
        m_typeSize = 64 * 1024;
        m_isGetKeyDefined = false;  // keyless: the topic kind is NO_KEY, as for ROS 2 messages
        // No TypeObject / TypeInformation: matching is by type name, as rmw does.
        auto_fill_type_object(false);
        auto_fill_type_information(false);
    }

    bool serialize(void* data, rtps::SerializedPayload_t* payload) override
    {
        const PointCloud2& m = *static_cast<const PointCloud2*>(data);
        try
        {
            fcdr::FastBuffer fb(reinterpret_cast<char*>(payload->data), payload->max_size);
            fcdr::Cdr cdr(fb, fcdr::Cdr::LITTLE_ENDIANNESS, fcdr::Cdr::DDS_CDR);
            payload->encapsulation = CDR_LE;
            cdr.serialize_encapsulation();
            cdr << m.sec << m.nanosec << m.frame_id << m.height << m.width;
            cdr << static_cast<uint32_t>(m.fields.size());
            for (const PointField& f : m.fields)
                cdr << f.name << f.offset << f.datatype << f.count;
            cdr << m.is_bigendian << m.point_step << m.row_step;
            cdr << static_cast<uint32_t>(m.data.size());
            if (!m.data.empty())
                cdr.serializeArray(m.data.data(), m.data.size());
            cdr << m.is_dense;
            payload->length = static_cast<uint32_t>(cdr.getSerializedDataLength());
            return true;
        }
        catch (const fcdr::exception::Exception&)
        {
            return false;  // the payload buffer is too small
        }
    }

    bool deserialize(rtps::SerializedPayload_t* payload, void* data) override
    {
        PointCloud2& m = *static_cast<PointCloud2*>(data);
        m.payload_len = payload->length;
        std::memset(m.cdr_header, 0, sizeof(m.cdr_header));
        std::memcpy(m.cdr_header, payload->data, payload->length < 4 ? payload->length : 4);
        if (payload->length < 4)
            return note_error("payload shorter than the 4-byte encapsulation header");
        // Plain CDR only: identifier 0x0000 (CDR_BE) or 0x0001 (CDR_LE). Parameter lists and
        // XCDR2 encodings are not what a @final ROS 2 type sends.
        if (payload->data[0] != 0 || payload->data[1] > 1)
            return note_error("encapsulation is not plain CDR (XCDR1)");
        try
        {
            fcdr::FastBuffer fb(reinterpret_cast<char*>(payload->data), payload->length);
            fcdr::Cdr cdr(fb, fcdr::Cdr::DEFAULT_ENDIAN, fcdr::Cdr::DDS_CDR);
            cdr.read_encapsulation();  // sets the byte order and restarts CDR alignment
            payload->encapsulation = cdr.endianness() == fcdr::Cdr::BIG_ENDIANNESS ? CDR_BE : CDR_LE;
            const char* const end = reinterpret_cast<const char*>(payload->data) + payload->length;
            auto remaining = [&]() { return static_cast<size_t>(end - cdr.getCurrentPosition()); };

            cdr >> m.sec >> m.nanosec >> m.frame_id >> m.height >> m.width;
            uint32_t nfields = 0;
            cdr >> nfields;
            if (nfields > remaining() / 13)  // a PointField takes at least 13 bytes
                return note_error("fields length past the payload's end");
            m.fields.resize(nfields);
            for (PointField& f : m.fields)
                cdr >> f.name >> f.offset >> f.datatype >> f.count;
            cdr >> m.is_bigendian >> m.point_step >> m.row_step;
            uint32_t ndata = 0;
            cdr >> ndata;
            if (ndata > remaining())
                return note_error("data length past the payload's end");
            m.data.resize(ndata);
            if (ndata > 0)
                cdr.deserializeArray(m.data.data(), ndata);
            cdr >> m.is_dense;
            return true;
        }
        catch (const fcdr::exception::Exception& e)
        {
            return note_error(e.what());
        }
        catch (const std::exception& e)
        {
            return note_error(e.what());
        }
    }

    std::function<uint32_t()> getSerializedSizeProvider(void* data) override
    {
        return [data]() { return cdr_size(*static_cast<const PointCloud2*>(data)); };
    }

    void* createData() override { return new PointCloud2(); }

    void deleteData(void* data) override { delete static_cast<PointCloud2*>(data); }

    bool getKey(void*, rtps::InstanceHandle_t*, bool) override { return false; }

    // Samples that could not be decoded, and the reason for the first.
    uint64_t decode_errors() const { return errors_.load(); }
    const std::string& first_error() const { return first_error_; }

private:

    bool note_error(const char* why)
    {
        if (errors_.fetch_add(1) == 0)
            first_error_ = why;
        return false;
    }

    std::atomic<uint64_t> errors_{0};
    std::string first_error_;
};

// ---------------------------------------------------------------------------------------------
// Command line
// ---------------------------------------------------------------------------------------------

// Any keyless type taken as its serialized bytes (--raw-type NAME): Fast DDS matches by type
// name, and the bytes (encapsulation header included) go to the caller, which decodes them
// with another implementation (the Python probe's rosbags).
struct RawSample
{
    std::vector<uint8_t> bytes;
};

class RawType : public fdds::TopicDataType
{
public:

    explicit RawType(const std::string& name)
    {
        setName(name.c_str());
        m_typeSize = 64 * 1024;
        m_isGetKeyDefined = false;
        auto_fill_type_object(false);
        auto_fill_type_information(false);
    }

    bool serialize(void*, rtps::SerializedPayload_t*) override { return false; }

    bool deserialize(rtps::SerializedPayload_t* payload, void* data) override
    {
        RawSample& m = *static_cast<RawSample*>(data);
        m.bytes.assign(payload->data, payload->data + payload->length);
        return true;
    }

    std::function<uint32_t()> getSerializedSizeProvider(void* data) override
    {
        return [data]() { return static_cast<uint32_t>(static_cast<RawSample*>(data)->bytes.size()); };
    }

    void* createData() override { return new RawSample(); }

    void deleteData(void* data) override { delete static_cast<RawSample*>(data); }

    bool getKey(void*, rtps::InstanceHandle_t*, bool) override { return false; }
};

struct Options
{
    uint32_t domain = 0;
    std::string topic;
    std::string out;
    long long expect = -1;  // -1: until "stop" / EOF on stdin
    bool reliable = false;
    bool localhost = false;
    bool no_data = false;  // --no-data: do not write PREFIX.bin (benchmarks of large frames)
    double timeout_s = 60.0;
    std::string raw_type;  // --raw-type NAME: take samples of that type as bytes
};

[[noreturn]] static void usage(const char* msg)
{
    if (msg)
        std::fprintf(stderr, "%s: %s\n", PROG, msg);
    std::fprintf(stderr,
            "usage: %s --topic NAME --out PREFIX [--domain N] [--expect N] [--reliable]\n"
            "                       [--localhost] [--timeout-s S] [--no-data] [--raw-type NAME]\n", PROG);
    std::exit(2);
}

// Parses a whole decimal integer in [min, max], or exits 2.
static long long parse_int(const char* opt, const char* s, long long min, long long max)
{
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < min || v > max)
    {
        std::fprintf(stderr, "%s: %s wants an integer in [%lld, %lld], not \"%s\"\n", PROG, opt, min, max, s);
        usage(nullptr);
    }
    return v;
}

// Parses a number of seconds in (0, 86400] (decimals allowed), or exits 2.
static double parse_seconds(const char* opt, const char* s)
{
    char* end = nullptr;
    errno = 0;
    const double v = std::strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !(v > 0.0 && v <= 86400.0))
    {
        std::fprintf(stderr, "%s: %s wants seconds in (0, 86400], not \"%s\"\n", PROG, opt, s);
        usage(nullptr);
    }
    return v;
}

static Options parse_args(int argc, char** argv)
{
    Options o;
    bool seen_topic = false, seen_out = false;
    for (int i = 1; i < argc; i++)
    {
        const std::string a = argv[i];
        const bool takes_value = a == "--domain" || a == "--topic" || a == "--out" ||
                a == "--expect" || a == "--timeout-s" || a == "--raw-type";
        const char* v = nullptr;
        if (takes_value)
        {
            if (i + 1 >= argc)
            {
                std::fprintf(stderr, "%s: %s needs a value\n", PROG, a.c_str());
                usage(nullptr);
            }
            v = argv[++i];
        }
        if (a == "--domain")
            o.domain = static_cast<uint32_t>(parse_int("--domain", v, 0, 232));
        else if (a == "--topic")
            o.topic = v, seen_topic = true;
        else if (a == "--out")
            o.out = v, seen_out = true;
        else if (a == "--expect")
            o.expect = parse_int("--expect", v, 1, INT32_MAX);
        else if (a == "--timeout-s")
            o.timeout_s = parse_seconds("--timeout-s", v);
        else if (a == "--reliable")
            o.reliable = true;
        else if (a == "--localhost")
            o.localhost = true;
        else if (a == "--no-data")
            o.no_data = true;
        else if (a == "--raw-type")
            o.raw_type = v;
        else if (a == "-h" || a == "--help")
            usage(nullptr);
        else
        {
            std::fprintf(stderr, "%s: unknown argument \"%s\"\n", PROG, a.c_str());
            usage(nullptr);
        }
    }
    if (!seen_topic || o.topic.empty())
        usage("--topic NAME is required");
    if (!seen_out || o.out.empty())
        usage("--out PREFIX is required");
    return o;
}

// ---------------------------------------------------------------------------------------------
// Stdin: "stop" or end of file
// ---------------------------------------------------------------------------------------------

// Reads what stdin has without blocking; true once it gave a line "stop" or reached EOF.
static bool stdin_says_stop()
{
    static std::string line;
    static bool stopped = false;
    while (!stopped)
    {
        struct pollfd pfd = {0, POLLIN, 0};
        const int r = poll(&pfd, 1, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;  // nothing to read now
        if (pfd.revents & POLLNVAL)
        {
            stopped = true;  // no stdin at all counts as end of file
            break;
        }
        char buf[256];
        const ssize_t k = read(0, buf, sizeof(buf));
        if (k < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (k <= 0)
        {
            stopped = true;  // end of file (or a read error)
            break;
        }
        for (ssize_t i = 0; i < k && !stopped; i++)
        {
            if (buf[i] == '\n')
            {
                if (!line.empty() && line.back() == '\r')
                    line.pop_back();
                stopped = line == "stop";
                line.clear();
            }
            else if (line.size() < 256)
                line += buf[i];
        }
    }
    return stopped;
}

// ---------------------------------------------------------------------------------------------
// Main
// ---------------------------------------------------------------------------------------------

static FILE* open_out(const std::string& path)
{
    FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr)
        fail("cannot create %s: %s", path.c_str(), std::strerror(errno));
    return f;
}

static fdds::DomainParticipantQos participant_qos(const Options& o)
{
    fdds::DomainParticipantQos pq = fdds::PARTICIPANT_QOS_DEFAULT;
    pq.name("dds_sub_fastdds");
    auto udp = std::make_shared<eprosima::fastdds::rtps::UDPv4TransportDescriptor>();
    udp->receiveBufferSize = 32u * 1024u * 1024u;
    if (o.localhost)
    {
        udp->interfaceWhiteList.emplace_back("127.0.0.1");
        auto& builtin = pq.wire_protocol().builtin;
        // Our own discovery locator: 127.0.0.1, the port left to Fast DDS (port 0 = the
        // well-known metatraffic unicast port of the participant id it picks). Giving a
        // unicast locator and no multicast one keeps Fast DDS from adding 239.255.0.1.
        rtps::Locator_t self;
        self.kind = LOCATOR_KIND_UDPv4;
        eprosima::fastrtps::rtps::IPLocator::setIPv4(self, 127, 0, 0, 1);
        self.port = 0;
        builtin.metatrafficUnicastLocatorList.push_back(self);
        // Peers: the metatraffic unicast ports of participant ids 0..9 on 127.0.0.1.
        for (uint32_t id = 0; id < 10; id++)
        {
            rtps::Locator_t peer;
            peer.kind = LOCATOR_KIND_UDPv4;
            eprosima::fastrtps::rtps::IPLocator::setIPv4(peer, 127, 0, 0, 1);
            peer.port = 7400 + 250 * o.domain + 10 + 2 * id;
            builtin.initialPeersList.push_back(peer);
        }
    }
    pq.transport().use_builtin_transports = false;
    pq.transport().user_transports.push_back(udp);
    return pq;
}

// --raw-type: one JSON line per sample, {"key":TOPIC,"payload_len":N,"payload_hex":HEX,
// "source_timestamp_ns":T,"recv_ns":R}, with the same reader QoS, "ready" and stop rules as the
// PointCloud2 mode, and the same closing summary line (lost / rejected null).
static int run_raw(const Options& o, fdds::DomainParticipantFactory* factory,
        fdds::DomainParticipant* participant, FILE* jsonl, FILE* bin)
{
    const double t0 = now_s();
    fdds::TypeSupport type(new RawType(o.raw_type));
    if (type.register_type(participant) != ReturnCode_t::RETCODE_OK)
        fail("cannot register type %s", o.raw_type.c_str());
    fdds::Topic* topic = participant->create_topic(o.topic, o.raw_type, fdds::TOPIC_QOS_DEFAULT);
    if (topic == nullptr)
        fail("cannot create topic %s", o.topic.c_str());
    fdds::Subscriber* subscriber = participant->create_subscriber(fdds::SUBSCRIBER_QOS_DEFAULT);
    if (subscriber == nullptr)
        fail("cannot create a subscriber");
    fdds::DataReaderQos rq = fdds::DATAREADER_QOS_DEFAULT;
    rq.reliability().kind = o.reliable ? fdds::RELIABLE_RELIABILITY_QOS : fdds::BEST_EFFORT_RELIABILITY_QOS;
    rq.durability().kind = fdds::VOLATILE_DURABILITY_QOS;
    rq.history().kind = fdds::KEEP_LAST_HISTORY_QOS;
    rq.history().depth = 100;
    rq.endpoint().history_memory_policy = rtps::PREALLOCATED_WITH_REALLOC_MEMORY_MODE;
    rq.data_sharing().off();
    fdds::DataReader* reader = subscriber->create_datareader(topic, rq);
    if (reader == nullptr)
        fail("cannot create a reader on %s", o.topic.c_str());

    bool ready = false, stopping = false;
    double stop_at = 0.0, last_rx = 0.0;
    uint64_t received = 0;
    int status = 0;
    fdds::SubscriptionMatchedStatus sm;
    fdds::RequestedIncompatibleQosStatus iq;
    RawSample msg;
    fdds::SampleInfo info;
    std::string line;
    for (;;)
    {
        reader->wait_for_unread_message(eprosima::fastrtps::Duration_t(0, 20 * 1000 * 1000));
        while (reader->take_next_sample(&msg, &info) == ReturnCode_t::RETCODE_OK)
        {
            if (!info.valid_data)
                continue;
            timespec rx;
            clock_gettime(CLOCK_REALTIME, &rx);
            line.clear();
            line += "{\"key\":";
            json_str(line, o.topic);
            line += ",\"payload_len\":"; json_u(line, msg.bytes.size());
            line += ",\"payload_hex\":\"";
            static const char hex[] = "0123456789abcdef";
            for (uint8_t b : msg.bytes)
            {
                line += hex[b >> 4];
                line += hex[b & 15];
            }
            line += "\",\"source_timestamp_ns\":"; json_i(line, info.source_timestamp.to_ns());
            line += ",\"recv_ns\":"; json_i(line, int64_t(rx.tv_sec) * 1000000000 + rx.tv_nsec);
            line += "}\n";
            if (std::fwrite(line.data(), 1, line.size(), jsonl) != line.size() || std::fflush(jsonl) != 0)
                fail("writing %s.jsonl: %s", o.out.c_str(), std::strerror(errno));
            received++;
            last_rx = now_s();
        }
        if (reader->get_subscription_matched_status(sm) != ReturnCode_t::RETCODE_OK)
            fail("get_subscription_matched_status failed");
        if (reader->get_requested_incompatible_qos_status(iq) != ReturnCode_t::RETCODE_OK)
            fail("get_requested_incompatible_qos_status failed");
        if (!ready && (o.reliable || sm.current_count >= 1))
        {
            ready = true;
            std::printf("ready\n");
            std::fflush(stdout);
        }
        const double t = now_s();
        if (o.expect >= 0)
        {
            if (received >= static_cast<uint64_t>(o.expect))
                break;
            if (t - t0 >= o.timeout_s)
            {
                std::fprintf(stderr, "%s: timed out after %g s: received %" PRIu64 " of %lld samples on %s\n",
                        PROG, o.timeout_s, received, o.expect, o.topic.c_str());
                status = 1;
                break;
            }
        }
        else if (!stopping)
        {
            if (stdin_says_stop())
            {
                stopping = true;
                stop_at = t;
            }
        }
        else
        {
            const double quiet_since = last_rx > stop_at ? last_rx : stop_at;
            if (t - stop_at >= 2.0 || t - quiet_since >= 0.5)
                break;
        }
    }
    std::printf("{\"received\":%" PRIu64 ",\"matched\":%d,\"matched_current\":%d,\"incompatible_qos\":%" PRIu32
            ",\"last_policy\":\"%s\",\"lost\":null,\"rejected\":null}\n",
            received, sm.total_count, sm.current_count, iq.total_count,
            iq.total_count ? policy_name(iq.last_policy_id) : "");
    std::fflush(stdout);
    if (std::fclose(jsonl) != 0 || std::fclose(bin) != 0)
        fail("closing %s.jsonl / .bin: %s", o.out.c_str(), std::strerror(errno));
    if (participant->delete_contained_entities() != ReturnCode_t::RETCODE_OK ||
            factory->delete_participant(participant) != ReturnCode_t::RETCODE_OK)
        fail("cannot delete the participant");
    return status;
}

int main(int argc, char** argv)
{
    const Options o = parse_args(argc, argv);
    const double t0 = now_s();

    // Keep Fast DDS's configuration to this program: no XML profiles from the environment or
    // the working directory, no discovery-server redirection.
    unsetenv("FASTRTPS_DEFAULT_PROFILES_FILE");
    unsetenv("FASTDDS_DEFAULT_PROFILES_FILE");
    unsetenv("ROS_DISCOVERY_SERVER");
    unsetenv("FASTDDS_ENVIRONMENT_FILE");
    setenv("SKIP_DEFAULT_XML", "1", 1);

    // Fast DDS's log on stderr only (stdout carries this program's protocol).
    fdds::Log::ClearConsumers();
    {
        auto consumer = std::unique_ptr<fdds::StdoutErrConsumer>(new fdds::StdoutErrConsumer());
        consumer->stderr_threshold(fdds::Log::Kind::Info);
        fdds::Log::RegisterConsumer(std::move(consumer));
    }
    fdds::Log::SetVerbosity(fdds::Log::Kind::Error);

    FILE* jsonl = open_out(o.out + ".jsonl");
    FILE* bin = open_out(o.out + ".bin");

    fdds::DomainParticipantFactory* factory = fdds::DomainParticipantFactory::get_instance();
    fdds::DomainParticipant* participant = factory->create_participant(o.domain, participant_qos(o));
    if (participant == nullptr)
        fail("cannot create a participant in domain %" PRIu32, o.domain);

    if (!o.raw_type.empty())
        return run_raw(o, factory, participant, jsonl, bin);
    auto* type_impl = new PointCloud2Type();
    fdds::TypeSupport type(type_impl);  // owns type_impl
    if (type.register_type(participant) != ReturnCode_t::RETCODE_OK)
        fail("cannot register type %s", type_impl->getName());
    fdds::Topic* topic = participant->create_topic(o.topic, type_impl->getName(), fdds::TOPIC_QOS_DEFAULT);
    if (topic == nullptr)
        fail("cannot create topic %s", o.topic.c_str());
    fdds::Subscriber* subscriber = participant->create_subscriber(fdds::SUBSCRIBER_QOS_DEFAULT);
    if (subscriber == nullptr)
        fail("cannot create a subscriber");

    fdds::DataReaderQos rq = fdds::DATAREADER_QOS_DEFAULT;
    rq.reliability().kind = o.reliable ? fdds::RELIABLE_RELIABILITY_QOS : fdds::BEST_EFFORT_RELIABILITY_QOS;
    rq.durability().kind = fdds::VOLATILE_DURABILITY_QOS;
    rq.history().kind = fdds::KEEP_LAST_HISTORY_QOS;
    rq.history().depth = 10;
    rq.resource_limits().allocated_samples = 10;  // preallocated payloads (they grow as needed)
    rq.endpoint().history_memory_policy = rtps::PREALLOCATED_WITH_REALLOC_MEMORY_MODE;
    rq.data_sharing().off();
    fdds::DataReader* reader = subscriber->create_datareader(topic, rq);
    if (reader == nullptr)
        fail("cannot create a reader on %s", o.topic.c_str());

    bool ready = false, stopping = false;
    double stop_at = 0.0, last_rx = 0.0;
    uint64_t received = 0, bin_offset = 0;
    fdds::SubscriptionMatchedStatus sm;
    fdds::RequestedIncompatibleQosStatus iq;
    int status = 0;
    PointCloud2 msg;
    fdds::SampleInfo info;
    std::string line;
    for (;;)
    {
        reader->wait_for_unread_message(eprosima::fastrtps::Duration_t(0, 20 * 1000 * 1000));
        while (reader->take_next_sample(&msg, &info) == ReturnCode_t::RETCODE_OK)
        {
            if (!info.valid_data)
                continue;
            // When the sample was taken (CLOCK_REALTIME, ns): `recv_ns`, for latency.
            timespec rx;
            clock_gettime(CLOCK_REALTIME, &rx);
            const int64_t recv_ns = int64_t(rx.tv_sec) * 1000000000 + rx.tv_nsec;
            if (!o.no_data && !msg.data.empty() && std::fwrite(msg.data.data(), 1, msg.data.size(), bin) != msg.data.size())
                fail("writing %s.bin: %s", o.out.c_str(), std::strerror(errno));
            char hdr[9];
            std::snprintf(hdr, sizeof(hdr), "%02x%02x%02x%02x", msg.cdr_header[0], msg.cdr_header[1],
                    msg.cdr_header[2], msg.cdr_header[3]);
            line.clear();
            line += "{\"key\":";
            json_str(line, o.topic);
            line += ",\"payload_len\":"; json_u(line, msg.payload_len);
            line += ",\"cdr_header\":\""; line += hdr; line += '"';
            line += ",\"sec\":"; json_i(line, msg.sec);
            line += ",\"nanosec\":"; json_u(line, msg.nanosec);
            line += ",\"frame_id\":"; json_str(line, msg.frame_id);
            line += ",\"height\":"; json_u(line, msg.height);
            line += ",\"width\":"; json_u(line, msg.width);
            line += ",\"fields\":[";
            for (size_t i = 0; i < msg.fields.size(); i++)
            {
                const PointField& f = msg.fields[i];
                line += i ? ",[" : "[";
                json_str(line, f.name);
                line += ','; json_u(line, f.offset);
                line += ','; json_u(line, f.datatype);
                line += ','; json_u(line, f.count);
                line += ']';
            }
            line += "],\"is_bigendian\":"; line += msg.is_bigendian ? "true" : "false";
            line += ",\"point_step\":"; json_u(line, msg.point_step);
            line += ",\"row_step\":"; json_u(line, msg.row_step);
            line += ",\"is_dense\":"; line += msg.is_dense ? "true" : "false";
            line += ",\"data_offset\":"; json_u(line, bin_offset);
            line += ",\"data_len\":"; json_u(line, msg.data.size());
            line += ",\"attachment\":null,\"seq\":null,\"time_ns\":null,\"gid_len\":null,\"gid\":null";
            line += ",\"source_timestamp_ns\":"; json_i(line, info.source_timestamp.to_ns());
            line += ",\"recv_ns\":"; json_i(line, recv_ns);
            line += "}\n";
            if (std::fwrite(line.data(), 1, line.size(), jsonl) != line.size() ||
                    std::fflush(jsonl) != 0 || std::fflush(bin) != 0)
                fail("writing %s.jsonl / .bin: %s", o.out.c_str(), std::strerror(errno));
            if (!o.no_data)
                bin_offset += msg.data.size();
            received++;
            last_rx = now_s();
        }
        if (type_impl->decode_errors() > 0)
            fail("a sample on %s cannot be decoded as %s: %s", o.topic.c_str(), type_impl->getName(),
                    type_impl->first_error().c_str());

        if (reader->get_subscription_matched_status(sm) != ReturnCode_t::RETCODE_OK)
            fail("get_subscription_matched_status failed");
        if (reader->get_requested_incompatible_qos_status(iq) != ReturnCode_t::RETCODE_OK)
            fail("get_requested_incompatible_qos_status failed");
        if (!ready && (o.reliable || sm.current_count >= 1))
        {
            ready = true;
            std::printf("ready\n");
            std::fflush(stdout);
        }

        const double t = now_s();
        if (o.expect >= 0)
        {
            if (received >= static_cast<uint64_t>(o.expect))
                break;
            if (t - t0 >= o.timeout_s)
            {
                std::fprintf(stderr, "%s: timed out after %g s: received %" PRIu64 " of %lld samples on %s (matched writers: %d)\n",
                        PROG, o.timeout_s, received, o.expect, o.topic.c_str(), sm.total_count);
                if (sm.total_count > 0 && received == 0)
                    std::fprintf(stderr, "%s: a writer matched this reader but sent it nothing: the writer may "
                            "not have matched the reader in turn (Fast DDS 2.9 does not check data representation: "
                            "a writer offering only XCDR2 finds this XCDR1 reader incompatible and sends nothing)\n", PROG);
                status = 1;
                break;
            }
        }
        else if (!stopping)
        {
            if (stdin_says_stop())
            {
                stopping = true;
                stop_at = t;
            }
        }
        else
        {
            // stopping: take late samples for up to 2 s, ending once none came for 0.5 s
            const double quiet_since = last_rx > stop_at ? last_rx : stop_at;
            if (t - stop_at >= 2.0 || t - quiet_since >= 0.5)
                break;
        }
    }

    // Sample lost / rejected counts (diagnostics); null where this Fast DDS does not keep them.
    fdds::SampleLostStatus lost;
    fdds::SampleRejectedStatus rej;
    const bool have_lost = reader->get_sample_lost_status(lost) == ReturnCode_t::RETCODE_OK;
    const bool have_rej = reader->get_sample_rejected_status(rej) == ReturnCode_t::RETCODE_OK;
    std::printf("{\"received\":%" PRIu64 ",\"matched\":%d,\"matched_current\":%d,\"incompatible_qos\":%" PRIu32
            ",\"last_policy\":\"%s\",\"lost\":%s,\"rejected\":%s}\n",
            received, sm.total_count, sm.current_count, iq.total_count,
            iq.total_count ? policy_name(iq.last_policy_id) : "",
            have_lost ? std::to_string(lost.total_count).c_str() : "null",
            have_rej ? std::to_string(rej.total_count).c_str() : "null");
    std::fflush(stdout);
    if (std::fclose(jsonl) != 0 || std::fclose(bin) != 0)
        fail("closing %s.jsonl / .bin: %s", o.out.c_str(), std::strerror(errno));

    if (participant->delete_contained_entities() != ReturnCode_t::RETCODE_OK ||
            factory->delete_participant(participant) != ReturnCode_t::RETCODE_OK)
        fail("cannot delete the participant");
    return status;
}
