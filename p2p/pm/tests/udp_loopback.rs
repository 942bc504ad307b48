//! Two PM transports over real UDP sockets on 127.0.0.1, with and without injected faults
//! (the driver's drop/duplicate/reorder knobs): every message arrives once, in order.

use std::time::{Duration, Instant};

use tsunagi_p2p::{Header, Transport};
use tsunagi_pm::transport::{Faults, PmTransport, PmTransportConfig};

fn pair(faults: Faults) -> (PmTransport, PmTransport) {
    let mut cfg = PmTransportConfig::from_env(|_| None).unwrap();
    cfg.interface = Some("127.0.0.1".into());
    cfg.faults = faults;
    let mut a = PmTransport::bind(0, 2, &cfg).unwrap();
    let mut b = PmTransport::bind(1, 2, &cfg).unwrap();
    let ca = tsunagi_pm::parse_card(&a.card()).unwrap();
    let cb = tsunagi_pm::parse_card(&b.card()).unwrap();
    let one = tsunagi_pm::lids::LidWiring::single(2);
    a.set_peers(&[(1, cb)], &one).unwrap();
    b.set_peers(&[(0, ca)], &one).unwrap();
    (a, b)
}

fn payload(i: u64, max: usize) -> Vec<u8> {
    let len = ((i * 7919) % max as u64) as usize;
    (0..len).map(|k| (k as u64 ^ i) as u8).collect()
}

fn exchange(faults: Faults, n: u64) -> [PmTransport; 2] {
    let (a, b) = pair(faults);
    let mut t = [a, b];
    let max = t[0].max_payload().min(100_000);
    let mut next = [0u64; 2];
    let mut got = [0u64; 2];
    let start = Instant::now();
    while got != [n, n] {
        for me in 0..2 {
            let peer = 1 - me as u32;
            while next[me] < n {
                let i = next[me];
                let h = Header {
                    kind: 1,
                    src: me as u32,
                    tag: i as i32,
                    cookie: i,
                    ..Default::default()
                };
                if !t[me].try_send(peer, &h, &payload(i, max)).unwrap() {
                    break;
                }
                next[me] += 1;
            }
            let g = &mut got[me];
            t[me]
                .poll(&mut |src, h: &Header, p: &[u8]| {
                    assert_eq!(src, peer);
                    assert_eq!(h.cookie, *g, "out of order");
                    assert_eq!(p, &payload(*g, max)[..]);
                    *g += 1;
                })
                .unwrap();
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "stuck at {got:?}"
        );
    }
    t
}

#[test]
fn clean_loopback() {
    let t0 = Instant::now();
    let mut t = exchange(Faults::default(), 1500);
    eprintln!(
        "{:?} {:?} {:?}",
        t0.elapsed(),
        t[0].endpoint().link_stats(),
        t[0].endpoint().stats()
    );
    // Acknowledgements travel on their own path: ACKs came in on the acknowledgement
    // socket, and the data socket carried no more datagrams than the peer's data packets.
    for me in 0..2 {
        let peer = t[1 - me].endpoint().link_stats();
        let (acks, data) = (t[me].acks_received(), t[me].received_per_lid()[0]);
        assert!(acks > 0 && acks <= peer.acks_sent, "{acks} {peer:?}");
        assert!(
            data <= peer.data_sent + peer.retransmitted,
            "{data} {peer:?}"
        );
    }
}

#[test]
fn five_percent_loss_duplication_and_reordering() {
    let faults = Faults {
        drop: 0.05,
        duplicate: 0.05,
        reorder: 0.05,
    };
    let mut t = exchange(faults, 1500);
    let s = t[0].endpoint().link_stats();
    assert!(s.retransmitted > 0 && s.duplicates > 0, "{s:?}");
}

#[test]
fn event_source_wakes_on_arrival() {
    let (mut a, mut b) = pair(Faults::default());
    let es = b.event_source();
    let h = Header::default();
    assert!(a.try_send(1, &h, b"ping").unwrap());
    let t0 = Instant::now();
    let tok = es.prepare();
    es.sleep(tok, Duration::from_secs(5));
    assert!(t0.elapsed() < Duration::from_secs(2));
    let mut n = 0;
    while n == 0 {
        n = b
            .poll(&mut |_, _, p: &[u8]| assert_eq!(p, b"ping"))
            .unwrap();
    }
    // The ACK is due later: the deadline says when.
    assert!(b.next_deadline().is_some());
}
