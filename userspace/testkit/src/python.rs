//! The Python interpreter of the tests' independent clients (the zenoh tests' ROS 2 probe):
//! the virtual environment `cargo xtask setup` makes in `<workspace root>/target/pyenv`, with
//! eclipse-zenoh, rosbags and numpy pinned (xtask/src/setup.rs, `PYTHON_REQUIREMENTS`).
use std::path::PathBuf;

/// The interpreter: `$LIDARXDP_PYTHON` when set (`cargo xtask test` sets it), else
/// `<workspace root>/target/pyenv/bin/python`. It may not exist; see [`python_available`].
pub fn python() -> PathBuf {
    std::env::var_os("LIDARXDP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::workspace_root().join("target/pyenv/bin/python"))
}

/// True when [`python()`] exists. When it does not, a test that needs it returns early with a
/// message, unless `LIDARXDP_REQUIRE_PRIVILEGED=1` (set by `cargo xtask test`), where this
/// panics instead, naming the path and how to make it (like [`crate::privileged`]).
pub fn python_available() -> bool {
    let p = python();
    let found = p.is_file();
    if !found {
        assert!(
            std::env::var_os("LIDARXDP_REQUIRE_PRIVILEGED").is_none(),
            "Python interpreter {} not found (LIDARXDP_REQUIRE_PRIVILEGED is set): run \
             `cargo xtask setup`, or set LIDARXDP_PYTHON to a python with eclipse-zenoh and \
             rosbags",
            p.display()
        );
        eprintln!(
            "skipping: Python interpreter {} not found (run `cargo xtask setup`)",
            p.display()
        );
    }
    found
}

/// The interpreter of the peers' environment (`cargo xtask bench --peers` and `cargo xtask
/// test` make it in `<workspace root>/target/peers/venv`: ouster-sdk, velodyne-decoder, pinned
/// in `bench/peers/py/requirements.txt`): `$LIDARXDP_PEERS_PYTHON` when set, else that path.
/// `None` when it does not exist; under `LIDARXDP_REQUIRE_PRIVILEGED=1` that panics instead,
/// naming the path and how to make it.
pub fn peers_python() -> Option<PathBuf> {
    let p = std::env::var_os("LIDARXDP_PEERS_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::workspace_root().join("target/peers/venv/bin/python"));
    if p.is_file() {
        return Some(p);
    }
    assert!(
        std::env::var_os("LIDARXDP_REQUIRE_PRIVILEGED").is_none(),
        "peers' Python interpreter {} not found (LIDARXDP_REQUIRE_PRIVILEGED is set): run \
         `cargo xtask test` (which makes it), or set LIDARXDP_PEERS_PYTHON to a python with the \
         pins of bench/peers/py/requirements.txt",
        p.display()
    );
    eprintln!(
        "skipping the ouster-sdk comparison: {} not found (cargo xtask test makes it)",
        p.display()
    );
    None
}
