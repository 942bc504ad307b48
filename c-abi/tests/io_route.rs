//! MPI-IO's automatic choice between two-phase and independent I/O for collective
//! accesses, observed through `TSUNAGI_IO_TRACE` on the benchmark program itself
//! (npb-tests/bench/io.c: a 3-D array over 4 ranks, subarray views, every element read back
//! and checked, a mismatch aborts the job): slabs (pieces of N·N/2 doubles) go straight to
//! the file, BT-IO pieces (N·20 bytes, interleaved) through the aggregators, and the hints
//! `romio_cb_write=enable` / `tsunagi_cb_piece_limit` move the choice; reads of small
//! tiles (BT-IO at N = 64: 2.6 MB per rank, 1280-byte pieces) go straight to the file
//! with no synchronisation, unless `tsunagi_cb_read_small` is below the tile. Two-phase
//! accesses take every rank's ranges from the views flattened at `MPI_File_set_view`, or
//! exchange them when `TSUNAGI_IO_NO_FLAT` is set; on one node every rank goes through the
//! file's pages (mmap) unless `tsunagi_cb_mmap=disable`, and then the rounds go through
//! shared memory unless `tsunagi_cb_shm=disable`. Both engines.

mod common;

use std::process::Command;

use common::{check, mpirun, prefix, run, src_dir};

/// Runs the benchmark on 4 ranks with the trace on; returns the trace lines.
fn traced(exe: &std::path::Path, args: &[&str], progress: &str, hints: &str) -> Vec<String> {
    traced_env(exe, args, progress, hints, &[])
}

fn traced_env(
    exe: &std::path::Path,
    args: &[&str],
    progress: &str,
    hints: &str,
    env: &[(&str, &str)],
) -> Vec<String> {
    let dir = std::env::temp_dir();
    let out = run(Command::new("timeout")
        .arg("120")
        .arg(mpirun())
        .args(["-n", "4", "--progress", progress])
        .env("TSUNAGI_IO_TRACE", "1")
        .env("TSUNAGI_IO_HINTS", hints)
        .envs(env.iter().copied())
        .arg(exe)
        .args(&args[..2])
        .arg(&dir)
        .arg("1")
        .args(&args[2..]));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.starts_with("io "),
        "io.c {args:?} {progress} hints '{hints}' ({}):\n{stdout}{stderr}",
        out.status
    );
    stderr
        .lines()
        .filter(|l| l.starts_with("tsunagi-io: "))
        .map(str::to_string)
        .collect()
}

/// Every rank's trace line for `call` names `route`.
fn took(lines: &[String], call: &str, route: &str) {
    let of_call: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains(&format!(" {call}: ")))
        .collect();
    assert_eq!(of_call.len(), 4, "one {call} line per rank in {lines:#?}");
    assert!(
        of_call.iter().all(|l| l.contains(route)),
        "{call} should be {route}: {of_call:#?}"
    );
}

#[test]
fn collective_io_takes_two_phase_only_for_small_interleaved_pieces() {
    let exe = prefix().join("test-io-route");
    check(
        Command::new(prefix().join("bin/mpicc"))
            .args(["-O1", "-o"])
            .arg(&exe)
            .arg(src_dir().join("../npb-tests/bench/io.c")),
    );
    let (w, r) = ("MPI_File_write_all", "MPI_File_read_at_all");
    for progress in ["polling", "threaded"] {
        // Slabs: 16 KiB pieces at N = 64, the default limit: straight to the file.
        let t = traced(&exe, &["64", "coll", "slab"], progress, "");
        took(&t, w, "independent (large pieces), mean piece 16384 B");
        took(&t, r, "independent (large pieces)");
        // BT-IO: 640-byte interleaved pieces at N = 32: two-phase; on one node every rank
        // copies its pieces through the file's pages (mmap), with no aggregator.
        let t = traced(&exe, &["32", "coll", "bt"], progress, "");
        took(
            &t,
            w,
            "two-phase, mean piece 640 B, every rank through the file's pages",
        );
        took(
            &t,
            r,
            "two-phase, mean piece 640 B, every rank through the file's pages",
        );
        // Without the mapping: through the aggregators, whose rounds go through shared
        // memory; with that off too, by messages.
        let t = traced(
            &exe,
            &["32", "coll", "bt"],
            progress,
            "tsunagi_cb_mmap=disable",
        );
        took(&t, w, "two-phase, mean piece 640 B, 1 aggregators");
        took(&t, w, "ranges from the views");
        took(&t, r, "two-phase");
        took(&t, r, "ranges from the views");
        took(&t, w, "through shared memory");
        took(&t, r, "through shared memory");
        let t = traced(
            &exe,
            &["32", "coll", "bt"],
            progress,
            "tsunagi_cb_mmap=disable,tsunagi_cb_shm=disable",
        );
        took(&t, w, "two-phase, mean piece 640 B, 1 aggregators");
        took(&t, w, "by messages");
        took(&t, r, "by messages");
        // The same with the ranges exchanged at every access (views not flattened).
        let t = traced_env(
            &exe,
            &["32", "coll", "bt"],
            progress,
            "tsunagi_cb_mmap=disable",
            &[("TSUNAGI_IO_NO_FLAT", "1")],
        );
        took(&t, w, "ranges exchanged, through shared memory");
        took(&t, r, "ranges exchanged, through shared memory");
        // BT-IO at N = 64: the write two-phase, the read of 2.6 MB tiles in 1280-byte
        // pieces straight to the file; below the tile, tsunagi_cb_read_small sends it
        // back through the aggregators.
        let t = traced(&exe, &["64", "coll", "bt"], progress, "");
        took(&t, w, "two-phase, mean piece 1280 B");
        took(&t, r, "independent (small reads), mean piece 1280 B");
        let t = traced(
            &exe,
            &["64", "coll", "bt"],
            progress,
            "tsunagi_cb_read_small=1048576",
        );
        took(&t, r, "two-phase, mean piece 1280 B");
        // The hints move it: collective buffering forced for writes, the limit lowered.
        let t = traced(
            &exe,
            &["64", "coll", "slab"],
            progress,
            "romio_cb_write=enable,cb_nodes=2,tsunagi_cb_mmap=disable",
        );
        took(&t, w, "two-phase, mean piece 16384 B, 2 aggregators");
        let t = traced(
            &exe,
            &["64", "coll", "slab"],
            progress,
            "romio_cb_write=enable",
        );
        took(
            &t,
            w,
            "two-phase, mean piece 16384 B, every rank through the file's pages",
        );
        took(&t, r, "independent (large pieces)");
        let t = traced(
            &exe,
            &["32", "coll", "bt"],
            progress,
            "tsunagi_cb_piece_limit=512",
        );
        took(&t, w, "independent (large pieces), mean piece 640 B");
        took(&t, r, "independent (large pieces)");
    }
}
