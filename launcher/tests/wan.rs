//! Sites behind a wide-area link: three sites of two ranks, each in its own network
//! namespace, joined by IMPI through `tsunagi-wan`'s TUN router at 5 ms one way
//! (`scripts/wan-netns`). The emulator's delay as measured across it (half the fastest of
//! 20 round trips), and every collective of the suite with the latency-aware algorithms
//! (the default under `mpirun --sites`: direct ones for small calls, the coordinators'
//! without them, the split and reduce-scatter + allgather ones under models that choose
//! them) and with the IMPI ones. Then two private sites joined through the IMPI relay.
//!
//! Needs root and `ip netns`: skips on a laptop, fails in CI when missing.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

mod common;
use common::*;

const COLL: &[&str] = &[
    "barrier",
    "bcast",
    "gather",
    "scatter",
    "allgather",
    "alltoall",
    "reduce",
    "allreduce",
    "reduce_scatter",
    "scan",
    "nbc",
    "subcomm",
    "random",
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// `tsunagi-wan` next to mpirun, built on demand.
fn wan_bin() -> PathBuf {
    let p = Path::new(mpirun()).parent().unwrap().join("tsunagi-wan");
    if !p.exists() {
        let mut c = Command::new(env!("CARGO"));
        c.args(["build", "-p", "tsunagi-wan", "--bin", "tsunagi-wan"]);
        if p.parent().unwrap().ends_with("release") {
            c.arg("--release");
        }
        assert!(c.status().unwrap().success(), "building tsunagi-wan failed");
    }
    p
}

/// Sites in namespaces behind the emulator; removed on drop.
struct WanSites {
    tag: u32,
    n: usize,
    /// (namespace, WAN address) per site.
    sites: Vec<(String, String)>,
    gateway: String,
}

impl WanSites {
    fn up(n: usize, link: &str) -> Option<WanSites> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            tsunagi_testkit::missing("netns", "the WAN tests need root");
            return None;
        }
        if !sh(&["ip", "netns", "list"]) {
            tsunagi_testkit::missing("netns", "`ip netns` is not available");
            return None;
        }
        let tag = std::process::id() % 200 + 20;
        let out = Command::new(repo().join("scripts/wan-netns"))
            .args(["up", &tag.to_string(), &n.to_string(), link])
            .env("TSUNAGI_WAN_BIN", wan_bin())
            .output()
            .unwrap();
        let mut w = WanSites {
            tag,
            n,
            sites: Vec::new(),
            gateway: String::new(),
        };
        if !out.status.success() {
            tsunagi_testkit::missing(
                "netns",
                &format!(
                    "scripts/wan-netns up failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                ),
            );
            return None;
        }
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            match f[..] {
                ["site", _, ns, wan, _] => w.sites.push((ns.into(), wan.into())),
                ["gateway", gw] => w.gateway = gw.into(),
                _ => panic!("unexpected wan-netns line {line:?}"),
            }
        }
        assert_eq!(w.sites.len(), n);
        Some(w)
    }

    /// A sites file: `k` ranks per site, IMPI hosts on the WAN addresses.
    fn sites_file(&self, k: usize) -> PathBuf {
        let mut text = format!("server {}\n", self.gateway);
        for (ns, wan) in &self.sites {
            text.push_str(&format!(
                "-n {k} --host {ns}:{k} --launch-agent \"ip netns exec {{host}}\" \
                 --launch-addr {} --env TSUNAGI_IMPI_ADDR={wan}\n",
                self.gateway
            ));
        }
        let p = std::env::temp_dir().join(format!("tsunagi-wan-sites-{}", self.tag));
        std::fs::write(&p, text).unwrap();
        p
    }
}

impl Drop for WanSites {
    fn drop(&mut self) {
        let _ = Command::new(repo().join("scripts/wan-netns"))
            .args(["down", &self.tag.to_string(), &self.n.to_string()])
            .status();
        let _ = std::fs::remove_file(
            std::env::temp_dir().join(format!("tsunagi-wan-sites-{}", self.tag)),
        );
    }
}

/// `mpirun --env E... --sites FILE program args` (`--env` reaches every site's ranks).
fn grid(file: &Path, env: &[&str], program: &Path, args: &[&str]) -> Command {
    impi_server();
    let mut c = Command::new(mpirun());
    for e in env {
        c.args(["--env", e]);
    }
    c.arg("--sites").arg(file).arg(program).args(args);
    c.env("TSUNAGI_SPIN", "50").env("TSUNAGI_YIELDS", "20");
    c.env_remove("TSUNAGI_NODE_MAP")
        .env_remove("TSUNAGI_INTERNODE")
        .env_remove("TSUNAGI_IMPI_SERVER")
        .env_remove("TSUNAGI_WAN_COLL");
    c
}

#[test]
fn three_sites_behind_a_5ms_wan_run_every_collective() {
    let _s = serial();
    let Some(w) = WanSites::up(3, "delay=5ms") else {
        return;
    };
    // The emulator's own accuracy: one-way delay (half the median round trip between two
    // sites) within 10 % of the setting.
    let wan = wan_bin();
    let (ns2, addr2) = &w.sites[2];
    let mut echo = Command::new("ip")
        .args(["netns", "exec", ns2])
        .arg(&wan)
        .args(["echo", "--listen", &format!("{addr2}:7007")])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let ping = Command::new("ip")
        .args(["netns", "exec", &w.sites[0].0])
        .arg(&wan)
        .args(["ping", "--to", &format!("{addr2}:7007"), "--count", "20"])
        .output()
        .unwrap();
    let _ = echo.kill();
    let _ = echo.wait();
    let text = String::from_utf8_lossy(&ping.stdout).into_owned();
    assert!(
        ping.status.success(),
        "ping failed: {text} {}",
        String::from_utf8_lossy(&ping.stderr)
    );
    // Half the fastest round trip: the emulator never delivers early, and on a loaded
    // machine the median also carries scheduling delays of the echo and ping programs.
    let min_rtt: f64 = text
        .split_whitespace()
        .skip_while(|&x| x != "min")
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no round trip figure in {text:?}"));
    let one_way = min_rtt / 2.0;
    assert!(
        (one_way - 5000.0).abs() <= 500.0,
        "one-way delay {one_way} us for a setting of 5000 us ({text})"
    );

    let file = w.sites_file(2);
    let coll = coll_check();
    // Latency-aware (the default under --sites), the whole suite with small counts, then
    // bcast, allreduce and allgather at full counts with the split algorithms forced (the
    // root to every remote rank; every site-rank pair across), then allreduce by
    // reduce-scatter + allgather among the sites.
    // TSUNAGI_WAN_TRACE names the schedule of each non-blocking collective across sites:
    // the suite's `nbc` checks must have run the latency-aware ones.
    let traced = |out: &std::process::Output, what: &[&str]| {
        let err = String::from_utf8_lossy(&out.stderr);
        for w in what {
            assert!(
                err.contains(w),
                "no {w:?} in the trace of the non-blocking collectives:\n{err}"
            );
        }
    };
    let (out, _) = run(
        grid(&file, &["TSUNAGI_WAN_TRACE=1"], &coll, &["small"]),
        Duration::from_secs(240),
    );
    assert_ok(&out, COLL, "collectives over a 5 ms WAN (latency-aware)");
    traced(
        &out,
        &[
            "wan MPI_Ibarrier of 0 bytes: direct",
            "wan MPI_Ibcast of 8 bytes: direct",
            "wan MPI_Iallreduce of 8 bytes: direct",
            "wan MPI_Iscan of 64 bytes: direct",
            "wan MPI_Iexscan of 64 bytes: direct",
        ],
    );
    // The same without the direct algorithms for small calls on small communicators: the
    // site coordinators' algorithms at every size.
    let (out, _) = run(
        grid(
            &file,
            &["TSUNAGI_WAN_DIRECT=0", "TSUNAGI_WAN_TRACE=1"],
            &coll,
            &["small"],
        ),
        Duration::from_secs(240),
    );
    assert_ok(
        &out,
        COLL,
        "collectives over a 5 ms WAN (coordinators only)",
    );
    traced(
        &out,
        &[
            "wan MPI_Ibarrier of 0 bytes: coordinators",
            "wan MPI_Ibcast of 8 bytes: coordinators",
            "wan MPI_Iallreduce of 8 bytes: coordinators",
        ],
    );
    // The flat algorithms (the benchmarks' baseline: chosen as for ranks on separate
    // nodes across sites).
    let (out, _) = run(
        grid(&file, &["TSUNAGI_WAN_COLL=flat"], &coll, &["small"]),
        Duration::from_secs(240),
    );
    assert_ok(&out, COLL, "collectives over a 5 ms WAN (flat)");
    let (out, _) = run(
        grid(
            &file,
            &["TSUNAGI_WAN_BCAST=split", "TSUNAGI_WAN_ALLREDUCE=split"],
            &coll,
            &["bcast", "allreduce", "allgather"],
        ),
        Duration::from_secs(180),
    );
    assert_ok(
        &out,
        &["bcast", "allreduce", "allgather"],
        "large collectives over a 5 ms WAN",
    );
    // Reduce-scatter + allgather among the sites (two wide-area rounds of a third of the
    // bytes each), by every site-rank pair: the plan for large allreduces where streams
    // are limited by their windows.
    let (out, _) = run(
        grid(
            &file,
            &["TSUNAGI_WAN_ALLREDUCE=split_rsag"],
            &coll,
            &["allreduce"],
        ),
        Duration::from_secs(180),
    );
    assert_ok(
        &out,
        &["allreduce"],
        "allreduce by reduce-scatter + allgather over a 5 ms WAN",
    );
    // The benchmark's three timings (bench/wan.sh -T): one 8-byte point per collective,
    // one round of wan and flat. Each table must be there with a time for both modes and
    // a ratio, and the isolated calls (which agree on a start instant on the host clock)
    // must have run.
    let bench = example("tsunagi-collectives", "wan_bench");
    let (out, _) = run(
        grid(
            &file,
            &[
                "WAN_BENCH_TIMING=chain,rotate,isolated",
                "WAN_BENCH_ONLY=barrier,bcast,allreduce",
                "WAN_BENCH_SIZES=8",
            ],
            &bench,
            &["8", "2", "1", "wan,flat"],
        ),
        Duration::from_secs(120),
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "wan_bench failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tables: Vec<&str> = text.split("#### timing ").skip(1).collect();
    assert_eq!(tables.len(), 3, "three timing tables expected:\n{text}");
    for (table, (name, rows)) in tables.iter().zip([
        (
            "`Chain`",
            &["| barrier | 0 |", "| bcast | 8 |", "| allreduce | 8 |"][..],
        ),
        ("`Rotate`", &["| bcast | 8 |"][..]),
        (
            "`Isolated`",
            &["| barrier | 0 |", "| bcast | 8 |", "| allreduce | 8 |"][..],
        ),
    ]) {
        assert!(table.starts_with(name), "table {name} expected:\n{text}");
        for row in rows {
            let line = table
                .lines()
                .find(|l| l.starts_with(row))
                .unwrap_or_else(|| panic!("no row {row:?} in table {name}:\n{text}"));
            // | coll | bytes | wan | flat | flat/wan |: two positive times and a ratio.
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            for cell in &cells[3..5] {
                let t: f64 = cell.parse().unwrap_or(0.0);
                assert!(t > 0.0, "no time in {line:?} ({name})");
            }
            assert!(
                cells[5]
                    .split_whitespace()
                    .next()
                    .and_then(|r| r.parse::<f64>().ok())
                    .is_some(),
                "no ratio in {line:?} ({name})"
            );
        }
    }
    assert!(
        tables[2].contains("isolated calls had a rank start"),
        "no late-start note in the isolated table:\n{text}"
    );
    // The IMPI algorithms through the same link.
    let c = grid(
        &file,
        &["TSUNAGI_WAN_COLL=impi"],
        &coll,
        &["small", "barrier", "bcast", "reduce", "allreduce"],
    );
    let (out, _) = run(c, Duration::from_secs(180));
    assert_ok(
        &out,
        &["barrier", "bcast", "reduce", "allreduce"],
        "IMPI collectives over a 5 ms WAN",
    );
}

/// `tsunagi-impi-relay` next to mpirun, built on demand.
fn relay_bin() -> PathBuf {
    let p = Path::new(mpirun())
        .parent()
        .unwrap()
        .join("tsunagi-impi-relay");
    if !p.exists() {
        let mut c = Command::new(env!("CARGO"));
        c.args([
            "build",
            "-p",
            "tsunagi-impi-relay",
            "--bin",
            "tsunagi-impi-relay",
        ]);
        if p.parent().unwrap().ends_with("release") {
            c.arg("--release");
        }
        assert!(
            c.status().unwrap().success(),
            "building tsunagi-impi-relay failed"
        );
    }
    p
}

/// Two private sites and a relay: site i (namespace `irl<T>s<i>`) has a private network
/// 10.<120+i>.<T>.0/24 shared only with the relay namespace `irl<T>r`, plus a /30 to the root
/// namespace for mpirun's launch agents (10.78.<T>.<4i+1>/30). The relay's public address
/// 10.79.<T>.1 (on its loopback) is routed from both sites through their private network;
/// the relay reaches the IMPI server in the root namespace over its own /30 (10.78.<T>.9).
/// The relay namespace does not forward packets, and no site has a route to the other's
/// network: the only way between them is through the relay's sockets.
struct RelayNet {
    t: u32,
}

impl RelayNet {
    fn ns(&self, i: usize) -> String {
        format!("irl{}s{i}", self.t)
    }
    fn relay_ns(&self) -> String {
        format!("irl{}r", self.t)
    }
    fn public(&self) -> String {
        format!("10.79.{}.1", self.t)
    }
    fn private(&self, i: usize) -> String {
        format!("10.{}.{}.2", 120 + i, self.t)
    }
    fn launch_addr(&self, i: usize) -> String {
        format!("10.78.{}.{}", self.t, 4 * i + 1)
    }
    fn server_addr(&self) -> String {
        format!("10.78.{}.9", self.t)
    }

    fn up() -> Option<RelayNet> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            tsunagi_testkit::missing("netns", "the relay test needs root");
            return None;
        }
        if !sh(&["ip", "netns", "list"]) {
            tsunagi_testkit::missing("netns", "`ip netns` is not available");
            return None;
        }
        let n = RelayNet {
            t: std::process::id() % 200 + 20,
        };
        n.down();
        let t = n.t;
        let r = n.relay_ns();
        let mut ok = sh(&["ip", "netns", "add", &r])
            && sh(&["ip", "-n", &r, "link", "set", "lo", "up"])
            && sh(&[
                "ip",
                "-n",
                &r,
                "addr",
                "add",
                &format!("{}/32", n.public()),
                "dev",
                "lo",
            ])
            && sh(&[
                "ip",
                "netns",
                "exec",
                &r,
                "sysctl",
                "-qw",
                "net.ipv4.ip_forward=0",
            ])
            && sh(&[
                "ip",
                "link",
                "add",
                &format!("irlu{t}"),
                "type",
                "veth",
                "peer",
                "name",
                "up0",
                "netns",
                &r,
            ])
            && sh(&[
                "ip",
                "addr",
                "add",
                &format!("{}/30", n.server_addr()),
                "dev",
                &format!("irlu{t}"),
            ])
            && sh(&["ip", "link", "set", &format!("irlu{t}"), "up"])
            && sh(&[
                "ip",
                "-n",
                &r,
                "addr",
                "add",
                &format!("10.78.{t}.10/30"),
                "dev",
                "up0",
            ])
            && sh(&["ip", "-n", &r, "link", "set", "up0", "up"]);
        for i in 0..2 {
            let ns = n.ns(i);
            let ctl = format!("irlc{t}x{i}");
            ok = ok
                && sh(&["ip", "netns", "add", &ns])
                && sh(&["ip", "-n", &ns, "link", "set", "lo", "up"])
                && sh(&[
                    "ip", "link", "add", &ctl, "type", "veth", "peer", "name", "ctl0", "netns", &ns,
                ])
                && sh(&[
                    "ip",
                    "addr",
                    "add",
                    &format!("{}/30", n.launch_addr(i)),
                    "dev",
                    &ctl,
                ])
                && sh(&["ip", "link", "set", &ctl, "up"])
                && sh(&[
                    "ip",
                    "-n",
                    &ns,
                    "addr",
                    "add",
                    &format!("10.78.{t}.{}/30", 4 * i + 2),
                    "dev",
                    "ctl0",
                ])
                && sh(&["ip", "-n", &ns, "link", "set", "ctl0", "up"])
                && sh(&[
                    "ip",
                    "-n",
                    &r,
                    "link",
                    "add",
                    &format!("p{i}"),
                    "type",
                    "veth",
                    "peer",
                    "name",
                    "priv0",
                    "netns",
                    &ns,
                ])
                && sh(&[
                    "ip",
                    "-n",
                    &r,
                    "addr",
                    "add",
                    &format!("10.{}.{t}.1/24", 120 + i),
                    "dev",
                    &format!("p{i}"),
                ])
                && sh(&["ip", "-n", &r, "link", "set", &format!("p{i}"), "up"])
                && sh(&[
                    "ip",
                    "-n",
                    &ns,
                    "addr",
                    "add",
                    &format!("{}/24", n.private(i)),
                    "dev",
                    "priv0",
                ])
                && sh(&["ip", "-n", &ns, "link", "set", "priv0", "up"])
                && sh(&[
                    "ip",
                    "-n",
                    &ns,
                    "route",
                    "add",
                    &format!("{}/32", n.public()),
                    "via",
                    &format!("10.{}.{t}.1", 120 + i),
                ]);
        }
        if !ok {
            tsunagi_testkit::missing("netns", "could not set up the relay namespaces");
            return None;
        }
        Some(n)
    }

    fn down(&self) {
        for ns in [self.ns(0), self.ns(1), self.relay_ns()] {
            if let Ok(o) = Command::new("ip").args(["netns", "pids", &ns]).output() {
                for p in String::from_utf8_lossy(&o.stdout).split_whitespace() {
                    sh(&["kill", "-9", p]);
                }
            }
            sh(&["ip", "netns", "del", &ns]);
        }
        // The veth pairs to the root namespace go with the namespaces; these are the
        // leftovers of a setup that failed half-way.
        sh(&["ip", "link", "del", &format!("irlu{}", self.t)]);
        for i in 0..2 {
            sh(&["ip", "link", "del", &format!("irlc{}x{i}", self.t)]);
        }
    }
}

impl Drop for RelayNet {
    fn drop(&mut self) {
        self.down();
    }
}

/// Read a child's first stdout line.
fn first_line(c: &mut std::process::Child) -> String {
    use std::io::BufRead;
    let mut line = String::new();
    std::io::BufReader::new(c.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    line.trim().to_string()
}

/// One job of two sites through the relay: the server, the relay, both sites' mpiruns
/// (`args` after the program); returns both sites' output and the relay's log.
fn relayed_job(
    n: &RelayNet,
    progress: &str,
    program: &Path,
    args: &[&str],
) -> (Vec<std::process::Output>, String) {
    use std::process::Stdio;
    let mut server = Command::new(impi_server())
        .args(["-server", "2", "-port", "0", "-host", &n.server_addr()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let server_at = first_line(&mut server);
    let log = std::env::temp_dir().join(format!("tsunagi-impi-relay-{}.log", n.t));
    let mut relay = Command::new("ip")
        .args(["netns", "exec", &n.relay_ns()])
        .arg(relay_bin())
        .args([
            "--listen",
            &format!("{}:0", n.public()),
            "--server",
            &server_at,
        ])
        .args(["--public", &n.public(), "-v"])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let listening = first_line(&mut relay);
    let relay_at = listening
        .strip_prefix("listening ")
        .unwrap_or_else(|| panic!("relay said {listening:?}"))
        .to_string();
    let site = |i: usize| {
        let mut c = Command::new(mpirun());
        c.args(["-n", "2", "--host", &format!("{}:2", n.ns(i))])
            .args(["--launch-agent", "ip netns exec {host}"])
            .args(["--launch-addr", &n.launch_addr(i), "--progress", progress])
            .args(["--env", "TSUNAGI_IMPI_PEERS=tsunagi"])
            .args(["--client", &i.to_string(), "--server", &relay_at, "--"])
            .arg(program)
            .args(args);
        c.env("TSUNAGI_SPIN", "50").env("TSUNAGI_YIELDS", "20");
        c.env_remove("TSUNAGI_NODE_MAP")
            .env_remove("TSUNAGI_INTERNODE")
            .env_remove("TSUNAGI_IMPI_SERVER")
            .env_remove("TSUNAGI_IMPI_ADDR")
            .env_remove("TSUNAGI_WAN_COLL");
        c
    };
    let s1 = site(1);
    let other = std::thread::spawn(move || run(s1, Duration::from_secs(240)).0);
    let (out0, _) = run(site(0), Duration::from_secs(240));
    let out1 = other.join().unwrap();
    let _ = relay.kill();
    let _ = relay.wait();
    let _ = server.kill();
    let _ = server.wait();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    (vec![out0, out1], text)
}

#[test]
fn two_private_sites_join_through_the_impi_relay() {
    let _s = serial();
    let Some(n) = RelayNet::up() else { return };
    // The sites really are apart: no route from one to the other's private network.
    for (from, to) in [(0, 1), (1, 0)] {
        assert!(
            !sh(&["ip", "-n", &n.ns(from), "route", "get", &n.private(to)]),
            "site {from} has a route to site {to}"
        );
    }
    let coll = coll_check();
    for progress in ["polling", "threaded"] {
        let (outs, log) = relayed_job(&n, progress, &p2p_check(), SUITE);
        // World rank 0 (site 0) reports; site 1 must succeed too.
        assert_ok(
            &outs[0],
            SUITE,
            &format!("relayed p2p, {progress}\nrelay log:\n{log}"),
        );
        assert_ok(
            &outs[1],
            &[],
            &format!("relayed p2p, site 1, {progress}\nrelay log:\n{log}"),
        );
        // Every host pair's connection went through the relay: 2 hosts per site (one per
        // process), each of site 1 connects to each of site 0.
        let pairs = log.lines().filter(|l| l.contains("host pair")).count();
        assert_eq!(
            pairs, 4,
            "relayed host pairs ({progress}); relay log:\n{log}"
        );
        let tests = [
            "barrier",
            "bcast",
            "reduce",
            "allreduce",
            "allgather",
            "alltoall",
            "random",
        ];
        let (outs, log) = relayed_job(&n, progress, &coll, &["small"]);
        assert_ok(
            &outs[0],
            &tests,
            &format!("relayed collectives, {progress}\nrelay log:\n{log}"),
        );
        assert_ok(
            &outs[1],
            &[],
            &format!("relayed collectives, site 1, {progress}\nrelay log:\n{log}"),
        );
    }
}
