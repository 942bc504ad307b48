#!/usr/bin/env bash
# peers.sh — latency/bandwidth of the installed peer MPIs, the numbers Tsunagi is compared to.
#
# Usage: bench/peers.sh [--tcp] [-r R] [-h]
#   (default)  shared-memory paths on one node, 2 ranks:
#                mpich          MPICH 4.0.2 (ch4:ucx), mpiexec.hydra -n 2
#                openmpi        Open MPI 4.1.4, its default selection (pml ucx or ob1)
#                openmpi-vader  Open MPI forced onto --mca pml ob1 --mca btl self,vader
#   --tcp      TCP loopback paths, 2 ranks on one node:
#                openmpi-tcp    --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo
#                mpich-tcp      MPIR_CVAR_NOLOCAL=1 UCX_TLS=tcp UCX_NET_DEVICES=lo
#   -r R       repetitions per MPI (default 5; env R works too)
#
# Environment: BUILD_DIR (default: a fresh temp dir, removed at exit) receives the binaries
# and raw logs; KEEP=1 keeps the temp dir. Runs as root pass --allow-run-as-root to Open MPI.
#
# Runs are interleaved (mpich, openmpi, ..., mpich, openmpi, ...) so that slow drift of the
# machine (thermal, other load) spreads over all MPIs instead of biasing one. The program is
# bench/peer/pingpong.c (one line per point: "lat <bytes> <usec>", "bw <bytes> <MB/s>");
# the table shows the median over the R repetitions of each point, which resists the odd
# outlier run better than the mean.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="$here/peer/pingpong.c"
mode=shm
reps="${R:-5}"

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }

while [ $# -gt 0 ]; do
    case "$1" in
        --tcp) mode=tcp ;;
        -r) shift; reps="${1:?-r needs a count}" ;;
        -r*) reps="${1#-r}" ;;
        -h|--help) usage; exit 0 ;;
        *) echo "peers.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
    esac
    shift
done
case "$reps" in ''|*[!0-9]*|0) echo "peers.sh: repetitions must be a positive integer" >&2; exit 2 ;; esac

for tool in mpicc.mpich mpicc.openmpi mpiexec.hydra mpirun.openmpi; do
    command -v "$tool" >/dev/null || { echo "peers.sh: $tool not found" >&2; exit 1; }
done

if [ -n "${BUILD_DIR:-}" ]; then
    build="$BUILD_DIR"; mkdir -p "$build"
else
    build="$(mktemp -d "${TMPDIR:-/tmp}/tsunagi-peers.XXXXXX")"
    [ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$build"' EXIT
fi

mpicc.mpich -O2 -o "$build/pingpong.mpich" "$src"
mpicc.openmpi -O2 -o "$build/pingpong.openmpi" "$src"

ompi=(mpirun.openmpi -n 2)
if [ "$(id -u)" = 0 ]; then
    ompi+=(--allow-run-as-root)
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

# One command line per configuration; names index the table columns.
declare -A cmd
if [ "$mode" = tcp ]; then
    names=(openmpi-tcp mpich-tcp)
    cmd[openmpi-tcp]="${ompi[*]} --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo $build/pingpong.openmpi"
    # MPICH here is ch4:ucx: NOLOCAL keeps it off its shared-memory path, UCX_TLS picks TCP.
    cmd[mpich-tcp]="mpiexec.hydra -n 2 -genv MPIR_CVAR_NOLOCAL 1 -genv UCX_TLS tcp -genv UCX_NET_DEVICES lo $build/pingpong.mpich"
else
    names=(mpich openmpi openmpi-vader)
    cmd[mpich]="mpiexec.hydra -n 2 $build/pingpong.mpich"
    cmd[openmpi]="${ompi[*]} $build/pingpong.openmpi"
    cmd[openmpi-vader]="${ompi[*]} --mca pml ob1 --mca btl self,vader $build/pingpong.openmpi"
fi

results="$build/results.txt"   # lines: <name> <rep> <lat|bw> <bytes> <value>
: > "$results"
for ((r = 1; r <= reps; r++)); do
    for n in "${names[@]}"; do
        log="$build/$n.$r.log"
        echo "peers.sh: run $r/$reps $n" >&2
        # A failed run is reported and skipped: the medians then cover fewer runs.
        if ! timeout 300 ${cmd[$n]} > "$log" 2> "$log.err"; then
            echo "peers.sh: $n run $r failed (see $log.err):" >&2
            tail -n 5 "$log.err" >&2 || true
            continue
        fi
        awk -v n="$n" -v r="$r" '($1 == "lat" || $1 == "bw") && NF == 3 { print n, r, $1, $2, $3 }' \
            "$log" >> "$results"
    done
done

# Median per (name, kind, bytes); rows = points in program order, columns = configurations.
echo
echo "medians over $reps runs ($mode); lat in usec (half round trip), bw in MB/s (10^6 B/s)"
awk -v names="${names[*]}" '
    { key = $3 " " $4; v[$1, key, ++cnt[$1, key]] = $5
      if (!(key in seen)) { seen[key] = 1; order[++nk] = key } }
    function median(name, key,    k, i, j, t, a) {
        k = cnt[name, key]; if (k == 0) return "-"
        for (i = 1; i <= k; i++) a[i] = v[name, key, i]
        for (i = 2; i <= k; i++) for (j = i; j > 1 && a[j-1] + 0 > a[j] + 0; j--) {
            t = a[j]; a[j] = a[j-1]; a[j-1] = t }
        return (k % 2) ? a[(k + 1) / 2] : sprintf("%.3f", (a[k/2] + a[k/2 + 1]) / 2)
    }
    END {
        nn = split(names, nm, " ")
        printf "%-4s %9s", "kind", "bytes"
        for (i = 1; i <= nn; i++) printf " %14s", nm[i]
        printf "\n"
        for (o = 1; o <= nk; o++) {
            split(order[o], kb, " ")
            printf "%-4s %9s", kb[1], kb[2]
            for (i = 1; i <= nn; i++) printf " %14s", median(nm[i], order[o])
            printf "\n"
        }
    }' "$results"
