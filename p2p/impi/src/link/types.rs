//! The link's vocabulary: configuration, the proc table, requests, events and errors.

use std::fmt;

use crate::fasthash::FastMap;
use crate::packet::{PacketError, ProcId};

/// The negotiated per-job parameters a link needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkConfig {
    /// Most data bytes per packet (the minimum of every client's C_DATALEN).
    pub datalen: u32,
    /// Acknowledge every `ackmark` packets (minimum of H_ACKMARK).
    pub ackmark: u32,
    /// At most `hiwater` unacknowledged packets per proc pair (minimum of H_HIWATER).
    pub hiwater: u32,
}

impl LinkConfig {
    /// Check `datalen >= 1` and `1 <= ackmark <= hiwater`.
    pub fn validate(&self) -> Result<(), LinkError> {
        if self.datalen == 0 {
            return Err(LinkError::Usage(
                "LinkConfig: datalen must be at least 1".into(),
            ));
        }
        if self.ackmark == 0 || self.ackmark > self.hiwater {
            return Err(LinkError::Usage(format!(
                "LinkConfig: need 1 <= ackmark ({}) <= hiwater ({})",
                self.ackmark, self.hiwater
            )));
        }
        Ok(())
    }
}

impl Default for LinkConfig {
    /// GridMPI's and LAM's defaults: 65536 bytes, ackmark 10, hiwater 20.
    fn default() -> LinkConfig {
        LinkConfig {
            datalen: 65536,
            ackmark: 10,
            hiwater: 20,
        }
    }
}

/// Every proc of the job: global rank → IMPI proc id, and back.
#[derive(Debug)]
pub struct ProcTable {
    procs: Vec<ProcId>,
    index: FastMap<ProcId, u32>,
}

impl ProcTable {
    /// The table for procs in global-rank order; two procs with the same id are an error.
    pub fn new(procs: Vec<ProcId>) -> Result<ProcTable, LinkError> {
        let mut index = FastMap::with_capacity_and_hasher(procs.len(), Default::default());
        for (r, p) in procs.iter().enumerate() {
            if index.insert(p.canonical(), r as u32).is_some() {
                return Err(LinkError::Usage(format!(
                    "ProcTable: proc {p:?} appears twice"
                )));
            }
        }
        Ok(ProcTable { procs, index })
    }

    /// Number of procs.
    pub fn len(&self) -> usize {
        self.procs.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.procs.is_empty()
    }

    /// The id of global rank `rank`.
    pub fn proc(&self, rank: u32) -> Option<ProcId> {
        self.procs.get(rank as usize).copied()
    }

    /// The global rank of a proc id (either IPv4 form of the host id matches).
    pub fn rank_of(&self, p: &ProcId) -> Option<u32> {
        self.index.get(&p.canonical()).copied()
    }
}

/// Identifies a send; it is the `pk_srqid` of the message on the wire.
pub type SendId = u64;
/// Identifies an arrived message; for long messages it is our `pk_drqid`.
pub type ArrivalId = u64;

/// A message to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendRequest {
    /// Sending proc (global rank, must be on this link's local host).
    pub src: u32,
    /// Receiving proc (global rank, must be on the peer host).
    pub dst: u32,
    /// Source rank in the communicator (`pk_lsrank`; LAM puts the world rank here).
    pub lsrank: i32,
    /// Tag.
    pub tag: i32,
    /// Context id.
    pub cid: u64,
    /// Synchronous mode: complete only once the receiver matched.
    pub sync: bool,
    /// The message in its wire representation (external32).
    pub data: Vec<u8>,
}

/// A message whose first packet arrived.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Arrival {
    /// Id to [`Link::accept`](super::Link::accept) it with.
    pub id: ArrivalId,
    /// Sender (global rank).
    pub src: u32,
    /// Receiver (global rank).
    pub dst: u32,
    /// `pk_lsrank` as sent.
    pub lsrank: i32,
    /// Tag.
    pub tag: i32,
    /// Context id.
    pub cid: u64,
    /// Whole message length.
    pub msglen: u64,
    /// Whether the sender waits for the match (a synchronous send or a long message).
    pub sync: bool,
    /// The first packet's data: the whole message when `complete`.
    pub data: Vec<u8>,
    /// Whether `data` is the whole message (else the rest comes as [`Event::Data`] after
    /// [`Link::accept`](super::Link::accept)).
    pub complete: bool,
}

/// What happened on the link.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A message's first packet arrived (probe sees it from now on).
    Arrived(Arrival),
    /// More of an accepted long message: `data` belongs at byte `offset`.
    Data {
        id: ArrivalId,
        offset: u64,
        data: Vec<u8>,
    },
    /// The last byte of an accepted long message arrived.
    Received { id: ArrivalId },
    /// The sender cancelled this message before it matched; it is gone.
    ArrivalCancelled { id: ArrivalId },
    /// The send is complete (buffer semantics: the link owns a copy of the data).
    SendComplete { id: SendId },
    /// The answer to a [`Link::cancel`](super::Link::cancel) that returned [`CancelStatus::Pending`].
    CancelResult { id: SendId, cancelled: bool },
    /// The peer host sent FINI.
    PeerFinished,
}

/// The immediate answer of [`Link::cancel`](super::Link::cancel).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CancelStatus {
    /// Cancelled locally (nothing had been sent); no event follows.
    Cancelled,
    /// Too late (matched, complete or unknown); no event follows.
    NotCancelled,
    /// CANCEL went to the receiver; [`Event::CancelResult`] follows.
    Pending,
}

/// Errors: a peer breaking the protocol (the connection is dead), or a wrong call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LinkError {
    /// The byte stream is not IMPI packets.
    Packet(PacketError),
    /// The packets break the protocol.
    Protocol(String),
    /// A call with wrong arguments or at the wrong time; the link is unchanged.
    Usage(String),
}

impl fmt::Display for LinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LinkError::Packet(e) => write!(f, "{e}"),
            LinkError::Protocol(s) => write!(f, "IMPI protocol error: {s}"),
            LinkError::Usage(s) => write!(f, "{s}"),
        }
    }
}

impl std::error::Error for LinkError {}

impl From<PacketError> for LinkError {
    fn from(e: PacketError) -> LinkError {
        LinkError::Packet(e)
    }
}
