/* NPB MG (MultiGrid): four V-cycles of the NPB multigrid solver for the
 * discrete Poisson problem on a periodic 3-D grid with +1/-1 point charges
 * at the positions of the ten largest/smallest NPB random numbers.
 * Parallelisation: slabs along the third axis. A level is distributed while
 * every process keeps at least two planes of it; coarser levels are
 * replicated on every process (gathered with Allgather on the way down).
 * Ghost planes are exchanged with Sendrecv. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npb_common.h"

#define MAXLEV 12

typedef struct {
    int n;      /* interior points per axis: 2^k */
    int n1, n2; /* allocated extent of axes 1, 2: n + 2 */
    int m3;     /* interior planes held locally */
    int z0;     /* global interior index of local plane 1, minus 1 */
    int dist;   /* distributed over the processes (else replicated) */
    double *u, *r;
} Level;

static int rank, np, up, down;
static Level L[MAXLEV + 1];
static double A[4] = {-8.0 / 3.0, 0.0, 1.0 / 6.0, 1.0 / 12.0};
static double C[4] = {-3.0 / 8.0, 1.0 / 32.0, -1.0 / 64.0, 0.0};

#define IDX(lv, i3, i2, i1) (((size_t)(i3) * (lv)->n2 + (i2)) * (lv)->n1 + (i1))

static size_t lsize(const Level *lv) { return (size_t)(lv->m3 + 2) * lv->n2 * lv->n1; }

/* Periodic ghost update: axes 1 and 2 locally, axis 3 by neighbour exchange. */
static void comm3(const Level *lv, double *a)
{
    int n1 = lv->n1, n2 = lv->n2, m3 = lv->m3;
    for (int i3 = 1; i3 <= m3; i3++)
        for (int i2 = 1; i2 < n2 - 1; i2++) {
            double *row = a + IDX(lv, i3, i2, 0);
            row[0] = row[n1 - 2];
            row[n1 - 1] = row[1];
        }
    for (int i3 = 1; i3 <= m3; i3++) {
        memcpy(a + IDX(lv, i3, 0, 0), a + IDX(lv, i3, n2 - 2, 0), sizeof(double) * n1);
        memcpy(a + IDX(lv, i3, n2 - 1, 0), a + IDX(lv, i3, 1, 0), sizeof(double) * n1);
    }
    size_t pl = (size_t)n1 * n2;
    if (lv->dist && np > 1) {
        MPI_Sendrecv(a + m3 * pl, (int)pl, MPI_DOUBLE, up, 1, a, (int)pl, MPI_DOUBLE, down, 1,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Sendrecv(a + pl, (int)pl, MPI_DOUBLE, down, 2, a + (m3 + 1) * pl, (int)pl, MPI_DOUBLE,
                     up, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
        memcpy(a, a + m3 * pl, sizeof(double) * pl);
        memcpy(a + (m3 + 1) * pl, a + pl, sizeof(double) * pl);
    }
}

/* r = v - A u (27-point operator; A[1] = 0 so face neighbours drop out). */
static void resid(const Level *lv, const double *u, const double *v, double *r)
{
    int n1 = lv->n1, n2 = lv->n2;
    double u1[n1], u2[n1];
    for (int i3 = 1; i3 <= lv->m3; i3++)
        for (int i2 = 1; i2 < n2 - 1; i2++) {
            for (int i1 = 0; i1 < n1; i1++) {
                u1[i1] = u[IDX(lv, i3, i2 - 1, i1)] + u[IDX(lv, i3, i2 + 1, i1)]
                       + u[IDX(lv, i3 - 1, i2, i1)] + u[IDX(lv, i3 + 1, i2, i1)];
                u2[i1] = u[IDX(lv, i3 - 1, i2 - 1, i1)] + u[IDX(lv, i3 - 1, i2 + 1, i1)]
                       + u[IDX(lv, i3 + 1, i2 - 1, i1)] + u[IDX(lv, i3 + 1, i2 + 1, i1)];
            }
            for (int i1 = 1; i1 < n1 - 1; i1++) {
                size_t c = IDX(lv, i3, i2, i1);
                r[c] = v[c] - A[0] * u[c]
                     - A[2] * (u2[i1] + u1[i1 - 1] + u1[i1 + 1])
                     - A[3] * (u2[i1 - 1] + u2[i1 + 1]);
            }
        }
    comm3(lv, r);
}

/* u = u + C r (smoother; C[3] = 0 so corners drop out). */
static void psinv(const Level *lv, const double *r, double *u)
{
    int n1 = lv->n1, n2 = lv->n2;
    double r1[n1], r2[n1];
    for (int i3 = 1; i3 <= lv->m3; i3++)
        for (int i2 = 1; i2 < n2 - 1; i2++) {
            for (int i1 = 0; i1 < n1; i1++) {
                r1[i1] = r[IDX(lv, i3, i2 - 1, i1)] + r[IDX(lv, i3, i2 + 1, i1)]
                       + r[IDX(lv, i3 - 1, i2, i1)] + r[IDX(lv, i3 + 1, i2, i1)];
                r2[i1] = r[IDX(lv, i3 - 1, i2 - 1, i1)] + r[IDX(lv, i3 - 1, i2 + 1, i1)]
                       + r[IDX(lv, i3 + 1, i2 - 1, i1)] + r[IDX(lv, i3 + 1, i2 + 1, i1)];
            }
            for (int i1 = 1; i1 < n1 - 1; i1++) {
                size_t c = IDX(lv, i3, i2, i1);
                u[c] += C[0] * r[c] + C[1] * (r[c - 1] + r[c + 1] + r1[i1])
                      + C[2] * (r2[i1] + r1[i1 - 1] + r1[i1 + 1]);
            }
        }
    comm3(lv, u);
}

/* Restriction (full weighting) from fine level f to coarse level f-1:
 * coarse point j sits on fine point 2j. */
static void rprj3(const Level *f, const double *r, const Level *c, double *s)
{
    int m3 = f->m3 / 2; /* coarse planes computed here */
    double *out = s;
    if (f->dist && !c->dist) out = malloc(sizeof(double) * (size_t)(m3 + 2) * c->n2 * c->n1);
    int n1 = c->n1, n2 = c->n2, fn1 = f->n1;
    double x1[fn1], y1[fn1];
#define R(i3, i2, i1) r[IDX(f, i3, i2, i1)]
    for (int j3 = 1; j3 <= m3; j3++) {
        int i3 = 2 * j3 - 1;
        for (int j2 = 1; j2 < n2 - 1; j2++) {
            int i2 = 2 * j2 - 1;
            for (int j1 = 1; j1 < n1; j1++) {
                int i1 = 2 * j1 - 1;
                x1[i1] = R(i3 + 1, i2, i1) + R(i3 + 1, i2 + 2, i1) + R(i3, i2 + 1, i1) + R(i3 + 2, i2 + 1, i1);
                y1[i1] = R(i3, i2, i1) + R(i3 + 2, i2, i1) + R(i3, i2 + 2, i1) + R(i3 + 2, i2 + 2, i1);
            }
            for (int j1 = 1; j1 < n1 - 1; j1++) {
                int i1 = 2 * j1 - 1;
                double y2 = R(i3, i2, i1 + 1) + R(i3 + 2, i2, i1 + 1) + R(i3, i2 + 2, i1 + 1) + R(i3 + 2, i2 + 2, i1 + 1);
                double x2 = R(i3 + 1, i2, i1 + 1) + R(i3 + 1, i2 + 2, i1 + 1) + R(i3, i2 + 1, i1 + 1) + R(i3 + 2, i2 + 1, i1 + 1);
                out[IDX(c, j3, j2, j1)] = 0.5 * R(i3 + 1, i2 + 1, i1 + 1)
                    + 0.25 * (R(i3 + 1, i2 + 1, i1) + R(i3 + 1, i2 + 1, i1 + 2) + x2)
                    + 0.125 * (x1[i1] + x1[i1 + 2] + y2)
                    + 0.0625 * (y1[i1] + y1[i1 + 2]);
            }
        }
    }
#undef R
    if (out != s) { /* replicate the coarse level: gather every process's planes */
        size_t pl = (size_t)n1 * n2;
        MPI_Allgather(out + pl, (int)(m3 * pl), MPI_DOUBLE, s + pl, (int)(m3 * pl), MPI_DOUBLE,
                      MPI_COMM_WORLD);
        free(out);
    }
    comm3(c, s);
}

/* Prolongation (trilinear) from coarse level c to fine level f: u += I z. */
static void interp(const Level *c, const double *z, const Level *f, double *u)
{
    int cz = (f->dist && !c->dist) ? f->z0 / 2 : 0; /* coarse plane of fine plane 0 */
    int mm1 = c->n1, mm2 = c->n2;
    double z1[mm1], z2[mm1], z3[mm1];
#define Z(i3, i2, i1) z[IDX(c, cz + (i3), i2, i1)]
#define U(i3, i2, i1) u[IDX(f, i3, i2, i1)]
    for (int i3 = 0; i3 <= f->m3 / 2; i3++)
        for (int i2 = 0; i2 < mm2 - 1; i2++) {
            for (int i1 = 0; i1 < mm1; i1++) {
                z1[i1] = Z(i3, i2 + 1, i1) + Z(i3, i2, i1);
                z2[i1] = Z(i3 + 1, i2, i1) + Z(i3, i2, i1);
                z3[i1] = Z(i3 + 1, i2 + 1, i1) + Z(i3 + 1, i2, i1) + z1[i1];
            }
            for (int i1 = 0; i1 < mm1 - 1; i1++) {
                U(2 * i3, 2 * i2, 2 * i1) += Z(i3, i2, i1);
                U(2 * i3, 2 * i2, 2 * i1 + 1) += 0.5 * (Z(i3, i2, i1 + 1) + Z(i3, i2, i1));
                U(2 * i3, 2 * i2 + 1, 2 * i1) += 0.5 * z1[i1];
                U(2 * i3, 2 * i2 + 1, 2 * i1 + 1) += 0.25 * (z1[i1] + z1[i1 + 1]);
                U(2 * i3 + 1, 2 * i2, 2 * i1) += 0.5 * z2[i1];
                U(2 * i3 + 1, 2 * i2, 2 * i1 + 1) += 0.25 * (z2[i1] + z2[i1 + 1]);
                U(2 * i3 + 1, 2 * i2 + 1, 2 * i1) += 0.25 * z3[i1];
                U(2 * i3 + 1, 2 * i2 + 1, 2 * i1 + 1) += 0.125 * (z3[i1] + z3[i1 + 1]);
            }
        }
#undef Z
#undef U
}

static void norm2u3(const Level *lv, const double *r, double *rnm2, double *rnmu)
{
    double s = 0, mx = 0;
    for (int i3 = 1; i3 <= lv->m3; i3++)
        for (int i2 = 1; i2 <= lv->n; i2++)
            for (int i1 = 1; i1 <= lv->n; i1++) {
                double a = r[IDX(lv, i3, i2, i1)];
                s += a * a;
                if (fabs(a) > mx) mx = fabs(a);
            }
    double g;
    MPI_Allreduce(&s, &g, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&mx, rnmu, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    *rnm2 = sqrt(g / ((double)lv->n * lv->n * lv->n));
}

typedef struct { double v; long pos; } Cand;
static int cmp_desc(const void *a, const void *b)
{
    double x = ((const Cand *)a)->v, y = ((const Cand *)b)->v;
    return (x < y) - (x > y);
}

/* Right-hand side: value at interior point (i1,i2,i3) (1-based) is the
 * NPB random number number (i1-1) + n(i2-1) + n^2(i3-1) + 1 from seed
 * 314159265; the ten largest become +1, the ten smallest -1, all else 0. */
static void zran3(const Level *lv, double *v)
{
    int n = lv->n;
    double a1 = pow46(NPB_A, n), a2 = pow46(NPB_A, (uint64_t)n * n);
    memset(v, 0, sizeof(double) * lsize(lv));
    double x0 = skip46(314159265.0, NPB_A, (uint64_t)lv->z0 * n * n);
    for (int i3 = 1; i3 <= lv->m3; i3++) {
        double x1 = x0;
        for (int i2 = 1; i2 <= n; i2++) {
            double xx = x1;
            vranlc(n, &xx, NPB_A, v + IDX(lv, i3, i2, 1));
            (void)randlc(&x1, a1);
        }
        (void)randlc(&x0, a2);
    }
    /* Local ten largest and ten smallest (sorted insertion). */
    enum { MM = 10 };
    Cand hi[MM], lo[MM];
    for (int i = 0; i < MM; i++) { hi[i] = (Cand){-1.0, -1}; lo[i] = (Cand){2.0, -1}; }
    for (int i3 = 1; i3 <= lv->m3; i3++)
        for (int i2 = 1; i2 <= n; i2++)
            for (int i1 = 1; i1 <= n; i1++) {
                double x = v[IDX(lv, i3, i2, i1)];
                long pos = ((long)(lv->z0 + i3 - 1) * n + (i2 - 1)) * n + (i1 - 1);
                if (x > hi[MM - 1].v) {
                    int j = MM - 1;
                    while (j > 0 && hi[j - 1].v < x) { hi[j] = hi[j - 1]; j--; }
                    hi[j] = (Cand){x, pos};
                }
                if (x < lo[MM - 1].v) {
                    int j = MM - 1;
                    while (j > 0 && lo[j - 1].v > x) { lo[j] = lo[j - 1]; j--; }
                    lo[j] = (Cand){x, pos};
                }
            }
    /* Global selection over every process's candidates. */
    double mine[4 * MM], *all = malloc(sizeof(double) * 4 * MM * np);
    for (int i = 0; i < MM; i++) {
        mine[2 * i] = hi[i].v; mine[2 * i + 1] = (double)hi[i].pos;
        mine[2 * MM + 2 * i] = -lo[i].v; mine[2 * MM + 2 * i + 1] = (double)lo[i].pos;
    }
    MPI_Allgather(mine, 4 * MM, MPI_DOUBLE, all, 4 * MM, MPI_DOUBLE, MPI_COMM_WORLD);
    Cand *hc = malloc(sizeof(Cand) * MM * np), *lc = malloc(sizeof(Cand) * MM * np);
    for (int p = 0; p < np; p++)
        for (int i = 0; i < MM; i++) {
            double *b = all + 4 * MM * p;
            hc[p * MM + i] = (Cand){b[2 * i], (long)b[2 * i + 1]};
            lc[p * MM + i] = (Cand){b[2 * MM + 2 * i], (long)b[2 * MM + 2 * i + 1]};
        }
    qsort(hc, (size_t)MM * np, sizeof(Cand), cmp_desc);
    qsort(lc, (size_t)MM * np, sizeof(Cand), cmp_desc); /* -value descending = smallest first */
    memset(v, 0, sizeof(double) * lsize(lv));
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < MM; i++) {
            long pos = s ? hc[i].pos : lc[i].pos;
            int g3 = (int)(pos / ((long)n * n)), i2 = (int)(pos / n % n), i1 = (int)(pos % n);
            int l3 = g3 - lv->z0 + 1;
            if (pos >= 0 && l3 >= 1 && l3 <= lv->m3) v[IDX(lv, l3, i2 + 1, i1 + 1)] = s ? 1.0 : -1.0;
        }
    free(all); free(hc); free(lc);
    comm3(lv, v);
}

static void mg3p(int lt, double *v)
{
    for (int k = lt; k >= 2; k--) rprj3(&L[k], L[k].r, &L[k - 1], L[k - 1].r);
    memset(L[1].u, 0, sizeof(double) * lsize(&L[1]));
    psinv(&L[1], L[1].r, L[1].u);
    for (int k = 2; k < lt; k++) {
        memset(L[k].u, 0, sizeof(double) * lsize(&L[k]));
        interp(&L[k - 1], L[k - 1].u, &L[k], L[k].u);
        resid(&L[k], L[k].u, L[k].r, L[k].r);
        psinv(&L[k], L[k].r, L[k].u);
    }
    interp(&L[lt - 1], L[lt - 1].u, &L[lt], L[lt].u);
    resid(&L[lt], L[lt].u, v, L[lt].r);
    psinv(&L[lt], L[lt].r, L[lt].u);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    char cls = npb_class(argc, argv);
    int lt, nit = 4;
    double ref;
    switch (cls) {
    case 'S': lt = 5; ref = 0.5307707005734e-04; break;
    case 'W': lt = 7; ref = 0.6467329375339e-05; break;
    default:  lt = 8; ref = 0.2433365309069e-05; break;
    }
    int nx = 1 << lt;
    if (!npb_is_pow2(np) || nx < 2 * np) {
        if (rank == 0) fprintf(stderr, "MG needs a power-of-two process count <= %d\n", nx / 2);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    up = (rank + 1) % np;
    down = (rank + np - 1) % np;
    if (rank == 0)
        printf("\n NPB MG (Tsunagi C/MPI) class %c: %dx%dx%d, %d iterations, %d processes\n",
               cls, nx, nx, nx, nit, np);
    for (int k = 1; k <= lt; k++) {
        Level *lv = &L[k];
        lv->n = 1 << k;
        lv->n1 = lv->n2 = lv->n + 2;
        lv->dist = np > 1 && lv->n >= 2 * np;
        lv->m3 = lv->dist ? lv->n / np : lv->n;
        lv->z0 = lv->dist ? rank * lv->m3 : 0;
        lv->u = calloc(lsize(lv), sizeof(double));
        lv->r = calloc(lsize(lv), sizeof(double));
    }
    double *v = calloc(lsize(&L[lt]), sizeof(double));
    zran3(&L[lt], v);
    double rnm2, rnmu;
    resid(&L[lt], L[lt].u, v, L[lt].r);
    norm2u3(&L[lt], L[lt].r, &rnm2, &rnmu);
    if (rank == 0) printf(" Initial residual norm: %.13e\n", rnm2);

    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    resid(&L[lt], L[lt].u, v, L[lt].r);
    for (int it = 1; it <= nit; it++) {
        mg3p(lt, v);
        resid(&L[lt], L[lt].u, v, L[lt].r);
    }
    norm2u3(&L[lt], L[lt].r, &rnm2, &rnmu);
    double tl = MPI_Wtime() - t0, tm;
    MPI_Allreduce(&tl, &tm, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    double err = fabs(rnm2 - ref) / ref;
    int ok = err <= 1e-8;
    if (rank == 0) printf(" L2 norm = %.13e  reference = %.13e  error = %.3e\n", rnm2, ref, err);
    char size[32];
    snprintf(size, sizeof size, "%dx%dx%d", nx, nx, nx);
    npb_print("MG", cls, size, nit, tm, 58.0 * nit * (double)nx * nx * nx / tm / 1e6,
              "floating point", ok, np);
    MPI_Finalize();
    return ok ? 0 : 1;
}
