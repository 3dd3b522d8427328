//! The RESP state machine on arbitrary bytes: the first byte seeds the
//! chunk sizes, the rest is the stream. Fed whole and fed in chunks (as
//! the server feeds it: each chunk after what was left unconsumed), it
//! must give the same replies and the same close, and never panic.
#![no_main]

use iomux_resp::conformance::drive;
use iomux_resp::Limits;
use libfuzzer_sys::fuzz_target;

/// Small limits, so the fuzzer reaches them.
const LIMITS: Limits = Limits { max_bulk_len: 64, max_multibulk: 16 };

fuzz_target!(|data: &[u8]| {
    let Some((&seed, stream)) = data.split_first() else { return };
    let whole = drive(LIMITS, stream, std::iter::repeat(usize::MAX), 256);
    // Chunks of 1 to 16 bytes, from the seed byte (xorshift32).
    let mut state = u32::from(seed) | 1;
    let chunks = std::iter::from_fn(|| {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        Some((state % 16) as usize + 1)
    });
    assert_eq!(whole, drive(LIMITS, stream, chunks, 256), "replies depend on the split");
});
