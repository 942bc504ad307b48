/* MPI_THREAD_MULTIPLE: four threads per rank exchange messages around the ring at once,
 * each on its own duplicate of MPI_COMM_WORLD, and create and free derived types and info
 * objects meanwhile (the handle tables are shared). */
#include "check.h"
#include <pthread.h>

#define THREADS 4
static MPI_Comm comms[THREADS];
static int rank, size;

static void *worker(void *arg) {
    int t = (int)(long)arg, next = (rank + 1) % size, prev = (rank + size - 1) % size;
    for (int i = 0; i < 200; i++) {
        int out[2] = {rank, i}, in[2] = {-1, -1};
        MPI_Datatype two;
        MPI_Info info;
        OK(MPI_Type_contiguous(2, MPI_INT, &two));
        OK(MPI_Type_commit(&two));
        OK(MPI_Info_create(&info));
        OK(MPI_Sendrecv(out, 1, two, next, t, in, 2, MPI_INT, prev, t, comms[t], MPI_STATUS_IGNORE));
        CHECK_EQ(in[0], prev);
        CHECK_EQ(in[1], i);
        OK(MPI_Info_free(&info));
        OK(MPI_Type_free(&two));
    }
    return NULL;
}

int main(int argc, char **argv) {
    int provided;
    OK(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    if (provided < MPI_THREAD_MULTIPLE) {
        if (rank == 0) printf("threads ok (only level %d provided)\n", provided);
        OK(MPI_Finalize());
        return 0;
    }
    for (int t = 0; t < THREADS; t++) OK(MPI_Comm_dup(MPI_COMM_WORLD, &comms[t]));
    pthread_t th[THREADS];
    for (long t = 0; t < THREADS; t++) CHECK(pthread_create(&th[t], NULL, worker, (void *)t) == 0);
    for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
    for (int t = 0; t < THREADS; t++) OK(MPI_Comm_free(&comms[t]));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 0) printf("threads ok\n");
    OK(MPI_Finalize());
    return 0;
}
