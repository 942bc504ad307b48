#!/usr/bin/env bash
# Collectives across sites behind an emulated wide-area link: latency-aware (MagPIe) vs.
# flat vs. IMPI-conformant algorithms, interleaved in one job.
#
#   bench/wan.sh [-s SITES] [-k RANKS_PER_SITE] [-m MAX_BYTES] [-i ITERS] [-R ROUNDS]
#                [-M MODES] [-T TIMINGS] [-O COLLECTIVES] [-e ENGINE] [-t SECONDS] [-N] LINK...
#
# Each LINK (default: delay=5ms, i.e. 10 ms round trip) is a tsunagi-wan link spec, e.g.
# `delay=5ms` or `delay=5ms,rate=100Mbit`. For each, SITES (3) sites of RANKS_PER_SITE (2)
# ranks are made in network namespaces behind tsunagi-wan's TUN router (scripts/wan-netns),
# the emulator's delay is checked (50 round trips of 1 byte between sites 0 and 1 through
# it: min and median against the setting, printed with the load average), and one job of
# wan_bench (collectives/examples/wan_bench.rs) runs barrier, bcast, allreduce, allgather
# and alltoall from 8 B to MAX_BYTES (1 MiB) in steps of 8x with ENGINE progress (threaded,
# the default, or polling). In that job the modes MODES (wan,flat,classic,impi) alternate
# for every collective and size: ROUNDS (7) rounds of one sample per mode, a sample being
# the mean of ITERS (8; fewer above 32 KiB) back-to-back calls:
#   wan      the latency-aware algorithms (collectives/src/wan.rs; the default under --sites);
#   flat     TSUNAGI_WAN_COLL=flat: Tsunagi's automatic choice unaware of the sites (what a
#            user gets from a site-unaware MPI);
#   classic  flat with the textbook algorithms forced at every size (dissemination barrier,
#            binomial bcast, recursive-doubling allreduce and allgather, pairwise alltoall);
#   impi     TSUNAGI_WAN_COLL=impi (the IMPI/LAM-conformant algorithms).
# TIMINGS (chain) says how the calls are timed, one table each (see wan_bench.rs):
#   chain     back-to-back calls, the bcast root moving over the sites' lowest ranks (a
#             call's period in a stream of calls);
#   rotate    back-to-back bcasts with the root moving over every rank (as IMB's Bcast);
#   isolated  every call alone: the ranks start it at an instant agreed on the host's clock
#             (30 ms after the previous call ended everywhere), and it lasts until the last
#             rank returns (the latency of a user's single call; the bcast root moving over
#             every rank).
# COLLECTIVES (all of barrier,bcast,allreduce,allgather,alltoall; also reduce) limits the
# collectives (WAN_BENCH_ONLY).
# The table gives the median sample per mode (microseconds per call at rank 0) and each
# mode's median ratio to wan over the rounds, with its range: > 1 means wan is faster. The
# ratios come from neighbouring samples, so they hold under a changing load better than
# the times do.
#
# The job is bounded by -t SECONDS (480 per timing); on the default settings it takes 3–5 minutes on
# an idle 2-core machine. -N also runs the NPB comparison afterwards (bench/wan-npb.sh,
# class A on 2 sites x 2 ranks, one link: several more minutes).
# Binaries: $TSUNAGI_PREFIX/bin and libexec/tsunagi/examples (after scripts/install), or the
# workspace's target/debug (TSUNAGI_TARGET=release for target/release). Needs root.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
sites=3 k=2 max=1048576 iters=8 rounds=7 modes=wan,flat,classic,impi engine=threaded
limit= npb=0 timings=chain only=
while getopts "s:k:m:i:R:M:T:O:e:t:N" o; do
    case $o in
        s) sites=$OPTARG ;; k) k=$OPTARG ;; m) max=$OPTARG ;; i) iters=$OPTARG ;;
        R) rounds=$OPTARG ;; M) modes=$OPTARG ;; e) engine=$OPTARG ;; t) limit=$OPTARG ;;
        T) timings=$OPTARG ;; O) only=$OPTARG ;;
        N) npb=1 ;;
        *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))
links=("$@")
ntimings=$(awk -F, '{print NF}' <<< "$timings")
[ -n "$limit" ] || limit=$(( 480 * ntimings ))
export WAN_BENCH_TIMING=$timings
[ -z "$only" ] || export WAN_BENCH_ONLY=$only
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
echo_pid=
cleanup() {
    [ -z "$echo_pid" ] || kill "$echo_pid" 2>/dev/null || true
    TSUNAGI_WAN_BIN=$wanbin "$top/scripts/wan-netns" down $tag $sites
    rm -rf "$out"
}
trap cleanup EXIT

for link in "${links[@]}"; do
    TSUNAGI_WAN_BIN=$wanbin "$top/scripts/wan-netns" up $tag "$sites" "$link" > "$out/net"
    gw=$(awk '/^gateway/ {print $2}' "$out/net")
    {
        echo "server $gw"
        awk -v k="$k" -v gw="$gw" -v e="$engine" '/^site/ {
            printf "-n %d --progress %s --host %s:%d --launch-agent \"ip netns exec {host}\" --launch-addr %s --env TSUNAGI_IMPI_ADDR=%s\n", k, e, $3, k, gw, $4 }' "$out/net"
    } > "$out/sites"
    echo "## $sites sites x $k ranks ($engine progress), link $link (each direction)"
    # The emulator's own delay, as the ranks will see it: 1-byte round trips between two
    # sites' WAN addresses through the router, under the load of the moment.
    ns0=$(awk '/^site 0 / {print $3}' "$out/net")
    ns1=$(awk '/^site 1 / {print $3}' "$out/net")
    a1=$(awk '/^site 1 / {print $4}' "$out/net")
    ip netns exec "$ns1" "$wanbin" echo --listen "$a1:7007" &
    echo_pid=$!
    sleep 0.3
    echo "emulator check (50 round trips of 1 byte, site 0 to 1, us): $(ip netns exec "$ns0" "$wanbin" ping --to "$a1:7007" --count 50 --size 1 2>&1 | tr '\n' ' ')"
    kill "$echo_pid" 2>/dev/null || true
    wait "$echo_pid" 2>/dev/null || true
    echo_pid=
    echo "load average (1/5/15 min) at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "modes interleaved in one job: $rounds rounds x ($modes), a sample = mean of $iters calls (fewer above 32 KiB); median sample per mode, median ratio (min–max over the rounds); timings $timings"
    echo
    t0=$(date +%s)
    env TSUNAGI_SPIN=50 TSUNAGI_YIELDS=20 timeout "$limit" \
        "$bin/mpirun" --sites "$out/sites" "$bench" "$max" "$iters" "$rounds" "$modes" \
        2> "$out/err" || {
        echo "bench/wan.sh: the job failed or hit the limit of $limit s (exit $?):" >&2
        tail -5 "$out/err" >&2
    }
    echo
    echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg); the job took $(( $(date +%s) - t0 )) s"
    echo
    TSUNAGI_WAN_BIN=$wanbin "$top/scripts/wan-netns" down $tag "$sites"
done
if [ "$npb" = 1 ]; then
    "$top/bench/wan-npb.sh" "${links[0]}"
fi
