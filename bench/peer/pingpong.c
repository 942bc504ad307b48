/*
 * pingpong.c — point-to-point latency and bandwidth between ranks 0 and 1, for comparing
 * Tsunagi against other MPI implementations (see ../peers.sh). Uses only <mpi.h>.
 *
 * Output, one line per point (rank 0 prints):
 *   lat <bytes> <usec>    half round-trip time of a blocking ping-pong
 *   bw  <bytes> <MB/s>    streaming bandwidth, MB = 10^6 bytes
 *
 * Latency: rank 0 MPI_Send + MPI_Recv, rank 1 MPI_Recv + MPI_Send; time per iteration / 2.
 * Bandwidth: per iteration rank 0 posts a window of 64 MPI_Isend, rank 1 64 MPI_Irecv
 * (into distinct buffers: overlapping pending receive buffers would be erroneous MPI),
 * both MPI_Waitall, then rank 1 returns a 0-byte ack so rank 0's clock covers delivery.
 *
 * Iteration counts: each point first runs a fixed warm-up batch, then a calibration batch
 * sized from it to take ~TARGET_SEC/10 (the first batch includes one-off costs such as
 * connection set-up and registration caches, so it alone under-estimates the rate); rank 0
 * times that and broadcasts an iteration count sized so the measured batch takes about
 * TARGET_SEC. This keeps small and large sizes equally well sampled without a hand-tuned
 * table.
 * Extra ranks (n > 2) only take part in the broadcasts.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW 64
#define TARGET_SEC 0.2
#define MIN_ITERS 5
#define MAX_ITERS 1000000L

static const long lat_sizes[] = {0, 8, 1024, 65536, 1048576, 4194304};
static const long bw_sizes[] = {8, 1024, 65536, 1048576};
#define NLAT (long)(sizeof lat_sizes / sizeof lat_sizes[0])
#define NBW (long)(sizeof bw_sizes / sizeof bw_sizes[0])

static int rank;

static void pingpong(char *buf, long size, long iters)
{
    for (long i = 0; i < iters; i++) {
        if (rank == 0) {
            MPI_Send(buf, (int)size, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
            MPI_Recv(buf, (int)size, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (rank == 1) {
            MPI_Recv(buf, (int)size, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, (int)size, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
        }
    }
}

static void stream(char *sbuf, char *rbuf, long size, long iters)
{
    MPI_Request req[WINDOW];
    /* Real statuses rather than MPI_STATUSES_IGNORE: GCC's -Wstringop-overflow misreads
     * that sentinel pointer as a zero-sized array. The cost is nil next to the transfers. */
    static MPI_Status st[WINDOW];
    for (long i = 0; i < iters; i++) {
        if (rank == 0) {
            for (int w = 0; w < WINDOW; w++)
                MPI_Isend(sbuf, (int)size, MPI_BYTE, 1, 2, MPI_COMM_WORLD, &req[w]);
            MPI_Waitall(WINDOW, req, st);
            MPI_Recv(NULL, 0, MPI_BYTE, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (rank == 1) {
            for (int w = 0; w < WINDOW; w++)
                MPI_Irecv(rbuf + (size_t)w * size, (int)size, MPI_BYTE, 0, 2, MPI_COMM_WORLD,
                          &req[w]);
            MPI_Waitall(WINDOW, req, st);
            MPI_Send(NULL, 0, MPI_BYTE, 0, 3, MPI_COMM_WORLD);
        }
    }
}

/* Rank 0's choice of how many iterations fill `target` seconds, given `warm` iterations
 * took `t` seconds; broadcast so that both partners run the same count. */
static long scale_iters(double t, long warm, double target)
{
    long iters = MAX_ITERS;
    if (t > 0) {
        double per = t / (double)warm;
        double want = target / per;
        iters = want < MIN_ITERS ? MIN_ITERS : want > MAX_ITERS ? MAX_ITERS : (long)want;
    }
    MPI_Bcast(&iters, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    return iters;
}

int main(int argc, char **argv)
{
    int size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 2) {
        if (rank == 0)
            fprintf(stderr, "pingpong: needs at least 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }

    long max_lat = lat_sizes[NLAT - 1];
    long max_bw = bw_sizes[NBW - 1];
    char *buf = malloc((size_t)max_lat);
    char *sbuf = malloc((size_t)max_bw);
    char *rbuf = malloc((size_t)max_bw * WINDOW);
    if (!buf || !sbuf || !rbuf) {
        fprintf(stderr, "pingpong: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    /* Touch every page so first-touch faults stay out of the timings. */
    memset(buf, 'a', (size_t)max_lat);
    memset(sbuf, 'b', (size_t)max_bw);
    memset(rbuf, 'c', (size_t)max_bw * WINDOW);

    for (long i = 0; i < NLAT; i++) {
        long sz = lat_sizes[i];
        long warm = sz <= 65536 ? 200 : 10;
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        pingpong(buf, sz, warm);
        long iters = scale_iters(MPI_Wtime() - t0, warm, TARGET_SEC / 10);
        t0 = MPI_Wtime();
        pingpong(buf, sz, iters);
        iters = scale_iters(MPI_Wtime() - t0, iters, TARGET_SEC);
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
        pingpong(buf, sz, iters);
        double t = MPI_Wtime() - t0;
        if (rank == 0) {
            printf("lat %ld %.3f\n", sz, t / (double)iters / 2.0 * 1e6);
            fflush(stdout);
        }
    }

    for (long i = 0; i < NBW; i++) {
        long sz = bw_sizes[i];
        long warm = sz <= 65536 ? 20 : 2;
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        stream(sbuf, rbuf, sz, warm);
        long iters = scale_iters(MPI_Wtime() - t0, warm, TARGET_SEC / 10);
        t0 = MPI_Wtime();
        stream(sbuf, rbuf, sz, iters);
        iters = scale_iters(MPI_Wtime() - t0, iters, TARGET_SEC);
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
        stream(sbuf, rbuf, sz, iters);
        double t = MPI_Wtime() - t0;
        if (rank == 0) {
            printf("bw %ld %.2f\n", sz, (double)sz * WINDOW * (double)iters / t / 1e6);
            fflush(stdout);
        }
    }

    free(buf);
    free(sbuf);
    free(rbuf);
    MPI_Finalize();
    return 0;
}
