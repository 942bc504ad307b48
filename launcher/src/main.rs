//! `mpirun`: see the crate documentation of `tsunagi_launcher`.

fn main() {
    std::process::exit(tsunagi_launcher::main_with(std::env::args_os().collect()));
}
