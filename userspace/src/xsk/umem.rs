//! The UMEM area and UMEM frames as ownership tokens.
//!
//! The UMEM (`af_xdp.rst`, "UMEM") is one anonymous mapping split into `frame_count`
//! equal chunks of `frame_size` bytes, registered with `XDP_UMEM_REG` in aligned-chunk mode
//! (no `XDP_UMEM_UNALIGNED_CHUNK_FLAG`, headroom 0). A frame is named by its *address*: the
//! byte offset of its first byte from the UMEM start.
//!
//! Ownership: at any time each frame is either on our free list, on the fill ring (owned by
//! the kernel), or in a received RX descriptor (owned by us until we return it). A
//! [`FrameAddr`] is the token for a frame we own; it is not `Copy`, so a frame cannot be
//! handed to the kernel twice by accident. [`FrameLedger`] keeps the books: it also knows
//! which frames the kernel holds, so an RX descriptor is accepted only for one of those, and
//! the frame of an invalid descriptor goes back to the fill ring instead of leaking.
//!
//! Memory: 2 MiB huge pages (`MAP_HUGETLB | MAP_HUGE_2MB`, mapping rounded up to 2 MiB)
//! per [`HugePages`], prefaulted with `MAP_POPULATE`. The kernel pins the pages at
//! `XDP_UMEM_REG` until the socket is released.

use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};

use memmap2::{MmapMut, MmapOptions};

use super::hugepage::{HUGE_PAGE_SIZE, huge_pages_for};
use super::{HugePages, UmemConfig, XskError};

/// An owned UMEM frame: the byte offset of the frame's first byte from the UMEM start
/// (a multiple of `frame_size`). Not `Copy`: holding it is owning the frame.
#[derive(Debug, PartialEq, Eq)]
pub struct FrameAddr(u64);

impl FrameAddr {
    /// The frame's UMEM offset in bytes.
    pub fn offset(&self) -> u64 {
        self.0
    }
}

/// What an RX descriptor turned out to be ([`FrameLedger::take_rx`]).
#[derive(Debug, PartialEq, Eq)]
pub enum RxDesc {
    /// A packet of `len` bytes at UMEM offset `offset`, inside the frame `frame`, which the
    /// kernel held and which is now ours.
    Packet {
        /// The frame the packet sits in (return it with [`FrameLedger::put`]).
        frame: FrameAddr,
        /// Byte offset of the packet's first byte from the UMEM start.
        offset: u64,
        /// Packet length in bytes.
        len: u32,
    },
    /// `addr + len` is not inside one frame of the UMEM, but `addr` names a frame the kernel
    /// held: the frame is ours again and goes back to the fill ring; the packet is dropped.
    Invalid {
        /// The frame `addr` falls in.
        frame: FrameAddr,
    },
    /// `addr` is outside the UMEM, or names a frame the kernel did not hold (already ours):
    /// there is no frame to take back. The kernel consumed some fill-ring frame for this
    /// descriptor that cannot be identified, so the UMEM works with one frame fewer.
    Unowned,
}

/// Who owns each UMEM frame: a fixed-capacity stack of the frames we hold, and one bit per
/// frame for the frames the kernel holds (on the fill ring, or in an RX descriptor not yet
/// read). Sans-IO; never allocates after construction.
///
/// Every frame is in exactly one of the two, except frames handed out as [`FrameAddr`]
/// tokens between [`FrameLedger::take_rx`] and [`FrameLedger::put`]. An RX descriptor is
/// accepted only for a frame whose kernel bit is set, so a descriptor the kernel should never
/// write (outside the UMEM, or for a frame delivered twice) can neither hand a frame out twice
/// nor grow the stack.
#[derive(Debug)]
pub struct FrameLedger {
    /// Frames we hold, as UMEM offsets; the next one handed to the kernel on top.
    free: Vec<u64>,
    /// Bit `i` set: frame `i` (offset `i * frame_size`) is the kernel's.
    kernel: Vec<u64>,
    frame_size: u32,
    frame_count: u32,
}

impl FrameLedger {
    /// All `frame_count` frames of `frame_size` bytes (a power of two) ours, lowest address
    /// on top.
    pub fn full(frame_count: u32, frame_size: u32) -> Self {
        debug_assert!(frame_size.is_power_of_two());
        let frames = (0..frame_count as u64)
            .rev()
            .map(|i| i * frame_size as u64)
            .collect();
        Self {
            free: frames,
            kernel: vec![0; (frame_count as usize).div_ceil(64)],
            frame_size,
            frame_count,
        }
    }

    /// Frames we hold (ready for the fill ring).
    pub fn held(&self) -> usize {
        self.free.len()
    }

    /// Frames the kernel holds.
    pub fn in_kernel(&self) -> u32 {
        self.kernel.iter().map(|w| w.count_ones()).sum()
    }

    fn bit(&self, frame: u64) -> (usize, u64) {
        let i = (frame / self.frame_size as u64) as usize;
        (i / 64, 1u64 << (i % 64))
    }

    /// Hands the frame on top of our stack to the kernel (for the fill ring): marks it the
    /// kernel's and returns its UMEM offset; `None` when we hold none.
    pub fn give(&mut self) -> Option<u64> {
        let frame = self.free.pop()?;
        let (w, b) = self.bit(frame);
        self.kernel[w] |= b;
        Some(frame)
    }

    /// Takes back the frame of an RX descriptor (`addr`, `len`: `struct xdp_desc`) and says
    /// whether it holds a packet; see [`RxDesc`]. Aligned-chunk mode: the frame is
    /// `addr` rounded down to `frame_size`.
    pub fn take_rx(&mut self, addr: u64, len: u32) -> RxDesc {
        let umem_len = self.frame_count as u64 * self.frame_size as u64;
        if addr >= umem_len {
            return RxDesc::Unowned;
        }
        let frame = addr & !(self.frame_size as u64 - 1);
        let (w, b) = self.bit(frame);
        if self.kernel[w] & b == 0 {
            return RxDesc::Unowned;
        }
        self.kernel[w] &= !b;
        match check_desc(addr, len, self.frame_size, umem_len) {
            Some((f, offset)) => {
                debug_assert_eq!(f.offset(), frame);
                RxDesc::Packet {
                    frame: f,
                    offset,
                    len,
                }
            }
            None => RxDesc::Invalid {
                frame: FrameAddr(frame),
            },
        }
    }

    /// Returns a frame to our stack. Cannot overflow it: tokens are unique.
    pub fn put(&mut self, frame: FrameAddr) {
        debug_assert!(self.free.len() < self.free.capacity());
        self.free.push(frame.0);
    }
}

/// Checks an RX descriptor against the UMEM geometry (aligned chunks, sans-IO).
///
/// Returns the owning frame's address and the byte offset of the packet inside the UMEM, or
/// `None` if `addr + len` is not inside one frame of a `umem_len`-byte UMEM.
fn check_desc(addr: u64, len: u32, frame_size: u32, umem_len: u64) -> Option<(FrameAddr, u64)> {
    let end = addr.checked_add(len as u64)?;
    if end > umem_len {
        return None;
    }
    let frame = addr & !(frame_size as u64 - 1);
    if end > frame + frame_size as u64 {
        return None;
    }
    Some((FrameAddr(frame), addr))
}

static HUGE_FALLBACK_WARNED: AtomicBool = AtomicBool::new(false);

/// The UMEM mapping.
#[derive(Debug)]
pub struct Umem {
    /// Owns the mapping; unmapped on drop. Accessed only through `base` (frames are shared
    /// with the kernel, so we never make a reference to the whole area).
    _map: MmapMut,
    base: NonNull<u8>,
    len: u64,
    frame_size: u32,
    frame_count: u32,
    huge: bool,
}

impl Umem {
    /// Maps the UMEM for `cfg` (which must have passed [`UmemConfig::validate`]).
    ///
    /// # Errors
    /// [`XskError::HugePages`] with [`HugePages::Require`] when the huge-page mmap fails;
    /// [`XskError::Syscall`] (`mmap(UMEM)`) when the normal mmap fails.
    pub fn new(cfg: &UmemConfig) -> Result<Self, XskError> {
        let len = cfg.umem_bytes();
        let (mut map, huge) = match cfg.huge_pages {
            HugePages::Off => (map_normal(len)?, false),
            HugePages::Require => (map_huge(len)?, true),
            HugePages::Prefer => match map_huge(len) {
                Ok(m) => (m, true),
                Err(e) => {
                    if !HUGE_FALLBACK_WARNED.swap(true, Ordering::Relaxed) {
                        log::warn!(
                            "AF_XDP UMEM on normal 4 KiB pages ({e}); reserve 2 MiB huge pages \
                             (`echo N > /proc/sys/vm/nr_hugepages`) to cut TLB misses (warned once)"
                        );
                    } else {
                        log::debug!("AF_XDP UMEM on normal pages: {e}");
                    }
                    (map_normal(len)?, false)
                }
            },
        };
        let base = NonNull::new(map.as_mut_ptr()).expect("mmap never returns NULL on success");
        Ok(Self {
            _map: map,
            base,
            len: len as u64,
            frame_size: cfg.frame_size,
            frame_count: cfg.frame_count,
            huge,
        })
    }

    /// Start address, for `xdp_umem_reg.addr` (page-aligned).
    pub fn addr(&self) -> u64 {
        self.base.as_ptr() as u64
    }

    /// Registered length in bytes (`frame_count * frame_size`).
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Always false (a UMEM has at least one frame); for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes per frame.
    pub fn frame_size(&self) -> u32 {
        self.frame_size
    }

    /// Number of frames.
    pub fn frame_count(&self) -> u32 {
        self.frame_count
    }

    /// Backed by 2 MiB huge pages.
    pub fn huge(&self) -> bool {
        self.huge
    }

    /// The `len` bytes at UMEM offset `offset` (a packet of an RX descriptor), or `None`
    /// when they are not inside the UMEM.
    ///
    /// # Safety
    /// The bytes must lie in a frame that is ours: taken back from an RX descriptor of the
    /// ring bound to this UMEM ([`FrameLedger::take_rx`]) and not yet given back to the
    /// kernel. The kernel then does not write the frame, so the slice is not mutated while
    /// the caller holds it; the caller must drop the slice before giving the frame back.
    pub unsafe fn rx_bytes(&self, offset: u64, len: u32) -> Option<&[u8]> {
        let end = offset.checked_add(len as u64)?;
        if end > self.len {
            return None;
        }
        // SAFETY: offset + len <= self.len (checked above), so the range is inside the
        // mapping, which `self` owns and keeps alive for the returned lifetime; the caller
        // guarantees the kernel does not write it meanwhile (see `# Safety`).
        let bytes = unsafe {
            std::slice::from_raw_parts(self.base.as_ptr().add(offset as usize), len as usize)
        };
        Some(bytes)
    }

    /// Test helper: writes `bytes` at UMEM offset `offset`, as the kernel would.
    #[cfg(test)]
    pub(crate) fn write_for_test(&self, offset: usize, bytes: &[u8]) {
        assert!(offset + bytes.len() <= self.len as usize);
        // SAFETY: the range is inside the mapping (asserted above) and no slice of it is
        // alive in the single-threaded test that calls this.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.base.as_ptr().add(offset),
                bytes.len(),
            )
        };
    }
}

fn map_huge(len: usize) -> Result<MmapMut, XskError> {
    let pages = huge_pages_for(len);
    let bytes = pages as usize * HUGE_PAGE_SIZE;
    MmapOptions::new()
        .len(bytes)
        .huge(Some(21)) // 21 = log2(2 MiB): MAP_HUGE_2MB
        .populate()
        .map_anon()
        .map_err(|source| XskError::HugePages {
            bytes,
            pages,
            source,
        })
}

fn map_normal(len: usize) -> Result<MmapMut, XskError> {
    MmapOptions::new()
        .len(len)
        .populate()
        .map_anon()
        .map_err(|source: io::Error| XskError::Syscall {
            call: "mmap(UMEM)",
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_desc_accepts_packets_inside_one_frame() {
        let umem = 4 * 2048;
        let (f, off) = check_desc(2048 + 256, 1000, 2048, umem).unwrap();
        assert_eq!((f.offset(), off), (2048, 2304));
        let (f, _) = check_desc(3 * 2048, 2048, 2048, umem).unwrap();
        assert_eq!(f.offset(), 3 * 2048);
        let (f, _) = check_desc(0, 0, 2048, umem).unwrap();
        assert_eq!(f.offset(), 0);
    }

    #[test]
    fn check_desc_rejects_out_of_range() {
        let umem = 4 * 2048;
        assert!(check_desc(umem, 1, 2048, umem).is_none(), "past the end");
        assert!(
            check_desc(3 * 2048 + 1, 2048, 2048, umem).is_none(),
            "crosses the end"
        );
        assert!(
            check_desc(2000, 100, 2048, umem).is_none(),
            "crosses a frame boundary"
        );
        assert!(
            check_desc(u64::MAX - 10, 100, 2048, umem).is_none(),
            "overflow"
        );
    }

    #[test]
    fn ledger_hands_out_each_frame_once() {
        let mut l = FrameLedger::full(4, 4096);
        let got: Vec<u64> = std::iter::from_fn(|| l.give()).collect();
        assert_eq!(got, vec![0, 4096, 8192, 12288]);
        assert_eq!((l.held(), l.in_kernel()), (0, 4));
        assert_eq!(
            l.take_rx(8192 + 256, 60),
            RxDesc::Packet {
                frame: FrameAddr(8192),
                offset: 8448,
                len: 60
            }
        );
        assert_eq!((l.held(), l.in_kernel()), (0, 3));
        l.put(FrameAddr(8192));
        assert_eq!((l.held(), l.in_kernel()), (1, 3));
        assert_eq!(l.give(), Some(8192));
        assert_eq!(l.give(), None);
    }

    #[test]
    fn ledger_takes_back_the_frame_of_an_invalid_descriptor() {
        let mut l = FrameLedger::full(4, 2048);
        while l.give().is_some() {}
        // Crosses from frame 1 into frame 2: invalid, but frame 1 was the kernel's.
        assert_eq!(
            l.take_rx(2048 + 2000, 100),
            RxDesc::Invalid {
                frame: FrameAddr(2048)
            }
        );
        // Runs past the end of the UMEM from the last frame.
        assert_eq!(
            l.take_rx(3 * 2048 + 1, 2048),
            RxDesc::Invalid {
                frame: FrameAddr(3 * 2048)
            }
        );
        assert_eq!((l.held(), l.in_kernel()), (0, 2));
        // Outside the UMEM, and frame 1 a second time: nothing to take back.
        assert_eq!(l.take_rx(4 * 2048, 60), RxDesc::Unowned);
        assert_eq!(l.take_rx(u64::MAX - 10, 100), RxDesc::Unowned);
        assert_eq!(l.take_rx(2048 + 256, 60), RxDesc::Unowned);
        assert_eq!((l.held(), l.in_kernel()), (0, 2));
        l.put(FrameAddr(2048));
        l.put(FrameAddr(3 * 2048));
        assert_eq!((l.held(), l.in_kernel()), (2, 2));
    }

    #[test]
    fn umem_without_enough_huge_pages_prefer_falls_back_require_fails() {
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
        let read = |k| super::super::hugepage::parse_meminfo(&meminfo, k);
        let overcommit = std::fs::read_to_string("/proc/sys/vm/nr_overcommit_hugepages")
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok());
        if read("Hugepagesize") != Some(2048) || overcommit != Some(0) {
            eprintln!("SKIPPED: default huge page size is not 2 MiB or overcommit is on");
            return;
        }
        // 8 pages more than are free: the huge-page mmap must fail.
        let pages = read("HugePages_Free").unwrap() + 8;
        let cfg = UmemConfig {
            frame_count: (pages * (HUGE_PAGE_SIZE as u64) / 2048) as u32,
            huge_pages: HugePages::Prefer,
            ..UmemConfig::default()
        };
        let u = Umem::new(&cfg).unwrap();
        assert!(!u.huge(), "fell back to normal pages");
        let e = Umem::new(&UmemConfig {
            huge_pages: HugePages::Require,
            ..cfg
        })
        .unwrap_err();
        assert!(matches!(e, XskError::HugePages { .. }), "{e}");
        assert_eq!(e.raw_os_error(), Some(libc::ENOMEM), "{e}");
    }

    #[test]
    fn umem_normal_pages() {
        let cfg = UmemConfig {
            frame_count: 16,
            huge_pages: HugePages::Off,
            ..UmemConfig::default()
        };
        let u = Umem::new(&cfg).unwrap();
        assert!(!u.huge());
        assert_eq!(u.len(), 16 * 2048);
        assert_eq!(u.addr() % 4096, 0);
    }
}
