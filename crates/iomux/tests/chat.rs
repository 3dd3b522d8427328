//! The chat example (examples/chat.rs) on every backend: every line
//! reaches every client in the room, across loops, exactly once and in
//! the order spoken.

#[path = "../examples/chat.rs"]
mod chat;
#[macro_use]
mod runtime_support;

use iomux::runtime::{Config, Runtime};
use iomux::Backend;
use runtime_support::*;
use std::io::Write;

on_every_backend!(every_line_reaches_every_client);

fn every_line_reaches_every_client(backend: Backend) {
    const CLIENTS: usize = 6;
    let runtime = Runtime::new(Config::builder().backend(backend).build().unwrap(), 2)
        .unwrap()
        .bind("127.0.0.1:0".parse().unwrap())
        .unwrap();
    let senders = runtime.senders().unwrap();
    let server = start(runtime, move |_| chat::Room::new(senders.clone()));
    // Clients join one by one; each says hi, and everyone in the room
    // hears exactly that before the next joins. A newcomer may first hear
    // the last lines spoken before it joined, which its loop had not shown
    // yet (when nobody was there to hear them).
    let mut clients = Vec::new();
    let mut spoken: Vec<String> = Vec::new();
    for n in 0..=CLIENTS {
        if n < CLIENTS {
            clients.push(connect(server.addr));
        }
        let (speaker, text) = if n < CLIENTS { (n, "hi") } else { (2, "hello, room") };
        clients[speaker].write_all(format!("{text}\n").as_bytes()).unwrap();
        let line = format!("{}: {text}\n", clients[speaker].local_addr().unwrap());
        for (i, c) in clients.iter_mut().enumerate() {
            let mut heard = read_exact(c, line.len());
            if i == n {
                while !heard.ends_with(line.as_bytes()) {
                    heard.extend(read_exact(c, 1));
                }
                let late = String::from_utf8(heard[..heard.len() - line.len()].to_vec()).unwrap();
                assert!((0..=n).any(|k| spoken[k..].concat() == late), "{backend}: a newcomer heard {late:?}");
                heard.drain(..late.len());
            }
            assert_bytes(&heard, line.as_bytes(), &format!("{backend}: line {n} at client {i}"));
        }
        spoken.push(line);
    }
    let finished = server.stop();
    assert_eq!(finished.stats.messages, (CLIENTS as u64 + 1) * 2, "{backend}: every line to both loops");
}
