/*
 * msg.c — the program scripts/callgrind-msg runs under callgrind to count the instructions
 * one 8-byte message costs the sender and the receiver. Uses only <mpi.h> (and a shared
 * file for a flag), so any MPI's mpicc builds it and implementations compare the same way.
 *
 *   mpirun -n 2 msg MODE ITERS FLAG_FILE
 *
 * MODE rate: per iteration rank 1 posts WINDOW MPI_Irecv, both ranks meet in MPI_Barrier,
 *   rank 0 posts WINDOW MPI_Isend and MPI_Waitall, then raises a flag in FLAG_FILE (shared
 *   memory, no MPI); rank 1 waits for the flag, so every message is in its queue before it
 *   looks, and calls MPI_Waitall. Counted (callgrind's --toggle-collect): MPI_Isend,
 *   MPI_Irecv, MPI_Waitall — the request path, matching and completion, and no time spent
 *   waiting for the peer.
 * MODE bibw: both directions at once. Per iteration both ranks post WINDOW MPI_Irecv, meet
 *   in MPI_Barrier, post WINDOW MPI_Isend, raise their own flag (rank r's is word r) and
 *   wait for the peer's, then MPI_Waitall on all 2 * WINDOW requests. Counted: MPI_Isend,
 *   MPI_Irecv, MPI_Waitall; each rank sends and receives one message per count.
 * MODE blocking: per iteration rank 0 calls MPI_Send and raises the flag, rank 1 waits for
 *   it and calls MPI_Recv (the message is there); MPI_Barrier between iterations. Counted:
 *   MPI_Send, MPI_Recv.
 * The barriers and the flag are not counted; the script subtracts a short run from a long
 * one so that start-up and one-off costs cancel.
 */
#include <mpi.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Well under what one shared-memory ring holds (Tsunagi's default TSUNAGI_SHM_CELLS is 32,
 * and a 2-rank barrier leaves messages of its own in flight), so that no send waits for
 * room: then the receiver finds every message on its first looks. */
#define WINDOW 16

static volatile long *flag;

static void raise_flag_at(int word, long i) { __atomic_store_n(&flag[word], i + 1, __ATOMIC_RELEASE); }

static void await_flag_at(int word, long i)
{
    while (__atomic_load_n(&flag[word], __ATOMIC_ACQUIRE) < i + 1)
        sched_yield();
}

static void raise_flag(long i) { raise_flag_at(0, i); }

static void await_flag(long i) { await_flag_at(0, i); }

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 4 || size != 2) {
        if (rank == 0)
            fprintf(stderr, "usage: mpirun -n 2 msg rate|bibw|blocking ITERS FLAG_FILE\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int rate = strcmp(argv[1], "rate") == 0;
    int bibw = strcmp(argv[1], "bibw") == 0;
    long iters = atol(argv[2]);
    int fd = open(argv[3], O_RDWR | O_CREAT, 0600);
    if (fd < 0 || ftruncate(fd, 4096) != 0) {
        perror(argv[3]);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    flag = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (flag == MAP_FAILED) {
        perror("mmap");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (rank == 0)
        flag[0] = flag[1] = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    static char sbuf[8], rbuf[WINDOW][8];
    static MPI_Request reqs[2 * WINDOW];
    static MPI_Status sts[2 * WINDOW];
    memset(sbuf, 'a', sizeof sbuf);
    for (long i = 0; i < iters; i++) {
        if (bibw) {
            int peer = 1 - rank;
            for (int w = 0; w < WINDOW; w++)
                MPI_Irecv(rbuf[w], 8, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &reqs[w]);
            MPI_Barrier(MPI_COMM_WORLD);
            for (int w = 0; w < WINDOW; w++)
                MPI_Isend(sbuf, 8, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &reqs[WINDOW + w]);
            raise_flag_at(rank, i);
            await_flag_at(peer, i);
            MPI_Waitall(2 * WINDOW, reqs, sts);
            MPI_Barrier(MPI_COMM_WORLD);
        } else if (rate) {
            if (rank == 1)
                for (int w = 0; w < WINDOW; w++)
                    MPI_Irecv(rbuf[w], 8, MPI_BYTE, 0, 2, MPI_COMM_WORLD, &reqs[w]);
            MPI_Barrier(MPI_COMM_WORLD);
            if (rank == 0) {
                for (int w = 0; w < WINDOW; w++)
                    MPI_Isend(sbuf, 8, MPI_BYTE, 1, 2, MPI_COMM_WORLD, &reqs[w]);
                MPI_Waitall(WINDOW, reqs, sts);
                raise_flag(i);
            } else {
                await_flag(i);
                MPI_Waitall(WINDOW, reqs, sts);
            }
        } else {
            if (rank == 0) {
                MPI_Send(sbuf, 8, MPI_BYTE, 1, 2, MPI_COMM_WORLD);
                raise_flag(i);
            } else {
                await_flag(i);
                MPI_Recv(rbuf[0], 8, MPI_BYTE, 0, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            }
            MPI_Barrier(MPI_COMM_WORLD);
        }
    }
    munmap((void *)flag, 4096);
    close(fd);
    MPI_Finalize();
    return 0;
}
