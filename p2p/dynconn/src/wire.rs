//! The connection device's frames, without I/O.
//!
//! A stream carries frames of a 32-byte little-endian header and a payload:
//!
//! ```text
//!  0  kind u8      1 = MSG (a whole MPI message), 2 = ACK (a synchronous send matched)
//!  1  flags u8     MSG: bit 0 = synchronous (the receiver answers ACK once it matched)
//!  2  reserved u16 (0)
//!  4  tag i32      MSG only
//!  8  context u32  MSG only
//! 12  reserved u32 (0)
//! 16  token u64    the sender's name for the send (echoed by ACK)
//! 24  len u64      payload bytes (MSG; 0 for ACK)
//! ```
//!
//! Messages go whole (no rendezvous): the receiver buffers what arrives unmatched, as an
//! eager protocol does. The sender's world rank is the stream's: one stream per pair.

/// Bytes in a frame header.
pub const HEADER: usize = 32;

const KIND_MSG: u8 = 1;
const KIND_ACK: u8 = 2;
const FLAG_SYNC: u8 = 1;

/// One decoded frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// A whole message.
    Msg {
        tag: i32,
        context: u32,
        sync: bool,
        token: u64,
        data: Vec<u8>,
    },
    /// The receiver matched the synchronous send `token`.
    Ack { token: u64 },
}

/// A frame the decoder refuses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireError(pub String);

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "connection protocol error: {}", self.0)
    }
}

/// The header of a MSG frame carrying `len` payload bytes.
pub fn msg_header(tag: i32, context: u32, sync: bool, token: u64, len: u64) -> [u8; HEADER] {
    let mut h = [0u8; HEADER];
    h[0] = KIND_MSG;
    h[1] = if sync { FLAG_SYNC } else { 0 };
    h[4..8].copy_from_slice(&tag.to_le_bytes());
    h[8..12].copy_from_slice(&context.to_le_bytes());
    h[16..24].copy_from_slice(&token.to_le_bytes());
    h[24..32].copy_from_slice(&len.to_le_bytes());
    h
}

/// An ACK frame for the synchronous send `token`.
pub fn ack(token: u64) -> [u8; HEADER] {
    let mut h = [0u8; HEADER];
    h[0] = KIND_ACK;
    h[16..24].copy_from_slice(&token.to_le_bytes());
    h
}

/// The largest payload a decoder reserves up front from a header's claim (the buffer
/// still grows to what really arrives).
const RESERVE_MAX: usize = 64 << 20;

/// Reassembles frames from a byte stream, in any split.
#[derive(Debug)]
pub struct Decoder {
    header: Vec<u8>,
    /// The frame whose payload is being read: (header fields, payload so far, length).
    body: Option<(Frame, usize)>,
    max_len: u64,
}

impl Decoder {
    /// A decoder refusing payloads longer than `max_len`.
    pub fn new(max_len: u64) -> Decoder {
        Decoder {
            header: Vec::with_capacity(HEADER),
            body: None,
            max_len,
        }
    }

    /// Whether the decoder is between frames (a stream may end here).
    pub fn idle(&self) -> bool {
        self.header.is_empty() && self.body.is_none()
    }

    /// Consume `bytes`, handing each completed frame to `out`.
    pub fn feed(&mut self, mut bytes: &[u8], out: &mut dyn FnMut(Frame)) -> Result<(), WireError> {
        while !bytes.is_empty() {
            if let Some((frame, want)) = self.body.as_mut() {
                let Frame::Msg { data, .. } = frame else {
                    unreachable!("only MSG frames have bodies")
                };
                let take = (*want - data.len()).min(bytes.len());
                data.extend_from_slice(&bytes[..take]);
                bytes = &bytes[take..];
                if data.len() == *want {
                    out(self.body.take().expect("set").0);
                }
                continue;
            }
            let take = (HEADER - self.header.len()).min(bytes.len());
            self.header.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if self.header.len() < HEADER {
                break;
            }
            let h: [u8; HEADER] = self.header[..].try_into().expect("32 bytes");
            self.header.clear();
            let u32_at = |i: usize| u32::from_le_bytes(h[i..i + 4].try_into().expect("4"));
            let u64_at = |i: usize| u64::from_le_bytes(h[i..i + 8].try_into().expect("8"));
            if h[2] != 0 || h[3] != 0 || u32_at(12) != 0 {
                return Err(WireError("reserved header bytes are not zero".into()));
            }
            let token = u64_at(16);
            let len = u64_at(24);
            match h[0] {
                KIND_MSG => {
                    if h[1] & !FLAG_SYNC != 0 {
                        return Err(WireError(format!("unknown flags {:#x}", h[1])));
                    }
                    if len > self.max_len {
                        return Err(WireError(format!(
                            "message of {len} bytes exceeds the limit of {}",
                            self.max_len
                        )));
                    }
                    let frame = Frame::Msg {
                        tag: u32_at(4) as i32,
                        context: u32_at(8),
                        sync: h[1] & FLAG_SYNC != 0,
                        token,
                        data: Vec::with_capacity((len as usize).min(RESERVE_MAX)),
                    };
                    if len == 0 {
                        out(frame);
                    } else {
                        self.body = Some((frame, len as usize));
                    }
                }
                KIND_ACK => {
                    if h[1] != 0 || len != 0 || u32_at(4) != 0 || u32_at(8) != 0 {
                        return Err(WireError("malformed ACK".into()));
                    }
                    out(Frame::Ack { token });
                }
                k => return Err(WireError(format!("unknown frame kind {k}"))),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(d: &mut Decoder, bytes: &[u8]) -> Result<Vec<Frame>, WireError> {
        let mut v = Vec::new();
        d.feed(bytes, &mut |f| v.push(f))?;
        Ok(v)
    }

    fn stream() -> (Vec<u8>, Vec<Frame>) {
        let mut s = Vec::new();
        s.extend_from_slice(&msg_header(7, 4, false, 1, 5));
        s.extend_from_slice(b"hello");
        s.extend_from_slice(&ack(99));
        s.extend_from_slice(&msg_header(-3, 6, true, 2, 0));
        s.extend_from_slice(&msg_header(i32::MAX, 8, true, u64::MAX, 3));
        s.extend_from_slice(&[1, 2, 3]);
        let frames = vec![
            Frame::Msg {
                tag: 7,
                context: 4,
                sync: false,
                token: 1,
                data: b"hello".to_vec(),
            },
            Frame::Ack { token: 99 },
            Frame::Msg {
                tag: -3,
                context: 6,
                sync: true,
                token: 2,
                data: vec![],
            },
            Frame::Msg {
                tag: i32::MAX,
                context: 8,
                sync: true,
                token: u64::MAX,
                data: vec![1, 2, 3],
            },
        ];
        (s, frames)
    }

    #[test]
    fn frames_survive_every_split_of_the_stream() {
        let (s, want) = stream();
        for cut in 0..=s.len() {
            for cut2 in cut..=s.len() {
                let mut d = Decoder::new(1 << 20);
                let mut got = decode_all(&mut d, &s[..cut]).unwrap();
                got.extend(decode_all(&mut d, &s[cut..cut2]).unwrap());
                got.extend(decode_all(&mut d, &s[cut2..]).unwrap());
                assert_eq!(got, want, "cuts at {cut}, {cut2}");
                assert!(d.idle());
            }
        }
        // One byte at a time.
        let mut d = Decoder::new(1 << 20);
        let mut got = Vec::new();
        for b in &s {
            got.extend(decode_all(&mut d, std::slice::from_ref(b)).unwrap());
        }
        assert_eq!(got, want);
    }

    #[test]
    fn a_partial_frame_is_not_idle() {
        let (s, _) = stream();
        let mut d = Decoder::new(1 << 20);
        decode_all(&mut d, &s[..HEADER + 2]).unwrap();
        assert!(!d.idle());
        let mut d = Decoder::new(1 << 20);
        decode_all(&mut d, &s[..3]).unwrap();
        assert!(!d.idle());
    }

    #[test]
    fn malformed_headers_are_refused_without_panicking() {
        let mut bad = Vec::new();
        let mut h = msg_header(1, 2, false, 3, 4);
        h[0] = 9;
        bad.push(h.to_vec());
        let mut h = msg_header(1, 2, false, 3, 4);
        h[1] = 0x80;
        bad.push(h.to_vec());
        let mut h = msg_header(1, 2, false, 3, 4);
        h[2] = 1;
        bad.push(h.to_vec());
        let mut h = msg_header(1, 2, false, 3, 4);
        h[13] = 1;
        bad.push(h.to_vec());
        let mut h = ack(5);
        h[24] = 1;
        bad.push(h.to_vec());
        let mut h = ack(5);
        h[4] = 1;
        bad.push(h.to_vec());
        bad.push(msg_header(1, 2, false, 3, 1 << 21).to_vec());
        for b in bad {
            let mut d = Decoder::new(1 << 20);
            assert!(decode_all(&mut d, &b).is_err(), "{b:?} accepted");
        }
        // Random garbage: an error or frames, never a panic.
        let mut x: u64 = 0x9e3779b97f4a7c15;
        for _ in 0..2000 {
            let mut buf = vec![0u8; 80];
            for b in buf.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = (x % 4) as u8;
            }
            let _ = decode_all(&mut Decoder::new(1 << 10), &buf);
        }
    }
}
