//! The PMI-1 client: how an MPI process learns its rank, its job's size and its peers'
//! business cards from whatever started it.
//!
//! Three ways in (see `reference/pmi.md`):
//! - `PMI_FD`: an already connected socket, with `PMI_RANK`/`PMI_SIZE` (Hydra, our mpirun,
//!   and Slurm's `srun --mpi=pmi2`, whose plugin answers PMI-1 requests too and publishes
//!   `PMI_process_mapping` in the key-value space; it reads each request with one 1024-byte
//!   read, so [`PmiClient::put_long`] keeps its lines within [`wire::MAX_REQUEST_LINE`]);
//! - `PMI_PORT=host:port`: connect, `cmd=initack`, and the server tells us size and rank;
//! - neither: a singleton ([`PmiClient::from_env`] returns `None`; the caller runs as size 1).
//!
//! The wire format lives in [`wire`], a sans-IO codec (bytes in, commands out and back) shared
//! with the launcher's PMI server, so both ends parse and format lines the same way and the
//! codec is testable without sockets. [`PmiClient`] is the thin blocking driver around it:
//! PMI traffic happens only at start-up, barriers and shutdown, so blocking reads are fine.

use std::fs::File;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{ErrorClass, MpiError, MpiResult};

/// The PMI-1 line codec: one command a line, `cmd=<name>` first, then space-separated
/// `key=value` tokens.
///
/// Escaping follows MPICH 4's parser: in a value a backslash escapes the next character, so
/// `\ ` is a space inside a value and `\\` a backslash. Values we format are escaped the same
/// way; values without spaces or backslashes (everything Hydra and our own cards use) pass
/// unchanged, which keeps us byte-compatible with older parsers that do not unescape.
pub mod wire {
    use std::fmt;

    /// Longest line either side accepts (a guard against a peer that never sends `\n`).
    /// Hydra's own limit is far lower; values are at most a few KiB in practice.
    pub const MAX_LINE: usize = 64 * 1024;

    /// Longest request line, `\n` included, that a client may send to any PMI-1 server.
    /// MPICH's simple PMI client never writes more (`PMIU_MAXLINE`), and Slurm's pmi2 plugin
    /// (`srun --mpi=pmi2`) reads each PMI-1 request with a single 1024-byte `read`: the rest
    /// of a longer line is taken for the next request and the job breaks. Hydra and our own
    /// mpirun accept longer lines, but values we split ourselves stay within this.
    pub const MAX_REQUEST_LINE: usize = 1024;

    /// Bytes `value` takes on the wire once escaped by [`format()`].
    pub fn escaped_len(value: &str) -> usize {
        value
            .chars()
            .map(|c| match c {
                ' ' | '\\' | '\n' | '\r' => 2,
                _ => c.len_utf8(),
            })
            .sum()
    }

    /// A malformed line or stream.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct WireError(pub String);

    impl fmt::Display for WireError {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "malformed PMI message: {}", self.0)
        }
    }

    impl std::error::Error for WireError {}

    /// One parsed PMI-1 command: its name (the value of the leading `cmd=`) and the other
    /// tokens in order. A bare token without `=` has an empty value.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct Command {
        pub cmd: String,
        pub args: Vec<(String, String)>,
    }

    impl Command {
        /// A command with no arguments yet.
        pub fn new(cmd: impl Into<String>) -> Command {
            Command {
                cmd: cmd.into(),
                args: Vec::new(),
            }
        }

        /// Builder: append `key=value`.
        pub fn arg(mut self, key: impl Into<String>, value: impl ToString) -> Command {
            self.args.push((key.into(), value.to_string()));
            self
        }

        /// The value of the first `key`, if present.
        pub fn get(&self, key: &str) -> Option<&str> {
            self.args
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        }

        /// The value of `key` as an integer, if present and numeric.
        pub fn get_int(&self, key: &str) -> Option<i64> {
            self.get(key)?.trim().parse().ok()
        }

        /// The line for this command, `\n` included.
        pub fn to_line(&self) -> String {
            let args: Vec<(&str, &str)> = self
                .args
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            format(&self.cmd, &args)
        }
    }

    /// Format one line: `cmd=<cmd> k1=v1 k2=v2\n`. Spaces and backslashes in values are
    /// backslash-escaped. A newline cannot be represented on this wire at all, so one in a
    /// value becomes a space (callers that care, like `put`, reject such values first).
    pub fn format(cmd: &str, args: &[(&str, &str)]) -> String {
        let mut s = String::with_capacity(
            16 + args
                .iter()
                .map(|(k, v)| k.len() + v.len() + 2)
                .sum::<usize>(),
        );
        s.push_str("cmd=");
        s.push_str(cmd);
        for (k, v) in args {
            s.push(' ');
            s.push_str(k);
            s.push('=');
            for c in v.chars() {
                match c {
                    ' ' | '\\' => {
                        s.push('\\');
                        s.push(c);
                    }
                    '\n' | '\r' => s.push_str("\\ "),
                    _ => s.push(c),
                }
            }
        }
        s.push('\n');
        s
    }

    /// The lines (without newlines) of a PMI-1 spawn request as MPICH's simple PMI writes
    /// it: one `mcmd=spawn` ... `endcmd` block per application, values raw to the end of
    /// their line (`argN` from 1, preput and info pairs from 0). Values must not hold
    /// newlines.
    pub fn spawn_lines(
        apps: &[tsunagi_p2p::boot::SpawnApp],
        preput: &[(String, String)],
    ) -> Vec<String> {
        let mut out = Vec::new();
        for (i, a) in apps.iter().enumerate() {
            out.push("mcmd=spawn".to_string());
            out.push(format!("nprocs={}", a.procs));
            out.push(format!("execname={}", a.command));
            out.push(format!("totspawns={}", apps.len()));
            out.push(format!("spawnssofar={}", i + 1));
            for (j, arg) in a.args.iter().enumerate() {
                out.push(format!("arg{}={arg}", j + 1));
            }
            out.push(format!("argcnt={}", a.args.len()));
            out.push(format!("preput_num={}", preput.len()));
            for (j, (k, v)) in preput.iter().enumerate() {
                out.push(format!("preput_key_{j}={k}"));
                out.push(format!("preput_val_{j}={v}"));
            }
            out.push(format!("info_num={}", a.info.len()));
            for (j, (k, v)) in a.info.iter().enumerate() {
                out.push(format!("info_key_{j}={k}"));
                out.push(format!("info_val_{j}={v}"));
            }
            out.push("endcmd".to_string());
        }
        out
    }

    /// Parse one line (with or without its trailing `\n`).
    pub fn parse(line: &str) -> Result<Command, WireError> {
        let line = line.trim_end_matches(['\n', '\r']);
        let mut tokens = tokenize(line).into_iter();
        let first = tokens
            .next()
            .ok_or_else(|| WireError("empty line".to_string()))?;
        let cmd = match first {
            (k, Some(v)) if k == "cmd" => v,
            (k, _) if k == "mcmd" => {
                return Err(WireError(
                    "multi-line commands (mcmd=, spawn) are not supported".to_string(),
                ))
            }
            _ => {
                return Err(WireError(format!(
                    "line does not start with cmd=: {line:?}"
                )))
            }
        };
        if cmd.is_empty() {
            return Err(WireError("empty command name".to_string()));
        }
        // A command name is a word: one with escaped spaces or other bytes would be echoed
        // into replies (`cmd=<name>_result`) and change their meaning (found by fuzzing).
        if !cmd
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err(WireError(format!(
                "malformed command name {:?}",
                cmd.chars().take(40).collect::<String>()
            )));
        }
        let args = tokens.map(|(k, v)| (k, v.unwrap_or_default())).collect();
        Ok(Command { cmd, args })
    }

    /// Split on unescaped spaces; split each token at its first `=`; unescape values.
    fn tokenize(line: &str) -> Vec<(String, Option<String>)> {
        let mut out = Vec::new();
        let mut chars = line.chars().peekable();
        loop {
            while chars.peek() == Some(&' ') {
                chars.next();
            }
            if chars.peek().is_none() {
                break;
            }
            let mut key = String::new();
            let mut value = None;
            while let Some(&c) = chars.peek() {
                if c == ' ' {
                    break;
                }
                chars.next();
                if c == '=' {
                    let mut v = String::new();
                    while let Some(&c) = chars.peek() {
                        if c == ' ' {
                            break;
                        }
                        chars.next();
                        if c == '\\' {
                            match chars.next() {
                                Some(e) => v.push(e),
                                None => v.push('\\'),
                            }
                        } else {
                            v.push(c);
                        }
                    }
                    value = Some(v);
                    break;
                }
                key.push(c);
            }
            out.push((key, value));
        }
        out
    }

    /// Reassembles lines from a byte stream (sans-IO framing): feed it what `read` returned,
    /// then take complete lines out.
    #[derive(Debug, Default)]
    pub struct LineBuffer {
        buf: Vec<u8>,
    }

    impl LineBuffer {
        pub fn new() -> LineBuffer {
            LineBuffer::default()
        }

        /// Append bytes read from the peer.
        pub fn push(&mut self, bytes: &[u8]) {
            self.buf.extend_from_slice(bytes);
        }

        /// The next complete line without its `\n`, `Ok(None)` if none is complete yet, or an
        /// error if the peer sent more than [`MAX_LINE`] bytes without a newline or a line
        /// that is not UTF-8.
        pub fn next_line(&mut self) -> Result<Option<String>, WireError> {
            match self.buf.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    let rest = self.buf.split_off(i + 1);
                    let mut line = std::mem::replace(&mut self.buf, rest);
                    line.pop();
                    String::from_utf8(line)
                        .map(Some)
                        .map_err(|_| WireError("line is not UTF-8".to_string()))
                }
                None if self.buf.len() > MAX_LINE => {
                    Err(WireError(format!("no newline within {MAX_LINE} bytes")))
                }
                None => Ok(None),
            }
        }

        /// Bytes held that do not yet form a complete line.
        pub fn pending(&self) -> usize {
            self.buf.len()
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn command_names_are_words() {
            assert!(parse("cmd=ge\\ b msg=x").is_err());
            assert!(parse("cmd=a=b").is_err());
            assert!(parse("cmd=get_result rc=0").is_ok());
            assert!(parse("cmd=spawn-x").is_ok());
        }

        #[test]
        fn parses_simple_lines() {
            let c = parse("cmd=put kvsname=kvs_1 key=card-0 value=abc\n").unwrap();
            assert_eq!(c.cmd, "put");
            assert_eq!(c.get("kvsname"), Some("kvs_1"));
            assert_eq!(c.get("key"), Some("card-0"));
            assert_eq!(c.get("value"), Some("abc"));
            assert_eq!(c.get("missing"), None);
            let c = parse("cmd=barrier_out").unwrap();
            assert_eq!(c.cmd, "barrier_out");
            assert!(c.args.is_empty());
        }

        #[test]
        fn values_keep_equals_signs_and_parse_ints() {
            let c = parse("cmd=get_result rc=-1 msg=key_x_not_found value=a=b=c").unwrap();
            assert_eq!(c.get_int("rc"), Some(-1));
            assert_eq!(c.get("value"), Some("a=b=c"));
            let c = parse("cmd=get_result rc=0 value=(vector,(0,1,3))").unwrap();
            assert_eq!(c.get("value"), Some("(vector,(0,1,3))"));
        }

        #[test]
        fn tolerates_extra_spaces_cr_and_bare_tokens() {
            let c = parse("cmd=abort   exitcode=3  flag\r\n").unwrap();
            assert_eq!(c.cmd, "abort");
            assert_eq!(c.get_int("exitcode"), Some(3));
            assert_eq!(c.get("flag"), Some(""));
        }

        #[test]
        fn rejects_bad_lines() {
            assert!(parse("").is_err());
            assert!(parse("   ").is_err());
            assert!(parse("put key=a").is_err());
            assert!(parse("key=a cmd=put").is_err());
            assert!(parse("cmd= a=b").is_err());
            assert!(parse("mcmd=spawn").is_err());
        }

        #[test]
        fn format_round_trips_with_escapes() {
            let line = format("abort", &[("exitcode", "5"), ("message", "oh no \\ bad")]);
            assert_eq!(line, "cmd=abort exitcode=5 message=oh\\ no\\ \\\\\\ bad\n");
            let c = parse(&line).unwrap();
            assert_eq!(c.get("message"), Some("oh no \\ bad"));
            // Plain values are unchanged on the wire.
            assert_eq!(
                format("put", &[("key", "k"), ("value", "v=1,2")]),
                "cmd=put key=k value=v=1,2\n"
            );
            // Newlines cannot travel; they become spaces.
            let c = parse(&format("abort", &[("message", "a\nb")])).unwrap();
            assert_eq!(c.get("message"), Some("a b"));
            // escaped_len is what format writes for a value.
            for v in ["", "plain", "oh no \\ bad", "a\nb\r", "é x"] {
                assert_eq!(
                    format("c", &[("k", v)]).len(),
                    "cmd=c k=\n".len() + escaped_len(v),
                    "{v:?}"
                );
            }
        }

        #[test]
        fn command_builder_matches_format() {
            let c = Command::new("maxes")
                .arg("kvsname_max", 256)
                .arg("keylen_max", 64)
                .arg("vallen_max", 1024);
            assert_eq!(
                c.to_line(),
                "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n"
            );
            assert_eq!(parse(&c.to_line()).unwrap(), c);
        }

        #[test]
        fn line_buffer_reassembles_split_and_joined_lines() {
            let mut b = LineBuffer::new();
            b.push(b"cmd=in");
            assert_eq!(b.next_line().unwrap(), None);
            b.push(b"it pmi_version=1\ncmd=get_maxes\ncmd=ba");
            assert_eq!(
                b.next_line().unwrap().as_deref(),
                Some("cmd=init pmi_version=1")
            );
            assert_eq!(b.next_line().unwrap().as_deref(), Some("cmd=get_maxes"));
            assert_eq!(b.next_line().unwrap(), None);
            assert_eq!(b.pending(), 6);
            b.push(b"rrier_in\n");
            assert_eq!(b.next_line().unwrap().as_deref(), Some("cmd=barrier_in"));
        }

        #[test]
        fn line_buffer_rejects_overlong_and_non_utf8() {
            let mut b = LineBuffer::new();
            b.push(&vec![b'a'; MAX_LINE + 1]);
            assert!(b.next_line().is_err());
            let mut b = LineBuffer::new();
            b.push(b"cmd=\xff\n");
            assert!(b.next_line().is_err());
        }
    }
}

/// Parse `PMI_process_mapping`, `(vector,(first_node,node_count,ranks_per_node),...)`, into
/// the node id of each of `size` ranks.
///
/// Blocks are laid out in order: each gives `ranks_per_node` consecutive ranks to each of
/// `node_count` nodes starting at `first_node`. If the blocks describe fewer than `size` ranks
/// the pattern repeats (MPICH reads it the same way, so `(vector,(0,2,1))` is a cyclic
/// placement over 2 nodes). Returns `None` for anything unparsable or describing no ranks,
/// so a caller can fall back to exchanging host ids.
pub fn parse_process_mapping(mapping: &str, size: usize) -> Option<Vec<u32>> {
    let s: String = mapping.chars().filter(|c| !c.is_whitespace()).collect();
    let inner = s.strip_prefix("(vector,")?.strip_suffix(')')?;
    let mut blocks = Vec::new();
    let mut rest = inner;
    while !rest.is_empty() {
        let body_end = rest.find(')')?;
        let body = rest.strip_prefix('(')?.get(..body_end - 1)?;
        let nums: Vec<u32> = body
            .split(',')
            .map(|n| n.parse().ok())
            .collect::<Option<_>>()?;
        let [first, count, per] = nums[..] else {
            return None;
        };
        blocks.push((first, count, per));
        rest = &rest[body_end + 1..];
        rest = rest.strip_prefix(',').unwrap_or(rest);
        if rest.starts_with(',') {
            return None;
        }
    }
    let per_pass: u64 = blocks
        .iter()
        .map(|&(_, c, p)| u64::from(c) * u64::from(p))
        .sum();
    if per_pass == 0 {
        return None;
    }
    let mut nodes = Vec::with_capacity(size);
    'fill: while nodes.len() < size {
        for &(first, count, per) in &blocks {
            for n in 0..count {
                for _ in 0..per {
                    if nodes.len() == size {
                        break 'fill;
                    }
                    nodes.push(first.checked_add(n)?);
                }
            }
        }
    }
    Some(nodes)
}

/// Bytes of a `put` line of [`PmiClient::put_long`] other than the escaped value: the
/// command, the kvsname, the part's key (`<key>-<i>`, `i` of up to 20 digits) and `\n`.
fn put_line_overhead(kvsname: &str, key: &str) -> usize {
    "cmd=put kvsname= key=- value=\n".len()
        + wire::escaped_len(kvsname)
        + wire::escaped_len(key)
        + 20
}

/// Split `value` on character boundaries into parts of at most `max_raw` bytes that take
/// at most `max_wire` bytes once escaped. `None` if a part could not hold even one
/// character (an empty value has no parts).
fn split_for_put(value: &str, max_raw: usize, max_wire: usize) -> Option<Vec<&str>> {
    let mut parts = Vec::new();
    let (mut start, mut raw, mut wire_len) = (0, 0, 0);
    for (i, c) in value.char_indices() {
        let w = wire::escaped_len(c.encode_utf8(&mut [0; 4]));
        if raw + c.len_utf8() > max_raw || wire_len + w > max_wire {
            if raw == 0 {
                return None;
            }
            parts.push(&value[start..i]);
            (start, raw, wire_len) = (i, 0, 0);
            if c.len_utf8() > max_raw || w > max_wire {
                return None;
            }
        }
        raw += c.len_utf8();
        wire_len += w;
    }
    if raw > 0 {
        parts.push(&value[start..]);
    }
    Some(parts)
}

/// The server's limits from `cmd=maxes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Maxes {
    pub kvsname_max: usize,
    pub keylen_max: usize,
    pub vallen_max: usize,
}

/// Set once a `PmiClient` owns `PMI_FD`, so a second `from_env` cannot take (and later close)
/// the same descriptor twice.
static FD_TAKEN: AtomicBool = AtomicBool::new(false);

/// A connection to the process manager (Hydra, Slurm's PMI-1, or our mpirun).
#[derive(Debug)]
pub struct PmiClient {
    conn: File,
    lines: wire::LineBuffer,
    rank: u32,
    size: u32,
    appnum: i32,
    debug: bool,
    kvsname: String,
    maxes: Maxes,
    finalized: bool,
}

fn pmi_err(msg: impl Into<String>) -> MpiError {
    MpiError::new(ErrorClass::Other, msg)
}

fn env_u32(name: &str) -> MpiResult<Option<u32>> {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| pmi_err(format!("PMI: {name}={v:?} is not a non-negative integer"))),
        Err(_) => Ok(None),
    }
}

impl PmiClient {
    /// Connect to the process manager named by the environment and run the PMI-1 handshake
    /// (`init`, `get_maxes`, `get_my_kvsname`, `get_appnum`).
    ///
    /// `Ok(None)` when neither `PMI_FD` nor `PMI_PORT` is set: the process was started without
    /// a launcher and should run as a singleton.
    pub fn from_env() -> MpiResult<Option<PmiClient>> {
        if let Ok(fd_str) = std::env::var("PMI_FD") {
            let fd: RawFd = fd_str
                .trim()
                .parse()
                .ok()
                .filter(|&fd: &RawFd| fd >= 0)
                .ok_or_else(|| pmi_err(format!("PMI: PMI_FD={fd_str:?} is not a descriptor")))?;
            let rank = env_u32("PMI_RANK")?
                .ok_or_else(|| pmi_err("PMI: PMI_FD is set but PMI_RANK is not"))?;
            let size = env_u32("PMI_SIZE")?
                .ok_or_else(|| pmi_err("PMI: PMI_FD is set but PMI_SIZE is not"))?;
            // SAFETY: fcntl(F_GETFD) only inspects the descriptor table; it tells us whether
            // `fd` is open before we claim it.
            if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
                return Err(pmi_err(format!(
                    "PMI: PMI_FD={fd} is not an open descriptor"
                )));
            }
            if FD_TAKEN.swap(true, Ordering::SeqCst) {
                return Err(pmi_err("PMI: PMI_FD is already owned by another PmiClient"));
            }
            // SAFETY: the launcher handed this open descriptor to us for our exclusive use,
            // and FD_TAKEN guarantees no other PmiClient in this process owns it.
            let owned = unsafe { OwnedFd::from_raw_fd(fd) };
            // SAFETY: plain fcntl on a descriptor we now own. Close-on-exec so programs
            // this rank starts do not inherit (and keep open) the launcher's socket.
            unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
            let mut c = PmiClient::from_fd(owned, rank, size);
            c.debug = env_u32("PMI_DEBUG")?.unwrap_or(0) != 0;
            c.handshake()?;
            return Ok(Some(c));
        }
        if let Ok(port) = std::env::var("PMI_PORT") {
            let id = std::env::var("PMI_ID")
                .or_else(|_| std::env::var("PMI_RANK"))
                .unwrap_or_else(|_| "0".to_string());
            return PmiClient::connect_port(port.trim(), id.trim()).map(Some);
        }
        Ok(None)
    }

    /// The `PMI_PORT` way in: connect to `port` (`host:port`), introduce ourselves as `id`
    /// with `cmd=initack`, learn size, rank and debug from the server's `cmd=set` lines, then
    /// run the usual handshake.
    fn connect_port(port: &str, id: &str) -> MpiResult<PmiClient> {
        let stream = TcpStream::connect(port)
            .map_err(|e| pmi_err(format!("PMI: cannot connect to PMI_PORT={port}: {e}")))?;
        // Rust opens sockets close-on-exec already; no Nagle delay because every PMI
        // exchange is a small request waiting for its reply.
        let _ = stream.set_nodelay(true);
        let mut c = PmiClient::from_fd(OwnedFd::from(stream), 0, 1);
        c.send(&wire::format("initack", &[("pmiid", id)]))?;
        c.expect("initack")?;
        // Hydra sends `set size=`, `set rank=`, `set debug=` in that order; accept any.
        let (mut size, mut rank, mut debug) = (None, None, None);
        while size.is_none() || rank.is_none() || debug.is_none() {
            let m = c.expect("set")?;
            size = size.or(m.get_int("size"));
            rank = rank.or(m.get_int("rank"));
            debug = debug.or(m.get_int("debug"));
        }
        let bad = |what: &str| pmi_err(format!("PMI: bad {what} from the server"));
        c.size = size
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(|| bad("size"))?;
        c.rank = rank
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(|| bad("rank"))?;
        c.debug = debug.unwrap_or(0) != 0;
        c.handshake()?;
        Ok(c)
    }

    /// A client over an already connected socket, before the handshake; `from_env` is the
    /// normal way in, this one is for drivers that obtained the socket themselves and tests.
    fn from_fd(fd: OwnedFd, rank: u32, size: u32) -> PmiClient {
        PmiClient {
            conn: File::from(fd),
            lines: wire::LineBuffer::new(),
            rank,
            size,
            appnum: 0,
            debug: false,
            kvsname: String::new(),
            maxes: Maxes {
                kvsname_max: 256,
                keylen_max: 64,
                vallen_max: 1024,
            },
            finalized: false,
        }
    }

    /// `init`, `get_maxes`, `get_my_kvsname`, `get_appnum`.
    fn handshake(&mut self) -> MpiResult<()> {
        if self.size == 0 || self.rank >= self.size {
            return Err(pmi_err(format!(
                "PMI: rank {} is outside a job of size {}",
                self.rank, self.size
            )));
        }
        let r = self.call(
            &wire::format("init", &[("pmi_version", "1"), ("pmi_subversion", "1")]),
            "response_to_init",
        )?;
        if r.get_int("rc").unwrap_or(0) != 0 {
            return Err(pmi_err(format!(
                "PMI: server refused init (pmi_version={} rc={})",
                r.get("pmi_version").unwrap_or("?"),
                r.get("rc").unwrap_or("?")
            )));
        }
        let m = self.call(&wire::format("get_maxes", &[]), "maxes")?;
        let max = |k: &str, dflt: usize| {
            m.get_int(k)
                .and_then(|v| usize::try_from(v).ok())
                .filter(|&v| v > 0)
                .unwrap_or(dflt)
        };
        self.maxes = Maxes {
            kvsname_max: max("kvsname_max", 256),
            keylen_max: max("keylen_max", 64),
            vallen_max: max("vallen_max", 1024),
        };
        let k = self.call(&wire::format("get_my_kvsname", &[]), "my_kvsname")?;
        self.kvsname = k
            .get("kvsname")
            .filter(|s| !s.is_empty())
            .ok_or_else(|| pmi_err("PMI: my_kvsname reply without kvsname"))?
            .to_string();
        let a = self.call(&wire::format("get_appnum", &[]), "appnum")?;
        self.appnum = a
            .get_int("appnum")
            .and_then(|v| i32::try_from(v).ok())
            .unwrap_or(0);
        Ok(())
    }

    fn send(&mut self, line: &str) -> MpiResult<()> {
        if self.debug {
            eprint!("[pmi {}] -> {line}", self.rank);
        }
        self.conn
            .write_all(line.as_bytes())
            .map_err(|e| pmi_err(format!("PMI: lost the connection to the launcher: {e}")))
    }

    fn recv(&mut self) -> MpiResult<wire::Command> {
        loop {
            let line = self
                .lines
                .next_line()
                .map_err(|e| pmi_err(format!("PMI: {e}")))?;
            if let Some(line) = line {
                if self.debug {
                    eprintln!("[pmi {}] <- {line}", self.rank);
                }
                return wire::parse(&line).map_err(|e| pmi_err(format!("PMI: {e}")));
            }
            let mut buf = [0u8; 4096];
            let n = loop {
                match self.conn.read(&mut buf) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(pmi_err(format!("PMI: read from launcher failed: {e}"))),
                }
            };
            if n == 0 {
                return Err(pmi_err("PMI: the launcher closed the connection"));
            }
            self.lines.push(&buf[..n]);
        }
    }

    /// Receive the next command, which must be `cmd=<want>`.
    fn expect(&mut self, want: &str) -> MpiResult<wire::Command> {
        let r = self.recv()?;
        if r.cmd != want {
            return Err(pmi_err(format!(
                "PMI: expected cmd={want} from the launcher, got cmd={}",
                r.cmd
            )));
        }
        Ok(r)
    }

    fn call(&mut self, line: &str, want: &str) -> MpiResult<wire::Command> {
        self.send(line)?;
        self.expect(want)
    }

    /// This process's rank in the job.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The number of processes in the job.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// The job's key-value space name, unique per job (the core derives shared-memory
    /// segment names from it).
    pub fn kvsname(&self) -> &str {
        &self.kvsname
    }

    /// The application number (0 unless started as part of an MPMD launch).
    pub fn appnum(&self) -> i32 {
        self.appnum
    }

    /// The server's size limits.
    pub fn maxes(&self) -> Maxes {
        self.maxes
    }

    fn check_key(&self, key: &str) -> MpiResult<()> {
        if key.is_empty()
            || key.len() >= self.maxes.keylen_max
            || key
                .chars()
                .any(|c| c.is_whitespace() || c.is_control() || c == '\\')
        {
            return Err(MpiError::new(
                ErrorClass::Arg,
                format!(
                    "PMI: invalid key {key:?} (1..{} bytes, no spaces or control characters)",
                    self.maxes.keylen_max
                ),
            ));
        }
        Ok(())
    }

    /// Publish `key=value` in the job's key-value space; peers see it after the next
    /// [`barrier`](Self::barrier). The value must fit in `vallen_max - 1` bytes (the limit
    /// counts C's terminating NUL) and must not contain newlines; use
    /// [`put_long`](Self::put_long) for longer values.
    pub fn put(&mut self, key: &str, value: &str) -> MpiResult<()> {
        self.check_key(key)?;
        if value.len() >= self.maxes.vallen_max || value.contains(['\n', '\r', '\0']) {
            return Err(MpiError::new(
                ErrorClass::Arg,
                format!(
                    "PMI: value for {key:?} is {} bytes or contains a newline (limit {})",
                    value.len(),
                    self.maxes.vallen_max - 1
                ),
            ));
        }
        let line = wire::format(
            "put",
            &[("kvsname", &self.kvsname), ("key", key), ("value", value)],
        );
        let r = self.call(&line, "put_result")?;
        match r.get_int("rc") {
            Some(0) | None => Ok(()),
            Some(rc) => Err(pmi_err(format!(
                "PMI: put of {key:?} failed: rc={rc} {}",
                r.get("msg").unwrap_or("")
            ))),
        }
    }

    /// Look `key` up in the job's key-value space; `None` if no process put it.
    pub fn get(&mut self, key: &str) -> MpiResult<Option<String>> {
        self.check_key(key)?;
        let line = wire::format("get", &[("kvsname", &self.kvsname), ("key", key)]);
        let r = self.call(&line, "get_result")?;
        if r.get_int("rc").unwrap_or(0) != 0 {
            return Ok(None);
        }
        Ok(Some(r.get("value").unwrap_or("").to_string()))
    }

    /// Wait until every process of the job entered the barrier; puts made before it are
    /// visible to every `get` after it.
    pub fn barrier(&mut self) -> MpiResult<()> {
        self.call(&wire::format("barrier_in", &[]), "barrier_out")
            .map(|_| ())
    }

    /// Put a value of any length: stored as `<key>-n` (the number of parts) and
    /// `<key>-0`, `<key>-1`, ... each at most `vallen_max - 1` bytes, split on character
    /// boundaries, and each small enough that its whole `put` line stays within
    /// [`wire::MAX_REQUEST_LINE`] (Slurm's limit). Read it back with
    /// [`get_long`](Self::get_long).
    pub fn put_long(&mut self, key: &str, value: &str) -> MpiResult<()> {
        self.check_key(key)?;
        let parts = split_for_put(
            value,
            self.maxes.vallen_max.saturating_sub(1),
            wire::MAX_REQUEST_LINE.saturating_sub(put_line_overhead(&self.kvsname, key)),
        )
        .ok_or_else(|| {
            MpiError::new(
                ErrorClass::Arg,
                format!("PMI: {key:?} or the value limit leaves no room for a value"),
            )
        })?;
        for (i, part) in parts.iter().enumerate() {
            self.put(&format!("{key}-{i}"), part)?;
        }
        self.put(&format!("{key}-n"), &parts.len().to_string())
    }

    /// Read a value written with [`put_long`](Self::put_long); `None` if it was never put.
    pub fn get_long(&mut self, key: &str) -> MpiResult<Option<String>> {
        let Some(n) = self.get(&format!("{key}-n"))? else {
            return Ok(None);
        };
        let n: usize = n
            .parse()
            .map_err(|_| pmi_err(format!("PMI: {key}-n holds {n:?}, not a part count")))?;
        let mut value = String::new();
        for i in 0..n {
            let part = self
                .get(&format!("{key}-{i}"))?
                .ok_or_else(|| pmi_err(format!("PMI: part {i} of {key:?} is missing")))?;
            value.push_str(&part);
        }
        Ok(Some(value))
    }

    /// The node id of every rank from the launcher's `PMI_process_mapping`, or `None` if the
    /// launcher does not publish one (or publishes something we cannot read).
    pub fn process_mapping(&mut self) -> MpiResult<Option<Vec<u32>>> {
        let Some(m) = self.get("PMI_process_mapping")? else {
            return Ok(None);
        };
        Ok(parse_process_mapping(&m, self.size as usize))
    }

    /// Ask the launcher to abort the whole job with exit `code`. `msg` travels as the
    /// `message=` key (as MPICH 4 sends it); newlines in it become spaces. No reply comes:
    /// the launcher kills the job, so the caller should exit with `code` right after.
    pub fn abort(&mut self, code: i32, msg: &str) -> MpiResult<()> {
        let code = code.to_string();
        let line = wire::format("abort", &[("exitcode", &code), ("message", msg)]);
        self.send(&line)
    }

    /// Ask the launcher to start `apps` as a new job with `preput` in its key-value space
    /// (PMI-1 `spawn`; MPI_Comm_spawn). Returns once the launcher has started them (or
    /// refused, with its reason; class MPI_ERR_SPAWN).
    pub fn spawn(
        &mut self,
        apps: &[tsunagi_p2p::boot::SpawnApp],
        preput: &[(String, String)],
    ) -> MpiResult<()> {
        let lines = wire::spawn_lines(apps, preput);
        // A value with a line break would end its line early and change the request.
        if let Some(l) = lines.iter().find(|l| l.contains(['\n', '\r'])) {
            let key = l.split('=').next().unwrap_or("");
            return Err(MpiError::new(
                ErrorClass::Arg,
                format!("PMI spawn: {key} holds a line break, which PMI cannot carry"),
            ));
        }
        let mut text = lines.join("\n");
        text.push('\n');
        self.send(&text)?;
        let r = self.expect("spawn_result")?;
        match r.get_int("rc") {
            Some(0) => Ok(()),
            _ => Err(MpiError::new(
                ErrorClass::Spawn,
                format!(
                    "the launcher could not start the processes: {}",
                    r.get("msg").unwrap_or("no reason given")
                ),
            )),
        }
    }

    /// Ask the launcher's name service (PMI-1 `publish_name`, `unpublish_name`,
    /// `lookup_name`, as MPICH's simple PMI sends them; `unpublish_name` also names the
    /// port, which other servers ignore).
    pub fn name_service(
        &mut self,
        req: tsunagi_p2p::boot::NameRequest<'_>,
    ) -> MpiResult<tsunagi_p2p::boot::NameAnswer> {
        use tsunagi_p2p::boot::{NameAnswer, NameRequest};
        let (line, want) = match req {
            NameRequest::Publish { service, port } => (
                wire::format("publish_name", &[("service", service), ("port", port)]),
                "publish_result",
            ),
            NameRequest::Unpublish { service, port } => (
                wire::format("unpublish_name", &[("service", service), ("port", port)]),
                "unpublish_result",
            ),
            NameRequest::Lookup { service } => (
                wire::format("lookup_name", &[("service", service)]),
                "lookup_result",
            ),
        };
        let r = self.call(&line, want)?;
        let msg = r
            .get("msg")
            .unwrap_or("refused by the launcher")
            .to_string();
        Ok(match (r.get("info"), req) {
            (Some("ok"), NameRequest::Lookup { .. }) => match r.get("port") {
                Some(p) => NameAnswer::Port(p.to_string()),
                None => NameAnswer::Failed("the launcher's lookup answer has no port".into()),
            },
            (Some("ok"), _) => NameAnswer::Done,
            (_, NameRequest::Lookup { .. }) => NameAnswer::NotFound(msg),
            (Some("exists" | "fail"), _) => NameAnswer::ServiceRefused(msg),
            _ => NameAnswer::Failed(msg),
        })
    }

    /// Tell the launcher this process is done with PMI (MPI_Finalize). After this the
    /// launcher treats the process's exit with status 0 as a clean end.
    pub fn finalize(&mut self) -> MpiResult<()> {
        if self.finalized {
            return Ok(());
        }
        self.call(&wire::format("finalize", &[]), "finalize_ack")?;
        self.finalized = true;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};
    use std::os::unix::net::UnixStream;

    #[test]
    fn mapping_single_and_multi_node() {
        assert_eq!(
            parse_process_mapping("(vector,(0,1,3))", 3),
            Some(vec![0, 0, 0])
        );
        assert_eq!(
            parse_process_mapping("(vector,(0,2,2))", 4),
            Some(vec![0, 0, 1, 1])
        );
        assert_eq!(
            parse_process_mapping("(vector,(0,2,1),(2,1,2))", 4),
            Some(vec![0, 1, 2, 2])
        );
        assert_eq!(
            parse_process_mapping(" (vector, (1,2,1)) ", 2),
            Some(vec![1, 2])
        );
    }

    #[test]
    fn mapping_repeats_when_short() {
        assert_eq!(
            parse_process_mapping("(vector,(0,2,1))", 5),
            Some(vec![0, 1, 0, 1, 0])
        );
        // Longer than needed: truncated.
        assert_eq!(
            parse_process_mapping("(vector,(0,4,4))", 2),
            Some(vec![0, 0])
        );
    }

    #[test]
    fn mapping_rejects_garbage() {
        for bad in [
            "",
            "(vector)",
            "(vector,)",
            "(vector,(0,0,3))",
            "(vector,(0,1))",
            "(vector,(0,1,3)",
            "(vector,(a,1,3))",
            "(vector,(0,1,3),,(1,1,1))",
            "(list,(0,1,3))",
            "(vector,(0,1,3,4))",
        ] {
            assert_eq!(parse_process_mapping(bad, 3), None, "{bad:?}");
        }
    }

    /// A scripted server on the other end of a socketpair: answers each request line
    /// with the reply the closure gives (None = no reply).
    fn fake_server(
        sock: UnixStream,
        mut reply: impl FnMut(&wire::Command) -> Option<String> + Send + 'static,
    ) -> std::thread::JoinHandle<Vec<String>> {
        std::thread::spawn(move || {
            let mut seen = Vec::new();
            let mut w = sock.try_clone().unwrap();
            for line in BufReader::new(sock).lines() {
                let line = line.unwrap();
                let c = wire::parse(&line).unwrap();
                seen.push(line);
                if let Some(r) = reply(&c) {
                    w.write_all(r.as_bytes()).unwrap();
                }
            }
            seen
        })
    }

    #[test]
    fn client_handshake_kvs_and_finalize_against_fake_server() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut kvs = std::collections::HashMap::new();
        let server = fake_server(b, move |c| {
            Some(match c.cmd.as_str() {
                "init" => "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n".into(),
                "get_maxes" => "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=16\n".into(),
                "get_my_kvsname" => "cmd=my_kvsname kvsname=kvs_42\n".into(),
                "get_appnum" => "cmd=appnum appnum=0\n".into(),
                "put" => {
                    kvs.insert(
                        c.get("key").unwrap().to_string(),
                        c.get("value").unwrap().to_string(),
                    );
                    "cmd=put_result rc=0 msg=success\n".into()
                }
                "get" => match kvs.get(c.get("key").unwrap()) {
                    Some(v) => wire::format("get_result", &[("rc", "0"), ("value", v)]),
                    None if c.get("key") == Some("PMI_process_mapping") => {
                        "cmd=get_result rc=0 value=(vector,(0,1,2))\n".into()
                    }
                    None => "cmd=get_result rc=-1 msg=not_found\n".into(),
                },
                "barrier_in" => "cmd=barrier_out\n".into(),
                "finalize" => "cmd=finalize_ack\n".into(),
                _ => return None,
            })
        });
        let mut c = PmiClient::from_fd(OwnedFd::from(a), 1, 2);
        c.handshake().unwrap();
        assert_eq!((c.rank(), c.size(), c.kvsname()), (1, 2, "kvs_42"));
        assert_eq!(c.maxes().vallen_max, 16);
        c.put("card-1", "hello").unwrap();
        c.barrier().unwrap();
        assert_eq!(c.get("card-1").unwrap().as_deref(), Some("hello"));
        assert_eq!(c.get("card-9").unwrap(), None);
        assert!(c.put("k", "0123456789abcdef").is_err()); // 16 >= vallen_max
        assert!(c.put("bad key", "v").is_err());
        let long = "xyz".repeat(20) + "é";
        c.put_long("big", &long).unwrap();
        assert_eq!(c.get_long("big").unwrap().as_deref(), Some(long.as_str()));
        assert_eq!(c.get_long("nothing").unwrap(), None);
        assert_eq!(c.process_mapping().unwrap(), Some(vec![0, 0]));
        c.abort(3, "bye now").unwrap();
        c.finalize().unwrap();
        c.finalize().unwrap(); // idempotent
        drop(c);
        let seen = server.join().unwrap();
        assert_eq!(seen[0], "cmd=init pmi_version=1 pmi_subversion=1");
        assert!(seen.contains(&"cmd=abort exitcode=3 message=bye\\ now".to_string()));
        assert_eq!(seen.iter().filter(|l| *l == "cmd=finalize").count(), 1);
    }

    #[test]
    fn split_for_put_respects_raw_and_wire_limits() {
        assert_eq!(split_for_put("", 4, 4), Some(vec![]));
        assert_eq!(
            split_for_put("abcdefghij", 4, 100),
            Some(vec!["abcd", "efgh", "ij"])
        );
        // Escaped characters count twice on the wire.
        assert_eq!(split_for_put("a b c", 100, 3), Some(vec!["a ", "b ", "c"]));
        assert_eq!(split_for_put("\\\\\\", 100, 4), Some(vec!["\\\\", "\\"]));
        // Never inside a character.
        assert_eq!(split_for_put("ééé", 3, 100), Some(vec!["é", "é", "é"]));
        assert_eq!(split_for_put("é", 1, 100), None);
        assert_eq!(split_for_put(" ", 10, 1), None);
        assert_eq!(split_for_put("x", 0, 10), None);
        let v = "xyz ".repeat(700);
        let parts = split_for_put(&v, 1023, 900).unwrap();
        assert_eq!(parts.concat(), v);
        assert!(parts
            .iter()
            .all(|p| p.len() <= 1023 && wire::escaped_len(p) <= 900));
    }

    /// Slurm's pmi2 plugin reads each PMI-1 request with one 1024-byte read: every line of
    /// a long put must fit, also with Slurm's kvsname and values that need escaping.
    #[test]
    fn put_long_lines_fit_slurms_request_limit() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut kvs = std::collections::HashMap::new();
        let server = fake_server(b, move |c| {
            Some(match c.cmd.as_str() {
                "init" => "cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1\n".into(),
                "get_maxes" => {
                    "cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max=1024\n".into()
                }
                "get_my_kvsname" => "cmd=my_kvsname rc=0 kvsname=12345.0\n".into(),
                "get_appnum" => "cmd=appnum rc=0 appnum=-1\n".into(),
                "put" => {
                    kvs.insert(
                        c.get("key").unwrap().to_string(),
                        c.get("value").unwrap().to_string(),
                    );
                    "cmd=put_result rc=0\n".into()
                }
                "get" => match kvs.get(c.get("key").unwrap()) {
                    Some(v) => wire::format("get_result", &[("rc", "0"), ("value", v)]),
                    None => "cmd=get_result rc=1\n".into(),
                },
                _ => return None,
            })
        });
        let mut c = PmiClient::from_fd(OwnedFd::from(a), 0, 1);
        c.handshake().unwrap();
        assert_eq!(c.appnum(), -1);
        let plain: String = (0..5000)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let spaced = "a b\\c ".repeat(600);
        c.put_long("card-long-0", &plain).unwrap();
        c.put_long("card-long-1", &spaced).unwrap();
        assert_eq!(c.get_long("card-long-0").unwrap(), Some(plain));
        assert_eq!(c.get_long("card-long-1").unwrap(), Some(spaced));
        drop(c);
        let seen = server.join().unwrap();
        let longest = seen.iter().map(|l| l.len() + 1).max().unwrap();
        assert!(
            longest <= wire::MAX_REQUEST_LINE,
            "a line of {longest} bytes"
        );
        assert!(
            longest > wire::MAX_REQUEST_LINE - 64,
            "parts too small: {longest}"
        );
    }

    #[test]
    fn client_pmi_port_initack_handshake() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = std::thread::spawn(move || {
            let (sock, _) = listener.accept().unwrap();
            let mut w = sock.try_clone().unwrap();
            let mut seen = Vec::new();
            for line in BufReader::new(sock).lines() {
                let line = line.unwrap();
                let reply = match wire::parse(&line).unwrap().cmd.as_str() {
                    "initack" => "cmd=initack\ncmd=set size=4\ncmd=set rank=2\ncmd=set debug=0\n",
                    "init" => "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n",
                    "get_maxes" => "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n",
                    "get_my_kvsname" => "cmd=my_kvsname kvsname=port_kvs\n",
                    "get_appnum" => "cmd=appnum appnum=1\n",
                    _ => "",
                };
                seen.push(line);
                w.write_all(reply.as_bytes()).unwrap();
            }
            seen
        });
        let c = PmiClient::connect_port(&addr, "7").unwrap();
        assert_eq!(
            (c.rank(), c.size(), c.kvsname(), c.appnum()),
            (2, 4, "port_kvs", 1)
        );
        drop(c);
        assert_eq!(server.join().unwrap()[0], "cmd=initack pmiid=7");
    }

    #[test]
    fn client_reports_refused_init_and_lost_server() {
        let (a, b) = UnixStream::pair().unwrap();
        let server = fake_server(b, |_| {
            Some("cmd=response_to_init pmi_version=2 pmi_subversion=0 rc=-1\n".into())
        });
        let mut c = PmiClient::from_fd(OwnedFd::from(a), 0, 1);
        assert!(c.handshake().is_err());
        drop(c);
        server.join().unwrap();

        let (a, b) = UnixStream::pair().unwrap();
        drop(b);
        let mut c = PmiClient::from_fd(OwnedFd::from(a), 0, 1);
        assert!(c.handshake().is_err());
    }
}
