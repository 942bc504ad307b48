//! PM's message layer on the software NIC: a [`PmEndpoint`] per process, a state machine
//! without I/O (datagrams and time in, datagrams and messages out).
//!
//! # Messages through rings written by PUSH (PM/RHiNET, seed 001)
//!
//! Every receiver registers one ring per sender (region `1 + sender`). The sender alone
//! keeps the ring's head and a *cached* tail: it writes each message — record header, the
//! body, a trailer — with PUSH work requests at its head and advances the head; only when
//! the cached tail says the ring is full does it PULL the receiver's real tail (one word per
//! sender in the receiver's control region 0), so in steady state no tail traffic flows.
//! The receiver polls the record header at its tail, then the trailer (written last: the
//! record is complete when the trailer carries the record's sequence number), hands the
//! body out, and on release zeroes the record and advances its tail word. Records are
//! [`ALIGN`]-byte aligned (Martini used 2 KiB slots; a cache line wastes less of a ring in
//! software) and never wrap: a wrap record sends the receiver back to offset 0.
//!
//! # The shared receive queue (ASQP/SRQP, seed 000)
//!
//! With [`ReceiveMode::Shared`], no rings: senders use SEND work requests and the receiving
//! NIC places each message into the next free buffer of one pool for all senders, so
//! receive memory does not grow with the number of peers. A SEND that finds the pool empty
//! is not taken from its link (the link drops it unacknowledged and it comes again: the
//! receiver-not-ready retry).
//!
//! # Remote memory access
//!
//! [`PmEndpoint::register`] makes a region; [`PmEndpoint::push`] and [`PmEndpoint::pull`]
//! write and read a peer's region by key. The pin-down cache
//! ([`PmEndpoint::register_cached`]) reuses a registration for the same buffer.
//!
//! Rendezvous by RDMA read into the user's buffer: the sender registers its send buffer
//! in place and grants the receiver the right to read it ([`PmEndpoint::expose`], through
//! the pin-down cache of user buffers); the receiver registers its receive buffer
//! ([`PmEndpoint::register_local`]) and PULLs into it in work-request-sized pieces, many
//! in flight ([`PmEndpoint::pull_into`]); each reply lands in the receive buffer where it
//! belongs. Then it INVALIDATEs the sender's region ([`PmEndpoint::invalidate`]): on the
//! same ordered link, the sender's NIC ends the grant before any later message (the FIN)
//! reaches the sender, so a buffer is never read after its send completed.
//!
//! # Checkpoint (seed 000)
//!
//! [`PmEndpoint::quiesce`] stops new sends (pmSendStable waits until
//! [`PmEndpoint::is_stable`]); [`PmEndpoint::save_context`] takes every queue context at
//! once (sequence state, ring pointers, registered memory); [`PmEndpoint::restore_context`]
//! puts them into a fresh endpoint; [`PmEndpoint::resume`] lets sends go again
//! (pmControlSend).

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::time::Instant;

use crate::nic::{Access, Regions, UserMem, Wr, WR_OVERHEAD};
use crate::reliable::{Link, LinkConfig, LinkContext, LinkStats};
use crate::wire::{self, MAX_PACKET_PAYLOAD};

/// A world rank.
pub type Rank = u32;

/// The largest PULL: its reply (10 bytes of work request in front) fills one packet.
pub const MAX_PULL_PIECE: usize = 60 << 10;
const _: () = assert!(MAX_PULL_PIECE + 10 <= MAX_PACKET_PAYLOAD);

/// Ring records start at multiples of this many bytes.
pub const ALIGN: usize = 64;
/// Record header: total bytes u32, sequence u32, body bytes u32 (`u32::MAX`: wrap), zero.
const REC_HEAD: usize = 16;
const TRAILER: usize = 8;
const TRAILER_MAGIC: u64 = 0x504d_5452_0000_0000;
const WRAP: u32 = u32::MAX;
/// Region key of the control region (one tail word per sender).
pub const CONTROL_REGION: u32 = 0;
/// Region key of the shared receive pool (never remotely addressable).
const POOL_REGION: u32 = 1;

/// The ring region for messages from `sender`.
pub fn ring_region(sender: Rank) -> u32 {
    1 + sender
}

/// How messages are received.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReceiveMode {
    /// One ring of this many bytes per sender, written by PUSH.
    Rings { ring_bytes: usize },
    /// One pool of `buffers` buffers of `buffer_bytes` each for all senders (SEND).
    Shared { buffers: usize, buffer_bytes: usize },
}

/// Tunables of an endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PmConfig {
    pub link: LinkConfig,
    pub receive: ReceiveMode,
    /// Data bytes per work request (one packet each).
    pub wr_data: usize,
    /// Bytes one PULL of a rendezvous read asks for ([`PmEndpoint::pull_into`]; one reply
    /// packet each, so at most [`MAX_PULL_PIECE`]).
    pub rdma_piece: usize,
    /// Frames queued per link, at most, before a send says "no room".
    pub max_queued: usize,
}

impl Default for PmConfig {
    fn default() -> PmConfig {
        PmConfig {
            link: LinkConfig::default(),
            receive: ReceiveMode::Rings {
                ring_bytes: 512 << 10,
            },
            wr_data: 8192,
            rdma_piece: MAX_PULL_PIECE,
            max_queued: 256,
        }
    }
}

impl PmConfig {
    /// The largest message body (32-byte header plus payload) a send may carry.
    pub fn max_message(&self) -> usize {
        match self.receive {
            // A quarter ring, so that a full ring always drains into room for one.
            ReceiveMode::Rings { ring_bytes } => ring_bytes / 4 - REC_HEAD - TRAILER - ALIGN,
            ReceiveMode::Shared { buffer_bytes, .. } => buffer_bytes.min(self.wr_data),
        }
    }
}

/// What went wrong at an endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PmError {
    /// No acknowledgement from the peer for the link's give-up time.
    PeerFailed(Rank),
    /// The peer sent something that breaks the protocol (a bad record, a bad access).
    Protocol(Rank, String),
    /// The caller misused the API.
    Usage(String),
}

impl fmt::Display for PmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PmError::PeerFailed(r) => write!(f, "rank {r} stopped acknowledging"),
            PmError::Protocol(r, why) => write!(f, "protocol error from rank {r}: {why}"),
            PmError::Usage(s) => f.write_str(s),
        }
    }
}

/// Counters of an endpoint.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PmStats {
    pub messages_sent: u64,
    pub messages_received: u64,
    pub tail_pulls: u64,
    pub ring_full: u64,
    pub malformed_datagrams: u64,
    pub stray_datagrams: u64,
    pub pool_full: u64,
    pub pin_hits: u64,
    pub pin_misses: u64,
    /// PULL work requests served from user buffers (RDMA rendezvous, sender side).
    pub rdma_pulls_served: u64,
    /// Bytes pulled into user buffers (RDMA rendezvous, receiver side).
    pub rdma_bytes_pulled: u64,
    /// ... of which placed as their pieces arrived, without a copy through the link.
    pub rdma_bytes_placed: u64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct TxRing {
    head: u64,
    tail: u64,
    seq: u32,
    pulling: bool,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct RxRing {
    tail: u64,
    seq: u32,
}

struct Peer {
    link: Link,
    epoch: u32,
    tx: TxRing,
    rx: RxRing,
    dirty: bool,
    failed: bool,
}

enum Pull {
    Tail(Rank),
    User(Option<Result<Vec<u8>, String>>),
    /// A PULL into local region `key` at `offset` of `len` bytes; `done` once answered.
    Into {
        peer: Rank,
        key: u32,
        offset: u64,
        len: usize,
        done: Option<Result<(), String>>,
        /// Its reply's data went straight into the region as it arrived
        /// ([`PullPlacement`]): the delivered reply carries none.
        placed: bool,
    },
    /// A PULL whose asker gave up: its reply is dropped.
    Abandoned(Rank),
}

/// User buffers kept registered in the pin-down cache without a grant, at most; older
/// ungranted entries are dropped beyond it.
const USER_PIN_LIMIT: usize = 64;

/// A message handed out by [`PmEndpoint::receive`], valid until [`PmEndpoint::release`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Received {
    pub peer: Rank,
    region: u32,
    start: usize,
    len: usize,
    /// Ring bytes of the record (rings) or the pool buffer index (shared queue).
    total: usize,
}

struct Srq {
    free: VecDeque<usize>,
    done: VecDeque<Received>,
    buffer_bytes: usize,
}

/// The saved queue contexts of an endpoint (see [`PmEndpoint::save_context`]).
#[derive(Clone, Debug)]
pub struct PmContext {
    me: Rank,
    peers: Vec<Option<(u32, LinkContext, TxRing, RxRing)>>,
    regions: Vec<(u32, Vec<u8>, Access)>,
    /// User buffers registered in place, with their grants (valid in this process only).
    user: Vec<(u32, UserMem, Vec<u32>)>,
}

const CONTEXT_MAGIC: &[u8; 8] = b"PMCTX01\0";

impl PmContext {
    /// The context as bytes (an image file's content; little-endian, see
    /// [`PmContext::decode`]). User buffers are recorded by address: an image restores
    /// into the process that saved it.
    pub fn encode(&self) -> Vec<u8> {
        let mut o = Vec::new();
        let u32s = |o: &mut Vec<u8>, v: u32| o.extend_from_slice(&v.to_le_bytes());
        let u64s = |o: &mut Vec<u8>, v: u64| o.extend_from_slice(&v.to_le_bytes());
        o.extend_from_slice(CONTEXT_MAGIC);
        u32s(&mut o, self.me);
        u32s(&mut o, self.peers.len() as u32);
        for p in &self.peers {
            let Some((epoch, link, tx, rx)) = p else {
                o.push(0);
                continue;
            };
            o.push(1);
            u32s(&mut o, *epoch);
            u32s(&mut o, link.next_seq);
            u32s(&mut o, link.expected);
            u32s(&mut o, link.early.len() as u32);
            for (d, f) in &link.early {
                u32s(&mut o, *d);
                u32s(&mut o, f.len() as u32);
                o.extend_from_slice(f);
            }
            u64s(&mut o, tx.head);
            u64s(&mut o, tx.tail);
            u32s(&mut o, tx.seq);
            o.push(tx.pulling as u8);
            u64s(&mut o, rx.tail);
            u32s(&mut o, rx.seq);
        }
        u32s(&mut o, self.regions.len() as u32);
        for (k, mem, a) in &self.regions {
            u32s(&mut o, *k);
            o.push(a.remote_write as u8 | (a.remote_read as u8) << 1);
            u64s(&mut o, mem.len() as u64);
            o.extend_from_slice(mem);
        }
        u32s(&mut o, self.user.len() as u32);
        for (k, m, readers) in &self.user {
            u32s(&mut o, *k);
            u64s(&mut o, m.ptr as u64);
            u64s(&mut o, m.len as u64);
            u32s(&mut o, readers.len() as u32);
            for &r in readers {
                u32s(&mut o, r);
            }
        }
        o
    }

    /// Parse [`PmContext::encode`]'s bytes; malformed input is refused, never a panic.
    pub fn decode(b: &[u8]) -> Result<PmContext, String> {
        struct Cur<'a>(&'a [u8], usize);
        impl<'a> Cur<'a> {
            fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
                let end = self.1.checked_add(n).filter(|&e| e <= self.0.len());
                let end = end.ok_or_else(|| format!("PM context truncated at byte {}", self.1))?;
                let s = &self.0[self.1..end];
                self.1 = end;
                Ok(s)
            }
            fn u8(&mut self) -> Result<u8, String> {
                Ok(self.take(1)?[0])
            }
            fn u32(&mut self) -> Result<u32, String> {
                Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
            }
            fn u64(&mut self) -> Result<u64, String> {
                Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
            }
            fn len(&mut self) -> Result<usize, String> {
                let n = self.u64()?;
                usize::try_from(n)
                    .ok()
                    .filter(|&n| n <= self.0.len() - self.1)
                    .ok_or_else(|| format!("PM context: length {n} beyond its end"))
            }
        }
        let mut c = Cur(b, 0);
        if c.take(8)? != CONTEXT_MAGIC {
            return Err("not a PM context image".into());
        }
        let me = c.u32()?;
        let n = c.u32()? as usize;
        if n > b.len() {
            return Err(format!("PM context: {n} peers in {} bytes", b.len()));
        }
        let mut peers = Vec::with_capacity(n);
        for _ in 0..n {
            match c.u8()? {
                0 => peers.push(None),
                1 => {
                    let epoch = c.u32()?;
                    let next_seq = c.u32()?;
                    let expected = c.u32()?;
                    let k = c.u32()? as usize;
                    let mut early = Vec::new();
                    for _ in 0..k.min(1024) {
                        let d = c.u32()?;
                        let len = c.u32()? as usize;
                        early.push((d, c.take(len)?.to_vec()));
                    }
                    if k > 1024 {
                        return Err("PM context: too many early frames".into());
                    }
                    let tx = TxRing {
                        head: c.u64()?,
                        tail: c.u64()?,
                        seq: c.u32()?,
                        pulling: c.u8()? != 0,
                    };
                    let rx = RxRing {
                        tail: c.u64()?,
                        seq: c.u32()?,
                    };
                    let link = LinkContext {
                        next_seq,
                        expected,
                        early,
                    };
                    peers.push(Some((epoch, link, tx, rx)));
                }
                t => return Err(format!("PM context: peer tag {t}")),
            }
        }
        let nr = c.u32()? as usize;
        let mut regions = Vec::new();
        for _ in 0..nr {
            let k = c.u32()?;
            let a = c.u8()?;
            if a > 3 {
                return Err(format!("PM context: access bits {a}"));
            }
            let len = c.len()?;
            let access = Access {
                remote_write: a & 1 != 0,
                remote_read: a & 2 != 0,
            };
            regions.push((k, c.take(len)?.to_vec(), access));
        }
        let nu = c.u32()? as usize;
        let mut user = Vec::new();
        for _ in 0..nu {
            let k = c.u32()?;
            let ptr = c.u64()? as usize as *mut u8;
            let len = c.u64()? as usize;
            let nreaders = c.u32()? as usize;
            if nreaders > n {
                return Err("PM context: more grants than peers".into());
            }
            let readers = (0..nreaders).map(|_| c.u32()).collect::<Result<_, _>>()?;
            user.push((k, UserMem { ptr, len }, readers));
        }
        if c.1 != b.len() {
            return Err("PM context: trailing bytes".into());
        }
        Ok(PmContext {
            me,
            peers,
            regions,
            user,
        })
    }

    /// Count the last frame received from `peer` as not received (its sequence number is
    /// expected again). A coordinated checkpoint uses it for a peer's "saved" marker that
    /// arrived before this rank saved: the marker was sent after the peer's image was
    /// taken, so this rank's image must not include it either.
    pub fn forget_last_from(&mut self, peer: Rank) {
        if let Some(Some((_, link, _, _))) = self.peers.get_mut(peer as usize) {
            link.expected = link.expected.wrapping_sub(1);
        }
    }

    /// The rank whose context this is.
    pub fn rank(&self) -> Rank {
        self.me
    }

    /// The job size the context was saved in.
    pub fn size(&self) -> usize {
        self.peers.len()
    }

    /// Leave out the user buffers registered in place, for an image another process
    /// restores (their addresses mean nothing there). Refused while a peer may still
    /// PULL one of them (a rendezvous in progress): that read would need the buffer.
    pub fn drop_user_buffers(&mut self) -> Result<(), String> {
        if let Some((k, _, r)) = self.user.iter().find(|(_, _, r)| !r.is_empty()) {
            return Err(format!(
                "user buffer (region {k}) exposed to rank {} for a rendezvous not finished",
                r[0]
            ));
        }
        self.user.clear();
        Ok(())
    }

    /// Whether the context holds user buffers (registered by address in its process).
    pub fn has_user_buffers(&self) -> bool {
        !self.user.is_empty()
    }
}

/// One process's PM: links, NIC regions, rings.
pub struct PmEndpoint {
    me: Rank,
    epoch: u32,
    cfg: PmConfig,
    peers: Vec<Option<Peer>>,
    regions: Regions,
    dirty: VecDeque<Rank>,
    srq: Option<Srq>,
    pulls: HashMap<u64, Pull>,
    next_tag: u64,
    staging: Vec<u8>,
    staged: Option<(Rank, usize)>,
    held: Option<Received>,
    rr: usize,
    errors: VecDeque<PmError>,
    stopped: bool,
    next_user_key: u32,
    pins: HashMap<(usize, usize), u32>,
    /// The pin-down cache of user buffers registered in place: (address, length) to key.
    user_pins: HashMap<(usize, usize), u32>,
    /// Checkpoint markers executed, oldest first: (from, checkpoint id, phase).
    markers: VecDeque<(Rank, u32, u8)>,
    stats: PmStats,
}

/// The receiving NIC's placement of PULL replies ([`crate::reliable::Placement`]): a
/// reply from `src` to a pending [`PmEndpoint::pull_into`] is written into the local region
/// it was asked for as its pieces arrive, instead of being reassembled in the link and
/// copied from there when executed. The reply's work request header (operation, tag,
/// status: [`PULL_REPLY_HEAD`] bytes) is in its first piece, so pieces that come before it
/// are kept by the link and placed when it comes.
struct PullPlacement<'a> {
    src: Rank,
    regions: &'a mut Regions,
    pulls: &'a mut HashMap<u64, Pull>,
    stats: &'a mut PmStats,
}

/// Bytes of a PULL reply's work request before its data.
const PULL_REPLY_HEAD: usize = 10;

impl crate::reliable::Placement for PullPlacement<'_> {
    fn place(
        &mut self,
        _seq: u32,
        head: &[u8],
        total: usize,
        offset: usize,
        data: &[u8],
    ) -> Option<usize> {
        // A successful PULL reply: operation 3, tag, status 0.
        if head.len() < PULL_REPLY_HEAD || head[0] != 3 || head[9] != 0 {
            return None;
        }
        let tag = u64::from_le_bytes(head[1..9].try_into().unwrap());
        let Some(Pull::Into {
            peer,
            key,
            offset: at,
            len,
            done: None,
            placed,
        }) = self.pulls.get_mut(&tag)
        else {
            return None;
        };
        if *peer != self.src || total != PULL_REPLY_HEAD + *len {
            return None;
        }
        // The data part of `data`, at its place in the destination.
        let skip = PULL_REPLY_HEAD.saturating_sub(offset).min(data.len());
        let dst = *at + (offset + skip - PULL_REPLY_HEAD) as u64;
        // Bounds are checked against the registration; the pull's registration contract
        // (`register_local`) keeps the buffer valid while the pull is pending.
        self.regions.local_write(*key, dst, &data[skip..]).ok()?;
        self.stats.rdma_bytes_placed += (data.len() - skip) as u64;
        *placed = true;
        Some(PULL_REPLY_HEAD)
    }
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes(b[i..i + 4].try_into().unwrap())
}

impl PmEndpoint {
    /// The endpoint of rank `me` in a job of `size` ranks; its packets carry `epoch`.
    pub fn new(me: Rank, size: usize, epoch: u32, cfg: PmConfig) -> PmEndpoint {
        assert!(cfg.wr_data >= ALIGN && cfg.wr_data + WR_OVERHEAD <= MAX_PACKET_PAYLOAD);
        let mut regions = Regions::default();
        let ro = Access {
            remote_write: false,
            remote_read: true,
        };
        regions.register(Some(CONTROL_REGION), 8 * size, ro);
        let srq = match cfg.receive {
            ReceiveMode::Rings { ring_bytes } => {
                assert!(ring_bytes % ALIGN == 0 && ring_bytes >= 16 * ALIGN);
                None
            }
            ReceiveMode::Shared {
                buffers,
                buffer_bytes,
            } => {
                let local = Access {
                    remote_write: false,
                    remote_read: false,
                };
                regions.register(Some(POOL_REGION), buffers * buffer_bytes, local);
                Some(Srq {
                    free: (0..buffers).collect(),
                    done: VecDeque::new(),
                    buffer_bytes,
                })
            }
        };
        PmEndpoint {
            me,
            epoch,
            cfg,
            peers: (0..size).map(|_| None).collect(),
            regions,
            dirty: VecDeque::new(),
            srq,
            pulls: HashMap::new(),
            next_tag: 1,
            staging: Vec::new(),
            staged: None,
            held: None,
            rr: 0,
            errors: VecDeque::new(),
            stopped: false,
            next_user_key: size as u32 + 2,
            pins: HashMap::new(),
            user_pins: HashMap::new(),
            markers: VecDeque::new(),
            stats: PmStats::default(),
        }
    }

    pub fn me(&self) -> Rank {
        self.me
    }

    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    pub fn config(&self) -> &PmConfig {
        &self.cfg
    }

    pub fn stats(&self) -> PmStats {
        self.stats
    }

    /// The link counters summed over every peer.
    pub fn link_stats(&self) -> LinkStats {
        let mut t = LinkStats::default();
        for p in self.peers.iter().flatten() {
            t += p.link.stats();
        }
        t
    }

    /// Bytes of registered receive memory (rings or pool, control region).
    pub fn receive_memory(&self) -> usize {
        self.regions.bytes()
    }

    /// Make `rank` (whose packets carry `epoch`) a peer.
    pub fn add_peer(&mut self, rank: Rank, epoch: u32) {
        self.insert_peer(rank, epoch);
        if let ReceiveMode::Rings { ring_bytes } = self.cfg.receive {
            let w = Access {
                remote_write: true,
                remote_read: false,
            };
            self.regions
                .register(Some(ring_region(rank)), ring_bytes, w);
        }
    }

    fn insert_peer(&mut self, rank: Rank, epoch: u32) {
        assert!(rank != self.me && (rank as usize) < self.peers.len());
        let mut link_cfg = self.cfg.link;
        if self.srq.is_some() {
            // The pool is the receive buffer: a link holds few frames it cannot place.
            link_cfg.rx_limit = 4;
        }
        self.peers[rank as usize] = Some(Peer {
            link: Link::new(self.me, rank, self.epoch, link_cfg),
            epoch,
            tx: TxRing::default(),
            rx: RxRing::default(),
            dirty: false,
            failed: false,
        });
    }

    fn peer(&mut self, rank: Rank) -> Result<&mut Peer, PmError> {
        let me = self.me;
        match self.peers.get_mut(rank as usize).and_then(Option::as_mut) {
            Some(p) if p.failed => Err(PmError::PeerFailed(rank)),
            Some(p) => Ok(p),
            None => Err(PmError::Usage(format!("pm: rank {me} has no peer {rank}"))),
        }
    }

    fn wr_to(&mut self, peer: Rank, wr: Wr<'_>, urgent: bool) {
        // Encoded straight into the frame the link keeps (one copy of the data).
        let mut f = Vec::with_capacity(wr.encoded_len());
        wr.encode(&mut f);
        let link = &mut self.peers[peer as usize].as_mut().unwrap().link;
        if urgent {
            link.push_urgent(f);
        } else {
            link.push(f);
        }
    }

    /// PM's "get send buffer": room for a message body of `len` bytes to `peer`, or
    /// `Ok(None)` when there is none yet (the ring is full, the link's queue is long, or
    /// sends are quiesced); write the body there and call [`PmEndpoint::send`].
    pub fn get_send_buffer(
        &mut self,
        peer: Rank,
        len: usize,
    ) -> Result<Option<&mut [u8]>, PmError> {
        let max = self.cfg.max_message();
        if len > max {
            return Err(PmError::Usage(format!(
                "pm: message of {len} bytes exceeds the largest, {max}"
            )));
        }
        let (max_queued, stopped, receive) = (self.cfg.max_queued, self.stopped, self.cfg.receive);
        let p = self.peer(peer)?;
        if stopped || p.link.queued() >= max_queued {
            return Ok(None);
        }
        if let ReceiveMode::Rings { ring_bytes } = receive {
            let total = (REC_HEAD + len + TRAILER).next_multiple_of(ALIGN) as u64;
            let ring = ring_bytes as u64;
            let at = p.tx.head % ring;
            let skip = if at + total > ring { ring - at } else { 0 };
            let used = p.tx.head + skip + total - p.tx.tail;
            let full = used > ring;
            // Refresh the cached tail lazily (PM): when the ring is out of room, and
            // already when it is past half full, so that the fresh tail is back before
            // the ring runs out (a sender streaming more than a ring's worth otherwise
            // stops for a round trip every ring). One refresh at a time.
            let pull = used > ring / 2 && !p.tx.pulling;
            p.tx.pulling |= pull;
            if full {
                self.stats.ring_full += 1;
            }
            if pull {
                let tag = self.next_tag;
                self.next_tag += 1;
                self.pulls.insert(tag, Pull::Tail(peer));
                self.stats.tail_pulls += 1;
                let me = self.me;
                self.wr_to(
                    peer,
                    Wr::PullReq {
                        region: CONTROL_REGION,
                        offset: 8 * me as u64,
                        len: 8,
                        tag,
                    },
                    true,
                );
            }
            if full {
                return Ok(None);
            }
        }
        self.staging.clear();
        self.staging
            .resize((REC_HEAD + len + TRAILER).next_multiple_of(ALIGN), 0);
        self.staged = Some((peer, len));
        Ok(Some(&mut self.staging[REC_HEAD..REC_HEAD + len]))
    }

    /// PM's "send": the body written into the buffer of the last
    /// [`PmEndpoint::get_send_buffer`] goes to `peer`.
    pub fn send(&mut self, peer: Rank, len: usize) -> Result<(), PmError> {
        if self.staged != Some((peer, len)) {
            return Err(PmError::Usage(format!(
                "pm: send of {len} bytes to {peer} without its send buffer"
            )));
        }
        self.staged = None;
        let me = self.me;
        let wr_data = self.cfg.wr_data;
        let staging = std::mem::take(&mut self.staging);
        match self.cfg.receive {
            ReceiveMode::Shared { .. } => {
                self.wr_to(
                    peer,
                    Wr::Send {
                        data: &staging[REC_HEAD..REC_HEAD + len],
                    },
                    false,
                );
                self.staging = staging;
            }
            ReceiveMode::Rings { ring_bytes } => {
                let ring = ring_bytes as u64;
                let p = self.peers[peer as usize].as_mut().unwrap();
                let total = staging.len() as u64;
                let mut at = p.tx.head % ring;
                if at + total > ring {
                    let mut wrap = [0u8; REC_HEAD];
                    wrap[0..4].copy_from_slice(&((ring - at) as u32).to_le_bytes());
                    wrap[4..8].copy_from_slice(&p.tx.seq.to_le_bytes());
                    wrap[8..12].copy_from_slice(&WRAP.to_le_bytes());
                    p.tx.seq = p.tx.seq.wrapping_add(1);
                    p.tx.head += ring - at;
                    self.wr_to(
                        peer,
                        Wr::Push {
                            region: ring_region(me),
                            offset: at,
                            data: &wrap,
                        },
                        false,
                    );
                    at = 0;
                }
                let p = self.peers[peer as usize].as_mut().unwrap();
                let seq = p.tx.seq;
                p.tx.seq = seq.wrapping_add(1);
                p.tx.head += total;
                let mut rec = staging;
                rec[0..4].copy_from_slice(&(total as u32).to_le_bytes());
                rec[4..8].copy_from_slice(&seq.to_le_bytes());
                rec[8..12].copy_from_slice(&(len as u32).to_le_bytes());
                let t = rec.len() - TRAILER;
                rec[t..].copy_from_slice(&(TRAILER_MAGIC | seq as u64).to_le_bytes());
                // One PUSH of header, body and trailer, cut into work requests that fit a
                // packet; the trailer goes last.
                for (k, chunk) in rec.chunks(wr_data).enumerate() {
                    self.wr_to(
                        peer,
                        Wr::Push {
                            region: ring_region(me),
                            offset: at + (k * wr_data) as u64,
                            data: chunk,
                        },
                        false,
                    );
                }
                self.staging = rec;
            }
        }
        self.stats.messages_sent += 1;
        Ok(())
    }

    /// PM's "receive": the next complete message, its body readable with
    /// [`PmEndpoint::message`] until [`PmEndpoint::release`]. The same message comes back
    /// until it is released.
    pub fn receive(&mut self) -> Option<Received> {
        if let Some(h) = self.held {
            return Some(h);
        }
        let got = match self.cfg.receive {
            ReceiveMode::Shared { .. } => self.srq.as_mut().unwrap().done.pop_front(),
            ReceiveMode::Rings { ring_bytes } => self.scan_rings(ring_bytes),
        };
        self.held = got;
        got
    }

    fn scan_rings(&mut self, ring_bytes: usize) -> Option<Received> {
        while let Some(&peer) = self.dirty.front() {
            let region = ring_region(peer);
            let p = self.peers[peer as usize].as_mut().unwrap();
            let mem = self.regions.local(region);
            let at = (p.rx.tail % ring_bytes as u64) as usize;
            let total = u32_at(mem, at) as usize;
            let seq = u32_at(mem, at + 4);
            let body = u32_at(mem, at + 8);
            let bad = if total == 0 {
                None
            } else if seq != p.rx.seq
                || !total.is_multiple_of(ALIGN)
                || total > ring_bytes - at
                || (body != WRAP && REC_HEAD + body as usize + TRAILER > total)
            {
                Some(format!("bad ring record at {at}: {total} bytes, seq {seq}"))
            } else if body == WRAP {
                let mem = self.regions.local_mut(region);
                mem[at..at + REC_HEAD].fill(0);
                p.rx.tail += total as u64;
                p.rx.seq = p.rx.seq.wrapping_add(1);
                continue;
            } else {
                let t = at + total - TRAILER;
                let trailer = u64::from_le_bytes(mem[t..t + 8].try_into().unwrap());
                if trailer == TRAILER_MAGIC | seq as u64 {
                    self.stats.messages_received += 1;
                    return Some(Received {
                        peer,
                        region,
                        start: at + REC_HEAD,
                        len: body as usize,
                        total,
                    });
                }
                None
            };
            if let Some(why) = bad {
                self.errors.push_back(PmError::Protocol(peer, why));
                p.failed = true;
            }
            // Empty or incomplete: the next PUSH to this ring marks it again.
            p.dirty = false;
            self.dirty.pop_front();
        }
        None
    }

    /// The body of a received message.
    pub fn message(&self, r: &Received) -> &[u8] {
        &self.regions.local(r.region)[r.start..r.start + r.len]
    }

    /// PM's "release": the receive buffer of the held message is free again.
    pub fn release(&mut self) {
        let Some(r) = self.held.take() else { return };
        match self.srq.as_mut() {
            Some(srq) => srq.free.push_back(r.total),
            None => {
                let at = r.start - REC_HEAD;
                self.regions.local_mut(r.region)[at..at + r.total].fill(0);
                let p = self.peers[r.peer as usize].as_mut().unwrap();
                p.rx.tail += r.total as u64;
                p.rx.seq = p.rx.seq.wrapping_add(1);
                let tail = p.rx.tail;
                let off = 8 * r.peer as usize;
                self.regions.local_mut(CONTROL_REGION)[off..off + 8]
                    .copy_from_slice(&tail.to_le_bytes());
            }
        }
        // Other peers' messages may wait: let the sink serve them in turn.
        if self.srq.is_none() {
            if let Some(p) = self.dirty.pop_front() {
                self.dirty.push_back(p);
            }
        }
    }

    /// Feed one datagram that arrived at time `now` (one packet, or a train of them that
    /// the receiver's GRO coalesced: see [`wire::packets`]).
    pub fn handle_datagram(&mut self, now: Instant, d: &[u8]) {
        if d.is_empty() {
            self.stats.malformed_datagrams += 1;
        }
        for pkt in wire::packets(d) {
            match pkt {
                Ok(pkt) => self.handle_packet(now, &pkt),
                Err(_) => self.stats.malformed_datagrams += 1,
            }
        }
    }

    fn handle_packet(&mut self, now: Instant, pkt: &wire::Packet<'_>) {
        let src = pkt.src;
        let ok = pkt.dst == self.me
            && matches!(
                self.peers.get(src as usize),
                Some(Some(p)) if p.epoch == pkt.epoch && !p.failed
            );
        if !ok {
            self.stats.stray_datagrams += 1;
            return;
        }
        // PULL replies go straight into the buffers they were asked for.
        let mut placement = PullPlacement {
            src,
            regions: &mut self.regions,
            pulls: &mut self.pulls,
            stats: &mut self.stats,
        };
        self.peers[src as usize]
            .as_mut()
            .unwrap()
            .link
            .on_packet_placing(now, pkt, &mut placement);
        self.execute(src);
    }

    /// Execute the work requests that arrived in order from `src`.
    fn execute(&mut self, src: Rank) {
        loop {
            let p = self.peers[src as usize].as_mut().unwrap();
            let Some(f) = p.link.peek_delivered() else {
                return;
            };
            let wr = match Wr::decode(f) {
                Ok(wr) => wr,
                Err(e) => {
                    self.errors.push_back(PmError::Protocol(src, e.to_string()));
                    p.failed = true;
                    return;
                }
            };
            if let Wr::Send { data } = wr {
                let Some(srq) = self.srq.as_mut() else {
                    self.errors
                        .push_back(PmError::Protocol(src, "SEND without a shared queue".into()));
                    p.failed = true;
                    return;
                };
                if data.len() > srq.buffer_bytes {
                    self.errors
                        .push_back(PmError::Protocol(src, "SEND larger than a buffer".into()));
                    p.failed = true;
                    return;
                }
                let Some(b) = srq.free.pop_front() else {
                    // Receiver not ready: leave it on the link.
                    self.stats.pool_full += 1;
                    return;
                };
                let start = b * srq.buffer_bytes;
                let len = data.len();
                self.regions.local_mut(POOL_REGION)[start..start + len].copy_from_slice(data);
                srq.done.push_back(Received {
                    peer: src,
                    region: POOL_REGION,
                    start,
                    len,
                    total: b,
                });
                self.stats.messages_received += 1;
                p.link.pop_delivered();
                continue;
            }
            let f = p.link.pop_delivered().unwrap();
            match Wr::decode(&f).unwrap() {
                Wr::Push {
                    region,
                    offset,
                    data,
                } => {
                    let rings = 1..=self.peers.len() as u32;
                    if rings.contains(&region) && region != ring_region(src) {
                        // Each sender writes its own ring only (the NIC's protection).
                        let why = format!("PUSH into another sender's ring {region}");
                        self.errors.push_back(PmError::Protocol(src, why));
                        continue;
                    }
                    match self.regions.remote_write(region, offset, data) {
                        Ok(()) if region == ring_region(src) => {
                            let w = self.peers[src as usize].as_mut().unwrap();
                            if !w.dirty {
                                w.dirty = true;
                                self.dirty.push_back(src);
                            }
                        }
                        Ok(()) => {}
                        Err(e) => self.errors.push_back(PmError::Protocol(src, e.0)),
                    }
                }
                Wr::PullReq {
                    region,
                    offset,
                    len,
                    tag,
                } => {
                    let read = self.regions.remote_read(region, offset, len as usize, src);
                    let resp = match read {
                        Ok(d) if d.len() + 10 <= MAX_PACKET_PAYLOAD => {
                            if region >= self.peers.len() as u32 + 2 {
                                self.stats.rdma_pulls_served += 1;
                            }
                            let mut f = Vec::with_capacity(10 + d.len());
                            Wr::PullResp {
                                tag,
                                ok: true,
                                data: d,
                            }
                            .encode(&mut f);
                            f
                        }
                        _ => {
                            let mut f = Vec::new();
                            Wr::PullResp {
                                tag,
                                ok: false,
                                data: &[],
                            }
                            .encode(&mut f);
                            f
                        }
                    };
                    let p = self.peers[src as usize].as_mut().unwrap();
                    p.link.push_urgent(resp);
                }
                Wr::PullResp { tag, ok, data } => match self.pulls.get_mut(&tag) {
                    Some(Pull::Tail(r)) if *r == src && ok && data.len() == 8 => {
                        let tail = u64::from_le_bytes(data.try_into().unwrap());
                        let p = self.peers[src as usize].as_mut().unwrap();
                        p.tx.tail = p.tx.tail.max(tail.min(p.tx.head));
                        p.tx.pulling = false;
                        self.pulls.remove(&tag);
                    }
                    Some(Pull::User(slot @ None)) => {
                        *slot = Some(if ok {
                            Ok(data.to_vec())
                        } else {
                            Err(format!("rank {src} refused the PULL"))
                        });
                    }
                    Some(Pull::Into {
                        peer,
                        key,
                        offset,
                        len,
                        done: done @ None,
                        placed,
                    }) if *peer == src => {
                        *done = Some(if !ok {
                            Err(format!("rank {src} refused the PULL"))
                        } else if *placed {
                            self.stats.rdma_bytes_pulled += *len as u64;
                            Ok(())
                        } else if data.len() != *len {
                            Err(format!("PULL of {len} bytes answered with {}", data.len()))
                        } else {
                            self.stats.rdma_bytes_pulled += *len as u64;
                            self.regions
                                .local_write(*key, *offset, data)
                                .map_err(|e| e.0)
                        });
                    }
                    Some(Pull::Abandoned(r)) if *r == src => {
                        self.pulls.remove(&tag);
                    }
                    _ => self.errors.push_back(PmError::Protocol(
                        src,
                        format!("unexpected PULL reply {tag}"),
                    )),
                },
                Wr::Invalidate { region } => {
                    // The reader is done: end its grant. One that was not granted (a
                    // duplicate cannot reach here: the link suppresses those) is the
                    // peer's bug, not ours to fail on.
                    if !self.regions.revoke(region, src) {
                        self.stats.stray_datagrams += 1;
                    }
                }
                Wr::Marker { id, phase } => self.markers.push_back((src, id, phase)),
                Wr::Send { .. } => unreachable!("handled above"),
            }
        }
    }

    /// Take more SENDs off the links once the pool has room again.
    fn refill_pool(&mut self) {
        if self.srq.as_ref().is_some_and(|s| !s.free.is_empty()) {
            for r in 0..self.peers.len() as Rank {
                if self.peers[r as usize].as_ref().is_some_and(|p| !p.failed) {
                    self.execute(r);
                }
            }
        }
    }

    /// Encode the next datagram to send into `out`; returns its destination, or `None`
    /// when nothing is due. Call until `None`.
    pub fn poll_transmit(&mut self, now: Instant, out: &mut Vec<u8>) -> Option<Rank> {
        self.refill_pool();
        let n = self.peers.len();
        for i in 0..n {
            let r = (self.rr + i) % n;
            let Some(p) = self.peers[r].as_mut() else {
                continue;
            };
            if p.failed {
                continue;
            }
            if p.link.poll_transmit(now, out) {
                self.rr = r;
                return Some(r as Rank);
            }
            if p.link.failed() {
                p.failed = true;
                self.errors.push_back(PmError::PeerFailed(r as Rank));
            }
        }
        self.rr = (self.rr + 1) % n.max(1);
        None
    }

    /// The datagram size of the train the last [`PmEndpoint::poll_transmit`] to `peer`
    /// encoded (the segment size for the kernel's UDP segmentation), or 0 for one packet.
    pub fn train(&self, peer: Rank) -> usize {
        self.peers
            .get(peer as usize)
            .and_then(Option::as_ref)
            .map_or(0, |p| p.link.train())
    }

    /// The next moment [`PmEndpoint::poll_transmit`] has work even without arrivals.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.peers
            .iter()
            .flatten()
            .filter(|p| !p.failed)
            .filter_map(|p| p.link.next_deadline())
            .min()
    }

    /// Take the next error (a failed peer, a protocol violation).
    pub fn take_error(&mut self) -> Option<PmError> {
        self.errors.pop_front()
    }

    /// Messages are complete in a ring or the pool (a poll would find work).
    pub fn has_received(&self) -> bool {
        self.held.is_some()
            || !self.dirty.is_empty()
            || self.srq.as_ref().is_some_and(|s| !s.done.is_empty())
    }

    // -------------------------------------------------------------------------------
    // Remote memory access.

    /// Register a region of `len` zeroed bytes; returns its key.
    pub fn register(&mut self, len: usize, access: Access) -> u32 {
        let k = self.next_user_key;
        self.next_user_key += 1;
        self.regions.register(Some(k), len, access)
    }

    /// The pin-down cache: the region registered for buffer (`addr`, `len`) before, or a
    /// new registration. Registrations are reused across messages to the same buffer.
    pub fn register_cached(&mut self, addr: usize, len: usize, access: Access) -> u32 {
        if let Some(&k) = self.pins.get(&(addr, len)) {
            self.stats.pin_hits += 1;
            return k;
        }
        self.stats.pin_misses += 1;
        let k = self.register(len, access);
        self.pins.insert((addr, len), k);
        k
    }

    /// Drop a region (and its pin-down cache entry).
    pub fn deregister(&mut self, key: u32) {
        self.pins.retain(|_, k| *k != key);
        self.regions.deregister(key);
    }

    /// A registered region's memory.
    pub fn region(&self, key: u32) -> &[u8] {
        self.regions.local(key)
    }

    /// A registered region's memory.
    pub fn region_mut(&mut self, key: u32) -> &mut [u8] {
        self.regions.local_mut(key)
    }

    /// PUSH `data` to `offset` in `peer`'s region `key`; `Ok(false)` when there is no room
    /// yet. Completion is reliable delivery: a later message to `peer` arrives after it.
    pub fn push(
        &mut self,
        peer: Rank,
        key: u32,
        offset: u64,
        data: &[u8],
    ) -> Result<bool, PmError> {
        let (max_queued, stopped, wr_data) = (self.cfg.max_queued, self.stopped, self.cfg.wr_data);
        let p = self.peer(peer)?;
        if stopped || p.link.queued() >= max_queued {
            return Ok(false);
        }
        for (k, chunk) in data.chunks(wr_data).enumerate() {
            self.wr_to(
                peer,
                Wr::Push {
                    region: key,
                    offset: offset + (k * wr_data) as u64,
                    data: chunk,
                },
                false,
            );
        }
        Ok(true)
    }

    /// PULL `len` bytes (at most one work request's data) from `offset` in `peer`'s
    /// region `key`; returns a tag for [`PmEndpoint::pull_result`], or `None` for no room.
    pub fn pull(
        &mut self,
        peer: Rank,
        key: u32,
        offset: u64,
        len: usize,
    ) -> Result<Option<u64>, PmError> {
        if len > self.cfg.wr_data {
            return Err(PmError::Usage(format!(
                "pm: PULL of {len} bytes exceeds {}",
                self.cfg.wr_data
            )));
        }
        let (max_queued, stopped) = (self.cfg.max_queued, self.stopped);
        let p = self.peer(peer)?;
        if stopped || p.link.queued() >= max_queued {
            return Ok(None);
        }
        let tag = self.next_tag;
        self.next_tag += 1;
        self.pulls.insert(tag, Pull::User(None));
        self.wr_to(
            peer,
            Wr::PullReq {
                region: key,
                offset,
                len: len as u32,
                tag,
            },
            false,
        );
        Ok(Some(tag))
    }

    /// The data of a finished PULL.
    pub fn pull_result(&mut self, tag: u64) -> Option<Result<Vec<u8>, String>> {
        match self.pulls.get_mut(&tag) {
            Some(Pull::User(r)) if r.is_some() => {
                let r = r.take();
                self.pulls.remove(&tag);
                r
            }
            _ => None,
        }
    }

    /// Register the user buffer `ptr..ptr + len` in place (pin-down cache: the same buffer
    /// keeps its key) and let `peer` PULL it until `peer` invalidates it. Returns the key.
    ///
    /// # Safety
    /// The buffer must stay valid and unmodified until `peer` has invalidated the grant
    /// (or has failed): the MPI contract of a send buffer during a rendezvous.
    pub unsafe fn expose(
        &mut self,
        peer: Rank,
        ptr: *const u8,
        len: usize,
    ) -> Result<u32, PmError> {
        self.peer(peer)?;
        // SAFETY: the caller's contract covers the grant below.
        let key = unsafe { self.pin_user(ptr as *mut u8, len) };
        self.regions.grant(key, peer);
        Ok(key)
    }

    /// Register the local buffer `ptr..ptr + len` in place (pin-down cache) as the
    /// destination of [`PmEndpoint::pull_into`]. Returns its key; no peer may access it.
    ///
    /// # Safety
    /// The buffer must be valid for writes and not otherwise accessed while PULLs into it
    /// are pending (until each is finished or abandoned).
    pub unsafe fn register_local(&mut self, ptr: *mut u8, len: usize) -> u32 {
        // SAFETY: the caller's contract.
        unsafe { self.pin_user(ptr, len) }
    }

    /// # Safety
    /// As [`PmEndpoint::expose`] for grants and [`PmEndpoint::register_local`] for writes.
    unsafe fn pin_user(&mut self, ptr: *mut u8, len: usize) -> u32 {
        if let Some(&k) = self.user_pins.get(&(ptr as usize, len)) {
            self.stats.pin_hits += 1;
            return k;
        }
        self.stats.pin_misses += 1;
        if self.user_pins.len() >= USER_PIN_LIMIT {
            // Drop cached registrations nobody may read (a pending local PULL destination
            // is in use only inside one read, which finishes before the next pin).
            let idle: Vec<_> = self
                .user_pins
                .iter()
                .filter(|(_, &k)| !self.regions.granted(k) && !self.pull_targets(k))
                .map(|(&a, &k)| (a, k))
                .collect();
            for (a, k) in idle {
                self.user_pins.remove(&a);
                self.regions.deregister(k);
            }
        }
        let k = self.next_user_key;
        self.next_user_key += 1;
        // SAFETY: the caller's contract is the registration's.
        unsafe { self.regions.register_user(Some(k), UserMem { ptr, len }) };
        self.user_pins.insert((ptr as usize, len), k);
        k
    }

    fn pull_targets(&self, key: u32) -> bool {
        self.pulls
            .values()
            .any(|p| matches!(p, Pull::Into { key: k, .. } if *k == key))
    }

    /// Registered user buffers in the pin-down cache.
    pub fn user_pins(&self) -> usize {
        self.user_pins.len()
    }

    /// Grants of user buffers not yet invalidated by their readers.
    pub fn open_grants(&self) -> usize {
        self.regions
            .user_regions()
            .iter()
            .map(|(_, _, readers)| readers.len())
            .sum()
    }

    /// PULL `len` bytes (at most one work request's data) from `offset` in `peer`'s region
    /// `key` into local region `local` at `local_offset`; returns a tag for
    /// [`PmEndpoint::pull_status`], or `None` for no room yet.
    pub fn pull_into(
        &mut self,
        peer: Rank,
        key: u32,
        offset: u64,
        local: u32,
        local_offset: u64,
        len: usize,
    ) -> Result<Option<u64>, PmError> {
        if len > self.cfg.rdma_piece.min(MAX_PULL_PIECE) {
            return Err(PmError::Usage(format!(
                "pm: PULL of {len} bytes exceeds {}",
                self.cfg.rdma_piece.min(MAX_PULL_PIECE)
            )));
        }
        let (max_queued, stopped) = (self.cfg.max_queued, self.stopped);
        let p = self.peer(peer)?;
        if stopped || p.link.queued() >= max_queued {
            return Ok(None);
        }
        let tag = self.next_tag;
        self.next_tag += 1;
        self.pulls.insert(
            tag,
            Pull::Into {
                peer,
                key: local,
                offset: local_offset,
                len,
                done: None,
                placed: false,
            },
        );
        self.wr_to(
            peer,
            Wr::PullReq {
                region: key,
                offset,
                len: len as u32,
                tag,
            },
            false,
        );
        Ok(Some(tag))
    }

    /// Whether a [`PmEndpoint::pull_into`] is finished: `Some(Ok)` once its data is in the
    /// local region (the tag is then forgotten), `Some(Err)` if the peer refused it.
    pub fn pull_status(&mut self, tag: u64) -> Option<Result<(), String>> {
        match self.pulls.get_mut(&tag) {
            Some(Pull::Into { done, .. }) if done.is_some() => {
                let r = done.take();
                self.pulls.remove(&tag);
                r
            }
            _ => None,
        }
    }

    /// Give up waiting for a [`PmEndpoint::pull_into`]: its reply, if it comes, is dropped
    /// without touching the local region.
    pub fn abandon_pull(&mut self, tag: u64) {
        if let Some(p) = self.pulls.get_mut(&tag) {
            match p {
                Pull::Into { done: Some(_), .. } => {
                    self.pulls.remove(&tag);
                }
                Pull::Into { peer, .. } => *p = Pull::Abandoned(*peer),
                _ => {}
            }
        }
    }

    /// Tell `peer` that we are done reading its region `key` (INVALIDATE): its NIC ends
    /// the grant before it executes anything we send later. Not held back by a quiesce or
    /// a long queue: it is what lets the peer's send complete.
    pub fn invalidate(&mut self, peer: Rank, key: u32) -> Result<(), PmError> {
        self.peer(peer)?;
        self.wr_to(peer, Wr::Invalidate { region: key }, false);
        Ok(())
    }

    // -------------------------------------------------------------------------------
    // Checkpoint.

    /// Stop new sends, pushes and pulls (they return "no room") until
    /// [`PmEndpoint::resume`].
    pub fn quiesce(&mut self) {
        self.stopped = true;
    }

    /// pmSendStable: nothing of ours is in flight or unacknowledged, no PULL is pending and
    /// every arrived work request was executed.
    pub fn is_stable(&self) -> bool {
        self.pulls.is_empty()
            && self.staged.is_none()
            && self
                .peers
                .iter()
                .flatten()
                .all(|p| p.link.is_stable() && p.link.peek_delivered().is_none())
    }

    /// pmSaveContext: every queue context at once — sequence numbers, ring pointers and
    /// the registered memory (rings with their unreceived messages). Only when stable.
    pub fn save_context(&self) -> Result<PmContext, PmError> {
        if !self.is_stable() || self.held.is_some() {
            return Err(PmError::Usage(
                "pm: save_context needs a quiesced, stable endpoint with no held message".into(),
            ));
        }
        if self.srq.is_some() {
            return Err(PmError::Usage(
                "pm: save_context supports the ring receive mode only".into(),
            ));
        }
        let mut regions = Vec::new();
        for k in 0..self.next_user_key {
            if let Some((mem, access)) = self.regions.snapshot(k) {
                regions.push((k, mem, access));
            }
        }
        Ok(PmContext {
            me: self.me,
            peers: self
                .peers
                .iter()
                .map(|p| p.as_ref().map(|p| (p.epoch, p.link.save(), p.tx, p.rx)))
                .collect(),
            regions,
            user: self.regions.user_regions(),
        })
    }

    /// pmRestoreContext: put a saved context into this endpoint (made with the same rank,
    /// size and configuration); it stays quiesced until [`PmEndpoint::resume`].
    pub fn restore_context(&mut self, ctx: &PmContext) -> Result<(), PmError> {
        if ctx.me != self.me || ctx.peers.len() != self.peers.len() {
            return Err(PmError::Usage("pm: context of another endpoint".into()));
        }
        self.check_context(ctx)
            .map_err(|why| PmError::Usage(format!("pm: context does not fit: {why}")))?;
        for (k, mem, access) in &ctx.regions {
            self.regions.deregister(*k);
            self.regions.register(Some(*k), mem.len(), *access);
            self.regions.local_mut(*k).copy_from_slice(mem);
        }
        self.user_pins.clear();
        for (k, mem, readers) in &ctx.user {
            self.regions.deregister(*k);
            // SAFETY: the same registration, in the same process, that the saved endpoint
            // held under the same contract (grants included).
            unsafe { self.regions.register_user(Some(*k), *mem) };
            for &r in readers {
                self.regions.grant(*k, r);
            }
            self.user_pins.insert((mem.ptr as usize, mem.len), *k);
        }
        self.dirty.clear();
        for (r, saved) in ctx.peers.iter().enumerate() {
            if let Some((epoch, link, tx, rx)) = saved {
                if self.peers[r].is_none() {
                    // Its ring came back with the regions above.
                    self.insert_peer(r as Rank, *epoch);
                }
                let p = self.peers[r].as_mut().unwrap();
                p.epoch = *epoch;
                p.link.restore(link.clone());
                p.tx = *tx;
                p.rx = *rx;
                // Messages may wait in the restored ring.
                p.dirty = true;
                self.dirty.push_back(r as Rank);
            }
        }
        self.next_user_key = self
            .next_user_key
            .max(ctx.regions.iter().map(|r| r.0 + 1).max().unwrap_or(0))
            .max(ctx.user.iter().map(|r| r.0 + 1).max().unwrap_or(0));
        self.stopped = true;
        Ok(())
    }

    /// What [`PmEndpoint::restore_context`] relies on in a context that came from a file:
    /// no peer is this rank, the control region and each peer's ring are there with the
    /// sizes this configuration gives them, ring positions are record-aligned and within a
    /// ring of each other, region keys are in the range this endpoint hands out.
    fn check_context(&self, ctx: &PmContext) -> Result<(), String> {
        let size = self.peers.len();
        let region = |k: u32| ctx.regions.iter().find(|r| r.0 == k).map(|r| r.1.len());
        if ctx.peers.get(self.me as usize).is_some_and(Option::is_some) {
            return Err("this rank as its own peer".into());
        }
        if region(CONTROL_REGION) != Some(8 * size) {
            return Err("no control region of the job's size".into());
        }
        let key_limit = size as u32 + 2 + (1 << 16);
        let mut keys: Vec<u32> = ctx.regions.iter().map(|r| r.0).collect();
        keys.extend(ctx.user.iter().map(|u| u.0));
        keys.sort_unstable();
        if keys.windows(2).any(|w| w[0] == w[1]) || keys.last().is_some_and(|&k| k >= key_limit) {
            return Err("region keys repeated or out of range".into());
        }
        let ReceiveMode::Rings { ring_bytes } = self.cfg.receive else {
            return Err("the shared receive queue is not restored".into());
        };
        let ring = ring_bytes as u64;
        for (r, p) in ctx.peers.iter().enumerate() {
            let Some((_, _, tx, rx)) = p else { continue };
            if region(ring_region(r as Rank)) != Some(ring_bytes) {
                return Err(format!("no ring of {ring_bytes} bytes for rank {r}"));
            }
            let aligned = |v: u64| v.is_multiple_of(ALIGN as u64);
            if !aligned(rx.tail) || !aligned(tx.head) || !aligned(tx.tail) {
                return Err(format!("ring positions of rank {r} not record-aligned"));
            }
            if tx.tail > tx.head || tx.head - tx.tail > ring {
                return Err(format!(
                    "ring head and tail of rank {r} apart by more than a ring"
                ));
            }
        }
        for (k, _, _) in &ctx.regions {
            let ring_of = k.checked_sub(1).filter(|&r| (r as usize) < size);
            if ring_of.is_some_and(|r| ctx.peers[r as usize].is_none()) {
                return Err(format!("ring region {k} of a rank that is not a peer"));
            }
        }
        Ok(())
    }

    /// The ranks this endpoint has as peers (failed ones included).
    pub fn peer_ranks(&self) -> Vec<Rank> {
        (0..self.peers.len() as Rank)
            .filter(|&r| self.peers[r as usize].is_some())
            .collect()
    }

    /// Send a checkpoint marker to `peer` (also while quiesced: it is the checkpoint's own
    /// traffic). It arrives after everything sent to `peer` before it.
    pub fn send_marker(&mut self, peer: Rank, id: u32, phase: u8) -> Result<(), PmError> {
        self.peer(peer)?;
        self.wr_to(peer, Wr::Marker { id, phase }, false);
        Ok(())
    }

    /// The next checkpoint marker that arrived: (from, checkpoint id, phase).
    pub fn take_marker(&mut self) -> Option<(Rank, u32, u8)> {
        self.markers.pop_front()
    }

    /// Whether a received message is held (handed out and not released).
    pub fn has_held(&self) -> bool {
        self.held.is_some()
    }

    /// Take over the counters of the endpoint this one replaces (a restored checkpoint).
    pub fn carry_counters(&mut self, old: &PmEndpoint) {
        self.stats = old.stats;
    }

    /// pmControlSend: let sends go again.
    pub fn resume(&mut self) {
        self.stopped = false;
    }

    /// The epoch `rank`'s packets carry, if it is a peer.
    pub fn peer_epoch(&self, rank: Rank) -> Option<u32> {
        self.peers.get(rank as usize)?.as_ref().map(|p| p.epoch)
    }

    /// `rank` restarted in a new process from its checkpoint image: its packets now carry
    /// `epoch`, and what it had not acknowledged is resent now (see
    /// [`Link::on_peer_moved`]).
    pub fn peer_moved(&mut self, rank: Rank, epoch: u32, now: Instant) {
        if let Some(Some(p)) = self.peers.get_mut(rank as usize) {
            p.epoch = epoch;
            p.link.on_peer_moved(now);
        }
    }

    /// Send `rank` an ACK restating where we are (it asks again what we answered).
    pub fn restate_to(&mut self, rank: Rank) {
        if let Some(Some(p)) = self.peers.get_mut(rank as usize) {
            p.link.restate();
        }
    }

    /// A peer's packets now carry another epoch (it restarted from a checkpoint).
    pub fn set_peer_epoch(&mut self, rank: Rank, epoch: u32) {
        if let Some(Some(p)) = self.peers.get_mut(rank as usize) {
            p.epoch = epoch;
        }
    }
}
