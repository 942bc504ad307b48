/* The tools interface (MPI_T): control variables read live values and the writable ones
 * take effect, performance variables count real traffic and queue lengths, categories,
 * enumerations, the "none" answers for events, and the error codes (2 ranks or more). */
#include "check.h"
#include <string.h>

static int cvar_index(const char *name) {
    int i;
    OK(MPI_T_cvar_get_index(name, &i));
    char got[128];
    int len = sizeof got;
    OK(MPI_T_cvar_get_info(i, got, &len, NULL, NULL, NULL, NULL, NULL, NULL, NULL));
    CHECK(strcmp(got, name) == 0);
    CHECK_EQ(len, (int)strlen(name) + 1);
    return i;
}

static int pvar_index(const char *name, int cls) {
    int i;
    OK(MPI_T_pvar_get_index(name, cls, &i));
    return i;
}

/* Sum of one traffic counter over the transport kinds, read through handles. */
static unsigned long long sum(MPI_T_pvar_session s, MPI_T_pvar_handle *h) {
    unsigned long long total = 0, v;
    for (int k = 0; k < 4; k++) {
        OK(MPI_T_pvar_read(s, h[k], &v));
        total += v;
    }
    return total;
}

int main(int argc, char **argv) {
    int provided, rank, size, n, i;
    /* Before MPI_T_init_thread every call says so; MPI_T works before MPI_Init. */
    CHECK_EQ(MPI_T_cvar_get_num(&n), MPI_T_ERR_NOT_INITIALIZED);
    OK(MPI_T_init_thread(MPI_THREAD_SINGLE, &provided));
    CHECK_EQ(provided, MPI_THREAD_MULTIPLE);
    OK(MPI_T_init_thread(MPI_THREAD_MULTIPLE, &provided)); /* nested: counted */
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    CHECK(size >= 2);

    /* ---- control variables ---- */
    OK(MPI_T_cvar_get_num(&n));
    CHECK(n >= 30);
    for (i = 0; i < n; i++) {
        char name[128], desc[512];
        int nlen = sizeof name, dlen = sizeof desc, verb, bind, scope, j;
        MPI_Datatype dt;
        MPI_T_enum et;
        OK(MPI_T_cvar_get_info(i, name, &nlen, &verb, &dt, &et, desc, &dlen, &bind, &scope));
        CHECK(nlen > 1 && dlen > 1 && strlen(desc) > 10);
        CHECK(verb >= MPI_T_VERBOSITY_USER_BASIC && verb <= MPI_T_VERBOSITY_MPIDEV_ALL);
        CHECK_EQ(bind, MPI_T_BIND_NO_OBJECT);
        CHECK(dt == MPI_INT || dt == MPI_UNSIGNED || dt == MPI_UNSIGNED_LONG || dt == MPI_DOUBLE ||
              dt == MPI_CHAR);
        CHECK(strncmp(name, "TSUNAGI_", 8) == 0 || strncmp(name, "tsunagi_", 8) == 0);
        OK(MPI_T_cvar_get_index(name, &j));
        CHECK_EQ(j, i);
        /* A 0 length asks for the size needed; a short buffer gets a cut string. */
        int need = 0;
        OK(MPI_T_cvar_get_info(i, name, &need, NULL, NULL, NULL, NULL, NULL, NULL, NULL));
        CHECK_EQ(need, nlen);
        char shortbuf[4];
        int slen = sizeof shortbuf;
        OK(MPI_T_cvar_get_info(i, shortbuf, &slen, NULL, NULL, NULL, NULL, NULL, NULL, NULL));
        CHECK_EQ(slen, 4);
        CHECK(strncmp(shortbuf, name, 3) == 0 && shortbuf[3] == 0);
        /* Every variable reads. */
        MPI_T_cvar_handle h;
        int count;
        OK(MPI_T_cvar_handle_alloc(i, NULL, &h, &count));
        CHECK(count >= 1);
        char buf[512];
        OK(MPI_T_cvar_read(h, buf));
        OK(MPI_T_cvar_handle_free(&h));
        CHECK(h == MPI_T_CVAR_HANDLE_NULL);
    }
    CHECK_EQ(MPI_T_cvar_get_index("TSUNAGI_NO_SUCH", &i), MPI_T_ERR_INVALID_NAME);
    CHECK_EQ(MPI_T_cvar_get_info(n, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
             MPI_T_ERR_INVALID_INDEX);
    CHECK_EQ(MPI_T_cvar_get_info(-1, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
             MPI_T_ERR_INVALID_INDEX);
    CHECK_EQ(MPI_T_cvar_get_num(NULL), MPI_ERR_ARG);

    /* The progress engine: the live value, fixed. */
    MPI_T_cvar_handle h;
    int count, v;
    OK(MPI_T_cvar_handle_alloc(cvar_index("TSUNAGI_PROGRESS"), NULL, &h, &count));
    CHECK_EQ(count, 1);
    OK(MPI_T_cvar_read(h, &v));
    const char *mode = getenv("TSUNAGI_PROGRESS");
    CHECK_EQ(v, mode && strcmp(mode, "threaded") == 0 ? 1 : 0);
    CHECK_EQ(MPI_T_cvar_write(h, &v), MPI_T_ERR_CVAR_SET_NEVER);
    OK(MPI_T_cvar_handle_free(&h));
    CHECK_EQ(MPI_T_cvar_read(h, &v), MPI_T_ERR_INVALID_HANDLE);

    /* The waiting policy as the runtime runs it. */
    unsigned spin;
    OK(MPI_T_cvar_handle_alloc(cvar_index("TSUNAGI_SPIN"), NULL, &h, &count));
    OK(MPI_T_cvar_read(h, &spin));
    if (getenv("TSUNAGI_SPIN")) CHECK_EQ(spin, atoi(getenv("TSUNAGI_SPIN")));
    else CHECK(spin == 50 || spin == 20000);
    OK(MPI_T_cvar_handle_free(&h));

    /* The shared-memory eager limit of the running transport. */
    unsigned long eager;
    OK(MPI_T_cvar_handle_alloc(cvar_index("TSUNAGI_SHM_EAGER"), NULL, &h, &count));
    OK(MPI_T_cvar_read(h, &eager));
    if (getenv("TSUNAGI_SHM_EAGER") && !getenv("TSUNAGI_NODE_MAP"))
        CHECK_EQ(eager, atol(getenv("TSUNAGI_SHM_EAGER")));
    else if (!getenv("TSUNAGI_NODE_MAP"))
        CHECK(eager > 0);
    OK(MPI_T_cvar_handle_free(&h));

    /* A setting shown as the environment gives it. */
    char str[256];
    OK(MPI_T_cvar_handle_alloc(cvar_index("TSUNAGI_NODE_MAP"), NULL, &h, &count));
    CHECK_EQ(count, 256);
    OK(MPI_T_cvar_read(h, str));
    CHECK(strcmp(str, getenv("TSUNAGI_NODE_MAP") ? getenv("TSUNAGI_NODE_MAP") : "") == 0);
    CHECK_EQ(MPI_T_cvar_write(h, str), MPI_T_ERR_CVAR_SET_NEVER);
    OK(MPI_T_cvar_handle_free(&h));

    /* A collective algorithm: an enumeration, writable, and the write takes effect. */
    MPI_Datatype dt;
    MPI_T_enum et;
    int scope, items;
    i = cvar_index("TSUNAGI_COLL_BCAST");
    OK(MPI_T_cvar_get_info(i, NULL, NULL, NULL, &dt, &et, NULL, NULL, NULL, &scope));
    CHECK(dt == MPI_INT && et != MPI_T_ENUM_NULL);
    CHECK_EQ(scope, MPI_T_SCOPE_ALL_EQ);
    char ename[64];
    int elen = sizeof ename;
    OK(MPI_T_enum_get_info(et, &items, ename, &elen));
    CHECK_EQ(items, 6); /* auto and binomial, scatter_allgather, chain, hierarchical, shm */
    CHECK(strcmp(ename, "tsunagi_coll_bcast") == 0);
    int chain = -1;
    for (int k = 0; k < items; k++) {
        char item[64];
        int ilen = sizeof item, val;
        OK(MPI_T_enum_get_item(et, k, &val, item, &ilen));
        if (k == 0) CHECK(strcmp(item, "auto") == 0 && val == 0);
        if (strcmp(item, "chain") == 0) chain = val;
    }
    CHECK(chain > 0);
    CHECK_EQ(MPI_T_enum_get_item(et, items, &v, NULL, NULL), MPI_T_ERR_INVALID_INDEX);
    CHECK_EQ(MPI_T_enum_get_info((MPI_T_enum)(size_t)999, &items, NULL, NULL),
             MPI_T_ERR_INVALID_HANDLE);
    OK(MPI_T_cvar_handle_alloc(i, NULL, &h, &count));
    OK(MPI_T_cvar_read(h, &v));
    CHECK_EQ(v, 0);
    OK(MPI_T_cvar_write(h, &chain));
    OK(MPI_T_cvar_read(h, &v));
    CHECK_EQ(v, chain);
    int bad = 99;
    CHECK_EQ(MPI_T_cvar_write(h, &bad), MPI_ERR_ARG);
    int data[100];
    for (int k = 0; k < 100; k++) data[k] = rank == 1 ? k * 3 : -1;
    OK(MPI_Bcast(data, 100, MPI_INT, 1, MPI_COMM_WORLD)); /* runs the chain */
    for (int k = 0; k < 100; k++) CHECK_EQ(data[k], k * 3);
    v = 0;
    OK(MPI_T_cvar_write(h, &v));
    OK(MPI_T_cvar_handle_free(&h));

    /* ---- performance variables ---- */
    OK(MPI_T_pvar_get_num(&n));
    CHECK(n >= 20);
    for (i = 0; i < n; i++) {
        char name[128];
        int nlen = sizeof name, vc, ro, cont, at, j;
        MPI_Datatype pdt;
        OK(MPI_T_pvar_get_info(i, name, &nlen, NULL, &vc, &pdt, NULL, NULL, NULL, NULL, &ro,
                               &cont, &at));
        CHECK(pdt == MPI_UNSIGNED_LONG_LONG);
        CHECK(vc == MPI_T_PVAR_CLASS_LEVEL || vc == MPI_T_PVAR_CLASS_COUNTER);
        OK(MPI_T_pvar_get_index(name, vc, &j));
        CHECK_EQ(j, i);
    }
    CHECK_EQ(MPI_T_pvar_get_index("unexpected_recvq_length", MPI_T_PVAR_CLASS_COUNTER, &i),
             MPI_T_ERR_INVALID_NAME);
    MPI_T_pvar_session s;
    OK(MPI_T_pvar_session_create(&s));
    const char *kinds[4] = {"self", "shm", "tcp", "other"};
    const char *what[4] = {"msgs_sent", "bytes_sent", "msgs_recvd", "bytes_recvd"};
    MPI_T_pvar_handle th[4][4];
    for (int w = 0; w < 4; w++)
        for (int k = 0; k < 4; k++) {
            char name[64];
            snprintf(name, sizeof name, "tsunagi_%s_%s", kinds[k], what[w]);
            OK(MPI_T_pvar_handle_alloc(s, pvar_index(name, MPI_T_PVAR_CLASS_COUNTER), NULL,
                                       &th[w][k], &count));
            CHECK_EQ(count, 1);
        }
    /* Not started: nothing counted, whatever moves. */
    OK(MPI_Barrier(MPI_COMM_WORLD));
    CHECK_EQ(sum(s, th[0]), 0);
    OK(MPI_T_pvar_start(s, MPI_T_PVAR_ALL_HANDLES));
    char msg[1000];
    memset(msg, rank, sizeof msg);
    /* Rank 0 sends once rank 1 counts (a poll may deliver ahead of the receive). */
    if (rank == 0) {
        OK(MPI_Recv(NULL, 0, MPI_CHAR, 1, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        for (int k = 0; k < 10; k++) OK(MPI_Send(msg, 1000, MPI_CHAR, 1, 5, MPI_COMM_WORLD));
    } else if (rank == 1) {
        OK(MPI_Send(NULL, 0, MPI_CHAR, 0, 4, MPI_COMM_WORLD));
        for (int k = 0; k < 10; k++)
            OK(MPI_Recv(msg, 1000, MPI_CHAR, 0, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    }
    OK(MPI_T_pvar_stop(s, MPI_T_PVAR_ALL_HANDLES));
    unsigned long long sent = sum(s, th[0]), sbytes = sum(s, th[1]);
    unsigned long long recvd = sum(s, th[2]), rbytes = sum(s, th[3]);
    if (rank == 0) CHECK(sent >= 10 && sbytes >= 10 * 1000);
    if (rank == 1) CHECK(recvd >= 10 && rbytes >= 10 * 1000);
    /* Stopped: the value stays. */
    OK(MPI_Barrier(MPI_COMM_WORLD));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    CHECK_EQ(sum(s, th[0]), sent);
    /* Reset, readreset, write. */
    unsigned long long val;
    OK(MPI_T_pvar_readreset(s, th[0][1], &val));
    OK(MPI_T_pvar_read(s, th[0][1], &val));
    CHECK_EQ(val, 0);
    val = 42;
    OK(MPI_T_pvar_write(s, th[0][1], &val));
    OK(MPI_T_pvar_read(s, th[0][1], &val));
    CHECK_EQ(val, 42);
    OK(MPI_T_pvar_reset(s, MPI_T_PVAR_ALL_HANDLES));
    CHECK_EQ(sum(s, th[1]), 0);
    CHECK_EQ(MPI_T_pvar_read(s, MPI_T_PVAR_ALL_HANDLES, &val), MPI_T_ERR_INVALID_HANDLE);

    /* Queue lengths (continuous, read-only) and matching searches. */
    MPI_T_pvar_handle uq, pq, ma;
    OK(MPI_T_pvar_handle_alloc(s, pvar_index("unexpected_recvq_length", MPI_T_PVAR_CLASS_LEVEL),
                               NULL, &uq, &count));
    OK(MPI_T_pvar_handle_alloc(s, pvar_index("posted_recvq_length", MPI_T_PVAR_CLASS_LEVEL),
                               NULL, &pq, &count));
    OK(MPI_T_pvar_handle_alloc(
        s, pvar_index("unexpected_recvq_match_attempts", MPI_T_PVAR_CLASS_COUNTER), NULL, &ma,
        &count));
    CHECK_EQ(MPI_T_pvar_start(s, uq), MPI_T_ERR_PVAR_NO_STARTSTOP);
    CHECK_EQ(MPI_T_pvar_reset(s, uq), MPI_T_ERR_PVAR_NO_WRITE);
    CHECK_EQ(MPI_T_pvar_write(s, uq, &val), MPI_T_ERR_PVAR_NO_WRITE);
    OK(MPI_T_pvar_start(s, ma));
    if (rank == 0) {
        for (int t = 77; t < 80; t++) OK(MPI_Send(msg, 10, MPI_CHAR, 1, t, MPI_COMM_WORLD));
        OK(MPI_Recv(NULL, 0, MPI_CHAR, 1, 89, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        OK(MPI_Send(msg, 10, MPI_CHAR, 1, 90, MPI_COMM_WORLD));
    } else if (rank == 1) {
        /* Messages from one sender arrive in order: once tag 79 is here, all three are. */
        OK(MPI_Probe(0, 79, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        OK(MPI_T_pvar_read(s, uq, &val));
        CHECK(val >= 3);
        for (int t = 77; t < 80; t++)
            OK(MPI_Recv(msg, 10, MPI_CHAR, 0, t, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        OK(MPI_T_pvar_read(s, uq, &val));
        CHECK_EQ(val, 0);
        MPI_Request r;
        unsigned long long base;
        OK(MPI_T_pvar_read(s, pq, &base));
        OK(MPI_Irecv(msg, 10, MPI_CHAR, 0, 90, MPI_COMM_WORLD, &r));
        OK(MPI_T_pvar_read(s, pq, &val));
        CHECK_EQ(val, base + 1);
        OK(MPI_Send(NULL, 0, MPI_CHAR, 0, 89, MPI_COMM_WORLD));
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        OK(MPI_T_pvar_read(s, pq, &val));
        CHECK_EQ(val, base);
        OK(MPI_T_pvar_read(s, ma, &val));
        CHECK(val >= 4); /* a probe and three receives searched the unexpected queue */
        for (int k = 2; k < size; k++) OK(MPI_Send(NULL, 0, MPI_CHAR, k, 91, MPI_COMM_WORLD));
    } else {
        /* Other ranks stay quiet (no message of theirs joins rank 1's queues meanwhile). */
        OK(MPI_Recv(NULL, 0, MPI_CHAR, 1, 91, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    }
    OK(MPI_T_pvar_handle_free(s, &uq));
    CHECK(uq == MPI_T_PVAR_HANDLE_NULL);
    CHECK_EQ(MPI_T_pvar_read(s, uq, &val), MPI_T_ERR_INVALID_HANDLE);
    MPI_T_pvar_session s2;
    OK(MPI_T_pvar_session_create(&s2));
    CHECK_EQ(MPI_T_pvar_read(s2, pq, &val), MPI_T_ERR_INVALID_HANDLE); /* another session's */
    OK(MPI_T_pvar_session_free(&s2));
    OK(MPI_T_pvar_session_free(&s));
    CHECK(s == MPI_T_PVAR_SESSION_NULL);
    CHECK_EQ(MPI_T_pvar_read(s, pq, &val), MPI_T_ERR_INVALID_SESSION);

    /* ---- categories ---- */
    int ncat, nc, np, sub;
    OK(MPI_T_category_get_num(&ncat));
    CHECK_EQ(ncat, 5);
    OK(MPI_T_category_get_index("tsunagi_collectives", &i));
    OK(MPI_T_category_get_info(i, NULL, NULL, NULL, NULL, &nc, &np, &sub));
    CHECK_EQ(nc, 10);
    CHECK_EQ(sub, 0);
    int idx[10];
    OK(MPI_T_category_get_cvars(i, 10, idx));
    for (int k = 0; k < 10; k++) {
        char name[64];
        int nlen = sizeof name;
        OK(MPI_T_cvar_get_info(idx[k], name, &nlen, NULL, NULL, NULL, NULL, NULL, NULL, NULL));
        CHECK(strncmp(name, "TSUNAGI_COLL_", 13) == 0);
    }
    OK(MPI_T_category_get_index("tsunagi_transports", &i));
    OK(MPI_T_category_get_info(i, NULL, NULL, NULL, NULL, &nc, &np, &sub));
    CHECK_EQ(np, 16);
    CHECK_EQ(MPI_T_category_get_index("nosuch", &i), MPI_T_ERR_INVALID_NAME);
    CHECK_EQ(MPI_T_category_get_cvars(ncat, 1, idx), MPI_T_ERR_INVALID_INDEX);
    int stamp;
    OK(MPI_T_category_changed(&stamp));

    /* ---- no event sources, no events ---- */
    OK(MPI_T_source_get_num(&n));
    CHECK_EQ(n, 0);
    OK(MPI_T_event_get_num(&n));
    CHECK_EQ(n, 0);
    OK(MPI_T_category_get_num_events(0, &n));
    CHECK_EQ(n, 0);
    CHECK_EQ(MPI_T_event_get_index("x", &i), MPI_T_ERR_INVALID_NAME);
    MPI_T_event_registration reg;
    CHECK_EQ(MPI_T_event_handle_alloc(0, NULL, MPI_INFO_NULL, &reg), MPI_T_ERR_INVALID_INDEX);
    MPI_Count ts;
    CHECK_EQ(MPI_T_source_get_timestamp(0, &ts), MPI_T_ERR_INVALID_INDEX);

    OK(MPI_T_finalize());
    OK(MPI_T_cvar_get_num(&n)); /* still initialised once */
    OK(MPI_T_finalize());
    CHECK_EQ(MPI_T_cvar_get_num(&n), MPI_T_ERR_NOT_INITIALIZED);
    CHECK_EQ(MPI_T_finalize(), MPI_T_ERR_NOT_INITIALIZED);
    OK(MPI_Finalize());

    /* After MPI_Finalize the tools interface still works. */
    OK(MPI_T_init_thread(MPI_THREAD_SINGLE, &provided));
    OK(MPI_T_cvar_handle_alloc(cvar_index("TSUNAGI_COLL_ALLREDUCE"), NULL, &h, &count));
    OK(MPI_T_cvar_read(h, &v));
    CHECK_EQ(v, 0);
    OK(MPI_T_cvar_handle_free(&h));
    OK(MPI_T_finalize());
    if (rank == 0) printf("tools ok\n");
    return 0;
}
