! Shared helpers of the Fortran NPB kernels: the NPB random number generator,
! the class from the command line, and the result block the harnesses parse.
!
! The generator is the one the NAS Parallel Benchmarks specify,
!   x(k+1) = a * x(k) mod 2**46,  a = 5**13,  returned value x(k+1) / 2**46,
! computed the NPB way in double precision: both factors are split into 23-bit
! halves, so every partial product is exact in a 53-bit mantissa and the result
! is bit-identical to the integer formulation of the C kernels (npb_common.c).
!
! Only `include 'mpif.h'` is used, so any MPI's Fortran wrapper builds this.
module npbf_common
  implicit none
  private
  public :: randlc, vranlc, pow46, npbf_class, npbf_report

  !> The NPB multiplier 5**13.
  double precision, parameter, public :: npb_a = 1220703125.0d0

  double precision, parameter :: r23 = 0.5d0**23, r46 = r23 * r23
  double precision, parameter :: t23 = 2.0d0**23, t46 = t23 * t23

contains

  !> One step: x <- a * x mod 2**46; returns the new x scaled into (0, 1).
  double precision function randlc(x, a)
    double precision, intent(inout) :: x
    double precision, intent(in) :: a
    double precision :: a1, a2, x1, x2, t1, t2, t3, t4, z
    ! a = a1 * 2**23 + a2 and x = x1 * 2**23 + x2, each half below 2**23.
    t1 = r23 * a
    a1 = aint(t1)
    a2 = a - t23 * a1
    t1 = r23 * x
    x1 = aint(t1)
    x2 = x - t23 * x1
    ! a * x mod 2**46 = ((a1*x2 + a2*x1) mod 2**23) * 2**23 + a2*x2, reduced mod 2**46.
    t1 = a1 * x2 + a2 * x1
    t2 = aint(r23 * t1)
    z = t1 - t23 * t2
    t3 = t23 * z + a2 * x2
    t4 = aint(r46 * t3)
    x = t3 - t46 * t4
    randlc = r46 * x
  end function randlc

  !> n steps of randlc, the values into y(1:n); x is left at the last state.
  subroutine vranlc(n, x, a, y)
    integer, intent(in) :: n
    double precision, intent(inout) :: x
    double precision, intent(in) :: a
    double precision, intent(out) :: y(n)
    integer :: i
    do i = 1, n
      y(i) = randlc(x, a)
    end do
  end subroutine vranlc

  !> a**n mod 2**46 (an exact integer held in a double), by repeated squaring.
  double precision function pow46(a, n)
    double precision, intent(in) :: a
    integer(8), intent(in) :: n
    double precision :: b, bb, t
    integer(8) :: k
    pow46 = 1.0d0
    b = a
    k = n
    do while (k > 0)
      if (mod(k, 2_8) == 1) t = randlc(pow46, b)
      bb = b
      t = randlc(b, bb)
      k = k / 2
    end do
  end function pow46

  !> The problem class: the first command-line argument (S, W or A), default S.
  !> Any other class aborts every rank with a message from rank 0.
  character function npbf_class()
    include 'mpif.h'
    character(len=16) :: arg
    integer :: rank, ierr
    npbf_class = 'S'
    if (command_argument_count() >= 1) then
      call get_command_argument(1, arg)
      npbf_class = arg(1:1)
      if (npbf_class >= 'a' .and. npbf_class <= 'z') &
        npbf_class = achar(iachar(npbf_class) - 32)
    end if
    if (npbf_class /= 'S' .and. npbf_class /= 'W' .and. npbf_class /= 'A') then
      call MPI_COMM_RANK(MPI_COMM_WORLD, rank, ierr)
      if (rank == 0) write (0, '(3a)') 'unknown class ''', trim(arg), ''' (use S, W or A)'
      call MPI_ABORT(MPI_COMM_WORLD, 2, ierr)
    end if
  end function npbf_class

  !> The NPB result block, printed by rank 0 in the layout of the C kernels
  !> (run.sh and tsunagi-bench read "Time in seconds =" and "Verification =").
  subroutine npbf_report(name, cls, sizestr, niter, secs, mops, verified, nprocs)
    character(len=*), intent(in) :: name, sizestr
    character, intent(in) :: cls
    integer, intent(in) :: niter, nprocs
    double precision, intent(in) :: secs, mops
    logical, intent(in) :: verified
    write (*, '(/,1x,a,a)') name, ' Benchmark Completed.'
    write (*, '(a,11x,a)') ' Class           = ', cls
    write (*, '(a,a12)') ' Size            = ', adjustr(sizestr(1:min(len(sizestr), 12)))
    write (*, '(a,i12)') ' Iterations      = ', niter
    write (*, '(a,f12.3)') ' Time in seconds = ', secs
    write (*, '(a,i12)') ' Total processes = ', nprocs
    write (*, '(a,f12.2)') ' Mop/s total     = ', mops
    write (*, '(a,f12.2)') ' Mop/s/process   = ', mops / nprocs
    write (*, '(a)') ' Operation type  = floating point'
    write (*, '(a)') ' Language        = Fortran (mpif.h)'
    if (verified) then
      write (*, '(a)') ' Verification = SUCCESSFUL'
    else
      write (*, '(a)') ' Verification = UNSUCCESSFUL'
    end if
    flush (6)
  end subroutine npbf_report

end module npbf_common
