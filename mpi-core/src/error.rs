//! MPI error classes (with MPICH's numbers, so the C ABI passes them through unchanged),
//! the error type every fallible core call returns, and error strings.

use std::fmt;

/// An MPI error class. Values are MPICH's, which the C ABI exposes as they are.
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    Success = 0,
    Buffer = 1,
    Count = 2,
    Type = 3,
    Tag = 4,
    Comm = 5,
    Rank = 6,
    Root = 7,
    Group = 8,
    Op = 9,
    Topology = 10,
    Dims = 11,
    Arg = 12,
    Unknown = 13,
    Truncate = 14,
    Other = 15,
    Intern = 16,
    InStatus = 17,
    Pending = 18,
    Request = 19,
    Info = 28,
    InfoKey = 29,
    InfoValue = 30,
    InfoNokey = 31,
    Name = 33,
    NoMem = 34,
    NotSame = 35,
    UnsupportedOperation = 44,
    Win = 45,
    Base = 46,
    LockType = 47,
    Keyval = 48,
    RmaConflict = 49,
    RmaSync = 50,
    Size = 51,
    Disp = 52,
    Assert = 53,
    RmaRange = 55,
    RmaAttach = 56,
    RmaShared = 57,
    RmaFlavor = 58,
    ProcAborted = 76,
    ValueTooLarge = 77,
}

impl ErrorClass {
    /// All classes this implementation raises, for iteration in tests and the C ABI.
    pub const ALL: &'static [ErrorClass] = &[
        ErrorClass::Success,
        ErrorClass::Buffer,
        ErrorClass::Count,
        ErrorClass::Type,
        ErrorClass::Tag,
        ErrorClass::Comm,
        ErrorClass::Rank,
        ErrorClass::Root,
        ErrorClass::Group,
        ErrorClass::Op,
        ErrorClass::Topology,
        ErrorClass::Dims,
        ErrorClass::Arg,
        ErrorClass::Unknown,
        ErrorClass::Truncate,
        ErrorClass::Other,
        ErrorClass::Intern,
        ErrorClass::InStatus,
        ErrorClass::Pending,
        ErrorClass::Request,
        ErrorClass::Info,
        ErrorClass::InfoKey,
        ErrorClass::InfoValue,
        ErrorClass::InfoNokey,
        ErrorClass::Name,
        ErrorClass::NoMem,
        ErrorClass::NotSame,
        ErrorClass::UnsupportedOperation,
        ErrorClass::Win,
        ErrorClass::Base,
        ErrorClass::LockType,
        ErrorClass::Keyval,
        ErrorClass::RmaConflict,
        ErrorClass::RmaSync,
        ErrorClass::Size,
        ErrorClass::Disp,
        ErrorClass::Assert,
        ErrorClass::RmaRange,
        ErrorClass::RmaAttach,
        ErrorClass::RmaShared,
        ErrorClass::RmaFlavor,
        ErrorClass::ProcAborted,
        ErrorClass::ValueTooLarge,
    ];

    /// The class with MPICH's number `code`, if it is one we know.
    pub fn from_code(code: i32) -> Option<ErrorClass> {
        Self::ALL.iter().copied().find(|c| *c as i32 == code)
    }

    /// The standard one-line description of the class (what MPI_Error_string gives for a
    /// bare class code).
    pub fn description(self) -> &'static str {
        use ErrorClass::*;
        match self {
            Success => "No MPI error",
            Buffer => "Invalid buffer pointer",
            Count => "Invalid count",
            Type => "Invalid datatype",
            Tag => "Invalid tag",
            Comm => "Invalid communicator",
            Rank => "Invalid rank",
            Root => "Invalid root",
            Group => "Invalid group",
            Op => "Invalid MPI_Op",
            Topology => "Invalid topology",
            Dims => "Invalid dimension argument",
            Arg => "Invalid argument",
            Unknown => "Unknown error",
            Truncate => "Message truncated",
            Other => "Other MPI error",
            Intern => "Internal MPI error",
            InStatus => "See the MPI_ERROR field in MPI_Status for the error code",
            Pending => "Pending request (no error)",
            Request => "Invalid MPI_Request",
            Info => "Invalid MPI_Info",
            InfoKey => "Invalid key for MPI_Info",
            InfoValue => "Invalid MPI_Info value",
            InfoNokey => "MPI_Info key is not defined",
            Name => "Invalid service name",
            NoMem => "Out of memory",
            NotSame => "Collective argument not identical on all processes",
            UnsupportedOperation => "Unsupported operation",
            Win => "Invalid MPI_Win",
            Base => "Invalid base address",
            LockType => "Invalid lock type",
            Keyval => "Invalid keyval",
            RmaConflict => "Conflicting accesses to window",
            RmaSync => "Wrong synchronization of RMA calls",
            Size => "Invalid size argument",
            Disp => "Invalid displacement argument",
            Assert => "Invalid assert argument",
            RmaRange => "Target memory is not part of the window",
            RmaAttach => "Memory cannot be attached",
            RmaShared => "Memory cannot be shared",
            RmaFlavor => "Passed window has the wrong flavor for the called function",
            ProcAborted => "Communication with an aborted process",
            ValueTooLarge => "Value is too large to store",
        }
    }
}

/// An MPI error: its class and one message naming the call and the argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MpiError {
    pub class: ErrorClass,
    pub message: String,
}

impl MpiError {
    /// An error of `class` with `message` (which should name the call and the argument,
    /// e.g. "MPI_Send: invalid rank 7 (communicator size 4)").
    pub fn new(class: ErrorClass, message: impl Into<String>) -> MpiError {
        MpiError {
            class,
            message: message.into(),
        }
    }
}

impl fmt::Display for MpiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.class.description())
    }
}

impl std::error::Error for MpiError {}

/// Result of a core call.
pub type MpiResult<T> = Result<T, MpiError>;

/// Shorthand: `Err(MpiError::new(class, format!(...)))`.
#[macro_export]
macro_rules! mpi_bail {
    ($class:ident, $($fmt:tt)*) => {
        return Err($crate::error::MpiError::new(
            $crate::error::ErrorClass::$class,
            format!($($fmt)*),
        ))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_match_mpich() {
        for &c in ErrorClass::ALL {
            assert_eq!(ErrorClass::from_code(c as i32), Some(c));
        }
        assert_eq!(ErrorClass::Truncate as i32, 14);
        assert_eq!(ErrorClass::UnsupportedOperation as i32, 44);
        assert_eq!(ErrorClass::from_code(9999), None);
    }
}
