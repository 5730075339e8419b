//! Embeds the XDP object built by `cargo xtask build-ebpf` into the daemon.
//!
//! `LIDARXDP_BPF_OBJ` names the object file (xtask sets it). Without it an empty placeholder is
//! embedded, and `lidarxdp run` then asks for `--bpf-object FILE` instead of failing to build:
//! this keeps `cargo clippy`/`cargo test` usable on machines without the BPF toolchain.
//!
//! It also embeds the live view's three.js files (`run --view`, `src/view/`), which `npm ci`
//! puts in `<repo>/web/node_modules` (`cargo xtask setup`): `view_assets.rs` in `OUT_DIR`
//! lists them with `include_bytes!`, or says which one is missing; the build succeeds either
//! way and `--view` is refused without them.
use std::{env, fs, path::PathBuf};

/// The three.js files the page imports: (URL path under `/three/`, path under
/// `web/node_modules/three/`). three.module.js imports three.core.js beside it; OrbitControls
/// imports `three`, which the page's import map resolves to three.module.js.
const THREE_FILES: &[(&str, &str)] = &[
    ("three.module.js", "build/three.module.js"),
    ("three.core.js", "build/three.core.js"),
    ("OrbitControls.js", "examples/jsm/controls/OrbitControls.js"),
    ("LICENSE", "LICENSE"),
];

fn view_assets() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let web = manifest
        .parent()
        .expect("userspace/ is inside the repository")
        .join("web");
    // A directory: cargo rescans it (node_modules included) for a newer file, so `npm ci`
    // re-runs this script; a missing file would re-run it on every build instead.
    println!("cargo:rerun-if-changed={}", web.display());
    let three = web.join("node_modules/three");
    let mut code = String::from("/// The three.js files: (name under `/three/`, bytes).\n");
    let missing = THREE_FILES
        .iter()
        .map(|(_, rel)| three.join(rel))
        .find(|p| !p.is_file());
    match missing {
        Some(p) => {
            code += "pub static THREE: &[(&str, &[u8])] = &[];\n";
            code += &format!(
                "/// The first file missing at build time.\npub const MISSING: Option<&str> = Some({:?});\n",
                p.display().to_string()
            );
        }
        None => {
            code += "pub static THREE: &[(&str, &[u8])] = &[\n";
            for (name, rel) in THREE_FILES {
                let path = three.join(rel);
                code += &format!(
                    "    ({name:?}, include_bytes!({:?})),\n",
                    path.display().to_string()
                );
            }
            code += "];\n/// The first file missing at build time.\npub const MISSING: Option<&str> = None;\n";
        }
    }
    let out =
        PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("view_assets.rs");
    fs::write(&out, code).expect("write view_assets.rs");
}

fn main() {
    view_assets();
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
