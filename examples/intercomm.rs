//! Intercommunicators through the Rust API: even and odd world ranks form two groups;
//! point-to-point across them, broadcast, gather and reduce with the root in either
//! group, all-reduce and all-gather (each group gets the other's data), merge, duplicate
//! and split. Needs 2 or more ranks.
use tsunagi::collective::SystemOperation;
use tsunagi::intercomm::InterCommunicator;
use tsunagi::topology::Color;
use tsunagi::traits::*;

fn check(ok: bool, what: &str) {
    if !ok {
        eprintln!("intercomm: FAILED: {what}");
        std::process::exit(1);
    }
}

fn main() {
    let universe = tsunagi::initialize().expect("init");
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    check(size >= 2, "needs 2 or more ranks");
    let color = rank % 2;
    let local = world
        .split_by_color(Color::with_value(color))
        .expect("split")
        .expect("a colour");
    let inter = InterCommunicator::create(&local, 0, &world, 1 - color, 5).expect("create");
    let (lrank, lsize, rsize) = (inter.rank(), inter.size(), inter.remote_size());
    check(inter.is_inter() && !world.is_inter(), "is_inter");
    check(
        lrank == rank / 2 && lsize == local.size(),
        "local rank and size",
    );
    check(
        rsize == if color == 0 { size / 2 } else { (size + 1) / 2 },
        "remote size",
    );
    // World rank of remote rank j.
    let rw = |j: i32| 2 * j + 1 - color;
    check(
        inter.remote_group().expect("remote group").size() == rsize,
        "remote group",
    );

    // Point-to-point: to the same-numbered remote rank, if there is one.
    if lrank < rsize {
        inter.process_at_rank(lrank).send(&rank).expect("send");
        let (got, st) = inter
            .process_at_rank(lrank)
            .receive::<i32>()
            .expect("receive");
        check(
            got == rw(lrank) && st.source_rank() == lrank,
            "point-to-point",
        );
    }

    // Rooted collectives with the root at rank 0 of either group.
    for root_group in 0..2 {
        let mut v = [0i64; 3];
        let mut all = vec![0i32; rsize as usize];
        let mut sum = 0i32;
        if color == root_group && lrank == 0 {
            v = [1, 2, 3];
            let root = inter.root_process();
            root.broadcast_into(&mut v[..]).expect("broadcast root");
            root.gather_into_root(&0i32, &mut all[..])
                .expect("gather root");
            for j in 0..rsize {
                check(all[j as usize] == rw(j), "gather");
            }
            root.reduce_into_root(&0i32, &mut sum, &SystemOperation::sum())
                .expect("reduce root");
            check(sum == (0..rsize).map(rw).sum::<i32>(), "reduce");
        } else if color == root_group {
            let idle = inter.null_process();
            idle.broadcast_into(&mut v[..]).expect("broadcast idle");
            check(v == [0, 0, 0], "an idle process's buffer is untouched");
            idle.gather_into(&0i32).expect("gather idle");
            idle.reduce_into(&0i32, &SystemOperation::sum())
                .expect("reduce idle");
        } else {
            let root = inter.process_at_rank(0);
            root.broadcast_into(&mut v[..]).expect("broadcast leaf");
            check(v == [1, 2, 3], "broadcast");
            root.gather_into(&rank).expect("gather leaf");
            root.reduce_into(&rank, &SystemOperation::sum())
                .expect("reduce leaf");
        }
    }

    // All-to-all kinds: each group gets the other group's data.
    let mut sum = 0i32;
    inter
        .all_reduce_into(&rank, &mut sum, &SystemOperation::sum())
        .expect("all-reduce");
    check(sum == (0..rsize).map(rw).sum::<i32>(), "all-reduce");
    let mut all = vec![0i32; rsize as usize];
    inter
        .all_gather_into(&rank, &mut all[..])
        .expect("all-gather");
    check(
        all.iter().enumerate().all(|(j, &w)| w == rw(j as i32)),
        "all-gather",
    );
    inter.barrier().expect("barrier");

    // Merge (even ranks first), duplicate, split by local rank parity.
    let merged = inter.merge(color == 1).expect("merge");
    let want = if color == 0 {
        lrank
    } else {
        (size + 1) / 2 + lrank
    };
    check(merged.rank() == want && merged.size() == size, "merge");
    let dup = inter.duplicate().expect("duplicate");
    check(dup.is_inter() && dup.remote_size() == rsize, "duplicate");
    let part = dup
        .split_by_color_with_key(Color::with_value(lrank % 2), lrank)
        .expect("split");
    let their = (rsize - lrank % 2 + 1) / 2;
    check(
        part.is_some() == (their > 0),
        "split leaves out a colour the other side lacks",
    );
    if let Some(p) = part {
        check(p.remote_size() == their, "split remote size");
        let mut s = 0i32;
        p.all_reduce_into(&1i32, &mut s, &SystemOperation::sum())
            .expect("split all-reduce");
        check(s == their, "split all-reduce");
    }
    println!("intercomm: rank {rank} of {size} OK");
}
