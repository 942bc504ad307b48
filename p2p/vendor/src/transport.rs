//! The vendor transport: Tsunagi messages as vendor MPI messages on a duplicate of the
//! vendor's world communicator (see [`crate::frame`] for their form).
//!
//! Eager messages (up to the eager limit): each vendor message is an `MPI_Isend` from a
//! buffer the transport owns (the [`Transport`] contract frees the caller's buffer on
//! return), completed later by `MPI_Test`. Receives: a ring of [`POSTED_AHEAD`] receives
//! posted ahead (persistent, `MPI_Recv_init` from any source under any tag into buffers of
//! the transport's, each tested by `MPI_Test` and started again by `MPI_Start` once
//! taken), so that a poll with nothing
//! arrived is one `MPI_Test` and a short message costs no probe, no count and no second
//! receive; where a thread blocks in the vendor's `MPI_Probe` (threaded engine, see
//! below) no receive is posted ahead, since such a receive would take the messages from
//! under the probe, and messages are taken by `MPI_Iprobe` and a receive into a pooled
//! buffer. A head also posts the receives of its rest (sent in pieces of the head's
//! payload length, [`frame::rest_chunk`], so that a short limit under the vendor's own
//! eager limit keeps every piece eager) straight into the message's own buffer; rests
//! and read data travel on a second communicator, where no wildcard receive can take
//! them ([`frame::on_bulk`]). Messages of one peer are delivered in arrival
//! order: while a long message of a peer waits for its rest, that peer's later messages
//! queue behind it.
//!
//! Receiving into the posted buffer ([`Transport::poll_placing`], seed 002): when a head
//! arrives and the request layer has a receive posted for it
//! ([`tsunagi_p2p::Arrivals::claim`]), the first part is copied into that receive's buffer
//! and the vendor receives of the rest's pieces are posted straight behind it, so the
//! rest lands where the application wants it and the request layer copies nothing; a
//! claimed message does not hold back its peer's later messages (it is matched already). A whole message (up to the
//! short limit) lands in a buffer posted ahead and is copied out as before: which receive
//! it is for shows only in its header, after the vendor has put it somewhere.
//!
//! Larger messages go by the request layer's single-copy rendezvous
//! ([`Transport::read_remote`]): the sender's RTS names the address of its data, and the
//! receiver, once matched, asks the sender for the bytes ([`frame::TAG_GET`]); the
//! sender's transport answers with `MPI_Isend`s from that address, which the request
//! layer keeps untouched until the receiver's FIN, and the receiver posts vendor receives
//! straight into the user's buffer once those bytes wait in the vendor. Neither side
//! copies: only the vendor moves the bytes, as it would for the application alone. Reads
//! are non-blocking ([`Transport::start_read`], [`Transport::test_read`]: a receiver keeps
//! several in flight, each peer's data matched to its receives in the order asked); a
//! reader that tests its read serves the other peers' requests meanwhile, and a request
//! that came before the bytes is served before the receives that let the vendor move
//! them are posted (the vendor may move them synchronously inside a call, Open MPI by
//! CMA), so reads that cross run at the same time instead of one after the other
//! (`Core::start_read`).
//!
//! Idle waiting (see [`VendorEvents`]): in the threaded engine with the vendor at
//! `MPI_THREAD_MULTIPLE`, the progress thread blocks in the vendor's `MPI_Probe` while
//! nothing of ours is in flight, and a message the process sends itself
//! ([`frame::TAG_WAKE`]) ends it; otherwise an idle rank naps for at most [`NAP`] between
//! non-blocking polls, so the polling engine alternates the vendor with the other
//! transports.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tsunagi_p2p::boot::{Bootstrap, Reach, StartInfo, Starting, TransportFactory};
use tsunagi_p2p::futex::DoorbellWords;
use tsunagi_p2p::placing::SinkArrivals;
use tsunagi_p2p::{
    Arrivals, EventSource, Header, P2pError, Placement, Rank, ReadId, Sink, Transport,
    TransportCaps, TransportCounters,
};

use crate::frame::{self, First, HEAD_PREFIX, TAG_GET, TAG_GET_DATA, TAG_REST, TAG_WAKE};
use crate::link::{Link, Req, VendorLink};
use crate::vendor::{self, Flavor, Vendor};

/// Messages up to this many payload bytes go eagerly (copied by the transport into its
/// send buffers; at the receiver a head's rest lands straight in a posted receive, the
/// rest is copied out); above it, by the single-copy rendezvous (no copy of ours: the
/// vendor moves the bytes from the sender's buffer into the receiver's, after two more
/// vendor messages, RTS and memory request). Per vendor, from the session 9 sweep in
/// `docs/vendor-mpi.md` (the lowest ping-pong latency with the short limit below; over
/// MPICH a message cut into pieces that the vendor carries eagerly beats MPICH's own
/// rendezvous up to 128 KiB). `TSUNAGI_VENDOR_EAGER` overrides it.
pub fn default_eager_limit(flavor: Flavor) -> usize {
    match flavor {
        Flavor::Mpich => 128 * 1024,
        Flavor::OpenMpi => 16 * 1024,
    }
}

fn eager_limit(flavor: Flavor) -> Result<usize, P2pError> {
    match std::env::var("TSUNAGI_VENDOR_EAGER") {
        Err(_) => Ok(default_eager_limit(flavor)),
        Ok(s) => match s.trim().parse::<usize>() {
            Ok(n) if n <= MAX_PAYLOAD => Ok(n),
            _ => Err(P2pError::Other(format!(
                "TSUNAGI_VENDOR_EAGER={s}: expected a byte count up to {MAX_PAYLOAD}"
            ))),
        },
    }
}
/// The largest payload of one message (rendezvous data is cut into chunks of this).
pub const MAX_PAYLOAD: usize = 1024 * 1024;
/// Outstanding vendor sends beyond which `try_send` reports no room.
const MAX_SENDS: usize = 4096;
/// Bytes in outstanding vendor sends beyond which `try_send` reports no room.
const MAX_SEND_BYTES: usize = 64 << 20;
/// First vendor messages received per poll at most (other transports get their turn).
const PROBES_PER_POLL: usize = 64;
/// Receives posted ahead for first messages (polling; see the module doc). More let a
/// burst land in the transport's buffers straight away rather than in the vendor's
/// unexpected queue; each costs a buffer of the short limit. `TSUNAGI_VENDOR_AHEAD`
/// overrides it (0: probe for messages, as where a thread blocks in the vendor).
pub const POSTED_AHEAD: usize = 8;
fn posted_ahead() -> Result<usize, P2pError> {
    match std::env::var("TSUNAGI_VENDOR_AHEAD") {
        Err(_) => Ok(POSTED_AHEAD),
        Ok(s) => match s.trim().parse::<usize>() {
            Ok(n) if n <= 1024 => Ok(n),
            _ => Err(P2pError::Other(format!(
                "TSUNAGI_VENDOR_AHEAD={s}: expected a count of receives to post ahead, 0 (probe instead) to 1024"
            ))),
        },
    }
}

/// With receives posted ahead, outstanding sends are tested once this many are
/// outstanding, or every this many polls: a send's completion only frees the transport's
/// copy (the caller's buffer was free at once), so testing it at every poll would double
/// the vendor calls of an idle poll.
const SEND_TEST_EVERY: usize = 16;

/// The default short limit (payload bytes carried whole with the header; a longer
/// payload's rest follows in pieces of this size, [`frame::rest_chunk`]) per vendor, from
/// the session 9 sweep in `docs/vendor-mpi.md` (lowest median ping-pong latency over
/// 2–64 KiB, at real-time priority): for MPICH 4.0.2 (UCX) 8 KiB, the largest message its
/// shared memory carries without a rendezvous handshake; for Open MPI 4.1.4 2 KiB, pieces
/// within vader's 4 KiB eager fragment. `TSUNAGI_VENDOR_SHORT` overrides it. Ranks may
/// differ when no receives are posted ahead: a receiver takes a first message of any
/// length up to the largest payload.
pub fn default_short_limit(flavor: Flavor) -> usize {
    match flavor {
        Flavor::Mpich => 8 * 1024,
        Flavor::OpenMpi => 2 * 1024,
    }
}

fn short_limit(flavor: Flavor) -> Result<usize, P2pError> {
    match std::env::var("TSUNAGI_VENDOR_SHORT") {
        Err(_) => Ok(default_short_limit(flavor)),
        Ok(s) => match s.trim().parse::<usize>() {
            Ok(n) if n <= MAX_PAYLOAD => Ok(n),
            _ => Err(P2pError::Other(format!(
                "TSUNAGI_VENDOR_SHORT={s}: expected a byte count up to {MAX_PAYLOAD}"
            ))),
        },
    }
}

/// A message received but not yet delivered.
struct Arrived {
    hdr: Header,
    /// The whole payload; for a long message, its rest is being received into
    /// `payload[first..]` by the vendor requests `rest` (one per piece, in order).
    payload: Vec<u8>,
    rest: Vec<Req>,
}

/// A claimed message's rest, being received straight into the posted receive's buffer.
struct Placing {
    /// The vendor receives of the rest's pieces not yet seen complete (empty: all in).
    rest: Vec<Req>,
    /// The sender (vendor rank) and the request layer's name of the receive.
    peer: Rank,
    token: u64,
    /// Payload bytes, for the counters.
    len: usize,
}

/// A read in flight: the receives of its bytes not yet seen complete, posted once its
/// bytes are on their way ([`Core::test_read`]); until then `into` says where they go
/// (the peer, the address of the destination and its length).
struct Read {
    recvs: Vec<Req>,
    into: Option<(Rank, usize, usize)>,
}

/// A receive posted ahead and the buffer it fills.
struct Ahead {
    req: Req,
    buf: Vec<u8>,
}

/// The vendor transport's state, shared by its node and remote registrations.
pub(crate) struct Core {
    link: Box<dyn Link>,
    rank: Rank,
    size: usize,
    short: usize,
    /// Receives posted ahead, in posting order from `next` on (the vendor fills them in
    /// that order, so taking them in it keeps every peer's order); empty where messages
    /// are probed instead.
    ahead: Vec<Ahead>,
    next: usize,
    /// Polls since the sends were last tested (receives posted ahead only).
    polls: usize,
    /// Reads in flight by id ([`Core::start_read`]); `None` is a free id.
    reads: Vec<Option<Read>>,
    /// Ids of the reads whose receives are not posted yet, in the order asked (a peer
    /// answers requests in order, and its data meets the receives in that order).
    unposted: VecDeque<usize>,
    /// Memory requests taken by a poll that also delivered messages, answered at the next
    /// call (see [`Core::poll_placing`]).
    held: Vec<(Rank, [u8; frame::GET_BYTES])>,
    /// Whether `accept` holds memory requests rather than answering them.
    hold_gets: bool,
    /// Calls of `test_read` (sends are tested every 64th).
    read_tests: u32,
    /// Outstanding sends, oldest first: the vendor request and the buffer it reads.
    sends: VecDeque<(Req, Vec<u8>)>,
    /// Scratch of `test_sends` (kept to save an allocation per test).
    send_ids: Vec<Req>,
    send_done: Vec<usize>,
    send_bytes: usize,
    /// Per peer (vendor rank), messages received and not yet delivered, in order.
    inbox: Vec<VecDeque<Arrived>>,
    queued: usize,
    /// Where first messages are received (the pooled buffer).
    scratch: Vec<u8>,
    /// Larger buffers to reuse (send copies, long payloads), by size class
    /// ([`Pool`]): fresh ones cost a malloc and, once freed back to the system, page faults.
    pool: Pool,
    /// Small send buffers to reuse (capacity [`SMALL_BUF`]).
    small: Vec<Vec<u8>>,
    /// Claimed messages whose rest is on its way into the receive's buffer.
    placing: Vec<Placing>,
    /// MPI_T's counters ([`Transport::count_into`]), once asked.
    counters: Option<&'static TransportCounters>,
    events: Arc<VendorEvents>,
}

/// Size classes of the pool: capacities 2^k for k in `POOL_LOW..=POOL_HIGH` (16 KiB to
/// 2 MiB, which holds the largest payload with its head).
const POOL_LOW: u32 = 14;
const POOL_HIGH: u32 = 21;
/// Bytes kept per size class at most (at least 2 buffers): a window of 64 messages of
/// 32 KiB in flight (`npb-tests/bench/p2p.c`) stays pooled.
const POOL_CLASS_BYTES: usize = 4 << 20;
/// Send buffers of small messages all have this capacity and are kept for reuse: a
/// malloc and a free per message were a tenth of the transport's own cost of a short
/// send (callgrind, docs/vendor-mpi.md).
const SMALL_BUF: usize = 8 * 1024;
/// Small send buffers kept at most (one per outstanding send in a burst).
const SMALL_MAX: usize = 256;

impl Core {
    /// A transport over `link` with `ahead` receives posted ahead (0: probe for messages).
    pub(crate) fn new(link: Box<dyn Link>, short: usize, ahead: usize) -> Result<Core, P2pError> {
        let (rank, size) = (link.rank(), link.size());
        let mut core = Core {
            link,
            rank,
            size,
            short,
            ahead: Vec::with_capacity(ahead),
            next: 0,
            polls: 0,
            reads: Vec::new(),
            unposted: VecDeque::new(),
            held: Vec::new(),
            hold_gets: false,
            read_tests: 0,
            sends: VecDeque::new(),
            send_ids: Vec::new(),
            send_done: Vec::new(),
            send_bytes: 0,
            inbox: (0..size).map(|_| VecDeque::new()).collect(),
            queued: 0,
            scratch: vec![0; HEAD_PREFIX + short],
            pool: Pool::default(),
            small: Vec::new(),
            placing: Vec::new(),
            counters: None,
            events: Arc::new(VendorEvents::new(None)),
        };
        for _ in 0..ahead {
            // A first message is at most a head with `short` payload bytes; memory
            // requests (GET_BYTES) and wake-ups are shorter.
            let mut buf = vec![0u8; HEAD_PREFIX + short];
            // SAFETY: the buffer's heap storage stays in `core.ahead` (moving the Vec
            // does not move it) until `take_ahead` sees the receive complete; at
            // MPI_Finalize the shim cancels the receive before the Core could go.
            let req = unsafe { core.link.irecv_any(buf.as_mut_ptr(), buf.len())? };
            core.ahead.push(Ahead { req, buf });
        }
        Ok(core)
    }

    /// Whether nothing of ours is in flight in the vendor (no send to test, no rest of a
    /// message to wait for): then only a new message can give a poll work, and a thread
    /// may block in the vendor's probe. Published for [`VendorEvents::sleep`].
    fn publish_quiet(&self) {
        let quiet = self.sends.is_empty()
            && self.queued == 0
            && self.held.is_empty()
            && self.placing.is_empty()
            && self.reads.iter().all(Option::is_none);
        self.events.quiet.store(quiet, Ordering::SeqCst);
    }

    /// An empty buffer of at least `cap` bytes' capacity, from the pool when one fits.
    fn take_buf(&mut self, cap: usize) -> Vec<u8> {
        if cap <= SMALL_BUF {
            return match self.small.pop() {
                Some(mut b) => {
                    b.clear();
                    b
                }
                None => Vec::with_capacity(SMALL_BUF),
            };
        }
        self.pool.take(cap)
    }

    fn give_buf(&mut self, buf: Vec<u8>) {
        if buf.capacity() == SMALL_BUF {
            if self.small.len() < SMALL_MAX {
                self.small.push(buf);
            }
        } else {
            self.pool.give(buf);
        }
    }

    fn isend(&mut self, peer: Rank, tag: i32, buf: Vec<u8>) -> Result<(), P2pError> {
        // SAFETY: buf's heap storage stays where it is until the request completes: the
        // Vec is moved into `sends` (moving a Vec does not move its buffer) and dropped
        // only after `test` reported completion (or, at MPI_Finalize, after the shim waited
        // for every outstanding request).
        let req = unsafe { self.link.isend(buf.as_ptr(), buf.len(), peer, tag)? };
        self.send_bytes += buf.len();
        self.sends.push_back((req, buf));
        Ok(())
    }

    /// Test the outstanding sends (one vendor call for all, [`Link::test_some`]); drop
    /// the buffers of those complete.
    fn test_sends(&mut self) -> Result<(), P2pError> {
        if self.sends.len() == 1 {
            if self.link.test(self.sends[0].0)? {
                let (_, buf) = self.sends.pop_front().expect("one send");
                self.send_bytes -= buf.len();
                self.give_buf(buf);
            }
            return Ok(());
        }
        let mut ids = std::mem::take(&mut self.send_ids);
        let mut done = std::mem::take(&mut self.send_done);
        ids.clear();
        ids.extend(self.sends.iter().map(|s| s.0));
        let tested = self.link.test_some(&ids, &mut done);
        // Latest first, so that the positions of the others stay put.
        done.sort_unstable();
        for &i in done.iter().rev() {
            let (_, buf) = self.sends.remove(i).expect("a position among the sends");
            self.send_bytes -= buf.len();
            self.give_buf(buf);
        }
        self.send_ids = ids;
        self.send_done = done;
        tested
    }

    pub(crate) fn try_send(
        &mut self,
        peer: Rank,
        hdr: &Header,
        payload: &[u8],
    ) -> Result<bool, P2pError> {
        if payload.len() > MAX_PAYLOAD {
            return Err(P2pError::Other(format!(
                "vendor: payload of {} bytes exceeds max_payload {MAX_PAYLOAD}",
                payload.len()
            )));
        }
        if peer as usize >= self.size || peer == self.rank {
            return Err(P2pError::Unsupported(format!(
                "vendor: rank {peer} is not a peer in the vendor's world of {}",
                self.size
            )));
        }
        if self.sends.len() >= MAX_SENDS || self.send_bytes >= MAX_SEND_BYTES {
            self.test_sends()?;
            if self.sends.len() >= MAX_SENDS || self.send_bytes >= MAX_SEND_BYTES {
                // The caller retries after progress: a progress thread blocked in the
                // vendor must wake up and test the sends that hold the room.
                self.events.notify();
                return Ok(false);
            }
        }
        let long = payload.len() > self.short;
        let mut first = self.take_buf(HEAD_PREFIX + payload.len().min(self.short));
        let tag = frame::first_into(hdr, payload, self.short, &mut first);
        self.events.quiet.store(false, Ordering::SeqCst);
        self.isend(peer, tag, first)?;
        if long {
            let rest = &payload[self.short..];
            for piece in rest.chunks(frame::rest_chunk(self.short, rest.len())) {
                let mut buf = self.take_buf(piece.len());
                buf.extend_from_slice(piece);
                self.isend(peer, TAG_REST, buf)?;
            }
        }
        if let Some(c) = self.counters {
            c.sent(payload.len());
        }
        // Requests the last poll held (see `poll_placing`) wait no longer than our next call.
        self.serve_held()?;
        Ok(true)
    }

    /// Answer a memory request from `src` (the bytes of a [`TAG_GET`] message): send the
    /// bytes asked for from where they are.
    fn serve_get(&mut self, src: Rank, request: &[u8]) -> Result<(), P2pError> {
        let (addr, len) = frame::parse_get(request)
            .map_err(|e| P2pError::Other(format!("vendor: from rank {src}: {e}")))?;
        for (at, n) in frame::get_pieces(len as usize) {
            // SAFETY: the request names memory of this process that the request layer
            // advertised in an RTS (the address of a send's data) and keeps valid and
            // unchanged until the receiver's FIN, which the receiver sends only after
            // these sends' bytes arrived (it waits for its receives of them). Peers of one
            // job are trusted with this memory exactly as the shared-memory transport's
            // CMA reads trust them. `parse_get` rejected ranges that wrap. The send request
            // is tested and dropped like any other; it owns no buffer.
            let req = unsafe {
                self.link
                    .isend((addr as usize + at) as *const u8, n, src, TAG_GET_DATA)?
            };
            self.sends.push_back((req, Vec::new()));
        }
        self.events.quiet.store(false, Ordering::SeqCst);
        Ok(())
    }

    /// Answer the memory requests held by a poll.
    fn serve_held(&mut self) -> Result<(), P2pError> {
        if self.held.is_empty() {
            return Ok(());
        }
        for (src, request) in std::mem::take(&mut self.held) {
            self.serve_get(src, &request)?;
        }
        Ok(())
    }

    /// Answer every memory request waiting (first messages that came meanwhile queue).
    fn serve_gets(&mut self) -> Result<(), P2pError> {
        self.serve_held()?;
        if !self.ahead.is_empty() {
            self.take_ahead(None)?;
            return Ok(());
        }
        while let Some((src, count)) = self.link.iprobe_tag(TAG_GET)? {
            let mut request = [0u8; frame::GET_BYTES];
            if count != request.len() {
                return Err(P2pError::Other(format!(
                    "vendor: from rank {src}: a memory request of {count} bytes (expected {})",
                    frame::GET_BYTES
                )));
            }
            self.link.recv_probed(&mut request, src, TAG_GET)?;
            self.serve_get(src, &request)?;
        }
        Ok(())
    }

    /// Single-copy read: receive `dst.len()` bytes at `addr` in `peer`'s memory straight
    /// into `dst`, the vendor moving them; waits, answering other processes' requests
    /// meanwhile ([`Core::start_read`], then [`Core::test_read`] until done).
    pub(crate) fn read_remote(
        &mut self,
        peer: Rank,
        addr: u64,
        dst: &mut [u8],
    ) -> Result<(), P2pError> {
        // SAFETY: `dst` is borrowed mutably until this function returns, which it does
        // only once the read is done (or failed, see `test_read`).
        let id = unsafe { self.start_read(peer, addr, dst.as_mut_ptr(), dst.len())? };
        let mut spins = 0u32;
        while !self.test_read(id)? {
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(64) {
                // On an oversubscribed node the sender may need this CPU to answer.
                std::thread::yield_now();
            }
        }
        Ok(())
    }

    /// Start a single-copy read: ask `peer` for the bytes ([`TAG_GET`]); it answers with
    /// sends from where they are, received into `dst..dst+len` by receives that
    /// [`Core::test_read`] posts once the first of them waits in the vendor, after
    /// answering the requests that came before it.
    ///
    /// Why: the vendor may move a large message's bytes inside any of its calls once both
    /// the send and the receive are posted (Open MPI's ob1 reads them by CMA,
    /// synchronously, in its progress: 4.5 ms for IS.A's 8 MB), and a process inside that
    /// call answers nobody. Two processes reading from each other (every exchange: an
    /// all-to-all, CG's allgatherv) read one after the other when the first to receive
    /// the other's bytes answers the other's request only after its own read (IS.A/2 over
    /// Open MPI: 7 ms per all-to-all against Open MPI's 4; docs/vendor-mpi.md, session
    /// 11). A peer's request goes before its bytes (a poll holds the requests it takes
    /// while it delivers messages, answered after the reads those messages start: see
    /// [`Core::poll_placing`]), so once our bytes wait unexpected in the vendor, the
    /// request that came with them is ours to answer first.
    ///
    /// # Safety
    /// `dst..dst + len` must stay valid and untouched by anyone else until
    /// [`Core::test_read`] returns `Ok(true)` or an error for the returned id, and the
    /// caller tests the read until then.
    pub(crate) unsafe fn start_read(
        &mut self,
        peer: Rank,
        addr: u64,
        dst: *mut u8,
        len: usize,
    ) -> Result<ReadId, P2pError> {
        if peer as usize >= self.size || peer == self.rank {
            return Err(P2pError::Unsupported(format!(
                "vendor: rank {peer} is not a peer in the vendor's world of {}",
                self.size
            )));
        }
        if len == 0 {
            return Ok(ReadId::DONE);
        }
        if let Some(c) = self.counters {
            // Counted when started, as the request layer's wrapper did: the bytes come in
            // unless the job fails.
            c.read(len);
        }
        let ask = frame::get_request(addr, len as u64).to_vec();
        self.isend(peer, TAG_GET, ask)?;
        self.events.quiet.store(false, Ordering::SeqCst);
        let read = Read {
            recvs: Vec::new(),
            into: Some((peer, dst as usize, len)),
        };
        let id = match self.reads.iter().position(Option::is_none) {
            Some(i) => {
                self.reads[i] = Some(read);
                i
            }
            None => {
                self.reads.push(Some(read));
                self.reads.len() - 1
            }
        };
        self.unposted.push_back(id);
        // Our request went first; now the ones the last poll held.
        self.serve_held()?;
        Ok(ReadId(id as u64))
    }

    /// Post the receives of every read from `peer` not yet posted, in the order asked.
    fn post_reads(&mut self, peer: Rank) -> Result<(), P2pError> {
        let mut k = 0;
        while k < self.unposted.len() {
            let id = self.unposted[k];
            let into = self.reads[id].as_ref().and_then(|r| r.into);
            match into {
                Some((p, _, _)) if p != peer => {
                    k += 1;
                    continue;
                }
                _ => {
                    self.unposted.remove(k);
                }
            }
            let Some((_, dst, len)) = into else {
                continue;
            };
            let read = self.reads[id].as_mut().expect("an unposted read is live");
            read.into = None;
            let dst = dst as *mut u8;
            for (at, n) in frame::get_pieces(len) {
                // SAFETY: dst[at..at + n] lies inside dst..dst + len, which the caller of
                // `start_read` keeps valid and ours until `test_read` saw every one of
                // these receives complete. A vendor error leaves receives posted into the
                // buffer: the error ends the job (the request layer reports it as a
                // transport fault).
                read.recvs
                    .push(unsafe { self.link.irecv(dst.add(at), n, peer, TAG_GET_DATA)? });
            }
        }
        Ok(())
    }

    /// Whether the read `id` is done; if not, answer the peers' memory requests (the peer
    /// may be reading from this process at the same time) and now and then test the sends.
    /// A read's receives are posted once its bytes wait in the vendor, after the requests
    /// that came before them are answered (see [`Core::start_read`]).
    pub(crate) fn test_read(&mut self, id: ReadId) -> Result<bool, P2pError> {
        if id == ReadId::DONE {
            return Ok(true);
        }
        let Some(Some(read)) = self.reads.get(id.0 as usize) else {
            return Err(P2pError::Other(format!("vendor: no read {}", id.0)));
        };
        if let Some((peer, _, _)) = read.into {
            self.serve_held()?;
            if !self.link.iprobe_bulk(peer, TAG_GET_DATA)? {
                self.serve_gets()?;
                return Ok(false);
            }
            // The peer's bytes wait (for this read or an earlier one of the same peer,
            // posted here too, in order): answer what came before them, then take them.
            self.serve_gets()?;
            self.post_reads(peer)?;
        }
        let recvs = &mut self.reads[id.0 as usize]
            .as_mut()
            .expect("checked above")
            .recvs;
        let mut i = 0;
        while i < recvs.len() {
            if self.link.test(recvs[i])? {
                recvs.swap_remove(i);
            } else {
                i += 1;
            }
        }
        if recvs.is_empty() {
            self.reads[id.0 as usize] = None;
            return Ok(true);
        }
        self.serve_gets()?;
        self.read_tests = self.read_tests.wrapping_add(1);
        if self.read_tests.is_multiple_of(64) && !self.sends.is_empty() {
            self.test_sends()?;
        }
        Ok(false)
    }

    /// Deliver the queued messages of `peer` whose rest has arrived, in order.
    fn drain_peer(&mut self, peer: usize, rx: &mut dyn Arrivals) -> Result<usize, P2pError> {
        let mut n = 0;
        while let Some(front) = self.inbox[peer].front_mut() {
            if !front.rest.is_empty() && !rest_in(&mut *self.link, &mut front.rest)? {
                break;
            }
            let m = self.inbox[peer].pop_front().expect("front exists");
            self.queued -= 1;
            deliver(self.counters, rx, peer as Rank, &m.hdr, &m.payload);
            self.give_buf(m.payload);
            n += 1;
        }
        Ok(n)
    }

    /// Deliver what arrived to `sink` (claiming nothing).
    #[cfg(test)]
    pub(crate) fn poll(&mut self, sink: &mut Sink<'_>) -> Result<usize, P2pError> {
        self.poll_placing(&mut SinkArrivals(sink))
    }

    /// Deliver what arrived to `rx`, offering it each head whose receive may be posted.
    pub(crate) fn poll_placing(&mut self, rx: &mut dyn Arrivals) -> Result<usize, P2pError> {
        if !self.sends.is_empty() {
            self.polls += 1;
            if self.ahead.is_empty()
                || self.polls >= SEND_TEST_EVERY
                || self.sends.len() >= SEND_TEST_EVERY
            {
                self.polls = 0;
                self.test_sends()?;
            }
        }
        let mut n = 0;
        if self.queued > 0 {
            for p in 0..self.inbox.len() {
                if !self.inbox[p].is_empty() {
                    n += self.drain_peer(p, rx)?;
                }
            }
        }
        if !self.placing.is_empty() {
            n += self.test_placing(rx)?;
        }
        // Memory requests held by the last poll: no read followed it.
        self.serve_held()?;
        // Requests that come with messages are held until after the reads those messages
        // start (the request layer starts them when it matches, after this poll, in
        // `start_read`, which answers the held requests once its own has gone): a peer
        // that sends us its bytes before asking for ours reads after us, one after the
        // other (see `start_read`). A poll that delivered nothing answers them at once.
        self.hold_gets = true;
        let taken = if self.ahead.is_empty() {
            self.take_probed(rx)
        } else {
            self.take_ahead(Some(rx))
        };
        self.hold_gets = false;
        n += taken?;
        if n == 0 {
            self.serve_held()?;
        }
        self.publish_quiet();
        Ok(n)
    }

    /// Take the messages the receives posted ahead got, oldest first, posting each again;
    /// deliver to `rx` (or queue, without one).
    fn take_ahead(&mut self, mut rx: Option<&mut dyn Arrivals>) -> Result<usize, P2pError> {
        let mut n = 0;
        for _ in 0..PROBES_PER_POLL {
            let at = self.next;
            let Some((src, tag, count)) = self.link.test_any(self.ahead[at].req)? else {
                break;
            };
            let buf = std::mem::take(&mut self.ahead[at].buf);
            // A reborrow for this message alone (the trait object's lifetime shortened to it).
            let rx_now: Option<&mut dyn Arrivals> = match &mut rx {
                Some(r) => Some(&mut **r),
                None => None,
            };
            let taken = self.accept(src, tag, &buf[..count], rx_now);
            self.ahead[at].buf = buf;
            // SAFETY: as in `new`: the buffer is back in `self.ahead[at]` (its heap
            // storage never moved) and stays there until this receive completes.
            let restarted = unsafe { self.link.restart_any(self.ahead[at].req) };
            self.next = (at + 1) % self.ahead.len();
            restarted?;
            n += taken?;
        }
        Ok(n)
    }

    /// Take the messages `MPI_Iprobe` finds, receiving each into the pooled buffer.
    fn take_probed(&mut self, rx: &mut dyn Arrivals) -> Result<usize, P2pError> {
        let mut n = 0;
        for _ in 0..PROBES_PER_POLL {
            let Some((src, tag, count)) = self.link.iprobe()? else {
                break;
            };
            if src as usize >= self.size || count > HEAD_PREFIX + MAX_PAYLOAD {
                return Err(P2pError::Other(format!(
                    "vendor: rank {src} sent an unexpected message (tag {tag}, {count} bytes)"
                )));
            }
            let mut scratch = std::mem::take(&mut self.scratch);
            if count > scratch.len() {
                // A peer with a larger short limit: take it anyway.
                scratch.resize(count, 0);
            }
            let got = self.link.recv_probed(&mut scratch[..count], src, tag);
            let taken = got.and_then(|()| self.accept(src, tag, &scratch[..count], Some(&mut *rx)));
            self.scratch = scratch;
            n += taken?;
        }
        Ok(n)
    }

    /// One vendor message (`tag`, `bytes`) from `src` on the first-message communicator:
    /// a first message, delivered to `rx` when given and nothing of that peer waits
    /// before it, else queued; a memory request, answered; a wake-up, dropped.
    fn accept(
        &mut self,
        src: Rank,
        tag: i32,
        bytes: &[u8],
        rx: Option<&mut dyn Arrivals>,
    ) -> Result<usize, P2pError> {
        if tag == TAG_GET && (src as usize) < self.size {
            if self.hold_gets {
                let mut request = [0u8; frame::GET_BYTES];
                if bytes.len() != request.len() {
                    return Err(P2pError::Other(format!(
                        "vendor: from rank {src}: a memory request of {} bytes (expected {})",
                        bytes.len(),
                        frame::GET_BYTES
                    )));
                }
                request.copy_from_slice(bytes);
                self.held.push((src, request));
            } else {
                self.serve_get(src, bytes)?;
            }
            return Ok(0);
        }
        if tag == TAG_WAKE && src == self.rank && bytes.is_empty() {
            return Ok(0);
        }
        if src as usize >= self.size || frame::on_bulk(tag) || tag == TAG_WAKE {
            return Err(P2pError::Other(format!(
                "vendor: rank {src} sent an unexpected message (tag {tag}, {} bytes)",
                bytes.len()
            )));
        }
        let peer = src as usize;
        let first = frame::parse(tag, bytes, MAX_PAYLOAD)
            .map_err(|e| P2pError::Other(format!("vendor: from rank {src}: {e}")))?;
        match first {
            First::Whole { hdr, payload } => {
                if let Some(rx) = rx.filter(|_| self.inbox[peer].is_empty()) {
                    deliver(self.counters, rx, src, &hdr, payload);
                    return Ok(1);
                }
                let mut copy = self.take_buf(payload.len());
                copy.extend_from_slice(payload);
                self.inbox[peer].push_back(Arrived {
                    hdr,
                    payload: copy,
                    rest: Vec::new(),
                });
                self.queued += 1;
                Ok(0)
            }
            First::Head { hdr, total, first } => {
                let at = first.len();
                let mut rx = rx;
                if self.inbox[peer].is_empty() {
                    if let Some(p) = rx.as_deref_mut().and_then(|rx| rx.claim(src, &hdr)) {
                        self.place(src, p, total, first)?;
                        return Ok(0);
                    }
                }
                let mut payload = self.pool.take(total);
                payload.extend_from_slice(first);
                payload.resize(total, 0);
                // SAFETY: the receives write total - at bytes at payload[at..], inside
                // the Vec; its heap buffer does not move while the Vec sits in the
                // inbox, nothing reads it before `test` reports every receive complete,
                // and it is dropped only after that (or after the shim's finalize
                // waited for the receives).
                let rest = unsafe { self.irecv_rest(payload.as_mut_ptr(), at, total, src)? };
                self.inbox[peer].push_back(Arrived { hdr, payload, rest });
                self.queued += 1;
                match rx {
                    Some(rx) => self.drain_peer(peer, rx),
                    None => Ok(0),
                }
            }
        }
    }
}

impl Core {
    /// A claimed head (`first` of `total` payload bytes from `src`): the first part into
    /// the receive's buffer, and the rest's receive posted straight behind it.
    fn place(
        &mut self,
        src: Rank,
        p: Placement,
        total: usize,
        first: &[u8],
    ) -> Result<(), P2pError> {
        if p.len < total {
            // The request layer promised room for the whole payload.
            return Err(P2pError::Other(format!(
                "vendor: a receive of {} bytes was offered for a message of {total}",
                p.len
            )));
        }
        let at = first.len();
        // SAFETY: the claim gave `p.len >= total > at` writable bytes at `p.dst`, untouched
        // by anyone else until `placed`; `first` is the transport's own buffer (a receive
        // posted ahead or the scratch buffer), which cannot overlap the application's.
        unsafe { std::ptr::copy_nonoverlapping(first.as_ptr(), p.dst, at) };
        // SAFETY: the receives write total - at bytes at p.dst + at, inside the claimed
        // buffer (p.len >= total), which stays valid and ours until `placed` (called only
        // after `test` saw every one of them complete; a vendor error ends the job, and
        // the shim's finalize waits for the receives before the process goes on).
        let rest = unsafe { self.irecv_rest(p.dst, at, total, src)? };
        self.placing.push(Placing {
            rest,
            peer: src,
            token: p.token,
            len: total,
        });
        Ok(())
    }

    /// Tell `rx` of every claimed message whose rest is in.
    fn test_placing(&mut self, rx: &mut dyn Arrivals) -> Result<usize, P2pError> {
        let mut n = 0;
        let mut i = 0;
        while i < self.placing.len() {
            let done = rest_in(&mut *self.link, &mut self.placing[i].rest)?;
            if done {
                let p = self.placing.swap_remove(i);
                if let Some(c) = self.counters {
                    c.recvd(p.len);
                }
                rx.placed(p.peer, p.token);
                n += 1;
            } else {
                i += 1;
            }
        }
        Ok(n)
    }
}

impl Core {
    /// Post the receives of a head's rest from `src`: bytes `at..total` of the payload at
    /// `dst`, in pieces of [`frame::rest_chunk`] as the sender cut them (the head carried
    /// `at` payload bytes); the requests in posting order (empty when nothing is left).
    ///
    /// # Safety
    /// `dst..dst + total` must be writable, and neither read nor freed nor written by
    /// anyone else until every returned request has been tested complete.
    unsafe fn irecv_rest(
        &mut self,
        dst: *mut u8,
        at: usize,
        total: usize,
        src: Rank,
    ) -> Result<Vec<Req>, P2pError> {
        let chunk = frame::rest_chunk(at, total - at);
        let mut reqs = Vec::with_capacity((total - at).div_ceil(chunk));
        let mut off = at;
        while off < total {
            let len = chunk.min(total - off);
            // SAFETY: off + len <= total, so the piece lies inside the caller's buffer,
            // which the caller keeps for the receive (this function's contract); the
            // pieces do not overlap.
            reqs.push(unsafe { self.link.irecv(dst.add(off), len, src, TAG_REST)? });
            off += len;
        }
        Ok(reqs)
    }
}

/// Whether every receive of a rest is complete: tests them in posting order, forgetting
/// those complete (a request is never tested again once it was seen complete) and
/// stopping at the first still running.
fn rest_in(link: &mut dyn Link, rest: &mut Vec<Req>) -> Result<bool, P2pError> {
    let mut n = 0;
    while n < rest.len() && link.test(rest[n])? {
        n += 1;
    }
    rest.drain(..n);
    Ok(rest.is_empty())
}

/// Hand a message to the request layer, counting it first.
#[inline]
fn deliver(
    counters: Option<&'static TransportCounters>,
    rx: &mut dyn Arrivals,
    src: Rank,
    hdr: &Header,
    payload: &[u8],
) {
    if let Some(c) = counters {
        c.recvd(payload.len());
    }
    rx.deliver(src, hdr, payload);
}

/// Buffers kept for reuse in size classes of powers of two: a buffer of capacity
/// `c >= 2^k` serves any request up to `2^k` bytes, so it goes into class
/// `floor(log2 c)`, and a request of `n` bytes takes from class `ceil(log2 n)`; taking and
/// giving are O(1). Before (one list from 64 KiB up), send buffers of 8–64 KiB were
/// allocated and freed per message, and a burst of them (a window of 32 KiB sends)
/// returned its memory to the system and faulted it in again at the next burst.
#[derive(Default)]
struct Pool {
    classes: [Vec<Vec<u8>>; (POOL_HIGH - POOL_LOW + 1) as usize],
}

impl Pool {
    /// The class of a request of `cap` bytes (`None`: too large to pool).
    fn class_for_take(cap: usize) -> Option<usize> {
        let k = cap.max(1 << POOL_LOW).next_power_of_two().trailing_zeros();
        (k <= POOL_HIGH).then(|| (k - POOL_LOW) as usize)
    }

    /// An empty buffer of at least `cap` bytes' capacity.
    fn take(&mut self, cap: usize) -> Vec<u8> {
        match Self::class_for_take(cap) {
            Some(c) => match self.classes[c].pop() {
                Some(mut b) => {
                    b.clear();
                    b
                }
                // The class's whole size, so that the buffer serves the class when given back.
                None => Vec::with_capacity(1 << (c as u32 + POOL_LOW)),
            },
            None => Vec::with_capacity(cap),
        }
    }

    /// Keep `buf` for reuse if its class has room (a buffer below the smallest class is
    /// dropped).
    fn give(&mut self, buf: Vec<u8>) {
        let cap = buf.capacity();
        if cap < 1 << POOL_LOW {
            return;
        }
        let k = (usize::BITS - 1 - cap.leading_zeros()).min(POOL_HIGH);
        let class = &mut self.classes[(k - POOL_LOW) as usize];
        if class.len() < (POOL_CLASS_BYTES >> k).max(2) {
            class.push(buf);
        }
    }
}

/// The vendor's event source.
///
/// The vendor offers nothing to sleep on but its own blocking calls. Where the vendor runs
/// at `MPI_THREAD_MULTIPLE` (the threaded engine asks for it, [`vendor::init`]), a thread
/// that would sleep for a while and finds nothing of ours in flight in the vendor blocks
/// in `MPI_Probe` instead: a message from any peer ends it, and [`EventSource::notify`]
/// (shutdown, a send that found no room) sends this process an empty [`TAG_WAKE`] message
/// to end it. Everywhere else (the polling engine, which must take turns with the other
/// transports; a vendor below `MPI_THREAD_MULTIPLE`; something in flight, whose completion
/// a probe would not see) an idle rank naps for at most [`NAP`] and polls again.
///
/// Lost wake-ups: a sleeper counts itself in `blocked` and then checks the doorbell; a
/// notifier rings the doorbell and then reads `blocked` (all sequentially consistent), so
/// either the sleeper sees the ring and does not block, or the notifier sees the sleeper
/// and wakes it.
///
/// In the event registry (one wait over every transport, `tsunagi_p2p::registry`) the
/// vendor is a polled source: its descriptor is an eventfd that only [`EventSource::notify`]
/// makes readable (arrivals show on no descriptor), and every wait that covers the vendor
/// lasts at most [`NAP`] ([`EventSource::prepare_wait`]), after which the waiter polls the
/// vendor again. So a rank with the vendor and another transport (TCP to ranks outside the
/// vendor's world) sleeps in one wait, woken at once by the other transport's arrivals and
/// within a nap by the vendor's, under either engine.
pub struct VendorEvents {
    bell: DoorbellWords,
    /// Readable after a `notify` (the registry's wake-up); `None` if no eventfd could be
    /// made (then the vendor stays out of the registry and waiters take turns).
    wake_fd: Option<std::os::fd::OwnedFd>,
    /// The vendor to block in, when blocking is allowed.
    block_in: Option<&'static Vendor>,
    /// Threads inside `MPI_Probe` now (or about to be).
    blocked: AtomicUsize,
    /// Nothing of ours in flight in the vendor (set by the transport after each poll).
    quiet: AtomicBool,
}

/// The longest an idle rank sleeps before polling the vendor again, when it does not
/// block in the vendor.
pub const NAP: Duration = Duration::from_micros(100);
/// Sleeps at least this long may block in the vendor; shorter ones (a busy engine, a
/// timer due) nap.
const BLOCK_FROM: Duration = Duration::from_millis(1);

impl VendorEvents {
    fn new(block_in: Option<&'static Vendor>) -> VendorEvents {
        // SAFETY: a plain system call; the result is checked before use.
        let raw = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        // SAFETY: `raw` is a fresh descriptor that nothing else owns.
        let wake_fd = (raw >= 0).then(|| unsafe { std::os::fd::OwnedFd::from_raw_fd(raw) });
        VendorEvents {
            bell: DoorbellWords::default(),
            wake_fd,
            block_in,
            blocked: AtomicUsize::new(0),
            quiet: AtomicBool::new(true),
        }
    }

    /// Whether idle threads block in the vendor's `MPI_Probe`.
    pub fn blocks_in_vendor(&self) -> bool {
        self.block_in.is_some()
    }
}

impl EventSource for VendorEvents {
    fn prepare(&self) -> u64 {
        self.bell.prepare()
    }
    fn sleep(&self, token: u64, timeout: Duration) {
        if let Some(v) = self.block_in {
            if timeout >= BLOCK_FROM && self.quiet.load(Ordering::SeqCst) {
                self.blocked.fetch_add(1, Ordering::SeqCst);
                if self.bell.count.load(Ordering::SeqCst) as u64 == token {
                    // An error (the vendor shutting down under us) shows at the next poll.
                    let _ = v.probe_blocking();
                }
                self.blocked.fetch_sub(1, Ordering::SeqCst);
                self.bell.cancel();
                return;
            }
        }
        self.bell.sleep(token, timeout.min(NAP));
    }
    fn cancel(&self) {
        self.bell.cancel()
    }
    fn wait_fd(&self) -> Option<std::os::fd::RawFd> {
        self.wake_fd.as_ref().map(|fd| fd.as_raw_fd())
    }
    fn prepare_wait(&self) -> Duration {
        // Polled: nothing announces an arrival, so poll again after a nap at most.
        NAP
    }
    fn nap(&self) -> Option<Duration> {
        // Outside the vendor's own blocking probe (threaded engine, nothing in flight)
        // an arrival shows only to the next poll: every sleep here is a nap.
        Some(NAP)
    }
    fn end_wait(&self) {
        if let Some(fd) = &self.wake_fd {
            let mut v = 0u64;
            // SAFETY: reads at most 8 bytes into `v`; non-blocking.
            unsafe { libc::read(fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
        }
    }
    fn notify(&self) {
        self.bell.ring();
        if let Some(fd) = &self.wake_fd {
            let one = 1u64;
            // SAFETY: writes the 8 bytes of `one` to our eventfd; non-blocking (a counter
            // at its maximum refuses the write, and is readable anyway).
            unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
        }
        if let Some(v) = self.block_in {
            // One wake per blocked thread: each probe sees the message, but the first
            // thread to poll takes it away from the others.
            for _ in 0..self.blocked.load(Ordering::SeqCst) {
                let _ = v.wake_self(TAG_WAKE);
            }
        }
    }
}

static CORE: OnceLock<Arc<Mutex<Core>>> = OnceLock::new();

fn core() -> Result<Arc<Mutex<Core>>, P2pError> {
    let v = vendor::current().ok_or_else(|| {
        P2pError::Unsupported(
            "the vendor transport needs the job started by the vendor MPI's launcher with TSUNAGI_VENDOR set (mpirun --vendor mpich|openmpi)".into(),
        )
    })?;
    if let Some(c) = CORE.get() {
        return Ok(c.clone());
    }
    // A thread blocked in MPI_Probe would never see a message a receive posted ahead
    // took: probe for messages there instead.
    let ahead = if v.blocking { 0 } else { posted_ahead()? };
    let mut core = Core::new(Box::new(VendorLink(v)), short_limit(v.flavor)?, ahead)?;
    if v.blocking {
        core.events = Arc::new(VendorEvents::new(Some(v)));
    }
    let c = Arc::new(Mutex::new(core));
    Ok(CORE.get_or_init(|| c).clone())
}

/// One registration's view of the vendor transport (the node and remote registrations
/// share one state; either's poll delivers every peer's messages).
pub struct VendorTransport {
    core: Arc<Mutex<Core>>,
    events: Arc<VendorEvents>,
    eager: usize,
    /// This process's rank and the size of the vendor's world.
    rank: Rank,
    size: usize,
    /// World rank of the vendor's rank 0: the first rank of this site when sites are
    /// joined over IMPI (a site's ranks are consecutive), else 0.
    offset: Rank,
}

impl VendorTransport {
    fn lock(&self) -> std::sync::MutexGuard<'_, Core> {
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Transport for VendorTransport {
    fn name(&self) -> &'static str {
        "vendor"
    }
    fn eager_limit(&self) -> usize {
        self.eager
    }
    fn max_payload(&self) -> usize {
        MAX_PAYLOAD
    }
    fn single_copy(&self, peer: Rank) -> bool {
        // Every peer of the vendor's world (the router routes only those here).
        peer.checked_sub(self.offset)
            .is_some_and(|p| (p as usize) < self.size && p != self.rank)
    }
    fn read_remote(
        &mut self,
        peer: Rank,
        remote_addr: u64,
        dst: &mut [u8],
    ) -> Result<(), P2pError> {
        let Some(vendor_rank) = peer.checked_sub(self.offset) else {
            return Err(P2pError::Unsupported(format!(
                "vendor: world rank {peer} is on another site"
            )));
        };
        self.lock().read_remote(vendor_rank, remote_addr, dst)
    }
    unsafe fn start_read(
        &mut self,
        peer: Rank,
        remote_addr: u64,
        dst: *mut u8,
        len: usize,
    ) -> Result<ReadId, P2pError> {
        let Some(vendor_rank) = peer.checked_sub(self.offset) else {
            return Err(P2pError::Unsupported(format!(
                "vendor: world rank {peer} is on another site"
            )));
        };
        // SAFETY: the caller's contract (the trait's), passed on unchanged.
        unsafe { self.lock().start_read(vendor_rank, remote_addr, dst, len) }
    }
    fn test_read(&mut self, id: ReadId) -> Result<bool, P2pError> {
        self.lock().test_read(id)
    }
    fn caps(&self) -> TransportCaps {
        TransportCaps {
            eager_limit: self.eager,
            max_payload: MAX_PAYLOAD,
            rdma_read: true,
            rdma_write: false,
            needs_registration: false,
            ordered: true,
            timers: false,
        }
    }
    fn try_send(&mut self, peer: Rank, hdr: &Header, payload: &[u8]) -> Result<bool, P2pError> {
        let Some(vendor_rank) = peer.checked_sub(self.offset) else {
            return Err(P2pError::Unsupported(format!(
                "vendor: world rank {peer} is on another site"
            )));
        };
        self.lock().try_send(vendor_rank, hdr, payload)
    }
    fn poll(&mut self, sink: &mut Sink<'_>) -> Result<usize, P2pError> {
        self.poll_placing(&mut SinkArrivals(sink))
    }
    fn places(&self) -> bool {
        // `TSUNAGI_VENDOR_PLACE=0` turns the receive into the posted buffer off (to
        // measure it against the pooled buffer and copy in one build, bench/vendor.sh).
        std::env::var("TSUNAGI_VENDOR_PLACE").map_or(true, |v| v.trim() != "0")
    }
    fn poll_placing(&mut self, rx: &mut dyn Arrivals) -> Result<usize, P2pError> {
        let offset = self.offset;
        if offset == 0 {
            return self.lock().poll_placing(rx);
        }
        self.lock().poll_placing(&mut Offset { rx, offset })
    }
    fn count_into(&mut self, c: &'static TransportCounters) -> bool {
        // Counted inside (the node and remote registrations share the state and the
        // counters of one kind): no counting wrapper, whose second dynamic call per poll
        // and send the small-message path would pay.
        self.lock().counters = Some(c);
        true
    }
    fn event_source(&self) -> Arc<dyn EventSource> {
        self.events.clone()
    }
}

/// `rx` for a site that does not start at world rank 0: vendor ranks moved to world ranks.
struct Offset<'a> {
    rx: &'a mut dyn Arrivals,
    offset: Rank,
}

impl Arrivals for Offset<'_> {
    fn deliver(&mut self, src: Rank, hdr: &Header, payload: &[u8]) {
        self.rx.deliver(src + self.offset, hdr, payload)
    }
    fn claim(&mut self, src: Rank, hdr: &Header) -> Option<Placement> {
        self.rx.claim(src + self.offset, hdr)
    }
    fn placed(&mut self, src: Rank, token: u64) {
        self.rx.placed(src + self.offset, token)
    }
}

/// The vendor transport's registration for one reach (`TSUNAGI_INTRANODE=vendor`,
/// `TSUNAGI_INTERNODE=vendor`; `mpirun --vendor` sets both).
pub struct VendorFactory(Reach);

/// Within a node.
pub static NODE_FACTORY: VendorFactory = VendorFactory(Reach::Node);
/// Between nodes.
pub static REMOTE_FACTORY: VendorFactory = VendorFactory(Reach::Remote);

impl TransportFactory for VendorFactory {
    fn name(&self) -> &'static str {
        "vendor"
    }
    fn reach(&self) -> Reach {
        self.0
    }
    fn card_format(&self) -> &'static str {
        ""
    }
    fn start(
        &self,
        info: &StartInfo<'_>,
        _boot: &mut dyn Bootstrap,
    ) -> Result<Box<dyn Starting>, P2pError> {
        let core = core()?;
        let flavor = vendor::current().map(|v| v.flavor);
        let (rank, size) = {
            let c = core.lock().unwrap_or_else(|p| p.into_inner());
            (c.rank, c.size)
        };
        // The vendor's world is this site: its ranks are the site's, consecutive from the
        // site's first world rank (one site, or several joined over IMPI).
        let my_site = info.placement.site[info.rank as usize];
        let first = info
            .placement
            .site
            .iter()
            .position(|&s| s == my_site)
            .unwrap_or(0) as Rank;
        let site_size = info
            .placement
            .site
            .iter()
            .filter(|&&s| s == my_site)
            .count();
        if rank + first != info.rank || size != site_size {
            return Err(P2pError::Unsupported(format!(
                "vendor: Tsunagi's rank {} (site of {site_size} from rank {first}) is the vendor's rank {rank} of {size}: the vendor transport needs the vendor bootstrap (TSUNAGI_VENDOR)",
                info.rank
            )));
        }
        let eager = match flavor {
            Some(f) => eager_limit(f)?,
            // core() succeeded, so the vendor is loaded; unreachable in practice.
            None => return Err(P2pError::Other("vendor: no vendor loaded".into())),
        };
        Ok(Box::new(StartingVendor(core, eager, first)))
    }
}

struct StartingVendor(Arc<Mutex<Core>>, usize, Rank);

impl Starting for StartingVendor {
    fn connect(&mut self, _: &StartInfo<'_>, _: &mut dyn Bootstrap) -> Result<(), P2pError> {
        Ok(())
    }
    fn finish(self: Box<Self>, _: &StartInfo<'_>) -> Result<Box<dyn Transport>, P2pError> {
        let (events, rank, size) = {
            let c = self.0.lock().unwrap_or_else(|p| p.into_inner());
            (c.events.clone(), c.rank, c.size)
        };
        Ok(Box::new(VendorTransport {
            core: self.0,
            events,
            rank,
            size,
            eager: self.1,
            offset: self.2,
        }))
    }
}

#[cfg(test)]
mod tests;
