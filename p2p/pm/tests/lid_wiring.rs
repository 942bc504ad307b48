//! Several ports per endpoint standing for LIDs (`TSUNAGI_PM_LIDS=2`) with the fat-tree
//! planner's choice per connection, over real UDP sockets on 127.0.0.1: every rank
//! addresses each peer at the port `connection_lid_indices` names for their hosts, traffic
//! arriving on either socket is accepted, and every message arrives once, in order.

use std::time::{Duration, Instant};

use tsunagi_fattree::{connection_lid_indices, FatTree};
use tsunagi_p2p::{Header, Transport};
use tsunagi_pm::lids::{LidConfig, LidWiring};
use tsunagi_pm::transport::{PmTransport, PmTransportConfig};

/// Fabric: 2 roots, 2 leaves of 2 nodes (fabric nodes 0–3). The job's hosts, by Tsunagi
/// node id, sit on fabric nodes 1, 2, 0, 3; ranks 0–3 on hosts 0–3 and rank 4 on host 0
/// again (same host: no plan, LID 0).
const FATTREE: &str = "k=2,leaves=2";
const FABRIC_NODES: &str = "1,2,0,3";
const NODE_OF: [u32; 5] = [0, 1, 2, 3, 0];

fn config() -> PmTransportConfig {
    let env = |k: &str| match k {
        "TSUNAGI_PM_LIDS" => Some("2".to_string()),
        "TSUNAGI_FATTREE" => Some(FATTREE.to_string()),
        "TSUNAGI_FATTREE_NODES" => Some(FABRIC_NODES.to_string()),
        _ => None,
    };
    let mut cfg = PmTransportConfig::from_env(env).unwrap();
    cfg.interface = Some("127.0.0.1".into());
    cfg
}

/// The job: one transport per rank, peers set from the cards and the plan.
fn job(cfg: &PmTransportConfig) -> Vec<PmTransport> {
    let n = NODE_OF.len();
    let mut t: Vec<PmTransport> = (0..n)
        .map(|r| PmTransport::bind(r as u32, n, cfg).unwrap())
        .collect();
    let cards: Vec<_> = t
        .iter()
        .map(|x| tsunagi_pm::parse_card(&x.card()).unwrap())
        .collect();
    for (me, x) in t.iter_mut().enumerate() {
        assert_eq!(cards[me].ports.len(), 2, "two ports in the card");
        let wiring = LidWiring::plan(&cfg.lids, &NODE_OF, me).unwrap();
        let peers: Vec<_> = (0..n)
            .filter(|&p| p != me)
            .map(|p| (p as u32, cards[p].clone()))
            .collect();
        x.set_peers(&peers, &wiring).unwrap();
    }
    t
}

/// The planner's index for `me` → `peer`, asked directly.
fn planned(me: usize, peer: usize) -> usize {
    let tree = FatTree::new(2, 2).unwrap();
    let alloc = [1, 2, 0, 3];
    connection_lid_indices(&tree, &alloc, NODE_OF[me] as usize).unwrap()[NODE_OF[peer] as usize]
        .unwrap_or(0)
}

fn payload(i: u64, from: usize, max: usize) -> Vec<u8> {
    let len = ((i * 7919 + from as u64 * 31) % max as u64) as usize;
    (0..len)
        .map(|k| (k as u64 ^ i ^ from as u64) as u8)
        .collect()
}

#[test]
fn destinations_are_the_planners_and_every_lid_delivers_once_in_order() {
    let cfg = config();
    assert_eq!(cfg.lids.lids, 2);
    let mut t = job(&cfg);
    let n = t.len();
    let cards: Vec<_> = t
        .iter()
        .map(|x| tsunagi_pm::parse_card(&x.card()).unwrap())
        .collect();
    // The destination of every connection is the peer's port at the planner's index.
    let mut used = [false; 2];
    for (me, x) in t.iter().enumerate() {
        for peer in (0..n).filter(|&p| p != me) {
            let index = planned(me, peer);
            used[index] = true;
            assert_eq!(
                x.destination(peer as u32),
                Some(cards[peer].addr(index)),
                "{me} -> {peer}"
            );
        }
    }
    assert_eq!(used, [true, true], "this job should use both LIDs");

    // All-to-all: `count` messages from every rank to every other.
    let count = 300u64;
    let max = t[0].max_payload().min(20_000);
    let mut next = vec![vec![0u64; n]; n];
    let mut got = vec![vec![0u64; n]; n];
    let start = Instant::now();
    while got.iter().flatten().sum::<u64>() < count * (n * (n - 1)) as u64 {
        for me in 0..n {
            for peer in (0..n).filter(|&p| p != me) {
                while next[me][peer] < count {
                    let i = next[me][peer];
                    let h = Header {
                        kind: 1,
                        src: me as u32,
                        tag: i as i32,
                        cookie: i,
                        ..Default::default()
                    };
                    if !t[me]
                        .try_send(peer as u32, &h, &payload(i, me, max))
                        .unwrap()
                    {
                        break;
                    }
                    next[me][peer] += 1;
                }
            }
            let g = &mut got[me];
            t[me]
                .poll(&mut |src, h: &Header, p: &[u8]| {
                    let s = src as usize;
                    assert_ne!(s, me);
                    assert_eq!(h.cookie, g[s], "{s} -> {me} out of order or twice");
                    assert_eq!(p, &payload(g[s], s, max)[..]);
                    g[s] += 1;
                })
                .unwrap();
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "stuck at {got:?}"
        );
    }
    // Nothing more arrives: exactly once.
    std::thread::sleep(Duration::from_millis(50));
    for me in 0..n {
        t[me]
            .poll(&mut |src, h: &Header, _: &[u8]| panic!("extra message {src} -> {me}: {h:?}"))
            .unwrap();
        assert!(got[me]
            .iter()
            .enumerate()
            .all(|(s, &c)| s == me || c == count));
    }
    // Each socket received exactly from the peers whose plan names it.
    for (me, x) in t.iter().enumerate() {
        for (lid, &datagrams) in x.received_per_lid().iter().enumerate() {
            let expected = (0..n).any(|p| p != me && planned(p, me) == lid);
            assert_eq!(datagrams > 0, expected, "rank {me} LID {lid}: {datagrams}");
        }
    }
}

#[test]
fn a_sleeper_wakes_on_the_second_lid() {
    let cfg = config();
    let mut t = job(&cfg);
    // A connection the planner routes to LID 1.
    let (me, peer) = (0..t.len())
        .flat_map(|a| (0..t.len()).map(move |b| (a, b)))
        .find(|&(a, b)| a != b && planned(a, b) == 1)
        .unwrap();
    let es = t[peer].event_source();
    assert!(t[me]
        .try_send(peer as u32, &Header::default(), b"ping")
        .unwrap());
    let t0 = Instant::now();
    let tok = es.prepare();
    es.sleep(tok, Duration::from_secs(5));
    assert!(t0.elapsed() < Duration::from_secs(2), "no wake-up");
    let mut got = 0;
    while got == 0 {
        got = t[peer]
            .poll(&mut |_, _, p: &[u8]| assert_eq!(p, b"ping"))
            .unwrap();
        assert!(t0.elapsed() < Duration::from_secs(5));
    }
    assert!(t[peer].received_per_lid()[1] > 0);
}

#[test]
fn without_knobs_one_port_and_the_old_card() {
    let mut cfg = PmTransportConfig::from_env(|_| None).unwrap();
    cfg.interface = Some("127.0.0.1".into());
    let t = PmTransport::bind(0, 2, &cfg).unwrap();
    assert_eq!(t.local_addrs().len(), 1);
    let card = t.card();
    // pm:<ip>:<port>:<epoch>, as before the LIDs.
    let parts: Vec<_> = card.split(':').collect();
    assert_eq!(parts.len(), 4, "{card}");
    assert_eq!(parts[2].parse::<u16>().unwrap(), t.local_addr().port());
    assert_eq!(LidConfig::from_env(|_| None).unwrap(), LidConfig::default());
}
