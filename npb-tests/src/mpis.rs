//! The contenders: Tsunagi (an install prefix), Debian's MPICH and Open MPI. Each builds the
//! workloads with its own `mpicc` (and the Fortran kernels with its own `mpifort`, when it
//! has one) and starts them with its own launcher.

use crate::workloads::{FORTRAN_KERNELS, MICRO_PROGRAMS};
use std::path::{Path, PathBuf};
use std::process::Command;

/// One MPI implementation as the harness uses it.
#[derive(Clone, Debug)]
pub struct Mpi {
    /// `tsunagi`, `mpich` or `openmpi`: for `--only`, file names and the CSV.
    pub id: &'static str,
    /// Column heading, e.g. `Tsunagi`, `MPICH`.
    pub label: &'static str,
    pub mpicc: String,
    /// Fortran wrapper for the Fortran kernels; a contender without one skips them.
    pub mpifort: String,
    /// Launcher and its options; `-n N` and the program follow.
    pub launcher: Vec<String>,
    /// Environment for every run.
    pub env: Vec<(String, String)>,
}

pub const KNOWN: &[&str] = &["tsunagi", "mpich", "openmpi"];

fn running_as_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

impl Mpi {
    /// Tsunagi installed under `prefix` (bin/mpicc, bin/mpirun). `progress` selects the
    /// progress engine (`polling` or `threaded`) through TSUNAGI_PROGRESS.
    /// `mpirun` is taken from `mpirun_dir` when the prefix has none (a build tree's C
    /// prefix holds only the compiler wrappers and the library; mpirun sits beside
    /// tsunagi-bench in cargo's target directory).
    pub fn tsunagi(prefix: &Path, mpirun_dir: Option<&Path>, progress: Option<&str>) -> Mpi {
        let bin = prefix.join("bin");
        let mpirun = match mpirun_dir {
            Some(d) if !bin.join("mpirun").is_file() => d.join("mpirun"),
            _ => bin.join("mpirun"),
        };
        let mut env = Vec::new();
        if let Some(p) = progress {
            env.push(("TSUNAGI_PROGRESS".to_string(), p.to_string()));
        }
        Mpi {
            id: "tsunagi",
            label: "Tsunagi",
            mpicc: bin.join("mpicc").display().to_string(),
            mpifort: bin.join("mpifort").display().to_string(),
            launcher: vec![mpirun.display().to_string()],
            env,
        }
    }

    /// Debian's MPICH under its Hydra launcher.
    pub fn mpich() -> Mpi {
        Mpi {
            id: "mpich",
            label: "MPICH",
            mpicc: "mpicc.mpich".into(),
            mpifort: "mpifort.mpich".into(),
            launcher: vec!["mpiexec.hydra".into()],
            env: Vec::new(),
        }
    }

    /// Debian's Open MPI, on its shared-memory path (pml ob1, btl vader): Debian builds it
    /// with UCX too, and UCX's selection varies with the machine; ob1/vader is the path
    /// Open MPI itself uses on a node without a fabric. Oversubscription is allowed, since
    /// the benchmarks run more ranks than cores.
    pub fn openmpi() -> Mpi {
        let mut launcher: Vec<String> = ["mpirun.openmpi", "--oversubscribe", "--mca", "pml"]
            .iter()
            .chain(&["ob1", "--mca", "btl", "self,vader"])
            .map(|s| s.to_string())
            .collect();
        let mut env = Vec::new();
        if running_as_root() {
            launcher.insert(1, "--allow-run-as-root".into());
            env.push(("OMPI_ALLOW_RUN_AS_ROOT".into(), "1".into()));
            env.push(("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM".into(), "1".into()));
        }
        Mpi {
            id: "openmpi",
            label: "Open MPI",
            mpicc: "mpicc.openmpi".into(),
            mpifort: "mpifort.openmpi".into(),
            launcher,
            env,
        }
    }

    /// Whether this MPI's compiler and launcher can be found.
    pub fn available(&self) -> Result<(), String> {
        for tool in [&self.mpicc, &self.launcher[0]] {
            if which(tool).is_none() {
                return Err(format!("{}: `{tool}` not found", self.label));
            }
        }
        Ok(())
    }

    /// Whether this MPI's Fortran wrapper can be found; the error says what is missing and
    /// that the Fortran kernels are left out for this MPI.
    pub fn fortran_available(&self) -> Result<(), String> {
        if which(&self.mpifort).is_some() {
            Ok(())
        } else {
            Err(format!(
                "{}: no Fortran wrapper (`{}` not found); the Fortran kernels ({}) are skipped \
                 for it",
                self.label,
                self.mpifort,
                FORTRAN_KERNELS.join(", ")
            ))
        }
    }

    /// The launcher's own idea of its version, for the report (first line naming one).
    pub fn version(&self) -> String {
        let out = Command::new(&self.launcher[0])
            .arg("--version")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .output();
        let text = match out {
            Ok(o) => String::from_utf8_lossy(&o.stdout).into_owned(),
            Err(e) => return format!("unknown ({e})"),
        };
        text.lines()
            .map(str::trim)
            .find(|l| l.contains("Version:") || l.chars().any(|c| c.is_ascii_digit()))
            .unwrap_or("unknown")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The command line that runs `program` on `ranks` ranks.
    pub fn command(&self, ranks: u32, program: &Path, args: &[String]) -> Vec<String> {
        let mut cmd = self.launcher.clone();
        cmd.push("-n".into());
        cmd.push(ranks.to_string());
        cmd.push(program.display().to_string());
        cmd.extend(args.iter().cloned());
        cmd
    }

    /// Build every workload from `src` into `build` with this MPI's compiler: the
    /// micro-benchmarks directly, the kernels through their Makefile.
    pub fn build(&self, src: &Path, build: &Path) -> Result<(), String> {
        std::fs::create_dir_all(build).map_err(|e| format!("{}: {e}", build.display()))?;
        for p in MICRO_PROGRAMS {
            let mut cmd = Command::new(&self.mpicc);
            cmd.args(["-O2", "-o"])
                .arg(build.join(p))
                .arg(src.join(format!("{p}.c")));
            run_build(cmd, &format!("{} {p}.c", self.mpicc))?;
        }
        let mut make = Command::new("make");
        make.arg("-s")
            .arg("-C")
            .arg(src)
            .arg(format!("MPICC={}", self.mpicc))
            .arg(format!("BUILD={}", build.display()));
        run_build(make, &format!("make (NPB with {})", self.mpicc))
    }

    /// Build the Fortran kernels from `src` into `build` with this MPI's Fortran wrapper
    /// (the Makefile's `fortran` target).
    pub fn build_fortran(&self, src: &Path, build: &Path) -> Result<(), String> {
        std::fs::create_dir_all(build).map_err(|e| format!("{}: {e}", build.display()))?;
        let mut make = Command::new("make");
        make.arg("-s")
            .arg("-C")
            .arg(src)
            .arg("fortran")
            .arg(format!("MPIFC={}", self.mpifort))
            .arg(format!("BUILD={}", build.display()));
        run_build(make, &format!("make fortran (NPB with {})", self.mpifort))
    }
}

fn run_build(mut cmd: Command, what: &str) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("{what}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what} failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// `tool` as an existing path, or found on PATH.
pub fn which(tool: &str) -> Option<PathBuf> {
    if tool.contains('/') {
        let p = PathBuf::from(tool);
        return p.is_file().then_some(p);
    }
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join(tool))
            .find(|p| p.is_file())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_lines_put_the_rank_count_before_the_program() {
        let t = Mpi::tsunagi(Path::new("/opt/tsunagi"), None, Some("threaded"));
        let cmd = t.command(4, Path::new("/w/build/tsunagi/cg"), &["A".to_string()]);
        assert_eq!(
            cmd,
            [
                "/opt/tsunagi/bin/mpirun",
                "-n",
                "4",
                "/w/build/tsunagi/cg",
                "A"
            ]
        );
        assert_eq!(t.mpicc, "/opt/tsunagi/bin/mpicc");
        assert_eq!(t.mpifort, "/opt/tsunagi/bin/mpifort");
        assert_eq!(Mpi::mpich().mpifort, "mpifort.mpich");
        assert_eq!(Mpi::openmpi().mpifort, "mpifort.openmpi");
        assert_eq!(t.env, [("TSUNAGI_PROGRESS".into(), "threaded".into())]);
        let o = Mpi::openmpi();
        let cmd = o.command(2, Path::new("p2p"), &[]);
        assert_eq!(cmd[0], "mpirun.openmpi");
        let n = cmd.iter().position(|a| a == "-n").unwrap();
        assert_eq!(&cmd[n..], ["-n", "2", "p2p"]);
        assert!(cmd.windows(2).any(|w| w == ["btl", "self,vader"]));
    }

    #[test]
    fn mpirun_comes_from_the_prefix_or_else_from_beside_the_harness() {
        let t = Mpi::tsunagi(Path::new("/nonexistent"), Some(Path::new("/t/debug")), None);
        assert_eq!(t.launcher, ["/t/debug/mpirun"]);
        assert!(t.env.is_empty());
    }

    #[test]
    fn which_finds_programs_on_path_and_rejects_missing_ones() {
        assert!(which("sh").is_some());
        assert!(which("/bin/sh").is_some());
        assert!(which("no-such-tool-tsunagi").is_none());
        let m = Mpi {
            mpicc: "no-such-mpicc".into(),
            ..Mpi::mpich()
        };
        assert!(m.available().unwrap_err().contains("no-such-mpicc"));
    }

    #[test]
    fn a_missing_fortran_wrapper_is_named_with_what_is_skipped() {
        let t = Mpi::tsunagi(Path::new("/nonexistent-prefix"), None, None);
        let e = t.fortran_available().unwrap_err();
        assert!(e.starts_with("Tsunagi: no Fortran wrapper"), "{e}");
        assert!(e.contains("/nonexistent-prefix/bin/mpifort"), "{e}");
        assert!(e.contains("cg-f, mg-f"), "{e}");
        let sh = Mpi {
            mpifort: "sh".into(),
            ..Mpi::mpich()
        };
        assert!(sh.fortran_available().is_ok());
    }

    /// The real thing: the Fortran kernels build with Debian's MPICH wrapper (skipped where
    /// MPICH's Fortran wrapper is not installed, unless CI is set).
    #[test]
    fn fortran_kernels_build_with_mpich_mpifort() {
        let m = Mpi::mpich();
        if let Err(e) = m.fortran_available() {
            assert!(std::env::var_os("CI").is_none(), "{e}");
            eprintln!("skipped: {e}");
            return;
        }
        let dir =
            std::env::temp_dir().join(format!("tsunagi-bench-fortran-{}", std::process::id()));
        let src = dir.join("src");
        crate::workloads::write_sources(&src).unwrap();
        m.build_fortran(&src, &dir.join("build")).unwrap();
        for k in FORTRAN_KERNELS {
            assert!(dir.join("build").join(k).is_file(), "{k} not built");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
