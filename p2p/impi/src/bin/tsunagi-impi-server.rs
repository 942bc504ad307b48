//! `tsunagi-impi-server -server N [-port P] [-host ADDR] [-auth none|key]`: the IMPI
//! server for a job of N clients.
//!
//! Prints `HOST:PORT` as its first line (as the Indiana University server did), serves the
//! start-up protocol (see `tsunagi_impi::server`), and exits 0 once every client sent FINI;
//! exits 1 with a message when a client is lost before FINI or breaks the protocol.
//! Authentication: `-auth key` (or `1`) accepts KEY with the key from `IMPI_AUTH_KEY`;
//! `-auth none` (or `0`, the Indiana University server's spelling) accepts NONE; a list such
//! as `0,1` accepts both (KEY preferred). Without `-auth`, `IMPI_AUTH_KEY` enables KEY and
//! `IMPI_AUTH_NONE` (or no key) enables NONE.
//!
//! This is the thin socket driver: one reader thread per connection hands bytes to the main
//! thread, which owns the state machine and does every write.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::Duration;

use tsunagi_impi::server::{parse_key, AuthPolicy, ConnId, Output, Server, ServerConfig};

const USAGE: &str =
    "usage: tsunagi-impi-server -server N [-port P] [-host ADDR] [-auth none|key|0|1[,...]] [-v]";

enum Msg {
    Accepted(ConnId, TcpStream),
    Bytes(ConnId, Vec<u8>),
    Closed(ConnId),
}

struct Args {
    nclients: u32,
    port: u16,
    host: Option<IpAddr>,
    auth: Option<AuthSet>,
    verbose: bool,
}

/// The methods named by `-auth`.
#[derive(Clone, Copy, Default)]
struct AuthSet {
    none: bool,
    key: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let mut a = Args {
        nclients: 0,
        port: 0,
        host: None,
        auth: None,
        verbose: false,
    };
    while let Some(arg) = it.next() {
        let name = arg.trim_start_matches('-');
        let mut value = |what: &str| it.next().ok_or_else(|| format!("{arg}: missing {what}"));
        match name {
            "server" => {
                let v = value("client count")?;
                a.nclients = v
                    .parse()
                    .map_err(|_| format!("-server {v}: not a client count"))?;
            }
            "port" => {
                let v = value("port")?;
                a.port = v
                    .parse()
                    .map_err(|_| format!("-port {v}: not a port number"))?;
            }
            "host" => {
                let v = value("address")?;
                a.host = Some(
                    v.parse()
                        .map_err(|_| format!("-host {v}: not an IP address"))?,
                );
            }
            "auth" => {
                // Names, or the IMPI values the Indiana University server took (`-auth 0`
                // for NONE, 1 for KEY), alone or as a comma-separated list.
                let v = value("method")?;
                let mut set = AuthSet::default();
                for m in v.split(',') {
                    match m.trim() {
                        "none" | "0" => set.none = true,
                        "key" | "1" => set.key = true,
                        _ => {
                            return Err(format!(
                                "-auth {v}: expected none, key, 0, 1 or a comma-separated list"
                            ))
                        }
                    }
                }
                a.auth = Some(set);
            }
            "v" | "verbose" => a.verbose = true,
            "h" | "help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            _ => return Err(format!("unknown argument {arg}")),
        }
    }
    if a.nclients == 0 {
        return Err("-server N is required (N >= 1)".into());
    }
    Ok(a)
}

fn auth_policy(choice: Option<AuthSet>) -> Result<AuthPolicy, String> {
    let key = std::env::var("IMPI_AUTH_KEY").ok();
    match choice {
        Some(set) => {
            let key = if set.key {
                let k = key.ok_or("-auth key: set the key in IMPI_AUTH_KEY")?;
                Some(parse_key(&k)?)
            } else {
                None
            };
            Ok(AuthPolicy {
                none: set.none,
                key,
            })
        }
        None => AuthPolicy::from_env_values(
            key.as_deref(),
            std::env::var_os("IMPI_AUTH_NONE").is_some(),
        ),
    }
}

/// The address clients should use: the bound one, or for a wildcard bind the address this
/// host's name resolves to (loopback if it resolves to nothing else).
fn printable_host(bound: IpAddr) -> IpAddr {
    if !bound.is_unspecified() {
        return bound;
    }
    let name = tsunagi_p2p::boot::hostname();
    if let Ok(addrs) = (name.as_str(), 0).to_socket_addrs() {
        for a in addrs {
            if let IpAddr::V4(v4) = a.ip() {
                if !v4.is_loopback() {
                    return IpAddr::V4(v4);
                }
            }
        }
    }
    IpAddr::V4(Ipv4Addr::LOCALHOST)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("tsunagi-impi-server: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let policy = match auth_policy(args.auth) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("tsunagi-impi-server: {e}");
            return ExitCode::from(2);
        }
    };
    let mut server = match Server::new(ServerConfig {
        nclients: args.nclients,
        auth: policy,
    }) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("tsunagi-impi-server: {e}");
            return ExitCode::from(2);
        }
    };
    server.set_verbose(args.verbose);
    let bind = SocketAddr::new(
        args.host.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
        args.port,
    );
    let listener = match TcpListener::bind(bind) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("tsunagi-impi-server: cannot listen on {bind}: {e}");
            return ExitCode::from(1);
        }
    };
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(args.port);
    println!("{}:{port}", printable_host(bind.ip()));
    let _ = std::io::stdout().flush();

    let (tx, rx) = mpsc::channel::<Msg>();
    {
        let tx = tx.clone();
        std::thread::spawn(move || accept_loop(listener, tx));
    }
    drop(tx);

    let mut streams: std::collections::HashMap<ConnId, TcpStream> = Default::default();
    loop {
        while let Some(out) = server.poll_output() {
            match out {
                Output::Send(c, bytes) => {
                    if let Some(s) = streams.get_mut(&c) {
                        if let Err(e) = s.write_all(&bytes) {
                            eprintln!("tsunagi-impi-server: write to connection {c}: {e}");
                            let _ = s.shutdown(std::net::Shutdown::Both);
                        }
                    }
                }
                Output::Close(c) => {
                    if let Some(s) = streams.remove(&c) {
                        let _ = s.shutdown(std::net::Shutdown::Both);
                    }
                }
                Output::Note(n) => eprintln!("tsunagi-impi-server: {n}"),
                Output::Finished => {
                    eprintln!("tsunagi-impi-server: every client sent FINI; done");
                    return ExitCode::SUCCESS;
                }
                Output::Failed(msg) => {
                    eprintln!("tsunagi-impi-server: job failed: {msg}");
                    for s in streams.values() {
                        let _ = s.shutdown(std::net::Shutdown::Both);
                    }
                    return ExitCode::from(1);
                }
            }
        }
        let Ok(msg) = rx.recv() else {
            eprintln!("tsunagi-impi-server: listener failed");
            return ExitCode::from(1);
        };
        match msg {
            Msg::Accepted(c, s) => {
                streams.insert(c, s);
                server.connected(c);
            }
            Msg::Bytes(c, b) => server.received(c, &b),
            Msg::Closed(c) => {
                streams.remove(&c);
                server.closed(c);
            }
        }
    }
}

fn accept_loop(listener: TcpListener, tx: mpsc::Sender<Msg>) {
    let mut next: ConnId = 1;
    for s in listener.incoming() {
        let Ok(s) = s else { continue };
        let _ = s.set_nodelay(true);
        // A client that stops reading must not stall the server for ever.
        let _ = s.set_write_timeout(Some(Duration::from_secs(60)));
        let Ok(reader) = s.try_clone() else { continue };
        let id = next;
        next += 1;
        if tx.send(Msg::Accepted(id, s)).is_err() {
            return;
        }
        let tx = tx.clone();
        std::thread::spawn(move || read_loop(id, reader, tx));
    }
}

fn read_loop(id: ConnId, mut s: TcpStream, tx: mpsc::Sender<Msg>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match s.read(&mut buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Ok(0) | Err(_) => {
                let _ = tx.send(Msg::Closed(id));
                return;
            }
            Ok(n) => {
                if tx.send(Msg::Bytes(id, buf[..n].to_vec())).is_err() {
                    return;
                }
            }
        }
    }
}
