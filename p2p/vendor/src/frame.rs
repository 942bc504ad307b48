//! The vendor messages of one Tsunagi message (sans-IO: bytes in, bytes out).
//!
//! As in GridMPI's vendor-MPI P2P layer (seed 002): the 32-byte [`Header`] and the first
//! part of the payload travel in one vendor message; a payload of at most the short limit
//! goes whole (tag [`TAG_WHOLE`]: `header | payload`); a longer one as a head (tag
//! [`TAG_HEAD`]: `header | total payload length, u64 LE | first short-limit bytes`) and then
//! the rest (tag [`TAG_REST`]: the remaining bytes, cut into vendor messages of at most the
//! head's payload length each, [`rest_chunk`]), which the receiver takes with receives
//! posted as soon as it has the head. The vendor keeps messages of one sender in order
//! among those a receive matches, so a head is always seen before its rest, the pieces of
//! a rest fill its receives in order, and per-peer order holds.

use tsunagi_p2p::{Header, HEADER_BYTES};

/// A whole message: header and payload.
pub const TAG_WHOLE: i32 = 1;
/// The head of a long message: header, total length, first part.
pub const TAG_HEAD: i32 = 2;
/// The rest of a long message.
pub const TAG_REST: i32 = 3;

/// A request for a peer's memory (single-copy rendezvous, [`get_request`]): the peer
/// sends the bytes asked for, from where they are, under [`TAG_GET_DATA`].
pub const TAG_GET: i32 = 4;
/// The bytes a [`TAG_GET`] asked for, in pieces of at most [`GET_PIECE`] bytes, taken by
/// receives the requester posted before it asked.
pub const TAG_GET_DATA: i32 = 5;
/// An empty message a process sends itself to end a blocking probe (no meaning beyond
/// that; the receiver drops it).
pub const TAG_WAKE: i32 = 6;

/// Whether messages under `tag` travel on the vendor's second communicator: those a
/// receive is posted for by source and tag before they are sent or asked for (a rest, a
/// read's data). Everything else (first messages, memory requests, wake-ups) is taken by
/// receives posted ahead from any source under any tag, which must never take these.
pub fn on_bulk(tag: i32) -> bool {
    tag == TAG_REST || tag == TAG_GET_DATA
}

/// Bytes of a [`TAG_GET`] message.
pub const GET_BYTES: usize = 16;
/// The largest piece of a get's data in one vendor message (vendor counts are C ints).
pub const GET_PIECE: usize = 1 << 30;

/// A [`TAG_GET`] message: `address u64 LE | length u64 LE` in the answering process.
pub fn get_request(addr: u64, len: u64) -> [u8; GET_BYTES] {
    let mut b = [0u8; GET_BYTES];
    b[..8].copy_from_slice(&addr.to_le_bytes());
    b[8..].copy_from_slice(&len.to_le_bytes());
    b
}

/// Decode a [`TAG_GET`] message: (address, length).
pub fn parse_get(bytes: &[u8]) -> Result<(u64, u64), String> {
    if bytes.len() != GET_BYTES {
        return Err(format!(
            "a memory request of {} bytes (expected {GET_BYTES})",
            bytes.len()
        ));
    }
    let addr = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
    let len = u64::from_le_bytes(bytes[8..].try_into().expect("8 bytes"));
    if len > isize::MAX as u64 || addr.checked_add(len).is_none() || (addr == 0 && len > 0) {
        return Err(format!(
            "a memory request for {len} bytes at {addr:#x} is not an address range"
        ));
    }
    Ok((addr, len))
}

/// The pieces of a get of `len` bytes, as (offset, length): the same on both ends.
pub fn get_pieces(len: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..len)
        .step_by(GET_PIECE)
        .map(move |at| (at, (len - at).min(GET_PIECE)))
}

/// Bytes of a head before its first part.
pub const HEAD_PREFIX: usize = HEADER_BYTES + 8;

/// The vendor messages for one Tsunagi message.
#[derive(Debug, PartialEq, Eq)]
pub struct Frames {
    /// The first vendor message and its tag.
    pub first: (i32, Vec<u8>),
    /// The rest of a long message (tag [`TAG_REST`]).
    pub rest: Option<Vec<u8>>,
}

/// Cut `payload` behind `hdr` into vendor messages, splitting after `short` payload bytes.
pub fn frame(hdr: &Header, payload: &[u8], short: usize) -> Frames {
    let (mut first, mut rest) = (Vec::new(), Vec::new());
    let tag = frame_into(hdr, payload, short, &mut first, &mut rest);
    Frames {
        first: (tag, first),
        rest: (tag == TAG_HEAD).then_some(rest),
    }
}

/// Pieces of one rest at most ([`rest_chunk`]).
pub const MAX_PIECES: usize = 16;

/// The payload bytes per vendor message of a `rest` that follows a head carrying `first`
/// payload bytes (the sender's short limit): `first` itself, so that a short limit below
/// the vendor's own eager limit keeps every piece of a message eager in the vendor (on
/// MPICH 4.0.2 over UCX a message above ~8 KiB costs the vendor a rendezvous handshake,
/// more than the extra pieces: `docs/vendor-mpi.md`, session 9), but larger where the
/// rest would take more than [`MAX_PIECES`] (a tiny short limit or a large eager limit:
/// each piece costs a vendor message and a request at both ends). Both ends compute it,
/// the receiver from the head it got (`first` is the sender's short limit, whatever the
/// receiver's own).
pub fn rest_chunk(first: usize, rest: usize) -> usize {
    first.max(rest.div_ceil(MAX_PIECES)).max(1)
}

/// [`frame`] into buffers the caller provides (cleared first; `rest` is left empty for a
/// whole message). Returns the first message's tag.
pub fn frame_into(
    hdr: &Header,
    payload: &[u8],
    short: usize,
    first: &mut Vec<u8>,
    rest: &mut Vec<u8>,
) -> i32 {
    rest.clear();
    let tag = first_into(hdr, payload, short, first);
    if tag == TAG_HEAD {
        rest.extend_from_slice(&payload[short..]);
    }
    tag
}

/// The first vendor message of [`frame`] alone into `first` (cleared first): the whole
/// message, or the head of a long one (whose rest, `payload[short..]`, the caller sends
/// in pieces of [`rest_chunk`]). Returns its tag.
pub fn first_into(hdr: &Header, payload: &[u8], short: usize, first: &mut Vec<u8>) -> i32 {
    first.clear();
    first.extend_from_slice(&hdr.to_bytes());
    if payload.len() <= short {
        first.extend_from_slice(payload);
        return TAG_WHOLE;
    }
    first.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    first.extend_from_slice(&payload[..short]);
    TAG_HEAD
}

/// A first vendor message, decoded.
#[derive(Debug, PartialEq, Eq)]
pub enum First<'a> {
    /// A whole message.
    Whole { hdr: Header, payload: &'a [u8] },
    /// The head of a long message of `total` payload bytes; `rest` = total - first.len()
    /// bytes follow under [`TAG_REST`].
    Head {
        hdr: Header,
        total: usize,
        first: &'a [u8],
    },
}

/// Decode a first vendor message (`tag`, `bytes`), rejecting malformed ones; `max_payload`
/// bounds the length a head may announce.
pub fn parse(tag: i32, bytes: &[u8], max_payload: usize) -> Result<First<'_>, String> {
    if bytes.len() < HEADER_BYTES {
        return Err(format!(
            "a vendor message of {} bytes is shorter than the {HEADER_BYTES}-byte header",
            bytes.len()
        ));
    }
    let hdr = Header::from_bytes(bytes[..HEADER_BYTES].try_into().expect("32 bytes"));
    match tag {
        TAG_WHOLE => Ok(First::Whole {
            hdr,
            payload: &bytes[HEADER_BYTES..],
        }),
        TAG_HEAD => {
            if bytes.len() < HEAD_PREFIX {
                return Err(format!(
                    "a message head of {} bytes lacks its length",
                    bytes.len()
                ));
            }
            let total = u64::from_le_bytes(bytes[HEADER_BYTES..HEAD_PREFIX].try_into().unwrap());
            let first = &bytes[HEAD_PREFIX..];
            if total > max_payload as u64 || total <= first.len() as u64 {
                return Err(format!(
                    "a message head announces {total} payload bytes with {} in the head (limit {max_payload})",
                    first.len()
                ));
            }
            Ok(First::Head {
                hdr,
                total: total as usize,
                first,
            })
        }
        TAG_REST => Err("the rest of a long message arrived without its head".into()),
        TAG_GET_DATA => Err("memory asked for arrived without a request".into()),
        other => Err(format!("a vendor message with unknown tag {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hdr() -> Header {
        Header {
            kind: 3,
            flags: 1,
            reserved: 0,
            src: 7,
            tag: -5,
            context: 9,
            len: 100,
            cookie: 0x1122_3344_5566_7788,
        }
    }

    #[test]
    fn short_message_is_one_vendor_message() {
        let p: Vec<u8> = (0..10).collect();
        let f = frame(&hdr(), &p, 10);
        assert_eq!(f.first.0, TAG_WHOLE);
        assert_eq!(f.first.1.len(), 42);
        assert_eq!(&f.first.1[..32], &hdr().to_bytes());
        assert_eq!(&f.first.1[32..], &p[..]);
        assert!(f.rest.is_none());
        assert_eq!(
            parse(TAG_WHOLE, &f.first.1, 1 << 20).unwrap(),
            First::Whole {
                hdr: hdr(),
                payload: &p
            }
        );
    }

    #[test]
    fn long_message_is_head_then_rest() {
        let p: Vec<u8> = (0..=255).cycle().take(1000).collect();
        let f = frame(&hdr(), &p, 100);
        assert_eq!(f.first.0, TAG_HEAD);
        assert_eq!(f.first.1.len(), HEAD_PREFIX + 100);
        assert_eq!(&f.first.1[32..40], &1000u64.to_le_bytes());
        assert_eq!(f.rest.as_deref(), Some(&p[100..]));
        match parse(TAG_HEAD, &f.first.1, 1 << 20).unwrap() {
            First::Head {
                hdr: h,
                total,
                first,
            } => {
                assert_eq!(h, hdr());
                assert_eq!(total, 1000);
                assert_eq!(first, &p[..100]);
            }
            other => panic!("{other:?}"),
        }
        // Zero short limit: the head carries no payload.
        let f = frame(&hdr(), &p, 0);
        assert_eq!(f.first.1.len(), HEAD_PREFIX);
        assert_eq!(f.rest.unwrap().len(), 1000);
    }

    #[test]
    fn a_rest_goes_in_pieces_of_the_head_and_at_most_max_pieces() {
        // Pieces of the short limit: each as small as the head's payload.
        assert_eq!(rest_chunk(8192, 24576), 8192);
        assert_eq!(rest_chunk(8192, 100), 8192);
        // A tiny short limit or a long rest: no more than MAX_PIECES pieces.
        assert_eq!(rest_chunk(100, 1 << 20), (1 << 20) / MAX_PIECES);
        assert_eq!(rest_chunk(0, 1000), 1000usize.div_ceil(MAX_PIECES));
        for (first, rest) in [(0, 1), (1, 1), (3, 1000), (100, 4900), (7, (1 << 20) + 1)] {
            let c = rest_chunk(first, rest);
            assert!(c >= 1 && rest.div_ceil(c) <= MAX_PIECES, "{first} {rest}");
        }
    }

    #[test]
    fn memory_requests_round_trip_and_bad_ones_are_rejected() {
        let b = get_request(0x7fff_1234_5000, 3 << 30);
        assert_eq!(&b[..8], &0x7fff_1234_5000u64.to_le_bytes());
        assert_eq!(parse_get(&b).unwrap(), (0x7fff_1234_5000, 3 << 30));
        assert!(parse_get(&b[..15]).is_err());
        assert!(parse_get(&get_request(u64::MAX - 4, 8)).is_err());
        assert!(parse_get(&get_request(0, 8)).is_err());
        assert_eq!(parse_get(&get_request(0, 0)).unwrap(), (0, 0));
        let pieces: Vec<_> = get_pieces(2 * GET_PIECE + 5).collect();
        assert_eq!(
            pieces,
            vec![(0, GET_PIECE), (GET_PIECE, GET_PIECE), (2 * GET_PIECE, 5)]
        );
        assert_eq!(get_pieces(0).count(), 0);
    }

    #[test]
    fn malformed_messages_are_rejected() {
        assert!(parse(TAG_WHOLE, &[0u8; 31], 100).is_err());
        assert!(parse(TAG_HEAD, &[0u8; 39], 100).is_err());
        let mut head = hdr().to_bytes().to_vec();
        // Announces more than the limit.
        head.extend_from_slice(&1_000_000u64.to_le_bytes());
        assert!(parse(TAG_HEAD, &head, 1000)
            .unwrap_err()
            .contains("1000000"));
        // Announces no more than the head holds.
        let mut head = hdr().to_bytes().to_vec();
        head.extend_from_slice(&2u64.to_le_bytes());
        head.extend_from_slice(&[1, 2]);
        assert!(parse(TAG_HEAD, &head, 1000).is_err());
        assert!(parse(TAG_REST, &[0u8; 40], 100).is_err());
        assert!(parse(99, &[0u8; 40], 100).unwrap_err().contains("99"));
    }
}
