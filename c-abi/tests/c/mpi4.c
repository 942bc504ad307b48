/* MPI-4 requests: persistent collectives started many times (each run's data differs),
 * MPI_Startall over several of them, one on an intercommunicator; MPI_Isendrecv and
 * MPI_Isendrecv_replace around a ring; generalized requests (query, free and cancel
 * functions, MPI_Request_free before completion). */
#include <string.h>

#include "check.h"

#define RUNS 25

static int rank, size;

static void persistent_collectives(void) {
    int buf[4], s[64], r[64], red[4], sc[16], sd[16], rc[16], rd[16];
    MPI_Request q[8];
    int root = size - 1;
    OK(MPI_Bcast_init(buf, 4, MPI_INT, root, MPI_COMM_WORLD, MPI_INFO_NULL, &q[0]));
    OK(MPI_Allreduce_init(s, red, 4, MPI_INT, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &q[1]));
    OK(MPI_Barrier_init(MPI_COMM_WORLD, MPI_INFO_NULL, &q[2]));
    OK(MPI_Allgather_init(s, 2, MPI_INT, r, 2, MPI_INT, MPI_COMM_WORLD, MPI_INFO_NULL, &q[3]));
    for (int run = 0; run < RUNS; run++) {
        for (int i = 0; i < 4; i++) {
            buf[i] = rank == root ? run * 10 + i : -1;
            s[i] = rank + run + i;
        }
        OK(MPI_Start(&q[0]));
        OK(MPI_Wait(&q[0], MPI_STATUS_IGNORE));
        CHECK(q[0] != MPI_REQUEST_NULL);
        for (int i = 0; i < 4; i++)
            CHECK_EQ(buf[i], run * 10 + i);
        OK(MPI_Startall(3, &q[1]));
        OK(MPI_Waitall(3, &q[1], MPI_STATUSES_IGNORE));
        for (int i = 0; i < 4; i++)
            CHECK_EQ(red[i], size * (run + i) + size * (size - 1) / 2);
        for (int p = 0; p < size; p++)
            for (int i = 0; i < 2; i++)
                CHECK_EQ(r[p * 2 + i], p + run + i);
    }
    for (int k = 0; k < 4; k++) {
        OK(MPI_Request_free(&q[k]));
        CHECK(q[k] == MPI_REQUEST_NULL);
    }
    /* The rooted and vector ones, a few runs each. */
    for (int p = 0; p < size; p++) {
        sc[p] = p % 3 + 1;
        sd[p] = p * 4;
        rc[p] = rank % 3 + 1;
        rd[p] = p * 4;
    }
    OK(MPI_Gather_init(s, 3, MPI_INT, r, 3, MPI_INT, 0, MPI_COMM_WORLD, MPI_INFO_NULL, &q[0]));
    OK(MPI_Scatterv_init(s, sc, sd, MPI_INT, buf, rank % 3 + 1, MPI_INT, 0, MPI_COMM_WORLD,
                         MPI_INFO_NULL, &q[1]));
    OK(MPI_Reduce_init(s, red, 2, MPI_INT, MPI_MAX, root, MPI_COMM_WORLD, MPI_INFO_NULL,
                       &q[2]));
    OK(MPI_Alltoallv_init(s, rc, rd, MPI_INT, r + 32, sc, sd, MPI_INT, MPI_COMM_WORLD,
                          MPI_INFO_NULL, &q[3]));
    OK(MPI_Scan_init(s, red + 2, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &q[4]));
    OK(MPI_Reduce_scatter_block_init(s, buf + 3, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD,
                                     MPI_INFO_NULL, &q[5]));
    for (int run = 0; run < 5; run++) {
        for (int i = 0; i < 64; i++)
            s[i] = rank * 100 + run + i;
        /* gather, scatterv, reduce, alltoallv */
        for (int k = 0; k < 4; k++) {
            OK(MPI_Start(&q[k]));
            OK(MPI_Wait(&q[k], MPI_STATUS_IGNORE));
        }
        if (rank == 0)
            for (int p = 0; p < size; p++)
                for (int i = 0; i < 3; i++)
                    CHECK_EQ(r[p * 3 + i], p * 100 + run + i);
        for (int i = 0; i < rank % 3 + 1; i++)
            CHECK_EQ(buf[i], run + rank * 4 + i);
        if (rank == root)
            for (int i = 0; i < 2; i++)
                CHECK_EQ(red[i], (size - 1) * 100 + run + i);
        for (int p = 0; p < size; p++)
            for (int i = 0; i < sc[p]; i++)
                CHECK_EQ(r[32 + p * 4 + i], p * 100 + run + rank * 4 + i);
        OK(MPI_Startall(2, &q[4]));
        OK(MPI_Waitall(2, &q[4], MPI_STATUSES_IGNORE));
        CHECK_EQ(red[2], 100 * rank * (rank + 1) / 2 + (rank + 1) * run);
        CHECK_EQ(buf[3], 100 * size * (size - 1) / 2 + size * (run + rank));
    }
    /* Starting an active one is an error; freeing an inactive one is not. */
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    OK(MPI_Start(&q[2]));
    int cls;
    MPI_Error_class(MPI_Start(&q[2]), &cls);
    CHECK_EQ(cls, MPI_ERR_REQUEST);
    OK(MPI_Wait(&q[2], MPI_STATUS_IGNORE));
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
    for (int k = 0; k < 6; k++)
        OK(MPI_Request_free(&q[k]));
}

/* Persistent neighbourhood collectives on a periodic ring, and the checks made at
 * initialization (a negative count, a freed communicator's handle is not tried: MPI leaves
 * that undefined). */
static void persistent_neighbors(void) {
    MPI_Comm ring;
    int dims[1] = {size}, periods[1] = {1};
    OK(MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &ring));
    int left, right;
    OK(MPI_Cart_shift(ring, 0, 1, &left, &right));
    int s[2], r[4], g[4];
    MPI_Request q[2];
    OK(MPI_Neighbor_alltoall_init(s, 1, MPI_INT, r, 1, MPI_INT, ring, MPI_INFO_NULL, &q[0]));
    OK(MPI_Neighbor_allgather_init(&s[0], 1, MPI_INT, g, 1, MPI_INT, ring, MPI_INFO_NULL,
                                   &q[1]));
    for (int run = 0; run < RUNS; run++) {
        /* To the left neighbour s[0], to the right s[1]. */
        s[0] = rank * 10 + run;
        s[1] = rank * 10 + run + 5;
        OK(MPI_Startall(2, q));
        OK(MPI_Waitall(2, q, MPI_STATUSES_IGNORE));
        /* From the left neighbour its right block, from the right one its left block. */
        CHECK_EQ(r[0], left * 10 + run + 5);
        CHECK_EQ(r[1], right * 10 + run);
        CHECK_EQ(g[0], left * 10 + run);
        CHECK_EQ(g[1], right * 10 + run);
    }
    OK(MPI_Request_free(&q[0]));
    OK(MPI_Request_free(&q[1]));
    OK(MPI_Comm_set_errhandler(ring, MPI_ERRORS_RETURN));
    MPI_Request bad = MPI_REQUEST_NULL;
    int cls;
    MPI_Error_class(MPI_Bcast_init(s, -1, MPI_INT, 0, ring, MPI_INFO_NULL, &bad), &cls);
    CHECK_EQ(cls, MPI_ERR_COUNT);
    CHECK(bad == MPI_REQUEST_NULL);
    /* An invalid communicator reports through MPI_COMM_WORLD's handler. */
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    MPI_Error_class(MPI_Barrier_init(MPI_COMM_NULL, MPI_INFO_NULL, &bad), &cls);
    CHECK_EQ(cls, MPI_ERR_COMM);
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
    OK(MPI_Comm_free(&ring));
}

/* A persistent collective on an intercommunicator (even and odd world ranks). */
static void persistent_inter(void) {
    if (size < 2)
        return;
    MPI_Comm local, ic;
    OK(MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &local));
    OK(MPI_Intercomm_create(local, 0, MPI_COMM_WORLD, 1 - rank % 2, 3, &ic));
    int lrank, x, sum;
    OK(MPI_Comm_rank(local, &lrank));
    MPI_Request q;
    OK(MPI_Allreduce_init(&x, &sum, 1, MPI_INT, MPI_SUM, ic, MPI_INFO_NULL, &q));
    for (int run = 0; run < RUNS; run++) {
        x = rank + run;
        OK(MPI_Start(&q));
        OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
        int want = 0;
        for (int w = 1 - rank % 2; w < size; w += 2)
            want += w + run;
        CHECK_EQ(sum, want);
    }
    OK(MPI_Request_free(&q));
    OK(MPI_Comm_free(&ic));
    OK(MPI_Comm_free(&local));
}

static void isendrecv(void) {
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    int out[3] = {rank, rank * 2, rank * 3}, in[3] = {-1, -1, -1};
    MPI_Request q;
    MPI_Status st;
    OK(MPI_Isendrecv(out, 3, MPI_INT, right, 7, in, 3, MPI_INT, left, 7, MPI_COMM_WORLD, &q));
    OK(MPI_Wait(&q, &st));
    CHECK(q == MPI_REQUEST_NULL);
    CHECK_EQ(st.MPI_SOURCE, left);
    CHECK_EQ(st.MPI_TAG, 7);
    int n;
    OK(MPI_Get_count(&st, MPI_INT, &n));
    CHECK_EQ(n, 3);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(in[i], left * (i + 1));
    /* replace, with a strided type: every other int travels */
    int b[6] = {rank, -9, rank + 1, -9, rank + 2, -9};
    MPI_Datatype every_other;
    OK(MPI_Type_vector(3, 1, 2, MPI_INT, &every_other));
    OK(MPI_Type_commit(&every_other));
    OK(MPI_Isendrecv_replace(b, 1, every_other, left, 8, right, 8, MPI_COMM_WORLD, &q));
    int flag = 0;
    while (!flag)
        OK(MPI_Test(&q, &flag, &st));
    CHECK_EQ(st.MPI_SOURCE, right);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(b[2 * i], right + i);
        CHECK_EQ(b[2 * i + 1], -9);
    }
    OK(MPI_Type_free(&every_other));
    /* MPI_PROC_NULL on both sides completes at once with the empty source. */
    OK(MPI_Isendrecv(out, 1, MPI_INT, MPI_PROC_NULL, 0, in, 1, MPI_INT, MPI_PROC_NULL, 0,
                     MPI_COMM_WORLD, &q));
    OK(MPI_Wait(&q, &st));
    CHECK_EQ(st.MPI_SOURCE, MPI_PROC_NULL);
}

struct gstate {
    int queried, freed, cancelled, complete_at_cancel;
};

static int query_fn(void *extra, MPI_Status *st) {
    struct gstate *g = extra;
    g->queried++;
    OK(MPI_Status_set_elements(st, MPI_INT, 5));
    OK(MPI_Status_set_cancelled(st, g->cancelled));
    st->MPI_SOURCE = 42;
    st->MPI_TAG = 24;
    return MPI_SUCCESS;
}
static int free_fn(void *extra) {
    ((struct gstate *)extra)->freed++;
    return MPI_SUCCESS;
}
static int cancel_fn(void *extra, int complete) {
    struct gstate *g = extra;
    g->cancelled++;
    g->complete_at_cancel = complete;
    return MPI_SUCCESS;
}

static void grequests(void) {
    struct gstate g = {0, 0, 0, 0};
    MPI_Request q;
    MPI_Status st;
    int flag = 1;
    OK(MPI_Grequest_start(query_fn, free_fn, cancel_fn, &g, &q));
    OK(MPI_Test(&q, &flag, &st));
    CHECK(!flag);
    CHECK_EQ(g.queried, 0);
    OK(MPI_Grequest_complete(q));
    OK(MPI_Wait(&q, &st));
    CHECK(q == MPI_REQUEST_NULL);
    CHECK_EQ(g.queried, 1);
    CHECK_EQ(g.freed, 1);
    CHECK_EQ(st.MPI_SOURCE, 42);
    CHECK_EQ(st.MPI_TAG, 24);
    int n;
    OK(MPI_Get_count(&st, MPI_INT, &n));
    CHECK_EQ(n, 5);

    /* cancel before completion: the cancel function learns it was not complete */
    struct gstate h = {0, 0, 0, 0};
    OK(MPI_Grequest_start(query_fn, free_fn, cancel_fn, &h, &q));
    OK(MPI_Cancel(&q));
    CHECK_EQ(h.cancelled, 1);
    CHECK_EQ(h.complete_at_cancel, 0);
    OK(MPI_Grequest_complete(q));
    OK(MPI_Wait(&q, &st));
    OK(MPI_Test_cancelled(&st, &flag));
    CHECK(flag);

    /* several at once, completed in reverse order, waited with waitall */
    struct gstate gs[4] = {{0, 0, 0, 0}};
    MPI_Request qs[4];
    for (int k = 0; k < 4; k++)
        OK(MPI_Grequest_start(query_fn, free_fn, cancel_fn, &gs[k], &qs[k]));
    for (int k = 3; k >= 0; k--)
        OK(MPI_Grequest_complete(qs[k]));
    OK(MPI_Waitall(4, qs, MPI_STATUSES_IGNORE));
    for (int k = 0; k < 4; k++)
        CHECK_EQ(gs[k].freed, 1);

    /* freed before completion: completes in the background, the free function runs */
    struct gstate f = {0, 0, 0, 0};
    OK(MPI_Grequest_start(query_fn, free_fn, cancel_fn, &f, &q));
    MPI_Request keep = q;
    OK(MPI_Request_free(&q));
    CHECK(q == MPI_REQUEST_NULL);
    OK(MPI_Grequest_complete(keep));
    CHECK_EQ(f.freed, 1);
}

/* MPI_Comm_idup (truly non-blocking: rank 1 receives before it calls it, rank 0 sends
 * after), MPI_Comm_create_group over disjoint groups at once, MPI_Info_get_string,
 * MPI_Comm_split_type with MPI_COMM_TYPE_HW_GUIDED. */
static void communicators(void) {
    int kv, x = 7, flag, *got;
    OK(MPI_Comm_create_keyval(MPI_COMM_DUP_FN, MPI_COMM_NULL_DELETE_FN, &kv, NULL));
    OK(MPI_Comm_set_attr(MPI_COMM_WORLD, kv, &x));
    MPI_Comm a, b;
    MPI_Request q[2];
    if (rank == 1)
        OK(MPI_Recv(&x, 1, MPI_INT, 0, 11, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    OK(MPI_Comm_idup(MPI_COMM_WORLD, &a, &q[0]));
    OK(MPI_Comm_idup_with_info(MPI_COMM_WORLD, MPI_INFO_NULL, &b, &q[1]));
    if (rank == 0 && size > 1)
        OK(MPI_Send(&x, 1, MPI_INT, 1, 11, MPI_COMM_WORLD));
    OK(MPI_Waitall(2, q, MPI_STATUSES_IGNORE));
    int res;
    OK(MPI_Comm_compare(a, MPI_COMM_WORLD, &res));
    CHECK_EQ(res, MPI_CONGRUENT);
    OK(MPI_Comm_compare(a, b, &res));
    CHECK_EQ(res, MPI_CONGRUENT);
    OK(MPI_Comm_get_attr(a, kv, &got, &flag));
    CHECK(flag && *got == 7);
    int sum;
    OK(MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, a));
    CHECK_EQ(sum, size * (size - 1) / 2);
    OK(MPI_Comm_free(&a));
    OK(MPI_Comm_free(&b));
    OK(MPI_Comm_delete_attr(MPI_COMM_WORLD, kv));
    OK(MPI_Comm_free_keyval(&kv));

    /* create_group: even and odd ranks each make theirs, with different tags */
    MPI_Group wg, pg;
    int ranks[8], n = 0;
    for (int r = rank % 2; r < size; r += 2)
        ranks[n++] = r;
    OK(MPI_Comm_group(MPI_COMM_WORLD, &wg));
    OK(MPI_Group_incl(wg, n, ranks, &pg));
    MPI_Comm c;
    OK(MPI_Comm_create_group(MPI_COMM_WORLD, pg, 100 + rank % 2, &c));
    int cr, cs;
    OK(MPI_Comm_rank(c, &cr));
    OK(MPI_Comm_size(c, &cs));
    CHECK_EQ(cr, rank / 2);
    CHECK_EQ(cs, n);
    OK(MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, c));
    int want = 0;
    for (int i = 0; i < n; i++)
        want += ranks[i];
    CHECK_EQ(sum, want);
    OK(MPI_Comm_free(&c));
    /* the same groups through MPI_Comm_create_from_group (no parent communicator) */
    OK(MPI_Comm_create_from_group(pg, "org.tsunagi.mpi4", MPI_INFO_NULL, MPI_ERRORS_RETURN,
                                  &c));
    OK(MPI_Comm_rank(c, &cr));
    CHECK_EQ(cr, rank / 2);
    MPI_Errhandler eh;
    OK(MPI_Comm_get_errhandler(c, &eh));
    CHECK(eh == MPI_ERRORS_RETURN);
    OK(MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, c));
    CHECK_EQ(sum, want);
    OK(MPI_Comm_free(&c));
    OK(MPI_Group_free(&pg));
    OK(MPI_Group_free(&wg));

    /* MPI_Info_get_string */
    MPI_Info info;
    OK(MPI_Info_create(&info));
    OK(MPI_Info_set(info, "k", "hello"));
    char v[16];
    int len = 0;
    OK(MPI_Info_get_string(info, "k", &len, NULL, &flag));
    CHECK(flag);
    CHECK_EQ(len, 6);
    len = 3;
    OK(MPI_Info_get_string(info, "k", &len, v, &flag));
    CHECK(flag && strcmp(v, "he") == 0);
    CHECK_EQ(len, 6);
    len = 16;
    OK(MPI_Info_get_string(info, "k", &len, v, &flag));
    CHECK(flag && strcmp(v, "hello") == 0);
    OK(MPI_Info_get_string(info, "missing", &len, v, &flag));
    CHECK(!flag);

    /* MPI_COMM_TYPE_HW_GUIDED: shared memory is the node; anything else is no group */
    OK(MPI_Info_set(info, "mpi_hw_resource_type", "mpi_shared_memory"));
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_HW_GUIDED, rank, info, &c));
    CHECK(c != MPI_COMM_NULL);
    OK(MPI_Comm_size(c, &cs));
    CHECK_EQ(cs, size); /* one node */
    OK(MPI_Comm_free(&c));
    OK(MPI_Info_set(info, "mpi_hw_resource_type", "no_such_resource"));
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_HW_GUIDED, rank, info, &c));
    CHECK(c == MPI_COMM_NULL);
    OK(MPI_Info_free(&info));
}

/* Partitioned communication between ranks 0 and 1: 8 partitions of 3 ints marked ready
 * out of order (single, range, list), polled with MPI_Parrived, reused RUNS times, next to
 * an ordinary message with the same tag. */
static void partitioned(void) {
    if (size < 2 || rank > 1)
        return;
    enum { P = 8, C = 3 };
    int buf[P * C], x;
    MPI_Request q;
    if (rank == 0) {
        OK(MPI_Psend_init(buf, P, C, MPI_INT, 1, 9, MPI_COMM_WORLD, MPI_INFO_NULL, &q));
        for (int run = 0; run < RUNS; run++) {
            for (int i = 0; i < P * C; i++)
                buf[i] = run * 1000 + i;
            x = run;
            OK(MPI_Send(&x, 1, MPI_INT, 1, 9, MPI_COMM_WORLD));
            OK(MPI_Start(&q));
            for (int p = P - 1; p >= 4; p--)
                OK(MPI_Pready(p, q));
            OK(MPI_Pready_range(0, 1, q));
            int rest[2] = {3, 2};
            OK(MPI_Pready_list(2, rest, q));
            OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
        }
    } else {
        OK(MPI_Precv_init(buf, P, C, MPI_INT, 0, 9, MPI_COMM_WORLD, MPI_INFO_NULL, &q));
        for (int run = 0; run < RUNS; run++) {
            for (int i = 0; i < P * C; i++)
                buf[i] = -1;
            OK(MPI_Start(&q));
            int flag = 0;
            while (!flag)
                OK(MPI_Parrived(q, 0, &flag));
            for (int i = 0; i < C; i++)
                CHECK_EQ(buf[i], run * 1000 + i);
            OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
            for (int i = 0; i < P * C; i++)
                CHECK_EQ(buf[i], run * 1000 + i);
            OK(MPI_Parrived(q, P - 1, &flag)); /* inactive: true */
            CHECK(flag);
            OK(MPI_Recv(&x, 1, MPI_INT, 0, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            CHECK_EQ(x, run);
        }
    }
    OK(MPI_Request_free(&q));
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(size <= 8);
    persistent_collectives();
    persistent_neighbors();
    persistent_inter();
    isendrecv();
    grequests();
    communicators();
    partitioned();
    if (rank == 0)
        printf("mpi4 ok\n");
    MPI_Finalize();
    return 0;
}
