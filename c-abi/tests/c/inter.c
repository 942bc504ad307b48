/* Intercommunicators: creation, queries, point-to-point and probe across the groups,
 * every collective (blocking and non-blocking) against values computed here, for every
 * root kind (MPI_ROOT, MPI_PROC_NULL, a remote rank) with the root in either group at
 * every rank, then dup, split, create and merge. World is split into even (group A) and
 * odd (group B) world ranks; needs 2 or more ranks. */
#include <string.h>

#include "check.h"

static int wrank, wsize, color, lrank, lsize, rsize;
/* World ranks of the remote group of the intercommunicator under test. */
static int rworld[64];

/* The test value at index i of world rank w. */
static int val(int w, int i) { return w * 1000 + i; }
/* World rank of rank j of the remote group. */
static int rw(int j) { return rworld[j]; }

/* Make `ic` the intercommunicator under test: local rank and size, remote world ranks. */
static void view(MPI_Comm ic) {
    MPI_Group rg, wg;
    OK(MPI_Comm_rank(ic, &lrank));
    OK(MPI_Comm_size(ic, &lsize));
    OK(MPI_Comm_remote_size(ic, &rsize));
    CHECK(rsize <= 64);
    OK(MPI_Comm_remote_group(ic, &rg));
    OK(MPI_Comm_group(MPI_COMM_WORLD, &wg));
    for (int j = 0; j < rsize; j++)
        OK(MPI_Group_translate_ranks(rg, 1, &j, wg, &rworld[j]));
    MPI_Group_free(&rg);
    MPI_Group_free(&wg);
}

#define RUN(nb, blocking, nonblocking)                                                 \
    do {                                                                               \
        if (nb) {                                                                      \
            MPI_Request q_ = MPI_REQUEST_NULL;                                         \
            OK(nonblocking);                                                           \
            OK(MPI_Wait(&q_, MPI_STATUS_IGNORE));                                      \
            CHECK(q_ == MPI_REQUEST_NULL);                                             \
        } else {                                                                       \
            OK(blocking);                                                              \
        }                                                                              \
    } while (0)

static void point_to_point(MPI_Comm ic) {
    /* Each rank sends its world rank to every remote rank; receives from any source. */
    int *out = malloc(sizeof(int) * rsize), *in = malloc(sizeof(int) * rsize);
    MPI_Request *rq = malloc(sizeof(MPI_Request) * rsize);
    for (int j = 0; j < rsize; j++) {
        out[j] = wrank;
        OK(MPI_Isend(&out[j], 1, MPI_INT, j, 5, ic, &rq[j]));
    }
    int seen = 0;
    for (int k = 0; k < rsize; k++) {
        MPI_Status st;
        OK(MPI_Probe(MPI_ANY_SOURCE, 5, ic, &st));
        CHECK(st.MPI_SOURCE >= 0 && st.MPI_SOURCE < rsize);
        int v = -1;
        OK(MPI_Recv(&v, 1, MPI_INT, st.MPI_SOURCE, 5, ic, &st));
        CHECK_EQ(v, rw(st.MPI_SOURCE));
        seen |= 1 << st.MPI_SOURCE;
    }
    CHECK_EQ(seen, (1 << rsize) - 1);
    OK(MPI_Waitall(rsize, rq, MPI_STATUSES_IGNORE));
    /* A rank outside the remote group is an error. */
    OK(MPI_Comm_set_errhandler(ic, MPI_ERRORS_RETURN));
    int cls, x = 0;
    MPI_Error_class(MPI_Send(&x, 1, MPI_INT, rsize, 0, ic), &cls);
    CHECK_EQ(cls, MPI_ERR_RANK);
    /* Sendrecv with the same-numbered remote rank (if any) and PROC_NULL. */
    int peer = lrank < rsize ? lrank : MPI_PROC_NULL, got = -1;
    MPI_Status st;
    OK(MPI_Sendrecv(&wrank, 1, MPI_INT, peer, 6, &got, 1, MPI_INT, peer, 6, ic, &st));
    if (peer != MPI_PROC_NULL)
        CHECK_EQ(got, rw(lrank));
    free(out);
    free(in);
    free(rq);
}

static void rooted(MPI_Comm ic, int nb) {
    for (int g = 0; g < 2; g++) {
        int gsize = color == g ? lsize : rsize;
        for (int r = 0; r < gsize; r++) {
            int root = color == g ? (lrank == r ? MPI_ROOT : MPI_PROC_NULL) : r;
            int am_root = root == MPI_ROOT, leaf = color != g;
            int wroot = am_root ? wrank : leaf ? rw(r) : -1;
            /* bcast */
            int b[5];
            for (int i = 0; i < 5; i++)
                b[i] = am_root ? val(wrank, i) : -1;
            RUN(nb, MPI_Bcast(b, 5, MPI_INT, root, ic),
                MPI_Ibcast(b, 5, MPI_INT, root, ic, &q_));
            for (int i = 0; i < 5; i++)
                CHECK_EQ(b[i], am_root || leaf ? val(wroot, i) : -1);
            /* gather / gatherv */
            int s[8], *rb = malloc(sizeof(int) * 8 * (rsize + 1) * (rsize + 1));
            int *cnt = malloc(sizeof(int) * rsize), *dsp = malloc(sizeof(int) * rsize);
            for (int i = 0; i < 8; i++)
                s[i] = val(wrank, i);
            for (int i = 0; i < 3 * rsize; i++)
                rb[i] = -1;
            RUN(nb, MPI_Gather(s, 3, MPI_INT, rb, 3, MPI_INT, root, ic),
                MPI_Igather(s, 3, MPI_INT, rb, 3, MPI_INT, root, ic, &q_));
            if (am_root)
                for (int j = 0; j < rsize; j++)
                    for (int i = 0; i < 3; i++)
                        CHECK_EQ(rb[j * 3 + i], val(rw(j), i));
            for (int j = 0, d = 0; j < rsize; j++) {
                cnt[j] = j % 4 + 1;
                dsp[j] = d;
                d += cnt[j] + 1;
            }
            RUN(nb, MPI_Gatherv(s, lrank % 4 + 1, MPI_INT, rb, cnt, dsp, MPI_INT, root, ic),
                MPI_Igatherv(s, lrank % 4 + 1, MPI_INT, rb, cnt, dsp, MPI_INT, root, ic, &q_));
            if (am_root)
                for (int j = 0; j < rsize; j++)
                    for (int i = 0; i < cnt[j]; i++)
                        CHECK_EQ(rb[dsp[j] + i], val(rw(j), i));
            /* scatter / scatterv */
            int *sb = malloc(sizeof(int) * 8 * (rsize + 1));
            for (int i = 0; i < 8 * (rsize + 1); i++)
                sb[i] = val(wrank, i);
            int got[8];
            for (int i = 0; i < 8; i++)
                got[i] = -1;
            RUN(nb, MPI_Scatter(sb, 2, MPI_INT, got, 2, MPI_INT, root, ic),
                MPI_Iscatter(sb, 2, MPI_INT, got, 2, MPI_INT, root, ic, &q_));
            if (leaf)
                for (int i = 0; i < 2; i++)
                    CHECK_EQ(got[i], val(wroot, lrank * 2 + i));
            RUN(nb, MPI_Scatterv(sb, cnt, dsp, MPI_INT, got, lrank % 4 + 1, MPI_INT, root, ic),
                MPI_Iscatterv(sb, cnt, dsp, MPI_INT, got, lrank % 4 + 1, MPI_INT, root, ic,
                              &q_));
            if (leaf) {
                int d = 0;
                for (int j = 0; j < lrank; j++)
                    d += j % 4 + 2;
                for (int i = 0; i < lrank % 4 + 1; i++)
                    CHECK_EQ(got[i], val(wroot, d + i));
            }
            /* reduce */
            int red[4] = {-1, -1, -1, -1};
            RUN(nb, MPI_Reduce(s, red, 4, MPI_INT, MPI_SUM, root, ic),
                MPI_Ireduce(s, red, 4, MPI_INT, MPI_SUM, root, ic, &q_));
            if (am_root)
                for (int i = 0; i < 4; i++) {
                    int want = 0;
                    for (int j = 0; j < rsize; j++)
                        want += val(rw(j), i);
                    CHECK_EQ(red[i], want);
                }
            free(rb);
            free(sb);
            free(cnt);
            free(dsp);
        }
    }
}

static void all_to_all(MPI_Comm ic, int nb) {
    int n = rsize;
    int *s = malloc(sizeof(int) * 64 * (n + 1)), *r = malloc(sizeof(int) * 64 * (n + 1));
    int *sc = malloc(sizeof(int) * n), *sd = malloc(sizeof(int) * n);
    int *rc = malloc(sizeof(int) * n), *rd = malloc(sizeof(int) * n);
    int *sdb = malloc(sizeof(int) * n), *rdb = malloc(sizeof(int) * n);
    MPI_Datatype *ty = malloc(sizeof(MPI_Datatype) * n);
    /* allgather */
    for (int i = 0; i < 2; i++)
        s[i] = val(wrank, i);
    RUN(nb, MPI_Allgather(s, 2, MPI_INT, r, 2, MPI_INT, ic),
        MPI_Iallgather(s, 2, MPI_INT, r, 2, MPI_INT, ic, &q_));
    for (int j = 0; j < n; j++)
        for (int i = 0; i < 2; i++)
            CHECK_EQ(r[j * 2 + i], val(rw(j), i));
    /* allgatherv: remote rank j sends j%3+1 values */
    for (int i = 0; i < 4; i++)
        s[i] = val(wrank, i);
    for (int j = 0, d = 0; j < n; j++) {
        rc[j] = j % 3 + 1;
        rd[j] = d;
        d += rc[j] + 2;
    }
    RUN(nb, MPI_Allgatherv(s, lrank % 3 + 1, MPI_INT, r, rc, rd, MPI_INT, ic),
        MPI_Iallgatherv(s, lrank % 3 + 1, MPI_INT, r, rc, rd, MPI_INT, ic, &q_));
    for (int j = 0; j < n; j++)
        for (int i = 0; i < rc[j]; i++)
            CHECK_EQ(r[rd[j] + i], val(rw(j), i));
    /* alltoall: block j (2 values) goes to remote j */
    for (int j = 0; j < n; j++)
        for (int i = 0; i < 2; i++)
            s[j * 2 + i] = val(wrank, j * 10 + i);
    RUN(nb, MPI_Alltoall(s, 2, MPI_INT, r, 2, MPI_INT, ic),
        MPI_Ialltoall(s, 2, MPI_INT, r, 2, MPI_INT, ic, &q_));
    for (int j = 0; j < n; j++)
        for (int i = 0; i < 2; i++)
            CHECK_EQ(r[j * 2 + i], val(rw(j), lrank * 10 + i));
    /* alltoallv / alltoallw: local s sends (s + t) % 3 + 1 values to remote t */
    for (int j = 0, d = 0, e = 0; j < n; j++) {
        sc[j] = (lrank + j) % 3 + 1;
        sd[j] = d;
        sdb[j] = d * (int)sizeof(int);
        for (int i = 0; i < sc[j]; i++)
            s[d + i] = val(wrank, j * 10 + i);
        d += sc[j] + 1;
        rc[j] = (j + lrank) % 3 + 1;
        rd[j] = e;
        rdb[j] = e * (int)sizeof(int);
        e += rc[j] + 3;
        ty[j] = MPI_INT;
    }
    RUN(nb, MPI_Alltoallv(s, sc, sd, MPI_INT, r, rc, rd, MPI_INT, ic),
        MPI_Ialltoallv(s, sc, sd, MPI_INT, r, rc, rd, MPI_INT, ic, &q_));
    for (int j = 0; j < n; j++)
        for (int i = 0; i < rc[j]; i++)
            CHECK_EQ(r[rd[j] + i], val(rw(j), lrank * 10 + i));
    memset(r, 0, sizeof(int) * 64);
    RUN(nb, MPI_Alltoallw(s, sc, sdb, ty, r, rc, rdb, ty, ic),
        MPI_Ialltoallw(s, sc, sdb, ty, r, rc, rdb, ty, ic, &q_));
    for (int j = 0; j < n; j++)
        for (int i = 0; i < rc[j]; i++)
            CHECK_EQ(r[rd[j] + i], val(rw(j), lrank * 10 + i));
    /* allreduce: each group gets the sum over the other group */
    for (int i = 0; i < 3; i++)
        s[i] = val(wrank, i);
    RUN(nb, MPI_Allreduce(s, r, 3, MPI_INT, MPI_SUM, ic),
        MPI_Iallreduce(s, r, 3, MPI_INT, MPI_SUM, ic, &q_));
    for (int i = 0; i < 3; i++) {
        int want = 0;
        for (int j = 0; j < n; j++)
            want += val(rw(j), i);
        CHECK_EQ(r[i], want);
    }
    /* reduce_scatter_block: both groups reduce lsize * rsize values */
    int total = lsize * rsize;
    for (int i = 0; i < total; i++)
        s[i] = val(wrank, i);
    RUN(nb, MPI_Reduce_scatter_block(s, r, rsize, MPI_INT, MPI_SUM, ic),
        MPI_Ireduce_scatter_block(s, r, rsize, MPI_INT, MPI_SUM, ic, &q_));
    for (int i = 0; i < rsize; i++) {
        int want = 0;
        for (int j = 0; j < n; j++)
            want += val(rw(j), lrank * rsize + i);
        CHECK_EQ(r[i], want);
    }
    /* reduce_scatter: uneven counts over the local group, same total */
    int *cnts = malloc(sizeof(int) * lsize);
    for (int l = 0; l < lsize; l++)
        cnts[l] = rsize;
    if (lsize > 1 && rsize > 0) {
        cnts[0] -= 1;
        cnts[lsize - 1] += 1;
    }
    int off = 0;
    for (int l = 0; l < lrank; l++)
        off += cnts[l];
    RUN(nb, MPI_Reduce_scatter(s, r, cnts, MPI_INT, MPI_SUM, ic),
        MPI_Ireduce_scatter(s, r, cnts, MPI_INT, MPI_SUM, ic, &q_));
    for (int i = 0; i < cnts[lrank]; i++) {
        int want = 0;
        for (int j = 0; j < n; j++)
            want += val(rw(j), off + i);
        CHECK_EQ(r[i], want);
    }
    RUN(nb, MPI_Barrier(ic), MPI_Ibarrier(ic, &q_));
    free(cnts);
    free(s);
    free(r);
    free(sc);
    free(sd);
    free(rc);
    free(rd);
    free(sdb);
    free(rdb);
    free(ty);
}

/* Several non-blocking collectives outstanding at once on one intercommunicator. */
static void overlapping(MPI_Comm ic) {
    int a[2] = {val(wrank, 0), val(wrank, 1)}, ra[2], b = wrank, rb = -1;
    MPI_Request q[3];
    OK(MPI_Iallreduce(a, ra, 2, MPI_INT, MPI_SUM, ic, &q[0]));
    OK(MPI_Ibarrier(ic, &q[1]));
    int root = color == 0 ? (lrank == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0;
    OK(MPI_Ibcast(&b, 1, MPI_INT, root, ic, &q[2]));
    OK(MPI_Waitall(3, q, MPI_STATUSES_IGNORE));
    if (color == 1)
        CHECK_EQ(b, 0);
    int want = 0;
    for (int j = 0; j < rsize; j++)
        want += val(rw(j), 1);
    CHECK_EQ(ra[1], want);
    (void)rb;
}

static void check_inter(MPI_Comm ic, int want_lsize, int want_rsize) {
    int flag = 0, n;
    OK(MPI_Comm_test_inter(ic, &flag));
    CHECK(flag);
    OK(MPI_Comm_size(ic, &n));
    CHECK_EQ(n, want_lsize);
    OK(MPI_Comm_remote_size(ic, &n));
    CHECK_EQ(n, want_rsize);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    CHECK(wsize >= 2);
    color = wrank % 2;
    MPI_Comm local, ic;
    OK(MPI_Comm_split(MPI_COMM_WORLD, color, wrank, &local));
    MPI_Comm_rank(local, &lrank);
    MPI_Comm_size(local, &lsize);
    /* Only the leaders' peer_comm matters. */
    OK(MPI_Intercomm_create(local, 0, lrank == 0 ? MPI_COMM_WORLD : MPI_COMM_NULL,
                            1 - color, 42, &ic));
    rsize = color == 0 ? wsize / 2 : (wsize + 1) / 2;
    check_inter(ic, lsize, rsize);
    view(ic);
    for (int j = 0; j < rsize; j++)
        CHECK_EQ(rw(j), 2 * j + 1 - color);
    int flag = 1;
    OK(MPI_Comm_test_inter(MPI_COMM_WORLD, &flag));
    CHECK(!flag);
    int rank;
    OK(MPI_Comm_rank(ic, &rank));
    CHECK_EQ(rank, lrank);

    /* The remote group holds the other parity's world ranks in order. */
    MPI_Group rg, wg;
    OK(MPI_Comm_remote_group(ic, &rg));
    OK(MPI_Comm_group(MPI_COMM_WORLD, &wg));
    int n;
    OK(MPI_Group_size(rg, &n));
    CHECK_EQ(n, rsize);
    for (int j = 0; j < rsize; j++) {
        int w;
        OK(MPI_Group_translate_ranks(rg, 1, &j, wg, &w));
        CHECK_EQ(w, rw(j));
    }
    MPI_Group_free(&rg);
    MPI_Group_free(&wg);

    point_to_point(ic);
    for (int nb = 0; nb < 2; nb++) {
        rooted(ic, nb);
        all_to_all(ic, nb);
    }
    overlapping(ic);

    /* Scan is not defined on intercommunicators. */
    int cls, x = 1, y;
    MPI_Error_class(MPI_Scan(&x, &y, 1, MPI_INT, MPI_SUM, ic), &cls);
    CHECK_EQ(cls, MPI_ERR_COMM);
    MPI_Error_class(MPI_Allreduce(MPI_IN_PLACE, &y, 1, MPI_INT, MPI_SUM, ic), &cls);
    CHECK_EQ(cls, MPI_ERR_ARG);
    /* A root outside the remote group is an error (checked locally, nothing is sent). */
    MPI_Error_class(MPI_Bcast(&x, 1, MPI_INT, rsize, ic), &cls);
    CHECK_EQ(cls, MPI_ERR_ROOT);
    int dims[1] = {lsize}, periods[1] = {0};
    MPI_Comm cart;
    MPI_Error_class(MPI_Cart_create(ic, 1, dims, periods, 0, &cart), &cls);
    CHECK_EQ(cls, MPI_ERR_COMM);
    OK(MPI_Comm_set_errhandler(ic, MPI_ERRORS_ARE_FATAL));

    /* dup: same groups, new context (traffic on one does not match the other). */
    MPI_Comm d;
    OK(MPI_Comm_dup(ic, &d));
    check_inter(d, lsize, rsize);
    int res;
    OK(MPI_Comm_compare(ic, d, &res));
    CHECK_EQ(res, MPI_CONGRUENT);
    OK(MPI_Comm_compare(ic, local, &res));
    CHECK_EQ(res, MPI_UNEQUAL);
    int v = wrank, got = -1;
    if (lrank == 0) {
        MPI_Request q;
        OK(MPI_Irecv(&got, 1, MPI_INT, 0, 9, ic, &q));
        OK(MPI_Send(&v, 1, MPI_INT, 0, 9, d));
        int got_d = -1;
        OK(MPI_Recv(&got_d, 1, MPI_INT, 0, 9, d, MPI_STATUS_IGNORE));
        CHECK_EQ(got_d, rw(0));
        OK(MPI_Send(&v, 1, MPI_INT, 0, 9, ic));
        OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
        CHECK_EQ(got, rw(0));
    }
    all_to_all(d, 1);

    /* split by local rank parity: a colour the other side lacks gives MPI_COMM_NULL. */
    MPI_Comm sp;
    int c2 = lrank % 2;
    OK(MPI_Comm_split(ic, c2, -lrank, &sp));
    int my_c = (lsize - c2 + 1) / 2, their_c = (rsize - c2 + 1) / 2;
    if (their_c == 0) {
        CHECK(sp == MPI_COMM_NULL);
    } else {
        check_inter(sp, my_c, their_c);
        int sr;
        OK(MPI_Comm_rank(sp, &sr));
        CHECK_EQ(sr, my_c - 1 - lrank / 2); /* keys are -lrank: reversed order */
        view(sp);
        for (int j = 0; j < rsize; j++) /* the other side reversed its order too */
            CHECK_EQ(rw(j), 2 * (2 * (rsize - 1 - j) + c2) + 1 - color);
        all_to_all(sp, 0);
        view(ic);
        OK(MPI_Comm_free(&sp));
    }
    /* create: each side offers its local group without local rank 0 (if it has more). */
    MPI_Group lg, sub;
    OK(MPI_Comm_group(ic, &lg));
    int zero = 0;
    if (lsize > 1)
        OK(MPI_Group_excl(lg, 1, &zero, &sub));
    else
        sub = lg;
    MPI_Comm cr;
    OK(MPI_Comm_create(ic, sub, &cr));
    int rsub = rsize > 1 ? rsize - 1 : rsize;
    if (lsize > 1 && lrank == 0) {
        CHECK(cr == MPI_COMM_NULL);
    } else {
        check_inter(cr, lsize > 1 ? lsize - 1 : 1, rsub);
        view(cr);
        rooted(cr, 1);
        view(ic);
        OK(MPI_Comm_free(&cr));
    }
    if (sub != lg)
        MPI_Group_free(&sub);
    MPI_Group_free(&lg);

    /* merge: group A (high = 0) first. */
    MPI_Comm m;
    OK(MPI_Intercomm_merge(ic, color, &m));
    OK(MPI_Comm_test_inter(m, &flag));
    CHECK(!flag);
    int mr, ms;
    OK(MPI_Comm_rank(m, &mr));
    OK(MPI_Comm_size(m, &ms));
    CHECK_EQ(ms, wsize);
    CHECK_EQ(mr, color == 0 ? lrank : (wsize + 1) / 2 + lrank);
    int sum = 0;
    OK(MPI_Allreduce(&wrank, &sum, 1, MPI_INT, MPI_SUM, m));
    CHECK_EQ(sum, wsize * (wsize - 1) / 2);
    /* merge with the same high everywhere: the group of world rank 0 first */
    MPI_Comm m2;
    OK(MPI_Intercomm_merge(d, 1, &m2));
    OK(MPI_Comm_rank(m2, &mr));
    CHECK_EQ(mr, color == 0 ? lrank : (wsize + 1) / 2 + lrank);

    OK(MPI_Comm_free(&m2));
    OK(MPI_Comm_free(&m));
    OK(MPI_Comm_free(&d));
    OK(MPI_Comm_free(&ic));
    OK(MPI_Comm_free(&local));
    if (wrank == 0)
        printf("inter ok\n");
    MPI_Finalize();
    return 0;
}
