//! Replies checked against redis-server 7's, byte for byte, as redis-cli
//! showed them (the conformance test replays these against a live one).

use crate::{Fed, Limits, Resp, Store};

fn run(store: &mut Store, now: u64, input: &[u8]) -> (Vec<u8>, Fed) {
    let mut out = Vec::new();
    let fed = Resp::new(Limits::default()).feed(store, now, input, &mut out, usize::MAX);
    (out, fed)
}

fn replies(input: &[u8]) -> String {
    String::from_utf8_lossy(&run(&mut Store::new(), 1_000, input).0).into_owned()
}

#[test]
fn strings_set_get_and_count() {
    assert_eq!(replies(b"PING\r\nping hi\r\nECHO \"a b\"\r\n"), "+PONG\r\n$2\r\nhi\r\n$3\r\na b\r\n");
    assert_eq!(replies(b"SET k v\r\nGET k\r\nGET nope\r\n"), "+OK\r\n$1\r\nv\r\n$-1\r\n");
    assert_eq!(replies(b"SET k v NX\r\nSET k w NX\r\nSET k w XX\r\nGET k\r\n"), "+OK\r\n$-1\r\n+OK\r\n$1\r\nw\r\n");
    assert_eq!(replies(b"SET k v\r\nSET k w GET\r\nSET n x XX GET\r\n"), "+OK\r\n$1\r\nv\r\n$-1\r\n");
    assert_eq!(
        replies(b"SET a 1\r\nSET b 2\r\nEXISTS a b c a\r\nDEL a c\r\nDBSIZE\r\n"),
        "+OK\r\n+OK\r\n:3\r\n:1\r\n:1\r\n"
    );
    assert_eq!(replies(b"INCR n\r\nINCR n\r\nDECR n\r\nDECR m\r\n"), ":1\r\n:2\r\n:1\r\n:-1\r\n");
    assert_eq!(replies(b"FLUSHALL\r\nDBSIZE\r\n"), "+OK\r\n:0\r\n");
}

#[test]
fn expiry_follows_the_clock() {
    let mut store = Store::new();
    let (out, _) =
        run(&mut store, 1_000, b"SET k v PX 1500\r\nTTL k\r\nSET p v\r\nTTL p\r\nTTL none\r\nEXPIRE p 10\r\nTTL p\r\n");
    assert_eq!(String::from_utf8_lossy(&out), "+OK\r\n:2\r\n+OK\r\n:-1\r\n:-2\r\n:1\r\n:10\r\n");
    assert_eq!(run(&mut store, 2_499, b"GET k\r\n").0, b"$1\r\nv\r\n");
    assert_eq!(run(&mut store, 2_500, b"GET k\r\nEXISTS k\r\n").0, b"$-1\r\n:0\r\n");
    assert_eq!(
        run(&mut store, 2_500, b"EXPIRE p 5 GT\r\nEXPIRE p 5 LT\r\nEXPIRE p -1\r\nEXISTS p\r\n").0,
        b":0\r\n:1\r\n:1\r\n:0\r\n"
    );
    assert_eq!(run(&mut store, 2_500, b"SET x 1 EX 5\r\nINCR x\r\nTTL x\r\n").0, b"+OK\r\n:2\r\n:5\r\n");
    // Expired keys untouched since are not counted.
    assert_eq!(run(&mut store, 2_500, b"SET y 1 PX 10\r\nDBSIZE\r\n").0, b"+OK\r\n:2\r\n");
    assert_eq!(run(&mut store, 2_510, b"DBSIZE\r\n").0, b":1\r\n");
}

#[test]
fn errors_are_redis_texts() {
    assert_eq!(replies(b"GET\r\n"), "-ERR wrong number of arguments for 'get' command\r\n");
    assert_eq!(replies(b"PING a b\r\n"), "-ERR wrong number of arguments for 'ping' command\r\n");
    assert_eq!(replies(b"FOO a b\r\n"), "-ERR unknown command 'FOO', with args beginning with: 'a' 'b' \r\n");
    assert_eq!(replies(b"FOO\r\n"), "-ERR unknown command 'FOO', with args beginning with: \r\n");
    assert_eq!(replies(b"SET k v EX\r\n"), "-ERR syntax error\r\n");
    assert_eq!(replies(b"SET k v NX XX\r\n"), "-ERR syntax error\r\n");
    assert_eq!(replies(b"SET k v EX 0\r\n"), "-ERR invalid expire time in 'set' command\r\n");
    assert_eq!(replies(b"SET k v EX x\r\n"), "-ERR value is not an integer or out of range\r\n");
    assert_eq!(replies(b"SET k a\r\nINCR k\r\n"), "+OK\r\n-ERR value is not an integer or out of range\r\n");
    assert_eq!(
        replies(b"SET k 9223372036854775807\r\nINCR k\r\n"),
        "+OK\r\n-ERR increment or decrement would overflow\r\n"
    );
    assert_eq!(
        replies(b"EXPIRE k 1 NX XX\r\n"),
        "-ERR NX and XX, GT or LT options at the same time are not compatible\r\n"
    );
    assert_eq!(replies(b"CONFIG FOO\r\n"), "-ERR unknown subcommand 'FOO'. Try CONFIG HELP.\r\n");
    assert_eq!(
        replies(b"CONFIG GET save appendonly\r\n"),
        "*4\r\n$4\r\nsave\r\n$0\r\n\r\n$10\r\nappendonly\r\n$2\r\nno\r\n"
    );
}

#[test]
fn protocol_errors_reply_and_close() {
    for (input, text) in [
        (&b"*x\r\n"[..], "-ERR Protocol error: invalid multibulk length\r\n"),
        (b"*2\r\n$3\r\nGET\r\n:1\r\n", "-ERR Protocol error: expected '$', got ':'\r\n"),
        (b"*1\r\n$-5\r\n", "-ERR Protocol error: invalid bulk length\r\n"),
        (b"*1\r\n$536870913\r\n", "-ERR Protocol error: invalid bulk length\r\n"),
        (b"*2147483648\r\n", "-ERR Protocol error: invalid multibulk length\r\n"),
        (b"GET \"k\r\n", "-ERR Protocol error: unbalanced quotes in request\r\n"),
    ] {
        let (out, fed) = run(&mut Store::new(), 0, input);
        assert_eq!(String::from_utf8_lossy(&out), text, "{:?}", String::from_utf8_lossy(input));
        assert!(fed.close && fed.consumed == input.len());
    }
    let (out, fed) = run(&mut Store::new(), 0, &vec![b'a'; crate::INLINE_MAX + 1]);
    assert_eq!((out.as_slice(), fed.close), (&b"-ERR Protocol error: too big inline request\r\n"[..], true));
}

#[test]
fn partial_requests_wait_and_quit_closes() {
    let (out, fed) = run(&mut Store::new(), 0, b"*2\r\n$4\r\nECHO\r\n$5\r\nhel");
    assert_eq!((out.len(), fed.consumed, fed.close), (0, 0, false));
    let (out, fed) = run(&mut Store::new(), 0, b"\r\n*0\r\nPING\r\nQUIT\r\nPING\r\n");
    assert_eq!(out, b"+PONG\r\n+OK\r\n");
    assert!(fed.close && fed.replies == 2);
}

#[test]
fn the_output_budget_stops_a_pipeline() {
    let mut store = Store::new();
    store.set(b"big", &[b'x'; 1000], None);
    let mut out = Vec::new();
    let input = b"GET big\r\nGET big\r\nGET big\r\n";
    let fed = Resp::default().feed(&mut store, 0, input, &mut out, 500);
    assert_eq!((fed.replies, fed.consumed), (1, 9), "one reply passes the budget, then it stops");
}

/// Integers as redis's string2ll reads them.
#[test]
fn integers_as_string2ll() {
    use crate::parse::integer;
    let cases: [(&[u8], Option<i64>); 12] = [
        (b"0", Some(0)),
        (b"42", Some(42)),
        (b"-7", Some(-7)),
        (b"9223372036854775807", Some(i64::MAX)),
        (b"-9223372036854775808", Some(i64::MIN)),
        (b"9223372036854775808", None),
        (b"-0", None),
        (b"01", None),
        (b"+1", None),
        (b" 1", None),
        (b"-", None),
        (b"", None),
    ];
    for (text, want) in cases {
        assert_eq!(integer(text), want, "{:?}", String::from_utf8_lossy(text));
    }
}
