//! Length-prefixed framing of P2P messages over byte streams, sans IO: pure state machines
//! over bytes ([`FrameDecoder`], [`OutQueue`], [`encode_hello`], [`decode_hello`]),
//! unit-tested without sockets and shared by every stream-socket transport (TCP in
//! `tsunagi-tcp`, Unix sockets in `tsunagi-stream`).
//!
//! # Wire format
//!
//! A connection starts with a hello from the connecting side: the magic `b"TSG1"` then the
//! connector's rank (u32 little-endian). Then frames follow, each
//! `[payload length: u32 LE][Header::to_bytes(): 32 bytes][payload]`. The explicit length is
//! needed because `Header::len` is the *whole message* length, which differs from the payload
//! of one rendezvous chunk. The length `u32::MAX` ([`GOODBYE`]) with no header is the
//! goodbye marker: the sender closes the connection on purpose, so the EOF that follows is
//! not a failure. (The header itself is in native byte order, see [`Header::to_bytes`];
//! a transport crossing hosts must agree on one.)

use std::collections::VecDeque;
use std::fmt;
use std::io::IoSlice;

use crate::{Header, Rank, HEADER_BYTES};

/// Bytes in front of a header on the wire: the payload length.
pub const LEN_BYTES: usize = 4;
/// Bytes of a frame before its payload.
pub const FRAME_HEAD_BYTES: usize = LEN_BYTES + HEADER_BYTES;
/// The length value that marks a goodbye instead of a frame.
pub const GOODBYE: u32 = u32::MAX;
/// Bytes of the hello a connector sends first.
pub const HELLO_BYTES: usize = 8;
const HELLO_MAGIC: [u8; 4] = *b"TSG1";
/// Default read granularity of a decoder.
const READ_CHUNK: usize = 64 * 1024;
/// Frames at most this large are appended to the queue's last segment instead of getting
/// their own allocation.
const COALESCE_MAX: usize = 8 * 1024;
/// Capacity of a coalescing segment.
const SEG_CAPACITY: usize = 64 * 1024;

/// A violation of the wire format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// A frame announced a payload larger than the decoder accepts.
    TooLong { len: usize, max: usize },
    /// The hello did not start with the magic.
    BadHello,
    /// Bytes followed a goodbye.
    AfterGoodbye,
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::TooLong { len, max } => {
                write!(f, "frame payload of {len} bytes exceeds the maximum {max}")
            }
            FrameError::BadHello => f.write_str("connection did not start with a Tsunagi hello"),
            FrameError::AfterGoodbye => f.write_str("bytes after a goodbye"),
        }
    }
}

/// The hello a connector sends as the first bytes of a connection.
pub fn encode_hello(rank: Rank) -> [u8; HELLO_BYTES] {
    let mut out = [0u8; HELLO_BYTES];
    out[..4].copy_from_slice(&HELLO_MAGIC);
    out[4..].copy_from_slice(&rank.to_le_bytes());
    out
}

/// The connector's rank from a hello.
pub fn decode_hello(b: &[u8; HELLO_BYTES]) -> Result<Rank, FrameError> {
    if b[..4] != HELLO_MAGIC {
        return Err(FrameError::BadHello);
    }
    Ok(Rank::from_le_bytes(b[4..].try_into().unwrap()))
}

/// The bytes in front of a payload: length prefix and header.
pub fn encode_frame_head(hdr: &Header, payload_len: usize) -> [u8; FRAME_HEAD_BYTES] {
    debug_assert!(payload_len < GOODBYE as usize);
    let mut out = [0u8; FRAME_HEAD_BYTES];
    out[..LEN_BYTES].copy_from_slice(&(payload_len as u32).to_le_bytes());
    out[LEN_BYTES..].copy_from_slice(&hdr.to_bytes());
    out
}

/// One decoded item. The payload borrows the decoder's buffer until the next call.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A message.
    Message(Header, &'a [u8]),
    /// The sender closes on purpose.
    Goodbye,
}

/// Turns a byte stream into frames.
///
/// Bytes go in either through [`FrameDecoder::read_buf`] + [`FrameDecoder::commit`] (the
/// socket reads straight into the decoder's buffer, no extra copy) or through
/// [`FrameDecoder::feed`]. [`FrameDecoder::next_frame`] then yields complete frames in
/// order. The buffer holds at most about one frame plus one read, so memory is bounded by
/// the maximum payload.
pub struct FrameDecoder {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    max_payload: usize,
    chunk: usize,
    said_goodbye: bool,
}

impl FrameDecoder {
    /// A decoder accepting payloads up to `max_payload` bytes.
    pub fn new(max_payload: usize) -> FrameDecoder {
        FrameDecoder::with_chunk(max_payload, READ_CHUNK)
    }

    /// Like [`FrameDecoder::new`], offering reads of at least `chunk` bytes (small for a
    /// direction that only ever carries a goodbye).
    pub fn with_chunk(max_payload: usize, chunk: usize) -> FrameDecoder {
        FrameDecoder {
            buf: Vec::new(),
            start: 0,
            end: 0,
            max_payload,
            chunk: chunk.max(LEN_BYTES),
            said_goodbye: false,
        }
    }

    /// Bytes received but not yet returned as frames.
    pub fn buffered(&self) -> usize {
        self.end - self.start
    }

    /// True once a goodbye was decoded.
    pub fn said_goodbye(&self) -> bool {
        self.said_goodbye
    }

    /// Total bytes of the frame at the front, if its length prefix has arrived.
    fn front_frame_bytes(&self) -> Option<usize> {
        if self.buffered() < LEN_BYTES {
            return None;
        }
        let len = u32::from_le_bytes(
            self.buf[self.start..self.start + LEN_BYTES]
                .try_into()
                .unwrap(),
        );
        Some(if len == GOODBYE {
            LEN_BYTES
        } else {
            FRAME_HEAD_BYTES + (len as usize).min(self.max_payload)
        })
    }

    /// Free space to read into: at least the rest of the frame at the front, or one chunk.
    /// Follow with [`FrameDecoder::commit`].
    pub fn read_buf(&mut self) -> &mut [u8] {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        let rest = self
            .front_frame_bytes()
            .map_or(0, |f| f.saturating_sub(self.buffered()));
        let want = rest.max(self.chunk);
        if self.buf.len() - self.end < want {
            // Move the partial frame to the front first: it is at most one read long,
            // cheaper than growing, and keeps the buffer bounded.
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            if self.buf.len() - self.end < want {
                self.buf.resize(self.end + want, 0);
            }
        }
        &mut self.buf[self.end..]
    }

    /// Declare that `n` bytes were written at the start of the last [`FrameDecoder::read_buf`].
    pub fn commit(&mut self, n: usize) {
        assert!(self.end + n <= self.buf.len(), "commit beyond read_buf");
        self.end += n;
    }

    /// Append bytes (a copy; sockets use `read_buf`/`commit` instead).
    pub fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let space = self.read_buf();
            let n = space.len().min(bytes.len());
            space[..n].copy_from_slice(&bytes[..n]);
            self.commit(n);
            bytes = &bytes[n..];
        }
    }

    /// Take the connection's hello once all of it has arrived.
    pub fn take_hello(&mut self) -> Option<Result<Rank, FrameError>> {
        if self.buffered() < HELLO_BYTES {
            return None;
        }
        let b: [u8; HELLO_BYTES] = self.buf[self.start..self.start + HELLO_BYTES]
            .try_into()
            .unwrap();
        self.start += HELLO_BYTES;
        Some(decode_hello(&b))
    }

    /// The next complete frame, if one has arrived. After an error the stream is unusable.
    pub fn next_frame(&mut self) -> Result<Option<Frame<'_>>, FrameError> {
        if self.buffered() < LEN_BYTES {
            return Ok(None);
        }
        if self.said_goodbye {
            return Err(FrameError::AfterGoodbye);
        }
        let s = self.start;
        let len = u32::from_le_bytes(self.buf[s..s + LEN_BYTES].try_into().unwrap());
        if len == GOODBYE {
            self.start += LEN_BYTES;
            self.said_goodbye = true;
            return Ok(Some(Frame::Goodbye));
        }
        let len = len as usize;
        if len > self.max_payload {
            return Err(FrameError::TooLong {
                len,
                max: self.max_payload,
            });
        }
        if self.buffered() < FRAME_HEAD_BYTES + len {
            return Ok(None);
        }
        let hdr = Header::from_bytes(
            self.buf[s + LEN_BYTES..s + FRAME_HEAD_BYTES]
                .try_into()
                .unwrap(),
        );
        self.start += FRAME_HEAD_BYTES + len;
        Ok(Some(Frame::Message(
            hdr,
            &self.buf[s + FRAME_HEAD_BYTES..s + FRAME_HEAD_BYTES + len],
        )))
    }
}

/// The encoder side: bytes waiting to go out on one connection, in order.
///
/// Frames are copied in (a send's buffer is free when `try_send` returns); small frames are
/// appended to a shared segment so that a burst of small messages becomes one large
/// `writev` with few allocations. The socket code takes [`OutQueue::io_slices`], writes what
/// it can and reports it with [`OutQueue::consume`].
#[derive(Default)]
pub struct OutQueue {
    segs: VecDeque<Vec<u8>>,
    /// Bytes of `segs[0]` already written.
    front_off: usize,
    /// Unwritten bytes in total.
    bytes: usize,
    /// One drained coalescing segment kept for reuse, so a queue that fills and drains
    /// repeatedly does not allocate every time.
    spare: Option<Vec<u8>>,
}

impl OutQueue {
    /// An empty queue.
    pub fn new() -> OutQueue {
        OutQueue::default()
    }

    /// Unwritten bytes.
    pub fn len(&self) -> usize {
        self.bytes
    }

    /// True when everything was written.
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// Queue one frame.
    pub fn push_frame(&mut self, hdr: &Header, payload: &[u8]) {
        let head = encode_frame_head(hdr, payload.len());
        self.push_parts(&[&head, payload]);
    }

    /// Queue a goodbye marker.
    pub fn push_goodbye(&mut self) {
        self.push_parts(&[&GOODBYE.to_le_bytes()]);
    }

    /// Queue raw bytes that go out as one contiguous piece of the stream (e.g. the rest of
    /// a frame whose first bytes were written directly).
    pub fn push_parts(&mut self, parts: &[&[u8]]) {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        if total == 0 {
            return;
        }
        self.bytes += total;
        if total <= COALESCE_MAX {
            if let Some(back) = self.segs.back_mut() {
                if back.capacity() == SEG_CAPACITY && back.len() + total <= SEG_CAPACITY {
                    for p in parts {
                        back.extend_from_slice(p);
                    }
                    return;
                }
            }
            let mut seg = self
                .spare
                .take()
                .unwrap_or_else(|| Vec::with_capacity(SEG_CAPACITY));
            for p in parts {
                seg.extend_from_slice(p);
            }
            self.segs.push_back(seg);
        } else {
            let mut seg = Vec::with_capacity(total);
            for p in parts {
                seg.extend_from_slice(p);
            }
            self.segs.push_back(seg);
        }
    }

    /// Put bytes in front of everything queued (the hello, once the connection exists).
    /// Only valid while nothing of the front segment has been written.
    pub fn prepend(&mut self, bytes: &[u8]) {
        assert_eq!(self.front_off, 0, "prepend after a partial write");
        self.bytes += bytes.len();
        self.segs.push_front(bytes.to_vec());
    }

    /// Fill `out` with the unwritten bytes in order; returns how many slices were used.
    pub fn io_slices<'a>(&'a self, out: &mut [IoSlice<'a>]) -> usize {
        let mut n = 0;
        for (i, seg) in self.segs.iter().enumerate() {
            if n == out.len() {
                break;
            }
            let s = if i == 0 {
                &seg[self.front_off..]
            } else {
                &seg[..]
            };
            out[n] = IoSlice::new(s);
            n += 1;
        }
        n
    }

    /// Drop `n` bytes from the front: they were written.
    pub fn consume(&mut self, mut n: usize) {
        assert!(n <= self.bytes, "consume beyond the queue");
        self.bytes -= n;
        while n > 0 {
            let rest = self.segs[0].len() - self.front_off;
            if n < rest {
                self.front_off += n;
                return;
            }
            n -= rest;
            self.front_off = 0;
            let mut seg = self.segs.pop_front().expect("bytes accounted");
            if seg.capacity() == SEG_CAPACITY && self.spare.is_none() {
                seg.clear();
                self.spare = Some(seg);
            }
        }
    }

    /// Forget everything queued (the connection is gone).
    pub fn clear(&mut self) {
        self.segs.clear();
        self.front_off = 0;
        self.bytes = 0;
    }
}

/// Deterministic frames for the tests of the framing and of the stream-socket transports
/// (shared so that the transports' tests exercise the same shapes as the codec's); not
/// part of the API.
#[doc(hidden)]
pub mod test_data {
    use crate::Header;

    /// The largest payload the tests frame (the stream transports' limit).
    pub const MAX_PAYLOAD: usize = 256 * 1024;

    /// xorshift64*: deterministic test data without a dependency.
    pub struct Rng(pub u64);
    impl Rng {
        pub fn next_u64(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        pub fn below(&mut self, n: usize) -> usize {
            (self.next_u64() % n as u64) as usize
        }
    }

    /// The header of test message `seq` (its tag) of `len` bytes.
    pub fn hdr(seq: u32, len: usize, cookie: u64) -> Header {
        Header {
            kind: 7,
            flags: 1,
            reserved: 0,
            src: 0,
            tag: seq as i32,
            context: 42,
            len: len as u64,
            cookie,
        }
    }

    /// Payload of message `seq`: mostly small, every 16th up to the maximum, plus the
    /// extremes, so both the coalescing and the large-frame paths are exercised.
    pub fn payload(seq: u32) -> Vec<u8> {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (seq as u64 + 1).wrapping_mul(0x1234_5677));
        let len = match seq {
            1 => MAX_PAYLOAD,
            2 => 0,
            _ if seq & 15 == 0 => rng.below(MAX_PAYLOAD + 1),
            _ => rng.below(4097),
        };
        let mut v = Vec::with_capacity(len + 8);
        while v.len() < len {
            v.extend_from_slice(&rng.next_u64().to_le_bytes());
        }
        v.truncate(len);
        v
    }

    /// FNV-1a over 8-byte words (plus tail): cheap enough for ~100 MB per test.
    pub fn checksum(b: &[u8]) -> u64 {
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        let mut words = b.chunks_exact(8);
        for w in &mut words {
            h = (h ^ u64::from_le_bytes(w.try_into().unwrap())).wrapping_mul(0x100_0000_01b3);
        }
        for &x in words.remainder() {
            h = (h ^ x as u64).wrapping_mul(0x100_0000_01b3);
        }
        h
    }
}

#[cfg(test)]
mod tests {
    use super::test_data::{checksum, hdr, payload, Rng, MAX_PAYLOAD};
    use super::*;

    /// iovecs per drain, as a sendmsg would take.
    const MAX_IOV: usize = 64;

    fn sample_frames() -> Vec<(Header, Vec<u8>)> {
        (0..200)
            .map(|s| {
                let p = payload(s);
                (hdr(s, p.len(), checksum(&p)), p)
            })
            .collect()
    }

    fn wire(frames: &[(Header, Vec<u8>)]) -> Vec<u8> {
        let mut w = encode_hello(3).to_vec();
        for (h, p) in frames {
            w.extend_from_slice(&encode_frame_head(h, p.len()));
            w.extend_from_slice(p);
        }
        w.extend_from_slice(&GOODBYE.to_le_bytes());
        w
    }

    /// Feed `w` in chunks chosen by `chunk`; check hello, frames and goodbye.
    fn decode_in_chunks(w: &[u8], frames: &[(Header, Vec<u8>)], mut chunk: impl FnMut() -> usize) {
        let mut dec = FrameDecoder::new(MAX_PAYLOAD);
        let mut got = Vec::new();
        let mut rank = None;
        let mut goodbye = false;
        let mut off = 0;
        let mut max_fed = 0;
        while off < w.len() {
            let n = chunk().clamp(1, w.len() - off);
            max_fed = max_fed.max(n);
            dec.feed(&w[off..off + n]);
            off += n;
            if rank.is_none() {
                match dec.take_hello() {
                    None => continue,
                    Some(r) => rank = Some(r.unwrap()),
                }
            }
            while let Some(f) = dec.next_frame().unwrap() {
                match f {
                    Frame::Message(h, p) => got.push((h, p.to_vec())),
                    Frame::Goodbye => goodbye = true,
                }
            }
            // Memory stays bounded: about one frame plus the most fed at once.
            assert!(dec.buf.len() <= max_fed + 2 * (FRAME_HEAD_BYTES + MAX_PAYLOAD) + READ_CHUNK);
        }
        assert_eq!(rank, Some(3));
        assert!(goodbye);
        assert_eq!(dec.buffered(), 0);
        assert_eq!(got.len(), frames.len());
        for (g, f) in got.iter().zip(frames) {
            assert_eq!(g, f);
        }
    }

    #[test]
    fn decoder_byte_by_byte() {
        let frames: Vec<_> = sample_frames().into_iter().take(40).collect();
        decode_in_chunks(&wire(&frames), &frames, || 1);
    }

    #[test]
    fn decoder_random_chunks() {
        let frames = sample_frames();
        let w = wire(&frames);
        for seed in 1..=4u64 {
            let mut rng = Rng(seed.wrapping_mul(0x5851_F42D_4C95_7F2D));
            // Mix tiny, medium and huge chunks, so frames split at every kind of boundary.
            decode_in_chunks(&w, &frames, || match rng.below(3) {
                0 => 1 + rng.below(40),
                1 => 1 + rng.below(5000),
                _ => 1 + rng.below(3 * MAX_PAYLOAD),
            });
        }
    }

    #[test]
    fn decoder_rejects_oversized_and_trailing() {
        let mut dec = FrameDecoder::new(100);
        dec.feed(&encode_frame_head(&Header::default(), 101));
        assert_eq!(
            dec.next_frame(),
            Err(FrameError::TooLong { len: 101, max: 100 })
        );

        let mut dec = FrameDecoder::new(100);
        dec.feed(&GOODBYE.to_le_bytes());
        dec.feed(&[0; 4]);
        assert_eq!(dec.next_frame(), Ok(Some(Frame::Goodbye)));
        assert_eq!(dec.next_frame(), Err(FrameError::AfterGoodbye));

        let mut dec = FrameDecoder::new(100);
        dec.feed(b"HTTP/1.1");
        assert_eq!(dec.take_hello(), Some(Err(FrameError::BadHello)));
    }

    #[test]
    fn out_queue_partial_writes_reproduce_the_stream() {
        let frames = sample_frames();
        let mut rng = Rng(77);
        let mut q = OutQueue::new();
        let mut expect = Vec::new();
        let mut got = Vec::new();
        for (i, (h, p)) in frames.iter().enumerate() {
            q.push_frame(h, p);
            expect.extend_from_slice(&encode_frame_head(h, p.len()));
            expect.extend_from_slice(p);
            if i == 0 {
                // Like the hello that goes in front once the connection exists.
                q.prepend(&encode_hello(9));
                expect.splice(0..0, encode_hello(9));
            }
            // Drain a random amount, as a socket taking partial writes would.
            if rng.below(3) == 0 {
                let mut iov = [IoSlice::new(&[]); 4];
                let n = q.io_slices(&mut iov);
                let avail: usize = iov[..n].iter().map(|s| s.len()).sum();
                let k = rng.below(avail + 1);
                let mut left = k;
                for s in &iov[..n] {
                    let t = left.min(s.len());
                    got.extend_from_slice(&s[..t]);
                    left -= t;
                }
                q.consume(k);
            }
        }
        q.push_goodbye();
        expect.extend_from_slice(&GOODBYE.to_le_bytes());
        assert_eq!(q.len(), expect.len() - got.len());
        while !q.is_empty() {
            let mut iov = [IoSlice::new(&[]); MAX_IOV];
            let n = q.io_slices(&mut iov);
            let k: usize = iov[..n].iter().map(|s| s.len()).sum();
            for s in &iov[..n] {
                got.extend_from_slice(s);
            }
            q.consume(k);
        }
        assert!(got == expect, "drained stream differs");
    }
}
