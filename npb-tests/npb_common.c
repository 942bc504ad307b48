#include "npb_common.h"

#include <ctype.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define MASK46 ((UINT64_C(1) << 46) - 1)
#define R46 (1.0 / 70368744177664.0) /* 2^-46 */

static inline uint64_t mulmod46(uint64_t a, uint64_t b) { return (a * b) & MASK46; }

double randlc(double *x, double a)
{
    uint64_t r = mulmod46((uint64_t)*x, (uint64_t)a);
    *x = (double)r;
    return (double)r * R46;
}

void vranlc(int n, double *x, double a, double *y)
{
    uint64_t ai = (uint64_t)a, xi = (uint64_t)*x;
    for (int i = 0; i < n; i++) {
        xi = mulmod46(xi, ai);
        y[i] = (double)xi * R46;
    }
    *x = (double)xi;
}

double pow46(double a, uint64_t n)
{
    uint64_t r = 1, b = (uint64_t)a;
    while (n) {
        if (n & 1) r = mulmod46(r, b);
        b = mulmod46(b, b);
        n >>= 1;
    }
    return (double)r;
}

double skip46(double x, double a, uint64_t n)
{
    return (double)mulmod46((uint64_t)x, (uint64_t)pow46(a, n));
}

char npb_class(int argc, char **argv)
{
    char c = 'S';
#ifdef CLASS
    c = CLASS;
#endif
    if (argc > 1 && argv[1][0]) c = (char)toupper((unsigned char)argv[1][0]);
    if (c != 'S' && c != 'W' && c != 'A') {
        int rank;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        if (rank == 0) fprintf(stderr, "unknown class '%c' (use S, W or A)\n", c);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return c;
}

int npb_is_pow2(int n) { return n > 0 && (n & (n - 1)) == 0; }

void npb_print(const char *name, char cls, const char *size, int niter,
               double secs, double mops, const char *optype, int verified,
               int nprocs)
{
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank != 0) return;
    printf("\n %s Benchmark Completed.\n", name);
    printf(" Class           = %12c\n", cls);
    printf(" Size            = %12s\n", size);
    printf(" Iterations      = %12d\n", niter);
    printf(" Time in seconds = %12.3f\n", secs);
    printf(" Total processes = %12d\n", nprocs);
    printf(" Mop/s total     = %12.2f\n", mops);
    printf(" Mop/s/process   = %12.2f\n", mops / nprocs);
    printf(" Operation type  = %s\n", optype);
    printf(" Verification = %s\n", verified ? "SUCCESSFUL" : "UNSUCCESSFUL");
    fflush(stdout);
}
