//! Checks every collective and every algorithm against a simple local reference, on the
//! ranks it is started with: `mpirun -n 5 coll_check [test...]` (no names = all).
//! Covers non-powers of two, zero counts, uneven v-counts, MPI_IN_PLACE, a strided
//! derived datatype (gaps must stay untouched), MINLOC, and a non-commutative user op
//! (2x2 matrix product) whose result proves the combining order. A failure prints
//! `FAIL ...` and exits 1; rank 0 prints `OK <test>` per passed test.

#![allow(clippy::needless_range_loop)]

use std::sync::Arc;

use tsunagi_collectives::{self as coll, select, Coll, Op, RecvBuf, SendBuf};
use tsunagi_core::datatype::{Builtin, Datatype, TypeRef};
use tsunagi_core::{finalize, init, CommId, ErrorClass, Runtime, ThreadLevel};

const W: CommId = CommId::WORLD;

fn fail(msg: String) -> ! {
    eprintln!("FAIL: {msg}");
    std::process::exit(1);
}

/// `small` on the command line: the large counts shrink tenfold (for slow transports).
static SMALL: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn big(n: usize) -> usize {
    if SMALL.load(std::sync::atomic::Ordering::Relaxed) {
        n / 10
    } else {
        n
    }
}

/// Checks made so far by this rank (reported with each OK line).
static CHECKS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

macro_rules! check {
    ($cond:expr, $($fmt:tt)*) => {
        CHECKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if !$cond {
            fail(format!("{}:{}: {}", file!(), line!(), format!($($fmt)*)));
        }
    };
}

fn ok<T>(r: Result<T, tsunagi_core::MpiError>, what: &str) -> T {
    r.unwrap_or_else(|e| fail(format!("{what}: {e}")))
}

fn b(t: Builtin) -> TypeRef {
    Datatype::builtin(t)
}
fn int() -> TypeRef {
    b(Builtin::Int)
}
fn commit(d: Datatype) -> TypeRef {
    let t = Arc::new(d);
    t.commit();
    t
}
/// Two ints at offsets 0 and 8, extent 16: element k covers ints 4k and 4k+2; ints 4k+1
/// and 4k+3 are gaps.
fn strided() -> TypeRef {
    let v = commit(Datatype::vector(2, 1, 2, &int()).unwrap());
    commit(Datatype::resized(&v, 0, 16).unwrap())
}
/// A 2x2 matrix of i64 (row major).
fn mat() -> TypeRef {
    commit(Datatype::contiguous(4, &b(Builtin::Int64)).unwrap())
}

fn mmul(x: [i64; 4], y: [i64; 4]) -> [i64; 4] {
    let m = |a: i64, b: i64| a.wrapping_mul(b);
    [
        m(x[0], y[0]).wrapping_add(m(x[1], y[2])),
        m(x[0], y[1]).wrapping_add(m(x[1], y[3])),
        m(x[2], y[0]).wrapping_add(m(x[3], y[2])),
        m(x[2], y[1]).wrapping_add(m(x[3], y[3])),
    ]
}

/// The non-commutative op: inout = in * inout.
fn matop() -> Op {
    Op::user(
        |a, bb, n, t| {
            assert_eq!(t.size(), 32);
            for k in 0..n {
                // SAFETY: the op is called with `n` matrices of 32 bytes at each address.
                unsafe {
                    let pa = (a as *const [i64; 4]).add(k);
                    let pb = (bb as *mut [i64; 4]).add(k);
                    pb.write_unaligned(mmul(pa.read_unaligned(), pb.read_unaligned()));
                }
            }
        },
        false,
    )
}

/// Rank r's matrix for element j: [[r + 2 + j, 1], [1, 0]] (no two commute).
fn mval(r: usize, j: usize) -> [i64; 4] {
    [(r + 2 + j) as i64, 1, 1, 0]
}
fn mref(ranks: std::ops::Range<usize>, j: usize) -> [i64; 4] {
    ranks.fold([1, 0, 0, 1], |acc, r| mmul(acc, mval(r, j)))
}

fn val(r: usize, j: usize) -> i32 {
    (r as i32)
        .wrapping_mul(100_003)
        .wrapping_add(j as i32 * 7 + 1)
}

fn p<T>(v: &[T]) -> *const u8 {
    v.as_ptr() as *const u8
}
fn pm<T>(v: &mut [T]) -> *mut u8 {
    v.as_mut_ptr() as *mut u8
}
fn sp<T>(v: &[T]) -> SendBuf {
    SendBuf::Ptr(p(v))
}

struct T {
    rt: &'static Runtime,
    me: usize,
    n: usize,
}

impl T {
    fn roots(&self) -> Vec<usize> {
        let mut r = vec![0, self.n - 1, self.n / 2];
        r.sort();
        r.dedup();
        r
    }
    fn done(&self, name: &str) {
        ok(coll::barrier(self.rt, W), "barrier");
        if self.me == 0 {
            println!(
                "OK {name} ({} checks so far)",
                CHECKS.load(std::sync::atomic::Ordering::Relaxed)
            );
        }
    }
}

fn each_alg(c: Coll, mut f: impl FnMut(&str)) {
    let mut algs = vec!["auto"];
    algs.extend_from_slice(c.algorithms());
    for a in algs {
        select::with_algorithm(c, a, || f(a)).unwrap();
    }
}

// ----- tests -----

fn test_barrier(t: &T) {
    each_alg(Coll::Barrier, |a| {
        for _ in 0..5 {
            ok(coll::barrier(t.rt, W), a);
        }
        // Nobody may leave before the last rank (which arrives late) is in: compare the
        // exit time of every rank with the entry time of the last (one host, one clock).
        if t.n > 1 {
            let now = || {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as i64
            };
            if t.me == t.n - 1 {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            let mut entered = [now()];
            ok(coll::barrier(t.rt, W), a);
            let left = now();
            // SAFETY: one i64.
            ok(
                unsafe {
                    coll::bcast(
                        t.rt,
                        pm(&mut entered),
                        1,
                        &b(Builtin::Int64),
                        (t.n - 1) as i32,
                        W,
                    )
                },
                a,
            );
            check!(
                left >= entered[0],
                "barrier {a}: rank {} left {} ns before the last rank entered",
                t.me,
                entered[0] - left
            );
        }
    });
    t.done("barrier");
}

fn test_bcast(t: &T) {
    each_alg(Coll::Bcast, |a| {
        for root in t.roots() {
            for count in [0usize, 1, 7, big(3000), big(300_000)] {
                let mut buf = vec![0i32; count];
                if t.me == root {
                    buf.iter_mut()
                        .enumerate()
                        .for_each(|(j, x)| *x = val(root, j));
                }
                // SAFETY: buf holds `count` ints.
                ok(
                    unsafe {
                        coll::bcast(t.rt, pm(&mut buf), count as i64, &int(), root as i32, W)
                    },
                    a,
                );
                check!(
                    buf.iter().enumerate().all(|(j, x)| *x == val(root, j)),
                    "bcast {a} root {root} count {count}"
                );
            }
            // Derived type: 5 strided elements, gaps untouched.
            let mut buf = vec![-1i32; 20];
            if t.me == root {
                for k in 0..5 {
                    buf[4 * k] = val(root, 2 * k);
                    buf[4 * k + 2] = val(root, 2 * k + 1);
                }
            }
            // SAFETY: 5 strided elements span 20 ints.
            ok(
                unsafe { coll::bcast(t.rt, pm(&mut buf), 5, &strided(), root as i32, W) },
                a,
            );
            for k in 0..5 {
                check!(
                    buf[4 * k] == val(root, 2 * k) && buf[4 * k + 2] == val(root, 2 * k + 1),
                    "bcast {a} strided data"
                );
                check!(
                    buf[4 * k + 1] == -1 && buf[4 * k + 3] == -1,
                    "bcast {a} strided gaps touched"
                );
            }
        }
    });
    t.done("bcast");
}

fn test_gather(t: &T) {
    let (me, n) = (t.me, t.n);
    each_alg(Coll::Gather, |a| {
        for root in t.roots() {
            for count in [0usize, 1, 5, 600] {
                for in_place in [false, true] {
                    let send: Vec<i32> = (0..count).map(|j| val(me, j)).collect();
                    let mut recv = vec![-7i32; n * count];
                    if in_place && me == root {
                        recv[root * count..(root + 1) * count].copy_from_slice(&send);
                    }
                    let sb = if in_place && me == root {
                        SendBuf::InPlace
                    } else {
                        sp(&send)
                    };
                    // SAFETY: buffers sized for the call.
                    ok(
                        unsafe {
                            coll::gather(
                                t.rt,
                                sb,
                                count as i64,
                                &int(),
                                pm(&mut recv),
                                count as i64,
                                &int(),
                                root as i32,
                                W,
                            )
                        },
                        a,
                    );
                    if me == root {
                        for r in 0..n {
                            for j in 0..count {
                                check!(recv[r * count + j] == val(r, j), "gather {a} root {root} count {count} inplace {in_place}: [{r}][{j}]");
                            }
                        }
                    }
                }
            }
            // Derived receive type at the root: 3 strided elements = 6 ints per rank.
            let send: Vec<i32> = (0..6).map(|j| val(me, j)).collect();
            let mut recv = vec![-1i32; n * 12];
            // SAFETY: n * 3 strided elements span n * 12 ints.
            ok(
                unsafe {
                    coll::gather(
                        t.rt,
                        sp(&send),
                        6,
                        &int(),
                        pm(&mut recv),
                        3,
                        &strided(),
                        root as i32,
                        W,
                    )
                },
                a,
            );
            if me == root {
                for r in 0..n {
                    for k in 0..3 {
                        let base = r * 12 + 4 * k;
                        check!(
                            recv[base] == val(r, 2 * k) && recv[base + 2] == val(r, 2 * k + 1),
                            "gather {a} strided"
                        );
                        check!(
                            recv[base + 1] == -1 && recv[base + 3] == -1,
                            "gather {a} strided gaps"
                        );
                    }
                }
            }
        }
    });
    // Gatherv: uneven counts (some zero), blocks in reverse rank order with gaps.
    let counts: Vec<i64> = (0..n).map(|r| (r % 3) as i64 * 2).collect();
    let mut displs = vec![0i64; n];
    let mut acc = 0;
    for r in (0..n).rev() {
        displs[r] = acc;
        acc += counts[r] + 1;
    }
    for root in t.roots() {
        for in_place in [false, true] {
            let send: Vec<i32> = (0..counts[me] as usize).map(|j| val(me, j)).collect();
            let mut recv = vec![-3i32; acc as usize];
            if in_place && me == root {
                let d = displs[root] as usize;
                recv[d..d + send.len()].copy_from_slice(&send);
            }
            let sb = if in_place && me == root {
                SendBuf::InPlace
            } else {
                sp(&send)
            };
            // SAFETY: buffers sized for the call.
            ok(
                unsafe {
                    coll::gatherv(
                        t.rt,
                        sb,
                        counts[me],
                        &int(),
                        pm(&mut recv),
                        &counts,
                        &displs,
                        &int(),
                        root as i32,
                        W,
                    )
                },
                "gatherv",
            );
            if me == root {
                for r in 0..n {
                    let d = displs[r] as usize;
                    for j in 0..counts[r] as usize {
                        check!(recv[d + j] == val(r, j), "gatherv root {root} [{r}][{j}]");
                    }
                    check!(recv[d + counts[r] as usize] == -3, "gatherv gap");
                }
            }
        }
    }
    t.done("gather");
}

fn test_scatter(t: &T) {
    let (me, n) = (t.me, t.n);
    each_alg(Coll::Scatter, |a| {
        for root in t.roots() {
            for count in [0usize, 1, 5, 600] {
                for in_place in [false, true] {
                    let send: Vec<i32> = (0..n * count)
                        .map(|k| val(k / count.max(1), k % count.max(1)))
                        .collect();
                    let mut recv = vec![-7i32; count];
                    let rb = if in_place && me == root {
                        RecvBuf::InPlace
                    } else {
                        RecvBuf::Ptr(pm(&mut recv))
                    };
                    // SAFETY: buffers sized for the call.
                    ok(
                        unsafe {
                            coll::scatter(
                                t.rt,
                                p(&send),
                                count as i64,
                                &int(),
                                rb,
                                count as i64,
                                &int(),
                                root as i32,
                                W,
                            )
                        },
                        a,
                    );
                    if !(in_place && me == root) {
                        check!(
                            recv.iter().enumerate().all(|(j, x)| *x == val(me, j)),
                            "scatter {a} root {root} count {count}"
                        );
                    }
                }
            }
            // Derived send type at the root.
            let mut send = vec![-1i32; n * 12];
            for r in 0..n {
                for k in 0..3 {
                    send[r * 12 + 4 * k] = val(r, 2 * k);
                    send[r * 12 + 4 * k + 2] = val(r, 2 * k + 1);
                }
            }
            let mut recv = vec![0i32; 6];
            // SAFETY: buffers sized for the call.
            ok(
                unsafe {
                    coll::scatter(
                        t.rt,
                        p(&send),
                        3,
                        &strided(),
                        RecvBuf::Ptr(pm(&mut recv)),
                        6,
                        &int(),
                        root as i32,
                        W,
                    )
                },
                a,
            );
            check!(
                recv.iter().enumerate().all(|(j, x)| *x == val(me, j)),
                "scatter {a} strided"
            );
        }
    });
    let counts: Vec<i64> = (0..n).map(|r| ((r + 1) % 3) as i64 * 3).collect();
    let mut displs = vec![0i64; n];
    let mut acc = 0;
    for r in (0..n).rev() {
        displs[r] = acc;
        acc += counts[r] + 2;
    }
    for root in t.roots() {
        let mut send = vec![0i32; acc as usize];
        for r in 0..n {
            for j in 0..counts[r] as usize {
                send[displs[r] as usize + j] = val(r, j);
            }
        }
        let mut recv = vec![0i32; counts[me] as usize];
        // SAFETY: buffers sized for the call.
        ok(
            unsafe {
                coll::scatterv(
                    t.rt,
                    p(&send),
                    &counts,
                    &displs,
                    &int(),
                    RecvBuf::Ptr(pm(&mut recv)),
                    counts[me],
                    &int(),
                    root as i32,
                    W,
                )
            },
            "scatterv",
        );
        check!(
            recv.iter().enumerate().all(|(j, x)| *x == val(me, j)),
            "scatterv root {root}"
        );
    }
    t.done("scatter");
}

fn test_allgather(t: &T) {
    let (me, n) = (t.me, t.n);
    each_alg(Coll::Allgather, |a| {
        for count in [0usize, 1, 5, big(3000)] {
            for in_place in [false, true] {
                let send: Vec<i32> = (0..count).map(|j| val(me, j)).collect();
                let mut recv = vec![-7i32; n * count];
                if in_place {
                    recv[me * count..(me + 1) * count].copy_from_slice(&send);
                }
                let sb = if in_place {
                    SendBuf::InPlace
                } else {
                    sp(&send)
                };
                // SAFETY: buffers sized for the call.
                ok(
                    unsafe {
                        coll::allgather(
                            t.rt,
                            sb,
                            count as i64,
                            &int(),
                            pm(&mut recv),
                            count as i64,
                            &int(),
                            W,
                        )
                    },
                    a,
                );
                for r in 0..n {
                    for j in 0..count {
                        check!(
                            recv[r * count + j] == val(r, j),
                            "allgather {a} count {count} inplace {in_place} [{r}][{j}]"
                        );
                    }
                }
            }
        }
        // Strided receive type.
        let send: Vec<i32> = (0..4).map(|j| val(me, j)).collect();
        let mut recv = vec![-1i32; n * 8];
        // SAFETY: n * 2 strided elements span n * 8 ints.
        ok(
            unsafe { coll::allgather(t.rt, sp(&send), 4, &int(), pm(&mut recv), 2, &strided(), W) },
            a,
        );
        for r in 0..n {
            for k in 0..2 {
                let base = r * 8 + 4 * k;
                check!(
                    recv[base] == val(r, 2 * k) && recv[base + 2] == val(r, 2 * k + 1),
                    "allgather {a} strided"
                );
                check!(
                    recv[base + 1] == -1 && recv[base + 3] == -1,
                    "allgather {a} strided gaps"
                );
            }
        }
        // Strided send type: the first exchange of recursive doubling and the ring sends
        // our block straight from the send buffer (packed by the send), not from the copy;
        // blocks above the shared-memory area's slot so that the algorithms run.
        for k in [2usize, big(2100)] {
            let mut send = vec![-9i32; 4 * k];
            for j in 0..2 * k {
                send[2 * j] = val(me, j);
            }
            let mut recv = vec![-1i32; n * 2 * k];
            // SAFETY: k strided elements span 4 * k ints; n * 2 * k ints received.
            ok(
                unsafe {
                    coll::allgather(
                        t.rt,
                        sp(&send),
                        k as i64,
                        &strided(),
                        pm(&mut recv),
                        2 * k as i64,
                        &int(),
                        W,
                    )
                },
                a,
            );
            for r in 0..n {
                for j in 0..2 * k {
                    check!(
                        recv[r * 2 * k + j] == val(r, j),
                        "allgather {a} strided send {k} [{r}][{j}]"
                    );
                }
            }
        }
        // Allgatherv: uneven counts, reverse order with gaps; and rank-ordered (direct).
        for reversed in [true, false] {
            let counts: Vec<i64> = (0..n).map(|r| ((r * 7) % 4) as i64 * 100).collect();
            let mut displs = vec![0i64; n];
            let mut acc = 0;
            let order: Vec<usize> = if reversed {
                (0..n).rev().collect()
            } else {
                (0..n).collect()
            };
            for &r in &order {
                displs[r] = acc;
                acc += counts[r] + i64::from(reversed);
            }
            let send: Vec<i32> = (0..counts[me] as usize).map(|j| val(me, j)).collect();
            let mut recv = vec![-5i32; acc as usize];
            // SAFETY: buffers sized for the call.
            ok(
                unsafe {
                    coll::allgatherv(
                        t.rt,
                        sp(&send),
                        counts[me],
                        &int(),
                        pm(&mut recv),
                        &counts,
                        &displs,
                        &int(),
                        W,
                    )
                },
                a,
            );
            for r in 0..n {
                for j in 0..counts[r] as usize {
                    check!(
                        recv[displs[r] as usize + j] == val(r, j),
                        "allgatherv {a} reversed {reversed} [{r}][{j}]"
                    );
                }
                if reversed {
                    check!(
                        recv[(displs[r] + counts[r]) as usize] == -5,
                        "allgatherv {a} gap"
                    );
                }
            }
        }
    });
    t.done("allgather");
}

fn aval(from: usize, to: usize, k: usize) -> i32 {
    (from * 10_000 + to * 100 + k) as i32
}

fn test_alltoall(t: &T) {
    let (me, n) = (t.me, t.n);
    each_alg(Coll::Alltoall, |a| {
        for count in [0usize, 1, 3, big(2000)] {
            for in_place in [false, true] {
                let send: Vec<i32> = (0..n * count)
                    .map(|x| aval(me, x / count.max(1), x % count.max(1)))
                    .collect();
                let mut recv = vec![-7i32; n * count];
                if in_place {
                    recv.copy_from_slice(&send);
                }
                let sb = if in_place {
                    SendBuf::InPlace
                } else {
                    sp(&send)
                };
                // SAFETY: buffers sized for the call.
                ok(
                    unsafe {
                        coll::alltoall(
                            t.rt,
                            sb,
                            count as i64,
                            &int(),
                            pm(&mut recv),
                            count as i64,
                            &int(),
                            W,
                        )
                    },
                    a,
                );
                for i in 0..n {
                    for k in 0..count {
                        check!(
                            recv[i * count + k] == aval(i, me, k),
                            "alltoall {a} count {count} inplace {in_place} [{i}][{k}]"
                        );
                    }
                }
                // The forced algorithm is the one that ran (bruck needs 2 ranks; "sites"
                // needs a communicator over several sites, else pairwise runs).
                let ran = coll::last_alltoall_algorithm();
                let want = if a == "bruck" && n == 1 {
                    "pairwise"
                } else {
                    a
                };
                // "shm" needs one node, 2 to 16 ranks and all blocks in one slot.
                let shm_fits = n > 1 && n <= 16 && count > 0 && n * count * 4 <= 8192 && {
                    let nodes = ok(t.rt.comm_nodes(W), "nodes");
                    nodes.iter().all(|&x| x == nodes[0])
                };
                // "hierarchical" needs several nodes, several ranks on one, all blocks of
                // a rank in one slot, and one site (across sites the site algorithms
                // apply, not the node split).
                let hier_fits = count > 0 && n * count * 4 <= 8192 && {
                    let nodes = ok(t.rt.comm_nodes(W), "nodes");
                    let mut ids = nodes.to_vec();
                    ids.sort_unstable();
                    ids.dedup();
                    let sites = t.rt.site_map();
                    ids.len() > 1 && ids.len() < n && sites.iter().all(|s| Some(s) == sites.first())
                };
                let fallback = (a == "sites"
                    || (a == "shm" && !shm_fits)
                    || (a == "hierarchical" && !hier_fits))
                    && ran == Some("pairwise");
                check!(
                    ran.is_some() && (a == "auto" || ran == Some(want) || fallback),
                    "alltoall forced {a} ran {ran:?}"
                );
            }
        }
        // Strided receive type: 2 elements (4 ints) per peer.
        let send: Vec<i32> = (0..n * 4).map(|x| aval(me, x / 4, x % 4)).collect();
        let mut recv = vec![-1i32; n * 8];
        // SAFETY: buffers sized for the call.
        ok(
            unsafe { coll::alltoall(t.rt, sp(&send), 4, &int(), pm(&mut recv), 2, &strided(), W) },
            a,
        );
        for i in 0..n {
            for k in 0..2 {
                let base = i * 8 + 4 * k;
                check!(
                    recv[base] == aval(i, me, 2 * k) && recv[base + 2] == aval(i, me, 2 * k + 1),
                    "alltoall {a} strided"
                );
                check!(
                    recv[base + 1] == -1 && recv[base + 3] == -1,
                    "alltoall {a} strided gaps"
                );
            }
        }
        // Alltoallv: uneven counts, reversed displacements.
        for in_place in [false, true] {
            let cnt = |from: usize, to: usize| {
                if in_place {
                    ((from + to) % 3) * 2
                } else {
                    (from * 2 + to) % 4
                }
            };
            let scounts: Vec<i64> = (0..n).map(|j| cnt(me, j) as i64).collect();
            let rcounts: Vec<i64> = (0..n).map(|i| cnt(i, me) as i64).collect();
            let disp = |c: &[i64]| -> (Vec<i64>, i64) {
                let mut d = vec![0i64; n];
                let mut acc = 0;
                for j in (0..n).rev() {
                    d[j] = acc;
                    acc += c[j] + 1;
                }
                (d, acc)
            };
            let (sd, stotal) = disp(&scounts);
            let (rd, rtotal) = disp(&rcounts);
            let mut send = vec![0i32; stotal as usize];
            for j in 0..n {
                for k in 0..scounts[j] as usize {
                    send[sd[j] as usize + k] = aval(me, j, k);
                }
            }
            let mut recv = vec![-9i32; rtotal as usize];
            let sb = if in_place {
                // In place: the receive buffer holds what goes out (symmetric counts).
                for j in 0..n {
                    for k in 0..rcounts[j] as usize {
                        recv[rd[j] as usize + k] = aval(me, j, k);
                    }
                }
                SendBuf::InPlace
            } else {
                sp(&send)
            };
            // SAFETY: buffers sized for the call.
            ok(
                unsafe {
                    coll::alltoallv(
                        t.rt,
                        sb,
                        &scounts,
                        &sd,
                        &int(),
                        pm(&mut recv),
                        &rcounts,
                        &rd,
                        &int(),
                        W,
                    )
                },
                a,
            );
            for i in 0..n {
                for k in 0..rcounts[i] as usize {
                    check!(
                        recv[rd[i] as usize + k] == aval(i, me, k),
                        "alltoallv {a} inplace {in_place} [{i}][{k}]"
                    );
                }
                check!(
                    recv[(rd[i] + rcounts[i]) as usize] == -9,
                    "alltoallv {a} gap"
                );
            }
        }
        // Alltoallw: ints out; from even peers ints in, from odd peers strided pairs.
        let send: Vec<i32> = (0..n * 4).map(|x| aval(me, x / 4, x % 4)).collect();
        let scounts = vec![4i64; n];
        let sdispls: Vec<i64> = (0..n).map(|j| (j * 16) as i64).collect();
        let stypes = vec![int(); n];
        let rtypes: Vec<TypeRef> = (0..n)
            .map(|i| if i % 2 == 0 { int() } else { strided() })
            .collect();
        let rcounts: Vec<i64> = (0..n).map(|i| if i % 2 == 0 { 4 } else { 2 }).collect();
        let rdispls: Vec<i64> = (0..n).map(|i| (i * 32) as i64).collect();
        let mut recv = vec![-1i32; n * 8];
        // SAFETY: buffers sized for the call.
        ok(
            unsafe {
                coll::alltoallw(
                    t.rt,
                    sp(&send),
                    &scounts,
                    &sdispls,
                    &stypes,
                    pm(&mut recv),
                    &rcounts,
                    &rdispls,
                    &rtypes,
                    W,
                )
            },
            a,
        );
        for i in 0..n {
            let got: Vec<i32> = if i % 2 == 0 {
                recv[i * 8..i * 8 + 4].to_vec()
            } else {
                vec![
                    recv[i * 8],
                    recv[i * 8 + 2],
                    recv[i * 8 + 4],
                    recv[i * 8 + 6],
                ]
            };
            check!(
                got == (0..4).map(|k| aval(i, me, k)).collect::<Vec<_>>(),
                "alltoallw {a} from {i}: {got:?}"
            );
        }
    });
    t.done("alltoall");
}

fn lval(r: usize, j: usize) -> i64 {
    (r as i64 + 1) * 1_000_000 + j as i64
}
fn lsum(n: usize, j: usize) -> i64 {
    (0..n).map(|r| lval(r, j)).sum()
}

fn test_reduce(t: &T) {
    let (me, n) = (t.me, t.n);
    let long = b(Builtin::Long);
    let m = mat();
    let mop = matop();
    each_alg(Coll::Reduce, |a| {
        for root in t.roots() {
            for count in [0usize, 1, 10, big(70_000)] {
                for in_place in [false, true] {
                    let send: Vec<i64> = (0..count).map(|j| lval(me, j)).collect();
                    let mut recv = vec![0i64; count];
                    let ip = in_place && me == root;
                    if ip {
                        recv.copy_from_slice(&send);
                    }
                    let sb = if ip { SendBuf::InPlace } else { sp(&send) };
                    // SAFETY: buffers sized for the call.
                    ok(
                        unsafe {
                            coll::reduce(
                                t.rt,
                                sb,
                                pm(&mut recv),
                                count as i64,
                                &long,
                                &Op::Sum,
                                root as i32,
                                W,
                            )
                        },
                        a,
                    );
                    if me == root {
                        check!(
                            recv.iter().enumerate().all(|(j, x)| *x == lsum(n, j)),
                            "reduce {a} root {root} count {count} inplace {in_place}"
                        );
                    }
                }
            }
            // Non-commutative: matrix products in rank order.
            for count in [1usize, 7, big(1500)] {
                let send: Vec<[i64; 4]> = (0..count).map(|j| mval(me, j)).collect();
                let mut recv = vec![[0i64; 4]; count];
                // SAFETY: buffers sized for the call.
                ok(
                    unsafe {
                        coll::reduce(
                            t.rt,
                            sp(&send),
                            pm(&mut recv),
                            count as i64,
                            &m,
                            &mop,
                            root as i32,
                            W,
                        )
                    },
                    a,
                );
                if me == root {
                    for j in 0..count {
                        check!(
                            recv[j] == mref(0..n, j),
                            "reduce {a} matrix root {root} count {count} [{j}]: {:?} vs {:?}",
                            recv[j],
                            mref(0..n, j)
                        );
                    }
                }
            }
            // Strided derived type, SUM of ints; gaps untouched.
            let mut send = vec![0i32; 12];
            for k in 0..3 {
                send[4 * k] = val(me, 2 * k);
                send[4 * k + 2] = val(me, 2 * k + 1);
            }
            let mut recv = vec![-1i32; 12];
            // SAFETY: 3 strided elements span 12 ints.
            ok(
                unsafe {
                    coll::reduce(
                        t.rt,
                        sp(&send),
                        pm(&mut recv),
                        3,
                        &strided(),
                        &Op::Sum,
                        root as i32,
                        W,
                    )
                },
                a,
            );
            if me == root {
                for k in 0..3 {
                    let want = |j: usize| (0..n).fold(0i32, |s, r| s.wrapping_add(val(r, j)));
                    check!(
                        recv[4 * k] == want(2 * k) && recv[4 * k + 2] == want(2 * k + 1),
                        "reduce {a} strided"
                    );
                    check!(
                        recv[4 * k + 1] == -1 && recv[4 * k + 3] == -1,
                        "reduce {a} strided gaps"
                    );
                }
            }
            // MAXLOC on (double, int) pairs: ties resolve to the lowest index.
            #[repr(C)]
            #[derive(Clone, Copy, PartialEq, Debug)]
            struct DI(f64, i32);
            let send: Vec<DI> = (0..3)
                .map(|j| {
                    DI(
                        if j == 0 {
                            1.0
                        } else {
                            ((me * 7 + j) % n) as f64
                        },
                        me as i32,
                    )
                })
                .collect();
            let mut recv = vec![DI(0.0, 0); 3];
            // SAFETY: 3 pairs each.
            ok(
                unsafe {
                    coll::reduce(
                        t.rt,
                        sp(&send),
                        pm(&mut recv),
                        3,
                        &b(Builtin::DoubleInt),
                        &Op::Maxloc,
                        root as i32,
                        W,
                    )
                },
                a,
            );
            if me == root {
                check!(recv[0] == DI(1.0, 0), "maxloc tie {:?}", recv[0]);
                for j in 1..3 {
                    let best = (0..n)
                        .map(|r| ((r * 7 + j) % n) as f64)
                        .fold(f64::MIN, f64::max);
                    let idx = (0..n).find(|r| ((r * 7 + j) % n) as f64 == best).unwrap();
                    check!(
                        recv[j] == DI(best, idx as i32),
                        "maxloc [{j}] {:?}",
                        recv[j]
                    );
                }
            }
        }
    });
    t.done("reduce");
}

fn test_allreduce(t: &T) {
    let (me, n) = (t.me, t.n);
    let long = b(Builtin::Long);
    let m = mat();
    let mop = matop();
    each_alg(Coll::Allreduce, |a| {
        for count in [0usize, 1, 3, big(1000), big(70_000)] {
            for in_place in [false, true] {
                let send: Vec<i64> = (0..count).map(|j| lval(me, j)).collect();
                let mut recv = vec![0i64; count];
                if in_place {
                    recv.copy_from_slice(&send);
                }
                let sb = if in_place {
                    SendBuf::InPlace
                } else {
                    sp(&send)
                };
                // SAFETY: buffers sized for the call.
                ok(
                    unsafe {
                        coll::allreduce(t.rt, sb, pm(&mut recv), count as i64, &long, &Op::Sum, W)
                    },
                    a,
                );
                check!(
                    recv.iter().enumerate().all(|(j, x)| *x == lsum(n, j)),
                    "allreduce {a} count {count} inplace {in_place}"
                );
            }
        }
        for count in [1usize, 7, big(1500)] {
            let send: Vec<[i64; 4]> = (0..count).map(|j| mval(me, j)).collect();
            let mut recv = vec![[0i64; 4]; count];
            // SAFETY: buffers sized for the call.
            ok(
                unsafe {
                    coll::allreduce(t.rt, sp(&send), pm(&mut recv), count as i64, &m, &mop, W)
                },
                a,
            );
            for j in 0..count {
                check!(
                    recv[j] == mref(0..n, j),
                    "allreduce {a} matrix count {count} [{j}]"
                );
            }
        }
        let mut buf = vec![0i32; 12];
        for k in 0..3 {
            buf[4 * k] = val(me, 2 * k);
            buf[4 * k + 1] = -1;
            buf[4 * k + 2] = val(me, 2 * k + 1);
            buf[4 * k + 3] = -1;
        }
        // SAFETY: 3 strided elements span 12 ints; in place.
        ok(
            unsafe {
                coll::allreduce(
                    t.rt,
                    SendBuf::InPlace,
                    pm(&mut buf),
                    3,
                    &strided(),
                    &Op::Max,
                    W,
                )
            },
            a,
        );
        for k in 0..3 {
            let want = |j: usize| (0..n).map(|r| val(r, j)).max().unwrap();
            check!(
                buf[4 * k] == want(2 * k) && buf[4 * k + 2] == want(2 * k + 1),
                "allreduce {a} strided"
            );
            check!(
                buf[4 * k + 1] == -1 && buf[4 * k + 3] == -1,
                "allreduce {a} strided gaps"
            );
        }
        let mut f = [me as f64 * 0.5, -(me as f64)];
        // SAFETY: 2 doubles.
        ok(
            unsafe {
                coll::allreduce(
                    t.rt,
                    SendBuf::InPlace,
                    pm(&mut f),
                    2,
                    &b(Builtin::Double),
                    &Op::Min,
                    W,
                )
            },
            a,
        );
        check!(
            f == [0.0, -((n - 1) as f64)],
            "allreduce {a} min double {f:?}"
        );
    });
    t.done("allreduce");
}

fn test_reduce_scatter(t: &T) {
    let (me, n) = (t.me, t.n);
    let long = b(Builtin::Long);
    let m = mat();
    let mop = matop();
    each_alg(Coll::ReduceScatter, |a| {
        for count in [0usize, 1, 5, big(1000)] {
            for in_place in [false, true] {
                let send: Vec<i64> = (0..n * count).map(|j| lval(me, j)).collect();
                let mut recv = if in_place {
                    send.clone()
                } else {
                    vec![0i64; count]
                };
                let sb = if in_place {
                    SendBuf::InPlace
                } else {
                    sp(&send)
                };
                // SAFETY: buffers sized for the call.
                ok(
                    unsafe {
                        coll::reduce_scatter_block(
                            t.rt,
                            sb,
                            pm(&mut recv),
                            count as i64,
                            &long,
                            &Op::Sum,
                            W,
                        )
                    },
                    a,
                );
                for j in 0..count {
                    check!(
                        recv[j] == lsum(n, me * count + j),
                        "reduce_scatter_block {a} count {count} inplace {in_place} [{j}]"
                    );
                }
            }
        }
        // Uneven counts, one of them zero; SUM and the matrix op.
        let counts: Vec<i64> = (0..n).map(|r| ((r + 2) % 4) as i64 * 3).collect();
        let total: usize = counts.iter().sum::<i64>() as usize;
        let start: usize = counts[..me].iter().sum::<i64>() as usize;
        let send: Vec<i64> = (0..total).map(|j| lval(me, j)).collect();
        let mut recv = vec![0i64; counts[me] as usize];
        // SAFETY: buffers sized for the call.
        ok(
            unsafe {
                coll::reduce_scatter(t.rt, sp(&send), pm(&mut recv), &counts, &long, &Op::Sum, W)
            },
            a,
        );
        check!(
            recv.iter()
                .enumerate()
                .all(|(j, x)| *x == lsum(n, start + j)),
            "reduce_scatter {a}"
        );
        let send: Vec<[i64; 4]> = (0..total).map(|j| mval(me, j)).collect();
        let mut recv = vec![[0i64; 4]; counts[me] as usize];
        // SAFETY: buffers sized for the call.
        ok(
            unsafe { coll::reduce_scatter(t.rt, sp(&send), pm(&mut recv), &counts, &m, &mop, W) },
            a,
        );
        for (j, x) in recv.iter().enumerate() {
            check!(
                *x == mref(0..n, start + j),
                "reduce_scatter {a} matrix [{j}]"
            );
        }
    });
    t.done("reduce_scatter");
}

fn test_scan(t: &T) {
    let (me, n) = (t.me, t.n);
    let long = b(Builtin::Long);
    let m = mat();
    let mop = matop();
    let _ = n;
    each_alg(Coll::Scan, |a| {
        for count in [0usize, 1, 5, big(1000)] {
            for in_place in [false, true] {
                let send: Vec<i64> = (0..count).map(|j| lval(me, j)).collect();
                let mut recv = if in_place {
                    send.clone()
                } else {
                    vec![0i64; count]
                };
                let sb = if in_place {
                    SendBuf::InPlace
                } else {
                    sp(&send)
                };
                // SAFETY: buffers sized for the call.
                ok(
                    unsafe {
                        coll::scan(t.rt, sb, pm(&mut recv), count as i64, &long, &Op::Sum, W)
                    },
                    a,
                );
                check!(
                    recv.iter().enumerate().all(|(j, x)| *x == lsum(me + 1, j)),
                    "scan {a} count {count}"
                );
                let mut recv = if in_place {
                    send.clone()
                } else {
                    vec![-4i64; count]
                };
                // SAFETY: as above.
                ok(
                    unsafe {
                        coll::exscan(
                            t.rt,
                            sb_of(in_place, &send),
                            pm(&mut recv),
                            count as i64,
                            &long,
                            &Op::Sum,
                            W,
                        )
                    },
                    a,
                );
                if me > 0 {
                    check!(
                        recv.iter().enumerate().all(|(j, x)| *x == lsum(me, j)),
                        "exscan {a} count {count}"
                    );
                } else if !in_place {
                    check!(
                        recv.iter().all(|x| *x == -4),
                        "exscan {a}: rank 0's buffer was touched"
                    );
                }
            }
        }
        for count in [1usize, 6] {
            let send: Vec<[i64; 4]> = (0..count).map(|j| mval(me, j)).collect();
            let mut recv = vec![[0i64; 4]; count];
            // SAFETY: buffers sized for the call.
            ok(
                unsafe { coll::scan(t.rt, sp(&send), pm(&mut recv), count as i64, &m, &mop, W) },
                a,
            );
            for j in 0..count {
                check!(recv[j] == mref(0..me + 1, j), "scan {a} matrix [{j}]");
            }
            // SAFETY: as above.
            ok(
                unsafe { coll::exscan(t.rt, sp(&send), pm(&mut recv), count as i64, &m, &mop, W) },
                a,
            );
            if me > 0 {
                for j in 0..count {
                    check!(recv[j] == mref(0..me, j), "exscan {a} matrix [{j}]");
                }
            }
        }
    });
    t.done("scan");
}

/// Several non-blocking collectives outstanding at once, interleaved with point-to-point
/// traffic and a blocking collective on the same communicator, completed by polling.
fn test_nbc(t: &T) {
    use tsunagi_core::SendMode;
    let (me, n) = (t.me, t.n);
    let rt = t.rt;
    let long = b(Builtin::Long);
    let m = mat();
    let mop = matop();
    for round in 0..3 {
        let root = (round * 2) % n;
        let count = [1usize, 100, 5000][round];
        let mut reqs: Vec<(&str, coll::CollRequest)> = Vec::new();
        // Point-to-point ring traffic posted first, on the same communicator.
        let right = ((me + 1) % n) as i32;
        let left = ((me + n - 1) % n) as i32;
        let ptp_out = vec![me as i64; 64];
        let mut ptp_in = vec![-1i64; 64];
        // SAFETY: both buffers live until the waitall below.
        let pr = unsafe {
            ok(
                rt.irecv("MPI_Irecv", pm(&mut ptp_in), 64, &long, left, 7, W),
                "irecv",
            )
        };
        // SAFETY: as above.
        let ps = unsafe {
            ok(
                rt.isend(
                    "MPI_Isend",
                    p(&ptp_out),
                    64,
                    &long,
                    right,
                    7,
                    W,
                    SendMode::Standard,
                ),
                "isend",
            )
        };
        let mut bc = vec![0i64; count];
        if me == root {
            bc.iter_mut()
                .enumerate()
                .for_each(|(j, x)| *x = lval(root, j));
        }
        let ar_in: Vec<i64> = (0..count).map(|j| lval(me, j)).collect();
        let mut ar_out = vec![0i64; count];
        let mat_in: Vec<[i64; 4]> = (0..3).map(|j| mval(me, j)).collect();
        let mut mat_out = vec![[0i64; 4]; 3];
        let mut red_out = vec![0i64; count];
        let g_in: Vec<i32> = (0..3).map(|j| val(me, j)).collect();
        let mut g_out = vec![0i32; 3 * n];
        let mut ag_out = vec![0i32; 3 * n];
        let s_in: Vec<i32> = (0..2 * n).map(|k| val(k / 2, k % 2)).collect();
        let mut s_out = vec![0i32; 2];
        let a_in: Vec<i32> = (0..2 * n).map(|x| aval(me, x / 2, x % 2)).collect();
        let mut a_out = vec![0i32; 2 * n];
        let rs_in: Vec<i64> = (0..2 * n).map(|j| lval(me, j)).collect();
        let mut rs_out = vec![0i64; 2];
        let sc_in: Vec<[i64; 4]> = (0..2).map(|j| mval(me, j)).collect();
        let mut sc_out = vec![[0i64; 4]; 2];
        let mut ex_out = vec![[9i64; 4]; 2];
        let vcounts: Vec<i64> = (0..n).map(|r| (r % 3) as i64).collect();
        let vdispls: Vec<i64> = (0..n).map(|r| vcounts[..r].iter().sum()).collect();
        let gv_in: Vec<i32> = (0..vcounts[me] as usize).map(|j| val(me, j)).collect();
        let mut gv_out = vec![0i32; vcounts.iter().sum::<i64>() as usize];
        // SAFETY: every buffer outlives the waits below and is not touched meanwhile.
        unsafe {
            reqs.push(("ibarrier", ok(coll::ibarrier(rt, W), "ibarrier")));
            reqs.push((
                "ibcast",
                ok(
                    coll::ibcast(rt, pm(&mut bc), count as i64, &long, root as i32, W),
                    "ibcast",
                ),
            ));
            reqs.push((
                "iallreduce",
                ok(
                    coll::iallreduce(
                        rt,
                        sp(&ar_in),
                        pm(&mut ar_out),
                        count as i64,
                        &long,
                        &Op::Sum,
                        W,
                    ),
                    "iallreduce",
                ),
            ));
            reqs.push((
                "iallreduce matrix",
                ok(
                    coll::iallreduce(rt, sp(&mat_in), pm(&mut mat_out), 3, &m, &mop, W),
                    "iallreduce matrix",
                ),
            ));
            reqs.push((
                "ireduce",
                ok(
                    coll::ireduce(
                        rt,
                        sp(&ar_in),
                        pm(&mut red_out),
                        count as i64,
                        &long,
                        &Op::Sum,
                        root as i32,
                        W,
                    ),
                    "ireduce",
                ),
            ));
            reqs.push((
                "igather",
                ok(
                    coll::igather(
                        rt,
                        sp(&g_in),
                        3,
                        &int(),
                        pm(&mut g_out),
                        3,
                        &int(),
                        root as i32,
                        W,
                    ),
                    "igather",
                ),
            ));
            reqs.push((
                "iallgather",
                ok(
                    coll::iallgather(rt, sp(&g_in), 3, &int(), pm(&mut ag_out), 3, &int(), W),
                    "iallgather",
                ),
            ));
            reqs.push((
                "iscatter",
                ok(
                    coll::iscatter(
                        rt,
                        p(&s_in),
                        2,
                        &int(),
                        RecvBuf::Ptr(pm(&mut s_out)),
                        2,
                        &int(),
                        root as i32,
                        W,
                    ),
                    "iscatter",
                ),
            ));
            reqs.push((
                "ialltoall",
                ok(
                    coll::ialltoall(rt, sp(&a_in), 2, &int(), pm(&mut a_out), 2, &int(), W),
                    "ialltoall",
                ),
            ));
            reqs.push((
                "ireduce_scatter_block",
                ok(
                    coll::ireduce_scatter_block(
                        rt,
                        sp(&rs_in),
                        pm(&mut rs_out),
                        2,
                        &long,
                        &Op::Sum,
                        W,
                    ),
                    "ireduce_scatter_block",
                ),
            ));
            reqs.push((
                "iscan",
                ok(
                    coll::iscan(rt, sp(&sc_in), pm(&mut sc_out), 2, &m, &mop, W),
                    "iscan",
                ),
            ));
            reqs.push((
                "iexscan",
                ok(
                    coll::iexscan(rt, sp(&sc_in), pm(&mut ex_out), 2, &m, &mop, W),
                    "iexscan",
                ),
            ));
            reqs.push((
                "igatherv",
                ok(
                    coll::igatherv(
                        rt,
                        sp(&gv_in),
                        vcounts[me],
                        &int(),
                        pm(&mut gv_out),
                        &vcounts,
                        &vdispls,
                        &int(),
                        root as i32,
                        W,
                    ),
                    "igatherv",
                ),
            ));
        }
        // v-forms and in-place forms.
        let cnt = |from: usize, to: usize| (from + 2 * to) % 3;
        let avs: Vec<i64> = (0..n).map(|j| cnt(me, j) as i64).collect();
        let avr: Vec<i64> = (0..n).map(|i| cnt(i, me) as i64).collect();
        let avsd: Vec<i64> = (0..n).map(|j| avs[..j].iter().sum()).collect();
        let avrd: Vec<i64> = (0..n).map(|i| avr[..i].iter().sum()).collect();
        let av_in: Vec<i32> = (0..n)
            .flat_map(|j| (0..cnt(me, j)).map(move |k| aval(me, j, k)))
            .collect();
        let mut av_out = vec![0i32; avr.iter().sum::<i64>() as usize];
        let sv_counts: Vec<i64> = (0..n).map(|r| ((r + 1) % 3) as i64).collect();
        let sv_displs: Vec<i64> = (0..n).map(|r| sv_counts[..r].iter().sum()).collect();
        let sv_in: Vec<i32> = (0..n)
            .flat_map(|r| (0..sv_counts[r] as usize).map(move |j| val(r, j)))
            .collect();
        let mut sv_out = vec![0i32; sv_counts[me] as usize];
        let rsv_counts: Vec<i64> = (0..n).map(|r| (r % 2) as i64 + 1).collect();
        let rsv_total: usize = rsv_counts.iter().sum::<i64>() as usize;
        let rsv_start: usize = rsv_counts[..me].iter().sum::<i64>() as usize;
        let rsv_in: Vec<[i64; 4]> = (0..rsv_total).map(|j| mval(me, j)).collect();
        let mut rsv_out = vec![[0i64; 4]; rsv_counts[me] as usize];
        let mut ip_ar: Vec<i64> = (0..count).map(|j| lval(me, j)).collect();
        let mut ip_a2a: Vec<i32> = (0..n).map(|j| aval(me, j, 0)).collect();
        // SAFETY: every buffer outlives the waits below and is not touched meanwhile.
        unsafe {
            reqs.push((
                "ialltoallv",
                ok(
                    coll::ialltoallv(
                        rt,
                        sp(&av_in),
                        &avs,
                        &avsd,
                        &int(),
                        pm(&mut av_out),
                        &avr,
                        &avrd,
                        &int(),
                        W,
                    ),
                    "ialltoallv",
                ),
            ));
            reqs.push((
                "iscatterv",
                ok(
                    coll::iscatterv(
                        rt,
                        p(&sv_in),
                        &sv_counts,
                        &sv_displs,
                        &int(),
                        RecvBuf::Ptr(pm(&mut sv_out)),
                        sv_counts[me],
                        &int(),
                        root as i32,
                        W,
                    ),
                    "iscatterv",
                ),
            ));
            reqs.push((
                "ireduce_scatter",
                ok(
                    coll::ireduce_scatter(
                        rt,
                        sp(&rsv_in),
                        pm(&mut rsv_out),
                        &rsv_counts,
                        &m,
                        &mop,
                        W,
                    ),
                    "ireduce_scatter",
                ),
            ));
            reqs.push((
                "iallreduce in place",
                ok(
                    coll::iallreduce(
                        rt,
                        SendBuf::InPlace,
                        pm(&mut ip_ar),
                        count as i64,
                        &long,
                        &Op::Sum,
                        W,
                    ),
                    "iallreduce in place",
                ),
            ));
            reqs.push((
                "ialltoall in place",
                ok(
                    coll::ialltoall(
                        rt,
                        SendBuf::InPlace,
                        1,
                        &int(),
                        pm(&mut ip_a2a),
                        1,
                        &int(),
                        W,
                    ),
                    "ialltoall in place",
                ),
            ));
        }
        // A blocking collective while the others are outstanding.
        let mut x = [me as i64];
        // SAFETY: one long, in place.
        ok(
            unsafe { coll::allreduce(rt, SendBuf::InPlace, pm(&mut x), 1, &long, &Op::Sum, W) },
            "allreduce amid nbc",
        );
        check!(
            x[0] == (n * (n - 1) / 2) as i64,
            "blocking allreduce amid non-blocking ones"
        );
        // Complete in reverse order of posting by polling all.
        let mut left_ = reqs.len();
        let mut spins = 0u64;
        while left_ > 0 {
            left_ = 0;
            for (name, r) in reqs.iter_mut().rev() {
                if !ok(r.test(rt), name) {
                    left_ += 1;
                }
            }
            spins += 1;
            check!(
                spins < 50_000_000,
                "non-blocking collectives do not complete"
            );
        }
        ok(
            rt.waitall("MPI_Waitall", &[Some(pr), Some(ps)]),
            "ptp waitall",
        );
        check!(
            ptp_in.iter().all(|v| *v == left as i64),
            "point-to-point amid nbc"
        );
        for i in 0..n {
            for k in 0..cnt(i, me) {
                check!(
                    av_out[avrd[i] as usize + k] == aval(i, me, k),
                    "ialltoallv from {i}"
                );
            }
        }
        check!(
            sv_out.iter().enumerate().all(|(j, v)| *v == val(me, j)),
            "iscatterv"
        );
        check!(
            rsv_out
                .iter()
                .enumerate()
                .all(|(j, v)| *v == mref(0..n, rsv_start + j)),
            "ireduce_scatter matrix order"
        );
        check!(
            ip_ar.iter().enumerate().all(|(j, v)| *v == lsum(n, j)),
            "iallreduce in place"
        );
        check!(
            (0..n).all(|i| ip_a2a[i] == aval(i, me, 0)),
            "ialltoall in place"
        );
        check!(
            bc.iter().enumerate().all(|(j, v)| *v == lval(root, j)),
            "ibcast"
        );
        check!(
            ar_out.iter().enumerate().all(|(j, v)| *v == lsum(n, j)),
            "iallreduce"
        );
        check!(
            (0..3).all(|j| mat_out[j] == mref(0..n, j)),
            "iallreduce matrix order"
        );
        if me == root {
            check!(
                red_out.iter().enumerate().all(|(j, v)| *v == lsum(n, j)),
                "ireduce"
            );
            check!((0..3 * n).all(|k| g_out[k] == val(k / 3, k % 3)), "igather");
            check!(
                (0..gv_out.len()).all(|k| {
                    let r = (0..n).rev().find(|&r| vdispls[r] as usize <= k).unwrap();
                    gv_out[k] == val(r, k - vdispls[r] as usize)
                }),
                "igatherv"
            );
        }
        check!(
            (0..3 * n).all(|k| ag_out[k] == val(k / 3, k % 3)),
            "iallgather"
        );
        check!(s_out == [val(me, 0), val(me, 1)], "iscatter");
        check!(
            (0..2 * n).all(|x| a_out[x] == aval(x / 2, me, x % 2)),
            "ialltoall"
        );
        check!(
            rs_out == [lsum(n, 2 * me), lsum(n, 2 * me + 1)],
            "ireduce_scatter_block"
        );
        check!(
            (0..2).all(|j| sc_out[j] == mref(0..me + 1, j)),
            "iscan matrix order"
        );
        if me > 0 {
            check!(
                (0..2).all(|j| ex_out[j] == mref(0..me, j)),
                "iexscan matrix order"
            );
        } else {
            check!(ex_out == vec![[9i64; 4]; 2], "iexscan touched rank 0");
        }
    }
    t.done("nbc");
}

/// Cartesian, graph and distributed-graph topologies and the neighbourhood collectives.
fn test_topo(t: &T) {
    use coll::topo;
    use tsunagi_core::PROC_NULL;
    let (me, n) = (t.me, t.n);
    let rt = t.rt;
    let mut dims = [0, 0];
    ok(topo::dims_create(n as i32, &mut dims), "dims_create");
    check!(
        dims[0] * dims[1] == n as i32 && dims[0] >= dims[1],
        "dims {dims:?}"
    );
    let cart = ok(
        topo::cart_create(rt, W, &dims, &[false, true], false),
        "cart_create",
    )
    .expect("all ranks in the grid");
    check!(
        ok(topo::topo_test(rt, cart), "topo_test") == Some(topo::TopoKind::Cart),
        "topo_test cart"
    );
    check!(
        ok(topo::topo_test(rt, W), "topo_test").is_none(),
        "world has no topology"
    );
    let c = ok(topo::cart_of(rt, "test", cart), "cart_of");
    let crank = ok(rt.comm_rank(cart), "rank") as i32;
    let coords = ok(c.coords(crank), "coords");
    check!(ok(c.rank(&coords), "rank") == crank, "cart rank/coords");
    // A dup keeps the topology.
    let dup = ok(rt.comm_dup(cart), "dup");
    check!(
        ok(topo::topo_test(rt, dup), "topo_test dup") == Some(topo::TopoKind::Cart),
        "dup keeps topology"
    );
    ok(rt.comm_free(dup), "free dup");
    // Neighbour allgather: everyone sends its rank.
    let (ins, _) = topo::Topology::Cart(c.clone()).neighbors(crank);
    let mut got = vec![-5i32; ins.len()];
    let mine = [crank];
    // SAFETY: one int out, one per neighbour in.
    ok(
        unsafe { topo::neighbor_allgather(rt, p(&mine), 1, &int(), pm(&mut got), 1, &int(), cart) },
        "neighbor_allgather",
    );
    for (k, &s) in ins.iter().enumerate() {
        check!(
            got[k] == if s == PROC_NULL { -5 } else { s },
            "neighbor_allgather slot {k}: {} from {s}",
            got[k]
        );
    }
    // Neighbour alltoall: slot k gets what the neighbour sent through its opposite slot.
    let out: Vec<i32> = (0..ins.len()).map(|k| crank * 100 + k as i32).collect();
    let mut got = vec![-5i32; ins.len()];
    // SAFETY: one int per neighbour each way.
    ok(
        unsafe { topo::neighbor_alltoall(rt, p(&out), 1, &int(), pm(&mut got), 1, &int(), cart) },
        "neighbor_alltoall",
    );
    for (k, &s) in ins.iter().enumerate() {
        let want = if s == PROC_NULL {
            -5
        } else {
            s * 100 + (k as i32 ^ 1)
        };
        check!(
            got[k] == want,
            "neighbor_alltoall slot {k} from {s}: {} want {want}",
            got[k]
        );
    }
    // The same, non-blocking, twice at once.
    let mut got1 = vec![-5i32; ins.len()];
    let mut got2 = vec![-5i32; ins.len()];
    let mine = [crank];
    // SAFETY: buffers live until both requests complete.
    let (mut r1, mut r2) = unsafe {
        (
            ok(
                topo::ineighbor_alltoall(rt, p(&out), 1, &int(), pm(&mut got1), 1, &int(), cart),
                "ineighbor_alltoall",
            ),
            ok(
                topo::ineighbor_allgather(rt, p(&mine), 1, &int(), pm(&mut got2), 1, &int(), cart),
                "ineighbor_allgather",
            ),
        )
    };
    ok(r2.wait(rt), "wait ineighbor_allgather");
    ok(r1.wait(rt), "wait ineighbor_alltoall");
    for (k, &s) in ins.iter().enumerate() {
        let want = if s == PROC_NULL {
            -5
        } else {
            s * 100 + (k as i32 ^ 1)
        };
        check!(
            got1[k] == want,
            "ineighbor_alltoall slot {k} from {s}: {} want {want}",
            got1[k]
        );
        check!(
            got2[k] == if s == PROC_NULL { -5 } else { s },
            "ineighbor_allgather slot {k}"
        );
    }
    // Rows of the grid.
    let row = ok(topo::cart_sub(rt, cart, &[false, true]), "cart_sub");
    check!(
        ok(rt.comm_size(row), "size") == dims[1] as usize,
        "cart_sub size"
    );
    let mut s = [coords[0] as i64];
    // SAFETY: one long.
    ok(
        unsafe {
            coll::allreduce(
                rt,
                SendBuf::InPlace,
                pm(&mut s),
                1,
                &b(Builtin::Long),
                &Op::Sum,
                row,
            )
        },
        "row allreduce",
    );
    check!(
        s[0] == (coords[0] * dims[1]) as i64,
        "row members share coords[0]"
    );
    ok(rt.comm_free(row), "free row");
    ok(rt.comm_free(cart), "free cart");
    // A ring as a graph.
    let index: Vec<i32> = (1..=n as i32)
        .map(|i| i * if n > 1 { 2 } else { 1 })
        .collect();
    let edges: Vec<i32> = (0..n)
        .flat_map(|r| {
            if n > 1 {
                vec![((r + n - 1) % n) as i32, ((r + 1) % n) as i32]
            } else {
                vec![0]
            }
        })
        .collect();
    let g = ok(
        topo::graph_create(rt, W, &index, &edges, false),
        "graph_create",
    )
    .expect("in graph");
    check!(
        ok(topo::topo_test(rt, g), "topo_test") == Some(topo::TopoKind::Graph),
        "topo_test graph"
    );
    let nb = ok(topo::topology(rt, g), "topology")
        .unwrap()
        .graph_neighbors(me as i32)
        .unwrap();
    let mut got = vec![-1i32; nb.len()];
    let mine = [me as i32];
    // SAFETY: one int out, one per neighbour in.
    ok(
        unsafe { topo::neighbor_allgather(rt, p(&mine), 1, &int(), pm(&mut got), 1, &int(), g) },
        "graph neighbor_allgather",
    );
    check!(got == nb, "graph neighbor_allgather {got:?} vs {nb:?}");
    ok(rt.comm_free(g), "free graph");
    // Distributed graph: rank r declares r -> r+1 with weight r.
    let d = ok(
        topo::dist_graph_create(
            rt,
            W,
            &[me as i32],
            &[1],
            &[((me + 1) % n) as i32],
            Some(&[me as i32]),
            false,
        ),
        "dist_graph_create",
    );
    match ok(topo::topology(rt, d), "topology").as_deref() {
        Some(topo::Topology::DistGraph {
            sources,
            sourceweights,
            destinations,
            destweights,
        }) => {
            let l = ((me + n - 1) % n) as i32;
            check!(
                sources == &vec![l] && destinations == &vec![((me + 1) % n) as i32],
                "dist graph edges"
            );
            check!(
                sourceweights == &Some(vec![l]) && destweights == &Some(vec![me as i32]),
                "dist graph weights"
            );
        }
        other => fail(format!("dist graph topology {other:?}")),
    }
    ok(rt.comm_free(d), "free dist graph");
    let a = ok(
        topo::dist_graph_create_adjacent(
            rt,
            W,
            &[((me + n - 1) % n) as i32],
            None,
            &[((me + 1) % n) as i32],
            None,
            false,
        ),
        "dist_graph_create_adjacent",
    );
    let out = [me as i32 * 3, me as i32 * 3 + 1];
    let mut got = [0i32; 2];
    // SAFETY: two ints each way.
    ok(
        unsafe {
            topo::neighbor_alltoallv(
                rt,
                p(&out),
                &[2],
                &[0],
                &int(),
                pm(&mut got),
                &[2],
                &[0],
                &int(),
                a,
            )
        },
        "neighbor_alltoallv",
    );
    let l = ((me + n - 1) % n) as i32;
    check!(got == [l * 3, l * 3 + 1], "neighbor_alltoallv {got:?}");
    ok(rt.comm_free(a), "free adjacent");
    // One communicator per (pretend) node.
    let node = ok(topo::split_type_shared(rt, W, 0), "split_type_shared");
    let nodes = ok(rt.comm_nodes(W), "nodes");
    check!(
        ok(rt.comm_size(node), "size") == nodes.iter().filter(|&&x| x == nodes[me]).count(),
        "split_type_shared size"
    );
    ok(rt.comm_free(node), "free node comm");
    // Errors: shift on a direction that does not exist; Cartesian query on the world.
    check!(
        matches!(topo::cart_of(rt, "MPI_Cart_get", W), Err(e) if e.class == ErrorClass::Topology),
        "cart_of world"
    );
    check!(
        matches!(c.shift_checked(0, 5, 1), Err(e) if e.class == ErrorClass::Dims),
        "shift bad dim"
    );
    t.done("topo");
}

/// Collectives on split communicators (interleaved ranks, so node maps of the halves are
/// irregular), with every algorithm, and on a duplicate of the world at the same time.
fn test_subcomm(t: &T) {
    let (me, n) = (t.me, t.n);
    let rt = t.rt;
    let sub = ok(rt.comm_split(W, (me % 2) as i32, (n - me) as i32), "split").expect("member");
    let dup = ok(rt.comm_dup(W), "dup");
    let (sr, sn) = (ok(rt.comm_rank(sub), "rank"), ok(rt.comm_size(sub), "size"));
    // World ranks of the sub-communicator's members, in sub rank order (reversed keys).
    let members: Vec<usize> = (0..n).rev().filter(|r| r % 2 == me % 2).collect();
    check!(members[sr] == me && members.len() == sn, "split order");
    let long = b(Builtin::Long);
    for c in [
        Coll::Allreduce,
        Coll::Bcast,
        Coll::Allgather,
        Coll::Alltoall,
        Coll::Barrier,
        Coll::Reduce,
    ] {
        each_alg(c, |a| {
            let count = 777usize;
            let send: Vec<i64> = (0..count).map(|j| lval(me, j)).collect();
            let mut recv = vec![0i64; count];
            let mut other = vec![0i64; count];
            // SAFETY (all calls): buffers sized for the calls.
            unsafe {
                match c {
                    Coll::Allreduce | Coll::Reduce => {
                        if c == Coll::Allreduce {
                            ok(
                                coll::allreduce(
                                    rt,
                                    sp(&send),
                                    pm(&mut recv),
                                    count as i64,
                                    &long,
                                    &Op::Sum,
                                    sub,
                                ),
                                a,
                            );
                        } else {
                            ok(
                                coll::reduce(
                                    rt,
                                    sp(&send),
                                    pm(&mut recv),
                                    count as i64,
                                    &long,
                                    &Op::Sum,
                                    (sn - 1) as i32,
                                    sub,
                                ),
                                a,
                            );
                        }
                        ok(
                            coll::allreduce(
                                rt,
                                sp(&send),
                                pm(&mut other),
                                count as i64,
                                &long,
                                &Op::Sum,
                                dup,
                            ),
                            a,
                        );
                        if c == Coll::Allreduce || sr == sn - 1 {
                            check!(
                                recv.iter()
                                    .enumerate()
                                    .all(|(j, v)| *v
                                        == members.iter().map(|&r| lval(r, j)).sum::<i64>()),
                                "sub {c:?} {a}"
                            );
                        }
                        check!(
                            other.iter().enumerate().all(|(j, v)| *v == lsum(n, j)),
                            "dup allreduce amid {a}"
                        );
                    }
                    Coll::Bcast => {
                        let mut buf = if sr == 0 {
                            send.clone()
                        } else {
                            vec![0; count]
                        };
                        ok(
                            coll::bcast(rt, pm(&mut buf), count as i64, &long, 0, sub),
                            a,
                        );
                        check!(
                            buf.iter()
                                .enumerate()
                                .all(|(j, v)| *v == lval(members[0], j)),
                            "sub bcast {a}"
                        );
                    }
                    Coll::Allgather => {
                        let mut g = vec![0i64; 3 * sn];
                        ok(
                            coll::allgather(
                                rt,
                                sp(&send[..3]),
                                3,
                                &long,
                                pm(&mut g),
                                3,
                                &long,
                                sub,
                            ),
                            a,
                        );
                        check!(
                            (0..3 * sn).all(|k| g[k] == lval(members[k / 3], k % 3)),
                            "sub allgather {a}"
                        );
                    }
                    Coll::Alltoall => {
                        let s2: Vec<i32> = (0..sn).map(|j| aval(me, members[j], 0)).collect();
                        let mut r2 = vec![0i32; sn];
                        ok(
                            coll::alltoall(rt, sp(&s2), 1, &int(), pm(&mut r2), 1, &int(), sub),
                            a,
                        );
                        check!(
                            (0..sn).all(|i| r2[i] == aval(members[i], me, 0)),
                            "sub alltoall {a}"
                        );
                    }
                    _ => ok(coll::barrier(rt, sub), a),
                }
            }
        });
    }
    ok(rt.comm_free(sub), "free sub");
    ok(rt.comm_free(dup), "free dup");
    t.done("subcomm");
}

/// Random sequences: every rank draws the same collective, algorithm, counts, root and
/// in-place choice from a seeded generator, so algorithms meet in varied orders and
/// sizes (messages of one collective must never match another's).
fn test_random(t: &T) {
    let (me, n) = (t.me, t.n);
    let rt = t.rt;
    let long = b(Builtin::Long);
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut rnd = |k: usize| -> usize {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % k as u64) as usize
    };
    let pick = |c: Coll, r: usize| -> &'static str {
        let a = c.algorithms();
        if r % (a.len() + 1) == a.len() {
            "auto"
        } else {
            a[r % (a.len() + 1)]
        }
    };
    // Non-blocking allreduces started now and then and completed some steps later,
    // across the blocking collectives: (request, send, receive, iteration).
    type Pending = (coll::CollRequest, Vec<i64>, Vec<i64>, usize);
    let mut pending: Vec<Pending> = Vec::new();
    let finish = |p: Pending| {
        let (mut req, _send, recv, it) = p;
        ok(req.wait(rt), "iallreduce wait");
        check!(
            recv.iter()
                .enumerate()
                .all(|(j, v)| *v == (0..n).map(|q| lval(q, j) * it as i64).sum::<i64>()),
            "random iallreduce #{it}"
        );
    };
    for it in 0..big(400) {
        if rnd(4) == 0 {
            let c = [1usize, 40, 2000][rnd(3)];
            let send: Vec<i64> = (0..c).map(|j| lval(me, j) * it as i64).collect();
            let mut recv = vec![0i64; c];
            // SAFETY: both vectors move into `pending` (their heap buffers stay put) and
            // live until the request completes.
            let req = ok(
                unsafe {
                    coll::iallreduce(rt, sp(&send), pm(&mut recv), c as i64, &long, &Op::Sum, W)
                },
                "iallreduce",
            );
            pending.push((req, send, recv, it));
        }
        if !pending.is_empty() && rnd(3) == 0 {
            let k = rnd(pending.len());
            finish(pending.remove(k));
        }
        let kind = rnd(6);
        let count = [0usize, 1, 3, 17, 256, 3000][rnd(6)];
        let root = rnd(n);
        let in_place = rnd(2) == 1;
        let r = rnd(1000);
        let what =
            format!("random #{it} kind {kind} count {count} root {root} in_place {in_place}");
        let send: Vec<i64> = (0..count).map(|j| lval(me, j) ^ it as i64).collect();
        let want = |j: usize| (0..n).map(|q| lval(q, j) ^ it as i64).sum::<i64>();
        // SAFETY (all arms): buffers are sized for each call.
        unsafe {
            match kind {
                0 => select::with_algorithm(Coll::Allreduce, pick(Coll::Allreduce, r), || {
                    let mut recv = if in_place {
                        send.clone()
                    } else {
                        vec![0; count]
                    };
                    let sb = if in_place {
                        SendBuf::InPlace
                    } else {
                        sp(&send)
                    };
                    ok(
                        coll::allreduce(rt, sb, pm(&mut recv), count as i64, &long, &Op::Sum, W),
                        &what,
                    );
                    check!(
                        recv.iter().enumerate().all(|(j, v)| *v == want(j)),
                        "{what}"
                    );
                }),
                1 => select::with_algorithm(Coll::Reduce, pick(Coll::Reduce, r), || {
                    let ip = in_place && me == root;
                    let mut recv = if ip { send.clone() } else { vec![0; count] };
                    let sb = if ip { SendBuf::InPlace } else { sp(&send) };
                    ok(
                        coll::reduce(
                            rt,
                            sb,
                            pm(&mut recv),
                            count as i64,
                            &long,
                            &Op::Sum,
                            root as i32,
                            W,
                        ),
                        &what,
                    );
                    if me == root {
                        check!(
                            recv.iter().enumerate().all(|(j, v)| *v == want(j)),
                            "{what}"
                        );
                    }
                }),
                2 => select::with_algorithm(Coll::Bcast, pick(Coll::Bcast, r), || {
                    let mut buf = if me == root {
                        send.clone()
                    } else {
                        vec![0; count]
                    };
                    ok(
                        coll::bcast(rt, pm(&mut buf), count as i64, &long, root as i32, W),
                        &what,
                    );
                    check!(
                        buf.iter()
                            .enumerate()
                            .all(|(j, v)| *v == lval(root, j) ^ it as i64),
                        "{what}"
                    );
                }),
                3 => select::with_algorithm(Coll::Allgather, pick(Coll::Allgather, r), || {
                    let counts: Vec<i64> =
                        (0..n).map(|q| ((q + it) % 3 * count / 2) as i64).collect();
                    let displs: Vec<i64> = (0..n).map(|q| counts[..q].iter().sum()).collect();
                    let mut recv = vec![0i64; counts.iter().sum::<i64>() as usize];
                    ok(
                        coll::allgatherv(
                            rt,
                            sp(&send),
                            counts[me],
                            &long,
                            pm(&mut recv),
                            &counts,
                            &displs,
                            &long,
                            W,
                        ),
                        &what,
                    );
                    for q in 0..n {
                        for j in 0..counts[q] as usize {
                            check!(
                                recv[displs[q] as usize + j] == lval(q, j) ^ it as i64,
                                "{what}"
                            );
                        }
                    }
                }),
                4 => select::with_algorithm(Coll::Alltoall, pick(Coll::Alltoall, r), || {
                    let c = count.min(300);
                    let s2: Vec<i32> = (0..n * c)
                        .map(|x| aval(me, x / c.max(1), x % c.max(1)) ^ it as i32)
                        .collect();
                    let mut r2 = if in_place {
                        s2.clone()
                    } else {
                        vec![0i32; n * c]
                    };
                    let sb = if in_place { SendBuf::InPlace } else { sp(&s2) };
                    ok(
                        coll::alltoall(rt, sb, c as i64, &int(), pm(&mut r2), c as i64, &int(), W),
                        &what,
                    );
                    check!(
                        (0..n * c).all(|x| r2[x] == aval(x / c, me, x % c) ^ it as i32),
                        "{what}"
                    );
                }),
                _ => select::with_algorithm(Coll::Scan, pick(Coll::Scan, r), || {
                    let mut recv = if in_place {
                        send.clone()
                    } else {
                        vec![0; count]
                    };
                    let sb = if in_place {
                        SendBuf::InPlace
                    } else {
                        sp(&send)
                    };
                    ok(
                        coll::scan(rt, sb, pm(&mut recv), count as i64, &long, &Op::Sum, W),
                        &what,
                    );
                    let pre = |j: usize| (0..=me).map(|q| lval(q, j) ^ it as i64).sum::<i64>();
                    check!(recv.iter().enumerate().all(|(j, v)| *v == pre(j)), "{what}");
                }),
            }
            .unwrap();
        }
    }
    for p in pending {
        finish(p);
    }
    t.done("random");
}

fn sb_of<T>(in_place: bool, v: &[T]) -> SendBuf {
    if in_place {
        SendBuf::InPlace
    } else {
        sp(v)
    }
}

fn test_errors(t: &T) {
    let n = t.n as i32;
    let mut x = [0i32; 4];
    let y = [0i32; 4];
    let cls = |r: tsunagi_core::MpiResult<()>| r.err().map(|e| (e.class, e.message));
    // SAFETY (all calls): they fail their argument checks before touching the buffers.
    unsafe {
        let e = cls(coll::bcast(t.rt, pm(&mut x), 4, &int(), n, W));
        check!(
            matches!(&e, Some((ErrorClass::Root, m)) if m.starts_with("MPI_Bcast")),
            "bcast bad root: {e:?}"
        );
        let e = cls(coll::reduce(
            t.rt,
            sp(&y),
            pm(&mut x),
            4,
            &int(),
            &Op::Sum,
            -1,
            W,
        ));
        check!(
            matches!(&e, Some((ErrorClass::Root, m)) if m.starts_with("MPI_Reduce")),
            "reduce bad root: {e:?}"
        );
        let e = cls(coll::bcast(t.rt, pm(&mut x), -1, &int(), 0, W));
        check!(
            matches!(&e, Some((ErrorClass::Count, _))),
            "bcast negative count: {e:?}"
        );
        let e = cls(coll::allreduce(
            t.rt,
            sp(&y),
            pm(&mut x),
            4,
            &b(Builtin::Byte),
            &Op::Sum,
            W,
        ));
        check!(
            matches!(&e, Some((ErrorClass::Op, m)) if m.starts_with("MPI_Allreduce")),
            "SUM on BYTE: {e:?}"
        );
        let e = cls(coll::allreduce(
            t.rt,
            sp(&y),
            pm(&mut x),
            2,
            &int(),
            &Op::Maxloc,
            W,
        ));
        check!(
            matches!(&e, Some((ErrorClass::Op, _))),
            "MAXLOC on INT: {e:?}"
        );
        let e = cls(coll::gather(
            t.rt,
            sp(&y),
            -2,
            &int(),
            pm(&mut x),
            1,
            &int(),
            0,
            W,
        ));
        check!(
            matches!(&e, Some((ErrorClass::Count, _))),
            "gather negative count: {e:?}"
        );
        let e = cls(coll::barrier(t.rt, CommId(9999)));
        check!(
            matches!(&e, Some((ErrorClass::Comm, m)) if m.starts_with("MPI_Barrier")),
            "barrier bad comm: {e:?}"
        );
        let e = cls(coll::reduce_local(
            p(&y),
            pm(&mut x),
            4,
            &b(Builtin::Float),
            &Op::Band,
        ));
        check!(
            matches!(&e, Some((ErrorClass::Op, m)) if m.starts_with("MPI_Reduce_local")),
            "BAND on FLOAT: {e:?}"
        );
    }
    // NULL buffers with zero counts are legal everywhere.
    let nul = std::ptr::null_mut::<u8>();
    let ns = SendBuf::Ptr(nul);
    let zeros = vec![0i64; t.n];
    let l = b(Builtin::Long);
    // SAFETY: every call moves zero bytes.
    unsafe {
        ok(coll::bcast(t.rt, nul, 0, &l, 0, W), "null bcast");
        ok(
            coll::gather(t.rt, ns, 0, &l, nul, 0, &l, 0, W),
            "null gather",
        );
        ok(
            coll::scatter(t.rt, nul, 0, &l, RecvBuf::Ptr(nul), 0, &l, 0, W),
            "null scatter",
        );
        ok(
            coll::allgather(t.rt, ns, 0, &l, nul, 0, &l, W),
            "null allgather",
        );
        ok(
            coll::allgatherv(t.rt, ns, 0, &l, nul, &zeros, &zeros, &l, W),
            "null allgatherv",
        );
        ok(
            coll::alltoall(t.rt, ns, 0, &l, nul, 0, &l, W),
            "null alltoall",
        );
        ok(
            coll::alltoallv(t.rt, ns, &zeros, &zeros, &l, nul, &zeros, &zeros, &l, W),
            "null alltoallv",
        );
        ok(
            coll::reduce(t.rt, ns, nul, 0, &l, &Op::Sum, 0, W),
            "null reduce",
        );
        ok(
            coll::allreduce(t.rt, ns, nul, 0, &l, &Op::Sum, W),
            "null allreduce",
        );
        ok(
            coll::allreduce(t.rt, ns, nul, 0, &strided(), &Op::Sum, W),
            "null allreduce strided",
        );
        ok(
            coll::reduce_scatter_block(t.rt, ns, nul, 0, &l, &Op::Sum, W),
            "null reduce_scatter_block",
        );
        ok(coll::scan(t.rt, ns, nul, 0, &l, &Op::Sum, W), "null scan");
        ok(
            coll::exscan(t.rt, ns, nul, 0, &l, &Op::Sum, W),
            "null exscan",
        );
        let mut r = ok(
            coll::iallreduce(t.rt, ns, nul, 0, &l, &Op::Sum, W),
            "null iallreduce",
        );
        ok(r.wait(t.rt), "null iallreduce wait");
    }
    // An uncommitted datatype is a type error.
    let unc: TypeRef = Arc::new(Datatype::contiguous(2, &int()).unwrap());
    // SAFETY: fails its argument check before touching the buffer.
    let e = unsafe { coll::bcast(t.rt, pm(&mut x), 1, &unc, 0, W) }
        .err()
        .map(|e| e.class);
    check!(e == Some(ErrorClass::Type), "uncommitted type: {e:?}");
    t.done("errors");
}

/// The algorithm forced through the environment is the one used.
/// One call each of barrier, bcast (root 0), allreduce and reduce (root size - 1) of
/// `count` longs on `comm`, with their results checked.
fn four_calls(t: &T, comm: CommId, count: usize, what: &str) {
    let rt = t.rt;
    let (me, n) = (
        ok(rt.comm_rank(comm), "rank"),
        ok(rt.comm_size(comm), "size"),
    );
    let long = b(Builtin::Long);
    ok(coll::barrier(rt, comm), what);
    let mut buf: Vec<i64> = (0..count)
        .map(|j| if me == 0 { lval(7, j) } else { -1 })
        .collect();
    let send: Vec<i64> = (0..count).map(|j| lval(me, j)).collect();
    let mut recv = vec![0i64; count];
    let mut red = vec![0i64; count];
    // SAFETY: every buffer holds `count` longs.
    unsafe {
        ok(
            coll::bcast(rt, pm(&mut buf), count as i64, &long, 0, comm),
            what,
        );
        ok(
            coll::allreduce(
                rt,
                sp(&send),
                pm(&mut recv),
                count as i64,
                &long,
                &Op::Sum,
                comm,
            ),
            what,
        );
        ok(
            coll::reduce(
                rt,
                sp(&send),
                pm(&mut red),
                count as i64,
                &long,
                &Op::Sum,
                (n - 1) as i32,
                comm,
            ),
            what,
        );
    }
    check!(
        buf.iter().enumerate().all(|(j, v)| *v == lval(7, j)),
        "{what}: bcast"
    );
    check!(
        recv.iter().enumerate().all(|(j, v)| *v == lsum(n, j)),
        "{what}: allreduce"
    );
    if me == n - 1 {
        check!(
            red.iter().enumerate().all(|(j, v)| *v == lsum(n, j)),
            "{what}: reduce"
        );
    }
}

/// `f` with `alg` forced for every family of `fams`.
fn with_all(fams: &[Coll], alg: &str, f: &dyn Fn() -> u64) -> u64 {
    match fams.split_first() {
        None => f(),
        Some((c, rest)) => select::with_algorithm(*c, alg, || with_all(rest, alg, f)).unwrap(),
    }
}

/// One call each of gather (root size - 1), scatter (root 0), allgather, alltoall,
/// reduce_scatter_block, scan and exscan with blocks of `count` longs on `comm`, with
/// their results checked (the families the area took over after the first four).
fn seven_calls(t: &T, comm: CommId, count: usize, what: &str) {
    let rt = t.rt;
    let (me, n) = (
        ok(rt.comm_rank(comm), "rank"),
        ok(rt.comm_size(comm), "size"),
    );
    let long = b(Builtin::Long);
    let c = count as i64;
    // Block j of rank r's vectors: lval(r * n + j, k).
    let mine: Vec<i64> = (0..count).map(|k| lval(me, k)).collect();
    let blocks = |r: usize| -> Vec<i64> {
        (0..n)
            .flat_map(|j| (0..count).map(move |k| lval(r * n + j, k)))
            .collect()
    };
    let send_all = blocks(me);
    let mut gathered = vec![0i64; n * count];
    let mut part = vec![0i64; count];
    let mut all = vec![0i64; n * count];
    let mut a2a = vec![0i64; n * count];
    let mut rsb = vec![0i64; count];
    let mut sc = vec![0i64; count];
    let mut ex = vec![-5i64; count];
    let root = n - 1;
    // SAFETY: every buffer holds what its call reads or writes.
    unsafe {
        ok(
            coll::gather(
                rt,
                sp(&mine),
                c,
                &long,
                pm(&mut gathered),
                c,
                &long,
                root as i32,
                comm,
            ),
            what,
        );
        ok(
            coll::scatter(
                rt,
                p(&send_all),
                c,
                &long,
                RecvBuf::Ptr(pm(&mut part)),
                c,
                &long,
                0,
                comm,
            ),
            what,
        );
        ok(
            coll::allgather(rt, sp(&mine), c, &long, pm(&mut all), c, &long, comm),
            what,
        );
        ok(
            coll::alltoall(rt, sp(&send_all), c, &long, pm(&mut a2a), c, &long, comm),
            what,
        );
        ok(
            coll::reduce_scatter_block(rt, sp(&send_all), pm(&mut rsb), c, &long, &Op::Sum, comm),
            what,
        );
        ok(
            coll::scan(rt, sp(&mine), pm(&mut sc), c, &long, &Op::Sum, comm),
            what,
        );
        ok(
            coll::exscan(rt, sp(&mine), pm(&mut ex), c, &long, &Op::Sum, comm),
            what,
        );
    }
    let by_rank: Vec<i64> = (0..n)
        .flat_map(|r| (0..count).map(move |k| lval(r, k)))
        .collect();
    if me == root {
        check!(gathered == by_rank, "{what}: gather");
    }
    check!(
        part == blocks(0)[me * count..(me + 1) * count],
        "{what}: scatter"
    );
    check!(all == by_rank, "{what}: allgather");
    let want: Vec<i64> = (0..n)
        .flat_map(|r| blocks(r)[me * count..(me + 1) * count].to_vec())
        .collect();
    check!(a2a == want, "{what}: alltoall");
    let want: Vec<i64> = (0..count)
        .map(|k| (0..n).map(|r| lval(r * n + me, k)).sum())
        .collect();
    check!(rsb == want, "{what}: reduce_scatter_block");
    let want: Vec<i64> = (0..count)
        .map(|k| (0..=me).map(|r| lval(r, k)).sum())
        .collect();
    check!(sc == want, "{what}: scan");
    if me > 0 {
        let want: Vec<i64> = (0..count)
            .map(|k| (0..me).map(|r| lval(r, k)).sum())
            .collect();
        check!(ex == want, "{what}: exscan");
    } else {
        check!(
            ex.iter().all(|&x| x == -5),
            "{what}: exscan touched rank 0's buffer"
        );
    }
}

/// The shared-memory fast path is taken where it should be (one node, 2 to 8 ranks
/// automatically, up to 16 when forced, messages up to 8 KiB) and nowhere else, forcing
/// another algorithm turns it off, and freed communicators leave no mapping behind.
fn test_shm(t: &T) {
    let rt = t.rt;
    let n = t.n;
    let nodes = ok(rt.comm_nodes(W), "nodes");
    let one_node = nodes.iter().all(|&x| x == nodes[0]);
    // Across pretend nodes with several ranks on one at least, the small barrier,
    // allreduce and alltoall run their node steps on a node communicator's area (two
    // calls each) when this rank's node has 2 to 8 ranks.
    let mut ids = nodes.to_vec();
    ids.sort_unstable();
    ids.dedup();
    let local = nodes.iter().filter(|&&x| x == nodes[t.me]).count();
    // Not across sites: there the site algorithms apply, not the node split.
    let sites = rt.site_map();
    let one_site = sites.iter().all(|s| Some(s) == sites.first());
    let split = one_site && ids.len() > 1 && ids.len() < n && (2..=8).contains(&local);
    let fams = [Coll::Barrier, Coll::Bcast, Coll::Allreduce, Coll::Reduce];
    let served = |f: &dyn Fn()| {
        let before = coll::shared_memory_calls();
        f();
        coll::shared_memory_calls() - before
    };
    let auto_on = one_node && (2..=8).contains(&n);
    let took = served(&|| four_calls(t, W, 3, "shm auto"));
    check!(
        took == if auto_on || split { 4 } else { 0 },
        "auto: {took} calls on the area"
    );
    // 2000 longs: only the barrier fits.
    let took = served(&|| four_calls(t, W, 2000, "shm large"));
    check!(
        took == u64::from(auto_on) + if split { 2 } else { 0 },
        "large: {took} calls on the area"
    );
    // Forced off, family by family.
    for (i, f) in fams.iter().enumerate() {
        let off = f.algorithms()[0];
        let took =
            select::with_algorithm(*f, off, || served(&|| four_calls(t, W, 3, off))).unwrap();
        // Split: the barrier's gather and bcast, the allreduce's reduce and bcast, less
        // the calls of the family forced off.
        let want = match (auto_on, split, f) {
            (true, _, _) => 3,
            (false, true, Coll::Reduce) => 3,
            (false, true, _) => 2,
            (false, false, _) => 0,
        };
        check!(
            took == want,
            "{f:?} forced to {off} (#{i}): {took} calls on the area"
        );
    }
    // Forced on everywhere it can run (up to 16 ranks on one node).
    let forced_on = one_node && (2..=16).contains(&n);
    let took = select::with_algorithm(Coll::Barrier, "shm", || {
        select::with_algorithm(Coll::Bcast, "shm", || {
            select::with_algorithm(Coll::Allreduce, "shm", || {
                select::with_algorithm(Coll::Reduce, "shm", || {
                    served(&|| four_calls(t, W, 5, "shm forced"))
                })
            })
        })
    })
    .unwrap()
    .unwrap()
    .unwrap()
    .unwrap();
    check!(
        took == if forced_on { 4 } else { 0 },
        "forced: {took} calls on the area"
    );
    // Communicators made, used and freed: each got its own area, and each area is gone
    // with its communicator (the mapping shows as /memfd:tsunagi-coll in our maps).
    let mappings = || {
        std::fs::read_to_string("/proc/self/maps")
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("tsunagi-coll"))
            .count()
    };
    let m0 = mappings();
    check!(!auto_on || m0 == 1, "MPI_COMM_WORLD's area: {m0} mappings");
    for i in 0..12 {
        let c = if i % 2 == 0 {
            ok(rt.comm_dup(W), "dup")
        } else {
            ok(rt.comm_split(W, (t.me % 2) as i32, 0), "split").expect("member")
        };
        four_calls(t, c, 1 + i, "shm sub-communicator");
        if i == 0 {
            let m = mappings();
            check!(
                m == m0 + usize::from(auto_on || split),
                "dup's area: {m} mappings, {m0} before"
            );
        }
        ok(rt.comm_free(c), "free");
        check!(
            mappings() == m0,
            "after free #{i}: {} mappings, {m0} before",
            mappings()
        );
    }
    // The other families: on the area when small (a slot holds every block a rank
    // posts), not when large, not when forced to another algorithm, forced on up to 16.
    let more = [
        Coll::Gather,
        Coll::Scatter,
        Coll::Allgather,
        Coll::Alltoall,
        Coll::ReduceScatter,
        Coll::Scan,
    ];
    let took = served(&|| seven_calls(t, W, 3, "shm auto (more)"));
    check!(
        took == if auto_on {
            7
        } else if split {
            2
        } else {
            0
        },
        "auto (more): {took} calls on the area"
    );
    // 1100 longs per block: gather and allgather still fit (8800 bytes do not: none).
    let took = served(&|| seven_calls(t, W, 1100, "shm large (more)"));
    check!(took == 0, "large (more): {took} calls on the area");
    // 1000 longs (8000 bytes) per block: gather, allgather, scan and exscan fit, the
    // others (n blocks per slot) do not.
    let took = served(&|| seven_calls(t, W, 1000, "shm 8000 bytes (more)"));
    check!(
        took == if auto_on { 4 } else { 0 },
        "8000 bytes (more): {took} calls on the area"
    );
    for f in more {
        let off = f.algorithms()[0];
        let took =
            select::with_algorithm(f, off, || served(&|| seven_calls(t, W, 2, off))).unwrap();
        // Split: the alltoall's gather and scatter (not its own when forced off).
        let want = match (auto_on, split, f) {
            (false, false, _) => 0,
            (false, true, Coll::Alltoall) => 0,
            (false, true, Coll::Gather | Coll::Scatter) => 1,
            (false, true, _) => 2,
            (true, _, Coll::Scan) => 5,
            (true, _, _) => 6,
        };
        check!(
            took == want,
            "{f:?} forced to {off}: {took} calls on the area"
        );
    }
    let took = with_all(&more, "shm", &|| {
        served(&|| seven_calls(t, W, 2, "shm forced (more)"))
    });
    check!(
        took == if forced_on { 7 } else { 0 },
        "forced (more): {took} calls on the area"
    );
    // Sub-communicators (a new area each, with its own sequence numbers) mixed with the
    // world's.
    for i in 0..3 {
        let c = ok(rt.comm_split(W, (t.me % 2) as i32, -(t.me as i32)), "split").expect("member");
        seven_calls(t, c, 1 + i, "shm sub-communicator (more)");
        seven_calls(t, W, 2 + i, "shm world between (more)");
        four_calls(t, c, 1 + i, "shm sub-communicator (mixed)");
        ok(rt.comm_free(c), "free");
    }
    shm_v_forms(t, W, "world");
    let c = ok(rt.comm_split(W, (t.me % 2) as i32, -(t.me as i32)), "split").expect("member");
    shm_v_forms(t, c, "split");
    ok(rt.comm_free(c), "free");
    t.done("shm");
}

/// The v forms on the area (gatherv, scatterv, allgatherv, reduce_scatter; every root,
/// in place where allowed), contiguous and strided, with uneven counts (zeros among them)
/// and, in the `large` round, some blocks too large for a slot (gatherv and scatterv then
/// move them by point-to-point, allgatherv and reduce_scatter go the ordinary way).
fn shm_v_forms(t: &T, comm: CommId, what: &str) {
    let rt = t.rt;
    let me = ok(rt.comm_rank(comm), "rank");
    let n = ok(rt.comm_size(comm), "size");
    // (type, ints per element, data ints of element k)
    type Kind = (TypeRef, usize, fn(usize) -> [usize; 2], usize);
    let kinds: [Kind; 2] = [
        (int(), 1, |k| [k, usize::MAX], 1),
        (strided(), 4, |k| [4 * k, 4 * k + 2], 2),
    ];
    for large in [false, true] {
        let counts: Vec<i64> = (0..n)
            .map(|r| {
                if large && r % 2 == 1 {
                    2100
                } else {
                    ((r + 1) % 3) as i64 * 3
                }
            })
            .collect();
        // Blocks in reverse rank order with a one-element gap after each.
        let mut displs = vec![0i64; n];
        let mut acc = 0;
        for r in (0..n).rev() {
            displs[r] = acc;
            acc += counts[r] + 1;
        }
        for (ty, w, at, per) in &kinds {
            let (w, per) = (*w, *per);
            let data = |k: usize| at(k).into_iter().take(per).collect::<Vec<_>>();
            // A block of `c` elements of rank r's data at element `d` of `buf`.
            let fill = |buf: &mut [i32], d: usize, c: usize, r: usize| {
                for k in 0..c {
                    for (i, x) in data(d + k).into_iter().enumerate() {
                        buf[x] = val(r, k * per + i);
                    }
                }
            };
            let holds = |buf: &[i32], d: usize, c: usize, r: usize| {
                (0..c).all(|k| {
                    data(d + k)
                        .into_iter()
                        .enumerate()
                        .all(|(i, x)| buf[x] == val(r, k * per + i))
                })
            };
            let untouched = |buf: &[i32], d: usize, v: i32| {
                (0..w).all(|i| buf[d * w + i] == v || !data(d).contains(&(d * w + i)))
            };
            let len = acc as usize * w;
            let mine = counts[me] as usize;
            let mut send = vec![-1i32; mine.max(1) * w];
            fill(&mut send, 0, mine, me);
            for root in [0, n - 1, n / 2] {
                for in_place in [false, true] {
                    // Gatherv.
                    let mut recv = vec![-3i32; len];
                    let ip = in_place && me == root;
                    if ip {
                        fill(&mut recv, displs[me] as usize, mine, me);
                    }
                    let sb = if ip { SendBuf::InPlace } else { sp(&send) };
                    // SAFETY: buffers sized for the call.
                    ok(
                        unsafe {
                            coll::gatherv(
                                rt,
                                sb,
                                counts[me],
                                ty,
                                pm(&mut recv),
                                &counts,
                                &displs,
                                ty,
                                root as i32,
                                comm,
                            )
                        },
                        "gatherv (area)",
                    );
                    if me == root {
                        for r in 0..n {
                            let (d, c) = (displs[r] as usize, counts[r] as usize);
                            check!(holds(&recv, d, c, r), "{what} gatherv root {root} from {r}");
                            check!(untouched(&recv, d + c, -3), "{what} gatherv gap");
                        }
                    }
                    // Scatterv (the root's blocks are those gatherv assembled).
                    let mut all = vec![-5i32; len];
                    for r in 0..n {
                        fill(&mut all, displs[r] as usize, counts[r] as usize, r);
                    }
                    let mut got = vec![-4i32; mine.max(1) * w];
                    let rb = if ip {
                        RecvBuf::InPlace
                    } else {
                        RecvBuf::Ptr(pm(&mut got))
                    };
                    // SAFETY: buffers sized for the call.
                    ok(
                        unsafe {
                            coll::scatterv(
                                rt,
                                p(&all),
                                &counts,
                                &displs,
                                ty,
                                rb,
                                counts[me],
                                ty,
                                root as i32,
                                comm,
                            )
                        },
                        "scatterv (area)",
                    );
                    if !ip {
                        check!(holds(&got, 0, mine, me), "{what} scatterv root {root}");
                        let mut placed = vec![false; got.len()];
                        for x in (0..mine).flat_map(data) {
                            placed[x] = true;
                        }
                        check!(
                            (0..got.len()).all(|x| placed[x] || got[x] == -4),
                            "{what} scatterv gap"
                        );
                    }
                }
            }
            // Allgatherv, in place or not.
            for in_place in [false, true] {
                let mut recv = vec![-3i32; len];
                if in_place {
                    fill(&mut recv, displs[me] as usize, mine, me);
                }
                let sb = if in_place {
                    SendBuf::InPlace
                } else {
                    sp(&send)
                };
                // SAFETY: buffers sized for the call.
                ok(
                    unsafe {
                        coll::allgatherv(
                            rt,
                            sb,
                            counts[me],
                            ty,
                            pm(&mut recv),
                            &counts,
                            &displs,
                            ty,
                            comm,
                        )
                    },
                    "allgatherv (area)",
                );
                for r in 0..n {
                    let (d, c) = (displs[r] as usize, counts[r] as usize);
                    check!(
                        holds(&recv, d, c, r),
                        "{what} allgatherv {in_place} from {r}"
                    );
                    check!(untouched(&recv, d + c, -3), "{what} allgatherv gap");
                }
            }
        }
        // Reduce_scatter of longs (sum), uneven counts, in place or not.
        let long = b(Builtin::Int64);
        let total: usize = counts.iter().map(|&c| c as usize).sum();
        let at: usize = counts[..me].iter().map(|&c| c as usize).sum();
        for in_place in [false, true] {
            let input: Vec<i64> = (0..total).map(|j| lval(me, j)).collect();
            let mut recv = if in_place {
                input.clone()
            } else {
                vec![-9i64; counts[me] as usize + 1]
            };
            let sb = if in_place {
                SendBuf::InPlace
            } else {
                sp(&input)
            };
            // SAFETY: buffers sized for the call.
            ok(
                unsafe {
                    coll::reduce_scatter(rt, sb, pm(&mut recv), &counts, &long, &Op::Sum, comm)
                },
                "reduce_scatter (area)",
            );
            for j in 0..counts[me] as usize {
                check!(
                    recv[j] == lsum(n, at + j),
                    "{what} reduce_scatter {in_place} [{j}]"
                );
            }
            if !in_place {
                check!(recv[counts[me] as usize] == -9, "{what} reduce_scatter gap");
            }
        }
    }
}

/// `pace` (only when asked): 2000 allreduces of one double, checked, then rank 0 prints
/// `PACE allreduce <seconds>` (the slowest rank's time) for the test to compare jobs.
fn test_pace(t: &T) {
    let dbl = b(Builtin::Double);
    let send = [t.me as f64];
    let mut recv = [0f64];
    let want = (t.n * (t.n - 1) / 2) as f64;
    ok(coll::barrier(t.rt, W), "barrier");
    let start = t.rt.wtime();
    for i in 0..2000 {
        // SAFETY: one double each side.
        ok(
            unsafe { coll::allreduce(t.rt, sp(&send), pm(&mut recv), 1, &dbl, &Op::Sum, W) },
            "allreduce",
        );
        check!(recv[0] == want, "pace allreduce {i}: {} != {want}", recv[0]);
    }
    let mine = [t.rt.wtime() - start];
    let mut slowest = [0f64];
    // SAFETY: one double each side.
    ok(
        unsafe { coll::allreduce(t.rt, sp(&mine), pm(&mut slowest), 1, &dbl, &Op::Max, W) },
        "allreduce max",
    );
    if t.me == 0 {
        println!("PACE allreduce {:.6}", slowest[0]);
    }
    t.done("pace");
}

fn test_env(t: &T) {
    for c in Coll::ALL {
        if let Ok(v) = std::env::var(c.env_var()) {
            let got = select::forced(c).map(|i| c.algorithms()[i]);
            check!(
                got == Some(v.as_str()),
                "{}={v} but forced is {got:?}",
                c.env_var()
            );
        }
    }
    // Run the families once each with the environment's choice.
    let mut buf = vec![t.me as i64; 100];
    // SAFETY: buffer of 100 longs.
    ok(
        unsafe { coll::bcast(t.rt, pm(&mut buf), 100, &b(Builtin::Long), 0, W) },
        "env bcast",
    );
    check!(buf.iter().all(|x| *x == 0), "env bcast");
    let mut s = vec![1i64; 100];
    // SAFETY: buffer of 100 longs.
    ok(
        unsafe {
            coll::allreduce(
                t.rt,
                SendBuf::InPlace,
                pm(&mut s),
                100,
                &b(Builtin::Long),
                &Op::Sum,
                W,
            )
        },
        "env allreduce",
    );
    check!(s.iter().all(|x| *x == t.n as i64), "env allreduce");
    t.done("env");
}

/// A named test.
type Test = (&'static str, fn(&T));

fn main() {
    ok(
        init(ThreadLevel::Single, &tsunagi_transports::REGISTRY),
        "init",
    );
    let rt = ok(tsunagi_core::rt("main"), "rt");
    let t = T {
        rt,
        me: rt.world_rank(),
        n: rt.world_size(),
    };
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(i) = args.iter().position(|a| a == "small") {
        SMALL.store(true, std::sync::atomic::Ordering::Relaxed);
        args.remove(i);
    }
    let all: [Test; 16] = [
        ("barrier", test_barrier),
        ("bcast", test_bcast),
        ("gather", test_gather),
        ("scatter", test_scatter),
        ("allgather", test_allgather),
        ("alltoall", test_alltoall),
        ("reduce", test_reduce),
        ("allreduce", test_allreduce),
        ("reduce_scatter", test_reduce_scatter),
        ("scan", test_scan),
        ("errors", test_errors),
        ("nbc", test_nbc),
        ("topo", test_topo),
        ("subcomm", test_subcomm),
        ("random", test_random),
        ("shm", test_shm),
    ];
    for (name, f) in all {
        if args.is_empty() || args.iter().any(|a| a == name) {
            f(&t);
        }
    }
    if args.iter().any(|a| a == "env") {
        test_env(&t);
    }
    if args.iter().any(|a| a == "pace") {
        test_pace(&t);
    }
    ok(finalize(), "finalize");
}
