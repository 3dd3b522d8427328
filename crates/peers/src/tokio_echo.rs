//! tokio: a current-thread runtime, an accept loop, one spawned task per
//! connection doing read_buf / write_all, as tokio's echo example does
//! (there with `read` into a zeroed array).

use crate::{accepted, context, BUF_SIZE};
use std::io;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub fn serve(listener: std::net::TcpListener, ready: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
    // tokio requires a non-blocking socket from std.
    listener.set_nonblocking(true).map_err(context("setting the listener non-blocking"))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .map_err(context("building the current-thread runtime"))?;
    runtime.block_on(async move {
        let listener = TcpListener::from_std(listener).map_err(context("registering the listener"))?;
        ready()?;
        loop {
            if let Some(stream) = accepted(listener.accept().await)? {
                tokio::spawn(echo(stream));
            }
        }
    })
}

/// Echoes until the peer closes; an error ends only this connection.
async fn echo(mut stream: TcpStream) -> io::Result<()> {
    // Capacity only, as monoio and compio are given: a zeroed buffer
    // would make both of its pages resident on every connection, where
    // the kernel's copy of a 100-byte message touches only the first.
    let mut buf: Vec<u8> = Vec::with_capacity(BUF_SIZE);
    loop {
        // Into the spare capacity, uninitialized: at most BUF_SIZE bytes.
        let n = stream.read_buf(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        stream.write_all(&buf).await?;
        buf.clear();
    }
}
