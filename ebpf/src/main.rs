//! The lidarxdp XDP program.
//!
//! For every received frame: parse Ethernet II (plus at most one 802.1Q tag), IPv4 with any
//! header length or IPv6 with its extension headers, and UDP; look the (UDP destination port,
//! source address) pair up in the `SENSORS` hash map (exact source first, then "any source";
//! IPv4 sources are keyed IPv4-mapped, `lidarxdp_common::ipv4_mapped`); a match is redirected with
//! `bpf_redirect_map` into the `XSKS` XSKMAP entry for the frame's RX queue, falling back to
//! `XDP_PASS` when no AF_XDP socket is bound there. Everything else is `XDP_PASS`ed to the
//! kernel untouched. Per-CPU counters (indices in `lidarxdp_common::Counter`) count what
//! happened.
//!
//! IPv4 fragments (Ouster datagrams of 3–25 KB over a 1500-byte MTU): only the first fragment
//! (offset 0, MF set) carries the UDP header, so only it can be matched against `SENSORS`. When
//! it matches, its datagram identity (source, destination, identification, protocol) is recorded
//! in the `FRAGS` LRU hash with the time it was seen, and it is redirected like any sensor
//! packet. A later fragment (offset != 0) is redirected when its own header's identity is in
//! `FRAGS` and was recorded less than `FRAG_TRACK_NS` ago; otherwise it is passed. Entries are
//! never deleted here: a last fragment may arrive before a middle one, and the LRU evicts old
//! entries by itself. This assumes the first fragment arrives before the later ones, which holds
//! for Linux senders (they emit fragments in offset order) and a direct link; a datagram whose
//! later fragment overtakes its first is split between kernel and AF_XDP and lost (counted
//! `frag_passed` here, `timed_out` by userspace reassembly).
//!
//! IPv6 (RFC 8200): the extension-header chain is walked for at most `MAX_IPV6_EXT` (6) headers
//! and `MAX_IPV6_EXT_BYTES` (512) bytes of them (bounds the verifier needs; a sensor sends none
//! or a few): hop-by-hop (0), routing (43), destination options (60), each
//! `(hdr_ext_len + 1) * 8` bytes, and the fragment header (44, 8 bytes, at most one). A chain
//! longer than that, or a second fragment header, is counted `malformed` and passed (the
//! userspace parser, `lidarxdp_core::net`, walks up to 8 and would refuse a second fragment
//! header too). IPv6 fragments follow IPv4's rule exactly: the first fragment (offset 0, M set)
//! carries the UDP header after the rest of the chain (RFC 7112), is matched against `SENSORS`
//! and recorded in `FRAGS` under (source, destination, 32-bit identification, protocol 0: RFC
//! 8200's key, as userspace reassembly uses); a later fragment (offset != 0) is redirected when
//! its key was recorded less than `FRAG_TRACK_NS` ago. An atomic fragment (offset 0, M clear,
//! RFC 6946) is a whole packet: matched and redirected, not recorded. Everything else (ICMPv6,
//! so Neighbor Discovery, TCP, other ports and sources) is `XDP_PASS`ed.
//!
//! References: kernel `Documentation/networking/af_xdp.rst` (XSKMAP redirect),
//! `include/uapi/linux/bpf.h` (`bpf_redirect_map` flags: the low bits are the action returned
//! when the lookup fails), RFC 791 (IPv4 header, IHL, fragmentation section 3.2), RFC 768 (UDP),
//! RFC 8200 (IPv6, its extension headers and fragment header), RFC 7112, RFC 6946, IEEE 802.1Q;
//! `BPF_MAP_TYPE_LRU_HASH` (Linux >= 4.10), bounded loops (Linux >= 5.3).
#![no_std]
#![no_main]

use aya_ebpf::{
    bindings::xdp_action,
    helpers::bpf_ktime_get_ns,
    macros::{map, xdp},
    maps::{HashMap, LruHashMap, PerCpuArray, XskMap},
    programs::XdpContext,
};
use lidarxdp_common::{
    Counter, FILTER_MAP_CAPACITY, FRAG_MAP_CAPACITY, FRAG_TRACK_NS, FilterKey, FilterValue,
    FragKey, FragValue, XSK_MAP_CAPACITY, ipv4_mapped,
};

/// (port, source) -> sensor, written by userspace.
#[map(name = "SENSORS")]
static SENSORS: HashMap<FilterKey, FilterValue> = HashMap::with_max_entries(FILTER_MAP_CAPACITY, 0);

/// (src, dst, IP id, protocol) of sensor datagrams whose first fragment was redirected, so
/// their later fragments follow it. Written only by this program.
#[map(name = "FRAGS")]
static FRAGS: LruHashMap<FragKey, FragValue> = LruHashMap::with_max_entries(FRAG_MAP_CAPACITY, 0);

/// RX queue index -> AF_XDP socket.
#[map(name = "XSKS")]
static XSKS: XskMap = XskMap::with_max_entries(XSK_MAP_CAPACITY, 0);

/// Per-CPU u64 counters indexed by `Counter`.
#[map(name = "COUNTERS")]
static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(Counter::COUNT, 0);

const ETH_HLEN: usize = 14;
const VLAN_HLEN: usize = 4;
const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86DD;
const IPV6_HLEN: usize = 40;
/// IPv6 next-header values of the extension headers walked (RFC 8200 section 4).
const NEXTHDR_HOP: u8 = 0;
const NEXTHDR_ROUTING: u8 = 43;
const NEXTHDR_FRAGMENT: u8 = 44;
const NEXTHDR_DEST: u8 = 60;
/// Most IPv6 extension headers walked, and most bytes of them (verifier bounds).
const MAX_IPV6_EXT: usize = 6;
const MAX_IPV6_EXT_BYTES: usize = 512;
/// IPv6 fragment header offset field: offset mask (already in bytes) and M flag.
const IP6_OFFSET_MASK: u16 = 0xfff8;
const IP6_MF: u16 = 0x0001;
const ETH_P_8021Q: u16 = 0x8100;
const ETH_P_8021AD: u16 = 0x88A8;
const IPPROTO_UDP: u8 = 17;
const UDP_HLEN: usize = 8;
/// IPv4 flags/fragment-offset field: offset mask (8-byte units) and More Fragments bit.
const IP_OFFSET_MASK: u16 = 0x1fff;
const IP_MF: u16 = 0x2000;

#[inline(always)]
fn count(c: Counter) {
    if let Some(v) = COUNTERS.get_ptr_mut(c as u32) {
        // SAFETY: the pointer comes from a per-CPU array lookup, is valid for this CPU for the
        // duration of the program, and no other context on this CPU runs concurrently.
        unsafe { *v += 1 };
    }
}

/// Returns a pointer to `T` at `offset` bytes into the packet, or `Err` if it would run past
/// the end. The explicit comparison against `data_end` is what the verifier needs.
#[inline(always)]
fn ptr_at<T>(ctx: &XdpContext, offset: usize) -> Result<*const T, ()> {
    let start = ctx.data();
    let end = ctx.data_end();
    let len = core::mem::size_of::<T>();
    if start + offset + len > end {
        return Err(());
    }
    Ok((start + offset) as *const T)
}

#[inline(always)]
fn read_u8(ctx: &XdpContext, offset: usize) -> Result<u8, ()> {
    // SAFETY: ptr_at checked that `offset + 1` bytes are inside [data, data_end).
    Ok(unsafe { *ptr_at::<u8>(ctx, offset)? })
}

#[inline(always)]
fn read_be16(ctx: &XdpContext, offset: usize) -> Result<u16, ()> {
    let p = ptr_at::<[u8; 2]>(ctx, offset)?;
    // SAFETY: ptr_at checked that the 2 bytes at `offset` are inside the packet; [u8; 2] has
    // alignment 1.
    Ok(u16::from_be_bytes(unsafe { *p }))
}

#[inline(always)]
fn read_4(ctx: &XdpContext, offset: usize) -> Result<[u8; 4], ()> {
    let p = ptr_at::<[u8; 4]>(ctx, offset)?;
    // SAFETY: ptr_at checked that the 4 bytes at `offset` are inside the packet; alignment 1.
    Ok(unsafe { *p })
}

/// The `N` bytes at `offset`, read behind one bounds check (so the compiler cannot drop a
/// second check the verifier needs for a neighbouring byte).
#[inline(always)]
fn read_n<const N: usize>(ctx: &XdpContext, offset: usize) -> Result<[u8; N], ()> {
    let p = ptr_at::<[u8; N]>(ctx, offset)?;
    // SAFETY: ptr_at checked that the N bytes at `offset` are inside the packet; alignment 1.
    Ok(unsafe { *p })
}

#[inline(always)]
fn read_16(ctx: &XdpContext, offset: usize) -> Result<[u8; 16], ()> {
    let p = ptr_at::<[u8; 16]>(ctx, offset)?;
    // SAFETY: ptr_at checked that the 16 bytes at `offset` are inside the packet; alignment 1.
    Ok(unsafe { *p })
}

/// Entry point attached to the interface. Declared multi-buffer aware (`xdp.frags`, kernel
/// `BPF_F_XDP_HAS_FRAGS`): a frame longer than one buffer (jumbo MTU) reaches it as its first
/// buffer plus fragments, and only the headers, which lie in the first buffer, are read; the
/// AF_XDP socket receives the whole frame as a chain of descriptors (`XDP_USE_SG`). Without
/// the flag the kernel refuses the program on an interface whose MTU exceeds one page.
#[xdp(frags)]
pub fn lidarxdp(ctx: XdpContext) -> u32 {
    count(Counter::Seen);
    match try_lidarxdp(&ctx) {
        Ok(action) => action,
        Err(()) => {
            count(Counter::Malformed);
            count(Counter::Passed);
            xdp_action::XDP_PASS
        }
    }
}

#[inline(always)]
fn pass() -> Result<u32, ()> {
    count(Counter::Passed);
    Ok(xdp_action::XDP_PASS)
}

fn try_lidarxdp(ctx: &XdpContext) -> Result<u32, ()> {
    let mut l3 = ETH_HLEN;
    let mut ethertype = read_be16(ctx, 12)?;
    if ethertype == ETH_P_8021Q || ethertype == ETH_P_8021AD {
        ethertype = read_be16(ctx, ETH_HLEN + 2)?;
        l3 += VLAN_HLEN;
    }
    if ethertype == ETH_P_IPV6 {
        return try_ipv6(ctx, l3);
    }
    if ethertype != ETH_P_IP {
        return pass();
    }
    let ver_ihl = read_u8(ctx, l3)?;
    if ver_ihl >> 4 != 4 {
        return pass();
    }
    let ihl = ((ver_ihl & 0x0f) as usize) * 4;
    if ihl < 20 {
        return Err(());
    }
    if read_u8(ctx, l3 + 9)? != IPPROTO_UDP {
        return pass();
    }
    let frag = read_be16(ctx, l3 + 6)?;
    let src = ipv4_mapped(read_4(ctx, l3 + 12)?);
    if frag & IP_OFFSET_MASK != 0 {
        // A later fragment: no UDP header; follow its first fragment, if that was a sensor's.
        let key = FragKey::new(
            src,
            ipv4_mapped(read_4(ctx, l3 + 16)?),
            u32::from(read_be16(ctx, l3 + 4)?),
            IPPROTO_UDP,
        );
        return later_fragment(ctx, &key);
    }
    let l4 = l3 + ihl;
    // Bound the variable offset for the verifier: IHL <= 60, VLAN <= 4.
    if l4 > ETH_HLEN + VLAN_HLEN + 60 {
        return Err(());
    }
    let dst_port = read_be16(ctx, l4 + 2)?;
    // Make sure the whole UDP header is present.
    ptr_at::<[u8; UDP_HLEN]>(ctx, l4)?;

    let Some(sensor) = sensor_of(dst_port, &src) else {
        return pass();
    };
    let first_fragment = frag & IP_MF != 0;
    if first_fragment {
        let key = FragKey::new(
            src,
            ipv4_mapped(read_4(ctx, l3 + 16)?),
            u32::from(read_be16(ctx, l3 + 4)?),
            IPPROTO_UDP,
        );
        track(&key, &sensor);
    }
    redirect(ctx, first_fragment)
}

/// The sensor for UDP destination port `dst_port` from `src` (16 octets, IPv4 IPv4-mapped):
/// the exact source first, then any source.
#[inline(always)]
fn sensor_of(dst_port: u16, src: &[u8; 16]) -> Option<FilterValue> {
    // SAFETY: HashMap::get returns a reference valid until the program returns; we only copy
    // out of it. The map value type is Copy and fully initialised by userspace.
    match unsafe { SENSORS.get(&FilterKey::new(dst_port, *src)) } {
        Some(v) => Some(*v),
        // SAFETY: as above.
        None => unsafe { SENSORS.get(&FilterKey::new(dst_port, [0; 16])) }.copied(),
    }
}

/// Records the first fragment of a sensor's datagram in `FRAGS` so its later fragments follow.
#[inline(always)]
fn track(key: &FragKey, sensor: &FilterValue) {
    let value = FragValue {
        // SAFETY: bpf_ktime_get_ns has no preconditions.
        first_ns: unsafe { bpf_ktime_get_ns() },
        sensor_id: sensor.sensor_id,
        _pad: [0; 3],
    };
    match FRAGS.insert(key, &value, 0) {
        Ok(()) => count(Counter::FragTracked),
        Err(_) => count(Counter::FragTrackFailed),
    }
}

/// A later fragment (no UDP header): redirected when its datagram's first fragment was a
/// sensor's and was seen less than `FRAG_TRACK_NS` ago, else passed.
#[inline(always)]
fn later_fragment(ctx: &XdpContext, key: &FragKey) -> Result<u32, ()> {
    // SAFETY: bpf_ktime_get_ns has no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    // SAFETY: the reference returned by get is valid until the program returns; we only
    // copy a field out of it.
    let tracked = match unsafe { FRAGS.get(key) } {
        Some(v) => now.wrapping_sub(v.first_ns) < FRAG_TRACK_NS,
        None => false,
    };
    if !tracked {
        count(Counter::FragPassed);
        return pass();
    }
    redirect(ctx, true)
}

/// The IPv6 packet at `l3`: walks the extension headers (module docs), then steers UDP and
/// fragments as the IPv4 path does.
#[inline(always)]
fn try_ipv6(ctx: &XdpContext, l3: usize) -> Result<u32, ()> {
    if read_u8(ctx, l3)? >> 4 != 6 {
        return pass();
    }
    let mut next = read_u8(ctx, l3 + 6)?;
    let src = read_16(ctx, l3 + 8)?;
    let l4_start = l3 + IPV6_HLEN;
    let mut off = l4_start;
    // (offset/flags field, identification) of the fragment header, if any.
    let mut frag: Option<(u16, u32)> = None;
    let mut walked = 0;
    while walked < MAX_IPV6_EXT {
        if next == NEXTHDR_FRAGMENT {
            if frag.is_some() {
                return Err(());
            }
            let [nh, _, f0, f1, i0, i1, i2, i3] = read_n::<8>(ctx, off)?;
            let fo = u16::from_be_bytes([f0, f1]);
            let id = u32::from_be_bytes([i0, i1, i2, i3]);
            next = nh;
            off += 8;
            frag = Some((fo, id));
            if fo & IP6_OFFSET_MASK != 0 {
                // A later fragment: what follows is data, not headers.
                break;
            }
        } else if next == NEXTHDR_HOP || next == NEXTHDR_ROUTING || next == NEXTHDR_DEST {
            let [nh, hlen] = read_n::<2>(ctx, off)?;
            next = nh;
            off += (hlen as usize + 1) * 8;
        } else {
            break;
        }
        // Bound the variable offset for the verifier.
        if off > l4_start + MAX_IPV6_EXT_BYTES {
            return Err(());
        }
        walked += 1;
    }
    if let Some((fo, id)) = frag
        && fo & IP6_OFFSET_MASK != 0
    {
        let key = FragKey::new(src, read_16(ctx, l3 + 24)?, id, 0);
        return later_fragment(ctx, &key);
    }
    if next == NEXTHDR_FRAGMENT
        || next == NEXTHDR_HOP
        || next == NEXTHDR_ROUTING
        || next == NEXTHDR_DEST
    {
        // More extension headers than the walk's bound.
        return Err(());
    }
    if next != IPPROTO_UDP {
        return pass();
    }
    // Bound the variable offset for the verifier (checked in the loop; stated again here).
    if off > ETH_HLEN + VLAN_HLEN + IPV6_HLEN + MAX_IPV6_EXT_BYTES {
        return Err(());
    }
    let [_, _, p0, p1, ..] = read_n::<UDP_HLEN>(ctx, off)?;
    let dst_port = u16::from_be_bytes([p0, p1]);
    let Some(sensor) = sensor_of(dst_port, &src) else {
        return pass();
    };
    let first_fragment = matches!(frag, Some((fo, _)) if fo & IP6_MF != 0);
    if let Some((_, id)) = frag
        && first_fragment
    {
        let key = FragKey::new(src, read_16(ctx, l3 + 24)?, id, 0);
        track(&key, &sensor);
    }
    redirect(ctx, first_fragment)
}

/// Redirects the frame into the XSKMAP entry of its RX queue, or passes it when no socket is
/// bound there. `fragment` adds the frame to the `frag_redirected` counter.
#[inline(always)]
fn redirect(ctx: &XdpContext, fragment: bool) -> Result<u32, ()> {
    // SAFETY: ctx.ctx points to the kernel's xdp_md for this invocation.
    let queue = unsafe { (*ctx.ctx).rx_queue_index };
    match XSKS.redirect(queue, xdp_action::XDP_PASS as u64) {
        Ok(action) if action == xdp_action::XDP_REDIRECT => {
            count(Counter::Redirected);
            if fragment {
                count(Counter::FragRedirected);
            }
            Ok(action)
        }
        _ => {
            count(Counter::NoSocket);
            count(Counter::Passed);
            Ok(xdp_action::XDP_PASS)
        }
    }
}

#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

/// License section: the program is GPL-2.0-only (as the crate says) so it may call GPL-only helpers.
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
