#!/usr/bin/env bash
# io.sh — MPI-IO, the BT-IO pattern: a 3-D array of doubles block-distributed over 4 ranks
#   (subarray filetypes), written and read collectively (write_all/read_at_all: two-phase
#   I/O) and independently (write/read_at through the same non-contiguous view: data
#   sieving), by Tsunagi, MPICH (ROMIO) and Open MPI (OMPIO), one node.
#
# Usage: bench/io.sh [-r R] [-s "N N ..."] [-p "slab bt"] [-y] [-d DIR] [-h]
#   -r R     repetitions per configuration (default 3; the best is kept)
#   -s SIZES edge lengths N of the N^3 array (default "64 128 192 256")
#   -p PATS  decompositions (default "slab bt"): slab = 2x2x1 grid, one double per point,
#            whole x rows (a rank's pieces are N*N/2 doubles: few, large); bt = 1x2x2 grid,
#            5 doubles per point as BT-IO has (a rank's pieces are N*20 bytes: many, small)
#   -y       MPI_File_sync inside the write's timing (else the data stays in the page cache)
#   -d DIR   directory of the test files (default /tmp)
#
# Program: npb-tests/bench/io.c, built with Tsunagi's mpicc from an install prefix
# (TSUNAGI_PREFIX, default ./dist: run scripts/install first; TSUNAGI_MPIRUN overrides its
# mpirun), mpicc.mpich and
# mpicc.openmpi (a missing one is skipped). Output: MB/s of write and read per
# implementation, pattern, mode and size, with the times (ms, slowest rank, best of R),
# then each one's independent/collective time ratio (> 1: collective is faster) and
# Tsunagi's speed relative to the others. Without -y files stay in the page cache: this
# measures the I/O layer's own cost, not the disk; reads always come from the page cache.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
top="$(dirname "$here")"
reps=3
sizes="64 128 192 256"
pats="slab bt"
sync=nosync
dir=/tmp
while [ $# -gt 0 ]; do
    case "$1" in
        -r) shift; reps="${1:?-r needs a count}" ;;
        -s) shift; sizes="${1:?-s needs sizes}" ;;
        -p) shift; pats="${1:?-p needs patterns}" ;;
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
if command -v mpicc.mpich >/dev/null; then
    mpicc.mpich -O2 -o "$build/io.mpich" "$src"
    impls+=(mpich)
fi
if command -v mpicc.openmpi >/dev/null; then
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

echo "# $(date -u +%FT%TZ) $(uptime | sed 's/.*load/load/') sync=$sync reps=$reps"
declare -A W R WS RS
for pat in $pats; do
    for n in $sizes; do
        for mode in coll indep; do
            for impl in "${impls[@]}"; do
                read -r w r ws rs < <(run "$impl" "$n" "$mode" "$pat")
                W[$impl,$pat,$n,$mode]=$w
                R[$impl,$pat,$n,$mode]=$r
                WS[$impl,$pat,$n,$mode]=$ws
                RS[$impl,$pat,$n,$mode]=$rs
            done
        done
    done
done
echo "# $(date -u +%FT%TZ) $(uptime | sed 's/.*load/load/') (end)"

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
                'BEGIN{printf "  %-8s %-5s N=%-4s %7.2f %7.2f\n", i, p, n, wi/wc, ri/rc}'
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
                    'BEGIN{printf "  vs %-8s %-5s N=%-4s %-6s %7.2f %7.2f\n", i, p, n, m, wt/wo, rt/ro}'
            done
        done
    done
done
