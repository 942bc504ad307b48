/* The drop-in program: built once with Debian's mpicc.mpich, it must print the same lines
 * on MPICH and on Tsunagi (LD_LIBRARY_PATH pointing at Tsunagi's lib/). Only rank 0
 * prints; everything printed is defined by the MPI standard (no error strings, no names). */
#include <mpi.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    int rank, size, v, sv;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Get_version(&v, &sv);
    if (rank == 0) printf("size %d status %zu\n", size, sizeof(MPI_Status));
    if (argc > 1 && rank == 0) { /* which library: the test checks that it is Tsunagi */
        static char lib[MPI_MAX_LIBRARY_VERSION_STRING];
        int len;
        MPI_Get_library_version(lib, &len);
        printf("library %.7s\n", lib);
    }

    /* Ring of rank numbers with a vector type on the send side. */
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    int src[8], got[4] = {0, 0, 0, 0};
    for (int i = 0; i < 8; i++) src[i] = rank * 100 + i;
    MPI_Datatype vec;
    MPI_Type_vector(2, 2, 4, MPI_INT, &vec);
    MPI_Type_commit(&vec);
    MPI_Status st;
    st.MPI_ERROR = 12345; /* single-completion calls leave MPI_ERROR alone */
    MPI_Sendrecv(src, 1, vec, next, 5, got, 4, MPI_INT, prev, 5, MPI_COMM_WORLD, &st);
    int count;
    MPI_Get_count(&st, MPI_INT, &count);
    int line[8] = {got[0], got[1], got[2], got[3], st.MPI_SOURCE, st.MPI_TAG, count, st.MPI_ERROR};
    int all[8 * 64];
    if (rank == 0) {
        memcpy(all, line, sizeof line);
        for (int r = 1; r < size; r++)
            MPI_Recv(all + 8 * r, 8, MPI_INT, r, 6, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        for (int r = 0; r < size; r++)
            printf("rank %d got %d %d %d %d from %d tag %d count %d error field %d\n", r, all[8 * r],
                   all[8 * r + 1], all[8 * r + 2], all[8 * r + 3], all[8 * r + 4], all[8 * r + 5],
                   all[8 * r + 6], all[8 * r + 7]);
    } else {
        MPI_Send(line, 8, MPI_INT, 0, 6, MPI_COMM_WORLD);
    }

    /* Derived-type queries. */
    struct { double d; int i; char c; } s;
    int bl[3] = {1, 1, 1};
    MPI_Aint disp[3] = {0, (char *)&s.i - (char *)&s, (char *)&s.c - (char *)&s}, lb, ext;
    MPI_Datatype types[3] = {MPI_DOUBLE, MPI_INT, MPI_CHAR}, str;
    MPI_Type_create_struct(3, bl, disp, types, &str);
    int tsize, ni, na, nd, comb;
    MPI_Type_size(str, &tsize);
    MPI_Type_get_extent(str, &lb, &ext);
    MPI_Type_get_envelope(str, &ni, &na, &nd, &comb);
    if (rank == 0) printf("struct size %d lb %ld extent %ld envelope %d %d %d %d\n", tsize, (long)lb, (long)ext, ni, na, nd, comb);
    MPI_Type_get_extent(MPI_DOUBLE_INT, &lb, &ext);
    MPI_Type_size(MPI_SHORT_INT, &tsize);
    if (rank == 0) printf("double_int extent %ld short_int size %d\n", (long)ext, tsize);

    /* Pack / unpack. */
    int pos = 0, packed[4];
    MPI_Pack(src, 1, vec, packed, sizeof packed, &pos, MPI_COMM_WORLD);
    if (rank == 0) printf("packed %d: %d %d %d %d\n", pos, packed[0], packed[1], packed[2], packed[3]);

    /* Errors returned. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int cls, rc = MPI_Send(&rank, 1, MPI_INT, size + 1, 0, MPI_COMM_WORLD);
    MPI_Error_class(rc, &cls);
    if (rank == 0) printf("bad rank class %d\n", cls);

    /* Split, groups, attributes. */
    MPI_Comm half;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &half);
    int hr, hs;
    MPI_Comm_rank(half, &hr);
    MPI_Comm_size(half, &hs);
    MPI_Group wg, hg;
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    MPI_Comm_group(half, &hg);
    int zero = 0, tr;
    MPI_Group_translate_ranks(hg, 1, &zero, wg, &tr);
    if (rank == 0) printf("half rank %d size %d; its rank 0 is world rank %d\n", hr, hs, tr);
    int *ub, flag;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
    if (rank == 0) printf("tag_ub flag %d at least 32767: %d\n", flag, *ub >= 32767);
    MPI_Group_free(&hg);
    MPI_Group_free(&wg);
    MPI_Comm_free(&half);
    MPI_Type_free(&str);
    MPI_Type_free(&vec);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
