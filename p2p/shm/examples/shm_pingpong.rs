//! Latency and bandwidth of the shared-memory transport between two processes.
//!
//! `cargo run --release --example shm_pingpong [-- --pin] [--iters N]`
//!
//! Rank 0 (this process) creates the segment and re-executes itself as rank 1. Reports the
//! half round-trip time for small messages (busy polling on both sides), and 1 MiB
//! ping-pong bandwidth both single-copy (CMA `read_remote` on a rendezvous announcement)
//! and streamed through the ring in `max_payload()` chunks (the fallback without CMA).

use std::process::Command;
use std::time::Instant;

use tsunagi_p2p::{Header, Rank, Transport};
use tsunagi_shm::{ShmConfig, ShmTransport};

const CHILD: &str = "SHM_PINGPONG_CHILD";

fn pin(cpu: usize) {
    // SAFETY: cpu_set_t is plain data; sched_setaffinity reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            eprintln!("sched_setaffinity({cpu}) failed; running unpinned");
        }
    }
}

/// Busy-poll until one message arrives; returns its header.
#[inline]
fn recv(t: &mut ShmTransport) -> Header {
    let mut got = None;
    loop {
        t.poll(&mut |_, h: &Header, _| got = Some(*h)).unwrap();
        if let Some(h) = got {
            return h;
        }
    }
}

#[inline]
fn send(t: &mut ShmTransport, peer: Rank, h: &Header, p: &[u8]) {
    while !t.try_send(peer, h, p).unwrap() {
        std::hint::spin_loop();
    }
}

const KIND_PING: u8 = 1;
const KIND_RTS: u8 = 2;
const KIND_FIN: u8 = 3;
const KIND_DATA: u8 = 4;
const KIND_STOP: u8 = 5;

/// Run `n` iterations as 10 timed batches (`f(k)` runs k iterations); returns the best
/// and the median seconds per iteration. The best batch filters out scheduler noise from
/// other processes on a shared machine; the median shows how typical it is.
fn batches(n: usize, mut f: impl FnMut(usize)) -> (f64, f64) {
    let k = (n / 10).max(1);
    let mut per: Vec<f64> = (0..10)
        .map(|_| {
            let s = Instant::now();
            f(k);
            s.elapsed().as_secs_f64() / k as f64
        })
        .collect();
    per.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (per[0], per[5])
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let pinned = args.iter().any(|a| a == "--pin");
    let iters: usize = args
        .iter()
        .position(|a| a == "--iters")
        .and_then(|i| args.get(i + 1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(200_000);
    let cfg = ShmConfig::from_env();
    let world: [Rank; 2] = [0, 1];

    if let Ok(name) = std::env::var(CHILD) {
        if pinned {
            pin(1);
        }
        let mut t = ShmTransport::attach(&name, &world, 1, &cfg).expect("attach");
        let mut buf = vec![0u8; 1 << 20];
        let mut off = 0usize;
        loop {
            let mut reply: Option<(Header, usize)> = None;
            let mut stop = false;
            t.poll(&mut |_, h: &Header, p: &[u8]| match h.kind {
                KIND_PING => reply = Some((*h, p.len())),
                KIND_RTS => reply = Some((*h, 0)),
                KIND_DATA => {
                    // Copy out as the request layer would into the user's buffer.
                    buf[off..off + p.len()].copy_from_slice(p);
                    off += p.len();
                    if off == h.len as usize {
                        off = 0;
                        reply = Some((
                            Header {
                                kind: KIND_FIN,
                                ..*h
                            },
                            0,
                        ));
                    }
                }
                KIND_STOP => stop = true,
                _ => unreachable!(),
            })
            .unwrap();
            if stop {
                return;
            }
            if let Some((h, len)) = reply {
                match h.kind {
                    KIND_PING => send(&mut t, 0, &h, &buf[..len]),
                    KIND_RTS => {
                        t.read_remote(0, h.cookie, &mut buf[..h.len as usize])
                            .expect("read_remote");
                        send(
                            &mut t,
                            0,
                            &Header {
                                kind: KIND_FIN,
                                ..h
                            },
                            &[],
                        );
                    }
                    _ => send(&mut t, 0, &h, &[]),
                }
            }
        }
    }

    if pinned {
        pin(0);
    }
    let name = format!("tsunagi-pingpong-{}", std::process::id());
    let mut t = ShmTransport::create(&name, &world, 0, &cfg).expect("create");
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(&args[1..]).env(CHILD, &name);
    // SAFETY: the closure runs in the forked child before exec and only calls prctl,
    // which is async-signal-safe; it allocates nothing.
    unsafe {
        use std::os::unix::process::CommandExt;
        // Rank 1 busy-polls: it must not outlive rank 0 (say, killed by a closed pipe).
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("spawn rank 1");
    while !t.all_attached() {
        std::thread::yield_now();
    }
    t.unlink().unwrap();
    println!(
        "tsunagi-shm pingpong ({}; eager {} B, cell {} B x {} cells)",
        if pinned {
            "pinned to cpus 0,1"
        } else {
            "unpinned"
        },
        t.eager_limit(),
        t.geometry().0,
        t.geometry().1
    );

    let payload = vec![7u8; 1 << 20];
    for size in [0usize, 8, 64, 256, 1024, 4096, 16384] {
        let size = size.min(t.max_payload());
        let n = if size <= 1024 { iters } else { iters / 10 };
        let h = Header {
            kind: KIND_PING,
            len: size as u64,
            ..Header::default()
        };
        for _ in 0..n / 10 {
            send(&mut t, 1, &h, &payload[..size]);
            recv(&mut t);
        }
        let (best, median) = batches(n, |k| {
            for _ in 0..k {
                send(&mut t, 1, &h, &payload[..size]);
                recv(&mut t);
            }
        });
        println!(
            "latency {size:>6} B: {:8.1} ns half round trip (median batch {:.1} ns)",
            best * 1e9 / 2.0,
            median * 1e9 / 2.0
        );
    }

    let mb = 1usize << 20;
    let n = 2000;
    if t.single_copy(1) {
        let h = Header {
            kind: KIND_RTS,
            len: mb as u64,
            cookie: payload.as_ptr() as u64,
            ..Header::default()
        };
        for _ in 0..n / 10 {
            send(&mut t, 1, &h, &[]);
            recv(&mut t);
        }
        let (best, median) = batches(n, |k| {
            for _ in 0..k {
                send(&mut t, 1, &h, &[]);
                recv(&mut t);
            }
        });
        println!(
            "bandwidth 1 MiB single copy (CMA): {:7.2} GB/s (median batch {:.2} GB/s)",
            mb as f64 / best / 1e9,
            mb as f64 / median / 1e9
        );
    } else {
        println!("bandwidth 1 MiB single copy (CMA): unavailable");
    }
    let chunk = t.max_payload();
    let stream_one = |t: &mut ShmTransport| {
        for c in payload.chunks(chunk) {
            let h = Header {
                kind: KIND_DATA,
                len: mb as u64,
                ..Header::default()
            };
            send(t, 1, &h, c);
        }
        recv(t);
    };
    for _ in 0..n / 10 {
        stream_one(&mut t);
    }
    let (best, median) = batches(n, |k| {
        for _ in 0..k {
            stream_one(&mut t);
        }
    });
    println!(
        "bandwidth 1 MiB streamed through ring ({chunk} B chunks): {:7.2} GB/s (median batch {:.2} GB/s)",
        mb as f64 / best / 1e9,
        mb as f64 / median / 1e9
    );
    send(
        &mut t,
        1,
        &Header {
            kind: KIND_STOP,
            ..Header::default()
        },
        &[],
    );
    child.wait().unwrap();
}
