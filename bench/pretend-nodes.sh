#!/usr/bin/env bash
# pretend-nodes.sh — issue 15's pretend-node target beside its floor. 8 ranks as 4 pretend
# nodes of 2 (`mpirun --node-map 2`: shared memory inside a node, TCP loopback between)
# against the same job on shared memory alone, and the floor: the same hierarchical
# structure with no MPI at all (bench/pretend-nodes/floor.c: a shared page inside a node,
# non-blocking recv or an acquire load then sched_yield to wait, TCP or UDP between the
# leaders), so that what any MPI could reach on this host shows beside what Tsunagi does.
#
# Usage: bench/pretend-nodes.sh [-r R] [--rt] [-n ITERS] [--peers] [PREFIX]
#   PREFIX   a Tsunagi install (scripts/install PREFIX; default ./dist)
#   -r R     interleaved rounds (default 5); each round runs every case once
#   --rt     run every case under `chrt -r 20` (needs root), as tsunagi-bench is run here
#   -n ITERS calls per case (default 20000)
#   --peers  also every rank its own node, all over TCP loopback: Tsunagi `--node-map 1`
#            and Open MPI `--mca btl self,tcp` beside Open MPI on shared memory (`self,vader`);
#            neither peer can pretend that one host is several nodes
# Prints per case the median (min-max) in µs per call and the ratio to the same MPI on shared
# memory alone (Tsunagi's for the floor; the target: allreduce and alltoall under
# --node-map 2 within 2x).
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
reps=5 rt=() iters=20000 prefix=$top/dist peers=0
while [ $# -gt 0 ]; do
    case "$1" in
        -r) reps=$2; shift 2 ;;
        -n) iters=$2; shift 2 ;;
        --rt) rt=(chrt -r 20); shift ;;
        --peers) peers=1; shift ;;
        -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
        *) prefix=$1; shift ;;
    esac
done
[ -x "$prefix/bin/mpicc" ] || { echo "pretend-nodes.sh: no Tsunagi install at $prefix (scripts/install $prefix)" >&2; exit 1; }
work=$(mktemp -d /tmp/pretend-nodes.XXXXXX)
trap 'rm -rf "$work"' EXIT
cc -O2 -Wall -o "$work/floor" "$top/bench/pretend-nodes/floor.c"
"$prefix/bin/mpicc" -O2 -Wall -o "$work/loop" "$top/bench/pretend-nodes/loop.c"
ompi=(mpirun.openmpi --allow-run-as-root --oversubscribe --mca pml ob1 -n 8)
if [ $peers = 1 ]; then
    command -v mpicc.openmpi >/dev/null || { echo "pretend-nodes.sh: --peers needs Open MPI (openmpi-bin)" >&2; exit 1; }
    mpicc.openmpi -O2 -Wall -o "$work/loop-ompi" "$top/bench/pretend-nodes/loop.c"
fi

run() { # name, command...: append "name usec" to the results
    local name=$1 t
    shift
    t=$(timeout 300 "${rt[@]}" "$@" | awk '{ print ($NF == "us/iter") ? $(NF-1) : $2 }')
    [ -n "$t" ] || { echo "pretend-nodes.sh: $name printed nothing" >&2; exit 1; }
    echo "$name $t" >> "$work/res"
}
for ((r = 1; r <= reps; r++)); do
    echo "pretend-nodes.sh: round $r/$reps" >&2
    for coll in allreduce alltoall; do
        run "tsunagi-shm-$coll" "$prefix/bin/mpirun" -n 8 "$work/loop" $coll "$iters"
        run "tsunagi-nodes-$coll" "$prefix/bin/mpirun" -n 8 --node-map 2 "$work/loop" $coll "$iters"
        if [ $peers = 1 ]; then
            run "tsunagi-tcp-$coll" "$prefix/bin/mpirun" -n 8 --node-map 1 "$work/loop" $coll "$iters"
            run "ompi-shm-$coll" "${ompi[@]}" --mca btl self,vader "$work/loop-ompi" $coll "$iters"
            run "ompi-tcp-$coll" "${ompi[@]}" --mca btl self,tcp "$work/loop-ompi" $coll "$iters"
        fi
    done
    run floor-rd-tcp "$work/floor" 4 2 "$iters" rd tcp
    run floor-star-tcp "$work/floor" 4 2 "$iters" star tcp
    run floor-a2a-tcp "$work/floor" 4 2 "$iters" a2a tcp
    run floor-rd-udp "$work/floor" 4 2 "$iters" rd udp
    run floor-rd-tcp-leaders-only "$work/floor" 4 1 "$iters" rd tcp
done
echo "medians over $reps interleaved rounds, µs per call${rt:+ (chrt -r 20)}; ratio: to the same MPI's same collective on shared memory alone; the floor's to Tsunagi's allreduce and alltoall on shared memory alone (any of its structures can carry either: a few small blocks cost a socket what 8 bytes do)"
awk '
    { v[$1, ++n[$1]] = $2; if (!($1 in seen)) { seen[$1] = 1; ord[++k] = $1 } }
    function med(c,    m, i, j, t, a) {
        m = n[c]
        for (i = 1; i <= m; i++) a[i] = v[c, i]
        for (i = 2; i <= m; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
        lo[c] = a[1]; hi[c] = a[m]
        return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
    }
    END {
        for (i = 1; i <= k; i++) md[ord[i]] = med(ord[i])
        for (i = 1; i <= k; i++) {
            c = ord[i]
            if (c ~ /^floor/) {
                printf "%-28s %8.2f (%.2f-%.2f)  %5.2fx allreduce, %5.2fx alltoall\n", c, md[c], lo[c], hi[c],
                    md[c] / md["tsunagi-shm-allreduce"], md[c] / md["tsunagi-shm-alltoall"]
                continue
            }
            base = ((c ~ /^ompi/) ? "ompi" : "tsunagi") "-shm-" ((c ~ /alltoall/) ? "alltoall" : "allreduce")
            printf "%-28s %8.2f (%.2f-%.2f)  %5.2fx\n", c, md[c], lo[c], hi[c], md[c] / md[base]
        }
    }' "$work/res"
