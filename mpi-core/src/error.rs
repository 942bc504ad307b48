//! MPI error classes (with MPICH's numbers, so the C ABI passes them through unchanged),
//! the error type every fallible core call returns, and error strings.

use std::fmt;

/// An MPI error class: every class the MPI standard defines up to MPI 4.1 (MPI-3.1's
/// I/O, RMA, dynamic-process and tools-interface classes included), with MPICH's numbers
/// so that the C ABI passes them through unchanged. Classes added by the program
/// (MPI_Add_error_class) lie above [`LAST_CODE`] and are kept by the C library.
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
    Access = 20,
    Amode = 21,
    BadFile = 22,
    Conversion = 23,
    DupDatarep = 24,
    FileExists = 25,
    FileInUse = 26,
    File = 27,
    Info = 28,
    InfoKey = 29,
    InfoValue = 30,
    InfoNokey = 31,
    Io = 32,
    Name = 33,
    NoMem = 34,
    NotSame = 35,
    NoSpace = 36,
    NoSuchFile = 37,
    Port = 38,
    Quota = 39,
    ReadOnly = 40,
    Service = 41,
    Spawn = 42,
    UnsupportedDatarep = 43,
    UnsupportedOperation = 44,
    Win = 45,
    Base = 46,
    Locktype = 47,
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
    TMemory = 59,
    TNotInitialized = 60,
    TCannotInit = 61,
    TInvalidIndex = 62,
    TInvalidItem = 63,
    TInvalidHandle = 64,
    TOutOfHandles = 65,
    TOutOfSessions = 66,
    TInvalidSession = 67,
    TCvarSetNotNow = 68,
    TCvarSetNever = 69,
    TPvarNoStartstop = 70,
    TPvarNoWrite = 71,
    TPvarNoAtomic = 72,
    TInvalidName = 73,
    TInvalid = 74,
    Session = 75,
    ProcAborted = 76,
    ValueTooLarge = 77,
    TNotSupported = 78,
    /// MPI 4.1: an error handler of the wrong kind for the object (MPI_ERR_ERRHANDLER).
    Errhandler = 79,
}

/// MPI_ERR_LASTCODE: the last value of a predefined error code (MPICH's). Classes and
/// codes made by MPI_Add_error_class/MPI_Add_error_code are above it.
pub const LAST_CODE: i32 = 0x3fff_ffff;

impl ErrorClass {
    /// Every predefined class, in numeric order.
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
        ErrorClass::Access,
        ErrorClass::Amode,
        ErrorClass::BadFile,
        ErrorClass::Conversion,
        ErrorClass::DupDatarep,
        ErrorClass::FileExists,
        ErrorClass::FileInUse,
        ErrorClass::File,
        ErrorClass::Info,
        ErrorClass::InfoKey,
        ErrorClass::InfoValue,
        ErrorClass::InfoNokey,
        ErrorClass::Io,
        ErrorClass::Name,
        ErrorClass::NoMem,
        ErrorClass::NotSame,
        ErrorClass::NoSpace,
        ErrorClass::NoSuchFile,
        ErrorClass::Port,
        ErrorClass::Quota,
        ErrorClass::ReadOnly,
        ErrorClass::Service,
        ErrorClass::Spawn,
        ErrorClass::UnsupportedDatarep,
        ErrorClass::UnsupportedOperation,
        ErrorClass::Win,
        ErrorClass::Base,
        ErrorClass::Locktype,
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
        ErrorClass::TMemory,
        ErrorClass::TNotInitialized,
        ErrorClass::TCannotInit,
        ErrorClass::TInvalidIndex,
        ErrorClass::TInvalidItem,
        ErrorClass::TInvalidHandle,
        ErrorClass::TOutOfHandles,
        ErrorClass::TOutOfSessions,
        ErrorClass::TInvalidSession,
        ErrorClass::TCvarSetNotNow,
        ErrorClass::TCvarSetNever,
        ErrorClass::TPvarNoStartstop,
        ErrorClass::TPvarNoWrite,
        ErrorClass::TPvarNoAtomic,
        ErrorClass::TInvalidName,
        ErrorClass::TInvalid,
        ErrorClass::Session,
        ErrorClass::ProcAborted,
        ErrorClass::ValueTooLarge,
        ErrorClass::TNotSupported,
        ErrorClass::Errhandler,
    ];

    /// The class with MPICH's number `code`, if it is a predefined one.
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
            Access => "Permission denied",
            Amode => "Invalid file access mode",
            BadFile => "Invalid file name",
            Conversion => "Error in a data conversion function",
            DupDatarep => "Data representation already registered",
            FileExists => "File exists",
            FileInUse => "File is in use by some process",
            File => "Invalid MPI_File",
            Info => "Invalid MPI_Info",
            InfoKey => "Invalid key for MPI_Info",
            InfoValue => "Invalid MPI_Info value",
            InfoNokey => "MPI_Info key is not defined",
            Io => "Other I/O error",
            Name => "Invalid service name",
            NoMem => "Out of memory",
            NotSame => "Collective argument not identical on all processes",
            NoSpace => "Not enough space",
            NoSuchFile => "File does not exist",
            Port => "Invalid port name",
            Quota => "Quota exceeded",
            ReadOnly => "Read-only file or file system",
            Service => "Service name not published or already unpublished",
            Spawn => "Error in spawning processes",
            UnsupportedDatarep => "Unsupported data representation",
            UnsupportedOperation => "Unsupported operation",
            Win => "Invalid MPI_Win",
            Base => "Invalid base address",
            Locktype => "Invalid lock type",
            Keyval => "Invalid keyval",
            RmaConflict => "Conflicting accesses to a window",
            RmaSync => "Wrong synchronization of RMA calls",
            Size => "Invalid size argument",
            Disp => "Invalid displacement argument",
            Assert => "Invalid assert argument",
            RmaRange => "Target memory is outside the window",
            RmaAttach => "Memory cannot be attached to the window",
            RmaShared => "Memory cannot be shared",
            RmaFlavor => "Wrong flavor of window for this call",
            TMemory => "MPI_T: out of memory",
            TNotInitialized => "MPI_T: the tools interface is not initialized",
            TCannotInit => "MPI_T: the tools interface cannot be initialized now",
            TInvalidIndex => "MPI_T: invalid or deleted index",
            TInvalidItem => "MPI_T: item index out of range",
            TInvalidHandle => "MPI_T: invalid handle",
            TOutOfHandles => "MPI_T: no more handles available",
            TOutOfSessions => "MPI_T: no more sessions available",
            TInvalidSession => "MPI_T: invalid session",
            TCvarSetNotNow => "MPI_T: the control variable cannot be set now",
            TCvarSetNever => "MPI_T: the control variable can no longer be set",
            TPvarNoStartstop => "MPI_T: the performance variable cannot be started or stopped",
            TPvarNoWrite => "MPI_T: the performance variable cannot be written or reset",
            TPvarNoAtomic => {
                "MPI_T: the performance variable cannot be read and written atomically"
            }
            TInvalidName => "MPI_T: no variable or category of that name",
            TInvalid => "MPI_T: invalid use of the tools interface",
            Session => "Invalid session",
            ProcAborted => "Communication with an aborted process",
            ValueTooLarge => "Value is too large to store",
            TNotSupported => "MPI_T: requested functionality not supported",
            Errhandler => "Invalid error handler for this object",
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
        assert_eq!(
            ErrorClass::from_code(54),
            None,
            "54 is not a class in MPICH"
        );
        assert_eq!(ErrorClass::RmaFlavor as i32, 58);
        assert_eq!(ErrorClass::Win as i32, 45);
        assert_eq!(ErrorClass::ALL.len(), 79);
        let mut seen = std::collections::HashSet::new();
        for &c in ErrorClass::ALL {
            assert!(seen.insert(c.description()), "{c:?} shares its description");
            assert!(!c.description().is_empty());
        }
    }
}
