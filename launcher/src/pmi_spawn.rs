//! PMI-1's `spawn` command (MPI_Comm_spawn through mpirun) as a sans-IO decoder.
//!
//! A PMI-1 client (MPICH's simple PMI, ours in `tsunagi_core::pmi`) asks for new processes
//! with a multi-line command, one block per application of MPI_Comm_spawn_multiple:
//!
//! ```text
//! mcmd=spawn
//! nprocs=2
//! execname=./child
//! totspawns=1
//! spawnssofar=1
//! arg1=first argument
//! argcnt=1
//! preput_num=1
//! preput_key_0=PARENT_ROOT_PORT_NAME
//! preput_val_0=tsunagi:10.0.0.1:4000:...
//! info_num=1
//! info_key_0=wdir
//! info_val_0=/tmp
//! endcmd
//! ```
//!
//! Every line is `key=value` with the value running to the end of the line (unescaped:
//! arguments may hold spaces); `argN` counts from 1, `preput_*`/`info_*` from 0. The blocks
//! of one request come in a row (`spawnssofar` = 1..=`totspawns`); the server answers the
//! last one with `cmd=spawn_result rc=0` (or `rc=-1 msg=...`). Preput pairs are the same in
//! every block; they go into the children's key-value space before they start.
//!
//! The input is a rank's, so untrusted: [`SpawnCollector`] bounds the block's size, and
//! [`parse_block`] rejects anything missing, out of range or out of sequence with a reason
//! instead of guessing.

use std::collections::HashMap;

/// Most processes one spawn request may ask for.
pub const MAX_SPAWN_PROCS: usize = 4096;
/// Most applications (blocks) in one request.
pub const MAX_SPAWN_APPS: usize = 256;
/// Most lines in one block (arguments, preput and info pairs included).
pub const MAX_BLOCK_LINES: usize = 4096;
/// Most bytes in one block.
pub const MAX_BLOCK_BYTES: usize = 256 * 1024;

/// One application of a spawn request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpawnApp {
    pub execname: String,
    pub args: Vec<String>,
    pub nprocs: usize,
    /// Info keys in the order given (`host`, `wdir`, `path` are honoured).
    pub info: Vec<(String, String)>,
}

impl SpawnApp {
    /// The value of info key `key`, if given.
    pub fn info(&self, key: &str) -> Option<&str> {
        self.info
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// A whole spawn request: its applications and the key-value pairs to preput.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpawnRequest {
    pub apps: Vec<SpawnApp>,
    pub preput: Vec<(String, String)>,
}

impl SpawnRequest {
    /// The number of processes of all applications.
    pub fn total_procs(&self) -> usize {
        self.apps.iter().map(|a| a.nprocs).sum()
    }
}

/// One parsed block: its application, preput pairs and where it stands in the request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    pub app: SpawnApp,
    pub preput: Vec<(String, String)>,
    pub totspawns: usize,
    pub spawnssofar: usize,
}

/// Parse the lines between `mcmd=spawn` and `endcmd` (both excluded).
pub fn parse_block(lines: &[String]) -> Result<Block, String> {
    let mut kv: HashMap<&str, &str> = HashMap::new();
    for line in lines {
        let line = line.trim_end_matches('\r');
        if line.is_empty() {
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .ok_or_else(|| format!("spawn: line without '=': {:?}", short(line)))?;
        if k.is_empty() {
            return Err(format!("spawn: empty key in {:?}", short(line)));
        }
        if kv.insert(k, v).is_some() {
            return Err(format!("spawn: key {:?} given twice", short(k)));
        }
    }
    let need = |k: &str| -> Result<&str, String> {
        kv.get(k)
            .copied()
            .ok_or_else(|| format!("spawn: {k}= missing"))
    };
    let count = |k: &str, max: usize, optional: bool| -> Result<usize, String> {
        let v = match kv.get(k) {
            Some(v) => *v,
            None if optional => return Ok(0),
            None => return Err(format!("spawn: {k}= missing")),
        };
        v.trim()
            .parse::<usize>()
            .ok()
            .filter(|&n| n <= max)
            .ok_or_else(|| format!("spawn: {k}={:?} is not a count up to {max}", short(v)))
    };
    let nprocs = count("nprocs", MAX_SPAWN_PROCS, false)?;
    if nprocs == 0 {
        return Err("spawn: nprocs=0".into());
    }
    let execname = need("execname")?;
    if execname.is_empty() {
        return Err("spawn: empty execname".into());
    }
    let totspawns = count("totspawns", MAX_SPAWN_APPS, true)?.max(1);
    let spawnssofar = count("spawnssofar", MAX_SPAWN_APPS, true)?.max(1);
    if spawnssofar > totspawns {
        return Err(format!(
            "spawn: spawnssofar={spawnssofar} is past totspawns={totspawns}"
        ));
    }
    let argcnt = count("argcnt", MAX_BLOCK_LINES, true)?;
    let args = (1..=argcnt)
        .map(|i| need(&format!("arg{i}")).map(str::to_string))
        .collect::<Result<Vec<_>, _>>()?;
    let pairs = |num: &str, key: &str, val: &str| -> Result<Vec<(String, String)>, String> {
        (0..count(num, MAX_BLOCK_LINES, true)?)
            .map(|i| {
                let k = need(&format!("{key}{i}"))?;
                if k.is_empty() {
                    return Err(format!("spawn: empty {key}{i}"));
                }
                Ok((k.to_string(), need(&format!("{val}{i}"))?.to_string()))
            })
            .collect()
    };
    let preput = pairs("preput_num", "preput_key_", "preput_val_")?;
    let info = pairs("info_num", "info_key_", "info_val_")?;
    Ok(Block {
        app: SpawnApp {
            execname: execname.to_string(),
            args,
            nprocs,
            info,
        },
        preput,
        totspawns,
        spawnssofar,
    })
}

fn short(s: &str) -> String {
    s.chars().take(60).collect()
}

/// Gathers one rank's spawn request from its lines: blocks in order, bounded.
#[derive(Debug, Default)]
pub struct SpawnCollector {
    /// Lines of the block being read (after `mcmd=spawn`), if one is open.
    block: Option<Vec<String>>,
    block_bytes: usize,
    /// Blocks of the request so far.
    request: SpawnRequest,
    totspawns: usize,
}

/// What a line did to a [`SpawnCollector`].
#[derive(Debug, PartialEq, Eq)]
pub enum Collected {
    /// The line belongs to the request; more is to come.
    More,
    /// The request is complete.
    Done(SpawnRequest),
}

impl SpawnCollector {
    /// Whether a block is open (every line goes here until `endcmd`).
    pub fn in_block(&self) -> bool {
        self.block.is_some()
    }

    /// Whether a request is under way (a block is open, or blocks of a request with more
    /// to come were read).
    pub fn busy(&self) -> bool {
        self.block.is_some() || !self.request.apps.is_empty()
    }

    /// Take one line: `mcmd=spawn` opens a block, `endcmd` closes it. Errors end the
    /// request (the collector is empty again).
    pub fn take(&mut self, line: &str) -> Result<Collected, String> {
        let r = self.take_inner(line);
        if r.is_err() {
            *self = SpawnCollector::default();
        }
        r
    }

    fn take_inner(&mut self, line: &str) -> Result<Collected, String> {
        let line = line.trim_end_matches(['\n', '\r']);
        let Some(block) = self.block.as_mut() else {
            if line.trim() == "mcmd=spawn" {
                self.block = Some(Vec::new());
                self.block_bytes = 0;
                return Ok(Collected::More);
            }
            return Err(format!("expected mcmd=spawn, got {:?}", short(line.trim())));
        };
        if line.trim() != "endcmd" {
            self.block_bytes += line.len() + 1;
            if block.len() >= MAX_BLOCK_LINES || self.block_bytes > MAX_BLOCK_BYTES {
                return Err(format!(
                    "spawn command longer than {MAX_BLOCK_LINES} lines or {MAX_BLOCK_BYTES} bytes"
                ));
            }
            block.push(line.to_string());
            return Ok(Collected::More);
        }
        let lines = self.block.take().expect("open block");
        let b = parse_block(&lines)?;
        let expected = self.request.apps.len() + 1;
        if b.spawnssofar != expected {
            return Err(format!(
                "spawn: spawnssofar={} where {expected} was due",
                b.spawnssofar
            ));
        }
        if expected == 1 {
            self.totspawns = b.totspawns;
            self.request.preput = b.preput;
        } else if b.totspawns != self.totspawns {
            return Err(format!(
                "spawn: totspawns changed from {} to {}",
                self.totspawns, b.totspawns
            ));
        }
        if self.request.total_procs() + b.app.nprocs > MAX_SPAWN_PROCS {
            return Err(format!(
                "spawn: more than {MAX_SPAWN_PROCS} processes requested"
            ));
        }
        self.request.apps.push(b.app);
        if self.request.apps.len() == self.totspawns {
            let done = std::mem::take(&mut self.request);
            self.totspawns = 0;
            return Ok(Collected::Done(done));
        }
        Ok(Collected::More)
    }
}

/// The lines of `req` as our client (`tsunagi_core::pmi::PmiClient::spawn`) sends them,
/// without newlines: what the decoder must read back.
pub fn encode_request(req: &SpawnRequest) -> Vec<String> {
    let apps: Vec<tsunagi_p2p::boot::SpawnApp> = req
        .apps
        .iter()
        .map(|a| tsunagi_p2p::boot::SpawnApp {
            command: a.execname.clone(),
            args: a.args.clone(),
            procs: a.nprocs,
            info: a.info.clone(),
        })
        .collect();
    tsunagi_core::pmi::wire::spawn_lines(&apps, &req.preput)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(c: &mut SpawnCollector, lines: &[&str]) -> Result<Option<SpawnRequest>, String> {
        let mut done = None;
        for l in lines {
            match c.take(l)? {
                Collected::More => {}
                Collected::Done(r) => done = Some(r),
            }
        }
        Ok(done)
    }

    /// The byte sequence MPICH's simple PMI client writes for a two-application spawn.
    #[test]
    fn mpich_style_request_is_read() {
        let text = "mcmd=spawn\nnprocs=1\nexecname=./a.out\ntotspawns=2\nspawnssofar=1\n\
                    arg1=child\narg2=a b\nargcnt=2\npreput_num=1\n\
                    preput_key_0=PARENT_ROOT_PORT_NAME\npreput_val_0=tsunagi:1.2.3.4:5:ab\n\
                    info_num=1\ninfo_key_0=wdir\ninfo_val_0=/tmp\nendcmd\n\
                    mcmd=spawn\nnprocs=2\nexecname=/bin/b=c\ntotspawns=2\nspawnssofar=2\n\
                    argcnt=0\npreput_num=1\npreput_key_0=PARENT_ROOT_PORT_NAME\n\
                    preput_val_0=tsunagi:1.2.3.4:5:ab\ninfo_num=0\nendcmd\n";
        let mut c = SpawnCollector::default();
        let mut got = None;
        for (i, l) in text.lines().enumerate() {
            assert!(got.is_none(), "done before line {i}");
            if let Collected::Done(r) = c.take(l).unwrap() {
                got = Some(r);
            }
        }
        let r = got.expect("complete");
        assert!(!c.busy());
        assert_eq!(r.total_procs(), 3);
        assert_eq!(r.apps[0].args, vec!["child", "a b"]);
        assert_eq!(r.apps[0].info("wdir"), Some("/tmp"));
        assert_eq!(r.apps[1].execname, "/bin/b=c");
        assert_eq!(
            r.preput,
            vec![(
                "PARENT_ROOT_PORT_NAME".to_string(),
                "tsunagi:1.2.3.4:5:ab".to_string()
            )]
        );
        // Our client's encoder writes what the decoder reads back.
        let mut c = SpawnCollector::default();
        let lines = encode_request(&r);
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        assert_eq!(feed(&mut c, &refs).unwrap(), Some(r));
    }

    /// Malformed input is refused with a reason, never a panic, and leaves the collector
    /// ready for a fresh request.
    #[test]
    fn malformed_requests_are_rejected() {
        let head = ["mcmd=spawn"];
        let cases: &[(&[&str], &str)] = &[
            (&["nprocs=1", "argcnt=0", "endcmd"], "execname= missing"),
            (&["execname=x", "endcmd"], "nprocs= missing"),
            (&["nprocs=0", "execname=x", "endcmd"], "nprocs=0"),
            (&["nprocs=-1", "execname=x", "endcmd"], "not a count"),
            (&["nprocs=99999999", "execname=x", "endcmd"], "not a count"),
            (
                &["nprocs=184467440737095516160", "execname=x", "endcmd"],
                "not a count",
            ),
            (&["nprocs=1", "execname=", "endcmd"], "empty execname"),
            (
                &["nprocs=1", "execname=x", "argcnt=2", "arg1=a", "endcmd"],
                "arg2= missing",
            ),
            (
                &["nprocs=1", "execname=x", "garbage", "endcmd"],
                "without '='",
            ),
            (&["nprocs=1", "nprocs=2", "execname=x", "endcmd"], "twice"),
            (&["nprocs=1", "execname=x", "=v", "endcmd"], "empty key"),
            (
                &[
                    "nprocs=1",
                    "execname=x",
                    "preput_num=1",
                    "preput_key_0=k",
                    "endcmd",
                ],
                "preput_val_0= missing",
            ),
            (
                &[
                    "nprocs=1",
                    "execname=x",
                    "info_num=1",
                    "info_key_0=",
                    "info_val_0=v",
                    "endcmd",
                ],
                "empty info_key_0",
            ),
            (
                &[
                    "nprocs=1",
                    "execname=x",
                    "totspawns=1",
                    "spawnssofar=2",
                    "endcmd",
                ],
                "past totspawns",
            ),
            (
                &[
                    "nprocs=1",
                    "execname=x",
                    "totspawns=2",
                    "spawnssofar=2",
                    "endcmd",
                ],
                "where 1 was due",
            ),
        ];
        for (body, want) in cases {
            let mut c = SpawnCollector::default();
            let mut lines: Vec<&str> = head.to_vec();
            lines.extend_from_slice(body);
            let e = feed(&mut c, &lines).expect_err(want);
            assert!(e.contains(want), "{body:?}: {e}");
            assert!(!c.busy(), "{body:?}: collector reset");
        }
        // A line outside a block.
        let mut c = SpawnCollector::default();
        assert!(c
            .take("nprocs=1")
            .unwrap_err()
            .contains("expected mcmd=spawn"));
        // totspawns changing between blocks.
        let block = |tot: usize, sofar: usize| {
            vec![
                "mcmd=spawn".to_string(),
                "nprocs=1".into(),
                "execname=x".into(),
                format!("totspawns={tot}"),
                format!("spawnssofar={sofar}"),
                "endcmd".into(),
            ]
        };
        let mut c = SpawnCollector::default();
        for l in block(3, 1) {
            assert_eq!(c.take(&l).unwrap(), Collected::More);
        }
        let mut err = None;
        for l in block(2, 2) {
            if let Err(e) = c.take(&l) {
                err = Some(e);
                break;
            }
        }
        assert!(err.unwrap().contains("totspawns changed"));
        // Too many processes over the blocks, and an endless block.
        let mut c = SpawnCollector::default();
        let big = format!("nprocs={MAX_SPAWN_PROCS}");
        let first = [
            "mcmd=spawn",
            &big,
            "execname=x",
            "totspawns=2",
            "spawnssofar=1",
            "endcmd",
        ];
        assert_eq!(feed(&mut c, &first).unwrap(), None);
        let second = [
            "mcmd=spawn",
            "nprocs=1",
            "execname=x",
            "totspawns=2",
            "spawnssofar=2",
            "endcmd",
        ];
        assert!(feed(&mut c, &second).unwrap_err().contains("more than"));
        let mut c = SpawnCollector::default();
        c.take("mcmd=spawn").unwrap();
        let long = "x=".to_string() + &"y".repeat(1000);
        let mut err = None;
        for _ in 0..MAX_BLOCK_LINES + 1 {
            if let Err(e) = c.take(&long) {
                err = Some(e);
                break;
            }
        }
        assert!(err.unwrap().contains("longer than"));
        assert!(!c.busy());
    }
}
