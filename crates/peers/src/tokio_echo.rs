//! tokio: a current-thread runtime, an accept loop, one spawned task per
//! connection doing read / write_all, as tokio's echo example does.

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
    let mut buf = vec![0u8; BUF_SIZE];
    loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        stream.write_all(&buf[..n]).await?;
    }
}
