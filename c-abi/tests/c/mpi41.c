/* MPI_Buffer_flush / MPI_Buffer_iflush (MPI 4.1), MPI_Type_create_darray and the Fortran 90
 * type constructors
 * (2 ranks or more). */
#include "check.h"

int main(int argc, char **argv) {
    int rank, size, cls;
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    CHECK(size >= 2);
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));

    /* f90 constructors: the smallest kind that fits, as gfortran's SELECTED_*_KIND. */
    MPI_Datatype t;
    int sz;
    OK(MPI_Type_create_f90_integer(2, &t));
    CHECK(t == MPI_INTEGER1);
    OK(MPI_Type_create_f90_integer(5, &t));
    CHECK(t == MPI_INTEGER4);
    OK(MPI_Type_create_f90_integer(18, &t));
    CHECK(t == MPI_INTEGER8);
    OK(MPI_Error_class(MPI_Type_create_f90_integer(40, &t), &cls));
    CHECK_EQ(cls, MPI_ERR_ARG);
    OK(MPI_Type_create_f90_real(6, MPI_UNDEFINED, &t));
    CHECK(t == MPI_REAL4);
    OK(MPI_Type_create_f90_real(7, 30, &t));
    CHECK(t == MPI_REAL8);
    OK(MPI_Type_create_f90_real(MPI_UNDEFINED, 400, &t));
    CHECK(t == MPI_REAL16);
    OK(MPI_Type_create_f90_complex(15, 300, &t));
    CHECK(t == MPI_COMPLEX16);
    OK(MPI_Type_size(t, &sz));
    CHECK_EQ(sz, 16);
    OK(MPI_Error_class(MPI_Type_create_f90_real(MPI_UNDEFINED, MPI_UNDEFINED, &t), &cls));
    CHECK_EQ(cls, MPI_ERR_ARG);
    OK(MPI_Error_class(MPI_Type_create_f90_real(40, 10, &t), &cls));
    CHECK_EQ(cls, MPI_ERR_ARG);
    OK(MPI_Type_match_size(MPI_TYPECLASS_REAL, 8, &t));
    CHECK(t == MPI_REAL8);

    /* darray: a 4 x 6 array on a 2 x 2 grid, block rows and cyclic(1) / cyclic(2) columns,
     * in C and Fortran order; checked element by element against the owner rule. */
    int glob[24];
    for (int i = 0; i < 24; i++) glob[i] = i;
    for (int ord = 0; ord < 2; ord++)
        for (int k = 1; k <= 2; k++)
            for (int r = 0; r < 4; r++) {
                int gs[2] = {4, 6}, ds[2] = {MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_CYCLIC};
                int da[2] = {MPI_DISTRIBUTE_DFLT_DARG, k}, ps[2] = {2, 2};
                int order = ord ? MPI_ORDER_FORTRAN : MPI_ORDER_C;
                OK(MPI_Type_create_darray(4, r, 2, gs, ds, da, ps, order, MPI_INT, &t));
                OK(MPI_Type_commit(&t));
                MPI_Aint lb, ext;
                OK(MPI_Type_get_extent(t, &lb, &ext));
                CHECK(lb == 0 && ext == 24 * (MPI_Aint)sizeof(int));
                int packed[24], pos = 0;
                OK(MPI_Pack(glob, 1, t, packed, sizeof packed, &pos, MPI_COMM_SELF));
                /* Expected: the owned elements in memory order. */
                int pr = r / 2, pc = r % 2, want[24], nw = 0;
                for (int m = 0; m < 24; m++) {
                    int i = ord ? m % 4 : m / 6, j = ord ? m / 4 : m % 6; /* (row, col) */
                    if (i / 2 == pr && (j / k) % 2 == pc) want[nw++] = m;
                }
                CHECK_EQ(pos, nw * (int)sizeof(int));
                for (int q = 0; q < nw; q++) CHECK_EQ(packed[q], want[q]);
                OK(MPI_Type_free(&t));
            }
    {
        int gs[1] = {5}, ds[1] = {MPI_DISTRIBUTE_BLOCK}, da[1] = {2}, ps[1] = {2};
        OK(MPI_Error_class(MPI_Type_create_darray(2, 0, 1, gs, ds, da, ps, MPI_ORDER_C, MPI_INT, &t),
                           &cls));
        CHECK_EQ(cls, MPI_ERR_ARG); /* 2 x 2 does not cover 5 */
        ps[0] = 3;
        OK(MPI_Error_class(MPI_Type_create_darray(2, 0, 1, gs, ds, da, ps, MPI_ORDER_C, MPI_INT, &t),
                           &cls));
        CHECK_EQ(cls, MPI_ERR_ARG); /* a grid of 3 for 2 processes */
    }

    /* Buffered sends, flushed with the buffer still attached. */
    int bufsize = 8 * (1000 * (int)sizeof(int) + MPI_BSEND_OVERHEAD);
    void *buf = malloc(bufsize);
    OK(MPI_Buffer_flush()); /* nothing attached: nothing to wait for */
    OK(MPI_Buffer_attach(buf, bufsize));
    int data[1000];
    if (rank == 0) {
        for (int round = 0; round < 3; round++) {
            for (int k = 0; k < 4; k++) {
                for (int i = 0; i < 1000; i++) data[i] = round * 10000 + k * 1000 + i;
                OK(MPI_Bsend(data, 1000, MPI_INT, 1, k, MPI_COMM_WORLD));
            }
            if (round == 1) {
                MPI_Request r;
                OK(MPI_Buffer_iflush(&r));
                OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
            } else {
                OK(MPI_Buffer_flush());
            }
        }
    } else if (rank == 1) {
        for (int round = 0; round < 3; round++)
            for (int k = 0; k < 4; k++) {
                OK(MPI_Recv(data, 1000, MPI_INT, 0, k, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
                for (int i = 0; i < 1000; i += 97) CHECK_EQ(data[i], round * 10000 + k * 1000 + i);
            }
    }
    /* Rendezvous-sized buffered messages stay in the buffer until the receiver takes them:
     * the flushes must wait for that. */
    enum { BIG = 25600 };
    static int big[BIG];
    if (rank == 0) {
        OK(MPI_Buffer_detach(&buf, &bufsize));
        bufsize = 2 * (BIG * (int)sizeof(int) + MPI_BSEND_OVERHEAD);
        buf = realloc(buf, bufsize);
        OK(MPI_Buffer_attach(buf, bufsize));
        MPI_Request r;
        int flag;
        OK(MPI_Bsend(big, BIG, MPI_INT, 1, 20, MPI_COMM_WORLD));
        OK(MPI_Buffer_iflush(&r));
        OK(MPI_Test(&r, &flag, MPI_STATUS_IGNORE));
        CHECK_EQ(flag, 0); /* rank 1 has not received yet: it waits for tag 21 */
        OK(MPI_Send(NULL, 0, MPI_INT, 1, 21, MPI_COMM_WORLD));
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        OK(MPI_Bsend(big, BIG, MPI_INT, 1, 22, MPI_COMM_WORLD));
        double t0 = MPI_Wtime();
        OK(MPI_Buffer_flush()); /* rank 1 receives after 0.3 s */
        CHECK(MPI_Wtime() - t0 > 0.2);
    } else if (rank == 1) {
        OK(MPI_Recv(NULL, 0, MPI_INT, 0, 21, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        OK(MPI_Recv(big, BIG, MPI_INT, 0, 20, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        double t0 = MPI_Wtime();
        while (MPI_Wtime() - t0 < 0.3) {
        }
        OK(MPI_Recv(big, BIG, MPI_INT, 0, 22, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    }
    void *back;
    int backsize;
    OK(MPI_Buffer_detach(&back, &backsize));
    CHECK(back == buf && backsize == bufsize);
    free(buf);
    OK(MPI_Barrier(MPI_COMM_WORLD));
    OK(MPI_Finalize());
    if (rank == 0) printf("mpi41 ok\n");
    return 0;
}
