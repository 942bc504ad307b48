#!/usr/bin/env bash
# io.sh — MPI-IO, the BT-IO pattern: a 3-D array of doubles block-distributed over 4 ranks
#   (subarray filetypes), written and read collectively (write_all/read_at_all: two-phase
#   I/O) and independently (write/read_at through the same non-contiguous view: data
#   sieving), by Tsunagi, MPICH (ROMIO) and Open MPI (OMPIO), one node.
#
# Usage: bench/io.sh [-r R] [-i I] [-s "N N ..."] [-p "slab bt"] [-y] [-d DIR] [-h]
#   -r R     rounds (default 3): each round runs every configuration once, in turn, so
#            that a change in the machine's load hits all of them alike (collective and
#            independent alternate which runs first); the median of the R rounds is reported
#   -i I     repetitions inside one run (default 2: the first warms up; the best counts)
#   -s SIZES edge lengths N of the N^3 array (default "64 128 192 256")
#   -p PATS  decompositions (default "slab bt"): slab = 2x2x1 grid, one double per point,
#            whole x rows (a rank's pieces are N*N/2 doubles: few, large); bt = 1x2x2 grid,
#            5 doubles per point as BT-IO has (a rank's pieces are N*20 bytes: many, small)
#   -m IMPLS implementations (default "tsunagi mpich openmpi"; missing ones are skipped)
#   -y       MPI_File_sync inside the write's timing (else the data stays in the page cache)
#   -d DIR   directory of the test files (default /tmp)
#
# Program: npb-tests/bench/io.c, built with Tsunagi's mpicc from an install prefix
# (TSUNAGI_PREFIX, default ./dist: run scripts/install first; TSUNAGI_MPIRUN overrides its
# mpirun), mpicc.mpich and
# mpicc.openmpi (a missing one is skipped). Output: MB/s of write and read per
# implementation, pattern, mode and size, with the times (ms, slowest rank, median over
# the R rounds of each run's best of I),
# then each one's independent/collective time ratio (> 1: collective is faster) and
# Tsunagi's speed relative to the others, and the ratios again as a Markdown table. Without -y files stay in the page cache: this
# measures the I/O layer's own cost, not the disk; reads always come from the page cache.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
top="$(dirname "$here")"
rounds=3
reps=2
sizes="64 128 192 256"
pats="slab bt"
want="tsunagi mpich openmpi"
sync=nosync
dir=/tmp
while [ $# -gt 0 ]; do
    case "$1" in
        -r) shift; rounds="${1:?-r needs a count}" ;;
        -i) shift; reps="${1:?-i needs a count}" ;;
        -s) shift; sizes="${1:?-s needs sizes}" ;;
        -p) shift; pats="${1:?-p needs patterns}" ;;
        -m) shift; want="${1:?-m needs implementations}" ;;
        -y) sync=sync ;;
        -d) shift; dir="${1:?-d needs a directory}" ;;
        -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; exit 0 ;;
        *) echo "io.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
    shift
done

prefix="${TSUNAGI_PREFIX:-$top/dist}"
trun="${TSUNAGI_MPIRUN:-$prefix/bin/mpirun}"
src="$top/npb-tests/bench/io.c"
build="$(mktemp -d)"
trap 'rm -rf "$build"' EXIT

impls=()
if [ -x "$prefix/bin/mpicc" ]; then
    "$prefix/bin/mpicc" -O2 -o "$build/io.tsunagi" "$src"
    impls+=(tsunagi)
else
    echo "io.sh: no Tsunagi install at $prefix (run scripts/install or set TSUNAGI_PREFIX)" >&2
    exit 1
fi
if [[ " $want " == *" mpich "* ]] && command -v mpicc.mpich >/dev/null; then
    mpicc.mpich -O2 -o "$build/io.mpich" "$src"
    impls+=(mpich)
fi
if [[ " $want " == *" openmpi "* ]] && command -v mpicc.openmpi >/dev/null; then
    mpicc.openmpi -O2 -o "$build/io.openmpi" "$src"
    impls+=(openmpi)
fi

run() { # impl N mode pattern -> "wMB rMB ws rs"
    local impl=$1 n=$2 mode=$3 pat=$4
    local args=("$n" "$mode" "$dir" "$reps" "$pat" "$sync")
    case "$impl" in
        tsunagi) "$trun" -n 4 "$build/io.tsunagi" "${args[@]}" ;;
        mpich) mpiexec.hydra -n 4 "$build/io.mpich" "${args[@]}" ;;
        openmpi) mpirun.openmpi --allow-run-as-root --oversubscribe -n 4 \
            "$build/io.openmpi" "${args[@]}" ;;
    esac | awk '/^io /{print $5, $6, $7, $8}'
}

median() { # values... -> their median (0 when there are none: a configuration that failed)
    printf '%s\n' "$@" | sort -g | awk 'NF{v[++n]=$1} END{print n == 0 ? 0 : (n%2) ? v[(n+1)/2] : (v[n/2]+v[n/2+1])/2}'
}

echo "# $(date -u +%FT%TZ) $(uptime | sed 's/.*load/load/') sync=$sync rounds=$rounds reps=$reps"
declare -A WS RS
for ((round = 1; round <= rounds; round++)); do
    # The modes alternate which goes first from round to round (a machine whose load
    # drifts within a round then favours neither).
    modes="coll indep"
    [ $((round % 2)) -eq 0 ] && modes="indep coll"
    for pat in $pats; do
        for n in $sizes; do
            for mode in $modes; do
                for impl in "${impls[@]}"; do
                    # A failed run (no "io" line) is tried once more, then left out of the
                    # median (a warning says so), so that one crash does not end the table.
                    ws="" rs=""
                    for _try in 1 2; do
                        read -r _ _ ws rs < <(run "$impl" "$n" "$mode" "$pat" || true) || true
                        [ -n "$rs" ] && break
                        echo "# warning: $impl $pat N=$n $mode round $round: no result" >&2
                    done
                    [ -n "$rs" ] || continue
                    k=$impl,$pat,$n,$mode
                    WS[$k]="${WS[$k]:-} $ws"
                    RS[$k]="${RS[$k]:-} $rs"
                done
            done
        done
    done
    echo "# round $round done $(date -u +%FT%TZ) $(uptime | sed 's/.*load/load/')"
done
echo "# $(date -u +%FT%TZ) $(uptime | sed 's/.*load/load/') (end)"
# Medians; MB/s from them.
declare -A W R
for impl in "${impls[@]}"; do
    for pat in $pats; do
        for n in $sizes; do
            for mode in coll indep; do
                k=$impl,$pat,$n,$mode
                WS[$k]="${WS[$k]:-}"
                RS[$k]="${RS[$k]:-}"
            done
        done
    done
done
for k in "${!WS[@]}"; do
    # shellcheck disable=SC2086
    WS[$k]=$(median ${WS[$k]})
    # shellcheck disable=SC2086
    RS[$k]=$(median ${RS[$k]})
    IFS=, read -r _ pat n _ <<<"$k"
    w=5
    [ "$pat" = slab ] && w=1
    W[$k]=$(awk -v n="$n" -v w="$w" -v t="${WS[$k]}" 'BEGIN{printf "%.1f", (t > 0 ? n*n*n*w*8/t/1e6 : 0)}')
    R[$k]=$(awk -v n="$n" -v w="$w" -v t="${RS[$k]}" 'BEGIN{printf "%.1f", (t > 0 ? n*n*n*w*8/t/1e6 : 0)}')
done

printf '%-8s %-5s %5s %6s %10s %11s %10s %11s\n' impl pat N mode "write ms" "write MB/s" "read ms" "read MB/s"
for pat in $pats; do
    for n in $sizes; do
        for mode in coll indep; do
            for impl in "${impls[@]}"; do
                k=$impl,$pat,$n,$mode
                awk -v i="$impl" -v p="$pat" -v n="$n" -v m="$mode" -v w="${W[$k]}" -v r="${R[$k]}" \
                    -v ws="${WS[$k]}" -v rs="${RS[$k]}" \
                    'BEGIN{printf "%-8s %-5s %5s %6s %10.2f %11.1f %10.2f %11.1f\n", i, p, n, m, ws*1e3, w, rs*1e3, r}'
            done
        done
    done
done
echo
echo "independent time / collective time (write, read; > 1: collective is faster):"
for pat in $pats; do
    for n in $sizes; do
        for impl in "${impls[@]}"; do
            awk -v i="$impl" -v p="$pat" -v n="$n" \
                -v wc="${WS[$impl,$pat,$n,coll]}" -v wi="${WS[$impl,$pat,$n,indep]}" \
                -v rc="${RS[$impl,$pat,$n,coll]}" -v ri="${RS[$impl,$pat,$n,indep]}" \
                'BEGIN{printf "  %-8s %-5s N=%-4s %7.2f %7.2f\n", i, p, n, (wc > 0 ? wi/wc : 0), (rc > 0 ? ri/rc : 0)}'
        done
    done
done
echo
echo "tsunagi's speed / other's (write, read; > 1: Tsunagi is faster):"
for pat in $pats; do
    for n in $sizes; do
        for mode in coll indep; do
            for impl in "${impls[@]}"; do
                [ "$impl" = tsunagi ] && continue
                awk -v i="$impl" -v p="$pat" -v n="$n" -v m="$mode" \
                    -v wt="${W[tsunagi,$pat,$n,$mode]}" -v wo="${W[$impl,$pat,$n,$mode]}" \
                    -v rt="${R[tsunagi,$pat,$n,$mode]}" -v ro="${R[$impl,$pat,$n,$mode]}" \
                    'BEGIN{printf "  vs %-8s %-5s N=%-4s %-6s %7.2f %7.2f\n", i, p, n, m, (wo > 0 ? wt/wo : 0), (ro > 0 ? rt/ro : 0)}'
            done
        done
    done
done
echo
echo "Markdown: independent time / collective time, write / read (> 1: collective is faster):"
echo
hdr="| N |"
sep="|---|"
for impl in "${impls[@]}"; do
    for pat in $pats; do
        hdr="$hdr $impl $pat |"
        sep="$sep---|"
    done
done
echo "$hdr"
echo "$sep"
for n in $sizes; do
    row="| $n |"
    for impl in "${impls[@]}"; do
        for pat in $pats; do
            row="$row $(awk -v wc="${WS[$impl,$pat,$n,coll]}" -v wi="${WS[$impl,$pat,$n,indep]}" \
                -v rc="${RS[$impl,$pat,$n,coll]}" -v ri="${RS[$impl,$pat,$n,indep]}" \
                'BEGIN{printf "%.2f / %.2f", (wc > 0 ? wi/wc : 0), (rc > 0 ? ri/rc : 0)}') |"
        done
    done
    echo "$row"
done
