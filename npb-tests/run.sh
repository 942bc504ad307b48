#!/usr/bin/env bash
# Build the NPB kernels and Himeno with one MPI compiler wrapper (and the
# Fortran kernels with its Fortran wrapper, when there is one) and run them
# through one launcher; fail (exit 1) unless every run verifies.
#
#   npb-tests/run.sh MPICC LAUNCHER [LAUNCHER ARGS...]
#
# Examples:
#   npb-tests/run.sh mpicc.mpich mpiexec.hydra
#   npb-tests/run.sh mpicc.openmpi mpirun.openmpi --oversubscribe
#   LD_LIBRARY_PATH=/path/to/tsunagi/lib npb-tests/run.sh mpicc.mpich target/release/mpirun
#
# Environment:
#   CLASSES       NPB classes to run (default "S")
#   NPROCS        process counts (default "1 2 4")
#   KERNELS       subset of "ep is cg mg ft" (default all five)
#   MPIFC         Fortran wrapper for the Fortran kernels; default: MPICC with
#                 "mpicc" replaced by "mpifort" in its file name (/x/bin/mpicc ->
#                 /x/bin/mpifort, mpicc.mpich -> mpifort.mpich). When it does
#                 not exist they are skipped with a message; "" skips them.
#   REQUIRE_FORTRAN=1  fail instead of skipping when MPIFC does not exist
#   FKERNELS      subset of "cg-f mg-f", the Fortran kernels (default both)
#   HIMENO_SIZE   Himeno size (default XS); HIMENO_ITERS iterations (default 100)
#   HIMENO_EXPECT expected exact Gosa; defaults to the value recorded for XS/100
#                 (set to "" to only require agreement across process counts)
#   BUILD         build directory (default build-<basename of MPICC>)
#   TIMEOUT       seconds allowed per run (default 600)
#   LOGDIR        where run logs go (default $BUILD/logs)
set -u
here="$(cd "$(dirname "$0")" && pwd)"
if [ $# -lt 2 ]; then
    sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
MPICC="$1"; shift
LAUNCH=("$@")
CLASSES="${CLASSES:-S}"
NPROCS="${NPROCS:-1 2 4}"
KERNELS="${KERNELS:-ep is cg mg ft}"
FKERNELS="${FKERNELS:-cg-f mg-f}"
if [ -z "${MPIFC+x}" ]; then
    mpicc_name="$(basename "$MPICC")"
    case "$mpicc_name" in
        mpicc*) fname="mpifort${mpicc_name#mpicc}" ;;
        *) fname="mpifort" ;;
    esac
    if [ "$mpicc_name" = "$MPICC" ]; then MPIFC="$fname"; else MPIFC="$(dirname "$MPICC")/$fname"; fi
fi
HIMENO_SIZE="${HIMENO_SIZE:-XS}"
HIMENO_ITERS="${HIMENO_ITERS:-100}"
if [ -z "${HIMENO_EXPECT+x}" ]; then
    if [ "$HIMENO_SIZE" = XS ] && [ "$HIMENO_ITERS" = 100 ]; then
        HIMENO_EXPECT="1.35865048052998173e-04"
    else
        HIMENO_EXPECT=""
    fi
fi
BUILD="${BUILD:-$here/build-$(basename "$MPICC")}"
TIMEOUT="${TIMEOUT:-600}"
LOGDIR="${LOGDIR:-$BUILD/logs}"

make -C "$here" -j1 MPICC="$MPICC" BUILD="$BUILD" >/dev/null || { echo "build with $MPICC failed"; exit 1; }
if [ -z "$MPIFC" ] || [ -z "$FKERNELS" ]; then
    FKERNELS=""
elif command -v "$MPIFC" >/dev/null 2>&1; then
    make -C "$here" -j1 fortran MPIFC="$MPIFC" BUILD="$BUILD" FKERNELS="$FKERNELS" >/dev/null ||
        { echo "build of the Fortran kernels with $MPIFC failed"; exit 1; }
    KERNELS="$KERNELS $FKERNELS"
else
    if [ "${REQUIRE_FORTRAN:-0}" = 1 ]; then
        echo "no Fortran wrapper $MPIFC (REQUIRE_FORTRAN=1)"; exit 1
    fi
    echo "no Fortran wrapper $MPIFC: the Fortran kernels ($FKERNELS) are skipped"
    FKERNELS=""
fi
mkdir -p "$LOGDIR"

fail=0
summary=()
run() { # name nprocs log cmd...
    local name="$1" n="$2" log="$3"; shift 3
    timeout "$TIMEOUT" "${LAUNCH[@]}" -n "$n" "$@" >"$log" 2>&1
    echo $?
}

for cls in $CLASSES; do
    for k in $KERNELS; do
        for n in $NPROCS; do
            log="$LOGDIR/$k.$cls.$n.log"
            rc=$(run "$k" "$n" "$log" "$BUILD/$k" "$cls")
            t=$(sed -n 's/^ *Time in seconds *= *//p' "$log" | head -1)
            m=$(sed -n 's/^ *Mop\/s total *= *//p' "$log" | head -1)
            if [ "$rc" = 0 ] && grep -q "Verification = SUCCESSFUL" "$log"; then
                line=$(printf "%-4s %s np=%-2s SUCCESSFUL   time %8ss  Mop/s %10s" "$k" "$cls" "$n" "$t" "$m")
            else
                line=$(printf "%-4s %s np=%-2s FAILED (rc=%s) see %s" "$k" "$cls" "$n" "$rc" "$log")
                fail=1
            fi
            echo "$line"; summary+=("$line")
        done
    done
done

ref=""
for n in $NPROCS; do
    log="$LOGDIR/himeno.$HIMENO_SIZE.$n.log"
    rc=$(run himeno "$n" "$log" "$BUILD/himeno" "$HIMENO_SIZE" "$HIMENO_ITERS")
    g=$(sed -n 's/^ *Gosa (exact) *: *//p' "$log" | head -1)
    t=$(sed -n 's/^ *Time in seconds: *//p' "$log" | head -1)
    mf=$(sed -n 's/^ *MFLOPS measured: *//p' "$log" | head -1)
    status=OK
    if [ "$rc" != 0 ] || [ -z "$g" ]; then status="FAILED (rc=$rc) see $log"; fail=1
    else
        [ -z "$ref" ] && ref="$g"
        if [ "$g" != "$ref" ]; then status="MISMATCH (np=${NPROCS%% *} gave $ref)"; fail=1; fi
        if [ -n "$HIMENO_EXPECT" ] && [ "$g" != "$HIMENO_EXPECT" ]; then
            status="MISMATCH (expected $HIMENO_EXPECT)"; fail=1
        fi
    fi
    line=$(printf "himeno %s np=%-2s gosa %s  time %ss  MFLOPS %s  %s" "$HIMENO_SIZE" "$n" "$g" "$t" "$mf" "$status")
    echo "$line"; summary+=("$line")
done

compilers="$MPICC${FKERNELS:+, $MPIFC}"
if [ "$fail" = 0 ]; then echo "ALL PASSED ($compilers, ${LAUNCH[*]})"; else echo "SOME RUNS FAILED ($compilers, ${LAUNCH[*]})"; fi
exit "$fail"
