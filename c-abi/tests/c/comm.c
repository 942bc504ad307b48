/* Communicators and groups (any number of ranks). */
#include "check.h"
#include <string.h>

int main(int argc, char **argv) {
    int rank, size, r, s, res;
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    OK(MPI_Comm_size(MPI_COMM_SELF, &s));
    CHECK_EQ(s, 1);

    /* dup: congruent, names, free. */
    MPI_Comm dup;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    OK(MPI_Comm_compare(MPI_COMM_WORLD, dup, &res));
    CHECK_EQ(res, MPI_CONGRUENT);
    OK(MPI_Comm_compare(dup, dup, &res));
    CHECK_EQ(res, MPI_IDENT);
    char name[MPI_MAX_OBJECT_NAME];
    int len;
    OK(MPI_Comm_get_name(MPI_COMM_WORLD, name, &len));
    CHECK(strcmp(name, "MPI_COMM_WORLD") == 0);
    OK(MPI_Comm_set_name(dup, "dup of world"));
    OK(MPI_Comm_get_name(dup, name, &len));
    CHECK(strcmp(name, "dup of world") == 0 && len == 12);
    int flag;
    OK(MPI_Comm_test_inter(dup, &flag));
    CHECK_EQ(flag, 0);
    /* Traffic on the dup does not match traffic on world. */
    int next = (rank + 1) % size, prev = (rank + size - 1) % size, a = rank, b = -1, c = -1;
    MPI_Request rq[2];
    OK(MPI_Irecv(&b, 1, MPI_INT, prev, 0, dup, &rq[0]));
    OK(MPI_Irecv(&c, 1, MPI_INT, prev, 0, MPI_COMM_WORLD, &rq[1]));
    int w = -rank;
    OK(MPI_Send(&w, 1, MPI_INT, next, 0, MPI_COMM_WORLD));
    OK(MPI_Send(&a, 1, MPI_INT, next, 0, dup));
    OK(MPI_Waitall(2, rq, MPI_STATUSES_IGNORE));
    CHECK_EQ(b, prev);
    CHECK_EQ(c, -prev);

    /* split by parity, reversed key order. */
    MPI_Comm half;
    OK(MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &half));
    OK(MPI_Comm_size(half, &s));
    OK(MPI_Comm_rank(half, &r));
    CHECK_EQ(s, (size - rank % 2 + 1) / 2);
    CHECK_EQ(r, s - 1 - rank / 2);
    OK(MPI_Comm_compare(MPI_COMM_WORLD, half, &res));
    CHECK_EQ(res, size == 1 ? MPI_CONGRUENT : MPI_UNEQUAL);
    MPI_Comm none;
    OK(MPI_Comm_split(MPI_COMM_WORLD, rank == 0 ? MPI_UNDEFINED : 1, 0, &none));
    if (rank == 0) CHECK_EQ(none, MPI_COMM_NULL);
    else OK(MPI_Comm_free(&none));

    /* split_type shared: everyone on this host. */
    MPI_Comm node;
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
    OK(MPI_Comm_size(node, &s));
    CHECK(s >= 1 && s <= size);
    if (getenv("EXPECT_NODE_SIZE")) CHECK_EQ(s, atoi(getenv("EXPECT_NODE_SIZE")));
    OK(MPI_Barrier(node));
    OK(MPI_Comm_free(&node));

    /* Groups. */
    MPI_Group world, evens, odds, u, in, diff, g;
    OK(MPI_Comm_group(MPI_COMM_WORLD, &world));
    OK(MPI_Group_size(world, &s));
    CHECK_EQ(s, size);
    OK(MPI_Group_rank(world, &r));
    CHECK_EQ(r, rank);
    int ranges[1][3] = {{0, size - 1, 2}};
    OK(MPI_Group_range_incl(world, 1, ranges, &evens));
    OK(MPI_Group_range_excl(world, 1, ranges, &odds));
    OK(MPI_Group_size(evens, &s));
    CHECK_EQ(s, (size + 1) / 2);
    OK(MPI_Group_union(evens, odds, &u));
    OK(MPI_Group_compare(u, world, &res));
    CHECK_EQ(res, size <= 2 ? MPI_IDENT : MPI_SIMILAR);
    OK(MPI_Group_intersection(evens, odds, &in));
    CHECK_EQ(in, MPI_GROUP_EMPTY);
    OK(MPI_Group_difference(world, odds, &diff));
    OK(MPI_Group_compare(diff, evens, &res));
    CHECK_EQ(res, MPI_IDENT);
    int ids[2] = {0, size - 1}, tr[2];
    OK(MPI_Group_incl(world, size > 1 ? 2 : 1, ids, &g));
    OK(MPI_Group_translate_ranks(g, size > 1 ? 2 : 1, (int[]){0, 1}, world, tr));
    CHECK_EQ(tr[0], 0);
    if (size > 1) CHECK_EQ(tr[1], size - 1);
    MPI_Group ex;
    OK(MPI_Group_excl(world, 1, ids, &ex));
    OK(MPI_Group_size(ex, &s));
    CHECK_EQ(s, size - 1);
    OK(MPI_Group_rank(ex, &r));
    CHECK_EQ(r, rank == 0 ? MPI_UNDEFINED : rank - 1);

    /* comm_create from the evens group. */
    MPI_Comm ec;
    OK(MPI_Comm_create(MPI_COMM_WORLD, evens, &ec));
    if (rank % 2) {
        CHECK_EQ(ec, MPI_COMM_NULL);
    } else {
        OK(MPI_Comm_rank(ec, &r));
        CHECK_EQ(r, rank / 2);
        MPI_Group eg;
        OK(MPI_Comm_group(ec, &eg));
        OK(MPI_Group_compare(eg, evens, &res));
        CHECK_EQ(res, MPI_IDENT);
        OK(MPI_Group_free(&eg));
        OK(MPI_Comm_free(&ec));
    }

    MPI_Group gs[] = {world, evens, odds, u, diff, g, ex};
    for (unsigned i = 0; i < sizeof gs / sizeof gs[0]; i++) {
        OK(MPI_Group_free(&gs[i]));
        CHECK_EQ(gs[i], MPI_GROUP_NULL);
    }
    OK(MPI_Comm_free(&half));
    OK(MPI_Comm_free(&dup));
    CHECK_EQ(dup, MPI_COMM_NULL);
    /* Many dups and frees reuse context ids. */
    for (int i = 0; i < 50; i++) {
        MPI_Comm t;
        OK(MPI_Comm_dup(MPI_COMM_WORLD, &t));
        OK(MPI_Comm_free(&t));
    }
    if (rank == 0) printf("comm ok on %d ranks\n", size);
    OK(MPI_Finalize());
    return 0;
}
