/* Every blocking collective against hand-computed results (any number of ranks >= 1):
 * bcast, gather(v), scatter(v), allgather(v), alltoall(v,w), reduce, allreduce,
 * reduce_scatter(_block), scan, exscan, reduce_local; MPI_IN_PLACE wherever MPI allows
 * it; derived datatypes; a commutative and a non-commutative user op (2x2 matrix
 * products mod 10007, whose result proves the rank order); error classes. */
#include "check.h"
#include <string.h>

#define MOD 10007
static MPI_Datatype mat_type; /* 4 ints: a 2x2 matrix, row-major */
static int user_calls;

/* inout = in * inout (in holds the lower ranks' product). */
static void matmul(void *in, void *inout, int *len, MPI_Datatype *dt) {
    CHECK_EQ(*dt, mat_type);
    int *a = in, *b = inout;
    for (int k = 0; k < *len; k++, a += 4, b += 4) {
        int c[4];
        c[0] = (a[0] * b[0] + a[1] * b[2]) % MOD;
        c[1] = (a[0] * b[1] + a[1] * b[3]) % MOD;
        c[2] = (a[2] * b[0] + a[3] * b[2]) % MOD;
        c[3] = (a[2] * b[1] + a[3] * b[3]) % MOD;
        memcpy(b, c, sizeof c);
    }
    user_calls++;
}

static void my_sum(void *in, void *inout, int *len, MPI_Datatype *dt) {
    CHECK_EQ(*dt, MPI_INT);
    for (int i = 0; i < *len; i++) ((int *)inout)[i] += ((int *)in)[i];
}

static void mat_of(int r, int m[4]) {
    m[0] = r + 1;
    m[1] = 2 * r + 1;
    m[2] = r % 3;
    m[3] = 1;
}

static void mat_product(int from, int to, int out[4]) { /* M_from * ... * M_(to-1) */
    out[0] = 1, out[1] = 0, out[2] = 0, out[3] = 1;
    for (int r = from; r < to; r++) {
        int m[4], c[4];
        mat_of(r, m);
        c[0] = (out[0] * m[0] + out[1] * m[2]) % MOD;
        c[1] = (out[0] * m[1] + out[1] * m[3]) % MOD;
        c[2] = (out[2] * m[0] + out[3] * m[2]) % MOD;
        c[3] = (out[2] * m[1] + out[3] * m[3]) % MOD;
        memcpy(out, c, sizeof c);
    }
}

static int err_class(int code) {
    int c;
    OK(MPI_Error_class(code, &c));
    return c;
}

int main(int argc, char **argv) {
    int rank, size;
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    MPI_Comm comm = MPI_COMM_WORLD;
    int n = size;
    int *a = malloc(sizeof(int) * 64 * (n + 1)), *b = malloc(sizeof(int) * 64 * (n + 1));
    int *counts = malloc(sizeof(int) * n), *displs = malloc(sizeof(int) * n);
    int *rcounts = malloc(sizeof(int) * n), *rdispls = malloc(sizeof(int) * n);
    CHECK(a && b && counts && displs && rcounts && rdispls);

    /* Bcast from the last rank, contiguous and through a strided vector type. */
    for (int i = 0; i < 10; i++) a[i] = rank == n - 1 ? 7 * i : -1;
    OK(MPI_Bcast(a, 10, MPI_INT, n - 1, comm));
    for (int i = 0; i < 10; i++) CHECK_EQ(a[i], 7 * i);
    MPI_Datatype every_other;
    OK(MPI_Type_vector(5, 1, 2, MPI_INT, &every_other));
    OK(MPI_Type_commit(&every_other));
    for (int i = 0; i < 10; i++) a[i] = rank == 0 ? i : -1;
    OK(MPI_Bcast(a, 1, every_other, 0, comm));
    for (int i = 0; i < 10; i++) CHECK_EQ(a[i], i % 2 == 0 ? i : (rank == 0 ? i : -1));

    /* Gather (2 ints each) to root 0, then in place at root n-1. */
    int mine[2] = {rank, 100 + rank};
    OK(MPI_Gather(mine, 2, MPI_INT, a, 2, MPI_INT, 0, comm));
    if (rank == 0)
        for (int r = 0; r < n; r++) CHECK(a[2 * r] == r && a[2 * r + 1] == 100 + r);
    if (rank == n - 1) {
        for (int r = 0; r < n; r++) a[2 * r] = a[2 * r + 1] = -1;
        a[2 * rank] = rank, a[2 * rank + 1] = 100 + rank;
        OK(MPI_Gather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, a, 2, MPI_INT, n - 1, comm));
        for (int r = 0; r < n; r++) CHECK(a[2 * r] == r && a[2 * r + 1] == 100 + r);
    } else {
        /* recvbuf/recvcount/recvtype are not significant here. */
        OK(MPI_Gather(mine, 2, MPI_INT, NULL, -5, MPI_DATATYPE_NULL, n - 1, comm));
    }

    /* Gatherv: rank r sends r+1 ints, placed in reverse rank order with gaps. */
    for (int i = 0; i <= rank; i++) b[i] = rank * 10 + i;
    int off = 0;
    for (int r = n - 1; r >= 0; r--) {
        counts[r] = r + 1;
        displs[r] = off;
        off += r + 2;
    }
    for (int i = 0; i < off; i++) a[i] = -1;
    OK(MPI_Gatherv(b, rank + 1, MPI_INT, a, counts, displs, MPI_INT, 0, comm));
    if (rank == 0)
        for (int r = 0; r < n; r++) {
            for (int i = 0; i <= r; i++) CHECK_EQ(a[displs[r] + i], r * 10 + i);
            CHECK_EQ(a[displs[r] + r + 1], -1);
        }

    /* Scatter 3 ints each from root 0; in place at the root. */
    if (rank == 0)
        for (int i = 0; i < 3 * n; i++) a[i] = 1000 + i;
    OK(MPI_Scatter(a, 3, MPI_INT, b, 3, MPI_INT, 0, comm));
    for (int i = 0; i < 3; i++) CHECK_EQ(b[i], 1000 + 3 * rank + i);
    if (rank == 0) {
        OK(MPI_Scatter(a, 3, MPI_INT, MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, 0, comm));
        for (int i = 0; i < 3 * n; i++) CHECK_EQ(a[i], 1000 + i);
    } else {
        b[0] = -1;
        OK(MPI_Scatter(NULL, 0, MPI_DATATYPE_NULL, b, 3, MPI_INT, 0, comm));
        CHECK_EQ(b[0], 1000 + 3 * rank);
    }

    /* Scatterv: rank r gets r+1 ints from displacement 2r. */
    for (int r = 0; r < n; r++) counts[r] = r + 1, displs[r] = 2 * r;
    if (rank == n - 1)
        for (int i = 0; i < 3 * n + 1; i++) a[i] = 500 + i;
    for (int i = 0; i < 64; i++) b[i] = -1;
    OK(MPI_Scatterv(a, counts, displs, MPI_INT, b, rank + 1, MPI_INT, n - 1, comm));
    for (int i = 0; i <= rank; i++) CHECK_EQ(b[i], 500 + 2 * rank + i);
    CHECK_EQ(b[rank + 1], -1);

    /* Allgather, normal and in place. */
    OK(MPI_Allgather(mine, 2, MPI_INT, a, 2, MPI_INT, comm));
    for (int r = 0; r < n; r++) CHECK(a[2 * r] == r && a[2 * r + 1] == 100 + r);
    for (int i = 0; i < 2 * n; i++) a[i] = i / 2 == rank ? mine[i % 2] : -1;
    OK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, a, 2, MPI_INT, comm));
    for (int r = 0; r < n; r++) CHECK(a[2 * r] == r && a[2 * r + 1] == 100 + r);

    /* Allgatherv: r+1 ints from rank r, packed in rank order; then in place. */
    off = 0;
    for (int r = 0; r < n; r++) counts[r] = r + 1, displs[r] = off, off += r + 1;
    OK(MPI_Allgatherv(b, rank + 1, MPI_INT, a, counts, displs, MPI_INT, comm));
    for (int r = 0; r < n; r++)
        for (int i = 0; i <= r; i++) CHECK_EQ(a[displs[r] + i], 500 + 2 * r + i);
    for (int i = 0; i < off; i++) a[i] = -1;
    for (int i = 0; i <= rank; i++) a[displs[rank] + i] = 7 * rank + i;
    OK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, a, counts, displs, MPI_INT, comm));
    for (int r = 0; r < n; r++)
        for (int i = 0; i <= r; i++) CHECK_EQ(a[displs[r] + i], 7 * r + i);

    /* Alltoall: block to r is (rank, r); then in place. */
    for (int r = 0; r < n; r++) a[2 * r] = rank, a[2 * r + 1] = r;
    OK(MPI_Alltoall(a, 2, MPI_INT, b, 2, MPI_INT, comm));
    for (int r = 0; r < n; r++) CHECK(b[2 * r] == r && b[2 * r + 1] == rank);
    OK(MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, a, 2, MPI_INT, comm));
    for (int r = 0; r < n; r++) CHECK(a[2 * r] == r && a[2 * r + 1] == rank);

    /* Alltoallv: rank sends r+1 ints to r (values 1000*rank + r), receives rank+1 from each. */
    off = 0;
    for (int r = 0; r < n; r++) {
        counts[r] = r + 1, displs[r] = off;
        for (int i = 0; i <= r; i++) a[off + i] = 1000 * rank + r;
        off += r + 1;
        rcounts[r] = rank + 1, rdispls[r] = r * (rank + 1);
    }
    OK(MPI_Alltoallv(a, counts, displs, MPI_INT, b, rcounts, rdispls, MPI_INT, comm));
    for (int r = 0; r < n; r++)
        for (int i = 0; i <= rank; i++) CHECK_EQ(b[r * (rank + 1) + i], 1000 * r + rank);

    /* Alltoallw: an int to each process, received as doubles?  No: types must match;
     * send ints, receive ints at byte displacements in reverse order. */
    MPI_Datatype *types = malloc(sizeof(MPI_Datatype) * n);
    for (int r = 0; r < n; r++) {
        a[r] = rank * 100 + r;
        counts[r] = 1, displs[r] = r * (int)sizeof(int), types[r] = MPI_INT;
        rcounts[r] = 1, rdispls[r] = (n - 1 - r) * (int)sizeof(int);
    }
    OK(MPI_Alltoallw(a, counts, displs, types, b, rcounts, rdispls, types, comm));
    for (int r = 0; r < n; r++) CHECK_EQ(b[n - 1 - r], r * 100 + rank);
    free(types);

    /* Reduce: SUM and MAX to root n-1, then in place at root 0. */
    int v[3] = {rank, 2 * rank, -rank}, w[3];
    OK(MPI_Reduce(v, w, 3, MPI_INT, MPI_SUM, n - 1, comm));
    if (rank == n - 1) CHECK(w[0] == n * (n - 1) / 2 && w[1] == n * (n - 1) && w[2] == -n * (n - 1) / 2);
    OK(MPI_Reduce(v, w, 3, MPI_INT, MPI_MAX, n - 1, comm));
    if (rank == n - 1) CHECK(w[0] == n - 1 && w[1] == 2 * (n - 1) && w[2] == 0);
    if (rank == 0) {
        memcpy(w, v, sizeof v);
        OK(MPI_Reduce(MPI_IN_PLACE, w, 3, MPI_INT, MPI_SUM, 0, comm));
        CHECK(w[0] == n * (n - 1) / 2 && w[2] == -n * (n - 1) / 2);
    } else {
        OK(MPI_Reduce(v, NULL, 3, MPI_INT, MPI_SUM, 0, comm));
    }

    /* Allreduce: doubles PROD, in place SUM, MINLOC on MPI_2INT. */
    double d = rank + 1.0, dp;
    OK(MPI_Allreduce(&d, &dp, 1, MPI_DOUBLE, MPI_PROD, comm));
    double fact = 1;
    for (int r = 1; r <= n; r++) fact *= r;
    CHECK(dp == fact);
    memcpy(w, v, sizeof v);
    OK(MPI_Allreduce(MPI_IN_PLACE, w, 3, MPI_INT, MPI_SUM, comm));
    CHECK(w[0] == n * (n - 1) / 2 && w[1] == n * (n - 1));
    struct { int val, loc; } pin = {(rank - n / 2) * (rank - n / 2), rank}, pout;
    OK(MPI_Allreduce(&pin, &pout, 1, MPI_2INT, MPI_MINLOC, comm));
    CHECK_EQ(pout.val, 0);
    CHECK_EQ(pout.loc, n / 2);
    OK(MPI_Allreduce(&pin, &pout, 1, MPI_2INT, MPI_MAXLOC, comm));
    CHECK_EQ(pout.loc, 0);

    /* Reduce_scatter_block: 2 ints per rank, element i of everyone's vector is i. */
    for (int i = 0; i < 2 * n; i++) a[i] = i + rank;
    OK(MPI_Reduce_scatter_block(a, w, 2, MPI_INT, MPI_SUM, comm));
    CHECK_EQ(w[0], n * (2 * rank) + n * (n - 1) / 2);
    CHECK_EQ(w[1], n * (2 * rank + 1) + n * (n - 1) / 2);
    /* Reduce_scatter with uneven counts (r % 3 ints to rank r), in place. */
    int tot = 0;
    for (int r = 0; r < n; r++) rcounts[r] = r % 3, tot += r % 3;
    for (int i = 0; i < tot; i++) a[i] = i;
    OK(MPI_Reduce_scatter(MPI_IN_PLACE, a, rcounts, MPI_INT, MPI_SUM, comm));
    int first = 0;
    for (int r = 0; r < rank; r++) first += r % 3;
    for (int i = 0; i < rank % 3; i++) CHECK_EQ(a[i], n * (first + i));

    /* Scan and Exscan. */
    int s;
    OK(MPI_Scan(&rank, &s, 1, MPI_INT, MPI_SUM, comm));
    CHECK_EQ(s, rank * (rank + 1) / 2);
    s = 12345;
    OK(MPI_Exscan(&rank, &s, 1, MPI_INT, MPI_SUM, comm));
    if (rank > 0) CHECK_EQ(s, rank * (rank - 1) / 2);
    s = rank + 1;
    OK(MPI_Scan(MPI_IN_PLACE, &s, 1, MPI_INT, MPI_PROD, comm));
    int f = 1;
    for (int r = 1; r <= rank + 1; r++) f *= r;
    CHECK_EQ(s, f);

    /* Reduce_local. */
    int x[2] = {1, 2}, y[2] = {10, 20};
    OK(MPI_Reduce_local(x, y, 2, MPI_INT, MPI_SUM));
    CHECK(y[0] == 11 && y[1] == 22);

    /* User ops: commutative sum; non-commutative matrix products in rank order. */
    MPI_Op sum_op, mat_op;
    OK(MPI_Op_create(my_sum, 1, &sum_op));
    OK(MPI_Allreduce(&rank, &s, 1, MPI_INT, sum_op, comm));
    CHECK_EQ(s, n * (n - 1) / 2);
    OK(MPI_Type_contiguous(4, MPI_INT, &mat_type));
    OK(MPI_Type_commit(&mat_type));
    OK(MPI_Op_create(matmul, 0, &mat_op));
    int m[8], res[8], want[4];
    mat_of(rank, m);
    mat_of(rank + 7, m + 4);
    mat_product(0, n, want);
    OK(MPI_Reduce(m, res, 1, mat_type, mat_op, 0, comm));
    if (rank == 0) CHECK(memcmp(res, want, sizeof want) == 0);
    OK(MPI_Allreduce(m, res, 2, mat_type, mat_op, comm));
    CHECK(memcmp(res, want, sizeof want) == 0);
    mat_product(0, rank + 1, want);
    OK(MPI_Scan(m, res, 1, mat_type, mat_op, comm));
    CHECK(memcmp(res, want, sizeof want) == 0);
    if (rank > 0) {
        OK(MPI_Exscan(m, res, 1, mat_type, mat_op, comm));
        mat_product(0, rank, want);
        CHECK(memcmp(res, want, sizeof want) == 0);
    } else {
        OK(MPI_Exscan(m, res, 1, mat_type, mat_op, comm));
    }
    if (n > 1) CHECK(user_calls > 0);
    int commute;
    OK(MPI_Op_commutative(mat_op, &commute));
    CHECK_EQ(commute, 0);
    OK(MPI_Op_free(&sum_op));
    OK(MPI_Op_free(&mat_op));

    /* Zero counts. */
    OK(MPI_Allreduce(v, w, 0, MPI_INT, MPI_SUM, comm));
    OK(MPI_Bcast(NULL, 0, MPI_INT, 0, comm));

#ifndef NO_ERROR_TESTS /* Debian's MPICH does not detect all of these (cc -DNO_ERROR_TESTS) */
    /* Error classes through MPI_ERRORS_RETURN. */
    MPI_Comm dup;
    OK(MPI_Comm_dup(comm, &dup));
    OK(MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN));
    CHECK_EQ(err_class(MPI_Bcast(a, 1, MPI_INT, n, dup)), MPI_ERR_ROOT);
    CHECK_EQ(err_class(MPI_Reduce(v, w, 1, MPI_INT, MPI_SUM, -2, dup)), MPI_ERR_ROOT);
    CHECK_EQ(err_class(MPI_Reduce(v, w, -1, MPI_INT, MPI_SUM, 0, dup)), MPI_ERR_COUNT);
    CHECK_EQ(err_class(MPI_Allreduce(v, w, 1, MPI_BYTE, MPI_SUM, dup)), MPI_ERR_OP);
    CHECK_EQ(err_class(MPI_Allreduce(v, w, 1, MPI_INT, MPI_OP_NULL, dup)), MPI_ERR_OP);
    CHECK_EQ(err_class(MPI_Allreduce(v, w, 1, MPI_DOUBLE, MPI_BAND, dup)), MPI_ERR_OP);
    CHECK_EQ(err_class(MPI_Allgather(v, 1, MPI_INT, w, -1, MPI_INT, dup)), MPI_ERR_COUNT);
    OK(MPI_Barrier(dup));
    OK(MPI_Comm_free(&dup));
#endif

    OK(MPI_Type_free(&every_other));
    OK(MPI_Type_free(&mat_type));
    free(a), free(b), free(counts), free(displs), free(rcounts), free(rdispls);
    OK(MPI_Barrier(comm));
    if (rank == 0) printf("coll ok\n");
    OK(MPI_Finalize());
    return 0;
}
