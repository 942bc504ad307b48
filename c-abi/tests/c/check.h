/* Tiny assertion helpers shared by the C tests. */
#ifndef CHECK_H
#define CHECK_H
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond)                                                                    \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);   \
            MPI_Abort(MPI_COMM_WORLD, 1);                                              \
        }                                                                              \
    } while (0)
#define CHECK_EQ(a, b)                                                                 \
    do {                                                                               \
        long long _a = (long long)(a), _b = (long long)(b);                            \
        if (_a != _b) {                                                                \
            fprintf(stderr, "%s:%d: %s = %lld, expected %s = %lld\n", __FILE__,        \
                    __LINE__, #a, _a, #b, _b);                                         \
            MPI_Abort(MPI_COMM_WORLD, 1);                                              \
        }                                                                              \
    } while (0)
#define OK(call) CHECK_EQ((call), MPI_SUCCESS)
#endif
