#!/usr/bin/env bash
# NPB kernels across sites behind an emulated wide-area link, with and without the
# latency-aware collectives.
#
#   bench/wan-npb.sh [-s SITES] [-k RANKS_PER_SITE] [-c CLASS] [-e ENGINE] [-K "is mg"] LINK
#
# Builds the C kernels (npb-tests/) with PREFIX/bin/mpicc (TSUNAGI_PREFIX, or the debug
# C interface made by `c-abi/scripts/install-c` into target/debug/c-abi-prefix), puts SITES
# (2) sites of RANKS_PER_SITE (2) ranks behind tsunagi-wan (scripts/wan-netns; LINK default
# delay=5ms, 10 ms round trip) and runs each kernel of class CLASS (A) with
# TSUNAGI_WAN_COLL=wan, impi and flat, printing the kernels' own times and verification.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
sites=2 k=2 class=A engine=threaded kernels="is mg ep"
while getopts "s:k:c:e:K:" o; do
    case $o in
        s) sites=$OPTARG ;; k) k=$OPTARG ;; c) class=$OPTARG ;; e) engine=$OPTARG ;;
        K) kernels=$OPTARG ;; *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))
link=${1:-delay=5ms}
prefix=${TSUNAGI_PREFIX:-$top/target/debug/c-abi-prefix}
bin=${TSUNAGI_BIN:-$top/target/debug}
wanbin=${TSUNAGI_WAN_BIN:-$bin/tsunagi-wan}
[ -x "$prefix/bin/mpicc" ] || { echo "bench/wan-npb.sh: no $prefix/bin/mpicc" >&2; exit 2; }
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
echo "## NPB class $class, $sites sites x $k ranks ($engine progress), link $link each way"
echo "| kernel | wan (s) | impi (s) | flat (s) | impi/wan | flat/wan |"
echo "|---|---|---|---|---|---|"
for kern in $kernels; do
    declare -A t=()
    for mode in wan impi flat; do
        log=$build/$kern.$mode.log
        TSUNAGI_SPIN=50 TSUNAGI_YIELDS=20 timeout 900 "$bin/mpirun" \
            --env LD_LIBRARY_PATH="$prefix/lib" --env TSUNAGI_WAN_COLL=$mode \
            --sites "$build/sites" "$build/$kern" "$class" > "$log" 2>&1 || true
        if grep -q "Verification *= *SUCCESSFUL" "$log"; then
            t[$mode]=$(sed -n 's/^ *Time in seconds *= *//p' "$log" | head -1 | tr -d ' ')
        else
            t[$mode]=FAILED
            tail -5 "$log" >&2
        fi
    done
    ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a+0 > 0 && b+0 > 0) printf "%.2f", a / b; else print "-" }'; }
    echo "| $kern | ${t[wan]} | ${t[impi]} | ${t[flat]} | $(ratio "${t[impi]}" "${t[wan]}") | $(ratio "${t[flat]}" "${t[wan]}") |"
done
