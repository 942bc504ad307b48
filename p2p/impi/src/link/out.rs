//! The bytes a link has for its connection, kept as a queue of pieces so that message data
//! is written from the buffer the sender handed over (one `writev` of headers and data
//! slices) instead of being copied into one output buffer per packet.

use std::collections::VecDeque;
use std::io::IoSlice;
use std::sync::Arc;

/// Payloads shorter than this are copied next to their header (one piece for many small
/// packets); longer ones are written from their own buffer.
const COPY_MAX: usize = 2048;
/// A copy piece stops growing at this size (it is freed once written).
const COPY_PIECE: usize = 64 * 1024;

/// A packet's data as the link holds it.
#[derive(Debug)]
pub(super) enum Payload {
    /// No data (control packets).
    Empty,
    /// A whole short message, owned.
    Owned(Vec<u8>),
    /// `start..end` of a long message's buffer, shared by all its packets.
    Shared(Arc<Vec<u8>>, usize, usize),
}

impl Payload {
    pub(super) fn len(&self) -> usize {
        match self {
            Payload::Empty => 0,
            Payload::Owned(v) => v.len(),
            Payload::Shared(_, s, e) => e - s,
        }
    }
}

#[derive(Debug)]
enum Piece {
    /// Headers and small payloads, copied together.
    Copied(Vec<u8>),
    /// A short message's data, moved in.
    Owned(Vec<u8>),
    /// Part of a long message's buffer.
    Shared(Arc<Vec<u8>>, usize, usize),
}

impl Piece {
    fn bytes(&self) -> &[u8] {
        match self {
            Piece::Copied(v) | Piece::Owned(v) => v,
            Piece::Shared(b, s, e) => &b[*s..*e],
        }
    }
}

/// The output queue: pieces in order, the first partly written.
#[derive(Debug, Default)]
pub(super) struct OutQueue {
    pieces: VecDeque<Piece>,
    /// Bytes of the first piece already written.
    front_done: usize,
    /// Bytes not yet written.
    len: usize,
    /// Whether the last piece is a `Copied` one that may still grow.
    tail_open: bool,
    /// A written `Copied` piece's buffer, kept for the next one: without it every short
    /// message (whose header starts a new piece once the queue ran empty) allocated and
    /// freed a piece.
    spare: Option<Vec<u8>>,
}

impl OutQueue {
    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Append bytes by copying them.
    pub(super) fn copy(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        self.len += bytes.len();
        if self.tail_open {
            if let Some(Piece::Copied(v)) = self.pieces.back_mut() {
                if v.len() + bytes.len() <= COPY_PIECE {
                    v.extend_from_slice(bytes);
                    return;
                }
            }
        }
        let mut v = match self.spare.take() {
            Some(v) => v,
            None => Vec::with_capacity(COPY_PIECE.max(bytes.len())),
        };
        v.extend_from_slice(bytes);
        self.pieces.push_back(Piece::Copied(v));
        self.tail_open = true;
    }

    /// Append a packet's data: copied if small, else by reference.
    pub(super) fn payload(&mut self, p: Payload) {
        let n = p.len();
        if n == 0 {
            return;
        }
        if n < COPY_MAX {
            match &p {
                Payload::Owned(v) => self.copy(v),
                Payload::Shared(b, s, e) => self.copy(&b[*s..*e]),
                Payload::Empty => {}
            }
            return;
        }
        self.len += n;
        self.tail_open = false;
        self.pieces.push_back(match p {
            Payload::Owned(v) => Piece::Owned(v),
            Payload::Shared(b, s, e) => Piece::Shared(b, s, e),
            Payload::Empty => unreachable!("n > 0"),
        });
    }

    /// Up to `max` slices of what is left to write, in order.
    pub(super) fn slices<'a>(&'a self, out: &mut Vec<IoSlice<'a>>, max: usize) {
        for (i, p) in self.pieces.iter().take(max).enumerate() {
            let b = p.bytes();
            out.push(IoSlice::new(if i == 0 { &b[self.front_done..] } else { b }));
        }
    }

    /// The next bytes to write when they are one contiguous piece (one `write` suffices).
    pub(super) fn single(&self) -> Option<&[u8]> {
        match self.pieces.len() {
            1 => Some(&self.pieces[0].bytes()[self.front_done..]),
            _ => None,
        }
    }

    /// `n` bytes were written.
    pub(super) fn advance(&mut self, mut n: usize) {
        assert!(n <= self.len, "OutQueue::advance past the queued bytes");
        self.len -= n;
        while n > 0 {
            let left = self.pieces[0].bytes().len() - self.front_done;
            if n < left {
                self.front_done += n;
                return;
            }
            n -= left;
            if let Some(Piece::Copied(mut v)) = self.pieces.pop_front() {
                if self.spare.is_none() && v.capacity() <= COPY_PIECE {
                    v.clear();
                    self.spare = Some(v);
                }
            }
            self.front_done = 0;
            if self.pieces.is_empty() {
                self.tail_open = false;
            }
        }
        if self.pieces.is_empty() {
            self.tail_open = false;
        }
    }

    /// Everything left, in one buffer (tests and simple drivers), and empty the queue.
    pub(super) fn take_all(&mut self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len);
        for (i, p) in self.pieces.iter().enumerate() {
            let b = p.bytes();
            v.extend_from_slice(if i == 0 { &b[self.front_done..] } else { b });
        }
        let spare = self.spare.take();
        *self = OutQueue {
            spare,
            ..OutQueue::default()
        };
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(q: &OutQueue) -> Vec<u8> {
        let mut s = Vec::new();
        q.slices(&mut s, usize::MAX);
        s.iter().flat_map(|x| x.iter().copied()).collect()
    }

    #[test]
    fn pieces_in_order_with_partial_writes() {
        let mut q = OutQueue::default();
        q.copy(b"head1");
        q.payload(Payload::Owned(vec![1; 3000]));
        q.copy(b"head2");
        q.payload(Payload::Owned(vec![2; 10]));
        let big = Arc::new((0..=255u8).cycle().take(9000).collect::<Vec<u8>>());
        q.payload(Payload::Shared(big.clone(), 100, 5000));
        let mut expect = b"head1".to_vec();
        expect.extend(vec![1; 3000]);
        expect.extend(b"head2");
        expect.extend(vec![2; 10]);
        expect.extend(&big[100..5000]);
        assert_eq!(q.len(), expect.len());
        assert_eq!(written(&q), expect);
        // Small pieces coalesced: head2 and its 10 bytes share one piece.
        let mut s = Vec::new();
        q.slices(&mut s, usize::MAX);
        assert_eq!(s.len(), 4);
        drop(s);
        for step in [3, 2, 2999, 1, 7, 1000] {
            q.advance(step);
            expect.drain(..step);
            assert_eq!(written(&q), expect);
        }
        // The written copy pieces' buffer is reused for the next one.
        assert!(q.spare.is_some());
        q.copy(b"tail");
        expect.extend(b"tail");
        assert!(q.spare.is_none());
        assert_eq!(q.take_all(), expect);
        assert!(q.is_empty());
    }
}
