//! Collective operations through the Rust API, checking every result: barrier,
//! broadcast, gather, scatter, all-gather (also in place and with varying counts),
//! all-to-all, reduce (also in place), all-reduce with system operations and user
//! closures (commutative and not: 2x2 matrix products prove the rank order), scans and
//! reduce-scatter, non-blocking barrier, all-reduce and broadcast overlapped with
//! point-to-point traffic, and errors for bad arguments.
use tsunagi::collective::{SystemOperation, UserOperation};
use tsunagi::traits::*;
use tsunagi::ErrorClass;

fn check(ok: bool, what: &str) {
    if !ok {
        eprintln!("collectives: FAILED: {what}");
        std::process::exit(1);
    }
}

const MOD: i64 = 10007;

/// Row-major 2x2 matrix of rank `r` (not triangular: products do not commute).
fn mat(r: i64) -> [i64; 4] {
    [r + 1, 2 * r + 1, r % 3, 1]
}

fn mul(a: &[i64; 4], b: &[i64; 4]) -> [i64; 4] {
    [
        (a[0] * b[0] + a[1] * b[2]) % MOD,
        (a[0] * b[1] + a[1] * b[3]) % MOD,
        (a[2] * b[0] + a[3] * b[2]) % MOD,
        (a[2] * b[1] + a[3] * b[3]) % MOD,
    ]
}

fn main() {
    let universe = tsunagi::initialize().expect("init");
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    let n = size as usize;
    let root = world.process_at_rank(0);
    let last = world.process_at_rank(size - 1);

    world.barrier().expect("barrier");

    // Broadcast from the last rank.
    let mut v = if rank == size - 1 {
        [7u64, 8, 9]
    } else {
        [0; 3]
    };
    last.broadcast_into(&mut v[..]).expect("broadcast");
    check(v == [7, 8, 9], "broadcast");

    // Gather (two values each) and scatter at rank 0.
    let mine = [rank, 100 + rank];
    if rank == 0 {
        let mut all = vec![0i32; 2 * n];
        root.gather_into_root(&mine[..], &mut all[..])
            .expect("gather");
        for r in 0..size {
            check(
                all[2 * r as usize] == r && all[2 * r as usize + 1] == 100 + r,
                "gather",
            );
        }
        let mut parts: Vec<f64> = (0..n).map(|i| i as f64 * 1.5).collect();
        let mut got = 0f64;
        root.scatter_into_root(&parts[..], &mut got)
            .expect("scatter");
        check(got == 0.0, "scatter at the root");
        // In place: the root's block stays where it is.
        let mut all = vec![-1i32; 2 * n];
        all[..2].copy_from_slice(&mine);
        root.gather_in_place_root(&mut all[..])
            .expect("gather in place");
        check(
            (0..n).all(|r| all[2 * r] == r as i32 && all[2 * r + 1] == 100 + r as i32),
            "gather in place",
        );
        root.scatter_in_place_root(&mut parts[..])
            .expect("scatter in place");
        check(parts[0] == 0.0, "scatter in place leaves the root's block");
    } else {
        root.gather_into(&mine[..]).expect("gather");
        let mut got = 0f64;
        root.scatter_into(&mut got).expect("scatter");
        check(got == rank as f64 * 1.5, "scatter");
        root.gather_into(&mine[..])
            .expect("gather (in place at the root)");
        got = 0.0;
        root.scatter_into(&mut got)
            .expect("scatter (in place at the root)");
        check(got == rank as f64 * 1.5, "scatter from an in-place root");
    }

    // All-gather, in place, and with varying counts.
    let mut all = vec![0i32; 2 * n];
    world
        .all_gather_into(&mine[..], &mut all[..])
        .expect("all_gather");
    check(
        (0..n).all(|r| all[2 * r] == r as i32 && all[2 * r + 1] == 100 + r as i32),
        "all_gather",
    );
    let mut inplace = vec![-1i32; n];
    inplace[rank as usize] = rank * rank;
    world
        .all_gather_in_place(&mut inplace[..])
        .expect("all_gather_in_place");
    check(
        (0..n).all(|r| inplace[r] == (r * r) as i32),
        "all_gather_in_place",
    );
    let counts: Vec<i64> = (0..n as i64).map(|r| r + 1).collect();
    let displs: Vec<i64> = (0..n as i64).map(|r| r * (r + 1) / 2).collect();
    let mine_v: Vec<u16> = (0..=rank as u16).map(|i| rank as u16 * 10 + i).collect();
    let mut all_v = vec![0u16; n * (n + 1) / 2];
    world
        .all_gather_varcount_into(&mine_v[..], &mut all_v[..], &counts, &displs)
        .expect("all_gather_varcount");
    for r in 0..n {
        for i in 0..=r {
            check(
                all_v[displs[r] as usize + i] == (r * 10 + i) as u16,
                "all_gather_varcount",
            );
        }
    }

    // All-to-all: block r is (rank, r).
    let send: Vec<i32> = (0..size).flat_map(|r| [rank, r]).collect();
    let mut recv = vec![0i32; 2 * n];
    world
        .all_to_all_into(&send[..], &mut recv[..])
        .expect("all_to_all");
    check(
        (0..n).all(|r| recv[2 * r] == r as i32 && recv[2 * r + 1] == rank),
        "all_to_all",
    );

    // Reduce to rank 0, and in place.
    let x = [rank as i64, 1];
    if rank == 0 {
        let mut s = [0i64; 2];
        root.reduce_into_root(&x[..], &mut s[..], &SystemOperation::sum())
            .expect("reduce");
        check(
            s == [(size * (size - 1) / 2) as i64, size as i64],
            "reduce sum",
        );
        let mut m = [5i64, 1];
        root.reduce_in_place_root(&mut m[..], &SystemOperation::max())
            .expect("reduce in place");
        check(m == [(size - 1).max(5) as i64, 1], "reduce max in place");
    } else {
        root.reduce_into(&x[..], &SystemOperation::sum())
            .expect("reduce");
        root.reduce_into(&x[..], &SystemOperation::max())
            .expect("reduce");
    }

    // All-reduce: system ops, in place, and user closures.
    let mut p = 0f64;
    world
        .all_reduce_into(&(rank as f64 + 1.0), &mut p, &SystemOperation::product())
        .expect("all_reduce product");
    check(p == (1..=n).map(|i| i as f64).product::<f64>(), "product");
    let mut mn = [rank, -rank];
    world
        .all_reduce_in_place(&mut mn[..], &SystemOperation::min())
        .expect("all_reduce in place");
    check(mn == [0, -(size - 1)], "min in place");
    let sum_op = UserOperation::commutative(|a: &[i32], b: &mut [i32]| {
        for (x, y) in a.iter().zip(b.iter_mut()) {
            *y += x;
        }
    });
    let mut s = 0i32;
    world
        .all_reduce_into(&rank, &mut s, &sum_op)
        .expect("user sum");
    check(s == size * (size - 1) / 2, "user sum");
    let matmul = UserOperation::non_commutative(|a: &[[i64; 4]], b: &mut [[i64; 4]]| {
        for (x, y) in a.iter().zip(b.iter_mut()) {
            *y = mul(x, y);
        }
    });
    let mut prod = [0i64; 4];
    world
        .all_reduce_into(&mat(rank as i64), &mut prod, &matmul)
        .expect("matrix product");
    let want = (0..size as i64).fold([1, 0, 0, 1], |acc, r| mul(&acc, &mat(r)));
    check(prod == want, "non-commutative all_reduce in rank order");

    // Scans and reduce-scatter.
    let mut sc = 0i32;
    world
        .scan_into(&rank, &mut sc, &SystemOperation::sum())
        .expect("scan");
    check(sc == rank * (rank + 1) / 2, "scan");
    let mut ex = -1i32;
    world
        .exscan_into(&rank, &mut ex, &SystemOperation::sum())
        .expect("exscan");
    check(rank == 0 || ex == rank * (rank - 1) / 2, "exscan");
    let mut pre = [0i64; 4];
    world
        .scan_into(&mat(rank as i64), &mut pre, &matmul)
        .expect("matrix scan");
    let want = (0..=rank as i64).fold([1, 0, 0, 1], |acc, r| mul(&acc, &mat(r)));
    check(pre == want, "non-commutative scan");
    let blocks: Vec<u32> = (0..2 * size as u32).map(|i| i + rank as u32).collect();
    let mut mine_rs = [0u32; 2];
    world
        .reduce_scatter_block_into(&blocks[..], &mut mine_rs[..], &SystemOperation::sum())
        .expect("reduce_scatter_block");
    let base = (size * (size - 1) / 2) as u32;
    check(
        mine_rs
            == [
                size as u32 * 2 * rank as u32 + base,
                size as u32 * (2 * rank as u32 + 1) + base,
            ],
        "reduce_scatter_block",
    );

    // Non-blocking collectives on owned buffers, overlapped with point-to-point traffic.
    let barrier = world.immediate_barrier().expect("immediate_barrier");
    let sum = world
        .immediate_all_reduce(vec![rank as i64; 3], &SystemOperation::sum())
        .expect("immediate_all_reduce");
    let bc = world
        .immediate_broadcast(size - 1, vec![rank as u8; 5])
        .expect("immediate_broadcast");
    let next = world.process_at_rank((rank + 1) % size);
    let prev = world.process_at_rank((rank + size - 1) % size);
    let mut token = -1i32;
    tsunagi::point_to_point::send_receive_into(&rank, &next, &mut token, &prev)
        .expect("sendrecv while collectives are in flight");
    check(
        token == (rank + size - 1) % size,
        "sendrecv during collectives",
    );
    let total = (size * (size - 1) / 2) as i64;
    check(
        sum.wait().expect("wait all_reduce") == [total; 3],
        "immediate_all_reduce",
    );
    check(
        bc.wait().expect("wait broadcast") == [(size - 1) as u8; 5],
        "immediate_broadcast",
    );
    barrier.wait().expect("wait barrier");

    // Errors, not panics.
    let e = world
        .process_at_rank(size)
        .broadcast_into(&mut v[..])
        .unwrap_err();
    check(e.class() == ErrorClass::Root, "bad root is a Root error");
    let e = world
        .all_reduce_into(&[1u8][..], &mut [0u8][..], &SystemOperation::logical_and())
        .map(|_| ());
    check(e.is_ok(), "LAND on unsigned bytes is allowed");
    let e = world
        .all_reduce_into(&1.5f64, &mut p, &SystemOperation::bitwise_or())
        .unwrap_err();
    check(e.class() == ErrorClass::Op, "BOR on doubles is an Op error");
    let e = world
        .all_reduce_into(&[1i32, 2][..], &mut [0i32; 3][..], &SystemOperation::sum())
        .unwrap_err();
    check(
        e.class() == ErrorClass::Count,
        "count mismatch is a Count error",
    );
    let e = world.all_reduce_into(&1u8, &mut 0u8, &sum_op).unwrap_err();
    check(e.class() == ErrorClass::Op, "user op on the wrong type");

    if rank == 0 {
        // Local argument errors: nothing is sent, so only the root may try them.
        let e = root.gather_into(&mine[..]).unwrap_err();
        check(e.class() == ErrorClass::Root, "gather_into at the root");
    } else {
        let e = root.reduce_into_root(&x[..], &mut [0i64; 2][..], &SystemOperation::sum());
        check(
            e.unwrap_err().class() == ErrorClass::Root,
            "reduce_into_root off the root",
        );
    }

    world.barrier().expect("barrier");
    println!("collectives: rank {rank} of {size} OK");
}
