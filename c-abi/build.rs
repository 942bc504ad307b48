//! The generator of the C ABI. It reads the declarative table `api.in` and writes:
//!
//! - `$OUT_DIR/entry_points.rs`: one `extern "C" fn PMPI_X` per implemented function. Each
//!   decodes and checks its handle arguments (kind, range, freed, null) and its pointer and
//!   count arguments, then calls the hand-written `imp::x`, inside `entry`, which catches
//!   panics and routes errors through the communicator's error handler; plus a
//!   `global_asm!` block making every `MPI_X` a weak alias of `PMPI_X` (same module, so
//!   the same codegen unit as the functions);
//! - `$OUT_DIR/exports.map`: the linker version script that exports the aliases (rustc's
//!   own script only knows the Rust-defined symbols);
//! - `include/mpi.h`: `mpi.h.in` with the prototype section filled in;
//! - `../docs/coverage.md`: implemented and missing functions;
//! - the Fortran binding (`build/fortran.rs`): `$OUT_DIR/fortran_points.rs` (the `mpi_x_`
//!   entry points), `include/mpif.h`, `fortran/mpi.f90`, `fortran/mpi_f08.f90`.
//!
//! The table is parsed by the `tsunagi-apidef` crate (`apidef/`).
//!
//! The source-tree files are rewritten only when their content changes.

use tsunagi_apidef::{parse, Arg, Func, Kind, Missing};

#[path = "build/fortran.rs"]
mod fortran;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Whether a pointer to `base` becomes a reference in the C entry points: the table's
/// handle and scalar types (`tsunagi_apidef`).
fn by_reference(base: &str) -> bool {
    tsunagi_apidef::HANDLES.contains(&base)
        || tsunagi_apidef::SCALARS.contains(&base)
        // The tools interface's handles (opaque pointers in the ABI).
        || (base.starts_with("MPI_T_") && !base.ends_with("_function"))
}
/// Function-pointer typedefs (`X *f` in C is `X` in Rust, an `Option<fn>`).
const FN_TYPES: &[&str] = &[
    "MPI_Win_copy_attr_function",
    "MPI_Win_delete_attr_function",
    "MPI_Win_errhandler_function",
    "MPI_File_errhandler_function",
    "MPI_Type_copy_attr_function",
    "MPI_Type_delete_attr_function",
    "MPI_Grequest_query_function",
    "MPI_Grequest_free_function",
    "MPI_Grequest_cancel_function",
    "MPI_Datarep_conversion_function",
    "MPI_Datarep_extent_function",
    "MPI_User_function",
    "MPI_User_function_c",
    "MPI_Datarep_conversion_function_c",
    "MPI_Comm_errhandler_function",
    "MPI_Comm_copy_attr_function",
    "MPI_Comm_delete_attr_function",
    "MPI_Copy_function",
    "MPI_Delete_function",
    "MPI_Session_errhandler_function",
    "MPI_T_event_cb_function",
    "MPI_T_event_free_cb_function",
    "MPI_T_event_dropped_cb_function",
];

fn rust_base(base: &str) -> String {
    match base {
        "int" => "c_int".into(),
        "double" => "f64".into(),
        "char" => "c_char".into(),
        "void" => "c_void".into(),
        other => other.into(),
    }
}

fn rust_type(a: &Arg) -> String {
    if FN_TYPES.contains(&a.base.as_str()) && a.depth == 1 {
        return a.base.clone();
    }
    let mut t = rust_base(&a.base);
    if let Some(n) = &a.fixed {
        t = format!("[{t}; {n}]");
    }
    for level in 0..a.depth {
        let q = if level == 0 && a.konst {
            "*const "
        } else {
            "*mut "
        };
        t = format!("{q}{t}");
    }
    t
}

fn snake(name: &str) -> String {
    name.to_lowercase()
}

/// The conversion line for one argument, and the expression passed to `imp`.
fn convert(a: &Arg) -> (Option<String>, String) {
    let n = &a.name;
    let null_ok = a.ann.contains("null");
    if a.ann.contains("raw") {
        return (None, n.clone());
    }
    if a.depth == 0 {
        let line = match a.base.as_str() {
            "MPI_Comm" if null_ok => Some(format!("let {n} = h::comm_or_null(\"{n}\", {n})?;")),
            "MPI_Comm" => Some(format!("let {n} = h::comm(\"{n}\", {n})?;")),
            "MPI_Datatype" if null_ok => {
                Some(format!("let {n} = h::dtype_or_null(\"{n}\", {n})?;"))
            }
            "MPI_Datatype" => Some(format!("let {n} = h::dtype(\"{n}\", {n})?;")),
            "MPI_Group" => Some(format!("let {n} = h::group(\"{n}\", {n})?;")),
            "MPI_Op" => Some(format!(
                "let {n} = match h::op_builtin({n}) {{ Some(d) => d, None => h::op_other(\"{n}\", {n})? }};"
            )),
            "MPI_Errhandler" => Some(format!("let {n} = h::errhandler(\"{n}\", {n})?;")),
            "MPI_Info" if null_ok => Some(format!("let {n} = h::info_or_null(\"{n}\", {n})?;")),
            "MPI_Info" => Some(format!("let {n} = h::info(\"{n}\", {n})?;")),
            "MPI_Win" => Some(format!("let {n} = imp::win(\"{n}\", {n})?;")),
            "MPI_File" => Some(format!("let {n} = imp::file(\"{n}\", {n})?;")),
            _ if a.ann.contains("count") => Some(format!("h::check_count(\"{n}\", {n})?;")),
            _ if a.ann.contains("nonneg") => Some(format!("h::check_nonneg(\"{n}\", {n})?;")),
            _ => None,
        };
        let pass = match a.base.as_str() {
            "MPI_Datatype" | "MPI_Group" | "MPI_Win" | "MPI_File" => format!("&{n}"),
            _ => n.clone(),
        };
        return (line, pass);
    }
    // `const char name[]` (MPI_Pack_external's datarep) is an input string like
    // `const char *name`.
    if a.depth == 1 && (!a.is_array || (a.base == "char" && a.konst)) {
        let safety = "// SAFETY: the C caller passes a pointer that is valid for this call, as the MPI\n        // standard requires; the helper checks it for NULL first.\n        ";
        if a.base == "MPI_Status" {
            if a.konst {
                return (
                    Some(format!(
                        "{safety}let {n} = unsafe {{ h::status_in(\"{n}\", {n})? }};"
                    )),
                    n.clone(),
                );
            }
            return (
                Some(format!(
                    "{safety}let {n} = unsafe {{ h::status_out({n}) }};"
                )),
                n.clone(),
            );
        }
        if a.base == "char" && a.konst {
            // `{null}`: significant at a root only (MPI_Comm_spawn's command), NULL
            // elsewhere is allowed.
            let f = if a.has("null") {
                "cstr_or_null"
            } else {
                "cstr"
            };
            return (
                Some(format!(
                    "{safety}let {n} = unsafe {{ h::{f}(\"{n}\", {n})? }};"
                )),
                n.clone(),
            );
        }
        if by_reference(&a.base) {
            let f = match (a.konst, null_ok) {
                (true, false) => "in_ref",
                (true, true) => "opt_ref",
                (false, false) => "out_mut",
                (false, true) => "opt_mut",
            };
            let q = if null_ok { "" } else { "?" };
            return (
                Some(format!(
                    "{safety}let {n} = unsafe {{ h::{f}(\"{n}\", {n}){q} }};"
                )),
                n.clone(),
            );
        }
    }
    (None, n.clone())
}

/// The C entry points. Each runs its body as a closure inside `entry` (or one of its
/// siblings), which catches panics and routes errors. The closures borrow the C arguments
/// instead of moving them (`|| { .. }`, not `move || { .. }`): a moving closure is a struct
/// of the `int` arguments, written with 4-byte stores just before the call, that `entry`
/// then read with 8- and 16-byte loads spanning two of those stores, which the processor
/// cannot forward from its store buffer (a stall of ~15 cycles each, two per MPI_Isend
/// and MPI_Irecv: 8-byte bandwidth both ways went from 0.78 to ~1.0 of Open MPI's). A
/// borrowing closure is a struct of pointers, each loaded as written.
fn gen_rust(funcs: &[Func]) -> String {
    let mut out = String::new();
    out.push_str("// Generated by c-abi/build.rs from c-abi/api.in. Do not edit.\n\n");
    for f in funcs {
        let call = format!("MPI_{}", f.name);
        let prefix = if f.stub { "_" } else { "" };
        let params: Vec<String> = f
            .args
            .iter()
            .filter(|a| !a.varargs)
            .map(|a| format!("{prefix}{}: {}", a.name, rust_type(a)))
            .collect();
        let ret = match f.ret.as_str() {
            "int" => "c_int".to_string(),
            other => rust_base(other),
        };
        if f.stub {
            writeln!(
                out,
                "/// `{call}`: exported stub; returns MPI_ERR_UNSUPPORTED_OPERATION."
            )
            .unwrap();
        } else if let Some(base) = &f.persistent_of {
            writeln!(
                out,
                "/// `{call}`: C entry point (generated; each start runs `imp::{}`).",
                snake(base)
            )
            .unwrap();
        } else {
            writeln!(
                out,
                "/// `{call}`: C entry point (generated; the work is in `imp::{}`).",
                snake(&f.name)
            )
            .unwrap();
        }
        writeln!(out, "///\n/// # Safety\n/// Pointer arguments must be valid as the MPI standard requires for `{call}`.").unwrap();
        writeln!(out, "#[no_mangle]").unwrap();
        writeln!(
            out,
            "pub unsafe extern \"C\" fn PMPI_{}({}) -> {ret} {{",
            f.name,
            params.join(", ")
        )
        .unwrap();
        let args: Vec<&Arg> = f.args.iter().filter(|a| !a.varargs).collect();
        if let Some(base) = &f.narrow_of {
            gen_narrow(&mut out, f, funcs, base);
            continue;
        }
        if let Some(base) = &f.persistent_of {
            gen_persistent(&mut out, f, funcs, base);
            continue;
        }
        if f.stub {
            let err_comm = args
                .iter()
                .find(|a| a.base == "MPI_Comm" && a.depth == 0)
                .map(|a| format!("h::err_comm(_{})", a.name))
                .unwrap_or_else(|| "None".into());
            // Invalid handles give their own class before "unsupported" (arguments are
            // checked first, the communicator first of all, as in implemented calls).
            let mut checks: Vec<(bool, String)> = args
                .iter()
                .filter(|a| a.depth == 0)
                .filter_map(|a| {
                    let n = &a.name;
                    let line = match a.base.as_str() {
                        // A peer communicator matters at the leaders only.
                        "MPI_Comm" if n == "peer_comm" => {
                            format!("h::comm_or_null(\"{n}\", _{n})?;")
                        }
                        "MPI_Comm" => format!("h::comm(\"{n}\", _{n})?;"),
                        "MPI_Datatype" => format!("h::dtype(\"{n}\", _{n})?;"),
                        "MPI_Group" => format!("h::group(\"{n}\", _{n})?;"),
                        "MPI_Op" => format!("h::op(\"{n}\", _{n})?;"),
                        "MPI_Errhandler" => format!("h::errhandler(\"{n}\", _{n})?;"),
                        "MPI_Info" => format!("h::info_or_null(\"{n}\", _{n})?;"),
                        "MPI_Win" => format!("h::win_not_null(\"{n}\", _{n})?;"),
                        "MPI_File" => format!("h::file_not_null(\"{n}\", _{n})?;"),
                        _ => return None,
                    };
                    Some((a.base != "MPI_Comm", line))
                })
                .collect();
            checks.sort_by_key(|(later, _)| *later);
            writeln!(out, "    entry(\"{call}\", {err_comm}, || {{").unwrap();
            for (_, l) in checks {
                writeln!(out, "        {l}").unwrap();
            }
            writeln!(out, "        Err(h::unsupported(\"{}\"))", f.section).unwrap();
            out.push_str("    })\n");
            out.push_str("}\n\n");
            continue;
        }
        if f.ret != "int" {
            let pass: Vec<String> = args.iter().map(|a| a.name.clone()).collect();
            if pass.is_empty() {
                writeln!(out, "    entry_value(\"{call}\", imp::{})", snake(&f.name)).unwrap();
            } else {
                writeln!(
                    out,
                    "    entry_value(\"{call}\", || imp::{}({}))",
                    snake(&f.name),
                    pass.join(", ")
                )
                .unwrap();
            }
            out.push_str("}\n\n");
            continue;
        }
        let err_comm = args
            .iter()
            .find(|a| a.base == "MPI_Comm" && a.depth == 0 && !a.ann.contains("raw"))
            .map(|a| format!("h::err_comm({})", a.name))
            .unwrap_or_else(|| "None".into());
        // Calls on a window (and no communicator) report through the window's handler.
        let err_win = args
            .iter()
            .find(|a| a.base == "MPI_Win" && a.depth == 0 && !a.ann.contains("raw"));
        // Calls on a file report through the file's handler; MPI_File_open, _delete and
        // MPI_Register_datarep through MPI_FILE_NULL's (the default file error handler).
        let err_file = args.iter().find(|a| a.base == "MPI_File").map(|a| {
            if a.depth == 0 {
                a.name.clone()
            } else {
                // MPI_File_close: the handle its argument points to.
                format!("imp::file_handle_at({})", a.name)
            }
        });
        match (err_win, err_file) {
            _ if f.session_arg().is_some() => {
                let session = match f.session_arg().flatten() {
                    Some(a) if a.depth == 0 => a.name.clone(),
                    Some(a) => format!(
                        "if {0}.is_null() {{ MPI_SESSION_NULL }} else {{\n        // SAFETY: a non-NULL MPI_Session * is valid for the call (MPI's contract).\n        unsafe {{ *{0} }} }}",
                        a.name
                    ),
                    None => "MPI_SESSION_NULL".into(),
                };
                writeln!(out, "    entry_session(\"{call}\", {session}, || {{").unwrap()
            }
            _ if f.is_tools() => writeln!(out, "    entry_tools(\"{call}\", || {{").unwrap(),
            (_, Some(fh)) if f.name.starts_with("File_") && f.name != "File_open" => {
                writeln!(out, "    entry_file(\"{call}\", {fh}, || {{").unwrap()
            }
            _ if matches!(
                f.name.as_str(),
                "File_open" | "File_delete" | "Register_datarep"
            ) =>
            {
                writeln!(
                    out,
                    "    entry_file(\"{call}\", core::ptr::null_mut(), || {{"
                )
                .unwrap()
            }
            (Some(w), _) if err_comm == "None" => {
                writeln!(out, "    entry_win(\"{call}\", {}, || {{", w.name).unwrap()
            }
            _ => writeln!(out, "    entry(\"{call}\", {err_comm}, || {{").unwrap(),
        }
        // The communicator is checked first (as MPICH does), then the arguments in order.
        let mut pass = Vec::new();
        let mut lines = Vec::new();
        for a in &args {
            let (line, p) = convert(a);
            if let Some(l) = line {
                let first = a.base == "MPI_Comm" && a.depth == 0;
                lines.push((!first, l));
            }
            pass.push(p);
        }
        lines.sort_by_key(|(later, _)| *later);
        for (_, l) in lines {
            writeln!(out, "        {l}").unwrap();
        }
        writeln!(out, "        imp::{}({})", snake(&f.name), pass.join(", ")).unwrap();
        out.push_str("    })\n}\n\n");
    }
    // Weak aliases, in this module (hence the same codegen unit as the functions).
    out.push_str("core::arch::global_asm!(\n");
    for f in funcs {
        writeln!(
            out,
            "    \".weak MPI_{0}\", \".set MPI_{0}, PMPI_{0}\",",
            f.name
        )
        .unwrap();
    }
    out.push_str(");\n\n");
    out.push_str("/// Every function with a generated entry point (stubs included), by MPI name.\npub const IMPLEMENTED: &[&str] = &[\n");
    for f in funcs {
        writeln!(out, "    \"MPI_{}\",", f.name).unwrap();
    }
    out.push_str("];\n");
    out.push_str("\n/// The functions without a Fortran binding (see `Func::in_fortran`), by MPI name.\npub const C_ONLY: &[&str] = &[\n");
    for f in funcs.iter().filter(|f| !f.in_fortran()) {
        writeln!(out, "    \"MPI_{}\",", f.name).unwrap();
    }
    out.push_str("];\n");
    out
}

/// The body of a `narrow` function: its MPI_Count arguments must fit the base function's
/// `int` ones (MPI_ERR_COUNT through the usual error handler otherwise); then it calls the
/// base function's entry point, which checks and reports everything else.
fn gen_narrow(out: &mut String, f: &Func, funcs: &[Func], base: &str) {
    let b = funcs
        .iter()
        .find(|g| g.name == base)
        .unwrap_or_else(|| panic!("api.in: {} narrows unknown {base}", f.name));
    assert_eq!(f.args.len(), b.args.len(), "{}: argument count", f.name);
    let call = format!("MPI_{}", f.name);
    let err_comm = b
        .args
        .iter()
        .find(|a| a.base == "MPI_Comm" && a.depth == 0 && !a.ann.contains("raw"))
        .map(|a| format!("h::err_comm({})", a.name));
    let err_win = b
        .args
        .iter()
        .find(|a| a.base == "MPI_Win" && a.depth == 0 && !a.ann.contains("raw"));
    let mut narrowed = Vec::new();
    let mut pass = Vec::new();
    // Arrays of MPI_Count or MPI_Aint where the base takes int: copied into int arrays
    // (each element checked) of the length the `_c` line's `{len=...}` names: an argument
    // (`count`), or `peers` / `local` (the communicator's peer or local group size),
    // `rooted` (peers at the root, 0 elsewhere), `indegree` / `outdegree` (topology).
    let mut arrays: Vec<(String, String)> = Vec::new();
    // `MPI_Count *` where the base writes an `int *`: widened after the call (`{inout}`:
    // narrowed before it too).
    let mut outs: Vec<(String, bool)> = Vec::new();
    for (a, ba) in f.args.iter().zip(&b.args) {
        let narrow_elem = (a.base == "MPI_Count" || a.base == "MPI_Aint") && ba.base == "int";
        if narrow_elem && a.depth == 0 && ba.depth == 0 {
            narrowed.push(a.name.clone());
            pass.push(a.name.clone());
        } else if a.base == "MPI_Count" && a.depth == 0 && ba.base == "MPI_Aint" {
            pass.push(format!("{} as MPI_Aint", a.name));
        } else if a.is_array && narrow_elem && a.depth == 1 {
            let len = match &a.kind {
                Kind::Array { len: Some(l), .. } => l.clone(),
                _ => panic!("{}: {} needs {{len=...}}", f.name, a.name),
            };
            let len = match len.as_str() {
                "peers" => "imp::peer_count(comm)?".to_string(),
                "local" => "imp::local_count(comm)?".to_string(),
                "rooted" => "imp::rooted_count(comm, root)?".to_string(),
                "indegree" => "imp::degrees(comm)?.0".to_string(),
                "outdegree" => "imp::degrees(comm)?.1".to_string(),
                arg => format!("imp::small(\"{arg}\", {arg} as MPI_Count)?.max(0) as usize"),
            };
            pass.push(format!(
                "arrays[{}].as_ref().map_or({} as *const c_int, |v| v.as_ptr())",
                arrays.len(),
                a.name
            ));
            arrays.push((a.name.clone(), len));
        } else if a.is_array && a.base == "MPI_Count" && ba.base == "MPI_Aint" && a.depth == 1 {
            // Both are 64-bit integers on the platforms Tsunagi builds for.
            pass.push(format!("{} as *const MPI_Aint", a.name));
        } else if !a.is_array && a.depth == 1 && narrow_elem {
            pass.push(format!("&mut outs[{}]", outs.len()));
            outs.push((a.name.clone(), a.has("inout")));
        } else {
            assert_eq!(
                a.c.replace(' ', ""),
                ba.c.replace(' ', ""),
                "{}: {}",
                f.name,
                a.name
            );
            pass.push(a.name.clone());
        }
    }
    let opener = match (&err_comm, err_win) {
        (None, Some(w)) => format!("entry_win(\"{call}\", {}, ", w.name),
        (c, _) => format!("entry(\"{call}\", {}, ", c.clone().unwrap_or("None".into())),
    };
    if narrowed.is_empty() && arrays.is_empty() && outs.is_empty() {
        writeln!(out, "    PMPI_{base}({})", pass.join(", ")).unwrap();
        out.push_str("}\n\n");
        return;
    }
    if !narrowed.is_empty() {
        writeln!(out, "    let mut small = [0 as c_int; {}];", narrowed.len()).unwrap();
    }
    if !arrays.is_empty() {
        writeln!(
            out,
            "    let mut arrays: [Option<Vec<c_int>>; {}] = Default::default();",
            arrays.len()
        )
        .unwrap();
    }
    if !outs.is_empty() {
        writeln!(out, "    let mut outs = [0 as c_int; {}];", outs.len()).unwrap();
    }
    writeln!(out, "    let rc = {opener}|| {{").unwrap();
    for (i, n) in narrowed.iter().enumerate() {
        writeln!(
            out,
            "        small[{i}] = imp::small(\"{n}\", {n} as MPI_Count)?;"
        )
        .unwrap();
    }
    for (i, (n, len)) in arrays.iter().enumerate() {
        writeln!(
            out,
            "        // SAFETY: the array has `len` elements where significant (MPI contract).\n        \
             arrays[{i}] = unsafe {{ imp::small_array(\"{n}\", {n}, {len}) }}?;"
        )
        .unwrap();
    }
    for (i, (n, inout)) in outs.iter().enumerate() {
        if *inout {
            writeln!(
                out,
                "        // SAFETY: a valid pointer (MPI contract).\n        \
                 outs[{i}] = imp::small(\"{n}\", unsafe {{ *h::out_mut(\"{n}\", {n})? }})?;"
            )
            .unwrap();
        }
    }
    out.push_str("        Ok(())\n    });\n    if rc != 0 {\n        return rc;\n    }\n");
    if !narrowed.is_empty() {
        writeln!(out, "    let [{}] = small;", narrowed.join(", ")).unwrap();
    }
    if outs.is_empty() {
        writeln!(out, "    PMPI_{base}({})", pass.join(", ")).unwrap();
        out.push_str("}\n\n");
        return;
    }
    writeln!(out, "    let rc = PMPI_{base}({});", pass.join(", ")).unwrap();
    for (i, (n, _)) in outs.iter().enumerate() {
        writeln!(
            out,
            "    if rc == MPI_SUCCESS && !{n}.is_null() {{\n        *{n} = outs[{i}] as _;\n    }}"
        )
        .unwrap();
    }
    out.push_str("    rc\n}\n\n");
}

/// The body of a persistent collective (`persistent ... = Iname`): the initialization
/// checks its own arguments as annotated and keeps the C arguments as given; every start
/// decodes them again and calls the non-blocking `Iname`'s implementation, whose schedule
/// `imp::persistent` takes as the work of the request. MPI forbids changing the buffers
/// and datatypes until the request is freed, so decoding again gives what initialization
/// would have; the count, displacement and datatype arrays are copied at initialization.
fn gen_persistent(out: &mut String, f: &Func, funcs: &[Func], base: &str) {
    let b = funcs
        .iter()
        .find(|g| g.name == base)
        .unwrap_or_else(|| panic!("api.in: {} is persistent of unknown {base}", f.name));
    let call = format!("MPI_{}", f.name);
    // A large-count persistent collective (`Gatherv_init_c = Igatherv_c`) keeps its own
    // MPI_Count arguments; each start narrows them (as the `narrow` Igatherv_c does) and
    // calls the int implementation, which copies the count arrays into its schedule.
    let (b, inner) = match &b.narrow_of {
        Some(inner) => (
            b,
            funcs
                .iter()
                .find(|g| &g.name == inner)
                .unwrap_or_else(|| panic!("api.in: {base} narrows unknown {inner}")),
        ),
        None => (b, b),
    };
    let kept: Vec<&Arg> = b.args.iter().filter(|a| a.name != "request").collect();
    let own: Vec<&str> = f.args.iter().map(|a| a.name.as_str()).collect();
    let expected: Vec<&str> = kept
        .iter()
        .map(|a| a.name.as_str())
        .chain(["info", "request"])
        .collect();
    assert_eq!(own, expected, "api.in: {} against {base}", f.name);
    let names: Vec<&str> = kept.iter().map(|a| a.name.as_str()).collect();
    let err_comm = f
        .args
        .iter()
        .find(|a| a.base == "MPI_Comm" && a.depth == 0)
        .map(|a| format!("h::err_comm({})", a.name))
        .unwrap_or_else(|| "None".into());
    writeln!(out, "    entry(\"{call}\", {err_comm}, || {{").unwrap();
    // The initialization's own checks, the communicator first (as everywhere); only the
    // request is used here.
    let mut lines = Vec::new();
    for a in &f.args {
        if let (Some(l), _) = convert(a) {
            let l = if a.name == "request" {
                l
            } else {
                l.replacen(
                    &format!("let {} = ", a.name),
                    &format!("let _{} = ", a.name),
                    1,
                )
            };
            lines.push((!(a.base == "MPI_Comm" && a.depth == 0), l));
        }
    }
    lines.sort_by_key(|(later, _)| *later);
    for (_, l) in lines {
        writeln!(out, "        {l}").unwrap();
    }
    // The count, displacement and datatype arrays are copied now, as MPICH does: a program
    // may free them once the initialization returns (mpi4py does), and each start reads the
    // copies. The copies move into the request's closure; `kept` points at them.
    let mut copies = Vec::new();
    for a in kept.iter().filter(|a| a.is_array && a.depth == 1) {
        let n = &a.name;
        let len = persistent_array_len(&f.name, a);
        writeln!(
            out,
            "        // SAFETY: the array has `len` elements where significant (MPI contract).\n        \
             let {n}_copy = unsafe {{ imp::keep_array({n}, {len}) }};\n        \
             let {n} = {n}_copy.as_ref().map_or({n}, |v| v.as_ptr());"
        )
        .unwrap();
        copies.push(format!("&{n}_copy"));
    }
    writeln!(
        out,
        "        let kept = imp::Captured(({},));",
        names.join(", ")
    )
    .unwrap();
    writeln!(
        out,
        "        imp::persistent(\"{call}\", request, move |request| {{"
    )
    .unwrap();
    if !copies.is_empty() {
        writeln!(out, "            let _ = ({},);", copies.join(", ")).unwrap();
    }
    writeln!(out, "            let ({},) = kept.get();", names.join(", ")).unwrap();
    if !std::ptr::eq(b, inner) {
        // Narrow before the handles are decoded (the lengths read the raw communicator).
        for (a, ia) in kept.iter().zip(&inner.args) {
            let narrow_elem = (a.base == "MPI_Count" || a.base == "MPI_Aint") && ia.base == "int";
            let n = &a.name;
            if narrow_elem && a.depth == 0 && ia.depth == 0 {
                writeln!(
                    out,
                    "            let {n} = imp::small(\"{n}\", {n} as MPI_Count)?;"
                )
                .unwrap();
            } else if a.is_array && narrow_elem && a.depth == 1 {
                let len = match &a.kind {
                    Kind::Array { len: Some(l), .. } => l.clone(),
                    _ => panic!("{}: {} needs {{len=...}}", b.name, a.name),
                };
                let len = match len.as_str() {
                    "peers" => "imp::peer_count(comm)?".to_string(),
                    "local" => "imp::local_count(comm)?".to_string(),
                    "rooted" => "imp::rooted_count(comm, root)?".to_string(),
                    "indegree" => "imp::degrees(comm)?.0".to_string(),
                    "outdegree" => "imp::degrees(comm)?.1".to_string(),
                    arg => format!("imp::small(\"{arg}\", {arg} as MPI_Count)?.max(0) as usize"),
                };
                writeln!(
                    out,
                    "            // SAFETY: the array has `len` elements where significant (MPI contract).\n            \
                     let {n}_small = unsafe {{ imp::small_array(\"{n}\", {n}, {len}) }}?;\n            \
                     let {n} = {n}_small.as_ref().map_or({n} as *const c_int, |v| v.as_ptr());"
                )
                .unwrap();
            } else if a.is_array && a.base == "MPI_Count" && ia.base == "MPI_Aint" {
                // Both are 64-bit integers on the platforms Tsunagi builds for.
                writeln!(out, "            let {n} = {n} as *const MPI_Aint;").unwrap();
            } else {
                assert_eq!(
                    a.c.replace(' ', ""),
                    ia.c.replace(' ', ""),
                    "{}: {}",
                    b.name,
                    a.name
                );
            }
        }
    }
    let mut pass = Vec::new();
    for a in inner.args.iter().filter(|a| a.name != "request") {
        let (line, p) = convert(a);
        if let Some(l) = line {
            writeln!(out, "            {l}").unwrap();
        }
        pass.push(p);
    }
    pass.push("request".into());
    writeln!(
        out,
        "            imp::{}({})",
        snake(&inner.name),
        pass.join(", ")
    )
    .unwrap();
    out.push_str("        })\n    })\n}\n\n");
}

/// How many elements array argument `a` of persistent collective `fname` has where it is
/// significant (an expression of the raw C arguments): the annotation of the large-count
/// form, else by the collective's kind. Send-side arrays of the all-to-all forms are
/// ignored with MPI_IN_PLACE (`(void *)-1`): none are read then.
fn persistent_array_len(fname: &str, a: &Arg) -> String {
    let kind = match &a.kind {
        Kind::Array { len: Some(l), .. } => l.clone(),
        _ => {
            let send_side = a.name.starts_with("send") || a.name == "sdispls";
            if fname.starts_with("Neighbor_") {
                if send_side { "outdegree" } else { "indegree" }.to_string()
            } else if fname.starts_with("Gatherv") || fname.starts_with("Scatterv") {
                "rooted".to_string()
            } else if fname.starts_with("Reduce_scatter") {
                "local".to_string()
            } else {
                "peers".to_string()
            }
        }
    };
    let len = match kind.as_str() {
        "peers" => "imp::peer_count(comm)?".to_string(),
        "local" => "imp::local_count(comm)?".to_string(),
        "rooted" => "imp::rooted_count(comm, root)?".to_string(),
        "indegree" => "imp::degrees(comm)?.0".to_string(),
        "outdegree" => "imp::degrees(comm)?.1".to_string(),
        arg => format!("({arg}).max(0) as usize"),
    };
    if fname.starts_with("Alltoall") && (a.name.starts_with("send") || a.name == "sdispls") {
        format!("if sendbuf as usize == usize::MAX {{ 0 }} else {{ {len} }}")
    } else {
        len
    }
}

fn c_proto(f: &Func, prefix: &str) -> String {
    let args: Vec<&str> = f.args.iter().map(|a| a.c.as_str()).collect();
    let args = if args.is_empty() {
        "void".to_string()
    } else {
        args.join(", ")
    };
    format!("{} {prefix}{}({args});", f.ret, f.name)
}

fn gen_header(template: &str, funcs: &[Func]) -> String {
    let mut p = String::new();
    let mut section = "";
    for f in funcs {
        if f.section != section {
            section = &f.section;
            writeln!(p, "\n/* {section} */").unwrap();
        }
        writeln!(p, "{}", c_proto(f, "MPI_")).unwrap();
    }
    p.push_str("\n/* The profiling interface: every function above as PMPI_ */\n");
    for f in funcs {
        writeln!(p, "{}", c_proto(f, "PMPI_")).unwrap();
    }
    template.replace("@PROTOTYPES@", p.trim())
}

/// Every function MPI 4.1 added to the C interface (MPI 4.1, Annex B.1); coverage.md says
/// which of them are implemented, and `mpi.h` claims MPI 4.1 (MPI_VERSION 4,
/// MPI_SUBVERSION 1) because all are.
const MPI41_FUNCTIONS: &[&str] = &[
    "Remove_error_class",
    "Remove_error_code",
    "Remove_error_string",
    "Status_get_source",
    "Status_set_source",
    "Status_get_tag",
    "Status_set_tag",
    "Status_get_error",
    "Status_set_error",
    "Request_get_status_any",
    "Request_get_status_all",
    "Request_get_status_some",
    "Type_get_value_index",
    "Get_hw_resource_info",
    "Buffer_flush",
    "Buffer_iflush",
    "Comm_attach_buffer",
    "Comm_detach_buffer",
    "Comm_flush_buffer",
    "Comm_iflush_buffer",
    "Comm_attach_buffer_c",
    "Comm_detach_buffer_c",
    "Session_attach_buffer",
    "Session_detach_buffer",
    "Session_flush_buffer",
    "Session_iflush_buffer",
    "Session_attach_buffer_c",
    "Session_detach_buffer_c",
];

fn gen_coverage(funcs: &[Func], missing: &[Missing]) -> String {
    let mut s = String::new();
    s.push_str("# C API coverage\n\n");
    s.push_str(
        "Generated by `c-abi/build.rs` from `c-abi/api.in`; do not edit. Every implemented\n",
    );
    s.push_str("function is exported as `PMPI_X` with `MPI_X` as a weak alias and declared in\n");
    s.push_str("`c-abi/include/mpi.h`. Every function but the handle conversions (`_c2f`,\n");
    s.push_str(
        "`_f2c`), the tools interface (`MPI_T_*`, C only in the standard), C's views of the\n",
    );
    s.push_str(
        "Fortran 2008 status (`MPI_Status_*f08*`) and MPI_Info_create_env (main's argc/argv)\n",
    );
    s.push_str(
        "also has its Fortran binding (mpif.h, `use mpi`, `use mpi_f08`), generated from the\nsame table.\n\n",
    );
    let nmiss: usize = missing.iter().map(|m| m.names.len()).sum();
    let nstub = funcs.iter().filter(|f| f.stub).count();
    writeln!(
        s,
        "{} functions implemented; {nstub} exported as stubs that return\n\
         MPI_ERR_UNSUPPORTED_OPERATION; {nmiss} functions of MPI 3.1 and MPI 4.0 missing (not\n\
         exported; checked against every function MPICH 4.0 declares).\n",
        funcs.len() - nstub,
    )
    .unwrap();
    // MPI 4.1: each function it added, with its state; mpi.h says 4.1 only if all are in.
    let state = |name: &str| match funcs.iter().find(|f| f.name == name) {
        Some(f) if f.stub => "stub",
        Some(_) => "implemented",
        None => "missing",
    };
    let done = MPI41_FUNCTIONS
        .iter()
        .filter(|n| state(n) == "implemented")
        .count();
    assert_eq!(
        done,
        MPI41_FUNCTIONS.len(),
        "mpi.h claims MPI 4.1, but not every MPI 4.1 function is implemented"
    );
    writeln!(
        s,
        "## MPI 4.1\n\n\
         `mpi.h` says MPI_VERSION 4, MPI_SUBVERSION 1. Every function MPI 4.1 added is\n\
         implemented ({done} of {}), with its new constants (MPI_ERR_ERRHANDLER,\n\
         MPI_COMBINER_VALUE_INDEX, MPI_COMM_TYPE_RESOURCE_GUIDED, MPI_BUFFER_AUTOMATIC):\n",
        MPI41_FUNCTIONS.len()
    )
    .unwrap();
    for name in MPI41_FUNCTIONS {
        write!(s, " MPI_{name}").unwrap();
    }
    s.push_str("\n\n");
    for (title, stubs) in [
        ("## Implemented", false),
        (
            "## Stubs (return MPI_ERR_UNSUPPORTED_OPERATION with a message)",
            true,
        ),
    ] {
        s.push_str(title);
        let mut section = "";
        for f in funcs.iter().filter(|f| f.stub == stubs) {
            if f.section != section {
                section = &f.section;
                write!(s, "\n\n**{section}:**").unwrap();
            }
            write!(s, " MPI_{}", f.name).unwrap();
        }
        s.push_str("\n\n");
    }
    s.push_str("## Missing (not exported; programs that call them do not link)\n\n");
    for m in missing {
        let names: Vec<String> = m.names.iter().map(|n| format!("MPI_{n}")).collect();
        writeln!(s, "- {}: {}", m.reason, names.join(" ")).unwrap();
    }
    s
}

fn write_if_changed(path: &Path, content: &str) {
    if std::fs::read_to_string(path).ok().as_deref() != Some(content) {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("create output directory");
        }
        std::fs::write(path, content).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    }
}

fn main() {
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("manifest dir"));
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    println!("cargo:rerun-if-changed=api.in");
    println!("cargo:rerun-if-changed=mpi.h.in");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=build/fortran.rs");
    let table = std::fs::read_to_string(dir.join("api.in")).expect("read api.in");
    let (funcs, missing) = parse(&table);
    write_if_changed(&out.join("entry_points.rs"), &gen_rust(&funcs));
    write_if_changed(
        &out.join("fortran_points.rs"),
        &fortran::gen_entry_points(&funcs),
    );
    let map = "{\n  global:\n    MPI_*;\n    PMPI_*;\n    MPIR_*;\n    MPII_Grequest_set_lang_f77;\n    mpi_*;\n    pmpi_*;\n    mpipriv*;\n    mpifcmb*;\n    __mpi_f08_types_MOD_*;\n};\n";
    write_if_changed(&out.join("exports.map"), map);
    let template = std::fs::read_to_string(dir.join("mpi.h.in")).expect("read mpi.h.in");
    write_if_changed(&dir.join("include/mpi.h"), &gen_header(&template, &funcs));
    let consts = fortran::constants(&template);
    write_if_changed(&dir.join("include/mpif.h"), &fortran::gen_mpif_h(&consts));
    write_if_changed(
        &dir.join("fortran/mpi.f90"),
        &fortran::gen_mpi_module(&consts, &funcs),
    );
    write_if_changed(
        &dir.join("fortran/mpi_f08.f90"),
        &fortran::gen_f08_module(&consts, &funcs),
    );
    write_if_changed(
        &dir.join("../docs/coverage.md"),
        &gen_coverage(&funcs, &missing),
    );
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        out.join("exports.map").display()
    );
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libmpi.so.12");
}
