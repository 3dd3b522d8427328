//! The HTTP connection state machine on arbitrary bytes: the first byte
//! seeds the chunk sizes, the rest is the stream. Fed whole and fed in
//! chunks, it must give the same responses (interim `100 Continue`
//! aside), the same close and the same bytes left pending, every
//! response well formed, and never more pending than the limits allow
//! (`iomux_http::conformance` drives it as the server does).
#![no_main]

mod chunks;

use iomux_http::conformance::{drive, well_formed};
use iomux_http::{Http, Limits};
use libfuzzer_sys::fuzz_target;
use std::time::{Duration, UNIX_EPOCH};

const LIMITS: Limits = Limits { max_head: 300, max_body: 200 };

fuzz_target!(|data: &[u8]| {
    let Some((&seed, stream)) = data.split_first() else { return };
    let mut http = Http::new(LIMITS);
    http.set_date(UNIX_EPOCH + Duration::from_secs(1_700_000_000));
    let whole = drive(&mut http, stream, []);
    let chunks = chunks::sizes(seed);
    let split = drive(&mut http, stream, chunks);
    assert_eq!(whole.responses, split.responses, "responses depend on the split");
    assert_eq!((whole.count, whole.closed, whole.pending), (split.count, split.closed, split.pending));
    if let Err(e) = well_formed(&whole.responses) {
        panic!("{e}");
    }
});
