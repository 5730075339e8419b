//! `lidarxdp run` argument checks that need no privileges: a non-loopback `--listen` needs
//! `--listen-public`, and `--max-subscribers` is range-checked; both fail before the network is
//! touched.
use std::process::Command;

/// Runs `lidarxdp run` with a VLP-16 and a calibration file that does not exist, plus `extra`;
/// returns (exit code, stderr).
fn run(extra: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_lidarxdp"))
        .args([
            "run",
            "--iface",
            "lo",
            "--sensor",
            "vlp16",
            "--calibration",
            "/nonexistent/lidarxdp-calibration.yaml",
        ])
        .args(extra)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn non_loopback_listen_needs_listen_public() {
    for addr in ["0.0.0.0:7510", "10.1.2.3:7510", "[::]:7510"] {
        let (code, err) = run(&["--listen", addr]);
        assert_eq!(code, Some(1), "{err}");
        assert!(err.contains("--listen-public"), "{addr}: {err}");
        assert!(err.contains("not a loopback address"), "{addr}: {err}");
    }
    // Loopback needs no flag, and with the flag a public address passes this check (the run
    // then fails later, on the missing calibration file).
    for extra in [
        &["--listen", "127.0.0.1:7510"][..],
        &["--listen", "[::1]:7510"][..],
        &["--listen", "0.0.0.0:7510", "--listen-public"][..],
    ] {
        let (code, err) = run(extra);
        assert_eq!(code, Some(1), "{err}");
        assert!(!err.contains("--listen-public"), "{extra:?}: {err}");
        assert!(
            err.contains("lidarxdp-calibration.yaml"),
            "{extra:?}: {err}"
        );
    }
}

#[test]
fn max_subscribers_is_range_checked() {
    for n in ["0", "1025"] {
        let (code, err) = run(&["--max-subscribers", n]);
        assert_eq!(code, Some(1), "{err}");
        assert!(
            err.contains(&format!(
                "--max-subscribers: {n} is out of range; valid 1..=1024"
            )),
            "{err}"
        );
    }
    for n in ["1", "1024"] {
        let (_, err) = run(&["--max-subscribers", n]);
        assert!(!err.contains("--max-subscribers"), "{n}: {err}");
    }
}
