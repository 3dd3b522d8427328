//! Feeding a stream as the server does (each piece after the input left
//! unconsumed, with an output budget), for the property test and the fuzz
//! target, which compare the replies of different splits.

use crate::{Limits, Resp, Store};

/// How [`drive`] handles values.
#[derive(Clone, Copy, Debug)]
pub enum Values {
    /// Copied into the replies.
    Copied,
    /// Values of this many bytes or more kept shared and handed back by
    /// [`Resp::share_values`], then appended as the server sends them.
    SharedFrom(usize),
}

/// The replies to `stream` cut into pieces of the `chunks` sizes, and
/// whether it closed; each call may pass `budget` bytes of output.
pub fn drive(
    limits: Limits,
    stream: &[u8],
    chunks: impl Iterator<Item = usize>,
    budget: usize,
    values: Values,
) -> (Vec<u8>, bool) {
    let (mut resp, mut store) = match values {
        Values::Copied => (Resp::new(limits), Store::new()),
        Values::SharedFrom(n) => (Resp::new(limits).share_values(), Store::sharing_from(n)),
    };
    let mut out = Vec::new();
    let mut pending = Vec::new();
    let mut at = 0;
    for size in chunks {
        if at >= stream.len() {
            break;
        }
        let end = at.saturating_add(size).min(stream.len());
        pending.extend_from_slice(&stream[at..end]);
        at = end;
        loop {
            let limit = out.len().saturating_add(budget);
            let fed = resp.feed(&mut store, 5, &pending, &mut out, limit);
            assert!(fed.consumed <= pending.len(), "consumed more than it was given");
            pending.drain(..fed.consumed);
            if let Some(tail) = fed.shared {
                out.extend_from_slice(&tail);
            }
            if fed.close {
                return (out, true);
            }
            if fed.consumed == 0 {
                break;
            }
        }
    }
    (out, false)
}
