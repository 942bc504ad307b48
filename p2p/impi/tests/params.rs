//! Job parameters from real server answers: two clients (LAM's model, one host with two
//! procs; GridMPI's model, one host per proc) go through the server state machine, and
//! both compute the same job from what it hands back.

use std::collections::BTreeMap;

use tsunagi_impi::params::JobParams;
use tsunagi_impi::server::{AuthPolicy, Output, Server, ServerConfig};
use tsunagi_impi::startup::{label, ClientMsg, ServerExpect, ServerMsg};

type Payloads = BTreeMap<i32, Vec<u8>>;

fn be(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_be_bytes()).collect()
}

fn v4(last: u8, mapped: bool) -> Vec<u8> {
    let mut h = vec![0u8; 16];
    if mapped {
        h[10] = 0xff;
        h[11] = 0xff;
    }
    h[12..].copy_from_slice(&[10, 0, 0, last]);
    h
}

/// Client 0: LAM-like, one host 10.0.0.1 carrying 2 procs.
fn lam_client() -> Payloads {
    BTreeMap::from([
        (label::C_VERSION, vec![0; 8]),
        (label::C_NHOSTS, be(&[1])),
        (label::C_NPROCS, be(&[2])),
        (label::C_DATALEN, be(&[65536])),
        (label::C_TAGUB, be(&[i32::MAX])),
        (label::C_COLL_XSIZE, be(&[1024])),
        (label::C_COLL_MAXLINEAR, be(&[4])),
        (label::H_IPV6, v4(1, false)),
        (label::H_PORT, be(&[5000])),
        (label::H_NPROCS, be(&[2])),
        (label::H_ACKMARK, be(&[10])),
        (label::H_HIWATER, be(&[20])),
        (label::P_IPV6, [v4(1, false), v4(1, false)].concat()),
        (
            label::P_PID,
            [11i64, 12].iter().flat_map(|p| p.to_be_bytes()).collect(),
        ),
    ])
}

/// Client 1: GridMPI-like, three hosts (one per proc) on 10.0.0.2, IPv4-mapped ids, versions
/// 0.0 and 0.1, defaults as -1.
fn grid_client() -> Payloads {
    BTreeMap::from([
        (
            label::C_VERSION,
            [vec![0; 8], vec![0, 0, 0, 0, 0, 0, 0, 1]].concat(),
        ),
        (label::C_NHOSTS, be(&[3])),
        (label::C_NPROCS, be(&[3])),
        (label::C_DATALEN, be(&[32768])),
        (label::C_TAGUB, be(&[65535])),
        (label::C_COLL_XSIZE, be(&[-1])),
        (label::C_COLL_MAXLINEAR, be(&[-1])),
        (
            label::H_IPV6,
            [v4(2, true), v4(2, true), v4(2, true)].concat(),
        ),
        (label::H_PORT, be(&[6000, 6001, 6002])),
        (label::H_NPROCS, be(&[1, 1, 1])),
        (label::H_ACKMARK, be(&[8, 10, 10])),
        (label::H_HIWATER, be(&[30, 16, 20])),
        (
            label::P_IPV6,
            [v4(2, true), v4(2, true), v4(2, true)].concat(),
        ),
        (
            label::P_PID,
            [21i64, 22, 23]
                .iter()
                .flat_map(|p| p.to_be_bytes())
                .collect(),
        ),
    ])
}

/// Run both clients through the server; each client's decoded answers.
fn run(clients: &[Payloads]) -> Vec<BTreeMap<i32, (u32, Vec<u8>)>> {
    let n = clients.len() as u32;
    let mut s = Server::new(ServerConfig {
        nclients: n,
        auth: AuthPolicy {
            none: true,
            key: None,
        },
    })
    .unwrap();
    for c in 0..n {
        s.connected(u64::from(c));
        s.received(u64::from(c), &ClientMsg::Auth { mask: 1 }.encode());
        s.received(u64::from(c), &ClientMsg::Impi { rank: c as i32 }.encode());
    }
    for l in label::ALL {
        for (c, p) in clients.iter().enumerate().rev() {
            s.received(
                c as u64,
                &ClientMsg::Coll {
                    label: l,
                    data: p[&l].clone(),
                }
                .encode(),
            );
        }
    }
    let mut bytes: Vec<Vec<u8>> = vec![Vec::new(); clients.len()];
    while let Some(o) = s.poll_output() {
        if let Output::Send(c, b) = o {
            bytes[c as usize].extend(b);
        }
    }
    bytes
        .into_iter()
        .map(|mut b| {
            b.drain(..8); // the AUTH answer
            let mut answers = BTreeMap::new();
            while let Some((m, used)) = ServerMsg::decode(&b, ServerExpect::Command).unwrap() {
                b.drain(..used);
                if let ServerMsg::Coll { label, mask, data } = m {
                    answers.insert(label, (mask, data));
                }
            }
            answers
        })
        .collect()
}

#[test]
fn both_host_models_give_one_job() {
    let answers = run(&[lam_client(), grid_client()]);
    let jobs: Vec<JobParams> = answers
        .iter()
        .map(|a| JobParams::from_answers(2, a).unwrap())
        .collect();
    assert_eq!(jobs[0], jobs[1], "every client computes the same job");
    let j = &jobs[0];
    assert_eq!(j.client_nprocs, vec![2, 3]);
    assert_eq!(
        (j.link.datalen, j.link.ackmark, j.link.hiwater),
        (32768, 8, 16)
    );
    assert_eq!((j.tag_ub, j.coll_xsize, j.coll_maxlinear), (65535, 1024, 4));
    assert_eq!(j.hosts.len(), 4);
    assert_eq!(j.hosts[0].ranks, 0..2);
    assert_eq!(j.hosts[3].ranks, 4..5);
    assert_eq!((j.hosts[3].client, j.hosts[3].port), (1, 6002));
    let t = j.proc_table();
    assert_eq!(t.len(), 5);
    assert_eq!(t.proc(2).unwrap().pid, 21);
}

#[test]
fn inconsistent_answers_are_refused() {
    let cases: Vec<(i32, Vec<u8>, &str)> = vec![
        (
            label::C_COLL_XSIZE,
            be(&[2048]),
            "C_COLL_XSIZE: clients disagree",
        ),
        (
            label::C_COLL_MAXLINEAR,
            be(&[8]),
            "C_COLL_MAXLINEAR: clients disagree",
        ),
        (
            label::C_VERSION,
            vec![0, 0, 0, 1, 0, 0, 0, 0],
            "list version 0.0",
        ),
        (label::C_TAGUB, be(&[100]), "C_TAGUB: client 1 sent 100"),
        (label::C_DATALEN, be(&[0]), "C_DATALEN"),
        (
            label::H_HIWATER,
            be(&[5, 5, 5]),
            "need 1 <= ackmark (8) <= hiwater (5)",
        ),
        (
            label::H_NPROCS,
            be(&[1, 1, 2]),
            "its hosts carry 4 procs, C_NPROCS says 3",
        ),
        (
            label::P_PID,
            [21i64, 22].iter().flat_map(|p| p.to_be_bytes()).collect(),
            "P_IPV6/P_PID",
        ),
        (
            label::P_PID,
            [21i64, 21, 23]
                .iter()
                .flat_map(|p| p.to_be_bytes())
                .collect(),
            "appears twice",
        ),
        (label::H_PORT, be(&[1]), "H_PORT: 2 values for 4 hosts"),
    ];
    for (l, bad, want) in cases {
        let mut g = grid_client();
        g.insert(l, bad);
        let answers = run(&[lam_client(), g]);
        let e = JobParams::from_answers(2, &answers[0]).unwrap_err();
        assert!(e.to_string().contains(want), "{e} should say {want:?}");
    }
    // A label only one client sent.
    let mut answers = run(&[lam_client(), grid_client()]).remove(0);
    answers.get_mut(&label::C_NPROCS).unwrap().0 = 1;
    assert!(JobParams::from_answers(2, &answers)
        .unwrap_err()
        .to_string()
        .contains("client mask 0x1"));
}
