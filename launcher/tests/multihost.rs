//! Jobs across "hosts" made of network namespaces: each host is a namespace joined to a
//! bridge in the root namespace by a veth pair, with an address in a private test range
//! (10.77.N.0/24) that exists only on the interfaces these tests create. mpirun runs in the
//! root namespace and starts one agent per host with `--launch-agent 'ip netns exec {host}'`;
//! ranks on one host talk over shared memory, across hosts over TCP.
//!
//! Needs root and `ip netns`; skipped with a message otherwise. Namespaces and the bridge are
//! removed by a guard, also when a test fails. Bad-input cases that need no namespaces run
//! everywhere.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// One job at a time: they share two cores.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn mpirun() -> &'static str {
    env!("CARGO_BIN_EXE_mpirun")
}

/// mpi-core's point-to-point check program, built on demand like mpi-core's own tests do.
fn p2p_check() -> PathBuf {
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
fn coll_check() -> PathBuf {
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

fn sh(args: &[&str]) -> bool {
    Command::new(args[0])
        .args(&args[1..])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Namespaces `tsgt<pid>-<k>-h<i>` on a bridge; deleted on drop.
struct Hosts {
    names: Vec<String>,
    bridge: String,
    net: u32,
}

static NEXT: AtomicU32 = AtomicU32::new(0);

impl Hosts {
    /// `n` hosts, or None (with a message) where namespaces cannot be made.
    fn new(n: usize) -> Option<Hosts> {
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

    fn ip(&self, i: usize) -> String {
        format!("10.77.{}.{}", self.net, i + 2)
    }

    fn gateway(&self) -> String {
        format!("10.77.{}.1", self.net)
    }

    /// `h1:k,h2:k,...`
    fn host_list(&self, k: usize) -> String {
        self.names
            .iter()
            .map(|n| format!("{n}:{k}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Processes still running in any of the namespaces.
    fn leftovers(&self) -> Vec<String> {
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
    fn mpirun(&self, k: usize) -> Command {
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
fn run(mut cmd: Command, limit: Duration) -> (Output, Duration) {
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

const SUITE: &[&str] = &["sizes", "order", "modes", "datatypes", "comms", "errors"];

fn assert_ok(out: &Output, tests: &[&str], what: &str) {
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

/// The point-to-point suite on 2 and 3 hosts × 2 ranks: shm inside each host, TCP across,
/// under both progress engines.
#[test]
fn p2p_suite_across_namespaces_both_engines() {
    let _s = serial();
    for nhosts in [2, 3] {
        let Some(h) = Hosts::new(nhosts) else { return };
        for progress in ["polling", "threaded"] {
            let mut c = h.mpirun(2);
            c.env("TSUNAGI_PROGRESS", progress)
                .arg(p2p_check())
                .args(SUITE);
            let (out, took) = run(c, Duration::from_secs(120));
            let what = format!("{nhosts} hosts x 2, {progress}");
            assert_ok(&out, SUITE, &what);
            eprintln!("{what}: {took:?}");
            assert!(h.leftovers().is_empty(), "{what}: {:?}", h.leftovers());
        }
    }
}

/// The collective suite (every algorithm, checked against a local reference) on 2 and 3
/// hosts × 2 ranks, shm + TCP, both engines. `small` shrinks the large counts.
#[test]
fn collective_suite_across_namespaces_both_engines() {
    let _s = serial();
    let check = coll_check();
    for nhosts in [2, 3] {
        let Some(h) = Hosts::new(nhosts) else { return };
        for progress in ["polling", "threaded"] {
            let mut c = h.mpirun(2);
            c.env("TSUNAGI_PROGRESS", progress).arg(&check).arg("small");
            let (out, took) = run(c, Duration::from_secs(180));
            let what = format!("collectives, {nhosts} hosts x 2, {progress}");
            assert_ok(
                &out,
                &["barrier", "allreduce", "alltoall", "nbc", "random"],
                &what,
            );
            eprintln!("{what}: {took:?}");
            assert!(h.leftovers().is_empty(), "{what}: {:?}", h.leftovers());
        }
    }
}

/// Round-robin placement puts every neighbour pair on different hosts.
#[test]
fn map_by_node_and_hostfile() {
    let _s = serial();
    let Some(h) = Hosts::new(2) else { return };
    let file = std::env::temp_dir().join(format!("tsunagi-hostfile-{}", std::process::id()));
    std::fs::write(
        &file,
        format!("# test hosts\n{} slots=2\n{}:2\n", h.names[0], h.names[1]),
    )
    .unwrap();
    let mut c = Command::new(mpirun());
    c.arg("--hostfile")
        .arg(&file)
        .args(["--map-by", "node", "--launch-agent", "ip netns exec {host}"])
        .arg("--launch-addr")
        .arg(h.gateway())
        .env("TSUNAGI_SPIN", "50")
        .env("TSUNAGI_YIELDS", "20")
        .env("TSUNAGI_PROGRESS", "threaded")
        .arg(p2p_check())
        .args(["order", "modes"]);
    let (out, _) = run(c, Duration::from_secs(120));
    let _ = std::fs::remove_file(&file);
    assert_ok(&out, &["order", "modes"], "hostfile, map-by node");
}

#[test]
fn rank_killed_on_remote_host_ends_the_job() {
    let _s = serial();
    let Some(h) = Hosts::new(2) else { return };
    let mut c = h.mpirun(2);
    // The last rank (on the second host) kills itself with SIGKILL.
    c.arg(p2p_check()).arg("sigkill");
    let (out, took) = run(c, Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(took < Duration::from_secs(15), "took {took:?}");
    assert!(
        stderr.contains(&format!(
            "rank 3 (on host {}) killed by signal 9",
            h.names[1]
        )),
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("mpirun:").count(),
        1,
        "one line from mpirun:\n{stderr}"
    );
    assert!(h.leftovers().is_empty(), "orphans: {:?}", h.leftovers());
}

/// Issue 14, item 6: every rank has a live TCP link to the last one, which then dies by
/// SIGKILL. The survivors' aborts ("peer rank 3 failed") must not win: mpirun names the
/// dead rank, its signal and its host, and exits 128+9. Several runs, as it was a race.
#[test]
fn dying_rank_is_named_with_its_signal_across_tcp() {
    let _s = serial();
    let Some(h) = Hosts::new(2) else { return };
    for run_no in 0..3 {
        let mut c = h.mpirun(2);
        c.arg(p2p_check()).arg("sigkill_after_traffic");
        let (out, took) = run(c, Duration::from_secs(60));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(128 + 9), "run {run_no}: {stderr}");
        // The ranks' own stderr lines may interleave with mpirun's (unbuffered writes of
        // several processes), so look for mpirun's one line as a substring.
        let want = format!(
            "mpirun: rank 3 (on host {}) killed by signal 9 (SIGKILL); job aborted",
            h.names[1]
        );
        assert!(stderr.contains(&want), "run {run_no}: {stderr}");
        assert_eq!(
            stderr.matches("mpirun:").count(),
            1,
            "run {run_no}: {stderr}"
        );
        assert!(took < Duration::from_secs(15), "run {run_no} took {took:?}");
        assert!(h.leftovers().is_empty(), "orphans: {:?}", h.leftovers());
    }
}

#[test]
fn lost_agent_ends_the_job() {
    let _s = serial();
    let Some(h) = Hosts::new(2) else { return };
    let mut c = h.mpirun(1);
    c.args(["sleep", "60"]);
    let ns = h.names[1].clone();
    // Kill the second host's agent once it runs.
    let killer = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            let o = Command::new("ip")
                .args(["netns", "pids", &ns])
                .output()
                .unwrap();
            for pid in String::from_utf8_lossy(&o.stdout).split_whitespace() {
                let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                let sleep_started = String::from_utf8_lossy(&o.stdout)
                    .split_whitespace()
                    .count()
                    >= 2;
                if sleep_started && String::from_utf8_lossy(&cmd).contains("--agent") {
                    // SAFETY: a process in our own test namespace.
                    unsafe { libc::kill(pid.parse().unwrap(), libc::SIGKILL) };
                    return Instant::now();
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("agent never showed up");
    });
    let (out, _) = run(c, Duration::from_secs(60));
    let killed_at = killer.join().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(killed_at.elapsed() < Duration::from_secs(10));
    assert!(stderr.contains("lost the agent on host"), "{stderr}");
    assert!(h.leftovers().is_empty(), "orphans: {:?}", h.leftovers());
}

/// A connection to a rank's TCP port from outside the job, with another key, is refused
/// (closed without a verdict, logged once) and the job goes on.
#[test]
fn wrong_key_from_outside_is_refused() {
    let _s = serial();
    let Some(h) = Hosts::new(2) else { return };
    let mut c = h.mpirun(2);
    c.env("TSUNAGI_TCP_PORTS", "41000-41010")
        .env("TSUNAGI_PROGRESS", "polling")
        .arg(p2p_check())
        .args(["sizes", "order", "modes", "datatypes", "sizes", "order"]);
    let target: std::net::SocketAddr = format!("{}:41000", h.ip(0)).parse().unwrap();
    let prober = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(mut s) =
                std::net::TcpStream::connect_timeout(&target, Duration::from_millis(200))
            {
                s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                let mut c = [0u8; tsunagi_tcp::handshake::CHALLENGE_BYTES];
                s.read_exact(&mut c).unwrap();
                let nonce = tsunagi_tcp::handshake::decode_challenge(&c).unwrap();
                let key = tsunagi_tcp::JobKey::derive("not this job");
                let hello = tsunagi_tcp::handshake::encode_hello(&key, &nonce, 1, 0);
                s.write_all(&hello).unwrap();
                let mut b = [0u8; 8];
                // Closed (EOF or reset), never a verdict.
                return s.read(&mut b).unwrap_or(0);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("rank 0 never listened on {target}");
    });
    let (out, _) = run(c, Duration::from_secs(120));
    let got = prober.join().unwrap();
    assert_eq!(got, 0, "a refused connection must get no verdict");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ok(&out, &["sizes", "order"], "job with an intruder");
    assert!(
        // Rank 0 or 1: whichever bound the first port of the range on that host.
        stderr.contains(&format!("refused a connection from {}", h.gateway()))
            && stderr.contains("wrong job key"),
        "{stderr}"
    );
}

fn bad_input(args: &[&str], expect: &str) {
    let mut c = Command::new(mpirun());
    c.args(args);
    let (out, took) = run(c, Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} should fail");
    assert!(took < Duration::from_secs(15), "{args:?} took {took:?}");
    assert!(stderr.contains(expect), "{args:?}: {stderr}");
    let ours: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("mpirun:"))
        .collect();
    assert_eq!(ours.len(), 1, "one line from mpirun: {stderr}");
}

#[test]
fn bad_hosts_end_with_one_clear_line() {
    let dir = std::env::temp_dir();
    let hf = dir.join(format!("tsunagi-bad-hostfile-{}", std::process::id()));
    std::fs::write(&hf, "nodeA slots=2\nnodeB slots=two\n").unwrap();
    let hf_s = hf.to_str().unwrap().to_string();
    bad_input(&["--hostfile", &hf_s, "true"], "line 2");
    let _ = std::fs::remove_file(&hf);
    bad_input(
        &["--hostfile", "/no/such/hostfile", "true"],
        "cannot read hostfile",
    );
    bad_input(&["-n", "5", "--host", "a:2,b:2", "true"], "--oversubscribe");
    // A launch command that fails (an unreachable host, for ssh) ends the job.
    bad_input(
        &[
            "--host",
            "tsunagi-no-such-host:1",
            "--launch-agent",
            "false {host}",
            "true",
        ],
        "before its agent connected",
    );
}

#[test]
fn localhost_runs_without_agents_and_oversubscribes_on_request() {
    let _s = serial();
    let mut c = Command::new(mpirun());
    c.args(["--host", "localhost:2", "--oversubscribe", "-n", "3"])
        .env("TSUNAGI_SPIN", "50")
        .env("TSUNAGI_YIELDS", "20")
        .arg(p2p_check())
        .args(["order"]);
    let (out, _) = run(c, Duration::from_secs(60));
    assert_ok(&out, &["order"], "localhost");
}

/// Pretend nodes on one host still work with either inter-node transport: TCP (the
/// default) and the Unix-socket stream transport (`TSUNAGI_INTERNODE=stream`).
#[test]
fn pretend_nodes_with_tcp_and_with_stream() {
    let _s = serial();
    for internode in ["tcp", "stream"] {
        let mut c = Command::new(mpirun());
        c.args(["-n", "4"])
            .env("TSUNAGI_NODE_MAP", "2")
            .env("TSUNAGI_INTERNODE", internode)
            .env("TSUNAGI_SPIN", "50")
            .env("TSUNAGI_YIELDS", "20")
            .arg(p2p_check())
            .args(["order", "modes", "sizes"]);
        let (out, _) = run(c, Duration::from_secs(120));
        assert_ok(&out, &["order", "modes", "sizes"], internode);
    }
    let mut c = Command::new(mpirun());
    c.args(["-n", "2"])
        .env("TSUNAGI_NODE_MAP", "1")
        .env("TSUNAGI_INTERNODE", "carrier-pigeon")
        .arg(p2p_check())
        .arg("order");
    let (out, _) = run(c, Duration::from_secs(60));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("TSUNAGI_INTERNODE=carrier-pigeon"));
}
