/* Buffers attached to a communicator or a session (MPI 4.1 §3.6): MPI_Comm_attach_buffer,
 * _detach_buffer, _flush_buffer, _iflush_buffer, the MPI_Session_ ones, the _c forms and
 * MPI_BUFFER_AUTOMATIC. A buffered send uses its communicator's buffer, else its session's,
 * else the process's: a send that the communicator's buffer cannot hold fails with
 * MPI_ERR_BUFFER although the process's would hold it (2 ranks or more; rank 0 sends, rank
 * 1 receives and checks every message). */
#include <string.h>

#include "check.h"

#define SMALL 8   /* ints of a small message */
#define BIG 100   /* ints of a message larger than the small buffers */

static int err_class(int rc) {
    int cls;
    MPI_Error_class(rc, &cls);
    return cls;
}

/* Rank 0: a buffered send that must fail for lack of buffer space. */
static void bsend_fails(MPI_Comm c, int n) {
    int data[BIG] = {0};
    CHECK_EQ(err_class(MPI_Bsend(data, n, MPI_INT, 1, 99, c)), MPI_ERR_BUFFER);
}

/* Rank 0: a buffered send of n ints, value tag*1000+i. */
static void bsend_ok(MPI_Comm c, int n, int tag) {
    int data[BIG];
    for (int i = 0; i < n; i++) data[i] = tag * 1000 + i;
    OK(MPI_Bsend(data, n, MPI_INT, 1, tag, c));
}

/* Rank 1: the message bsend_ok sent. */
static void recv_check(MPI_Comm c, int n, int tag) {
    int data[BIG];
    MPI_Status st;
    OK(MPI_Recv(data, BIG, MPI_INT, 0, tag, c, &st));
    int got;
    OK(MPI_Get_count(&st, MPI_INT, &got));
    CHECK_EQ(got, n);
    for (int i = 0; i < n; i++) CHECK_EQ(data[i], tag * 1000 + i);
}

int main(int argc, char **argv) {
    int rank, size;
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    CHECK(size >= 2);
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));

    /* The process's buffer is large; the communicator's holds one small message. */
    static char process_buf[1 << 16];
    OK(MPI_Buffer_attach(process_buf, sizeof process_buf));
    MPI_Comm c;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &c)); /* MPI_ERRORS_RETURN is inherited */
    int small_size = SMALL * (int)sizeof(int) + MPI_BSEND_OVERHEAD;
    static char comm_buf[SMALL * sizeof(int) + MPI_BSEND_OVERHEAD];
    OK(MPI_Comm_attach_buffer(c, comm_buf, small_size));
    /* A second attach is an error; the first stays. */
    CHECK_EQ(err_class(MPI_Comm_attach_buffer(c, comm_buf, small_size)), MPI_ERR_BUFFER);

    if (rank == 0) {
        bsend_fails(c, BIG);           /* the communicator's buffer is too small ... */
        bsend_ok(MPI_COMM_WORLD, BIG, 1); /* ... the process's would hold it */
        bsend_ok(c, SMALL, 2);
        /* The flush waits until message 2 has left: its space is free again. */
        OK(MPI_Comm_flush_buffer(c));
        bsend_ok(c, SMALL, 3);
        MPI_Request r;
        OK(MPI_Comm_iflush_buffer(c, &r));
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        CHECK(r == MPI_REQUEST_NULL);
        bsend_ok(c, SMALL, 4);
    } else if (rank == 1) {
        recv_check(MPI_COMM_WORLD, BIG, 1);
        recv_check(c, SMALL, 2);
        recv_check(c, SMALL, 3);
        recv_check(c, SMALL, 4);
    }
    void *addr;
    int got_size;
    OK(MPI_Comm_detach_buffer(c, &addr, &got_size));
    CHECK(addr == comm_buf);
    CHECK_EQ(got_size, small_size);
    /* Detached: the communicator's sends use the process's buffer again. */
    if (rank == 0)
        bsend_ok(c, BIG, 5);
    else if (rank == 1)
        recv_check(c, BIG, 5);

    /* The _c forms, and MPI_BUFFER_AUTOMATIC: no limit, detach gives it back with size 0. */
    OK(MPI_Comm_attach_buffer_c(c, comm_buf, (MPI_Count)small_size));
    MPI_Count csize;
    OK(MPI_Comm_detach_buffer_c(c, &addr, &csize));
    CHECK(addr == comm_buf);
    CHECK_EQ(csize, small_size);
    OK(MPI_Comm_attach_buffer(c, MPI_BUFFER_AUTOMATIC, 0));
    if (rank == 0) {
        for (int t = 10; t < 20; t++) bsend_ok(c, BIG, t);
    } else if (rank == 1) {
        for (int t = 10; t < 20; t++) recv_check(c, BIG, t);
    }
    OK(MPI_Comm_detach_buffer(c, &addr, &got_size));
    CHECK(addr == MPI_BUFFER_AUTOMATIC);
    CHECK_EQ(got_size, 0);

    /* A session's buffer serves the communicators made from its groups and theirs. */
    MPI_Session s;
    OK(MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &s));
    MPI_Group g;
    OK(MPI_Group_from_session_pset(s, "mpi://WORLD", &g));
    MPI_Comm sc, sd;
    OK(MPI_Comm_create_from_group(g, "tsunagi.test.buffers", MPI_INFO_NULL,
                                  MPI_ERRORS_RETURN, &sc));
    OK(MPI_Group_free(&g));
    static char session_buf[SMALL * sizeof(int) + MPI_BSEND_OVERHEAD];
    OK(MPI_Session_attach_buffer(s, session_buf, small_size));
    CHECK_EQ(err_class(MPI_Session_attach_buffer(s, session_buf, small_size)),
             MPI_ERR_BUFFER);
    OK(MPI_Comm_dup(sc, &sd));
    if (rank == 0) {
        bsend_fails(sc, BIG);
        bsend_fails(sd, BIG); /* derived from sc: the session's buffer too */
        bsend_ok(MPI_COMM_WORLD, BIG, 21); /* the world model: the process's buffer */
        bsend_ok(sc, SMALL, 22);
        OK(MPI_Session_flush_buffer(s));
        bsend_ok(sd, SMALL, 23);
        MPI_Request r;
        OK(MPI_Session_iflush_buffer(s, &r));
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    } else if (rank == 1) {
        recv_check(MPI_COMM_WORLD, BIG, 21);
        recv_check(sc, SMALL, 22);
        recv_check(sd, SMALL, 23);
    }
    /* The communicator's own buffer comes before the session's. */
    static char big_buf[4 * (BIG * sizeof(int) + MPI_BSEND_OVERHEAD)];
    OK(MPI_Comm_attach_buffer(sc, big_buf, (int)sizeof big_buf));
    if (rank == 0) {
        bsend_ok(sc, BIG, 24);
        bsend_fails(sd, BIG);
    } else if (rank == 1) {
        recv_check(sc, BIG, 24);
    }
    OK(MPI_Comm_detach_buffer(sc, &addr, &got_size));
    CHECK(addr == big_buf);
    OK(MPI_Session_detach_buffer(s, &addr, &got_size));
    CHECK(addr == session_buf);
    CHECK_EQ(got_size, small_size);
    OK(MPI_Session_attach_buffer_c(s, MPI_BUFFER_AUTOMATIC, 0));
    if (rank == 0)
        bsend_ok(sd, BIG, 25);
    else if (rank == 1)
        recv_check(sd, BIG, 25);
    OK(MPI_Session_detach_buffer_c(s, &addr, &csize));
    CHECK(addr == MPI_BUFFER_AUTOMATIC);
    CHECK_EQ(csize, 0);
    /* A buffer left attached goes with its communicator (freed) and session (finalized). */
    OK(MPI_Comm_attach_buffer(sd, comm_buf, small_size));
    OK(MPI_Session_attach_buffer(s, session_buf, small_size));
    OK(MPI_Comm_free(&sd));
    OK(MPI_Comm_free(&sc));
    OK(MPI_Session_finalize(&s));

    OK(MPI_Comm_free(&c));
    OK(MPI_Buffer_detach(&addr, &got_size));
    CHECK(addr == process_buf);
    OK(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 0) printf("buffers ok\n");
    OK(MPI_Finalize());
    return 0;
}
