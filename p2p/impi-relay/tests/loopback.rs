//! The relay on loopback between a real IMPI server (tsunagi-impi's state machine with a
//! small thread driver) and two clients (tsunagi-impi's client start-up) whose "private"
//! hosts listen on 127.0.0.2 and 127.0.0.3: the answers every client gets name the relay
//! (127.0.0.1) for every host, and a connection to such an endpoint reaches the private
//! host and carries 4 MiB each way in order, with the half-close passed on.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::Duration;

use tsunagi_impi::client::{ClientConfig, ClientStartup};
use tsunagi_impi::server::{AuthPolicy, Output, Server, ServerConfig};
use tsunagi_impi::startup::label;
use tsunagi_impi_relay::{Config, Relay};

/// The IMPI server on a loopback port: one reader thread per connection, the state
/// machine and every write on the serving thread (as `tsunagi-impi-server` does).
fn serve_impi(nclients: u32) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut server = Server::new(ServerConfig {
            nclients,
            auth: AuthPolicy {
                none: true,
                key: None,
            },
        })
        .unwrap();
        let (tx, rx) = mpsc::channel::<(u64, Option<Vec<u8>>)>();
        let mut conns: HashMap<u64, TcpStream> = HashMap::new();
        for id in 0..u64::from(nclients) {
            let (s, _) = listener.accept().unwrap();
            let mut r = s.try_clone().unwrap();
            conns.insert(id, s);
            server.connected(id);
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut b = [0u8; 4096];
                loop {
                    match r.read(&mut b) {
                        Ok(0) | Err(_) => {
                            let _ = tx.send((id, None));
                            return;
                        }
                        Ok(n) => {
                            let _ = tx.send((id, Some(b[..n].to_vec())));
                        }
                    }
                }
            });
        }
        loop {
            while let Some(o) = server.poll_output() {
                match o {
                    Output::Send(c, bytes) => {
                        let _ = conns.get_mut(&c).unwrap().write_all(&bytes);
                    }
                    Output::Close(c) => {
                        let _ = conns[&c].shutdown(Shutdown::Both);
                    }
                    Output::Finished | Output::Failed(_) => return,
                    Output::Note(_) => {}
                }
            }
            match rx.recv() {
                Ok((c, Some(bytes))) => server.received(c, &bytes),
                Ok((c, None)) => server.closed(c),
                Err(_) => return,
            }
        }
    });
    addr
}

fn mapped(a: Ipv4Addr) -> Vec<u8> {
    a.to_ipv6_mapped().octets().to_vec()
}

/// A client with one host at `host`: runs start-up through `server`, returns the answers'
/// host endpoints of every client (in client order) and the start-up connection.
fn client(rank: u32, server: SocketAddr, host: SocketAddr) -> (Vec<SocketAddr>, TcpStream) {
    let ip = match host.ip() {
        std::net::IpAddr::V4(a) => a,
        _ => unreachable!(),
    };
    let one = |v: i32| v.to_be_bytes().to_vec();
    let mut st = ClientStartup::new(ClientConfig {
        rank,
        auth_none: true,
        auth_key: None,
        payloads: vec![
            (label::C_VERSION, vec![0; 8]),
            (label::C_NHOSTS, one(1)),
            (label::C_NPROCS, one(1)),
            (label::C_DATALEN, 65536u32.to_be_bytes().to_vec()),
            (label::C_TAGUB, one(i32::MAX)),
            (label::C_COLL_XSIZE, one(-1)),
            (label::C_COLL_MAXLINEAR, one(-1)),
            (label::H_IPV6, mapped(ip)),
            (label::H_PORT, one(i32::from(host.port()))),
            (label::H_NPROCS, one(1)),
            (label::H_ACKMARK, 10u32.to_be_bytes().to_vec()),
            (label::H_HIWATER, 20u32.to_be_bytes().to_vec()),
            (label::P_IPV6, mapped(ip)),
            (
                label::P_PID,
                (1000 + i64::from(rank)).to_be_bytes().to_vec(),
            ),
        ],
    })
    .unwrap();
    let mut s = TcpStream::connect(server).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut b = [0u8; 4096];
    while !st.is_done() {
        s.write_all(&st.transmit()).unwrap();
        let n = s.read(&mut b).expect("the relay answers within 20 s");
        assert!(n > 0, "the relay closed the start-up connection");
        st.handle_input(&b[..n]).unwrap();
    }
    let addrs = &st.answers()[&label::H_IPV6].1;
    let ports = &st.answers()[&label::H_PORT].1;
    let eps = addrs
        .chunks(16)
        .zip(ports.chunks(4))
        .map(|(a, p)| {
            let a = Ipv6Addr::from(<[u8; 16]>::try_from(a).unwrap());
            let p = i32::from_be_bytes(p.try_into().unwrap());
            SocketAddr::new(a.to_ipv4_mapped().unwrap().into(), p as u16)
        })
        .collect();
    // The caller keeps the start-up connection: the relay keeps the host listeners while
    // it is open.
    (eps, s)
}

#[test]
fn hosts_appear_at_the_relay_and_host_pairs_reach_the_private_hosts() {
    let server = serve_impi(2);
    let relay = Relay::bind(Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        server,
        public: Ipv4Addr::LOCALHOST,
        verbose: false,
    })
    .unwrap();
    let relay_at = relay.local_addr().unwrap();
    std::thread::spawn(move || relay.serve());

    let hosts: Vec<TcpListener> = ["127.0.0.2:0", "127.0.0.3:0"]
        .iter()
        .map(|a| TcpListener::bind(a).unwrap())
        .collect();
    let private: Vec<SocketAddr> = hosts.iter().map(|l| l.local_addr().unwrap()).collect();
    let (p1, r1) = (private[1], relay_at);
    let other = std::thread::spawn(move || client(1, r1, p1));
    let (eps0, _c0) = client(0, relay_at, private[0]);
    let (eps1, _c1) = other.join().unwrap();
    assert_eq!(eps0, eps1, "every client gets the same host table");
    for (k, ep) in eps0.iter().enumerate() {
        assert_eq!(
            ep.ip(),
            Ipv4Addr::LOCALHOST,
            "host {k} appears at the relay"
        );
        assert_ne!(
            *ep, private[k],
            "host {k} is not announced at its private endpoint"
        );
    }

    // Client 1's host connects to client 0's host through the relay.
    const N: usize = 4 << 20;
    let pattern = |i: usize| (i * 7 + i / 4096) as u8;
    let listener = hosts.into_iter().next().unwrap();
    let far = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut got = Vec::with_capacity(N);
        s.read_to_end(&mut got).unwrap();
        let out: Vec<u8> = (0..N).map(|i| pattern(N - i)).collect();
        s.write_all(&out).unwrap();
        got
    });
    let mut s = TcpStream::connect(eps0[0]).unwrap();
    let data: Vec<u8> = (0..N).map(pattern).collect();
    s.write_all(&data).unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    let mut back = Vec::new();
    s.read_to_end(&mut back).unwrap();
    let got = far.join().unwrap();
    assert!(got == data, "4 MiB arrived in order at the private host");
    assert_eq!(back.len(), N);
    assert!(back.iter().enumerate().all(|(i, &b)| b == pattern(N - i)));
}
