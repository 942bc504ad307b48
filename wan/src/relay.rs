//! The TCP relay driver: listen on an address, connect each accepted connection to a target,
//! and carry each direction through its own [`Pipe`] (two threads per direction: one reads
//! and offers, one writes what is due). The bandwidth limit is per connection direction.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::shaper::{LinkParams, Pipe, Refused};

/// Bytes a direction holds in flight at most (propagating or queued) before it stops
/// reading (a bound on memory; at 100 ms one way it still carries 300 MB/s).
const MAX_IN_FLIGHT: usize = 32 << 20;

/// One listening address and where its connections go.
#[derive(Clone, Debug)]
pub struct Mapping {
    pub listen: SocketAddr,
    pub target: SocketAddr,
}

impl Mapping {
    /// `LISTEN=TARGET`, e.g. `127.0.0.1:9000=10.0.0.2:22`.
    pub fn parse(s: &str) -> Result<Mapping, String> {
        let (l, t) = s
            .split_once('=')
            .ok_or_else(|| format!("{s:?}: expected LISTEN_ADDR:PORT=TARGET_ADDR:PORT"))?;
        let listen = l
            .trim()
            .parse()
            .map_err(|_| format!("{l:?}: not an address:port"))?;
        let target = t
            .trim()
            .parse()
            .map_err(|_| format!("{t:?}: not an address:port"))?;
        Ok(Mapping { listen, target })
    }
}

/// A relay with its listeners bound (so that callers know the ports before serving).
pub struct Relay {
    listeners: Vec<(TcpListener, SocketAddr)>,
    fwd: LinkParams,
    rev: LinkParams,
}

impl Relay {
    /// Bind every mapping's listening address. `fwd` shapes the direction from the
    /// connecting client to the target, `rev` the way back.
    pub fn bind(mappings: &[Mapping], fwd: LinkParams, rev: LinkParams) -> std::io::Result<Relay> {
        let mut listeners = Vec::new();
        for m in mappings {
            let l = TcpListener::bind(m.listen).map_err(|e| {
                std::io::Error::new(e.kind(), format!("listen on {}: {e}", m.listen))
            })?;
            listeners.push((l, m.target));
        }
        Ok(Relay {
            listeners,
            fwd,
            rev,
        })
    }

    /// The bound addresses, in mapping order.
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.listeners
            .iter()
            .map(|(l, _)| l.local_addr().expect("bound"))
            .collect()
    }

    /// Serve until the process ends (one accepting thread per mapping, four threads per
    /// connection).
    pub fn serve(self) {
        let epoch = Instant::now();
        let mut handles = Vec::new();
        for (i, (listener, target)) in self.listeners.into_iter().enumerate() {
            let (fwd, rev) = (self.fwd, self.rev);
            handles.push(std::thread::spawn(move || {
                let mut seed = i as u64 * 1_000_003 + 17;
                for conn in listener.incoming() {
                    let Ok(client) = conn else { continue };
                    seed += 2;
                    let s = seed;
                    std::thread::spawn(move || {
                        if let Err(e) = splice(client, target, fwd, rev, epoch, s) {
                            eprintln!("tsunagi-wan: connection to {target}: {e}");
                        }
                    });
                }
            }));
        }
        for h in handles {
            let _ = h.join();
        }
    }
}

fn splice(
    client: TcpStream,
    target: SocketAddr,
    fwd: LinkParams,
    rev: LinkParams,
    epoch: Instant,
    seed: u64,
) -> std::io::Result<()> {
    let server = TcpStream::connect(target)?;
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    let a = direction(client.try_clone()?, server.try_clone()?, fwd, epoch, seed);
    let b = direction(server, client, rev, epoch, seed + 1);
    for h in a.into_iter().chain(b) {
        let _ = h.join();
    }
    Ok(())
}

/// What travels through a relay pipe: bytes, or the end of the stream.
type Chunk = Option<Vec<u8>>;

struct Shared {
    pipe: Pipe<Chunk>,
    in_flight: usize,
    closed: bool,
}

/// Carry `from` → `to` through a pipe: a reader and a writer thread.
fn direction(
    mut from: TcpStream,
    mut to: TcpStream,
    params: LinkParams,
    epoch: Instant,
    seed: u64,
) -> Vec<std::thread::JoinHandle<()>> {
    let state = Arc::new((
        Mutex::new(Shared {
            pipe: Pipe::new(params, seed),
            in_flight: 0,
            closed: false,
        }),
        Condvar::new(),
    ));
    let chunk = params.chunk();
    let st = state.clone();
    let reader = std::thread::spawn(move || {
        let (lock, cv) = &*st;
        let mut buf = vec![0u8; chunk];
        loop {
            let n = match from.read(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => 0,
            };
            let mut item: Chunk = (n > 0).then(|| buf[..n].to_vec());
            let mut g = lock.lock().unwrap();
            loop {
                if g.closed {
                    return;
                }
                if g.in_flight > 0 && g.in_flight + n > MAX_IN_FLIGHT {
                    g = cv.wait(g).unwrap();
                    continue;
                }
                let now = epoch.elapsed();
                match g.pipe.offer(now, item, n) {
                    Ok(_) => break,
                    Err((back, Refused::Full { retry_at })) => {
                        item = back;
                        let wait = retry_at.saturating_sub(now).max(Duration::from_micros(50));
                        g = cv.wait_timeout(g, wait).unwrap().0;
                    }
                }
            }
            g.in_flight += n;
            cv.notify_all();
            drop(g);
            if n == 0 {
                return;
            }
        }
    });
    let writer = std::thread::spawn(move || {
        let (lock, cv) = &*state;
        let mut g = lock.lock().unwrap();
        loop {
            let now = epoch.elapsed();
            if let Some(item) = g.pipe.pop_due(now) {
                drop(g);
                let ok = match &item {
                    Some(bytes) => to.write_all(bytes).is_ok(),
                    None => {
                        let _ = to.shutdown(Shutdown::Write);
                        false
                    }
                };
                g = lock.lock().unwrap();
                if let Some(bytes) = &item {
                    g.in_flight -= bytes.len();
                }
                cv.notify_all();
                if !ok {
                    if item.is_some() {
                        // The receiver is gone: stop reading too.
                        g.closed = true;
                        let _ = to.shutdown(Shutdown::Both);
                    }
                    return;
                }
                continue;
            }
            g = match g.pipe.next_due() {
                Some(d) => cv.wait_timeout(g, d.saturating_sub(now)).unwrap().0,
                None => cv.wait(g).unwrap(),
            };
        }
    });
    vec![reader, writer]
}
