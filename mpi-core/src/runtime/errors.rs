//! Error handlers and MPI_Abort.

use super::*;

impl Runtime {
    /// The error handler of a communicator.
    pub fn get_errhandler(&self, comm: CommId) -> MpiResult<ErrHandler> {
        self.with_comm("MPI_Comm_get_errhandler", comm, |c| c.errhandler.clone())
    }

    /// MPI_Comm_set_errhandler.
    pub fn set_errhandler(&self, comm: CommId, h: ErrHandler) -> MpiResult<()> {
        let mut e = self.lock();
        self.check_comm(&e, "MPI_Comm_set_errhandler", comm)?;
        e.comms_mut().get_mut(comm).expect("checked").errhandler = h;
        Ok(())
    }

    /// Route an error through the communicator's handler (MPI_COMM_WORLD's when the call
    /// has none): fatal prints one line and aborts the job; otherwise the error code is
    /// returned after a user handler ran.
    pub fn handle_error(&self, comm: Option<CommId>, err: &MpiError) -> i32 {
        self.call_errhandler(comm, err.class as i32, err)
    }

    /// Route error `code` (a class, or a code made by MPI_Add_error_code) through the
    /// handler of `comm`: the code given to a user handler and returned is `code` itself.
    pub fn call_errhandler(&self, comm: Option<CommId>, code: i32, err: &MpiError) -> i32 {
        let c = comm.unwrap_or(CommId::WORLD);
        let h = {
            let e = self.lock();
            e.comms()
                .get(c)
                .or_else(|| e.comms().get(CommId::WORLD))
                .map(|c| c.errhandler.clone())
                .unwrap_or(ErrHandler::Fatal)
        };
        match h {
            ErrHandler::Return => code,
            ErrHandler::User(_, f) => {
                f(c, code);
                code
            }
            ErrHandler::Fatal | ErrHandler::Abort => {
                eprintln!("Tsunagi: fatal error on rank {}: {err}", self.rank);
                // The launcher recognises this prefix and reports a fatal error of the
                // call, not a program that called MPI_Abort.
                let msg = format!(
                    "fatal error in {} ({})",
                    err.message,
                    err.class.description()
                );
                self.abort(code.clamp(1, 255), &msg)
            }
        }
    }

    /// MPI_Abort: end the whole job. Never returns.
    pub fn abort(&self, code: i32, msg: &str) -> ! {
        if let Ok(mut b) = self.boot.lock() {
            b.abort(code, msg);
        }
        std::process::exit(if code == 0 { 1 } else { code & 0xff });
    }
}
