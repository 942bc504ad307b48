//! Helpers shared by the launcher's job tests: one job at a time, the check programs built
//! on demand, network namespaces as hosts (`Hosts`), a watchdog for mpirun.
#![allow(dead_code)] // each test binary uses its own subset

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// One job at a time: they share two cores.
pub static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

pub fn mpirun() -> &'static str {
    env!("CARGO_BIN_EXE_mpirun")
}

/// mpi-core's point-to-point check program, built on demand like mpi-core's own tests do.
pub fn p2p_check() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap().to_path_buf();
    let p = dir.join("examples/p2p_check");
    if !p.exists() {
        let mut c = Command::new(env!("CARGO"));
        c.args(["build", "-p", "tsunagi-core", "--example", "p2p_check"]);
        if dir.ends_with("release") {
            c.arg("--release");
        }
        assert!(c.status().unwrap().success(), "building p2p_check failed");
    }
    p
}

/// The collectives' check program, built on demand.
pub fn coll_check() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap().to_path_buf();
    let p = dir.join("examples/coll_check");
    if !p.exists() {
        let mut c = Command::new(env!("CARGO"));
        c.args([
            "build",
            "-p",
            "tsunagi-collectives",
            "--example",
            "coll_check",
        ]);
        if dir.ends_with("release") {
            c.arg("--release");
        }
        assert!(c.status().unwrap().success(), "building coll_check failed");
    }
    p
}

#[allow(unused_imports)] // each test binary uses its own subset
pub use tsunagi_testkit::netns::sh;

/// Network namespaces as hosts (`tsunagi_testkit::netns`), in 10.77.N.0/24.
pub struct Hosts(tsunagi_testkit::netns::Hosts);

impl std::ops::Deref for Hosts {
    type Target = tsunagi_testkit::netns::Hosts;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl Hosts {
    /// `n` hosts, or None (with a message; a failure in CI) where namespaces cannot be made.
    pub fn new(n: usize) -> Option<Hosts> {
        tsunagi_testkit::netns::Hosts::new("tsgt", 77, n).map(Hosts)
    }

    /// mpirun over these hosts with `k` slots each.
    pub fn mpirun(&self, k: usize) -> Command {
        self.0.mpirun(mpirun(), k)
    }
}

/// Run with a watchdog: a hang fails the test instead of blocking CI.
pub fn run(mut cmd: Command, limit: Duration) -> (Output, Duration) {
    let start = Instant::now();
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn mpirun");
    let pid = child.id() as i32;
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let d2 = done.clone();
    std::thread::spawn(move || {
        let t = Instant::now();
        while t.elapsed() < limit {
            if d2.load(Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // SAFETY: signalling our own child.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    });
    let out = child.wait_with_output().unwrap();
    done.store(true, Ordering::SeqCst);
    (out, start.elapsed())
}

pub const SUITE: &[&str] = &["sizes", "order", "modes", "datatypes", "comms", "errors"];

pub fn assert_ok(out: &Output, tests: &[&str], what: &str) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{what}: {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    for t in tests {
        assert!(
            stdout.contains(&format!("OK {t}")),
            "{what}: no OK {t}\nstdout:\n{stdout}\nstderr:\n{stderr}"
        );
    }
}

/// An example program of `package`, built on demand.
pub fn example(package: &str, name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap().to_path_buf();
    let p = dir.join("examples").join(name);
    if !p.exists() {
        let mut c = Command::new(env!("CARGO"));
        c.args(["build", "-p", package, "--example", name]);
        if dir.ends_with("release") {
            c.arg("--release");
        }
        assert!(c.status().unwrap().success(), "building {name} failed");
    }
    p
}

/// Make sure `tsunagi-impi-server` sits next to mpirun (`mpirun --sites` starts it from
/// there), building it on demand.
pub fn impi_server() -> PathBuf {
    let p = std::path::Path::new(mpirun())
        .parent()
        .unwrap()
        .join("tsunagi-impi-server");
    if !p.exists() {
        let mut c = Command::new(env!("CARGO"));
        c.args([
            "build",
            "-p",
            "tsunagi-impi",
            "--bin",
            "tsunagi-impi-server",
        ]);
        if p.parent().unwrap().ends_with("release") {
            c.arg("--release");
        }
        assert!(
            c.status().unwrap().success(),
            "building tsunagi-impi-server failed"
        );
    }
    p
}
