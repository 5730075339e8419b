//! The view's HTTP server: `tiny_http` (HTTP/1.1, keep-alive) on the listener the daemon bound,
//! its requests answered one at a time on the thread `view-http`.
//!
//! | request | answer |
//! |---|---|
//! | `GET /`, `/view.js`, `/three/...` | the embedded page and three.js ([`super::assets`]) |
//! | `GET /api/status` | JSON: `{"sensors": [SensorStatus...], "max_points": 300000, "header_len": 32, "stride": 16}` ([`super::SensorStatus`], fields as named there) |
//! | `GET /api/frame?sensor=NAME&after=SEQ` | 200: the sensor's latest frame ([`super::wire`]) when its sequence is greater than `SEQ` (any, without `after`); 204: none newer yet; `sensor` may be left out when there is one sensor |
//!
//! Errors: 400 (a bad or missing parameter, the reason in the body), 403 (a `Host` that is not
//! a loopback name on a loopback-only view), 404 (an unknown path or sensor), 405 (a method
//! other than `GET`). A client that stops reading a response stalls only this thread, never
//! the publisher, and this thread for at most [`WRITE_TIMEOUT`] per response write that makes
//! no progress (the socket's `SO_SNDTIMEO`); the failed response is dropped, logged at debug
//! level. Requests are read by `tiny_http`'s own per-connection threads: a client that sends
//! half a request holds one of those, not this thread.

use std::io::Cursor;
use std::net::{IpAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context;
use tiny_http::{Header, Method, Request, Response, Server, StatusCode};

use super::{MAX_POINTS, ViewState, wire};

/// How often the thread checks the stop flag while no request comes.
pub const POLL: Duration = Duration::from_millis(100);

/// How long one write of a response may block without progress (seconds): a client that
/// stops reading (a stalled or hidden browser tab, a broken link) stalls the view's thread,
/// and so every other client, for at most this long per write. Long enough for a frame
/// (4.8 MB at [`MAX_POINTS`]) to leave on a slow remote link in pieces; each piece sent
/// restarts it.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(3);

/// Starts the server on `listener` and the thread answering it; the thread ends (dropping the
/// server, which closes the listener) within [`POLL`] of `stop` being set.
///
/// Every connection gets [`WRITE_TIMEOUT`] as its send timeout: `tiny_http` accepts the
/// connections itself and never shows their sockets, so it is set on `listener`, whose
/// options Linux copies into each accepted socket.
///
/// Errors: the send timeout could not be set on `listener` (not a socket), `tiny_http`
/// could not take the listener, or the thread could not be spawned.
pub fn spawn(
    listener: TcpListener,
    state: Arc<ViewState>,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<JoinHandle<()>> {
    crate::sys::sockopt::set_send_timeout(listener.as_raw_fd(), WRITE_TIMEOUT)
        .context("--view: set the connections' send timeout (SO_SNDTIMEO)")?;
    let server = Server::from_listener(listener, None)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .context("--view: start the HTTP server")?;
    std::thread::Builder::new()
        .name("view-http".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match server.recv_timeout(POLL) {
                    Ok(Some(rq)) => {
                        let url = rq.url().to_owned();
                        if let Err(e) = answer(rq, &state) {
                            log::debug!("view: {url}: {e}");
                        }
                    }
                    Ok(None) => {}
                    Err(e) => log::debug!("view: {e}"),
                }
            }
        })
        .context("--view: spawn its thread")
}

/// A `name: value` header (both ASCII, so always valid).
fn header(name: &str, value: &str) -> Header {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).unwrap_or_else(|()| {
        Header::from_bytes(&b"X-Invalid"[..], &b"1"[..]).unwrap_or_else(|()| unreachable!())
    })
}

/// A plain-text answer with `status` (errors, 204).
fn text(status: u16, body: &str) -> Response<Cursor<Vec<u8>>> {
    Response::from_data(body.as_bytes().to_vec())
        .with_status_code(StatusCode(status))
        .with_header(header("Content-Type", "text/plain; charset=utf-8"))
        .with_header(header("Cache-Control", "no-store"))
}

/// Whether the request's `Host` names a loopback address (`localhost`, `127.x.x.x`, `[::1]`,
/// any port), or is absent.
fn loopback_host(rq: &Request) -> bool {
    let Some(h) = rq.headers().iter().find(|h| h.field.equiv("Host")) else {
        return true;
    };
    let v = h.value.as_str().trim();
    let host = match v.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => v.rsplit_once(':').map_or(v, |(h, _)| h),
    };
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Sends `r` with a `Content-Length` (never chunked: every body's length is known, and a
/// client can check a frame's length against its header).
fn send<R: std::io::Read>(rq: Request, r: Response<R>) -> std::io::Result<()> {
    rq.respond(r.with_chunked_threshold(usize::MAX))
}

/// Answers one request (module table).
fn answer(rq: Request, state: &ViewState) -> std::io::Result<()> {
    if !loopback_host(&rq) {
        return send(rq, text(403, "the view answers only to a loopback Host\n"));
    }
    if *rq.method() != Method::Get {
        return send(
            rq,
            text(405, "only GET\n").with_header(header("Allow", "GET")),
        );
    }
    let url = rq.url().to_owned();
    let (path, query) = url.split_once('?').unwrap_or((&url, ""));
    match path {
        "/api/status" => {
            let body = serde_json::json!({
                "sensors": state.status(Instant::now()),
                "max_points": MAX_POINTS,
                "header_len": wire::HEADER_LEN,
                "stride": wire::STRIDE,
            });
            send(
                rq,
                Response::from_data(body.to_string().into_bytes())
                    .with_header(header("Content-Type", "application/json"))
                    .with_header(header("Cache-Control", "no-store")),
            )
        }
        "/api/frame" => match frame(state, query) {
            Ok(Some(body)) => send(
                rq,
                Response::from_data(body)
                    .with_header(header("Content-Type", "application/octet-stream"))
                    .with_header(header("Cache-Control", "no-store")),
            ),
            Ok(None) => send(rq, text(204, "")),
            Err((status, msg)) => send(rq, text(status, &(msg + "\n"))),
        },
        _ => match super::assets::get(path) {
            Some(a) => send(
                rq,
                Response::new(
                    StatusCode(200),
                    vec![
                        header("Content-Type", a.content_type),
                        header("X-Content-Type-Options", "nosniff"),
                    ],
                    a.bytes,
                    Some(a.bytes.len()),
                    None,
                ),
            ),
            None => send(rq, text(404, "not found\n")),
        },
    }
}

/// The frame answer for `query` (`sensor=NAME&after=SEQ`): `Some(body)`, `None` when there is
/// no newer frame, or the error status and message.
fn frame(state: &ViewState, query: &str) -> Result<Option<Vec<u8>>, (u16, String)> {
    let mut sensor = None;
    let mut after = None;
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        match &*k {
            "sensor" => sensor = Some(v.into_owned()),
            "after" => {
                after =
                    Some(v.parse::<u64>().map_err(|_| {
                        (400, format!("after={v}: not a frame sequence (0..=2^64-1)"))
                    })?)
            }
            _ => {}
        }
    }
    let names = || {
        state
            .sensors()
            .iter()
            .map(|s| s.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let index = match sensor {
        Some(name) => state
            .sensors()
            .iter()
            .position(|s| s.name == name)
            .ok_or_else(|| {
                (
                    404,
                    format!("sensor={name}: no such sensor (sensors: {})", names()),
                )
            })?,
        None if state.sensors().len() == 1 => 0,
        None => return Err((400, format!("sensor=NAME needed: one of {}", names()))),
    };
    // The Arc is cloned under the lock; the encoding runs outside it.
    Ok(state
        .latest(index, after)
        .map(|f| wire::encode(f.header(), f.points(), MAX_POINTS)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::publish::{BufferPool, SharedFrame};
    use crate::view::ViewSensor;
    use std::io::{Read, Write};
    use std::net::TcpStream;

    /// One raw HTTP/1.1 request to the server under test; returns (status, body).
    fn request(addr: std::net::SocketAddr, head: &str) -> (u16, Vec<u8>) {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(head.as_bytes()).unwrap();
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).unwrap();
        let split = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
        let status = std::str::from_utf8(&buf[9..12]).unwrap().parse().unwrap();
        (status, buf[split + 4..].to_vec())
    }

    fn get(addr: std::net::SocketAddr, target: &str) -> (u16, Vec<u8>) {
        request(
            addr,
            &format!("GET {target} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"),
        )
    }

    #[test]
    fn endpoints_answer_from_the_state() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(ViewState::new(vec![
            ViewSensor {
                id: 0,
                name: "front lidar".into(),
                model: "VLP16".into(),
            },
            ViewSensor {
                id: 1,
                name: "rear".into(),
                model: "VLP16".into(),
            },
        ]));
        let stop = Arc::new(AtomicBool::new(false));
        let t = spawn(listener, state.clone(), stop.clone()).unwrap();

        let (st, body) = get(addr, "/api/status");
        assert_eq!(st, 200);
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["sensors"][0]["name"], "front lidar");
        assert_eq!(v["sensors"][0]["frames"], 0);
        assert_eq!(v["max_points"], 300_000);
        assert_eq!(get(addr, "/api/frame?sensor=front+lidar").0, 204);
        assert_eq!(get(addr, "/api/frame").0, 400);
        assert_eq!(get(addr, "/api/frame?sensor=side").0, 404);
        assert_eq!(get(addr, "/api/frame?sensor=rear&after=x").0, 400);

        let pool = Arc::new(BufferPool::new(2));
        let f = SharedFrame::new(crate::view::tests::frame(0, 7, 100, 9, 10), pool);
        state.record(&f, Instant::now());
        let (st, body) = get(addr, "/api/frame?sensor=front%20lidar");
        assert_eq!(st, 200);
        assert_eq!(body, wire::encode(f.header(), f.points(), MAX_POINTS));
        assert_eq!(body.len(), 40 + 100 * 16);
        assert_eq!(get(addr, "/api/frame?sensor=front+lidar&after=7").0, 204);
        assert_eq!(get(addr, "/api/frame?sensor=front+lidar&after=6").0, 200);

        let (st, body) = get(addr, "/");
        assert_eq!(st, 200);
        assert!(String::from_utf8(body).unwrap().contains("importmap"));
        assert_eq!(get(addr, "/secret").0, 404);
        // DNS rebinding: another host name is refused; other methods too.
        let (st, _) = request(
            addr,
            "GET /api/status HTTP/1.1\r\nHost: evil.example:80\r\nConnection: close\r\n\r\n",
        );
        assert_eq!(st, 403);
        let (st, _) = request(
            addr,
            "POST /api/status HTTP/1.1\r\nHost: localhost:1\r\nContent-Length: 0\r\n\
             Connection: close\r\n\r\n",
        );
        assert_eq!(st, 405);

        stop.store(true, Ordering::Relaxed);
        t.join().unwrap();
    }

    /// A client that asks for frames and never reads them holds the thread for at most
    /// [`WRITE_TIMEOUT`] per response: another client is still answered. (Without the send
    /// timeout the thread blocks for as long as the first client keeps its connection open.)
    #[test]
    fn a_client_that_stops_reading_stalls_the_others_for_a_bounded_time() {
        use std::os::fd::AsRawFd;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(ViewState::new(vec![ViewSensor {
            id: 0,
            name: "front".into(),
            model: "VLP16".into(),
        }]));
        let stop = Arc::new(AtomicBool::new(false));
        let t = spawn(listener, state.clone(), stop.clone()).unwrap();
        let pool = Arc::new(BufferPool::new(2));
        let f = SharedFrame::new(crate::view::tests::frame(0, 1, MAX_POINTS, 1, 1), pool);
        state.record(&f, Instant::now());

        // Two frames of 4.8 MB asked for and never read: more than the loopback socket
        // buffers hold (the server's send buffer grows to 4 MiB, this receive buffer is tiny).
        let stalled = TcpStream::connect(addr).unwrap();
        crate::sys::sockopt::set_int(stalled.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, 4096)
            .unwrap();
        let rq = format!("GET /api/frame HTTP/1.1\r\nHost: {addr}\r\n\r\n");
        (&stalled).write_all(rq.repeat(2).as_bytes()).unwrap();
        std::thread::sleep(Duration::from_millis(500));

        let bound = 2 * WRITE_TIMEOUT + Duration::from_secs(3);
        let t0 = Instant::now();
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(bound)).unwrap();
        write!(
            s,
            "GET /api/status HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut buf = Vec::new();
        s.read_to_end(&mut buf)
            .expect("the second client is answered while the first one stalls");
        assert!(buf.starts_with(b"HTTP/1.1 200"), "{buf:?}");
        assert!(t0.elapsed() < bound, "answered after {:?}", t0.elapsed());

        drop(stalled);
        stop.store(true, Ordering::Relaxed);
        t.join().unwrap();
    }
}
