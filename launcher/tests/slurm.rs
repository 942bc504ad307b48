//! Tsunagi programs started by Slurm: `srun --mpi=pmi2` (Slurm's pmi2 plugin, which also
//! speaks PMI-1 on the task's `PMI_FD`, the protocol our client uses).
//!
//! Needs Slurm's `srun` and a running cluster: the one named by `SLURM_CONF` (or the private
//! one of `scripts/slurm-local`, which `scripts/test` starts) if `sinfo` answers, else this
//! test starts `scripts/slurm-local` itself (root only) and stops it at the end. Without
//! Slurm, or when the daemons cannot start, it prints `skipped: ...` and passes.
//!
//! Checks: MPI_Comm_spawn of 1 and 3 children through Slurm's PMI-1 spawn; the `hello`
//! and `ring` examples on 2 and 4 ranks, node locality taken from the
//! `PMI_process_mapping` Slurm publishes (no host-id exchange), a key-value exchange with
//! long values (`pmi_rank exchange`: PMI-1 requests must fit Slurm's 1024-byte reads), and
//! a C program built with our `mpicc`; and a site started by Slurm joining a site started by
//! our mpirun over IMPI (`mpirun --client` on one side, the same client settings in the
//! environment of `srun` on the other).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One test at a time: each may start (and then stop) the private cluster.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Longest any one job or command may take.
const TIMEOUT: Duration = Duration::from_secs(120);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repository root")
        .to_path_buf()
}

/// target/<profile>, found from this test binary (target/<profile>/deps/slurm-*).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>")
        .to_path_buf()
}

fn cargo_build(args: &[&str]) {
    let dir = profile_dir();
    let mut cmd = Command::new(env!("CARGO"));
    cmd.arg("build")
        .args(args)
        .arg("--target-dir")
        .arg(dir.parent().expect("target dir"))
        .current_dir(repo());
    if dir.file_name().is_some_and(|n| n == "release") {
        cmd.arg("--release");
    }
    let st = cmd.status().expect("run cargo");
    assert!(st.success(), "cargo build {args:?} failed");
}

/// An example program of `package`, built on demand (`cargo test` builds only the examples
/// of the package under test).
fn example(package: &str, name: &str) -> PathBuf {
    let p = profile_dir().join("examples").join(name);
    if !p.exists() {
        cargo_build(&["-p", package, "--example", name]);
    }
    assert!(p.exists(), "example {name} not built at {}", p.display());
    p
}

struct Output {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Output {
    fn ok(&self) -> bool {
        self.code == Some(0)
    }
}

/// Run `cmd` in a process group of its own, killed when it outlives `limit`. `Err` only
/// when it cannot start.
fn run(mut cmd: Command, limit: Duration) -> std::io::Result<Output> {
    use std::os::unix::process::CommandExt;
    use std::sync::atomic::{AtomicU32, Ordering};
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!("tsunagi-slurm-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    let (out_path, err_path) = (dir.join(format!("{n}.out")), dir.join(format!("{n}.err")));
    cmd.stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path)?)
        .stderr(std::fs::File::create(&err_path)?)
        .process_group(0);
    let mut child = cmd.spawn()?;
    let start = Instant::now();
    let code = loop {
        if let Some(st) = child.try_wait()? {
            break st.code();
        }
        if start.elapsed() > limit {
            // SAFETY: kill(2) on the process group of the child we started; no memory is
            // involved.
            unsafe {
                libc::kill(-(child.id() as i32), libc::SIGKILL);
            }
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let o = Output {
        code,
        stdout: std::fs::read_to_string(&out_path).unwrap_or_default(),
        stderr: std::fs::read_to_string(&err_path).unwrap_or_default(),
    };
    let _ = std::fs::remove_dir_all(&dir);
    Ok(o)
}

fn slurm_conf() -> PathBuf {
    if let Some(c) = std::env::var_os("SLURM_CONF") {
        return PathBuf::from(c);
    }
    let dir = std::env::var_os("TSUNAGI_SLURM_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("tsunagi-slurm"));
    dir.join("slurm.conf")
}

fn slurm_cmd(program: &str, conf: &Path) -> Command {
    let mut c = Command::new(program);
    c.env("SLURM_CONF", conf);
    // A job inherited from an outer launcher must not leak in.
    for v in [
        "PMI_FD",
        "PMI_RANK",
        "PMI_SIZE",
        "PMI_PORT",
        "PMI_ID",
        "PMI_JOBID",
        "PMI_DEBUG",
        "TSUNAGI_NODE_MAP",
    ] {
        c.env_remove(v);
    }
    c
}

/// The cluster, stopped on drop if this test started it.
struct Slurm {
    conf: PathBuf,
    started: bool,
}

impl Slurm {
    /// A cluster whose node is up, or `None` (with the reason printed) to skip.
    fn get() -> Option<Slurm> {
        // Not `srun --version`: without a configuration even that fails.
        let has_srun = std::env::var_os("PATH")
            .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join("srun").is_file()));
        if !has_srun {
            tsunagi_testkit::missing(
                "slurm",
                "Slurm is not installed (no srun; apt-get install slurm-wlm)",
            );
            return None;
        }
        let conf = slurm_conf();
        if Slurm::node_up(&conf) {
            return Some(Slurm {
                conf,
                started: false,
            });
        }
        if std::env::var_os("SLURM_CONF").is_some() {
            tsunagi_testkit::missing(
                "slurm",
                &format!(
                    "SLURM_CONF={} is set but `sinfo` shows no usable node",
                    conf.display()
                ),
            );
            return None;
        }
        let start = Command::new(repo().join("scripts/slurm-local"));
        match run(start, TIMEOUT) {
            Ok(o) if o.ok() && Slurm::node_up(&conf) => Some(Slurm {
                conf,
                started: true,
            }),
            Ok(o) => {
                tsunagi_testkit::missing(
                    "slurm",
                    &format!(
                        "no Slurm cluster running and scripts/slurm-local could not \
                         start one (exit {:?}):\n{}{}",
                        o.code, o.stdout, o.stderr
                    ),
                );
                None
            }
            Err(e) => {
                tsunagi_testkit::missing("slurm", &format!("cannot run scripts/slurm-local: {e}"));
                None
            }
        }
    }

    fn node_up(conf: &Path) -> bool {
        if !conf.exists() {
            return false;
        }
        let mut c = slurm_cmd("sinfo", conf);
        c.args(["-h", "-o", "%t"]);
        run(c, Duration::from_secs(15)).is_ok_and(|o| {
            o.ok()
                && o.stdout
                    .lines()
                    .any(|s| ["idle", "mix", "alloc"].contains(&s.trim()))
        })
    }

    /// `salloc -n <cpus> srun --mpi=pmi2 --overlap -n <n> <exe> <args>`: a job with room
    /// for what the program spawns (Slurm starts spawned processes as another step of the
    /// job; `--overlap` lets that step share the CPUs of the first).
    fn salloc_srun(&self, cpus: usize, n: usize, exe: &Path, args: &[&str]) -> Output {
        let mut c = slurm_cmd("salloc", &self.conf);
        c.args([
            "-n",
            &cpus.to_string(),
            "--time=2",
            "srun",
            "--mpi=pmi2",
            "--overlap",
        ])
        .args(["-n", &n.to_string(), "--kill-on-bad-exit=1"])
        .arg(exe)
        .args(args);
        let what = format!("salloc -n {cpus} srun -n {n} {} {args:?}", exe.display());
        let o = run(c, TIMEOUT).unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
        assert!(
            o.code.is_some(),
            "{what}: timed out after {TIMEOUT:?}\nstdout:\n{}\nstderr:\n{}",
            o.stdout,
            o.stderr
        );
        o
    }

    /// `srun --mpi=pmi2 -n <n> <exe> <args>` with extra environment.
    fn srun(&self, n: usize, exe: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut c = slurm_cmd("srun", &self.conf);
        c.args(["--mpi=pmi2", "-n", &n.to_string(), "--time=2"])
            .args(["--kill-on-bad-exit=1", "--quit-on-interrupt"])
            .arg(exe)
            .args(args);
        for (k, v) in env {
            c.env(k, v);
        }
        let what = format!("srun -n {n} {}", exe.display());
        let o = run(c, TIMEOUT).unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
        assert!(
            o.code.is_some(),
            "{what}: timed out after {TIMEOUT:?}\nstdout:\n{}\nstderr:\n{}",
            o.stdout,
            o.stderr
        );
        o
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        if self.started {
            let mut stop = Command::new(repo().join("scripts/slurm-local"));
            stop.arg("stop");
            let _ = run(stop, TIMEOUT);
        }
    }
}

/// `name:` lines ending in OK, and every rank's line for per-rank programs.
fn check(what: &str, o: &Output, prefix: &str, ok_lines: usize, per_rank: Option<usize>) {
    let ok = o
        .stdout
        .lines()
        .filter(|l| l.starts_with(prefix) && l.ends_with("OK"))
        .count();
    assert!(
        o.ok() && ok == ok_lines,
        "{what}: exit {:?}, {ok} OK lines (expected {ok_lines})\nstdout:\n{}\nstderr:\n{}",
        o.code,
        o.stdout,
        o.stderr
    );
    if let Some(n) = per_rank {
        for r in 0..n {
            assert!(
                o.stdout.contains(&format!("rank {r} of {n} ")),
                "{what}: no line from rank {r}\n{}",
                o.stdout
            );
        }
    }
}

const C_PROGRAM: &str = r#"#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
    int rank, size, sum = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (sum != size * (size - 1) / 2) {
        fprintf(stderr, "c_hello: rank %d: sum %d\n", rank, sum);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    printf("c_hello: rank %d of %d sum %d OK\n", rank, size, sum);
    MPI_Finalize();
    return 0;
}
"#;

/// The C program above built with our `mpicc` from a private prefix, or `None` (with the
/// reason printed) when no C compiler is installed.
fn c_program() -> Option<PathBuf> {
    let prefix = c_prefix()?;
    let src = prefix.join("c_hello.c");
    std::fs::write(&src, C_PROGRAM).expect("write the C program");
    Some(mpicc(&prefix, &src, "c_hello"))
}

/// Compile `src` with the prefix's `mpicc` into `prefix/<name>`.
fn mpicc(prefix: &Path, src: &Path, name: &str) -> PathBuf {
    let exe = prefix.join(name);
    let mut c = Command::new(prefix.join("bin/mpicc"));
    c.args(["-Wall", "-Werror", "-o"]).arg(&exe).arg(src);
    let o = run(c, TIMEOUT).expect("run mpicc");
    assert!(o.ok(), "mpicc failed:\n{}{}", o.stdout, o.stderr);
    exe
}

/// A private prefix with this profile's C library and `mpicc`, or `None` (with the reason
/// printed) when no C compiler is installed.
fn c_prefix() -> Option<PathBuf> {
    let has_cc = Command::new("cc")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !has_cc {
        tsunagi_testkit::missing("cc", "the C program under srun (no C compiler `cc`)");
        return None;
    }
    let dir = profile_dir();
    // The cdylib of this very profile (a no-op when fresh).
    cargo_build(&["-p", "tsunagi-c-abi", "--lib"]);
    let prefix = dir.join("slurm-c-prefix");
    let install = {
        let mut c = Command::new(repo().join("c-abi/scripts/install-c"));
        c.arg(&prefix).arg(dir.join("libmpi.so"));
        run(c, TIMEOUT).expect("run install-c")
    };
    assert!(install.ok(), "install-c failed:\n{}", install.stderr);
    Some(prefix)
}

/// MPI_Comm_spawn in a job started by `srun --mpi=pmi2`: Slurm's PMI-1 `spawn` starts the
/// children (1 and 3) as another step of the job; they find their parent, and c-abi's
/// dynproc.c runs its checks on the intercommunicator from both sides (point-to-point,
/// collectives with MPI_ROOT, merge, disconnect), and MPI_APPNUM is 0 in the children
/// (Slurm's PMI says -1).
#[test]
fn mpi_comm_spawn_under_srun() {
    let _s = serial();
    let Some(slurm) = Slurm::get() else {
        return;
    };
    let Some(prefix) = c_prefix() else {
        return;
    };
    let src = repo().join("c-abi/tests/c/dynproc.c");
    let exe = {
        let mut c = Command::new(prefix.join("bin/mpicc"));
        c.arg("-I")
            .arg(repo().join("c-abi/tests/c"))
            .args(["-std=c11", "-o"])
            .arg(prefix.join("dynproc"))
            .arg(&src);
        let o = run(c, TIMEOUT).expect("run mpicc");
        assert!(o.ok(), "mpicc dynproc.c failed:\n{}{}", o.stdout, o.stderr);
        prefix.join("dynproc")
    };
    for children in ["1", "3"] {
        let o = slurm.salloc_srun(4, 1, &exe, &["spawn", children]);
        assert!(
            o.ok() && o.stdout.contains("dynproc spawn ok"),
            "spawn of {children} under srun: exit {:?}\nstdout:\n{}\nstderr:\n{}",
            o.code,
            o.stdout,
            o.stderr
        );
    }
}

#[test]
fn programs_start_under_srun_mpi_pmi2() {
    let _s = serial();
    let Some(slurm) = Slurm::get() else {
        return;
    };
    let hello = example("tsunagi", "hello");
    let ring = example("tsunagi", "ring");
    for n in [2, 4] {
        let o = slurm.srun(n, &hello, &[], &[]);
        check(&format!("hello -n {n}"), &o, "hello:", n, Some(n));
        let o = slurm.srun(n, &ring, &[], &[]);
        check(&format!("ring -n {n}"), &o, "ring:", 1, None);
        let o = slurm.srun(n, &ring, &[], &[("TSUNAGI_PROGRESS", "threaded")]);
        check(&format!("ring -n {n} threaded"), &o, "ring:", 1, None);
    }

    // Locality from Slurm's PMI_process_mapping: one node of 4, no host-id exchange.
    let o = slurm.srun(4, &hello, &[], &[("PMI_DEBUG", "1")]);
    check("hello -n 4 PMI_DEBUG=1", &o, "hello:", 4, Some(4));
    assert!(
        o.stderr.contains("value=(vector,(0,1,4))") && !o.stderr.contains("tsunagi-host-"),
        "hello -n 4: node placement did not come from PMI_process_mapping:\n{}",
        o.stderr
    );

    // The raw PMI client: cards, long values split into parts, the mapping, barriers.
    let pmi_rank = example("tsunagi-launcher", "pmi_rank");
    let o = slurm.srun(4, &pmi_rank, &["exchange"], &[]);
    let lines = o
        .stdout
        .lines()
        .filter(|l| l.starts_with("exchange ok rank"))
        .count();
    assert!(
        o.ok() && lines == 4,
        "pmi_rank exchange -n 4: exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.code,
        o.stdout,
        o.stderr
    );

    // A failing rank ends the job rather than hanging it.
    let o = slurm.srun(2, &pmi_rank, &["1:abort=7", "barrier"], &[]);
    assert!(!o.ok(), "an aborting rank must fail the job:\n{}", o.stderr);

    if let Some(c) = c_program() {
        for n in [2, 4] {
            let o = slurm.srun(n, &c, &[], &[]);
            check(&format!("c_hello -n {n}"), &o, "c_hello:", n, Some(n));
        }
    }
}

/// One IMPI job of two sites: site 0 started by `mpirun --client 0 --server`, site 1 by
/// `srun --mpi=pmi2` with `TSUNAGI_IMPI_SERVER`/`TSUNAGI_IMPI_CLIENT` (what `mpirun
/// --client` sets), joined through `tsunagi-impi-server`. The ring runs over all 4 ranks and
/// the server sees both clients finish.
#[test]
fn a_site_started_by_slurm_joins_a_site_started_by_mpirun_over_impi() {
    use std::io::{BufRead, BufReader};
    let _s = serial();
    let Some(slurm) = Slurm::get() else {
        return;
    };
    let ring = example("tsunagi", "ring");
    let server_bin = profile_dir().join("tsunagi-impi-server");
    if !server_bin.exists() {
        cargo_build(&["-p", "tsunagi-impi", "--bin", "tsunagi-impi-server"]);
    }
    let mut server = Command::new(&server_bin)
        .args(["-server", "2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tsunagi-impi-server");
    let mut first = String::new();
    BufReader::new(server.stdout.take().expect("piped"))
        .read_line(&mut first)
        .expect("the server's first line");
    let addr = first.trim().to_string();
    assert!(
        addr.contains(':'),
        "the server printed {first:?}, not HOST:PORT"
    );

    let mut site0 = Command::new(env!("CARGO_BIN_EXE_mpirun"));
    site0
        .args(["--client", "0", "--server", &addr, "-n", "2"])
        .arg(&ring);
    for v in [
        "TSUNAGI_NODE_MAP",
        "TSUNAGI_IMPI_SERVER",
        "TSUNAGI_IMPI_CLIENT",
    ] {
        site0.env_remove(v);
    }
    let site0 = std::thread::spawn(move || run(site0, TIMEOUT));
    let slurm_site = slurm.srun(
        2,
        &ring,
        &[],
        &[("TSUNAGI_IMPI_SERVER", &addr), ("TSUNAGI_IMPI_CLIENT", "1")],
    );
    let site0 = site0.join().expect("site 0 thread").expect("run mpirun");

    // The server ends once both clients sent FINI (or is stopped after a failure).
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(st) = server.try_wait().expect("wait for the server") {
            break Some(st);
        }
        if Instant::now() > deadline {
            let _ = server.kill();
            let _ = server.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut server_err = String::new();
    if let Some(mut e) = server.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut server_err);
    }
    let report = format!(
        "site 0 (mpirun): exit {:?}\n{}{}\nsite 1 (srun): exit {:?}\n{}{}\nserver: {status:?}\n{server_err}",
        site0.code, site0.stdout, site0.stderr, slurm_site.code, slurm_site.stdout, slurm_site.stderr
    );
    assert!(site0.ok() && slurm_site.ok(), "a site failed:\n{report}");
    assert!(
        site0.stdout.contains("ring: 4 ranks") && site0.stdout.contains("OK"),
        "the ring did not run over both sites:\n{report}"
    );
    assert!(
        status.is_some_and(|s| s.success()) && server_err.contains("every client sent FINI"),
        "the server did not see both sites finish:\n{report}"
    );
}
