//! Packets written by LAM/MPI 7.1.4's IMPI host daemon (`impid`), captured with strace on
//! the host-to-host connection of a 2-client job run by scripts/lam-impi-pair (LAM_IMPI_STRACE=1):
//! an independent implementation's bytes. Host 0 is 10.77.0.1 with rank 0 (pid 20687),
//! host 1 is 10.77.0.2 with rank 1 (pid 20685); DATALEN 65536, ackmark 10, hiwater 20.
//! The program was p2p/impi/interop/impi_pair.c.
//!
//! What they show about LAM (beyond the report):
//! - control packets (SYNCACK, PROTOACK, FINI) carry pk_len = pk_msglen = 128 and no data,
//!   pk_lsrank = pk_tag = pk_count = -1, and pk_cid = 73 written without byte swapping
//!   (0x4900000000000000 on the wire);
//! - user data goes in the sender's native byte order (little-endian ints here), not
//!   external32;
//! - short standard messages have pk_srqid 0; long ones number srqid and drqid from 1.
//!
//! Our link, standing in for LAM's host 1, must accept LAM's packets and write the same
//! bytes LAM wrote for the same message (all but pk_seqnum, a per-host counter).

use std::net::Ipv4Addr;
use std::sync::Arc;

use tsunagi_impi::packet::{Header, PacketType, ProcId, HEADER_LEN};
use tsunagi_impi::{Event, Link, LinkConfig, ProcTable, SendRequest};

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// Host 0 → host 1: SYNCACK for host 1's long message (srqid 1), giving drqid 1.
const LAM_SYNCACK: &str = "00000003000000800000000000000000000000000a4d000100000000000050cf0000000000000000000000000a4d000200000000000050cd000000000000000100000000000000010000000000000080ffffffffffffffff49000000000000000000000000000007ffffffffffffffff00000000000000000000000000000000";
/// Host 0 → host 1: PROTOACK for rank 1 → rank 0 traffic.
const LAM_PROTOACK: &str = "00000002000000800000000000000000000000000a4d000100000000000050cf0000000000000000000000000a4d000200000000000050cd000000000000000000000000000000000000000000000080ffffffffffffffff49000000000000000000000000000010ffffffffffffffff00000000000000000000000000000000";
/// Host 0 → host 1: FINI.
const LAM_FINI: &str = "000000070000008000000000000000000000000000000000ffffffffffffffff00000000000000000000000000000000ffffffffffffffff000000000000000000000000000000000000000000000080ffffffffffffffff0000000000000000000000000000009affffffffffffffff00000000000000000000000000000000";
/// Host 0 → host 1: the first two messages, 0 ints (tag 0) and 1 int (tag 1).
const LAM_DATA0: &str = "00000000000000000000000000000000000000000a4d000100000000000050cf0000000000000000000000000a4d000200000000000050cd000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000001000000000000000000000000000000000000000000000000";
const LAM_DATA4: &str = "00000000000000040000000000000000000000000a4d000100000000000050cf0000000000000000000000000a4d000200000000000050cd000000000000000000000000000000000000000000000004000000000000000100000000000000000000000000000002000000000000000000000000000000000000000000000000e1d8a700";
/// Host 1 → host 0: LAM's own first packet (header) and last packet of the 65540-byte
/// message (16385 ints, tag 4) that rank 1 sent to rank 0.
const LAM_LONG_FIRST: &str = "00000001000100000000000000000000000000000a4d000200000000000050cd0000000000000000000000000a4d000100000000000050cf000000000000000100000000000000000000000000010004000000010000000400000000000000000000000000000006000000000000000000000000000000000000000000000000";
const LAM_LONG_LAST: &str = "00000000000000040000000000000000000000000a4d000200000000000050cd0000000000000000000000000a4d000100000000000050cf00000000000000010000000000000001000000000001000400000001000000040000000000000000000000000000000700000000000000000000000000000000000000000000000041619002";

fn rank0() -> ProcId {
    ProcId::ipv4(Ipv4Addr::new(10, 77, 0, 1), 20687)
}
fn rank1() -> ProcId {
    ProcId::ipv4(Ipv4Addr::new(10, 77, 0, 2), 20685)
}

/// impi_pair.c's fill(): `seed * 1000003 + i` as native (little-endian) ints, as LAM sent them.
fn lam_fill(n: usize, seed: i32) -> Vec<u8> {
    (0..n as i32)
        .flat_map(|i| seed.wrapping_mul(1_000_003).wrapping_add(i).to_le_bytes())
        .collect()
}

/// Equal but for pk_seqnum (bytes 96..104).
fn same_but_seqnum(a: &[u8], b: &[u8]) {
    assert_eq!(a.len(), b.len());
    let mask = |v: &[u8]| {
        let mut v = v.to_vec();
        v[96..104].fill(0);
        v
    };
    assert_eq!(mask(a), mask(b));
}

#[test]
fn lam_headers_decode() {
    let s = Header::decode(&hex(LAM_SYNCACK)).unwrap();
    assert_eq!(s.pk_type, PacketType::SyncAck);
    assert_eq!((s.pk_len, s.pk_msglen, s.data_len()), (128, 128, 0));
    assert_eq!((s.pk_src, s.pk_dest), (rank0(), rank1()));
    assert_eq!((s.pk_srqid, s.pk_drqid), (1, 1));
    assert_eq!((s.pk_lsrank, s.pk_tag, s.pk_count), (-1, -1, -1));
    assert_eq!(s.pk_cid, 73u64.swap_bytes(), "LAM's unswapped 73");
    let p = Header::decode(&hex(LAM_PROTOACK)).unwrap();
    assert_eq!(
        (p.pk_type, p.pk_srqid, p.data_len()),
        (PacketType::ProtoAck, 0, 0)
    );
    let f = Header::decode(&hex(LAM_FINI)).unwrap();
    assert_eq!(
        (f.pk_type, f.pk_src.pid, f.pk_dest.pid, f.data_len()),
        (PacketType::Fini, -1, -1, 0)
    );
    assert_eq!(f.pk_src.hostid, [0; 16]);
    let d = Header::decode(&hex(LAM_LONG_FIRST)).unwrap();
    assert_eq!(
        (
            d.pk_type,
            d.pk_len,
            d.pk_msglen,
            d.pk_srqid,
            d.pk_lsrank,
            d.pk_tag
        ),
        (PacketType::DataSync, 65536, 65540, 1, 1, 4)
    );
}

#[test]
fn our_link_as_lams_peer_host() {
    let table = Arc::new(ProcTable::new(vec![rank0(), rank1()]).unwrap());
    let cfg = LinkConfig {
        datalen: 65536,
        ackmark: 10,
        hiwater: 20,
    };
    let mut link = Link::new(cfg, table, &[1], &[0]).unwrap();

    // LAM's first two (short, standard) messages arrive whole.
    link.handle_input(&[hex(LAM_DATA0), hex(LAM_DATA4)].concat())
        .unwrap();
    let arrived: Vec<_> = std::iter::from_fn(|| link.poll_event())
        .map(|e| match e {
            Event::Arrived(a) => a,
            e => panic!("{e:?}"),
        })
        .collect();
    assert_eq!(arrived.len(), 2);
    assert_eq!(
        (arrived[0].tag, arrived[0].msglen, arrived[0].complete),
        (0, 0, true)
    );
    assert_eq!(
        (arrived[1].tag, arrived[1].data.clone()),
        (1, lam_fill(1, 11))
    );
    for a in &arrived {
        link.accept(a.id).unwrap();
    }
    assert!(
        link.transmit().is_empty(),
        "standard short messages need no answer"
    );

    // Rank 1 sends what LAM's rank 1 sent: 16385 ints, tag 4 (impi_pair seed 43).
    let data = lam_fill(16385, 43);
    let id = link
        .send(SendRequest {
            src: 1,
            dst: 0,
            lsrank: 1,
            tag: 4,
            cid: 0,
            sync: false,
            data: data.clone(),
        })
        .unwrap();
    assert_eq!(id, 1, "LAM numbered its long sends from 1 too");
    let out = link.transmit();
    assert_eq!(out.len(), HEADER_LEN + 65536);
    same_but_seqnum(&out[..HEADER_LEN], &hex(LAM_LONG_FIRST));
    assert_eq!(&out[HEADER_LEN..], &data[..65536]);

    // LAM's host 0 answers with its SYNCACK (drqid 1): the rest goes as LAM sent it.
    link.handle_input(&hex(LAM_SYNCACK)).unwrap();
    let out = link.transmit();
    same_but_seqnum(&out, &hex(LAM_LONG_LAST));
    assert_eq!(link.poll_event(), Some(Event::SendComplete { id }));

    // Eight more short messages fill ackmark (10) packets of rank 1 -> 0; LAM's PROTOACK
    // then opens the window again.
    for t in 0..8 {
        link.send(SendRequest {
            src: 1,
            dst: 0,
            lsrank: 1,
            tag: 100 + t,
            cid: 0,
            sync: false,
            data: vec![t as u8],
        })
        .unwrap();
    }
    assert_eq!(link.in_flight(1, 0), 10);
    link.handle_input(&hex(LAM_PROTOACK)).unwrap();
    assert_eq!(link.in_flight(1, 0), 0);

    // LAM's FINI, then ours: closed.
    while link.poll_event().is_some() {}
    link.handle_input(&hex(LAM_FINI)).unwrap();
    assert_eq!(link.poll_event(), Some(Event::PeerFinished));
    link.transmit();
    link.finish().unwrap();
    let fini = link.transmit();
    assert_eq!(Header::decode(&fini).unwrap().pk_type, PacketType::Fini);
    assert!(link.is_closed());
    link.handle_eof().unwrap();
}
