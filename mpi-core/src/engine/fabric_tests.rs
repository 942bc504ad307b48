//! The protocol core alone on an in-memory fabric: no `Engine`, no `Router`, no
//! transports, no threads. Each rank is a [`Core`]; the test's own small driver feeds it
//! events (arrivals, read outcomes, a full link) and carries out its actions
//! ([`Core::poll_action`], [`Core::stream_chunk`], [`Core::parked`]) over [`Wires`]: per
//! pair and wire a delay and jitter in steps and a capacity in messages (a full link
//! refuses, and the core must park and keep order), FIFO per (wire, source,
//! destination) and nothing else, so messages on different wires overtake each other.
//! Single-copy reads are copies inside this process (every rank lives here), or refused.
//! Everything is seeded and deterministic.
//!
//! The driver checks the core against each wire's limits (an EAGER within the eager limit,
//! DATA within the maximum payload), and every step that no core recorded a fault.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use tsunagi_p2p::sim::SplitMix64;

use super::send::SendBody;
use super::*;
use crate::comm::{CommData, ErrHandler};
use crate::group::Group;

const TRUNCATE: i32 = ErrorClass::Truncate as i32;
/// Steps a test waits for a completion before it calls the job stuck.
const STEP_LIMIT: u64 = 20_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SingleCopy {
    /// The wire offers single copy and reads succeed.
    Read,
    /// The wire offers single copy but every read fails (the CTS/DATA fallback).
    Refuse,
    /// No single copy: rendezvous is RTS, CTS, DATA.
    Off,
}

#[derive(Clone, Copy, Debug)]
struct Wire {
    eager: usize,
    max_payload: usize,
    single_copy: SingleCopy,
    delay: u64,
    jitter: u64,
    capacity: usize,
}

impl Wire {
    fn new(eager: usize, max_payload: usize, single_copy: SingleCopy) -> Wire {
        Wire {
            eager,
            max_payload,
            single_copy,
            delay: 1,
            jitter: 0,
            capacity: 64,
        }
    }

    fn link(mut self, delay: u64, jitter: u64, capacity: usize) -> Wire {
        self.delay = delay;
        self.jitter = jitter;
        self.capacity = capacity;
        self
    }
}

/// One message delivered: when, over which wire, from and to whom, what.
#[derive(Clone, Copy, Debug)]
struct Delivery {
    /// The step it was sent in.
    sent: u64,
    wire: usize,
    src: Rank,
    dst: Rank,
    hdr: Header,
}

struct InFlight {
    sent: u64,
    due: u64,
    hdr: Header,
    payload: Vec<u8>,
}

/// The fabric: wires between every pair of ranks.
struct Wires {
    now: u64,
    rng: SplitMix64,
    wires: Vec<Wire>,
    /// The wire that carries a pair's envelopes (EAGER, RTS).
    route: Box<dyn Fn(Rank, Rank) -> usize>,
    /// Wires that carry control messages and DATA, round robin (None: the route's).
    control: Option<Vec<usize>>,
    next_control: usize,
    links: BTreeMap<(Rank, usize, Rank), VecDeque<InFlight>>,
    log: Vec<Delivery>,
    /// Messages a full link refused.
    refused: usize,
}

impl Wires {
    fn new(seed: u64, wires: Vec<Wire>, route: impl Fn(Rank, Rank) -> usize + 'static) -> Wires {
        Wires {
            now: 0,
            rng: SplitMix64::new(seed),
            wires,
            route: Box::new(route),
            control: None,
            next_control: 0,
            links: BTreeMap::new(),
            log: Vec::new(),
            refused: 0,
        }
    }

    fn envelope_wire(&self, src: Rank, dst: Rank) -> Wire {
        self.wires[(self.route)(src, dst)]
    }

    /// The largest DATA chunk any wire between the pair takes.
    fn max_payload(&self, src: Rank, dst: Rank) -> usize {
        match &self.control {
            Some(c) => c.iter().map(|&w| self.wires[w].max_payload).min().unwrap(),
            None => self.envelope_wire(src, dst).max_payload,
        }
    }

    fn try_send(&mut self, src: Rank, dst: Rank, hdr: &Header, payload: &[u8]) -> bool {
        let envelope = hdr.kind == EAGER || hdr.kind == RTS;
        let w = match &self.control {
            Some(c) if !envelope => c[self.next_control % c.len()],
            _ => (self.route)(src, dst),
        };
        let wire = self.wires[w];
        match hdr.kind {
            EAGER => assert!(payload.len() <= wire.eager, "EAGER past the eager limit"),
            DATA => assert!(payload.len() <= wire.max_payload, "DATA past max payload"),
            RTS => assert!(payload.len() <= 8, "an RTS carries at most an address"),
            _ => assert!(payload.is_empty(), "control messages carry nothing"),
        }
        let link = self.links.entry((dst, w, src)).or_default();
        if link.len() >= wire.capacity {
            self.refused += 1;
            return false;
        }
        let jitter = if wire.jitter > 0 {
            self.rng.below(wire.jitter + 1)
        } else {
            0
        };
        // FIFO per link: never before the message ahead of it.
        let due = (self.now + wire.delay + jitter).max(link.back().map_or(0, |m| m.due));
        link.push_back(InFlight {
            sent: self.now,
            due,
            hdr: *hdr,
            payload: payload.to_vec(),
        });
        if !envelope && self.control.is_some() {
            self.next_control += 1;
        }
        true
    }

    /// Messages due at `dst` now, oldest first (ties: by wire, then source).
    fn due(&mut self, dst: Rank) -> Vec<(Rank, Header, Vec<u8>)> {
        let now = self.now;
        let mut out: Vec<(u64, usize, Rank, u64, Header, Vec<u8>)> = Vec::new();
        for (&(d, w, src), link) in self
            .links
            .range_mut((dst, 0, 0)..=(dst, usize::MAX, Rank::MAX))
        {
            debug_assert_eq!(d, dst);
            while link.front().is_some_and(|m| m.due <= now) {
                let m = link.pop_front().unwrap();
                out.push((m.due, w, src, m.sent, m.hdr, m.payload));
            }
        }
        out.sort_by_key(|m| (m.0, m.1, m.2));
        out.into_iter()
            .map(|(_, w, src, sent, hdr, p)| {
                self.log.push(Delivery {
                    sent,
                    wire: w,
                    src,
                    dst,
                    hdr,
                });
                (src, hdr, p)
            })
            .collect()
    }

    fn in_flight(&self) -> usize {
        self.links.values().map(|l| l.len()).sum()
    }
}

fn byte() -> TypeRef {
    Datatype::builtin(Builtin::Byte)
}

/// Bytes that depend on a message id and the position in the message.
fn fill(id: u64, len: usize) -> Vec<u8> {
    let mut rng = SplitMix64::new(id.wrapping_mul(0x9e37_79b9) ^ 0x5eed);
    (0..len).map(|_| rng.next_u64() as u8).collect()
}

/// `n` cores with WORLD (context 0) on one fabric, and the test's driver.
struct Job {
    net: Wires,
    cores: Vec<Core>,
    staging: Vec<u8>,
}

impl Job {
    fn new(n: usize, net: Wires) -> Job {
        let cores = (0..n as Rank)
            .map(|me| {
                let mut c = Core::new(me, n, Vec::new());
                c.comms.insert(CommData {
                    group: Arc::new(Group::new((0..n as u32).collect())),
                    rank: me as usize,
                    context: 0,
                    name: "WORLD".into(),
                    errhandler: ErrHandler::Return,
                    attrs: Default::default(),
                    nodes: Arc::new(vec![0; n]),
                    inter: None,
                });
                c
            })
            .collect();
        Job {
            net,
            cores,
            staging: Vec::new(),
        }
    }

    /// Event: the program starts a send of `data` (kept alive by the caller until done).
    fn isend_mode(&mut self, from: Rank, to: Rank, tag: i32, data: &[u8], mode: SendMode) -> ReqId {
        let wire = self.net.envelope_wire(from, to);
        let core = &mut self.cores[from as usize];
        let buf = Buf(data.as_ptr() as *mut u8);
        let id = core.new_request(
            Some(mode),
            buf,
            data.len(),
            byte(),
            CommId::WORLD,
            to as i32,
            tag,
            0,
            false,
        );
        assert_eq!(core.activate(id).unwrap(), Op::Send(mode));
        core.start_send(id, mode, to, wire.eager, || {
            wire.single_copy != SingleCopy::Off
        });
        self.drive(from);
        id
    }

    fn isend(&mut self, from: Rank, to: Rank, tag: i32, data: &[u8]) -> ReqId {
        self.isend_mode(from, to, tag, data, SendMode::Standard)
    }

    /// Event: the program posts a receive into `buf` of `dtype` elements.
    fn irecv_typed(
        &mut self,
        at: Rank,
        src: i32,
        tag: i32,
        buf: *mut u8,
        count: usize,
        dtype: TypeRef,
    ) -> ReqId {
        let core = &mut self.cores[at as usize];
        let id = core.new_request(
            None,
            Buf(buf),
            count,
            dtype,
            CommId::WORLD,
            src,
            tag,
            0,
            false,
        );
        assert_eq!(core.activate(id).unwrap(), Op::Recv);
        core.start_recv(id);
        self.drive(at);
        id
    }

    fn irecv(&mut self, at: Rank, src: i32, tag: i32, buf: &mut [u8]) -> ReqId {
        self.irecv_typed(at, src, tag, buf.as_mut_ptr(), buf.len(), byte())
    }

    /// Carry out everything rank `me`'s core asks: parked messages first (order), then
    /// its actions, then the DATA of streaming sends, while the wires take them.
    fn drive(&mut self, me: Rank) {
        let Job {
            net,
            cores,
            staging,
        } = self;
        let core = &mut cores[me as usize];
        for peer in 0..core.pending.len() as Rank {
            while let Some((hdr, payload)) = core.parked(peer) {
                if !net.try_send(me, peer, hdr, payload) {
                    break;
                }
                core.unpark(peer);
            }
        }
        while let Some(action) = core.poll_action() {
            match action {
                Action::Send(a) => {
                    let peer = a.peer;
                    match a.body {
                        SendBody::Data { .. } => {
                            let id = ReqId(a.hdr.cookie as u32);
                            let sent = !core.is_blocked(peer) && {
                                let data = core.send_bytes(id, 0, a.hdr.len as usize);
                                net.try_send(me, peer, &a.hdr, data)
                            };
                            if !sent {
                                core.park_send(peer, a.hdr);
                            }
                        }
                        SendBody::Empty => transmit(net, core, me, peer, a.hdr, &[]),
                        SendBody::Expose { addr } => {
                            // The address is this process's: announced as it is.
                            let (hdr, payload) = a.offer(addr);
                            transmit(net, core, me, peer, hdr, &payload);
                        }
                    }
                    core.send_carried(&a);
                }
                Action::Control { peer, hdr } => transmit(net, core, me, peer, hdr, &[]),
                Action::Read(r) => {
                    let (into, take) = core.read_target(&r);
                    if net.envelope_wire(me, r.peer()).single_copy != SingleCopy::Read {
                        core.read_finished(r, ReadOutcome::Refused);
                        continue;
                    }
                    let src = r.addr() as *const u8;
                    match into {
                        ReadInto::Direct(dst) => {
                            // SAFETY: `src` is the sender's buffer (or its packed copy) in
                            // this process, which stays alive and untouched until the
                            // sender hears FIN, sent only after this read; `dst` is
                            // `take` writable bytes of the receive buffer (read_target),
                            // a different allocation.
                            unsafe { std::ptr::copy_nonoverlapping(src, dst, take) };
                            core.read_finished(r, ReadOutcome::Done);
                        }
                        ReadInto::Staged => {
                            staging.resize(take, 0);
                            // SAFETY: as above; `staging` holds `take` bytes.
                            unsafe {
                                std::ptr::copy_nonoverlapping(src, staging.as_mut_ptr(), take)
                            };
                            core.read_finished(r, ReadOutcome::Staged(&staging[..take]));
                        }
                    }
                }
            }
        }
        let mut i = 0;
        while i < core.stream_count() {
            let peer = core.stream_peer(i);
            let max = net.max_payload(me, peer);
            loop {
                let Some((hdr, data)) = core.stream_chunk(i, max) else {
                    core.end_stream(i);
                    break;
                };
                let n = data.len();
                if !net.try_send(me, peer, &hdr, data) {
                    i += 1;
                    break;
                }
                core.chunk_sent(i, n);
            }
        }
        assert!(core.fault.is_none(), "rank {me}: {:?}", core.fault);
    }

    /// Every rank takes what is due and carries out what that asks; then the clock moves.
    fn step(&mut self) {
        for me in 0..self.cores.len() as Rank {
            for (src, hdr, payload) in self.net.due(me) {
                self.cores[me as usize].on_arrival(src, &hdr, &payload);
            }
            self.drive(me);
        }
        self.net.now += 1;
    }

    fn test(&mut self, at: Rank, id: ReqId) -> Option<Status> {
        self.cores[at as usize].test(id).expect("a live request")
    }

    fn wait(&mut self, at: Rank, id: ReqId) -> Status {
        for _ in 0..STEP_LIMIT {
            if let Some(st) = self.test(at, id) {
                return st;
            }
            self.step();
        }
        panic!(
            "request {} of rank {at} did not complete in {STEP_LIMIT} steps",
            id.0
        );
    }

    /// Step until nothing is in flight, parked or streaming anywhere.
    fn settle(&mut self) {
        for _ in 0..STEP_LIMIT {
            self.step();
            if self.net.in_flight() == 0 && self.cores.iter().all(|c| !c.has_outgoing()) {
                return;
            }
        }
        panic!("the job did not settle in {STEP_LIMIT} steps");
    }

    fn kinds(&self, src: Rank, dst: Rank) -> Vec<u8> {
        self.net
            .log
            .iter()
            .filter(|d| d.src == src && d.dst == dst)
            .map(|d| d.hdr.kind)
            .collect()
    }
}

/// Send a message with no payload of the core's: now if nothing waits for the peer and
/// the wire has room, else parked (the "transport full" event).
fn transmit(net: &mut Wires, core: &mut Core, me: Rank, peer: Rank, hdr: Header, payload: &[u8]) {
    if core.is_blocked(peer) || !net.try_send(me, peer, &hdr, payload) {
        core.park(peer, hdr, payload);
    }
}

/// Two ranks over one wire (delay 1, room for 64).
fn pair(eager: usize, max: usize, sc: SingleCopy) -> Job {
    Job::new(2, Wires::new(1, vec![Wire::new(eager, max, sc)], |_, _| 0))
}

#[test]
fn every_size_arrives_eager_streamed_or_single_copy() {
    for sc in [SingleCopy::Off, SingleCopy::Read, SingleCopy::Refuse] {
        let mut job = pair(64, 100, sc);
        for (i, len) in [0usize, 1, 64, 65, 100, 101, 1003].into_iter().enumerate() {
            let data = fill(i as u64, len);
            let mut buf = vec![0u8; len];
            let r = job.irecv(1, 0, i as i32, &mut buf);
            let s = job.isend(0, 1, i as i32, &data);
            let st = job.wait(1, r);
            assert_eq!(
                (st.source, st.tag, st.bytes, st.error),
                (0, i as i32, len, 0)
            );
            assert_eq!(buf, data, "{sc:?}, {len} bytes");
            let st = job.wait(0, s);
            assert_eq!((st.bytes, st.cancelled), (len, false));
        }
        job.settle();
        let kinds = job.kinds(0, 1);
        let count = |k| kinds.iter().filter(|&&x| x == k).count();
        assert_eq!(count(EAGER), 3);
        assert_eq!(count(RTS), 4);
        // Single copy answers FIN after the read; refused or not offered, CTS and DATA.
        let (fin, cts) = (
            job.kinds(1, 0).iter().filter(|&&k| k == FIN).count(),
            job.kinds(1, 0).iter().filter(|&&k| k == CTS).count(),
        );
        match sc {
            SingleCopy::Read => assert_eq!((fin, cts, count(DATA)), (4, 0, 0)),
            // 65 and 100 bytes: one chunk each; 101: two; 1003: eleven.
            SingleCopy::Off | SingleCopy::Refuse => {
                assert_eq!((fin, cts, count(DATA)), (0, 4, 1 + 1 + 2 + 11))
            }
        }
    }
}

#[test]
fn synchronous_sends_complete_only_after_the_match() {
    for len in [8usize, 300] {
        let mut job = pair(64, 64, SingleCopy::Off);
        let data = fill(7, len);
        let s = job.isend_mode(0, 1, 5, &data, SendMode::Synchronous);
        for _ in 0..50 {
            job.step();
        }
        assert!(
            job.test(0, s).is_none(),
            "{len} bytes: completed before any receive"
        );
        let mut buf = vec![0u8; len];
        let r = job.irecv(1, 0, 5, &mut buf);
        assert_eq!(job.wait(1, r).bytes, len);
        assert_eq!(job.wait(0, s).bytes, len);
        assert_eq!(buf, data);
        if len <= 64 {
            assert!(job.kinds(1, 0).contains(&SYNC_ACK));
        }
    }
}

#[test]
fn truncation_reports_err_truncate_and_keeps_the_prefix() {
    // Eager, streamed, single copy, refused single copy; posted first or unexpected.
    for sc in [SingleCopy::Off, SingleCopy::Read, SingleCopy::Refuse] {
        for len in [40usize, 500] {
            for posted_first in [true, false] {
                let mut job = pair(64, 64, sc);
                let data = fill(len as u64, len);
                let mut buf = vec![0u8; 30];
                let (r, s);
                if posted_first {
                    r = job.irecv(1, 0, 1, &mut buf);
                    s = job.isend(0, 1, 1, &data);
                } else {
                    s = job.isend(0, 1, 1, &data);
                    for _ in 0..5 {
                        job.step();
                    }
                    r = job.irecv(1, 0, 1, &mut buf);
                }
                let st = job.wait(1, r);
                assert_eq!((st.error, st.bytes), (TRUNCATE, 30), "{sc:?} {len}");
                assert_eq!(buf[..], data[..30]);
                let st = job.wait(0, s);
                assert_eq!((st.error, st.bytes), (0, len), "the sender is not told");
                job.settle();
            }
        }
    }
}

#[test]
fn single_copy_into_a_strided_receive_is_staged_and_unpacked() {
    let mut job = pair(16, 64, SingleCopy::Read);
    let int = Datatype::builtin(Builtin::Int);
    let strided: TypeRef = Arc::new(Datatype::vector(40, 1, 2, &int).unwrap());
    strided.commit();
    let src: Vec<i32> = (0..40).collect();
    // SAFETY: the 40 ints of `src` are 160 initialized bytes, alive to the end.
    let bytes: &[u8] = unsafe { std::slice::from_raw_parts(src.as_ptr().cast(), 160) };
    let mut dst = vec![-1i32; 80];
    let r = job.irecv_typed(1, 0, 0, dst.as_mut_ptr().cast(), 1, strided);
    let s = job.isend(0, 1, 0, bytes);
    assert_eq!(job.wait(1, r).bytes, 160);
    job.wait(0, s);
    let want: Vec<i32> = (0..80)
        .map(|i| if i % 2 == 0 { i / 2 } else { -1 })
        .collect();
    assert_eq!(dst, want, "every other int written, the gaps untouched");
    assert!(job.kinds(1, 0).contains(&FIN) && !job.kinds(0, 1).contains(&DATA));
}

#[test]
fn cancel_of_receives_and_of_sends_still_waiting_for_room() {
    let mut job = pair(64, 64, SingleCopy::Off);
    // A posted receive is cancelled; the message goes to the next receive.
    let mut b1 = [0u8; 8];
    let mut b2 = [0u8; 8];
    let r1 = job.irecv(1, 0, 3, &mut b1);
    job.cores[1].cancel(r1).unwrap();
    let st = job.test(1, r1).expect("cancelled at once");
    assert!(st.cancelled);
    let r2 = job.irecv(1, 0, 3, &mut b2);
    let data = [42u8; 8];
    let s = job.isend(0, 1, 3, &data);
    assert_eq!(job.wait(1, r2).bytes, 8);
    assert_eq!(b2, data);
    assert_eq!(b1, [0; 8], "the cancelled receive took nothing");
    let st = job.wait(0, s);
    assert!(!st.cancelled);

    // A slow link with room for one: the later sends park in the core; cancelling one of
    // them removes its envelope, so the receiver never sees it.
    let mut job = Job::new(
        2,
        Wires::new(
            3,
            vec![Wire::new(64, 64, SingleCopy::Off).link(20, 0, 1)],
            |_, _| 0,
        ),
    );
    let msgs: Vec<Vec<u8>> = (0..4)
        .map(|i| fill(100 + i, 32 + 100 * (i as usize % 2)))
        .collect();
    let sends: Vec<ReqId> = msgs
        .iter()
        .enumerate()
        .map(|(i, m)| job.isend(0, 1, i as i32, m))
        .collect();
    assert!(job.cores[0].is_blocked(1), "the link was full");
    assert!(job.net.refused > 0);
    // The first left (room for one); the rendezvous send 1 waits: cancelled.
    job.cores[0].cancel(sends[0]).unwrap();
    job.cores[0].cancel(sends[1]).unwrap();
    assert!(
        !job.wait(0, sends[0]).cancelled,
        "it left: completes normally"
    );
    let st = job.wait(0, sends[1]);
    assert!(st.cancelled && st.bytes == 0);
    let mut bufs = vec![vec![0u8; 200]; 4];
    let recvs: Vec<ReqId> = bufs
        .iter_mut()
        .map(|b| job.irecv(1, 0, ANY_TAG, &mut b[..]))
        .collect();
    // Three messages arrive, in order, tags 0, 2, 3; the fourth receive stays pending.
    for (k, tag) in [0usize, 2, 3].into_iter().enumerate() {
        let st = job.wait(1, recvs[k]);
        assert_eq!((st.tag, st.bytes), (tag as i32, msgs[tag].len()));
        assert_eq!(bufs[k][..st.bytes], msgs[tag][..]);
    }
    for &s in &sends[2..] {
        assert!(!job.wait(0, s).cancelled);
    }
    job.settle();
    assert!(
        job.test(1, recvs[3]).is_none(),
        "the cancelled send never arrived"
    );
    assert!(
        !job.net
            .log
            .iter()
            .any(|d| d.hdr.tag == 1 && d.hdr.kind == RTS),
        "the cancelled envelope was sent"
    );
}

#[test]
fn a_full_link_parks_in_order_and_loses_nothing() {
    for sc in [SingleCopy::Off, SingleCopy::Read] {
        let mut job = Job::new(
            2,
            Wires::new(5, vec![Wire::new(32, 48, sc).link(3, 0, 2)], |_, _| 0),
        );
        let msgs: Vec<Vec<u8>> = (0..40)
            .map(|i| fill(i, [0, 8, 32, 33, 200][i as usize % 5]))
            .collect();
        let sends: Vec<ReqId> = msgs.iter().map(|m| job.isend(0, 1, 9, m)).collect();
        assert!(job.cores[0].blocked_peers() > 0, "the link filled up");
        let mut bufs = vec![vec![0u8; 200]; msgs.len()];
        let recvs: Vec<ReqId> = bufs
            .iter_mut()
            .map(|b| job.irecv(1, 0, 9, &mut b[..]))
            .collect();
        for (i, &r) in recvs.iter().enumerate() {
            let st = job.wait(1, r);
            assert_eq!(st.bytes, msgs[i].len(), "message {i} in its place");
            assert_eq!(bufs[i][..st.bytes], msgs[i][..]);
        }
        for &s in &sends {
            job.wait(0, s);
        }
        job.settle();
        assert!(job.net.refused > 0);
    }
}

/// Envelopes travel a slow wire; control messages and DATA go round robin over three
/// fast, jittery ones, so they overtake envelopes and each other (DATA chunks arrive out
/// of order, a FIN or CTS before envelopes sent earlier).
#[test]
fn control_messages_and_data_overtaking_envelopes_and_each_other() {
    for sc in [SingleCopy::Off, SingleCopy::Read, SingleCopy::Refuse] {
        let wires = vec![
            Wire::new(64, 64, sc).link(8, 4, 8),
            Wire::new(64, 40, SingleCopy::Off).link(0, 6, 4),
            Wire::new(64, 40, SingleCopy::Off).link(1, 6, 4),
            Wire::new(64, 40, SingleCopy::Off).link(0, 9, 4),
        ];
        let mut net = Wires::new(11, wires, |_, _| 0);
        net.control = Some(vec![1, 2, 3]);
        let mut job = Job::new(2, net);
        let msgs: Vec<Vec<u8>> = (0..30)
            .map(|i| fill(i, [10, 500, 64, 65, 333][i as usize % 5]))
            .collect();
        // Both ranks send to each other at once, so that control messages (CTS, FIN,
        // SYNC_ACK) share a direction with envelopes.
        let mut bufs = vec![vec![0u8; 500]; 2 * msgs.len()];
        let (to1, to0) = bufs.split_at_mut(msgs.len());
        let mut recvs: Vec<(Rank, ReqId)> = Vec::new();
        for (at, half) in [(1, to1), (0, to0)] {
            for b in half.iter_mut() {
                let src = 1 - at as i32;
                recvs.push((at, job.irecv(at, src, ANY_TAG, &mut b[..])));
            }
        }
        let mut sends = Vec::new();
        for (i, m) in msgs.iter().enumerate() {
            let mode = if i % 3 == 0 {
                SendMode::Synchronous
            } else {
                SendMode::Standard
            };
            sends.push((0, job.isend_mode(0, 1, i as i32, m, mode)));
            sends.push((1, job.isend_mode(1, 0, i as i32, m, mode)));
        }
        for (k, &(at, r)) in recvs.iter().enumerate() {
            let i = k % msgs.len();
            let st = job.wait(at, r);
            assert_eq!(
                (st.tag, st.bytes),
                (i as i32, msgs[i].len()),
                "{sc:?}: rank {at}'s receives in order"
            );
            assert_eq!(bufs[k][..st.bytes], msgs[i][..]);
        }
        for &(at, s) in &sends {
            assert_eq!(job.wait(at, s).error, 0);
        }
        job.settle();
        if sc != SingleCopy::Read {
            // DATA chunks of one message overtook each other.
            let mut last: BTreeMap<u64, u64> = BTreeMap::new();
            let mut overtaken = false;
            for d in job.net.log.iter().filter(|d| d.hdr.kind == DATA) {
                let prev = last.insert(d.hdr.cookie, d.hdr.len);
                overtaken |= prev.is_some_and(|p| p > d.hdr.len);
            }
            assert!(overtaken, "{sc:?}: no DATA chunk overtook another");
        }
        // A control message or DATA chunk overtook an envelope sent before it between the
        // same two ranks: ordering across wires was really exercised.
        let log = &job.net.log;
        let overtook = log.iter().enumerate().any(|(i, c)| {
            c.wire != 0
                && log[i + 1..]
                    .iter()
                    .any(|e| e.wire == 0 && (e.src, e.dst) == (c.src, c.dst) && e.sent < c.sent)
        });
        assert!(overtook, "{sc:?}: nothing overtook an envelope");
    }
}

/// Ranks 1 and 2 send to rank 0 over two wires of different speed (rank 1's slow); rank
/// 0's wildcard receives take the messages in the order they arrived, each sender's in
/// the order it sent them, eager and rendezvous alike.
#[test]
fn wildcard_receives_match_across_two_wires_in_mpi_order() {
    let mut interleavings = 0;
    for seed in 0..20 {
        let wires = vec![
            Wire::new(32, 32, SingleCopy::Off).link(5, 6, 4),
            Wire::new(32, 32, SingleCopy::Read).link(1, 2, 4),
        ];
        let mut job = Job::new(
            3,
            Wires::new(seed, wires, |a, b| if a.max(b) == 2 { 1 } else { 0 }),
        );
        let per = 12;
        let msgs: Vec<Vec<u8>> = (0..2 * per)
            .map(|i| fill(seed * 100 + i, [4, 40, 16][i as usize % 3]))
            .collect();
        let mut bufs = vec![vec![0u8; 40]; msgs.len()];
        // Half the receives posted before anything arrives, half after some arrived.
        let mut recvs: Vec<ReqId> = bufs[..per as usize]
            .iter_mut()
            .map(|b| job.irecv(0, ANY_SOURCE, ANY_TAG, &mut b[..]))
            .collect();
        let mut sends = Vec::new();
        for i in 0..per as usize {
            sends.push((1, job.isend(1, 0, i as i32, &msgs[i])));
            sends.push((2, job.isend(2, 0, i as i32, &msgs[per as usize + i])));
        }
        for _ in 0..7 {
            job.step();
        }
        recvs.extend(
            bufs[per as usize..]
                .iter_mut()
                .map(|b| job.irecv(0, ANY_SOURCE, ANY_TAG, &mut b[..])),
        );
        let mut next_tag = [0i32; 3];
        let mut got = Vec::new();
        for (k, &r) in recvs.iter().enumerate() {
            let st = job.wait(0, r);
            let src = st.source as usize;
            assert!(src == 1 || src == 2);
            assert_eq!(
                st.tag, next_tag[src],
                "seed {seed}: rank {src}'s messages in order"
            );
            next_tag[src] += 1;
            let m = &msgs[(src - 1) * per as usize + st.tag as usize];
            assert_eq!(&bufs[k][..st.bytes], &m[..]);
            got.push((src as Rank, st.tag));
        }
        for (from, s) in sends {
            job.wait(from, s);
        }
        job.settle();
        // The envelopes in the order rank 0 took them in: the order the receives got them.
        let arrived: Vec<(Rank, i32)> = job
            .net
            .log
            .iter()
            .filter(|d| d.dst == 0 && (d.hdr.kind == EAGER || d.hdr.kind == RTS))
            .map(|d| (d.src, d.hdr.tag))
            .collect();
        assert_eq!(got, arrived, "seed {seed}: matched in arrival order");
        interleavings += arrived.windows(2).filter(|w| w[0].0 != w[1].0).count();
    }
    // The senders' messages really interleaved (not one wire's, then the other's).
    assert!(
        interleavings > 40,
        "{interleavings} changes of sender in 20 runs"
    );
}

/// A random workload per seed over random wires (delays, jitter, tiny capacities, single
/// copy on, off or refused, control lanes or not): every message arrives whole, and each
/// (sender, receiver, tag)'s messages meet that triple's receives in the order sent.
#[test]
fn random_workloads_keep_content_and_order() {
    for seed in 0..40u64 {
        let mut rng = SplitMix64::new(seed ^ 0xfab);
        let modes = [SingleCopy::Off, SingleCopy::Read, SingleCopy::Refuse];
        let wires: Vec<Wire> = (0..4)
            .map(|_| {
                let eager = 8 + rng.below(64) as usize;
                Wire::new(
                    eager,
                    eager + rng.below(64) as usize,
                    modes[rng.below(3) as usize],
                )
                .link(rng.below(6), rng.below(5), 1 + rng.below(4) as usize)
            })
            .collect();
        let n = 3;
        let mut net = Wires::new(seed, wires, |a, b| (a + b) as usize % 2);
        if rng.chance(1, 2) {
            net.control = Some(vec![2, 3]);
        }
        let mut job = Job::new(n, net);
        // (sender, receiver, tag) -> messages in the order sent, and receives posted.
        let mut sent: BTreeMap<(Rank, Rank, i32), Vec<Vec<u8>>> = BTreeMap::new();
        let mut sends = Vec::new();
        let count = 60;
        let msgs: Vec<(Rank, Rank, i32, Vec<u8>, SendMode)> = (0..count)
            .map(|i| {
                let from = rng.below(n as u64) as Rank;
                let to = (from + 1 + rng.below(n as u64 - 1) as Rank) % n as Rank;
                let tag = rng.below(3) as i32;
                let len = rng.below(300) as usize;
                let mode = if rng.chance(1, 4) {
                    SendMode::Synchronous
                } else {
                    SendMode::Standard
                };
                (from, to, tag, fill(seed * 1000 + i, len), mode)
            })
            .collect();
        let mut bufs = vec![vec![0u8; 300]; count as usize];
        let mut recvs: Vec<((Rank, Rank, i32), ReqId)> = Vec::new();
        // Receives and sends interleaved at random, with steps between.
        let mut order: Vec<(bool, usize)> = (0..count as usize)
            .flat_map(|i| [(true, i), (false, i)])
            .collect();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i as u64 + 1) as usize);
        }
        let mut bufs_left: Vec<&mut Vec<u8>> = bufs.iter_mut().collect();
        for (is_send, i) in order {
            let (from, to, tag, ref data, mode) = msgs[i];
            if is_send {
                sent.entry((from, to, tag)).or_default().push(data.clone());
                sends.push((from, job.isend_mode(from, to, tag, data, mode)));
            } else {
                let b = bufs_left.pop().unwrap();
                recvs.push(((from, to, tag), job.irecv(to, from as i32, tag, &mut b[..])));
            }
            if rng.chance(1, 3) {
                job.step();
            }
        }
        let mut next: BTreeMap<(Rank, Rank, i32), usize> = BTreeMap::new();
        for (k, &(key, r)) in recvs.iter().enumerate() {
            let st = job.wait(key.1, r);
            let j = next.entry(key).or_default();
            let want = &sent[&key][*j];
            *j += 1;
            assert_eq!(
                (st.source, st.tag, st.bytes, st.error),
                (key.0 as i32, key.2, want.len(), 0),
                "seed {seed}"
            );
            // Receive k was given the buffer popped k-th off the end.
            let got = &bufs[bufs.len() - 1 - k][..st.bytes];
            assert_eq!(got, &want[..], "seed {seed}: {key:?} message {}", *j - 1);
        }
        for (from, s) in sends {
            assert_eq!(job.wait(from, s).error, 0);
        }
        job.settle();
    }
}
