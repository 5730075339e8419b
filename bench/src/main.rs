//! Benchmark harness placeholder; the AF_XDP vs socket comparison arrives with issue 4.
fn main() {
    eprintln!("lidarxdp-bench: not implemented yet (issue 4)");
}
