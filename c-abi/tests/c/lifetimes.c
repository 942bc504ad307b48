/* Object lifetimes as MPI defines them (an object lives while a handle or a user of it
 * remains; MPI_*_free marks the handle), every standard error class, user error classes,
 * MPI_ERRORS_ABORT, invalid handles to stubs, and the MPI_COMM_SELF delete callbacks at
 * MPI_Finalize (newest first). 2 ranks or more; rank 0 prints "lifetimes ok". */
#include "check.h"
#include <string.h>

#define CLASS(call, expected)                                                          \
    do {                                                                               \
        int _rc = (call), _cls = -1;                                                   \
        OK(MPI_Error_class(_rc, &_cls));                                               \
        CHECK_EQ(_cls, expected);                                                      \
    } while (0)

/* ---- datatypes ---- */

static void contents_of_dup_free_in_every_order(void) {
    for (int order = 0; order < 2; order++) {
        MPI_Datatype base, dup, inner[1];
        int ni, na, nd, comb, ints[1];
        MPI_Aint addrs[1];
        OK(MPI_Type_contiguous(3, MPI_INT, &base));
        OK(MPI_Type_dup(base, &dup));
        OK(MPI_Type_get_envelope(dup, &ni, &na, &nd, &comb));
        CHECK_EQ(comb, MPI_COMBINER_DUP);
        CHECK_EQ(nd, 1);
        OK(MPI_Type_get_contents(dup, 0, 0, 1, ints, addrs, inner));
        CHECK_EQ(inner[0], base); /* the same handle, one more reference (as MPICH) */
        if (order == 0) {
            OK(MPI_Type_free(&inner[0]));
            CHECK_EQ(inner[0], MPI_DATATYPE_NULL);
            int sz;
            OK(MPI_Type_size(base, &sz)); /* still valid */
            CHECK_EQ(sz, 12);
            OK(MPI_Type_free(&base));
        } else {
            OK(MPI_Type_free(&base));
            int sz;
            OK(MPI_Type_size(inner[0], &sz));
            CHECK_EQ(sz, 12);
            OK(MPI_Type_free(&inner[0]));
        }
        OK(MPI_Type_commit(&dup));
        OK(MPI_Type_free(&dup));
    }
    MPI_Datatype t, copy;
    OK(MPI_Type_contiguous(2, MPI_INT, &t));
    copy = t;
    OK(MPI_Type_free(&t));
    CLASS(MPI_Type_free(&copy), MPI_ERR_TYPE); /* double free */
}

static void contents_of_struct_with_derived_member(void) {
    MPI_Datatype vec, st, got[2];
    OK(MPI_Type_vector(2, 1, 3, MPI_DOUBLE, &vec));
    int bl[2] = {1, 2};
    MPI_Aint disp[2] = {0, 64};
    MPI_Datatype types[2] = {vec, MPI_INT};
    OK(MPI_Type_create_struct(2, bl, disp, types, &st));
    int ni, na, nd, comb;
    OK(MPI_Type_get_envelope(st, &ni, &na, &nd, &comb));
    CHECK_EQ(comb, MPI_COMBINER_STRUCT);
    CHECK_EQ(nd, 2);
    int ints[3];
    MPI_Aint addrs[2];
    OK(MPI_Type_get_contents(st, 3, 2, 2, ints, addrs, got));
    CHECK_EQ(got[0], vec);
    CHECK_EQ(got[1], MPI_INT);
    /* Free the original first, then the returned handle, then the struct: each succeeds
     * and the struct keeps working in between. */
    OK(MPI_Type_free(&vec));
    OK(MPI_Type_commit(&st));
    int sz;
    OK(MPI_Type_size(st, &sz));
    CHECK_EQ(sz, 2 * 8 + 2 * 4);
    OK(MPI_Type_free(&got[0])); /* MPI_INT is predefined: not freed */
    OK(MPI_Type_size(st, &sz));
    OK(MPI_Type_free(&st));
    /* Decoding again after the original's handle went gives a fresh handle to free. */
    MPI_Datatype c, d, back[1];
    OK(MPI_Type_contiguous(4, MPI_CHAR, &c));
    OK(MPI_Type_dup(c, &d));
    OK(MPI_Type_free(&c));
    OK(MPI_Type_get_contents(d, 0, 0, 1, ints, addrs, back));
    OK(MPI_Type_size(back[0], &sz));
    CHECK_EQ(sz, 4);
    OK(MPI_Type_free(&back[0]));
    OK(MPI_Type_free(&d));
}

static void type_freed_while_in_use(int rank) {
    /* A type freed while a send with it is pending, and while a type built on it lives. */
    MPI_Datatype pair, quad;
    OK(MPI_Type_contiguous(2, MPI_INT, &pair));
    OK(MPI_Type_contiguous(2, pair, &quad));
    OK(MPI_Type_commit(&pair));
    OK(MPI_Type_commit(&quad));
    int buf[4] = {rank, 7, 8, 9}, in[4] = {0};
    MPI_Request r;
    if (rank == 0) {
        OK(MPI_Isend(buf, 2, pair, 1, 11, MPI_COMM_WORLD, &r));
        OK(MPI_Type_free(&pair));
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        OK(MPI_Send(buf, 1, quad, 1, 12, MPI_COMM_WORLD)); /* built on the freed type */
    } else if (rank == 1) {
        OK(MPI_Irecv(in, 2, pair, 0, 11, MPI_COMM_WORLD, &r));
        OK(MPI_Type_free(&pair));
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        CHECK(in[0] == 0 && in[1] == 7 && in[2] == 8 && in[3] == 9);
        memset(in, 0, sizeof in);
        OK(MPI_Recv(in, 1, quad, 0, 12, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK(in[3] == 9);
    } else {
        OK(MPI_Type_free(&pair));
    }
    OK(MPI_Type_free(&quad));
}

/* ---- keyvals ---- */

static int comm_deletes, type_deletes;
static int comm_delete(MPI_Comm c, int k, void *v, void *extra) {
    (void)c; (void)k; (void)extra;
    CHECK(v == (void *)&comm_deletes);
    comm_deletes++;
    return MPI_SUCCESS;
}
static int type_delete(MPI_Datatype t, int k, void *v, void *extra) {
    (void)t; (void)k; (void)v; (void)extra;
    type_deletes++;
    return MPI_SUCCESS;
}

static void keyvals_freed_while_attached(void) {
    MPI_Comm dup, dup2;
    int kv, kept, flag;
    void *val;
    OK(MPI_Comm_create_keyval(MPI_COMM_DUP_FN, comm_delete, &kv, NULL));
    kept = kv;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    OK(MPI_Comm_set_attr(dup, kv, &comm_deletes));
    OK(MPI_Comm_free_keyval(&kv));
    CHECK_EQ(kv, MPI_KEYVAL_INVALID);
    /* The program can no longer name it ... */
    CLASS(MPI_Comm_get_attr(dup, kept, &val, &flag), MPI_ERR_KEYVAL);
    /* ... but copies and deletions of the attached attribute still run its callbacks. */
    OK(MPI_Comm_dup(dup, &dup2));
    OK(MPI_Comm_free(&dup));
    CHECK_EQ(comm_deletes, 1);
    OK(MPI_Comm_free(&dup2));
    CHECK_EQ(comm_deletes, 2);
    /* Now nothing uses it: it is gone. */
    CLASS(MPI_Comm_free_keyval(&kept), MPI_ERR_KEYVAL);

    MPI_Datatype t;
    int tk, tkept;
    OK(MPI_Type_contiguous(2, MPI_INT, &t));
    OK(MPI_Type_create_keyval(MPI_TYPE_NULL_COPY_FN, type_delete, &tk, NULL));
    tkept = tk;
    OK(MPI_Type_set_attr(t, tk, NULL));
    OK(MPI_Type_free_keyval(&tk));
    CLASS(MPI_Type_get_attr(t, tkept, &val, &flag), MPI_ERR_KEYVAL);
    OK(MPI_Type_free(&t));
    CHECK_EQ(type_deletes, 1);
}

/* ---- error handlers, ops, groups, info, requests ---- */

static int handler_calls, handler_code;
static void my_handler(MPI_Comm *comm, int *code, ...) {
    (void)comm;
    handler_calls++;
    handler_code = *code;
}
static void my_max(void *in, void *inout, int *len, MPI_Datatype *t) {
    (void)t;
    for (int i = 0; i < *len; i++)
        if (((int *)in)[i] > ((int *)inout)[i]) ((int *)inout)[i] = ((int *)in)[i];
}

static void handlers_and_friends(int rank, int size) {
    MPI_Comm dup;
    MPI_Errhandler eh, got, keep;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    OK(MPI_Comm_create_errhandler(my_handler, &eh));
    keep = eh;
    OK(MPI_Comm_set_errhandler(dup, eh));
    OK(MPI_Errhandler_free(&eh));
    CHECK_EQ(eh, MPI_ERRHANDLER_NULL);
    int x = 0;
    CLASS(MPI_Send(&x, 1, MPI_INT, size, 0, dup), MPI_ERR_RANK); /* still called */
    CHECK_EQ(handler_calls, 1);
    OK(MPI_Comm_get_errhandler(dup, &got)); /* a new reference to free */
    CHECK_EQ(got, keep);
    OK(MPI_Errhandler_free(&got));
    CLASS(MPI_Errhandler_free(&keep), MPI_ERR_ARG); /* no reference left */

    /* User error classes and codes, through the handler and MPI_Error_string. */
    int cls, code, lastused, len;
    char msg[MPI_MAX_ERROR_STRING];
    OK(MPI_Add_error_class(&cls));
    CHECK(cls > MPI_ERR_LASTCODE);
    OK(MPI_Add_error_code(cls, &code));
    CHECK(code > cls);
    OK(MPI_Add_error_string(code, "the frobnicator jammed"));
    OK(MPI_Add_error_string(cls, "frobnicator errors"));
    CLASS(MPI_Add_error_string(MPI_ERR_IO, "nope"), MPI_ERR_ARG);
    int k;
    OK(MPI_Error_class(code, &k));
    CHECK_EQ(k, cls);
    OK(MPI_Error_string(code, msg, &len));
    CHECK(strcmp(msg, "the frobnicator jammed") == 0 && len == (int)strlen(msg));
    OK(MPI_Error_string(cls, msg, &len));
    CHECK(strcmp(msg, "frobnicator errors") == 0);
    void *v;
    int flag;
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_LASTUSEDCODE, &v, &flag));
    CHECK(flag);
    lastused = *(int *)v;
    CHECK(lastused >= code);
    OK(MPI_Comm_call_errhandler(dup, code));
    CHECK_EQ(handler_calls, 2);
    CHECK_EQ(handler_code, code);
    OK(MPI_Comm_free(&dup));

    /* MPI_ERRORS_ABORT reads back as itself. */
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    OK(MPI_Comm_set_errhandler(dup, MPI_ERRORS_ABORT));
    OK(MPI_Comm_get_errhandler(dup, &got));
    CHECK_EQ(got, MPI_ERRORS_ABORT);
    OK(MPI_Errhandler_free(&got));

    /* A user op freed while a non-blocking reduction with it is pending. */
    MPI_Op op;
    MPI_Request r;
    int in = rank, out = -1;
    OK(MPI_Op_create(my_max, 1, &op));
    OK(MPI_Iallreduce(&in, &out, 1, MPI_INT, op, dup, &r));
    OK(MPI_Op_free(&op));
    CHECK_EQ(op, MPI_OP_NULL);
    OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    CHECK_EQ(out, size - 1);

    /* Communicator freed with a receive pending on it: the receive completes. */
    int got_val = -1, send_val = 42 + rank;
    MPI_Request rr, sr;
    OK(MPI_Irecv(&got_val, 1, MPI_INT, (rank + size - 1) % size, 5, dup, &rr));
    OK(MPI_Isend(&send_val, 1, MPI_INT, (rank + 1) % size, 5, dup, &sr));
    OK(MPI_Comm_free(&dup));
    CHECK_EQ(dup, MPI_COMM_NULL);
    OK(MPI_Wait(&rr, MPI_STATUS_IGNORE));
    OK(MPI_Wait(&sr, MPI_STATUS_IGNORE));
    CHECK_EQ(got_val, 42 + (rank + size - 1) % size);

    /* A communicator freed with a wildcard receive pending keeps its context id: a new
     * communicator made right after must not get it, or the old receive would take the
     * new communicator's message. */
    {
        MPI_Comm old, fresh;
        MPI_Request pending;
        MPI_Status st;
        int stale = -1, v = 0, cancelled = 0;
        OK(MPI_Comm_dup(MPI_COMM_WORLD, &old));
        if (rank == 0) OK(MPI_Irecv(&stale, 1, MPI_INT, MPI_ANY_SOURCE, 8, old, &pending));
        OK(MPI_Comm_free(&old));
        OK(MPI_Comm_dup(MPI_COMM_WORLD, &fresh));
        if (rank == 1) {
            v = 1234;
            OK(MPI_Send(&v, 1, MPI_INT, 0, 8, fresh));
        } else if (rank == 0) {
            OK(MPI_Recv(&v, 1, MPI_INT, MPI_ANY_SOURCE, 8, fresh, &st));
            CHECK_EQ(v, 1234);
            CHECK_EQ(st.MPI_SOURCE, 1);
            CHECK_EQ(stale, -1);
            OK(MPI_Cancel(&pending));
            OK(MPI_Wait(&pending, &st));
            OK(MPI_Test_cancelled(&st, &cancelled));
            CHECK(cancelled);
        }
        OK(MPI_Comm_free(&fresh));
    }

    /* A persistent request freed while active: the operation still completes. */
    int pv = 100 + rank, pin = -1;
    MPI_Request pr;
    if (rank == 0) {
        OK(MPI_Send_init(&pv, 1, MPI_INT, 1, 6, MPI_COMM_WORLD, &pr));
        OK(MPI_Start(&pr));
        OK(MPI_Request_free(&pr));
        CHECK_EQ(pr, MPI_REQUEST_NULL);
    } else if (rank == 1) {
        OK(MPI_Recv(&pin, 1, MPI_INT, 0, 6, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK_EQ(pin, 100);
    }
    OK(MPI_Barrier(MPI_COMM_WORLD));

    /* Groups: a group freed while a communicator made from it lives; double free. */
    MPI_Group g, g2;
    OK(MPI_Comm_group(MPI_COMM_WORLD, &g));
    g2 = g;
    MPI_Comm sub;
    OK(MPI_Comm_create(MPI_COMM_WORLD, g, &sub));
    OK(MPI_Group_free(&g));
    CLASS(MPI_Group_free(&g2), MPI_ERR_GROUP);
    int ssz;
    OK(MPI_Comm_size(sub, &ssz));
    CHECK_EQ(ssz, size);
    OK(MPI_Comm_free(&sub));

    /* Info: a duplicate outlives its original; double free. */
    MPI_Info i1, i2, i3;
    OK(MPI_Info_create(&i1));
    OK(MPI_Info_set(i1, "k", "v"));
    OK(MPI_Info_dup(i1, &i2));
    i3 = i1;
    OK(MPI_Info_free(&i1));
    CLASS(MPI_Info_free(&i3), MPI_ERR_INFO);
    int nkeys;
    OK(MPI_Info_get_nkeys(i2, &nkeys));
    CHECK_EQ(nkeys, 1);
    OK(MPI_Info_free(&i2));
}

/* ---- error classes ---- */

static const int STANDARD[] = {
    MPI_SUCCESS, MPI_ERR_BUFFER, MPI_ERR_COUNT, MPI_ERR_TYPE, MPI_ERR_TAG, MPI_ERR_COMM,
    MPI_ERR_RANK, MPI_ERR_ROOT, MPI_ERR_GROUP, MPI_ERR_OP, MPI_ERR_TOPOLOGY, MPI_ERR_DIMS,
    MPI_ERR_ARG, MPI_ERR_UNKNOWN, MPI_ERR_TRUNCATE, MPI_ERR_OTHER, MPI_ERR_INTERN,
    MPI_ERR_IN_STATUS, MPI_ERR_PENDING, MPI_ERR_REQUEST, MPI_ERR_ACCESS, MPI_ERR_AMODE,
    MPI_ERR_BAD_FILE, MPI_ERR_CONVERSION, MPI_ERR_DUP_DATAREP, MPI_ERR_FILE_EXISTS,
    MPI_ERR_FILE_IN_USE, MPI_ERR_FILE, MPI_ERR_INFO, MPI_ERR_INFO_KEY, MPI_ERR_INFO_VALUE,
    MPI_ERR_INFO_NOKEY, MPI_ERR_IO, MPI_ERR_NAME, MPI_ERR_NO_MEM, MPI_ERR_NOT_SAME,
    MPI_ERR_NO_SPACE, MPI_ERR_NO_SUCH_FILE, MPI_ERR_PORT, MPI_ERR_QUOTA, MPI_ERR_READ_ONLY,
    MPI_ERR_SERVICE, MPI_ERR_SPAWN, MPI_ERR_UNSUPPORTED_DATAREP,
    MPI_ERR_UNSUPPORTED_OPERATION, MPI_ERR_WIN, MPI_ERR_BASE, MPI_ERR_LOCKTYPE,
    MPI_ERR_KEYVAL, MPI_ERR_RMA_CONFLICT, MPI_ERR_RMA_SYNC, MPI_ERR_SIZE, MPI_ERR_DISP,
    MPI_ERR_ASSERT, MPI_ERR_RMA_RANGE, MPI_ERR_RMA_ATTACH, MPI_ERR_RMA_SHARED,
    MPI_ERR_RMA_FLAVOR, MPI_T_ERR_MEMORY, MPI_T_ERR_NOT_INITIALIZED, MPI_T_ERR_CANNOT_INIT,
    MPI_T_ERR_INVALID_INDEX, MPI_T_ERR_INVALID_ITEM, MPI_T_ERR_INVALID_HANDLE,
    MPI_T_ERR_OUT_OF_HANDLES, MPI_T_ERR_OUT_OF_SESSIONS, MPI_T_ERR_INVALID_SESSION,
    MPI_T_ERR_CVAR_SET_NOT_NOW, MPI_T_ERR_CVAR_SET_NEVER, MPI_T_ERR_PVAR_NO_STARTSTOP,
    MPI_T_ERR_PVAR_NO_WRITE, MPI_T_ERR_PVAR_NO_ATOMIC, MPI_T_ERR_INVALID_NAME,
    MPI_T_ERR_INVALID, MPI_ERR_SESSION, MPI_ERR_PROC_ABORTED, MPI_ERR_VALUE_TOO_LARGE,
    MPI_T_ERR_NOT_SUPPORTED,
};
#define NSTANDARD ((int)(sizeof STANDARD / sizeof STANDARD[0]))

static void every_standard_class(void) {
    static char strings[NSTANDARD][MPI_MAX_ERROR_STRING];
    for (int i = 0; i < NSTANDARD; i++) {
        int cls = -1, len = -1;
        OK(MPI_Error_class(STANDARD[i], &cls));
        CHECK_EQ(cls, STANDARD[i]);
        CHECK(STANDARD[i] <= MPI_ERR_LASTCODE);
        OK(MPI_Error_string(STANDARD[i], strings[i], &len));
        CHECK(len > 0 && len == (int)strlen(strings[i]));
        for (int j = 0; j < i; j++) CHECK(strcmp(strings[i], strings[j]) != 0);
    }
    int cls;
    CLASS(MPI_Error_class(MPI_ERR_LASTCODE + 999999, &cls), MPI_ERR_ARG);
}

/* ---- stubs: the handle's class comes first ---- */

static void invalid_handles_to_stubs(void) {
    MPI_Group g;
    MPI_Comm c;
    MPI_Datatype t;
    int dims[1] = {1}, zeros[1] = {0};
    CLASS(MPI_Comm_remote_group(MPI_COMM_NULL, &g), MPI_ERR_COMM);
    CLASS(MPI_Intercomm_merge(MPI_COMM_NULL, 0, &c), MPI_ERR_COMM);
    CLASS(MPI_Win_fence(0, MPI_WIN_NULL), MPI_ERR_WIN);
    CLASS(MPI_File_sync(MPI_FILE_NULL), MPI_ERR_FILE);
    CLASS(MPI_File_set_view(MPI_FILE_NULL, 0, MPI_INT, MPI_INT, "native", MPI_INFO_NULL),
          MPI_ERR_FILE);
    CLASS(MPI_Type_create_darray(1, 0, 1, dims, zeros, zeros, dims, MPI_ORDER_C,
                                 MPI_DATATYPE_NULL, &t),
          MPI_ERR_TYPE);
    /* darray is implemented: 0 is no distribution. */
    CLASS(MPI_Type_create_darray(1, 0, 1, dims, zeros, zeros, dims, MPI_ORDER_C, MPI_INT, &t),
          MPI_ERR_ARG);
    /* MPI_Comm_join is implemented: -1 is no socket. */
    CLASS(MPI_Comm_join(-1, &c), MPI_ERR_ARG);
    /* An intracommunicator has no remote group. */
    CLASS(MPI_Comm_remote_group(MPI_COMM_WORLD, &g), MPI_ERR_COMM);
    /* And the conversions of file handles are there (MPI_FILE_NULL <-> 0). */
    CHECK_EQ(MPI_File_c2f(MPI_FILE_NULL), 0);
    CHECK(MPI_File_f2c(0) == MPI_FILE_NULL);
}

/* ---- MPI_COMM_SELF at MPI_Finalize ---- */

static int self_order[3], self_n;
static int self_delete(MPI_Comm c, int k, void *v, void *extra) {
    (void)k; (void)extra;
    int finalized = 1;
    MPI_Finalized(&finalized);
    if (c != MPI_COMM_SELF || finalized || self_n >= 3) {
        fprintf(stderr, "self delete callback called wrongly\n");
        exit(1);
    }
    self_order[self_n++] = (int)(long)v;
    return MPI_SUCCESS;
}

int main(int argc, char **argv) {
    int rank, size;
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    CHECK(size >= 2);
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));

    contents_of_dup_free_in_every_order();
    contents_of_struct_with_derived_member();
    type_freed_while_in_use(rank);
    keyvals_freed_while_attached();
    handlers_and_friends(rank, size);
    every_standard_class();
    invalid_handles_to_stubs();

    /* Three attributes on MPI_COMM_SELF, set 1, 2, 3 (the second set twice: its place is
     * that of its last setting), and one keyval freed before MPI_Finalize. */
    int k[3];
    for (int i = 0; i < 3; i++) OK(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, self_delete, &k[i], NULL));
    OK(MPI_Comm_set_attr(MPI_COMM_SELF, k[1], (void *)1L));
    OK(MPI_Comm_set_attr(MPI_COMM_SELF, k[0], (void *)0L));
    OK(MPI_Comm_set_attr(MPI_COMM_SELF, k[2], (void *)2L));
    /* Replacing a value runs the delete callback for the old one: account for it. */
    OK(MPI_Comm_set_attr(MPI_COMM_SELF, k[1], (void *)1L));
    CHECK_EQ(self_n, 1);
    self_n = 0;
    OK(MPI_Comm_free_keyval(&k[2]));
    OK(MPI_Finalize());
    /* Set order 0, 2, 1: deleted 1, 2, 0. */
    if (self_n != 3 || self_order[0] != 1 || self_order[1] != 2 || self_order[2] != 0) {
        fprintf(stderr, "MPI_COMM_SELF delete callbacks: %d calls, order %d %d %d\n", self_n,
                self_order[0], self_order[1], self_order[2]);
        return 1;
    }
    if (rank == 0) printf("lifetimes ok\n");
    return 0;
}
