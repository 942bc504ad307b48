#!/usr/bin/env bash
# io.sh — MPI-IO, the BT-IO pattern: a 3-D array of doubles block-distributed over 4 ranks
#   (2x2x1 grid, subarray filetypes), written and read collectively (write_all/read_all:
#   two-phase I/O) and independently (write/read through the same non-contiguous view:
#   data sieving), by Tsunagi, MPICH (ROMIO) and Open MPI (OMPIO), one node.
#
# Usage: bench/io.sh [-r R] [-s "N N ..."] [-d DIR] [-h]
#   -r R     repetitions per configuration (default 3; the best is kept)
#   -s SIZES edge lengths N of the N^3 array (default "64 128 192")
#   -d DIR   directory of the test files (default /tmp)
#
# Program: npb-tests/bench/io.c, built with Tsunagi's mpicc from an install prefix
# (TSUNAGI_PREFIX, default ./dist: run scripts/install first; TSUNAGI_MPIRUN overrides its
# mpirun), mpicc.mpich and
# mpicc.openmpi (a missing one is skipped). Output: MB/s of write and read per
# implementation, mode and size, then each one's collective/independent ratio and
# Tsunagi's ratio to the others. Files go to the page cache (no sync): this measures the
# I/O layer's own cost, not the disk.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
top="$(dirname "$here")"
reps=3
sizes="64 128 192"
dir=/tmp
while [ $# -gt 0 ]; do
    case "$1" in
        -r) shift; reps="${1:?-r needs a count}" ;;
        -s) shift; sizes="${1:?-s needs sizes}" ;;
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
if command -v mpicc.mpich >/dev/null; then
    mpicc.mpich -O2 -o "$build/io.mpich" "$src"
    impls+=(mpich)
fi
if command -v mpicc.openmpi >/dev/null; then
    mpicc.openmpi -O2 -o "$build/io.openmpi" "$src"
    impls+=(openmpi)
fi

run() { # impl N mode -> "write read"
    local impl=$1 n=$2 mode=$3
    case "$impl" in
        tsunagi) "$trun" -n 4 "$build/io.tsunagi" "$n" "$mode" "$dir" "$reps" ;;
        mpich) mpiexec.hydra -n 4 "$build/io.mpich" "$n" "$mode" "$dir" "$reps" ;;
        openmpi) mpirun.openmpi --allow-run-as-root --oversubscribe -n 4 \
            "$build/io.openmpi" "$n" "$mode" "$dir" "$reps" ;;
    esac | awk '/^io /{print $4, $5}'
}

declare -A W R
for n in $sizes; do
    for mode in coll indep; do
        for impl in "${impls[@]}"; do
            read -r w r < <(run "$impl" "$n" "$mode")
            W[$impl,$n,$mode]=$w
            R[$impl,$n,$mode]=$r
        done
    done
done

printf '%-8s %5s %6s %12s %12s\n' impl N mode "write MB/s" "read MB/s"
for n in $sizes; do
    for mode in coll indep; do
        for impl in "${impls[@]}"; do
            printf '%-8s %5s %6s %12s %12s\n' "$impl" "$n" "$mode" "${W[$impl,$n,$mode]}" "${R[$impl,$n,$mode]}"
        done
    done
done
echo
echo "collective / independent (write, read):"
for n in $sizes; do
    for impl in "${impls[@]}"; do
        awk -v i="$impl" -v n="$n" -v wc="${W[$impl,$n,coll]}" -v wi="${W[$impl,$n,indep]}" \
            -v rc="${R[$impl,$n,coll]}" -v ri="${R[$impl,$n,indep]}" \
            'BEGIN{printf "  %-8s N=%-4s %6.2f %6.2f\n", i, n, wc/wi, rc/ri}'
    done
done
echo
echo "tsunagi / other (write, read), per mode:"
for n in $sizes; do
    for mode in coll indep; do
        for impl in "${impls[@]}"; do
            [ "$impl" = tsunagi ] && continue
            awk -v i="$impl" -v n="$n" -v m="$mode" -v wt="${W[tsunagi,$n,$mode]}" \
                -v wo="${W[$impl,$n,$mode]}" -v rt="${R[tsunagi,$n,$mode]}" -v ro="${R[$impl,$n,$mode]}" \
                'BEGIN{printf "  vs %-8s N=%-4s %-6s %6.2f %6.2f\n", i, n, m, wt/wo, rt/ro}'
        done
    done
done
