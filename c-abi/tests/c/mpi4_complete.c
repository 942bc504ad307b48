/* The last MPI 4.0 calls (issue 20): the persistent large-count collectives with count
 * arrays, started several times with the data changed between starts (MPI_Gatherv_init_c,
 * MPI_Scatterv_init_c, MPI_Allgatherv_init_c, MPI_Alltoallv_init_c, MPI_Alltoallw_init_c,
 * MPI_Reduce_scatter_init_c, the neighbourhood ones on a ring); MPI_Op_create_c,
 * MPI_Type_create_darray_c, MPI_Type_get_contents_c, MPI_Register_datarep_c,
 * MPI_Info_create_env, the Fortran 2008 status conversions, MPI_DUP_FN's symbol. 3 to 16 ranks (the ring's two
 * neighbours differ). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

static MPI_Count op_calls;

/* An MPI_User_function_c, associative but not commutative: a op b = a (the lower rank's
 * value wins), elementwise over MPI_INT. */
static void first(void *in, void *inout, MPI_Count *len, MPI_Datatype *dt) {
    CHECK(*dt == MPI_INT);
    for (MPI_Count i = 0; i < *len; i++) ((int *)inout)[i] = ((int *)in)[i];
    op_calls++;
}

static int reads, writes;

/* MPI_Datarep_conversion_function_c: "flip" stores each int negated. */
static int flip_read(void *userbuf, MPI_Datatype dt, MPI_Count count, void *filebuf,
                     MPI_Offset position, void *extra) {
    (void)position;
    CHECK(dt == MPI_INT);
    CHECK(extra == &reads);
    for (MPI_Count i = 0; i < count; i++) ((int *)userbuf)[i] = -((int *)filebuf)[i];
    reads++;
    return MPI_SUCCESS;
}
static int flip_write(void *userbuf, MPI_Datatype dt, MPI_Count count, void *filebuf,
                      MPI_Offset position, void *extra) {
    (void)position;
    (void)extra;
    CHECK(dt == MPI_INT);
    for (MPI_Count i = 0; i < count; i++) ((int *)filebuf)[i] = -((int *)userbuf)[i];
    writes++;
    return MPI_SUCCESS;
}

int main(int argc, char **argv) {
    /* MPI_Info_create_env works before MPI_Init. */
    MPI_Info env;
    OK(MPI_Info_create_env(argc, argv, &env));
    char val[MPI_MAX_INFO_VAL];
    int flag;
    OK(MPI_Info_get(env, "command", MPI_MAX_INFO_VAL, val, &flag));
    CHECK(flag && strcmp(val, argv[0]) == 0);
    OK(MPI_Info_free(&env));

    OK(MPI_Init(&argc, &argv));
    int rank, size;
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    CHECK(size >= 3 && size <= 16);
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    char *args[] = {argv[0], "x y", NULL};
    OK(MPI_Info_create_env(2, args, &env));
    OK(MPI_Info_get(env, "argv", MPI_MAX_INFO_VAL, val, &flag));
    CHECK(flag && strcmp(val, "x y") == 0);
    OK(MPI_Info_get(env, "maxprocs", MPI_MAX_INFO_VAL, val, &flag));
    CHECK(flag && atoi(val) == size);
    OK(MPI_Info_free(&env));

    /* Rank r contributes r + 1 ints; every start sees the values of that round. */
    MPI_Count counts[16], ones[16];
    MPI_Aint displs[16], bdispls[16], zero[16];
    MPI_Datatype ints[16];
    int total = 0;
    for (int r = 0; r < size; r++) {
        counts[r] = r + 1;
        displs[r] = total;
        bdispls[r] = total * (MPI_Aint)sizeof(int);
        ones[r] = 1;
        zero[r] = r;
        ints[r] = MPI_INT;
        total += r + 1;
    }
    int send[16], recv[256], all[256], mine[16], got[16];
    MPI_Request req[6];
    OK(MPI_Gatherv_init_c(send, rank + 1, MPI_INT, recv, counts, displs, MPI_INT, 0,
                          MPI_COMM_WORLD, MPI_INFO_NULL, &req[0]));
    OK(MPI_Allgatherv_init_c(send, rank + 1, MPI_INT, all, counts, displs, MPI_INT,
                             MPI_COMM_WORLD, MPI_INFO_NULL, &req[1]));
    OK(MPI_Scatterv_init_c(all, counts, displs, MPI_INT, mine, rank + 1, MPI_INT, 0,
                           MPI_COMM_WORLD, MPI_INFO_NULL, &req[2]));
    /* One int to and from every rank, as v and as w. */
    int a2a_in[16], a2a_v[16], a2a_w[16];
    OK(MPI_Alltoallv_init_c(a2a_in, ones, zero, MPI_INT, a2a_v, ones, zero, MPI_INT,
                            MPI_COMM_WORLD, MPI_INFO_NULL, &req[3]));
    MPI_Aint bzero[16];
    for (int r = 0; r < size; r++) bzero[r] = r * (MPI_Aint)sizeof(int);
    OK(MPI_Alltoallw_init_c(a2a_in, ones, bzero, ints, a2a_w, ones, bzero, ints,
                            MPI_COMM_WORLD, MPI_INFO_NULL, &req[4]));
    /* Reduce_scatter: rank r gets r + 1 sums. */
    int rs_in[256], rs_out[16];
    OK(MPI_Reduce_scatter_init_c(rs_in, rs_out, counts, MPI_INT, MPI_SUM, MPI_COMM_WORLD,
                                 MPI_INFO_NULL, &req[5]));
    (void)bdispls;
    for (int round = 0; round < 4; round++) {
        for (int i = 0; i <= rank; i++) send[i] = 1000 * round + 100 * rank + i;
        for (int r = 0; r < size; r++) a2a_in[r] = 1000 * round + 10 * rank + r;
        for (int i = 0; i < total; i++) rs_in[i] = round + i + rank;
        OK(MPI_Startall(2, req));
        OK(MPI_Waitall(2, req, MPI_STATUSES_IGNORE));
        OK(MPI_Start(&req[2])); /* reads what the allgatherv wrote */
        OK(MPI_Wait(&req[2], MPI_STATUS_IGNORE));
        OK(MPI_Startall(3, req + 3));
        OK(MPI_Waitall(3, req + 3, MPI_STATUSES_IGNORE));
        for (int r = 0; r < size; r++)
            for (int i = 0; i <= r; i++) {
                int want = 1000 * round + 100 * r + i;
                if (rank == 0) CHECK_EQ(recv[displs[r] + i], want);
                CHECK_EQ(all[displs[r] + i], want);
            }
        /* Scatterv sends rank 0's `all` back out: each rank gets its own part. */
        for (int i = 0; i <= rank; i++) CHECK_EQ(mine[i], 1000 * round + 100 * rank + i);
        for (int r = 0; r < size; r++) {
            CHECK_EQ(a2a_v[r], 1000 * round + 10 * r + rank);
            CHECK_EQ(a2a_w[r], 1000 * round + 10 * r + rank);
        }
        for (int i = 0; i <= rank; i++) {
            int k = displs[rank] + i;
            CHECK_EQ(rs_out[i], size * (round + k) + size * (size - 1) / 2);
        }
    }
    for (int i = 0; i < 6; i++) OK(MPI_Request_free(&req[i]));

    /* Neighbourhood forms on a ring (left and right neighbours). */
    MPI_Comm ring;
    int dims[1] = {size}, periods[1] = {1};
    OK(MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &ring));
    MPI_Count two[2] = {1, 1};
    MPI_Aint nd[2] = {0, 1}, nbd[2] = {0, (MPI_Aint)sizeof(int)};
    MPI_Datatype nt[2] = {MPI_INT, MPI_INT};
    int nsend[2], nv[2], nav[2], naw[2];
    MPI_Request nreq[3];
    OK(MPI_Neighbor_allgatherv_init_c(nsend, 1, MPI_INT, nv, two, nd, MPI_INT, ring,
                                      MPI_INFO_NULL, &nreq[0]));
    OK(MPI_Neighbor_alltoallv_init_c(nsend, two, nd, MPI_INT, nav, two, nd, MPI_INT, ring,
                                     MPI_INFO_NULL, &nreq[1]));
    OK(MPI_Neighbor_alltoallw_init_c(nsend, two, nbd, nt, naw, two, nbd, nt, ring,
                                     MPI_INFO_NULL, &nreq[2]));
    int left = (rank + size - 1) % size, right = (rank + 1) % size;
    for (int round = 0; round < 3; round++) {
        nsend[0] = 100 * round + 10 * rank;     /* to the left */
        nsend[1] = 100 * round + 10 * rank + 1; /* to the right */
        OK(MPI_Startall(3, nreq));
        OK(MPI_Waitall(3, nreq, MPI_STATUSES_IGNORE));
        /* allgatherv: each neighbour's nsend[0]. */
        CHECK_EQ(nv[0], 100 * round + 10 * left);
        CHECK_EQ(nv[1], 100 * round + 10 * right);
        /* alltoallv/w: the left neighbour sent us its "right" int, the right one its "left". */
        CHECK_EQ(nav[0], 100 * round + 10 * left + 1);
        CHECK_EQ(nav[1], 100 * round + 10 * right);
        CHECK_EQ(naw[0], nav[0]);
        CHECK_EQ(naw[1], nav[1]);
    }
    for (int i = 0; i < 3; i++) OK(MPI_Request_free(&nreq[i]));
    OK(MPI_Comm_free(&ring));

    /* A count array entry above INT_MAX: MPI_ERR_COUNT at the start. */
    MPI_Count huge[16];
    for (int r = 0; r < size; r++) huge[r] = (MPI_Count)1 << 40;
    MPI_Request bad;
    OK(MPI_Allgatherv_init_c(send, 1, MPI_INT, all, huge, displs, MPI_INT, MPI_COMM_WORLD,
                             MPI_INFO_NULL, &bad));
    int cls;
    OK(MPI_Error_class(MPI_Start(&bad), &cls));
    CHECK_EQ(cls, MPI_ERR_COUNT);
    OK(MPI_Request_free(&bad));

    /* MPI_Op_create_c: the function sees an MPI_Count length. */
    MPI_Op op;
    OK(MPI_Op_create_c(first, 0, &op));
    int commute;
    OK(MPI_Op_commutative(op, &commute));
    CHECK_EQ(commute, 0);
    int v[3] = {10 * rank, 10 * rank + 1, 10 * rank + 2}, red[3];
    OK(MPI_Allreduce(v, red, 3, MPI_INT, op, MPI_COMM_WORLD));
    for (int i = 0; i < 3; i++) CHECK_EQ(red[i], i); /* rank 0's values */
    /* Some rank applied it (which ones depends on the algorithm). */
    MPI_Count calls = 0;
    OK(MPI_Allreduce(&op_calls, &calls, 1, MPI_COUNT, MPI_SUM, MPI_COMM_WORLD));
    CHECK(calls > 0);
    OK(MPI_Op_free(&op));

    /* MPI_Type_create_darray_c: the same type as the int form. */
    MPI_Count gs[2] = {8, 6};
    int gsi[2] = {8, 6}, dist[2] = {MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_CYCLIC};
    int darg[2] = {MPI_DISTRIBUTE_DFLT_DARG, 2}, ps[2] = {1, 1};
    MPI_Datatype d1, d2;
    OK(MPI_Type_create_darray_c(1, 0, 2, gs, dist, darg, ps, MPI_ORDER_C, MPI_INT, &d1));
    OK(MPI_Type_create_darray(1, 0, 2, gsi, dist, darg, ps, MPI_ORDER_C, MPI_INT, &d2));
    MPI_Count s1, s2;
    OK(MPI_Type_size_c(d1, &s1));
    OK(MPI_Type_size_c(d2, &s2));
    CHECK_EQ(s1, s2);
    CHECK_EQ(s1, 8 * 6 * (MPI_Count)sizeof(int));
    gs[0] = (MPI_Count)1 << 33;
    CHECK_EQ(MPI_Error_class(MPI_Type_create_darray_c(1, 0, 2, gs, dist, darg, ps,
                                                      MPI_ORDER_C, MPI_INT, &d1),
                             &cls),
             MPI_SUCCESS);
    CHECK_EQ(cls, MPI_ERR_COUNT);
    OK(MPI_Type_free(&d2));

    /* MPI_Type_get_contents_c agrees with MPI_Type_get_envelope_c. */
    MPI_Datatype vec;
    OK(MPI_Type_vector(3, 2, 5, MPI_DOUBLE, &vec));
    MPI_Count ni, na, nl, nd_;
    int comb;
    OK(MPI_Type_get_envelope_c(vec, &ni, &na, &nl, &nd_, &comb));
    CHECK_EQ(comb, MPI_COMBINER_VECTOR);
    CHECK_EQ(ni, 3);
    CHECK_EQ(nl, 0);
    int ci[3];
    MPI_Aint ca[1];
    MPI_Count cl[1];
    MPI_Datatype cd[1];
    OK(MPI_Type_get_contents_c(vec, ni, na, nl, nd_, ci, ca, cl, cd));
    CHECK_EQ(ci[0], 3);
    CHECK_EQ(ci[1], 2);
    CHECK_EQ(ci[2], 5);
    CHECK(cd[0] == MPI_DOUBLE);
    OK(MPI_Error_class(MPI_Type_get_contents_c(vec, 1, 0, 0, 1, ci, ca, cl, cd), &cls));
    CHECK_EQ(cls, MPI_ERR_ARG);
    OK(MPI_Type_free(&vec));

    /* MPI_DUP_FN by its symbol (mpi.h makes the name a macro for MPIR_Dup_fn). */
    void *dup_out = NULL;
    int dup_flag = 0;
    OK(PMPI_DUP_FN(MPI_COMM_WORLD, 0, NULL, (void *)&op_calls, &dup_out, &dup_flag));
    CHECK(dup_out == (void *)&op_calls && dup_flag == 1);

    /* The Fortran 2008 status has the C layout; the conversions round-trip. */
    MPI_Status st = {0}, back;
    st.MPI_SOURCE = 3;
    st.MPI_TAG = 7;
    st.MPI_ERROR = MPI_ERR_TAG;
    MPI_F08_status f08;
    MPI_Fint fst[MPI_STATUS_SIZE];
    OK(MPI_Status_c2f08(&st, &f08));
    OK(MPI_Status_f082f(&f08, fst));
    MPI_F08_status f08b;
    OK(MPI_Status_f2f08(fst, &f08b));
    OK(MPI_Status_f082c(&f08b, &back));
    CHECK_EQ(back.MPI_SOURCE, 3);
    CHECK_EQ(back.MPI_TAG, 7);
    CHECK_EQ(back.MPI_ERROR, MPI_ERR_TAG);

    /* MPI_Register_datarep_c: the MPI_Count conversions run on write and read. */
    OK(MPI_Register_datarep_c("flip", flip_read, flip_write, NULL, &reads));
    OK(MPI_Error_class(MPI_Register_datarep_c("flip", flip_read, flip_write, NULL, NULL), &cls));
    CHECK_EQ(cls, MPI_ERR_DUP_DATAREP);
    char name[256];
    snprintf(name, sizeof name, "/tmp/tsunagi-mpi4c-%d-%d", (int)getpid(), rank);
    MPI_File fh;
    OK(MPI_File_open(MPI_COMM_SELF, name, MPI_MODE_RDWR | MPI_MODE_CREATE, MPI_INFO_NULL, &fh));
    OK(MPI_File_set_view(fh, 0, MPI_INT, MPI_INT, "flip", MPI_INFO_NULL));
    int w[4] = {1, 2, 3, rank}, rd[4] = {0};
    OK(MPI_File_write_at(fh, 0, w, 4, MPI_INT, MPI_STATUS_IGNORE));
    OK(MPI_File_read_at(fh, 0, rd, 4, MPI_INT, MPI_STATUS_IGNORE));
    for (int i = 0; i < 4; i++) CHECK_EQ(rd[i], w[i]);
    OK(MPI_File_set_view(fh, 0, MPI_INT, MPI_INT, "native", MPI_INFO_NULL));
    OK(MPI_File_read_at(fh, 0, rd, 4, MPI_INT, MPI_STATUS_IGNORE));
    for (int i = 0; i < 4; i++) CHECK_EQ(rd[i], -w[i]);
    CHECK(reads > 0 && writes > 0);
    OK(MPI_File_close(&fh));
    OK(MPI_File_delete(name, MPI_INFO_NULL));
    (void)got;

    OK(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 0) printf("mpi4 complete ok\n");
    OK(MPI_Finalize());
    return 0;
}
