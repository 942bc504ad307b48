//! Collective latency across a wide-area link (bench/wan.sh): `wan_bench [max_bytes]
//! [iters] [rounds] [modes]`. Rank 0 prints a markdown table.
//!
//! Every algorithm family runs in the same job, interleaved: for each collective and size,
//! `rounds` (7) rounds, each of which takes one sample per mode (the order rotating from
//! round to round); a sample is the mean time per call of back-to-back calls (`iters` (8)
//! up to 32 KiB, fewer above, at least 2) after a barrier, averaged over the ranks. On a machine whose load
//! changes from second to second, neighbouring samples of two modes meet the same load, so
//! their ratio is what the algorithms differ by; the table gives per mode the median
//! sample and per mode the median of the per-round ratios to `wan` with their range (min
//! and max over the rounds). A collective and size whose rounds would take more than
//! `WAN_BENCH_POINT_SECONDS` (10) stops after three rounds.
//!
//! Modes (`modes`, comma-separated, default `wan,flat,classic,impi`):
//! - `wan`: the latency-aware algorithms (collectives/src/wan.rs);
//! - `flat`: `TSUNAGI_WAN_COLL=flat`, what a user of Tsunagi gets from algorithms that do
//!   not know the sites: the automatic choice, as for ranks on separate nodes;
//! - `classic`: flat with dissemination barrier, binomial bcast, recursive-doubling
//!   allreduce and allgather and pairwise alltoall forced at every size (the textbook
//!   algorithms of a single-cluster MPI);
//! - `impi`: the IMPI-conformant algorithms;
//! - `wan:PLAN`: wan with an allreduce plan forced (`coord`, `coord_rsag`, `split`,
//!   `split_rsag`; `split` and `coord` also force that bcast).
//!
//! Barrier, allreduce, allgather and alltoall cannot overlap from call to call (every
//! result needs every rank's input). A bcast from one root could (the root returns long
//! before the data arrives), so the root moves from call to call across the sites (the
//! lowest rank of the next site, then of the one after, ...): a root cannot start its
//! bcast before the previous one reached it, which chains the calls. `bcast_last` (only
//! with `WAN_BENCH_ONLY`) does the same with each site's highest rank as the root.
//!
//! `WAN_BENCH_SIZES=8,4096,...` replaces the sizes (8 B to `max_bytes` in steps of 8x);
//! `WAN_BENCH_ONLY=bcast,allreduce,...` runs only those collectives.

use tsunagi_collectives::select::{set_algorithm, Coll};
use tsunagi_collectives::wan::{force_algorithm, set_mode, Mode};
use tsunagi_collectives::{self as coll, Op, SendBuf};
use tsunagi_core::datatype::{Builtin, Datatype};
use tsunagi_core::{finalize, init, CommId, ThreadLevel};

/// The classic algorithms forced in `classic` mode, released (`auto`) otherwise.
const CLASSIC: [(Coll, &str); 5] = [
    (Coll::Barrier, "dissemination"),
    (Coll::Bcast, "binomial"),
    (Coll::Allreduce, "recursive_doubling"),
    (Coll::Allgather, "recursive_doubling"),
    (Coll::Alltoall, "pairwise"),
];

fn enter(mode: &str) {
    // `wan:PLAN` forces an allreduce plan (coord, coord_rsag, split, split_rsag) or a bcast
    // (split, coord) in wan mode: TSUNAGI_WAN_ALLREDUCE / TSUNAGI_WAN_BCAST for this mode.
    let (mode, plan) = mode.split_once(':').unwrap_or((mode, ""));
    let (ar, bc) = match plan {
        "" => (None, None),
        "split" => (Some("split"), Some("split")),
        "coord" => (Some("coord"), Some("coord")),
        p => (Some(p), None),
    };
    force_algorithm("TSUNAGI_WAN_ALLREDUCE", ar);
    force_algorithm("TSUNAGI_WAN_BCAST", bc);
    let (m, classic) = match mode {
        "wan" => (Mode::Wan, false),
        "flat" => (Mode::Flat, false),
        "classic" => (Mode::Flat, true),
        "impi" => (Mode::Impi, false),
        other => panic!("wan_bench: unknown mode {other}"),
    };
    set_mode(Some(m));
    for (c, a) in CLASSIC {
        set_algorithm(c, Some(if classic { a } else { "auto" })).expect("algorithm");
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn main() {
    init(ThreadLevel::Single, &tsunagi_transports::REGISTRY).expect("init");
    let rt = tsunagi_core::rt("wan_bench").expect("rt");
    let (me, n) = (rt.world_rank(), rt.world_size());
    let mut args = std::env::args().skip(1);
    let max: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(1 << 20);
    let iters: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(8).max(1);
    let rounds: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(7).max(1);
    let modes: Vec<String> = args
        .next()
        .unwrap_or_else(|| "wan,flat,classic,impi".into())
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    assert!(!modes.is_empty(), "wan_bench: no modes");
    let base = modes.iter().position(|m| m == "wan").unwrap_or(0);
    // Seconds one collective and size may take (`WAN_BENCH_POINT_SECONDS`, 10): beyond it
    // the rounds stop after three, so that the whole run stays within a few minutes.
    let budget: f64 = std::env::var("WAN_BENCH_POINT_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10.0);
    let w = CommId::WORLD;
    let byte = Datatype::builtin(Builtin::Byte);
    let dbl = Datatype::builtin(Builtin::Double);
    // Per mode the samples of every round, interleaved: round r starts with mode r mod M.
    // Every rank makes the same calls in the same order (same arguments everywhere).
    let sample = |bytes: usize, f: &mut dyn FnMut(usize)| -> Vec<Vec<f64>> {
        let it = if bytes <= 32 * 1024 {
            iters
        } else {
            (iters * 32 * 1024 / bytes).max(2)
        };
        let mut out = vec![Vec::new(); modes.len()];
        let mut k = 0;
        // Seconds the rounds so far took (from the samples, which every rank has the same
        // of: the same decision everywhere).
        let mut spent = 0.0;
        for r in 0..rounds {
            if r >= 3 && spent / r as f64 * (r + 1) as f64 > budget {
                break; // the point's time budget: at least three rounds
            }
            for j in 0..modes.len() {
                let m = (r + j) % modes.len();
                enter(&modes[m]);
                f(k); // the first call of a mode after another: connections, model
                k += 1;
                coll::barrier(rt, w).unwrap();
                let t = rt.wtime();
                for _ in 0..it {
                    f(k);
                    k += 1;
                }
                // The mean over the ranks of each rank's time: the ranks leave the
                // barrier up to a wide-area latency apart, and a rank that left early
                // waits inside its first call for the others, one that left late does not;
                // a single rank's time is off by that skew over `it` calls, the mean much
                // less.
                let mine = [(rt.wtime() - t) * 1e6 / it as f64];
                let mut sum = [0.0f64];
                // SAFETY: one double each way, alive across the call.
                unsafe {
                    coll::allreduce(
                        rt,
                        SendBuf::Ptr(mine.as_ptr() as *const u8),
                        sum.as_mut_ptr() as *mut u8,
                        1,
                        &Datatype::builtin(Builtin::Double),
                        &Op::Sum,
                        w,
                    )
                    .unwrap();
                }
                out[m].push(sum[0] / n as f64);
                spent += sum[0] / n as f64 * 1e-6 * (it + 1) as f64;
            }
        }
        set_mode(None);
        out
    };
    let report = |name: &str, bytes: usize, s: &[Vec<f64>]| {
        if me != 0 {
            return;
        }
        let mut line = format!("| {name} | {bytes} |");
        for v in s {
            line += &format!(" {:.0} |", median(&mut v.clone()));
        }
        for (m, v) in s.iter().enumerate() {
            if m == base {
                continue;
            }
            let mut r: Vec<f64> = v.iter().zip(&s[base]).map(|(a, b)| a / b).collect();
            let lo = r.iter().copied().fold(f64::MAX, f64::min);
            let hi = r.iter().copied().fold(0.0, f64::max);
            line += &format!(" {:.2} ({lo:.2}–{hi:.2}) |", median(&mut r));
        }
        println!("{line}");
    };
    if me == 0 {
        let mut h = "| collective | bytes |".to_string();
        let mut sep = "|---|---|".to_string();
        for m in &modes {
            h += &format!(" {m} (us) |");
            sep += "---|";
        }
        for m in modes.iter().filter(|m| **m != modes[base]) {
            h += &format!(" {m}/{} |", modes[base]);
            sep += "---|";
        }
        println!("{h}\n{sep}");
    }
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
    let only = std::env::var("WAN_BENCH_ONLY").ok();
    let on = |name: &str| match only.as_deref() {
        None => name != "bcast_last",
        Some(o) => o.split(',').any(|x| x == name),
    };
    if on("barrier") {
        let s = sample(0, &mut |_| coll::barrier(rt, w).unwrap());
        report("barrier", 0, &s);
    }
    let mut sizes = Vec::new();
    let mut s = 8usize;
    while s < max {
        sizes.push(s);
        s *= 8;
    }
    sizes.push(max);
    if let Ok(v) = std::env::var("WAN_BENCH_SIZES") {
        sizes = v.split(',').filter_map(|x| x.trim().parse().ok()).collect();
    }
    for s in sizes {
        let mut buf = vec![1u8; s];
        // SAFETY (all calls below): buffers are sized for the call and live across it.
        if on("bcast") {
            let t = sample(s, &mut |k| unsafe {
                let root = roots[k % roots.len()] as i32;
                coll::bcast(rt, buf.as_mut_ptr(), s as i64, &byte, root, w).unwrap()
            });
            report("bcast", s, &t);
        }
        if on("bcast_last") {
            let t = sample(s, &mut |k| unsafe {
                let root = last_roots[k % last_roots.len()] as i32;
                coll::bcast(rt, buf.as_mut_ptr(), s as i64, &byte, root, w).unwrap()
            });
            report("bcast_last", s, &t);
        }
        let cnt = (s / 8).max(1);
        let a = vec![1.0f64; cnt];
        let mut r = vec![0.0f64; cnt];
        if on("allreduce") {
            let t = sample(cnt * 8, &mut |_| unsafe {
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
            assert!(r.iter().all(|&x| x == n as f64), "allreduce result");
            report("allreduce", cnt * 8, &t);
        }
        let mut g = vec![0u8; s * n];
        if on("allgather") {
            let t = sample(s, &mut |_| unsafe {
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
            report("allgather", s, &t);
        }
        let sa = vec![2u8; s * n];
        let mut ra = vec![0u8; s * n];
        if on("alltoall") {
            let t = sample(s, &mut |_| unsafe {
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
            report("alltoall", s, &t);
        }
    }
    finalize().expect("finalize");
}
