/* Error classes of bad calls under MPI_ERRORS_RETURN, printed by rank 0: built with
 * mpicc.mpich, the output must be the same on MPICH and on Tsunagi (2 ranks). */
#include <mpi.h>
#include <stdio.h>

static void show(const char *what, int rc) {
    int cls;
    MPI_Error_class(rc, &cls);
    printf("%-28s %d\n", what, cls);
}

int main(int argc, char **argv) {
    int rank, x = 0, flag;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (rank == 0) {
        show("send bad rank", MPI_Send(&x, 1, MPI_INT, 5, 0, MPI_COMM_WORLD));
        show("send negative tag", MPI_Send(&x, 1, MPI_INT, 1, -3, MPI_COMM_WORLD));
        show("send negative count", MPI_Send(&x, -1, MPI_INT, 1, 0, MPI_COMM_WORLD));
        show("send null datatype", MPI_Send(&x, 1, MPI_DATATYPE_NULL, 1, 0, MPI_COMM_WORLD));
        show("send null comm", MPI_Send(&x, 1, MPI_INT, 1, 0, MPI_COMM_NULL));
        show("recv bad source", MPI_Recv(&x, 1, MPI_INT, 7, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        MPI_Datatype t;
        MPI_Type_contiguous(2, MPI_INT, &t);
        show("send uncommitted type", MPI_Send(&x, 1, t, 1, 0, MPI_COMM_WORLD));
        MPI_Type_free(&t);
        MPI_Datatype builtin = MPI_INT;
        show("free builtin type", MPI_Type_free(&builtin));
        MPI_Comm world = MPI_COMM_WORLD;
        show("free world", MPI_Comm_free(&world));
        MPI_Op sum = MPI_SUM;
        show("free builtin op", MPI_Op_free(&sum));
        MPI_Group g = MPI_GROUP_NULL;
        int size;
        show("size of null group", MPI_Group_size(g, &size));
        show("split_type bad type", MPI_Comm_split_type(MPI_COMM_WORLD, 12345, 0, MPI_INFO_NULL, &world));
        void *v;
        show("get_attr bad keyval", MPI_Comm_get_attr(MPI_COMM_WORLD, 999999, &v, &flag));
        MPI_Info info;
        MPI_Info_create(&info);
        show("info delete missing key", MPI_Info_delete(info, "nokey"));
        MPI_Info_free(&info);
        int big[4] = {0, 0, 0, 0};
        MPI_Recv(big, 2, MPI_INT, 1, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        show("recv truncated", MPI_Recv(big, 2, MPI_INT, 1, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        MPI_Request r[2];
        MPI_Status st[2];
        MPI_Irecv(big, 2, MPI_INT, 1, 10, MPI_COMM_WORLD, &r[0]);
        MPI_Irecv(big + 2, 2, MPI_INT, 1, 11, MPI_COMM_WORLD, &r[1]);
        show("waitall one truncated", MPI_Waitall(2, r, st));
        printf("statuses %d %d, requests null %d %d\n", st[0].MPI_ERROR, st[1].MPI_ERROR,
               r[0] == MPI_REQUEST_NULL, r[1] == MPI_REQUEST_NULL);
    } else {
        int four[4] = {1, 2, 3, 4};
        MPI_Send(four, 2, MPI_INT, 0, 9, MPI_COMM_WORLD);
        MPI_Send(four, 4, MPI_INT, 0, 9, MPI_COMM_WORLD);
        MPI_Send(four, 2, MPI_INT, 0, 10, MPI_COMM_WORLD);
        MPI_Send(four, 4, MPI_INT, 0, 11, MPI_COMM_WORLD);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
