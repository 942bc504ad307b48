/* The calls and constants MPI 4.1 added (beside the buffers of mpi41.c and buffers.c):
 * the version, MPI_Remove_error_class/code/string, MPI_Status_get/set_source/tag/error,
 * MPI_Request_get_status_any/all/some (generalized and point-to-point requests, none
 * freed), MPI_Type_get_value_index, MPI_Get_hw_resource_info, MPI_COMM_TYPE_RESOURCE_GUIDED,
 * MPI_ERR_ERRHANDLER; and MPI 4.0's MPI_Session_c2f/f2c and MPI_Status_set_elements_c.
 * Any number of ranks. */
#include "check.h"
#include <string.h>

static int error_class(int rc) {
    int cls;
    OK(MPI_Error_class(rc, &cls));
    return cls;
}

static int queried;
static int query_fn(void *extra, MPI_Status *st) {
    (void)extra;
    queried++;
    OK(MPI_Status_set_source(st, 4));
    OK(MPI_Status_set_tag(st, 44));
    OK(MPI_Status_set_elements(st, MPI_BYTE, 0));
    OK(MPI_Status_set_cancelled(st, 0));
    return MPI_SUCCESS;
}
static int free_fn(void *extra) {
    (void)extra;
    return MPI_SUCCESS;
}
static int cancel_fn(void *extra, int complete) {
    (void)extra;
    (void)complete;
    return MPI_SUCCESS;
}

static void version(void) {
    int v, sv, len;
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    OK(MPI_Get_version(&v, &sv));
    CHECK_EQ(v, 4);
    CHECK_EQ(sv, 1);
    CHECK(MPI_VERSION == 4 && MPI_SUBVERSION == 1);
    OK(MPI_Get_library_version(lib, &len));
    CHECK(strstr(lib, "MPI 4.1") != NULL);
    CHECK(MPI_ERR_ERRHANDLER > MPI_SUCCESS && MPI_ERR_ERRHANDLER <= MPI_ERR_LASTCODE);
    char s[MPI_MAX_ERROR_STRING];
    OK(MPI_Error_string(MPI_ERR_ERRHANDLER, s, &len));
    CHECK(len > 0);
    CHECK_EQ(error_class(MPI_ERR_ERRHANDLER), MPI_ERR_ERRHANDLER);
}

static void remove_errors(void) {
    int cls, code1, code2, len, last0, *last, flag;
    char s[MPI_MAX_ERROR_STRING];
    OK(MPI_Add_error_class(&cls));
    OK(MPI_Add_error_code(cls, &code1));
    OK(MPI_Add_error_code(cls, &code2));
    OK(MPI_Add_error_string(code1, "first"));
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_LASTUSEDCODE, &last, &flag));
    CHECK(flag);
    last0 = *last;
    /* a class with codes left cannot go; a class is no code and a code no class */
    CHECK_EQ(error_class(MPI_Remove_error_class(cls)), MPI_ERR_ARG);
    CHECK_EQ(error_class(MPI_Remove_error_code(cls)), MPI_ERR_ARG);
    CHECK_EQ(error_class(MPI_Remove_error_class(code1)), MPI_ERR_ARG);
    /* predefined ones cannot be removed */
    CHECK_EQ(error_class(MPI_Remove_error_class(MPI_ERR_OTHER)), MPI_ERR_ARG);
    CHECK_EQ(error_class(MPI_Remove_error_code(MPI_ERR_OTHER)), MPI_ERR_ARG);
    CHECK_EQ(error_class(MPI_Remove_error_string(MPI_ERR_OTHER)), MPI_ERR_ARG);
    CHECK_EQ(error_class(MPI_Remove_error_code(code1)), MPI_ERR_ARG); /* string first */
    OK(MPI_Remove_error_string(code1));
    OK(MPI_Error_string(code1, s, &len));
    CHECK_EQ(len, 0);
    OK(MPI_Remove_error_code(code1));
    CHECK_EQ(error_class(MPI_Remove_error_code(code1)), MPI_ERR_ARG); /* gone */
    CHECK_EQ(error_class(MPI_Error_class(code1, &len)), MPI_ERR_ARG);
    OK(MPI_Remove_error_code(code2));
    OK(MPI_Remove_error_class(cls));
    CHECK_EQ(error_class(MPI_Remove_error_class(cls)), MPI_ERR_ARG);
    /* removed values are not given out again */
    int cls2;
    OK(MPI_Add_error_class(&cls2));
    CHECK(cls2 > last0);
    OK(MPI_Remove_error_class(cls2));
}

static void status_fields(void) {
    MPI_Status st;
    int v;
    MPI_Count n;
    OK(MPI_Status_set_source(&st, 3));
    OK(MPI_Status_set_tag(&st, 17));
    OK(MPI_Status_set_error(&st, MPI_ERR_TAG));
    OK(MPI_Status_get_source(&st, &v));
    CHECK_EQ(v, 3);
    CHECK_EQ(st.MPI_SOURCE, 3);
    OK(MPI_Status_get_tag(&st, &v));
    CHECK_EQ(v, 17);
    OK(MPI_Status_get_error(&st, &v));
    CHECK_EQ(v, MPI_ERR_TAG);
    OK(MPI_Status_set_elements_c(&st, MPI_DOUBLE, (MPI_Count)3 << 31));
    OK(MPI_Get_elements_c(&st, MPI_DOUBLE, &n));
    CHECK_EQ(n, (MPI_Count)3 << 31);
    CHECK_EQ(error_class(MPI_Status_set_source(MPI_STATUS_IGNORE, 1)), MPI_ERR_ARG);
    CHECK_EQ(error_class(MPI_Status_get_tag(MPI_STATUS_IGNORE, &v)), MPI_ERR_ARG);
}

/* Nothing is freed: the handles stay and a Wait collects each afterwards. */
static void get_status_multi(void) {
    MPI_Request q[3];
    MPI_Status st[3];
    int idx, flag, n, ids[3], in = 0, out = 99;
    OK(MPI_Grequest_start(query_fn, free_fn, cancel_fn, NULL, &q[0]));
    OK(MPI_Irecv(&in, 1, MPI_INT, 0, 5, MPI_COMM_SELF, &q[1]));
    q[2] = MPI_REQUEST_NULL;

    OK(MPI_Request_get_status_any(3, q, &idx, &flag, &st[0]));
    CHECK(!flag);
    CHECK_EQ(idx, MPI_UNDEFINED);
    OK(MPI_Request_get_status_all(3, q, &flag, st));
    CHECK(!flag);
    OK(MPI_Request_get_status_some(3, q, &n, ids, st));
    CHECK_EQ(n, 0);

    OK(MPI_Grequest_complete(q[0]));
    OK(MPI_Request_get_status_any(3, q, &idx, &flag, &st[0]));
    CHECK(flag);
    CHECK_EQ(idx, 0);
    CHECK_EQ(st[0].MPI_SOURCE, 4);
    CHECK_EQ(st[0].MPI_TAG, 44);
    CHECK(q[0] != MPI_REQUEST_NULL);
    CHECK_EQ(queried, 1);
    OK(MPI_Request_get_status_all(3, q, &flag, st));
    CHECK(!flag); /* the receive is pending */

    OK(MPI_Send(&out, 1, MPI_INT, 0, 5, MPI_COMM_SELF));
    int tries = 0;
    do {
        OK(MPI_Request_get_status_all(3, q, &flag, st));
    } while (!flag && ++tries < 100000);
    CHECK(flag);
    CHECK_EQ(st[0].MPI_TAG, 44);
    CHECK_EQ(st[1].MPI_TAG, 5);
    CHECK_EQ(st[2].MPI_TAG, MPI_ANY_TAG); /* MPI_REQUEST_NULL: the empty status */
    CHECK_EQ(in, 99);
    OK(MPI_Request_get_status_some(3, q, &n, ids, st));
    CHECK_EQ(n, 2);
    CHECK(ids[0] == 0 && ids[1] == 1);
    CHECK(q[0] != MPI_REQUEST_NULL && q[1] != MPI_REQUEST_NULL);

    OK(MPI_Waitall(3, q, st));
    CHECK(q[0] == MPI_REQUEST_NULL && q[1] == MPI_REQUEST_NULL);
    CHECK_EQ(st[0].MPI_SOURCE, 4);
    OK(MPI_Request_get_status_some(3, q, &n, ids, st));
    CHECK_EQ(n, MPI_UNDEFINED); /* no active request */
    OK(MPI_Request_get_status_any(3, q, &idx, &flag, &st[0]));
    CHECK(flag);
    CHECK_EQ(idx, MPI_UNDEFINED);
}

static void value_index(void) {
    MPI_Datatype t;
    OK(MPI_Type_get_value_index(MPI_FLOAT, MPI_INT, &t));
    CHECK(t == MPI_FLOAT_INT);
    OK(MPI_Type_get_value_index(MPI_DOUBLE, MPI_INT, &t));
    CHECK(t == MPI_DOUBLE_INT);
    OK(MPI_Type_get_value_index(MPI_LONG, MPI_INT, &t));
    CHECK(t == MPI_LONG_INT);
    OK(MPI_Type_get_value_index(MPI_SHORT, MPI_INT, &t));
    CHECK(t == MPI_SHORT_INT);
    OK(MPI_Type_get_value_index(MPI_INT, MPI_INT, &t));
    CHECK(t == MPI_2INT);
    OK(MPI_Type_get_value_index(MPI_LONG_DOUBLE, MPI_INT, &t));
    CHECK(t == MPI_LONG_DOUBLE_INT);
    OK(MPI_Type_get_value_index(MPI_REAL, MPI_REAL, &t));
    CHECK(t == MPI_2REAL);
    OK(MPI_Type_get_value_index(MPI_FLOAT, MPI_FLOAT, &t));
    CHECK(t == MPI_DATATYPE_NULL);
    OK(MPI_Type_get_value_index(MPI_DOUBLE, MPI_LONG, &t));
    CHECK(t == MPI_DATATYPE_NULL);
    CHECK_EQ(error_class(MPI_Type_get_value_index(MPI_DATATYPE_NULL, MPI_INT, &t)), MPI_ERR_TYPE);
}

static void hw_info(void) {
    MPI_Info info;
    char v[MPI_MAX_INFO_VAL];
    int len = sizeof v, flag;
    OK(MPI_Get_hw_resource_info(&info));
    OK(MPI_Info_get_string(info, "mpi_hw_resource_type", &len, v, &flag));
    CHECK(flag);
    CHECK(strcmp(v, "mpi_shared_memory") == 0);
    len = sizeof v;
    OK(MPI_Info_get_string(info, "tsunagi_cpus_allowed", &len, v, &flag));
    CHECK(flag && atoi(v) >= 1);
    OK(MPI_Info_free(&info));
}

static void resource_guided(int rank, int size) {
    MPI_Comm c;
    MPI_Info info;
    int n;
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_RESOURCE_GUIDED, 0, MPI_INFO_NULL, &c));
    CHECK(c == MPI_COMM_NULL);
    OK(MPI_Info_create(&info));
    OK(MPI_Info_set(info, "mpi_hw_resource_type", "@unknown@"));
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_RESOURCE_GUIDED, 0, info, &c));
    CHECK(c == MPI_COMM_NULL);
    OK(MPI_Info_set(info, "mpi_hw_resource_type", "mpi_shared_memory"));
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_RESOURCE_GUIDED, rank, info, &c));
    CHECK(c != MPI_COMM_NULL);
    OK(MPI_Comm_size(c, &n));
    CHECK_EQ(n, size); /* one node */
    OK(MPI_Comm_free(&c));
    OK(MPI_Info_delete(info, "mpi_hw_resource_type"));
    OK(MPI_Info_set(info, "mpi_pset_name", "mpi://SELF"));
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_RESOURCE_GUIDED, 0, info, &c));
    OK(MPI_Comm_size(c, &n));
    CHECK_EQ(n, 1);
    OK(MPI_Comm_free(&c));
    OK(MPI_Info_set(info, "mpi_pset_name", "mpi://WORLD"));
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_RESOURCE_GUIDED, 0, info, &c));
    OK(MPI_Comm_size(c, &n));
    CHECK_EQ(n, size);
    OK(MPI_Comm_free(&c));
    OK(MPI_Info_free(&info));
}

static void session_handles(void) {
    MPI_Session s;
    OK(MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &s));
    MPI_Fint f = MPI_Session_c2f(s);
    CHECK(MPI_Session_f2c(f) == s);
    OK(MPI_Session_finalize(&s));
    CHECK(MPI_Session_f2c(MPI_Session_c2f(MPI_SESSION_NULL)) == MPI_SESSION_NULL);
}

int main(int argc, char **argv) {
    int rank, size;
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    OK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
    version();
    remove_errors();
    status_fields();
    get_status_multi();
    value_index();
    hw_info();
    resource_guided(rank, size);
    session_handles();
    OK(MPI_Barrier(MPI_COMM_WORLD));
    OK(MPI_Finalize());
    if (rank == 0)
        printf("mpi41 api ok\n");
    return 0;
}
