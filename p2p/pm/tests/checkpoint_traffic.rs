//! Checkpoints in the middle of traffic between two PM transports over UDP on 127.0.0.1,
//! each driven by its own thread as two processes would be, with 5 % loss, duplication and
//! reordering injected: rank 0 asks for checkpoints while messages of every size (eager,
//! and RDMA rendezvous with reads in both directions) flow both ways; rank 1 joins each
//! through the markers. Every message arrives exactly once and in order, every checkpoint
//! is taken by both ranks, and the images written decode.

use std::time::{Duration, Instant};

use tsunagi_p2p::{Header, Rank, Transport};
use tsunagi_pm::checkpoint::CheckpointConfig;
use tsunagi_pm::pm::PmContext;
use tsunagi_pm::transport::{Faults, PmTransport, PmTransportConfig};

const MSGS: u64 = 600;
const RTS: u8 = 1;
const FIN: u8 = 2;
const EAGER: u8 = 3;

fn body(owner: Rank, i: u64) -> Vec<u8> {
    let len = match i % 10 {
        0 => 200_000 + (i as usize * 37) % 5000,
        _ => (i as usize * 7919) % 3000,
    };
    (0..len)
        .map(|k| (k as u64 ^ i ^ (owner as u64 * 77)) as u8)
        .collect()
}

fn send(t: &mut PmTransport, peer: Rank, h: Header, p: &[u8], inbox: &mut Vec<(Header, Vec<u8>)>) {
    let start = Instant::now();
    while !t.try_send(peer, &h, p).unwrap() {
        t.poll(&mut |_, h: &Header, p: &[u8]| inbox.push((*h, p.to_vec())))
            .unwrap();
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no room for 60 s"
        );
    }
}

/// One rank's traffic; returns its checkpoints (taken, abandoned). The transport is dropped
/// here, as at a process's end: it lingers until the peer has all of our data.
fn rank(mut t: PmTransport, me: Rank, checkpoint_every: Option<u64>) -> (u64, u64) {
    let peer = 1 - me;
    let mine: Vec<Vec<u8>> = (0..MSGS).map(|i| body(me, i)).collect();
    let (mut next, mut got) = (0u64, 0u64);
    let mut fins = 0u64;
    let mut inbox: Vec<(Header, Vec<u8>)> = Vec::new();
    let start = Instant::now();
    while next < MSGS || got < MSGS || fins < MSGS / 10 {
        if next < MSGS {
            let i = next;
            let b = &mine[i as usize];
            if b.len() > t.eager_limit() {
                // SAFETY: `mine` outlives the peer's read (we wait for every FIN).
                let token = unsafe { t.expose(peer, b.as_ptr(), b.len()) }.unwrap();
                let h = Header {
                    kind: RTS,
                    src: me,
                    len: b.len() as u64,
                    cookie: i,
                    ..Default::default()
                };
                send(&mut t, peer, h, &token.to_ne_bytes(), &mut inbox);
            } else {
                let h = Header {
                    kind: EAGER,
                    src: me,
                    cookie: i,
                    ..Default::default()
                };
                send(&mut t, peer, h, b, &mut inbox);
            }
            next += 1;
            if checkpoint_every.is_some_and(|k| i % k == k / 2 && i < MSGS * 8 / 10) {
                t.request_checkpoint();
            }
        }
        t.poll(&mut |_, h: &Header, p: &[u8]| inbox.push((*h, p.to_vec())))
            .unwrap();
        for (h, p) in std::mem::take(&mut inbox) {
            match h.kind {
                EAGER | RTS => {
                    assert_eq!(h.cookie, got, "rank {me}: exactly once, in order");
                    let data = if h.kind == RTS {
                        let token = u64::from_ne_bytes(p[..8].try_into().unwrap());
                        let mut d = vec![0u8; h.len as usize];
                        t.read_remote(peer, token, &mut d).unwrap();
                        let fin = Header {
                            kind: FIN,
                            src: me,
                            cookie: h.cookie,
                            ..Default::default()
                        };
                        send(&mut t, peer, fin, &[], &mut inbox);
                        d
                    } else {
                        p
                    };
                    assert!(data == body(peer, got), "rank {me}: data of message {got}");
                    got += 1;
                }
                FIN => fins += 1,
                k => panic!("kind {k}"),
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "rank {me} stuck at {next}/{got}/{fins}"
        );
    }
    let done = t.checkpoints();
    drop(t);
    drop(mine);
    done
}

#[test]
fn checkpoints_mid_traffic_lose_and_duplicate_nothing() {
    let dir = std::env::temp_dir().join(format!("tsunagi-pm-ckpt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut cfg = PmTransportConfig::from_env(|_| None).unwrap();
    cfg.interface = Some("127.0.0.1".into());
    cfg.faults = Faults {
        drop: 0.05,
        duplicate: 0.05,
        reorder: 0.05,
    };
    cfg.checkpoint = CheckpointConfig {
        dir: Some(dir.clone()),
        ..Default::default()
    };
    let mut a = PmTransport::bind(0, 2, &cfg).unwrap();
    let mut b = PmTransport::bind(1, 2, &cfg).unwrap();
    let ca = tsunagi_pm::parse_card(&a.card()).unwrap();
    let cb = tsunagi_pm::parse_card(&b.card()).unwrap();
    let one = tsunagi_pm::lids::LidWiring::single(2);
    a.set_peers(&[(1, cb)], &one).unwrap();
    b.set_peers(&[(0, ca)], &one).unwrap();
    let tb = std::thread::spawn(move || rank(b, 1, None));
    let (ta, xa) = rank(a, 0, Some(50));
    let (tb, xb) = tb.join().unwrap();
    eprintln!("checkpoints: rank 0 {ta} taken {xa} abandoned, rank 1 {tb} taken {xb} abandoned");
    assert!(ta >= 5 && xa == 0, "rank 0: {ta} taken, {xa} abandoned");
    assert_eq!((tb, xb), (ta, 0), "rank 1 joins every checkpoint");
    for r in 0..2 {
        let img = std::fs::read(dir.join(format!("pm-{r}.img"))).unwrap();
        let ctx = PmContext::decode(&img).unwrap();
        assert_eq!(ctx.rank(), r);
        assert_eq!(ctx.encode(), img);
        for cut in [0, 7, img.len() / 2, img.len() - 1] {
            assert!(PmContext::decode(&img[..cut]).is_err());
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
