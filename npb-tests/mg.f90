! NPB MG (MultiGrid) in Fortran with mpif.h: four V-cycles of the NPB multigrid
! solver for the discrete Poisson problem on a periodic n**3 grid whose right-hand
! side is +1 at the ten largest and -1 at the ten smallest of n**3 NPB random
! numbers (seed 314159265); the final residual's L2 norm must match NPB's value.
!
! Operators, as NPB specifies them for classes S, W and A: the residual
! r = v - A u with A = (-8/3, 0, 1/6, 1/12) over centre, faces, edges, corners;
! the smoother u = u + C r with C = (-3/8, 1/32, -1/64, 0); full-weighting
! restriction (1/2, 1/4, 1/8, 1/16) and trilinear prolongation.
!
! Parallelisation (the same as mg.c): slabs along the third axis. A level is
! distributed while every process keeps at least two planes of it; coarser
! levels are replicated (gathered with MPI_ALLGATHER on the way down). Ghost
! planes are exchanged with MPI_SENDRECV; norms use MPI_ALLREDUCE.
program mg
  use npbf_common
  implicit none
  include 'mpif.h'

  integer, parameter :: maxlev = 12, nit = 4, mm = 10

  !> One grid level: n interior points per axis, m3 of its planes held here.
  !> Arrays are (0:n+1, 0:n+1, 0:m3+1), index 0 and n+1 (m3+1) being ghosts.
  type level
    integer :: n = 0
    integer :: m3 = 0
    !> Global interior index of local plane 1, minus 1.
    integer :: z0 = 0
    !> Distributed over the processes (else replicated on each).
    logical :: dist = .false.
    double precision, allocatable :: u(:, :, :), r(:, :, :)
  end type level

  double precision, parameter :: a0 = -8.0d0 / 3.0d0, a2 = 1.0d0 / 6.0d0, a3 = 1.0d0 / 12.0d0
  double precision, parameter :: c0 = -3.0d0 / 8.0d0, c1 = 1.0d0 / 32.0d0, c2 = -1.0d0 / 64.0d0

  type(level) :: lev(maxlev)
  double precision, allocatable :: v(:, :, :)
  integer :: rank, np, up, down, ierr, lt, nx, k, it
  double precision :: ref, rnm2, rnmu, t0, err, tl(1), tm(1)
  character :: cls
  character(len=16) :: sizestr
  logical :: ok

  call MPI_INIT(ierr)
  call MPI_COMM_RANK(MPI_COMM_WORLD, rank, ierr)
  call MPI_COMM_SIZE(MPI_COMM_WORLD, np, ierr)
  cls = npbf_class()
  select case (cls)
  case ('S')
    lt = 5; ref = 0.5307707005734d-04
  case ('W')
    lt = 7; ref = 0.6467329375339d-05
  case default
    lt = 8; ref = 0.2433365309069d-05
  end select
  nx = 2**lt
  if (iand(np, np - 1) /= 0 .or. nx < 2 * np) then
    if (rank == 0) write (0, '(a,i0)') 'MG needs a power-of-two process count <= ', nx / 2
    call MPI_ABORT(MPI_COMM_WORLD, 2, ierr)
  end if
  up = mod(rank + 1, np)
  down = mod(rank + np - 1, np)
  if (rank == 0) write (*, '(/,a,a,a,i0,a,i0,a,i0,a,i0,a,i0,a)') &
    ' NPB MG (Tsunagi Fortran/MPI) class ', cls, ': ', nx, 'x', nx, 'x', nx, ', ', nit, &
    ' iterations, ', np, ' processes'

  do k = 1, lt
    lev(k)%n = 2**k
    lev(k)%dist = np > 1 .and. lev(k)%n >= 2 * np
    if (lev(k)%dist) then
      lev(k)%m3 = lev(k)%n / np
      lev(k)%z0 = rank * lev(k)%m3
    else
      lev(k)%m3 = lev(k)%n
      lev(k)%z0 = 0
    end if
    allocate (lev(k)%u(0:lev(k)%n + 1, 0:lev(k)%n + 1, 0:lev(k)%m3 + 1))
    allocate (lev(k)%r(0:lev(k)%n + 1, 0:lev(k)%n + 1, 0:lev(k)%m3 + 1))
    lev(k)%u = 0.0d0
    lev(k)%r = 0.0d0
  end do
  allocate (v(0:nx + 1, 0:nx + 1, 0:lev(lt)%m3 + 1))
  call zran3(nx, lev(lt)%m3, lev(lt)%z0, lev(lt)%dist, v)

  call resid(nx, lev(lt)%m3, lev(lt)%dist, lev(lt)%u, lev(lt)%r, v)
  call norm2u3(nx, lev(lt)%m3, lev(lt)%r, rnm2, rnmu)
  if (rank == 0) write (*, '(a,es20.13)') ' Initial residual norm: ', rnm2

  call MPI_BARRIER(MPI_COMM_WORLD, ierr)
  t0 = MPI_WTIME()
  call resid(nx, lev(lt)%m3, lev(lt)%dist, lev(lt)%u, lev(lt)%r, v)
  do it = 1, nit
    call mg3p()
    call resid(nx, lev(lt)%m3, lev(lt)%dist, lev(lt)%u, lev(lt)%r, v)
  end do
  call norm2u3(nx, lev(lt)%m3, lev(lt)%r, rnm2, rnmu)
  tl(1) = MPI_WTIME() - t0
  call MPI_ALLREDUCE(tl(1), tm(1), 1, MPI_DOUBLE_PRECISION, MPI_MAX, MPI_COMM_WORLD, ierr)

  err = abs(rnm2 - ref) / ref
  ok = err <= 1.0d-8
  if (rank == 0) then
    write (*, '(a,es20.13,a,es20.13,a,es10.3)') ' L2 norm = ', rnm2, '  reference = ', ref, &
      '  error = ', err
    write (sizestr, '(i0,a,i0,a,i0)') nx, 'x', nx, 'x', nx
    call npbf_report('MG', cls, trim(sizestr), nit, tm(1), &
      58.0d0 * nit * dble(nx)**3 / tm(1) / 1.0d6, ok, np)
  end if
  call MPI_FINALIZE(ierr)
  if (.not. ok) stop 1

contains

  !> One V-cycle: restrict the residual down to level 1, smooth there, then
  !> prolongate, re-form the residual and smooth on the way up.
  subroutine mg3p()
    integer :: k
    do k = lt, 2, -1
      call rprj3(lev(k)%n, lev(k)%m3, lev(k)%dist, lev(k)%r, &
        lev(k - 1)%n, lev(k - 1)%m3, lev(k - 1)%dist, lev(k - 1)%r)
    end do
    lev(1)%u = 0.0d0
    call psinv(lev(1)%n, lev(1)%m3, lev(1)%dist, lev(1)%r, lev(1)%u)
    do k = 2, lt - 1
      lev(k)%u = 0.0d0
      call interp(lev(k - 1)%n, lev(k - 1)%m3, lev(k - 1)%dist, lev(k - 1)%u, &
        lev(k)%n, lev(k)%m3, lev(k)%z0, lev(k)%dist, lev(k)%u)
      call resid(lev(k)%n, lev(k)%m3, lev(k)%dist, lev(k)%u, lev(k)%r)
      call psinv(lev(k)%n, lev(k)%m3, lev(k)%dist, lev(k)%r, lev(k)%u)
    end do
    call interp(lev(lt - 1)%n, lev(lt - 1)%m3, lev(lt - 1)%dist, lev(lt - 1)%u, &
      lev(lt)%n, lev(lt)%m3, lev(lt)%z0, lev(lt)%dist, lev(lt)%u)
    call resid(nx, lev(lt)%m3, lev(lt)%dist, lev(lt)%u, lev(lt)%r, v)
    call psinv(nx, lev(lt)%m3, lev(lt)%dist, lev(lt)%r, lev(lt)%u)
  end subroutine mg3p

  !> Periodic ghost update: axes 1 and 2 locally, axis 3 with the neighbours
  !> (or locally when the level is replicated).
  subroutine comm3(n, m3, dist, x)
    integer, intent(in) :: n, m3
    logical, intent(in) :: dist
    double precision, intent(inout) :: x(0:n + 1, 0:n + 1, 0:m3 + 1)
    integer :: i2, i3, pl, status(MPI_STATUS_SIZE)
    do i3 = 1, m3
      do i2 = 1, n
        x(0, i2, i3) = x(n, i2, i3)
        x(n + 1, i2, i3) = x(1, i2, i3)
      end do
      x(:, 0, i3) = x(:, n, i3)
      x(:, n + 1, i3) = x(:, 1, i3)
    end do
    if (dist .and. np > 1) then
      pl = (n + 2) * (n + 2)
      call MPI_SENDRECV(x(0, 0, m3), pl, MPI_DOUBLE_PRECISION, up, 1, &
        x(0, 0, 0), pl, MPI_DOUBLE_PRECISION, down, 1, MPI_COMM_WORLD, status, ierr)
      call MPI_SENDRECV(x(0, 0, 1), pl, MPI_DOUBLE_PRECISION, down, 2, &
        x(0, 0, m3 + 1), pl, MPI_DOUBLE_PRECISION, up, 2, MPI_COMM_WORLD, status, ierr)
    else
      x(:, :, 0) = x(:, :, m3)
      x(:, :, m3 + 1) = x(:, :, 1)
    end if
  end subroutine comm3

  !> r = v - A u; without v, r = r - A u (the coarse levels' residual in place).
  !> A's face coefficient is 0, so only centre, edges (u1) and corners (u2) count.
  subroutine resid(n, m3, dist, u, r, v)
    integer, intent(in) :: n, m3
    logical, intent(in) :: dist
    double precision, intent(in) :: u(0:n + 1, 0:n + 1, 0:m3 + 1)
    double precision, intent(inout) :: r(0:n + 1, 0:n + 1, 0:m3 + 1)
    double precision, intent(in), optional :: v(0:n + 1, 0:n + 1, 0:m3 + 1)
    double precision :: u1(0:n + 1), u2(0:n + 1)
    integer :: i1, i2, i3
    do i3 = 1, m3
      do i2 = 1, n
        do i1 = 0, n + 1
          u1(i1) = u(i1, i2 - 1, i3) + u(i1, i2 + 1, i3) + u(i1, i2, i3 - 1) + u(i1, i2, i3 + 1)
          u2(i1) = u(i1, i2 - 1, i3 - 1) + u(i1, i2 + 1, i3 - 1) &
            + u(i1, i2 - 1, i3 + 1) + u(i1, i2 + 1, i3 + 1)
        end do
        if (present(v)) then
          do i1 = 1, n
            r(i1, i2, i3) = v(i1, i2, i3) - a0 * u(i1, i2, i3) &
              - a2 * (u2(i1) + u1(i1 - 1) + u1(i1 + 1)) - a3 * (u2(i1 - 1) + u2(i1 + 1))
          end do
        else
          do i1 = 1, n
            r(i1, i2, i3) = r(i1, i2, i3) - a0 * u(i1, i2, i3) &
              - a2 * (u2(i1) + u1(i1 - 1) + u1(i1 + 1)) - a3 * (u2(i1 - 1) + u2(i1 + 1))
          end do
        end if
      end do
    end do
    call comm3(n, m3, dist, r)
  end subroutine resid

  !> The smoother u = u + C r (C's corner coefficient is 0).
  subroutine psinv(n, m3, dist, r, u)
    integer, intent(in) :: n, m3
    logical, intent(in) :: dist
    double precision, intent(in) :: r(0:n + 1, 0:n + 1, 0:m3 + 1)
    double precision, intent(inout) :: u(0:n + 1, 0:n + 1, 0:m3 + 1)
    double precision :: r1(0:n + 1), r2(0:n + 1)
    integer :: i1, i2, i3
    do i3 = 1, m3
      do i2 = 1, n
        do i1 = 0, n + 1
          r1(i1) = r(i1, i2 - 1, i3) + r(i1, i2 + 1, i3) + r(i1, i2, i3 - 1) + r(i1, i2, i3 + 1)
          r2(i1) = r(i1, i2 - 1, i3 - 1) + r(i1, i2 + 1, i3 - 1) &
            + r(i1, i2 - 1, i3 + 1) + r(i1, i2 + 1, i3 + 1)
        end do
        do i1 = 1, n
          u(i1, i2, i3) = u(i1, i2, i3) + c0 * r(i1, i2, i3) &
            + c1 * (r(i1 - 1, i2, i3) + r(i1 + 1, i2, i3) + r1(i1)) &
            + c2 * (r2(i1) + r1(i1 - 1) + r1(i1 + 1))
        end do
      end do
    end do
    call comm3(n, m3, dist, u)
  end subroutine psinv

  !> Full-weighting restriction of the fine residual r onto the coarse s; coarse
  !> point j sits on fine point 2j. When the fine level is distributed and the
  !> coarse one replicated, every rank's coarse planes are gathered onto all.
  subroutine rprj3(fn, fm3, fdist, r, cn, cm3, cdist, s)
    integer, intent(in) :: fn, fm3, cn, cm3
    logical, intent(in) :: fdist, cdist
    double precision, intent(in) :: r(0:fn + 1, 0:fn + 1, 0:fm3 + 1)
    double precision, intent(inout) :: s(0:cn + 1, 0:cn + 1, 0:cm3 + 1)
    double precision, allocatable :: part(:, :, :)
    integer :: mine
    mine = fm3 / 2 ! coarse planes computed here
    if (fdist .and. .not. cdist) then
      allocate (part(0:cn + 1, 0:cn + 1, 0:mine + 1))
      call restrict(fn, fm3, r, cn, mine, part)
      call MPI_ALLGATHER(part(0, 0, 1), mine * (cn + 2)**2, MPI_DOUBLE_PRECISION, &
        s(0, 0, 1), mine * (cn + 2)**2, MPI_DOUBLE_PRECISION, MPI_COMM_WORLD, ierr)
    else
      call restrict(fn, fm3, r, cn, mine, s)
    end if
    call comm3(cn, cm3, cdist, s)
  end subroutine rprj3

  !> rprj3's arithmetic: the first `mine` coarse planes of `out` from r.
  subroutine restrict(fn, fm3, r, cn, mine, out)
    integer, intent(in) :: fn, fm3, cn, mine
    double precision, intent(in) :: r(0:fn + 1, 0:fn + 1, 0:fm3 + 1)
    double precision, intent(inout) :: out(0:cn + 1, 0:cn + 1, 0:mine + 1)
    double precision :: x1(0:fn + 1), y1(0:fn + 1), x2, y2
    integer :: i1, i2, i3, j1, j2, j3
    do j3 = 1, mine
      i3 = 2 * j3 - 1
      do j2 = 1, cn
        i2 = 2 * j2 - 1
        do j1 = 1, cn + 1
          i1 = 2 * j1 - 1
          x1(i1) = r(i1, i2, i3 + 1) + r(i1, i2 + 2, i3 + 1) &
            + r(i1, i2 + 1, i3) + r(i1, i2 + 1, i3 + 2)
          y1(i1) = r(i1, i2, i3) + r(i1, i2, i3 + 2) + r(i1, i2 + 2, i3) + r(i1, i2 + 2, i3 + 2)
        end do
        do j1 = 1, cn
          i1 = 2 * j1 - 1
          y2 = r(i1 + 1, i2, i3) + r(i1 + 1, i2, i3 + 2) &
            + r(i1 + 1, i2 + 2, i3) + r(i1 + 1, i2 + 2, i3 + 2)
          x2 = r(i1 + 1, i2, i3 + 1) + r(i1 + 1, i2 + 2, i3 + 1) &
            + r(i1 + 1, i2 + 1, i3) + r(i1 + 1, i2 + 1, i3 + 2)
          out(j1, j2, j3) = 0.5d0 * r(i1 + 1, i2 + 1, i3 + 1) &
            + 0.25d0 * (r(i1, i2 + 1, i3 + 1) + r(i1 + 2, i2 + 1, i3 + 1) + x2) &
            + 0.125d0 * (x1(i1) + x1(i1 + 2) + y2) &
            + 0.0625d0 * (y1(i1) + y1(i1 + 2))
        end do
      end do
    end do
  end subroutine restrict

  !> Trilinear prolongation u = u + I z from the coarse level onto the fine one.
  !> A replicated coarse level under a distributed fine one is read from the
  !> coarse plane matching this rank's first fine plane.
  subroutine interp(cn, cm3, cdist, z, fn, fm3, fz0, fdist, u)
    integer, intent(in) :: cn, cm3, fn, fm3, fz0
    logical, intent(in) :: cdist, fdist
    double precision, intent(in) :: z(0:cn + 1, 0:cn + 1, 0:cm3 + 1)
    double precision, intent(inout) :: u(0:fn + 1, 0:fn + 1, 0:fm3 + 1)
    double precision :: z1(0:cn + 1), z2(0:cn + 1), z3(0:cn + 1)
    integer :: i1, i2, i3, cz, k3
    cz = 0
    if (fdist .and. .not. cdist) cz = fz0 / 2
    do i3 = 0, fm3 / 2
      k3 = cz + i3
      do i2 = 0, cn
        do i1 = 0, cn + 1
          z1(i1) = z(i1, i2 + 1, k3) + z(i1, i2, k3)
          z2(i1) = z(i1, i2, k3 + 1) + z(i1, i2, k3)
          z3(i1) = z(i1, i2 + 1, k3 + 1) + z(i1, i2, k3 + 1) + z1(i1)
        end do
        do i1 = 0, cn
          u(2 * i1, 2 * i2, 2 * i3) = u(2 * i1, 2 * i2, 2 * i3) + z(i1, i2, k3)
          u(2 * i1 + 1, 2 * i2, 2 * i3) = u(2 * i1 + 1, 2 * i2, 2 * i3) &
            + 0.5d0 * (z(i1 + 1, i2, k3) + z(i1, i2, k3))
          u(2 * i1, 2 * i2 + 1, 2 * i3) = u(2 * i1, 2 * i2 + 1, 2 * i3) + 0.5d0 * z1(i1)
          u(2 * i1 + 1, 2 * i2 + 1, 2 * i3) = u(2 * i1 + 1, 2 * i2 + 1, 2 * i3) &
            + 0.25d0 * (z1(i1) + z1(i1 + 1))
          u(2 * i1, 2 * i2, 2 * i3 + 1) = u(2 * i1, 2 * i2, 2 * i3 + 1) + 0.5d0 * z2(i1)
          u(2 * i1 + 1, 2 * i2, 2 * i3 + 1) = u(2 * i1 + 1, 2 * i2, 2 * i3 + 1) &
            + 0.25d0 * (z2(i1) + z2(i1 + 1))
          u(2 * i1, 2 * i2 + 1, 2 * i3 + 1) = u(2 * i1, 2 * i2 + 1, 2 * i3 + 1) + 0.25d0 * z3(i1)
          u(2 * i1 + 1, 2 * i2 + 1, 2 * i3 + 1) = u(2 * i1 + 1, 2 * i2 + 1, 2 * i3 + 1) &
            + 0.125d0 * (z3(i1) + z3(i1 + 1))
        end do
      end do
    end do
  end subroutine interp

  !> L2 norm (root mean square over the n**3 points) and max norm of r's interior.
  subroutine norm2u3(n, m3, r, rnm2, rnmu)
    integer, intent(in) :: n, m3
    double precision, intent(in) :: r(0:n + 1, 0:n + 1, 0:m3 + 1)
    double precision, intent(out) :: rnm2, rnmu
    double precision :: s(1), g(1), mx(1), gmx(1)
    integer :: i2, i3
    s(1) = 0.0d0
    mx(1) = 0.0d0
    do i3 = 1, m3
      do i2 = 1, n
        s(1) = s(1) + sum(r(1:n, i2, i3)**2)
        mx(1) = max(mx(1), maxval(abs(r(1:n, i2, i3))))
      end do
    end do
    call MPI_ALLREDUCE(s(1), g(1), 1, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
    call MPI_ALLREDUCE(mx(1), gmx(1), 1, MPI_DOUBLE_PRECISION, MPI_MAX, MPI_COMM_WORLD, ierr)
    rnm2 = sqrt(g(1) / dble(n)**3)
    rnmu = gmx(1)
  end subroutine norm2u3

  !> The right-hand side. Interior point (i1, i2, i3) gets NPB random number
  !> (i1-1) + n(i2-1) + n**2(i3-1) + 1 after the seed 314159265; then the ten
  !> largest become +1, the ten smallest -1 and all others 0. Each rank draws its
  !> own planes (jumping ahead with a**k) and the global ten are chosen from every
  !> rank's local ten.
  subroutine zran3(n, m3, z0, dist, v)
    integer, intent(in) :: n, m3, z0
    logical, intent(in) :: dist
    double precision, intent(out) :: v(0:n + 1, 0:n + 1, 0:m3 + 1)
    double precision :: an, ann, x0, x1, xx, t, x
    double precision :: hiv(mm), lov(mm), mine(4 * mm)
    double precision, allocatable :: gathered(:), cv(:), cp(:)
    integer(8) :: hip(mm), lop(mm), pos
    integer :: i1, i2, i3, j, p, s, g3, l3, ncand

    an = pow46(npb_a, int(n, 8))
    ann = pow46(npb_a, int(n, 8) * n)
    v = 0.0d0
    x0 = 314159265.0d0
    t = randlc(x0, pow46(npb_a, int(z0, 8) * n * n))
    do i3 = 1, m3
      x1 = x0
      do i2 = 1, n
        xx = x1
        call vranlc(n, xx, npb_a, v(1, i2, i3))
        t = randlc(x1, an)
      end do
      t = randlc(x0, ann)
    end do

    ! Local ten largest and ten smallest, kept sorted by insertion.
    hiv = -1.0d0
    lov = 2.0d0
    hip = -1
    lop = -1
    do i3 = 1, m3
      do i2 = 1, n
        do i1 = 1, n
          x = v(i1, i2, i3)
          pos = (int(z0 + i3 - 1, 8) * n + (i2 - 1)) * n + (i1 - 1)
          if (x > hiv(mm)) then
            j = mm
            do while (j > 1)
              if (hiv(j - 1) >= x) exit
              hiv(j) = hiv(j - 1)
              hip(j) = hip(j - 1)
              j = j - 1
            end do
            hiv(j) = x
            hip(j) = pos
          end if
          if (x < lov(mm)) then
            j = mm
            do while (j > 1)
              if (lov(j - 1) <= x) exit
              lov(j) = lov(j - 1)
              lop(j) = lop(j - 1)
              j = j - 1
            end do
            lov(j) = x
            lop(j) = pos
          end if
        end do
      end do
    end do

    ! Every rank's candidates to every rank (positions travel as exact doubles);
    ! the smallest are sent negated so both lists are chosen largest first.
    do j = 1, mm
      mine(2 * j - 1) = hiv(j)
      mine(2 * j) = dble(hip(j))
      mine(2 * mm + 2 * j - 1) = -lov(j)
      mine(2 * mm + 2 * j) = dble(lop(j))
    end do
    allocate (gathered(4 * mm * np), cv(mm * np), cp(mm * np))
    call MPI_ALLGATHER(mine(1), 4 * mm, MPI_DOUBLE_PRECISION, gathered(1), 4 * mm, &
      MPI_DOUBLE_PRECISION, MPI_COMM_WORLD, ierr)
    v = 0.0d0
    ncand = mm * np
    do s = 0, 1 ! 0: the smallest (-1), 1: the largest (+1)
      do p = 0, np - 1
        do j = 1, mm
          cv(p * mm + j) = gathered(4 * mm * p + 2 * mm * (1 - s) + 2 * j - 1)
          cp(p * mm + j) = gathered(4 * mm * p + 2 * mm * (1 - s) + 2 * j)
        end do
      end do
      call sort_desc(cv, cp, ncand)
      do j = 1, mm
        pos = int(cp(j), 8)
        if (pos < 0) cycle
        g3 = int(pos / (int(n, 8) * n))
        l3 = g3 - z0 + 1
        if (l3 < 1 .or. l3 > m3) cycle
        i2 = int(mod(pos / n, int(n, 8)))
        i1 = int(mod(pos, int(n, 8)))
        v(i1 + 1, i2 + 1, l3) = dble(2 * s - 1)
      end do
    end do
    call comm3(n, m3, dist, v)
  end subroutine zran3

  !> Insertion sort of (key, payload) pairs by key, largest first.
  subroutine sort_desc(key, pay, n)
    double precision, intent(inout) :: key(:), pay(:)
    integer, intent(in) :: n
    double precision :: k, p
    integer :: i, j
    do i = 2, n
      k = key(i)
      p = pay(i)
      j = i - 1
      do while (j >= 1)
        if (key(j) >= k) exit
        key(j + 1) = key(j)
        pay(j + 1) = pay(j)
        j = j - 1
      end do
      key(j + 1) = k
      pay(j + 1) = p
    end do
  end subroutine sort_desc

end program mg
