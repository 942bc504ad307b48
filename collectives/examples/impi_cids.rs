//! Context ids across sites (IMPI's "max + 1"): run as a job of at least two sites
//! (`launcher/tests/sites.rs`). Prints `OK cids` when every check passed.
//!
//! 1. Split MPI_COMM_WORLD by site: a communicator inside each site, on pair 2 everywhere
//!    (agreed over the parent, which spans the sites: max + 1).
//! 2. On site 0 only, dup it twice and free the first (parents inside one site keep the
//!    mask rule: the lowest pair free in every member, 3 and 4): site 0 then uses pairs
//!    0, 1, 2 and 4, the other sites 0, 1 and 2.
//! 3. Dup MPI_COMM_WORLD, which spans the sites: IMPI's rule gives one more than the highest
//!    pair in use anywhere, pair 5 (the mask rule would have taken pair 3, free in all).
//! 4. Split that dup by rank parity (each half spans sites again): pair 6.
//!
//! Each new communicator also carries a broadcast, so a pair that the members did not agree
//! on would hang or mismatch rather than pass.

use tsunagi_collectives as coll;
use tsunagi_core::datatype::{Builtin, Datatype};
use tsunagi_core::{finalize, init, CommId, ThreadLevel};

fn ok<T>(r: Result<T, tsunagi_core::MpiError>, what: &str) -> T {
    r.unwrap_or_else(|e| {
        eprintln!("FAIL {what}: {e}");
        std::process::exit(1)
    })
}

fn check(cond: bool, what: String) {
    if !cond {
        eprintln!("FAIL {what}");
        std::process::exit(1);
    }
}

fn main() {
    ok(
        init(ThreadLevel::Single, &tsunagi_transports::REGISTRY),
        "init",
    );
    let rt = ok(tsunagi_core::rt("main"), "rt");
    let me = rt.world_rank();
    let n = rt.world_size();
    let sites = rt.site_map();
    let site = sites[me as usize];
    check(
        sites.iter().any(|&s| s != sites[0]),
        "impi_cids needs a job over at least two sites".into(),
    );
    let int = Datatype::builtin(Builtin::Int);
    let bcast_check = |comm: CommId, what: &str| {
        let mut v = [0i32; 2];
        if ok(rt.comm_rank(comm), "comm_rank") == 0 {
            v = [4242, ok(rt.comm_size(comm), "comm_size") as i32];
        }
        // SAFETY: `v` holds two ints.
        ok(
            unsafe { coll::bcast::bcast(rt, v.as_mut_ptr().cast(), 2, &int, 0, comm) },
            what,
        );
        check(
            v == [4242, ok(rt.comm_size(comm), "comm_size") as i32],
            format!("{what}: bcast gave {v:?}"),
        );
    };
    let pair = |comm: CommId| ok(rt.comm_coll_context(comm), "context") / 2;

    let local = ok(
        rt.comm_split(CommId::WORLD, site as i32, me as i32),
        "split by site",
    )
    .expect("every rank has a color");
    check(
        pair(local) == 2,
        format!("site communicator on pair {}", pair(local)),
    );
    bcast_check(local, "site communicator");
    let mut keep = None;
    if site == sites[0] {
        let a = ok(rt.comm_dup(local), "dup a");
        let b = ok(rt.comm_dup(local), "dup b");
        check(
            (pair(a), pair(b)) == (3, 4),
            format!("site-0 dups on pairs {} and {}", pair(a), pair(b)),
        );
        ok(rt.comm_free(a), "free a");
        keep = Some(b);
    }
    let g = ok(rt.comm_dup(CommId::WORLD), "dup world");
    check(
        pair(g) == 5,
        format!(
            "the dup of MPI_COMM_WORLD across sites is on pair {}, not max + 1 = 5",
            pair(g)
        ),
    );
    bcast_check(g, "dup of world");
    let half = ok(
        rt.comm_split(g, (me % 2) as i32, me as i32),
        "split by parity",
    )
    .expect("every rank has a color");
    check(
        pair(half) == 6,
        format!(
            "the parity split is on pair {}, not max + 1 = 6",
            pair(half)
        ),
    );
    bcast_check(half, "parity split");
    for c in [half, g, local].into_iter().chain(keep) {
        ok(rt.comm_free(c), "free");
    }
    if me == 0 {
        println!("OK cids ({n} ranks)");
    }
    ok(finalize(), "finalize");
}
