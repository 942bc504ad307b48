/* MPI-IO: every access family round-trips data through non-contiguous views and memory
 * types, checked byte by byte; collective buffering on and off gives the same file; error
 * classes for bad modes, missing and existing files, read-only and write-only handles.
 * Usage: io [DIR] (default /tmp): the directory every rank sees. */
#include "check.h"
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

static int rank, size;
static char dir[512] = "/tmp";
static char name[600];
static int handler_calls;

static void make_name(const char *what) {
    int pid = (int)getpid();
    MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
    snprintf(name, sizeof name, "%s/tsunagi-io-%d-%s", dir, pid, what);
}

static void count_handler(MPI_File *fh, int *code, ...) {
    (void)fh;
    (void)code;
    handler_calls++;
}

static int cls(int code) {
    int c;
    MPI_Error_class(code, &c);
    return c;
}

static void errors(void) {
    MPI_File fh;
    make_name("errors");
    /* The default handler of files returns errors. */
    MPI_Errhandler eh;
    OK(MPI_File_get_errhandler(MPI_FILE_NULL, &eh));
    CHECK(eh == MPI_ERRORS_RETURN);
    CHECK_EQ(cls(MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh)),
             MPI_ERR_NO_SUCH_FILE);
    CHECK_EQ(cls(MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_RDONLY | MPI_MODE_CREATE,
                               MPI_INFO_NULL, &fh)),
             MPI_ERR_AMODE);
    CHECK_EQ(cls(MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_RDWR | MPI_MODE_WRONLY,
                               MPI_INFO_NULL, &fh)),
             MPI_ERR_AMODE);
    CHECK_EQ(cls(MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_RDWR | MPI_MODE_SEQUENTIAL,
                               MPI_INFO_NULL, &fh)),
             MPI_ERR_AMODE);
    OK(MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_WRONLY | MPI_MODE_CREATE, MPI_INFO_NULL,
                     &fh));
    int v = 7;
    char c;
    MPI_Status st;
    CHECK_EQ(cls(MPI_File_read_at(fh, 0, &c, 1, MPI_CHAR, &st)), MPI_ERR_ACCESS);
    OK(MPI_File_write_at(fh, rank * 4, &v, 1, MPI_INT, &st));
    int amode;
    OK(MPI_File_get_amode(fh, &amode));
    CHECK_EQ(amode, MPI_MODE_WRONLY | MPI_MODE_CREATE);
    CHECK_EQ(cls(MPI_File_seek(fh, -1, MPI_SEEK_SET)), MPI_ERR_ARG);
    CHECK_EQ(cls(MPI_File_seek(fh, 0, 12345)), MPI_ERR_ARG);
    CHECK_EQ(cls(MPI_File_write_at(fh, -1, &v, 1, MPI_INT, &st)), MPI_ERR_ARG);
    CHECK_EQ(cls(MPI_File_write_at(fh, 0, &v, -1, MPI_INT, &st)), MPI_ERR_COUNT);
    CHECK_EQ(cls(MPI_File_set_view(fh, 0, MPI_INT, MPI_INT, "no-such-rep", MPI_INFO_NULL)),
             MPI_ERR_UNSUPPORTED_DATAREP);
    OK(MPI_File_close(&fh));
    CHECK(fh == MPI_FILE_NULL);
    CHECK_EQ(cls(MPI_File_open(MPI_COMM_WORLD, name,
                               MPI_MODE_WRONLY | MPI_MODE_CREATE | MPI_MODE_EXCL, MPI_INFO_NULL,
                               &fh)),
             MPI_ERR_FILE_EXISTS);
    OK(MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh));
    CHECK_EQ(cls(MPI_File_write_at(fh, 0, &v, 1, MPI_INT, &st)), MPI_ERR_READ_ONLY);
    CHECK_EQ(cls(MPI_File_set_size(fh, 0)), MPI_ERR_READ_ONLY);
    int got;
    OK(MPI_File_read_at(fh, 4 * ((rank + 1) % size), &got, 1, MPI_INT, &st));
    CHECK_EQ(got, 7);
    /* A user handler on the file sees the file's errors. */
    MPI_Errhandler mine;
    OK(MPI_File_create_errhandler(count_handler, &mine));
    OK(MPI_File_set_errhandler(fh, mine));
    CHECK_EQ(cls(MPI_File_write_at(fh, 0, &v, 1, MPI_INT, &st)), MPI_ERR_READ_ONLY);
    CHECK_EQ(handler_calls, 1);
    OK(MPI_File_call_errhandler(fh, MPI_ERR_IO));
    CHECK_EQ(handler_calls, 2);
    MPI_Errhandler back;
    OK(MPI_File_get_errhandler(fh, &back));
    CHECK(back == mine);
    OK(MPI_Errhandler_free(&back));
    OK(MPI_File_close(&fh));
    /* MPI_FILE_NULL's handler serves open and delete. */
    OK(MPI_File_set_errhandler(MPI_FILE_NULL, mine));
    OK(MPI_Errhandler_free(&mine));
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) OK(MPI_File_delete(name, MPI_INFO_NULL));
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK_EQ(cls(MPI_File_delete(name, MPI_INFO_NULL)), MPI_ERR_NO_SUCH_FILE);
    CHECK_EQ(handler_calls, 3);
    OK(MPI_File_set_errhandler(MPI_FILE_NULL, MPI_ERRORS_RETURN));
    /* Calls on MPI_FILE_NULL. */
    MPI_Offset sz;
    CHECK_EQ(cls(MPI_File_get_size(MPI_FILE_NULL, &sz)), MPI_ERR_FILE);
    CHECK(MPI_File_f2c(MPI_File_c2f(MPI_FILE_NULL)) == MPI_FILE_NULL);
}

/* MPI_T: the route counters of collective accesses (category tsunagi_io), counted by
 * started handles of a performance-variable session. */
static const char *route_names[6] = {"tsunagi_io_coll_read_two_phase",
                                     "tsunagi_io_coll_read_independent",
                                     "tsunagi_io_coll_write_two_phase",
                                     "tsunagi_io_coll_write_independent",
                                     "tsunagi_io_coll_read_mapped",
                                     "tsunagi_io_coll_write_mapped"};
static MPI_T_pvar_session route_ses;
static MPI_T_pvar_handle route_h[6];
static void routes_start(void) {
    int provided;
    OK(MPI_T_init_thread(MPI_THREAD_SINGLE, &provided));
    OK(MPI_T_pvar_session_create(&route_ses));
    for (int k = 0; k < 6; k++) {
        int idx, count;
        OK(MPI_T_pvar_get_index(route_names[k], MPI_T_PVAR_CLASS_COUNTER, &idx));
        OK(MPI_T_pvar_handle_alloc(route_ses, idx, NULL, &route_h[k], &count));
        CHECK_EQ(count, 1);
    }
    OK(MPI_T_pvar_start(route_ses, MPI_T_PVAR_ALL_HANDLES));
}
/* What each counter counted since routes_start. */
static void routes_read(unsigned long long out[6]) {
    for (int k = 0; k < 6; k++) OK(MPI_T_pvar_read(route_ses, route_h[k], &out[k]));
}
static void routes_stop(void) {
    OK(MPI_T_pvar_session_free(&route_ses));
    OK(MPI_T_finalize());
}

/* The 3-D array G[nz][ny][nx] of ints, G = global linear index, decomposed over a
 * px*py*pz grid; each rank's block lives in memory with a ghost layer (non-contiguous
 * memory type too). The BT-IO pattern. */
static void subarray_3d(const char *cb) {
    int gs[3] = {12, 10, 14}; /* z, y, x */
    int dims[3] = {0, 0, 0};
    MPI_Dims_create(size, 3, dims);
    int coords[3] = {rank / (dims[1] * dims[2]), (rank / dims[2]) % dims[1], rank % dims[2]};
    int ls[3], st[3];
    for (int d = 0; d < 3; d++) {
        int base = gs[d] / dims[d], rem = gs[d] % dims[d];
        ls[d] = base + (coords[d] < rem);
        st[d] = coords[d] * base + (coords[d] < rem ? coords[d] : rem);
    }
    MPI_Datatype ft, mt;
    OK(MPI_Type_create_subarray(3, gs, ls, st, MPI_ORDER_C, MPI_INT, &ft));
    OK(MPI_Type_commit(&ft));
    int ms[3] = {ls[0] + 2, ls[1] + 2, ls[2] + 2}, one[3] = {1, 1, 1};
    OK(MPI_Type_create_subarray(3, ms, ls, one, MPI_ORDER_C, MPI_INT, &mt));
    OK(MPI_Type_commit(&mt));
    int n = ms[0] * ms[1] * ms[2];
    int *mem = malloc(sizeof(int) * n), *back = malloc(sizeof(int) * n);
    for (int i = 0; i < n; i++) mem[i] = -1;
    for (int z = 0; z < ls[0]; z++)
        for (int y = 0; y < ls[1]; y++)
            for (int x = 0; x < ls[2]; x++)
                mem[((z + 1) * ms[1] + y + 1) * ms[2] + x + 1] =
                    ((st[0] + z) * gs[1] + st[1] + y) * gs[2] + st[2] + x;
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "romio_cb_write", cb);
    MPI_Info_set(info, "romio_cb_read", cb);
    MPI_Info_set(info, "cb_buffer_size", "1000"); /* many rounds */
    MPI_Info_set(info, "cb_nodes", size > 1 ? "2" : "1");
    MPI_File fh;
    make_name("sub3d");
    OK(MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_RDWR | MPI_MODE_CREATE, info, &fh));
    MPI_Info used;
    OK(MPI_File_get_info(fh, &used));
    char val[64];
    int flag;
    OK(MPI_Info_get(used, "romio_cb_write", sizeof val - 1, val, &flag));
    CHECK(flag && strcmp(val, cb) == 0);
    OK(MPI_Info_get(used, "cb_buffer_size", sizeof val - 1, val, &flag));
    CHECK(flag && strcmp(val, "1000") == 0);
    MPI_Info_free(&used);
    OK(MPI_File_set_view(fh, 0, MPI_INT, ft, "native", MPI_INFO_NULL));
    MPI_Status s;
    unsigned long long rc[6];
    routes_start();
    OK(MPI_File_write_all(fh, mem, 1, mt, &s));
    /* The route counters: one collective write, two-phase when forced, independent when
     * disabled, either in automatic mode (every rank took the same route). */
    routes_read(rc);
    CHECK_EQ(rc[0] + rc[1], 0);
    CHECK_EQ(rc[2] + rc[3], 1);
    if (strcmp(cb, "enable") == 0) CHECK_EQ(rc[2], 1);
    if (strcmp(cb, "disable") == 0) CHECK_EQ(rc[3], 1);
    unsigned long long wrote_two_phase = rc[2];
    int cnt;
    OK(MPI_Get_count(&s, mt, &cnt));
    CHECK_EQ(cnt, 1);
    MPI_Offset pos;
    OK(MPI_File_get_position(fh, &pos));
    CHECK_EQ(pos, ls[0] * ls[1] * ls[2]);
    OK(MPI_File_sync(fh));
    MPI_Offset fsize;
    OK(MPI_File_get_size(fh, &fsize));
    CHECK_EQ(fsize, 4LL * gs[0] * gs[1] * gs[2]);
    /* Read back through the view, collectively, into a fresh buffer. */
    for (int i = 0; i < n; i++) back[i] = -1;
    OK(MPI_File_read_at_all(fh, 0, back, 1, mt, &s));
    for (int i = 0; i < n; i++) CHECK_EQ(back[i], mem[i]);
    routes_read(rc);
    CHECK_EQ(rc[0] + rc[1], 1);
    CHECK_EQ(rc[2] + rc[3], 1);
    if (strcmp(cb, "enable") == 0) CHECK_EQ(rc[0], 1);
    if (strcmp(cb, "disable") == 0) CHECK_EQ(rc[1], 1);
    unsigned long long all_two_phase = wrote_two_phase, mine_two_phase = wrote_two_phase;
    OK(MPI_Allreduce(&mine_two_phase, &all_two_phase, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM,
                     MPI_COMM_WORLD));
    CHECK(all_two_phase == 0 || all_two_phase == (unsigned long long)size);
    routes_stop();
    /* Every rank checks the whole file through the byte view, independently. */
    OK(MPI_File_set_view(fh, 0, MPI_BYTE, MPI_BYTE, "native", MPI_INFO_NULL));
    int total = gs[0] * gs[1] * gs[2];
    int *all = malloc(sizeof(int) * total);
    OK(MPI_File_read_at(fh, 0, all, total, MPI_INT, &s));
    OK(MPI_Get_count(&s, MPI_INT, &cnt));
    CHECK_EQ(cnt, total);
    for (int i = 0; i < total; i++) CHECK_EQ(all[i], i);
    /* A read past the end is short. */
    OK(MPI_File_read_at(fh, 4LL * total - 8, all, 4, MPI_INT, &s));
    OK(MPI_Get_count(&s, MPI_INT, &cnt));
    CHECK_EQ(cnt, 2);
    free(all);
    free(mem);
    free(back);
    OK(MPI_File_close(&fh));
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) OK(MPI_File_delete(name, MPI_INFO_NULL));
    MPI_Info_free(&info);
    MPI_Type_free(&ft);
    MPI_Type_free(&mt);
}

/* The same array through a darray filetype (block distribution), when the library has
 * MPI_Type_create_darray (another issue's; skipped while it is a stub). */
static void darray_3d(void) {
    int gs[3] = {9, 10, 11};
    int dims[3] = {0, 0, 0};
    MPI_Dims_create(size, 3, dims);
    int distribs[3] = {MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_BLOCK};
    int dargs[3] = {MPI_DISTRIBUTE_DFLT_DARG, MPI_DISTRIBUTE_DFLT_DARG,
                    MPI_DISTRIBUTE_DFLT_DARG};
    MPI_Datatype ft;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int rc = MPI_Type_create_darray(size, rank, 3, gs, distribs, dargs, dims, MPI_ORDER_C,
                                    MPI_INT, &ft);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    if (cls(rc) == MPI_ERR_UNSUPPORTED_OPERATION) return;
    OK(rc);
    OK(MPI_Type_commit(&ft));
    int c[3] = {rank / (dims[1] * dims[2]), (rank / dims[2]) % dims[1], rank % dims[2]};
    int ls[3], st[3];
    for (int d = 0; d < 3; d++) {
        int b = (gs[d] + dims[d] - 1) / dims[d];
        st[d] = c[d] * b < gs[d] ? c[d] * b : gs[d];
        ls[d] = st[d] + b < gs[d] ? b : gs[d] - st[d];
    }
    int n = ls[0] * ls[1] * ls[2], k = 0;
    int *mem = malloc(sizeof(int) * (n + 1));
    for (int z = 0; z < ls[0]; z++)
        for (int y = 0; y < ls[1]; y++)
            for (int x = 0; x < ls[2]; x++)
                mem[k++] = ((st[0] + z) * gs[1] + st[1] + y) * gs[2] + st[2] + x;
    MPI_File fh;
    MPI_Status s;
    make_name("darray");
    OK(MPI_File_open(MPI_COMM_WORLD, name,
                     MPI_MODE_RDWR | MPI_MODE_CREATE | MPI_MODE_DELETE_ON_CLOSE, MPI_INFO_NULL,
                     &fh));
    OK(MPI_File_set_view(fh, 0, MPI_INT, ft, "native", MPI_INFO_NULL));
    OK(MPI_File_write_all(fh, mem, n, MPI_INT, &s));
    OK(MPI_File_sync(fh));
    MPI_Barrier(MPI_COMM_WORLD);
    OK(MPI_File_sync(fh));
    OK(MPI_File_set_view(fh, 0, MPI_INT, MPI_INT, "native", MPI_INFO_NULL));
    int total = gs[0] * gs[1] * gs[2];
    int *all = malloc(sizeof(int) * total);
    OK(MPI_File_read_at_all(fh, 0, all, total, MPI_INT, &s));
    for (int i = 0; i < total; i++) CHECK_EQ(all[i], i);
    free(all);
    free(mem);
    OK(MPI_File_close(&fh));
    MPI_Type_free(&ft);
}

/* Interleaved vectors: rank r owns ints r, r+size, r+2*size, ... (a resized vector view);
 * independent, pointer-based, non-blocking and split forms. */
static void interleaved(void) {
    enum { N = 1000 };
    MPI_Datatype ft, one;
    OK(MPI_Type_contiguous(1, MPI_INT, &one));
    OK(MPI_Type_create_resized(one, 0, (MPI_Aint)sizeof(int) * size, &ft));
    OK(MPI_Type_commit(&ft));
    MPI_File fh;
    make_name("vec");
    OK(MPI_File_open(MPI_COMM_WORLD, name,
                     MPI_MODE_RDWR | MPI_MODE_CREATE | MPI_MODE_DELETE_ON_CLOSE, MPI_INFO_NULL,
                     &fh));
    OK(MPI_File_set_view(fh, 16 + 4 * rank, MPI_INT, ft, "native", MPI_INFO_NULL));
    MPI_Offset disp;
    MPI_Datatype et, ft2;
    char rep[MPI_MAX_DATAREP_STRING];
    OK(MPI_File_get_view(fh, &disp, &et, &ft2, rep));
    CHECK_EQ(disp, 16 + 4 * rank);
    CHECK(et == MPI_INT);
    CHECK(strcmp(rep, "native") == 0);
    MPI_Type_free(&ft2);
    MPI_Offset bo;
    OK(MPI_File_get_byte_offset(fh, 3, &bo));
    CHECK_EQ(bo, 16 + 4 * rank + 3 * 4 * size);
    MPI_Aint ext;
    OK(MPI_File_get_type_extent(fh, MPI_DOUBLE, &ext));
    CHECK_EQ(ext, 8);
    int buf[N], in[N];
    for (int i = 0; i < N; i++) buf[i] = (i * size + rank) * 3;
    MPI_Status s;
    /* First half with the individual pointer, second half non-blocking at an offset. */
    OK(MPI_File_write(fh, buf, N / 2, MPI_INT, &s));
    MPI_Offset p;
    OK(MPI_File_get_position(fh, &p));
    CHECK_EQ(p, N / 2);
    MPI_Request rq;
    OK(MPI_File_iwrite_at(fh, N / 2, buf + N / 2, N / 2, MPI_INT, &rq));
    OK(MPI_Wait(&rq, &s));
    int cnt;
    OK(MPI_Get_count(&s, MPI_INT, &cnt));
    CHECK_EQ(cnt, N / 2);
    MPI_Barrier(MPI_COMM_WORLD);
    OK(MPI_File_seek(fh, 0, MPI_SEEK_SET));
    memset(in, 0, sizeof in);
    OK(MPI_File_read_all(fh, in, N, MPI_INT, &s));
    for (int i = 0; i < N; i++) CHECK_EQ(in[i], buf[i]);
    OK(MPI_File_seek(fh, -10, MPI_SEEK_END));
    OK(MPI_File_get_position(fh, &p));
    CHECK_EQ(p, N - 10);
    OK(MPI_File_seek(fh, 2, MPI_SEEK_CUR));
    OK(MPI_File_get_position(fh, &p));
    CHECK_EQ(p, N - 8);
    memset(in, 0, sizeof in);
    OK(MPI_File_iread_all(fh, in, 8, MPI_INT, &rq));
    OK(MPI_Wait(&rq, &s));
    for (int i = 0; i < 8; i++) CHECK_EQ(in[i], buf[N - 8 + i]);
    /* Split collectives, and the whole file as bytes. */
    for (int i = 0; i < N; i++) buf[i] = -buf[i];
    OK(MPI_File_write_at_all_begin(fh, 0, buf, N, MPI_INT));
    CHECK_EQ(cls(MPI_File_write_at_all_begin(fh, 0, buf, N, MPI_INT)), MPI_ERR_OTHER);
    OK(MPI_File_write_at_all_end(fh, buf, &s));
    CHECK_EQ(cls(MPI_File_write_at_all_end(fh, buf, &s)), MPI_ERR_OTHER);
    OK(MPI_File_seek(fh, 0, MPI_SEEK_SET));
    OK(MPI_File_read_all_begin(fh, in, N, MPI_INT));
    OK(MPI_File_read_all_end(fh, in, &s));
    for (int i = 0; i < N; i++) CHECK_EQ(in[i], buf[i]);
    OK(MPI_File_set_view(fh, 16, MPI_INT, MPI_INT, "native", MPI_INFO_NULL));
    int *whole = malloc(sizeof(int) * N * size);
    OK(MPI_File_read_at(fh, 0, whole, N * size, MPI_INT, &s));
    for (int i = 0; i < N * size; i++) CHECK_EQ(whole[i], -3 * i);
    free(whole);
    OK(MPI_File_close(&fh));
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK(access(name, F_OK) != 0); /* deleted on close */
    MPI_Type_free(&ft);
    MPI_Type_free(&one);
}

/* Shared and ordered pointers under concurrency. */
static void shared(void) {
    enum { K = 50 };
    MPI_File fh;
    make_name("shared");
    OK(MPI_File_open(MPI_COMM_WORLD, name,
                     MPI_MODE_RDWR | MPI_MODE_CREATE | MPI_MODE_DELETE_ON_CLOSE, MPI_INFO_NULL,
                     &fh));
    OK(MPI_File_set_view(fh, 0, MPI_INT, MPI_INT, "native", MPI_INFO_NULL));
    MPI_Status s;
    for (int k = 0; k < K; k++) {
        int rec[2] = {rank, k};
        if (k % 2)
            OK(MPI_File_write_shared(fh, rec, 2, MPI_INT, &s));
        else {
            MPI_Request rq;
            OK(MPI_File_iwrite_shared(fh, rec, 2, MPI_INT, &rq));
            OK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Offset sp;
    OK(MPI_File_get_position_shared(fh, &sp));
    CHECK_EQ(sp, 2 * K * size);
    /* Every record is whole and each rank's appear in order. */
    int *all = malloc(sizeof(int) * 2 * K * size);
    OK(MPI_File_read_at(fh, 0, all, 2 * K * size, MPI_INT, &s));
    int *next = calloc(size, sizeof(int));
    for (int i = 0; i < K * size; i++) {
        int r = all[2 * i], k = all[2 * i + 1];
        CHECK(r >= 0 && r < size);
        CHECK_EQ(k, next[r]);
        next[r]++;
    }
    for (int r = 0; r < size; r++) CHECK_EQ(next[r], K);
    /* Ordered: rank order from the shared pointer, which moves past all of them. */
    int mine[3] = {1000 + rank, 2000 + rank, 3000 + rank};
    OK(MPI_File_write_ordered(fh, mine, rank % 3 + 1, MPI_INT, &s));
    OK(MPI_File_get_position_shared(fh, &sp));
    int total = 0;
    for (int r = 0; r < size; r++) total += r % 3 + 1;
    CHECK_EQ(sp, 2 * K * size + total);
    OK(MPI_File_seek_shared(fh, 2 * K * size, MPI_SEEK_SET));
    int got[3] = {0, 0, 0};
    OK(MPI_File_read_ordered(fh, got, rank % 3 + 1, MPI_INT, &s));
    for (int i = 0; i < rank % 3 + 1; i++) CHECK_EQ(got[i], mine[i]);
    OK(MPI_File_seek_shared(fh, 0, MPI_SEEK_SET));
    OK(MPI_File_read_ordered_begin(fh, all, 2, MPI_INT));
    OK(MPI_File_read_ordered_end(fh, all, &s));
    int first[2];
    OK(MPI_File_read_at(fh, 2 * rank, first, 2, MPI_INT, &s));
    CHECK_EQ(all[0], first[0]);
    CHECK_EQ(all[1], first[1]);
    free(all);
    free(next);
    OK(MPI_File_close(&fh));
}

/* A registered representation: ints byte-swapped in the file (memory type MPI_INT). */
static int swap_calls;
static int swap_check(MPI_Datatype dt, MPI_Offset position, void *extra) {
    CHECK(dt == MPI_INT);
    CHECK_EQ(position, 0);
    CHECK(extra == &swap_calls);
    swap_calls++;
    return MPI_SUCCESS;
}
static int swap_write(void *userbuf, MPI_Datatype dt, int count, void *filebuf,
                      MPI_Offset position, void *extra) {
    unsigned char *u = userbuf, *f = filebuf;
    for (int i = 0; i < 4 * count; i++) f[i] = u[(i & ~3) + 3 - (i & 3)];
    return swap_check(dt, position, extra);
}
static int swap_read(void *userbuf, MPI_Datatype dt, int count, void *filebuf,
                     MPI_Offset position, void *extra) {
    unsigned char *u = userbuf, *f = filebuf;
    for (int i = 0; i < 4 * count; i++) u[i] = f[(i & ~3) + 3 - (i & 3)];
    return swap_check(dt, position, extra);
}
static int swap_extent(MPI_Datatype dt, MPI_Aint *ext, void *extra) {
    (void)extra;
    CHECK(dt == MPI_INT);
    *ext = 4;
    return MPI_SUCCESS;
}

/* Sizes, atomic mode, external32, groups. */
static void misc(void) {
    MPI_File fh;
    make_name("misc");
    OK(MPI_File_open(MPI_COMM_WORLD, name,
                     MPI_MODE_RDWR | MPI_MODE_CREATE | MPI_MODE_DELETE_ON_CLOSE, MPI_INFO_NULL,
                     &fh));
    MPI_Group g, wg;
    int res;
    OK(MPI_File_get_group(fh, &g));
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    MPI_Group_compare(g, wg, &res);
    CHECK_EQ(res, MPI_IDENT);
    MPI_Group_free(&g);
    MPI_Group_free(&wg);
    OK(MPI_File_preallocate(fh, 4096));
    MPI_Offset sz;
    OK(MPI_File_get_size(fh, &sz));
    CHECK(sz >= 4096);
    OK(MPI_File_set_size(fh, 100));
    OK(MPI_File_get_size(fh, &sz));
    CHECK_EQ(sz, 100);
    /* Atomic mode: every rank writes the same 4 KiB; the result is one rank's. */
    int flag;
    OK(MPI_File_set_atomicity(fh, 1));
    OK(MPI_File_get_atomicity(fh, &flag));
    CHECK_EQ(flag, 1);
    enum { W = 1024 };
    int blk[W];
    for (int i = 0; i < W; i++) blk[i] = rank;
    MPI_Status s;
    for (int rep = 0; rep < 5; rep++) OK(MPI_File_write_at_all(fh, 0, blk, W, MPI_INT, &s));
    MPI_Barrier(MPI_COMM_WORLD);
    int in[W];
    OK(MPI_File_read_at(fh, 0, in, W, MPI_INT, &s));
    for (int i = 0; i < W; i++) CHECK_EQ(in[i], in[0]);
    OK(MPI_File_set_atomicity(fh, 0));
    /* external32: big-endian in the file. */
    OK(MPI_File_set_view(fh, 0, MPI_INT, MPI_INT, "external32", MPI_INFO_NULL));
    int v = 0x01020304 + rank;
    OK(MPI_File_write_at_all(fh, rank, &v, 1, MPI_INT, &s));
    int r;
    OK(MPI_File_read_at(fh, rank, &r, 1, MPI_INT, &s));
    CHECK_EQ(r, v);
    OK(MPI_File_set_view(fh, 0, MPI_BYTE, MPI_BYTE, "native", MPI_INFO_NULL));
    unsigned char b[4];
    OK(MPI_File_read_at(fh, 4 * rank, b, 4, MPI_BYTE, &s));
    CHECK_EQ(b[0], 1);
    CHECK_EQ(b[1], 2);
    CHECK_EQ(b[2], 3);
    CHECK_EQ(b[3], 4 + rank);
    /* MPI_Register_datarep: the program's conversions run on write and read. */
    OK(MPI_Register_datarep("swapped", swap_read, swap_write, swap_extent, &swap_calls));
    CHECK_EQ(cls(MPI_Register_datarep("swapped", swap_read, swap_write, swap_extent, NULL)),
             MPI_ERR_DUP_DATAREP);
    CHECK_EQ(cls(MPI_Register_datarep("external32", swap_read, swap_write, swap_extent, NULL)),
             MPI_ERR_DUP_DATAREP);
    OK(MPI_File_set_view(fh, 0, MPI_INT, MPI_INT, "swapped", MPI_INFO_NULL));
    char rep[MPI_MAX_DATAREP_STRING];
    MPI_Offset d;
    MPI_Datatype e, f;
    OK(MPI_File_get_view(fh, &d, &e, &f, rep));
    CHECK(strcmp(rep, "swapped") == 0);
    MPI_Aint ext;
    OK(MPI_File_get_type_extent(fh, MPI_INT, &ext));
    CHECK_EQ(ext, 4);
    v = 0x0a0b0c00 + rank;
    OK(MPI_File_write_at(fh, rank, &v, 1, MPI_INT, &s));
    r = 0;
    OK(MPI_File_read_at(fh, rank, &r, 1, MPI_INT, &s));
    CHECK_EQ(r, v);
    CHECK_EQ(swap_calls, 2);
    OK(MPI_File_set_view(fh, 0, MPI_BYTE, MPI_BYTE, "native", MPI_INFO_NULL));
    OK(MPI_File_read_at(fh, 4 * rank, b, 4, MPI_BYTE, &s));
    CHECK_EQ(b[0], 0x0a);
    CHECK_EQ(b[3], rank);
    OK(MPI_File_close(&fh));
}

/* MPI_MODE_SEQUENTIAL (shared pointer only) and MPI_MODE_APPEND (pointers start at the end). */
static void modes(void) {
    MPI_File fh;
    MPI_Status s;
    make_name("modes");
    OK(MPI_File_open(MPI_COMM_WORLD, name,
                     MPI_MODE_WRONLY | MPI_MODE_CREATE | MPI_MODE_SEQUENTIAL, MPI_INFO_NULL,
                     &fh));
    int v = rank;
    CHECK_EQ(cls(MPI_File_write_at(fh, 0, &v, 1, MPI_INT, &s)), MPI_ERR_UNSUPPORTED_OPERATION);
    CHECK_EQ(cls(MPI_File_write(fh, &v, 1, MPI_INT, &s)), MPI_ERR_UNSUPPORTED_OPERATION);
    CHECK_EQ(cls(MPI_File_seek(fh, 0, MPI_SEEK_SET)), MPI_ERR_UNSUPPORTED_OPERATION);
    OK(MPI_File_write_ordered(fh, &v, 1, MPI_INT, &s));
    OK(MPI_File_close(&fh));
    OK(MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_RDWR | MPI_MODE_APPEND, MPI_INFO_NULL, &fh));
    MPI_Offset p;
    OK(MPI_File_get_position(fh, &p));
    CHECK_EQ(p, 4 * size);
    OK(MPI_File_get_position_shared(fh, &p));
    CHECK_EQ(p, 4 * size);
    v = 100 + rank;
    OK(MPI_File_write_ordered(fh, &v, 1, MPI_INT, &s));
    MPI_Barrier(MPI_COMM_WORLD); /* every rank's part is written */
    int *all = malloc(sizeof(int) * 2 * size);
    OK(MPI_File_read_at(fh, 0, all, 2 * size, MPI_INT, &s));
    for (int i = 0; i < size; i++) {
        CHECK_EQ(all[i], i);
        CHECK_EQ(all[size + i], 100 + i);
    }
    free(all);
    OK(MPI_File_close(&fh));
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) OK(MPI_File_delete(name, MPI_INFO_NULL));
}

/* Non-blocking and split collective accesses progress in the background: each call
 * returns before the access is done. A ring of tokens makes rank r call only after rank
 * r-1's call returned, so a collective access done at the call would wait forever; an
 * independent atomic write waits for a record lock another rank holds until it gets a
 * token sent after the write was started (and tested incomplete). */
static void set_lock(int fd, short type) {
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = type;
    fl.l_whence = SEEK_SET;
    fl.l_start = 0;
    fl.l_len = 4096;
    CHECK(fcntl(fd, F_SETLKW, &fl) == 0);
}

static void background(void) {
    enum { N = 4096 };
    MPI_File fh;
    MPI_Status s;
    MPI_Request rq;
    int token = 0, cnt;
    make_name("background");
    OK(MPI_File_open(MPI_COMM_WORLD, name,
                     MPI_MODE_RDWR | MPI_MODE_CREATE | MPI_MODE_DELETE_ON_CLOSE, MPI_INFO_NULL,
                     &fh));
    /* Every other int of memory (packed at the call), rank-interleaved blocks in the file. */
    int *mem = malloc(sizeof(int) * 2 * N), *in = malloc(sizeof(int) * 2 * N);
    for (int i = 0; i < 2 * N; i++) mem[i] = i % 2 ? -1 : rank * N + i / 2;
    MPI_Datatype every2, blk;
    OK(MPI_Type_vector(N, 1, 2, MPI_INT, &every2));
    OK(MPI_Type_commit(&every2));
    OK(MPI_Type_vector(N / 64, 64, 64 * size, MPI_INT, &blk));
    MPI_Datatype ft;
    OK(MPI_Type_create_resized(blk, 0, (MPI_Aint)sizeof(int) * 64 * size, &ft));
    OK(MPI_Type_commit(&ft));
    OK(MPI_File_set_view(fh, 256 * rank, MPI_INT, ft, "native", MPI_INFO_NULL));
    if (rank > 0) OK(MPI_Recv(&token, 1, MPI_INT, rank - 1, 7, MPI_COMM_WORLD, &s));
    OK(MPI_File_iwrite_at_all(fh, 0, mem, 1, every2, &rq));
    if (rank + 1 < size) OK(MPI_Send(&token, 1, MPI_INT, rank + 1, 7, MPI_COMM_WORLD));
    OK(MPI_Wait(&rq, &s));
    OK(MPI_Get_count(&s, every2, &cnt));
    CHECK_EQ(cnt, 1);
    /* Split collective read back, into every other int again, the same ring. */
    for (int i = 0; i < 2 * N; i++) in[i] = -1;
    if (rank > 0) OK(MPI_Recv(&token, 1, MPI_INT, rank - 1, 8, MPI_COMM_WORLD, &s));
    OK(MPI_File_read_at_all_begin(fh, 0, in, 1, every2));
    if (rank + 1 < size) OK(MPI_Send(&token, 1, MPI_INT, rank + 1, 8, MPI_COMM_WORLD));
    OK(MPI_File_read_at_all_end(fh, in, &s));
    for (int i = 0; i < 2 * N; i++) CHECK_EQ(in[i], mem[i]);
    /* The whole file through the byte view: every rank's blocks in place. */
    OK(MPI_File_set_view(fh, 0, MPI_INT, MPI_INT, "native", MPI_INFO_NULL));
    int *all = malloc(sizeof(int) * N * size);
    OK(MPI_File_iread_at(fh, 0, all, N * size, MPI_INT, &rq));
    OK(MPI_Wait(&rq, &s));
    for (int i = 0; i < N * size; i++) CHECK_EQ(all[i], (i / 64 % size) * N + i / (64 * size) * 64 + i % 64);
    free(all);
    if (size > 1) {
        OK(MPI_File_set_atomicity(fh, 1));
        int fd = -1;
        if (rank == 1) {
            fd = open(name, O_RDWR);
            CHECK(fd >= 0);
            set_lock(fd, F_WRLCK);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0) {
            int flag = 1;
            OK(MPI_File_iwrite_at(fh, 0, mem, 64, MPI_INT, &rq));
            OK(MPI_Test(&rq, &flag, &s));
            CHECK_EQ(flag, 0); /* rank 1 holds the lock until it hears from us */
            OK(MPI_Send(&token, 1, MPI_INT, 1, 9, MPI_COMM_WORLD));
            OK(MPI_Wait(&rq, &s));
            OK(MPI_Get_count(&s, MPI_INT, &cnt));
            CHECK_EQ(cnt, 64);
        } else if (rank == 1) {
            OK(MPI_Recv(&token, 1, MPI_INT, 0, 9, MPI_COMM_WORLD, &s));
            set_lock(fd, F_UNLCK);
            close(fd);
        }
        OK(MPI_File_set_atomicity(fh, 0));
        int first[2];
        OK(MPI_File_read_at(fh, 0, first, 2, MPI_INT, &s));
        CHECK_EQ(first[0], 0); /* rank 0's mem[0] and mem[1] */
        CHECK_EQ(first[1], -1);
    }
    free(mem);
    free(in);
    OK(MPI_File_close(&fh));
    MPI_Type_free(&every2);
    MPI_Type_free(&blk);
    MPI_Type_free(&ft);
}

/* The large-count (_c) forms: MPI_Count counts and extents. */
static void large_counts(void) {
    MPI_File fh;
    MPI_Status s;
    MPI_Request rq;
    MPI_Count n = 100, cnt;
    int v[100], back[100];
    for (int i = 0; i < 100; i++) v[i] = rank * 1000 + i;
    make_name("large");
    OK(MPI_File_open(MPI_COMM_WORLD, name,
                     MPI_MODE_RDWR | MPI_MODE_CREATE | MPI_MODE_DELETE_ON_CLOSE, MPI_INFO_NULL,
                     &fh));
    OK(MPI_File_write_at_all_c(fh, (MPI_Offset)rank * 400, v, n, MPI_INT, &s));
    OK(MPI_Get_count_c(&s, MPI_INT, &cnt));
    CHECK_EQ(cnt, 100);
    OK(MPI_File_iread_at_c(fh, (MPI_Offset)rank * 400, back, n, MPI_INT, &rq));
    OK(MPI_Wait(&rq, &s));
    for (int i = 0; i < 100; i++) CHECK_EQ(back[i], v[i]);
    OK(MPI_File_set_view(fh, 0, MPI_INT, MPI_INT, "native", MPI_INFO_NULL));
    OK(MPI_File_seek(fh, 100 * rank, MPI_SEEK_SET));
    OK(MPI_File_read_c(fh, back, 50, MPI_INT, &s));
    for (int i = 0; i < 50; i++) CHECK_EQ(back[i], v[i]);
    OK(MPI_File_read_all_begin_c(fh, back, 50, MPI_INT));
    OK(MPI_File_read_all_end(fh, back, &s));
    for (int i = 0; i < 50; i++) CHECK_EQ(back[i], v[50 + i]);
    MPI_Count ext;
    OK(MPI_File_get_type_extent_c(fh, MPI_DOUBLE, &ext));
    CHECK_EQ(ext, 8);
    CHECK_EQ(cls(MPI_File_write_at_c(fh, 0, v, -1, MPI_INT, &s)), MPI_ERR_COUNT);
    OK(MPI_File_close(&fh));
}

/* Two-phase I/O through the file's own pages (every rank maps the file; one node only):
 * interleaved ints at an unaligned displacement, in rounds (windows) of one page, into a
 * file that exists and is longer (its tail stays, its size too), then into a fresh file
 * (it grows to exactly the end of the data), read back collectively, past the end too.
 * The MPI_T counters say which accesses were mapped; the fallbacks (a write-only handle:
 * a shared writable mapping needs read access; tsunagi_cb_mmap=disable) still round-trip
 * the data, by the other two-phase rounds. A read-only handle refuses collective writes
 * on every rank. */
static void mapped_one(int amode, const char *mmap_hint, int want_mapped_write) {
    enum { N = 1000, OLD = 64 * 1024 };
    const int disp = 3;
    MPI_Datatype ft, one;
    OK(MPI_Type_contiguous(1, MPI_INT, &one));
    OK(MPI_Type_create_resized(one, 0, (MPI_Aint)sizeof(int) * size, &ft));
    OK(MPI_Type_commit(&ft));
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "romio_cb_write", "enable");
    MPI_Info_set(info, "romio_cb_read", "enable");
    MPI_Info_set(info, "cb_buffer_size", "4096");
    MPI_Info_set(info, "tsunagi_cb_mmap", mmap_hint);
    long long end = disp + 4LL * N * size;
    int buf[N], in[N];
    for (int i = 0; i < N; i++) buf[i] = i * size + rank + 1;
    for (int fresh = 0; fresh < 2; fresh++) {
        make_name(fresh ? "mapped-new" : "mapped-old");
        if (rank == 0) {
            /* The old file: OLD bytes of 0xEE, longer than the data. */
            int fd = open(name, O_CREAT | O_TRUNC | O_WRONLY, 0644);
            CHECK(fd >= 0);
            if (!fresh) {
                char *junk = malloc(OLD);
                memset(junk, 0xEE, OLD);
                CHECK_EQ(write(fd, junk, OLD), OLD);
                free(junk);
            }
            close(fd);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_File fh;
        OK(MPI_File_open(MPI_COMM_WORLD, name, amode, info, &fh));
        OK(MPI_File_set_view(fh, disp + 4 * rank, MPI_INT, ft, "native", MPI_INFO_NULL));
        unsigned long long rc[6];
        routes_start();
        MPI_Status s;
        OK(MPI_File_write_all(fh, buf, N, MPI_INT, &s));
        int cnt;
        OK(MPI_Get_count(&s, MPI_INT, &cnt));
        CHECK_EQ(cnt, N);
        routes_read(rc);
        CHECK_EQ(rc[2], 1);
        CHECK_EQ(rc[5], want_mapped_write);
        /* Through the file's pages no rank returns before every rank's data is in the
         * file; the message rounds return when the data reached the aggregator. */
        if (!want_mapped_write) OK(MPI_File_sync(fh));
        MPI_Offset sz;
        OK(MPI_File_get_size(fh, &sz));
        long long len = fresh || end > OLD ? end : OLD; /* grown, never shrunk */
        CHECK_EQ(sz, len);
        if (amode & MPI_MODE_RDWR) {
            memset(in, 0, sizeof in);
            OK(MPI_File_read_at_all(fh, 0, in, N, MPI_INT, &s));
            OK(MPI_Get_count(&s, MPI_INT, &cnt));
            CHECK_EQ(cnt, N);
            for (int i = 0; i < N; i++) CHECK_EQ(in[i], buf[i]);
            routes_read(rc);
            CHECK_EQ(rc[0], 1);
            CHECK_EQ(rc[4], want_mapped_write);
            /* Past the end of the fresh file: the bytes before it, the rest zeros. */
            if (fresh) {
                memset(in, 0x55, sizeof in);
                OK(MPI_File_read_at_all(fh, N - 10, in, 20, MPI_INT, &s));
                OK(MPI_Get_count(&s, MPI_INT, &cnt));
                CHECK_EQ(cnt, 10);
                for (int i = 0; i < 10; i++) CHECK_EQ(in[i], buf[N - 10 + i]);
            }
        }
        routes_stop();
        OK(MPI_File_close(&fh));
        /* Every rank checks the whole file with plain POSIX reads. */
        MPI_Barrier(MPI_COMM_WORLD);
        unsigned char *all = malloc(len);
        int fd = open(name, O_RDONLY);
        CHECK(fd >= 0);
        for (long long got = 0; got < len;) {
            ssize_t k = read(fd, all + got, len - got);
            CHECK(k > 0);
            got += k;
        }
        close(fd);
        for (long long b = 0; b < len; b++) {
            int want;
            if (b < disp || b >= end) {
                want = fresh ? 0 : 0xEE;
            } else {
                long long k = (b - disp) / 4;
                int v = (int)((k / size) * size + k % size + 1);
                want = ((unsigned char *)&v)[(b - disp) % 4];
            }
            CHECK_EQ(all[b], want);
        }
        free(all);
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0) OK(MPI_File_delete(name, MPI_INFO_NULL));
    }
    MPI_Info_free(&info);
    MPI_Type_free(&ft);
    MPI_Type_free(&one);
}

static void mapped(void) {
    /* The mapped route runs only when every rank is on one node. */
    MPI_Comm node;
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    int on_node;
    MPI_Comm_size(node, &on_node);
    MPI_Comm_free(&node);
    int one_node = on_node == size;
    mapped_one(MPI_MODE_RDWR, "automatic", one_node);
    /* Across nodes the hints change nothing (message rounds): once is enough there. */
    if (one_node) {
        mapped_one(MPI_MODE_RDWR, "enable", 1);
        mapped_one(MPI_MODE_RDWR, "disable", 0);
        mapped_one(MPI_MODE_WRONLY, "automatic", 0);
    }
    /* A read-only handle: every rank's collective write fails, as MPI_ERR_READ_ONLY. */
    make_name("mapped-ro");
    MPI_File fh;
    OK(MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_RDWR | MPI_MODE_CREATE, MPI_INFO_NULL,
                     &fh));
    OK(MPI_File_close(&fh));
    OK(MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh));
    int v[4] = {1, 2, 3, 4};
    MPI_Status s;
    CHECK_EQ(cls(MPI_File_write_at_all(fh, 16 * rank, v, 4, MPI_INT, &s)), MPI_ERR_READ_ONLY);
    MPI_Offset sz;
    OK(MPI_File_get_size(fh, &sz));
    CHECK_EQ(sz, 0);
    OK(MPI_File_close(&fh));
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) OK(MPI_File_delete(name, MPI_INFO_NULL));
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc > 1) snprintf(dir, sizeof dir, "%s", argv[1]);
    errors();
    subarray_3d("enable");
    subarray_3d("disable");
    subarray_3d("automatic");
    darray_3d();
    interleaved();
    mapped();
    shared();
    misc();
    modes();
    background();
    large_counts();
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("io ok\n");
    MPI_Finalize();
    return 0;
}
