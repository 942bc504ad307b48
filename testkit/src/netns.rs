//! Network namespaces as hosts: `n` namespaces on a bridge of their own, each with a veth
//! `eth0` at `10.X.N.(i+2)/24` and the bridge at `10.X.N.1`, all removed (and any process
//! left in them killed) on drop. `X` tells the test suites apart, `N` comes from the
//! process id and a counter, so concurrent runs and several sets per test do not collide.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// Run a command quietly; true if it ran and succeeded.
pub fn sh(args: &[&str]) -> bool {
    Command::new(args[0])
        .args(&args[1..])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Namespaces `<label><tag>h<i>` on the bridge `<label>b<tag>`; deleted on drop.
pub struct Hosts {
    pub names: Vec<String>,
    bridge: String,
    octet: u8,
    net: u32,
}

static NEXT: AtomicU32 = AtomicU32::new(0);

impl Hosts {
    /// `n` hosts in `10.<octet>.N.0/24`, or None (through [`crate::missing`]: a failure
    /// in CI) where namespaces cannot be made. `label` is a short name prefix (interface
    /// names have 15 characters at most).
    pub fn new(label: &str, octet: u8, n: usize) -> Option<Hosts> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            crate::missing("netns", "network-namespace tests need root");
            return None;
        }
        if !sh(&["ip", "netns", "list"]) {
            crate::missing("netns", "`ip netns` is not available");
            return None;
        }
        let k = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let net = (pid * 7 + k * 31) % 250 + 1;
        let tag = format!("{}{k}", pid % 100_000);
        let h = Hosts {
            names: (1..=n).map(|i| format!("{label}{tag}h{i}")).collect(),
            bridge: format!("{label}b{tag}"),
            octet,
            net,
        };
        let gw = format!("{}/24", h.gateway());
        let ok = sh(&["ip", "link", "add", &h.bridge, "type", "bridge"])
            && sh(&["ip", "addr", "add", &gw, "dev", &h.bridge])
            && sh(&["ip", "link", "set", &h.bridge, "up"])
            && h.names.iter().enumerate().all(|(i, ns)| {
                let veth = format!("{label}v{tag}{i}");
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
            crate::missing(
                "netns",
                "could not create network namespaces and veth pairs",
            );
            return None; // `h` drops and removes what was made
        }
        Some(h)
    }

    /// Host `i`'s address.
    pub fn ip(&self, i: usize) -> String {
        format!("10.{}.{}.{}", self.octet, self.net, i + 2)
    }

    /// The bridge's address (where the hosts reach the machine itself).
    pub fn gateway(&self) -> String {
        format!("10.{}.{}.1", self.octet, self.net)
    }

    /// The bridge's interface name (in the machine's own namespace).
    pub fn bridge(&self) -> &str {
        &self.bridge
    }

    /// `h1:k,h2:k,...` (mpirun's `--host`).
    pub fn host_list(&self, k: usize) -> String {
        self.names
            .iter()
            .map(|n| format!("{n}:{k}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `mpirun` (the given binary) over these hosts with `k` slots each, started through
    /// `ip netns exec`, with the short spin that ranks sharing two cores need.
    pub fn mpirun(&self, mpirun: &str, k: usize) -> Command {
        let mut c = Command::new(mpirun);
        c.arg("--host")
            .arg(self.host_list(k))
            .arg("--launch-agent")
            .arg("ip netns exec {host}")
            .arg("--launch-addr")
            .arg(self.gateway());
        c.env("TSUNAGI_SPIN", "50").env("TSUNAGI_YIELDS", "20");
        c.env_remove("TSUNAGI_NODE_MAP")
            .env_remove("TSUNAGI_INTERNODE");
        c
    }

    /// Processes still running in any of the namespaces (`ns: pid command line`).
    pub fn leftovers(&self) -> Vec<String> {
        let mut v = Vec::new();
        for ns in &self.names {
            for pid in pids(ns) {
                let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                v.push(format!(
                    "{ns}: {pid} {}",
                    String::from_utf8_lossy(&cmd).replace('\0', " ")
                ));
            }
        }
        v
    }
}

fn pids(ns: &str) -> Vec<i32> {
    match Command::new("ip").args(["netns", "pids", ns]).output() {
        Ok(o) => String::from_utf8_lossy(&o.stdout)
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect(),
        Err(_) => Vec::new(),
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for ns in &self.names {
            for pid in pids(ns) {
                // SAFETY: kill has no memory preconditions; the process was left in a
                // namespace this test made, and nothing else runs there.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            sh(&["ip", "netns", "del", ns]);
        }
        sh(&["ip", "link", "del", &self.bridge]);
    }
}
