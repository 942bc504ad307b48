//! Compiles `src/shim.c` once per vendor MPI whose `mpi.h` is installed, each copy against
//! that vendor's own header and with its own symbol prefix, and tells the crate which
//! vendors it has (`cfg(tsunagi_vendor_mpich)`, `cfg(tsunagi_vendor_openmpi)`).
//!
//! Header locations are Debian's; `TSUNAGI_MPICH_INCLUDE` / `TSUNAGI_OPENMPI_INCLUDE`
//! point elsewhere. A missing header leaves that vendor out of the build (a run that asks
//! for it then fails with a message saying so); with `TSUNAGI_REQUIRE=all` (CI) a missing
//! header fails the build instead.

use std::path::PathBuf;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(tsunagi_vendor_mpich)");
    println!("cargo::rustc-check-cfg=cfg(tsunagi_vendor_openmpi)");
    println!("cargo::rerun-if-changed=src/shim.c");
    let vendors = [
        (
            "mpich",
            "TSUNAGI_MPICH_INCLUDE",
            "/usr/include/x86_64-linux-gnu/mpich",
        ),
        (
            "openmpi",
            "TSUNAGI_OPENMPI_INCLUDE",
            "/usr/lib/x86_64-linux-gnu/openmpi/include",
        ),
    ];
    let required = std::env::var("TSUNAGI_REQUIRE").is_ok_and(|v| v == "all");
    println!("cargo::rerun-if-env-changed=TSUNAGI_REQUIRE");
    for (name, var, default) in vendors {
        println!("cargo::rerun-if-env-changed={var}");
        let dir = PathBuf::from(std::env::var(var).unwrap_or_else(|_| default.to_string()));
        let header = dir.join("mpi.h");
        if !header.is_file() {
            if required {
                panic!(
                    "tsunagi-vendor: {} not found (install the {name} development package, or set {var})",
                    header.display()
                );
            }
            println!(
                "cargo::warning=tsunagi-vendor: no {} ({name} left out of this build)",
                header.display()
            );
            continue;
        }
        println!("cargo::rerun-if-changed={}", header.display());
        cc::Build::new()
            .file("src/shim.c")
            .include(&dir)
            .define("SHIM_PREFIX", format!("tsunagi_vshim_{name}_").as_str())
            .warnings(true)
            .extra_warnings(true)
            .compile(&format!("tsunagi_vshim_{name}"));
        println!("cargo::rustc-cfg=tsunagi_vendor_{name}");
    }
}
