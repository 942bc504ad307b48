/* IMPI check for two clients: point-to-point both ways between rank 0 and the last rank
 * (on different clients), short, long and synchronous, more than hiwater messages back to
 * back, then barrier, bcast, reduce and allreduce on MPI_COMM_WORLD (what LAM/MPI
 * supports across IMPI), from and to every root, short and long (past DATALEN).
 * Prints "impi_pair: rank R ok" per rank; exits non-zero on the first mismatch. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check(int cond, const char *what, int rank)
{
    if (!cond) {
        fprintf(stderr, "impi_pair: rank %d: %s\n", rank, what);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

static int verbose;
#define STEP(...) do { if (verbose) { fprintf(stderr, "impi_pair: rank %d: ", rank); fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)

static void fill(int *b, int n, int seed)
{
    for (int i = 0; i < n; i++)
        b[i] = seed * 1000003 + i;
}

static int same(const int *b, int n, int seed)
{
    for (int i = 0; i < n; i++)
        if (b[i] != seed * 1000003 + i)
            return 0;
    return 1;
}

int main(int argc, char **argv)
{
    int rank = -1, size;
    verbose = getenv("IMPI_PAIR_VERBOSE") != NULL;
    STEP("MPI_Init");
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    check(size >= 2, "needs at least 2 processes", rank);
    int last = size - 1;
    /* role 0: rank 0, role 1: the last rank; the others only join the collectives. */
    int role = rank == 0 ? 0 : rank == last ? 1 : -1;
    int peer = role == 0 ? last : 0;
    const int sizes[] = {0, 1, 100, 16384, 16385, 100000, 300000};
    const int nsizes = sizeof sizes / sizeof sizes[0];
    int *buf = malloc(300000 * sizeof(int));
    MPI_Status st;

    /* Which of the two ends is LAM: LAM/MPI 7.1.4 never completes a non-empty MPI_Ssend
       across IMPI, short or long (on the SYNCACK its impid first pings the sending rank,
       and never gets further: for a long message it then never sends the DATA packets
       either), so those are skipped when a LAM process sends. */
#ifdef LAM_MPI
    int i_am_lam = 1;
#else
    int i_am_lam = 0;
#endif
    int lam_end[2] = {0, 0};
    if (role >= 0) {
        lam_end[role] = i_am_lam;
        MPI_Sendrecv(&i_am_lam, 1, MPI_INT, peer, 99, &lam_end[1 - role], 1, MPI_INT, peer, 99,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    /* Each size both ways, standard then synchronous mode. */
    /* IMPI_PAIR_NO_SSEND: skip synchronous mode (LAM-to-LAM hangs in MPI_Ssend of 1 int). */
    int modes = getenv("IMPI_PAIR_NO_SSEND") ? 1 : 2;
    for (int mode = 0; mode < modes && role >= 0; mode++) {
        for (int k = 0; k < nsizes; k++) {
            int n = sizes[k];
            for (int dir = 0; dir < 2; dir++) {
                STEP("%s %d ints from rank %d", mode ? "ssend" : "send", n, dir);
                int seed = 10 * k + 2 * dir + mode + 1;
                if (mode && lam_end[dir]) {
                    STEP("(skipped: LAM's MPI_Ssend does not complete)");
                    continue;
                }
                if (role == dir) {
                    fill(buf, n, seed);
                    if (mode)
                        MPI_Ssend(buf, n, MPI_INT, peer, k, MPI_COMM_WORLD);
                    else
                        MPI_Send(buf, n, MPI_INT, peer, k, MPI_COMM_WORLD);
                } else {
                    memset(buf, 0, n * sizeof(int));
                    MPI_Recv(buf, n, MPI_INT, peer, k, MPI_COMM_WORLD, &st);
                    int cnt;
                    MPI_Get_count(&st, MPI_INT, &cnt);
                    check(cnt == n && st.MPI_SOURCE == peer && st.MPI_TAG == k, "status", rank);
                    check(same(buf, n, seed), "data", rank);
                }
            }
        }
    }

    /* 100 messages back to back (hiwater 20), mixed short and long with the same tag:
       they must arrive in order. */
    STEP("100 back to back");
    if (role == 0) {
        MPI_Request req[100];
        int *bufs = malloc(100 * 20000 * sizeof(int));
        for (int i = 0; i < 100; i++) {
            int n = (i % 10 == 0) ? 20000 : 3;
            fill(bufs + i * 20000, n, 500 + i);
            MPI_Isend(bufs + i * 20000, n, MPI_INT, last, 77, MPI_COMM_WORLD, &req[i]);
        }
        MPI_Waitall(100, req, MPI_STATUSES_IGNORE);
        free(bufs);
    } else if (role == 1) {
        for (int i = 0; i < 100; i++) {
            int n = (i % 10 == 0) ? 20000 : 3;
            MPI_Recv(buf, 20000, MPI_INT, 0, 77, MPI_COMM_WORLD, &st);
            int cnt;
            MPI_Get_count(&st, MPI_INT, &cnt);
            check(cnt == n && same(buf, n, 500 + i), "back-to-back order", rank);
        }
    }

    STEP("barrier");
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    /* From and to every root: one int, and a long vector (past DATALEN, 65536 bytes). */
    const int longn = 40000;
    int *vec = malloc(longn * sizeof(int));
    double *dv = malloc(longn * sizeof(double)), *dsum = malloc(longn * sizeof(double));
    /* Which ranks are LAM processes (a short bcast from each). LAM/MPI 7.1.4 cannot receive
       a long message (past DATALEN) on the IMPI collective context: its impid announces a
       long (or synchronous) message to the receiving rank with a "datasync ping" on context
       pt2impidatasync(cid), which is cid + 2 for LAM's point-to-point contexts (multiples
       of 3) but cid itself for the collective context cid + 1, so the ping (8 bytes, the
       drqid) can match the real receive. So long bcasts go only where no LAM rank receives
       one across IMPI: from a LAM root when the other client is not LAM, or without LAM
       (reduce traffic is on the point-to-point context: long is fine). */
    int *lam_of = malloc(size * sizeof(int)), any_lam = 0, all_lam = 1;
    for (int root = 0; root < size; root++) {
        lam_of[root] = i_am_lam;
        MPI_Bcast(&lam_of[root], 1, MPI_INT, root, MPI_COMM_WORLD);
        any_lam |= lam_of[root];
        all_lam &= lam_of[root];
    }
    for (int root = 0; root < size; root++) {
        STEP("bcast from %d", root);
        int v = rank == root ? 4242 + root : 0;
        MPI_Bcast(&v, 1, MPI_INT, root, MPI_COMM_WORLD);
        check(v == 4242 + root, "bcast", rank);
        if (any_lam && (!lam_of[root] || all_lam)) {
            STEP("(no long bcast: a LAM rank would receive it across IMPI)");
        } else {
            if (rank == root)
                fill(vec, longn, 900 + root);
            else
                memset(vec, 0, longn * sizeof(int));
            MPI_Bcast(vec, longn, MPI_INT, root, MPI_COMM_WORLD);
            if (!same(vec, longn, 900 + root)) {
                int nbad = 0, first = -1;
                for (int i = 0; i < longn; i++)
                    if (vec[i] != (900 + root) * 1000003 + i)
                        nbad++, first = first < 0 ? i : first;
                fprintf(stderr, "impi_pair: rank %d: long bcast from %d: %d wrong elements, "
                        "the first at %d (%d)\n", rank, root, nbad, first, vec[first]);
                check(0, "long bcast", rank);
            }
        }
        STEP("reduce to %d", root);
        double d = rank + 0.5, sum = 0;
        MPI_Reduce(&d, &sum, 1, MPI_DOUBLE, MPI_SUM, root, MPI_COMM_WORLD);
        check(rank != root || sum == size * size / 2.0, "reduce", rank);
        for (int i = 0; i < longn; i++)
            dv[i] = rank * 1000.0 + i, dsum[i] = -1;
        MPI_Reduce(dv, dsum, longn, MPI_DOUBLE, MPI_SUM, root, MPI_COMM_WORLD);
        if (rank == root)
            for (int i = 0; i < longn; i++)
                check(dsum[i] == 1000.0 * size * (size - 1) / 2 + (double)i * size,
                      "long reduce", rank);
    }
    STEP("allreduce");
    int mx = 0, me = 10 + rank;
    MPI_Allreduce(&me, &mx, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    check(mx == 10 + last, "allreduce", rank);
    /* Allreduce is reduce to rank 0 then bcast from rank 0: long only if rank 0 is LAM
       (see above). */
    int alln = (!any_lam || (lam_of[0] && !all_lam)) ? longn : 1000;
    for (int i = 0; i < alln; i++)
        vec[i] = rank + i;
    int *vsum = malloc(longn * sizeof(int));
    MPI_Allreduce(vec, vsum, alln, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < alln; i++)
        check(vsum[i] == size * (size - 1) / 2 + size * i, "allreduce of a vector", rank);
    MPI_Barrier(MPI_COMM_WORLD);
    free(vec);
    free(vsum);
    free(lam_of);
    free(dv);
    free(dsum);
    printf("impi_pair: rank %d ok\n", rank);
    fflush(stdout);
    free(buf);
    MPI_Finalize();
    return 0;
}
