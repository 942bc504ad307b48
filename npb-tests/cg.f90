! NPB CG (Conjugate Gradient) in Fortran with mpif.h: estimate the smallest
! eigenvalue of the NPB random sparse symmetric matrix by inverse power
! iteration, each of the 15 outer steps solving A z = x with 25 unpreconditioned
! CG iterations; zeta = shift + 1 / (x . z) must match NPB's value.
!
! The matrix is generated as NPB specifies (makea): the sum over i of
! size_i * v_i v_i^T, where v_i is a sparse random vector (sprnvc: nonzer
! distinct positions drawn with the NPB generator, then element i set to 0.5 by
! vecset) and size_i falls geometrically from 1 to rcond, plus (rcond - shift)
! on the diagonal. Parallelisation: block rows per process; the direction
! vector is assembled with MPI_ALLGATHERV before each sparse mat-vec and dot
! products use MPI_ALLREDUCE (the same decomposition as cg.c, so the two
! languages are compared on the same communication).
program cg
  use npbf_common
  implicit none
  include 'mpif.h'

  integer, parameter :: cgitmax = 25, niter = 15
  double precision, parameter :: rcond = 0.1d0

  integer :: na, nonzer, rank, np, ierr, r0, nrows, it, icg, p
  double precision :: shift, zeta_ref, zeta, rnorm, rho, rho0, alpha, beta, scale
  double precision :: t0, err, nnz, mops
  double precision :: sl(2), sg(2), tl(1), tm(1)
  integer, allocatable :: counts(:), displs(:), rowstr(:), colidx(:)
  double precision, allocatable :: aval(:), x(:), full(:), z(:), r(:), pv(:), q(:)
  character :: cls
  character(len=16) :: sizestr
  logical :: ok

  call MPI_INIT(ierr)
  call MPI_COMM_RANK(MPI_COMM_WORLD, rank, ierr)
  call MPI_COMM_SIZE(MPI_COMM_WORLD, np, ierr)
  cls = npbf_class()
  select case (cls)
  case ('S')
    na = 1400; nonzer = 7; shift = 10.0d0; zeta_ref = 8.5971775078648d0
  case ('W')
    na = 7000; nonzer = 8; shift = 12.0d0; zeta_ref = 10.362595087124d0
  case default
    na = 14000; nonzer = 11; shift = 20.0d0; zeta_ref = 17.130235054029d0
  end select
  if (iand(np, np - 1) /= 0) then
    if (rank == 0) write (0, '(a)') 'CG needs a power-of-two process count'
    call MPI_ABORT(MPI_COMM_WORLD, 2, ierr)
  end if
  if (rank == 0) write (*, '(/,a,a,a,i0,a,i0,a,f4.0,a,i0,a)') &
    ' NPB CG (Tsunagi Fortran/MPI) class ', cls, ': n=', na, ' nonzer=', nonzer, &
    ' shift=', shift, ', ', np, ' processes'

  ! Rows displs(p)+1 .. displs(p)+counts(p) belong to rank p.
  allocate (counts(np), displs(np))
  do p = 0, np - 1
    displs(p + 1) = int(int(na, 8) * p / np)
    counts(p + 1) = int(int(na, 8) * (p + 1) / np) - displs(p + 1)
  end do
  r0 = displs(rank + 1)
  nrows = counts(rank + 1)
  call makea(r0, nrows)

  allocate (x(na), full(na), z(nrows), r(nrows), pv(nrows), q(nrows))
  x = 1.0d0
  zeta = 0.0d0
  rnorm = 0.0d0

  call MPI_BARRIER(MPI_COMM_WORLD, ierr)
  t0 = MPI_WTIME()
  do it = 1, niter
    ! conj_grad: 25 CG steps towards A z = x, from z = 0.
    z = 0.0d0
    r = x(r0 + 1:r0 + nrows)
    pv = r
    rho = dot(r, r)
    do icg = 1, cgitmax
      call gather(pv, full)
      call matvec(full, q)
      alpha = rho / dot(pv, q)
      rho0 = rho
      z = z + alpha * pv
      r = r - alpha * q
      rho = dot(r, r)
      beta = rho / rho0
      pv = r + beta * pv
    end do
    ! The residual ||x - A z|| of the solve, as NPB reports it.
    call gather(z, full)
    call matvec(full, q)
    sl(1) = sum((x(r0 + 1:r0 + nrows) - q)**2)
    call MPI_ALLREDUCE(sl(1), sg(1), 1, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
    rnorm = sqrt(sg(1))
    ! zeta = shift + 1 / (x . z); the next x is z normalised.
    sl(1) = dot_product(x(r0 + 1:r0 + nrows), z)
    sl(2) = dot_product(z, z)
    call MPI_ALLREDUCE(sl(1), sg(1), 2, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
    zeta = shift + 1.0d0 / sg(1)
    scale = 1.0d0 / sqrt(sg(2))
    z = z * scale
    call gather(z, x)
    if (rank == 0) write (*, '(3x,i5,7x,es21.14,es21.13)') it, rnorm, zeta
  end do
  tl(1) = MPI_WTIME() - t0
  call MPI_ALLREDUCE(tl(1), tm(1), 1, MPI_DOUBLE_PRECISION, MPI_MAX, MPI_COMM_WORLD, ierr)

  err = abs(zeta - zeta_ref) / zeta_ref
  ok = err <= 1.0d-10
  nnz = dble(nonzer) * (nonzer + 1)
  mops = 2.0d0 * niter * na * (3.0d0 + nnz + 25.0d0 * (5.0d0 + nnz) + 3.0d0) / tm(1) / 1.0d6
  if (rank == 0) then
    write (*, '(a,es21.13,a,es21.13,a,es10.3)') ' zeta = ', zeta, '  reference = ', zeta_ref, &
      '  error = ', err
    write (sizestr, '(i0)') na
    call npbf_report('CG', cls, trim(sizestr), niter, tm(1), mops, ok, np)
  end if
  call MPI_FINALIZE(ierr)
  if (.not. ok) stop 1

contains

  !> Global dot product of two local pieces.
  double precision function dot(a, b)
    double precision, intent(in) :: a(:), b(:)
    double precision :: s(1), g(1)
    s(1) = dot_product(a, b)
    call MPI_ALLREDUCE(s(1), g(1), 1, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
    dot = g(1)
  end function dot

  !> Every rank's piece of a vector, assembled into the whole vector.
  subroutine gather(loc, whole)
    double precision, intent(in) :: loc(nrows)
    double precision, intent(out) :: whole(na)
    call MPI_ALLGATHERV(loc(1), nrows, MPI_DOUBLE_PRECISION, whole(1), counts, displs, &
      MPI_DOUBLE_PRECISION, MPI_COMM_WORLD, ierr)
  end subroutine gather

  !> y = (local rows of A) * xfull.
  subroutine matvec(xfull, y)
    double precision, intent(in) :: xfull(:)
    double precision, intent(out) :: y(:)
    integer :: row, k
    double precision :: s
    do row = 1, nrows
      s = 0.0d0
      do k = rowstr(row), rowstr(row + 1) - 1
        s = s + aval(k) * xfull(colidx(k))
      end do
      y(row) = s
    end do
  end subroutine matvec

  !> The local rows r0+1 .. r0+nloc of the NPB matrix, in CSR form (rowstr,
  !> colidx, aval; columns ascending, duplicate entries summed). Every rank draws
  !> the whole random stream, since each outer product touches scattered rows.
  subroutine makea(r0, nloc)
    integer, intent(in) :: r0, nloc
    integer, allocatable :: iv(:, :), nzv(:), cnt(:), start(:), tcol(:), mark(:), cols(:)
    double precision, allocatable :: vv(:, :), sz(:), tval(:), acc(:)
    double precision :: tran, t, ratio, size, vecelt, vecloc, va
    integer :: nn1, i, j, k, a, b, nz, pos, row, ntrip, ncols, nnzl
    logical :: dup

    tran = 314159265.0d0
    t = randlc(tran, npb_a) ! NPB draws one number (its zeta) before makea
    nn1 = 1
    do while (nn1 < na)
      nn1 = 2 * nn1
    end do
    ratio = rcond**(1.0d0 / na)
    size = 1.0d0
    allocate (iv(nonzer + 1, na), vv(nonzer + 1, na), nzv(na), sz(na))
    do i = 1, na
      ! sprnvc: nonzer distinct positions in 1..na with random values.
      nz = 0
      do while (nz < nonzer)
        vecelt = randlc(tran, npb_a)
        vecloc = randlc(tran, npb_a)
        pos = int(nn1 * vecloc) + 1
        if (pos > na) cycle
        dup = .false.
        do j = 1, nz
          if (iv(j, i) == pos) dup = .true.
        end do
        if (dup) cycle
        nz = nz + 1
        iv(nz, i) = pos
        vv(nz, i) = vecelt
      end do
      ! vecset: element i becomes 0.5 (appended when not drawn).
      dup = .false.
      do j = 1, nz
        if (iv(j, i) == i) then
          vv(j, i) = 0.5d0
          dup = .true.
        end if
      end do
      if (.not. dup) then
        nz = nz + 1
        iv(nz, i) = i
        vv(nz, i) = 0.5d0
      end if
      nzv(i) = nz
      sz(i) = size
      size = size * ratio
    end do

    ! Entries of the outer products that fall in local rows: count, then bucket by row.
    allocate (cnt(nloc), start(nloc + 1))
    cnt = 0
    do i = 1, na
      do a = 1, nzv(i)
        row = iv(a, i) - r0
        if (row >= 1 .and. row <= nloc) cnt(row) = cnt(row) + nzv(i)
      end do
    end do
    start(1) = 1
    do row = 1, nloc
      start(row + 1) = start(row) + cnt(row)
    end do
    ntrip = start(nloc + 1) - 1
    allocate (tcol(max(ntrip, 1)), tval(max(ntrip, 1)))
    cnt = 0
    do i = 1, na
      do a = 1, nzv(i)
        row = iv(a, i) - r0
        if (row < 1 .or. row > nloc) cycle
        do b = 1, nzv(i)
          va = vv(b, i) * (sz(i) * vv(a, i))
          if (iv(b, i) == iv(a, i) .and. iv(a, i) == i) va = va + rcond - shift
          k = start(row) + cnt(row)
          tcol(k) = iv(b, i)
          tval(k) = va
          cnt(row) = cnt(row) + 1
        end do
      end do
    end do
    deallocate (iv, vv, nzv, sz)

    ! Per row: sum duplicates in a dense accumulator, then emit columns ascending.
    allocate (rowstr(nloc + 1), colidx(max(ntrip, 1)), aval(max(ntrip, 1)))
    allocate (mark(na), acc(na), cols(na))
    mark = 0
    nnzl = 0
    do row = 1, nloc
      rowstr(row) = nnzl + 1
      ncols = 0
      do k = start(row), start(row + 1) - 1
        j = tcol(k)
        if (mark(j) /= row) then
          mark(j) = row
          acc(j) = tval(k)
          ncols = ncols + 1
          cols(ncols) = j
        else
          acc(j) = acc(j) + tval(k)
        end if
      end do
      call sort_ints(cols, ncols)
      do k = 1, ncols
        nnzl = nnzl + 1
        colidx(nnzl) = cols(k)
        aval(nnzl) = acc(cols(k))
      end do
    end do
    rowstr(nloc + 1) = nnzl + 1
  end subroutine makea

  !> Insertion sort of c(1:n), ascending (rows hold a few hundred entries at most).
  subroutine sort_ints(c, n)
    integer, intent(inout) :: c(:)
    integer, intent(in) :: n
    integer :: i, j, v
    do i = 2, n
      v = c(i)
      j = i - 1
      do while (j >= 1)
        if (c(j) <= v) exit
        c(j + 1) = c(j)
        j = j - 1
      end do
      c(j + 1) = v
    end do
  end subroutine sort_ints

end program cg
