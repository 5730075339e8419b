//! Once warm, the decoder thread does not allocate: its frames' point buffers come from the
//! publisher's LIFO pool and go back to it when the last subscriber has sent them. Own test
//! binary: it installs a counting global allocator (counting only on the decoder thread).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lidarxdp::offline::udp_payloads;
use lidarxdp::publish::{BufferPool, Publisher, PublisherConfig};
use lidarxdp_client::Subscriber;
use lidarxdp_core::sensor::{SensorConfig, SensorModel};

struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}
static ALLOCS: AtomicU64 = AtomicU64::new(0);
/// Sizes of the first 16 counted allocations (realloc: 1e9 + new size), for the failure message.
static SIZES: [AtomicU64; 16] = [const { AtomicU64::new(0) }; 16];

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            let i = ALLOCS.fetch_add(1, Ordering::Relaxed) as usize;
            if i < 16 {
                SIZES[i].store(l.size() as u64, Ordering::Relaxed);
            }
        }
        // SAFETY: same contract as ours.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            let i = ALLOCS.fetch_add(1, Ordering::Relaxed) as usize;
            if i < 16 {
                SIZES[i].store(1_000_000_000 + n as u64, Ordering::Relaxed);
            }
        }
        // SAFETY: same contract as ours.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data/");

/// A VLP-16 (azimuth-cut assembler) and a Pandar40P (Hesai's own per-channel cutter) decoder,
/// each fed its capture in a loop after warming up, allocate nothing on the decoder thread:
/// their frame buffers come from the publisher's LIFO pool. (Run one after the other in one
/// test: the allocation counter is process-wide.)
#[test]
fn warm_decoder_does_not_allocate() {
    check(
        SensorModel::Vlp16,
        "velodyne/vlp16/vlp16_dual_nebula_603pkt.pcap",
        "velodyne/vlp16/calibration/VLP16db.yaml",
    );
    ALLOCS.store(0, Ordering::Relaxed);
    check(
        SensorModel::Pandar40p,
        "hesai/pandar40p/pandar40p_nebula.pcap",
        "hesai/pandar40p/Pandar40P.csv",
    );
}

fn check(model: SensorModel, pcap: &str, calib: &str) {
    let buffers = Arc::new(BufferPool::new(8));
    let (publisher, sender) = Publisher::spawn(
        PublisherConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            frame_queue: 8,
            ..PublisherConfig::default()
        },
        buffers.clone(),
    )
    .unwrap();
    let mut sub = Subscriber::connect(publisher.local_addr()).unwrap();
    sub.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let reader = std::thread::spawn(move || {
        let mut n = 0u64;
        while sub.next_frame().unwrap().is_some() {
            n += 1;
        }
        n
    });
    let payloads: Vec<Vec<u8>> = udp_payloads(&std::path::Path::new(DATA).join(pcap))
        .unwrap()
        .map(|d| d.unwrap().payload)
        .collect();
    let cfg = SensorConfig::new(0, model, std::path::Path::new(DATA).join(calib));
    let mut p = lidarxdp::calibration::pipeline(&cfg).unwrap();
    p.set_buffer_source(buffers);
    let mut out = Vec::with_capacity(8);
    let pool = publisher.pool().clone();
    let mut pushed = 0u64;
    let mut run = |passes: usize, out: &mut Vec<_>| {
        let mut frames = 0;
        for _ in 0..passes {
            for pl in &payloads {
                p.push(pl, 1_000, out);
                for f in out.drain(..) {
                    assert!(sender.send(f));
                    frames += 1;
                    pushed += 1;
                    // Wait until the subscriber has taken the frame and its buffer is back in
                    // the pool (a loaded machine must not turn into a pool miss). Reading the
                    // pool's atomics allocates nothing.
                    let deadline = std::time::Instant::now() + Duration::from_secs(20);
                    while pool.counters().returned < pushed {
                        assert!(
                            std::time::Instant::now() < deadline,
                            "frame {pushed} not returned"
                        );
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
            }
        }
        frames
    };
    let warm = run(3, &mut out);
    COUNTING.with(|c| c.set(true));
    let measured = run(5, &mut out);
    COUNTING.with(|c| c.set(false));
    let allocs = ALLOCS.load(Ordering::Relaxed);
    let c = publisher.shutdown().unwrap();
    let received = reader.join().unwrap();
    eprintln!(
        "{model}: warm-up {warm} frames, measured {measured} frames, {allocs} allocations; {c:?}"
    );
    assert!(measured >= 15, "{model}: {measured} frames");
    assert_eq!(received, (warm + measured) as u64);
    assert_eq!(
        allocs,
        0,
        "{model}: decoder thread allocated {allocs} times in {measured} frames; sizes {:?}",
        SIZES
            .iter()
            .map(|s| s.load(Ordering::Relaxed))
            .collect::<Vec<_>>()
    );
    assert!(c.pool.hits >= measured as u64, "{model}: {c:?}");
}
