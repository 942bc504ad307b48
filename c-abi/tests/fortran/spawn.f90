! Dynamic processes from Fortran with `use mpi`: MPI_Comm_spawn with a CHARACTER argv
! ended by a blank entry and with MPI_ARGV_NULL, MPI_Comm_spawn_multiple with a 2-D
! CHARACTER array_of_argv and MPI_ERRCODES_IGNORE; the children check their arguments and
! MPI_APPNUM, and parent and children talk over the intercommunicator. The parents' rank 0
! prints OK.
program spawn
  use mpi
  implicit none
  integer :: rank, np, ierr, parent, ic, i, n, x, nargs
  integer :: errcodes(2), procs(2), infos(2), st(MPI_STATUS_SIZE)
  character(len=16) :: args(3), argvs(2, 3), mode, which
  character(len=512) :: self, cmds(2)
  integer(kind=MPI_ADDRESS_KIND) :: appnum
  logical :: found

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, np, ierr)
  call MPI_Comm_get_parent(parent, ierr)
  nargs = command_argument_count()

  if (parent /= MPI_COMM_NULL) then
    ! A child: which spawn made us is in our arguments.
    mode = ''
    which = ''
    if (nargs >= 1) call get_command_argument(1, mode)
    if (nargs >= 2) call get_command_argument(2, which)
    call MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_APPNUM, appnum, found, ierr)
    call check(found, 'MPI_APPNUM is set')
    if (mode == 'child') then
      call check(nargs == 2 .and. which == 'a b', 'argv of MPI_Comm_spawn')
      call check(appnum == 0, 'appnum of MPI_Comm_spawn')
    else if (mode == 'multi') then
      call check(nargs == 2, 'argv of MPI_Comm_spawn_multiple')
      read (which, *) n
      call check(n == merge(0, 1, rank == 0), 'app of this rank')
      call check(appnum == n, 'appnum of MPI_Comm_spawn_multiple')
    else
      call check(nargs == 0, 'MPI_ARGV_NULL gives no arguments')
      call check(appnum == 0, 'appnum with MPI_ARGV_NULL')
    end if
    ! Receive from the parents' root, answer with our rank added.
    call MPI_Recv(x, 1, MPI_INTEGER, 0, 5, parent, st, ierr)
    call check(ierr == MPI_SUCCESS, 'recv from the parent')
    call MPI_Send(x + rank, 1, MPI_INTEGER, 0, 6, parent, ierr)
    call MPI_Comm_disconnect(parent, ierr)
    call check(parent == MPI_COMM_NULL, 'disconnect')
    call MPI_Finalize(ierr)
    stop
  end if

  call get_command_argument(0, self)
  call MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN, ierr)

  ! MPI_Comm_spawn: two children, argv 'child' 'a b' ended by a blank entry.
  args(1) = 'child'
  args(2) = 'a b'
  args(3) = ' '
  errcodes = -1
  call MPI_Comm_spawn(self, args, 2, MPI_INFO_NULL, 0, MPI_COMM_WORLD, ic, errcodes, ierr)
  call check(ierr == MPI_SUCCESS, 'MPI_Comm_spawn')
  call check(all(errcodes == MPI_SUCCESS), 'spawn errcodes')
  call talk(ic, 2, 100)

  ! MPI_Comm_spawn_multiple: app 0 one rank, app 1 two; array_of_argv(i, j) is argument j
  ! of command i.
  cmds = self
  argvs(1, :) = [character(len=16) :: 'multi', '0', ' ']
  argvs(2, :) = [character(len=16) :: 'multi', '1', ' ']
  procs = [1, 2]
  infos = MPI_INFO_NULL
  call MPI_Comm_spawn_multiple(2, cmds, argvs, procs, infos, 0, MPI_COMM_WORLD, ic, &
                               MPI_ERRCODES_IGNORE, ierr)
  call check(ierr == MPI_SUCCESS, 'MPI_Comm_spawn_multiple')
  call talk(ic, 3, 200)

  ! MPI_ARGV_NULL.
  call MPI_Comm_spawn(self, MPI_ARGV_NULL, 1, MPI_INFO_NULL, 0, MPI_COMM_WORLD, ic, &
                      MPI_ERRCODES_IGNORE, ierr)
  call check(ierr == MPI_SUCCESS, 'MPI_Comm_spawn with MPI_ARGV_NULL')
  call talk(ic, 1, 300)

  call MPI_Finalize(ierr)
  if (rank == 0) print '(a)', 'OK'

contains

  ! The parents' root sends base + i to child i and expects base + 2 * i back.
  subroutine talk(ic, nchildren, base)
    integer, intent(inout) :: ic
    integer, intent(in) :: nchildren, base
    integer :: remote, i, y, ierr, st(MPI_STATUS_SIZE)
    call MPI_Comm_remote_size(ic, remote, ierr)
    call check(remote == nchildren, 'remote size')
    if (rank == 0) then
      do i = 0, nchildren - 1
        call MPI_Send(base + i, 1, MPI_INTEGER, i, 5, ic, ierr)
      end do
      do i = 0, nchildren - 1
        call MPI_Recv(y, 1, MPI_INTEGER, i, 6, ic, st, ierr)
        call check(y == base + 2 * i, 'answer of a child')
      end do
    end if
    call MPI_Comm_disconnect(ic, ierr)
    call check(ic == MPI_COMM_NULL, 'disconnect at the parent')
  end subroutine talk

  subroutine check(cond, what)
    logical, intent(in) :: cond
    character(len=*), intent(in) :: what
    integer :: ierr
    if (.not. cond) then
      print '(a, a)', 'check failed: ', what
      call MPI_Abort(MPI_COMM_WORLD, 1, ierr)
    end if
  end subroutine check
end program spawn
