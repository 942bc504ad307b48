//! CPU cost of PM's large transfers over real UDP sockets, robust to a loaded machine:
//! two PM transports in one process, one thread each, over `127.0.0.1` (or the address in
//! `TSUNAGI_PM_IF`). Rank 1 exposes a buffer of `size` bytes `n` times; rank 0 reads each
//! by RDMA (PULLs into its receive buffer) and answers with a small message. Prints the
//! wall time and each thread's **CPU time per MiB** (`CLOCK_THREAD_CPUTIME_ID`), which is
//! what the machine's load does not change much, plus the link counters.
//!
//! With `PM_COST_EAGER=1` rank 1 instead streams `n` eager messages of `size` bytes (at
//! most the eager limit) through PM's rings, in windows of 64 answered by one small
//! message (as `tsunagi-pingpong`'s bandwidth test does).
//!
//! `cargo run --release -p tsunagi-pm --example pm_udp_cost [n [size]]`; the transport's
//! environment knobs apply (`TSUNAGI_PM_CHECKSUM=0`, `TSUNAGI_PM_RDMA_PIECE`, ...).
//!
//! Across two network namespaces (a veth pair or bridge between them, as `bench/pm.sh`
//! makes): run it under `ip netns exec A` with `TSUNAGI_PM_IF=<A's address>`, and set
//! `PM_COST_NETNS_B=/run/netns/B` and `PM_COST_IF_B=<B's address>`: rank 1's sockets are
//! then made inside B (the thread enters B with `setns` before binding).

use std::time::{Duration, Instant};

use tsunagi_p2p::{Header, Rank, Transport};
use tsunagi_pm::transport::{PmTransport, PmTransportConfig};

fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes one timespec into `ts`, which lives across the call.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn send(
    t: &mut PmTransport,
    peer: Rank,
    h: Header,
    payload: &[u8],
    seen: &mut Vec<(Header, Vec<u8>)>,
) {
    while !t.try_send(peer, &h, payload).unwrap() {
        t.poll(&mut |_, h: &Header, p: &[u8]| seen.push((*h, p.to_vec())))
            .unwrap();
    }
}

fn wait_for(t: &mut PmTransport, seen: &mut Vec<(Header, Vec<u8>)>) -> (Header, Vec<u8>) {
    let start = Instant::now();
    loop {
        if !seen.is_empty() {
            return seen.remove(0);
        }
        t.poll(&mut |_, h: &Header, p: &[u8]| seen.push((*h, p.to_vec())))
            .unwrap();
        if seen.is_empty() {
            let es = t.event_source();
            let until = t
                .next_deadline()
                .map(|d| d.saturating_duration_since(Instant::now()));
            es.sleep(
                0,
                until
                    .unwrap_or(Duration::from_millis(10))
                    .min(Duration::from_millis(10)),
            );
        }
        assert!(start.elapsed() < Duration::from_secs(60), "stuck");
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(200);
    let size: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1 << 20);
    let mut cfg = PmTransportConfig::from_env(|k| std::env::var(k).ok()).unwrap();
    if cfg.interface.is_none() {
        cfg.interface = Some("127.0.0.1".into());
    }
    let mut a = PmTransport::bind(0, 2, &cfg).unwrap();
    let mut b = match std::env::var("PM_COST_NETNS_B") {
        Err(_) => PmTransport::bind(1, 2, &cfg).unwrap(),
        Ok(ns) => {
            let mut cfg = cfg.clone();
            cfg.interface = std::env::var("PM_COST_IF_B").ok();
            std::thread::spawn(move || {
                use std::os::fd::AsRawFd;
                let f = std::fs::File::open(&ns).expect("PM_COST_NETNS_B");
                // SAFETY: enters the namespace of a descriptor we hold open, for this
                // thread only; the sockets made next stay in it.
                let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
                assert_eq!(rc, 0, "setns {ns}");
                PmTransport::bind(1, 2, &cfg).unwrap()
            })
            .join()
            .unwrap()
        }
    };
    let ca = tsunagi_pm::parse_card(&a.card()).unwrap();
    let cb = tsunagi_pm::parse_card(&b.card()).unwrap();
    let one = tsunagi_pm::lids::LidWiring::single(2);
    a.set_peers(&[(1, cb)], &one).unwrap();
    b.set_peers(&[(0, ca)], &one).unwrap();

    let eager = std::env::var("PM_COST_EAGER").is_ok_and(|v| v == "1");
    const EAGER_WINDOW: usize = 64;
    let server = std::thread::spawn(move || {
        let src: Vec<u8> = (0..size).map(|i| i as u8).collect();
        let mut seen = Vec::new();
        let c0 = thread_cpu();
        for i in 0..n {
            if eager {
                let h = Header {
                    kind: 3,
                    src: 1,
                    len: size as u64,
                    cookie: i as u64,
                    ..Default::default()
                };
                send(&mut b, 0, h, &src, &mut seen);
                if (i + 1) % EAGER_WINDOW == 0 || i + 1 == n {
                    let (h, _) = wait_for(&mut b, &mut seen);
                    assert_eq!((h.kind, h.cookie), (2, i as u64));
                }
                continue;
            }
            // SAFETY: `src` outlives the read: we wait for the reader's answer.
            let token = unsafe { b.expose(0, src.as_ptr(), src.len()) }.unwrap();
            let h = Header {
                kind: 1,
                src: 1,
                len: size as u64,
                cookie: i as u64,
                ..Default::default()
            };
            send(&mut b, 0, h, &token.to_ne_bytes(), &mut seen);
            let (h, _) = wait_for(&mut b, &mut seen);
            assert_eq!((h.kind, h.cookie), (2, i as u64));
        }
        let cpu = thread_cpu() - c0;
        let stats = b.endpoint().link_stats();
        let drops = b.fault_drops();
        drop(b);
        (cpu, stats, drops)
    });

    let mut dst = vec![0u8; size];
    let mut seen = Vec::new();
    let t0 = Instant::now();
    let c0 = thread_cpu();
    for i in 0..n {
        let (h, p) = wait_for(&mut a, &mut seen);
        if eager {
            assert_eq!((h.kind, h.cookie, p.len()), (3, i as u64, size));
            assert_eq!(p[size - 1], (size - 1) as u8);
            if (i + 1) % EAGER_WINDOW == 0 || i + 1 == n {
                let ack = Header {
                    kind: 2,
                    src: 0,
                    cookie: i as u64,
                    ..Default::default()
                };
                send(&mut a, 1, ack, &[], &mut seen);
            }
            continue;
        }
        assert_eq!((h.kind, h.cookie), (1, i as u64));
        let token = u64::from_ne_bytes(p[..8].try_into().unwrap());
        a.read_remote(1, token, &mut dst).unwrap();
        assert_eq!(dst[size - 1], (size - 1) as u8);
        let fin = Header {
            kind: 2,
            src: 0,
            cookie: i as u64,
            ..Default::default()
        };
        send(&mut a, 1, fin, &[], &mut seen);
    }
    let wall = t0.elapsed();
    let cpu = thread_cpu() - c0;
    let stats = a.endpoint().link_stats();
    let (scpu, sstats, sdrops) = server.join().unwrap();
    let mib = (n * size) as f64 / (1 << 20) as f64;
    println!(
        "{n} x {size} B{}: {:.1} MB/s wall; CPU per MiB: reader {:.0} us, server {:.0} us \
         (sum {:.0} us: {:.0} MB/s of CPU); load {}",
        if eager { " eager" } else { "" },
        (n * size) as f64 / wall.as_secs_f64() / 1e6,
        cpu.as_secs_f64() * 1e6 / mib,
        scpu.as_secs_f64() * 1e6 / mib,
        (cpu + scpu).as_secs_f64() * 1e6 / mib,
        (n * size) as f64 / (cpu + scpu).as_secs_f64() / 1e6,
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split(' ')
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!(
        "max datagram {} B, segmentation offload {}",
        a.max_datagram(),
        a.segmentation_offload()
    );
    println!("reader link {stats:?}\nserver link {sstats:?}");
    println!(
        "datagrams dropped by TSUNAGI_PM_DROP: reader {}, server {sdrops}",
        a.fault_drops()
    );
    drop(a);
}
