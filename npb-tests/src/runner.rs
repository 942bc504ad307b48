//! One benchmark run: a launcher started as the leader of its own process group, stdout and
//! stderr to log files, a time limit after which the whole group is ended (SIGTERM, then
//! SIGKILL), so a hung run of any MPI leaves nothing behind.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How a run ended.
#[derive(Debug)]
pub struct RunOutcome {
    /// Exit code, `None` if killed by a signal or by the time limit.
    pub code: Option<i32>,
    pub timed_out: bool,
    pub elapsed: Duration,
    pub stdout: String,
    /// The last lines of stderr, for the failure report.
    pub stderr_tail: String,
}

impl RunOutcome {
    pub fn succeeded(&self) -> bool {
        self.code == Some(0) && !self.timed_out
    }

    /// One line saying why a run failed.
    pub fn failure(&self) -> String {
        let why = if self.timed_out {
            format!("timed out after {:.0} s", self.elapsed.as_secs_f64())
        } else {
            match self.code {
                Some(c) => format!("exit status {c}"),
                None => "killed by a signal".into(),
            }
        };
        let tail = self.stderr_tail.lines().last().unwrap_or("").trim();
        if tail.is_empty() {
            why
        } else {
            format!("{why}: {tail}")
        }
    }
}

/// Run `argv` with extra `env`, logging to `log_base`.out / .err, for at most `limit`.
pub fn run(
    argv: &[String],
    env: &[(String, String)],
    log_base: &Path,
    limit: Duration,
) -> std::io::Result<RunOutcome> {
    // Appended, not `with_extension`: a base such as `cg-A-np2.r3` has a dot of its own.
    let with = |ext: &str| PathBuf::from(format!("{}.{ext}", log_base.display()));
    let (out_path, err_path) = (with("out"), with("err"));
    if let Some(dir) = log_base.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let start = Instant::now();
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(File::create(&out_path)?)
        .stderr(File::create(&err_path)?)
        .process_group(0)
        .spawn()?;
    let pgid = child.id() as libc::pid_t;
    let mut timed_out = false;
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break s;
        }
        if !timed_out && start.elapsed() > limit {
            timed_out = true;
            end_group(pgid, &mut child);
            break child.wait()?;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // Ranks a launcher failed to reap would keep the group alive; end them too.
    // SAFETY: kill() with a negative pid signals our own child's process group; ESRCH when
    // the group is already gone is the normal case and is ignored.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
    let elapsed = start.elapsed();
    let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    let lines: Vec<&str> = stderr.lines().collect();
    let stderr_tail = lines[lines.len().saturating_sub(5)..].join("\n");
    Ok(RunOutcome {
        code: status.code(),
        timed_out,
        elapsed,
        stdout,
        stderr_tail,
    })
}

fn end_group(pgid: libc::pid_t, child: &mut std::process::Child) {
    // SAFETY: as above, signals only the process group we created for this run.
    unsafe { libc::kill(-pgid, libc::SIGTERM) };
    let grace = Instant::now();
    while grace.elapsed() < Duration::from_secs(3) {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: as above.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Vec<String> {
        vec!["sh".into(), "-c".into(), script.into()]
    }

    #[test]
    fn output_exit_status_and_environment_are_captured() {
        let dir = std::env::temp_dir().join(format!("tsunagi-bench-runner-{}", std::process::id()));
        let env = [("BENCH_X".to_string(), "42".to_string())];
        let r = run(
            &sh("echo lat 8 $BENCH_X; echo oops >&2; exit 3"),
            &env,
            &dir.join("a.r1"),
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(r.stdout, "lat 8 42\n");
        assert_eq!(r.code, Some(3));
        assert!(!r.succeeded());
        assert_eq!(r.failure(), "exit status 3: oops");
        assert!(dir.join("a.r1.err").exists() && dir.join("a.r1.out").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_hung_run_and_its_children_are_ended_at_the_limit() {
        let dir = std::env::temp_dir().join(format!("tsunagi-bench-hang-{}", std::process::id()));
        let t0 = Instant::now();
        // The child ignores SIGTERM (trap '' TERM), so only SIGKILL ends it.
        let r = run(
            &sh("trap '' TERM; sleep 30 & sleep 30; wait"),
            &[],
            &dir.join("h"),
            Duration::from_millis(300),
        )
        .unwrap();
        assert!(r.timed_out);
        assert!(r.failure().starts_with("timed out"));
        assert!(t0.elapsed() < Duration::from_secs(10));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
