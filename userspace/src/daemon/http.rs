//! The minimal HTTP/1.1 used for metrics: a one-request-per-connection server for
//! `GET /metrics` and `GET /stats.json` (the daemon) and a blocking `GET` client (`lidarxdp
//! stats`), on std sockets.
use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpListener, TcpStream},
    sync::mpsc::{Sender, SyncSender, sync_channel},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

/// Largest request head read (bytes); longer requests get 404 after this much.
const MAX_REQUEST: usize = 8192;
/// How long the server gives one connection (seconds): to send its whole request head (a
/// deadline, so a client sending a byte at a time cannot stretch it), and then each write of
/// the answer (`SO_SNDTIMEO`). Connections are served one at a time, so this bounds how long
/// a client that stalls keeps the next one waiting. Also the client's connect timeout and how
/// long the server waits for the main loop's text.
const IO_TIMEOUT: Duration = Duration::from_secs(2);

/// What a request asks the daemon's main loop for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Doc {
    /// `GET /metrics`: every counter in the Prometheus text exposition format 0.0.4.
    Metrics,
    /// `GET /stats.json`: every counter as the stats JSON object (`--stats-json`'s layout).
    StatsJson,
}

impl Doc {
    /// The document served at `path`, if any.
    fn at(path: &str) -> Option<Doc> {
        match path {
            "/metrics" => Some(Doc::Metrics),
            "/stats.json" => Some(Doc::StatsJson),
            _ => None,
        }
    }

    fn content_type(self) -> &'static str {
        match self {
            Doc::Metrics => "text/plain; version=0.0.4; charset=utf-8",
            Doc::StatsJson => "application/json",
        }
    }
}

/// One request for the main loop: the document, and where its text goes.
pub type Render = (Doc, SyncSender<String>);

/// Serves `listener` on a new thread: `GET /metrics` and `GET /stats.json` (query string
/// ignored) ask `render`'s receiver (the daemon's main loop) for the current text and return
/// it ([`Doc`]); every other request gets 404. One request per connection.
pub fn spawn_server(listener: TcpListener, render: Sender<Render>) -> Result<()> {
    std::thread::Builder::new()
        .name("metrics-http".into())
        .spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                if let Err(e) = handle(stream, &render) {
                    log::debug!("metrics connection: {e}");
                }
            }
        })?;
    Ok(())
}

fn handle(mut s: TcpStream, render: &Sender<Render>) -> std::io::Result<()> {
    let deadline = Instant::now() + IO_TIMEOUT;
    s.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < MAX_REQUEST {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no complete request within {IO_TIMEOUT:?}"),
            ));
        }
        s.set_read_timeout(Some(left))?;
        let n = s.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let head = String::from_utf8_lossy(&buf);
    let mut parts = head.lines().next().unwrap_or("").split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let body = match Doc::at(path) {
        Some(doc) if method == "GET" => {
            let (tx, rx) = sync_channel(1);
            render
                .send((doc, tx))
                .ok()
                .and_then(|()| rx.recv_timeout(IO_TIMEOUT).ok())
                .map(|b| (doc, b))
        }
        _ => None,
    };
    let response = match body {
        Some((doc, b)) => format!(
            "HTTP/1.1 200 OK\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: \
             close\r\n\r\n{b}",
            doc.content_type(),
            b.len()
        ),
        None => "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: 10\r\n\
                 Connection: close\r\n\r\nnot found\n"
            .to_owned(),
    };
    s.write_all(response.as_bytes())
}

/// `GET path` from `addr`; returns the body of a 200 response, an error otherwise.
pub fn get(addr: SocketAddr, path: &str) -> Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, IO_TIMEOUT)
        .with_context(|| format!("connect to {addr}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut resp = String::new();
    s.read_to_string(&mut resp)
        .with_context(|| format!("read response from {addr}"))?;
    let (head, body) = resp
        .split_once("\r\n\r\n")
        .context("malformed HTTP response")?;
    let status = head.lines().next().unwrap_or("");
    if status.split_whitespace().nth(1) != Some("200") {
        bail!("GET http://{addr}{path}: {status}");
    }
    Ok(body.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
        mpsc::channel,
    };

    /// A server on a loopback port whose "main loop" answers every render with `text`.
    fn server(text: &'static str) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = channel::<Render>();
        std::thread::spawn(move || {
            for (doc, reply) in rx {
                let _ = reply.send(match doc {
                    Doc::Metrics => text.to_owned(),
                    Doc::StatsJson => format!("{{\"text\":{text:?}}}"),
                });
            }
        });
        spawn_server(listener, tx).unwrap();
        addr
    }

    #[test]
    fn answers_metrics_and_404() {
        let addr = server("up 1\n");
        assert_eq!(get(addr, "/metrics?x=1").unwrap(), "up 1\n");
        assert_eq!(get(addr, "/stats.json").unwrap(), "{\"text\":\"up 1\\n\"}");
        let e = get(addr, "/other").unwrap_err().to_string();
        assert!(e.contains("404"), "{e}");
    }

    /// Clients that stop halfway through their request, or send it a byte at a time, keep the
    /// next client waiting for at most [`IO_TIMEOUT`] each. (Without the deadline the byte
    /// at a time client holds the server as long as it goes on; without any timeout, a
    /// silent one holds it until it disconnects.)
    #[test]
    fn stalled_and_slow_clients_delay_the_next_one_for_a_bounded_time() {
        let addr = server("up 1\n");
        let done = Arc::new(AtomicBool::new(false));
        // Half a request, then silence.
        let mut silent = TcpStream::connect(addr).unwrap();
        silent.write_all(b"GET /metr").unwrap();
        // A request head a byte every 200 ms, for as long as the test runs.
        let slow = {
            let done = done.clone();
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(addr).unwrap();
                for b in b"GET /metrics HTTP/1.1\r\nX-Slow: ".iter().cycle() {
                    if done.load(Ordering::Relaxed) || s.write_all(&[*b]).is_err() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
            })
        };
        std::thread::sleep(Duration::from_millis(200));
        let t0 = Instant::now();
        let body = get(addr, "/metrics");
        done.store(true, Ordering::Relaxed);
        assert_eq!(body.unwrap(), "up 1\n");
        let bound = 2 * IO_TIMEOUT + Duration::from_secs(2);
        assert!(t0.elapsed() < bound, "answered after {:?}", t0.elapsed());
        slow.join().unwrap();
        drop(silent);
    }
}
