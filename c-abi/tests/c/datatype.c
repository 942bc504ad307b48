/* Datatypes: constructors, bounds, decoding, pack/unpack against hand-computed layouts,
 * and sending derived types (2 ranks or more; rank 0 and 1 exchange). */
#include "check.h"
#include <stddef.h>
#include <string.h>

struct particle { double x; int id; char tag; };

int main(int argc, char **argv) {
    int rank, size;
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));

    /* Sizes and extents of builtins, including MPICH's padded pair types. */
    int sz;
    MPI_Aint lb, ext;
    OK(MPI_Type_size(MPI_DOUBLE_INT, &sz));
    CHECK_EQ(sz, 12);
    OK(MPI_Type_get_extent(MPI_DOUBLE_INT, &lb, &ext));
    CHECK_EQ(ext, 16);
    OK(MPI_Type_size(MPI_LONG_DOUBLE, &sz));
    CHECK_EQ(sz, 16);
    OK(MPI_Type_size(MPI_C_BOOL, &sz));
    CHECK_EQ(sz, 1);

    /* Vector: 3 blocks of 2 ints, stride 4 ints. */
    MPI_Datatype vec;
    OK(MPI_Type_vector(3, 2, 4, MPI_INT, &vec));
    OK(MPI_Type_commit(&vec));
    OK(MPI_Type_size(vec, &sz));
    CHECK_EQ(sz, 24);
    OK(MPI_Type_get_extent(vec, &lb, &ext));
    CHECK_EQ(lb, 0);
    CHECK_EQ(ext, (2 * 4 + 2) * 4);
    int src[12], packed[6];
    for (int i = 0; i < 12; i++) src[i] = i;
    int pos = 0;
    OK(MPI_Pack(src, 1, vec, packed, sizeof packed, &pos, MPI_COMM_WORLD));
    CHECK_EQ(pos, 24);
    int expect_vec[6] = {0, 1, 4, 5, 8, 9};
    for (int i = 0; i < 6; i++) CHECK_EQ(packed[i], expect_vec[i]);
    int dst[12];
    memset(dst, -1, sizeof dst);
    pos = 0;
    OK(MPI_Unpack(packed, sizeof packed, &pos, dst, 1, vec, MPI_COMM_WORLD));
    for (int i = 0; i < 12; i++) CHECK_EQ(dst[i], (i % 4 < 2 && i < 10) ? i : -1);
    OK(MPI_Pack_size(2, vec, MPI_COMM_WORLD, &sz));
    CHECK(sz >= 48);

    /* Indexed and hindexed, indexed_block. */
    MPI_Datatype idx, hidx, iblk;
    int bl[3] = {1, 2, 1}, disp[3] = {5, 0, 9};
    MPI_Aint hdisp[3] = {20, 0, 36};
    OK(MPI_Type_indexed(3, bl, disp, MPI_INT, &idx));
    OK(MPI_Type_create_hindexed(3, bl, hdisp, MPI_INT, &hidx));
    OK(MPI_Type_create_indexed_block(3, 1, disp, MPI_INT, &iblk));
    OK(MPI_Type_commit(&idx));
    OK(MPI_Type_commit(&hidx));
    OK(MPI_Type_commit(&iblk));
    int expect_idx[4] = {5, 0, 1, 9};
    int out4[4];
    pos = 0;
    OK(MPI_Pack(src, 1, idx, out4, sizeof out4, &pos, MPI_COMM_WORLD));
    for (int i = 0; i < 4; i++) CHECK_EQ(out4[i], expect_idx[i]);
    pos = 0;
    OK(MPI_Pack(src, 1, hidx, out4, sizeof out4, &pos, MPI_COMM_WORLD));
    for (int i = 0; i < 4; i++) CHECK_EQ(out4[i], expect_idx[i]);
    OK(MPI_Type_get_true_extent(idx, &lb, &ext));
    CHECK_EQ(lb, 0);
    CHECK_EQ(ext, 40);
    OK(MPI_Type_size(iblk, &sz));
    CHECK_EQ(sz, 12);

    /* Struct matching a C struct, with resizing to sizeof. */
    int sbl[3] = {1, 1, 1};
    MPI_Aint sdisp[3] = {offsetof(struct particle, x), offsetof(struct particle, id),
                         offsetof(struct particle, tag)};
    MPI_Datatype stypes[3] = {MPI_DOUBLE, MPI_INT, MPI_CHAR}, st, pt;
    OK(MPI_Type_create_struct(3, sbl, sdisp, stypes, &st));
    OK(MPI_Type_get_extent(st, &lb, &ext));
    CHECK_EQ(ext, sizeof(struct particle));
    OK(MPI_Type_create_resized(st, 0, sizeof(struct particle), &pt));
    OK(MPI_Type_commit(&pt));
    OK(MPI_Type_size(pt, &sz));
    CHECK_EQ(sz, 13);

    /* MPI-1 bound markers in a struct. */
    int mbl[3] = {1, 1, 1};
    MPI_Aint mdisp[3] = {-8, 0, 32};
    MPI_Datatype mtypes[3] = {MPI_LB, MPI_INT, MPI_UB}, marked;
    OK(MPI_Type_struct(3, mbl, mdisp, mtypes, &marked));
    OK(MPI_Type_get_extent(marked, &lb, &ext));
    CHECK_EQ(lb, -8);
    CHECK_EQ(ext, 40);
    OK(MPI_Type_size(marked, &sz));
    CHECK_EQ(sz, 4);
    OK(MPI_Type_free(&marked));

    /* Envelope and contents. */
    int ni, na, nd, comb;
    OK(MPI_Type_get_envelope(vec, &ni, &na, &nd, &comb));
    CHECK_EQ(comb, MPI_COMBINER_VECTOR);
    CHECK_EQ(ni, 3);
    CHECK_EQ(nd, 1);
    int ints[3];
    MPI_Aint addrs[1];
    MPI_Datatype types[1];
    OK(MPI_Type_get_contents(vec, 3, 0, 1, ints, addrs, types));
    CHECK_EQ(ints[0], 3);
    CHECK_EQ(ints[1], 2);
    CHECK_EQ(ints[2], 4);
    CHECK_EQ(types[0], MPI_INT);
    OK(MPI_Type_get_envelope(st, &ni, &na, &nd, &comb));
    CHECK_EQ(comb, MPI_COMBINER_STRUCT);
    CHECK_EQ(na, 3);
    OK(MPI_Type_get_envelope(MPI_INT, &ni, &na, &nd, &comb));
    CHECK_EQ(comb, MPI_COMBINER_NAMED);

    /* Subarray: the 2x2 centre of a 4x4 int array (C order). */
    int sizes[2] = {4, 4}, subs[2] = {2, 2}, starts[2] = {1, 1};
    MPI_Datatype sub;
    OK(MPI_Type_create_subarray(2, sizes, subs, starts, MPI_ORDER_C, MPI_INT, &sub));
    OK(MPI_Type_commit(&sub));
    int grid[16], centre[4];
    for (int i = 0; i < 16; i++) grid[i] = i;
    pos = 0;
    OK(MPI_Pack(grid, 1, sub, centre, sizeof centre, &pos, MPI_COMM_WORLD));
    int expect_c[4] = {5, 6, 9, 10};
    for (int i = 0; i < 4; i++) CHECK_EQ(centre[i], expect_c[i]);
    OK(MPI_Type_get_extent(sub, &lb, &ext));
    CHECK_EQ(ext, 64);

    /* Names, dup, contiguous, hvector, x variants, addresses. */
    char name[MPI_MAX_OBJECT_NAME];
    int len;
    OK(MPI_Type_get_name(MPI_DOUBLE, name, &len));
    CHECK(strcmp(name, "MPI_DOUBLE") == 0 && len == 10);
    OK(MPI_Type_set_name(vec, "my vector"));
    OK(MPI_Type_get_name(vec, name, &len));
    CHECK(strcmp(name, "my vector") == 0);
    MPI_Datatype d2, cont, hv;
    OK(MPI_Type_dup(vec, &d2));
    OK(MPI_Type_get_envelope(d2, &ni, &na, &nd, &comb));
    CHECK_EQ(comb, MPI_COMBINER_DUP);
    OK(MPI_Type_contiguous(4, MPI_SHORT, &cont));
    OK(MPI_Type_create_hvector(2, 1, 16, MPI_DOUBLE, &hv));
    MPI_Count csz, clb, cext;
    OK(MPI_Type_size_x(cont, &csz));
    CHECK_EQ(csz, 8);
    OK(MPI_Type_get_extent_x(hv, &clb, &cext));
    CHECK_EQ(cext, 24);
    MPI_Aint a1, a2;
    OK(MPI_Get_address(&grid[0], &a1));
    OK(MPI_Get_address(&grid[3], &a2));
    CHECK_EQ(MPI_Aint_diff(a2, a1), 12);
    CHECK_EQ(MPI_Aint_add(a1, 12), a2);

    /* Send a vector, receive contiguous ints; send particles. */
    if (size >= 2 && rank < 2) {
        MPI_Status s;
        if (rank == 0) {
            OK(MPI_Send(src, 1, vec, 1, 1, MPI_COMM_WORLD));
            struct particle p[2] = {{1.5, 7, 'a'}, {2.5, 8, 'b'}};
            OK(MPI_Send(p, 2, pt, 1, 2, MPI_COMM_WORLD));
        } else {
            int r[6];
            OK(MPI_Recv(r, 6, MPI_INT, 0, 1, MPI_COMM_WORLD, &s));
            for (int i = 0; i < 6; i++) CHECK_EQ(r[i], expect_vec[i]);
            struct particle p[2];
            memset(p, 0, sizeof p);
            OK(MPI_Recv(p, 2, pt, 0, 2, MPI_COMM_WORLD, &s));
            CHECK(p[0].x == 1.5 && p[0].id == 7 && p[0].tag == 'a');
            CHECK(p[1].x == 2.5 && p[1].id == 8 && p[1].tag == 'b');
            int n;
            OK(MPI_Get_count(&s, pt, &n));
            CHECK_EQ(n, 2);
            OK(MPI_Get_elements(&s, pt, &n));
            CHECK_EQ(n, 6);
        }
    }

    /* Attributes on datatypes: copied by dup (MPI_TYPE_DUP_FN), deleted by free. */
    int tkv;
    static int deleted;
    OK(MPI_Type_create_keyval(MPI_TYPE_DUP_FN, MPI_TYPE_NULL_DELETE_FN, &tkv, NULL));
    OK(MPI_Type_set_attr(vec, tkv, &deleted));
    MPI_Datatype vdup;
    OK(MPI_Type_dup(vec, &vdup));
    void *tv;
    int tflag;
    OK(MPI_Type_get_attr(vdup, tkv, &tv, &tflag));
    CHECK(tflag && tv == &deleted);
    OK(MPI_Type_delete_attr(vec, tkv));
    OK(MPI_Type_get_attr(vec, tkv, &tv, &tflag));
    CHECK_EQ(tflag, 0);
    OK(MPI_Type_free(&vdup));
    OK(MPI_Type_free_keyval(&tkv));

    MPI_Datatype all[] = {vec, idx, hidx, iblk, st, pt, sub, d2, cont, hv};
    for (unsigned i = 0; i < sizeof all / sizeof all[0]; i++) {
        OK(MPI_Type_free(&all[i]));
        CHECK_EQ(all[i], MPI_DATATYPE_NULL);
    }
    if (rank == 0) printf("datatype ok\n");
    OK(MPI_Finalize());
    return 0;
}
