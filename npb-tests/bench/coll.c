/*
 * coll.c — latency of every blocking MPI collective over message sizes, and how much of a
 * non-blocking collective's time hides behind computation. Built with each MPI's mpicc by
 * tsunagi-bench; uses only <mpi.h>.
 *
 *   coll [MAX_BYTES [TARGET_SEC]]     (defaults 1048576 and 0.05)
 *
 * Output (rank 0), one line per point:
 *   <collective> <bytes> <usec>         the slowest rank's mean time per call
 *   overlap-<collective> <bytes> <%>    share of the collective's time hidden by computation
 *
 * <bytes> is the message of one rank: the vector for bcast and the reductions (doubles,
 * MPI_SUM), each rank's contribution for the gathers and scatters, each block for the
 * all-to-alls and reduce-scatters (the v and w variants use the same uniform counts).
 * Sizes 8, 64, 512, ... (x8) up to MAX_BYTES; barrier is reported once with 0 bytes.
 *
 * Iterations: 3 warm-up calls, a calibration batch, then a count sized so the timed batch
 * takes about TARGET_SEC; the count is agreed by MPI_Allreduce(MAX) so all ranks run the
 * same number of calls. Time = MPI_Reduce(MAX) of each rank's mean.
 *
 * Overlap (iallreduce, ialltoall, ibcast at 64 KiB, or MAX_BYTES if smaller): t_pure is
 * start + wait alone; t_comp a busy computation of length t_pure in 10 slices with an
 * MPI_Test between slices (what an application that polls now and then does); t_both the
 * collective started, the computation, then wait. overlap = 100 * (1 - (t_both - t_comp) /
 * t_pure), clamped to 0..100: 100 means the collective cost nothing on top of the compute.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    BARRIER, BCAST, GATHER, GATHERV, SCATTER, SCATTERV, ALLGATHER, ALLGATHERV, ALLTOALL,
    ALLTOALLV, ALLTOALLW, REDUCE, ALLREDUCE, REDUCE_SCATTER, REDUCE_SCATTER_BLOCK, SCAN,
    EXSCAN, NCOLL
};
static const char *names[NCOLL] = {
    "barrier", "bcast", "gather", "gatherv", "scatter", "scatterv", "allgather", "allgatherv",
    "alltoall", "alltoallv", "alltoallw", "reduce", "allreduce", "reduce_scatter",
    "reduce_scatter_block", "scan", "exscan"};

static int me, n;
static char *sbuf, *rbuf;
static int *counts, *displs, *bcounts, *bdispls;
static MPI_Datatype *types;

static void one_call(int c, size_t bytes)
{
    int b = (int)bytes, d = (int)(bytes / 8);
    MPI_Comm w = MPI_COMM_WORLD;
    for (int i = 0; i < n; i++) {
        counts[i] = d;
        displs[i] = i * d;
        bcounts[i] = b;
        bdispls[i] = i * b;
    }
    switch (c) {
    case BARRIER: MPI_Barrier(w); break;
    case BCAST: MPI_Bcast(sbuf, b, MPI_BYTE, 0, w); break;
    case GATHER: MPI_Gather(sbuf, b, MPI_BYTE, rbuf, b, MPI_BYTE, 0, w); break;
    case GATHERV: MPI_Gatherv(sbuf, b, MPI_BYTE, rbuf, bcounts, bdispls, MPI_BYTE, 0, w); break;
    case SCATTER: MPI_Scatter(sbuf, b, MPI_BYTE, rbuf, b, MPI_BYTE, 0, w); break;
    case SCATTERV: MPI_Scatterv(sbuf, bcounts, bdispls, MPI_BYTE, rbuf, b, MPI_BYTE, 0, w); break;
    case ALLGATHER: MPI_Allgather(sbuf, b, MPI_BYTE, rbuf, b, MPI_BYTE, w); break;
    case ALLGATHERV:
        MPI_Allgatherv(sbuf, b, MPI_BYTE, rbuf, bcounts, bdispls, MPI_BYTE, w);
        break;
    case ALLTOALL: MPI_Alltoall(sbuf, b, MPI_BYTE, rbuf, b, MPI_BYTE, w); break;
    case ALLTOALLV:
        MPI_Alltoallv(sbuf, bcounts, bdispls, MPI_BYTE, rbuf, bcounts, bdispls, MPI_BYTE, w);
        break;
    case ALLTOALLW:
        MPI_Alltoallw(sbuf, bcounts, bdispls, types, rbuf, bcounts, bdispls, types, w);
        break;
    case REDUCE: MPI_Reduce(sbuf, rbuf, d, MPI_DOUBLE, MPI_SUM, 0, w); break;
    case ALLREDUCE: MPI_Allreduce(sbuf, rbuf, d, MPI_DOUBLE, MPI_SUM, w); break;
    case REDUCE_SCATTER: MPI_Reduce_scatter(sbuf, rbuf, counts, MPI_DOUBLE, MPI_SUM, w); break;
    case REDUCE_SCATTER_BLOCK:
        MPI_Reduce_scatter_block(sbuf, rbuf, d, MPI_DOUBLE, MPI_SUM, w);
        break;
    case SCAN: MPI_Scan(sbuf, rbuf, d, MPI_DOUBLE, MPI_SUM, w); break;
    case EXSCAN: MPI_Exscan(sbuf, rbuf, d, MPI_DOUBLE, MPI_SUM, w); break;
    }
}

/* The agreed number of calls that fills `target` seconds, given `done` calls took `t`. */
static long agree_iters(double t, long done, double target)
{
    double per = t / (double)done;
    MPI_Allreduce(MPI_IN_PLACE, &per, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    long iters = per > 0 ? (long)(target / per) : 100000;
    return iters < 3 ? 3 : iters > 100000 ? 100000 : iters;
}

static double time_coll(int c, size_t bytes, double target)
{
    for (int i = 0; i < 3; i++)
        one_call(c, bytes);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < 5; i++)
        one_call(c, bytes);
    long iters = agree_iters(MPI_Wtime() - t0, 5, target);
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    for (long i = 0; i < iters; i++)
        one_call(c, bytes);
    double mean = (MPI_Wtime() - t0) / (double)iters, worst = 0;
    MPI_Reduce(&mean, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    return worst * 1e6;
}

enum { I_ALLREDUCE, I_ALLTOALL, I_BCAST, NICOLL };
static const char *inames[NICOLL] = {"iallreduce", "ialltoall", "ibcast"};

static void istart(int c, size_t bytes, MPI_Request *req)
{
    int b = (int)bytes, d = (int)(bytes / 8);
    switch (c) {
    case I_ALLREDUCE: MPI_Iallreduce(sbuf, rbuf, d, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, req); break;
    case I_ALLTOALL: MPI_Ialltoall(sbuf, b, MPI_BYTE, rbuf, b, MPI_BYTE, MPI_COMM_WORLD, req); break;
    case I_BCAST: MPI_Ibcast(sbuf, b, MPI_BYTE, 0, MPI_COMM_WORLD, req); break;
    }
}

static volatile double sink;

/* Busy computation for `sec` seconds in 10 slices, testing `req` (if any) between slices. */
static void compute(double sec, MPI_Request *req)
{
    double slice = sec / 10, x = 1.0;
    for (int s = 0; s < 10; s++) {
        double t0 = MPI_Wtime();
        while (MPI_Wtime() - t0 < slice)
            for (int k = 0; k < 200; k++)
                x = x * 1.0000001 + 1e-9;
        if (req) {
            int done;
            MPI_Test(req, &done, MPI_STATUS_IGNORE);
        }
    }
    sink = x;
}

/* Mean seconds per repetition of `what` (0 pure, 1 compute only, 2 both), slowest rank. */
static double time_overlap(int c, size_t bytes, int what, double comp, long iters)
{
    MPI_Request req = MPI_REQUEST_NULL;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (long i = 0; i < iters; i++) {
        if (what != 1)
            istart(c, bytes, &req);
        if (what != 0)
            compute(comp, what == 2 ? &req : NULL);
        if (what != 1)
            MPI_Wait(&req, MPI_STATUS_IGNORE);
    }
    double mean = (MPI_Wtime() - t0) / (double)iters;
    MPI_Allreduce(MPI_IN_PLACE, &mean, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return mean;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    size_t max = argc > 1 ? strtoul(argv[1], NULL, 10) : 1048576;
    double target = argc > 2 ? atof(argv[2]) : 0.05;
    if (max < 8 || target <= 0) {
        if (me == 0)
            fprintf(stderr, "coll: MAX_BYTES must be >= 8 and TARGET_SEC > 0\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    sbuf = malloc(max * (size_t)n);
    rbuf = malloc(max * (size_t)n);
    counts = malloc(sizeof(int) * (size_t)n);
    displs = malloc(sizeof(int) * (size_t)n);
    bcounts = malloc(sizeof(int) * (size_t)n);
    bdispls = malloc(sizeof(int) * (size_t)n);
    types = malloc(sizeof(MPI_Datatype) * (size_t)n);
    if (!sbuf || !rbuf || !counts || !displs || !bcounts || !bdispls || !types) {
        fprintf(stderr, "coll: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    /* Doubles of value 1.0 (the reductions add them) and touched pages in both buffers. */
    for (size_t i = 0; i < max * (size_t)n / 8; i++)
        ((double *)sbuf)[i] = 1.0;
    memset(rbuf, 0, max * (size_t)n);
    for (int i = 0; i < n; i++)
        types[i] = MPI_BYTE;

    double us = time_coll(BARRIER, 0, target);
    if (me == 0) {
        printf("barrier 0 %.3f\n", us);
        fflush(stdout);
    }
    for (size_t s = 8; s <= max; s *= 8) {
        for (int c = BCAST; c < NCOLL; c++) {
            us = time_coll(c, s, target);
            if (me == 0) {
                printf("%s %zu %.3f\n", names[c], s, us);
                fflush(stdout);
            }
        }
    }

    size_t ob = max < 65536 ? max : 65536;
    for (int c = 0; c < NICOLL; c++) {
        /* Calibrate: the pure collective's time sets both the compute length and the count. */
        double per = time_overlap(c, ob, 0, 0, 3);
        long iters = per > 0 ? (long)(target / 2 / per) : 1000;
        iters = iters < 3 ? 3 : iters > 10000 ? 10000 : iters;
        MPI_Bcast(&iters, 1, MPI_LONG, 0, MPI_COMM_WORLD);
        double pure = time_overlap(c, ob, 0, 0, iters);
        double comp_len = pure;
        MPI_Bcast(&comp_len, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        double comp = time_overlap(c, ob, 1, comp_len, iters);
        double both = time_overlap(c, ob, 2, comp_len, iters);
        double ov = pure > 0 ? 100.0 * (1.0 - (both - comp) / pure) : 0;
        ov = ov < 0 ? 0 : ov > 100 ? 100 : ov;
        if (me == 0) {
            printf("overlap-%s %zu %.1f\n", inames[c], ob, ov);
            fflush(stdout);
        }
    }

    free(sbuf);
    free(rbuf);
    free(counts);
    free(displs);
    free(bcounts);
    free(bdispls);
    free(types);
    MPI_Finalize();
    return 0;
}
