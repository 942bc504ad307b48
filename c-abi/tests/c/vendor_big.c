/* Messages of every size across the vendor transport's eager limit, so that the large ones
 * take the single-copy rendezvous (the receiver's vendor receives land in the user's
 * buffer, the sender's vendor sends leave from it): both neighbours reading each other at
 * once (Sendrecv in a ring), many reads outstanding (Isend/Irecv of every size at once),
 * a strided receive (the request layer unpacks), a synchronous send, a receive shorter
 * than the message (MPI_ERR_TRUNCATE, the rest dropped), and the buffer reused at once
 * after the send completes. */
#include <stdint.h>
#include <string.h>
#include "check.h"

static unsigned char pattern(int from, int seq, size_t i) {
    return (unsigned char)(from * 31 + seq * 7 + i * 13 + (i >> 12));
}

static void fill(unsigned char *b, size_t n, int from, int seq) {
    for (size_t i = 0; i < n; i++) b[i] = pattern(from, seq, i);
}

static void expect(const unsigned char *b, size_t n, int from, int seq) {
    for (size_t i = 0; i < n; i++)
        if (b[i] != pattern(from, seq, i)) {
            fprintf(stderr, "byte %zu of message %d from %d of %zu bytes is wrong\n", i, seq,
                    from, n);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
}

int main(int argc, char **argv) {
    OK(MPI_Init(&argc, &argv));
    int rank, size;
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    CHECK(size >= 2);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    static const size_t sizes[] = {0,     1,      4095,    32768,   32769,  65536,
                                   100003, 1 << 20, (1 << 20) + 1, 3 << 20, 4 << 20};
    enum { NS = sizeof sizes / sizeof sizes[0] };
    size_t max = 4 << 20;
    unsigned char *out = malloc(max), *in = malloc(max);
    CHECK(out && in);

    /* Every size, both directions at once. */
    for (int s = 0; s < NS; s++) {
        fill(out, sizes[s], rank, s);
        memset(in, 0, max);
        MPI_Status st;
        OK(MPI_Sendrecv(out, (int)sizes[s], MPI_BYTE, next, s, in, (int)max, MPI_BYTE, prev, s,
                        MPI_COMM_WORLD, &st));
        int got;
        OK(MPI_Get_count(&st, MPI_BYTE, &got));
        CHECK_EQ(got, sizes[s]);
        expect(in, sizes[s], prev, s);
    }

    /* All at once: every size outstanding, received in reverse posting order. */
    unsigned char *outs[NS], *ins[NS];
    MPI_Request rq[2 * NS];
    for (int s = 0; s < NS; s++) {
        outs[s] = malloc(sizes[s] + 1);
        ins[s] = malloc(sizes[s] + 1);
        CHECK(outs[s] && ins[s]);
        fill(outs[s], sizes[s], rank, 100 + s);
    }
    for (int s = NS - 1; s >= 0; s--)
        OK(MPI_Irecv(ins[s], (int)sizes[s], MPI_BYTE, prev, 100 + s, MPI_COMM_WORLD, &rq[s]));
    for (int s = 0; s < NS; s++)
        OK(MPI_Isend(outs[s], (int)sizes[s], MPI_BYTE, next, 100 + s, MPI_COMM_WORLD,
                     &rq[NS + s]));
    OK(MPI_Waitall(2 * NS, rq, MPI_STATUSES_IGNORE));
    for (int s = 0; s < NS; s++) {
        expect(ins[s], sizes[s], prev, 100 + s);
        free(outs[s]);
        free(ins[s]);
    }

    /* A strided receive of a large message: every other int. */
    int n = 200000;
    int *ints = malloc(sizeof(int) * (size_t)n), *strided = calloc((size_t)n * 2, sizeof(int));
    CHECK(ints && strided);
    for (int i = 0; i < n; i++) ints[i] = rank * 1000003 + i;
    MPI_Datatype every_other;
    OK(MPI_Type_vector(n, 1, 2, MPI_INT, &every_other));
    OK(MPI_Type_commit(&every_other));
    OK(MPI_Sendrecv(ints, n, MPI_INT, next, 7, strided, 1, every_other, prev, 7,
                    MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    for (int i = 0; i < n; i++) {
        CHECK_EQ(strided[2 * i], prev * 1000003 + i);
        CHECK_EQ(strided[2 * i + 1], 0);
    }
    OK(MPI_Type_free(&every_other));

    /* Synchronous, then the send buffer overwritten at once: the receiver must have it. */
    if (rank == 0) {
        fill(out, 2 << 20, 0, 50);
        OK(MPI_Ssend(out, 2 << 20, MPI_BYTE, 1, 50, MPI_COMM_WORLD));
        memset(out, 0xee, 2 << 20);
        fill(out, 2 << 20, 0, 51);
        OK(MPI_Send(out, 2 << 20, MPI_BYTE, 1, 51, MPI_COMM_WORLD));
        memset(out, 0xee, 2 << 20);
    } else if (rank == 1) {
        OK(MPI_Recv(in, 2 << 20, MPI_BYTE, 0, 50, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        expect(in, 2 << 20, 0, 50);
        OK(MPI_Recv(in, 2 << 20, MPI_BYTE, 0, 51, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        expect(in, 2 << 20, 0, 51);
    }

    /* Truncation: a 1 MiB message into 1000 bytes. */
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    if (rank == 0) {
        fill(out, 1 << 20, 0, 60);
        OK(MPI_Send(out, 1 << 20, MPI_BYTE, 1, 60, MPI_COMM_WORLD));
    } else if (rank == 1) {
        memset(in, 0, 2000);
        MPI_Status st;
        int rc = MPI_Recv(in, 1000, MPI_BYTE, 0, 60, MPI_COMM_WORLD, &st);
        int cls;
        OK(MPI_Error_class(rc, &cls));
        CHECK_EQ(cls, MPI_ERR_TRUNCATE);
        expect(in, 1000, 0, 60);
        CHECK_EQ(in[1000], 0);
    }
    OK(MPI_Barrier(MPI_COMM_WORLD));
    free(out);
    free(in);
    free(ints);
    free(strided);
    if (rank == 0) printf("vendor big ok on %d ranks\n", size);
    OK(MPI_Finalize());
    return 0;
}
