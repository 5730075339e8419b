//! Publisher tests over loopback (no privileges): fan-out, handshake, reconnect, MCAP, the
//! `subscribe` command (output, flags, MCAP recordings of a live daemon on the socket backend
//! stopped by signals, read back by `mcap_check.py` with the tests' Python). One test binary,
//! one module per former file. `publish_alloc` (counting global allocator) and
//! `publish_sigpipe` (changes SIGPIPE's disposition) stay binaries of their own: each changes a
//! process-wide setting. Only `publish_handshake` installs a logger here.

mod layout_check;
mod publish_cli;
mod publish_fanout;
mod publish_handshake;
mod publish_loopback;
mod publish_mcap;
mod publish_point_types;
mod publish_reconnect;
mod publish_record;
mod publish_subscribe;
