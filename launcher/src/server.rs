//! The PMI-1 server as a state machine: lines from ranks in, reply lines and job events out.
//!
//! It knows nothing about sockets or processes, so the same code can serve ranks connected
//! directly (one host) or, later, lines relayed by per-host agents.

use std::collections::HashMap;

use tsunagi_core::pmi::wire::{self, Command};

/// Limits we announce in `cmd=maxes` (Hydra's, so libraries tuned for Hydra fit).
pub const KVSNAME_MAX: usize = 256;
pub const KEYLEN_MAX: usize = 64;
pub const VALLEN_MAX: usize = 1024;

/// Something the launcher must act on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// The rank called PMI abort (MPI_Abort).
    Abort {
        rank: usize,
        code: i32,
        message: Option<String>,
    },
    /// The rank sent something we cannot understand; the job cannot go on reliably.
    ProtocolError { rank: usize, detail: String },
}

#[derive(Clone, Debug, Default)]
struct RankState {
    initialized: bool,
    finalized: bool,
    in_barrier: bool,
}

/// The job's key-value space, barrier and per-rank PMI state.
#[derive(Debug)]
pub struct PmiServer {
    kvsname: String,
    size: usize,
    kvs: HashMap<String, String>,
    /// Reserved `PMI_*` attributes (e.g. `PMI_process_mapping`): readable, not writable.
    attrs: HashMap<String, String>,
    ranks: Vec<RankState>,
    barrier_count: usize,
}

impl PmiServer {
    /// A server for a job of `size` ranks whose placement is `process_mapping`
    /// (`(vector,(first_node,node_count,ranks_per_node),...)`).
    pub fn new(kvsname: &str, size: usize, process_mapping: &str) -> PmiServer {
        let mut attrs = HashMap::new();
        attrs.insert(
            "PMI_process_mapping".to_string(),
            process_mapping.to_string(),
        );
        PmiServer {
            kvsname: kvsname.to_string(),
            size,
            kvs: HashMap::new(),
            attrs,
            ranks: vec![RankState::default(); size],
            barrier_count: 0,
        }
    }

    pub fn kvsname(&self) -> &str {
        &self.kvsname
    }

    /// Whether `rank` has sent `cmd=init` (so it is an MPI process and must finalize).
    pub fn initialized(&self, rank: usize) -> bool {
        self.ranks[rank].initialized
    }

    /// Whether `rank` has sent `cmd=finalize`.
    pub fn finalized(&self, rank: usize) -> bool {
        self.ranks[rank].finalized
    }

    /// Handle one line (without `\n`) from `rank`. Replies are appended to `out` as
    /// `(destination rank, line)`; a barrier's completion replies to every rank.
    pub fn handle_line(
        &mut self,
        rank: usize,
        line: &str,
        out: &mut Vec<(usize, String)>,
    ) -> Option<Event> {
        if line.trim().is_empty() {
            return None;
        }
        let c = match wire::parse(line) {
            Ok(c) => c,
            Err(e) => {
                return Some(Event::ProtocolError {
                    rank,
                    detail: e.to_string(),
                })
            }
        };
        let mut reply = |c: Command| out.push((rank, c.to_line()));
        match c.cmd.as_str() {
            "init" => {
                let version = c.get_int("pmi_version").unwrap_or(1);
                self.ranks[rank].initialized = true;
                reply(
                    Command::new("response_to_init")
                        .arg("pmi_version", 1)
                        .arg("pmi_subversion", 1)
                        .arg("rc", if version == 1 { 0 } else { -1 }),
                );
            }
            // Only PMI_PORT clients send initack; harmless to support on our sockets too.
            "initack" => {
                reply(Command::new("initack"));
                reply(Command::new("set").arg("size", self.size));
                reply(Command::new("set").arg("rank", rank));
                reply(Command::new("set").arg("debug", 0));
            }
            "get_maxes" => reply(
                Command::new("maxes")
                    .arg("kvsname_max", KVSNAME_MAX)
                    .arg("keylen_max", KEYLEN_MAX)
                    .arg("vallen_max", VALLEN_MAX),
            ),
            "get_appnum" => reply(Command::new("appnum").arg("appnum", 0)),
            "get_my_kvsname" => reply(Command::new("my_kvsname").arg("kvsname", &self.kvsname)),
            "get_universe_size" => reply(Command::new("universe_size").arg("size", self.size)),
            "put" => {
                let result = self.put(&c);
                reply(match result {
                    Ok(()) => Command::new("put_result")
                        .arg("rc", 0)
                        .arg("msg", "success"),
                    Err(msg) => Command::new("put_result").arg("rc", -1).arg("msg", msg),
                });
            }
            "get" => {
                let r = match self.get(&c) {
                    Ok(v) => Command::new("get_result")
                        .arg("rc", 0)
                        .arg("msg", "success")
                        .arg("value", v),
                    Err(msg) => Command::new("get_result").arg("rc", -1).arg("msg", msg),
                };
                reply(r);
            }
            "barrier_in" => {
                if !self.ranks[rank].in_barrier {
                    self.ranks[rank].in_barrier = true;
                    self.barrier_count += 1;
                }
                if self.barrier_count == self.size {
                    self.barrier_count = 0;
                    for (r, st) in self.ranks.iter_mut().enumerate() {
                        st.in_barrier = false;
                        out.push((r, Command::new("barrier_out").arg("rc", 0).to_line()));
                    }
                }
            }
            "finalize" => {
                self.ranks[rank].finalized = true;
                reply(Command::new("finalize_ack").arg("rc", 0));
            }
            "abort" => {
                let code = c
                    .get_int("exitcode")
                    .and_then(|v| i32::try_from(v).ok())
                    .unwrap_or(1);
                // MPICH 4 sends `message=`, Flux-style clients `error_msg=`.
                let message = c
                    .get("message")
                    .or_else(|| c.get("error_msg"))
                    .map(str::trim)
                    .filter(|m| !m.is_empty())
                    .map(str::to_string);
                return Some(Event::Abort {
                    rank,
                    code,
                    message,
                });
            }
            other => {
                // Answer so a client waiting for `<cmd>_result` gets an error, not a hang.
                reply(
                    Command::new(format!("{other}_result"))
                        .arg("rc", -1)
                        .arg("msg", "unsupported_command"),
                );
            }
        }
        None
    }

    fn check_kvsname(&self, c: &Command) -> Result<(), String> {
        match c.get("kvsname") {
            Some(k) if k != self.kvsname => Err(format!("unknown_kvsname_{k}")),
            _ => Ok(()),
        }
    }

    fn put(&mut self, c: &Command) -> Result<(), String> {
        self.check_kvsname(c)?;
        let key = c
            .get("key")
            .filter(|k| !k.is_empty())
            .ok_or("missing_key")?;
        let value = c.get("value").unwrap_or("");
        if key.len() > KEYLEN_MAX {
            return Err("key_too_long".to_string());
        }
        if value.len() > VALLEN_MAX {
            return Err("value_too_long".to_string());
        }
        if key.starts_with("PMI_") {
            return Err("key_reserved".to_string());
        }
        self.kvs.insert(key.to_string(), value.to_string());
        Ok(())
    }

    fn get(&self, c: &Command) -> Result<String, String> {
        self.check_kvsname(c)?;
        let key = c.get("key").ok_or("missing_key")?;
        self.attrs
            .get(key)
            .or_else(|| self.kvs.get(key))
            .cloned()
            .ok_or_else(|| "key_not_found".to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmds(out: &[(usize, String)]) -> Vec<(usize, Command)> {
        out.iter()
            .map(|(r, l)| (*r, wire::parse(l).unwrap()))
            .collect()
    }

    fn one(s: &mut PmiServer, rank: usize, line: &str) -> Command {
        let mut out = Vec::new();
        assert_eq!(s.handle_line(rank, line, &mut out), None);
        assert_eq!(out.len(), 1, "{line}: {out:?}");
        assert_eq!(out[0].0, rank);
        wire::parse(&out[0].1).unwrap()
    }

    #[test]
    fn handshake_replies() {
        let mut s = PmiServer::new("kvs_1", 2, "(vector,(0,1,2))");
        let r = one(&mut s, 0, "cmd=init pmi_version=1 pmi_subversion=1");
        assert_eq!(
            (r.cmd.as_str(), r.get_int("rc")),
            ("response_to_init", Some(0))
        );
        assert!(s.initialized(0) && !s.initialized(1));
        let r = one(&mut s, 0, "cmd=get_maxes");
        assert_eq!(r.get_int("vallen_max"), Some(1024));
        assert_eq!(r.get_int("keylen_max"), Some(64));
        assert_eq!(r.get_int("kvsname_max"), Some(256));
        assert_eq!(
            one(&mut s, 1, "cmd=get_my_kvsname").get("kvsname"),
            Some("kvs_1")
        );
        assert_eq!(one(&mut s, 1, "cmd=get_appnum").get_int("appnum"), Some(0));
        assert_eq!(
            one(&mut s, 1, "cmd=get_universe_size").get_int("size"),
            Some(2)
        );
        let r = one(&mut s, 1, "cmd=init pmi_version=2 pmi_subversion=0");
        assert_eq!(r.get_int("rc"), Some(-1));
        let r = one(&mut s, 0, "cmd=finalize");
        assert_eq!(r.cmd, "finalize_ack");
        assert!(s.finalized(0));
        let r = one(&mut s, 0, "cmd=spawn_something x=1");
        assert_eq!(
            (r.cmd.as_str(), r.get_int("rc")),
            ("spawn_something_result", Some(-1))
        );
    }

    #[test]
    fn kvs_put_get_and_reserved_keys() {
        let mut s = PmiServer::new("kvs_1", 2, "(vector,(0,1,2))");
        let r = one(&mut s, 0, "cmd=put kvsname=kvs_1 key=card-0 value=a=b");
        assert_eq!(r.get_int("rc"), Some(0));
        let r = one(&mut s, 1, "cmd=get kvsname=kvs_1 key=card-0");
        assert_eq!((r.get_int("rc"), r.get("value")), (Some(0), Some("a=b")));
        let r = one(&mut s, 1, "cmd=get kvsname=kvs_1 key=card-1");
        assert_eq!(r.get_int("rc"), Some(-1));
        let r = one(&mut s, 1, "cmd=get kvsname=kvs_1 key=PMI_process_mapping");
        assert_eq!(r.get("value"), Some("(vector,(0,1,2))"));
        let r = one(
            &mut s,
            1,
            "cmd=put kvsname=kvs_1 key=PMI_process_mapping value=x",
        );
        assert_eq!(r.get_int("rc"), Some(-1));
        let r = one(&mut s, 1, "cmd=put kvsname=other key=k value=x");
        assert_eq!(r.get_int("rc"), Some(-1));
        let long = format!("cmd=put kvsname=kvs_1 key=k value={}", "v".repeat(1025));
        assert_eq!(one(&mut s, 1, &long).get_int("rc"), Some(-1));
        // Escaped spaces survive.
        one(&mut s, 0, "cmd=put kvsname=kvs_1 key=sp value=a\\ b");
        let r = one(&mut s, 1, "cmd=get kvsname=kvs_1 key=sp");
        assert_eq!(r.get("value"), Some("a b"));
    }

    #[test]
    fn barrier_releases_everyone_once_all_entered() {
        let mut s = PmiServer::new("k", 3, "(vector,(0,1,3))");
        let mut out = Vec::new();
        s.handle_line(0, "cmd=barrier_in", &mut out);
        s.handle_line(2, "cmd=barrier_in", &mut out);
        s.handle_line(2, "cmd=barrier_in", &mut out); // duplicate does not count twice
        assert!(out.is_empty());
        s.handle_line(1, "cmd=barrier_in", &mut out);
        let got = cmds(&out);
        assert_eq!(got.len(), 3);
        let mut ranks: Vec<usize> = got.iter().map(|(r, _)| *r).collect();
        ranks.sort();
        assert_eq!(ranks, vec![0, 1, 2]);
        assert!(got.iter().all(|(_, c)| c.cmd == "barrier_out"));
        // A second barrier works the same way.
        out.clear();
        for r in 0..3 {
            s.handle_line(r, "cmd=barrier_in", &mut out);
        }
        assert_eq!(out.len(), 3);
    }

    #[test]
    fn abort_and_protocol_errors_are_events() {
        let mut s = PmiServer::new("k", 2, "(vector,(0,1,2))");
        let mut out = Vec::new();
        assert_eq!(
            s.handle_line(1, "cmd=abort exitcode=5 message=it\\ broke", &mut out),
            Some(Event::Abort {
                rank: 1,
                code: 5,
                message: Some("it broke".into())
            })
        );
        assert_eq!(
            s.handle_line(0, "cmd=abort exitcode=2", &mut out),
            Some(Event::Abort {
                rank: 0,
                code: 2,
                message: None
            })
        );
        assert!(matches!(
            s.handle_line(0, "garbage", &mut out),
            Some(Event::ProtocolError { rank: 0, .. })
        ));
        assert!(out.is_empty());
    }
}
