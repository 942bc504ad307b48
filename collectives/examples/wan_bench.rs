//! Collective latency across a wide-area link (bench/wan.sh): `wan_bench [max_bytes]
//! [iters]`. Rank 0 prints `<collective> <bytes> <usec>` per point.
//!
//! Back-to-back calls overlap over a long link (a bcast root returns long before the data
//! arrives), so each sample is one call followed by a barrier, timed at rank 0, minus the
//! median barrier alone: the median of `op + barrier` minus the median of `barrier` (both
//! with the algorithms of the run). Barrier itself is reported as its median.

use tsunagi_collectives::{self as coll, Op, SendBuf};
use tsunagi_core::datatype::{Builtin, Datatype};
use tsunagi_core::{finalize, init, CommId, ThreadLevel};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

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
    let sample = |f: &mut dyn FnMut(), with_barrier: bool| -> f64 {
        let mut v = Vec::with_capacity(iters);
        f();
        coll::barrier(rt, w).unwrap();
        for _ in 0..iters {
            let t = rt.wtime();
            f();
            if with_barrier {
                coll::barrier(rt, w).unwrap();
            }
            v.push((rt.wtime() - t) * 1e6);
        }
        coll::barrier(rt, w).unwrap();
        median(v)
    };
    let bar = sample(&mut || coll::barrier(rt, w).unwrap(), false);
    if me == 0 {
        println!("barrier 0 {bar:.0}");
    }
    let report = |name: &str, bytes: usize, t: f64| {
        if me == 0 {
            println!("{name} {bytes} {:.0}", (t - bar).max(0.0));
        }
    };
    let mut s = 8usize;
    while s <= max {
        let mut buf = vec![1u8; s];
        // SAFETY (all calls below): buffers are sized for the call and live across it.
        let t = sample(
            &mut || unsafe { coll::bcast(rt, buf.as_mut_ptr(), s as i64, &byte, 0, w).unwrap() },
            true,
        );
        report("bcast", s, t);
        let cnt = (s / 8).max(1);
        let a = vec![1.0f64; cnt];
        let mut r = vec![0.0f64; cnt];
        let t = sample(
            &mut || unsafe {
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
            },
            true,
        );
        report("allreduce", cnt * 8, t);
        let mut g = vec![0u8; s * n];
        let t = sample(
            &mut || unsafe {
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
            },
            true,
        );
        report("allgather", s, t);
        let sa = vec![2u8; s * n];
        let mut ra = vec![0u8; s * n];
        let t = sample(
            &mut || unsafe {
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
            },
            true,
        );
        report("alltoall", s, t);
        s *= 8;
    }
    finalize().expect("finalize");
}
