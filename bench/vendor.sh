#!/usr/bin/env bash
# vendor.sh — Tsunagi over a vendor MPI (`mpirun --vendor`, p2p/vendor) beside that vendor
#   alone, for Debian's MPICH and Open MPI, 2 ranks on one host.
#
# Usage: bench/vendor.sh [-r R] [-v "mpich openmpi"] [-p] [-n] [-s] [-h]
#   -r R   repetitions per configuration (default 3; env R works too)
#   -v V   vendors (default "mpich openmpi")
#   -p     point-to-point only;  -n  NPB only
#   -s     the short-limit sweep instead: Tsunagi over each vendor (polling), a blocking
#          ping-pong at SWEEP_SIZES (default "1024 2048 4096 6144 8192 12288 16384
#          24576 32768") with TSUNAGI_VENDOR_SHORT at each of SHORTS (default "2048 4056
#          8192 16384 32768 65536"), interleaved, short limits in a new random order per
#          repetition; per run and size the best of 15 short batches (a batch that lost
#          the CPU to another job only makes that batch slower, so on a loaded machine the
#          best batch is the measurement, the median the load); table: median over
#          runs of that best half round trip (µs) per short limit and size, the lowest of
#          each size marked, and per short limit the sum over sizes relative to the best;
#          the vendor alone (its mpicc and launcher) runs as one more configuration, `alone`.
#          SWEEP_KNOB=EAGER sweeps TSUNAGI_VENDOR_EAGER over EAGERS instead (default "4096
#          8192 16384 32768 65536"; the short limit at its default or TSUNAGI_VENDOR_SHORT)
# Environment: TSUNAGI_PREFIX (an install prefix with bin/mpicc; default ./dist),
#   TSUNAGI_MPIRUN (default $TSUNAGI_PREFIX/bin/mpirun), P2P_MAX (default 4194304),
#   P2P_SEC (seconds per point, default 0.1), KERNELS (default "cg mg is ep"), NPROCS
#   (NPB ranks, default "1 2 4"), CLASS (default A), ENGINES (default "polling threaded"),
#   SHM (default 1: also Tsunagi on its own shared memory, the `shm` column; 0: not).
#
# Columns: `alone` is npb-tests/bench/p2p.c (or the NPB kernel) built with the vendor's
# mpicc and started by its launcher (mpiexec.hydra; mpirun.openmpi --oversubscribe
# --bind-to none, as `mpirun --vendor` starts it); `polling` and `threaded` are the same
# sources built with Tsunagi's mpicc and run by `mpirun --vendor V --progress ENGINE`; `shm`
# is that build run by Tsunagi's own `mpirun` (its shared memory, polling engine), the
# same in every vendor's table.
# Runs are interleaved (every configuration in turn, repetition after repetition); tables
# show medians and ratios to the vendor alone (latency: time ratio, lower is better;
# bandwidth: rate ratio, higher is better; NPB: the kernel's reported time ratio).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
top="$(dirname "$here")"
reps="${R:-3}"; vendors="mpich openmpi"; do_p2p=1; do_npb=1; do_sweep=0
while [ $# -gt 0 ]; do
    case "$1" in
        -r) shift; reps="${1:?-r needs a count}" ;;
        -v) shift; vendors="${1:?-v needs vendors}" ;;
        -p) do_npb=0 ;;
        -n) do_p2p=0 ;;
        -s) do_sweep=1 ;;
        -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; exit 0 ;;
        *) echo "vendor.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
    shift
done
prefix="${TSUNAGI_PREFIX:-$top/dist}"
trun="${TSUNAGI_MPIRUN:-$prefix/bin/mpirun}"
for f in "$prefix/bin/mpicc" "$trun"; do
    [ -x "$f" ] || { echo "vendor.sh: $f missing (scripts/install $prefix)" >&2; exit 1; }
done
engines="${ENGINES:-polling threaded}"
configs="$engines"
[ "${SHM:-1}" = 1 ] && configs="$configs shm"
kernels="${KERNELS:-cg mg is ep}"
nprocs="${NPROCS:-1 2 4}"
class="${CLASS:-A}"
build="$(mktemp -d "${TMPDIR:-/tmp}/tsunagi-vendor-bench.XXXXXX")"
trap 'rm -rf "$build"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

alone() { # vendor n prog args...
    local v=$1 n=$2; shift 2
    case $v in
        mpich) mpiexec.hydra -n "$n" "$@" ;;
        openmpi) mpirun.openmpi --oversubscribe --bind-to none -np "$n" "$@" ;;
    esac
}
over() { # vendor engine|shm n prog args...
    local v=$1 e=$2 n=$3; shift 3
    if [ "$e" = shm ]; then
        "$trun" --progress polling -n "$n" "$@"
    else
        "$trun" --vendor "$v" --progress "$e" -n "$n" "$@"
    fi
}

if [ $do_sweep = 1 ]; then
    # A blocking ping-pong at given sizes: per size a warm-up, then 15 batches of about
    # 4 ms each; prints the best batch's half round trip and the median batch's.
    cat > "$build/pp.c" <<'C'
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static double batch(int me, char *buf, long n, long iters) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime();
    for (long i = 0; i < iters; i++) {
        if (me == 0) {
            MPI_Send(buf, (int)n, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
            MPI_Recv(buf, (int)n, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (me == 1) {
            MPI_Recv(buf, (int)n, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, (int)n, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
        }
    }
    return (MPI_Wtime() - t) / iters / 2 * 1e6;
}
int main(int argc, char **argv) {
    int me;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    for (int a = 1; a < argc; a++) {
        long n = atol(argv[a]);
        char *buf = calloc(n ? n : 1, 1);
        double us = batch(me, buf, n, 200);
        long iters = (long)(4000.0 / (us * 2 + 0.01));
        iters = iters < 10 ? 10 : iters > 200000 ? 200000 : iters;
        MPI_Bcast(&iters, 1, MPI_LONG, 0, MPI_COMM_WORLD);
        double t[15];
        for (int k = 0; k < 15; k++) t[k] = batch(me, buf, n, iters);
        qsort(t, 15, sizeof t[0], cmp);
        if (me == 0) printf("pp %ld %.3f %.3f\n", n, t[0], t[7]);
        free(buf);
    }
    MPI_Finalize();
    return 0;
}
C
    "$prefix/bin/mpicc" -O2 -o "$build/pp" "$build/pp.c"
    for v in $vendors; do mpicc.$v -O2 -o "$build/pp-$v" "$build/pp.c"; done
    knob="${SWEEP_KNOB:-SHORT}"
    case $knob in SHORT|EAGER) ;; *) echo "vendor.sh: SWEEP_KNOB=$knob: SHORT or EAGER" >&2; exit 2 ;; esac
    if [ $knob = EAGER ]; then
        shorts="${EAGERS:-4096 8192 16384 32768 65536}"
    else
        shorts="${SHORTS:-2048 4056 8192 16384 32768 65536}"
    fi
    sizes="${SWEEP_SIZES:-1024 2048 4096 6144 8192 12288 16384 24576 32768}"
    res="$build/sweep"
    : > "$res"
    for r in $(seq "$reps"); do
        echo "repetition $r:$(uptime)" >&2
        for v in $vendors; do
            for s in $(printf '%s\n' alone $shorts | shuf); do
                if [ $s = alone ]; then
                    timeout 300 bash -c "$(declare -f alone); alone $v 2 $build/pp-$v $sizes" 2>&1
                else
                    env "TSUNAGI_VENDOR_$knob=$s" timeout 300 "$trun" --vendor "$v" --progress polling -n 2 \
                        "$build/pp" $sizes 2>&1
                fi | awk -v v="$v" -v s="$s" '$1=="pp"{print v, s, $2, $3, $4}' >> "$res" || true
            done
        done
    done
    cp "$res" "${TMPDIR:-/tmp}/tsunagi-vendor-sweep.results"
    uptime >&2
    python3 - "$res" "$knob" <<'PY'
import sys, statistics as st
from collections import defaultdict
rows = defaultdict(list)
knob = sys.argv[2].lower()
for line in open(sys.argv[1]):
    v, s, n, us = line.split()[:4]
    rows[(v, -1 if s == "alone" else int(s), int(n))].append(float(us))
for v in sorted({k[0] for k in rows}):
    shorts = sorted({k[1] for k in rows if k[0] == v})
    sizes = sorted({k[2] for k in rows if k[0] == v})
    med = {k: st.median(x) for k, x in rows.items() if k[0] == v}
    alone = [s for s in shorts if s == -1]
    shorts = [s for s in shorts if s != -1]
    best = {n: min(shorts, key=lambda s: med.get((v, s, n), float("inf"))) for n in sizes}
    print(f"\n{v}: best-batch half round trip µs over the vendor (polling; `alone`: the vendor alone), median of interleaved runs; * = lowest over the vendor for the size\n")
    print(f"| {knob} \\ size | " + " | ".join(str(n) for n in sizes) + " |")
    print("|---" * (1 + len(sizes)) + "|")
    for s in alone + shorts:
        cells = []
        for n in sizes:
            m = med.get((v, s, n))
            cells.append("-" if m is None else f"{m:.2f}{'*' if best[n] == s else ''} ({len(rows[(v, s, n)])})")
        print(f"| {'alone' if s == -1 else s} | " + " | ".join(cells) + " |")
    # One figure per limit: its latencies relative to the best limit's, averaged over sizes.
    rel = {s: st.mean(med[(v, s, n)] / med[(v, best[n], n)] for n in sizes if (v, s, n) in med) for s in shorts}
    print("\nmean over sizes of (latency / lowest latency of the size): " + ", ".join(f"{s}: {rel[s]:.3f}" for s in shorts))
PY
    exit 0
fi

for v in $vendors; do
    mpicc.$v -O2 -o "$build/p2p-$v" "$top/npb-tests/bench/p2p.c"
    [ $do_npb = 1 ] && make -s -C "$top/npb-tests" MPICC=mpicc.$v BUILD="$build/npb-$v" >/dev/null
done
"$prefix/bin/mpicc" -O2 -o "$build/p2p-ts" "$top/npb-tests/bench/p2p.c"
[ $do_npb = 1 ] && make -s -C "$top/npb-tests" MPICC="$prefix/bin/mpicc" BUILD="$build/npb-ts" >/dev/null

# One result line per measurement: vendor config kind size value
res="$build/results"
: > "$res"
for r in $(seq "$reps"); do
    # The machine's load during each repetition (the tables are only as good as that).
    echo "repetition $r:$(uptime)" >&2
    for v in $vendors; do
        if [ $do_p2p = 1 ]; then
            for c in alone $configs; do
                out="$build/p2p-$v-$c-$r.out"
                if [ $c = alone ]; then
                    alone "$v" 2 "$build/p2p-$v" "${P2P_MAX:-4194304}" "${P2P_SEC:-0.1}" > "$out" 2>&1 || true
                else
                    over "$v" "$c" 2 "$build/p2p-ts" "${P2P_MAX:-4194304}" "${P2P_SEC:-0.1}" > "$out" 2>&1 || true
                fi
                awk -v v="$v" -v c="$c" '$1=="lat"||$1=="bw"{print v, c, $1, $2, $3}' "$out" >> "$res"
            done
        fi
        if [ $do_npb = 1 ]; then
            for k in $kernels; do
                for n in $nprocs; do
                    for c in alone $configs; do
                        out="$build/npb-$v-$c-$k-$n-$r.out"
                        if [ $c = alone ]; then
                            alone "$v" "$n" "$build/npb-$v/$k" "$class" > "$out" 2>&1 || true
                        else
                            over "$v" "$c" "$n" "$build/npb-ts/$k" "$class" > "$out" 2>&1 || true
                        fi
                        t=$(awk '/Time in seconds/{print $NF}' "$out")
                        grep -q "SUCCESSFUL" "$out" || t=""
                        echo "$v $c npb $k.$class/$n ${t:-FAIL}" >> "$res"
                    done
                done
            done
        fi
    done
done
cp "$res" "${TMPDIR:-/tmp}/tsunagi-vendor-bench.results"
uptime >&2
python3 - "$res" "$configs" <<'PY'
import sys, statistics as st
from collections import defaultdict
rows = defaultdict(list)
for line in open(sys.argv[1]):
    v, c, kind, size, val = line.split()
    if val != "FAIL":
        rows[(v, kind, size, c)].append(float(val))
engines = sys.argv[2].split()
def med(k):
    xs = rows.get(k)
    return st.median(xs) if xs else None
for v in sorted({k[0] for k in rows}):
    for kind, unit, better in (("lat", "µs", "time"), ("bw", "MB/s", "rate"), ("npb", "s", "time")):
        sizes = sorted({k[2] for k in rows if k[0] == v and k[1] == kind},
                       key=lambda s: (s.split("/")[0], int(s.split("/")[-1])) if kind == "npb" else int(s))
        if not sizes:
            continue
        print(f"\n{v} {kind} ({unit}; medians of {max(len(x) for k, x in rows.items() if k[0]==v and k[1]==kind)} interleaved runs; ratio = over vendor / alone)\n")
        print("| size | alone | " + " | ".join(f"{e} | ratio" for e in engines) + " |")
        print("|---" * (2 + 2 * len(engines)) + "|")
        for s in sizes:
            a = med((v, kind, s, "alone"))
            cells = [s, f"{a:.4g}" if a else "-"]
            for e in engines:
                m = med((v, kind, s, e))
                cells.append(f"{m:.4g}" if m else "-")
                cells.append(f"{(m / a):.2f}" if (m and a) else "-")
            print("| " + " | ".join(cells) + " |")
PY
