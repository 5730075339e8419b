//! Sans-IO IPv4 and IPv6 reassembly: fragments in, whole datagrams out. One implementation for
//! both families: they differ only in the key and the size limit.
//!
//! Ouster lidar datagrams (3–25 KB) exceed a 1500-byte MTU, so they arrive as IP fragments and
//! only the first carries the UDP header. The XDP program steers all of a sensor's fragments into
//! AF_XDP (see `ebpf/src/main.rs`); this module puts them back together.
//!
//! # Design
//! - **RFC 791 section 3.2 / RFC 8200 section 4.5 semantics.** An IPv4 datagram is identified
//!   by (source, destination, protocol, identification), an IPv6 packet by (source, destination,
//!   32-bit identification) ([`FragmentKey`], whose `protocol` is 0 for IPv6). The fragment
//!   offset is in 8-byte units, every fragment but the last (MF / M clear) carries a multiple of
//!   8 bytes, and the datagram is complete when the last fragment has been seen and every byte
//!   before its end has arrived. The reassembled payload starts with the header named by the
//!   offset-0 fragment ([`Fragment::protocol`]: IPv4's protocol, IPv6's fragment header next
//!   header; RFC 8200: only the offset-0 fragment's value is used), which for IPv6 may be
//!   further extension headers that [`Reassembled::udp`] walks. IPv6 atomic fragments (offset
//!   0, M clear, RFC 6946) never come here: [`crate::net`] parses them as whole packets.
//! - **Size limit**: IPv4's payload is at most 65,515 bytes ([`MAX_PAYLOAD_LEN`]); IPv6's
//!   fragmentable part at most 65,527 ([`MAX_IPV6_PAYLOAD_LEN`]: a 65,535-byte payload length
//!   less the fragment header; the unfragmentable headers' length is not subtracted), and a
//!   fragment ending beyond the limit fails its datagram (RFC 8200: "must be discarded").
//! - **Bitmap of 8-byte blocks** (the "bit table" of RFC 791's reassembly procedure, rather than
//!   RFC 815 hole descriptors): one bit per block, 8,190 blocks cover the largest payload. It
//!   makes overlap detection exact and O(words), needs no per-fragment list, and cannot be made to
//!   grow by a hostile sender.
//! - **Overlaps drop the whole datagram** (the rule RFC 5722 made mandatory for IPv6, applied to
//!   IPv4 as Linux does; RFC 8200 section 4.5 allows dropping an exact duplicate alone, and this
//!   module drops its datagram like any overlap, for both families): a fragment touching any byte already received fails the datagram. An
//!   exact re-send (every byte already received and equal) is counted as a `duplicate`, anything
//!   else as an `overlap`; both drop the datagram. A failed datagram keeps its slot, marked
//!   failed, until its timeout, so its remaining fragments are dropped (`dropped_fragments`)
//!   instead of starting a new reassembly that could only time out.
//! - **Bounded memory, no allocation per packet.** [`Reassembler::new`] allocates every slot
//!   (payload buffer of `max_payload_len` bytes plus a 1 KiB bitmap) up front; `push` only copies
//!   into them. With the default 16 slots that is about 1 MiB.
//! - **Timeout** from the first fragment of a datagram (RFC 791's timer; Linux `ipfrag_time`), in
//!   the caller's clock (ns). Expiry happens in [`Reassembler::poll_timeout`] and lazily in
//!   `push` when a key or a slot is needed.
//! - **Too many datagrams at once**: when every slot is busy and none has expired, the oldest
//!   datagram in progress is dropped to make room (`too_many`). For a sensor stream the oldest
//!   incomplete datagram is the one least likely to complete.
//!
//! Every failure is counted in [`ReassemblyCounters`] and returned as a [`FragmentError`]; no
//! input can panic or index out of bounds (all slicing goes through `get`).
//!
//! References: RFC 791 (IPv4, section 3.2 "Fragmentation and Reassembly"), RFC 815 (IP datagram
//! reassembly algorithms), RFC 8200 (IPv6, section 4.5 "Fragment Header"), RFC 5722 (handling
//! of overlapping IPv6 fragments), RFC 6946 (atomic fragments), Linux `net/ipv4/ip_fragment.c`
//! and `net/ipv6/reassembly.c` (behaviour on overlaps, limits and timeouts).
#![forbid(unsafe_code)]

use std::net::{IpAddr, Ipv4Addr};

use crate::net::{IpPacket, NetError, UdpDatagram};

/// Largest IPv4 payload: the 16-bit total length (65,535 bytes) minus the minimal 20-byte header.
pub const MAX_PAYLOAD_LEN: usize = 65_535 - 20;

/// Largest IPv6 fragmentable part: the 16-bit payload length (65,535 bytes) minus the 8-byte
/// fragment header (RFC 8200 section 4.5). The largest payload a [`Reassembler`] holds.
pub const MAX_IPV6_PAYLOAD_LEN: usize = 65_535 - 8;

/// Bytes per fragment-offset unit (RFC 791: the offset field counts 8-octet blocks).
pub const FRAGMENT_BLOCK: usize = 8;

/// Default reassembly timeout: 1 s (ns), the same window the XDP program tracks a datagram's
/// fragments for (`lidarxdp_common::FRAG_TRACK_NS`).
pub const DEFAULT_TIMEOUT_NS: u64 = lidarxdp_common::FRAG_TRACK_NS;

/// Default number of datagrams reassembled at the same time.
pub const DEFAULT_MAX_DATAGRAMS: usize = 16;

const BLOCKS: usize = MAX_IPV6_PAYLOAD_LEN.div_ceil(FRAGMENT_BLOCK);
const BITMAP_WORDS: usize = BLOCKS.div_ceil(64);

/// Identity of one datagram: RFC 791's (source, destination, protocol, identification) for
/// IPv4, RFC 8200's (source, destination, identification) for IPv6 (`protocol` 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FragmentKey {
    /// Source address.
    pub src_ip: IpAddr,
    /// Destination address.
    pub dst_ip: IpAddr,
    /// Identification: IPv4's 16-bit field, IPv6's 32-bit one (host order).
    pub id: u32,
    /// IPv4 protocol number (17 = UDP); 0 for IPv6, whose key has none.
    pub protocol: u8,
}

impl Default for FragmentKey {
    /// 0.0.0.0 to 0.0.0.0, id 0, protocol 0 (a free slot's key).
    fn default() -> Self {
        Self {
            src_ip: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            dst_ip: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            id: 0,
            protocol: 0,
        }
    }
}

impl FragmentKey {
    /// The largest payload the key's family allows: [`MAX_PAYLOAD_LEN`] for IPv4,
    /// [`MAX_IPV6_PAYLOAD_LEN`] for IPv6, bytes.
    pub fn max_payload_len(&self) -> usize {
        match self.src_ip {
            IpAddr::V4(_) => MAX_PAYLOAD_LEN,
            IpAddr::V6(_) => MAX_IPV6_PAYLOAD_LEN,
        }
    }
}

/// One IPv4 or IPv6 fragment, as parsed by [`crate::net::parse_ip`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fragment<'a> {
    /// Datagram the fragment belongs to.
    pub key: FragmentKey,
    /// The header the payload starts with on the offset-0 fragment: IPv4's protocol (equal to
    /// `key.protocol`), IPv6's fragment header next header (17 = UDP, or an extension header
    /// of the fragmentable part). Only the offset-0 fragment's value is used.
    pub protocol: u8,
    /// Offset of `payload` in the datagram's payload (IPv6: its fragmentable part), bytes
    /// (fragment offset field × 8).
    pub offset: u16,
    /// More-fragments flag: clear on the last fragment.
    pub more_fragments: bool,
    /// The fragment's data (for the first fragment it starts with the UDP header, or IPv6
    /// extension headers before it).
    pub payload: &'a [u8],
}

impl<'a> Fragment<'a> {
    /// The fragment view of `packet`, or `None` when it is a whole datagram (offset 0, MF clear;
    /// an IPv6 atomic fragment).
    pub fn from_ip(packet: &IpPacket<'a>) -> Option<Self> {
        let protocol = match packet.src_ip {
            IpAddr::V4(_) => packet.protocol,
            IpAddr::V6(_) => 0,
        };
        packet.is_fragment().then_some(Fragment {
            key: FragmentKey {
                src_ip: packet.src_ip,
                dst_ip: packet.dst_ip,
                id: packet.id,
                protocol,
            },
            protocol: packet.protocol,
            offset: packet.frag_offset,
            more_fragments: packet.more_fragments,
            payload: packet.payload,
        })
    }
}

/// Limits of a [`Reassembler`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReassemblyConfig {
    /// Datagrams reassembled at the same time (slots); at least 1. Default
    /// [`DEFAULT_MAX_DATAGRAMS`].
    pub max_datagrams: usize,
    /// Largest reassembled payload in bytes; at most [`MAX_IPV6_PAYLOAD_LEN`] (the default).
    /// A fragment ending beyond it, or beyond its family's limit
    /// ([`FragmentKey::max_payload_len`]), fails its datagram (`too_big`).
    pub max_payload_len: usize,
    /// Time from a datagram's first fragment (in arrival order) after which an incomplete
    /// datagram is dropped (`timed_out`), ns. Default [`DEFAULT_TIMEOUT_NS`].
    pub timeout_ns: u64,
}

impl Default for ReassemblyConfig {
    fn default() -> Self {
        Self {
            max_datagrams: DEFAULT_MAX_DATAGRAMS,
            max_payload_len: MAX_IPV6_PAYLOAD_LEN,
            timeout_ns: DEFAULT_TIMEOUT_NS,
        }
    }
}

/// The IP reassembly counters of one (interface, queue): `lidarxdp_reassembly_*{iface,queue}`.
pub const REASSEMBLY_COUNTERS: crate::counters::Group = crate::counters::Group {
    name: "reassembly",
    labels: &["iface", "queue"],
};

crate::counter_set! {
    /// What the reassembler did, cumulative since it was created. Every fragment pushed ends
    /// up in exactly one outcome: part of a `completed` datagram, part of a
    /// `timed_out`/`too_many` one, the cause of a failure (`overlaps`, `duplicates`, `too_big`,
    /// `malformed`), part of a datagram failed by such a cause, or `dropped_fragments`.
    pub struct ReassemblyCounters in REASSEMBLY_COUNTERS;
    shared
    /// Shared with other threads (relaxed atomics written by the capture thread once per burst).
    pub struct SharedReassemblyCounters;
    {
        /// Whole datagrams passed by mistake are not counted.
        fragments: Counter "fragments" "IP fragments handed to reassembly.",
        completed: Counter "datagrams" "Datagrams reassembled.",
        completed_bytes: Counter "bytes" "IP payload bytes of the reassembled datagrams.",
        timed_out: Counter "datagrams" "Datagrams that timed out incomplete.",
        /// A fragment overlapped bytes already received with other data (or only partly
        /// covered received bytes).
        overlaps: Counter "datagrams" "Datagrams failed by overlapping fragments.",
        /// A fragment was an exact duplicate of bytes already received.
        duplicates: Counter "datagrams" "Datagrams failed by duplicate fragments.",
        /// A fragment ended beyond `max_payload_len` or its family's limit.
        too_big: Counter "datagrams" "Datagrams larger than the limit.",
        /// Dropped oldest first to make room when all slots were busy.
        too_many: Counter "datagrams" "Datagrams beyond the in-flight limit.",
        /// An offset that is not a multiple of 8, a non-last fragment whose length is zero or
        /// not a multiple of 8, or a fragment disagreeing with the end set by the last fragment.
        malformed: Counter "datagrams" "Datagrams failed by a malformed fragment.",
        dropped_fragments: Counter "fragments" "Fragments dropped because their datagram had already failed.",
    }
    derived {
        failed: Counter "datagrams" "Datagrams whose reassembly failed." = |r: &ReassemblyCounters| r.failed(),
    }
}

impl ReassemblyCounters {
    /// Datagrams that failed for any reason (everything but `completed`).
    pub fn failed(&self) -> u64 {
        self.timed_out
            + self.overlaps
            + self.duplicates
            + self.too_big
            + self.too_many
            + self.malformed
    }
}

/// Why a pushed fragment did not advance a reassembly. Each is counted in
/// [`ReassemblyCounters`] (except [`FragmentError::NotAFragment`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FragmentError {
    /// Offset 0 with MF clear: a whole datagram, nothing to reassemble. Not counted.
    #[error("not a fragment (offset 0, MF clear)")]
    NotAFragment,
    /// The fragment overlaps bytes already received; the datagram was dropped (`overlaps`).
    #[error("fragment [{offset}, {end}) overlaps data already received; datagram dropped")]
    Overlap {
        /// Fragment start, bytes.
        offset: usize,
        /// Fragment end (exclusive), bytes.
        end: usize,
    },
    /// The fragment repeats bytes already received exactly; the datagram was dropped
    /// (`duplicates`).
    #[error("fragment [{offset}, {end}) is a duplicate; datagram dropped")]
    Duplicate {
        /// Fragment start, bytes.
        offset: usize,
        /// Fragment end (exclusive), bytes.
        end: usize,
    },
    /// The fragment ends beyond the configured maximum payload (`too_big`).
    #[error("fragment ends at byte {end}, beyond the {max}-byte limit; datagram dropped")]
    TooBig {
        /// Fragment end (exclusive), bytes.
        end: usize,
        /// `max_payload_len`.
        max: usize,
    },
    /// An offset that is not a multiple of 8, or a non-last fragment of zero length or a
    /// length that is not a multiple of 8 (`malformed`).
    #[error(
        "fragment at offset {offset} with {len} bytes is misaligned (offsets and non-last lengths are multiples of 8); datagram dropped"
    )]
    Misaligned {
        /// Fragment offset, bytes.
        offset: usize,
        /// Fragment payload length, bytes.
        len: usize,
    },
    /// The fragment contradicts the datagram's end: it extends past the end set by the last
    /// fragment, or it is a last fragment ending before data already received or at a different
    /// end than an earlier last fragment (`malformed`).
    #[error("fragment ending at {end} contradicts the datagram end {total}; datagram dropped")]
    Inconsistent {
        /// Fragment end (exclusive), bytes.
        end: usize,
        /// The end already known (from the last fragment, or the highest end received).
        total: usize,
    },
    /// The datagram had already failed; the fragment was dropped (`dropped_fragments`).
    #[error("datagram already failed; fragment dropped")]
    DatagramFailed,
}

/// A reassembled datagram, borrowed from the reassembler until the next `push`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reassembled<'a> {
    /// The datagram's identity.
    pub key: FragmentKey,
    /// The header `payload` starts with (the offset-0 fragment's [`Fragment::protocol`]).
    pub protocol: u8,
    /// The whole IPv4 payload, or IPv6 fragmentable part (for UDP: the 8-byte UDP header
    /// followed by the UDP payload, after any IPv6 extension headers).
    pub payload: &'a [u8],
    /// Number of fragments it was assembled from.
    pub fragments: u32,
}

impl<'a> Reassembled<'a> {
    /// The datagram as UDP, with [`crate::net::parse_udp`], the parser of
    /// [`crate::net::parse_udp_frame`]: the UDP length field must be at least 8 and fit in the
    /// payload (the UDP checksum is not verified). An IPv6 payload's extension headers are
    /// walked first with [`crate::net::walk_ipv6_chain`] (no hop-by-hop, no fragment header).
    ///
    /// # Errors
    /// [`NetError::NotUdp`], [`NetError::Truncated`] in the UDP or an extension header,
    /// [`NetError::BadUdpLength`], [`NetError::BadExtHeader`], [`NetError::TooManyExtHeaders`].
    pub fn udp(&self) -> Result<UdpDatagram<'a>, NetError> {
        let (protocol, payload) = match self.key.src_ip {
            IpAddr::V4(_) => (self.protocol, self.payload),
            IpAddr::V6(_) => {
                let chain = crate::net::walk_ipv6_chain(self.protocol, self.payload, false)?;
                if chain.fragment.is_some() {
                    return Err(NetError::BadExtHeader(crate::net::IPPROTO_FRAGMENT));
                }
                (chain.next_header, chain.rest)
            }
        };
        crate::net::parse_udp(self.key.src_ip, self.key.dst_ip, protocol, payload, false)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Free,
    Active,
    Failed,
}

struct Slot {
    state: State,
    key: FragmentKey,
    /// The offset-0 fragment's [`Fragment::protocol`], once it has arrived.
    protocol: u8,
    /// Arrival time of the first fragment, caller's clock (ns).
    first_ns: u64,
    /// End of the datagram once the last fragment (MF clear) has arrived.
    total: Option<usize>,
    /// Highest fragment end received so far.
    max_end: usize,
    /// Bytes received (fragments never overlap, so this is the covered length).
    received: usize,
    /// Fragments accepted.
    fragments: u32,
    /// One bit per 8-byte block received.
    bitmap: [u64; BITMAP_WORDS],
    /// Payload bytes, `max_payload_len` long.
    buf: Box<[u8]>,
}

impl Slot {
    fn reset(&mut self, key: FragmentKey, now_ns: u64) {
        self.state = State::Active;
        self.key = key;
        self.protocol = key.protocol;
        self.first_ns = now_ns;
        self.total = None;
        self.max_end = 0;
        self.received = 0;
        self.fragments = 0;
        self.bitmap = [0; BITMAP_WORDS];
    }
}

/// (word index, bit mask) pairs covering blocks `[b0, b1)`; empty when `b1 <= b0`.
fn block_masks(b0: usize, b1: usize) -> impl Iterator<Item = (usize, u64)> {
    let last = b1.saturating_sub(1);
    let words = if b1 > b0 {
        b0 / 64..last / 64 + 1
    } else {
        0..0
    };
    words.map(move |w| {
        let lo = if w == b0 / 64 { b0 % 64 } else { 0 };
        let hi = if w == last / 64 { last % 64 + 1 } else { 64 };
        // 1 <= hi - lo <= 64, so the shift is in 0..=63.
        (w, (u64::MAX >> (64 - (hi - lo))) << lo)
    })
}

/// Reassembles IPv4 and IPv6 fragments into datagrams with bounded memory; see the module docs.
pub struct Reassembler {
    cfg: ReassemblyConfig,
    slots: Vec<Slot>,
    counters: ReassemblyCounters,
}

impl Reassembler {
    /// Allocates all `cfg.max_datagrams` slots (`max_datagrams` is raised to 1 and
    /// `max_payload_len` lowered to [`MAX_IPV6_PAYLOAD_LEN`] if out of range).
    pub fn new(cfg: ReassemblyConfig) -> Self {
        let cfg = ReassemblyConfig {
            max_datagrams: cfg.max_datagrams.max(1),
            max_payload_len: cfg.max_payload_len.min(MAX_IPV6_PAYLOAD_LEN),
            timeout_ns: cfg.timeout_ns,
        };
        let slots = (0..cfg.max_datagrams)
            .map(|_| Slot {
                state: State::Free,
                key: FragmentKey::default(),
                protocol: 0,
                first_ns: 0,
                total: None,
                max_end: 0,
                received: 0,
                fragments: 0,
                bitmap: [0; BITMAP_WORDS],
                buf: vec![0u8; cfg.max_payload_len].into_boxed_slice(),
            })
            .collect();
        Self {
            cfg,
            slots,
            counters: ReassemblyCounters::default(),
        }
    }

    /// The limits in use (after clamping).
    pub fn config(&self) -> &ReassemblyConfig {
        &self.cfg
    }

    /// Cumulative counters.
    pub fn counters(&self) -> &ReassemblyCounters {
        &self.counters
    }

    /// Datagrams currently being reassembled (failed ones waiting for their timeout excluded).
    pub fn in_progress(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| s.state == State::Active)
            .count()
    }

    fn expired(&self, slot: &Slot, now_ns: u64) -> bool {
        now_ns.saturating_sub(slot.first_ns) >= self.cfg.timeout_ns
    }

    /// Drops every datagram whose first fragment arrived `timeout_ns` or more before `now_ns`
    /// (the caller's clock, ns: CLOCK_MONOTONIC in the daemon, the record time offline; only
    /// differences are used) (counting the incomplete ones in `timed_out`), and frees failed slots that have expired.
    /// Returns the number of datagrams timed out by this call.
    pub fn poll_timeout(&mut self, now_ns: u64) -> u64 {
        let timeout = self.cfg.timeout_ns;
        let mut n = 0;
        for s in self.slots.iter_mut() {
            if s.state != State::Free && now_ns.saturating_sub(s.first_ns) >= timeout {
                if s.state == State::Active {
                    n += 1;
                }
                s.state = State::Free;
            }
        }
        self.counters.timed_out += n;
        n
    }

    /// Index of the slot for `key`, expiring it first if it is past its timeout.
    fn find(&mut self, key: &FragmentKey, now_ns: u64) -> Option<usize> {
        let i = self
            .slots
            .iter()
            .position(|s| s.state != State::Free && s.key == *key)?;
        let slot = self.slots.get(i)?;
        if self.expired(slot, now_ns) {
            if slot.state == State::Active {
                self.counters.timed_out += 1;
            }
            if let Some(s) = self.slots.get_mut(i) {
                s.state = State::Free;
            }
            return None;
        }
        Some(i)
    }

    /// A slot for a new datagram: a free one, else an expired one, else the oldest.
    fn allocate(&mut self, key: FragmentKey, now_ns: u64) -> Option<usize> {
        let i = match self.slots.iter().position(|s| s.state == State::Free) {
            Some(i) => i,
            None => {
                let (i, oldest) = self
                    .slots
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, s)| s.first_ns)?;
                if oldest.state == State::Active {
                    if self.expired(oldest, now_ns) {
                        self.counters.timed_out += 1;
                    } else {
                        self.counters.too_many += 1;
                    }
                }
                i
            }
        };
        self.slots.get_mut(i)?.reset(key, now_ns);
        Some(i)
    }

    /// Adds one fragment received at `now_ns` (the caller's clock, ns: CLOCK_MONOTONIC in the
    /// daemon, never a wall clock that can be stepped; the record time offline). Returns the whole datagram
    /// when this fragment completed it, `Ok(None)` while it is incomplete.
    ///
    /// # Errors
    /// [`FragmentError::NotAFragment`] for a whole datagram; otherwise the reason the
    /// fragment's datagram was dropped ([`FragmentError::Overlap`], [`FragmentError::Duplicate`],
    /// [`FragmentError::TooBig`], [`FragmentError::Misaligned`],
    /// [`FragmentError::Inconsistent`]), or [`FragmentError::DatagramFailed`] when it had
    /// already been dropped. Each is counted.
    pub fn push(
        &mut self,
        frag: &Fragment<'_>,
        now_ns: u64,
    ) -> Result<Option<Reassembled<'_>>, FragmentError> {
        if frag.offset == 0 && !frag.more_fragments {
            return Err(FragmentError::NotAFragment);
        }
        self.counters.fragments += 1;
        let i = match self.find(&frag.key, now_ns) {
            Some(i) => i,
            // `allocate` only fails with zero slots, which `new` rules out.
            None => match self.allocate(frag.key, now_ns) {
                Some(i) => i,
                None => {
                    self.counters.dropped_fragments += 1;
                    return Err(FragmentError::DatagramFailed);
                }
            },
        };
        let max = self.cfg.max_payload_len.min(frag.key.max_payload_len());
        let counters = &mut self.counters;
        let Some(slot) = self.slots.get_mut(i) else {
            counters.dropped_fragments += 1;
            return Err(FragmentError::DatagramFailed);
        };
        if slot.state == State::Failed {
            counters.dropped_fragments += 1;
            return Err(FragmentError::DatagramFailed);
        }
        let offset = usize::from(frag.offset);
        let len = frag.payload.len();
        let end = offset + len;

        let failure = if end > max {
            counters.too_big += 1;
            Some(FragmentError::TooBig { end, max })
        } else if !offset.is_multiple_of(FRAGMENT_BLOCK)
            || (frag.more_fragments && (len == 0 || !len.is_multiple_of(FRAGMENT_BLOCK)))
        {
            counters.malformed += 1;
            Some(FragmentError::Misaligned { offset, len })
        } else if let Some(total) = slot.total.filter(|&t| end > t || !frag.more_fragments) {
            // Past the known end, or a second last fragment (legal only as an exact duplicate,
            // which the overlap check below would reject anyway).
            if !frag.more_fragments && end == total {
                None
            } else {
                counters.malformed += 1;
                Some(FragmentError::Inconsistent { end, total })
            }
        } else if !frag.more_fragments && end < slot.max_end {
            counters.malformed += 1;
            Some(FragmentError::Inconsistent {
                end,
                total: slot.max_end,
            })
        } else {
            None
        };
        if let Some(e) = failure {
            slot.state = State::Failed;
            return Err(e);
        }

        // Blocks [b0, b1) this fragment covers (offset is a multiple of 8, checked above).
        let (b0, b1) = (offset / FRAGMENT_BLOCK, end.div_ceil(FRAGMENT_BLOCK));
        let mut any = false;
        let mut all = true;
        for (w, mask) in block_masks(b0, b1) {
            let word = slot.bitmap.get(w).copied().unwrap_or(0);
            any |= word & mask != 0;
            all &= word & mask == mask;
        }
        if any {
            let same = all && slot.buf.get(offset..end) == Some(frag.payload);
            slot.state = State::Failed;
            return Err(if same {
                counters.duplicates += 1;
                FragmentError::Duplicate { offset, end }
            } else {
                counters.overlaps += 1;
                FragmentError::Overlap { offset, end }
            });
        }
        if let Some(dst) = slot.buf.get_mut(offset..end) {
            dst.copy_from_slice(frag.payload);
        }
        for (w, mask) in block_masks(b0, b1) {
            if let Some(word) = slot.bitmap.get_mut(w) {
                *word |= mask;
            }
        }
        slot.received += len;
        slot.fragments += 1;
        slot.max_end = slot.max_end.max(end);
        if !frag.more_fragments {
            slot.total = Some(end);
        }
        if offset == 0 {
            slot.protocol = frag.protocol;
        }
        match slot.total {
            Some(total) if slot.received == total => {
                slot.state = State::Free;
                counters.completed += 1;
                counters.completed_bytes += total as u64;
                Ok(Some(Reassembled {
                    key: slot.key,
                    protocol: slot.protocol,
                    payload: slot.buf.get(..total).unwrap_or_default(),
                    fragments: slot.fragments,
                }))
            }
            _ => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::{IPPROTO_UDP, UDP_HEADER_LEN};

    const KEY: FragmentKey = FragmentKey {
        src_ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        dst_ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
        id: 0x4242,
        protocol: IPPROTO_UDP,
    };
    const MS: u64 = 1_000_000;

    /// A UDP datagram (header + `n` payload bytes, pattern i*7) from port 7502 to 7502.
    fn udp_datagram(n: usize) -> Vec<u8> {
        let len = (UDP_HEADER_LEN + n) as u16;
        let mut v = vec![0x1d, 0x4e, 0x1d, 0x4e, (len >> 8) as u8, len as u8, 0, 0];
        v.extend((0..n).map(|i| (i * 7) as u8));
        v
    }

    /// Splits `data` like Linux does for a given MTU: chunks of `chunk` bytes (multiple of 8).
    fn split(data: &[u8], chunk: usize) -> Vec<(u16, bool, &[u8])> {
        let n = data.len().div_ceil(chunk);
        data.chunks(chunk)
            .enumerate()
            .map(|(i, c)| ((i * chunk) as u16, i + 1 < n, c))
            .collect()
    }

    fn frag(key: FragmentKey, (offset, more, payload): (u16, bool, &[u8])) -> Fragment<'_> {
        Fragment {
            key,
            protocol: key.protocol,
            offset,
            more_fragments: more,
            payload,
        }
    }

    fn small() -> Reassembler {
        Reassembler::new(ReassemblyConfig {
            max_datagrams: 2,
            max_payload_len: 4096,
            timeout_ns: 100 * MS,
        })
    }

    #[test]
    fn in_order_6472_byte_datagram_in_five_fragments() {
        // An OS1-32 LEGACY datagram: 6464-byte payload + UDP header, 1500-MTU fragments.
        let d = udp_datagram(6464);
        let parts = split(&d, 1480);
        assert_eq!(parts.len(), 5);
        assert_eq!(parts[4].2.len(), 552);
        let mut r = Reassembler::new(ReassemblyConfig::default());
        for p in &parts[..4] {
            assert_eq!(r.push(&frag(KEY, *p), 0), Ok(None));
        }
        assert_eq!(r.in_progress(), 1);
        let whole = r.push(&frag(KEY, parts[4]), 1).unwrap().unwrap();
        assert_eq!(whole.key, KEY);
        assert_eq!(whole.payload, &d[..]);
        assert_eq!(whole.fragments, 5);
        let u = whole.udp().unwrap();
        assert_eq!(
            (u.src_port, u.dst_port, u.payload.len()),
            (7502, 7502, 6464)
        );
        assert_eq!(u.payload, &d[8..]);
        assert_eq!(u.src_ip, IpAddr::from([10, 0, 0, 1]));
        assert_eq!(r.in_progress(), 0);
        assert_eq!(
            *r.counters(),
            ReassemblyCounters {
                fragments: 5,
                completed: 1,
                completed_bytes: 6472,
                ..Default::default()
            }
        );
    }

    #[test]
    fn out_of_order_and_interleaved_datagrams() {
        let a = udp_datagram(3000);
        let b = udp_datagram(2000);
        let key_b = FragmentKey { id: 7, ..KEY };
        let pa = split(&a, 1480); // 3 fragments
        let pb = split(&b, 1480); // 2 fragments
        let mut r = small();
        assert_eq!(r.push(&frag(KEY, pa[2]), 0), Ok(None)); // last first
        assert_eq!(r.push(&frag(key_b, pb[1]), 0), Ok(None));
        assert_eq!(r.push(&frag(KEY, pa[0]), 0), Ok(None));
        assert_eq!(r.in_progress(), 2);
        let got_b = r.push(&frag(key_b, pb[0]), 0).unwrap().unwrap();
        assert_eq!((got_b.key.id, got_b.payload), (7, &b[..]));
        let got_a = r.push(&frag(KEY, pa[1]), 0).unwrap().unwrap();
        assert_eq!(got_a.payload, &a[..]);
        let c = r.counters();
        assert_eq!((c.fragments, c.completed, c.failed()), (5, 2, 0));
        assert_eq!(c.completed_bytes, 3008 + 2008);
    }

    #[test]
    fn duplicate_fragment_drops_the_datagram_and_its_later_fragments() {
        let d = udp_datagram(3000);
        let p = split(&d, 1480);
        let mut r = small();
        assert_eq!(r.push(&frag(KEY, p[0]), 0), Ok(None));
        assert_eq!(
            r.push(&frag(KEY, p[0]), 1),
            Err(FragmentError::Duplicate {
                offset: 0,
                end: 1480
            })
        );
        assert_eq!(r.in_progress(), 0);
        assert_eq!(
            r.push(&frag(KEY, p[1]), 2),
            Err(FragmentError::DatagramFailed)
        );
        assert_eq!(
            r.push(&frag(KEY, p[2]), 3),
            Err(FragmentError::DatagramFailed)
        );
        // After the timeout the failed slot is freed silently (not `timed_out`).
        assert_eq!(r.poll_timeout(100 * MS), 0);
        let c = *r.counters();
        assert_eq!(
            c,
            ReassemblyCounters {
                fragments: 4,
                duplicates: 1,
                dropped_fragments: 2,
                ..Default::default()
            }
        );
        // The id can be reused afterwards.
        for x in &p[..2] {
            assert_eq!(r.push(&frag(KEY, *x), 200 * MS), Ok(None));
        }
        assert_eq!(
            r.push(&frag(KEY, p[2]), 200 * MS).unwrap().unwrap().payload,
            &d[..]
        );
    }

    #[test]
    fn overlapping_fragments_drop_the_datagram() {
        let d = udp_datagram(3000);
        let mut r = small();
        assert_eq!(r.push(&frag(KEY, (0, true, &d[..1480])), 0), Ok(None));
        // Starts inside the first fragment (offset 1472), different bytes: overlap.
        assert_eq!(
            r.push(&frag(KEY, (1472, true, &d[1480..2960])), 0),
            Err(FragmentError::Overlap {
                offset: 1472,
                end: 2952
            })
        );
        // Same range, same length, other bytes (a rewriting attempt): overlap, not duplicate.
        let key2 = FragmentKey { id: 2, ..KEY };
        let other = vec![0xAAu8; 1480];
        assert_eq!(r.push(&frag(key2, (0, true, &d[..1480])), 0), Ok(None));
        assert_eq!(
            r.push(&frag(key2, (0, true, &other)), 0),
            Err(FragmentError::Overlap {
                offset: 0,
                end: 1480
            })
        );
        let c = r.counters();
        assert_eq!((c.overlaps, c.duplicates, c.completed), (2, 0, 0));
    }

    #[test]
    fn missing_last_fragment_times_out() {
        let d = udp_datagram(3000);
        let p = split(&d, 1480);
        let mut r = small();
        assert_eq!(r.push(&frag(KEY, p[0]), 10 * MS), Ok(None));
        assert_eq!(r.push(&frag(KEY, p[1]), 20 * MS), Ok(None));
        assert_eq!(
            r.poll_timeout(109 * MS),
            0,
            "99 ms after the first fragment"
        );
        assert_eq!(r.in_progress(), 1);
        assert_eq!(
            r.poll_timeout(110 * MS),
            1,
            "100 ms after the first fragment"
        );
        assert_eq!(r.in_progress(), 0);
        assert_eq!(r.counters().timed_out, 1);
        // The late last fragment starts a new reassembly, which times out in turn.
        assert_eq!(r.push(&frag(KEY, p[2]), 150 * MS), Ok(None));
        assert_eq!(r.poll_timeout(250 * MS), 1);
        assert_eq!(r.counters().timed_out, 2);
        assert_eq!(r.counters().completed, 0);
    }

    #[test]
    fn expired_datagram_is_replaced_lazily_on_push() {
        let d = udp_datagram(3000);
        let p = split(&d, 1480);
        let mut r = small();
        assert_eq!(r.push(&frag(KEY, p[0]), 0), Ok(None));
        // Same key after the timeout, without poll_timeout: the old one is timed out, a new
        // reassembly starts and completes from its own fragments.
        for x in &p[..2] {
            assert_eq!(r.push(&frag(KEY, *x), 100 * MS), Ok(None));
        }
        assert_eq!(
            r.push(&frag(KEY, p[2]), 100 * MS).unwrap().unwrap().payload,
            &d[..]
        );
        let c = r.counters();
        assert_eq!((c.timed_out, c.completed, c.overlaps), (1, 1, 0));
    }

    #[test]
    fn too_many_concurrent_datagrams_drop_the_oldest() {
        let d = udp_datagram(3000);
        let p = split(&d, 1480);
        let mut r = small(); // 2 slots
        for (id, t) in [(1u32, 5), (2, 3), (3, 7)] {
            let key = FragmentKey { id, ..KEY };
            assert_eq!(r.push(&frag(key, p[0]), t * MS), Ok(None));
        }
        // id 2 (first fragment at 3 ms) was the oldest and was dropped for id 3.
        assert_eq!(r.counters().too_many, 1);
        assert_eq!(r.in_progress(), 2);
        for id in [1u32, 3] {
            let key = FragmentKey { id, ..KEY };
            assert_eq!(r.push(&frag(key, p[1]), 8 * MS), Ok(None));
            assert_eq!(
                r.push(&frag(key, p[2]), 8 * MS).unwrap().unwrap().payload,
                &d[..]
            );
        }
        // id 2's remaining fragments start a reassembly that cannot complete.
        let key2 = FragmentKey { id: 2, ..KEY };
        assert_eq!(r.push(&frag(key2, p[1]), 9 * MS), Ok(None));
        assert_eq!(r.poll_timeout(200 * MS), 1);
        let c = r.counters();
        assert_eq!((c.completed, c.too_many, c.timed_out), (2, 1, 1));
    }

    #[test]
    fn oversized_datagram_is_rejected() {
        let mut r = small(); // max_payload_len 4096
        let chunk = [0u8; 1480];
        assert_eq!(r.push(&frag(KEY, (0, true, &chunk)), 0), Ok(None));
        assert_eq!(
            r.push(&frag(KEY, (2960, true, &chunk)), 0),
            Err(FragmentError::TooBig {
                end: 4440,
                max: 4096
            })
        );
        assert_eq!(
            r.push(&frag(KEY, (1480, true, &chunk)), 0),
            Err(FragmentError::DatagramFailed)
        );
        // The protocol maximum with the default limit: offset 65528 + 8 bytes > 65515.
        let mut r = Reassembler::new(ReassemblyConfig::default());
        assert_eq!(
            r.push(&frag(KEY, (65528, false, &[0u8; 8])), 0),
            Err(FragmentError::TooBig {
                end: 65536,
                max: 65515
            })
        );
        assert_eq!(r.counters().too_big, 1);
        // Exactly at the limit is fine: a 65515-byte payload completes.
        let big = vec![0x5Au8; MAX_PAYLOAD_LEN];
        let key = FragmentKey { id: 9, ..KEY };
        for p in split(&big, 1480) {
            if let Some(d) = r.push(&frag(key, p), 0).unwrap() {
                assert_eq!(d.payload.len(), 65_515);
            }
        }
        assert_eq!(r.counters().completed, 1);
    }

    #[test]
    fn inconsistent_and_misaligned_fragments_are_malformed() {
        let d = [0u8; 64];
        let mut r = small();
        // A non-last fragment of 12 bytes (not a multiple of 8).
        assert_eq!(
            r.push(&frag(KEY, (0, true, &d[..12])), 0),
            Err(FragmentError::Misaligned { offset: 0, len: 12 })
        );
        // Last fragment ends at 24; a later fragment reaching 40 contradicts it.
        let k = FragmentKey { id: 2, ..KEY };
        assert_eq!(r.push(&frag(k, (16, false, &d[..8])), 0), Ok(None));
        assert_eq!(
            r.push(&frag(k, (32, true, &d[..8])), 0),
            Err(FragmentError::Inconsistent { end: 40, total: 24 })
        );
        // A last fragment ending before data already received.
        let k = FragmentKey { id: 3, ..KEY };
        assert_eq!(r.push(&frag(k, (32, true, &d[..16])), 0), Ok(None));
        assert_eq!(
            r.push(&frag(k, (8, false, &d[..8])), 0),
            Err(FragmentError::Inconsistent { end: 16, total: 48 })
        );
        assert_eq!(r.counters().malformed, 3);
        assert_eq!(
            r.push(&frag(KEY, (0, false, &d)), 0),
            Err(FragmentError::NotAFragment)
        );
        assert_eq!(r.counters().fragments, 5);
    }

    #[test]
    fn udp_view_checks_the_header() {
        let mut r = small();
        let short = [0u8; 8];
        // 16-byte datagram whose UDP length says 20.
        let mut bad = udp_datagram(8);
        bad[5] = 20;
        assert_eq!(r.push(&frag(KEY, (0, true, &bad[..8])), 0), Ok(None));
        let got = r
            .push(&frag(KEY, (8, false, &bad[8..])), 0)
            .unwrap()
            .unwrap();
        assert_eq!(
            got.udp(),
            Err(NetError::BadUdpLength {
                len: 20,
                available: 16
            })
        );
        let tcp = FragmentKey { protocol: 6, ..KEY };
        assert_eq!(r.push(&frag(tcp, (0, true, &short)), 0), Ok(None));
        let got = r.push(&frag(tcp, (8, false, &short)), 0).unwrap().unwrap();
        assert_eq!(got.udp(), Err(NetError::NotUdp(6)));
    }

    #[test]
    fn block_masks_cover_exact_ranges() {
        let v: Vec<_> = block_masks(0, 1).collect();
        assert_eq!(v, [(0, 1)]);
        let v: Vec<_> = block_masks(60, 130).collect();
        assert_eq!(v, [(0, 0xF << 60), (1, u64::MAX), (2, 0b11)]);
        assert_eq!(block_masks(5, 5).count(), 0);
        let v: Vec<_> = block_masks(64, 128).collect();
        assert_eq!(v, [(1, u64::MAX)]);
    }

    /// Random fragment streams (xorshift, fixed seed): never panics, the counters account for
    /// every fragment, and whatever completes equals the datagram that was sent.
    #[test]
    fn random_fragment_streams_never_panic_and_complete_exactly() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut rnd = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n.max(1)
        };
        let mut r = Reassembler::new(ReassemblyConfig {
            max_datagrams: 4,
            max_payload_len: 9000,
            timeout_ns: 50 * MS,
        });
        let mut completed = 0;
        for round in 0..3000u64 {
            let len = 1 + rnd(10_000) as usize;
            let d: Vec<u8> = (0..len).map(|i| (i as u64 ^ round) as u8).collect();
            let chunk = 8 * (1 + rnd(300) as usize);
            let mut parts = split(&d, chunk);
            // Shuffle, sometimes drop or duplicate, sometimes corrupt an offset.
            for i in (1..parts.len()).rev() {
                parts.swap(i, rnd(i as u64 + 1) as usize);
            }
            let mode = rnd(8);
            if mode == 0 && parts.len() > 1 {
                parts.pop();
            } else if mode == 1 {
                // Right after the original, so it arrives before the datagram can complete.
                let p = parts[0];
                parts.insert(1, p);
            } else if mode == 2 {
                parts[0].0 = parts[0].0.wrapping_add(8 * rnd(4) as u16 + 1);
            }
            let key = FragmentKey {
                id: round as u32,
                ..KEY
            };
            let now = round * MS;
            let mut done = None;
            for p in &parts {
                if let Ok(Some(got)) = r.push(&frag(key, *p), now) {
                    done = Some(got.payload.to_vec());
                }
            }
            if let Some(got) = done {
                assert_eq!(got, d, "round {round}");
                completed += 1;
            } else if mode > 2 && parts.len() > 1 && len <= 9000 {
                panic!("round {round}: clean datagram of {len} bytes did not complete");
            }
            r.poll_timeout(now);
        }
        r.poll_timeout(u64::MAX);
        let c = *r.counters();
        assert_eq!(c.completed, completed);
        assert!(c.completed > 1000, "{c:?}");
        assert!(
            c.duplicates > 0 && c.too_big > 0 && c.malformed > 0,
            "{c:?}"
        );
        assert!(c.timed_out > 0 && c.too_many > 0, "{c:?}");
        assert_eq!(r.in_progress(), 0);
    }
    const KEY6: FragmentKey = FragmentKey {
        src_ip: IpAddr::V6(std::net::Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0x201)),
        dst_ip: IpAddr::V6(std::net::Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0x100)),
        id: 0xdead_beef,
        protocol: 0,
    };

    /// Ethernet frames of `fragmentable` (starting with header `first`) sent fe80::201 ->
    /// fd00::100 in fragments of `chunk` bytes, each after a hop-by-hop header, id 0xdeadbeef.
    fn ipv6_fragment_frames(first: u8, fragmentable: &[u8], chunk: usize) -> Vec<Vec<u8>> {
        let parts = split(fragmentable, chunk);
        parts
            .iter()
            .map(|&(off, more, data)| {
                let mut f = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x86, 0xdd];
                let plen = (8 + 8 + data.len()) as u16;
                f.extend_from_slice(&[0x60, 0, 0, 0]);
                f.extend_from_slice(&plen.to_be_bytes());
                f.extend_from_slice(&[0, 64]); // hop-by-hop first
                if let (IpAddr::V6(s), IpAddr::V6(d)) = (KEY6.src_ip, KEY6.dst_ip) {
                    f.extend_from_slice(&s.octets());
                    f.extend_from_slice(&d.octets());
                }
                f.extend_from_slice(&[44, 0, 1, 4, 0, 0, 0, 0]); // -> fragment, PadN
                f.extend_from_slice(&[first, 0]);
                f.extend_from_slice(&(off | u16::from(more)).to_be_bytes());
                f.extend_from_slice(&KEY6.id.to_be_bytes());
                f.extend_from_slice(data);
                f
            })
            .collect()
    }

    #[test]
    fn ipv6_frames_reassemble_in_and_out_of_order() {
        let d = udp_datagram(6464);
        let frames = ipv6_fragment_frames(IPPROTO_UDP, &d, 1448);
        assert_eq!(frames.len(), 5);
        for order in [[0usize, 1, 2, 3, 4], [4, 2, 0, 3, 1]] {
            let mut r = Reassembler::new(ReassemblyConfig::default());
            let mut got = None;
            for (n, &i) in order.iter().enumerate() {
                let ip = crate::net::parse_ip(&frames[i]).unwrap();
                assert_eq!(crate::net::udp_of_ip(&ip), Err(NetError::Fragment));
                let f = Fragment::from_ip(&ip).unwrap();
                assert_eq!(f.key, KEY6);
                assert_eq!(f.protocol, IPPROTO_UDP);
                match r.push(&f, 0).unwrap() {
                    Some(whole) => {
                        assert_eq!(n, 4);
                        assert_eq!((whole.payload, whole.fragments), (&d[..], 5));
                        got = Some(whole.udp().unwrap().payload.to_vec());
                        let u = whole.udp().unwrap();
                        assert_eq!((u.src_ip, u.dst_ip), (KEY6.src_ip, KEY6.dst_ip));
                        assert_eq!((u.src_port, u.dst_port), (7502, 7502));
                    }
                    None => assert!(n < 4),
                }
            }
            assert_eq!(got.as_deref(), Some(&d[8..]));
            assert_eq!(
                *r.counters(),
                ReassemblyCounters {
                    fragments: 5,
                    completed: 1,
                    completed_bytes: 6472,
                    ..Default::default()
                }
            );
        }
    }

    #[test]
    fn ipv6_fragmentable_extension_headers_and_offset_zero_protocol() {
        // Fragmentable part: destination options (8 bytes) then the UDP datagram.
        let d = udp_datagram(3000);
        let mut part = vec![IPPROTO_UDP, 0, 1, 4, 0, 0, 0, 0];
        part.extend_from_slice(&d);
        let frames = ipv6_fragment_frames(crate::net::IPPROTO_DSTOPTS, &part, 1448);
        let mut r = small();
        let mut out = None;
        for (i, f) in frames.iter().enumerate().rev() {
            let ip = crate::net::parse_ip(f).unwrap();
            let mut frag = Fragment::from_ip(&ip).unwrap();
            if i > 0 {
                // RFC 8200: later fragments' next header may differ; only offset 0's counts.
                frag.protocol = 59;
            }
            if let Some(w) = r.push(&frag, 0).unwrap() {
                assert_eq!(w.protocol, crate::net::IPPROTO_DSTOPTS);
                out = Some(w.udp().map(|u| u.payload.to_vec()));
            }
        }
        assert_eq!(out, Some(Ok(d[8..].to_vec())));
        // A fragment header inside the fragmentable part is refused.
        let mut nested = vec![IPPROTO_UDP, 0, 0, 0, 0, 0, 0, 1];
        nested.extend_from_slice(&d[..1432]);
        let frames = ipv6_fragment_frames(crate::net::IPPROTO_FRAGMENT, &nested, 720);
        let mut last = None;
        for f in &frames {
            let ip = crate::net::parse_ip(f).unwrap();
            if let Some(w) = r.push(&Fragment::from_ip(&ip).unwrap(), 0).unwrap() {
                last = Some(w.udp().map(|u| u.payload.len()));
            }
        }
        assert_eq!(last, Some(Err(NetError::BadExtHeader(44))));
    }

    #[test]
    fn ipv6_overlaps_duplicates_limits_and_slots() {
        let frag6 = |offset, more, payload| Fragment {
            key: KEY6,
            protocol: IPPROTO_UDP,
            offset,
            more_fragments: more,
            payload,
        };
        let d = [0x11u8; 2960];
        let mut r = small();
        // RFC 5722: an overlap drops the packet and its later fragments.
        assert_eq!(r.push(&frag6(0, true, &d[..1448]), 0), Ok(None));
        assert_eq!(
            r.push(&frag6(1440, true, &d[..1448]), 0),
            Err(FragmentError::Overlap {
                offset: 1440,
                end: 2888
            })
        );
        assert_eq!(
            r.push(&frag6(2896, false, &d[..64]), 0),
            Err(FragmentError::DatagramFailed)
        );
        // An exact duplicate drops its packet too.
        let k2 = FragmentKey { id: 2, ..KEY6 };
        let f2 = Fragment {
            key: k2,
            ..frag6(0, true, &d[..1448])
        };
        assert_eq!(r.push(&f2, 0), Ok(None));
        assert_eq!(
            r.push(&f2, 0),
            Err(FragmentError::Duplicate {
                offset: 0,
                end: 1448
            })
        );
        // IPv4 and IPv6 with the same id and "protocol" never mix.
        let v4 = FragmentKey { id: KEY6.id, ..KEY };
        assert_ne!(v4, KEY6);
        let c = *r.counters();
        assert_eq!(
            (c.fragments, c.overlaps, c.duplicates, c.dropped_fragments),
            (5, 1, 1, 1)
        );
        // Size: IPv6's limit is 65,527 bytes (65,535 less the fragment header).
        let mut r = Reassembler::new(ReassemblyConfig::default());
        assert_eq!(r.config().max_payload_len, MAX_IPV6_PAYLOAD_LEN);
        assert_eq!(
            r.push(&frag6(65528, false, &[0u8; 8]), 0),
            Err(FragmentError::TooBig {
                end: 65536,
                max: 65527
            })
        );
        let big = vec![0x5Au8; MAX_IPV6_PAYLOAD_LEN];
        let key = FragmentKey { id: 9, ..KEY6 };
        let mut done = 0;
        for p in split(&big, 1448) {
            let f = Fragment {
                key,
                ..frag6(p.0, p.1, p.2)
            };
            if let Some(w) = r.push(&f, 0).unwrap() {
                done = w.payload.len();
            }
        }
        assert_eq!(done, 65_527);
        // Misaligned non-last fragment.
        let k3 = FragmentKey { id: 3, ..KEY6 };
        assert_eq!(
            r.push(
                &Fragment {
                    key: k3,
                    ..frag6(0, true, &d[..100])
                },
                0
            ),
            Err(FragmentError::Misaligned {
                offset: 0,
                len: 100
            })
        );
        // Too many packets at once: the oldest is dropped (2 slots).
        let mut r = small();
        for (id, t) in [(1u32, 5u64), (2, 3), (3, 7)] {
            let f = Fragment {
                key: FragmentKey { id, ..KEY6 },
                ..frag6(0, true, &d[..8])
            };
            assert_eq!(r.push(&f, t * MS), Ok(None));
        }
        assert_eq!((r.counters().too_many, r.in_progress()), (1, 2));
    }

    #[test]
    fn ipv6_truncated_fragment_frames_never_panic() {
        let d = udp_datagram(3000);
        let frames = ipv6_fragment_frames(IPPROTO_UDP, &d, 1448);
        let mut r = small();
        let mut errors = 0;
        for f in &frames {
            for n in 0..f.len() {
                match crate::net::parse_ip(&f[..n]) {
                    Ok(ip) => {
                        if let Some(fr) = Fragment::from_ip(&ip) {
                            let _ = r.push(&fr, 0);
                        }
                    }
                    Err(_) => errors += 1,
                }
            }
        }
        // Every prefix is shorter than its payload length says: all are errors.
        assert_eq!(errors, frames.iter().map(Vec::len).sum::<usize>());
        assert_eq!(r.counters().fragments, 0);
    }
}
