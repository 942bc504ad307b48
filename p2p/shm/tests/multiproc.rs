//! Multi-process tests over real shared memory: each test re-executes this binary once per
//! rank (see `common::run_job`).

mod common;

use std::time::{Duration, Instant};

use common::*;
use tsunagi_p2p::{Header, P2pError, Rank, Transport};
use tsunagi_shm::{ShmConfig, ShmTransport};

const JOB_TIMEOUT: Duration = Duration::from_secs(240);

/// Every rank sends `per_pair` messages of random sizes to every other rank, interleaved,
/// and checks order, sizes, headers and contents of everything it receives. Idle ranks
/// sleep on the doorbell (1 s timeout); a sleep that times out means a lost wake-up.
fn exchange(job: &Job, world: &[Rank], cfg: &ShmConfig, per_pair: u64) {
    let mut t = job.setup(world, cfg);
    let me = world[job.rank];
    let max = t.max_payload();
    assert!(max >= t.eager_limit());
    let peers: Vec<Rank> = world.iter().copied().filter(|&r| r != me).collect();
    let np = peers.len();
    // Sender state per peer: next index, size of that message (drawn once, kept until sent).
    let mut send_rng: Vec<Rng> = peers
        .iter()
        .map(|&p| Rng::new((me as u64) << 32 | p as u64))
        .collect();
    let mut next_size: Vec<usize> = send_rng.iter_mut().map(|r| r.size(max)).collect();
    let mut sent = vec![0u64; np];
    // Receiver state per peer: expected index and the generator that drew its sizes.
    let mut recv_rng: Vec<Rng> = peers
        .iter()
        .map(|&p| Rng::new((p as u64) << 32 | me as u64))
        .collect();
    let mut received = vec![0u64; np];
    let mut buf = vec![0u8; max];
    let mut expect = vec![0u8; max];
    let events = t.event_source();
    let mut idle = 0u32;
    let mut lost_wakeups = 0;
    let mut sleeps = 0;
    let mut bytes = 0u64;
    let mut total_recv = 0u64;
    let started = Instant::now();
    let idx_of = |r: Rank| peers.iter().position(|&p| p == r).unwrap();
    let mut sink_check = |from: Rank, h: &Header, payload: &[u8]| {
        let k = idx_of(from);
        let i = received[k];
        assert_eq!(h.src, from, "src field");
        assert_eq!(h.cookie, i, "order from rank {from}");
        let size = recv_rng[k].size(max);
        assert_eq!(payload.len(), size, "size of msg {i} from {from}");
        assert_eq!(h.len, size as u64);
        assert_eq!(h.tag, (i % 1000) as i32);
        assert_eq!(h.context, me);
        fill(from, me, i, &mut expect[..size]);
        assert!(expect[..size] == *payload, "payload of msg {i} from {from}");
        assert_eq!(h.reserved as u64, checksum(payload) & 0xffff, "checksum");
        received[k] += 1;
        bytes += size as u64;
    };
    loop {
        // After a run of idle rounds, announce the sleep *before* this round's sends and
        // receives: a ring full at our last try may have been drained since (its consumer
        // rang our doorbell then), so the last look before sleeping must retry the sends
        // too, not only poll.
        let sleep_token = (idle >= 20).then(|| events.prepare());
        let mut progress = false;
        for k in 0..np {
            // Send a few per peer per round so rings of all peers fill concurrently.
            for _ in 0..4 {
                if sent[k] == per_pair {
                    break;
                }
                let i = sent[k];
                let size = next_size[k];
                fill(me, peers[k], i, &mut buf[..size]);
                let h = Header {
                    kind: 1,
                    flags: 0,
                    reserved: (checksum(&buf[..size]) & 0xffff) as u16,
                    src: me,
                    tag: (i % 1000) as i32,
                    context: peers[k],
                    len: size as u64,
                    cookie: i,
                };
                if t.try_send(peers[k], &h, &buf[..size]).expect("try_send") {
                    sent[k] += 1;
                    next_size[k] = send_rng[k].size(max);
                    progress = true;
                } else {
                    break;
                }
            }
        }
        let n = t.poll(&mut sink_check).expect("poll");
        total_recv += n as u64;
        if n > 0 {
            progress = true;
        }
        let done = sent.iter().all(|&s| s == per_pair) && total_recv == per_pair * np as u64;
        if done || progress {
            if sleep_token.is_some() {
                events.cancel();
            }
            if done {
                break;
            }
            idle = 0;
            continue;
        }
        let Some(tok) = sleep_token else {
            idle += 1;
            if idle < 20 {
                std::thread::yield_now();
            }
            continue;
        };
        let s = Instant::now();
        events.sleep(tok, Duration::from_secs(1));
        sleeps += 1;
        if s.elapsed() >= Duration::from_millis(950) {
            lost_wakeups += 1;
        }
    }
    assert!(received.iter().all(|&r| r == per_pair));
    eprintln!(
        "rank {me}: {} msgs, {} bytes received in {:?}, {sleeps} sleeps",
        per_pair * np as u64,
        bytes,
        started.elapsed()
    );
    assert_eq!(
        lost_wakeups, 0,
        "a sleep timed out although peers were active"
    );
}

#[test]
fn exchange_2_ranks() {
    run_job("exchange_2_ranks", 2, &[], JOB_TIMEOUT, |job| {
        let world = job.world(1, 0);
        exchange(job, &world, &ShmConfig::default(), 20_000);
    });
}

#[test]
fn exchange_4_ranks_small_rings() {
    // Non-contiguous world ranks and tiny rings: wrap-around and full rings all the time.
    run_job("exchange_4_ranks_small_rings", 4, &[], JOB_TIMEOUT, |job| {
        let world = job.world(3, 5);
        let cfg = ShmConfig {
            cells_per_ring: 4,
            cell_bytes: 4096,
            eager_limit: 2048,
            ..ShmConfig::default()
        };
        exchange(job, &world, &cfg, 5_000);
    });
}

#[test]
fn exchange_8_ranks() {
    run_job("exchange_8_ranks", 8, &[], JOB_TIMEOUT, |job| {
        let world = job.world(1, 16);
        exchange(job, &world, &ShmConfig::default(), 1_500);
    });
}

/// Poll until one message arrives; returns (from, header, payload).
fn recv_one(t: &mut ShmTransport) -> (Rank, Header, Vec<u8>) {
    let mut got = None;
    let deadline = Instant::now() + Duration::from_secs(60);
    while got.is_none() {
        t.poll(&mut |from, h: &Header, p: &[u8]| {
            assert!(got.is_none(), "only one message expected at a time");
            got = Some((from, *h, p.to_vec()));
        })
        .unwrap();
        assert!(Instant::now() < deadline, "recv timed out");
        if got.is_none() {
            std::thread::yield_now();
        }
    }
    got.unwrap()
}

fn send_blocking(t: &mut ShmTransport, peer: Rank, h: &Header, p: &[u8]) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !t.try_send(peer, h, p).unwrap() {
        assert!(Instant::now() < deadline, "send timed out");
        std::thread::yield_now();
    }
}

#[test]
fn cma_read_remote() {
    run_job(
        "cma_read_remote",
        2,
        &[("TSUNAGI_SHM_CMA", "1")],
        JOB_TIMEOUT,
        |job| {
            let world = [0, 1];
            let cfg = ShmConfig::from_env();
            assert!(cfg.cma);
            let mut t = job.setup(&world, &cfg);
            let len = (4 << 20) + 13;
            if job.rank == 1 {
                let mut src = vec![0u8; len];
                fill(1, 0, 77, &mut src);
                let h = Header {
                    kind: 9,
                    src: 1,
                    len: len as u64,
                    cookie: src.as_ptr() as u64,
                    ..Header::default()
                };
                send_blocking(&mut t, 0, &h, &[]);
                // Keep `src` alive until rank 0 has read it.
                let (from, ack, _) = recv_one(&mut t);
                assert_eq!((from, ack.kind), (0, 10));
                drop(src);
            } else {
                let (from, h, _) = recv_one(&mut t);
                assert_eq!((from, h.kind), (1, 9));
                assert!(
                    t.single_copy(1),
                    "CMA should work between our own processes"
                );
                let mut dst = vec![0u8; h.len as usize];
                let s = Instant::now();
                t.read_remote(1, h.cookie, &mut dst).expect("read_remote");
                let el = s.elapsed();
                let mut expect = vec![0u8; len];
                fill(1, 0, 77, &mut expect);
                assert!(dst == expect, "CMA data differs");
                eprintln!(
                    "read_remote of {len} bytes took {el:?} ({:.2} GB/s)",
                    len as f64 / el.as_secs_f64() / 1e9
                );
                // Unaligned sub-range.
                let mut part = vec![0u8; 1001];
                t.read_remote(1, h.cookie + 4097, &mut part).unwrap();
                assert_eq!(&part[..], &expect[4097..5098]);
                // A bad address is an OS error, not a crash.
                let mut small = [0u8; 16];
                match t.read_remote(1, 8, &mut small) {
                    Err(P2pError::Os { call, .. }) => assert_eq!(call, "process_vm_readv"),
                    other => panic!("expected an Os error, got {other:?}"),
                }
                // Not a local peer / self.
                assert!(t.read_remote(0, h.cookie, &mut small).is_err());
                assert!(!t.single_copy(0));
                assert!(!t.single_copy(55));
                send_blocking(
                    &mut t,
                    1,
                    &Header {
                        kind: 10,
                        ..Header::default()
                    },
                    &[],
                );
            }
        },
    );
}

#[test]
fn cma_disabled_by_env_streams_through_ring() {
    run_job(
        "cma_disabled_by_env_streams_through_ring",
        2,
        &[("TSUNAGI_SHM_CMA", "0")],
        JOB_TIMEOUT,
        |job| {
            let world = [4, 9];
            let cfg = ShmConfig::from_env();
            assert!(!cfg.cma, "TSUNAGI_SHM_CMA=0 must disable CMA");
            let mut t = job.setup(&world, &cfg);
            let peer = world[1 - job.rank];
            assert!(!t.single_copy(peer));
            let mut b = [0u8; 8];
            assert!(matches!(
                t.read_remote(peer, 4096, &mut b),
                Err(P2pError::Unsupported(_))
            ));
            // The fallback the core uses: stream 3 MiB in max_payload chunks.
            let total = 3 << 20;
            let chunk = t.max_payload();
            if job.rank == 0 {
                let mut data = vec![0u8; total];
                fill(4, 9, 1, &mut data);
                for (i, c) in data.chunks(chunk).enumerate() {
                    let h = Header {
                        kind: 3,
                        cookie: i as u64,
                        ..Header::default()
                    };
                    send_blocking(&mut t, 9, &h, c);
                }
                let (_, h, _) = recv_one(&mut t);
                assert_eq!(h.cookie, checksum(&data));
            } else {
                let mut out = Vec::with_capacity(total);
                let mut next = 0u64;
                while out.len() < total {
                    t.poll(&mut |from, h: &Header, p: &[u8]| {
                        assert_eq!(from, 4);
                        assert_eq!(h.cookie, next);
                        next += 1;
                        out.extend_from_slice(p);
                    })
                    .unwrap();
                }
                let h = Header {
                    kind: 4,
                    cookie: checksum(&out),
                    ..Header::default()
                };
                send_blocking(&mut t, 4, &h, &[]);
            }
        },
    );
}

#[test]
fn doorbell_wakes_sleeping_receiver() {
    run_job(
        "doorbell_wakes_sleeping_receiver",
        2,
        &[],
        JOB_TIMEOUT,
        |job| {
            let world = [0, 1];
            let mut t = job.setup(&world, &ShmConfig::default());
            if job.rank == 1 {
                let ev = t.event_source();
                // Drop the transport's own handle later: the event source must keep the mapping.
                send_blocking(
                    &mut t,
                    0,
                    &Header {
                        kind: 1,
                        ..Header::default()
                    },
                    &[],
                );
                let mut got: Option<(Header, u64)> = None;
                let mut slept_total = Duration::ZERO;
                while got.is_none() {
                    let tok = ev.prepare();
                    t.poll(&mut |_, h: &Header, _| got = Some((*h, mono_ns())))
                        .unwrap();
                    if got.is_some() {
                        ev.cancel();
                        break;
                    }
                    let s = Instant::now();
                    ev.sleep(tok, Duration::from_secs(10));
                    slept_total += s.elapsed();
                    t.poll(&mut |_, h: &Header, _| got = Some((*h, mono_ns())))
                        .unwrap();
                }
                let (h, woke) = got.unwrap();
                assert_eq!(h.kind, 2);
                let latency = Duration::from_nanos(woke - h.cookie);
                eprintln!("wake-up latency across processes: {latency:?} (slept {slept_total:?})");
                assert!(
                    slept_total >= Duration::from_millis(100),
                    "did not really sleep"
                );
                assert!(
                    latency < Duration::from_millis(500),
                    "woken too late: {latency:?}"
                );
            } else {
                let (_, h, _) = recv_one(&mut t);
                assert_eq!(h.kind, 1);
                std::thread::sleep(Duration::from_millis(300));
                let h = Header {
                    kind: 2,
                    cookie: mono_ns(),
                    ..Header::default()
                };
                send_blocking(&mut t, 1, &h, &[]);
            }
        },
    );
}

#[test]
fn consumer_wakes_producer_blocked_on_full_ring() {
    run_job(
        "consumer_wakes_producer_blocked_on_full_ring",
        2,
        &[],
        JOB_TIMEOUT,
        |job| {
            let world = [0, 1];
            let cfg = ShmConfig {
                cells_per_ring: 8,
                ..ShmConfig::default()
            };
            let mut t = job.setup(&world, &cfg);
            if job.rank == 0 {
                // Wait for rank 1's hello so it is attached and about to drain later.
                let (_, h, _) = recv_one(&mut t);
                assert_eq!(h.kind, 1);
                let mut n = 0;
                while t
                    .try_send(
                        1,
                        &Header {
                            kind: 5,
                            cookie: n,
                            ..Header::default()
                        },
                        &[0; 100],
                    )
                    .unwrap()
                {
                    n += 1;
                }
                // 100-byte messages take 3 lines of 64 bytes; one line stays spare.
                assert_eq!(
                    n,
                    (8 * 16448 / 64 - 1) / 3,
                    "the ring holds what its lines hold"
                );
                let ev = t.event_source();
                let tok = ev.prepare();
                assert!(!t
                    .try_send(
                        1,
                        &Header {
                            kind: 5,
                            cookie: n,
                            ..Header::default()
                        },
                        &[0; 100]
                    )
                    .unwrap());
                let s = Instant::now();
                ev.sleep(tok, Duration::from_secs(20));
                let el = s.elapsed();
                eprintln!("producer slept {el:?} until the consumer freed room");
                assert!(
                    el >= Duration::from_millis(100),
                    "woke before the consumer drained"
                );
                assert!(
                    el < Duration::from_secs(5),
                    "producer not woken by the consumer"
                );
                send_blocking(
                    &mut t,
                    1,
                    &Header {
                        kind: 6,
                        cookie: n,
                        ..Header::default()
                    },
                    &[],
                );
            } else {
                send_blocking(
                    &mut t,
                    0,
                    &Header {
                        kind: 1,
                        ..Header::default()
                    },
                    &[],
                );
                std::thread::sleep(Duration::from_millis(300));
                let mut seen = 0u64;
                let mut done = None;
                while done.is_none() {
                    t.poll(&mut |_, h: &Header, _| {
                        if h.kind == 6 {
                            done = Some(h.cookie);
                        } else {
                            assert_eq!(h.cookie, seen);
                            seen += 1;
                        }
                    })
                    .unwrap();
                    std::thread::yield_now();
                }
                assert_eq!(
                    Some(seen),
                    done,
                    "every message the producer counted arrived"
                );
                assert!(seen > 8, "small messages take lines, not cells");
            }
        },
    );
}

#[test]
fn dead_peer_reported_when_ring_stays_full() {
    run_job(
        "dead_peer_reported_when_ring_stays_full",
        2,
        &[],
        JOB_TIMEOUT,
        |job| {
            let world = [0, 1];
            let cfg = ShmConfig {
                cells_per_ring: 4,
                ..ShmConfig::default()
            };
            let mut t = job.setup(&world, &cfg);
            if job.rank == 1 {
                // Attached (setup returned), now vanish without consuming anything.
                std::process::exit(0);
            }
            let pid = t.peer_pid(1).expect("rank 1 attached");
            let deadline = Instant::now() + Duration::from_secs(60);
            let mut accepted = 0;
            loop {
                match t.try_send(1, &Header::default(), b"hello") {
                    Ok(true) => accepted += 1,
                    Ok(false) => {}
                    Err(e) => {
                        assert!(is_peer_failed(&e), "unexpected error {e}");
                        break;
                    }
                }
                // A 5-byte message takes one 64-byte line; one line stays spare.
                assert!(accepted < 4 * 16448 / 64);
                assert!(
                    Instant::now() < deadline,
                    "dead peer (pid {pid}) never reported"
                );
            }
        },
    );
}

/// Each message races a sleep: rank 1 announces a sleep as soon as it has nothing, and
/// rank 0 sends after a short random delay, so sends land before, during and after the
/// receiver's announcement and final poll. The senders skip their fence when both ranks
/// registered for membarrier (`barrier.rs`): a sleep that lasts to its 10 s timeout is a
/// lost wake-up (a loaded machine can stall the sender for a good part of a second). Run both ways (`TSUNAGI_SHM_MEMBARRIER=0` keeps the fence per send).
fn every_message_races_a_sleep(job: &Job) {
    const ROUNDS: u64 = 400;
    let world = [0, 1];
    let mut t = job.setup(&world, &ShmConfig::default());
    if job.rank == 0 {
        let mut rng = Rng::new(7);
        for i in 0..ROUNDS {
            let until = Instant::now() + Duration::from_nanos(rng.next() % 40_000);
            while Instant::now() < until {
                std::hint::spin_loop();
            }
            let h = Header {
                kind: 3,
                cookie: i,
                ..Header::default()
            };
            send_blocking(&mut t, 1, &h, b"race");
            // The ack, polled (this side never sleeps).
            let (_, a, _) = recv_one(&mut t);
            assert_eq!((a.kind, a.cookie), (4, i));
        }
    } else {
        let ev = t.event_source();
        let mut longest = Duration::ZERO;
        for i in 0..ROUNDS {
            let mut got: Option<Header> = None;
            loop {
                t.poll(&mut |_, h: &Header, _| got = Some(*h)).unwrap();
                if got.is_some() {
                    break;
                }
                let tok = ev.prepare();
                t.poll(&mut |_, h: &Header, _| got = Some(*h)).unwrap();
                if got.is_some() {
                    ev.cancel();
                    break;
                }
                let s = Instant::now();
                ev.sleep(tok, Duration::from_secs(10));
                longest = longest.max(s.elapsed());
            }
            let h = got.unwrap();
            assert_eq!((h.kind, h.cookie), (3, i));
            let ack = Header {
                kind: 4,
                cookie: i,
                ..Header::default()
            };
            send_blocking(&mut t, 0, &ack, &[]);
        }
        eprintln!("longest sleep over {ROUNDS} racing messages: {longest:?}");
        assert!(
            longest < Duration::from_secs(9),
            "a sleep lasted {longest:?}: a wake-up was lost"
        );
    }
}

#[test]
fn every_message_races_a_sleep_without_sender_fences() {
    run_job(
        "every_message_races_a_sleep_without_sender_fences",
        2,
        &[],
        JOB_TIMEOUT,
        every_message_races_a_sleep,
    );
}

#[test]
fn every_message_races_a_sleep_with_sender_fences() {
    run_job(
        "every_message_races_a_sleep_with_sender_fences",
        2,
        &[("TSUNAGI_SHM_MEMBARRIER", "0")],
        JOB_TIMEOUT,
        every_message_races_a_sleep,
    );
}
