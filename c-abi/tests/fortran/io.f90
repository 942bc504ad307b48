! Free-form Fortran 90 with `use mpi`: MPI-IO with INTEGER file handles (MPI_File_c2f's
! values), MPI_OFFSET_KIND offsets, a vector view, collective and independent access,
! file pointers and an error class. Prints OK at rank 0.
program io
  use mpi
  implicit none
  integer :: ierr, rank, np, fh, ftype, i, amode, cls
  integer :: status(MPI_STATUS_SIZE), cnt
  integer(kind=MPI_OFFSET_KIND) :: disp, sz, pos
  integer :: buf(100), back(100)
  character(len=256) :: fname

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, np, ierr)
  write (fname, '(A,I0,A)') '/tmp/tsunagi-fio-', getpid_of_root(), '.dat'

  call MPI_File_open(MPI_COMM_WORLD, '/no/such/dir/x', MPI_MODE_RDONLY, MPI_INFO_NULL, &
                     fh, ierr)
  call MPI_Error_class(ierr, cls, ierr)
  call check(cls == MPI_ERR_NO_SUCH_FILE, 'missing file class')

  amode = MPI_MODE_RDWR + MPI_MODE_CREATE + MPI_MODE_DELETE_ON_CLOSE
  call MPI_File_open(MPI_COMM_WORLD, fname, amode, MPI_INFO_NULL, fh, ierr)
  call check(ierr == MPI_SUCCESS .and. fh /= MPI_FILE_NULL, 'open')
  ! Rank r owns every np-th integer: a resized contiguous type as filetype.
  call MPI_Type_create_resized(MPI_INTEGER, 0_MPI_ADDRESS_KIND, &
                               int(4 * np, MPI_ADDRESS_KIND), ftype, ierr)
  call MPI_Type_commit(ftype, ierr)
  disp = 4 * rank
  call MPI_File_set_view(fh, disp, MPI_INTEGER, ftype, 'native', MPI_INFO_NULL, ierr)
  call check(ierr == MPI_SUCCESS, 'set_view')
  do i = 1, 100
    buf(i) = rank + np * (i - 1)
  end do
  call MPI_File_write_all(fh, buf, 100, MPI_INTEGER, status, ierr)
  call check(ierr == MPI_SUCCESS, 'write_all')
  call MPI_Get_count(status, MPI_INTEGER, cnt, ierr)
  call check(cnt == 100, 'count')
  call MPI_File_get_position(fh, pos, ierr)
  call check(pos == 100, 'position')
  call MPI_File_seek(fh, 0_MPI_OFFSET_KIND, MPI_SEEK_SET, ierr)
  back = -1
  call MPI_File_read_all(fh, back, 100, MPI_INTEGER, status, ierr)
  call check(all(back == buf), 'read back')
  call MPI_File_get_size(fh, sz, ierr)
  call check(sz == 400 * np, 'size')
  call MPI_File_close(fh, ierr)
  call check(ierr == MPI_SUCCESS .and. fh == MPI_FILE_NULL, 'close')
  call MPI_Type_free(ftype, ierr)
  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  if (rank == 0) print '(A)', 'OK'
  call MPI_Finalize(ierr)

contains

  subroutine check(ok, what)
    logical, intent(in) :: ok
    character(len=*), intent(in) :: what
    integer :: e
    if (.not. ok) then
      print '(A,A)', 'check failed: ', what
      call MPI_Abort(MPI_COMM_WORLD, 1, e)
    end if
  end subroutine check

  ! A per-run number every rank agrees on (rank 0's process id).
  integer function getpid_of_root()
    integer :: p, e
    interface
      integer(c_int) function getpid() bind(c, name='getpid')
        use iso_c_binding, only: c_int
      end function getpid
    end interface
    p = getpid()
    call MPI_Bcast(p, 1, MPI_INTEGER, 0, MPI_COMM_WORLD, e)
    getpid_of_root = p
  end function getpid_of_root
end program io
