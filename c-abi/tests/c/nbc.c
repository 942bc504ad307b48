/* Non-blocking collectives (any number of ranks >= 1): several outstanding at once,
 * overlapped with point-to-point traffic on the same communicator, completed through
 * MPI_Wait, MPI_Test loops, MPI_Waitall/Testall/Waitany/Waitsome on arrays that mix
 * collective and point-to-point requests, MPI_Request_get_status; error classes. */
#include "check.h"
#include <string.h>

static void noncommutative(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    /* Affine maps x -> a x + b, composed: (in o inout); integers mod 1000. */
    int *p = in, *q = inout;
    for (int i = 0; i < *len; i++, p += 2, q += 2) {
        int a = p[0] * q[0] % 1000, b = (p[0] * q[1] + p[1]) % 1000;
        q[0] = a, q[1] = b;
    }
}

int main(int argc, char **argv) {
    int rank, size;
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    MPI_Comm comm = MPI_COMM_WORLD;
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;

    for (int iter = 0; iter < 3; iter++) {
        /* Four collectives and a ring exchange outstanding together. */
        MPI_Request req[6];
        int bval = rank == 0 ? 42 + iter : -1;
        int sum = -1, one = rank + iter;
        int *all = malloc(sizeof(int) * size);
        int out = rank * 10 + iter, in = -1;
        OK(MPI_Ibarrier(comm, &req[0]));
        OK(MPI_Ibcast(&bval, 1, MPI_INT, 0, comm, &req[1]));
        OK(MPI_Irecv(&in, 1, MPI_INT, prev, 5, comm, &req[2]));
        OK(MPI_Iallreduce(&one, &sum, 1, MPI_INT, MPI_SUM, comm, &req[3]));
        OK(MPI_Isend(&out, 1, MPI_INT, next, 5, comm, &req[4]));
        OK(MPI_Iallgather(&one, 1, MPI_INT, all, 1, MPI_INT, comm, &req[5]));
        MPI_Status st[6];
        OK(MPI_Waitall(6, req, st));
        for (int i = 0; i < 6; i++) CHECK_EQ(req[i], MPI_REQUEST_NULL);
        CHECK_EQ(bval, 42 + iter);
        CHECK_EQ(sum, size * (size - 1) / 2 + size * iter);
        CHECK_EQ(in, prev * 10 + iter);
        CHECK_EQ(st[2].MPI_SOURCE, prev);
        for (int r = 0; r < size; r++) CHECK_EQ(all[r], r + iter);
        free(all);
    }

    /* A Test loop with point-to-point traffic while the collective is in flight. */
    {
        int v[4] = {rank, rank, rank, rank}, w[4];
        MPI_Request r;
        OK(MPI_Iallreduce(v, w, 4, MPI_INT, MPI_MAX, comm, &r));
        int flag = 0, token = rank, got = -1;
        for (int k = 0; k < 5; k++) { /* the same number of exchanges on every rank */
            OK(MPI_Sendrecv(&token, 1, MPI_INT, next, 9, &got, 1, MPI_INT, prev, 9, comm,
                            MPI_STATUS_IGNORE));
            CHECK_EQ(got, prev);
            if (!flag) OK(MPI_Test(&r, &flag, MPI_STATUS_IGNORE));
        }
        while (!flag) OK(MPI_Test(&r, &flag, MPI_STATUS_IGNORE));
        CHECK_EQ(r, MPI_REQUEST_NULL);
        for (int i = 0; i < 4; i++) CHECK_EQ(w[i], size - 1);
    }

    /* Waitany / Waitsome over mixed arrays; Ireduce with a non-commutative user op. */
    {
        MPI_Op op;
        OK(MPI_Op_create(noncommutative, 0, &op));
        int f[2] = {rank % 7 + 2, rank + 1}, g[2] = {-1, -1};
        int scanv = rank, scanr = -1, exr = -7;
        MPI_Request req[4];
        OK(MPI_Ireduce(f, g, 1, MPI_2INT, op, 0, comm, &req[0]));
        OK(MPI_Iscan(&scanv, &scanr, 1, MPI_INT, MPI_SUM, comm, &req[1]));
        OK(MPI_Iexscan(&scanv, &exr, 1, MPI_INT, MPI_SUM, comm, &req[2]));
        req[3] = MPI_REQUEST_NULL;
        int done = 0;
        while (done < 3) {
            int idx;
            OK(MPI_Waitany(4, req, &idx, MPI_STATUS_IGNORE));
            CHECK(idx >= 0 && idx < 3);
            CHECK_EQ(req[idx], MPI_REQUEST_NULL);
            done++;
        }
        int idx;
        OK(MPI_Waitany(4, req, &idx, MPI_STATUS_IGNORE));
        CHECK_EQ(idx, MPI_UNDEFINED);
        if (rank == 0) {
            /* f_0 o f_1 o ... o f_(n-1), composed right to left. */
            int a = 1, b = 0;
            for (int r = size - 1; r >= 0; r--) {
                int ra = r % 7 + 2, rb = r + 1;
                b = (ra * b + rb) % 1000;
                a = ra * a % 1000;
            }
            CHECK(g[0] == a && g[1] == b);
        }
        CHECK_EQ(scanr, rank * (rank + 1) / 2);
        if (rank > 0) CHECK_EQ(exr, rank * (rank - 1) / 2);
        OK(MPI_Op_free(&op));

        int *sb = malloc(sizeof(int) * size), *rb = malloc(sizeof(int) * size);
        for (int r = 0; r < size; r++) sb[r] = rank * 100 + r;
        int x = rank, y = -1;
        OK(MPI_Ialltoall(sb, 1, MPI_INT, rb, 1, MPI_INT, comm, &req[0]));
        OK(MPI_Isend(&x, 1, MPI_INT, next, 11, comm, &req[1]));
        OK(MPI_Irecv(&y, 1, MPI_INT, prev, 11, comm, &req[2]));
        done = 0;
        while (done < 3) {
            int outc, ids[3];
            OK(MPI_Waitsome(3, req, &outc, ids, MPI_STATUSES_IGNORE));
            CHECK(outc >= 1);
            done += outc;
        }
        CHECK_EQ(done, 3);
        for (int r = 0; r < size; r++) CHECK_EQ(rb[r], r * 100 + rank);
        CHECK_EQ(y, prev);

        /* Testall loop on Igather + Iscatter. */
        int *gat = malloc(sizeof(int) * size);
        int sc = -1;
        OK(MPI_Igather(&x, 1, MPI_INT, gat, 1, MPI_INT, size - 1, comm, &req[0]));
        OK(MPI_Iscatter(sb, 1, MPI_INT, &sc, 1, MPI_INT, 0, comm, &req[1]));
        int flag = 0;
        while (!flag) OK(MPI_Testall(2, req, &flag, MPI_STATUSES_IGNORE));
        if (rank == size - 1)
            for (int r = 0; r < size; r++) CHECK_EQ(gat[r], r);
        CHECK_EQ(sc, rank); /* root 0's sb[r] = r */
        free(gat), free(sb), free(rb);
    }

    /* Request_free of an outstanding collective; Request_get_status; in place. */
    {
        int v = rank, w = -1;
        MPI_Request r;
        OK(MPI_Iallreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_SUM, comm, &r));
        int flag = 0;
        while (!flag) OK(MPI_Request_get_status(r, &flag, MPI_STATUS_IGNORE));
        CHECK(r != MPI_REQUEST_NULL);
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        CHECK_EQ(v, size * (size - 1) / 2);
        /* MPI-3.1 §5.12: freeing or cancelling a collective request is erroneous. */
        OK(MPI_Ibarrier(comm, &r));
        OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
        /* Tsunagi says MPI_ERR_REQUEST, MPICH MPI_ERR_OTHER. */
        CHECK(MPI_Request_free(&r) != MPI_SUCCESS);
        CHECK(MPI_Cancel(&r) != MPI_SUCCESS);
        OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
        CHECK(r != MPI_REQUEST_NULL);
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        if (rank == 0) w = 77;
        OK(MPI_Ibcast(&w, 1, MPI_INT, 0, comm, &r));
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        CHECK_EQ(w, 77);
    }

    /* Progress while blocked in point-to-point: rank 0 receives from rank 1, which sends
     * only once the barrier completed, which needs rank 0's part of it to advance. */
    {
        MPI_Request r;
        int token = -1;
        OK(MPI_Ibarrier(comm, &r));
        if (rank == 0 && size > 1) {
            OK(MPI_Recv(&token, 1, MPI_INT, 1, 21, comm, MPI_STATUS_IGNORE));
            CHECK_EQ(token, 1);
            OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        } else {
            OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
            if (rank == 1) OK(MPI_Send(&rank, 1, MPI_INT, 0, 21, comm));
        }
    }

#ifndef NO_ERROR_TESTS /* Debian's MPICH does not detect all of these (cc -DNO_ERROR_TESTS) */
    /* Errors: wrong root, negative count, op/type mismatch. */
    {
        MPI_Comm dup;
        OK(MPI_Comm_dup(comm, &dup));
        OK(MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN));
        MPI_Request r = MPI_REQUEST_NULL;
        int v = 1, w, cls;
        OK(MPI_Error_class(MPI_Ibcast(&v, 1, MPI_INT, size, dup, &r), &cls));
        CHECK_EQ(cls, MPI_ERR_ROOT);
        OK(MPI_Error_class(MPI_Iallreduce(&v, &w, -3, MPI_INT, MPI_SUM, dup, &r), &cls));
        CHECK_EQ(cls, MPI_ERR_COUNT);
        OK(MPI_Error_class(MPI_Iallreduce(&v, &w, 1, MPI_FLOAT, MPI_BXOR, dup, &r), &cls));
        CHECK_EQ(cls, MPI_ERR_OP);
        OK(MPI_Comm_free(&dup));
    }
#endif

    OK(MPI_Barrier(comm));
    if (rank == 0) printf("nbc ok\n");
    OK(MPI_Finalize());
    return 0;
}
