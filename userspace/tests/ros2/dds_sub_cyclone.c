/*
 * dds_sub_cyclone.c: an independent ROS 2-over-DDS checker for lidarxdp's DDS sink, on
 * Eclipse Cyclone DDS 0.10 (Debian's cyclonedds-dev).
 *
 * It is written from Cyclone DDS's public C API (dds/dds.h, dds/ddsi/ddsi_serdata.h) and the
 * hand-written PointCloud2.idl beside it, compiled by Cyclone's own idlc; nothing here comes
 * from lidarxdp, whose DDS sink is built on a different Cyclone DDS (11, through the cyclors
 * crate), so a fault in lidarxdp's encoder or type registration cannot hide behind a shared
 * decoder.
 *
 * Compile (OUT is a scratch folder, run from this folder):
 *   idlc -o OUT PointCloud2.idl && cc -O2 -o OUT/dds_sub_cyclone dds_sub_cyclone.c OUT/PointCloud2.c -I OUT -lddsc
 *
 * Usage:
 *   dds_sub_cyclone --topic NAME --out PREFIX [--domain N] [--expect N] [--reliable]
 *                   [--localhost] [--timeout-s S] [--no-data]
 *   dds_sub_cyclone --graph [--wait-node NAME] [--wait-topic NAME] [--domain N]
 *                   [--localhost] [--timeout-s S]
 *
 * Subscriber mode reads sensor_msgs::msg::dds_::PointCloud2_ samples from the DDS topic NAME
 * (e.g. rt/lidar/vlp16/points) with a BEST_EFFORT (or, with --reliable, RELIABLE), VOLATILE,
 * KEEP_LAST 10 reader, and for each sample appends its `data` bytes to PREFIX.bin and one JSON
 * object line to PREFIX.jsonl (both flushed after every sample):
 *   {"key":TOPIC,"payload_len":N,"cdr_header":"00010000","sec":S,"nanosec":NS,
 *    "frame_id":STR,"height":H,"width":W,"fields":[[NAME,OFFSET,DATATYPE,COUNT],...],
 *    "is_bigendian":B,"point_step":N,"row_step":N,"is_dense":B,"data_offset":N,
 *    "data_len":N,"attachment":null,"seq":null,"time_ns":null,"gid_len":null,"gid":null,
 *    "source_timestamp_ns":T,"recv_ns":R}
 * R is when the sample was taken (CLOCK_REALTIME, ns), for latency measurements; with
 * --no-data nothing is written to PREFIX.bin (data_offset stays 0: benchmarks of large frames).
 * `payload_len` and `cdr_header` come from the received serialized sample itself: samples are
 * taken with dds_takecdr, `payload_len` is ddsi_serdata_size (the received size, 4-byte
 * encapsulation header and any end padding included), `cdr_header` is its first 4 bytes from
 * ddsi_serdata_to_ser, and the fields are decoded by ddsi_serdata_to_sample with the
 * idlc-generated type. (Cyclone keeps the received bytes; it only rewrites a big-endian
 * encapsulation identifier to the native one, so a big-endian sample would show "00010000"
 * after byte-swapping too. lidarxdp sends little-endian CDR, which is kept exactly.)
 *
 * Stdout lines, each flushed: "ready" once the reader has matched a writer (with --reliable:
 * once the reader exists, as it will never match a best-effort writer), and at exit one JSON
 * object {"received":N,"matched":M,"matched_current":C,"incompatible_qos":K,
 * "last_policy":"RELIABILITY"|"","lost":L,"rejected":R}, where M is the total count of writers
 * ever matched, C the number matched at exit, K / last_policy the requested-incompatible-QoS
 * status (total count, name of the last policy), and L / R the reader's sample-lost and
 * sample-rejected total counts (diagnostics for dropped samples).
 *
 * Termination: with --expect N, exit 0 as soon as N samples were received, or exit 1 after
 * --timeout-s seconds (default 60) without that (stdin is not read then). Without --expect,
 * run until stdin gives a line "stop" or reaches end of file, then take the samples still
 * arriving for up to 2 s (ending earlier once none arrived for 0.5 s), and exit 0.
 *
 * Graph mode (--graph) reads the DCPSParticipant and DCPSPublication builtin topics and the
 * ROS 2 graph topic `ros_discovery_info` (rmw_dds_common::msg::dds_::ParticipantEntitiesInfo_,
 * with a RELIABLE, TRANSIENT_LOCAL, KEEP_ALL reader as rmw has) until a node named
 * --wait-node (default "lidarxdp") was seen in a ParticipantEntitiesInfo sample and, when
 * --wait-topic is given, a publication on that topic was discovered; then it prints one JSON
 * object and exits 0 (exit 1 after --timeout-s seconds without that):
 *   {"participants":[{"guid":HEX32,"user_data":STR}],
 *    "publications":[{"guid":HEX32,"participant_guid":HEX32,"topic":STR,"type":STR,
 *                     "reliability":"best_effort"|"reliable",
 *                     "durability":"volatile"|"transient_local"|"transient"|"persistent",
 *                     "history":"keep_last"|"keep_all","depth":N,"user_data":STR}],
 *    "discovery_info":[{"gid":HEX32,"nodes":[{"namespace":STR,"name":STR,
 *                                            "readers":[HEX32...],"writers":[HEX32...]}]}]}
 * Only alive participants and publications are listed, this program's own participant
 * excluded; discovery_info holds the latest sample of each participant gid. QoS values are
 * those Cyclone's builtin topics report (Cyclone fills a policy the remote side did not send
 * with its default, e.g. history keep_last 1).
 *
 * --localhost keeps discovery and data on the loopback interface, without multicast,
 * discovering peers by unicast on 127.0.0.1 (participant indices 0..9). Every configuration
 * asks for socket receive buffers of up to 32 MB (net.core.rmem_max must allow it for large
 * samples to survive bursts).
 *
 * Errors print a message on stderr and exit 1; a bad command line exits 2.
 */

#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dds/dds.h"
#include "dds/ddsi/ddsi_serdata.h"
#include "PointCloud2.h"

#define PROG "dds_sub_cyclone"

/* ------------------------------------------------------------------------------------------
 * Small helpers: errors, time, JSON output
 * ---------------------------------------------------------------------------------------- */

/* Prints "dds_sub_cyclone: MESSAGE" on stderr and exits with status 1. */
static void fail (const char *fmt, ...)
{
  va_list ap;
  fprintf (stderr, PROG ": ");
  va_start (ap, fmt);
  vfprintf (stderr, fmt, ap);
  va_end (ap);
  fputc ('\n', stderr);
  exit (1);
}

/* Fails with `what` and Cyclone's text for the (negative) return code `rc`. */
static void fail_dds (const char *what, dds_return_t rc)
{
  fail ("%s: %s", what, dds_strretcode (rc < 0 ? -rc : rc));
}

/* Seconds on the monotonic clock. */
static double now_s (void)
{
  struct timespec ts;
  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}

/* Length of the valid UTF-8 sequence starting at s[0] (n bytes available), or 0. */
static size_t utf8_seq_len (const unsigned char *s, size_t n)
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
  /* reject overlong forms, surrogates and code points past U+10FFFF */
  if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
      (cp >= 0xd800 && cp <= 0xdfff))
    return 0;
  return len;
}

/* Writes bytes s[0..n) as a JSON string: valid UTF-8 is kept, quotes, backslashes and control
   characters are escaped, and every byte that is not part of valid UTF-8 becomes \u00XX (so
   binary user data stays readable and the output stays valid JSON). */
static void json_str_n (FILE *f, const char *str, size_t n)
{
  const unsigned char *s = (const unsigned char *) str;
  fputc ('"', f);
  for (size_t i = 0; i < n; )
  {
    unsigned char c = s[i];
    if (c == '"' || c == '\\') { fputc ('\\', f); fputc (c, f); i++; }
    else if (c == '\n') { fputs ("\\n", f); i++; }
    else if (c == '\r') { fputs ("\\r", f); i++; }
    else if (c == '\t') { fputs ("\\t", f); i++; }
    else if (c < 0x20 || c == 0x7f) { fprintf (f, "\\u%04x", c); i++; }
    else if (c < 0x80) { fputc (c, f); i++; }
    else
    {
      size_t len = utf8_seq_len (s + i, n - i);
      if (len == 0) { fprintf (f, "\\u%04x", c); i++; }
      else { fwrite (s + i, 1, len, f); i += len; }
    }
  }
  fputc ('"', f);
}

/* Writes a NUL-terminated string (NULL as "") as a JSON string. */
static void json_str (FILE *f, const char *s)
{
  json_str_n (f, s ? s : "", s ? strlen (s) : 0);
}

/* Writes n bytes as a JSON string of lowercase hex. */
static void json_hex (FILE *f, const uint8_t *b, size_t n)
{
  fputc ('"', f);
  for (size_t i = 0; i < n; i++)
    fprintf (f, "%02x", b[i]);
  fputc ('"', f);
}

/* The DDS name of a QoS policy id (as in the DDS specification), for "last_policy". */
static const char *policy_name (dds_qos_policy_id_t id)
{
  switch (id)
  {
    case DDS_INVALID_QOS_POLICY_ID: return "";
    case DDS_USERDATA_QOS_POLICY_ID: return "USER_DATA";
    case DDS_DURABILITY_QOS_POLICY_ID: return "DURABILITY";
    case DDS_PRESENTATION_QOS_POLICY_ID: return "PRESENTATION";
    case DDS_DEADLINE_QOS_POLICY_ID: return "DEADLINE";
    case DDS_LATENCYBUDGET_QOS_POLICY_ID: return "LATENCY_BUDGET";
    case DDS_OWNERSHIP_QOS_POLICY_ID: return "OWNERSHIP";
    case DDS_OWNERSHIPSTRENGTH_QOS_POLICY_ID: return "OWNERSHIP_STRENGTH";
    case DDS_LIVELINESS_QOS_POLICY_ID: return "LIVELINESS";
    case DDS_TIMEBASEDFILTER_QOS_POLICY_ID: return "TIME_BASED_FILTER";
    case DDS_PARTITION_QOS_POLICY_ID: return "PARTITION";
    case DDS_RELIABILITY_QOS_POLICY_ID: return "RELIABILITY";
    case DDS_DESTINATIONORDER_QOS_POLICY_ID: return "DESTINATION_ORDER";
    case DDS_HISTORY_QOS_POLICY_ID: return "HISTORY";
    case DDS_RESOURCELIMITS_QOS_POLICY_ID: return "RESOURCE_LIMITS";
    case DDS_ENTITYFACTORY_QOS_POLICY_ID: return "ENTITY_FACTORY";
    case DDS_WRITERDATALIFECYCLE_QOS_POLICY_ID: return "WRITER_DATA_LIFECYCLE";
    case DDS_READERDATALIFECYCLE_QOS_POLICY_ID: return "READER_DATA_LIFECYCLE";
    case DDS_TOPICDATA_QOS_POLICY_ID: return "TOPIC_DATA";
    case DDS_GROUPDATA_QOS_POLICY_ID: return "GROUP_DATA";
    case DDS_TRANSPORTPRIORITY_QOS_POLICY_ID: return "TRANSPORT_PRIORITY";
    case DDS_LIFESPAN_QOS_POLICY_ID: return "LIFESPAN";
    case DDS_DURABILITYSERVICE_QOS_POLICY_ID: return "DURABILITY_SERVICE";
    case DDS_PROPERTY_QOS_POLICY_ID: return "PROPERTY";
    case DDS_TYPE_CONSISTENCY_ENFORCEMENT_QOS_POLICY_ID: return "TYPE_CONSISTENCY_ENFORCEMENT";
    case DDS_DATA_REPRESENTATION_QOS_POLICY_ID: return "DATA_REPRESENTATION";
  }
  return "UNKNOWN";
}

/* ------------------------------------------------------------------------------------------
 * Command line
 * ---------------------------------------------------------------------------------------- */

struct options {
  uint32_t domain;        /* --domain: ROS domain id = DDS domain id */
  const char *topic;      /* --topic: DDS topic name */
  const char *out;        /* --out: output file prefix */
  long long expect;       /* --expect: messages to wait for, -1 for "until stop/EOF" */
  bool reliable;          /* --reliable: RELIABLE reader instead of BEST_EFFORT */
  bool localhost;         /* --localhost: loopback only, unicast discovery */
  bool no_data;           /* --no-data: do not write PREFIX.bin (benchmarks of large frames) */
  double timeout_s;       /* --timeout-s */
  bool graph;             /* --graph mode */
  const char *wait_node;  /* --wait-node (graph mode) */
  const char *wait_topic; /* --wait-topic (graph mode), NULL: do not wait for a publication */
};

static void usage (const char *msg)
{
  if (msg)
    fprintf (stderr, PROG ": %s\n", msg);
  fprintf (stderr,
           "usage: " PROG " --topic NAME --out PREFIX [--domain N] [--expect N] [--reliable]\n"
           "                       [--localhost] [--timeout-s S] [--no-data]\n"
           "       " PROG " --graph [--wait-node NAME] [--wait-topic NAME] [--domain N]\n"
           "                       [--localhost] [--timeout-s S]\n");
  exit (2);
}

/* Parses a whole decimal integer in [min, max], or exits 2. */
static long long parse_int (const char *opt, const char *s, long long min, long long max)
{
  char *end;
  errno = 0;
  long long v = strtoll (s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < min || v > max)
  {
    fprintf (stderr, PROG ": %s wants an integer in [%lld, %lld], not \"%s\"\n", opt, min, max, s);
    usage (NULL);
  }
  return v;
}

/* Parses a number of seconds in (0, 86400] (decimals allowed), or exits 2. */
static double parse_seconds (const char *opt, const char *s)
{
  char *end;
  errno = 0;
  double v = strtod (s, &end);
  if (errno != 0 || end == s || *end != '\0' || !(v > 0.0 && v <= 86400.0))
  {
    fprintf (stderr, PROG ": %s wants seconds in (0, 86400], not \"%s\"\n", opt, s);
    usage (NULL);
  }
  return v;
}

static void parse_args (int argc, char **argv, struct options *o)
{
  bool seen_out = false, seen_expect = false, seen_wait = false;
  *o = (struct options) { .domain = 0, .expect = -1, .timeout_s = 60.0, .wait_node = "lidarxdp" };
  for (int i = 1; i < argc; i++)
  {
    const char *a = argv[i];
    /* options taking a value */
    const char *v = NULL;
    if (!strcmp (a, "--domain") || !strcmp (a, "--topic") || !strcmp (a, "--out") ||
        !strcmp (a, "--expect") || !strcmp (a, "--timeout-s") || !strcmp (a, "--wait-node") ||
        !strcmp (a, "--wait-topic"))
    {
      if (i + 1 >= argc)
      {
        fprintf (stderr, PROG ": %s needs a value\n", a);
        usage (NULL);
      }
      v = argv[++i];
    }
    if (!strcmp (a, "--domain"))
      o->domain = (uint32_t) parse_int (a, v, 0, 232); /* the ROS domain id range */
    else if (!strcmp (a, "--topic"))
      o->topic = v;
    else if (!strcmp (a, "--out"))
      o->out = v, seen_out = true;
    else if (!strcmp (a, "--expect"))
      o->expect = parse_int (a, v, 1, INT32_MAX), seen_expect = true;
    else if (!strcmp (a, "--timeout-s"))
      o->timeout_s = parse_seconds (a, v);
    else if (!strcmp (a, "--wait-node"))
      o->wait_node = v, seen_wait = true;
    else if (!strcmp (a, "--wait-topic"))
      o->wait_topic = v, seen_wait = true;
    else if (!strcmp (a, "--reliable"))
      o->reliable = true;
    else if (!strcmp (a, "--localhost"))
      o->localhost = true;
    else if (!strcmp (a, "--no-data"))
      o->no_data = true;
    else if (!strcmp (a, "--graph"))
      o->graph = true;
    else if (!strcmp (a, "-h") || !strcmp (a, "--help"))
      usage (NULL);
    else
    {
      fprintf (stderr, PROG ": unknown argument \"%s\"\n", a);
      usage (NULL);
    }
  }
  if (o->graph)
  {
    if (o->topic || seen_out || seen_expect || o->reliable)
      usage ("--graph takes no --topic, --out, --expect or --reliable");
    if (o->wait_node[0] == '\0')
      usage ("--wait-node must not be empty");
  }
  else
  {
    if (seen_wait)
      usage ("--wait-node and --wait-topic go with --graph");
    if (o->topic == NULL || o->topic[0] == '\0')
      usage ("--topic NAME is required");
    if (!seen_out || o->out[0] == '\0')
      usage ("--out PREFIX is required");
  }
}

/* ------------------------------------------------------------------------------------------
 * Domain and participant
 * ---------------------------------------------------------------------------------------- */

/* Creates the domain with this program's configuration and a participant in it. */
static dds_entity_t make_participant (const struct options *o)
{
  /* Loopback only: the one interface 127.0.0.1, no multicast, unicast discovery of the
     participant indices 0..9 (Cyclone's MaxAutoParticipantIndex default) on localhost. */
  static const char localhost_xml[] =
    "<General><Interfaces><NetworkInterface address=\"127.0.0.1\"/></Interfaces>"
    "<AllowMulticast>false</AllowMulticast></General>"
    "<Discovery><ParticipantIndex>auto</ParticipantIndex>"
    "<Peers><Peer address=\"localhost\"/></Peers></Discovery>";
  /* Large socket receive buffers, as large samples arrive as bursts of fragments. */
  static const char internal_xml[] =
    "<Internal><SocketReceiveBufferSize min=\"default\" max=\"32MB\"/></Internal>";
  char config[1024];
  int n = snprintf (config, sizeof (config),
                    "<CycloneDDS><Domain id=\"any\">%s%s</Domain></CycloneDDS>",
                    o->localhost ? localhost_xml : "", internal_xml);
  if (n < 0 || (size_t) n >= sizeof (config))
    fail ("configuration too long");
  dds_entity_t dom = dds_create_domain (o->domain, config);
  if (dom < 0)
    fail_dds ("dds_create_domain", dom);
  dds_entity_t pp = dds_create_participant (o->domain, NULL, NULL);
  if (pp < 0)
    fail_dds ("dds_create_participant", pp);
  return pp;
}

/* ------------------------------------------------------------------------------------------
 * Subscriber mode
 * ---------------------------------------------------------------------------------------- */

struct sub_state {
  const struct options *o;
  FILE *jsonl, *bin;
  uint64_t received;       /* valid samples taken */
  uint64_t bin_offset;     /* bytes written to PREFIX.bin so far */
  double last_rx;          /* monotonic time of the last sample */
};

/* Opens PREFIX+ext for writing, or fails. */
static FILE *open_out (const char *prefix, const char *ext)
{
  size_t len = strlen (prefix) + strlen (ext) + 1;
  char *path = malloc (len);
  if (path == NULL)
    fail ("out of memory");
  snprintf (path, len, "%s%s", prefix, ext);
  FILE *f = fopen (path, "wb");
  if (f == NULL)
    fail ("cannot create %s: %s", path, strerror (errno));
  free (path);
  return f;
}

/* Decodes one received sample and records it in PREFIX.jsonl / PREFIX.bin. */
static void record_sample (struct sub_state *st, const struct ddsi_serdata *sd, const dds_sample_info_t *si)
{
  /* When the sample was taken (CLOCK_REALTIME, ns): `recv_ns`, for latency measurements. */
  struct timespec rx;
  clock_gettime (CLOCK_REALTIME, &rx);
  const int64_t recv_ns = (int64_t) rx.tv_sec * 1000000000 + rx.tv_nsec;
  /* The serialized size as received: encapsulation header + CDR body (+ end padding). */
  const uint32_t payload_len = ddsi_serdata_size (sd);
  uint8_t hdr[4] = { 0, 0, 0, 0 };
  if (payload_len < 4)
    fail ("sample %" PRIu64 ": serialized size %" PRIu32 " is shorter than the CDR header", st->received, payload_len);
  ddsi_serdata_to_ser (sd, 0, sizeof (hdr), hdr);

  /* Decode with the idlc-generated type (the sample starts zeroed; every pointer it gets is
     allocated by Cyclone and freed by dds_sample_free below). */
  sensor_msgs_msg_dds__PointCloud2_ msg;
  memset (&msg, 0, sizeof (msg));
  if (!ddsi_serdata_to_sample (sd, &msg, NULL, NULL))
    fail ("sample %" PRIu64 ": cannot decode it as sensor_msgs::msg::dds_::PointCloud2_", st->received);

  const uint32_t data_len = msg.data._length;
  if (!st->o->no_data && data_len > 0 && fwrite (msg.data._buffer, 1, data_len, st->bin) != data_len)
    fail ("writing %s.bin: %s", st->o->out, strerror (errno));

  FILE *f = st->jsonl;
  fputs ("{\"key\":", f);
  json_str (f, st->o->topic);
  fprintf (f, ",\"payload_len\":%" PRIu32 ",\"cdr_header\":", payload_len);
  json_hex (f, hdr, sizeof (hdr));
  fprintf (f, ",\"sec\":%" PRId32 ",\"nanosec\":%" PRIu32 ",\"frame_id\":",
           msg.header.stamp.sec, msg.header.stamp.nanosec);
  json_str (f, msg.header.frame_id);
  fprintf (f, ",\"height\":%" PRIu32 ",\"width\":%" PRIu32 ",\"fields\":[", msg.height, msg.width);
  for (uint32_t i = 0; i < msg.fields._length; i++)
  {
    const sensor_msgs_msg_dds__PointField_ *pf = &msg.fields._buffer[i];
    fputs (i ? ",[" : "[", f);
    json_str (f, pf->name);
    fprintf (f, ",%" PRIu32 ",%u,%" PRIu32 "]", pf->offset, (unsigned) pf->datatype, pf->count);
  }
  fprintf (f, "],\"is_bigendian\":%s,\"point_step\":%" PRIu32 ",\"row_step\":%" PRIu32
           ",\"is_dense\":%s,\"data_offset\":%" PRIu64 ",\"data_len\":%" PRIu32
           ",\"attachment\":null,\"seq\":null,\"time_ns\":null,\"gid_len\":null,\"gid\":null"
           ",\"source_timestamp_ns\":%" PRId64 ",\"recv_ns\":%" PRId64 "}\n",
           msg.is_bigendian ? "true" : "false", msg.point_step, msg.row_step,
           msg.is_dense ? "true" : "false", st->bin_offset, data_len, (int64_t) si->source_timestamp,
           recv_ns);
  if (fflush (st->bin) != 0 || fflush (f) != 0 || ferror (f))
    fail ("writing %s.jsonl / .bin: %s", st->o->out, strerror (errno));

  if (!st->o->no_data)
    st->bin_offset += data_len;
  st->received++;
  st->last_rx = now_s ();
  dds_sample_free (&msg, &sensor_msgs_msg_dds__PointCloud2__desc, DDS_FREE_CONTENTS);
}

/* Takes every sample the reader holds, serialized, and records the valid ones. */
static void take_all (struct sub_state *st, dds_entity_t rd)
{
  enum { BATCH = 8 };
  for (;;)
  {
    struct ddsi_serdata *sds[BATCH] = { NULL };
    dds_sample_info_t si[BATCH];
    dds_return_t n = dds_takecdr (rd, sds, BATCH, si, DDS_ANY_STATE);
    if (n < 0)
      fail_dds ("dds_takecdr", n);
    for (int32_t i = 0; i < n; i++)
    {
      if (si[i].valid_data)
        record_sample (st, sds[i], &si[i]);
      if (sds[i])
        ddsi_serdata_unref (sds[i]);
    }
    if (n < BATCH)
      break;
  }
}

/* Reads what stdin has without blocking; returns true once it gave a line "stop" or EOF.
   Lines are collected in a small buffer; anything but "stop" is ignored. */
static bool stdin_says_stop (void)
{
  static char line[256];
  static size_t len = 0;
  static bool stopped = false;
  while (!stopped)
  {
    struct pollfd pfd = { .fd = 0, .events = POLLIN };
    int r = poll (&pfd, 1, 0);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      break; /* nothing to read now (or poll failed: treated as "nothing yet") */
    if (pfd.revents & POLLNVAL)
    {
      stopped = true; /* no stdin at all counts as end of file */
      break;
    }
    char buf[256];
    ssize_t k = read (0, buf, sizeof (buf));
    if (k < 0 && (errno == EINTR || errno == EAGAIN))
      continue;
    if (k <= 0)
    {
      stopped = true; /* end of file (or a read error) */
      break;
    }
    for (ssize_t i = 0; i < k && !stopped; i++)
    {
      if (buf[i] == '\n')
      {
        line[len] = '\0';
        if (len > 0 && line[len - 1] == '\r')
          line[--len] = '\0';
        if (strcmp (line, "stop") == 0)
          stopped = true;
        len = 0;
      }
      else if (len + 1 < sizeof (line))
        line[len++] = buf[i];
    }
  }
  return stopped;
}

static int run_subscriber (const struct options *o)
{
  struct sub_state st = { .o = o, .jsonl = open_out (o->out, ".jsonl"), .bin = open_out (o->out, ".bin") };
  const double t0 = now_s ();
  dds_return_t rc;

  dds_entity_t pp = make_participant (o);
  dds_entity_t tp = dds_create_topic (pp, &sensor_msgs_msg_dds__PointCloud2__desc, o->topic, NULL, NULL);
  if (tp < 0)
    fail_dds ("dds_create_topic", tp);

  dds_qos_t *qos = dds_create_qos ();
  dds_qset_reliability (qos, o->reliable ? DDS_RELIABILITY_RELIABLE : DDS_RELIABILITY_BEST_EFFORT, DDS_MSECS (100));
  dds_qset_durability (qos, DDS_DURABILITY_VOLATILE);
  dds_qset_history (qos, DDS_HISTORY_KEEP_LAST, 10);
  dds_entity_t rd = dds_create_reader (pp, tp, qos, NULL);
  dds_delete_qos (qos);
  if (rd < 0)
    fail_dds ("dds_create_reader", rd);

  /* Wake up when samples are there; statuses are polled on every round. */
  dds_entity_t cond = dds_create_readcondition (rd, DDS_ANY_STATE);
  if (cond < 0)
    fail_dds ("dds_create_readcondition", cond);
  dds_entity_t ws = dds_create_waitset (pp);
  if (ws < 0)
    fail_dds ("dds_create_waitset", ws);
  if ((rc = dds_waitset_attach (ws, cond, cond)) < 0)
    fail_dds ("dds_waitset_attach", rc);

  bool ready = false, stopping = false;
  double stop_at = 0.0;
  dds_subscription_matched_status_t sm = { 0 };
  dds_requested_incompatible_qos_status_t iq = { 0 };
  int status = 0;
  for (;;)
  {
    if ((rc = dds_waitset_wait (ws, NULL, 0, DDS_MSECS (20))) < 0)
      fail_dds ("dds_waitset_wait", rc);
    take_all (&st, rd);

    if ((rc = dds_get_subscription_matched_status (rd, &sm)) < 0)
      fail_dds ("dds_get_subscription_matched_status", rc);
    if ((rc = dds_get_requested_incompatible_qos_status (rd, &iq)) < 0)
      fail_dds ("dds_get_requested_incompatible_qos_status", rc);
    if (!ready && (o->reliable || sm.current_count >= 1))
    {
      ready = true;
      printf ("ready\n");
      fflush (stdout);
    }

    const double t = now_s ();
    if (o->expect >= 0)
    {
      if (st.received >= (uint64_t) o->expect)
        break;
      if (t - t0 >= o->timeout_s)
      {
        fprintf (stderr, PROG ": timed out after %g s: received %" PRIu64 " of %lld samples on %s (matched writers: %" PRIu32 ")\n",
                 o->timeout_s, st.received, o->expect, o->topic, sm.total_count);
        status = 1;
        break;
      }
    }
    else if (!stopping)
    {
      if (stdin_says_stop ())
      {
        stopping = true;
        stop_at = t;
      }
    }
    else
    {
      /* stopping: take late samples for up to 2 s, ending once none came for 0.5 s */
      const double quiet_since = st.last_rx > stop_at ? st.last_rx : stop_at;
      if (t - stop_at >= 2.0 || t - quiet_since >= 0.5)
        break;
    }
  }

  dds_sample_lost_status_t lost = { 0 };
  dds_sample_rejected_status_t rej = { 0 };
  if ((rc = dds_get_sample_lost_status (rd, &lost)) < 0)
    fail_dds ("dds_get_sample_lost_status", rc);
  if ((rc = dds_get_sample_rejected_status (rd, &rej)) < 0)
    fail_dds ("dds_get_sample_rejected_status", rc);
  printf ("{\"received\":%" PRIu64 ",\"matched\":%" PRIu32 ",\"matched_current\":%" PRIu32
          ",\"incompatible_qos\":%" PRIu32 ",\"last_policy\":\"%s\",\"lost\":%" PRIu32
          ",\"rejected\":%" PRIu32 "}\n",
          st.received, sm.total_count, sm.current_count, iq.total_count,
          iq.total_count ? policy_name (iq.last_policy_id) : "", lost.total_count, rej.total_count);
  fflush (stdout);
  if (fclose (st.jsonl) != 0 || fclose (st.bin) != 0)
    fail ("closing %s.jsonl / .bin: %s", o->out, strerror (errno));
  /* deletes the domain, participant and everything in it */
  if ((rc = dds_delete (DDS_CYCLONEDDS_HANDLE)) < 0)
    fail_dds ("dds_delete", rc);
  return status;
}

/* ------------------------------------------------------------------------------------------
 * Graph mode
 * ---------------------------------------------------------------------------------------- */

typedef rmw_dds_common_msg_dds__ParticipantEntitiesInfo_ pinfo_t;

/* The latest ros_discovery_info sample of each participant gid, in order of first arrival. */
struct pinfo_table {
  pinfo_t **v;
  size_t n, cap;
};

static void pinfo_put (struct pinfo_table *t, pinfo_t *s)
{
  for (size_t i = 0; i < t->n; i++)
  {
    if (memcmp (t->v[i]->gid.data, s->gid.data, sizeof (s->gid.data)) == 0)
    {
      dds_sample_free (t->v[i], &rmw_dds_common_msg_dds__ParticipantEntitiesInfo__desc, DDS_FREE_ALL);
      t->v[i] = s;
      return;
    }
  }
  if (t->n == t->cap)
  {
    size_t cap = t->cap ? 2 * t->cap : 8;
    pinfo_t **v = realloc (t->v, cap * sizeof (*v));
    if (v == NULL)
      fail ("out of memory");
    t->v = v;
    t->cap = cap;
  }
  t->v[t->n++] = s;
}

static void pinfo_free (struct pinfo_table *t)
{
  for (size_t i = 0; i < t->n; i++)
    dds_sample_free (t->v[i], &rmw_dds_common_msg_dds__ParticipantEntitiesInfo__desc, DDS_FREE_ALL);
  free (t->v);
  t->v = NULL;
  t->n = t->cap = 0;
}

/* Takes every ros_discovery_info sample into the table (each into a sample of its own). */
static void take_discovery_info (dds_entity_t rd, struct pinfo_table *t)
{
  for (;;)
  {
    pinfo_t *s = dds_alloc (sizeof (*s)); /* zeroed */
    if (s == NULL)
      fail ("out of memory");
    void *buf[1] = { s };
    dds_sample_info_t si;
    dds_return_t n = dds_take (rd, buf, &si, 1, 1);
    if (n < 0)
      fail_dds ("dds_take (ros_discovery_info)", n);
    if (n == 1 && si.valid_data)
      pinfo_put (t, s);
    else
      dds_sample_free (s, &rmw_dds_common_msg_dds__ParticipantEntitiesInfo__desc, DDS_FREE_ALL);
    if (n == 0)
      break;
  }
}

static bool node_seen (const struct pinfo_table *t, const char *name)
{
  for (size_t i = 0; i < t->n; i++)
    for (uint32_t j = 0; j < t->v[i]->node_entities_info_seq._length; j++)
      if (strcmp (t->v[i]->node_entities_info_seq._buffer[j].node_name, name) == 0)
        return true;
  return false;
}

/* Loaned samples of a builtin-topic reader: every alive instance's latest sample. */
struct loaned {
  void **ptrs;
  dds_sample_info_t *si;
  int32_t n;
};

enum { MAX_BUILTIN = 4096 };

static struct loaned read_alive (dds_entity_t rd)
{
  struct loaned l;
  l.ptrs = calloc (MAX_BUILTIN, sizeof (*l.ptrs));
  l.si = calloc (MAX_BUILTIN, sizeof (*l.si));
  if (l.ptrs == NULL || l.si == NULL)
    fail ("out of memory");
  l.n = dds_read_mask (rd, l.ptrs, l.si, MAX_BUILTIN, MAX_BUILTIN,
                       DDS_ANY_SAMPLE_STATE | DDS_ANY_VIEW_STATE | DDS_ALIVE_INSTANCE_STATE);
  if (l.n < 0)
    fail_dds ("dds_read (builtin topic)", l.n);
  return l;
}

static void return_loaned (dds_entity_t rd, struct loaned *l)
{
  if (l->n > 0)
  {
    dds_return_t rc = dds_return_loan (rd, l->ptrs, l->n);
    if (rc < 0)
      fail_dds ("dds_return_loan", rc);
  }
  free (l->ptrs);
  free (l->si);
}

static bool publication_seen (dds_entity_t rd_pub, const char *topic)
{
  struct loaned l = read_alive (rd_pub);
  bool seen = false;
  for (int32_t i = 0; i < l.n && !seen; i++)
  {
    const dds_builtintopic_endpoint_t *ep = l.ptrs[i];
    if (l.si[i].valid_data && ep->topic_name && strcmp (ep->topic_name, topic) == 0)
      seen = true;
  }
  return_loaned (rd_pub, &l);
  return seen;
}

/* Writes the user data QoS of `qos` as a JSON string ("" when absent). */
static void json_userdata (FILE *f, const dds_qos_t *qos)
{
  void *ud = NULL;
  size_t sz = 0;
  if (qos && dds_qget_userdata (qos, &ud, &sz) && ud)
    json_str_n (f, ud, sz);
  else
    json_str (f, "");
  dds_free (ud);
}

static void print_graph (dds_entity_t pp, dds_entity_t rd_part, dds_entity_t rd_pub, const struct pinfo_table *t)
{
  FILE *f = stdout;
  dds_guid_t self;
  dds_return_t rc = dds_get_guid (pp, &self);
  if (rc < 0)
    fail_dds ("dds_get_guid", rc);

  fputs ("{\"participants\":[", f);
  struct loaned l = read_alive (rd_part);
  bool first = true;
  for (int32_t i = 0; i < l.n; i++)
  {
    const dds_builtintopic_participant_t *p = l.ptrs[i];
    if (!l.si[i].valid_data || memcmp (p->key.v, self.v, sizeof (self.v)) == 0)
      continue;
    fputs (first ? "{\"guid\":" : ",{\"guid\":", f);
    first = false;
    json_hex (f, p->key.v, sizeof (p->key.v));
    fputs (",\"user_data\":", f);
    json_userdata (f, p->qos);
    fputc ('}', f);
  }
  return_loaned (rd_part, &l);

  fputs ("],\"publications\":[", f);
  l = read_alive (rd_pub);
  first = true;
  for (int32_t i = 0; i < l.n; i++)
  {
    const dds_builtintopic_endpoint_t *ep = l.ptrs[i];
    if (!l.si[i].valid_data)
      continue;
    dds_reliability_kind_t rel = DDS_RELIABILITY_BEST_EFFORT;
    dds_duration_t max_blocking;
    dds_durability_kind_t dur = DDS_DURABILITY_VOLATILE;
    dds_history_kind_t hist = DDS_HISTORY_KEEP_LAST;
    int32_t depth = 1;
    if (ep->qos)
    {
      (void) dds_qget_reliability (ep->qos, &rel, &max_blocking);
      (void) dds_qget_durability (ep->qos, &dur);
      (void) dds_qget_history (ep->qos, &hist, &depth);
    }
    const char *durs = dur == DDS_DURABILITY_VOLATILE ? "volatile"
                     : dur == DDS_DURABILITY_TRANSIENT_LOCAL ? "transient_local"
                     : dur == DDS_DURABILITY_TRANSIENT ? "transient" : "persistent";
    fputs (first ? "{\"guid\":" : ",{\"guid\":", f);
    first = false;
    json_hex (f, ep->key.v, sizeof (ep->key.v));
    fputs (",\"participant_guid\":", f);
    json_hex (f, ep->participant_key.v, sizeof (ep->participant_key.v));
    fputs (",\"topic\":", f);
    json_str (f, ep->topic_name);
    fputs (",\"type\":", f);
    json_str (f, ep->type_name);
    fprintf (f, ",\"reliability\":\"%s\",\"durability\":\"%s\",\"history\":\"%s\",\"depth\":%" PRId32 ",\"user_data\":",
             rel == DDS_RELIABILITY_RELIABLE ? "reliable" : "best_effort", durs,
             hist == DDS_HISTORY_KEEP_ALL ? "keep_all" : "keep_last", depth);
    json_userdata (f, ep->qos);
    fputc ('}', f);
  }
  return_loaned (rd_pub, &l);

  fputs ("],\"discovery_info\":[", f);
  for (size_t i = 0; i < t->n; i++)
  {
    const pinfo_t *s = t->v[i];
    fputs (i ? ",{\"gid\":" : "{\"gid\":", f);
    json_hex (f, s->gid.data, sizeof (s->gid.data));
    fputs (",\"nodes\":[", f);
    for (uint32_t j = 0; j < s->node_entities_info_seq._length; j++)
    {
      const rmw_dds_common_msg_dds__NodeEntitiesInfo_ *nd = &s->node_entities_info_seq._buffer[j];
      fputs (j ? ",{\"namespace\":" : "{\"namespace\":", f);
      json_str (f, nd->node_namespace);
      fputs (",\"name\":", f);
      json_str (f, nd->node_name);
      fputs (",\"readers\":[", f);
      for (uint32_t k = 0; k < nd->reader_gid_seq._length; k++)
      {
        if (k) fputc (',', f);
        json_hex (f, nd->reader_gid_seq._buffer[k].data, 16);
      }
      fputs ("],\"writers\":[", f);
      for (uint32_t k = 0; k < nd->writer_gid_seq._length; k++)
      {
        if (k) fputc (',', f);
        json_hex (f, nd->writer_gid_seq._buffer[k].data, 16);
      }
      fputs ("]}", f);
    }
    fputs ("]}", f);
  }
  fputs ("]}\n", f);
  fflush (f);
}

static int run_graph (const struct options *o)
{
  const double t0 = now_s ();
  dds_entity_t pp = make_participant (o);

  dds_entity_t rd_part = dds_create_reader (pp, DDS_BUILTIN_TOPIC_DCPSPARTICIPANT, NULL, NULL);
  if (rd_part < 0)
    fail_dds ("dds_create_reader (DCPSParticipant)", rd_part);
  dds_entity_t rd_pub = dds_create_reader (pp, DDS_BUILTIN_TOPIC_DCPSPUBLICATION, NULL, NULL);
  if (rd_pub < 0)
    fail_dds ("dds_create_reader (DCPSPublication)", rd_pub);

  dds_entity_t tp = dds_create_topic (pp, &rmw_dds_common_msg_dds__ParticipantEntitiesInfo__desc, "ros_discovery_info", NULL, NULL);
  if (tp < 0)
    fail_dds ("dds_create_topic (ros_discovery_info)", tp);
  dds_qos_t *qos = dds_create_qos ();
  dds_qset_reliability (qos, DDS_RELIABILITY_RELIABLE, DDS_MSECS (100));
  dds_qset_durability (qos, DDS_DURABILITY_TRANSIENT_LOCAL);
  dds_qset_history (qos, DDS_HISTORY_KEEP_ALL, 0);
  dds_entity_t rd_di = dds_create_reader (pp, tp, qos, NULL);
  dds_delete_qos (qos);
  if (rd_di < 0)
    fail_dds ("dds_create_reader (ros_discovery_info)", rd_di);

  struct pinfo_table t = { NULL, 0, 0 };
  for (;;)
  {
    take_discovery_info (rd_di, &t);
    const bool have_node = node_seen (&t, o->wait_node);
    const bool have_pub = o->wait_topic == NULL || publication_seen (rd_pub, o->wait_topic);
    if (have_node && have_pub)
      break;
    if (now_s () - t0 >= o->timeout_s)
    {
      if (!have_node)
        fprintf (stderr, PROG ": no node \"%s\" in %zu ros_discovery_info participant(s)\n", o->wait_node, t.n);
      if (!have_pub)
        fprintf (stderr, PROG ": no publication on topic \"%s\" discovered\n", o->wait_topic);
      fail ("timed out after %g s", o->timeout_s);
    }
    dds_sleepfor (DDS_MSECS (50));
  }
  print_graph (pp, rd_part, rd_pub, &t);
  pinfo_free (&t);
  dds_return_t rc = dds_delete (DDS_CYCLONEDDS_HANDLE);
  if (rc < 0)
    fail_dds ("dds_delete", rc);
  return 0;
}

int main (int argc, char **argv)
{
  struct options o;
  parse_args (argc, argv, &o);
  return o.graph ? run_graph (&o) : run_subscriber (&o);
}
