//! The IMPI device: Tsunagi's native-tier [`Device`] for the ranks of other sites, one
//! [`Link`] per peer host over a non-blocking TCP connection.
//!
//! Host model: each process is its own IMPI host (GridMPI 2.x's model), so a link serves
//! this process and the procs of one peer host: one proc for a Tsunagi peer, all of a LAM
//! client's procs for a LAM peer (one host per client). The connections are made at
//! start-up ([`crate::join`]); this module only moves bytes and turns link events into
//! device events. The envelope maps directly: world ranks are IMPI's global ranks,
//! `pk_lsrank` carries the sender's world rank (as LAM does), the context id is `pk_cid`.

use std::io::{ErrorKind, IoSlice, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tsunagi_p2p::device::{DataRep, Device, DeviceCancel, DeviceCaps, DeviceEvent, Envelope};
use tsunagi_p2p::{EventSource, P2pError, Rank};

use crate::fasthash::FastMap;
use crate::link::{CancelStatus, Event, Link, LinkError, SendRequest};

/// Most slices handed to one `writev`.
const MAX_IOV: usize = 64;

/// One peer host: its connection and its link.
pub struct HostConn {
    /// The peer host's index (IMPI's host order).
    pub host: u32,
    stream: TcpStream,
    link: Link,
    /// The peer closed the connection (after FINI).
    eof: bool,
    /// Write readiness is registered with the device's epoll set (output is waiting).
    watching_out: bool,
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
            eof: false,
            watching_out: false,
            peer_rank: 0,
        })
    }

    /// Move the link's output to the socket as far as it takes it: headers and message
    /// data in one `writev`, straight from the buffers the link holds.
    fn write_out(&mut self) -> Result<(), P2pError> {
        while self.link.has_output() {
            let r = match self.link.output_single() {
                Some(bytes) => self.stream.write(bytes),
                None => {
                    let mut iov: Vec<IoSlice<'_>> = Vec::with_capacity(MAX_IOV);
                    self.link.output_slices(&mut iov, MAX_IOV);
                    self.stream.write_vectored(&iov)
                }
            };
            match r {
                Ok(0) => return Err(self.lost("the connection accepts no more data")),
                Ok(n) => self.link.output_written(n),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(self.lost(&e.to_string())),
            }
        }
        Ok(())
    }

    /// Read what the socket has into the link (large packets' data straight into their
    /// own buffers). Returns bytes read.
    fn read_in(&mut self) -> Result<usize, P2pError> {
        let mut total = 0;
        while !self.eof {
            let (body, staging) = self.link.input_buffers();
            let room = body.len() + staging.len();
            if room == 0 {
                break;
            }
            let iov = [
                libc::iovec {
                    iov_base: body.as_mut_ptr().cast(),
                    iov_len: body.len(),
                },
                libc::iovec {
                    iov_base: staging.as_mut_ptr().cast(),
                    iov_len: staging.len(),
                },
            ];
            // SAFETY: both iovecs describe memory the link lent us for this call (a
            // packet's uninitialised spare capacity, then its staging buffer), writable
            // for their lengths and disjoint; readv writes at most their total and reports
            // how much, which is all `input_filled` treats as initialised.
            let r = unsafe { libc::readv(self.stream.as_raw_fd(), iov.as_ptr(), 2) };
            let r = if r < 0 {
                Err(std::io::Error::last_os_error())
            } else {
                Ok(r as usize)
            };
            match r {
                Ok(0) => {
                    self.eof = true;
                    self.link
                        .handle_eof()
                        .map_err(|e| self.lost(&e.to_string()))?;
                }
                Ok(n) => {
                    total += n;
                    self.link.input_filled(n).map_err(|e| self.broken(e))?;
                    if n < room {
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
        self.link.has_output()
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
    tokens: FastMap<(u32, u64), u64>,
    sends: FastMap<u64, (u32, u64)>,
    source: Arc<SocketsSource>,
    /// Readiness reported by the last `epoll_wait`.
    ready: Vec<libc::epoll_event>,
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
        keep_freed_memory();
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
            &list
                .iter()
                .map(|c| c.stream.as_raw_fd())
                .collect::<Vec<_>>(),
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
            tokens: FastMap::default(),
            sends: FastMap::default(),
            source,
            ready: Vec::with_capacity(64),
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

    /// Write the pending output of connection `c`, and watch for room in its socket
    /// while some remains (and only then, so that sleepers do not wake for nothing).
    fn flush(&mut self, c: usize) -> Result<(), P2pError> {
        let conn = &mut self.conns[c];
        conn.write_out()?;
        let want = conn.wants_write() && !conn.eof;
        if want != conn.watching_out {
            conn.watching_out = want;
            self.source
                .watch(conn.stream.as_raw_fd(), c, want)
                .map_err(|e| self.conns[c].lost(&e.to_string()))?;
        }
        Ok(())
    }

    /// Write pending output of every connection whose socket may take it: new output at
    /// once, output that waited for room only once the socket reported some.
    fn flush_all(&mut self, writable: &[usize]) -> Result<(), P2pError> {
        for c in 0..self.conns.len() {
            let conn = &self.conns[c];
            if conn.wants_write() && (!conn.watching_out || writable.contains(&c)) {
                self.flush(c)?;
            }
        }
        Ok(())
    }

    /// Read what connection `c` has; once the peer closed it, stop watching its socket
    /// (a closed socket is always "readable" and would wake every sleep).
    fn read_conn(&mut self, c: usize) -> Result<(), P2pError> {
        let was_eof = self.conns[c].eof;
        self.conns[c].read_in()?;
        if self.conns[c].eof && !was_eof {
            self.conns[c].watching_out = false;
            self.source
                .forget(self.conns[c].stream.as_raw_fd())
                .map_err(|e| self.conns[c].lost(&e.to_string()))?;
        }
        Ok(())
    }

    /// Ask the epoll set which sockets have bytes (or room), and read those: no read per
    /// peer host per progress step. Connections with room go to `writable`.
    fn poll_ready(&mut self, writable: &mut Vec<usize>) -> Result<(), P2pError> {
        let mut ready = std::mem::take(&mut self.ready);
        let r = self.source.ready(&mut ready);
        for ev in &ready {
            let c = ev.u64 as usize;
            let bits = ev.events as i32;
            if c >= self.conns.len() {
                continue;
            }
            if bits & libc::EPOLLOUT != 0 {
                writable.push(c);
            }
            if bits & (libc::EPOLLIN | libc::EPOLLHUP | libc::EPOLLERR | libc::EPOLLRDHUP) != 0 {
                if let Err(e) = self.read_conn(c) {
                    self.ready = ready;
                    return Err(e);
                }
            }
        }
        self.ready = ready;
        r
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
        if !self.conns[c].watching_out {
            self.flush(c)?;
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
        if !self.conns[c].watching_out {
            self.flush(c)?;
        }
        Ok(())
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
        if !self.conns[c].watching_out {
            self.flush(c)?;
        }
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
        let mut writable = Vec::new();
        if self.conns.len() == 1 && !self.conns[0].eof && !self.conns[0].watching_out {
            // One peer host (two sites of one process each): one read either finds bytes
            // or says there are none, so asking epoll first would only add a system call
            // on the path of every message.
            self.read_conn(0)?;
        } else {
            self.poll_ready(&mut writable)?;
        }
        for c in 0..self.conns.len() {
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
        // Acknowledging and the window opening may have produced output.
        self.flush_all(&writable)?;
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
        loop {
            let mut all_closed = true;
            let mut failed = None;
            for c in 0..self.conns.len() {
                if let Err(e) = self.flush(c).and_then(|_| self.read_conn(c)) {
                    failed = Some(e);
                    break;
                }
                let c = &mut self.conns[c];
                while c.link.poll_event().is_some() {}
                all_closed &= c.link.is_closed() && !c.wants_write();
            }
            if let Some(e) = failed {
                return Err(e);
            }
            if all_closed {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(P2pError::Other(format!(
                    "IMPI: the other sites did not finish within {timeout:?}"
                )));
            }
            self.source.sleep(0, Duration::from_millis(5));
        }
    }
}

/// Let the C library keep freed memory for the next message instead of giving it back to
/// the kernel after each one.
///
/// Every message crosses the device interface as an owned buffer: the core allocates one
/// per send, the device one per received packet of a long message. With glibc's dynamic
/// thresholds a freed buffer of a MiB ends up trimmed from the top of the heap (or
/// unmapped), and the next one faults its pages in and zeroes them again: measured at more
/// than half of the sender's CPU time when streaming 1 MiB messages across sites. So keep
/// up to 256 MiB freed at the top of the heap and serve allocations up to 32 MiB (glibc's
/// maximum threshold) from the heap. 256, not 64: a window of 16 messages of 4 MiB is
/// 64 MiB in flight on the sender alone, and at a 64 MiB threshold every window was given
/// back and faulted in again (4 MiB streaming bandwidth 853 MB/s against 1,869 MB/s at
/// 256 MiB, bench/impi.sh, same run). The memory stays the process's own, as a
/// registration cache's would. A user's own `MALLOC_TRIM_THRESHOLD_` or
/// `MALLOC_MMAP_THRESHOLD_` (glibc's environment tunables) wins.
fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        if std::env::var_os("MALLOC_TRIM_THRESHOLD_").is_none() {
            // SAFETY: mallopt only sets a glibc tunable; it takes no pointers.
            unsafe { libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20) };
        }
        if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_none() {
            // SAFETY: as above.
            unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20) };
        }
    }
}

/// The device's readiness: one level-triggered epoll set over its sockets (read interest
/// always, write interest only while output waits), and an eventfd for
/// [`EventSource::notify`]. The device asks the set what is ready with a zero timeout; a
/// sleeper waits on the set's descriptor and the eventfd with `poll(2)` (an epoll
/// descriptor is readable while its set has ready events), from any thread.
struct SocketsSource {
    epoll: OwnedFd,
    wake: OwnedFd,
}

/// The epoll entry of the source's eventfd (connections are numbered from 0 up).
const WAKE_ENTRY: usize = usize::MAX;

impl SocketsSource {
    fn new(fds: &[RawFd]) -> Result<SocketsSource, P2pError> {
        // SAFETY: epoll_create1 has no memory arguments; a negative return is checked.
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if ep < 0 {
            return Err(P2pError::last_os("epoll_create1"));
        }
        // SAFETY: `ep` was just returned by epoll_create1 and is owned by nothing else.
        let epoll = unsafe { OwnedFd::from_raw_fd(ep) };
        // SAFETY: eventfd has no memory arguments; a negative return is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(P2pError::last_os("eventfd"));
        }
        let source = SocketsSource {
            epoll,
            // SAFETY: `fd` was just returned by eventfd and is owned by nothing else.
            wake: unsafe { OwnedFd::from_raw_fd(fd) },
        };
        for (i, &fd) in fds.iter().enumerate() {
            source
                .ctl(libc::EPOLL_CTL_ADD, fd, i, false)
                .map_err(|e| P2pError::Other(format!("IMPI: epoll_ctl: {e}")))?;
        }
        // The eventfd joins the set too, so that the set's descriptor alone announces every
        // event: the runtime's event registry waits on it beside the other transports'
        // (`wait_fd`). Its entry carries `WAKE_ENTRY`, which no connection index reaches.
        source
            .ctl(
                libc::EPOLL_CTL_ADD,
                source.wake.as_raw_fd(),
                WAKE_ENTRY,
                false,
            )
            .map_err(|e| P2pError::Other(format!("IMPI: epoll_ctl: {e}")))?;
        Ok(source)
    }

    /// Consume a notification (the eventfd is level-triggered in the set: left unread it
    /// would keep every later wait from sleeping).
    fn drain_wake(&self) {
        let mut v = 0u64;
        // SAFETY: reads 8 bytes into a local u64 from our own non-blocking eventfd; EAGAIN
        // (nothing to consume) is the expected idle answer and needs no handling.
        unsafe {
            libc::read(
                self.wake.as_raw_fd(),
                (&mut v as *mut u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
    }

    fn ctl(&self, op: i32, fd: RawFd, conn: usize, out: bool) -> std::io::Result<()> {
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLRDHUP | if out { libc::EPOLLOUT } else { 0 })
                as u32,
            u64: conn as u64,
        };
        // SAFETY: `ev` is a valid epoll_event for the duration of the call; the kernel
        // copies it. `fd` is a socket the device owns (an invalid one only makes the call
        // fail, which is checked).
        let r = unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), op, fd, &mut ev) };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Watch connection `conn`'s socket for room to write too, or no longer.
    fn watch(&self, fd: RawFd, conn: usize, out: bool) -> std::io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, conn, out)
    }

    /// Stop watching a socket (its peer closed it).
    fn forget(&self, fd: RawFd) -> std::io::Result<()> {
        self.ctl(libc::EPOLL_CTL_DEL, fd, 0, false)
    }

    /// What is ready now (no waiting), into `events`.
    fn ready(&self, events: &mut Vec<libc::epoll_event>) -> Result<(), P2pError> {
        events.clear();
        let cap = events.capacity().max(16);
        events.reserve(cap);
        // SAFETY: `events` has room for `cap` epoll_event structs, which the kernel fills
        // (at most `cap`); `set_len` below covers only the `n` it reported.
        let n =
            unsafe { libc::epoll_wait(self.epoll.as_raw_fd(), events.as_mut_ptr(), cap as i32, 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == ErrorKind::Interrupted {
                return Ok(());
            }
            return Err(P2pError::Other(format!("IMPI: epoll_wait: {e}")));
        }
        // SAFETY: the kernel initialised the first `n <= cap` entries.
        unsafe { events.set_len(n as usize) };
        Ok(())
    }
}

impl EventSource for SocketsSource {
    fn prepare(&self) -> u64 {
        0
    }

    fn sleep(&self, _token: u64, timeout: Duration) {
        let mut pfds = [
            libc::pollfd {
                fd: self.epoll.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.wake.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let ms = timeout.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32;
        // SAFETY: `pfds` is a valid array of two pollfd structs for the duration of the
        // call; both descriptors are owned by this source, which the caller holds.
        unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
        if pfds[1].revents & libc::POLLIN != 0 {
            self.drain_wake();
        }
    }

    fn cancel(&self) {}

    /// The epoll set: readable while a socket has bytes (or room, when output waits) or a
    /// notification is unread.
    fn wait_fd(&self) -> Option<RawFd> {
        Some(self.epoll.as_raw_fd())
    }

    /// Everything the device waits for is a socket or the eventfd, both in the set, and it
    /// keeps no timers: nothing pending goes unannounced.
    fn prepare_wait(&self) -> Duration {
        Duration::MAX
    }

    fn end_wait(&self) {
        self.drain_wake();
    }

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
