! Fixed-form Fortran 77 with mpif.h: point-to-point, statuses, derived types,
! attributes, strings and an error handler that returns the error in ierror.
! Prints OK at rank 0 when every check held.
      PROGRAM P2P
      IMPLICIT NONE
      INCLUDE 'mpif.h'
      INTEGER IERR, RANK, NP, I, J, N, NEXT, PREV, IDX, CNT
      INTEGER STATUS(MPI_STATUS_SIZE), STATS(MPI_STATUS_SIZE, 4)
      INTEGER REQS(4), VTYPE, STYPE, RTYPE, CLS, RLEN, BL(2), TYPES(2)
      INTEGER(KIND=MPI_ADDRESS_KIND) TAGUB, DISP(2), A0, A1
      DOUBLE PRECISION D(10), E(10), T0
      INTEGER IBUF(4), JBUF(4)
      LOGICAL FLAG
      CHARACTER*(MPI_MAX_ERROR_STRING) ESTR
      CHARACTER*(MPI_MAX_OBJECT_NAME) CNAME
      CHARACTER*(MPI_MAX_LIBRARY_VERSION_STRING) VSTR
      CALL MPI_INIT(IERR)
      CALL CHECK(IERR .EQ. MPI_SUCCESS, 'init')
      CALL MPI_INITIALIZED(FLAG, IERR)
      CALL CHECK(FLAG, 'initialized is .TRUE.')
      CALL MPI_COMM_RANK(MPI_COMM_WORLD, RANK, IERR)
      CALL MPI_COMM_SIZE(MPI_COMM_WORLD, NP, IERR)
      NEXT = MOD(RANK + 1, NP)
      PREV = MOD(RANK + NP - 1, NP)
      T0 = MPI_WTIME()
! Blocking ring with a status: source, tag and count
      DO I = 1, 10
         D(I) = RANK * 100 + I
      END DO
      CALL MPI_SENDRECV(D, 10, MPI_DOUBLE_PRECISION, NEXT, 7,
     &     E, 10, MPI_DOUBLE_PRECISION, PREV, 7, MPI_COMM_WORLD,
     &     STATUS, IERR)
      CALL CHECK(STATUS(MPI_SOURCE) .EQ. PREV, 'status source')
      CALL CHECK(STATUS(MPI_TAG) .EQ. 7, 'status tag')
      CALL MPI_GET_COUNT(STATUS, MPI_DOUBLE_PRECISION, CNT, IERR)
      CALL CHECK(CNT .EQ. 10, 'get_count')
      CALL CHECK(E(3) .EQ. PREV * 100 + 3, 'sendrecv data')
! Non-blocking with MPI_STATUSES_IGNORE, then Waitany (1-based index)
      IBUF(1) = RANK
      CALL MPI_IRECV(JBUF, 1, MPI_INTEGER, PREV, 1, MPI_COMM_WORLD,
     &     REQS(1), IERR)
      CALL MPI_ISEND(IBUF, 1, MPI_INTEGER, NEXT, 1, MPI_COMM_WORLD,
     &     REQS(2), IERR)
      CALL MPI_WAITALL(2, REQS, MPI_STATUSES_IGNORE, IERR)
      CALL CHECK(JBUF(1) .EQ. PREV, 'isend/irecv')
      CALL CHECK(REQS(1) .EQ. MPI_REQUEST_NULL, 'request freed')
      REQS(1) = MPI_REQUEST_NULL
      CALL MPI_IRECV(JBUF(2), 1, MPI_INTEGER, PREV, 2,
     &     MPI_COMM_WORLD, REQS(2), IERR)
      CALL MPI_SEND(IBUF, 1, MPI_INTEGER, NEXT, 2, MPI_COMM_WORLD,
     &     IERR)
      CALL MPI_WAITANY(2, REQS, IDX, STATUS, IERR)
      CALL CHECK(IDX .EQ. 2, 'waitany index is 1-based')
      CALL MPI_WAITANY(2, REQS, IDX, MPI_STATUS_IGNORE, IERR)
      CALL CHECK(IDX .EQ. MPI_UNDEFINED, 'waitany none left')
! Probe, then receive what it announced
      CALL MPI_SEND(IBUF, 3, MPI_INTEGER, NEXT, 3, MPI_COMM_WORLD,
     &     IERR)
      CALL MPI_PROBE(PREV, 3, MPI_COMM_WORLD, STATUS, IERR)
      CALL MPI_GET_COUNT(STATUS, MPI_INTEGER, CNT, IERR)
      CALL CHECK(CNT .EQ. 3, 'probe count')
      CALL MPI_RECV(JBUF, CNT, MPI_INTEGER, STATUS(MPI_SOURCE),
     &     STATUS(MPI_TAG), MPI_COMM_WORLD, MPI_STATUS_IGNORE, IERR)
! Derived types: every other DOUBLE PRECISION of D
      CALL MPI_TYPE_VECTOR(5, 1, 2, MPI_DOUBLE_PRECISION, VTYPE, IERR)
      CALL MPI_TYPE_COMMIT(VTYPE, IERR)
      DO I = 1, 10
         E(I) = -1
      END DO
      CALL MPI_SENDRECV(D, 1, VTYPE, NEXT, 4, E, 5,
     &     MPI_DOUBLE_PRECISION, PREV, 4, MPI_COMM_WORLD,
     &     MPI_STATUS_IGNORE, IERR)
      DO I = 1, 5
         CALL CHECK(E(I) .EQ. PREV * 100 + 2 * I - 1, 'vector data')
      END DO
      CALL MPI_TYPE_FREE(VTYPE, IERR)
      CALL CHECK(VTYPE .EQ. MPI_DATATYPE_NULL, 'type_free')
! A struct of absolute addresses, sent from MPI_BOTTOM
      CALL MPI_GET_ADDRESS(IBUF(1), A0, IERR)
      CALL MPI_GET_ADDRESS(D(2), A1, IERR)
      DISP(1) = A0
      DISP(2) = A1
      BL(1) = 1
      BL(2) = 1
      TYPES(1) = MPI_INTEGER
      TYPES(2) = MPI_DOUBLE_PRECISION
      CALL MPI_TYPE_CREATE_STRUCT(2, BL, DISP, TYPES, STYPE, IERR)
      CALL MPI_TYPE_COMMIT(STYPE, IERR)
      CALL MPI_GET_ADDRESS(JBUF(1), DISP(1), IERR)
      CALL MPI_GET_ADDRESS(E(2), DISP(2), IERR)
      CALL MPI_TYPE_CREATE_STRUCT(2, BL, DISP, TYPES, RTYPE, IERR)
      CALL MPI_TYPE_COMMIT(RTYPE, IERR)
      IBUF(1) = 1000 + RANK
      D(2) = 0.5D0 + RANK
      CALL MPI_SENDRECV(MPI_BOTTOM, 1, STYPE, NEXT, 5, MPI_BOTTOM, 1,
     &     RTYPE, PREV, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE, IERR)
      CALL MPI_TYPE_FREE(STYPE, IERR)
      CALL MPI_TYPE_FREE(RTYPE, IERR)
      CALL CHECK(JBUF(1) .EQ. 1000 + PREV, 'struct int via MPI_BOTTOM')
      CALL CHECK(E(2) .EQ. 0.5D0 + PREV, 'struct real via MPI_BOTTOM')
! Attributes: the predefined MPI_TAG_UB
      CALL MPI_COMM_GET_ATTR(MPI_COMM_WORLD, MPI_TAG_UB, TAGUB, FLAG,
     &     IERR)
      CALL CHECK(FLAG .AND. TAGUB .GE. 32767, 'MPI_TAG_UB')
! Strings: a communicator name round trip
      CALL MPI_COMM_SET_NAME(MPI_COMM_WORLD, 'the world   ', IERR)
      CALL MPI_COMM_GET_NAME(MPI_COMM_WORLD, CNAME, RLEN, IERR)
      CALL CHECK(RLEN .EQ. 9 .AND. CNAME .EQ. 'the world',
     &     'comm name')
! Errors come back in IERR under MPI_ERRORS_RETURN
      CALL MPI_COMM_SET_ERRHANDLER(MPI_COMM_WORLD, MPI_ERRORS_RETURN,
     &     IERR)
      CALL MPI_SEND(IBUF, 1, MPI_INTEGER, NP + 5, 0, MPI_COMM_WORLD,
     &     IERR)
      CALL CHECK(IERR .NE. MPI_SUCCESS, 'bad rank fails')
      CALL MPI_ERROR_CLASS(IERR, CLS, J)
      CALL CHECK(CLS .EQ. MPI_ERR_RANK, 'MPI_ERR_RANK')
      CALL MPI_ERROR_STRING(IERR, ESTR, RLEN, J)
      CALL CHECK(RLEN .GT. 0 .AND. ESTR(RLEN+1:) .EQ. ' ',
     &     'error string blank padded')
      CALL MPI_BARRIER(MPI_COMM_WORLD, IERR)
      CALL CHECK(MPI_WTIME() .GE. T0, 'wtime')
! Which library ran: the drop-in test checks that it is Tsunagi
      CALL MPI_GET_LIBRARY_VERSION(VSTR, RLEN, IERR)
      CALL CHECK(RLEN .GT. 7, 'library version')
      IF (RANK .EQ. 0) PRINT '(A, A)', 'library ', VSTR(1:7)
      CALL MPI_FINALIZE(IERR)
      IF (RANK .EQ. 0) PRINT '(A)', 'OK'
      END

      SUBROUTINE CHECK(COND, WHAT)
      LOGICAL COND
      CHARACTER*(*) WHAT
      INTEGER IERR
      INCLUDE 'mpif.h'
      IF (.NOT. COND) THEN
         PRINT *, 'FAILED: ', WHAT
         CALL MPI_ABORT(MPI_COMM_WORLD, 1, IERR)
      END IF
      END
