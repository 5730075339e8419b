//! `lidarxdp run` argument checks that need no privileges: every listener is loopback only,
//! and `--max-subscribers` is range-checked; both fail before the network is touched.
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

/// No listener is served off loopback: the TCP publisher, the metrics endpoint, the live
/// view and the Foxglove server have no authentication. A non-loopback address is refused
/// before the network is touched, naming the flag, its file key and the way across machines;
/// the `--*-public` flags that used to lift this are gone.
#[test]
fn every_listener_is_loopback_only() {
    for (flag, key) in [
        ("--listen", "tcp.listen"),
        ("--metrics", "metrics.listen"),
        ("--view", "view.listen"),
        ("--foxglove", "foxglove.listen"),
    ] {
        for addr in ["0.0.0.0:7510", "10.1.2.3:7510", "[::]:7510"] {
            let (code, err) = run(&[flag, addr]);
            assert_eq!(code, Some(1), "{err}");
            assert!(
                err.contains(&format!(
                    "{flag} ({key}): {addr} is not a loopback address; it has no \
                     authentication, so it listens on loopback only"
                )),
                "{flag} {addr}: {err}"
            );
            assert!(err.contains("SSH tunnel"), "{err}");
        }
        let (code, err) = run(&[&format!("{flag}-public")]);
        assert_eq!(code, Some(2), "{err}");
        assert!(err.contains("unexpected argument"), "{err}");
    }
    // Loopback passes this check (the run then fails later, on the missing calibration file).
    for extra in [
        &["--listen", "127.0.0.1:7510"][..],
        &["--listen", "[::1]:7510"][..],
        &["--metrics", "127.0.0.2:9751"][..],
    ] {
        let (code, err) = run(extra);
        assert_eq!(code, Some(1), "{err}");
        assert!(!err.contains("loopback"), "{extra:?}: {err}");
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
        assert_eq!(code, Some(2), "{err}");
        assert!(
            err.contains(&format!(
                "invalid value '{n}' for '--max-subscribers <MAX_SUBSCRIBERS>': {n} is out of \
                 range; valid 1..=1024"
            )),
            "{err}"
        );
    }
    for n in ["1", "1024"] {
        let (_, err) = run(&["--max-subscribers", n]);
        assert!(!err.contains("--max-subscribers"), "{n}: {err}");
    }
}
