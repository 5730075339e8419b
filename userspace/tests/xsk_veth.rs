//! Privileged AF_XDP tests on a veth pair between two throwaway network namespaces.
//!
//! Needs root (CI runs as root); otherwise each test prints why and passes. Every test
//! creates its own namespaces through the test kit (`lxh-xsk-<id>` = `a`, `lxs-xsk-<id>` = `b`,
//! `<id>` unique per process and call) holding the veth ends (one RX and one TX queue each),
//! runs its body on a thread that has entered namespace `a` (so the socket, interface lookup
//! and XDP attach all happen there), and deletes both namespaces on drop, even when the test
//! fails. Traffic is only sent between addresses inside those namespaces. A binary of its own:
//! its huge-page test reserves the pages it then requires, which daemons started by tests
//! running at the same time could take.
//!
//! The end-to-end RX test loads a 6-instruction XDP program (raw `bpf(2)`, no object file):
//! `return bpf_redirect_map(&xskmap, ctx->rx_queue_index, XDP_PASS)`, so the socket layer is
//! tested on its own, independent of the real program in `ebpf/` (which `e2e_xdp.rs` covers).

use std::io;
use std::net::UdpSocket;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use lidarxdp::xsk::{
    BindMode, BoundMode, HugePages, UmemConfig, XdpStatistics, XskConfig, XskError, XskSocket,
    huge_pages_for, reserve_hugepages,
};
use lidarxdp_core::net::parse_udp_frame;
use lidarxdp_testkit::{NetnsPair, PairSpec, in_netns};

macro_rules! require_root {
    ($test:literal) => {
        if !lidarxdp_testkit::privileged() {
            eprintln!("SKIPPED: xsk_veth::{}", $test);
            return;
        }
    };
}

const A_IP: &str = "10.201.0.1";
const B_IP: &str = "10.201.0.2";
const A_MAC: &str = "02:00:00:c9:00:01";
const B_MAC: &str = "02:00:00:c9:00:02";

/// Two namespaces joined by a veth pair (the test kit's [`NetnsPair`]): `a` holds the socket
/// and the XDP program, `b` sends. Fixed MACs and permanent neighbour entries: B reaches A
/// without ARP (once the XDP program redirects everything, A never answers). Deleted on drop.
struct TestNet {
    ns_a: String,
    ns_b: String,
    if_a: String,
    _pair: NetnsPair,
}

impl TestNet {
    fn new() -> TestNet {
        let mut spec = PairSpec::unique("xsk")
            .macs(B_MAC, A_MAC)
            .static_neighbours();
        (spec.sensor_ip, spec.host_ip) = (B_IP.into(), A_IP.into());
        let pair = NetnsPair::create(spec).unwrap_or_else(|e| panic!("{e:#}"));
        TestNet {
            ns_a: pair.host_ns.clone(),
            ns_b: pair.sensor_ns.clone(),
            if_a: pair.host_if.clone(),
            _pair: pair,
        }
    }
}

fn small_umem(huge_pages: HugePages) -> UmemConfig {
    UmemConfig {
        frame_count: 1024,
        frame_size: 2048,
        fill_size: 1024,
        comp_size: 64,
        rx_size: 1024,
        huge_pages,
    }
}

fn xsk_cfg(ifname: &str, mode: BindMode) -> XskConfig {
    XskConfig {
        mode,
        bind_retry: Duration::from_secs(5),
        ..XskConfig::new(ifname, 0)
    }
}

#[test]
fn veth_binds_copy_mode_with_zero_stats_on_huge_pages() {
    require_root!("veth_binds_copy_mode_with_zero_stats_on_huge_pages");
    let _ = env_logger::builder().is_test(true).try_init();
    let umem = UmemConfig::default();
    let need = huge_pages_for(umem.umem_bytes());
    let free = reserve_hugepages(need).expect("reserve huge pages");
    let huge = free >= need;
    eprintln!("huge pages: need {need}, {free} free after reserving");
    let umem = UmemConfig {
        huge_pages: if huge {
            HugePages::Require
        } else {
            HugePages::Prefer
        },
        ..umem
    };

    let net = TestNet::new();
    in_netns(&net.ns_a, || {
        let mut xsk = XskSocket::open(&umem, &xsk_cfg(&net.if_a, BindMode::Auto))
            .unwrap_or_else(|e| panic!("open: {e}"));
        assert_eq!(xsk.bound_mode(), BoundMode::Copy, "veth has no zero-copy");
        assert_eq!(xsk.statistics().unwrap(), XdpStatistics::default());
        assert!(xsk.fd() >= 0);
        if huge {
            assert!(xsk.uses_huge_pages(), "{need} huge pages were free");
        } else {
            eprintln!("NOTE: could not reserve {need} huge pages; UMEM on normal pages");
        }
        // No XDP program: nothing can arrive.
        assert_eq!(xsk.rx_burst(64, |_| panic!("unexpected packet")), 0);
        assert!(!xsk.poll_rx(Duration::from_millis(10)).unwrap());
        eprintln!(
            "fill ring needs wakeup right after bind: {}",
            xsk.fill_needs_wakeup()
        );
        assert_eq!(xsk.counters().snapshot(), Default::default());
    });
}

#[test]
fn veth_rejects_forced_zero_copy() {
    require_root!("veth_rejects_forced_zero_copy");
    let net = TestNet::new();
    in_netns(&net.ns_a, || {
        let e = XskSocket::open(
            &small_umem(HugePages::Off),
            &xsk_cfg(&net.if_a, BindMode::ZeroCopy),
        )
        .unwrap_err();
        eprintln!("forced zero-copy on veth: {e}");
        assert!(matches!(e, XskError::Bind { .. }), "{e}");
        assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP), "{e}");
    });
}

#[test]
fn second_socket_on_a_queue_is_ebusy_then_rebinds() {
    require_root!("second_socket_on_a_queue_is_ebusy_then_rebinds");
    let _ = env_logger::builder().is_test(true).try_init();
    let net = TestNet::new();
    in_netns(&net.ns_a, || {
        let umem = small_umem(HugePages::Off);
        let first = XskSocket::open(&umem, &xsk_cfg(&net.if_a, BindMode::Copy)).unwrap();
        let short = XskConfig {
            bind_retry: Duration::from_millis(100),
            ..xsk_cfg(&net.if_a, BindMode::Copy)
        };
        let t = Instant::now();
        let e = XskSocket::open(&umem, &short).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EBUSY), "{e}");
        match e {
            XskError::Bind { attempts, .. } => assert!(attempts > 1, "EBUSY is retried"),
            other => panic!("{other}"),
        }
        assert!(t.elapsed() >= Duration::from_millis(100));
        drop(first);
        let t = Instant::now();
        let again = XskSocket::open(&umem, &xsk_cfg(&net.if_a, BindMode::Copy))
            .unwrap_or_else(|e| panic!("rebind after close: {e}"));
        eprintln!("rebind right after close took {:?}", t.elapsed());
        assert_eq!(again.bound_mode(), BoundMode::Copy);
    });
}

/// Raw `bpf(2)` with a 128-byte zeroed `union bpf_attr` (offsets from
/// include/uapi/linux/bpf.h, checked against this machine's header).
fn bpf(cmd: libc::c_long, attr: &mut [u8; 128]) -> io::Result<OwnedFd> {
    // SAFETY: `attr` is a valid 128-byte buffer; every pointer stored in it refers to data
    // that outlives this call.
    let rc = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), attr.len()) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: on success these commands return a new fd we own (UPDATE returns 0, which we
    // never wrap: see `update_xskmap`).
    Ok(unsafe { OwnedFd::from_raw_fd(rc as i32) })
}

fn put32(a: &mut [u8; 128], off: usize, v: u32) {
    a[off..off + 4].copy_from_slice(&v.to_ne_bytes());
}

fn put64(a: &mut [u8; 128], off: usize, v: u64) {
    a[off..off + 8].copy_from_slice(&v.to_ne_bytes());
}

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_XDP: u32 = 37;
const BPF_FUNC_REDIRECT_MAP: i32 = 51;
const XDP_PASS: i32 = 2;

/// One `struct bpf_insn` as a little-endian u64: code, dst|src<<4, off, imm.
fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> u64 {
    code as u64
        | ((dst | src << 4) as u64) << 8
        | (off as u16 as u64) << 16
        | (imm as u32 as u64) << 32
}

/// Holds the XDP attachment (bpf_link: detaches when the fd closes) and the XSKMAP.
struct RedirectAll {
    map: OwnedFd,
    _link: OwnedFd,
}

fn attach_redirect_all(ifindex: u32) -> io::Result<RedirectAll> {
    let mut a = [0u8; 128];
    put32(&mut a, 0, BPF_MAP_TYPE_XSKMAP);
    put32(&mut a, 4, 4); // key_size
    put32(&mut a, 8, 4); // value_size
    put32(&mut a, 12, 1); // max_entries: queue 0 only
    let map = bpf(BPF_MAP_CREATE, &mut a)?;

    let prog = [
        insn(0x61, 2, 1, 16, 0), // r2 = *(u32 *)(r1 + 16)   ctx->rx_queue_index
        insn(0x18, 1, 1, 0, map.as_raw_fd()), // r1 = map fd (ld_imm64, BPF_PSEUDO_MAP_FD)
        insn(0, 0, 0, 0, 0),
        insn(0xb7, 3, 0, 0, XDP_PASS), // r3 = XDP_PASS (action when the key is empty)
        insn(0x85, 0, 0, 0, BPF_FUNC_REDIRECT_MAP), // call bpf_redirect_map
        insn(0x95, 0, 0, 0, 0),        // exit
    ];
    let license = c"GPL";
    let mut log = vec![0u8; 4096];
    let mut a = [0u8; 128];
    put32(&mut a, 0, BPF_PROG_TYPE_XDP);
    put32(&mut a, 4, prog.len() as u32);
    put64(&mut a, 8, prog.as_ptr() as u64);
    put64(&mut a, 16, license.as_ptr() as u64);
    put32(&mut a, 24, 1); // log_level
    put32(&mut a, 28, log.len() as u32);
    put64(&mut a, 32, log.as_mut_ptr() as u64);
    put32(&mut a, 68, BPF_XDP); // expected_attach_type
    let prog_fd = bpf(BPF_PROG_LOAD, &mut a).map_err(|e| {
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        io::Error::new(
            e.kind(),
            format!(
                "BPF_PROG_LOAD: {e}: {}",
                String::from_utf8_lossy(&log[..end])
            ),
        )
    })?;

    let mut a = [0u8; 128];
    put32(&mut a, 0, prog_fd.as_raw_fd() as u32);
    put32(&mut a, 4, ifindex);
    put32(&mut a, 8, BPF_XDP);
    let link = bpf(BPF_LINK_CREATE, &mut a)?;
    Ok(RedirectAll { map, _link: link })
}

fn update_xskmap(map: &OwnedFd, queue: u32, xsk_fd: i32) -> io::Result<()> {
    let (key, value) = (queue, xsk_fd as u32);
    let mut a = [0u8; 128];
    put32(&mut a, 0, map.as_raw_fd() as u32);
    put64(&mut a, 8, &key as *const u32 as u64);
    put64(&mut a, 16, &value as *const u32 as u64);
    // SAFETY: valid attr buffer; key/value outlive the call. Returns 0, not an fd.
    let rc = unsafe { libc::syscall(libc::SYS_bpf, BPF_MAP_UPDATE_ELEM, a.as_mut_ptr(), a.len()) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[test]
fn veth_rx_end_to_end_through_a_minimal_redirect_program() {
    require_root!("veth_rx_end_to_end_through_a_minimal_redirect_program");
    let _ = env_logger::builder().is_test(true).try_init();
    // Fewer frames than packets (recycling must work); then more frames than fill slots
    // (frames wait on the free list).
    for (frames, fill) in [(256, 256), (512, 128)] {
        rx_end_to_end(UmemConfig {
            frame_count: frames,
            fill_size: fill,
            rx_size: 256,
            ..small_umem(HugePages::Off)
        });
    }
}

fn rx_end_to_end(umem: UmemConfig) {
    let net = TestNet::new();
    const PAYLOAD_LEN: usize = 1200;
    const COUNT: usize = 300; // more than one 64-descriptor burst
    let payload = |i: usize| -> Vec<u8> {
        let mut p: Vec<u8> = (0..PAYLOAD_LEN).map(|j| (i * 7 + j) as u8).collect();
        p[..4].copy_from_slice(&(i as u32).to_be_bytes());
        p
    };

    // One sender socket for the whole run, bound in B's namespace to a port the kernel picks
    // (a socket stays in the namespace it was created in, whichever thread sends on it): no
    // fixed port that another socket of the namespace could hold.
    let sender = in_netns(&net.ns_b, || UdpSocket::bind((B_IP, 0)).unwrap());
    let sender_port = sender.local_addr().unwrap().port();
    in_netns(&net.ns_a, || {
        let mut xsk = XskSocket::open(&umem, &xsk_cfg(&net.if_a, BindMode::Auto)).unwrap();
        let redirect = attach_redirect_all(xsk.ifindex()).expect("attach XDP");
        update_xskmap(&redirect.map, 0, xsk.fd()).expect("XSKMAP[0] = xsk");

        let mut seen = vec![false; COUNT];
        let mut other = 0usize;
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut sent = 0;
        while seen.iter().any(|s| !s) && Instant::now() < deadline {
            // Send in small batches so the 256-entry RX ring cannot overflow.
            if sent < COUNT {
                let batch: Vec<Vec<u8>> = (sent..(sent + 50).min(COUNT)).map(payload).collect();
                sent += batch.len();
                for p in &batch {
                    sender.send_to(p, (A_IP, 7502)).unwrap();
                }
            }
            xsk.poll_rx(Duration::from_millis(100)).unwrap();
            while xsk.rx_burst(64, |frame| match parse_udp_frame(frame) {
                Ok(d) if d.dst_port == 7502 => {
                    assert_eq!(d.src_ip, std::net::IpAddr::from([10, 201, 0, 2]));
                    assert_eq!(d.dst_ip, std::net::IpAddr::from([10, 201, 0, 1]));
                    assert_eq!(d.src_port, sender_port);
                    assert_eq!(&frame[..6], &[2, 0, 0, 0xc9, 0, 1], "dst MAC");
                    let i = u32::from_be_bytes(d.payload[..4].try_into().unwrap()) as usize;
                    assert_eq!(d.payload, &payload(i)[..], "payload of datagram {i}");
                    assert!(!seen[i], "datagram {i} twice");
                    seen[i] = true;
                }
                _ => other += 1, // e.g. IPv6 ND/MLD from B's interface
            }) > 0
            {}
        }
        let got = seen.iter().filter(|s| **s).count();
        let stats = xsk.statistics().unwrap();
        let c = xsk.counters().snapshot();
        eprintln!(
            "{} frames, fill ring {}: received {got}/{COUNT} (+{other} other frames), {c:?}, \
             {stats:?}, {:?}",
            umem.frame_count,
            umem.fill_size,
            xsk.bound_mode()
        );
        assert_eq!(got, COUNT, "every datagram arrives through the XSK");
        assert_eq!(c.packets as usize, COUNT + other);
        assert_eq!(c.invalid_descs, 0);
        assert_eq!(stats.rx_invalid_descs, 0);
        assert!(c.bursts > 0);
        assert_eq!(
            c.fill_ring_full > 0,
            umem.fill_size < umem.frame_count,
            "frames wait on the free list only when the fill ring is smaller"
        );
        assert!(
            c.bytes as usize >= COUNT * (14 + 20 + 8 + PAYLOAD_LEN),
            "bytes count whole frames"
        );
    });
}
