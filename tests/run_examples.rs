//! Build-and-run tests: every example under the Tsunagi launcher with 1, 2, 4 and 8
//! ranks in both progress modes, as a singleton (no launcher), and under MPICH's
//! `mpiexec.hydra` (PMI-1) when it is installed; plus the ping-pong benchmark's output.
//!
//! Cargo builds the examples before running integration tests; they are found next to
//! this test binary (`target/<profile>/examples`). The launcher (`mpirun`, crate
//! tsunagi-launcher) is built on demand if it is not there.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Jobs run one at a time: each may start 8 processes.
static SERIAL: Mutex<()> = Mutex::new(());

const TIMEOUT: Duration = Duration::from_secs(180);

fn profile_dir() -> PathBuf {
    // target/<profile>/deps/<this test binary>
    let exe = std::env::current_exe().expect("current exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>")
        .to_path_buf()
}

/// Run `cargo build <args>` into this test's target directory and profile.
fn cargo_build(args: &[&str]) {
    let dir = profile_dir();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let target = dir.parent().expect("target dir");
    let mut cmd = Command::new(cargo);
    cmd.arg("build")
        .args(args)
        .env("CARGO_TARGET_DIR", target)
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    if dir.file_name().is_some_and(|n| n == "release") {
        cmd.arg("--release");
    }
    let st = cmd.status().expect("run cargo");
    assert!(st.success(), "cargo build {args:?} failed");
}

/// An example's executable. `cargo test` builds the examples first, but
/// `cargo test --test run_examples` does not: then they are built here.
fn example(name: &str) -> PathBuf {
    static BUILT: OnceLock<()> = OnceLock::new();
    let p = profile_dir().join("examples").join(name);
    if !p.exists() {
        BUILT.get_or_init(|| cargo_build(&["-p", "tsunagi", "--examples"]));
    }
    assert!(
        p.exists(),
        "example {} was not built at {}",
        name,
        p.display()
    );
    p
}

fn mpirun() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let p = profile_dir().join("mpirun");
        if !p.exists() {
            cargo_build(&["-p", "tsunagi-launcher", "--bin", "mpirun"]);
        }
        assert!(p.exists(), "no launcher at {}", p.display());
        p
    })
    .clone()
}

struct Output {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Run `cmd` with a timeout (the whole process group is killed on expiry).
fn run(mut cmd: Command, what: &str) -> Output {
    let _guard = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    // A job inherited from an outer launcher must not leak in.
    for v in [
        "PMI_FD",
        "PMI_RANK",
        "PMI_SIZE",
        "PMI_PORT",
        "PMI_ID",
        "PMI_KVSNAME",
    ] {
        cmd.env_remove(v);
    }
    let dir = std::env::temp_dir().join(format!("tsunagi-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let tag = what.replace(|c: char| !c.is_ascii_alphanumeric(), "_");
    let out_path = dir.join(format!("{tag}.out"));
    let err_path = dir.join(format!("{tag}.err"));
    cmd.stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).expect("stdout file"))
        .stderr(std::fs::File::create(&err_path).expect("stderr file"));
    {
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
    }
    let start = Instant::now();
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    let code = loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            break st.code();
        }
        if start.elapsed() > TIMEOUT {
            // SAFETY: kill(2) on the process group of the child we started; no memory is
            // involved.
            unsafe {
                libc::kill(-(child.id() as i32), libc::SIGKILL);
            }
            let _ = child.wait();
            let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
            let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
            panic!("{what}: timed out after {TIMEOUT:?}\nstdout:\n{stdout}\nstderr:\n{stderr}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let o = Output {
        code,
        stdout: std::fs::read_to_string(&out_path).unwrap_or_default(),
        stderr: std::fs::read_to_string(&err_path).unwrap_or_default(),
    };
    let _ = std::fs::remove_file(&out_path);
    let _ = std::fs::remove_file(&err_path);
    o
}

/// Lines of `name`'s output that report success, expected per run of `n` ranks.
fn expected_ok_lines(name: &str, n: usize) -> usize {
    match name {
        "ring" => 1,
        _ => n,
    }
}

fn check(name: &str, n: usize, what: &str, o: &Output) {
    let ok = o
        .stdout
        .lines()
        .filter(|l| l.starts_with(&format!("{name}:")) && l.ends_with("OK"))
        .count();
    assert!(
        o.code == Some(0) && ok == expected_ok_lines(name, n),
        "{what}: exit {:?}, {ok} OK lines (expected {})\nstdout:\n{}\nstderr:\n{}",
        o.code,
        expected_ok_lines(name, n),
        o.stdout,
        o.stderr
    );
    if n > 1 && name != "ring" {
        for r in 0..n {
            assert!(
                o.stdout.contains(&format!("rank {r} ")),
                "{what}: no line from rank {r}\n{}",
                o.stdout
            );
        }
    }
}

fn launcher_matrix(name: &str) {
    launcher_ranks(name, &[1, 2, 4, 8]);
}

fn launcher_ranks(name: &str, ranks: &[usize]) {
    let exe = example(name);
    for mode in ["polling", "threaded"] {
        for &n in ranks {
            let what = format!("{name} -n {n} {mode}");
            let mut cmd = Command::new(mpirun());
            cmd.arg("-n").arg(n.to_string()).arg(&exe);
            cmd.env("TSUNAGI_PROGRESS", mode);
            let o = run(cmd, &what);
            check(name, n, &what, &o);
        }
    }
}

/// Four ranks on two pretend nodes (TSUNAGI_NODE_MAP=2): traffic between the nodes goes
/// over the socket transport.
fn two_nodes(name: &str) {
    for mode in ["polling", "threaded"] {
        let what = format!("{name} -n 4 on 2 nodes {mode}");
        let mut cmd = Command::new(mpirun());
        cmd.arg("-n").arg("4").arg(example(name));
        cmd.env("TSUNAGI_PROGRESS", mode)
            .env("TSUNAGI_NODE_MAP", "2");
        let o = run(cmd, &what);
        check(name, 4, &what, &o);
    }
}

fn singleton(name: &str) {
    for mode in ["polling", "threaded"] {
        let what = format!("{name} singleton {mode}");
        let mut cmd = Command::new(example(name));
        cmd.env("TSUNAGI_PROGRESS", mode);
        let o = run(cmd, &what);
        check(name, 1, &what, &o);
    }
}

fn hydra(name: &str) {
    let Some(hydra) = ["/usr/bin/mpiexec.hydra", "/usr/local/bin/mpiexec.hydra"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
    else {
        tsunagi_testkit::missing(
            "mpich",
            &format!("mpiexec.hydra is not installed: no MPICH launcher run of {name}"),
        );
        return;
    };
    let what = format!("{name} under mpiexec.hydra -n 4");
    let mut cmd = Command::new(hydra);
    cmd.args(["-n", "4"]).arg(example(name));
    let o = run(cmd, &what);
    check(name, 4, &what, &o);
}

macro_rules! example_tests {
    ($($name:ident),*) => {$(
        mod $name {
            #[test]
            fn launcher_1_2_4_8_ranks_both_progress_modes() {
                super::launcher_matrix(stringify!($name));
            }
            #[test]
            fn four_ranks_on_two_pretend_nodes() {
                super::two_nodes(stringify!($name));
            }
            #[test]
            fn singleton_without_launcher() {
                super::singleton(stringify!($name));
            }
            #[test]
            fn under_mpich_hydra() {
                super::hydra(stringify!($name));
            }
        }
    )*};
}

example_tests!(hello, ring, ping_pong, datatype_exchange, api_tour);

/// The collectives example: 1, 2 and 4 ranks (the collectives crate's own tests cover
/// more), on two pretend nodes (hierarchical algorithms) and as a singleton.
mod collectives {
    #[test]
    fn launcher_1_2_4_ranks_both_progress_modes() {
        super::launcher_ranks("collectives", &[1, 2, 4]);
    }
    #[test]
    fn four_ranks_on_two_pretend_nodes() {
        super::two_nodes("collectives");
    }
    #[test]
    fn singleton_without_launcher() {
        super::singleton("collectives");
    }
}

/// The intercommunicator example: 2, 3 and 4 ranks in both progress modes, and on two
/// pretend nodes (it needs two ranks, so no singleton run).
mod intercomm {
    #[test]
    fn launcher_2_3_4_ranks_both_progress_modes() {
        super::launcher_ranks("intercomm", &[2, 3, 4]);
    }
    #[test]
    fn four_ranks_on_two_pretend_nodes() {
        super::two_nodes("intercomm");
    }
}

/// One-sided communication through the safe API (windows, scoped epochs).
mod one_sided {
    #[test]
    fn launcher_1_2_4_ranks_both_progress_modes() {
        super::launcher_ranks("one_sided", &[1, 2, 4]);
    }
    #[test]
    fn four_ranks_on_two_pretend_nodes() {
        super::two_nodes("one_sided");
    }
    #[test]
    fn singleton_without_launcher() {
        super::singleton("one_sided");
    }
}

#[test]
fn pingpong_benchmark_output_format() {
    let mut cmd = Command::new(mpirun());
    cmd.args(["-n", "2"])
        .arg(env!("CARGO_BIN_EXE_tsunagi-pingpong"));
    cmd.env("TSUNAGI_BENCH_TARGET_SEC", "0.002");
    let o = run(cmd, "tsunagi-pingpong -n 2");
    assert_eq!(o.code, Some(0), "stderr:\n{}", o.stderr);
    let lines: Vec<&str> = o.stdout.lines().collect();
    let lat: Vec<usize> = vec![0, 8, 1024, 65536, 1048576, 4194304];
    let bw: Vec<usize> = vec![8, 1024, 65536, 1048576];
    assert_eq!(lines.len(), lat.len() + bw.len(), "output:\n{}", o.stdout);
    for (line, (kind, bytes)) in lines.iter().zip(
        lat.iter()
            .map(|b| ("lat", *b))
            .chain(bw.iter().map(|b| ("bw", *b))),
    ) {
        let f: Vec<&str> = line.split(' ').collect();
        assert_eq!(f.len(), 3, "line {line:?}");
        assert_eq!(f[0], kind, "line {line:?}");
        assert_eq!(f[1].parse::<usize>().ok(), Some(bytes), "line {line:?}");
        let v: f64 = f[2].parse().unwrap_or_else(|_| panic!("line {line:?}"));
        assert!(v.is_finite() && v > 0.0, "line {line:?}");
    }
}

#[test]
fn pingpong_benchmark_refuses_one_rank() {
    let cmd = Command::new(env!("CARGO_BIN_EXE_tsunagi-pingpong"));
    let o = run(cmd, "tsunagi-pingpong singleton");
    assert_ne!(o.code, Some(0));
    assert!(o.stderr.contains("needs at least 2 ranks"), "{}", o.stderr);
}

/// A rank that panics while the others wait for it ends the job at once (the Universe's
/// drop aborts instead of entering MPI_Finalize), in both progress modes: non-zero exit,
/// the panic and the abort reported, well within the test's timeout, no /dev/shm leftovers.
#[test]
fn a_panicking_rank_aborts_the_job_instead_of_hanging() {
    for mode in ["polling", "threaded"] {
        let what = format!("panic_aborts_job -n 2 {mode}");
        let mut cmd = Command::new(mpirun());
        cmd.args(["-n", "2"]).arg(example("panic_aborts_job"));
        cmd.env("TSUNAGI_PROGRESS", mode);
        let start = Instant::now();
        let o = run(cmd, &what);
        let took = start.elapsed();
        assert_eq!(o.code, Some(101), "{what}: stderr:\n{}", o.stderr);
        assert!(
            o.stderr.contains("rank 0 gives up before sending")
                && o.stderr.contains("a rank panicked; aborting the job"),
            "{what}: stderr:\n{}",
            o.stderr
        );
        assert!(took < Duration::from_secs(10), "{what}: took {took:?}");
    }
    let left: Vec<_> = std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("tsunagi-"))
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "leftover shm segments: {left:?}");
}
