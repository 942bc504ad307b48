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
//! | 3      | kind: 1 DATA, 2 ACK, 3 NACK, 4 FRAG, 5 FNACK, 6 MOVE          |
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
//!
//! **Fragment NACKs.** A receiver missing pieces of a train asks for them by index with an
//! FNACK: `seq` is the DATA packet's, bytes 24..28 the index of the first piece the
//! request covers (`base`), bytes 28..32 a bitmap, bit i = piece `base + i` is missing. No
//! payload; the bitmap is never empty and no index lies beyond the most pieces a packet
//! can have ([`MAX_FRAGMENTS`]). The sender resends just those pieces, with the packet's
//! sequence number ([`encode_fragments`]).
//!
//! **Moves.** A rank restarted from a checkpoint image in a new process (new socket, new
//! epoch) announces its new address with a MOVE: `epoch` is the new epoch, `seq` the
//! restart's generation, bytes 24..28 the epoch the peers knew, bytes 28..32 zero; the
//! payload is the new card and a MAC under the job key ([`crate::restart`] checks it; this
//! decoder only checks that a payload of at least [`MOVE_MIN_PAYLOAD`] bytes is there).

use std::fmt;

/// Bytes of the packet header.
pub const HEADER_BYTES: usize = 36;
/// Wire format version.
pub const VERSION: u8 = 1;
/// Largest payload one packet may carry (fits a u16 length and one UDP datagram).
pub const MAX_PACKET_PAYLOAD: usize = 65_000;
/// Smallest piece of a train ([`encode_train`] never cuts finer).
pub const MIN_PIECE: usize = 64;
/// Most pieces one packet can be cut into: the bound on an FNACK's indices.
pub const MAX_FRAGMENTS: usize = MAX_PACKET_PAYLOAD.div_ceil(MIN_PIECE);
const MAGIC: [u8; 2] = *b"PM";
/// A MOVE's payload: at least one byte of card and the 32-byte MAC.
pub const MOVE_MIN_PAYLOAD: usize = 33;
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
    /// A request for missing pieces of a DATA packet, by index (see the module doc).
    FragNack = 5,
    /// A restarted rank's new address (see the module doc).
    Move = 6,
}

impl Kind {
    /// ACK, NACK and FNACK: no payload, sent on the acknowledgement path.
    pub fn is_control(self) -> bool {
        matches!(self, Kind::Ack | Kind::Nack | Kind::FragNack)
    }
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
    /// An FNACK asking for no piece, or for a piece no packet can have.
    FragNack,
    /// A MOVE without its card and MAC, or with the reserved field set.
    Move,
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
            WireError::PayloadOnControl => f.write_str("ACK/NACK/FNACK with a payload"),
            WireError::Checksum => f.write_str("checksum mismatch"),
            WireError::TooLong(n) => write!(f, "payload of {n} bytes is too long"),
            WireError::Fragment => f.write_str("fragment does not fit its packet"),
            WireError::FragNack => {
                f.write_str("fragment NACK asks for no piece or beyond the last")
            }
            WireError::Move => f.write_str("MOVE without card and MAC"),
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
        5 => Kind::FragNack,
        6 => Kind::Move,
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
    if kind.is_control() && !payload.is_empty() {
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
    if kind == Kind::FragNack {
        let (base, bits) = (u32_at(24) as usize, u32_at(28));
        if bits == 0 || base + (31 - bits.leading_zeros() as usize) >= MAX_FRAGMENTS {
            return Err(WireError::FragNack);
        }
    }
    if kind == Kind::Move && (payload.len() < MOVE_MIN_PAYLOAD || u32_at(28) != 0) {
        return Err(WireError::Move);
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
    let piece = piece_size(max_datagram);
    out.clear();
    out.reserve(p.payload.len() + p.payload.len().div_ceil(piece) * HEADER_BYTES);
    for k in 0..p.payload.len().div_ceil(piece) {
        append_fragment(p, checksum, piece, k, out);
    }
    Ok(HEADER_BYTES + piece)
}

/// The payload bytes of each piece (but the last) of a train of `max_datagram` datagrams.
pub fn piece_size(max_datagram: usize) -> usize {
    max_datagram
        .saturating_sub(HEADER_BYTES)
        .clamp(MIN_PIECE, u16::MAX as usize)
}

/// Pieces DATA packet `p` is cut into for datagrams of `max_datagram` bytes (1 when it
/// goes whole).
pub fn fragment_count(payload_len: usize, max_datagram: usize) -> usize {
    if HEADER_BYTES + payload_len <= max_datagram {
        1
    } else {
        payload_len.div_ceil(piece_size(max_datagram))
    }
}

/// Append piece `k` of DATA packet `p` as a FRAG packet.
fn append_fragment(p: &Packet<'_>, checksum: bool, piece: usize, k: usize, out: &mut Vec<u8>) {
    let end = ((k + 1) * piece).min(p.payload.len());
    let f = Packet {
        kind: Kind::Frag,
        ack: (k * piece) as u32,
        sack: p.payload.len() as u32 | (piece as u32) << 16,
        payload: &p.payload[k * piece..end],
        ..*p
    };
    append(&f, checksum, out);
}

/// Encode only pieces `indices` (ascending, each below [`fragment_count`]) of the train of
/// DATA packet `p` into `out` (cleared first): the answer to an FNACK. Same return as
/// [`encode_train`]: the datagram size of the train (only the last piece of the packet is
/// shorter, and ascending order puts it last, as UDP segmentation requires).
pub fn encode_fragments(
    p: &Packet<'_>,
    checksum: bool,
    max_datagram: usize,
    indices: impl IntoIterator<Item = usize>,
    out: &mut Vec<u8>,
) -> Result<usize, WireError> {
    if p.payload.len() > MAX_PACKET_PAYLOAD {
        return Err(WireError::TooLong(p.payload.len()));
    }
    out.clear();
    if fragment_count(p.payload.len(), max_datagram) == 1 || p.kind != Kind::Data {
        encode(p, checksum, out)?;
        return Ok(0);
    }
    let piece = piece_size(max_datagram);
    let count = p.payload.len().div_ceil(piece);
    let mut last = None;
    for k in indices {
        if k >= count || last.is_some_and(|l| k <= l) {
            return Err(WireError::Fragment);
        }
        last = Some(k);
        append_fragment(p, checksum, piece, k, out);
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
    fn fragment_nacks() {
        let nack = |base: u32, bits: u32| Packet {
            kind: Kind::FragNack,
            src: 1,
            dst: 2,
            epoch: 3,
            seq: 77,
            ack: base,
            sack: bits,
            payload: &[],
        };
        let mut buf = Vec::new();
        encode(&nack(32, 0b101), true, &mut buf).unwrap();
        assert_eq!(decode(&buf), Ok(nack(32, 0b101)));
        // The last index a packet can have, and one beyond it.
        let last = MAX_FRAGMENTS as u32 - 1;
        encode(&nack(last, 1), false, &mut buf).unwrap();
        assert!(decode(&buf).is_ok());
        for (base, bits) in [
            (0, 0),
            (last + 1, 1),
            (last, 2),
            (last - 30, 1 << 31),
            (u32::MAX, 1),
        ] {
            encode(&nack(base, bits), false, &mut buf).unwrap();
            assert_eq!(decode(&buf), Err(WireError::FragNack), "{base} {bits:#x}");
        }
        // No payload on an FNACK.
        encode(&nack(0, 1), false, &mut buf).unwrap();
        buf[6] = 1;
        buf.push(0);
        assert_eq!(decode(&buf), Err(WireError::PayloadOnControl));
        // Answering one: only the pieces asked for, ascending, as a train whose last
        // datagram may be short; indices beyond the packet or out of order are refused.
        let payload: Vec<u8> = (0..5000u32).map(|i| (i * 7) as u8).collect();
        assert_eq!(fragment_count(5000, 1472), 4);
        assert_eq!(fragment_count(100, 1472), 1);
        let stride = encode_fragments(&data(&payload), true, 1472, [1, 3], &mut buf).unwrap();
        assert_eq!(stride, 1472);
        let got: Vec<_> = packets(&buf).map(Result::unwrap).collect();
        assert_eq!(got.len(), 2);
        assert_eq!(fragment_fields(got[0].ack, got[0].sack), (1436, 5000, 1436));
        assert_eq!(got[0].payload, &payload[1436..2872]);
        assert_eq!(fragment_fields(got[1].ack, got[1].sack), (4308, 5000, 1436));
        assert_eq!(got[1].payload, &payload[4308..]);
        assert_eq!(got[1].seq, 41);
        for bad in [&[4][..], &[2, 1], &[1, 1]] {
            assert_eq!(
                encode_fragments(&data(&payload), true, 1472, bad.iter().copied(), &mut buf),
                Err(WireError::Fragment)
            );
        }
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
