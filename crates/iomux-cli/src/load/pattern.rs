//! The bytes of message `seq` on connection `conn`: an 8-byte sequence
//! number, a 4-byte connection number, then a fixed pseudo-random body
//! XORed with a byte of the connection's. Reordered, duplicated or lost
//! messages show in the sequence number, misrouted ones in the connection
//! number, corrupted bytes anywhere. Filling and checking are plain loops
//! over a precomputed body, so the client stays cheaper than the server.

pub struct Pattern {
    body: Vec<u8>,
}

const HEADER: usize = 12;

fn conn_key(conn: u32) -> u8 {
    let x = (conn as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (x >> 56) as u8 | 1
}

impl Pattern {
    pub fn new(size: usize) -> Pattern {
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        let body = (0..size)
            .map(|_| {
                x ^= x >> 12;
                x ^= x << 25;
                x ^= x >> 27;
                (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8
            })
            .collect();
        Pattern { body }
    }

    #[inline]
    fn header_byte(conn: u32, seq: u64, j: usize) -> u8 {
        if j < 8 {
            seq.to_le_bytes()[j]
        } else {
            conn.to_le_bytes()[j - 8]
        }
    }

    /// Fills `buf` (the message size) with message `seq` of `conn`.
    pub fn fill(&self, buf: &mut [u8], conn: u32, seq: u64) {
        let key = conn_key(conn);
        let head = HEADER.min(buf.len());
        for (j, b) in buf[..head].iter_mut().enumerate() {
            *b = Self::header_byte(conn, seq, j);
        }
        for (b, &p) in buf[head..].iter_mut().zip(&self.body[head..]) {
            *b = p ^ key;
        }
    }

    /// Checks `data`, which should be message `seq` from offset `at`;
    /// returns the offset of the first wrong byte.
    pub fn check(&self, data: &[u8], conn: u32, seq: u64, at: usize) -> Option<usize> {
        let key = conn_key(conn);
        let mut i = 0;
        while i < data.len() && at + i < HEADER {
            if data[i] != Self::header_byte(conn, seq, at + i) {
                return Some(at + i);
            }
            i += 1;
        }
        let body = &self.body[at + i..at + data.len()];
        // Compare without branching per byte; find the culprit only on failure.
        let diff = data[i..].iter().zip(body).fold(0u8, |acc, (&d, &p)| acc | (d ^ p ^ key));
        if diff == 0 {
            return None;
        }
        data[i..].iter().zip(body).position(|(&d, &p)| d != p ^ key).map(|k| at + i + k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_differ_by_connection_and_sequence() {
        let p = Pattern::new(100);
        let mut a = vec![0; 100];
        let mut b = vec![0; 100];
        p.fill(&mut a, 1, 5);
        p.fill(&mut b, 1, 6);
        assert_ne!(a, b);
        p.fill(&mut b, 2, 5);
        assert_ne!(a[..12], b[..12]);
        assert_ne!(a[12..], b[12..]);
        assert_eq!(p.check(&a, 1, 5, 0), None);
        assert_eq!(p.check(&a[40..], 1, 5, 40), None);
        assert_eq!(p.check(&a[3..9], 1, 5, 3), None);
        assert_eq!(p.check(&a, 1, 6, 0), Some(0), "another sequence number");
        assert_eq!(p.check(&a, 2, 5, 0), Some(8), "another connection");
        a[57] ^= 1;
        assert_eq!(p.check(&a, 1, 5, 0), Some(57));
        assert_eq!(p.check(&a[50..], 1, 5, 50), Some(57));
    }

    #[test]
    fn tiny_messages_are_all_header() {
        let p = Pattern::new(5);
        let mut a = vec![0; 5];
        p.fill(&mut a, 3, 0x0102);
        assert_eq!(a, [2, 1, 0, 0, 0]);
        assert_eq!(p.check(&a, 3, 0x0102, 0), None);
    }
}
