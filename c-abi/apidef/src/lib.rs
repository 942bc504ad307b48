//! The parser of `c-abi/api.in`, the one declarative table of Tsunagi's MPI API.
//!
//! Job: turn the table's lines into [`Func`]s whose arguments carry both their C
//! declaration and their [`Kind`] (what the argument *is* to a binding: a handle of which
//! class, a count, a choice buffer, a status, a string with its length, an array with its
//! length expression, in or out). The C generator (entry points, `mpi.h`, coverage) and
//! the Fortran generator (`mpif.h`, the `mpi` and `mpi_f08` modules, the `mpi_x_` entry
//! points) in `c-abi/build.rs` both read it. Boundary: no code generation here.
//!
//! Line syntax (see the head of `api.in`): `RET Name(TYPE arg{annotations}, ...)`,
//! `stub RET Name(...)`, `missing Name ...: reason`, `== Section`. Annotations are comma
//! separated words, `len=EXPR` for the length of an array (a C expression over the other
//! arguments, `*` meaning "read through the pointer").

use std::collections::BTreeSet;

/// How an argument is passed, as a binding for another language must know it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A handle passed by value; the class is the C type without `MPI_` (`Comm`, ...).
    Handle(String),
    /// A scalar passed by value (`int`, `MPI_Aint`, `MPI_Count`, `MPI_Fint`, `double`).
    Scalar(String),
    /// A pointer to one scalar or handle (`base` is the C type), read and/or written.
    Ref { base: String, intent: Intent },
    /// An array of scalars or handles; `len` is its length expression when known.
    Array {
        base: String,
        intent: Intent,
        len: Option<String>,
    },
    /// A choice buffer (`void *`): MPI_BOTTOM and MPI_IN_PLACE are recognised.
    Buffer { intent: Intent },
    /// One `MPI_Status`.
    Status { intent: Intent },
    /// An array of statuses (MPI_STATUSES_IGNORE recognised).
    Statuses,
    /// A NUL-terminated input string (Fortran: blank padded, with a hidden length).
    StrIn,
    /// An output string buffer (Fortran: blank padded, with a hidden length).
    StrOut,
    /// A callback (function pointer typedef).
    Callback(String),
    /// `argc`/`argv` of MPI_Init, absent outside C.
    CArgs,
    /// `...`
    Varargs,
    /// Anything else, passed through as the C declaration says.
    Other,
}

/// Data direction of a pointer argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Intent {
    In,
    Out,
    InOut,
}

/// One argument.
#[derive(Clone, Debug)]
pub struct Arg {
    /// The C declaration as written (without annotations).
    pub c: String,
    pub name: String,
    /// The C type without `const` and stars.
    pub base: String,
    pub konst: bool,
    /// Pointer depth (stars plus array brackets).
    pub depth: usize,
    pub is_array: bool,
    /// Inner fixed array, as in `int ranges[][3]`.
    pub fixed: Option<String>,
    /// The annotation words (`len=...` excluded).
    pub ann: BTreeSet<String>,
    pub varargs: bool,
    pub kind: Kind,
    /// A Fortran LOGICAL (a C int holding 0 or 1).
    pub logical: bool,
}

impl Arg {
    pub fn has(&self, word: &str) -> bool {
        self.ann.contains(word)
    }
}

/// One function of the table.
#[derive(Clone, Debug)]
pub struct Func {
    /// Exported, but returns MPI_ERR_UNSUPPORTED_OPERATION.
    pub stub: bool,
    pub ret: String,
    /// The name without `MPI_` (`Comm_rank`).
    pub name: String,
    pub args: Vec<Arg>,
    pub section: String,
    /// `narrow RET Name(...) = Base`: a large-count (`_c`) form whose entry point checks
    /// that its MPI_Count arguments fit the `int` (or MPI_Aint) ones of `Base` and calls it.
    pub narrow_of: Option<String>,
    /// `persistent RET Name_init(..., MPI_Info info, MPI_Request *request) = Base`: a
    /// persistent collective whose every start runs the non-blocking `Base` (`Ibcast`) on
    /// the arguments given at initialization.
    pub persistent_of: Option<String>,
}

impl Func {
    /// Whether Fortran has this function: the handle conversions, the C-only tools
    /// interface (`MPI_T_*`), C's views of the Fortran 2008 status and
    /// MPI_Info_create_env (main's argc/argv) do not.
    pub fn in_fortran(&self) -> bool {
        !(self.name.ends_with("_c2f")
            || self.name.ends_with("_f2c")
            || self.is_tools()
            // C's views of the Fortran 2008 status, and main's argc/argv (MPI 4.0).
            || self.name.contains("f08")
            || self.name == "Info_create_env"
            // Fortran's MPI_DUP_FN is written by hand (c-abi/src/fortran.rs).
            || self.name == "DUP_FN")
    }

    /// For the sessions calls (MPI 4.0), how the entry point finds the session whose
    /// error handler reports its errors: `Some(Some(arg))` names the session argument
    /// (by value or through a pointer), `Some(None)` for MPI_Session_init (none yet).
    pub fn session_arg(&self) -> Option<Option<&Arg>> {
        if !(self.name.starts_with("Session_") || self.name == "Group_from_session_pset") {
            return None;
        }
        Some(
            self.args
                .iter()
                .find(|a| a.base == "MPI_Session" && !a.varargs),
        )
    }

    /// A function of the tools interface (`MPI_T_*`): it returns its error code without
    /// calling an error handler, and works outside MPI_Init/MPI_Finalize.
    pub fn is_tools(&self) -> bool {
        self.name.starts_with("T_")
    }
}

/// A `missing` line.
#[derive(Clone, Debug)]
pub struct Missing {
    pub names: Vec<String>,
    pub reason: String,
}

/// Handle types (by value: decoded through a table).
pub const HANDLES: &[&str] = &[
    "MPI_Comm",
    "MPI_Datatype",
    "MPI_Group",
    "MPI_Op",
    "MPI_Errhandler",
    "MPI_Info",
    "MPI_Request",
    "MPI_Message",
    "MPI_Win",
    "MPI_File",
];
/// Scalar types.
pub const SCALARS: &[&str] = &[
    "int",
    "MPI_Aint",
    "MPI_Count",
    "MPI_Fint",
    "MPI_Offset",
    "double",
];

fn kind_of(a: &Arg, len: Option<String>) -> Kind {
    if a.varargs {
        return Kind::Varargs;
    }
    if a.ann.contains("cargs") {
        return Kind::CArgs;
    }
    let intent = if a.ann.contains("inout") {
        Intent::InOut
    } else if a.konst || a.ann.contains("in") {
        Intent::In
    } else {
        Intent::Out
    };
    let base = a.base.as_str();
    if (base.ends_with("_function") || base.ends_with("_function_c")) && a.depth == 1 {
        return Kind::Callback(base.to_string());
    }
    if a.depth == 0 {
        if HANDLES.contains(&base) {
            return Kind::Handle(base.trim_start_matches("MPI_").to_string());
        }
        if SCALARS.contains(&base) {
            return Kind::Scalar(base.to_string());
        }
        return Kind::Other;
    }
    match base {
        "void" if a.depth == 1 => Kind::Buffer { intent },
        "MPI_Status" if a.is_array => Kind::Statuses,
        "MPI_Status" if a.depth == 1 => Kind::Status {
            intent: if a.ann.contains("inout") {
                Intent::InOut
            } else if a.konst {
                Intent::In
            } else {
                Intent::Out
            },
        },
        "char" if a.depth == 1 && a.konst => Kind::StrIn,
        "char" if a.depth == 1 => Kind::StrOut,
        b if (SCALARS.contains(&b) || HANDLES.contains(&b)) && a.depth == 1 => {
            if a.is_array {
                Kind::Array {
                    base: b.to_string(),
                    intent,
                    len,
                }
            } else {
                Kind::Ref {
                    base: b.to_string(),
                    intent,
                }
            }
        }
        _ => Kind::Other,
    }
}

/// Parse one argument declaration with its `{annotations}`.
pub fn parse_arg(text: &str) -> Arg {
    let text = text.trim();
    if text == "..." {
        return Arg {
            c: "...".into(),
            name: String::new(),
            base: String::new(),
            konst: false,
            depth: 0,
            is_array: false,
            fixed: None,
            ann: BTreeSet::new(),
            varargs: true,
            kind: Kind::Varargs,
            logical: false,
        };
    }
    let mut len = None;
    let (decl, ann) = match text.find('{') {
        Some(i) => {
            let a = text[i + 1..].trim_end_matches('}');
            let mut words = BTreeSet::new();
            for w in a.split(';').flat_map(|s| s.split(',')) {
                let w = w.trim();
                if let Some(l) = w.strip_prefix("len=") {
                    len = Some(l.to_string());
                } else if !w.is_empty() {
                    words.insert(w.to_string());
                }
            }
            (text[..i].trim().to_string(), words)
        }
        None => (text.to_string(), BTreeSet::new()),
    };
    let mut rest = decl.clone();
    let mut dims = Vec::new();
    while rest.ends_with(']') {
        let open = rest.rfind('[').expect("balanced brackets");
        dims.push(rest[open + 1..rest.len() - 1].to_string());
        rest.truncate(open);
    }
    dims.reverse();
    let name_start = rest
        .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
        .map(|i| i + 1)
        .unwrap_or(0);
    let name = rest[name_start..].to_string();
    let ty = rest[..name_start].trim();
    let stars = ty.matches('*').count();
    let ty = ty.replace('*', " ");
    let mut words: Vec<&str> = ty.split_whitespace().collect();
    let konst = words.first() == Some(&"const");
    words.retain(|w| *w != "const");
    let base = words.join(" ");
    let fixed = dims.get(1).cloned();
    let is_array = !dims.is_empty() || ann.contains("array");
    let logical = ann.contains("logical");
    let mut arg = Arg {
        c: decl,
        name,
        base,
        konst,
        depth: stars + usize::from(!dims.is_empty()),
        is_array,
        fixed,
        ann,
        varargs: false,
        kind: Kind::Other,
        logical,
    };
    arg.kind = kind_of(&arg, len);
    arg
}

/// Parse the whole table; panics with the line number on a malformed line, and on a
/// function listed twice or both implemented and missing.
pub fn parse(table: &str) -> (Vec<Func>, Vec<Missing>) {
    let mut funcs: Vec<Func> = Vec::new();
    let mut missing = Vec::new();
    let mut section = String::from("General");
    for (lineno, line) in table.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(s) = line.strip_prefix("==") {
            section = s.trim().to_string();
            continue;
        }
        if let Some(m) = line.strip_prefix("missing ") {
            let (names, reason) = m.split_once(':').expect("missing NAMES: reason");
            missing.push(Missing {
                names: names.split_whitespace().map(String::from).collect(),
                reason: reason.trim().to_string(),
            });
            continue;
        }
        let (stub, line) = match line.strip_prefix("stub ") {
            Some(rest) => (true, rest),
            None => (false, line),
        };
        let (narrow_of, line) = match line.strip_prefix("narrow ") {
            Some(rest) => {
                let (decl, base) = rest
                    .rsplit_once(" = ")
                    .unwrap_or_else(|| panic!("api.in:{}: narrow ... = Base", lineno + 1));
                (Some(base.trim().to_string()), decl)
            }
            None => (None, line),
        };
        let (persistent_of, line) = match line.strip_prefix("persistent ") {
            Some(rest) => {
                let (decl, base) = rest
                    .rsplit_once(" = ")
                    .unwrap_or_else(|| panic!("api.in:{}: persistent ... = Base", lineno + 1));
                (Some(base.trim().to_string()), decl)
            }
            None => (None, line),
        };
        let open = line
            .find('(')
            .unwrap_or_else(|| panic!("api.in:{}: no '('", lineno + 1));
        let head = &line[..open];
        let (ret, name) = head.trim().rsplit_once(' ').expect("RET Name(");
        let body = line[open + 1..]
            .trim_end()
            .strip_suffix(')')
            .unwrap_or_else(|| panic!("api.in:{}: does not end with ')'", lineno + 1));
        let args = if body.trim().is_empty() {
            Vec::new()
        } else {
            split_args(body).iter().map(|s| parse_arg(s)).collect()
        };
        funcs.push(Func {
            stub,
            ret: ret.trim().to_string(),
            name: name.to_string(),
            args,
            section: section.clone(),
            narrow_of,
            persistent_of,
        });
    }
    let mut seen = BTreeSet::new();
    for f in &funcs {
        assert!(
            seen.insert(f.name.clone()),
            "api.in: {} listed twice",
            f.name
        );
    }
    for m in &missing {
        for n in &m.names {
            assert!(
                !seen.contains(n),
                "api.in: {n} is both implemented and missing"
            );
        }
    }
    (funcs, missing)
}

/// Split an argument list at the commas outside `{}` (annotations hold commas too).
fn split_args(body: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut cur = String::new();
    for c in body.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    out.push(cur);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_follow_from_the_c_types_and_annotations() {
        let (f, _) = parse(
            "== S\nint Waitsome(int incount{count}, MPI_Request array_of_requests[]{inout}, int *outcount, int array_of_indices[]{findex, len=*outcount}, MPI_Status *array_of_statuses{array})\n\
             int Comm_set_name(MPI_Comm comm, const char *comm_name)\n\
             int Test(MPI_Request *request{inout}, int *flag{logical}, MPI_Status *status)\n",
        );
        let w = &f[0];
        assert_eq!(w.args[0].kind, Kind::Scalar("int".into()));
        assert!(w.args[0].has("count"));
        assert_eq!(
            w.args[1].kind,
            Kind::Array {
                base: "MPI_Request".into(),
                intent: Intent::InOut,
                len: None
            }
        );
        assert_eq!(
            w.args[2].kind,
            Kind::Ref {
                base: "int".into(),
                intent: Intent::Out
            }
        );
        assert_eq!(
            w.args[3].kind,
            Kind::Array {
                base: "int".into(),
                intent: Intent::Out,
                len: Some("*outcount".into())
            }
        );
        assert!(w.args[3].has("findex"));
        assert_eq!(w.args[4].kind, Kind::Statuses);
        assert_eq!(f[1].args[0].kind, Kind::Handle("Comm".into()));
        assert_eq!(f[1].args[1].kind, Kind::StrIn);
        assert!(f[2].args[1].logical);
        assert_eq!(
            f[2].args[2].kind,
            Kind::Status {
                intent: Intent::Out
            }
        );
        assert_eq!(
            f[2].args[0].kind,
            Kind::Ref {
                base: "MPI_Request".into(),
                intent: Intent::InOut
            }
        );
    }

    #[test]
    #[should_panic(expected = "listed twice")]
    fn a_function_listed_twice_is_rejected() {
        parse("int Barrier(MPI_Comm comm)\nint Barrier(MPI_Comm comm)\n");
    }
}
