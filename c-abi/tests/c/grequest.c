/* Generalized requests (MPI 4.1 §13.2): which of query_fn, free_fn and cancel_fn each call
 * runs, how often and in which order. query_fn then free_fn in the Wait/Test that completes
 * the request; free_fn alone at MPI_Request_free (or at MPI_Grequest_complete when freed
 * before); cancel_fn(complete) at MPI_Cancel; a hook's error is the call's error
 * (MPI_ERR_IN_STATUS with the class in MPI_ERROR for the multiple-completion calls); hooks
 * may call MPI (cancel_fn completing the request, a thread completing it while the main
 * thread waits). Runs on any number of ranks; each rank checks its own requests. */
#include "check.h"
#include <pthread.h>
#include <string.h>
#include <time.h>

static int seq; /* every hook call gets the next number: the order of calls */

struct g {
    int queried, freed, cancelled;   /* how many calls */
    int query_at, free_at, cancel_at; /* seq of the last call */
    int complete_arg;                 /* cancel_fn's `complete` */
    int query_rc, free_rc, cancel_rc; /* what the hooks return */
    int complete_in_cancel;           /* cancel_fn calls MPI_Grequest_complete */
    MPI_Request self;                 /* the request (for complete_in_cancel) */
};

static int query_fn(void *extra, MPI_Status *st) {
    struct g *g = extra;
    g->queried++;
    g->query_at = ++seq;
    /* a hook may call MPI */
    OK(MPI_Status_set_elements(st, MPI_INT, 3));
    OK(MPI_Status_set_cancelled(st, g->cancelled > 0));
    st->MPI_SOURCE = 5;
    st->MPI_TAG = 77;
    return g->query_rc;
}
static int free_fn(void *extra) {
    struct g *g = extra;
    g->freed++;
    g->free_at = ++seq;
    return g->free_rc;
}
static int cancel_fn(void *extra, int complete) {
    struct g *g = extra;
    g->cancelled++;
    g->cancel_at = ++seq;
    g->complete_arg = complete;
    if (g->complete_in_cancel)
        OK(MPI_Grequest_complete(g->self));
    return g->cancel_rc;
}

static MPI_Request start(struct g *g) {
    memset(g, 0, sizeof *g);
    MPI_Request q;
    OK(MPI_Grequest_start(query_fn, free_fn, cancel_fn, g, &q));
    g->self = q;
    return q;
}

static int error_class(int rc) {
    int cls;
    OK(MPI_Error_class(rc, &cls));
    return cls;
}

static void check_status(const MPI_Status *st) {
    int n, flag;
    CHECK_EQ(st->MPI_SOURCE, 5);
    CHECK_EQ(st->MPI_TAG, 77);
    OK(MPI_Get_count(st, MPI_INT, &n));
    CHECK_EQ(n, 3);
    OK(MPI_Test_cancelled(st, &flag));
    CHECK(!flag);
}

/* MPI_Wait: nothing runs before; query then free, once each, in the Wait. */
static void by_wait(void) {
    struct g g;
    MPI_Request q = start(&g);
    MPI_Status st;
    OK(MPI_Grequest_complete(q));
    CHECK_EQ(g.queried + g.freed + g.cancelled, 0);
    OK(MPI_Wait(&q, &st));
    CHECK(q == MPI_REQUEST_NULL);
    CHECK_EQ(g.queried, 1);
    CHECK_EQ(g.freed, 1);
    CHECK_EQ(g.cancelled, 0);
    CHECK(g.query_at < g.free_at);
    check_status(&st);
    OK(MPI_Wait(&q, &st)); /* MPI_REQUEST_NULL: the empty status, no hook */
    CHECK_EQ(st.MPI_SOURCE, MPI_ANY_SOURCE);
    CHECK_EQ(g.queried, 1);
}

/* A loop of MPI_Test: no hook until the request is complete, then query and free once. */
static void by_test_loop(void) {
    struct g g;
    MPI_Request q = start(&g);
    MPI_Status st;
    int flag = 1;
    for (int k = 0; k < 5; k++) {
        OK(MPI_Test(&q, &flag, &st));
        CHECK(!flag);
    }
    CHECK_EQ(g.queried + g.freed + g.cancelled, 0);
    OK(MPI_Grequest_complete(q));
    int tries = 0;
    do {
        OK(MPI_Test(&q, &flag, &st));
        tries++;
    } while (!flag && tries < 1000);
    CHECK(flag);
    CHECK_EQ(tries, 1); /* complete at once */
    CHECK(q == MPI_REQUEST_NULL);
    CHECK_EQ(g.queried, 1);
    CHECK_EQ(g.freed, 1);
    CHECK(g.query_at < g.free_at);
    check_status(&st);
}

/* MPI_Request_free before MPI_Grequest_complete: free_fn runs in the complete; no query. */
static void freed_before_complete(void) {
    struct g g;
    MPI_Request q = start(&g), keep = q;
    OK(MPI_Request_free(&q));
    CHECK(q == MPI_REQUEST_NULL);
    CHECK_EQ(g.freed, 0);
    OK(MPI_Grequest_complete(keep));
    CHECK_EQ(g.freed, 1);
    CHECK_EQ(g.queried, 0);
    CHECK_EQ(g.cancelled, 0);
}

/* MPI_Request_free after MPI_Grequest_complete: free_fn runs in the free; no query. */
static void freed_after_complete(void) {
    struct g g;
    MPI_Request q = start(&g);
    OK(MPI_Grequest_complete(q));
    CHECK_EQ(g.freed, 0);
    OK(MPI_Request_free(&q));
    CHECK(q == MPI_REQUEST_NULL);
    CHECK_EQ(g.freed, 1);
    CHECK_EQ(g.queried, 0);
}

/* MPI_Cancel before and after MPI_Grequest_complete: cancel_fn learns which; query and
 * free still run once each in the Wait, after it. */
static void cancel_before_and_after_complete(void) {
    for (int after = 0; after < 2; after++) {
        struct g g;
        MPI_Request q = start(&g);
        MPI_Status st;
        int flag;
        if (after)
            OK(MPI_Grequest_complete(q));
        OK(MPI_Cancel(&q));
        CHECK_EQ(g.cancelled, 1);
        CHECK_EQ(g.complete_arg, after);
        CHECK_EQ(g.queried + g.freed, 0);
        if (!after)
            OK(MPI_Grequest_complete(q));
        OK(MPI_Wait(&q, &st));
        CHECK_EQ(g.queried, 1);
        CHECK_EQ(g.freed, 1);
        CHECK(g.cancel_at < g.query_at && g.query_at < g.free_at);
        OK(MPI_Test_cancelled(&st, &flag));
        CHECK(flag); /* what query_fn said */
    }
}

/* cancel_fn may call MPI: it completes the request itself. */
static void cancel_fn_completes_the_request(void) {
    struct g g;
    MPI_Request q = start(&g);
    g.complete_in_cancel = 1;
    OK(MPI_Cancel(&q));
    CHECK_EQ(g.complete_arg, 0);
    MPI_Status st;
    OK(MPI_Wait(&q, &st));
    CHECK_EQ(g.queried, 1);
    CHECK_EQ(g.freed, 1);
}

/* Failing hooks: the call's error; the request is gone all the same. */
static void failing_hooks(void) {
    struct g g;
    MPI_Request q = start(&g);
    MPI_Status st;
    g.query_rc = MPI_ERR_BUFFER;
    OK(MPI_Grequest_complete(q));
    CHECK_EQ(error_class(MPI_Wait(&q, &st)), MPI_ERR_BUFFER);
    CHECK(q == MPI_REQUEST_NULL);
    CHECK_EQ(g.queried, 1);
    CHECK_EQ(g.freed, 1); /* free_fn runs even when query_fn failed */

    q = start(&g);
    g.free_rc = MPI_ERR_TAG;
    OK(MPI_Grequest_complete(q));
    int flag = 0;
    CHECK_EQ(error_class(MPI_Test(&q, &flag, &st)), MPI_ERR_TAG);
    CHECK(flag && q == MPI_REQUEST_NULL);
    CHECK_EQ(g.queried, 1);
    CHECK_EQ(g.freed, 1);

    q = start(&g);
    g.cancel_rc = MPI_ERR_COUNT;
    CHECK_EQ(error_class(MPI_Cancel(&q)), MPI_ERR_COUNT);
    CHECK_EQ(g.cancelled, 1);
    g.cancel_rc = MPI_SUCCESS;
    OK(MPI_Grequest_complete(q));
    OK(MPI_Wait(&q, &st));
    CHECK_EQ(g.freed, 1);

    /* free_fn failing at MPI_Request_free of a complete request, and at the complete of a
     * freed one: the error is that call's */
    q = start(&g);
    g.free_rc = MPI_ERR_ROOT;
    OK(MPI_Grequest_complete(q));
    CHECK_EQ(error_class(MPI_Request_free(&q)), MPI_ERR_ROOT);
    CHECK_EQ(g.freed, 1);
    q = start(&g);
    g.free_rc = MPI_ERR_ROOT;
    MPI_Request keep = q;
    OK(MPI_Request_free(&q));
    CHECK_EQ(error_class(MPI_Grequest_complete(keep)), MPI_ERR_ROOT);
    CHECK_EQ(g.freed, 1);

    /* completing twice is an error */
    q = start(&g);
    OK(MPI_Grequest_complete(q));
    CHECK_EQ(error_class(MPI_Grequest_complete(q)), MPI_ERR_REQUEST);
    OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
    CHECK_EQ(g.freed, 1);
}

/* MPI_Waitall over generalized and ordinary requests, one query_fn failing:
 * MPI_ERR_IN_STATUS, its class in its status' MPI_ERROR, MPI_SUCCESS in the others'; every
 * free_fn runs, every handle becomes MPI_REQUEST_NULL. */
static void waitall_with_a_failing_query(int rank) {
    struct g g[3];
    MPI_Request q[5];
    MPI_Status st[5];
    int out = 0, in = 0;
    for (int k = 0; k < 3; k++)
        q[k] = start(&g[k]);
    g[1].query_rc = MPI_ERR_BUFFER;
    OK(MPI_Irecv(&in, 1, MPI_INT, rank, 9, MPI_COMM_SELF, &q[3]));
    out = 1234;
    OK(MPI_Isend(&out, 1, MPI_INT, rank, 9, MPI_COMM_SELF, &q[4]));
    for (int k = 2; k >= 0; k--)
        OK(MPI_Grequest_complete(q[k]));
    for (int k = 0; k < 5; k++)
        st[k].MPI_ERROR = -1;
    int rc = MPI_Waitall(5, q, st);
    CHECK_EQ(error_class(rc), MPI_ERR_IN_STATUS);
    CHECK_EQ(st[1].MPI_ERROR, MPI_ERR_BUFFER);
    CHECK_EQ(st[0].MPI_ERROR, MPI_SUCCESS);
    CHECK_EQ(st[2].MPI_ERROR, MPI_SUCCESS);
    CHECK_EQ(st[3].MPI_ERROR, MPI_SUCCESS);
    CHECK_EQ(st[4].MPI_ERROR, MPI_SUCCESS);
    check_status(&st[0]);
    check_status(&st[2]);
    CHECK_EQ(in, 1234);
    for (int k = 0; k < 5; k++)
        CHECK(q[k] == MPI_REQUEST_NULL);
    for (int k = 0; k < 3; k++) {
        CHECK_EQ(g[k].queried, 1);
        CHECK_EQ(g[k].freed, 1);
        CHECK(g[k].query_at < g[k].free_at);
    }
}

/* The other completion calls: only the requests they complete are queried and freed. */
static void any_some_all(void) {
    struct g g[3];
    MPI_Request q[3];
    MPI_Status st[3];
    int idx, flag, n, ids[3];
    for (int k = 0; k < 3; k++)
        q[k] = start(&g[k]);

    OK(MPI_Testall(3, q, &flag, st));
    CHECK(!flag);
    OK(MPI_Testany(3, q, &idx, &flag, &st[0]));
    CHECK(!flag);
    OK(MPI_Testsome(3, q, &n, ids, st));
    CHECK_EQ(n, 0);
    OK(MPI_Grequest_complete(q[1]));
    OK(MPI_Testall(3, q, &flag, st));
    CHECK(!flag);
    CHECK_EQ(g[1].queried, 0); /* Testall completes nothing unless it completes all */
    OK(MPI_Waitany(3, q, &idx, &st[0]));
    CHECK_EQ(idx, 1);
    check_status(&st[0]);
    CHECK(g[1].queried == 1 && g[1].freed == 1);
    CHECK(g[0].queried + g[2].queried == 0);

    /* MPI_Request_get_status queries a complete request and leaves it */
    OK(MPI_Grequest_complete(q[2]));
    OK(MPI_Request_get_status(q[2], &flag, &st[0]));
    CHECK(flag);
    check_status(&st[0]);
    CHECK_EQ(g[2].queried, 1);
    CHECK_EQ(g[2].freed, 0);
    CHECK(q[2] != MPI_REQUEST_NULL);
    OK(MPI_Testsome(3, q, &n, ids, st));
    CHECK_EQ(n, 1);
    CHECK_EQ(ids[0], 2);
    check_status(&st[0]);
    CHECK_EQ(g[2].queried, 2);
    CHECK_EQ(g[2].freed, 1);

    OK(MPI_Grequest_complete(q[0]));
    OK(MPI_Waitsome(3, q, &n, ids, st));
    CHECK_EQ(n, 1);
    CHECK_EQ(ids[0], 0);
    CHECK(g[0].queried == 1 && g[0].freed == 1);
    OK(MPI_Waitsome(3, q, &n, ids, st));
    CHECK_EQ(n, MPI_UNDEFINED);

    for (int k = 0; k < 3; k++)
        q[k] = start(&g[k]);
    for (int k = 0; k < 3; k++)
        OK(MPI_Grequest_complete(q[k]));
    OK(MPI_Testall(3, q, &flag, st));
    CHECK(flag);
    for (int k = 0; k < 3; k++) {
        CHECK(g[k].queried == 1 && g[k].freed == 1);
        check_status(&st[k]);
    }
}

/* Another thread completes the request while this one waits in MPI_Wait. */
static void *complete_later(void *arg) {
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    OK(MPI_Grequest_complete(*(MPI_Request *)arg));
    return NULL;
}

static void completed_by_another_thread(void) {
    for (int k = 0; k < 3; k++) {
        struct g g;
        MPI_Request q = start(&g), shared = q;
        pthread_t t;
        CHECK_EQ(pthread_create(&t, NULL, complete_later, &shared), 0);
        MPI_Status st;
        OK(MPI_Wait(&q, &st));
        CHECK_EQ(pthread_join(t, NULL), 0);
        CHECK(g.queried == 1 && g.freed == 1);
        check_status(&st);
    }
}

int main(int argc, char **argv) {
    int provided, rank;
    OK(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided));
    CHECK_EQ(provided, MPI_THREAD_MULTIPLE);
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    OK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
    by_wait();
    by_test_loop();
    freed_before_complete();
    freed_after_complete();
    cancel_before_and_after_complete();
    cancel_fn_completes_the_request();
    failing_hooks();
    waitall_with_a_failing_query(0);
    any_some_all();
    completed_by_another_thread();
    OK(MPI_Barrier(MPI_COMM_WORLD));
    OK(MPI_Finalize());
    if (rank == 0)
        printf("grequest ok\n");
    return 0;
}
