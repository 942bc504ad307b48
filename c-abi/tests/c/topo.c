/* Process topologies (any number of ranks >= 1): Dims_create against the standard's
 * examples; a Himeno-style 3-D grid (Dims_create + Cart_create + Cart_shift with
 * MPI_PROC_NULL at the edges) with a halo exchange of the three faces through vector
 * datatypes and Isend/Irecv/Waitall; Cart queries, Cart_sub, a periodic ring with a
 * neighbourhood allgather; graph and distributed-graph topologies and their queries. */
#include "check.h"
#include <string.h>

#define L 4          /* interior points per dimension */
#define N (L + 2)    /* with the halo */
#define IDX(i, j, k) (((i) * N + (j)) * N + (k))

static int value(const int g[3]) { return g[0] * 10000 + g[1] * 100 + g[2]; }

int main(int argc, char **argv) {
    int rank, size;
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));

    /* Dims_create: the examples of MPI-3.1 §7.5.2. */
    int dd[3] = {0, 0, 0};
    OK(MPI_Dims_create(6, 2, dd));
    CHECK(dd[0] == 3 && dd[1] == 2);
    dd[0] = dd[1] = 0;
    OK(MPI_Dims_create(7, 2, dd));
    CHECK(dd[0] == 7 && dd[1] == 1);
    dd[0] = 0, dd[1] = 3, dd[2] = 0;
    OK(MPI_Dims_create(6, 3, dd));
    CHECK(dd[0] == 2 && dd[1] == 3 && dd[2] == 1);
    dd[0] = dd[1] = dd[2] = 0;
    OK(MPI_Dims_create(8, 3, dd));
    CHECK(dd[0] == 2 && dd[1] == 2 && dd[2] == 2);
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    dd[0] = 0, dd[1] = 3, dd[2] = 0;
    int cls;
    OK(MPI_Error_class(MPI_Dims_create(7, 3, dd), &cls));
    CHECK_EQ(cls, MPI_ERR_DIMS);
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));

    /* Himeno: a 3-D grid over all processes, not periodic. */
    int dims[3] = {0, 0, 0}, periods[3] = {0, 0, 0};
    OK(MPI_Dims_create(size, 3, dims));
    CHECK_EQ(dims[0] * dims[1] * dims[2], size);
    MPI_Comm cart;
    OK(MPI_Cart_create(MPI_COMM_WORLD, 3, dims, periods, 0, &cart));
    CHECK(cart != MPI_COMM_NULL);
    int status, nd, crank, coords[3], gd[3], gp[3], gc[3];
    OK(MPI_Topo_test(cart, &status));
    CHECK_EQ(status, MPI_CART);
    OK(MPI_Topo_test(MPI_COMM_WORLD, &status));
    CHECK_EQ(status, MPI_UNDEFINED);
    OK(MPI_Cartdim_get(cart, &nd));
    CHECK_EQ(nd, 3);
    OK(MPI_Comm_rank(cart, &crank));
    OK(MPI_Cart_get(cart, 3, gd, gp, gc));
    OK(MPI_Cart_coords(cart, crank, 3, coords));
    for (int d = 0; d < 3; d++) CHECK(gd[d] == dims[d] && gp[d] == 0 && gc[d] == coords[d]);
    int back;
    OK(MPI_Cart_rank(cart, coords, &back));
    CHECK_EQ(back, crank);
    /* Row-major rank order. */
    CHECK_EQ(crank, (coords[0] * dims[1] + coords[1]) * dims[2] + coords[2]);

    int lo[3], hi[3];
    for (int d = 0; d < 3; d++) {
        OK(MPI_Cart_shift(cart, d, 1, &lo[d], &hi[d]));
        if (coords[d] == 0) CHECK_EQ(lo[d], MPI_PROC_NULL);
        if (coords[d] == dims[d] - 1) CHECK_EQ(hi[d], MPI_PROC_NULL);
        if (lo[d] != MPI_PROC_NULL) {
            int c[3];
            OK(MPI_Cart_coords(cart, lo[d], 3, c));
            for (int e = 0; e < 3; e++) CHECK_EQ(c[e], coords[e] - (e == d));
        }
    }

    /* The halo exchange. Face i = const is contiguous; j = const is NX blocks of NZ;
     * k = const is NX*NY single elements NZ apart. */
    int *p = malloc(sizeof(int) * N * N * N);
    CHECK(p);
    for (int i = 0; i < N * N * N; i++) p[i] = -1;
    for (int i = 1; i <= L; i++)
        for (int j = 1; j <= L; j++)
            for (int k = 1; k <= L; k++) {
                int g[3] = {coords[0] * L + i - 1, coords[1] * L + j - 1, coords[2] * L + k - 1};
                p[IDX(i, j, k)] = value(g);
            }
    MPI_Datatype face[3];
    OK(MPI_Type_contiguous(N * N, MPI_INT, &face[0]));
    OK(MPI_Type_vector(N, N, N * N, MPI_INT, &face[1]));
    OK(MPI_Type_vector(N * N, 1, N, MPI_INT, &face[2]));
    for (int d = 0; d < 3; d++) OK(MPI_Type_commit(&face[d]));
    /* Offsets of the planes at index 0, 1, L, L+1 along each dimension. */
    int stride[3] = {N * N, N, 1};
    for (int d = 0; d < 3; d++) {
        MPI_Request req[4];
        OK(MPI_Irecv(p + 0 * stride[d], 1, face[d], lo[d], d, cart, &req[0]));
        OK(MPI_Irecv(p + (L + 1) * stride[d], 1, face[d], hi[d], d, cart, &req[1]));
        OK(MPI_Isend(p + 1 * stride[d], 1, face[d], lo[d], d, cart, &req[2]));
        OK(MPI_Isend(p + L * stride[d], 1, face[d], hi[d], d, cart, &req[3]));
        OK(MPI_Waitall(4, req, MPI_STATUSES_IGNORE));
        for (int q = 0; q < 4; q++) CHECK_EQ(req[q], MPI_REQUEST_NULL);
    }
    /* Check the six faces' interior parts (edges and corners are not exchanged). */
    for (int d = 0; d < 3; d++)
        for (int side = 0; side < 2; side++) {
            int nb = side ? hi[d] : lo[d];
            for (int u = 1; u <= L; u++)
                for (int t = 1; t <= L; t++) {
                    int ix[3], e = 0;
                    for (int f = 0; f < 3; f++)
                        ix[f] = f == d ? (side ? L + 1 : 0) : (e++ == 0 ? u : t);
                    int got = p[IDX(ix[0], ix[1], ix[2])];
                    if (nb == MPI_PROC_NULL) {
                        CHECK_EQ(got, -1);
                    } else {
                        int g[3];
                        for (int f = 0; f < 3; f++) g[f] = coords[f] * L + ix[f] - 1;
                        CHECK_EQ(got, value(g));
                    }
                }
        }
    for (int d = 0; d < 3; d++) OK(MPI_Type_free(&face[d]));
    free(p);

    /* Cart_sub: keep dimension 0 -> communicators of dims[0] processes. */
    int remain[3] = {1, 0, 0};
    MPI_Comm line;
    OK(MPI_Cart_sub(cart, remain, &line));
    int lsize, lrank;
    OK(MPI_Comm_size(line, &lsize));
    OK(MPI_Comm_rank(line, &lrank));
    CHECK_EQ(lsize, dims[0]);
    CHECK_EQ(lrank, coords[0]);
    OK(MPI_Cartdim_get(line, &nd));
    CHECK_EQ(nd, 1);
    OK(MPI_Comm_free(&line));
    int newrank;
    OK(MPI_Cart_map(MPI_COMM_WORLD, 3, dims, periods, &newrank));
    CHECK_EQ(newrank, rank);
    OK(MPI_Comm_free(&cart));

    /* A periodic ring: shifts wrap; neighbour allgather gets (left, right). */
    int one = size, per = 1;
    MPI_Comm ring;
    OK(MPI_Cart_create(MPI_COMM_WORLD, 1, &one, &per, 1, &ring));
    int src, dst;
    OK(MPI_Cart_shift(ring, 0, 1, &src, &dst));
    CHECK_EQ(src, (rank + size - 1) % size);
    CHECK_EQ(dst, (rank + 1) % size);
    int mine = 10 * rank, got[2] = {-1, -1};
    OK(MPI_Neighbor_allgather(&mine, 1, MPI_INT, got, 1, MPI_INT, ring));
    CHECK_EQ(got[0], 10 * src);
    CHECK_EQ(got[1], 10 * dst);
    int sendv[2] = {100 * rank, 100 * rank + 1};
    got[0] = got[1] = -1;
    OK(MPI_Neighbor_alltoall(sendv, 1, MPI_INT, got, 1, MPI_INT, ring));
    CHECK_EQ(got[0], 100 * src + 1); /* the left neighbour's block for its right */
    CHECK_EQ(got[1], 100 * dst);
    /* The v and w forms and the non-blocking ones: 2 ints to the left, 1 to the right.
     * On 1 or 2 ranks both neighbours are one process: blocks still travel in their
     * direction (MPI-4.0's clarification; Debian's MPICH matches the v form by order). */
    {
        int sb[3] = {rank, rank + 1000, rank + 2000}, rb[3] = {-1, -1, -1};
        int sc[2] = {2, 1}, sd[2] = {0, 2}, rc[2] = {1, 2}, rd[2] = {0, 1};
        OK(MPI_Neighbor_alltoallv(sb, sc, sd, MPI_INT, rb, rc, rd, MPI_INT, ring));
        /* From the left: its block for its right (1 int); from the right: 2 ints. */
        CHECK_EQ(rb[0], src + 2000);
        CHECK(rb[1] == dst && rb[2] == dst + 1000);
        MPI_Aint sda[2] = {0, 2 * sizeof(int)}, rda[2] = {0, sizeof(int)};
        MPI_Datatype ty[2] = {MPI_INT, MPI_INT};
        rb[0] = rb[1] = rb[2] = -1;
        OK(MPI_Neighbor_alltoallw(sb, sc, sda, ty, rb, rc, rda, ty, ring));
        CHECK_EQ(rb[0], src + 2000);
        CHECK(rb[1] == dst && rb[2] == dst + 1000);
        int dv[2] = {1, 0}, cv[2] = {1, 1};
        rb[0] = rb[1] = rb[2] = -1;
        OK(MPI_Neighbor_allgatherv(&mine, 1, MPI_INT, rb, cv, dv, MPI_INT, ring));
        CHECK(rb[1] == 10 * src && rb[0] == 10 * dst);
        MPI_Request req[3];
        int g2[2] = {-1, -1}, a2[2] = {-1, -1};
        rb[0] = rb[1] = rb[2] = -1;
        OK(MPI_Ineighbor_allgather(&mine, 1, MPI_INT, g2, 1, MPI_INT, ring, &req[0]));
        OK(MPI_Ineighbor_alltoall(sendv, 1, MPI_INT, a2, 1, MPI_INT, ring, &req[1]));
        OK(MPI_Ineighbor_alltoallv(sb, sc, sd, MPI_INT, rb, rc, rd, MPI_INT, ring, &req[2]));
        OK(MPI_Waitall(3, req, MPI_STATUSES_IGNORE));
        CHECK(g2[0] == 10 * src && g2[1] == 10 * dst);
        CHECK(a2[0] == 100 * src + 1 && a2[1] == 100 * dst);
        CHECK(rb[0] == src + 2000 && rb[1] == dst && rb[2] == dst + 1000);
    }
    OK(MPI_Comm_free(&ring));

    /* Grid smaller than the communicator: the rest get MPI_COMM_NULL. */
    if (size > 1) {
        int half = size / 2, np = 0;
        MPI_Comm part;
        OK(MPI_Cart_create(MPI_COMM_WORLD, 1, &half, &np, 0, &part));
        CHECK((rank < half) == (part != MPI_COMM_NULL));
        if (part != MPI_COMM_NULL) OK(MPI_Comm_free(&part));
    }

    /* A graph: the ring again, as MPI_Graph_create. */
    int *index = malloc(sizeof(int) * size), *edges = malloc(sizeof(int) * 2 * size);
    for (int r = 0; r < size; r++) {
        index[r] = 2 * (r + 1);
        edges[2 * r] = (r + size - 1) % size;
        edges[2 * r + 1] = (r + 1) % size;
    }
    MPI_Comm graph;
    OK(MPI_Graph_create(MPI_COMM_WORLD, size, index, edges, 0, &graph));
    OK(MPI_Topo_test(graph, &status));
    CHECK_EQ(status, MPI_GRAPH);
    int nnodes, nedges, nn, nbrs[2];
    OK(MPI_Graphdims_get(graph, &nnodes, &nedges));
    CHECK(nnodes == size && nedges == 2 * size);
    OK(MPI_Graph_neighbors_count(graph, rank, &nn));
    CHECK_EQ(nn, 2);
    OK(MPI_Graph_neighbors(graph, rank, 2, nbrs));
    CHECK(nbrs[0] == (rank + size - 1) % size && nbrs[1] == (rank + 1) % size);
    int *gi = malloc(sizeof(int) * size), *ge = malloc(sizeof(int) * 2 * size);
    OK(MPI_Graph_get(graph, size, 2 * size, gi, ge));
    CHECK(memcmp(gi, index, sizeof(int) * size) == 0);
    CHECK(memcmp(ge, edges, sizeof(int) * 2 * size) == 0);
    OK(MPI_Graph_map(MPI_COMM_WORLD, size, index, edges, &newrank));
    CHECK_EQ(newrank, rank);
    OK(MPI_Comm_free(&graph));
    free(gi), free(ge), free(index), free(edges);

    /* Distributed graph: each rank receives from rank-1 and sends to rank+1 (a chain). */
    int srcs[1] = {rank - 1}, dsts[1] = {rank + 1}, wts[1] = {7};
    int indeg = rank > 0, outdeg = rank < size - 1;
    MPI_Comm dg;
    OK(MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, indeg, srcs, MPI_UNWEIGHTED, outdeg,
                                      dsts, MPI_UNWEIGHTED, MPI_INFO_NULL, 0, &dg));
    OK(MPI_Topo_test(dg, &status));
    CHECK_EQ(status, MPI_DIST_GRAPH);
    int i1, o1, weighted;
    OK(MPI_Dist_graph_neighbors_count(dg, &i1, &o1, &weighted));
    CHECK(i1 == indeg && o1 == outdeg && weighted == 0);
    int gs[1] = {-5}, gdst[1] = {-5};
    int uw[2] = {-9, -9}; /* not written for an unweighted graph */
    OK(MPI_Dist_graph_neighbors(dg, indeg, gs, &uw[0], outdeg, gdst, &uw[1]));
    CHECK(uw[0] == -9 && uw[1] == -9);
    if (indeg) CHECK_EQ(gs[0], rank - 1);
    if (outdeg) CHECK_EQ(gdst[0], rank + 1);
    int val = rank * 3, from = -1;
    OK(MPI_Neighbor_allgather(&val, 1, MPI_INT, &from, 1, MPI_INT, dg));
    if (indeg) CHECK_EQ(from, (rank - 1) * 3);
    OK(MPI_Comm_free(&dg));

    /* Dist_graph_create: rank 0 names every edge r -> r+1, with weights. */
    int n0 = rank == 0 ? size - 1 : 0;
    int *s0 = malloc(sizeof(int) * (size + 1)), *deg = malloc(sizeof(int) * (size + 1));
    int *d0 = malloc(sizeof(int) * (size + 1)), *w0 = malloc(sizeof(int) * (size + 1));
    for (int r = 0; r < n0; r++) s0[r] = r, deg[r] = 1, d0[r] = r + 1, w0[r] = 10 + r;
    OK(MPI_Dist_graph_create(MPI_COMM_WORLD, n0, s0, deg, d0, w0, MPI_INFO_NULL, 0, &dg));
    OK(MPI_Dist_graph_neighbors_count(dg, &i1, &o1, &weighted));
    CHECK(i1 == indeg && o1 == outdeg && weighted == 1);
    int sw[1] = {-1}, dw[1] = {-1};
    OK(MPI_Dist_graph_neighbors(dg, indeg, gs, sw, outdeg, gdst, dw));
    if (indeg) CHECK(gs[0] == rank - 1 && sw[0] == 10 + rank - 1);
    if (outdeg) CHECK(gdst[0] == rank + 1 && dw[0] == 10 + rank);
    OK(MPI_Comm_free(&dg));
    free(s0), free(deg), free(d0), free(w0);
    (void)wts;

    /* Errors: a communicator without a topology. */
    MPI_Comm dup;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    OK(MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN));
    OK(MPI_Error_class(MPI_Cart_shift(dup, 0, 1, &src, &dst), &cls));
    CHECK_EQ(cls, MPI_ERR_TOPOLOGY);
    OK(MPI_Comm_free(&dup));

    OK(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 0) printf("topo ok\n");
    OK(MPI_Finalize());
    return 0;
}
