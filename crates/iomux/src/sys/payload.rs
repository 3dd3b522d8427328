//! Output handed to the kernel in one send: one buffer, or several
//! gathered (`sendmsg` with an iovec per buffer; IORING_OP_SENDMSG).

use bytes::Bytes;
use std::io::IoSlice;
use std::ops::Deref;

/// The most buffers one gathered send takes (the kernel's UIO_MAXIOV);
/// the rest go in the next send.
pub(crate) const MAX_IOV: usize = 1024;

/// One piece of a connection's output.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Chunk {
    /// Bytes copied in by `write` (its buffer goes back to the pool).
    Copied(Vec<u8>),
    /// A buffer the handler handed over without a copy (`write_bytes`).
    Shared(Bytes),
}

impl Chunk {
    /// Its buffer, for the pool, if it was a copy.
    pub(crate) fn into_copied(self) -> Option<Vec<u8>> {
        match self {
            Chunk::Copied(buf) => Some(buf),
            Chunk::Shared(_) => None,
        }
    }
}

impl Deref for Chunk {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Chunk::Copied(v) => v,
            Chunk::Shared(b) => b,
        }
    }
}

/// What one send in flight holds.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Payload {
    One(Vec<u8>),
    /// Several buffers, sent in order as one stream.
    Many(Vec<Chunk>),
}

impl Payload {
    pub(crate) fn len(&self) -> usize {
        match self {
            Payload::One(v) => v.len(),
            Payload::Many(chunks) => chunks.iter().map(|c| c.len()).sum(),
        }
    }

    /// Drops the chunks wholly before `offset` (their copy buffers go to
    /// `spare`) and returns the offset into what is left.
    pub(crate) fn drop_sent(&mut self, offset: usize, mut spare: impl FnMut(Vec<u8>)) -> usize {
        let Payload::Many(chunks) = self else { return offset };
        let (mut whole, mut left) = (0, offset);
        while whole < chunks.len() && chunks[whole].len() <= left {
            left -= chunks[whole].len();
            whole += 1;
        }
        chunks.drain(..whole).filter_map(Chunk::into_copied).for_each(&mut spare);
        left
    }

    /// The bytes from `offset` on, as at most [`MAX_IOV`] slices.
    pub(crate) fn slices_from(&self, offset: usize) -> Vec<IoSlice<'_>> {
        match self {
            Payload::One(v) => vec![IoSlice::new(&v[offset.min(v.len())..])],
            Payload::Many(chunks) => slices_from(chunks.iter().map(|c| &c[..]), offset),
        }
    }
}

/// The bytes of `pieces` from `offset` on, skipping empty pieces, as at
/// most [`MAX_IOV`] slices.
pub(crate) fn slices_from<'a>(pieces: impl Iterator<Item = &'a [u8]>, mut offset: usize) -> Vec<IoSlice<'a>> {
    let mut out = Vec::new();
    for piece in pieces {
        if offset >= piece.len() {
            offset -= piece.len();
            continue;
        }
        out.push(IoSlice::new(&piece[offset..]));
        offset = 0;
        if out.len() == MAX_IOV {
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn joined(slices: &[IoSlice<'_>]) -> Vec<u8> {
        slices.iter().flat_map(|s| s.iter().copied()).collect()
    }

    #[test]
    fn slices_start_at_the_offset_across_pieces() {
        let p = Payload::Many(vec![
            Chunk::Copied(b"ab".to_vec()),
            Chunk::Shared(Bytes::from_static(b"")),
            Chunk::Shared(Bytes::from_static(b"cde")),
            Chunk::Copied(b"f".to_vec()),
        ]);
        assert_eq!(p.len(), 6);
        assert_eq!(joined(&p.slices_from(0)), b"abcdef");
        assert_eq!(p.slices_from(0).len(), 3, "empty pieces are skipped");
        assert_eq!(joined(&p.slices_from(3)), b"def");
        assert_eq!(p.slices_from(3).len(), 2);
        assert!(p.slices_from(6).is_empty());
        assert_eq!(joined(&Payload::One(b"xyz".to_vec()).slices_from(1)), b"yz");
    }

    #[test]
    fn dropping_what_was_sent_keeps_the_rest() {
        let mut p = Payload::Many(vec![
            Chunk::Copied(b"ab".to_vec()),
            Chunk::Shared(Bytes::from_static(b"cde")),
            Chunk::Copied(b"f".to_vec()),
        ]);
        let mut spare = Vec::new();
        let at = p.drop_sent(3, |buf| spare.push(buf));
        assert_eq!((at, p.len(), spare), (1, 4, vec![b"ab".to_vec()]));
        assert_eq!(joined(&p.slices_from(at)), b"def");
        let at = p.drop_sent(4, |_| {});
        assert_eq!((at, p.len()), (0, 0), "all sent: nothing left");
    }

    #[test]
    fn at_most_max_iov_slices() {
        let pieces = vec![&b"x"[..]; MAX_IOV + 5];
        assert_eq!(slices_from(pieces.into_iter(), 2).len(), MAX_IOV);
    }
}
