//! The request layer's protocols on a simulated fabric: several [`Engine`]s in one process,
//! joined by `tsunagi_p2p::sim` transports whose delays, reordering across transports,
//! capacity and single-copy behaviour each test sets. No processes, no sockets, no threads;
//! every run is deterministic for its seed.
//!
//! What is covered: eager and rendezvous (streamed and single copy), synchronous sends,
//! truncation, cancel of receives and sends, the fallback when single copy is refused, full
//! links, control messages overtaking data, wildcard receives across two transports, and a
//! randomized workload checked for MPI's non-overtaking order and for content.

use std::collections::HashMap;
use std::sync::Arc;

use tsunagi_p2p::sim::{
    Delivery, Fabric, LinkConfig, SimTransport, SingleCopy, SplitMix64, TransportConfig,
};
use tsunagi_p2p::{EventSource, Header, P2pError, Rank, Router, SelfTransport, Sink, Transport};

use crate::comm::{CommData, CommId, ErrHandler};
use crate::datatype::{Builtin, Datatype, TypeRef};
use crate::engine::{Buf, Engine, ReqId, SendMode, Status, ANY_SOURCE, ANY_TAG};
use crate::error::ErrorClass;
use crate::group::Group;
use crate::protocol::*;

/// A second communicator over all ranks (as MPI_Comm_dup of WORLD), context 4.
const DUP: CommId = CommId(2);
/// Steps a test waits for one completion before it calls the engine stuck.
const STEP_LIMIT: usize = 20_000;
const TRUNCATE: i32 = ErrorClass::Truncate as i32;

fn byte() -> TypeRef {
    Datatype::builtin(Builtin::Byte)
}

fn comm_data(n: usize, rank: Rank, context: u32, name: &str) -> CommData {
    CommData {
        group: Arc::new(Group::new((0..n as u32).collect())),
        rank: rank as usize,
        context,
        name: name.into(),
        errhandler: ErrHandler::Return,
        attrs: Default::default(),
        nodes: Arc::new(vec![0; n]),
        inter: None,
    }
}

/// Bytes that depend on a message id and the position in the message.
fn fill(id: u64, len: usize) -> Vec<u8> {
    let mut rng = SplitMix64::new(id.wrapping_mul(0x1000_0001) ^ 0xabcd);
    (0..len).map(|_| rng.next_u64() as u8).collect()
}

/// A job of `n` engines on one fabric, each with WORLD, SELF and [`DUP`].
struct Job {
    fabric: Fabric,
    e: Vec<Engine>,
}

impl Job {
    /// Engine `a` reaches `b` over sim transport `route(a, b)` (self over the self path).
    fn new(fabric: Fabric, route: impl Fn(Rank, Rank) -> usize) -> Job {
        let n = fabric.endpoints();
        let nt = fabric.transports();
        Job::with_routers(fabric.clone(), |me| {
            let mut r = Router::new(n);
            r.add(Box::new(SelfTransport::new(me)), &[me]);
            for t in 0..nt {
                let peers: Vec<Rank> = (0..n as Rank)
                    .filter(|&p| p != me && route(me, p) == t)
                    .collect();
                r.add(Box::new(fabric.transport(me, t)), &peers);
            }
            r
        })
    }

    fn with_routers(fabric: Fabric, mut router: impl FnMut(Rank) -> Router) -> Job {
        let n = fabric.endpoints();
        let e = (0..n as Rank)
            .map(|me| {
                let mut e = Engine::new(me, n, router(me));
                e.comms_mut().insert(comm_data(n, me, 0, "WORLD"));
                let mut self_comm = comm_data(1, 0, 2, "SELF");
                self_comm.group = Arc::new(Group::new(vec![me]));
                e.comms_mut().insert(self_comm);
                e.comms_mut().insert(comm_data(n, me, 4, "DUP"));
                e.core.bsend_buffer = Some((0, 1 << 30));
                e
            })
            .collect();
        Job { fabric, e }
    }

    /// Post a send of `data` (which the caller keeps alive until it completes).
    fn isend_on(
        &mut self,
        comm: CommId,
        from: Rank,
        to: i32,
        tag: i32,
        data: &[u8],
        mode: SendMode,
    ) -> ReqId {
        let e = &mut self.e[from as usize];
        let buf = Buf(data.as_ptr() as *mut u8);
        let id = e.new_request(Some(mode), buf, data.len(), byte(), comm, to, tag, false);
        e.start(id).expect("start send");
        id
    }

    fn isend(&mut self, from: Rank, to: i32, tag: i32, data: &[u8]) -> ReqId {
        self.isend_on(CommId::WORLD, from, to, tag, data, SendMode::Standard)
    }

    /// Post a receive into `buf` (which the caller keeps alive until it completes).
    fn irecv_on(&mut self, comm: CommId, at: Rank, src: i32, tag: i32, buf: &mut [u8]) -> ReqId {
        let e = &mut self.e[at as usize];
        let b = Buf(buf.as_mut_ptr());
        let id = e.new_request(None, b, buf.len(), byte(), comm, src, tag, false);
        e.start(id).expect("start receive");
        id
    }

    fn irecv(&mut self, at: Rank, src: i32, tag: i32, buf: &mut [u8]) -> ReqId {
        self.irecv_on(CommId::WORLD, at, src, tag, buf)
    }

    /// Progress every engine once, then advance the clock.
    fn step(&mut self) {
        for e in self.e.iter_mut() {
            e.progress().expect("progress");
        }
        self.fabric.step();
    }

    fn steps(&mut self, n: usize) {
        for _ in 0..n {
            self.step();
        }
    }

    fn test(&mut self, at: Rank, id: ReqId) -> Option<Status> {
        self.e[at as usize].test(id).expect("test")
    }

    fn wait(&mut self, at: Rank, id: ReqId) -> Status {
        for _ in 0..STEP_LIMIT {
            if let Some(st) = self.test(at, id) {
                return st;
            }
            self.step();
        }
        panic!(
            "request {} of rank {at} did not complete in {STEP_LIMIT} steps ({} messages in \
             flight)",
            id.0,
            self.fabric.in_flight()
        );
    }

    /// Step until nothing is in flight or queued anywhere.
    fn settle(&mut self) {
        for _ in 0..STEP_LIMIT {
            self.step();
            if self.fabric.in_flight() == 0 && self.e.iter().all(|e| !e.core.has_outgoing()) {
                return;
            }
        }
        panic!("the job did not settle in {STEP_LIMIT} steps");
    }
}

/// One transport (delay 1, no jitter, room for 64) with the given limits and single copy.
fn one_transport(n: usize, eager: usize, max: usize, sc: SingleCopy) -> Job {
    let f = Fabric::new(
        n,
        1,
        vec![TransportConfig::new("sim")
            .limits(eager, max)
            .single_copy(sc)],
    );
    Job::new(f, |_, _| 0)
}

fn kinds(tr: &[Delivery]) -> Vec<u8> {
    tr.iter().map(|d| d.header.kind).collect()
}

fn count_kind(tr: &[Delivery], kind: u8) -> usize {
    tr.iter().filter(|d| d.header.kind == kind).count()
}

#[test]
fn eager_and_streamed_rendezvous_deliver_every_size() {
    let mut job = one_transport(2, 64, 100, SingleCopy::Off);
    job.fabric.record(true);
    for (i, len) in [0usize, 1, 63, 64, 65, 100, 101, 1000, 1003]
        .into_iter()
        .enumerate()
    {
        let data = fill(i as u64, len);
        let s = job.isend(0, 1, i as i32, &data);
        let mut buf = vec![0u8; len + 5];
        let r = job.irecv(1, 0, i as i32, &mut buf);
        let st = job.wait(1, r);
        assert_eq!(
            (st.source, st.tag, st.bytes, st.error),
            (0, i as i32, len, 0)
        );
        assert_eq!(&buf[..len], &data[..], "content of a {len}-byte message");
        assert!(
            buf[len..].iter().all(|&b| b == 0),
            "nothing written past the data"
        );
        let sst = job.wait(0, s);
        assert_eq!(sst.bytes, len);
        let tr = job.fabric.trace();
        if len <= 64 {
            assert_eq!(kinds(&tr), vec![EAGER], "{len} bytes go eagerly");
        } else {
            assert_eq!(count_kind(&tr, RTS), 1);
            assert_eq!(count_kind(&tr, CTS), 1);
            assert_eq!(
                count_kind(&tr, DATA),
                len.div_ceil(100),
                "chunks of max_payload"
            );
            assert!(tr.iter().all(|d| d.payload_len <= 100));
        }
    }
    assert_eq!(job.e[0].live_requests() + job.e[1].live_requests(), 0);
}

#[test]
fn unexpected_messages_wait_for_their_receive() {
    let mut job = one_transport(2, 64, 100, SingleCopy::Off);
    let small = fill(1, 40);
    let big = fill(2, 450);
    let s1 = job.isend(0, 1, 7, &small);
    let s2 = job.isend(0, 1, 8, &big);
    job.steps(20);
    assert!(
        job.test(0, s1).is_some(),
        "standard eager send completes locally"
    );
    assert!(job.test(0, s2).is_none(), "rendezvous waits for a receive");
    let (mut b2, mut b1) = (vec![0u8; 450], vec![0u8; 40]);
    let r2 = job.irecv(1, 0, 8, &mut b2);
    let r1 = job.irecv(1, 0, 7, &mut b1);
    assert_eq!(job.wait(1, r1).bytes, 40);
    assert_eq!(job.wait(1, r2).bytes, 450);
    job.wait(0, s2);
    assert_eq!((b1, b2), (small, big));
}

#[test]
fn synchronous_send_completes_only_after_the_match() {
    for len in [16usize, 500] {
        let mut job = one_transport(2, 64, 128, SingleCopy::Off);
        let data = fill(3, len);
        let s = job.isend_on(CommId::WORLD, 0, 1, 5, &data, SendMode::Synchronous);
        job.steps(50);
        assert!(
            job.test(0, s).is_none(),
            "a {len}-byte Issend completed before any receive was posted"
        );
        assert_eq!(job.fabric.in_flight(), 0, "the envelope did arrive");
        let mut buf = vec![0u8; len];
        let r = job.irecv(1, 0, 5, &mut buf);
        job.wait(1, r);
        let st = job.wait(0, s);
        assert_eq!((st.bytes, st.cancelled), (len, false));
        assert_eq!(buf, data);
    }
}

#[test]
fn synchronous_eager_send_waits_for_a_posted_receive_too() {
    // The receive is posted first: the match happens at arrival, the ack follows.
    let mut job = one_transport(2, 64, 128, SingleCopy::Off);
    job.fabric.record(true);
    let mut buf = vec![0u8; 8];
    let r = job.irecv(1, 0, ANY_TAG, &mut buf);
    let data = fill(4, 8);
    let s = job.isend_on(CommId::WORLD, 0, 1, 9, &data, SendMode::Synchronous);
    assert!(job.test(0, s).is_none());
    job.wait(1, r);
    job.wait(0, s);
    assert_eq!(kinds(&job.fabric.trace()), vec![EAGER, SYNC_ACK]);
}

#[test]
fn truncation_reports_err_truncate_and_the_sender_completes() {
    // Eager, streamed rendezvous, single-copy rendezvous, refused single copy.
    let cases = [
        (SingleCopy::Off, 50usize),
        (SingleCopy::Off, 1000),
        (SingleCopy::Read, 1000),
        (SingleCopy::Refuse, 1000),
    ];
    for (sc, len) in cases {
        let mut job = one_transport(2, 64, 128, sc);
        let data = fill(5, len);
        let cap = len / 3;
        let mut buf = vec![0xEEu8; cap + 16];
        let r = job.irecv(1, 0, 1, &mut buf[..cap]);
        let s = job.isend(0, 1, 1, &data);
        let st = job.wait(1, r);
        assert_eq!(st.error, TRUNCATE, "{sc:?}, {len} bytes into {cap}");
        assert_eq!((st.bytes, st.source, st.tag), (cap, 0, 1));
        assert_eq!(&buf[..cap], &data[..cap]);
        assert!(
            buf[cap..].iter().all(|&b| b == 0xEE),
            "wrote past the buffer"
        );
        let sst = job.wait(0, s);
        assert_eq!((sst.error, sst.bytes), (0, len));
        job.settle();
        assert_eq!(job.e[0].live_requests() + job.e[1].live_requests(), 0);
    }
}

#[test]
fn truncation_of_an_unexpected_message() {
    let mut job = one_transport(2, 64, 128, SingleCopy::Off);
    let data = fill(6, 300);
    let s = job.isend(0, 1, 2, &data);
    let e = fill(7, 60);
    let s2 = job.isend(0, 1, 3, &e);
    job.settle();
    let (mut b1, mut b2) = (vec![0u8; 100], vec![0u8; 10]);
    let r1 = job.irecv(1, 0, 2, &mut b1);
    let r2 = job.irecv(1, 0, 3, &mut b2);
    let (st1, st2) = (job.wait(1, r1), job.wait(1, r2));
    assert_eq!((st1.error, st1.bytes), (TRUNCATE, 100));
    assert_eq!((st2.error, st2.bytes), (TRUNCATE, 10));
    assert_eq!((&b1[..], &b2[..]), (&data[..100], &e[..10]));
    job.wait(0, s);
    job.wait(0, s2);
}

#[test]
fn cancel_of_an_unmatched_receive() {
    let mut job = one_transport(2, 64, 128, SingleCopy::Off);
    let mut b1 = vec![0u8; 8];
    let mut b2 = vec![0u8; 8];
    let r1 = job.irecv(1, 0, 4, &mut b1);
    job.e[1].cancel(r1).unwrap();
    assert!(
        job.e[1].is_done(r1),
        "a cancelled receive completes at once"
    );
    // r1 is not collected yet, so r2 gets another request id: a cancelled receive left
    // in the posted queue would take the message.
    let r2 = job.irecv(1, 0, 4, &mut b2);
    let data = fill(8, 8);
    let s = job.isend(0, 1, 4, &data);
    assert_eq!(job.wait(1, r2).bytes, 8);
    let st = job.test(1, r1).unwrap();
    assert!(st.cancelled && st.bytes == 0);
    assert_eq!(
        (b1, b2),
        (vec![0u8; 8], data),
        "the cancelled receive took nothing"
    );
    job.wait(0, s);
    // A matched receive cannot be cancelled: it completes normally.
    let mut b3 = vec![0u8; 8];
    let r3 = job.irecv(1, 0, 5, &mut b3);
    let s3 = job.isend(0, 1, 5, &[1; 8]);
    job.settle();
    job.e[1].cancel(r3).unwrap();
    let st3 = job.wait(1, r3);
    assert!(!st3.cancelled);
    assert_eq!(b3, [1; 8]);
    job.wait(0, s3);
}

/// A job whose only link 0 → 1 holds one message and takes 30 steps: later sends queue
/// in the engine, where they can still be cancelled.
fn slow_full_link() -> Job {
    let f = Fabric::new(
        2,
        1,
        vec![TransportConfig::new("sim").limits(64, 128).link(30, 0, 1)],
    );
    Job::new(f, |_, _| 0)
}

#[test]
fn cancel_of_sends_that_have_not_left() {
    let mut job = slow_full_link();
    let first = fill(9, 10);
    let sync = fill(10, 10);
    let big = fill(11, 500);
    let s0 = job.isend(0, 1, 1, &first); // takes the link's only slot
    let s1 = job.isend_on(CommId::WORLD, 0, 1, 1, &sync, SendMode::Synchronous);
    let s2 = job.isend(0, 1, 1, &big); // RTS queued
    assert!(job.e[0].core.has_outgoing());
    job.e[0].cancel(s1).unwrap();
    job.e[0].cancel(s2).unwrap();
    let (st1, st2) = (job.wait(0, s1), job.wait(0, s2));
    assert!(st1.cancelled && st2.cancelled);
    assert!(!job.e[0].core.has_outgoing(), "nothing left to send");
    job.settle();
    let mut b = vec![0u8; 600];
    let r = job.irecv(1, 0, ANY_TAG, &mut b);
    assert_eq!(job.wait(1, r).bytes, 10);
    assert_eq!(&b[..10], &first[..]);
    job.settle();
    assert!(
        job.e[1]
            .probe(CommId::WORLD, ANY_SOURCE, ANY_TAG, false)
            .unwrap()
            .is_none(),
        "a cancelled send arrived"
    );
    assert!(!job.wait(0, s0).cancelled);
}

#[test]
fn cancel_of_a_send_that_left_completes_normally() {
    let mut job = one_transport(2, 64, 128, SingleCopy::Off);
    let data = fill(12, 10);
    let s = job.isend_on(CommId::WORLD, 0, 1, 1, &data, SendMode::Synchronous);
    job.steps(3);
    job.e[0].cancel(s).unwrap();
    assert!(
        job.test(0, s).is_none(),
        "the envelope left: cancel has no effect"
    );
    let mut b = vec![0u8; 10];
    let r = job.irecv(1, 0, 1, &mut b);
    job.wait(1, r);
    assert!(!job.wait(0, s).cancelled);
    assert_eq!(b, data);
}

/// Regression: cancel looked for the *first* queued envelope carrying the request's id
/// as cookie. A completed eager send whose envelope still waits for room, freed by the
/// test that collected it, leaves its id to the next request: cancelling that one removed
/// the old envelope (a completed send lost) and let the cancelled one go out, whose
/// SYNC_ACK then completed whichever request had the id by then.
#[test]
fn cancel_after_request_id_reuse_removes_the_right_envelope() {
    let mut job = slow_full_link();
    let a = fill(13, 10);
    let b = fill(14, 10);
    let c = fill(15, 10);
    let s0 = job.isend(0, 1, 1, &a); // fills the link
    let s1 = job.isend(0, 1, 1, &b); // queued in the engine, complete
    assert!(job.test(0, s0).is_some() && job.test(0, s1).is_some());
    let s2 = job.isend_on(CommId::WORLD, 0, 1, 1, &c, SendMode::Synchronous);
    assert!(s2 == s0 || s2 == s1, "the test relies on slot reuse");
    job.e[0].cancel(s2).unwrap();
    assert!(job.wait(0, s2).cancelled);
    job.settle();
    let mut got = Vec::new();
    while let Some((st, _)) = job.e[1]
        .probe(CommId::WORLD, ANY_SOURCE, ANY_TAG, false)
        .unwrap()
    {
        let mut buf = vec![0u8; st.bytes];
        let r = job.irecv(1, 0, 1, &mut buf);
        job.wait(1, r);
        got.push(buf);
    }
    assert_eq!(
        got,
        vec![a, b],
        "the completed sends arrive, the cancelled one does not"
    );
}

#[test]
fn a_failed_peer_is_reported_as_proc_aborted_by_every_later_call() {
    let mut job = slow_full_link();
    let (a, b) = (fill(40, 10), fill(41, 10));
    job.isend(0, 1, 1, &a);
    job.isend(0, 1, 1, &b); // queued in the engine: the link holds one message
    job.fabric.fail(1);
    let err = job.e[0]
        .progress()
        .expect_err("retrying the queued send must fail");
    assert_eq!(err.class, ErrorClass::ProcAborted, "{err:?}");
    assert!(
        err.message.contains("rank 1"),
        "names the peer: {}",
        err.message
    );
    let again = job.e[0].progress().expect_err("the fault sticks");
    assert_eq!(again.class, ErrorClass::ProcAborted);
    let e0 = &mut job.e[0];
    let id = e0.new_request(
        Some(SendMode::Standard),
        Buf(a.as_ptr() as *mut u8),
        10,
        byte(),
        CommId::WORLD,
        1,
        1,
        false,
    );
    assert_eq!(e0.start(id).unwrap_err().class, ErrorClass::ProcAborted);
}

#[test]
fn single_copy_rendezvous_reads_once_and_answers_fin() {
    let mut job = one_transport(2, 64, 128, SingleCopy::Read);
    job.fabric.record(true);
    let data = fill(16, 5000);
    let mut buf = vec![0u8; 5000];
    let s = job.isend(0, 1, 1, &data);
    let r = job.irecv(1, 0, 1, &mut buf);
    job.wait(1, r);
    job.wait(0, s);
    assert_eq!(buf, data);
    let tr = job.fabric.trace();
    assert_eq!(kinds(&tr), vec![RTS, FIN]);
    assert_ne!(tr[0].header.flags & FLAG_CMA, 0);
    let st = job.fabric.stats(0);
    assert_eq!((st.reads, st.read_bytes, st.reads_failed), (1, 5000, 0));
}

#[test]
fn a_read_that_needs_the_peer_stays_in_flight_instead_of_blocking_the_reader() {
    // As over the vendor: the sender's bytes come only when the sender polls. The
    // receiver's engine must go on (return from its progress with the reads in flight)
    // rather than wait for them inside, which on one thread would never end.
    let mut job = one_transport(2, 64, 128, SingleCopy::Answered);
    job.fabric.record(true);
    let (a, b) = (fill(17, 5000), fill(18, 7000));
    let (mut ra, mut rb) = (vec![0u8; 5000], vec![0u8; 7000]);
    let sa = job.isend(0, 1, 1, &a);
    let sb = job.isend(0, 1, 2, &b);
    let r_b = job.irecv(1, 0, 2, &mut rb);
    let r_a = job.irecv(1, 0, 1, &mut ra);
    // Only the receiver runs: both RTSs arrive and match, both reads start, and neither
    // can end.
    for _ in 0..50 {
        job.e[1].progress().expect("progress");
        job.fabric.step();
    }
    assert_eq!(kinds(&job.fabric.trace()), vec![RTS, RTS]);
    assert!(job.e[1].core.has_outgoing(), "the reads are in flight");
    assert!(job.test(1, r_a).is_none() && job.test(1, r_b).is_none());
    // One poll of the sender answers both; the receiver's next pass ends them, and FINs go.
    job.e[0].progress().expect("progress");
    job.e[1].progress().expect("progress");
    assert!(!job.e[1].core.has_outgoing(), "no read left in flight");
    assert_eq!(job.test(1, r_a).map(|st| st.bytes), Some(5000));
    assert_eq!(job.test(1, r_b).map(|st| st.bytes), Some(7000));
    job.wait(0, sa);
    job.wait(0, sb);
    assert_eq!((ra, rb), (a, b));
    assert_eq!(kinds(&job.fabric.trace()), vec![FIN, FIN]);
    let st = job.fabric.stats(0);
    assert_eq!((st.reads, st.read_bytes, st.reads_failed), (2, 12000, 0));
}

#[test]
fn single_copy_of_non_contiguous_data_on_both_sides() {
    // Every other int: the sender packs once and exposes the packed copy; the receiver
    // reads into scratch and unpacks.
    let mut job = one_transport(2, 64, 128, SingleCopy::Read);
    let int = Datatype::builtin(Builtin::Int);
    let strided: TypeRef = Arc::new(Datatype::vector(400, 1, 2, &int).unwrap());
    strided.commit();
    let src: Vec<i32> = (0..800).collect();
    let mut dst = vec![-1i32; 800];
    let e0 = &mut job.e[0];
    let s = e0.new_request(
        Some(SendMode::Standard),
        Buf(src.as_ptr() as *mut u8),
        1,
        strided.clone(),
        CommId::WORLD,
        1,
        3,
        false,
    );
    e0.start(s).unwrap();
    let e1 = &mut job.e[1];
    let r = e1.new_request(
        None,
        Buf(dst.as_mut_ptr().cast()),
        1,
        strided,
        CommId::WORLD,
        0,
        3,
        false,
    );
    e1.start(r).unwrap();
    assert_eq!(job.wait(1, r).bytes, 1600);
    job.wait(0, s);
    for (i, v) in dst.iter().enumerate() {
        let want = if i % 2 == 0 { i as i32 } else { -1 };
        assert_eq!(*v, want, "element {i}");
    }
    assert_eq!(job.fabric.stats(0).reads, 1);
}

#[test]
fn refused_single_copy_falls_back_to_cts_and_data() {
    let mut job = one_transport(2, 64, 128, SingleCopy::Refuse);
    job.fabric.record(true);
    let data = fill(17, 1000);
    let mut buf = vec![0u8; 1000];
    let r = job.irecv(1, 0, 1, &mut buf);
    let s = job.isend(0, 1, 1, &data);
    job.wait(1, r);
    job.wait(0, s);
    assert_eq!(buf, data);
    let tr = job.fabric.trace();
    assert_ne!(
        tr[0].header.flags & FLAG_CMA,
        0,
        "the RTS offered single copy"
    );
    assert_eq!(count_kind(&tr, CTS), 1);
    assert_eq!(count_kind(&tr, DATA), 8);
    assert_eq!(count_kind(&tr, FIN), 0);
    assert_eq!(job.fabric.stats(0).reads_failed, 1);
}

#[test]
fn full_links_lose_and_reorder_nothing() {
    // Room for one message per link, both directions busy, every kind of message.
    let f = Fabric::new(
        2,
        2,
        vec![TransportConfig::new("sim")
            .limits(32, 48)
            .link(2, 3, 1)
            .max_per_poll(1)],
    );
    let mut job = Job::new(f, |_, _| 0);
    let sizes = [0usize, 10, 32, 33, 200, 5, 500, 1, 31, 100];
    let msgs: Vec<Vec<u8>> = (0..40)
        .map(|i| fill(100 + i, sizes[i as usize % 10]))
        .collect();
    let mut sends = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        let mode = if i % 3 == 0 {
            SendMode::Synchronous
        } else {
            SendMode::Standard
        };
        sends.push((0, job.isend_on(CommId::WORLD, 0, 1, 6, m, mode)));
        sends.push((1, job.isend_on(CommId::WORLD, 1, 0, 6, m, mode)));
        if i % 3 == 2 {
            // Links drain while the engines still hold queued messages: a new send must
            // go behind them, not into the free slot.
            job.step();
        }
    }
    assert!(job.e[0].core.has_outgoing(), "the link was full");
    let mut bufs: Vec<Vec<u8>> = (0..80).map(|_| vec![0u8; 500]).collect();
    let mut recvs = Vec::new();
    for (i, b) in bufs.iter_mut().enumerate() {
        let at = (i % 2) as Rank;
        recvs.push((at, job.irecv(at, 1 - at as i32, 6, b)));
    }
    let mut lens = Vec::new();
    for &(at, r) in &recvs {
        lens.push(job.wait(at, r).bytes);
    }
    for &(at, s) in &sends {
        job.wait(at, s);
    }
    for (i, b) in bufs.iter().enumerate() {
        let m = &msgs[i / 2];
        assert_eq!(lens[i], m.len(), "message {} of rank {}", i / 2, 1 - i % 2);
        assert_eq!(&b[..m.len()], &m[..]);
    }
    assert!(job.fabric.stats(0).full > 10, "back-pressure was exercised");
    assert_eq!(job.fabric.stats(0).max_depth, 1);
}

#[test]
fn persistent_requests_restart_and_freed_requests_finish_in_the_background() {
    let mut job = slow_full_link();
    let mut data = vec![0u8; 300];
    let mut buf = vec![0u8; 300];
    // The requests keep these pointers across rounds, so the test goes through them too
    // (a fresh `&mut` of the vectors would invalidate them).
    let (dptr, bptr) = (data.as_mut_ptr(), buf.as_mut_ptr());
    let byte = byte();
    let s = job.e[0].new_request(
        Some(SendMode::Standard),
        Buf(dptr),
        300,
        byte.clone(),
        CommId::WORLD,
        1,
        2,
        true,
    );
    let r = job.e[1].new_request(None, Buf(bptr), 300, byte, CommId::WORLD, 0, 2, true);
    for round in 0..4u64 {
        let want = fill(round, 300);
        // SAFETY: `dptr` points to the 300 bytes of `data`, alive to the end of the test;
        // the send request is inactive, so nothing else reads or writes them now.
        unsafe { std::ptr::copy_nonoverlapping(want.as_ptr(), dptr, 300) };
        job.e[0].start(s).unwrap();
        job.e[1].start(r).unwrap();
        assert_eq!(job.wait(1, r).bytes, 300);
        job.wait(0, s);
        // SAFETY: `bptr` points to the 300 bytes of `buf`; the receive has completed.
        let got = unsafe { std::slice::from_raw_parts(bptr, 300) };
        assert_eq!(got, &want[..], "round {round}");
        assert!(job.e[0].is_persistent(s) && !job.e[0].is_active(s));
    }
    job.e[0].free_request(s).unwrap();
    job.e[1].free_request(r).unwrap();
    // Freed while active: an eager synchronous send and a receive complete unobserved.
    let m = fill(9, 20);
    let s2 = job.isend_on(CommId::WORLD, 0, 1, 3, &m, SendMode::Synchronous);
    job.e[0].free_request(s2).unwrap();
    let mut b2 = vec![0u8; 20];
    let r2 = job.irecv(1, 0, 3, &mut b2);
    job.e[1].free_request(r2).unwrap();
    job.settle();
    assert_eq!(b2, m);
    assert_eq!(job.e[0].live_requests() + job.e[1].live_requests(), 0);
}

#[test]
fn communicators_do_not_match_each_other() {
    let mut job = one_transport(2, 64, 128, SingleCopy::Off);
    let (a, b) = (fill(30, 20), fill(31, 300));
    let s1 = job.isend_on(DUP, 0, 1, 0, &a, SendMode::Standard);
    let s2 = job.isend_on(CommId::WORLD, 0, 1, 0, &b, SendMode::Standard);
    let mut x = vec![0u8; 300];
    let mut y = vec![0u8; 300];
    let r1 = job.irecv_on(CommId::WORLD, 1, ANY_SOURCE, ANY_TAG, &mut x);
    let r2 = job.irecv_on(DUP, 1, ANY_SOURCE, ANY_TAG, &mut y);
    assert_eq!(job.wait(1, r1).bytes, 300);
    assert_eq!(job.wait(1, r2).bytes, 20);
    assert_eq!((&x[..], &y[..20]), (&b[..], &a[..]));
    job.wait(0, s1);
    job.wait(0, s2);
}

mod device;
mod lean;
mod lean_recv;
mod ordering;
mod random;
