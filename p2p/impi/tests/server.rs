//! The server state machine without sockets: scripted clients as byte vectors.

use tsunagi_impi::server::{parse_key, AuthPolicy, Output, Server, ServerConfig};
use tsunagi_impi::startup::{label, ClientMsg, ServerMsg};

fn server(n: u32, none: bool, key: Option<u64>) -> Server {
    Server::new(ServerConfig {
        nclients: n,
        auth: AuthPolicy { none, key },
    })
    .unwrap()
}

fn drain(s: &mut Server) -> Vec<Output> {
    std::iter::from_fn(|| s.poll_output())
        .filter(|o| !matches!(o, Output::Note(_)))
        .collect()
}

fn send(s: &mut Server, c: u64, m: ClientMsg) {
    s.received(c, &m.encode());
}

/// Connect, AUTH with NONE, IMPI rank.
fn join(s: &mut Server, c: u64, rank: i32) {
    s.connected(c);
    send(s, c, ClientMsg::Auth { mask: 1 });
    assert_eq!(
        drain(s),
        vec![Output::Send(
            c,
            ServerMsg::AuthChoice { which: 0, len: 0 }.encode()
        )]
    );
    send(s, c, ClientMsg::Impi { rank });
}

#[test]
fn full_startup_of_three_clients_joining_out_of_order() {
    let mut s = server(3, true, None);
    join(&mut s, 10, 2);
    join(&mut s, 11, 0);
    assert!(drain(&mut s).is_empty(), "IMPI is answered once all joined");
    join(&mut s, 12, 1);
    let out = drain(&mut s);
    let impi = ServerMsg::Impi { nclients: 3 }.encode();
    assert_eq!(
        out,
        vec![
            Output::Send(11, impi.clone()),
            Output::Send(12, impi.clone()),
            Output::Send(10, impi)
        ]
    );
    // Every label, each client's payload distinct; the answer is in client-rank order.
    for l in label::ALL {
        for (conn, rank) in [(10u64, 2u8), (12, 1), (11, 0)] {
            assert!(drain(&mut s).is_empty());
            send(
                &mut s,
                conn,
                ClientMsg::Coll {
                    label: l,
                    data: vec![rank; 1 + rank as usize],
                },
            );
        }
        let want = ServerMsg::Coll {
            label: l,
            mask: 7,
            data: vec![0, 1, 1, 2, 2, 2],
        }
        .encode();
        assert_eq!(
            drain(&mut s),
            vec![
                Output::Send(11, want.clone()),
                Output::Send(12, want.clone()),
                Output::Send(10, want)
            ]
        );
    }
    for c in [10, 11] {
        send(&mut s, c, ClientMsg::Done);
    }
    assert!(drain(&mut s).is_empty());
    send(&mut s, 12, ClientMsg::Done);
    let done = ServerMsg::Done.encode();
    assert_eq!(
        drain(&mut s),
        vec![
            Output::Send(11, done.clone()),
            Output::Send(12, done.clone()),
            Output::Send(10, done)
        ]
    );
    for c in [10, 11] {
        send(&mut s, c, ClientMsg::Fini);
        s.closed(c);
    }
    assert!(drain(&mut s).is_empty() && !s.is_over());
    send(&mut s, 12, ClientMsg::Fini);
    assert_eq!(drain(&mut s), vec![Output::Finished]);
    assert!(s.is_over());
}

#[test]
fn a_label_a_client_skips_is_answered_with_the_mask_of_those_that_sent_it() {
    let mut s = server(2, true, None);
    join(&mut s, 1, 0);
    join(&mut s, 2, 1);
    drain(&mut s);
    send(
        &mut s,
        1,
        ClientMsg::Coll {
            label: 0x7777,
            data: vec![9],
        },
    );
    assert!(drain(&mut s).is_empty());
    send(&mut s, 2, ClientMsg::Done);
    let want = ServerMsg::Coll {
        label: 0x7777,
        mask: 1,
        data: vec![9],
    }
    .encode();
    assert_eq!(
        drain(&mut s),
        vec![Output::Send(1, want)],
        "only the contributor waits for it"
    );
    send(&mut s, 1, ClientMsg::Done);
    assert_eq!(drain(&mut s).len(), 2);
}

#[test]
fn key_authentication() {
    let mut s = server(1, false, Some(parse_key("-42").unwrap()));
    s.connected(1);
    // A client offering only NONE is turned away; the job goes on.
    send(&mut s, 1, ClientMsg::Auth { mask: 1 });
    assert_eq!(drain(&mut s), vec![Output::Close(1)]);
    assert!(!s.is_over());
    // A wrong key: closed, job goes on.
    s.connected(2);
    send(&mut s, 2, ClientMsg::Auth { mask: 3 });
    assert_eq!(
        drain(&mut s),
        vec![Output::Send(2, vec![0, 0, 0, 1, 0, 0, 0, 0])]
    );
    send(&mut s, 2, ClientMsg::Key(41));
    assert_eq!(drain(&mut s), vec![Output::Close(2)]);
    s.closed(2);
    assert!(!s.is_over());
    // The right key (atoll("-42") as a two's complement Uint8).
    s.connected(3);
    send(&mut s, 3, ClientMsg::Auth { mask: 2 });
    drain(&mut s);
    s.received(3, &(-42i64).to_be_bytes());
    send(&mut s, 3, ClientMsg::Impi { rank: 0 });
    assert_eq!(
        drain(&mut s),
        vec![Output::Send(3, ServerMsg::Impi { nclients: 1 }.encode())]
    );
}

#[test]
fn key_is_preferred_when_both_are_possible_and_bytes_may_come_one_at_a_time() {
    let mut s = server(1, true, Some(7));
    s.connected(1);
    let mut bytes = ClientMsg::Auth { mask: 3 }.encode();
    bytes.extend_from_slice(&7u64.to_be_bytes());
    bytes.extend(ClientMsg::Impi { rank: 0 }.encode());
    for b in bytes {
        s.received(1, &[b]);
    }
    let out = drain(&mut s);
    assert_eq!(
        out[0],
        Output::Send(1, ServerMsg::AuthChoice { which: 1, len: 0 }.encode())
    );
    assert_eq!(
        out[1],
        Output::Send(1, ServerMsg::Impi { nclients: 1 }.encode())
    );
}

#[test]
fn lost_client_before_fini_fails_the_job() {
    let mut s = server(2, true, None);
    join(&mut s, 1, 0);
    join(&mut s, 2, 1);
    drain(&mut s);
    s.closed(2);
    let out = drain(&mut s);
    assert!(
        matches!(&out[0], Output::Failed(m) if m.contains("client 1 lost during start-up")),
        "{out:?}"
    );
    assert!(out.contains(&Output::Close(1)));
    assert!(s.is_over());
}

#[test]
fn a_stray_connection_does_not_end_the_job() {
    let mut s = server(1, true, None);
    s.connected(5);
    s.received(5, b"GET / HTTP/1.0\r\n\r\n");
    assert_eq!(drain(&mut s), vec![Output::Close(5)]);
    s.closed(5);
    assert!(!s.is_over());
}

#[test]
fn protocol_errors_of_joined_clients_fail_the_job() {
    let cases: Vec<(Vec<ClientMsg>, &str)> = vec![
        (
            vec![ClientMsg::Impi { rank: 0 }],
            "two clients claim rank 0",
        ),
        (vec![ClientMsg::Fini], "unexpected FINI before DONE"),
        (
            vec![
                ClientMsg::Done,
                ClientMsg::Coll {
                    label: 1,
                    data: vec![],
                },
            ],
            "unexpected COLL",
        ),
        (
            vec![
                ClientMsg::Coll {
                    label: 1,
                    data: vec![],
                },
                ClientMsg::Coll {
                    label: 1,
                    data: vec![],
                },
            ],
            "sent twice",
        ),
    ];
    for (msgs, want) in cases {
        let mut s = server(2, true, None);
        join(&mut s, 1, 0);
        join(&mut s, 2, 1);
        drain(&mut s);
        if want.contains("two clients") {
            join(&mut s, 3, 0);
        }
        for m in msgs {
            send(&mut s, 2, m);
        }
        let out = drain(&mut s);
        assert!(
            out.iter()
                .any(|o| matches!(o, Output::Failed(m) if m.contains(want))),
            "{want}: {out:?}"
        );
    }
    // Out-of-range rank before joining: only that connection is dropped.
    let mut s = server(2, true, None);
    s.connected(1);
    send(&mut s, 1, ClientMsg::Auth { mask: 1 });
    send(&mut s, 1, ClientMsg::Impi { rank: 2 });
    assert_eq!(drain(&mut s).last(), Some(&Output::Close(1)));
    assert!(!s.is_over());
}

#[test]
fn configuration_limits() {
    assert!(Server::new(ServerConfig {
        nclients: 0,
        auth: AuthPolicy {
            none: true,
            key: None
        }
    })
    .is_err());
    assert!(Server::new(ServerConfig {
        nclients: 33,
        auth: AuthPolicy {
            none: true,
            key: None
        }
    })
    .is_err());
    assert!(Server::new(ServerConfig {
        nclients: 32,
        auth: AuthPolicy {
            none: true,
            key: None
        }
    })
    .is_ok());
    assert!(Server::new(ServerConfig {
        nclients: 1,
        auth: AuthPolicy {
            none: false,
            key: None
        }
    })
    .is_err());
    assert_eq!(
        AuthPolicy::from_env_values(None, false).unwrap(),
        AuthPolicy {
            none: true,
            key: None
        }
    );
    assert_eq!(
        AuthPolicy::from_env_values(Some("12"), false).unwrap(),
        AuthPolicy {
            none: false,
            key: Some(12)
        }
    );
    assert_eq!(
        AuthPolicy::from_env_values(Some("12"), true).unwrap(),
        AuthPolicy {
            none: true,
            key: Some(12)
        }
    );
    assert!(AuthPolicy::from_env_values(Some("twelve"), false).is_err());
    assert_eq!(parse_key("18446744073709551615").unwrap(), u64::MAX);
}
