#!/usr/bin/env python3
"""Side-by-side point-to-point benchmark: Tsunagi (both progress engines) against MPICH and
Open MPI on this machine, 2 ranks, shared-memory paths, in one run.

Usage: bench/compare.py [-r R] [--tsunagi-bin PATH] [--mpirun PATH] [--out FILE.md]

Every contender runs the same measurement (half round-trip ping-pong latency, streaming
bandwidth with a window of 64 messages; lines "lat <bytes> <usec>" / "bw <bytes> <MB/s>"):
Tsunagi's Rust benchmark (tsunagi-pingpong) under our mpirun, and bench/peer/pingpong.c
built with mpicc.mpich and mpicc.openmpi under their own launchers. Runs are interleaved
(T-poll, T-thread, MPICH, Open MPI, T-poll, ...) R times so that drift of a noisy machine
spreads over all; the table gives medians with min-max, and ratios to each peer
(latency: Tsunagi / peer, lower is better; bandwidth: Tsunagi / peer, higher is better).
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)


def run(cmd, env=None):
    e = dict(os.environ)
    if env:
        e.update(env)
    out = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        sys.exit(f"compare.py: {' '.join(cmd)} failed ({out.returncode}):\n{out.stderr}")
    pts = {}
    for line in out.stdout.splitlines():
        f = line.split()
        if len(f) == 3 and f[0] in ("lat", "bw"):
            pts[(f[0], int(f[1]))] = float(f[2])
    return pts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-r", type=int, default=5, help="repetitions per contender")
    ap.add_argument("--tsunagi-bin", default=os.path.join(TOP, "target/release/tsunagi-pingpong"))
    ap.add_argument("--mpirun", default=os.path.join(TOP, "target/release/mpirun"))
    ap.add_argument("--out", help="also write the Markdown table here")
    ap.add_argument("--c-abi-lib", help="a lib/ dir holding Tsunagi's libmpich.so.12: also run the "
                    "MPICH-built C program on Tsunagi (drop-in, polling engine)")
    a = ap.parse_args()

    build = tempfile.mkdtemp(prefix="tsunagi-compare.")
    src = os.path.join(HERE, "peer/pingpong.c")
    subprocess.run(["mpicc.mpich", "-O2", "-o", f"{build}/pp.mpich", src], check=True)
    subprocess.run(["mpicc.openmpi", "-O2", "-o", f"{build}/pp.ompi", src], check=True)
    ompi = ["mpirun.openmpi", "-n", "2", "--allow-run-as-root", "--mca", "pml", "ob1",
            "--mca", "btl", "self,vader"]
    ompi_env = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    contenders = [
        ("tsunagi-polling", [a.mpirun, "-n", "2", a.tsunagi_bin], {"TSUNAGI_PROGRESS": "polling"}),
        ("tsunagi-threaded", [a.mpirun, "-n", "2", a.tsunagi_bin], {"TSUNAGI_PROGRESS": "threaded"}),
        ("mpich", ["mpiexec.hydra", "-n", "2", f"{build}/pp.mpich"], {}),
        ("openmpi", ompi + [f"{build}/pp.ompi"], ompi_env),
    ]
    if a.c_abi_lib:
        contenders.insert(2, ("tsunagi-c-dropin", [a.mpirun, "-n", "2", f"{build}/pp.mpich"],
                              {"LD_LIBRARY_PATH": a.c_abi_lib, "TSUNAGI_PROGRESS": "polling"}))
    results = {name: [] for name, _, _ in contenders}
    for rep in range(a.r):
        for name, cmd, env in contenders:
            results[name].append(run(cmd, env))
            print(f"run {rep + 1}/{a.r} {name} done", file=sys.stderr)

    points = sorted(results["mpich"][0].keys(), key=lambda k: (k[0] != "lat", k[1]))
    med = {n: {p: statistics.median(r[p] for r in rs if p in r) for p in points} for n, rs in results.items()}
    rng = {n: {p: (min(r[p] for r in rs), max(r[p] for r in rs)) for p in points} for n, rs in results.items()}
    lines = [
        f"2 ranks on one host, shared memory; median of {a.r} interleaved runs (min-max).",
        "Latency: half round trip in µs (ratio < 1 means Tsunagi is faster). "
        "Bandwidth: MB/s, window of 64 (ratio > 1 means Tsunagi is faster).",
        "",
        "| metric | bytes | Tsunagi polling | Tsunagi threaded | MPICH 4.0.2 | Open MPI 4.1.4 "
        "| polling/MPICH | polling/Open MPI | threaded/MPICH | threaded/Open MPI |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in points:
        kind, size = p
        cell = lambda n: f"{med[n][p]:.3f} ({rng[n][p][0]:.3f}-{rng[n][p][1]:.3f})" if kind == "lat" \
            else f"{med[n][p]:.0f} ({rng[n][p][0]:.0f}-{rng[n][p][1]:.0f})"
        ratio = lambda t, peer: f"{med[t][p] / med[peer][p]:.2f}" if med[peer][p] else "-"
        lines.append(
            f"| {'latency' if kind == 'lat' else 'bandwidth'} | {size} | {cell('tsunagi-polling')} "
            f"| {cell('tsunagi-threaded')} | {cell('mpich')} | {cell('openmpi')} "
            f"| {ratio('tsunagi-polling', 'mpich')} | {ratio('tsunagi-polling', 'openmpi')} "
            f"| {ratio('tsunagi-threaded', 'mpich')} | {ratio('tsunagi-threaded', 'openmpi')} |")
    if a.c_abi_lib:
        lines += ["", "Drop-in C ABI: the same MPICH-built binary on Tsunagi's libmpi vs Tsunagi's Rust API.", "",
                  "| metric | bytes | C drop-in on Tsunagi | Rust API on Tsunagi | C/Rust | C drop-in/MPICH |",
                  "|---|---|---|---|---|---|"]
        for p in points:
            c, r, m = med["tsunagi-c-dropin"][p], med["tsunagi-polling"][p], med["mpich"][p]
            lines.append(f"| {'latency' if p[0] == 'lat' else 'bandwidth'} | {p[1]} | {c:.3f} | {r:.3f} "
                         f"| {c / r if r else 0:.2f} | {c / m if m else 0:.2f} |")
    text = "\n".join(lines)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
