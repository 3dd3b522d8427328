//! The property the server relies on: however the network splits a
//! stream of requests, valid or not, the connection gets exactly the same
//! responses, and never a panic. 100,000 cases by default
//! (`PROPTEST_CASES` overrides).

use iomux_http::conformance::{self, Seen};
use iomux_http::{Http, Limits};
use proptest::prelude::*;
use std::time::{Duration, UNIX_EPOCH};

const LIMITS: Limits = Limits { max_head: 300, max_body: 200 };

fn drive(stream: &[u8], chunks: &[usize]) -> Seen {
    let mut http = Http::new(LIMITS);
    http.set_date(UNIX_EPOCH + Duration::from_secs(1_700_000_000));
    let seen = conformance::drive(&mut http, stream, chunks.iter().copied());
    if let Err(e) = conformance::well_formed(&seen.responses) {
        panic!("{e}");
    }
    seen
}

/// One request of the stream, and whether it is valid.
fn request() -> impl Strategy<Value = (Vec<u8>, bool)> {
    let body = prop::collection::vec(any::<u8>(), 0..40);
    let valid = prop_oneof![
        Just(b"GET /plaintext HTTP/1.1\r\nHost: h\r\n\r\n".to_vec()),
        Just(b"GET /json?q=1 HTTP/1.1\r\nHost: h\r\nAccept: */*\r\n\r\n".to_vec()),
        Just(b"HEAD /plaintext HTTP/1.1\r\nHost: h\r\n\r\n".to_vec()),
        Just(b"HEAD /echo HTTP/1.1\r\nHost: h\r\n\r\n".to_vec()),
        Just(b"GET /plaintext HTTP/1.0\r\nConnection: keep-alive\r\n\r\n".to_vec()),
        Just(b"GET /missing HTTP/1.1\r\nHost: h\r\n\r\n".to_vec()),
        Just(b"DELETE /json HTTP/1.1\r\nHost: h\r\n\r\n".to_vec()),
        Just(b"\r\nGET /plaintext HTTP/1.1\nHost: h\n\n".to_vec()),
        body.clone().prop_map(|b| with_body("POST /echo HTTP/1.1\r\nHost: h", &b)),
        body.clone().prop_map(|b| with_body("POST /echo HTTP/1.1\r\nHost: h\r\nExpect: 100-continue", &b)),
        body.prop_map(|b| with_body("PUT /plaintext HTTP/1.1\r\nHost: h", &b)),
    ]
    .prop_map(|r| (r, true));
    let invalid = prop_oneof![
        prop::collection::vec(any::<u8>(), 1..60),
        Just(b"GET /plaintext HTTP/1.1\r\n\r\n".to_vec()),
        Just(b"GET /plaintext HTTP/1.1\r\nConnection: close\r\nHost: h\r\n\r\n".to_vec()),
        Just(b"GET /plaintext HTTP/1.0\r\n\r\n".to_vec()),
        Just(b"POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab".to_vec()),
        Just(b"POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: +5\r\n\r\nhello".to_vec()),
        Just(b"POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 201\r\n\r\n".to_vec()),
        Just(b"POST /echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n".to_vec()),
        (0usize..400)
            .prop_map(|n| format!("GET /plaintext HTTP/1.1\r\nHost: h\r\nX: {}\r\n\r\n", "v".repeat(n)).into_bytes()),
        Just(b"GET /plaintext HTTP/1.1\r\nHost: h\r\nBad Name: v\r\n\r\n".to_vec()),
    ]
    .prop_map(|r| (r, false));
    prop_oneof![4 => valid, 1 => invalid]
}

fn with_body(head: &str, body: &[u8]) -> Vec<u8> {
    let mut r = format!("{head}\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
    r.extend_from_slice(body);
    r
}

/// Requests (each with whether it is valid), bytes cut off the end, chunk sizes.
type Case = (Vec<(Vec<u8>, bool)>, usize, Vec<usize>);

/// A stream of requests, maybe cut short, and how to split it.
fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(request(), 1..8),
        0usize..20,
        prop_oneof![
            prop::collection::vec(1usize..64, 0..40),
            Just(vec![1; 600]), // byte by byte
        ],
    )
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(100_000)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn responses_do_not_depend_on_how_the_input_is_split((requests, cut, chunks) in case()) {
        let mut stream: Vec<u8> = requests.iter().flat_map(|(r, _)| r.iter().copied()).collect();
        let all_valid = requests.iter().all(|(_, valid)| *valid);
        let cut = cut.min(stream.len().saturating_sub(1));
        stream.truncate(stream.len() - cut);
        let whole = drive(&stream, &[]);
        let split = drive(&stream, &chunks);
        prop_assert_eq!(&whole.responses, &split.responses, "responses differ");
        prop_assert_eq!((whole.count, whole.closed, whole.pending), (split.count, split.closed, split.pending));
        prop_assert!(split.interim <= requests.len(), "more than one 100 Continue per request");
        if all_valid {
            // Every whole request answered, none closing; a cut one pending.
            prop_assert!(!whole.closed);
            let complete = requests.len() - usize::from(cut > 0);
            prop_assert!(whole.count as usize >= complete.min(requests.len()) && whole.count as usize <= requests.len());
            if cut == 0 {
                prop_assert_eq!(whole.count as usize, requests.len());
                prop_assert_eq!(whole.pending, 0);
            }
        }
    }
}
