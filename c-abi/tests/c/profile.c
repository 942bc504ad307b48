/* The profiling interface: a program (or tool) that defines MPI_Send itself overrides the
 * library's weak MPI_Send and reaches the real one through PMPI_Send. */
#include "check.h"

static int sends;
int MPI_Send(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm) {
    sends++;
    return PMPI_Send(buf, count, datatype, dest, tag, comm);
}

int main(int argc, char **argv) {
    int rank, size, v = 0;
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    if (rank == 0) {
        for (int r = 1; r < size; r++) OK(MPI_Send(&r, 1, MPI_INT, r, 0, MPI_COMM_WORLD));
        CHECK_EQ(sends, size - 1);
        printf("profile ok\n");
    } else {
        OK(MPI_Recv(&v, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK_EQ(v, rank);
        CHECK_EQ(sends, 0);
    }
    OK(MPI_Finalize());
    return 0;
}
