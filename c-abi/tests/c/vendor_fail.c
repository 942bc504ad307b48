/* A rank that fails in the middle of a job (for the vendor-launcher tests):
 * vendor_fail DIR kill|abort|exit. Every rank writes its pid to DIR/pid.<rank>; after a
 * barrier, the last rank writes DIR/t0 (the time, in ms since the epoch) and dies by
 * SIGKILL, MPI_Abort or exit(3) while the others wait in MPI_Recv for it forever. */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

static void write_file(const char *dir, const char *name, long long value)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(2);
    }
    fprintf(f, "%lld\n", value);
    fclose(f);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: vendor_fail DIR kill|abort|exit\n");
        return 2;
    }
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char name[32];
    snprintf(name, sizeof name, "pid.%d", rank);
    write_file(argv[1], name, (long long)getpid());
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == size - 1) {
        struct timeval tv;
        gettimeofday(&tv, NULL);
        write_file(argv[1], "t0", (long long)tv.tv_sec * 1000 + tv.tv_usec / 1000);
        if (strcmp(argv[2], "kill") == 0)
            raise(SIGKILL);
        if (strcmp(argv[2], "abort") == 0)
            MPI_Abort(MPI_COMM_WORLD, 7);
        exit(3);
    }
    int x;
    MPI_Recv(&x, 1, MPI_INT, size - 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Finalize();
    return 0;
}
