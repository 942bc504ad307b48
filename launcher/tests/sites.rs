//! Jobs over several sites joined by IMPI: `mpirun --sites FILE`, which starts
//! `tsunagi-impi-server` and one mpirun per site (`--client K --server HOST:PORT`). Sites on
//! this host, and sites in network namespaces (one namespace per site, the server in the
//! root namespace behind the bridge). Each site's ranks talk over shared memory inside the
//! site and over the IMPI device to the other sites.
//!
//! The namespace tests need root and `ip netns`: they skip on a laptop and fail in CI when
//! the prerequisite is missing (`tsunagi_testkit::missing`).

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

mod common;
use common::*;

const P2P: &[&str] = &["sizes", "order", "modes", "datatypes", "comms", "errors"];
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
];

/// A sites file in a temporary directory, removed on drop.
struct SitesFile(std::path::PathBuf);

impl SitesFile {
    fn new(text: &str) -> SitesFile {
        let dir = std::env::temp_dir().join(format!(
            "tsunagi-sites-{}-{}",
            std::process::id(),
            NEXT_FILE.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("sites");
        std::fs::write(&p, text).unwrap();
        SitesFile(p)
    }
}

impl Drop for SitesFile {
    fn drop(&mut self) {
        if let Some(d) = self.0.parent() {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

static NEXT_FILE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

fn grid(sites: &SitesFile, program: &Path, args: &[&str]) -> Command {
    impi_server();
    let mut c = Command::new(mpirun());
    c.arg("--sites").arg(&sites.0).arg(program).args(args);
    // Several ranks share two cores: spin briefly before sleeping.
    c.env("TSUNAGI_SPIN", "50").env("TSUNAGI_YIELDS", "20");
    c.env_remove("TSUNAGI_NODE_MAP")
        .env_remove("TSUNAGI_INTERNODE")
        .env_remove("TSUNAGI_IMPI_SERVER");
    c
}

/// Processes whose command line names `exe` (leftovers of a job).
fn running(exe: &Path) -> Vec<String> {
    let want = exe.to_string_lossy().into_owned();
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.contains(&want) {
            v.push(format!("{pid} {cmd}"));
        }
    }
    v
}

fn assert_failed_cleanly(out: &Output, took: Duration, exe: &Path, what: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "{what}: the job succeeded although a rank died\n{stderr}"
    );
    assert!(
        took < Duration::from_secs(10),
        "{what}: the job took {took:?} to end after a rank died\n{stderr}"
    );
    assert!(
        stderr.contains("exiting without MPI_Finalize"),
        "{what}: the victim did not run\n{stderr}"
    );
    std::thread::sleep(Duration::from_millis(300));
    let left = running(exe);
    assert!(left.is_empty(), "{what}: processes left behind: {left:?}");
}

#[test]
fn two_and_three_sites_on_this_host_run_the_suites_under_both_engines() {
    let _s = serial();
    let p2p = p2p_check();
    let coll = coll_check();
    // 2 + 2 ranks, polling; then with threaded progress.
    for engine in ["polling", "threaded"] {
        let f = SitesFile::new(&format!(
            "# two sites\n-n 2 --progress {engine}\n-n 2 --progress {engine}\n"
        ));
        let (out, _) = run(grid(&f, &p2p, &[]), Duration::from_secs(120));
        assert_ok(&out, P2P, &format!("p2p over 2 sites ({engine})"));
    }
    // Uneven sites and mixed engines: 1 + 2 + 1 ranks.
    let f = SitesFile::new("-n 1\n-n 2 --progress threaded\n-n 1\n");
    let (out, _) = run(grid(&f, &coll, &["small"]), Duration::from_secs(180));
    assert_ok(&out, COLL, "collectives over 3 sites");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("every client sent FINI"),
        "the server did not see every site finish:\n{stderr}"
    );
}

/// The v collectives across sites (gatherv, scatterv, alltoallv, alltoallw with uneven
/// counts, some zero, gaps, derived types, in place) at three XSIZE crossovers: the
/// default (every block of the suite is short: bundled through the site masters), 8 bytes
/// (blocks of 0 and 4 bytes bundled, the others direct) and 0 (every block direct); both
/// engines; 3 uneven sites. Then context ids across sites: IMPI's max + 1
/// (`collectives/examples/impi_cids.rs`).
#[test]
fn v_collectives_and_context_ids_across_sites() {
    let _s = serial();
    let coll = coll_check();
    for (engine, xsize) in [
        ("polling", None),
        ("threaded", None),
        ("polling", Some("8")),
        ("threaded", Some("8")),
        ("polling", Some("0")),
    ] {
        let f = SitesFile::new(&format!(
            "-n 1 --progress {engine}\n-n 2 --progress {engine}\n-n 2 --progress {engine}\n"
        ));
        let mut c = grid(&f, &coll, &["small", "gather", "scatter", "alltoall"]);
        if let Some(x) = xsize {
            c.env("TSUNAGI_IMPI_COLL_XSIZE", x);
        }
        let (out, _) = run(c, Duration::from_secs(180));
        assert_ok(
            &out,
            &["gather", "scatter", "alltoall"],
            &format!("v collectives over 3 sites ({engine}, XSIZE {xsize:?})"),
        );
    }
    let cids = example("tsunagi-collectives", "impi_cids");
    for engine in ["polling", "threaded"] {
        let f = SitesFile::new(&format!(
            "-n 1 --progress {engine}\n-n 2 --progress {engine}\n-n 1 --progress {engine}\n"
        ));
        let (out, _) = run(grid(&f, &cids, &[]), Duration::from_secs(120));
        assert_ok(
            &out,
            &["cids"],
            &format!("context ids across 3 sites ({engine})"),
        );
    }
}

/// More sites than IMPI's MAXLINEAR (4): the collectives among masters take their
/// logarithmic forms (hypercube barrier, binomial bcast and reduce over master numbers
/// relative to the root's site); a site with two ranks runs the phases inside a site.
#[test]
fn five_sites_run_the_collectives_with_the_logarithmic_master_algorithms() {
    let _s = serial();
    let coll = coll_check();
    let f = SitesFile::new("-n 1\n-n 2\n-n 1\n-n 1\n-n 1\n");
    let mut c = grid(&f, &coll, &["small"]);
    // `mpirun --sites` would choose the latency-aware algorithms (every site is Tsunagi):
    // this test is about the IMPI ones.
    c.env("TSUNAGI_WAN_COLL", "impi");
    let (out, _) = run(c, Duration::from_secs(240));
    assert_ok(&out, COLL, "collectives over 5 sites");
}

#[test]
fn a_rank_dying_on_one_site_ends_every_site() {
    let _s = serial();
    let exe = example("tsunagi-core", "die_during_wait");
    for victim in ["0", "3"] {
        let f = SitesFile::new("-n 2\n-n 2\n");
        let (out, took) = run(grid(&f, &exe, &[victim]), Duration::from_secs(60));
        assert_failed_cleanly(&out, took, &exe, &format!("victim rank {victim}"));
    }
}

#[test]
fn bad_sites_files_end_with_one_clear_line() {
    let _s = serial();
    let exe = p2p_check();
    let cases: [(&str, &str); 3] = [
        ("# empty\n", "no sites"),
        ("-n 1 --client 1\n", "--client"),
        ("-n 1 \"open\n", "unterminated quote"),
    ];
    for (text, want) in cases {
        let f = SitesFile::new(text);
        let (out, _) = run(grid(&f, &exe, &[]), Duration::from_secs(20));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{text:?}: {stderr}");
        assert!(stderr.contains(want), "{text:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{text:?}: {stderr}");
    }
    let out = Command::new(mpirun())
        .args(["--sites", "/nonexistent/sites"])
        .arg(&exe)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read sites file"));
}

/// Sites in network namespaces: site K's ranks run in namespace K (started by an agent
/// through `ip netns exec`), the server and mpirun in the root namespace; IMPI traffic
/// crosses the veth links.
fn netns_sites(hosts: &Hosts, ranks: &[usize]) -> SitesFile {
    let mut text = format!("server {}\n", hosts.gateway());
    for (ns, n) in hosts.names.iter().zip(ranks) {
        text.push_str(&format!(
            "-n {n} --host {ns}:{n} --launch-agent \"ip netns exec {{host}}\" --launch-addr {}\n",
            hosts.gateway()
        ));
    }
    SitesFile::new(&text)
}

#[test]
fn sites_in_network_namespaces_run_the_suites() {
    let _s = serial();
    let Some(hosts) = Hosts::new(3) else { return };
    let p2p = p2p_check();
    let coll = coll_check();
    let f = netns_sites(&hosts, &[2, 2]);
    let (out, _) = run(grid(&f, &p2p, &[]), Duration::from_secs(120));
    assert_ok(&out, P2P, "p2p over 2 namespace sites");
    let f = netns_sites(&hosts, &[1, 2, 1]);
    let (out, _) = run(grid(&f, &coll, &["small"]), Duration::from_secs(180));
    assert_ok(&out, COLL, "collectives over 3 namespace sites");
    let left = hosts.leftovers();
    assert!(left.is_empty(), "left in the namespaces: {left:?}");
}

#[test]
fn a_site_killed_mid_job_in_a_namespace_ends_the_job() {
    let _s = serial();
    let Some(hosts) = Hosts::new(2) else { return };
    let exe = example("tsunagi-core", "die_during_wait");
    let f = netns_sites(&hosts, &[2, 2]);
    let (out, took) = run(grid(&f, &exe, &["2"]), Duration::from_secs(60));
    assert_failed_cleanly(&out, took, &exe, "namespace sites");
    let left = hosts.leftovers();
    assert!(left.is_empty(), "left in the namespaces: {left:?}");
}

/// Whether `tool` is on PATH; a skip (a failure in CI) naming `prereq` when it is not.
fn have_or_missing(tool: &str, prereq: &str) -> bool {
    let found = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        tsunagi_testkit::missing(prereq, &format!("{tool} not found"));
    }
    found
}

/// The grid of the IMPI issue: site 0 over the MPICH vendor (started by mpiexec.hydra),
/// site 1 over the Open MPI vendor (mpirun.openmpi), site 2 Tsunagi's own shm, joined by
/// IMPI; the point-to-point and collective suites under both engines.
#[test]
fn sites_over_mpich_open_mpi_and_native_transports() {
    let _s = serial();
    if !have_or_missing("mpiexec.hydra", "mpich") || !have_or_missing("mpirun.openmpi", "openmpi") {
        return;
    }
    let p2p = p2p_check();
    let coll = coll_check();
    for engine in ["polling", "threaded"] {
        let f = SitesFile::new(&format!(
            "-n 2 --vendor mpich --progress {engine}\n\
             -n 2 --vendor openmpi --progress {engine}\n\
             -n 1 --progress {engine}\n"
        ));
        let (out, _) = run(grid(&f, &p2p, &[]), Duration::from_secs(180));
        assert_ok(&out, P2P, &format!("p2p over vendor sites ({engine})"));
    }
    let f = SitesFile::new("-n 1 --vendor mpich\n-n 2 --vendor openmpi\n-n 1\n");
    let (out, _) = run(grid(&f, &coll, &["small"]), Duration::from_secs(240));
    assert_ok(&out, COLL, "collectives over vendor sites");
}
