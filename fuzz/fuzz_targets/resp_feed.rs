//! The RESP state machine on arbitrary bytes: the first byte seeds the
//! chunk sizes, the rest is the stream. Fed whole and fed in chunks (as
//! the server feeds it: each chunk after what was left unconsumed), with
//! values copied or shared (the seed's top bit), it must give the same
//! replies and the same close, and never panic.
#![no_main]

mod chunks;

use iomux_resp::conformance::{drive, Values};
use iomux_resp::Limits;
use libfuzzer_sys::fuzz_target;

/// Small limits, so the fuzzer reaches them.
const LIMITS: Limits = Limits { max_bulk_len: 64, max_multibulk: 16 };

fuzz_target!(|data: &[u8]| {
    let Some((&seed, stream)) = data.split_first() else { return };
    let whole = drive(LIMITS, stream, std::iter::repeat(usize::MAX), 256, Values::Copied);
    let chunks = chunks::sizes(seed);
    let values = if seed & 0x80 != 0 { Values::SharedFrom(4) } else { Values::Copied };
    assert_eq!(whole, drive(LIMITS, stream, chunks, 256, values), "replies depend on the split");
});
