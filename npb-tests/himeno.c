/* Himeno benchmark (RIKEN): Jacobi iterations for a 19-point pressure
 * Poisson stencil in single precision, as in himenoBMTxp, distributed over
 * a 3-D process grid (MPI_Dims_create + MPI_Cart_create) with halo exchange
 * by MPI_Type_vector faces and Isend/Irecv/Waitall.
 *
 *   himeno [XS|S|M|L] [iterations]      (defaults: XS, 100)
 *
 * Grid sizes (points in i, j, k) follow himenoBMTxpa's set_param:
 * XS 32x32x64, S 64x64x128, M 128x128x256, L 256x256x512.
 *
 * The residual gosa of the last iteration is additionally summed exactly
 * (integer super-accumulator, then MPI_SUM on integers), so the printed
 * "Gosa (exact)" is bit-identical for every process count and MPI library.
 * The per-iteration float gosa (as in the original) is printed too; its
 * last digits depend on the summation order. */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define NLIMB 28
#define BIAS 400 /* exponent offset: products of floats are >= 2^-298 */

typedef struct { int64_t limb[NLIMB]; } Exact;

static void exact_add(Exact *e, double t) /* t >= 0, exact product of two floats */
{
    if (t == 0.0) return;
    int ex;
    double m = frexp(t, &ex);
    uint64_t mant = (uint64_t)ldexp(m, 53);
    int b = ex - 53 + BIAS, i = b / 32, off = b % 32;
    unsigned __int128 v = (unsigned __int128)mant << off;
    e->limb[i] += (int64_t)(uint64_t)(v & 0xffffffffu);
    e->limb[i + 1] += (int64_t)(uint64_t)((v >> 32) & 0xffffffffu);
    e->limb[i + 2] += (int64_t)(uint64_t)(v >> 64);
}

static double exact_value(Exact *e)
{
    for (int i = 0; i < NLIMB - 1; i++) { /* carry-normalise to 32-bit digits */
        e->limb[i + 1] += e->limb[i] >> 32;
        e->limb[i] &= 0xffffffff;
    }
    double s = 0;
    for (int i = NLIMB - 1; i >= 0; i--) s += ldexp((double)e->limb[i], 32 * i - BIAS);
    return s;
}

/* Local arrays: extent (mi, mj, mk) including one ghost/boundary layer. */
static int mi, mj, mk;
#define IX(i, j, k) (((size_t)(i) * mj + (j)) * mk + (k))

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, np;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    const char *sz = argc > 1 ? argv[1] : "XS";
    int nn = argc > 2 ? atoi(argv[2]) : 100;
    int gi, gj, gk;
    if (!strcasecmp(sz, "XS")) { gi = 32; gj = 32; gk = 64; }
    else if (!strcasecmp(sz, "S")) { gi = 64; gj = 64; gk = 128; }
    else if (!strcasecmp(sz, "M")) { gi = 128; gj = 128; gk = 256; }
    else if (!strcasecmp(sz, "L")) { gi = 256; gj = 256; gk = 512; }
    else {
        if (rank == 0) fprintf(stderr, "size must be XS, S, M or L\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
        return 2;
    }

    int dims[3] = {0, 0, 0}, periods[3] = {0, 0, 0}, coords[3];
    MPI_Dims_create(np, 3, dims);
    MPI_Comm cart;
    MPI_Cart_create(MPI_COMM_WORLD, 3, dims, periods, 0, &cart);
    MPI_Comm_rank(cart, &rank);
    MPI_Cart_coords(cart, rank, 3, coords);
    int nbr[3][2];
    for (int d = 0; d < 3; d++) MPI_Cart_shift(cart, d, 1, &nbr[d][0], &nbr[d][1]);

    /* Split the interior points (1..g-2) of each axis into blocks. */
    int g[3] = {gi, gj, gk}, off[3], cnt[3];
    for (int d = 0; d < 3; d++) {
        int inner = g[d] - 2;
        off[d] = (int)((long)inner * coords[d] / dims[d]);
        cnt[d] = (int)((long)inner * (coords[d] + 1) / dims[d]) - off[d];
    }
    mi = cnt[0] + 2; mj = cnt[1] + 2; mk = cnt[2] + 2;
    size_t npts = (size_t)mi * mj * mk;
    if (rank == 0)
        printf("\n Himeno (Tsunagi C/MPI) size %s: %dx%dx%d, process grid %dx%dx%d, %d iterations\n",
               sz, gi, gj, gk, dims[0], dims[1], dims[2], nn);

    float *p = malloc(sizeof(float) * npts), *wrk2 = malloc(sizeof(float) * npts);
    float *bnd = malloc(sizeof(float) * npts), *wrk1 = malloc(sizeof(float) * npts);
    float *a[4], *b[3], *c[3];
    for (int n = 0; n < 4; n++) a[n] = malloc(sizeof(float) * npts);
    for (int n = 0; n < 3; n++) { b[n] = malloc(sizeof(float) * npts); c[n] = malloc(sizeof(float) * npts); }
    for (int i = 0; i < mi; i++)
        for (int j = 0; j < mj; j++)
            for (int k = 0; k < mk; k++) {
                size_t x = IX(i, j, k);
                int kg = off[2] + k; /* global k index of local k */
                p[x] = (float)(kg * kg) / (float)((gk - 1) * (gk - 1));
                wrk2[x] = p[x];
                a[0][x] = a[1][x] = a[2][x] = 1.0f;
                a[3][x] = 1.0f / 6.0f;
                b[0][x] = b[1][x] = b[2][x] = 0.0f;
                c[0][x] = c[1][x] = c[2][x] = 1.0f;
                bnd[x] = 1.0f;
                wrk1[x] = 0.0f;
            }

    /* Face types (whole faces including ghost rows, so edges propagate). */
    MPI_Datatype face[3];
    MPI_Type_vector(1, mj * mk, mj * mk, MPI_FLOAT, &face[0]);  /* i = const */
    MPI_Type_vector(mi, mk, mj * mk, MPI_FLOAT, &face[1]);      /* j = const */
    MPI_Type_vector(mi * mj, 1, mk, MPI_FLOAT, &face[2]);       /* k = const */
    for (int d = 0; d < 3; d++) MPI_Type_commit(&face[d]);
    size_t lo_in[3] = {IX(1, 0, 0), IX(0, 1, 0), IX(0, 0, 1)};
    size_t hi_in[3] = {IX(mi - 2, 0, 0), IX(0, mj - 2, 0), IX(0, 0, mk - 2)};
    size_t lo_gh[3] = {0, 0, 0};
    size_t hi_gh[3] = {IX(mi - 1, 0, 0), IX(0, mj - 1, 0), IX(0, 0, mk - 1)};

    const float omega = 0.8f;
    float gosa = 0;
    Exact ex;
    MPI_Barrier(cart);
    double t0 = MPI_Wtime();
    for (int n = 0; n < nn; n++) {
        int last = n == nn - 1;
        float lg = 0;
        if (last) memset(&ex, 0, sizeof ex);
        for (int i = 1; i < mi - 1; i++)
            for (int j = 1; j < mj - 1; j++)
                for (int k = 1; k < mk - 1; k++) {
                    size_t x = IX(i, j, k);
                    float s0 = a[0][x] * p[IX(i + 1, j, k)] + a[1][x] * p[IX(i, j + 1, k)]
                        + a[2][x] * p[IX(i, j, k + 1)]
                        + b[0][x] * (p[IX(i + 1, j + 1, k)] - p[IX(i + 1, j - 1, k)]
                                     - p[IX(i - 1, j + 1, k)] + p[IX(i - 1, j - 1, k)])
                        + b[1][x] * (p[IX(i, j + 1, k + 1)] - p[IX(i, j - 1, k + 1)]
                                     - p[IX(i, j + 1, k - 1)] + p[IX(i, j - 1, k - 1)])
                        + b[2][x] * (p[IX(i + 1, j, k + 1)] - p[IX(i - 1, j, k + 1)]
                                     - p[IX(i + 1, j, k - 1)] + p[IX(i - 1, j, k - 1)])
                        + c[0][x] * p[IX(i - 1, j, k)] + c[1][x] * p[IX(i, j - 1, k)]
                        + c[2][x] * p[IX(i, j, k - 1)] + wrk1[x];
                    float ss = (s0 * a[3][x] - p[x]) * bnd[x];
                    lg += ss * ss;
                    if (last) exact_add(&ex, (double)ss * (double)ss);
                    wrk2[x] = p[x] + omega * ss;
                }
        MPI_Allreduce(&lg, &gosa, 1, MPI_FLOAT, MPI_SUM, cart);
        for (int i = 1; i < mi - 1; i++)
            for (int j = 1; j < mj - 1; j++)
                memcpy(p + IX(i, j, 1), wrk2 + IX(i, j, 1), sizeof(float) * (mk - 2));
        /* Halo exchange, one axis at a time. */
        for (int d = 0; d < 3; d++) {
            MPI_Request rq[4];
            MPI_Status st[4];
            MPI_Irecv(p + lo_gh[d], 1, face[d], nbr[d][0], 10 + d, cart, &rq[0]);
            MPI_Irecv(p + hi_gh[d], 1, face[d], nbr[d][1], 20 + d, cart, &rq[1]);
            MPI_Isend(p + hi_in[d], 1, face[d], nbr[d][1], 10 + d, cart, &rq[2]);
            MPI_Isend(p + lo_in[d], 1, face[d], nbr[d][0], 20 + d, cart, &rq[3]);
            MPI_Waitall(4, rq, st);
        }
    }
    double tl = MPI_Wtime() - t0, tm;
    MPI_Allreduce(&tl, &tm, 1, MPI_DOUBLE, MPI_MAX, cart);
    Exact tot;
    MPI_Reduce(ex.limb, tot.limb, NLIMB, MPI_INT64_T, MPI_SUM, 0, cart);
    if (rank == 0) {
        double flop = (double)(gi - 2) * (gj - 2) * (gk - 2) * 34.0 * nn;
        double exact = exact_value(&tot);
        printf(" Loop executed for %d times\n", nn);
        printf(" Gosa (float, summation-order dependent) : %.9e\n", gosa);
        printf(" Gosa (exact)   : %.17e\n", exact);
        printf(" Processes      : %d\n", np);
        printf(" Time in seconds: %.3f\n", tm);
        printf(" MFLOPS measured: %.2f\n", flop / tm / 1e6);
    }
    for (int d = 0; d < 3; d++) MPI_Type_free(&face[d]);
    MPI_Comm_free(&cart);
    MPI_Finalize();
    return 0;
}
