//! Where a request head ends. httparse re-parses from the first byte on
//! every call, so a head arriving a byte at a time would cost O(n^2); this
//! finds the blank line first, resuming where the last search stopped, and
//! only a whole head is handed to httparse.

/// The length of the head at the start of `buf` (through its blank line:
/// `\n\r\n` or `\n\n`), searching from `from`, the length already searched
/// without finding one.
pub(crate) fn head_end(buf: &[u8], from: usize) -> Option<usize> {
    // A terminator is at most 3 bytes: one that began up to 2 bytes before
    // `from` may end in the bytes that arrived since.
    let mut i = from.saturating_sub(2);
    while i < buf.len() {
        // memchr: SIMD, where a byte loop was a third of a request's parse.
        let nl = i + memchr::memchr(b'\n', &buf[i..])?;
        match buf.get(nl + 1) {
            Some(b'\n') => return Some(nl + 2),
            Some(b'\r') if buf.get(nl + 2) == Some(&b'\n') => return Some(nl + 3),
            _ => i = nl + 1,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::head_end;

    #[test]
    fn finds_the_first_blank_line_however_the_search_resumes() {
        let head = b"GET / HTTP/1.1\r\nHost: x\r\n\r\nbody";
        for from in 0..head.len() - 4 {
            assert_eq!(head_end(head, from), Some(head.len() - 4), "from {from}");
        }
        assert_eq!(head_end(b"GET / HTTP/1.0\n\nrest", 0), Some(16));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: x\r\n\r", 0), None);
        assert_eq!(head_end(b"", 0), None);
        // Byte by byte, each search resuming where the last stopped.
        let mut searched = 0;
        for len in 0..=head.len() {
            match head_end(&head[..len], searched) {
                Some(end) => {
                    assert_eq!((end, len), (head.len() - 4, head.len() - 4));
                    return;
                }
                None => searched = len,
            }
        }
        panic!("the blank line was never found byte by byte");
    }
}
