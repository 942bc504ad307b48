/* MPI_Pack_external / MPI_Unpack_external / MPI_Pack_external_size against byte strings
 * written from MPI-3.1 section 13.5.2 (big-endian, IEEE 754, the sizes of its table: C long
 * is 4 bytes, long double is binary128), with round trips through MPI_Unpack_external.
 *
 * Built with -DMPICH_SUBSET (by the drop-in test, with Debian's mpicc.mpich) it keeps to
 * what MPICH 4.0 implements correctly, and the drop-in test checks that MPICH and Tsunagi
 * print the same bytes. Left out there: MPI_WCHAR and the pair types (MPICH 4.0 aborts on
 * them; it also crashes on structs of mixed types), the Fortran complex types (MPICH swaps the two halves: it byte-reverses the whole
 * element), and the error cases (MPICH checks neither datarep nor the buffer sizes, and
 * silently truncates a long beyond 32 bits). */
#include "check.h"

#include <math.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <wchar.h>

/* The hex string "3f f0 00" as bytes; returns the count. */
static int parse_hex(const char *s, unsigned char *out) {
    int n = 0;
    unsigned v;
    int used;
    while (sscanf(s, " %2x%n", &v, &used) == 1) {
        out[n++] = (unsigned char)v;
        s += used;
    }
    return n;
}

/* Pack `count` elements of `t` at `buf` (of `len` bytes) to external32: the bytes must be
 * `want`, MPI_Pack_external_size must agree, and unpacking them into a fresh buffer then
 * packing again must give the same bytes. With `exact`, the unpacked buffer must equal the
 * original byte for byte (types without gaps or padding). Prints the bytes. */
static void expect(const char *name, const void *buf, size_t len, int count, MPI_Datatype t,
                   const char *want, int exact) {
    unsigned char out[512], again[512], wantb[512], back[512];
    int nwant = parse_hex(want, wantb);
    MPI_Aint size = -1, pos = 0;
    OK(MPI_Pack_external_size("external32", count, t, &size));
    OK(MPI_Pack_external("external32", buf, count, t, out, sizeof out, &pos));
    printf("%s:", name);
    for (MPI_Aint i = 0; i < pos; i++)
        printf(" %02x", out[i]);
    printf("\n");
    if (pos != nwant || memcmp(out, wantb, (size_t)nwant) != 0) {
        fprintf(stderr, "%s: packed bytes differ from the expected %s\n", name, want);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    CHECK_EQ(size, nwant);
    memset(back, 0xEE, sizeof back);
    MPI_Aint ipos = 0;
    OK(MPI_Unpack_external("external32", out, pos, &ipos, back, count, t));
    CHECK_EQ(ipos, pos);
    if (exact && memcmp(back, buf, len) != 0) {
        fprintf(stderr, "%s: unpacked buffer differs from the original\n", name);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Aint pos2 = 0;
    OK(MPI_Pack_external("external32", back, count, t, again, sizeof again, &pos2));
    CHECK_EQ(pos2, pos);
    CHECK(memcmp(again, out, (size_t)pos) == 0);
}

#define EXPECT(name, var, count, type, want) \
    expect(name, &(var), sizeof(var), count, type, want, 1)

static void predefined(void) {
    int i[2] = {1, -2};
    EXPECT("MPI_INT", i, 2, MPI_INT, "00 00 00 01 ff ff ff fe");
    unsigned u = 0xdeadbeefu;
    EXPECT("MPI_UNSIGNED", u, 1, MPI_UNSIGNED, "de ad be ef");
    short s = -3;
    EXPECT("MPI_SHORT", s, 1, MPI_SHORT, "ff fd");
    unsigned short us = 0x1234;
    EXPECT("MPI_UNSIGNED_SHORT", us, 1, MPI_UNSIGNED_SHORT, "12 34");
    /* C long: 4 bytes in external32. */
    long l[3] = {-2, 2147483647L, -2147483647L - 1};
    EXPECT("MPI_LONG", l, 3, MPI_LONG, "ff ff ff fe 7f ff ff ff 80 00 00 00");
    unsigned long ul[2] = {3, 4294967295UL};
    EXPECT("MPI_UNSIGNED_LONG", ul, 2, MPI_UNSIGNED_LONG, "00 00 00 03 ff ff ff ff");
    long long ll = -3;
    EXPECT("MPI_LONG_LONG", ll, 1, MPI_LONG_LONG, "ff ff ff ff ff ff ff fd");
    unsigned long long ull = 0x0102030405060708ULL;
    EXPECT("MPI_UNSIGNED_LONG_LONG", ull, 1, MPI_UNSIGNED_LONG_LONG, "01 02 03 04 05 06 07 08");
    char c[3] = {'a', 'B', 0};
    EXPECT("MPI_CHAR", c, 3, MPI_CHAR, "61 42 00");
    signed char sc = -1;
    EXPECT("MPI_SIGNED_CHAR", sc, 1, MPI_SIGNED_CHAR, "ff");
    unsigned char uc = 0x80;
    EXPECT("MPI_UNSIGNED_CHAR", uc, 1, MPI_UNSIGNED_CHAR, "80");
    unsigned char by = 0x5a;
    EXPECT("MPI_BYTE", by, 1, MPI_BYTE, "5a");
    bool b[2] = {true, false};
    EXPECT("MPI_C_BOOL", b, 2, MPI_C_BOOL, "01 00");
    int8_t i8 = -128;
    EXPECT("MPI_INT8_T", i8, 1, MPI_INT8_T, "80");
    int16_t i16 = -2;
    EXPECT("MPI_INT16_T", i16, 1, MPI_INT16_T, "ff fe");
    int32_t i32 = INT32_MIN;
    EXPECT("MPI_INT32_T", i32, 1, MPI_INT32_T, "80 00 00 00");
    int64_t i64 = -2;
    EXPECT("MPI_INT64_T", i64, 1, MPI_INT64_T, "ff ff ff ff ff ff ff fe");
    uint8_t u8 = 200;
    EXPECT("MPI_UINT8_T", u8, 1, MPI_UINT8_T, "c8");
    uint16_t u16 = 0xabcd;
    EXPECT("MPI_UINT16_T", u16, 1, MPI_UINT16_T, "ab cd");
    uint32_t u32 = 0x01020304;
    EXPECT("MPI_UINT32_T", u32, 1, MPI_UINT32_T, "01 02 03 04");
    uint64_t u64 = UINT64_MAX;
    EXPECT("MPI_UINT64_T", u64, 1, MPI_UINT64_T, "ff ff ff ff ff ff ff ff");
    MPI_Aint a = 5;
    EXPECT("MPI_AINT", a, 1, MPI_AINT, "00 00 00 00 00 00 00 05");
    MPI_Offset o = -1;
    EXPECT("MPI_OFFSET", o, 1, MPI_OFFSET, "ff ff ff ff ff ff ff ff");
    MPI_Count cnt = 1LL << 40;
    EXPECT("MPI_COUNT", cnt, 1, MPI_COUNT, "00 00 01 00 00 00 00 00");

    float f[3] = {1.0f, -0.0f, 0.5f};
    EXPECT("MPI_FLOAT", f, 3, MPI_FLOAT, "3f 80 00 00 80 00 00 00 3f 00 00 00");
    /* Doubles bit for bit: -0, infinities, a NaN with payload, the smallest subnormal. */
    uint64_t dbits[8] = {0x3ff0000000000000ULL, 0x8000000000000000ULL, 0x7ff0000000000000ULL,
                         0xfff0000000000000ULL, 0x7ff8dead0000beefULL, 0x0000000000000001ULL,
                         0x3fd5555555555555ULL, 0x7ff0000000000001ULL};
    double d[8];
    memcpy(d, dbits, sizeof d);
    EXPECT("MPI_DOUBLE", d, 8, MPI_DOUBLE,
           "3f f0 00 00 00 00 00 00 80 00 00 00 00 00 00 00 7f f0 00 00 00 00 00 00 "
           "ff f0 00 00 00 00 00 00 7f f8 de ad 00 00 be ef 00 00 00 00 00 00 00 01 "
           "3f d5 55 55 55 55 55 55 7f f0 00 00 00 00 00 01");
    CHECK(d[0] == 1.0 && signbit(d[1]) && isinf(d[2]) && isnan(d[4]));

    /* long double (x87) becomes IEEE binary128; x87 padding bytes are not compared. */
    long double ld[4] = {1.0L, -1.5L, 1.0L / 3.0L, -INFINITY};
    expect("MPI_LONG_DOUBLE", ld, sizeof ld, 4, MPI_LONG_DOUBLE,
           "3f ff 00 00 00 00 00 00 00 00 00 00 00 00 00 00 "
           "bf ff 80 00 00 00 00 00 00 00 00 00 00 00 00 00 "
           "3f fd 55 55 55 55 55 55 55 56 00 00 00 00 00 00 "
           "ff ff 00 00 00 00 00 00 00 00 00 00 00 00 00 00",
           0);
    long double ldback[4];
    MPI_Aint pos = 0, ipos = 0;
    unsigned char buf[64];
    OK(MPI_Pack_external("external32", ld, 4, MPI_LONG_DOUBLE, buf, sizeof buf, &pos));
    OK(MPI_Unpack_external("external32", buf, pos, &ipos, ldback, 4, MPI_LONG_DOUBLE));
    for (int k = 0; k < 4; k++)
        CHECK(ldback[k] == ld[k]);

    float fc[2] = {1.0f, 2.0f};
    EXPECT("MPI_C_FLOAT_COMPLEX", fc, 1, MPI_C_FLOAT_COMPLEX, "3f 80 00 00 40 00 00 00");
    double dc[2] = {1.0, -1.0};
    EXPECT("MPI_C_DOUBLE_COMPLEX", dc, 1, MPI_C_DOUBLE_COMPLEX,
           "3f f0 00 00 00 00 00 00 bf f0 00 00 00 00 00 00");

    /* Fortran types. */
    int fi = -1;
    EXPECT("MPI_INTEGER", fi, 1, MPI_INTEGER, "ff ff ff ff");
    int fl = 1;
    EXPECT("MPI_LOGICAL", fl, 1, MPI_LOGICAL, "00 00 00 01");
    float fr = 2.0f;
    EXPECT("MPI_REAL", fr, 1, MPI_REAL, "40 00 00 00");
    double fd = 0.1;
    EXPECT("MPI_DOUBLE_PRECISION", fd, 1, MPI_DOUBLE_PRECISION, "3f b9 99 99 99 99 99 9a");
    char fch = 'z';
    EXPECT("MPI_CHARACTER", fch, 1, MPI_CHARACTER, "7a");
    long long fi8 = 258;
    EXPECT("MPI_INTEGER8", fi8, 1, MPI_INTEGER8, "00 00 00 00 00 00 01 02");
    double fr8 = -2.0;
    EXPECT("MPI_REAL8", fr8, 1, MPI_REAL8, "c0 00 00 00 00 00 00 00");
}

/* long double <-> binary128 against GCC's own conversions (__float128, exact one way,
 * rounding to nearest-even the other) on random finite values, subnormals included. */
static uint64_t rng_state = 88172645463325252ULL;
static uint64_t rng(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void long_double_against_gcc(void) {
    int checked = 0;
    for (int i = 0; i < 20000; i++) {
        /* A canonical x87 value: integer bit set unless the exponent is 0. */
        uint64_t m = rng();
        uint16_t se = (uint16_t)rng();
        int e = se & 0x7fff;
        if (e != 0x7fff) {
            if (e == 0)
                m &= ~(1ULL << 63);
            else
                m |= 1ULL << 63;
            unsigned char b[16] = {0}, qb[16], want[16], got[16];
            memcpy(b, &m, 8);
            memcpy(b + 8, &se, 2);
            long double ld;
            memcpy(&ld, b, 16);
            __float128 q = (__float128)ld;
            memcpy(qb, &q, 16);
            for (int k = 0; k < 16; k++)
                want[k] = qb[15 - k];
            MPI_Aint pos = 0;
            OK(MPI_Pack_external("external32", &ld, 1, MPI_LONG_DOUBLE, got, 16, &pos));
            CHECK(memcmp(got, want, 16) == 0);
            checked++;
        }
        /* Random binary128 bits (not infinity or NaN) into a long double. */
        unsigned char be[16], le[16];
        for (int k = 0; k < 16; k++)
            be[k] = (unsigned char)rng();
        if ((be[0] & 0x7f) == 0x7f && be[1] == 0xff)
            continue;
        for (int k = 0; k < 16; k++)
            le[k] = be[15 - k];
        __float128 q2;
        memcpy(&q2, le, 16);
        long double want_ld = (long double)q2, got_ld = 0;
        MPI_Aint pos = 0;
        OK(MPI_Unpack_external("external32", be, 16, &pos, &got_ld, 1, MPI_LONG_DOUBLE));
        CHECK(memcmp(&want_ld, &got_ld, 10) == 0);
        checked++;
    }
    printf("long double: %d conversions agree with GCC's\n", checked);
}

static void derived(void) {
    /* A vector with gaps: ints 0, 2, 4 of 5. */
    MPI_Datatype vec;
    OK(MPI_Type_vector(3, 1, 2, MPI_INT, &vec));
    OK(MPI_Type_commit(&vec));
    int v[5] = {1, -1, 2, -1, 3};
    expect("vector", v, sizeof v, 1, vec, "00 00 00 01 00 00 00 02 00 00 00 03", 0);
    int vb[5] = {9, 9, 9, 9, 9};
    MPI_Aint pos = 0, ipos = 0;
    unsigned char buf[256];
    OK(MPI_Pack_external("external32", v, 1, vec, buf, sizeof buf, &pos));
    OK(MPI_Unpack_external("external32", buf, pos, &ipos, vb, 1, vec));
    CHECK(vb[0] == 1 && vb[1] == 9 && vb[2] == 2 && vb[3] == 9 && vb[4] == 3);

    /* A struct of longs (4 bytes external each) with a gap: members at 0 and 16. */
    long ls[4] = {-1, 99, 2, 3};
    int lbl[2] = {1, 2};
    MPI_Aint ldisp[2] = {0, 2 * sizeof(long)};
    MPI_Datatype ltypes[2] = {MPI_LONG, MPI_LONG}, lst;
    OK(MPI_Type_create_struct(2, lbl, ldisp, ltypes, &lst));
    OK(MPI_Type_commit(&lst));
    expect("struct of longs", ls, sizeof ls, 1, lst, "ff ff ff ff 00 00 00 02 00 00 00 03", 0);
    MPI_Type_free(&lst);

    /* Indexed shorts with gaps, in an order that is not memory order. */
    int ibl[2] = {2, 1}, idisp[2] = {3, 0};
    MPI_Datatype idx;
    OK(MPI_Type_indexed(2, ibl, idisp, MPI_SHORT, &idx));
    OK(MPI_Type_commit(&idx));
    short sh[5] = {0x0102, 0x0304, 0x0506, 0x0708, 0x090a};
    expect("indexed", sh, sizeof sh, 1, idx, "07 08 09 0a 01 02", 0);

    /* A 2x2 subarray of a 3x3 array of doubles. */
    int sizes[2] = {3, 3}, subs[2] = {2, 2}, starts[2] = {1, 1};
    MPI_Datatype sub;
    OK(MPI_Type_create_subarray(2, sizes, subs, starts, MPI_ORDER_C, MPI_DOUBLE, &sub));
    OK(MPI_Type_commit(&sub));
    double m[9];
    for (int k = 0; k < 9; k++)
        m[k] = k;
    expect("subarray", m, sizeof m, 1, sub,
           "40 10 00 00 00 00 00 00 40 14 00 00 00 00 00 00 "
           "40 1c 00 00 00 00 00 00 40 20 00 00 00 00 00 00",
           0);

    /* Positions accumulate across calls into one buffer. */
    int one = 1;
    double two = 2.0;
    pos = 0;
    OK(MPI_Pack_external("external32", &one, 1, MPI_INT, buf, sizeof buf, &pos));
    OK(MPI_Pack_external("external32", &two, 1, MPI_DOUBLE, buf, sizeof buf, &pos));
    CHECK_EQ(pos, 12);
    unsigned char wantb[12];
    parse_hex("00 00 00 01 40 00 00 00 00 00 00 00", wantb);
    CHECK(memcmp(buf, wantb, 12) == 0);
    int one_b = 0;
    double two_b = 0;
    ipos = 0;
    OK(MPI_Unpack_external("external32", buf, pos, &ipos, &one_b, 1, MPI_INT));
    OK(MPI_Unpack_external("external32", buf, pos, &ipos, &two_b, 1, MPI_DOUBLE));
    CHECK(one_b == 1 && two_b == 2.0 && ipos == 12);

    MPI_Type_free(&vec);
    MPI_Type_free(&idx);
    MPI_Type_free(&sub);
}

#ifndef MPICH_SUBSET
static int error_class(int rc) {
    int cls = -1;
    MPI_Error_class(rc, &cls);
    return cls;
}

static void tsunagi_only(void) {
    /* A struct of mixed types with padding and a long (4 bytes external), two of them
     * (MPICH 4.0 crashes in MPI_Pack_external_size on structs of mixed types). */
    struct rec {
        char c;
        double d;
        long l;
    } r[2] = {{'A', 1.0, -2}, {'B', 0.5, 7}};
    int bl[3] = {1, 1, 1};
    MPI_Aint disp[3] = {offsetof(struct rec, c), offsetof(struct rec, d),
                        offsetof(struct rec, l)};
    MPI_Datatype types[3] = {MPI_CHAR, MPI_DOUBLE, MPI_LONG}, st;
    OK(MPI_Type_create_struct(3, bl, disp, types, &st));
    OK(MPI_Type_commit(&st));
    expect("struct", r, sizeof r, 2, st,
           "41 3f f0 00 00 00 00 00 00 ff ff ff fe 42 3f e0 00 00 00 00 00 00 00 00 00 07",
           0);
    struct rec rb[2];
    memset(rb, 0, sizeof rb);
    MPI_Aint pos = 0, ipos = 0;
    unsigned char buf[256];
    OK(MPI_Pack_external("external32", r, 2, st, buf, sizeof buf, &pos));
    CHECK_EQ(pos, 26);
    OK(MPI_Unpack_external("external32", buf, pos, &ipos, rb, 2, st));
    CHECK(rb[0].c == 'A' && rb[0].d == 1.0 && rb[0].l == -2);
    CHECK(rb[1].c == 'B' && rb[1].d == 0.5 && rb[1].l == 7);

    MPI_Type_free(&st);
    /* wchar_t (4 bytes here) is 2 bytes in external32. */
    wchar_t w[2] = {L'A', 0xffff};
    EXPECT("MPI_WCHAR", w, 2, MPI_WCHAR, "00 41 ff ff");
    /* Pair types: their members, no padding. */
    struct {
        double v;
        int i;
    } di = {1.0, 7};
    expect("MPI_DOUBLE_INT", &di, sizeof di, 1, MPI_DOUBLE_INT,
           "3f f0 00 00 00 00 00 00 00 00 00 07", 0);
    struct {
        short v;
        int i;
    } si = {3, -1};
    expect("MPI_SHORT_INT", &si, sizeof si, 1, MPI_SHORT_INT, "00 03 ff ff ff ff", 0);
    struct {
        long v;
        int i;
    } li = {-5, 9};
    expect("MPI_LONG_INT", &li, sizeof li, 1, MPI_LONG_INT, "ff ff ff fb 00 00 00 09", 0);
    int ii[2] = {1, 2};
    EXPECT("MPI_2INT", ii, 1, MPI_2INT, "00 00 00 01 00 00 00 02");
    /* Fortran complex: real part first. */
    float cx[2] = {1.0f, 2.0f};
    EXPECT("MPI_COMPLEX", cx, 1, MPI_COMPLEX, "3f 80 00 00 40 00 00 00");
    double dcx[2] = {1.0, 2.0};
    EXPECT("MPI_DOUBLE_COMPLEX", dcx, 1, MPI_DOUBLE_COMPLEX,
           "3f f0 00 00 00 00 00 00 40 00 00 00 00 00 00 00");

    MPI_Aint size = 0;
    pos = 0;
    /* Values that do not fit their external32 size. */
    long big[2] = {1, 5000000000L};
    CHECK_EQ(error_class(MPI_Pack_external("external32", big, 2, MPI_LONG, buf, 64, &pos)),
             MPI_ERR_CONVERSION);
    CHECK_EQ(pos, 0);
    unsigned long ubig = 1UL << 32;
    CHECK_EQ(error_class(MPI_Pack_external("external32", &ubig, 1, MPI_UNSIGNED_LONG, buf,
                                           64, &pos)),
             MPI_ERR_CONVERSION);
    wchar_t wbig = 0x1F600;
    CHECK_EQ(error_class(MPI_Pack_external("external32", &wbig, 1, MPI_WCHAR, buf, 64, &pos)),
             MPI_ERR_CONVERSION);
    /* Only "external32" is a datarep. */
    int x = 1;
    CHECK_EQ(error_class(MPI_Pack_external("native", &x, 1, MPI_INT, buf, 64, &pos)),
             MPI_ERR_ARG);
    CHECK_EQ(error_class(MPI_Pack_external_size("internal", 1, MPI_INT, &size)), MPI_ERR_ARG);
    CHECK_EQ(error_class(MPI_Unpack_external("EXTERNAL32", buf, 4, &pos, &x, 1, MPI_INT)),
             MPI_ERR_ARG);
    /* The buffers' sizes are honoured. */
    int two[2] = {1, 2};
    CHECK_EQ(error_class(MPI_Pack_external("external32", two, 2, MPI_INT, buf, 4, &pos)),
             MPI_ERR_TRUNCATE);
    CHECK_EQ(pos, 0);
    CHECK_EQ(error_class(MPI_Unpack_external("external32", buf, 4, &pos, two, 2, MPI_INT)),
             MPI_ERR_TRUNCATE);
    pos = 2;
    CHECK_EQ(error_class(MPI_Pack_external("external32", two, 1, MPI_INT, buf, 5, &pos)),
             MPI_ERR_TRUNCATE);
    pos = 0;
    CHECK_EQ(error_class(MPI_Pack_external("external32", two, -1, MPI_INT, buf, 64, &pos)),
             MPI_ERR_COUNT);
    /* An uncommitted type. */
    MPI_Datatype c2;
    OK(MPI_Type_contiguous(2, MPI_INT, &c2));
    CHECK_EQ(error_class(MPI_Pack_external("external32", two, 1, c2, buf, 64, &pos)),
             MPI_ERR_TYPE);
    MPI_Type_free(&c2);
}
#endif

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
#ifndef MPICH_SUBSET
    if (argc > 1 && strcmp(argv[1], "fatal") == 0) {
        /* Under MPI_ERRORS_ARE_FATAL the message must name the call and the value. */
        long big = 5000000000L;
        unsigned char buf[8];
        MPI_Aint pos = 0;
        MPI_Pack_external("external32", &big, 1, MPI_LONG, buf, sizeof buf, &pos);
        printf("not reached\n");
        return 0;
    }
#endif
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    OK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
    predefined();
    long_double_against_gcc();
    derived();
#ifndef MPICH_SUBSET
    tsunagi_only();
#endif
    printf("external32 ok\n");
    MPI_Finalize();
    return 0;
}
