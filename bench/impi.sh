#!/usr/bin/env bash
# impi.sh — IMPI across two sites beside Tsunagi's own TCP transport on the same link.
#   Two network namespaces on a bridge are the two "hosts"; the same 2 ranks run
#     tsunagi-tcp     one site over both namespaces: TCP transport between the ranks
#     tsunagi-impi    two sites (one per namespace) joined by IMPI through tsunagi-impi-server
#     tsunagi-impi-x32  the same with TSUNAGI_IMPI_DATAREP=external32
#   and NPB class A kernels on 4 ranks: 2 sites x 2 ranks (one namespace each, shm inside a
#   site, IMPI between) against the same 4 ranks as one site on one host (shm).
#   The namespaces share this host's cores, which neither site can see: each believes it
#   has the host to itself. So the two-site runs get the waiting policy the one-site run
#   picks by itself when its ranks outnumber the cores (TSUNAGI_SPIN=50 TSUNAGI_YIELDS=20;
#   without it, 4 ranks spinning on 2 cores made CG.A across sites 5x slower).
#
# Usage: bench/impi.sh [-r R] [-k "cg mg"] [-h]
#   -r R   repetitions per configuration (default 5; env R works too)
#   -k K   NPB kernels for the second table (default "cg mg is"; "" skips it)
#
# Needs root and `ip netns`. Programs: npb-tests/bench/p2p.c ("lat"/"bw" lines tabled) and
# the npb-tests kernels, built with Tsunagi's mpicc from an install prefix (TSUNAGI_PREFIX,
# default ./dist: run scripts/install first). Runs are interleaved; tables show medians and
# the ratio to the first column. The namespaces (tsgimpi-a/-b, bridge tsgimpibr,
# 10.77.249.0/24) are removed at exit.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
top="$(dirname "$here")"
reps="${R:-5}"
kernels="cg mg is"
while [ $# -gt 0 ]; do
    case "$1" in
        -r) shift; reps="${1:?-r needs a count}" ;;
        -k) shift; kernels="${1-}" ;;
        -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; exit 0 ;;
        *) echo "impi.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
    shift
done
[ "$(id -u)" = 0 ] && ip netns list >/dev/null 2>&1 || {
    echo "impi.sh: needs root and 'ip netns'" >&2; exit 1; }

prefix="${TSUNAGI_PREFIX:-$top/dist}"
trun="$prefix/bin/mpirun"
for f in "$prefix/bin/mpicc" "$trun" "$prefix/bin/tsunagi-impi-server"; do
    [ -x "$f" ] || { echo "impi.sh: $f missing (scripts/install $prefix)" >&2; exit 1; }
done

build="$(mktemp -d "${TMPDIR:-/tmp}/tsunagi-impi-bench.XXXXXX")"
cleanup() {
    ip netns del tsgimpi-a 2>/dev/null || true
    ip netns del tsgimpi-b 2>/dev/null || true
    ip link del tsgimpibr 2>/dev/null || true
    # A veth outlives its namespace while a process still holds the namespace: without
    # this, the next run's `ip link add` fails with "File exists".
    ip link del tsgiva 2>/dev/null || true
    ip link del tsgivb 2>/dev/null || true
    rm -rf "$build"
}
trap cleanup EXIT
"$prefix/bin/mpicc" -O2 -o "$build/pingpong" "$top/npb-tests/bench/p2p.c"
if [ -n "$kernels" ]; then
    make -s -C "$top/npb-tests" MPICC="$prefix/bin/mpicc" BUILD="$build/npb" \
        $(for k in $kernels; do echo "$build/npb/$k"; done) >/dev/null
fi

ip link add tsgimpibr type bridge
ip addr add 10.77.249.1/24 dev tsgimpibr
ip link set tsgimpibr up
i=2
for h in a b; do
    ip netns add "tsgimpi-$h"
    ip link add "tsgiv$h" type veth peer name eth0 netns "tsgimpi-$h"
    ip link set "tsgiv$h" master tsgimpibr up
    ip -n "tsgimpi-$h" addr add "10.77.249.$i/24" dev eth0
    ip -n "tsgimpi-$h" link set eth0 up
    ip -n "tsgimpi-$h" link set lo up
    i=$((i + 1))
done
agent="--launch-agent 'ip netns exec {host}' --launch-addr 10.77.249.1"
site() { echo "-n $2 --host tsgimpi-$1:$2 $agent"; }
printf 'server 10.77.249.1\n%s\n%s\n' "$(site a 1)" "$(site b 1)" > "$build/sites-1x2"
printf 'server 10.77.249.1\n%s\n%s\n' "$(site a 2)" "$(site b 2)" > "$build/sites-2x2"

run_one() {
    case "$1" in
        tsunagi-tcp) "$trun" --host tsgimpi-a:1,tsgimpi-b:1 \
            --launch-agent 'ip netns exec {host}' --launch-addr 10.77.249.1 "$build/pingpong" ;;
        tsunagi-impi) "$trun" --sites "$build/sites-1x2" "$build/pingpong" ;;
        tsunagi-impi-x32) "$trun" --env TSUNAGI_IMPI_DATAREP=external32 \
            --sites "$build/sites-1x2" "$build/pingpong" ;;
        npb-one-site:*) "$trun" -n 4 "$build/npb/${1#*:}" A ;;
        npb-two-sites:*) "$trun" $spin_env --sites "$build/sites-2x2" "$build/npb/${1#*:}" A ;;
    esac
}
# Ranks on the whole host (both namespaces) against its cores: see the header.
spin_env=""
[ 4 -gt "$(nproc)" ] && spin_env="--env TSUNAGI_SPIN=50 --env TSUNAGI_YIELDS=20"
export -f run_one
export trun build spin_env

median_table() { # results-file names...
    local res=$1; shift
    awk -v names="$*" '
        { key = $3 " " $4; v[$1, key, ++cnt[$1, key]] = $5
          if (!(key in seen)) { seen[key] = 1; order[++nk] = key } }
        function median(name, key,    k, i, j, t, a) {
            k = cnt[name, key]; if (k == 0) return ""
            for (i = 1; i <= k; i++) a[i] = v[name, key, i]
            for (i = 2; i <= k; i++) for (j = i; j > 1 && a[j-1] + 0 > a[j] + 0; j--) {
                t = a[j]; a[j] = a[j-1]; a[j-1] = t }
            return (k % 2) ? a[(k + 1) / 2] : (a[k/2] + a[k/2 + 1]) / 2
        }
        END {
            nn = split(names, nm, " ")
            printf "%-5s %9s", "kind", "size"
            for (i = 1; i <= nn; i++) printf " %16s", nm[i]
            for (i = 2; i <= nn; i++) printf " %10s", "/" nm[1]
            printf "\n"
            for (o = 1; o <= nk; o++) {
                split(order[o], kb, " ")
                printf "%-5s %9s", kb[1], kb[2]
                for (i = 1; i <= nn; i++) { m[i] = median(nm[i], order[o]); printf " %16s", (m[i] == "" ? "-" : m[i]) }
                for (i = 2; i <= nn; i++) printf " %10s", (m[1] > 0 && m[i] != "" ? sprintf("%.2f", m[i] / m[1]) : "-")
                printf "\n"
            }
        }' "$res"
}

p2p_names=(tsunagi-tcp tsunagi-impi tsunagi-impi-x32)
res="$build/p2p.txt"; : > "$res"
for ((r = 1; r <= reps; r++)); do
    for n in "${p2p_names[@]}"; do
        echo "impi.sh: run $r/$reps $n" >&2
        if ! timeout 300 bash -c "run_one $n" > "$build/$n.$r.log" 2> "$build/$n.$r.err"; then
            echo "impi.sh: $n run $r failed:" >&2; tail -n 5 "$build/$n.$r.err" >&2 || true
            continue
        fi
        awk -v n="$n" -v r="$r" '($1 == "lat" || $1 == "bw") && NF == 3 { print n, r, $1, $2, $3 }' \
            "$build/$n.$r.log" >> "$res"
    done
done
echo
echo "ping-pong, 2 ranks in two namespaces; medians over $reps runs; lat in usec, bw in MB/s"
median_table "$res" "${p2p_names[@]}"

if [ -n "$kernels" ]; then
    res="$build/npb.txt"; : > "$res"
    for ((r = 1; r <= reps; r++)); do
        for k in $kernels; do
            for n in npb-one-site npb-two-sites; do
                echo "impi.sh: run $r/$reps $n $k" >&2
                if ! timeout 600 bash -c "run_one $n:$k" > "$build/$n.$k.$r.log" 2>&1; then
                    echo "impi.sh: $n $k run $r failed:" >&2; tail -n 5 "$build/$n.$k.$r.log" >&2
                    continue
                fi
                grep -q "Verification *= *SUCCESSFUL\|VERIFIED\|ALL PASSED\|verified" \
                    "$build/$n.$k.$r.log" || echo "impi.sh: $n $k run $r not verified" >&2
                t=$(awk '/Time in seconds/ { print $NF }' "$build/$n.$k.$r.log")
                [ -n "$t" ] && echo "$n $r time ${k^^}.A $t" >> "$res"
            done
        done
    done
    echo
    echo "NPB class A, 4 ranks: one site on one host (shm) vs 2 sites x 2 ranks (IMPI); seconds"
    median_table "$res" npb-one-site npb-two-sites
fi
