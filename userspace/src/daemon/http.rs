//! The minimal HTTP/1.1 used for metrics: a one-request-per-connection server for
//! `GET /metrics` (the daemon) and a blocking `GET` client (`lidarxdp stats`), on std sockets.
use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpListener, TcpStream},
    sync::mpsc::{Sender, SyncSender, sync_channel},
    time::Duration,
};

use anyhow::{Context, Result, bail};

/// Largest request head read (bytes); longer requests get 404 after this much.
const MAX_REQUEST: usize = 8192;
/// Read/write timeout of one connection.
const IO_TIMEOUT: Duration = Duration::from_secs(2);

/// Serves `listener` on a new thread: `GET /metrics` (query string ignored) asks `render`'s
/// receiver (the daemon's main loop) for the current text and returns it as
/// `text/plain; version=0.0.4`; every other request gets 404. One request per connection.
pub fn spawn_server(listener: TcpListener, render: Sender<SyncSender<String>>) -> Result<()> {
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

fn handle(mut s: TcpStream, render: &Sender<SyncSender<String>>) -> std::io::Result<()> {
    s.set_read_timeout(Some(IO_TIMEOUT))?;
    s.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < MAX_REQUEST {
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
    let body = if method == "GET" && path == "/metrics" {
        let (tx, rx) = sync_channel(1);
        render
            .send(tx)
            .ok()
            .and_then(|()| rx.recv_timeout(IO_TIMEOUT).ok())
    } else {
        None
    };
    let response = match body {
        Some(b) => format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{b}",
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
