//! Signals as bytes on a pipe (the self-pipe trick), so the event loop learns of SIGCHLD,
//! SIGINT, SIGTERM and SIGHUP through the same poll(2) that watches the PMI sockets, without
//! polling on a timer.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicI32, Ordering};

/// The signals mpirun catches; children get them back at their default before exec.
/// SIGUSR2 is forwarded to every rank (PM's checkpoint request, `TSUNAGI_PM_CHECKPOINT`).
pub const CAUGHT: [libc::c_int; 5] = [
    libc::SIGCHLD,
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGUSR2,
];

/// Write end of the pipe, read by the handler (a handler can only reach globals).
static WRITE_FD: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_signal(sig: libc::c_int) {
    // SAFETY: only async-signal-safe calls (write, errno access). errno is saved and
    // restored so the interrupted code does not see our write's errno.
    unsafe {
        let errno = *libc::__errno_location();
        let fd = WRITE_FD.load(Ordering::Relaxed);
        if fd >= 0 {
            let b = sig as u8;
            // A full pipe only means wake-ups are already pending; dropping the byte is fine
            // for SIGCHLD (we reap everything on each wake-up) and loses at most a repeated
            // SIGINT/SIGTERM.
            libc::write(fd, (&b as *const u8).cast(), 1);
        }
        *libc::__errno_location() = errno;
    }
}

/// The read end of the signal pipe.
pub struct SignalPipe {
    read: OwnedFd,
    _write: OwnedFd,
}

impl SignalPipe {
    /// Create the pipe and install handlers for [`CAUGHT`]. Call once, before spawning.
    pub fn install() -> io::Result<SignalPipe> {
        let mut fds = [0 as RawFd; 2];
        // SAFETY: pipe2 writes two descriptors into the array we pass.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pipe2 succeeded, so both are fresh descriptors owned by nobody else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        WRITE_FD.store(write.as_raw_fd(), Ordering::SeqCst);
        for &sig in &CAUGHT {
            // SAFETY: a zeroed sigaction is a valid starting point; we set the handler, an
            // empty mask and flags, then install it. The handler is async-signal-safe.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
                libc::sigemptyset(&mut sa.sa_mask);
                sa.sa_flags = libc::SA_RESTART
                    | if sig == libc::SIGCHLD {
                        libc::SA_NOCLDSTOP
                    } else {
                        0
                    };
                if libc::sigaction(sig, &sa, std::ptr::null_mut()) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
        }
        Ok(SignalPipe {
            read,
            _write: write,
        })
    }

    pub fn fd(&self) -> RawFd {
        self.read.as_raw_fd()
    }

    /// Signals received since the last call (oldest first).
    pub fn drain(&self) -> Vec<libc::c_int> {
        let mut sigs = Vec::new();
        let mut buf = [0u8; 64];
        loop {
            // SAFETY: reading into a local buffer of the stated length.
            let n = unsafe { libc::read(self.fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                break;
            }
            sigs.extend(buf[..n as usize].iter().map(|&b| libc::c_int::from(b)));
        }
        sigs
    }
}

/// Name of a signal for messages ("SIGKILL"); "signal N" style callers add the number.
pub fn name(sig: libc::c_int) -> String {
    let n = match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGSYS => "SIGSYS",
        _ => return format!("SIG{sig}"),
    };
    n.to_string()
}
