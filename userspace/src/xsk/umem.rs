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
//! handed to the kernel twice by accident.
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

    /// Gives up the token for the raw address written to the fill ring.
    pub(crate) fn into_raw(self) -> u64 {
        self.0
    }
}

/// A fixed-capacity stack of owned frames. Never allocates after construction.
#[derive(Debug)]
pub struct FreeList {
    frames: Vec<u64>,
}

impl FreeList {
    /// All `frame_count` frames of a UMEM with `frame_size`-byte frames, lowest address on
    /// top.
    pub fn full(frame_count: u32, frame_size: u32) -> Self {
        let frames = (0..frame_count as u64)
            .rev()
            .map(|i| i * frame_size as u64)
            .collect();
        Self { frames }
    }

    /// Takes a frame.
    pub fn pop(&mut self) -> Option<FrameAddr> {
        self.frames.pop().map(FrameAddr)
    }

    /// Returns a frame. Cannot grow past the UMEM's frame count: tokens are unique.
    pub fn push(&mut self, frame: FrameAddr) {
        debug_assert!(self.frames.len() < self.frames.capacity());
        self.frames.push(frame.0);
    }

    /// Frames held.
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    /// No frames held.
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }
}

/// Checks an RX descriptor against the UMEM geometry (aligned chunks, sans-IO).
///
/// Returns the owning frame's address and the byte offset/length of the packet inside the
/// UMEM, or `None` if `addr + len` is not inside one frame of a `umem_len`-byte UMEM.
pub fn check_desc(addr: u64, len: u32, frame_size: u32, umem_len: u64) -> Option<(FrameAddr, u64)> {
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

    /// Validates an RX descriptor and returns its frame token and packet bytes.
    ///
    /// # Safety
    /// The descriptor must have been received from the RX ring bound to this UMEM and not
    /// yet returned to the kernel: the kernel then does not write the frame, so the slice
    /// is not mutated while the caller holds it. The caller must return the token (or drop
    /// the slice) before giving the frame back to the kernel.
    pub unsafe fn rx_frame(&self, addr: u64, len: u32) -> Option<(FrameAddr, &[u8])> {
        let (frame, off) = check_desc(addr, len, self.frame_size, self.len)?;
        // SAFETY: `check_desc` proved off + len <= self.len, so the range is inside the
        // mapping (owned by self, hence alive for the returned lifetime); the caller
        // guarantees the kernel does not write it meanwhile (see `# Safety`).
        let bytes = unsafe {
            std::slice::from_raw_parts(self.base.as_ptr().add(off as usize), len as usize)
        };
        Some((frame, bytes))
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
    fn free_list_hands_out_each_frame_once() {
        let mut fl = FreeList::full(4, 4096);
        let got: Vec<u64> = std::iter::from_fn(|| fl.pop().map(FrameAddr::into_raw)).collect();
        assert_eq!(got, vec![0, 4096, 8192, 12288]);
        assert!(fl.is_empty());
        fl.push(FrameAddr(8192));
        assert_eq!(fl.len(), 1);
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
