//! The PMI-1 server as a state machine: lines from ranks in, reply lines and job events out.
//!
//! It knows nothing about sockets or processes, so the same code serves ranks connected
//! directly (one host) and lines relayed by per-host agents.
//!
//! A rank's lines are untrusted input: the server checks each rank's command sequence
//! (`init` first, one `barrier_in` per barrier, nothing but `abort` after `finalize`), bounds
//! the key-value space per rank and in total, and [`printable`] makes any text a rank sends
//! safe to print on a terminal.

use std::collections::HashMap;

use tsunagi_core::pmi::wire::{self, Command};

use crate::pmi_spawn::{Collected, SpawnCollector, SpawnRequest};

/// Limits we announce in `cmd=maxes` (Hydra's, so libraries tuned for Hydra fit).
pub const KVSNAME_MAX: usize = 256;
pub const KEYLEN_MAX: usize = 64;
pub const VALLEN_MAX: usize = 1024;
/// Key-value bytes (keys plus values) one rank may hold in the store; a rank's business
/// cards take a few KiB, so this leaves ample room and stops a runaway (or hostile) rank
/// from growing mpirun without bound.
pub const KVS_BYTES_PER_RANK: usize = 1 << 20;
/// Key-value bytes of the whole job.
pub const KVS_BYTES_MAX: usize = 64 << 20;
/// Longest text of a rank (an abort message) that mpirun prints, in characters.
pub const MESSAGE_MAX: usize = 1000;

/// `text` made safe to print on a terminal as part of one line: control characters (C0,
/// DEL, C1, which start escape sequences) and the bidirectional-override characters become
/// visible `\u{..}` escapes, a backslash is doubled, and past `max` characters the rest is
/// cut off with `...`.
pub fn printable(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max + 8));
    for (n, c) in text.chars().enumerate() {
        if n == max {
            out.push_str("...");
            break;
        }
        let bidi = matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        if c == '\\' {
            out.push_str("\\\\");
        } else if c.is_control() || bidi {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// A name-service request (MPI_Publish_name and friends, PMI-1 `publish_name`,
/// `unpublish_name`, `lookup_name`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NameOp {
    Publish {
        service: String,
        port: String,
    },
    /// `port` when the client names it (ours does; MPICH's does not).
    Unpublish {
        service: String,
        port: Option<String>,
    },
    Lookup {
        service: String,
    },
}

/// Something the launcher must act on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// The rank asked for new processes (PMI-1 `spawn`); the launcher starts them (see
    /// [`PmiServer::add_group`]) and answers with [`spawn_result`].
    Spawn { rank: usize, request: SpawnRequest },
    /// The rank asked the name service; the launcher answers with [`name_reply`].
    Name { rank: usize, op: NameOp },
    /// The rank called PMI abort (MPI_Abort).
    Abort {
        rank: usize,
        code: i32,
        message: Option<String>,
    },
    /// The rank sent something we cannot understand; the job cannot go on reliably.
    ProtocolError { rank: usize, detail: String },
}

#[derive(Debug, Default)]
struct RankState {
    /// The group (job) of this process: 0 for the processes mpirun started, then one per
    /// spawn request.
    group: usize,
    /// Its rank in that group.
    rank: usize,
    /// MPI_APPNUM: which application of its spawn request (0 in the first group).
    appnum: i32,
    /// A spawn request being read from this rank.
    spawn: SpawnCollector,
    initialized: bool,
    finalized: bool,
    in_barrier: bool,
    /// Key-value bytes this rank owns in the store.
    kvs_bytes: usize,
}

/// One group of processes with its own key-value space, barrier and ranks 0..size: the
/// job mpirun started, or the children of one spawn request (their own MPI_COMM_WORLD).
#[derive(Debug)]
struct Group {
    kvsname: String,
    size: usize,
    /// The slot of its rank 0 (slots number the processes of every group in a row).
    base: usize,
    /// Key → (value, the slot that wrote it last).
    kvs: HashMap<String, (String, usize)>,
    /// Key-value bytes of the whole store.
    kvs_bytes: usize,
    /// Reserved `PMI_*` attributes (e.g. `PMI_process_mapping`): readable, not writable.
    attrs: HashMap<String, String>,
    barrier_count: usize,
}

impl Group {
    fn new(kvsname: &str, size: usize, base: usize, process_mapping: &str) -> Group {
        let mut attrs = HashMap::new();
        attrs.insert(
            "PMI_process_mapping".to_string(),
            process_mapping.to_string(),
        );
        Group {
            kvsname: kvsname.to_string(),
            size,
            base,
            kvs: HashMap::new(),
            kvs_bytes: 0,
            attrs,
            barrier_count: 0,
        }
    }
}

/// The key-value spaces, barriers and per-process PMI state of a job and of the groups it
/// spawned. Processes are named by *slot*: the first job's ranks are slots 0..size, each
/// spawned group's follow (see [`PmiServer::add_group`]).
#[derive(Debug)]
pub struct PmiServer {
    groups: Vec<Group>,
    ranks: Vec<RankState>,
}

impl PmiServer {
    /// A server for a job of `size` ranks whose placement is `process_mapping`
    /// (`(vector,(first_node,node_count,ranks_per_node),...)`).
    pub fn new(kvsname: &str, size: usize, process_mapping: &str) -> PmiServer {
        PmiServer {
            groups: vec![Group::new(kvsname, size, 0, process_mapping)],
            ranks: (0..size)
                .map(|rank| RankState {
                    rank,
                    ..RankState::default()
                })
                .collect(),
        }
    }

    /// The size of the job mpirun started (group 0).
    pub fn size(&self) -> usize {
        self.groups[0].size
    }

    /// Processes of every group.
    pub fn slots(&self) -> usize {
        self.ranks.len()
    }

    pub fn kvsname(&self) -> &str {
        &self.groups[0].kvsname
    }

    /// The kvsname of every group (for cleaning up their shared-memory files).
    pub fn kvsnames(&self) -> impl Iterator<Item = &str> {
        self.groups.iter().map(|g| g.kvsname.as_str())
    }

    /// `slot`'s (group, rank in the group).
    pub fn group_rank(&self, slot: usize) -> (usize, usize) {
        (self.ranks[slot].group, self.ranks[slot].rank)
    }

    /// The slots of `slot`'s group.
    pub fn group_slots(&self, slot: usize) -> std::ops::Range<usize> {
        let g = &self.groups[self.ranks[slot].group];
        g.base..g.base + g.size
    }

    /// The slot of rank `rank` in `slot`'s group, if there is such a rank.
    pub fn peer_slot(&self, slot: usize, rank: usize) -> Option<usize> {
        let r = self.group_slots(slot);
        (rank < r.len()).then(|| r.start + rank)
    }

    /// How messages name `slot`: "rank 3" in the first job, "rank 1 of spawned job 2" in
    /// a spawned group.
    pub fn describe(&self, slot: usize) -> String {
        match self.ranks.get(slot) {
            Some(st) if st.group > 0 => format!("rank {} of spawned job {}", st.rank, st.group),
            Some(st) => format!("rank {}", st.rank),
            None => format!("slot {slot}"),
        }
    }

    /// A new group of `appnums.len()` processes (rank `r` of application `appnums[r]`)
    /// with its own key-value space named `kvsname`, holding `preput` before anyone starts.
    /// Returns the slot of its rank 0; its processes are the slots after it.
    pub fn add_group(
        &mut self,
        kvsname: &str,
        appnums: &[i32],
        process_mapping: &str,
        preput: &[(String, String)],
    ) -> Result<usize, String> {
        let base = self.ranks.len();
        let mut g = Group::new(kvsname, appnums.len(), base, process_mapping);
        let mut bytes = 0;
        for (k, v) in preput {
            if k.is_empty() || k.len() > KEYLEN_MAX || k.starts_with("PMI_") {
                return Err(format!("preput key {:?} refused", printable(k, 80)));
            }
            if v.len() > VALLEN_MAX {
                return Err(format!("preput value of {:?} too long", printable(k, 80)));
            }
            bytes += k.len() + v.len();
            if bytes > KVS_BYTES_PER_RANK {
                return Err("preput pairs too large".into());
            }
            if let Some((old, _)) = g.kvs.insert(k.clone(), (v.clone(), base)) {
                bytes -= k.len() + old.len();
            }
        }
        g.kvs_bytes = bytes;
        self.groups.push(g);
        let group = self.groups.len() - 1;
        self.ranks
            .extend(appnums.iter().enumerate().map(|(rank, &appnum)| RankState {
                group,
                rank,
                appnum,
                kvs_bytes: if rank == 0 { bytes } else { 0 },
                ..RankState::default()
            }));
        Ok(base)
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
        if self.ranks[rank].spawn.in_block() || line.trim_start().starts_with("mcmd=") {
            return self.spawn_line(rank, line);
        }
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
        if let Err(detail) = self.check_sequence(rank, &c.cmd) {
            return Some(Event::ProtocolError { rank, detail });
        }
        let mut reply = |c: Command| out.push((rank, c.to_line()));
        let (group, grank) = (self.ranks[rank].group, self.ranks[rank].rank);
        let size = self.groups[group].size;
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
                reply(Command::new("set").arg("size", size));
                reply(Command::new("set").arg("rank", grank));
                reply(Command::new("set").arg("debug", 0));
            }
            "get_maxes" => reply(
                Command::new("maxes")
                    .arg("kvsname_max", KVSNAME_MAX)
                    .arg("keylen_max", KEYLEN_MAX)
                    .arg("vallen_max", VALLEN_MAX),
            ),
            "get_appnum" => reply(Command::new("appnum").arg("appnum", self.ranks[rank].appnum)),
            "get_my_kvsname" => {
                reply(Command::new("my_kvsname").arg("kvsname", &self.groups[group].kvsname))
            }
            "get_universe_size" => reply(Command::new("universe_size").arg("size", size)),
            "put" => {
                let result = self.put(rank, &c);
                reply(match result {
                    Ok(()) => Command::new("put_result")
                        .arg("rc", 0)
                        .arg("msg", "success"),
                    Err(msg) => Command::new("put_result").arg("rc", -1).arg("msg", msg),
                });
            }
            "get" => {
                let r = match self.get(group, &c) {
                    Ok(v) => Command::new("get_result")
                        .arg("rc", 0)
                        .arg("msg", "success")
                        .arg("value", v),
                    Err(msg) => Command::new("get_result").arg("rc", -1).arg("msg", msg),
                };
                reply(r);
            }
            "barrier_in" => {
                // check_sequence refused a second barrier_in of the same barrier.
                self.ranks[rank].in_barrier = true;
                let g = &mut self.groups[group];
                g.barrier_count += 1;
                if g.barrier_count == g.size {
                    g.barrier_count = 0;
                    for r in g.base..g.base + g.size {
                        self.ranks[r].in_barrier = false;
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
            "publish_name" | "unpublish_name" | "lookup_name" => {
                let service = c.get("service").unwrap_or("").to_string();
                let port = c.get("port").map(str::to_string);
                let op = match (c.cmd.as_str(), port) {
                    ("publish_name", Some(port)) => NameOp::Publish { service, port },
                    ("publish_name", None) => {
                        reply(name_reply(&c.cmd, Err(("fail", "missing port".into()))));
                        return None;
                    }
                    ("unpublish_name", port) => NameOp::Unpublish { service, port },
                    _ => NameOp::Lookup { service },
                };
                return Some(Event::Name { rank, op });
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

    /// Whether `cmd` may come from `rank` now. A rank starts with `init` (`initack` first
    /// for PMI_PORT clients), enters each barrier once, and after `finalize` may only abort:
    /// a stray `barrier_in` would otherwise count towards a barrier the others have not
    /// reached and put every later barrier out of step.
    fn check_sequence(&self, rank: usize, cmd: &str) -> Result<(), String> {
        let st = &self.ranks[rank];
        match cmd {
            "abort" | "initack" => Ok(()),
            "init" if st.initialized => Err("cmd=init sent twice".into()),
            "init" => Ok(()),
            _ if !st.initialized => Err(format!("cmd={} before cmd=init", printable(cmd, 40))),
            _ if st.finalized => Err(format!("cmd={} after cmd=finalize", printable(cmd, 40))),
            "barrier_in" if st.in_barrier => {
                Err("cmd=barrier_in while already waiting in the barrier".into())
            }
            _ => Ok(()),
        }
    }

    /// A line of a spawn request (`mcmd=spawn` ... `endcmd`) from `rank`.
    fn spawn_line(&mut self, rank: usize, line: &str) -> Option<Event> {
        if !self.ranks[rank].spawn.busy() {
            if let Err(detail) = self.check_sequence(rank, "spawn") {
                return Some(Event::ProtocolError { rank, detail });
            }
        }
        match self.ranks[rank].spawn.take(line) {
            Ok(Collected::More) => None,
            Ok(Collected::Done(request)) => Some(Event::Spawn { rank, request }),
            Err(detail) => Some(Event::ProtocolError { rank, detail }),
        }
    }

    fn check_kvsname(&self, group: usize, c: &Command) -> Result<(), String> {
        match c.get("kvsname") {
            Some(k) if k != self.groups[group].kvsname => Err(format!("unknown_kvsname_{k}")),
            _ => Ok(()),
        }
    }

    fn put(&mut self, rank: usize, c: &Command) -> Result<(), String> {
        let group = self.ranks[rank].group;
        self.check_kvsname(group, c)?;
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
        let bytes = key.len() + value.len();
        // An overwrite gives back the old entry's bytes (to whichever rank wrote it).
        let g = &mut self.groups[group];
        let old = g
            .kvs
            .get(key)
            .map(|(v, owner)| (key.len() + v.len(), *owner));
        let (freed_total, freed_mine) = match old {
            Some((b, owner)) => (b, if owner == rank { b } else { 0 }),
            None => (0, 0),
        };
        if self.ranks[rank].kvs_bytes - freed_mine + bytes > KVS_BYTES_PER_RANK {
            return Err("kvs_full_for_this_rank".to_string());
        }
        if g.kvs_bytes - freed_total + bytes > KVS_BYTES_MAX {
            return Err("kvs_full".to_string());
        }
        if let Some((b, owner)) = old {
            self.ranks[owner].kvs_bytes -= b;
            g.kvs_bytes -= b;
        }
        self.ranks[rank].kvs_bytes += bytes;
        g.kvs_bytes += bytes;
        g.kvs.insert(key.to_string(), (value.to_string(), rank));
        Ok(())
    }

    fn get(&self, group: usize, c: &Command) -> Result<String, String> {
        self.check_kvsname(group, c)?;
        let key = c.get("key").ok_or("missing_key")?;
        let g = &self.groups[group];
        g.attrs
            .get(key)
            .or_else(|| g.kvs.get(key).map(|(v, _)| v))
            .cloned()
            .ok_or_else(|| "key_not_found".to_string())
    }
}

/// The answer to a spawn request: `Ok` once the processes started, else why not.
pub fn spawn_result(r: Result<(), String>) -> String {
    match r {
        Ok(()) => Command::new("spawn_result").arg("rc", 0).to_line(),
        Err(msg) => Command::new("spawn_result")
            .arg("rc", -1)
            .arg("msg", msg)
            .to_line(),
    }
}

/// The answer to name-service command `cmd` (`publish_name` ...): `Ok(port)` (the port
/// for a lookup), or `Err((info, message))` where `info` is what MPICH's client reads
/// (`fail`; ours maps `notfound`/`exists` to MPI error classes).
pub fn name_reply(cmd: &str, r: Result<Option<String>, (&str, String)>) -> Command {
    let name = format!("{}_result", cmd.trim_end_matches("_name"));
    match r {
        Ok(port) => {
            let c = Command::new(name).arg("rc", 0).arg("info", "ok");
            match port {
                Some(p) => c.arg("port", p),
                None => c,
            }
        }
        Err((info, msg)) => Command::new(name)
            .arg("rc", -1)
            .arg("info", info)
            .arg("msg", msg),
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
        let r = one(&mut s, 1, "cmd=init pmi_version=2 pmi_subversion=0");
        assert_eq!(r.get_int("rc"), Some(-1));
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
        let r = one(&mut s, 0, "cmd=spawn_something x=1");
        assert_eq!(
            (r.cmd.as_str(), r.get_int("rc")),
            ("spawn_something_result", Some(-1))
        );
        let r = one(&mut s, 0, "cmd=finalize");
        assert_eq!(r.cmd, "finalize_ack");
        assert!(s.finalized(0));
    }

    fn protocol_error(s: &mut PmiServer, rank: usize, line: &str) -> String {
        let mut out = Vec::new();
        match s.handle_line(rank, line, &mut out) {
            Some(Event::ProtocolError { rank: r, detail }) if r == rank => {
                assert!(out.is_empty(), "{line}: no reply to a refused command");
                detail
            }
            other => panic!("{line}: expected a protocol error, got {other:?}"),
        }
    }

    /// Issue 14, item 8: a stray barrier_in before init (or a second one in the same
    /// barrier, or anything after finalize) is a protocol error, not a count that puts
    /// every later barrier out of step.
    #[test]
    fn out_of_sequence_commands_are_refused() {
        let mut s = PmiServer::new("k", 2, "(vector,(0,1,2))");
        let d = protocol_error(&mut s, 1, "cmd=barrier_in");
        assert!(d.contains("barrier_in before cmd=init"), "{d}");
        protocol_error(&mut s, 1, "cmd=put key=a value=b");
        protocol_error(&mut s, 1, "cmd=finalize");
        init_all(&mut s, 2);
        protocol_error(&mut s, 0, "cmd=init pmi_version=1 pmi_subversion=1");
        let mut out = Vec::new();
        assert_eq!(s.handle_line(0, "cmd=barrier_in", &mut out), None);
        let d = protocol_error(&mut s, 0, "cmd=barrier_in");
        assert!(d.contains("already waiting"), "{d}");
        // The barrier still completes once, for both ranks, when rank 1 enters.
        assert_eq!(s.handle_line(1, "cmd=barrier_in", &mut out), None);
        assert_eq!(out.len(), 2);
        one(&mut s, 1, "cmd=finalize");
        let d = protocol_error(&mut s, 1, "cmd=barrier_in");
        assert!(d.contains("after cmd=finalize"), "{d}");
        // Abort is allowed at any point.
        assert!(matches!(
            s.handle_line(1, "cmd=abort exitcode=1", &mut out),
            Some(Event::Abort { .. })
        ));
        let mut fresh = PmiServer::new("k", 1, "(vector,(0,1,1))");
        assert!(matches!(
            fresh.handle_line(0, "cmd=abort exitcode=1", &mut out),
            Some(Event::Abort { .. })
        ));
    }

    /// Issue 14, item 8: the store is bounded per rank and in total; overwrites are
    /// charged only the difference, so a rank rewriting one key never fills up.
    #[test]
    fn key_value_store_is_bounded() {
        let mut s = PmiServer::new("k", 2, "(vector,(0,1,2))");
        init_all(&mut s, 2);
        let value = "v".repeat(VALLEN_MAX);
        let mut stored = 0;
        let mut refused = None;
        for i in 0..2 * KVS_BYTES_PER_RANK / VALLEN_MAX {
            let r = one(
                &mut s,
                0,
                &format!("cmd=put kvsname=k key=k{i} value={value}"),
            );
            if r.get_int("rc") == Some(0) {
                stored += 1;
            } else {
                refused = Some(r.get("msg").unwrap_or("").to_string());
                break;
            }
        }
        assert_eq!(refused.as_deref(), Some("kvs_full_for_this_rank"));
        assert!(
            stored > 900 && stored <= KVS_BYTES_PER_RANK / VALLEN_MAX,
            "{stored}"
        );
        assert!(s.ranks[0].kvs_bytes <= KVS_BYTES_PER_RANK);
        // Rewriting an existing key still works; another rank still has its own room.
        let r = one(&mut s, 0, "cmd=put kvsname=k key=k0 value=short");
        assert_eq!(r.get_int("rc"), Some(0));
        let r = one(&mut s, 1, "cmd=put kvsname=k key=mine value=x");
        assert_eq!(r.get_int("rc"), Some(0));
        // Rank 1 overwriting rank 0's key takes the entry over.
        let before = s.ranks[0].kvs_bytes;
        let r = one(&mut s, 1, "cmd=put kvsname=k key=k1 value=y");
        assert_eq!(r.get_int("rc"), Some(0));
        assert_eq!(s.ranks[0].kvs_bytes, before - 2 - VALLEN_MAX);
        assert_eq!(
            s.groups[0].kvs_bytes,
            s.ranks[0].kvs_bytes + s.ranks[1].kvs_bytes
        );
        // The job-wide bound: many ranks each within their own limit.
        let n = KVS_BYTES_MAX / KVS_BYTES_PER_RANK + 2;
        let mut big = PmiServer::new("k", n, "(vector,(0,1,1))");
        init_all(&mut big, n);
        let mut full = false;
        'ranks: for r in 0..n {
            for i in 0..KVS_BYTES_PER_RANK / (VALLEN_MAX + 8) {
                let line = format!("cmd=put kvsname=k key=r{r}k{i} value={value}");
                if one(&mut big, r, &line).get("msg") == Some("kvs_full") {
                    full = true;
                    break 'ranks;
                }
            }
        }
        assert!(full && big.groups[0].kvs_bytes <= KVS_BYTES_MAX);
    }

    #[test]
    fn printable_escapes_terminal_controls() {
        assert_eq!(printable("plain text", 100), "plain text");
        assert_eq!(
            printable("\x1b]0;owned\x07\x1b[2Jbye\r\n\u{9b}31m", 100),
            "\\u{1b}]0;owned\\u{7}\\u{1b}[2Jbye\\u{d}\\u{a}\\u{9b}31m"
        );
        assert_eq!(printable("a\u{202e}b", 100), "a\\u{202e}b");
        assert_eq!(printable("a\\b", 100), "a\\\\b");
        assert_eq!(printable("abcdef", 3), "abc...");
        assert_eq!(printable("日本語", 10), "日本語");
    }

    fn init_all(s: &mut PmiServer, n: usize) {
        for r in 0..n {
            one(s, r, "cmd=init pmi_version=1 pmi_subversion=1");
        }
    }

    #[test]
    fn kvs_put_get_and_reserved_keys() {
        let mut s = PmiServer::new("kvs_1", 2, "(vector,(0,1,2))");
        init_all(&mut s, 2);
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
        init_all(&mut s, 3);
        let mut out = Vec::new();
        s.handle_line(0, "cmd=barrier_in", &mut out);
        s.handle_line(2, "cmd=barrier_in", &mut out);
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

    /// Issue 20: a PMI-1 spawn request becomes an event; the new group has its own
    /// key-value space (holding the preput pairs), ranks, appnums and barrier.
    #[test]
    fn spawn_requests_make_groups_of_their_own() {
        let mut s = PmiServer::new("k", 2, "(vector,(0,1,2))");
        init_all(&mut s, 2);
        let mut out = Vec::new();
        let block = "mcmd=spawn\nnprocs=1\nexecname=a\ntotspawns=2\nspawnssofar=1\nargcnt=0\n\
                     preput_num=1\npreput_key_0=PARENT_ROOT_PORT_NAME\npreput_val_0=p:1\n\
                     info_num=0\nendcmd\nmcmd=spawn\nnprocs=2\nexecname=b\ntotspawns=2\n\
                     spawnssofar=2\nargcnt=1\narg1=x y\npreput_num=1\n\
                     preput_key_0=PARENT_ROOT_PORT_NAME\npreput_val_0=p:1\ninfo_num=0\nendcmd";
        let mut event = None;
        for l in block.lines() {
            assert!(event.is_none());
            event = s.handle_line(1, l, &mut out);
        }
        assert!(out.is_empty(), "{out:?}");
        let Some(Event::Spawn { rank: 1, request }) = event else {
            panic!("{event:?}");
        };
        assert_eq!(request.total_procs(), 3);
        assert_eq!(request.apps[1].args, vec!["x y"]);
        let base = s
            .add_group("k_s1", &[0, 1, 1], "(vector,(0,1,3))", &request.preput)
            .unwrap();
        assert_eq!((base, s.slots()), (2, 5));
        assert_eq!(s.group_rank(4), (1, 2));
        assert_eq!(s.peer_slot(3, 2), Some(4));
        assert_eq!(s.peer_slot(3, 3), None);
        assert_eq!(s.describe(3), "rank 1 of spawned job 1");
        for slot in 2..5 {
            one(&mut s, slot, "cmd=init pmi_version=1 pmi_subversion=1");
        }
        let r = one(&mut s, 3, "cmd=get kvsname=k_s1 key=PARENT_ROOT_PORT_NAME");
        assert_eq!(r.get("value"), Some("p:1"));
        assert_eq!(one(&mut s, 3, "cmd=get_appnum").get_int("appnum"), Some(1));
        assert_eq!(one(&mut s, 2, "cmd=get_appnum").get_int("appnum"), Some(0));
        assert_eq!(
            one(&mut s, 4, "cmd=get_my_kvsname").get("kvsname"),
            Some("k_s1")
        );
        assert_eq!(
            one(&mut s, 4, "cmd=get_universe_size").get_int("size"),
            Some(3)
        );
        // The parents' store is not the children's.
        let r = one(&mut s, 0, "cmd=get kvsname=k key=PARENT_ROOT_PORT_NAME");
        assert_eq!(r.get_int("rc"), Some(-1));
        let r = one(&mut s, 0, "cmd=get kvsname=k_s1 key=PARENT_ROOT_PORT_NAME");
        assert_eq!(r.get_int("rc"), Some(-1));
        // Barriers are per group: the parents' completes without the children.
        out.clear();
        s.handle_line(0, "cmd=barrier_in", &mut out);
        s.handle_line(2, "cmd=barrier_in", &mut out);
        s.handle_line(1, "cmd=barrier_in", &mut out);
        let to: Vec<usize> = out.iter().map(|(r, _)| *r).collect();
        assert_eq!(to, vec![0, 1]);
        out.clear();
        s.handle_line(3, "cmd=barrier_in", &mut out);
        s.handle_line(4, "cmd=barrier_in", &mut out);
        let to: Vec<usize> = out.iter().map(|(r, _)| *r).collect();
        assert_eq!(to, vec![2, 3, 4]);
        // Preput keys are checked.
        let bad = [("PMI_x".to_string(), "v".to_string())];
        assert!(s.add_group("k_s2", &[0], "", &bad).is_err());
        assert_eq!(s.slots(), 5);
        // A malformed request, or one before init, is a protocol error, not a crash.
        let mut fresh = PmiServer::new("k", 1, "(vector,(0,1,1))");
        let d = protocol_error(&mut fresh, 0, "mcmd=spawn");
        assert!(d.contains("before cmd=init"), "{d}");
        init_all(&mut fresh, 1);
        assert_eq!(fresh.handle_line(0, "mcmd=spawn", &mut out), None);
        assert_eq!(fresh.handle_line(0, "nprocs=many", &mut out), None);
        let d = protocol_error(&mut fresh, 0, "endcmd");
        assert!(d.contains("nprocs"), "{d}");
        // ...after which the rank may send ordinary commands again.
        assert_eq!(
            one(&mut fresh, 0, "cmd=get_appnum").get_int("appnum"),
            Some(0)
        );
    }

    #[test]
    fn name_service_commands_are_events_and_replies_are_lines() {
        let mut s = PmiServer::new("k", 1, "(vector,(0,1,1))");
        init_all(&mut s, 1);
        let mut out = Vec::new();
        assert_eq!(
            s.handle_line(0, "cmd=publish_name service=svc port=tsunagi:1", &mut out),
            Some(Event::Name {
                rank: 0,
                op: NameOp::Publish {
                    service: "svc".into(),
                    port: "tsunagi:1".into()
                }
            })
        );
        assert_eq!(
            s.handle_line(0, "cmd=unpublish_name service=svc", &mut out),
            Some(Event::Name {
                rank: 0,
                op: NameOp::Unpublish {
                    service: "svc".into(),
                    port: None
                }
            })
        );
        assert!(matches!(
            s.handle_line(0, "cmd=lookup_name service=svc", &mut out),
            Some(Event::Name {
                op: NameOp::Lookup { .. },
                ..
            })
        ));
        assert_eq!(
            s.handle_line(0, "cmd=publish_name service=svc", &mut out),
            None
        );
        let r = wire::parse(&out[0].1).unwrap();
        assert_eq!(
            (r.cmd.as_str(), r.get("info")),
            ("publish_result", Some("fail"))
        );
        let r = name_reply("lookup_name", Ok(Some("p".into())));
        assert_eq!(
            (r.cmd.as_str(), r.get("info"), r.get("port")),
            ("lookup_result", Some("ok"), Some("p"))
        );
        let line = spawn_result(Err("no such program".into()));
        let r = wire::parse(&line).unwrap();
        assert_eq!(
            (r.cmd.as_str(), r.get_int("rc")),
            ("spawn_result", Some(-1))
        );
        assert_eq!(r.get("msg"), Some("no such program"));
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
