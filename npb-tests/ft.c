/* NPB FT: solve a 3-D diffusion PDE spectrally. Forward 3-D FFT of NPB
 * random initial data, then per time step multiply by exp(-4 alpha pi^2
 * |k|^2 t) and inverse-FFT, reporting a 1024-point checksum.
 * Parallelisation: slabs of z-planes for the x and y transforms, an
 * Alltoall transpose to slabs of y-rows for the z transform. */
#include <complex.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npb_common.h"

#define ALPHA 1.0e-6
#define PI 3.141592653589793238
#define BLK 16 /* lines transformed together for strided axes */

typedef double complex cplx;

static int rank, np, nx, ny, nz, nzl, nyl;

/* In-place radix-2 FFT of length n on a contiguous array; sign = -1 forward. */
static void fft1(cplx *a, int n, int sign, const cplx *w /* n/2 roots for sign -1 */)
{
    for (int i = 1, j = 0; i < n; i++) {
        int bit = n >> 1;
        for (; j & bit; bit >>= 1) j ^= bit;
        j |= bit;
        if (i < j) { cplx t = a[i]; a[i] = a[j]; a[j] = t; }
    }
    for (int len = 2; len <= n; len <<= 1) {
        int half = len >> 1, step = n / len;
        for (int i = 0; i < n; i += len)
            for (int k = 0; k < half; k++) {
                cplx wk = w[k * step];
                if (sign > 0) wk = conj(wk);
                cplx t = wk * a[i + k + half];
                a[i + k + half] = a[i + k] - t;
                a[i + k] += t;
            }
    }
}

static cplx *roots(int n)
{
    cplx *w = malloc(sizeof(cplx) * (n / 2 > 0 ? n / 2 : 1));
    for (int k = 0; k < n / 2; k++) {
        double th = -2.0 * PI * k / n;
        w[k] = cos(th) + I * sin(th);
    }
    return w;
}

static cplx *wx, *wy, *wz, *buf;

/* Transform `count` lines of length n, line l starting at base + l*lstride,
 * elements stride apart. */
static void fft_lines(cplx *base, int count, long lstride, int n, long stride, int sign, const cplx *w)
{
    if (stride == 1) {
        for (int l = 0; l < count; l++) fft1(base + l * lstride, n, sign, w);
        return;
    }
    for (int l0 = 0; l0 < count; l0 += BLK) {
        int b = count - l0 < BLK ? count - l0 : BLK;
        for (int e = 0; e < n; e++)
            for (int l = 0; l < b; l++) buf[(long)l * n + e] = base[(l0 + l) * lstride + e * stride];
        for (int l = 0; l < b; l++) fft1(buf + (long)l * n, n, sign, w);
        for (int e = 0; e < n; e++)
            for (int l = 0; l < b; l++) base[(l0 + l) * lstride + e * stride] = buf[(long)l * n + e];
    }
}

/* Layout A: a[kl][j][i] (z slabs). Layout B: b[jl][k][i] (y slabs). */
static void transpose_ab(const cplx *a, cplx *b, cplx *sb, cplx *rb)
{
    long blk = (long)nzl * nyl * nx;
    for (int q = 0; q < np; q++)
        for (int kl = 0; kl < nzl; kl++)
            for (int jl = 0; jl < nyl; jl++)
                memcpy(sb + q * blk + ((long)kl * nyl + jl) * nx,
                       a + ((long)kl * ny + q * nyl + jl) * nx, sizeof(cplx) * nx);
    MPI_Alltoall(sb, (int)(2 * blk), MPI_DOUBLE, rb, (int)(2 * blk), MPI_DOUBLE, MPI_COMM_WORLD);
    for (int p = 0; p < np; p++)
        for (int kl = 0; kl < nzl; kl++)
            for (int jl = 0; jl < nyl; jl++)
                memcpy(b + ((long)jl * nz + p * nzl + kl) * nx,
                       rb + p * blk + ((long)kl * nyl + jl) * nx, sizeof(cplx) * nx);
}

static void transpose_ba(const cplx *b, cplx *a, cplx *sb, cplx *rb)
{
    long blk = (long)nzl * nyl * nx;
    for (int q = 0; q < np; q++)
        for (int kl = 0; kl < nzl; kl++)
            for (int jl = 0; jl < nyl; jl++)
                memcpy(sb + q * blk + ((long)kl * nyl + jl) * nx,
                       b + ((long)jl * nz + q * nzl + kl) * nx, sizeof(cplx) * nx);
    MPI_Alltoall(sb, (int)(2 * blk), MPI_DOUBLE, rb, (int)(2 * blk), MPI_DOUBLE, MPI_COMM_WORLD);
    for (int p = 0; p < np; p++)
        for (int kl = 0; kl < nzl; kl++)
            for (int jl = 0; jl < nyl; jl++)
                memcpy(a + ((long)kl * ny + p * nyl + jl) * nx,
                       rb + p * blk + ((long)kl * nyl + jl) * nx, sizeof(cplx) * nx);
}

/* Forward: layout A in `a` -> layout B in `b` (a is clobbered). */
static void fft3d_fwd(cplx *a, cplx *b, cplx *sb, cplx *rb)
{
    for (int kl = 0; kl < nzl; kl++) {
        cplx *pl = a + (long)kl * ny * nx;
        fft_lines(pl, ny, nx, nx, 1, -1, wx);
        fft_lines(pl, nx, 1, ny, nx, -1, wy);
    }
    transpose_ab(a, b, sb, rb);
    for (int jl = 0; jl < nyl; jl++) fft_lines(b + (long)jl * nz * nx, nx, 1, nz, nx, -1, wz);
}

/* Inverse (unnormalised): layout B in `b` -> layout A in `a` (b is clobbered). */
static void fft3d_inv(cplx *b, cplx *a, cplx *sb, cplx *rb)
{
    for (int jl = 0; jl < nyl; jl++) fft_lines(b + (long)jl * nz * nx, nx, 1, nz, nx, +1, wz);
    transpose_ba(b, a, sb, rb);
    for (int kl = 0; kl < nzl; kl++) {
        cplx *pl = a + (long)kl * ny * nx;
        fft_lines(pl, nx, 1, ny, nx, +1, wy);
        fft_lines(pl, ny, nx, nx, 1, +1, wx);
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    char cls = npb_class(argc, argv);
    int niter = 6;
    static const double ref[3][6][2] = {
        {{5.546087004964e+02, 4.845363331978e+02}, {5.546385409189e+02, 4.865304269511e+02},
         {5.546148406171e+02, 4.883910722336e+02}, {5.545423607415e+02, 4.901273169046e+02},
         {5.544255039624e+02, 4.917475857993e+02}, {5.542683411902e+02, 4.932597244941e+02}},
        {{5.673612178944e+02, 5.293246849175e+02}, {5.631436885271e+02, 5.282149986629e+02},
         {5.594024089970e+02, 5.270996558037e+02}, {5.560698047020e+02, 5.260027904925e+02},
         {5.530898991250e+02, 5.249400845633e+02}, {5.504159734538e+02, 5.239212247086e+02}},
        {{5.046735008193e+02, 5.114047905510e+02}, {5.059412319734e+02, 5.098809666433e+02},
         {5.069376896287e+02, 5.098144042213e+02}, {5.077892868474e+02, 5.101336130759e+02},
         {5.085233095391e+02, 5.104914655194e+02}, {5.091487099959e+02, 5.107917842803e+02}}};
    int ci;
    switch (cls) {
    case 'S': nx = 64;  ny = 64;  nz = 64;  ci = 0; break;
    case 'W': nx = 128; ny = 128; nz = 32;  ci = 1; break;
    default:  nx = 256; ny = 256; nz = 128; ci = 2; break;
    }
    if (!npb_is_pow2(np) || nz % np || ny % np) {
        if (rank == 0) fprintf(stderr, "FT needs a power-of-two process count <= %d\n", nz < ny ? nz : ny);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    nzl = nz / np;
    nyl = ny / np;
    long ntot = (long)nx * ny * nz, nloc = ntot / np;
    if (rank == 0)
        printf("\n NPB FT (Tsunagi C/MPI) class %c: %dx%dx%d, %d iterations, %d processes\n",
               cls, nx, ny, nz, niter, np);

    cplx *u0 = malloc(sizeof(cplx) * nloc), *u1 = malloc(sizeof(cplx) * nloc);
    cplx *u2 = malloc(sizeof(cplx) * nloc), *sb = malloc(sizeof(cplx) * nloc);
    cplx *rb = malloc(sizeof(cplx) * nloc);
    double *twiddle = malloc(sizeof(double) * nloc);
    int nmax = nx > ny ? nx : ny;
    if (nz > nmax) nmax = nz;
    buf = malloc(sizeof(cplx) * (long)BLK * nmax);
    wx = roots(nx); wy = roots(ny); wz = roots(nz);

    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    /* exp(-4 alpha pi^2 (i'^2 + j'^2 + k'^2)) in layout B, i' the signed frequency. */
    double ap = -4.0 * ALPHA * PI * PI;
    for (int jl = 0; jl < nyl; jl++) {
        int j = rank * nyl + jl, jj = (j + ny / 2) % ny - ny / 2;
        for (int k = 0; k < nz; k++) {
            int kk = (k + nz / 2) % nz - nz / 2;
            for (int i = 0; i < nx; i++) {
                int ii = (i + nx / 2) % nx - nx / 2;
                twiddle[((long)jl * nz + k) * nx + i] = exp(ap * (double)(ii * ii + jj * jj + kk * kk));
            }
        }
    }
    /* Initial conditions (layout A): the NPB sequence in x, y, z order, (re, im) pairs. */
    double x0 = skip46(314159265.0, NPB_A, 2 * (uint64_t)nx * ny * (rank * nzl));
    vranlc((int)(2 * nloc), &x0, NPB_A, (double *)u1);

    fft3d_fwd(u1, u0, sb, rb); /* u0 = F(u) in layout B */
    int ok = 1;
    double sums[6][2];
    for (int it = 1; it <= niter; it++) {
        for (long e = 0; e < nloc; e++) {
            u0[e] *= twiddle[e];
            u1[e] = u0[e];
        }
        fft3d_inv(u1, u2, sb, rb); /* u2 = F^-1(u0), layout A */
        double chk[2] = {0, 0}, g[2];
        for (int j = 1; j <= 1024; j++) {
            int q = j % nx, r = (3 * j) % ny, s = (5 * j) % nz;
            if (s / nzl == rank) {
                cplx c = u2[((long)(s - rank * nzl) * ny + r) * nx + q];
                chk[0] += creal(c);
                chk[1] += cimag(c);
            }
        }
        MPI_Allreduce(chk, g, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        sums[it - 1][0] = g[0] / ntot;
        sums[it - 1][1] = g[1] / ntot;
    }
    double tl = MPI_Wtime() - t0, tm;
    MPI_Allreduce(&tl, &tm, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    for (int it = 0; it < niter; it++) {
        double dr = sums[it][0] - ref[ci][it][0], di = sums[it][1] - ref[ci][it][1];
        double err = sqrt(dr * dr + di * di) / hypot(ref[ci][it][0], ref[ci][it][1]);
        if (!(err <= 1e-12)) ok = 0;
        if (rank == 0)
            printf(" T = %2d  Checksum = %22.12e %22.12e  err = %.2e\n", it + 1, sums[it][0], sums[it][1], err);
    }
    double lg = log((double)ntot);
    double mops = 1e-6 * ntot * (14.8157 + 7.19641 * lg + (5.23518 + 7.21113 * lg) * niter) / tm;
    char size[48];
    snprintf(size, sizeof size, "%dx%dx%d", nx, ny, nz);
    npb_print("FT", cls, size, niter, tm, mops, "floating point", ok, np);
    MPI_Finalize();
    return ok ? 0 : 1;
}
