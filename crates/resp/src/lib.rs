//! RESP2, the protocol of redis, for `iomux serve --proto resp`: a
//! bytes-in, bytes-out state machine with no sockets, as `iomux-http` is.
//!
//! [`Resp::feed`] answers the complete requests at the start of its input
//! against a [`Store`], appending redis's exact replies, and says how much
//! it consumed and whether to close. The server decides where the store
//! lives (one per loop, or one shared by all).
//!
//! ```
//! use iomux_resp::{Resp, Store};
//!
//! let (mut resp, mut store, mut out) = (Resp::default(), Store::new(), Vec::new());
//! let input = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\nGET k\r\nGET";
//! let fed = resp.feed(&mut store, 0, input, &mut out, usize::MAX);
//! assert_eq!(out, b"+OK\r\n$1\r\nv\r\n");
//! assert_eq!((fed.consumed, fed.replies, fed.close), (input.len() - 3, 2, false));
//! ```

mod commands;
pub mod conformance;
mod parse;
pub mod pubsub;
mod store;

pub use bytes::Bytes;
pub use parse::INLINE_MAX;
pub use pubsub::{Broker, Subscriptions};
pub use store::{Store, SHARED_MIN};

use commands::Arg;

/// Arguments of one request kept on the stack (SET k v EX s NX GET has 7).
const STACK_ARGS: usize = 8;

/// Redis's request limits (`proto-max-bulk-len`, and the multibulk count
/// it accepts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The largest bulk string, in bytes (redis: 512 MB).
    pub max_bulk_len: usize,
    /// The most arguments of one request (redis 7 for an authenticated
    /// client: INT_MAX).
    pub max_multibulk: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_bulk_len: 512 << 20, max_multibulk: i32::MAX as usize }
    }
}

/// What [`Resp::feed`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fed {
    /// Input bytes used; the rest (a request not yet complete, or not yet
    /// answered because the output passed its budget) is handed back
    /// with what arrives next.
    pub consumed: usize,
    /// Replies appended to `out`.
    pub replies: u32,
    /// Of them, error replies (`-ERR ...`, `-WRONGTYPE ...`).
    pub errors: u32,
    /// Close once `out` is sent (QUIT, or a protocol error); nothing more
    /// is read.
    pub close: bool,
    /// The rest of the last reply, to send right after `out` without a
    /// copy: a shared value ([`Resp::share_values`] only). Feeding stops
    /// after such a reply.
    pub shared: Option<Bytes>,
}

/// The protocol side: limits, and scratch space reused between requests.
#[derive(Default)]
pub struct Resp {
    limits: Limits,
    /// The current request's arguments, as ranges of the input (reused).
    ranges: Vec<(usize, usize)>,
    share: bool,
}

impl Resp {
    /// A protocol with these limits.
    pub fn new(limits: Limits) -> Resp {
        Resp { limits, ranges: Vec::new(), share: false }
    }

    /// Hands large values to the caller instead of copying them into the
    /// output: a GET of a value the store keeps shared ([`SHARED_MIN`]
    /// bytes or more) ends the feed with [`Fed::shared`], which the
    /// caller sends after `out` (with `iomux`'s `Io::write_bytes`, say).
    ///
    /// ```
    /// use iomux_resp::{Resp, Store, SHARED_MIN};
    ///
    /// let (mut resp, mut store, mut out) = (Resp::default().share_values(), Store::new(), Vec::new());
    /// store.set(b"big", &vec![b'x'; SHARED_MIN], None);
    /// let fed = resp.feed(&mut store, 0, b"GET big\r\nPING\r\n", &mut out, usize::MAX);
    /// assert_eq!(out, format!("${SHARED_MIN}\r\n").as_bytes(), "the reply's head");
    /// let tail = fed.shared.expect("the value, shared");
    /// assert_eq!((tail.len(), &tail[SHARED_MIN..]), (SHARED_MIN + 2, &b"\r\n"[..]));
    /// assert_eq!((fed.consumed, fed.replies), (9, 1), "PING waits for the next feed");
    /// ```
    pub fn share_values(mut self) -> Resp {
        self.share = true;
        self
    }

    /// Answers the complete requests at the start of `input` against
    /// `store` at `now_ms` (milliseconds on any clock that only goes
    /// forward), appending the replies to `out`. Stops at an incomplete
    /// request, after a request that closes, after a reply whose value is
    /// handed back shared ([`Fed::shared`]), or once `out` holds more than
    /// `out_budget` bytes (so a pipeline of large replies is answered a
    /// part at a time as the output drains).
    pub fn feed(&mut self, store: &mut Store, now_ms: u64, input: &[u8], out: &mut Vec<u8>, out_budget: usize) -> Fed {
        self.feed_with(store, now_ms, input, out, out_budget, None)
    }

    /// [`Resp::feed`] with pub/sub: the connection's subscriptions, and
    /// the server's broker that knows the others and delivers. In
    /// subscribed state only (P)SUBSCRIBE, (P)UNSUBSCRIBE, PING and QUIT
    /// run, as in redis; the feed also stops after a command once
    /// [`Broker::hold`] says so.
    ///
    /// ```
    /// use iomux_resp::{Broker, Bytes, Resp, Store, Subscriptions};
    ///
    /// /// One connection alone: PUBLISH reaches nobody.
    /// struct Alone;
    /// impl Broker for Alone {
    ///     fn subscribed(&mut self, _: &Bytes, _: bool, _: bool) {}
    ///     fn publish(&mut self, _: &[u8], _: &[u8]) -> i64 { 0 }
    ///     fn channels(&self, _: Option<&[u8]>) -> Vec<Bytes> { Vec::new() }
    ///     fn numsub(&self, _: &[u8]) -> i64 { 0 }
    ///     fn numpat(&self) -> i64 { 0 }
    /// }
    /// let (mut resp, mut store, mut subs, mut out) = (Resp::default(), Store::new(), Subscriptions::default(), Vec::new());
    /// resp.feed_pubsub(&mut store, 0, b"PUBLISH news hi\r\nSUBSCRIBE news\r\nGET k\r\n", &mut out, usize::MAX, &mut subs, &mut Alone);
    /// assert!(out.starts_with(b":0\r\n*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n-ERR Can't execute 'get'"));
    /// ```
    #[allow(clippy::too_many_arguments)]
    pub fn feed_pubsub(
        &mut self,
        store: &mut Store,
        now_ms: u64,
        input: &[u8],
        out: &mut Vec<u8>,
        out_budget: usize,
        subs: &mut Subscriptions,
        broker: &mut dyn Broker,
    ) -> Fed {
        self.feed_with(store, now_ms, input, out, out_budget, Some((subs, broker)))
    }

    fn feed_with(
        &mut self,
        store: &mut Store,
        now_ms: u64,
        input: &[u8],
        out: &mut Vec<u8>,
        out_budget: usize,
        mut pubsub: Option<(&mut Subscriptions, &mut dyn Broker)>,
    ) -> Fed {
        let mut fed = Fed { consumed: 0, replies: 0, errors: 0, close: false, shared: None };
        store.purge(now_ms);
        // The arguments borrow the input: no copy per argument, and no
        // allocation for a request of up to STACK_ARGS arguments. Only an
        // inline request with quotes has arguments of its own (unquoted).
        let mut on_stack: [Arg<'_>; STACK_ARGS] = [&[]; STACK_ARGS];
        while fed.consumed < input.len() && out.len() <= out_budget {
            let rest = &input[fed.consumed..];
            match parse::request(rest, &self.limits, &mut self.ranges) {
                parse::Parsed::Incomplete => break,
                parse::Parsed::Nothing { consumed } => fed.consumed += consumed,
                parse::Parsed::Error(text) => {
                    commands::error(out, &text);
                    fed.replies += 1;
                    fed.errors += 1;
                    fed.close = true;
                    fed.consumed = input.len();
                    break;
                }
                parse::Parsed::Command { consumed } => {
                    let ranges = &self.ranges;
                    let quoted = rest[0] != b'*' && ranges.iter().any(|&(a, _)| matches!(rest[a], b'"' | b'\''));
                    let unquoted: Vec<std::borrow::Cow<'_, [u8]>>;
                    let on_heap: Vec<Arg<'_>>;
                    let args: &[Arg<'_>] = if quoted {
                        unquoted = ranges.iter().map(|&(a, b)| parse::unquote(&rest[a..b], true)).collect();
                        on_heap = unquoted.iter().map(|arg| &arg[..]).collect();
                        &on_heap
                    } else if ranges.len() <= STACK_ARGS {
                        for (slot, &(a, b)) in on_stack.iter_mut().zip(ranges) {
                            *slot = &rest[a..b];
                        }
                        &on_stack[..ranges.len()]
                    } else {
                        on_heap = ranges.iter().map(|&(a, b)| &rest[a..b]).collect();
                        &on_heap
                    };
                    fed.consumed += consumed;
                    fed.replies += 1;
                    let reply_at = out.len();
                    let after = match &mut pubsub {
                        Some((subs, broker)) => {
                            pubsub_command(store, now_ms, args, out, self.share, subs, &mut **broker)
                        }
                        None => commands::execute(store, now_ms, args, out, self.share),
                    };
                    fed.errors += u32::from(out.get(reply_at) == Some(&b'-'));
                    match after {
                        commands::After::Continue if pubsub.as_ref().is_some_and(|(_, broker)| broker.hold()) => {
                            break; // the broker holds the publisher back
                        }
                        commands::After::Continue => {}
                        commands::After::Close => {
                            fed.close = true;
                            break;
                        }
                        commands::After::Shared(tail) => {
                            fed.shared = Some(tail);
                            break;
                        }
                    }
                }
            }
        }
        fed
    }
}

/// One command with pub/sub: its own commands, PING's subscribed reply,
/// and the refusal of the rest in subscribed state (after redis's unknown
/// command and arity errors, which come first).
fn pubsub_command(
    store: &mut Store,
    now_ms: u64,
    args: &[Arg<'_>],
    out: &mut Vec<u8>,
    share: bool,
    subs: &mut Subscriptions,
    broker: &mut dyn Broker,
) -> commands::After {
    if pubsub::is_pubsub(args[0]) {
        pubsub::execute(args, out, subs, broker);
        return commands::After::Continue;
    }
    if subs.count() == 0 {
        return commands::execute(store, now_ms, args, out, share);
    }
    if !pubsub::allowed_when_subscribed(args[0]) {
        if let Some(name) = commands::check(args, out) {
            pubsub::refused(out, name);
        }
        return commands::After::Continue;
    }
    if args[0].eq_ignore_ascii_case(b"ping") && args.len() <= 2 {
        pubsub::ping(out, args.get(1).copied());
        return commands::After::Continue;
    }
    commands::execute(store, now_ms, args, out, share)
}

#[cfg(test)]
mod tests;
