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

fn fortran_param_type(a: &Arg) -> String {
    match &a.kind {
        Kind::Handle(_) => "*const MPI_Fint".into(),
        Kind::Scalar(t) if a.has("fint") => {
            let _ = t;
            "*const MPI_Fint".into()
        }
        Kind::Scalar(t) => format!("*const {}", crate::rust_base(t)),
        Kind::Ref { .. } if a.has("fint") => "*mut MPI_Fint".into(),
        Kind::Array { .. } if a.has("fint") => "*const MPI_Fint".into(),
        Kind::Buffer { .. } if a.has("attr_in") || a.has("attr_out") => "*mut c_void".into(),
        Kind::StrIn | Kind::StrOut => "*mut c_char".into(),
        Kind::Other => "*mut c_void".into(),
        _ => rust_type(a),
    }
}

/// One Fortran entry point (named `pmpi_x_`; the other spellings are aliases).
fn entry(f: &Func, out: &mut String) {
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
        let unused = a.has("ftemp") || a.kind == Kind::Handle("File".into());
        let u = if unused { "_" } else { "" };
        params.push(format!("{u}{n}: {}", fortran_param_type(a)));
        match &a.kind {
            Kind::Handle(class) if class == "File" => pass.push("core::ptr::null_mut()".into()),
            Kind::Handle(_) => pass.push(format!("*{n}")),
            Kind::Scalar(_) if a.has("fint") => pass.push(format!("MPI_Aint::from(*{n})")),
            Kind::Scalar(_) if keyval.as_deref() == Some(n.as_str()) => {
                pass.push(format!("f::attr_key(*{n})"))
            }
            Kind::Scalar(_) => pass.push(format!("*{n}")),
            Kind::Ref { .. } if a.has("fint") => {
                pre.push(format!("let mut {n}_wide: MPI_Aint = 0;"));
                pass.push(format!("&mut {n}_wide"));
                post.push(format!("if rc == MPI_SUCCESS {{ *{n} = f::narrow({n}_wide); }}"));
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
                pre.push(format!("let mut {n}_tmp: *mut c_void = core::ptr::null_mut();"));
                pass.push(format!("(&mut {n}_tmp as *mut *mut c_void).cast()"));
            }
            Kind::Buffer { .. } if a.has("attr_in") => {
                let w = if a.has("fint") { "MPI_Fint" } else { "MPI_Aint" };
                pass.push(format!("f::attr_in::<{w}>({n})"));
            }
            Kind::Buffer { .. } if a.has("attr_out") => {
                let w = if a.has("fint") { "MPI_Fint" } else { "MPI_Aint" };
                let k = keyval.as_deref().expect("attr_out needs a keyval argument");
                pre.push(format!("let mut {n}_ptr: *mut c_void = core::ptr::null_mut();"));
                pass.push(format!("(&mut {n}_ptr as *mut *mut c_void).cast()"));
                post.push(format!(
                    "if rc == MPI_SUCCESS && *flag != 0 {{ f::attr_out::<{w}>(*{k}, {n}_ptr, {n}); }}"
                ));
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
                    pass.push(format!("f::status({n} as *mut MPI_Status) as *const MPI_Status"));
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
                post.push(format!("if rc == MPI_SUCCESS {{ {n}_buf.copy_to({n}, {n}_len); }}"));
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
    writeln!(
        out,
        "/// `MPI_{}` for Fortran (generated from api.in).\n///\n/// # Safety\n/// Called by Fortran code: every argument is a valid reference, strings are followed by\n/// their hidden lengths.\n#[no_mangle]\npub unsafe extern \"C\" fn pmpi_{lname}_({}){ret} {{",
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
        writeln!(out, "        crate::generated::PMPI_{}({})", f.name, pass.join(", ")).unwrap();
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
        entry(f, &mut out);
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
    }
    out.push_str(");\n\n");
    out.push_str("/// Every Fortran entry point, by its gfortran name.\npub const FORTRAN_NAMES: &[&str] = &[\n");
    for f in &ff {
        writeln!(out, "    \"mpi_{}_\",", f.name.to_lowercase()).unwrap();
    }
    out.push_str("];\n");
    out
}
