//! Byte vectors written from the IMPI report's tables (not from the encoder): every packet
//! type, every start-up command and the report's COLL example.

use tsunagi_impi::packet::{Header, PacketDecoder, PacketError, PacketType, ProcId, HEADER_LEN};
use tsunagi_impi::startup::{
    label, ClientExpect, ClientMsg, ServerExpect, ServerMsg, StartupError,
};

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// A DATASYNC from 10.1.2.3 pid 0x1234 (LAM's zero-prefixed form) to ::ffff:10.1.2.4 pid 7
/// (IPv4-mapped form): srqid 5, drqid 0, msglen 100000, 65536 bytes in this packet, lsrank
/// 3, tag -2, cid 0x0102, seqnum 9, count 0, dtype 0, reserved 0. Field by field from the
/// report's table.
const DATASYNC_HEX: &str = "
    00000001 00010000
    00000000 00000000 00000000 0a010203  00000000 00001234
    00000000 00000000 0000ffff 0a010204  00000000 00000007
    00000000 00000005
    00000000 00000000
    00000000 000186a0
    00000003 fffffffe
    00000000 00000102
    00000000 00000009
    00000000 00000000
    00000000 00000000
    00000000 00000000";

fn src() -> ProcId {
    ProcId::ipv4(std::net::Ipv4Addr::new(10, 1, 2, 3), 0x1234)
}

fn dst_mapped() -> ProcId {
    let mut hostid = [0u8; 16];
    hostid[10] = 0xff;
    hostid[11] = 0xff;
    hostid[12..].copy_from_slice(&[10, 1, 2, 4]);
    ProcId { hostid, pid: 7 }
}

#[test]
fn datasync_header_matches_the_report_layout() {
    let bytes = hex(DATASYNC_HEX);
    assert_eq!(bytes.len(), HEADER_LEN);
    let h = Header::decode(&bytes).unwrap();
    assert_eq!(h.pk_type, PacketType::DataSync);
    assert_eq!(h.pk_len, 65536);
    assert_eq!(h.pk_src, src());
    assert_eq!(h.pk_dest, dst_mapped());
    assert_eq!(h.pk_srqid, 5);
    assert_eq!(h.pk_drqid, 0);
    assert_eq!(h.pk_msglen, 100_000);
    assert_eq!(h.pk_lsrank, 3);
    assert_eq!(h.pk_tag, -2);
    assert_eq!(h.pk_cid, 0x102);
    assert_eq!(h.pk_seqnum, 9);
    assert_eq!((h.pk_count, h.pk_dtype, h.pk_reserved), (0, 0, 0));
    assert_eq!(h.data_len(), 65536);
    assert_eq!(h.encode().to_vec(), bytes);
}

/// Put a big-endian field at its report offset.
fn put(b: &mut [u8], at: usize, v: &[u8]) {
    b[at..at + v.len()].copy_from_slice(v);
}

#[test]
fn every_packet_type_value_and_whether_data_follows() {
    let expect = [
        (0u32, PacketType::Data, true),
        (1, PacketType::DataSync, true),
        (2, PacketType::ProtoAck, false),
        (3, PacketType::SyncAck, false),
        (4, PacketType::Cancel, false),
        (5, PacketType::CancelYes, false),
        (6, PacketType::CancelNo, false),
        (7, PacketType::Fini, false),
    ];
    for (v, t, data) in expect {
        let mut b = vec![0u8; HEADER_LEN];
        put(&mut b, 0, &v.to_be_bytes());
        // LAM puts 128 in pk_len (and pk_msglen) of control packets without sending data.
        put(&mut b, 4, &128u32.to_be_bytes());
        put(&mut b, 72, &128u64.to_be_bytes());
        put(&mut b, 56, &77u64.to_be_bytes());
        let h = Header::decode(&b).unwrap();
        assert_eq!(h.pk_type, t);
        assert_eq!(h.pk_srqid, 77);
        assert_eq!(h.pk_type.carries_data(), data, "{t:?}");
        assert_eq!(h.data_len(), if data { 128 } else { 0 }, "{t:?}");
        assert_eq!(
            t.counts_for_flow_control(),
            !matches!(t, PacketType::ProtoAck | PacketType::Fini)
        );
        assert_eq!(h.encode().to_vec(), b);

        // In a stream, a control packet is followed directly by the next header.
        let mut one = b.clone();
        if data {
            one.extend(std::iter::repeat_n(0xab, 128));
        }
        let stream = [one.clone(), one].concat();
        let mut dec = PacketDecoder::new(65536);
        dec.push(&stream);
        for _ in 0..2 {
            let (h2, d) = dec.next_packet().unwrap().unwrap();
            assert_eq!(h2, h);
            assert_eq!(d.len(), h.data_len());
        }
        assert_eq!(dec.next_packet().unwrap(), None);
    }
}

#[test]
fn malformed_headers_are_rejected() {
    let good = hex(DATASYNC_HEX);
    assert_eq!(Header::decode(&good[..127]), Err(PacketError::Short(127)));
    let mut b = good.clone();
    put(&mut b, 0, &8u32.to_be_bytes());
    assert_eq!(Header::decode(&b), Err(PacketError::UnknownType(8)));
    let mut b = good.clone();
    put(&mut b, 72, &100u64.to_be_bytes()); // msglen 100 < pk_len 65536
    assert_eq!(
        Header::decode(&b),
        Err(PacketError::LenExceedsMsglen {
            len: 65536,
            msglen: 100
        })
    );
    // Over the job's DATALEN: the stream decoder refuses before buffering the data.
    let mut dec = PacketDecoder::new(4096);
    dec.push(&good);
    assert_eq!(
        dec.next_packet(),
        Err(PacketError::LenExceedsDatalen {
            len: 65536,
            datalen: 4096
        })
    );
}

#[test]
fn stream_decoder_takes_bytes_one_at_a_time() {
    let mut h = Header::new(PacketType::Data);
    h.pk_len = 5;
    h.pk_msglen = 5;
    let mut stream = h.encode().to_vec();
    stream.extend_from_slice(b"hello");
    let mut dec = PacketDecoder::new(16);
    for (i, b) in stream.iter().enumerate() {
        dec.push(std::slice::from_ref(b));
        let p = dec.next_packet().unwrap();
        if i + 1 < stream.len() {
            assert_eq!(p, None);
        } else {
            assert_eq!(p, Some((h, b"hello".to_vec())));
        }
    }
    assert_eq!(dec.buffered(), 0);
}

#[test]
fn host_id_forms_compare_equal() {
    let zero = ProcId::ipv4(std::net::Ipv4Addr::new(10, 1, 2, 4), 7);
    assert_ne!(zero, dst_mapped());
    assert_eq!(zero.canonical(), dst_mapped().canonical());
    // A real IPv6 address is not folded.
    let mut v6 = [0u8; 16];
    v6[0] = 0xfe;
    v6[1] = 0x80;
    v6[12..].copy_from_slice(&[10, 1, 2, 4]);
    assert_ne!(ProcId { hostid: v6, pid: 7 }.canonical(), zero.canonical());
}

#[test]
fn client_commands() {
    let cases: Vec<(&str, ClientMsg)> = vec![
        ("41555448 00000004 00000003", ClientMsg::Auth { mask: 3 }),
        ("494d5049 00000004 00000002", ClientMsg::Impi { rank: 2 }),
        (
            "434f4c4c 00000008 00001100 00000001",
            ClientMsg::Coll {
                label: label::C_NHOSTS,
                data: hex("00000001"),
            },
        ),
        (
            "434f4c4c 0000000c 00001000 00000000 00000000",
            ClientMsg::Coll {
                label: label::C_VERSION,
                data: hex("0000000000000000"),
            },
        ),
        ("444f4e45 00000000", ClientMsg::Done),
        ("46494e49 00000000", ClientMsg::Fini),
    ];
    for (h, m) in cases {
        let b = hex(h);
        assert_eq!(
            ClientMsg::decode(&b, ClientExpect::Command),
            Ok(Some((m.clone(), b.len()))),
            "{h}"
        );
        assert_eq!(m.encode(), b);
        // Incomplete: need more.
        assert_eq!(
            ClientMsg::decode(&b[..b.len() - 1], ClientExpect::Command),
            Ok(None)
        );
    }
    let key = hex("ffffffffffffffd6"); // atoll("-42") on the wire
    assert_eq!(
        ClientMsg::decode(&key, ClientExpect::Key),
        Ok(Some((ClientMsg::Key((-42i64) as u64), 8)))
    );
}

#[test]
fn bad_client_commands() {
    assert_eq!(
        ClientMsg::decode(&hex("58585858 00000000"), ClientExpect::Command),
        Err(StartupError::UnknownCommand(0x5858_5858))
    );
    assert_eq!(
        ClientMsg::decode(&hex("41555448 00000008"), ClientExpect::Command),
        Err(StartupError::BadLength {
            cmd: 0x4155_5448,
            len: 8
        })
    );
    assert_eq!(
        ClientMsg::decode(&hex("434f4c4c ffffffff"), ClientExpect::Command),
        Err(StartupError::BadLength {
            cmd: 0x434f_4c4c,
            len: -1
        })
    );
    assert_eq!(
        ClientMsg::decode(&hex("434f4c4c 7fffffff"), ClientExpect::Command),
        Err(StartupError::BadLength {
            cmd: 0x434f_4c4c,
            len: 0x7fff_ffff
        })
    );
    assert_eq!(
        ClientMsg::decode(&hex("444f4e45 00000004 00000000"), ClientExpect::Command),
        Err(StartupError::BadLength {
            cmd: 0x444f_4e45,
            len: 4
        })
    );
}

#[test]
fn server_messages_and_the_reports_coll_example() {
    // The report's example: three clients with 3, 2 and 2 hosts.
    let b = hex("434f4c4c 00000014 00001100 00000007 00000003 00000002 00000002");
    let m = ServerMsg::Coll {
        label: label::C_NHOSTS,
        mask: 7,
        data: hex("00000003 00000002 00000002"),
    };
    assert_eq!(
        ServerMsg::decode(&b, ServerExpect::Command),
        Ok(Some((m.clone(), b.len())))
    );
    assert_eq!(m.encode(), b);
    let auth = hex("00000001 00000000");
    assert_eq!(
        ServerMsg::decode(&auth, ServerExpect::AuthChoice),
        Ok(Some((ServerMsg::AuthChoice { which: 1, len: 0 }, 8)))
    );
    assert_eq!(
        ServerMsg::Impi { nclients: 3 }.encode(),
        hex("494d5049 00000004 00000003")
    );
    assert_eq!(ServerMsg::Done.encode(), hex("444f4e45 00000000"));
    // LAM's client skips a payload after DONE; so does ours.
    let done = hex("444f4e45 00000002 abcd");
    assert_eq!(
        ServerMsg::decode(&done, ServerExpect::Command),
        Ok(Some((ServerMsg::Done, 10)))
    );
    // AUTH and FINI never come from a server.
    assert!(matches!(
        ServerMsg::decode(&hex("46494e49 00000000"), ServerExpect::Command),
        Err(StartupError::UnknownCommand(_))
    ));
}

#[test]
fn label_values_are_the_reports() {
    assert_eq!(
        label::ALL,
        [
            0x1000, 0x1100, 0x1200, 0x1300, 0x1400, 0x1500, 0x1600, 0x2000, 0x2100, 0x2200, 0x2300,
            0x2400, 0x3000, 0x3100
        ]
    );
}
