//! `mpirun --sites FILE prog`: one command for a job over several sites joined by IMPI.
//!
//! The sites file has one site per line, written as the mpirun options of that site
//! (`-n 2 --host a:2 --launch-agent "ip netns exec {host}"`, `-n 4 --vendor mpich`, ...);
//! `#` starts a comment; an optional line `server ADDRESS` gives the address at which the
//! sites reach the IMPI server (default 127.0.0.1). mpirun starts `tsunagi-impi-server`
//! (from its own directory, else PATH) for as many clients as there are sites, then one
//! mpirun per site with `--client K --server ADDRESS:PORT`, the command line's `--env`/`-x`
//! settings and the program. The job's exit status is the first failing site's (0 when all
//! succeed); when one site fails the others are stopped (SIGTERM, then SIGKILL after 3 s),
//! and so is the server.

use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A parsed sites file.
#[derive(Debug, PartialEq, Eq)]
pub struct SitesFile {
    /// Where the sites reach the server.
    pub server_addr: String,
    /// Each site's mpirun options.
    pub sites: Vec<Vec<String>>,
}

/// Split a line into words: whitespace separates, `"..."` and `'...'` quote, `\` escapes
/// the next character outside single quotes.
pub fn split_words(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('\''), c) => cur.push(c),
            (_, '\\') => {
                let n = chars.next().ok_or("a line ends in a backslash")?;
                cur.push(n);
                in_word = true;
            }
            (Some(_), c) => cur.push(c),
            (None, '"') | (None, '\'') => {
                quote = Some(c);
                in_word = true;
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            (None, c) => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if quote.is_some() {
        return Err("unterminated quote".into());
    }
    if in_word {
        words.push(cur);
    }
    Ok(words)
}

/// Parse a sites file's text (`shown` names it in errors).
pub fn parse_sites(text: &str, shown: &str) -> Result<SitesFile, String> {
    let mut server_addr = "127.0.0.1".to_string();
    let mut sites = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let words = split_words(line).map_err(|e| format!("{shown}:{}: {e}", i + 1))?;
        if words[0] == "server" {
            if words.len() != 2 {
                return Err(format!("{shown}:{}: expected `server ADDRESS`", i + 1));
            }
            server_addr = words[1].clone();
            continue;
        }
        for w in &words {
            if matches!(w.as_str(), "--client" | "-client" | "--server" | "--sites") {
                return Err(format!(
                    "{shown}:{}: {w} is set by mpirun --sites, not in the sites file",
                    i + 1
                ));
            }
        }
        sites.push(words);
    }
    if sites.is_empty() {
        return Err(format!("{shown}: no sites"));
    }
    Ok(SitesFile { server_addr, sites })
}

fn sibling(name: &str) -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join(name)))
        .filter(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from(name))
}

fn stop(children: &mut [(String, Child)], deadline: Duration) {
    for (_, c) in children.iter_mut() {
        if c.try_wait().ok().flatten().is_none() {
            // SAFETY: signals our own child, which is not reaped yet (try_wait just saw it
            // running), so its pid cannot have been reused.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        }
    }
    let until = Instant::now() + deadline;
    while Instant::now() < until
        && children
            .iter_mut()
            .any(|(_, c)| c.try_wait().ok().flatten().is_none())
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    for (_, c) in children.iter_mut() {
        if c.try_wait().ok().flatten().is_none() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Run the grid job. Returns mpirun's exit status, or an error line (bad input).
pub fn run(
    prog: &str,
    sites_path: &Path,
    env: &[(OsString, OsString)],
    program: &OsString,
    args: &[OsString],
) -> Result<i32, String> {
    let shown = sites_path.display().to_string();
    let text = std::fs::read_to_string(sites_path)
        .map_err(|e| format!("cannot read sites file {shown}: {e}"))?;
    let file = parse_sites(&text, &shown)?;
    let n = file.sites.len();

    let server_bin = sibling("tsunagi-impi-server");
    let mut server = Command::new(&server_bin)
        .args(["-server", &n.to_string(), "-port", "0"])
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", server_bin.display()))?;
    let mut first = String::new();
    let stdout = server.stdout.take().expect("piped");
    let mut reader = BufReader::new(stdout);
    if reader.read_line(&mut first).is_err() || first.trim().is_empty() {
        let _ = server.kill();
        let _ = server.wait();
        return Ok(1);
    }
    // Keep draining the server's stdout so that it never blocks on a full pipe.
    std::thread::spawn(move || {
        let mut sink = String::new();
        while reader.read_line(&mut sink).is_ok_and(|n| n > 0) {
            sink.clear();
        }
    });
    let port = first
        .trim()
        .rsplit_once(':')
        .map(|(_, p)| p.to_string())
        .unwrap_or_default();
    let server_at = format!("{}:{port}", file.server_addr);

    let me = sibling("mpirun");
    let mut children: Vec<(String, Child)> = Vec::new();
    for (k, site) in file.sites.iter().enumerate() {
        let mut c = Command::new(&me);
        c.args(site);
        // Every site started here is Tsunagi: the latency-aware collectives may run
        // (collectives/src/wan.rs; before the user's --env so that it can override).
        c.arg("--env").arg("TSUNAGI_IMPI_PEERS=tsunagi");
        for (var, val) in env {
            let mut kv = var.clone();
            kv.push("=");
            kv.push(val);
            c.arg("--env").arg(kv);
        }
        c.args(["--client", &k.to_string(), "--server", &server_at, "--"]);
        c.arg(program).args(args);
        match c.spawn() {
            Ok(child) => children.push((format!("site {k}"), child)),
            Err(e) => {
                stop(&mut children, Duration::from_secs(3));
                let _ = server.kill();
                let _ = server.wait();
                return Err(format!("cannot start the mpirun of site {k}: {e}"));
            }
        }
    }

    // Wait: the first site that fails ends the job.
    let mut status = 0;
    let mut running = n;
    while running > 0 {
        running = 0;
        let mut failed = None;
        for (name, c) in children.iter_mut() {
            match c.try_wait() {
                Ok(Some(st)) => {
                    if !st.success() && failed.is_none() && status == 0 {
                        failed = Some((name.clone(), st.code().unwrap_or(1)));
                    }
                }
                Ok(None) => running += 1,
                Err(_) => {}
            }
        }
        if let Some((name, code)) = failed {
            status = code.max(1);
            eprintln!("{prog}: {name} failed (exit status {code}); stopping the other sites");
            stop(&mut children, Duration::from_secs(3));
            break;
        }
        if running > 0 {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    // The server exits by itself once every client sent FINI; after a failure it may wait
    // for clients that are gone.
    let until = Instant::now() + Duration::from_secs(if status == 0 { 5 } else { 0 });
    loop {
        match server.try_wait() {
            Ok(Some(st)) => {
                if status == 0 && !st.success() {
                    eprintln!("{prog}: the IMPI server failed ({st})");
                    status = 1;
                }
                break;
            }
            _ if Instant::now() >= until => {
                let _ = server.kill();
                let _ = server.wait();
                break;
            }
            _ => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_and_quotes() {
        assert_eq!(
            split_words(r#"-n 2 --launch-agent "ip netns exec {host}" 'a b' c\ d"#).unwrap(),
            vec![
                "-n",
                "2",
                "--launch-agent",
                "ip netns exec {host}",
                "a b",
                "c d"
            ]
        );
        assert!(split_words("\"open").is_err());
        assert_eq!(split_words("  ").unwrap(), Vec::<String>::new());
    }

    #[test]
    fn sites_files() {
        let f = parse_sites(
            "# two sites\nserver 10.0.0.1\n-n 2 --host a:2\n\n-n 1   # the other\n",
            "f",
        )
        .unwrap();
        assert_eq!(f.server_addr, "10.0.0.1");
        assert_eq!(
            f.sites,
            vec![vec!["-n", "2", "--host", "a:2"], vec!["-n", "1"]]
        );
        assert!(parse_sites("# nothing\n", "f")
            .unwrap_err()
            .contains("no sites"));
        assert!(parse_sites("server\n-n 1\n", "f").is_err());
        assert!(parse_sites("-n 1 --client 0\n", "f")
            .unwrap_err()
            .contains("--client"));
    }
}
