//! Support shared by the workspace's integration tests (a dev-dependency only).
//!
//! A test whose prerequisite is missing (Debian's MPICH, network namespaces, Slurm, a C
//! or Fortran compiler) may skip on a developer's machine, but must not pass silently in
//! CI: `TSUNAGI_REQUIRE` lists the prerequisites that must be there (comma-separated names,
//! or `all`); `.ci/run` sets `TSUNAGI_REQUIRE=all`, and any run with `CI` set demands all.

pub mod netns;

/// True when `TSUNAGI_REQUIRE` demands `prereq`, or `CI` is set.
pub fn required(prereq: &str) -> bool {
    std::env::var_os("CI").is_some()
        || std::env::var("TSUNAGI_REQUIRE").is_ok_and(|v| demands(&v, prereq))
}

fn demands(spec: &str, prereq: &str) -> bool {
    spec.split(',')
        .map(str::trim)
        .any(|p| p == "all" || p == prereq)
}

/// Report that `prereq` is missing (`why` says what and how to get it): a skip message
/// where it is not required, a panic (the test fails) where it is.
#[track_caller]
pub fn missing(prereq: &str, why: &str) {
    if required(prereq) {
        panic!("{why}, and TSUNAGI_REQUIRE demands '{prereq}'");
    }
    eprintln!("skipped: {why}");
}

#[cfg(test)]
mod tests {
    use super::demands;

    #[test]
    fn requirement_lists() {
        assert!(demands("all", "mpich"));
        assert!(demands("netns, mpich", "mpich"));
        assert!(!demands("netns", "mpich"));
        assert!(!demands("", "mpich"));
    }
}
