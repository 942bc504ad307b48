//! Fuzz target bodies (`fuzz/fuzz_targets/pm_packet.rs`), also run over the committed
//! corpus on stable Rust by `tests/fuzz_corpus.rs`.

use std::time::{Duration, Instant};

use crate::nic::Wr;
use crate::pm::{PmConfig, PmEndpoint, ReceiveMode};
use crate::reliable::{Link, LinkConfig};
use crate::wire;

/// The job key of the MOVEs in the corpus.
pub const FUZZ_KEY: &[u8] = b"fuzz job key";

/// Outside bytes as datagrams: the packet decoder must reject or accept without panicking,
/// what it accepts must re-encode to the same bytes, and an endpoint fed the datagrams
/// (one per 0xff-separated piece, as if from rank 1 with epoch 7) must not panic whatever
/// work requests they carry, and neither must a link with a train in flight fed the
/// packets of the input (FNACKs asking for any pieces, fragments of any cut).
pub fn pm_packet(data: &[u8]) {
    let mut out = Vec::new();
    let t0 = Instant::now();
    let mut link = Link::new(
        0,
        1,
        9,
        LinkConfig {
            max_datagram: 200,
            ..Default::default()
        },
    );
    link.push(vec![7; 3000]);
    link.push(vec![8; 10]);
    while link.poll_transmit(t0, &mut out) {}
    for (i, p) in wire::packets(data).flatten().enumerate() {
        let t = t0 + Duration::from_micros(300 * i as u64);
        link.on_packet(t, &p);
        while link.poll_transmit(t, &mut out) {}
        while link.pop_delivered().is_some() {}
    }
    // A checkpoint image: refused or read back byte for byte (never restored here: its
    // user-buffer addresses would be arbitrary).
    if let Ok(ctx) = crate::pm::PmContext::decode(data) {
        assert_eq!(ctx.encode(), data);
    }
    // A restart image, as read and with its checksum made right (so that mutations reach
    // the fields behind it): refused or read back byte for byte, and restorable into an
    // endpoint of its rank and size.
    for fixed in [false, true] {
        let mut img = data.to_vec();
        if fixed && img.len() >= 4 {
            let n = img.len() - 4;
            let crc = wire::crc32(&[&img[..n]]);
            img[n..].copy_from_slice(&crc.to_le_bytes());
        }
        if let Ok(r) = crate::restart::RestartImage::decode(&img) {
            assert_eq!(r.encode(), img);
            if r.size <= 64 {
                let cfg = PmConfig {
                    receive: ReceiveMode::Rings { ring_bytes: 4096 },
                    wr_data: 256,
                    ..Default::default()
                };
                let mut ep = PmEndpoint::new(r.rank, r.size, 5, cfg);
                let _ = ep.restore_context(&r.context);
            }
        }
    }
    if let Ok(p) = wire::decode(data) {
        if p.kind == wire::Kind::Move {
            if let Ok(m) = crate::restart::check_move(FUZZ_KEY, &p) {
                let mut again = Vec::new();
                crate::restart::encode_move(FUZZ_KEY, &m, p.dst, data[4] & 1 != 0, &mut again);
                assert_eq!(again, data);
            }
        }
    }
    if let Ok(p) = wire::decode(data) {
        let mut again = Vec::new();
        let checksum = data[4] & 1 != 0;
        wire::encode(&p, checksum, &mut again).unwrap();
        assert_eq!(again, data);
        if let Ok(wr) = Wr::decode(p.payload) {
            wr.encode(&mut again);
            assert_eq!(again, p.payload);
        }
    }
    for mode in [
        ReceiveMode::Rings { ring_bytes: 4096 },
        ReceiveMode::Shared {
            buffers: 4,
            buffer_bytes: 256,
        },
    ] {
        let cfg = PmConfig {
            receive: mode,
            wr_data: 256,
            ..Default::default()
        };
        let mut ep = PmEndpoint::new(0, 3, 9, cfg);
        ep.add_peer(1, 7);
        ep.add_peer(2, 8);
        let now = Instant::now();
        for (i, piece) in data.split(|&b| b == 0xff).enumerate() {
            // Pieces become DATA packets from rank 1 in sequence, so their payloads reach
            // the NIC as work requests.
            let p = wire::Packet {
                kind: wire::Kind::Data,
                src: 1,
                dst: 0,
                epoch: 7,
                seq: i as u32,
                ack: 0,
                sack: 0,
                payload: piece,
            };
            wire::encode(&p, false, &mut out).unwrap();
            ep.handle_datagram(now, &out);
            ep.handle_datagram(now, piece);
            while let Some(_r) = ep.receive() {
                ep.release();
            }
            while ep
                .poll_transmit(now + Duration::from_millis(i as u64), &mut out)
                .is_some()
            {}
            while ep.take_error().is_some() {}
        }
    }
}
