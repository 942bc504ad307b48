/* One-sided communication: every window flavor, every synchronisation mode with every
 * operation, derived datatypes on both sides, request-based operations, large transfers,
 * accumulate atomicity under contention, a lock-based counter hammered by all ranks,
 * shared and dynamic windows, attributes, names, info, keyvals and error handlers. */
#include "check.h"
#include <stdint.h>
#include <string.h>

#define WN 256
#define SLOT_ACC 64
#define SLOT_FOP 65
#define SLOT_CAS 66
#define SLOT_VEC 100

enum mode { FENCE, PSCW, LOCK_EXCL, LOCK_SHARED, LOCK_ALL, NMODES };
static const char *mode_names[] = {"fence", "pscw", "lock-exclusive", "lock-shared", "lock-all"};

static int me, np;
static MPI_Group world_group;

/* Open an access epoch to every rank (passive modes: to target t only). */
static void begin(enum mode m, MPI_Win win, int t) {
    switch (m) {
    case FENCE: if (t == 0) OK(MPI_Win_fence(0, win)); break;
    case PSCW:
        if (t == 0) {
            OK(MPI_Win_post(world_group, 0, win));
            OK(MPI_Win_start(world_group, 0, win));
        }
        break;
    case LOCK_EXCL: OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, t, 0, win)); break;
    case LOCK_SHARED: OK(MPI_Win_lock(MPI_LOCK_SHARED, t, 0, win)); break;
    case LOCK_ALL: if (t == 0) OK(MPI_Win_lock_all(0, win)); break;
    default: break;
    }
}

static void end(enum mode m, MPI_Win win, int t) {
    switch (m) {
    case FENCE: if (t == np - 1) OK(MPI_Win_fence(0, win)); break;
    case PSCW:
        if (t == np - 1) {
            OK(MPI_Win_complete(win));
            if (me % 2) { /* test, then wait */
                int flag = 0;
                for (int i = 0; i < 1000000 && !flag; i++) OK(MPI_Win_test(win, &flag));
                if (!flag) OK(MPI_Win_wait(win));
            } else {
                OK(MPI_Win_wait(win));
            }
        }
        break;
    case LOCK_EXCL: case LOCK_SHARED:
        if (t % 2) OK(MPI_Win_flush(t, win));
        OK(MPI_Win_unlock(t, win));
        break;
    case LOCK_ALL:
        if (t == np - 1) {
            OK(MPI_Win_flush_all(win));
            OK(MPI_Win_flush_local_all(win));
            OK(MPI_Win_sync(win));
            OK(MPI_Win_unlock_all(win));
        }
        break;
    default: break;
    }
}

/* Every operation in every mode on window `win` whose local memory is `mem` (WN ints,
 * disp_unit 4; `dyn_addrs` gives each rank's base address for a dynamic window). */
static void exercise(MPI_Win win, int *mem, const MPI_Aint *dyn_addrs, const char *what) {
    MPI_Datatype vec;
    OK(MPI_Type_vector(8, 1, 2, MPI_INT, &vec));
    OK(MPI_Type_commit(&vec));
    for (int m = 0; m < NMODES; m++) {
#define DISP(t, slot) (dyn_addrs ? dyn_addrs[t] + (MPI_Aint)(slot) * 4 : (MPI_Aint)(slot))
        for (int i = 0; i < WN; i++) mem[i] = -1;
        mem[SLOT_ACC] = 0;
        mem[SLOT_FOP] = 0;
        OK(MPI_Barrier(MPI_COMM_WORLD));
        /* Round 1: put, accumulate, a strided put (contiguous origin, vector target). */
        for (int t = 0; t < np; t++) {
            begin(m, win, t);
            int v = 1000 * me + t, inc = me + 1;
            OK(MPI_Put(&v, 1, MPI_INT, t, DISP(t, me), 1, MPI_INT, win));
            OK(MPI_Accumulate(&inc, 1, MPI_INT, t, DISP(t, SLOT_ACC), 1, MPI_INT, MPI_SUM, win));
            if (me == (t + 1) % np) {
                int src[8];
                for (int i = 0; i < 8; i++) src[i] = 7000 + i;
                OK(MPI_Put(src, 8, MPI_INT, t, DISP(t, SLOT_VEC), 1, vec, win));
            }
            end(m, win, t);
        }
        OK(MPI_Barrier(MPI_COMM_WORLD));
        for (int r = 0; r < np; r++) CHECK_EQ(mem[r], 1000 * r + me);
        CHECK_EQ(mem[SLOT_ACC], np * (np + 1) / 2);
        for (int i = 0; i < 8; i++) {
            CHECK_EQ(mem[SLOT_VEC + 2 * i], 7000 + i);
            CHECK_EQ(mem[SLOT_VEC + 2 * i + 1], -1);
        }
        OK(MPI_Barrier(MPI_COMM_WORLD));
        /* Round 2: get, get_accumulate, fetch_and_op (NO_OP and SUM), compare_and_swap, a
         * strided get (vector origin, contiguous target), request-based forms. */
        int won = 0;
        int one = 1, mine = me, minus1 = -1;
        int got[16], ticket[16], sum[16], old[16], strided[16][16], rgot[16], racc_old[16];
        for (int t = 0; t < np; t++) {
            got[t] = ticket[t] = sum[t] = old[t] = rgot[t] = racc_old[t] = -5;
            for (int i = 0; i < 16; i++) strided[t][i] = -9;
        }
        int passive = m == LOCK_ALL || m == LOCK_EXCL || m == LOCK_SHARED;
        for (int t = 0; t < np; t++) {
            begin(m, win, t);
            OK(MPI_Get(&got[t], 1, MPI_INT, t, DISP(t, me), 1, MPI_INT, win));
            OK(MPI_Get_accumulate(&one, 1, MPI_INT, &ticket[t], 1, MPI_INT, t, DISP(t, SLOT_FOP), 1,
                                  MPI_INT, MPI_SUM, win));
            OK(MPI_Fetch_and_op(NULL, &sum[t], MPI_INT, t, DISP(t, SLOT_ACC), MPI_NO_OP, win));
            OK(MPI_Compare_and_swap(&mine, &minus1, &old[t], MPI_INT, t, DISP(t, SLOT_CAS), win));
            OK(MPI_Get(strided[t], 1, vec, t, DISP(t, me), 8, MPI_INT, win));
            if (passive) {
                MPI_Request rq[2];
                OK(MPI_Rget(&rgot[t], 1, MPI_INT, t, DISP(t, me), 1, MPI_INT, win, &rq[0]));
                OK(MPI_Rget_accumulate(&one, 1, MPI_INT, &racc_old[t], 1, MPI_INT, t,
                                       DISP(t, SLOT_FOP), 1, MPI_INT, MPI_SUM, win, &rq[1]));
                OK(MPI_Waitall(2, rq, MPI_STATUSES_IGNORE));
                CHECK_EQ(rgot[t], 1000 * me + t);
                CHECK(racc_old[t] >= 1 && racc_old[t] < 2 * np);
            }
            end(m, win, t);
        }
        for (int t = 0; t < np; t++) {
            CHECK_EQ(got[t], 1000 * me + t);
            CHECK(ticket[t] >= 0 && ticket[t] < 2 * np);
            CHECK_EQ(sum[t], np * (np + 1) / 2);
            CHECK(old[t] == -1 || (old[t] >= 0 && old[t] < np));
            if (old[t] == -1) won++;
            /* The strided get starts at my slot: slots me, me+1, ... of rank t. */
            for (int i = 0; i < 8; i++) {
                int s = me + i;
                if (s < SLOT_ACC) CHECK_EQ(strided[t][2 * i], s < np ? 1000 * s + t : -1);
                CHECK_EQ(strided[t][2 * i + 1], -9);
            }
        }
        OK(MPI_Barrier(MPI_COMM_WORLD));
        int total_won = 0;
        OK(MPI_Allreduce(&won, &total_won, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
        CHECK_EQ(total_won, np); /* one winner per target */
        CHECK(mem[SLOT_CAS] >= 0 && mem[SLOT_CAS] < np);
        int per_rank = passive ? 2 : 1;
        CHECK_EQ(mem[SLOT_FOP], per_rank * np);
        OK(MPI_Barrier(MPI_COMM_WORLD));
        if (me == 0 && getenv("RMA_VERBOSE")) printf("%s %s ok %.3f\n", what, mode_names[m], MPI_Wtime());
#undef DISP
    }
    OK(MPI_Type_free(&vec));
}

static int deleted;
static int delete_fn(MPI_Win w, int k, void *val, void *extra) {
    (void)w; (void)k; (void)extra;
    deleted += *(int *)val;
    return MPI_SUCCESS;
}

static int handler_calls;
static void win_handler(MPI_Win *w, int *code, ...) {
    (void)w;
    CHECK_EQ(*code, MPI_ERR_RMA_RANGE);
    handler_calls++;
}

static void attributes_and_errors(MPI_Win win, void *base, MPI_Aint size) {
    void *p; MPI_Aint *sz; int *du, *fl, *model, flag;
    OK(MPI_Win_get_attr(win, MPI_WIN_BASE, &p, &flag)); CHECK(flag && p == base);
    OK(MPI_Win_get_attr(win, MPI_WIN_SIZE, &sz, &flag)); CHECK(flag); CHECK_EQ(*sz, size);
    OK(MPI_Win_get_attr(win, MPI_WIN_DISP_UNIT, &du, &flag)); CHECK_EQ(*du, 4);
    OK(MPI_Win_get_attr(win, MPI_WIN_CREATE_FLAVOR, &fl, &flag)); CHECK_EQ(*fl, MPI_WIN_FLAVOR_ALLOCATE);
    OK(MPI_Win_get_attr(win, MPI_WIN_MODEL, &model, &flag)); CHECK_EQ(*model, MPI_WIN_UNIFIED);
    char name[MPI_MAX_OBJECT_NAME]; int len;
    OK(MPI_Win_get_name(win, name, &len)); CHECK_EQ(len, 0);
    OK(MPI_Win_set_name(win, "rma-test")); OK(MPI_Win_get_name(win, name, &len));
    CHECK(strcmp(name, "rma-test") == 0 && len == 8);
    MPI_Group g; int cmp;
    OK(MPI_Win_get_group(win, &g)); OK(MPI_Group_compare(g, world_group, &cmp));
    CHECK_EQ(cmp, MPI_IDENT); OK(MPI_Group_free(&g));
    MPI_Info info, used; char val[32];
    OK(MPI_Info_create(&info)); OK(MPI_Info_set(info, "no_locks", "false"));
    OK(MPI_Win_set_info(win, info)); OK(MPI_Win_get_info(win, &used));
    OK(MPI_Info_get(used, "no_locks", 31, val, &flag)); CHECK(flag && strcmp(val, "false") == 0);
    OK(MPI_Info_free(&info)); OK(MPI_Info_free(&used));
    /* Static: the attribute outlives this function (MPI_Win_free in main deletes it). */
    static int v = 5;
    int kv;
    OK(MPI_Win_create_keyval(MPI_WIN_NULL_COPY_FN, delete_fn, &kv, NULL));
    OK(MPI_Win_set_attr(win, kv, &v)); int *got;
    OK(MPI_Win_get_attr(win, kv, &got, &flag)); CHECK(flag && got == &v);
    OK(MPI_Win_delete_attr(win, kv)); CHECK_EQ(deleted, 5);
    OK(MPI_Win_get_attr(win, kv, &got, &flag)); CHECK_EQ(flag, 0);
    OK(MPI_Win_set_attr(win, kv, &v)); /* deleted again by MPI_Win_free */
    OK(MPI_Win_free_keyval(&kv));
    /* Errors: returned with MPI_ERRORS_RETURN, a user handler runs with its code. */
    MPI_Errhandler eh;
    OK(MPI_Win_get_errhandler(win, &eh)); CHECK(eh == MPI_ERRORS_ARE_FATAL);
    OK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
    int x = 1, cls;
    OK(MPI_Win_fence(MPI_MODE_NOSUCCEED, win)); /* the last fence epoch ends */
    int rc = MPI_Put(&x, 1, MPI_INT, 0, 0, 1, MPI_INT, win); /* no epoch */
    OK(MPI_Error_class(rc, &cls)); CHECK_EQ(cls, MPI_ERR_RMA_SYNC);
    rc = MPI_Win_lock(12345, 0, 0, win);
    OK(MPI_Error_class(rc, &cls)); CHECK_EQ(cls, MPI_ERR_LOCKTYPE);
    rc = MPI_Win_unlock(0, win);
    OK(MPI_Error_class(rc, &cls)); CHECK_EQ(cls, MPI_ERR_RMA_SYNC);
    OK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
    rc = MPI_Put(&x, 1, MPI_INT, 0, WN, 1, MPI_INT, win); /* one past the end */
    OK(MPI_Error_class(rc, &cls)); CHECK_EQ(cls, MPI_ERR_RMA_RANGE);
    rc = MPI_Put(&x, 1, MPI_INT, np, 0, 1, MPI_INT, win);
    OK(MPI_Error_class(rc, &cls)); CHECK_EQ(cls, MPI_ERR_RANK);
    OK(MPI_Put(&x, 1, MPI_INT, MPI_PROC_NULL, 0, 1, MPI_INT, win));
    OK(MPI_Win_unlock(0, win));
    MPI_Errhandler mine;
    OK(MPI_Win_create_errhandler(win_handler, &mine));
    OK(MPI_Win_set_errhandler(win, mine));
    OK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
    rc = MPI_Get(&x, 1, MPI_INT, 0, -1, 1, MPI_INT, win);
    CHECK_EQ(rc, MPI_ERR_RMA_RANGE); CHECK_EQ(handler_calls, 1);
    OK(MPI_Win_unlock(0, win));
    OK(MPI_Win_call_errhandler(win, MPI_ERR_RMA_RANGE)); CHECK_EQ(handler_calls, 2);
    OK(MPI_Errhandler_free(&mine));
    OK(MPI_Win_set_errhandler(win, MPI_ERRORS_ARE_FATAL));
}

/* All ranks hammer rank 0: an exclusive-lock ticket counter and shared-lock accumulates. */
static void contention(void) {
    enum { ROUNDS = 50 };
    long *mem; MPI_Win win;
    OK(MPI_Win_allocate(2 * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &mem, &win));
    mem[0] = mem[1] = 0;
    OK(MPI_Barrier(MPI_COMM_WORLD));
    long tickets[ROUNDS], one = 1;
    for (int i = 0; i < ROUNDS; i++) {
        OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win));
        OK(MPI_Fetch_and_op(&one, &tickets[i], MPI_LONG, 0, 0, MPI_SUM, win));
        OK(MPI_Win_unlock(0, win));
        OK(MPI_Win_lock_all(0, win));
        OK(MPI_Accumulate(&one, 1, MPI_LONG, 0, 1, 1, MPI_LONG, MPI_SUM, win));
        OK(MPI_Win_unlock_all(win));
    }
    long *all = malloc(sizeof(long) * ROUNDS * np);
    OK(MPI_Gather(tickets, ROUNDS, MPI_LONG, all, ROUNDS, MPI_LONG, 0, MPI_COMM_WORLD));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    if (me == 0) {
        CHECK_EQ(mem[0], (long)ROUNDS * np);
        CHECK_EQ(mem[1], (long)ROUNDS * np);
        char *seen = calloc(ROUNDS * np, 1);
        for (int i = 0; i < ROUNDS * np; i++) {
            CHECK(all[i] >= 0 && all[i] < ROUNDS * np && !seen[all[i]]);
            seen[all[i]] = 1;
        }
        free(seen);
    }
    free(all);
    OK(MPI_Win_free(&win));
}

/* Large transfers (data that follows its request, received in place) and a derived
 * datatype larger than one request buffer. */
static void large(void) {
    const int n = 1 << 18; /* ints: 1 MiB */
    int *mem, *buf = malloc(sizeof(int) * n);
    MPI_Win win;
    OK(MPI_Win_allocate(sizeof(int) * n, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &mem, &win));
    int right = (me + 1) % np, left = (me + np - 1) % np;
    for (int i = 0; i < n; i++) buf[i] = me * 7 + i;
    OK(MPI_Win_fence(0, win));
    OK(MPI_Put(buf, n, MPI_INT, right, 0, n, MPI_INT, win));
    OK(MPI_Win_fence(0, win));
    for (int i = 0; i < n; i += 997) CHECK_EQ(mem[i], left * 7 + i);
    CHECK_EQ(mem[n - 1], left * 7 + n - 1);
    memset(buf, 0, sizeof(int) * n);
    OK(MPI_Get(buf, n, MPI_INT, right, 0, n, MPI_INT, win));
    OK(MPI_Win_fence(0, win));
    for (int i = 0; i < n; i += 997) CHECK_EQ(buf[i], me * 7 + i);
    /* Strided target with 20000 blocks: the request itself exceeds 64 KiB. */
    MPI_Datatype strided;
    OK(MPI_Type_vector(20000, 1, 3, MPI_INT, &strided));
    OK(MPI_Type_commit(&strided));
    for (int i = 0; i < 20000; i++) buf[i] = -i;
    OK(MPI_Accumulate(buf, 20000, MPI_INT, right, 0, 1, strided, MPI_SUM, win));
    OK(MPI_Win_fence(0, win));
    for (int i = 0; i < 20000; i += 101) CHECK_EQ(mem[3 * i], left * 7 + 3 * i - i);
    CHECK_EQ(mem[1], left * 7 + 1);
    OK(MPI_Win_fence(MPI_MODE_NOSUCCEED, win));
    OK(MPI_Type_free(&strided));
    OK(MPI_Win_free(&win));
    free(buf);
}

static void shared(void) {
    MPI_Comm node;
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    int nr, nn;
    OK(MPI_Comm_rank(node, &nr)); OK(MPI_Comm_size(node, &nn));
    int *mine; MPI_Win win;
    OK(MPI_Win_allocate_shared(sizeof(int) * (nr + 1), sizeof(int), MPI_INFO_NULL, node, &mine, &win));
    for (int i = 0; i <= nr; i++) mine[i] = 100 * nr + i;
    OK(MPI_Win_lock_all(0, win));
    OK(MPI_Win_sync(win));
    OK(MPI_Barrier(node));
    OK(MPI_Win_sync(win));
    for (int r = 0; r < nn; r++) {
        MPI_Aint sz; int du; int *p;
        OK(MPI_Win_shared_query(win, r, &sz, &du, &p));
        CHECK_EQ(sz, sizeof(int) * (r + 1)); CHECK_EQ(du, sizeof(int));
        /* Contiguous by default: rank r's part starts after ranks 0..r-1's. */
        CHECK(p == (int *)((char *)mine - sizeof(int) * (nr * (nr + 1) / 2)) + r * (r + 1) / 2);
        for (int i = 0; i <= r; i++) CHECK_EQ(p[i], 100 * r + i); /* direct load */
        int got = -1;
        OK(MPI_Get(&got, 1, MPI_INT, r, r, 1, MPI_INT, win));
        OK(MPI_Win_flush(r, win));
        CHECK_EQ(got, 100 * r + r);
    }
    OK(MPI_Barrier(node)); /* everyone has read before anyone adds */
    for (int r = 0; r < nn; r++) {
        int add = 1;
        OK(MPI_Accumulate(&add, 1, MPI_INT, r, 0, 1, MPI_INT, MPI_SUM, win));
    }
    OK(MPI_Win_unlock_all(win));
    OK(MPI_Barrier(node));
    CHECK_EQ(mine[0], 100 * nr + nn);
    MPI_Aint sz; int du; int *p;
    OK(MPI_Win_shared_query(win, MPI_PROC_NULL, &sz, &du, &p));
    CHECK_EQ(sz, sizeof(int));
    int *fl, flag;
    OK(MPI_Win_get_attr(win, MPI_WIN_CREATE_FLAVOR, &fl, &flag)); CHECK_EQ(*fl, MPI_WIN_FLAVOR_SHARED);
    OK(MPI_Win_free(&win));
    /* Across pretend nodes a shared window cannot be made. */
    int nodes_split = nn != np;
    if (nodes_split) {
        OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
        int rc = MPI_Win_allocate_shared(4, 4, MPI_INFO_NULL, MPI_COMM_WORLD, &mine, &win), cls;
        OK(MPI_Error_class(rc, &cls)); CHECK_EQ(cls, MPI_ERR_RMA_SHARED);
        OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
    }
    OK(MPI_Comm_free(&node));
}

/* Threaded engine: passive target progresses while the target computes outside MPI. Many
 * rounds: rank 1's lock request may reach rank 0 while rank 0 still polls in the barrier
 * (its progress thread backed off meanwhile) and be received in the pass that ends that
 * barrier; the progress thread must then serve it though it did not receive it itself
 * (once it did not, and this stalled: Session 10 in docs/performance.md). */
static void async_passive(void) {
    int *mem; MPI_Win win;
    OK(MPI_Win_allocate(sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &mem, &win));
    *mem = 0;
    for (int round = 1; round <= 50; round++) {
        OK(MPI_Barrier(MPI_COMM_WORLD));
        if (me == 0) {
            double t0 = MPI_Wtime();
            while (__atomic_load_n(mem, __ATOMIC_ACQUIRE) != round)
                CHECK(MPI_Wtime() - t0 < 30.0);
        } else if (me == 1) {
            OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win));
            OK(MPI_Put(&round, 1, MPI_INT, 0, 0, 1, MPI_INT, win));
            OK(MPI_Win_unlock(0, win));
        }
    }
    OK(MPI_Barrier(MPI_COMM_WORLD));
    OK(MPI_Win_free(&win));
}

/* mpi4py's test_rma testGetAccumulate and test_rma_nb testPutGet: every rank locks every
 * rank in turn, exclusively, on an MPI_Win_create window of MPI_Alloc_mem memory, and does
 * put, flush, get_accumulate with each op, flush, get, flush, and rput/rget waited on, for
 * counts 0 to 9; thousands of round trips answered by the target's service while the target
 * itself waits for its own locks. These ran past mpi4py's timeout on 2 ranks of a loaded
 * machine (each round trip cost a time slice while ranks spun without yielding). */
static void lock_rounds(void) {
    int *mem;
    MPI_Win win;
    OK(MPI_Alloc_mem(100 * sizeof(double), MPI_INFO_NULL, &mem));
    memset(mem, 0, 100 * sizeof(double));
    OK(MPI_Win_create(mem, 100 * sizeof(double), 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win));
    MPI_Op ops[] = {MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN, MPI_REPLACE, MPI_NO_OP};
    for (int count = 0; count < 10; count++)
        for (int r = 0; r < np; r++) {
            int ones[10], sbuf[10], rbuf[11], gbuf[11];
            for (int o = 0; o < 6; o++) {
                for (int i = 0; i < 10; i++) ones[i] = 1, sbuf[i] = i;
                for (int i = 0; i < 11; i++) rbuf[i] = gbuf[i] = -1;
                OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, r, 0, win));
                OK(MPI_Put(ones, count, MPI_INT, r, 0, count, MPI_INT, win));
                OK(MPI_Win_flush(r, win));
                OK(MPI_Get_accumulate(sbuf, count, MPI_INT, rbuf, count, MPI_INT, r, 0, count,
                                      MPI_INT, ops[o], win));
                OK(MPI_Win_flush(r, win));
                OK(MPI_Get(gbuf, count, MPI_INT, r, 0, count, MPI_INT, win));
                OK(MPI_Win_flush(r, win));
                OK(MPI_Win_unlock(r, win));
                for (int i = 0; i < count; i++) {
                    int want = o == 0 ? 1 + i : o == 1 ? i : o == 2 ? (i > 1 ? i : 1)
                             : o == 3 ? (i < 1 ? i : 1) : o == 4 ? i : 1;
                    CHECK_EQ(rbuf[i], 1);
                    CHECK_EQ(gbuf[i], want);
                }
                CHECK_EQ(rbuf[count], -1);
                CHECK_EQ(gbuf[count], -1);
            }
            for (int i = 0; i < 10; i++) sbuf[i] = r;
            for (int i = 0; i < 11; i++) rbuf[i] = -1;
            MPI_Request q;
            OK(MPI_Win_fence(0, win));
            OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, r, 0, win));
            OK(MPI_Rput(sbuf, count, MPI_INT, r, 0, count, MPI_INT, win, &q));
            OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
            OK(MPI_Win_flush(r, win));
            OK(MPI_Rget(rbuf, count, MPI_INT, r, 0, count, MPI_INT, win, &q));
            OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
            OK(MPI_Win_unlock(r, win));
            for (int i = 0; i < count; i++) CHECK_EQ(rbuf[i], r);
            CHECK_EQ(rbuf[count], -1);
        }
    OK(MPI_Win_free(&win));
    OK(MPI_Free_mem(mem));
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &me));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &np));
    OK(MPI_Comm_group(MPI_COMM_WORLD, &world_group));
    MPI_Aint *addrs = malloc(sizeof(MPI_Aint) * np);

    /* MPI_Win_create on the program's memory. */
    int *user = malloc(sizeof(int) * WN);
    MPI_Win win;
    OK(MPI_Win_create(user, sizeof(int) * WN, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win));
    exercise(win, user, NULL, "create");
    OK(MPI_Win_free(&win)); CHECK(win == MPI_WIN_NULL);

    /* MPI_Win_allocate, with the attribute and error tests. */
    int *mem;
    OK(MPI_Win_allocate(sizeof(int) * WN, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &mem, &win));
    CHECK(((uintptr_t)mem & 63) == 0);
    exercise(win, mem, NULL, "allocate");
    attributes_and_errors(win, mem, sizeof(int) * WN);
    OK(MPI_Win_free(&win)); CHECK_EQ(deleted, 10);

    /* A shared window (when every rank is on this node): operations by direct access. */
    MPI_Comm node;
    int nn;
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    OK(MPI_Comm_size(node, &nn));
    if (nn == np) {
        OK(MPI_Win_allocate_shared(sizeof(int) * WN, sizeof(int), MPI_INFO_NULL, node, &mem, &win));
        exercise(win, mem, NULL, "shared");
        OK(MPI_Win_free(&win));
    }
    OK(MPI_Comm_free(&node));

    /* A dynamic window: attach, publish addresses, the same operations by address. */
    OK(MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &win));
    int *dyn = malloc(sizeof(int) * WN);
    OK(MPI_Win_attach(win, dyn, sizeof(int) * WN));
    MPI_Aint mine_addr;
    OK(MPI_Get_address(dyn, &mine_addr));
    OK(MPI_Allgather(&mine_addr, 1, MPI_AINT, addrs, 1, MPI_AINT, MPI_COMM_WORLD));
    exercise(win, dyn, addrs, "dynamic");
    /* Memory that is not attached is refused at the target, reported at the flush. */
    OK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
    int x = 3, cls;
    OK(MPI_Win_lock(MPI_LOCK_SHARED, (me + 1) % np, 0, win));
    OK(MPI_Put(&x, 1, MPI_INT, (me + 1) % np, addrs[(me + 1) % np] + 4 * WN, 1, MPI_INT, win));
    int rc = MPI_Win_unlock((me + 1) % np, win);
    OK(MPI_Error_class(rc, &cls)); CHECK_EQ(cls, MPI_ERR_RMA_RANGE);
    OK(MPI_Barrier(MPI_COMM_WORLD));
    OK(MPI_Win_detach(win, dyn));
    rc = MPI_Win_detach(win, dyn);
    OK(MPI_Error_class(rc, &cls)); CHECK_EQ(cls, MPI_ERR_RMA_ATTACH);
    OK(MPI_Win_free(&win));
    free(dyn);

    int verbose = me == 0 && getenv("RMA_VERBOSE");
    contention();
    if (verbose) printf("contention ok %.3f\n", MPI_Wtime());
    large();
    if (verbose) printf("large ok %.3f\n", MPI_Wtime());
    shared();
    double t0 = MPI_Wtime();
    lock_rounds();
    if (verbose) printf("lock rounds ok in %.3f s\n", MPI_Wtime() - t0);
    if (getenv("RMA_ASYNC") && np > 1) async_passive();
    if (verbose) printf("shared ok %.3f\n", MPI_Wtime());

    free(user);
    free(addrs);
    OK(MPI_Group_free(&world_group));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    if (me == 0) printf("rma ok\n");
    MPI_Finalize();
    return 0;
}
