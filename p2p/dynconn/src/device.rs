//! [`ConnDevice`]: MPI messages to the processes of other worlds, one TCP stream each.
//!
//! One device per process serves every connection made at run time; peers are added
//! through its [`PeerInbox`] (connect/accept hand the streams over, then the core routes
//! the peers' virtual ranks here). Sends are whole messages queued on the peer's stream
//! and written without blocking; a standard send completes at once (its data is owned
//! here), a synchronous one when the receiver's ACK comes back (sent when the core matched
//! the arrival, [`Device::accept`]). Readiness comes from one epoll set over the streams
//! and an eventfd, which is also what a sleeping engine waits on.
//!
//! A stream that ends (the other world finished or disconnected) makes its peer gone:
//! later sends to it fail with a peer failure; nothing is reported while nothing is sent.

use std::collections::{HashMap, VecDeque};
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tsunagi_p2p::device::{DataRep, Device, DeviceCancel, DeviceCaps, DeviceEvent, Envelope};
use tsunagi_p2p::{EventSource, P2pError, Rank};

use crate::wire::{self, Decoder, Frame};

/// Largest message a peer may announce (the decoder refuses more).
const MAX_MESSAGE: u64 = 1 << 40;

/// Streams waiting to join the device: (virtual rank, stream). Shared with the code that
/// makes connections; the device takes them at its next call.
#[derive(Clone, Default)]
pub struct PeerInbox(Arc<Mutex<Vec<(Rank, TcpStream)>>>);

impl PeerInbox {
    /// Hand over the stream to the process the device will know as `rank`.
    pub fn add(&self, rank: Rank, stream: TcpStream) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((rank, stream));
    }

    fn take(&self) -> Vec<(Rank, TcpStream)> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn is_empty(&self) -> bool {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).is_empty()
    }
}

struct Peer {
    stream: TcpStream,
    /// Frames to write, the first one partly written up to `out_off`.
    out: VecDeque<Vec<u8>>,
    out_off: usize,
    decoder: Decoder,
    /// The stream ended (or failed): why.
    gone: Option<String>,
}

/// The epoll set and eventfd the device and its sleepers share.
struct Waker {
    epoll: OwnedFd,
    event: OwnedFd,
}

impl Waker {
    fn new() -> Result<Waker, P2pError> {
        // SAFETY: plain system calls; each result is checked before it becomes an OwnedFd.
        let epoll = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if epoll < 0 {
            return Err(P2pError::last_os("epoll_create1"));
        }
        // SAFETY: `epoll` is a descriptor we just created and own.
        let epoll = unsafe { OwnedFd::from_raw_fd(epoll) };
        // SAFETY: as above.
        let event = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if event < 0 {
            return Err(P2pError::last_os("eventfd"));
        }
        // SAFETY: `event` is a descriptor we just created and own.
        let event = unsafe { OwnedFd::from_raw_fd(event) };
        let w = Waker { epoll, event };
        w.watch(w.event.as_raw_fd(), u64::MAX)?;
        Ok(w)
    }

    fn watch(&self, fd: RawFd, key: u64) -> Result<(), P2pError> {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: key,
        };
        // SAFETY: both descriptors are open; `ev` is a valid epoll_event.
        let rc =
            unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) };
        if rc < 0 {
            return Err(P2pError::last_os("epoll_ctl"));
        }
        Ok(())
    }

    fn unwatch(&self, fd: RawFd) {
        // SAFETY: both descriptors are open; a NULL event is allowed for EPOLL_CTL_DEL.
        unsafe {
            libc::epoll_ctl(
                self.epoll.as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                fd,
                std::ptr::null_mut(),
            )
        };
    }

    /// Keys of the ready descriptors, waiting at most `timeout_ms` (0: not at all).
    fn ready(&self, timeout_ms: i32, keys: &mut Vec<u64>) {
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 32];
        // SAFETY: `evs` has room for the 32 events we allow.
        let n =
            unsafe { libc::epoll_wait(self.epoll.as_raw_fd(), evs.as_mut_ptr(), 32, timeout_ms) };
        for ev in evs.iter().take(n.max(0) as usize) {
            keys.push(ev.u64);
        }
    }

    fn drain_event(&self) {
        let mut v = 0u64;
        // SAFETY: reads 8 bytes into `v` from our non-blocking eventfd.
        unsafe { libc::read(self.event.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    }
}

impl EventSource for Waker {
    fn prepare(&self) -> u64 {
        0
    }
    fn sleep(&self, _token: u64, timeout: Duration) {
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        let mut keys = Vec::new();
        self.ready(ms, &mut keys);
        if keys.contains(&u64::MAX) {
            self.drain_event();
        }
    }
    fn cancel(&self) {}
    fn notify(&self) {
        let one = 1u64;
        // SAFETY: writes 8 bytes from `one` to our eventfd.
        unsafe { libc::write(self.event.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }
    fn wait_fd(&self) -> Option<RawFd> {
        Some(self.epoll.as_raw_fd())
    }
}

/// The connection device (see the module doc).
pub struct ConnDevice {
    peers: HashMap<Rank, Peer>,
    inbox: PeerInbox,
    waker: Arc<Waker>,
    events: VecDeque<DeviceEvent>,
    /// Synchronous arrivals not accepted yet: arrival id -> (peer, sender's token).
    sync_arrivals: HashMap<u64, (Rank, u64)>,
    next_arrival: u64,
    keys: Vec<u64>,
    buf: Vec<u8>,
}

impl ConnDevice {
    /// A device with no peers; streams come through the returned inbox.
    pub fn new() -> Result<(ConnDevice, PeerInbox), P2pError> {
        let inbox = PeerInbox::default();
        let d = ConnDevice {
            peers: HashMap::new(),
            inbox: inbox.clone(),
            waker: Arc::new(Waker::new()?),
            events: VecDeque::new(),
            sync_arrivals: HashMap::new(),
            next_arrival: 0,
            keys: Vec::new(),
            buf: vec![0u8; 256 << 10],
        };
        Ok((d, inbox))
    }

    fn take_inbox(&mut self) -> Result<(), P2pError> {
        if self.inbox.is_empty() {
            return Ok(());
        }
        for (rank, stream) in self.inbox.take() {
            stream
                .set_nonblocking(true)
                .map_err(|e| P2pError::Other(format!("dynamic connection: {e}")))?;
            let _ = stream.set_nodelay(true);
            self.waker.watch(stream.as_raw_fd(), rank as u64)?;
            if let Some(old) = self.peers.insert(
                rank,
                Peer {
                    stream,
                    out: VecDeque::new(),
                    out_off: 0,
                    decoder: Decoder::new(MAX_MESSAGE),
                    gone: None,
                },
            ) {
                self.waker.unwatch(old.stream.as_raw_fd());
            }
        }
        Ok(())
    }

    fn queue(&mut self, rank: Rank, frame: Vec<u8>) -> Result<(), P2pError> {
        let p = self
            .peers
            .get_mut(&rank)
            .ok_or_else(|| P2pError::PeerFailed {
                peer: rank,
                why: "no connection to this process of another world".into(),
            })?;
        if let Some(why) = &p.gone {
            return Err(P2pError::PeerFailed {
                peer: rank,
                why: why.clone(),
            });
        }
        p.out.push_back(frame);
        write_out(p);
        Ok(())
    }

    /// Read what `rank`'s stream has, turning frames into events.
    fn read_peer(&mut self, rank: Rank) -> usize {
        let Some(p) = self.peers.get_mut(&rank) else {
            return 0;
        };
        let mut n = 0;
        while p.gone.is_none() {
            match p.stream.read(&mut self.buf) {
                Ok(0) => {
                    p.gone = Some(if p.decoder.idle() {
                        "the other world closed the connection".into()
                    } else {
                        "the connection ended inside a message".into()
                    });
                    self.waker.unwatch(p.stream.as_raw_fd());
                }
                Ok(k) => {
                    let events = &mut self.events;
                    let sync_arrivals = &mut self.sync_arrivals;
                    let next = &mut self.next_arrival;
                    let me = &mut n;
                    let r = p.decoder.feed(&self.buf[..k], &mut |f| {
                        *me += 1;
                        match f {
                            Frame::Ack { token } => {
                                events.push_back(DeviceEvent::SendComplete { token })
                            }
                            Frame::Msg {
                                tag,
                                context,
                                sync,
                                token,
                                data,
                            } => {
                                let id = *next;
                                *next += 1;
                                if sync {
                                    sync_arrivals.insert(id, (rank, token));
                                }
                                events.push_back(DeviceEvent::Arrived {
                                    id,
                                    env: Envelope {
                                        src: rank,
                                        dst: 0,
                                        tag,
                                        context,
                                        len: data.len() as u64,
                                    },
                                    sync,
                                    data,
                                    complete: true,
                                });
                            }
                        }
                    });
                    if let Err(e) = r {
                        p.gone = Some(e.to_string());
                        self.waker.unwatch(p.stream.as_raw_fd());
                        let _ = p.stream.shutdown(Shutdown::Both);
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    p.gone = Some(format!("connection failed: {e}"));
                    self.waker.unwatch(p.stream.as_raw_fd());
                }
            }
        }
        n
    }
}

/// Write as much of `p`'s queue as the socket takes.
fn write_out(p: &mut Peer) {
    while let Some(f) = p.out.front() {
        match p.stream.write(&f[p.out_off..]) {
            Ok(k) => {
                p.out_off += k;
                if p.out_off == f.len() {
                    p.out.pop_front();
                    p.out_off = 0;
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => {
                p.gone = Some(format!("connection failed: {e}"));
                p.out.clear();
                break;
            }
        }
    }
}

impl Device for ConnDevice {
    fn name(&self) -> &'static str {
        "dynconn"
    }

    fn caps(&self) -> DeviceCaps {
        DeviceCaps {
            data_rep: DataRep::Native,
            tag_ub: i32::MAX,
            // The device joins after start-up, so the engines' event registry and sleeping
            // turns do not know its descriptor: a deadline bounds their sleeps instead.
            timers: true,
        }
    }

    fn send(
        &mut self,
        env: Envelope,
        sync: bool,
        data: Vec<u8>,
        token: u64,
    ) -> Result<(), P2pError> {
        self.take_inbox()?;
        let mut frame = Vec::with_capacity(wire::HEADER + data.len());
        frame.extend_from_slice(&wire::msg_header(
            env.tag,
            env.context,
            sync,
            token,
            data.len() as u64,
        ));
        frame.extend_from_slice(&data);
        self.queue(env.dst, frame)?;
        if !sync {
            self.events.push_back(DeviceEvent::SendComplete { token });
            self.waker.notify();
        }
        Ok(())
    }

    fn accept(&mut self, id: u64) -> Result<(), P2pError> {
        if let Some((rank, token)) = self.sync_arrivals.remove(&id) {
            self.queue(rank, wire::ack(token).to_vec())?;
        }
        Ok(())
    }

    fn cancel_send(&mut self, _token: u64) -> Result<DeviceCancel, P2pError> {
        // The whole message is on its way at once: too late.
        Ok(DeviceCancel::NotCancelled)
    }

    fn poll(&mut self, sink: &mut dyn FnMut(DeviceEvent)) -> Result<usize, P2pError> {
        self.take_inbox()?;
        let mut keys = std::mem::take(&mut self.keys);
        keys.clear();
        self.waker.ready(0, &mut keys);
        for &k in &keys {
            if k == u64::MAX {
                self.waker.drain_event();
            } else {
                self.read_peer(k as Rank);
            }
        }
        self.keys = keys;
        for p in self.peers.values_mut() {
            if !p.out.is_empty() {
                write_out(p);
            }
        }
        let n = self.events.len();
        for ev in self.events.drain(..) {
            sink(ev);
        }
        Ok(n)
    }

    fn event_source(&self) -> Arc<dyn EventSource> {
        self.waker.clone()
    }

    fn next_deadline(&self) -> Option<Instant> {
        if self.peers.is_empty() && self.inbox.is_empty() {
            None
        } else {
            Some(Instant::now() + Duration::from_micros(500))
        }
    }

    fn finish(&mut self, timeout: Duration) -> Result<(), P2pError> {
        // Write what is queued (the other world may still want it), then close. Nothing
        // waits for the other world: it finishes on its own (MPI_Comm_disconnect).
        let _ = self.take_inbox();
        let end = Instant::now() + timeout;
        loop {
            let mut waiting = false;
            for p in self.peers.values_mut() {
                if p.gone.is_none() && !p.out.is_empty() {
                    write_out(p);
                    waiting |= !p.out.is_empty();
                }
            }
            if !waiting || Instant::now() >= end {
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        for (_, p) in self.peers.drain() {
            let _ = p.stream.shutdown(Shutdown::Write);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (a, b)
    }

    fn poll_until(d: &mut ConnDevice, want: usize) -> Vec<DeviceEvent> {
        let mut evs = Vec::new();
        let end = Instant::now() + Duration::from_secs(10);
        while evs.len() < want {
            assert!(Instant::now() < end, "timed out with {evs:?}");
            d.poll(&mut |e| evs.push(e)).unwrap();
        }
        evs
    }

    #[test]
    fn messages_and_synchronous_acknowledgements_cross_a_connection() {
        let (a, b) = pair();
        let (mut da, ia) = ConnDevice::new().unwrap();
        let (mut db, ib) = ConnDevice::new().unwrap();
        ia.add(10, a);
        ib.add(20, b);
        let env = |dst, len| Envelope {
            src: 0,
            dst,
            tag: 5,
            context: 8,
            len,
        };
        // A standard send completes at once; a large one crosses in pieces.
        let big: Vec<u8> = (0..3_000_000u32).map(|i| i as u8).collect();
        da.send(env(10, 3), false, vec![1, 2, 3], 1).unwrap();
        da.send(env(10, big.len() as u64), false, big.clone(), 2)
            .unwrap();
        da.send(env(10, 0), true, vec![], 3).unwrap();
        let evs = poll_until(&mut da, 2);
        assert_eq!(
            evs,
            vec![
                DeviceEvent::SendComplete { token: 1 },
                DeviceEvent::SendComplete { token: 2 }
            ]
        );
        let mut got = Vec::new();
        let end = Instant::now() + Duration::from_secs(20);
        while got.len() < 3 {
            assert!(Instant::now() < end);
            da.poll(&mut |_| {}).unwrap();
            db.poll(&mut |e| got.push(e)).unwrap();
        }
        match &got[0] {
            DeviceEvent::Arrived {
                env,
                data,
                complete: true,
                sync: false,
                ..
            } => {
                assert_eq!((env.src, env.tag, env.context), (20, 5, 8));
                assert_eq!(data, &[1, 2, 3]);
            }
            e => panic!("{e:?}"),
        }
        match &got[1] {
            DeviceEvent::Arrived { data, .. } => assert!(data == &big),
            e => panic!("{e:?}"),
        }
        let DeviceEvent::Arrived { id, sync: true, .. } = got[2] else {
            panic!("{:?}", got[2])
        };
        // The synchronous send completes only once the receiver accepted it.
        for _ in 0..50 {
            db.poll(&mut |_| {}).unwrap();
            assert!(poll_nothing(&mut da));
        }
        db.accept(id).unwrap();
        assert_eq!(
            poll_until(&mut da, 1),
            vec![DeviceEvent::SendComplete { token: 3 }]
        );
    }

    fn poll_nothing(d: &mut ConnDevice) -> bool {
        let mut n = 0;
        d.poll(&mut |_| n += 1).unwrap();
        n == 0
    }

    #[test]
    fn a_closed_connection_fails_later_sends_and_garbage_is_refused() {
        let (a, b) = pair();
        let (mut da, ia) = ConnDevice::new().unwrap();
        ia.add(1, a);
        drop(b);
        let end = Instant::now() + Duration::from_secs(10);
        let env = Envelope {
            src: 0,
            dst: 1,
            tag: 0,
            context: 0,
            len: 1,
        };
        loop {
            da.poll(&mut |_| {}).unwrap();
            if da.send(env, false, vec![0], 7).is_err() {
                break;
            }
            assert!(
                Instant::now() < end,
                "sends to a closed peer kept succeeding"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        // A peer that sends garbage is cut off, without a panic.
        let (a, mut b) = pair();
        let (mut da, ia) = ConnDevice::new().unwrap();
        ia.add(2, a);
        b.write_all(&[9u8; 64]).unwrap();
        let end = Instant::now() + Duration::from_secs(10);
        let env = Envelope {
            src: 0,
            dst: 2,
            tag: 0,
            context: 0,
            len: 0,
        };
        loop {
            da.poll(&mut |_| {}).unwrap();
            if da.send(env, false, vec![], 1).is_err() {
                break;
            }
            assert!(Instant::now() < end);
            std::thread::sleep(Duration::from_millis(5));
        }
        // Sends to a rank never connected fail with a clear error.
        assert!(matches!(
            da.send(Envelope { dst: 99, ..env }, false, vec![], 2),
            Err(P2pError::PeerFailed { peer: 99, .. })
        ));
    }
}
