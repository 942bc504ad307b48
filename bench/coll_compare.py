#!/usr/bin/env python3
"""Collective latency, Tsunagi beside MPICH and Open MPI, in one run.

Usage: bench/coll_compare.py [-r R] [--ranks 2,4,8] [--max BYTES] [--out FILE.md]

Runs collectives/examples/coll_bench (release build) under our mpirun and
collectives/bench/coll_peer.c built with mpicc.mpich / mpicc.openmpi under their own
launchers, interleaved (Tsunagi, MPICH, Open MPI, Tsunagi, ...) R times per rank count.
Lines are "<collective> <bytes> <usec>"; the table gives medians and the ratio of
Tsunagi to the faster peer (< 1 means Tsunagi is faster).
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd, env):
    e = dict(os.environ)
    e.update(env)
    out = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        sys.exit(f"coll_compare.py: {' '.join(cmd)} failed:\n{out.stderr[-2000:]}")
    pts = {}
    for line in out.stdout.splitlines():
        f = line.split()
        if len(f) == 3 and not line.startswith("#"):
            try:
                pts[(f[0], int(f[1]))] = float(f[2])
            except ValueError:
                pass
    return pts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-r", type=int, default=3)
    ap.add_argument("--ranks", default="2,4,8")
    ap.add_argument("--max", default=str(1 << 20))
    ap.add_argument("--out")
    a = ap.parse_args()
    build = tempfile.mkdtemp(prefix="tsunagi-coll.")
    src = os.path.join(TOP, "collectives/bench/coll_peer.c")
    subprocess.run(["mpicc.mpich", "-O2", "-o", f"{build}/cp.mpich", src], check=True)
    subprocess.run(["mpicc.openmpi", "-O2", "-o", f"{build}/cp.ompi", src], check=True)
    ours = os.path.join(TOP, "target/release/examples/coll_bench")
    mpirun = os.path.join(TOP, "target/release/mpirun")
    ompi_env = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    lines = [f"Collective latency in µs (mean per call), median of {a.r} interleaved runs; "
             "ratio = Tsunagi / faster peer (< 1: Tsunagi faster).", ""]
    for n in [int(x) for x in a.ranks.split(",")]:
        contenders = [
            ("tsunagi", [mpirun, "-n", str(n), ours, a.max], {}),
            ("mpich", ["mpiexec.hydra", "-n", str(n), f"{build}/cp.mpich", a.max], {}),
            ("openmpi", ["mpirun.openmpi", "-n", str(n), "--oversubscribe", "--allow-run-as-root",
                         f"{build}/cp.ompi", a.max], ompi_env),
        ]
        res = {c[0]: [] for c in contenders}
        for rep in range(a.r):
            for name, cmd, env in contenders:
                res[name].append(run(cmd, env))
                print(f"n={n} run {rep + 1}/{a.r} {name}", file=sys.stderr)
        pts = [p for p in res["tsunagi"][0] if all(p in r for rs in res.values() for r in rs)]
        med = {k: {p: statistics.median(r[p] for r in v) for p in pts} for k, v in res.items()}
        wins = sum(1 for p in pts if med["tsunagi"][p] <= min(med["mpich"][p], med["openmpi"][p]))
        lines += [f"### {n} ranks ({wins} of {len(pts)} points at or below the faster peer)", "",
                  "| collective | bytes | Tsunagi | MPICH | Open MPI | ratio to faster |", "|---|---|---|---|---|---|"]
        for p in pts:
            t, m, o = med["tsunagi"][p], med["mpich"][p], med["openmpi"][p]
            lines.append(f"| {p[0]} | {p[1]} | {t:.2f} | {m:.2f} | {o:.2f} | {t / min(m, o):.2f} |")
        lines.append("")
    text = "\n".join(lines)
    print(text)
    if a.out:
        open(a.out, "w").write(text + "\n")


if __name__ == "__main__":
    main()
