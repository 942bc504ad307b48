//! The driver's side of restarting a rank in a new process ([`crate::restart`] has the
//! design): taking the image ([`PmTransport::checkpoint_for_restart`]), starting from it
//! ([`PmTransport::restart`]), announcing the new address (MOVE, repeated until the peer
//! answers) and applying a peer's move.

use std::net::SocketAddr;
use std::time::Instant;

use tsunagi_p2p::{P2pError, Rank};

use super::{say, PmTransport, PmTransportConfig};
use crate::checkpoint::{RESTARTING, STABLE};
use crate::pm::{PmEndpoint, ReceiveMode};
use crate::restart::{check_move, encode_move, Move, PeerAddrs, RestartImage, MOVE_RESEND};
use crate::wire;

/// Restart state of one transport.
pub(super) struct Moves {
    key: Option<tsunagi_tcp::JobKey>,
    /// This rank's restarts so far (0: the process the job started).
    generation: u32,
    /// The epoch the peers knew before our restart (what our MOVE names).
    old_epoch: u32,
    /// Peers not yet known to have our new address: when to send the MOVE again.
    announce: Vec<Option<Instant>>,
    /// Per peer, the generation of its last move we applied.
    applied: Vec<u32>,
    /// The image is taken: this process must not touch the network again.
    pub(super) moved_out: bool,
    /// Moves applied, and MOVE datagrams refused (bad MAC, stale, not ours).
    pub(super) accepted: u64,
    pub(super) refused: u64,
}

impl Moves {
    pub(super) fn new(size: usize, key: Option<tsunagi_tcp::JobKey>) -> Moves {
        Moves {
            key,
            generation: 0,
            old_epoch: 0,
            announce: vec![None; size],
            applied: vec![0; size],
            moved_out: false,
            accepted: 0,
            refused: 0,
        }
    }

    /// A packet from `peer` arrived at our (new) address: it has our move.
    pub(super) fn confirmed(&mut self, peer: Rank) {
        if let Some(a) = self.announce.get_mut(peer as usize) {
            *a = None;
        }
    }

    /// When the next MOVE is due, if any peer has not answered.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.announce.iter().flatten().min().copied()
    }
}

impl PmTransport {
    /// Errors once this process's image was taken for a restart elsewhere.
    pub(super) fn usable(&self) -> Result<(), P2pError> {
        if self.moves.moved_out {
            return Err(P2pError::Other(format!(
                "pm: rank {} was checkpointed for a restart in another process: this one \
                 must not send or receive any more",
                self.ep.me()
            )));
        }
        Ok(())
    }

    /// Restarts of this rank so far (0 in the process the job started).
    pub fn generation(&self) -> u32 {
        self.moves.generation
    }

    /// Moves of peers applied, and MOVE datagrams refused.
    pub fn moves_seen(&self) -> (u64, u64) {
        (self.moves.accepted, self.moves.refused)
    }

    /// Peers that have not yet answered our MOVE.
    pub fn moves_pending(&self) -> usize {
        self.moves.announce.iter().flatten().count()
    }

    /// Take this rank's image for a restart in another process (see [`crate::restart`]):
    /// quiesce with the peers, tell them this rank stops, wait until everything sent was
    /// acknowledged and everything received was executed, and return the image, with
    /// `app` (the application's own state) inside. From then on this transport refuses
    /// every call and its drop does nothing: the process is to end, and a new one continues
    /// from the image with [`PmTransport::restart`].
    ///
    /// Refused (and the traffic goes on) with the shared receive queue, without a job key,
    /// while a peer may still read one of our buffers for a rendezvous, or when a peer does
    /// not quiesce within [`crate::checkpoint::PATIENCE`].
    pub fn checkpoint_for_restart(&mut self, app: &[u8]) -> Result<Vec<u8>, P2pError> {
        self.usable()?;
        let refuse = |why: String| {
            Err(P2pError::Other(format!(
                "pm: checkpoint for restart: {why}"
            )))
        };
        if matches!(self.ep.config().receive, ReceiveMode::Shared { .. }) {
            return refuse("the shared receive queue is not checkpointed".into());
        }
        if self.moves.key.is_none() {
            return refuse("no job key: the peers could not trust our MOVE".into());
        }
        let grants = self.ep.open_grants();
        if grants > 0 {
            return refuse(format!(
                "{grants} buffer(s) exposed for rendezvous not read yet (retry after them)"
            ));
        }
        let id = self
            .ckpt
            .last
            .wrapping_add(1)
            .max(self.ckpt.requested.unwrap_or(0));
        // 1. Quiesce with the peers (they join through the marker).
        self.ep.quiesce();
        let live: Vec<Rank> = self
            .ep
            .peer_ranks()
            .into_iter()
            .filter(|&p| !self.failed[p as usize])
            .collect();
        for &p in &live {
            self.ep
                .send_marker(p, id, STABLE)
                .map_err(|e| self.map_err(e))?;
        }
        if !self.wait_markers(id, STABLE, |ep| ep.is_stable() && !ep.has_held())? {
            self.abandon_checkpoint(id, "a peer did not quiesce in time")?;
            return refuse("a peer did not quiesce in time".into());
        }
        // 2. Tell them we stop (their "saved" from us), and wait until that and everything
        // else we owe is acknowledged and what came meanwhile is executed (into the rings).
        for &p in &live {
            self.ep
                .send_marker(p, id, RESTARTING)
                .map_err(|e| self.map_err(e))?;
        }
        if !self.wait_markers(id, STABLE, |ep| ep.is_stable() && !ep.has_held())? {
            self.abandon_checkpoint(id, "the peers did not acknowledge in time")?;
            return refuse("the peers did not acknowledge in time".into());
        }
        // 3. The image. Nothing after this point reaches the network.
        let mut context = self.ep.save_context().map_err(|e| self.map_err(e))?;
        if let Err(why) = context.drop_user_buffers() {
            self.abandon_checkpoint(id, &why)?;
            return refuse(why);
        }
        let peers = (0..self.size)
            .map(|r| {
                let (dest, source) = (self.addrs[r]?, self.sources[r]?);
                Some(PeerAddrs {
                    lid_index: self.lid_index[r],
                    dest,
                    source,
                    ack: self.ack_addrs[r],
                })
            })
            .collect();
        let image = RestartImage {
            rank: self.ep.me(),
            size: self.size,
            generation: self.moves.generation,
            checkpoint: id,
            epoch: self.ep.epoch(),
            peers,
            context,
            stash: self.stash.iter().cloned().collect(),
            app: app.to_vec(),
        };
        self.moves.moved_out = true;
        self.ckpt.finish(id, true);
        Ok(image.encode())
    }

    /// Continue, in this new process, as the rank whose image
    /// [`PmTransport::checkpoint_for_restart`] took: bind new sockets (a new epoch),
    /// restore every queue context and the messages set aside, and announce the new
    /// address to every peer (MOVE, authenticated under `cfg.job_key`, the same key as the
    /// peers'). Returns the transport and the application's state saved with the image.
    pub fn restart(
        cfg: &PmTransportConfig,
        image: &[u8],
    ) -> Result<(PmTransport, Vec<u8>), P2pError> {
        let img = RestartImage::decode(image).map_err(|e| P2pError::Other(format!("pm: {e}")))?;
        if cfg.job_key.is_none() {
            return Err(P2pError::Other(
                "pm: restarting from an image needs the job key (TSUNAGI_JOB_KEY or \
                 TSUNAGI_JOB_KEY_FD): the peers accept a MOVE only under it"
                    .into(),
            ));
        }
        if matches!(cfg.pm.receive, ReceiveMode::Shared { .. }) {
            return Err(P2pError::Other(
                "pm: a restart image restores into rings (TSUNAGI_PM_RECEIVE=rings)".into(),
            ));
        }
        let mut t = PmTransport::bind(img.rank, img.size, cfg)?;
        let mut ep = PmEndpoint::new(img.rank, img.size, t.ep.epoch(), *t.ep.config());
        ep.restore_context(&img.context).map_err(|e| t.map_err(e))?;
        ep.resume();
        t.ep = ep;
        let now = Instant::now();
        for (r, p) in img.peers.iter().enumerate() {
            if let Some(p) = p {
                t.addrs[r] = Some(p.dest);
                t.sources[r] = Some(p.source);
                t.ack_addrs[r] = p.ack;
                t.lid_index[r] = p.lid_index;
                t.moves.announce[r] = Some(now);
            }
        }
        t.moves.generation = img.generation.wrapping_add(1);
        t.moves.old_epoch = img.epoch;
        t.stash = img.stash.into();
        t.ckpt.restored_from(img.checkpoint);
        t.flush(now);
        if !t.stash.is_empty() || t.ep.has_received() {
            t.shared
                .busy
                .store(true, std::sync::atomic::Ordering::Release);
        }
        Ok((t, img.app))
    }

    /// Send the MOVEs that are due (a restarted process, until each peer answered).
    pub(super) fn send_moves(&mut self, now: Instant) {
        let Some(key) = self.moves.key else { return };
        if self.moves.announce.iter().all(Option::is_none) {
            return;
        }
        let card = crate::parse_card(&self.card()).expect("our own card parses");
        let m = Move {
            rank: self.ep.me(),
            old_epoch: self.moves.old_epoch,
            generation: self.moves.generation,
            card,
        };
        let mut out = Vec::new();
        for r in 0..self.size {
            let (Some(at), Some(to)) = (self.moves.announce[r], self.addrs[r]) else {
                continue;
            };
            if at > now {
                continue;
            }
            encode_move(
                &key.0,
                &m,
                r as Rank,
                self.ep.config().link.checksum,
                &mut out,
            );
            self.send_one(to, &out);
            self.moves.announce[r] = Some(now + MOVE_RESEND);
        }
    }

    /// A MOVE datagram (the first `n` bytes of the read buffer) from `from`: apply it if
    /// it is authentic, from a peer, sent from the card it names, for the epoch we know,
    /// and newer than any applied; answer a repeat of the one applied last (our answer
    /// was lost); refuse anything else.
    pub(super) fn handle_move(&mut self, now: Instant, from: SocketAddr, n: usize) {
        let Some(key) = self.moves.key else {
            self.moves.refused += 1;
            return;
        };
        let Some(Ok(p)) = wire::packets(&self.inbuf[..n]).next() else {
            self.moves.refused += 1;
            return;
        };
        let r = p.src as usize;
        let known = p.dst == self.ep.me() && r < self.size && self.addrs[r].is_some();
        let m = match check_move(&key.0, &p) {
            Ok(m) if known && m.card.addr(0) == from => m,
            _ => {
                self.moves.refused += 1;
                return;
            }
        };
        let current = self.ep.peer_epoch(m.rank);
        if current == Some(m.card.epoch) && m.generation == self.moves.applied[r] {
            // Our answer to this move was lost: say again where we are.
            self.ep.restate_to(m.rank);
            return;
        }
        if current != Some(m.old_epoch) || m.generation <= self.moves.applied[r] {
            self.moves.refused += 1;
            return;
        }
        let index = (self.lid_index[r] as usize).min(m.card.ports.len() - 1);
        self.addrs[r] = Some(m.card.addr(index));
        self.sources[r] = Some(m.card.addr(0));
        self.ack_addrs[r] = m.card.ack_port.map(|p| SocketAddr::new(m.card.ip, p));
        self.moves.applied[r] = m.generation;
        self.moves.accepted += 1;
        self.ep.peer_moved(m.rank, m.card.epoch, now);
        if self.stats_on {
            say(&format!(
                "pm: rank {}: rank {} restarted (generation {}) at {}\n",
                self.ep.me(),
                m.rank,
                m.generation,
                m.card
            ));
        }
    }
}
