//! The thin driver: a [`PmEndpoint`] over non-blocking UDP sockets (one, or one per LID
//! with `TSUNAGI_PM_LIDS`, see [`crate::lids`]), as a [`tsunagi_p2p::Transport`].
//!
//! A message of the request layer is one PM message whose body is the 32-byte
//! [`Header`] followed by the payload. `try_send` gets a send buffer (no room: `Ok(false)`,
//! the ring is full or the link's queue is long), copies, sends and flushes what the
//! endpoint wants to transmit; `poll` reads every datagram waiting (up to a budget), feeds
//! the endpoint, hands out every complete message, releases it and flushes again (ACKs,
//! retransmissions, PULL replies). Timers are the endpoint's: the transport reports
//! [`Transport::next_deadline`] and both progress engines bound their sleeps by it.
//!
//! The event source is the sockets themselves (readable while datagrams wait) and an eventfd
//! for `notify`; `busy` makes a sleeper return at once while messages are complete but
//! were not handed out yet.
//!
//! **Large messages by RDMA read into the user's buffer.** The transport offers single-copy
//! rendezvous ([`Transport::single_copy`]): the sender's [`Transport::expose`] registers
//! the send buffer in place and grants the receiver the right to PULL it, and announces
//! the region's key (as `key << 40 | offset`); the receiver's [`Transport::read_remote`]
//! registers the receive buffer and PULLs into it in work-request-sized pieces, up to
//! [`PULLS_IN_FLIGHT`] and [`PULL_BYTES_IN_FLIGHT`] at once, over the reliable link (so loss, reordering and
//! duplication are the link's business), then INVALIDATEs the sender's region. The read
//! blocks, driving the whole endpoint meanwhile: PULLs of ours that peers serve, PULLs of
//! theirs that we serve, and messages that arrive (set aside, handed out by the next
//! `poll`, so that a full ring or receive pool cannot hold a PULL reply back).
//! `TSUNAGI_PM_RDMA=0` turns it off (the request layer then streams large messages
//! through the rings).
//!
//! Fault injection for tests ([`Faults`], from `TSUNAGI_PM_DROP`, `TSUNAGI_PM_DUP`,
//! `TSUNAGI_PM_REORDER`): fractions of outgoing datagrams dropped, sent twice, or held back
//! behind the next one.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};
use tsunagi_p2p::{EventSource, Header, P2pError, Rank, Sink, Transport, TransportCaps};

use crate::checkpoint::{CheckpointConfig, Coordinator, PATIENCE, SAVED, STABLE};
use crate::lids::{LidConfig, LidWiring};
use crate::lossy::Rng;
use crate::pm::{PmConfig, PmContext, PmEndpoint, PmError, ReceiveMode};
use crate::wire;
use crate::Card;

mod moving;

/// Datagrams read per poll at most, so that a flood cannot starve the caller.
const READ_BUDGET: usize = 512;
/// Messages handed out per poll at most.
const DELIVER_BUDGET: usize = 256;
/// How long a dropped transport keeps the network going for its unacknowledged data.
pub const LINGER: Duration = Duration::from_secs(5);
/// Socket buffer sizes asked for (the kernel may give less).
const SOCKET_BUFFER: usize = 8 << 20;
/// Linux's UDP socket options (`<linux/udp.h>`; not in the libc crate for glibc):
/// segmentation offload of a send (the segment size, a u16, in a cmsg) and receive
/// coalescing of segments into one read.
const UDP_SEGMENT: libc::c_int = 103;
const UDP_GRO: libc::c_int = 104;
/// Segments one send with UDP_SEGMENT carries at most (the kernel's UDP_MAX_SEGMENTS of
/// older kernels), and bytes at most (one IP packet's length field).
const GSO_MAX_SEGMENTS: usize = 64;
const GSO_MAX_BYTES: usize = 65_000;
/// The read buffer: one datagram, or a train that GRO coalesced (at most 64 KiB).
const READ_BUFFER: usize = 128 << 10;
/// PULL work requests one RDMA read keeps outstanding at most (the link's window paces
/// them on the wire; more keep its backlog from running dry between acknowledgements)...
pub const PULLS_IN_FLIGHT: usize = 64;
/// ... and bytes asked for and not yet in, at most (what the socket buffers must hold).
pub const PULL_BYTES_IN_FLIGHT: usize = 2 << 20;
/// An announced RDMA address is `key << RDMA_KEY_SHIFT | offset`.
const RDMA_KEY_SHIFT: u32 = 40;
/// Bytes of data per PUSH work request (one packet) into the rings, by default.
pub const RING_PACKET: usize = 60_000;

/// Fault injection on outgoing datagrams (tests only).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Faults {
    pub drop: f64,
    pub duplicate: f64,
    pub reorder: f64,
}

/// Everything the transport reads from the environment.
#[derive(Clone, Debug, PartialEq)]
pub struct PmTransportConfig {
    pub pm: PmConfig,
    /// `TSUNAGI_PM_IF` (else `TSUNAGI_TCP_IF`): interface name or address.
    pub interface: Option<String>,
    pub faults: Faults,
    /// Payload bytes up to which messages go eagerly.
    pub eager_limit: usize,
    /// Ports per endpoint and the fat-tree planner's input (`TSUNAGI_PM_LIDS`,
    /// `TSUNAGI_FATTREE`, `TSUNAGI_FATTREE_NODES`).
    pub lids: LidConfig,
    /// Rendezvous by RDMA read into the user's buffer (`TSUNAGI_PM_RDMA`, default 1).
    pub rdma: bool,
    /// Checkpoints of the running job ([`crate::checkpoint`]).
    pub checkpoint: CheckpointConfig,
    /// The path MTU (`TSUNAGI_PM_MTU`); `None`: the MTU of the interface the endpoint
    /// binds (1500 when it cannot be read). Packets larger than one datagram of it go as
    /// trains of fragments ([`crate::wire`]).
    pub mtu: Option<usize>,
    /// Print the endpoint's and links' counters and the driver's time split to stderr
    /// when the transport is dropped (`TSUNAGI_PM_STATS=1`).
    pub stats: bool,
    /// The job's secret (`TSUNAGI_JOB_KEY_FD`, `TSUNAGI_JOB_KEY`, else the factory derives
    /// it from the job id as the TCP transport does): a restarted rank's MOVE is accepted
    /// only under it ([`crate::restart`]). `None`: moves are neither sent nor accepted.
    pub job_key: Option<tsunagi_tcp::JobKey>,
}

impl PmTransportConfig {
    /// From the environment (`getenv`): `TSUNAGI_PM_RECEIVE` (`rings`, the default, or
    /// `srq`), `TSUNAGI_PM_RING` (ring bytes per sender), `TSUNAGI_PM_SRQ_BUFFERS`,
    /// `TSUNAGI_PM_RDMA_PIECE` (bytes per PULL of a rendezvous read, 1024–61440),
    /// `TSUNAGI_PM_WINDOW` (1–32), `TSUNAGI_PM_PACKET` (data bytes per work request
    /// packet, 1024–60000, default [`RING_PACKET`] with rings and 8192 with the shared
    /// queue; larger than one datagram of the path means a train of fragments), `TSUNAGI_PM_CHECKSUM` (0 or 1), `TSUNAGI_PM_GIVE_UP` (seconds of
    /// silence before a peer is declared failed, see [`crate::reliable::LinkConfig`]),
    /// `TSUNAGI_PM_STATS` (0 or 1), `TSUNAGI_PM_MTU` (576–65536), `TSUNAGI_PM_EAGER` (payload bytes sent
    /// eagerly, default 64 KiB), `TSUNAGI_PM_IF`, and the
    /// fault knobs `TSUNAGI_PM_DROP`, `TSUNAGI_PM_DUP`, `TSUNAGI_PM_REORDER` (0–1); the LID
    /// knobs of [`LidConfig::from_env`].
    pub fn from_env(getenv: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let lids = LidConfig::from_env(&getenv)?;
        let get = |k: &str| getenv(k).filter(|v| !v.trim().is_empty());
        let num = |k: &str, lo: usize, hi: usize| -> Result<Option<usize>, String> {
            match get(k) {
                None => Ok(None),
                Some(v) => match v.trim().parse::<usize>() {
                    Ok(n) if (lo..=hi).contains(&n) => Ok(Some(n)),
                    _ => Err(format!("{k}={v}: expected a whole number in {lo}..={hi}")),
                },
            }
        };
        let frac = |k: &str| -> Result<f64, String> {
            match get(k) {
                None => Ok(0.0),
                Some(v) => match v.trim().parse::<f64>() {
                    Ok(f) if (0.0..=1.0).contains(&f) => Ok(f),
                    _ => Err(format!("{k}={v}: expected a fraction between 0 and 1")),
                },
            }
        };
        let mut pm = PmConfig::default();
        let packet = num("TSUNAGI_PM_PACKET", 1024, 60_000)?;
        if let Some(b) = packet {
            pm.wr_data = b;
        }
        if let Some(b) = num("TSUNAGI_PM_RDMA_PIECE", 1024, crate::pm::MAX_PULL_PIECE)? {
            pm.rdma_piece = b;
        }
        if let Some(w) = num("TSUNAGI_PM_WINDOW", 1, 32)? {
            pm.link.window = w as u32;
            pm.link.ack_every = (w as u32 / 4).max(1);
        }
        if let Some(c) = num("TSUNAGI_PM_CHECKSUM", 0, 1)? {
            pm.link.checksum = c == 1;
        }
        if let Some(t) = num("TSUNAGI_PM_GIVE_UP", 1, 86_400)? {
            pm.link.give_up_after = Duration::from_secs(t as u64);
        }
        let ring = num("TSUNAGI_PM_RING", 64 << 10, 1 << 30)?.unwrap_or(1 << 20);
        if ring % crate::pm::ALIGN != 0 {
            return Err(format!(
                "TSUNAGI_PM_RING={ring}: expected a multiple of {}",
                crate::pm::ALIGN
            ));
        }
        pm.receive = match get("TSUNAGI_PM_RECEIVE").as_deref().map(str::trim) {
            None | Some("rings") => {
                // A ring message goes as PUSHes of at most this many bytes, one packet
                // (one train) each: 60 KB cuts a 64 KiB eager message into 2 packets
                // instead of 8 (2.0-2.7x less CPU per MiB, see docs/pm.md). The shared
                // queue keeps 8 KiB: its buffers are that size.
                pm.wr_data = packet.unwrap_or(RING_PACKET);
                ReceiveMode::Rings { ring_bytes: ring }
            }
            Some("srq") | Some("shared") => ReceiveMode::Shared {
                buffers: num("TSUNAGI_PM_SRQ_BUFFERS", 4, 1 << 20)?.unwrap_or(256),
                buffer_bytes: pm.wr_data,
            },
            Some(other) => {
                return Err(format!(
                    "TSUNAGI_PM_RECEIVE={other}: expected 'rings' or 'srq'"
                ))
            }
        };
        let max_payload = pm.max_message() - tsunagi_p2p::HEADER_BYTES;
        Ok(PmTransportConfig {
            pm,
            interface: get("TSUNAGI_PM_IF").or_else(|| get("TSUNAGI_TCP_IF")),
            faults: Faults {
                drop: frac("TSUNAGI_PM_DROP")?,
                duplicate: frac("TSUNAGI_PM_DUP")?,
                reorder: frac("TSUNAGI_PM_REORDER")?,
            },
            // The TCP transport's 64 KiB: messages up to it go in one hop through the
            // rings instead of a rendezvous's three (RTS, PULL, reply; then INVALIDATE and
            // FIN), which under load cost a scheduling delay each (NPB CG's 56 KB
            // exchanges).
            eager_limit: num("TSUNAGI_PM_EAGER", 0, max_payload)?
                .unwrap_or(max_payload.min(64 << 10)),
            lids,
            rdma: num("TSUNAGI_PM_RDMA", 0, 1)?.unwrap_or(1) == 1,
            stats: num("TSUNAGI_PM_STATS", 0, 1)?.unwrap_or(0) == 1,
            job_key: match (get("TSUNAGI_JOB_KEY_FD"), get("TSUNAGI_JOB_KEY")) {
                (Some(fd), _) => Some(tsunagi_tcp::config::read_key_fd(&fd)?),
                (None, Some(k)) => Some(tsunagi_tcp::JobKey::from_hex(&k)?),
                (None, None) => None,
            },
            mtu: num("TSUNAGI_PM_MTU", 576, 65_536)?,
            checkpoint: {
                let c = CheckpointConfig::from_env(&getenv)?;
                if c.enabled() && matches!(pm.receive, ReceiveMode::Shared { .. }) {
                    return Err("TSUNAGI_PM_CHECKPOINT needs TSUNAGI_PM_RECEIVE=rings: the \
                                shared receive queue is not checkpointed"
                        .into());
                }
                c
            },
        })
    }
}

/// What a progress engine sleeps on.
struct Shared {
    /// One socket per LID; the first is also the one sent from.
    socks: Vec<UdpSocket>,
    /// The acknowledgement socket: ACKs and NACKs go from it to the peers' and come in
    /// on it, a path of their own beside the data (seed 001's lesson).
    ack: UdpSocket,
    wake: OwnedFd,
    /// Complete messages wait to be handed out: a sleeper must not block.
    busy: AtomicBool,
    /// `TSUNAGI_PM_STATS`: count the progress engine's sleeps here.
    count_sleeps: bool,
    sleeps: AtomicU64,
    sleep_ns: AtomicU64,
}

impl EventSource for Shared {
    fn prepare(&self) -> u64 {
        0
    }

    fn sleep(&self, _token: u64, timeout: Duration) {
        if self.busy.load(Ordering::Acquire) {
            return;
        }
        if self.count_sleeps {
            let t = Instant::now();
            self.wait(timeout);
            self.sleep_ns
                .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
            self.sleeps.fetch_add(1, Ordering::Relaxed);
        } else {
            self.wait(timeout);
        }
    }

    fn cancel(&self) {}

    fn notify(&self) {
        let v = 1u64;
        // SAFETY: writes 8 bytes from `v` to our own eventfd; failure (counter full) means
        // a wake-up is pending anyway.
        unsafe { libc::write(self.wake.as_raw_fd(), (&v as *const u64).cast(), 8) };
    }
}

impl Shared {
    /// Block until a socket is readable, a notification comes, or `timeout` passes.
    fn wait(&self, timeout: Duration) {
        let ms = timeout.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32;
        let pollfd = |fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let mut fds: Vec<libc::pollfd> = std::iter::once(pollfd(self.wake.as_raw_fd()))
            .chain(std::iter::once(pollfd(self.ack.as_raw_fd())))
            .chain(self.socks.iter().map(|s| pollfd(s.as_raw_fd())))
            .collect();
        // SAFETY: `fds.len()` valid pollfds; all descriptors live as long as `self`. A
        // failure (EINTR) reads as a wake-up: callers poll again anyway.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if fds[0].revents != 0 {
            let mut v = 0u64;
            // SAFETY: reads 8 bytes into `v` from our own non-blocking eventfd.
            unsafe { libc::read(self.wake.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
        }
    }
}

/// PM over UDP as a Tsunagi transport.
pub struct PmTransport {
    ep: PmEndpoint,
    shared: Arc<Shared>,
    /// Where each peer is sent to: its port at the planner's LID index.
    addrs: Vec<Option<SocketAddr>>,
    /// Where each peer sends from (its first port): datagrams from elsewhere are dropped.
    sources: Vec<Option<SocketAddr>>,
    /// The bound addresses, one per LID.
    local: Vec<SocketAddr>,
    /// Where each peer's ACKs go to and come from (its acknowledgement socket); `None`
    /// for a peer whose card has none (its ACKs then travel on the data path).
    ack_addrs: Vec<Option<SocketAddr>>,
    /// The bound address of our acknowledgement socket.
    ack_local: SocketAddr,
    /// Datagrams accepted per LID (statistics, and the tests' proof of the wiring).
    received_per_lid: Vec<u64>,
    publish: IpAddr,
    eager_limit: usize,
    max_payload: usize,
    faults: Faults,
    rng: Rng,
    held_back: Option<(SocketAddr, Vec<u8>, usize)>,
    /// The kernel takes trains with UDP_SEGMENT (cleared at its first refusal).
    gso: bool,
    out: Vec<u8>,
    inbuf: Vec<u8>,
    failed: Vec<bool>,
    rdma: bool,
    size: usize,
    ckpt: Coordinator,
    /// Messages that arrived during an RDMA read, each the 32-byte header and payload, in
    /// arrival order: handed out by the next `poll` before anything else.
    stash: VecDeque<(Rank, Vec<u8>)>,
    /// `TSUNAGI_PM_STATS`: keep [`DriverStats`] and print them with the counters at drop.
    stats_on: bool,
    drv: DriverStats,
    /// Each peer's LID index the fat-tree plan addresses (for a move of that peer).
    lid_index: Vec<u32>,
    /// Restart state ([`crate::restart`]).
    moves: moving::Moves,
}

/// Where the driver's time goes (`TSUNAGI_PM_STATS=1`; nanoseconds, summed).
#[derive(Clone, Copy, Debug, Default)]
pub struct DriverStats {
    /// Datagrams and bytes handed to the kernel, and the time in those calls.
    pub sent: u64,
    pub sent_bytes: u64,
    pub send_ns: u64,
    /// Datagrams taken from the kernel, the time in those calls (empty reads included),
    /// and the time the endpoint took to handle them (decode, checksum, reorder, execute).
    pub received: u64,
    pub recv_ns: u64,
    pub handle_ns: u64,
    /// Time in `poll_transmit` (encode, checksum) and sleeping for datagrams.
    pub encode_ns: u64,
    /// Datagrams taken from the acknowledgement socket.
    pub acks_received: u64,
    pub sleeps: u64,
    pub sleep_ns: u64,
    /// Datagrams the fault knob (`TSUNAGI_PM_DROP`) dropped (always counted).
    pub fault_drops: u64,
}

/// Why a segmented send failed.
enum SendError {
    /// Like any datagram the kernel does not take (no buffer space): the link resends.
    Lost,
    /// The kernel or the route does not segment.
    Unsupported,
}

/// One `sendmsg` of `d` to `to` with UDP_SEGMENT = `segment`: the kernel (or the NIC) cuts
/// it into datagrams of `segment` bytes, the last possibly shorter.
fn send_segmented(
    sock: &UdpSocket,
    to: SocketAddr,
    d: &[u8],
    segment: usize,
) -> Result<(), SendError> {
    let to: socket2::SockAddr = to.into();
    let mut iov = libc::iovec {
        iov_base: d.as_ptr() as *mut libc::c_void,
        iov_len: d.len(),
    };
    // Room for one cmsg with a u16, aligned as cmsghdr wants.
    let mut control = [0u64; 4];
    // SAFETY: CMSG_SPACE is a pure size computation.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<u16>() as u32) } as usize;
    assert!(space <= std::mem::size_of_val(&control));
    // SAFETY: an all-zero msghdr is a valid empty one; the fields set below point at
    // `to`, `iov` and `control`, which live across the sendmsg call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = to.as_ptr() as *mut libc::c_void;
    msg.msg_namelen = to.len();
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: `msg` has a control buffer of `space` bytes, enough for the one cmsg
    // CMSG_FIRSTHDR returns; CMSG_DATA points inside it, with room for a u16.
    let rc = unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_UDP;
        (*c).cmsg_type = UDP_SEGMENT;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<u16>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), segment as u16);
        libc::sendmsg(sock.as_raw_fd(), &msg, 0)
    };
    if rc >= 0 {
        return Ok(());
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::ENOBUFS) | Some(libc::EINTR) | Some(libc::ECONNREFUSED) => {
            Err(SendError::Lost)
        }
        _ => Err(SendError::Unsupported),
    }
}

/// The MTU of the interface that has address `addr` (SIOCGIFMTU through `sock`, so it is
/// the interface of the socket's network namespace).
fn interface_mtu(sock: &UdpSocket, addr: IpAddr) -> Option<usize> {
    let ifs = tsunagi_tcp::config::interfaces();
    let name = &ifs.iter().find(|i| i.addr == addr)?.name;
    // SAFETY: an all-zero ifreq is valid; the name is copied in with its NUL kept.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    if name.len() >= req.ifr_name.len() {
        return None;
    }
    for (d, s) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    // SAFETY: SIOCGIFMTU reads the name and writes the MTU into `req`, which lives across
    // the call.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFMTU, &mut req) };
    // SAFETY: after a successful SIOCGIFMTU the union holds the MTU.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu };
    (rc == 0 && mtu > 0).then_some(mtu as usize)
}

fn os_err(call: &'static str, e: std::io::Error) -> P2pError {
    P2pError::Os {
        call,
        errno: e.raw_os_error().unwrap_or(0),
    }
}

/// One line to stderr in one write, so that ranks sharing the job's stderr do not
/// interleave their lines.
fn say(line: &str) {
    use std::io::Write;
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

fn random_u32() -> u32 {
    let k = tsunagi_tcp::JobKey::random().0;
    u32::from_le_bytes([k[0], k[1], k[2], k[3]])
}

impl PmTransport {
    /// Bind `cfg.lids.lids` UDP sockets for rank `me` of a job of `size` ranks.
    pub fn bind(me: Rank, size: usize, cfg: &PmTransportConfig) -> Result<PmTransport, P2pError> {
        if cfg.checkpoint.signal {
            crate::checkpoint::install_signal_handler().map_err(P2pError::Other)?;
        }
        let (bind_ip, publish) = tsunagi_tcp::config::choose_address(
            cfg.interface.as_deref(),
            &tsunagi_tcp::config::interfaces(),
        )
        .map_err(|e| {
            P2pError::Other(format!(
                "pm: {}",
                e.replace("TSUNAGI_TCP_IF", "TSUNAGI_PM_IF")
            ))
        })?;
        let lids = cfg.lids.lids.max(1);
        let mut socks = Vec::with_capacity(lids);
        let mut local = Vec::with_capacity(lids);
        for _ in 0..lids {
            let sock = Socket::new(
                Domain::for_address(SocketAddr::new(bind_ip, 0)),
                Type::DGRAM,
                Some(Protocol::UDP),
            )
            .map_err(|e| os_err("socket", e))?;
            // Larger buffers absorb a window from every peer at once; the kernel caps
            // them.
            let _ = sock.set_recv_buffer_size(SOCKET_BUFFER);
            let _ = sock.set_send_buffer_size(SOCKET_BUFFER);
            sock.bind(&SocketAddr::new(bind_ip, 0).into())
                .map_err(|e| os_err("bind", e))?;
            sock.set_nonblocking(true).map_err(|e| os_err("fcntl", e))?;
            let one: libc::c_int = 1;
            // SAFETY: sets an int option from `one`, which lives across the call. Refused
            // by kernels before 5.0: then every datagram is read on its own, as before.
            unsafe {
                libc::setsockopt(
                    sock.as_raw_fd(),
                    libc::SOL_UDP,
                    UDP_GRO,
                    (&one as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            let sock: UdpSocket = sock.into();
            local.push(sock.local_addr().map_err(|e| os_err("getsockname", e))?);
            socks.push(sock);
        }
        // The acknowledgement socket: small datagrams, default buffers do.
        let ack = UdpSocket::bind(SocketAddr::new(bind_ip, 0)).map_err(|e| os_err("bind", e))?;
        ack.set_nonblocking(true).map_err(|e| os_err("fcntl", e))?;
        let ack_local = ack.local_addr().map_err(|e| os_err("getsockname", e))?;
        // SAFETY: eventfd has no memory preconditions; the result is checked.
        let efd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if efd < 0 {
            return Err(P2pError::last_os("eventfd"));
        }
        // SAFETY: `efd` is a fresh descriptor that nothing else owns.
        let wake = unsafe { OwnedFd::from_raw_fd(efd) };
        let epoch = random_u32();
        let max_payload = cfg.pm.max_message() - tsunagi_p2p::HEADER_BYTES;
        let mtu = cfg
            .mtu
            .or_else(|| interface_mtu(&socks[0], publish))
            .unwrap_or(1500);
        let ip_udp = if publish.is_ipv4() { 28 } else { 48 };
        let mut pm = cfg.pm;
        pm.link.max_datagram = mtu.saturating_sub(ip_udp).max(wire::HEADER_BYTES + 512);
        Ok(PmTransport {
            ep: PmEndpoint::new(me, size, epoch, pm),
            shared: Arc::new(Shared {
                socks,
                ack,
                wake,
                busy: AtomicBool::new(false),
                count_sleeps: cfg.stats,
                sleeps: AtomicU64::new(0),
                sleep_ns: AtomicU64::new(0),
            }),
            addrs: vec![None; size],
            sources: vec![None; size],
            ack_addrs: vec![None; size],
            ack_local,
            received_per_lid: vec![0; local.len()],
            local,
            publish,
            eager_limit: cfg.eager_limit.min(max_payload),
            max_payload,
            faults: cfg.faults,
            rng: Rng::new(epoch as u64 ^ ((me as u64) << 32)),
            held_back: None,
            gso: true,
            out: Vec::new(),
            inbuf: vec![0; READ_BUFFER],
            failed: vec![false; size],
            rdma: cfg.rdma,
            size,
            ckpt: Coordinator::new(cfg.checkpoint.clone()),
            stash: VecDeque::new(),
            stats_on: cfg.stats,
            drv: DriverStats::default(),
            lid_index: vec![0; size],
            moves: moving::Moves::new(size, cfg.job_key),
        })
    }

    /// This transport's card: `pm:<ip>:<port0>[,<port1>...]:<epoch in hex>`.
    pub fn card(&self) -> String {
        Card {
            ip: self.publish,
            ports: self.local.iter().map(|a| a.port()).collect(),
            epoch: self.ep.epoch(),
            ack_port: Some(self.ack_local.port()),
        }
        .to_string()
    }

    /// The bound address of the first LID (the one sent from).
    pub fn local_addr(&self) -> SocketAddr {
        self.local[0]
    }

    /// The bound addresses, one per LID.
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.local
    }

    /// The peers with their cards; each is addressed at its port `wiring` chooses.
    /// Refused if a card has fewer ports than the chosen index needs.
    pub fn set_peers(
        &mut self,
        peers: &[(Rank, Card)],
        wiring: &LidWiring,
    ) -> Result<(), P2pError> {
        for (r, card) in peers {
            let index = wiring.destination_index(*r as usize);
            if index >= card.ports.len() {
                return Err(P2pError::Other(format!(
                    "pm: rank {r} publishes {} port(s) but the fat-tree plan addresses its \
                     LID {index}: set the same TSUNAGI_PM_LIDS/TSUNAGI_FATTREE everywhere",
                    card.ports.len()
                )));
            }
            self.addrs[*r as usize] = Some(card.addr(index));
            self.sources[*r as usize] = Some(card.addr(0));
            self.ack_addrs[*r as usize] = card.ack_port.map(|p| SocketAddr::new(card.ip, p));
            self.lid_index[*r as usize] = index as u32;
            self.ep.add_peer(*r, card.epoch);
        }
        Ok(())
    }

    /// Where `peer` is sent to (its port at the planner's LID index), once known.
    pub fn destination(&self, peer: Rank) -> Option<SocketAddr> {
        self.addrs.get(peer as usize).copied().flatten()
    }

    /// Trains go to the kernel in one call each (UDP segmentation offload); false after
    /// the kernel refused it once (each datagram is then sent on its own).
    pub fn segmentation_offload(&self) -> bool {
        self.gso
    }

    /// The largest datagram this endpoint sends (the path MTU less IP and UDP headers).
    pub fn max_datagram(&self) -> usize {
        self.ep.config().link.max_datagram
    }

    /// Datagrams dropped so far by the fault knob (`TSUNAGI_PM_DROP`).
    pub fn fault_drops(&self) -> u64 {
        self.drv.fault_drops
    }

    /// Datagrams accepted on the acknowledgement socket so far.
    pub fn acks_received(&self) -> u64 {
        self.drv.acks_received
    }

    /// The bound address of the acknowledgement socket.
    pub fn ack_addr(&self) -> SocketAddr {
        self.ack_local
    }

    /// Datagrams accepted on each LID's socket so far.
    pub fn received_per_lid(&self) -> &[u64] {
        &self.received_per_lid
    }

    /// The endpoint underneath (statistics, remote memory access, checkpoint).
    pub fn endpoint(&mut self) -> &mut PmEndpoint {
        &mut self.ep
    }

    /// Send `d`: one datagram when `train` is 0, else a train of datagrams of `train`
    /// bytes each (the last may be shorter), by UDP segmentation offload where the kernel
    /// has it.
    fn send_datagram(&mut self, to: SocketAddr, d: &[u8], train: usize) {
        if train == 0 || d.len() <= train {
            self.send_one(to, d);
            return;
        }
        let per_send = (GSO_MAX_BYTES / train).clamp(1, GSO_MAX_SEGMENTS) * train;
        for part in d.chunks(per_send) {
            if self.gso && part.len() > train {
                let t = self.stats_on.then(Instant::now);
                match send_segmented(&self.shared.socks[0], to, part, train) {
                    Ok(()) | Err(SendError::Lost) => {
                        if let Some(t) = t {
                            self.drv.send_ns += t.elapsed().as_nanos() as u64;
                            self.drv.sent += 1;
                            self.drv.sent_bytes += part.len() as u64;
                        }
                        continue;
                    }
                    // This kernel or path cannot segment: one datagram at a time from now.
                    Err(SendError::Unsupported) => self.gso = false,
                }
            }
            for seg in part.chunks(train) {
                self.send_one(to, seg);
            }
        }
    }

    fn send_one(&mut self, to: SocketAddr, d: &[u8]) {
        // A datagram the kernel does not take (no buffer space) is a lost packet: the
        // link resends it. Data always from the first socket: on a fat tree the path
        // follows the destination LID, and peers know this one address as ours. ACKs and
        // NACKs from the acknowledgement socket when `to` is a peer's (see `route`).
        let dst = (d.len() >= 16).then(|| u32::from_le_bytes(d[12..16].try_into().unwrap()));
        let ack_path = dst.and_then(|r| self.ack_addrs.get(r as usize).copied().flatten());
        let sock = if ack_path == Some(to) {
            &self.shared.ack
        } else {
            &self.shared.socks[0]
        };
        if self.stats_on {
            let t = Instant::now();
            let _ = sock.send_to(d, to);
            self.drv.send_ns += t.elapsed().as_nanos() as u64;
            self.drv.sent += 1;
            self.drv.sent_bytes += d.len() as u64;
        } else {
            let _ = sock.send_to(d, to);
        }
    }

    /// Sleep on the sockets (counted with `TSUNAGI_PM_STATS`).
    fn wait(&mut self, timeout: Duration) {
        if self.stats_on {
            let t = Instant::now();
            self.shared.wait(timeout);
            self.drv.sleep_ns += t.elapsed().as_nanos() as u64;
            self.drv.sleeps += 1;
        } else {
            self.shared.wait(timeout);
        }
    }

    /// Send everything the endpoint wants to send now.
    fn flush(&mut self, now: Instant) {
        self.send_moves(now);
        let mut out = std::mem::take(&mut self.out);
        loop {
            let t = self.stats_on.then(Instant::now);
            let to = self.ep.poll_transmit(now, &mut out);
            if let Some(t) = t {
                self.drv.encode_ns += t.elapsed().as_nanos() as u64;
            }
            let Some(to) = to else { break };
            let Some(mut addr) = self.addrs[to as usize] else {
                continue;
            };
            let train = self.ep.train(to);
            // ACK and NACK packets take the acknowledgement path when the peer has one.
            let control =
                train == 0 && out.len() == wire::HEADER_BYTES && matches!(out[3], 2 | 3 | 5);
            if control {
                if let Some(a) = self.ack_addrs[to as usize] {
                    addr = a;
                }
            }
            let f = self.faults;
            if f == Faults::default() {
                self.send_datagram(addr, &out, train);
                continue;
            }
            // Faults strike each datagram of a train on its own (a lost fragment).
            let step = if train == 0 { out.len().max(1) } else { train };
            for seg in out.chunks(step) {
                if f.drop > 0.0 && self.rng.chance(f.drop) {
                    self.drv.fault_drops += 1;
                    continue;
                }
                if f.reorder > 0.0 && self.held_back.is_none() && self.rng.chance(f.reorder) {
                    self.held_back = Some((addr, seg.to_vec(), 0));
                    continue;
                }
                self.send_one(addr, seg);
                if f.duplicate > 0.0 && self.rng.chance(f.duplicate) {
                    self.send_one(addr, seg);
                }
                if let Some((a, d, t)) = self.held_back.take() {
                    self.send_datagram(a, &d, t);
                }
            }
        }
        if let Some((a, d, t)) = self.held_back.take() {
            self.send_datagram(a, &d, t);
        }
        self.out = out;
    }

    /// Read what the sockets hold (up to the budget, shared among them) into the endpoint.
    /// The acknowledgement socket is read first: the ACKs that free our window and the
    /// NACKs that ask for resends are not queued behind the peer's data.
    fn receive_datagrams(&mut self, now: Instant) -> Result<(), P2pError> {
        let lids = self.shared.socks.len();
        let per_socket = READ_BUDGET.div_ceil(lids);
        for i in std::iter::once(lids).chain(0..lids) {
            for _ in 0..per_socket {
                let t = self.stats_on.then(Instant::now);
                let sock = if i == lids {
                    &self.shared.ack
                } else {
                    &self.shared.socks[i]
                };
                let got = sock.recv_from(&mut self.inbuf);
                if let Some(t) = t {
                    self.drv.recv_ns += t.elapsed().as_nanos() as u64;
                }
                match got {
                    Ok((n, from)) => {
                        if n > wire::HEADER_BYTES && self.inbuf[3] == wire::Kind::Move as u8 {
                            // A restarted peer at a new address: checked by its MAC.
                            self.handle_move(now, from, n);
                            continue;
                        }
                        // Only from the address the source rank published (its first
                        // port), on whichever of our LIDs it chose.
                        let d = &self.inbuf[..n];
                        let src =
                            (n >= 12).then(|| u32::from_le_bytes(d[8..12].try_into().unwrap()));
                        let from_list = if i == lids {
                            &self.ack_addrs
                        } else {
                            &self.sources
                        };
                        let known = src.and_then(|s| from_list.get(s as usize).copied().flatten());
                        if known == Some(from) {
                            // It reached our address: a move of ours is known there.
                            self.moves.confirmed(src.unwrap_or(0));
                            if i < lids {
                                self.received_per_lid[i] += 1;
                            } else {
                                self.drv.acks_received += 1;
                            }
                            let t = self.stats_on.then(Instant::now);
                            self.ep.handle_datagram(now, d);
                            if let Some(t) = t {
                                self.drv.handle_ns += t.elapsed().as_nanos() as u64;
                                self.drv.received += 1;
                            }
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    // ICMP errors reported on the socket (a peer's port closed): the
                    // link's timers decide whether the peer is gone.
                    Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {}
                    Err(e) => return Err(os_err("recvfrom", e)),
                }
            }
        }
        Ok(())
    }

    fn map_err(&mut self, e: PmError) -> P2pError {
        match e {
            PmError::PeerFailed(r) => {
                self.failed[r as usize] = true;
                P2pError::PeerFailed {
                    peer: r,
                    why: "no acknowledgement over PM/UDP".into(),
                }
            }
            PmError::Protocol(r, why) => {
                self.failed[r as usize] = true;
                P2pError::PeerFailed {
                    peer: r,
                    why: format!("PM protocol error: {why}"),
                }
            }
            PmError::Usage(s) => P2pError::Other(s),
        }
    }
}

impl PmTransport {
    /// Ask for a checkpoint of the job; it is taken during a coming `poll`.
    pub fn request_checkpoint(&mut self) {
        self.ckpt.request();
    }

    /// Checkpoints taken and abandoned so far.
    pub fn checkpoints(&self) -> (u64, u64) {
        (self.ckpt.taken, self.ckpt.abandoned)
    }

    fn note_markers(&mut self) {
        while let Some((from, id, phase)) = self.ep.take_marker() {
            self.ckpt.note(from, id, phase);
        }
    }

    /// Drive the network until every live peer's marker of `phase` for `id` arrived and
    /// `also` holds; false after [`PATIENCE`].
    fn wait_markers(
        &mut self,
        id: u32,
        phase: u8,
        also: impl Fn(&PmEndpoint) -> bool,
    ) -> Result<bool, P2pError> {
        let start = Instant::now();
        loop {
            let now = Instant::now();
            self.flush(now);
            self.receive_datagrams(now)?;
            self.note_markers();
            if let Some(e) = self.ep.take_error() {
                return Err(self.map_err(e));
            }
            let peers = self.ep.peer_ranks();
            let heard = self.ckpt.heard(id, phase);
            let all = peers
                .iter()
                .all(|p| self.failed[*p as usize] || heard.is_some_and(|h| h.contains(p)));
            if all && also(&self.ep) {
                self.flush(now);
                return Ok(true);
            }
            if start.elapsed() > PATIENCE {
                return Ok(false);
            }
            let until = self
                .ep
                .next_deadline()
                .map(|d| d.saturating_duration_since(now));
            let cap = Duration::from_millis(5);
            let wait = until.unwrap_or(cap).min(cap);
            if !wait.is_zero() {
                self.wait(wait);
            }
        }
    }

    /// Take checkpoint `id` (see [`crate::checkpoint`] for the steps).
    fn checkpoint(&mut self, id: u32) -> Result<(), P2pError> {
        let me = self.ep.me();
        if matches!(self.ep.config().receive, ReceiveMode::Shared { .. }) {
            // The pool's context is not saved (PM/InfiniBand-FJ saved queue pairs, not a
            // shared receive queue): refuse without disturbing the traffic.
            return self.abandon_checkpoint(id, "the shared receive queue is not checkpointed");
        }
        // 1. Quiesce and tell every peer.
        self.ep.quiesce();
        for p in self.ep.peer_ranks() {
            if !self.failed[p as usize] {
                self.ep
                    .send_marker(p, id, STABLE)
                    .map_err(|e| self.map_err(e))?;
            }
        }
        // 2. pmSendStable, and every peer quiesced with its data in.
        if !self.wait_markers(id, STABLE, |ep| ep.is_stable() && !ep.has_held())? {
            return self.abandon_checkpoint(id, "a peer did not quiesce in time");
        }
        // 3. pmSaveContext: the live context, and the image (which leaves out the "saved"
        // markers of peers that were quicker than us: they are not in those peers' images).
        let ctx = self.ep.save_context().map_err(|e| self.map_err(e))?;
        if let Some(dir) = self.ckpt.cfg.dir.clone() {
            let mut image = ctx.clone();
            for &p in self.ckpt.heard(id, SAVED).into_iter().flatten() {
                image.forget_last_from(p);
            }
            let path = dir.join(format!("pm-{me}.img"));
            let tmp = dir.join(format!(".pm-{me}.img.tmp"));
            std::fs::write(&tmp, image.encode())
                .and_then(|()| std::fs::rename(&tmp, &path))
                .map_err(|e| {
                    P2pError::Other(format!(
                        "pm: writing checkpoint image {}: {e}",
                        path.display()
                    ))
                })?;
        }
        // 4. pmRestoreContext into a fresh endpoint, through the encoded form.
        let back = PmContext::decode(&ctx.encode()).map_err(P2pError::Other)?;
        let mut fresh = PmEndpoint::new(me, self.size, self.ep.epoch(), *self.ep.config());
        fresh.restore_context(&back).map_err(|e| self.map_err(e))?;
        fresh.carry_counters(&self.ep);
        self.ep = fresh;
        // 5. Saved: tell the peers, wait for theirs, resume.
        for p in self.ep.peer_ranks() {
            if !self.failed[p as usize] {
                self.ep
                    .send_marker(p, id, SAVED)
                    .map_err(|e| self.map_err(e))?;
            }
        }
        if !self.wait_markers(id, SAVED, |_| true)? {
            return self.abandon_checkpoint(id, "a peer did not save in time");
        }
        self.ep.resume();
        self.ckpt.finish(id, true);
        Ok(())
    }

    fn abandon_checkpoint(&mut self, id: u32, why: &str) -> Result<(), P2pError> {
        say(&format!(
            "pm: rank {}: checkpoint {id} abandoned: {why}\n",
            self.ep.me()
        ));
        self.ep.resume();
        self.ckpt.finish(id, false);
        Ok(())
    }

    /// Take the checkpoint that is due, if any (between deliveries: nothing set aside).
    fn checkpoint_if_due(&mut self) -> Result<(), P2pError> {
        self.note_markers();
        if !self.ckpt.cfg.enabled() && self.ckpt.requested.is_none() {
            return Ok(());
        }
        match self.ckpt.due(Instant::now()) {
            Some(id) if self.stash.is_empty() && !self.ep.has_held() => self.checkpoint(id),
            _ => Ok(()),
        }
    }

    /// Move every complete message out of the endpoint into the stash (during an RDMA
    /// read, so that rings and the receive pool keep room for what the read waits for).
    fn stash_received(&mut self) {
        while let Some(r) = self.ep.receive() {
            let body = self.ep.message(&r).to_vec();
            self.ep.release();
            self.stash.push_back((r.peer, body));
        }
    }

    /// The body of [`Transport::read_remote`]: PULL `dst.len()` bytes from `peer`'s region
    /// `key` at `offset` into `dst`, pieces of at most one work request, many in flight.
    fn pull_region(
        &mut self,
        peer: Rank,
        key: u32,
        offset: u64,
        dst: &mut [u8],
    ) -> Result<(), P2pError> {
        let len = dst.len();
        // SAFETY: `dst` is borrowed mutably for this whole call, and every PULL into the
        // region either finishes or is abandoned (its reply then dropped) before we return.
        let local = unsafe { self.ep.register_local(dst.as_mut_ptr(), len) };
        let piece = self.ep.config().rdma_piece;
        let max_pulls = (PULL_BYTES_IN_FLIGHT / piece).clamp(2, PULLS_IN_FLIGHT);
        let mut inflight: VecDeque<u64> = VecDeque::new();
        let mut next = 0usize;
        let result = loop {
            while next < len && inflight.len() < max_pulls {
                let n = piece.min(len - next);
                let at = offset + next as u64;
                match self.ep.pull_into(peer, key, at, local, next as u64, n) {
                    Ok(Some(tag)) => inflight.push_back(tag),
                    Ok(None) => break,
                    Err(e) => return self.abandon(inflight, Err(e)),
                }
                next += n;
            }
            // Read what arrived before running the timers (in `flush`): after a stall
            // of ours the pieces a reassembly timer would ask for may be in the socket.
            let now = Instant::now();
            let arrived = |t: &Self| t.received_per_lid.iter().sum::<u64>() + t.drv.acks_received;
            let before = arrived(self);
            if let Err(e) = self.receive_datagrams(now) {
                break Err(e);
            }
            self.stash_received();
            self.flush(now);
            let mut failed = None;
            inflight.retain(|&tag| match self.ep.pull_status(tag) {
                None => true,
                Some(Ok(())) => false,
                Some(Err(e)) => {
                    failed.get_or_insert(e);
                    false
                }
            });
            if let Some(why) = failed {
                break Err(P2pError::Other(format!(
                    "pm: RDMA read from rank {peer}: {why}"
                )));
            }
            if next >= len && inflight.is_empty() {
                break Ok(());
            }
            if let Some(e) = self.ep.take_error() {
                return self.abandon(inflight, Err(e));
            }
            if arrived(self) == before {
                // Nothing came: sleep until a datagram does or a timer is due.
                let until = self
                    .ep
                    .next_deadline()
                    .map(|d| d.saturating_duration_since(now));
                let cap = Duration::from_millis(10);
                let wait = until.unwrap_or(cap).min(cap);
                if !wait.is_zero() {
                    self.wait(wait);
                }
            }
        };
        for tag in inflight {
            self.ep.abandon_pull(tag);
        }
        result
    }

    fn abandon(&mut self, inflight: VecDeque<u64>, r: Result<(), PmError>) -> Result<(), P2pError> {
        for tag in inflight {
            self.ep.abandon_pull(tag);
        }
        r.map_err(|e| self.map_err(e))
    }
}

impl Drop for PmTransport {
    fn drop(&mut self) {
        if self.moves.moved_out {
            // A new process continues from our image: acknowledging anything now would
            // take it from the peers without it being in the image.
            return;
        }
        // Keep the network going until our data is acknowledged (the peers may still need
        // it to finish), then a little longer to answer retransmissions of theirs whose
        // ACK was lost.
        let start = Instant::now();
        let mut stable_at = None;
        while start.elapsed() < LINGER {
            let now = Instant::now();
            if self.receive_datagrams(now).is_err() {
                break;
            }
            while self.ep.receive().is_some() {
                self.ep.release();
            }
            // A finished rank sends nothing more: it answers a checkpoint at once.
            while let Some((from, id, phase)) = self.ep.take_marker() {
                if phase == STABLE {
                    let _ = self.ep.send_marker(from, id, STABLE);
                    let _ = self.ep.send_marker(from, id, SAVED);
                }
            }
            self.flush(now);
            if self.ep.is_stable() {
                let t = *stable_at.get_or_insert(now);
                if now - t > Duration::from_millis(20) {
                    break;
                }
            } else {
                stable_at = None;
            }
            if self.ep.take_error().is_some() {
                break;
            }
            self.shared.sleep(0, Duration::from_millis(1));
        }
        self.shared.notify();
        if self.stats_on {
            let (l, p, mut d) = (self.ep.link_stats(), self.ep.stats(), self.drv);
            d.sleeps += self.shared.sleeps.load(Ordering::Relaxed);
            d.sleep_ns += self.shared.sleep_ns.load(Ordering::Relaxed);
            let ms = |ns: u64| ns as f64 / 1e6;
            say(&format!(
                "pm: rank {} stats: link {l:?}\npm: rank {} stats: endpoint {p:?}\n\
                 pm: rank {} stats: driver sent {} datagrams {} bytes in {:.1} ms, \
                 received {} ({} on the ACK path) in {:.1} ms + handled in {:.1} ms, \
                 encode {:.1} ms, {} sleeps {:.1} ms\n",
                self.ep.me(),
                self.ep.me(),
                self.ep.me(),
                d.sent,
                d.sent_bytes,
                ms(d.send_ns),
                d.received,
                d.acks_received,
                ms(d.recv_ns),
                ms(d.handle_ns),
                ms(d.encode_ns),
                d.sleeps,
                ms(d.sleep_ns)
            ));
        }
        if let Some(dir) = &self.ckpt.cfg.dir {
            // The count where the images are, for scripts and tests (stderr lines of
            // several ranks may interleave).
            let _ = std::fs::write(
                dir.join(format!("pm-{}.count", self.ep.me())),
                format!("{} {}\n", self.ckpt.taken, self.ckpt.abandoned),
            );
        }
        if self.ckpt.cfg.enabled() {
            say(&format!(
                "pm: rank {}: {} checkpoint(s) taken, {} abandoned\n",
                self.ep.me(),
                self.ckpt.taken,
                self.ckpt.abandoned
            ));
        }
    }
}

impl Transport for PmTransport {
    fn name(&self) -> &'static str {
        "pm"
    }

    fn eager_limit(&self) -> usize {
        self.eager_limit
    }

    fn max_payload(&self) -> usize {
        self.max_payload
    }

    fn try_send(&mut self, peer: Rank, hdr: &Header, payload: &[u8]) -> Result<bool, P2pError> {
        self.usable()?;
        if payload.len() > self.max_payload {
            return Err(P2pError::Other(format!(
                "pm: payload of {} bytes exceeds max_payload {}",
                payload.len(),
                self.max_payload
            )));
        }
        if self.addrs.get(peer as usize).copied().flatten().is_none() {
            return Err(P2pError::Unsupported(format!(
                "pm transport of rank {} does not reach rank {peer}",
                self.ep.me()
            )));
        }
        if self.failed[peer as usize] {
            return Err(P2pError::PeerFailed {
                peer,
                why: "no acknowledgement over PM/UDP".into(),
            });
        }
        let len = tsunagi_p2p::HEADER_BYTES + payload.len();
        let sent = match self.ep.get_send_buffer(peer, len) {
            Ok(Some(buf)) => {
                buf[..tsunagi_p2p::HEADER_BYTES].copy_from_slice(&hdr.to_bytes());
                buf[tsunagi_p2p::HEADER_BYTES..].copy_from_slice(payload);
                self.ep.send(peer, len).map_err(|e| self.map_err(e))?;
                true
            }
            Ok(None) => false,
            Err(e) => return Err(self.map_err(e)),
        };
        self.flush(Instant::now());
        Ok(sent)
    }

    fn poll(&mut self, sink: &mut Sink<'_>) -> Result<usize, P2pError> {
        self.usable()?;
        let now = Instant::now();
        let mut n = 0;
        while n < DELIVER_BUDGET {
            let Some((peer, body)) = self.stash.pop_front() else {
                break;
            };
            if body.len() < tsunagi_p2p::HEADER_BYTES {
                self.failed[peer as usize] = true;
                return Err(P2pError::PeerFailed {
                    peer,
                    why: format!("PM message of {} bytes has no header", body.len()),
                });
            }
            let hdr = Header::from_bytes(body[..tsunagi_p2p::HEADER_BYTES].try_into().unwrap());
            sink(peer, &hdr, &body[tsunagi_p2p::HEADER_BYTES..]);
            n += 1;
        }
        if !self.stash.is_empty() {
            self.shared.busy.store(true, Ordering::Release);
            return Ok(n);
        }
        self.receive_datagrams(now)?;
        while n < DELIVER_BUDGET {
            let Some(r) = self.ep.receive() else { break };
            let body = self.ep.message(&r);
            if body.len() < tsunagi_p2p::HEADER_BYTES {
                let len = body.len();
                self.ep.release();
                self.failed[r.peer as usize] = true;
                return Err(P2pError::PeerFailed {
                    peer: r.peer,
                    why: format!("PM message of {len} bytes has no header"),
                });
            }
            let hdr = Header::from_bytes(body[..tsunagi_p2p::HEADER_BYTES].try_into().unwrap());
            sink(r.peer, &hdr, &body[tsunagi_p2p::HEADER_BYTES..]);
            self.ep.release();
            n += 1;
        }
        // Releasing made ring room visible and may have queued ACKs: send them now.
        self.flush(now);
        if self.stash.is_empty() {
            self.checkpoint_if_due()?;
        }
        self.shared
            .busy
            .store(self.ep.has_received(), Ordering::Release);
        if let Some(e) = self.ep.take_error() {
            return Err(self.map_err(e));
        }
        Ok(n)
    }

    fn event_source(&self) -> Arc<dyn EventSource> {
        self.shared.clone()
    }

    fn caps(&self) -> TransportCaps {
        TransportCaps {
            eager_limit: self.eager_limit,
            max_payload: self.max_payload,
            rdma_read: self.rdma,
            rdma_write: false,
            needs_registration: true,
            ordered: true,
            timers: true,
        }
    }

    fn single_copy(&self, peer: Rank) -> bool {
        self.rdma
            && peer != self.ep.me()
            && self.addrs.get(peer as usize).copied().flatten().is_some()
            && !self.failed[peer as usize]
    }

    unsafe fn expose(&mut self, peer: Rank, addr: *const u8, len: usize) -> Result<u64, P2pError> {
        self.usable()?;
        if !self.single_copy(peer) || len as u64 >= 1 << RDMA_KEY_SHIFT {
            return Err(P2pError::Unsupported(format!(
                "pm: no RDMA to rank {peer} for {len} bytes"
            )));
        }
        // SAFETY: the caller's contract (valid and unmodified until the peer answers) is
        // the endpoint's; the peer's INVALIDATE, executed before its answer, ends the grant.
        let key = unsafe { self.ep.expose(peer, addr, len) }.map_err(|e| self.map_err(e))?;
        Ok((key as u64) << RDMA_KEY_SHIFT)
    }

    fn read_remote(
        &mut self,
        peer: Rank,
        remote_addr: u64,
        dst: &mut [u8],
    ) -> Result<(), P2pError> {
        self.usable()?;
        let key = (remote_addr >> RDMA_KEY_SHIFT) as u32;
        let offset = remote_addr & ((1 << RDMA_KEY_SHIFT) - 1);
        if !self.single_copy(peer) {
            let reachable = peer != self.ep.me() && self.destination(peer).is_some();
            if reachable && !self.failed[peer as usize] {
                // RDMA is off here but the peer announced a region: end its grant anyway.
                let _ = self.ep.invalidate(peer, key);
                self.flush(Instant::now());
            }
            return Err(P2pError::Unsupported(format!(
                "pm: no RDMA read from rank {peer}"
            )));
        }
        let r = if dst.is_empty() {
            Ok(())
        } else {
            self.pull_region(peer, key, offset, dst)
        };
        // Done with the sender's buffer, also when the read failed (the request layer then
        // asks for the data by CTS instead): end our grant before our answer reaches it.
        if let Err(e) = self.ep.invalidate(peer, key) {
            return Err(self.map_err(e));
        }
        self.flush(Instant::now());
        if !self.stash.is_empty() {
            self.shared.busy.store(true, Ordering::Release);
        }
        r
    }

    fn next_deadline(&self) -> Option<Instant> {
        let ep = [self.ep.next_deadline(), self.moves.next_deadline()]
            .into_iter()
            .flatten()
            .min();
        if !self.ckpt.cfg.enabled() && self.ckpt.requested.is_none() {
            return ep;
        }
        match (ep, self.ckpt.next_deadline(Instant::now())) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn config_from_env() {
        let c = PmTransportConfig::from_env(env(&[])).unwrap();
        assert_eq!(c.faults, Faults::default());
        assert_eq!(
            c.pm.receive,
            ReceiveMode::Rings {
                ring_bytes: 1 << 20
            }
        );
        // Ring messages go in PUSHes of 60 KB, the shared queue's in its 8 KiB buffers.
        assert_eq!(c.pm.wr_data, RING_PACKET);
        let c = PmTransportConfig::from_env(env(&[("TSUNAGI_PM_PACKET", "8192")])).unwrap();
        assert_eq!(c.pm.wr_data, 8192);
        let c = PmTransportConfig::from_env(env(&[
            ("TSUNAGI_PM_DROP", "0.05"),
            ("TSUNAGI_PM_WINDOW", "8"),
            ("TSUNAGI_PM_RECEIVE", "srq"),
            ("TSUNAGI_TCP_IF", "lo"),
        ]))
        .unwrap();
        assert_eq!(c.faults.drop, 0.05);
        assert_eq!(c.pm.link.window, 8);
        assert!(matches!(
            c.pm.receive,
            ReceiveMode::Shared {
                buffer_bytes: 8192,
                ..
            }
        ));
        assert_eq!(c.interface.as_deref(), Some("lo"));
        for bad in [
            ("TSUNAGI_PM_DROP", "2"),
            ("TSUNAGI_PM_DROP", "lots"),
            ("TSUNAGI_PM_WINDOW", "64"),
            ("TSUNAGI_PM_RECEIVE", "magic"),
            ("TSUNAGI_PM_RING", "100000"),
            ("TSUNAGI_PM_CHECKPOINT", "soon"),
            ("TSUNAGI_PM_RDMA", "2"),
            ("TSUNAGI_PM_RDMA_PIECE", "100000"),
            ("TSUNAGI_PM_GIVE_UP", "0"),
            ("TSUNAGI_PM_STATS", "yes"),
        ] {
            let e = PmTransportConfig::from_env(env(&[bad])).unwrap_err();
            assert!(e.starts_with(bad.0), "{e}");
        }
        let c =
            PmTransportConfig::from_env(env(&[("TSUNAGI_PM_CHECKPOINT", "signal,100")])).unwrap();
        assert!(c.checkpoint.signal && c.rdma);
        let e = PmTransportConfig::from_env(env(&[
            ("TSUNAGI_PM_CHECKPOINT", "100"),
            ("TSUNAGI_PM_RECEIVE", "srq"),
        ]))
        .unwrap_err();
        assert!(e.contains("TSUNAGI_PM_RECEIVE=rings"), "{e}");
    }
}
