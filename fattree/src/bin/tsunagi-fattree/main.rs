//! `tsunagi-fattree`: the LID planner of seed 003 and its fabric simulation.
//!
//! `table` prints the planned LID index of every connection of a job, `simulate` runs one
//! allocation's all-to-all under each method, `reproduce` runs the paper's experiment
//! (docs/fattree.md) and writes a PNG and CSV files.

mod plot;

use clap::{Parser, Subcommand, ValueEnum};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use tsunagi_fattree::experiment::{
    consecutive, hot_spot_census, random_allocations, run, Algorithm, Config, Method, Summary,
};
use tsunagi_fattree::sim::{Rates, Sharing};
use tsunagi_fattree::topology::lmc_for;
use tsunagi_fattree::{FatTree, Numbering, Plan};

#[derive(Parser)]
#[command(
    name = "tsunagi-fattree",
    version,
    about = "Hot-spot-free all-to-all on k-ary-2-tree fabrics: the LID planner of seed 003 \
             and a flow-level simulation of the paper's experiment"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args, Clone)]
struct FabricArgs {
    /// Radix: node ports per leaf, root switches, LIDs per node.
    #[arg(long, default_value_t = 6)]
    k: usize,
    /// Leaf switches (the paper's cluster: 5 leaves of 6 nodes).
    #[arg(long, default_value_t = 5)]
    leaves: usize,
}

#[derive(clap::Args, Clone)]
struct RateArgs {
    /// What a node's adapter injects or absorbs, MB/s (10^6 B/s). 1,700: the paper's
    /// uncongested all-to-all bandwidth on 4xDDR.
    #[arg(long, default_value_t = 1700.0)]
    nic_mbs: f64,
    /// Leaf–root link rate, MB/s. 2,000: 4xDDR's 16 Gbit/s of data (20 Gbit/s, 8b/10b).
    #[arg(long, default_value_t = 2000.0)]
    link_mbs: f64,
    /// Recompute fair shares whenever a flow ends (default: the rates of the phase's
    /// start hold until it ends; identical for the 2-level ring).
    #[arg(long)]
    fluid: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum AlgArg {
    TwoLevelRing,
    PlainRing,
}

#[derive(Subcommand)]
enum Command {
    /// Print the planned LID index (root) of every connection of a job.
    Table {
        #[command(flatten)]
        fabric: FabricArgs,
        /// The job's nodes in hostfile order (node g is on leaf g / k), e.g. 0,3,5-9.
        #[arg(long)]
        nodes: String,
        /// Keep the hostfile order instead of the paper's leaf-by-leaf numbering.
        #[arg(long)]
        given_order: bool,
    },
    /// Simulate one allocation's all-to-all under each method.
    Simulate {
        #[command(flatten)]
        fabric: FabricArgs,
        #[command(flatten)]
        rates: RateArgs,
        /// The job's nodes in hostfile order, e.g. 0,3,5-9.
        #[arg(long)]
        nodes: String,
        #[arg(long, value_enum, default_value = "two-level-ring")]
        algorithm: AlgArg,
        /// Processes per node.
        #[arg(long, default_value_t = 8)]
        ppn: usize,
        /// Bytes per process pair.
        #[arg(long, default_value_t = 1 << 20)]
        msg: u64,
    },
    /// The paper's experiment: 30 nodes (6-ary-2-tree, 5 leaves), random 16-node
    /// allocations, 8 processes per node, 1 MiB, 2-level ring; consecutive allocations;
    /// the plain ring; other sizes and radices.
    Reproduce {
        #[command(flatten)]
        rates: RateArgs,
        /// Random allocations.
        #[arg(long, default_value_t = 1000)]
        allocations: usize,
        /// Seed of the allocations.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Where to write fattree.png, random.csv and consecutive.csv.
        #[arg(long)]
        out: Option<PathBuf>,
        /// TrueType font for the plot.
        #[arg(long, default_value = plot::FONT_PATH)]
        font: PathBuf,
        /// Skip the sweep over radices and job sizes.
        #[arg(long)]
        no_sweep: bool,
    },
}

/// "0,3,5-9" → [0, 3, 5, 6, 7, 8, 9].
fn parse_nodes(s: &str) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let num = |x: &str| {
            x.trim()
                .parse::<usize>()
                .map_err(|_| format!("--nodes: `{x}` is not a node number"))
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(format!("--nodes: empty range `{part}`"));
                }
                out.extend(a..=b);
            }
            None => out.push(num(part)?),
        }
    }
    let mut sorted = out.clone();
    sorted.sort_unstable();
    if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
        return Err(format!("--nodes: node {} is listed twice", w[0]));
    }
    if out.is_empty() {
        return Err("--nodes: no nodes".into());
    }
    Ok(out)
}

fn tree_of(f: &FabricArgs) -> Result<FatTree, String> {
    FatTree::new(f.k, f.leaves).map_err(|e| format!("--k/--leaves: {e}"))
}

fn rates_of(r: &RateArgs) -> Result<(Rates, Sharing), String> {
    for (name, v) in [("--nic-mbs", r.nic_mbs), ("--link-mbs", r.link_mbs)] {
        if !(v.is_finite() && v > 0.0) {
            return Err(format!("{name}: {v} is not a positive rate"));
        }
    }
    let rates = Rates {
        nic: r.nic_mbs * 1e6,
        link: r.link_mbs * 1e6,
        intra: None,
    };
    let sharing = if r.fluid {
        Sharing::Fluid
    } else {
        Sharing::Static
    };
    Ok((rates, sharing))
}

fn table(fabric: &FabricArgs, nodes: &str, given_order: bool) -> Result<String, String> {
    let tree = tree_of(fabric)?;
    let alloc = parse_nodes(nodes)?;
    for &g in &alloc {
        tree.check_node(g).map_err(|e| format!("--nodes: {e}"))?;
    }
    let leaf_of: Vec<usize> = alloc.iter().map(|&g| tree.leaf_of(g)).collect();
    let numbering = if given_order {
        Numbering::AsGiven
    } else {
        Numbering::LeafByLeaf
    };
    let plan = Plan::with_numbering(tree.roots(), &leaf_of, numbering)
        .map_err(|e| format!("--nodes: {e}"))?;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "fabric: {}-ary-2-tree, {} leaves, {} nodes; {} LIDs per node (LMC {}): LID j = base + j, routed through root j",
        tree.k(),
        tree.leaves(),
        tree.nodes(),
        tree.k(),
        lmc_for(tree.k())
    );
    let order: Vec<String> = plan.order().iter().map(|&i| alloc[i].to_string()).collect();
    let _ = writeln!(
        o,
        "ring order (local ids 0..{}): {}",
        alloc.len(),
        order.join(" ")
    );
    let st = plan.stats();
    let _ = writeln!(
        o,
        "planner: {} inter-leaf flows, {} moved off s mod K, greedy stuck (Kempe exchange) {} time(s)",
        st.flows, st.changed, st.greedy_stuck
    );
    let _ = writeln!(
        o,
        "LID index used by the row's node to reach the column's node ('.' same leaf: no root crossed, entry s mod K):"
    );
    let w = alloc
        .iter()
        .map(|g| g.to_string().len())
        .max()
        .unwrap_or(1)
        .max(3);
    let _ = write!(o, "{:>w$} |", "src");
    for &i in plan.order() {
        let _ = write!(o, " {:>w$}", alloc[i]);
    }
    let _ = writeln!(o);
    for s in 0..alloc.len() {
        let _ = write!(o, "{:>w$} |", alloc[plan.order()[s]]);
        for d in 0..alloc.len() {
            let cell = if s == d {
                "-".to_string()
            } else if plan.same_leaf_by_local(s, d) {
                format!("{}.", plan.root_by_local(s, d))
            } else {
                plan.root_by_local(s, d).to_string()
            };
            let _ = write!(o, " {cell:>w$}");
        }
        let _ = writeln!(o);
    }
    Ok(o)
}

fn simulate(
    fabric: &FabricArgs,
    rates: &RateArgs,
    nodes: &str,
    algorithm: AlgArg,
    ppn: usize,
    msg: u64,
) -> Result<String, String> {
    let tree = tree_of(fabric)?;
    let alloc = parse_nodes(nodes)?;
    let (rates, sharing) = rates_of(rates)?;
    if ppn == 0 || msg == 0 {
        return Err("--ppn and --msg must be positive".into());
    }
    let cfg = Config {
        tree,
        rates,
        sharing,
        algorithm: match algorithm {
            AlgArg::TwoLevelRing => Algorithm::TwoLevelRing,
            AlgArg::PlainRing => Algorithm::PlainRing,
        },
        ppn,
        msg: msg as f64,
    };
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{} all-to-all, {} nodes x {ppn} processes, {msg} B per process pair; \
         load = most flows on one switch link in a phase (1: no hot spot)",
        cfg.algorithm.name(),
        alloc.len()
    );
    let _ = writeln!(
        o,
        "{:<26} {:>12} {:>10} {:>5} {:>11}",
        "method", "time ms", "MB/s", "load", "hot phases"
    );
    for m in Method::ALL {
        let r = run(&cfg, &alloc, m).map_err(|e| format!("--nodes: {e}"))?;
        let _ = writeln!(
            o,
            "{:<26} {:>12.3} {:>10.0} {:>5} {:>5} of {}",
            m.name(),
            r.seconds * 1e3,
            r.bandwidth / 1e6,
            r.max_switch_link_load,
            r.hot_phases,
            phase_count(cfg.algorithm, alloc.len(), ppn)
        );
    }
    Ok(o)
}

/// Phases of one all-to-all: one per node shift (shift 0 inside the nodes) for the
/// 2-level ring, one per rank shift for the plain ring.
fn phase_count(algorithm: Algorithm, nodes: usize, ppn: usize) -> usize {
    match algorithm {
        Algorithm::PlainRing => nodes * ppn,
        _ => nodes,
    }
}

fn mbs(x: f64) -> String {
    format!("{:.0}", x / 1e6)
}

fn summary_row(o: &mut String, label: &str, xs: &[f64], extra: &str) {
    let s = Summary::of(xs);
    let _ = writeln!(
        o,
        "| {label} | {} | {} | {} | {extra} |",
        mbs(s.min),
        mbs(s.mean),
        mbs(s.max)
    );
}

struct Reproduction {
    text: String,
    random: Vec<Vec<f64>>,
    sizes: Vec<usize>,
    consec: Vec<Vec<f64>>,
}

fn reproduce(
    rates: &RateArgs,
    allocations: usize,
    seed: u64,
    sweep: bool,
) -> Result<Reproduction, String> {
    let (rates, sharing) = rates_of(rates)?;
    if allocations == 0 {
        return Err("--allocations must be positive".into());
    }
    let cfg = Config {
        rates,
        sharing,
        ..Config::paper(1.0)
    };
    let e = |e: tsunagi_fattree::FabricError| e.to_string();
    let mut o = String::new();
    let _ =
        writeln!(
        o,
        "Fabric: 6-ary-2-tree, 5 leaves, 30 nodes; node links {} MB/s, leaf-root links {} MB/s; \
         8 processes per node, 1 MiB per process pair; {} sharing.\n",
        mbs(rates.nic),
        mbs(rates.link),
        if sharing == Sharing::Static { "static" } else { "fluid" }
    );
    let _ = writeln!(
        o,
        "## {allocations} random 16-node allocations, 2-level ring (seed {seed})\n"
    );
    let _ = writeln!(o, "| method | min MB/s | mean MB/s | max MB/s | paper |");
    let _ = writeln!(o, "|---|---:|---:|---:|---|");
    let (random, _) = random_allocations(&cfg, 16, allocations, seed, &Method::ALL).map_err(e)?;
    let paper = [
        "888 / 1,198 / 1,690",
        "about 1,700 for every allocation",
        "",
        "",
    ];
    for ((m, xs), p) in Method::ALL.iter().zip(&random).zip(paper) {
        summary_row(&mut o, m.name(), xs, p);
    }
    let (_, stuck_leaf) =
        random_allocations(&cfg, 16, allocations, seed, &[Method::Planned]).map_err(e)?;
    let (_, stuck_given) =
        random_allocations(&cfg, 16, allocations, seed, &[Method::PlannedGivenOrder]).map_err(e)?;
    let planned = Summary::of(&random[1]);
    let _ = writeln!(
        o,
        "\nPlanned minimum / maximum: {:.4}. Planned ≥ single LID in {} of {allocations} allocations. \
         Greedy stuck (Kempe exchange needed): {stuck_leaf} times with the paper's numbering, \
         {stuck_given} with the hostfile order.",
        planned.min / planned.max,
        random[1]
            .iter()
            .zip(&random[0])
            .filter(|(p, s)| **p >= **s * (1.0 - 1e-12))
            .count()
    );
    // The hot spots themselves: flows per switch link.
    for m in [Method::SingleLid, Method::Planned] {
        let c = hot_spot_census(&cfg, 16, allocations, seed, m).map_err(e)?;
        let _ = writeln!(
            o,
            "\n{}: a switch link carries two flows or more of one phase in {} of {} allocations \
             ({} of {} phases); most flows on one switch link in any phase: {}.",
            m.name(),
            c.hot_allocations,
            c.allocations,
            c.hot_phases,
            c.phases,
            c.worst_load
        );
    }
    // The other calibration: every link at the node rate.
    let uniform = Config {
        rates: Rates::uniform(rates.nic),
        ..cfg
    };
    let (u, _) = random_allocations(
        &uniform,
        16,
        allocations,
        seed,
        &[Method::SingleLid, Method::Planned],
    )
    .map_err(e)?;
    let _ = writeln!(
        o,
        "\nWith every link at {} MB/s instead:\n\n| method | min MB/s | mean MB/s | max MB/s | |\n|---|---:|---:|---:|---|",
        mbs(rates.nic)
    );
    summary_row(&mut o, "single LID", &u[0], "");
    summary_row(&mut o, "planned", &u[1], "");

    // Consecutive allocations.
    let sizes: Vec<usize> = (3..=30).collect();
    let consec = consecutive(&cfg, &sizes, &Method::ALL).map_err(e)?;
    let _ = writeln!(
        o,
        "\n## Consecutive allocations (nodes 0 .. n-1), 2-level ring\n\n| n | single LID | planned | single LID, leaf order | single-LID load, hot phases |\n|---:|---:|---:|---:|---:|"
    );
    for (i, &n) in sizes.iter().enumerate() {
        let alloc: Vec<usize> = (0..n).collect();
        let single = run(&cfg, &alloc, Method::SingleLid).map_err(e)?;
        let _ = writeln!(
            o,
            "| {n} | {} | {} | {} | {}, {} |",
            mbs(consec[0][i]),
            mbs(consec[1][i]),
            mbs(consec[3][i]),
            single.max_switch_link_load,
            single.hot_phases
        );
    }

    // The plain ring.
    let count = allocations.min(200);
    let _ = writeln!(
        o,
        "\n## Plain ring (pairwise shift over ranks), {count} of the same random allocations\n\n| method | sharing | min MB/s | mean MB/s | max MB/s |\n|---|---|---:|---:|---:|"
    );
    for sh in [Sharing::Static, Sharing::Fluid] {
        let plain = Config {
            algorithm: Algorithm::PlainRing,
            sharing: sh,
            ..cfg
        };
        let (r, _) = random_allocations(
            &plain,
            16,
            count,
            seed,
            &[Method::SingleLid, Method::Planned],
        )
        .map_err(e)?;
        for (m, xs) in [Method::SingleLid, Method::Planned].iter().zip(&r) {
            let s = Summary::of(xs);
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} | {} |",
                m.name(),
                if sh == Sharing::Static {
                    "static"
                } else {
                    "fluid"
                },
                mbs(s.min),
                mbs(s.mean),
                mbs(s.max)
            );
        }
    }

    // Out of step: the plan is per shift; what if the nodes are not in the same shift?
    let count = allocations.min(100);
    let _ = writeln!(
        o,
        "\n## 2-level ring out of step (nodes move on per their own phase; starts skewed by up to S phase times), {count} of the same random allocations\n\n\
         | skew S | single LID min / mean | planned min / mean | non-blocking core, mean |\n|---:|---:|---:|---:|"
    );
    for skew in [0.0, 0.25, 1.0, 4.0] {
        let oos = Config {
            algorithm: Algorithm::TwoLevelRingOutOfStep { skew },
            sharing: Sharing::Fluid,
            ..cfg
        };
        let (r, _) =
            random_allocations(&oos, 16, count, seed, &[Method::SingleLid, Method::Planned])
                .map_err(e)?;
        // The same run with infinitely fast switch links: only the skew and the nodes'
        // own links remain.
        let ideal = Config {
            rates: Rates {
                link: 1e30,
                ..oos.rates
            },
            ..oos
        };
        let (i, _) =
            random_allocations(&ideal, 16, count, seed, &[Method::SingleLid]).map_err(e)?;
        let (a, b, c) = (Summary::of(&r[0]), Summary::of(&r[1]), Summary::of(&i[0]));
        let _ = writeln!(
            o,
            "| {skew} | {} / {} | {} / {} | {} |",
            mbs(a.min),
            mbs(a.mean),
            mbs(b.min),
            mbs(b.mean),
            mbs(c.mean)
        );
    }

    if sweep {
        let count = (allocations / 10).clamp(1, 100);
        let _ = writeln!(
            o,
            "\n## Other job sizes and radices: the paper's fabric, then full k-ary-2-trees (2k leaves), {count} random allocations each, 2-level ring\n\n\
             | k | nodes | job nodes | single LID min | single LID mean | planned min | planned mean | gain (mean) | stuck (leaf order / hostfile order) |\n\
             |---:|---:|---:|---:|---:|---:|---:|---:|---|"
        );
        // The paper's fabric first, then full trees.
        let mut cases = vec![(cfg.tree, vec![4, 8, 12, 16, 20, 24, 29, 30])];
        for k in [2usize, 3, 4, 6, 8, 12, 18] {
            let tree = FatTree::full(k).map_err(e)?;
            let nodes = tree.nodes();
            let mut jobs = vec![k, k + 1, 2 * k + 1, nodes / 2 + 1, nodes - 1, nodes];
            jobs.sort_unstable();
            jobs.dedup();
            cases.push((tree, jobs));
        }
        for (tree, jobs) in cases {
            let (k, nodes) = (tree.k(), tree.nodes());
            let c = Config { tree, ..cfg };
            for n in jobs {
                let methods = [
                    Method::SingleLid,
                    Method::Planned,
                    Method::PlannedGivenOrder,
                ];
                let mut stuck = [0usize; 2];
                let (r, s1) = random_allocations(&c, n, count, seed, &methods[..2]).map_err(e)?;
                stuck[0] = s1;
                let (_, s2) = random_allocations(&c, n, count, seed, &methods[2..]).map_err(e)?;
                stuck[1] = s2;
                let (a, b) = (Summary::of(&r[0]), Summary::of(&r[1]));
                let _ = writeln!(
                    o,
                    "| {k} | {nodes} | {n} | {} | {} | {} | {} | {:.2} | {} / {} |",
                    mbs(a.min),
                    mbs(a.mean),
                    mbs(b.min),
                    mbs(b.mean),
                    b.mean / a.mean,
                    stuck[0],
                    stuck[1]
                );
            }
        }
    }
    Ok(Reproduction {
        text: o,
        random,
        sizes,
        consec,
    })
}

fn write_outputs(
    r: &Reproduction,
    dir: &std::path::Path,
    font: &std::path::Path,
) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("--out {}: {e}", dir.display()))?;
    let mut csv = String::from("allocation");
    for m in Method::ALL {
        let _ = write!(csv, ",{}", m.name());
    }
    csv.push('\n');
    for a in 0..r.random[0].len() {
        let _ = write!(csv, "{a}");
        for xs in &r.random {
            let _ = write!(csv, ",{}", mbs(xs[a]));
        }
        csv.push('\n');
    }
    let mut c2 = String::from("nodes");
    for m in Method::ALL {
        let _ = write!(c2, ",{}", m.name());
    }
    c2.push('\n');
    for (i, n) in r.sizes.iter().enumerate() {
        let _ = write!(c2, "{n}");
        for xs in &r.consec {
            let _ = write!(c2, ",{}", mbs(xs[i]));
        }
        c2.push('\n');
    }
    for (name, body) in [("random.csv", csv), ("consecutive.csv", c2)] {
        let p = dir.join(name);
        std::fs::write(&p, body).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    if let Err(e) = plot::load_font(font) {
        eprintln!("tsunagi-fattree: no plot ({e})");
        return Ok(());
    }
    let sorted = |xs: &[f64]| -> Vec<(f64, f64)> {
        let mut v: Vec<f64> = xs.iter().map(|x| x / 1e6).collect();
        v.sort_by(f64::total_cmp);
        v.into_iter()
            .enumerate()
            .map(|(i, y)| (i as f64, y))
            .collect()
    };
    let random = [
        plot::Curve {
            label: "single LID (simulated)".into(),
            points: sorted(&r.random[0]),
        },
        plot::Curve {
            label: "planned LIDs (simulated)".into(),
            points: sorted(&r.random[1]),
        },
    ];
    let by_n = |xs: &[f64]| -> Vec<(f64, f64)> {
        r.sizes
            .iter()
            .zip(xs)
            .map(|(&n, &y)| (n as f64, y / 1e6))
            .collect()
    };
    let consec = [
        plot::Curve {
            label: "single LID".into(),
            points: by_n(&r.consec[0]),
        },
        plot::Curve {
            label: "planned LIDs".into(),
            points: by_n(&r.consec[1]),
        },
    ];
    let refs = [
        ("paper, single LID: min 888", 888.0),
        ("mean 1,198", 1198.0),
        ("max 1,690", 1690.0),
    ];
    let title = format!(
        "{} random 16-node allocations of 30 (sorted)",
        r.random[0].len()
    );
    let panels = [
        plot::Panel {
            title: &title,
            x_desc: "allocation, by bandwidth",
            curves: &random,
            references: &refs,
            y_max: 2000.0,
        },
        plot::Panel {
            title: "Consecutive nodes 0 .. n-1",
            x_desc: "nodes n",
            curves: &consec,
            references: &[],
            y_max: 2000.0,
        },
    ];
    let p = dir.join("fattree.png");
    plot::draw(&p, &panels).map_err(|e| format!("{}: {e}", p.display()))?;
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Table {
            fabric,
            nodes,
            given_order,
        } => table(fabric, nodes, *given_order),
        Command::Simulate {
            fabric,
            rates,
            nodes,
            algorithm,
            ppn,
            msg,
        } => simulate(fabric, rates, nodes, *algorithm, *ppn, *msg),
        Command::Reproduce {
            rates,
            allocations,
            seed,
            out,
            font,
            no_sweep,
        } => reproduce(rates, *allocations, *seed, !no_sweep).and_then(|r| {
            if let Some(dir) = out {
                write_outputs(&r, dir, font)?;
            }
            Ok(r.text)
        }),
    };
    match result {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tsunagi-fattree: {e}");
            ExitCode::from(2)
        }
    }
}
