//! Rendezvous by RDMA read into the user's buffer, between two PM transports over real UDP
//! sockets on 127.0.0.1, each driven by its own thread as two processes would be: both
//! ranks announce large buffers at once ([`Transport::expose`]) and read each other's
//! ([`Transport::read_remote`], which blocks while serving the peer's PULLs), with small
//! messages interleaved. Clean and with 5 % loss, duplication and reordering injected:
//! every byte lands in the receive buffer, every small message arrives once and in order,
//! and every grant ends with the reader's INVALIDATE.

use std::time::{Duration, Instant};

use tsunagi_p2p::{Header, Rank, Transport};
use tsunagi_pm::pm::PmStats;
use tsunagi_pm::reliable::LinkStats;
use tsunagi_pm::transport::{Faults, PmTransport, PmTransportConfig};

const RTS: u8 = 1;
const FIN: u8 = 2;
const SMALL: u8 = 3;
const SIZES: [usize; 6] = [1 << 20, 100_000, 3 * 8192 + 1, 40_000, (1 << 20) + 17, 1];

fn pair(faults: Faults, mtu: Option<usize>) -> (PmTransport, PmTransport) {
    let mut cfg = PmTransportConfig::from_env(|_| None).unwrap();
    cfg.interface = Some("127.0.0.1".into());
    cfg.faults = faults;
    cfg.mtu = mtu;
    let mut a = PmTransport::bind(0, 2, &cfg).unwrap();
    let mut b = PmTransport::bind(1, 2, &cfg).unwrap();
    let ca = tsunagi_pm::parse_card(&a.card()).unwrap();
    let cb = tsunagi_pm::parse_card(&b.card()).unwrap();
    let one = tsunagi_pm::lids::LidWiring::single(2);
    a.set_peers(&[(1, cb)], &one).unwrap();
    b.set_peers(&[(0, ca)], &one).unwrap();
    (a, b)
}

fn pattern(owner: Rank, i: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|k| (k as u32 ^ (k as u32 >> 8) ^ (owner * 131 + i as u32 * 7)) as u8)
        .collect()
}

fn send(t: &mut PmTransport, peer: Rank, h: Header, payload: &[u8]) {
    let start = Instant::now();
    while !t.try_send(peer, &h, payload).unwrap() {
        t.poll(&mut |_, _, _| panic!("no arrivals expected while the test sends"))
            .map(|_| ())
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no room for 60 s"
        );
    }
}

/// One rank: announce every size, read every announcement of the peer, answer FIN.
/// Returns the bytes it pulled and its counters; the transport is dropped here, as at a
/// process's end (it lingers until the peer has all of our data).
fn rank(mut t: PmTransport, me: Rank) -> (PmStats, LinkStats, usize, u64) {
    let peer = 1 - me;
    assert!(t.single_copy(peer) && !t.single_copy(me));
    let mine: Vec<Vec<u8>> = SIZES
        .iter()
        .enumerate()
        .map(|(i, &n)| pattern(me, i, n))
        .collect();
    let mut small_sent = 0u64;
    for (i, buf) in mine.iter().enumerate() {
        // SAFETY: `mine` outlives every read of the peer: we return only after its FINs.
        let token = unsafe { t.expose(peer, buf.as_ptr(), buf.len()) }.unwrap();
        let h = Header {
            kind: RTS,
            src: me,
            len: buf.len() as u64,
            cookie: i as u64,
            ..Default::default()
        };
        send(&mut t, peer, h, &token.to_ne_bytes());
        let h = Header {
            kind: SMALL,
            src: me,
            cookie: small_sent,
            ..Default::default()
        };
        send(&mut t, peer, h, &small_sent.to_le_bytes());
        small_sent += 1;
    }
    let mut fins = vec![false; SIZES.len()];
    let mut read = 0;
    let mut small_got = 0u64;
    let mut pulled = 0;
    let start = Instant::now();
    while fins.iter().any(|f| !f) || read < SIZES.len() || small_got < small_sent {
        let mut arrived = Vec::new();
        t.poll(&mut |src, h: &Header, p: &[u8]| {
            assert_eq!(src, peer);
            arrived.push((*h, p.to_vec()));
        })
        .unwrap();
        for (h, p) in arrived {
            match h.kind {
                RTS => {
                    let i = h.cookie as usize;
                    assert_eq!(i, read, "announcements in order");
                    let token = u64::from_ne_bytes(p[..8].try_into().unwrap());
                    let mut dst = vec![0u8; h.len as usize];
                    t.read_remote(peer, token, &mut dst).unwrap();
                    assert!(dst == pattern(peer, i, SIZES[i]), "data of message {i}");
                    pulled += dst.len();
                    // The grant ended: the same region cannot be read again.
                    let mut again = [0u8; 1];
                    assert!(t.read_remote(peer, token, &mut again).is_err());
                    read += 1;
                    let fin = Header {
                        kind: FIN,
                        src: me,
                        cookie: i as u64,
                        ..Default::default()
                    };
                    send(&mut t, peer, fin, &[]);
                }
                FIN => {
                    assert!(!fins[h.cookie as usize], "one FIN per announcement");
                    fins[h.cookie as usize] = true;
                }
                SMALL => {
                    assert_eq!(h.cookie, small_got, "small messages once, in order");
                    assert_eq!(p, small_got.to_le_bytes());
                    small_got += 1;
                }
                k => panic!("unexpected kind {k}"),
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "rank {me} stuck: fins {fins:?}, read {read}, small {small_got}"
        );
    }
    // Every grant of ours was invalidated before the peer's FIN reached us.
    assert_eq!(t.endpoint().open_grants(), 0);
    let stats = (
        t.endpoint().stats(),
        t.endpoint().link_stats(),
        pulled,
        t.fault_drops(),
    );
    drop(t);
    drop(mine);
    stats
}

fn both_ways(faults: Faults, mtu: Option<usize>) -> [(PmStats, LinkStats, u64); 2] {
    let (a, b) = pair(faults, mtu);
    let tb = std::thread::spawn(move || rank(b, 1));
    let (sa, la, pa, da) = rank(a, 0);
    let (sb, lb, pb, db) = tb.join().unwrap();
    let total: usize = SIZES.iter().sum();
    assert_eq!((pa, pb), (total, total));
    [(sa, la, da), (sb, lb, db)]
}

#[test]
fn rdma_reads_land_in_the_receive_buffer() {
    let t0 = Instant::now();
    let t = both_ways(Faults::default(), None);
    let s = t[0].0;
    eprintln!("{:?} {s:?}", t0.elapsed());
    let total: u64 = SIZES.iter().sum::<usize>() as u64;
    assert_eq!(s.rdma_bytes_pulled, total);
    // Whole replies (one datagram each over loopback) are placed from the datagram too.
    assert_eq!(s.rdma_bytes_placed, total);
    assert!(s.rdma_pulls_served as usize >= SIZES.len());
    // The large data went by PULL, not through the rings: few ring messages.
    assert!(s.messages_sent < 4 * SIZES.len() as u64, "{s:?}");
}

#[test]
fn rdma_reads_under_five_percent_loss_duplication_and_reordering() {
    let faults = Faults {
        drop: 0.05,
        duplicate: 0.05,
        reorder: 0.05,
    };
    let t = both_ways(faults, None);
    let s = t[1].1;
    assert!(s.retransmitted > 0 && s.duplicates > 0, "{s:?}");
}

/// With a 1500-byte path MTU every PULL reply larger than a datagram goes as a train of
/// fragments (by UDP segmentation offload where the kernel has it, read back coalesced
/// by GRO); clean, and with 5 % of the fragments lost, duplicated or held back.
#[test]
fn rdma_reads_in_trains_of_fragments() {
    let t = both_ways(Faults::default(), Some(1500));
    let total: u64 = SIZES.iter().sum::<usize>() as u64;
    assert_eq!(t[0].0.rdma_bytes_pulled, total);
    // Each reply's pieces went straight into the receive buffer as they arrived.
    assert_eq!(t[0].0.rdma_bytes_placed, total);
    let faults = Faults {
        drop: 0.05,
        duplicate: 0.05,
        reorder: 0.05,
    };
    let t = both_ways(faults, Some(1500));
    let s = t[1].1;
    assert!(s.duplicates > 0, "{s:?}");
    // Also when pieces came before the reply's first (placed once it came), or twice.
    assert_eq!(t[1].0.rdma_bytes_placed, total, "{:?}", t[1].0);
    // Lost pieces of the trains were asked for by FNACK and resent one by one, about
    // once each: at most twice as many pieces resent as datagrams dropped (which include
    // ACKs and small packets). Before the reassembly timer waited a round trip it asked
    // again for pieces already on their way: 2.4x over loopback under load.
    let (a, b) = (t[0].1, t[1].1);
    let (resent, dropped) = (
        a.frags_retransmitted + b.frags_retransmitted,
        t[0].2 + t[1].2,
    );
    eprintln!("pieces resent {resent} for {dropped} datagrams dropped: {a:?} {b:?}");
    assert!(
        a.frag_nacks_sent + b.frag_nacks_sent > 0 && resent > 0,
        "{a:?} {b:?}"
    );
    assert!(
        resent <= 2 * dropped,
        "{resent} pieces resent for {dropped} datagrams dropped: {a:?} {b:?}"
    );
}

#[test]
fn rdma_is_refused_when_turned_off() {
    let mut cfg =
        PmTransportConfig::from_env(|k| (k == "TSUNAGI_PM_RDMA").then(|| "0".into())).unwrap();
    cfg.interface = Some("127.0.0.1".into());
    assert!(!cfg.rdma);
    let mut a = PmTransport::bind(0, 2, &cfg).unwrap();
    let b = PmTransport::bind(1, 2, &cfg).unwrap();
    let cb = tsunagi_pm::parse_card(&b.card()).unwrap();
    a.set_peers(&[(1, cb)], &tsunagi_pm::lids::LidWiring::single(2))
        .unwrap();
    assert!(!a.single_copy(1));
    let buf = [0u8; 4];
    // SAFETY: refused before anything is registered.
    assert!(unsafe { a.expose(1, buf.as_ptr(), 4) }.is_err());
    assert!(a.read_remote(1, 1 << 40, &mut [0u8; 4]).is_err());
}
