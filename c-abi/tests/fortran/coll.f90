! Free-form Fortran 90 with `use mpi`: collectives on Fortran types with their
! reduction ops, MPI_IN_PLACE, communicators, a Cartesian topology with LOGICAL
! periods, and a user-defined op written in Fortran. Prints OK at rank 0.
program coll
  use mpi
  implicit none
  integer :: ierr, rank, np, i, color, sub, subrank, subsize, cart, src, dst
  integer :: dims(2), coords(2), myop, res, dup, ival(2), iout(2)
  logical :: periods(2), l, lout
  real :: r, rout
  double precision :: d(3), dout(3), dpair(2), dpout(2)
  complex :: c, cout
  double complex :: z, zout
  integer(kind=8) :: i8, i8out
  real(kind=8) :: r8, r8out
  integer, allocatable :: gathered(:), scattered(:), a2a_in(:), a2a_out(:)
  character(len=MPI_MAX_OBJECT_NAME) :: name
  integer :: namelen
  integer :: key, key2, ncopy, ndelete
  integer(kind=MPI_ADDRESS_KIND) :: extra, aval
  integer :: greq, gstatus(MPI_STATUS_SIZE), gseen(3)
  integer(kind=MPI_ADDRESS_KIND) :: gextra
  common /greqseen/ gseen
  external :: greq_query, greq_free, greq_cancel
  common /attrseen/ ncopy, ndelete
  external :: add_plus_one, copy_plus_extra, count_delete

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, np, ierr)

  ! Reductions on every Fortran type
  r = rank + 1.0
  call MPI_Allreduce(r, rout, 1, MPI_REAL, MPI_SUM, MPI_COMM_WORLD, ierr)
  call check(rout == np * (np + 1) / 2.0, 'REAL sum')
  d = [dble(rank), -dble(rank), 2.0d0]
  call MPI_Allreduce(d, dout, 3, MPI_DOUBLE_PRECISION, MPI_MAX, MPI_COMM_WORLD, ierr)
  call check(dout(1) == np - 1 .and. dout(2) == 0 .and. dout(3) == 2, 'DOUBLE PRECISION max')
  c = cmplx(rank, 1.0)
  call MPI_Allreduce(c, cout, 1, MPI_COMPLEX, MPI_SUM, MPI_COMM_WORLD, ierr)
  call check(cout == cmplx(np * (np - 1) / 2, np), 'COMPLEX sum')
  z = dcmplx(0.0d0, 1.0d0)
  call MPI_Allreduce(z, zout, 1, MPI_DOUBLE_COMPLEX, MPI_PROD, MPI_COMM_WORLD, ierr)
  call check(zout == dcmplx(0.0d0, 1.0d0)**np, 'DOUBLE COMPLEX prod')
  l = rank == 0
  call MPI_Allreduce(l, lout, 1, MPI_LOGICAL, MPI_LOR, MPI_COMM_WORLD, ierr)
  call check(lout, 'LOGICAL lor')
  call MPI_Allreduce(l, lout, 1, MPI_LOGICAL, MPI_LAND, MPI_COMM_WORLD, ierr)
  call check(lout .eqv. (np == 1), 'LOGICAL land')
  i8 = 2_8**40 + rank
  call MPI_Allreduce(i8, i8out, 1, MPI_INTEGER8, MPI_MIN, MPI_COMM_WORLD, ierr)
  call check(i8out == 2_8**40, 'INTEGER8 min')
  r8 = 0.25d0
  call MPI_Reduce(r8, r8out, 1, MPI_REAL8, MPI_SUM, 0, MPI_COMM_WORLD, ierr)
  if (rank == 0) call check(r8out == 0.25d0 * np, 'REAL8 reduce')
  ival = [10 - rank, rank]
  call MPI_Allreduce(ival, iout, 1, MPI_2INTEGER, MPI_MINLOC, MPI_COMM_WORLD, ierr)
  call check(iout(1) == 11 - np .and. iout(2) == np - 1, '2INTEGER minloc')
  dpair = [dble(rank * rank), dble(rank)]
  call MPI_Allreduce(dpair, dpout, 1, MPI_2DOUBLE_PRECISION, MPI_MAXLOC, MPI_COMM_WORLD, ierr)
  call check(dpout(1) == (np - 1)**2 .and. dpout(2) == np - 1, '2DOUBLE_PRECISION maxloc')
  ! MPI_IN_PLACE
  res = rank
  call MPI_Allreduce(MPI_IN_PLACE, res, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  call check(res == np * (np - 1) / 2, 'MPI_IN_PLACE')
  ! A user-defined op in Fortran (commutative LOGICAL argument)
  call MPI_Op_create(add_plus_one, .true., myop, ierr)
  res = 1
  call MPI_Allreduce(MPI_IN_PLACE, res, 1, MPI_INTEGER, myop, MPI_COMM_WORLD, ierr)
  call check(res == 2 * np - 1, 'user op')
  call MPI_Op_free(myop, ierr)

  ! Data movement
  allocate(gathered(np), scattered(np), a2a_in(np), a2a_out(np))
  i = rank * 7
  call MPI_Bcast(i, 1, MPI_INTEGER, np - 1, MPI_COMM_WORLD, ierr)
  call check(i == (np - 1) * 7, 'bcast')
  call MPI_Gather(rank, 1, MPI_INTEGER, gathered, 1, MPI_INTEGER, 0, MPI_COMM_WORLD, ierr)
  if (rank == 0) call check(all(gathered == [(i, i = 0, np - 1)]), 'gather')
  scattered = [(i * i, i = 0, np - 1)]
  call MPI_Scatter(scattered, 1, MPI_INTEGER, i, 1, MPI_INTEGER, 0, MPI_COMM_WORLD, ierr)
  call check(i == rank * rank, 'scatter')
  call MPI_Allgather(rank, 1, MPI_INTEGER, gathered, 1, MPI_INTEGER, MPI_COMM_WORLD, ierr)
  call check(all(gathered == [(i, i = 0, np - 1)]), 'allgather')
  a2a_in = [(rank * 100 + i, i = 0, np - 1)]
  call MPI_Alltoall(a2a_in, 1, MPI_INTEGER, a2a_out, 1, MPI_INTEGER, MPI_COMM_WORLD, ierr)
  call check(all(a2a_out == [(i * 100 + rank, i = 0, np - 1)]), 'alltoall')

  ! Communicators
  color = mod(rank, 2)
  call MPI_Comm_split(MPI_COMM_WORLD, color, -rank, sub, ierr)
  call MPI_Comm_rank(sub, subrank, ierr)
  call MPI_Comm_size(sub, subsize, ierr)
  call check(subsize == (np + 1 - color) / 2, 'split size')
  call check(subrank == subsize - 1 - rank / 2, 'split key order')
  call MPI_Comm_dup(sub, dup, ierr)
  call MPI_Comm_compare(sub, dup, res, ierr)
  call check(res == MPI_CONGRUENT, 'dup is congruent')
  call MPI_Comm_set_name(dup, 'sub-dup', ierr)
  call MPI_Comm_get_name(dup, name, namelen, ierr)
  call check(name == 'sub-dup' .and. namelen == 7, 'comm name')
  ! Attribute callbacks written in Fortran, and the predefined MPI_COMM_DUP_FN (not
  ! with MPICH's own Fortran layer over our C library: it calls MPICH internals for them)
  call get_environment_variable('TSUNAGI_TEST_NO_KEYVALS', status=i)
  if (i == 0) goto 10
  ncopy = 0
  ndelete = 0
  extra = 5
  call MPI_Comm_create_keyval(copy_plus_extra, count_delete, key, extra, ierr)
  call MPI_Comm_create_keyval(MPI_COMM_DUP_FN, MPI_COMM_NULL_DELETE_FN, key2, extra, ierr)
  aval = 42
  call MPI_Comm_set_attr(dup, key, aval, ierr)
  aval = 7
  call MPI_Comm_set_attr(dup, key2, aval, ierr)
  call MPI_Comm_dup(dup, cart, ierr)
  call check(ncopy == 1, 'Fortran copy callback called')
  call MPI_Comm_get_attr(cart, key, aval, l, ierr)
  call check(l .and. aval == 47, 'copied attribute value')
  call MPI_Comm_get_attr(cart, key2, aval, l, ierr)
  call check(l .and. aval == 7, 'MPI_COMM_DUP_FN')
  call MPI_Comm_free(cart, ierr)
  call check(ndelete == 1, 'Fortran delete callback called')
  call MPI_Comm_delete_attr(dup, key, ierr)
  call check(ndelete == 2, 'delete callback on delete_attr')
  call MPI_Comm_free_keyval(key, ierr)
  call MPI_Comm_free_keyval(key2, ierr)
10 continue
  call MPI_Comm_free(dup, ierr)
  call check(dup == MPI_COMM_NULL, 'comm_free')
  call MPI_Comm_free(sub, ierr)

  ! A periodic ring as a Cartesian topology
  dims = 0
  call MPI_Dims_create(np, 1, dims, ierr)
  periods = .true.
  call MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, .false., cart, ierr)
  call MPI_Cart_shift(cart, 0, 1, src, dst, ierr)
  call check(dst == mod(rank + 1, np) .and. src == mod(rank + np - 1, np), 'cart_shift')
  call MPI_Cart_get(cart, 1, dims, periods, coords, ierr)
  call check(periods(1) .and. coords(1) == rank, 'cart_get')
  call MPI_Comm_free(cart, ierr)

  ! A generalized request with Fortran query, free and cancel procedures
  gseen = 0
  gextra = 7
  call MPI_Grequest_start(greq_query, greq_free, greq_cancel, gextra, greq, ierr)
  call MPI_Cancel(greq, ierr)
  call check(gseen(3) == 1, 'grequest cancel')
  call MPI_Grequest_complete(greq, ierr)
  call MPI_Wait(greq, gstatus, ierr)
  call check(ierr == MPI_SUCCESS .and. greq == MPI_REQUEST_NULL, 'grequest wait')
  call check(gstatus(MPI_SOURCE) == 42 .and. gstatus(MPI_TAG) == 24, 'grequest status')
  call check(gseen(1) == 1 .and. gseen(2) == 1, 'grequest query and free')

  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  call MPI_Finalize(ierr)
  if (rank == 0) print '(A)', 'OK'

contains

  subroutine check(cond, what)
    logical, intent(in) :: cond
    character(len=*), intent(in) :: what
    integer :: ierr
    if (.not. cond) then
      print *, 'FAILED: ', what
      call MPI_Abort(MPI_COMM_WORLD, 1, ierr)
    end if
  end subroutine check

end program coll

! inout = inout + in + 1 (associative and commutative): np ones reduce to 2*np - 1.
subroutine add_plus_one(invec, inoutvec, n, datatype)
  integer :: n, datatype, i
  integer :: invec(n), inoutvec(n)
  do i = 1, n
    inoutvec(i) = inoutvec(i) + invec(i) + 1
  end do
end subroutine add_plus_one

! A Fortran copy callback: the new value is the old one plus the extra state.
subroutine copy_plus_extra(oldcomm, keyval, extra, valin, valout, flag, ierr)
  use mpi
  integer :: oldcomm, keyval, ierr, ncopy, ndelete
  integer(kind=MPI_ADDRESS_KIND) :: extra, valin, valout
  logical :: flag
  common /attrseen/ ncopy, ndelete
  ncopy = ncopy + 1
  valout = valin + extra
  flag = .true.
  ierr = MPI_SUCCESS
  if (oldcomm == MPI_COMM_NULL .or. keyval == MPI_KEYVAL_INVALID) ierr = MPI_ERR_OTHER
end subroutine copy_plus_extra

subroutine count_delete(comm, keyval, val, extra, ierr)
  use mpi
  integer :: comm, keyval, ierr, ncopy, ndelete
  integer(kind=MPI_ADDRESS_KIND) :: val, extra
  common /attrseen/ ncopy, ndelete
  ndelete = ndelete + 1
  ierr = MPI_SUCCESS
  if (extra /= 5 .or. comm == MPI_COMM_NULL .or. keyval == MPI_KEYVAL_INVALID .or. val < 0) ierr = MPI_ERR_OTHER
end subroutine count_delete

! Generalized request procedures: the extra state is 7; counts calls in /greqseen/.
subroutine greq_query(extra, status, ierr)
  use mpi
  integer(kind=MPI_ADDRESS_KIND) :: extra
  integer :: status(MPI_STATUS_SIZE), ierr, gseen(3)
  common /greqseen/ gseen
  gseen(1) = gseen(1) + 1
  status(MPI_SOURCE) = 42
  status(MPI_TAG) = 24
  ierr = MPI_SUCCESS
  if (extra /= 7) ierr = MPI_ERR_OTHER
end subroutine greq_query

subroutine greq_free(extra, ierr)
  use mpi
  integer(kind=MPI_ADDRESS_KIND) :: extra
  integer :: ierr, gseen(3)
  common /greqseen/ gseen
  gseen(2) = gseen(2) + 1
  ierr = MPI_SUCCESS
  if (extra /= 7) ierr = MPI_ERR_OTHER
end subroutine greq_free

subroutine greq_cancel(extra, complete, ierr)
  use mpi
  integer(kind=MPI_ADDRESS_KIND) :: extra
  logical :: complete
  integer :: ierr, gseen(3)
  common /greqseen/ gseen
  gseen(3) = gseen(3) + 1
  ierr = MPI_SUCCESS
  if (extra /= 7 .or. complete) ierr = MPI_ERR_OTHER
end subroutine greq_cancel
