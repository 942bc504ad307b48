//! The IMPI device: Tsunagi's native-tier [`Device`] for the ranks of other sites, one
//! [`Link`] per peer host over a non-blocking TCP connection.
//!
//! Host model: each process is its own IMPI host (GridMPI 2.x's model), so a link serves
//! this process and the procs of one peer host: one proc for a Tsunagi peer, all of a LAM
//! client's procs for a LAM peer (one host per client). The connections are made at
//! start-up ([`crate::join`]); this module only moves bytes and turns link events into
//! device events. The envelope maps directly: world ranks are IMPI's global ranks,
//! `pk_lsrank` carries the sender's world rank (as LAM does), the context id is `pk_cid`.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tsunagi_p2p::device::{DataRep, Device, DeviceCancel, DeviceCaps, DeviceEvent, Envelope};
use tsunagi_p2p::{EventSource, P2pError, Rank};

use crate::link::{CancelStatus, Event, Link, LinkError, SendRequest};

/// One peer host: its connection and its link.
pub struct HostConn {
    /// The peer host's index (IMPI's host order).
    pub host: u32,
    stream: TcpStream,
    link: Link,
    /// Bytes the link produced that the socket did not take yet.
    out: Vec<u8>,
    out_pos: usize,
    /// The peer closed the connection (after FINI).
    eof: bool,
    /// The lowest world rank on the peer host (for failure reports).
    peer_rank: Rank,
}

impl HostConn {
    /// A connection (made and introduced by start-up) and its link.
    pub fn new(host: u32, stream: TcpStream, link: Link) -> std::io::Result<HostConn> {
        stream.set_nonblocking(true)?;
        stream.set_nodelay(true)?;
        Ok(HostConn {
            host,
            stream,
            link,
            out: Vec::new(),
            out_pos: 0,
            eof: false,
            peer_rank: 0,
        })
    }

    /// Move the link's output to the socket as far as it takes it.
    fn write_out(&mut self) -> Result<(), P2pError> {
        if self.out_pos == self.out.len() {
            self.out.clear();
            self.out_pos = 0;
            if !self.link.has_output() {
                return Ok(());
            }
            self.out = self.link.transmit();
        } else if self.link.has_output() {
            let more = self.link.transmit();
            self.out.extend_from_slice(&more);
        }
        while self.out_pos < self.out.len() {
            match self.stream.write(&self.out[self.out_pos..]) {
                Ok(0) => return Err(self.lost("the connection accepts no more data")),
                Ok(n) => self.out_pos += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(self.lost(&e.to_string())),
            }
        }
        Ok(())
    }

    /// Read what the socket has into the link. Returns bytes read.
    fn read_in(&mut self, buf: &mut [u8]) -> Result<usize, P2pError> {
        let mut total = 0;
        while !self.eof {
            match self.stream.read(buf) {
                Ok(0) => {
                    self.eof = true;
                    self.link
                        .handle_eof()
                        .map_err(|e| self.lost(&e.to_string()))?;
                }
                Ok(n) => {
                    total += n;
                    self.link
                        .handle_input(&buf[..n])
                        .map_err(|e| self.broken(e))?;
                    if n < buf.len() {
                        break;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(self.lost(&e.to_string())),
            }
        }
        Ok(total)
    }

    fn wants_write(&self) -> bool {
        self.out_pos < self.out.len() || self.link.has_output()
    }

    fn lost(&self, why: &str) -> P2pError {
        P2pError::PeerFailed {
            peer: self.peer_rank,
            why: format!("IMPI host {} (another site) went away: {why}", self.host),
        }
    }

    fn broken(&self, e: LinkError) -> P2pError {
        P2pError::Other(format!("IMPI host {}: {e}", self.host))
    }
}

/// The IMPI device of one process.
pub struct ImpiDevice {
    me: Rank,
    conns: Vec<HostConn>,
    /// World rank → index in `conns` of the host that carries it.
    conn_of: Vec<u32>,
    caps: DeviceCaps,
    /// Device token of each send in flight, by (connection, link send id), and back.
    tokens: HashMap<(u32, u64), u64>,
    sends: HashMap<u64, (u32, u64)>,
    source: Arc<SocketsSource>,
    buf: Vec<u8>,
}

const NO_CONN: u32 = u32::MAX;

/// Arrival ids: the connection in the high bits, the link's arrival id below.
const CONN_SHIFT: u32 = 40;

impl ImpiDevice {
    /// A device over `conns` for a job of `size` world ranks; `carries(conn)` lists the
    /// world ranks of each connection's peer host. `tag_ub` is the negotiated bound.
    pub fn new(
        me: Rank,
        size: usize,
        conns: Vec<(HostConn, Vec<Rank>)>,
        tag_ub: i32,
        data_rep: DataRep,
    ) -> Result<ImpiDevice, P2pError> {
        let mut conn_of = vec![NO_CONN; size];
        let mut list = Vec::with_capacity(conns.len());
        for (i, (mut c, ranks)) in conns.into_iter().enumerate() {
            c.peer_rank = ranks.iter().copied().min().unwrap_or(0);
            for r in ranks {
                conn_of[r as usize] = i as u32;
            }
            list.push(c);
        }
        let source = Arc::new(SocketsSource::new(
            list.iter().map(|c| c.stream.as_raw_fd()).collect(),
        )?);
        Ok(ImpiDevice {
            me,
            conns: list,
            conn_of,
            caps: DeviceCaps {
                data_rep,
                tag_ub,
                timers: false,
            },
            tokens: HashMap::new(),
            sends: HashMap::new(),
            source,
            buf: vec![0u8; 256 * 1024],
        })
    }

    /// The world ranks this device reaches.
    pub fn peers(&self) -> Vec<Rank> {
        (0..self.conn_of.len() as Rank)
            .filter(|&r| self.conn_of[r as usize] != NO_CONN)
            .collect()
    }

    fn conn_for(&mut self, rank: Rank) -> Result<usize, P2pError> {
        match self.conn_of.get(rank as usize) {
            Some(&c) if c != NO_CONN => Ok(c as usize),
            _ => Err(P2pError::Other(format!(
                "IMPI: no host carries world rank {rank}"
            ))),
        }
    }

    /// Write pending output of every connection; note whether some remains.
    fn flush_all(&mut self) -> Result<(), P2pError> {
        let mut pending = false;
        for c in self.conns.iter_mut() {
            c.write_out()?;
            pending |= c.wants_write();
        }
        self.source.pending_out.store(pending, Ordering::Release);
        Ok(())
    }

    fn link_err(&self, c: usize, e: LinkError) -> P2pError {
        P2pError::Other(format!("IMPI host {}: {e}", self.conns[c].host))
    }
}

impl Device for ImpiDevice {
    fn name(&self) -> &'static str {
        "impi"
    }

    fn caps(&self) -> DeviceCaps {
        self.caps
    }

    fn send(
        &mut self,
        env: Envelope,
        sync: bool,
        data: Vec<u8>,
        token: u64,
    ) -> Result<(), P2pError> {
        let c = self.conn_for(env.dst)?;
        let req = SendRequest {
            src: self.me,
            dst: env.dst,
            lsrank: env.src as i32,
            tag: env.tag,
            cid: u64::from(env.context),
            sync,
            data,
        };
        let sid = self.conns[c]
            .link
            .send(req)
            .map_err(|e| self.link_err(c, e))?;
        self.tokens.insert((c as u32, sid), token);
        self.sends.insert(token, (c as u32, sid));
        self.conns[c].write_out()?;
        if self.conns[c].wants_write() {
            self.source.pending_out.store(true, Ordering::Release);
        }
        Ok(())
    }

    fn accept(&mut self, id: u64) -> Result<(), P2pError> {
        let c = (id >> CONN_SHIFT) as usize;
        let aid = id & ((1 << CONN_SHIFT) - 1);
        if c >= self.conns.len() {
            return Err(P2pError::Other(format!("IMPI: no arrival {id}")));
        }
        self.conns[c]
            .link
            .accept(aid)
            .map_err(|e| self.link_err(c, e))?;
        self.conns[c].write_out()
    }

    fn cancel_send(&mut self, token: u64) -> Result<DeviceCancel, P2pError> {
        let Some(&(c, sid)) = self.sends.get(&token) else {
            return Ok(DeviceCancel::NotCancelled);
        };
        let c = c as usize;
        let st = self.conns[c]
            .link
            .cancel(sid)
            .map_err(|e| self.link_err(c, e))?;
        self.conns[c].write_out()?;
        Ok(match st {
            CancelStatus::Cancelled => {
                self.sends.remove(&token);
                self.tokens.remove(&(c as u32, sid));
                DeviceCancel::Cancelled
            }
            CancelStatus::NotCancelled => DeviceCancel::NotCancelled,
            CancelStatus::Pending => DeviceCancel::Pending,
        })
    }

    fn poll(&mut self, sink: &mut dyn FnMut(DeviceEvent)) -> Result<usize, P2pError> {
        let mut n = 0;
        let mut buf = std::mem::take(&mut self.buf);
        for c in 0..self.conns.len() {
            let r = self.conns[c].read_in(&mut buf);
            if let Err(e) = r {
                self.buf = buf;
                return Err(e);
            }
            while let Some(ev) = self.conns[c].link.poll_event() {
                n += 1;
                let base = (c as u64) << CONN_SHIFT;
                let ev = match ev {
                    Event::Arrived(a) => DeviceEvent::Arrived {
                        id: base | a.id,
                        env: Envelope {
                            src: a.src,
                            dst: a.dst,
                            tag: a.tag,
                            context: a.cid as u32,
                            len: a.msglen,
                        },
                        sync: a.sync,
                        data: a.data,
                        complete: a.complete,
                    },
                    Event::Data { id, offset, data } => DeviceEvent::Data {
                        id: base | id,
                        offset,
                        data,
                    },
                    Event::Received { id } => DeviceEvent::Received { id: base | id },
                    Event::ArrivalCancelled { id } => {
                        DeviceEvent::ArrivalCancelled { id: base | id }
                    }
                    Event::SendComplete { id } => {
                        let Some(token) = self.tokens.remove(&(c as u32, id)) else {
                            continue;
                        };
                        self.sends.remove(&token);
                        DeviceEvent::SendComplete { token }
                    }
                    Event::CancelResult { id, cancelled } => {
                        let Some(&token) = self.tokens.get(&(c as u32, id)) else {
                            continue;
                        };
                        if cancelled {
                            self.tokens.remove(&(c as u32, id));
                            self.sends.remove(&token);
                        }
                        DeviceEvent::CancelResult { token, cancelled }
                    }
                    Event::PeerFinished => continue,
                };
                sink(ev);
            }
        }
        self.buf = buf;
        // Accepting and acknowledging may have produced output.
        self.flush_all()?;
        Ok(n)
    }

    fn event_source(&self) -> Arc<dyn EventSource> {
        self.source.clone()
    }

    fn finish(&mut self, timeout: Duration) -> Result<(), P2pError> {
        for c in 0..self.conns.len() {
            self.conns[c]
                .link
                .finish()
                .map_err(|e| self.link_err(c, e))?;
        }
        let deadline = Instant::now() + timeout;
        let mut buf = std::mem::take(&mut self.buf);
        let result = loop {
            let mut all_closed = true;
            let mut failed = None;
            for c in self.conns.iter_mut() {
                if let Err(e) = c.write_out().and_then(|_| c.read_in(&mut buf).map(|_| ())) {
                    failed = Some(e);
                    break;
                }
                while c.link.poll_event().is_some() {}
                all_closed &= c.link.is_closed() && !c.wants_write();
            }
            if let Some(e) = failed {
                break Err(e);
            }
            if all_closed {
                break Ok(());
            }
            if Instant::now() >= deadline {
                break Err(P2pError::Other(format!(
                    "IMPI: the other sites did not finish within {timeout:?}"
                )));
            }
            self.source.sleep(0, Duration::from_millis(5));
        };
        self.buf = buf;
        result
    }
}

/// Sleep on the device's sockets: readable data (or writable room while output waits), or
/// a [`EventSource::notify`].
struct SocketsSource {
    fds: Vec<RawFd>,
    wake: OwnedFd,
    pending_out: AtomicBool,
}

impl SocketsSource {
    fn new(fds: Vec<RawFd>) -> Result<SocketsSource, P2pError> {
        // SAFETY: eventfd has no memory arguments; a negative return is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(P2pError::last_os("eventfd"));
        }
        Ok(SocketsSource {
            fds,
            // SAFETY: `fd` was just returned by eventfd and is owned by nothing else.
            wake: unsafe { OwnedFd::from_raw_fd(fd) },
            pending_out: AtomicBool::new(false),
        })
    }
}

impl EventSource for SocketsSource {
    fn prepare(&self) -> u64 {
        0
    }

    fn sleep(&self, _token: u64, timeout: Duration) {
        let out = self.pending_out.load(Ordering::Acquire);
        let events = libc::POLLIN | if out { libc::POLLOUT } else { 0 };
        let mut pfds: Vec<libc::pollfd> = self
            .fds
            .iter()
            .map(|&fd| libc::pollfd {
                fd,
                events,
                revents: 0,
            })
            .collect();
        pfds.push(libc::pollfd {
            fd: self.wake.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        let ms = timeout.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32;
        // SAFETY: `pfds` is a valid array of `pfds.len()` pollfd structs for the duration of
        // the call. The socket descriptors belong to the device's streams, which the runtime
        // drops only after its progress threads stopped sleeping here; a descriptor closed
        // meanwhile reports POLLNVAL, which only ends the sleep early.
        unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
        let last = pfds.last().expect("the wake descriptor");
        if last.revents & libc::POLLIN != 0 {
            let mut v = 0u64;
            // SAFETY: reads 8 bytes into a local u64 from our own non-blocking eventfd.
            unsafe {
                libc::read(
                    self.wake.as_raw_fd(),
                    (&mut v as *mut u64).cast(),
                    std::mem::size_of::<u64>(),
                )
            };
        }
    }

    fn cancel(&self) {}

    fn notify(&self) {
        let v = 1u64;
        // SAFETY: writes 8 bytes from a local u64 to our own eventfd.
        unsafe {
            libc::write(
                self.wake.as_raw_fd(),
                (&v as *const u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
    }
}
