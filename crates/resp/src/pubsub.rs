//! Pub/sub, as redis 7 answers it in RESP2 (pubsub.c): SUBSCRIBE,
//! UNSUBSCRIBE, PSUBSCRIBE, PUNSUBSCRIBE, PUBLISH and PUBSUB's CHANNELS,
//! NUMSUB and NUMPAT, PING's other reply in subscribed state, and the
//! commands refused there. A connection's subscriptions live in its
//! [`Subscriptions`]; who else subscribed, and delivering messages, is the
//! server's [`Broker`] (it may span threads).

use crate::commands::{array, bulk, int};
use bytes::Bytes;

/// One connection's subscriptions, in the order made.
#[derive(Clone, Debug, Default)]
pub struct Subscriptions {
    channels: Vec<Bytes>,
    patterns: Vec<Bytes>,
}

impl Subscriptions {
    /// Channels and patterns subscribed: in subscribed state while not 0.
    pub fn count(&self) -> usize {
        self.channels.len() + self.patterns.len()
    }

    /// The channels subscribed.
    pub fn channels(&self) -> &[Bytes] {
        &self.channels
    }

    /// The patterns subscribed.
    pub fn patterns(&self) -> &[Bytes] {
        &self.patterns
    }
}

/// The server's side of pub/sub: who subscribes across the server, and
/// delivery. Called by [`Resp::feed_pubsub`](crate::Resp::feed_pubsub) as
/// a connection's commands run.
pub trait Broker {
    /// The connection subscribed to (`on`) or left `name`, a channel or
    /// (with `pattern`) a pattern.
    fn subscribed(&mut self, name: &Bytes, pattern: bool, on: bool);
    /// PUBLISH: delivers `message` to `channel`'s subscribers and those of
    /// every matching pattern; returns how many receive it.
    fn publish(&mut self, channel: &[u8], message: &[u8]) -> i64;
    /// PUBSUB CHANNELS: the channels with a subscriber, those matching
    /// `pattern` if given.
    fn channels(&self, pattern: Option<&[u8]>) -> Vec<Bytes>;
    /// PUBSUB NUMSUB: a channel's subscribers.
    fn numsub(&self, channel: &[u8]) -> i64;
    /// PUBSUB NUMPAT: the patterns subscribed to, each counted once.
    fn numpat(&self) -> i64;
    /// Whether the feed stops after this command: the broker holds the
    /// publisher back (say, another thread's queue is full).
    fn hold(&self) -> bool {
        false
    }
}

/// Appends the push a channel's subscriber gets to `out` (appended, so
/// that a server may join a burst of pushes in one buffer).
pub fn message(out: &mut Vec<u8>, channel: &[u8], payload: &[u8]) {
    out.reserve(32 + channel.len() + payload.len());
    out.extend_from_slice(b"*3\r\n$7\r\nmessage\r\n");
    bulk(out, channel);
    bulk(out, payload);
}

/// Appends the push a pattern's subscriber gets to `out`.
pub fn pmessage(out: &mut Vec<u8>, pattern: &[u8], channel: &[u8], payload: &[u8]) {
    out.reserve(48 + pattern.len() + channel.len() + payload.len());
    out.extend_from_slice(b"*4\r\n$8\r\npmessage\r\n");
    bulk(out, pattern);
    bulk(out, channel);
    bulk(out, payload);
}

/// `*3 kind name count`, the reply to each (un)subscription; `name` None
/// is the nil of an unsubscribe-all with nothing subscribed.
fn confirm(out: &mut Vec<u8>, kind: &str, name: Option<&[u8]>, count: usize) {
    out.extend_from_slice(b"*3\r\n");
    bulk(out, kind.as_bytes());
    match name {
        Some(name) => bulk(out, name),
        None => out.extend_from_slice(b"$-1\r\n"),
    }
    int(out, count as i64);
}

/// The pub/sub commands, with redis's arity.
const COMMANDS: &[(&str, i32)] =
    &[("subscribe", -2), ("unsubscribe", -1), ("psubscribe", -2), ("punsubscribe", -1), ("publish", 3), ("pubsub", -2)];

/// Whether `name` is one of the pub/sub commands this module runs.
pub(crate) fn is_pubsub(name: &[u8]) -> bool {
    COMMANDS.iter().any(|(n, _)| n.as_bytes().eq_ignore_ascii_case(name))
}

/// Whether a connection in subscribed state may run `name` (RESP2).
pub(crate) fn allowed_when_subscribed(name: &[u8]) -> bool {
    ["subscribe", "unsubscribe", "psubscribe", "punsubscribe", "ping", "quit", "reset"]
        .iter()
        .any(|n| n.as_bytes().eq_ignore_ascii_case(name))
}

/// redis's error for a command refused in subscribed state.
pub(crate) fn refused(out: &mut Vec<u8>, fullname: &str) {
    out.extend_from_slice(b"-ERR Can't execute '");
    out.extend_from_slice(fullname.as_bytes());
    out.extend_from_slice(
        b"': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context\r\n",
    );
}

/// PING in subscribed state: `*2 pong <arg or empty>`.
pub(crate) fn ping(out: &mut Vec<u8>, arg: Option<&[u8]>) {
    out.extend_from_slice(b"*2\r\n$4\r\npong\r\n");
    bulk(out, arg.unwrap_or_default());
}

/// Runs a pub/sub command (`args[0]` is one, by [`is_pubsub`]), appending
/// its replies to `out`.
pub(crate) fn execute(args: &[&[u8]], out: &mut Vec<u8>, subs: &mut Subscriptions, broker: &mut dyn Broker) {
    let Some(&(name, arity)) = COMMANDS.iter().find(|(n, _)| n.as_bytes().eq_ignore_ascii_case(args[0])) else {
        return;
    };
    let argc = args.len() as i32;
    if (arity > 0 && arity != argc) || argc < -arity {
        out.extend_from_slice(format!("-ERR wrong number of arguments for '{name}' command\r\n").as_bytes());
        return;
    }
    if name == "pubsub" {
        // A container: its subcommand is the command redis names.
        let sub = String::from_utf8_lossy(args[1]).to_ascii_lowercase();
        let Some(&(sub, arity)) = SUBCOMMANDS.iter().find(|(n, _)| *n == sub) else {
            return unknown_subcommand(out, args[1]);
        };
        let fullname = format!("pubsub|{sub}");
        if (arity > 0 && arity != argc) || argc < -arity {
            out.extend_from_slice(format!("-ERR wrong number of arguments for '{fullname}' command\r\n").as_bytes());
            return;
        }
        if subs.count() > 0 {
            return refused(out, &fullname);
        }
        return pubsub(sub, args, out, broker);
    }
    if subs.count() > 0 && !allowed_when_subscribed(args[0]) {
        return refused(out, name);
    }
    match name {
        "subscribe" | "psubscribe" => {
            let pattern = name == "psubscribe";
            for &arg in &args[1..] {
                let list = if pattern { &mut subs.patterns } else { &mut subs.channels };
                if !list.iter().any(|c| c[..] == *arg) {
                    let name = Bytes::copy_from_slice(arg);
                    list.push(name.clone());
                    broker.subscribed(&name, pattern, true);
                }
                confirm(out, name, Some(arg), subs.count());
            }
        }
        "unsubscribe" | "punsubscribe" => {
            let pattern = name == "punsubscribe";
            let list = if pattern { &subs.patterns } else { &subs.channels };
            let targets: Vec<Bytes> = if args.len() == 1 {
                list.clone()
            } else {
                args[1..].iter().map(|a| Bytes::copy_from_slice(a)).collect()
            };
            if targets.is_empty() {
                return confirm(out, name, None, subs.count());
            }
            for target in targets {
                let list = if pattern { &mut subs.patterns } else { &mut subs.channels };
                if let Some(at) = list.iter().position(|c| *c == target) {
                    list.remove(at);
                    broker.subscribed(&target, pattern, false);
                }
                confirm(out, name, Some(&target), subs.count());
            }
        }
        "publish" => int(out, broker.publish(args[1], args[2])),
        _ => {}
    }
}

/// PUBSUB's subcommands, with redis's arity (the container's name counted).
const SUBCOMMANDS: &[(&str, i32)] = &[("channels", -2), ("numsub", -2), ("numpat", 2)];

fn unknown_subcommand(out: &mut Vec<u8>, sub: &[u8]) {
    out.extend_from_slice(b"-ERR unknown subcommand '");
    let shown: Vec<u8> = sub.iter().take(128).map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }).collect();
    out.extend_from_slice(&shown);
    out.extend_from_slice(b"'. Try PUBSUB HELP.\r\n");
}

/// PUBSUB's subcommands, their arity checked.
fn pubsub(sub: &str, args: &[&[u8]], out: &mut Vec<u8>, broker: &mut dyn Broker) {
    match sub {
        "channels" if args.len() > 3 => {
            out.extend_from_slice(b"-ERR unknown subcommand or wrong number of arguments for '");
            out.extend_from_slice(&args[1][..args[1].len().min(128)]);
            out.extend_from_slice(b"'. Try PUBSUB HELP.\r\n");
        }
        "channels" => {
            let channels = broker.channels(args.get(2).copied());
            array(out, channels.len());
            channels.iter().for_each(|c| bulk(out, c));
        }
        "numsub" => {
            array(out, (args.len() - 2) * 2);
            for &channel in &args[2..] {
                bulk(out, channel);
                int(out, broker.numsub(channel));
            }
        }
        _ => int(out, broker.numpat()),
    }
}

/// redis's glob match (util.c's stringmatchlen, case-sensitive): `*`,
/// `?`, `[...]` with ranges and `^` negation, and `\` escapes. Written
/// here because PSUBSCRIBE must match exactly as redis does, and glob
/// crates follow shell or path rules instead.
pub fn glob_match(pattern: &[u8], string: &[u8]) -> bool {
    if string.is_empty() {
        // redis's loop never runs: only the empty pattern matches it.
        return pattern.is_empty();
    }
    let (mut p, mut s) = (0, 0);
    // The last `*` seen and the string position it stands at: on a
    // mismatch the star takes one more byte (no recursion, no blow-up).
    let mut star: Option<(usize, usize)> = None;
    while s < string.len() {
        if p < pattern.len() {
            match pattern[p] {
                b'*' => {
                    while p < pattern.len() && pattern[p] == b'*' {
                        p += 1;
                    }
                    if p == pattern.len() {
                        return true;
                    }
                    star = Some((p, s));
                    continue;
                }
                b'?' => {
                    p += 1;
                    s += 1;
                    continue;
                }
                b'[' => {
                    if let Some((matched, next)) = class(pattern, p, string[s]) {
                        if matched {
                            p = next;
                            s += 1;
                            continue;
                        }
                    }
                }
                b'\\' if p + 1 < pattern.len() => {
                    if pattern[p + 1] == string[s] {
                        p += 2;
                        s += 1;
                        continue;
                    }
                }
                c => {
                    if c == string[s] {
                        p += 1;
                        s += 1;
                        continue;
                    }
                }
            }
        }
        match star {
            Some((sp, ss)) => {
                p = sp;
                s = ss + 1;
                star = Some((sp, ss + 1));
            }
            None => return false,
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// A `[...]` class at `pattern[at]` against `c`: whether it matches, and
/// where the pattern goes on (after the `]`, or the end if none closes it,
/// as redis reads it).
fn class(pattern: &[u8], at: usize, c: u8) -> Option<(bool, usize)> {
    let mut p = at + 1;
    let not = pattern.get(p) == Some(&b'^');
    if not {
        p += 1;
    }
    let mut matched = false;
    loop {
        match pattern.get(p) {
            None => {
                // No closing bracket: redis stops at the end of the pattern.
                p = pattern.len();
                break;
            }
            Some(b']') => {
                p += 1;
                break;
            }
            Some(b'\\') if p + 1 < pattern.len() => {
                matched |= pattern[p + 1] == c;
                p += 2;
            }
            Some(&lo) if pattern.get(p + 1) == Some(&b'-') && p + 2 < pattern.len() => {
                let hi = pattern[p + 2];
                let (lo, hi) = if lo > hi { (hi, lo) } else { (lo, hi) };
                matched |= (lo..=hi).contains(&c);
                p += 3;
            }
            Some(&x) => {
                matched |= x == c;
                p += 1;
            }
        }
    }
    Some((matched != not, p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_matches_as_redis() {
        for (pattern, string, want) in [
            ("h?llo", "hello", true),
            ("h?llo", "hllo", false),
            ("h*llo", "heeeello", true),
            ("h*llo", "hllo", true),
            ("h[ae]llo", "hallo", true),
            ("h[ae]llo", "hillo", false),
            ("h[^e]llo", "hallo", true),
            ("h[^e]llo", "hello", false),
            ("h[a-b]llo", "hbllo", true),
            ("h[b-a]llo", "hallo", true),
            ("h\\*llo", "h*llo", true),
            ("h\\*llo", "hello", false),
            ("*", "", false),
            ("", "", true),
            ("a*", "a", true),
            ("news.*", "news.tech", true),
            ("news.*", "new", false),
            ("a*b*c", "aXbYbZc", true),
            ("a*b*c", "aXbYbZ", false),
        ] {
            assert_eq!(glob_match(pattern.as_bytes(), string.as_bytes()), want, "{pattern} ~ {string}");
        }
    }

    #[test]
    fn pushes_are_redis_arrays() {
        let mut out = Vec::new();
        message(&mut out, b"news", b"hi");
        assert_eq!(out, b"*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$2\r\nhi\r\n");
        pmessage(&mut out, b"n*", b"news", b"hi");
        assert_eq!(out[35..], b"*4\r\n$8\r\npmessage\r\n$2\r\nn*\r\n$4\r\nnews\r\n$2\r\nhi\r\n"[..], "appended");
    }
}
