//! Error classes and codes: the predefined classes (the core's `ErrorClass`, MPICH's
//! numbers up to MPI_ERR_LASTCODE) and those the program adds with MPI_Add_error_class,
//! MPI_Add_error_code and MPI_Add_error_string, which take the values above
//! MPI_ERR_LASTCODE in the order they are made (MPI_LASTUSEDCODE is the last of them).
//! MPI 4.1's MPI_Remove_error_class/code/string take them back: a removed value stays
//! unused (so MPI_LASTUSEDCODE never goes down) and is no error code any more.

use std::ffi::{c_char, c_int};
use std::sync::Mutex;

use tsunagi_core::error::LAST_CODE;
use tsunagi_core::{ErrorClass, MpiResult};

use crate::ffi::*;
use crate::handles::{self as h, err, lock};

/// A class or code made by the program: its class (itself for a class) and its string.
struct UserCode {
    class: c_int,
    string: String,
    removed: bool,
}

/// By value - LAST_CODE - 1.
static USER: Mutex<Vec<UserCode>> = Mutex::new(Vec::new());

/// The class of `code`: predefined classes are their own class; user codes have theirs.
fn class_of(code: c_int) -> Option<c_int> {
    if ErrorClass::from_code(code).is_some() {
        return Some(code);
    }
    let k = code.checked_sub(LAST_CODE + 1)?;
    lock(&USER)
        .get(usize::try_from(k).ok()?)
        .filter(|u| !u.removed)
        .map(|u| u.class)
}

fn invalid(name: &str, code: c_int) -> tsunagi_core::MpiError {
    err(
        ErrorClass::Arg,
        format!("{name} = {code} is neither a predefined error code nor one made by MPI_Add_error_class/code"),
    )
}

/// The value of MPI_LASTUSEDCODE: the last user code, or MPI_ERR_LASTCODE.
pub(crate) fn last_used_code() -> c_int {
    LAST_CODE + lock(&USER).len() as c_int
}

pub(crate) fn error_string(code: c_int, s: *mut c_char, len: &mut c_int) -> MpiResult<()> {
    let text = match ErrorClass::from_code(code) {
        Some(c) => c.description().to_string(),
        None => {
            class_of(code).ok_or_else(|| invalid("errorcode", code))?;
            let k = (code - LAST_CODE - 1) as usize;
            lock(&USER)[k].string.clone()
        }
    };
    // SAFETY: MPI requires room for MPI_MAX_ERROR_STRING bytes.
    *len = unsafe { h::write_cstr("string", s, MPI_MAX_ERROR_STRING, &text)? } as c_int;
    Ok(())
}

pub(crate) fn error_class(code: c_int, class: &mut c_int) -> MpiResult<()> {
    *class = class_of(code).ok_or_else(|| invalid("errorcode", code))?;
    Ok(())
}

fn add(class: Option<c_int>) -> MpiResult<c_int> {
    let mut u = lock(&USER);
    let value = LAST_CODE
        .checked_add(1 + u.len() as c_int)
        .ok_or_else(|| err(ErrorClass::Intern, "no error codes left"))?;
    u.push(UserCode {
        class: class.unwrap_or(value),
        string: String::new(),
        removed: false,
    });
    Ok(value)
}

pub(crate) fn add_error_class(class: &mut c_int) -> MpiResult<()> {
    *class = add(None)?;
    Ok(())
}

pub(crate) fn add_error_code(class: c_int, code: &mut c_int) -> MpiResult<()> {
    // The class must be a class: predefined, or one added (whose class is itself).
    if class_of(class) != Some(class) {
        return Err(err(
            ErrorClass::Arg,
            format!("errorclass = {class} is not an error class"),
        ));
    }
    *code = add(Some(class))?;
    Ok(())
}

pub(crate) fn add_error_string(code: c_int, s: &str) -> MpiResult<()> {
    if ErrorClass::from_code(code).is_some() {
        return Err(err(
            ErrorClass::Arg,
            format!("errorcode = {code} is predefined; its string cannot be changed"),
        ));
    }
    class_of(code).ok_or_else(|| invalid("errorcode", code))?;
    if s.len() >= MPI_MAX_ERROR_STRING {
        return Err(err(
            ErrorClass::Arg,
            format!(
                "string is {} bytes; at most MPI_MAX_ERROR_STRING - 1 = {} fit",
                s.len(),
                MPI_MAX_ERROR_STRING - 1
            ),
        ));
    }
    lock(&USER)[(code - LAST_CODE - 1) as usize].string = s.to_string();
    Ok(())
}

/// The index in [`USER`] of `code`, a live class or code the program made.
fn user_index(name: &str, code: c_int) -> MpiResult<usize> {
    if ErrorClass::from_code(code).is_some() {
        return Err(err(
            ErrorClass::Arg,
            format!("{name} = {code} is predefined; only values made by MPI_Add_error_class/code can be removed"),
        ));
    }
    class_of(code).ok_or_else(|| invalid(name, code))?;
    Ok((code - LAST_CODE - 1) as usize)
}

pub(crate) fn remove_error_class(class: c_int) -> MpiResult<()> {
    let k = user_index("errorclass", class)?;
    let mut u = lock(&USER);
    if u[k].class != class {
        return Err(err(
            ErrorClass::Arg,
            format!("errorclass = {class} is an error code, not a class (MPI_Remove_error_code)"),
        ));
    }
    if let Some(i) = u
        .iter()
        .enumerate()
        .position(|(i, c)| i != k && !c.removed && c.class == class)
    {
        return Err(err(
            ErrorClass::Arg,
            format!(
                "error class {class} still has error code {}: remove its codes first",
                LAST_CODE + 1 + i as c_int
            ),
        ));
    }
    string_removed(&u[k], class)?;
    u[k].removed = true;
    Ok(())
}

/// MPI 4.1 §9.5: a class or code with a string cannot go before its string.
fn string_removed(u: &UserCode, code: c_int) -> MpiResult<()> {
    if u.string.is_empty() {
        return Ok(());
    }
    Err(err(
        ErrorClass::Arg,
        format!("{code} still has an error string: MPI_Remove_error_string first"),
    ))
}

pub(crate) fn remove_error_code(code: c_int) -> MpiResult<()> {
    let k = user_index("errorcode", code)?;
    let mut u = lock(&USER);
    if u[k].class == code {
        return Err(err(
            ErrorClass::Arg,
            format!("errorcode = {code} is an error class, not a code (MPI_Remove_error_class)"),
        ));
    }
    string_removed(&u[k], code)?;
    u[k].removed = true;
    Ok(())
}

pub(crate) fn remove_error_string(code: c_int) -> MpiResult<()> {
    let k = user_index("errorcode", code)?;
    lock(&USER)[k].string.clear();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_predefined_class_is_its_own_class_and_user_codes_live_above_lastcode() {
        for &c in ErrorClass::ALL {
            let mut k = -1;
            error_class(c as c_int, &mut k).expect("predefined");
            assert_eq!(k, c as c_int);
        }
        assert!(error_class(54, &mut 0).is_err());
        assert!(error_class(-1, &mut 0).is_err());
        assert!(error_class(LAST_CODE + 1_000_000, &mut 0).is_err());
        let (mut cls, mut code, mut code2) = (0, 0, 0);
        add_error_class(&mut cls).unwrap();
        assert!(cls > LAST_CODE);
        add_error_code(cls, &mut code).unwrap();
        add_error_code(ErrorClass::Io as c_int, &mut code2).unwrap();
        assert!(code > cls && code2 > code);
        assert!(last_used_code() >= code2);
        let mut k = 0;
        error_class(code, &mut k).unwrap();
        assert_eq!(k, cls);
        error_class(code2, &mut k).unwrap();
        assert_eq!(k, ErrorClass::Io as c_int);
        assert!(
            add_error_code(code, &mut 0).is_err(),
            "a code is not a class"
        );
        add_error_string(code, "my code").unwrap();
        assert!(add_error_string(ErrorClass::Io as c_int, "no").is_err());
        assert!(add_error_string(code, &"x".repeat(MPI_MAX_ERROR_STRING)).is_err());
        let mut buf = [0 as c_char; MPI_MAX_ERROR_STRING];
        let mut len = 0;
        error_string(code, buf.as_mut_ptr(), &mut len).unwrap();
        assert_eq!(len, 7);
        error_string(cls, buf.as_mut_ptr(), &mut len).unwrap();
        assert_eq!(len, 0, "no string set: empty");
    }
}
