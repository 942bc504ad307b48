//! The start-up protocol between an IMPI client and the IMPI server: commands and labels.
//!
//! Every message but two starts with `IMPI_Cmd { Int4 cmd; Int4 len; }` (big-endian, `len`
//! = payload bytes). The two exceptions belong to authentication: the server's answer to
//! AUTH is a bare `{Int4 which; Int4 len}`, and with KEY the client then sends a bare Uint8
//! key. Decoders therefore take the expected kind of message from the caller's state.

use std::fmt;

/// `'AUTH'`: the client offers authentication methods.
pub const CMD_AUTH: u32 = 0x4155_5448;
/// `'IMPI'`: the client's rank; the server's answer is the number of clients.
pub const CMD_IMPI: u32 = 0x494D_5049;
/// `'COLL'`: one label's payload; the server answers with every client's.
pub const CMD_COLL: u32 = 0x434F_4C4C;
/// `'DONE'`: start-up is over for this client; answered once all are done.
pub const CMD_DONE: u32 = 0x444F_4E45;
/// `'FINI'`: the client's procs have ended; never answered.
pub const CMD_FINI: u32 = 0x4649_4E49;

/// Authentication method bit in the client's mask and value in the server's answer.
pub const AUTH_NONE_BIT: u32 = 0x1;
/// See [`AUTH_NONE_BIT`].
pub const AUTH_KEY_BIT: u32 = 0x2;
/// `which` in the server's answer: no authentication.
pub const AUTH_NONE: i32 = 0;
/// `which` in the server's answer: the client must send its 64-bit key.
pub const AUTH_KEY: i32 = 1;

/// The most clients a job can have: `client_mask` is 32 bits.
pub const MAX_CLIENTS: u32 = 32;

/// Largest command payload a decoder accepts. The biggest real payload is a per-proc
/// label from the server (16 bytes per proc of the whole job); 64 MiB is four million procs.
pub const MAX_PAYLOAD: u32 = 64 << 20;

/// The COLL labels of IMPI 0.0 (values from the report; the server treats any label as
/// opaque, clients use these).
pub mod label {
    /// IMPI versions supported: n × {Uint4 major, minor}, ascending, 0.0 mandatory.
    pub const C_VERSION: i32 = 0x1000;
    /// Int4: hosts in this client.
    pub const C_NHOSTS: i32 = 0x1100;
    /// Int4: procs in this client.
    pub const C_NPROCS: i32 = 0x1200;
    /// Uint4: most data bytes per packet; the job uses the minimum.
    pub const C_DATALEN: i32 = 0x1300;
    /// Int4: largest tag; the job uses the minimum.
    pub const C_TAGUB: i32 = 0x1400;
    /// Int4: crossover size of collectives; -1 for the default 1024.
    pub const C_COLL_XSIZE: i32 = 0x1500;
    /// Int4: host count where logarithmic collectives start; -1 for the default 4.
    pub const C_COLL_MAXLINEAR: i32 = 0x1600;
    /// 16 bytes per host: its address.
    pub const H_IPV6: i32 = 0x2000;
    /// Int4 per host: its listening port.
    pub const H_PORT: i32 = 0x2100;
    /// Int4 per host: procs on it.
    pub const H_NPROCS: i32 = 0x2200;
    /// Uint4 per host: flow-control ackmark; the job uses the minimum.
    pub const H_ACKMARK: i32 = 0x2300;
    /// Uint4 per host: flow-control hiwater; the job uses the minimum.
    pub const H_HIWATER: i32 = 0x2400;
    /// 16 bytes per proc: its host id.
    pub const P_IPV6: i32 = 0x3000;
    /// Int8 per proc: its process id.
    pub const P_PID: i32 = 0x3100;

    /// Every label, in the order clients send them.
    pub const ALL: [i32; 14] = [
        C_VERSION,
        C_NHOSTS,
        C_NPROCS,
        C_DATALEN,
        C_TAGUB,
        C_COLL_XSIZE,
        C_COLL_MAXLINEAR,
        H_IPV6,
        H_PORT,
        H_NPROCS,
        H_ACKMARK,
        H_HIWATER,
        P_IPV6,
        P_PID,
    ];
}

/// A message from a client to the server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientMsg {
    /// `{AUTH, 4}` + Uint4 mask of accepted methods.
    Auth { mask: u32 },
    /// The bare 8-byte key after the server chose KEY.
    Key(u64),
    /// `{IMPI, 4}` + Int4 client rank.
    Impi { rank: i32 },
    /// `{COLL, 4+n}` + Int4 label + n bytes.
    Coll { label: i32, data: Vec<u8> },
    /// `{DONE, 0}`.
    Done,
    /// `{FINI, 0}`.
    Fini,
}

/// A message from the server to a client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerMsg {
    /// The bare answer to AUTH: `{Int4 which; Int4 len}`.
    AuthChoice { which: i32, len: i32 },
    /// `{IMPI, 4}` + Int4 number of clients.
    Impi { nclients: i32 },
    /// `{COLL, 8+N}` + `{Int4 label; Uint4 client_mask}` + the payloads in client order.
    Coll {
        label: i32,
        mask: u32,
        data: Vec<u8>,
    },
    /// `{DONE, 0}`.
    Done,
}

/// What the next client message is expected to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientExpect {
    /// A command (`IMPI_Cmd` header first).
    Command,
    /// The bare 8-byte key.
    Key,
}

/// What the next server message is expected to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerExpect {
    /// The bare answer to AUTH.
    AuthChoice,
    /// A command (`IMPI_Cmd` header first).
    Command,
}

/// Why bytes are not a valid start-up message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StartupError {
    /// A command value that is not one of the five (or not allowed in that direction).
    UnknownCommand(u32),
    /// `len` does not fit the command (negative, too big, or wrong for a fixed-size one).
    BadLength { cmd: u32, len: i32 },
}

impl fmt::Display for StartupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartupError::UnknownCommand(c) => {
                write!(
                    f,
                    "IMPI start-up: unknown command 0x{c:08x} ({})",
                    ascii(*c)
                )
            }
            StartupError::BadLength { cmd, len } => {
                write!(
                    f,
                    "IMPI start-up: command {} with invalid len {len}",
                    ascii(*cmd)
                )
            }
        }
    }
}

impl std::error::Error for StartupError {}

/// A command value as its four ASCII letters when printable (for messages).
pub fn ascii(cmd: u32) -> String {
    cmd.to_be_bytes()
        .iter()
        .map(|&b| if b.is_ascii_graphic() { b as char } else { '?' })
        .collect()
}

fn cmd_bytes(cmd: u32, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(8 + payload.len());
    v.extend_from_slice(&cmd.to_be_bytes());
    v.extend_from_slice(&(payload.len() as i32).to_be_bytes());
    v.extend_from_slice(payload);
    v
}

impl ClientMsg {
    /// The wire bytes.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            ClientMsg::Auth { mask } => cmd_bytes(CMD_AUTH, &mask.to_be_bytes()),
            ClientMsg::Key(k) => k.to_be_bytes().to_vec(),
            ClientMsg::Impi { rank } => cmd_bytes(CMD_IMPI, &rank.to_be_bytes()),
            ClientMsg::Coll { label, data } => {
                let mut p = Vec::with_capacity(4 + data.len());
                p.extend_from_slice(&label.to_be_bytes());
                p.extend_from_slice(data);
                cmd_bytes(CMD_COLL, &p)
            }
            ClientMsg::Done => cmd_bytes(CMD_DONE, &[]),
            ClientMsg::Fini => cmd_bytes(CMD_FINI, &[]),
        }
    }

    /// Decode one message from the front of `b`: `Ok(None)` if more bytes are needed,
    /// else the message and the bytes it used.
    pub fn decode(
        b: &[u8],
        expect: ClientExpect,
    ) -> Result<Option<(ClientMsg, usize)>, StartupError> {
        if expect == ClientExpect::Key {
            if b.len() < 8 {
                return Ok(None);
            }
            return Ok(Some((
                ClientMsg::Key(u64::from_be_bytes(b[..8].try_into().expect("8"))),
                8,
            )));
        }
        let Some((cmd, payload, used)) = split_command(b, |cmd, len| match cmd {
            CMD_AUTH | CMD_IMPI => len == 4,
            CMD_COLL => (4..=MAX_PAYLOAD).contains(&len),
            CMD_DONE | CMD_FINI => len == 0,
            _ => false,
        })?
        else {
            return Ok(None);
        };
        let int4 = |p: &[u8]| i32::from_be_bytes(p[..4].try_into().expect("4"));
        let msg = match cmd {
            CMD_AUTH => ClientMsg::Auth {
                mask: int4(payload) as u32,
            },
            CMD_IMPI => ClientMsg::Impi {
                rank: int4(payload),
            },
            CMD_COLL => ClientMsg::Coll {
                label: int4(payload),
                data: payload[4..].to_vec(),
            },
            CMD_DONE => ClientMsg::Done,
            _ => ClientMsg::Fini,
        };
        Ok(Some((msg, used)))
    }
}

impl ServerMsg {
    /// The wire bytes.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            ServerMsg::AuthChoice { which, len } => {
                let mut v = which.to_be_bytes().to_vec();
                v.extend_from_slice(&len.to_be_bytes());
                v
            }
            ServerMsg::Impi { nclients } => cmd_bytes(CMD_IMPI, &nclients.to_be_bytes()),
            ServerMsg::Coll { label, mask, data } => {
                let mut p = Vec::with_capacity(8 + data.len());
                p.extend_from_slice(&label.to_be_bytes());
                p.extend_from_slice(&mask.to_be_bytes());
                p.extend_from_slice(data);
                cmd_bytes(CMD_COLL, &p)
            }
            ServerMsg::Done => cmd_bytes(CMD_DONE, &[]),
        }
    }

    /// Decode one message from the front of `b` (see [`ClientMsg::decode`]). A DONE with a
    /// payload is accepted and the payload skipped, as LAM's client does.
    pub fn decode(
        b: &[u8],
        expect: ServerExpect,
    ) -> Result<Option<(ServerMsg, usize)>, StartupError> {
        if expect == ServerExpect::AuthChoice {
            if b.len() < 8 {
                return Ok(None);
            }
            let which = i32::from_be_bytes(b[..4].try_into().expect("4"));
            let len = i32::from_be_bytes(b[4..8].try_into().expect("4"));
            return Ok(Some((ServerMsg::AuthChoice { which, len }, 8)));
        }
        let Some((cmd, payload, used)) = split_command(b, |cmd, len| match cmd {
            CMD_IMPI => len == 4,
            CMD_COLL => (8..=MAX_PAYLOAD).contains(&len),
            CMD_DONE => len <= MAX_PAYLOAD,
            _ => false,
        })?
        else {
            return Ok(None);
        };
        let int4 = |p: &[u8], at: usize| i32::from_be_bytes(p[at..at + 4].try_into().expect("4"));
        let msg = match cmd {
            CMD_IMPI => ServerMsg::Impi {
                nclients: int4(payload, 0),
            },
            CMD_COLL => ServerMsg::Coll {
                label: int4(payload, 0),
                mask: int4(payload, 4) as u32,
                data: payload[8..].to_vec(),
            },
            _ => ServerMsg::Done,
        };
        Ok(Some((msg, used)))
    }
}

/// A whole command: its value, its payload and the bytes it used.
type Command<'a> = (u32, &'a [u8], usize);

/// Split `{cmd, len}` + payload off the front of `b` once complete; `valid(cmd, len)`
/// decides whether the command and length are acceptable in this direction.
fn split_command(
    b: &[u8],
    valid: impl Fn(u32, u32) -> bool,
) -> Result<Option<Command<'_>>, StartupError> {
    if b.len() < 8 {
        return Ok(None);
    }
    let cmd = u32::from_be_bytes(b[..4].try_into().expect("4"));
    let len = i32::from_be_bytes(b[4..8].try_into().expect("4"));
    if !matches!(cmd, CMD_AUTH | CMD_IMPI | CMD_COLL | CMD_DONE | CMD_FINI) {
        return Err(StartupError::UnknownCommand(cmd));
    }
    if len < 0 {
        return Err(StartupError::BadLength { cmd, len });
    }
    if !valid(cmd, len as u32) {
        // A command of the other direction is as unknown here as a made-up one.
        if !valid(cmd, 0) && !valid(cmd, 4) && !valid(cmd, 8) {
            return Err(StartupError::UnknownCommand(cmd));
        }
        return Err(StartupError::BadLength { cmd, len });
    }
    let total = 8 + len as usize;
    if b.len() < total {
        return Ok(None);
    }
    Ok(Some((cmd, &b[8..total], total)))
}
