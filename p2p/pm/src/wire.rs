//! The PM/UDP packet: a fixed 36-byte header and a payload, one per datagram.
//!
//! Pure functions only ([`encode`], [`decode`]); the decoder is what faces the network, so it
//! rejects every malformed datagram with a [`WireError`] and never panics (fuzzed by
//! `fuzz/fuzz_targets/pm_packet.rs`).
//!
//! Layout, little-endian:
//!
//! | bytes  | field                                                         |
//! |--------|---------------------------------------------------------------|
//! | 0..2   | magic `b"PM"`                                                 |
//! | 2      | version ([`VERSION`])                                         |
//! | 3      | kind: 1 DATA, 2 ACK, 3 NACK, 4 FRAG                           |
//! | 4      | flags: bit 0 = the checksum field is set                      |
//! | 5      | reserved, zero                                                |
//! | 6..8   | payload length                                                |
//! | 8..12  | source rank                                                   |
//! | 12..16 | destination rank                                              |
//! | 16..20 | sender's epoch (random per transport instance)                |
//! | 20..24 | sequence number (DATA; zero otherwise)                        |
//! | 24..28 | cumulative ack: next sequence number expected (ACK, NACK)     |
//! | 28..32 | selective ack: bit i = `ack + 1 + i` arrived (ACK, NACK)      |
//! | 32..36 | CRC-32 of the whole packet with this field zero, or zero      |
//!
//! **Fragments.** A DATA packet larger than one datagram of the path ([`encode_train`]'s
//! `max_datagram`: the MTU less the IP and UDP headers) goes as FRAG packets, each a full
//! header and a piece of the payload: `seq` is the DATA packet's, bytes 24..28 the piece's
//! offset, bytes 28..30 the whole payload's length and 30..32 the piece size (every piece
//! but the last has it). The pieces are written back to back into one buffer, a **train**,
//! which the driver hands to the kernel in one call with UDP segmentation offload (GSO):
//! one buffer crosses the stack and is cut into datagrams of one piece each, instead of
//! one large datagram cut into IP fragments and reassembled. A receiver with UDP GRO may
//! get a train back in one read; [`packets`] walks one. Each piece is checked (and
//! checksummed) on its own; the link reassembles them (`crate::reliable`).

use std::fmt;

/// Bytes of the packet header.
pub const HEADER_BYTES: usize = 36;
/// Wire format version.
pub const VERSION: u8 = 1;
/// Largest payload one packet may carry (fits a u16 length and one UDP datagram).
pub const MAX_PACKET_PAYLOAD: usize = 65_000;
const MAGIC: [u8; 2] = *b"PM";
const FLAG_CHECKSUM: u8 = 1;

/// What a packet is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A frame of the reliable stream, with a sequence number.
    Data = 1,
    /// Cumulative plus selective acknowledgement.
    Ack = 2,
    /// As an ACK, and a request to resend the holes below the highest selective bit now.
    Nack = 3,
    /// A piece of a DATA packet too large for one datagram (see the module doc).
    Frag = 4,
}

/// A decoded packet; `payload` borrows the datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<'a> {
    pub kind: Kind,
    pub src: u32,
    pub dst: u32,
    pub epoch: u32,
    pub seq: u32,
    pub ack: u32,
    pub sack: u32,
    pub payload: &'a [u8],
}

/// Why a datagram was rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WireError {
    Short(usize),
    Magic,
    Version(u8),
    Kind(u8),
    Flags(u8),
    Reserved,
    Length {
        said: usize,
        got: usize,
    },
    PayloadOnControl,
    Checksum,
    TooLong(usize),
    /// A FRAG whose offset, piece size and total do not fit together.
    Fragment,
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Short(n) => write!(f, "datagram of {n} bytes is shorter than a header"),
            WireError::Magic => f.write_str("bad magic"),
            WireError::Version(v) => write!(f, "unknown version {v}"),
            WireError::Kind(k) => write!(f, "unknown packet kind {k}"),
            WireError::Flags(x) => write!(f, "unknown flags {x:#x}"),
            WireError::Reserved => f.write_str("reserved byte not zero"),
            WireError::Length { said, got } => {
                write!(f, "header says {said} payload bytes, datagram has {got}")
            }
            WireError::PayloadOnControl => f.write_str("ACK/NACK with a payload"),
            WireError::Checksum => f.write_str("checksum mismatch"),
            WireError::TooLong(n) => write!(f, "payload of {n} bytes is too long"),
            WireError::Fragment => f.write_str("fragment does not fit its packet"),
        }
    }
}

/// CRC-32 (IEEE 802.3, reflected, polynomial 0xEDB88320) of the concatenated `parts`:
/// crc32fast, with the carry-less-multiply (PCLMULQDQ / PMULL) path where the CPU has it
/// (~10x the table-driven slicing-by-8 this replaced, which capped a large transfer).
pub fn crc32(parts: &[&[u8]]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    for p in parts {
        h.update(p);
    }
    h.finalize()
}

/// Append the packet to `out` (cleared first). `checksum` adds a CRC-32 of the packet.
pub fn encode(p: &Packet<'_>, checksum: bool, out: &mut Vec<u8>) -> Result<(), WireError> {
    if p.payload.len() > MAX_PACKET_PAYLOAD {
        return Err(WireError::TooLong(p.payload.len()));
    }
    out.clear();
    append(p, checksum, out);
    Ok(())
}

/// Append packet `p` (its payload fits) to `out`, after what is there.
fn append(p: &Packet<'_>, checksum: bool, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&MAGIC);
    out.push(VERSION);
    out.push(p.kind as u8);
    out.push(if checksum { FLAG_CHECKSUM } else { 0 });
    out.push(0);
    out.extend_from_slice(&(p.payload.len() as u16).to_le_bytes());
    for v in [p.src, p.dst, p.epoch, p.seq, p.ack, p.sack, 0] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.extend_from_slice(p.payload);
    if checksum {
        let c = crc32(&[&out[start..]]);
        out[start + 32..start + 36].copy_from_slice(&c.to_le_bytes());
    }
}

/// Parse one datagram, checking every field that can be checked without state.
pub fn decode(d: &[u8]) -> Result<Packet<'_>, WireError> {
    if d.len() < HEADER_BYTES {
        return Err(WireError::Short(d.len()));
    }
    if d[0..2] != MAGIC {
        return Err(WireError::Magic);
    }
    if d[2] != VERSION {
        return Err(WireError::Version(d[2]));
    }
    let kind = match d[3] {
        1 => Kind::Data,
        2 => Kind::Ack,
        3 => Kind::Nack,
        4 => Kind::Frag,
        k => return Err(WireError::Kind(k)),
    };
    if d[4] & !FLAG_CHECKSUM != 0 {
        return Err(WireError::Flags(d[4]));
    }
    if d[5] != 0 {
        return Err(WireError::Reserved);
    }
    let said = u16::from_le_bytes([d[6], d[7]]) as usize;
    let payload = &d[HEADER_BYTES..];
    if said != payload.len() {
        return Err(WireError::Length {
            said,
            got: payload.len(),
        });
    }
    if matches!(kind, Kind::Ack | Kind::Nack) && !payload.is_empty() {
        return Err(WireError::PayloadOnControl);
    }
    let u32_at = |i: usize| u32::from_le_bytes([d[i], d[i + 1], d[i + 2], d[i + 3]]);
    if d[4] & FLAG_CHECKSUM != 0 {
        let want = u32_at(32);
        let got = crc32(&[&d[..32], &[0; 4], payload]);
        if want != got {
            return Err(WireError::Checksum);
        }
    } else if u32_at(32) != 0 {
        return Err(WireError::Checksum);
    }
    if kind == Kind::Frag {
        let (offset, total, piece) = fragment_fields(u32_at(24), u32_at(28));
        let end = offset + payload.len();
        let fits = piece > 0
            && !payload.is_empty()
            && offset % piece == 0
            && payload.len() <= piece
            && end <= total
            && (payload.len() == piece || end == total)
            && total <= MAX_PACKET_PAYLOAD;
        if !fits {
            return Err(WireError::Fragment);
        }
    }
    Ok(Packet {
        kind,
        src: u32_at(8),
        dst: u32_at(12),
        epoch: u32_at(16),
        seq: u32_at(20),
        ack: u32_at(24),
        sack: u32_at(28),
        payload,
    })
}

/// A FRAG's offset, whole payload length and piece size, from its `ack` and `sack`.
pub fn fragment_fields(ack: u32, sack: u32) -> (usize, usize, usize) {
    (
        ack as usize,
        (sack & 0xffff) as usize,
        (sack >> 16) as usize,
    )
}

/// Encode DATA packet `p` into `out` (cleared first): one packet if its header and
/// payload fit `max_datagram` bytes, else a train of FRAG packets of at most
/// `max_datagram` bytes each (see the module doc). Returns the size of each datagram of a
/// train (the last may be shorter), or 0 for a single packet.
pub fn encode_train(
    p: &Packet<'_>,
    checksum: bool,
    max_datagram: usize,
    out: &mut Vec<u8>,
) -> Result<usize, WireError> {
    if HEADER_BYTES + p.payload.len() <= max_datagram || p.kind != Kind::Data {
        encode(p, checksum, out)?;
        return Ok(0);
    }
    if p.payload.len() > MAX_PACKET_PAYLOAD {
        return Err(WireError::TooLong(p.payload.len()));
    }
    let piece = max_datagram
        .saturating_sub(HEADER_BYTES)
        .clamp(64, u16::MAX as usize);
    out.clear();
    out.reserve(p.payload.len() + p.payload.len().div_ceil(piece) * HEADER_BYTES);
    for (k, chunk) in p.payload.chunks(piece).enumerate() {
        let f = Packet {
            kind: Kind::Frag,
            ack: (k * piece) as u32,
            sack: p.payload.len() as u32 | (piece as u32) << 16,
            payload: chunk,
            ..*p
        };
        append(&f, checksum, out);
    }
    Ok(HEADER_BYTES + piece)
}

/// The packets of a buffer holding one or more back to back (one datagram, or a train
/// coalesced by the receiver's GRO). A malformed packet ends the walk with its error.
pub fn packets(d: &[u8]) -> Packets<'_> {
    Packets { rest: d }
}

/// Iterator of [`packets`].
pub struct Packets<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Packets<'a> {
    type Item = Result<Packet<'a>, WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let d = self.rest;
        let end = if d.len() >= HEADER_BYTES {
            (HEADER_BYTES + u16::from_le_bytes([d[6], d[7]]) as usize).min(d.len())
        } else {
            d.len()
        };
        let r = decode(&d[..end]);
        self.rest = if r.is_ok() { &d[end..] } else { &[] };
        Some(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(payload: &[u8]) -> Packet<'_> {
        Packet {
            kind: Kind::Data,
            src: 3,
            dst: 7,
            epoch: 0xdead_beef,
            seq: 41,
            ack: 0,
            sack: 0,
            payload,
        }
    }

    #[test]
    fn crc32_check_value() {
        // The standard check value of CRC-32/ISO-HDLC.
        assert_eq!(crc32(&[b"123456789"]), 0xCBF4_3926);
        assert_eq!(crc32(&[b"1234", b"56789"]), 0xCBF4_3926);
        // Slicing by 8 agrees with the bitwise definition on every length and split.
        let data: Vec<u8> = (0..200u32).map(|i| (i * 37 + 11) as u8).collect();
        let bitwise = |d: &[u8]| {
            let mut c = !0u32;
            for &b in d {
                c ^= b as u32;
                for _ in 0..8 {
                    c = if c & 1 != 0 {
                        0xEDB8_8320 ^ (c >> 1)
                    } else {
                        c >> 1
                    };
                }
            }
            !c
        };
        for n in 0..data.len() {
            assert_eq!(crc32(&[&data[..n]]), bitwise(&data[..n]), "{n}");
            assert_eq!(
                crc32(&[&data[..n / 3], &data[n / 3..n]]),
                bitwise(&data[..n])
            );
        }
    }

    #[test]
    fn round_trip_with_and_without_checksum() {
        let mut buf = Vec::new();
        for ck in [false, true] {
            encode(&data(b"hello"), ck, &mut buf).unwrap();
            assert_eq!(buf.len(), HEADER_BYTES + 5);
            assert_eq!(decode(&buf).unwrap(), data(b"hello"));
        }
    }

    #[test]
    fn trains_of_fragments() {
        let payload: Vec<u8> = (0..5000u32).map(|i| (i * 7) as u8).collect();
        let mut train = Vec::new();
        // Fits: one plain packet.
        assert_eq!(
            encode_train(&data(&payload[..100]), true, 1472, &mut train),
            Ok(0)
        );
        assert_eq!(decode(&train).unwrap(), data(&payload[..100]));
        // Too large: pieces of 1472 - 36 bytes, each a checked packet, back to back.
        let stride = encode_train(&data(&payload), true, 1472, &mut train).unwrap();
        assert_eq!(stride, 1472);
        let got: Vec<_> = packets(&train).map(Result::unwrap).collect();
        assert_eq!(got.len(), 4);
        let mut whole = Vec::new();
        for (k, f) in got.iter().enumerate() {
            assert_eq!((f.kind, f.seq, f.src), (Kind::Frag, 41, 3));
            let (offset, total, piece) = fragment_fields(f.ack, f.sack);
            assert_eq!((offset, total, piece), (k * 1436, 5000, 1436));
            whole.extend_from_slice(f.payload);
        }
        assert_eq!(whole, payload);
        assert_eq!(train.len(), 4 * HEADER_BYTES + 5000);
        // A corrupted piece ends the walk with its error.
        train[stride + HEADER_BYTES + 3] ^= 1;
        let r: Vec<_> = packets(&train).collect();
        assert_eq!(r.len(), 2);
        assert_eq!(r[1], Err(WireError::Checksum));
        // Pieces that do not fit their packet are refused.
        let mut one = Vec::new();
        for (ack, sack, len) in [
            (1, 5000 | 1436 << 16, 1436),   // offset not a multiple of the piece
            (0, 5000 | 1436 << 16, 1000),   // short piece that is not the last
            (4308, 5000 | 1436 << 16, 700), // beyond the total
            (0, 5000, 10),                  // piece size zero
            (0, 1436 << 16 | 65535, 1436),  // total beyond the largest payload
        ] {
            let f = Packet {
                kind: Kind::Frag,
                ack,
                sack,
                ..data(&payload[..len])
            };
            encode(&f, false, &mut one).unwrap();
            assert_eq!(
                decode(&one),
                Err(WireError::Fragment),
                "{ack} {sack:#x} {len}"
            );
        }
        // A train of control packets and data: the walk finds each.
        let mut two = Vec::new();
        encode(&data(b"ab"), false, &mut one).unwrap();
        two.extend_from_slice(&one);
        two.extend_from_slice(&one);
        assert_eq!(packets(&two).filter(|p| p.is_ok()).count(), 2);
        assert_eq!(packets(&two[..40]).nth(1), Some(Err(WireError::Short(2))));
    }

    #[test]
    fn byte_vector() {
        let mut buf = Vec::new();
        let ack = Packet {
            kind: Kind::Ack,
            src: 1,
            dst: 2,
            epoch: 3,
            seq: 0,
            ack: 0x0102_0304,
            sack: 0x8000_0001,
            payload: &[],
        };
        encode(&ack, false, &mut buf).unwrap();
        let want: [u8; 36] = [
            b'P', b'M', 1, 2, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 4, 3, 2,
            1, 1, 0, 0, 0x80, 0, 0, 0, 0,
        ];
        assert_eq!(buf, want);
    }

    #[test]
    fn rejects_malformed() {
        let mut good = Vec::new();
        encode(&data(b"abc"), true, &mut good).unwrap();
        let bad = |f: &dyn Fn(&mut Vec<u8>)| {
            let mut b = good.clone();
            f(&mut b);
            decode(&b).unwrap_err()
        };
        assert_eq!(decode(&good[..10]).unwrap_err(), WireError::Short(10));
        assert_eq!(bad(&|b| b[0] = b'X'), WireError::Magic);
        assert_eq!(bad(&|b| b[2] = 9), WireError::Version(9));
        assert_eq!(bad(&|b| b[3] = 0), WireError::Kind(0));
        assert_eq!(bad(&|b| b[4] = 6), WireError::Flags(6));
        assert_eq!(bad(&|b| b[5] = 1), WireError::Reserved);
        assert!(matches!(
            bad(&|b| {
                b.pop();
            }),
            WireError::Length { said: 3, got: 2 }
        ));
        assert_eq!(bad(&|b| b[HEADER_BYTES] ^= 1), WireError::Checksum);
        assert_eq!(bad(&|b| b[20] ^= 0x10), WireError::Checksum);
        // A control packet carries no payload.
        let mut ack = Vec::new();
        let mut p = data(&[]);
        p.kind = Kind::Ack;
        encode(&p, false, &mut ack).unwrap();
        assert!(decode(&ack).is_ok());
        ack[3] = 2;
        ack.push(0);
        ack[6] = 1;
        assert_eq!(decode(&ack).unwrap_err(), WireError::PayloadOnControl);
        // Without the checksum flag the field must be zero.
        let mut plain = Vec::new();
        encode(&data(b"x"), false, &mut plain).unwrap();
        plain[33] = 1;
        assert_eq!(decode(&plain).unwrap_err(), WireError::Checksum);
        let big = vec![0u8; MAX_PACKET_PAYLOAD + 1];
        assert!(encode(&data(&big), false, &mut plain).is_err());
    }
}
