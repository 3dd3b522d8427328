//! compio on io_uring: a task per connection, owned-buffer read /
//! write_all through compio's AsyncRead / AsyncWriteExt.

use crate::{accepted, context, BUF_SIZE};
use compio::buf::BufResult;
use compio::io::{AsyncRead, AsyncWriteExt};
use compio::net::{TcpListener, TcpStream};
use std::io;

pub fn serve(listener: std::net::TcpListener, ready: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
    // Built with the io-uring driver only: no fallback to polling, so a
    // machine without io_uring fails here rather than measure epoll.
    let runtime = compio::runtime::Runtime::new().map_err(context("building the io_uring runtime (io_uring_setup)"))?;
    runtime.block_on(async move {
        // Left blocking, as compio's from_std leaves it on io_uring.
        let listener = TcpListener::from_std(listener).map_err(context("registering the listener"))?;
        ready()?;
        loop {
            if let Some(stream) = accepted(listener.accept().await)? {
                // A dropped JoinHandle cancels its task: detach it.
                compio::runtime::spawn(echo(stream)).detach();
            }
        }
    })
}

/// Echoes until the peer closes; an error ends only this connection.
async fn echo(mut stream: TcpStream) -> io::Result<()> {
    let mut buf: Vec<u8> = Vec::with_capacity(BUF_SIZE);
    loop {
        // compio reads to the start of the buffer but never shortens it
        // (the length becomes max(length, bytes read)): hence the clear.
        let BufResult(res, b) = stream.read(buf).await;
        if res? == 0 {
            return Ok(());
        }
        let BufResult(res, b) = stream.write_all(b).await;
        res?;
        buf = b;
        buf.clear();
    }
}
