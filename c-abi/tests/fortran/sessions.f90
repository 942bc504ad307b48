! Sessions from Fortran with `use mpi_f08`: MPI_Session_init, the process sets and their
! info, a group and a communicator from mpi://WORLD, a collective on it, the session's
! error handler and its buffer for buffered sends (MPI 4.1: too small a session buffer
! fails with MPI_ERR_BUFFER), MPI_BUFFER_AUTOMATIC on the communicator, the world model beside it in the same process,
! MPI_Session_finalize. Prints OK at rank 0.
program sessions
  use mpi_f08
  implicit none
  type(MPI_Session) :: s
  type(MPI_Group) :: g
  type(MPI_Comm) :: c
  type(MPI_Info) :: info
  type(MPI_Errhandler) :: eh
  integer :: n, i, ierr, cls, rank, np, total, plen, x, y, one
  character(len=32) :: name
  character(len=MPI_MAX_INFO_VAL) :: val
  logical :: flag, have_world
  integer(kind=1) :: sbuf(64 + MPI_BSEND_OVERHEAD)
  integer :: big(100)
  type(MPI_Status) :: st

  call MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, s, ierr)
  call check(ierr == MPI_SUCCESS, 'MPI_Session_init')
  call check(s /= MPI_SESSION_NULL, 'a session handle')
  call MPI_Session_get_num_psets(s, MPI_INFO_NULL, n)
  call check(n >= 2, 'two process sets at least')
  have_world = .false.
  do i = 0, n - 1
    plen = 0
    call MPI_Session_get_nth_pset(s, MPI_INFO_NULL, i, plen, name)
    call check(plen > 0, 'a pset name length')
    plen = len(name)
    call MPI_Session_get_nth_pset(s, MPI_INFO_NULL, i, plen, name)
    if (name == 'mpi://WORLD') have_world = .true.
  end do
  call check(have_world, 'mpi://WORLD is a process set')
  call MPI_Session_get_pset_info(s, 'mpi://WORLD', info)
  call MPI_Info_get(info, 'mpi_size', MPI_MAX_INFO_VAL, val, flag)
  call check(flag, 'mpi_size is set')
  read (val, *) np
  call MPI_Info_free(info)

  call MPI_Group_from_session_pset(s, 'mpi://WORLD', g)
  call MPI_Comm_create_from_group(g, 'tsunagi.test.fortran', MPI_INFO_NULL, &
                                  MPI_ERRORS_RETURN, c)
  call MPI_Group_free(g)
  call MPI_Comm_rank(c, rank)
  call MPI_Comm_size(c, n)
  call check(n == np, 'the communicator has every process')
  one = rank + 1
  call MPI_Allreduce(one, total, 1, MPI_INTEGER, MPI_SUM, c)
  call check(total == np * (np + 1) / 2, 'allreduce on the session communicator')

  ! The session's error handler answers for a bad process set.
  call MPI_Session_get_errhandler(s, eh)
  call check(eh == MPI_ERRORS_RETURN, 'the session error handler')
  call MPI_Errhandler_free(eh)
  call MPI_Group_from_session_pset(s, 'mpi://NOWHERE', g, ierr)
  call MPI_Error_class(ierr, cls)
  call check(cls == MPI_ERR_ARG, 'an unknown process set')

  ! The session's buffer serves buffered sends on its communicators.
  call MPI_Session_attach_buffer(s, sbuf, size(sbuf))
  if (np >= 2) then
    if (rank == 0) then
      call MPI_Bsend(big, 100, MPI_INTEGER, 1, 7, c, ierr)
      call MPI_Error_class(ierr, cls)
      call check(cls == MPI_ERR_BUFFER, 'a message larger than the session buffer')
      x = 42
      call MPI_Bsend(x, 1, MPI_INTEGER, 1, 8, c, ierr)
      call check(ierr == MPI_SUCCESS, 'a message that fits the session buffer')
      call MPI_Session_flush_buffer(s)
    else if (rank == 1) then
      call MPI_Recv(y, 1, MPI_INTEGER, 0, 8, c, st)
      call check(y == 42, 'the buffered message')
    end if
  end if
  call MPI_Session_detach_buffer(s, sbuf, n)
  call check(n == size(sbuf), 'detach gives the size back')

  ! MPI_BUFFER_AUTOMATIC on the communicator: no size limit.
  call MPI_Comm_attach_buffer(c, MPI_BUFFER_AUTOMATIC, 0)
  if (np >= 2) then
    if (rank == 0) then
      big = 9
      call MPI_Bsend(big, 100, MPI_INTEGER, 1, 9, c, ierr)
      call check(ierr == MPI_SUCCESS, 'a large message through MPI_BUFFER_AUTOMATIC')
    else if (rank == 1) then
      call MPI_Recv(big, 100, MPI_INTEGER, 0, 9, c, st)
      call check(all(big == 9), 'the automatic-buffered message')
    end if
  end if
  call MPI_Comm_detach_buffer(c, sbuf, n)
  call check(n == 0, 'an automatic buffer detaches with size 0')
  call MPI_Comm_free(c)

  ! The world model beside the session (one runtime: the last finalize ends it).
  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Barrier(MPI_COMM_WORLD)
  call MPI_Session_finalize(s)
  call check(s == MPI_SESSION_NULL, 'finalize sets MPI_SESSION_NULL')
  call MPI_Finalize()
  if (rank == 0) print '(a)', 'OK'

contains

  subroutine check(cond, what)
    logical, intent(in) :: cond
    character(len=*), intent(in) :: what
    if (.not. cond) then
      print '(a, a)', 'check failed: ', what
      call MPI_Abort(MPI_COMM_WORLD, 1)
    end if
  end subroutine check
end program sessions
