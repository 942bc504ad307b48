/* NPB EP (Embarrassingly Parallel): generate 2^(M+1) uniform numbers with
 * the NPB generator, turn acceptable pairs into Gaussian deviates by the
 * Marsaglia polar method, and tally sums and counts per annulus.
 * Written for Tsunagi from the NPB specification; any process count. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "npb_common.h"

#define MK 16
#define NK (1 << MK)
#define NQ 10
#define SEED 271828183.0

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, np;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    char cls = npb_class(argc, argv);

    int m;
    double sx_ref, sy_ref;
    switch (cls) {
    case 'S': m = 24; sx_ref = -3.247834652034740e+3; sy_ref = -6.958407078382297e+3; break;
    case 'W': m = 25; sx_ref = -2.863319731645753e+3; sy_ref = -6.320053679109499e+3; break;
    default:  m = 28; sx_ref = -4.295875165629892e+3; sy_ref = -1.580732573678431e+4; break;
    }
    long nbatch = 1L << (m - MK);
    if (rank == 0)
        printf("\n NPB EP (Tsunagi C/MPI) class %c: 2^%d pairs, %d processes\n", cls, m + 1, np);

    /* Batches are dealt out in contiguous blocks. */
    long lo = nbatch * rank / np, hi = nbatch * (rank + 1) / np;
    double *x = malloc(sizeof(double) * 2 * NK);
    double an = pow46(NPB_A, 2 * NK); /* generator stride between batches */

    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    double q[NQ] = {0}, sx = 0, sy = 0;
    for (long k = lo; k < hi; k++) {
        double seed = skip46(SEED, an, (uint64_t)k); /* SEED * an^k */
        vranlc(2 * NK, &seed, NPB_A, x);
        for (int i = 0; i < NK; i++) {
            double x1 = 2.0 * x[2 * i] - 1.0, x2 = 2.0 * x[2 * i + 1] - 1.0;
            double t1 = x1 * x1 + x2 * x2;
            if (t1 <= 1.0) {
                double t2 = sqrt(-2.0 * log(t1) / t1);
                double t3 = x1 * t2, t4 = x2 * t2;
                int l = (int)fmax(fabs(t3), fabs(t4));
                q[l] += 1.0;
                sx += t3;
                sy += t4;
            }
        }
    }
    double loc[NQ + 2], glob[NQ + 2];
    for (int i = 0; i < NQ; i++) loc[i] = q[i];
    loc[NQ] = sx;
    loc[NQ + 1] = sy;
    MPI_Allreduce(loc, glob, NQ + 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    double tl = MPI_Wtime() - t0, tm;
    MPI_Allreduce(&tl, &tm, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);

    sx = glob[NQ];
    sy = glob[NQ + 1];
    double gc = 0;
    for (int i = 0; i < NQ; i++) gc += glob[i];
    int ok = fabs((sx - sx_ref) / sx_ref) <= 1e-8 && fabs((sy - sy_ref) / sy_ref) <= 1e-8;
    if (rank == 0) {
        printf(" Gaussian pairs = %.0f\n Sums = %25.15e %25.15e\n", gc, sx, sy);
        printf(" Reference      = %25.15e %25.15e\n", sx_ref, sy_ref);
        for (int i = 0; i < NQ; i++) printf("  %d %14.0f\n", i, glob[i]);
    }
    char size[32];
    snprintf(size, sizeof size, "2^%d", m + 1);
    npb_print("EP", cls, size, 0, tm, ldexp(1.0, m + 1) / tm / 1e6,
              "Random numbers generated", ok, np);
    free(x);
    MPI_Finalize();
    return ok ? 0 : 1;
}
