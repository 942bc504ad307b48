//! The IMPI server as a state machine without I/O: connection events and bytes in,
//! bytes to send, connections to close and the job's outcome out.
//!
//! The server only collects each client's opaque start-up data and hands it back to all
//! in client-rank order: AUTH (NONE or KEY), IMPI (ranks; answered with the client count
//! once all joined), COLL per label (answered once every client contributed, or moved on
//! to DONE without it: the mask says who did), DONE (answered once all are done), FINI
//! (never answered; the job is over when every client sent it). A client lost after it
//! joined and before FINI, or one breaking the protocol, fails the job. A connection that
//! fails authentication or never joins is only closed, so a stray connection cannot end a
//! job.
//!
//! The socket driver is `tsunagi-impi-server` (`src/bin/`).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;

use crate::startup::{
    ClientExpect, ClientMsg, ServerMsg, AUTH_KEY, AUTH_KEY_BIT, AUTH_NONE, AUTH_NONE_BIT,
    MAX_CLIENTS,
};

/// A connection, numbered by the driver.
pub type ConnId = u64;

/// Which authentication methods the server accepts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthPolicy {
    /// Accept clients that offer NONE.
    pub none: bool,
    /// Accept clients that offer KEY and present this key.
    pub key: Option<u64>,
}

impl AuthPolicy {
    /// The policy from the environment, as IMPI implementations read it: `IMPI_AUTH_KEY`
    /// (a decimal 64-bit key) enables KEY; `IMPI_AUTH_NONE` (any value) enables NONE; with
    /// neither set, NONE.
    pub fn from_env_values(auth_key: Option<&str>, auth_none: bool) -> Result<AuthPolicy, String> {
        let key = match auth_key {
            Some(s) => Some(parse_key(s)?),
            None => None,
        };
        Ok(AuthPolicy {
            none: auth_none || key.is_none(),
            key,
        })
    }
}

/// Parse an `IMPI_AUTH_KEY` value: a decimal integer, signed (as C's `atoll` reads it,
/// two's complement on the wire) or unsigned 64-bit.
pub fn parse_key(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if let Ok(v) = t.parse::<u64>() {
        return Ok(v);
    }
    if let Ok(v) = t.parse::<i64>() {
        return Ok(v as u64);
    }
    Err(format!(
        "IMPI_AUTH_KEY: {s:?} is not a decimal 64-bit integer"
    ))
}

/// Server configuration.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Number of clients in the job (1..=32).
    pub nclients: u32,
    /// Accepted authentication.
    pub auth: AuthPolicy,
}

/// What the driver must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// Write these bytes to the connection.
    Send(ConnId, Vec<u8>),
    /// Close the connection (after writing what was queued before).
    Close(ConnId),
    /// A line for the operator (stderr): a rejected connection, a client's progress.
    Note(String),
    /// Every client sent FINI: exit 0.
    Finished,
    /// The job failed: report the message and exit non-zero.
    Failed(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Connected, AUTH not yet received.
    Auth,
    /// Chose KEY, waiting for the 8-byte key.
    Key,
    /// Authenticated, IMPI (rank) not yet received.
    Join,
    /// Sent IMPI with its rank; COLL and DONE may come.
    Joined,
    /// Sent DONE.
    Done,
    /// Sent FINI.
    Fini,
}

#[derive(Debug)]
struct Conn {
    phase: Phase,
    buf: Vec<u8>,
    rank: Option<u32>,
}

/// One label being collected.
#[derive(Debug, Default)]
struct LabelCollect {
    payloads: BTreeMap<u32, Vec<u8>>,
    answered: bool,
}

/// The server.
#[derive(Debug)]
pub struct Server {
    cfg: ServerConfig,
    conns: HashMap<ConnId, Conn>,
    /// Rank → connection, for joined clients.
    ranks: BTreeMap<u32, ConnId>,
    impi_answered: bool,
    /// Labels in the order first seen.
    labels: Vec<(i32, LabelCollect)>,
    done: u32,
    done_answered: bool,
    fini: u32,
    over: bool,
    verbose: bool,
    out: VecDeque<Output>,
}

/// Why a configuration is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

impl Server {
    /// A server for `cfg.nclients` clients.
    pub fn new(cfg: ServerConfig) -> Result<Server, ConfigError> {
        if cfg.nclients == 0 || cfg.nclients > MAX_CLIENTS {
            return Err(ConfigError(format!(
                "-server {}: the number of clients must be 1..={MAX_CLIENTS} (client_mask is 32 bits)",
                cfg.nclients
            )));
        }
        if !cfg.auth.none && cfg.auth.key.is_none() {
            return Err(ConfigError(
                "no authentication method accepted (neither NONE nor a KEY)".into(),
            ));
        }
        Ok(Server {
            cfg,
            conns: HashMap::new(),
            ranks: BTreeMap::new(),
            impi_answered: false,
            labels: Vec::new(),
            done: 0,
            done_answered: false,
            fini: 0,
            over: false,
            verbose: false,
            out: VecDeque::new(),
        })
    }

    /// Report every command received as an [`Output::Note`] (for diagnosing a client).
    pub fn set_verbose(&mut self, on: bool) {
        self.verbose = on;
    }

    /// Whether the job ended (finished or failed); the driver stops after draining output.
    pub fn is_over(&self) -> bool {
        self.over
    }

    /// Number of clients that have joined (sent IMPI).
    pub fn joined(&self) -> usize {
        self.ranks.len()
    }

    /// The next thing for the driver to do.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    /// A new connection was accepted.
    pub fn connected(&mut self, conn: ConnId) {
        if self.over {
            self.out.push_back(Output::Close(conn));
            return;
        }
        self.conns.insert(
            conn,
            Conn {
                phase: Phase::Auth,
                buf: Vec::new(),
                rank: None,
            },
        );
    }

    /// Bytes arrived on a connection.
    pub fn received(&mut self, conn: ConnId, bytes: &[u8]) {
        if self.over {
            return;
        }
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.buf.extend_from_slice(bytes);
        loop {
            let Some(c) = self.conns.get_mut(&conn) else {
                return;
            };
            let expect = if c.phase == Phase::Key {
                ClientExpect::Key
            } else {
                ClientExpect::Command
            };
            match ClientMsg::decode(&c.buf, expect) {
                Ok(None) => return,
                Ok(Some((msg, used))) => {
                    c.buf.drain(..used);
                    self.handle(conn, msg);
                    if self.over {
                        return;
                    }
                }
                Err(e) => {
                    self.protocol_error(conn, &e.to_string());
                    return;
                }
            }
        }
    }

    /// The connection was closed by the peer (or broke).
    pub fn closed(&mut self, conn: ConnId) {
        let Some(c) = self.conns.remove(&conn) else {
            return;
        };
        if self.over {
            return;
        }
        match (c.rank, c.phase) {
            (Some(_), Phase::Fini) => {}
            (Some(rank), phase) => {
                let when = match phase {
                    Phase::Joined => "during start-up",
                    _ => "after start-up",
                };
                self.fail(format!("client {rank} lost {when}, before it sent FINI"));
            }
            (None, _) => self.note(format!("connection {conn} closed before it joined")),
        }
    }

    fn note(&mut self, s: String) {
        self.out.push_back(Output::Note(s));
    }

    fn fail(&mut self, msg: String) {
        self.over = true;
        self.out.push_back(Output::Failed(msg));
        let mut ids: Vec<ConnId> = self.conns.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            self.out.push_back(Output::Close(id));
        }
    }

    /// A protocol error: fatal for the job if the client had joined, else the connection
    /// is only dropped.
    fn protocol_error(&mut self, conn: ConnId, what: &str) {
        let rank = self.conns.get(&conn).and_then(|c| c.rank);
        match rank {
            Some(r) => self.fail(format!("client {r}: {what}")),
            None => {
                self.conns.remove(&conn);
                self.note(format!("connection {conn} rejected: {what}"));
                self.out.push_back(Output::Close(conn));
            }
        }
    }

    fn send(&mut self, conn: ConnId, msg: ServerMsg) {
        self.out.push_back(Output::Send(conn, msg.encode()));
    }

    fn handle(&mut self, conn: ConnId, msg: ClientMsg) {
        let phase = self.conns[&conn].phase;
        if self.verbose {
            let who = match self.conns[&conn].rank {
                Some(r) => format!("client {r}"),
                None => format!("connection {conn}"),
            };
            let what = match &msg {
                ClientMsg::Coll { label, data } => {
                    format!("COLL label 0x{label:x}, {} bytes", data.len())
                }
                ClientMsg::Key(_) => "KEY (value not shown)".to_string(),
                m => format!("{m:?}"),
            };
            self.note(format!("{who}: {what}"));
        }
        match (phase, msg) {
            (Phase::Auth, ClientMsg::Auth { mask }) => {
                if self.cfg.auth.key.is_some() && mask & AUTH_KEY_BIT != 0 {
                    self.conns.get_mut(&conn).expect("conn").phase = Phase::Key;
                    self.send(
                        conn,
                        ServerMsg::AuthChoice {
                            which: AUTH_KEY,
                            len: 0,
                        },
                    );
                } else if self.cfg.auth.none && mask & AUTH_NONE_BIT != 0 {
                    self.conns.get_mut(&conn).expect("conn").phase = Phase::Join;
                    self.send(
                        conn,
                        ServerMsg::AuthChoice {
                            which: AUTH_NONE,
                            len: 0,
                        },
                    );
                } else {
                    let offered = describe_mask(mask);
                    self.protocol_error(
                        conn,
                        &format!("AUTH: no common method (client offers {offered})"),
                    );
                }
            }
            (Phase::Key, ClientMsg::Key(k)) => {
                if Some(k) == self.cfg.auth.key {
                    self.conns.get_mut(&conn).expect("conn").phase = Phase::Join;
                } else {
                    self.protocol_error(conn, "AUTH: wrong key");
                }
            }
            (Phase::Join, ClientMsg::Impi { rank }) => {
                if rank < 0 || rank as u32 >= self.cfg.nclients {
                    let n = self.cfg.nclients;
                    self.protocol_error(
                        conn,
                        &format!("IMPI: client rank {rank} out of range 0..{n}"),
                    );
                    return;
                }
                let rank = rank as u32;
                if self.ranks.contains_key(&rank) {
                    self.fail(format!("IMPI: two clients claim rank {rank}"));
                    return;
                }
                let c = self.conns.get_mut(&conn).expect("conn");
                c.rank = Some(rank);
                c.phase = Phase::Joined;
                self.ranks.insert(rank, conn);
                self.note(format!(
                    "client {rank} joined ({} of {})",
                    self.ranks.len(),
                    self.cfg.nclients
                ));
                if self.ranks.len() as u32 == self.cfg.nclients {
                    self.impi_answered = true;
                    let n = self.cfg.nclients as i32;
                    let conns: Vec<ConnId> = self.ranks.values().copied().collect();
                    for c in conns {
                        self.send(c, ServerMsg::Impi { nclients: n });
                    }
                }
            }
            (Phase::Joined, ClientMsg::Coll { label, data }) if self.impi_answered => {
                let rank = self.conns[&conn].rank.expect("joined");
                let idx = match self.labels.iter().position(|(l, _)| *l == label) {
                    Some(i) => i,
                    None => {
                        self.labels.push((label, LabelCollect::default()));
                        self.labels.len() - 1
                    }
                };
                let lc = &mut self.labels[idx].1;
                if lc.answered || lc.payloads.contains_key(&rank) {
                    self.fail(format!("client {rank}: COLL label 0x{label:x} sent twice"));
                    return;
                }
                lc.payloads.insert(rank, data);
                self.try_answer_labels();
            }
            (Phase::Joined, ClientMsg::Done) if self.impi_answered => {
                self.conns.get_mut(&conn).expect("conn").phase = Phase::Done;
                self.done += 1;
                // Labels this client skipped are now answered without it.
                self.try_answer_labels();
                if self.done == self.cfg.nclients {
                    self.done_answered = true;
                    let conns: Vec<ConnId> = self.ranks.values().copied().collect();
                    for c in conns {
                        self.send(c, ServerMsg::Done);
                    }
                }
            }
            (Phase::Done, ClientMsg::Fini) if self.done_answered => {
                let rank = self.conns[&conn].rank.expect("joined");
                self.conns.get_mut(&conn).expect("conn").phase = Phase::Fini;
                self.fini += 1;
                self.note(format!(
                    "client {rank} sent FINI ({} of {})",
                    self.fini, self.cfg.nclients
                ));
                if self.fini == self.cfg.nclients {
                    self.over = true;
                    self.out.push_back(Output::Finished);
                }
            }
            (phase, msg) => {
                let what = match msg {
                    ClientMsg::Auth { .. } => "AUTH",
                    ClientMsg::Key(_) => "key",
                    ClientMsg::Impi { .. } => "IMPI",
                    ClientMsg::Coll { .. } => "COLL",
                    ClientMsg::Done => "DONE",
                    ClientMsg::Fini => "FINI",
                };
                let state = match phase {
                    Phase::Auth => "before AUTH",
                    Phase::Key => "while the key was expected",
                    Phase::Join => "before IMPI",
                    Phase::Joined if !self.impi_answered => "before every client joined",
                    Phase::Joined => "before DONE",
                    Phase::Done if !self.done_answered => "before every client was done",
                    Phase::Done => "after DONE",
                    Phase::Fini => "after FINI",
                };
                self.protocol_error(conn, &format!("unexpected {what} {state}"));
            }
        }
    }

    /// Answer every label that all clients either contributed to or went past (DONE).
    /// Answers go out in the order labels were first seen, which is every client's order.
    fn try_answer_labels(&mut self) {
        let n = self.cfg.nclients;
        let past: Vec<u32> = self
            .ranks
            .iter()
            .filter(|(_, c)| self.conns.get(c).is_some_and(|c| c.phase != Phase::Joined))
            .map(|(r, _)| *r)
            .collect();
        let mut sends = Vec::new();
        for (label, lc) in self.labels.iter_mut() {
            if lc.answered {
                continue;
            }
            let complete = (0..n).all(|r| lc.payloads.contains_key(&r) || past.contains(&r));
            if !complete {
                continue;
            }
            lc.answered = true;
            let mut mask = 0u32;
            let mut data = Vec::new();
            for (r, p) in std::mem::take(&mut lc.payloads) {
                mask |= 1 << r;
                data.extend_from_slice(&p);
            }
            let msg = ServerMsg::Coll {
                label: *label,
                mask,
                data,
            };
            // Clients that went past this label do not wait for it.
            for (r, c) in &self.ranks {
                if mask & (1 << r) != 0 {
                    sends.push((*c, msg.clone()));
                }
            }
        }
        for (c, m) in sends {
            self.send(c, m);
        }
    }
}

fn describe_mask(mask: u32) -> String {
    let mut v = Vec::new();
    if mask & AUTH_NONE_BIT != 0 {
        v.push("NONE".to_string());
    }
    if mask & AUTH_KEY_BIT != 0 {
        v.push("KEY".to_string());
    }
    if mask & !(AUTH_NONE_BIT | AUTH_KEY_BIT) != 0 {
        v.push(format!(
            "unknown bits 0x{:x}",
            mask & !(AUTH_NONE_BIT | AUTH_KEY_BIT)
        ));
    }
    if v.is_empty() {
        "nothing".into()
    } else {
        v.join(", ")
    }
}
