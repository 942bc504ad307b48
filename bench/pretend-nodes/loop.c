/*
 * loop.c — mean time of one 8-byte MPI_Allreduce (one double, MPI_SUM) or MPI_Alltoall
 * (one double per block) on MPI_COMM_WORLD, for bench/pretend-nodes.sh.
 *
 *   loop allreduce|alltoall ITERS
 *
 * A tenth of ITERS as warm-up, then ITERS timed calls; prints (rank 0) "<collective>
 * <usec>", the slowest rank's mean. Checks every result; a wrong one aborts the job.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc != 3 || (strcmp(argv[1], "allreduce") && strcmp(argv[1], "alltoall")) ||
        atol(argv[2]) < 10 || size > 64) {
        if (rank == 0) fprintf(stderr, "usage: loop allreduce|alltoall ITERS (>= 10), <= 64 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int alltoall = !strcmp(argv[1], "alltoall");
    long iters = atol(argv[2]);
    double send[64], recv[64];
    for (int i = 0; i < size; i++) send[i] = rank * 64 + i;
    for (int timed = 0; timed < 2; timed++) {
        long n = timed ? iters : iters / 10;
        MPI_Barrier(MPI_COMM_WORLD);
        double t = MPI_Wtime();
        for (long i = 0; i < n; i++) {
            if (alltoall) MPI_Alltoall(send, 1, MPI_DOUBLE, recv, 1, MPI_DOUBLE, MPI_COMM_WORLD);
            else MPI_Allreduce(send, recv, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        }
        t = MPI_Wtime() - t;
        /* The last call's result: block j came from rank j, the sum is known. */
        for (int j = 0; j < (alltoall ? size : 1); j++) {
            double want = alltoall ? j * 64 + rank : 64.0 * size * (size - 1) / 2;
            if (recv[j] != want) {
                fprintf(stderr, "loop: rank %d got %g at %d, want %g\n", rank, recv[j], j, want);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        }
        double slowest;
        MPI_Reduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (timed && rank == 0) printf("%s %.3f\n", argv[1], slowest / n * 1e6);
    }
    MPI_Finalize();
    return 0;
}
