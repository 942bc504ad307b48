#!/usr/bin/env bash
# Collectives across sites behind an emulated wide-area link: latency-aware (MagPIe) vs.
# flat vs. IMPI-conformant algorithms, in one run.
#
#   bench/wan.sh [-s SITES] [-k RANKS_PER_SITE] [-m MAX_BYTES] [-i ITERS] [-r REPS] [-R ROUNDS] [-e ENGINE] LINK...
#
# Each LINK (default: delay=5ms, i.e. 10 ms round trip) is a tsunagi-wan link spec, e.g.
# `delay=5ms` or `delay=5ms,rate=100Mbit`. For each, SITES (3) sites of RANKS_PER_SITE (2)
# ranks are made in network namespaces behind tsunagi-wan's TUN router (scripts/wan-netns)
# and wan_bench (collectives/examples/wan_bench.rs: mean of ITERS (10) back-to-back calls,
# the fastest of REPS (1) such runs, which filters a loaded machine's scheduling delays;
# bcast's root moves from site to site so that calls cannot overlap) runs barrier, bcast, allreduce, allgather and alltoall from
# 8 B to MAX_BYTES (1 MiB) in steps of 8x, with ENGINE progress (threaded, the default, or
# polling), three times:
#   wan   the latency-aware algorithms (collectives/src/wan.rs; the default under --sites);
#   flat  TSUNAGI_WAN_COLL=flat with site-unaware algorithms forced (dissemination barrier,
#         binomial bcast, recursive-doubling allreduce and allgather, pairwise alltoall), as a
#         single-cluster MPI would run them over the WAN;
#   impi  TSUNAGI_WAN_COLL=impi (the IMPI/LAM-conformant algorithms).
# With -R ROUNDS (1) the three runs repeat ROUNDS times, alternating, and each point is the
# fastest over the rounds: on a machine whose load changes from minute to minute, every
# mode then meets the same conditions.
# Prints, per link, a table of microseconds per call and the ratios flat/wan and impi/wan.
# Binaries: $TSUNAGI_PREFIX/bin and libexec/tsunagi/examples (after scripts/install), or the
# workspace's target/debug (TSUNAGI_TARGET=release for target/release). Needs root.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
sites=3 k=2 max=1048576 iters=10 reps=1 rounds=1 engine=threaded
while getopts "s:k:m:i:r:R:e:" o; do
    case $o in
        s) sites=$OPTARG ;; k) k=$OPTARG ;; m) max=$OPTARG ;; i) iters=$OPTARG ;; r) reps=$OPTARG ;; R) rounds=$OPTARG ;; e) engine=$OPTARG ;;
        *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))
links=("$@")
[ ${#links[@]} -gt 0 ] || links=("delay=5ms")
if [ -n "${TSUNAGI_PREFIX:-}" ]; then
    bin=$TSUNAGI_PREFIX/bin
    bench=$TSUNAGI_PREFIX/libexec/tsunagi/examples/wan_bench
else
    bin=$top/target/${TSUNAGI_TARGET:-debug}
    bench=$bin/examples/wan_bench
fi
# The emulator may come from elsewhere (TSUNAGI_WAN_BIN, e.g. a release build: a debug
# router adds its own per-packet cost to the link on a loaded machine).
wanbin=${TSUNAGI_WAN_BIN:-$bin/tsunagi-wan}
for f in "$bin/mpirun" "$bin/tsunagi-impi-server" "$wanbin" "$bench"; do
    [ -x "$f" ] || { echo "bench/wan.sh: $f missing (build or install first)" >&2; exit 2; }
done
tag=$(( $$ % 200 + 20 ))
out=$(mktemp -d)
trap 'TSUNAGI_WAN_BIN=$wanbin "$top/scripts/wan-netns" down $tag $sites; rm -rf "$out"' EXIT

for link in "${links[@]}"; do
    TSUNAGI_WAN_BIN=$wanbin "$top/scripts/wan-netns" up $tag "$sites" "$link" > "$out/net"
    gw=$(awk '/^gateway/ {print $2}' "$out/net")
    {
        echo "server $gw"
        awk -v k="$k" -v gw="$gw" -v e="$engine" '/^site/ {
            printf "-n %d --progress %s --host %s:%d --launch-agent \"ip netns exec {host}\" --launch-addr %s --env TSUNAGI_IMPI_ADDR=%s\n", k, e, $3, k, gw, $4 }' "$out/net"
    } > "$out/sites"
    # A failed run (a timeout: TSUNAGI_WAN_BENCH_TIMEOUT seconds, default 1200) says so with
    # the end of its error output, and its points are left out of the table.
    run() {
        local mode=$1
        shift
        env TSUNAGI_SPIN=50 TSUNAGI_YIELDS=20 "$@" timeout "${TSUNAGI_WAN_BENCH_TIMEOUT:-1200}" \
            "$bin/mpirun" --sites "$out/sites" "$bench" "$max" "$iters" "$reps" \
            >> "$out/$mode" 2> "$out/$mode.err" || {
            echo "bench/wan.sh: the $mode run failed (exit $?):" >&2
            tail -5 "$out/$mode.err" >&2
        }
    }
    load0=$(cut -d' ' -f1-3 /proc/loadavg)
    rm -f "$out/wan" "$out/flat" "$out/impi"
    for ((round = 0; round < rounds; round++)); do
        run wan TSUNAGI_WAN_COLL=wan
        run flat TSUNAGI_WAN_COLL=flat TSUNAGI_COLL_BARRIER=dissemination TSUNAGI_COLL_BCAST=binomial \
            TSUNAGI_COLL_ALLREDUCE=recursive_doubling TSUNAGI_COLL_ALLGATHER=recursive_doubling \
            TSUNAGI_COLL_ALLTOALL=pairwise
        run impi TSUNAGI_WAN_COLL=impi
    done
    # The fastest of the rounds per point.
    for mode in wan flat impi; do
        touch "$out/$mode"
        awk '{ k = $1" "$2; if (!(k in best) || $3 < best[k]) best[k] = $3 }
             END { for (k in best) print k, best[k] }' "$out/$mode" > "$out/$mode.best"
        mv "$out/$mode.best" "$out/$mode"
    done
    TSUNAGI_WAN_BIN=$wanbin "$top/scripts/wan-netns" down $tag "$sites"
    echo "## $sites sites x $k ranks ($engine progress), link $link (each direction), mean of $iters calls, fastest of $reps runs x $rounds rounds"
    echo "load average (1/5/15 min) at the start: $load0; at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "| collective | bytes | wan (us) | flat (us) | impi (us) | flat/wan | impi/wan |"
    echo "|---|---|---|---|---|---|---|"
    join -j1 <(awk '{print $1"/"$2, $3}' "$out/wan" | sort) \
             <(awk '{print $1"/"$2, $3}' "$out/flat" | sort) |
        join -j1 - <(awk '{print $1"/"$2, $3}' "$out/impi" | sort) |
        awk '{ split($1, a, "/"); printf "| %s | %d | %.0f | %.0f | %.0f | %.2f | %.2f |\n",
               a[1], a[2], $2, $3, $4, $3 / $2, $4 / $2 }' |
        sort -t'|' -k2,2 -k3,3n
    echo
done
