/* Collective latency of a peer MPI, same points and output as collectives/examples/coll_bench.rs:
 * "<collective> <bytes> <usec>". Build: mpicc.mpich -O2 coll_peer.c -o coll_peer_mpich */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int me, n;

static int iters(size_t bytes) {
    long it = 200000000L / (long)(bytes + 20000) / (n > 0 ? n : 1);
    if (it < 5) it = 5;
    if (it > 2000) it = 2000;
    return (int)it;
}

#define TIME(name, bytes, call)                                                  \
    do {                                                                         \
        int it_ = iters(bytes);                                                  \
        for (int i_ = 0; i_ < (it_ < 20 ? it_ : 20); i_++) { call; }             \
        MPI_Barrier(MPI_COMM_WORLD);                                             \
        double t_ = MPI_Wtime();                                                 \
        for (int i_ = 0; i_ < it_; i_++) { call; }                               \
        double us_ = (MPI_Wtime() - t_) * 1e6 / it_;                             \
        if (me == 0) printf("%s %zu %.2f\n", name, (size_t)(bytes), us_);        \
    } while (0)

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    size_t max = argc > 1 ? strtoul(argv[1], NULL, 10) : (1 << 20);
    TIME("barrier", 0, MPI_Barrier(MPI_COMM_WORLD));
    for (size_t s = 8;; s *= 4) {
        if (s > max) s = max;
        char *buf = malloc(s), *g = malloc(s * n), *sa = malloc(s * n), *ra = malloc(s * n);
        double *a = malloc(s + 8), *r = malloc(s + 8);
        memset(buf, 1, s);
        for (size_t i = 0; i < s / 8; i++) a[i] = 1.0;
        TIME("bcast", s, MPI_Bcast(buf, (int)s, MPI_BYTE, 0, MPI_COMM_WORLD));
        TIME("allreduce", s, MPI_Allreduce(a, r, (int)(s / 8), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
        TIME("allgather", s, MPI_Allgather(buf, (int)s, MPI_BYTE, g, (int)s, MPI_BYTE, MPI_COMM_WORLD));
        if (s <= (1 << 20))
            TIME("alltoall", s, MPI_Alltoall(sa, (int)s, MPI_BYTE, ra, (int)s, MPI_BYTE, MPI_COMM_WORLD));
        free(buf); free(g); free(sa); free(ra); free(a); free(r);
        if (s >= max) break;
    }
    MPI_Finalize();
    return 0;
}
