//! Measuring a link: a TCP echo server and a ping client that reports round trips, so that
//! users (and the tests) can check what a path through the emulator really costs.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// Echo every connection's bytes back (one thread per connection), forever.
pub fn echo(listener: TcpListener) {
    for conn in listener.incoming() {
        let Ok(mut s) = conn else { continue };
        std::thread::spawn(move || {
            let _ = s.set_nodelay(true);
            let mut buf = vec![0u8; 65536];
            loop {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        if s.write_all(&buf[..n]).is_err() {
                            return;
                        }
                    }
                }
            }
        });
    }
}

/// Round trips of `size`-byte messages to an echo server.
pub fn ping(to: SocketAddr, count: usize, size: usize) -> std::io::Result<Vec<Duration>> {
    let mut s = TcpStream::connect_timeout(&to, Duration::from_secs(10))?;
    s.set_nodelay(true)?;
    let msg = vec![0x5au8; size.max(1)];
    let mut back = vec![0u8; msg.len()];
    let mut rtts = Vec::with_capacity(count);
    for _ in 0..count {
        let t = Instant::now();
        s.write_all(&msg)?;
        s.read_exact(&mut back)?;
        rtts.push(t.elapsed());
        if back != msg {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "the echo differs from what was sent",
            ));
        }
    }
    Ok(rtts)
}

/// The median of a set of durations.
pub fn median(v: &[Duration]) -> Duration {
    let mut s = v.to_vec();
    s.sort();
    s[s.len() / 2]
}
