//! [`XskSocket`]: an RX-only AF_XDP socket with its own UMEM.
//!
//! Setup follows `af_xdp.rst` and libxdp's `xsk_socket__create`: `socket(AF_XDP)`,
//! `XDP_UMEM_REG`, `XDP_UMEM_FILL_RING` / `XDP_UMEM_COMPLETION_RING` / `XDP_RX_RING` sizes,
//! `XDP_MMAP_OFFSETS`, mmap of the three rings at `XDP_UMEM_PGOFF_FILL_RING`,
//! `XDP_UMEM_PGOFF_COMPLETION_RING` and `XDP_PGOFF_RX_RING`, `bind(sockaddr_xdp)`, and
//! finally every frame onto the fill ring. Each bind attempt uses a fresh socket, so a
//! failed zero-copy bind or an `EBUSY` leaves no half-bound state behind.

use std::io;
use std::mem::size_of;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::{Duration, Instant};

use memmap2::{MmapOptions, MmapRaw};

use super::ring::{ConsumerRing, ProducerRing, RingPtrs};
use super::stats::{XdpStatistics, XskCounters};
use super::umem::{FrameLedger, RxDesc, Umem};
use super::{BindMode, BoundMode, UmemConfig, XskConfig, XskError};
use crate::sys::{net, sockopt, xdp};

/// An AF_XDP socket bound to one interface queue, with its UMEM and fill/RX/completion
/// rings. RX only.
///
/// Owns, and releases on drop in this order: the socket fd (closing it unbinds; the kernel
/// stops using the rings and UMEM), the three ring mappings, the UMEM mapping.
///
/// `Send` (move it to its decoder thread) but not `Sync`: one thread drives the rings.
/// Other threads read progress through [`XskSocket::counters_handle`].
pub struct XskSocket {
    fd: OwnedFd,
    rx: ConsumerRing<libc::xdp_desc>,
    fill: ProducerRing<u64>,
    /// Required by the kernel before bind; never used without a TX ring.
    _comp: ConsumerRing<u64>,
    /// Keep the ring pointers above valid; dropped after `fd`.
    _ring_maps: [MmapRaw; 3],
    umem: Umem,
    /// Boxed: keeps `XskSocket` (moved by value into the capture thread's source enum) small.
    ledger: Box<FrameLedger>,
    bound: BoundMode,
    need_wakeup: bool,
    ifname: String,
    ifindex: u32,
    queue: u32,
    counters: Arc<XskCounters>,
    /// Bound with `XDP_USE_SG`: frames longer than a chunk arrive as chains of descriptors.
    multi_buffer: bool,
    /// The chain being received (multi-buffer), across bursts.
    chain: Chain,
}

/// A multi-buffer packet being put back together from its descriptors
/// (Documentation/networking/af_xdp.rst, "Multi-Buffer Support": every descriptor but the
/// last has `XDP_PKT_CONTD` in `options`; the kernel delivers only whole packets, but a burst
/// may end inside one). The bytes are copied into `buf`, allocated once: a frame spanning
/// chunks is not contiguous in the UMEM.
#[derive(Debug, Default)]
struct Chain {
    buf: Vec<u8>,
    /// A descriptor with `XDP_PKT_CONTD` came and its packet's last has not.
    active: bool,
    /// A descriptor of the packet was invalid or the packet outgrew `max`: it is dropped.
    broken: bool,
    /// Longest packet kept, bytes.
    max: usize,
}

/// What [`Chain::push`] made of one valid descriptor's bytes.
enum ChainStep<'a> {
    /// A whole packet: the descriptor alone, or the chain it ended.
    Packet(&'a [u8]),
    /// Part of a chain; more follows.
    More,
    /// The end of a chain that was dropped (an invalid part, or too long).
    Dropped,
}

impl Chain {
    fn new(max: usize, multi_buffer: bool) -> Self {
        Self {
            buf: Vec::with_capacity(if multi_buffer { max } else { 0 }),
            max,
            ..Self::default()
        }
    }

    /// Takes one descriptor's bytes; `contd`: its `XDP_PKT_CONTD` flag.
    fn push<'a>(&'a mut self, data: &'a [u8], contd: bool) -> ChainStep<'a> {
        if !self.active && !contd {
            return ChainStep::Packet(data);
        }
        if !self.active {
            self.active = true;
            self.broken = false;
            self.buf.clear();
        }
        if !self.broken {
            if self.buf.len() + data.len() > self.max {
                self.broken = true;
            } else {
                self.buf.extend_from_slice(data);
            }
        }
        if contd {
            return ChainStep::More;
        }
        self.active = false;
        if self.broken {
            ChainStep::Dropped
        } else {
            ChainStep::Packet(&self.buf)
        }
    }

    /// An invalid descriptor: the packet it belongs to is dropped (a whole one by itself when
    /// no chain is open and it has no `XDP_PKT_CONTD`). Returns whether it ended a chain.
    fn invalid(&mut self, contd: bool) -> bool {
        if self.active || contd {
            self.broken = true;
            self.active = contd;
            return !contd;
        }
        false
    }
}

// SAFETY: the raw ring pointers point into mappings owned by this value (`_ring_maps`,
// `umem`), not into thread-local state; nothing is shared with another user-space owner, so
// moving the whole socket to another thread is sound. It is not `Sync`: the ring cursors are
// mutated through `&mut self` only.
unsafe impl Send for XskSocket {}

impl std::fmt::Debug for XskSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XskSocket")
            .field("fd", &self.fd.as_raw_fd())
            .field("ifname", &self.ifname)
            .field("ifindex", &self.ifindex)
            .field("queue", &self.queue)
            .field("bound", &self.bound)
            .field("huge_pages", &self.umem.huge())
            .field("frames_held", &self.ledger.held())
            .finish_non_exhaustive()
    }
}

impl XskSocket {
    /// Creates the socket and UMEM, binds `cfg.queue` of `cfg.ifname`, and puts every frame
    /// (up to `fill_size`) on the fill ring.
    ///
    /// With [`BindMode::Auto`] a zero-copy bind failing with `EOPNOTSUPP` or `EINVAL` is
    /// retried in copy mode (veth: always copy). A bind failing with `EBUSY` is retried with
    /// backoff for up to `cfg.bind_retry`. Needs `CAP_NET_RAW` (root); the interface is
    /// looked up in the calling thread's network namespace.
    ///
    /// # Errors
    /// [`XskError::InvalidConfig`] (bad sizes, checked first), [`XskError::NoSuchInterface`],
    /// [`XskError::MtuTooLarge`] (the interface's frames would not fit a UMEM chunk:
    /// [`check_mtu`](super::check_mtu)),
    /// [`XskError::HugePages`] ([`HugePages::Require`](super::HugePages::Require) only),
    /// [`XskError::Syscall`] naming the failing call (`socket(AF_XDP)`: `EPERM` without
    /// privileges, `EAFNOSUPPORT` without `CONFIG_XDP_SOCKETS`; `setsockopt(XDP_UMEM_REG)`:
    /// `ENOMEM`/`ENOBUFS` when pinning fails), [`XskError::Bind`] (`EBUSY` after the retries,
    /// `EINVAL` for a queue id the device lacks, `EOPNOTSUPP` for forced zero-copy).
    pub fn open(umem_cfg: &UmemConfig, cfg: &XskConfig) -> Result<Self, XskError> {
        umem_cfg.validate()?;
        let ifindex = ifindex(&cfg.ifname)?;
        let fit = super::check_mtu(&cfg.ifname, umem_cfg.frame_size)?;
        let umem = Umem::new(umem_cfg)?;
        // Frames longer than a chunk (a jumbo MTU) arrive as chains of descriptors.
        let sg = if fit.multi_buffer {
            libc::XDP_USE_SG
        } else {
            0
        };
        let wake = if cfg.need_wakeup {
            libc::XDP_USE_NEED_WAKEUP
        } else {
            0
        } | sg;
        let sg_refused = |e: XskError, mode: &'static str| match e.raw_os_error() {
            Some(libc::EOPNOTSUPP | libc::EINVAL) if fit.multi_buffer => XskError::MultiBuffer {
                ifname: cfg.ifname.clone(),
                mtu: fit.mtu,
                max_single: super::max_mtu(umem_cfg.frame_size),
                mode,
                source: io::Error::from_raw_os_error(e.raw_os_error().unwrap_or(libc::EINVAL)),
            },
            _ => e,
        };
        let (fd, rings) = match cfg.mode {
            BindMode::Copy => bind_retrying(&umem, umem_cfg, cfg, ifindex, libc::XDP_COPY | wake)
                .map_err(|e| sg_refused(e, "copy"))?,
            BindMode::ZeroCopy => {
                bind_retrying(&umem, umem_cfg, cfg, ifindex, libc::XDP_ZEROCOPY | wake)
                    .map_err(|e| sg_refused(e, "zero-copy"))?
            }
            BindMode::Auto => {
                match bind_retrying(&umem, umem_cfg, cfg, ifindex, libc::XDP_ZEROCOPY | wake) {
                    Ok(bound) => bound,
                    Err(e @ XskError::Bind { .. })
                        if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL)) =>
                    {
                        log::info!(
                            "AF_XDP {} queue {}: zero-copy unavailable ({e}); using copy mode",
                            cfg.ifname,
                            cfg.queue
                        );
                        bind_retrying(&umem, umem_cfg, cfg, ifindex, libc::XDP_COPY | wake)
                            .map_err(|e| sg_refused(e, "copy"))?
                    }
                    Err(e) => return Err(e),
                }
            }
        };
        let bound = bound_mode(&fd)?;
        let Rings {
            rx,
            fill,
            comp,
            maps,
        } = rings;
        let mut sock = XskSocket {
            fd,
            rx,
            fill,
            _comp: comp,
            _ring_maps: maps,
            ledger: Box::new(FrameLedger::full(umem.frame_count(), umem.frame_size())),
            umem,
            bound,
            need_wakeup: cfg.need_wakeup,
            ifname: cfg.ifname.clone(),
            ifindex,
            queue: cfg.queue,
            counters: Arc::new(XskCounters::default()),
            multi_buffer: fit.multi_buffer,
            chain: Chain::new(
                (super::MAX_CHAIN_CHUNKS * umem_cfg.frame_size) as usize,
                fit.multi_buffer,
            ),
        };
        sock.refill();
        log::info!(
            "AF_XDP socket on {} (ifindex {}) queue {}: {:?} mode, UMEM {} x {} B on {} pages, \
             fill/rx rings {}/{}, need_wakeup {}, multi-buffer {} (MTU {})",
            sock.ifname,
            ifindex,
            sock.queue,
            bound,
            sock.umem.frame_count(),
            sock.umem.frame_size(),
            if sock.umem.huge() {
                "2 MiB huge"
            } else {
                "4 KiB"
            },
            sock.fill.size(),
            sock.rx.size(),
            sock.need_wakeup,
            sock.multi_buffer,
            fit.mtu
        );
        Ok(sock)
    }

    /// The AF_XDP socket fd: insert it into the XSKMAP at this queue's index, and poll it
    /// (`POLLIN`) to wait for packets.
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The mode the kernel actually bound (from `getsockopt(XDP_OPTIONS)`).
    pub fn bound_mode(&self) -> BoundMode {
        self.bound
    }

    /// The UMEM sits on 2 MiB huge pages.
    pub fn uses_huge_pages(&self) -> bool {
        self.umem.huge()
    }

    /// Interface name as given in [`XskConfig::ifname`].
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// Interface index.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// Bound queue id.
    pub fn queue(&self) -> u32 {
        self.queue
    }

    /// Bytes per UMEM frame.
    pub fn frame_size(&self) -> u32 {
        self.umem.frame_size()
    }

    /// Bound with `XDP_USE_SG` (the interface's MTU exceeds one chunk).
    pub fn multi_buffer(&self) -> bool {
        self.multi_buffer
    }

    /// The largest interface MTU this socket receives whole: [`super::max_mtu_multi_buffer`]
    /// when bound for multi-buffer, else [`super::max_mtu`] (one chunk).
    pub fn max_mtu(&self) -> u32 {
        if self.multi_buffer {
            super::max_mtu_multi_buffer(self.frame_size())
        } else {
            super::max_mtu(self.frame_size())
        }
    }

    /// Drains up to `max` RX descriptors in one burst, calling `f(packet)` for each, the
    /// bytes starting at the Ethernet header; then returns all those frames to the fill
    /// ring in one burst, waking the kernel with `recvfrom(MSG_DONTWAIT)` if
    /// `need_wakeup` is on and the fill ring has `XDP_RING_NEED_WAKEUP`.
    ///
    /// Returns the number of packets passed to `f`. A descriptor whose `addr + len` is not
    /// inside one UMEM frame is counted in [`XskCounters::invalid_descs`] and dropped; its
    /// frame goes back to the fill ring with the others. One naming no frame the kernel held
    /// (outside the UMEM, or a frame delivered twice) is also counted in
    /// [`XskCounters::frames_lost`]. No locks, no allocation, no syscall except the wakeup.
    /// If `f` panics, the frames of this burst are lost to the socket (it keeps working with
    /// fewer).
    pub fn rx_burst(&mut self, max: u32, f: impl FnMut(&[u8])) -> usize {
        let packets = drain_rx(
            &mut self.rx,
            &self.umem,
            (&mut self.ledger, &mut self.chain),
            &self.counters,
            max,
            f,
        );
        if self.ledger.held() > 0 {
            self.refill();
        }
        packets
    }

    /// Moves held frames onto the fill ring, then wakes the kernel if it asked for it.
    fn refill(&mut self) {
        if refill(&mut self.fill, &mut self.ledger, &self.counters)
            && self.need_wakeup
            && self.fill_needs_wakeup()
        {
            self.wake();
        }
    }

    fn wake(&self) {
        // EAGAIN, ENOBUFS and the like are expected: the kick was delivered or not needed.
        let _ = xdp::wake_rx(self.fd.as_raw_fd());
        XskCounters::add(&self.counters.wakeups, 1);
    }

    /// The fill ring's `XDP_RING_NEED_WAKEUP` flag (only ever set when bound with
    /// [`XskConfig::need_wakeup`]). veth in copy mode never sets it.
    pub fn fill_needs_wakeup(&self) -> bool {
        self.fill.flags() & libc::XDP_RING_NEED_WAKEUP != 0
    }

    /// Waits up to `timeout` (millisecond resolution) for the RX ring to become readable
    /// (`poll(POLLIN)`). Returns whether it is. `EINTR` counts as not readable.
    ///
    /// # Errors
    /// [`XskError::Syscall`] `poll(AF_XDP)` for anything but `EINTR`.
    pub fn poll_rx(&self, timeout: Duration) -> Result<bool, XskError> {
        net::poll_readable(self.fd.as_raw_fd(), timeout).map_err(|source| XskError::Syscall {
            call: "poll(AF_XDP)",
            source,
        })
    }

    /// The kernel's counters for this socket (`getsockopt(XDP_STATISTICS)`); see
    /// [`XdpStatistics`]. One syscall: call it periodically, not per burst.
    ///
    /// # Errors
    /// [`XskError::Syscall`] `getsockopt(XDP_STATISTICS)`.
    pub fn statistics(&self) -> Result<XdpStatistics, XskError> {
        // On kernels < 5.9 only the first three fields are written; the rest stay zero.
        let (s, _len) = getsockopt::<libc::xdp_statistics>(
            &self.fd,
            libc::XDP_STATISTICS,
            "getsockopt(XDP_STATISTICS)",
        )?;
        Ok(s.into())
    }

    /// Our own counters (packets, bytes, bursts, wakeups, invalid descriptors).
    pub fn counters(&self) -> &XskCounters {
        &self.counters
    }

    /// A shared handle on [`XskSocket::counters`] for a stats/metrics thread.
    pub fn counters_handle(&self) -> Arc<XskCounters> {
        Arc::clone(&self.counters)
    }
}

impl AsRawFd for XskSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// So `&xsk` can be passed where `impl AsRawFd` is taken (e.g. aya's `XskMap::set`)
/// without giving up the socket; std has no blanket `AsRawFd for &T`.
impl AsRawFd for &XskSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl AsFd for XskSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Drop for XskSocket {
    /// Fields then drop in declaration order: fd (close → unbind), rings, UMEM.
    fn drop(&mut self) {
        log::debug!(
            "closing AF_XDP socket on {} queue {}: {:?}",
            self.ifname,
            self.queue,
            self.counters.snapshot()
        );
    }
}

/// The RX half of [`XskSocket::rx_burst`]: reads up to `max` RX descriptors, takes their
/// frames back through `ledger` (so the frame of an invalid descriptor is recycled, not
/// leaked), calls `f` for each valid packet, and releases the RX slots. Returns the packets
/// passed to `f`. Sans-IO over the ring memory: unit-tested on rings in ordinary memory.
fn drain_rx(
    rx: &mut ConsumerRing<libc::xdp_desc>,
    umem: &Umem,
    (ledger, chain): (&mut FrameLedger, &mut Chain),
    counters: &XskCounters,
    max: u32,
    mut f: impl FnMut(&[u8]),
) -> usize {
    let (start, n) = rx.peek(max);
    let (mut packets, mut bytes, mut invalid, mut lost, mut chained) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    for i in 0..n {
        let desc = rx.read(start.wrapping_add(i));
        let contd = desc.options & libc::XDP_PKT_CONTD != 0;
        match ledger.take_rx(desc.addr, desc.len) {
            RxDesc::Packet { frame, offset, len } => {
                // SAFETY: the ledger just took `frame` back from an RX descriptor of the ring
                // bound to `umem` and the packet lies inside it; the frame goes back to the
                // kernel only through `ledger.put` below and a later refill, after `f`
                // returned and the slice is dead (`f` cannot keep it: higher-ranked lifetime;
                // a chain keeps a copy, never the slice).
                match unsafe { umem.rx_bytes(offset, len) } {
                    Some(data) => {
                        let chained_now = chain.active || contd;
                        match chain.push(data, contd) {
                            ChainStep::Packet(p) => {
                                f(p);
                                packets += 1;
                                chained += u64::from(chained_now);
                            }
                            ChainStep::More => {}
                            ChainStep::Dropped => invalid += 1,
                        }
                        bytes += u64::from(len);
                    }
                    None => {
                        chain.invalid(contd);
                        invalid += 1;
                    }
                }
                ledger.put(frame);
            }
            RxDesc::Invalid { frame } => {
                log::debug!(
                    "AF_XDP RX descriptor addr {:#x} len {} not inside one UMEM frame: \
                     dropped, frame {:#x} recycled",
                    desc.addr,
                    desc.len,
                    frame.offset()
                );
                chain.invalid(contd);
                invalid += 1;
                ledger.put(frame);
            }
            RxDesc::Unowned => {
                log::warn!(
                    "AF_XDP RX descriptor addr {:#x} len {} names no frame the kernel held: \
                     dropped, one UMEM frame lost",
                    desc.addr,
                    desc.len
                );
                chain.invalid(contd);
                invalid += 1;
                lost += 1;
            }
        }
    }
    if n > 0 {
        rx.release();
        XskCounters::add(&counters.bursts, 1);
        XskCounters::add(&counters.packets, packets);
        XskCounters::add(&counters.bytes, bytes);
        XskCounters::add(&counters.invalid_descs, invalid);
        XskCounters::add(&counters.frames_lost, lost);
        XskCounters::add(&counters.multi_buffer, chained);
    }
    packets as usize
}

/// Moves the frames `ledger` holds onto the fill ring (one Release store), as many as fit;
/// counts a full ring in [`XskCounters::fill_ring_full`]. Returns whether any moved.
fn refill(fill: &mut ProducerRing<u64>, ledger: &mut FrameLedger, counters: &XskCounters) -> bool {
    let held = ledger.held() as u32;
    let n = fill.free(held).min(held);
    if n < held {
        XskCounters::add(&counters.fill_ring_full, 1);
    }
    if n == 0 {
        return false;
    }
    let produced = fill.produce(n, || {
        ledger.give().expect("n <= frames held, checked above")
    });
    debug_assert!(produced, "free() said {n} slots are free");
    true
}

/// The rings of one not-yet-bound socket.
struct Rings {
    rx: ConsumerRing<libc::xdp_desc>,
    fill: ProducerRing<u64>,
    comp: ConsumerRing<u64>,
    maps: [MmapRaw; 3],
}

fn ifindex(ifname: &str) -> Result<u32, XskError> {
    net::if_nametoindex(ifname).map_err(|source| match source.kind() {
        io::ErrorKind::InvalidInput => {
            XskError::InvalidConfig(format!("interface name {ifname:?} contains NUL"))
        }
        _ => XskError::NoSuchInterface {
            ifname: ifname.to_owned(),
            call: "if_nametoindex",
            source,
        },
    })
}

/// `setsockopt(SOL_XDP, opt)`; `call` names it in the error.
fn setsockopt<T: sockopt::Plain>(
    fd: &OwnedFd,
    opt: libc::c_int,
    val: &T,
    call: &'static str,
) -> Result<(), XskError> {
    sockopt::set(fd.as_raw_fd(), libc::SOL_XDP, opt, val)
        .map_err(|source| XskError::Syscall { call, source })
}

/// `getsockopt(SOL_XDP, opt)` into a zeroed `T`; returns it and the length the kernel wrote.
fn getsockopt<T: sockopt::Plain>(
    fd: &OwnedFd,
    opt: libc::c_int,
    call: &'static str,
) -> Result<(T, usize), XskError> {
    sockopt::get(fd.as_raw_fd(), libc::SOL_XDP, opt)
        .map_err(|source| XskError::Syscall { call, source })
}

fn bound_mode(fd: &OwnedFd) -> Result<BoundMode, XskError> {
    let (opts, _) =
        getsockopt::<libc::xdp_options>(fd, libc::XDP_OPTIONS, "getsockopt(XDP_OPTIONS)")?;
    Ok(if opts.flags & libc::XDP_OPTIONS_ZEROCOPY != 0 {
        BoundMode::ZeroCopy
    } else {
        BoundMode::Copy
    })
}

/// Maps one ring and checks the kernel's offsets against the mapping before making
/// pointers.
fn map_ring<T>(
    fd: &OwnedFd,
    off: &libc::xdp_ring_offset,
    size: u32,
    pgoff: u64,
    call: &'static str,
) -> Result<(MmapRaw, RingPtrs<T>), XskError> {
    let len = off.desc as usize + size as usize * size_of::<T>();
    let map = MmapOptions::new()
        .offset(pgoff)
        .len(len)
        .populate()
        .map_raw(fd)
        .map_err(|source| XskError::Syscall { call, source })?;
    let base = map.as_mut_ptr();
    let bad =
        || XskError::Unsupported("XDP_MMAP_OFFSETS points outside the ring mapping or misaligned");
    let field = |o: u64, bytes: usize, align: usize| -> Result<*mut u8, XskError> {
        let o = usize::try_from(o).map_err(|_| bad())?;
        if o.checked_add(bytes).is_none_or(|end| end > len) {
            return Err(bad());
        }
        // SAFETY: o + bytes <= len, so the result stays inside the mapping.
        let p = unsafe { base.add(o) };
        if !(p as usize).is_multiple_of(align) {
            return Err(bad());
        }
        Ok(p)
    };
    let a32 = std::mem::align_of::<u32>();
    let nn = |p: *mut u8| NonNull::new(p).ok_or_else(bad);
    let ptrs = RingPtrs {
        producer: nn(field(off.producer, 4, a32)?)?.cast(),
        consumer: nn(field(off.consumer, 4, a32)?)?.cast(),
        flags: nn(field(off.flags, 4, a32)?)?.cast(),
        descs: nn(field(
            off.desc,
            size as usize * size_of::<T>(),
            std::mem::align_of::<T>(),
        )?)?
        .cast(),
        size,
    };
    Ok((map, ptrs))
}

/// socket, UMEM_REG, ring sizes, ring mmaps: everything before bind.
fn create(umem: &Umem, cfg: &UmemConfig) -> Result<(OwnedFd, Rings), XskError> {
    let fd = xdp::socket().map_err(|source| XskError::Syscall {
        call: "socket(AF_XDP)",
        source,
    })?;

    let reg = libc::xdp_umem_reg {
        addr: umem.addr(),
        len: umem.len(),
        chunk_size: umem.frame_size(),
        headroom: 0,
        flags: 0, // aligned chunks
        tx_metadata_len: 0,
    };
    setsockopt(&fd, libc::XDP_UMEM_REG, &reg, "setsockopt(XDP_UMEM_REG)")?;
    setsockopt(
        &fd,
        libc::XDP_UMEM_FILL_RING,
        &cfg.fill_size,
        "setsockopt(XDP_UMEM_FILL_RING)",
    )?;
    setsockopt(
        &fd,
        libc::XDP_UMEM_COMPLETION_RING,
        &cfg.comp_size,
        "setsockopt(XDP_UMEM_COMPLETION_RING)",
    )?;
    setsockopt(
        &fd,
        libc::XDP_RX_RING,
        &cfg.rx_size,
        "setsockopt(XDP_RX_RING)",
    )?;

    let (off, len) = getsockopt::<libc::xdp_mmap_offsets>(
        &fd,
        libc::XDP_MMAP_OFFSETS,
        "getsockopt(XDP_MMAP_OFFSETS)",
    )?;
    if len < size_of::<libc::xdp_mmap_offsets>() {
        return Err(XskError::Unsupported(
            "XDP_MMAP_OFFSETS has no ring flags (needs Linux >= 5.4)",
        ));
    }

    let (rx_map, rx_ptrs) = map_ring::<libc::xdp_desc>(
        &fd,
        &off.rx,
        cfg.rx_size,
        libc::XDP_PGOFF_RX_RING as u64,
        "mmap(XDP_PGOFF_RX_RING)",
    )?;
    let (fill_map, fill_ptrs) = map_ring::<u64>(
        &fd,
        &off.fr,
        cfg.fill_size,
        libc::XDP_UMEM_PGOFF_FILL_RING,
        "mmap(XDP_UMEM_PGOFF_FILL_RING)",
    )?;
    let (comp_map, comp_ptrs) = map_ring::<u64>(
        &fd,
        &off.cr,
        cfg.comp_size,
        libc::XDP_UMEM_PGOFF_COMPLETION_RING,
        "mmap(XDP_UMEM_PGOFF_COMPLETION_RING)",
    )?;
    // SAFETY: each `*_ptrs` points into its `*_map`, checked in-bounds and aligned by
    // `map_ring`, with `size` descriptors as the kernel sized the ring; the maps move into
    // `Rings` beside the ring views and outlive them (dropped later, in `XskSocket` field
    // order). The kernel is the only other party: consumer of fill, producer of RX and
    // completion.
    let rings = unsafe {
        Rings {
            rx: ConsumerRing::new(rx_ptrs),
            fill: ProducerRing::new(fill_ptrs),
            comp: ConsumerRing::new(comp_ptrs),
            maps: [rx_map, fill_map, comp_map],
        }
    };
    Ok((fd, rings))
}

fn bind(fd: &OwnedFd, ifindex: u32, queue: u32, flags: u16) -> io::Result<()> {
    xdp::bind(fd.as_raw_fd(), ifindex, queue, flags)
}

/// Exponential backoff for `EBUSY`: 10 ms doubling, capped at 500 ms.
fn next_backoff(b: Duration) -> Duration {
    (b * 2).min(Duration::from_millis(500))
}

/// A fresh socket per attempt; retries `EBUSY` until `cfg.bind_retry` has elapsed.
fn bind_retrying(
    umem: &Umem,
    umem_cfg: &UmemConfig,
    cfg: &XskConfig,
    ifindex: u32,
    flags: u16,
) -> Result<(OwnedFd, Rings), XskError> {
    let mode = if flags & libc::XDP_ZEROCOPY != 0 {
        "XDP_ZEROCOPY"
    } else {
        "XDP_COPY"
    };
    let started = Instant::now();
    let mut backoff = Duration::from_millis(10);
    let mut attempts = 0;
    loop {
        attempts += 1;
        let (fd, rings) = create(umem, umem_cfg)?;
        let err = match bind(&fd, ifindex, cfg.queue, flags) {
            Ok(()) => {
                if attempts > 1 {
                    log::info!(
                        "AF_XDP {} queue {}: bound after {attempts} attempts ({:?})",
                        cfg.ifname,
                        cfg.queue,
                        started.elapsed()
                    );
                }
                return Ok((fd, rings));
            }
            Err(e) => e,
        };
        drop((fd, rings));
        let remaining = cfg.bind_retry.saturating_sub(started.elapsed());
        if err.raw_os_error() == Some(libc::EBUSY) && !remaining.is_zero() {
            if attempts == 1 {
                log::info!(
                    "AF_XDP {} queue {}: bind EBUSY (queue still held by a closing socket?), \
                     retrying for up to {:?}",
                    cfg.ifname,
                    cfg.queue,
                    cfg.bind_retry
                );
            }
            std::thread::sleep(backoff.min(remaining));
            backoff = next_backoff(backoff);
            continue;
        }
        return Err(XskError::Bind {
            ifname: cfg.ifname.clone(),
            queue: cfg.queue,
            mode,
            attempts,
            source: err,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_is_send() {
        fn is_send<T: Send>() {}
        is_send::<XskSocket>();
    }

    /// The RX burst's bookkeeping on rings in ordinary memory: a valid packet, an invalid
    /// descriptor whose frame is recycled, and two that name no frame the kernel held.
    #[test]
    fn invalid_rx_descriptors_recycle_their_frame_or_count_it_lost() {
        use super::super::{HugePages, ring::FakeRing};
        use std::sync::atomic::Ordering;
        let umem = Umem::new(&UmemConfig {
            frame_count: 8,
            huge_pages: HugePages::Off,
            ..UmemConfig::default()
        })
        .unwrap();
        let mut ledger = FrameLedger::full(8, 2048);
        let counters = XskCounters::default();
        let mut fill_mem = FakeRing::<u64>::new(8, 0);
        // SAFETY: `fill_mem` outlives `fill` and only `fill` produces into it.
        let mut fill = unsafe { ProducerRing::new(fill_mem.ptrs()) };
        assert!(refill(&mut fill, &mut ledger, &counters));
        assert_eq!(
            fill_mem.descs,
            [0, 2048, 4096, 6144, 8192, 10240, 12288, 14336]
        );
        assert_eq!(fill_mem.producer.load(Ordering::Relaxed), 8);
        assert_eq!((ledger.held(), ledger.in_kernel()), (0, 8));

        // The "kernel" consumes four fill entries and writes four RX descriptors.
        fill_mem.consumer.store(4, Ordering::Release);
        umem.write_for_test(256, b"hello");
        let d = |addr, len| libc::xdp_desc {
            addr,
            len,
            options: 0,
        };
        let mut descs = vec![d(0, 0); 8];
        descs[..4].copy_from_slice(&[
            d(256, 5),           // frame 0: a packet
            d(2048 + 2000, 100), // frame 1: crosses into frame 2
            d(8 * 2048, 60),     // outside the UMEM
            d(300, 10),          // frame 0 again
        ]);
        let mut rx_mem = FakeRing::with(descs, 0);
        rx_mem.producer.store(4, Ordering::Release);
        // SAFETY: `rx_mem` outlives `rx` and only `rx` consumes from it.
        let mut rx = unsafe { ConsumerRing::new(rx_mem.ptrs()) };
        let mut seen = Vec::new();
        let mut chain = Chain::new(4096, false);
        let n = drain_rx(
            &mut rx,
            &umem,
            (&mut ledger, &mut chain),
            &counters,
            64,
            |p| seen.push(p.to_vec()),
        );
        assert_eq!(n, 1);
        assert_eq!(seen, vec![b"hello".to_vec()]);
        assert_eq!(
            rx_mem.consumer.load(Ordering::Relaxed),
            4,
            "all four released"
        );
        let s = counters.snapshot();
        assert_eq!(
            (s.packets, s.bytes, s.bursts, s.invalid_descs, s.frames_lost),
            (1, 5, 1, 3, 2)
        );
        assert_eq!((ledger.held(), ledger.in_kernel()), (2, 6));

        // Frames 0 and 1 go back onto the fill ring (slots 0 and 1, freed by the kernel).
        assert!(refill(&mut fill, &mut ledger, &counters));
        assert_eq!(fill_mem.producer.load(Ordering::Relaxed), 10);
        assert_eq!(fill_mem.descs[..2], [2048, 0]);
        assert_eq!((ledger.held(), ledger.in_kernel()), (0, 8));
        assert_eq!(counters.snapshot().fill_ring_full, 0);
        assert!(!refill(&mut fill, &mut ledger, &counters), "nothing held");
    }

    /// Multi-buffer: a packet in three descriptors (`XDP_PKT_CONTD` on the first two) split
    /// across two bursts comes out whole, once, copied together; a single-descriptor packet
    /// between chains is handed over as it lies; a chain with an invalid part is dropped
    /// whole, and so is one longer than the chain's limit.
    #[test]
    fn chained_descriptors_make_one_packet() {
        use super::super::{HugePages, ring::FakeRing};
        use std::sync::atomic::Ordering;
        let umem = Umem::new(&UmemConfig {
            frame_count: 16,
            huge_pages: HugePages::Off,
            ..UmemConfig::default()
        })
        .unwrap();
        let mut ledger = FrameLedger::full(16, 2048);
        let counters = XskCounters::default();
        let mut fill_mem = FakeRing::<u64>::new(16, 0);
        // SAFETY: `fill_mem` outlives `fill` and only `fill` produces into it.
        let mut fill = unsafe { ProducerRing::new(fill_mem.ptrs()) };
        assert!(refill(&mut fill, &mut ledger, &counters));
        fill_mem.consumer.store(16, Ordering::Release);
        for (frame, text) in [(0u64, "abc"), (1, "def"), (2, "gh"), (3, "one")] {
            umem.write_for_test(frame as usize * 2048 + 256, text.as_bytes());
        }
        for frame in 4..16u64 {
            umem.write_for_test(frame as usize * 2048 + 256, b"xxxxxxxxxx");
        }
        let d = |frame: u64, len, contd: bool| libc::xdp_desc {
            addr: frame * 2048 + 256,
            len,
            options: if contd { libc::XDP_PKT_CONTD } else { 0 },
        };
        let descs = vec![
            d(0, 3, true),
            d(1, 3, true),
            // burst boundary
            d(2, 2, false),
            d(3, 3, false),
            // a chain whose middle part lies outside its frame: dropped whole
            d(4, 10, true),
            libc::xdp_desc {
                addr: 5 * 2048 + 2000,
                len: 100,
                options: libc::XDP_PKT_CONTD,
            },
            d(6, 10, false),
            // a chain longer than the 25-byte limit: dropped whole
            d(7, 10, true),
            d(8, 10, true),
            d(9, 10, false),
        ];
        let mut rx_mem = FakeRing::with(
            descs
                .iter()
                .copied()
                .chain(std::iter::repeat_n(d(0, 0, false), 6))
                .collect(),
            0,
        );
        rx_mem.producer.store(descs.len() as u32, Ordering::Release);
        // SAFETY: `rx_mem` outlives `rx` and only `rx` consumes from it.
        let mut rx = unsafe { ConsumerRing::new(rx_mem.ptrs()) };
        let mut chain = Chain::new(25, true);
        let mut seen = Vec::new();
        let mut burst = |max, seen: &mut Vec<Vec<u8>>| {
            drain_rx(
                &mut rx,
                &umem,
                (&mut ledger, &mut chain),
                &counters,
                max,
                |p| seen.push(p.to_vec()),
            )
        };
        assert_eq!(burst(2, &mut seen), 0, "the chain is not complete yet");
        assert_eq!(burst(64, &mut seen), 2);
        assert_eq!(seen, [b"abcdefgh".to_vec(), b"one".to_vec()]);
        let s = counters.snapshot();
        assert_eq!(
            (s.packets, s.multi_buffer, s.invalid_descs, s.bursts),
            // invalid_descs: the descriptor outside its frame, the packet it broke, and the
            // over-long chain.
            (2, 1, 3, 2),
            "{s:?}"
        );
        assert_eq!(
            ledger.in_kernel(),
            16 - descs.len() as u32,
            "every delivered frame taken back, the invalid one's included"
        );
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let mut b = Duration::from_millis(10);
        let mut seen = vec![];
        for _ in 0..8 {
            seen.push(b.as_millis());
            b = next_backoff(b);
        }
        assert_eq!(seen, vec![10, 20, 40, 80, 160, 320, 500, 500]);
    }

    #[test]
    fn unknown_interface_is_reported_by_name() {
        let e = ifindex("lxdp-no-such0").unwrap_err();
        assert!(matches!(e, XskError::NoSuchInterface { .. }), "{e}");
        assert!(e.to_string().contains("lxdp-no-such0"));
    }

    #[test]
    fn open_rejects_bad_config_before_syscalls() {
        let umem = UmemConfig {
            rx_size: 1000,
            ..UmemConfig::default()
        };
        let e = XskSocket::open(&umem, &XskConfig::new("lo", 0)).unwrap_err();
        assert!(matches!(e, XskError::InvalidConfig(_)), "{e}");
    }
}
