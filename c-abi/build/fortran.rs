//! The Fortran half of the generator: from the same table as the C entry points it writes
//! the gfortran-convention entry points (`mpi_send_` and MPICH's other spellings, all
//! arguments by reference, `ierror` last, hidden string lengths after it), `mpif.h`, and
//! the sources of the `mpi` and `mpi_f08` modules (compiled with gfortran at install time).

use std::fmt::Write as _;

use tsunagi_apidef::{Arg, Func, Kind};

use crate::rust_type;

/// The Rust expression of a length given in the table (`count`, `*outcount`): every
/// Fortran argument is a pointer, so both read through it.
fn len_expr(e: &str) -> String {
    let name = e.trim_start_matches('*');
    format!("(*{name}).max(0) as usize")
}

/// Fortran string arrays of the spawn calls: argv (`{fargv}`), commands (`{fstrs}`), argvs
/// (`{fargvs}`): CHARACTER*(*) arrays with one hidden length.
fn is_str_array(a: &Arg) -> bool {
    a.has("fargv") || a.has("fstrs") || a.has("fargvs")
}

/// Whether an argument is followed by a hidden length in Fortran.
fn has_hidden_len(a: &Arg) -> bool {
    matches!(a.kind, Kind::StrIn | Kind::StrOut) || is_str_array(a)
}

/// MPI_Session is an `int` handle in C that the table's handle list does not decode (the
/// sessions calls check it themselves); in Fortran it is an INTEGER like the others.
fn is_session(a: &Arg) -> bool {
    a.base == "MPI_Session" && !a.varargs
}

fn fortran_param_type(a: &Arg) -> String {
    if is_str_array(a) {
        return "*const c_char".into();
    }
    if is_session(a) {
        return if a.depth == 0 {
            "*const MPI_Fint".into()
        } else {
            "*mut MPI_Fint".into()
        };
    }
    match &a.kind {
        Kind::Handle(_) => "*const MPI_Fint".into(),
        Kind::Scalar(t) if a.has("fint") => {
            let _ = t;
            "*const MPI_Fint".into()
        }
        Kind::Scalar(t) => format!("*const {}", crate::rust_base(t)),
        Kind::Ref { .. } if a.has("fint") => "*mut MPI_Fint".into(),
        Kind::Ref { base, .. } if base == "MPI_File" => "*mut MPI_Fint".into(),
        Kind::Array { .. } if a.has("fint") => "*const MPI_Fint".into(),
        Kind::Buffer { .. } if a.has("attr_in") || a.has("attr_out") => "*mut c_void".into(),
        Kind::StrIn | Kind::StrOut => "*mut c_char".into(),
        Kind::Other => "*mut c_void".into(),
        _ => rust_type(a),
    }
}

/// Whether an argument is a choice buffer (TYPE(*), DIMENSION(..) in MPICH's mpi_f08).
fn is_choice(a: &Arg) -> bool {
    matches!(a.kind, Kind::Buffer { .. })
        && !(a.has("attr_in") || a.has("attr_out") || a.has("ftemp") || a.has("cptr"))
}

/// Whether a function takes a choice buffer (MPICH names its mpi_f08 form `_f08ts`).
pub fn has_choice(f: &Func) -> bool {
    f.args.iter().any(is_choice)
}

/// One Fortran entry point: `pmpi_x_` (the other spellings are aliases), or with
/// `descriptors` MPICH's `pmpi_x_f08ts_`, whose choice buffers arrive as gfortran array
/// descriptors (assumed-rank dummies of MPICH's mpi_f08 module).
fn entry(f: &Func, descriptors: bool, out: &mut String) {
    let lname = f.name.to_lowercase();
    let mut params = Vec::new();
    let mut lens = Vec::new();
    let mut pre = Vec::new();
    let mut pass = Vec::new();
    let mut post = Vec::new();
    let keyval = f
        .args
        .iter()
        .find(|a| a.name.ends_with("keyval") && matches!(a.kind, Kind::Scalar(_)))
        .map(|a| a.name.clone());
    for a in &f.args {
        let n = &a.name;
        match &a.kind {
            Kind::Varargs => continue,
            Kind::CArgs => {
                pass.push("core::ptr::null_mut()".to_string());
                continue;
            }
            _ => {}
        }
        let unused = a.has("ftemp");
        let u = if unused { "_" } else { "" };
        params.push(format!("{u}{n}: {}", fortran_param_type(a)));
        if is_str_array(a) {
            lens.push(format!("{n}_len: usize"));
            pre.push(if a.has("fargv") {
                format!("let mut {n}_c = f::argv_in({n}, {n}_len);")
            } else if a.has("fstrs") {
                format!("let mut {n}_c = f::strs_in({n}, *count, {n}_len);")
            } else {
                format!("let mut {n}_c = f::argvs_in({n}, *count, {n}_len);")
            });
            pass.push(format!("{n}_c.as_ptr()"));
            continue;
        }
        if a.has("ferrcodes") {
            pass.push(format!("f::errcodes({n})"));
            continue;
        }
        if is_session(a) {
            pass.push(if a.depth == 0 {
                format!("*{n}")
            } else {
                n.clone()
            });
            continue;
        }
        match &a.kind {
            // MPI_Grequest_start from Fortran: the procedures take their arguments by
            // reference with an ierror, so the library gets C trampolines and a record of
            // the Fortran procedures as its extra state (c-abi/src/fortran.rs).
            _ if a.has("fgreq") => pass.push(match n.as_str() {
                "query_fn" => "f::GREQ_QUERY".into(),
                "free_fn" => "f::GREQ_FREE".into(),
                "cancel_fn" => "f::GREQ_CANCEL".into(),
                _ => format!("f::greq_state(query_fn, free_fn, cancel_fn, {n})"),
            }),
            // MPI_File is a pointer in C and an INTEGER in Fortran (MPI_File_f2c).
            Kind::Handle(class) if class == "File" => {
                pass.push(format!("crate::imp::file_f2c(*{n})"))
            }
            Kind::Ref { base, .. } if base == "MPI_File" => {
                pre.push(format!(
                    "let mut {n}_c: MPI_File = crate::imp::file_f2c(*{n});"
                ));
                pass.push(format!("&mut {n}_c"));
                post.push(format!(
                    "if rc == MPI_SUCCESS {{ *{n} = crate::imp::file_c2f({n}_c); }}"
                ));
            }
            Kind::Handle(_) => pass.push(format!("*{n}")),
            Kind::Scalar(_) if a.has("fint") => pass.push(format!("MPI_Aint::from(*{n})")),
            Kind::Scalar(_) if keyval.as_deref() == Some(n.as_str()) => {
                pass.push(format!("f::attr_key(*{n})"))
            }
            Kind::Scalar(_) => pass.push(format!("*{n}")),
            Kind::Ref { .. } if a.has("fint") => {
                pre.push(format!("let mut {n}_wide: MPI_Aint = 0;"));
                pass.push(format!("&mut {n}_wide"));
                post.push(format!(
                    "if rc == MPI_SUCCESS {{ *{n} = f::narrow({n}_wide); }}"
                ));
            }
            Kind::Ref { .. } => {
                pass.push(n.clone());
                if a.has("findex") {
                    post.push(format!("if rc == MPI_SUCCESS {{ f::one_based({n}, 1); }}"));
                }
            }
            Kind::Array { len, .. } => {
                let len = len.as_deref().map(len_expr);
                if a.has("fint") {
                    let len = len.clone().expect("a {fint} array needs len=");
                    pre.push(format!("let {n}_wide = f::widen({n}, {len});"));
                    pass.push(format!("{n}_wide.as_ptr()"));
                } else if a.has("weights") {
                    pass.push(format!("f::weights({n} as *mut c_int) as _"));
                } else {
                    pass.push(n.clone());
                }
                if a.has("findex") {
                    let len = len.expect("a {findex} array needs len=");
                    post.push(format!(
                        "if rc == MPI_SUCCESS && *{} != MPI_UNDEFINED {{ f::one_based({n}, {len}); }}",
                        a.c_len_name()
                    ));
                }
            }
            Kind::Buffer { .. } if a.has("ftemp") => {
                pre.push(format!(
                    "let mut {n}_tmp: *mut c_void = core::ptr::null_mut();"
                ));
                pass.push(format!("(&mut {n}_tmp as *mut *mut c_void).cast()"));
            }
            Kind::Buffer { .. } if a.has("attr_in") => {
                let w = if a.has("fint") {
                    "MPI_Fint"
                } else {
                    "MPI_Aint"
                };
                pass.push(format!("f::attr_in::<{w}>({n})"));
            }
            Kind::Buffer { .. } if a.has("attr_out") => {
                let w = if a.has("fint") {
                    "MPI_Fint"
                } else {
                    "MPI_Aint"
                };
                let k = keyval.as_deref().expect("attr_out needs a keyval argument");
                pre.push(format!(
                    "let mut {n}_ptr: *mut c_void = core::ptr::null_mut();"
                ));
                pass.push(format!("(&mut {n}_ptr as *mut *mut c_void).cast()"));
                post.push(format!(
                    "if rc == MPI_SUCCESS && *flag != 0 {{ f::attr_out::<{w}>(*{k}, {n}_ptr, {n}); }}"
                ));
            }
            Kind::Buffer { .. } if descriptors && is_choice(a) => {
                pre.push(format!(
                    "let Some({n}) = f::desc_buf({n} as *const f::GfcDescriptor) else {{ \
                     f::set_ierror(ierror, f::noncontiguous(\"MPI_{}\", \"{n}\")); return; }};",
                    f.name
                ));
                if a.konst {
                    pass.push(format!("f::buf({n}) as *const c_void"));
                } else {
                    pass.push(format!("f::buf({n})"));
                }
            }
            Kind::Buffer { .. } => {
                if a.konst {
                    pass.push(format!("f::buf({n} as *mut c_void) as *const c_void"));
                } else {
                    pass.push(format!("f::buf({n})"));
                }
            }
            Kind::Status { .. } => {
                if a.konst {
                    pass.push(format!(
                        "f::status({n} as *mut MPI_Status) as *const MPI_Status"
                    ));
                } else {
                    pass.push(format!("f::status({n})"));
                }
            }
            Kind::Statuses => pass.push(format!("f::statuses({n})")),
            Kind::StrIn => {
                lens.push(format!("{n}_len: usize"));
                pre.push(format!("let {n}_c = f::str_in({n}, {n}_len);"));
                pass.push(format!("{n}_c.as_ptr()"));
            }
            Kind::StrOut => {
                lens.push(format!("{n}_len: usize"));
                pre.push(format!("let mut {n}_buf = f::StrOut::new({n}_len);"));
                pass.push(format!("{n}_buf.as_mut_ptr()"));
                post.push(format!(
                    "if rc == MPI_SUCCESS {{ {n}_buf.copy_to({n}, {n}_len); }}"
                ));
            }
            Kind::Callback(_) if a.has("fcopy") || a.has("fdelete") => {
                let which = if a.has("fcopy") { "copy" } else { "delete" };
                let width = if a.has("fint") { "Narrow" } else { "Wide" };
                pass.push(format!("f::{which}_trampoline({n}, f::AttrWidth::{width})"));
                if a.has("fcopy") {
                    let kv = f
                        .args
                        .iter()
                        .find(|k| k.name.ends_with("keyval") && matches!(k.kind, Kind::Ref { .. }))
                        .expect("a keyval to register the callbacks under");
                    let del = f
                        .args
                        .iter()
                        .find(|d| d.has("fdelete"))
                        .expect("a delete callback beside the copy callback");
                    post.push(format!(
                        "if rc == MPI_SUCCESS {{ f::register_keyval(*{}, {n}, {}); }}",
                        kv.name, del.name
                    ));
                }
            }
            Kind::Callback(_) => pass.push(n.clone()),
            Kind::Other => {
                assert!(
                    f.stub,
                    "api.in: MPI_{} argument {n} ({}) has no Fortran mapping",
                    f.name, a.c
                );
                pass.push(format!("{n}.cast()"));
            }
            Kind::Varargs | Kind::CArgs => unreachable!(),
        }
    }
    let value = f.ret != "int";
    if !value {
        params.push("ierror: *mut MPI_Fint".into());
    }
    params.extend(lens);
    let ret = match f.ret.as_str() {
        "int" => String::new(),
        "double" => " -> f64".into(),
        other => format!(" -> {other}"),
    };
    let suffix = if descriptors { "_f08ts" } else { "" };
    writeln!(
        out,
        "/// `MPI_{}` for Fortran (generated from api.in).\n///\n/// # Safety\n/// Called by Fortran code: every argument is a valid reference, strings are followed by\n/// their hidden lengths.\n#[no_mangle]\npub unsafe extern \"C\" fn pmpi_{lname}{suffix}_({}){ret} {{",
        f.name.to_uppercase(),
        params.join(", ")
    )
    .unwrap();
    writeln!(
        out,
        "    // SAFETY: Fortran passes every argument by reference (valid for the call), as the\n    // C entry point expects its pointers; by-value C arguments are read through them.\n    unsafe {{"
    )
    .unwrap();
    for p in &pre {
        writeln!(out, "        {p}").unwrap();
    }
    if value {
        writeln!(
            out,
            "        crate::generated::PMPI_{}({})",
            f.name,
            pass.join(", ")
        )
        .unwrap();
    } else {
        writeln!(
            out,
            "        let rc = crate::generated::PMPI_{}({});",
            f.name,
            pass.join(", ")
        )
        .unwrap();
        for p in &post {
            writeln!(out, "        {p}").unwrap();
        }
        writeln!(out, "        f::set_ierror(ierror, rc);").unwrap();
    }
    out.push_str("    }\n}\n\n");
}

/// Extension used above: the argument a `len=*x` expression reads.
trait LenName {
    fn c_len_name(&self) -> String;
}
impl LenName for Arg {
    fn c_len_name(&self) -> String {
        match &self.kind {
            Kind::Array { len: Some(l), .. } => l.trim_start_matches('*').to_string(),
            _ => unreachable!(),
        }
    }
}

/// The Fortran entry points and their aliases (`fortran_points.rs`).
pub fn gen_entry_points(funcs: &[Func]) -> String {
    let mut out = String::new();
    out.push_str("// Generated by c-abi/build.rs from c-abi/api.in. Do not edit.\n\n");
    let ff: Vec<&Func> = funcs.iter().filter(|f| f.in_fortran()).collect();
    for f in &ff {
        entry(f, false, &mut out);
        if has_choice(f) {
            entry(f, true, &mut out);
        }
    }
    // MPICH's libmpichfort exports every spelling (gfortran's one and two underscores,
    // none, upper case) and their PMPI forms; so do we.
    out.push_str("core::arch::global_asm!(\n");
    for f in &ff {
        let l = f.name.to_lowercase();
        let u = f.name.to_uppercase();
        for alias in [
            format!("mpi_{l}_"),
            format!("mpi_{l}__"),
            format!("mpi_{l}"),
            format!("MPI_{u}"),
            format!("pmpi_{l}__"),
            format!("pmpi_{l}"),
            format!("PMPI_{u}"),
        ] {
            writeln!(out, "    \".weak {alias}\", \".set {alias}, pmpi_{l}_\",").unwrap();
        }
        // MPICH's mpi_f08 module calls `mpi_x_f08_` (the same arguments as `mpi_x_`, an
        // absent optional ierror being NULL) or, with choice buffers, `mpi_x_f08ts_`.
        let f08 = if has_choice(f) {
            [format!("mpi_{l}_f08ts_"), format!("pmpi_{l}_f08ts_")]
        } else {
            [format!("mpi_{l}_f08_"), format!("pmpi_{l}_f08_")]
        };
        for alias in f08 {
            let target = if has_choice(f) {
                format!("pmpi_{l}_f08ts_")
            } else {
                format!("pmpi_{l}_")
            };
            if alias != target {
                writeln!(out, "    \".weak {alias}\", \".set {alias}, {target}\",").unwrap();
            }
        }
    }
    out.push_str(");\n\n");
    out.push_str("/// Every Fortran entry point, by its gfortran name.\npub const FORTRAN_NAMES: &[&str] = &[\n");
    for f in &ff {
        writeln!(out, "    \"mpi_{}_\",", f.name.to_lowercase()).unwrap();
    }
    out.push_str("];\n");
    out
}

/// A constant of `mpi.h.in` (`#define MPI_X value`) as Fortran sees it.
pub struct Const {
    pub name: String,
    pub value: i64,
    /// The handle type of the cast (`Comm`, `Datatype`, ...), if any.
    pub class: Option<String>,
}

/// Predefined attribute keys: Fortran's are C's plus one (MPICH's values).
const ATTR_KEYS: &[&str] = &[
    "MPI_TAG_UB",
    "MPI_HOST",
    "MPI_IO",
    "MPI_WTIME_IS_GLOBAL",
    "MPI_UNIVERSE_SIZE",
    "MPI_LASTUSEDCODE",
    "MPI_APPNUM",
    "MPI_WIN_BASE",
    "MPI_WIN_SIZE",
    "MPI_WIN_DISP_UNIT",
    "MPI_WIN_CREATE_FLAVOR",
    "MPI_WIN_MODEL",
];

/// The integer constants of `mpi.h.in`, with aliases resolved; C-only ones (pointers,
/// `MPI_F_*`, the status layout of C) left out.
pub fn constants(header: &str) -> Vec<Const> {
    let mut out: Vec<Const> = Vec::new();
    for line in header.lines() {
        let Some(rest) = line.strip_prefix("#define MPI_") else {
            continue;
        };
        let mut it = rest.splitn(2, char::is_whitespace);
        let name = format!("MPI_{}", it.next().unwrap_or_default());
        let value = it.next().unwrap_or_default().trim();
        if value.is_empty()
            || value.contains('*')
            || name.starts_with("MPI_F_")
            || name == "MPI_STATUS_SIZE"
            || name.ends_with("_FN")
        {
            continue;
        }
        let (class, num) = match value.strip_prefix("((MPI_") {
            Some(v) => {
                let (ty, n) = v.split_once(')').expect("cast");
                (Some(ty.to_string()), n.trim_end_matches(')').to_string())
            }
            None => (
                None,
                value.trim_matches(|c| c == '(' || c == ')').to_string(),
            ),
        };
        let parsed = if let Some(h) = num.strip_prefix("0x") {
            i64::from_str_radix(h, 16)
                .ok()
                .map(|v| v as u32 as i32 as i64)
        } else {
            num.parse::<i64>().ok()
        };
        let (value, class) = match parsed {
            Some(v) => (v, class),
            None => match out.iter().find(|c| c.name == num) {
                Some(c) => (c.value, c.class.clone()),
                None => continue,
            },
        };
        let value = if ATTR_KEYS.contains(&name.as_str()) {
            value + 1
        } else {
            value
        };
        let class = class.filter(|c| c != "File");
        out.push(Const { name, value, class });
    }
    // An enumerator in mpi.h (MPI_Session has no handle cast there).
    if let Some(v) = header
        .lines()
        .find_map(|l| l.trim().strip_prefix("enum { MPI_SESSION_NULL = 0x"))
        .and_then(|v| i64::from_str_radix(v.trim_end_matches(" };"), 16).ok())
    {
        out.push(Const {
            name: "MPI_SESSION_NULL".into(),
            value: v,
            class: Some("Session".into()),
        });
    }
    out
}

fn f77_lines(out: &mut String, text: &str) {
    for l in text.lines() {
        assert!(l.len() <= 72, "mpif.h line over 72 columns: {l}");
        out.push_str(l);
        out.push('\n');
    }
}

/// The declarations shared by `mpif.h` and the `mpi` module: fixed-form lines that are
/// also valid free form (statements from column 7, at most 72 columns, `!` comments).
fn f77_body(consts: &[Const], value_functions: bool) -> String {
    let mut s = String::new();
    for c in consts {
        f77_lines(
            &mut s,
            &format!(
                "      INTEGER {0}\n      PARAMETER ({0}={1})",
                c.name, c.value
            ),
        );
    }
    f77_lines(
        &mut s,
        "      INTEGER MPI_SOURCE, MPI_TAG, MPI_ERROR, MPI_STATUS_SIZE
      PARAMETER (MPI_SOURCE=3, MPI_TAG=4, MPI_ERROR=5)
      PARAMETER (MPI_STATUS_SIZE=5)
      INTEGER MPI_ADDRESS_KIND, MPI_OFFSET_KIND, MPI_COUNT_KIND
      PARAMETER (MPI_ADDRESS_KIND=8, MPI_OFFSET_KIND=8)
      PARAMETER (MPI_COUNT_KIND=8)
      INTEGER MPI_INTEGER_KIND
      PARAMETER (MPI_INTEGER_KIND=4)
      LOGICAL MPI_SUBARRAYS_SUPPORTED, MPI_ASYNC_PROTECTS_NONBLOCKING
      PARAMETER (MPI_SUBARRAYS_SUPPORTED=.FALSE.)
      PARAMETER (MPI_ASYNC_PROTECTS_NONBLOCKING=.FALSE.)
! The sentinels, in MPICH's common blocks (the library finds them)
      INTEGER MPI_BOTTOM, MPI_IN_PLACE, MPI_UNWEIGHTED
      INTEGER MPI_WEIGHTS_EMPTY
      INTEGER MPI_STATUS_IGNORE(MPI_STATUS_SIZE)
      INTEGER MPI_STATUSES_IGNORE(MPI_STATUS_SIZE,1)
      INTEGER MPI_ERRCODES_IGNORE(1)
      CHARACTER*1 MPI_ARGVS_NULL(1,1)
      CHARACTER*1 MPI_ARGV_NULL(1)
      COMMON /MPIFCMB5/ MPI_UNWEIGHTED
      COMMON /MPIFCMB9/ MPI_WEIGHTS_EMPTY
      COMMON /MPIPRIV1/ MPI_BOTTOM, MPI_IN_PLACE, MPI_STATUS_IGNORE
      COMMON /MPIPRIV2/ MPI_STATUSES_IGNORE, MPI_ERRCODES_IGNORE
      COMMON /MPIPRIVC/ MPI_ARGVS_NULL, MPI_ARGV_NULL
      SAVE /MPIFCMB5/, /MPIFCMB9/, /MPIPRIV1/, /MPIPRIV2/, /MPIPRIVC/
! MPI 4.1: attach a buffer the library sizes (our own block)
      INTEGER MPI_BUFFER_AUTOMATIC
      COMMON /MPIPRIVBA/ MPI_BUFFER_AUTOMATIC
      SAVE /MPIPRIVBA/
! The predefined callbacks
      EXTERNAL MPI_NULL_COPY_FN, MPI_NULL_DELETE_FN, MPI_DUP_FN
      EXTERNAL MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN
      EXTERNAL MPI_COMM_DUP_FN
      EXTERNAL MPI_TYPE_NULL_COPY_FN, MPI_TYPE_NULL_DELETE_FN
      EXTERNAL MPI_TYPE_DUP_FN
      EXTERNAL MPI_WIN_NULL_COPY_FN, MPI_WIN_NULL_DELETE_FN
      EXTERNAL MPI_WIN_DUP_FN
! Functions returning a value (the profiling names here too)
      EXTERNAL PMPI_WTIME, PMPI_WTICK
      DOUBLE PRECISION PMPI_WTIME, PMPI_WTICK",
    );
    if value_functions {
        f77_lines(
            &mut s,
            "      EXTERNAL MPI_WTIME, MPI_WTICK
      DOUBLE PRECISION MPI_WTIME, MPI_WTICK
      EXTERNAL MPI_AINT_ADD, MPI_AINT_DIFF
      INTEGER(KIND=MPI_ADDRESS_KIND) MPI_AINT_ADD, MPI_AINT_DIFF",
        );
    }
    s
}

/// `mpif.h`.
pub fn gen_mpif_h(consts: &[Const]) -> String {
    let mut s = String::new();
    f77_lines(
        &mut s,
        "! mpif.h: the Fortran 77 interface of Tsunagi, an MPI implementation.
! Generated by c-abi/build.rs from c-abi/mpi.h.in; do not edit.
! Fixed form (72 columns) and free form alike. Values are MPICH's,
! so programs built with this file or with MPICH's run on either.",
    );
    s.push_str(&f77_body(consts, true));
    s
}

/// The source of the `mpi` module (compiled by gfortran at install time).
pub fn gen_mpi_module(consts: &[Const], funcs: &[Func]) -> String {
    let mut s = String::new();
    s.push_str(
        "! The `mpi` module of Tsunagi. Generated by c-abi/build.rs; do not edit.\n\
         ! The constants and sentinels of mpif.h, and an explicit interface for every\n\
         ! function (choice buffers accept any type and rank: NO_ARG_CHECK).\n\
         module mpi\n",
    );
    s.push_str(&f77_body(consts, false));
    s.push_str("  interface\n");
    for f in funcs.iter().filter(|f| f.in_fortran()) {
        let args: Option<Vec<_>> = f.args.iter().map(|a| mpi_arg(a).map(|d| (a, d))).collect();
        let Some(args) = args else { continue };
        let value = f.ret != "int";
        let mut names: Vec<String> = args
            .iter()
            .filter(|(_, d)| !d.is_empty())
            .map(|(a, _)| a.name.clone())
            .collect();
        if !value {
            names.push("ierror".into());
        }
        let name = format!("MPI_{}", f.name);
        let kind = if value { "function" } else { "subroutine" };
        let prefix = match f.ret.as_str() {
            "double" => "double precision ",
            "int" => "",
            _ => "integer(kind=MPI_ADDRESS_KIND) ",
        };
        free_line(
            &mut s,
            "    ",
            &format!("{prefix}{kind} {name}({})", names.join(", ")),
        );
        s.push_str(
            "      import :: MPI_ADDRESS_KIND, MPI_COUNT_KIND, MPI_OFFSET_KIND, MPI_STATUS_SIZE\n",
        );
        s.push_str("      implicit none\n");
        for (_, decls) in &args {
            for d in decls {
                free_line(&mut s, "      ", d);
            }
        }
        if !value {
            s.push_str("      integer :: ierror\n");
        }
        writeln!(s, "    end {kind} {name}").unwrap();
    }
    s.push_str("  end interface\nend module mpi\n");
    s
}

/// An argument's declaration in the `mpi` module's interfaces (INTEGER handles, status
/// arrays); `None` when the argument has no Fortran form.
fn mpi_arg(a: &Arg) -> Option<Vec<String>> {
    let n = &a.name;
    let scalar = |base: &str| -> String {
        // Handle arguments are INTEGERs in mpif.h and `use mpi`.
        if tsunagi_apidef::HANDLES.contains(&base) {
            "integer".into()
        } else {
            f08_scalar_type(a, base)
        }
    };
    if a.has("fargvs") {
        return Some(vec![format!("character(len=*) :: {n}(count,*)")]);
    }
    if is_str_array(a) {
        return Some(vec![format!("character(len=*) :: {n}(*)")]);
    }
    if is_session(a) {
        return Some(vec![format!("integer :: {n}")]);
    }
    Some(match &a.kind {
        Kind::Varargs | Kind::CArgs => vec![],
        Kind::Handle(_) => vec![format!("integer :: {n}")],
        Kind::Scalar(t) => vec![format!("{} :: {n}", scalar(t))],
        Kind::Ref { base, .. } => vec![format!("{} :: {n}", scalar(base))],
        Kind::Array { base, .. } => {
            let dims = match &a.fixed {
                Some(k) => format!("({k},*)"),
                None => "(*)".into(),
            };
            vec![format!("{} :: {n}{dims}", scalar(base))]
        }
        Kind::Buffer { .. } if a.has("attr_in") || a.has("attr_out") => {
            let ty = if a.has("fint") {
                "integer"
            } else {
                "integer(kind=MPI_ADDRESS_KIND)"
            };
            vec![format!("{ty} :: {n}")]
        }
        Kind::Buffer { .. } => vec![
            format!("!GCC$ ATTRIBUTES NO_ARG_CHECK :: {n}"),
            format!("type(*), dimension(*) :: {n}"),
        ],
        Kind::Status { .. } => vec![format!("integer :: {n}(MPI_STATUS_SIZE)")],
        Kind::Statuses => vec![format!("integer :: {n}(MPI_STATUS_SIZE,*)")],
        Kind::StrIn | Kind::StrOut => vec![format!("character(len=*) :: {n}")],
        Kind::Callback(_) => vec![format!("external :: {n}")],
        Kind::Other => return None,
    })
}

/// Handle classes with a derived type in mpi_f08.
const F08_HANDLES: &[&str] = &[
    "Comm",
    "Datatype",
    "Group",
    "Op",
    "Errhandler",
    "Info",
    "Request",
    "Message",
    "Win",
    "File",
    "Session",
];

/// Free-form lines longer than 100 columns are continued with `&`.
fn free_line(out: &mut String, indent: &str, text: &str) {
    let mut line = format!("{indent}{text}");
    while line.len() > 100 {
        let cut = line[..95].rfind([',', ' ']).expect("a place to break") + 1;
        out.push_str(&line[..cut]);
        out.push_str(" &\n");
        line = format!("{indent}    & {}", &line[cut..].trim_start());
    }
    out.push_str(&line);
    out.push('\n');
}

/// The Fortran type of a scalar (or array element) of C base type `base`.
fn f08_scalar_type(a: &Arg, base: &str) -> String {
    if a.logical {
        return "logical".into();
    }
    if a.has("fint") {
        return "integer".into();
    }
    match base {
        "int" | "MPI_Fint" => "integer".into(),
        "MPI_Aint" => "integer(kind=MPI_ADDRESS_KIND)".into(),
        "MPI_Count" => "integer(kind=MPI_COUNT_KIND)".into(),
        "MPI_Offset" => "integer(kind=MPI_OFFSET_KIND)".into(),
        "double" => "double precision".into(),
        h => format!("type({h})"),
    }
}

/// For one argument: the declaration in the module procedure, the one in the bind(C)
/// interface of the `mpi_x_` symbol, and the actual arguments passed to it. `None` when
/// the argument has no mpi_f08 form.
#[allow(clippy::type_complexity)]
fn f08_arg(a: &Arg) -> Option<(Vec<String>, Vec<String>, Vec<String>)> {
    let n = &a.name;
    let one = |decl: String| (vec![decl.clone()], vec![decl], vec![n.clone()]);
    if is_str_array(a) {
        let dims = if a.has("fargvs") { "(count,*)" } else { "(*)" };
        return Some((
            vec![format!("character(len=*), intent(in) :: {n}{dims}")],
            vec![format!("character(kind=c_char) :: {n}(*)")],
            vec![n.clone()],
        ));
    }
    if is_session(a) {
        if a.depth == 0 {
            return Some((
                vec![format!("type(MPI_Session), intent(in) :: {n}")],
                vec![format!("type(MPI_Session) :: {n}")],
                vec![n.clone()],
            ));
        }
        return Some(one(format!("type(MPI_Session) :: {n}")));
    }
    Some(match &a.kind {
        Kind::Varargs | Kind::CArgs => (vec![], vec![], vec![]),
        Kind::Handle(c) => {
            let (m, _, act) = one(format!("type(MPI_{c}), intent(in) :: {n}"));
            (m, vec![format!("type(MPI_{c}) :: {n}")], act)
        }
        Kind::Scalar(t) => {
            let ty = f08_scalar_type(a, t);
            let (m, _, act) = one(format!("{ty}, intent(in) :: {n}"));
            (m, vec![format!("{ty} :: {n}")], act)
        }
        Kind::Ref { base, .. } => one(format!("{} :: {n}", f08_scalar_type(a, base))),
        Kind::Array { base, .. } => {
            let dims = match &a.fixed {
                Some(k) => format!("({k},*)"),
                None => "(*)".into(),
            };
            one(format!("{} :: {n}{dims}", f08_scalar_type(a, base)))
        }
        Kind::Buffer { .. } if a.has("attr_in") || a.has("attr_out") => {
            let ty = if a.has("fint") {
                "integer"
            } else {
                "integer(kind=MPI_ADDRESS_KIND)"
            };
            one(format!("{ty} :: {n}"))
        }
        Kind::Buffer { .. } => (
            vec![
                format!("!GCC$ ATTRIBUTES NO_ARG_CHECK :: {n}"),
                format!("type(*), dimension(*) :: {n}"),
            ],
            vec![format!("type(*), dimension(*) :: {n}")],
            vec![n.clone()],
        ),
        Kind::Status { .. } => one(format!("type(MPI_Status) :: {n}")),
        Kind::Statuses => one(format!("type(MPI_Status) :: {n}(*)")),
        Kind::StrIn | Kind::StrOut => (
            vec![format!("character(len=*) :: {n}")],
            vec![format!("character(kind=c_char) :: {n}(*)")],
            vec![n.clone()],
        ),
        Kind::Callback(_) => (
            vec![format!("external :: {n}")],
            vec![format!("type(c_funptr), value :: {n}")],
            vec![format!("c_funloc({n})")],
        ),
        Kind::Other => return None,
    })
}

/// The source of the `mpi_f08` module: TYPE(MPI_Comm) and the other handle types (one
/// INTEGER, MPICH's value, as the standard's MPI_VAL), TYPE(MPI_Status) with the layout
/// of the Fortran status array, every function as a module procedure with an optional
/// `ierror` that calls the `mpi_x_` entry point through a bind(C) interface (strings
/// with their hidden lengths made explicit). The sentinels are the common blocks of
/// mpif.h, so the library recognises them the same way.
pub fn gen_f08_module(consts: &[Const], funcs: &[Func]) -> String {
    let mut s = String::new();
    s.push_str(
        "! The `mpi_f08` module of Tsunagi. Generated by c-abi/build.rs from c-abi/api.in and\n\
         ! c-abi/mpi.h.in; do not edit. Compiled with gfortran at install time.\n\
         module mpi_f08\n  use, intrinsic :: iso_c_binding, only: c_int, c_char, c_size_t, c_double, c_funptr, c_funloc\n  implicit none\n",
    );
    for h in F08_HANDLES {
        writeln!(
            s,
            "  type, bind(C) :: MPI_{h}\n    integer(c_int) :: MPI_VAL\n  end type MPI_{h}"
        )
        .unwrap();
    }
    s.push_str(
        "  type, bind(C) :: MPI_Status\n    integer(c_int) :: count_lo, count_hi_and_cancelled, MPI_SOURCE, MPI_TAG, MPI_ERROR\n  end type MPI_Status\n",
    );
    s.push_str(
        "  integer, parameter :: MPI_STATUS_SIZE = 5, MPI_ADDRESS_KIND = 8, MPI_OFFSET_KIND = 8\n  \
         integer, parameter :: MPI_COUNT_KIND = 8, MPI_INTEGER_KIND = 4\n  \
         logical, parameter :: MPI_SUBARRAYS_SUPPORTED = .false., MPI_ASYNC_PROTECTS_NONBLOCKING = .false.\n",
    );
    for c in consts.iter().filter(|c| c.name != "MPI_FILE_NULL") {
        match &c.class {
            Some(cl) => writeln!(
                s,
                "  type(MPI_{cl}), parameter :: {} = MPI_{cl}({})",
                c.name, c.value
            )
            .unwrap(),
            None => writeln!(s, "  integer, parameter :: {} = {}", c.name, c.value).unwrap(),
        }
    }
    s.push_str(
        "  type(MPI_File), parameter :: MPI_FILE_NULL = MPI_File(0)\n  \
         ! The sentinels: mpif.h's common blocks.\n  \
         integer :: MPI_BOTTOM, MPI_IN_PLACE, MPI_UNWEIGHTED, MPI_WEIGHTS_EMPTY\n  \
         type(MPI_Status) :: MPI_STATUS_IGNORE, MPI_STATUSES_IGNORE(1)\n  \
         integer :: MPI_ERRCODES_IGNORE(1)\n  \
         character(len=1) :: MPI_ARGVS_NULL(1,1), MPI_ARGV_NULL(1)\n  \
         common /mpifcmb5/ MPI_UNWEIGHTED\n  common /mpifcmb9/ MPI_WEIGHTS_EMPTY\n  \
         common /mpipriv1/ MPI_BOTTOM, MPI_IN_PLACE, MPI_STATUS_IGNORE\n  \
         common /mpipriv2/ MPI_STATUSES_IGNORE, MPI_ERRCODES_IGNORE\n  \
         common /mpiprivc/ MPI_ARGVS_NULL, MPI_ARGV_NULL\n  \
         save /mpifcmb5/, /mpifcmb9/, /mpipriv1/, /mpipriv2/, /mpiprivc/\n  \
         integer :: MPI_BUFFER_AUTOMATIC\n  common /mpiprivba/ MPI_BUFFER_AUTOMATIC\n  \
         save /mpiprivba/\n  \
         external :: MPI_NULL_COPY_FN, MPI_NULL_DELETE_FN, MPI_DUP_FN\n  \
         external :: MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN, MPI_COMM_DUP_FN\n  \
         external :: MPI_TYPE_NULL_COPY_FN, MPI_TYPE_NULL_DELETE_FN, MPI_TYPE_DUP_FN\n  \
         external :: MPI_WIN_NULL_COPY_FN, MPI_WIN_NULL_DELETE_FN, MPI_WIN_DUP_FN\n",
    );
    for h in F08_HANDLES {
        writeln!(
            s,
            "  interface operator(==)\n    module procedure tsunagi_{h}_eq\n  end interface\n  \
             interface operator(/=)\n    module procedure tsunagi_{h}_ne\n  end interface"
        )
        .unwrap();
    }
    // The functions with an mpi_f08 form.
    let mut procs = Vec::new();
    for f in funcs.iter().filter(|f| f.in_fortran()) {
        let args: Option<Vec<_>> = f.args.iter().map(|a| f08_arg(a).map(|x| (a, x))).collect();
        if let Some(args) = args {
            procs.push((f, args));
        }
    }
    s.push_str("  interface\n");
    for (f, args) in &procs {
        let l = f.name.to_lowercase();
        let mut names: Vec<String> = Vec::new();
        let mut decls: Vec<String> = Vec::new();
        let mut lens = Vec::new();
        for (a, (_, idecl, _)) in args {
            if idecl.is_empty() {
                continue;
            }
            names.push(a.name.clone());
            decls.extend(idecl.iter().cloned());
            if has_hidden_len(a) {
                lens.push(format!("{}_len", a.name));
            }
        }
        let value = f.ret != "int";
        if !value {
            names.push("ierror".into());
            decls.push("integer(c_int) :: ierror".into());
        }
        for l in &lens {
            decls.push(format!("integer(c_size_t), value :: {l}"));
        }
        names.extend(lens.iter().cloned());
        let kind = if value { "function" } else { "subroutine" };
        let result = match f.ret.as_str() {
            "double" => " result(r)",
            "MPI_Aint" => " result(r)",
            _ => "",
        };
        free_line(
            &mut s,
            "    ",
            &format!(
                "{kind} tsunagi_{l}({}) bind(C, name=\"mpi_{l}_\"){result}",
                names.join(", ")
            ),
        );
        s.push_str("      import\n");
        for d in &decls {
            free_line(&mut s, "      ", d);
        }
        match f.ret.as_str() {
            "double" => s.push_str("      real(c_double) :: r\n"),
            "MPI_Aint" => s.push_str("      integer(kind=MPI_ADDRESS_KIND) :: r\n"),
            _ => {}
        }
        writeln!(s, "    end {kind} tsunagi_{l}").unwrap();
    }
    s.push_str("  end interface\ncontains\n");
    for h in F08_HANDLES {
        writeln!(
            s,
            "  elemental logical function tsunagi_{h}_eq(a, b)\n    type(MPI_{h}), intent(in) :: a, b\n    \
             tsunagi_{h}_eq = a%MPI_VAL == b%MPI_VAL\n  end function tsunagi_{h}_eq\n  \
             elemental logical function tsunagi_{h}_ne(a, b)\n    type(MPI_{h}), intent(in) :: a, b\n    \
             tsunagi_{h}_ne = a%MPI_VAL /= b%MPI_VAL\n  end function tsunagi_{h}_ne"
        )
        .unwrap();
    }
    for (f, args) in &procs {
        let l = f.name.to_lowercase();
        let value = f.ret != "int";
        let mut names: Vec<String> = Vec::new();
        let mut decls: Vec<String> = Vec::new();
        let mut actuals: Vec<String> = Vec::new();
        let mut lens = Vec::new();
        for (a, (mdecl, _, act)) in args {
            if mdecl.is_empty() {
                continue;
            }
            names.push(a.name.clone());
            decls.extend(mdecl.iter().cloned());
            actuals.extend(act.iter().cloned());
            if has_hidden_len(a) {
                lens.push(format!("len({}, kind=c_size_t)", a.name));
            }
        }
        let name = format!("MPI_{}", f.name);
        if value {
            let ty = match f.ret.as_str() {
                "double" => "double precision",
                _ => "integer(kind=MPI_ADDRESS_KIND)",
            };
            free_line(
                &mut s,
                "  ",
                &format!("{ty} function {name}({})", names.join(", ")),
            );
            for d in &decls {
                free_line(&mut s, "    ", d);
            }
            free_line(
                &mut s,
                "    ",
                &format!("{name} = tsunagi_{l}({})", actuals.join(", ")),
            );
            writeln!(s, "  end function {name}").unwrap();
            continue;
        }
        names.push("ierror".into());
        free_line(
            &mut s,
            "  ",
            &format!("subroutine {name}({})", names.join(", ")),
        );
        for d in &decls {
            free_line(&mut s, "    ", d);
        }
        s.push_str(
            "    integer, optional, intent(out) :: ierror\n    integer(c_int) :: ierror_c\n",
        );
        actuals.push("ierror_c".into());
        actuals.extend(lens);
        free_line(
            &mut s,
            "    ",
            &format!("call tsunagi_{l}({})", actuals.join(", ")),
        );
        s.push_str("    if (present(ierror)) ierror = ierror_c\n");
        writeln!(s, "  end subroutine {name}").unwrap();
    }
    s.push_str("end module mpi_f08\n");
    s
}
