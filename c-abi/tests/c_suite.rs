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

/// MPI-IO (tests/c/io.c): subarray views of a 3-D array with collective buffering on,
/// off and automatic, interleaved vector views through every pointer kind, non-blocking
/// and split forms, shared and ordered pointers under concurrency, atomic mode,
/// external32, registered representations, access modes and the error classes; 1 to 8
/// ranks, both engines, and over pretend nodes (two aggregators by default). On one node
/// two-phase I/O goes through the file's pages (mmap); once more with that off
/// (`tsunagi_cb_mmap=disable` for every file but those of the test of the route itself),
/// through the shared-memory rounds.
#[test]
fn mpi_io_every_access_family_and_error_class() {
    let exe = build("io");
    let dir = std::env::temp_dir();
    for (n, extra, hints) in [
        (1, &[][..], ""),
        (2, &[][..], ""),
        (3, &["--progress", "threaded"][..], ""),
        (4, &[][..], ""),
        (4, &[][..], "tsunagi_cb_mmap=disable"),
        (4, &["--progress", "threaded"][..], ""),
        (4, &["--node-map", "2"][..], ""),
        (8, &["--node-map", "2"][..], ""),
    ] {
        let out = run(Command::new("timeout")
            .arg("120")
            .arg(mpirun())
            .args(["-n", &n.to_string()])
            .args(extra)
            .env("TSUNAGI_IO_HINTS", hints)
            .arg(&exe)
            .arg(&dir));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && stderr.is_empty() && stdout.contains("io ok"),
            "io on {n} ranks {extra:?} hints '{hints}' ({}):\n{stdout}{stderr}",
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
fn external32_packs_the_bytes_the_standard_gives() {
    suite("external32", &[1], "external32 ok");
    // A value that does not fit: the fatal message names the call, the type and the value.
    let exe = build_as("external32", "test-external32-fatal");
    let out = run(Command::new("timeout")
        .arg("120")
        .arg(mpirun())
        .args(["-n", "1"])
        .arg(&exe)
        .arg("fatal"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the conversion error must be fatal");
    assert!(
        stderr.contains("MPI_Pack_external")
            && stderr.contains("MPI_LONG value 5000000000")
            && stderr.contains("external32"),
        "stderr: {stderr}"
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("not reached"));
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

/// A caller's `-L DIR` that holds another `libmpi.so` (Python's build tools pass
/// `-L/usr/lib/x86_64-linux-gnu`, where Debian keeps Open MPI's or MPICH's) must not win over
/// ours: mpi4py's configure step linked its probes against Open MPI and so found no MPI-4
/// function. Here the other libmpi.so is a decoy without a single MPI symbol.
#[test]
fn wrappers_link_our_libmpi_before_a_callers_library_dirs() {
    let dir = prefix().join("decoy-libdir");
    std::fs::create_dir_all(&dir).expect("decoy dir");
    let decoy_src = dir.join("decoy.c");
    std::fs::write(&decoy_src, "int tsunagi_decoy_libmpi;\n").expect("decoy source");
    check(
        Command::new("cc")
            .args(["-shared", "-fPIC", "-o"])
            .arg(dir.join("libmpi.so"))
            .arg(&decoy_src),
    );
    let exe = prefix().join("test-p2p-decoy-libdir");
    let mut cc = Command::new(prefix().join("bin/mpicc"));
    cc.args(["-std=c11", "-pthread", "-O1"])
        .arg(format!("-L{}", dir.display()))
        .arg("-o")
        .arg(&exe)
        .arg(src_dir().join("tests/c/p2p.c"));
    let show = check(
        Command::new(prefix().join("bin/mpicc")).args(["-show", &format!("-L{}", dir.display())]),
    );
    let ours = show.find(&format!("-L{}/lib", prefix().display()));
    let theirs = show.find(&format!("-L{}", dir.display()));
    assert!(
        matches!((ours, theirs), (Some(o), Some(t)) if o < t),
        "-show must give our -L first: {show}"
    );
    check(&mut cc);
    let out = mpirun_n(2, &exe);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("p2p ok"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
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

/// external32 built with MPICH's header (the part MPICH 4.0 implements correctly: see the
/// program's header comment): MPICH and Tsunagi produce the same bytes, which are also the
/// program's expected ones.
#[test]
fn drop_in_external32_bytes_match_mpich() {
    drop_in_with("external32", 1, &["-DMPICH_SUBSET"]);
}

/// Issue 22: object lifetimes (reference-counted datatype handles, keyvals, error
/// handlers, ops, communicators, persistent requests, groups, info), every standard error
/// class, user error classes, MPI_ERRORS_ABORT read back, invalid handles to stubs, and
/// MPI_COMM_SELF's delete callbacks first at MPI_Finalize, newest first.
#[test]
fn lifetimes_error_classes_and_finalize_order() {
    suite("lifetimes", &[2, 3], "lifetimes ok");
}

/// A fatal error ends the job with mpirun naming the failed call (not "called
/// MPI_Abort"), under the default handler and under MPI_ERRORS_ABORT; the exit status is
/// the error class (MPI_ERR_RANK = 6).
#[test]
fn fatal_handlers_abort_with_the_calls_name() {
    let exe = build("errabort");
    for mode in ["fatal", "abort"] {
        let out = run(Command::new("timeout")
            .arg("120")
            .arg(mpirun())
            .args(["-n", "2"])
            .arg(&exe)
            .arg(mode));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(6), "{mode}: {stderr}");
        assert!(
            stderr.contains("mpirun: rank 0: fatal error in MPI_Send: ")
                && !stderr.contains("called MPI_Abort"),
            "{mode}: {stderr}"
        );
        assert!(!String::from_utf8_lossy(&out.stdout).contains("not reached"));
    }
}

/// `mpicc -static` links the installed libmpi.a; the program has no dynamic section and
/// runs under mpirun (issue 22).
#[test]
fn static_programs_link_libmpi_a_and_run_under_mpirun() {
    assert!(
        prefix().join("lib/libmpi.a").exists(),
        "libmpi.a not installed"
    );
    let exe = prefix().join("test-p2p-static");
    check(
        Command::new(prefix().join("bin/mpicc"))
            .args(["-static", "-std=c11", "-pthread", "-O1", "-o"])
            .arg(&exe)
            .arg(src_dir().join("tests/c/p2p.c")),
    );
    let elf = check(Command::new("readelf").arg("-d").arg(&exe));
    assert!(
        !elf.contains("NEEDED"),
        "a static program needs no shared library:\n{elf}"
    );
    let out = mpirun_n(3, &exe);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("p2p ok"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A build that is not our wrapper (rsmpi's build script, meson, a Makefile) takes its
/// flags from pkg-config (mpi.pc, or mpich.pc as for MPICH): the rpath in `Libs` lets the
/// program find libmpi.so.12 at run time with no LD_LIBRARY_PATH (issue 22).
#[test]
fn pkg_config_builds_run_without_library_path() {
    if !have("pkg-config") {
        tsunagi_testkit::missing("pkg-config", "pkg-config is not installed");
        return;
    }
    let pcdir = prefix().join("lib/pkgconfig");
    for pc in ["mpi", "mpich"] {
        let flags = check(
            Command::new("pkg-config")
                .args(["--cflags", "--libs", pc])
                .env("PKG_CONFIG_PATH", &pcdir),
        );
        assert!(flags.contains("-Wl,-rpath,"), "{pc}.pc: {flags}");
        let exe = prefix().join(format!("test-pkgconfig-{pc}"));
        let mut cc = Command::new("cc");
        cc.args(["-std=c11", "-o"])
            .arg(&exe)
            .arg(src_dir().join("tests/c/header.c"))
            .args(flags.split_whitespace());
        check(&mut cc);
        let out = check(
            Command::new(&exe)
                .env_remove("LD_LIBRARY_PATH")
                .env_remove("PMI_FD")
                .env_remove("PMI_PORT"),
        );
        assert!(out.contains("status ok"), "{pc}: {out}");
    }
    let private = check(
        Command::new("pkg-config")
            .args(["--static", "--libs", "mpi"])
            .env("PKG_CONFIG_PATH", &pcdir),
    );
    assert!(private.contains("-lpthread"), "{private}");
}

/// The MPI 4.0 large-count calls Tsunagi provides (issue 14 item 9).
#[test]
fn large_count_calls() {
    suite("large", &[2, 3], "large ok");
}

/// Every function MPICH 4.0 declares (MPI 3.1 and MPI 4.0, MPI-IO and MPI_T included) is
/// either implemented or a stub (declared in our mpi.h, exported as PMPI_X and weak MPI_X)
/// or listed as missing in api.in, hence in docs/coverage.md: the coverage is complete and
/// honest (issue 22).
#[test]
fn every_mpi_4_function_is_provided_or_listed_missing() {
    let headers: Vec<PathBuf> = std::fs::read_dir("/usr/include")
        .into_iter()
        .flatten()
        .flatten()
        .flat_map(|d| ["mpi_proto.h", "mpio.h"].map(|f| d.path().join("mpich").join(f)))
        .filter(|p| p.exists())
        .collect();
    if headers.len() < 2 {
        tsunagi_testkit::missing("mpich", "MPICH's headers (libmpich-dev) are not installed");
        return;
    }
    let mut reference = std::collections::BTreeSet::new();
    for h in &headers {
        let text = std::fs::read_to_string(h).expect("read MPICH header");
        for line in text.lines() {
            // Declarations start at the line's beginning: `int MPI_Send(...`.
            if line.starts_with(' ') || line.starts_with('#') || line.starts_with("typedef") {
                continue;
            }
            let Some(open) = line.find('(') else { continue };
            let head = &line[..open];
            let name = head.rsplit([' ', '*']).next().unwrap_or("");
            if name.starts_with("MPI_") && name[4..].starts_with(|c: char| c.is_ascii_uppercase()) {
                reference.insert(name.to_string());
            }
        }
    }
    assert!(
        reference.len() > 500,
        "parsed only {} names",
        reference.len()
    );
    let table = std::fs::read_to_string(src_dir().join("api.in")).expect("api.in");
    let missing: std::collections::BTreeSet<String> = table
        .lines()
        .filter_map(|l| l.strip_prefix("missing "))
        .flat_map(|l| {
            l.split_once(':')
                .expect("NAMES: reason")
                .0
                .split_whitespace()
        })
        .map(|n| format!("MPI_{n}"))
        .collect();
    let provided: std::collections::BTreeSet<String> =
        mpi::IMPLEMENTED.iter().map(|s| s.to_string()).collect();
    let header = std::fs::read_to_string(prefix().join("include/mpi.h")).expect("mpi.h");
    let coverage =
        std::fs::read_to_string(src_dir().join("../docs/coverage.md")).expect("coverage");
    let mut absent = Vec::new();
    for name in &reference {
        if provided.contains(name) {
            assert!(
                header.contains(&format!(" {name}(")),
                "{name} not declared in mpi.h"
            );
        } else if missing.contains(name) {
            assert!(
                coverage.contains(&format!(" {name}")),
                "{name} not in coverage.md"
            );
        } else {
            absent.push(name.clone());
        }
    }
    assert!(
        absent.is_empty(),
        "neither provided nor listed missing in api.in: {absent:?}"
    );
    for name in &missing {
        assert!(
            !provided.contains(name),
            "{name} is listed missing but provided"
        );
    }
}

/// Every stub (a function exported but not implemented yet) checks its handle arguments
/// first: given an invalid handle it returns that handle's class, not
/// MPI_ERR_UNSUPPORTED_OPERATION (issue 22). The C program is generated from api.in:
/// one call per stub with every handle invalid and every pointer valid; the expected
/// class is the first handle's in check order (communicators first).
#[test]
fn invalid_handles_to_every_stub_give_the_handles_class() {
    use std::fmt::Write as _;
    let table = std::fs::read_to_string(src_dir().join("api.in")).expect("api.in");
    let (funcs, _) = tsunagi_apidef::parse(&table);
    let invalid = |base: &str, name: &str| -> Option<(&'static str, &'static str)> {
        Some(match base {
            // A peer communicator may be MPI_COMM_NULL away from the leaders.
            "MPI_Comm" if name == "peer_comm" => ("(MPI_Comm)0x12345678", "MPI_ERR_COMM"),
            "MPI_Comm" => ("MPI_COMM_NULL", "MPI_ERR_COMM"),
            "MPI_Datatype" => ("MPI_DATATYPE_NULL", "MPI_ERR_TYPE"),
            "MPI_Group" => ("MPI_GROUP_NULL", "MPI_ERR_GROUP"),
            "MPI_Op" => ("MPI_OP_NULL", "MPI_ERR_OP"),
            "MPI_Errhandler" => ("MPI_ERRHANDLER_NULL", "MPI_ERR_ARG"),
            // MPI_INFO_NULL is allowed: a value that is no info handle is not.
            "MPI_Info" => ("(MPI_Info)0x12345678", "MPI_ERR_INFO"),
            "MPI_Win" => ("MPI_WIN_NULL", "MPI_ERR_WIN"),
            "MPI_File" => ("MPI_FILE_NULL", "MPI_ERR_FILE"),
            _ => return None,
        })
    };
    let mut body = String::new();
    let mut checked = 0;
    // No stub is left today; the dynamic-process calls, stubs until issue 20, keep the
    // check (their handles are checked before any port, socket or process is touched).
    for f in funcs
        .iter()
        .filter(|f| f.stub || f.section == "Dynamic processes")
    {
        let args: Vec<_> = f.args.iter().filter(|a| !a.varargs).collect();
        let mut expected = None;
        for a in args.iter().filter(|a| a.depth == 0) {
            if let Some((_, class)) = invalid(&a.base, &a.name) {
                if a.base == "MPI_Comm" || expected.is_none() {
                    expected = Some(class);
                    if a.base == "MPI_Comm" {
                        break;
                    }
                }
            }
        }
        let Some(expected) = expected else { continue };
        let values: Vec<String> = args
            .iter()
            .map(|a| {
                if a.depth == 0 {
                    invalid(&a.base, &a.name)
                        .map(|(v, _)| v.to_string())
                        .unwrap_or_else(|| format!("({})0", a.base))
                } else if a.base.ends_with("_function") {
                    "NULL".into()
                } else {
                    "(void *)scratch".into()
                }
            })
            .collect();
        writeln!(
            body,
            "    cls = -1; MPI_Error_class(MPI_{}({}), &cls);\n    if (cls != {expected}) {{ printf(\"MPI_{}: class %d, expected %d\\n\", cls, {expected}); bad++; }}",
            f.name,
            values.join(", "),
            f.name
        )
        .unwrap();
        checked += 1;
    }
    assert!(checked > 5, "only {checked} calls with handle arguments");
    let src = format!(
        "#include <mpi.h>\n#include <stdio.h>\nstatic _Alignas(16) char scratch[65536];\n\
         int main(int argc, char **argv) {{\n    int cls, bad = 0;\n    MPI_Init(&argc, &argv);\n\
         MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);\n{body}\
         MPI_Finalize();\n    printf(\"%d stubs checked, %d wrong\\n\", {checked}, bad);\n    return bad != 0;\n}}\n"
    );
    let c = prefix().join("test-stubs.c");
    std::fs::write(&c, src).expect("write test-stubs.c");
    let exe = prefix().join("test-stubs");
    check(
        Command::new(prefix().join("bin/mpicc"))
            .args(["-std=c11", "-o"])
            .arg(&exe)
            .arg(&c),
    );
    let out = mpirun_n(1, &exe);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains(&format!("{checked} stubs checked, 0 wrong")),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An installed mpirun (`PREFIX/bin/mpirun` beside `PREFIX/lib/libmpi.so.12`) gives its
/// ranks that library directory: a program linked with no rpath (as cargo links rsmpi
/// programs) runs under it with no LD_LIBRARY_PATH of the user's (issue 22).
#[test]
fn installed_mpirun_lets_programs_without_rpath_find_the_library() {
    let bin = prefix().join("bin/mpirun");
    if !bin.exists() {
        std::fs::copy(mpirun(), &bin).expect("install mpirun into the test prefix");
    }
    let exe = prefix().join("test-header-norpath");
    let p = prefix().display().to_string();
    check(
        Command::new("cc")
            .args(["-std=c11", "-o"])
            .arg(&exe)
            .arg(src_dir().join("tests/c/header.c"))
            .args([
                format!("-I{p}/include"),
                format!("-L{p}/lib"),
                "-lmpi".into(),
            ]),
    );
    let bare = run(Command::new(&exe).env_remove("LD_LIBRARY_PATH"));
    assert!(
        !bare.status.success(),
        "without rpath the library is not found alone"
    );
    let out = run(Command::new("timeout")
        .arg("60")
        .arg(&bin)
        .args(["-n", "1"])
        .arg(&exe)
        .env_remove("LD_LIBRARY_PATH"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("status ok"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Intercommunicators: point-to-point, every collective blocking and non-blocking for every
/// root kind, dup/split/create/merge; on one node (shm) under both engines, and over
/// pretend nodes (TCP between them).
#[test]
fn intercommunicators_every_collective_every_root() {
    suite("inter", &[2, 3, 5], "inter ok");
    let exe = build_as("inter", "test-inter-variants");
    for args in [
        &["-n", "4", "--env", "TSUNAGI_PROGRESS=threaded"][..],
        &["-n", "6", "--node-map", "3"][..],
        &[
            "-n",
            "4",
            "--node-map",
            "2",
            "--env",
            "TSUNAGI_PROGRESS=threaded",
        ][..],
    ] {
        let out = run(Command::new("timeout")
            .arg("120")
            .arg(mpirun())
            .args(args)
            .arg(&exe));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("inter ok"),
            "inter with {args:?} failed ({}):\n{stdout}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// MPI-4 requests: persistent collectives started many times, MPI_Isendrecv(_replace),
/// generalized requests; under both engines.
#[test]
fn persistent_collectives_isendrecv_generalized_requests() {
    suite("mpi4", &[1, 2, 5], "mpi4 ok");
    let exe = build_as("mpi4", "test-mpi4-threaded");
    let out = run(Command::new("timeout")
        .arg("120")
        .arg(mpirun())
        .args(["-n", "4", "--env", "TSUNAGI_PROGRESS=threaded"])
        .arg(&exe));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("mpi4 ok"),
        "mpi4 under the threaded engine failed ({}):\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Generalized requests (MPI 4.1 §13.2): the order and number of query_fn, free_fn and
/// cancel_fn calls for every completion call, MPI_Request_free before and after
/// MPI_Grequest_complete, MPI_Cancel before and after it, failing hooks (MPI_ERR_IN_STATUS
/// from MPI_Waitall), hooks that call MPI, a request completed by another thread; under
/// both engines.
#[test]
fn generalized_requests_call_query_free_and_cancel_where_the_standard_says() {
    suite("grequest", &[1, 2], "grequest ok");
    let exe = build_as("grequest", "test-grequest-threaded");
    let out = run(Command::new("timeout")
        .arg("120")
        .arg(mpirun())
        .args(["-n", "2", "--progress", "threaded"])
        .arg(&exe));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("grequest ok"),
        "grequest under the threaded engine failed ({}):\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// MPI 4.1 (mpi.h says 4.1): MPI_Remove_error_*, MPI_Status_get/set_*,
/// MPI_Request_get_status_any/all/some, MPI_Type_get_value_index, MPI_Get_hw_resource_info,
/// MPI_COMM_TYPE_RESOURCE_GUIDED, MPI_ERR_ERRHANDLER, and MPI 4.0's MPI_Session_c2f/f2c and
/// MPI_Status_set_elements_c.
#[test]
fn mpi_4_1_calls_and_version() {
    suite("mpi41_api", &[1, 3], "mpi41 api ok");
}

/// The tools interface (issue 20): control variables with live values (a written
/// collective algorithm takes effect), performance variables counting real traffic and the
/// matching queues, categories, enumerations, events' "none" answers, MPI_T before MPI_Init
/// and after MPI_Finalize; both engines, shared memory and TCP.
#[test]
fn tools_interface_variables_counters_and_categories() {
    suite("tools", &[2, 3], "tools ok");
    let exe = build_as("tools", "test-tools-tcp-threaded");
    for args in [
        &[
            "--progress",
            "threaded",
            "--env",
            "TSUNAGI_SHM_EAGER=8192",
            "--env",
            "TSUNAGI_SPIN=77",
        ][..],
        &["--node-map", "1", "--env", "TSUNAGI_COLL_BCAST=auto"][..],
    ] {
        let out = run(Command::new("timeout")
            .arg("120")
            .arg(mpirun())
            .args(["-n", "2"])
            .args(args)
            .arg(&exe));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && stdout.contains("tools ok") && stderr.is_empty(),
            "tools with {args:?} failed ({}):\n{stdout}{stderr}",
            out.status
        );
    }
    // Built with MPICH's mpi.h (its constants, MPI_T_PVAR_ALL_HANDLES as its data object),
    // run on Tsunagi: the binary interface of MPI_T is MPICH's.
    if !have("mpicc.mpich") {
        tsunagi_testkit::missing("mpich", "Debian's mpich (mpicc.mpich) is not installed");
        return;
    }
    let exe = prefix().join("test-tools-mpich");
    check(
        Command::new("mpicc.mpich")
            .args(["-O1", "-o"])
            .arg(&exe)
            .arg(src_dir().join("tests/c/tools.c")),
    );
    let out = check(
        Command::new("timeout")
            .arg("120")
            .arg(mpirun())
            .args(["-n", "2"])
            .arg(&exe)
            .env("LD_LIBRARY_PATH", prefix().join("lib")),
    );
    assert!(out.contains("tools ok"), "{out}");
}

/// Sessions (issue 20): process sets, communicators from their groups, session info and
/// error handlers, sessions and the world model in one process; both engines.
#[test]
fn sessions_psets_communicators_and_the_world_model() {
    suite("sessions", &[1, 3], "sessions ok");
    let exe = build_as("sessions", "test-sessions-threaded");
    let out = run(Command::new("timeout")
        .arg("120")
        .arg(mpirun())
        .args(["-n", "2", "--progress", "threaded", "--node-map", "1"])
        .arg(&exe));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("sessions ok") && stderr.is_empty(),
        "sessions (threaded, TCP) failed ({}):\n{stdout}{stderr}",
        out.status
    );
}

/// MPI_Buffer_flush/iflush (MPI 4.1), MPI_Type_create_darray and the Fortran 90 type
/// constructors (issue 20).
#[test]
fn buffer_flush_darray_and_f90_types() {
    suite("mpi41", &[2, 3], "mpi41 ok");
}

/// Buffers attached to communicators and sessions (MPI 4.1, issue 20): the communicator's,
/// else the session's, else the process's buffer; MPI_ERR_BUFFER when the communicator's
/// is too small though the process's would do; flush, iflush, detach, the _c forms and
/// MPI_BUFFER_AUTOMATIC; both engines, shared memory and TCP.
#[test]
fn communicator_and_session_buffers() {
    suite("buffers", &[2, 3], "buffers ok");
    let exe = build_as("buffers", "test-buffers-threaded");
    expect_ok(
        "buffers (threaded, TCP)",
        Command::new("timeout")
            .arg("120")
            .arg(mpirun())
            .args(["-n", "2", "--progress", "threaded", "--node-map", "1"])
            .arg(&exe),
        "buffers ok",
    );
}

/// The last MPI 4.0 calls (issue 20): the persistent large-count collectives with count
/// arrays reused over rounds, MPI_Op_create_c, MPI_Type_create_darray_c,
/// MPI_Type_get_contents_c, MPI_Register_datarep_c, MPI_Info_create_env, the Fortran 2008
/// status conversions; both engines.
#[test]
fn mpi_4_0_large_count_persistent_and_remaining_calls() {
    suite("mpi4_complete", &[3, 5], "mpi4 complete ok");
    let exe = build_as("mpi4_complete", "test-mpi4-complete-threaded");
    expect_ok(
        "mpi4_complete (threaded, TCP)",
        Command::new("timeout")
            .arg("120")
            .arg(mpirun())
            .args(["-n", "3", "--progress", "threaded", "--node-map", "1"])
            .arg(&exe),
        "mpi4 complete ok",
    );
}

/// Run `cmd` and require success, no stderr, and `want` in stdout.
fn expect_ok(what: &str, cmd: &mut Command, want: &str) {
    let out = run(cmd);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.is_empty() && stdout.contains(want),
        "{what} failed ({}):\n{stdout}{stderr}",
        out.status
    );
}

/// No process runs `exe` any more (spawned children and their mpirun ended too).
fn assert_no_processes_of(exe: &Path) {
    let out = run(Command::new("pgrep").arg("-f").arg(exe));
    assert!(
        !out.status.success(),
        "processes of {} are left: {}",
        exe.display(),
        String::from_utf8_lossy(&out.stdout)
    );
}

/// Dynamic processes (issue 20): MPI_Comm_spawn of 1 and 3 children with argv and info
/// from 1 to 3 parents, MPI_Comm_spawn_multiple (1 + 2 children), each with data both
/// ways, collectives across the intercommunicator, merge and collectives on the merged
/// communicator, disconnect; both engines, and TCP among the parents (pretend nodes).
/// The children are started by the parents' own mpirun through PMI-1 `spawn` (each
/// child's parent process is the parents' parent process: no nested mpirun), and
/// nothing is left running afterwards. Also MPI_Intercomm_create_from_groups.
#[test]
fn dynamic_processes_spawn_talk_merge_and_disconnect() {
    let exe = build_as("dynproc", "test-dynproc-spawn");
    for (np, args, extra) in [
        (1, &["spawn", "1"][..], &[][..]),
        (2, &["spawn", "3"][..], &[][..]),
        (3, &["spawn", "2"][..], &["--progress", "threaded"][..]),
        (2, &["spawn", "3"][..], &["--node-map", "1"][..]),
        (2, &["multi"][..], &[][..]),
        (1, &["multi"][..], &["--progress", "threaded"][..]),
        // MPI_Intercomm_create_from_groups (no spawn): even against odd world ranks.
        (2, &["groups"][..], &[][..]),
        (5, &["groups"][..], &[][..]),
        (
            4,
            &["groups"][..],
            &["--progress", "threaded", "--node-map", "2"][..],
        ),
    ] {
        expect_ok(
            &format!("dynproc {args:?} on {np} parents {extra:?}"),
            Command::new("timeout")
                .arg("120")
                .arg(mpirun())
                .args(["-n", &np.to_string()])
                .args(["--env", "DYNPROC_SAME_LAUNCHER=1"])
                .args(extra)
                .arg(&exe)
                .args(args),
            &format!("dynproc {} ok", args[0]),
        );
    }
    // Parents on two hosts (the second through an agent whose launch command only marks
    // its processes): the children alternate between the hosts, the agent's started by
    // the agent.
    for args in [&["spawn", "3"][..], &["multi"][..]] {
        expect_ok(
            &format!("dynproc {args:?} with an agent"),
            Command::new("timeout")
                .arg("120")
                .arg(mpirun())
                .args(["--host", "localhost:1,tsunagi-spawn-remote:1"])
                .args(["--launch-agent", "env DYNPROC_AGENT_HOST={host}"])
                .args([
                    "--launch-addr",
                    "127.0.0.1",
                    "--env",
                    "DYNPROC_ROUND_ROBIN=1",
                ])
                .arg(&exe)
                .args(args),
            &format!("dynproc {} ok", args[0]),
        );
    }
    assert_no_processes_of(&exe);
}

/// MPI_Comm_spawn and MPI_Comm_spawn_multiple of our library under MPICH's Hydra
/// (issue 20): the root sends Hydra the same PMI-1 `spawn` our mpirun serves, Hydra starts
/// the children with the port preput, and they connect back. Skipped, with a message
/// (failing under CI), when MPICH's mpiexec.hydra is not installed.
#[test]
fn dynamic_processes_spawn_under_hydra() {
    if !have("mpiexec.hydra") {
        tsunagi_testkit::missing("mpich", "MPICH's mpiexec.hydra is not installed");
        return;
    }
    let exe = build_as("dynproc", "test-dynproc-hydra");
    for (np, args) in [(2, &["spawn", "3"][..]), (1, &["multi"][..])] {
        expect_ok(
            &format!("dynproc {args:?} on {np} parents under mpiexec.hydra"),
            Command::new("timeout")
                .args(["120", "mpiexec.hydra", "-n", &np.to_string()])
                .arg(&exe)
                .args(args)
                .env("LD_LIBRARY_PATH", prefix().join("lib")),
            &format!("dynproc {} ok", args[0]),
        );
    }
    assert_no_processes_of(&exe);
}

/// A spawned child that fails takes the whole job down (issue 20): mpirun, which started
/// it through PMI-1 `spawn`, reports it by name and exits with its code, and no process
/// of the job and no shared-memory file of the job or of its spawned group is left.
/// So does a spawned program that exits without calling MPI_Init.
#[test]
fn dynamic_processes_a_failing_child_ends_the_job_cleanly() {
    let exe = build_as("dynproc", "test-dynproc-die");
    let mut job = Command::new(mpirun())
        .args(["-n", "2", "--env", "DYNPROC_SAME_LAUNCHER=1"])
        .arg(&exe)
        .arg("die")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start mpirun");
    let pid = job.id();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while job.try_wait().expect("wait").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = job.kill();
            panic!("mpirun did not end within 120 s after a spawned child failed");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = job.wait_with_output().expect("mpirun output");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("rank 1 of spawned job 1") && stderr.contains("exited with code 3"),
        "{stderr}"
    );
    assert_no_processes_of(&exe);
    let prefix = format!("tsunagi-tsunagi_{pid}_");
    let left: Vec<String> = std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "shared-memory files left: {left:?}");
    // A spawned program that never calls MPI_Init cannot connect back: the job ends
    // instead of its parents waiting for ever.
    let out = run(Command::new("timeout")
        .arg("120")
        .arg(mpirun())
        .args(["-n", "1"])
        .arg(&exe)
        .arg("noinit"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("rank 0 of spawned job 1") && stderr.contains("without calling MPI_Init"),
        "{stderr}"
    );
    assert_no_processes_of(&exe);
}

/// MPI_Comm_accept/connect between two separately started mpirun jobs that find each
/// other through MPI_Publish_name/MPI_Lookup_name (served by each job's mpirun, which keeps
/// names in the shared directory and removes those its job left published); and
/// MPI_Comm_join between two singletons over a socket pair. Both engines.
#[test]
fn dynamic_processes_accept_connect_between_jobs_and_join() {
    let exe = build_as("dynproc", "test-dynproc-jobs");
    let names = prefix().join("dynproc-names");
    let _ = std::fs::remove_dir_all(&names);
    for (mode, n) in [("polling", 0), ("threaded", 1)] {
        let svc = format!("tsunagi-test-{}-{n}", std::process::id());
        let job = |role: &str, np: &str| {
            let mut c = Command::new("timeout");
            c.arg("120")
                .arg(mpirun())
                .args(["-n", np, "--progress", mode])
                .arg(&exe)
                .args([role, &svc])
                .env("TSUNAGI_NAME_DIR", &names);
            c
        };
        let server = job("server", "2")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start the server job");
        expect_ok(
            &format!("client ({mode})"),
            &mut job("client", "3"),
            "dynproc client ok",
        );
        let out = server.wait_with_output().expect("server job");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && stderr.is_empty() && stdout.contains("dynproc server ok"),
            "server ({mode}) failed ({}):\n{stdout}{stderr}",
            out.status
        );
        expect_ok(
            &format!("join ({mode})"),
            Command::new("timeout")
                .arg("120")
                .arg(&exe)
                .arg("join")
                .env("TSUNAGI_PROGRESS", mode),
            "dynproc join ok",
        );
    }
    // Names go through mpirun, which removes those its job did not unpublish.
    let svc = format!("tsunagi-test-{}-leak", std::process::id());
    expect_ok(
        "publish without unpublish",
        Command::new("timeout")
            .arg("120")
            .arg(mpirun())
            .args(["-n", "2"])
            .arg(&exe)
            .args(["leak", &svc])
            .env("TSUNAGI_NAME_DIR", &names),
        "dynproc leak ok",
    );
    // Every service was unpublished.
    let left: Vec<_> = std::fs::read_dir(&names)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "published names left: {left:?}");
    let _ = std::fs::remove_dir_all(&names);
    assert_no_processes_of(&exe);
}

/// Large-count calls whose counts come in arrays or through pointers (issue 20): the
/// generated `narrow` forms copy each array into ints (MPI_ERR_COUNT above INT_MAX).
#[test]
fn large_count_arrays_positions_and_displacement_units() {
    suite("large_arrays", &[1, 2, 5], "large arrays ok");
}

/// What mpi4py's test suite found (scripts/mpi4py-check), as C: 1 and 2 ranks, both engines.
#[test]
fn cases_found_by_mpi4py() {
    let exe = build("bindings");
    for np in [1, 2] {
        for engine in ["polling", "threaded"] {
            expect_ok(
                &format!("bindings on {np} ranks, {engine}"),
                Command::new("timeout")
                    .arg("120")
                    .arg(mpirun())
                    .args(["-n", &np.to_string(), "--progress", engine])
                    .arg(&exe),
                "bindings ok",
            );
        }
    }
}
