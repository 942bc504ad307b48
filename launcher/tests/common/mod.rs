//! Helpers shared by the launcher's job tests: one job at a time, the check programs built
//! on demand, network namespaces as hosts (`Hosts`), a watchdog for mpirun.
#![allow(dead_code)] // each test binary uses its own subset

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
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

pub fn sh(args: &[&str]) -> bool {
    Command::new(args[0])
        .args(&args[1..])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Namespaces `tsgt<pid>-<k>-h<i>` on a bridge; deleted on drop.
pub struct Hosts {
    pub names: Vec<String>,
    bridge: String,
    net: u32,
}

pub static NEXT: AtomicU32 = AtomicU32::new(0);

impl Hosts {
    /// `n` hosts, or None (with a message) where namespaces cannot be made.
    pub fn new(n: usize) -> Option<Hosts> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            tsunagi_testkit::missing("netns", "network-namespace tests need root");
            return None;
        }
        if !sh(&["ip", "netns", "list"]) {
            tsunagi_testkit::missing("netns", "`ip netns` is not available");
            return None;
        }
        let k = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        // A /24 per test: 10.77.N.0, N from the pid and a counter, so concurrent runs of
        // this suite do not collide.
        let net = (pid * 7 + k * 31) % 250 + 1;
        let tag = format!("{}{}", pid % 100_000, k);
        let h = Hosts {
            names: (1..=n).map(|i| format!("tsgt{tag}h{i}")).collect(),
            bridge: format!("tsgb{tag}"),
            net,
        };
        let gw = format!("10.77.{net}.1/24");
        let ok = sh(&["ip", "link", "add", &h.bridge, "type", "bridge"])
            && sh(&["ip", "addr", "add", &gw, "dev", &h.bridge])
            && sh(&["ip", "link", "set", &h.bridge, "up"])
            && h.names.iter().enumerate().all(|(i, ns)| {
                let veth = format!("tsgv{tag}{i}");
                let addr = format!("{}/24", h.ip(i));
                sh(&["ip", "netns", "add", ns])
                    && sh(&[
                        "ip", "link", "add", &veth, "type", "veth", "peer", "name", "eth0",
                        "netns", ns,
                    ])
                    && sh(&["ip", "link", "set", &veth, "master", &h.bridge, "up"])
                    && sh(&["ip", "-n", ns, "addr", "add", &addr, "dev", "eth0"])
                    && sh(&["ip", "-n", ns, "link", "set", "eth0", "up"])
                    && sh(&["ip", "-n", ns, "link", "set", "lo", "up"])
            });
        if !ok {
            tsunagi_testkit::missing(
                "netns",
                "could not create network namespaces and veth pairs",
            );
            return None; // the guard drops and removes what was made
        }
        Some(h)
    }

    pub fn ip(&self, i: usize) -> String {
        format!("10.77.{}.{}", self.net, i + 2)
    }

    pub fn gateway(&self) -> String {
        format!("10.77.{}.1", self.net)
    }

    /// `h1:k,h2:k,...`
    pub fn host_list(&self, k: usize) -> String {
        self.names
            .iter()
            .map(|n| format!("{n}:{k}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Processes still running in any of the namespaces.
    pub fn leftovers(&self) -> Vec<String> {
        let mut v = Vec::new();
        for ns in &self.names {
            if let Ok(o) = Command::new("ip").args(["netns", "pids", ns]).output() {
                for pid in String::from_utf8_lossy(&o.stdout).split_whitespace() {
                    let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                    v.push(format!(
                        "{ns}: {pid} {}",
                        String::from_utf8_lossy(&cmd).replace('\0', " ")
                    ));
                }
            }
        }
        v
    }

    /// mpirun over these hosts with `k` slots each.
    pub fn mpirun(&self, k: usize) -> Command {
        let mut c = Command::new(mpirun());
        c.arg("--host")
            .arg(self.host_list(k))
            .arg("--launch-agent")
            .arg("ip netns exec {host}")
            .arg("--launch-addr")
            .arg(self.gateway());
        // Four or six ranks share two cores: spin briefly before sleeping.
        c.env("TSUNAGI_SPIN", "50").env("TSUNAGI_YIELDS", "20");
        c.env_remove("TSUNAGI_NODE_MAP")
            .env_remove("TSUNAGI_INTERNODE");
        c
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for ns in &self.names {
            // Kill whatever a failed test left in the namespace, then delete it (its veth
            // pair goes with it).
            if let Ok(o) = Command::new("ip").args(["netns", "pids", ns]).output() {
                for pid in String::from_utf8_lossy(&o.stdout).split_whitespace() {
                    if let Ok(p) = pid.parse::<i32>() {
                        // SAFETY: signalling a process in a namespace this test created.
                        unsafe { libc::kill(p, libc::SIGKILL) };
                    }
                }
            }
            sh(&["ip", "netns", "del", ns]);
        }
        sh(&["ip", "link", "del", &self.bridge]);
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
