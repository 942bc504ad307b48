//! Helpers shared by the C and Fortran suites: the private install prefix (made with the
//! same `install-c` script `scripts/install` uses), running commands, our `mpirun`.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// target/<profile>, found from this test binary (target/<profile>/deps/<suite>-*).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>")
        .to_path_buf()
}

pub fn src_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    out
}

pub fn check(cmd: &mut Command) -> String {
    let out = run(cmd);
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The installed prefix (built once per test process).
pub fn prefix() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let dir = profile_dir();
        let lib = dir.join("libmpi.so");
        // `cargo test` builds the library as an rlib for the tests; the C programs need the
        // cdylib (and mpirun) of this very profile, so build them (a no-op when fresh).
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args([
            "build",
            "-p",
            "tsunagi-c-abi",
            "-p",
            "tsunagi-launcher",
            "--lib",
            "--bins",
        ])
        .arg("--target-dir")
        .arg(dir.parent().expect("target dir"))
        .current_dir(src_dir());
        if dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        check(&mut cmd);
        let p = dir.join("c-abi-prefix");
        let _ = std::fs::remove_dir_all(&p);
        check(
            Command::new(src_dir().join("scripts/install-c"))
                .arg(&p)
                .arg(&lib),
        );
        p
    })
}

pub fn mpirun() -> PathBuf {
    profile_dir().join("mpirun")
}

/// Whether `tool` is on PATH.
pub fn have(tool: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}
