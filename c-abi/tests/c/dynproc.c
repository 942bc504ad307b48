/* Dynamic processes between worlds started apart. Modes (argv[1]):
 *   spawn N   the job spawns N children of this program (argv, info) and talks to them;
 *   multi     MPI_Comm_spawn_multiple: two programs' worth of children (1 + 2 ranks);
 *   leak S    publishes S and ends without unpublishing it (mpirun removes it);
 *   noinit    spawns /bin/true, which never calls MPI_Init (mpirun must end the job);
 *   die       spawns 2 children of which one exits with code 3 while all wait for it:
 *             mpirun must end the whole job (the test checks how);
 *   server S  opens a port, publishes it as service S, accepts one client job;
 *   client S  looks service S up and connects (run as a second, separate mpirun job);
 *   join      not under mpirun: forks, and the two singletons join over a socket pair.
 * In each: data both ways on the intercommunicator (standard and synchronous sends, a
 * wildcard receive), a broadcast and an allreduce across it (MPI_ROOT kinds), merge
 * (ordered by `high`), an allreduce and an allgather on the merged communicator, then
 * MPI_Comm_disconnect and MPI_Finalize. Children run the same checks from their side
 * (started with argv[1] = "child"). Error classes of bad ports and names are checked. */
#define _DEFAULT_SOURCE
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

/* The checks both sides of `ic` run. `low` is the group that merges first; a member's
 * value is 1000 * (low ? 1 : 2) + local rank. */
static void talk(MPI_Comm ic, int low) {
    int rank, size, rsize, flag;
    OK(MPI_Comm_rank(ic, &rank));
    OK(MPI_Comm_size(ic, &size));
    OK(MPI_Comm_remote_size(ic, &rsize));
    OK(MPI_Comm_test_inter(ic, &flag));
    CHECK(flag);
    int mine = 1000 * (low ? 1 : 2) + rank;
    int theirs_base = 1000 * (low ? 2 : 1);

    /* Point to point: every local rank sends to every remote rank, both ways, then a
     * synchronous send from each to remote rank 0. */
    for (int r = 0; r < rsize; r++)
        OK(MPI_Send(&mine, 1, MPI_INT, r, 7, ic));
    for (int r = 0; r < rsize; r++) {
        int got;
        MPI_Status st;
        OK(MPI_Recv(&got, 1, MPI_INT, MPI_ANY_SOURCE, 7, ic, &st));
        CHECK_EQ(got, theirs_base + st.MPI_SOURCE);
    }
    double big[5000];
    for (int i = 0; i < 5000; i++) big[i] = mine + i * 0.5;
    MPI_Request sreq;
    OK(MPI_Issend(big, 5000, MPI_DOUBLE, 0, 8, ic, &sreq));
    if (rank == 0) {
        for (int r = 0; r < rsize; r++) {
            double in[5000];
            OK(MPI_Recv(in, 5000, MPI_DOUBLE, r, 8, ic, MPI_STATUS_IGNORE));
            CHECK(in[4999] == theirs_base + r + 4999 * 0.5);
        }
    }
    OK(MPI_Wait(&sreq, MPI_STATUS_IGNORE));

    /* Broadcast from rank 0 of the low group; allreduce across (each side gets the other
     * side's sum). */
    int b = low ? 4242 : -1;
    if (low)
        OK(MPI_Bcast(&b, 1, MPI_INT, rank == 0 ? MPI_ROOT : MPI_PROC_NULL, ic));
    else
        OK(MPI_Bcast(&b, 1, MPI_INT, 0, ic));
    if (!low) CHECK_EQ(b, 4242);
    int sum, want = 0;
    OK(MPI_Allreduce(&mine, &sum, 1, MPI_INT, MPI_SUM, ic));
    for (int r = 0; r < rsize; r++) want += theirs_base + r;
    CHECK_EQ(sum, want);

    /* Merge: the low group first. */
    MPI_Comm m;
    OK(MPI_Intercomm_merge(ic, low ? 0 : 1, &m));
    int mrank, msize;
    OK(MPI_Comm_rank(m, &mrank));
    OK(MPI_Comm_size(m, &msize));
    CHECK_EQ(msize, size + rsize);
    CHECK_EQ(mrank, low ? rank : rsize + rank);
    int all[256];
    CHECK(msize <= 256);
    OK(MPI_Allgather(&mine, 1, MPI_INT, all, 1, MPI_INT, m));
    int lowsize = low ? size : rsize;
    for (int i = 0; i < msize; i++)
        CHECK_EQ(all[i], i < lowsize ? 1000 + i : 2000 + i - lowsize);
    int total;
    OK(MPI_Allreduce(&mrank, &total, 1, MPI_INT, MPI_SUM, m));
    CHECK_EQ(total, msize * (msize - 1) / 2);
    OK(MPI_Barrier(m));
    OK(MPI_Comm_free(&m));
}

static void bad_names(void) {
    int cls;
    char port[MPI_MAX_PORT_NAME];
    MPI_Comm c;
    OK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    MPI_Error_class(MPI_Lookup_name("tsunagi-no-such-service", MPI_INFO_NULL, port), &cls);
    CHECK_EQ(cls, MPI_ERR_NAME);
    MPI_Error_class(MPI_Comm_connect("not a port", MPI_INFO_NULL, 0, MPI_COMM_SELF, &c), &cls);
    CHECK_EQ(cls, MPI_ERR_PORT);
    MPI_Error_class(MPI_Close_port("tsunagi:127.0.0.1:1:00"), &cls);
    CHECK_EQ(cls, MPI_ERR_PORT);
    MPI_Error_class(MPI_Unpublish_name("tsunagi-no-such-service", MPI_INFO_NULL, "x"), &cls);
    CHECK_EQ(cls, MPI_ERR_SERVICE);
    if (getenv("DYNPROC_SAME_LAUNCHER")) {
        /* Our mpirun refuses what it cannot start: MPI_ERR_SPAWN, and the job goes on. */
        MPI_Info hi;
        OK(MPI_Info_create(&hi));
        OK(MPI_Info_set(hi, "host", "tsunagi-no-such-host"));
        MPI_Error_class(MPI_Comm_spawn("/bin/true", MPI_ARGV_NULL, 1, hi, 0, MPI_COMM_SELF, &c,
                                       MPI_ERRCODES_IGNORE),
                        &cls);
        CHECK_EQ(cls, MPI_ERR_SPAWN);
        OK(MPI_Info_free(&hi));
        MPI_Error_class(MPI_Comm_spawn("/tsunagi/no/such/program", MPI_ARGV_NULL, 1,
                                       MPI_INFO_NULL, 0, MPI_COMM_SELF, &c, MPI_ERRCODES_IGNORE),
                        &cls);
        CHECK_EQ(cls, MPI_ERR_SPAWN);
    }
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
}

/* The parents' side of the children's launcher check: rank 0 sends its parent's pid. */
static void send_ppid(MPI_Comm ic, int rank) {
    int pp = (int)getppid();
    OK(MPI_Bcast(&pp, 1, MPI_INT, rank == 0 ? MPI_ROOT : MPI_PROC_NULL, ic));
}

static int child(int argc, char **argv, MPI_Comm parent) {
    int rank;
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    if (argc >= 3 && strcmp(argv[2], "die") == 0 && rank == 1) exit(3);
    /* argv[2] names the spawn kind; spawned with argv {"child", kind, "a b", NULL}. */
    CHECK(argc >= 4);
    CHECK(strcmp(argv[3], "a b") == 0);
    /* MPI_APPNUM: the index of the child's command in the spawn (0 for MPI_Comm_spawn). */
    int *appnum, found;
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_APPNUM, &appnum, &found));
    CHECK(found);
    if (strcmp(argv[2], "multi") == 0) {
        /* App 0 has one rank, app 1 two: the argument says which app we are. */
        CHECK(argc == 5);
        CHECK_EQ(atoi(argv[4]), rank == 0 ? 0 : 1);
        CHECK_EQ(*appnum, atoi(argv[4]));
    } else {
        CHECK_EQ(*appnum, 0);
    }
    char name[MPI_MAX_OBJECT_NAME];
    int len;
    OK(MPI_Comm_get_name(parent, name, &len));
    CHECK(strcmp(name, "MPI_COMM_PARENT") == 0);
    /* Started by the parents' own launcher, not a nested one: our parent process is
     * theirs (the parents' root sends its parent's pid). */
    int ppid;
    OK(MPI_Bcast(&ppid, 1, MPI_INT, 0, parent));
    if (getenv("DYNPROC_SAME_LAUNCHER")) CHECK_EQ(ppid, (int)getppid());
    /* Parents on this host and on an agent's "host" (a launch command that only sets
     * DYNPROC_AGENT_HOST): children alternate between the two, starting here. */
    if (getenv("DYNPROC_ROUND_ROBIN")) CHECK_EQ(getenv("DYNPROC_AGENT_HOST") != NULL, rank % 2);
    talk(parent, 0);
    OK(MPI_Comm_disconnect(&parent));
    CHECK(parent == MPI_COMM_NULL);
    OK(MPI_Comm_get_parent(&parent));
    CHECK(parent == MPI_COMM_NULL);
    OK(MPI_Finalize());
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "join") == 0) {
        int sv[2];
        CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
        pid_t pid = fork();
        CHECK(pid >= 0);
        int fd = pid == 0 ? sv[1] : sv[0];
        close(pid == 0 ? sv[0] : sv[1]);
        OK(MPI_Init(&argc, &argv));
        MPI_Comm ic;
        OK(MPI_Comm_join(fd, &ic));
        /* The socket stays ours and usable after the join. */
        char c = 'x';
        if (pid == 0) {
            CHECK(write(fd, &c, 1) == 1);
        } else {
            CHECK(read(fd, &c, 1) == 1);
            CHECK(c == 'x');
        }
        talk(ic, pid != 0);
        OK(MPI_Comm_disconnect(&ic));
        OK(MPI_Finalize());
        close(fd);
        if (pid == 0) _exit(0);
        int st;
        CHECK(waitpid(pid, &st, 0) == pid);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        printf("dynproc join ok\n");
        return 0;
    }

    OK(MPI_Init(&argc, &argv));
    MPI_Comm parent;
    OK(MPI_Comm_get_parent(&parent));
    if (parent != MPI_COMM_NULL) return child(argc, argv, parent);
    CHECK(argc >= 2);
    int rank, size;
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    MPI_Comm ic;

    if (strcmp(argv[1], "spawn") == 0) {
        int n = atoi(argv[2]);
        char *args[] = {"child", "spawn", "a b", NULL};
        MPI_Info info;
        OK(MPI_Info_create(&info));
        OK(MPI_Info_set(info, "wdir", "/"));
        int codes[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
        /* The root is the last rank: arguments matter there only. */
        OK(MPI_Comm_spawn(rank == size - 1 ? argv[0] : NULL, args, n, info, size - 1,
                          MPI_COMM_WORLD, &ic, codes));
        for (int i = 0; i < n; i++) CHECK_EQ(codes[i], MPI_SUCCESS);
        OK(MPI_Info_free(&info));
        int rsize;
        OK(MPI_Comm_remote_size(ic, &rsize));
        CHECK_EQ(rsize, n);
        send_ppid(ic, rank);
        talk(ic, 1);
        OK(MPI_Comm_disconnect(&ic));
        CHECK(ic == MPI_COMM_NULL);
        bad_names();
    } else if (strcmp(argv[1], "noinit") == 0) {
        /* /bin/true never calls MPI_Init, so it never connects back: mpirun ends the job. */
        OK(MPI_Comm_spawn("/bin/true", MPI_ARGV_NULL, 1, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &ic,
                          MPI_ERRCODES_IGNORE));
        CHECK(0);
    } else if (strcmp(argv[1], "die") == 0) {
        char *args[] = {"child", "die", "a b", NULL};
        OK(MPI_Comm_spawn(argv[0], args, 2, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &ic,
                          MPI_ERRCODES_IGNORE));
        send_ppid(ic, rank);
        /* Blocks: child 1 never gets here. mpirun ends the job. */
        talk(ic, 1);
        CHECK(0);
    } else if (strcmp(argv[1], "multi") == 0) {
        char *cmds[2] = {argv[0], argv[0]};
        char *a0[] = {"child", "multi", "a b", "0", NULL};
        char *a1[] = {"child", "multi", "a b", "1", NULL};
        char **argvs[2] = {a0, a1};
        int procs[2] = {1, 2};
        MPI_Info infos[2] = {MPI_INFO_NULL, MPI_INFO_NULL};
        OK(MPI_Comm_spawn_multiple(2, cmds, argvs, procs, infos, 0, MPI_COMM_WORLD, &ic,
                                   MPI_ERRCODES_IGNORE));
        send_ppid(ic, rank);
        talk(ic, 1);
        OK(MPI_Comm_disconnect(&ic));
    } else if (strcmp(argv[1], "server") == 0) {
        char port[MPI_MAX_PORT_NAME];
        if (rank == 0) {
            OK(MPI_Open_port(MPI_INFO_NULL, port));
            OK(MPI_Publish_name(argv[2], MPI_INFO_NULL, port));
            int cls;
            OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
            MPI_Error_class(MPI_Publish_name(argv[2], MPI_INFO_NULL, port), &cls);
            CHECK_EQ(cls, MPI_ERR_SERVICE);
            OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
        }
        OK(MPI_Comm_accept(port, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &ic));
        if (rank == 0) {
            OK(MPI_Unpublish_name(argv[2], MPI_INFO_NULL, port));
            OK(MPI_Close_port(port));
        }
        talk(ic, 1);
        OK(MPI_Comm_disconnect(&ic));
    } else if (strcmp(argv[1], "client") == 0) {
        char port[MPI_MAX_PORT_NAME];
        if (rank == 0) {
            /* The server may not have published yet. */
            OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
            int tries = 0;
            while (MPI_Lookup_name(argv[2], MPI_INFO_NULL, port) != MPI_SUCCESS) {
                CHECK(++tries < 3000);
                usleep(10000);
            }
            OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
        }
        OK(MPI_Comm_connect(port, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &ic));
        talk(ic, 0);
        OK(MPI_Comm_disconnect(&ic));
    } else if (strcmp(argv[1], "leak") == 0) {
        /* Publishes service argv[2] through the launcher and ends without unpublishing
         * it; the children spawned by the same mpirun find it there. mpirun removes the
         * name when the job ends (the test checks). */
        char port[MPI_MAX_PORT_NAME], found[MPI_MAX_PORT_NAME];
        if (rank == 0) {
            OK(MPI_Open_port(MPI_INFO_NULL, port));
            OK(MPI_Publish_name(argv[2], MPI_INFO_NULL, port));
            OK(MPI_Lookup_name(argv[2], MPI_INFO_NULL, found));
            CHECK(strcmp(port, found) == 0);
            OK(MPI_Close_port(port));
        }
    } else if (strcmp(argv[1], "groups") == 0) {
        /* MPI_Intercomm_create_from_groups: even world ranks against odd ones, the groups
         * taken from a session's mpi://WORLD process set; leaders: the last of each. */
        MPI_Session s;
        MPI_Group world, evens, odds;
        OK(MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &s));
        OK(MPI_Group_from_session_pset(s, "mpi://WORLD", &world));
        int ne = (size + 1) / 2, no = size / 2, ev[64], od[64];
        CHECK(no >= 1 && size <= 64);
        for (int i = 0; i < ne; i++) ev[i] = 2 * i;
        for (int i = 0; i < no; i++) od[i] = 2 * i + 1;
        OK(MPI_Group_incl(world, ne, ev, &evens));
        OK(MPI_Group_incl(world, no, od, &odds));
        int even = rank % 2 == 0;
        OK(MPI_Intercomm_create_from_groups(even ? evens : odds, (even ? ne : no) - 1,
                                            even ? odds : evens, (even ? no : ne) - 1,
                                            "tsunagi-test", MPI_INFO_NULL,
                                            MPI_ERRORS_ARE_FATAL, &ic));
        int lsize, rsize;
        OK(MPI_Comm_size(ic, &lsize));
        OK(MPI_Comm_remote_size(ic, &rsize));
        CHECK_EQ(lsize, even ? ne : no);
        CHECK_EQ(rsize, even ? no : ne);
        talk(ic, even);
        OK(MPI_Comm_free(&ic));
        /* Bad leaders and overlapping groups get their classes. */
        int cls;
        OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
        MPI_Error_class(MPI_Intercomm_create_from_groups(evens, ne, odds, 0, "x", MPI_INFO_NULL,
                                                         MPI_ERRORS_RETURN, &ic), &cls);
        if (even) CHECK_EQ(cls, MPI_ERR_RANK);
        MPI_Error_class(MPI_Intercomm_create_from_groups(world, 0, world, 0, "x", MPI_INFO_NULL,
                                                         MPI_ERRORS_RETURN, &ic), &cls);
        CHECK_EQ(cls, MPI_ERR_GROUP);
        OK(MPI_Group_free(&evens));
        OK(MPI_Group_free(&odds));
        OK(MPI_Group_free(&world));
        OK(MPI_Session_finalize(&s));
    } else {
        CHECK(0);
    }
    OK(MPI_Finalize());
    if (rank == 0) printf("dynproc %s ok\n", argv[1]);
    return 0;
}
