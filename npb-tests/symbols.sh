#!/usr/bin/env bash
# List, per built program, the MPI functions it needs that a library lacks:
#   npb-tests/symbols.sh BUILD_DIR LIBRARY
# e.g. npb-tests/symbols.sh npb-tests/build-mpicc.mpich /path/to/tsunagi/lib/libmpich.so.12
set -u
[ $# -eq 2 ] || { echo "usage: $0 BUILD_DIR LIBRARY" >&2; exit 2; }
have=$(mktemp); trap 'rm -f "$have"' EXIT
nm -D --defined-only "$2" | awk '{print $NF}' | sort -u >"$have"
missing_any=0
for b in ep is cg mg ft himeno; do
    [ -x "$1/$b" ] || continue
    miss=$(nm -u "$1/$b" | grep -o 'P\{0,1\}MPI_[A-Za-z0-9_]*' | sort -u | comm -23 - "$have" | tr '\n' ' ')
    printf '%-7s %s\n' "$b" "${miss:-(complete)}"
    [ -n "$miss" ] && missing_any=1
done
exit $missing_any
