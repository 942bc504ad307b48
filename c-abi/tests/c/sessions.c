/* Sessions (MPI 4.0): process sets, groups and communicators from them, session info and
 * error handlers, and the sessions and world models in one process. */
#include "check.h"
#include <string.h>

static int handled = 0, last_code = 0;
static void on_error(MPI_Session *s, int *code, ...) {
    (void)s;
    handled++;
    last_code = *code;
}

int main(void) {
    int flag, n, len, rank, size, cls;
    MPI_Session s, s2;
    OK(MPI_Initialized(&flag));
    CHECK_EQ(flag, 0);
    OK(MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &s));
    CHECK(s != MPI_SESSION_NULL);
    OK(MPI_Initialized(&flag)); /* the world model is not initialised by a session */
    CHECK_EQ(flag, 0);

    OK(MPI_Session_get_num_psets(s, MPI_INFO_NULL, &n));
    CHECK_EQ(n, 2);
    const char *want[2] = {"mpi://WORLD", "mpi://SELF"};
    for (int i = 0; i < n; i++) {
        char name[MPI_MAX_PSET_NAME_LEN];
        len = 0;
        OK(MPI_Session_get_nth_pset(s, MPI_INFO_NULL, i, &len, NULL));
        CHECK_EQ(len, (int)strlen(want[i]) + 1);
        len = sizeof name;
        OK(MPI_Session_get_nth_pset(s, MPI_INFO_NULL, i, &len, name));
        CHECK(strcmp(name, want[i]) == 0);
    }
    len = 8;
    CHECK_EQ(MPI_Error_class(MPI_Session_get_nth_pset(s, MPI_INFO_NULL, 2, &len, NULL), &cls),
             MPI_SUCCESS);
    CHECK_EQ(cls, MPI_ERR_ARG);

    /* A communicator from the WORLD process set. */
    MPI_Group g;
    MPI_Comm comm;
    OK(MPI_Group_from_session_pset(s, "mpi://WORLD", &g));
    OK(MPI_Comm_create_from_group(g, "org.tsunagi.test.sessions", MPI_INFO_NULL,
                                  MPI_ERRORS_RETURN, &comm));
    OK(MPI_Group_free(&g));
    OK(MPI_Comm_rank(comm, &rank));
    OK(MPI_Comm_size(comm, &size));
    int sum = 0;
    OK(MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, comm));
    CHECK_EQ(sum, size * (size - 1) / 2);

    MPI_Info info;
    char val[64];
    OK(MPI_Session_get_pset_info(s, "mpi://WORLD", &info));
    OK(MPI_Info_get(info, "mpi_size", sizeof val - 1, val, &flag));
    CHECK(flag && atoi(val) == size);
    OK(MPI_Info_free(&info));
    OK(MPI_Session_get_pset_info(s, "mpi://SELF", &info));
    OK(MPI_Info_get(info, "mpi_size", sizeof val - 1, val, &flag));
    CHECK(flag && atoi(val) == 1);
    OK(MPI_Info_free(&info));
    OK(MPI_Session_get_info(s, &info));
    OK(MPI_Info_get(info, "thread_level", sizeof val - 1, val, &flag));
    CHECK(flag && strncmp(val, "MPI_THREAD_", 11) == 0);
    OK(MPI_Info_free(&info));

    /* SELF: a communicator of one. */
    MPI_Comm self;
    OK(MPI_Group_from_session_pset(s, "mpi://SELF", &g));
    int gs;
    OK(MPI_Group_size(g, &gs));
    CHECK_EQ(gs, 1);
    OK(MPI_Comm_create_from_group(g, "org.tsunagi.test.self", MPI_INFO_NULL, MPI_ERRORS_RETURN,
                                  &self));
    OK(MPI_Comm_size(self, &n));
    CHECK_EQ(n, 1);
    OK(MPI_Comm_free(&self));
    OK(MPI_Group_free(&g));

    /* Errors go through the session's handler: MPI_ERRORS_RETURN, then a user one. */
    CHECK_EQ(MPI_Error_class(MPI_Group_from_session_pset(s, "mpi://nosuch", &g), &cls),
             MPI_SUCCESS);
    CHECK_EQ(cls, MPI_ERR_ARG);
    MPI_Errhandler eh, got;
    OK(MPI_Session_create_errhandler(on_error, &eh));
    OK(MPI_Session_set_errhandler(s, eh));
    OK(MPI_Session_get_errhandler(s, &got));
    CHECK(got == eh);
    OK(MPI_Errhandler_free(&got));
    OK(MPI_Errhandler_free(&eh));
    CHECK(MPI_Group_from_session_pset(s, "mpi://nosuch", &g) != MPI_SUCCESS);
    CHECK_EQ(handled, 1);
    OK(MPI_Error_class(last_code, &cls));
    CHECK_EQ(cls, MPI_ERR_ARG);
    OK(MPI_Session_call_errhandler(s, MPI_ERR_OTHER));
    CHECK_EQ(handled, 2);
    CHECK_EQ(last_code, MPI_ERR_OTHER);

    /* A second session, and then the world model beside them. */
    OK(MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &s2));
    CHECK(s2 != s);
    OK(MPI_Init(NULL, NULL));
    OK(MPI_Initialized(&flag));
    CHECK_EQ(flag, 1);
    int wrank;
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &wrank));
    CHECK_EQ(wrank, rank);
    OK(MPI_Barrier(MPI_COMM_WORLD));
    OK(MPI_Finalize());
    OK(MPI_Finalized(&flag));
    CHECK_EQ(flag, 1);
    /* The sessions still run after MPI_Finalize. */
    sum = 0;
    OK(MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, comm));
    CHECK_EQ(sum, size * (size - 1) / 2);
    OK(MPI_Comm_free(&comm));
    OK(MPI_Session_finalize(&s2));
    CHECK(s2 == MPI_SESSION_NULL);
    OK(MPI_Session_finalize(&s));
    if (rank == 0) printf("sessions ok\n");
    return 0;
}
