/* A C ring: each rank passes a token around MPI_COMM_WORLD; built by scripts/demo with
 * Tsunagi's mpicc. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
    int rank, size, token;
    char host[MPI_MAX_PROCESSOR_NAME];
    int len;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Get_processor_name(host, &len);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    if (rank == 0) {
        token = 1;
        MPI_Send(&token, 1, MPI_INT, next, 0, MPI_COMM_WORLD);
        MPI_Recv(&token, 1, MPI_INT, prev, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        printf("C ring on %s: the token visited %d ranks\n", host, token);
    } else {
        MPI_Recv(&token, 1, MPI_INT, prev, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        token++;
        MPI_Send(&token, 1, MPI_INT, next, 0, MPI_COMM_WORLD);
    }
    MPI_Finalize();
    return 0;
}
