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

/// Splits a byte stream into packets: feed bytes with [`PacketDecoder::push`], take whole
/// packets with [`PacketDecoder::next_packet`]. Data of a packet is returned only once
/// complete, so memory per packet is bounded by DATALEN.
#[derive(Debug)]
pub struct PacketDecoder {
    buf: Vec<u8>,
    start: usize,
    datalen: u32,
}

impl PacketDecoder {
    /// A decoder that rejects data packets longer than `datalen`.
    pub fn new(datalen: u32) -> PacketDecoder {
        PacketDecoder {
            buf: Vec::new(),
            start: 0,
            datalen,
        }
    }

    /// Append received bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.start > 0 && self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes received but not yet returned as packets.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    /// The next whole packet, `Ok(None)` if more bytes are needed. After an error the
    /// stream cannot be resynchronised; the connection must be dropped.
    pub fn next_packet(&mut self) -> Result<Option<(Header, Vec<u8>)>, PacketError> {
        let avail = &self.buf[self.start..];
        if avail.len() < HEADER_LEN {
            self.compact();
            return Ok(None);
        }
        let h = Header::decode(avail)?;
        h.check_datalen(self.datalen)?;
        let n = h.data_len();
        if avail.len() < HEADER_LEN + n {
            self.compact();
            return Ok(None);
        }
        let data = avail[HEADER_LEN..HEADER_LEN + n].to_vec();
        self.start += HEADER_LEN + n;
        Ok(Some((h, data)))
    }

    fn compact(&mut self) {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
    }
}
