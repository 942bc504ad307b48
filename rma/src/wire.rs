//! The messages of the RMA protocol, without I/O: what an origin sends to a target on the
//! window's private communicator, and the acknowledgements that come back.
//!
//! A request message is a fixed 32-byte header, the target's byte runs (the flattened
//! type map of the target datatype, relative to `base`), then the origin data if it is
//! carried inline. Larger data follows as a message of its own (`FOLLOWS`). Decoding
//! checks every length against the message, so a malformed message is an error, never a
//! panic or an out-of-bounds read.

use std::fmt;

/// What a request asks of the target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    Put = 1,
    Get = 2,
    Acc = 3,
    GetAcc = 4,
    Cas = 5,
    /// Answer with an acknowledgement once everything before it is applied.
    Flush = 6,
    Lock = 7,
    Unlock = 8,
    /// Active target: the sender exposes its window to the receiver (MPI_Win_post).
    Post = 9,
    /// Active target: the sender's access epoch to the receiver ended (MPI_Win_complete).
    Complete = 10,
    /// The sender entered MPI_Win_fence (first round) or saw its window's epoch done
    /// (second round): everything it sent before is applied once this is.
    Fence = 11,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        use Kind::*;
        Some(match v {
            1 => Put,
            2 => Get,
            3 => Acc,
            4 => GetAcc,
            5 => Cas,
            6 => Flush,
            7 => Lock,
            8 => Unlock,
            9 => Post,
            10 => Complete,
            11 => Fence,
            _ => return None,
        })
    }
}

/// The origin data is a separate message (tag `TAG_DATA`), not inline.
pub const FOLLOWS: u8 = 1;
/// A lock request asks for an exclusive lock.
pub const EXCLUSIVE: u8 = 2;
/// A stub: the real request (header and runs, `payload_len` bytes) follows on `TAG_DATA`
/// because it is larger than the target's receive buffer.
pub const BIG: u8 = 4;
/// `elem` value for "bytes" (MPI_REPLACE / MPI_NO_OP on a type with mixed elements).
pub const ELEM_BYTES: u8 = 255;

/// Header size in bytes.
pub const HEADER: usize = 32;
const MAGIC: u8 = 0x7a;

/// One request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub kind: Kind,
    /// MPICH's predefined op index (1 = MPI_MAX ... 14 = MPI_NO_OP) for accumulates.
    pub op: u8,
    /// Index of the builtin element type in `Builtin::ALL` (accumulates, CAS), or
    /// [`ELEM_BYTES`].
    pub elem: u8,
    pub flags: u8,
    /// Target byte offset in the window (an absolute address in a dynamic window).
    pub base: u64,
    /// Bytes of origin data (inline or following).
    pub payload_len: u64,
    /// Target runs `(offset from base, length)`, in packed-stream order.
    pub runs: Vec<(i64, u64)>,
}

/// Why a message was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireError(pub String);

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed RMA message: {}", self.0)
    }
}

impl Request {
    /// A request without runs or data (flush, lock, unlock, post, complete).
    pub fn control(kind: Kind, flags: u8) -> Request {
        Request {
            kind,
            op: 0,
            elem: 0,
            flags,
            base: 0,
            payload_len: 0,
            runs: Vec::new(),
        }
    }

    /// Total bytes the runs cover.
    pub fn run_bytes(&self) -> u64 {
        self.runs.iter().map(|r| r.1).sum()
    }

    /// The message: header, runs, then `inline` (empty when the data follows).
    pub fn encode(&self, inline: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER + self.runs.len() * 16 + inline.len());
        out.extend_from_slice(&[
            MAGIC,
            self.kind as u8,
            self.op,
            self.elem,
            self.flags,
            0,
            0,
            0,
        ]);
        out.extend_from_slice(&(self.runs.len() as u64).to_le_bytes());
        out.extend_from_slice(&self.base.to_le_bytes());
        out.extend_from_slice(&self.payload_len.to_le_bytes());
        for (off, len) in &self.runs {
            out.extend_from_slice(&off.to_le_bytes());
            out.extend_from_slice(&len.to_le_bytes());
        }
        out.extend_from_slice(inline);
        out
    }

    /// Parse a message: the request and its inline data.
    pub fn decode(msg: &[u8]) -> Result<(Request, &[u8]), WireError> {
        let bad = |s: &str| Err(WireError(s.to_string()));
        if msg.len() < HEADER {
            return bad("shorter than its header");
        }
        if msg[0] != MAGIC {
            return bad("bad magic byte");
        }
        let Some(kind) = Kind::from_u8(msg[1]) else {
            return bad("unknown kind");
        };
        let word = |i: usize| u64::from_le_bytes(msg[i..i + 8].try_into().expect("8 bytes"));
        let nruns = word(8);
        let base = word(16);
        let payload_len = word(24);
        let runs_end = nruns
            .checked_mul(16)
            .and_then(|b| b.checked_add(HEADER as u64))
            .filter(|&e| e <= msg.len() as u64);
        let Some(runs_end) = runs_end else {
            return bad("more runs than the message holds");
        };
        let runs_end = runs_end as usize;
        let mut runs = Vec::with_capacity(nruns as usize);
        let mut total: u64 = 0;
        for i in 0..nruns as usize {
            let at = HEADER + i * 16;
            let off = word(at) as i64;
            let len = word(at + 8);
            total = match total.checked_add(len) {
                Some(t) => t,
                None => return bad("run lengths overflow"),
            };
            runs.push((off, len));
        }
        let req = Request {
            kind,
            op: msg[2],
            elem: msg[3],
            flags: msg[4],
            base,
            payload_len,
            runs,
        };
        let inline = &msg[runs_end..];
        if req.flags & BIG != 0 {
            if !req.runs.is_empty() || !inline.is_empty() {
                return bad("a stub with runs or data");
            }
            return Ok((req, inline));
        }
        if req.flags & FOLLOWS == 0 && inline.len() as u64 != payload_len {
            return bad("inline data length differs from the header's");
        }
        if req.flags & FOLLOWS != 0 && !inline.is_empty() {
            return bad("inline data in a message whose data follows");
        }
        match kind {
            Kind::Put | Kind::Acc | Kind::GetAcc if payload_len != total => {
                return bad("data length differs from the target runs' length")
            }
            Kind::Cas if payload_len != 2 * total => {
                return bad("compare-and-swap data is not two elements")
            }
            _ => {}
        }
        Ok((req, inline))
    }
}

/// What an acknowledgement answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum AckKind {
    Flushed = 1,
    Granted = 2,
    Unlocked = 3,
}

/// Acknowledgement size.
pub const ACK: usize = 8;

/// An acknowledgement: its kind and how many of the sender's operations since the last
/// acknowledgement were refused (outside the window).
pub fn encode_ack(kind: AckKind, errors: u32) -> [u8; ACK] {
    let mut a = [0u8; ACK];
    a[0] = kind as u8;
    a[4..8].copy_from_slice(&errors.to_le_bytes());
    a
}

/// The refused-operation count of an acknowledgement.
pub fn decode_ack(a: &[u8]) -> Result<(u8, u32), WireError> {
    if a.len() != ACK || !(1..=3).contains(&a[0]) {
        return Err(WireError("bad acknowledgement".into()));
    }
    Ok((
        a[0],
        u32::from_le_bytes(a[4..8].try_into().expect("4 bytes")),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Request {
        Request {
            kind: Kind::Acc,
            op: 3,
            elem: 7,
            flags: 0,
            base: 4096,
            payload_len: 12,
            runs: vec![(0, 4), (16, 8)],
        }
    }

    #[test]
    fn round_trip_with_inline_data() {
        let r = sample();
        let data = [1u8; 12];
        let msg = r.encode(&data);
        assert_eq!(msg.len(), HEADER + 32 + 12);
        let (back, inline) = Request::decode(&msg).unwrap();
        assert_eq!(back, r);
        assert_eq!(inline, &data);
    }

    #[test]
    fn round_trip_control_and_following_data() {
        let c = Request::control(Kind::Lock, EXCLUSIVE);
        assert_eq!(Request::decode(&c.encode(&[])).unwrap().0, c);
        let mut p = sample();
        p.kind = Kind::Put;
        p.flags = FOLLOWS;
        let msg = p.encode(&[]);
        let (back, inline) = Request::decode(&msg).unwrap();
        assert_eq!(back, p);
        assert!(inline.is_empty());
    }

    #[test]
    fn malformed_messages_are_refused() {
        let r = sample();
        let good = r.encode(&[0u8; 12]);
        // Every truncation is refused.
        for n in 0..good.len() {
            assert!(Request::decode(&good[..n]).is_err(), "prefix {n} accepted");
        }
        let mut m = good.clone();
        m[0] = 0;
        assert!(Request::decode(&m).is_err());
        let mut m = good.clone();
        m[1] = 99;
        assert!(Request::decode(&m).is_err());
        // A run count that would overflow the length computation.
        let mut m = good.clone();
        m[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(Request::decode(&m).is_err());
        // Run lengths that overflow when summed.
        let mut m = good.clone();
        m[HEADER + 8..HEADER + 16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(Request::decode(&m).is_err());
        // Data length and run lengths disagree.
        let mut short = r.clone();
        short.payload_len = 8;
        assert!(Request::decode(&short.encode(&[0u8; 8])).is_err());
        // CAS carries exactly two elements.
        let cas = Request {
            kind: Kind::Cas,
            runs: vec![(0, 4)],
            payload_len: 8,
            ..sample()
        };
        assert!(Request::decode(&cas.encode(&[0u8; 8])).is_ok());
        assert!(Request::decode(&cas.encode(&[0u8; 4])).is_err());
    }

    #[test]
    fn acks() {
        let a = encode_ack(AckKind::Flushed, 3);
        assert_eq!(decode_ack(&a).unwrap(), (1, 3));
        assert!(decode_ack(&a[..4]).is_err());
        assert!(decode_ack(&[9, 0, 0, 0, 0, 0, 0, 0]).is_err());
    }
}
