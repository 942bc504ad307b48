//! The protocol of one host-to-host connection as a state machine without I/O: calls
//! (send, accept, cancel, finish) and received bytes in; bytes to write and events out.
//!
//! Procs are named by their global rank (IMPI's order: client 0's procs first); the
//! [`ProcTable`] maps ranks to IMPI proc ids and back. A link serves any number of procs
//! on either end, so both host models work: one proc per host (GridMPI) and one host per
//! client carrying all its procs (LAM), in any mix.
//!
//! What a link does, following the IMPI report and LAM/MPI 7.1's behaviour:
//! - Short messages (`len <= datalen`) go in one packet: DATA, or DATASYNC for a
//!   synchronous send, which the receiver answers with SYNCACK once it matched.
//! - Long messages: the first packet is DATASYNC with `pk_len < pk_msglen`; the receiver
//!   answers SYNCACK carrying its request id once it matched; the rest follows as DATA
//!   packets carrying that id.
//! - Flow control per ordered proc pair: at most `hiwater` counted packets (every type but
//!   PROTOACK and FINI) unacknowledged; the receiver sends PROTOACK every `ackmark`
//!   packets. Packets wait in one FIFO queue per ordered proc pair, so nothing of a pair
//!   overtakes anything queued before it (a short message never overtakes a long one's
//!   first packet); pairs do not block each other. PROTOACK and FINI bypass the queues.
//! - A message is announced ([`Event::Arrived`]) as soon as its first packet is in: probe
//!   sees it then. The device must call [`Link::accept`] when it matches it (for every
//!   message, so that cancel knows it was matched).
//! - Cancel: [`Link::cancel`] removes a send still queued, or asks the receiver
//!   (CANCEL, answered CANCELYES if the message had not matched, else CANCELNO).
//! - [`Link::finish`]: FINI once nothing is left to send; the link is closed when FINI
//!   went both ways.
//!
//! Where we differ from LAM/MPI 7.1 (all within the report's text): every message gets a
//! non-zero `pk_srqid` (LAM leaves 0 on short standard ones), so a CANCEL can name any
//! message; control packets carry `pk_len` 0 (LAM writes 128); one queue per proc pair
//! instead of LAM's one per host, whose head-of-line blocking lets one full window stall
//! every other pair. Peers' packets are accepted in either form (tests/lam_capture.rs
//! replays LAM's own bytes).
//!
//! IMPI has no timers (TCP is reliable), so no time goes in: timeouts are the driver's.

use std::collections::{BTreeMap, VecDeque};
use std::io::IoSlice;
use std::sync::Arc;

use crate::fasthash::FastMap;
use crate::packet::{Header, PacketDecoder, PacketType, ProcId};

mod out;
mod types;
use out::{OutQueue, Payload};
pub use types::{
    Arrival, ArrivalId, CancelStatus, Event, LinkConfig, LinkError, ProcTable, SendId, SendRequest,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SendPhase {
    /// First packet still in the pair queue.
    Queued,
    /// First packet written; waiting for SYNCACK.
    AwaitAck,
    /// SYNCACK in; the rest of a long message is queued.
    Streaming,
    /// Complete; kept only while a cancel is pending.
    Done,
}

#[derive(Debug)]
struct SendState {
    src: u32,
    dst: u32,
    /// Needs SYNCACK (synchronous or long).
    acked: bool,
    long: bool,
    phase: SendPhase,
    cancel_pending: bool,
    /// A long message's template header and its whole data (the first packet's share
    /// included), shared with its queued packets.
    template: Header,
    whole: Option<Arc<Vec<u8>>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// A control packet (SYNCACK, CANCEL*).
    Control,
    /// The first packet of a send.
    First(SendId),
    /// A middle packet of a long send.
    Middle,
    /// The last packet of a long send.
    Last(SendId),
}

#[derive(Debug)]
struct Queued {
    header: Header,
    data: Payload,
    role: Role,
}

#[derive(Debug, Default)]
struct OutPair {
    /// Counted packets written and not yet acknowledged.
    in_flight: u32,
    queue: VecDeque<Queued>,
}

#[derive(Debug)]
struct ArrivalState {
    src: u32,
    dst: u32,
    srqid: u64,
    msglen: u64,
    received: u64,
    acked: bool,
    long: bool,
    matched: bool,
}

/// One host-to-host connection's protocol.
#[derive(Debug)]
pub struct Link {
    cfg: LinkConfig,
    table: Arc<ProcTable>,
    local: Vec<bool>,
    remote: Vec<bool>,
    decoder: PacketDecoder,
    out: OutQueue,
    events: VecDeque<Event>,
    /// Send queues per ordered (src, dst) pair, src local.
    pairs: BTreeMap<(u32, u32), OutPair>,
    /// Received counted packets per ordered (src, dst) pair, src remote, not yet acked.
    in_counts: FastMap<(u32, u32), u32>,
    sends: FastMap<SendId, SendState>,
    arrivals: BTreeMap<ArrivalId, ArrivalState>,
    next_send: SendId,
    next_arrival: ArrivalId,
    seqnum: u64,
    fini_wanted: bool,
    fini_sent: bool,
    fini_received: bool,
    broken: Option<LinkError>,
}

impl Link {
    /// A link between the host carrying `local` procs and the host carrying `remote` procs
    /// (global ranks, disjoint, all in `table`).
    pub fn new(
        cfg: LinkConfig,
        table: Arc<ProcTable>,
        local: &[u32],
        remote: &[u32],
    ) -> Result<Link, LinkError> {
        cfg.validate()?;
        let n = table.len();
        let mut lmask = vec![false; n];
        let mut rmask = vec![false; n];
        for &r in local {
            if r as usize >= n {
                return Err(LinkError::Usage(format!(
                    "Link::new: local rank {r} not in the proc table of {n}"
                )));
            }
            lmask[r as usize] = true;
        }
        for &r in remote {
            if r as usize >= n {
                return Err(LinkError::Usage(format!(
                    "Link::new: remote rank {r} not in the proc table of {n}"
                )));
            }
            if lmask[r as usize] {
                return Err(LinkError::Usage(format!(
                    "Link::new: rank {r} is both local and remote"
                )));
            }
            rmask[r as usize] = true;
        }
        Ok(Link {
            cfg,
            table,
            local: lmask,
            remote: rmask,
            decoder: PacketDecoder::new(cfg.datalen),
            out: OutQueue::default(),
            events: VecDeque::new(),
            pairs: BTreeMap::new(),
            in_counts: FastMap::default(),
            sends: FastMap::default(),
            arrivals: BTreeMap::new(),
            next_send: 1,
            next_arrival: 1,
            seqnum: 1,
            fini_wanted: false,
            fini_sent: false,
            fini_received: false,
            broken: None,
        })
    }

    /// The link's configuration.
    pub fn config(&self) -> LinkConfig {
        self.cfg
    }

    /// Take the bytes to write to the connection (in order), all in one buffer.
    pub fn transmit(&mut self) -> Vec<u8> {
        self.out.take_all()
    }

    /// Whether there are bytes to write.
    pub fn has_output(&self) -> bool {
        !self.out.is_empty()
    }

    /// Bytes waiting to be written.
    pub fn output_len(&self) -> usize {
        self.out.len()
    }

    /// The bytes to write, in order, as up to `max` slices appended to `out` (for one
    /// `writev`; message data is not copied). Report what was written with
    /// [`Link::output_written`].
    pub fn output_slices<'a>(&'a self, out: &mut Vec<IoSlice<'a>>, max: usize) {
        self.out.slices(out, max);
    }

    /// The bytes to write when they are one contiguous slice (most short messages: a
    /// header and its data copied together), for a plain `write`.
    pub fn output_single(&self) -> Option<&[u8]> {
        self.out.single()
    }

    /// The first `n` bytes of [`Link::output_slices`] were written.
    pub fn output_written(&mut self, n: usize) {
        self.out.advance(n);
    }

    /// Where to read the next bytes from the peer, in order (the rest of a large packet's
    /// data, read in place into uninitialised memory, then a staging buffer); fill a
    /// prefix and call [`Link::input_filled`]. Both are empty once the link is broken.
    pub fn input_buffers(&mut self) -> (&mut [std::mem::MaybeUninit<u8>], &mut [u8]) {
        if self.broken.is_some() {
            return (&mut [], &mut []);
        }
        self.decoder.read_buffers()
    }

    /// `n` bytes were read into [`Link::input_buffers`]: handle the packets completed, as
    /// [`Link::handle_input`] does.
    pub fn input_filled(&mut self, n: usize) -> Result<(), LinkError> {
        if let Some(e) = &self.broken {
            return Err(e.clone());
        }
        self.decoder.filled(n);
        self.drain_decoder()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// FINI went both ways: the connection can be closed.
    pub fn is_closed(&self) -> bool {
        self.fini_sent && self.fini_received
    }

    /// Whether the peer sent FINI.
    pub fn peer_finished(&self) -> bool {
        self.fini_received
    }

    /// Whether our FINI was written.
    pub fn fini_sent(&self) -> bool {
        self.fini_sent
    }

    /// Counted packets of `src → dst` written and not yet acknowledged (for tests and
    /// diagnostics).
    pub fn in_flight(&self, src: u32, dst: u32) -> u32 {
        self.pairs.get(&(src, dst)).map_or(0, |p| p.in_flight)
    }

    /// Packets of `src → dst` waiting for the flow-control window.
    pub fn queued(&self, src: u32, dst: u32) -> usize {
        self.pairs.get(&(src, dst)).map_or(0, |p| p.queue.len())
    }

    fn check_usable(&self, call: &str) -> Result<(), LinkError> {
        if let Some(e) = &self.broken {
            return Err(LinkError::Usage(format!(
                "{call}: the link is broken ({e})"
            )));
        }
        Ok(())
    }

    fn is_local(&self, r: u32) -> bool {
        self.local.get(r as usize).copied().unwrap_or(false)
    }

    fn is_remote(&self, r: u32) -> bool {
        self.remote.get(r as usize).copied().unwrap_or(false)
    }

    fn proc(&self, r: u32) -> ProcId {
        self.table
            .proc(r)
            .expect("ranks are checked against the table")
    }

    fn next_seq(&mut self) -> u64 {
        let s = self.seqnum;
        self.seqnum += 1;
        s
    }

    /// Start a send. Returns its id; [`Event::SendComplete`] follows (immediately for a
    /// short standard send the window lets through).
    pub fn send(&mut self, req: SendRequest) -> Result<SendId, LinkError> {
        self.check_usable("Link::send")?;
        if !self.is_local(req.src) {
            return Err(LinkError::Usage(format!(
                "Link::send: source rank {} is not on this host",
                req.src
            )));
        }
        if !self.is_remote(req.dst) {
            return Err(LinkError::Usage(format!(
                "Link::send: destination rank {} is not on the peer host",
                req.dst
            )));
        }
        if self.fini_wanted {
            return Err(LinkError::Usage(
                "Link::send: the link is finishing (FINI)".into(),
            ));
        }
        let id = self.next_send;
        self.next_send += 1;
        let msglen = req.data.len() as u64;
        let long = msglen > u64::from(self.cfg.datalen);
        let acked = long || req.sync;
        let mut h = Header::new(if acked {
            PacketType::DataSync
        } else {
            PacketType::Data
        });
        h.pk_src = self.proc(req.src);
        h.pk_dest = self.proc(req.dst);
        h.pk_srqid = id;
        h.pk_msglen = msglen;
        h.pk_lsrank = req.lsrank;
        h.pk_tag = req.tag;
        h.pk_cid = req.cid;
        // A long message's packets all refer to one shared buffer: no copy per packet.
        let (data, whole) = if long {
            let whole = Arc::new(req.data);
            let first = Payload::Shared(whole.clone(), 0, self.cfg.datalen as usize);
            (first, Some(whole))
        } else {
            (Payload::Owned(req.data), None)
        };
        h.pk_len = data.len() as u32;
        self.sends.insert(
            id,
            SendState {
                src: req.src,
                dst: req.dst,
                acked,
                long,
                phase: SendPhase::Queued,
                cancel_pending: false,
                template: h,
                whole,
            },
        );
        self.enqueue(
            req.src,
            req.dst,
            Queued {
                header: h,
                data,
                role: Role::First(id),
            },
        );
        Ok(id)
    }

    /// The device matched arrived message `id` to a receive. A synchronous or long
    /// message's sender gets its SYNCACK now; a long message's rest follows as
    /// [`Event::Data`] and [`Event::Received`]. An error means the message no longer
    /// exists (cancelled by its sender: an [`Event::ArrivalCancelled`] is queued or was
    /// delivered) or was accepted already: the device must then match on as if it had
    /// never seen it.
    pub fn accept(&mut self, id: ArrivalId) -> Result<(), LinkError> {
        self.check_usable("Link::accept")?;
        let Some(a) = self.arrivals.get_mut(&id) else {
            return Err(LinkError::Usage(format!(
                "Link::accept: no arrived message {id} (cancelled or accepted)"
            )));
        };
        if a.matched {
            return Err(LinkError::Usage(format!(
                "Link::accept: message {id} was accepted already"
            )));
        }
        if a.acked && self.fini_sent {
            return Err(LinkError::Usage(
                "Link::accept: the SYNCACK it needs cannot follow our FINI".into(),
            ));
        }
        a.matched = true;
        let (src, dst, srqid, acked, long) = (a.src, a.dst, a.srqid, a.acked, a.long);
        if !long {
            self.arrivals.remove(&id);
        }
        if acked {
            let mut h = Header::new(PacketType::SyncAck);
            h.pk_src = self.proc(dst);
            h.pk_dest = self.proc(src);
            h.pk_srqid = srqid;
            h.pk_drqid = if long { id } else { 0 };
            h.pk_lsrank = -1;
            h.pk_tag = -1;
            self.enqueue(
                dst,
                src,
                Queued {
                    header: h,
                    data: Payload::Empty,
                    role: Role::Control,
                },
            );
        }
        Ok(())
    }

    /// Cancel send `id`.
    pub fn cancel(&mut self, id: SendId) -> Result<CancelStatus, LinkError> {
        self.check_usable("Link::cancel")?;
        let Some(s) = self.sends.get_mut(&id) else {
            return Ok(CancelStatus::NotCancelled);
        };
        match s.phase {
            SendPhase::Queued => {
                let (src, dst) = (s.src, s.dst);
                self.sends.remove(&id);
                if let Some(p) = self.pairs.get_mut(&(src, dst)) {
                    p.queue.retain(|q| q.role != Role::First(id));
                }
                self.maybe_fini();
                Ok(CancelStatus::Cancelled)
            }
            SendPhase::AwaitAck if s.cancel_pending => Ok(CancelStatus::Pending),
            SendPhase::AwaitAck => {
                if self.fini_sent {
                    return Ok(CancelStatus::NotCancelled);
                }
                s.cancel_pending = true;
                let (src, dst) = (s.src, s.dst);
                let mut h = Header::new(PacketType::Cancel);
                h.pk_src = self.proc(src);
                h.pk_dest = self.proc(dst);
                h.pk_srqid = id;
                h.pk_lsrank = -1;
                h.pk_tag = -1;
                self.enqueue(
                    src,
                    dst,
                    Queued {
                        header: h,
                        data: Payload::Empty,
                        role: Role::Control,
                    },
                );
                Ok(CancelStatus::Pending)
            }
            SendPhase::Streaming | SendPhase::Done => Ok(CancelStatus::NotCancelled),
        }
    }

    /// The local procs are done: send FINI once every queue is empty and no send waits for
    /// its SYNCACK.
    pub fn finish(&mut self) -> Result<(), LinkError> {
        self.check_usable("Link::finish")?;
        self.fini_wanted = true;
        self.maybe_fini();
        Ok(())
    }

    fn maybe_fini(&mut self) {
        if !self.fini_wanted || self.fini_sent {
            return;
        }
        let idle = self.pairs.values().all(|p| p.queue.is_empty())
            && self
                .sends
                .values()
                .all(|s| matches!(s.phase, SendPhase::Done));
        if !idle {
            return;
        }
        let mut h = Header::new(PacketType::Fini);
        h.pk_src.pid = -1;
        h.pk_dest.pid = -1;
        h.pk_lsrank = -1;
        h.pk_tag = -1;
        h.pk_count = -1;
        h.pk_seqnum = self.next_seq();
        self.out.copy(&h.encode());
        self.fini_sent = true;
    }

    fn enqueue(&mut self, src: u32, dst: u32, q: Queued) {
        self.pairs.entry((src, dst)).or_default().queue.push_back(q);
        self.pump(src, dst);
    }

    /// Write what the window of `src → dst` lets through.
    fn pump(&mut self, src: u32, dst: u32) {
        loop {
            let hiwater = self.cfg.hiwater;
            let Some(p) = self.pairs.get_mut(&(src, dst)) else {
                return;
            };
            if p.in_flight >= hiwater {
                break;
            }
            let Some(mut q) = p.queue.pop_front() else {
                break;
            };
            p.in_flight += 1;
            q.header.pk_seqnum = self.seqnum;
            self.seqnum += 1;
            self.out.copy(&q.header.encode());
            self.out.payload(q.data);
            match q.role {
                Role::Control | Role::Middle => {}
                Role::First(id) => {
                    let s = self.sends.get_mut(&id).expect("a queued send exists");
                    if s.acked {
                        s.phase = SendPhase::AwaitAck;
                    } else {
                        self.complete_send(id);
                    }
                }
                Role::Last(id) => self.complete_send(id),
            }
        }
        self.maybe_fini();
    }

    fn complete_send(&mut self, id: SendId) {
        let s = self.sends.get_mut(&id).expect("send exists");
        s.phase = SendPhase::Done;
        s.whole = None;
        if !s.cancel_pending {
            self.sends.remove(&id);
        }
        self.events.push_back(Event::SendComplete { id });
    }

    /// Bytes arrived from the peer host. On error the link is broken for good (the stream
    /// cannot be resynchronised); events and output produced before the error stay valid.
    pub fn handle_input(&mut self, bytes: &[u8]) -> Result<(), LinkError> {
        if let Some(e) = &self.broken {
            return Err(e.clone());
        }
        self.decoder.push(bytes);
        self.drain_decoder()
    }

    /// Handle every whole packet the decoder has.
    fn drain_decoder(&mut self) -> Result<(), LinkError> {
        loop {
            let next = match self.decoder.next_packet() {
                Ok(Some(p)) => p,
                Ok(None) => return Ok(()),
                Err(e) => return Err(self.break_with(e.into())),
            };
            if let Err(e) = self.handle_packet(next.0, next.1) {
                return Err(self.break_with(e));
            }
            // A SYNCACK or CANCELYES may have ended the last send FINI waited for.
            self.maybe_fini();
        }
    }

    /// The peer closed the connection. An error unless FINI came first.
    pub fn handle_eof(&mut self) -> Result<(), LinkError> {
        if self.fini_received && self.decoder.buffered() == 0 {
            return Ok(());
        }
        let e = LinkError::Protocol(if self.fini_received {
            "connection closed inside a packet".into()
        } else {
            "connection closed before FINI".into()
        });
        Err(self.break_with(e))
    }

    fn break_with(&mut self, e: LinkError) -> LinkError {
        self.broken = Some(e.clone());
        e
    }

    fn handle_packet(&mut self, h: Header, data: Vec<u8>) -> Result<(), LinkError> {
        if self.fini_received {
            return Err(LinkError::Protocol(format!(
                "{:?} packet after FINI",
                h.pk_type
            )));
        }
        if h.pk_type == PacketType::Fini {
            self.fini_received = true;
            self.events.push_back(Event::PeerFinished);
            return Ok(());
        }
        let src = self
            .table
            .rank_of(&h.pk_src)
            .filter(|&r| self.is_remote(r))
            .ok_or_else(|| {
                LinkError::Protocol(format!(
                    "{:?} packet from {:?}, not a proc of the peer host",
                    h.pk_type, h.pk_src
                ))
            })?;
        let dst = self
            .table
            .rank_of(&h.pk_dest)
            .filter(|&r| self.is_local(r))
            .ok_or_else(|| {
                LinkError::Protocol(format!(
                    "{:?} packet to {:?}, not a proc of this host",
                    h.pk_type, h.pk_dest
                ))
            })?;
        match h.pk_type {
            PacketType::Data => self.on_data(&h, src, dst, data)?,
            PacketType::DataSync => self.on_datasync(&h, src, dst, data)?,
            PacketType::ProtoAck => self.on_protoack(src, dst)?,
            PacketType::SyncAck => self.on_syncack(&h, src, dst)?,
            PacketType::Cancel => self.on_cancel(&h, src, dst),
            PacketType::CancelYes | PacketType::CancelNo => self.on_cancel_reply(&h, src, dst)?,
            PacketType::Fini => unreachable!("handled above"),
        }
        if h.pk_type.counts_for_flow_control() {
            self.count_received(src, dst);
        }
        Ok(())
    }

    /// Count a packet of `src → dst` and acknowledge every `ackmark`.
    fn count_received(&mut self, src: u32, dst: u32) {
        let c = self.in_counts.entry((src, dst)).or_insert(0);
        *c += 1;
        if *c >= self.cfg.ackmark {
            *c -= self.cfg.ackmark;
            let mut h = Header::new(PacketType::ProtoAck);
            h.pk_src = self.proc(dst);
            h.pk_dest = self.proc(src);
            h.pk_lsrank = -1;
            h.pk_tag = -1;
            h.pk_seqnum = self.next_seq();
            // Not counted, not queued: the peer's window depends on it.
            self.out.copy(&h.encode());
        }
    }

    fn new_arrival(
        &mut self,
        h: &Header,
        src: u32,
        dst: u32,
        data: Vec<u8>,
        acked: bool,
        long: bool,
    ) {
        let id = self.next_arrival;
        self.next_arrival += 1;
        self.arrivals.insert(
            id,
            ArrivalState {
                src,
                dst,
                srqid: h.pk_srqid,
                msglen: h.pk_msglen,
                received: data.len() as u64,
                acked,
                long,
                matched: false,
            },
        );
        self.events.push_back(Event::Arrived(Arrival {
            id,
            src,
            dst,
            lsrank: h.pk_lsrank,
            tag: h.pk_tag,
            cid: h.pk_cid,
            msglen: h.pk_msglen,
            sync: acked,
            data,
            complete: !long,
        }));
    }

    fn on_data(&mut self, h: &Header, src: u32, dst: u32, data: Vec<u8>) -> Result<(), LinkError> {
        // A later packet of a long message carries our request id; LAM's ids start at 1
        // and a short DATA has pk_drqid 0, but a short one is also recognised by
        // pk_len == pk_msglen should a peer leave garbage in pk_drqid.
        let cont = h.pk_drqid != 0
            && self
                .arrivals
                .get(&h.pk_drqid)
                .is_some_and(|a| a.long && a.matched && a.src == src && a.dst == dst);
        if cont {
            let id = h.pk_drqid;
            let a = self.arrivals.get_mut(&id).expect("checked");
            let offset = a.received;
            let end = offset + data.len() as u64;
            if end > a.msglen || h.pk_msglen != a.msglen {
                return Err(LinkError::Protocol(format!(
                    "DATA for message {id}: bytes {offset}..{end} of a {}-byte message (pk_msglen {})",
                    a.msglen, h.pk_msglen
                )));
            }
            a.received = end;
            let done = end == a.msglen;
            if !data.is_empty() {
                self.events.push_back(Event::Data { id, offset, data });
            }
            if done {
                self.arrivals.remove(&id);
                self.events.push_back(Event::Received { id });
            }
            return Ok(());
        }
        if u64::from(h.pk_len) != h.pk_msglen {
            return Err(LinkError::Protocol(format!(
                "DATA with pk_len {} < pk_msglen {} and pk_drqid {} matching no accepted long message",
                h.pk_len, h.pk_msglen, h.pk_drqid
            )));
        }
        self.new_arrival(h, src, dst, data, false, false);
        Ok(())
    }

    fn on_datasync(
        &mut self,
        h: &Header,
        src: u32,
        dst: u32,
        data: Vec<u8>,
    ) -> Result<(), LinkError> {
        let long = u64::from(h.pk_len) < h.pk_msglen;
        self.new_arrival(h, src, dst, data, true, long);
        Ok(())
    }

    fn on_protoack(&mut self, src: u32, dst: u32) -> Result<(), LinkError> {
        // The PROTOACK comes from the receiver (src here) for our pair dst → src.
        let ackmark = self.cfg.ackmark;
        let p = self.pairs.entry((dst, src)).or_default();
        if p.in_flight < ackmark {
            return Err(LinkError::Protocol(format!(
                "PROTOACK for {dst}->{src} with only {} packets unacknowledged (ackmark {ackmark})",
                p.in_flight
            )));
        }
        p.in_flight -= ackmark;
        self.pump(dst, src);
        Ok(())
    }

    fn on_syncack(&mut self, h: &Header, src: u32, dst: u32) -> Result<(), LinkError> {
        let id = h.pk_srqid;
        let datalen = self.cfg.datalen as usize;
        let Some(s) = self.sends.get_mut(&id) else {
            return Err(LinkError::Protocol(format!(
                "SYNCACK for unknown send {id}"
            )));
        };
        if s.phase != SendPhase::AwaitAck || s.src != dst || s.dst != src {
            return Err(LinkError::Protocol(format!(
                "SYNCACK for send {id} ({}->{}) from {src} to {dst} in phase {:?}",
                s.src, s.dst, s.phase
            )));
        }
        if !s.long {
            self.complete_send(id);
            return Ok(());
        }
        s.phase = SendPhase::Streaming;
        let whole = s
            .whole
            .take()
            .expect("a long send keeps its data until streamed");
        let mut t = s.template;
        t.pk_type = PacketType::Data;
        t.pk_drqid = h.pk_drqid;
        let (ssrc, sdst) = (s.src, s.dst);
        let total = whole.len();
        if total <= datalen {
            // The first packet carried everything (cannot happen with pk_len < msglen).
            self.complete_send(id);
            return Ok(());
        }
        let pair = self.pairs.entry((ssrc, sdst)).or_default();
        let mut at = datalen;
        while at < total {
            let end = (at + datalen).min(total);
            let mut hh = t;
            hh.pk_len = (end - at) as u32;
            let role = if end == total {
                Role::Last(id)
            } else {
                Role::Middle
            };
            pair.queue.push_back(Queued {
                header: hh,
                data: Payload::Shared(whole.clone(), at, end),
                role,
            });
            at = end;
        }
        self.pump(ssrc, sdst);
        Ok(())
    }

    fn on_cancel(&mut self, h: &Header, src: u32, dst: u32) {
        // Newest first: the highest arrival id with this source and srqid.
        let found = self
            .arrivals
            .iter()
            .rev()
            .find(|(_, a)| a.src == src && a.dst == dst && a.srqid == h.pk_srqid)
            .map(|(id, a)| (*id, a.matched));
        let yes = match found {
            Some((id, false)) => {
                self.arrivals.remove(&id);
                self.events.push_back(Event::ArrivalCancelled { id });
                true
            }
            _ => false,
        };
        if self.fini_sent {
            return;
        }
        let mut r = Header::new(if yes {
            PacketType::CancelYes
        } else {
            PacketType::CancelNo
        });
        r.pk_src = h.pk_dest;
        r.pk_dest = h.pk_src;
        r.pk_srqid = h.pk_srqid;
        r.pk_drqid = h.pk_drqid;
        r.pk_lsrank = -1;
        r.pk_tag = -1;
        self.enqueue(
            dst,
            src,
            Queued {
                header: r,
                data: Payload::Empty,
                role: Role::Control,
            },
        );
    }

    fn on_cancel_reply(&mut self, h: &Header, src: u32, dst: u32) -> Result<(), LinkError> {
        let id = h.pk_srqid;
        let yes = h.pk_type == PacketType::CancelYes;
        let Some(s) = self
            .sends
            .get_mut(&id)
            .filter(|s| s.cancel_pending && s.src == dst && s.dst == src)
        else {
            return Err(LinkError::Protocol(format!(
                "{:?} for send {id} with no cancel pending",
                h.pk_type
            )));
        };
        if yes {
            if s.phase != SendPhase::AwaitAck {
                return Err(LinkError::Protocol(format!(
                    "CANCELYES for send {id}, which the receiver had matched (SYNCACK came)"
                )));
            }
            self.sends.remove(&id);
        } else {
            s.cancel_pending = false;
            if s.phase == SendPhase::Done {
                self.sends.remove(&id);
            }
        }
        self.events
            .push_back(Event::CancelResult { id, cancelled: yes });
        self.maybe_fini();
        Ok(())
    }
}
