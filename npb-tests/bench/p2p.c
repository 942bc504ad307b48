/*
 * p2p.c — point-to-point micro-benchmarks between ranks 0 and 1, for comparing MPI
 * implementations on one machine (tsunagi-bench builds it with each MPI's mpicc; bench/tcp.sh
 * uses it across network namespaces). Uses only <mpi.h>.
 *
 *   p2p [MAX_BYTES [TARGET_SEC]]      (defaults 4194304 and 0.2)
 *
 * Output, one line per point (rank 0 prints):
 *   lat  <bytes> <usec>      half round-trip time of a blocking ping-pong
 *   bw   <bytes> <MB/s>      streaming bandwidth 0 -> 1, MB = 10^6 bytes
 *   bibw <bytes> <MB/s>      bidirectional bandwidth (both directions at once, summed)
 *   rate 8 <Mmsg/s>          8-byte message rate 0 -> 1 (same method as bw)
 *
 * Latency: rank 0 MPI_Send + MPI_Recv, rank 1 MPI_Recv + MPI_Send; time per iteration / 2.
 * Bandwidth: per iteration the sender posts a window of MPI_Isend, the receiver as many
 * MPI_Irecv into distinct buffers (overlapping pending receive buffers would be erroneous
 * MPI), both MPI_Waitall, then the receiver returns a 0-byte ack so the sender's clock
 * covers delivery. The window is 64 messages, 16 from 1 MiB up (bounding the buffers).
 * Bidirectional: both ranks post their receives and sends each iteration, then Waitall.
 *
 * Iteration counts: each point runs a fixed warm-up batch, then a calibration batch sized
 * from it to take ~TARGET_SEC/10 (the first batch includes one-off costs such as connection
 * set-up), and rank 0 broadcasts a count sized so the measured batch takes ~TARGET_SEC.
 * Small and large sizes are thus equally well sampled without a hand-tuned table.
 * Extra ranks (n > 2) only take part in the broadcasts and barriers.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIN_ITERS 3
#define MAX_ITERS 1000000L

static const long sizes[] = {0, 1, 8, 64, 512, 4096, 32768, 262144, 1048576, 4194304};
#define NSIZES (long)(sizeof sizes / sizeof sizes[0])

static int rank;

static int window_for(long size) { return size >= 1048576 ? 16 : 64; }

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

/* Real statuses rather than MPI_STATUSES_IGNORE: GCC's -Wstringop-overflow misreads that
 * sentinel pointer as a zero-sized array. The cost is nil next to the transfers. */
static MPI_Status statuses[128];
static MPI_Request reqs[128];

static void stream(char *sbuf, char *rbuf, long size, long iters)
{
    int win = window_for(size);
    for (long i = 0; i < iters; i++) {
        if (rank == 0) {
            for (int w = 0; w < win; w++)
                MPI_Isend(sbuf, (int)size, MPI_BYTE, 1, 2, MPI_COMM_WORLD, &reqs[w]);
            MPI_Waitall(win, reqs, statuses);
            MPI_Recv(NULL, 0, MPI_BYTE, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (rank == 1) {
            for (int w = 0; w < win; w++)
                MPI_Irecv(rbuf + (size_t)w * (size_t)size, (int)size, MPI_BYTE, 0, 2,
                          MPI_COMM_WORLD, &reqs[w]);
            MPI_Waitall(win, reqs, statuses);
            MPI_Send(NULL, 0, MPI_BYTE, 0, 3, MPI_COMM_WORLD);
        }
    }
}

static void bistream(char *sbuf, char *rbuf, long size, long iters)
{
    int win = window_for(size);
    if (rank > 1)
        return;
    int peer = 1 - rank;
    for (long i = 0; i < iters; i++) {
        for (int w = 0; w < win; w++)
            MPI_Irecv(rbuf + (size_t)w * (size_t)size, (int)size, MPI_BYTE, peer, 4,
                      MPI_COMM_WORLD, &reqs[w]);
        for (int w = 0; w < win; w++)
            MPI_Isend(sbuf, (int)size, MPI_BYTE, peer, 4, MPI_COMM_WORLD, &reqs[win + w]);
        MPI_Waitall(2 * win, reqs, statuses);
    }
}

/* Rank 0's choice of how many iterations fill `target` seconds, given `done` iterations
 * took `t` seconds; broadcast so that both partners run the same count. */
static long scale_iters(double t, long done, double target)
{
    long iters = MAX_ITERS;
    if (t > 0) {
        double want = target / (t / (double)done);
        iters = want < MIN_ITERS ? MIN_ITERS : want > MAX_ITERS ? MAX_ITERS : (long)want;
    }
    MPI_Bcast(&iters, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    return iters;
}

typedef void (*kernel_fn)(char *, char *, long, long);

static void k_pingpong(char *a, char *b, long size, long iters) { (void)b; pingpong(a, size, iters); }

/* Warm up, calibrate, then time `iters` iterations; returns seconds (meaningful on rank 0). */
static double measure(kernel_fn k, char *a, char *b, long size, long warm, double target,
                      long *iters_out)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    k(a, b, size, warm);
    long iters = scale_iters(MPI_Wtime() - t0, warm, target / 10);
    t0 = MPI_Wtime();
    k(a, b, size, iters);
    iters = scale_iters(MPI_Wtime() - t0, iters, target);
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    k(a, b, size, iters);
    double t = MPI_Wtime() - t0;
    *iters_out = iters;
    return t;
}

int main(int argc, char **argv)
{
    int nranks;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    long max = argc > 1 ? atol(argv[1]) : 4194304;
    double target = argc > 2 ? atof(argv[2]) : 0.2;
    if (nranks < 2 || max < 8 || target <= 0) {
        if (rank == 0)
            fprintf(stderr, "p2p: needs at least 2 ranks, MAX_BYTES >= 8 and TARGET_SEC > 0\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (max > sizes[NSIZES - 1])
        max = sizes[NSIZES - 1];

    /* The receive side needs a whole window of distinct buffers at every size. */
    size_t rlen = 0;
    for (long i = 0; i < NSIZES && sizes[i] <= max; i++) {
        size_t need = (size_t)sizes[i] * (size_t)window_for(sizes[i]);
        if (need > rlen)
            rlen = need;
    }
    char *sbuf = malloc((size_t)max);
    char *rbuf = malloc(rlen);
    if (!sbuf || !rbuf) {
        fprintf(stderr, "p2p: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    /* Touch every page so first-touch faults stay out of the timings. */
    memset(sbuf, 'a', (size_t)max);
    memset(rbuf, 'b', rlen);

    long iters;
    for (long i = 0; i < NSIZES && sizes[i] <= max; i++) {
        long sz = sizes[i];
        double t = measure(k_pingpong, sbuf, rbuf, sz, sz <= 65536 ? 200 : 10, target, &iters);
        if (rank == 0) {
            printf("lat %ld %.3f\n", sz, t / (double)iters / 2.0 * 1e6);
            fflush(stdout);
        }
    }
    /* Bandwidths: bytes moved per second; the bidirectional one counts both directions. */
    static const struct { const char *name; kernel_fn k; double directions; } rates[] = {
        {"bw", stream, 1.0}, {"bibw", bistream, 2.0}};
    for (int r = 0; r < 2; r++) {
        for (long i = 0; i < NSIZES && sizes[i] <= max; i++) {
            long sz = sizes[i];
            if (sz < 8)
                continue;
            double t = measure(rates[r].k, sbuf, rbuf, sz, sz <= 65536 ? 20 : 2, target, &iters);
            if (rank == 0) {
                printf("%s %ld %.2f\n", rates[r].name, sz,
                       rates[r].directions * (double)sz * window_for(sz) * (double)iters / t / 1e6);
                fflush(stdout);
            }
        }
    }
    {
        double t = measure(stream, sbuf, rbuf, 8, 20, target, &iters);
        if (rank == 0) {
            printf("rate 8 %.3f\n", (double)window_for(8) * (double)iters / t / 1e6);
            fflush(stdout);
        }
    }

    free(sbuf);
    free(rbuf);
    MPI_Finalize();
    return 0;
}
