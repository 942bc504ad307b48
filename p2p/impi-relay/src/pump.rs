//! One direction of a relayed connection, sans-IO: bytes read from one side wait here until
//! the other side takes them. Bounded, so that a slow reader stops the relay reading from a
//! fast writer (TCP's flow control then reaches the sender), and it remembers the end of
//! the stream so that a half-close is passed on once everything before it has gone.

/// The most bytes one direction holds.
pub const CAPACITY: usize = 256 * 1024;

#[derive(Debug, Default)]
pub struct Pump {
    buf: Vec<u8>,
    /// Bytes of `buf` already written out.
    sent: usize,
    /// The source side ended its stream.
    eof: bool,
    /// The end was passed on (the destination's write side is shut).
    shut: bool,
}

impl Pump {
    pub fn new() -> Pump {
        Pump::default()
    }

    /// Room for more bytes from the source (never negative; a start-up rewrite may push
    /// a whole message beyond it).
    pub fn room(&self) -> usize {
        CAPACITY.saturating_sub(self.pending().len())
    }

    /// Bytes from the source.
    pub fn push(&mut self, bytes: &[u8]) {
        debug_assert!(!self.eof, "bytes after the end of the stream");
        if self.sent == self.buf.len() {
            self.buf.clear();
            self.sent = 0;
        } else if self.sent > CAPACITY {
            self.buf.drain(..self.sent);
            self.sent = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The bytes waiting for the destination.
    pub fn pending(&self) -> &[u8] {
        &self.buf[self.sent..]
    }

    /// `n` of the pending bytes were written.
    pub fn consumed(&mut self, n: usize) {
        assert!(n <= self.pending().len(), "consumed more than pending");
        self.sent += n;
        if self.sent == self.buf.len() {
            self.buf.clear();
            self.sent = 0;
        }
    }

    /// The source ended its stream.
    pub fn end(&mut self) {
        self.eof = true;
    }

    pub fn ended(&self) -> bool {
        self.eof
    }

    /// Whether the destination's write side should be shut now (once): the source ended
    /// and everything before the end went out.
    pub fn take_shutdown(&mut self) -> bool {
        if self.eof && !self.shut && self.pending().is_empty() {
            self.shut = true;
            true
        } else {
            false
        }
    }

    /// Nothing more will ever go through.
    pub fn finished(&self) -> bool {
        self.shut
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_go_in_order_and_the_end_follows_them() {
        let mut p = Pump::new();
        assert_eq!(p.room(), CAPACITY);
        p.push(b"hello ");
        p.push(b"world");
        assert_eq!(p.pending(), b"hello world");
        p.consumed(3);
        assert_eq!(p.pending(), b"lo world");
        p.end();
        assert!(!p.take_shutdown(), "bytes still pending");
        p.consumed(8);
        assert!(p.take_shutdown());
        assert!(!p.take_shutdown(), "only once");
        assert!(p.finished());
    }

    #[test]
    fn room_bounds_the_buffer_and_comes_back() {
        let mut p = Pump::new();
        p.push(&vec![7u8; CAPACITY]);
        assert_eq!(p.room(), 0);
        p.consumed(CAPACITY - 10);
        assert_eq!(p.room(), CAPACITY - 10);
        p.push(&[1, 2, 3]);
        let mut want = vec![7u8; 10];
        want.extend([1, 2, 3]);
        assert_eq!(p.pending(), &want[..]);
    }
}
