//! Ping-pong (8 bytes unless told) between two IMPI devices in one process over loopback TCP, driven by
//! one thread (the device path alone: no MPI core). For profiling the device's per-message
//! cost with deterministic counts (`valgrind --tool=callgrind`, `strace -c`, `perf stat`):
//! on loopback a written packet is in the peer's socket when `writev` returns, so every
//! poll below finds what it waits for.
//!
//!   cargo run --release -p tsunagi-impi --example impi-pingpong [ITERS [BYTES]]

use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Instant;

use tsunagi_impi::device::{HostConn, ImpiDevice};
use tsunagi_impi::{Link, LinkConfig, ProcId, ProcTable};
use tsunagi_p2p::device::{DataRep, Device, DeviceEvent, Envelope};

fn main() {
    let mut args = std::env::args().skip(1);
    let iters: usize = args.next().map_or(100_000, |a| a.parse().expect("ITERS"));
    let len: usize = args.next().map_or(8, |a| a.parse().expect("BYTES"));
    let table = Arc::new(
        ProcTable::new(vec![
            ProcId::ipv4(Ipv4Addr::LOCALHOST, 100),
            ProcId::ipv4(Ipv4Addr::LOCALHOST, 101),
        ])
        .expect("table"),
    );
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let a = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
    let (b, _) = l.accept().expect("accept");
    let cfg = LinkConfig::default();
    let mk = |me: u32, peer: u32, s: TcpStream| {
        let link = Link::new(cfg, table.clone(), &[me], &[peer]).expect("link");
        let conn = HostConn::new(peer, s, link).expect("conn");
        ImpiDevice::new(me, 2, vec![(conn, vec![peer])], 32767, DataRep::Native).expect("dev")
    };
    let mut devs = [mk(0, 1, a), mk(1, 0, b)];
    let mut token = 0u64;
    let t = Instant::now();
    for _ in 0..iters {
        for (from, to) in [(0usize, 1usize), (1, 0)] {
            token += 1;
            let env = Envelope {
                src: from as u32,
                dst: to as u32,
                tag: 1,
                context: 0,
                len: len as u64,
            };
            devs[from]
                .send(env, false, vec![7u8; len], token)
                .expect("send");
            // Until the receiver has the whole message and the sender's send completed;
            // a long message needs both polled (first packet, SYNCACK, then the rest).
            let (mut got, mut received, mut done) = (0usize, false, false);
            let mut arrival = None;
            while !(received && done) {
                devs[to]
                    .poll(&mut |e| match e {
                        DeviceEvent::Arrived {
                            id, data, complete, ..
                        } => {
                            got += data.len();
                            received |= complete;
                            arrival = Some(id);
                        }
                        DeviceEvent::Data { data, .. } => got += data.len(),
                        DeviceEvent::Received { .. } => received = true,
                        _ => {}
                    })
                    .expect("poll");
                if let Some(id) = arrival.take() {
                    devs[to].accept(id).expect("accept");
                }
                devs[from]
                    .poll(&mut |e| done |= matches!(e, DeviceEvent::SendComplete { .. }))
                    .expect("poll");
            }
            assert_eq!(got, len);
        }
    }
    let us = t.elapsed().as_secs_f64() * 1e6 / (2 * iters) as f64;
    println!("impi-pingpong {len} B: {us:.3} us per one-way (send, arrive, accept, complete)");
}
