//! `mpiexec`: the same program as `mpirun` (a separate file only so Cargo does not warn
//! about one source file serving two binaries).

fn main() {
    std::process::exit(tsunagi_launcher::main_with(std::env::args_os().collect()));
}
