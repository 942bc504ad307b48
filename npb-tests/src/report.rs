//! Collected results and their presentation: Markdown tables with medians, ranges and
//! ratios to each peer, and CSV (one summary row per point and contender, and every sample).

use crate::metric::{Key, Suite};
use crate::stats::{self, Better, Summary};
use std::collections::{BTreeMap, BTreeSet};

/// A run that failed: it contributes no samples and is listed in the report.
#[derive(Clone, Debug, PartialEq)]
pub struct Failure {
    pub mpi: String,
    pub case: String,
    pub rep: u32,
    pub why: String,
}

/// Everything measured in one harness invocation.
#[derive(Clone, Debug, Default)]
pub struct Results {
    /// Contenders in column order, as (id, label); `tsunagi` is the reference for ratios.
    pub mpis: Vec<(String, String)>,
    /// Samples per point and contender id, in run order.
    pub samples: BTreeMap<Key, BTreeMap<String, Vec<f64>>>,
    pub failures: Vec<Failure>,
    /// Himeno's exact residuals seen, per metric, with who produced them.
    pub residuals: BTreeMap<String, BTreeSet<String>>,
}

pub const REFERENCE: &str = "tsunagi";

/// Order of metrics within a table: as the workloads print them.
const METRIC_ORDER: &[&str] = &[
    "lat",
    "bw",
    "bibw",
    "rate",
    "barrier",
    "bcast",
    "gather",
    "gatherv",
    "scatter",
    "scatterv",
    "allgather",
    "allgatherv",
    "alltoall",
    "alltoallv",
    "alltoallw",
    "reduce",
    "allreduce",
    "reduce_scatter",
    "reduce_scatter_block",
    "scan",
    "exscan",
];

fn metric_rank(m: &str) -> usize {
    METRIC_ORDER
        .iter()
        .position(|x| *x == m)
        .unwrap_or(METRIC_ORDER.len() + usize::from(m.starts_with("overlap-")))
}

impl Results {
    pub fn add(&mut self, key: Key, mpi: &str, value: f64) {
        self.samples
            .entry(key)
            .or_default()
            .entry(mpi.to_string())
            .or_default()
            .push(value);
    }

    pub fn summary(&self, key: &Key, mpi: &str) -> Option<Summary> {
        stats::summarize(self.samples.get(key)?.get(mpi)?)
    }

    fn has_reference(&self) -> bool {
        self.mpis.iter().any(|(id, _)| id == REFERENCE)
    }

    fn peers(&self) -> impl Iterator<Item = &(String, String)> {
        self.mpis.iter().filter(|(id, _)| id != REFERENCE)
    }

    /// Keys in presentation order: suite, rank count, metric as printed, size.
    pub fn keys(&self) -> Vec<&Key> {
        let mut keys: Vec<&Key> = self.samples.keys().collect();
        keys.sort_by_key(|k| {
            let ranks = if k.suite == Suite::Kernel { 0 } else { k.ranks };
            (
                k.suite,
                ranks,
                metric_rank(&k.metric),
                k.metric.clone(),
                k.bytes,
                k.ranks,
            )
        });
        keys
    }

    /// The most runs any contender has at any of `keys` (what "median of N runs" says).
    pub fn max_runs(&self, keys: &[&Key]) -> usize {
        keys.iter()
            .flat_map(|k| self.mpis.iter().filter_map(|(id, _)| self.summary(k, id)))
            .map(|s| s.runs)
            .max()
            .unwrap_or(0)
    }

    /// Tsunagi's median over the best peer's, and whether that is at least as good.
    pub fn versus_best_peer(&self, key: &Key) -> Option<(f64, bool)> {
        let ours = self.summary(key, REFERENCE)?.median;
        let best = stats::best(
            self.peers()
                .filter_map(|(id, _)| Some(self.summary(key, id)?.median)),
            key.better(),
        )?;
        let r = stats::ratio(ours, best)?;
        Some((r, stats::at_least_as_good(ours, best, key.better())))
    }

    /// The Markdown report: `preamble` (machine, command, date), a summary of how often
    /// Tsunagi is at least as good as the best peer, one table per group, then failures.
    pub fn markdown(&self, preamble: &str) -> String {
        let mut md = String::from(preamble);
        let keys = self.keys();
        let groups = group(&keys);
        if self.has_reference() && self.peers().next().is_some() {
            md.push_str("\n## Summary\n\n| group | points | Tsunagi at least as good as the best peer |\n|---|---|---|\n");
            for (title, ks) in &groups {
                let verdicts: Vec<bool> = ks
                    .iter()
                    .filter_map(|k| self.versus_best_peer(k))
                    .map(|v| v.1)
                    .collect();
                let good = verdicts.iter().filter(|v| **v).count();
                md.push_str(&format!("| {title} | {} | {good} |\n", verdicts.len()));
            }
        }
        for (title, ks) in &groups {
            md.push_str(&format!("\n## {title}\n\n"));
            md.push_str(&self.table(ks));
        }
        if !self.residuals.is_empty() {
            md.push_str("\n## Himeno residuals\n\n");
            for (metric, seen) in &self.residuals {
                let verdict = if seen.len() == 1 {
                    "identical for every MPI and process count"
                } else {
                    "DIFFER between runs"
                };
                let list: Vec<&str> = seen.iter().map(String::as_str).collect();
                md.push_str(&format!("- {metric}: {verdict}: {}\n", list.join(", ")));
            }
        }
        if !self.failures.is_empty() {
            md.push_str("\n## Failed runs (no samples recorded)\n\n");
            for f in &self.failures {
                md.push_str(&format!(
                    "- {} {} repetition {}: {}\n",
                    f.mpi, f.case, f.rep, f.why
                ));
            }
        }
        md
    }

    fn table(&self, keys: &[&Key]) -> String {
        let runs = self.max_runs(keys);
        let mut t = format!(
            "Median of {runs} run{} per point, (min–max) beside it when there are several. Ratios are Tsunagi's \
             median over the peer's: below 1 is better for times (↓), above 1 for rates (↑); \
             ✓ marks Tsunagi at least as good as the best peer.\n\n",
            if runs == 1 { "" } else { "s" }
        );
        let reference = self.has_reference();
        let kernel = keys.first().is_some_and(|k| k.suite == Suite::Kernel);
        t.push_str(if kernel {
            "| kernel | ranks | unit |"
        } else {
            "| metric | bytes | unit |"
        });
        for (_, label) in &self.mpis {
            t.push_str(&format!(" {label} |"));
        }
        if reference {
            for (_, label) in self.peers() {
                t.push_str(&format!(" Tsunagi/{label} |"));
            }
            t.push_str(" vs best peer |");
        }
        t.push('\n');
        let ncols = 3
            + self.mpis.len()
            + if reference {
                self.peers().count() + 1
            } else {
                0
            };
        t.push_str(&"|---".repeat(ncols));
        t.push_str("|\n");
        for k in keys {
            let arrow = if k.better() == Better::Lower {
                "↓"
            } else {
                "↑"
            };
            let second = if kernel {
                k.ranks.to_string()
            } else {
                k.bytes.map(fmt_bytes).unwrap_or_default()
            };
            t.push_str(&format!(
                "| {} | {second} | {} {arrow} |",
                k.metric,
                k.unit()
            ));
            for (id, _) in &self.mpis {
                let cell = match self.summary(k, id) {
                    Some(s) => {
                        let partial = if s.runs < runs {
                            format!(" [{} runs]", s.runs)
                        } else {
                            String::new()
                        };
                        if s.runs == 1 {
                            format!("{}{partial}", fmt_value(s.median))
                        } else {
                            format!(
                                "{} ({}–{}){partial}",
                                fmt_value(s.median),
                                fmt_value(s.min),
                                fmt_value(s.max)
                            )
                        }
                    }
                    None => "–".into(),
                };
                t.push_str(&format!(" {cell} |"));
            }
            if reference {
                let ours = self.summary(k, REFERENCE).map(|s| s.median);
                for (id, _) in self.peers() {
                    let r = ours
                        .zip(self.summary(k, id))
                        .and_then(|(o, p)| stats::ratio(o, p.median));
                    t.push_str(&format!(
                        " {} |",
                        r.map(|r| format!("{r:.2}")).unwrap_or("–".into())
                    ));
                }
                let v = match self.versus_best_peer(k) {
                    Some((r, true)) => format!("{r:.2} ✓"),
                    Some((r, false)) => format!("{r:.2}"),
                    None => "–".into(),
                };
                t.push_str(&format!(" {v} |"));
            }
            t.push('\n');
        }
        let mut seen = Vec::new();
        for k in keys {
            let d = format!("{}: {}", k.metric, k.describe());
            if !seen.contains(&d) {
                seen.push(d);
            }
        }
        t.push_str(&format!("\nMeasured: {}.\n", seen.join("; ")));
        t
    }

    /// One row per point and contender: the medians, ranges and Tsunagi's ratio to it.
    pub fn summary_csv(&self) -> Result<String, csv::Error> {
        let mut w = csv::Writer::from_writer(Vec::new());
        w.write_record([
            "suite",
            "metric",
            "ranks",
            "bytes",
            "unit",
            "better",
            "mpi",
            "runs",
            "median",
            "min",
            "max",
            "tsunagi_over_this",
        ])?;
        for k in self.keys() {
            let ours = self.summary(k, REFERENCE).map(|s| s.median);
            for (id, _) in &self.mpis {
                let Some(s) = self.summary(k, id) else {
                    continue;
                };
                let ratio = ours.and_then(|o| stats::ratio(o, s.median));
                w.write_record(
                    key_fields(k).into_iter().chain([
                        if k.better() == Better::Lower {
                            "lower"
                        } else {
                            "higher"
                        }
                        .to_string(),
                        id.clone(),
                        s.runs.to_string(),
                        s.median.to_string(),
                        s.min.to_string(),
                        s.max.to_string(),
                        ratio.map(|r| format!("{r:.4}")).unwrap_or_default(),
                    ]),
                )?;
            }
        }
        into_string(w)
    }

    /// Every sample, in run order per point and contender.
    pub fn samples_csv(&self) -> Result<String, csv::Error> {
        let mut w = csv::Writer::from_writer(Vec::new());
        w.write_record([
            "suite", "metric", "ranks", "bytes", "unit", "mpi", "sample", "value",
        ])?;
        for k in self.keys() {
            for (mpi, values) in &self.samples[k] {
                for (i, v) in values.iter().enumerate() {
                    w.write_record(key_fields(k).into_iter().chain([
                        mpi.clone(),
                        (i + 1).to_string(),
                        v.to_string(),
                    ]))?;
                }
            }
        }
        into_string(w)
    }
}

impl Results {
    /// Read back what [`Results::samples_csv`] wrote (for redrawing plots from a saved
    /// run). Contenders come out in the order Tsunagi, MPICH, Open MPI, then others.
    pub fn from_samples_csv(text: &str) -> Result<Results, String> {
        let mut r = Results::default();
        let mut rd = csv::Reader::from_reader(text.as_bytes());
        for (i, row) in rd.records().enumerate() {
            let row = row.map_err(|e| format!("samples.csv: {e}"))?;
            let bad = |what: &str| format!("samples.csv row {}: bad {what}", i + 2);
            let suite = match row.get(0) {
                Some("p2p") => Suite::P2p,
                Some("coll") => Suite::Coll,
                Some("rma") => Suite::Rma,
                Some("kernels") => Suite::Kernel,
                _ => return Err(bad("suite")),
            };
            let metric = row.get(1).ok_or_else(|| bad("metric"))?;
            let ranks: u32 = parse_field(&row, 2).ok_or_else(|| bad("ranks"))?;
            let bytes = match row.get(3) {
                Some("") => None,
                Some(s) => Some(s.parse().map_err(|_| bad("bytes"))?),
                None => return Err(bad("bytes")),
            };
            let mpi = row.get(5).ok_or_else(|| bad("mpi"))?;
            let value: f64 = parse_field(&row, 7).ok_or_else(|| bad("value"))?;
            r.add(Key::new(suite, metric, ranks, bytes), mpi, value);
            if !r.mpis.iter().any(|(id, _)| id == mpi) {
                let label = match mpi {
                    "tsunagi" => "Tsunagi",
                    "mpich" => "MPICH",
                    "openmpi" => "Open MPI",
                    other => other,
                };
                r.mpis.push((mpi.to_string(), label.to_string()));
            }
        }
        let order = |id: &str| {
            ["tsunagi", "mpich", "openmpi"]
                .iter()
                .position(|k| *k == id)
                .unwrap_or(3)
        };
        r.mpis.sort_by_key(|(id, _)| order(id));
        Ok(r)
    }
}

fn parse_field<T: std::str::FromStr>(row: &csv::StringRecord, i: usize) -> Option<T> {
    row.get(i)?.parse().ok()
}

/// The CSV columns that identify a point: suite, metric, ranks, bytes, unit.
fn key_fields(k: &Key) -> [String; 5] {
    [
        k.suite.name().to_string(),
        k.metric.clone(),
        k.ranks.to_string(),
        k.bytes.map(|b| b.to_string()).unwrap_or_default(),
        k.unit().to_string(),
    ]
}

fn into_string(w: csv::Writer<Vec<u8>>) -> Result<String, csv::Error> {
    let bytes = w.into_inner().map_err(|e| e.into_error())?;
    Ok(String::from_utf8(bytes).expect("the CSV writer writes UTF-8"))
}

/// Tables: one per (suite, rank count), kernels all in one.
fn group<'a>(keys: &[&'a Key]) -> Vec<(String, Vec<&'a Key>)> {
    let mut groups: Vec<(String, Vec<&Key>)> = Vec::new();
    for k in keys {
        let title = match k.suite {
            Suite::P2p => format!("Point-to-point, {} ranks, one host", k.ranks),
            Suite::Coll => format!("Collectives, {} ranks, one host", k.ranks),
            Suite::Rma => format!("One-sided, {} ranks, one host", k.ranks),
            Suite::Kernel => "NPB kernels and Himeno, time to solution".to_string(),
        };
        match groups.last_mut() {
            Some((t, ks)) if *t == title => ks.push(k),
            _ => groups.push((title, vec![k])),
        }
    }
    groups
}

/// Three significant digits, without exponent notation.
pub fn fmt_value(v: f64) -> String {
    let a = v.abs();
    if a >= 1000.0 {
        format!("{v:.0}")
    } else if a >= 100.0 {
        format!("{v:.1}")
    } else if a >= 10.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// Message sizes as 8, 512, 4 KiB, 1 MiB.
pub fn fmt_bytes(b: u64) -> String {
    if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{} MiB", b >> 20)
    } else if b >= 1 << 10 && b.is_multiple_of(1 << 10) {
        format!("{} KiB", b >> 10)
    } else {
        b.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_results() -> Results {
        let mut r = Results {
            mpis: vec![
                ("tsunagi".into(), "Tsunagi".into()),
                ("mpich".into(), "MPICH".into()),
                ("openmpi".into(), "Open MPI".into()),
            ],
            ..Default::default()
        };
        let lat = Key::new(Suite::P2p, "lat", 2, Some(8));
        let bw = Key::new(Suite::P2p, "bw", 2, Some(1 << 20));
        for (mpi, l, b) in [
            ("tsunagi", [0.40, 0.45, 0.50], [5000.0, 5100.0, 4900.0]),
            ("mpich", [0.30, 0.35, 0.36], [4500.0, 4400.0, 4600.0]),
            ("openmpi", [0.32, 0.30, 0.31], [4700.0, 4000.0, 4800.0]),
        ] {
            for i in 0..3 {
                r.add(lat.clone(), mpi, l[i]);
                r.add(bw.clone(), mpi, b[i]);
            }
        }
        r.add(Key::new(Suite::Kernel, "CG.S", 2, None), "tsunagi", 0.5);
        r.add(Key::new(Suite::Kernel, "CG.S", 2, None), "mpich", 0.6);
        r
    }

    #[test]
    fn ratios_compare_with_the_best_peer_in_the_right_direction() {
        let r = sample_results();
        let lat = Key::new(Suite::P2p, "lat", 2, Some(8));
        let (ratio, good) = r.versus_best_peer(&lat).unwrap();
        assert!((ratio - 0.45 / 0.31).abs() < 1e-12);
        assert!(!good);
        let bw = Key::new(Suite::P2p, "bw", 2, Some(1 << 20));
        let (ratio, good) = r.versus_best_peer(&bw).unwrap();
        assert!((ratio - 5000.0 / 4700.0).abs() < 1e-12);
        assert!(good);
    }

    #[test]
    fn markdown_has_medians_ranges_ratios_and_failures() {
        let mut r = sample_results();
        r.failures.push(Failure {
            mpi: "openmpi".into(),
            case: "cg-S-np2".into(),
            rep: 1,
            why: "exit status 1".into(),
        });
        let md = r.markdown("# Bench\n");
        assert!(md.starts_with("# Bench\n"));
        assert!(md.contains("## Point-to-point, 2 ranks, one host"));
        assert!(md.contains("| lat | 8 | µs ↓ | 0.450 (0.400–0.500) | 0.350 (0.300–0.360) | 0.310 (0.300–0.320) | 1.29 | 1.45 | 1.45 |"), "{md}");
        assert!(md.contains("| bw | 1 MiB | MB/s ↑ | 5000 (4900–5100) |"));
        assert!(md.contains("1.06 ✓ |"));
        assert!(md.contains("Median of 3 runs"));
        // The kernel table: one run each, Open MPI missing.
        assert!(
            md.contains("| CG.S | 2 | s ↓ | 0.500 | 0.600 | – | 0.83 | – | 0.83 ✓ |"),
            "{md}"
        );
        assert!(md.contains("| Point-to-point, 2 ranks, one host | 2 | 1 |"));
        assert!(md.contains("- openmpi cg-S-np2 repetition 1: exit status 1"));
        assert!(md.contains("Measured: lat: ping-pong latency (half round trip); bw: streaming"));
    }

    #[test]
    fn csv_rows_parse_back_with_the_same_numbers() {
        let r = sample_results();
        let text = r.summary_csv().unwrap();
        let mut rd = csv::Reader::from_reader(text.as_bytes());
        let rows: Vec<csv::StringRecord> = rd.records().map(Result::unwrap).collect();
        assert_eq!(rows.len(), 3 + 3 + 2);
        let lat_mpich = rows
            .iter()
            .find(|row| &row[1] == "lat" && &row[6] == "mpich")
            .unwrap();
        assert_eq!(&lat_mpich[3], "8");
        assert_eq!(&lat_mpich[5], "lower");
        assert_eq!(lat_mpich[8].parse::<f64>().unwrap(), 0.35);
        assert_eq!(&lat_mpich[11], "1.2857");
        let samples = r.samples_csv().unwrap();
        assert_eq!(samples.lines().count(), 1 + 9 + 9 + 2);
    }

    #[test]
    fn samples_csv_reads_back_into_the_same_results() {
        let r = sample_results();
        let back = Results::from_samples_csv(&r.samples_csv().unwrap()).unwrap();
        assert_eq!(back.mpis, r.mpis);
        assert_eq!(back.samples, r.samples);
        assert!(Results::from_samples_csv("suite,metric\nnope,x\n").is_err());
    }

    #[test]
    fn labels_with_commas_are_quoted() {
        let mut r = Results {
            mpis: vec![("tsunagi".into(), "Tsunagi".into())],
            ..Default::default()
        };
        r.add(
            Key::new(Suite::Coll, "odd,name", 4, Some(8)),
            "tsunagi",
            1.0,
        );
        let text = r.summary_csv().unwrap();
        assert!(text.contains("\"odd,name\""));
    }

    #[test]
    fn number_and_size_formats() {
        assert_eq!(fmt_value(0.4567), "0.457");
        assert_eq!(fmt_value(12.345), "12.35");
        assert_eq!(fmt_value(123.45), "123.5");
        assert_eq!(fmt_value(4294.2), "4294");
        assert_eq!(fmt_bytes(0), "0");
        assert_eq!(fmt_bytes(512), "512");
        assert_eq!(fmt_bytes(4096), "4 KiB");
        assert_eq!(fmt_bytes(1 << 20), "1 MiB");
        assert_eq!(fmt_bytes(1500), "1500");
    }

    #[test]
    fn tables_follow_the_workloads_order() {
        let mut r = Results::default();
        for m in ["rate", "bw", "lat"] {
            r.add(Key::new(Suite::P2p, m, 2, Some(8)), "tsunagi", 1.0);
        }
        r.add(
            Key::new(Suite::Coll, "overlap-ibcast", 2, Some(8)),
            "tsunagi",
            1.0,
        );
        r.add(
            Key::new(Suite::Coll, "allreduce", 2, Some(8)),
            "tsunagi",
            1.0,
        );
        let order: Vec<&str> = r.keys().iter().map(|k| k.metric.as_str()).collect();
        assert_eq!(order, ["lat", "bw", "rate", "allreduce", "overlap-ibcast"]);
    }

    #[test]
    fn a_fortran_kernel_sits_beside_its_c_twin_with_a_dash_where_a_contender_skipped_it() {
        let mut r = Results {
            mpis: vec![
                ("tsunagi".into(), "Tsunagi".into()),
                ("mpich".into(), "MPICH".into()),
            ],
            ..Default::default()
        };
        for m in ["MG.A", "CG.A Fortran", "EP.A", "CG.A"] {
            r.add(Key::new(Suite::Kernel, m, 2, None), "mpich", 2.0);
            if !m.ends_with("Fortran") {
                r.add(Key::new(Suite::Kernel, m, 2, None), "tsunagi", 1.0);
            }
        }
        let order: Vec<&str> = r.keys().iter().map(|k| k.metric.as_str()).collect();
        assert_eq!(order, ["CG.A", "CG.A Fortran", "EP.A", "MG.A"]);
        let md = r.markdown("");
        let row = md
            .lines()
            .find(|l| l.starts_with("| CG.A Fortran | 2 |"))
            .expect("a row for the Fortran kernel");
        assert!(row.contains("| – | 2.000 |"), "{row}");
    }
}
