//! Command-line parsing for mpirun/mpiexec, kept free of side effects (the environment is
//! passed in) so it is unit-testable.

use std::ffi::{OsStr, OsString};

/// What the user asked for.
#[derive(Debug, PartialEq, Eq)]
pub enum Action {
    Run(Box<Options>),
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
    /// `--env VAR=VAL`, `-env VAR VAL`, `-x VAR[=VAL]`, `--progress`, `--internode` and
    /// `--node-map`.
    pub env: Vec<(OsString, OsString)>,
    /// `-n` was given (otherwise a multi-host job runs one rank per slot).
    pub np_given: bool,
    /// `--host h1:2,h2:2`.
    pub host: Option<String>,
    /// `--hostfile FILE`.
    pub hostfile: Option<OsString>,
    /// `--map-by slot|node`.
    pub map_by: crate::hosts::MapBy,
    /// `--oversubscribe`: more ranks than slots allowed.
    pub oversubscribe: bool,
    /// `--launch-agent TEMPLATE`: how to start an agent on `{host}` (default `ssh`).
    pub launch_agent: Option<String>,
    /// `--launch-addr IP`: the address agents connect back to.
    pub launch_addr: Option<String>,
    /// `--sites FILE`: a job over the sites the file lists, joined by IMPI.
    pub sites: Option<OsString>,
    /// `--vendor mpich|openmpi|PATH`: start the job with that vendor MPI's own launcher and
    /// move messages over it (see `crate::vendor`).
    pub vendor: Option<String>,
}

/// The text of `--help`.
pub fn usage(prog: &str) -> String {
    format!(
        "Usage: {prog} [options] program [args...]\n\
         \n\
         Start `program` as an MPI job on this host or on several hosts.\n\
         \n\
         Options:\n  \
           -n N, -np N, --np N   number of ranks (default 1)\n  \
           --host H1:N1,H2:N2    run on these hosts with these slot counts\n  \
           --hostfile FILE       hosts from FILE (lines `host slots=N` or `host:N`, # comments)\n  \
           --map-by slot|node    fill each host's slots first (default) or round robin\n  \
           --oversubscribe       allow more ranks than slots (more than cores is always allowed)\n  \
           --launch-agent CMD    start remote agents with CMD, `{{host}}` replaced by the host\n  \
                                 (default: ssh -o BatchMode=yes {{host}})\n  \
           --launch-addr IP      address remote agents connect back to (default: the first\n  \
                                 non-loopback IPv4 address, or TSUNAGI_LAUNCH_ADDR)\n  \
           -x VAR[=VAL]          export VAR (from this environment, or set to VAL) to the ranks\n  \
           --env VAR=VAL         set VAR=VAL in the ranks (also: -env VAR VAL)\n  \
           --progress MODE       progress engine for the ranks: polling or threaded\n  \
           --internode NAME      transport between hosts: tcp (default), stream, pm\n  \
                                 (sets TSUNAGI_INTERNODE; the ranks check the name)\n  \
           --node-map SPEC       node map for the ranks (sets TSUNAGI_NODE_MAP)\n  \
           --sites FILE          run over the sites FILE lists (one line of mpirun options per\n  \
                                 site), joined by an IMPI server this mpirun starts\n  \
           --client K --server HOST:PORT\n  \
                                 run as client K of a multi-site job through that IMPI server\n  \
                                 (LAM's `-client K HOST:PORT` is accepted too)\n  \
           --vendor V            start the ranks with vendor MPI V's launcher (mpich:\n  \
                                 mpiexec.hydra; openmpi: mpirun.openmpi; or a path to the\n  \
                                 vendor's libmpi, launcher from TSUNAGI_VENDOR_LAUNCHER) and\n  \
                                 move messages over V (TSUNAGI_VENDOR)\n  \
           --version             print the version and exit\n  \
           -h, --help            print this help and exit\n\
         \n\
         Options stop at the first argument that is not an option (or after `--`).\n\
         The exit status is 0 only if every rank exits 0; a rank that fails, is killed or\n\
         calls MPI_Abort ends the whole job.\n"
    )
}

/// `HOST:PORT` with a numeric port.
fn is_host_port(s: &str) -> bool {
    matches!(s.rsplit_once(':'), Some((h, p)) if !h.is_empty() && p.parse::<u16>().is_ok())
}

/// Parse `args` (without `argv[0]`). `getenv` looks up mpirun's own environment for `-x VAR`.
/// The error is one line for the user, without the program-name prefix.
pub fn parse(
    args: &[OsString],
    getenv: impl Fn(&OsStr) -> Option<OsString>,
) -> Result<Action, String> {
    let mut np: Option<u32> = None;
    let mut env = Vec::new();
    let mut host = None;
    let mut hostfile = None;
    let mut map_by = crate::hosts::MapBy::Slot;
    let mut oversubscribe = false;
    let mut launch_agent = None;
    let mut launch_addr = None;
    let mut impi_client: Option<String> = None;
    let mut impi_server: Option<String> = None;
    let mut sites = None;
    let mut vendor = None;
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
            "--oversubscribe" | "-oversubscribe" => oversubscribe = true,
            "--host" | "-host" | "-H" | "--hosts" | "-hosts" => host = Some(value("a host list")?),
            "--hostfile" | "-hostfile" | "--machinefile" | "-machinefile" | "-f" => {
                hostfile = Some(OsString::from(value("a file name")?))
            }
            "--map-by" | "-map-by" => {
                let v = value("slot or node")?;
                map_by = match v.as_str() {
                    "slot" | "core" => crate::hosts::MapBy::Slot,
                    "node" => crate::hosts::MapBy::Node,
                    _ => {
                        return Err(format!(
                            "--map-by: unknown policy {v:?} (expected slot or node)"
                        ))
                    }
                };
            }
            "--launch-agent" | "-launch-agent" | "--launcher-exec" => {
                let v = value("a command")?;
                if v.split_whitespace().next().is_none() {
                    return Err("--launch-agent: empty command".to_string());
                }
                launch_agent = Some(v);
            }
            "--launch-addr" => launch_addr = Some(value("an IP address")?),
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
            "--vendor" | "-vendor" => {
                let v = value("mpich, openmpi or a library path")?;
                if v != "mpich" && v != "openmpi" && !v.contains('/') {
                    return Err(format!(
                        "--vendor: unknown vendor {v:?} (expected mpich, openmpi or a path to the vendor's libmpi)"
                    ));
                }
                vendor = Some(v);
            }
            "--internode" => {
                let v = value("a transport name")?;
                env.push(("TSUNAGI_INTERNODE".into(), v.into()));
            }
            "--node-map" => {
                let v = value("a node map")?;
                env.push(("TSUNAGI_NODE_MAP".into(), v.into()));
            }
            "--client" | "-client" => {
                let k = value("a client number")?;
                if k.parse::<u32>().is_err() {
                    return Err(format!("{name}: {k:?} is not a client number"));
                }
                impi_client = Some(k);
                // LAM's spelling: `-client K HOST:PORT`.
                if let Some(next) = args.get(i + 1).and_then(|a| a.to_str()) {
                    if impi_server.is_none() && is_host_port(next) {
                        impi_server = Some(next.to_string());
                        i += 1;
                    }
                }
            }
            "--sites" => sites = Some(value("a sites file")?.into()),
            "--server" | "-server" => {
                let v = value("the IMPI server's HOST:PORT")?;
                if !is_host_port(&v) {
                    return Err(format!("{name}: expected HOST:PORT, got {v:?}"));
                }
                impi_server = Some(v);
            }
            _ => return Err(format!("unknown option {s:?}")),
        }
        i += 1;
    }
    let Some(program) = args.get(i).cloned() else {
        return Err("no program given".to_string());
    };
    if host.is_some() && hostfile.is_some() {
        return Err("--host and --hostfile cannot be combined".to_string());
    }
    match (impi_client, impi_server) {
        (Some(k), Some(server)) => {
            env.push(("TSUNAGI_IMPI_CLIENT".into(), k.into()));
            env.push(("TSUNAGI_IMPI_SERVER".into(), server.into()));
        }
        (None, None) => {}
        (Some(_), None) => {
            return Err("--client needs --server HOST:PORT (the IMPI server)".to_string())
        }
        (None, Some(_)) => {
            return Err("--server needs --client K (this site's client number)".to_string())
        }
    }
    Ok(Action::Run(Box::new(Options {
        np: np.unwrap_or(1),
        np_given: np.is_some(),
        program,
        args: args[i + 1..].to_vec(),
        env,
        host,
        hostfile,
        map_by,
        oversubscribe,
        launch_agent,
        launch_addr,
        sites,
        vendor,
    })))
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
            Ok(Action::Run(o)) => *o,
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
    fn vendor_option() {
        assert_eq!(
            run(&["--vendor", "mpich", "-n", "2", "prog"])
                .vendor
                .as_deref(),
            Some("mpich")
        );
        assert_eq!(
            run(&["--vendor=openmpi", "prog"]).vendor.as_deref(),
            Some("openmpi")
        );
        assert_eq!(
            run(&["--vendor", "/opt/x/libmpi.so", "prog"])
                .vendor
                .as_deref(),
            Some("/opt/x/libmpi.so")
        );
        assert_eq!(run(&["prog"]).vendor, None);
        assert!(p(&["--vendor", "intel", "prog"])
            .unwrap_err()
            .contains("intel"));
        assert!(p(&["--vendor"]).is_err());
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
            "--internode",
            "pm",
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
                ("TSUNAGI_INTERNODE".into(), "pm".into()),
                ("TSUNAGI_NODE_MAP".into(), "0,0,1,1".into()),
            ]
        );
        assert!(p(&["--progress", "busy", "prog"]).is_err());
        assert!(p(&["--env", "=x", "prog"]).is_err());
    }

    #[test]
    fn host_options() {
        let o = run(&[
            "--host",
            "a:2,b:2",
            "--map-by",
            "node",
            "--oversubscribe",
            "--launch-agent",
            "ip netns exec {host}",
            "--launch-addr",
            "10.0.0.1",
            "prog",
        ]);
        assert_eq!(o.host.as_deref(), Some("a:2,b:2"));
        assert_eq!(o.map_by, crate::hosts::MapBy::Node);
        assert!(o.oversubscribe && !o.np_given);
        assert_eq!(o.launch_agent.as_deref(), Some("ip netns exec {host}"));
        assert_eq!(o.launch_addr.as_deref(), Some("10.0.0.1"));
        assert_eq!(run(&["--hostfile", "f", "prog"]).hostfile, Some("f".into()));
        assert!(p(&["--map-by", "socket", "prog"]).is_err());
        assert!(p(&["--host", "a", "--hostfile", "f", "prog"]).is_err());
        assert!(p(&["--launch-agent", " ", "prog"]).is_err());
    }

    #[test]
    fn help_version_and_errors() {
        assert_eq!(p(&["--version"]), Ok(Action::Version));
        assert_eq!(p(&["-h"]), Ok(Action::Help));
        assert_eq!(p(&["-n", "2", "--help", "prog"]), Ok(Action::Help));
        assert!(p(&[]).unwrap_err().contains("no program"));
        assert!(p(&["--bogus", "prog"]).unwrap_err().contains("--bogus"));
    }

    #[test]
    fn impi_client_options() {
        let want = vec![
            ("TSUNAGI_IMPI_CLIENT".to_string(), "1".to_string()),
            ("TSUNAGI_IMPI_SERVER".to_string(), "h:5000".to_string()),
        ];
        let o = run(&["--client", "1", "--server", "h:5000", "-n", "2", "prog"]);
        assert_eq!(env(&o), want);
        // LAM's spelling.
        let o = run(&["-client", "1", "h:5000", "-n", "2", "prog"]);
        assert_eq!(env(&o), want);
        assert_eq!(o.program, "prog");
        assert!(p(&["--client", "1", "prog"])
            .unwrap_err()
            .contains("--server"));
        assert!(p(&["--server", "h:5000", "prog"])
            .unwrap_err()
            .contains("--client"));
        assert!(p(&["--server", "h", "--client", "0", "prog"]).is_err());
        assert!(p(&["--client", "x", "--server", "h:1", "prog"]).is_err());
    }
}
