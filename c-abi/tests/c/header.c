/* Header test, compiled as C11 and as C++17 with -Wall -Wextra -Werror, then run bare (a
 * singleton, no launcher): MPICH's values and MPI_Status layout, constants usable as
 * integer constant expressions, no MPICH/Open MPI identification macros. */
#include <mpi.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#if defined(MPICH) || defined(MPICH_NAME) || defined(MPICH_VERSION) || defined(OPEN_MPI)
#error "mpi.h must not claim to be MPICH or Open MPI"
#endif
#if MPI_VERSION != 4 || MPI_SUBVERSION != 1
#error "MPI 4.1 expected"
#endif

#ifdef __cplusplus
#define STATIC_ASSERT(c) static_assert(c, #c)
#else
#define STATIC_ASSERT(c) _Static_assert(c, #c)
#endif

STATIC_ASSERT(sizeof(MPI_Status) == 20);
STATIC_ASSERT(offsetof(MPI_Status, count_lo) == 0);
STATIC_ASSERT(offsetof(MPI_Status, count_hi_and_cancelled) == 4);
STATIC_ASSERT(offsetof(MPI_Status, MPI_SOURCE) == 8);
STATIC_ASSERT(offsetof(MPI_Status, MPI_TAG) == 12);
STATIC_ASSERT(offsetof(MPI_Status, MPI_ERROR) == 16);
STATIC_ASSERT(sizeof(MPI_Comm) == 4 && sizeof(MPI_Datatype) == 4 && sizeof(MPI_Request) == 4);
STATIC_ASSERT(sizeof(MPI_Aint) == 8 && sizeof(MPI_Count) == 8 && sizeof(MPI_Offset) == 8);
STATIC_ASSERT(MPI_COMM_WORLD == 0x44000000 && MPI_COMM_SELF == 0x44000001);
STATIC_ASSERT(MPI_COMM_NULL == 0x04000000 && MPI_REQUEST_NULL == 0x2c000000);
STATIC_ASSERT(MPI_INT == 0x4c000405 && MPI_DOUBLE == 0x4c00080b && MPI_CHAR == 0x4c000101);
STATIC_ASSERT(MPI_BYTE == 0x4c00010d && MPI_SUM == 0x58000003);
STATIC_ASSERT(MPI_ERRORS_ARE_FATAL == 0x54000000 && MPI_ERRORS_RETURN == 0x54000001);
STATIC_ASSERT(MPI_ANY_SOURCE == -2 && MPI_ANY_TAG == -1 && MPI_PROC_NULL == -1);
STATIC_ASSERT(MPI_ROOT == -3 && MPI_UNDEFINED == -32766);
STATIC_ASSERT(MPI_ERR_TRUNCATE == 14 && MPI_ERR_IN_STATUS == 17 && MPI_ERR_UNSUPPORTED_OPERATION == 44);
STATIC_ASSERT(MPI_TAG_UB == 0x64400001 && MPI_STATUS_SIZE == 5);

static int level_name(int l) {
    switch (l) { /* constants in case labels */
    case MPI_THREAD_SINGLE: return 0;
    case MPI_THREAD_FUNNELED: return 1;
    case MPI_THREAD_SERIALIZED: return 2;
    case MPI_THREAD_MULTIPLE: return 3;
    default: return -1;
    }
}

int main(int argc, char **argv) {
    char name[MPI_MAX_PROCESSOR_NAME];
    char err[MPI_MAX_ERROR_STRING];
    int size = -1, rank = -1, len, flag;
    (void)err;
    if (MPI_Init(&argc, &argv) != MPI_SUCCESS) return 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Get_processor_name(name, &len);
    /* Large counts in the status: count_lo and the high bits beside the cancelled flag. */
    MPI_Status st;
    memset(&st, 0, sizeof st);
    MPI_Status_set_cancelled(&st, 1);
    MPI_Status_set_elements_x(&st, MPI_BYTE, (MPI_Count)0x300000005L);
    MPI_Count c;
    MPI_Get_elements_x(&st, MPI_BYTE, &c);
    MPI_Test_cancelled(&st, &flag);
    int ok = c == 0x300000005L && st.count_lo == 5 && st.count_hi_and_cancelled == ((3 << 1) | 1) && flag == 1;
    /* Self messages work in a singleton. */
    int v = 42, w = 0;
    MPI_Sendrecv(&v, 1, MPI_INT, 0, 0, &w, 1, MPI_INT, 0, 0, MPI_COMM_SELF, MPI_STATUS_IGNORE);
    ok = ok && w == 42;
    MPI_Finalize();
    printf("size %d rank %d level %d status %s\n", size, rank, level_name(MPI_THREAD_FUNNELED), ok ? "ok" : "BAD");
    return ok && size == 1 && rank == 0 ? 0 : 1;
}
