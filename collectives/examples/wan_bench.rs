//! Collective latency across a wide-area link (bench/wan.sh): `wan_bench [max_bytes]
//! [iters] [reps]`. Rank 0 prints `<collective> <bytes> <usec>` per point.
//!
//! Each point is the mean time of `iters` back-to-back calls at rank 0 (after a warm-up
//! call and a barrier), the fastest of `reps` (1) such runs. Barrier, allreduce, allgather and alltoall cannot overlap from call
//! to call (every result needs every rank's input). A bcast from one root could (the root
//! returns long before the data arrives), so the root moves from call to call across the
//! sites (the lowest rank of the next site, then of the one after, ...): a root cannot
//! start its bcast before the previous one reached it, which chains the calls.
//! `bcast_last` does the same with each site's highest rank as the root: a site-unaware
//! binomial tree rooted there crosses the wide-area link twice on the way to some ranks
//! (from the lowest ranks it crosses once, as the latency-aware algorithm does).

use tsunagi_collectives::{self as coll, Op, SendBuf};
use tsunagi_core::datatype::{Builtin, Datatype};
use tsunagi_core::{finalize, init, CommId, ThreadLevel};

fn main() {
    init(ThreadLevel::Single, &tsunagi_transports::REGISTRY).expect("init");
    let rt = tsunagi_core::rt("wan_bench").expect("rt");
    let (me, n) = (rt.world_rank(), rt.world_size());
    let mut args = std::env::args().skip(1);
    let max: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(1 << 20);
    let iters: usize = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10)
        .max(1);
    let w = CommId::WORLD;
    let byte = Datatype::builtin(Builtin::Byte);
    let dbl = Datatype::builtin(Builtin::Double);
    let reps: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(1).max(1);
    // The fastest of `reps` runs of `iters` calls: on a shared, loaded machine the
    // scheduler adds delays of whole time slices to some runs; the fastest run is the one
    // closest to what the algorithm and the link cost. Every rank has the same arguments,
    // so every rank makes the same calls.
    let sample = |f: &mut dyn FnMut(usize)| -> f64 {
        f(0);
        let mut best = f64::MAX;
        for r in 0..reps {
            coll::barrier(rt, w).unwrap();
            let t = rt.wtime();
            for k in 0..iters {
                f(r * iters + k + 1);
            }
            best = best.min((rt.wtime() - t) * 1e6 / iters as f64);
        }
        best
    };
    // The lowest rank of each site, in site order (every rank when there is one site).
    let sites = rt.site_map();
    let mut roots: Vec<usize> = Vec::new();
    for r in 0..n {
        if r == 0 || sites[r] != sites[r - 1] {
            roots.push(r);
        }
    }
    // The highest rank of each site, in site order.
    let mut last_roots: Vec<usize> = (0..n)
        .filter(|&r| r + 1 == n || sites[r] != sites[r + 1])
        .collect();
    if roots.len() == 1 {
        roots = (0..n).collect();
        last_roots = roots.clone();
    }
    let bar = sample(&mut |_| coll::barrier(rt, w).unwrap());
    if me == 0 {
        println!("barrier 0 {bar:.0}");
    }
    let report = |name: &str, bytes: usize, t: f64| {
        if me == 0 {
            println!("{name} {bytes} {t:.0}");
        }
    };
    let mut sizes = Vec::new();
    let mut s = 8usize;
    while s < max {
        sizes.push(s);
        s *= 8;
    }
    sizes.push(max);
    // WAN_BENCH_SIZES=8,4096,... replaces the sizes; WAN_BENCH_ONLY=bcast,allreduce,...
    // runs only those collectives (barrier always runs first).
    if let Ok(v) = std::env::var("WAN_BENCH_SIZES") {
        sizes = v.split(',').filter_map(|x| x.trim().parse().ok()).collect();
    }
    let only = std::env::var("WAN_BENCH_ONLY").ok();
    let on = |name: &str| {
        only.as_deref()
            .is_none_or(|o| o.split(',').any(|x| x == name))
    };
    for s in sizes {
        let mut buf = vec![1u8; s];
        // SAFETY (all calls below): buffers are sized for the call and live across it.
        if on("bcast") {
            let t = sample(&mut |k| unsafe {
                let root = roots[k % roots.len()] as i32;
                coll::bcast(rt, buf.as_mut_ptr(), s as i64, &byte, root, w).unwrap()
            });
            report("bcast", s, t);
        }
        if on("bcast_last") {
            let t = sample(&mut |k| unsafe {
                let root = last_roots[k % last_roots.len()] as i32;
                coll::bcast(rt, buf.as_mut_ptr(), s as i64, &byte, root, w).unwrap()
            });
            report("bcast_last", s, t);
        }
        let cnt = (s / 8).max(1);
        let a = vec![1.0f64; cnt];
        let mut r = vec![0.0f64; cnt];
        if on("allreduce") {
            let t = sample(&mut |_| unsafe {
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
            report("allreduce", cnt * 8, t);
        }
        let mut g = vec![0u8; s * n];
        if on("allgather") {
            let t = sample(&mut |_| unsafe {
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
            report("allgather", s, t);
        }
        let sa = vec![2u8; s * n];
        let mut ra = vec![0u8; s * n];
        if on("alltoall") {
            let t = sample(&mut |_| unsafe {
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
            report("alltoall", s, t);
        }
    }
    finalize().expect("finalize");
}
