//! The transport's logic over the in-memory vendor world (`link::sim`), in both receive
//! modes: receives posted ahead (polling) and probing (a thread blocking in the vendor).

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::{Duration, Instant};

use super::*;
use crate::link::sim::SimWorld;

/// Both receive modes.
const MODES: [usize; 2] = [0, POSTED_AHEAD];

/// Bound of every wait in these tests.
const BOUND: Duration = Duration::from_secs(30);

fn core(w: &SimWorld, rank: u32, size: usize, short: usize, ahead: usize) -> Core {
    Core::new(Box::new(w.link(rank, size)), short, ahead).unwrap()
}

fn hdr(src: Rank, seq: u64) -> Header {
    Header {
        kind: 1,
        src,
        tag: 5,
        cookie: seq,
        ..Header::default()
    }
}

fn payload(seq: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u64 * 7 + seq) as u8).collect()
}

/// Drain everything rank `core` can deliver, as (peer, seq, payload).
fn take(core: &mut Core, got: &mut Vec<(Rank, u64, Vec<u8>)>) -> usize {
    core.poll(&mut |p, h, b| got.push((p, h.cookie, b.to_vec())))
        .unwrap()
}

#[test]
fn messages_of_every_size_arrive_whole_and_in_order_per_peer() {
    for ahead in MODES {
        let short = 100;
        let w = SimWorld::default();
        let mut a = core(&w, 0, 3, short, ahead);
        let mut b = core(&w, 1, 3, short, ahead);
        let mut c = core(&w, 2, 3, short, ahead);
        let sizes = [0, 1, short, short + 1, 5000, 0, 7, MAX_PAYLOAD, 3];
        // Rests are held back: long messages wait for them, and the short ones behind
        // them (from the same sender) must wait too, while another sender's go on.
        w.hold_rests(true);
        for (i, &len) in sizes.iter().enumerate() {
            assert!(a
                .try_send(1, &hdr(0, i as u64), &payload(i as u64, len))
                .unwrap());
            assert!(c
                .try_send(1, &hdr(2, 100 + i as u64), &payload(100 + i as u64, 10))
                .unwrap());
        }
        let mut got = Vec::new();
        take(&mut b, &mut got);
        let from_a: Vec<u64> = got.iter().filter(|g| g.0 == 0).map(|g| g.1).collect();
        let from_c: Vec<u64> = got.iter().filter(|g| g.0 == 2).map(|g| g.1).collect();
        // Rank 0's first three fit the short limit; the fourth is long and holds the rest.
        assert_eq!(from_a, vec![0, 1, 2], "ahead {ahead}");
        assert_eq!(from_c, (100..109).collect::<Vec<_>>(), "ahead {ahead}");
        w.hold_rests(false);
        for _ in 0..=SEND_TEST_EVERY {
            take(&mut b, &mut got);
            take(&mut a, &mut Vec::new());
        }
        let from_a: Vec<&(Rank, u64, Vec<u8>)> = got.iter().filter(|g| g.0 == 0).collect();
        assert_eq!(from_a.len(), sizes.len(), "ahead {ahead}");
        for (i, g) in from_a.iter().enumerate() {
            assert_eq!(g.1, i as u64, "order from rank 0, ahead {ahead}");
            assert_eq!(g.2, payload(i as u64, sizes[i]), "payload of message {i}");
        }
        // Every send completed, so the sender holds no buffers.
        assert!(a.sends.is_empty() && a.send_bytes == 0, "ahead {ahead}");
        // The receiver's receives are all posted again.
        assert_eq!(w.posted_ahead(1), ahead);
        // The small messages' send buffers came back for reuse.
        assert!(!a.small.is_empty() && a.small.len() <= SMALL_MAX);
        let kept = a.small.len();
        assert!(a.try_send(1, &hdr(0, 99), &payload(99, 10)).unwrap());
        assert_eq!(a.small.len(), kept - 1, "a short send takes a kept buffer");
        assert_eq!(b.queued, 0);
    }
}

#[test]
fn a_burst_longer_than_the_ring_arrives_in_order() {
    let w = SimWorld::default();
    let mut a = core(&w, 0, 3, 64, POSTED_AHEAD);
    let mut c = core(&w, 2, 3, 64, POSTED_AHEAD);
    let mut b = core(&w, 1, 3, 64, POSTED_AHEAD);
    let n = 10 * POSTED_AHEAD as u64;
    for i in 0..n {
        assert!(a
            .try_send(1, &hdr(0, i), &payload(i, (i % 70) as usize))
            .unwrap());
        assert!(c.try_send(1, &hdr(2, i), &payload(i, 3)).unwrap());
    }
    let mut got = Vec::new();
    let start = Instant::now();
    while (got.len() as u64) < 2 * n {
        take(&mut b, &mut got);
        assert!(
            start.elapsed() < BOUND,
            "only {} of {} arrived",
            got.len(),
            2 * n
        );
    }
    for from in [0, 2] {
        let seqs: Vec<u64> = got.iter().filter(|g| g.0 == from).map(|g| g.1).collect();
        assert_eq!(seqs, (0..n).collect::<Vec<_>>(), "order from rank {from}");
    }
    for g in got.iter().filter(|g| g.0 == 0) {
        assert_eq!(g.2, payload(g.1, (g.1 % 70) as usize));
    }
    assert_eq!(w.posted_ahead(1), POSTED_AHEAD);
}

#[test]
fn bad_peers_and_payloads_are_refused() {
    let w = SimWorld::default();
    let mut a = core(&w, 0, 2, 16, POSTED_AHEAD);
    assert!(a.try_send(0, &hdr(0, 0), &[]).is_err());
    assert!(a.try_send(2, &hdr(0, 0), &[]).is_err());
    assert!(a
        .try_send(1, &hdr(0, 0), &vec![0; MAX_PAYLOAD + 1])
        .is_err());
}

#[test]
fn malformed_vendor_messages_are_errors_not_panics() {
    for ahead in MODES {
        // An unknown tag, then a first message shorter than a header.
        for (tag, len, says) in [(99, 40, "unknown tag 99"), (frame::TAG_WHOLE, 10, "header")] {
            let w = SimWorld::default();
            let mut raw = w.link(0, 2);
            let mut b = core(&w, 1, 2, 16, ahead);
            let junk = vec![1u8; len];
            // SAFETY: junk outlives the simulated send (the sim copies at once).
            unsafe { raw.isend(junk.as_ptr(), junk.len(), 1, tag).unwrap() };
            let e = b
                .poll(&mut |_, _, _| panic!("nothing to deliver"))
                .unwrap_err();
            assert!(e.to_string().contains(says), "ahead {ahead}: {e}");
        }
    }
    // A first message longer than the receive posted ahead (a peer with a larger short
    // limit) is an error that says so; probing takes it.
    for ahead in MODES {
        let w = SimWorld::default();
        let mut a = core(&w, 0, 2, 1000, ahead);
        let mut b = core(&w, 1, 2, 16, ahead);
        assert!(a.try_send(1, &hdr(0, 1), &payload(1, 500)).unwrap());
        let r = b.poll(&mut |_, h, p| assert_eq!((h.cookie, p), (1, &payload(1, 500)[..])));
        if ahead == 0 {
            assert_eq!(r.unwrap(), 1);
        } else {
            assert!(r.unwrap_err().to_string().contains("truncated"));
        }
    }
}

#[test]
fn reads_take_the_peers_memory_straight_into_the_buffer_and_cross_without_waiting() {
    for ahead in MODES {
        let w = SimWorld::default();
        let mut a = core(&w, 0, 2, 16, ahead);
        let mut b = core(&w, 1, 2, 16, ahead);
        let a_data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let b_data: Vec<u8> = (0..70_000u32).map(|i| (i % 13) as u8 + 1).collect();
        let (a_addr, b_addr) = (a_data.as_ptr() as u64, b_data.as_ptr() as u64);
        // Rank 1 reads rank 0's memory while rank 0 reads rank 1's: each serves the
        // other's request from inside its own wait. Rank 1 may finish its read before it
        // has seen rank 0's request: like an engine, it then keeps polling (which serves
        // requests) until rank 0 has its bytes.
        let a_done = Arc::new(AtomicBool::new(false));
        let a_done_seen = a_done.clone();
        let reader_b = std::thread::spawn(move || {
            let mut dst = vec![0u8; 300_000];
            b.read_remote(0, a_addr, &mut dst).unwrap();
            // Zero bytes: nothing asked, nothing waited for.
            b.read_remote(0, a_addr, &mut []).unwrap();
            let start = Instant::now();
            while !a_done_seen.load(Ordering::SeqCst) {
                b.poll(&mut |_, _, _| panic!("no message was sent"))
                    .unwrap();
                assert!(start.elapsed() < BOUND, "rank 0's read never ended");
                std::thread::yield_now();
            }
            (b, dst)
        });
        let mut dst = vec![0u8; 70_000];
        a.read_remote(1, b_addr, &mut dst).unwrap();
        a_done.store(true, Ordering::SeqCst);
        assert_eq!(dst, b_data);
        // Rank 0 keeps polling (as its engine would) until rank 1 has its bytes.
        let start = Instant::now();
        while !reader_b.is_finished() {
            a.poll(&mut |_, _, _| panic!("no message was sent"))
                .unwrap();
            assert!(start.elapsed() < BOUND, "rank 1's read never ended");
            std::thread::yield_now();
        }
        let (mut b, got) = reader_b.join().unwrap();
        assert_eq!(got, a_data);
        // Once polled, neither holds a send; then both are quiet (a probe may block).
        a.test_sends().unwrap();
        b.test_sends().unwrap();
        a.poll(&mut |_, _, _| {}).unwrap();
        b.poll(&mut |_, _, _| {}).unwrap();
        assert!(a.sends.is_empty() && b.sends.is_empty());
        assert!(a.events.quiet.load(Ordering::SeqCst));
        // Reading oneself or a rank outside the world is refused.
        assert!(a.read_remote(0, a_addr, &mut [0u8; 4]).is_err());
        assert!(a.read_remote(2, a_addr, &mut [0u8; 4]).is_err());
        drop(a_data);
    }
}

#[test]
fn messages_that_arrive_during_a_read_are_delivered_after_it_in_order() {
    for ahead in MODES {
        let w = SimWorld::default();
        let mut a = core(&w, 0, 2, 16, ahead);
        let mut b = core(&w, 1, 2, 16, ahead);
        let data: Vec<u8> = (0..50_000u32).map(|i| (i % 7) as u8).collect();
        let addr = data.as_ptr() as u64;
        // Before rank 1 reads, rank 0 sends it messages (one long): they come in during
        // the read, which must not lose or reorder them.
        for i in 0..5u64 {
            let len = if i == 2 { 100 } else { 4 };
            assert!(a.try_send(1, &hdr(0, i), &payload(i, len)).unwrap());
        }
        let stop = Arc::new(AtomicBool::new(false));
        let stop_seen = stop.clone();
        let server = std::thread::spawn(move || {
            let start = Instant::now();
            while !stop_seen.load(Ordering::SeqCst) {
                a.poll(&mut |_, _, _| panic!("rank 1 sent nothing"))
                    .unwrap();
                assert!(start.elapsed() < BOUND, "the read never ended");
                std::thread::yield_now();
            }
        });
        let mut dst = vec![0u8; data.len()];
        b.read_remote(0, addr, &mut dst).unwrap();
        stop.store(true, Ordering::SeqCst);
        server.join().unwrap();
        assert_eq!(dst, data);
        let mut got = Vec::new();
        take(&mut b, &mut got);
        let seqs: Vec<u64> = got.iter().map(|g| g.1).collect();
        assert_eq!(seqs, (0..5).collect::<Vec<_>>(), "ahead {ahead}");
        assert_eq!(got[2].2, payload(2, 100));
    }
}

#[test]
fn malformed_memory_requests_are_errors_not_panics() {
    for ahead in MODES {
        let w = SimWorld::default();
        let mut raw = w.link(0, 2);
        let mut b = core(&w, 1, 2, 16, ahead);
        for bad in [vec![1u8; 15], frame::get_request(u64::MAX - 1, 16).to_vec()] {
            // SAFETY: the sim copies at once.
            unsafe { raw.isend(bad.as_ptr(), bad.len(), 1, TAG_GET).unwrap() };
            let e = b
                .poll(&mut |_, _, _| panic!("nothing to deliver"))
                .unwrap_err();
            assert!(
                e.to_string().contains("memory request"),
                "ahead {ahead}: {e}"
            );
        }
        // A wake-up from another rank is not one.
        // SAFETY: as above.
        unsafe { raw.isend([].as_ptr(), 0, 1, TAG_WAKE).unwrap() };
        assert!(b.poll(&mut |_, _, _| panic!("nothing to deliver")).is_err());
        // From itself it is dropped.
        let mut b_raw = w.link(1, 2);
        // SAFETY: as above.
        unsafe { b_raw.isend([].as_ptr(), 0, 1, TAG_WAKE).unwrap() };
        assert_eq!(
            b.poll(&mut |_, _, _| panic!("nothing to deliver")).unwrap(),
            0
        );
    }
}

#[test]
fn sends_beyond_the_window_wait_for_room() {
    for ahead in MODES {
        let w = SimWorld::default();
        let mut a = core(&w, 0, 2, 16, ahead);
        let mut b = core(&w, 1, 2, 16, ahead);
        let big = vec![0u8; MAX_PAYLOAD];
        let mut sent = 0;
        while a.try_send(1, &hdr(0, sent), &big).unwrap() {
            sent += 1;
            assert!(sent < 1000, "no back-pressure");
        }
        assert!(a.send_bytes >= MAX_SEND_BYTES);
        let mut got = Vec::new();
        let start = Instant::now();
        while (got.len() as u64) < sent {
            take(&mut b, &mut got);
            assert!(
                start.elapsed() < BOUND,
                "only {} of {sent} arrived",
                got.len()
            );
        }
        assert!(a.try_send(1, &hdr(0, sent), &big).unwrap());
    }
}

#[test]
fn several_reads_are_in_flight_at_once_and_each_gets_its_own_bytes() {
    for ahead in MODES {
        let w = SimWorld::default();
        let mut a = core(&w, 0, 2, 16, ahead);
        let mut b = core(&w, 1, 2, 16, ahead);
        let sources: Vec<Vec<u8>> = (0..4u32)
            .map(|k| {
                (0..(10_000 + 3_000 * k))
                    .map(|i| (i * (k + 3)) as u8)
                    .collect()
            })
            .collect();
        let mut dsts: Vec<Vec<u8>> = sources.iter().map(|s| vec![0u8; s.len()]).collect();
        // Hold the data: all four reads are started before any byte moves.
        w.hold_rests(true);
        let mut ids = Vec::new();
        for (src, dst) in sources.iter().zip(dsts.iter_mut()) {
            // SAFETY: `dsts` is neither read nor moved until every read is done below.
            ids.push(unsafe {
                b.start_read(0, src.as_ptr() as u64, dst.as_mut_ptr(), dst.len())
                    .unwrap()
            });
        }
        // A read of nothing is done at once; an id never handed out is an error.
        // SAFETY: no bytes.
        let none = unsafe { b.start_read(0, 8, std::ptr::null_mut(), 0).unwrap() };
        assert!(b.test_read(none).unwrap());
        assert!(b.test_read(ReadId(77)).is_err());
        // Rank 0 answers the requests (its poll serves them).
        a.poll(&mut |_, _, _| panic!("rank 1 sent nothing"))
            .unwrap();
        assert!(
            ids.iter().all(|&id| !b.test_read(id).unwrap()),
            "no read is done while its data is held (ahead {ahead})"
        );
        w.hold_rests(false);
        let start = Instant::now();
        while !ids.is_empty() {
            ids.retain(|&id| !b.test_read(id).unwrap());
            a.poll(&mut |_, _, _| panic!("rank 1 sent nothing"))
                .unwrap();
            assert!(start.elapsed() < BOUND, "{} reads never ended", ids.len());
        }
        assert_eq!(dsts, sources, "ahead {ahead}");
        // Ids are reused once done.
        // SAFETY: dsts[0] outlives the read, which is finished below.
        let again = unsafe {
            b.start_read(0, sources[0].as_ptr() as u64, dsts[0].as_mut_ptr(), 10)
                .unwrap()
        };
        assert!(again.0 < 4);
        let start = Instant::now();
        while !b.test_read(again).unwrap() {
            a.poll(&mut |_, _, _| {}).unwrap();
            assert!(start.elapsed() < BOUND, "the read never ended");
        }
    }
}

#[test]
fn the_vendor_is_a_polled_source_in_the_event_registry() {
    use tsunagi_p2p::registry::EventRegistry;
    // The vendor beside another source (here a second vendor event source stands in for
    // TCP's: any source with a descriptor): one registry covers both.
    let vendor = Arc::new(VendorEvents::new(None));
    let other = Arc::new(VendorEvents::new(None));
    assert!(vendor.wait_fd().is_some(), "no eventfd for the vendor");
    // No arrival wakes a sleeper: the polling engine is told how long a sleep costs.
    assert_eq!(vendor.nap(), Some(NAP));
    let reg = EventRegistry::new(vec![vendor.clone() as Arc<dyn EventSource>, other])
        .expect("the vendor joins the registry");
    // Arrivals show on no descriptor: every wait is bounded by the vendor's nap.
    let limit = reg.prepare();
    assert!(limit <= NAP, "a wait over the vendor may last {limit:?}");
    reg.cancel();
    // A notify (shutdown, a send that found no room) ends a long wait at once, from
    // another thread, and is consumed by it.
    for round in 0..2 {
        reg.prepare();
        let v = vendor.clone();
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            v.notify();
        });
        let t = Instant::now();
        reg.sleep(BOUND);
        assert!(
            t.elapsed() < BOUND / 2,
            "round {round}: notify did not end the wait"
        );
        h.join().unwrap();
    }
    reg.prepare();
    let t = Instant::now();
    reg.sleep(Duration::from_millis(20));
    assert!(
        t.elapsed() >= Duration::from_millis(15),
        "the consumed notify woke the next wait"
    );
}

/// The request layer's side in the placing tests: a receive "posted" per message seq
/// (a buffer of `cap` bytes), claimed by the heads that fit; what arrives whole, or is
/// not claimed, is delivered as usual.
struct Posted {
    /// Per seq: the receive buffer, and whether it was claimed.
    bufs: std::collections::HashMap<u64, (Vec<u8>, bool)>,
    delivered: Vec<(Rank, u64, Vec<u8>)>,
    /// Seqs whose claimed payload is in, in the order told.
    placed: Vec<u64>,
    /// Every event in order: ('d' delivered | 'c' claimed | 'p' placed, seq).
    events: Vec<(char, u64)>,
}

impl Posted {
    fn new(seqs: &[(u64, usize)]) -> Posted {
        Posted {
            bufs: seqs
                .iter()
                .map(|&(s, cap)| (s, (vec![0u8; cap], false)))
                .collect(),
            delivered: Vec::new(),
            placed: Vec::new(),
            events: Vec::new(),
        }
    }
}

impl Arrivals for Posted {
    fn deliver(&mut self, src: Rank, hdr: &Header, payload: &[u8]) {
        self.events.push(('d', hdr.cookie));
        self.delivered.push((src, hdr.cookie, payload.to_vec()));
    }
    fn claim(&mut self, _src: Rank, hdr: &Header) -> Option<Placement> {
        let (buf, claimed) = self.bufs.get_mut(&hdr.cookie)?;
        if *claimed || buf.len() < hdr.len as usize {
            return None;
        }
        *claimed = true;
        self.events.push(('c', hdr.cookie));
        Some(Placement {
            dst: buf.as_mut_ptr(),
            len: buf.len(),
            token: hdr.cookie,
        })
    }
    fn placed(&mut self, _src: Rank, token: u64) {
        assert!(self.bufs[&token].1, "placed without a claim");
        self.events.push(('p', token));
        self.placed.push(token);
    }
}

fn len_hdr(src: Rank, seq: u64, len: usize) -> Header {
    Header {
        len: len as u64,
        ..hdr(src, seq)
    }
}

#[test]
fn a_claimed_long_message_lands_in_the_posted_buffer_and_holds_back_nothing() {
    for ahead in MODES {
        let short = 64;
        let w = SimWorld::default();
        let mut a = core(&w, 0, 2, short, ahead);
        let mut b = core(&w, 1, 2, short, ahead);
        // seq 0: long, posted (claimed); 1: short; 2: long, its buffer too small (not
        // claimed: delivered as before, after its rest); 3: short; 4: long, no receive
        // posted; 5: long, posted, but behind the unclaimed ones of its peer (queued, so
        // delivered as before); then 6: long, posted, once nothing waits (claimed).
        let sizes = [5000usize, 10, 3000, 7, 200, 900, 700];
        let mut rx = Posted::new(&[(0, 5000), (2, 100), (5, 1000), (6, 1000)]);
        w.hold_rests(true);
        for (i, &len) in sizes[..6].iter().enumerate() {
            let seq = i as u64;
            assert!(a
                .try_send(1, &len_hdr(0, seq, len), &payload(seq, len))
                .unwrap());
        }
        // Rests held back: 0 is claimed and 1 goes on past it; 2 is not claimed and
        // holds back 3, 4 and 5 (per-peer order).
        for _ in 0..4 {
            b.poll_placing(&mut rx).unwrap();
        }
        assert_eq!(rx.events, vec![('c', 0), ('d', 1)], "ahead {ahead}");
        assert!(!b.placing.is_empty());
        b.publish_quiet();
        assert!(
            !b.events.quiet.load(Ordering::SeqCst),
            "a claimed rest is in flight"
        );
        w.hold_rests(false);
        let start = Instant::now();
        let mut sent_last = false;
        while rx.placed.len() < 2 || rx.delivered.len() < 5 {
            b.poll_placing(&mut rx).unwrap();
            a.poll(&mut |_, _, _| panic!("rank 1 sent nothing"))
                .unwrap();
            if !sent_last && rx.delivered.len() == 5 {
                assert!(a
                    .try_send(1, &len_hdr(0, 6, 700), &payload(6, 700))
                    .unwrap());
                sent_last = true;
            }
            assert!(start.elapsed() < BOUND, "events so far: {:?}", rx.events);
        }
        // Matching order is the sending order: claims and deliveries by seq.
        let matched: Vec<(char, u64)> = rx.events.iter().copied().filter(|e| e.0 != 'p').collect();
        let expected = [
            ('c', 0),
            ('d', 1),
            ('d', 2),
            ('d', 3),
            ('d', 4),
            ('d', 5),
            ('c', 6),
        ];
        assert_eq!(matched, expected, "ahead {ahead}");
        assert_eq!(rx.placed.len(), 2);
        assert_eq!(rx.bufs[&0].0, payload(0, 5000), "placed payload 0");
        assert_eq!(
            &rx.bufs[&6].0[..700],
            &payload(6, 700)[..],
            "placed payload 6"
        );
        assert!(
            rx.bufs[&6].0[700..].iter().all(|&x| x == 0),
            "nothing beyond the payload"
        );
        for (_, seq, bytes) in &rx.delivered {
            assert_eq!(
                *bytes,
                payload(*seq, sizes[*seq as usize]),
                "delivered payload {seq}"
            );
        }
        assert!(b.placing.is_empty() && b.queued == 0);
        assert_eq!(w.posted_ahead(1), ahead);
    }
}

#[test]
fn counted_into_the_tools_counters_without_a_wrapper() {
    static SENT: TransportCounters = TransportCounters::new();
    static RECVD: TransportCounters = TransportCounters::new();
    let w = SimWorld::default();
    let mut a = core(&w, 0, 2, 16, POSTED_AHEAD);
    let mut b = core(&w, 1, 2, 16, POSTED_AHEAD);
    a.counters = Some(&SENT);
    b.counters = Some(&RECVD);
    let mut rx = Posted::new(&[(1, 100)]);
    for (seq, len) in [(0u64, 8usize), (1, 100)] {
        assert!(a
            .try_send(1, &len_hdr(0, seq, len), &payload(seq, len))
            .unwrap());
    }
    let start = Instant::now();
    while rx.delivered.len() + rx.placed.len() < 2 {
        b.poll_placing(&mut rx).unwrap();
        assert!(start.elapsed() < BOUND, "events so far: {:?}", rx.events);
    }
    let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
    assert_eq!(
        (load(&SENT.msgs_sent), load(&SENT.bytes_sent)),
        (2, 64 + 108)
    );
    assert_eq!(
        (load(&RECVD.msgs_recvd), load(&RECVD.bytes_recvd)),
        (2, 64 + 108)
    );
}

#[test]
fn the_pool_reuses_buffers_by_size_class_and_bounds_what_it_keeps() {
    let mut pool = Pool::default();
    // A request between classes takes the class above, whole.
    let b = pool.take(32 * 1024 + HEAD_PREFIX);
    assert!(b.is_empty() && b.capacity() >= 64 * 1024);
    let at = b.as_ptr();
    pool.give(b);
    // The same buffer serves any request of its class, emptied.
    let mut b = pool.take(40 * 1024);
    assert_eq!(b.as_ptr(), at, "reused, not allocated again");
    b.extend_from_slice(&[7; 100]);
    pool.give(b);
    assert!(pool.take(64 * 1024).is_empty());
    // A buffer of an odd capacity serves the class below it, never a larger request.
    pool.give(Vec::with_capacity(48 * 1024));
    let b = pool.take(48 * 1024);
    assert!(b.capacity() >= 48 * 1024);
    let small = pool.take(20 * 1024);
    assert!(small.capacity() >= 20 * 1024);
    // Small and huge buffers are not kept; a class keeps at most its byte budget.
    pool.give(Vec::with_capacity(100));
    let huge = pool.take(4 * MAX_PAYLOAD);
    assert!(huge.capacity() >= 4 * MAX_PAYLOAD);
    pool.give(huge);
    assert!(pool.classes.iter().all(|c| c.len() <= 1));
    for _ in 0..1000 {
        pool.give(Vec::with_capacity(16 * 1024));
    }
    assert_eq!(pool.classes[0].len(), POOL_CLASS_BYTES / (16 * 1024));
    for (k, c) in pool.classes.iter().enumerate() {
        assert!(c.iter().all(|b| b.capacity() >= 1 << (k as u32 + POOL_LOW)));
    }
}

#[test]
fn a_long_rest_travels_in_pieces_and_lands_whole_in_both_modes() {
    for ahead in MODES {
        let short = 4096;
        let w = SimWorld::default();
        let mut a = core(&w, 0, 2, short, ahead);
        let mut b = core(&w, 1, 2, short, ahead);
        // 4096 + 3 × 4096 + 100: a head and four pieces, as vendor sends of their own.
        let len = 4 * short + 100;
        assert!(a.try_send(1, &hdr(0, 1), &payload(1, len)).unwrap());
        assert_eq!(a.sends.len(), 1 + 4);
        assert_eq!(a.send_bytes, HEAD_PREFIX + len);
        let mut lens: Vec<usize> = a.sends.iter().map(|s| s.1.len()).collect();
        lens.remove(0);
        assert_eq!(lens, vec![short, short, short, 100]);
        // Pieces held back: the message waits for all of them.
        w.hold_rests(true);
        assert!(a.try_send(1, &hdr(0, 2), &payload(2, len)).unwrap());
        let mut got = Vec::new();
        let start = Instant::now();
        while got.is_empty() && start.elapsed() < Duration::from_millis(200) {
            take(&mut b, &mut got);
        }
        assert!(
            got.iter().all(|g| g.1 != 2),
            "delivered before its pieces, ahead {ahead}"
        );
        w.hold_rests(false);
        while got.len() < 2 {
            take(&mut b, &mut got);
            take(&mut a, &mut Vec::new());
            assert!(start.elapsed() < BOUND, "only {} of 2 arrived", got.len());
        }
        assert_eq!(got[0], (0, 1, payload(1, len)), "ahead {ahead}");
        assert_eq!(got[1], (0, 2, payload(2, len)), "ahead {ahead}");
        assert_eq!(b.queued, 0);
    }
}

/// Crossing reads run at the same time (`Core::start_read`): a memory request taken by a
/// poll that also delivers a message (the RTS whose read it starts) is held until that
/// read has sent its own request; a reader posts its receives only once its bytes wait,
/// after answering the request that came before them; a poll that delivers nothing
/// answers requests at once.
#[test]
fn a_request_that_comes_with_a_message_is_answered_after_the_read_it_starts() {
    let w = SimWorld::default();
    let mut a = core(&w, 0, 2, 16, POSTED_AHEAD);
    let mut b = core(&w, 1, 2, 16, POSTED_AHEAD);
    let a_data: Vec<u8> = (0..40_000u32).map(|i| (i % 253) as u8).collect();
    let b_data: Vec<u8> = (0..30_000u32).map(|i| (i % 11) as u8 + 3).collect();
    // Rank 0 sends rank 1 a message (its RTS) and asks for rank 1's bytes.
    assert!(a.try_send(1, &hdr(0, 0), &payload(0, 4)).unwrap());
    let mut a_dst = vec![0u8; b_data.len()];
    // SAFETY: a_dst outlives the read, tested below until done.
    let a_read =
        unsafe { a.start_read(1, b_data.as_ptr() as u64, a_dst.as_mut_ptr(), a_dst.len()) }
            .unwrap();
    // Rank 1's poll delivers the message and holds the request: no bytes go to rank 0 yet.
    let mut got = Vec::new();
    assert_eq!(take(&mut b, &mut got), 1);
    assert_eq!(b.held.len(), 1);
    assert!(!a.link.iprobe_bulk(1, TAG_GET_DATA).unwrap());
    // The read that message starts sends rank 1's request first, then answers rank 0's.
    let mut b_dst = vec![0u8; a_data.len()];
    // SAFETY: as above.
    let b_read =
        unsafe { b.start_read(0, a_data.as_ptr() as u64, b_dst.as_mut_ptr(), b_dst.len()) }
            .unwrap();
    assert!(b.held.is_empty());
    assert!(a.link.iprobe_bulk(1, TAG_GET_DATA).unwrap());
    // Rank 0 finds its bytes waiting: it answers rank 1's request (which came before them)
    // before taking them, so rank 1's bytes are on their way before rank 0's read is over.
    let start = Instant::now();
    while !a.test_read(a_read).unwrap() {
        assert!(start.elapsed() < BOUND, "rank 0's read never ended");
    }
    assert!(b.link.iprobe_bulk(0, TAG_GET_DATA).unwrap());
    assert_eq!(a_dst, b_data);
    while !b.test_read(b_read).unwrap() {
        assert!(start.elapsed() < BOUND, "rank 1's read never ended");
    }
    assert_eq!(b_dst, a_data);
    // A request taken by a poll that delivers nothing is answered by that poll.
    let mut b_dst = vec![0u8; 1000];
    // SAFETY: as above.
    let b_read =
        unsafe { b.start_read(0, a_data.as_ptr() as u64, b_dst.as_mut_ptr(), b_dst.len()) }
            .unwrap();
    assert_eq!(take(&mut a, &mut Vec::new()), 0);
    assert!(a.held.is_empty());
    assert!(b.link.iprobe_bulk(0, TAG_GET_DATA).unwrap());
    while !b.test_read(b_read).unwrap() {
        take(&mut a, &mut Vec::new());
        assert!(start.elapsed() < BOUND, "rank 1's second read never ended");
    }
    assert_eq!(b_dst[..], a_data[..1000]);
}
