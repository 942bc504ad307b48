#!/usr/bin/env bash
# io-ab.sh — A/B of Tsunagi's one-node collective I/O routes on the BT-IO pattern
#   (npb-tests/bench/io.c, 4 ranks), interleaved: each round runs every configuration once
#   in turn (the order rotates by one each round), so that the load of a shared machine
#   hits all alike; medians over the rounds. Also the CPU time (user + system, of mpirun
#   and its ranks: /usr/bin/time) and minor page faults of each run, which the load
#   distorts less than wall time.
#
# Usage: bench/io-ab.sh [-r R] [-i I] [-s "N ..."] [-p bt|slab] [-c "CONFIGS"] [-d DIR]
#   -r R        rounds (default 5)
#   -i I        repetitions inside one run (default 2: the best counts)
#   -s SIZES    edge lengths (default "64 128")
#   -p PAT      pattern (default bt)
#   -c CONFIGS  (default "mmap shm msg indep"):
#               mmap    collective, default hints (one node: through the file's pages)
#               nopop   mmap without populating the windows (a fault per page)
#               mmapon  collective, tsunagi_cb_mmap=enable (the file's pages at any span)
#               shm     collective, tsunagi_cb_mmap=disable (shared-memory rounds)
#               msg     collective, tsunagi_cb_mmap=disable,tsunagi_cb_shm=disable
#               indep   independent (data sieving)
#   -d DIR      directory of the files (default /tmp)
# Needs an install prefix (TSUNAGI_PREFIX, default ./dist: scripts/install). Raw lines go
# to stdout as they come ("run ..."), the medians at the end.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
top="$(dirname "$here")"
rounds=5
reps=2
sizes="64 128"
pat=bt
configs="mmap shm msg indep"
dir=/tmp
while [ $# -gt 0 ]; do
    case "$1" in
        -r) shift; rounds="${1:?}" ;;
        -i) shift; reps="${1:?}" ;;
        -s) shift; sizes="${1:?}" ;;
        -p) shift; pat="${1:?}" ;;
        -c) shift; configs="${1:?}" ;;
        -d) shift; dir="${1:?}" ;;
        -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; exit 0 ;;
        *) echo "io-ab.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
    shift
done
prefix="${TSUNAGI_PREFIX:-$top/dist}"
build="$(mktemp -d)"
trap 'rm -rf "$build"' EXIT
"$prefix/bin/mpicc" -O2 -o "$build/io" "$top/npb-tests/bench/io.c"

one() { # config N: prints "run CONFIG N write_ms read_ms cpu_s minflt"
    local c=$1 n=$2 mode=coll hints="" pop=""
    case "$c" in
        mmap) ;;
        nopop) pop=none ;;
        mmapon) hints="tsunagi_cb_mmap=enable" ;;
        shm) hints="tsunagi_cb_mmap=disable" ;;
        msg) hints="tsunagi_cb_mmap=disable,tsunagi_cb_shm=disable" ;;
        indep) mode=indep ;;
        *) echo "io-ab.sh: unknown config $c" >&2; exit 2 ;;
    esac
    local out
    out=$(TSUNAGI_IO_HINTS="$hints" TSUNAGI_IO_MMAP_POPULATE="$pop" \
        /usr/bin/time -f "TIME %U %S %R" "$prefix/bin/mpirun" -n 4 "$build/io" "$n" "$mode" \
        "$dir" "$reps" "$pat" 2>&1)
    local line t
    line=$(grep '^io ' <<<"$out")
    t=$(grep '^TIME ' <<<"$out")
    awk -v c="$c" -v l="$line" -v t="$t" 'BEGIN {
        split(l, a, " "); split(t, b, " ");
        printf "run %-6s %4d %9.2f %9.2f %7.2f %8d\n", c, a[2], a[7] * 1e3, a[8] * 1e3, b[2] + b[3], b[4] }'
}

echo "# $(date -u +%FT%TZ) $(uptime | sed 's/.*load/load/') pattern=$pat rounds=$rounds reps=$reps"
echo "#   config    N  write_ms   read_ms   cpu_s   minflt"
set -- $configs
k=0
results=()
for r in $(seq 1 "$rounds"); do
    for n in $sizes; do
        # Rotate the order by the round number.
        cs=("$@")
        m=${#cs[@]}
        for j in $(seq 0 $((m - 1))); do
            c=${cs[$(((j + k) % m))]}
            line=$(one "$c" "$n")
            echo "$line"
            results+=("$line")
        done
    done
    k=$((k + 1))
    echo "# round $r done $(date -u +%FT%TZ) $(uptime | sed 's/.*load/load/')"
done
printf '%s\n' "${results[@]}" | awk '
    { key = $2 " " $3; n[key]++; w[key, n[key]] = $4; r[key, n[key]] = $5; c[key, n[key]] = $6; f[key, n[key]] = $7;
      if (!(key in seen)) { seen[key] = 1; order[++k] = key } }
    function med(arr, key, cnt,   i, j, t, v) {
        for (i = 1; i <= cnt; i++) v[i] = arr[key, i];
        for (i = 1; i <= cnt; i++) for (j = i + 1; j <= cnt; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
        return cnt % 2 ? v[(cnt + 1) / 2] : (v[cnt / 2] + v[cnt / 2 + 1]) / 2 }
    END {
        print "# medians: config N write_ms read_ms cpu_s minflt"
        for (i = 1; i <= k; i++) { key = order[i];
            printf "median %-10s %9.2f %9.2f %7.2f %8d\n", key, med(w, key, n[key]), med(r, key, n[key]), med(c, key, n[key]), med(f, key, n[key]) } }'
