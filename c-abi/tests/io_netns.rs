//! MPI-IO across "hosts": tests/c/io.c on two network namespaces × 2 ranks (shared memory
//! inside a host, TCP between them, aggregators on both hosts), all writing the same files
//! in one directory that both hosts see, under both progress engines. Namespaces share
//! the machine's file system, so this is a shared file system with coherent caches (the
//! shared file pointer and the sieving locks are POSIX record locks, which NFS serves
//! too). Needs root and `ip netns`: skipped with a message otherwise (a failure under CI).

mod common;

use std::process::{Command, Stdio};

use common::{check, mpirun, prefix, run, src_dir};

fn sh(args: &[&str]) -> bool {
    Command::new(args[0])
        .args(&args[1..])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Two namespaces on a bridge (10.78.N.0/24, test-only), removed on drop.
struct Hosts {
    names: Vec<String>,
    bridge: String,
    net: u32,
}

impl Hosts {
    fn new() -> Option<Hosts> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            tsunagi_testkit::missing("netns", "network-namespace tests need root");
            return None;
        }
        if !sh(&["ip", "netns", "list"]) {
            tsunagi_testkit::missing("netns", "`ip netns` is not available");
            return None;
        }
        let pid = std::process::id();
        let tag = pid % 1_000_000;
        let h = Hosts {
            names: (1..=2).map(|i| format!("tsgio{tag}h{i}")).collect(),
            bridge: format!("tsgiob{tag}"),
            net: pid * 13 % 250 + 1,
        };
        let gw = format!("10.78.{}.1/24", h.net);
        let ok = sh(&["ip", "link", "add", &h.bridge, "type", "bridge"])
            && sh(&["ip", "addr", "add", &gw, "dev", &h.bridge])
            && sh(&["ip", "link", "set", &h.bridge, "up"])
            && h.names.iter().enumerate().all(|(i, ns)| {
                let veth = format!("tsgiov{tag}{i}");
                let addr = format!("10.78.{}.{}/24", h.net, i + 2);
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
            tsunagi_testkit::missing("netns", "could not create network namespaces");
            return None;
        }
        Some(h)
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for ns in &self.names {
            if let Ok(o) = Command::new("ip").args(["netns", "pids", ns]).output() {
                for pid in String::from_utf8_lossy(&o.stdout).split_whitespace() {
                    if let Ok(p) = pid.parse::<i32>() {
                        // SAFETY: signalling a process left in a namespace this test made.
                        unsafe { libc::kill(p, libc::SIGKILL) };
                    }
                }
            }
            sh(&["ip", "netns", "del", ns]);
        }
        sh(&["ip", "link", "del", &self.bridge]);
    }
}

#[test]
fn mpi_io_on_two_hosts_sharing_a_directory() {
    let Some(h) = Hosts::new() else { return };
    let exe = prefix().join("test-io-netns");
    check(
        Command::new(prefix().join("bin/mpicc"))
            .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-o"])
            .arg(&exe)
            .arg(src_dir().join("tests/c/io.c")),
    );
    let dir = std::env::temp_dir().join(format!("tsunagi-io-netns-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("test directory");
    for progress in ["polling", "threaded"] {
        let out = run(Command::new("timeout")
            .arg("180")
            .arg(mpirun())
            .arg("--host")
            .arg(format!("{}:2,{}:2", h.names[0], h.names[1]))
            .args(["--launch-agent", "ip netns exec {host}", "--launch-addr"])
            .arg(format!("10.78.{}.1", h.net))
            .env("TSUNAGI_PROGRESS", progress)
            .env("TSUNAGI_SPIN", "50")
            .env("TSUNAGI_YIELDS", "20")
            .env_remove("TSUNAGI_NODE_MAP")
            .env_remove("TSUNAGI_INTERNODE")
            .arg(&exe)
            .arg(&dir));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && stdout.contains("io ok"),
            "io on 2 hosts x 2, {progress} ({}):\n{stdout}{stderr}",
            out.status
        );
    }
    // Every file the program made (shared pointers included) is gone.
    let left: Vec<_> = std::fs::read_dir(&dir)
        .expect("read dir")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(left.is_empty(), "left behind: {left:?}");
}
