/* Error classes under MPI_ERRORS_RETURN, user error handlers, attributes, info objects,
 * operations and the environment queries (2 ranks or more). */
#include "check.h"
#include <string.h>

static int handler_calls, handler_code;
static void my_handler(MPI_Comm *comm, int *code, ...) {
    (void)comm;
    handler_calls++;
    handler_code = *code;
}

static int deletes, copies;
static int count_delete(MPI_Comm c, int k, void *v, void *extra) {
    (void)c; (void)k; (void)v;
    CHECK(extra == &deletes);
    deletes++;
    return MPI_SUCCESS;
}
static int count_copy(MPI_Comm c, int k, void *extra, void *in, void *out, int *flag) {
    (void)c; (void)k; (void)extra;
    copies++;
    *(void **)out = (char *)in + 1;
    *flag = 1;
    return MPI_SUCCESS;
}
static void my_sum(void *in, void *inout, int *len, MPI_Datatype *t) {
    (void)in; (void)inout; (void)len; (void)t;
}

#define CLASS(call, expected)                                                          \
    do {                                                                               \
        int _rc = (call), _cls;                                                        \
        OK(MPI_Error_class(_rc, &_cls));                                               \
        CHECK_EQ(_cls, expected);                                                      \
    } while (0)

int main(int argc, char **argv) {
    int rank, size, provided, flag;
    OK(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided));
    CHECK(provided >= MPI_THREAD_SINGLE && provided <= MPI_THREAD_MULTIPLE);
    OK(MPI_Query_thread(&flag));
    CHECK_EQ(flag, provided);
    OK(MPI_Is_thread_main(&flag));
    CHECK_EQ(flag, 1);
    OK(MPI_Initialized(&flag));
    CHECK_EQ(flag, 1);
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    CHECK(size >= 2);

    MPI_Errhandler eh;
    OK(MPI_Comm_get_errhandler(MPI_COMM_WORLD, &eh));
    CHECK_EQ(eh, MPI_ERRORS_ARE_FATAL);
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    OK(MPI_Comm_get_errhandler(MPI_COMM_WORLD, &eh));
    CHECK_EQ(eh, MPI_ERRORS_RETURN);

    int x = 0;
    CLASS(MPI_Send(&x, 1, MPI_INT, size, 0, MPI_COMM_WORLD), MPI_ERR_RANK);
    CLASS(MPI_Send(&x, 1, MPI_INT, 0, -5, MPI_COMM_WORLD), MPI_ERR_TAG);
    CLASS(MPI_Send(&x, -1, MPI_INT, 0, 0, MPI_COMM_WORLD), MPI_ERR_COUNT);
    CLASS(MPI_Send(&x, 1, MPI_DATATYPE_NULL, 0, 0, MPI_COMM_WORLD), MPI_ERR_TYPE);
    CLASS(MPI_Send(&x, 1, (MPI_Datatype)0x1234, 0, 0, MPI_COMM_WORLD), MPI_ERR_TYPE);
    CLASS(MPI_Send(&x, 1, MPI_INT, 0, 0, MPI_COMM_NULL), MPI_ERR_COMM);
    CLASS(MPI_Send(&x, 1, MPI_INT, 0, 0, (MPI_Comm)0x7777), MPI_ERR_COMM);
    CLASS(MPI_Send(NULL, 1, MPI_INT, 0, 0, MPI_COMM_WORLD), MPI_ERR_BUFFER);
    CLASS(MPI_Comm_rank(MPI_COMM_WORLD, NULL), MPI_ERR_ARG);
    MPI_Comm freed;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &freed));
    MPI_Comm keep = freed;
    OK(MPI_Comm_free(&freed));
    CLASS(MPI_Send(&x, 1, MPI_INT, 0, 0, keep), MPI_ERR_COMM);
    CLASS(MPI_Comm_free(&(MPI_Comm){MPI_COMM_WORLD}), MPI_ERR_COMM);
    MPI_Datatype unc, keep_t;
    OK(MPI_Type_contiguous(2, MPI_INT, &unc));
    CLASS(MPI_Send(&x, 1, unc, 0, 0, MPI_COMM_WORLD), MPI_ERR_TYPE);
    keep_t = unc;
    OK(MPI_Type_free(&unc));
    CLASS(MPI_Type_commit(&keep_t), MPI_ERR_TYPE);
    CLASS(MPI_Type_free(&(MPI_Datatype){MPI_INT}), MPI_ERR_TYPE);
    MPI_Request bad = (MPI_Request)0x1234;
    CLASS(MPI_Wait(&bad, MPI_STATUS_IGNORE), MPI_ERR_REQUEST);
    CLASS(MPI_Group_free(&(MPI_Group){MPI_GROUP_NULL}), MPI_ERR_GROUP);
    CLASS(MPI_Op_free(&(MPI_Op){MPI_SUM}), MPI_ERR_OP);
    CLASS(MPI_Comm_get_attr(MPI_COMM_WORLD, 123456, &(void *){0}, &flag), MPI_ERR_KEYVAL);

    /* Freed and foreign handles of every kind are refused with their class. */
    MPI_Group wg, keep_g;
    OK(MPI_Comm_group(MPI_COMM_WORLD, &wg));
    keep_g = wg;
    OK(MPI_Group_free(&wg));
    int gsize;
    CLASS(MPI_Group_size(keep_g, &gsize), MPI_ERR_GROUP);
    CLASS(MPI_Group_size((MPI_Group)MPI_COMM_WORLD, &gsize), MPI_ERR_GROUP);
    MPI_Info inf, keep_i;
    OK(MPI_Info_create(&inf));
    keep_i = inf;
    OK(MPI_Info_free(&inf));
    CLASS(MPI_Info_set(keep_i, "k", "v"), MPI_ERR_INFO);
    MPI_Message bad_msg = (MPI_Message)0x1234;
    CLASS(MPI_Mrecv(&x, 1, MPI_INT, &bad_msg, MPI_STATUS_IGNORE), MPI_ERR_REQUEST);
    CLASS(MPI_Comm_set_errhandler(MPI_COMM_WORLD, (MPI_Errhandler)0x1234), MPI_ERR_ARG);
    CLASS(MPI_Op_commutative((MPI_Op)0x1234, &flag), MPI_ERR_OP);
    CLASS(MPI_Type_size(MPI_COMM_WORLD, &gsize), MPI_ERR_TYPE);

    /* Truncation: single and multiple completion. */
    int big[4] = {1, 2, 3, 4}, small[2];
    MPI_Status st;
    if (rank == 0) {
        OK(MPI_Send(big, 4, MPI_INT, 1, 1, MPI_COMM_WORLD));
        OK(MPI_Send(big, 4, MPI_INT, 1, 2, MPI_COMM_WORLD));
    } else if (rank == 1) {
        CLASS(MPI_Recv(small, 2, MPI_INT, 0, 1, MPI_COMM_WORLD, &st), MPI_ERR_TRUNCATE);
        MPI_Request rq[2];
        MPI_Status sts[2];
        int ok = -1;
        OK(MPI_Irecv(small, 2, MPI_INT, 0, 2, MPI_COMM_WORLD, &rq[0]));
        OK(MPI_Irecv(&ok, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &rq[1]));
        CLASS(MPI_Waitall(2, rq, sts), MPI_ERR_IN_STATUS);
        CHECK_EQ(sts[0].MPI_ERROR, MPI_ERR_TRUNCATE);
        CHECK_EQ(sts[1].MPI_ERROR, MPI_SUCCESS);
    }

    /* Error strings. */
    char msg[MPI_MAX_ERROR_STRING];
    int len;
    OK(MPI_Error_string(MPI_ERR_RANK, msg, &len));
    CHECK(len > 0 && (int)strlen(msg) == len);

    /* A user error handler on a dup of world. */
    MPI_Comm d;
    MPI_Errhandler mine;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &d));
    OK(MPI_Comm_create_errhandler(my_handler, &mine));
    OK(MPI_Comm_set_errhandler(d, mine));
    CLASS(MPI_Send(&x, 1, MPI_INT, size + 3, 0, d), MPI_ERR_RANK);
    CHECK_EQ(handler_calls, 1);
    CHECK_EQ(handler_code, MPI_ERR_RANK);
    OK(MPI_Comm_call_errhandler(d, MPI_ERR_OTHER));
    CHECK_EQ(handler_calls, 2);
    OK(MPI_Comm_get_errhandler(d, &eh));
    CHECK_EQ(eh, mine);
    OK(MPI_Errhandler_free(&mine));
    CHECK_EQ(mine, MPI_ERRHANDLER_NULL);

    /* Attributes: predefined ones and user keyvals with callbacks. */
    int *ub;
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag));
    CHECK(flag && *ub >= 32767);
    int *usz;
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_UNIVERSE_SIZE, &usz, &flag));
    CHECK(flag);
    int kv, kv2;
    OK(MPI_Comm_create_keyval(count_copy, count_delete, &kv, &deletes));
    OK(MPI_Comm_create_keyval(MPI_COMM_DUP_FN, MPI_COMM_NULL_DELETE_FN, &kv2, NULL));
    static char value[4];
    OK(MPI_Comm_set_attr(d, kv, value));
    OK(MPI_Comm_set_attr(d, kv2, value + 2));
    void *got;
    OK(MPI_Comm_get_attr(d, kv, &got, &flag));
    CHECK(flag && got == value);
    MPI_Comm d2;
    OK(MPI_Comm_dup(d, &d2));
    CHECK_EQ(copies, 1);
    OK(MPI_Comm_get_attr(d2, kv, &got, &flag));
    CHECK(flag && got == value + 1);
    OK(MPI_Comm_get_attr(d2, kv2, &got, &flag));
    CHECK(flag && got == value + 2);
    OK(MPI_Comm_set_attr(d, kv, value + 3)); /* replaces: deletes the old value */
    CHECK_EQ(deletes, 1);
    OK(MPI_Comm_delete_attr(d, kv));
    CHECK_EQ(deletes, 2);
    OK(MPI_Comm_get_attr(d, kv, &got, &flag));
    CHECK_EQ(flag, 0);
    OK(MPI_Comm_free(&d2));
    CHECK_EQ(deletes, 3);
    OK(MPI_Comm_free_keyval(&kv));
    CHECK_EQ(kv, MPI_KEYVAL_INVALID);
    OK(MPI_Comm_free_keyval(&kv2));
    OK(MPI_Comm_free(&d));

    /* Info objects. */
    MPI_Info info, info2;
    char val[MPI_MAX_INFO_VAL + 1], key[MPI_MAX_INFO_KEY + 1];
    int nkeys, vlen;
    OK(MPI_Info_create(&info));
    OK(MPI_Info_set(info, "alpha", "1"));
    OK(MPI_Info_set(info, "beta", "two"));
    OK(MPI_Info_set(info, "alpha", "one"));
    OK(MPI_Info_get_nkeys(info, &nkeys));
    CHECK_EQ(nkeys, 2);
    OK(MPI_Info_get(info, "alpha", MPI_MAX_INFO_VAL, val, &flag));
    CHECK(flag && strcmp(val, "one") == 0);
    OK(MPI_Info_get_valuelen(info, "beta", &vlen, &flag));
    CHECK(flag && vlen == 3);
    OK(MPI_Info_get_nthkey(info, 1, key));
    CHECK(strcmp(key, "beta") == 0);
    OK(MPI_Info_dup(info, &info2));
    OK(MPI_Info_delete(info, "alpha"));
    CLASS(MPI_Info_delete(info, "alpha"), MPI_ERR_INFO_NOKEY);
    OK(MPI_Info_get(info, "alpha", MPI_MAX_INFO_VAL, val, &flag));
    CHECK_EQ(flag, 0);
    OK(MPI_Info_get(info2, "alpha", MPI_MAX_INFO_VAL, val, &flag));
    CHECK_EQ(flag, 1);
    CLASS(MPI_Info_get_nthkey(info, 5, key), MPI_ERR_ARG);
    OK(MPI_Info_free(&info));
    OK(MPI_Info_free(&info2));
    CHECK_EQ(info, MPI_INFO_NULL);
    CLASS(MPI_Info_set(MPI_INFO_NULL, "a", "b"), MPI_ERR_INFO);

    /* Operations. */
    MPI_Op op;
    int commute;
    OK(MPI_Op_create(my_sum, 0, &op));
    OK(MPI_Op_commutative(op, &commute));
    CHECK_EQ(commute, 0);
    OK(MPI_Op_commutative(MPI_SUM, &commute));
    CHECK_EQ(commute, 1);
    OK(MPI_Op_free(&op));
    CHECK_EQ(op, MPI_OP_NULL);

    /* Environment. */
    char host[MPI_MAX_PROCESSOR_NAME];
    OK(MPI_Get_processor_name(host, &len));
    CHECK(len > 0 && (int)strlen(host) == len);
    int v, sv;
    OK(MPI_Get_version(&v, &sv));
    CHECK(v == MPI_VERSION && sv == MPI_SUBVERSION);
    static char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    OK(MPI_Get_library_version(lib, &len));
    CHECK(len > 0);
    double t0 = MPI_Wtime();
    CHECK(MPI_Wtick() > 0 && MPI_Wtime() >= t0);
    void *mem;
    OK(MPI_Alloc_mem(1024, MPI_INFO_NULL, &mem));
    memset(mem, 1, 1024);
    OK(MPI_Free_mem(mem));
    CHECK_EQ(MPI_Comm_c2f(MPI_COMM_WORLD), MPI_COMM_WORLD);
    CHECK_EQ(MPI_Type_f2c(MPI_Type_c2f(MPI_DOUBLE)), MPI_DOUBLE);
    CHECK_EQ(MPI_Request_f2c(MPI_Request_c2f(MPI_REQUEST_NULL)), MPI_REQUEST_NULL);

    /* Window creation checks its arguments (through the communicator's handler). */
    MPI_Win win;
    CLASS(MPI_Win_create(&x, sizeof x, 0, MPI_INFO_NULL, MPI_COMM_WORLD, &win), MPI_ERR_DISP);
    CLASS(MPI_Win_allocate(-1, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &mem, &win), MPI_ERR_SIZE);
    /* File errors go through MPI_FILE_NULL's handler (MPI_ERRORS_RETURN); small extras work. */
    MPI_File fh;
    CLASS(MPI_File_open(MPI_COMM_WORLD, "/nonexistent", MPI_MODE_RDONLY, MPI_INFO_NULL, &fh),
          MPI_ERR_NO_SUCH_FILE);
    MPI_Comm parent;
    OK(MPI_Comm_get_parent(&parent));
    CHECK_EQ(parent, MPI_COMM_NULL);
    MPI_Datatype matched;
    OK(MPI_Type_match_size(MPI_TYPECLASS_REAL, 8, &matched));
    CHECK_EQ(matched, MPI_REAL8);
    OK(MPI_Type_match_size(MPI_TYPECLASS_INTEGER, 4, &matched));
    CHECK_EQ(matched, MPI_INTEGER4);
    CLASS(MPI_Type_match_size(MPI_TYPECLASS_INTEGER, 3, &matched), MPI_ERR_ARG);
    MPI_Comm disc;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &disc));
    OK(MPI_Comm_disconnect(&disc));
    CHECK_EQ(disc, MPI_COMM_NULL);

    OK(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 0) printf("errors ok\n");
    OK(MPI_Finalize());
    OK(MPI_Finalized(&flag));
    CHECK_EQ(flag, 1);
    return 0;
}
