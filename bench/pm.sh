#!/usr/bin/env bash
# pm.sh — Tsunagi's PM/UDP transport beside its TCP transport between two network
#   namespaces joined by a bridge (two "hosts" on this machine), 2 ranks, one per host;
#   PM also with the checksum off, with 32 KiB datagrams, and with 1 % and 5 % of its
#   datagrams dropped.
#
# Usage: bench/pm.sh [-r R] [-h]
#   -r R   repetitions per configuration (default 3; env R works too); the table shows medians
#
# Program: the Rust API's ping-pong (src/bin/tsunagi-pingpong.rs: "lat <bytes> <usec>",
# "bw <bytes> <MB/s>"), release build, started by the release mpirun:
#   cargo build --release --bin tsunagi-pingpong -p tsunagi
#   cargo build --release -p tsunagi-launcher --bin mpirun
# (CARGO_TARGET_DIR is honoured). Needs root and `ip netns`. The namespaces (tsgpm-a/-b,
# bridge tsgpmbr, 10.77.251.0/24) are removed at exit. Prints one table: latency (µs) and
# bandwidth (MB/s) per configuration, and PM/TCP ratios.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
top="$(dirname "$here")"
reps="${R:-3}"
while [ $# -gt 0 ]; do
    case "$1" in
        -r) shift; reps="${1:?-r needs a count}" ;;
        -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; exit 0 ;;
        *) echo "pm.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
    shift
done
target="${CARGO_TARGET_DIR:-$top/target}/release"
for f in mpirun tsunagi-pingpong; do
    [ -x "$target/$f" ] || { echo "pm.sh: $target/$f missing (see -h)" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "pm.sh: needs root for network namespaces" >&2; exit 1; }

out="$(mktemp -d "${TMPDIR:-/tmp}/tsunagi-pm-bench.XXXXXX")"
cleanup() {
    ip netns del tsgpm-a 2>/dev/null || true
    ip netns del tsgpm-b 2>/dev/null || true
    ip link del tsgpmbr 2>/dev/null || true
    rm -rf "$out"
}
trap cleanup EXIT
ip link add tsgpmbr type bridge
ip addr add 10.77.251.1/24 dev tsgpmbr
ip link set tsgpmbr up
i=2
for h in a b; do
    ip netns add "tsgpm-$h"
    ip link add "tsgpmv$h" type veth peer name eth0 netns "tsgpm-$h"
    ip link set "tsgpmv$h" master tsgpmbr up
    ip -n "tsgpm-$h" addr add "10.77.251.$i/24" dev eth0
    ip -n "tsgpm-$h" link set eth0 up
    ip -n "tsgpm-$h" link set lo up
    i=$((i + 1))
done

# NAMES picks columns (default all below).
read -r -a names <<< "${NAMES:-tcp pm pm-nocsum pm-pkt32k pm-loss1 pm-loss5}"
run_one() {
    local extra=()
    case "$1" in
        tcp) extra=(--internode tcp) ;;
        pm) extra=(--internode pm) ;;
        pm-nocsum) extra=(--internode pm -x TSUNAGI_PM_CHECKSUM=0) ;;
        pm-pkt32k) extra=(--internode pm -x TSUNAGI_PM_PACKET=32768) ;;
        pm-pkt60k) extra=(--internode pm -x TSUNAGI_PM_PACKET=60000) ;;
        pm-piece8k) extra=(--internode pm -x TSUNAGI_PM_RDMA_PIECE=8192) ;;
        pm-nordma) extra=(--internode pm -x TSUNAGI_PM_RDMA=0) ;;
        pm-loss1) extra=(--internode pm -x TSUNAGI_PM_DROP=0.01) ;;
        pm-loss5) extra=(--internode pm -x TSUNAGI_PM_DROP=0.05) ;;
    esac
    "$target/mpirun" --host tsgpm-a:1,tsgpm-b:1 --launch-agent 'ip netns exec {host}' \
        --launch-addr 10.77.251.1 "${extra[@]}" "$target/tsunagi-pingpong"
}
for r in $(seq "$reps"); do
    for n in "${names[@]}"; do
        run_one "$n" > "$out/$n.$r" 2> "$out/$n.$r.err" ||
            { echo "pm.sh: $n failed:" >&2; cat "$out/$n.$r.err" >&2; exit 1; }
    done
done
python3 - "$out" "$reps" "${names[@]}" <<'PY'
import sys, statistics
out, reps, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
data = {}
for n in names:
    for r in range(1, reps + 1):
        for line in open(f"{out}/{n}.{r}"):
            f = line.split()
            if len(f) == 3 and f[0] in ("lat", "bw"):
                data.setdefault((f[0], int(f[1])), {}).setdefault(n, []).append(float(f[2]))
print("| metric | bytes | " + " | ".join(names) + " | pm/tcp |")
print("|---|---:|" + "---:|" * (len(names) + 1))
for (kind, size) in sorted(data, key=lambda k: (k[0] != "lat", k[1])):
    row = data[(kind, size)]
    med = {n: statistics.median(row[n]) for n in names if n in row}
    ratio = med["pm"] / med["tcp"] if med.get("tcp") else float("nan")
    cells = " | ".join(f"{med[n]:.2f}" if n in med else "-" for n in names)
    print(f"| {kind} {'µs' if kind == 'lat' else 'MB/s'} | {size} | {cells} | {ratio:.2f} |")
PY
