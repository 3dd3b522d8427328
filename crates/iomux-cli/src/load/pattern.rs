//! The bytes of message `seq` on connection `conn`: an 8-byte sequence
//! number, a 4-byte connection number, then a fixed pseudo-random body
//! XORed with a byte of the connection's. Reordered, duplicated or lost
//! messages show in the sequence number, misrouted ones in the connection
//! number, corrupted bytes anywhere. Filling and checking are plain loops
//! over a precomputed body, eight bytes at a time, so the client stays
//! cheaper than the server.

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

    /// Message `seq` of `conn`'s header.
    #[inline]
    fn header(conn: u32, seq: u64) -> [u8; HEADER] {
        let mut h = [0; HEADER];
        h[..8].copy_from_slice(&seq.to_le_bytes());
        h[8..].copy_from_slice(&conn.to_le_bytes());
        h
    }

    /// Fills `buf` (the message size) with message `seq` of `conn`.
    pub fn fill(&self, buf: &mut [u8], conn: u32, seq: u64) {
        let head = HEADER.min(buf.len());
        buf[..head].copy_from_slice(&Self::header(conn, seq)[..head]);
        let key = conn_key(conn);
        let wide = u64::from_ne_bytes([key; 8]);
        let (out, body) = (&mut buf[head..], &self.body[head..]);
        // Eight bytes at a time: the load must stay cheaper than the server.
        let mut out8 = out.chunks_exact_mut(8);
        let mut body8 = body.chunks_exact(8);
        for (o, b) in (&mut out8).zip(&mut body8) {
            o.copy_from_slice(&(word(b) ^ wide).to_ne_bytes());
        }
        for (o, &b) in out8.into_remainder().iter_mut().zip(body8.remainder()) {
            *o = b ^ key;
        }
    }

    /// Checks `data`, which should be message `seq` from offset `at`;
    /// returns the offset of the first wrong byte.
    pub fn check(&self, data: &[u8], conn: u32, seq: u64, at: usize) -> Option<usize> {
        let head = HEADER.saturating_sub(at).min(data.len());
        if head > 0 {
            let header = Self::header(conn, seq);
            if data[..head] != header[at..at + head] {
                return data[..head].iter().zip(&header[at..]).position(|(d, h)| d != h).map(|k| at + k);
            }
        }
        let key = conn_key(conn);
        let wide = u64::from_ne_bytes([key; 8]);
        let (data, body) = (&data[head..], &self.body[at + head..at + data.len()]);
        // Compare without branching per word; find the culprit only on failure.
        let (data8, body8) = (data.chunks_exact(8), body.chunks_exact(8));
        let rest = data8.remainder().iter().zip(body8.remainder());
        let diff = data8.zip(body8).fold(0, |acc, (d, b)| acc | (word(d) ^ word(b) ^ wide))
            | rest.fold(0, |acc, (&d, &b)| acc | u64::from(d ^ b ^ key));
        if diff == 0 {
            return None;
        }
        data.iter().zip(body).position(|(&d, &p)| d != p ^ key).map(|k| at + head + k)
    }
}

/// Eight bytes (a chunk of exactly eight) as one word.
#[inline]
fn word(b: &[u8]) -> u64 {
    let mut w = [0; 8];
    w.copy_from_slice(b);
    u64::from_ne_bytes(w)
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
        a[57] ^= 1;
        a[10] ^= 4;
        assert_eq!(p.check(&a, 1, 5, 0), Some(10), "in the header");
        assert_eq!(p.check(&a[7..], 1, 5, 7), Some(10), "in the header, from within it");
    }

    #[test]
    fn every_byte_of_every_split_is_checked() {
        // Odd sizes and offsets: the eight-byte steps and their remainders.
        for size in [1, 7, 12, 13, 20, 21, 100, 1001] {
            let p = Pattern::new(size);
            let mut m = vec![0; size];
            p.fill(&mut m, 77, 123_456);
            for at in 0..size {
                for end in at + 1..=size.min(at + 19) {
                    assert_eq!(p.check(&m[at..end], 77, 123_456, at), None, "size {size} {at}..{end}");
                }
            }
            for bad in 0..size {
                m[bad] ^= 0x80;
                assert_eq!(p.check(&m, 77, 123_456, 0), Some(bad), "size {size}, byte {bad}");
                let from = bad.saturating_sub(3);
                assert_eq!(p.check(&m[from..], 77, 123_456, from), Some(bad), "size {size}, byte {bad} from {from}");
                m[bad] ^= 0x80;
            }
            if size > 8 {
                // (Shorter messages hold only part of the sequence number.)
                assert_ne!(p.check(&m, 78, 123_456, 0), None, "another connection");
            }
        }
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
