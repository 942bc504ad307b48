//! mpirun end to end: real processes, the `pmi_rank` example as the MPI program.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn mpirun() -> &'static str {
    env!("CARGO_BIN_EXE_mpirun")
}

/// The example binary; `cargo test` builds examples next to the deps directory.
fn pmi_rank() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let p = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples/pmi_rank");
    if !p.exists() {
        let st = Command::new(env!("CARGO"))
            .args(["build", "--example", "pmi_rank", "-p", "tsunagi-launcher"])
            .status()
            .unwrap();
        assert!(st.success());
    }
    p
}

/// A fresh directory for the ranks' pid files.
fn test_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tsunagi-mpirun-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn run(np: usize, dir: &Path, actions: &[&str]) -> (Output, Duration) {
    let start = Instant::now();
    let out = Command::new(mpirun())
        .arg("-n")
        .arg(np.to_string())
        .arg("--env")
        .arg(format!("PMI_TEST_DIR={}", dir.display()))
        .arg(pmi_rank())
        .args(actions)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (out, start.elapsed())
}

/// (pid, kvsname) of every rank that got as far as writing its pid file.
fn ranks_seen(dir: &Path) -> Vec<(i32, String)> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let name = e.file_name().into_string().unwrap();
        if name.starts_with("rank") {
            let s = std::fs::read_to_string(e.path()).unwrap();
            let (pid, kvs) = s.split_once(' ').unwrap();
            v.push((pid.parse().unwrap(), kvs.to_string()));
        }
    }
    v
}

/// Every rank process is gone (mpirun reaped them, so not even zombies remain) and none
/// of the job's shared-memory files is left.
fn assert_all_gone(dir: &Path, expect_ranks: usize) {
    let seen = ranks_seen(dir);
    assert_eq!(seen.len(), expect_ranks, "pid files: {seen:?}");
    for (pid, kvs) in &seen {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "rank pid {pid} still exists"
        );
        let prefix = format!("tsunagi-{kvs}-");
        let left: Vec<_> = std::fs::read_dir("/dev/shm")
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
            .map(|e| e.file_name())
            .collect();
        assert!(left.is_empty(), "shm files left: {left:?}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

fn stderr_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn kvs_exchange_1_to_8_ranks() {
    for np in 1..=8 {
        let dir = test_dir(&format!("exchange{np}"));
        let (out, _) = run(np, &dir, &["shm", "exchange"]);
        assert_eq!(out.status.code(), Some(0), "np={np}: {out:?}");
        assert!(
            out.stderr.is_empty(),
            "np={np}: mpirun wrote to stderr: {out:?}"
        );
        let mut lines: Vec<String> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect();
        lines.sort();
        let want: Vec<String> = (0..np)
            .map(|r| format!("exchange ok rank {r} of {np}"))
            .collect();
        assert_eq!(lines, want);
        // The ranks' shm files (left behind on purpose) are removed after success too.
        assert_all_gone(&dir, np);
    }
}

#[test]
fn kvsname_is_unique_per_job() {
    let d1 = test_dir("uniq1");
    let d2 = test_dir("uniq2");
    run(1, &d1, &[]);
    run(1, &d2, &[]);
    assert_ne!(ranks_seen(&d1)[0].1, ranks_seen(&d2)[0].1);
    assert_all_gone(&d1, 1);
    assert_all_gone(&d2, 1);
}

#[test]
fn exit_code_of_a_failing_rank_is_the_jobs() {
    let dir = test_dir("exit");
    let (out, took) = run(4, &dir, &["shm", "barrier", "2:exit=3", "sleep=30"]);
    assert_eq!(out.status.code(), Some(3));
    let lines = stderr_lines(&out);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("rank 2") && lines[0].contains("code 3"),
        "{lines:?}"
    );
    assert!(took < Duration::from_secs(2), "took {took:?}");
    assert_all_gone(&dir, 4);
}

#[test]
fn abort_ends_the_job_within_2s_with_one_line() {
    let dir = test_dir("abort");
    let (out, took) = run(4, &dir, &["shm", "barrier", "1:abort=5", "sleep=30"]);
    assert_eq!(out.status.code(), Some(5));
    let lines = stderr_lines(&out);
    assert_eq!(
        lines,
        vec!["mpirun: rank 1 called MPI_Abort with error code 5: pmi_rank 1 gives up; job aborted"]
    );
    assert!(took < Duration::from_secs(2), "took {took:?}");
    assert_all_gone(&dir, 4);
}

#[test]
fn rank_killed_by_sigkill_ends_the_job() {
    let dir = test_dir("sigkill");
    let (out, took) = run(3, &dir, &["shm", "barrier", "0:signal=9", "sleep=30"]);
    assert_eq!(out.status.code(), Some(128 + 9));
    let lines = stderr_lines(&out);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with("mpirun: rank 0 (pid ")
            && lines[0].ends_with("killed by signal 9 (SIGKILL); job aborted"),
        "{lines:?}"
    );
    assert!(took < Duration::from_secs(2), "took {took:?}");
    assert_all_gone(&dir, 3);
}

#[test]
fn ranks_ignoring_sigterm_get_sigkill_after_a_second() {
    let dir = test_dir("ignoreterm");
    let (out, took) = run(3, &dir, &["ignoreterm", "barrier", "0:exit=4", "sleep=30"]);
    assert_eq!(out.status.code(), Some(4));
    assert_eq!(stderr_lines(&out).len(), 1);
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(2),
        "took {took:?}"
    );
    assert_all_gone(&dir, 3);
}

#[test]
fn exit_zero_without_finalize_fails_the_job() {
    let dir = test_dir("nofinalize");
    let (out, _) = run(2, &dir, &["barrier", "1:nofinalize"]);
    assert_eq!(out.status.code(), Some(1));
    let lines = stderr_lines(&out);
    assert_eq!(lines.len(), 1);
    assert!(lines[0].contains("rank 1") && lines[0].contains("MPI_Finalize"));
    assert_all_gone(&dir, 2);
}

fn sigterm_or_sigint_to_mpirun(sig: libc::c_int, name: &str) {
    let dir = test_dir(name);
    let child = Command::new(mpirun())
        .args(["-n", "3", "--env"])
        .arg(format!("PMI_TEST_DIR={}", dir.display()))
        .arg(pmi_rank())
        .args(["shm", "sleep=30"])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while ranks_seen(&dir).len() < 3 {
        assert!(Instant::now() < deadline, "ranks did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Let the ranks create their shm files.
    std::thread::sleep(Duration::from_millis(100));
    let start = Instant::now();
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(child.id() as i32, sig) };
    let out = child.wait_with_output().unwrap();
    let took = start.elapsed();
    assert_eq!(out.status.code(), Some(128 + sig));
    assert!(took < Duration::from_secs(2), "took {took:?}");
    assert_eq!(stderr_lines(&out).len(), 1, "{out:?}");
    assert_all_gone(&dir, 3);
}

#[test]
fn sigterm_to_mpirun_ends_everything() {
    sigterm_or_sigint_to_mpirun(libc::SIGTERM, "sigterm");
}

#[test]
fn sigint_to_mpirun_ends_everything() {
    sigterm_or_sigint_to_mpirun(libc::SIGINT, "sigint");
}

#[test]
fn stdout_passes_unchanged_and_mpirun_adds_nothing() {
    let dir = test_dir("bytes");
    let (out, _) = run(1, &dir, &["bytes"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(out.stdout, (0..=255).collect::<Vec<u8>>());
    assert!(out.stderr.is_empty());
    assert_all_gone(&dir, 1);
    // A non-MPI program works too, and its output is all there is.
    let out = Command::new(mpirun())
        .args(["-n", "3", "echo", "hi"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(out.stdout, b"hi\nhi\nhi\n");
    assert!(out.stderr.is_empty());
}

#[test]
fn stdin_reaches_rank_0_only() {
    let dir = test_dir("stdin");
    let mut child = Command::new(mpirun())
        .args(["-n", "3", "--env"])
        .arg(format!("PMI_TEST_DIR={}", dir.display()))
        .arg(pmi_rank())
        .arg("echo")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"line one\nline two\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(out.stdout, b"line one\nline two\n");
    assert!(out.stderr.is_empty());
    assert_all_gone(&dir, 3);
}

#[test]
fn environment_options_reach_the_ranks() {
    let dir = test_dir("env");
    let out = Command::new(mpirun())
        .args([
            "-np",
            "2",
            "-x",
            "TSUNAGI_TEST_X",
            "--env",
            "A=1",
            "-env",
            "B",
            "2",
        ])
        .args([
            "--progress",
            "polling",
            "--node-map",
            "0,1",
            "--oversubscribe",
        ])
        .arg("--env")
        .arg(format!("PMI_TEST_DIR={}", dir.display()))
        .arg(pmi_rank())
        .args(["0:env=TSUNAGI_TEST_X", "0:env=A", "0:env=B"])
        .args([
            "0:env=TSUNAGI_PROGRESS",
            "0:env=TSUNAGI_NODE_MAP",
            "0:env=PMI_PORT",
        ])
        .env("TSUNAGI_TEST_X", "from mpirun")
        .env("PMI_PORT", "stale:1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "TSUNAGI_TEST_X=from mpirun\nA=1\nB=2\nTSUNAGI_PROGRESS=polling\n\
         TSUNAGI_NODE_MAP=0,1\nPMI_PORT=<unset>\n"
    );
    let seen = ranks_seen(&dir);
    assert_all_gone(&dir, 2);
    // PMI_JOBID/TSUNAGI_JOBID carry the kvsname.
    let out = Command::new(mpirun())
        .args([
            "-n",
            "1",
            "sh",
            "-c",
            "echo $PMI_JOBID $TSUNAGI_JOBID $PMI_RANK $PMI_SIZE",
        ])
        .output()
        .unwrap();
    let s = String::from_utf8(out.stdout).unwrap();
    let f: Vec<&str> = s.split_whitespace().collect();
    assert_eq!(f.len(), 4);
    assert_eq!(f[0], f[1]);
    assert!(f[0].starts_with("tsunagi_"));
    assert_eq!(&f[2..], ["0", "1"]);
    assert_ne!(f[0], seen[0].1);
}

#[test]
fn usage_errors_and_missing_programs() {
    for (args, code) in [
        (&["-n", "0", "x"][..], 2),
        (&["--frobnicate", "x"][..], 2),
        (&["-n", "2"][..], 2),
        (&["-n", "2", "/no/such/program"][..], 127),
        (&["-n", "2", "no-such-program-anywhere"][..], 127),
        (&["-n", "2", "/etc/passwd"][..], 126),
    ] {
        let out = Command::new(mpirun()).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(code), "{args:?}: {out:?}");
        assert!(out.stdout.is_empty());
        let lines = stderr_lines(&out);
        assert_eq!(lines.len(), 1, "{args:?}: {lines:?}");
        assert!(lines[0].starts_with("mpirun: "));
    }
    let out = Command::new(mpirun()).arg("--version").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "Tsunagi mpirun 0.1.0\n"
    );
    let out = Command::new(mpirun()).arg("--help").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8(out.stdout)
        .unwrap()
        .contains("--oversubscribe"));
    let out = Command::new(env!("CARGO_BIN_EXE_mpiexec"))
        .args(["-n", "2", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stderr.is_empty() && out.stdout.is_empty());
}

/// mpirun running `sh -c SCRIPT` as every rank; the script may `exec` pmi_rank.
fn run_sh(np: usize, dir: &Path, script: &str, limit: Duration) -> (Output, Duration) {
    let start = Instant::now();
    let child = Command::new(mpirun())
        .arg("-n")
        .arg(np.to_string())
        .arg("--env")
        .arg(format!("PMI_TEST_DIR={}", dir.display()))
        .arg("--env")
        .arg(format!("PMI_RANK_EXE={}", pmi_rank().display()))
        .args(["sh", "-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let d2 = done.clone();
    std::thread::spawn(move || {
        while start.elapsed() < limit {
            if d2.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // SAFETY: signalling our own child, not reaped yet (`done` is still false).
        unsafe { libc::kill(pid, libc::SIGKILL) };
    });
    let out = child.wait_with_output().unwrap();
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    (out, start.elapsed())
}

/// Issue 14, item 7: a rank that exits with status 0 before MPI_Init (PMI init) while the
/// others wait in start-up ends the job with one clear line, instead of a hang.
#[test]
fn rank_exiting_before_init_ends_the_job() {
    let dir = test_dir("earlyexit");
    // Rank 1 exits at once, before or after the others reach init: both orders count.
    for (name, script) in [
        (
            "first",
            r#"[ "$PMI_RANK" = 1 ] && exit 0; exec "$PMI_RANK_EXE" barrier"#,
        ),
        (
            "late",
            r#"[ "$PMI_RANK" = 1 ] && { sleep 0.5; exit 0; }; exec "$PMI_RANK_EXE" barrier"#,
        ),
    ] {
        let (out, took) = run_sh(3, &dir, script, Duration::from_secs(30));
        assert_eq!(out.status.code(), Some(1), "{name}: {out:?}");
        let lines = stderr_lines(&out);
        assert_eq!(lines.len(), 1, "{name}: {lines:?}");
        assert!(
            lines[0].starts_with("mpirun: rank 1 (pid ")
                && lines[0].contains("exited with code 0 before calling MPI_Init"),
            "{name}: {lines:?}"
        );
        assert!(took < Duration::from_secs(5), "{name}: took {took:?}");
    }
    // A job in which no rank uses MPI at all is still fine.
    let (out, _) = run_sh(3, &dir, "exit 0", Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 14, item 8: a stray `barrier_in` before init is refused with one line naming the
/// rank (it used to put the barrier out of step and hang the job).
#[test]
fn stray_pmi_barrier_before_init_ends_the_job() {
    let dir = test_dir("straybarrier");
    let script = r#"[ "$PMI_RANK" = 2 ] && printf 'cmd=barrier_in\n' >&"$PMI_FD"; exec "$PMI_RANK_EXE" barrier barrier"#;
    let (out, took) = run_sh(3, &dir, script, Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let lines = stderr_lines(&out);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("rank 2")
            && lines[0].contains("broke the PMI protocol (cmd=barrier_in before cmd=init)"),
        "{lines:?}"
    );
    assert!(took < Duration::from_secs(5), "took {took:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 14, item 8: an abort message with terminal escape sequences is printed with the
/// control characters made visible, never raw.
#[test]
fn abort_message_escapes_are_printed_safely() {
    let dir = test_dir("escapes");
    let script = r#"printf 'cmd=init pmi_version=1 pmi_subversion=1\n' >&"$PMI_FD"; printf 'cmd=abort exitcode=7 message=\033]0;owned\007\033[2Jgone\r\n' >&"$PMI_FD"; exec sleep 20"#;
    let (out, took) = run_sh(1, &dir, script, Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(7), "{out:?}");
    assert!(
        !out.stderr
            .iter()
            .any(|&b| b == 0x1b || b == 0x07 || b == b'\r'),
        "raw control bytes reached the terminal: {:?}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = stderr_lines(&out);
    assert_eq!(
        lines,
        vec!["mpirun: rank 0 called MPI_Abort with error code 7: \\u{1b}]0;owned\\u{7}\\u{1b}[2Jgone; job aborted"]
    );
    assert!(took < Duration::from_secs(5), "took {took:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
