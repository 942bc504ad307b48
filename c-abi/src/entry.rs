//! What every C entry point runs inside: panics are caught (never unwinding into C) and
//! become MPI_ERR_INTERN; errors get the call's name and go through the error handler of
//! the call's communicator (MPI_COMM_WORLD's when it has none): fatal prints one line and
//! aborts the job, MPI_ERRORS_RETURN returns the class.

use std::ffi::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

use tsunagi_core::{rt, CommId, ErrorClass, MpiError, MpiResult};

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".into()
    }
}

/// Hand `err` of `call` to the error handler of `comm`; returns the code to give back.
pub(crate) fn raise(call: &str, comm: Option<CommId>, mut err: MpiError) -> c_int {
    if !err.message.starts_with("MPI_") {
        err.message = format!("{call}: {}", err.message);
    }
    match rt(call) {
        Ok(r) => r.handle_error(comm, &err),
        Err(_) => {
            // Before MPI_Init or after MPI_Finalize there is no handler: errors are fatal.
            eprintln!("Tsunagi: fatal error: {err}");
            std::process::exit(1);
        }
    }
}

/// Run the body of an `int`-returning MPI function.
pub(crate) fn entry(
    call: &'static str,
    comm: Option<CommId>,
    f: impl FnOnce() -> MpiResult<()>,
) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => raise(call, comm, e),
        Err(p) => {
            let e = MpiError::new(
                ErrorClass::Intern,
                format!("{call}: internal error: {}", panic_message(&*p)),
            );
            raise(call, comm, e)
        }
    }
}

/// Run the body of an `int`-returning MPI function on a window: errors go through the
/// window's error handler (MPI_ERRORS_ARE_FATAL unless set), or MPI_COMM_WORLD's when `win`
/// is not a window.
pub(crate) fn entry_win(
    call: &'static str,
    win: crate::ffi::MPI_Win,
    f: impl FnOnce() -> MpiResult<()>,
) -> c_int {
    let e = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => return 0,
        Ok(Err(e)) => e,
        Err(p) => MpiError::new(
            ErrorClass::Intern,
            format!("{call}: internal error: {}", panic_message(&*p)),
        ),
    };
    match crate::imp::win_error(call, win, e) {
        Ok(code) => code,
        Err(e) => raise(call, None, e),
    }
}

/// Run the body of an `int`-returning MPI function on a file: errors go through the file's
/// error handler (MPI_ERRORS_RETURN unless set), or MPI_FILE_NULL's when `fh` is no open
/// file (MPI_File_open, MPI_File_delete).
pub(crate) fn entry_file(
    call: &'static str,
    fh: crate::ffi::MPI_File,
    f: impl FnOnce() -> MpiResult<()>,
) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => crate::imp::file_error(call, fh, e),
        Err(p) => crate::imp::file_error(
            call,
            fh,
            MpiError::new(
                ErrorClass::Intern,
                format!("{call}: internal error: {}", panic_message(&*p)),
            ),
        ),
    }
}

/// Run the body of a sessions function (MPI 4.0): errors go through the error handler of
/// `session` (MPI_COMM_WORLD's path when it is not a live session, as for MPI_Session_init).
pub(crate) fn entry_session(
    call: &'static str,
    session: crate::ffi::MPI_Session,
    f: impl FnOnce() -> MpiResult<()>,
) -> c_int {
    let mut e = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => return 0,
        Ok(Err(e)) => e,
        Err(p) => MpiError::new(
            ErrorClass::Intern,
            format!("{call}: internal error: {}", panic_message(&*p)),
        ),
    };
    if !e.message.starts_with("MPI_") {
        e.message = format!("{call}: {}", e.message);
    }
    match crate::imp::session_error(session, &e) {
        Some(code) => code,
        None => raise(call, None, e),
    }
}

/// Run the body of a tools-interface function (`MPI_T_*`): MPI_T calls have no error
/// handler, so the error's class (an `MPI_T_ERR_*` or `MPI_ERR_ARG` code) is returned as is,
/// also before MPI_Init and after MPI_Finalize.
pub(crate) fn entry_tools(call: &'static str, f: impl FnOnce() -> MpiResult<()>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => e.class as c_int,
        Err(p) => {
            eprintln!("Tsunagi: {call}: internal error: {}", panic_message(&*p));
            ErrorClass::Intern as c_int
        }
    }
}

/// Run a function that returns a value and has no error path (MPI_Wtime, conversions).
pub(crate) fn entry_value<T>(call: &'static str, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(p) => {
            eprintln!(
                "Tsunagi: fatal error: {call}: internal error: {}",
                panic_message(&*p)
            );
            std::process::abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs in a child process (the fatal path ends the process).
    #[test]
    fn a_panic_becomes_mpi_err_intern_and_never_unwinds() {
        if std::env::var_os("TSUNAGI_CABI_PANIC_CHILD").is_some() {
            let rc = entry("MPI_Panic_test", None, || panic!("boom"));
            // Without a runtime every error is fatal: `raise` exits before this line.
            unreachable!("returned {rc}");
        }
        let exe = std::env::current_exe().expect("test binary");
        let out = std::process::Command::new(exe)
            .args([
                "--exact",
                "entry::tests::a_panic_becomes_mpi_err_intern_and_never_unwinds",
                "--nocapture",
            ])
            .env("TSUNAGI_CABI_PANIC_CHILD", "1")
            .output()
            .expect("run child");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains("MPI_Panic_test: internal error: boom (Internal MPI error)"),
            "{stderr}"
        );
    }
}
