/* Where the ranks of a job over a vendor MPI run, as Tsunagi sees it: the ranks that share
 * a node (MPI_Comm_split_type MPI_COMM_TYPE_SHARED, from the vendor bootstrap's
 * placement) must be exactly those in one network namespace (one "host" of the
 * namespace tests), and there must be as many nodes as argv[1] says. Then every rank
 * exchanges a message with every other (within a node and across nodes, so each
 * transport that the job routes carries some). Rank 0 prints "vendor hosts ok: N nodes". */
#define _DEFAULT_SOURCE
#include <string.h>
#include <unistd.h>
#include "check.h"

#define NS_BYTES 64

int main(int argc, char **argv) {
    OK(MPI_Init(&argc, &argv));
    int rank, size;
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    CHECK(argc == 2);
    int want_nodes = atoi(argv[1]);

    char ns[NS_BYTES] = {0};
    CHECK(readlink("/proc/self/ns/net", ns, NS_BYTES - 1) > 0);
    char *all = malloc((size_t)size * NS_BYTES);
    CHECK(all != NULL);
    OK(MPI_Allgather(ns, NS_BYTES, MPI_CHAR, all, NS_BYTES, MPI_CHAR, MPI_COMM_WORLD));

    MPI_Comm node;
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    int node_size;
    OK(MPI_Comm_size(node, &node_size));
    int *node_ranks = malloc((size_t)node_size * sizeof(int));
    CHECK(node_ranks != NULL);
    OK(MPI_Allgather(&rank, 1, MPI_INT, node_ranks, 1, MPI_INT, node));
    /* The node's members are exactly the ranks of this namespace. */
    int same_ns = 0;
    for (int r = 0; r < size; r++)
        if (strcmp(all + (size_t)r * NS_BYTES, ns) == 0) same_ns++;
    CHECK_EQ(node_size, same_ns);
    for (int i = 0; i < node_size; i++)
        CHECK(strcmp(all + (size_t)node_ranks[i] * NS_BYTES, ns) == 0);

    /* Nodes: ranks that are the first of their namespace. */
    int nodes = 0;
    for (int r = 0; r < size; r++) {
        int first = 1;
        for (int q = 0; q < r; q++)
            if (strcmp(all + (size_t)q * NS_BYTES, all + (size_t)r * NS_BYTES) == 0) first = 0;
        nodes += first;
    }
    CHECK_EQ(nodes, want_nodes);

    /* Everyone to everyone, small and large (the large by the single-copy reads). */
    const int lens[] = {8, 1 << 20};
    for (int k = 0; k < 2; k++) {
        int len = lens[k];
        int *out = malloc((size_t)len), *in = malloc((size_t)len * size);
        CHECK(out && in);
        for (int i = 0; i < len / 4; i++) out[i] = rank * 1000003 + i;
        MPI_Request *reqs = malloc(sizeof(MPI_Request) * 2 * (size_t)size);
        CHECK(reqs != NULL);
        int n = 0;
        for (int r = 0; r < size; r++) {
            if (r == rank) continue;
            OK(MPI_Irecv((char *)in + (size_t)r * len, len, MPI_BYTE, r, 7, MPI_COMM_WORLD,
                         &reqs[n++]));
            OK(MPI_Isend(out, len, MPI_BYTE, r, 7, MPI_COMM_WORLD, &reqs[n++]));
        }
        OK(MPI_Waitall(n, reqs, MPI_STATUSES_IGNORE));
        for (int r = 0; r < size; r++) {
            if (r == rank) continue;
            const int *got = (const int *)((char *)in + (size_t)r * len);
            for (int i = 0; i < len / 4; i++) CHECK_EQ(got[i], r * 1000003 + i);
        }
        free(reqs);
        free(in);
        free(out);
    }
    OK(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 0) printf("vendor hosts ok: %d nodes\n", nodes);
    free(node_ranks);
    free(all);
    OK(MPI_Comm_free(&node));
    OK(MPI_Finalize());
    return 0;
}
