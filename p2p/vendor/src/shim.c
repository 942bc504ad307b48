/* The vendor shim: plain-int functions over one vendor MPI, compiled once per vendor
 * against that vendor's own mpi.h (build.rs), so that every handle type, constant and
 * struct layout (MPI_Comm, MPI_Request, MPI_Status, MPI_BYTE, MPI_ANY_SOURCE...) is the
 * vendor's. The vendor library is never linked: it is dlopen'ed (RTLD_LOCAL|RTLD_DEEPBIND)
 * and every function is reached through a pointer from dlsym, because the process also
 * holds Tsunagi's own MPI_* symbols and a plain call would bind to those.
 *
 * Open MPI's predefined handles are addresses of library globals (mpi.h:
 * OMPI_PREDEFINED_GLOBAL(type, ompi_mpi_comm_world)); the macro is redefined below so that
 * the header's own constant names become dlsym look-ups in the loaded library. MPICH's are
 * plain integers and need nothing.
 *
 * Every function returns the vendor's MPI error code (MPI_SUCCESS = 0) or a negative
 * SHIM_E* code. Names carry SHIM_PREFIX (one set per vendor in one binary). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <mpi.h>

#define SHIM_CAT2(a, b) a##b
#define SHIM_CAT(a, b) SHIM_CAT2(a, b)
#define F(name) SHIM_CAT(SHIM_PREFIX, name)

#define SHIM_ENOTLOADED (-1)
#define SHIM_ENOMEM (-2)
#define SHIM_EBADREQ (-3)

static void *lib;

#ifdef OMPI_PREDEFINED_GLOBAL
#undef OMPI_PREDEFINED_GLOBAL
#define OMPI_PREDEFINED_GLOBAL(type, global) ((type)dlsym(lib, #global))
#endif

#define FN(name) static __typeof__(name) *p_##name
FN(MPI_Init_thread);
FN(MPI_Initialized);
FN(MPI_Finalize);
FN(MPI_Abort);
FN(MPI_Comm_rank);
FN(MPI_Comm_size);
FN(MPI_Comm_dup);
FN(MPI_Comm_free);
FN(MPI_Comm_set_errhandler);
FN(MPI_Isend);
FN(MPI_Irecv);
FN(MPI_Recv_init);
FN(MPI_Start);
FN(MPI_Recv);
FN(MPI_Test);
FN(MPI_Testsome);
FN(MPI_Wait);
FN(MPI_Iprobe);
FN(MPI_Probe);
FN(MPI_Request_free);
FN(MPI_Cancel);
FN(MPI_Get_count);
FN(MPI_Allgather);
FN(MPI_Allgatherv);
FN(MPI_Barrier);
FN(MPI_Error_string);
FN(MPI_Get_library_version);

static MPI_Comm world;    /* the vendor's MPI_COMM_WORLD */
static MPI_Comm moves;    /* a duplicate: the transport's first messages and requests */
static MPI_Comm bulk;     /* another: the bytes receives are posted for by source and tag
                           * (rests, read data), which must never match a wildcard receive
                           * posted on `moves` */
static MPI_Datatype byte; /* MPI_BYTE */
static MPI_Request req_null; /* MPI_REQUEST_NULL (a library global in Open MPI) */

/* Outstanding requests, named by index; a free slot holds MPI_REQUEST_NULL. */
static MPI_Request *reqs;
/* Per slot: a wildcard receive posted ahead and active (irecv_any, restart_any), cancelled
 * at finalize since no message will ever come for it. */
static char *posted_ahead;
/* Per slot: a persistent request (MPI_Recv_init): its slot stays taken when it completes,
 * and finalize frees it. */
static char *persistent;
static int nreqs, capreqs;
static int *free_slots, nfree;

/* Load the library at `path`; on failure write why into err (errlen bytes). */
int F(load)(const char *path, char *err, int errlen)
{
    if (lib)
        return 0;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (!h) {
        snprintf(err, errlen, "dlopen(%s): %s", path, dlerror());
        return SHIM_ENOTLOADED;
    }
#define LOAD(name)                                                                         \
    do {                                                                                   \
        p_##name = (__typeof__(name) *)dlsym(h, #name);                                   \
        if (!p_##name) {                                                                   \
            snprintf(err, errlen, "%s has no %s", path, #name);                           \
            dlclose(h);                                                                    \
            return SHIM_ENOTLOADED;                                                        \
        }                                                                                  \
    } while (0)
    LOAD(MPI_Init_thread);
    LOAD(MPI_Initialized);
    LOAD(MPI_Finalize);
    LOAD(MPI_Abort);
    LOAD(MPI_Comm_rank);
    LOAD(MPI_Comm_size);
    LOAD(MPI_Comm_dup);
    LOAD(MPI_Comm_free);
    LOAD(MPI_Comm_set_errhandler);
    LOAD(MPI_Isend);
    LOAD(MPI_Irecv);
    LOAD(MPI_Recv_init);
    LOAD(MPI_Start);
    LOAD(MPI_Recv);
    LOAD(MPI_Test);
    LOAD(MPI_Testsome);
    LOAD(MPI_Wait);
    LOAD(MPI_Iprobe);
    LOAD(MPI_Probe);
    LOAD(MPI_Request_free);
    LOAD(MPI_Cancel);
    LOAD(MPI_Get_count);
    LOAD(MPI_Allgather);
    LOAD(MPI_Allgatherv);
    LOAD(MPI_Barrier);
    LOAD(MPI_Error_string);
    LOAD(MPI_Get_library_version);
    /* A name that resolved to Tsunagi's own library (it also answers to libmpich.so.12
     * and libmpi.so.12) would make Tsunagi call itself. */
    Dl_info theirs, ours;
    if (dladdr((void *)p_MPI_Init_thread, &theirs) && dladdr((void *)&F(load), &ours) &&
        theirs.dli_fbase == ours.dli_fbase) {
        snprintf(err, errlen, "%s is Tsunagi's own library, not a vendor MPI", path);
        dlclose(h);
        return SHIM_ENOTLOADED;
    }
    lib = h;
    world = MPI_COMM_WORLD;
    byte = MPI_BYTE;
    req_null = MPI_REQUEST_NULL;
    if (!world || !byte) {
        snprintf(err, errlen, "%s lacks this vendor's MPI_COMM_WORLD or MPI_BYTE", path);
        lib = NULL;
        dlclose(h);
        return SHIM_ENOTLOADED;
    }
    return 0;
}

/* The vendor's thread-level constants. */
void F(thread_levels)(int *single, int *funneled, int *serialized, int *multiple)
{
    *single = MPI_THREAD_SINGLE;
    *funneled = MPI_THREAD_FUNNELED;
    *serialized = MPI_THREAD_SERIALIZED;
    *multiple = MPI_THREAD_MULTIPLE;
}

int F(init)(int required, int *provided)
{
    if (!lib)
        return SHIM_ENOTLOADED;
    int rc = p_MPI_Init_thread(NULL, NULL, required, provided);
    if (rc != MPI_SUCCESS)
        return rc;
    /* Errors come back as codes: the caller turns them into Tsunagi errors. */
    rc = p_MPI_Comm_set_errhandler(world, MPI_ERRORS_RETURN);
    if (rc != MPI_SUCCESS)
        return rc;
    rc = p_MPI_Comm_dup(world, &moves);
    if (rc != MPI_SUCCESS)
        return rc;
    return p_MPI_Comm_dup(world, &bulk);
}

int F(rank)(int *rank) { return lib ? p_MPI_Comm_rank(world, rank) : SHIM_ENOTLOADED; }
int F(size)(int *size) { return lib ? p_MPI_Comm_size(world, size) : SHIM_ENOTLOADED; }

/* Open MPI's MPI_IN_PLACE is (void *)1, which is also what an empty Rust Vec points at:
 * a buffer of no bytes is passed as this instead. */
static char no_bytes[1];
#define NONEMPTY(buf, len) ((len) == 0 ? (void *)no_bytes : (void *)(buf))

static int take_slot(int *index)
{
    if (nfree > 0) {
        *index = free_slots[--nfree];
        return 0;
    }
    if (nreqs == capreqs) {
        int cap = capreqs ? 2 * capreqs : 64;
        MPI_Request *r = realloc(reqs, (size_t)cap * sizeof *r);
        if (!r)
            return SHIM_ENOMEM;
        reqs = r;
        int *f = realloc(free_slots, (size_t)cap * sizeof *f);
        if (!f)
            return SHIM_ENOMEM;
        free_slots = f;
        char *p = realloc(posted_ahead, (size_t)cap);
        if (!p)
            return SHIM_ENOMEM;
        posted_ahead = p;
        char *q = realloc(persistent, (size_t)cap);
        if (!q)
            return SHIM_ENOMEM;
        persistent = q;
        capreqs = cap;
    }
    *index = nreqs++;
    posted_ahead[*index] = 0;
    persistent[*index] = 0;
    return 0;
}

static void give_slot(int index)
{
    reqs[index] = req_null;
    posted_ahead[index] = 0;
    persistent[index] = 0;
    free_slots[nfree++] = index;
}

static MPI_Comm comm_of(int on_bulk) { return on_bulk ? bulk : moves; }

/* Send on the first-message communicator, or on the bulk one (on_bulk != 0). */
int F(isend)(const void *buf, int len, int dest, int tag, int on_bulk, int *index)
{
    int rc = take_slot(index);
    if (rc)
        return rc;
    posted_ahead[*index] = 0;
    rc = p_MPI_Isend(NONEMPTY(buf, len), len, byte, dest, tag, comm_of(on_bulk), &reqs[*index]);
    if (rc != MPI_SUCCESS)
        give_slot(*index);
    return rc;
}

int F(irecv)(void *buf, int len, int src, int tag, int on_bulk, int *index)
{
    int rc = take_slot(index);
    if (rc)
        return rc;
    posted_ahead[*index] = 0;
    rc = p_MPI_Irecv(NONEMPTY(buf, len), len, byte, src, tag, comm_of(on_bulk), &reqs[*index]);
    if (rc != MPI_SUCCESS)
        give_slot(*index);
    return rc;
}

/* The byte count of a completed receive's status. Read from the status itself where the
 * vendor's header says how (MPICH: count_lo and the high bits; Open MPI: _ucount): the
 * MPI_Get_count call it saves is a tenth of the transport's cost of a short receive over
 * MPICH (callgrind, docs/vendor-mpi.md). Anything unusual goes to MPI_Get_count. */
static int status_count(MPI_Status *st, int *count)
{
#if defined(MPICH)
    if ((st->count_hi_and_cancelled >> 1) == 0 && st->count_lo >= 0) {
        *count = st->count_lo;
        return MPI_SUCCESS;
    }
#elif defined(OPEN_MPI)
    if (st->_ucount <= (size_t)0x7fffffff) {
        *count = (int)st->_ucount;
        return MPI_SUCCESS;
    }
#endif
    return p_MPI_Get_count(st, byte, count);
}

/* Post a receive of at most len bytes from any source under any tag on the first-message
 * communicator, ahead of the message (completed by test_any), as a persistent request
 * (MPI_Recv_init, then MPI_Start): once taken, restart_any posts it again into the same
 * buffer, which costs both vendors less than a new MPI_Irecv (no request to allocate, no
 * arguments to check again). */
int F(irecv_any)(void *buf, int len, int *index)
{
    int rc = take_slot(index);
    if (rc)
        return rc;
    rc = p_MPI_Recv_init(NONEMPTY(buf, len), len, byte, MPI_ANY_SOURCE, MPI_ANY_TAG, moves,
                         &reqs[*index]);
    if (rc != MPI_SUCCESS) {
        give_slot(*index);
        return rc;
    }
    persistent[*index] = 1;
    rc = p_MPI_Start(&reqs[*index]);
    if (rc != MPI_SUCCESS) {
        p_MPI_Request_free(&reqs[*index]);
        give_slot(*index);
        return rc;
    }
    posted_ahead[*index] = 1;
    return MPI_SUCCESS;
}

/* Post the receive `index` (irecv_any's, completed by test_any) again, into its buffer. */
int F(restart_any)(int index)
{
    if (index < 0 || index >= nreqs || !persistent[index] || posted_ahead[index])
        return SHIM_EBADREQ;
    int rc = p_MPI_Start(&reqs[index]);
    if (rc == MPI_SUCCESS)
        posted_ahead[index] = 1;
    return rc;
}

/* Test a receive posted by irecv_any or restart_any; when *done, its source, tag and byte
 * count, and the request is inactive until restart_any. */
int F(test_any)(int index, int *done, int *src, int *tag, int *count)
{
    if (index < 0 || index >= nreqs || !persistent[index] || !posted_ahead[index])
        return SHIM_EBADREQ;
    MPI_Status st;
    int rc = p_MPI_Test(&reqs[index], done, &st);
    if (rc == MPI_SUCCESS && !*done)
        return rc;
    /* Complete (or failed, which also ends it): inactive until started again. A message
     * longer than the buffer (a peer with a larger short limit) shows here as the
     * vendor's truncation error. */
    posted_ahead[index] = 0;
    if (rc != MPI_SUCCESS)
        return rc;
    *src = st.MPI_SOURCE;
    *tag = st.MPI_TAG;
    return status_count(&st, count);
}

/* Test request `index`; when *done, the slot is free again. */
int F(test)(int index, int *done)
{
    if (index < 0 || index >= nreqs || reqs[index] == req_null)
        return SHIM_EBADREQ;
    int rc = p_MPI_Test(&reqs[index], done, MPI_STATUS_IGNORE);
    if (rc == MPI_SUCCESS && *done)
        give_slot(index);
    return rc;
}

/* Test the n requests idx[0..n) (plain ones: sends, receives by source and tag) with one
 * MPI_Testsome, so that the vendor's progress runs once rather than once per request:
 * writes the positions (into idx) of those complete to done[], their number to *ndone,
 * and frees their slots. */
static MPI_Request *some;
static int *some_at, capsome;
int F(test_some)(const int *idx, int n, int *done, int *ndone)
{
    *ndone = 0;
    if (n <= 0)
        return MPI_SUCCESS;
    if (n > capsome) {
        MPI_Request *r = realloc(some, (size_t)n * sizeof *r);
        if (!r)
            return SHIM_ENOMEM;
        some = r;
        int *a = realloc(some_at, (size_t)n * sizeof *a);
        if (!a)
            return SHIM_ENOMEM;
        some_at = a;
        capsome = n;
    }
    for (int i = 0; i < n; i++) {
        if (idx[i] < 0 || idx[i] >= nreqs || reqs[idx[i]] == req_null || persistent[idx[i]])
            return SHIM_EBADREQ;
        some[i] = reqs[idx[i]];
    }
    int out = 0;
    /* MPICH's MPI_STATUSES_IGNORE is the address 1, which gcc takes for an empty array. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstringop-overflow"
    int rc = p_MPI_Testsome(n, some, &out, some_at, MPI_STATUSES_IGNORE);
#pragma GCC diagnostic pop
    if (rc != MPI_SUCCESS)
        return rc;
    if (out == MPI_UNDEFINED)
        return MPI_SUCCESS;
    for (int k = 0; k < out; k++) {
        done[k] = some_at[k];
        give_slot(idx[some_at[k]]);
    }
    *ndone = out;
    return MPI_SUCCESS;
}

/* Is a message waiting on the transport's communicator? Source, tag and byte count. */
int F(iprobe)(int *found, int *src, int *tag, int *count)
{
    MPI_Status st;
    int rc = p_MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, moves, found, &st);
    if (rc != MPI_SUCCESS || !*found)
        return rc;
    *src = st.MPI_SOURCE;
    *tag = st.MPI_TAG;
    return status_count(&st, count);
}

/* Is a message with this tag waiting, from any source? Source and byte count. */
int F(iprobe_tag)(int tag, int *found, int *src, int *count)
{
    MPI_Status st;
    int rc = p_MPI_Iprobe(MPI_ANY_SOURCE, tag, moves, found, &st);
    if (rc != MPI_SUCCESS || !*found)
        return rc;
    *src = st.MPI_SOURCE;
    return status_count(&st, count);
}

/* Is a message from src with this tag waiting on the bulk communicator (not matched by
 * a posted receive)? */
int F(iprobe_bulk)(int src, int tag, int *found)
{
    return p_MPI_Iprobe(src, tag, bulk, found, MPI_STATUS_IGNORE);
}

/* Block until a message is waiting on the transport's communicator (any source, any
 * tag); it stays there for the next MPI_Iprobe. Called by a progress thread without the
 * transport's lock while other threads call the vendor: needs MPI_THREAD_MULTIPLE. It
 * touches no shim state (the request table belongs to the lock holder). */
int F(probe)(void)
{
    MPI_Status st;
    return p_MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, moves, &st);
}

/* Send an empty message to this process under `tag` without keeping the request (a
 * wake-up for a thread blocked in probe). Touches no shim state, as probe. */
int F(wake)(int self, int tag)
{
    MPI_Request r;
    int rc = p_MPI_Isend(no_bytes, 0, byte, self, tag, moves, &r);
    if (rc != MPI_SUCCESS)
        return rc;
    return p_MPI_Request_free(&r);
}

int F(recv)(void *buf, int len, int src, int tag)
{
    return p_MPI_Recv(NONEMPTY(buf, len), len, byte, src, tag, moves, MPI_STATUS_IGNORE);
}

int F(allgather)(const void *send, int len, void *recv)
{
    return p_MPI_Allgather(NONEMPTY(send, len), len, byte, NONEMPTY(recv, len), len, byte, world);
}

int F(allgatherv)(const void *send, int len, void *recv, const int *counts, const int *displs)
{
    return p_MPI_Allgatherv(NONEMPTY(send, len), len, byte, recv, counts, displs, byte, world);
}

int F(barrier)(void) { return p_MPI_Barrier(world); }

int F(abort)(int code) { return lib ? p_MPI_Abort(world, code) : SHIM_ENOTLOADED; }

/* Cancel the receives posted ahead (no message comes for them any more), complete what
 * is still outstanding (sends the peers have matched; receives of message tails), free the
 * persistent receives, then finalize the vendor. */
int F(finalize)(void)
{
    for (int i = 0; i < nreqs; i++)
        if (reqs[i] != req_null && posted_ahead[i])
            p_MPI_Cancel(&reqs[i]);
    for (int i = 0; i < nreqs; i++)
        if (reqs[i] != req_null)
            p_MPI_Wait(&reqs[i], MPI_STATUS_IGNORE);
    for (int i = 0; i < nreqs; i++)
        if (reqs[i] != req_null && persistent[i])
            p_MPI_Request_free(&reqs[i]);
    p_MPI_Comm_free(&moves);
    p_MPI_Comm_free(&bulk);
    return p_MPI_Finalize();
}

void F(error_string)(int code, char *buf, int len)
{
    if (code == SHIM_ENOTLOADED) {
        snprintf(buf, len, "the vendor library is not loaded");
        return;
    }
    if (code == SHIM_ENOMEM) {
        snprintf(buf, len, "out of memory for vendor requests");
        return;
    }
    if (code == SHIM_EBADREQ) {
        snprintf(buf, len, "no such vendor request");
        return;
    }
    char tmp[MPI_MAX_ERROR_STRING + 1];
    int n = 0;
    if (lib && p_MPI_Error_string(code, tmp, &n) == MPI_SUCCESS) {
        tmp[n < MPI_MAX_ERROR_STRING ? n : MPI_MAX_ERROR_STRING] = 0;
        snprintf(buf, len, "%s (vendor error %d)", tmp, code);
    } else {
        snprintf(buf, len, "vendor error %d", code);
    }
}

void F(library_version)(char *buf, int len)
{
    char tmp[MPI_MAX_LIBRARY_VERSION_STRING + 1];
    int n = 0;
    if (lib && p_MPI_Get_library_version(tmp, &n) == MPI_SUCCESS) {
        tmp[n < MPI_MAX_LIBRARY_VERSION_STRING ? n : MPI_MAX_LIBRARY_VERSION_STRING] = 0;
        snprintf(buf, len, "%s", tmp);
    } else {
        snprintf(buf, len, "?");
    }
}

/* Which vendor's header this copy was compiled against (a check for the Rust side). */
int F(abi_is_openmpi)(void)
{
#ifdef OPEN_MPI
    return 1;
#else
    return 0;
#endif
}
