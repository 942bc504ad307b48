//! The paper's experiment at a reduced count: 100 random 16-node allocations of the
//! 30-node 6-ary-2-tree, 8 processes per node, 1 MiB, 2-level ring.

use tsunagi_fattree::experiment::{random_allocations, Config, Method, Summary};

#[test]
fn planned_beats_single_lid_everywhere_and_is_flat() {
    let cfg = Config {
        rates: tsunagi_fattree::sim::Rates {
            nic: 1700e6,
            link: 2000e6,
            intra: None,
        },
        ..Config::paper(1.0)
    };
    let (bw, stuck) =
        random_allocations(&cfg, 16, 100, 1, &[Method::SingleLid, Method::Planned]).unwrap();
    let (single, planned) = (&bw[0], &bw[1]);
    assert_eq!(planned.len(), 100);
    for (a, (p, s)) in planned.iter().zip(single).enumerate() {
        assert!(p >= s, "allocation {a}: planned {p} < single LID {s}");
    }
    let ps = Summary::of(planned);
    assert!(
        ps.min >= 0.95 * ps.max,
        "planned min {} not within 5% of max {}",
        ps.min,
        ps.max
    );
    // Uncongested, the job runs at the node rate.
    assert!((ps.mean - 1700e6).abs() < 1e6, "{}", ps.mean);
    // The hot spots exist: single LID loses on some allocations, a lot on the worst.
    let ss = Summary::of(single);
    assert!(ss.min < 0.7 * ps.min, "single-LID min {}", ss.min);
    assert!(ss.mean < 0.85 * ps.mean, "single-LID mean {}", ss.mean);
    assert_eq!(stuck, 0);
}
