/* Under the default handler (MPI_ERRORS_ARE_FATAL) a bad call prints one line naming the
 * call and the argument, and the job fails. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
    int x = 0;
    MPI_Init(&argc, &argv);
    MPI_Send(&x, 1, MPI_INT, 99, 0, MPI_COMM_WORLD);
    printf("not reached\n");
    MPI_Finalize();
    return 0;
}
