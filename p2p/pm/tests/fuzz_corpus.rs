//! The `pm_packet` fuzz target (`tsunagi_pm::fuzzing::pm_packet`) as an ordinary test on
//! stable Rust: every input of `fuzz/corpus/pm_packet/`, deterministic mutations of each
//! (bit flips, byte changes, truncations, splices), and random inputs. `cargo fuzz`
//! (`scripts/fuzz`) explores further. `write_seeds` regenerates the seed inputs.

use std::path::PathBuf;

use tsunagi_pm::fuzzing::{pm_packet, FUZZ_KEY};
use tsunagi_pm::lossy::Rng;
use tsunagi_pm::nic::Wr;
use tsunagi_pm::pm::{PmConfig, PmEndpoint, ReceiveMode};
use tsunagi_pm::restart::{PeerAddrs, RestartImage};
use tsunagi_pm::wire::{self, Kind, Packet};

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/pm_packet")
}

/// Well-formed inputs: packets of each kind carrying each work request, and a ring record
/// spread over PUSHes separated by 0xff (the target's datagram separator).
fn seeds() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut wr = Vec::new();
    let mut pkt = Vec::new();
    let wrs = [
        Wr::Push {
            region: 2,
            offset: 0,
            data: &[64, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4],
        },
        Wr::PullReq {
            region: 0,
            offset: 8,
            len: 8,
            tag: 1,
        },
        Wr::PullResp {
            tag: 1,
            ok: true,
            data: &[0; 8],
        },
        Wr::Send { data: b"hello" },
    ];
    for (i, w) in wrs.iter().enumerate() {
        w.encode(&mut wr);
        for ck in [false, true] {
            let p = Packet {
                kind: Kind::Data,
                src: 1,
                dst: 0,
                epoch: 7,
                seq: 0,
                ack: 0,
                sack: 0,
                payload: &wr,
            };
            wire::encode(&p, ck, &mut pkt).unwrap();
            out.push((format!("data-wr{i}-ck{}", ck as u8), pkt.clone()));
        }
        out.push((format!("wr{i}"), wr.clone()));
    }
    let ack = Packet {
        kind: Kind::Nack,
        src: 1,
        dst: 0,
        epoch: 7,
        seq: 0,
        ack: 3,
        sack: 0b1011,
        payload: &[],
    };
    wire::encode(&ack, true, &mut pkt).unwrap();
    out.push(("nack".into(), pkt.clone()));
    // Pieces 2 and 4 of the train of the fuzz body's 3000-byte packet (seq 0) asked for,
    // and a piece of a train arriving.
    let fnack = Packet {
        kind: Kind::FragNack,
        src: 1,
        dst: 0,
        epoch: 7,
        seq: 0,
        ack: 2,
        sack: 0b101,
        payload: &[],
    };
    wire::encode(&fnack, true, &mut pkt).unwrap();
    out.push(("fnack".into(), pkt.clone()));
    let big = Packet {
        kind: Kind::Data,
        src: 1,
        dst: 0,
        epoch: 7,
        seq: 0,
        ack: 0,
        sack: 0,
        payload: &[5; 500],
    };
    wire::encode_fragments(&big, true, 200, [1], &mut pkt).unwrap();
    out.push(("frag".into(), pkt.clone()));
    // A restarted rank's MOVE, under the fuzz key.
    let moved = tsunagi_pm::restart::Move {
        rank: 1,
        old_epoch: 7,
        generation: 1,
        card: tsunagi_pm::parse_card("pm:127.0.0.1:4000:00000008/4001").unwrap(),
    };
    tsunagi_pm::restart::encode_move(FUZZ_KEY, &moved, 0, true, &mut pkt);
    out.push(("move".into(), pkt.clone()));
    // A restart image: rank 0 of 2 with a small ring holding one message, a message set
    // aside and the application's blob.
    let cfg = PmConfig {
        receive: ReceiveMode::Rings { ring_bytes: 4096 },
        wr_data: 256,
        ..Default::default()
    };
    let mut ep = PmEndpoint::new(0, 2, 9, cfg);
    ep.add_peer(1, 7);
    let ring = tsunagi_pm::pm::ring_region(1);
    // A whole ring record: header (64 bytes, sequence 0, body of 4), body, trailer.
    let mut record = [0u8; 64];
    record[..20].copy_from_slice(&[64, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4]);
    record[56..].copy_from_slice(&0x504d_5452_0000_0000u64.to_le_bytes());
    let w = Wr::Push {
        region: ring,
        offset: 0,
        data: &record,
    };
    w.encode(&mut wr);
    let p = Packet {
        kind: Kind::Data,
        src: 1,
        dst: 0,
        epoch: 7,
        seq: 0,
        ack: 0,
        sack: 0,
        payload: &wr,
    };
    wire::encode(&p, false, &mut pkt).unwrap();
    ep.handle_datagram(std::time::Instant::now(), &pkt);
    let mut scratch = Vec::new();
    while ep
        .poll_transmit(
            std::time::Instant::now() + std::time::Duration::from_secs(1),
            &mut scratch,
        )
        .is_some()
    {}
    let addr = |p: u16| std::net::SocketAddr::from(([127, 0, 0, 1], p));
    let image = RestartImage {
        rank: 0,
        size: 2,
        generation: 0,
        checkpoint: 1,
        epoch: 9,
        peers: vec![
            None,
            Some(PeerAddrs {
                lid_index: 0,
                dest: addr(4000),
                source: addr(4000),
                ack: Some(addr(4001)),
            }),
        ],
        context: ep.save_context().unwrap(),
        stash: vec![(1, vec![1; 40])],
        app: b"app state".to_vec(),
    };
    out.push(("restart-image".into(), image.encode()));
    wrs[0].encode(&mut wr);
    let mut spread = wr.clone();
    spread.push(0xff);
    spread.extend_from_slice(&wr);
    out.push(("two-pushes".into(), spread));
    out
}

#[test]
#[ignore = "run by hand to rewrite the seed inputs"]
fn write_seeds() {
    std::fs::create_dir_all(corpus_dir()).unwrap();
    for (name, data) in seeds() {
        std::fs::write(corpus_dir().join(name), data).unwrap();
    }
}

fn mutate(rng: &mut Rng, seed: &[u8], pool: &[Vec<u8>]) -> Vec<u8> {
    let mut v = seed.to_vec();
    for _ in 0..1 + rng.below(4) {
        match rng.below(5) {
            0 if !v.is_empty() => {
                let i = rng.below(v.len() as u64) as usize;
                v[i] ^= 1 << rng.below(8);
            }
            1 if !v.is_empty() => {
                let i = rng.below(v.len() as u64) as usize;
                v[i] = rng.next_u64() as u8;
            }
            2 => v.truncate(rng.below(v.len() as u64 + 1) as usize),
            3 => {
                let other = &pool[rng.below(pool.len() as u64) as usize];
                let at = rng.below(v.len() as u64 + 1) as usize;
                v.splice(at..at, other.iter().copied());
            }
            _ => v.push(rng.next_u64() as u8),
        }
    }
    v
}

#[test]
fn corpus_mutations_and_random_inputs() {
    let mut corpus: Vec<Vec<u8>> = std::fs::read_dir(corpus_dir())
        .expect("fuzz/corpus/pm_packet")
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .collect();
    assert!(corpus.len() >= 3, "the corpus needs seeds");
    corpus.sort();
    // The committed seeds are still well-formed for today's codec.
    for (_, s) in seeds() {
        pm_packet(&s);
    }
    // The restart image seed restores: its ring's message is handed out again.
    let (_, img) = seeds()
        .into_iter()
        .find(|s| s.0 == "restart-image")
        .unwrap();
    let img = RestartImage::decode(&img).unwrap();
    let mut ep = PmEndpoint::new(
        0,
        2,
        3,
        PmConfig {
            receive: ReceiveMode::Rings { ring_bytes: 4096 },
            wr_data: 256,
            ..Default::default()
        },
    );
    ep.restore_context(&img.context).unwrap();
    let r = ep.receive().expect("the saved message");
    assert_eq!((r.peer, ep.message(&r)), (1, &[1, 2, 3, 4][..]));
    assert_eq!(
        (img.app.as_slice(), img.stash.len()),
        (&b"app state"[..], 1)
    );
    // A ring of another size does not fit.
    let mut other = PmEndpoint::new(0, 2, 3, PmConfig::default());
    assert!(other.restore_context(&img.context).is_err());
    let mut rng = Rng::new(2026);
    for input in &corpus {
        pm_packet(input);
        for _ in 0..200 {
            pm_packet(&mutate(&mut rng, input, &corpus));
        }
    }
    for _ in 0..2000 {
        let len = rng.below(300) as usize;
        let d: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
        pm_packet(&d);
    }
}
