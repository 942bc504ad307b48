//! The TCP transport over loopback: two (or three) transports in one process, each driven
//! by its own thread or interleaved on one, through the public API only.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use tsunagi_p2p::framing::test_data::{checksum, hdr};
use tsunagi_p2p::{EventSource, Header, P2pError, Rank, Transport};
use tsunagi_tcp::transport::{MAX_PAYLOAD, QUEUE_BOUND};
use tsunagi_tcp::{parse_card, JobKey, TcpConfig, TcpTransport};

fn cfg(key: &str) -> TcpConfig {
    let mut c = TcpConfig::new(JobKey::derive(key));
    c.interface = Some("127.0.0.1".into());
    c.connect_timeout = Duration::from_secs(5);
    c
}

/// `n` transports that know each other.
fn mesh(n: usize, key: &str) -> Vec<TcpTransport> {
    let mut ts: Vec<TcpTransport> = (0..n)
        .map(|r| TcpTransport::bind(r as Rank, &cfg(key)).unwrap())
        .collect();
    let cards: Vec<_> = ts.iter().map(|t| parse_card(&t.card()).unwrap()).collect();
    for (r, t) in ts.iter_mut().enumerate() {
        let peers: Vec<_> = (0..n)
            .filter(|&p| p != r)
            .map(|p| (p as Rank, cards[p]))
            .collect();
        t.set_peers(&peers);
    }
    ts
}

fn payload(seq: u32) -> Vec<u8> {
    let len = match seq % 97 {
        0 => MAX_PAYLOAD,
        1 => 0,
        k if k % 7 == 0 => 100_000 + (seq as usize * 7919) % 300_000,
        _ => (seq as usize * 131) % 4097,
    };
    (0..len)
        .map(|i| (i as u32 ^ seq.wrapping_mul(2654435761)) as u8)
        .collect()
}

const N: u32 = 3000;

/// Send N messages to `peer` while receiving N from it; verify order and content.
/// Returns how often `try_send` reported back-pressure.
fn exchange(t: &mut TcpTransport, peer: Rank) -> usize {
    let (mut next_send, mut next_recv, mut bp) = (0u32, 0u32, 0usize);
    let mut cur = payload(0);
    let deadline = Instant::now() + Duration::from_secs(120);
    while next_send < N || next_recv < N {
        assert!(
            Instant::now() < deadline,
            "exchange stalled at {next_send}/{next_recv}"
        );
        if next_send < N {
            let h = hdr(next_send, cur.len(), checksum(&cur));
            if t.try_send(peer, &h, &cur).unwrap() {
                next_send += 1;
                cur = payload(next_send);
            } else {
                bp += 1;
            }
        }
        t.poll(&mut |from, h, p| {
            assert_eq!(from, peer);
            assert_eq!(h.tag as u32, next_recv, "out of order");
            assert_eq!(p.len(), payload(next_recv).len());
            assert_eq!(h.cookie, checksum(p), "payload corrupted");
            next_recv += 1;
        })
        .unwrap();
    }
    bp
}

/// Keep polling until the queued tail is in the socket (a send completes once queued).
fn drain(t: &mut TcpTransport, how_long: Duration) {
    let end = Instant::now() + how_long;
    while Instant::now() < end {
        t.poll(&mut |_, _, _| {}).unwrap();
        thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn exchange_both_ways_with_backpressure() {
    let mut ts = mesh(2, "exchange");
    let mut b = ts.pop().unwrap();
    let mut a = ts.pop().unwrap();
    let ta = thread::spawn(move || {
        let bp = exchange(&mut a, 1);
        drain(&mut a, Duration::from_millis(300));
        bp
    });
    let tb = thread::spawn(move || {
        // Start late, so rank 0's queue certainly fills: back-pressure must happen.
        thread::sleep(Duration::from_millis(300));
        let bp = exchange(&mut b, 0);
        drain(&mut b, Duration::from_millis(300));
        bp
    });
    let bp_a = ta.join().unwrap();
    let bp_b = tb.join().unwrap();
    eprintln!("back-pressure: rank 0 {bp_a}, rank 1 {bp_b}");
    assert!(bp_a > 0, "rank 0 never saw back-pressure");
}

#[test]
fn queue_is_bounded_when_peer_does_not_read() {
    let mut ts = mesh(2, "bound");
    let mut b = ts.pop().unwrap();
    let mut a = ts.pop().unwrap();
    let big = vec![5u8; MAX_PAYLOAD];
    let mut accepted = 0usize;
    let deadline = Instant::now() + Duration::from_secs(20);
    // Rank 1 only accepts the connection (one poll per round) but reads nothing more than
    // the kernel buffers; rank 0's queue must stop growing.
    let mut refusals = 0;
    while refusals < 50 {
        assert!(Instant::now() < deadline);
        a.poll(&mut |_, _, _| {}).unwrap();
        if a.try_send(1, &hdr(0, big.len(), 0), &big).unwrap() {
            accepted += 1;
            refusals = 0;
        } else {
            refusals += 1;
        }
        if accepted < 2 {
            b.poll(&mut |_, _, _| {}).unwrap();
        }
        assert!(
            accepted * MAX_PAYLOAD < 64 * QUEUE_BOUND,
            "no back-pressure after {accepted} messages"
        );
    }
    // Once the receiver reads, everything arrives.
    let mut got = 0;
    while got < accepted {
        assert!(Instant::now() < deadline, "got {got} of {accepted}");
        a.poll(&mut |_, _, _| {}).unwrap();
        b.poll(&mut |_, _, p| {
            assert_eq!(p.len(), MAX_PAYLOAD);
            got += 1;
        })
        .unwrap();
    }
    assert!(a.try_send(1, &hdr(0, 0, 0), &[]).unwrap());
}

/// Both ranks send first at the same moment: one link survives and every message arrives
/// in order on both sides.
#[test]
fn simultaneous_connect_is_resolved() {
    for round in 0..10 {
        let mut ts = mesh(2, &format!("simul{round}"));
        let mut b = ts.pop().unwrap();
        let mut a = ts.pop().unwrap();
        let go = Arc::new(std::sync::Barrier::new(2));
        let run = |t: &mut TcpTransport, peer: Rank, go: Arc<std::sync::Barrier>| {
            go.wait();
            let next = std::cell::Cell::new(0u32);
            let mut check = |from: Rank, h: &Header, p: &[u8]| {
                assert_eq!(from, peer);
                assert_eq!(h.tag as u32, next.get());
                assert_eq!(p, next.get().to_le_bytes());
                next.set(next.get() + 1);
            };
            for i in 0..50u32 {
                while !t.try_send(peer, &hdr(i, 4, 0), &i.to_le_bytes()).unwrap() {
                    t.poll(&mut check).unwrap();
                }
            }
            let deadline = Instant::now() + Duration::from_secs(20);
            while next.get() < 50 {
                assert!(Instant::now() < deadline, "stuck at {}", next.get());
                t.poll(&mut check).unwrap();
            }
            drain(t, Duration::from_millis(50));
        };
        let g2 = go.clone();
        let h = thread::spawn(move || {
            run(&mut b, 0, g2);
            b
        });
        run(&mut a, 1, go);
        let b = h.join().unwrap();
        assert_eq!(a.refused_connections() + b.refused_connections(), 0);
    }
}

#[test]
fn wrong_key_and_garbage_are_refused() {
    let mut ts = mesh(2, "refuse");
    let mut b = ts.pop().unwrap();
    let mut a = ts.pop().unwrap();
    let addr = parse_card(&a.card()).unwrap();
    // A hello with another job's key, as rank 1.
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // The acceptor speaks first: its challenge.
    let mut challenge = [0u8; tsunagi_tcp::handshake::CHALLENGE_BYTES];
    let deadline = Instant::now() + Duration::from_secs(10);
    s.set_nonblocking(true).unwrap();
    let mut got = 0;
    while got < challenge.len() {
        assert!(Instant::now() < deadline);
        a.poll(&mut |_, _, _| panic!()).unwrap();
        match s.read(&mut challenge[got..]) {
            Ok(n) => got += n,
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
    s.set_nonblocking(false).unwrap();
    let nonce = tsunagi_tcp::handshake::decode_challenge(&challenge).unwrap();
    let bad = tsunagi_tcp::handshake::encode_hello(&JobKey::derive("other job"), &nonce, 1, 0);
    s.write_all(&bad).unwrap();
    let mut buf = [0u8; 16];
    let deadline = Instant::now() + Duration::from_secs(10);
    while a.refused_connections() == 0 {
        assert!(Instant::now() < deadline);
        a.poll(&mut |_, _, _| panic!("no message may come from a refused connection"))
            .unwrap();
    }
    // Closed without a verdict.
    assert_eq!(s.read(&mut buf).unwrap_or(0), 0);
    // Plain garbage (an HTTP request) is refused too.
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n......")
        .unwrap();
    while a.refused_connections() < 2 {
        assert!(Instant::now() < deadline);
        a.poll(&mut |_, _, _| panic!()).unwrap();
    }
    // The right key still works afterwards.
    assert!(b.try_send(0, &hdr(1, 2, 0), b"ok").unwrap());
    let mut got = None;
    while got.is_none() {
        assert!(Instant::now() < deadline);
        b.poll(&mut |_, _, _| {}).unwrap();
        a.poll(&mut |from, _, p| got = Some((from, p.to_vec())))
            .unwrap();
    }
    assert_eq!(got, Some((1, b"ok".to_vec())));
}

fn poll_until_error(t: &mut TcpTransport) -> (usize, P2pError) {
    let mut n = 0;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        assert!(Instant::now() < deadline, "no error reported");
        match t.poll(&mut |_, _, _| n += 1) {
            Ok(_) => thread::sleep(Duration::from_millis(1)),
            Err(e) => return (n, e),
        }
    }
}

#[test]
fn peer_crash_is_peer_failed_and_graceful_close_is_quiet() {
    let mut ts = mesh(2, "crash");
    let mut b = ts.pop().unwrap();
    let mut a = ts.pop().unwrap();
    assert!(b.try_send(0, &hdr(0, 3, 0), b"abc").unwrap());
    // Let the link form and the message go out.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut n = 0;
    while n == 0 {
        assert!(Instant::now() < deadline);
        b.poll(&mut |_, _, _| {}).unwrap();
        a.poll(&mut |_, _, _| n += 1).unwrap();
    }
    b.abort();
    let (_, e) = poll_until_error(&mut a);
    assert!(matches!(e, P2pError::PeerFailed { peer: 1, .. }), "{e:?}");
    assert!(matches!(
        a.try_send(1, &hdr(0, 0, 0), &[]),
        Err(P2pError::PeerFailed { peer: 1, .. })
    ));
    assert!(a.poll(&mut |_, _, _| {}).is_ok(), "reported once");

    // A graceful drop after large messages: everything arrives, no error.
    let mut ts = mesh(2, "graceful");
    let b = ts.pop().unwrap();
    let mut a = ts.pop().unwrap();
    let mut b = b;
    let big = vec![9u8; MAX_PAYLOAD];
    for i in 0..4 {
        assert!(b.try_send(0, &hdr(i, big.len(), 0), &big).unwrap());
    }
    let dropper = thread::spawn(move || drop(b));
    let mut got = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    while got < 4 {
        assert!(Instant::now() < deadline, "got {got}");
        a.poll(&mut |_, h, p| {
            assert_eq!(h.tag, got);
            assert_eq!(p.len(), MAX_PAYLOAD);
            got += 1;
        })
        .expect("a graceful close is not a failure");
    }
    dropper.join().unwrap();
    let end = Instant::now() + Duration::from_millis(300);
    while Instant::now() < end {
        a.poll(&mut |_, _, _| {})
            .expect("goodbye then EOF is quiet");
    }
    assert!(matches!(
        a.try_send(1, &hdr(0, 0, 0), &[]),
        Err(P2pError::PeerFailed { peer: 1, .. })
    ));
}

#[test]
fn unreachable_peer_fails_after_the_timeout() {
    let mut c = cfg("unreach");
    c.connect_timeout = Duration::from_millis(500);
    let mut a = TcpTransport::bind(0, &c).unwrap();
    // A port nobody listens on: connects are refused and retried until the timeout.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    a.set_peers(&[(1, dead)]);
    assert!(a.try_send(1, &hdr(0, 1, 0), b"x").unwrap());
    let start = Instant::now();
    let (_, e) = poll_until_error(&mut a);
    assert!(matches!(e, P2pError::PeerFailed { peer: 1, .. }), "{e:?}");
    assert!(start.elapsed() < Duration::from_secs(5));
    // Unknown peers and oversized payloads are refused at once.
    assert!(matches!(
        a.try_send(5, &hdr(0, 0, 0), &[]),
        Err(P2pError::Unsupported(_))
    ));
    assert!(matches!(
        a.try_send(1, &hdr(0, 0, 0), &vec![0; MAX_PAYLOAD + 1]),
        Err(P2pError::Other(_))
    ));
}

#[test]
fn event_source_wakes_another_thread() {
    let mut ts = mesh(2, "wake");
    let mut b = ts.pop().unwrap();
    let mut a = ts.pop().unwrap();
    assert_eq!(a.name(), "tcp");
    let sleep_on = |es: Arc<dyn EventSource>| {
        thread::spawn(move || {
            let t = es.prepare();
            let start = Instant::now();
            es.sleep(t, Duration::from_secs(20));
            start.elapsed()
        })
    };
    // A new connection wakes the sleeper.
    let s = sleep_on(a.event_source());
    thread::sleep(Duration::from_millis(100));
    assert!(b.try_send(0, &hdr(1, 1, 0), b"x").unwrap());
    // b must make progress for its connect/handshake to go on.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut n = 0;
    let slept = loop {
        b.poll(&mut |_, _, _| {}).unwrap();
        if s.is_finished() {
            break s.join().unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "sleeper not woken by a connection"
        );
        thread::sleep(Duration::from_millis(1));
    };
    assert!(slept < Duration::from_secs(10));
    while n == 0 {
        assert!(Instant::now() < deadline);
        b.poll(&mut |_, _, _| {}).unwrap();
        a.poll(&mut |_, _, _| n += 1).unwrap();
    }
    // Data on the established link wakes it too.
    let s = sleep_on(a.event_source());
    thread::sleep(Duration::from_millis(100));
    assert!(b.try_send(0, &hdr(2, 1, 0), b"y").unwrap());
    assert!(s.join().unwrap() < Duration::from_secs(10));
    a.poll(&mut |_, _, _| {}).unwrap();
    // notify() from another thread.
    let es = a.event_source();
    let es2 = a.event_source();
    let waker = thread::spawn(move || {
        thread::sleep(Duration::from_millis(100));
        es2.notify();
    });
    let start = Instant::now();
    es.sleep(es.prepare(), Duration::from_secs(20));
    assert!(start.elapsed() < Duration::from_secs(10));
    waker.join().unwrap();
}

#[test]
fn three_ranks_all_pairs() {
    let ts = mesh(3, "three");
    let handles: Vec<_> = ts
        .into_iter()
        .enumerate()
        .map(|(me, mut t)| {
            thread::spawn(move || {
                let peers: Vec<Rank> = (0..3).filter(|&p| p != me as Rank).collect();
                for &p in &peers {
                    for i in 0..20u32 {
                        let body = (me as u32 * 1000 + i).to_le_bytes();
                        while !t.try_send(p, &hdr(i, 4, 0), &body).unwrap() {
                            t.poll(&mut |_, _, _| {}).unwrap();
                        }
                    }
                }
                let mut next = [0u32; 3];
                let deadline = Instant::now() + Duration::from_secs(20);
                while peers.iter().any(|&p| next[p as usize] < 20) {
                    assert!(Instant::now() < deadline);
                    t.poll(&mut |from, h, p| {
                        assert_eq!(h.tag as u32, next[from as usize]);
                        assert_eq!(p, (from * 1000 + next[from as usize]).to_le_bytes());
                        next[from as usize] += 1;
                    })
                    .unwrap();
                }
                drain(&mut t, Duration::from_millis(100));
                t
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}
