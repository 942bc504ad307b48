! Free-form Fortran 2008 with `use mpi_f08`: TYPE(MPI_Comm) and friends, TYPE(MPI_Status),
! optional ierror, non-blocking calls, a derived type, info strings, communicators and an
! error handler returning the error, external32 packing. Prints OK at rank 0.
program f08
  use mpi_f08
  implicit none
  integer :: rank, np, next, prev, ierr, cls, n, i, slen
  type(MPI_Status) :: st
  type(MPI_Request) :: reqs(2)
  type(MPI_Comm) :: half, dup
  type(MPI_Datatype) :: col
  type(MPI_Info) :: info
  double precision :: a(4, 3), b(4)
  integer :: sendv, recvv
  logical :: flag
  character(len=MPI_MAX_INFO_VAL) :: val
  character(len=MPI_MAX_PROCESSOR_NAME) :: host
  character(len=MPI_MAX_ERROR_STRING) :: msg
  integer(kind=MPI_ADDRESS_KIND) :: asz, apos
  integer(kind=1) :: ext(16)
  integer :: iback(2)

  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, np, ierr)
  call check(ierr == MPI_SUCCESS, 'ierror present')
  next = mod(rank + 1, np)
  prev = mod(rank + np - 1, np)

  ! Point-to-point with a status object
  sendv = rank * 3
  call MPI_Sendrecv(sendv, 1, MPI_INTEGER, next, 11, recvv, 1, MPI_INTEGER, prev, 11, &
                    MPI_COMM_WORLD, st)
  call check(recvv == prev * 3, 'sendrecv')
  call check(st%MPI_SOURCE == prev .and. st%MPI_TAG == 11, 'status fields')
  call MPI_Get_count(st, MPI_INTEGER, n)
  call check(n == 1, 'get_count')

  ! Non-blocking, statuses ignored
  call MPI_Irecv(recvv, 1, MPI_INTEGER, MPI_ANY_SOURCE, 12, MPI_COMM_WORLD, reqs(1))
  call MPI_Isend(sendv, 1, MPI_INTEGER, next, 12, MPI_COMM_WORLD, reqs(2))
  call MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE)
  call check(recvv == prev * 3, 'isend/irecv')
  call check(reqs(1) == MPI_REQUEST_NULL, 'request freed')
  call MPI_Test(reqs(1), flag, MPI_STATUS_IGNORE)
  call check(flag, 'test on a null request')

  ! A row of a column-major matrix as a vector type
  a = reshape([(dble(i + 100 * rank), i = 1, 12)], [4, 3])
  call MPI_Type_vector(3, 1, 4, MPI_DOUBLE_PRECISION, col)
  call MPI_Type_commit(col)
  b = -1
  call MPI_Sendrecv(a(2, 1), 1, col, next, 13, b, 3, MPI_DOUBLE_PRECISION, prev, 13, &
                    MPI_COMM_WORLD, MPI_STATUS_IGNORE)
  call check(all(b(1:3) == [2, 6, 10] + 100d0 * prev) .and. b(4) == -1, 'vector row')
  call MPI_Type_free(col)
  call check(col == MPI_DATATYPE_NULL, 'type_free')

  ! Collective with MPI_IN_PLACE and a Fortran type
  n = rank + 1
  call MPI_Allreduce(MPI_IN_PLACE, n, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD)
  call check(n == np * (np + 1) / 2, 'allreduce in place')

  ! Communicators
  call MPI_Comm_split(MPI_COMM_WORLD, rank / 2, rank, half)
  call MPI_Comm_dup(half, dup)
  call MPI_Comm_compare(half, dup, n)
  call check(n == MPI_CONGRUENT, 'congruent')
  call check(half /= MPI_COMM_NULL .and. .not. (half == dup), 'handle comparison')
  call MPI_Comm_free(dup)
  call MPI_Comm_free(half)
  call check(half == MPI_COMM_NULL, 'comm_free')

  ! Strings in and out
  call MPI_Info_create(info)
  call MPI_Info_set(info, 'colour', 'blue  ')
  call MPI_Info_get(info, 'colour', MPI_MAX_INFO_VAL, val, flag)
  call check(flag .and. val == 'blue', 'info value')
  call MPI_Info_get(info, 'shape', MPI_MAX_INFO_VAL, val, flag)
  call check(.not. flag, 'missing info key')
  call MPI_Info_free(info)
  call MPI_Get_processor_name(host, slen)
  call check(slen > 0 .and. len_trim(host) == slen, 'processor name')

  ! external32: big-endian integers; the datarep may be blank padded
  call MPI_Pack_external_size('external32', 2, MPI_INTEGER, asz)
  call check(asz == 8, 'pack_external_size')
  ext = 0
  apos = 0
  call MPI_Pack_external('external32', [1, -2], 2, MPI_INTEGER, ext, 16_MPI_ADDRESS_KIND, apos)
  call check(apos == 8 .and. all(ext(1:8) == int([0, 0, 0, 1, -1, -1, -1, -2], 1)), &
             'pack_external bytes')
  apos = 0
  iback = 0
  call MPI_Unpack_external('external32  ', ext, 8_MPI_ADDRESS_KIND, apos, iback, 2, MPI_INTEGER)
  call check(apos == 8 .and. all(iback == [1, -2]), 'unpack_external')

  ! Errors returned in ierror
  call MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN)
  call MPI_Send(sendv, -1, MPI_INTEGER, next, 0, MPI_COMM_WORLD, ierr)
  call check(ierr /= MPI_SUCCESS, 'negative count fails')
  call MPI_Error_class(ierr, cls)
  call check(cls == MPI_ERR_COUNT, 'MPI_ERR_COUNT')
  call MPI_Error_string(ierr, msg, slen)
  call check(slen > 0 .and. len_trim(msg) == slen, 'error string')

  call check(MPI_Wtime() > 0d0, 'wtime')
  call MPI_Finalize()
  if (rank == 0) print '(A)', 'OK'

contains

  subroutine check(cond, what)
    logical, intent(in) :: cond
    character(len=*), intent(in) :: what
    if (.not. cond) then
      print *, 'FAILED: ', what
      call MPI_Abort(MPI_COMM_WORLD, 1)
    end if
  end subroutine check

end program f08
