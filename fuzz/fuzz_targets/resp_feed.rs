//! The RESP state machine on arbitrary bytes: the first byte seeds the
//! chunk sizes, the rest is the stream. Fed whole and fed in chunks (as
//! the server feeds it: each chunk after what was left unconsumed), it
//! must give the same replies and the same close, and never panic.
#![no_main]

use iomux_resp::{Limits, Resp, Store};
use libfuzzer_sys::fuzz_target;

/// Small limits, so the fuzzer reaches them.
const LIMITS: Limits = Limits { max_bulk_len: 64, max_multibulk: 16 };

/// The replies and whether it closed, for `stream` cut into `chunks`.
fn drive(stream: &[u8], chunks: impl Iterator<Item = usize>) -> (Vec<u8>, bool) {
    let (mut resp, mut store, mut out) = (Resp::new(LIMITS), Store::new(), Vec::new());
    let mut pending = Vec::new();
    let mut at = 0;
    for size in chunks {
        if at >= stream.len() {
            break;
        }
        let end = (at + size).min(stream.len());
        pending.extend_from_slice(&stream[at..end]);
        at = end;
        loop {
            let budget = out.len() + 256;
            let fed = resp.feed(&mut store, 7, &pending, &mut out, budget);
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

fuzz_target!(|data: &[u8]| {
    let Some((&seed, stream)) = data.split_first() else { return };
    let whole = drive(stream, std::iter::repeat(usize::MAX));
    // Chunks of 1 to 16 bytes, from the seed byte (xorshift32).
    let mut state = u32::from(seed) | 1;
    let chunks = std::iter::from_fn(|| {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        Some((state % 16) as usize + 1)
    });
    assert_eq!(whole, drive(stream, chunks), "replies depend on the split");
});
