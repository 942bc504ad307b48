/*
 * floor.c — the cheapest an 8-byte allreduce or alltoall across pretend nodes can be on
 * this host, with no MPI at all: the floor under issue 15's pretend-node target.
 *
 *   floor NODES PER_NODE ITERS ALG TRANSPORT
 *     ALG        rd: node step, recursive doubling among the leaders, node step back
 *                a2a: node step, every leader sends to every other leader, node step back
 *                star: node step, leaders send to leader 0, which sends the sum back to
 *                each (the fewest messages: 2 (NODES - 1), two hops), node step back
 *     TRANSPORT  tcp (loopback, TCP_NODELAY, one connection per pair of leaders) or udp
 *                (one connected datagram socket per pair and direction)
 *
 * NODES * PER_NODE processes are forked. Inside a pretend node they meet on one shared
 * page: a non-leader stores its value and a sequence number, the leader waits for every
 * sequence number, combines, talks to the other leaders, stores the result and its
 * sequence number, which the non-leaders wait for. Waiting is what Tsunagi's crowded ranks
 * do: look once (an acquire load, or a non-blocking recv), then sched_yield. Blocking in
 * recv instead measured no better. One value of 8 bytes travels per message; Tsunagi's
 * alltoall moves a few blocks per leader pair, which costs the same on a socket.
 *
 * Output (process 0): "<alg> <transport> nodes N per_node K: <usec> us/iter", the mean
 * over ITERS iterations after 100 warm-up ones. Every leader checks the sum it ends with;
 * exit status 1 on a wrong sum or a socket error.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { MAX_NODES = 16, MAX_PER_NODE = 16 };

/* One pretend node's page; each field on its own line so that waiting readers of one
 * do not take the line another writer needs. */
typedef struct {
    struct { _Atomic long seq; double val; char pad[48]; } in[MAX_PER_NODE];
    struct { _Atomic long seq; double val; char pad[48]; } out;
} node_page;

static int sock[MAX_NODES]; /* this leader's socket to leader j */

static void die(const char *what) { perror(what); exit(1); }

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void send_value(int s, double v) {
    if (send(s, &v, sizeof v, 0) != (ssize_t)sizeof v) die("send");
}

static double recv_value(int s) {
    double v;
    size_t got = 0;
    while (got < sizeof v) {
        ssize_t r = recv(s, (char *)&v + got, sizeof v - got, MSG_DONTWAIT);
        if (r > 0) got += (size_t)r;
        else if (r < 0 && (errno == EAGAIN || errno == EINTR)) sched_yield();
        else die("recv");
    }
    return v;
}

static void wait_for(_Atomic long *seq, long want) {
    while (atomic_load_explicit(seq, memory_order_acquire) < want) sched_yield();
}

static struct sockaddr_in loopback(void) {
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: floor NODES PER_NODE ITERS rd|a2a|star tcp|udp\n");
        return 2;
    }
    int nodes = atoi(argv[1]), per_node = atoi(argv[2]);
    long iters = atol(argv[3]);
    int alltoall = !strcmp(argv[4], "a2a"), star = !strcmp(argv[4], "star");
    int udp = !strcmp(argv[5], "udp");
    if ((!alltoall && !star && strcmp(argv[4], "rd")) || (!udp && strcmp(argv[5], "tcp"))) {
        fprintf(stderr, "floor: ALG is rd, a2a or star; TRANSPORT tcp or udp\n");
        return 2;
    }
    if (nodes < 2 || nodes > MAX_NODES || (nodes & (nodes - 1)) || per_node < 1 ||
        per_node > MAX_PER_NODE || iters < 1) {
        fprintf(stderr, "floor: NODES a power of 2 in 2..16, PER_NODE 1..16, ITERS >= 1\n");
        return 2;
    }
    node_page *pages = mmap(0, sizeof(node_page) * nodes, PROT_READ | PROT_WRITE,
                            MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (pages == MAP_FAILED) die("mmap");

    /* Sockets are made before the fork, so nobody waits for anybody to listen. */
    static int pair[MAX_NODES][MAX_NODES];
    for (int i = 0; i < nodes; i++)
        for (int j = i + 1; j < nodes; j++) {
            struct sockaddr_in a = loopback(), b;
            socklen_t len = sizeof b;
            if (udp) {
                int x = socket(AF_INET, SOCK_DGRAM, 0), y = socket(AF_INET, SOCK_DGRAM, 0);
                struct sockaddr_in ax, bx;
                if (x < 0 || y < 0 || bind(x, (void *)&a, sizeof a) || bind(y, (void *)&a, sizeof a))
                    die("udp socket");
                len = sizeof ax;
                getsockname(x, (void *)&ax, &len);
                len = sizeof bx;
                getsockname(y, (void *)&bx, &len);
                if (connect(x, (void *)&bx, sizeof bx) || connect(y, (void *)&ax, sizeof ax))
                    die("udp connect");
                pair[i][j] = x;
                pair[j][i] = y;
            } else {
                int l = socket(AF_INET, SOCK_STREAM, 0), c = socket(AF_INET, SOCK_STREAM, 0);
                if (l < 0 || c < 0 || bind(l, (void *)&a, sizeof a) || listen(l, 1)) die("listen");
                getsockname(l, (void *)&b, &len);
                if (connect(c, (void *)&b, sizeof b)) die("connect");
                int s = accept(l, 0, 0), one = 1;
                if (s < 0) die("accept");
                close(l);
                setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                pair[i][j] = c;
                pair[j][i] = s;
            }
        }

    int me = -1;
    for (int r = 0; r < nodes * per_node; r++) {
        pid_t pid = fork();
        if (pid < 0) die("fork");
        if (pid == 0) { me = r; break; }
    }
    if (me < 0) {
        int status, failed = 0;
        while (wait(&status) > 0)
            if (!WIFEXITED(status) || WEXITSTATUS(status)) failed = 1;
        return failed;
    }
    int node = me / per_node, local = me % per_node;
    for (int j = 0; j < nodes; j++) sock[j] = pair[node][j];
    node_page *page = &pages[node];

    double start = 0, check = 0;
    for (long it = 1; it <= iters + 100; it++) {
        if (it == 101) start = now();
        double v = me + it;
        if (local) {
            page->in[local].val = v;
            atomic_store_explicit(&page->in[local].seq, it, memory_order_release);
            wait_for(&page->out.seq, it);
            check += page->out.val;
            continue;
        }
        for (int k = 1; k < per_node; k++) {
            wait_for(&page->in[k].seq, it);
            v += page->in[k].val;
        }
        if (alltoall) {
            double mine = v;
            for (int j = 0; j < nodes; j++)
                if (j != node) send_value(sock[j], mine);
            for (int j = 0; j < nodes; j++)
                if (j != node) v += recv_value(sock[j]);
        } else if (star) {
            if (node == 0) {
                for (int j = 1; j < nodes; j++) v += recv_value(sock[j]);
                for (int j = 1; j < nodes; j++) send_value(sock[j], v);
            } else {
                send_value(sock[0], v);
                v = recv_value(sock[0]);
            }
        } else {
            for (int d = 1; d < nodes; d <<= 1) {
                send_value(sock[node ^ d], v);
                v += recv_value(sock[node ^ d]);
            }
        }
        /* Every process contributed me + it: the sum is known, and a wrong one is a bug. */
        double want = (double)nodes * per_node * it + (double)nodes * per_node * (nodes * per_node - 1) / 2;
        if (v != want) {
            fprintf(stderr, "floor: leader %d got %g in iteration %ld, want %g\n", node, v, it, want);
            exit(1);
        }
        page->out.val = v;
        atomic_store_explicit(&page->out.seq, it, memory_order_release);
        check += v;
    }
    double t = now() - start;
    if (me == 0)
        printf("%s %s nodes %d per_node %d: %.2f us/iter\n", argv[4], argv[5], nodes, per_node,
               t / iters * 1e6);
    return check < 0; /* keeps the sums alive */
}
