//! The simulator against hand-computed cases, and its schedules against the collective
//! layer's.

use std::collections::BTreeSet;
use tsunagi_fattree::experiment::{run, Algorithm, Config, Method};
use tsunagi_fattree::sim::{plain_ring_phases, two_level_ring_phases, Rates, Sharing};
use tsunagi_fattree::FatTree;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

/// The paper's figure 3: nodes 0..8 of the 18-node 3-ary-2-tree, one process per node,
/// one LID. By hand (traffic to node d through root d mod 3): shifts 3 and 4 each put two
/// flows on one leaf->root link (3->6 and 5->0 on leaf 1 -> root 0; 3->7 and 5->1 on
/// leaf 1 -> root 1); shifts 1, 2, 5, 6, 7 share nothing. So the 7 inter-node phases take
/// 5 + 2 * 2 = 9 message times: bandwidth 7/9 of the link rate. Planned: 7/7.
#[test]
fn figure_3_by_hand() {
    let b = 1e9;
    let cfg = Config {
        tree: FatTree::full(3).unwrap(),
        rates: Rates::uniform(b),
        sharing: Sharing::Static,
        algorithm: Algorithm::TwoLevelRing,
        ppn: 1,
        msg: 1e6,
    };
    let alloc: Vec<usize> = (0..8).collect();
    let single = run(&cfg, &alloc, Method::SingleLid).unwrap().bandwidth;
    assert!(close(single, 7.0 / 9.0 * b), "{single}");
    let planned = run(&cfg, &alloc, Method::Planned).unwrap().bandwidth;
    assert!(close(planned, b), "{planned}");
    // Node links 100, switch links 150: the two flows on one switch link get 75 each, so
    // the two bad phases take 4/3 message times: 7 / (5 + 2 * 4/3) of 100.
    let cfg = Config {
        rates: Rates {
            nic: 100.0,
            link: 150.0,
            intra: None,
        },
        ..cfg
    };
    let single = run(&cfg, &alloc, Method::SingleLid).unwrap().bandwidth;
    assert!(close(single, 700.0 / (5.0 + 8.0 / 3.0)), "{single}");
    // With 2 processes per node every flow is 4 messages: same ratio.
    let cfg = Config { ppn: 2, ..cfg };
    let single2 = run(&cfg, &alloc, Method::SingleLid).unwrap().bandwidth;
    assert!(close(single2, single), "{single2}");
}

/// Node ids of every rank, `ppn` per node, nodes in `ring` order.
fn node_map(ring: &[usize], ppn: usize) -> Vec<u32> {
    ring.iter()
        .flat_map(|&g| std::iter::repeat_n(g as u32, ppn))
        .collect()
}

#[test]
fn schedules_are_the_collective_layers() {
    for (ring, ppn) in [
        (vec![3usize, 9, 4, 17, 0], 2usize),
        (vec![5, 1, 2], 3),
        (vec![0, 1, 2, 3, 4, 5, 6, 7], 1),
        (vec![11, 2], 4),
    ] {
        let nodes = node_map(&ring, ppn);
        // 2-level ring: per phase, node i's ranks send to exactly the node i + t.
        let theirs = tsunagi_collectives::two_level_ring_schedule(&nodes);
        let ours = two_level_ring_phases(&ring, ppn, 1.0);
        assert_eq!(theirs.len(), ours.len());
        for (t, (th, ou)) in theirs.iter().zip(&ours).enumerate() {
            for (i, dests) in th.iter().enumerate() {
                let mine: BTreeSet<u32> = ou
                    .iter()
                    .filter(|f| f.src == ring[i])
                    .map(|f| f.dst as u32)
                    .collect();
                assert_eq!(dests, &mine, "{ring:?} phase {t} node {i}");
            }
            // Each node sends ppn² blocks per phase.
            assert!(ou.iter().all(|f| f.bytes == (ppn * ppn) as f64));
        }
        // Plain ring: the destination nodes of every phase, and every rank pair once.
        let theirs = tsunagi_collectives::plain_ring_schedule(&nodes);
        let ours = plain_ring_phases(&ring, ppn, 1.0);
        assert_eq!(theirs.len(), ours.len());
        let mut total = 0.0;
        for (th, ou) in theirs.iter().zip(&ours) {
            for (i, dests) in th.iter().enumerate() {
                let mine: BTreeSet<u32> = ou
                    .iter()
                    .filter(|f| f.src == ring[i])
                    .map(|f| f.dst as u32)
                    .collect();
                assert_eq!(dests, &mine, "{ring:?}");
            }
            total += ou.iter().map(|f| f.bytes).sum::<f64>();
        }
        assert_eq!(total, (nodes.len() * nodes.len()) as f64);
    }
}
