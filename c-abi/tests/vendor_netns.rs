//! Tsunagi over a vendor MPI across "hosts": two network namespaces on a bridge, each with
//! its own host name, and the vendor's own launcher starting the ranks on both through a
//! remote-shell agent that enters the namespace (`mpirun --vendor V --host a:2,b:2`).
//!
//! How each vendor is told to reach these hosts is the vendor's own configuration, as on a
//! real site, passed through mpirun's environment to the vendor's launcher:
//! - MPICH (Hydra): `HYDRA_LAUNCHER=ssh`, `HYDRA_LAUNCHER_EXEC=<agent>` (Hydra runs
//!   `<agent> [-x] HOST COMMAND`), and `HYDRA_IFACE=<bridge>` so that the proxies in the
//!   namespaces call back to mpiexec at the bridge's address (the host name of the root
//!   namespace is not reachable from inside).
//! - Open MPI: `OMPI_MCA_plm_rsh_agent=<agent>` (orted calls back on any address; the
//!   bridge's is one of them).
//!
//! The agent gives each namespace a host name of its own (a UTS namespace): Open MPI names
//! its session directories and its shared-memory segments (`vader_segment.<host>...`) by
//! host name, so two namespaces under the machine's one name collide in the shared /tmp
//! and /dev/shm and its ranks crash in `mca_btl_vader` (seen with Open MPI alone).
//!
//! Checked, for each vendor and each progress engine: `vendor_hosts.c` (Tsunagi's nodes are
//! exactly the namespaces, every rank exchanges small and large messages with every
//! other), the p2p and collective suites and `vendor_big.c` (every size across the eager
//! limit) with the vendor carrying every message; the same host check and the p2p suite
//! with TCP between the hosts and the vendor inside each (`TSUNAGI_INTERNODE=tcp`); and a
//! rank on the second host killed or aborting, ending the job within 15 s with nothing left
//! in either namespace.
//! Needs root, `ip netns`, `unshare` and both vendors' launchers: skipped with a message
//! otherwise, a failure in CI.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{check, have, mpirun, prefix, run, src_dir};

/// One job at a time: the namespaces share two cores.
static ONE_JOB_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Two namespaces on a bridge (10.79.N.0/24, test-only, `tsunagi_testkit::netns`) and an
/// agent script that runs a command "on" one of them, all removed on drop.
struct Hosts {
    net: tsunagi_testkit::netns::Hosts,
    dir: PathBuf,
}

impl std::ops::Deref for Hosts {
    type Target = tsunagi_testkit::netns::Hosts;
    fn deref(&self) -> &Self::Target {
        &self.net
    }
}

impl Hosts {
    fn new(vendor: &str) -> Option<Hosts> {
        if !have("unshare") {
            tsunagi_testkit::missing("netns", "`unshare` is not available");
            return None;
        }
        let launcher = match vendor {
            "mpich" => "mpiexec.hydra",
            _ => "mpirun.openmpi",
        };
        if !have(launcher) {
            tsunagi_testkit::missing(
                vendor,
                &format!("{launcher} not found (install Debian's {vendor} packages)"),
            );
            return None;
        }
        let h = Hosts {
            net: tsunagi_testkit::netns::Hosts::new("tsgvn", 79, 2)?,
            dir: std::env::temp_dir().join(format!("tsunagi-vendor-netns-{}", std::process::id())),
        };
        std::fs::create_dir_all(&h.dir).unwrap();
        // The remote-shell agent: `agent [-options] HOST COMMAND...` (Hydra's ssh launcher
        // passes `-x`, Open MPI's rsh agent none), HOST one of this test's addresses.
        let mut cases = String::new();
        for (i, ns) in h.names.iter().enumerate() {
            cases.push_str(&format!("    {}) ns={ns} ;;\n", h.ip(i)));
        }
        let agent = format!(
            "#!/bin/sh\n\
             while [ $# -gt 0 ]; do case \"$1\" in -*) shift ;; *) break ;; esac; done\n\
             host=$1; shift\n\
             case $host in\n{cases}    *) echo \"agent: unknown host $host\" >&2; exit 1 ;;\n\
             esac\n\
             exec ip netns exec \"$ns\" unshare --uts sh -c \"hostname $ns && exec $*\"\n"
        );
        std::fs::write(h.agent(), agent).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(h.agent(), std::fs::Permissions::from_mode(0o755)).unwrap();
        Some(h)
    }

    fn agent(&self) -> PathBuf {
        self.dir.join("agent")
    }

    /// `mpirun --vendor V` over both hosts with two slots each, the vendor's launcher told
    /// how to reach them.
    fn mpirun(&self, vendor: &str, engine: &str, extra: &[&str], exe: &Path) -> Command {
        let mut c = Command::new("timeout");
        c.arg("180")
            .arg(mpirun())
            .args([
                "--vendor",
                vendor,
                "--progress",
                engine,
                "-n",
                "4",
                "--host",
            ])
            .arg(format!("{}:2,{}:2", self.ip(0), self.ip(1)))
            .args(extra)
            .arg(exe)
            .env("HYDRA_LAUNCHER", "ssh")
            .env("HYDRA_LAUNCHER_EXEC", self.agent())
            .env("HYDRA_IFACE", self.bridge())
            .env("OMPI_MCA_plm_rsh_agent", self.agent())
            .env_remove("TSUNAGI_NODE_MAP")
            .env_remove("TSUNAGI_INTERNODE");
        c
    }
}

impl Drop for Hosts {
    // The namespaces (and anything left in them) go when `net` drops, after this.
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        // Open MPI's shared-memory segments are named by host name, here the namespaces'
        // own: a job this test had to kill (a failed check, the watchdog) can leave them.
        for f in std::fs::read_dir("/dev/shm")
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = f.file_name().to_string_lossy().into_owned();
            if self
                .names
                .iter()
                .any(|ns| name.starts_with(&format!("vader_segment.{ns}.")))
            {
                let _ = std::fs::remove_file(f.path());
            }
        }
    }
}

fn build(name: &str, vendor: &str) -> PathBuf {
    let exe = prefix().join(format!("test-vendor-netns-{vendor}-{name}"));
    check(
        Command::new(prefix().join("bin/mpicc"))
            .args([
                "-std=c11", "-pthread", "-Wall", "-Wextra", "-Werror", "-O1", "-o",
            ])
            .arg(&exe)
            .arg(src_dir().join(format!("tests/c/{name}.c"))),
    );
    exe
}

fn expect_ok(out: &Output, want: &str, what: &str) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{stdout}{stderr}",
        out.status
    );
    assert!(stdout.contains(want), "{what} printed:\n{stdout}{stderr}");
}

fn across_hosts(vendor: &str) {
    let _one = ONE_JOB_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let Some(h) = Hosts::new(vendor) else { return };
    let hosts = build("vendor_hosts", vendor);
    let suites = [
        (build("p2p", vendor), "p2p ok"),
        (build("coll", vendor), "coll ok"),
        (build("vendor_big", vendor), "vendor big ok"),
    ];
    for engine in ["polling", "threaded"] {
        // The vendor carries everything, within and across hosts.
        let what = format!("over {vendor} on 2 hosts x 2, {engine}");
        let out = run(h.mpirun(vendor, engine, &[], &hosts).arg("2"));
        expect_ok(&out, "vendor hosts ok: 2 nodes", &format!("{what}: hosts"));
        for (exe, want) in &suites {
            let out = run(&mut h.mpirun(vendor, engine, &[], exe));
            expect_ok(&out, want, &format!("{what}: {}", exe.display()));
        }
        // TCP between the hosts, the vendor inside each.
        let what = format!("over {vendor} inside 2 hosts, TCP between, {engine}");
        let tcp = ["--env", "TSUNAGI_INTERNODE=tcp"];
        let out = run(h.mpirun(vendor, engine, &tcp, &hosts).arg("2"));
        expect_ok(&out, "vendor hosts ok: 2 nodes", &format!("{what}: hosts"));
        let out = run(&mut h.mpirun(vendor, engine, &tcp, &suites[0].0));
        expect_ok(&out, "p2p ok", &format!("{what}: p2p"));
        let left = h.leftovers();
        assert!(left.is_empty(), "{what}: left running: {left:?}");
    }
    // The last rank (on the second host) dies by SIGKILL, or calls MPI_Abort: the job ends
    // within 15 s of it, nothing is left in either namespace. (Measured here: 0.08 s over
    // MPICH; over Open MPI 1.4-2.3 s at a load average of 25 and 6.1 s at 40 on 2 cores,
    // its orted noticing the death and its mpirun ending the job; the bound catches a job
    // that does not end, not the vendor's speed. A remote rank that exits without
    // MPI_Finalize is not tested: Hydra with a remote-shell launcher does not end such a
    // job at all, MPICH alone included; see docs/vendor-mpi.md.)
    let fail = build("vendor_fail", vendor);
    for how in ["kill", "abort"] {
        let dir = h.dir.join(format!("fail-{how}"));
        std::fs::create_dir_all(&dir).unwrap();
        let out = run(h.mpirun(vendor, "polling", &[], &fail).arg(&dir).arg(how));
        let ended = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        let stderr = String::from_utf8_lossy(&out.stderr);
        let what = format!("rank failure ({how}) on the second host over {vendor}");
        assert!(!out.status.success(), "{what}: the job succeeded");
        assert_ne!(
            out.status.code(),
            Some(124),
            "{what}: the job hung:\n{stderr}"
        );
        let t0: i64 = std::fs::read_to_string(dir.join("t0"))
            .unwrap_or_else(|e| panic!("{what}: t0: {e}\n{stderr}"))
            .trim()
            .parse()
            .unwrap();
        let after = Duration::from_millis((ended - t0).max(0) as u64);
        assert!(
            after < Duration::from_secs(15),
            "{what}: the job ended {after:?} after the failure"
        );
        let left = h.leftovers();
        assert!(left.is_empty(), "{what}: left running: {left:?}");
    }
}

#[test]
fn across_namespaces_over_mpich() {
    across_hosts("mpich");
}

#[test]
fn across_namespaces_over_openmpi() {
    across_hosts("openmpi");
}
