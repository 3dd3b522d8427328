//! The bytes of message `seq` on connection `conn`: an 8-byte sequence
//! number, a 4-byte connection number, then a pattern of both, so any
//! corrupted, reordered, duplicated or misrouted byte is caught.

#[inline]
pub fn byte(conn: u32, seq: u64, j: usize) -> u8 {
    match j {
        0..=7 => seq.to_le_bytes()[j],
        8..=11 => conn.to_le_bytes()[j - 8],
        _ => {
            let x = (conn as u64).wrapping_mul(0x9E37_79B9).wrapping_add(seq.wrapping_mul(0x85EB_CA6B)) ^ (j as u64);
            (x ^ (x >> 7) ^ (x >> 13)) as u8
        }
    }
}

/// Fills `buf` with message `seq` of connection `conn`.
pub fn fill(buf: &mut [u8], conn: u32, seq: u64) {
    for (j, b) in buf.iter_mut().enumerate() {
        *b = byte(conn, seq, j);
    }
}

/// Checks `data` against message `seq` from offset `at`; returns the
/// offset of the first wrong byte, if any.
pub fn check(data: &[u8], conn: u32, seq: u64, at: usize) -> Option<usize> {
    data.iter().enumerate().find(|&(i, &b)| b != byte(conn, seq, at + i)).map(|(i, _)| at + i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_differ_by_connection_and_sequence() {
        let mut a = vec![0; 100];
        let mut b = vec![0; 100];
        fill(&mut a, 1, 5);
        fill(&mut b, 1, 6);
        assert_ne!(a, b);
        fill(&mut b, 2, 5);
        assert_ne!(a, b);
        assert_eq!(check(&a, 1, 5, 0), None);
        assert_eq!(check(&a[40..], 1, 5, 40), None);
        a[57] ^= 1;
        assert_eq!(check(&a, 1, 5, 0), Some(57));
    }
}
