/* Large-count (_c) calls with count and displacement arrays, in/out positions and
 * MPI_Aint displacement units: v and w collectives (a non-blocking and a neighbourhood one),
 * derived datatypes, pack/unpack, windows, buffer detach; a count above INT_MAX in an
 * array gives MPI_ERR_COUNT. Any number of ranks up to 16. */
#include <limits.h>
#include <string.h>

#include "check.h"

int main(int argc, char **argv) {
    OK(MPI_Init(&argc, &argv));
    int rank, size;
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    CHECK(size <= 16);
    MPI_Count counts[16];
    MPI_Aint displs[16];
    int total = 0;
    for (int r = 0; r < size; r++) {
        counts[r] = r + 1;
        displs[r] = total;
        total += r + 1;
    }
    int mine[16], all[256];
    for (int i = 0; i <= rank; i++) mine[i] = rank * 100 + i;

    /* Allgatherv_c and Iallgatherv_c (the arrays may change once the call returned). */
    for (int form = 0; form < 2; form++) {
        memset(all, -1, sizeof all);
        if (form == 0) {
            OK(MPI_Allgatherv_c(mine, rank + 1, MPI_INT, all, counts, displs, MPI_INT,
                                MPI_COMM_WORLD));
        } else {
            MPI_Count c2[16];
            MPI_Aint d2[16];
            memcpy(c2, counts, sizeof c2);
            memcpy(d2, displs, sizeof d2);
            MPI_Request req;
            OK(MPI_Iallgatherv_c(mine, rank + 1, MPI_INT, all, c2, d2, MPI_INT,
                                 MPI_COMM_WORLD, &req));
            memset(c2, 0xff, sizeof c2);
            memset(d2, 0xff, sizeof d2);
            OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
        }
        for (int r = 0; r < size; r++)
            for (int i = 0; i <= r; i++) CHECK_EQ(all[displs[r] + i], r * 100 + i);
    }

    /* Gatherv_c and Scatterv_c: the arrays matter at the root only (NULL elsewhere). */
    int root = size - 1;
    memset(all, -1, sizeof all);
    OK(MPI_Gatherv_c(mine, rank + 1, MPI_INT, all, rank == root ? counts : NULL,
                     rank == root ? displs : NULL, MPI_INT, root, MPI_COMM_WORLD));
    if (rank == root)
        for (int r = 0; r < size; r++)
            for (int i = 0; i <= r; i++) CHECK_EQ(all[displs[r] + i], r * 100 + i);
    int got[16];
    OK(MPI_Scatterv_c(all, rank == root ? counts : NULL, rank == root ? displs : NULL, MPI_INT,
                      got, rank + 1, MPI_INT, root, MPI_COMM_WORLD));
    for (int i = 0; i <= rank; i++) CHECK_EQ(got[i], rank * 100 + i);

    /* Alltoallv_c: rank r sends r+1 ints to everyone. */
    MPI_Count scounts[16], rcounts[16];
    MPI_Aint sd[16], rd[16];
    int sbuf[256], rbuf[256];
    for (int r = 0; r < size; r++) {
        scounts[r] = rank + 1;
        sd[r] = r * 16;
        rcounts[r] = r + 1;
        rd[r] = r * 16;
        for (int i = 0; i <= rank; i++) sbuf[r * 16 + i] = rank * 1000 + r * 10 + i;
    }
    OK(MPI_Alltoallv_c(sbuf, scounts, sd, MPI_INT, rbuf, rcounts, rd, MPI_INT, MPI_COMM_WORLD));
    for (int r = 0; r < size; r++)
        for (int i = 0; i <= r; i++) CHECK_EQ(rbuf[r * 16 + i], r * 1000 + rank * 10 + i);

    /* Reduce_scatter_c: everyone contributes 1 to each of total elements. */
    int ones[256], part[16];
    for (int i = 0; i < total; i++) ones[i] = 1;
    OK(MPI_Reduce_scatter_c(ones, part, counts, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    for (int i = 0; i <= rank; i++) CHECK_EQ(part[i], size);

    /* Neighbor_alltoallv_c on a periodic ring. */
    MPI_Comm ring;
    int dims[1] = {size}, periods[1] = {1};
    OK(MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &ring));
    MPI_Count nc[2] = {1, 1};
    MPI_Aint nd[2] = {0, 1};
    int nsend[2] = {rank, rank}, nrecv[2] = {-1, -1};
    OK(MPI_Neighbor_alltoallv_c(nsend, nc, nd, MPI_INT, nrecv, nc, nd, MPI_INT, ring));
    CHECK_EQ(nrecv[0], (rank + size - 1) % size);
    CHECK_EQ(nrecv[1], (rank + 1) % size);
    OK(MPI_Comm_free(&ring));

    /* Datatypes: indexed, struct; Pack_c/Unpack_c with MPI_Count positions. */
    MPI_Count bl[2] = {2, 1}, dp[2] = {0, 3};
    MPI_Datatype idx, st;
    OK(MPI_Type_indexed_c(2, bl, dp, MPI_INT, &idx));
    OK(MPI_Type_commit(&idx));
    MPI_Count sbl[2] = {1, 1}, sdp[2] = {0, 8};
    MPI_Datatype sty[2] = {MPI_INT, MPI_DOUBLE};
    OK(MPI_Type_create_struct_c(2, sbl, sdp, sty, &st));
    OK(MPI_Type_commit(&st));
    int sz;
    OK(MPI_Type_size(idx, &sz));
    CHECK_EQ(sz, 12);
    OK(MPI_Type_size(st, &sz));
    CHECK_EQ(sz, 12);
    MPI_Count psize;
    OK(MPI_Pack_size_c(1, idx, MPI_COMM_WORLD, &psize));
    CHECK(psize >= 12);
    int src[4] = {7, 8, 9, 10}, dst[4] = {0, 0, 0, 0};
    char packed[64];
    MPI_Count pos = 0;
    OK(MPI_Pack_c(src, 1, idx, packed, sizeof packed, &pos, MPI_COMM_WORLD));
    CHECK_EQ(pos, 12);
    pos = 0;
    OK(MPI_Unpack_c(packed, sizeof packed, &pos, dst, 1, idx, MPI_COMM_WORLD));
    CHECK_EQ(pos, 12);
    CHECK(dst[0] == 7 && dst[1] == 8 && dst[2] == 0 && dst[3] == 10);
    MPI_Count ni, na, nl, nt;
    int comb;
    OK(MPI_Type_get_envelope_c(idx, &ni, &na, &nl, &nt, &comb));
    CHECK(comb == MPI_COMBINER_INDEXED && ni == 5 && na == 0 && nl == 0 && nt == 1);
    MPI_Count ext;
    OK(MPI_Pack_external_size_c("external32", 1, idx, &ext));
    CHECK_EQ(ext, 12);
    pos = 0;
    OK(MPI_Pack_external_c("external32", src, 1, idx, packed, sizeof packed, &pos));
    CHECK_EQ(pos, 12);
    CHECK(packed[3] == 7 && packed[0] == 0); /* big-endian */
    memset(dst, 0, sizeof dst);
    pos = 0;
    OK(MPI_Unpack_external_c("external32", packed, sizeof packed, &pos, dst, 1, idx));
    CHECK(pos == 12 && dst[0] == 7 && dst[1] == 8 && dst[2] == 0 && dst[3] == 10);
    OK(MPI_Type_free(&idx));
    OK(MPI_Type_free(&st));

    /* Windows with MPI_Aint displacement units. */
    MPI_Win win;
    int *base;
    OK(MPI_Win_allocate_shared_c(sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_SELF, &base,
                                 &win));
    MPI_Aint qsize, qunit;
    int *qbase;
    OK(MPI_Win_shared_query_c(win, 0, &qsize, &qunit, &qbase));
    CHECK_EQ(qsize, sizeof(int));
    CHECK_EQ(qunit, sizeof(int));
    CHECK(qbase == base);
    OK(MPI_Win_free(&win));

    /* Buffer_detach_c gives the attached size as an MPI_Count. */
    static char bbuf[4096];
    OK(MPI_Buffer_attach(bbuf, sizeof bbuf));
    void *addr;
    MPI_Count bsize;
    OK(MPI_Buffer_detach_c(&addr, &bsize));
    CHECK(addr == bbuf);
    CHECK_EQ(bsize, sizeof bbuf);

    /* A count above INT_MAX in an array: MPI_ERR_COUNT, nothing sent. */
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    counts[0] = (MPI_Count)INT_MAX + 1;
    int cls;
    MPI_Error_class(MPI_Allgatherv_c(mine, rank + 1, MPI_INT, all, counts, displs, MPI_INT,
                                     MPI_COMM_WORLD), &cls);
    CHECK_EQ(cls, MPI_ERR_COUNT);

    OK(MPI_Finalize());
    if (rank == 0) printf("large arrays ok\n");
    return 0;
}
