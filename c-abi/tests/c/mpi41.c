/* MPI_Buffer_flush / MPI_Buffer_iflush (MPI 4.1), MPI_Type_create_darray and the Fortran 90
 * type constructors
 * (2 ranks or more). */
#include "check.h"
#include <string.h>

/* An MPI_Type_create_f90_* result `t`: combiner `comb`, integer
 * contents (p, r), or (r) for MPI_COMBINER_F90_INTEGER (then `r` is MPI_UNDEFINED here and
 * `p` the range), the size and extent of predefined type `kind`, and not freeable. */
static void f90_is(MPI_Datatype t, int comb, int p, int r, MPI_Datatype kind) {
    int ni, na, nd, c, ints[2] = {-1, -1};
    OK(MPI_Type_get_envelope(t, &ni, &na, &nd, &c));
    CHECK_EQ(c, comb);
    CHECK_EQ(ni, comb == MPI_COMBINER_F90_INTEGER ? 1 : 2);
    CHECK(na == 0 && nd == 0);
    OK(MPI_Type_get_contents(t, ni, 0, 0, ints, NULL, NULL));
    CHECK_EQ(ints[0], p);
    if (ni == 2) CHECK_EQ(ints[1], r);
    MPI_Count nic, nac, nlc, ndc;
    OK(MPI_Type_get_envelope_c(t, &nic, &nac, &nlc, &ndc, &c));
    CHECK(c == comb && nic == ni && nac == 0 && nlc == 0 && ndc == 0);
    int s1, s2;
    MPI_Aint lb1, e1, lb2, e2;
    OK(MPI_Type_size(t, &s1));
    OK(MPI_Type_size(kind, &s2));
    OK(MPI_Type_get_extent(t, &lb1, &e1));
    OK(MPI_Type_get_extent(kind, &lb2, &e2));
    CHECK(s1 == s2 && lb1 == lb2 && e1 == e2);
    /* Predefined: committed already, and MPI_Type_free refuses it, leaving it valid. */
    OK(MPI_Type_commit(&t));
    MPI_Datatype f = t;
    int cls;
    OK(MPI_Error_class(MPI_Type_free(&f), &cls));
    CHECK_EQ(cls, MPI_ERR_TYPE);
    CHECK(f == t);
    OK(MPI_Type_size(t, &s1));
}

int main(int argc, char **argv) {
    int rank, size, cls;
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    CHECK(size >= 2);
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));

    /* f90 constructors: the smallest kind that fits, as gfortran's SELECTED_*_KIND; the
     * result is a predefined type of combiner MPI_COMBINER_F90_* with contents (p, r) or
     * (r) (MPI 4.1 §19.3.5), the same handle for the same arguments, never freed. */
    MPI_Datatype t, t2;
    int sz;
    OK(MPI_Type_create_f90_integer(2, &t));
    f90_is(t, MPI_COMBINER_F90_INTEGER, 2, MPI_UNDEFINED, MPI_INTEGER1);
    OK(MPI_Type_create_f90_integer(5, &t));
    f90_is(t, MPI_COMBINER_F90_INTEGER, 5, MPI_UNDEFINED, MPI_INTEGER4);
    OK(MPI_Type_create_f90_integer(5, &t2));
    CHECK(t2 == t);
    OK(MPI_Type_create_f90_integer(18, &t));
    f90_is(t, MPI_COMBINER_F90_INTEGER, 18, MPI_UNDEFINED, MPI_INTEGER8);
    OK(MPI_Error_class(MPI_Type_create_f90_integer(40, &t), &cls));
    CHECK_EQ(cls, MPI_ERR_ARG);
    OK(MPI_Type_create_f90_real(6, MPI_UNDEFINED, &t));
    f90_is(t, MPI_COMBINER_F90_REAL, 6, MPI_UNDEFINED, MPI_REAL4);
    OK(MPI_Type_create_f90_real(7, 30, &t));
    f90_is(t, MPI_COMBINER_F90_REAL, 7, 30, MPI_REAL8);
    OK(MPI_Type_create_f90_real(MPI_UNDEFINED, 400, &t));
    f90_is(t, MPI_COMBINER_F90_REAL, MPI_UNDEFINED, 400, MPI_REAL16);
    OK(MPI_Type_create_f90_complex(15, 300, &t));
    f90_is(t, MPI_COMBINER_F90_COMPLEX, 15, 300, MPI_COMPLEX16);
    OK(MPI_Type_size(t, &sz));
    CHECK_EQ(sz, 16);
    /* Usable as its kind: a reduction on an f90 integer type. */
    {
        long long mine = rank + 1, sum = 0;
        OK(MPI_Type_create_f90_integer(18, &t));
        OK(MPI_Allreduce(&mine, &sum, 1, t, MPI_SUM, MPI_COMM_WORLD));
        CHECK_EQ(sum, (long long)size * (size + 1) / 2);
        /* A derived type over it gives the same handle back through its contents. */
        MPI_Datatype c, inner;
        int ni, na, nd, comb, cnt;
        OK(MPI_Type_contiguous(3, t, &c));
        OK(MPI_Type_get_envelope(c, &ni, &na, &nd, &comb));
        CHECK(comb == MPI_COMBINER_CONTIGUOUS && ni == 1 && na == 0 && nd == 1);
        OK(MPI_Type_get_contents(c, 1, 0, 1, &cnt, NULL, &inner));
        CHECK(cnt == 3 && inner == t);
        OK(MPI_Type_free(&c));
    }
    OK(MPI_Error_class(MPI_Type_create_f90_real(MPI_UNDEFINED, MPI_UNDEFINED, &t), &cls));
    CHECK_EQ(cls, MPI_ERR_ARG);
    OK(MPI_Error_class(MPI_Type_create_f90_real(40, 10, &t), &cls));
    CHECK_EQ(cls, MPI_ERR_ARG);
    /* MPI 4.1 names the null datatype and window. */
    {
        char nm[MPI_MAX_OBJECT_NAME];
        int len;
        OK(MPI_Type_get_name(MPI_DATATYPE_NULL, nm, &len));
        CHECK(len == 17 && strcmp(nm, "MPI_DATATYPE_NULL") == 0);
        OK(MPI_Win_get_name(MPI_WIN_NULL, nm, &len));
        CHECK(len == 12 && strcmp(nm, "MPI_WIN_NULL") == 0);
    }
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
                /* Decoded as built: MPI_COMBINER_DARRAY with the arguments given. */
                int ni, na, nd, comb, got[12];
                MPI_Datatype old;
                OK(MPI_Type_get_envelope(t, &ni, &na, &nd, &comb));
                CHECK(comb == MPI_COMBINER_DARRAY && ni == 4 * 2 + 4 && na == 0 && nd == 1);
                OK(MPI_Type_get_contents(t, 12, 0, 1, got, NULL, &old));
                int want_ints[12] = {4, r, 2, 4, 6, MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_CYCLIC,
                                     MPI_DISTRIBUTE_DFLT_DARG, k, 2, 2, order};
                for (int q = 0; q < 12; q++) CHECK_EQ(got[q], want_ints[q]);
                CHECK(old == MPI_INT);
                MPI_Count nic, nac, nlc, ndc;
                OK(MPI_Type_get_envelope_c(t, &nic, &nac, &nlc, &ndc, &comb));
                CHECK(comb == MPI_COMBINER_DARRAY && nic == 12 && nac == 0 && nlc == 0 && ndc == 1);
                {
                    int gotc[12];
                    MPI_Count none[1];
                    OK(MPI_Type_get_contents_c(t, 12, 0, 0, 1, gotc, NULL, none, &old));
                    for (int q = 0; q < 12; q++) CHECK_EQ(gotc[q], want_ints[q]);
                    CHECK(old == MPI_INT);
                }
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
