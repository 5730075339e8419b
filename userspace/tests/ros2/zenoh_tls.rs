//! zenoh over TLS (`docs/deploy.md`, "Across machines: a remote router over TLS"): the daemon
//! and an independent subscriber are clients of a router that listens on TLS only, with a
//! certificate of a test CA made for the test; a daemon that trusts another CA refuses to
//! start.

use std::process::Command;

use crate::common::{self, NetnsPair, privileged, python_available};
use crate::probe::{Probe, Scratch, VLP16_CALIB};
use crate::zenoh_frames::{Sub, vlp16_through_zenoh};

/// Runs `openssl ARGS` in `dir`; panics with its stderr on failure.
fn openssl(dir: &std::path::Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl (Debian package openssl)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA (`NAME-ca.pem`, `NAME-ca.key`) and, signed by it, a server certificate for `ip`
/// (`NAME-server.pem`, `NAME-server.key`, subjectAltName IP:`ip`) in `dir`.
fn make_ca_and_server(dir: &std::path::Path, name: &str, ip: &str) {
    let ca = format!("{name}-ca");
    let srv = format!("{name}-server");
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &format!("/CN={ca}"),
            "-keyout",
            &format!("{ca}.key"),
            "-out",
            &format!("{ca}.pem"),
        ],
    );
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            &format!("/CN={ip}"),
            "-keyout",
            &format!("{srv}.key"),
            "-out",
            &format!("{srv}.csr"),
        ],
    );
    std::fs::write(dir.join("san.cnf"), format!("subjectAltName=IP:{ip}\n")).unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-days",
            "2",
            "-in",
            &format!("{srv}.csr"),
            "-CA",
            &format!("{ca}.pem"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-extfile",
            "san.cnf",
            "-out",
            &format!("{srv}.pem"),
        ],
    );
}

/// The daemon's zenoh configuration: a client of `endpoint` trusting `ca`.
fn client_config(endpoint: &str, ca: &str) -> String {
    format!(
        r#"{{ mode: "client", connect: {{ endpoints: ["{endpoint}"] }},
  scouting: {{ multicast: {{ enabled: false }} }},
  transport: {{ link: {{ tls: {{ root_ca_certificate: "{ca}", verify_name_on_connect: true }} }} }} }}"#
    )
}

/// Every frame of the replayed capture reaches a subscriber through a TLS-only router, equal
/// to offline decoding; with a configuration that trusts another CA the daemon exits at
/// start-up with the zenoh error instead of running without its sink.
#[test]
fn frames_cross_a_tls_router_and_an_untrusted_router_is_refused() {
    if !privileged() || !python_available() {
        return;
    }
    let _alone = crate::one_at_a_time();
    let net = NetnsPair::new("zt");
    let s = Scratch::new("tls");
    let dir = s.path("");
    make_ca_and_server(&dir, "fleet", &net.sensor_ip.to_string());
    make_ca_and_server(&dir, "other", &net.sensor_ip.to_string());
    let p = |f: &str| s.path(f).to_str().unwrap().to_owned();
    let router_ep = format!("tls/{}:17453", net.sensor_ip);
    let router = Probe::router(
        &net.sensor_ns,
        &router_ep,
        &[
            "--tls-cert",
            &p("fleet-server.pem"),
            "--tls-key",
            &p("fleet-server.key"),
        ],
    );

    // Trusting another CA: the TLS handshake fails, the session does not open, start-up fails.
    let bad = s.write("bad.json5", &client_config(&router_ep, &p("other-ca.pem")));
    let out = NetnsPair::exec(
        &net.host_ns,
        &[
            common::daemon_exe().to_str().unwrap(),
            "run",
            "--iface",
            &net.host_if,
            "--sensor",
            "vlp16",
            "--calibration",
            common::data(VLP16_CALIB).to_str().unwrap(),
            "--listen",
            "127.0.0.1:7708",
            "--zenoh",
            "--zenoh-config",
            &bad,
        ],
    )
    .output()
    .expect("run daemon");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("zenoh: open session"), "{stderr}");

    let cfg = s.write(
        "zenoh.json5",
        &client_config(&router_ep, &p("fleet-ca.pem")),
    );
    let ca = p("fleet-ca.pem");
    let sub = Sub {
        ns: &net.sensor_ns,
        connect: &router_ep,
        extra: &["--tls-ca", &ca],
    };
    vlp16_through_zenoh(&net, &s, 7707, &cfg, &sub);
    router.finish();
}
