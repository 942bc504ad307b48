/* Point-to-point in every mode, wildcards and status fields (any number of ranks >= 2). */
#include "check.h"
#include <string.h>

static void ring_mode(int rank, int size, int mode) {
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    int out[64], in[64];
    for (int i = 0; i < 64; i++) out[i] = rank * 1000 + i + mode;
    MPI_Request rr, sr;
    MPI_Status st;
    OK(MPI_Irecv(in, 64, MPI_INT, prev, 10 + mode, MPI_COMM_WORLD, &rr));
    OK(MPI_Barrier(MPI_COMM_WORLD)); /* every receive is posted: ready mode is legal */
    switch (mode) {
    case 0: OK(MPI_Send(out, 64, MPI_INT, next, 10 + mode, MPI_COMM_WORLD)); break;
    case 1: OK(MPI_Ssend(out, 64, MPI_INT, next, 10 + mode, MPI_COMM_WORLD)); break;
    case 2: OK(MPI_Rsend(out, 64, MPI_INT, next, 10 + mode, MPI_COMM_WORLD)); break;
    case 3: OK(MPI_Bsend(out, 64, MPI_INT, next, 10 + mode, MPI_COMM_WORLD)); break;
    case 4: OK(MPI_Isend(out, 64, MPI_INT, next, 10 + mode, MPI_COMM_WORLD, &sr)); OK(MPI_Wait(&sr, MPI_STATUS_IGNORE)); break;
    case 5: OK(MPI_Issend(out, 64, MPI_INT, next, 10 + mode, MPI_COMM_WORLD, &sr)); OK(MPI_Wait(&sr, MPI_STATUS_IGNORE)); break;
    case 6: OK(MPI_Irsend(out, 64, MPI_INT, next, 10 + mode, MPI_COMM_WORLD, &sr)); OK(MPI_Wait(&sr, MPI_STATUS_IGNORE)); break;
    case 7: OK(MPI_Ibsend(out, 64, MPI_INT, next, 10 + mode, MPI_COMM_WORLD, &sr)); OK(MPI_Wait(&sr, MPI_STATUS_IGNORE)); break;
    }
    if (mode >= 4) CHECK_EQ(sr, MPI_REQUEST_NULL);
    OK(MPI_Wait(&rr, &st));
    CHECK_EQ(rr, MPI_REQUEST_NULL);
    CHECK_EQ(st.MPI_SOURCE, prev);
    CHECK_EQ(st.MPI_TAG, 10 + mode);
    int n;
    OK(MPI_Get_count(&st, MPI_INT, &n));
    CHECK_EQ(n, 64);
    for (int i = 0; i < 64; i++) CHECK_EQ(in[i], prev * 1000 + i + mode);
}

int main(int argc, char **argv) {
    int rank, size;
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    CHECK(size >= 2);
    static char bbuf[1 << 16];
    OK(MPI_Buffer_attach(bbuf, sizeof bbuf));
    for (int mode = 0; mode < 8; mode++) ring_mode(rank, size, mode);

    /* Wildcards: rank 0 gathers one message from everyone with ANY_SOURCE/ANY_TAG. */
    if (rank == 0) {
        int seen = 0;
        for (int i = 1; i < size; i++) {
            MPI_Status st;
            int v[3];
            OK(MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
            int n;
            OK(MPI_Get_count(&st, MPI_INT, &n));
            CHECK_EQ(n, st.MPI_SOURCE % 3 + 1);
            OK(MPI_Recv(v, 3, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
            CHECK_EQ(st.MPI_TAG, 100 + st.MPI_SOURCE);
            CHECK_EQ(v[0], st.MPI_SOURCE);
            OK(MPI_Get_count(&st, MPI_INT, &n));
            CHECK_EQ(n, st.MPI_SOURCE % 3 + 1);
            OK(MPI_Get_count(&st, MPI_DOUBLE, &n));
            if ((st.MPI_SOURCE % 3 + 1) % 2) CHECK_EQ(n, MPI_UNDEFINED);
            OK(MPI_Get_elements(&st, MPI_INT, &n));
            CHECK_EQ(n, st.MPI_SOURCE % 3 + 1);
            seen |= 1 << st.MPI_SOURCE;
        }
        CHECK_EQ(seen, ((1 << size) - 1) & ~1);
    } else {
        int v[3] = {rank, rank, rank};
        OK(MPI_Send(v, rank % 3 + 1, MPI_INT, 0, 100 + rank, MPI_COMM_WORLD));
    }
    /* Nothing else may reach rank 0 while it receives with wildcards. */
    OK(MPI_Barrier(MPI_COMM_WORLD));

    /* PROC_NULL: immediate, status fields as MPI says. */
    MPI_Status st;
    int x = 5;
    OK(MPI_Recv(&x, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &st));
    CHECK_EQ(st.MPI_SOURCE, MPI_PROC_NULL);
    CHECK_EQ(st.MPI_TAG, MPI_ANY_TAG);
    int n;
    OK(MPI_Get_count(&st, MPI_INT, &n));
    CHECK_EQ(n, 0);
    OK(MPI_Send(&x, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD));

    /* Sendrecv and Sendrecv_replace around the ring. */
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    int a = rank, b = -1;
    OK(MPI_Sendrecv(&a, 1, MPI_INT, next, 7, &b, 1, MPI_INT, prev, 7, MPI_COMM_WORLD, &st));
    CHECK_EQ(b, prev);
    CHECK_EQ(st.MPI_SOURCE, prev);
    a = rank * 2;
    OK(MPI_Sendrecv_replace(&a, 1, MPI_INT, next, 8, prev, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CHECK_EQ(a, prev * 2);

    /* Persistent requests, Startall, Waitall, Testall, Waitany, Waitsome. */
    int pin = -1, pout = rank;
    MPI_Request pr[2];
    OK(MPI_Recv_init(&pin, 1, MPI_INT, prev, 9, MPI_COMM_WORLD, &pr[0]));
    OK(MPI_Send_init(&pout, 1, MPI_INT, next, 9, MPI_COMM_WORLD, &pr[1]));
    for (int it = 0; it < 3; it++) {
        pout = rank + it;
        OK(MPI_Startall(2, pr));
        MPI_Status sts[2];
        OK(MPI_Waitall(2, pr, sts));
        CHECK(pr[0] != MPI_REQUEST_NULL && pr[1] != MPI_REQUEST_NULL);
        CHECK_EQ(pin, prev + it);
        CHECK_EQ(sts[0].MPI_SOURCE, prev);
    }
    /* An inactive persistent request completes at once with an empty status. */
    int flag = 0;
    OK(MPI_Test(&pr[0], &flag, &st));
    CHECK_EQ(flag, 1);
    OK(MPI_Request_free(&pr[0]));
    OK(MPI_Request_free(&pr[1]));
    CHECK_EQ(pr[0], MPI_REQUEST_NULL);

    MPI_Request rq[4];
    int ins[2], outs[2] = {rank, -rank};
    OK(MPI_Irecv(&ins[0], 1, MPI_INT, prev, 20, MPI_COMM_WORLD, &rq[0]));
    OK(MPI_Irecv(&ins[1], 1, MPI_INT, prev, 21, MPI_COMM_WORLD, &rq[1]));
    OK(MPI_Isend(&outs[1], 1, MPI_INT, next, 21, MPI_COMM_WORLD, &rq[2]));
    OK(MPI_Isend(&outs[0], 1, MPI_INT, next, 20, MPI_COMM_WORLD, &rq[3]));
    int done = 0;
    while (done < 4) {
        int outcount, idx[4];
        MPI_Status sts[4];
        OK(MPI_Waitsome(4, rq, &outcount, idx, sts));
        CHECK(outcount >= 1);
        for (int i = 0; i < outcount; i++) CHECK_EQ(rq[idx[i]], MPI_REQUEST_NULL);
        done += outcount;
    }
    int outcount;
    OK(MPI_Waitsome(4, rq, &outcount, NULL, MPI_STATUSES_IGNORE));
    CHECK_EQ(outcount, MPI_UNDEFINED);
    int index;
    OK(MPI_Waitany(4, rq, &index, &st));
    CHECK_EQ(index, MPI_UNDEFINED);
    OK(MPI_Testall(4, rq, &flag, MPI_STATUSES_IGNORE));
    CHECK_EQ(flag, 1);
    CHECK_EQ(ins[0], prev);
    CHECK_EQ(ins[1], -prev);

    /* Testany polling, Iprobe, Improbe/Mrecv, Mprobe/Imrecv. */
    OK(MPI_Irecv(&b, 1, MPI_INT, prev, 30, MPI_COMM_WORLD, &rq[0]));
    OK(MPI_Send(&rank, 1, MPI_INT, next, 30, MPI_COMM_WORLD));
    flag = 0;
    while (!flag) OK(MPI_Testany(1, rq, &index, &flag, &st));
    CHECK_EQ(index, 0);
    CHECK_EQ(b, prev);
    OK(MPI_Send(&rank, 1, MPI_INT, next, 31, MPI_COMM_WORLD));
    flag = 0;
    while (!flag) OK(MPI_Iprobe(prev, 31, MPI_COMM_WORLD, &flag, &st));
    CHECK_EQ(st.MPI_SOURCE, prev);
    MPI_Message msg;
    flag = 0;
    while (!flag) OK(MPI_Improbe(prev, 31, MPI_COMM_WORLD, &flag, &msg, &st));
    OK(MPI_Mrecv(&b, 1, MPI_INT, &msg, &st));
    CHECK_EQ(msg, MPI_MESSAGE_NULL);
    CHECK_EQ(b, prev);
    OK(MPI_Send(&rank, 1, MPI_INT, next, 32, MPI_COMM_WORLD));
    OK(MPI_Mprobe(MPI_ANY_SOURCE, 32, MPI_COMM_WORLD, &msg, &st));
    OK(MPI_Imrecv(&b, 1, MPI_INT, &msg, &rq[0]));
    OK(MPI_Wait(&rq[0], &st));
    CHECK_EQ(b, prev);
    OK(MPI_Mprobe(MPI_PROC_NULL, 0, MPI_COMM_WORLD, &msg, &st));
    CHECK_EQ(msg, MPI_MESSAGE_NO_PROC);
    OK(MPI_Mrecv(&b, 1, MPI_INT, &msg, &st));
    CHECK_EQ(st.MPI_SOURCE, MPI_PROC_NULL);

    /* Cancel a receive that never matches. */
    OK(MPI_Irecv(&b, 1, MPI_INT, prev, 999, MPI_COMM_WORLD, &rq[0]));
    OK(MPI_Cancel(&rq[0]));
    OK(MPI_Wait(&rq[0], &st));
    OK(MPI_Test_cancelled(&st, &flag));
    CHECK_EQ(flag, 1);
    OK(MPI_Request_get_status(MPI_REQUEST_NULL, &flag, &st));
    CHECK_EQ(flag, 1);

    void *bp;
    int bs;
    OK(MPI_Buffer_detach(&bp, &bs));
    CHECK(bp == bbuf && bs == sizeof bbuf);
    /* Nothing attached any more: success with NULL and 0, as MPICH does. */
    OK(MPI_Buffer_detach(&bp, &bs));
    CHECK(bp == NULL && bs == 0);
    OK(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 0) printf("p2p ok on %d ranks\n", size);
    OK(MPI_Finalize());
    return 0;
}
