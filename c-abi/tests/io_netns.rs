//! MPI-IO across "hosts": tests/c/io.c on two network namespaces × 2 ranks (shared memory
//! inside a host, TCP between them, aggregators on both hosts), all writing the same files
//! in one directory that both hosts see, under both progress engines. Namespaces share
//! the machine's file system, so this is a shared file system with coherent caches (the
//! shared file pointer and the sieving locks are POSIX record locks, which NFS serves
//! too). Needs root and `ip netns`: skipped with a message otherwise (a failure under CI).

mod common;

use std::process::Command;

use common::{check, mpirun, prefix, run, src_dir};

#[test]
fn mpi_io_on_two_hosts_sharing_a_directory() {
    // Two namespaces on a bridge (10.78.N.0/24, test-only), removed on drop.
    let Some(h) = tsunagi_testkit::netns::Hosts::new("tsgio", 78, 2) else {
        return;
    };
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
            .arg(h.host_list(2))
            .args(["--launch-agent", "ip netns exec {host}", "--launch-addr"])
            .arg(h.gateway())
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
