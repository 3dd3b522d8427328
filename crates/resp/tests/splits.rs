//! Any split of a pipeline gives the replies the whole pipeline gives,
//! fed as a server feeds it (each piece after what was left unconsumed),
//! with values copied or shared, and never a panic. 100,000 cases by default (`PROPTEST_CASES`
//! overrides).

use iomux_resp::conformance::{drive, Values};
use iomux_resp::Limits;
use proptest::prelude::*;

/// One command, as multibulk or inline.
fn command() -> impl Strategy<Value = (Vec<Vec<u8>>, bool)> {
    let key = prop::sample::select(vec![b"k".to_vec(), b"n".to_vec(), b"big".to_vec()]);
    let value = prop::collection::vec(any::<u8>(), 0..40);
    let safe = prop::collection::vec(b'a'..=b'z', 1..8);
    let args = prop_oneof![
        Just(vec![b"PING".to_vec()]),
        safe.clone().prop_map(|m| vec![b"ECHO".to_vec(), m]),
        key.clone().prop_map(|k| vec![b"GET".to_vec(), k]),
        (key.clone(), value.clone()).prop_map(|(k, v)| vec![b"SET".to_vec(), k, v]),
        (key.clone(), safe.clone()).prop_map(|(k, v)| vec![b"SET".to_vec(), k, v, b"NX".to_vec()]),
        key.clone().prop_map(|k| vec![b"INCR".to_vec(), k]),
        key.clone().prop_map(|k| vec![b"DEL".to_vec(), k]),
        key.clone().prop_map(|k| vec![b"EXISTS".to_vec(), k, b"k".to_vec()]),
        key.clone().prop_map(|k| vec![b"TTL".to_vec(), k]),
        (key, 1u32..100).prop_map(|(k, s)| vec![b"EXPIRE".to_vec(), k, s.to_string().into_bytes()]),
        safe.prop_map(|c| vec![c]),
    ];
    (args, any::<bool>())
}

fn encode(args: &[Vec<u8>], inline: bool, out: &mut Vec<u8>) {
    // Inline only where an argument needs no quoting.
    if inline && args.iter().all(|a| !a.is_empty() && a.iter().all(|b| b.is_ascii_alphanumeric())) {
        out.extend_from_slice(&args.join(&b' '));
        out.extend_from_slice(b"\r\n");
        return;
    }
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(100_000)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn any_split_gives_the_same_replies(
        commands in prop::collection::vec(command(), 1..12),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
        budget in prop_oneof![Just(usize::MAX), 0usize..64],
        garbage in prop::option::of(prop::collection::vec(any::<u8>(), 1..20)),
        values in prop_oneof![Just(Values::Copied), (0usize..24).prop_map(Values::SharedFrom)],
    ) {
        let mut input = Vec::new();
        for (args, inline) in &commands {
            encode(args, *inline, &mut input);
        }
        if let Some(g) = garbage {
            input.extend_from_slice(&g);
        }
        let whole = drive(Limits::default(), &input, std::iter::once(usize::MAX), usize::MAX, Values::Copied);
        let mut at: Vec<usize> = cuts.iter().map(|c| c.index(input.len() + 1)).collect();
        at.sort_unstable();
        at.push(input.len());
        let sizes: Vec<usize> = std::iter::once(0).chain(at.iter().copied()).zip(at.iter().copied()).map(|(a, b)| b - a).collect();
        prop_assert_eq!(drive(Limits::default(), &input, sizes.into_iter(), budget, values), whole);
    }
}
