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
mod store;

pub use parse::INLINE_MAX;
pub use store::Store;

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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fed {
    /// Input bytes used; the rest (a request not yet complete, or not yet
    /// answered because the output passed its budget) is handed back
    /// with what arrives next.
    pub consumed: usize,
    /// Replies appended to `out`.
    pub replies: u32,
    /// Close once `out` is sent (QUIT, or a protocol error); nothing more
    /// is read.
    pub close: bool,
}

/// The protocol side: limits, and scratch space reused between requests.
#[derive(Default)]
pub struct Resp {
    limits: Limits,
    args: Vec<Vec<u8>>,
}

impl Resp {
    /// A protocol with these limits.
    pub fn new(limits: Limits) -> Resp {
        Resp { limits, args: Vec::new() }
    }

    /// Answers the complete requests at the start of `input` against
    /// `store` at `now_ms` (milliseconds on any clock that only goes
    /// forward), appending the replies to `out`. Stops at an incomplete
    /// request, after a request that closes, or once `out` holds more
    /// than `out_budget` bytes (so a pipeline of large replies is answered
    /// a part at a time as the output drains).
    pub fn feed(&mut self, store: &mut Store, now_ms: u64, input: &[u8], out: &mut Vec<u8>, out_budget: usize) -> Fed {
        let mut fed = Fed { consumed: 0, replies: 0, close: false };
        store.purge(now_ms);
        while fed.consumed < input.len() && out.len() <= out_budget {
            let rest = &input[fed.consumed..];
            match parse::request(rest, &self.limits) {
                parse::Parsed::Incomplete => break,
                parse::Parsed::Nothing { consumed } => fed.consumed += consumed,
                parse::Parsed::Error(text) => {
                    commands::error(out, &text);
                    fed.replies += 1;
                    fed.close = true;
                    fed.consumed = input.len();
                    break;
                }
                parse::Parsed::Command { args, consumed } => {
                    let inline = rest[0] != b'*';
                    self.args.clear();
                    self.args.extend(args.iter().map(|&(a, b)| parse::unquote(&rest[a..b], inline).into_owned()));
                    fed.consumed += consumed;
                    fed.replies += 1;
                    if commands::execute(store, now_ms, &self.args, out) == commands::After::Close {
                        fed.close = true;
                        break;
                    }
                }
            }
        }
        fed
    }
}

#[cfg(test)]
mod tests;
