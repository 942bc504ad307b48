/* io.c — MPI-IO benchmark: a 3-D array of doubles (N^3 points, W doubles each) distributed
 * over a process grid, each rank's block described by a subarray filetype, written and
 * read back collectively (write_all / read_at_all) or independently (write / read_at
 * through the same non-contiguous view). Any MPI (built with any mpicc).
 *
 * Usage: io N coll|indep DIR [REPS] [slab|bt] [sync]
 *   slab (default): MPI_Dims_create's grid (4 ranks: 2x2x1), one double per point: every
 *        x row is whole, so a rank's pieces are N*N/2 doubles long (few, large pieces).
 *   bt:  the BT-IO shape: 5 doubles per point, the grid split in y and x (4 ranks:
 *        1x2x2), so a rank's pieces are N/2 points = N*20 bytes (many small pieces).
 *   sync: MPI_File_sync inside the write's timing (the data reaches the disk).
 * Prints one line:  io N MODE PATTERN write_MBps read_MBps write_s read_s  (best of REPS,
 * time = slowest rank, between barriers); every rank checks every element it reads back. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 4) {
        if (rank == 0) fprintf(stderr, "usage: io N coll|indep DIR [REPS] [slab|bt] [sync]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int n = atoi(argv[1]);
    int coll = strcmp(argv[2], "coll") == 0;
    int reps = argc > 4 ? atoi(argv[4]) : 3;
    int bt = argc > 5 && strcmp(argv[5], "bt") == 0;
    int sync = argc > 6 && strcmp(argv[6], "sync") == 0;
    int w = bt ? 5 : 1;
    int gs[4] = {n, n, n, w}, dims[3] = {0, 0, 0};
    if (bt) dims[0] = 1; /* z whole: y and x are split */
    MPI_Dims_create(size, 3, dims);
    int c[3] = {rank / (dims[1] * dims[2]), (rank / dims[2]) % dims[1], rank % dims[2]};
    int ls[4], st[4];
    for (int d = 0; d < 3; d++) {
        int b = n / dims[d], r = n % dims[d];
        ls[d] = b + (c[d] < r);
        st[d] = c[d] * b + (c[d] < r ? c[d] : r);
    }
    ls[3] = w;
    st[3] = 0;
    MPI_Datatype ft;
    MPI_Type_create_subarray(4, gs, ls, st, MPI_ORDER_C, MPI_DOUBLE, &ft);
    MPI_Type_commit(&ft);
    size_t count = (size_t)ls[0] * ls[1] * ls[2] * w;
    double *buf = malloc(count * sizeof(double));
    size_t i = 0;
    for (int z = 0; z < ls[0]; z++)
        for (int y = 0; y < ls[1]; y++)
            for (int x = 0; x < ls[2]; x++)
                for (int k = 0; k < w; k++)
                    buf[i++] = (((double)(st[0] + z) * n + st[1] + y) * n + st[2] + x) * w + k;
    char name[1024];
    int pid = (int)getpid();
    MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
    snprintf(name, sizeof name, "%s/io-bench-%d.dat", argv[3], pid);
    double bytes = (double)n * n * n * w * sizeof(double);
    double best_w = 1e30, best_r = 1e30;
    double *in = malloc(count * sizeof(double));
    for (int rep = 0; rep < reps; rep++) {
        MPI_File fh;
        MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_RDWR | MPI_MODE_CREATE, MPI_INFO_NULL, &fh);
        MPI_File_set_view(fh, 0, MPI_DOUBLE, ft, "native", MPI_INFO_NULL);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        if (coll)
            MPI_File_write_all(fh, buf, (int)count, MPI_DOUBLE, MPI_STATUS_IGNORE);
        else
            MPI_File_write(fh, buf, (int)count, MPI_DOUBLE, MPI_STATUS_IGNORE);
        if (sync) MPI_File_sync(fh);
        double tw = MPI_Wtime() - t0, tmax;
        MPI_Allreduce(&tw, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (tmax < best_w) best_w = tmax;
        memset(in, 0, count * sizeof(double));
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
        if (coll)
            MPI_File_read_at_all(fh, 0, in, (int)count, MPI_DOUBLE, MPI_STATUS_IGNORE);
        else
            MPI_File_read_at(fh, 0, in, (int)count, MPI_DOUBLE, MPI_STATUS_IGNORE);
        double tr = MPI_Wtime() - t0;
        MPI_Allreduce(&tr, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (tmax < best_r) best_r = tmax;
        for (size_t k = 0; k < count; k++)
            if (in[k] != buf[k]) {
                fprintf(stderr, "rank %d: element %zu is %g, expected %g\n", rank, k, in[k],
                        buf[k]);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        MPI_File_close(&fh);
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0) MPI_File_delete(name, MPI_INFO_NULL);
    }
    if (rank == 0)
        printf("io %d %s %s %.1f %.1f %.6f %.6f\n", n, coll ? "coll" : "indep", bt ? "bt" : "slab",
               bytes / best_w / 1e6, bytes / best_r / 1e6, best_w, best_r);
    free(in);
    free(buf);
    MPI_Type_free(&ft);
    MPI_Finalize();
    return 0;
}
