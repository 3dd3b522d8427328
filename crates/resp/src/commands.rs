//! The commands, with redis 7's replies and exact error texts (t_string.c,
//! expire.c, server.c's processCommand).

use crate::parse::integer;
use crate::store::Value;
use crate::Store;
use bytes::Bytes;

/// A command's argument: borrowed from the input, or from its unquoted
/// copy (an inline argument in quotes).
pub type Arg<'a> = &'a [u8];

/// What the connection does after a reply.
#[derive(Debug, PartialEq, Eq)]
pub enum After {
    Continue,
    Close,
    /// The reply goes on with these shared bytes, after `out`.
    Shared(Bytes),
}

pub fn error(out: &mut Vec<u8>, text: &[u8]) {
    out.extend_from_slice(b"-ERR ");
    // As redis: no newline may break the reply.
    out.extend(text.iter().map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }));
    out.extend_from_slice(b"\r\n");
}

pub(crate) fn bulk(out: &mut Vec<u8>, value: &[u8]) {
    bulk_head(out, value.len());
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

fn bulk_head(out: &mut Vec<u8>, len: usize) {
    if len < 10 {
        // The common short value: one append.
        out.extend_from_slice(&[b'$', b'0' + len as u8, b'\r', b'\n']);
        return;
    }
    out.push(b'$');
    out.extend_from_slice(itoa::Buffer::new().format(len).as_bytes());
    out.extend_from_slice(b"\r\n");
}

pub(crate) fn int(out: &mut Vec<u8>, n: i64) {
    out.push(b':');
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    out.extend_from_slice(b"\r\n");
}

pub(crate) fn array(out: &mut Vec<u8>, len: usize) {
    out.push(b'*');
    out.extend_from_slice(itoa::Buffer::new().format(len).as_bytes());
    out.extend_from_slice(b"\r\n");
}

const NIL: &[u8] = b"$-1\r\n";
const OK: &[u8] = b"+OK\r\n";
const NOT_INTEGER: &[u8] = b"value is not an integer or out of range";
const SYNTAX: &[u8] = b"syntax error";

/// A command's name and arity as redis's table has them (negative: at
/// least that many arguments, the name included).
struct Spec {
    name: &'static str,
    arity: i32,
    cmd: Cmd,
}

/// Which command: matched as a number, not by comparing names again.
#[derive(Clone, Copy)]
enum Cmd {
    Ping,
    Echo,
    Get,
    Set,
    Del,
    Incr,
    Decr,
    Exists,
    Expire,
    Ttl,
    Dbsize,
    Flushall,
    Config,
    Command,
    Quit,
}

const COMMANDS: &[Spec] = &[
    Spec { name: "ping", arity: -1, cmd: Cmd::Ping },
    Spec { name: "echo", arity: 2, cmd: Cmd::Echo },
    Spec { name: "get", arity: 2, cmd: Cmd::Get },
    Spec { name: "set", arity: -3, cmd: Cmd::Set },
    Spec { name: "del", arity: -2, cmd: Cmd::Del },
    Spec { name: "incr", arity: 2, cmd: Cmd::Incr },
    Spec { name: "decr", arity: 2, cmd: Cmd::Decr },
    Spec { name: "exists", arity: -2, cmd: Cmd::Exists },
    Spec { name: "expire", arity: -3, cmd: Cmd::Expire },
    Spec { name: "ttl", arity: 2, cmd: Cmd::Ttl },
    Spec { name: "dbsize", arity: 1, cmd: Cmd::Dbsize },
    Spec { name: "flushall", arity: -1, cmd: Cmd::Flushall },
    Spec { name: "config", arity: -2, cmd: Cmd::Config },
    Spec { name: "command", arity: -1, cmd: Cmd::Command },
    Spec { name: "quit", arity: -1, cmd: Cmd::Quit },
];

/// CONFIG GET's answers: the settings a client asks about (redis-benchmark
/// asks for `save` and `appendonly`), as redis-server started with
/// `--save '' --appendonly no` gives them.
const CONFIG: &[(&str, &str)] =
    &[("save", ""), ("appendonly", "no"), ("databases", "16"), ("maxmemory", "0"), ("io-threads", "1")];

/// The unknown-command error, formatted as redis does: the name and the
/// first arguments, quoted, up to 128 characters of them.
fn unknown(out: &mut Vec<u8>, args: &[Arg<'_>]) {
    // %s stops at a NUL, as in C.
    let c_str = |a: &[u8]| a.iter().position(|&b| b == 0).map_or(a.len(), |n| n).min(a.len());
    let mut text = b"unknown command '".to_vec();
    let name = &args[0][..c_str(args[0])];
    text.extend_from_slice(&name[..name.len().min(128)]);
    text.extend_from_slice(b"', with args beginning with: ");
    let mut listed: Vec<u8> = Vec::new();
    for a in &args[1..] {
        if listed.len() >= 128 {
            break;
        }
        let a = &a[..c_str(a)];
        let room = 128 - listed.len(); // sdscatprintf's "'%.*s' " with 128 - sdslen(args)
        listed.push(b'\'');
        listed.extend_from_slice(&a[..a.len().min(room)]);
        listed.extend_from_slice(b"' ");
    }
    text.extend_from_slice(&listed);
    error(out, &text);
}

fn arity_error(out: &mut Vec<u8>, fullname: &str) {
    error(out, format!("wrong number of arguments for '{fullname}' command").as_bytes());
}

/// A command's name as redis's table has it, if it is known and has a
/// valid number of arguments; else its error is appended to `out`.
pub fn check(args: &[Arg<'_>], out: &mut Vec<u8>) -> Option<&'static str> {
    let Some(spec) = COMMANDS.iter().find(|s| s.name.as_bytes().eq_ignore_ascii_case(args[0])) else {
        unknown(out, args);
        return None;
    };
    let argc = args.len() as i32;
    if (spec.arity > 0 && spec.arity != argc) || argc < -spec.arity {
        arity_error(out, spec.name);
        return None;
    }
    Some(spec.name)
}

/// Runs one command, appending its reply to `out`; with `share`, a GET of
/// a shared value appends only the reply's head and hands back the rest.
pub fn execute(store: &mut Store, now: u64, args: &[Arg<'_>], out: &mut Vec<u8>, share: bool) -> After {
    let Some(spec) = COMMANDS.iter().find(|s| s.name.as_bytes().eq_ignore_ascii_case(args[0])) else {
        unknown(out, args);
        return After::Continue;
    };
    let argc = args.len() as i32;
    if (spec.arity > 0 && spec.arity != argc) || argc < -spec.arity {
        arity_error(out, spec.name);
        return After::Continue;
    }
    match spec.cmd {
        Cmd::Ping => match args.len() {
            1 => out.extend_from_slice(b"+PONG\r\n"),
            2 => bulk(out, args[1]),
            _ => arity_error(out, "ping"),
        },
        Cmd::Echo => bulk(out, args[1]),
        Cmd::Get => match store.value(args[1], now) {
            Some(Value::Shared(tail)) if share => {
                bulk_head(out, tail.len() - 2);
                return After::Shared(tail.clone());
            }
            Some(v) => bulk(out, v.as_slice()),
            None => out.extend_from_slice(NIL),
        },
        Cmd::Set => set(store, now, args, out),
        Cmd::Del => {
            let n = args[1..].iter().filter(|k| store.remove(k, now)).count();
            int(out, n as i64);
        }
        Cmd::Exists => {
            let n = args[1..].iter().filter(|k| store.exists(k, now)).count();
            int(out, n as i64);
        }
        Cmd::Incr => incr_by(store, now, args[1], 1, out),
        Cmd::Decr => incr_by(store, now, args[1], -1, out),
        Cmd::Expire => expire(store, now, args, out),
        Cmd::Ttl => match store.expires_at(args[1], now) {
            None => int(out, -2),
            Some(None) => int(out, -1),
            Some(Some(at)) => int(out, ((at.saturating_sub(now) + 500) / 1000) as i64),
        },
        Cmd::Dbsize => int(out, store.len() as i64),
        Cmd::Flushall => {
            let mode = args.get(1).map(|m| m.to_ascii_lowercase());
            match (args.len(), mode.as_deref()) {
                (1, _) | (2, Some(b"async" | b"sync")) => {
                    store.clear();
                    out.extend_from_slice(OK);
                }
                _ => error(out, SYNTAX),
            }
        }
        Cmd::Config => config(args, out),
        Cmd::Command => match args.get(1).map(|s| s.to_ascii_lowercase()) {
            None => array(out, 0),
            Some(sub) if sub == b"count" && args.len() == 2 => int(out, COMMANDS.len() as i64),
            Some(sub) if sub == b"docs" || sub == b"info" => array(out, 0),
            Some(_) => unknown_subcommand(out, args[1], "COMMAND"),
        },
        Cmd::Quit => {
            out.extend_from_slice(OK);
            return After::Close;
        }
    }
    After::Continue
}

fn unknown_subcommand(out: &mut Vec<u8>, sub: &[u8], container: &str) {
    let mut text = b"unknown subcommand '".to_vec();
    text.extend_from_slice(&sub[..sub.len().min(128)]);
    text.extend_from_slice(format!("'. Try {container} HELP.").as_bytes());
    error(out, &text);
}

fn config(args: &[Arg<'_>], out: &mut Vec<u8>) {
    if !args[1].eq_ignore_ascii_case(b"get") {
        return unknown_subcommand(out, args[1], "CONFIG");
    }
    if args.len() < 3 {
        return arity_error(out, "config|get");
    }
    let mut found: Vec<(&str, &str)> = Vec::new();
    for wanted in &args[2..] {
        for &(name, value) in CONFIG {
            if name.as_bytes().eq_ignore_ascii_case(wanted) && !found.iter().any(|(n, _)| *n == name) {
                found.push((name, value));
            }
        }
    }
    array(out, found.len() * 2);
    for (name, value) in found {
        bulk(out, name.as_bytes());
        bulk(out, value.as_bytes());
    }
}

fn incr_by(store: &mut Store, now: u64, key: &[u8], by: i64, out: &mut Vec<u8>) {
    let current = match store.get(key, now) {
        None => 0,
        Some(v) => match integer(v) {
            Some(n) => n,
            None => return error(out, NOT_INTEGER),
        },
    };
    let Some(next) = current.checked_add(by) else {
        return error(out, b"increment or decrement would overflow");
    };
    store.replace(key, itoa::Buffer::new().format(next).as_bytes(), now);
    int(out, next);
}

/// An expiry's milliseconds from its argument, or redis's error text.
fn millis(arg: &[u8], seconds: bool, command: &str) -> Result<i64, Vec<u8>> {
    let n = integer(arg).ok_or_else(|| NOT_INTEGER.to_vec())?;
    let invalid = || format!("invalid expire time in '{command}' command").into_bytes();
    if n <= 0 || (seconds && n > i64::MAX / 1000) {
        return Err(invalid());
    }
    Ok(if seconds { n * 1000 } else { n })
}

fn set(store: &mut Store, now: u64, args: &[Arg<'_>], out: &mut Vec<u8>) {
    #[derive(PartialEq)]
    enum Expiry {
        Relative,
        Absolute,
    }
    let (mut nx, mut xx, mut get, mut keep_ttl) = (false, false, false, false);
    let mut expiry: Option<(Expiry, bool, &[u8])> = None; // (kind, in seconds, argument)
    let mut j = 3;
    while j < args.len() {
        let opt = args[j].to_ascii_lowercase();
        let next = args.get(j + 1);
        match opt.as_slice() {
            b"nx" if !xx => nx = true,
            b"xx" if !nx => xx = true,
            b"get" => get = true,
            b"keepttl" if expiry.is_none() => keep_ttl = true,
            b"ex" | b"px" | b"exat" | b"pxat" if !keep_ttl && expiry.is_none() && next.is_some() => {
                let kind = if opt.ends_with(b"at") { Expiry::Absolute } else { Expiry::Relative };
                expiry = Some((kind, opt[0] == b'e', next.map_or(&[][..], |n| &n[..])));
                j += 1;
            }
            _ => return error(out, SYNTAX),
        }
        j += 1;
    }
    let expires_at = match expiry {
        None => None,
        Some((kind, seconds, arg)) => match millis(arg, seconds, "set") {
            Err(text) => return error(out, &text),
            Ok(ms) => {
                let base = if kind == Expiry::Relative { now as i64 } else { 0 };
                match base.checked_add(ms) {
                    Some(at) => Some(at as u64),
                    None => return error(out, b"invalid expire time in 'set' command"),
                }
            }
        },
    };
    if get {
        match store.get(args[1], now) {
            Some(v) => bulk(out, v),
            None => out.extend_from_slice(NIL),
        }
    }
    // Looked up only when a condition needs it: a plain SET hashes once.
    let found = (nx || xx) && store.exists(args[1], now);
    if (nx && found) || (xx && !found) {
        if !get {
            out.extend_from_slice(NIL);
        }
        return;
    }
    let keep = if keep_ttl { store.expires_at(args[1], now).flatten() } else { None };
    store.set(args[1], args[2], expires_at.or(keep));
    if expires_at.is_some_and(|at| at <= now) {
        store.remove(args[1], now); // already expired (EXAT/PXAT in the past)
    }
    if !get {
        out.extend_from_slice(OK);
    }
}

fn expire(store: &mut Store, now: u64, args: &[Arg<'_>], out: &mut Vec<u8>) {
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for opt in &args[3..] {
        match opt.to_ascii_lowercase().as_slice() {
            b"nx" => nx = true,
            b"xx" => xx = true,
            b"gt" => gt = true,
            b"lt" => lt = true,
            _ => {
                let mut text = b"Unsupported option ".to_vec();
                text.extend_from_slice(opt);
                return error(out, &text);
            }
        }
    }
    if nx && (xx || gt || lt) {
        return error(out, b"NX and XX, GT or LT options at the same time are not compatible");
    }
    if gt && lt {
        return error(out, b"GT and LT options at the same time are not compatible");
    }
    let Some(seconds) = integer(args[2]) else { return error(out, NOT_INTEGER) };
    let at = seconds.checked_mul(1000).and_then(|ms| ms.checked_add(now as i64));
    let Some(at) = at else { return error(out, b"invalid expire time in 'expire' command") };
    let Some(current) = store.expires_at(args[1], now) else { return int(out, 0) };
    let refused = (nx && current.is_some())
        || (xx && current.is_none())
        || (gt && current.is_none_or(|c| at <= c as i64))
        || (lt && current.is_some_and(|c| at >= c as i64));
    if refused {
        return int(out, 0);
    }
    if at <= now as i64 {
        store.remove(args[1], now);
    } else {
        store.expire(args[1], at as u64, now);
    }
    int(out, 1)
}
