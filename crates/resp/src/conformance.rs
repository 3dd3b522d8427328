//! Feeding a stream as the server does (each piece after the input left
//! unconsumed, with an output budget), for the property test and the fuzz
//! target, which compare the replies of different splits.

use crate::{Limits, Resp, Store};

/// The replies to `stream` cut into pieces of the `chunks` sizes, and
/// whether it closed; each call may pass `budget` bytes of output.
pub fn drive(limits: Limits, stream: &[u8], chunks: impl Iterator<Item = usize>, budget: usize) -> (Vec<u8>, bool) {
    let (mut resp, mut store, mut out) = (Resp::new(limits), Store::new(), Vec::new());
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
