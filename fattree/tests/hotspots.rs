//! The seed's hot spots, counted: the most flows on one switch link in a phase of the
//! 2-level ring (load) is above 1 with one LID on the paper's uneven allocations and
//! exactly 1 with the planner, and the bandwidth follows the load.

use tsunagi_fattree::experiment::{run, Config, Method, Outcome, SplitMix64};
use tsunagi_fattree::sim::Rates;
use tsunagi_fattree::FatTree;

/// The paper's 18-node 3-ary-2-tree, one process per node, every link at 1 GB/s.
fn three_ary(ppn: usize) -> Config {
    Config {
        tree: FatTree::full(3).unwrap(),
        ppn,
        ..Config::paper(1e9)
    }
}

/// The paper's 30-node 6-ary-2-tree with the calibration of docs/fattree.md.
fn paper() -> Config {
    Config {
        rates: Rates {
            nic: 1700e6,
            link: 2000e6,
            intra: None,
        },
        ..Config::paper(1.0)
    }
}

fn both(cfg: &Config, alloc: &[usize]) -> (Outcome, Outcome) {
    (
        run(cfg, alloc, Method::SingleLid).unwrap(),
        run(cfg, alloc, Method::Planned).unwrap(),
    )
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

#[test]
fn figure_2_arbitrary_allocation() {
    // Nodes 3, 5, 6, 9. One LID, shift 2: 3 -> 6 and 5 -> 9 both climb leaf 1 -> root 0
    // (load 2); shifts 1 and 3 share nothing. Three inter-node phases, one at half rate:
    // bandwidth 3/4 of the link rate.
    let (single, planned) = both(&three_ary(1), &[3, 5, 6, 9]);
    assert_eq!((single.max_switch_link_load, single.hot_phases), (2, 1));
    assert!(close(single.bandwidth, 0.75e9), "{}", single.bandwidth);
    assert_eq!((planned.max_switch_link_load, planned.hot_phases), (1, 0));
    assert!(close(planned.bandwidth, 1e9), "{}", planned.bandwidth);
    // 8 processes per node: the same phases, 64 times the bytes, the same ratio.
    let (single, planned) = both(&three_ary(8), &[3, 5, 6, 9]);
    assert!(close(single.seconds / planned.seconds, 4.0 / 3.0));
}

#[test]
fn figure_3_consecutive_allocation() {
    // Nodes 0..8: shifts 3 and 4 each put two flows on one leaf -> root link.
    let alloc: Vec<usize> = (0..8).collect();
    let (single, planned) = both(&three_ary(1), &alloc);
    assert_eq!((single.max_switch_link_load, single.hot_phases), (2, 2));
    assert_eq!((planned.max_switch_link_load, planned.hot_phases), (1, 0));
    // 7 inter-node phases of 1 MiB at 1 GB/s, two of them twice as long.
    let phase = (1u64 << 20) as f64 / 1e9;
    assert!(close(single.seconds, 9.0 * phase), "{}", single.seconds);
    assert!(close(planned.seconds, 7.0 * phase), "{}", planned.seconds);
}

#[test]
fn random_16_of_30_load_is_1_planned_and_decides_the_bandwidth() {
    // 100 of the paper's random allocations: the planner leaves no hot spot in any
    // phase of any allocation; with one LID, an allocation runs at the node rate exactly
    // when no switch link is shared, and most allocations share one.
    let cfg = paper();
    let mut rng = SplitMix64::new(1);
    let mut hot = 0;
    let mut worst = 0;
    for _ in 0..100 {
        let alloc = tsunagi_fattree::experiment::random_allocation(&mut rng, 30, 16);
        let (single, planned) = both(&cfg, &alloc);
        assert_eq!(planned.max_switch_link_load, 1, "{alloc:?}");
        assert_eq!(planned.hot_phases, 0, "{alloc:?}");
        assert!(close(planned.bandwidth, 1700e6), "{alloc:?}");
        let full_speed = close(single.bandwidth, 1700e6);
        assert_eq!(
            single.max_switch_link_load == 1,
            full_speed,
            "{alloc:?}: load {} at {} MB/s",
            single.max_switch_link_load,
            single.bandwidth / 1e6
        );
        if single.max_switch_link_load > 1 {
            hot += 1;
            assert!(single.bandwidth < planned.bandwidth);
        }
        worst = worst.max(single.max_switch_link_load);
    }
    assert!(hot >= 90, "only {hot} of 100 allocations have a hot spot");
    assert!(worst >= 3, "worst single-LID load {worst}");
}

#[test]
fn consecutive_allocations_follow_the_paper() {
    // The paper (figure 9): with one LID the bandwidth drops for 2K = 12 nodes or more
    // that are not a multiple of K = 6; the method holds every size.
    let cfg = paper();
    for n in 3..=30usize {
        let alloc: Vec<usize> = (0..n).collect();
        let (single, planned) = both(&cfg, &alloc);
        // Up to 6 nodes all sit on leaf 0: no flow crosses a switch link (load 0).
        assert_eq!(planned.max_switch_link_load, usize::from(n > 6), "n = {n}");
        assert!(close(planned.bandwidth, 1700e6), "n = {n}");
        let hot = n >= 12 && n % 6 != 0;
        assert_eq!(
            single.max_switch_link_load > 1,
            hot,
            "n = {n}: single-LID load {}",
            single.max_switch_link_load
        );
        assert_eq!(single.bandwidth < 1700e6 * (1.0 - 1e-9), hot, "n = {n}");
    }
}
