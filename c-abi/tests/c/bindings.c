/* Cases mpi4py's test suite found (scripts/mpi4py-check), each as its own check so that a
 * regression names the call. Run on 1 and 2 ranks under both progress engines; the same
 * program passes under Debian's MPICH 4.0.2 (mpicc.mpich, mpiexec.hydra). */
#include "check.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A bound for the loops that poll for a completion: fail with a message, not a hang. */
static void expired(time_t start, const char *what) {
    if (time(NULL) - start > 20) {
        fprintf(stderr, "bindings: %s did not complete within 20 s\n", what);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

/* A synchronous send to self completes once the receive matched it, seen by polling with
 * MPI_Request_get_status and MPI_Test alone (mpi4py's test_p2p_obj testCancel). Under the
 * threaded engine the ack to self was queued after the self path had been drained, and
 * no progress thread polls the self path: get_status looped forever. */
static void issend_to_self_completes(MPI_Comm comm) {
    int me;
    MPI_Comm_rank(comm, &me);
    for (int round = 0; round < 2; round++) {
        int x = 40 + round, y = 0, flag = 0;
        MPI_Request r;
        MPI_Status st;
        OK(MPI_Issend(&x, 1, MPI_INT, me, 7, comm, &r));
        if (round == 1) {
            /* mpi4py cancels first: the cancel may succeed (MPICH's does: the message is
             * gone) or not (Tsunagi's: it is at its destination already). */
            int cancelled = 0;
            OK(MPI_Cancel(&r));
            OK(MPI_Request_get_status(r, &flag, &st));
            OK(MPI_Test_cancelled(&st, &cancelled));
            if (cancelled) {
                CHECK(flag);
                OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
                continue;
            }
            CHECK(!flag);
        }
        OK(MPI_Recv(&y, 1, MPI_INT, me, 7, comm, MPI_STATUS_IGNORE));
        CHECK_EQ(y, x);
        time_t start = time(NULL);
        while (!flag) {
            OK(MPI_Request_get_status(r, &flag, &st));
            expired(start, "MPI_Issend to self (MPI_Request_get_status)");
        }
        flag = 0;
        while (!flag) {
            OK(MPI_Test(&r, &flag, &st));
            expired(start, "MPI_Issend to self (MPI_Test)");
        }
        CHECK(r == MPI_REQUEST_NULL);
    }
}

/* MPI_BOTTOM with a struct type of absolute addresses (contiguous, at a non-zero offset
 * from NULL): point-to-point and MPI_Alltoallw, whose local block is copied directly
 * (mpi4py's test_cco_vec testAlltoallwBottom, test_msgspec testMessageBottom). NULL
 * displaced with `offset` is undefined in Rust: the optimiser took the result for NULL. */
static void bottom_with_absolute_addresses(MPI_Comm comm) {
    int size, me;
    MPI_Comm_size(comm, &size);
    MPI_Comm_rank(comm, &me);
    int s[8], r[8], counts[8], displs[8], one = 1;
    MPI_Datatype st[8], rt[8], in = MPI_INT;
    CHECK(size <= 8);
    for (int i = 0; i < size; i++) {
        MPI_Aint a;
        s[i] = me * 100 + i;
        r[i] = -1;
        counts[i] = 1;
        displs[i] = 0;
        OK(MPI_Get_address(&s[i], &a));
        OK(MPI_Type_create_struct(1, &one, &a, &in, &st[i]));
        OK(MPI_Type_commit(&st[i]));
        OK(MPI_Get_address(&r[i], &a));
        OK(MPI_Type_create_struct(1, &one, &a, &in, &rt[i]));
        OK(MPI_Type_commit(&rt[i]));
    }
    OK(MPI_Alltoallw(MPI_BOTTOM, counts, displs, st, MPI_BOTTOM, counts, displs, rt, comm));
    for (int i = 0; i < size; i++) CHECK_EQ(r[i], i * 100 + me);
    /* Point-to-point to self and around a ring, from and into MPI_BOTTOM. */
    int right = (me + 1) % size, left = (me + size - 1) % size;
    r[left] = -1;
    OK(MPI_Sendrecv(MPI_BOTTOM, 1, st[right], right, 3, MPI_BOTTOM, 1, rt[left], left, 3, comm,
                    MPI_STATUS_IGNORE));
    CHECK_EQ(r[left], left * 100 + me);
    for (int i = 0; i < size; i++) {
        OK(MPI_Type_free(&st[i]));
        OK(MPI_Type_free(&rt[i]));
    }
}

/* A persistent collective's count, displacement and datatype arrays are read at
 * initialization (as MPICH does): mpi4py frees them once MPI_*_init returns (its
 * test_cco_pr_buf/test_cco_pr_vec testReduceScatter, testAllgatherv...). Here they are
 * overwritten with garbage and freed before each start. */
static void persistent_collectives_copy_their_arrays(MPI_Comm comm) {
    int size, me;
    MPI_Comm_size(comm, &size);
    MPI_Comm_rank(comm, &me);
    int *counts = malloc(size * sizeof(int)), *displs = malloc(size * sizeof(int));
    int *zeros = malloc(size * sizeof(int));
    MPI_Datatype *types = malloc(size * sizeof(MPI_Datatype));
    int *gathered = malloc(2 * size * sizeof(int)), mine[2] = {me, -me};
    int *sends = malloc(size * sizeof(int)), *recvs = malloc(size * sizeof(int));
    int *sums = malloc(size * sizeof(int)), got = -1;
    CHECK(counts && displs && zeros && types && gathered && sends && recvs && sums);
    for (int i = 0; i < size; i++) {
        counts[i] = 2;
        displs[i] = 2 * (size - 1 - i); /* reversed: a garbage array would not give this */
        zeros[i] = 0;
        types[i] = MPI_INT;
    }
    MPI_Request ag, rs, aw;
    OK(MPI_Allgatherv_init(mine, 2, MPI_INT, gathered, counts, displs, MPI_INT, comm,
                           MPI_INFO_NULL, &ag));
    for (int i = 0; i < size; i++) counts[i] = 1;
    OK(MPI_Reduce_scatter_init(sums, &got, counts, MPI_INT, MPI_SUM, comm, MPI_INFO_NULL, &rs));
    int *wdispls = malloc(size * sizeof(int));
    CHECK(wdispls != NULL);
    for (int i = 0; i < size; i++) wdispls[i] = i * (int)sizeof(int);
    OK(MPI_Alltoallw_init(sends, counts, wdispls, types, recvs, counts, wdispls, types, comm,
                          MPI_INFO_NULL, &aw));
    for (int i = 0; i < size; i++) {
        counts[i] = -7;
        displs[i] = -1000000;
        wdispls[i] = -1000000;
        types[i] = MPI_DATATYPE_NULL;
    }
    free(counts);
    free(displs);
    free(wdispls);
    free(types);
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < 2 * size; i++) gathered[i] = -1;
        for (int i = 0; i < size; i++) {
            sums[i] = (i + 1) * (me + round);
            sends[i] = me * 1000 + i + round;
            recvs[i] = -1;
        }
        got = -1;
        MPI_Request all[3] = {ag, rs, aw};
        OK(MPI_Startall(3, all));
        OK(MPI_Waitall(3, all, MPI_STATUSES_IGNORE));
        for (int i = 0; i < size; i++) {
            CHECK_EQ(gathered[2 * (size - 1 - i)], i);
            CHECK_EQ(gathered[2 * (size - 1 - i) + 1], -i);
            CHECK_EQ(recvs[i], i * 1000 + me + round);
        }
        /* sum over ranks r of (me + 1) * (r + round) */
        CHECK_EQ(got, (me + 1) * (size * (size - 1) / 2 + size * round));
    }
    OK(MPI_Request_free(&ag));
    OK(MPI_Request_free(&rs));
    OK(MPI_Request_free(&aw));
    free(zeros);
    free(gathered);
    free(sends);
    free(recvs);
    free(sums);
}

/* MPI_Session_c2f / MPI_Session_f2c exist and round-trip (mpi4py's test_fortran
 * TestFortranSession; without them mpi4py's fallback gives 0). */
static void session_handles_convert(void) {
    MPI_Session s;
    OK(MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &s));
    MPI_Fint f = MPI_Session_c2f(s);
    CHECK(MPI_Session_f2c(f) == s);
    CHECK(MPI_Session_f2c(MPI_Session_c2f(MPI_SESSION_NULL)) == MPI_SESSION_NULL);
    OK(MPI_Session_finalize(&s));
}

/* A one-sided accumulate that moves nothing is done without the op/datatype check, as
 * in MPICH (mpi4py's test_rma testGetAccumulate: 0 MPI_BYTEs with MPI_SUM). */
static void empty_get_accumulate(MPI_Comm comm) {
    int me;
    MPI_Comm_rank(comm, &me);
    char mem[8] = {0}, o = 0, r = 0;
    MPI_Win win;
    OK(MPI_Win_create(mem, sizeof mem, 1, MPI_INFO_NULL, comm, &win));
    OK(MPI_Win_fence(0, win));
    OK(MPI_Get_accumulate(&o, 0, MPI_BYTE, &r, 0, MPI_BYTE, me, 0, 0, MPI_BYTE, MPI_SUM, win));
    OK(MPI_Accumulate(&o, 0, MPI_BYTE, me, 0, 0, MPI_BYTE, MPI_PROD, win));
    OK(MPI_Win_fence(0, win));
    OK(MPI_Win_fence(0, win));
    OK(MPI_Win_free(&win));
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    issend_to_self_completes(MPI_COMM_SELF);
    issend_to_self_completes(MPI_COMM_WORLD);
    bottom_with_absolute_addresses(MPI_COMM_SELF);
    bottom_with_absolute_addresses(MPI_COMM_WORLD);
    persistent_collectives_copy_their_arrays(MPI_COMM_SELF);
    persistent_collectives_copy_their_arrays(MPI_COMM_WORLD);
    session_handles_convert();
    empty_get_accumulate(MPI_COMM_SELF);
    empty_get_accumulate(MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("bindings ok\n");
    MPI_Finalize();
    return 0;
}
