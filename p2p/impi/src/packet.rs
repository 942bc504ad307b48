//! The host-to-host packet: a 128-byte big-endian header, then `pk_len` data bytes for the
//! two types that carry data (DATA, DATASYNC).
//!
//! Layout (IMPI report, chapter 3; every integer big-endian, no padding):
//!
//! | offset | field | type |
//! |---|---|---|
//! | 0 | pk_type | Uint4 |
//! | 4 | pk_len | Uint4 |
//! | 8 | pk_src | `{Uint1 hostid[16]; Int8 pid}` |
//! | 32 | pk_dest | same |
//! | 56 | pk_srqid | Uint8 |
//! | 64 | pk_drqid | Uint8 |
//! | 72 | pk_msglen | Uint8 |
//! | 80 | pk_lsrank | Int4 |
//! | 84 | pk_tag | Int4 |
//! | 88 | pk_cid | Uint8 |
//! | 96 | pk_seqnum | Uint8 |
//! | 104 | pk_count | Int8 |
//! | 112 | pk_dtype | Uint8 |
//! | 120 | pk_reserved | Uint8 |
//!
//! LAM/MPI puts 128 (the header size) into `pk_len` of SYNCACK, PROTOACK, CANCELNO and FINI
//! without sending any data: [`PacketType::carries_data`] decides whether data follows,
//! never `pk_len` alone.

use std::fmt;
use std::mem::MaybeUninit;

/// Size of the packet header on the wire.
pub const HEADER_LEN: usize = 128;

/// The eight packet types of IMPI version 0.0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum PacketType {
    /// Message data: a whole short message, or a later packet of a long one.
    Data = 0,
    /// Message data asking for a SYNCACK: a synchronous short message or the first packet
    /// of a long one.
    DataSync = 1,
    /// Flow control: the receiver got another `ackmark` packets of this proc pair.
    ProtoAck = 2,
    /// The receiver matched a DATASYNC; carries its request id for a long message.
    SyncAck = 3,
    /// The sender asks to cancel a message (by source and `pk_srqid`).
    Cancel = 4,
    /// Cancel succeeded: the message was not matched and is gone.
    CancelYes = 5,
    /// Cancel failed: the message was matched already, or is unknown.
    CancelNo = 6,
    /// The host is done with this connection.
    Fini = 7,
}

impl PacketType {
    /// The type for a wire value, `None` for values IMPI 0.0 does not define.
    pub fn from_wire(v: u32) -> Option<PacketType> {
        Some(match v {
            0 => PacketType::Data,
            1 => PacketType::DataSync,
            2 => PacketType::ProtoAck,
            3 => PacketType::SyncAck,
            4 => PacketType::Cancel,
            5 => PacketType::CancelYes,
            6 => PacketType::CancelNo,
            7 => PacketType::Fini,
            _ => return None,
        })
    }

    /// Whether `pk_len` data bytes follow the header on the wire.
    pub fn carries_data(self) -> bool {
        matches!(self, PacketType::Data | PacketType::DataSync)
    }

    /// Whether the packet counts for flow control (everything but PROTOACK and FINI).
    pub fn counts_for_flow_control(self) -> bool {
        !matches!(self, PacketType::ProtoAck | PacketType::Fini)
    }
}

/// An IMPI process identity: the host id (16 bytes, IPv6 sized) and a local process id.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ProcId {
    /// Host identifier; for IPv4 either bytes 12..16 with 0..12 zero (LAM) or an
    /// IPv4-mapped address `::ffff:a.b.c.d` (GridMPI).
    pub hostid: [u8; 16],
    /// Process id on that host.
    pub pid: i64,
}

impl ProcId {
    /// A proc on an IPv4 host, in LAM's form (address in bytes 12..16, the rest zero).
    pub fn ipv4(addr: std::net::Ipv4Addr, pid: i64) -> ProcId {
        let mut hostid = [0u8; 16];
        hostid[12..].copy_from_slice(&addr.octets());
        ProcId { hostid, pid }
    }

    /// The key two procs are compared by: the two IPv4 forms (zero-prefixed and
    /// IPv4-mapped) compare equal, so a peer using either form is recognised.
    pub fn canonical(&self) -> ProcId {
        let h = &self.hostid;
        let v4 =
            h[..10].iter().all(|&b| b == 0) && (h[10..12] == [0, 0] || h[10..12] == [0xff, 0xff]);
        if v4 {
            let mut hostid = [0u8; 16];
            hostid[12..].copy_from_slice(&h[12..]);
            ProcId {
                hostid,
                pid: self.pid,
            }
        } else {
            *self
        }
    }
}

impl fmt::Debug for ProcId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = self.canonical();
        if c.hostid[..12].iter().all(|&b| b == 0) {
            let a = &c.hostid[12..];
            write!(f, "{}.{}.{}.{}/{}", a[0], a[1], a[2], a[3], self.pid)
        } else {
            write!(f, "{}/{}", std::net::Ipv6Addr::from(self.hostid), self.pid)
        }
    }
}

/// A decoded packet header (all fields, host byte order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub pk_type: PacketType,
    pub pk_len: u32,
    pub pk_src: ProcId,
    pub pk_dest: ProcId,
    pub pk_srqid: u64,
    pub pk_drqid: u64,
    pub pk_msglen: u64,
    pub pk_lsrank: i32,
    pub pk_tag: i32,
    pub pk_cid: u64,
    pub pk_seqnum: u64,
    pub pk_count: i64,
    pub pk_dtype: u64,
    pub pk_reserved: u64,
}

/// Why bytes are not a valid packet header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PacketError {
    /// Fewer than [`HEADER_LEN`] bytes.
    Short(usize),
    /// `pk_type` is not one of IMPI 0.0's eight types.
    UnknownType(u32),
    /// A DATA/DATASYNC packet whose `pk_len` exceeds `pk_msglen`.
    LenExceedsMsglen { len: u32, msglen: u64 },
    /// A DATA/DATASYNC packet whose `pk_len` exceeds the negotiated data length.
    LenExceedsDatalen { len: u32, datalen: u32 },
}

impl fmt::Display for PacketError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PacketError::Short(n) => write!(f, "IMPI packet header: {n} bytes, need {HEADER_LEN}"),
            PacketError::UnknownType(t) => write!(f, "IMPI packet header: unknown pk_type {t}"),
            PacketError::LenExceedsMsglen { len, msglen } => {
                write!(
                    f,
                    "IMPI packet header: pk_len {len} exceeds pk_msglen {msglen}"
                )
            }
            PacketError::LenExceedsDatalen { len, datalen } => {
                write!(
                    f,
                    "IMPI packet header: pk_len {len} exceeds the job's DATALEN {datalen}"
                )
            }
        }
    }
}

impl std::error::Error for PacketError {}

fn be_u32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn be_u64(b: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn proc_at(b: &[u8], at: usize) -> ProcId {
    let mut hostid = [0u8; 16];
    hostid.copy_from_slice(&b[at..at + 16]);
    ProcId {
        hostid,
        pid: be_u64(b, at + 16) as i64,
    }
}

impl Header {
    /// A header of type `pk_type` with every other field zero.
    pub fn new(pk_type: PacketType) -> Header {
        Header {
            pk_type,
            pk_len: 0,
            pk_src: ProcId::default(),
            pk_dest: ProcId::default(),
            pk_srqid: 0,
            pk_drqid: 0,
            pk_msglen: 0,
            pk_lsrank: 0,
            pk_tag: 0,
            pk_cid: 0,
            pk_seqnum: 0,
            pk_count: 0,
            pk_dtype: 0,
            pk_reserved: 0,
        }
    }

    /// The 128 wire bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&(self.pk_type as u32).to_be_bytes());
        b[4..8].copy_from_slice(&self.pk_len.to_be_bytes());
        b[8..24].copy_from_slice(&self.pk_src.hostid);
        b[24..32].copy_from_slice(&self.pk_src.pid.to_be_bytes());
        b[32..48].copy_from_slice(&self.pk_dest.hostid);
        b[48..56].copy_from_slice(&self.pk_dest.pid.to_be_bytes());
        b[56..64].copy_from_slice(&self.pk_srqid.to_be_bytes());
        b[64..72].copy_from_slice(&self.pk_drqid.to_be_bytes());
        b[72..80].copy_from_slice(&self.pk_msglen.to_be_bytes());
        b[80..84].copy_from_slice(&self.pk_lsrank.to_be_bytes());
        b[84..88].copy_from_slice(&self.pk_tag.to_be_bytes());
        b[88..96].copy_from_slice(&self.pk_cid.to_be_bytes());
        b[96..104].copy_from_slice(&self.pk_seqnum.to_be_bytes());
        b[104..112].copy_from_slice(&self.pk_count.to_be_bytes());
        b[112..120].copy_from_slice(&self.pk_dtype.to_be_bytes());
        b[120..128].copy_from_slice(&self.pk_reserved.to_be_bytes());
        b
    }

    /// Decode the first [`HEADER_LEN`] bytes of `b`. Checks only what every conforming
    /// header satisfies: a known type and, for the data-carrying types, `pk_len <=
    /// pk_msglen`. The negotiated DATALEN is checked by [`Header::check_datalen`].
    pub fn decode(b: &[u8]) -> Result<Header, PacketError> {
        if b.len() < HEADER_LEN {
            return Err(PacketError::Short(b.len()));
        }
        let raw_type = be_u32(b, 0);
        let pk_type = PacketType::from_wire(raw_type).ok_or(PacketError::UnknownType(raw_type))?;
        let h = Header {
            pk_type,
            pk_len: be_u32(b, 4),
            pk_src: proc_at(b, 8),
            pk_dest: proc_at(b, 32),
            pk_srqid: be_u64(b, 56),
            pk_drqid: be_u64(b, 64),
            pk_msglen: be_u64(b, 72),
            pk_lsrank: be_u32(b, 80) as i32,
            pk_tag: be_u32(b, 84) as i32,
            pk_cid: be_u64(b, 88),
            pk_seqnum: be_u64(b, 96),
            pk_count: be_u64(b, 104) as i64,
            pk_dtype: be_u64(b, 112),
            pk_reserved: be_u64(b, 120),
        };
        if pk_type.carries_data() && u64::from(h.pk_len) > h.pk_msglen {
            return Err(PacketError::LenExceedsMsglen {
                len: h.pk_len,
                msglen: h.pk_msglen,
            });
        }
        Ok(h)
    }

    /// The number of data bytes that follow this header on the wire.
    pub fn data_len(&self) -> usize {
        if self.pk_type.carries_data() {
            self.pk_len as usize
        } else {
            0
        }
    }

    /// Reject data packets longer than the job's DATALEN.
    pub fn check_datalen(&self, datalen: u32) -> Result<(), PacketError> {
        if self.pk_type.carries_data() && self.pk_len > datalen {
            return Err(PacketError::LenExceedsDatalen {
                len: self.pk_len,
                datalen,
            });
        }
        Ok(())
    }
}

/// Bytes of the decoder's staging buffer: many small packets come in per read.
const STAGING: usize = 64 * 1024;
/// A packet with at least this many data bytes that is not yet whole in the staging buffer
/// gets a buffer of its own, and the rest of its data is read straight into it.
const DIRECT_MIN: usize = 4 * 1024;

/// Splits a byte stream into packets. Bytes come in either by [`PacketDecoder::push`] or by
/// reading straight into the decoder: [`PacketDecoder::read_buffers`] names where the next
/// bytes go (the rest of a large packet's data, then the staging buffer) and
/// [`PacketDecoder::filled`] says how many arrived. Whole packets are then taken with
/// [`PacketDecoder::next_packet`].
///
/// The data of a large packet lands in the `Vec` that [`PacketDecoder::next_packet`] returns
/// (no copy after the read); small packets are parsed out of one staging buffer. Memory is
/// bounded: the staging buffer, one packet's data (at most DATALEN) and the packets parsed
/// and not yet taken.
#[derive(Debug)]
pub struct PacketDecoder {
    staging: Vec<u8>,
    start: usize,
    end: usize,
    datalen: u32,
    /// A large packet whose data is being filled in place: its header, and its data as a
    /// `Vec` whose length is the bytes filled so far (capacity: the whole data).
    body: Option<(Header, Vec<u8>)>,
    /// The last packet was large: read only a header's worth into the staging buffer
    /// next, so that the following packet's data is read in place too rather than into
    /// the staging buffer (and copied out of it).
    streaming: bool,
    /// Whole packets not yet taken.
    ready: std::collections::VecDeque<(Header, Vec<u8>)>,
    ready_bytes: usize,
    /// The stream broke here (after the packets in `ready`).
    error: Option<PacketError>,
}

impl PacketDecoder {
    /// A decoder that rejects data packets longer than `datalen`.
    pub fn new(datalen: u32) -> PacketDecoder {
        PacketDecoder {
            staging: vec![0; STAGING],
            start: 0,
            end: 0,
            datalen,
            body: None,
            streaming: false,
            ready: std::collections::VecDeque::new(),
            ready_bytes: 0,
            error: None,
        }
    }

    /// Append received bytes.
    pub fn push(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() && self.error.is_none() {
            let (a, b) = self.read_buffers();
            let na = a.len().min(bytes.len());
            for (d, s) in a[..na].iter_mut().zip(&bytes[..na]) {
                d.write(*s);
            }
            let nb = b.len().min(bytes.len() - na);
            b[..nb].copy_from_slice(&bytes[na..na + nb]);
            self.filled(na + nb);
            bytes = &bytes[na + nb..];
        }
    }

    /// Where the next received bytes go, in order: the rest of the data of a large packet
    /// (uninitialised memory; empty if none is being filled), then free room in the
    /// staging buffer (only a header's worth while large packets stream in). Both are
    /// empty once the stream broke. Fill a prefix of their concatenation (the first part
    /// only with bytes written, e.g. by `readv`) and call [`PacketDecoder::filled`].
    pub fn read_buffers(&mut self) -> (&mut [MaybeUninit<u8>], &mut [u8]) {
        if self.error.is_some() {
            return (&mut [], &mut []);
        }
        let body: &mut [MaybeUninit<u8>] = match &mut self.body {
            Some((_, data)) => data.spare_capacity_mut(),
            None => &mut [],
        };
        let mut room = self.staging.len() - self.end;
        if self.streaming {
            room = room.min(HEADER_LEN.saturating_sub(self.end - self.start).max(1));
        }
        (body, &mut self.staging[self.end..self.end + room])
    }

    /// `n` bytes were written at the start of [`PacketDecoder::read_buffers`].
    pub fn filled(&mut self, mut n: usize) {
        if let Some((h, data)) = &mut self.body {
            let k = n.min(data.capacity() - data.len());
            // SAFETY: the caller wrote the first `n` bytes of `read_buffers`, whose first
            // part is this spare capacity: its first `k` bytes are initialised now.
            unsafe { data.set_len(data.len() + k) };
            n -= k;
            if data.len() == data.capacity() {
                let h = *h;
                let data = std::mem::take(data);
                self.body = None;
                self.ready_bytes += HEADER_LEN + data.len();
                self.ready.push_back((h, data));
            }
        }
        assert!(
            n <= self.staging.len() - self.end,
            "PacketDecoder::filled: more bytes than read_buffers offered"
        );
        self.end += n;
        self.parse();
    }

    /// Move whole packets out of the staging buffer; start the in-place fill of a large
    /// one; keep a partial small one at the front.
    fn parse(&mut self) {
        while self.error.is_none() && self.body.is_none() {
            let avail = &self.staging[self.start..self.end];
            if avail.len() < HEADER_LEN {
                break;
            }
            let h = match Header::decode(avail)
                .and_then(|h| h.check_datalen(self.datalen).map(|_| h))
            {
                Ok(h) => h,
                Err(e) => {
                    self.error = Some(e);
                    break;
                }
            };
            let n = h.data_len();
            let have = avail.len() - HEADER_LEN;
            if have >= n {
                let data = avail[HEADER_LEN..HEADER_LEN + n].to_vec();
                self.start += HEADER_LEN + n;
                self.ready_bytes += HEADER_LEN + n;
                self.ready.push_back((h, data));
                self.streaming = false;
            } else if n >= DIRECT_MIN {
                let mut data = Vec::with_capacity(n);
                data.extend_from_slice(&avail[HEADER_LEN..]);
                self.start = self.end;
                self.body = Some((h, data));
                self.streaming = true;
            } else {
                // A small packet in part: the next read may bring many of them.
                self.streaming = false;
                break;
            }
        }
        // Keep the free part of the staging buffer large: a partial packet left at the
        // front is at most a header and DIRECT_MIN bytes.
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.start > 0 && self.staging.len() - self.end < HEADER_LEN + DIRECT_MIN {
            self.staging.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
    }

    /// Bytes received but not yet returned as packets.
    pub fn buffered(&self) -> usize {
        self.end - self.start
            + self.body.as_ref().map_or(0, |(_, d)| HEADER_LEN + d.len())
            + self.ready_bytes
    }

    /// The next whole packet, `Ok(None)` if more bytes are needed. After an error the
    /// stream cannot be resynchronised; the connection must be dropped.
    pub fn next_packet(&mut self) -> Result<Option<(Header, Vec<u8>)>, PacketError> {
        if let Some(p) = self.ready.pop_front() {
            self.ready_bytes -= HEADER_LEN + p.1.len();
            return Ok(Some(p));
        }
        match &self.error {
            Some(e) => Err(e.clone()),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(t: PacketType, len: usize, fill: u8) -> (Header, Vec<u8>) {
        let mut h = Header::new(t);
        let data: Vec<u8> = if t.carries_data() {
            (0..len).map(|i| fill.wrapping_add(i as u8)).collect()
        } else {
            Vec::new()
        };
        h.pk_len = data.len() as u32;
        h.pk_msglen = data.len() as u64 + 7;
        (h, data)
    }

    fn stream() -> (Vec<(Header, Vec<u8>)>, Vec<u8>) {
        let ps = vec![
            packet(PacketType::Data, 10, 1),
            packet(PacketType::DataSync, 60000, 2),
            packet(PacketType::ProtoAck, 0, 0),
            packet(PacketType::Data, 65536, 3),
            packet(PacketType::Data, DIRECT_MIN, 4),
            packet(PacketType::Data, DIRECT_MIN - 1, 5),
            packet(PacketType::Data, 0, 6),
            packet(PacketType::Data, 70000, 7),
        ];
        let mut bytes = Vec::new();
        for (h, d) in &ps {
            bytes.extend_from_slice(&h.encode());
            bytes.extend_from_slice(d);
        }
        (ps, bytes)
    }

    fn take(dec: &mut PacketDecoder, got: &mut Vec<(Header, Vec<u8>)>) {
        while let Some(p) = dec.next_packet().unwrap() {
            got.push(p);
        }
    }

    /// Reads into `read_buffers` in uneven pieces (as `readv` would) give the same packets
    /// as one `push`; a large packet's data goes into its own buffer, and while large
    /// packets stream the staging part offered is at most a header.
    #[test]
    fn reads_in_place_give_the_packets_of_the_stream() {
        let (ps, bytes) = stream();
        for step in [1usize, 7, 128, 1000, 4096, 70001, usize::MAX] {
            let mut dec = PacketDecoder::new(70000);
            let mut got = Vec::new();
            let mut at = 0;
            let mut in_place = 0;
            while at < bytes.len() {
                let (body, staging) = dec.read_buffers();
                let n = step.min(bytes.len() - at).min(body.len() + staging.len());
                assert!(n > 0, "the decoder always offers room");
                let nb = n.min(body.len());
                for (d, s) in body[..nb].iter_mut().zip(&bytes[at..at + nb]) {
                    d.write(*s);
                }
                staging[..n - nb].copy_from_slice(&bytes[at + nb..at + n]);
                in_place += nb;
                at += n;
                dec.filled(n);
                take(&mut dec, &mut got);
            }
            assert_eq!(got, ps, "step {step}");
            assert_eq!(dec.buffered(), 0);
            if step >= 128 {
                assert!(
                    in_place > 60_000,
                    "step {step}: only {in_place} bytes in place"
                );
            }
        }
        let mut dec = PacketDecoder::new(70000);
        dec.push(&bytes);
        let mut got = Vec::new();
        take(&mut dec, &mut got);
        assert_eq!(got, ps);
    }

    #[test]
    fn staging_offers_a_header_while_large_packets_stream() {
        let (_, bytes) = stream();
        let mut dec = PacketDecoder::new(70000);
        // The first two packets' headers and the small one's data, then the large one's
        // header: its data is then offered in place, and the staging part is one header.
        let head = 2 * HEADER_LEN + 10;
        dec.push(&bytes[..head]);
        let (body, staging) = dec.read_buffers();
        assert_eq!(body.len(), 60000);
        assert_eq!(staging.len(), HEADER_LEN);
    }

    #[test]
    fn a_bad_header_after_good_packets_is_reported_after_them() {
        let (ps, mut bytes) = stream();
        bytes.extend_from_slice(&[0xff; HEADER_LEN]);
        let mut dec = PacketDecoder::new(70000);
        dec.push(&bytes);
        for p in &ps {
            assert_eq!(dec.next_packet().unwrap().as_ref(), Some(p));
        }
        assert!(matches!(
            dec.next_packet(),
            Err(PacketError::UnknownType(0xffff_ffff))
        ));
        let (a, b) = dec.read_buffers();
        assert!(
            a.is_empty() && b.is_empty(),
            "a broken stream takes no more bytes"
        );
    }
}
