/* A fatal error under the default handler ("fatal") or under MPI_ERRORS_ABORT set on a
 * communicator ("abort"): rank 0 sends to a rank that does not exist; the job must end
 * with mpirun saying which call failed, not that the program called MPI_Abort. */
#include "check.h"
#include <string.h>

int main(int argc, char **argv) {
    int rank, size, x = 0;
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    MPI_Comm comm = MPI_COMM_WORLD;
    if (argc > 1 && strcmp(argv[1], "abort") == 0) {
        MPI_Errhandler got;
        OK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
        OK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_ABORT));
        OK(MPI_Comm_get_errhandler(comm, &got));
        CHECK_EQ(got, MPI_ERRORS_ABORT);
    }
    if (rank == 0) MPI_Send(&x, 1, MPI_INT, size + 5, 0, comm);
    else MPI_Barrier(MPI_COMM_WORLD); /* ended by the abort */
    printf("not reached\n");
    MPI_Finalize();
    return 0;
}
