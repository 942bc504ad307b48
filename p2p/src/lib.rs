//! Tsunagi's P2P layer: the contract every transport fulfils, the router that maps a peer
//! rank to one transport, and the pieces the progress engines are built from.
//!
//! Boundary: this crate moves *messages* (a fixed 32-byte [`Header`] plus payload bytes)
//! between world ranks. It knows nothing of communicators, tags or matching; the header
//! fields other than `src` are opaque to it and interpreted by the request layer
//! (`tsunagi-core`). Transports live in their own crates (`tsunagi-shm`, `tsunagi-tcp`,
//! `tsunagi-stream`, later vendor MPI, PM); they plug in through the start-up contracts of
//! [`boot`] ([`boot::TransportFactory`], [`boot::Bootstrap`]). This crate also carries the
//! in-process [`SelfTransport`], the sans-IO stream [`framing`] that socket transports
//! share, and the futex doorbells.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub mod boot;
pub mod device;
pub mod framing;
pub mod futex;
pub mod membarrier;
pub mod placing;
pub mod registry;
pub mod self_transport;
pub mod sim;
pub mod sim_device;

pub use placing::{Arrivals, Placement};
pub use self_transport::SelfTransport;

/// A process's rank in MPI_COMM_WORLD.
pub type Rank = u32;

/// The fixed message header carried in front of every payload.
///
/// `#[repr(C)]`, 32 bytes, so that transports can copy it as plain bytes into shared memory
/// or onto a socket. Only `src` has a meaning to the P2P layer; the request layer defines
/// the others per `kind` (see `tsunagi_core::protocol`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header {
    /// Protocol message kind, defined by the request layer.
    pub kind: u8,
    /// Protocol flags, defined by the request layer.
    pub flags: u8,
    /// Reserved; zero.
    pub reserved: u16,
    /// Sender's world rank.
    pub src: Rank,
    /// MPI tag (or a protocol field for control messages).
    pub tag: i32,
    /// Communicator context id (or a protocol field for control messages).
    pub context: u32,
    /// Whole message length in bytes (or a protocol field for control messages).
    pub len: u64,
    /// A request id chosen by one side and echoed by the other.
    pub cookie: u64,
}

/// Size of [`Header`] on the wire.
pub const HEADER_BYTES: usize = std::mem::size_of::<Header>();
const _: () = assert!(HEADER_BYTES == 32);

impl Header {
    /// The header as its 32 wire bytes (native byte order: transports that cross hosts
    /// with different byte order must convert).
    pub fn to_bytes(&self) -> [u8; HEADER_BYTES] {
        let mut out = [0u8; HEADER_BYTES];
        out[0] = self.kind;
        out[1] = self.flags;
        out[2..4].copy_from_slice(&self.reserved.to_ne_bytes());
        out[4..8].copy_from_slice(&self.src.to_ne_bytes());
        out[8..12].copy_from_slice(&self.tag.to_ne_bytes());
        out[12..16].copy_from_slice(&self.context.to_ne_bytes());
        out[16..24].copy_from_slice(&self.len.to_ne_bytes());
        out[24..32].copy_from_slice(&self.cookie.to_ne_bytes());
        out
    }

    /// Inverse of [`Header::to_bytes`].
    pub fn from_bytes(b: &[u8; HEADER_BYTES]) -> Header {
        let u16_at = |i: usize| u16::from_ne_bytes([b[i], b[i + 1]]);
        let u32_at = |i: usize| u32::from_ne_bytes(b[i..i + 4].try_into().unwrap());
        let u64_at = |i: usize| u64::from_ne_bytes(b[i..i + 8].try_into().unwrap());
        Header {
            kind: b[0],
            flags: b[1],
            reserved: u16_at(2),
            src: u32_at(4),
            tag: u32_at(8) as i32,
            context: u32_at(12),
            len: u64_at(16),
            cookie: u64_at(24),
        }
    }
}

/// Why a transport operation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum P2pError {
    /// The peer is gone (process died, connection lost); the job cannot go on with it.
    PeerFailed { peer: Rank, why: String },
    /// The transport does not reach this peer or does not offer the operation.
    Unsupported(String),
    /// A system call failed.
    Os { call: &'static str, errno: i32 },
    /// Anything else, with a message.
    Other(String),
}

impl fmt::Display for P2pError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            P2pError::PeerFailed { peer, why } => write!(f, "peer rank {peer} failed: {why}"),
            P2pError::Unsupported(s) => write!(f, "unsupported: {s}"),
            P2pError::Os { call, errno } => write!(
                f,
                "{call} failed: {}",
                std::io::Error::from_raw_os_error(*errno)
            ),
            P2pError::Other(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for P2pError {}

impl P2pError {
    /// The error of the last failed system call.
    pub fn last_os(call: &'static str) -> P2pError {
        P2pError::Os {
            call,
            errno: std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
        }
    }
}

/// What a transport calls for each message that arrived: the peer it came from, its header
/// and its payload. The payload slice is only valid during the call (it may point into a
/// shared-memory ring), so the request layer copies it out or into the user's buffer.
pub type Sink<'a> = dyn FnMut(Rank, &Header, &[u8]) + 'a;

/// A single-copy read in flight ([`Transport::start_read`]), named by its transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReadId(pub u64);

impl ReadId {
    /// A read that finished inside `start_read` (the blocking default, zero bytes).
    pub const DONE: ReadId = ReadId(u64::MAX);
}

/// What a transport offers, read once when it joins the router.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransportCaps {
    /// Payload bytes up to which messages go eagerly.
    pub eager_limit: usize,
    /// Largest payload of one message.
    pub max_payload: usize,
    /// It can read a peer's memory ([`Transport::read_remote`]: CMA, an RDMA read) for
    /// some peers ([`Transport::single_copy`] says which).
    pub rdma_read: bool,
    /// It can write into a peer's memory (an RDMA write: PM's PUSH).
    pub rdma_write: bool,
    /// Memory must be registered with the NIC before a remote access (PM, InfiniBand);
    /// CMA needs none.
    pub needs_registration: bool,
    /// Messages to one peer arrive in the order they were sent. The request layer's
    /// matching needs it; a transport that reorders (UDP) must restore the order itself.
    pub ordered: bool,
    /// It has timers (retransmission, pacing): [`Transport::next_deadline`] matters.
    pub timers: bool,
}

/// Messages and bytes (payload plus header) one kind of transport sent and delivered,
/// protocol messages (rendezvous handshakes, streamed chunks) included: what the tools
/// interface (MPI_T, in `tsunagi-core`) reads. Process-wide statics there; each has one
/// writer at a time (a transport is used under the runtime's lock or by the one progress
/// thread that owns it), so a count is a relaxed load and store, not a locked
/// read-modify-write.
#[derive(Debug, Default)]
pub struct TransportCounters {
    pub msgs_sent: AtomicU64,
    pub bytes_sent: AtomicU64,
    pub msgs_recvd: AtomicU64,
    pub bytes_recvd: AtomicU64,
}

/// Add `n` to a counter that has one writer at a time (see [`TransportCounters`]).
#[inline]
pub fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

impl TransportCounters {
    /// All zero (`const`, for statics).
    pub const fn new() -> TransportCounters {
        TransportCounters {
            msgs_sent: AtomicU64::new(0),
            bytes_sent: AtomicU64::new(0),
            msgs_recvd: AtomicU64::new(0),
            bytes_recvd: AtomicU64::new(0),
        }
    }

    /// Count one message of `payload` bytes sent.
    #[inline]
    pub fn sent(&self, payload: usize) {
        bump(&self.msgs_sent, 1);
        bump(&self.bytes_sent, (HEADER_BYTES + payload) as u64);
    }

    /// Count one message of `payload` bytes delivered.
    #[inline]
    pub fn recvd(&self, payload: usize) {
        bump(&self.msgs_recvd, 1);
        bump(&self.bytes_recvd, (HEADER_BYTES + payload) as u64);
    }

    /// Count `bytes` moved by a single-copy read (data without a message).
    #[inline]
    pub fn read(&self, bytes: usize) {
        bump(&self.bytes_recvd, bytes as u64);
    }
}

/// The contract of a transport.
///
/// A transport reaches a set of peers and moves messages to them reliably and in order per
/// peer. No method blocks: a send that finds no room returns `Ok(false)` and the caller
/// retries after making progress (which frees room). A send that returns `Ok(true)` has
/// copied the payload: the caller's buffer is free, i.e. send completion is immediate.
pub trait Transport: Send {
    /// A short name for logs and errors ("shm", "self", "stream").
    fn name(&self) -> &'static str;

    /// Messages up to this many payload bytes go eagerly; larger ones use rendezvous.
    fn eager_limit(&self) -> usize;

    /// The largest payload of one message; streamed rendezvous data is cut into chunks of
    /// at most this size. At least `eager_limit()`.
    fn max_payload(&self) -> usize;

    /// True if [`Transport::read_remote`] works for `peer` (single-copy rendezvous).
    fn single_copy(&self, _peer: Rank) -> bool {
        false
    }

    /// Try to send one message (`payload.len() <= max_payload()`).
    fn try_send(&mut self, peer: Rank, hdr: &Header, payload: &[u8]) -> Result<bool, P2pError>;

    /// Deliver arrived messages to `sink`, in order per peer, without blocking. Returns how
    /// many were delivered. A transport may bound the number delivered per call.
    fn poll(&mut self, sink: &mut Sink<'_>) -> Result<usize, P2pError>;

    /// True if [`Transport::poll_placing`] may claim messages (receive into the posted
    /// buffer, [`placing`]); read once when the transport joins the router, which polls
    /// the others with plain [`Transport::poll`].
    fn places(&self) -> bool {
        false
    }

    /// [`Transport::poll`], offering the request layer each message whose payload is still
    /// to come ([`Arrivals::claim`]) so that it lands in the posted receive's buffer.
    /// The default never claims.
    fn poll_placing(&mut self, rx: &mut dyn Arrivals) -> Result<usize, P2pError> {
        self.poll(&mut |src, hdr, payload| rx.deliver(src, hdr, payload))
    }

    /// Make `len` bytes at `addr` readable by `peer` through its [`Transport::read_remote`],
    /// for a rendezvous the caller is about to announce; returns the address to announce
    /// (what the peer passes to `read_remote`). Only asked where `single_copy(peer)`.
    ///
    /// The default returns `addr` itself: CMA and a shared address space read raw
    /// addresses and need no registration. A transport whose NIC needs registered memory
    /// (PM) registers the buffer here (through its pin-down cache) and returns a key that
    /// names the region; it drops the peer's right to read when the peer's read ends (the
    /// peer's NIC says so on the same ordered path, before the peer's FIN).
    ///
    /// # Safety
    /// `addr..addr + len` must stay valid and unmodified until `peer` has answered the
    /// announcement (its FIN, or its CTS when it falls back to streaming): the MPI contract
    /// of a send buffer until the send completes.
    unsafe fn expose(
        &mut self,
        _peer: Rank,
        addr: *const u8,
        _len: usize,
    ) -> Result<u64, P2pError> {
        Ok(addr as u64)
    }

    /// Copy `dst.len()` bytes from address `remote_addr` in `peer`'s address space into
    /// `dst` (single copy, e.g. process_vm_readv or an RDMA read). `remote_addr` is what
    /// the peer's [`Transport::expose`] returned, plus an offset. Only valid where
    /// `single_copy(peer)`. May block until the data is in (PM pulls it over the network),
    /// serving the peers' own remote accesses meanwhile.
    fn read_remote(
        &mut self,
        peer: Rank,
        _remote_addr: u64,
        _dst: &mut [u8],
    ) -> Result<(), P2pError> {
        Err(P2pError::Unsupported(format!(
            "{} cannot read rank {peer}'s memory",
            self.name()
        )))
    }

    /// Start a single-copy read of `len` bytes at `remote_addr` in `peer`'s memory into
    /// `dst` (as [`Transport::read_remote`], without waiting for the bytes), so that a
    /// receiver can have several reads in flight at once; [`Transport::test_read`] tells
    /// when it is done. Only valid where `single_copy(peer)`.
    ///
    /// The default reads at once with the blocking [`Transport::read_remote`] and returns
    /// [`ReadId::DONE`]. An error (the read refused) leaves nothing in flight: the caller
    /// may fall back to streaming.
    ///
    /// # Safety
    /// `dst..dst + len` must be valid for writes, and neither read nor written by anyone
    /// else, until [`Transport::test_read`] returned `Ok(true)` or an error for the id.
    unsafe fn start_read(
        &mut self,
        peer: Rank,
        remote_addr: u64,
        dst: *mut u8,
        len: usize,
    ) -> Result<ReadId, P2pError> {
        // SAFETY: the caller's contract, passed on.
        unsafe { read_at_once(self, peer, remote_addr, dst, len) }
    }

    /// Whether the read `id` ([`Transport::start_read`]) is done: all its bytes are in its
    /// buffer. Moves it on without blocking (and serves the peers' own remote accesses
    /// meanwhile). After `Ok(true)` or an error the id means nothing any more.
    fn test_read(&mut self, id: ReadId) -> Result<bool, P2pError> {
        let _ = id;
        Ok(true)
    }

    /// What to block on when idle. The object outlives borrows of the transport so that a
    /// progress thread can sleep on it without holding the request-layer lock.
    fn event_source(&self) -> Arc<dyn EventSource>;

    /// What the transport offers. The default describes a reliable, ordered byte mover
    /// without remote memory access or timers, with [`Transport::eager_limit`] and
    /// [`Transport::max_payload`].
    fn caps(&self) -> TransportCaps {
        TransportCaps {
            eager_limit: self.eager_limit(),
            max_payload: self.max_payload(),
            rdma_read: false,
            rdma_write: false,
            needs_registration: false,
            ordered: true,
            timers: false,
        }
    }

    /// The next moment [`Transport::poll`] must run even if nothing arrives (a
    /// retransmission or pacing timer), if any. Both progress engines bound their sleeps by
    /// it; the transport reads the clock itself when polled.
    fn next_deadline(&self) -> Option<Instant> {
        None
    }

    /// Count from now on what this transport moves into `c` (sends and deliveries with
    /// [`TransportCounters::sent`] / [`TransportCounters::recvd`], single-copy reads with
    /// [`TransportCounters::read`]) and return true; the default, false, has the caller
    /// wrap the transport in a counting layer instead, which costs a second dynamic call
    /// per send and per poll (the small-message path counts them).
    fn count_into(&mut self, _c: &'static TransportCounters) -> bool {
        false
    }
}

/// [`Transport::start_read`] done with the blocking [`Transport::read_remote`]: the read is
/// over when this returns ([`ReadId::DONE`]). The trait's default, and the fallback of a
/// transport that reads without blocking only in some modes.
///
/// # Safety
/// As for [`Transport::start_read`]: `dst..dst + len` valid for writes and ours alone
/// until this returns.
pub unsafe fn read_at_once<T: Transport + ?Sized>(
    t: &mut T,
    peer: Rank,
    remote_addr: u64,
    dst: *mut u8,
    len: usize,
) -> Result<ReadId, P2pError> {
    let dst: &mut [u8] = if len == 0 {
        &mut []
    } else {
        // SAFETY: the caller's contract: dst..dst + len is valid and ours alone.
        unsafe { std::slice::from_raw_parts_mut(dst, len) }
    };
    t.read_remote(peer, remote_addr, dst)?;
    Ok(ReadId::DONE)
}

/// Something an idle rank can sleep on until a transport may have work.
///
/// The protocol avoids lost wake-ups: call [`EventSource::prepare`], then poll the transport
/// once more, and only if that found nothing call [`EventSource::sleep`] with the token.
/// A sender that publishes a message after `prepare` makes `sleep` return at once.
pub trait EventSource: Send + Sync {
    /// Announce the intent to sleep; returns a token for `sleep`.
    fn prepare(&self) -> u64;
    /// Sleep until an event may have happened since `prepare` returned `token`, or until
    /// `timeout`. Spurious returns are allowed. Clears the intent announced by `prepare`.
    fn sleep(&self, token: u64, timeout: Duration);
    /// Withdraw the intent announced by `prepare` without sleeping.
    fn cancel(&self);
    /// Wake a sleeper (used to stop progress threads and for in-process events).
    fn notify(&self);

    /// A descriptor that polls readable when this source may have an event, so that one
    /// wait covers several sources ([`registry::EventRegistry`]); `None` (the default): the
    /// source can only be slept on alone, and waiters take turns.
    ///
    /// Waiting through the descriptor follows the same protocol as `prepare`/`sleep`:
    /// [`EventSource::prepare_wait`], poll the transport once more, then wait on the
    /// descriptor for at most the duration `prepare_wait` returned, then
    /// [`EventSource::end_wait`] (also when the wait was skipped).
    fn wait_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }

    /// Announce a wait on [`EventSource::wait_fd`]: from now on an event makes the
    /// descriptor readable. Returns the longest such a wait may last
    /// (`Duration::ZERO`: something is pending that no descriptor will announce).
    fn prepare_wait(&self) -> Duration {
        Duration::MAX
    }

    /// End a wait announced by [`EventSource::prepare_wait`]: withdraw the announcement and
    /// consume the descriptor's readiness, so that the next wait blocks again.
    fn end_wait(&self) {}

    /// `Some(d)`: an arrival does not wake a sleeper on this source (only a poll sees it),
    /// so a sleep on it is a nap of up to `d` that may overrun the arrival by all of `d`;
    /// `None` (the default): arrivals wake the sleeper. The polling engine keeps yielding
    /// for about `d` before it sleeps on such a source, as a sleep there costs that much.
    fn nap(&self) -> Option<Duration> {
        None
    }
}

/// Which progress engine drives the transports (chosen at run time).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProgressMode {
    /// Every progress call visits every transport without blocking, round robin.
    Polling,
    /// One thread per transport blocks on its own event source and hands events to the
    /// request layer under its lock.
    Threaded,
}

impl ProgressMode {
    /// From `TSUNAGI_PROGRESS` (`polling`, the default, or `threaded`).
    pub fn from_env() -> Result<ProgressMode, String> {
        match std::env::var("TSUNAGI_PROGRESS") {
            Err(_) => Ok(ProgressMode::Polling),
            Ok(v) => match v.as_str() {
                "" | "polling" | "poll" => Ok(ProgressMode::Polling),
                "threaded" | "thread" | "threads" => Ok(ProgressMode::Threaded),
                other => Err(format!(
                    "TSUNAGI_PROGRESS={other}: expected 'polling' or 'threaded'"
                )),
            },
        }
    }
}

/// Maps each world rank to the transport, or the native device, that reaches it.
pub struct Router {
    transports: Vec<Box<dyn Transport>>,
    route: Vec<u8>,
    devices: Vec<Box<dyn device::Device>>,
    device_route: Vec<u8>,
    /// Some transport or device has timers.
    timers: bool,
    /// Per transport, [`Transport::places`].
    places: Vec<bool>,
}

/// Marks a rank no transport reaches.
const NO_ROUTE: u8 = u8::MAX;

impl Router {
    /// A router for a job of `size` ranks with no routes yet.
    pub fn new(size: usize) -> Router {
        Router {
            transports: Vec::new(),
            route: vec![NO_ROUTE; size],
            devices: Vec::new(),
            device_route: Vec::new(),
            timers: false,
            places: Vec::new(),
        }
    }

    /// The earliest deadline of any transport or device with timers (see
    /// [`Transport::next_deadline`]). Costs one branch when none has timers.
    #[inline]
    pub fn next_deadline(&self) -> Option<Instant> {
        if !self.timers {
            return None;
        }
        self.transports
            .iter()
            .filter_map(|t| t.next_deadline())
            .chain(self.devices.iter().filter_map(|d| d.next_deadline()))
            .min()
    }

    /// The deadline of transport or device `idx` (indices as in
    /// [`Router::event_sources`]).
    pub fn deadline_of(&self, idx: usize) -> Option<Instant> {
        if !self.timers {
            return None;
        }
        match self.transports.get(idx) {
            Some(t) => t.next_deadline(),
            None => self
                .devices
                .get(idx - self.transports.len())
                .and_then(|d| d.next_deadline()),
        }
    }

    /// Add a native device that reaches `peers`; a device route takes precedence over any
    /// transport route. Returns the device's index.
    pub fn add_device(&mut self, device: Box<dyn device::Device>, peers: &[Rank]) -> usize {
        let idx = self.devices.len();
        assert!(idx < NO_ROUTE as usize, "too many devices");
        if self.device_route.is_empty() {
            self.device_route = vec![NO_ROUTE; self.route.len()];
        }
        self.timers |= device.caps().timers;
        self.devices.push(device);
        self.route_to_device(idx, peers);
        idx
    }

    /// Route `peers` to device `idx` from now on. Peers may lie beyond the job's ranks:
    /// the processes of other worlds that a device added at run time reaches (dynamic
    /// processes) get ranks above the job's own.
    pub fn route_to_device(&mut self, idx: usize, peers: &[Rank]) {
        assert!(idx < self.devices.len(), "no device {idx}");
        for &p in peers {
            if p as usize >= self.device_route.len() {
                self.device_route.resize(p as usize + 1, NO_ROUTE);
            }
            self.device_route[p as usize] = idx as u8;
        }
    }

    /// Index of the device reaching `peer`, if a device does. Costs one branch when the
    /// job has no devices.
    #[inline]
    pub fn device_of(&self, peer: Rank) -> Option<usize> {
        match self.device_route.get(peer as usize) {
            Some(&i) if i != NO_ROUTE => Some(i as usize),
            _ => None,
        }
    }

    /// All devices, in the order they were added.
    pub fn devices(&mut self) -> &mut [Box<dyn device::Device>] {
        &mut self.devices
    }

    /// Whether the job has any native device.
    #[inline]
    pub fn has_devices(&self) -> bool {
        !self.devices.is_empty()
    }

    /// Add a transport that reaches `peers`; later additions override earlier routes.
    /// Returns the transport's index.
    ///
    /// # Panics
    /// If the transport's [`TransportCaps`] say it does not deliver in order per peer: the
    /// request layer's matching cannot work over it (a bug in the transport, not a run-time
    /// condition).
    pub fn add(&mut self, transport: Box<dyn Transport>, peers: &[Rank]) -> usize {
        let idx = self.transports.len();
        assert!(idx < NO_ROUTE as usize, "too many transports");
        let caps = transport.caps();
        assert!(
            caps.ordered,
            "transport {} breaks the contract: {caps:?}",
            transport.name()
        );
        self.timers |= caps.timers;
        self.places.push(transport.places());
        self.transports.push(transport);
        for &p in peers {
            self.route[p as usize] = idx as u8;
        }
        idx
    }

    /// Index of the transport reaching `peer`, if any.
    #[inline]
    pub fn route_of(&self, peer: Rank) -> Option<usize> {
        match self.route.get(peer as usize) {
            Some(&i) if i != NO_ROUTE => Some(i as usize),
            _ => None,
        }
    }

    /// The transport reaching `peer`.
    #[inline]
    pub fn to(&mut self, peer: Rank) -> Option<&mut dyn Transport> {
        let i = self.route_of(peer)?;
        Some(self.transports[i].as_mut())
    }

    /// All transports, in the order they were added.
    pub fn transports(&mut self) -> &mut [Box<dyn Transport>] {
        &mut self.transports
    }

    /// Number of transports.
    pub fn len(&self) -> usize {
        self.transports.len()
    }

    /// True when no transport was added.
    pub fn is_empty(&self) -> bool {
        self.transports.is_empty()
    }

    /// The event sources of all transports, index-aligned with `transports()`, then those
    /// of the devices (index `transports().len() + d` for device `d`).
    pub fn event_sources(&self) -> Vec<Arc<dyn EventSource>> {
        self.transports
            .iter()
            .map(|t| t.event_source())
            .chain(self.devices.iter().map(|d| d.event_source()))
            .collect()
    }

    /// Polling engine step: visit every transport once without blocking.
    pub fn poll_all(&mut self, sink: &mut Sink<'_>) -> Result<usize, P2pError> {
        let mut n = 0;
        for t in self.transports.iter_mut() {
            n += t.poll(sink)?;
        }
        Ok(n)
    }

    /// [`Router::poll_all`] delivering to `rx`, and letting the transports that place
    /// ([`Transport::places`]) claim messages through it.
    pub fn poll_all_placing<A: Arrivals>(&mut self, rx: &mut A) -> Result<usize, P2pError> {
        let mut n = 0;
        for (t, &places) in self.transports.iter_mut().zip(&self.places) {
            n += if places {
                t.poll_placing(rx)?
            } else {
                t.poll(&mut |src, hdr, payload| rx.deliver(src, hdr, payload))?
            };
        }
        Ok(n)
    }

    /// Poll transport `idx` alone (a threaded-engine progress thread), as
    /// [`Router::poll_all_placing`] polls it.
    pub fn poll_one_placing<A: Arrivals>(
        &mut self,
        idx: usize,
        rx: &mut A,
    ) -> Result<usize, P2pError> {
        let t = &mut self.transports[idx];
        if self.places[idx] {
            t.poll_placing(rx)
        } else {
            t.poll(&mut |src, hdr, payload| rx.deliver(src, hdr, payload))
        }
    }
}

#[cfg(test)]
mod router_tests {
    use super::*;

    /// A transport that moves nothing and states the capabilities and deadline it is given.
    struct Stated(TransportCaps, Option<Instant>);

    impl Transport for Stated {
        fn name(&self) -> &'static str {
            "stated"
        }
        fn eager_limit(&self) -> usize {
            self.0.eager_limit
        }
        fn max_payload(&self) -> usize {
            self.0.max_payload
        }
        fn try_send(&mut self, _: Rank, _: &Header, _: &[u8]) -> Result<bool, P2pError> {
            Ok(false)
        }
        fn poll(&mut self, _: &mut Sink<'_>) -> Result<usize, P2pError> {
            Ok(0)
        }
        fn event_source(&self) -> Arc<dyn EventSource> {
            futex::LocalDoorbell::new()
        }
        fn caps(&self) -> TransportCaps {
            self.0
        }
        fn next_deadline(&self) -> Option<Instant> {
            self.1
        }
    }

    fn caps(timers: bool, ordered: bool) -> TransportCaps {
        TransportCaps {
            eager_limit: 64,
            max_payload: 128,
            rdma_read: false,
            rdma_write: false,
            needs_registration: false,
            ordered,
            timers,
        }
    }

    #[test]
    fn the_earliest_timer_bounds_the_engines_sleep() {
        let now = Instant::now();
        let soon = now + Duration::from_millis(5);
        let later = now + Duration::from_millis(50);
        let mut r = Router::new(4);
        r.add(Box::new(Stated(caps(false, true), Some(now))), &[0]);
        // Without a transport that declares timers, deadlines are not even asked for.
        assert_eq!(r.next_deadline(), None);
        r.add(Box::new(Stated(caps(true, true), Some(later))), &[1]);
        r.add(Box::new(Stated(caps(true, true), Some(soon))), &[2]);
        r.add(Box::new(Stated(caps(true, true), None)), &[3]);
        // The first transport states no timers but reports a deadline: it is still the
        // earliest once any transport has timers (the router asks every one).
        assert_eq!(r.next_deadline(), Some(now));
        assert_eq!(r.deadline_of(2), Some(soon));
        assert_eq!(r.deadline_of(3), None);
    }

    #[test]
    #[should_panic(expected = "breaks the contract")]
    fn an_unordered_transport_is_refused() {
        Router::new(1).add(Box::new(Stated(caps(false, false), None)), &[0]);
    }
}
