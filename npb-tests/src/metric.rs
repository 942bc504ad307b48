//! What a run's output means: the keys of measured points, their units and direction, and
//! the parsers for the workloads' output formats.

use crate::stats::Better;

/// The three families of workloads; tables and plots are grouped by them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Suite {
    /// Point-to-point between two ranks (`bench/p2p.c`).
    P2p,
    /// Collectives over sizes, and overlap (`bench/coll.c`).
    Coll,
    /// One-sided communication between two ranks (`bench/rma.c`).
    Rma,
    /// NPB kernels and Himeno: whole-program time.
    Kernel,
}

impl Suite {
    pub fn name(self) -> &'static str {
        match self {
            Suite::P2p => "p2p",
            Suite::Coll => "coll",
            Suite::Rma => "rma",
            Suite::Kernel => "kernels",
        }
    }
}

/// One measured point: e.g. (p2p, "lat", 2 ranks, 8 bytes) or (kernels, "CG.A", 4, -).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    pub suite: Suite,
    pub metric: String,
    pub ranks: u32,
    pub bytes: Option<u64>,
}

impl Key {
    pub fn new(suite: Suite, metric: &str, ranks: u32, bytes: Option<u64>) -> Key {
        Key {
            suite,
            metric: metric.to_string(),
            ranks,
            bytes,
        }
    }

    /// The unit the workloads print this metric in.
    pub fn unit(&self) -> &'static str {
        match (self.suite, self.metric.as_str()) {
            (Suite::P2p, "lat") => "µs",
            (Suite::P2p, "rate") => "Mmsg/s",
            (Suite::P2p, _) => "MB/s",
            (Suite::Coll, m) if m.starts_with("overlap-") => "%",
            (Suite::Coll, _) => "µs",
            (Suite::Rma, m) if m.contains("_lat_") => "µs",
            (Suite::Rma, _) => "MB/s",
            (Suite::Kernel, _) => "s",
        }
    }

    pub fn better(&self) -> Better {
        match self.unit() {
            "µs" | "s" => Better::Lower,
            _ => Better::Higher,
        }
    }

    /// A short human description of the metric, for table headings and plot captions.
    pub fn describe(&self) -> String {
        match (self.suite, self.metric.as_str()) {
            (Suite::P2p, "lat") => "ping-pong latency (half round trip)".into(),
            (Suite::P2p, "bw") => "streaming bandwidth (window of 64, 16 from 1 MiB)".into(),
            (Suite::P2p, "bibw") => "bidirectional bandwidth (both directions summed)".into(),
            (Suite::P2p, "rate") => "8-byte message rate".into(),
            (Suite::Coll, m) if m.starts_with("overlap-") => {
                format!("{} hidden behind computation", &m["overlap-".len()..])
            }
            (Suite::Coll, m) => format!("{m} latency (slowest rank's mean)"),
            (Suite::Rma, m) => {
                let mut f = m.splitn(3, '_');
                let (op, what, sync) = (
                    f.next().unwrap_or(""),
                    f.next().unwrap_or(""),
                    f.next().unwrap_or(""),
                );
                let sync = if sync == "lock" {
                    "MPI_Win_lock/unlock"
                } else {
                    "MPI_Win_fence"
                };
                match what {
                    "lat" => format!("{op} latency, one operation per {sync} epoch"),
                    _ => format!("{op} bandwidth, 16 operations per {sync} epoch"),
                }
            }
            (Suite::Kernel, m) => format!("{m} time to solution"),
            (_, m) => m.to_string(),
        }
    }
}

/// Parse the micro-benchmarks' lines `<metric> <bytes> <value>` (other lines are ignored,
/// so a launcher's or library's chatter does no harm).
pub fn parse_micro(suite: Suite, ranks: u32, stdout: &str) -> Vec<(Key, f64)> {
    stdout
        .lines()
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            let (metric, bytes, value) = (f.next()?, f.next()?, f.next()?);
            if f.next().is_some() || !metric.starts_with(|c: char| c.is_ascii_lowercase()) {
                return None;
            }
            let bytes: u64 = bytes.parse().ok()?;
            let value: f64 = value.parse().ok()?;
            value
                .is_finite()
                .then(|| (Key::new(suite, metric, ranks, Some(bytes)), value))
        })
        .collect()
}

/// What an NPB kernel or Himeno run reported.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelResult {
    pub seconds: f64,
    /// Himeno's order-independent residual (`Gosa (exact)`), to compare across MPIs.
    pub exact_residual: Option<String>,
}

/// Parse an NPB kernel's report: it must say `Verification = SUCCESSFUL` and give
/// `Time in seconds = T`.
pub fn parse_npb(stdout: &str) -> Result<KernelResult, String> {
    let verified = stdout.lines().any(|l| {
        let l = l.trim();
        l.starts_with("Verification") && l.ends_with("= SUCCESSFUL")
    });
    if stdout.contains("UNSUCCESSFUL") || !verified {
        return Err("verification did not succeed".into());
    }
    let seconds = value_after(stdout, "Time in seconds", '=')
        .ok_or("no 'Time in seconds' line in the output")?;
    Ok(KernelResult {
        seconds,
        exact_residual: None,
    })
}

/// Parse Himeno's report: `Time in seconds: T` and `Gosa (exact)   : R`; when `expect` is
/// given, the exact residual must equal it.
pub fn parse_himeno(stdout: &str, expect: Option<&str>) -> Result<KernelResult, String> {
    let seconds = value_after(stdout, "Time in seconds", ':')
        .ok_or("no 'Time in seconds:' line in the output")?;
    let residual = stdout
        .lines()
        .find_map(|l| {
            let rest = l.trim().strip_prefix("Gosa (exact)")?;
            Some(rest.trim_start().strip_prefix(':')?.trim().to_string())
        })
        .ok_or("no 'Gosa (exact)' line in the output")?;
    if let Some(want) = expect {
        if residual != want {
            return Err(format!(
                "residual {residual} differs from the expected {want}"
            ));
        }
    }
    Ok(KernelResult {
        seconds,
        exact_residual: Some(residual),
    })
}

fn value_after(text: &str, label: &str, sep: char) -> Option<f64> {
    text.lines().find_map(|l| {
        let rest = l.trim().strip_prefix(label)?;
        rest.trim_start().strip_prefix(sep)?.trim().parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micro_lines_become_points_and_chatter_is_ignored() {
        let out = "lat 8 0.457\nbw 1048576 4294.00\nwarning: something odd\n\
                   rate 8 3.25\nbroken line here\nlat x 1.0\n  \nbarrier 0 1.5 extra\n";
        let pts = parse_micro(Suite::P2p, 2, out);
        assert_eq!(
            pts,
            vec![
                (Key::new(Suite::P2p, "lat", 2, Some(8)), 0.457),
                (Key::new(Suite::P2p, "bw", 2, Some(1048576)), 4294.0),
                (Key::new(Suite::P2p, "rate", 2, Some(8)), 3.25),
            ]
        );
    }

    #[test]
    fn units_and_directions() {
        let k = |s, m: &str| Key::new(s, m, 2, Some(8));
        assert_eq!(k(Suite::P2p, "lat").unit(), "µs");
        assert_eq!(k(Suite::P2p, "lat").better(), Better::Lower);
        assert_eq!(k(Suite::P2p, "bibw").better(), Better::Higher);
        assert_eq!(k(Suite::P2p, "rate").unit(), "Mmsg/s");
        assert_eq!(k(Suite::Coll, "alltoall").better(), Better::Lower);
        assert_eq!(k(Suite::Coll, "overlap-iallreduce").unit(), "%");
        assert_eq!(
            k(Suite::Coll, "overlap-iallreduce").better(),
            Better::Higher
        );
        assert_eq!(k(Suite::Kernel, "EP.A").unit(), "s");
        assert_eq!(k(Suite::Rma, "put_lat_fence").unit(), "µs");
        assert_eq!(k(Suite::Rma, "get_bw_lock").unit(), "MB/s");
        assert!(k(Suite::Rma, "get_bw_lock")
            .describe()
            .contains("MPI_Win_lock"));
    }

    const NPB_OK: &str = "\n CG Benchmark Completed.\n Class           =            S\n \
        Time in seconds =        0.123\n Total processes =            2\n \
        Mop/s total     =       543.21\n Verification = SUCCESSFUL\n";

    #[test]
    fn npb_report_needs_successful_verification() {
        assert_eq!(parse_npb(NPB_OK).unwrap().seconds, 0.123);
        let bad = NPB_OK.replace("= SUCCESSFUL", "= UNSUCCESSFUL");
        assert!(parse_npb(&bad).is_err());
        assert!(parse_npb(" Time in seconds = 1.0\n").is_err());
        let no_time = NPB_OK.replace("Time in seconds", "Elapsed");
        assert!(parse_npb(&no_time).unwrap_err().contains("Time in seconds"));
    }

    /// What the Fortran kernels (npbf_common.f90's npbf_report) print, verbatim.
    const NPB_FORTRAN: &str = "   15         3.45885818924688E-13  1.7130235054030E+01\n \
        zeta =   1.7130235054030E+01  reference =   1.7130235054029E+01  error =  5.226E-14\n\n \
        CG Benchmark Completed.\n Class           =            A\n \
        Size            =        14000\n Iterations      =           15\n \
        Time in seconds =        3.599\n Total processes =            2\n \
        Mop/s total     =       415.91\n Mop/s/process   =       207.96\n \
        Operation type  = floating point\n Language        = Fortran (mpif.h)\n \
        Verification = SUCCESSFUL\n";

    #[test]
    fn fortran_kernel_report_parses_like_the_c_one() {
        assert_eq!(parse_npb(NPB_FORTRAN).unwrap().seconds, 3.599);
        let bad = NPB_FORTRAN.replace("= SUCCESSFUL", "= UNSUCCESSFUL");
        assert!(parse_npb(&bad).is_err());
    }

    const HIMENO: &str = " Loop executed for 100 times\n \
        Gosa (float, summation-order dependent) : 1.358650481e-04\n \
        Gosa (exact)   : 1.35865048052998173e-04\n Processes      : 2\n \
        Time in seconds: 0.456\n MFLOPS measured: 1234.50\n";

    #[test]
    fn himeno_report_gives_time_and_exact_residual() {
        let r = parse_himeno(HIMENO, Some("1.35865048052998173e-04")).unwrap();
        assert_eq!(r.seconds, 0.456);
        assert_eq!(r.exact_residual.as_deref(), Some("1.35865048052998173e-04"));
        assert!(parse_himeno(HIMENO, Some("1.0e-04")).is_err());
        assert!(parse_himeno(HIMENO, None).is_ok());
        assert!(parse_himeno(" Time in seconds: 1.0\n", None).is_err());
    }
}
