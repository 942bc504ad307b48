//! Our start-up client against the server: in memory with the state machine, and over TCP
//! with `tsunagi-impi-server`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use tsunagi_impi::client::{ClientConfig, ClientError, ClientStartup};
use tsunagi_impi::server::{AuthPolicy, Output, Server, ServerConfig};
use tsunagi_impi::startup::label;

fn be(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_be_bytes()).collect()
}

/// A one-host client on 127.0.0.(1+rank) with `n` procs (pids 100*rank+i).
fn payloads(rank: u32, n: i32) -> Vec<(i32, Vec<u8>)> {
    let mut ip = vec![0u8; 16];
    ip[12..].copy_from_slice(&[127, 0, 0, 1 + rank as u8]);
    vec![
        (label::C_VERSION, vec![0; 8]),
        (label::C_NHOSTS, be(&[1])),
        (label::C_NPROCS, be(&[n])),
        (label::C_DATALEN, be(&[65536 >> rank])),
        (label::C_TAGUB, be(&[i32::MAX])),
        (label::C_COLL_XSIZE, be(&[-1])),
        (label::C_COLL_MAXLINEAR, be(&[-1])),
        (label::H_IPV6, ip.clone()),
        (label::H_PORT, be(&[7000 + rank as i32])),
        (label::H_NPROCS, be(&[n])),
        (label::H_ACKMARK, be(&[10])),
        (label::H_HIWATER, be(&[20])),
        (label::P_IPV6, ip.repeat(n as usize)),
        (
            label::P_PID,
            (0..n)
                .flat_map(|i| (100 * i64::from(rank) + i64::from(i)).to_be_bytes())
                .collect(),
        ),
    ]
}

fn config(rank: u32, n: i32, key: Option<u64>) -> ClientConfig {
    ClientConfig {
        rank,
        auth_none: key.is_none(),
        auth_key: key,
        payloads: payloads(rank, n),
    }
}

#[test]
fn clients_and_server_state_machines() {
    let mut server = Server::new(ServerConfig {
        nclients: 2,
        auth: AuthPolicy {
            none: false,
            key: Some(9),
        },
    })
    .unwrap();
    let mut clients = [
        ClientStartup::new(config(1, 3, Some(9))).unwrap(),
        ClientStartup::new(config(0, 2, Some(9))).unwrap(),
    ];
    for c in 0..2 {
        server.connected(c);
    }
    for _ in 0..100 {
        for (c, cl) in clients.iter_mut().enumerate() {
            let b = cl.transmit();
            server.received(c as u64, &b);
        }
        while let Some(o) = server.poll_output() {
            if let Output::Send(c, b) = o {
                clients[c as usize].handle_input(&b).unwrap();
            }
        }
    }
    assert!(clients.iter().all(|c| c.is_done()));
    let p0 = clients[0].params().unwrap();
    assert_eq!(p0, clients[1].params().unwrap());
    assert_eq!(p0.client_nprocs, vec![2, 3]);
    assert_eq!(p0.link.datalen, 32768);
    assert_eq!(p0.hosts[1].ranks, 2..5);
    for (c, cl) in clients.iter_mut().enumerate() {
        cl.fini().unwrap();
        server.received(c as u64, &cl.transmit());
    }
    assert!(std::iter::from_fn(|| server.poll_output()).any(|o| o == Output::Finished));
}

#[test]
fn client_refuses_what_it_did_not_ask_for() {
    let mut c = ClientStartup::new(config(0, 1, None)).unwrap();
    c.transmit();
    // The server picks KEY, which we did not offer.
    let e = c.handle_input(&[0, 0, 0, 1, 0, 0, 0, 0]).unwrap_err();
    assert!(matches!(e, ClientError::Protocol(m) if m.contains("did not offer")));
    let mut c = ClientStartup::new(config(3, 1, None)).unwrap();
    c.handle_input(&[0; 8]).unwrap();
    let e = c
        .handle_input(&tsunagi_impi::startup::ServerMsg::Impi { nclients: 2 }.encode())
        .unwrap_err();
    assert!(e.to_string().contains("our rank is 3"));
    assert!(ClientStartup::new(ClientConfig {
        rank: 0,
        auth_none: false,
        auth_key: None,
        payloads: vec![]
    })
    .is_err());
}

/// Two clients over TCP through the real server, with KEY authentication.
#[test]
fn clients_over_tcp_through_the_server_binary() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tsunagi-impi-server"))
        .args(["-server", "2", "-host", "127.0.0.1", "-auth", "key"])
        .env("IMPI_AUTH_KEY", "-7")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line.trim().to_string();
    let threads: Vec<_> = [(0u32, 4i32), (1, 1)]
        .into_iter()
        .map(|(rank, n)| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(&addr).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let mut c = ClientStartup::new(config(rank, n, Some((-7i64) as u64))).unwrap();
                let mut buf = [0u8; 4096];
                while !c.is_done() {
                    s.write_all(&c.transmit()).unwrap();
                    let k = match s.read(&mut buf) {
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                        r => r.unwrap(),
                    };
                    assert!(k > 0, "server closed");
                    c.handle_input(&buf[..k]).unwrap();
                }
                let p = c.params().unwrap();
                c.fini().unwrap();
                s.write_all(&c.transmit()).unwrap();
                p
            })
        })
        .collect();
    let params: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(params[0], params[1]);
    assert_eq!(params[0].procs.len(), 5);
    let status = child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(status.success(), "{err}");
}
