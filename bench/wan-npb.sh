#!/usr/bin/env bash
# NPB kernels across sites behind an emulated wide-area link, with and without the
# latency-aware collectives, interleaved.
#
#   bench/wan-npb.sh [-s SITES] [-k RANKS_PER_SITE] [-c CLASS] [-e ENGINE] [-K "is mg"]
#                    [-M "wan flat impi"] [-R ROUNDS] LINK
#
# Builds the C kernels (npb-tests/) with PREFIX/bin/mpicc (TSUNAGI_PREFIX, or the debug
# C interface made by `c-abi/scripts/install-c` into target/debug/c-abi-prefix), puts SITES
# (2) sites of RANKS_PER_SITE (2) ranks behind tsunagi-wan (scripts/wan-netns; LINK default
# delay=5ms, 10 ms round trip) and runs each kernel of class CLASS (A) with
# TSUNAGI_WAN_COLL set to each of MODES (wan impi flat; MODE:VAR=VALUE also sets VAR in the
# ranks, e.g. wan:TSUNAGI_COLL_ALLGATHER=recursive_doubling), ROUNDS (1) times: round r runs
# every kernel in every mode, the mode order rotating from round to round, so that a
# changing machine load falls on all modes alike. Prints every run's time (the kernels'
# own "Time in seconds", verified runs only), then per kernel the median time per mode and
# the median and range over the rounds of each mode's ratio to wan (same round: > 1 means
# wan is faster). TSUNAGI_WAN_TRACE=1 in the environment is passed to the ranks (the
# collectives then name their choices on stderr, kept in KERNEL.MODE.rROUND.log under
# $WAN_NPB_LOGS when that is set).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
sites=2 k=2 class=A engine=threaded kernels="is mg ep" modes="wan impi flat" rounds=1
while getopts "s:k:c:e:K:M:R:" o; do
    case $o in
        s) sites=$OPTARG ;; k) k=$OPTARG ;; c) class=$OPTARG ;; e) engine=$OPTARG ;;
        K) kernels=$OPTARG ;; M) modes=$OPTARG ;; R) rounds=$OPTARG ;; *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))
link=${1:-delay=5ms}
prefix=${TSUNAGI_PREFIX:-$top/target/debug/c-abi-prefix}
bin=${TSUNAGI_BIN:-$top/target/debug}
wanbin=${TSUNAGI_WAN_BIN:-$bin/tsunagi-wan}
[ -x "$prefix/bin/mpicc" ] || { echo "bench/wan-npb.sh: no $prefix/bin/mpicc" >&2; exit 2; }
read -r -a mlist <<< "$modes"
build=$(mktemp -d)
tag=$(( $$ % 200 + 20 ))
trap 'TSUNAGI_WAN_BIN=$wanbin "$top/scripts/wan-netns" down $tag $sites; rm -rf "$build"' EXIT
make -C "$top/npb-tests" -j1 MPICC="$prefix/bin/mpicc" BUILD="$build" KERNELS="$kernels" >/dev/null
TSUNAGI_WAN_BIN=$wanbin "$top/scripts/wan-netns" up $tag "$sites" "$link" > "$build/net"
gw=$(awk '/^gateway/ {print $2}' "$build/net")
{
    echo "server $gw"
    awk -v k="$k" -v gw="$gw" -v e="$engine" '/^site/ {
        printf "-n %d --progress %s --host %s:%d --launch-agent \"ip netns exec {host}\" --launch-addr %s --env TSUNAGI_IMPI_ADDR=%s\n", k, e, $3, k, gw, $4 }' "$build/net"
} > "$build/sites"
trace=()
[ -z "${TSUNAGI_WAN_TRACE:-}" ] || trace=(--env TSUNAGI_WAN_TRACE=1)
echo "## NPB class $class, $sites sites x $k ranks ($engine progress), link $link each way"
echo "$rounds round(s), modes ($modes) rotating; load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| round | kernel | mode | time (s) | load (1 min) |"
echo "|---|---|---|---|---|"
results=$build/results
: > "$results"
for ((r = 0; r < rounds; r++)); do
    for kern in $kernels; do
        n=${#mlist[@]}
        for ((j = 0; j < n; j++)); do
            mode=${mlist[$(( (j + r) % n ))]}
            log=$build/$kern.$mode.r$r.log
            # MODE:VAR=VALUE adds one variable (e.g. wan:TSUNAGI_COLL_ALLGATHER=ring).
            extra=()
            [[ $mode != *:* ]] || extra=(--env "${mode#*:}")
            TSUNAGI_SPIN=50 TSUNAGI_YIELDS=20 timeout 900 "$bin/mpirun" \
                --env LD_LIBRARY_PATH="$prefix/lib" --env TSUNAGI_WAN_COLL="${mode%%:*}" \
                "${trace[@]}" "${extra[@]}" \
                --sites "$build/sites" "$build/$kern" "$class" > "$log" 2>&1 || true
            if grep -q "Verification *= *SUCCESSFUL" "$log"; then
                t=$(sed -n 's/^ *Time in seconds *= *//p' "$log" | head -1 | tr -d ' ')
            else
                t=FAILED
                tail -5 "$log" >&2
            fi
            [ -z "${WAN_NPB_LOGS:-}" ] || { mkdir -p "$WAN_NPB_LOGS"; cp "$log" "$WAN_NPB_LOGS/"; }
            echo "| $r | $kern | $mode | $t | $(cut -d' ' -f1 /proc/loadavg) |"
            echo "$r $kern $mode $t" >> "$results"
        done
    done
done
echo
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
# Per kernel: median time per mode, and per mode the median (min-max) over the rounds of
# its time divided by wan's in the same round.
head="| kernel |"
sep="|---|"
for mode in "${mlist[@]}"; do head="$head $mode (s) |"; sep="$sep---|"; done
for mode in "${mlist[@]}"; do
    [ "$mode" = wan ] && continue
    head="$head $mode/wan |"
    sep="$sep---|"
done
echo "$head"
echo "$sep"
for kern in $kernels; do
    awk -v kern="$kern" -v modes="$modes" '
        function median(a, n,   i, j, t) {
            for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
            if (n == 0) return "-"
            return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
        }
        $2 == kern && $4 + 0 > 0 { t[$3, $1] = $4; seen[$1] = 1 }
        END {
            nm = split(modes, ml, " ")
            line = "| " kern " |"
            for (i = 1; i <= nm; i++) {
                n = 0; delete v
                for (r in seen) if ((ml[i], r) in t) v[++n] = t[ml[i], r]
                m = median(v, n)
                line = line " " (m == "-" ? m : sprintf("%.3f", m)) " |"
            }
            for (i = 1; i <= nm; i++) {
                if (ml[i] == "wan") continue
                n = 0; delete v; lo = ""; hi = ""
                for (r in seen) if (((ml[i], r) in t) && (("wan", r) in t)) {
                    x = t[ml[i], r] / t["wan", r]; v[++n] = x
                    if (lo == "" || x < lo) lo = x
                    if (hi == "" || x > hi) hi = x
                }
                m = median(v, n)
                line = line " " (n ? sprintf("%.2f (%.2f–%.2f)", m, lo, hi) : "-") " |"
            }
            print line
        }' "$results"
done
