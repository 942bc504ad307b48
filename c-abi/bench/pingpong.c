/* Ping-pong latency (and bandwidth) between ranks 0 and 1, for comparing MPI libraries with
 * one binary: build once with `mpicc.mpich`, run under MPICH and under Tsunagi
 * (LD_LIBRARY_PATH=<tsunagi>/lib). Same sizes, iteration counts and best-of-5 rounds as
 * mpi-core/examples/core_pingpong.rs, so the C path can be compared with the core API.
 * Prints `lat <bytes> <usec one-way>  bw <MB/s>`. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    int rank;
    long sizes[16] = {0, 8, 1024, 65536, 1 << 20, 4 << 20};
    int nsizes = 6;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc > 1) {
        nsizes = 0;
        for (int i = 1; i < argc && nsizes < 16; i++) sizes[nsizes++] = atol(argv[i]);
    }
    for (int s = 0; s < nsizes; s++) {
        long sz = sizes[s];
        char *buf = calloc(sz > 0 ? sz : 1, 1);
        long iters = 200000000 / (sz + 2000);
        if (iters < 20) iters = 20;
        if (iters > 100000) iters = 100000;
        double best = 1e30;
        for (int round = 0; round < 5; round++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            for (long i = 0; i < iters; i++) {
                if (rank == 0) {
                    MPI_Send(buf, (int)sz, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
                    MPI_Recv(buf, (int)sz, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else if (rank == 1) {
                    MPI_Recv(buf, (int)sz, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    MPI_Send(buf, (int)sz, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
                }
            }
            double t = (MPI_Wtime() - t0) / iters / 2;
            if (t < best) best = t;
        }
        if (rank == 0) printf("lat %ld %.3f  bw %.1f\n", sz, best * 1e6, sz / best / 1e6);
        free(buf);
    }
    MPI_Finalize();
    return 0;
}
