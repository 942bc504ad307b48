//! The C test suite: installs the freshly built library into a private prefix (with the
//! same `install-c` script `scripts/install` uses), compiles the programs in `tests/c`
//! with that prefix's `mpicc`, and runs them with our `mpirun` on 1 to 8 ranks. Also: the
//! header as C11 and C++17 under `-Wall -Wextra -Werror`, the exported symbols, the
//! wrappers, and the drop-in run of a program built with Debian's `mpicc.mpich` (skipped,
//! with a message, when MPICH is not installed).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{check, have, mpirun, prefix, run, src_dir};

/// Compile tests/c/<name>.c with our mpicc (warnings are errors).
fn build(name: &str) -> PathBuf {
    build_as(name, &format!("test-{name}"))
}

/// [`build`] into an executable of its own name (tests run in parallel: two tests must
/// not write, or run while another writes, the same file).
fn build_as(name: &str, exe: &str) -> PathBuf {
    let exe = prefix().join(exe);
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

fn mpirun_n(n: usize, exe: &Path) -> Output {
    run(Command::new("timeout")
        .arg("120")
        .arg(mpirun())
        .args(["-n", &n.to_string()])
        .arg(exe))
}

/// Run `name` on each rank count: it must succeed, print no error, and rank 0 prints `want`.
fn suite(name: &str, ranks: &[usize], want: &str) {
    let exe = build(name);
    for &n in ranks {
        let out = mpirun_n(n, &exe);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "{name} on {n} ranks failed ({}):\n{stdout}{stderr}",
            out.status
        );
        assert!(
            stderr.is_empty(),
            "{name} on {n} ranks wrote to stderr:\n{stderr}"
        );
        assert!(
            stdout.contains(want),
            "{name} on {n} ranks printed:\n{stdout}"
        );
    }
}

#[test]
fn point_to_point_every_mode() {
    suite("p2p", &[2, 3, 8], "p2p ok");
}

#[test]
fn datatypes_against_hand_computed_layouts() {
    suite("datatype", &[1, 2], "datatype ok");
}

#[test]
fn communicators_and_groups() {
    suite("comm", &[1, 4, 5], "comm ok");
}

#[test]
fn split_type_shared_follows_the_node_map() {
    let exe = build_as("comm", "test-comm-node-map");
    let out = run(Command::new("timeout")
        .arg("120")
        .arg(mpirun())
        .args(["-n", "4", "--node-map", "2", "--env", "EXPECT_NODE_SIZE=2"])
        .arg(&exe));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn collectives_against_hand_computed_results() {
    suite("coll", &[1, 2, 3, 4, 5, 8], "coll ok");
}

#[test]
fn topologies_and_a_himeno_halo_exchange() {
    suite("topo", &[1, 2, 4, 6, 8], "topo ok");
}

#[test]
fn non_blocking_collectives_overlap_point_to_point() {
    suite("nbc", &[1, 2, 3, 4, 7], "nbc ok");
}

/// One-sided communication: every window flavor, synchronisation mode and operation, on
/// 1 to 4 ranks, under both progress engines, within a node (shared memory) and across
/// pretend nodes (TCP between them).
#[test]
fn one_sided_every_flavor_mode_and_operation() {
    let exe = build("rma");
    for (n, extra) in [
        (1, &[][..]),
        (2, &[][..]),
        (3, &["--progress", "threaded", "-x", "RMA_ASYNC=1"][..]),
        (4, &[][..]),
        (4, &["--progress", "threaded"][..]),
        (4, &["--node-map", "2"][..]),
        (4, &["-x", "TSUNAGI_RMA_DIRECT=0"][..]),
        (
            3,
            &[
                "--node-map",
                "0,1,1",
                "--progress",
                "threaded",
                "-x",
                "RMA_ASYNC=1",
            ][..],
        ),
    ] {
        let out = run(Command::new("timeout")
            .arg("120")
            .arg(mpirun())
            .args(["-n", &n.to_string()])
            .args(extra)
            .arg(&exe));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && stderr.is_empty() && stdout.contains("rma ok"),
            "rma on {n} ranks {extra:?} ({}):\n{stdout}{stderr}",
            out.status
        );
    }
}

/// The collective tests again with ranks spread over pretend nodes, so that the
/// hierarchical algorithms run (and inter-node traffic takes the socket transport).
#[test]
fn collectives_on_pretend_nodes() {
    for name in ["coll", "nbc"] {
        let exe = build_as(name, &format!("test-{name}-node-map"));
        for (n, nodes) in [(4, "2"), (6, "3")] {
            let out = run(Command::new("timeout")
                .arg("120")
                .arg(mpirun())
                .args(["-n", &n.to_string(), "--node-map", nodes])
                .arg(&exe));
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && stdout.contains(&format!("{name} ok")),
                "{name} on {n} ranks over {nodes} nodes failed ({}):\n{stdout}{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

#[test]
fn error_classes_attributes_info() {
    suite("errors", &[2, 3], "errors ok");
}

#[test]
fn thread_multiple_shares_the_handle_tables_safely() {
    suite("threads", &[2, 3], "threads ok");
}

#[test]
fn profiling_interface_intercepts_mpi_names() {
    suite("profile", &[3], "profile ok");
}

#[test]
fn fatal_errors_name_the_call_and_fail_the_job() {
    let exe = build("fatal");
    let out = mpirun_n(2, &exe);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a fatal error must fail the job");
    assert!(
        stderr.contains("MPI_Send") && stderr.contains("rank 99"),
        "stderr: {stderr}"
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("not reached"));
}

#[test]
fn header_compiles_as_c_and_cxx_and_runs_as_singleton() {
    let src = src_dir().join("tests/c/header.c");
    for (wrapper, lang, std) in [("mpicc", "c", "-std=c11"), ("mpicxx", "c++", "-std=c++17")] {
        let exe = prefix().join(format!("test-header-{wrapper}"));
        check(
            Command::new(prefix().join("bin").join(wrapper))
                .args([
                    "-x",
                    lang,
                    std,
                    "-Wall",
                    "-Wextra",
                    "-Werror",
                    "-pedantic",
                    "-o",
                ])
                .arg(&exe)
                .arg(&src),
        );
        // Bare, without a launcher: a singleton.
        let out = check(
            Command::new(&exe)
                .env_remove("PMI_FD")
                .env_remove("PMI_PORT"),
        );
        assert!(out.contains("size 1 rank 0 level 1 status ok"), "{out}");
        let out = mpirun_n(1, &exe);
        assert!(out.status.success());
    }
}

#[test]
fn every_function_is_pmpi_with_a_weak_mpi_alias() {
    let _ = prefix();
    let nm = check(
        Command::new("nm")
            .args(["-D", "--defined-only"])
            .arg(prefix().join("lib/libmpi.so.12")),
    );
    let mut syms = std::collections::HashMap::new();
    for line in nm.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() == 3 {
            syms.insert(f[2].to_string(), (f[0].to_string(), f[1].to_string()));
        }
    }
    for name in mpi::IMPLEMENTED {
        let p = syms
            .get(&format!("P{name}"))
            .unwrap_or_else(|| panic!("P{name} not exported"));
        let m = syms
            .get(*name)
            .unwrap_or_else(|| panic!("{name} not exported"));
        assert_eq!(p.1, "T", "P{name} must be a strong function symbol");
        assert_eq!(m.1, "W", "{name} must be weak");
        assert_eq!(p.0, m.0, "{name} must alias P{name}");
    }
    for data in [
        "MPI_F_STATUS_IGNORE",
        "MPI_F_STATUSES_IGNORE",
        "MPI_UNWEIGHTED",
        "MPI_WEIGHTS_EMPTY",
        "MPIR_Dup_fn",
    ] {
        assert!(syms.contains_key(data), "{data} not exported");
    }
    let dynamic = check(
        Command::new("readelf")
            .arg("-d")
            .arg(prefix().join("lib/libmpi.so.12")),
    );
    assert!(dynamic.contains("[libmpi.so.12]"), "SONAME: {dynamic}");
}

#[test]
fn wrappers_pass_flags_and_report_their_lines() {
    let cc = prefix().join("bin/mpicc");
    let p = prefix().display().to_string();
    let show = check(Command::new(&cc).arg("-show"));
    for part in [
        format!("-I{p}/include"),
        format!("-L{p}/lib"),
        format!("-Wl,-rpath,{p}/lib"),
        "-lmpi".into(),
    ] {
        assert!(show.contains(&part), "-show: {show}");
    }
    let ci = check(Command::new(&cc).arg("-compile_info"));
    assert!(ci.contains("-I") && !ci.contains("-lmpi"), "{ci}");
    let li = check(Command::new(&cc).arg("-link_info"));
    assert!(li.contains("-lmpi") && li.contains("-L"), "{li}");
    assert!(!check(Command::new(&cc).arg("--version")).is_empty());
    let pre = check(
        Command::new(&cc)
            .args(["-E", "-dM", "-x", "c"])
            .arg(src_dir().join("tests/c/check.h")),
    );
    assert!(pre.contains("MPI_COMM_WORLD"), "-E must see mpi.h");
    assert!(check(Command::new(prefix().join("bin/mpic++")).arg("-show")).contains("-lmpi"));
    let pc = std::fs::read_to_string(prefix().join("lib/pkgconfig/mpi.pc")).expect("mpi.pc");
    assert!(pc.contains("-lmpi") && pc.contains(&p));
    assert!(prefix().join("lib/pkgconfig/tsunagi.pc").exists());
    for l in ["libmpich.so.12", "libmpi.so", "libmpich.so"] {
        assert!(prefix().join("lib").join(l).exists(), "{l}");
    }
}

/// Build tests/c/<name>.c with Debian's mpicc.mpich and run it on `ranks` ranks under MPICH,
/// under our mpirun on Tsunagi and under mpiexec.hydra on Tsunagi: same output. Returns
/// the binary.
fn drop_in(name: &str, ranks: usize) -> Option<PathBuf> {
    drop_in_with(name, ranks, &[])
}

/// [`drop_in`] with extra compiler flags.
fn drop_in_with(name: &str, ranks: usize, flags: &[&str]) -> Option<PathBuf> {
    if !have("mpicc.mpich") || !have("mpiexec.hydra") {
        tsunagi_testkit::missing(
            "mpich",
            "Debian's mpich (mpicc.mpich, mpiexec.hydra) is not installed",
        );
        return None;
    }
    let exe = prefix().join(format!("test-{name}-mpich"));
    check(
        Command::new("mpicc.mpich")
            .args(flags)
            .args(["-O1", "-o"])
            .arg(&exe)
            .arg(src_dir().join(format!("tests/c/{name}.c"))),
    );
    let lib = prefix().join("lib");
    let n = ranks.to_string();
    let mut mpich = Command::new("timeout");
    mpich
        .args(["120", "mpiexec.hydra", "-n", &n])
        .arg(&exe)
        .env_remove("LD_LIBRARY_PATH");
    let reference = check(&mut mpich);
    let mut ours = Command::new("timeout");
    ours.arg("120")
        .arg(mpirun())
        .args(["-n", &n])
        .arg(&exe)
        .env("LD_LIBRARY_PATH", &lib);
    assert_eq!(
        check(&mut ours),
        reference,
        "{name}: Tsunagi under our mpirun differs from MPICH"
    );
    let mut hydra = Command::new("timeout");
    hydra
        .args(["120", "mpiexec.hydra", "-n", &n])
        .arg(&exe)
        .env("LD_LIBRARY_PATH", &lib);
    assert_eq!(
        check(&mut hydra),
        reference,
        "{name}: Tsunagi under mpiexec.hydra differs from MPICH"
    );
    Some(exe)
}

#[test]
fn drop_in_for_programs_built_with_mpich() {
    let Some(exe) = drop_in("dropin", 3) else {
        return;
    };
    // And it really was Tsunagi's library under both launchers.
    let lib = prefix().join("lib");
    let under_hydra = check(
        Command::new("timeout")
            .args(["120", "mpiexec.hydra", "-n", "2"])
            .arg(&exe)
            .arg("lib")
            .env("LD_LIBRARY_PATH", &lib),
    );
    assert!(under_hydra.contains("library Tsunagi"), "{under_hydra}");
    let under_ours = check(
        Command::new(mpirun())
            .args(["-n", "1"])
            .arg(&exe)
            .arg("lib")
            .env("LD_LIBRARY_PATH", &lib),
    );
    assert!(under_ours.contains("library Tsunagi"), "{under_ours}");
}

#[test]
fn drop_in_error_classes_match_mpich() {
    drop_in("dropin_errors", 2);
}

/// The collective, topology and non-blocking collective tests built with MPICH's header
/// give MPICH's results on Tsunagi (without their error-class parts, which Debian's MPICH
/// does not all detect).
#[test]
fn drop_in_collectives_and_topologies_match_mpich() {
    for name in ["coll", "topo", "nbc"] {
        drop_in_with(name, 3, &["-DNO_ERROR_TESTS"]);
    }
}
