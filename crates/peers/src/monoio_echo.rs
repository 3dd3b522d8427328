//! monoio: owned-buffer read / write_all, a task per connection, as
//! monoio's echo example; the same code on its io_uring and its legacy
//! (epoll) driver.

use crate::{accepted, context, BUF_SIZE};
use monoio::io::{AsyncReadRent, AsyncWriteRentExt};
use monoio::net::{TcpListener, TcpStream};
use monoio::{IoUringDriver, LegacyDriver, RuntimeBuilder};
use std::io;

pub fn serve_uring(listener: std::net::TcpListener, ready: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
    // Left blocking, as monoio's own bind leaves it on io_uring: the ring
    // waits for readiness itself.
    let mut runtime = RuntimeBuilder::<IoUringDriver>::new()
        .build()
        .map_err(context("building the io_uring runtime (io_uring_setup)"))?;
    runtime.block_on(accept_loop(listener, ready))
}

pub fn serve_legacy(listener: std::net::TcpListener, ready: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
    // The legacy driver is readiness-based (mio): non-blocking, as monoio's
    // own bind makes it there.
    listener.set_nonblocking(true).map_err(context("setting the listener non-blocking"))?;
    let mut runtime =
        RuntimeBuilder::<LegacyDriver>::new().build().map_err(context("building the legacy (epoll) runtime"))?;
    runtime.block_on(accept_loop(listener, ready))
}

async fn accept_loop(listener: std::net::TcpListener, ready: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
    // Inside the runtime: from_std registers the socket with its driver.
    let listener = TcpListener::from_std(listener).map_err(context("registering the listener"))?;
    ready()?;
    loop {
        if let Some(stream) = accepted(listener.accept().await)? {
            monoio::spawn(echo(stream));
        }
    }
}

/// Echoes until the peer closes; an error ends only this connection.
async fn echo(mut stream: TcpStream) -> io::Result<()> {
    let mut buf: Vec<u8> = Vec::with_capacity(BUF_SIZE);
    let mut res;
    loop {
        // monoio reads into the spare capacity and returns the buffer.
        (res, buf) = stream.read(buf).await;
        if res? == 0 {
            return Ok(());
        }
        (res, buf) = stream.write_all(buf).await;
        res?;
        buf.clear();
    }
}
