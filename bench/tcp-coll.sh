#!/usr/bin/env bash
# tcp-coll.sh — allreduce and alltoall across 2 hosts x 2 ranks (network namespaces on a
# bridge; shm inside a host, TCP across), hierarchical vs flat algorithms, as ratios.
#
# Usage: bench/tcp-coll.sh [-r R] [MAX_BYTES]     (needs root and `ip netns`)
#   hier: TSUNAGI_COLL_ALLREDUCE=hierarchical TSUNAGI_COLL_ALLTOALL=two_level_ring
#   flat: TSUNAGI_COLL_ALLREDUCE=recursive_doubling TSUNAGI_COLL_ALLTOALL=pairwise
# Four ranks share this machine's cores, so ranks spin briefly before sleeping
# (TSUNAGI_SPIN=50 TSUNAGI_YIELDS=20). Programs: target/release/{mpirun,examples/coll_bench}
# (TSUNAGI_RELEASE overrides the directory). Prints medians (usec) and flat/hier ratios
# (> 1: hierarchical is faster).
set -euo pipefail
reps=3
if [ "${1:-}" = -r ]; then reps="$2"; shift 2; fi
max="${1:-262144}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
rel="${TSUNAGI_RELEASE:-$(dirname "$here")/target/release}"
[ -x "$rel/mpirun" ] && [ -x "$rel/examples/coll_bench" ] ||
    { echo "tcp-coll.sh: build first: cargo build --release -p tsunagi-launcher -p tsunagi-collectives --bins --examples" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "tcp-coll.sh: needs root (network namespaces)" >&2; exit 1; }

out="$(mktemp -d)"
cleanup() {
    ip netns del tsgcoll-a 2>/dev/null || true
    ip netns del tsgcoll-b 2>/dev/null || true
    ip link del tsgcollbr 2>/dev/null || true
    rm -rf "$out"
}
trap cleanup EXIT
ip link add tsgcollbr type bridge
ip addr add 10.77.251.1/24 dev tsgcollbr
ip link set tsgcollbr up
i=2
for h in a b; do
    ip netns add "tsgcoll-$h"
    ip link add "tsgcv$h" type veth peer name eth0 netns "tsgcoll-$h"
    ip link set "tsgcv$h" master tsgcollbr up
    ip -n "tsgcoll-$h" addr add "10.77.251.$i/24" dev eth0
    ip -n "tsgcoll-$h" link set eth0 up
    ip -n "tsgcoll-$h" link set lo up
    i=$((i + 1))
done

for ((r = 1; r <= reps; r++)); do
    for cfg in hier flat; do
        if [ $cfg = hier ]; then ar=hierarchical; aa=two_level_ring; else ar=recursive_doubling; aa=pairwise; fi
        echo "tcp-coll.sh: run $r/$reps $cfg" >&2
        TSUNAGI_SPIN=50 TSUNAGI_YIELDS=20 TSUNAGI_COLL_ALLREDUCE=$ar TSUNAGI_COLL_ALLTOALL=$aa \
            timeout 600 "$rel/mpirun" --host tsgcoll-a:2,tsgcoll-b:2 \
            --launch-agent 'ip netns exec {host}' --launch-addr 10.77.251.1 \
            "$rel/examples/coll_bench" "$max" 2>/dev/null |
            awk -v c=$cfg '$1 == "allreduce" || $1 == "alltoall" { print c, $1, $2, $3 }' >> "$out/res"
    done
done
echo "medians over $reps runs (usec per call); ratio = flat / hier; load: $(cut -d' ' -f1-3 /proc/loadavg)"
awk '
    { k = $2 " " $3; v[$1, k, ++n[$1, k]] = $4; if (!(k in seen)) { seen[k] = 1; ord[++nk] = k } }
    function med(c, k,    m, i, j, t, a) {
        m = n[c, k]; if (!m) return 0
        for (i = 1; i <= m; i++) a[i] = v[c, k, i]
        for (i = 2; i <= m; i++) for (j = i; j > 1 && a[j-1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
        return (m % 2) ? a[(m + 1) / 2] : (a[m/2] + a[m/2 + 1]) / 2
    }
    END {
        printf "%-10s %9s %12s %12s %8s\n", "coll", "bytes", "hier", "flat", "ratio"
        for (o = 1; o <= nk; o++) {
            split(ord[o], kb, " "); h = med("hier", ord[o]); f = med("flat", ord[o])
            printf "%-10s %9s %12.2f %12.2f %8.2f\n", kb[1], kb[2], h, f, (h > 0 ? f / h : 0)
        }
    }' "$out/res"
