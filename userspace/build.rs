//! Embeds the XDP object built by `cargo xtask build-ebpf` into the daemon.
//!
//! `LIDARXDP_BPF_OBJ` names the object file (xtask sets it). Without it an empty placeholder is
//! embedded, and `lidarxdp run` then asks for `--bpf-object FILE` instead of failing to build:
//! this keeps `cargo clippy`/`cargo test` usable on machines without the BPF toolchain.
use std::{env, fs, path::PathBuf};

fn main() {
    println!("cargo:rerun-if-env-changed=LIDARXDP_BPF_OBJ");
    let out =
        PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("lidarxdp.bpf.o");
    match env::var_os("LIDARXDP_BPF_OBJ") {
        Some(src) => {
            let src = PathBuf::from(src);
            println!("cargo:rerun-if-changed={}", src.display());
            fs::copy(&src, &out)
                .unwrap_or_else(|e| panic!("LIDARXDP_BPF_OBJ={}: {e}", src.display()));
        }
        None => {
            fs::write(&out, b"").expect("write placeholder object");
        }
    }
}
