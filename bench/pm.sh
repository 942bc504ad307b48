#!/usr/bin/env bash
# pm.sh — Tsunagi's PM/UDP transport beside its TCP transport and Open MPI's TCP BTL,
#   between two network namespaces joined by a bridge (two "hosts" on this machine).
#
# Usage: bench/pm.sh [-r R] [-p] [-n] [-m] [-h]
#   -r R   repetitions per configuration (default 3; env R works too); tables show medians
#   -p     ping-pong table only (no NPB, no memory table)
#   -n     NPB table only;  -m  memory table only
#
# 1. Ping-pong, 2 ranks, one per host. Columns (NAMES picks some):
#      tcp         our mpirun --internode tcp
#      pm          --internode pm (large messages by RDMA read into the user's buffer)
#      pm-nordma   TSUNAGI_PM_RDMA=0: large messages streamed through the PM rings
#      pm-piece8k  RDMA reads in 8 KiB PULLs instead of 60 KiB
#      pm-nocsum   no CRC-32;  pm-pkt32k  32 KiB datagrams for the rings
#      pm-loss1/5  1 % / 5 % of PM's datagrams dropped by its fault knob
#      pm-mtu      TSUNAGI_PM_MTU=65536: one datagram per packet, large ones as IP
#                  fragments (how PM sent them before trains of fragments by GSO)
#      pm-base     --internode pm with the mpirun and tsunagi-pingpong of another build
#                  (PM_BASE_TARGET=<its target/release>): before/after in one run
#      openmpi     mpirun.openmpi, pml ob1, btl tcp,self over eth0 (MPMD, each rank under
#                  `ip netns exec`; its PMIx server reached over the bridge)
#    Tsunagi runs src/bin/tsunagi-pingpong.rs, Open MPI runs npb-tests/bench/p2p.c: same
#    method and output ("lat <bytes> <usec>", "bw <bytes> <MB/s>"), different size lists
#    (rows one program lacks show "-"); p2p.c streams 16 messages per window from 1 MiB up,
#    tsunagi-pingpong 64.
# 2. NPB CG and MG (class NPB_CLASS, default A), 2 ranks, one per host, over tcp, pm and
#    Open MPI: seconds (the kernels' own "Time in seconds") and verification.
# 3. Memory: peak RSS (VmHWM) per rank and PM's registered receive memory, 2 hosts x K ranks
#    (K = 2, 4, 8: that many PM peers each), rings against the shared receive queue.
#
# Needs root, `ip netns`, the release build:
#   cargo build --release --bin tsunagi-pingpong -p tsunagi
#   cargo build --release -p tsunagi-launcher --bin mpirun
#   cargo build --release -p tsunagi-c-abi --lib        (NPB and memory tables: libmpi.so)
# (CARGO_TARGET_DIR is honoured), mpicc.openmpi for the Open MPI column and NPB, gfortran
# not needed. PM_BENCH_MTU sets the veth MTU (default 1500). The namespaces (tsgpm-a/-b, bridge tsgpmbr, 10.77.251.0/24; PM_BENCH_NS and
# PM_BENCH_NET change the name and the third byte) are removed at exit.
# The machine is shared: every table states the load average (`uptime`) while it ran.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
top="$(dirname "$here")"
reps="${R:-3}"
parts="pnm"
while [ $# -gt 0 ]; do
    case "$1" in
        -r) shift; reps="${1:?-r needs a count}" ;;
        -p) parts="p" ;;
        -n) parts="n" ;;
        -m) parts="m" ;;
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
have_ompi=0
command -v mpicc.openmpi >/dev/null && command -v mpirun.openmpi >/dev/null && have_ompi=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# PM_BENCH_NS / PM_BENCH_NET name the namespaces and the /24, so that two runs can coexist.
ns="${PM_BENCH_NS:-tsgpm}" net="10.77.${PM_BENCH_NET:-251}"
out="$(mktemp -d "${TMPDIR:-/tmp}/tsunagi-pm-bench.XXXXXX")"
cleanup() {
    ip netns del $ns-a 2>/dev/null || true
    ip netns del $ns-b 2>/dev/null || true
    # A process left in a namespace keeps it (and our veth ends) alive: remove them too.
    ip link del ${ns}va 2>/dev/null || true
    ip link del ${ns}vb 2>/dev/null || true
    ip link del ${ns}br 2>/dev/null || true
    rm -rf "$out"
}
trap cleanup EXIT
ip link add ${ns}br type bridge
ip addr add $net.1/24 dev ${ns}br
ip link set ${ns}br up
i=2
for h in a b; do
    ip netns add "$ns-$h"
    ip link add "${ns}v$h" type veth peer name eth0 netns "$ns-$h"
    ip link set "${ns}v$h" master ${ns}br up
    ip -n "$ns-$h" addr add "$net.$i/24" dev eth0
    ip -n "$ns-$h" link set eth0 mtu "${PM_BENCH_MTU:-1500}" up
    ip link set "${ns}v$h" mtu "${PM_BENCH_MTU:-1500}"
    ip -n "$ns-$h" link set lo up
    i=$((i + 1))
done

load() { cut -d' ' -f1-3 /proc/loadavg; }
export PM_BASE_TARGET="${PM_BASE_TARGET:-}"

# Our mpirun across the two hosts, K ranks each; the rest of the arguments follow.
tsunagi() {
    local k="$1"; shift
    "$target/mpirun" --host "$ns-a:$k,$ns-b:$k" --launch-agent 'ip netns exec {host}' \
        --launch-addr $net.1 "$@"
}
# Open MPI's TCP BTL across the two hosts, one rank each.
openmpi() {
    PMIX_MCA_ptl_tcp_if_include=${ns}br PMIX_MCA_ptl_tcp_remote_connections=1 \
        mpirun.openmpi --allow-run-as-root --mca pml ob1 --mca btl tcp,self \
        --mca btl_tcp_if_include eth0 \
        -n 1 ip netns exec $ns-a "$@" : -n 1 ip netns exec $ns-b "$@"
}

# Tsunagi's C interface (release libmpi.so) in a private prefix, for C programs.
cprefix=""
c_interface() {
    [ -n "$cprefix" ] && return 0
    [ -f "$target/libmpi.so" ] || { echo "pm.sh: $target/libmpi.so missing (see -h)" >&2; return 1; }
    cprefix="$out/prefix"
    TSUNAGI_FC=/nonexistent "$top/c-abi/scripts/install-c" "$cprefix" "$target/libmpi.so" \
        > "$out/install-c.log" 2>&1 ||
        { echo "pm.sh: install-c failed:" >&2; tail -5 "$out/install-c.log" >&2; return 1; }
}

# ---------------------------------------------------------------------------------------
# 1. Ping-pong.
if [[ "$parts" == *p* ]]; then
    default="tcp pm pm-nordma pm-piece8k pm-nocsum pm-pkt32k pm-loss1 pm-loss5"
    [ "$have_ompi" = 1 ] && default="$default openmpi"
    read -r -a names <<< "${NAMES:-$default}"
    if [[ " ${names[*]} " == *" openmpi "* ]]; then
        mpicc.openmpi -O2 -o "$out/p2p.openmpi" "$top/npb-tests/bench/p2p.c"
    fi
    run_one() {
        local extra=()
        case "$1" in
            openmpi) openmpi "$out/p2p.openmpi"; return ;;
            tcp) extra=(--internode tcp) ;;
            pm) extra=(--internode pm) ;;
            pm-nordma) extra=(--internode pm -x TSUNAGI_PM_RDMA=0) ;;
            pm-piece8k) extra=(--internode pm -x TSUNAGI_PM_RDMA_PIECE=8192) ;;
            pm-nocsum) extra=(--internode pm -x TSUNAGI_PM_CHECKSUM=0) ;;
            pm-pkt32k) extra=(--internode pm -x TSUNAGI_PM_PACKET=32768) ;;
            pm-pkt60k) extra=(--internode pm -x TSUNAGI_PM_PACKET=60000) ;;
            pm-loss1) extra=(--internode pm -x TSUNAGI_PM_DROP=0.01) ;;
            pm-loss5) extra=(--internode pm -x TSUNAGI_PM_DROP=0.05) ;;
            pm-mtu) extra=(--internode pm -x TSUNAGI_PM_MTU=65536) ;;
            pm-base)
                [ -x "${PM_BASE_TARGET:-}/mpirun" ] || { echo "pm.sh: pm-base needs PM_BASE_TARGET" >&2; return 2; }
                target="$PM_BASE_TARGET" tsunagi 1 --internode pm "$PM_BASE_TARGET/tsunagi-pingpong"
                return ;;
            *) echo "pm.sh: unknown column $1" >&2; return 2 ;;
        esac
        tsunagi 1 "${extra[@]}" "$target/tsunagi-pingpong"
    }
    loads=()
    for r in $(seq "$reps"); do
        loads+=("$(load)")
        for n in "${names[@]}"; do
            timeout 600 bash -c "$(declare -f run_one tsunagi openmpi); target=$target out=$out ns=$ns net=$net run_one $n" \
                > "$out/$n.$r" 2> "$out/$n.$r.err" ||
                { echo "pm.sh: $n failed:" >&2; tail -5 "$out/$n.$r.err" >&2; exit 1; }
        done
    done
    loads+=("$(load)")
    echo "## Ping-pong, 2 hosts x 1 rank, medians of $reps; load average at each round: ${loads[*]/%/;}"
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
ratios = [("pm/tcp", "pm", "tcp")] + ([("pm/ompi", "pm", "openmpi")] if "openmpi" in names else []) \
    + ([("base/tcp", "pm-base", "tcp"), ("pm/base", "pm", "pm-base")] if "pm-base" in names else [])
print("| metric | bytes | " + " | ".join(names) + " | " + " | ".join(r[0] for r in ratios) + " |")
print("|---|---:|" + "---:|" * (len(names) + len(ratios)))
for (kind, size) in sorted(data, key=lambda k: (k[0] != "lat", k[1])):
    row = data[(kind, size)]
    med = {n: statistics.median(row[n]) for n in names if n in row}
    cells = " | ".join(f"{med[n]:.2f}" if n in med else "-" for n in names)
    rs = " | ".join(f"{med[a] / med[b]:.2f}" if med.get(a) and med.get(b) else "-" for _, a, b in ratios)
    print(f"| {kind} {'µs' if kind == 'lat' else 'MB/s'} | {size} | {cells} | {rs} |")
# Message rate: the 8-byte streaming bandwidth in messages (MB/s / 8 B = million msg/s).
if ("bw", 8) in data:
    row = data[("bw", 8)]
    med = {n: statistics.median(row[n]) / 8 for n in names if n in row}
    cells = " | ".join(f"{med[n]:.4f}" if n in med else "-" for n in names)
    rs = " | ".join(f"{med[a] / med[b]:.2f}" if med.get(a) and med.get(b) else "-" for _, a, b in ratios)
    print(f"| rate Mmsg/s | 8 | {cells} | {rs} |")
PY
fi

# ---------------------------------------------------------------------------------------
# 2. NPB CG and MG.
if [[ "$parts" == *n* ]] && c_interface; then
    class="${NPB_CLASS:-A}"
    mkdir -p "$out/npb-t" "$out/npb-o"
    make -s -C "$top/npb-tests" MPICC="$cprefix/bin/mpicc" BUILD="$out/npb-t" KERNELS="cg mg" \
        > "$out/npb-t.log" 2>&1 || { echo "pm.sh: NPB build failed" >&2; tail "$out/npb-t.log" >&2; exit 1; }
    cols=(tcp pm)
    if [ "$have_ompi" = 1 ]; then
        make -s -C "$top/npb-tests" MPICC=mpicc.openmpi BUILD="$out/npb-o" KERNELS="cg mg" \
            > "$out/npb-o.log" 2>&1 && cols+=(openmpi)
    fi
    l0="$(load)"
    for r in $(seq "$reps"); do
        for kern in cg mg; do
            for c in "${cols[@]}"; do
                log="$out/npb.$kern.$c.$r"
                case "$c" in
                    openmpi) timeout 900 bash -c "$(declare -f openmpi); ns=$ns openmpi $out/npb-o/$kern $class" > "$log" 2>&1 || true ;;
                    *) timeout 900 bash -c "$(declare -f tsunagi); target=$target ns=$ns net=$net tsunagi 1 --internode $c $out/npb-t/$kern $class" > "$log" 2>&1 || true ;;
                esac
            done
        done
    done
    echo
    echo "## NPB class $class, 2 hosts x 1 rank, seconds (median of $reps; verification); load average: $l0 -> $(load)"
    echo "| kernel |$(printf ' %s |' "${cols[@]}")"
    echo "|---|$(printf -- '---:|%.0s' "${cols[@]}")"
    for kern in cg mg; do
        row="| $kern |"
        for c in "${cols[@]}"; do
            cell=$(for r in $(seq "$reps"); do
                       awk '/Time in seconds/ {t=$NF} /Verification/ {v=$NF} END {if (t != "") print t, (v == "SUCCESSFUL" ? "ok" : "FAILED")}' "$out/npb.$kern.$c.$r"
                   done | sort -n | awk '{a[NR]=$1; v = v ($2 == "ok" ? "" : " FAILED")} END {if (NR) printf "%.2f%s", a[int((NR+1)/2)], (v == "" ? "" : v); else printf "failed"}')
            row="$row $cell |"
        done
        echo "$row"
    done
fi

# ---------------------------------------------------------------------------------------
# 3. Memory per rank as PM peers grow: rings (one per sender) against the shared queue.
if [[ "$parts" == *m* ]] && c_interface; then
    cat > "$out/mem.c" <<'C'
/* Every rank exchanges a message with every other (so every PM link carries traffic),
   then prints its peak RSS. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(int argc, char **argv) {
    int me, n;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    int *s = calloc(n * 1024, sizeof(int)), *r = calloc(n * 1024, sizeof(int));
    for (int i = 0; i < 20; i++)
        MPI_Alltoall(s, 1024, MPI_INT, r, 1024, MPI_INT, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    char line[256]; long hwm = 0;
    FILE *f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0) hwm = atol(line + 6);
    if (f) fclose(f);
    printf("rss %d %ld\n", me, hwm);
    MPI_Finalize();
    return 0;
}
C
    "$cprefix/bin/mpicc" -O2 -o "$out/mem" "$out/mem.c"
    l0="$(load)"
    echo
    echo "## Peak RSS per rank (KiB, median over ranks and $reps runs), 2 hosts x K ranks: K PM peers each; load average: $l0"
    echo "| PM peers | rings (TSUNAGI_PM_RECEIVE=rings, 1 MiB each) | shared receive queue (srq) | ring memory registered | srq memory registered |"
    echo "|---:|---:|---:|---:|---:|"
    for k in 2 4 8; do
        row="| $k |"
        for mode in rings srq; do
            for r in $(seq "$reps"); do
                tsunagi "$k" --internode pm -x "TSUNAGI_PM_RECEIVE=$mode" "$out/mem" \
                    > "$out/mem.$k.$mode.$r" 2> "$out/mem.$k.$mode.$r.err" || true
            done
            med=$(cat "$out"/mem."$k"."$mode".* 2>/dev/null | awk '$1 == "rss" {print $3}' | sort -n |
                  awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]; else print "failed"}')
            row="$row $med |"
        done
        # Registered receive memory (the NIC's own): k rings of 1 MiB plus the control words,
        # or one pool of 256 x 8 KiB whatever the number of peers (plus 8 bytes per rank).
        row="$row $k MiB | 2 MiB |"
        echo "$row"
    done
fi
