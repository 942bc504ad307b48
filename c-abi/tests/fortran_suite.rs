//! The Fortran test suite: installs the library (with `install-c`, which also compiles
//! the `mpi` and `mpi_f08` modules), builds the programs in `tests/fortran` with that
//! prefix's `mpif77`/`mpif90`/`mpifort` (fixed form with mpif.h, free form with `use mpi`,
//! `use mpi_f08`) and runs them with our `mpirun`; checks the wrappers, the exported
//! spellings of every entry point, and runs Fortran programs built with Debian's
//! `mpifort.mpich` on Tsunagi with only `LD_LIBRARY_PATH` changed.
//!
//! Without gfortran the tests skip with a message, except in CI (`CI` set) where that
//! is a failure.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{check, have, mpirun, prefix, run, src_dir};

/// Whether the Fortran compiler is here: skip (or fail in CI) otherwise.
fn gfortran() -> bool {
    if have("gfortran") {
        return true;
    }
    tsunagi_testkit::missing(
        "gfortran",
        "gfortran is not installed (.ci/run installs it)",
    );
    false
}

/// Build tests/fortran/<file> with the prefix's `wrapper` into `exe`.
fn build(wrapper: &str, file: &str, exe: &str) -> PathBuf {
    let exe = prefix().join(exe);
    check(
        Command::new(prefix().join("bin").join(wrapper))
            .args(["-O1", "-o"])
            .arg(&exe)
            .arg(src_dir().join("tests/fortran").join(file)),
    );
    exe
}

/// Run `exe` on `n` ranks with `env`; it must succeed and rank 0 print `OK` last.
fn run_ok(exe: &Path, n: usize, env: &[(&str, &Path)]) -> String {
    let mut cmd = Command::new("timeout");
    cmd.arg("120")
        .arg(mpirun())
        .args(["-n", &n.to_string()])
        .arg(exe);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = run(&mut cmd);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.lines().last() == Some("OK"),
        "{} on {n} ranks failed ({}):\n{stdout}{stderr}",
        exe.display(),
        out.status
    );
    stdout
}

#[test]
fn fixed_form_mpif_h_point_to_point_statuses_types_errors() {
    if !gfortran() {
        return;
    }
    let exe = build("mpif77", "p2p.f", "ftest-p2p");
    for n in [1, 2, 3] {
        let out = run_ok(&exe, n, &[]);
        assert!(out.contains("library Tsunagi"), "{out}");
    }
}

#[test]
fn free_form_use_mpi_collectives_with_fortran_types_and_ops() {
    if !gfortran() {
        return;
    }
    let exe = build("mpif90", "coll.f90", "ftest-coll");
    for n in [1, 2, 3, 4] {
        run_ok(&exe, n, &[]);
    }
}

#[test]
fn use_mpi_f08_derived_handle_types_and_optional_ierror() {
    if !gfortran() {
        return;
    }
    let exe = build("mpifort", "f08.f90", "ftest-f08");
    for n in [1, 2, 4] {
        run_ok(&exe, n, &[]);
    }
}

/// Dynamic processes from `use mpi` (issue 20): MPI_Comm_spawn with a CHARACTER argv and
/// with MPI_ARGV_NULL, MPI_Comm_spawn_multiple with a 2-D array_of_argv and
/// MPI_ERRCODES_IGNORE; the children check their arguments and MPI_APPNUM and answer the
/// parents; both engines.
#[test]
fn use_mpi_spawn_with_fortran_argv_arrays() {
    if !gfortran() {
        return;
    }
    let exe = build("mpif90", "spawn.f90", "ftest-spawn");
    run_ok(&exe, 2, &[]);
    let out = run(Command::new("timeout")
        .arg("120")
        .arg(mpirun())
        .args(["-n", "1", "--progress", "threaded"])
        .arg(&exe));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.lines().last() == Some("OK"),
        "spawn.f90 under the threaded engine failed ({}):\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Sessions from `use mpi_f08` (issue 20): process sets and their info, a communicator
/// from a session group, the session's error handler and buffer, the world model beside
/// it; both engines.
#[test]
fn use_mpi_f08_sessions_and_session_buffers() {
    if !gfortran() {
        return;
    }
    let exe = build("mpifort", "sessions.f90", "ftest-sessions");
    for n in [1, 3] {
        run_ok(&exe, n, &[]);
    }
    let out = run(Command::new("timeout")
        .arg("120")
        .arg(mpirun())
        .args(["-n", "2", "--progress", "threaded"])
        .arg(&exe));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.lines().last() == Some("OK"),
        "sessions.f90 under the threaded engine failed ({}):\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// mpif.h is valid free form too, and every line fits in 72 columns.
#[test]
fn mpif_h_is_fixed_form_and_free_form() {
    if !gfortran() {
        return;
    }
    let header = std::fs::read_to_string(prefix().join("include/mpif.h")).expect("mpif.h");
    for l in header.lines() {
        assert!(l.len() <= 72, "over 72 columns: {l}");
    }
    let dir = prefix().join("ftest-free");
    std::fs::create_dir_all(&dir).expect("dir");
    let src = dir.join("free.f90");
    std::fs::write(
        &src,
        "program free\n  implicit none\n  include 'mpif.h'\n  integer :: ierr, n\n  \
         call MPI_Init(ierr)\n  call MPI_Comm_size(MPI_COMM_WORLD, n, ierr)\n  \
         if (n /= 1 .or. MPI_WTIME() < 0) call MPI_Abort(MPI_COMM_WORLD, 1, ierr)\n  \
         call MPI_Finalize(ierr)\n  print '(A)', 'OK'\nend program free\n",
    )
    .expect("write");
    let exe = dir.join("free");
    check(
        Command::new(prefix().join("bin/mpifort"))
            .args(["-ffree-form", "-std=f2008", "-o"])
            .arg(&exe)
            .arg(&src),
    );
    // A singleton, no launcher.
    assert_eq!(check(&mut Command::new(&exe)).trim(), "OK");
}

#[test]
fn fortran_wrappers_pass_gfortran_flags_and_report_their_lines() {
    if !gfortran() {
        return;
    }
    let bin = prefix().join("bin");
    let lib = prefix().join("lib");
    let show = check(Command::new(bin.join("mpifort")).args(["-show", "x.f90", "-o", "x"]));
    let major: u32 = check(Command::new("gfortran").arg("-dumpversion"))
        .trim()
        .split('.')
        .next()
        .and_then(|v| v.parse().ok())
        .expect("gfortran version");
    assert!(show.starts_with("gfortran "), "{show}");
    assert_eq!(
        show.contains("-fallow-argument-mismatch") && show.contains("-fallow-invalid-boz"),
        major >= 10,
        "{show}"
    );
    assert!(
        show.contains(&format!("-I{}", prefix().join("include").display())),
        "{show}"
    );
    assert!(
        show.contains(&format!("-Wl,-rpath,{}", lib.display())),
        "{show}"
    );
    assert!(show.contains("-lmpi_usempif08 -lmpi"), "{show}");
    let compile = check(Command::new(bin.join("mpif77")).args(["-compile_info", "-c", "a.f"]));
    assert!(!compile.contains("-lmpi"), "{compile}");
    let link = check(Command::new(bin.join("mpif90")).arg("-link_info"));
    assert!(link.contains("-lmpi"), "{link}");
    let other = check(
        Command::new(bin.join("mpifort"))
            .arg("-show")
            .env("TSUNAGI_FC", "my-fortran"),
    );
    assert!(other.starts_with("my-fortran "), "{other}");
    for f in ["mpi.mod", "mpi_f08.mod", "mpif.h"] {
        assert!(prefix().join("include").join(f).exists(), "{f}");
    }
    for f in [
        "libmpi_usempif08.a",
        "libmpichfort.so.12",
        "pkgconfig/mpi-fort.pc",
        "pkgconfig/tsunagi-fort.pc",
    ] {
        assert!(lib.join(f).exists(), "{f}");
    }
    let pc = std::fs::read_to_string(lib.join("pkgconfig/mpi-fort.pc")).expect("pc");
    assert!(pc.contains("-lmpi_usempif08 -lmpi"), "{pc}");
}

/// Every C function of the library has its Fortran entry point, exported under every
/// spelling MPICH's libmpichfort uses.
#[test]
fn every_function_has_fortran_entry_points_in_every_spelling() {
    let lib = prefix().join("lib/libmpi.so.12");
    let nm = check(Command::new("nm").args(["-D", "--defined-only"]).arg(&lib));
    let defined: std::collections::HashSet<&str> = nm
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .collect();
    let mut count = 0;
    for c in mpi::IMPLEMENTED {
        let name = c.trim_start_matches("MPI_");
        // C only: the handle conversions, the tools interface (C only in the standard),
        // C's views of the Fortran 2008 status and MPI_Info_create_env.
        if mpi::C_ONLY.contains(c) {
            continue;
        }
        let l = name.to_lowercase();
        let u = name.to_uppercase();
        for s in [
            format!("mpi_{l}_"),
            format!("mpi_{l}__"),
            format!("mpi_{l}"),
            format!("MPI_{u}"),
            format!("pmpi_{l}_"),
            format!("PMPI_{u}"),
        ] {
            assert!(defined.contains(s.as_str()), "{s} is not exported");
        }
        count += 1;
    }
    assert_eq!(count, mpi::FORTRAN_NAMES.len());
    // The common blocks (so that a program's copy is exported and found) and MPICH's
    // writable sentinels.
    for s in [
        "mpipriv1_",
        "mpipriv2_",
        "mpiprivc_",
        "mpifcmb5_",
        "mpifcmb9_",
        "mpiprivba_",
    ] {
        assert!(defined.contains(s), "{s}");
    }
    let writable = nm
        .lines()
        .filter(|l| l.ends_with(" MPI_F_STATUS_IGNORE") || l.ends_with(" MPI_F_STATUSES_IGNORE"))
        .all(|l| l.contains(" D ") || l.contains(" B "));
    assert!(
        writable,
        "MPI_F_STATUS(ES)_IGNORE must be writable data:\n{nm}"
    );
}

/// Programs built with Debian's MPICH Fortran wrappers (mpif.h, `use mpi` and `use
/// mpi_f08`, the latter through `mpi_x_f08ts_` with gfortran descriptors) run on
/// Tsunagi under our mpirun with only LD_LIBRARY_PATH pointing at our prefix (our
/// libmpichfort.so.12), and with MPICH's libmpichfort over our libmpich.so.12.
#[test]
fn mpich_built_fortran_programs_run_drop_in() {
    if !gfortran() {
        return;
    }
    if !have("mpifort.mpich") {
        tsunagi_testkit::missing("mpich", "Debian's mpich (mpifort.mpich) is not installed");
        return;
    }
    let lib = prefix().join("lib");
    for (file, exe, ranks) in [
        ("p2p.f", "ftest-p2p-mpich", 3),
        ("coll.f90", "ftest-coll-mpich", 4),
        ("f08.f90", "ftest-f08-mpich", 3),
    ] {
        let exe = prefix().join(exe);
        check(
            Command::new("mpifort.mpich")
                .args(["-O1", "-o"])
                .arg(&exe)
                .arg(src_dir().join("tests/fortran").join(file)),
        );
        // Both MPICH libraries resolve into our prefix.
        let ldd = check(Command::new("ldd").arg(&exe).env("LD_LIBRARY_PATH", &lib));
        for soname in ["libmpichfort.so.12", "libmpich.so.12"] {
            let line = ldd.lines().find(|l| l.contains(soname));
            if let Some(line) = line {
                assert!(line.contains(&*lib.to_string_lossy()), "{line}");
            }
        }
        assert!(ldd.contains("libmpichfort.so.12"), "{ldd}");
        let out = run_ok(&exe, ranks, &[("LD_LIBRARY_PATH", &lib)]);
        if file == "p2p.f" {
            assert!(out.contains("library Tsunagi"), "{out}");
        }
    }
    // MPICH's own Fortran layer over our C library: it stores into MPI_F_STATUS_IGNORE
    // and MPI_F_STATUSES_IGNORE at start-up (which crashed when they were read-only).
    let only_c = prefix().join("ftest-only-libmpich");
    std::fs::create_dir_all(&only_c).expect("dir");
    let link = only_c.join("libmpich.so.12");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(lib.join("libmpi.so.12"), &link).expect("symlink");
    let exe = prefix().join("ftest-coll-mpich");
    let ldd = check(
        Command::new("ldd")
            .arg(&exe)
            .env("LD_LIBRARY_PATH", &only_c),
    );
    let fort = ldd
        .lines()
        .find(|l| l.contains("libmpichfort.so.12"))
        .expect("libmpichfort");
    assert!(!fort.contains(&*lib.to_string_lossy()), "{fort}");
    // (Its keyval calls use MPICH internals, MPII_Keyval_set_proxy, which we do not
    // provide: that part of the program is skipped here.)
    run_ok(
        &exe,
        3,
        &[
            ("LD_LIBRARY_PATH", &only_c),
            ("TSUNAGI_TEST_NO_KEYVALS", Path::new("1")),
        ],
    );
}

/// `use mpi` gives explicit interfaces: a call without its `ierror` does not compile,
/// while choice buffers still take any type and rank.
#[test]
fn use_mpi_interfaces_check_arguments() {
    if !gfortran() {
        return;
    }
    let dir = prefix().join("ftest-interfaces");
    std::fs::create_dir_all(&dir).expect("dir");
    let good = dir.join("good.f90");
    std::fs::write(
        &good,
        "program good\n  use mpi\n  implicit none\n  integer :: ierr, i, a(2, 2)\n  \
         double precision :: d\n  call MPI_Init(ierr)\n  \
         call MPI_Bcast(i, 1, MPI_INTEGER, 0, MPI_COMM_WORLD, ierr)\n  \
         call MPI_Bcast(a, 4, MPI_INTEGER, 0, MPI_COMM_WORLD, ierr)\n  \
         call MPI_Bcast(d, 1, MPI_DOUBLE_PRECISION, 0, MPI_COMM_WORLD, ierr)\n  \
         d = MPI_Wtime()\n  call MPI_Finalize(ierr)\nend program good\n",
    )
    .expect("write");
    check(
        Command::new(prefix().join("bin/mpif90"))
            .args(["-Werror", "-o"])
            .arg(dir.join("good"))
            .arg(&good),
    );
    let bad = dir.join("bad.f90");
    std::fs::write(
        &bad,
        "program bad\n  use mpi\n  implicit none\n  integer :: ierr, r\n  call MPI_Init(ierr)\n  \
         call MPI_Comm_rank(MPI_COMM_WORLD, r)\n  call MPI_Finalize(ierr)\nend program bad\n",
    )
    .expect("write");
    let out = run(Command::new(prefix().join("bin/mpif90"))
        .arg("-o")
        .arg(dir.join("bad"))
        .arg(&bad));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a call without ierror compiled");
    assert!(stderr.contains("ierror"), "{stderr}");
}

/// MPI-IO from Fortran (`use mpi`): INTEGER file handles, MPI_OFFSET_KIND offsets, a view,
/// collective access and the file pointer.
#[test]
fn use_mpi_file_io_with_integer_handles() {
    if !gfortran() {
        return;
    }
    let exe = build("mpif90", "io.f90", "ftest-io");
    for n in [1, 3] {
        run_ok(&exe, n, &[]);
    }
}
