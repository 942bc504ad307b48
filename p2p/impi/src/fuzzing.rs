//! Entry points for the fuzz targets (`fuzz/`) and for the tests that run the same
//! checks over the committed corpus and pseudo-random inputs on stable Rust
//! (`tests/fuzz_corpus.rs`). Each takes arbitrary bytes, must never panic, and asserts
//! what a decoder owes its callers: what it accepts re-encodes to the same bytes.

use std::sync::Arc;

use crate::link::{Link, LinkConfig, ProcTable};
use crate::packet::{Header, PacketDecoder, ProcId, HEADER_LEN};
use crate::server::{AuthPolicy, Server, ServerConfig};
use crate::startup::{ClientExpect, ClientMsg, ServerExpect, ServerMsg};

/// The packet decoder: one header, a stream split in uneven pieces, and a two-host link
/// fed the bytes as if from the peer.
pub fn packet_decoder(data: &[u8]) {
    if let Ok(h) = Header::decode(data) {
        assert_eq!(
            &h.encode()[..],
            &data[..HEADER_LEN],
            "a decoded header re-encodes to its bytes"
        );
        assert!(h.data_len() <= h.pk_msglen as usize || !h.pk_type.carries_data());
    }

    // The stream splitter, fed in pieces whose sizes come from the data itself.
    let mut dec = PacketDecoder::new(4096);
    let mut at = 0;
    let mut taken = 0usize;
    'feed: while at < data.len() {
        let step = 1 + (data[at] as usize * 7) % 97;
        let end = (at + step).min(data.len());
        dec.push(&data[at..end]);
        at = end;
        loop {
            match dec.next_packet() {
                Ok(Some((h, d))) => {
                    assert_eq!(d.len(), h.data_len());
                    assert!(d.len() <= 4096);
                    taken += HEADER_LEN + d.len();
                }
                Ok(None) => break,
                Err(_) => break 'feed,
            }
        }
    }
    assert!(taken <= data.len());

    // A link whose peer host carries ranks 0 and 1 (one IPv4 host, LAM style) and whose
    // local host carries rank 2 (IPv4-mapped form, GridMPI style).
    let a = std::net::Ipv4Addr::new(127, 0, 0, 1);
    let mut b_host = [0u8; 16];
    b_host[10] = 0xff;
    b_host[11] = 0xff;
    b_host[12..].copy_from_slice(&[127, 0, 0, 2]);
    let table = ProcTable::new(vec![
        ProcId::ipv4(a, 100),
        ProcId::ipv4(a, 101),
        ProcId {
            hostid: b_host,
            pid: 7,
        },
    ])
    .expect("distinct procs");
    let cfg = LinkConfig {
        datalen: 64,
        ackmark: 2,
        hiwater: 4,
    };
    let mut link = Link::new(cfg, Arc::new(table), &[2], &[0, 1]).expect("valid link");
    let _ = link.handle_input(data);
    while let Some(ev) = link.poll_event() {
        if let crate::link::Event::Arrived(a) = ev {
            let _ = link.accept(a.id);
        }
    }
    let out = link.transmit();
    assert_eq!(
        out.len() % HEADER_LEN,
        0,
        "a link fed only control input writes only headers"
    );
}

/// The start-up decoders (both directions, both expectations) and a 2-client server fed
/// the bytes as one connection.
pub fn startup_decoder(data: &[u8]) {
    for expect in [ClientExpect::Command, ClientExpect::Key] {
        if let Ok(Some((m, used))) = ClientMsg::decode(data, expect) {
            assert_eq!(
                m.encode(),
                &data[..used],
                "a decoded client message re-encodes to its bytes"
            );
        }
    }
    for expect in [ServerExpect::AuthChoice, ServerExpect::Command] {
        if let Ok(Some((m, used))) = ServerMsg::decode(data, expect) {
            assert!(used <= data.len());
            if m != ServerMsg::Done {
                assert_eq!(
                    m.encode(),
                    &data[..used],
                    "a decoded server message re-encodes to its bytes"
                );
            }
        }
    }
    let cfg = ServerConfig {
        nclients: 2,
        auth: AuthPolicy {
            none: true,
            key: Some(42),
        },
    };
    let mut server = Server::new(cfg).expect("valid config");
    server.connected(1);
    server.connected(2);
    let half = data.len() / 2;
    server.received(1, &data[..half]);
    server.received(2, &data[half..]);
    server.received(1, &data[half..]);
    server.closed(2);
    while server.poll_output().is_some() {}
}
