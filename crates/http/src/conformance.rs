//! Driving the state machine as a server does, for tests: the property
//! test (`tests/splits.rs`) and the fuzz target (`fuzz/`) both feed a
//! stream whole and in chunks and compare what came out.

use crate::{Fed, Http, Session};

/// What a connection saw.
#[derive(Debug, PartialEq, Eq)]
pub struct Seen {
    /// Every final response, in order (interim `100 Continue` left out:
    /// whether one is sent depends on whether the body came with the head).
    pub responses: Vec<u8>,
    /// Interim responses sent.
    pub interim: usize,
    /// Final responses, as [`Fed::responses`] counted them.
    pub count: u32,
    pub closed: bool,
    /// Bytes left unconsumed at the end.
    pub pending: usize,
}

/// Feeds `stream` in chunks of the sizes `chunks` yields (the rest at
/// once when it runs out), handing unconsumed input back with the next
/// chunk, as the runtime does, until the stream ends or a close.
///
/// Panics if more input is left pending than the limits allow.
pub fn drive(http: &mut Http, stream: &[u8], chunks: impl IntoIterator<Item = usize>) -> Seen {
    let mut sizes = chunks.into_iter();
    let (mut session, mut out, mut pending) = (Session::default(), Vec::new(), Vec::new());
    let mut seen = Seen { responses: Vec::new(), interim: 0, count: 0, closed: false, pending: 0 };
    let mut at = 0;
    while at < stream.len() && !seen.closed {
        let n = sizes.next().unwrap_or(usize::MAX).clamp(1, stream.len() - at);
        pending.extend_from_slice(&stream[at..at + n]);
        at += n;
        out.clear();
        let Fed { consumed, responses, close, interim } = http.feed(&mut session, &pending, &mut out);
        assert!(consumed <= pending.len());
        pending.drain(..consumed);
        assert!(pending.len() <= http.limits().max_pending(), "{} bytes pending, over the bound", pending.len());
        let finals = if interim { out.len() - INTERIM.len() } else { out.len() };
        if interim {
            assert_eq!(&out[finals..], INTERIM);
            seen.interim += 1;
        }
        seen.responses.extend_from_slice(&out[..finals]);
        seen.count += responses;
        seen.closed = close;
    }
    seen.pending = pending.len();
    seen
}

const INTERIM: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// Whether `out` is a sequence of whole, well-formed responses, each with
/// a Content-Length its body matches, or no body (the answer to a HEAD,
/// followed by the next response or the end), and how many.
pub fn well_formed(out: &[u8]) -> Result<usize, String> {
    // Which interpretation (body or none) each response takes is only
    // known by what follows, so search: from[i] = responses parsed from i.
    let mut from: Vec<Option<usize>> = vec![None; out.len() + 1];
    from[out.len()] = Some(0);
    // Positions reachable from 0, walked backwards once discovered.
    let mut starts = vec![0usize];
    let mut next = Vec::new();
    let mut seen = vec![false; out.len() + 1];
    while let Some(at) = starts.pop() {
        if at == out.len() || seen[at] {
            continue;
        }
        seen[at] = true;
        // A body may itself start with "HTTP/1.1 ": a position that does
        // not parse is a dead end, not a failure.
        let Ok((head, len)) = response_head(&out[at..]) else { continue };
        let ends = [at + head, at + head + len];
        for end in ends.into_iter().filter(|&e| e <= out.len()) {
            if end == out.len() || out[end..].starts_with(b"HTTP/1.1 ") {
                next.push((at, end));
                starts.push(end);
            }
        }
    }
    // Solve from the end: a position parses if one of its ends does.
    next.sort_unstable_by_key(|&(at, _)| std::cmp::Reverse(at));
    for (at, end) in next {
        if let Some(n) = from[end] {
            from[at] = Some(from[at].map_or(n + 1, |m: usize| m.max(n + 1)));
        }
    }
    from[0].ok_or_else(|| match response_head(out) {
        Err(e) => e,
        Ok(_) => format!("not a sequence of whole responses: {:?}", String::from_utf8_lossy(out)),
    })
}

/// The head's length and the Content-Length of the response at the start.
fn response_head(out: &[u8]) -> Result<(usize, usize), String> {
    let mut slots = [httparse::EMPTY_HEADER; 16];
    let mut r = httparse::Response::new(&mut slots);
    let head = match r.parse(out) {
        Ok(httparse::Status::Complete(n)) => n,
        other => return Err(format!("not a whole response head ({other:?}): {:?}", String::from_utf8_lossy(out))),
    };
    let length = r.headers.iter().find(|h| h.name == "Content-Length").ok_or("a response without Content-Length")?;
    let len = std::str::from_utf8(length.value).ok().and_then(|v| v.parse().ok()).ok_or("a bad Content-Length")?;
    Ok((head, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_answer_is_told_from_a_body_by_what_follows() {
        let ok = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n";
        assert_eq!(well_formed(format!("{ok}hello{ok}").as_bytes()), Ok(2));
        assert_eq!(well_formed(format!("{ok}hello{ok}hello").as_bytes()), Ok(2));
        assert_eq!(well_formed(format!("{ok}{ok}hello").as_bytes()), Ok(2));
        assert!(well_formed(format!("{ok}hel").as_bytes()).is_err());
        assert!(well_formed(b"garbage").is_err());
        // An echoed body that looks like a response start is still a body.
        let body = "HTTP/1.1 \u{0}junk";
        let echo = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}", body.len());
        assert_eq!(well_formed(format!("{echo}{ok}hello").as_bytes()), Ok(2));
        assert_eq!(well_formed(b""), Ok(0));
    }
}
