//! The client side of IMPI start-up as a state machine without I/O: AUTH (NONE or KEY),
//! IMPI with our client rank, one COLL per label in order (waiting for each answer, as
//! LAM does), DONE; then [`ClientStartup::fini`] when the job is over. The answers make the
//! job's parameters ([`crate::params::JobParams`]).

use std::collections::BTreeMap;
use std::fmt;

use crate::params::{JobParams, ParamsError};
use crate::startup::{
    ClientMsg, ServerExpect, ServerMsg, StartupError, AUTH_KEY, AUTH_KEY_BIT, AUTH_NONE,
    AUTH_NONE_BIT,
};

/// What this client offers and sends.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// Our client rank.
    pub rank: u32,
    /// Offer NONE (`IMPI_AUTH_NONE`).
    pub auth_none: bool,
    /// Offer KEY with this key (`IMPI_AUTH_KEY`).
    pub auth_key: Option<u64>,
    /// Our payload per label, in the order to send them.
    pub payloads: Vec<(i32, Vec<u8>)>,
}

/// Why start-up failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientError {
    /// The server's bytes are not start-up messages.
    Decode(StartupError),
    /// The server's messages break the protocol.
    Protocol(String),
    /// The answers do not make a job.
    Params(ParamsError),
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Decode(e) => write!(f, "{e}"),
            ClientError::Protocol(s) => write!(f, "IMPI start-up: {s}"),
            ClientError::Params(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ClientError {}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    AuthChoice,
    Impi,
    Coll(usize),
    Done,
    Finished,
}

/// One client's start-up.
#[derive(Debug)]
pub struct ClientStartup {
    cfg: ClientConfig,
    phase: Phase,
    buf: Vec<u8>,
    out: Vec<u8>,
    nclients: u32,
    answers: BTreeMap<i32, (u32, Vec<u8>)>,
}

impl ClientStartup {
    /// Start: the AUTH command is ready to [`transmit`](ClientStartup::transmit).
    pub fn new(cfg: ClientConfig) -> Result<ClientStartup, ClientError> {
        let mask = if cfg.auth_none { AUTH_NONE_BIT } else { 0 }
            | if cfg.auth_key.is_some() {
                AUTH_KEY_BIT
            } else {
                0
            };
        if mask == 0 {
            return Err(ClientError::Protocol(
                "no authentication method: set IMPI_AUTH_NONE or IMPI_AUTH_KEY".into(),
            ));
        }
        let out = ClientMsg::Auth { mask }.encode();
        Ok(ClientStartup {
            cfg,
            phase: Phase::AuthChoice,
            buf: Vec::new(),
            out,
            nclients: 0,
            answers: BTreeMap::new(),
        })
    }

    /// Bytes to write to the server.
    pub fn transmit(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }

    /// Whether start-up is complete (the server answered DONE).
    pub fn is_done(&self) -> bool {
        matches!(self.phase, Phase::Done | Phase::Finished)
    }

    /// The number of clients (known after IMPI).
    pub fn nclients(&self) -> u32 {
        self.nclients
    }

    /// The raw answers per label (label → (client mask, data)).
    pub fn answers(&self) -> &BTreeMap<i32, (u32, Vec<u8>)> {
        &self.answers
    }

    /// The job's parameters, once done and if the payloads were the standard labels.
    pub fn params(&self) -> Result<JobParams, ClientError> {
        if !self.is_done() {
            return Err(ClientError::Protocol("start-up is not complete".into()));
        }
        JobParams::from_answers(self.nclients, &self.answers).map_err(ClientError::Params)
    }

    /// The job is over: queue FINI (no answer comes).
    pub fn fini(&mut self) -> Result<(), ClientError> {
        if self.phase != Phase::Done {
            return Err(ClientError::Protocol(
                "FINI before start-up completed".into(),
            ));
        }
        self.out.extend(ClientMsg::Fini.encode());
        self.phase = Phase::Finished;
        Ok(())
    }

    /// Bytes from the server.
    pub fn handle_input(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        self.buf.extend_from_slice(bytes);
        loop {
            let expect = if self.phase == Phase::AuthChoice {
                ServerExpect::AuthChoice
            } else {
                ServerExpect::Command
            };
            let Some((msg, used)) =
                ServerMsg::decode(&self.buf, expect).map_err(ClientError::Decode)?
            else {
                return Ok(());
            };
            self.buf.drain(..used);
            self.handle(msg)?;
        }
    }

    fn send_coll(&mut self, i: usize) {
        match self.cfg.payloads.get(i) {
            Some((label, data)) => {
                self.out.extend(
                    ClientMsg::Coll {
                        label: *label,
                        data: data.clone(),
                    }
                    .encode(),
                );
                self.phase = Phase::Coll(i);
            }
            None => {
                self.out.extend(ClientMsg::Done.encode());
                self.phase = Phase::Coll(i);
            }
        }
    }

    fn handle(&mut self, msg: ServerMsg) -> Result<(), ClientError> {
        let proto = |s: String| Err(ClientError::Protocol(s));
        match (self.phase, msg) {
            (Phase::AuthChoice, ServerMsg::AuthChoice { which, len }) => {
                if len != 0 {
                    return proto(format!(
                        "server's AUTH answer with len {len} (none is defined)"
                    ));
                }
                match which {
                    AUTH_NONE if self.cfg.auth_none => {}
                    AUTH_KEY if self.cfg.auth_key.is_some() => {
                        self.out
                            .extend(ClientMsg::Key(self.cfg.auth_key.expect("checked")).encode());
                    }
                    w => {
                        return proto(format!(
                            "server chose authentication {w}, which we did not offer"
                        ))
                    }
                }
                self.out.extend(
                    ClientMsg::Impi {
                        rank: self.cfg.rank as i32,
                    }
                    .encode(),
                );
                self.phase = Phase::Impi;
                Ok(())
            }
            (Phase::Impi, ServerMsg::Impi { nclients }) => {
                if nclients < 1 || self.cfg.rank >= nclients as u32 {
                    return proto(format!(
                        "server says {nclients} clients; our rank is {}",
                        self.cfg.rank
                    ));
                }
                self.nclients = nclients as u32;
                self.send_coll(0);
                Ok(())
            }
            (Phase::Coll(i), ServerMsg::Coll { label, mask, data })
                if i < self.cfg.payloads.len() =>
            {
                let want = self.cfg.payloads[i].0;
                if label != want {
                    return proto(format!(
                        "COLL answer for label 0x{label:x}, expected 0x{want:x}"
                    ));
                }
                if mask & (1 << self.cfg.rank) == 0 {
                    return proto(format!(
                        "COLL answer for label 0x{label:x} without our contribution"
                    ));
                }
                self.answers.insert(label, (mask, data));
                self.send_coll(i + 1);
                Ok(())
            }
            (Phase::Coll(i), ServerMsg::Done) if i == self.cfg.payloads.len() => {
                self.phase = Phase::Done;
                Ok(())
            }
            (phase, msg) => proto(format!("unexpected {msg:?} in phase {phase:?}")),
        }
    }
}
