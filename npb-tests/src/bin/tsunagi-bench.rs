//! `tsunagi-bench`: Tsunagi beside MPICH and Open MPI on this machine, in one run.
//!
//! Builds the workloads once per MPI with its own mpicc (the Fortran kernels with its own
//! mpifort; an MPI without one skips them, with a note), runs them interleaved (every case
//! on every MPI in turn, repetition after repetition, so a noisy machine's drift spreads
//! over all contenders), and writes results.md, results.csv, samples.csv and PNG plots.
//! See `tsunagi-bench --help` and docs/performance.md.

use clap::{Parser, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tsunagi_npb_tests::metric::{self, Suite};
use tsunagi_npb_tests::mpis::{Mpi, KNOWN};
use tsunagi_npb_tests::report::{Failure, Results};
use tsunagi_npb_tests::workloads::{self, Case, PlanConfig, Reader, ALL_KERNELS};
use tsunagi_npb_tests::{plot, runner};

#[derive(Clone, Copy, Debug, PartialEq, ValueEnum)]
enum SuiteArg {
    /// latency, bandwidth, bidirectional bandwidth, message rate (2 ranks)
    P2p,
    /// every blocking collective over sizes, and non-blocking overlap
    Coll,
    /// one-sided put/get/accumulate latency and put/get bandwidth, fence and lock (2 ranks)
    Rma,
    /// NPB EP, IS, CG, MG, FT, Himeno, and CG and MG in Fortran (cg-f, mg-f)
    Kernels,
}

/// Run MPI benchmarks under Tsunagi, MPICH and Open MPI, interleaved, and report medians,
/// ranges and ratios as Markdown, CSV and PNG plots.
#[derive(Parser, Debug)]
#[command(name = "tsunagi-bench", version)]
struct Args {
    /// Tsunagi's install prefix (bin/mpicc, bin/mpirun); default: the prefix this program
    /// is installed in.
    #[arg(long)]
    prefix: Option<PathBuf>,
    /// Contenders, comma-separated: tsunagi, mpich, openmpi [default: all that are installed]
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Suites to run, comma-separated [default: all]
    #[arg(long, value_delimiter = ',')]
    suite: Vec<SuiteArg>,
    /// Repetitions of every case on every contender [default: 5, --quick: 1]
    #[arg(short = 'r', long)]
    reps: Option<u32>,
    /// A sweep of about a minute: small sizes, 2 ranks, class S, one repetition
    #[arg(long)]
    quick: bool,
    /// Rank counts for the collectives [default: 2,4,8; --quick: 2]
    #[arg(long, value_delimiter = ',')]
    coll_ranks: Vec<u32>,
    /// Rank counts for the kernels [default: 1,2,4; --quick: 2]
    #[arg(long, value_delimiter = ',')]
    kernel_ranks: Vec<u32>,
    /// NPB class S, W or A; Himeno runs XS, S or M with it [default: A; --quick: S]
    #[arg(long)]
    class: Option<char>,
    /// Kernels, comma-separated: ep, is, cg, mg, ft, himeno, cg-f, mg-f (the last two in
    /// Fortran, built with each MPI's mpifort; MPIs without one skip them) [default: all]
    #[arg(long, value_delimiter = ',')]
    kernels: Vec<String>,
    /// Largest collective message in bytes [default: 1048576; --quick: 4096]
    #[arg(long)]
    coll_max: Option<u64>,
    /// Tsunagi's progress engine: polling or threaded [default: Tsunagi's own default]
    #[arg(long)]
    progress: Option<String>,
    /// Output directory for results.md, results.csv, samples.csv, plots, logs and builds
    #[arg(long, default_value = "tsunagi-bench-results")]
    out: PathBuf,
    /// Skip the PNG plots
    #[arg(long)]
    no_plots: bool,
    /// Redraw the plots of an earlier run from DIR/samples.csv, and run nothing
    #[arg(long, value_name = "DIR")]
    replot: Option<PathBuf>,
    /// Seconds a single run may take before it is ended and counted as failed
    #[arg(long, default_value_t = 900)]
    timeout: u64,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match bench(args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("tsunagi-bench: {e}");
            ExitCode::from(2)
        }
    }
}

/// The directory holding this program.
fn own_dir() -> Option<PathBuf> {
    Some(std::env::current_exe().ok()?.parent()?.to_path_buf())
}

/// The prefix this program is installed in, if it holds Tsunagi's mpicc and mpirun.
fn own_prefix() -> Option<PathBuf> {
    let prefix = own_dir()?.parent()?.to_path_buf();
    let ok = ["mpicc", "mpirun"]
        .iter()
        .all(|t| prefix.join("bin").join(t).is_file());
    ok.then_some(prefix)
}

fn contenders(args: &Args) -> Result<Vec<Mpi>, String> {
    let wanted: Vec<String> = if args.only.is_empty() {
        KNOWN.iter().map(|s| s.to_string()).collect()
    } else {
        args.only.clone()
    };
    if let Some(p) = args
        .progress
        .as_deref()
        .filter(|p| !matches!(*p, "polling" | "threaded"))
    {
        return Err(format!("--progress {p}: use polling or threaded"));
    }
    let mut mpis = Vec::new();
    for id in &wanted {
        let mpi = match id.as_str() {
            "tsunagi" => {
                let prefix = match &args.prefix {
                    Some(p) => p.clone(),
                    None => own_prefix().ok_or(
                        "cannot tell where Tsunagi is installed: give --prefix (the directory \
                         holding bin/mpicc and bin/mpirun)",
                    )?,
                };
                let prefix = prefix
                    .canonicalize()
                    .map_err(|e| format!("--prefix {}: {e}", prefix.display()))?;
                Mpi::tsunagi(&prefix, own_dir().as_deref(), args.progress.as_deref())
            }
            "mpich" => Mpi::mpich(),
            "openmpi" => Mpi::openmpi(),
            other => {
                return Err(format!(
                    "--only: unknown MPI '{other}' (known: {})",
                    KNOWN.join(", ")
                ))
            }
        };
        match mpi.available() {
            Ok(()) => mpis.push(mpi),
            // Asked for by name: its absence is an error; by default: a note.
            Err(e) if !args.only.is_empty() => return Err(e),
            Err(e) => eprintln!("tsunagi-bench: leaving out {e}"),
        }
    }
    if mpis.is_empty() {
        return Err("no MPI to run".into());
    }
    Ok(mpis)
}

fn plan(args: &Args) -> Result<(PlanConfig, u32), String> {
    let q = args.quick;
    let suites: Vec<Suite> = if args.suite.is_empty() {
        vec![Suite::P2p, Suite::Coll, Suite::Rma, Suite::Kernel]
    } else {
        args.suite
            .iter()
            .map(|s| match s {
                SuiteArg::P2p => Suite::P2p,
                SuiteArg::Coll => Suite::Coll,
                SuiteArg::Rma => Suite::Rma,
                SuiteArg::Kernels => Suite::Kernel,
            })
            .collect()
    };
    let class = args
        .class
        .unwrap_or(if q { 'S' } else { 'A' })
        .to_ascii_uppercase();
    if !matches!(class, 'S' | 'W' | 'A') {
        return Err(format!("--class {class}: use S, W or A"));
    }
    let kernels: Vec<String> = if args.kernels.is_empty() {
        ALL_KERNELS.iter().map(|s| s.to_string()).collect()
    } else {
        args.kernels.iter().map(|k| k.to_lowercase()).collect()
    };
    if let Some(k) = kernels.iter().find(|k| !ALL_KERNELS.contains(&k.as_str())) {
        return Err(format!(
            "--kernels: unknown kernel '{k}' (known: {})",
            ALL_KERNELS.join(", ")
        ));
    }
    let or = |v: &Vec<u32>, full: &[u32], quick: &[u32]| -> Vec<u32> {
        if !v.is_empty() {
            v.clone()
        } else if q {
            quick.to_vec()
        } else {
            full.to_vec()
        }
    };
    let coll_ranks = or(&args.coll_ranks, &[2, 4, 8], &[2]);
    let kernel_ranks = or(&args.kernel_ranks, &[1, 2, 4], &[2]);
    if coll_ranks.iter().chain(&kernel_ranks).any(|&n| n == 0) {
        return Err("rank counts must be at least 1".into());
    }
    let coll_ranks = coll_ranks.into_iter().filter(|&n| n >= 2).collect();
    let reps = args.reps.unwrap_or(if q { 1 } else { 5 });
    if reps == 0 {
        return Err("--reps must be at least 1".into());
    }
    let cfg = PlanConfig {
        suites,
        p2p_max: if q { 65536 } else { 4 << 20 },
        p2p_target: if q { 0.02 } else { 0.2 },
        coll_ranks,
        coll_max: args
            .coll_max
            .unwrap_or(if q { 4096 } else { 1 << 20 })
            .max(8),
        coll_target: if q { 0.005 } else { 0.05 },
        kernel_ranks,
        class,
        kernels,
    };
    Ok((cfg, reps))
}

fn replot(dir: &Path) -> Result<bool, String> {
    let csv = dir.join("samples.csv");
    let text = std::fs::read_to_string(&csv).map_err(|e| format!("{}: {e}", csv.display()))?;
    let results = Results::from_samples_csv(&text)?;
    plot::load_font(Path::new(plot::FONT_PATH))?;
    let files = plot::draw_all(&results, dir).map_err(|e| format!("plotting: {e}"))?;
    eprintln!(
        "tsunagi-bench: drew {} plot(s) into {}",
        files.len(),
        dir.display()
    );
    Ok(true)
}

fn bench(args: Args) -> Result<bool, String> {
    if let Some(dir) = &args.replot {
        return replot(dir);
    }
    let started = utc_now();
    let mpis = contenders(&args)?;
    let (cfg, reps) = plan(&args)?;
    let cases = cfg.cases();
    let out = &args.out;
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let out = out
        .canonicalize()
        .map_err(|e| format!("{}: {e}", out.display()))?;
    let src = out.join("src");
    workloads::write_sources(&src).map_err(|e| format!("{}: {e}", src.display()))?;

    let wants_fortran = cases.iter().any(|c| c.fortran);
    let mut versions = Vec::new();
    // Per contender: whether its Fortran kernels were built; why not, for the report.
    let mut fortran_ok = Vec::new();
    let mut notes = Vec::new();
    let mut build_failures = Vec::new();
    for mpi in &mpis {
        let build = out.join("build").join(mpi.id);
        eprintln!("tsunagi-bench: building the workloads with {}", mpi.mpicc);
        mpi.build(&src, &build)?;
        versions.push(format!("{} ({})", mpi.label, mpi.version()));
        if !wants_fortran {
            fortran_ok.push(false);
            continue;
        }
        let built = match mpi.fortran_available() {
            Err(why) => {
                eprintln!("tsunagi-bench: {why}");
                notes.push(why);
                false
            }
            Ok(()) => {
                eprintln!(
                    "tsunagi-bench: building the Fortran kernels with {}",
                    mpi.mpifort
                );
                match mpi.build_fortran(&src, &build) {
                    Ok(()) => true,
                    Err(why) => {
                        // A wrapper that exists but cannot build them is a failure of
                        // the run (reported at the end), not a reason to stop the others.
                        eprintln!("tsunagi-bench: {why}");
                        notes.push(format!(
                            "{}: the Fortran kernels did not build; they are skipped for it",
                            mpi.label
                        ));
                        build_failures.push(Failure {
                            mpi: mpi.id.to_string(),
                            case: "Fortran build".into(),
                            rep: 0,
                            why: why.lines().next().unwrap_or("").to_string(),
                        });
                        false
                    }
                }
            }
        };
        fortran_ok.push(built);
    }
    let runs = workloads::schedule(&cases, &fortran_ok);
    if runs.is_empty() {
        return Err(if notes.is_empty() {
            "nothing to run: the plan is empty".to_string()
        } else {
            format!(
                "nothing to run: the cases asked for need a Fortran wrapper no chosen MPI has \
                 ({})",
                notes.join("; ")
            )
        });
    }

    let mut results = Results {
        mpis: mpis
            .iter()
            .map(|m| (m.id.to_string(), m.label.to_string()))
            .collect(),
        failures: build_failures,
        ..Default::default()
    };
    let total = reps as u64 * runs.len() as u64;
    let bar = ProgressBar::new(total).with_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg} (eta {eta})")
            .expect("the template is valid")
            .progress_chars("=> "),
    );
    let limit = Duration::from_secs(args.timeout);
    for rep in 1..=reps {
        for &(c, m) in &runs {
            let (case, mpi) = (&cases[c], &mpis[m]);
            bar.set_message(format!("{} {} rep {rep}/{reps}", mpi.label, case.label));
            let program = out.join("build").join(mpi.id).join(&case.program);
            let cmd = mpi.command(case.ranks, &program, &case.args);
            let log = out
                .join("logs")
                .join(mpi.id)
                .join(format!("{}.r{rep}", case.label));
            let outcome = runner::run(&cmd, &mpi.env, &log, limit)
                .map_err(|e| format!("cannot start {}: {e}", cmd[0]))?;
            if let Err(why) = record(&mut results, mpi, case, &outcome) {
                let f = Failure {
                    mpi: mpi.id.to_string(),
                    case: case.label.clone(),
                    rep,
                    why: format!("{why} (log {})", log.display()),
                };
                bar.println(format!(
                    "tsunagi-bench: {} {} repetition {rep} failed: {}",
                    f.mpi, f.case, f.why
                ));
                results.failures.push(f);
            }
            bar.inc(1);
        }
    }
    bar.finish_and_clear();

    let preamble = preamble(&started, &mpis, &versions, reps, &notes);
    let md = results.markdown(&preamble);
    let write = |name: &str, text: &str| {
        std::fs::write(out.join(name), text)
            .map_err(|e| format!("{}: {e}", out.join(name).display()))
    };
    let mut plots = Vec::new();
    if !args.no_plots {
        match plot::load_font(Path::new(plot::FONT_PATH)) {
            Ok(()) => {
                plots = plot::draw_all(&results, &out).map_err(|e| format!("plotting: {e}"))?;
            }
            Err(e) => eprintln!(
                "tsunagi-bench: no plots, the font is missing: {e} (Debian: fonts-dejavu-core)"
            ),
        }
    }
    let mut md = md;
    if !plots.is_empty() {
        md.push_str("\n## Plots\n\n");
        for p in &plots {
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            md.push_str(&format!("![{name}]({name})\n"));
        }
    }
    write("results.md", &md)?;
    write(
        "results.csv",
        &results.summary_csv().map_err(|e| e.to_string())?,
    )?;
    write(
        "samples.csv",
        &results.samples_csv().map_err(|e| e.to_string())?,
    )?;
    print!("{md}");
    eprintln!(
        "tsunagi-bench: wrote {}/results.md, results.csv, samples.csv and {} plot(s)",
        out.display(),
        plots.len()
    );
    Ok(results.failures.is_empty())
}

/// Turn one run's outcome into samples, or say why it counts as failed.
fn record(
    results: &mut Results,
    mpi: &Mpi,
    case: &Case,
    outcome: &runner::RunOutcome,
) -> Result<(), String> {
    if !outcome.succeeded() {
        return Err(outcome.failure());
    }
    match &case.reader {
        Reader::Micro => {
            let points = metric::parse_micro(case.suite, case.ranks, &outcome.stdout);
            if points.is_empty() {
                return Err("no measurements in the output".into());
            }
            for (key, v) in points {
                results.add(key, mpi.id, v);
            }
        }
        Reader::Npb { name } => {
            let r = metric::parse_npb(&outcome.stdout)?;
            results.add(
                metric::Key::new(Suite::Kernel, name, case.ranks, None),
                mpi.id,
                r.seconds,
            );
        }
        Reader::Himeno { name, expect } => {
            let r = metric::parse_himeno(&outcome.stdout, *expect)?;
            if let Some(res) = r.exact_residual {
                results
                    .residuals
                    .entry(name.clone())
                    .or_default()
                    .insert(res);
            }
            results.add(
                metric::Key::new(Suite::Kernel, name, case.ranks, None),
                mpi.id,
                r.seconds,
            );
        }
    }
    Ok(())
}

fn preamble(
    started: &str,
    mpis: &[Mpi],
    versions: &[String],
    reps: u32,
    notes: &[String],
) -> String {
    let cmdline: Vec<String> = std::env::args().collect();
    let tsunagi_env: Vec<String> = mpis
        .iter()
        .flat_map(|m| m.env.iter())
        .filter(|(k, _)| k.starts_with("TSUNAGI_"))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let launchers: Vec<String> = mpis
        .iter()
        .map(|m| format!("`{} -n N`", m.launcher.join(" ")))
        .collect();
    format!(
        "# tsunagi-bench results\n\n\
         Started {started} with `{}`.\n\n\
         - Machine: {}\n\
         - MPIs: {}\n\
         - Launchers: {}{}\n\
         - Method: each repetition runs every case on every MPI in turn (interleaved), {reps} \
           repetition{}; medians with the observed range. Workloads: npb-tests/bench/p2p.c, \
           npb-tests/bench/coll.c, npb-tests/bench/rma.c (their header comments define each \
           measurement), the NPB \
           kernels and Himeno of npb-tests/, all built with each MPI's own mpicc, and the \
           Fortran kernels (cg-f, mg-f: NPB CG and MG with mpif.h) with each MPI's own \
           mpifort.\n{}",
        cmdline.join(" "),
        machine(),
        versions.join(", "),
        launchers.join(", "),
        if tsunagi_env.is_empty() {
            String::new()
        } else {
            format!(" (Tsunagi with {})", tsunagi_env.join(" "))
        },
        if reps == 1 { "" } else { "s" },
        notes
            .iter()
            .map(|n| format!("- Not run: {n}\n"))
            .collect::<String>(),
    )
}

/// CPU model, cores, memory, kernel and OS, from /proc and /etc/os-release.
fn machine() -> String {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let field = |text: &str, name: &str| -> Option<String> {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_once([':', '=']))
            .map(|(_, v)| v.trim().trim_matches('"').to_string())
    };
    let cpu = field(&read("/proc/cpuinfo"), "model name").unwrap_or("unknown CPU".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let mem_kib: f64 = field(&read("/proc/meminfo"), "MemTotal")
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    let kernel = read("/proc/sys/kernel/osrelease").trim().to_string();
    let os = field(&read("/etc/os-release"), "PRETTY_NAME").unwrap_or_default();
    format!(
        "{cpu}, {cores} cores, {:.0} GiB, Linux {kernel}, {os}",
        mem_kib / 1048576.0
    )
}

/// The current UTC time as `YYYY-MM-DD HH:MM UTC` (civil date from days since 1970).
fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = ((secs / 86400) as i64, secs % 86400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60
    )
}
