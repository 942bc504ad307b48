//! Collective latency benchmark: `mpirun -n N coll_bench [max_bytes]`. Rank 0 prints one
//! line per point, `<collective> <bytes> <usec>` (mean time per call over many calls, after
//! warm-up), the same format as `npb-tests/bench/coll.c` (which tsunagi-bench runs on every MPI). Algorithms
//! can be forced with `TSUNAGI_COLL_<NAME>`. Lines starting with `#` describe the
//! all-to-all schedules of the job's node map (`TSUNAGI_NODE_MAP=2` with 8 ranks is the
//! issue's 4-node x 2 case): per phase, the distinct destination nodes of every node.

use tsunagi_collectives::{self as coll, Op, SendBuf};
use tsunagi_core::datatype::{Builtin, Datatype};
use tsunagi_core::{finalize, init, CommId, ThreadLevel};

fn main() {
    init(ThreadLevel::Single, &tsunagi_transports::REGISTRY).expect("init");
    let rt = tsunagi_core::rt("bench").expect("rt");
    let (me, n) = (rt.world_rank(), rt.world_size());
    let max: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1 << 20);
    let w = CommId::WORLD;
    let byte = Datatype::builtin(Builtin::Byte);
    let dbl = Datatype::builtin(Builtin::Double);
    let iters = |bytes: usize| (200_000_000 / (bytes + 20_000) / n.max(1)).clamp(5, 2000);
    let time = |name: &str, bytes: usize, f: &mut dyn FnMut()| {
        let it = iters(bytes);
        for _ in 0..it.min(20) {
            f();
        }
        coll::barrier(rt, w).unwrap();
        let t = rt.wtime();
        for _ in 0..it {
            f();
        }
        let us = (rt.wtime() - t) * 1e6 / it as f64;
        if me == 0 {
            println!("{name} {bytes} {us:.2}");
        }
    };
    // The all-to-all schedules seen from the nodes (for the closing note of the issue):
    // per phase, the number of distinct destination nodes of each node.
    if me == 0 {
        let nodes = rt.comm_nodes(w).unwrap();
        for (name, sched) in [
            ("two_level_ring", coll::two_level_ring_schedule(&nodes)),
            ("plain_ring", coll::plain_ring_schedule(&nodes)),
        ] {
            let per_phase: Vec<String> = sched
                .iter()
                .map(|ph| {
                    ph.iter()
                        .map(|d| d.len().to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .collect();
            println!(
                "# schedule {name} dest-nodes-per-node-per-phase {}",
                per_phase.join(" | ")
            );
        }
    }
    time("barrier", 0, &mut || coll::barrier(rt, w).unwrap());
    // Diagnostic: point-to-point round trip of 0 and 1 bytes between rank 0 and rank
    // BENCH_PEER (default 1).
    let peer: usize = std::env::var("BENCH_PEER")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    if n > peer && peer > 0 {
        for len in [0usize, 1] {
            let mut b = [0u8; 1];
            let bp = b.as_mut_ptr();
            time(
                if len == 0 { "pingpong0" } else { "pingpong1" },
                len,
                &mut || {
                    // SAFETY: `b` has room for the 0 or 1 byte moved.
                    unsafe {
                        let send = |d| {
                            rt.send(
                                "bench",
                                bp,
                                len as i64,
                                &byte,
                                d,
                                5,
                                w,
                                tsunagi_core::SendMode::Standard,
                            )
                            .unwrap()
                        };
                        if me == 0 {
                            send(1);
                            rt.recv("bench", bp, len as i64, &byte, 1, 5, w).unwrap();
                        } else if me == 1 {
                            rt.recv("bench", bp, len as i64, &byte, 0, 5, w).unwrap();
                            send(0);
                        }
                    }
                },
            );
        }
    }
    let mut sizes = vec![8usize];
    while *sizes.last().unwrap() < max {
        let s = sizes.last().unwrap() * 4;
        sizes.push(s.min(max));
    }
    for &s in &sizes {
        let mut buf = vec![1u8; s];
        // SAFETY (all calls below): buffers are sized for the call and live across it.
        time("bcast", s, &mut || unsafe {
            coll::bcast(rt, buf.as_mut_ptr(), s as i64, &byte, 0, w).unwrap()
        });
        let cnt = s / 8;
        let a = vec![1.0f64; cnt];
        let mut r = vec![0.0f64; cnt];
        // SAFETY: both buffers hold `cnt` doubles.
        time("allreduce", s, &mut || unsafe {
            coll::allreduce(
                rt,
                SendBuf::Ptr(a.as_ptr() as *const u8),
                r.as_mut_ptr() as *mut u8,
                cnt as i64,
                &dbl,
                &Op::Sum,
                w,
            )
            .unwrap()
        });
        let mut g = vec![0u8; s * n];
        // SAFETY: `g` has room for n blocks of `s` bytes.
        time("allgather", s, &mut || unsafe {
            coll::allgather(
                rt,
                SendBuf::Ptr(buf.as_ptr()),
                s as i64,
                &byte,
                g.as_mut_ptr(),
                s as i64,
                &byte,
                w,
            )
            .unwrap()
        });
        if s <= (1 << 20) {
            let sa = vec![2u8; s * n];
            let mut ra = vec![0u8; s * n];
            // SAFETY: both buffers hold n blocks of `s` bytes.
            time("alltoall", s, &mut || unsafe {
                coll::alltoall(
                    rt,
                    SendBuf::Ptr(sa.as_ptr()),
                    s as i64,
                    &byte,
                    ra.as_mut_ptr(),
                    s as i64,
                    &byte,
                    w,
                )
                .unwrap()
            });
        }
    }
    finalize().expect("finalize");
}
