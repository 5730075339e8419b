//! Shared by the decoder benchmarks: a criterion measurement of the calling thread's CPU time.

use std::time::Duration;

use criterion::measurement::{Measurement, ValueFormatter, WallTime};

/// CPU time of the calling thread.
pub struct ThreadCpu(pub WallTime);

fn thread_cpu_now() -> Duration {
    Duration::from_nanos(lidarxdp::capture::thread_cpu_ns())
}

impl Measurement for ThreadCpu {
    type Intermediate = Duration;
    type Value = Duration;

    fn start(&self) -> Duration {
        thread_cpu_now()
    }
    fn end(&self, i: Duration) -> Duration {
        thread_cpu_now().saturating_sub(i)
    }
    fn add(&self, v1: &Duration, v2: &Duration) -> Duration {
        *v1 + *v2
    }
    fn zero(&self) -> Duration {
        Duration::ZERO
    }
    fn to_f64(&self, value: &Duration) -> f64 {
        value.as_nanos() as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        self.0.formatter()
    }
}
