//! Command-line parsing for mpirun/mpiexec, kept free of side effects (the environment is
//! passed in) so it is unit-testable.

use std::ffi::{OsStr, OsString};

/// What the user asked for.
#[derive(Debug, PartialEq, Eq)]
pub enum Action {
    Run(Options),
    Help,
    Version,
}

/// A job to run.
#[derive(Debug, PartialEq, Eq)]
pub struct Options {
    /// Number of ranks.
    pub np: u32,
    /// The program as given (resolved against PATH later, when it is started).
    pub program: OsString,
    pub args: Vec<OsString>,
    /// Variables to set in every rank, in command-line order (later ones win): from
    /// `--env VAR=VAL`, `-env VAR VAL`, `-x VAR[=VAL]`, `--progress` and `--node-map`.
    pub env: Vec<(OsString, OsString)>,
}

/// The text of `--help`.
pub fn usage(prog: &str) -> String {
    format!(
        "Usage: {prog} [options] program [args...]\n\
         \n\
         Start `program` as an MPI job on this host.\n\
         \n\
         Options:\n  \
           -n N, -np N, --np N   number of ranks (default 1)\n  \
           --oversubscribe       accepted; more ranks than cores are always allowed\n  \
           -x VAR[=VAL]          export VAR (from this environment, or set to VAL) to the ranks\n  \
           --env VAR=VAL         set VAR=VAL in the ranks (also: -env VAR VAL)\n  \
           --progress MODE       progress engine for the ranks: polling or threaded\n  \
           --node-map SPEC       node map for the ranks (sets TSUNAGI_NODE_MAP)\n  \
           --version             print the version and exit\n  \
           -h, --help            print this help and exit\n\
         \n\
         Options stop at the first argument that is not an option (or after `--`).\n\
         The exit status is 0 only if every rank exits 0; a rank that fails, is killed or\n\
         calls MPI_Abort ends the whole job.\n"
    )
}

/// Parse `args` (without argv[0]). `getenv` looks up mpirun's own environment for `-x VAR`.
/// The error is one line for the user, without the program-name prefix.
pub fn parse(
    args: &[OsString],
    getenv: impl Fn(&OsStr) -> Option<OsString>,
) -> Result<Action, String> {
    let mut np: Option<u32> = None;
    let mut env = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        let Some(s) = arg.to_str() else {
            // Not UTF-8: cannot be one of our options, so it is the program.
            break;
        };
        if s == "--" {
            i += 1;
            break;
        }
        if !s.starts_with('-') || s == "-" {
            break;
        }
        // `--opt=value` form for long options.
        let (name, inline) = match s.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v.to_string())),
            _ => (s, None),
        };
        // The value of an option: inline or the next argument.
        let mut value = |what: &str| -> Result<String, String> {
            if let Some(v) = inline.clone() {
                return Ok(v);
            }
            i += 1;
            match args.get(i) {
                Some(v) => v
                    .to_str()
                    .map(str::to_string)
                    .ok_or_else(|| format!("{name}: {what} is not valid UTF-8")),
                None => Err(format!("{name} needs {what}")),
            }
        };
        match name {
            "-h" | "--help" | "-help" => return Ok(Action::Help),
            "--version" | "-version" | "-V" => return Ok(Action::Version),
            "-n" | "-np" | "--np" | "--n" | "-c" => {
                let v = value("a number of ranks")?;
                match v.parse::<u32>() {
                    Ok(n) if n >= 1 => np = Some(n),
                    _ => return Err(format!("{name}: invalid number of ranks {v:?}")),
                }
            }
            "--oversubscribe" | "-oversubscribe" => {}
            "-x" => {
                let v = value("a variable name")?;
                match v.split_once('=') {
                    Some((k, val)) if !k.is_empty() => env.push((k.into(), val.into())),
                    Some(_) => return Err(format!("-x: invalid variable {v:?}")),
                    None => {
                        if v.is_empty() {
                            return Err("-x: empty variable name".to_string());
                        }
                        if let Some(val) = getenv(OsStr::new(&v)) {
                            env.push((v.into(), val));
                        }
                    }
                }
            }
            "--env" | "-env" | "-genv" => {
                let v = value("VAR=VAL")?;
                match v.split_once('=') {
                    Some((k, val)) if !k.is_empty() => env.push((k.into(), val.into())),
                    Some(_) => return Err(format!("{name}: invalid variable {v:?}")),
                    // Hydra's form: `-env VAR VAL`.
                    None if inline.is_none() && !v.is_empty() => {
                        let val = value("a value")?;
                        env.push((v.into(), val.into()));
                    }
                    None => return Err(format!("{name}: expected VAR=VAL, got {v:?}")),
                }
            }
            "--progress" => {
                let v = value("polling or threaded")?;
                if v != "polling" && v != "threaded" {
                    return Err(format!(
                        "--progress: unknown mode {v:?} (expected polling or threaded)"
                    ));
                }
                env.push(("TSUNAGI_PROGRESS".into(), v.into()));
            }
            "--node-map" => {
                let v = value("a node map")?;
                env.push(("TSUNAGI_NODE_MAP".into(), v.into()));
            }
            _ => return Err(format!("unknown option {s:?}")),
        }
        i += 1;
    }
    let Some(program) = args.get(i).cloned() else {
        return Err("no program given".to_string());
    };
    Ok(Action::Run(Options {
        np: np.unwrap_or(1),
        program,
        args: args[i + 1..].to_vec(),
        env,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Action, String> {
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        parse(&args, |k| (k == "HOME").then(|| OsString::from("/home/u")))
    }

    fn run(args: &[&str]) -> Options {
        match p(args) {
            Ok(Action::Run(o)) => o,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    fn env(o: &Options) -> Vec<(String, String)> {
        o.env
            .iter()
            .map(|(k, v)| (k.to_str().unwrap().into(), v.to_str().unwrap().into()))
            .collect()
    }

    #[test]
    fn rank_counts() {
        assert_eq!(run(&["-n", "4", "prog"]).np, 4);
        assert_eq!(run(&["-np", "3", "prog"]).np, 3);
        assert_eq!(run(&["--np", "2", "prog"]).np, 2);
        assert_eq!(run(&["--np=5", "prog"]).np, 5);
        assert_eq!(run(&["prog"]).np, 1);
        assert!(p(&["-n", "0", "prog"]).is_err());
        assert!(p(&["-n", "x", "prog"]).is_err());
        assert!(p(&["-n"]).is_err());
    }

    #[test]
    fn stops_at_first_non_option() {
        let o = run(&["-n", "2", "--oversubscribe", "prog", "-n", "7", "--help"]);
        assert_eq!(o.program, "prog");
        assert_eq!(o.args, vec!["-n", "7", "--help"]);
        let o = run(&["--", "-weird-name", "a"]);
        assert_eq!(o.program, "-weird-name");
        assert_eq!(o.args, vec!["a"]);
    }

    #[test]
    fn environment_options() {
        let o = run(&[
            "-x",
            "HOME",
            "-x",
            "UNSET_VAR",
            "-x",
            "A=1",
            "--env",
            "B=2=3",
            "-env",
            "C",
            "4",
            "--env=D=5",
            "--progress",
            "threaded",
            "--node-map",
            "0,0,1,1",
            "prog",
        ]);
        assert_eq!(
            env(&o),
            vec![
                ("HOME".into(), "/home/u".into()),
                ("A".into(), "1".into()),
                ("B".into(), "2=3".into()),
                ("C".into(), "4".into()),
                ("D".into(), "5".into()),
                ("TSUNAGI_PROGRESS".into(), "threaded".into()),
                ("TSUNAGI_NODE_MAP".into(), "0,0,1,1".into()),
            ]
        );
        assert!(p(&["--progress", "busy", "prog"]).is_err());
        assert!(p(&["--env", "=x", "prog"]).is_err());
    }

    #[test]
    fn help_version_and_errors() {
        assert_eq!(p(&["--version"]), Ok(Action::Version));
        assert_eq!(p(&["-h"]), Ok(Action::Help));
        assert_eq!(p(&["-n", "2", "--help", "prog"]), Ok(Action::Help));
        assert!(p(&[]).unwrap_err().contains("no program"));
        assert!(p(&["--bogus", "prog"]).unwrap_err().contains("--bogus"));
    }
}
