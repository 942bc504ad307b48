//! Runs the `p2p_check` example as real multi-process jobs under our `mpirun` (and under
//! MPICH's `mpiexec.hydra` when installed): 1 to 8 ranks on this machine's 2 cores, both
//! progress engines, shared memory alone and shared memory mixed with the stream transport
//! (pretend nodes), and the failure paths (MPI_Abort, a rank killed by SIGKILL, a fatal
//! error), checking that nothing is left behind.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// Jobs run one at a time: they share two cores, and the orphan checks look for any rank.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// target/<profile>/ of this test binary.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test exe");
    exe.parent()
        .and_then(|d| d.parent())
        .expect("target dir")
        .to_path_buf()
}

fn ensure_built() -> (PathBuf, PathBuf) {
    let dir = target_dir();
    let mpirun = dir.join("mpirun");
    let check = dir.join("examples").join("p2p_check");
    if !mpirun.exists() || !check.exists() {
        let profile_release = dir.ends_with("release");
        let mut c = Command::new(env!("CARGO"));
        c.args([
            "build",
            "-p",
            "tsunagi-launcher",
            "-p",
            "tsunagi-core",
            "--examples",
            "--bins",
        ]);
        if profile_release {
            c.arg("--release");
        }
        let st = c.status().expect("cargo build");
        assert!(st.success(), "building mpirun and p2p_check failed");
    }
    (mpirun, check)
}

fn shm_leftovers() -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("tsunagi-"))
                .collect()
        })
        .unwrap_or_default()
}

fn run(mut cmd: Command, limit: Duration) -> (Output, Duration) {
    let start = Instant::now();
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn job");
    let pid = child.id();
    // A watchdog so a hang fails the test instead of blocking CI.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let d2 = done.clone();
    std::thread::spawn(move || {
        let t = Instant::now();
        while t.elapsed() < limit {
            if d2.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        // SAFETY: sending a signal to our own child's pid.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    });
    let out = child.wait_with_output().expect("wait job");
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    (out, start.elapsed())
}

fn job(n: usize, progress: &str, node_map: Option<&str>, tests: &[&str]) -> (Output, Duration) {
    let (mpirun, check) = ensure_built();
    let mut c = Command::new(mpirun);
    c.arg("-n").arg(n.to_string()).arg(&check).args(tests);
    c.env("TSUNAGI_PROGRESS", progress);
    match node_map {
        Some(m) => c.env("TSUNAGI_NODE_MAP", m),
        None => c.env_remove("TSUNAGI_NODE_MAP"),
    };
    run(c, Duration::from_secs(240))
}

fn assert_ok(out: &Output, tests: &[&str], what: &str) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{what}: exit {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    for t in tests {
        assert!(
            stdout.contains(&format!("OK {t}")),
            "{what}: no 'OK {t}'\nstdout:\n{stdout}\nstderr:\n{stderr}"
        );
    }
    assert!(stderr.is_empty(), "{what}: unexpected stderr:\n{stderr}");
}

const ALL: &[&str] = &["sizes", "order", "modes", "datatypes", "comms", "errors"];

#[test]
fn singleton_without_launcher() {
    let _serial = serial();
    let (_, check) = ensure_built();
    let mut c = Command::new(check);
    for v in [
        "PMI_FD",
        "PMI_PORT",
        "PMI_RANK",
        "PMI_SIZE",
        "TSUNAGI_NODE_MAP",
    ] {
        c.env_remove(v);
    }
    c.args(ALL);
    let (out, _) = run(c, Duration::from_secs(120));
    assert_ok(&out, ALL, "singleton");
}

#[test]
fn polling_1_to_8_ranks() {
    let _serial = serial();
    for n in [1usize, 2, 3, 4, 8] {
        let tests: &[&str] = if n == 8 {
            &["order", "modes", "comms", "errors", "datatypes"]
        } else {
            ALL
        };
        let (out, _) = job(n, "polling", None, tests);
        assert_ok(&out, tests, &format!("polling n={n}"));
    }
    assert!(
        shm_leftovers().is_empty(),
        "leftover /dev/shm files: {:?}",
        shm_leftovers()
    );
}

#[test]
fn threaded_1_to_8_ranks() {
    let _serial = serial();
    for n in [1usize, 2, 4, 8] {
        let tests: &[&str] = if n == 8 {
            &["order", "modes", "comms"]
        } else {
            ALL
        };
        let (out, _) = job(n, "threaded", None, tests);
        assert_ok(&out, tests, &format!("threaded n={n}"));
    }
}

/// Two pretend nodes: shared memory inside each, the stream transport between them, both
/// live at once under each engine.
#[test]
fn shm_and_stream_mixed_both_engines() {
    let _serial = serial();
    for progress in ["polling", "threaded"] {
        let (out, _) = job(4, progress, Some("2"), ALL);
        assert_ok(&out, ALL, &format!("mixed {progress}"));
        let (out, _) = job(5, progress, Some("0,1,0,1,1"), &["order", "modes", "comms"]);
        assert_ok(
            &out,
            &["order", "modes", "comms"],
            &format!("mixed interleaved {progress}"),
        );
    }
}

/// MPI_THREAD_MULTIPLE: two threads per rank make communicators from different parents at
/// once (context-id agreement must never give two live communicators one context).
#[test]
fn concurrent_communicator_creation_both_engines() {
    let _serial = serial();
    for progress in ["polling", "threaded"] {
        for map in [None, Some("2")] {
            let (out, _) = job(4, progress, map, &["mtcomms"]);
            assert_ok(&out, &["mtcomms"], &format!("mtcomms {progress} {map:?}"));
        }
    }
}

/// Random traffic with wildcard receives and rendezvous messages on 4 ranks (the soak
/// program, shortened): it used to hang for good in MPI_Waitall, whose completion check
/// was asked twice in a row by the waiting loop and answered "not yet" the second time.
#[test]
fn wildcard_rendezvous_traffic_completes_both_engines() {
    let _serial = serial();
    let (mpirun, _) = ensure_built();
    let soak = target_dir().join("examples").join("soak");
    assert!(
        soak.exists(),
        "examples/soak is built with the other examples"
    );
    for progress in ["polling", "threaded"] {
        for cma in ["1", "0"] {
            let mut c = Command::new(&mpirun);
            c.args(["-n", "4"])
                .arg(&soak)
                .args(["12000", "1048576"])
                .env("TSUNAGI_PROGRESS", progress)
                .env("TSUNAGI_SHM_CMA", cma)
                .env_remove("TSUNAGI_NODE_MAP");
            let (out, took) = run(c, Duration::from_secs(90));
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && stdout.contains("errors=0"),
                "soak {progress} cma={cma} failed after {took:?}: {stdout}{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// Issue 14: no round of random traffic may stall, under either engine. The soak program
/// (4 ranks, 16 messages per rank and round to random peers, random sizes up to 1 MiB,
/// wildcard receives) over TCP between pretend nodes (two nodes of two ranks: shm and TCP
/// in one job; four nodes of one: TCP only) and over shared memory without CMA (the
/// streamed rendezvous). The threaded engine once took 43-101 s for single rounds where
/// the polling engine's slowest took 0.6 s.
///
/// The bound, 2 s per round: on this 2-core machine loaded by ~16 runnable processes a
/// debug build's slowest round measured 0.25-0.5 s (both engines, every configuration);
/// a lost wake-up costs at least the 20 ms sleep it falls into per message and a
/// starved progress thread seconds, so the bound is 4x the worst seen and still 3x below
/// the smallest stall reported.
#[test]
fn every_round_of_random_traffic_within_bound_both_engines() {
    const BOUND_MS: f64 = 2000.0;
    let _serial = serial();
    let (mpirun, _) = ensure_built();
    let soak = target_dir().join("examples").join("soak");
    assert!(
        soak.exists(),
        "examples/soak is built with the other examples"
    );
    let configs: [(&str, &[(&str, &str)]); 3] = [
        ("tcp+shm (2 pretend nodes)", &[("TSUNAGI_NODE_MAP", "2")]),
        ("tcp (4 pretend nodes)", &[("TSUNAGI_NODE_MAP", "1")]),
        (
            "shm without CMA",
            &[("TSUNAGI_SHM_CMA", "0"), ("TSUNAGI_NODE_MAP", "4")],
        ),
    ];
    for (what, env) in configs {
        for progress in ["polling", "threaded"] {
            let mut c = Command::new(&mpirun);
            // 75 rounds of 64 messages each, up to 256 KiB: rendezvous on every
            // transport, without the debug build's minutes of filling and checking MiBs.
            c.args(["-n", "4"])
                .arg(&soak)
                .args(["4800", "262144"])
                .env("TSUNAGI_PROGRESS", progress)
                .env_remove("TSUNAGI_SHM_CMA")
                .env_remove("TSUNAGI_INTERNODE");
            for (k, v) in env {
                c.env(k, v);
            }
            let (out, took) = run(c, Duration::from_secs(120));
            let stdout = String::from_utf8_lossy(&out.stdout);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                out.status.success() && stdout.contains("errors=0"),
                "soak {what} {progress} failed after {took:?}: {stdout}{stderr}"
            );
            let slowest: f64 = stdout
                .split_whitespace()
                .find_map(|w| w.strip_prefix("slowest_round_ms="))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("soak {what} {progress}: no slowest round in {stdout}"));
            assert!(
                slowest < BOUND_MS,
                "soak {what} {progress}: a round took {slowest} ms (bound {BOUND_MS} ms): {stdout}"
            );
            eprintln!("soak {what} {progress}: slowest round {slowest} ms, job {took:?}");
        }
    }
}

/// `TSUNAGI_STALL_REPORT`: a wait longer than the threshold prints what the rank waits for.
#[test]
fn stall_report_names_what_a_wait_waits_for() {
    let _serial = serial();
    let (mpirun, _) = ensure_built();
    let soak = target_dir().join("examples").join("soak");
    let mut c = Command::new(&mpirun);
    c.args(["-n", "2"])
        .arg(&soak)
        .arg("64")
        .env("TSUNAGI_STALL_REPORT", "0.000001")
        .env_remove("TSUNAGI_NODE_MAP");
    let (out, _) = run(c, Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "soak with stall reports failed: {stderr}"
    );
    assert!(
        stderr.contains("has waited") && stderr.contains("active requests"),
        "no stall report: {stderr}"
    );
    // Without the variable, nothing is printed.
    let mut c = Command::new(&mpirun);
    c.args(["-n", "2"]).arg(&soak).arg("64");
    let (out, _) = run(c, Duration::from_secs(60));
    assert!(out.status.success());
    assert!(!String::from_utf8_lossy(&out.stderr).contains("has waited"));
}

/// Processes whose command line names `exe` (ranks of this file's jobs).
fn ranks_alive(exe: &std::path::Path) -> usize {
    let exe = exe.to_string_lossy().into_owned();
    std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
                .filter(|e| {
                    std::fs::read(e.path().join("cmdline"))
                        .map(|c| c.split(|&b| b == 0).next() == Some(exe.as_bytes()))
                        .unwrap_or(false)
                })
                .count()
        })
        .unwrap_or(0)
}

/// SIGKILL to mpirun at any moment of start-up (while the node leader creates the shared
/// segment, while the others attach) leaves nothing in /dev/shm: the segment is a memfd
/// that never has a name there.
#[test]
fn sigkill_to_mpirun_during_start_up_leaves_nothing_in_dev_shm() {
    let _serial = serial();
    let (mpirun, check) = ensure_built();
    let before = shm_leftovers();
    for (i, delay_ms) in [0u64, 2, 5, 10, 20, 40, 80, 160].into_iter().enumerate() {
        let mut c = Command::new(&mpirun);
        c.args(["-n", "4"]).arg(&check).arg("order");
        if i % 2 == 1 {
            c.env("TSUNAGI_NODE_MAP", "2");
        }
        let mut child = c
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn mpirun");
        std::thread::sleep(Duration::from_millis(delay_ms));
        child.kill().expect("SIGKILL mpirun");
        child.wait().expect("reap mpirun");
        // The ranks die with mpirun (PR_SET_PDEATHSIG); give them a moment.
        let t = Instant::now();
        while ranks_alive(&check) > 0 && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(
            ranks_alive(&check),
            0,
            "ranks outlived mpirun (delay {delay_ms} ms)"
        );
        let now: Vec<String> = shm_leftovers()
            .into_iter()
            .filter(|n| !before.contains(n))
            .collect();
        assert!(
            now.is_empty(),
            "left in /dev/shm after SIGKILL at {delay_ms} ms: {now:?}"
        );
    }
}

fn assert_failed_cleanly(out: &Output, took: Duration, what: &str, expect: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{what}: job should fail");
    assert!(took < Duration::from_secs(20), "{what}: took {took:?}");
    assert!(
        stderr.contains(expect),
        "{what}: stderr lacks '{expect}':\n{stderr}"
    );
    // No rank of the job may survive it. Only this build's program counts: other
    // checkouts on the machine may run their own p2p_check jobs meanwhile.
    let left = ranks_alive(&ensure_built().1);
    assert_eq!(left, 0, "{what}: {left} ranks outlived the job");
    assert!(
        shm_leftovers().is_empty(),
        "{what}: leftover /dev/shm files: {:?}",
        shm_leftovers()
    );
}

#[test]
fn abort_ends_job_cleanly() {
    let _serial = serial();
    let (out, took) = job(4, "polling", None, &["abort"]);
    assert_failed_cleanly(&out, took, "abort", "MPI_Abort");
    assert_eq!(out.status.code(), Some(3), "exit code of MPI_Abort(3)");
}

#[test]
fn killed_rank_ends_job_cleanly() {
    let _serial = serial();
    let (out, took) = job(4, "polling", None, &["sigkill"]);
    assert_failed_cleanly(&out, took, "sigkill", "signal");
}

#[test]
fn fatal_error_names_call_and_argument() {
    let _serial = serial();
    let (out, took) = job(2, "polling", None, &["fatal"]);
    assert_failed_cleanly(&out, took, "fatal", "MPI_Send");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("rank 1000000"),
        "message names the argument:\n{stderr}"
    );
}

/// The same program started by MPICH's Hydra (PMI-1 over PMI_FD), if installed.
#[test]
fn runs_under_mpich_hydra() {
    let _serial = serial();
    if Command::new("mpiexec.hydra")
        .arg("--version")
        .output()
        .is_err()
    {
        tsunagi_testkit::missing("mpich", "mpiexec.hydra is not installed");
        return;
    }
    let (_, check) = ensure_built();
    let mut c = Command::new("mpiexec.hydra");
    c.args(["-n", "4"])
        .arg(check)
        .args(["order", "modes", "comms", "sizes"]);
    c.env_remove("TSUNAGI_NODE_MAP");
    let (out, _) = run(c, Duration::from_secs(240));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "hydra: {:?}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    for t in ["order", "modes", "comms", "sizes"] {
        assert!(
            stdout.contains(&format!("OK {t}")),
            "hydra: no OK {t}:\n{stdout}"
        );
    }
}

/// With single copy refused (TSUNAGI_SHM_CMA=0), rendezvous data streams through the rings
/// in chunks; a tiny eager limit pushes most sizes through that path.
#[test]
fn streamed_rendezvous_without_cma() {
    let _serial = serial();
    let (mpirun, check) = ensure_built();
    for progress in ["polling", "threaded"] {
        let mut c = Command::new(&mpirun);
        c.args(["-n", "3"])
            .arg(&check)
            .args(["sizes", "datatypes", "modes"]);
        c.env("TSUNAGI_PROGRESS", progress)
            .env("TSUNAGI_SHM_CMA", "0")
            .env("TSUNAGI_SHM_EAGER", "512")
            .env_remove("TSUNAGI_NODE_MAP");
        let (out, _) = run(c, Duration::from_secs(240));
        assert_ok(
            &out,
            &["sizes", "datatypes", "modes"],
            &format!("no CMA {progress}"),
        );
    }
}
