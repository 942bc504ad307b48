/* The real-time priority of the application thread and of Tsunagi's progress threads
 * (threads named "tsunagi-progres..."), read from /proc/self/task/TID/stat. Rank 0 prints
 * "levels app A progress P1 P2 ..." (rt_priority, 0 under the normal policies; each
 * progress thread's lowest over 50 ms of samples), then every rank checks that the others
 * see the same, and rank 0 prints "rt levels ok". */
#define _DEFAULT_SOURCE
#include <mpi.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Field 40 of /proc/.../stat (rt_priority), counted after the command's closing ')'. */
static int rt_priority(const char *stat_path) {
    FILE *f = fopen(stat_path, "r");
    if (!f) return -1;
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    if (!p) return -1;
    /* After ')' come fields 3.. separated by spaces: rt_priority is field 40. */
    int field = 2;
    for (char *tok = strtok(p + 1, " "); tok; tok = strtok(NULL, " ")) {
        if (++field == 40) return atoi(tok);
    }
    return -1;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    /* A new thread names itself and takes its level when it first runs; at the
     * application's real-time level, on a busy core, that is once this thread sleeps. */
    MPI_Barrier(MPI_COMM_WORLD);
    usleep(200 * 1000);
    int app = rt_priority("/proc/thread-self/stat");
    /* A progress thread below the application raises itself to the application's level
     * for each pass that takes the engine lock: sample for a while and keep each thread's
     * lowest level (a thread that never went below reads the application's). */
    int levels[8], nprog = 0;
    for (int sample = 0; sample < 50; sample++) {
        int seen = 0;
        DIR *d = opendir("/proc/self/task");
        struct dirent *e;
        while (d && (e = readdir(d)) && seen < 8) {
            if (e->d_name[0] == '.') continue;
            char path[300], comm[64] = "";
            snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
            FILE *f = fopen(path, "r");
            if (!f) continue;
            if (!fgets(comm, sizeof comm, f)) comm[0] = 0;
            fclose(f);
            if (strncmp(comm, "tsunagi-progres", 15) != 0) continue;
            snprintf(path, sizeof path, "/proc/self/task/%s/stat", e->d_name);
            int level = rt_priority(path);
            if (seen >= nprog) levels[nprog++] = level;
            else if (level < levels[seen]) levels[seen] = level;
            seen++;
        }
        if (d) closedir(d);
        usleep(1000);
    }
    if (rank == 0) {
        printf("levels app %d progress", app);
        for (int i = 0; i < nprog; i++) printf(" %d", levels[i]);
        printf("\n");
    }
    /* Every rank sees what rank 0 saw (the same policy everywhere). */
    int mine[2] = {app, nprog > 0 ? levels[0] : -1}, root[2] = {mine[0], mine[1]};
    MPI_Bcast(root, 2, MPI_INT, 0, MPI_COMM_WORLD);
    if (root[0] != mine[0] || root[1] != mine[1]) {
        fprintf(stderr, "rank %d: app %d progress %d, rank 0: %d %d\n", rank, mine[0],
                mine[1], root[0], root[1]);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("rt levels ok\n");
    MPI_Finalize();
    return 0;
}
