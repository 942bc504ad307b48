#!/usr/bin/env bash
# tcp.sh — Tsunagi's TCP transport beside Open MPI's TCP path (pml ob1, btl tcp,self), 2 ranks:
#   over loopback on one host, and between two network namespaces joined by a bridge (two
#   "hosts" on this machine; the traffic crosses a veth pair each way).
#
# Usage: bench/tcp.sh [-r R] [-h]
#   -r R   repetitions per configuration (default 5; env R works too)
#
# Columns:
#   tsunagi-lo     our mpirun, TSUNAGI_NODE_MAP=1 TSUNAGI_INTERNODE=tcp TSUNAGI_TCP_IF=127.0.0.1
#   openmpi-lo     mpirun.openmpi --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo
#   tsunagi-ns     our mpirun --host nsA:1,nsB:1 --launch-agent 'ip netns exec {host}'
#   tsunagi-ns-thr the same with TSUNAGI_PROGRESS=threaded
#   *-block        tsunagi-lo / tsunagi-ns with TSUNAGI_SPIN=0 TSUNAGI_YIELDS=0: wait in epoll
#                  at once instead of spinning first (better on a machine whose cores are busy)
#   openmpi-ns     mpirun.openmpi MPMD, each rank wrapped in `ip netns exec`, btl_tcp_if_include
#                  eth0 (its PMIx server made reachable from the namespaces over the bridge)
# The namespace columns need root and `ip netns`; they are skipped otherwise.
#
# Program: npb-tests/bench/p2p.c (latency, bandwidth, ...), built with Tsunagi's mpicc from
# an install prefix (TSUNAGI_PREFIX, default ./dist: run scripts/install first) and with
# mpicc.openmpi; only its "lat" and "bw" lines are tabled. Runs are interleaved and the
# table shows medians. The namespaces (tsgbench-a/-b, bridge tsgbenchbr, 10.77.250.0/24) are removed
# at exit.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
top="$(dirname "$here")"
reps="${R:-5}"
while [ $# -gt 0 ]; do
    case "$1" in
        -r) shift; reps="${1:?-r needs a count}" ;;
        -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; exit 0 ;;
        *) echo "tcp.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
    shift
done

prefix="${TSUNAGI_PREFIX:-$top/dist}"
trun="$prefix/bin/mpirun"
for f in "$prefix/bin/mpicc" "$trun"; do
    [ -x "$f" ] || { echo "tcp.sh: $f missing (scripts/install $prefix)" >&2; exit 1; }
done
command -v mpicc.openmpi >/dev/null || { echo "tcp.sh: mpicc.openmpi not found" >&2; exit 1; }

build="$(mktemp -d "${TMPDIR:-/tmp}/tsunagi-tcp-bench.XXXXXX")"
ns_up=0
cleanup() {
    if [ "$ns_up" = 1 ]; then
        ip netns del tsgbench-a 2>/dev/null || true
        ip netns del tsgbench-b 2>/dev/null || true
        ip link del tsgbenchbr 2>/dev/null || true
    fi
    rm -rf "$build"
}
trap cleanup EXIT
src="$top/npb-tests/bench/p2p.c"
mpicc.openmpi -O2 -o "$build/pingpong.openmpi" "$src"
"$prefix/bin/mpicc" -O2 -o "$build/pingpong.tsunagi" "$src"
tbin="$build/pingpong.tsunagi"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

names=(tsunagi-lo tsunagi-lo-block openmpi-lo)
if [ "$(id -u)" = 0 ] && ip netns list >/dev/null 2>&1; then
    ns_up=1
    ip link add tsgbenchbr type bridge
    ip addr add 10.77.250.1/24 dev tsgbenchbr
    ip link set tsgbenchbr up
    i=2
    for h in a b; do
        ip netns add "tsgbench-$h"
        ip link add "tsgbv$h" type veth peer name eth0 netns "tsgbench-$h"
        ip link set "tsgbv$h" master tsgbenchbr up
        ip -n "tsgbench-$h" addr add "10.77.250.$i/24" dev eth0
        ip -n "tsgbench-$h" link set eth0 up
        ip -n "tsgbench-$h" link set lo up
        i=$((i + 1))
    done
    names+=(tsunagi-ns tsunagi-ns-block tsunagi-ns-thr openmpi-ns)
else
    echo "tcp.sh: not root or no 'ip netns': namespace columns skipped" >&2
fi

run_one() {
    case "$1" in
        *-block) TSUNAGI_SPIN=0 TSUNAGI_YIELDS=0 run_one "${1%-block}" ;;
        tsunagi-lo) TSUNAGI_NODE_MAP=1 TSUNAGI_INTERNODE=tcp TSUNAGI_TCP_IF=127.0.0.1 \
            "$trun" -n 2 "$tbin" ;;
        openmpi-lo) mpirun.openmpi -n 2 --allow-run-as-root --mca pml ob1 --mca btl tcp,self \
            --mca btl_tcp_if_include lo "$build/pingpong.openmpi" ;;
        tsunagi-ns|tsunagi-ns-thr)
            local p=polling; [ "$1" = tsunagi-ns-thr ] && p=threaded
            TSUNAGI_PROGRESS=$p "$trun" --host tsgbench-a:1,tsgbench-b:1 \
                --launch-agent 'ip netns exec {host}' --launch-addr 10.77.250.1 "$tbin" ;;
        openmpi-ns)
            PMIX_MCA_ptl_tcp_if_include=tsgbenchbr PMIX_MCA_ptl_tcp_remote_connections=1 \
                mpirun.openmpi --allow-run-as-root --mca pml ob1 --mca btl tcp,self \
                --mca btl_tcp_if_include eth0 \
                -n 1 ip netns exec tsgbench-a "$build/pingpong.openmpi" : \
                -n 1 ip netns exec tsgbench-b "$build/pingpong.openmpi" ;;
    esac
}

export -f run_one
export trun tbin build
results="$build/results.txt"
: > "$results"
for ((r = 1; r <= reps; r++)); do
    for n in "${names[@]}"; do
        echo "tcp.sh: run $r/$reps $n" >&2
        if ! timeout 300 bash -c "run_one $n" \
            > "$build/$n.$r.log" 2> "$build/$n.$r.err"; then
            echo "tcp.sh: $n run $r failed:" >&2
            tail -n 5 "$build/$n.$r.err" >&2 || true
            continue
        fi
        awk -v n="$n" -v r="$r" '($1 == "lat" || $1 == "bw") && NF == 3 { print n, r, $1, $2, $3 }' \
            "$build/$n.$r.log" >> "$results"
    done
done

echo
echo "medians over $reps runs; lat in usec (half round trip), bw in MB/s; load: $(cut -d' ' -f1-3 /proc/loadavg)"
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
