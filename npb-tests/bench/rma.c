/*
 * rma.c — one-sided micro-benchmarks between ranks 0 and 1 (origin 0, target 1), for
 * comparing MPI implementations on one machine. Uses only <mpi.h>.
 *
 *   rma [MAX_BYTES [TARGET_SEC]]      (defaults 1048576 and 0.2)
 *
 * Output, one line per point (rank 0 prints):
 *   <op>_lat_<sync> <bytes> <usec>   one operation and its synchronisation, per iteration
 *   <op>_bw_<sync>  <bytes> <MB/s>   a batch of 16 operations per synchronisation
 * with op = put, get, acc (MPI_Accumulate of doubles, MPI_SUM) and sync = fence
 * (MPI_Win_fence on both ranks) or lock (MPI_Win_lock exclusive / MPI_Win_unlock by the
 * origin alone; the target waits in MPI_Barrier, which also drives its progress).
 *
 * Iteration counts: a warm-up batch, a calibration batch sized to take ~TARGET_SEC/10,
 * then rank 0 broadcasts a count sized so the measured batch takes ~TARGET_SEC.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ITERS 200000L
#define BATCH 16

static int rank;
static MPI_Win win;
static char *origin, *base;

enum op { PUT, GET, ACC };
enum sync { FENCE, LOCK };
static const char *op_names[] = {"put", "get", "acc"};
static const char *sync_names[] = {"fence", "lock"};

static void issue(enum op op, long size, long off)
{
    if (op == PUT)
        MPI_Put(origin + off, (int)size, MPI_BYTE, 1, off, (int)size, MPI_BYTE, win);
    else if (op == GET)
        MPI_Get(origin + off, (int)size, MPI_BYTE, 1, off, (int)size, MPI_BYTE, win);
    else
        MPI_Accumulate(origin + off, (int)(size / 8), MPI_DOUBLE, 1, off, (int)(size / 8),
                       MPI_DOUBLE, MPI_SUM, win);
}

/* `iters` iterations of `batch` operations of `size` bytes each. */
static double run(enum op op, enum sync sync, long size, int batch, long iters)
{
    if (sync == FENCE) MPI_Win_fence(MPI_MODE_NOPRECEDE, win);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (long i = 0; i < iters; i++) {
        if (sync == FENCE) {
            if (rank == 0)
                for (int b = 0; b < batch; b++) issue(op, size, (long)b * size);
            MPI_Win_fence(0, win);
        } else if (rank == 0) {
            MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 1, 0, win);
            for (int b = 0; b < batch; b++) issue(op, size, (long)b * size);
            MPI_Win_unlock(1, win);
        }
    }
    double t = MPI_Wtime() - t0;
    if (sync == FENCE) MPI_Win_fence(MPI_MODE_NOSUCCEED, win);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Bcast(&t, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    return t;
}

static double measure(enum op op, enum sync sync, long size, int batch, double target)
{
    run(op, sync, size, batch, 3);
    long n = 10;
    double t = run(op, sync, size, batch, n);
    long iters = (long)(target / (t / n > 1e-9 ? t / n : 1e-9));
    if (iters < 3) iters = 3;
    if (iters > MAX_ITERS) iters = MAX_ITERS;
    MPI_Bcast(&iters, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    return run(op, sync, size, batch, iters) / (double)iters;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long max = argc > 1 ? atol(argv[1]) : 1048576;
    double target = argc > 2 ? atof(argv[2]) : 0.2;
    if (size < 2) {
        if (rank == 0) fprintf(stderr, "rma: needs 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    long bytes = max * BATCH;
    origin = malloc(bytes);
    memset(origin, 1, bytes);
    MPI_Win_allocate(bytes, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    memset(base, 0, bytes);
    for (int sync = FENCE; sync <= LOCK; sync++)
        for (int op = PUT; op <= ACC; op++) {
            double t = measure(op, sync, 8, 1, target);
            if (rank == 0) printf("%s_lat_%s 8 %.2f\n", op_names[op], sync_names[sync], t * 1e6);
        }
    for (int sync = FENCE; sync <= LOCK; sync++)
        for (int op = PUT; op <= GET; op++)
            for (long s = 64; s <= max; s *= 16) {
                double t = measure(op, sync, s, BATCH, target);
                if (rank == 0)
                    printf("%s_bw_%s %ld %.1f\n", op_names[op], sync_names[sync], s,
                           (double)s * BATCH / t / 1e6);
            }
    MPI_Win_free(&win);
    free(origin);
    MPI_Finalize();
    return 0;
}
