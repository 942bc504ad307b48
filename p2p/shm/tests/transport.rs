//! Single-process tests of the transport API: the leader and the other ranks are separate
//! `ShmTransport`s (separate mappings of the same segment) in one process.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use tsunagi_p2p::{Header, P2pError, Rank, Transport};
use tsunagi_shm::{ShmConfig, ShmTransport};

static N: AtomicUsize = AtomicUsize::new(0);

fn unique(tag: &str) -> String {
    format!(
        "tsunagi-ut-{}-{tag}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

fn path(name: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(format!("/dev/shm/{name}"))
}

/// All ranks of a node as transports in this process.
fn node(name: &str, world: &[Rank], cfg: &ShmConfig) -> Vec<ShmTransport> {
    let mut v = vec![ShmTransport::create(name, world, world[0], cfg).unwrap()];
    for &r in &world[1..] {
        v.push(ShmTransport::attach(name, world, r, cfg).unwrap());
    }
    v
}

fn drain(t: &mut ShmTransport) -> Vec<(Rank, Header, Vec<u8>)> {
    let mut out = Vec::new();
    while t
        .poll(&mut |f, h: &Header, p: &[u8]| out.push((f, *h, p.to_vec())))
        .unwrap()
        > 0
    {}
    out
}

#[test]
fn segment_is_0600_and_unlink_removes_the_name() {
    let name = unique("mode");
    let world = [0, 1];
    let t = node(&name, &world, &ShmConfig::default());
    let meta = std::fs::metadata(path(&name)).expect("segment exists");
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_eq!(meta.len() as usize, t[0].segment_bytes());
    // A second create of the same name fails (O_EXCL).
    match ShmTransport::create(&name, &world, 0, &ShmConfig::default()) {
        Err(P2pError::Os { call, errno }) => {
            assert_eq!(call, "shm_open");
            assert_eq!(errno, libc::EEXIST);
        }
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("second create succeeded"),
    }
    assert!(t[0].all_attached());
    t[0].unlink().unwrap();
    assert!(!path(&name).exists(), "name still in /dev/shm");
    t[0].unlink().unwrap(); // idempotent
    t[1].unlink().unwrap(); // ENOENT is fine
    ShmTransport::unlink_name(&name);
    // Mappings stay valid after unlink.
    let mut t = t;
    assert!(t[1]
        .try_send(
            0,
            &Header {
                kind: 3,
                ..Header::default()
            },
            b"abc"
        )
        .unwrap());
    let got = drain(&mut t[0]);
    assert_eq!(got.len(), 1);
    assert_eq!(
        (got[0].0, got[0].1.kind, &got[0].2[..]),
        (1, 3, &b"abc"[..])
    );
}

#[test]
fn leader_drop_unlinks_and_unlink_name_cleans_up() {
    let name = unique("drop");
    let t = ShmTransport::create(&name, &[0, 1], 0, &ShmConfig::default()).unwrap();
    assert!(path(&name).exists());
    drop(t);
    assert!(!path(&name).exists());
    let name = unique("clean");
    let t = ShmTransport::create(&name, &[0, 1], 0, &ShmConfig::default()).unwrap();
    ShmTransport::unlink_name(&name);
    assert!(!path(&name).exists());
    drop(t);
}

#[test]
fn attach_checks_the_rank_list() {
    let name = unique("check");
    let cfg = ShmConfig {
        attach_timeout: Duration::from_millis(200),
        ..ShmConfig::default()
    };
    let _t = ShmTransport::create(&name, &[2, 4, 6], 2, &cfg).unwrap();
    assert!(ShmTransport::attach(&name, &[2, 4], 4, &cfg).is_err());
    assert!(ShmTransport::attach(&name, &[2, 5, 6], 5, &cfg).is_err());
    assert!(ShmTransport::attach(&name, &[2, 4, 6], 7, &cfg).is_err());
    assert!(ShmTransport::attach(&name, &[4, 2, 6], 4, &cfg).is_err());
    assert!(ShmTransport::attach(&unique("missing"), &[2, 4, 6], 4, &cfg).is_err());
    assert!(ShmTransport::attach(&name, &[2, 4, 6], 6, &cfg).is_ok());
    assert!(ShmTransport::create("bad/name", &[0], 0, &cfg).is_err());
}

#[test]
fn geometry_follows_the_leader_and_eager_fits() {
    let name = unique("geo");
    let leader_cfg = ShmConfig {
        eager_limit: 40_000,
        cell_bytes: 1000,
        cells_per_ring: 5,
        ..ShmConfig::default()
    };
    let t0 = ShmTransport::create(&name, &[0, 1], 0, &leader_cfg).unwrap();
    let t1 = ShmTransport::attach(&name, &[0, 1], 1, &ShmConfig::default()).unwrap();
    for t in [&t0, &t1] {
        let (cell, cells) = t.geometry();
        assert_eq!(cell % 64, 0);
        assert_eq!(cells, 5);
        assert_eq!(t.eager_limit(), 40_000);
        assert!(t.max_payload() >= t.eager_limit());
        assert_eq!(t.max_payload(), cell - 40);
    }
    // Defaults: ~16 KiB eager, memory reasonable for 8 ranks.
    let d = ShmConfig::default();
    assert!(d.eager_limit >= 8192);
    let name = unique("geo8");
    let world: Vec<Rank> = (0..8).collect();
    let t = ShmTransport::create(&name, &world, 0, &d).unwrap();
    assert!(t.max_payload() >= d.eager_limit);
    assert!(t.segment_bytes() < 64 << 20, "{} bytes", t.segment_bytes());
    // Many ranks: the segment stays bounded.
    let name = unique("geo64");
    let world: Vec<Rank> = (0..64).collect();
    let t = ShmTransport::create(&name, &world, 0, &d).unwrap();
    assert!(t.segment_bytes() <= d.max_segment_bytes + (1 << 20));
}

#[test]
fn self_and_foreign_ranks_and_oversized_payloads_are_errors() {
    let name = unique("err");
    let mut t = node(&name, &[3, 7], &ShmConfig::default());
    let h = Header::default();
    assert!(matches!(
        t[0].try_send(3, &h, b""),
        Err(P2pError::Unsupported(_))
    ));
    assert!(matches!(
        t[0].try_send(4, &h, b""),
        Err(P2pError::Unsupported(_))
    ));
    assert!(matches!(
        t[0].try_send(100, &h, b""),
        Err(P2pError::Unsupported(_))
    ));
    let big = vec![0u8; t[0].max_payload() + 1];
    assert!(t[0].try_send(7, &h, &big).is_err());
    assert_eq!(t[0].name(), "shm");
}

#[test]
fn fifo_wraparound_and_full_ring() {
    let name = unique("fifo");
    let cfg = ShmConfig {
        cells_per_ring: 4,
        cell_bytes: 256,
        eager_limit: 128,
        poll_batch: 1,
        ..ShmConfig::default()
    };
    let mut t = node(&name, &[10, 11], &cfg);
    let mut next_send = 0u64;
    let mut next_recv = 0u64;
    let mut freed = 1;
    for round in 0..200u64 {
        // Fill until the ring reports full.
        let mut k = 0;
        loop {
            let h = Header {
                cookie: next_send,
                src: 10,
                ..Header::default()
            };
            let len = (next_send % 200) as usize;
            let payload: Vec<u8> = (0..len).map(|j| (next_send as usize + j) as u8).collect();
            if !t[0].try_send(11, &h, &payload).unwrap() {
                break;
            }
            next_send += 1;
            k += 1;
        }
        // Records take the lines their size needs (1 to 4 here), so how many fit after a
        // partial drain varies; a drained ring always takes at least one.
        assert!(k >= freed, "round {round}: {k} fitted");
        // A record at least as large as the one refused finds no room either.
        assert!(
            !t[0].try_send(11, &Header::default(), &[0; 199]).unwrap(),
            "still full"
        );
        // Consume a varying number so head and tail wrap at different phases.
        let take = (1 + (round * 7 % 4) as usize).min((next_send - next_recv) as usize);
        for _ in 0..take {
            let n = t[1]
                .poll(&mut |f, h: &Header, p: &[u8]| {
                    assert_eq!(f, 10);
                    assert_eq!(h.cookie, next_recv, "FIFO");
                    assert_eq!(p.len(), (next_recv % 200) as usize);
                    assert!(p
                        .iter()
                        .enumerate()
                        .all(|(j, &b)| b == (next_recv as usize + j) as u8));
                    next_recv += 1;
                })
                .unwrap();
            assert_eq!(n, 1, "poll_batch 1 delivers one message per peer");
        }
        freed = 0;
        if next_send == next_recv {
            freed = 1;
        }
    }
    let rest = drain(&mut t[1]);
    assert_eq!(rest.len() as u64, next_send - next_recv);
    for (_, h, _) in rest {
        assert_eq!(h.cookie, next_recv);
        next_recv += 1;
    }
}

#[test]
fn all_payload_sizes_with_checksums() {
    let name = unique("sizes");
    let cfg = ShmConfig {
        cells_per_ring: 3,
        cell_bytes: 2048,
        eager_limit: 1024,
        ..ShmConfig::default()
    };
    let mut t = node(&name, &[0, 1], &cfg);
    let max = t[0].max_payload();
    let mut buf = vec![0u8; max];
    for len in 0..=max {
        fill(0, 1, len as u64, &mut buf[..len]);
        let h = Header {
            len: len as u64,
            cookie: checksum(&buf[..len]),
            ..Header::default()
        };
        assert!(t[0].try_send(1, &h, &buf[..len]).unwrap());
        let got = drain(&mut t[1]);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].2.len(), len);
        assert_eq!(checksum(&got[0].2), h.cookie);
        assert_eq!(got[0].1, h);
    }
    // Also with the default (large) cells, a few sizes around the edges.
    let name = unique("sizes2");
    let mut t = node(&name, &[0, 1], &ShmConfig::default());
    let max = t[0].max_payload();
    let mut buf = vec![0u8; max];
    for len in [0, 1, 7, 8, 23, 24, 25, 63, 64, 65, 4096, max - 1, max] {
        fill(1, 0, len as u64, &mut buf[..len]);
        let h = Header {
            cookie: checksum(&buf[..len]),
            ..Header::default()
        };
        assert!(t[1].try_send(0, &h, &buf[..len]).unwrap());
        let got = drain(&mut t[0]);
        assert_eq!(checksum(&got[0].2), h.cookie, "len {len}");
    }
}

#[test]
fn poll_is_bounded_and_round_robin() {
    let name = unique("rr");
    let cfg = ShmConfig {
        poll_batch: 4,
        cells_per_ring: 64,
        ..ShmConfig::default()
    };
    let mut t = node(&name, &[0, 1, 2], &cfg);
    for i in 0..50u64 {
        assert!(t[1]
            .try_send(
                0,
                &Header {
                    cookie: i,
                    ..Header::default()
                },
                b"chatty"
            )
            .unwrap());
    }
    assert!(t[2]
        .try_send(
            0,
            &Header {
                cookie: 1000,
                ..Header::default()
            },
            b"quiet"
        )
        .unwrap());
    let mut from = Vec::new();
    let n = t[0].poll(&mut |f, _, _| from.push(f)).unwrap();
    assert!(n <= 8, "poll must be bounded, delivered {n}");
    assert!(
        from.contains(&2),
        "the quiet peer must not starve: {from:?}"
    );
    // Per-peer FIFO over the remaining polls.
    let mut next = from.iter().filter(|&&f| f == 1).count() as u64;
    for (f, h, _) in drain(&mut t[0]) {
        assert_eq!(f, 1);
        assert_eq!(h.cookie, next);
        next += 1;
    }
    assert_eq!(next, 50);
}

#[test]
fn event_source_outlives_transport_and_notify_wakes() {
    let name = unique("ev");
    let mut t = node(&name, &[0, 1], &ShmConfig::default());
    let ev = t[1].event_source();
    let t1 = t.pop().unwrap();
    drop(t1); // mapping must stay alive through `ev`
    let tok = ev.prepare();
    ev.notify();
    let s = std::time::Instant::now();
    ev.sleep(tok, Duration::from_secs(5));
    assert!(s.elapsed() < Duration::from_secs(1));
    // A send to rank 1 after prepare makes sleep return at once.
    let tok = ev.prepare();
    assert!(t[0].try_send(1, &Header::default(), b"x").unwrap());
    let s = std::time::Instant::now();
    ev.sleep(tok, Duration::from_secs(5));
    assert!(s.elapsed() < Duration::from_secs(1));
    // Without an event it times out.
    let tok = ev.prepare();
    let s = std::time::Instant::now();
    ev.sleep(tok, Duration::from_millis(50));
    assert!(s.elapsed() >= Duration::from_millis(40));
}

#[test]
fn cma_within_one_process_and_disabled_config() {
    let name = unique("cma");
    let mut t = node(&name, &[0, 1], &ShmConfig::default());
    // Both "ranks" are this process: CMA reads our own memory.
    let src: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
    assert!(t[0].single_copy(1));
    let mut dst = vec![0u8; src.len()];
    t[0].read_remote(1, src.as_ptr() as u64, &mut dst).unwrap();
    assert_eq!(src, dst);
    let name = unique("nocma");
    let cfg = ShmConfig {
        cma: false,
        ..ShmConfig::default()
    };
    let mut t = node(&name, &[0, 1], &cfg);
    assert!(!t[0].single_copy(1));
    assert!(matches!(
        t[0].read_remote(1, src.as_ptr() as u64, &mut dst),
        Err(P2pError::Unsupported(_))
    ));
}

#[test]
fn one_local_rank_is_fine() {
    let name = unique("one");
    let mut t = ShmTransport::create(&name, &[42], 42, &ShmConfig::default()).unwrap();
    assert_eq!(t.poll(&mut |_, _, _| panic!("no peers")).unwrap(), 0);
    assert!(t.all_attached());
}

/// A private (memfd) segment: no name in /dev/shm at any time, the others attach through
/// the leader's card, and once the leader closed the way in, nobody new can attach while
/// the attached ranks go on exchanging messages.
#[test]
fn private_segment_has_no_name_and_closes_its_way_in() {
    let cfg = ShmConfig::default();
    let world = [0, 1, 2];
    let label = unique("private");
    let leader = ShmTransport::create_private(&label, &world, 0, &cfg).unwrap();
    assert!(
        !path(&label).exists(),
        "a private segment must not appear in /dev/shm"
    );
    let card = leader.card().expect("card before unlink");
    let mut a = ShmTransport::attach_card(&card, &world, 1, &cfg).unwrap();
    let mut b = ShmTransport::attach_card(&card, &world, 2, &cfg).unwrap();
    leader.unlink().unwrap();
    assert_eq!(leader.card(), None);
    let err = ShmTransport::attach_card(&card, &world, 2, &cfg);
    assert!(err.is_err(), "attached after the leader closed the way in");
    assert!(ShmTransport::attach_card("garbage", &world, 2, &cfg).is_err());
    let h = Header {
        kind: 1,
        src: 1,
        tag: 7,
        len: 3,
        ..Header::default()
    };
    assert!(a.try_send(2, &h, b"abc").unwrap());
    let got = drain(&mut b);
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].0, got[0].2.as_slice()), (1, &b"abc"[..]));
    drop(leader);
}

/// Waiting through the wake-up socket (one wait over several transports, the event
/// registry): a send after `prepare` wakes the waiter, before or during its sleep, and the
/// wake-up is consumed so that the next wait blocks.
#[test]
fn registry_wait_is_woken_by_a_send() {
    use std::time::Instant;
    use tsunagi_p2p::registry::EventRegistry;
    let name = unique("registry");
    let mut v = node(&name, &[0, 1], &ShmConfig::default());
    let mut t1 = v.pop().unwrap();
    let mut t0 = v.pop().unwrap();
    let reg = EventRegistry::new(vec![t1.event_source()]).expect("shm joins a registry");
    let hdr = Header {
        kind: 3,
        ..Header::default()
    };
    // Sent between prepare and sleep: the sleep returns at once.
    assert_eq!(reg.prepare(), Duration::MAX);
    assert!(drain(&mut t1).is_empty());
    assert!(t0.try_send(1, &hdr, b"early").unwrap());
    let t = Instant::now();
    reg.sleep(Duration::from_secs(10));
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert_eq!(drain(&mut t1).len(), 1);
    // Consumed: an idle wait times out.
    reg.prepare();
    let t = Instant::now();
    reg.sleep(Duration::from_millis(30));
    assert!(t.elapsed() >= Duration::from_millis(25));
    // Sent while the waiter sleeps.
    reg.prepare();
    let h = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        assert!(t0.try_send(1, &hdr, b"late").unwrap());
        t0
    });
    let t = Instant::now();
    reg.sleep(Duration::from_secs(10));
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    let _t0 = h.join().unwrap();
    let got = drain(&mut t1);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].2, b"late");
    let _ = std::fs::remove_file(path(&name));
}

#[test]
fn counts_its_traffic_into_the_counters_it_is_given() {
    use tsunagi_p2p::{TransportCounters, HEADER_BYTES};
    // Leaked: the transports keep `&'static` references to them.
    let c0: &'static TransportCounters = Box::leak(Box::new(TransportCounters::new()));
    let c1: &'static TransportCounters = Box::leak(Box::new(TransportCounters::new()));
    let name = unique("counts");
    let mut v = node(&name, &[0, 1], &ShmConfig::default());
    let mut t1 = v.pop().unwrap();
    let mut t0 = v.pop().unwrap();
    // Traffic before count_into goes nowhere these counters see.
    assert!(t0.try_send(1, &Header::default(), b"uncounted").unwrap());
    assert_eq!(drain(&mut t1).len(), 1);
    assert!(t0.count_into(c0) && t1.count_into(c1));
    for len in [0usize, 8, 100] {
        assert!(t0.try_send(1, &Header::default(), &vec![7u8; len]).unwrap());
    }
    assert_eq!(drain(&mut t1).len(), 3);
    let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let bytes = (3 * HEADER_BYTES + 108) as u64;
    assert_eq!((get(&c0.msgs_sent), get(&c0.bytes_sent)), (3, bytes));
    assert_eq!((get(&c1.msgs_recvd), get(&c1.bytes_recvd)), (3, bytes));
    assert_eq!((get(&c0.msgs_recvd), get(&c1.msgs_sent)), (0, 0));
}
