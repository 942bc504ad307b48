//! The relay's event loop (mio, i.e. epoll): a thin driver around [`StartupSession`] and
//! [`Pump`].
//!
//! - The start-up port: each connection is a client's way to the IMPI server; the relay
//!   connects to the server and carries both directions through a [`StartupSession`], which
//!   rewrites the client's host endpoints and asks for one public listener per host.
//! - A host listener (on the public address, one per relayed host, alive while its client's
//!   start-up connection is, i.e. until FINI): each connection is a host of another site
//!   reaching this host; the relay connects to the host's private endpoint and carries the
//!   bytes both ways unchanged (one TCP connection per host pair, as IMPI has).

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr};
use std::time::Duration;

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};

use crate::pump::Pump;
use crate::rewrite::{Expose, StartupSession};

/// What the relay serves.
#[derive(Clone, Debug)]
pub struct Config {
    /// Where clients reach the relay instead of the IMPI server.
    pub listen: SocketAddr,
    /// The IMPI server.
    pub server: SocketAddr,
    /// The address every site can reach the relay at: relayed hosts appear there.
    pub public: Ipv4Addr,
    /// Say what is relayed on stderr.
    pub verbose: bool,
}

const STARTUP: Token = Token(0);
/// Tokens from here on are host listeners; below it, connection sides.
const HOST_BASE: usize = 1 << 30;

struct Conn {
    /// The side that connected to the relay.
    a: TcpStream,
    /// The side the relay connected to (the server or a private host).
    b: TcpStream,
    /// Whether `b`'s connect has completed.
    b_ready: bool,
    ab: Pump,
    ba: Pump,
    session: Option<StartupSession>,
    /// Host listeners made for this start-up session.
    hosts: Vec<usize>,
}

struct HostListener {
    listener: TcpListener,
    target: Option<SocketAddr>,
}

/// The relay with its start-up port bound.
pub struct Relay {
    cfg: Config,
    poll: Poll,
    startup: TcpListener,
    conns: Vec<Option<Conn>>,
    hosts: Vec<Option<HostListener>>,
}

impl Relay {
    pub fn bind(cfg: Config) -> std::io::Result<Relay> {
        let poll = Poll::new()?;
        let mut startup = TcpListener::bind(cfg.listen)?;
        poll.registry()
            .register(&mut startup, STARTUP, Interest::READABLE)?;
        Ok(Relay {
            cfg,
            poll,
            startup,
            conns: Vec::new(),
            hosts: Vec::new(),
        })
    }

    /// The bound start-up address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.startup.local_addr()
    }

    /// Serve until the process ends.
    pub fn serve(mut self) -> std::io::Result<()> {
        let mut events = Events::with_capacity(256);
        loop {
            match self.poll.poll(&mut events, Some(Duration::from_secs(1))) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            for ev in events.iter() {
                let t = ev.token().0;
                if ev.token() == STARTUP {
                    self.accept_startup();
                } else if t >= HOST_BASE {
                    self.accept_host(t - HOST_BASE);
                } else {
                    let i = (t - 1) / 2;
                    if t % 2 == 0 && ev.is_writable() {
                        // The `b` side: its connect completed (or failed).
                        if let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) {
                            if !c.b_ready {
                                match c.b.take_error() {
                                    Ok(None) if c.b.peer_addr().is_ok() => c.b_ready = true,
                                    Ok(None) => {}
                                    Ok(Some(e)) | Err(e) => {
                                        self.log(format_args!("connect failed: {e}"));
                                        self.close(i);
                                        continue;
                                    }
                                }
                            }
                        }
                    }
                    self.service(i);
                }
            }
        }
    }

    fn log(&self, msg: std::fmt::Arguments) {
        if self.cfg.verbose {
            eprintln!("tsunagi-impi-relay: {msg}");
        }
    }

    fn add_conn(&mut self, mut a: TcpStream, target: SocketAddr, session: Option<StartupSession>) {
        let mut b = match TcpStream::connect(target) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("tsunagi-impi-relay: connect to {target}: {e}");
                return;
            }
        };
        let _ = a.set_nodelay(true);
        let _ = b.set_nodelay(true);
        let i = match self.conns.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.conns.push(None);
                self.conns.len() - 1
            }
        };
        let both = Interest::READABLE | Interest::WRITABLE;
        let r = self.poll.registry();
        if r.register(&mut a, Token(1 + 2 * i), both).is_err()
            || r.register(&mut b, Token(2 + 2 * i), both).is_err()
        {
            return;
        }
        self.conns[i] = Some(Conn {
            a,
            b,
            b_ready: false,
            ab: Pump::new(),
            ba: Pump::new(),
            session,
            hosts: Vec::new(),
        });
    }

    fn accept_startup(&mut self) {
        loop {
            match self.startup.accept() {
                Ok((s, from)) => {
                    self.log(format_args!("client start-up from {from}"));
                    let server = self.cfg.server;
                    let session = StartupSession::new(self.cfg.public);
                    self.add_conn(s, server, Some(session));
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    eprintln!("tsunagi-impi-relay: accept: {e}");
                    return;
                }
            }
        }
    }

    fn accept_host(&mut self, h: usize) {
        loop {
            let Some(hl) = self.hosts.get_mut(h).and_then(Option::as_mut) else {
                return;
            };
            let target = hl.target;
            match hl.listener.accept() {
                Ok((s, from)) => match target {
                    Some(t) => {
                        self.log(format_args!("host pair {from} -> {t}"));
                        self.add_conn(s, t, None);
                    }
                    None => drop(s), // not exposed yet: nobody was told this port
                },
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    eprintln!("tsunagi-impi-relay: accept: {e}");
                    return;
                }
            }
        }
    }

    /// A public listener for a relayed host: its port.
    fn listen_for_host(&mut self, owner: &mut Conn) -> Result<u16, String> {
        let addr = SocketAddr::new(IpAddr::V4(self.cfg.public), 0);
        let mut listener = TcpListener::bind(addr).map_err(|e| format!("listen on {addr}: {e}"))?;
        let port = listener.local_addr().map_err(|e| e.to_string())?.port();
        let h = match self.hosts.iter().position(Option::is_none) {
            Some(h) => h,
            None => {
                self.hosts.push(None);
                self.hosts.len() - 1
            }
        };
        self.poll
            .registry()
            .register(&mut listener, Token(HOST_BASE + h), Interest::READABLE)
            .map_err(|e| e.to_string())?;
        self.hosts[h] = Some(HostListener {
            listener,
            target: None,
        });
        owner.hosts.push(h);
        Ok(port)
    }

    fn expose(&mut self, owner: &Conn, e: Expose) {
        for &h in &owner.hosts {
            if let Some(hl) = self.hosts[h].as_mut() {
                if hl.listener.local_addr().map(|a| a.port()).ok() == Some(e.public_port) {
                    hl.target = Some(e.private);
                    self.log(format_args!(
                        "client {} host {} at {} is {}:{}",
                        e.client, e.host, e.private, self.cfg.public, e.public_port
                    ));
                }
            }
        }
    }

    /// Move bytes both ways until neither side can make progress; close when done.
    fn service(&mut self, i: usize) {
        let Some(mut c) = self.conns.get_mut(i).and_then(Option::take) else {
            return;
        };
        let alive = self.pump(&mut c);
        if alive && !(c.ab.finished() && c.ba.finished()) {
            self.conns[i] = Some(c);
        } else {
            self.conns[i] = Some(c);
            self.close(i);
        }
    }

    /// Returns false on an error (the connection must close).
    fn pump(&mut self, c: &mut Conn) -> bool {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let mut progress = false;
            // a -> b
            while !c.ab.ended() && c.ab.room() > 0 {
                let want = c.ab.room().min(buf.len());
                match c.a.read(&mut buf[..want]) {
                    Ok(0) => c.ab.end(),
                    Ok(n) => {
                        progress = true;
                        let data = &buf[..n];
                        if let Some(mut s) = c.session.take() {
                            let mut exposes = Vec::new();
                            let r = {
                                let mut listen = |_: u32, _: usize| self.listen_for_host(c);
                                s.client_bytes(data, &mut listen)
                            };
                            match r {
                                Ok((out, e)) => {
                                    c.ab.push(&out);
                                    exposes.extend(e);
                                }
                                Err(e) => {
                                    eprintln!("tsunagi-impi-relay: start-up: {e}");
                                    return false;
                                }
                            }
                            c.session = Some(s);
                            for e in exposes {
                                self.expose(c, e);
                            }
                        } else {
                            c.ab.push(data);
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => return false,
                }
            }
            // b -> a (only once connected)
            while c.b_ready && !c.ba.ended() && c.ba.room() > 0 {
                let want = c.ba.room().min(buf.len());
                match c.b.read(&mut buf[..want]) {
                    Ok(0) => c.ba.end(),
                    Ok(n) => {
                        progress = true;
                        let data = &buf[..n];
                        match c.session.as_mut() {
                            Some(s) => match s.server_bytes(data) {
                                Ok(out) => c.ba.push(&out),
                                Err(e) => {
                                    eprintln!("tsunagi-impi-relay: start-up: {e}");
                                    return false;
                                }
                            },
                            None => c.ba.push(data),
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => return false,
                }
            }
            if c.b_ready {
                match write_out(&mut c.b, &mut c.ab) {
                    Ok(p) => progress |= p,
                    Err(_) => return false,
                }
            }
            match write_out(&mut c.a, &mut c.ba) {
                Ok(p) => progress |= p,
                Err(_) => return false,
            }
            if !progress {
                return true;
            }
        }
    }

    fn close(&mut self, i: usize) {
        if let Some(mut c) = self.conns[i].take() {
            let _ = self.poll.registry().deregister(&mut c.a);
            let _ = self.poll.registry().deregister(&mut c.b);
            for h in c.hosts {
                if let Some(mut hl) = self.hosts[h].take() {
                    let _ = self.poll.registry().deregister(&mut hl.listener);
                }
            }
            if c.session.is_some() {
                self.log(format_args!("client start-up connection closed"));
            }
        }
    }
}

/// Write what `p` holds to `to`; pass the end on once all went. Whether anything moved.
fn write_out(to: &mut TcpStream, p: &mut Pump) -> std::io::Result<bool> {
    let mut moved = false;
    while !p.pending().is_empty() {
        match to.write(p.pending()) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => {
                p.consumed(n);
                moved = true;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    if p.take_shutdown() {
        let _ = to.shutdown(Shutdown::Write);
        moved = true;
    }
    Ok(moved)
}
