//! The vendor transport: Tsunagi messages as vendor MPI messages on a duplicate of the
//! vendor's world communicator (see [`crate::frame`] for their form).
//!
//! Eager messages (up to the eager limit): each vendor message is an `MPI_Isend` from a
//! buffer the transport owns (the [`Transport`] contract frees the caller's buffer on
//! return), completed later by `MPI_Test`. Receives: `MPI_Iprobe` on any source, then a
//! receive of the whole first message into a pooled buffer; a head also posts the receive
//! of its rest straight into the message's own buffer. Messages of one peer are delivered
//! in arrival order: while a long message of a peer waits for its rest, that peer's later
//! messages queue behind it.
//!
//! Larger messages go by the request layer's single-copy rendezvous
//! ([`Transport::read_remote`]): the sender's RTS names the address of its data, and the
//! receiver, once matched, posts vendor receives straight into the user's buffer and asks
//! the sender for the bytes ([`frame::TAG_GET`]); the sender's transport answers with
//! `MPI_Isend`s from that address, which the request layer keeps untouched until the
//! receiver's FIN. Neither side copies: only the vendor moves the bytes, as it would for
//! the application alone. The reader waits for its data serving other peers' requests
//! meanwhile, so reads that cross never wait for each other.
//!
//! Idle waiting (see [`VendorEvents`]): in the threaded engine with the vendor at
//! `MPI_THREAD_MULTIPLE`, the progress thread blocks in the vendor's `MPI_Probe` while
//! nothing of ours is in flight, and a message the process sends itself
//! ([`frame::TAG_WAKE`]) ends it; otherwise an idle rank naps for at most [`NAP`] between
//! non-blocking polls, so the polling engine alternates the vendor with the other
//! transports.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tsunagi_p2p::boot::{Bootstrap, Reach, StartInfo, Starting, TransportFactory};
use tsunagi_p2p::futex::DoorbellWords;
use tsunagi_p2p::{EventSource, Header, P2pError, Rank, Sink, Transport, TransportCaps};

use crate::frame::{self, First, HEAD_PREFIX, TAG_GET, TAG_GET_DATA, TAG_REST, TAG_WAKE};
use crate::link::{Link, Req, VendorLink};
use crate::vendor::{self, Flavor, Vendor};

/// Messages up to this many payload bytes go eagerly (copied by the transport at both
/// ends); above it, by the single-copy rendezvous (no copy of ours: the vendor moves the
/// bytes from the sender's buffer into the receiver's). Chosen, not measured: the
/// rendezvous costs two more vendor messages before the data (RTS, memory request), about
/// what copying 32 KiB twice costs at this machine's ~5 GB/s; the load during the
/// measurements in `docs/vendor-mpi.md` hid differences that small. `TSUNAGI_VENDOR_EAGER`
/// overrides it.
pub const EAGER_LIMIT: usize = 32 * 1024;

fn eager_limit() -> Result<usize, P2pError> {
    match std::env::var("TSUNAGI_VENDOR_EAGER") {
        Err(_) => Ok(EAGER_LIMIT),
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

/// The default short limit (payload bytes carried whole with the header) per vendor, from
/// the measurement in `docs/vendor-mpi.md` (lowest median ping-pong latency in most sizes
/// from 2 KiB to 60 KB); `TSUNAGI_VENDOR_SHORT` overrides it. Ranks may differ: a
/// receiver takes a first message of any length up to the largest payload.
pub fn default_short_limit(flavor: Flavor) -> usize {
    match flavor {
        Flavor::Mpich => 64 * 1024,
        Flavor::OpenMpi => 16 * 1024,
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
    /// `payload[first..]` by the vendor request `rest`.
    payload: Vec<u8>,
    rest: Option<Req>,
}

/// The vendor transport's state, shared by its node and remote registrations.
pub(crate) struct Core {
    link: Box<dyn Link>,
    rank: Rank,
    size: usize,
    short: usize,
    /// Outstanding sends: the vendor request and the buffer it reads.
    sends: Vec<(Req, Vec<u8>)>,
    send_bytes: usize,
    /// Per peer (vendor rank), messages received and not yet delivered, in order.
    inbox: Vec<VecDeque<Arrived>>,
    queued: usize,
    /// Where first messages are received (the pooled buffer).
    scratch: Vec<u8>,
    /// Large buffers to reuse (send copies, long payloads): fresh ones cost page faults.
    pool: Vec<Vec<u8>>,
    /// Small send buffers to reuse (capacity [`SMALL_BUF`]).
    small: Vec<Vec<u8>>,
    events: Arc<VendorEvents>,
}

/// Buffers of at least this capacity go back to the pool.
const POOLED_MIN: usize = 64 * 1024;
/// Buffers kept in the pool at most.
const POOL_MAX: usize = 32;
/// Send buffers of small messages all have this capacity and are kept for reuse: a
/// malloc and a free per message were a tenth of the transport's own cost of a short
/// send (callgrind, docs/vendor-mpi.md).
const SMALL_BUF: usize = 8 * 1024;
/// Small send buffers kept at most (one per outstanding send in a burst).
const SMALL_MAX: usize = 256;

impl Core {
    pub(crate) fn new(link: Box<dyn Link>, short: usize) -> Core {
        let (rank, size) = (link.rank(), link.size());
        Core {
            link,
            rank,
            size,
            short,
            sends: Vec::new(),
            send_bytes: 0,
            inbox: (0..size).map(|_| VecDeque::new()).collect(),
            queued: 0,
            scratch: vec![0; HEAD_PREFIX + short],
            pool: Vec::new(),
            small: Vec::new(),
            events: Arc::new(VendorEvents::new(None)),
        }
    }

    /// Whether nothing of ours is in flight in the vendor (no send to test, no rest of a
    /// message to wait for): then only a new message can give a poll work, and a thread
    /// may block in the vendor's probe. Published for [`VendorEvents::sleep`].
    fn publish_quiet(&self) {
        let quiet = self.sends.is_empty() && self.queued == 0;
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
        take_pooled(&mut self.pool, cap)
    }

    fn give_buf(&mut self, buf: Vec<u8>) {
        if buf.capacity() == SMALL_BUF {
            if self.small.len() < SMALL_MAX {
                self.small.push(buf);
            }
        } else if buf.capacity() >= POOLED_MIN && self.pool.len() < POOL_MAX {
            self.pool.push(buf);
        }
    }

    fn isend(&mut self, peer: Rank, tag: i32, buf: Vec<u8>) -> Result<(), P2pError> {
        // SAFETY: buf's heap storage stays where it is until the request completes: the
        // Vec is moved into `sends` (moving a Vec does not move its buffer) and dropped
        // only after `test` reported completion (or, at MPI_Finalize, after the shim waited
        // for every outstanding request).
        let req = unsafe { self.link.isend(buf.as_ptr(), buf.len(), peer, tag)? };
        self.send_bytes += buf.len();
        self.sends.push((req, buf));
        Ok(())
    }

    /// Test the outstanding sends; drop the buffers of those complete.
    fn test_sends(&mut self) -> Result<(), P2pError> {
        let mut i = 0;
        while i < self.sends.len() {
            if self.link.test(self.sends[i].0)? {
                let (_, buf) = self.sends.swap_remove(i);
                self.send_bytes -= buf.len();
                self.give_buf(buf);
            } else {
                i += 1;
            }
        }
        Ok(())
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
        let mut rest = if long {
            self.take_buf(payload.len() - self.short)
        } else {
            Vec::new()
        };
        let tag = frame::frame_into(hdr, payload, self.short, &mut first, &mut rest);
        self.events.quiet.store(false, Ordering::SeqCst);
        self.isend(peer, tag, first)?;
        if long {
            self.isend(peer, TAG_REST, rest)?;
        }
        Ok(true)
    }

    /// Answer a memory request from `src` (a [`TAG_GET`] of `count` bytes, probed): send
    /// the bytes asked for from where they are.
    fn serve_get(&mut self, src: Rank, count: usize) -> Result<(), P2pError> {
        let mut bytes = vec![0u8; count.min(HEAD_PREFIX + MAX_PAYLOAD)];
        self.link.recv_probed(&mut bytes, src, TAG_GET)?;
        let (addr, len) = frame::parse_get(&bytes)
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
            self.sends.push((req, Vec::new()));
        }
        self.events.quiet.store(false, Ordering::SeqCst);
        Ok(())
    }

    /// Answer every memory request waiting.
    fn serve_gets(&mut self) -> Result<(), P2pError> {
        while let Some((src, count)) = self.link.iprobe_tag(TAG_GET)? {
            self.serve_get(src, count)?;
        }
        Ok(())
    }

    /// Single-copy read: receive `dst.len()` bytes at `addr` in `peer`'s memory straight
    /// into `dst`, the vendor moving them. Posts the receives, then asks; waits for them,
    /// answering other processes' requests meanwhile.
    pub(crate) fn read_remote(
        &mut self,
        peer: Rank,
        addr: u64,
        dst: &mut [u8],
    ) -> Result<(), P2pError> {
        if peer as usize >= self.size || peer == self.rank {
            return Err(P2pError::Unsupported(format!(
                "vendor: rank {peer} is not a peer in the vendor's world of {}",
                self.size
            )));
        }
        if dst.is_empty() {
            return Ok(());
        }
        let mut recvs = Vec::new();
        for (at, n) in frame::get_pieces(dst.len()) {
            // SAFETY: dst[at..at + n] is inside `dst`, which this function borrows
            // mutably until it returns, and it returns only after every one of these
            // receives completed (the loop below), or with the vendor failed (see the
            // error path there).
            recvs.push(unsafe {
                self.link
                    .irecv(dst.as_mut_ptr().add(at), n, peer, TAG_GET_DATA)?
            });
        }
        let ask = frame::get_request(addr, dst.len() as u64).to_vec();
        self.isend(peer, TAG_GET, ask)?;
        let mut spins = 0u32;
        while !recvs.is_empty() {
            let mut i = 0;
            while i < recvs.len() {
                // A vendor error here leaves receives posted into the user's buffer: the
                // error ends the job (the request layer reports it as a transport fault
                // when its fallback fails on the same vendor).
                if self.link.test(recvs[i])? {
                    recvs.swap_remove(i);
                } else {
                    i += 1;
                }
            }
            if recvs.is_empty() {
                break;
            }
            // The peer may be reading from this process at the same time.
            self.serve_gets()?;
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(64) {
                if !self.sends.is_empty() {
                    self.test_sends()?;
                }
                // On an oversubscribed node the sender may need this CPU to answer.
                std::thread::yield_now();
            }
        }
        self.events.quiet.store(false, Ordering::SeqCst);
        Ok(())
    }

    /// Deliver the queued messages of `peer` whose rest has arrived, in order.
    fn drain_peer(&mut self, peer: usize, sink: &mut Sink<'_>) -> Result<usize, P2pError> {
        let mut n = 0;
        while let Some(front) = self.inbox[peer].front_mut() {
            if let Some(req) = front.rest {
                if !self.link.test(req)? {
                    break;
                }
                front.rest = None;
            }
            let m = self.inbox[peer].pop_front().expect("front exists");
            self.queued -= 1;
            sink(peer as Rank, &m.hdr, &m.payload);
            self.give_buf(m.payload);
            n += 1;
        }
        Ok(n)
    }

    pub(crate) fn poll(&mut self, sink: &mut Sink<'_>) -> Result<usize, P2pError> {
        if !self.sends.is_empty() {
            self.test_sends()?;
        }
        let mut n = 0;
        if self.queued > 0 {
            for p in 0..self.inbox.len() {
                if !self.inbox[p].is_empty() {
                    n += self.drain_peer(p, sink)?;
                }
            }
        }
        for _ in 0..PROBES_PER_POLL {
            let Some((src, tag, count)) = self.link.iprobe()? else {
                break;
            };
            if tag == TAG_GET && (src as usize) < self.size {
                self.serve_get(src, count)?;
                continue;
            }
            if tag == TAG_WAKE && src == self.rank && count == 0 {
                self.link.recv_probed(&mut [], src, tag)?;
                continue;
            }
            if src as usize >= self.size
                || tag == TAG_REST
                || tag == TAG_GET_DATA
                || count > HEAD_PREFIX + MAX_PAYLOAD
            {
                return Err(P2pError::Other(format!(
                    "vendor: rank {src} sent an unexpected message (tag {tag}, {count} bytes)"
                )));
            }
            if count > self.scratch.len() {
                // A peer with a larger short limit: take it anyway.
                self.scratch.resize(count, 0);
            }
            self.link
                .recv_probed(&mut self.scratch[..count], src, tag)?;
            let peer = src as usize;
            let first = frame::parse(tag, &self.scratch[..count], MAX_PAYLOAD)
                .map_err(|e| P2pError::Other(format!("vendor: from rank {src}: {e}")))?;
            match first {
                First::Whole { hdr, payload } => {
                    if self.inbox[peer].is_empty() {
                        sink(src, &hdr, payload);
                        n += 1;
                    } else {
                        let payload = payload.to_vec();
                        self.inbox[peer].push_back(Arrived {
                            hdr,
                            payload,
                            rest: None,
                        });
                        self.queued += 1;
                    }
                }
                First::Head { hdr, total, first } => {
                    let at = first.len();
                    let mut payload = take_pooled(&mut self.pool, total);
                    payload.extend_from_slice(first);
                    payload.resize(total, 0);
                    // SAFETY: the receive writes total - at bytes at payload[at..], inside
                    // the Vec; its heap buffer does not move while the Vec sits in the
                    // inbox, nothing reads it before `test` reports the receive complete,
                    // and it is dropped only after that (or after the shim's finalize
                    // waited for the receive).
                    let req = unsafe {
                        self.link
                            .irecv(payload.as_mut_ptr().add(at), total - at, src, TAG_REST)?
                    };
                    self.inbox[peer].push_back(Arrived {
                        hdr,
                        payload,
                        rest: Some(req),
                    });
                    self.queued += 1;
                    n += self.drain_peer(peer, sink)?;
                }
            }
        }
        self.publish_quiet();
        Ok(n)
    }
}

/// [`Core::take_buf`] on the pool alone (while `scratch` is borrowed).
fn take_pooled(pool: &mut Vec<Vec<u8>>, cap: usize) -> Vec<u8> {
    if cap >= POOLED_MIN {
        if let Some(i) = pool.iter().position(|b| b.capacity() >= cap) {
            let mut b = pool.swap_remove(i);
            b.clear();
            return b;
        }
    }
    Vec::with_capacity(cap)
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
pub struct VendorEvents {
    bell: DoorbellWords,
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
        VendorEvents {
            bell: DoorbellWords::default(),
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
    fn notify(&self) {
        self.bell.ring();
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
    let mut core = Core::new(Box::new(VendorLink(v)), short_limit(v.flavor)?);
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
        let offset = self.offset;
        if offset == 0 {
            return self.lock().poll(sink);
        }
        self.lock().poll(&mut |p, h, b| sink(p + offset, h, b))
    }
    fn event_source(&self) -> Arc<dyn EventSource> {
        self.events.clone()
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
        Ok(Box::new(StartingVendor(core, eager_limit()?, first)))
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
mod tests {
    use super::*;
    use crate::link::sim::SimWorld;

    fn hdr(src: Rank, seq: u64) -> Header {
        Header {
            kind: 1,
            src,
            tag: 5,
            cookie: seq,
            ..Header::default()
        }
    }

    fn payload(seq: u64, len: usize) -> Vec<u8> {
        (0..len).map(|i| (i as u64 * 7 + seq) as u8).collect()
    }

    /// Drain everything rank `core` can deliver, as (peer, seq, payload).
    fn take(core: &mut Core, got: &mut Vec<(Rank, u64, Vec<u8>)>) -> usize {
        core.poll(&mut |p, h, b| got.push((p, h.cookie, b.to_vec())))
            .unwrap()
    }

    #[test]
    fn messages_of_every_size_arrive_whole_and_in_order_per_peer() {
        let short = 100;
        let w = SimWorld::default();
        let mut a = Core::new(Box::new(w.link(0, 3)), short);
        let mut b = Core::new(Box::new(w.link(1, 3)), short);
        let mut c = Core::new(Box::new(w.link(2, 3)), short);
        let sizes = [0, 1, short, short + 1, 5000, 0, 7, MAX_PAYLOAD, 3];
        // Rests are held back: long messages wait for them, and the short ones behind
        // them (from the same sender) must wait too, while another sender's go on.
        w.hold_rests(true);
        for (i, &len) in sizes.iter().enumerate() {
            assert!(a
                .try_send(1, &hdr(0, i as u64), &payload(i as u64, len))
                .unwrap());
            assert!(c
                .try_send(1, &hdr(2, 100 + i as u64), &payload(100 + i as u64, 10))
                .unwrap());
        }
        let mut got = Vec::new();
        take(&mut b, &mut got);
        let from_a: Vec<u64> = got.iter().filter(|g| g.0 == 0).map(|g| g.1).collect();
        let from_c: Vec<u64> = got.iter().filter(|g| g.0 == 2).map(|g| g.1).collect();
        // Rank 0's first three fit the short limit; the fourth is long and holds the rest.
        assert_eq!(from_a, vec![0, 1, 2]);
        assert_eq!(from_c, (100..109).collect::<Vec<_>>());
        w.hold_rests(false);
        for _ in 0..10 {
            take(&mut b, &mut got);
            take(&mut a, &mut Vec::new());
        }
        let from_a: Vec<&(Rank, u64, Vec<u8>)> = got.iter().filter(|g| g.0 == 0).collect();
        assert_eq!(from_a.len(), sizes.len());
        for (i, g) in from_a.iter().enumerate() {
            assert_eq!(g.1, i as u64, "order from rank 0");
            assert_eq!(g.2, payload(i as u64, sizes[i]), "payload of message {i}");
        }
        // Every send completed, so the sender holds no buffers.
        assert!(a.sends.is_empty() && a.send_bytes == 0);
        // The small messages' send buffers came back for reuse.
        assert!(!a.small.is_empty() && a.small.len() <= SMALL_MAX);
        let kept = a.small.len();
        assert!(a.try_send(1, &hdr(0, 99), &payload(99, 10)).unwrap());
        assert_eq!(a.small.len(), kept - 1, "a short send takes a kept buffer");
        assert_eq!(b.queued, 0);
    }

    #[test]
    fn bad_peers_and_payloads_are_refused() {
        let w = SimWorld::default();
        let mut a = Core::new(Box::new(w.link(0, 2)), 16);
        assert!(a.try_send(0, &hdr(0, 0), &[]).is_err());
        assert!(a.try_send(2, &hdr(0, 0), &[]).is_err());
        assert!(a
            .try_send(1, &hdr(0, 0), &vec![0; MAX_PAYLOAD + 1])
            .is_err());
    }

    #[test]
    fn malformed_vendor_messages_are_errors_not_panics() {
        let w = SimWorld::default();
        let mut raw = w.link(0, 2);
        let mut b = Core::new(Box::new(w.link(1, 2)), 16);
        // A rest with no head, then a first message shorter than a header.
        let junk = [1u8; 10];
        // SAFETY: junk outlives the simulated send (the sim copies at once).
        unsafe { raw.isend(junk.as_ptr(), junk.len(), 1, TAG_REST).unwrap() };
        let e = b
            .poll(&mut |_, _, _| panic!("nothing to deliver"))
            .unwrap_err();
        assert!(e.to_string().contains("unexpected"), "{e}");
        let w = SimWorld::default();
        let mut raw = w.link(0, 2);
        let mut b = Core::new(Box::new(w.link(1, 2)), 16);
        // SAFETY: as above.
        unsafe {
            raw.isend(junk.as_ptr(), junk.len(), 1, frame::TAG_WHOLE)
                .unwrap()
        };
        let e = b
            .poll(&mut |_, _, _| panic!("nothing to deliver"))
            .unwrap_err();
        assert!(e.to_string().contains("header"), "{e}");
    }

    #[test]
    fn reads_take_the_peers_memory_straight_into_the_buffer_and_cross_without_waiting() {
        let w = SimWorld::default();
        let mut a = Core::new(Box::new(w.link(0, 2)), 16);
        let mut b = Core::new(Box::new(w.link(1, 2)), 16);
        let a_data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let b_data: Vec<u8> = (0..70_000u32).map(|i| (i % 13) as u8 + 1).collect();
        let (a_addr, b_addr) = (a_data.as_ptr() as u64, b_data.as_ptr() as u64);
        // Rank 1 reads rank 0's memory while rank 0 reads rank 1's: each serves the
        // other's request from inside its own wait.
        // Rank 1 may finish its read before it has seen rank 0's request: like an
        // engine, it then keeps polling (which serves requests) until rank 0 has its
        // bytes. Without this the test raced (rank 0 waited for ever).
        let a_done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let a_done_seen = a_done.clone();
        let reader_b = std::thread::spawn(move || {
            let mut dst = vec![0u8; 300_000];
            b.read_remote(0, a_addr, &mut dst).unwrap();
            // Zero bytes: nothing asked, nothing waited for.
            b.read_remote(0, a_addr, &mut []).unwrap();
            while !a_done_seen.load(Ordering::SeqCst) {
                b.poll(&mut |_, _, _| panic!("no message was sent"))
                    .unwrap();
                std::thread::yield_now();
            }
            (b, dst)
        });
        let mut dst = vec![0u8; 70_000];
        a.read_remote(1, b_addr, &mut dst).unwrap();
        a_done.store(true, Ordering::SeqCst);
        assert_eq!(dst, b_data);
        // Rank 0 keeps polling (as its engine would) until rank 1 has its bytes.
        while !reader_b.is_finished() {
            a.poll(&mut |_, _, _| panic!("no message was sent"))
                .unwrap();
        }
        let (mut b, got) = reader_b.join().unwrap();
        assert_eq!(got, a_data);
        // Once polled, neither holds a send; then both are quiet (a probe may block).
        a.poll(&mut |_, _, _| {}).unwrap();
        b.poll(&mut |_, _, _| {}).unwrap();
        assert!(a.sends.is_empty() && b.sends.is_empty());
        assert!(a.events.quiet.load(Ordering::SeqCst));
        // Reading oneself or a rank outside the world is refused.
        assert!(a.read_remote(0, a_addr, &mut [0u8; 4]).is_err());
        assert!(a.read_remote(2, a_addr, &mut [0u8; 4]).is_err());
        drop(a_data);
    }

    #[test]
    fn malformed_memory_requests_are_errors_not_panics() {
        let w = SimWorld::default();
        let mut raw = w.link(0, 2);
        let mut b = Core::new(Box::new(w.link(1, 2)), 16);
        for bad in [vec![1u8; 15], frame::get_request(u64::MAX - 1, 16).to_vec()] {
            // SAFETY: the sim copies at once.
            unsafe { raw.isend(bad.as_ptr(), bad.len(), 1, TAG_GET).unwrap() };
            let e = b
                .poll(&mut |_, _, _| panic!("nothing to deliver"))
                .unwrap_err();
            assert!(e.to_string().contains("memory request"), "{e}");
        }
        // A wake-up from another rank is not one.
        // SAFETY: as above.
        unsafe { raw.isend([].as_ptr(), 0, 1, TAG_WAKE).unwrap() };
        assert!(b.poll(&mut |_, _, _| panic!("nothing to deliver")).is_err());
        // From itself it is dropped.
        let mut b_raw = w.link(1, 2);
        // SAFETY: as above.
        unsafe { b_raw.isend([].as_ptr(), 0, 1, TAG_WAKE).unwrap() };
        assert_eq!(
            b.poll(&mut |_, _, _| panic!("nothing to deliver")).unwrap(),
            0
        );
    }

    #[test]
    fn sends_beyond_the_window_wait_for_room() {
        let w = SimWorld::default();
        let mut a = Core::new(Box::new(w.link(0, 2)), 16);
        let mut b = Core::new(Box::new(w.link(1, 2)), 16);
        let big = vec![0u8; MAX_PAYLOAD];
        let mut sent = 0;
        while a.try_send(1, &hdr(0, sent), &big).unwrap() {
            sent += 1;
            assert!(sent < 1000, "no back-pressure");
        }
        assert!(a.send_bytes >= MAX_SEND_BYTES);
        let mut got = Vec::new();
        while (got.len() as u64) < sent {
            take(&mut b, &mut got);
        }
        assert!(a.try_send(1, &hdr(0, sent), &big).unwrap());
    }
}
