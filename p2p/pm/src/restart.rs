//! Restarting one rank from its checkpoint image in a **new process** (seed 000's
//! pmSaveContext/pmRestoreContext across processes): the image format, and the MOVE that
//! tells the peers where the new process listens.
//!
//! The sequence ([`crate::transport::PmTransport::checkpoint_for_restart`] and
//! [`crate::transport::PmTransport::restart`]):
//!
//! 1. the rank quiesces with its peers (the coordinated checkpoint's markers, phase
//!    STABLE), tells them it stops (marker RESTARTING, which they take as its "saved"),
//!    waits until everything it sent was acknowledged and everything that arrived was
//!    executed, and takes its image: every queue context ([`crate::pm::PmContext`]: sequence
//!    state, ring pointers, the rings with the messages not yet handed out), the peers'
//!    addresses, the messages set aside during an RDMA read, and an opaque blob of the
//!    application's state. From then on that process touches no socket: nothing it did
//!    not put in the image is acknowledged, so whatever the peers send later stays theirs
//!    to resend;
//! 2. the process is killed (or exits, or the host dies);
//! 3. a new process of the same rank binds new sockets (new ports, a new epoch), restores
//!    the image and announces itself to every peer with a **MOVE**: its new card, the
//!    epoch the peers knew, the restart's generation, and an HMAC-SHA256 under the job key
//!    (the PM transport's copy of the key the TCP transport authenticates connections
//!    with). A peer checks the MAC, that the old epoch is the one it knows and that the
//!    generation is newer, then sends to the new address, accepts the new epoch (so a
//!    packet still travelling from the old process is a stray) and resends at once what
//!    the old process did not acknowledge ([`crate::reliable::Link::on_peer_moved`]). The
//!    new process repeats its MOVE every [`MOVE_RESEND`] until a packet from that peer
//!    arrives at its new address.
//!
//! The peers keep running throughout: this is a rank *moving* (SCore's migration by
//! checkpoint), not a rollback of the job. A rank that ran on after its image cannot be
//! restored alone (its peers saw what it did after the image); that needs every rank
//! restored, which this crate does not do.
//!
//! Limits: user buffers registered in place are addresses in the old process, so an image
//! is refused while a peer may still PULL one (a rendezvous whose reader has not
//! invalidated it yet); the shared receive queue is not checkpointed.
//!
//! Image layout (little-endian): magic `b"TSGPMRST"`, version u16 ([`IMAGE_VERSION`]),
//! rank u32, size u32, generation u32, checkpoint id u32, epoch u32, then per rank a tag
//! byte (0: not a peer; 1: a peer, then its LID index u32 and three length-prefixed (u16)
//! socket addresses as text: where it is sent to, where it sends from, its ACK address,
//! the last possibly empty), the context (u64 length, [`PmContext::encode`]), the set-aside
//! messages (u32 count; each rank u32, u32 length, bytes), the application's blob (u64
//! length, bytes) and a CRC-32 of everything before it.

use std::net::SocketAddr;
use std::time::Duration;

use crate::pm::{PmContext, Rank};
use crate::wire::{self, Kind, Packet};
use crate::{parse_card, Card};

/// How often a restarted process repeats its MOVE to a peer that has not answered.
pub const MOVE_RESEND: Duration = Duration::from_millis(20);
/// The image format's version.
pub const IMAGE_VERSION: u16 = 1;
const IMAGE_MAGIC: &[u8; 8] = b"TSGPMRST";
const MAC_LABEL: &str = "tsunagi-pm-move";
const MAC_BYTES: usize = tsunagi_tcp::auth::MAC_BYTES;

/// Where a peer is: the addresses the driver keeps for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerAddrs {
    /// Its LID index the fat-tree plan addresses (kept for a move of that peer).
    pub lid_index: u32,
    pub dest: SocketAddr,
    pub source: SocketAddr,
    pub ack: Option<SocketAddr>,
}

/// Everything a new process needs to continue as the rank that saved it.
#[derive(Clone, Debug)]
pub struct RestartImage {
    pub rank: Rank,
    pub size: usize,
    /// Restarts of this rank so far (a MOVE carries the next one).
    pub generation: u32,
    /// The checkpoint the image was taken in.
    pub checkpoint: u32,
    /// The epoch the saving process's packets carried.
    pub epoch: u32,
    pub peers: Vec<Option<PeerAddrs>>,
    pub context: PmContext,
    /// Messages taken off PM and not yet handed out (each the 32-byte header and payload).
    pub stash: Vec<(Rank, Vec<u8>)>,
    /// The application's own state, opaque here.
    pub app: Vec<u8>,
}

struct Cur<'a>(&'a [u8], usize);

impl<'a> Cur<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.1.checked_add(n).filter(|&e| e <= self.0.len());
        let end = end.ok_or_else(|| format!("restart image truncated at byte {}", self.1))?;
        let s = &self.0[self.1..end];
        self.1 = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, String> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().unwrap()))
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    fn addr(&mut self) -> Result<Option<SocketAddr>, String> {
        let n = self.u16()? as usize;
        if n == 0 {
            return Ok(None);
        }
        let s =
            std::str::from_utf8(self.take(n)?).map_err(|_| "restart image: address not text")?;
        s.parse()
            .map(Some)
            .map_err(|_| format!("restart image: bad address {s:?}"))
    }
}

fn put_addr(o: &mut Vec<u8>, a: Option<SocketAddr>) {
    let s = a.map(|a| a.to_string()).unwrap_or_default();
    o.extend_from_slice(&(s.len() as u16).to_le_bytes());
    o.extend_from_slice(s.as_bytes());
}

impl RestartImage {
    /// The image as bytes (a file's content).
    pub fn encode(&self) -> Vec<u8> {
        let mut o = Vec::new();
        o.extend_from_slice(IMAGE_MAGIC);
        o.extend_from_slice(&IMAGE_VERSION.to_le_bytes());
        for v in [
            self.rank,
            self.size as u32,
            self.generation,
            self.checkpoint,
            self.epoch,
        ] {
            o.extend_from_slice(&v.to_le_bytes());
        }
        for p in &self.peers {
            match p {
                None => o.push(0),
                Some(p) => {
                    o.push(1);
                    o.extend_from_slice(&p.lid_index.to_le_bytes());
                    put_addr(&mut o, Some(p.dest));
                    put_addr(&mut o, Some(p.source));
                    put_addr(&mut o, p.ack);
                }
            }
        }
        let ctx = self.context.encode();
        o.extend_from_slice(&(ctx.len() as u64).to_le_bytes());
        o.extend_from_slice(&ctx);
        o.extend_from_slice(&(self.stash.len() as u32).to_le_bytes());
        for (r, m) in &self.stash {
            o.extend_from_slice(&r.to_le_bytes());
            o.extend_from_slice(&(m.len() as u32).to_le_bytes());
            o.extend_from_slice(m);
        }
        o.extend_from_slice(&(self.app.len() as u64).to_le_bytes());
        o.extend_from_slice(&self.app);
        let crc = wire::crc32(&[&o]);
        o.extend_from_slice(&crc.to_le_bytes());
        o
    }

    /// Parse [`RestartImage::encode`]'s bytes: a wrong magic, version or checksum,
    /// truncation, trailing bytes, counts beyond the input, bad addresses, a context of
    /// another rank or size, or one holding user buffers are refused, never a panic.
    pub fn decode(b: &[u8]) -> Result<RestartImage, String> {
        if b.len() < IMAGE_MAGIC.len() + 2 + 4 || &b[..8] != IMAGE_MAGIC {
            return Err("not a PM restart image".into());
        }
        let (body, crc) = b.split_at(b.len() - 4);
        let version = u16::from_le_bytes([b[8], b[9]]);
        if version != IMAGE_VERSION {
            return Err(format!(
                "PM restart image of version {version}, this build reads {IMAGE_VERSION}"
            ));
        }
        if wire::crc32(&[body]) != u32::from_le_bytes(crc.try_into().unwrap()) {
            return Err("PM restart image: checksum mismatch (damaged file)".into());
        }
        let mut c = Cur(body, 10);
        let rank = c.u32()?;
        let size = c.u32()? as usize;
        let generation = c.u32()?;
        let checkpoint = c.u32()?;
        let epoch = c.u32()?;
        if size > body.len() || rank as usize >= size {
            return Err(format!("restart image: rank {rank} of {size}"));
        }
        let mut peers = Vec::with_capacity(size);
        for r in 0..size {
            match c.u8()? {
                0 => peers.push(None),
                1 if r != rank as usize => {
                    let lid_index = c.u32()?;
                    let (dest, source, ack) = (c.addr()?, c.addr()?, c.addr()?);
                    let (Some(dest), Some(source)) = (dest, source) else {
                        return Err(format!("restart image: no address for rank {r}"));
                    };
                    peers.push(Some(PeerAddrs {
                        lid_index,
                        dest,
                        source,
                        ack,
                    }));
                }
                t => return Err(format!("restart image: peer tag {t} for rank {r}")),
            }
        }
        let n = c.u64()?;
        let n = usize::try_from(n).map_err(|_| "restart image: context too long")?;
        let context = PmContext::decode(c.take(n)?)?;
        if context.rank() != rank || context.size() != size {
            return Err("restart image: context of another rank or job size".into());
        }
        if context.has_user_buffers() {
            return Err("restart image: context holds another process's user buffers".into());
        }
        let k = c.u32()? as usize;
        if k > body.len() {
            return Err("restart image: too many set-aside messages".into());
        }
        let mut stash = Vec::new();
        for _ in 0..k {
            let r = c.u32()?;
            if r as usize >= size || peers[r as usize].is_none() {
                return Err(format!("restart image: set-aside message from rank {r}"));
            }
            let len = c.u32()? as usize;
            stash.push((r, c.take(len)?.to_vec()));
        }
        let n = c.u64()?;
        let n = usize::try_from(n).map_err(|_| "restart image: blob too long")?;
        let app = c.take(n)?.to_vec();
        if c.1 != body.len() {
            return Err("restart image: trailing bytes".into());
        }
        Ok(RestartImage {
            rank,
            size,
            generation,
            checkpoint,
            epoch,
            peers,
            context,
            stash,
            app,
        })
    }
}

/// A MOVE that passed its checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Move {
    pub rank: Rank,
    pub old_epoch: u32,
    pub generation: u32,
    /// The new card (its epoch is the one the rank's packets carry now).
    pub card: Card,
}

fn move_mac(key: &[u8], p: &Packet<'_>, card: &[u8]) -> [u8; MAC_BYTES] {
    let fields = [p.src, p.dst, p.epoch, p.seq, p.ack].map(u32::to_le_bytes);
    let parts: Vec<&[u8]> = fields
        .iter()
        .map(|f| f.as_slice())
        .chain(std::iter::once(card))
        .collect();
    tsunagi_tcp::auth::mac(key, MAC_LABEL, &parts)
}

/// Encode move `m` (rank `m.rank`, whose packets carried `m.old_epoch`, now at `m.card`
/// with its new epoch) as a MOVE to rank `to`, authenticated under `key`.
pub fn encode_move(key: &[u8], m: &Move, to: Rank, checksum: bool, out: &mut Vec<u8>) {
    let text = m.card.to_string();
    let mut p = Packet {
        kind: Kind::Move,
        src: m.rank,
        dst: to,
        epoch: m.card.epoch,
        seq: m.generation,
        ack: m.old_epoch,
        sack: 0,
        payload: &[],
    };
    let mac = move_mac(key, &p, text.as_bytes());
    let mut payload = text.into_bytes();
    payload.extend_from_slice(&mac);
    p.payload = &payload;
    wire::encode(&p, checksum, out).expect("a card and a MAC fit a packet");
}

/// Check a MOVE packet under `key`: its MAC, and that the card parses and carries the
/// packet's epoch. (Whether the old epoch and the generation fit what the receiver knows
/// is the receiver's check.)
pub fn check_move(key: &[u8], p: &Packet<'_>) -> Result<Move, String> {
    if p.kind != Kind::Move || p.payload.len() < wire::MOVE_MIN_PAYLOAD {
        return Err("not a MOVE".into());
    }
    let (text, mac) = p.payload.split_at(p.payload.len() - MAC_BYTES);
    let fields = [p.src, p.dst, p.epoch, p.seq, p.ack].map(u32::to_le_bytes);
    let parts: Vec<&[u8]> = fields
        .iter()
        .map(|f| f.as_slice())
        .chain(std::iter::once(text))
        .collect();
    if !tsunagi_tcp::auth::verify(key, MAC_LABEL, &parts, mac) {
        return Err(format!("MOVE of rank {} fails its MAC", p.src));
    }
    let text = std::str::from_utf8(text).map_err(|_| "MOVE card is not text")?;
    let card = parse_card(text)?;
    if card.epoch != p.epoch {
        return Err("MOVE card and packet disagree on the epoch".into());
    }
    Ok(Move {
        rank: p.src,
        old_epoch: p.ack,
        generation: p.seq,
        card,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn move_is_authenticated() {
        let card = parse_card("pm:10.0.0.2:5000,5001:0000beef/5002").unwrap();
        let mut out = Vec::new();
        let sent = Move {
            rank: 3,
            old_epoch: 0xdead,
            generation: 2,
            card: card.clone(),
        };
        encode_move(b"job key", &sent, 1, true, &mut out);
        let p = wire::decode(&out).unwrap();
        assert_eq!(check_move(b"job key", &p), Ok(sent));
        assert!(check_move(b"another key", &p).is_err());
        // Any field changed breaks the MAC (a replay to another rank, another epoch).
        for tamper in [12usize, 16, 20, 24, wire::HEADER_BYTES + 3] {
            let mut bad = out.clone();
            bad[tamper] ^= 1;
            bad[32..36].fill(0);
            bad[4] = 0;
            let p = wire::decode(&bad).unwrap();
            assert!(check_move(b"job key", &p).is_err(), "byte {tamper}");
        }
        // The wire decoder wants a card and a MAC.
        let mut short = Vec::new();
        let p = Packet {
            kind: Kind::Move,
            src: 1,
            dst: 0,
            epoch: 1,
            seq: 1,
            ack: 0,
            sack: 0,
            payload: &[0; 32],
        };
        wire::encode(&p, false, &mut short).unwrap();
        assert_eq!(wire::decode(&short), Err(wire::WireError::Move));
    }
}
