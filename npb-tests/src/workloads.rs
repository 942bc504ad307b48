//! The C and Fortran workloads (embedded, so an installed harness carries its own sources)
//! and the run plan: which program runs with which arguments on how many ranks, and which
//! contenders can run it.

use crate::metric::Suite;
use std::path::Path;

/// One source file of a workload.
pub struct Source {
    pub name: &'static str,
    pub text: &'static str,
}

macro_rules! sources {
    ($($name:literal => $path:literal),* $(,)?) => {
        &[$(Source { name: $name, text: include_str!($path) }),*]
    };
}

/// Everything the builds need, written into one directory. The NPB kernels and Himeno are
/// built by their Makefile (the Fortran kernels by its `fortran` target); the
/// micro-benchmarks are single files.
pub const SOURCES: &[Source] = sources! {
    "Makefile" => "../Makefile",
    "npb_common.c" => "../npb_common.c",
    "npb_common.h" => "../npb_common.h",
    "ep.c" => "../ep.c",
    "is.c" => "../is.c",
    "cg.c" => "../cg.c",
    "mg.c" => "../mg.c",
    "ft.c" => "../ft.c",
    "himeno.c" => "../himeno.c",
    "npbf_common.f90" => "../npbf_common.f90",
    "cg.f90" => "../cg.f90",
    "mg.f90" => "../mg.f90",
    "p2p.c" => "../bench/p2p.c",
    "coll.c" => "../bench/coll.c",
    "rma.c" => "../bench/rma.c",
};

/// The single-file micro-benchmarks, built with `mpicc -O2 NAME.c -o NAME`.
pub const MICRO_PROGRAMS: &[&str] = &["p2p", "coll", "rma"];

/// Write every source into `dir`.
pub fn write_sources(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for s in SOURCES {
        std::fs::write(dir.join(s.name), s.text)?;
    }
    Ok(())
}

/// How a run's output is read.
#[derive(Clone, Debug, PartialEq)]
pub enum Reader {
    /// `<metric> <bytes> <value>` lines.
    Micro,
    /// An NPB report, recorded as metric `name`.
    Npb { name: String },
    /// Himeno's report, recorded as metric `name`; `expect` is the known exact residual.
    Himeno {
        name: String,
        expect: Option<&'static str>,
    },
}

/// One program run that every contender performs in each repetition.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    pub suite: Suite,
    /// Name for logs and the progress bar, e.g. `coll-np4` or `cg-A-np2`.
    pub label: String,
    /// Program name in the contender's build directory.
    pub program: String,
    pub args: Vec<String>,
    pub ranks: u32,
    pub reader: Reader,
    /// Built with the contender's Fortran wrapper (so only contenders that have one run it).
    pub fortran: bool,
}

/// What to run.
#[derive(Clone, Debug)]
pub struct PlanConfig {
    pub suites: Vec<Suite>,
    /// Largest point-to-point message and seconds per point.
    pub p2p_max: u64,
    pub p2p_target: f64,
    pub coll_ranks: Vec<u32>,
    pub coll_max: u64,
    pub coll_target: f64,
    pub kernel_ranks: Vec<u32>,
    /// NPB class S, W or A; Himeno's size follows (XS, S, M).
    pub class: char,
    /// Subset of [`ALL_KERNELS`].
    pub kernels: Vec<String>,
}

/// Every kernel: the C ones, Himeno, then the Fortran ones ([`FORTRAN_KERNELS`]).
pub const ALL_KERNELS: &[&str] = &["ep", "is", "cg", "mg", "ft", "himeno", "cg-f", "mg-f"];

/// The kernels written in Fortran (`cg.f90`, `mg.f90`; `include 'mpif.h'` only), built
/// with each contender's own Fortran wrapper; the name is the program's.
pub const FORTRAN_KERNELS: &[&str] = &["cg-f", "mg-f"];

pub fn is_fortran(kernel: &str) -> bool {
    FORTRAN_KERNELS.contains(&kernel)
}

/// Himeno's size and iteration count for an NPB class, and the exact residual it must give
/// (recorded from runs on MPICH, Open MPI and Tsunagi at every process count).
pub fn himeno_for_class(class: char) -> (&'static str, u32, Option<&'static str>) {
    match class {
        'A' => ("M", 60, Some("9.03093966695253571e-05")),
        'W' => ("S", 100, None),
        _ => ("XS", 100, Some("1.35865048052998173e-04")),
    }
}

impl PlanConfig {
    /// The whole plan, in the order cases run within one repetition.
    pub fn cases(&self) -> Vec<Case> {
        let mut cases = Vec::new();
        if self.suites.contains(&Suite::P2p) {
            cases.push(Case {
                suite: Suite::P2p,
                label: "p2p-np2".into(),
                program: "p2p".into(),
                args: vec![self.p2p_max.to_string(), self.p2p_target.to_string()],
                ranks: 2,
                reader: Reader::Micro,
                fortran: false,
            });
        }
        if self.suites.contains(&Suite::Coll) {
            for &n in &self.coll_ranks {
                cases.push(Case {
                    suite: Suite::Coll,
                    label: format!("coll-np{n}"),
                    program: "coll".into(),
                    args: vec![self.coll_max.to_string(), self.coll_target.to_string()],
                    ranks: n,
                    reader: Reader::Micro,
                    fortran: false,
                });
            }
        }
        if self.suites.contains(&Suite::Rma) {
            cases.push(Case {
                suite: Suite::Rma,
                label: "rma-np2".into(),
                program: "rma".into(),
                args: vec![
                    self.p2p_max.min(1 << 20).to_string(),
                    self.p2p_target.to_string(),
                ],
                ranks: 2,
                reader: Reader::Micro,
                fortran: false,
            });
        }
        if self.suites.contains(&Suite::Kernel) {
            let class = self.class;
            for k in &self.kernels {
                for &n in &self.kernel_ranks {
                    let (args, reader, tag) = if k == "himeno" {
                        let (size, iters, expect) = himeno_for_class(class);
                        let name = format!("Himeno.{size}");
                        let args = vec![size.to_string(), iters.to_string()];
                        (args, Reader::Himeno { name, expect }, size.to_string())
                    } else {
                        // `CG.A`; a Fortran kernel `CG.A Fortran`, which sorts beside it.
                        let name = match k.strip_suffix("-f") {
                            Some(base) => format!("{}.{class} Fortran", base.to_uppercase()),
                            None => format!("{}.{class}", k.to_uppercase()),
                        };
                        (
                            vec![class.to_string()],
                            Reader::Npb { name },
                            class.to_string(),
                        )
                    };
                    cases.push(Case {
                        suite: Suite::Kernel,
                        label: format!("{k}-{tag}-np{n}"),
                        program: k.clone(),
                        args,
                        ranks: n,
                        reader,
                        fortran: is_fortran(k),
                    });
                }
            }
        }
        cases
    }
}

/// One repetition's runs in order, as (case index, contender index): every case on every
/// contender in turn, except Fortran cases on contenders without a Fortran build
/// (`fortran_ok[m]` false).
pub fn schedule(cases: &[Case], fortran_ok: &[bool]) -> Vec<(usize, usize)> {
    let mut runs = Vec::new();
    for (c, case) in cases.iter().enumerate() {
        for (m, &ok) in fortran_ok.iter().enumerate() {
            if ok || !case.fortran {
                runs.push((c, m));
            }
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> PlanConfig {
        PlanConfig {
            suites: vec![Suite::P2p, Suite::Coll, Suite::Kernel],
            p2p_max: 65536,
            p2p_target: 0.02,
            coll_ranks: vec![2, 4],
            coll_max: 4096,
            coll_target: 0.01,
            kernel_ranks: vec![1, 2],
            class: 'S',
            kernels: vec!["cg".into(), "himeno".into()],
        }
    }

    #[test]
    fn plan_covers_every_suite_rank_count_and_kernel() {
        let cases = config().cases();
        let labels: Vec<&str> = cases.iter().map(|c| c.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "p2p-np2",
                "coll-np2",
                "coll-np4",
                "cg-S-np1",
                "cg-S-np2",
                "himeno-XS-np1",
                "himeno-XS-np2"
            ]
        );
        assert_eq!(cases[0].args, ["65536", "0.02"]);
        assert_eq!(cases[3].args, ["S"]);
        assert_eq!(
            cases[3].reader,
            Reader::Npb {
                name: "CG.S".into()
            }
        );
        assert_eq!(cases[5].args, ["XS", "100"]);
        assert!(matches!(
            &cases[5].reader,
            Reader::Himeno { name, expect: Some(_) } if name == "Himeno.XS"
        ));
    }

    #[test]
    fn suites_can_be_left_out() {
        let mut c = config();
        c.suites = vec![Suite::Kernel];
        assert!(c.cases().iter().all(|c| c.suite == Suite::Kernel));
    }

    #[test]
    fn embedded_sources_are_the_repository_files() {
        let names: Vec<&str> = SOURCES.iter().map(|s| s.name).collect();
        for k in ALL_KERNELS.iter().chain(MICRO_PROGRAMS) {
            let file = match k.strip_suffix("-f") {
                Some(base) => format!("{base}.f90"),
                None => format!("{k}.c"),
            };
            assert!(names.contains(&file.as_str()), "{file} missing");
        }
        assert!(names.contains(&"npbf_common.f90"));
        let p2p = SOURCES.iter().find(|s| s.name == "p2p.c").unwrap();
        assert!(p2p.text.contains("MPI_Init"));
    }

    #[test]
    fn the_makefile_builds_exactly_the_fortran_kernels_the_plan_knows() {
        let make = SOURCES.iter().find(|s| s.name == "Makefile").unwrap().text;
        let line = make
            .lines()
            .find_map(|l| l.strip_prefix("FKERNELS := "))
            .expect("the Makefile lists its Fortran kernels");
        let listed: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(listed, FORTRAN_KERNELS);
        for k in FORTRAN_KERNELS {
            assert!(ALL_KERNELS.contains(k) && is_fortran(k));
        }
        assert!(!is_fortran("cg") && !is_fortran("himeno"));
        for f in ["cg.f90", "mg.f90", "npbf_common.f90"] {
            let text = SOURCES.iter().find(|s| s.name == f).unwrap().text;
            assert!(text.contains("include 'mpif.h'"), "{f} uses mpif.h");
            assert!(!text.contains("use mpi"), "{f} must need only mpif.h");
        }
    }

    #[test]
    fn fortran_kernels_are_planned_as_fortran_cases() {
        let mut c = config();
        c.suites = vec![Suite::Kernel];
        c.class = 'A';
        c.kernels = vec!["cg".into(), "mg-f".into()];
        let cases = c.cases();
        let labels: Vec<&str> = cases.iter().map(|c| c.label.as_str()).collect();
        assert_eq!(labels, ["cg-A-np1", "cg-A-np2", "mg-f-A-np1", "mg-f-A-np2"]);
        assert!(!cases[0].fortran && cases[2].fortran);
        assert_eq!(cases[2].program, "mg-f");
        assert_eq!(cases[2].args, ["A"]);
        assert_eq!(
            cases[3].reader,
            Reader::Npb {
                name: "MG.A Fortran".into()
            }
        );
    }

    #[test]
    fn the_schedule_leaves_fortran_cases_out_only_where_there_is_no_fortran() {
        let mut c = config();
        c.suites = vec![Suite::Kernel];
        c.kernel_ranks = vec![2];
        c.kernels = vec!["cg".into(), "cg-f".into()];
        let cases = c.cases();
        // Contender 0 has no Fortran wrapper, 1 and 2 have.
        assert_eq!(
            schedule(&cases, &[false, true, true]),
            [(0, 0), (0, 1), (0, 2), (1, 1), (1, 2)]
        );
        assert_eq!(schedule(&cases, &[true]), [(0, 0), (1, 0)]);
        assert_eq!(schedule(&cases, &[false]), [(0, 0)]);
        assert!(schedule(&cases, &[]).is_empty());
    }
}
