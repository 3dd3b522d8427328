//! Requests off the wire: RESP multibulk (`*2\r\n$3\r\nGET\r\n$1\r\nk\r\n`)
//! and inline commands (`GET k\r\n`), with redis-server's limits and its
//! exact protocol errors (networking.c, `processMultibulkBuffer` and
//! `processInlineBuffer`).

use crate::Limits;

/// One request at the start of the input.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// A command, its arguments left in the caller's list (ranges into
    /// the input), and the bytes it took.
    Command { consumed: usize },
    /// Bytes that carry no command (an empty inline line, `*0` or `*-1`).
    Nothing { consumed: usize },
    /// The request is not complete yet.
    Incomplete,
    /// A protocol error: redis answers it (this text, after `-ERR `) and
    /// closes the connection.
    Error(Vec<u8>),
}

/// Redis's buffer limit for an inline request, and for the count lines of
/// a multibulk one, without their end (PROTO_INLINE_MAX_SIZE).
pub const INLINE_MAX: usize = 64 * 1024;

/// Parses the request at the start of `input`; a command's arguments go
/// to `args` (cleared first: one list reused for every request, so
/// parsing allocates nothing once it has grown).
pub fn request(input: &[u8], limits: &Limits, args: &mut Vec<(usize, usize)>) -> Parsed {
    args.clear();
    match input.first() {
        None => Parsed::Incomplete,
        Some(b'*') => multibulk(input, limits, args),
        Some(_) => inline(input, args),
    }
}

/// The line at `from`, without its `\r\n`; None while it is incomplete.
fn line(input: &[u8], from: usize) -> Option<(&[u8], usize)> {
    let end = input[from..].iter().position(|&b| b == b'\r').map(|i| from + i)?;
    // Redis looks for "\r" then needs the "\n" after it in the buffer.
    if end + 1 >= input.len() {
        return None;
    }
    Some((&input[from..end], end + 2))
}

/// Redis's string2ll: an optional '-', no leading zeros, no '+', no spaces.
#[inline]
pub fn integer(text: &[u8]) -> Option<i64> {
    // Every length and count on the wire: a few digits, unsigned, which
    // cannot overflow (18 digits < i64::MAX), so no checked arithmetic.
    if !text.is_empty() && text.len() <= 18 && (text[0] != b'0' || text.len() == 1) {
        let mut n: i64 = 0;
        for &d in text {
            match d.wrapping_sub(b'0') {
                digit @ 0..=9 => n = n * 10 + i64::from(digit),
                _ => return integer_signed(text),
            }
        }
        return Some(n);
    }
    integer_signed(text)
}

/// [`integer`] for any text: signs, and overflow checked.
fn integer_signed(text: &[u8]) -> Option<i64> {
    let (negative, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    if digits.is_empty() || text.len() > 20 || (digits.len() > 1 && digits[0] == b'0') || (negative && digits == b"0") {
        return None;
    }
    // Accumulated negative, so i64::MIN parses too; overflow fails.
    let mut n: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_sub(i64::from(d - b'0'))?;
    }
    if negative {
        Some(n)
    } else {
        n.checked_neg()
    }
}

fn multibulk(input: &[u8], limits: &Limits, args: &mut Vec<(usize, usize)>) -> Parsed {
    let Some((count_line, mut pos)) = line(input, 1) else {
        return if input.len() > INLINE_MAX {
            Parsed::Error(b"Protocol error: too big mbulk count string".to_vec())
        } else {
            Parsed::Incomplete
        };
    };
    let count = match integer(count_line) {
        Some(n) if n <= limits.max_multibulk as i64 => n,
        _ => return Parsed::Error(b"Protocol error: invalid multibulk length".to_vec()),
    };
    if count <= 0 {
        return Parsed::Nothing { consumed: pos };
    }
    args.reserve((count as usize).min(1024));
    for _ in 0..count {
        if pos >= input.len() {
            return Parsed::Incomplete;
        }
        if input[pos] != b'$' {
            return expected_dollar(input[pos]);
        }
        let Some((len_line, body)) = line(input, pos + 1) else {
            return if input.len() - pos > INLINE_MAX {
                Parsed::Error(b"Protocol error: too big bulk count string".to_vec())
            } else {
                Parsed::Incomplete
            };
        };
        let len = match integer(len_line) {
            Some(n) if n >= 0 && n as u64 <= limits.max_bulk_len as u64 => n as usize,
            _ => return Parsed::Error(b"Protocol error: invalid bulk length".to_vec()),
        };
        if input.len() < body + len + 2 {
            return Parsed::Incomplete;
        }
        args.push((body, body + len));
        // Redis does not check the two bytes after a bulk: it skips them.
        pos = body + len + 2;
    }
    Parsed::Command { consumed: pos }
}

/// Redis's "expected '$', got '%c'": the byte itself, whatever it is.
fn expected_dollar(got: u8) -> Parsed {
    let mut text = b"Protocol error: expected '$', got '".to_vec();
    text.extend_from_slice(&[got, b'\'']);
    Parsed::Error(text)
}

fn inline(input: &[u8], args: &mut Vec<(usize, usize)>) -> Parsed {
    let Some(newline) = input.iter().position(|&b| b == b'\n') else {
        return if input.len() > INLINE_MAX {
            Parsed::Error(b"Protocol error: too big inline request".to_vec())
        } else {
            Parsed::Incomplete
        };
    };
    let mut text = &input[..newline];
    if text.last() == Some(&b'\r') {
        text = &text[..text.len() - 1];
    }
    match split_args(text, args) {
        Some(()) if args.is_empty() => Parsed::Nothing { consumed: newline + 1 },
        Some(()) => Parsed::Command { consumed: newline + 1 },
        None => Parsed::Error(b"Protocol error: unbalanced quotes in request".to_vec()),
    }
}

/// Inline arguments as redis's sdssplitargs splits them: by spaces, with
/// "double quotes" (and \n, \r, \t, \b, \a, \\, \", \xHH escapes) and
/// 'single quotes' (only \' escaped). Quoted arguments come back as ranges
/// of their raw text; `unquote` gives their bytes. None: unbalanced quotes,
/// or a closing quote not followed by a space.
pub fn split_args(text: &[u8], args: &mut Vec<(usize, usize)>) -> Option<()> {
    let mut i = 0;
    loop {
        while i < text.len() && text[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= text.len() {
            return Some(());
        }
        let start = i;
        match text[i] {
            q @ (b'"' | b'\'') => {
                i += 1;
                loop {
                    if i >= text.len() {
                        return None; // unterminated quotes
                    }
                    if text[i] == b'\\' && i + 1 < text.len() {
                        i += 2;
                        continue;
                    }
                    if text[i] == q {
                        i += 1;
                        if i < text.len() && !text[i].is_ascii_whitespace() {
                            return None; // closing quote must be followed by a space
                        }
                        break;
                    }
                    i += 1;
                }
            }
            _ => {
                while i < text.len() && !text[i].is_ascii_whitespace() {
                    i += 1;
                }
            }
        }
        args.push((start, i));
    }
}

/// The bytes of one argument: a multibulk one as it is, an inline quoted
/// one with its quotes and escapes resolved.
pub fn unquote(raw: &[u8], inline: bool) -> std::borrow::Cow<'_, [u8]> {
    use std::borrow::Cow;
    let quote = match raw.first() {
        Some(&q @ (b'"' | b'\'')) if inline && raw.len() >= 2 => q,
        _ => return Cow::Borrowed(raw),
    };
    let body = &raw[1..raw.len() - 1];
    let mut out = Vec::with_capacity(body.len());
    let mut i = 0;
    while i < body.len() {
        let b = body[i];
        if b == b'\\' && i + 1 < body.len() {
            let next = body[i + 1];
            if quote == b'\'' {
                if next == b'\'' {
                    out.push(b'\'');
                    i += 2;
                    continue;
                }
            } else if next == b'x'
                && i + 3 < body.len()
                && body[i + 2].is_ascii_hexdigit()
                && body[i + 3].is_ascii_hexdigit()
            {
                let hex = |c: u8| (c as char).to_digit(16).unwrap_or(0) as u8;
                out.push(hex(body[i + 2]) * 16 + hex(body[i + 3]));
                i += 4;
                continue;
            } else {
                out.push(match next {
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b't' => b'\t',
                    b'b' => 8,
                    b'a' => 7,
                    other => other,
                });
                i += 2;
                continue;
            }
        }
        out.push(b);
        i += 1;
    }
    Cow::Owned(out)
}
