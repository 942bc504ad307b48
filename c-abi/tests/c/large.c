/* The MPI 4.0 large-count (_c) calls that Tsunagi provides: point-to-point in every form,
 * the count queries and the single-count collectives (2 ranks or more). */
#include "check.h"

int main(int argc, char **argv) {
    int rank, size;
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    CHECK(size >= 2);
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    double buf[16];
    MPI_Status st;
    MPI_Count n;
    MPI_Request r[2];
    if (rank == 0) {
        for (int i = 0; i < 16; i++) buf[i] = i * 1.5;
        OK(MPI_Send_c(buf, 16, MPI_DOUBLE, 1, 1, MPI_COMM_WORLD));
        OK(MPI_Ssend_c(buf, 3, MPI_DOUBLE, 1, 2, MPI_COMM_WORLD));
        OK(MPI_Isend_c(buf, 5, MPI_DOUBLE, 1, 3, MPI_COMM_WORLD, &r[0]));
        OK(MPI_Wait(&r[0], MPI_STATUS_IGNORE));
        OK(MPI_Send_init_c(buf, 2, MPI_DOUBLE, 1, 4, MPI_COMM_WORLD, &r[1]));
        OK(MPI_Start(&r[1]));
        OK(MPI_Wait(&r[1], MPI_STATUS_IGNORE));
        OK(MPI_Request_free(&r[1]));
        int cls;
        OK(MPI_Error_class(MPI_Send_c(buf, (MPI_Count)1 << 33, MPI_DOUBLE, 1, 9, MPI_COMM_WORLD), &cls));
        CHECK_EQ(cls, MPI_ERR_COUNT);
        OK(MPI_Error_class(MPI_Send_c(buf, -1, MPI_DOUBLE, 1, 9, MPI_COMM_WORLD), &cls));
        CHECK_EQ(cls, MPI_ERR_COUNT);
    } else if (rank == 1) {
        OK(MPI_Recv_c(buf, 16, MPI_DOUBLE, 0, 1, MPI_COMM_WORLD, &st));
        OK(MPI_Get_count_c(&st, MPI_DOUBLE, &n));
        CHECK_EQ(n, 16);
        CHECK(buf[15] == 22.5);
        OK(MPI_Get_elements_c(&st, MPI_DOUBLE, &n));
        CHECK_EQ(n, 16);
        OK(MPI_Recv_c(buf, 16, MPI_DOUBLE, 0, 2, MPI_COMM_WORLD, &st));
        OK(MPI_Get_count_c(&st, MPI_DOUBLE, &n));
        CHECK_EQ(n, 3);
        OK(MPI_Irecv_c(buf, 16, MPI_DOUBLE, 0, 3, MPI_COMM_WORLD, &r[0]));
        OK(MPI_Wait(&r[0], &st));
        OK(MPI_Get_count_c(&st, MPI_DOUBLE, &n));
        CHECK_EQ(n, 5);
        OK(MPI_Recv_init_c(buf, 16, MPI_DOUBLE, 0, 4, MPI_COMM_WORLD, &r[1]));
        OK(MPI_Start(&r[1]));
        OK(MPI_Wait(&r[1], &st));
        OK(MPI_Get_count_c(&st, MPI_DOUBLE, &n));
        CHECK_EQ(n, 2);
        OK(MPI_Request_free(&r[1]));
    }
    MPI_Datatype t;
    MPI_Count lb, ext;
    OK(MPI_Type_vector(4, 2, 3, MPI_INT, &t));
    OK(MPI_Type_size_c(t, &n));
    CHECK_EQ(n, 32);
    OK(MPI_Type_get_extent_c(t, &lb, &ext));
    CHECK_EQ(lb, 0);
    CHECK_EQ(ext, (3 * 3 + 2) * 4);
    OK(MPI_Type_get_true_extent_c(t, &lb, &ext));
    CHECK_EQ(ext, (3 * 3 + 2) * 4);
    OK(MPI_Type_free(&t));
    long v = rank == 0 ? 77 : 0, sum = 0;
    OK(MPI_Bcast_c(&v, 1, MPI_LONG, 0, MPI_COMM_WORLD));
    CHECK_EQ(v, 77);
    long one = rank + 1;
    OK(MPI_Allreduce_c(&one, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD));
    CHECK_EQ(sum, (long)size * (size + 1) / 2);
    OK(MPI_Iallreduce_c(&one, &sum, 1, MPI_LONG, MPI_MAX, MPI_COMM_WORLD, &r[0]));
    OK(MPI_Wait(&r[0], MPI_STATUS_IGNORE));
    CHECK_EQ(sum, size);
    OK(MPI_Reduce_c(&one, &sum, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD));
    if (rank == 0) CHECK_EQ(sum, (long)size * (size + 1) / 2);

    /* The generated large-count forms (issue 20): collectives, persistent and one-sided
     * calls, datatype constructors, the buffer. */
    {
        int cls;
        long mine[2] = {rank, -rank}, all[2 * 64], got = -1;
        CHECK(size <= 64);
        OK(MPI_Allgather_c(mine, 2, MPI_LONG, all, 2, MPI_LONG, MPI_COMM_WORLD));
        for (int i = 0; i < size; i++) CHECK(all[2 * i] == i && all[2 * i + 1] == -i);
        OK(MPI_Gather_c(mine, 1, MPI_LONG, all, 1, MPI_LONG, 0, MPI_COMM_WORLD));
        if (rank == 0)
            for (int i = 0; i < size; i++) CHECK_EQ(all[i], i);
        OK(MPI_Scatter_c(all, 1, MPI_LONG, &got, 1, MPI_LONG, 0, MPI_COMM_WORLD));
        CHECK_EQ(got, rank);
        OK(MPI_Scan_c(&one, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD));
        CHECK_EQ(sum, (long)(rank + 1) * (rank + 2) / 2);
        OK(MPI_Iallgather_c(mine, 1, MPI_LONG, all, 1, MPI_LONG, MPI_COMM_WORLD, &r[0]));
        OK(MPI_Wait(&r[0], MPI_STATUS_IGNORE));
        for (int i = 0; i < size; i++) CHECK_EQ(all[i], i);
        v = rank == 0 ? 5 : 0;
        OK(MPI_Bcast_init_c(&v, 1, MPI_LONG, 0, MPI_COMM_WORLD, MPI_INFO_NULL, &r[0]));
        for (int k = 0; k < 3; k++) {
            OK(MPI_Start(&r[0]));
            OK(MPI_Wait(&r[0], MPI_STATUS_IGNORE));
            CHECK_EQ(v, 5);
        }
        OK(MPI_Request_free(&r[0]));
        OK(MPI_Error_class(MPI_Allgather_c(mine, (MPI_Count)1 << 40, MPI_LONG, all, 1, MPI_LONG,
                                           MPI_COMM_WORLD),
                           &cls));
        CHECK_EQ(cls, MPI_ERR_COUNT);
        /* Datatypes. */
        MPI_Datatype c, vec, rs;
        int sz;
        OK(MPI_Type_contiguous_c(3, MPI_INT, &c));
        OK(MPI_Type_size(c, &sz));
        CHECK_EQ(sz, 12);
        OK(MPI_Type_vector_c(2, 2, 5, MPI_INT, &vec));
        OK(MPI_Type_size(vec, &sz));
        CHECK_EQ(sz, 16);
        OK(MPI_Type_create_resized_c(c, 0, 40, &rs));
        MPI_Aint alb, aext;
        OK(MPI_Type_get_extent(rs, &alb, &aext));
        CHECK_EQ(aext, 40);
        OK(MPI_Type_free(&c));
        OK(MPI_Type_free(&vec));
        OK(MPI_Type_free(&rs));
        /* One-sided. */
        long winbuf[2] = {0, 0}, fetched = -1;
        MPI_Win w;
        OK(MPI_Win_create(winbuf, sizeof winbuf, sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &w));
        OK(MPI_Win_fence(0, w));
        long val = 100 + rank;
        OK(MPI_Put_c(&val, 1, MPI_LONG, (rank + 1) % size, 0, 1, MPI_LONG, w));
        OK(MPI_Accumulate_c(&one, 1, MPI_LONG, 0, 1, 1, MPI_LONG, MPI_SUM, w));
        OK(MPI_Win_fence(0, w));
        CHECK_EQ(winbuf[0], 100 + (rank + size - 1) % size);
        if (rank == 0) CHECK_EQ(winbuf[1], (long)size * (size + 1) / 2);
        OK(MPI_Get_c(&fetched, 1, MPI_LONG, 0, 1, 1, MPI_LONG, w));
        OK(MPI_Win_fence(0, w));
        CHECK_EQ(fetched, (long)size * (size + 1) / 2);
        OK(MPI_Win_free(&w));
        /* The buffer. */
        static char bbuf[4096];
        void *back;
        int bsz;
        OK(MPI_Buffer_attach_c(bbuf, sizeof bbuf));
        OK(MPI_Buffer_detach(&back, &bsz));
        CHECK(back == bbuf && bsz == (int)sizeof bbuf);
    }
    OK(MPI_Finalize());
    if (rank == 0) printf("large ok\n");
    return 0;
}
