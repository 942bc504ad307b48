/* NPB IS (Integer Sort): rank 2^TK integer keys in [0, 2^MK) ten times by a
 * parallel bucket sort (bucket histogram, Allreduce, Alltoall/Alltoallv
 * redistribution by key range, local counting), with the NPB partial
 * verification of five test keys per iteration and a full sortedness check.
 * The keys are the serial NPB key sequence, block-distributed, so the
 * published verification ranks apply for any power-of-two process count. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npb_common.h"

#define MAX_ITER 10
#define NTEST 5

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, np;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    char cls = npb_class(argc, argv);

    int tk, mk, nbl;
    long tidx[NTEST], trank[NTEST];
    switch (cls) {
    case 'S': {
        tk = 16; mk = 11; nbl = 9;
        long a[] = {48427, 17148, 23627, 62548, 4431}, b[] = {0, 18, 346, 64917, 65463};
        memcpy(tidx, a, sizeof a); memcpy(trank, b, sizeof b); break; }
    case 'W': {
        tk = 20; mk = 16; nbl = 10;
        long a[] = {357773, 934767, 875723, 898999, 404505}, b[] = {1249, 11698, 1039987, 1043896, 1048018};
        memcpy(tidx, a, sizeof a); memcpy(trank, b, sizeof b); break; }
    default: {
        tk = 23; mk = 19; nbl = 10;
        long a[] = {2112377, 662041, 5336171, 3642833, 4250760}, b[] = {104, 17523, 123928, 8288932, 8388264};
        memcpy(tidx, a, sizeof a); memcpy(trank, b, sizeof b); break; }
    }
    const long nkeys = 1L << tk;
    const int maxkey = 1 << mk, nb = 1 << nbl, shift = mk - nbl;
    if (!npb_is_pow2(np) || np > nb || nkeys % np) {
        if (rank == 0) fprintf(stderr, "IS needs a power-of-two process count <= %d\n", nb);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (rank == 0)
        printf("\n NPB IS (Tsunagi C/MPI) class %c: 2^%d keys in [0,2^%d), %d processes\n",
               cls, tk, mk, np);

    /* Key generation: key i = (MAXKEY/4) * (sum of the 4 uniforms 4i+1..4i+4). */
    const long nloc = nkeys / np, first = (long)rank * nloc;
    int *key = malloc(sizeof(int) * nloc);
    double s = skip46(314159265.0, NPB_A, 4 * (uint64_t)first);
    for (long i = 0; i < nloc; i++) {
        double x = randlc(&s, NPB_A);
        x += randlc(&s, NPB_A);
        x += randlc(&s, NPB_A);
        x += randlc(&s, NPB_A);
        key[i] = (int)((maxkey / 4) * x);
    }

    long *bsize = malloc(sizeof(long) * nb), *btot = malloc(sizeof(long) * nb);
    int *bptr = malloc(sizeof(int) * nb), *bowner = malloc(sizeof(int) * nb);
    int *sendbuf = malloc(sizeof(int) * nloc);
    int *scnt = calloc(np, sizeof(int)), *sdsp = calloc(np, sizeof(int));
    int *rcnt = calloc(np, sizeof(int)), *rdsp = calloc(np, sizeof(int));
    int rcap = 0, *recvbuf = NULL;
    long *cnt = malloc(sizeof(long) * (maxkey + 1));
    int kmin = 0, kmax = 0; /* my key range after redistribution: [kmin,kmax) */
    long offset = 0, nrecv = 0, passed = 0;
    double tstart = 0;

    for (int it = 0; it <= MAX_ITER; it++) {
        int iter = it == 0 ? 1 : it; /* it == 0: the untimed warm-up rank(1) */
        if (it == 1) { MPI_Barrier(MPI_COMM_WORLD); tstart = MPI_Wtime(); passed = 0; }

        /* NPB modifies two keys per iteration. */
        if (iter >= first && iter < first + nloc) key[iter - first] = iter;
        if (iter + MAX_ITER >= first && iter + MAX_ITER < first + nloc)
            key[iter + MAX_ITER - first] = maxkey - iter;
        /* The test keys' values, from whichever process holds them. */
        int tv[NTEST], tvg[NTEST];
        for (int i = 0; i < NTEST; i++)
            tv[i] = (tidx[i] >= first && tidx[i] < first + nloc) ? key[tidx[i] - first] : -1;
        MPI_Allreduce(tv, tvg, NTEST, MPI_INT, MPI_MAX, MPI_COMM_WORLD);

        /* Local bucket histogram, global totals. */
        memset(bsize, 0, sizeof(long) * nb);
        for (long i = 0; i < nloc; i++) bsize[key[i] >> shift]++;
        MPI_Allreduce(bsize, btot, nb, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);

        /* Contiguous runs of buckets per process, balanced by key count. */
        long acc = 0;
        int p = 0;
        for (int b = 0; b < nb; b++) {
            bowner[b] = p;
            acc += btot[b];
            if (acc >= (long)(p + 1) * nkeys / np && p < np - 1) p++;
        }
        /* Local bucket sort into the send buffer. */
        memset(scnt, 0, sizeof(int) * np);
        for (int b = 0, pos = 0; b < nb; b++) {
            bptr[b] = pos;
            pos += (int)bsize[b];
            scnt[bowner[b]] += (int)bsize[b];
        }
        for (long i = 0; i < nloc; i++) sendbuf[bptr[key[i] >> shift]++] = key[i];
        for (int q = 1; q < np; q++) sdsp[q] = sdsp[q - 1] + scnt[q - 1];
        MPI_Alltoall(scnt, 1, MPI_INT, rcnt, 1, MPI_INT, MPI_COMM_WORLD);
        nrecv = 0;
        for (int q = 0; q < np; q++) { rdsp[q] = (int)nrecv; nrecv += rcnt[q]; }
        if (nrecv > rcap) { rcap = (int)nrecv; recvbuf = realloc(recvbuf, sizeof(int) * rcap); }
        MPI_Alltoallv(sendbuf, scnt, sdsp, MPI_INT, recvbuf, rcnt, rdsp, MPI_INT, MPI_COMM_WORLD);

        /* My key range, and how many keys globally lie below it. */
        int bfirst = nb, blast = -1;
        offset = 0;
        for (int b = 0; b < nb; b++) {
            if (bowner[b] == rank) { if (b < bfirst) bfirst = b; blast = b; }
            else if (bowner[b] < rank) offset += btot[b];
        }
        kmin = blast >= 0 ? bfirst << shift : 0;
        kmax = blast >= 0 ? (blast + 1) << shift : 0;
        /* cnt[k-kmin] = number of my keys <= k (ranks by counting). */
        memset(cnt, 0, sizeof(long) * (kmax - kmin + 1));
        for (long i = 0; i < nrecv; i++) cnt[recvbuf[i] - kmin]++;
        for (int k = 1; k < kmax - kmin; k++) cnt[k] += cnt[k - 1];

        /* Partial verification: rank of test key k = #keys < k. */
        long rk[NTEST], rkg[NTEST];
        for (int i = 0; i < NTEST; i++) {
            int k = tvg[i];
            rk[i] = 0;
            if (k - 1 >= kmin && k - 1 < kmax) rk[i] = offset + cnt[k - 1 - kmin];
        }
        MPI_Reduce(rk, rkg, NTEST, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
        if (rank == 0 && it > 0) {
            for (int i = 0; i < NTEST; i++) {
                long k = tvg[i], want;
                if (!(0 < k && k <= nkeys - 1)) continue;
                switch (cls) {
                case 'S': want = i <= 2 ? trank[i] + iter : trank[i] - iter; break;
                case 'W': want = i < 2 ? trank[i] + (iter - 2) : trank[i] - iter; break;
                default:  want = i <= 2 ? trank[i] + (iter - 1) : trank[i] - (iter - 1); break;
                }
                if (rkg[i] == want) passed++;
                else printf(" Failed partial verification: iteration %d, test key %d (rank %ld, want %ld)\n",
                            iter, i, rkg[i], want);
            }
        }
        if (it == MAX_ITER) {
            double tl = MPI_Wtime() - tstart, tm;
            MPI_Allreduce(&tl, &tm, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            /* Full verification (untimed): place each key by its rank, check order. */
            int *sorted = malloc(sizeof(int) * (nrecv ? nrecv : 1));
            for (long i = 0; i < nrecv; i++) sorted[--cnt[recvbuf[i] - kmin]] = recvbuf[i];
            long bad = 0;
            for (long i = 1; i < nrecv; i++) bad += sorted[i - 1] > sorted[i];
            /* Boundary with the next non-empty process: compare my max to its min. */
            int mymin = nrecv ? sorted[0] : maxkey, mymax = nrecv ? sorted[nrecv - 1] : -1;
            int *mins = malloc(sizeof(int) * np), *maxs = malloc(sizeof(int) * np);
            MPI_Allgather(&mymin, 1, MPI_INT, mins, 1, MPI_INT, MPI_COMM_WORLD);
            MPI_Allgather(&mymax, 1, MPI_INT, maxs, 1, MPI_INT, MPI_COMM_WORLD);
            int runmax = -1;
            for (int q = 0; q < np; q++) {
                if (maxs[q] < 0) continue;
                if (mins[q] < runmax) bad++;
                runmax = maxs[q];
            }
            long tot[2] = {bad, nrecv}, totg[2];
            MPI_Reduce(tot, totg, 2, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
            if (rank == 0) {
                if (totg[0] == 0 && totg[1] == nkeys) passed++;
                else printf(" Full verification: %ld keys out of order, %ld keys total\n", totg[0], totg[1]);
            }
            int ok = passed == NTEST * MAX_ITER + 1;
            MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
            char size[32];
            snprintf(size, sizeof size, "2^%d", tk);
            npb_print("IS", cls, size, MAX_ITER, tm, (double)MAX_ITER * nkeys / tm / 1e6,
                      "keys ranked", ok, np);
            free(sorted); free(mins); free(maxs);
            MPI_Finalize();
            return ok ? 0 : 1;
        }
    }
    return 1;
}
