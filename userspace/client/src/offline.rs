//! Offline input: UDP datagrams from capture files, and decoding a capture into frames.
//!
//! [`CaptureReader`] streams the UDP datagrams of a classic libpcap file (µs or ns time
//! stamps, either byte order) or a pcapng file (any number of sections and interfaces, each
//! with its own link type and time-stamp resolution `if_tsresol` / offset `if_tsoffset`),
//! parsed with the `pcap-file` crate's slice parsers from the file mapped read-only (mmap(2);
//! a pipe is read whole instead). [`CaptureReader::next_datagram`] lends each datagram's
//! payload where it lies in the mapping (a reassembled one from one reused buffer): no copy
//! and no allocation per record. Every record goes through the project's one frame parser,
//! [`lidarxdp_core::net`], with [`TotalLength::CutAtCapture`]; IPv4 and IPv6 fragments are put back together by
//! [`lidarxdp_core::reassembly::Reassembler`] with the record times as its clock (1 s timeout) and the
//! datagram is yielded at the position of its last fragment.
//!
//! Link types: Ethernet (with up to two 802.1Q / 802.1ad tags), Linux cooked capture v1 and v2
//! (SLL, SLL2), raw IP (`LINKTYPE_RAW`), raw IPv4 (`LINKTYPE_IPV4`) and raw IPv6
//! (`LINKTYPE_IPV6`); IPv4 and IPv6 (with its extension headers) alike. Every record that
//! yields no datagram is counted in [`SkipCounts`] under exactly one reason, so
//! `records == records used + SkipCounts::total()`.
//!
//! [`decode_pcap_each`] decodes a capture and hands each frame to a callback as it closes: the
//! memory it holds is one frame in progress and the reassembly slots (about 1 MiB), whatever
//! the length of the file (the mapping's pages are the page cache's, not the process's). [`decode_pcap`] / [`decode_pcap_with_options`]
//! collect the frames into a `Vec` (for tests and small captures).

use std::fs::File;
use std::io::Read;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use pcap_file::pcap::PcapParser;
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionOption;
use pcap_file::pcapng::{Block, PcapNgParser};
use pcap_file::{DataLink, PcapError};

use lidarxdp_core::HostTime;
use lidarxdp_core::frame::Frame;
use lidarxdp_core::net::{self, LinkType, NetError, TotalLength};
use lidarxdp_core::reassembly::{Fragment, Reassembler, ReassemblyConfig};
use lidarxdp_core::scan::BufferSource;
use lidarxdp_core::sensor::{
    ConfigError, DecodeCounters, PipelineOptions, ScanPipeline, SensorConfig,
};

/// Errors of offline reading and decoding.
#[derive(Debug, thiserror::Error)]
pub enum OfflineError {
    /// The capture file cannot be opened or read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is neither a classic pcap nor a pcapng file, or a block/record is damaged.
    #[error("{path}: invalid pcap/pcapng: {source}")]
    Pcap {
        /// The file.
        path: PathBuf,
        /// The parser error.
        source: pcap_file::PcapError,
    },
    /// The sensor configuration or calibration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Datagrams that would be decoded together come from more than one IP source: two
    /// sensors sending to one port would be mixed into one frame. Decoding stopped at the
    /// first datagram of the second source; the frames before it were delivered.
    #[error("{}", mixed_sources_message(.path, .port, .sources))]
    MixedSources {
        /// The file.
        path: PathBuf,
        /// The port filter in use, if any.
        port: Option<u16>,
        /// The sources seen, in order of first appearance (at most [`MAX_LISTED_SOURCES`]).
        sources: Vec<IpAddr>,
    },
    /// The frame callback of [`decode_pcap_each`] failed (e.g. writing to stdout or a PCD).
    #[error("output: {0}")]
    Output(#[source] std::io::Error),
}

fn mixed_sources_message(path: &Path, port: &Option<u16>, sources: &[IpAddr]) -> String {
    let list: Vec<String> = sources.iter().map(IpAddr::to_string).collect();
    format!(
        "{}: the datagrams {} come from {} IP sources ({}); two sensors must never be mixed \
         into one frame: choose one with --source IP",
        path.display(),
        match port {
            Some(p) => format!("to port {p}"),
            None => "to every port".to_owned(),
        },
        sources.len(),
        list.join(", ")
    )
}

/// Most sources listed by [`OfflineError::MixedSources`].
pub const MAX_LISTED_SOURCES: usize = 16;

/// One UDP datagram of a capture, its payload lent by the reader
/// ([`CaptureReader::next_datagram`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Datagram<'a> {
    /// IP source address.
    pub src_ip: IpAddr,
    /// IP destination address.
    pub dst_ip: IpAddr,
    /// UDP source port.
    pub src_port: u16,
    /// UDP destination port.
    pub dst_port: u16,
    /// UDP payload (trimmed to the UDP length field; shorter if the capture cut the record).
    pub payload: &'a [u8],
    /// Record time stamp, ns since the Unix epoch (of the last fragment for a reassembled
    /// datagram).
    pub ts_ns: u64,
}

impl Datagram<'_> {
    /// The datagram with its own copy of the payload.
    pub fn to_udp_datagram(&self) -> UdpDatagram {
        UdpDatagram {
            src_ip: self.src_ip,
            dst_ip: self.dst_ip,
            src_port: self.src_port,
            dst_port: self.dst_port,
            payload: self.payload.to_vec(),
            ts_ns: self.ts_ns,
        }
    }
}

/// One UDP datagram read from a capture, owning its payload (the [`CaptureReader`]
/// iterator's items).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UdpDatagram {
    /// IP source address.
    pub src_ip: IpAddr,
    /// IP destination address.
    pub dst_ip: IpAddr,
    /// UDP source port.
    pub src_port: u16,
    /// UDP destination port.
    pub dst_port: u16,
    /// UDP payload (trimmed to the UDP length field; shorter if the capture cut the record).
    pub payload: Vec<u8>,
    /// Record time stamp, ns since the Unix epoch (of the last fragment for a reassembled
    /// datagram).
    pub ts_ns: u64,
}

/// Records that yielded no datagram, by reason. Each record is counted once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SkipCounts {
    /// The record's link type (or pcapng interface) is not Ethernet, SLL, SLL2 or raw IP.
    pub unsupported_link: u64,
    /// The record ends inside a link, IP, IPv6 extension or UDP header, or it is a fragment
    /// that the capture cut short (which cannot be reassembled).
    pub truncated: u64,
    /// Neither IPv4 nor IPv6 (ARP, LLDP, ...), or more than two VLAN tags.
    pub not_ip: u64,
    /// An IP header with a wrong version, an IPv4 IHL below 5 or total length below the
    /// header, an IPv6 payload length of 0, more than 8 IPv6 extension headers, or one out of
    /// place.
    pub bad_ip: u64,
    /// IP but not UDP (TCP, ICMP, ICMPv6, ...).
    pub not_udp: u64,
    /// A UDP length field below 8 or beyond the IP payload.
    pub bad_udp: u64,
    /// IP fragments whose datagram never completed: a fragment missing at the end of the
    /// file or after the 1 s reassembly timeout, overlaps, duplicates, inconsistent fragments.
    pub fragment_incomplete: u64,
    /// UDP datagrams (all their fragments) to another destination port than the one asked for.
    pub wrong_port: u64,
    /// UDP datagrams (all their fragments) from another IP source than the one asked for.
    pub wrong_source: u64,
}

impl SkipCounts {
    /// Records skipped for any reason.
    pub fn total(&self) -> u64 {
        self.reasons().iter().map(|(_, n)| n).sum()
    }

    /// `(reason, count)` pairs in a fixed order, names as in the JSON summary.
    pub fn reasons(&self) -> [(&'static str, u64); 9] {
        [
            ("unsupported_link", self.unsupported_link),
            ("truncated", self.truncated),
            ("not_ip", self.not_ip),
            ("bad_ip", self.bad_ip),
            ("not_udp", self.not_udp),
            ("bad_udp", self.bad_udp),
            ("fragment_incomplete", self.fragment_incomplete),
            ("wrong_port", self.wrong_port),
            ("wrong_source", self.wrong_source),
        ]
    }

    fn count(&mut self, e: &NetError, records: u64) {
        let slot = match e {
            NetError::Truncated { .. } => &mut self.truncated,
            NetError::NotIp(_) | NetError::TooManyVlanTags => &mut self.not_ip,
            NetError::BadVersion(_)
            | NetError::BadIhl(_)
            | NetError::BadTotalLength { .. }
            | NetError::BadPayloadLength { .. }
            | NetError::TooManyExtHeaders
            | NetError::BadExtHeader(_) => &mut self.bad_ip,
            NetError::NotUdp(_) => &mut self.not_udp,
            NetError::BadUdpLength { .. } => &mut self.bad_udp,
            // Fragments are handled before any call; counted as incomplete if one slips here.
            NetError::Fragment => &mut self.fragment_incomplete,
        };
        *slot += records;
    }
}

impl std::fmt::Display for SkipCounts {
    /// `none`, or the non-zero reasons: `not_udp 3, truncated 1`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut any = false;
        for (name, n) in self.reasons() {
            if n > 0 {
                write!(f, "{}{name} {n}", if any { ", " } else { "" })?;
                any = true;
            }
        }
        if !any {
            f.write_str("none")?;
        }
        Ok(())
    }
}

/// Which datagrams a [`CaptureReader`] yields; the others are counted as skipped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DatagramFilter {
    /// Only this UDP destination port (`None`: any).
    pub port: Option<u16>,
    /// Only this IP source (`None`: any).
    pub source: Option<IpAddr>,
}

/// A pcapng interface: its link type (`None` if unsupported) and time-stamp scale.
#[derive(Clone, Copy, Debug)]
struct Interface {
    link: Option<LinkType>,
    /// `if_tsresol` byte (default 6: µs): MSB clear 10^-n s, MSB set 2^-n s.
    tsresol: u8,
    /// `if_tsoffset`, seconds added to every time stamp.
    tsoffset_s: u64,
}

impl Interface {
    /// ns since the Unix epoch of a raw EPB time stamp (saturating).
    fn ns(&self, raw: u64) -> u64 {
        let raw = u128::from(raw);
        let n = u32::from(self.tsresol & 0x7f);
        // raw < 2^64, so raw * 10^9 < 2^94 fits; n <= 127 keeps the shift in range.
        let ns = if self.tsresol & 0x80 != 0 {
            (raw * 1_000_000_000) >> n
        } else if n <= 9 {
            raw * 10u128.pow(9 - n)
        } else {
            raw / 10u128.pow((n - 9).min(38))
        };
        let ns = ns + u128::from(self.tsoffset_s) * 1_000_000_000;
        u64::try_from(ns).unwrap_or(u64::MAX)
    }
}

fn link_type(d: DataLink) -> Option<LinkType> {
    match d {
        DataLink::ETHERNET => Some(LinkType::Ethernet),
        DataLink::LINUX_SLL => Some(LinkType::LinuxSll),
        DataLink::LINUX_SLL2 => Some(LinkType::LinuxSll2),
        DataLink::RAW => Some(LinkType::RawIp),
        DataLink::IPV4 => Some(LinkType::Ipv4),
        DataLink::IPV6 => Some(LinkType::Ipv6),
        _ => None,
    }
}

enum Format {
    Pcap {
        parser: PcapParser,
        link: Option<LinkType>,
    },
    PcapNg {
        parser: PcapNgParser,
        interfaces: Vec<Interface>,
        /// Time of the last packet block that had one, ns (Simple Packet Blocks carry none).
        last_ns: u64,
    },
}

/// Largest capture read from a pipe (which cannot be mapped), bytes: 1 GiB.
pub const MAX_STREAM_BYTES: u64 = 1 << 30;

/// Parsed bytes of a mapped capture whose pages are let go at once (8 MiB, a multiple of the
/// page size): the reader's resident memory stays under it however long the file.
const RELEASE_STEP: usize = 8 << 20;

/// The capture's bytes: the file mapped read-only, or read whole when it cannot be mapped
/// (a pipe).
enum Bytes {
    Mapped(memmap2::Mmap),
    Read(Vec<u8>),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Read(v) => v,
        }
    }
}

/// Where a datagram's payload lies: in the capture's bytes, or in the reader's buffer of the
/// last reassembled datagram.
#[derive(Clone, Copy, Debug)]
enum Payload {
    InFile { start: usize, len: usize },
    Joined,
}

/// A datagram's header fields and where its payload lies.
#[derive(Clone, Copy, Debug)]
struct Found {
    src_ip: IpAddr,
    dst_ip: IpAddr,
    src_port: u16,
    dst_port: u16,
    payload: Payload,
    ts_ns: u64,
}

/// A pcap-file error as the streaming reader reported it: a record cut short by the end of
/// the file is an unexpected end of file.
fn at_end(e: PcapError) -> PcapError {
    match e {
        PcapError::IncompleteBuffer => {
            PcapError::IoError(std::io::Error::from(std::io::ErrorKind::UnexpectedEof))
        }
        e => e,
    }
}

/// What a [`CaptureReader`] has counted.
#[derive(Debug, Default)]
struct Tally {
    filter: DatagramFilter,
    skipped: SkipCounts,
    records: u64,
    datagrams: u64,
    /// Fragment records pushed to reassembly and not yet part of a completed datagram.
    pending_fragments: u64,
}

impl Tally {
    /// Passes a whole datagram (made of `records` records) through the filter.
    fn accept(
        &mut self,
        d: &net::UdpDatagram<'_>,
        ts_ns: u64,
        records: u64,
        payload: Payload,
    ) -> Option<Found> {
        if self.filter.port.is_some_and(|p| p != d.dst_port) {
            self.skipped.wrong_port += records;
            return None;
        }
        let src = d.src_ip;
        if self.filter.source.is_some_and(|s| s != src) {
            self.skipped.wrong_source += records;
            return None;
        }
        self.datagrams += 1;
        Some(Found {
            src_ip: src,
            dst_ip: d.dst_ip,
            src_port: d.src_port,
            dst_port: d.dst_port,
            payload,
            ts_ns,
        })
    }

    /// One record of link type `link` read at `ts_ns`, `data` lying at `offset` in the file
    /// (`None`: not in the file): the datagram it completes, if any (a reassembled one's
    /// payload, or one not in the file, copied into `joined`).
    fn record(
        &mut self,
        reasm: &mut Reassembler,
        joined: &mut Vec<u8>,
        link: Option<LinkType>,
        ts_ns: u64,
        (data, offset): (&[u8], Option<usize>),
    ) -> Option<Found> {
        self.records += 1;
        let Some(link) = link else {
            self.skipped.unsupported_link += 1;
            return None;
        };
        let ip = match net::parse_ip_link(data, link, TotalLength::CutAtCapture) {
            Ok(ip) => ip,
            Err(e) => {
                self.skipped.count(&e, 1);
                return None;
            }
        };
        let Some(frag) = Fragment::from_ip(&ip) else {
            return match net::udp_of_ip(&ip) {
                Ok(d) => {
                    // The payload is a part of `data`: its offset in the file.
                    let payload = match offset {
                        Some(o) => Payload::InFile {
                            start: o + (d.payload.as_ptr() as usize - data.as_ptr() as usize),
                            len: d.payload.len(),
                        },
                        None => {
                            joined.clear();
                            joined.extend_from_slice(d.payload);
                            Payload::Joined
                        }
                    };
                    self.accept(&d, ts_ns, 1, payload)
                }
                Err(e) => {
                    self.skipped.count(&e, 1);
                    None
                }
            };
        };
        if ip.cut {
            self.skipped.truncated += 1;
            return None;
        }
        // An IPv4 fragment names its protocol; an IPv6 one only the header its fragmentable
        // part starts with (extension headers may come before UDP, and RFC 8200 lets later
        // fragments' next header differ): `Reassembled::udp` judges IPv6's.
        if ip.src_ip.is_ipv4() && ip.protocol != net::IPPROTO_UDP {
            self.skipped.not_udp += 1;
            return None;
        }
        self.pending_fragments += 1;
        // Failures stay pending: counted `fragment_incomplete` at the end of the file.
        let Ok(Some(whole)) = reasm.push(&frag, ts_ns) else {
            return None;
        };
        let n = u64::from(whole.fragments);
        self.pending_fragments = self.pending_fragments.saturating_sub(n);
        match whole.udp() {
            Ok(d) => {
                joined.clear();
                joined.extend_from_slice(d.payload);
                self.accept(&d, ts_ns, n, Payload::Joined)
            }
            Err(e) => {
                self.skipped.count(&e, n);
                None
            }
        }
    }

    /// End of file: fragments still pending never completed.
    fn finish(&mut self) {
        self.skipped.fragment_incomplete += std::mem::take(&mut self.pending_fragments);
    }
}

/// Streams the UDP datagrams of a capture file in file order; see the module docs. A damaged
/// record ends the iteration after yielding [`OfflineError::Pcap`].
pub struct CaptureReader {
    path: PathBuf,
    bytes: Bytes,
    /// Bytes of the file parsed so far.
    pos: usize,
    /// Bytes at the start of the mapping whose pages were let go (page-aligned).
    released: usize,
    format: Option<Format>,
    reasm: Reassembler,
    /// The payload of the last reassembled datagram.
    joined: Vec<u8>,
    tally: Tally,
}

/// The name [`CaptureReader`] had when it read classic pcap only.
pub type UdpPayloads = CaptureReader;

/// Opens `path` (classic pcap or pcapng) and iterates over all its UDP datagrams.
///
/// # Errors
/// As [`CaptureReader::open`].
pub fn udp_payloads(path: &Path) -> Result<CaptureReader, OfflineError> {
    CaptureReader::open(path, DatagramFilter::default())
}

impl CaptureReader {
    /// Opens `path`, a classic pcap or a pcapng file (told apart by the magic number), and
    /// yields the datagrams `filter` accepts. A regular file is mapped (mmap(2)): another
    /// process truncating it while it is read makes this process fault (SIGBUS), as any
    /// mapped input does. Anything else (a pipe) is read whole first, at most
    /// [`MAX_STREAM_BYTES`].
    ///
    /// # Errors
    /// [`OfflineError::Io`] if the file cannot be opened, or is a pipe longer than
    /// [`MAX_STREAM_BYTES`]; [`OfflineError::Pcap`] if it starts with neither a pcap header nor
    /// a pcapng section header block.
    pub fn open(path: &Path, filter: DatagramFilter) -> Result<Self, OfflineError> {
        let io_err = |source| OfflineError::Io {
            path: path.to_path_buf(),
            source,
        };
        let pcap_err = |source| OfflineError::Pcap {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io_err)?;
        let is_file = file.metadata().map_err(io_err)?.is_file();
        let bytes = if is_file {
            // SAFETY: the mapping is read-only (memmap2 maps it `MAP_SHARED`, `PROT_READ`) and
            // only read as bytes, which any contents are. A file truncated by another process
            // while it is mapped makes the pages past its new end fault (SIGBUS), as with any
            // mapped input (`CaptureReader::open` says so); captures are inputs that nothing
            // writes while they are read.
            let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io_err)?;
            // Read once, front to back: a larger read-ahead, pages dropped behind.
            let _ = map.advise(memmap2::Advice::Sequential);
            Bytes::Mapped(map)
        } else {
            // A pipe: read whole, up to MAX_STREAM_BYTES.
            let mut v = Vec::new();
            file.take(MAX_STREAM_BYTES + 1)
                .read_to_end(&mut v)
                .map_err(io_err)?;
            if v.len() as u64 > MAX_STREAM_BYTES {
                return Err(io_err(std::io::Error::other(format!(
                    "not a regular file and longer than {} MiB: a capture from a pipe is read \
                     whole before decoding; write it to a file, which is mapped instead",
                    MAX_STREAM_BYTES >> 20
                ))));
            }
            Bytes::Read(v)
        };
        let pcapng = bytes.starts_with(&[0x0a, 0x0d, 0x0d, 0x0a]);
        let (rest, format) = if pcapng {
            let (rest, parser) = PcapNgParser::new(&bytes).map_err(|e| pcap_err(at_end(e)))?;
            let format = Format::PcapNg {
                parser,
                interfaces: Vec::new(),
                last_ns: 0,
            };
            (rest.len(), format)
        } else {
            let (rest, parser) = PcapParser::new(&bytes).map_err(|e| pcap_err(at_end(e)))?;
            let format = Format::Pcap {
                link: link_type(parser.header().datalink),
                parser,
            };
            (rest.len(), format)
        };
        Ok(Self {
            path: path.to_path_buf(),
            pos: bytes.len() - rest,
            released: 0,
            bytes,
            format: Some(format),
            reasm: Reassembler::new(ReassemblyConfig::default()),
            joined: Vec::new(),
            tally: Tally {
                filter,
                ..Tally::default()
            },
        })
    }

    /// Bytes of the file parsed so far, for progress.
    pub fn bytes_read(&self) -> u64 {
        self.pos as u64
    }

    /// Records skipped so far, by reason. Fragments still waiting for reassembly are counted
    /// (as `fragment_incomplete`) once the file has been read to its end.
    pub fn skip_counts(&self) -> &SkipCounts {
        &self.tally.skipped
    }

    /// Records skipped so far, all reasons together (see [`CaptureReader::skip_counts`]).
    pub fn skipped(&self) -> u64 {
        self.tally.skipped.total()
    }

    /// Records (packet blocks) read so far.
    pub fn records(&self) -> u64 {
        self.tally.records
    }

    /// Datagrams yielded so far.
    pub fn datagrams(&self) -> u64 {
        self.tally.datagrams
    }

    /// The filter in use.
    pub fn filter(&self) -> DatagramFilter {
        self.tally.filter
    }

    /// The next datagram the filter accepts, its payload lent from the mapped file (or the
    /// reader's buffer for a reassembled one) until the next call; `None` at the end of the
    /// file. A damaged record yields [`OfflineError::Pcap`] and ends the reading.
    pub fn next_datagram(&mut self) -> Option<Result<Datagram<'_>, OfflineError>> {
        let found = match self.next_found()? {
            Ok(f) => f,
            Err(e) => return Some(Err(e)),
        };
        let payload = match found.payload {
            Payload::InFile { start, len } => &self.bytes[start..start + len],
            Payload::Joined => &self.joined[..],
        };
        Some(Ok(Datagram {
            src_ip: found.src_ip,
            dst_ip: found.dst_ip,
            src_port: found.src_port,
            dst_port: found.dst_port,
            payload,
            ts_ns: found.ts_ns,
        }))
    }

    /// Lets go of the mapped pages already parsed, in steps of [`RELEASE_STEP`], so that the
    /// process's resident memory does not grow with the file (the pages stay in the page
    /// cache). Called between datagrams, when no payload is lent.
    fn release_parsed(&mut self) {
        let Bytes::Mapped(map) = &self.bytes else {
            return;
        };
        let upto = self.pos & !(RELEASE_STEP - 1);
        if upto > self.released {
            // SAFETY: MADV_DONTNEED on a read-only file mapping drops this process's
            // page-table entries only (nothing was written to discard); a later access faults the same file bytes back in from
            // the page cache, so every slice of the mapping keeps its contents. No slice of
            // `released..upto` is borrowed: `&mut self` ends the last lent payload.
            let _ = unsafe {
                map.unchecked_advise_range(
                    memmap2::UncheckedAdvice::DontNeed,
                    self.released,
                    upto - self.released,
                )
            };
            self.released = upto;
        }
    }

    /// Parses records until one completes a datagram the filter accepts.
    fn next_found(&mut self) -> Option<Result<Found, OfflineError>> {
        self.release_parsed();
        let CaptureReader {
            path,
            bytes,
            pos,
            format,
            reasm,
            joined,
            tally,
            ..
        } = self;
        let file: &[u8] = bytes;
        loop {
            let fmt = format.as_mut()?;
            let rest = &file[*pos..];
            if rest.is_empty() {
                *format = None;
                tally.finish();
                return None;
            }
            // Each record: its link type, time, data and the data's offset in the file.
            let parsed = match fmt {
                Format::Pcap { parser, link } => parser.next_packet(rest).map(|(r, p)| {
                    let ts = u64::try_from(p.timestamp.as_nanos()).unwrap_or(u64::MAX);
                    (r.len(), Some((*link, ts, p.data)))
                }),
                Format::PcapNg {
                    parser,
                    interfaces,
                    last_ns,
                } => parser.next_block(rest).map(|(r, block)| {
                    let rec = match block {
                        Block::SectionHeader(_) => {
                            interfaces.clear();
                            None
                        }
                        Block::InterfaceDescription(i) => {
                            let mut iface = Interface {
                                link: link_type(i.linktype),
                                tsresol: 6,
                                tsoffset_s: 0,
                            };
                            for o in &i.options {
                                match o {
                                    InterfaceDescriptionOption::IfTsResol(r) => iface.tsresol = *r,
                                    InterfaceDescriptionOption::IfTsOffset(s) => {
                                        iface.tsoffset_s = *s
                                    }
                                    _ => {}
                                }
                            }
                            interfaces.push(iface);
                            None
                        }
                        Block::EnhancedPacket(p) => {
                            // pcap-file 2 stores the raw time-stamp units in the Duration's ns.
                            let raw = u64::try_from(p.timestamp.as_nanos()).unwrap_or(u64::MAX);
                            let iface = usize::try_from(p.interface_id)
                                .ok()
                                .and_then(|i| interfaces.get(i));
                            let (link, ts) =
                                (iface.and_then(|i| i.link), iface.map_or(0, |i| i.ns(raw)));
                            *last_ns = ts;
                            Some((link, ts, p.data))
                        }
                        Block::SimplePacket(p) => {
                            // No time stamp (pcapng spec 4.4): the time of the last packet
                            // block that had one, so the stream's host time line does not jump
                            // back to 1970; the first interface's link type.
                            let link = interfaces.first().and_then(|i| i.link);
                            Some((link, *last_ns, p.data))
                        }
                        _ => None,
                    };
                    (r.len(), rec)
                }),
            };
            match parsed {
                Err(e) => {
                    *format = None;
                    tally.finish();
                    return Some(Err(OfflineError::Pcap {
                        path: path.clone(),
                        source: at_end(e),
                    }));
                }
                Ok((left, rec)) => {
                    *pos = file.len() - left;
                    let Some((link, ts, data)) = rec else {
                        continue;
                    };
                    // The record's data is borrowed from the file (the parsers do not copy).
                    let offset = (data.as_ptr() as usize)
                        .checked_sub(file.as_ptr() as usize)
                        .filter(|o| o + data.len() <= file.len());
                    if let Some(f) = tally.record(reasm, joined, link, ts, (&data, offset)) {
                        return Some(Ok(f));
                    }
                }
            }
        }
    }
}

impl Iterator for CaptureReader {
    type Item = Result<UdpDatagram, OfflineError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_datagram().map(|r| r.map(|d| d.to_udp_datagram()))
    }
}

/// Options of [`decode_pcap_each`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DecodeOptions {
    /// Only datagrams to this UDP destination port (`None`: every port).
    pub port: Option<u16>,
    /// Only datagrams from this IP source. `None`: any, but all decoded datagrams must then
    /// come from one source, else [`OfflineError::MixedSources`].
    pub source: Option<IpAddr>,
    /// Decoder options.
    pub pipeline: PipelineOptions,
}

/// What [`decode_pcap_each`] read and decoded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecodeSummary {
    /// Records (packet blocks) in the file.
    pub records: u64,
    /// UDP datagrams passed to the decoder (a reassembled datagram counts once).
    pub datagrams: u64,
    /// Records that yielded no datagram, by reason.
    pub skipped: SkipCounts,
    /// The decoder's counters (packets, decoded, malformed, ignored, frames, points).
    pub counters: DecodeCounters,
}

/// Decodes the capture at `path` and hands each frame to `on_frame` as soon as it closes (the
/// frame in progress at the end of the file last). Each datagram's pcap record time is its host
/// time on both clocks ([`HostTime::both`]: intervals and the published `host_ns`). Memory does not grow with the file: one frame in progress, the
/// reassembler's slots, the read buffer.
///
/// Two sensors must never be mixed into one frame: without `opts.source`, the first source
/// that sends a data packet of the model (decoded or damaged, not ignored) fixes the stream's
/// source; a data packet from another source stops decoding with
/// [`OfflineError::MixedSources`] (listing every source in the rest of the file, up to
/// [`MAX_LISTED_SOURCES`]) before it reaches the decoder. Other traffic from other hosts (PTP,
/// mDNS, DHCP, anything the model's decoder ignores) is counted `ignored` and decoding goes on.
///
/// # Errors
/// [`OfflineError::Config`] for an invalid configuration; [`OfflineError::Io`] /
/// [`OfflineError::Pcap`] when the file cannot be read; [`OfflineError::MixedSources`];
/// [`OfflineError::Output`] when `on_frame` fails (decoding stops there).
pub fn decode_pcap_each<F>(
    path: &Path,
    cfg: &SensorConfig,
    opts: &DecodeOptions,
    on_frame: F,
) -> Result<DecodeSummary, OfflineError>
where
    F: FnMut(Frame) -> std::io::Result<()>,
{
    decode_pcap_each_with_progress(path, cfg, opts, on_frame, |_| {})
}

/// [`decode_pcap_each`], also calling `on_progress` with the bytes of the file read so far
/// each time that number grows (every 64 KiB), for a progress bar.
///
/// # Errors
/// As [`decode_pcap_each`].
pub fn decode_pcap_each_with_progress<F, P>(
    path: &Path,
    cfg: &SensorConfig,
    opts: &DecodeOptions,
    mut on_frame: F,
    mut on_progress: P,
) -> Result<DecodeSummary, OfflineError>
where
    F: FnMut(Frame) -> std::io::Result<()>,
    P: FnMut(u64),
{
    let mut frames = PcapFrames::open(path, cfg, opts)?;
    let mut reported = 0;
    while let Some(f) = frames.next() {
        // Progress in 64 KiB steps (a call per record would cost more than it tells).
        let read = frames.bytes_read() & !0xffff;
        if read != reported {
            reported = read;
            on_progress(reported);
        }
        on_frame(f?).map_err(OfflineError::Output)?;
    }
    if frames.bytes_read() != reported {
        on_progress(frames.bytes_read());
    }
    Ok(frames.summary())
}

/// The frames of a capture, pulled one at a time as each closes (the frame in progress at the
/// end of the file last): [`decode_pcap_each`] as an iterator, for callers that cannot take a
/// callback (a Python generator). Same rules, same errors, same memory bound; after an error
/// the iterator ends.
pub struct PcapFrames {
    path: PathBuf,
    port: Option<u16>,
    reader: CaptureReader,
    pipeline: ScanPipeline,
    /// An empty copy of the pipeline that tells whether a datagram from another source is a
    /// data packet of this model (it would be decoded or found damaged) or foreign traffic
    /// (PTP, mDNS, DHCP...: ignored, which leaves a pipeline untouched).
    probe: ScanPipeline,
    /// The stream's source: the first one that sends data packets.
    source: Option<IpAddr>,
    out: Vec<Frame>,
    ready: std::collections::VecDeque<Frame>,
    /// The end of the file was reached (and the frame in progress flushed) or an error ended
    /// the iteration.
    done: bool,
}

impl std::fmt::Debug for PcapFrames {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PcapFrames")
            .field("path", &self.path)
            .field("records", &self.reader.records())
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl PcapFrames {
    /// Opens the capture at `path` for decoding with `cfg` (its calibration read now) and
    /// `opts`.
    ///
    /// # Errors
    /// [`OfflineError::Config`] for an invalid configuration or calibration;
    /// [`OfflineError::Io`] / [`OfflineError::Pcap`] when the file cannot be opened or is not
    /// a capture.
    pub fn open(
        path: &Path,
        cfg: &SensorConfig,
        opts: &DecodeOptions,
    ) -> Result<Self, OfflineError> {
        let pipeline = crate::calibration::pipeline_with_options(cfg, opts.pipeline)?;
        let reader = CaptureReader::open(
            path,
            DatagramFilter {
                port: opts.port,
                source: opts.source,
            },
        )?;
        Ok(PcapFrames {
            path: path.to_path_buf(),
            port: opts.port,
            reader,
            probe: pipeline.clone(),
            pipeline,
            source: None,
            out: Vec::new(),
            ready: std::collections::VecDeque::new(),
            done: false,
        })
    }

    /// Takes the next frames' point buffers from `source` (e.g. buffers a consumer is done
    /// with) instead of allocating them.
    pub fn set_buffer_source(&mut self, source: std::sync::Arc<dyn BufferSource>) {
        self.pipeline.set_buffer_source(source);
    }

    /// Bytes of the file read so far.
    pub fn bytes_read(&self) -> u64 {
        self.reader.bytes_read()
    }

    /// What was read and decoded so far (all of it once the iterator ended).
    pub fn summary(&self) -> DecodeSummary {
        DecodeSummary {
            records: self.reader.records(),
            datagrams: self.reader.datagrams(),
            skipped: *self.reader.skip_counts(),
            counters: *self.pipeline.counters(),
        }
    }

    /// Reads datagrams until a frame closes or the file ends.
    fn fill(&mut self) -> Result<(), OfflineError> {
        while self.ready.is_empty() && !self.done {
            let Some(d) = self.reader.next_datagram() else {
                self.pipeline.flush(&mut self.out);
                self.ready.extend(self.out.drain(..));
                self.done = true;
                break;
            };
            let d = d?;
            match self.source {
                None => {
                    let ignored = self.pipeline.counters().ignored;
                    // The record time is both the interval clock and the stamp clock offline.
                    self.pipeline
                        .push(d.payload, HostTime::both(d.ts_ns), &mut self.out);
                    if self.pipeline.counters().ignored == ignored {
                        self.source = Some(d.src_ip);
                    }
                }
                Some(first) if first != d.src_ip && !is_ignored(&self.probe, d.payload) => {
                    let mut sources = vec![first, d.src_ip];
                    for d in self.reader.by_ref().map_while(Result::ok) {
                        if sources.len() >= MAX_LISTED_SOURCES {
                            break;
                        }
                        if !sources.contains(&d.src_ip) {
                            sources.push(d.src_ip);
                        }
                    }
                    return Err(OfflineError::MixedSources {
                        path: self.path.clone(),
                        port: self.port,
                        sources,
                    });
                }
                Some(_) => {
                    self.pipeline
                        .push(d.payload, HostTime::both(d.ts_ns), &mut self.out);
                }
            }
            self.ready.extend(self.out.drain(..));
        }
        Ok(())
    }
}

impl Iterator for PcapFrames {
    type Item = Result<Frame, OfflineError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Err(e) = self.fill() {
            self.done = true;
            self.ready.clear();
            return Some(Err(e));
        }
        self.ready.pop_front().map(Ok)
    }
}

/// Whether `pipeline` (an empty one) counts `payload` as `ignored`: not a data packet of its
/// model (foreign traffic on the port, a position or DIFOP packet).
fn is_ignored(pipeline: &ScanPipeline, payload: &[u8]) -> bool {
    let mut p = pipeline.clone();
    let mut out = Vec::new();
    p.push(payload, HostTime::both(0), &mut out);
    p.counters().ignored == 1
}

/// Decodes a capture with default [`PipelineOptions`] into a `Vec` of frames (see
/// [`decode_pcap_each`], which streams them): every UDP datagram (to `udp_port` only, if
/// given) is pushed with its record time as host time; the frame in progress is flushed at the
/// end of the file.
///
/// # Errors
/// As [`decode_pcap_each`].
pub fn decode_pcap(
    path: &Path,
    cfg: &SensorConfig,
    udp_port: Option<u16>,
) -> Result<(Vec<Frame>, DecodeCounters), OfflineError> {
    decode_pcap_with_options(path, cfg, udp_port, PipelineOptions::default())
}

/// [`decode_pcap`] with explicit [`PipelineOptions`]: a thin wrapper collecting the frames of
/// [`decode_pcap_each`].
///
/// # Errors
/// As [`decode_pcap_each`].
pub fn decode_pcap_with_options(
    path: &Path,
    cfg: &SensorConfig,
    udp_port: Option<u16>,
    opts: PipelineOptions,
) -> Result<(Vec<Frame>, DecodeCounters), OfflineError> {
    let mut frames = Vec::new();
    let opts = DecodeOptions {
        port: udp_port,
        source: None,
        pipeline: opts,
    };
    let summary = decode_pcap_each(path, cfg, &opts, |f| {
        frames.push(f);
        Ok(())
    })?;
    Ok((frames, summary.counters))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pcapng_time_stamp_resolutions() {
        let i = |tsresol, tsoffset_s| Interface {
            link: None,
            tsresol,
            tsoffset_s,
        };
        assert_eq!(i(6, 0).ns(1_500_000), 1_500_000_000);
        assert_eq!(i(9, 0).ns(1_500_000_001), 1_500_000_001);
        assert_eq!(i(3, 0).ns(7), 7_000_000);
        assert_eq!(i(12, 0).ns(5_000_123_456), 5_000_123);
        // 2^-10 s units: 1024 units = 1 s.
        assert_eq!(i(0x80 | 10, 0).ns(2048), 2_000_000_000);
        assert_eq!(i(6, 100).ns(1), 100_000_001_000);
        assert_eq!(i(0, 0).ns(u64::MAX), u64::MAX, "saturates");
        assert_eq!(i(0xff, 0).ns(u64::MAX), 0, "2^-127 s units");
    }

    #[test]
    fn reads_the_vlp16_capture_and_reports_missing_files() {
        let path = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../shared/data/velodyne/vlp16/vlp16_strongest_prodid0x21_with_position_pkts.pcap"
        ));
        let mut it = udp_payloads(path).unwrap();
        let all: Vec<UdpDatagram> = it.by_ref().map(Result::unwrap).collect();
        assert_eq!(all.len(), 100);
        assert_eq!((it.records(), it.datagrams(), it.skipped()), (100, 100, 0));
        assert_eq!(
            all.iter()
                .filter(|d| d.dst_port == 2368 && d.payload.len() == 1206)
                .count(),
            84
        );
        // The position packets claim 1234 bytes of IPv4 in 540: cut at the record's end.
        assert_eq!(
            all.iter()
                .filter(|d| d.dst_port == 8308 && d.payload.len() == 512)
                .count(),
            16
        );
        assert!(all.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns));
        let mut only = CaptureReader::open(
            path,
            DatagramFilter {
                port: Some(8308),
                source: None,
            },
        )
        .unwrap();
        assert_eq!(only.by_ref().count(), 16);
        assert_eq!(
            *only.skip_counts(),
            SkipCounts {
                wrong_port: 84,
                ..SkipCounts::default()
            }
        );
        assert!(matches!(
            udp_payloads(Path::new("/nonexistent.pcap")),
            Err(OfflineError::Io { .. })
        ));
        let not_pcap = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"));
        assert!(matches!(
            udp_payloads(not_pcap),
            Err(OfflineError::Pcap { .. })
        ));
    }
}
