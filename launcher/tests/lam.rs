//! Interoperability with an independent IMPI implementation: a 2-client job of Tsunagi and
//! LAM/MPI 7.1.4 through `tsunagi-impi-server` (`scripts/lam-tsunagi-pair`): point-to-point
//! both ways (short, long, synchronous, more than hiwater back to back) and barrier, bcast,
//! reduce and allreduce on MPI_COMM_WORLD from and to every root, with LAM as client 0 and
//! as client 1, two Tsunagi ranks (each its own IMPI host, with an address of its own) and
//! one or two LAM ranks (one IMPI host), so that both sides' phases inside a site run.
//!
//! Needs LAM built with IMPI in /opt/lam-impi (or `TSUNAGI_LAM_PREFIX`; `scripts/build-lam-impi`
//! builds it), root and `ip netns`. Without them the test skips, or fails where
//! `TSUNAGI_REQUIRE` lists `lam` (or `all`) or `CI` is set (`tsunagi_testkit::missing`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

mod common;
use common::*;

fn lam_prefix() -> PathBuf {
    std::env::var_os("TSUNAGI_LAM_PREFIX")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/lam-impi"))
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/lam-tsunagi-pair")
}

/// Whether this process may make network namespaces.
fn can_netns() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    root && sh(&["ip", "netns", "list"])
}

fn pair(order: &str, tsunagi_np: usize, lam_np: usize) {
    let mut c = Command::new(script());
    c.arg(lam_prefix())
        .env("LAM_TSUNAGI_ORDER", order)
        .env("TSUNAGI_NP", tsunagi_np.to_string())
        .env("LAM_NP", lam_np.to_string())
        .env_remove("TSUNAGI_IMPI_SERVER")
        .env_remove("TSUNAGI_NODE_MAP");
    let (out, took) = run(c, Duration::from_secs(400));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("lam-tsunagi-pair: PASS"),
        "Tsunagi + LAM ({order}, {tsunagi_np} Tsunagi and {lam_np} LAM ranks) failed after \
         {took:?}:\n{stdout}\n{stderr}"
    );
    // Every rank of both clients reported, and the server saw both clients finish.
    for r in 0..tsunagi_np + lam_np {
        assert!(
            stdout.contains(&format!("impi_pair: rank {r} ok")),
            "rank {r} did not report:\n{stdout}"
        );
    }
    assert!(
        stdout.contains("every client sent FINI"),
        "the server did not see both clients finish:\n{stdout}"
    );
}

#[test]
fn tsunagi_and_lam_run_one_job_through_our_server() {
    let lam = lam_prefix();
    if !lam.join("bin/impid").exists() || !lam.join("bin/lamboot").exists() {
        tsunagi_testkit::missing(
            "lam",
            &format!(
                "no LAM/MPI 7.1.4 with IMPI under {} (scripts/build-lam-impi builds it)",
                lam.display()
            ),
        );
        return;
    }
    if !can_netns() {
        tsunagi_testkit::missing("netns", "network namespaces need root and `ip netns`");
        return;
    }
    let _s = serial();
    pair("lam-first", 2, 1);
    pair("tsunagi-first", 2, 2);
}
