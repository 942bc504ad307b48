//! The TCP transport's sockets: a listener, one connection per pair of ranks made on the
//! first send, per-peer bounded queues, and the mio registry as the event source.
//!
//! # Readiness and sleeping
//!
//! mio registers everything edge-triggered. The transport's `poll` asks the registry for
//! events with a zero timeout and then reads each readable connection until it would block
//! (or a per-connection budget runs out; such connections go on a "hot" list served by the
//! next poll). A progress engine sleeps on the *registry's epoll descriptor itself*
//! (`poll(2)` on an epoll fd reports readable while that epoll set has events that nobody
//! collected yet), from any thread, without touching the transport; a `busy` flag makes the
//! sleep return at once while the hot list is not empty, since no new edge would come for
//! bytes already signalled. Write interest is only registered while a queue holds bytes, so
//! ACKs of data already sent do not wake sleepers.
//!
//! # Shutdown and failure
//!
//! As in the stream transport: dropping flushes queues for up to [`LINGER`] (discarding
//! what arrives meanwhile), sends `GOODBYE` on every open link and closes. A link that ends
//! without a goodbye (EOF, reset, a failed connect after [`TcpConfig::connect_timeout`])
//! fails its peer: `poll` returns [`P2pError::PeerFailed`] once and later sends to that
//! peer return it too.

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Registry, Token, Waker};
use socket2::{Domain, Protocol, SockAddr, SockRef, Socket, Type};

use tsunagi_p2p::framing::{encode_frame_head, Frame, FrameDecoder, OutQueue, GOODBYE};
use tsunagi_p2p::{EventSource, Header, P2pError, Rank, Sink, Transport};

use crate::config::{self, TcpConfig};
use crate::handshake::{
    self, check_hello, decode_challenge, decode_verdict, encode_challenge, encode_hello,
    encode_verdict, Fixed, LinkState, Nonce, Refusal, Verdict, CHALLENGE_BYTES, HELLO_BYTES,
    VERDICT_BYTES,
};
use crate::CARD_PREFIX;

/// Messages up to this many bytes go eagerly (Open MPI's TCP BTL uses the same 64 KiB).
pub const EAGER_LIMIT: usize = 64 * 1024;
/// Largest payload of one frame: rendezvous data is streamed in chunks of this size. Large
/// enough that per-frame costs vanish, small enough that the receive buffer (about one
/// frame per connection) stays modest.
pub const MAX_PAYLOAD: usize = 512 * 1024;
/// Queued bytes per peer above which `try_send` says "no room"; a queue holds at most this
/// plus one message.
pub const QUEUE_BOUND: usize = 2 << 20;
/// Payloads at least this large are never queued behind other bytes on an open link (see
/// `try_send`).
const NO_COPY_MIN: usize = 32 * 1024;
/// How long a drop keeps flushing queued messages before giving up on them.
pub const LINGER: Duration = Duration::from_secs(5);
/// Bytes read from one connection per poll, so a busy peer cannot starve the others.
const READ_BUDGET: usize = 1 << 20;
/// iovecs per sendmsg.
const MAX_IOV: usize = 64;
/// Listen backlog: every rank of a large job may connect at once.
const BACKLOG: i32 = 1024;
/// How long an accepted connection may take to send its hello. A rank sends it as soon as
/// its connect completes, so only connections that are not ranks (a port scanner, a
/// half-open flood) take longer.
pub const HELLO_DEADLINE: Duration = Duration::from_secs(5);
/// Accepted connections waiting for their hello, at most: past this the one that waited
/// longest is closed, so half-open connections cost a bounded number of descriptors and
/// cannot starve the job's own connections of them.
pub const MAX_AWAITING_HELLO: usize = 64;
/// A waiting connection younger than this is not closed to make room for a new one.
const EVICT_AFTER: Duration = Duration::from_millis(200);

const TOKEN_LISTENER: Token = Token(0);
const TOKEN_WAKER: Token = Token(1);
/// Connection tokens are their slot index plus this.
const FIRST_CONN: usize = 2;

// ---------------------------------------------------------------------------------------
// Event source
// ---------------------------------------------------------------------------------------

/// What a progress engine sleeps on; shared between the transport and sleepers.
struct Shared {
    /// Locked only by the transport's own `poll` (which needs `&mut Poll`); sleepers use
    /// `epfd` without the lock.
    poll: Mutex<Poll>,
    /// The registry's epoll descriptor, valid as long as `poll` lives (it is in this `Arc`).
    epfd: RawFd,
    waker: Waker,
    /// Connections have unread bytes whose readiness edge was already consumed, or errors
    /// wait to be returned: a sleeper must not block.
    busy: AtomicBool,
    /// A connect waits for its retry time; no descriptor would wake a sleeper for it.
    retry_soon: AtomicBool,
}

impl EventSource for Shared {
    fn prepare(&self) -> u64 {
        0
    }

    fn sleep(&self, _token: u64, timeout: Duration) {
        if self.busy.load(Ordering::Acquire) {
            return;
        }
        let mut timeout = timeout;
        if self.retry_soon.load(Ordering::Relaxed) {
            timeout = timeout.min(Duration::from_millis(2));
        }
        // Round up: a 50 µs timeout must not become a 0 ms busy poll.
        let ms = timeout.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32;
        let mut pfd = libc::pollfd {
            fd: self.epfd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd; `epfd` stays open while `self` (holding the Poll) lives.
        // EINTR or any failure reads as "woke up": callers poll again anyway.
        unsafe { libc::poll(&mut pfd, 1, ms) };
    }

    fn cancel(&self) {}

    fn notify(&self) {
        // The waker's event makes the epoll set readable until the transport's next poll
        // collects it, which wakes every sleeper meanwhile.
        let _ = self.waker.wake();
    }

    /// The epoll set itself: it polls readable while it holds an event the transport's
    /// next poll will collect, so it nests in an [`tsunagi_p2p::registry::EventRegistry`].
    fn wait_fd(&self) -> Option<RawFd> {
        Some(self.epfd)
    }

    fn prepare_wait(&self) -> Duration {
        if self.busy.load(Ordering::Acquire) {
            Duration::ZERO
        } else if self.retry_soon.load(Ordering::Relaxed) {
            Duration::from_millis(2)
        } else {
            Duration::MAX
        }
    }
}

// ---------------------------------------------------------------------------------------
// State
// ---------------------------------------------------------------------------------------

enum Phase {
    /// Outbound, the TCP connect is in progress.
    Connecting,
    /// Outbound, connected; the acceptor's challenge is awaited.
    AwaitChallenge(Fixed<CHALLENGE_BYTES>),
    /// Outbound, our hello is out; the verdict is awaited.
    AwaitVerdict(Fixed<VERDICT_BYTES>),
    /// Inbound, our challenge is out; the connector's hello (answering `Nonce`) is awaited.
    AwaitHello(Fixed<HELLO_BYTES>, Nonce),
    /// The pair's link: frames both ways.
    Open,
}

struct Conn {
    sock: TcpStream,
    remote: SocketAddr,
    phase: Phase,
    /// Outbound: the rank we connect to; inbound: known once its hello was accepted.
    peer: Option<Rank>,
    dec: FrameDecoder,
    /// WRITABLE is in the registered interest.
    want_write: bool,
    /// When it was accepted or connected.
    since: Instant,
}

/// Our link to one peer.
enum Link {
    /// No connection and no attempt yet; made on the first send.
    Idle,
    /// Our connection attempt is slot `conn`.
    Connecting { conn: usize, deadline: Instant },
    /// The peer refused the TCP connect (not listening yet); retry at `next`.
    Retry {
        next: Instant,
        backoff: Duration,
        deadline: Instant,
    },
    /// Our hello was rejected because the peer's own connection wins; it is on its way.
    Waiting { deadline: Instant },
    /// Established over slot `conn`.
    Open { conn: usize },
    /// The peer said goodbye.
    Closed,
    /// The link failed; sends report this.
    Failed(String),
}

struct Peer {
    addr: Option<SocketAddr>,
    link: Link,
    queue: OutQueue,
    /// On the `pending` list.
    pending: bool,
}

impl Peer {
    fn new() -> Peer {
        Peer {
            addr: None,
            link: Link::Idle,
            queue: OutQueue::new(),
            pending: false,
        }
    }
}

/// The TCP transport of one rank. See the crate and module docs.
pub struct TcpTransport {
    me: Rank,
    cfg: TcpConfig,
    listener: TcpListener,
    local: SocketAddr,
    publish: IpAddr,
    shared: Arc<Shared>,
    registry: Registry,
    events: Events,
    /// Indexed by world rank, grown on demand.
    peers: Vec<Peer>,
    /// Connection slots; token = index + FIRST_CONN.
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    /// Connections whose read budget ran out with bytes possibly left.
    hot: Vec<usize>,
    /// Peers with queued bytes or a connect in some phase.
    pending: Vec<Rank>,
    errors: VecDeque<P2pError>,
    /// Connections refused (wrong key, not a Tsunagi hello...); the first one is logged.
    refused: usize,
    aborted: bool,
}

fn io_errno(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(0)
}

/// Write `slices` without blocking and without SIGPIPE (a C program linking the library may
/// not ignore it): sendmsg with MSG_NOSIGNAL. Ok(n) bytes written, Ok(0) would block.
fn sendmsg(fd: RawFd, slices: &[IoSlice<'_>]) -> Result<usize, i32> {
    loop {
        // SAFETY: msghdr is plain old data; all-zero is valid (no name, no control data).
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        // IoSlice is ABI-compatible with struct iovec on Unix; sendmsg only reads them.
        msg.msg_iov = slices.as_ptr() as *mut libc::iovec;
        msg.msg_iovlen = slices.len() as _;
        // SAFETY: `fd` is an open socket; `msg` points to iovecs valid for the call.
        let n = unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) };
        if n >= 0 {
            return Ok(n as usize);
        }
        match io::Error::last_os_error().raw_os_error().unwrap_or(0) {
            libc::EINTR => continue,
            libc::EAGAIN => return Ok(0),
            e => return Err(e),
        }
    }
}

/// Read into `buf`: Ok(Some(n)) (0 is EOF), Ok(None) would block, Err(errno).
fn recv(fd: RawFd, buf: &mut [u8]) -> Result<Option<usize>, i32> {
    loop {
        // SAFETY: `buf` is valid writable memory of `buf.len()` bytes for the call.
        let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
        if n >= 0 {
            return Ok(Some(n as usize));
        }
        match io::Error::last_os_error().raw_os_error().unwrap_or(0) {
            libc::EINTR => continue,
            libc::EAGAIN => return Ok(None),
            e => return Err(e),
        }
    }
}

fn errno_text(e: i32) -> String {
    io::Error::from_raw_os_error(e).to_string()
}

fn os_err(call: &'static str, e: io::Error) -> P2pError {
    P2pError::Os {
        call,
        errno: io_errno(&e),
    }
}

/// Apply the configured options to a connection socket (before connect for outbound ones,
/// so buffer sizes take part in window scaling).
fn tune(sock: SockRef<'_>, cfg: &TcpConfig) -> io::Result<()> {
    // Latency: a small message (an MPI header, a CTS) must not wait for Nagle.
    sock.set_tcp_nodelay(true)?;
    if let Some(n) = cfg.sndbuf {
        sock.set_send_buffer_size(n)?;
    }
    if let Some(n) = cfg.rcvbuf {
        sock.set_recv_buffer_size(n)?;
    }
    Ok(())
}

impl TcpTransport {
    /// Listen for rank `me` as `cfg` says (interface, port range, buffers).
    pub fn bind(me: Rank, cfg: &TcpConfig) -> Result<TcpTransport, P2pError> {
        let (bind_ip, publish) =
            config::choose_address(cfg.interface.as_deref(), &config::interfaces())
                .map_err(P2pError::Other)?;
        let new_socket = || -> Result<Socket, P2pError> {
            let sock = Socket::new(
                Domain::for_address(SocketAddr::new(bind_ip, 0)),
                Type::STREAM.nonblocking().cloexec(),
                Some(Protocol::TCP),
            )
            .map_err(|e| os_err("socket", e))?;
            // A port of a job that just ended may be in TIME_WAIT; that must not make a
            // port range look full.
            sock.set_reuse_address(true)
                .map_err(|e| os_err("setsockopt", e))?;
            // Accepted sockets inherit the listener's receive buffer: set it here, before
            // any connection's handshake.
            if let Some(n) = cfg.rcvbuf {
                sock.set_recv_buffer_size(n)
                    .map_err(|e| os_err("setsockopt", e))?;
            }
            Ok(sock)
        };
        let sock = match cfg.ports {
            None => {
                let sock = new_socket()?;
                sock.bind(&SockAddr::from(SocketAddr::new(bind_ip, 0)))
                    .map_err(|e| os_err("bind", e))?;
                sock.listen(BACKLOG).map_err(|e| os_err("listen", e))?;
                sock
            }
            Some((lo, hi)) => {
                let mut found = None;
                for port in lo..=hi {
                    // With SO_REUSEADDR two ranks of one host can both bind a port that
                    // nobody listens on yet; the second `listen` then fails with
                    // EADDRINUSE. Either failure means: try the next port, on a new socket.
                    let sock = new_socket()?;
                    match sock.bind(&SockAddr::from(SocketAddr::new(bind_ip, port))) {
                        Ok(()) => {}
                        Err(e) if io_errno(&e) == libc::EADDRINUSE => continue,
                        Err(e) => return Err(os_err("bind", e)),
                    }
                    match sock.listen(BACKLOG) {
                        Ok(()) => {
                            found = Some(sock);
                            break;
                        }
                        Err(e) if io_errno(&e) == libc::EADDRINUSE => continue,
                        Err(e) => return Err(os_err("listen", e)),
                    }
                }
                found.ok_or_else(|| {
                    P2pError::Other(format!(
                        "tcp: no free port in TSUNAGI_TCP_PORTS={lo}-{hi} on {bind_ip}"
                    ))
                })?
            }
        };
        let std_listener: std::net::TcpListener = sock.into();
        let mut listener = TcpListener::from_std(std_listener);
        let local = listener
            .local_addr()
            .map_err(|e| os_err("getsockname", e))?;
        let poll = Poll::new().map_err(|e| os_err("epoll_create", e))?;
        let registry = poll.registry().try_clone().map_err(|e| os_err("dup", e))?;
        registry
            .register(&mut listener, TOKEN_LISTENER, Interest::READABLE)
            .map_err(|e| os_err("epoll_ctl", e))?;
        let waker = Waker::new(&registry, TOKEN_WAKER).map_err(|e| os_err("eventfd", e))?;
        let epfd = poll.as_raw_fd();
        Ok(TcpTransport {
            me,
            cfg: cfg.clone(),
            listener,
            local,
            publish,
            shared: Arc::new(Shared {
                poll: Mutex::new(poll),
                epfd,
                waker,
                busy: AtomicBool::new(false),
                retry_soon: AtomicBool::new(false),
            }),
            registry,
            events: Events::with_capacity(256),
            peers: Vec::new(),
            conns: Vec::new(),
            free: Vec::new(),
            hot: Vec::new(),
            pending: Vec::new(),
            errors: VecDeque::new(),
            refused: 0,
            aborted: false,
        })
    }

    /// The address the listener is bound to (the published address and the port).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// What peers connect to: `tcp:<published address>:<port>`, for PMI.
    pub fn card(&self) -> String {
        format!(
            "{CARD_PREFIX}{}",
            SocketAddr::new(self.publish, self.local.port())
        )
    }

    /// The peers this transport reaches and their listening addresses (from their cards).
    pub fn set_peers(&mut self, peers: &[(Rank, SocketAddr)]) {
        for &(r, a) in peers {
            self.peer_mut(r).addr = Some(a);
        }
    }

    /// How many connections were refused (wrong key, not a Tsunagi hello, unknown rank).
    pub fn refused_connections(&self) -> usize {
        self.refused
    }

    /// Close everything without flushing or goodbyes, as a crash would: peers report
    /// [`P2pError::PeerFailed`]. For fault-injection tests.
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

    fn enlist(&mut self, peer: Rank) {
        let p = self.peer_mut(peer);
        if !p.pending {
            p.pending = true;
            self.pending.push(peer);
        }
    }

    fn add_conn(
        &mut self,
        mut sock: TcpStream,
        remote: SocketAddr,
        phase: Phase,
        peer: Option<Rank>,
        interest: Interest,
    ) -> Result<usize, P2pError> {
        let idx = self.free.pop().unwrap_or_else(|| {
            self.conns.push(None);
            self.conns.len() - 1
        });
        if let Err(e) = self
            .registry
            .register(&mut sock, Token(idx + FIRST_CONN), interest)
        {
            self.free.push(idx);
            return Err(os_err("epoll_ctl", e));
        }
        self.conns[idx] = Some(Conn {
            sock,
            remote,
            phase,
            peer,
            dec: FrameDecoder::new(MAX_PAYLOAD),
            want_write: interest.is_writable(),
            since: Instant::now(),
        });
        Ok(idx)
    }

    fn close_conn(&mut self, idx: usize) {
        if let Some(mut c) = self.conns.get_mut(idx).and_then(Option::take) {
            let _ = self.registry.deregister(&mut c.sock);
            self.free.push(idx);
        }
    }

    fn set_write_interest(&mut self, idx: usize, want: bool) -> Result<(), P2pError> {
        let Some(c) = self.conns.get_mut(idx).and_then(Option::as_mut) else {
            return Ok(());
        };
        if c.want_write == want {
            return Ok(());
        }
        c.want_write = want;
        let interest = if want {
            Interest::READABLE | Interest::WRITABLE
        } else {
            Interest::READABLE
        };
        self.registry
            .reregister(&mut c.sock, Token(idx + FIRST_CONN), interest)
            .map_err(|e| os_err("epoll_ctl", e))
    }

    /// Mark `peer` failed, drop its queue and connection, and build the error.
    fn fail(&mut self, peer: Rank, why: String) -> P2pError {
        let p = self.peer_mut(peer);
        let conn = match p.link {
            Link::Open { conn } | Link::Connecting { conn, .. } => Some(conn),
            _ => None,
        };
        p.link = Link::Failed(why.clone());
        p.queue.clear();
        if let Some(c) = conn {
            self.close_conn(c);
        }
        P2pError::PeerFailed { peer, why }
    }

    /// Refuse connection `idx`: close it and log the first refusal of this transport.
    fn refuse(&mut self, idx: usize, why: Refusal) {
        let remote = self.conns[idx].as_ref().map(|c| c.remote);
        self.close_conn(idx);
        self.note_refusal(remote, why);
    }

    /// Count a refused connection from `remote`; log the first of this transport.
    fn note_refusal(&mut self, remote: Option<SocketAddr>, why: Refusal) {
        self.refused += 1;
        if self.refused == 1 {
            eprintln!(
                "tsunagi tcp: rank {} refused a connection from {}: {why} (further refusals are not logged)",
                self.me,
                remote.map_or("?".to_string(), |a| a.to_string())
            );
        }
    }

    /// Start (or retry) our connection to `peer`.
    fn connect(&mut self, peer: Rank) -> Result<(), P2pError> {
        let now = Instant::now();
        let p = self.peer_mut(peer);
        let Some(addr) = p.addr else {
            return Err(P2pError::Unsupported(format!(
                "tcp: no address for rank {peer}"
            )));
        };
        let (backoff, deadline) = match p.link {
            Link::Retry {
                backoff, deadline, ..
            } => (backoff, deadline),
            _ => (Duration::ZERO, now + self.cfg.connect_timeout),
        };
        let sock = Socket::new(
            Domain::for_address(addr),
            Type::STREAM.nonblocking().cloexec(),
            Some(Protocol::TCP),
        )
        .map_err(|e| os_err("socket", e))?;
        tune(SockRef::from(&sock), &self.cfg).map_err(|e| os_err("setsockopt", e))?;
        match sock.connect(&SockAddr::from(addr)) {
            Ok(()) => {}
            Err(e) if io_errno(&e) == libc::EINPROGRESS => {}
            Err(e) => return self.connect_failed(peer, io_errno(&e), backoff, deadline),
        }
        let std_stream: std::net::TcpStream = sock.into();
        let stream = TcpStream::from_std(std_stream);
        // Writable signals the end of the connect (success or failure).
        let idx = self.add_conn(
            stream,
            addr,
            Phase::Connecting,
            Some(peer),
            Interest::READABLE | Interest::WRITABLE,
        )?;
        self.peers[peer as usize].link = Link::Connecting {
            conn: idx,
            deadline,
        };
        self.enlist(peer);
        Ok(())
    }

    /// A connect to `peer` failed with `e`: retry later if the peer may just not listen yet,
    /// else fail it.
    fn connect_failed(
        &mut self,
        peer: Rank,
        e: i32,
        backoff: Duration,
        deadline: Instant,
    ) -> Result<(), P2pError> {
        let now = Instant::now();
        let addr = self.peers[peer as usize].addr;
        let retryable = matches!(
            e,
            libc::ECONNREFUSED | libc::EAGAIN | libc::EINTR | libc::ETIMEDOUT
        );
        if !retryable || now >= deadline {
            return Err(self.fail(
                peer,
                format!(
                    "cannot connect to {}: {}",
                    addr.map_or("?".into(), |a| a.to_string()),
                    errno_text(e)
                ),
            ));
        }
        let backoff = (backoff * 2).clamp(Duration::from_millis(1), Duration::from_millis(100));
        self.peers[peer as usize].link = Link::Retry {
            next: now + backoff,
            backoff,
            deadline,
        };
        self.enlist(peer);
        self.shared.retry_soon.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Our link state with `peer` as the simultaneous-connect rule sees it.
    fn link_state(&self, peer: Rank, conn_phase: impl Fn(usize) -> bool) -> LinkState {
        match self.peers.get(peer as usize).map(|p| &p.link) {
            Some(Link::Open { .. }) => LinkState::Established,
            // Only an attempt whose hello is out counts: one still in its TCP connect is
            // abandoned in favour of the incoming connection.
            Some(Link::Connecting { conn, .. }) if conn_phase(*conn) => LinkState::Connecting,
            _ => LinkState::None,
        }
    }

    /// Write as much of `peer`'s queue as the socket takes; keep write interest in sync.
    fn flush(&mut self, peer: Rank) -> Result<(), P2pError> {
        let Link::Open { conn } = self.peers[peer as usize].link else {
            return Ok(());
        };
        let Some(fd) = self.conns[conn].as_ref().map(|c| c.sock.as_raw_fd()) else {
            return Ok(());
        };
        let p = &mut self.peers[peer as usize];
        let mut failed = None;
        while !p.queue.is_empty() {
            let mut iov = [IoSlice::new(&[]); MAX_IOV];
            let n = p.queue.io_slices(&mut iov);
            let offered: usize = iov[..n].iter().map(|s| s.len()).sum();
            match sendmsg(fd, &iov[..n]) {
                Ok(0) => break,
                Ok(k) => {
                    p.queue.consume(k);
                    if k < offered {
                        break; // the socket buffer is full
                    }
                }
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        if let Some(e) = failed {
            return Err(self.fail(peer, format!("send: {}", errno_text(e))));
        }
        let want = !self.peers[peer as usize].queue.is_empty();
        self.set_write_interest(conn, want)
    }

    /// Retry due connects, time out slow ones, flush queues; forget peers with nothing
    /// pending.
    fn progress_pending(&mut self) {
        let mut i = 0;
        let mut retry_soon = false;
        let now = Instant::now();
        while i < self.pending.len() {
            let peer = self.pending[i];
            let res = match self.peers[peer as usize].link {
                Link::Retry { next, .. } if now >= next => self.connect(peer),
                Link::Connecting { deadline, .. } | Link::Waiting { deadline }
                    if now >= deadline =>
                {
                    let addr = self.peers[peer as usize].addr;
                    Err(self.fail(
                        peer,
                        format!(
                            "no connection to {} within {:?}",
                            addr.map_or("?".into(), |a| a.to_string()),
                            self.cfg.connect_timeout
                        ),
                    ))
                }
                Link::Open { .. } => self.flush(peer),
                _ => Ok(()),
            };
            if let Err(e) = res {
                self.errors.push_back(e);
            }
            let p = &mut self.peers[peer as usize];
            let keep = match p.link {
                Link::Retry { .. } => {
                    retry_soon = true;
                    true
                }
                Link::Connecting { .. } | Link::Waiting { .. } => true,
                Link::Open { .. } => !p.queue.is_empty(),
                _ => false,
            };
            if keep {
                i += 1;
            } else {
                p.pending = false;
                self.pending.swap_remove(i);
            }
        }
        self.shared.retry_soon.store(retry_soon, Ordering::Relaxed);
    }

    fn accept_all(&mut self, mut sink: Option<&mut Sink<'_>>, delivered: &mut usize) {
        loop {
            let (stream, remote) = match self.listener.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if io_errno(&e) == libc::ECONNABORTED => continue,
                // EMFILE and friends: leave it in the backlog; the level of the listener's
                // readiness is lost (edge-triggered), so come back soon.
                Err(_) => {
                    self.shared.retry_soon.store(true, Ordering::Relaxed);
                    return;
                }
            };
            if tune(SockRef::from(&stream), &self.cfg).is_err() {
                continue; // dropped: the connector sees a reset
            }
            if self.awaiting_hello().count() >= MAX_AWAITING_HELLO {
                // Full: make room by closing the one that waited longest, unless even that
                // one is younger than a round trip could explain (a burst): then the new
                // one goes. A rank's connection that loses out retries.
                match self.awaiting_hello().min() {
                    Some((since, oldest)) if since.elapsed() >= EVICT_AFTER => {
                        self.refuse(oldest, Refusal::Incomplete)
                    }
                    _ => {
                        self.note_refusal(Some(remote), Refusal::Incomplete);
                        continue;
                    }
                }
            }
            let Ok(nonce) = crate::auth::nonce() else {
                continue;
            };
            // 24 bytes into a fresh socket's empty buffer: written whole or not at all.
            match sendmsg(
                stream.as_raw_fd(),
                &[IoSlice::new(&encode_challenge(&nonce))],
            ) {
                Ok(n) if n == CHALLENGE_BYTES => {}
                _ => continue,
            }
            match self.add_conn(
                stream,
                remote,
                Phase::AwaitHello(Fixed::default(), nonce),
                None,
                Interest::READABLE,
            ) {
                // Read at once: the hello is usually there already.
                Ok(idx) => self.service(idx, sink.as_deref_mut(), delivered),
                Err(e) => self.errors.push_back(e),
            }
        }
    }

    /// (accepted at, slot) of the inbound connections still waiting for their hello.
    fn awaiting_hello(&self) -> impl Iterator<Item = (Instant, usize)> + '_ {
        self.conns.iter().enumerate().filter_map(|(i, c)| match c {
            Some(c) if matches!(c.phase, Phase::AwaitHello(..)) => Some((c.since, i)),
            _ => None,
        })
    }

    /// Close inbound connections whose hello is overdue.
    fn expire_hellos(&mut self) {
        let now = Instant::now();
        let overdue: Vec<usize> = self
            .awaiting_hello()
            .filter(|(since, _)| now - *since >= HELLO_DEADLINE)
            .map(|(_, i)| i)
            .collect();
        for idx in overdue {
            self.refuse(idx, Refusal::Incomplete);
        }
    }

    /// The outbound TCP connect of slot `idx` may have finished: send the hello.
    fn finish_connect(&mut self, idx: usize) {
        let Some(c) = self.conns[idx].as_ref() else {
            return;
        };
        let peer = c.peer.expect("outbound");
        let err = match c.sock.take_error() {
            Ok(Some(e)) | Err(e) => Some(io_errno(&e)),
            Ok(None) => None,
        };
        if err.is_none() {
            match c.sock.peer_addr() {
                Ok(_) => {}
                // Not connected yet: a spurious wake-up.
                Err(e) if e.kind() == io::ErrorKind::NotConnected => return,
                Err(e) => return self.connect_error(idx, peer, io_errno(&e)),
            }
        }
        if let Some(e) = err {
            return self.connect_error(idx, peer, e);
        }
        // Connected: the acceptor's challenge comes first.
        if let Some(c) = self.conns[idx].as_mut() {
            c.phase = Phase::AwaitChallenge(Fixed::default());
        }
        if let Err(e) = self.set_write_interest(idx, false) {
            self.errors.push_back(e);
        }
    }

    /// The acceptor's challenge on outbound slot `idx` is complete: answer with our hello.
    fn on_challenge(&mut self, idx: usize, b: [u8; CHALLENGE_BYTES]) -> bool {
        let Some(c) = self.conns[idx].as_ref() else {
            return false;
        };
        let peer = c.peer.expect("outbound");
        let nonce = match decode_challenge(&b) {
            Ok(n) => n,
            Err(r) => {
                self.close_conn(idx);
                if matches!(self.peers[peer as usize].link, Link::Connecting { conn, .. } if conn == idx)
                {
                    let e = self.fail(peer, format!("handshake refused: the peer sent {r}"));
                    self.errors.push_back(e);
                }
                return false;
            }
        };
        let hello = encode_hello(&self.cfg.key, &nonce, self.me, peer);
        // 48 bytes into a socket that has sent nothing yet: written whole or not at all.
        match sendmsg(c.sock.as_raw_fd(), &[IoSlice::new(&hello)]) {
            Ok(n) if n == hello.len() => {}
            Ok(_) => {
                self.connect_error(idx, peer, libc::EAGAIN);
                return false;
            }
            Err(e) => {
                self.connect_error(idx, peer, e);
                return false;
            }
        }
        if let Some(c) = self.conns[idx].as_mut() {
            c.phase = Phase::AwaitVerdict(Fixed::default());
        }
        true
    }

    fn connect_error(&mut self, idx: usize, peer: Rank, e: i32) {
        self.close_conn(idx);
        let (backoff, deadline) = match self.peers[peer as usize].link {
            Link::Connecting { conn, deadline } if conn == idx => (Duration::ZERO, deadline),
            _ => return, // an attempt we had abandoned
        };
        if let Err(e) = self.connect_failed(peer, e, backoff, deadline) {
            self.errors.push_back(e);
        }
    }

    /// The peer's hello on inbound slot `idx` is complete: decide and answer.
    fn on_hello(&mut self, idx: usize, hello: [u8; HELLO_BYTES], nonce: Nonce) -> bool {
        let h = match check_hello(&hello, &self.cfg.key, &nonce, self.me) {
            Ok(h) => h,
            Err(r) => {
                self.refuse(idx, r);
                return false;
            }
        };
        let from = h.from;
        if from == self.me
            || self
                .peers
                .get(from as usize)
                .is_none_or(|p| p.addr.is_none())
        {
            self.refuse(idx, Refusal::UnknownPeer(from));
            return false;
        }
        if matches!(
            self.peers[from as usize].link,
            Link::Failed(_) | Link::Closed
        ) {
            // A peer we already gave up on (or that said goodbye) gets no new link.
            self.close_conn(idx);
            return false;
        }
        let conns = &self.conns;
        let state = self.link_state(from, |c| {
            matches!(
                conns.get(c).and_then(Option::as_ref).map(|c| &c.phase),
                Some(Phase::AwaitVerdict(_))
            )
        });
        let verdict = handshake::resolve(self.me, from, state);
        let fd = self.conns[idx].as_ref().expect("live").sock.as_raw_fd();
        match sendmsg(fd, &[IoSlice::new(&encode_verdict(verdict))]) {
            Ok(n) if n == VERDICT_BYTES => {}
            _ => {
                self.close_conn(idx);
                return false;
            }
        }
        if verdict == Verdict::Reject {
            self.close_conn(idx);
            return false;
        }
        // Accepted: this connection is the link; abandon our own attempt if any.
        if let Link::Connecting { conn, .. } = self.peers[from as usize].link {
            self.close_conn(conn);
        }
        self.peers[from as usize].link = Link::Open { conn: idx };
        let c = self.conns[idx].as_mut().expect("live");
        c.phase = Phase::Open;
        c.peer = Some(from);
        if !self.peers[from as usize].queue.is_empty() {
            self.enlist(from);
        }
        true
    }

    /// Our hello on outbound slot `idx` got its verdict.
    fn on_verdict(&mut self, idx: usize, v: [u8; VERDICT_BYTES]) -> bool {
        let peer = self.conns[idx]
            .as_ref()
            .and_then(|c| c.peer)
            .expect("outbound");
        let ours =
            matches!(self.peers[peer as usize].link, Link::Connecting { conn, .. } if conn == idx);
        if !ours {
            self.close_conn(idx);
            return false;
        }
        match decode_verdict(&v) {
            Some(Verdict::Accept) => {
                self.peers[peer as usize].link = Link::Open { conn: idx };
                self.conns[idx].as_mut().expect("live").phase = Phase::Open;
                self.enlist(peer);
                true
            }
            Some(Verdict::Reject) => {
                // The peer's own connection wins; it will arrive (module docs of
                // `handshake`). Our queue waits for it.
                self.close_conn(idx);
                let deadline = Instant::now() + self.cfg.connect_timeout;
                self.peers[peer as usize].link = Link::Waiting { deadline };
                self.enlist(peer);
                false
            }
            None => {
                let e = self.fail(peer, "the peer answered with a bad verdict".into());
                self.errors.push_back(e);
                false
            }
        }
    }

    /// Read what slot `idx` has (up to the budget): handshake bytes or frames. `sink` is
    /// `None` while lingering in drop: frames are then discarded.
    fn service(&mut self, idx: usize, mut sink: Option<&mut Sink<'_>>, delivered: &mut usize) {
        let mut budget = READ_BUDGET;
        loop {
            let Some(c) = self.conns.get_mut(idx).and_then(Option::as_mut) else {
                return;
            };
            let fd = c.sock.as_raw_fd();
            match &mut c.phase {
                Phase::Connecting => return, // readiness for finish_connect
                Phase::AwaitChallenge(f) => match recv(fd, f.want()) {
                    Ok(None) => return,
                    Ok(Some(0)) | Err(_) => {
                        // Closed before its challenge (an acceptor flooded with half-open
                        // connections closes the oldest): try again, as for a refused connect.
                        let peer = c.peer.expect("outbound");
                        return self.connect_error(idx, peer, libc::ECONNREFUSED);
                    }
                    Ok(Some(n)) => {
                        if let Some(b) = f.commit(n) {
                            let b = *b;
                            if !self.on_challenge(idx, b) {
                                return;
                            }
                        }
                    }
                },
                Phase::AwaitHello(f, nonce) => match recv(fd, f.want()) {
                    Ok(None) => return,
                    Ok(Some(0)) | Err(_) => {
                        if f.is_empty() {
                            // Closed before sending anything: typically a rank's attempt
                            // abandoned in a simultaneous connect. Nothing to refuse.
                            return self.close_conn(idx);
                        }
                        return self.refuse(idx, Refusal::Incomplete);
                    }
                    Ok(Some(n)) => {
                        if let Some(h) = f.commit(n) {
                            let (h, nonce) = (*h, *nonce);
                            if !self.on_hello(idx, h, nonce) {
                                return;
                            }
                        }
                    }
                },
                Phase::AwaitVerdict(f) => match recv(fd, f.want()) {
                    Ok(None) => return,
                    Ok(Some(0)) | Err(_) => {
                        // Closed before its verdict: the acceptor had too many connections
                        // waiting, or went away. Retry until the connect deadline, as for a
                        // refused connect.
                        let peer = c.peer.expect("outbound");
                        return self.connect_error(idx, peer, libc::ECONNREFUSED);
                    }
                    Ok(Some(n)) => {
                        if let Some(v) = f.commit(n) {
                            let v = *v;
                            if !self.on_verdict(idx, v) {
                                return;
                            }
                        }
                    }
                },
                Phase::Open => {
                    if budget == 0 {
                        if !self.hot.contains(&idx) {
                            self.hot.push(idx);
                        }
                        return;
                    }
                    let peer = c.peer.expect("open links know their peer");
                    let buf = c.dec.read_buf();
                    let room = buf.len();
                    let n = match recv(fd, buf) {
                        Ok(None) => return,
                        Ok(Some(0)) => {
                            return self.link_ended(
                                idx,
                                peer,
                                "connection closed without goodbye (process died?)".into(),
                            );
                        }
                        Err(e) => {
                            return self.link_ended(
                                idx,
                                peer,
                                format!("receive: {}", errno_text(e)),
                            );
                        }
                        Ok(Some(n)) => n,
                    };
                    c.dec.commit(n);
                    budget = budget.saturating_sub(n);
                    let mut goodbye = false;
                    let mut broken = None;
                    loop {
                        match c.dec.next_frame() {
                            Ok(None) => break,
                            Ok(Some(Frame::Goodbye)) => {
                                goodbye = true;
                                break;
                            }
                            Ok(Some(Frame::Message(h, payload))) => {
                                if let Some(s) = sink.as_deref_mut() {
                                    s(peer, &h, payload);
                                    *delivered += 1;
                                }
                            }
                            Err(e) => {
                                broken = Some(e.to_string());
                                break;
                            }
                        }
                    }
                    if let Some(why) = broken {
                        let e = self.fail(peer, format!("protocol error: {why}"));
                        self.errors.push_back(e);
                        return;
                    }
                    if goodbye {
                        return self.said_goodbye(idx, peer, sink.is_some());
                    }
                    if n < room {
                        // A short read took all the socket had: the next read would
                        // only say EAGAIN (a system call per message, ~0.5 µs on
                        // loopback). Readiness is edge-triggered (mio), so bytes that
                        // arrive after this read raise a new event (epoll(7)).
                        return;
                    }
                }
            }
        }
    }

    /// The open link `idx` to `peer` ended without a goodbye.
    fn link_ended(&mut self, idx: usize, peer: Rank, why: String) {
        let said = self.conns[idx]
            .as_ref()
            .is_some_and(|c| c.dec.said_goodbye());
        if said || self.aborted {
            self.close_conn(idx);
            return;
        }
        let e = self.fail(peer, why);
        self.errors.push_back(e);
    }

    /// `peer` closes its transport on purpose: it will neither send nor read again.
    fn said_goodbye(&mut self, idx: usize, peer: Rank, report: bool) {
        self.close_conn(idx);
        let p = &mut self.peers[peer as usize];
        let lost = p.queue.len();
        p.queue.clear();
        p.link = Link::Closed;
        if lost > 0 && report {
            self.errors.push_back(P2pError::PeerFailed {
                peer,
                why: format!("it closed with {lost} bytes still queued for it"),
            });
        }
    }

    /// One round: collect readiness, accept, read, deliver, write.
    fn round(&mut self, mut sink: Option<&mut Sink<'_>>) -> usize {
        let mut delivered = 0;
        let mut ready: Vec<(usize, bool, bool)> = Vec::new();
        {
            let mut poll = self.shared.poll.lock().unwrap_or_else(|p| p.into_inner());
            // EINTR reads as "nothing ready": the caller polls again.
            let _ = poll.poll(&mut self.events, Some(Duration::ZERO));
            for ev in self.events.iter() {
                ready.push((
                    ev.token().0,
                    ev.is_readable() || ev.is_read_closed() || ev.is_error(),
                    ev.is_writable() || ev.is_error(),
                ));
            }
        }
        for (token, readable, writable) in ready {
            match Token(token) {
                TOKEN_WAKER => {}
                TOKEN_LISTENER => self.accept_all(sink.as_deref_mut(), &mut delivered),
                _ => {
                    let idx = token - FIRST_CONN;
                    let Some(c) = self.conns.get(idx).and_then(Option::as_ref) else {
                        continue;
                    };
                    if matches!(c.phase, Phase::Connecting) {
                        if readable || writable {
                            self.finish_connect(idx);
                        }
                        // The challenge may have come with the same event (an edge that
                        // will not come again): read it now.
                        if readable {
                            self.service(idx, sink.as_deref_mut(), &mut delivered);
                        }
                        continue;
                    }
                    if writable {
                        if let (Phase::Open, Some(peer)) = (&c.phase, c.peer) {
                            if let Err(e) = self.flush(peer) {
                                self.errors.push_back(e);
                            }
                        }
                    }
                    if readable {
                        self.service(idx, sink.as_deref_mut(), &mut delivered);
                    }
                }
            }
        }
        // Connections whose budget ran out last time.
        for idx in std::mem::take(&mut self.hot) {
            self.service(idx, sink.as_deref_mut(), &mut delivered);
        }
        self.progress_pending();
        self.expire_hellos();
        self.shared.busy.store(
            !self.hot.is_empty() || !self.errors.is_empty(),
            Ordering::Release,
        );
        delivered
    }

    /// Graceful close: flush for up to [`LINGER`], then goodbye on every open link.
    fn linger(&mut self) {
        let deadline = Instant::now() + LINGER;
        loop {
            let waiting = self.peers.iter().any(|p| {
                !p.queue.is_empty()
                    && matches!(
                        p.link,
                        Link::Open { .. }
                            | Link::Connecting { .. }
                            | Link::Retry { .. }
                            | Link::Waiting { .. }
                    )
            });
            if !waiting || Instant::now() >= deadline {
                break;
            }
            // Incoming bytes are read and dropped so that a peer lingering at the same time
            // can drain its queue too.
            self.round(None);
            self.shared.sleep(0, Duration::from_millis(10));
        }
        for p in &self.peers {
            if let (Link::Open { conn }, true) = (&p.link, p.queue.is_empty()) {
                if let Some(c) = self.conns[*conn].as_ref() {
                    let _ = sendmsg(c.sock.as_raw_fd(), &[IoSlice::new(&GOODBYE.to_le_bytes())]);
                }
            }
        }
    }
}

impl Drop for TcpTransport {
    fn drop(&mut self) {
        if !self.aborted {
            self.linger();
        }
        for idx in 0..self.conns.len() {
            self.close_conn(idx);
        }
        let _ = self.registry.deregister(&mut self.listener);
        // A sleeper must not wait for descriptors that are gone.
        self.shared.notify();
    }
}

impl Transport for TcpTransport {
    fn name(&self) -> &'static str {
        "tcp"
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
                "tcp: payload of {} bytes exceeds max_payload {MAX_PAYLOAD}",
                payload.len()
            )));
        }
        let me = self.me;
        let p = self.peer_mut(peer);
        if p.addr.is_none() || peer == me {
            return Err(P2pError::Unsupported(format!(
                "tcp transport of rank {me} does not reach rank {peer}"
            )));
        }
        match &p.link {
            Link::Failed(why) => {
                return Err(P2pError::PeerFailed {
                    peer,
                    why: why.clone(),
                })
            }
            Link::Closed => {
                return Err(P2pError::PeerFailed {
                    peer,
                    why: "it closed its TCP transport".into(),
                })
            }
            Link::Idle => self.connect(peer)?,
            _ => {}
        }
        let p = &self.peers[peer as usize];
        if let (Link::Open { conn }, false) = (&p.link, p.queue.is_empty()) {
            let _ = conn;
            self.flush(peer)?;
        }
        let p = &mut self.peers[peer as usize];
        let open = match p.link {
            Link::Open { conn } => self.conns[conn]
                .as_ref()
                .map(|c| (conn, c.sock.as_raw_fd())),
            _ => None,
        };
        match open {
            Some((conn, fd)) if p.queue.is_empty() => {
                // Fast path: header and payload straight from the caller into the socket
                // with one writev-style sendmsg.
                let head = encode_frame_head(hdr, payload.len());
                let total = head.len() + payload.len();
                let k = match sendmsg(fd, &[IoSlice::new(&head), IoSlice::new(payload)]) {
                    Ok(k) => k,
                    Err(e) => return Err(self.fail(peer, format!("send: {}", errno_text(e)))),
                };
                if k == total {
                    return Ok(true);
                }
                // Partial write: the rest goes first once the socket has room.
                let (h, pl) = if k < head.len() {
                    (&head[k..], payload)
                } else {
                    (&head[..0], &payload[k - head.len()..])
                };
                p.queue.push_parts(&[h, pl]);
                self.enlist(peer);
                self.set_write_interest(conn, true)?;
                Ok(true)
            }
            _ => {
                // A large payload behind bytes still queued would be copied into the queue.
                // Refusing it (back-pressure) makes the caller retry once the queue drained,
                // and the retry writes it straight from the caller's buffer: one copy less
                // per byte on a saturated link.
                if p.queue.len() >= QUEUE_BOUND || (open.is_some() && payload.len() >= NO_COPY_MIN)
                {
                    return Ok(false);
                }
                p.queue.push_frame(hdr, payload);
                self.enlist(peer);
                if let Some((conn, _)) = open {
                    self.set_write_interest(conn, true)?;
                }
                Ok(true)
            }
        }
    }

    fn poll(&mut self, sink: &mut Sink<'_>) -> Result<usize, P2pError> {
        let delivered = self.round(Some(sink));
        if let Some(e) = self.errors.pop_front() {
            self.shared.busy.store(
                !self.errors.is_empty() || !self.hot.is_empty(),
                Ordering::Release,
            );
            return Err(e);
        }
        Ok(delivered)
    }

    fn event_source(&self) -> Arc<dyn EventSource> {
        self.shared.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::JobKey;

    fn cfg() -> TcpConfig {
        let mut c = TcpConfig::new(JobKey::derive("unit"));
        c.interface = Some("127.0.0.1".into());
        c
    }

    #[test]
    fn card_and_port_range() {
        let t = TcpTransport::bind(0, &cfg()).unwrap();
        let card = t.card();
        assert!(card.starts_with("tcp:127.0.0.1:"), "{card}");
        assert_eq!(crate::parse_card(&card).unwrap(), t.local_addr());
        // A range: the second transport takes the next free port.
        let mut c = cfg();
        let base = 20000 + (std::process::id() % 20000) as u16;
        c.ports = Some((base, base + 20));
        let a = TcpTransport::bind(0, &c).unwrap();
        let b = TcpTransport::bind(1, &c).unwrap();
        assert!((base..=base + 20).contains(&a.local_addr().port()));
        assert!((base..=base + 20).contains(&b.local_addr().port()));
        assert_ne!(a.local_addr().port(), b.local_addr().port());
        let p = a.local_addr().port();
        c.ports = Some((p, p));
        assert!(TcpTransport::bind(2, &c).is_err());
    }
}
