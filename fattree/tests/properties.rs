//! Properties over random fabrics, allocations and rates, from a seeded generator (every
//! failure names its case and re-runs identically; no property-testing crate needed).
//!
//! - Planning and simulating never panic and never refuse a valid allocation.
//! - With the planner no switch link carries two flows of one 2-level ring phase, in
//!   either numbering, and the all-to-all runs at the node rate when switch links are at
//!   least as fast as node links (the lower bound: a node sends one flow per phase).
//! - The planner is never worse than static single-LID routing: over the same ring order
//!   for any rates, and with its own (leaf-by-leaf) order when switch links are at least
//!   as fast as node links.
//! - `connection_lid_indices` is the plan's row; invalid allocations are refused.

use tsunagi_fattree::experiment::{run, Algorithm, Config, Method, SplitMix64};
use tsunagi_fattree::sim::{Rates, Sharing};
use tsunagi_fattree::{connection_lid_indices, FatTree, Plan};

/// `n` distinct nodes of `0..nodes` in a random (hostfile) order.
fn shuffled_allocation(rng: &mut SplitMix64, nodes: usize, n: usize) -> Vec<usize> {
    let mut all: Vec<usize> = (0..nodes).collect();
    for i in 0..nodes {
        let j = i + rng.below(nodes - i);
        all.swap(i, j);
    }
    all.truncate(n);
    all
}

fn le(a: f64, b: f64) -> bool {
    a <= b * (1.0 + 1e-9)
}

#[test]
fn random_fabrics_allocations_and_rates() {
    let mut rng = SplitMix64::new(0xfa7_7ee);
    let mut cases = 0;
    let mut hot_single = 0;
    for case in 0..400 {
        let k = 1 + rng.below(8);
        let leaves = 1 + rng.below(2 * k + 1);
        let tree = FatTree::new(k, leaves).unwrap();
        let n = rng.below(tree.nodes() + 1);
        let alloc = shuffled_allocation(&mut rng, tree.nodes(), n);
        let ppn = 1 + rng.below(4);
        // Node and switch link rates between 1 and 3 GB/s, either faster.
        let nic = 1e9 * (1.0 + 2.0 * rng.below(1000) as f64 / 1000.0);
        let link = 1e9 * (1.0 + 2.0 * rng.below(1000) as f64 / 1000.0);
        let cfg = Config {
            tree,
            rates: Rates {
                nic,
                link,
                intra: None,
            },
            sharing: Sharing::Static,
            algorithm: Algorithm::TwoLevelRing,
            ppn,
            msg: 65536.0,
        };
        let what = format!("case {case}: k {k}, leaves {leaves}, nodes {alloc:?}, ppn {ppn}, nic {nic}, link {link}");
        let single = run(&cfg, &alloc, Method::SingleLid).expect(&what);
        let planned = run(&cfg, &alloc, Method::Planned).expect(&what);
        let given = run(&cfg, &alloc, Method::PlannedGivenOrder).expect(&what);
        for o in [&planned, &given] {
            assert!(o.max_switch_link_load <= 1, "{what}: {o:?}");
            assert_eq!(o.hot_phases, 0, "{what}");
        }
        // Same ring order: each phase's flows are at least as fast as with one LID.
        assert!(
            le(given.seconds, single.seconds),
            "{what}: {given:?} {single:?}"
        );
        if n >= 2 && nic <= link {
            // n - 1 inter-node phases of ppn² messages, each at the node rate.
            let bound = (n - 1) as f64 * (ppn * ppn) as f64 * cfg.msg / nic;
            assert!(
                (planned.seconds - bound).abs() <= 1e-9 * bound,
                "{what}: {planned:?}"
            );
            assert!(le(planned.seconds, single.seconds), "{what}");
        }
        if single.max_switch_link_load > 1 {
            hot_single += 1;
        }
        // What a transport gets, node by node, is the plan's table.
        let plan = Plan::for_allocation(&tree, &alloc).expect(&what);
        for me in 0..n {
            let row = connection_lid_indices(&tree, &alloc, me).expect(&what);
            assert_eq!(row.len(), n);
            for (peer, idx) in row.iter().enumerate() {
                if peer == me {
                    assert_eq!(*idx, None);
                } else {
                    let i = idx.expect("a peer has a LID");
                    assert!(i < k, "{what}");
                    assert_eq!(i, plan.lid_index(me, peer).unwrap());
                }
            }
        }
        assert!(connection_lid_indices(&tree, &alloc, n).is_err());
        cases += 1;
    }
    assert_eq!(cases, 400);
    // The generator reaches the interesting cases: one LID collides on many of them.
    assert!(
        hot_single > 100,
        "single LID hot on only {hot_single} of 400"
    );
}

#[test]
fn plain_and_out_of_step_rings_stay_within_the_node_rate() {
    // The plain ring puts up to two node shifts in one phase and the out-of-step ring
    // lets phases overlap, so a per-shift plan promises nothing about their links (the
    // documented limit); what must hold is that they run on any allocation without a
    // panic and that no method beats the node rate, which bounds every run.
    let mut rng = SplitMix64::new(77);
    for _ in 0..60 {
        let k = 2 + rng.below(5);
        let tree = FatTree::new(k, 2 + rng.below(2 * k - 1)).unwrap();
        let n = 2 + rng.below(tree.nodes() - 1);
        let alloc = shuffled_allocation(&mut rng, tree.nodes(), n);
        for algorithm in [
            Algorithm::PlainRing,
            Algorithm::TwoLevelRingOutOfStep { skew: 1.0 },
        ] {
            let cfg = Config {
                tree,
                rates: Rates::uniform(1e9),
                sharing: Sharing::Fluid,
                algorithm,
                ppn: 2,
                msg: 4096.0,
            };
            for m in Method::ALL {
                let o = run(&cfg, &alloc, m).unwrap();
                assert!(
                    o.bandwidth > 0.0 && o.bandwidth <= 1e9 * (1.0 + 1e-9),
                    "{alloc:?} {m:?} {algorithm:?}: {o:?}"
                );
            }
        }
    }
}

#[test]
fn invalid_allocations_are_refused_with_a_message() {
    let tree = FatTree::new(3, 2).unwrap();
    let e = connection_lid_indices(&tree, &[0, 4, 0], 1).unwrap_err();
    assert!(e.to_string().contains("node 0 is listed twice"), "{e}");
    let e = connection_lid_indices(&tree, &[0, 6], 0).unwrap_err();
    assert!(
        e.to_string()
            .contains("node 6 is not in a fabric of 6 nodes"),
        "{e}"
    );
    let e = connection_lid_indices(&tree, &[0, 1], 2).unwrap_err();
    assert!(e.to_string().contains("me = 2"), "{e}");
    let cfg = Config {
        tree,
        ..Config::paper(1e9)
    };
    assert!(run(&cfg, &[1, 1], Method::SingleLid).is_err());
    assert_eq!(connection_lid_indices(&tree, &[4], 0).unwrap(), vec![None]);
}
