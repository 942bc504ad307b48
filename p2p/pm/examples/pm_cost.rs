//! The per-message cost of PM's layers without the network: `n` small messages (64-byte
//! bodies) from one endpoint to another through memory, timed at two levels:
//!
//! * `link`: the reliability layer alone (push, encode with/without CRC, decode, in-order
//!   delivery, batched ACKs back);
//! * `pm`: the whole endpoint (send buffer, ring record, PUSH work request, link, ring
//!   poll, release);
//! * `rdma`: a rendezvous read of a 1 MiB send buffer registered in place, pulled into a
//!   registered receive buffer in 60 KiB pieces (PULL requests, replies, ACKs), as MB/s of
//!   the state machines alone (with CRC-32): the software NIC's ceiling.
//!
//! `cargo run --release -p tsunagi-pm --example pm_cost [n]`; prints ns per message.
//! `PM_COST_DATAGRAM=1472` cuts the replies into trains of pieces of that datagram size
//! (a 1500-byte MTU), handed over whole as a receiver with GRO reads them; `PM_COST_ONLY=
//! rdma` runs the read alone. Time is the thread's CPU time (robust to a loaded machine).

use std::time::Instant;

use tsunagi_pm::pm::{PmConfig, PmEndpoint};
use tsunagi_pm::reliable::{Link, LinkConfig};
use tsunagi_pm::wire;

fn link_cost(n: u64, checksum: bool) -> f64 {
    let cfg = LinkConfig {
        checksum,
        ..Default::default()
    };
    let mut a = Link::new(0, 1, 1, cfg);
    let mut b = Link::new(1, 0, 2, cfg);
    let mut buf = Vec::new();
    let frame = vec![7u8; 64];
    let t0 = Instant::now();
    let mut got = 0;
    while got < n {
        while a.queued() < 32 {
            a.push(frame.clone());
        }
        let now = Instant::now();
        while a.poll_transmit(now, &mut buf) {
            b.on_packet(now, &wire::decode(&buf).unwrap());
        }
        while b.pop_delivered().is_some() {
            got += 1;
        }
        while b.poll_transmit(now, &mut buf) {
            a.on_packet(now, &wire::decode(&buf).unwrap());
        }
    }
    t0.elapsed().as_nanos() as f64 / n as f64
}

fn pm_cost(n: u64) -> f64 {
    let cfg = PmConfig::default();
    let mut a = PmEndpoint::new(0, 2, 1, cfg);
    let mut b = PmEndpoint::new(1, 2, 2, cfg);
    a.add_peer(1, 2);
    b.add_peer(0, 1);
    let mut buf = Vec::new();
    let t0 = Instant::now();
    let mut got = 0;
    while got < n {
        while let Some(s) = a.get_send_buffer(1, 64).unwrap() {
            s.fill(3);
            a.send(1, 64).unwrap();
        }
        let now = Instant::now();
        while a.poll_transmit(now, &mut buf).is_some() {
            b.handle_datagram(now, &buf);
        }
        while b.receive().is_some() {
            b.release();
            got += 1;
        }
        while b.poll_transmit(now, &mut buf).is_some() {
            a.handle_datagram(now, &buf);
        }
    }
    t0.elapsed().as_nanos() as f64 / n as f64
}

fn thread_cpu() -> std::time::Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes one timespec into `ts`, which lives across the call.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn rdma_rate(rounds: u64) -> f64 {
    let mut cfg = PmConfig::default();
    if let Some(d) = std::env::var("PM_COST_DATAGRAM")
        .ok()
        .and_then(|d| d.parse().ok())
    {
        cfg.link.max_datagram = d;
    }
    let mut a = PmEndpoint::new(0, 2, 1, cfg);
    let mut b = PmEndpoint::new(1, 2, 2, cfg);
    a.add_peer(1, 2);
    b.add_peer(0, 1);
    let src = vec![5u8; 1 << 20];
    let mut dst = vec![0u8; 1 << 20];
    let mut buf = Vec::new();
    let piece = cfg.rdma_piece;
    let t0 = thread_cpu();
    for _ in 0..rounds {
        // SAFETY: both buffers outlive the endpoints' use of them (the grant is revoked by
        // the INVALIDATE below before the next round, and every PULL is done).
        let key = unsafe { a.expose(1, src.as_ptr(), src.len()) }.unwrap();
        let local = unsafe { b.register_local(dst.as_mut_ptr(), dst.len()) };
        let mut tags = Vec::new();
        let mut next = 0;
        while next < src.len() || !tags.is_empty() {
            while next < src.len() && tags.len() < 32 {
                let n = piece.min(src.len() - next);
                let t = b
                    .pull_into(0, key, next as u64, local, next as u64, n)
                    .unwrap();
                tags.push(t.expect("room"));
                next += n;
            }
            let now = Instant::now();
            while let Some(to) = b.poll_transmit(now, &mut buf) {
                assert_eq!(to, 0);
                a.handle_datagram(now, &buf);
            }
            while a.poll_transmit(now, &mut buf).is_some() {
                b.handle_datagram(now, &buf);
            }
            tags.retain(|&t| b.pull_status(t).is_none());
        }
        b.invalidate(0, key).unwrap();
    }
    assert!(dst.iter().all(|&x| x == 5));
    (rounds << 20) as f64 / (thread_cpu() - t0).as_secs_f64() / 1e6
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    if std::env::var("PM_COST_ONLY").is_ok_and(|o| o == "rdma") {
        println!(
            "rdma read 1 MiB:  {:.0} MB/s of CPU",
            rdma_rate((n / 2000).max(10))
        );
        return;
    }
    println!("link, CRC-32 on:  {:.0} ns/message", link_cost(n, true));
    println!("link, CRC-32 off: {:.0} ns/message", link_cost(n, false));
    println!("pm endpoint:      {:.0} ns/message", pm_cost(n));
    println!(
        "rdma read 1 MiB:  {:.0} MB/s",
        rdma_rate((n / 2000).max(10))
    );
}
