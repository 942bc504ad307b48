//! Reliable, in-order, exactly-once delivery of frames over an unreliable datagram link:
//! one [`Link`] per peer, a state machine without I/O (datagrams and time in, datagrams and
//! frames out). The UDP driver (`transport`) and the simulated lossy link of the tests
//! (`lossy`) drive the same code.
//!
//! What it does, after seed 001's lessons for PM over Ethernet/UDP:
//!
//! * **sequence numbers per peer**, 32-bit, compared in serial arithmetic;
//! * a **send window** of [`LinkConfig::window`] packets in flight (PM/Ethernet: 8–32);
//!   frames beyond it wait in a backlog;
//! * **cumulative and batched acknowledgements**: the receiver acknowledges every
//!   [`LinkConfig::ack_every`] packets or after [`LinkConfig::ack_delay`], whichever comes
//!   first, with a 32-bit selective bitmap of what arrived beyond the cumulative point;
//! * **retransmission on timeout** with exponential back-off (the timeout adapts to the
//!   measured round trip, Karn's rule: retransmitted packets give no sample) and **on
//!   negative acknowledgement**: a receiver that sees a gap sends a NACK at once, and the
//!   sender resends the holes that at least three later packets overtook (fewer is more
//!   likely reordering than loss);
//! * **per-fragment recovery of trains**: a packet larger than one datagram goes as a train
//!   of FRAG pieces ([`wire::encode_train`]); a receiver missing pieces asks for them by
//!   index with an FNACK, when [`DUP_THRESH`] later pieces (of the same train or of later
//!   packets) overtook a hole, or when a train stayed incomplete for
//!   [`LinkConfig::reassembly_timeout`] (doubling per unanswered request); the sender
//!   resends just those pieces at once, with the packet's sequence number, and leaves the
//!   packet to this recovery rather than resending it whole on a NACK (a timeout still
//!   does): one lost piece costs one piece, not the ~42 of a 60 KiB packet;
//! * **duplicate suppression** (below the cumulative point, or already buffered) and
//!   **in-order delivery** through a reorder buffer of one window;
//! * **acknowledgements on a separate path**: ACK/NACK packets are never queued behind data
//!   nor limited by the window, so replies cannot be blocked by requests (no piggybacking);
//! * a bounded delivery queue ([`LinkConfig::rx_limit`]): when the consumer (the NIC's
//!   shared receive queue) has no room, an in-order packet is dropped unacknowledged and
//!   comes again after a timeout (InfiniBand's receiver-not-ready retry);
//! * **failure detection robust to oversubscription**: a peer is declared failed only when
//!   data is outstanding, [`LinkConfig::give_up_retries`] retransmissions with back-off went
//!   unanswered, and nothing at all (no ACK, no data) came from it for
//!   [`LinkConfig::give_up_after`] of *our* running time: a stall of our own (a gap of more
//!   than [`STALL`] between timer runs, when the process was descheduled on a loaded
//!   machine or computed without polling) moves the clock forward instead of counting
//!   against the peer, and a receiver that is alive but not ready re-acknowledges;
//! * **quiesce and context save/restore** for checkpointing ([`Link::is_stable`],
//!   [`Link::save`], [`Link::restore`]).
//!
//! The payload checksum is the codec's ([`crate::wire`]); a datagram that fails it is
//! dropped before it reaches a link, which then treats it as lost.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use crate::wire::{self, Kind, Packet};

/// Tunables of one link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkConfig {
    /// Packets in flight, at most (1..=32: the selective bitmap covers one window).
    pub window: u32,
    /// Retransmission timeout before the first round-trip sample.
    pub rto_initial: Duration,
    /// Lower and upper bounds of the adaptive timeout (back-off included).
    pub rto_min: Duration,
    pub rto_max: Duration,
    /// An in-order packet is acknowledged at the latest this long after it arrived.
    pub ack_delay: Duration,
    /// ... or as soon as this many packets arrived unacknowledged.
    pub ack_every: u32,
    /// The peer is declared failed when packets are outstanding and for this long nothing
    /// was acknowledged and nothing at all came from the peer, and at least
    /// [`LinkConfig::give_up_retries`] retransmissions went unanswered. Time this side
    /// itself did not run (a gap of more than [`STALL`] between two timer runs: the
    /// process was descheduled or computing) does not count (see the module doc).
    pub give_up_after: Duration,
    /// Unanswered retransmission timeouts, at least, before the peer is declared failed.
    pub give_up_retries: u32,
    /// Frames delivered but not yet taken, at most (see the module doc).
    pub rx_limit: usize,
    /// Add a CRC-32 to every packet this link sends.
    pub checksum: bool,
    /// Bytes of the largest datagram the path carries unfragmented (the MTU less the IP
    /// and UDP headers): a larger DATA packet goes as a train of FRAG packets
    /// ([`wire::encode_train`]), reassembled here at the receiver.
    pub max_datagram: usize,
    /// A train that got no new piece for this long asks for its missing pieces (FNACK);
    /// doubled for each request that brought nothing, up to [`LinkConfig::rto_max`].
    pub reassembly_timeout: Duration,
}

impl Default for LinkConfig {
    fn default() -> LinkConfig {
        LinkConfig {
            window: 32,
            rto_initial: Duration::from_millis(5),
            rto_min: Duration::from_millis(1),
            rto_max: Duration::from_millis(200),
            ack_delay: Duration::from_micros(200),
            ack_every: 8,
            give_up_after: Duration::from_secs(60),
            give_up_retries: 6,
            rx_limit: usize::MAX,
            checksum: true,
            max_datagram: 65_535,
            reassembly_timeout: Duration::from_micros(500),
        }
    }
}

/// Counters of one link.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    pub data_sent: u64,
    pub retransmitted: u64,
    pub timeouts: u64,
    pub acks_sent: u64,
    pub nacks_sent: u64,
    pub data_received: u64,
    pub duplicates: u64,
    pub not_ready_drops: u64,
    /// FNACK packets sent (requests for missing pieces of trains).
    pub frag_nacks_sent: u64,
    /// Pieces of trains resent on an FNACK.
    pub frags_retransmitted: u64,
    /// Payload bytes sent again: whole packets (timeout, NACK) and pieces (FNACK).
    pub bytes_retransmitted: u64,
    /// FNACKs sent by the reassembly timer (the rest: a hole overtaken).
    pub frag_nacks_by_timer: u64,
    /// Pieces of trains that arrived when the packet already had them (resent needlessly,
    /// or duplicated by the network).
    pub duplicate_pieces: u64,
}

impl std::ops::AddAssign for LinkStats {
    /// Sum the counters of several links (an endpoint's, over its peers).
    fn add_assign(&mut self, s: LinkStats) {
        let LinkStats {
            data_sent,
            retransmitted,
            timeouts,
            acks_sent,
            nacks_sent,
            data_received,
            duplicates,
            not_ready_drops,
            frag_nacks_sent,
            frags_retransmitted,
            bytes_retransmitted,
            frag_nacks_by_timer,
            duplicate_pieces,
        } = s;
        self.data_sent += data_sent;
        self.retransmitted += retransmitted;
        self.timeouts += timeouts;
        self.acks_sent += acks_sent;
        self.nacks_sent += nacks_sent;
        self.data_received += data_received;
        self.duplicates += duplicates;
        self.not_ready_drops += not_ready_drops;
        self.frag_nacks_sent += frag_nacks_sent;
        self.frags_retransmitted += frags_retransmitted;
        self.bytes_retransmitted += bytes_retransmitted;
        self.frag_nacks_by_timer += frag_nacks_by_timer;
        self.duplicate_pieces += duplicate_pieces;
    }
}

/// The sequence state saved by a checkpoint ([`Link::save`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LinkContext {
    pub next_seq: u32,
    pub expected: u32,
    /// Frames that arrived ahead of `expected` (reordered), by distance from it: the
    /// sender may count them as selectively acknowledged and not send them again.
    pub early: Vec<(u32, Vec<u8>)>,
}

/// A DATA packet whose FRAG pieces are arriving.
struct Partial {
    buf: Vec<u8>,
    /// The whole payload's length.
    total: usize,
    piece: usize,
    have: Vec<bool>,
    missing: usize,
    /// Pieces asked for by an FNACK and not come since (not asked again before the timer).
    asked: Vec<bool>,
    /// One past the highest piece index that arrived.
    seen_max: usize,
    /// Pieces of later packets that arrived since this one's last piece: its tail is lost
    /// once [`DUP_THRESH`] did.
    later: u32,
    /// The last piece's arrival, or the last request the timer sent.
    last_at: Instant,
    /// Requests sent by the timer with no piece arriving since (the back-off).
    timer_nacks: u32,
    /// The timer was put off once after a stall of our own (see `Link::run_timers`).
    postponed: bool,
    /// The payload goes straight to its destination ([`Placement`]): only its first this
    /// many bytes are kept in `buf` (all of `buf` is kept until piece 0 is in).
    placing: Option<usize>,
}

impl Partial {
    fn new(total: usize, piece: usize, now: Instant, buf: Vec<u8>) -> Partial {
        let n = total.div_ceil(piece);
        Partial {
            buf,
            total,
            piece,
            have: vec![false; n],
            missing: n,
            asked: vec![false; n],
            seen_max: 0,
            later: 0,
            last_at: now,
            timer_nacks: 0,
            postponed: false,
            placing: None,
        }
    }

    /// When the reassembly timer of this train expires.
    fn deadline(&self, timeout: Duration, max: Duration) -> Instant {
        self.last_at + (timeout * (1u32 << self.timer_nacks.min(8))).min(max)
    }

    /// Queue FNACKs for the pieces that are missing and not yet asked for: those that
    /// [`DUP_THRESH`] later pieces overtook, or all of them (`all`, the timer).
    /// Returns whether it asked for anything.
    fn request(&mut self, seq: u32, all: bool, fnacks: &mut VecDeque<(u32, u32, u32)>) -> bool {
        let tail_lost = all || self.later >= DUP_THRESH;
        let upto = if tail_lost {
            self.have.len()
        } else {
            self.seen_max.saturating_sub(DUP_THRESH as usize)
        };
        let mut base = None;
        let mut bits = 0u32;
        for i in 0..upto {
            if self.have[i] || self.asked[i] {
                continue;
            }
            self.asked[i] = true;
            match base {
                Some(b) if i - b < 32 => bits |= 1u32 << (i - b),
                _ => {
                    if let Some(b) = base {
                        fnacks.push_back((seq, b as u32, bits));
                    }
                    base = Some(i);
                    bits = 1;
                }
            }
        }
        if let Some(b) = base {
            fnacks.push_back((seq, b as u32, bits));
        }
        base.is_some()
    }
}

struct Outstanding {
    seq: u32,
    frame: Vec<u8>,
    first_sent: Option<Instant>,
    last_sent: Option<Instant>,
    retransmitted: bool,
    sacked: bool,
    resend: bool,
    /// Pieces the receiver asked for by FNACK, not yet resent (bit i of word i / 64).
    frag_resend: Vec<u64>,
    /// The receiver holds pieces of this packet and recovers it by FNACK: a NACK does not
    /// make it resent whole.
    partial_at_peer: bool,
}

/// Where the payload of an arriving DATA packet may go directly instead of through the
/// link's buffers: the receiving NIC placing a PULL reply into the buffer it was asked for
/// (the reply is then delivered, in order, with only its first bytes).
pub trait Placement {
    /// `head` is the start of packet `seq`'s payload (at least its first piece), whose
    /// whole length is `total`; `data` is the part of it at `offset`. `Some(keep)` when
    /// `data` was placed: the packet is delivered with its first `keep` bytes only.
    /// Called once per piece, and for the pieces that came before piece 0 once it comes.
    fn place(
        &mut self,
        seq: u32,
        head: &[u8],
        total: usize,
        offset: usize,
        data: &[u8],
    ) -> Option<usize>;
}

/// No placement: every payload is kept by the link.
pub struct Keep;

impl Placement for Keep {
    fn place(&mut self, _: u32, _: &[u8], _: usize, _: usize, _: &[u8]) -> Option<usize> {
        None
    }
}

/// A gap between two timer runs longer than this means the owner did not run (it sleeps
/// at most one retransmission timeout while data is outstanding): the gap is not counted
/// against the peer.
pub const STALL: Duration = Duration::from_secs(1);

/// Packets (or pieces of trains) overtaking a hole before it is asked for again (TCP's
/// duplicate threshold): fewer is more likely reordering than loss.
pub const DUP_THRESH: u32 = 3;

/// Signed distance from `b` to `a` in serial arithmetic.
fn dist(a: u32, b: u32) -> i32 {
    a.wrapping_sub(b) as i32
}

/// One direction pair to one peer: the sending and the receiving state.
pub struct Link {
    cfg: LinkConfig,
    me: u32,
    peer: u32,
    epoch: u32,
    // Sending.
    next_seq: u32,
    inflight: VecDeque<Outstanding>,
    backlog: VecDeque<Vec<u8>>,
    srtt: Option<Duration>,
    backoff: u32,
    /// Since when the peer owes us an acknowledgement without having made progress or
    /// shown any sign of life (moved forward over the owner's own stalls).
    progress_at: Option<Instant>,
    /// Retransmission timeouts since the last sign of life.
    unanswered: u32,
    /// The last timer run (to see the owner's own stalls).
    timers_at: Option<Instant>,
    // Receiving.
    expected: u32,
    reorder: VecDeque<Option<Vec<u8>>>,
    delivered: VecDeque<Vec<u8>>,
    rx_since_ack: u32,
    ack_due: Option<Instant>,
    ack_now: bool,
    nack_now: bool,
    /// Packets of the window being reassembled from FRAG pieces, by sequence number.
    partial: HashMap<u32, Partial>,
    /// FNACKs to send: (sequence number, first piece, bitmap of pieces from it).
    fnacks: VecDeque<(u32, u32, u32)>,
    /// Datagram size of the train [`Link::poll_transmit`] encoded last (0: one packet).
    train: usize,
    failed: bool,
    stats: LinkStats,
    /// The latest time the owner gave us (for timers set while taking frames).
    clock: Option<Instant>,
}

impl Link {
    /// A link from rank `me` (whose packets carry `epoch`) to rank `peer`.
    pub fn new(me: u32, peer: u32, epoch: u32, cfg: LinkConfig) -> Link {
        assert!((1..=32).contains(&cfg.window), "window must be 1..=32");
        Link {
            cfg,
            me,
            peer,
            epoch,
            next_seq: 0,
            inflight: VecDeque::new(),
            backlog: VecDeque::new(),
            srtt: None,
            backoff: 0,
            progress_at: None,
            unanswered: 0,
            timers_at: None,
            expected: 0,
            reorder: (0..cfg.window).map(|_| None).collect(),
            delivered: VecDeque::new(),
            rx_since_ack: 0,
            ack_due: None,
            ack_now: false,
            nack_now: false,
            partial: HashMap::new(),
            fnacks: VecDeque::new(),
            train: 0,
            failed: false,
            stats: LinkStats::default(),
            clock: None,
        }
    }

    /// Queue a frame for reliable delivery (at most [`wire::MAX_PACKET_PAYLOAD`] bytes).
    /// The caller bounds the queue with [`Link::queued`].
    pub fn push(&mut self, frame: Vec<u8>) {
        debug_assert!(frame.len() <= wire::MAX_PACKET_PAYLOAD);
        self.backlog.push_back(frame);
    }

    /// Queue a frame ahead of every frame not yet sent: replies (PULL responses) take this
    /// path so that they never wait behind a backlog of requests (seed 001).
    pub fn push_urgent(&mut self, frame: Vec<u8>) {
        debug_assert!(frame.len() <= wire::MAX_PACKET_PAYLOAD);
        self.backlog.push_front(frame);
    }

    /// The next frame delivered in order, without taking it.
    pub fn peek_delivered(&self) -> Option<&[u8]> {
        self.delivered.front().map(Vec::as_slice)
    }

    /// Frames queued or in flight, not yet acknowledged.
    pub fn queued(&self) -> usize {
        self.backlog.len() + self.inflight.len()
    }

    /// Take the next frame delivered in order.
    pub fn pop_delivered(&mut self) -> Option<Vec<u8>> {
        let f = self.delivered.pop_front();
        if f.is_some() {
            self.drain_reorder();
        }
        f
    }

    /// True once the peer stayed silent for [`LinkConfig::give_up_after`] (see there).
    pub fn failed(&self) -> bool {
        self.failed
    }

    pub fn stats(&self) -> LinkStats {
        self.stats
    }

    /// Nothing of ours is queued or unacknowledged, and we owe the peer no ACK: the
    /// sending side is quiescent (PM's pmSendStable per peer).
    pub fn is_stable(&self) -> bool {
        self.inflight.is_empty()
            && self.backlog.is_empty()
            && self.ack_due.is_none()
            && !self.ack_now
            && !self.nack_now
            && self.fnacks.is_empty()
    }

    /// Save the sequence state (PM's pmSaveContext). Only meaningful when
    /// [`Link::is_stable`] and every delivered frame was taken.
    pub fn save(&self) -> LinkContext {
        LinkContext {
            next_seq: self.next_seq,
            expected: self.expected,
            early: self
                .reorder
                .iter()
                .enumerate()
                .filter_map(|(d, f)| f.as_ref().map(|f| (d as u32, f.clone())))
                .collect(),
        }
    }

    /// Restore a saved state into a fresh or quiesced link (PM's pmRestoreContext).
    pub fn restore(&mut self, ctx: LinkContext) {
        self.next_seq = ctx.next_seq;
        self.expected = ctx.expected;
        self.inflight.clear();
        self.reorder.iter_mut().for_each(|s| *s = None);
        for (d, f) in ctx.early {
            if let Some(slot) = self.reorder.get_mut(d as usize) {
                *slot = Some(f);
            }
        }
        self.delivered.clear();
        self.partial.clear();
        self.fnacks.clear();
        self.ack_due = None;
        self.ack_now = false;
        self.nack_now = false;
        self.backoff = 0;
        self.progress_at = None;
        self.unanswered = 0;
        self.timers_at = None;
        self.failed = false;
    }

    /// The peer restarted in a new process that restored its context and now listens at
    /// another address: what it has not acknowledged died with its old process (or sits
    /// unread in its old socket), so resend every packet it has not selectively
    /// acknowledged now, with a fresh back-off and give-up clock, and tell it where we
    /// are (which also confirms to it that we know its new address).
    pub fn on_peer_moved(&mut self, now: Instant) {
        for o in self.inflight.iter_mut().filter(|o| !o.sacked) {
            o.resend = true;
        }
        // Trains of the old process will not be completed by the new one.
        self.partial.clear();
        self.backoff = 0;
        self.unanswered = 0;
        if !self.inflight.is_empty() {
            self.progress_at = Some(now);
        }
        self.ack_now = true;
    }

    /// How long a train waits for a piece before asking for what is missing: the
    /// configured time, but at least a smoothed round trip to the peer, so that the
    /// answer to a request can be back before the timer asks for the same pieces again
    /// (under load a round trip takes milliseconds; asking every 500 µs resent pieces
    /// that were already on their way).
    fn reassembly_timeout(&self) -> Duration {
        self.cfg
            .reassembly_timeout
            .max(self.srtt.unwrap_or_default())
    }

    /// Send an ACK restating where we are, now.
    pub fn restate(&mut self) {
        self.ack_now = true;
    }

    fn rto(&self) -> Duration {
        let base = match self.srtt {
            None => self.cfg.rto_initial,
            Some(s) => s * 3,
        };
        let base = base.clamp(self.cfg.rto_min, self.cfg.rto_max);
        (base * (1u32 << self.backoff.min(8))).min(self.cfg.rto_max)
    }

    /// The next moment [`Link::poll_transmit`] has something to do even if no packet
    /// arrives.
    pub fn next_deadline(&self) -> Option<Instant> {
        let retx = self
            .inflight
            .iter()
            .find(|o| !o.sacked)
            .and_then(|o| o.last_sent)
            .map(|t| t + self.rto());
        let reassembly = self
            .partial
            .values()
            .map(|p| p.deadline(self.reassembly_timeout(), self.cfg.rto_max))
            .min();
        [retx, self.ack_due, reassembly].into_iter().flatten().min()
    }

    /// Something is ready to go now (an ACK, a resend or a new packet in the window).
    pub fn wants_transmit(&self) -> bool {
        self.ack_now
            || self.nack_now
            || !self.fnacks.is_empty()
            || self
                .inflight
                .iter()
                .any(|o| o.resend || !o.frag_resend.is_empty())
            || (!self.backlog.is_empty() && self.inflight.len() < self.cfg.window as usize)
    }

    fn control(&mut self, kind: Kind, out: &mut Vec<u8>) {
        let mut sack = 0u32;
        for (i, s) in self.reorder.iter().enumerate().skip(1) {
            if s.is_some() {
                sack |= 1 << (i - 1);
            }
        }
        let p = Packet {
            kind,
            src: self.me,
            dst: self.peer,
            epoch: self.epoch,
            seq: 0,
            ack: self.expected,
            sack,
            payload: &[],
        };
        wire::encode(&p, self.cfg.checksum, out).expect("control packets have no payload");
        self.ack_due = None;
        self.ack_now = false;
        self.nack_now = false;
        self.rx_since_ack = 0;
        match kind {
            Kind::Nack => self.stats.nacks_sent += 1,
            _ => self.stats.acks_sent += 1,
        }
    }

    /// The datagram size of the train the last [`Link::poll_transmit`] encoded (the driver
    /// hands it to the kernel as the segment size), or 0 when it encoded one packet.
    pub fn train(&self) -> usize {
        self.train
    }

    /// The DATA packet that carries inflight packet `o` (whole, or the pieces of it that
    /// are resent).
    fn data_packet<'a>(&self, o: &'a Outstanding) -> Packet<'a> {
        Packet {
            kind: Kind::Data,
            src: self.me,
            dst: self.peer,
            epoch: self.epoch,
            seq: o.seq,
            ack: 0,
            sack: 0,
            payload: &o.frame,
        }
    }

    fn data(&mut self, idx: usize, out: &mut Vec<u8>) {
        let p = self.data_packet(&self.inflight[idx]);
        self.train = wire::encode_train(&p, self.cfg.checksum, self.cfg.max_datagram, out)
            .expect("frames fit a packet");
    }

    /// Encode the pieces of inflight packet `idx` its FNACKs asked for, and clear them.
    fn fragments(&mut self, idx: usize, now: Instant, out: &mut Vec<u8>) {
        let words = std::mem::take(&mut self.inflight[idx].frag_resend);
        let indices = words.iter().enumerate().flat_map(|(w, &bits)| {
            (0..64)
                .filter(move |b| bits & (1u64 << b) != 0)
                .map(move |b| w * 64 + b)
        });
        let o = &self.inflight[idx];
        let p = self.data_packet(o);
        let piece = wire::piece_size(self.cfg.max_datagram);
        let (mut n, mut bytes) = (0u64, 0u64);
        for k in indices.clone() {
            n += 1;
            bytes += (o.frame.len() - k * piece).min(piece) as u64;
        }
        self.train =
            wire::encode_fragments(&p, self.cfg.checksum, self.cfg.max_datagram, indices, out)
                .expect("FNACK indices were checked against the packet");
        // The packet's timeout counts from this resend (and it gives no round-trip sample).
        let o = &mut self.inflight[idx];
        o.last_sent = Some(now);
        o.retransmitted = true;
        self.stats.frags_retransmitted += n;
        self.stats.bytes_retransmitted += bytes;
    }

    /// Run the timers and encode the next packet to send into `out`; false when nothing
    /// is to be sent now. Call until false.
    pub fn poll_transmit(&mut self, now: Instant, out: &mut Vec<u8>) -> bool {
        self.clock = Some(now);
        self.train = 0;
        self.run_timers(now);
        // Acknowledgements first: they never wait behind data. Requests for pieces
        // before a NACK, so that the sender knows which holes are being recovered piece
        // by piece when the NACK arrives.
        if let Some((seq, base, bits)) = self.fnacks.pop_front() {
            let p = Packet {
                kind: Kind::FragNack,
                src: self.me,
                dst: self.peer,
                epoch: self.epoch,
                seq,
                ack: base,
                sack: bits,
                payload: &[],
            };
            wire::encode(&p, self.cfg.checksum, out).expect("control packets have no payload");
            self.stats.frag_nacks_sent += 1;
            return true;
        }
        if self.nack_now {
            self.control(Kind::Nack, out);
            return true;
        }
        if self.ack_now || self.ack_due.is_some_and(|t| t <= now) {
            self.control(Kind::Ack, out);
            return true;
        }
        if let Some(i) = self.inflight.iter().position(|o| !o.frag_resend.is_empty()) {
            self.fragments(i, now, out);
            return true;
        }
        if let Some(i) = self.inflight.iter().position(|o| o.resend) {
            let o = &mut self.inflight[i];
            o.resend = false;
            o.retransmitted = true;
            o.last_sent = Some(now);
            // A whole resend carries every piece the receiver asked for.
            o.frag_resend.clear();
            self.stats.retransmitted += 1;
            self.stats.bytes_retransmitted += o.frame.len() as u64;
            self.data(i, out);
            return true;
        }
        if self.inflight.len() < self.cfg.window as usize {
            if let Some(frame) = self.backlog.pop_front() {
                let seq = self.next_seq;
                self.next_seq = seq.wrapping_add(1);
                if self.inflight.is_empty() {
                    self.progress_at = Some(now);
                }
                self.inflight.push_back(Outstanding {
                    seq,
                    frame,
                    first_sent: Some(now),
                    last_sent: Some(now),
                    retransmitted: false,
                    sacked: false,
                    resend: false,
                    frag_resend: Vec::new(),
                    partial_at_peer: false,
                });
                self.stats.data_sent += 1;
                self.data(self.inflight.len() - 1, out);
                return true;
            }
        }
        false
    }

    fn run_timers(&mut self, now: Instant) {
        // Our own stall (descheduled under oversubscription, or computing without polling)
        // is not the peer's silence: move the give-up clock forward over it.
        let gap = self
            .timers_at
            .map_or(Duration::ZERO, |t| now.saturating_duration_since(t));
        self.timers_at = Some(now);
        // Trains that stopped arriving: ask for all their missing pieces. After a stall of
        // ours (more than two timeouts since the last timer run: descheduled, or a driver
        // that did not read its socket) the missing pieces may be waiting in the socket
        // buffer: put the request off once, by one timeout, so that they are read first.
        let (timeout, max) = (self.reassembly_timeout(), self.cfg.rto_max);
        let stalled = gap > 2 * timeout;
        for (&seq, part) in self.partial.iter_mut() {
            if now >= part.deadline(timeout, max) {
                if stalled && !part.postponed {
                    part.postponed = true;
                    part.last_at = now;
                    continue;
                }
                part.postponed = false;
                part.asked.iter_mut().for_each(|a| *a = false);
                let before = self.fnacks.len();
                part.request(seq, true, &mut self.fnacks);
                self.stats.frag_nacks_by_timer += (self.fnacks.len() - before) as u64;
                part.last_at = now;
                part.timer_nacks += 1;
            }
        }
        if self.failed || self.inflight.is_empty() {
            return;
        }
        if gap > STALL {
            if let Some(t) = self.progress_at.as_mut() {
                *t = (*t + gap).min(now);
            }
        }
        if self.unanswered >= self.cfg.give_up_retries
            && self
                .progress_at
                .is_some_and(|t| now.duration_since(t) >= self.cfg.give_up_after)
        {
            self.failed = true;
            return;
        }
        let rto = self.rto();
        if let Some(o) = self.inflight.iter_mut().find(|o| !o.sacked) {
            if !o.resend && o.last_sent.is_some_and(|t| now.duration_since(t) >= rto) {
                o.resend = true;
                self.backoff += 1;
                self.stats.timeouts += 1;
                // After our own stall the timer expired because of us: not unanswered.
                if gap <= STALL {
                    self.unanswered += 1;
                }
            }
        }
    }

    /// Feed a packet that [`wire::decode`] accepted and that the caller matched to this
    /// link (source rank and epoch).
    pub fn on_packet(&mut self, now: Instant, p: &Packet<'_>) {
        self.on_packet_placing(now, p, &mut Keep);
    }

    /// [`Link::on_packet`], with the payloads `placement` takes going straight to their
    /// destination.
    pub fn on_packet_placing(
        &mut self,
        now: Instant,
        p: &Packet<'_>,
        placement: &mut dyn Placement,
    ) {
        self.clock = Some(now);
        // Any packet is a sign of life: a peer that answers but cannot take our data yet
        // (receiver not ready) is slow, not failed.
        self.unanswered = 0;
        if self.progress_at.is_some() {
            self.progress_at = Some(now);
        }
        match p.kind {
            Kind::Data => {
                if let Some(d) = self.admit(p.seq) {
                    let len = p.payload.len();
                    let keep = placement.place(p.seq, p.payload, len, 0, p.payload);
                    self.store(d, p.payload[..keep.map_or(len, |k| k.min(len))].to_vec());
                }
            }
            Kind::Frag => self.on_fragment(now, p, placement),
            Kind::Ack | Kind::Nack => self.on_ack(now, p.ack, p.sack, p.kind == Kind::Nack),
            Kind::FragNack => self.on_fragment_nack(p.seq, p.ack, p.sack),
            // The driver checks and applies moves (`crate::restart`); never a link's.
            Kind::Move => {}
        }
    }

    /// An FNACK: mark the pieces asked for to be resent (ignored for a packet no longer
    /// in flight or already selectively acknowledged, and for indices beyond its pieces).
    fn on_fragment_nack(&mut self, seq: u32, base: u32, bits: u32) {
        let max_datagram = self.cfg.max_datagram;
        let Some(o) = self.inflight.iter_mut().find(|o| o.seq == seq && !o.sacked) else {
            return;
        };
        let count = wire::fragment_count(o.frame.len(), max_datagram);
        if count < 2 {
            return;
        }
        o.partial_at_peer = true;
        for i in (0..32).filter(|i| bits & (1 << i) != 0) {
            let k = base as usize + i;
            if k >= count {
                break;
            }
            if o.frag_resend.is_empty() {
                o.frag_resend = vec![0; count.div_ceil(64)];
            }
            o.frag_resend[k / 64] |= 1 << (k % 64);
        }
    }

    /// Where DATA packet `seq` goes in the reorder buffer, or `None` when it is a
    /// duplicate, outside the window or cannot be taken now (receiver not ready).
    fn admit(&mut self, seq: u32) -> Option<usize> {
        let d = self.window_slot(seq)?;
        if d == 0 && self.delivered.len() >= self.cfg.rx_limit {
            // Receiver not ready: restate where we are, which also tells the sender we
            // are alive (InfiniBand's RNR NAK).
            self.stats.not_ready_drops += 1;
            self.ack_now = true;
            return None;
        }
        Some(d)
    }

    /// The reorder slot of `seq`, or `None` (counted as a duplicate) when it is not in
    /// the window or already there.
    fn window_slot(&mut self, seq: u32) -> Option<usize> {
        let d = dist(seq, self.expected);
        if d < 0 || d >= self.cfg.window as i32 {
            // Old (our ACK was lost) or impossible: say again where we are.
            self.stats.duplicates += 1;
            self.ack_now = true;
            return None;
        }
        let d = d as usize;
        if self.reorder[d].is_some() {
            self.stats.duplicates += 1;
            return None;
        }
        Some(d)
    }

    /// A FRAG piece: into its packet's reassembly buffer; the packet is taken as DATA
    /// once every piece is in (pieces of packets below the window or already complete
    /// are duplicates).
    fn on_fragment(&mut self, now: Instant, p: &Packet<'_>, placement: &mut dyn Placement) {
        if self.window_slot(p.seq).is_none() {
            return;
        }
        // This piece overtook what is missing at the tails of earlier trains.
        for (&seq, part) in self.partial.iter_mut() {
            if dist(seq, p.seq) < 0 {
                part.later += 1;
                if part.later == DUP_THRESH {
                    // The timer counts from this request: asking again before the
                    // answer could be back would resend the same pieces twice.
                    if part.request(seq, false, &mut self.fnacks) {
                        part.last_at = now;
                    }
                }
            }
        }
        let (offset, total, piece) = wire::fragment_fields(p.ack, p.sack);
        let i = offset / piece;
        let fits = |part: &Partial| part.total == total && part.piece == piece;
        if !self.partial.get(&p.seq).is_some_and(fits) {
            // A new train (or another cut of the same packet, which one sender's config
            // cannot make: start over with this one). When its first piece comes first
            // and its payload can go straight to its destination, only the head is kept.
            let mut part = Partial::new(total, piece, now, Vec::new());
            match (i == 0)
                .then(|| placement.place(p.seq, p.payload, total, 0, p.payload))
                .flatten()
            {
                Some(keep) => {
                    part.buf = p.payload[..keep.min(p.payload.len())].to_vec();
                    part.placing = Some(keep);
                }
                None => part.buf = vec![0; total],
            }
            self.partial.insert(p.seq, part);
        } else if self.partial[&p.seq].have[i] {
            self.stats.duplicate_pieces += 1;
            return;
        }
        let part = self.partial.get_mut(&p.seq).unwrap();
        if part.placing.is_none() && !part.have[i] {
            part.buf[offset..offset + p.payload.len()].copy_from_slice(p.payload);
            if i == 0 {
                // Piece 0 came late: place it and the pieces before it, if it can go.
                if let Some(keep) = placement.place(p.seq, p.payload, total, 0, p.payload) {
                    for j in (1..part.have.len()).filter(|&j| part.have[j]) {
                        let (s, e) = (j * piece, ((j + 1) * piece).min(total));
                        placement.place(p.seq, &part.buf[..keep], total, s, &part.buf[s..e]);
                    }
                    part.buf.truncate(keep);
                    part.placing = Some(keep);
                }
            }
        } else if i > 0 {
            // Placing: straight to the destination (dropped if it is gone meanwhile: its
            // reply is then dropped whole when delivered).
            let keep = part.placing.unwrap_or(0);
            let head = &part.buf[..keep.min(part.buf.len())];
            placement.place(p.seq, head, total, offset, p.payload);
        }
        part.have[i] = true;
        part.asked[i] = false;
        part.missing -= 1;
        part.later = 0;
        part.last_at = now;
        part.timer_nacks = 0;
        part.postponed = false;
        if part.missing > 0 {
            part.seen_max = part.seen_max.max(i + 1);
            if part.seen_max > DUP_THRESH as usize {
                part.request(p.seq, false, &mut self.fnacks);
            }
        }
        if part.missing == 0 {
            let buf = self.partial.remove(&p.seq).unwrap().buf;
            if let Some(d) = self.admit(p.seq) {
                self.store(d, buf);
            }
        }
    }

    /// Take DATA packet `frame` into reorder slot `d` and deliver what is in order.
    fn store(&mut self, d: usize, frame: Vec<u8>) {
        self.stats.data_received += 1;
        self.reorder[d] = Some(frame);
        self.drain_reorder();
        if self.reorder.iter().any(|s| s.is_some()) {
            // A gap: ask for the holes now.
            self.nack_now = true;
        }
    }

    /// Move frames that are now in order from the reorder buffer to the delivery queue.
    fn drain_reorder(&mut self) {
        let mut moved = 0;
        while self.delivered.len() < self.cfg.rx_limit {
            match self.reorder.front_mut().and_then(Option::take) {
                Some(f) => {
                    self.delivered.push_back(f);
                    self.reorder.pop_front();
                    self.reorder.push_back(None);
                    self.expected = self.expected.wrapping_add(1);
                    moved += 1;
                }
                None => break,
            }
        }
        if moved > 0 {
            if !self.partial.is_empty() {
                let expected = self.expected;
                self.partial.retain(|&seq, _| dist(seq, expected) >= 0);
            }
            self.rx_since_ack += moved;
            if self.rx_since_ack >= self.cfg.ack_every {
                self.ack_now = true;
            } else if self.ack_due.is_none() {
                let now = self.clock.unwrap_or_else(Instant::now);
                self.ack_due = Some(now + self.cfg.ack_delay);
            }
        }
    }

    fn on_ack(&mut self, now: Instant, ack: u32, sack: u32, nack: bool) {
        // An acknowledgement of something never sent is bogus.
        if dist(ack, self.next_seq) > 0 {
            return;
        }
        // The round-trip sample comes from the newest packet acknowledged for the first
        // time by this ACK that was sent once only (Karn): a packet acknowledged
        // cumulatively after waiting for a hole was selectively acknowledged before, so
        // the wait does not inflate the estimate.
        let mut sample = None;
        let mut advanced = false;
        while let Some(o) = self.inflight.front() {
            if dist(o.seq, ack) >= 0 {
                break;
            }
            let o = self.inflight.pop_front().unwrap();
            if !o.retransmitted && !o.sacked {
                sample = o.first_sent.map(|t| now.saturating_duration_since(t));
            }
            advanced = true;
        }
        if advanced {
            self.backoff = 0;
            self.progress_at = Some(now);
        }
        for o in self.inflight.iter_mut() {
            let d = dist(o.seq, ack) - 1;
            if (0..32).contains(&d) && sack & (1 << d) != 0 {
                if !o.sacked && !o.retransmitted {
                    sample = o.first_sent.map(|t| now.saturating_duration_since(t));
                }
                o.sacked = true;
                o.resend = false;
                o.frag_resend = Vec::new();
                o.frame = Vec::new();
            }
        }
        if let Some(sample) = sample {
            self.srtt = Some(match self.srtt {
                None => sample,
                Some(s) => (s * 7 + sample) / 8,
            });
        }
        if nack {
            // Resend the holes that at least DUP_THRESH later packets overtook (fewer is
            // likely reordering, not loss), unless they were (re)sent within one round trip
            // or the receiver recovers them piece by piece (FNACK).
            let guard = self.srtt.unwrap_or(self.cfg.rto_min);
            let mut later_sacked = 0;
            for o in self.inflight.iter_mut().rev() {
                if o.sacked {
                    later_sacked += 1;
                } else if later_sacked >= DUP_THRESH
                    && !o.partial_at_peer
                    && o.last_sent.is_none_or(|t| now.duration_since(t) >= guard)
                {
                    o.resend = true;
                }
            }
        }
    }
}
