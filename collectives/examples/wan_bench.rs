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
//!
//! **Timings** (`WAN_BENCH_TIMING=chain,rotate,isolated`, default `chain`; one table each):
//! - `chain`: back-to-back calls as above (a call's period in a stream of calls: what an
//!   iterative application sees; the bcast root moves over the sites' lowest ranks);
//! - `rotate`: back-to-back calls with the bcast root moving over every rank in turn, as
//!   IMB's Bcast does (barrier and allreduce have no root: the same as `chain`, so only the
//!   bcast is run);
//! - `isolated`: every call timed alone, as a user's single collective sees it: the ranks
//!   agree on a start instant on the host's shared clock (`WAN_BENCH_GAP_MS`, 30, after the
//!   previous call ended everywhere, so nothing is in flight), sleep until it, call, and the
//!   call's time is the last rank's return minus that instant; a sample is the median of
//!   `iters` such calls (the bcast root moving over every rank). It needs every rank on one
//!   host (one kernel, whose clock all of them read: the emulated sites), and is skipped
//!   with a note otherwise. Sleeping ranks wake late on a loaded machine; a call is counted
//!   late when a rank started it more than 1 ms after the instant, and the table's note
//!   gives how many were.

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

/// How a sample's calls are timed (see the crate doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Timing {
    Chain,
    Rotate,
    Isolated,
}

impl Timing {
    fn parse(s: &str) -> Timing {
        match s {
            "chain" => Timing::Chain,
            "rotate" => Timing::Rotate,
            "isolated" => Timing::Isolated,
            other => panic!("wan_bench: unknown timing {other} (chain, rotate, isolated)"),
        }
    }
}

/// Seconds on the host's real-time clock: every process on one kernel reads the same clock
/// (network namespaces do not change it), so an instant agreed on by the ranks of the
/// emulated sites is the same instant for all of them.
fn host_clock() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs_f64()
}

/// Whether every rank runs on this rank's kernel (same boot id), so that [`host_clock`]
/// is one clock for all.
fn one_host(rt: &tsunagi_core::Runtime) -> bool {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let mut mine = [0u8; 64];
    let b = id.trim().as_bytes();
    mine[..b.len().min(64)].copy_from_slice(&b[..b.len().min(64)]);
    let mut root = mine;
    let byte = Datatype::builtin(Builtin::Byte);
    // SAFETY: 64 bytes each, alive across the calls.
    unsafe { coll::bcast(rt, root.as_mut_ptr(), 64, &byte, 0, CommId::WORLD).unwrap() };
    let differ = [f64::from(u8::from(root != mine || b.is_empty()))];
    let mut any = [0.0f64];
    // SAFETY: one double each way.
    unsafe {
        coll::allreduce(
            rt,
            SendBuf::Ptr(differ.as_ptr() as *const u8),
            any.as_mut_ptr() as *mut u8,
            1,
            &Datatype::builtin(Builtin::Double),
            &Op::Max,
            CommId::WORLD,
        )
        .unwrap()
    };
    any[0] == 0.0
}

/// `it` calls of `f`, each alone: the ranks start it at an instant agreed on the host
/// clock, `gap` seconds after the previous call ended at every rank (nothing in flight),
/// and the call takes until the last rank returns. Returns the median over the calls, in
/// seconds; `late` counts (calls, calls that some rank started over 1 ms late, the sum of
/// the latest start's delay).
fn isolated(
    rt: &tsunagi_core::Runtime,
    it: usize,
    gap: f64,
    k: &mut usize,
    f: &mut dyn FnMut(usize),
    late: &std::cell::Cell<(usize, usize, f64)>,
) -> f64 {
    let dbl = Datatype::builtin(Builtin::Double);
    // The first instant: rank 0's clock plus two gaps, sent to every rank.
    let mut start = [host_clock() + 2.0 * gap];
    // SAFETY: one double, alive across the call.
    unsafe { coll::bcast(rt, start.as_mut_ptr() as *mut u8, 1, &dbl, 0, CommId::WORLD).unwrap() };
    let mut times = Vec::with_capacity(it);
    for _ in 0..it {
        // Sleep until the instant (yielding in a loop for the last milliseconds instead
        // made the wake-ups later still on the loaded 2-core machine: six ranks spinning).
        let wait = start[0] - host_clock();
        if wait > 0.0 {
            std::thread::sleep(std::time::Duration::from_secs_f64(wait));
        }
        let began = host_clock();
        f(*k);
        *k += 1;
        let end = host_clock();
        let mine = [end - start[0], began - start[0]];
        let mut worst = [0.0f64; 2];
        // SAFETY: two doubles each way, alive across the call.
        unsafe {
            coll::allreduce(
                rt,
                SendBuf::Ptr(mine.as_ptr() as *const u8),
                worst.as_mut_ptr() as *mut u8,
                2,
                &dbl,
                &Op::Max,
                CommId::WORLD,
            )
            .unwrap()
        };
        times.push(worst[0]);
        let (calls, slow, sum) = late.get();
        late.set((
            calls + 1,
            slow + usize::from(worst[1] > 1e-3),
            sum + worst[1].max(0.0),
        ));
        // Every rank has the same `worst`: the same next instant everywhere.
        start[0] += worst[0] + gap;
    }
    median(&mut times)
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
    // The gap before an isolated call, after the previous one ended at every rank.
    let gap: f64 = std::env::var("WAN_BENCH_GAP_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30.0)
        * 1e-3;
    // Isolated calls that some rank started more than 1 ms late.
    let late = std::cell::Cell::new((0usize, 0usize, 0.0f64));
    // Per mode the samples of every round, interleaved: round r starts with mode r mod M.
    // Every rank makes the same calls in the same order (same arguments everywhere).
    let sample = |bytes: usize, timing: Timing, f: &mut dyn FnMut(usize)| -> Vec<Vec<f64>> {
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
                if timing == Timing::Isolated {
                    let t = isolated(rt, it, gap, &mut k, f, &late);
                    out[m].push(t * 1e6);
                    spent += (t + gap + 0.02) * (it + 1) as f64;
                    continue;
                }
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
    let header = |timing: Timing| {
        if me != 0 {
            return;
        }
        let what = match timing {
            Timing::Chain => "back-to-back calls (bcast root: the sites' lowest ranks in turn)",
            Timing::Rotate => "back-to-back calls, the root moving over every rank (IMB style)",
            Timing::Isolated => {
                "every call alone (agreed start, last rank's return; root: every rank in turn)"
            }
        };
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
        println!("\n#### timing `{timing:?}`: {what}\n\n{h}\n{sep}");
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
    let every: Vec<usize> = (0..n).collect();
    let only = std::env::var("WAN_BENCH_ONLY").ok();
    let on = |name: &str| match only.as_deref() {
        None => name != "bcast_last" && name != "reduce",
        Some(o) => o.split(',').any(|x| x == name),
    };
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
    let timings: Vec<Timing> = std::env::var("WAN_BENCH_TIMING")
        .unwrap_or_else(|_| "chain".into())
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(Timing::parse)
        .collect();
    for timing in timings {
        if timing == Timing::Isolated && !one_host(rt) {
            if me == 0 {
                println!("\n(timing isolated skipped: the ranks run on different hosts, whose clocks differ)");
            }
            continue;
        }
        late.set((0, 0, 0.0));
        header(timing);
        // Rotate: only the rooted collectives differ from the chain.
        let rooted_only = timing == Timing::Rotate;
        let root_list = if timing == Timing::Chain {
            &roots
        } else {
            &every
        };
        if on("barrier") && !rooted_only {
            let s = sample(0, timing, &mut |_| coll::barrier(rt, w).unwrap());
            report("barrier", 0, &s);
        }
        for &s in &sizes {
            let mut buf = vec![1u8; s];
            // SAFETY (all calls below): buffers are sized for the call and live across it.
            if on("bcast") {
                let t = sample(s, timing, &mut |k| unsafe {
                    let root = root_list[k % root_list.len()] as i32;
                    coll::bcast(rt, buf.as_mut_ptr(), s as i64, &byte, root, w).unwrap()
                });
                report("bcast", s, &t);
            }
            if on("bcast_last") && timing == Timing::Chain {
                let t = sample(s, timing, &mut |k| unsafe {
                    let root = last_roots[k % last_roots.len()] as i32;
                    coll::bcast(rt, buf.as_mut_ptr(), s as i64, &byte, root, w).unwrap()
                });
                report("bcast_last", s, &t);
            }
            let cnt = (s / 8).max(1);
            let a = vec![1.0f64; cnt];
            let mut r = vec![0.0f64; cnt];
            if on("reduce") {
                let t = sample(cnt * 8, timing, &mut |k| unsafe {
                    let root = root_list[k % root_list.len()] as i32;
                    coll::reduce(
                        rt,
                        SendBuf::Ptr(a.as_ptr() as *const u8),
                        r.as_mut_ptr() as *mut u8,
                        cnt as i64,
                        &dbl,
                        &Op::Sum,
                        root,
                        w,
                    )
                    .unwrap()
                });
                report("reduce", cnt * 8, &t);
            }
            if rooted_only {
                continue;
            }
            if on("allreduce") {
                let t = sample(cnt * 8, timing, &mut |_| unsafe {
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
                let t = sample(s, timing, &mut |_| unsafe {
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
                let t = sample(s, timing, &mut |_| unsafe {
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
        if me == 0 && timing == Timing::Isolated {
            let (calls, slow, sum) = late.get();
            println!(
                "\n{slow} of {calls} isolated calls had a rank start over 1 ms after the agreed instant (a late wake-up on the loaded machine); the latest start was {:.1} ms late on average",
                sum / calls.max(1) as f64 * 1e3
            );
        }
    }
    finalize().expect("finalize");
}
