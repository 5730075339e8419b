//! What `run --record-pcap` costs the capture thread: the time of [`RecordTap::ethernet`] (take
//! a pool buffer, copy the frame, queue it) per recorded packet, for a VLP-16 data packet's
//! Ethernet frame (1,248 bytes) and, through [`RecordTap::datagram`], a socket backend's
//! payload behind synthesized headers.
//!
//! Each iteration records a batch of 4,096 packets (half the pool, so none is dropped) and is
//! timed alone, as the recording thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`: the machine is
//! shared); between iterations, untimed, the writer thread drains the queue into `/dev/null`.
//! ns/packet = time per iteration / 4,096 (criterion "elements"). At the end the bench checks
//! that nothing was dropped.
//!
//! Run: `cargo bench -p lidarxdp --bench record_pcap`.

use std::time::Duration;

use common::ThreadCpu;
use criterion::measurement::{Measurement, WallTime};
use criterion::{Criterion, Throughput, black_box, criterion_group, criterion_main};
use lidarxdp::capture::{RecordConfig, RecordTap, Recorder};
use lidarxdp_core::net::UdpDatagram;

mod common;

const BATCH: u64 = 4096;

/// Waits until the writer has written `n` packets in all.
fn drained(r: &Recorder, n: u64) {
    while r.counters().packets < n {
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn bench(c: &mut Criterion<ThreadCpu>) {
    let clock = ThreadCpu(WallTime);
    let cfg = RecordConfig::new("/dev/null".into(), None, None, [10, 0, 0, 1]).unwrap();
    let recorder = Recorder::start(cfg).unwrap();
    let tap: RecordTap = recorder.tap();
    let frame = vec![0x5au8; 1248];
    let payload = vec![0x5au8; 1206];
    let mut written = 0;
    let mut g = c.benchmark_group("record_pcap");
    g.throughput(Throughput::Elements(BATCH));
    g.bench_function("ethernet_1248B", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for i in 0..iters {
                let t = clock.start();
                for k in 0..BATCH {
                    tap.ethernet(black_box(i * BATCH + k), black_box(&frame));
                }
                total += clock.end(t);
                written += BATCH;
                drained(&recorder, written);
            }
            total
        })
    });
    g.bench_function("datagram_1206B_synthesized", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for i in 0..iters {
                let t = clock.start();
                for k in 0..BATCH {
                    let d = UdpDatagram {
                        src_ip: [192, 168, 1, 201].into(),
                        dst_ip: [0; 4].into(),
                        src_port: 2368,
                        dst_port: 2368,
                        payload: black_box(&payload),
                    };
                    tap.datagram(black_box(i * BATCH + k), &d, &[0; 12]);
                }
                total += clock.end(t);
                written += BATCH;
                drained(&recorder, written);
            }
            total
        })
    });
    g.finish();
    let c = recorder.finish();
    assert_eq!((c.dropped, c.errors), (0, 0), "{c:?}");
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .with_measurement(ThreadCpu(WallTime))
        .measurement_time(Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
