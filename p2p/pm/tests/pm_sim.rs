//! PM endpoints (rings, shared receive queue, PUSH/PULL, checkpoint) through the simulated
//! lossy network: every message arrives exactly once and in order per sender.

// Ranks index several matrices at once (next[src][dst], got[dst][src]).
#![allow(clippy::needless_range_loop)]

use std::time::{Duration, Instant};

use tsunagi_pm::lossy::{Impairments, LossyNet, Rng};
use tsunagi_pm::nic::Access;
use tsunagi_pm::pm::{PmConfig, PmEndpoint, ReceiveMode};

struct World {
    eps: Vec<PmEndpoint>,
    net: LossyNet,
    now: Instant,
    buf: Vec<u8>,
}

impl World {
    fn new(n: usize, cfg: PmConfig, imp: Impairments, seed: u64) -> World {
        let mut eps: Vec<PmEndpoint> = (0..n)
            .map(|r| PmEndpoint::new(r as u32, n, 1000 + r as u32, cfg))
            .collect();
        for (r, ep) in eps.iter_mut().enumerate() {
            for p in 0..n {
                if p != r {
                    ep.add_peer(p as u32, 1000 + p as u32);
                }
            }
        }
        World {
            eps,
            net: LossyNet::new(imp, seed),
            now: Instant::now(),
            buf: Vec::new(),
        }
    }

    /// Move datagrams: everything due goes out, everything arrived is handled; time
    /// advances by `dt`.
    fn step(&mut self, dt: Duration) {
        for ep in self.eps.iter_mut() {
            while let Some(to) = ep.poll_transmit(self.now, &mut self.buf) {
                self.net.send(self.now, to as usize, self.buf.clone());
            }
            if let Some(e) = ep.take_error() {
                panic!("rank {}: {e}", ep.me());
            }
        }
        for (to, d) in self.net.arrived(self.now) {
            self.eps[to].handle_datagram(self.now, &d);
        }
        self.now += dt;
    }
}

fn body(src: u32, i: u64, max: usize) -> Vec<u8> {
    let mut r = Rng::new(i * 7 + src as u64);
    let len = 12 + r.below(max as u64 - 12) as usize;
    let mut b = src.to_le_bytes().to_vec();
    b.extend_from_slice(&i.to_le_bytes());
    b.extend((12..len).map(|k| (k as u64 ^ i ^ src as u64) as u8));
    b
}

/// Every rank sends `n` messages to every other; returns the world when all arrived.
fn all_to_all(mut w: World, n: u64, max_len: usize, limit: Duration) -> World {
    let size = w.eps.len();
    let mut next = vec![vec![0u64; size]; size]; // next[src][dst]
    let mut got = vec![vec![0u64; size]; size]; // got[dst][src]
    let t0 = w.now;
    loop {
        for src in 0..size {
            for dst in 0..size {
                if src == dst {
                    continue;
                }
                while next[src][dst] < n {
                    let b = body(src as u32, next[src][dst], max_len);
                    match w.eps[src].get_send_buffer(dst as u32, b.len()).unwrap() {
                        Some(buf) => buf.copy_from_slice(&b),
                        None => break,
                    }
                    w.eps[src].send(dst as u32, b.len()).unwrap();
                    next[src][dst] += 1;
                }
            }
        }
        w.step(Duration::from_micros(20));
        for dst in 0..size {
            while let Some(r) = w.eps[dst].receive() {
                let m = w.eps[dst].message(&r);
                let src = u32::from_le_bytes(m[..4].try_into().unwrap());
                let i = u64::from_le_bytes(m[4..12].try_into().unwrap());
                assert_eq!(src, r.peer);
                assert_eq!(
                    i, got[dst][src as usize],
                    "out of order from {src} at {dst}"
                );
                assert_eq!(m, &body(src, i, max_len)[..], "damaged message {i}");
                got[dst][src as usize] += 1;
                w.eps[dst].release();
            }
        }
        let done = (0..size).all(|d| (0..size).all(|s| s == d || got[d][s] == n));
        if done && w.eps.iter().all(|e| e.is_stable()) {
            eprintln!("simulated {:?}", w.now - t0);
            for e in &w.eps {
                eprintln!("{:?} {:?}", e.stats(), e.link_stats());
            }
            return w;
        }
        assert!(w.now - t0 < limit, "stuck: {got:?}");
    }
}

fn impaired() -> Impairments {
    Impairments {
        loss: 0.05,
        duplicate: 0.05,
        corrupt: 0.01,
        delay: Duration::from_micros(50),
        jitter: Duration::from_micros(200),
    }
}

fn small_rings() -> PmConfig {
    PmConfig {
        receive: ReceiveMode::Rings {
            ring_bytes: 64 << 10,
        },
        wr_data: 1024,
        ..Default::default()
    }
}

#[test]
fn rings_deliver_exactly_once_in_order_under_loss() {
    let w = World::new(3, small_rings(), impaired(), 5);
    let max = small_rings().max_message();
    let w = all_to_all(w, 400, max, Duration::from_secs(300));
    for ep in &w.eps {
        let s = ep.stats();
        // Small rings filled up: the tail was refreshed lazily, by PULL, and the ring
        // wrapped many times.
        assert!(s.tail_pulls > 0 && s.tail_pulls < s.messages_sent, "{s:?}");
        assert_eq!(s.messages_received, 800);
        assert!(ep.link_stats().retransmitted > 0);
    }
}

#[test]
fn tail_is_pulled_only_when_the_ring_runs_low() {
    // Plenty of ring for everything (never half full): no tail traffic at all.
    let cfg = PmConfig::default();
    let w = World::new(2, cfg, Impairments::default(), 1);
    let w = all_to_all(w, 50, 200, Duration::from_secs(10));
    assert_eq!(w.eps[0].stats().tail_pulls, 0);
}

/// A sender streaming into a ring asks for the receiver's tail once the ring is past half
/// full, before it runs out of room, and not again while that request is out; with the
/// fresh tail back, the ring never stops it.
#[test]
fn tail_is_refreshed_before_the_ring_runs_out() {
    let cfg = small_rings();
    let ring = 64 << 10;
    let mut a = PmEndpoint::new(0, 2, 1000, cfg);
    let mut b = PmEndpoint::new(1, 2, 1001, cfg);
    a.add_peer(1, 1001);
    b.add_peer(0, 1000);
    let now = Instant::now();
    let mut buf = Vec::new();
    let body = 4000;
    let record = ring / 16; // 4000 bytes, header and trailer, aligned: 4096
    let mut sent = 0;
    let mut got = 0;
    // Fill the ring to just over half without delivering anything.
    while (sent + 1) * record <= ring / 2 {
        let s = a.get_send_buffer(1, body).unwrap().expect("room");
        s.fill(sent as u8);
        a.send(1, body).unwrap();
        sent += 1;
    }
    let s = a.stats();
    assert_eq!((s.tail_pulls, s.ring_full), (0, 0), "{s:?}");
    // The next message goes (there is room) and asks for the tail, once.
    for _ in 0..2 {
        let s = a.get_send_buffer(1, body).unwrap().expect("room");
        s.fill(sent as u8);
        a.send(1, body).unwrap();
        sent += 1;
    }
    let s = a.stats();
    assert_eq!((s.tail_pulls, s.ring_full), (1, 0), "{s:?}");
    // The receiver takes everything; the tail comes back; the sender keeps streaming
    // 200 messages (12 rings) with the receiver consuming as they come.
    for round in 0..10_000 {
        let t = now + Duration::from_micros(round * 10);
        while let Some(to) = a.poll_transmit(t, &mut buf) {
            assert_eq!(to, 1);
            b.handle_datagram(t, &buf);
        }
        while let Some(r) = b.receive() {
            assert_eq!(b.message(&r)[0], got as u8);
            b.release();
            got += 1;
        }
        while b.poll_transmit(t, &mut buf).is_some() {
            a.handle_datagram(t, &buf);
        }
        if sent < 200 {
            if let Some(s) = a.get_send_buffer(1, body).unwrap() {
                s.fill(sent as u8);
                a.send(1, body).unwrap();
                sent += 1;
            }
        } else if got == sent {
            break;
        }
    }
    assert_eq!(got, 200);
    let s = a.stats();
    assert!(s.tail_pulls >= 12 && s.tail_pulls < 200, "{s:?}");
}

#[test]
fn shared_receive_queue_under_loss_and_constant_memory() {
    let cfg = PmConfig {
        receive: ReceiveMode::Shared {
            buffers: 16,
            buffer_bytes: 2048,
        },
        wr_data: 2048,
        ..Default::default()
    };
    let w = World::new(4, cfg, impaired(), 7);
    let w = all_to_all(w, 200, 2048, Duration::from_secs(300));
    // A pool of 16 buffers for 3 senders: some SENDs found it full and came again.
    assert!(w.eps.iter().any(|e| e.stats().pool_full > 0));
    // Receive memory as peers grow: constant with the shared queue, linear with rings.
    let mem = |cfg: PmConfig, peers: usize| {
        let n = peers + 1;
        let mut ep = PmEndpoint::new(0, n, 1, cfg);
        for p in 1..n {
            ep.add_peer(p as u32, 1);
        }
        // The control region (8 bytes per rank) is the only part that grows.
        ep.receive_memory() - 8 * n
    };
    let shared: Vec<usize> = [2, 4, 8].iter().map(|&p| mem(cfg, p)).collect();
    let rings: Vec<usize> = [2, 4, 8].iter().map(|&p| mem(small_rings(), p)).collect();
    eprintln!("receive memory for 2, 4, 8 peers: shared {shared:?}, rings {rings:?}");
    assert!(shared.iter().all(|&m| m == 16 * 2048), "{shared:?}");
    assert_eq!(rings, vec![2 * 65536, 4 * 65536, 8 * 65536]);
}

#[test]
fn push_and_pull_on_registered_regions_and_pin_down_cache() {
    let mut w = World::new(2, PmConfig::default(), impaired(), 3);
    let rw = Access {
        remote_write: true,
        remote_read: true,
    };
    let key = w.eps[1].register(100_000, rw);
    let data: Vec<u8> = (0..60_000u32).map(|i| (i * 7) as u8).collect();
    assert!(w.eps[0].push(1, key, 1000, &data).unwrap());
    // A message after the PUSH arrives after it: PM's ordering.
    let b = w.eps[0].get_send_buffer(1, 4).unwrap().unwrap();
    b.copy_from_slice(b"done");
    w.eps[0].send(1, 4).unwrap();
    loop {
        w.step(Duration::from_micros(20));
        if let Some(r) = w.eps[1].receive() {
            assert_eq!(w.eps[1].message(&r), b"done");
            w.eps[1].release();
            break;
        }
    }
    assert_eq!(&w.eps[1].region(key)[1000..61_000], &data[..]);
    let tag = w.eps[0].pull(1, key, 5000, 4000).unwrap().unwrap();
    let got = loop {
        w.step(Duration::from_micros(20));
        if let Some(r) = w.eps[0].pull_result(tag) {
            break r.unwrap();
        }
    };
    assert_eq!(got, &data[4000..8000]);
    // Outside the region: refused, reported, not a crash.
    let tag = w.eps[0].pull(1, key, 99_000, 4000).unwrap().unwrap();
    let r = loop {
        w.step(Duration::from_micros(20));
        if let Some(r) = w.eps[0].pull_result(tag) {
            break r;
        }
    };
    assert!(r.is_err());
    // The pin-down cache reuses a registration for the same buffer.
    let buf = vec![0u8; 4096];
    let k1 = w.eps[0].register_cached(buf.as_ptr() as usize, buf.len(), rw);
    let k2 = w.eps[0].register_cached(buf.as_ptr() as usize, buf.len(), rw);
    assert_eq!(k1, k2);
    assert_eq!(
        (w.eps[0].stats().pin_hits, w.eps[0].stats().pin_misses),
        (1, 1)
    );
}

#[test]
fn checkpoint_mid_traffic_loses_and_duplicates_nothing() {
    let cfg = small_rings();
    let max = cfg.max_message();
    let mut w = World::new(2, cfg, impaired(), 11);
    let n = 600u64;
    let (mut next, mut got) = ([0u64; 2], [0u64; 2]);
    let mut checkpointed = false;
    let t0 = w.now;
    loop {
        for src in 0..2 {
            while next[src] < n {
                let b = body(src as u32, next[src], max);
                match w.eps[src].get_send_buffer(1 - src as u32, b.len()).unwrap() {
                    Some(buf) => buf.copy_from_slice(&b),
                    None => break,
                }
                w.eps[src].send(1 - src as u32, b.len()).unwrap();
                next[src] += 1;
            }
        }
        w.step(Duration::from_micros(20));
        for dst in 0..2 {
            // Take messages slowly so that some wait in the rings at the checkpoint.
            if let Some(r) = w.eps[dst].receive() {
                let m = w.eps[dst].message(&r).to_vec();
                let i = u64::from_le_bytes(m[4..12].try_into().unwrap());
                assert_eq!(i, got[dst], "at rank {dst}");
                assert_eq!(m, body(1 - dst as u32, i, max));
                got[dst] += 1;
                w.eps[dst].release();
            }
        }
        if !checkpointed && got[0] > 100 && got[1] > 100 {
            checkpointed = true;
            // pmSendStable: stop sending, keep the network going until nothing is in flight.
            w.eps.iter_mut().for_each(|e| e.quiesce());
            while !w.eps.iter().all(|e| e.is_stable()) {
                w.step(Duration::from_micros(20));
            }
            for e in w.eps.iter_mut() {
                let p = 1 - e.me();
                assert!(e.get_send_buffer(p, 8).unwrap().is_none());
            }
            // pmSaveContext, then a "restart": fresh endpoints, new epochs, contexts put back.
            let ctx: Vec<_> = w.eps.iter().map(|e| e.save_context().unwrap()).collect();
            let mut fresh: Vec<PmEndpoint> = (0..2)
                .map(|r| PmEndpoint::new(r, 2, 2000 + r, cfg))
                .collect();
            for (r, e) in fresh.iter_mut().enumerate() {
                e.restore_context(&ctx[r]).unwrap();
                e.set_peer_epoch(1 - r as u32, 2000 + 1 - r as u32);
            }
            w.eps = fresh;
            // pmControlSend.
            w.eps.iter_mut().for_each(|e| e.resume());
        }
        if got == [n, n] {
            break;
        }
        assert!(w.now - t0 < Duration::from_secs(300), "stuck at {got:?}");
    }
    assert!(checkpointed);
}

#[test]
fn garbage_datagrams_are_counted_not_fatal() {
    let mut w = World::new(2, PmConfig::default(), Impairments::default(), 1);
    let mut r = Rng::new(5);
    for _ in 0..1000 {
        let len = r.below(100) as usize;
        let d: Vec<u8> = (0..len).map(|_| r.next_u64() as u8).collect();
        w.eps[0].handle_datagram(w.now, &d);
    }
    assert_eq!(w.eps[0].stats().malformed_datagrams, 1000);
    let w = all_to_all(w, 10, 100, Duration::from_secs(10));
    assert_eq!(w.eps[1].stats().messages_received, 10);
}
