/* Shared helpers for the Tsunagi NPB kernels: class selection, the NPB
 * linear congruential generator, timing and result printing.
 *
 * The generator is the one the NAS Parallel Benchmarks specify:
 *   x_{k+1} = a * x_k  (mod 2^46),  a = 5^13,  returned value x_{k+1} / 2^46.
 * It is implemented here with exact 64-bit integer arithmetic (the product
 * of two values below 2^46 taken mod 2^64 and then mod 2^46 is exact),
 * which gives bit-identical results to the reference double-precision
 * formulation. */
#ifndef NPB_COMMON_H
#define NPB_COMMON_H

#include <stdint.h>

#define NPB_A 1220703125.0 /* 5^13 */

/* One step: *x <- a * *x mod 2^46; returns the new *x scaled to (0,1). */
double randlc(double *x, double a);
/* n steps, results into y[0..n-1]; *x is left at the last value. */
void vranlc(int n, double *x, double a, double *y);
/* a^n mod 2^46 (as an exact double). */
double pow46(double a, uint64_t n);
/* x * a^n mod 2^46: the seed n steps after x. */
double skip46(double x, double a, uint64_t n);

/* Problem class: argv[1] if given ("S", "W", "A"), else -DCLASS='X',
 * else 'S'. Returns the upper-case class letter. */
char npb_class(int argc, char **argv);

/* Print the standard result block on rank 0. */
void npb_print(const char *name, char cls, const char *size, int niter,
               double secs, double mops, const char *optype, int verified,
               int nprocs);

int npb_is_pow2(int n);

#endif
