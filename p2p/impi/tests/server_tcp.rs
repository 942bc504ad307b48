//! `tsunagi-impi-server` as a process, with scripted clients over TCP on 127.0.0.1.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tsunagi_impi::startup::{label, ClientMsg, ServerExpect, ServerMsg};

struct ServerProc {
    child: Child,
    port: u16,
    first_line: String,
}

fn start(args: &[&str], env: &[(&str, &str)]) -> ServerProc {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tsunagi-impi-server"));
    cmd.args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_remove("IMPI_AUTH_KEY")
        .env_remove("IMPI_AUTH_NONE");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("start tsunagi-impi-server");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let line = line.trim().to_string();
    let port = line
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or_else(|| panic!("HOST:PORT, got {line:?}"));
    ServerProc {
        child,
        port,
        first_line: line,
    }
}

impl ServerProc {
    /// Wait (at most 10 s) for the exit; status and stderr.
    fn wait(mut self) -> (i32, String) {
        let t = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                let mut err = String::new();
                self.child
                    .stderr
                    .take()
                    .unwrap()
                    .read_to_string(&mut err)
                    .unwrap();
                return (st.code().unwrap_or(-1), err);
            }
            if t.elapsed() > Duration::from_secs(10) {
                let _ = self.child.kill();
                panic!("server did not exit");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for ServerProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Client {
    s: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    fn connect(port: u16) -> Client {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Client { s, buf: Vec::new() }
    }

    fn send(&mut self, m: ClientMsg) {
        self.s.write_all(&m.encode()).unwrap();
    }

    fn recv(&mut self, expect: ServerExpect) -> ServerMsg {
        loop {
            if let Some((m, used)) = ServerMsg::decode(&self.buf, expect).unwrap() {
                self.buf.drain(..used);
                return m;
            }
            let mut b = [0u8; 4096];
            let n = match self.s.read(&mut b) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                r => r.unwrap(),
            };
            assert!(n > 0, "server closed the connection");
            self.buf.extend_from_slice(&b[..n]);
        }
    }

    /// Whether the server closed the connection (EOF or reset) before the read timeout.
    fn closed_by_server(&mut self) -> bool {
        let mut b = [0u8; 16];
        loop {
            match self.s.read(&mut b) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                // A timeout means the server kept the connection open.
                Err(e) => {
                    return !matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    )
                }
                Ok(n) => return n == 0,
            }
        }
    }

    fn auth_none(&mut self) {
        self.send(ClientMsg::Auth { mask: 1 });
        assert_eq!(
            self.recv(ServerExpect::AuthChoice),
            ServerMsg::AuthChoice { which: 0, len: 0 }
        );
    }
}

/// Two clients through every label, the way LAM's client sends them (values of a 1-host
/// client with `nprocs` procs on 127.0.0.x), then DONE and FINI.
#[test]
fn two_clients_full_startup_over_tcp() {
    let srv = start(
        &["-server", "2", "-host", "127.0.0.1", "-v"],
        &[("IMPI_AUTH_NONE", "")],
    );
    assert_eq!(srv.first_line, format!("127.0.0.1:{}", srv.port));
    let mut c: Vec<Client> = (0..2).map(|_| Client::connect(srv.port)).collect();
    // Client 1 joins first: answers are still in client-rank order.
    for (i, rank) in [(1usize, 1i32), (0, 0)] {
        c[i].auth_none();
        c[i].send(ClientMsg::Impi { rank });
    }
    for cl in c.iter_mut() {
        assert_eq!(
            cl.recv(ServerExpect::Command),
            ServerMsg::Impi { nclients: 2 }
        );
    }
    let nprocs = [2i32, 3];
    let payload = |l: i32, k: usize| -> Vec<u8> {
        let ip = [0u8; 12]
            .iter()
            .copied()
            .chain([127, 0, 0, 1 + k as u8])
            .collect::<Vec<u8>>();
        match l {
            label::C_VERSION => vec![0; 8],
            label::C_NHOSTS => 1i32.to_be_bytes().to_vec(),
            label::C_NPROCS | label::H_NPROCS => nprocs[k].to_be_bytes().to_vec(),
            label::C_DATALEN => (65536u32 >> k).to_be_bytes().to_vec(),
            label::C_TAGUB => i32::MAX.to_be_bytes().to_vec(),
            label::C_COLL_XSIZE | label::C_COLL_MAXLINEAR => (-1i32).to_be_bytes().to_vec(),
            label::H_IPV6 => ip,
            label::H_PORT => (5000 + k as i32).to_be_bytes().to_vec(),
            label::H_ACKMARK => 10u32.to_be_bytes().to_vec(),
            label::H_HIWATER => 20u32.to_be_bytes().to_vec(),
            label::P_IPV6 => ip.repeat(nprocs[k] as usize),
            label::P_PID => (0..nprocs[k])
                .flat_map(|p| (100 * k as i64 + p as i64).to_be_bytes())
                .collect(),
            _ => unreachable!(),
        }
    };
    for l in label::ALL {
        for (k, cl) in c.iter_mut().enumerate().rev() {
            cl.send(ClientMsg::Coll {
                label: l,
                data: payload(l, k),
            });
        }
        let want = ServerMsg::Coll {
            label: l,
            mask: 3,
            data: [payload(l, 0), payload(l, 1)].concat(),
        };
        for cl in c.iter_mut() {
            assert_eq!(cl.recv(ServerExpect::Command), want, "label 0x{l:x}");
        }
    }
    for cl in c.iter_mut() {
        cl.send(ClientMsg::Done);
    }
    for cl in c.iter_mut() {
        assert_eq!(cl.recv(ServerExpect::Command), ServerMsg::Done);
    }
    c[0].send(ClientMsg::Fini);
    drop(c.remove(0));
    c[0].send(ClientMsg::Fini);
    let (code, err) = srv.wait();
    assert_eq!(code, 0, "stderr: {err}");
    assert!(err.contains("every client sent FINI"), "{err}");
    assert!(
        err.contains("client 1: COLL label 0x3100, 24 bytes"),
        "-v reports commands: {err}"
    );
}

#[test]
fn key_auth_over_tcp_and_a_wrong_key_does_not_end_the_job() {
    let srv = start(
        &["-server", "1", "-host", "127.0.0.1", "-auth", "key"],
        &[("IMPI_AUTH_KEY", "123456789")],
    );
    let mut bad = Client::connect(srv.port);
    bad.send(ClientMsg::Auth { mask: 2 });
    assert_eq!(
        bad.recv(ServerExpect::AuthChoice),
        ServerMsg::AuthChoice { which: 1, len: 0 }
    );
    bad.send(ClientMsg::Key(987654321));
    assert!(bad.closed_by_server());
    let mut none = Client::connect(srv.port);
    none.send(ClientMsg::Auth { mask: 1 });
    assert!(
        none.closed_by_server(),
        "NONE is not accepted with -auth key"
    );
    let mut good = Client::connect(srv.port);
    good.send(ClientMsg::Auth { mask: 3 });
    assert_eq!(
        good.recv(ServerExpect::AuthChoice),
        ServerMsg::AuthChoice { which: 1, len: 0 }
    );
    good.send(ClientMsg::Key(123456789));
    good.send(ClientMsg::Impi { rank: 0 });
    assert_eq!(
        good.recv(ServerExpect::Command),
        ServerMsg::Impi { nclients: 1 }
    );
    good.send(ClientMsg::Done);
    assert_eq!(good.recv(ServerExpect::Command), ServerMsg::Done);
    good.send(ClientMsg::Fini);
    let (code, err) = srv.wait();
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("wrong key"), "{err}");
}

#[test]
fn a_client_lost_before_fini_is_reported_and_the_server_fails() {
    let srv = start(&["-server", "2", "-host", "127.0.0.1", "-auth", "0"], &[]);
    let mut a = Client::connect(srv.port);
    let mut b = Client::connect(srv.port);
    for (cl, r) in [(&mut a, 0), (&mut b, 1)] {
        cl.auth_none();
        cl.send(ClientMsg::Impi { rank: r });
    }
    assert_eq!(
        a.recv(ServerExpect::Command),
        ServerMsg::Impi { nclients: 2 }
    );
    drop(b);
    let (code, err) = srv.wait();
    assert_eq!(code, 1);
    assert!(err.contains("client 1 lost"), "{err}");
    assert!(a.closed_by_server(), "the others are disconnected");
}

#[test]
fn bad_arguments_are_refused() {
    for args in [
        &[][..],
        &["-server", "0"],
        &["-server", "40"],
        &["-server", "2", "-auth", "maybe"],
        &["-bogus"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_tsunagi-impi-server"))
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(!out.stderr.is_empty());
    }
    let out = Command::new(env!("CARGO_BIN_EXE_tsunagi-impi-server"))
        .args(["-server", "1", "-auth", "key"])
        .env_remove("IMPI_AUTH_KEY")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("IMPI_AUTH_KEY"));
}
