//! A transport over Unix-domain stream sockets, for tests: it reaches only ranks on this
//! host, so it stands in for an inter-node transport when `TSUNAGI_NODE_MAP` pretends that
//! one host is several nodes (`TSUNAGI_INTERNODE=stream`). It is also the proof that a
//! transport plugs in from its own crate: it registers through [`FACTORY`] and nothing in
//! the MPI core names it.
//!
//! Framing comes from [`tsunagi_p2p::framing`] (shared with TCP); this crate has the
//! sockets: non-blocking Unix stream sockets in the Linux abstract namespace, one epoll set
//! as the [`EventSource`].
//!
//! # Connection scheme: one connection per direction
//!
//! A connection initiated by rank `a` to rank `b` carries only `a → b` messages; `b → a`
//! messages use the connection `b` initiates on its first send to `a`. This removes the
//! simultaneous-connect problem entirely (there is nothing to deduplicate: each side owns
//! exactly the connection it made) and keeps per-peer ordering trivial (one byte stream per
//! direction). The cost is two sockets per communicating pair instead of one, irrelevant
//! at the scale this transport is used. The reverse direction of a connection carries at
//! most one [`GOODBYE`] marker from the acceptor, so that a connector learns that the
//! acceptor shut down on purpose.
//!
//! # Shutdown and failure
//!
//! Dropping a `StreamTransport` is a graceful close: it keeps flushing queued messages for
//! up to [`LINGER`] (reading and discarding incoming bytes meanwhile, so that two ranks
//! closing at once cannot block each other), then sends [`GOODBYE`] on every connection
//! whose queue drained and closes. A peer that sees EOF or ECONNRESET *without* a prior
//! goodbye reports [`P2pError::PeerFailed`]; after a goodbye, the EOF is quiet and later
//! sends to that rank fail with `PeerFailed` ("closed"). [`StreamTransport::abort`] closes
//! without goodbyes, as a crash would.

use std::collections::VecDeque;
use std::io::IoSlice;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tsunagi_p2p::framing::{
    encode_frame_head, encode_hello, Frame, FrameDecoder, OutQueue, GOODBYE,
};
use tsunagi_p2p::{EventSource, Header, P2pError, Rank, Sink, Transport};

mod factory;
pub use factory::{StreamFactory, FACTORY};

/// Eager limit of the stream transport.
pub const EAGER_LIMIT: usize = 64 * 1024;
/// Largest payload of one frame.
pub const MAX_PAYLOAD: usize = 256 * 1024;
/// Queued bytes per peer above which `try_send` says "no room". With one message allowed
/// past the bound, a peer's queue holds at most `QUEUE_BOUND + MAX_PAYLOAD` plus frame heads.
pub const QUEUE_BOUND: usize = 1 << 20;
/// How long a drop keeps flushing queued messages before giving up on them.
pub const LINGER: Duration = Duration::from_secs(5);
/// How long to keep retrying a connect to a rank that is not listening (yet).
const CONNECT_PATIENCE: Duration = Duration::from_secs(30);
/// Bytes read from one connection per poll, so one busy peer cannot starve the others
/// (level-triggered epoll brings us back for the rest).
const READ_BUDGET: usize = 1 << 20;
/// iovecs per sendmsg.
const MAX_IOV: usize = 64;

// ---------------------------------------------------------------------------------------
// System-call helpers
// ---------------------------------------------------------------------------------------

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn errno_name(e: i32) -> String {
    std::io::Error::from_raw_os_error(e).to_string()
}

/// Wrap a freshly returned descriptor, or report the failed call.
fn owned(fd: RawFd, call: &'static str) -> Result<OwnedFd, P2pError> {
    if fd < 0 {
        return Err(P2pError::last_os(call));
    }
    // SAFETY: `fd` was just returned by a successful system call and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The abstract-namespace address "\0<prefix>-<rank>".
fn abstract_addr(
    prefix: &str,
    rank: Rank,
) -> Result<(libc::sockaddr_un, libc::socklen_t), P2pError> {
    let name = format!("{prefix}-{rank}");
    // SAFETY: sockaddr_un is plain old data; all-zero is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    if name.len() + 1 > addr.sun_path.len() {
        return Err(P2pError::Other(format!("socket name '{name}' is too long")));
    }
    // sun_path[0] stays 0: that selects the abstract namespace (no file to clean up).
    for (dst, &b) in addr.sun_path[1..].iter_mut().zip(name.as_bytes()) {
        *dst = b as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + 1 + name.len();
    Ok((addr, len as libc::socklen_t))
}

fn stream_socket() -> Result<OwnedFd, P2pError> {
    // SAFETY: plain system call with constant arguments.
    let fd = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    owned(fd, "socket")
}

/// What a non-blocking read or write achieved.
enum Io {
    /// This many bytes (0 from a read is EOF).
    Done(usize),
    /// Would block.
    Again,
    /// Failed with this errno.
    Failed(i32),
}

fn sendmsg(fd: RawFd, slices: &[IoSlice<'_>]) -> Io {
    loop {
        // SAFETY: msghdr is plain old data; all-zero is valid (no name, no control data).
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        // IoSlice is guaranteed ABI-compatible with struct iovec on Unix; sendmsg only
        // reads the slices, which outlive the call.
        msg.msg_iov = slices.as_ptr() as *mut libc::iovec;
        msg.msg_iovlen = slices.len() as _;
        // SAFETY: `fd` is an open socket and `msg` points to valid iovecs for the call.
        // MSG_NOSIGNAL: a vanished peer must become an EPIPE error, not a SIGPIPE.
        let n = unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) };
        if n >= 0 {
            return Io::Done(n as usize);
        }
        match errno() {
            libc::EINTR => continue,
            libc::EAGAIN => return Io::Again,
            e => return Io::Failed(e),
        }
    }
}

fn recv(fd: RawFd, buf: &mut [u8]) -> Io {
    loop {
        // SAFETY: `buf` is valid writable memory of `buf.len()` bytes for the call.
        let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
        if n >= 0 {
            return Io::Done(n as usize);
        }
        match errno() {
            libc::EINTR => continue,
            libc::EAGAIN => return Io::Again,
            e => return Io::Failed(e),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Event source: one epoll set
// ---------------------------------------------------------------------------------------

/// The epoll set holding the listener, every connection and an eventfd for `notify`.
///
/// Level-triggered, so `sleep` returns at once while any socket has unread data or room
/// for queued output: that is what makes the `prepare` token unnecessary (it is always 0)
/// without losing wake-ups. Shared (`Arc`) between the transport, which adds descriptors,
/// and a progress thread that sleeps on it; epoll_ctl and epoll_wait are thread-safe.
struct Epoll {
    epfd: OwnedFd,
    evfd: OwnedFd,
    /// Set while a connect waits for a retry: no descriptor would wake the sleeper then,
    /// so `sleep` naps briefly instead of for its full timeout.
    retry_soon: AtomicBool,
}

/// Epoll user data of the notify eventfd and the listener; connections use their fd.
const TOKEN_EVENTFD: u64 = u64::MAX;
const TOKEN_LISTENER: u64 = u64::MAX - 1;

impl Epoll {
    fn new() -> Result<Arc<Epoll>, P2pError> {
        // SAFETY: plain system call with constant arguments.
        let epfd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        let epfd = owned(epfd, "epoll_create1")?;
        // SAFETY: plain system call with constant arguments.
        let evfd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        let evfd = owned(evfd, "eventfd")?;
        let ep = Epoll {
            epfd,
            evfd,
            retry_soon: AtomicBool::new(false),
        };
        ep.ctl(
            libc::EPOLL_CTL_ADD,
            ep.evfd.as_raw_fd(),
            libc::EPOLLIN as u32,
            TOKEN_EVENTFD,
        )?;
        Ok(Arc::new(ep))
    }

    fn ctl(&self, op: i32, fd: RawFd, events: u32, token: u64) -> Result<(), P2pError> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: both descriptors are open; `ev` lives across the call.
        if unsafe { libc::epoll_ctl(self.epfd.as_raw_fd(), op, fd, &mut ev) } < 0 {
            return Err(P2pError::last_os("epoll_ctl"));
        }
        Ok(())
    }

    /// Remove `fd` before it is closed. Closing alone would not do if the descriptor were
    /// ever duplicated (e.g. inherited across fork): epoll tracks the open file, not the fd.
    fn remove(&self, fd: RawFd) {
        let _ = self.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0);
    }

    fn wait(&self, events: &mut [libc::epoll_event], timeout_ms: i32) -> usize {
        // SAFETY: `events` is valid writable memory for `events.len()` entries.
        let n = unsafe {
            libc::epoll_wait(
                self.epfd.as_raw_fd(),
                events.as_mut_ptr(),
                events.len() as i32,
                timeout_ms,
            )
        };
        // EINTR (or any failure) reads as "nothing ready": callers poll again anyway.
        n.max(0) as usize
    }
}

impl EventSource for Epoll {
    fn prepare(&self) -> u64 {
        0
    }

    fn sleep(&self, _token: u64, timeout: Duration) {
        let mut timeout = timeout;
        if self.retry_soon.load(Ordering::Relaxed) {
            timeout = timeout.min(Duration::from_millis(2));
        }
        // Round up: a 100 µs timeout must not become a 0 ms busy poll.
        let ms = timeout.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32;
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 8];
        let n = self.wait(&mut events, ms);
        if events[..n].iter().any(|e| e.u64 == TOKEN_EVENTFD) {
            let mut v = 0u64;
            // SAFETY: reads 8 bytes into `v`; the eventfd is non-blocking. Draining it
            // consumes the notification so the next sleep blocks again.
            unsafe { libc::read(self.evfd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
        }
    }

    fn cancel(&self) {}

    fn notify(&self) {
        let one = 1u64;
        // SAFETY: writes 8 bytes from `one` to the eventfd; an overflowing counter (EAGAIN)
        // still leaves it readable, which is all a wake-up needs.
        unsafe { libc::write(self.evfd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// The epoll set (sockets and the eventfd), nested in a registry's.
    fn wait_fd(&self) -> Option<std::os::fd::RawFd> {
        Some(self.epfd.as_raw_fd())
    }

    fn prepare_wait(&self) -> Duration {
        if self.retry_soon.load(Ordering::Relaxed) {
            Duration::from_millis(2)
        } else {
            Duration::MAX
        }
    }

    fn end_wait(&self) {
        // A notification is consumed here (the sockets' readiness by the transport's
        // poll), so that the next wait blocks again.
        let mut v = 0u64;
        // SAFETY: reads 8 bytes into `v`; the eventfd is non-blocking.
        unsafe { libc::read(self.evfd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    }
}

// ---------------------------------------------------------------------------------------
// The transport
// ---------------------------------------------------------------------------------------

/// The state of our connection to a peer (our sending direction).
enum Out {
    /// No connection yet; made on the first send.
    Idle,
    /// The peer did not accept yet; retry at `next` until `deadline`.
    Connecting {
        next: Instant,
        backoff: Duration,
        deadline: Instant,
    },
    /// Connected through `fd`; `want_out` mirrors whether EPOLLOUT is in its interest set.
    Connected { fd: RawFd, want_out: bool },
    /// The peer said goodbye: it will read nothing more.
    Closed,
    /// The connection failed; sends report this.
    Failed(String),
}

struct Peer {
    /// Named in `set_peers`: only those may be sent to.
    declared: bool,
    out: Out,
    queue: OutQueue,
    /// The connection the peer made to us, once its hello arrived.
    inbound: Option<RawFd>,
    /// On `pending` (queue not empty or connect retry due).
    pending: bool,
}

impl Peer {
    fn new() -> Peer {
        Peer {
            declared: false,
            out: Out::Idle,
            queue: OutQueue::new(),
            inbound: None,
            pending: false,
        }
    }
}

enum Role {
    /// Accepted; carries the peer's messages to us. `peer` is known after the hello.
    Inbound { peer: Option<Rank> },
    /// Made by us; carries our messages to `peer` (and at most a goodbye back).
    Outbound { peer: Rank },
}

struct Conn {
    fd: OwnedFd,
    role: Role,
    dec: FrameDecoder,
}

/// Interest of an outbound connection: EPOLLIN only to notice a goodbye/EOF from the peer,
/// EPOLLOUT while bytes are queued so a sleeper wakes when they can be written.
fn out_events(want_out: bool) -> u32 {
    libc::EPOLLIN as u32 | if want_out { libc::EPOLLOUT as u32 } else { 0 }
}

/// A transport over Unix-domain stream sockets within one host. See the module docs for
/// the wire format and the connection scheme.
pub struct StreamTransport {
    me: Rank,
    prefix: String,
    listener: OwnedFd,
    ep: Arc<Epoll>,
    /// Indexed by world rank, grown on demand.
    peers: Vec<Peer>,
    /// Indexed by fd.
    conns: Vec<Option<Conn>>,
    /// Peers whose queue is not empty or whose connect must be retried.
    pending: Vec<Rank>,
    /// Failures found by `poll`, returned one per call.
    errors: VecDeque<P2pError>,
    /// Set by `abort`: drop without flushing or goodbyes.
    aborted: bool,
}

impl StreamTransport {
    /// Bind a listening socket in the Linux abstract namespace at `"\0<prefix>-<me>"` (no
    /// file to clean up), non-blocking.
    pub fn listen(prefix: &str, me: Rank) -> Result<StreamTransport, P2pError> {
        let ep = Epoll::new()?;
        let listener = stream_socket()?;
        let (addr, len) = abstract_addr(prefix, me)?;
        // SAFETY: `addr` is a valid sockaddr_un of which `len` bytes are meaningful.
        if unsafe {
            libc::bind(
                listener.as_raw_fd(),
                (&addr as *const libc::sockaddr_un).cast(),
                len,
            )
        } < 0
        {
            return Err(P2pError::last_os("bind"));
        }
        // SAFETY: plain system call on our socket.
        if unsafe { libc::listen(listener.as_raw_fd(), libc::SOMAXCONN) } < 0 {
            return Err(P2pError::last_os("listen"));
        }
        ep.ctl(
            libc::EPOLL_CTL_ADD,
            listener.as_raw_fd(),
            libc::EPOLLIN as u32,
            TOKEN_LISTENER,
        )?;
        Ok(StreamTransport {
            me,
            prefix: prefix.to_string(),
            listener,
            ep,
            peers: Vec::new(),
            conns: Vec::new(),
            pending: Vec::new(),
            errors: VecDeque::new(),
            aborted: false,
        })
    }

    /// Declare which peers this transport reaches (world ranks).
    pub fn set_peers(&mut self, peers: &[Rank]) {
        for p in self.peers.iter_mut() {
            p.declared = false;
        }
        for &r in peers {
            self.peer_mut(r).declared = true;
        }
    }

    /// Close every connection without flushing or saying goodbye, as if the process had
    /// died: peers report [`P2pError::PeerFailed`]. For fault-injection tests.
    pub fn abort(mut self) {
        self.aborted = true;
    }

    fn peer_mut(&mut self, r: Rank) -> &mut Peer {
        let i = r as usize;
        if i >= self.peers.len() {
            self.peers.resize_with(i + 1, Peer::new);
        }
        &mut self.peers[i]
    }

    fn add_conn(&mut self, fd: OwnedFd, role: Role, events: u32) -> Result<RawFd, P2pError> {
        let raw = fd.as_raw_fd();
        self.ep.ctl(libc::EPOLL_CTL_ADD, raw, events, raw as u64)?;
        let dec = match role {
            Role::Inbound { .. } => FrameDecoder::new(MAX_PAYLOAD),
            // The reverse direction carries at most a goodbye.
            Role::Outbound { .. } => FrameDecoder::with_chunk(0, 64),
        };
        let i = raw as usize;
        if i >= self.conns.len() {
            self.conns.resize_with(i + 1, || None);
        }
        self.conns[i] = Some(Conn { fd, role, dec });
        Ok(raw)
    }

    fn close_conn(&mut self, fd: RawFd) {
        if let Some(c) = self.conns.get_mut(fd as usize).and_then(Option::take) {
            self.ep.remove(fd);
            drop(c);
        }
    }

    /// Mark `peer` failed, close both its connections and build the error.
    fn fail(&mut self, peer: Rank, why: String) -> P2pError {
        let p = self.peer_mut(peer);
        let out_fd = match p.out {
            Out::Connected { fd, .. } => Some(fd),
            _ => None,
        };
        p.out = Out::Failed(why.clone());
        p.queue.clear();
        let in_fd = p.inbound.take();
        for fd in out_fd.into_iter().chain(in_fd) {
            self.close_conn(fd);
        }
        P2pError::PeerFailed { peer, why }
    }

    fn enlist(&mut self, peer: Rank) {
        let p = self.peer_mut(peer);
        if !p.pending {
            p.pending = true;
            self.pending.push(peer);
        }
    }

    /// Try to connect to `peer` now. Leaves `Out` Connected, Connecting (retry later) or
    /// Failed (error returned).
    fn connect(&mut self, peer: Rank) -> Result<(), P2pError> {
        let sock = stream_socket()?;
        let (addr, len) = abstract_addr(&self.prefix, peer)?;
        // SAFETY: `addr` is a valid sockaddr_un of which `len` bytes are meaningful.
        let rc = unsafe {
            libc::connect(
                sock.as_raw_fd(),
                (&addr as *const libc::sockaddr_un).cast(),
                len,
            )
        };
        let e = if rc == 0 { 0 } else { errno() };
        match e {
            // EINPROGRESS does not happen for Unix sockets today; if it did, the socket
            // would become writable once connected, and a failure would surface as a
            // write error, so treating it as connected is safe.
            0 | libc::EINPROGRESS => {
                let fd = self.add_conn(sock, Role::Outbound { peer }, out_events(true))?;
                let hello = encode_hello(self.me);
                let p = self.peer_mut(peer);
                p.queue.prepend(&hello);
                p.out = Out::Connected { fd, want_out: true };
                self.enlist(peer);
                Ok(())
            }
            // Not listening yet (ECONNREFUSED: no such abstract name) or its backlog is
            // full (EAGAIN): retry with back-off until the patience runs out.
            libc::ECONNREFUSED | libc::ENOENT | libc::EAGAIN | libc::EINTR => {
                let now = Instant::now();
                let p = self.peer_mut(peer);
                let (backoff, deadline) = match p.out {
                    Out::Connecting {
                        backoff, deadline, ..
                    } => ((backoff * 2).min(Duration::from_millis(100)), deadline),
                    _ => (Duration::from_millis(1), now + CONNECT_PATIENCE),
                };
                if now >= deadline {
                    return Err(self.fail(
                        peer,
                        format!(
                            "could not connect for {CONNECT_PATIENCE:?}: {}",
                            errno_name(e)
                        ),
                    ));
                }
                p.out = Out::Connecting {
                    next: now + backoff,
                    backoff,
                    deadline,
                };
                self.enlist(peer);
                self.ep.retry_soon.store(true, Ordering::Relaxed);
                Ok(())
            }
            _ => Err(self.fail(peer, format!("connect: {}", errno_name(e)))),
        }
    }

    /// Write as much of `peer`'s queue as the socket takes; keep EPOLLOUT interest in sync.
    fn flush(&mut self, peer: Rank) -> Result<(), P2pError> {
        let Out::Connected { fd, want_out } = self.peers[peer as usize].out else {
            return Ok(());
        };
        let p = &mut self.peers[peer as usize];
        let mut failed = None;
        while !p.queue.is_empty() {
            let mut iov = [IoSlice::new(&[]); MAX_IOV];
            let n = p.queue.io_slices(&mut iov);
            let offered: usize = iov[..n].iter().map(|s| s.len()).sum();
            match sendmsg(fd, &iov[..n]) {
                Io::Done(k) => {
                    p.queue.consume(k);
                    if k < offered {
                        break; // the socket buffer is full
                    }
                }
                Io::Again => break,
                Io::Failed(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        if let Some(e) = failed {
            return Err(self.fail(peer, format!("send: {}", errno_name(e))));
        }
        let p = &mut self.peers[peer as usize];
        let want = !p.queue.is_empty();
        if want != want_out {
            p.out = Out::Connected { fd, want_out: want };
            self.ep
                .ctl(libc::EPOLL_CTL_MOD, fd, out_events(want), fd as u64)?;
        }
        Ok(())
    }

    /// Retry due connects and flush queues; drop peers that have nothing pending.
    fn progress_pending(&mut self) {
        let mut i = 0;
        let mut retry_soon = false;
        while i < self.pending.len() {
            let peer = self.pending[i];
            let res = match self.peers[peer as usize].out {
                Out::Connecting { next, .. } if Instant::now() >= next => self.connect(peer),
                _ => Ok(()),
            };
            let res = res.and_then(|()| self.flush(peer));
            if let Err(e) = res {
                self.errors.push_back(e);
            }
            let p = &mut self.peers[peer as usize];
            let keep = match p.out {
                Out::Connecting { .. } => {
                    retry_soon = true;
                    true
                }
                Out::Connected { .. } => !p.queue.is_empty(),
                _ => false,
            };
            if keep {
                i += 1;
            } else {
                p.pending = false;
                self.pending.swap_remove(i);
            }
        }
        self.ep.retry_soon.store(retry_soon, Ordering::Relaxed);
    }

    fn accept_all(&mut self, sink: Option<&mut Sink<'_>>, delivered: &mut usize) {
        let mut sink = sink;
        loop {
            // SAFETY: accepting on our listening socket; no peer address is requested.
            let fd = unsafe {
                libc::accept4(
                    self.listener.as_raw_fd(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                )
            };
            if fd < 0 {
                match errno() {
                    libc::EINTR | libc::ECONNABORTED => continue,
                    // EAGAIN: accepted everything. Anything else (EMFILE...) leaves the
                    // connection in the backlog; it is retried on the next poll.
                    _ => return,
                }
            }
            let added = owned(fd, "accept4").and_then(|fd| {
                self.add_conn(fd, Role::Inbound { peer: None }, libc::EPOLLIN as u32)
            });
            match added {
                // Read at once: the hello and first frames are usually there already.
                Ok(raw) => self.service(raw, sink.as_deref_mut(), delivered),
                Err(e) => self.errors.push_back(e),
            }
        }
    }

    /// Read what `fd` has (up to the budget) and deliver complete frames. `sink` is `None`
    /// while lingering in drop: frames are then discarded.
    fn service(&mut self, fd: RawFd, mut sink: Option<&mut Sink<'_>>, delivered: &mut usize) {
        let mut budget = READ_BUDGET;
        // Outcome once the loop ends: None = keep the connection; Some(None) = close
        // quietly; Some(Some(why)) = close and fail the peer.
        let mut end: Option<Option<String>> = None;
        let mut hello: Option<Rank> = None;
        let mut duplicate = false;
        let role_peer;
        let outbound;
        {
            let Some(conn) = self.conns.get_mut(fd as usize).and_then(Option::as_mut) else {
                return; // closed earlier in this poll; a stale event
            };
            (role_peer, outbound) = match conn.role {
                Role::Inbound { peer } => (peer, false),
                Role::Outbound { peer } => (Some(peer), true),
            };
            let mut peer = role_peer;
            while budget > 0 && end.is_none() {
                let buf = conn.dec.read_buf();
                let n = match recv(conn.fd.as_raw_fd(), buf) {
                    Io::Done(0) => {
                        end = Some(if conn.dec.said_goodbye() || peer.is_none() {
                            // After a goodbye the EOF is expected; a connection that closes
                            // before its hello never belonged to a rank.
                            None
                        } else {
                            Some("connection closed without goodbye (process died?)".into())
                        });
                        break;
                    }
                    Io::Done(n) => n,
                    Io::Again => break,
                    Io::Failed(e) => {
                        end = Some(if conn.dec.said_goodbye() {
                            None
                        } else {
                            Some(format!("receive: {}", errno_name(e)))
                        });
                        break;
                    }
                };
                conn.dec.commit(n);
                budget = budget.saturating_sub(n);
                if peer.is_none() {
                    match conn.dec.take_hello() {
                        None => continue,
                        Some(Ok(r)) => {
                            // Checked before any frame is delivered: `self.peers` is a
                            // different field from the borrowed `self.conns`.
                            if self
                                .peers
                                .get(r as usize)
                                .is_some_and(|p| p.inbound.is_some())
                            {
                                duplicate = true;
                                break;
                            }
                            peer = Some(r);
                            hello = Some(r);
                            conn.role = Role::Inbound { peer };
                        }
                        Some(Err(e)) => {
                            end = Some(Some(e.to_string()));
                            break;
                        }
                    }
                }
                let from = peer.expect("set above");
                loop {
                    match conn.dec.next_frame() {
                        Ok(None) => break,
                        Ok(Some(Frame::Goodbye)) => {}
                        Ok(Some(Frame::Message(h, payload))) => match &mut sink {
                            Some(sink) if !outbound => {
                                sink(from, &h, payload);
                                *delivered += 1;
                            }
                            Some(_) => {
                                end = Some(Some("message on the reverse direction".into()));
                                break;
                            }
                            None => {}
                        },
                        Err(e) => {
                            end = Some(Some(e.to_string()));
                            break;
                        }
                    }
                }
            }
        }
        if duplicate {
            // One connection per direction: a second one from the same rank is a protocol
            // violation (or a stale process reusing our prefix). Drop it, keep the first.
            self.close_conn(fd);
            self.errors.push_back(P2pError::Other(format!(
                "stream: rank {} got a second connection claiming the same rank",
                self.me
            )));
            return;
        }
        if let Some(r) = hello {
            self.peer_mut(r).inbound = Some(fd);
        }
        let Some(outcome) = end else { return };
        let peer = role_peer.or(hello);
        // A goodbye is only sent when a transport is dropped, so on either connection it
        // means the peer's whole transport is gone: it will neither send nor read again.
        let said_goodbye = self
            .conns
            .get(fd as usize)
            .and_then(Option::as_ref)
            .is_some_and(|c| c.dec.said_goodbye());
        self.close_conn(fd);
        match (peer, outcome) {
            (Some(r), Some(why)) => {
                if !self.aborted {
                    let e = self.fail(r, why);
                    self.errors.push_back(e);
                }
            }
            (Some(r), None) => {
                let p = self.peer_mut(r);
                if p.inbound == Some(fd) {
                    p.inbound = None;
                }
                if said_goodbye {
                    let out_fd = match p.out {
                        Out::Connected { fd, .. } => Some(fd),
                        _ => None,
                    };
                    let lost = p.queue.len();
                    p.queue.clear();
                    if !matches!(p.out, Out::Failed(_)) {
                        p.out = Out::Closed;
                    }
                    if let Some(ofd) = out_fd {
                        self.close_conn(ofd);
                    }
                    if lost > 0 && sink.is_some() {
                        self.errors.push_back(P2pError::PeerFailed {
                            peer: r,
                            why: format!("it closed with {lost} bytes still queued for it"),
                        });
                    }
                }
            }
            (None, _) => {}
        }
    }

    /// One round of readiness: accept, read, deliver (or discard when `sink` is None).
    fn poll_events(&mut self, mut sink: Option<&mut Sink<'_>>, timeout_ms: i32) -> usize {
        let mut delivered = 0;
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 32];
        let n = self.ep.wait(&mut events, timeout_ms);
        for ev in &events[..n] {
            match ev.u64 {
                // Left for `sleep` to drain: it is a wake-up for sleepers, not data.
                TOKEN_EVENTFD => {}
                TOKEN_LISTENER => self.accept_all(sink.as_deref_mut(), &mut delivered),
                fd => {
                    // EPOLLOUT alone needs no read: the flush below handles it.
                    if ev.events & (libc::EPOLLIN | libc::EPOLLHUP | libc::EPOLLERR) as u32 != 0 {
                        self.service(fd as RawFd, sink.as_deref_mut(), &mut delivered);
                    }
                }
            }
        }
        self.progress_pending();
        delivered
    }

    /// Graceful close: flush for up to [`LINGER`], then goodbye on every drained connection.
    fn linger(&mut self) {
        let deadline = Instant::now() + LINGER;
        while !self.pending.is_empty() && Instant::now() < deadline {
            // Incoming bytes are read and dropped so that a peer lingering at the same
            // time can drain its queue too.
            self.poll_events(None, 10);
        }
        for r in 0..self.peers.len() {
            let p = &mut self.peers[r];
            if let Out::Connected { fd, .. } = p.out {
                if p.queue.is_empty() {
                    let _ = sendmsg(fd, &[IoSlice::new(&GOODBYE.to_le_bytes())]);
                }
            }
            if let Some(fd) = p.inbound {
                let _ = sendmsg(fd, &[IoSlice::new(&GOODBYE.to_le_bytes())]);
            }
        }
    }
}

impl Drop for StreamTransport {
    fn drop(&mut self) {
        if !self.aborted {
            self.linger();
        }
        for fd in 0..self.conns.len() {
            self.close_conn(fd as RawFd);
        }
        self.ep.remove(self.listener.as_raw_fd());
        // A sleeper on the shared epoll set must not wait for descriptors that are gone.
        self.ep.notify();
    }
}

impl Transport for StreamTransport {
    fn name(&self) -> &'static str {
        "stream"
    }

    fn eager_limit(&self) -> usize {
        EAGER_LIMIT
    }

    fn max_payload(&self) -> usize {
        MAX_PAYLOAD
    }

    fn try_send(&mut self, peer: Rank, hdr: &Header, payload: &[u8]) -> Result<bool, P2pError> {
        if payload.len() > MAX_PAYLOAD {
            return Err(P2pError::Other(format!(
                "stream: payload of {} bytes exceeds max_payload {MAX_PAYLOAD}",
                payload.len()
            )));
        }
        let me = self.me;
        let p = self.peer_mut(peer);
        if !p.declared {
            return Err(P2pError::Unsupported(format!(
                "stream transport of rank {me} does not reach rank {peer}"
            )));
        }
        let connect_now = match &p.out {
            Out::Failed(why) => {
                return Err(P2pError::PeerFailed {
                    peer,
                    why: why.clone(),
                })
            }
            Out::Closed => {
                return Err(P2pError::PeerFailed {
                    peer,
                    why: "it closed its stream transport".into(),
                })
            }
            Out::Idle => true,
            Out::Connecting { next, .. } => Instant::now() >= *next,
            Out::Connected { .. } => false,
        };
        if connect_now {
            self.connect(peer)?;
        }
        let p = &self.peers[peer as usize];
        let connected = matches!(p.out, Out::Connected { .. });
        if connected && !p.queue.is_empty() {
            self.flush(peer)?;
        }
        let p = &mut self.peers[peer as usize];
        if let (Out::Connected { fd, .. }, true) = (&p.out, p.queue.is_empty()) {
            // Fast path: straight from the caller's buffer into the socket, one writev.
            let fd = *fd;
            let head = encode_frame_head(hdr, payload.len());
            let total = head.len() + payload.len();
            let k = match sendmsg(fd, &[IoSlice::new(&head), IoSlice::new(payload)]) {
                Io::Done(k) => k,
                Io::Again => 0,
                Io::Failed(e) => return Err(self.fail(peer, format!("send: {}", errno_name(e)))),
            };
            if k == total {
                return Ok(true);
            }
            // Partial write: the rest must follow before anything else.
            let (h, pl) = if k < head.len() {
                (&head[k..], payload)
            } else {
                (&head[..0], &payload[k - head.len()..])
            };
            p.queue.push_parts(&[h, pl]);
        } else if p.queue.len() >= QUEUE_BOUND {
            return Ok(false);
        } else {
            p.queue.push_frame(hdr, payload);
        }
        // Bytes are queued: flush in later polls, and ask epoll for writability so that a
        // sleeping progress engine wakes up to write them.
        self.enlist(peer);
        if let Out::Connected {
            fd,
            want_out: false,
        } = self.peers[peer as usize].out
        {
            self.peers[peer as usize].out = Out::Connected { fd, want_out: true };
            self.ep
                .ctl(libc::EPOLL_CTL_MOD, fd, out_events(true), fd as u64)?;
        }
        Ok(true)
    }

    fn poll(&mut self, sink: &mut Sink<'_>) -> Result<usize, P2pError> {
        let delivered = self.poll_events(Some(sink), 0);
        if let Some(e) = self.errors.pop_front() {
            if !self.errors.is_empty() {
                // More errors wait for the next poll: make sure a sleeper comes back.
                self.ep.notify();
            }
            return Err(e);
        }
        Ok(delivered)
    }

    fn event_source(&self) -> Arc<dyn EventSource> {
        self.ep.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::thread;
    use tsunagi_p2p::framing::test_data::{checksum, hdr, payload};
    use tsunagi_p2p::framing::FRAME_HEAD_BYTES;

    /// A socket name no other test (or concurrent test run) uses.
    fn prefix(name: &str) -> String {
        static N: AtomicUsize = AtomicUsize::new(0);
        format!(
            "tsunagi-test-{}-{name}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        )
    }

    fn pair(name: &str) -> (StreamTransport, StreamTransport) {
        let pre = prefix(name);
        let mut a = StreamTransport::listen(&pre, 0).unwrap();
        let mut b = StreamTransport::listen(&pre, 1).unwrap();
        a.set_peers(&[1]);
        b.set_peers(&[0]);
        (a, b)
    }

    const N: u32 = 10_000;

    /// Send N messages to `peer` while receiving N from it; verify order, length and
    /// checksum. Returns how often `try_send` reported back-pressure.
    fn exchange(t: &mut StreamTransport, peer: Rank) -> usize {
        let mut next_send = 0u32;
        let mut next_recv = 0u32;
        let mut backpressure = 0;
        let mut cur = payload(0);
        let deadline = Instant::now() + Duration::from_secs(120);
        while next_send < N || next_recv < N {
            assert!(Instant::now() < deadline, "exchange stalled");
            if next_send < N {
                let h = hdr(next_send, cur.len(), checksum(&cur));
                match t.try_send(peer, &h, &cur).unwrap() {
                    true => {
                        next_send += 1;
                        cur = payload(next_send);
                    }
                    false => backpressure += 1,
                }
            }
            t.poll(&mut |from, h, p| {
                assert_eq!(from, peer);
                assert_eq!(h.tag as u32, next_recv, "out of order");
                assert_eq!(h.len as usize, p.len());
                assert_eq!(p.len(), payload(next_recv).len());
                assert_eq!(h.cookie, checksum(p), "payload corrupted");
                assert_eq!((h.kind, h.flags, h.context), (7, 1, 42));
                next_recv += 1;
            })
            .unwrap();
        }
        // A send "completes" once queued, so the last messages may still sit in our queue:
        // keep making progress until they are in the socket, where the peer can read them
        // without us (the threaded engine does this on EPOLLOUT wake-ups).
        while !t.peers[peer as usize].queue.is_empty() {
            assert!(Instant::now() < deadline, "flush stalled");
            t.poll(&mut |_, _, _| panic!("more messages than sent"))
                .unwrap();
        }
        backpressure
    }

    #[test]
    fn exchange_ten_thousand_both_ways_with_backpressure() {
        let (mut a, mut b) = pair("exchange");
        let ta = thread::spawn(move || {
            let bp = exchange(&mut a, 1);
            (a, bp)
        });
        let tb = thread::spawn(move || {
            // Start late so rank 0's queue certainly fills: back-pressure must happen.
            thread::sleep(Duration::from_millis(200));
            let bp = exchange(&mut b, 0);
            (b, bp)
        });
        let (a, bp_a) = ta.join().unwrap();
        let (b, bp_b) = tb.join().unwrap();
        assert!(bp_a > 0, "rank 0 never saw back-pressure");
        eprintln!("back-pressure: rank 0 {bp_a} times, rank 1 {bp_b} times");
        // Queues are bounded by QUEUE_BOUND plus one message.
        for t in [&a, &b] {
            for p in &t.peers {
                assert!(p.queue.len() <= QUEUE_BOUND + FRAME_HEAD_BYTES + MAX_PAYLOAD);
            }
        }
    }

    #[test]
    fn queue_is_bounded_when_peer_does_not_read() {
        let (mut a, mut b) = pair("bound");
        let big = vec![5u8; MAX_PAYLOAD];
        let mut accepted = 0usize;
        while a.try_send(1, &hdr(0, big.len(), 0), &big).unwrap() {
            accepted += 1;
            assert!(accepted < 1000, "no back-pressure");
        }
        assert!(a.peers[1].queue.len() <= QUEUE_BOUND + FRAME_HEAD_BYTES + MAX_PAYLOAD);
        // Once the receiver reads, everything arrives and room comes back.
        let mut got = 0;
        let deadline = Instant::now() + Duration::from_secs(30);
        while got < accepted {
            assert!(Instant::now() < deadline);
            a.poll(&mut |_, _, _| {}).unwrap();
            b.poll(&mut |_, _, p| {
                assert_eq!(p.len(), MAX_PAYLOAD);
                got += 1;
            })
            .unwrap();
        }
        assert!(a.try_send(1, &hdr(0, 0, 0), &[]).unwrap());
    }

    /// Poll `t` until it reports an error; returns the messages delivered before it.
    fn poll_until_error(t: &mut StreamTransport) -> (usize, P2pError) {
        let mut n = 0;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            assert!(Instant::now() < deadline, "no error reported");
            match t.poll(&mut |_, _, _| n += 1) {
                Ok(_) => thread::sleep(Duration::from_millis(1)),
                Err(e) => return (n, e),
            }
        }
    }

    #[test]
    fn peer_crash_is_peer_failed() {
        // Rank 1 sent to rank 0 (inbound connection at rank 0), then dies.
        let (mut a, mut b) = pair("crash-in");
        assert!(b.try_send(0, &hdr(0, 3, 0), b"abc").unwrap());
        b.abort();
        let (n, e) = poll_until_error(&mut a);
        assert_eq!(n, 1, "the message sent before the crash is still delivered");
        assert!(matches!(e, P2pError::PeerFailed { peer: 1, .. }), "{e:?}");
        // Later sends fail at once instead of waiting for a connect.
        assert!(matches!(
            a.try_send(1, &hdr(0, 0, 0), &[]),
            Err(P2pError::PeerFailed { peer: 1, .. })
        ));
        assert!(a.poll(&mut |_, _, _| {}).is_ok(), "reported once");

        // Rank 0 only sends to rank 1 (outbound connection), then rank 1 dies.
        let (mut a, mut b) = pair("crash-out");
        assert!(a.try_send(1, &hdr(0, 0, 0), &[]).unwrap());
        let mut got = 0;
        while got == 0 {
            b.poll(&mut |_, _, _| got += 1).unwrap();
        }
        b.abort();
        let (_, e) = poll_until_error(&mut a);
        assert!(matches!(e, P2pError::PeerFailed { peer: 1, .. }), "{e:?}");
    }

    #[test]
    fn graceful_drop_is_quiet_and_later_sends_fail() {
        let (mut a, mut b) = pair("graceful");
        // A large message that needs several polls: the drop's linger must flush it.
        let big = vec![9u8; MAX_PAYLOAD];
        for i in 0..4 {
            assert!(b.try_send(0, &hdr(i, big.len(), 0), &big).unwrap());
        }
        assert!(a.try_send(1, &hdr(0, 0, 0), &[]).unwrap());
        let dropper = thread::spawn(move || drop(b));
        let mut got = 0;
        let deadline = Instant::now() + Duration::from_secs(10);
        while !(got == 4 && matches!(a.peers[1].out, Out::Closed)) {
            assert!(Instant::now() < deadline, "got {got}");
            a.poll(&mut |_, h, p| {
                assert_eq!(h.tag, got);
                assert_eq!(p.len(), MAX_PAYLOAD);
                got += 1;
            })
            .expect("a graceful close is not a failure");
        }
        dropper.join().unwrap();
        assert!(matches!(
            a.try_send(1, &hdr(0, 0, 0), &[]),
            Err(P2pError::PeerFailed { peer: 1, .. })
        ));
    }

    #[test]
    fn connect_waits_for_a_late_listener() {
        let pre = prefix("late");
        let mut a = StreamTransport::listen(&pre, 0).unwrap();
        a.set_peers(&[1]);
        // Rank 1 does not exist yet: the message is queued and the connect retried.
        assert!(a.try_send(1, &hdr(5, 2, 0), b"hi").unwrap());
        assert!(a.ep.retry_soon.load(Ordering::Relaxed));
        thread::sleep(Duration::from_millis(20));
        let mut b = StreamTransport::listen(&pre, 1).unwrap();
        b.set_peers(&[0]);
        let mut got = None;
        let deadline = Instant::now() + Duration::from_secs(10);
        while got.is_none() {
            assert!(Instant::now() < deadline);
            a.poll(&mut |_, _, _| {}).unwrap();
            b.poll(&mut |from, h, p| got = Some((from, h.tag, p.to_vec())))
                .unwrap();
        }
        assert_eq!(got, Some((0, 5, b"hi".to_vec())));
    }

    #[test]
    fn unknown_peer_and_oversized_payload_are_refused() {
        let (mut a, _b) = pair("refuse");
        assert!(matches!(
            a.try_send(2, &hdr(0, 0, 0), &[]),
            Err(P2pError::Unsupported(_))
        ));
        let too_big = vec![0u8; MAX_PAYLOAD + 1];
        assert!(matches!(
            a.try_send(1, &hdr(0, 0, 0), &too_big),
            Err(P2pError::Other(_))
        ));
    }

    #[test]
    fn event_source_wakes_on_arrival_from_another_thread() {
        let (mut a, mut b) = pair("wake");
        assert_eq!(a.name(), "stream");
        let es = a.event_source();
        // The sleeper runs on its own thread; rank 0's transport stays on this one.
        let sleeper = thread::spawn(move || {
            let t = es.prepare();
            let start = Instant::now();
            es.sleep(t, Duration::from_secs(20));
            start.elapsed()
        });
        thread::sleep(Duration::from_millis(100));
        // Rank 1's first send makes a new connection: the listener wakes the sleeper.
        assert!(b.try_send(0, &hdr(1, 1, 0), b"x").unwrap());
        let slept = sleeper.join().unwrap();
        assert!(slept < Duration::from_secs(10), "slept {slept:?}");
        let mut n = 0;
        while n == 0 {
            a.poll(&mut |_, _, _| n += 1).unwrap();
        }

        // Data on an existing connection wakes it too, and pending data returns at once.
        let es = a.event_source();
        let sleeper = thread::spawn(move || {
            let t = es.prepare();
            let start = Instant::now();
            es.sleep(t, Duration::from_secs(20));
            start.elapsed()
        });
        thread::sleep(Duration::from_millis(100));
        assert!(b.try_send(0, &hdr(2, 1, 0), b"y").unwrap());
        assert!(sleeper.join().unwrap() < Duration::from_secs(10));
        let es = a.event_source();
        let start = Instant::now();
        es.sleep(es.prepare(), Duration::from_secs(20));
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "unread data must not block"
        );

        // notify() from another thread.
        a.poll(&mut |_, _, _| {}).unwrap();
        let es2 = a.event_source();
        let waker = thread::spawn(move || {
            thread::sleep(Duration::from_millis(100));
            es2.notify();
        });
        let start = Instant::now();
        es.sleep(es.prepare(), Duration::from_secs(20));
        assert!(start.elapsed() < Duration::from_secs(10));
        waker.join().unwrap();
        // The notification was consumed: the next sleep times out normally.
        let start = Instant::now();
        es.sleep(es.prepare(), Duration::from_millis(50));
        assert!(start.elapsed() >= Duration::from_millis(40));
    }
}
