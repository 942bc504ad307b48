//! The error type of every fallible call.

use std::fmt;

pub use tsunagi_core::ErrorClass;
use tsunagi_core::MpiError;

/// An MPI error: its class (MPICH's numbering) and a message naming the call and the
/// offending argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error(MpiError);

impl Error {
    /// An error of `class` with `message`.
    pub fn new(class: ErrorClass, message: impl Into<String>) -> Error {
        Error(MpiError::new(class, message))
    }
    /// The MPI error class.
    pub fn class(&self) -> ErrorClass {
        self.0.class
    }
    /// The message (without the class description).
    pub fn message(&self) -> &str {
        &self.0.message
    }
    /// The core's error value.
    pub fn into_inner(self) -> MpiError {
        self.0
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for Error {}

impl From<MpiError> for Error {
    fn from(e: MpiError) -> Error {
        Error(e)
    }
}

/// Result of a Tsunagi call.
pub type Result<T> = std::result::Result<T, Error>;
