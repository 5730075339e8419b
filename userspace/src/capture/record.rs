//! `lidarxdp run --record-pcap FILE`: every datagram the capture threads hand to a sensor's
//! pipeline, recorded as it arrived, with its receive time, to a nanosecond pcap file
//! (docs/seeing-and-recording.md, "Recording packets: pcap").
//!
//! What is recorded: each datagram of a configured sensor (its data port and its extra port,
//! e.g. RoboSense DIFOP) that the capture thread handed to the sensor's pipeline — exactly
//! the input of the published frames. Datagrams of no sensor, refused ones (a second source on
//! a sensor configured without `source`, counter `mixed_sources`) and malformed frames are not.
//! The time of each record is the capture thread's receive time of the burst the datagram
//! came in (CLOCK_REALTIME, ns; the host time the decoder was given), so
//! `lidarxdp decode --pcap REC` gives the frames the daemon published, `--stamp host` ones
//! included.
//!
//! Link type: `LINKTYPE_ETHERNET` (1) for every backend, so one file may hold the frames of
//! several capture threads. AF_XDP delivers whole Ethernet frames (the UMEM frame): each is
//! recorded as it is, VLAN tags included. The socket backends only receive the UDP payload:
//! an Ethernet II + IPv4 (RFC 791, IHL 5, TTL 64, header checksum per RFC 1071) + UDP (RFC 768,
//! checksum 0 = none) header is synthesized with the real source address and ports; their
//! destination address is the sockets' `--bind` address (0.0.0.0 by default: the sockets do not
//! learn it), the MAC addresses are zero. An IPv4 datagram that arrived in fragments (AF_XDP)
//! is recorded reassembled, with synthesized headers and the MAC addresses of its last
//! fragment. A reassembled IPv6 datagram is recorded likewise behind Ethernet II + an IPv6
//! header (RFC 8200: version 6, hop limit 64, no extension headers, flow label 0) + UDP with its
//! checksum computed (RFC 8200 section 8.1 pseudo-header; an IPv6 UDP checksum may not be 0).
//!
//! Not blocking the capture thread: the capture thread copies each datagram into a buffer taken
//! from a preallocated pool ([`RECORD_QUEUE`] buffers of [`RECORD_BUFFER`] bytes; a larger
//! datagram grows its buffer once, which keeps the capacity) and pushes it on a bounded
//! lock-free queue (crossbeam's `ArrayQueue`); a writer thread does the I/O and gives the buffers
//! back. When the pool is empty (the disk is slower than the sensors), the datagram is dropped
//! from the recording and counted (`recording.dropped`), never from the decoder. A write error
//! ends the recording (counted in `errors`, logged once); the daemon goes on.
//!
//! Rotation (`--record-split-size MB`, `--record-split-duration S`): parts are named
//! `<stem>_<n>.<ext>` (`<ext>` the file's own extension, `pcap` when it has none), n = 0, 1, ...;
//! a part ends before the record that would make it larger than the size (a part holds at
//! least one record), or before the first record whose time is at least the duration after the
//! part's first record. Without either flag FILE itself is written.
//!
//! Privileges: [`Recorder::start`] creates the first part on the calling thread, after the
//! daemon dropped its capabilities (and switched to `--user`): every part, later ones created
//! by the writer thread included, is then created by the same identity, so a directory the
//! daemon's user cannot write fails the start-up rather than the first rotation. The writer
//! thread is started there too, and holds no capability.

use std::{
    fs::File,
    io::{self, BufWriter, Write},
    ops::RangeInclusive,
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

use crossbeam_queue::ArrayQueue;
use lidarxdp_core::net::{
    ETH_HEADER_LEN, ETHERTYPE_IPV4, ETHERTYPE_IPV6, IPPROTO_UDP, IPV4_MIN_HEADER_LEN,
    UDP_HEADER_LEN, UdpDatagram,
};
use pcap_file::{
    DataLink, Endianness, TsResolution,
    pcap::{PcapHeader, PcapPacket},
};
use std::net::{IpAddr, Ipv6Addr};

/// Buffers of the recording's pool, which is also the queue's capacity: 8,192 datagrams
/// (about 0.8 s of a 10,000 packet/s sensor set held back by a stalled disk).
pub const RECORD_QUEUE: usize = 8192;

/// Initial capacity of each pool buffer, bytes: an AF_XDP UMEM frame (2 KiB) fits.
pub const RECORD_BUFFER: usize = 2048;

/// Snap length in the pcap header, bytes (libpcap's `MAXIMUM_SNAPLEN`): a reassembled 65,535
/// byte IPv4 datagram with its Ethernet header fits.
pub const SNAPLEN: u32 = 262_144;

/// Bytes of a pcap record header (time seconds, time fraction, captured length, original
/// length; 4 bytes each), counted in a part's size.
pub const RECORD_HEADER_LEN: u64 = 16;

/// Bytes of the pcap file header, counted in a part's size.
pub const FILE_HEADER_LEN: u64 = 24;

/// Valid `--record-split-size`, MB (10^6 bytes).
pub const SPLIT_SIZE_MB: RangeInclusive<u64> = 1..=1_048_576;

/// Valid `--record-split-duration`, seconds.
pub const SPLIT_DURATION_S: RangeInclusive<u64> = 1..=604_800;

/// How long the writer thread sleeps when the queue is empty.
const WRITER_IDLE: Duration = Duration::from_millis(10);

/// Largest UDP payload a synthesized IPv4 datagram can carry: 65,535 - 20 - 8 bytes.
const MAX_UDP_PAYLOAD: usize = 65_535 - IPV4_MIN_HEADER_LEN - UDP_HEADER_LEN;

/// The recording's counters: daemon-wide, no labels (`lidarxdp_recording_*`; stats JSON
/// `recording`).
pub const RECORDING_COUNTERS: lidarxdp_core::counters::Group = lidarxdp_core::counters::Group {
    name: "recording",
    labels: &[],
};

lidarxdp_core::counter_set! {
    /// Snapshot of the `--record-pcap` counters.
    pub struct RecordingCounters in RECORDING_COUNTERS;
    shared
    /// Written by the writer thread, and by the capture threads (`dropped`).
    pub struct SharedRecordingCounters;
    {
        /// One per recorded datagram (a reassembled one counts once).
        packets: Counter "packets" "Packets written to the pcap recording.",
        /// The records' captured bytes (Ethernet frames), pcap headers excluded.
        bytes: Counter "bytes" "Packet bytes written to the pcap recording.",
        /// The pool was empty: the writer thread (the disk) was behind. The decoder got them.
        dropped: Counter "packets" "Packets left out of the recording because its queue was full (the decoder still got them).",
        /// The first part included.
        files: Counter "files" "Recording files (parts) created.",
        /// A failed create or write ends the recording.
        errors: Counter "errors" "Write errors of the recording (the first one ends it).",
    }
}

/// A validated `--record-pcap` setting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordConfig {
    /// FILE as given (the single file, or the base of the parts' names).
    pub path: PathBuf,
    /// A part ends before it would exceed this many bytes (`--record-split-size` × 10^6).
    pub split_bytes: Option<u64>,
    /// A part ends before a record this many ns after its first (`--record-split-duration`).
    pub split_ns: Option<u64>,
    /// IPv4 destination written in the headers synthesized for the socket backends, whose
    /// datagrams carry none: the `--bind` address.
    pub socket_dst: [u8; 4],
}

/// Why a recording could not be set up or went on ([`RecordConfig::new`], and the writer
/// thread's file errors).
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// `--record-pcap` names no file (empty, or ends with `/`).
    #[error("--record-pcap {}: expected a file name", path.display())]
    NotAFile {
        /// The path as given.
        path: PathBuf,
    },
    /// A split flag outside its range.
    #[error("{flag} {value}: valid range {min}..={max} ({unit})")]
    OutOfRange {
        /// The flag, e.g. `--record-split-size`.
        flag: &'static str,
        /// The value given.
        value: u64,
        /// Smallest valid value.
        min: u64,
        /// Largest valid value.
        max: u64,
        /// Unit of the values (`MB`, `seconds`).
        unit: &'static str,
    },
    /// Creating, writing or flushing a part failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The part's file.
        path: PathBuf,
        /// The system's error.
        source: io::Error,
    },
}

impl RecordConfig {
    /// Checks the flags: `path` must name a file, `split_size_mb` be in [`SPLIT_SIZE_MB`],
    /// `split_duration_s` in [`SPLIT_DURATION_S`].
    ///
    /// Errors: [`RecordError::NotAFile`], or [`RecordError::OutOfRange`] naming the flag, its
    /// value and the valid range.
    pub fn new(
        path: PathBuf,
        split_size_mb: Option<u64>,
        split_duration_s: Option<u64>,
        socket_dst: [u8; 4],
    ) -> Result<Self, RecordError> {
        if path.file_stem().is_none() || path.as_os_str().to_string_lossy().ends_with('/') {
            return Err(RecordError::NotAFile { path });
        }
        let check = |flag: &'static str,
                     v: Option<u64>,
                     r: &RangeInclusive<u64>,
                     unit: &'static str| match v {
            Some(x) if !r.contains(&x) => Err(RecordError::OutOfRange {
                flag,
                value: x,
                min: *r.start(),
                max: *r.end(),
                unit,
            }),
            _ => Ok(v),
        };
        let mb = check("--record-split-size", split_size_mb, &SPLIT_SIZE_MB, "MB")?;
        let s = check(
            "--record-split-duration",
            split_duration_s,
            &SPLIT_DURATION_S,
            "seconds",
        )?;
        Ok(Self {
            path,
            split_bytes: mb.map(|m| m * 1_000_000),
            split_ns: s.map(|s| s * 1_000_000_000),
            socket_dst,
        })
    }

    /// Whether the recording is split into parts.
    pub fn splits(&self) -> bool {
        self.split_bytes.is_some() || self.split_ns.is_some()
    }

    /// The file of part `n`: FILE itself when not splitting, else `<stem>_<n>.<ext>` beside it.
    pub fn part_path(&self, n: u64) -> PathBuf {
        if !self.splits() {
            return self.path.clone();
        }
        let stem = self
            .path
            .file_stem()
            .map_or_else(|| "recording".into(), |s| s.to_string_lossy());
        let ext = self
            .path
            .extension()
            .map_or_else(|| "pcap".into(), |s| s.to_string_lossy());
        self.path.with_file_name(format!("{stem}_{n}.{ext}"))
    }
}

/// One queued datagram: its receive time and its bytes (an Ethernet frame).
struct Entry {
    ts_ns: u64,
    data: Vec<u8>,
}

/// What the capture threads and the writer thread share.
struct Shared {
    /// Empty buffers, taken by the capture threads.
    free: ArrayQueue<Vec<u8>>,
    /// Filled buffers, in arrival order per capture thread, taken by the writer thread. Its
    /// capacity is the pool's, so a push never fails.
    full: ArrayQueue<Entry>,
    counters: SharedRecordingCounters,
    /// A write error ended the recording: the taps stop copying.
    failed: AtomicBool,
    /// Set once no capture thread pushes any more: the writer drains the queue and closes.
    stop: AtomicBool,
}

/// The capture threads' side of the recording: copies datagrams into the queue, never
/// blocking. Cheap to clone (one `Arc`).
#[derive(Clone)]
pub struct RecordTap {
    shared: Arc<Shared>,
    socket_dst: [u8; 4],
}

impl RecordTap {
    /// Queues a whole Ethernet frame (AF_XDP) received at `ts_ns`; counts it as dropped when
    /// the pool is empty.
    pub fn ethernet(&self, ts_ns: u64, frame: &[u8]) {
        self.put(ts_ns, |b| {
            b.extend_from_slice(frame);
            true
        });
    }

    /// Queues a datagram whose headers the kernel (socket backends) or the reassembler took
    /// off, received at `ts_ns`, behind synthesized Ethernet II, IPv4 and UDP headers (module
    /// documentation; `macs`: destination then source MAC address, zero when unknown). A
    /// `dst_ip` of 0.0.0.0 is replaced by the configured socket destination.
    pub fn datagram(&self, ts_ns: u64, d: &UdpDatagram<'_>, macs: &[u8; 12]) {
        self.put(ts_ns, |b| match (d.src_ip, d.dst_ip) {
            (IpAddr::V6(src), IpAddr::V6(dst)) => write_datagram_v6(b, d, src, dst, macs),
            // The socket backends' unknown destination (0.0.0.0) under an IPv6 source.
            (IpAddr::V6(src), IpAddr::V4(_)) => {
                write_datagram_v6(b, d, src, Ipv6Addr::UNSPECIFIED, macs)
            }
            (IpAddr::V4(src), dst) => {
                let dst = match dst {
                    IpAddr::V4(a) if !a.is_unspecified() => a.octets(),
                    _ => self.socket_dst,
                };
                write_datagram(b, d, src.octets(), dst, macs)
            }
        });
    }

    /// Takes a buffer, lets `fill` write the record into it (false: do not record) and queues
    /// it. Lock-free: two atomic queue operations and a copy.
    fn put(&self, ts_ns: u64, fill: impl FnOnce(&mut Vec<u8>) -> bool) {
        let s = &*self.shared;
        if s.failed.load(Ordering::Relaxed) {
            return;
        }
        let Some(mut data) = s.free.pop() else {
            s.counters.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        data.clear();
        if !fill(&mut data) {
            s.counters.dropped.fetch_add(1, Ordering::Relaxed);
            let _ = s.free.push(data);
            return;
        }
        if let Err(e) = s.full.push(Entry { ts_ns, data }) {
            // Unreachable (the queue holds every buffer of the pool); recycled anyway.
            s.counters.dropped.fetch_add(1, Ordering::Relaxed);
            let _ = s.free.push(e.data);
        }
    }
}

/// Writes Ethernet II (EtherType IPv4) + IPv4 (RFC 791: version 4, IHL 5, no options, DF clear,
/// TTL 64, protocol 17, header checksum RFC 1071) + UDP (RFC 768, checksum 0: not computed,
/// allowed over IPv4) + payload into `b`. False when the payload cannot fit one IPv4 datagram.
fn write_datagram(
    b: &mut Vec<u8>,
    d: &UdpDatagram<'_>,
    src_ip: [u8; 4],
    dst_ip: [u8; 4],
    macs: &[u8; 12],
) -> bool {
    if d.payload.len() > MAX_UDP_PAYLOAD {
        return false;
    }
    let udp_len = (UDP_HEADER_LEN + d.payload.len()) as u16;
    let total = udp_len + IPV4_MIN_HEADER_LEN as u16;
    b.extend_from_slice(macs);
    b.extend_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
    let mut ip = [0u8; IPV4_MIN_HEADER_LEN];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[8] = 64;
    ip[9] = IPPROTO_UDP;
    ip[12..16].copy_from_slice(&src_ip);
    ip[16..20].copy_from_slice(&dst_ip);
    let sum = ipv4_checksum(&ip);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    b.extend_from_slice(&ip);
    b.extend_from_slice(&d.src_port.to_be_bytes());
    b.extend_from_slice(&d.dst_port.to_be_bytes());
    b.extend_from_slice(&udp_len.to_be_bytes());
    b.extend_from_slice(&[0, 0]);
    b.extend_from_slice(d.payload);
    debug_assert_eq!(b.len(), ETH_HEADER_LEN + usize::from(total));
    true
}

/// Writes Ethernet II (EtherType IPv6) + IPv6 (RFC 8200 section 3: version 6, traffic class
/// and flow label 0, next header 17, hop limit 64) + UDP (RFC 768 with the RFC 8200 section 8.1
/// checksum, 0 sent as 0xffff) + payload into `b`. False when the payload cannot fit the 16-bit
/// payload length.
fn write_datagram_v6(
    b: &mut Vec<u8>,
    d: &UdpDatagram<'_>,
    src: Ipv6Addr,
    dst: Ipv6Addr,
    macs: &[u8; 12],
) -> bool {
    if d.payload.len() > 65_535 - UDP_HEADER_LEN {
        return false;
    }
    let udp_len = (UDP_HEADER_LEN + d.payload.len()) as u16;
    b.extend_from_slice(macs);
    b.extend_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
    b.extend_from_slice(&[0x60, 0, 0, 0]);
    b.extend_from_slice(&udp_len.to_be_bytes());
    b.extend_from_slice(&[IPPROTO_UDP, 64]);
    b.extend_from_slice(&src.octets());
    b.extend_from_slice(&dst.octets());
    let mut udp = [0u8; UDP_HEADER_LEN];
    udp[0..2].copy_from_slice(&d.src_port.to_be_bytes());
    udp[2..4].copy_from_slice(&d.dst_port.to_be_bytes());
    udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
    // Pseudo-header (source, destination, upper-layer length, next header) + UDP + payload.
    let mut sum: u64 = 0;
    let mut add = |bytes: &[u8]| {
        for w in bytes.chunks(2) {
            let hi = u64::from(w.first().copied().unwrap_or(0));
            let lo = u64::from(w.get(1).copied().unwrap_or(0));
            sum += (hi << 8) | lo;
        }
    };
    add(&src.octets());
    add(&dst.octets());
    add(&u32::from(udp_len).to_be_bytes());
    add(&[0, 0, 0, IPPROTO_UDP]);
    add(&udp);
    add(d.payload);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    let c = !(sum as u16);
    udp[6..8].copy_from_slice(&if c == 0 { 0xffff } else { c }.to_be_bytes());
    b.extend_from_slice(&udp);
    b.extend_from_slice(d.payload);
    true
}

/// The IPv4 header checksum (RFC 791 section 3.1, computed as RFC 1071 section 4.1): the
/// ones' complement of the ones' complement sum of the header's 16-bit words, the checksum
/// field taken as zero.
fn ipv4_checksum(header: &[u8; IPV4_MIN_HEADER_LEN]) -> u16 {
    let mut sum: u32 = header
        .chunks_exact(2)
        .enumerate()
        .filter(|(i, _)| *i != 5)
        .map(|(_, w)| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The byte order of the files: the pcap header's magic number tells readers which.
type Order = byteorder_slice::LittleEndian;

/// The current part and where it stands.
struct Output {
    cfg: RecordConfig,
    /// The part's file behind a 1 MiB buffer; the pcap header and records are written into it
    /// by `pcap-file` ([`PcapHeader::write_to`], [`PcapPacket::write_to`]).
    file: BufWriter<File>,
    /// Index of the current part.
    part: u64,
    /// Bytes of the current part (file header and records).
    part_bytes: u64,
    /// Time of the current part's first record (`None`: none yet).
    part_first_ns: Option<u64>,
    /// Written since the last flush.
    dirty: bool,
}

/// The writer's buffer, bytes (1 MiB): allocated once and kept across parts.
const WRITE_BUFFER: usize = 1 << 20;

/// Creates (truncating) `path` and writes a little-endian, nanosecond, Ethernet pcap header.
fn create(path: &Path) -> io::Result<BufWriter<File>> {
    let mut file = BufWriter::with_capacity(WRITE_BUFFER, File::create(path)?);
    write_header(&mut file)?;
    Ok(file)
}

/// Writes the pcap file header into `file` and flushes it: an idle recording is a valid
/// empty capture.
fn write_header(file: &mut BufWriter<File>) -> io::Result<()> {
    let header = PcapHeader {
        snaplen: SNAPLEN,
        datalink: DataLink::ETHERNET,
        ts_resolution: TsResolution::NanoSecond,
        endianness: Endianness::Little,
        ..PcapHeader::default()
    };
    header.write_to(&mut *file).map_err(io_error)?;
    file.flush()
}

fn io_error(e: pcap_file::PcapError) -> io::Error {
    match e {
        pcap_file::PcapError::IoError(e) => e,
        e => io::Error::other(e),
    }
}

impl Output {
    fn open(cfg: RecordConfig, counters: &SharedRecordingCounters) -> Result<Self, RecordError> {
        let path = cfg.part_path(0);
        let file = create(&path).map_err(|source| RecordError::Io { path, source })?;
        counters.files.fetch_add(1, Ordering::Relaxed);
        Ok(Output {
            cfg,
            file,
            part: 0,
            part_bytes: FILE_HEADER_LEN,
            part_first_ns: None,
            dirty: false,
        })
    }

    /// The path of the current part.
    fn path(&self) -> PathBuf {
        self.cfg.part_path(self.part)
    }

    /// Writes one record, starting a new part first when the current one is full.
    fn write(&mut self, e: &Entry, c: &SharedRecordingCounters) -> Result<(), RecordError> {
        let len = e.data.len() as u64;
        if let Some(first) = self.part_first_ns {
            let size = self
                .cfg
                .split_bytes
                .is_some_and(|max| self.part_bytes + RECORD_HEADER_LEN + len > max);
            let time = self
                .cfg
                .split_ns
                .is_some_and(|d| e.ts_ns.saturating_sub(first) >= d);
            if size || time {
                self.rotate(c)?;
            }
        }
        let orig_len = u32::try_from(e.data.len()).unwrap_or(u32::MAX);
        PcapPacket::new(Duration::from_nanos(e.ts_ns), orig_len, &e.data)
            .write_to::<_, Order>(&mut self.file, TsResolution::NanoSecond, SNAPLEN)
            .map_err(|err| RecordError::Io {
                path: self.path(),
                source: io_error(err),
            })?;
        self.part_first_ns.get_or_insert(e.ts_ns);
        self.part_bytes += RECORD_HEADER_LEN + len;
        self.dirty = true;
        c.packets.fetch_add(1, Ordering::Relaxed);
        c.bytes.fetch_add(len, Ordering::Relaxed);
        Ok(())
    }

    /// Flushes and closes the current part and creates the next one. The next part is
    /// written through the same buffer: a new 1 MiB buffer per part (every 27 s at 256 MB
    /// parts and 9.4 MB/s) made the daemon's resident memory saw up and down by up to 1 MiB
    /// as malloc returned the old one and the new one's pages were touched (issue 40).
    fn rotate(&mut self, c: &SharedRecordingCounters) -> Result<(), RecordError> {
        self.flush()?;
        let next = self.cfg.part_path(self.part + 1);
        let io = |source| RecordError::Io {
            path: next.clone(),
            source,
        };
        // The buffer is empty after the flush, so swapping the file under it loses nothing.
        *self.file.get_mut() = File::create(&next).map_err(io)?;
        write_header(&mut self.file).map_err(io)?;
        self.part += 1;
        self.part_bytes = FILE_HEADER_LEN;
        self.part_first_ns = None;
        c.files.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Hands what is buffered to the kernel.
    fn flush(&mut self) -> Result<(), RecordError> {
        if std::mem::take(&mut self.dirty) {
            let path = self.path();
            self.file
                .flush()
                .map_err(|source| RecordError::Io { path, source })?;
        }
        Ok(())
    }
}

/// The recording: its shared queue and the writer thread (module documentation).
pub struct Recorder {
    shared: Arc<Shared>,
    socket_dst: [u8; 4],
    thread: Option<JoinHandle<()>>,
}

impl Recorder {
    /// Creates the first part (FILE, or `<stem>_0.<ext>` when splitting), fills the pool and
    /// starts the writer thread `record-pcap`. Call it after the capabilities are dropped
    /// (module documentation).
    ///
    /// Errors: the first part cannot be created (named), or the thread cannot be spawned.
    pub fn start(cfg: RecordConfig) -> io::Result<Recorder> {
        let shared = Arc::new(Shared {
            free: ArrayQueue::new(RECORD_QUEUE),
            full: ArrayQueue::new(RECORD_QUEUE),
            counters: SharedRecordingCounters::default(),
            failed: AtomicBool::new(false),
            stop: AtomicBool::new(false),
        });
        for _ in 0..RECORD_QUEUE {
            let _ = shared.free.push(Vec::with_capacity(RECORD_BUFFER));
        }
        let socket_dst = cfg.socket_dst;
        let out = Output::open(cfg, &shared.counters).map_err(io::Error::other)?;
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("record-pcap".into())
            .spawn(move || writer(&s, out))?;
        Ok(Recorder {
            shared,
            socket_dst,
            thread: Some(thread),
        })
    }

    /// A handle for a capture thread.
    pub fn tap(&self) -> RecordTap {
        RecordTap {
            shared: self.shared.clone(),
            socket_dst: self.socket_dst,
        }
    }

    /// The counters now.
    pub fn counters(&self) -> RecordingCounters {
        self.shared.counters.snapshot()
    }

    /// Writes what is queued, flushes and closes the file, and returns the final counters.
    /// Call it once every capture thread has ended (what they queue later is not written).
    pub fn finish(mut self) -> RecordingCounters {
        self.stop_writer();
        self.counters()
    }

    fn stop_writer(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            if t.join().is_err() {
                log::error!("--record-pcap: the writer thread panicked");
            }
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.stop_writer();
    }
}

/// The writer thread: drains the queue into the file, recycles the buffers, flushes when the
/// queue runs dry, and closes once stopped and drained. The first error is logged and ends
/// the recording (the queue is still drained so nothing waits on it).
fn writer(s: &Shared, mut out: Output) {
    let mut out = Some(&mut out);
    let fail = |e: RecordError, out: &mut Option<&mut Output>| {
        log::error!("--record-pcap: {e}; the recording stops here (the daemon goes on)");
        s.counters.errors.fetch_add(1, Ordering::Relaxed);
        s.failed.store(true, Ordering::Relaxed);
        *out = None;
    };
    loop {
        // Read before draining: every push happened before `stop` was set.
        let stopping = s.stop.load(Ordering::Acquire);
        while let Some(e) = s.full.pop() {
            if let Some(o) = out.as_deref_mut()
                && let Err(err) = o.write(&e, &s.counters)
            {
                fail(err, &mut out);
            }
            let _ = s.free.push(e.data);
        }
        if let Some(o) = out.as_deref_mut()
            && let Err(err) = o.flush()
        {
            fail(err, &mut out);
        }
        if stopping {
            return;
        }
        std::thread::park_timeout(WRITER_IDLE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(path: PathBuf, mb: Option<u64>, s: Option<u64>) -> RecordConfig {
        RecordConfig::new(path, mb, s, [10, 0, 0, 1]).unwrap()
    }

    #[test]
    fn flags_out_of_range_are_refused_naming_flag_and_range() {
        let e = |path: &str, size, duration| {
            RecordConfig::new(path.into(), size, duration, [0; 4])
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            e("r.pcap", Some(0), None),
            "--record-split-size 0: valid range 1..=1048576 (MB)"
        );
        assert_eq!(
            e("r.pcap", None, Some(604_801)),
            "--record-split-duration 604801: valid range 1..=604800 (seconds)"
        );
        assert_eq!(
            e("dir/", None, None),
            "--record-pcap dir/: expected a file name"
        );
    }

    #[test]
    fn part_names() {
        let one = cfg("/tmp/x/rec.pcap".into(), None, None);
        assert_eq!(one.part_path(0), Path::new("/tmp/x/rec.pcap"));
        let split = cfg("/tmp/x/rec.pcap".into(), Some(5), None);
        assert_eq!(split.part_path(0), Path::new("/tmp/x/rec_0.pcap"));
        assert_eq!(split.part_path(12), Path::new("/tmp/x/rec_12.pcap"));
        let bare = cfg("rec".into(), None, Some(60));
        assert_eq!(bare.part_path(1), Path::new("rec_1.pcap"));
        assert_eq!(split.split_bytes, Some(5_000_000));
        assert_eq!(bare.split_ns, Some(60_000_000_000));
    }

    #[test]
    fn synthesized_headers_parse_back_with_the_projects_parser() {
        let payload: Vec<u8> = (0..1206u32).map(|i| i as u8).collect();
        let d = UdpDatagram {
            src_ip: [192, 168, 1, 201].into(),
            dst_ip: [0; 4].into(),
            src_port: 2368,
            dst_port: 2368,
            payload: &payload,
        };
        let mut b = Vec::new();
        assert!(write_datagram(
            &mut b,
            &d,
            [192, 168, 1, 201],
            [10, 0, 0, 1],
            &[0; 12]
        ));
        assert_eq!(b.len(), 14 + 20 + 8 + 1206);
        let got = lidarxdp_core::net::parse_udp_frame(&b).unwrap();
        assert_eq!(got.src_ip, IpAddr::from([192, 168, 1, 201]));
        assert_eq!(got.dst_ip, IpAddr::from([10, 0, 0, 1]));
        assert_eq!((got.src_port, got.dst_port), (2368, 2368));
        assert_eq!(got.payload, &payload[..]);
        // The header checksums to 0xffff with its checksum field (RFC 1071).
        let ip: [u8; 20] = b[14..34].try_into().unwrap();
        let sum: u32 = ip
            .chunks_exact(2)
            .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
            .sum();
        assert_eq!((sum & 0xffff) + (sum >> 16), 0xffff);
        // Too long for one IPv4 datagram: refused.
        let big = vec![0u8; MAX_UDP_PAYLOAD + 1];
        let d = UdpDatagram { payload: &big, ..d };
        b.clear();
        assert!(!write_datagram(&mut b, &d, [0; 4], [0; 4], &[0; 12]));
    }

    #[test]
    fn synthesized_ipv6_headers_parse_back_and_checksum() {
        let payload: Vec<u8> = (0..1207u32).map(|i| (i * 3) as u8).collect();
        let src: Ipv6Addr = "fe80::201".parse().unwrap();
        let dst: Ipv6Addr = "fe80::100".parse().unwrap();
        let d = UdpDatagram {
            src_ip: src.into(),
            dst_ip: dst.into(),
            src_port: 7502,
            dst_port: 7502,
            payload: &payload,
        };
        let mut b = Vec::new();
        assert!(write_datagram_v6(&mut b, &d, src, dst, &[0; 12]));
        assert_eq!(b.len(), 14 + 40 + 8 + 1207);
        assert_eq!(lidarxdp_core::net::parse_udp_frame(&b), Ok(d));
        // The RFC 8200 section 8.1 checksum: pseudo-header + UDP header + payload (odd length,
        // padded with a zero byte) sums to 0xffff.
        let mut words: Vec<u8> = Vec::new();
        words.extend_from_slice(&src.octets());
        words.extend_from_slice(&dst.octets());
        words.extend_from_slice(&(8u32 + 1207).to_be_bytes());
        words.extend_from_slice(&[0, 0, 0, 17]);
        words.extend_from_slice(&b[54..]);
        words.push(0);
        let mut sum: u64 = words
            .chunks_exact(2)
            .map(|w| u64::from(u16::from_be_bytes([w[0], w[1]])))
            .sum();
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        assert_eq!(sum, 0xffff);
        assert_ne!(&b[60..62], &[0, 0]);
    }

    /// With no writer thread draining, the pool runs dry: later packets are counted as
    /// dropped, the queued ones are written when the writer runs.
    #[test]
    fn a_full_queue_drops_from_the_recording_and_counts() {
        let dir = std::env::temp_dir().join(format!("lidarxdp-record-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("full.pcap");
        let shared = Arc::new(Shared {
            free: ArrayQueue::new(4),
            full: ArrayQueue::new(4),
            counters: SharedRecordingCounters::default(),
            failed: AtomicBool::new(false),
            stop: AtomicBool::new(false),
        });
        for _ in 0..4 {
            shared.free.push(Vec::with_capacity(16)).unwrap();
        }
        let tap = RecordTap {
            shared: shared.clone(),
            socket_dst: [0; 4],
        };
        for i in 0..10u8 {
            tap.ethernet(u64::from(i), &[i; 60]);
        }
        let c = shared.counters.snapshot();
        assert_eq!((c.packets, c.dropped), (0, 6));
        let out = Output::open(cfg(path.clone(), None, None), &shared.counters).unwrap();
        shared.stop.store(true, Ordering::Release);
        writer(&shared, out);
        let c = shared.counters.snapshot();
        assert_eq!((c.packets, c.bytes, c.dropped, c.files), (4, 240, 6, 1));
        assert_eq!(shared.free.len(), 4, "every buffer recycled");
        let mut r = pcap_file::pcap::PcapReader::new(File::open(&path).unwrap()).unwrap();
        assert_eq!(r.header().ts_resolution, TsResolution::NanoSecond);
        let mut times = Vec::new();
        while let Some(p) = r.next_packet() {
            let p = p.unwrap();
            assert_eq!(p.data.len(), 60);
            times.push(p.timestamp.as_nanos());
        }
        assert_eq!(times, [0, 1, 2, 3]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Parts end before the record that would exceed the size, or at the duration.
    #[test]
    fn rotation_by_size_and_by_duration() {
        let dir = std::env::temp_dir().join(format!("lidarxdp-rotate-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let c = SharedRecordingCounters::default();
        // 1 MB parts, 100,000-byte records: (1e6 - 24) / 100,016 = 9 records per part.
        let mut out = Output::open(cfg(dir.join("s.pcap"), Some(1), None), &c).unwrap();
        // Every part is written through the buffer the first one got (issue 40).
        let buffer = out.file.buffer().as_ptr();
        for i in 0..20u64 {
            let e = Entry {
                ts_ns: i,
                data: vec![0; 100_000],
            };
            out.write(&e, &c).unwrap();
        }
        out.flush().unwrap();
        let count = |p: &Path| {
            let mut r = pcap_file::pcap::PcapReader::new(File::open(p).unwrap()).unwrap();
            let mut n = 0;
            while let Some(p) = r.next_packet() {
                p.unwrap();
                n += 1;
            }
            n
        };
        let sizes: Vec<u32> = (0..3).map(|n| count(&out.cfg.part_path(n))).collect();
        assert_eq!(sizes, [9, 9, 2]);
        assert_eq!((out.part, out.file.buffer().as_ptr()), (2, buffer));
        assert_eq!(out.file.capacity(), WRITE_BUFFER);
        assert!(std::fs::metadata(out.cfg.part_path(0)).unwrap().len() <= 1_000_000);
        assert_eq!(c.snapshot().files, 3);
        // 2 s parts: records at 0, 1.5, 2, 3.9, 4 s.
        let mut out = Output::open(cfg(dir.join("t.pcap"), None, Some(2)), &c).unwrap();
        for ms in [0u64, 1500, 2000, 3900, 4000] {
            let e = Entry {
                ts_ns: ms * 1_000_000,
                data: vec![1; 42],
            };
            out.write(&e, &c).unwrap();
        }
        out.flush().unwrap();
        let sizes: Vec<u32> = (0..3).map(|n| count(&out.cfg.part_path(n))).collect();
        assert_eq!(sizes, [2, 2, 1]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
