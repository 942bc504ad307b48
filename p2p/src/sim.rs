//! A simulated fabric: many endpoints in one process, each with one or more [`Transport`]s,
//! moved by a clock the test controls. Test support for any crate that drives transports
//! (the request layer's protocol tests in `tsunagi-core` use it); nothing in a real job
//! uses it.
//!
//! What it models, and why:
//!
//! * **Per-link delay.** A message sent at step `t` on link (transport, src, dst) becomes
//!   deliverable at `t + delay + jitter` (jitter drawn from a seeded PRNG), never before the
//!   message in front of it on the same link: each transport keeps FIFO order per pair, the
//!   one guarantee a real transport gives. Across transports nothing is ordered, so with
//!   different delays a message on one transport overtakes an earlier one on another
//!   (shared memory vs. TCP to different peers, or a separate control channel).
//! * **Back-pressure.** A link holds at most `capacity` messages that the receiver has not
//!   polled yet; `try_send` then returns `Ok(false)`, as a full shm ring or socket buffer.
//! * **Limits.** Each transport has its own `eager_limit` and `max_payload`; a larger
//!   payload is an error (the caller broke the contract).
//! * **Single copy.** [`SingleCopy::Read`] reads the sender's memory for real: all endpoints
//!   share one address space, and the read goes through `process_vm_readv` on this process
//!   so that a bad address is an `EFAULT` error, not undefined behaviour.
//!   [`SingleCopy::Refuse`] advertises single copy but refuses every read (as CMA does under
//!   ptrace restrictions), to test the caller's fallback. [`SingleCopy::Answered`] reads
//!   as the vendor transport does (`Transport::start_read`): the bytes come only once the
//!   peer that owns them polls that transport.
//! * **Polling.** `poll` delivers ready messages, interleaving the links of different
//!   senders at random (FIFO within each), at most `max_per_poll` per call, never blocking.
//!   Each (endpoint, transport) has a [`LocalDoorbell`] as its event source, rung when a
//!   message for it is sent or becomes ready and when a full link toward it drains.
//!
//! Everything is deterministic for a given seed and sequence of calls: one [`SplitMix64`]
//! generator (public, so tests draw their own workloads from it too). Time moves only by
//! [`Fabric::step`]; a message with delay 0 is deliverable in the step it was sent.
//!
//! [`Fabric::fail`] makes an endpoint die: what was in flight to or from it is lost, and
//! sends to it report [`P2pError::PeerFailed`], as a transport that saw a peer's connection
//! break.
//!
//! [`Fabric::trace`] records every delivery (header, sequence number at send, times), so a
//! test can assert that what it wanted to provoke (an overtaking, a full link, a refused
//! read) did happen.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::futex::LocalDoorbell;
use crate::{EventSource, Header, P2pError, Rank, ReadId, Sink, Transport};

/// SplitMix64 (Steele, Lea, Flood 2014): a tiny, well-known PRNG with a 64-bit state.
/// Deterministic per seed; not for cryptography.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A value in `0..n` (`n > 0`; the slight modulo bias does not matter for tests).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "SplitMix64::below(0)");
        self.next_u64() % n
    }

    /// True with probability `num / den`.
    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.below(den) < num
    }
}

/// Whether a simulated transport offers single-copy reads ([`Transport::read_remote`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SingleCopy {
    /// `single_copy()` is false: rendezvous must stream.
    Off,
    /// `single_copy()` is true and reads copy from the address (this process's memory).
    Read,
    /// `single_copy()` is true but every read fails with `EPERM` (CMA under ptrace
    /// restrictions): the caller must fall back to streaming.
    Refuse,
    /// `single_copy()` is true and a read started with `start_read` ends only after the
    /// peer that owns the memory polls this transport (it copies the bytes then), as over
    /// the vendor, where the peer answers a request with sends; the blocking `read_remote`
    /// copies at once.
    Answered,
}

/// A read of [`SingleCopy::Answered`] started and not yet tested done.
struct AnsweredRead {
    t: usize,
    /// Whose memory it reads: the endpoint whose poll carries it out.
    owner: Rank,
    addr: u64,
    dst: usize,
    len: usize,
    done: bool,
}

/// Delay and capacity of one directed link (transport, src, dst).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkConfig {
    /// Steps between send and the earliest delivery.
    pub delay: u64,
    /// Extra steps drawn uniformly from `0..=jitter` per message (FIFO still holds).
    pub jitter: u64,
    /// Messages the link holds before `try_send` reports it full (at least 1).
    pub capacity: usize,
}

impl Default for LinkConfig {
    /// Delay 1, no jitter, room for 64 messages.
    fn default() -> LinkConfig {
        LinkConfig {
            delay: 1,
            jitter: 0,
            capacity: 64,
        }
    }
}

/// One simulated transport's properties (the same at every endpoint).
#[derive(Clone, Debug)]
pub struct TransportConfig {
    /// Its [`Transport::name`].
    pub name: &'static str,
    /// Its [`Transport::eager_limit`].
    pub eager_limit: usize,
    /// Its [`Transport::max_payload`] (at least `eager_limit`).
    pub max_payload: usize,
    /// Single-copy behaviour.
    pub single_copy: SingleCopy,
    /// The default for every link of this transport ([`Fabric::set_link`] overrides one).
    pub link: LinkConfig,
    /// Messages one `poll` call delivers at most.
    pub max_per_poll: usize,
}

impl TransportConfig {
    /// A transport named `name`: eager limit 1 KiB, payloads up to 4 KiB, no single copy,
    /// default links, unbounded polls.
    pub fn new(name: &'static str) -> TransportConfig {
        TransportConfig {
            name,
            eager_limit: 1024,
            max_payload: 4096,
            single_copy: SingleCopy::Off,
            link: LinkConfig::default(),
            max_per_poll: usize::MAX,
        }
    }

    /// Set the eager limit and maximum payload.
    pub fn limits(mut self, eager_limit: usize, max_payload: usize) -> TransportConfig {
        assert!(max_payload >= eager_limit, "max_payload below eager_limit");
        self.eager_limit = eager_limit;
        self.max_payload = max_payload;
        self
    }

    /// Set the single-copy behaviour.
    pub fn single_copy(mut self, s: SingleCopy) -> TransportConfig {
        self.single_copy = s;
        self
    }

    /// Set every link's delay, jitter and capacity.
    pub fn link(mut self, delay: u64, jitter: u64, capacity: usize) -> TransportConfig {
        assert!(capacity >= 1, "a link must hold at least one message");
        self.link = LinkConfig {
            delay,
            jitter,
            capacity,
        };
        self
    }

    /// Deliver at most `n` messages per poll.
    pub fn max_per_poll(mut self, n: usize) -> TransportConfig {
        assert!(n >= 1);
        self.max_per_poll = n;
        self
    }
}

/// Counters of one simulated transport (all endpoints together).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TransportStats {
    /// Messages accepted by `try_send`.
    pub sent: u64,
    /// Messages handed to a sink.
    pub delivered: u64,
    /// Payload bytes accepted.
    pub bytes: u64,
    /// `try_send` calls that found the link full.
    pub full: u64,
    /// Largest number of messages any link held.
    pub max_depth: usize,
    /// Successful single-copy reads and their bytes.
    pub reads: u64,
    pub read_bytes: u64,
    /// Single-copy reads refused or failed.
    pub reads_failed: u64,
}

/// One delivered message, as [`Fabric::trace`] records it.
#[derive(Clone, Debug)]
pub struct Delivery {
    /// Index of the transport.
    pub transport: usize,
    pub src: Rank,
    pub dst: Rank,
    /// Fabric-wide send order (0, 1, 2, … in `try_send` order).
    pub seq: u64,
    /// Step of the send and of the delivery.
    pub sent_at: u64,
    pub delivered_at: u64,
    pub header: Header,
    pub payload_len: usize,
}

struct InFlight {
    seq: u64,
    sent_at: u64,
    ready_at: u64,
    hdr: Header,
    payload: Vec<u8>,
}

#[derive(Default)]
struct Link {
    cfg: Option<LinkConfig>,
    queue: VecDeque<InFlight>,
    /// Ready time of the last message queued: a later one is never ready earlier (FIFO).
    last_ready: u64,
}

struct State {
    now: u64,
    rng: SplitMix64,
    endpoints: usize,
    configs: Vec<TransportConfig>,
    /// Indexed by `(transport * endpoints + src) * endpoints + dst`.
    links: Vec<Link>,
    next_seq: u64,
    stats: Vec<TransportStats>,
    trace: Option<Vec<Delivery>>,
    failed: Vec<bool>,
    /// [`SingleCopy::Answered`] reads, by id (a slot is None once its read was tested done).
    answered: Vec<Option<AnsweredRead>>,
}

impl State {
    fn link_index(&self, t: usize, src: Rank, dst: Rank) -> usize {
        (t * self.endpoints + src as usize) * self.endpoints + dst as usize
    }
    fn link_cfg(&self, t: usize, i: usize) -> LinkConfig {
        self.links[i].cfg.unwrap_or(self.configs[t].link)
    }
}

/// The simulated fabric: shared by the [`SimTransport`]s it hands out.
#[derive(Clone)]
pub struct Fabric {
    state: Arc<Mutex<State>>,
    /// Event source of each (transport, endpoint): `bells[t][e]`.
    bells: Arc<Vec<Vec<Arc<LocalDoorbell>>>>,
}

impl Fabric {
    /// A fabric of `endpoints` endpoints (world ranks `0..endpoints`), each reachable over
    /// every transport in `transports`, with the PRNG seeded by `seed`.
    pub fn new(endpoints: usize, seed: u64, transports: Vec<TransportConfig>) -> Fabric {
        assert!(endpoints >= 1 && !transports.is_empty());
        for c in &transports {
            assert!(c.max_payload >= c.eager_limit && c.link.capacity >= 1);
        }
        let nt = transports.len();
        let links = (0..nt * endpoints * endpoints)
            .map(|_| Link::default())
            .collect();
        let bells = (0..nt)
            .map(|_| (0..endpoints).map(|_| LocalDoorbell::new()).collect())
            .collect();
        Fabric {
            state: Arc::new(Mutex::new(State {
                now: 0,
                rng: SplitMix64::new(seed),
                endpoints,
                configs: transports,
                links,
                next_seq: 0,
                stats: vec![TransportStats::default(); nt],
                trace: None,
                failed: vec![false; endpoints],
                answered: Vec::new(),
            })),
            bells: Arc::new(bells),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A test that panicked while holding the lock poisons it; the state is still
        // consistent enough for the other tests' diagnostics.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Number of endpoints.
    pub fn endpoints(&self) -> usize {
        self.lock().endpoints
    }

    /// Number of transports per endpoint.
    pub fn transports(&self) -> usize {
        self.lock().configs.len()
    }

    /// Endpoint `me`'s instance of transport `t`: it sends as `me` and polls the links
    /// toward `me`. Hand each out once (two instances would share one inbox).
    pub fn transport(&self, me: Rank, t: usize) -> SimTransport {
        let s = self.lock();
        assert!((me as usize) < s.endpoints && t < s.configs.len());
        SimTransport {
            fabric: self.clone(),
            me,
            t,
            name: s.configs[t].name,
            eager_limit: s.configs[t].eager_limit,
            max_payload: s.configs[t].max_payload,
        }
    }

    /// Override delay, jitter and capacity of the link `src → dst` of transport `t`.
    pub fn set_link(&self, t: usize, src: Rank, dst: Rank, cfg: LinkConfig) {
        assert!(cfg.capacity >= 1);
        let mut s = self.lock();
        let i = s.link_index(t, src, dst);
        s.links[i].cfg = Some(cfg);
    }

    /// Change transport `t`'s single-copy behaviour from now on.
    pub fn set_single_copy(&self, t: usize, mode: SingleCopy) {
        self.lock().configs[t].single_copy = mode;
    }

    /// Endpoint `e` dies: messages in flight to or from it are dropped, later sends to it
    /// fail with [`P2pError::PeerFailed`], and it receives nothing more.
    pub fn fail(&self, e: Rank) {
        let mut s = self.lock();
        s.failed[e as usize] = true;
        let (n, nt) = (s.endpoints, s.configs.len());
        for t in 0..nt {
            for other in 0..n as Rank {
                let (a, b) = (s.link_index(t, e, other), s.link_index(t, other, e));
                s.links[a].queue.clear();
                s.links[b].queue.clear();
            }
        }
    }

    /// The current step.
    pub fn now(&self) -> u64 {
        self.lock().now
    }

    /// Advance the clock one step, and ring the event source of every endpoint that has a
    /// message ready now.
    pub fn step(&self) {
        let mut s = self.lock();
        s.now += 1;
        let now = s.now;
        let n = s.endpoints;
        for t in 0..s.configs.len() {
            for dst in 0..n {
                let ready = (0..n).any(|src| {
                    let i = s.link_index(t, src as Rank, dst as Rank);
                    s.links[i].queue.front().is_some_and(|m| m.ready_at == now)
                });
                if ready {
                    self.bells[t][dst].ring();
                }
            }
        }
    }

    /// Messages sent and not yet delivered, over all links.
    pub fn in_flight(&self) -> usize {
        self.lock().links.iter().map(|l| l.queue.len()).sum()
    }

    /// Counters of transport `t`.
    pub fn stats(&self, t: usize) -> TransportStats {
        self.lock().stats[t].clone()
    }

    /// Start (or stop) recording every delivery.
    pub fn record(&self, on: bool) {
        let mut s = self.lock();
        s.trace = if on { Some(Vec::new()) } else { None };
    }

    /// The deliveries recorded since [`Fabric::record`]`(true)` or the last call, in
    /// delivery order.
    pub fn trace(&self) -> Vec<Delivery> {
        self.lock()
            .trace
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }
}

/// One endpoint's instance of one simulated transport.
pub struct SimTransport {
    fabric: Fabric,
    me: Rank,
    t: usize,
    name: &'static str,
    eager_limit: usize,
    max_payload: usize,
}

impl SimTransport {
    /// The endpoint this instance belongs to.
    pub fn endpoint(&self) -> Rank {
        self.me
    }

    /// The index of this transport in the fabric.
    pub fn index(&self) -> usize {
        self.t
    }
}

impl Transport for SimTransport {
    fn name(&self) -> &'static str {
        self.name
    }

    fn eager_limit(&self) -> usize {
        self.eager_limit
    }

    fn max_payload(&self) -> usize {
        self.max_payload
    }

    fn single_copy(&self, peer: Rank) -> bool {
        let s = self.fabric.lock();
        (peer as usize) < s.endpoints && s.configs[self.t].single_copy != SingleCopy::Off
    }

    fn try_send(&mut self, peer: Rank, hdr: &Header, payload: &[u8]) -> Result<bool, P2pError> {
        let mut s = self.fabric.lock();
        if peer as usize >= s.endpoints {
            return Err(P2pError::Unsupported(format!(
                "{}: rank {peer} is not on the simulated fabric",
                self.name
            )));
        }
        if s.failed[self.me as usize] {
            // A dead endpoint's sends vanish (its driver may still be running in a test).
            return Ok(true);
        }
        if s.failed[peer as usize] {
            return Err(P2pError::PeerFailed {
                peer,
                why: "the simulated endpoint failed".into(),
            });
        }
        if payload.len() > self.max_payload {
            return Err(P2pError::Other(format!(
                "{}: payload of {} bytes exceeds max_payload {}",
                self.name,
                payload.len(),
                self.max_payload
            )));
        }
        let i = s.link_index(self.t, self.me, peer);
        let cfg = s.link_cfg(self.t, i);
        if s.links[i].queue.len() >= cfg.capacity {
            s.stats[self.t].full += 1;
            return Ok(false);
        }
        let jitter = if cfg.jitter > 0 {
            s.rng.below(cfg.jitter + 1)
        } else {
            0
        };
        let now = s.now;
        let seq = s.next_seq;
        s.next_seq += 1;
        let link = &mut s.links[i];
        let ready_at = (now + cfg.delay + jitter).max(link.last_ready);
        link.last_ready = ready_at;
        link.queue.push_back(InFlight {
            seq,
            sent_at: now,
            ready_at,
            hdr: *hdr,
            payload: payload.to_vec(),
        });
        let depth = link.queue.len();
        let st = &mut s.stats[self.t];
        st.sent += 1;
        st.bytes += payload.len() as u64;
        st.max_depth = st.max_depth.max(depth);
        drop(s);
        self.fabric.bells[self.t][peer as usize].ring();
        Ok(true)
    }

    fn poll(&mut self, sink: &mut Sink<'_>) -> Result<usize, P2pError> {
        let mut out = Vec::new();
        let mut drained_full = Vec::new();
        {
            let mut s = self.fabric.lock();
            let s = &mut *s;
            // Answer the reads of our memory (SingleCopy::Answered) first, as the vendor
            // transport's poll answers its peers' memory requests.
            for r in s.answered.iter_mut().flatten() {
                if r.t == self.t && r.owner == self.me && !r.done {
                    // SAFETY: the reader's `start_read` contract keeps dst..dst+len valid
                    // and untouched until it tests the read done, which it cannot before
                    // `done` is set here (under the fabric lock).
                    let dst = unsafe { std::slice::from_raw_parts_mut(r.dst as *mut u8, r.len) };
                    read_own_memory(r.addr, dst)?;
                    r.done = true;
                }
            }
            let now = s.now;
            let limit = if s.failed[self.me as usize] {
                0
            } else {
                s.configs[self.t].max_per_poll
            };
            let mut ready: Vec<(Rank, usize)> = (0..s.endpoints as Rank)
                .map(|src| (src, s.link_index(self.t, src, self.me)))
                .filter(|&(_, i)| s.links[i].queue.front().is_some_and(|m| m.ready_at <= now))
                .collect();
            while out.len() < limit && !ready.is_empty() {
                let k = s.rng.below(ready.len() as u64) as usize;
                let (src, i) = ready[k];
                let cap = s.link_cfg(self.t, i).capacity;
                let link = &mut s.links[i];
                if link.queue.len() >= cap {
                    drained_full.push(src);
                }
                let m = link.queue.pop_front().expect("ready link has a front");
                if link.queue.front().is_none_or(|m| m.ready_at > now) {
                    ready.swap_remove(k);
                }
                if let Some(tr) = s.trace.as_mut() {
                    tr.push(Delivery {
                        transport: self.t,
                        src,
                        dst: self.me,
                        seq: m.seq,
                        sent_at: m.sent_at,
                        delivered_at: now,
                        header: m.hdr,
                        payload_len: m.payload.len(),
                    });
                }
                out.push((src, m));
            }
            s.stats[self.t].delivered += out.len() as u64;
        }
        // The lock is released: a sink may send on this or another simulated transport.
        for src in drained_full {
            self.fabric.bells[self.t][src as usize].ring();
        }
        let n = out.len();
        for (src, m) in out {
            sink(src, &m.hdr, &m.payload);
        }
        Ok(n)
    }

    fn read_remote(
        &mut self,
        peer: Rank,
        remote_addr: u64,
        dst: &mut [u8],
    ) -> Result<(), P2pError> {
        let mode = {
            let s = self.fabric.lock();
            if peer as usize >= s.endpoints {
                return Err(P2pError::Unsupported(format!(
                    "{}: rank {peer} is not on the simulated fabric",
                    self.name
                )));
            }
            s.configs[self.t].single_copy
        };
        let r = match mode {
            SingleCopy::Off => Err(P2pError::Unsupported(format!(
                "{} offers no single copy",
                self.name
            ))),
            SingleCopy::Refuse => Err(P2pError::Os {
                call: "process_vm_readv",
                errno: libc::EPERM,
            }),
            SingleCopy::Read | SingleCopy::Answered => read_own_memory(remote_addr, dst),
        };
        let mut s = self.fabric.lock();
        let st = &mut s.stats[self.t];
        match &r {
            Ok(()) => {
                st.reads += 1;
                st.read_bytes += dst.len() as u64;
            }
            Err(_) => st.reads_failed += 1,
        }
        r
    }

    unsafe fn start_read(
        &mut self,
        peer: Rank,
        remote_addr: u64,
        dst: *mut u8,
        len: usize,
    ) -> Result<ReadId, P2pError> {
        let mut s = self.fabric.lock();
        if (peer as usize) < s.endpoints
            && s.configs[self.t].single_copy == SingleCopy::Answered
            && len > 0
        {
            s.stats[self.t].reads += 1;
            s.stats[self.t].read_bytes += len as u64;
            let read = AnsweredRead {
                t: self.t,
                owner: peer,
                addr: remote_addr,
                dst: dst as usize,
                len,
                done: false,
            };
            s.answered.push(Some(read));
            let id = s.answered.len() - 1;
            drop(s);
            // The owner learns of the request as of a message.
            self.fabric.bells[self.t][peer as usize].ring();
            return Ok(ReadId(id as u64));
        }
        drop(s);
        // SAFETY: the caller's contract, passed on.
        unsafe { crate::read_at_once(self, peer, remote_addr, dst, len) }
    }

    fn test_read(&mut self, id: ReadId) -> Result<bool, P2pError> {
        if id == ReadId::DONE {
            return Ok(true);
        }
        let mut s = self.fabric.lock();
        let Some(slot) = s.answered.get_mut(id.0 as usize) else {
            return Err(P2pError::Other(format!("{}: no read {}", self.name, id.0)));
        };
        match slot {
            Some(r) if r.done => {
                *slot = None;
                Ok(true)
            }
            Some(_) => Ok(false),
            None => Err(P2pError::Other(format!(
                "{}: read {} is over",
                self.name, id.0
            ))),
        }
    }

    fn event_source(&self) -> Arc<dyn EventSource> {
        self.fabric.bells[self.t][self.me as usize].clone()
    }
}

/// Copy `dst.len()` bytes from `addr` in this process into `dst`, through the kernel so
/// that an address that is not mapped gives `EFAULT` instead of a crash.
fn read_own_memory(addr: u64, dst: &mut [u8]) -> Result<(), P2pError> {
    let mut done = 0usize;
    while done < dst.len() {
        let local = libc::iovec {
            iov_base: dst[done..].as_mut_ptr().cast(),
            iov_len: dst.len() - done,
        };
        let remote = libc::iovec {
            iov_base: (addr as usize + done) as *mut libc::c_void,
            iov_len: dst.len() - done,
        };
        // SAFETY: `local` describes the writable slice `dst[done..]`, which we borrow
        // mutably, so the kernel writes only memory we own exclusively. `remote` is only
        // *read*, by the kernel, which checks that it is mapped and readable and fails with
        // EFAULT otherwise; no Rust reference to it is formed, so a bad or stale address
        // from the caller cannot cause undefined behaviour here. Reading our own pid is
        // always permitted (same thread group, no ptrace check applies).
        let r = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
        if r < 0 {
            let e = P2pError::last_os("process_vm_readv");
            if matches!(e, P2pError::Os { errno, .. } if errno == libc::EINTR) {
                continue;
            }
            return Err(e);
        }
        if r == 0 {
            return Err(P2pError::Other("process_vm_readv read nothing".into()));
        }
        done += r as usize;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hdr(tag: i32) -> Header {
        Header {
            tag,
            ..Header::default()
        }
    }

    fn drain(t: &mut SimTransport) -> Vec<(Rank, i32, Vec<u8>)> {
        let mut got = Vec::new();
        t.poll(&mut |src, h, p| got.push((src, h.tag, p.to_vec())))
            .unwrap();
        got
    }

    #[test]
    fn delay_then_delivery_in_fifo_order_per_link() {
        let f = Fabric::new(2, 1, vec![TransportConfig::new("a").link(3, 5, 100)]);
        let mut a = f.transport(0, 0);
        let mut b = f.transport(1, 0);
        for i in 0..20 {
            assert!(a.try_send(1, &hdr(i), &[i as u8]).unwrap());
        }
        assert!(drain(&mut b).is_empty(), "nothing before the delay");
        let mut got = Vec::new();
        for _ in 0..20 {
            f.step();
            got.extend(drain(&mut b));
        }
        let tags: Vec<i32> = got.iter().map(|g| g.1).collect();
        assert_eq!(tags, (0..20).collect::<Vec<_>>());
        assert!(got.iter().all(|g| g.0 == 0 && g.2 == vec![g.1 as u8]));
        assert_eq!(f.in_flight(), 0);
        assert_eq!(f.stats(0).delivered, 20);
    }

    #[test]
    fn transports_overtake_each_other() {
        let f = Fabric::new(
            2,
            2,
            vec![
                TransportConfig::new("slow").link(10, 0, 8),
                TransportConfig::new("fast").link(0, 0, 8),
            ],
        );
        let mut slow = f.transport(0, 0);
        let mut fast = f.transport(0, 1);
        let (mut slow_rx, mut fast_rx) = (f.transport(1, 0), f.transport(1, 1));
        f.record(true);
        assert!(slow.try_send(1, &hdr(1), &[]).unwrap());
        assert!(fast.try_send(1, &hdr(2), &[]).unwrap());
        for _ in 0..12 {
            drain(&mut slow_rx);
            drain(&mut fast_rx);
            f.step();
        }
        let tr = f.trace();
        assert_eq!(tr.len(), 2);
        assert_eq!(
            (tr[0].header.tag, tr[0].seq),
            (2, 1),
            "later send delivered first"
        );
        assert_eq!((tr[1].header.tag, tr[1].delivered_at), (1, 10));
    }

    #[test]
    fn full_link_refuses_until_drained_and_rings_sender() {
        let f = Fabric::new(2, 3, vec![TransportConfig::new("a").link(0, 0, 2)]);
        let mut a = f.transport(0, 0);
        let mut b = f.transport(1, 0);
        let bell = a.event_source();
        assert!(a.try_send(1, &hdr(0), b"x").unwrap());
        assert!(a.try_send(1, &hdr(1), b"y").unwrap());
        let token = bell.prepare();
        assert!(!a.try_send(1, &hdr(2), b"z").unwrap());
        assert_eq!(f.stats(0).full, 1);
        assert_eq!(drain(&mut b).len(), 2);
        // The drain rang the sender: sleep returns at once.
        let t0 = std::time::Instant::now();
        bell.sleep(token, std::time::Duration::from_secs(5));
        assert!(t0.elapsed() < std::time::Duration::from_secs(2));
        assert!(a.try_send(1, &hdr(2), b"z").unwrap());
        assert_eq!(drain(&mut b)[0].1, 2);
    }

    #[test]
    fn event_source_rings_when_a_delayed_message_becomes_ready() {
        let f = Fabric::new(2, 6, vec![TransportConfig::new("a").link(3, 0, 4)]);
        let mut a = f.transport(0, 0);
        let mut b = f.transport(1, 0);
        let bell = b.event_source();
        a.try_send(1, &hdr(1), b"x").unwrap();
        f.step();
        f.step();
        let token = bell.prepare();
        assert!(drain(&mut b).is_empty(), "not ready before its delay");
        // Another thread sleeps; the step that makes the message ready wakes it.
        let sleeper = std::thread::spawn(move || {
            let t0 = std::time::Instant::now();
            bell.sleep(token, std::time::Duration::from_secs(20));
            t0.elapsed()
        });
        std::thread::sleep(std::time::Duration::from_millis(20));
        f.step();
        assert!(sleeper.join().unwrap() < std::time::Duration::from_secs(10));
        assert_eq!(drain(&mut b).len(), 1);
    }

    #[test]
    fn poll_bound_and_interleaving_across_senders() {
        let f = Fabric::new(
            3,
            4,
            vec![TransportConfig::new("a").link(0, 0, 100).max_per_poll(5)],
        );
        let mut s0 = f.transport(0, 0);
        let mut s1 = f.transport(1, 0);
        let mut r = f.transport(2, 0);
        for i in 0..10 {
            s0.try_send(2, &hdr(i), &[]).unwrap();
            s1.try_send(2, &hdr(100 + i), &[]).unwrap();
        }
        let mut all = Vec::new();
        loop {
            let got = drain(&mut r);
            assert!(got.len() <= 5);
            if got.is_empty() {
                break;
            }
            all.extend(got);
        }
        assert_eq!(all.len(), 20);
        for src in [0, 1] {
            let tags: Vec<i32> = all.iter().filter(|g| g.0 == src).map(|g| g.1).collect();
            let base = if src == 0 { 0 } else { 100 };
            assert_eq!(tags, (base..base + 10).collect::<Vec<_>>());
        }
        let first_ten: Vec<Rank> = all[..10].iter().map(|g| g.0).collect();
        assert!(
            first_ten.contains(&0) && first_ten.contains(&1),
            "senders interleave: {first_ten:?}"
        );
    }

    #[test]
    fn single_copy_read_refuse_and_bad_address() {
        let f = Fabric::new(
            2,
            5,
            vec![
                TransportConfig::new("cma").single_copy(SingleCopy::Read),
                TransportConfig::new("nocma").single_copy(SingleCopy::Refuse),
                TransportConfig::new("off"),
            ],
        );
        let src = [7u8, 8, 9, 10];
        let mut dst = [0u8; 4];
        let mut t = f.transport(1, 0);
        assert!(t.single_copy(0));
        t.read_remote(0, src.as_ptr() as u64, &mut dst).unwrap();
        assert_eq!(dst, [7, 8, 9, 10]);
        assert!(
            t.read_remote(0, 8, &mut dst).is_err(),
            "unmapped address: EFAULT"
        );
        let mut r = f.transport(1, 1);
        assert!(r.single_copy(0));
        assert!(r.read_remote(0, src.as_ptr() as u64, &mut dst).is_err());
        assert!(!f.transport(1, 2).single_copy(0));
        assert_eq!((f.stats(0).reads, f.stats(0).reads_failed), (1, 1));
        assert_eq!(f.stats(1).reads_failed, 1);
    }

    #[test]
    fn a_failed_endpoint_loses_its_traffic_and_refuses_sends() {
        let f = Fabric::new(3, 7, vec![TransportConfig::new("a").link(2, 0, 8)]);
        let mut a = f.transport(0, 0);
        let mut b = f.transport(1, 0);
        let mut c = f.transport(2, 0);
        a.try_send(1, &hdr(1), b"to b").unwrap();
        b.try_send(2, &hdr(2), b"from b").unwrap();
        a.try_send(2, &hdr(3), b"a to c").unwrap();
        f.fail(1);
        assert!(matches!(
            a.try_send(1, &hdr(4), &[]),
            Err(P2pError::PeerFailed { peer: 1, .. })
        ));
        assert!(
            b.try_send(2, &hdr(5), &[]).unwrap(),
            "a dead sender's send vanishes"
        );
        f.step();
        f.step();
        f.step();
        assert!(drain(&mut b).is_empty());
        let got = drain(&mut c);
        assert_eq!(got.len(), 1, "only the live pair's message arrives");
        assert_eq!((got[0].0, got[0].1), (0, 3));
        assert_eq!(f.in_flight(), 0);
    }

    #[test]
    fn same_seed_same_schedule() {
        let run = |seed| {
            let f = Fabric::new(3, seed, vec![TransportConfig::new("a").link(1, 6, 100)]);
            let mut tx: Vec<_> = (0..3).map(|e| f.transport(e, 0)).collect();
            f.record(true);
            for i in 0..30u32 {
                let (s, d) = (i % 3, (i + 1) % 3);
                tx[s as usize].try_send(d, &hdr(i as i32), &[]).unwrap();
            }
            for _ in 0..10 {
                f.step();
                for t in tx.iter_mut() {
                    drain(t);
                }
            }
            f.trace().iter().map(|d| d.seq).collect::<Vec<_>>()
        };
        assert_eq!(run(9), run(9));
        assert_eq!(run(9).len(), 30);
        assert_ne!(run(9), run(10));
    }
}
