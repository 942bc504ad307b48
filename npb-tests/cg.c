/* NPB CG (Conjugate Gradient): estimate the smallest eigenvalue of the NPB
 * random sparse symmetric matrix by inverse power iteration, each step
 * solving A z = x with 25 unpreconditioned CG iterations.
 * Parallelisation: block rows of A per process; the search direction is
 * assembled with Allgatherv before each sparse mat-vec, dot products use
 * Allreduce. The matrix is generated exactly as NPB specifies (makea:
 * sum of weighted outer products of sparse random vectors plus a shifted
 * diagonal), so the published zeta values apply. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npb_common.h"

#define CGITMAX 25
#define RCOND 0.1

typedef struct { int r, c; double v; } Trip;

static int cmp_trip(const void *a, const void *b)
{
    const Trip *x = a, *y = b;
    if (x->r != y->r) return x->r < y->r ? -1 : 1;
    return (x->c > y->c) - (x->c < y->c);
}

/* Local CSR rows [r0, r1) of the NPB CG matrix. */
static void makea(int n, int nonzer, double shift, int r0, int r1,
                  int **rowstr_o, int **colidx_o, double **a_o)
{
    double tran = 314159265.0, amult = NPB_A;
    (void)randlc(&tran, amult); /* NPB draws one number (zeta) before makea */
    int nn1 = 1;
    while (nn1 < n) nn1 *= 2;
    double ratio = pow(RCOND, 1.0 / n), size = 1.0;
    int *iv = malloc(sizeof(int) * (nonzer + 1));
    double *v = malloc(sizeof(double) * (nonzer + 1));
    size_t cap = 1024, nt = 0;
    Trip *t = malloc(sizeof(Trip) * cap);
    for (int i = 0; i < n; i++) {
        /* sprnvc: nonzer distinct random positions in [0,n) with random values */
        int nzv = 0;
        while (nzv < nonzer) {
            double vecelt = randlc(&tran, amult), vecloc = randlc(&tran, amult);
            int pos = (int)(nn1 * vecloc); /* 0-based */
            if (pos >= n) continue;
            int dup = 0;
            for (int j = 0; j < nzv; j++) dup |= iv[j] == pos;
            if (dup) continue;
            v[nzv] = vecelt;
            iv[nzv++] = pos;
        }
        /* vecset: element i becomes 0.5 */
        int set = 0;
        for (int j = 0; j < nzv; j++)
            if (iv[j] == i) { v[j] = 0.5; set = 1; }
        if (!set) { v[nzv] = 0.5; iv[nzv++] = i; }
        /* size * v v^T, plus (rcond - shift) on the diagonal element (i,i) */
        for (int a = 0; a < nzv; a++) {
            int row = iv[a];
            if (row < r0 || row >= r1) continue;
            double scale = size * v[a];
            for (int b = 0; b < nzv; b++) {
                double va = v[b] * scale;
                if (iv[b] == row && row == i) va += RCOND - shift;
                if (nt == cap) { cap *= 2; t = realloc(t, sizeof(Trip) * cap); }
                t[nt++] = (Trip){row, iv[b], va};
            }
        }
        size *= ratio;
    }
    qsort(t, nt, sizeof(Trip), cmp_trip);
    int nrows = r1 - r0;
    int *rowstr = calloc(nrows + 1, sizeof(int));
    int *colidx = malloc(sizeof(int) * (nt ? nt : 1));
    double *a = malloc(sizeof(double) * (nt ? nt : 1));
    size_t nz = 0;
    for (size_t k = 0; k < nt; k++) {
        if (nz > 0 && k > 0 && t[k].r == t[k - 1].r && t[k].c == t[k - 1].c) {
            a[nz - 1] += t[k].v; /* duplicate entry: sum */
            continue;
        }
        colidx[nz] = t[k].c;
        a[nz] = t[k].v;
        rowstr[t[k].r - r0 + 1]++;
        nz++;
    }
    for (int r = 0; r < nrows; r++) rowstr[r + 1] += rowstr[r];
    free(t); free(iv); free(v);
    *rowstr_o = rowstr; *colidx_o = colidx; *a_o = a;
}

static int nrows, *rowstr, *colidx, *counts, *displs;
static double *aval;

static void matvec(const double *xfull, double *y)
{
    for (int r = 0; r < nrows; r++) {
        double s = 0;
        for (int k = rowstr[r]; k < rowstr[r + 1]; k++) s += aval[k] * xfull[colidx[k]];
        y[r] = s;
    }
}

static double dot(const double *a, const double *b, int n)
{
    double s = 0, g;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    MPI_Allreduce(&s, &g, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return g;
}

static void gather(const double *loc, double *full)
{
    MPI_Allgatherv(loc, nrows, MPI_DOUBLE, full, counts, displs, MPI_DOUBLE, MPI_COMM_WORLD);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, np;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    char cls = npb_class(argc, argv);
    int n, nonzer, niter = 15;
    double shift, zeta_ref;
    switch (cls) {
    case 'S': n = 1400;  nonzer = 7;  shift = 10; zeta_ref = 8.5971775078648; break;
    case 'W': n = 7000;  nonzer = 8;  shift = 12; zeta_ref = 10.362595087124; break;
    default:  n = 14000; nonzer = 11; shift = 20; zeta_ref = 17.130235054029; break;
    }
    if (!npb_is_pow2(np)) {
        if (rank == 0) fprintf(stderr, "CG needs a power-of-two process count\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (rank == 0)
        printf("\n NPB CG (Tsunagi C/MPI) class %c: n=%d nonzer=%d shift=%g, %d processes\n",
               cls, n, nonzer, shift, np);

    counts = malloc(sizeof(int) * np);
    displs = malloc(sizeof(int) * np);
    for (int p = 0; p < np; p++) {
        displs[p] = (int)((long)n * p / np);
        counts[p] = (int)((long)n * (p + 1) / np) - displs[p];
    }
    int r0 = displs[rank];
    nrows = counts[rank];
    makea(n, nonzer, shift, r0, r0 + nrows, &rowstr, &colidx, &aval);

    double *x = malloc(sizeof(double) * n), *full = malloc(sizeof(double) * n);
    double *z = malloc(sizeof(double) * nrows), *r = malloc(sizeof(double) * nrows);
    double *p = malloc(sizeof(double) * nrows), *q = malloc(sizeof(double) * nrows);
    for (int i = 0; i < n; i++) x[i] = 1.0;

    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime(), zeta = 0, rnorm = 0;
    for (int it = 1; it <= niter; it++) {
        /* conj_grad: solve A z = x approximately */
        const double *xl = x + r0;
        for (int i = 0; i < nrows; i++) { z[i] = 0; r[i] = xl[i]; p[i] = r[i]; }
        double rho = dot(r, r, nrows);
        for (int cg = 0; cg < CGITMAX; cg++) {
            gather(p, full);
            matvec(full, q);
            double alpha = rho / dot(p, q, nrows), rho0 = rho;
            for (int i = 0; i < nrows; i++) { z[i] += alpha * p[i]; r[i] -= alpha * q[i]; }
            rho = dot(r, r, nrows);
            double beta = rho / rho0;
            for (int i = 0; i < nrows; i++) p[i] = r[i] + beta * p[i];
        }
        gather(z, full);
        matvec(full, q); /* q = A z; residual ||x - A z|| */
        double s = 0;
        for (int i = 0; i < nrows; i++) s += (xl[i] - q[i]) * (xl[i] - q[i]);
        double sg;
        MPI_Allreduce(&s, &sg, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        rnorm = sqrt(sg);

        /* zeta = shift + 1/(x.z); x = z/||z|| */
        double nl[2] = {0, 0}, ng[2];
        for (int i = 0; i < nrows; i++) { nl[0] += xl[i] * z[i]; nl[1] += z[i] * z[i]; }
        MPI_Allreduce(nl, ng, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        zeta = shift + 1.0 / ng[0];
        double scale = 1.0 / sqrt(ng[1]);
        for (int i = 0; i < nrows; i++) z[i] *= scale;
        gather(z, x);
        if (rank == 0) printf("   %5d       %20.14e%20.13e\n", it, rnorm, zeta);
    }
    double tl = MPI_Wtime() - t0, tm;
    MPI_Allreduce(&tl, &tm, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    double err = fabs(zeta - zeta_ref) / zeta_ref;
    int ok = err <= 1e-10;
    if (rank == 0) printf(" zeta = %20.13e  reference = %20.13e  error = %.3e\n", zeta, zeta_ref, err);
    double nnz = (double)nonzer * (nonzer + 1);
    double mops = 2.0 * niter * n * (3.0 + nnz + 25.0 * (5.0 + nnz) + 3.0) / tm / 1e6;
    char size[32];
    snprintf(size, sizeof size, "%d", n);
    npb_print("CG", cls, size, niter, tm, mops, "floating point", ok, np);
    MPI_Finalize();
    return ok ? 0 : 1;
}
