//! The software RDMA NIC model (seeds 000 and 001): the hardware does only **PUSH** (remote
//! write) and **PULL** (remote read) on registered memory regions, plus, for the shared
//! receive queue, **SEND** into a receive pool the receiving NIC manages. Everything else
//! (rings, messages, tails) is software above it ([`crate::pm`]).
//!
//! This module has the work requests as they travel (one per frame of a
//! [`crate::reliable::Link`]) and the region table a NIC applies them to. Data always rides
//! on the work request ("data on WQE" of PM/InfiniBand-FJ is the only mode here: in a
//! software NIC there is no separate DMA read of the source to save).
//!
//! Work request layout, little-endian, first byte the operation:
//!
//! * `1` PUSH: region u32, offset u64, data (the rest);
//! * `2` PULL request: region u32, offset u64, length u32, tag u64;
//! * `3` PULL response: tag u64, status u8 (0 ok, 1 access error), data (the rest);
//! * `4` SEND: data (the rest), placed by the receiver into its shared receive queue;
//! * `5` INVALIDATE: region u32 — the sender is done reading the receiver's user region
//!   (InfiniBand's send-with-invalidate): its right to PULL it ends;
//! * `6` MARKER: checkpoint id u32, phase u8 (0: the sender is quiesced, everything it
//!   sent before arrived; 1: the sender saved its context; 2: the sender saved its context
//!   and stops, to be restarted from its image in a new process) — the coordinated
//!   checkpoint of [`crate::transport`].
//!
//! Regions hold either the NIC's own memory (rings, the pool, the control words) or a
//! **user buffer registered in place** ([`UserMem`]): the software NIC lives in the process
//! whose buffer it is, so a PULL of a user region reads the application's send buffer and
//! a PULL reply lands in the application's receive buffer, with no staging copy. A user
//! region is readable only by the peers it was granted to ([`Regions::grant`]), and only
//! until they invalidate it.

use std::fmt;

/// One work request, borrowing its data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wr<'a> {
    Push {
        region: u32,
        offset: u64,
        data: &'a [u8],
    },
    PullReq {
        region: u32,
        offset: u64,
        len: u32,
        tag: u64,
    },
    PullResp {
        tag: u64,
        ok: bool,
        data: &'a [u8],
    },
    Send {
        data: &'a [u8],
    },
    Invalidate {
        region: u32,
    },
    Marker {
        id: u32,
        phase: u8,
    },
}

/// Bytes a work request adds in front of its data, at most.
pub const WR_OVERHEAD: usize = 13;

/// A work request that does not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadWr(pub String);

impl fmt::Display for BadWr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed work request: {}", self.0)
    }
}

impl Wr<'_> {
    /// Bytes of the encoded work request.
    pub fn encoded_len(&self) -> usize {
        match *self {
            Wr::Push { data, .. } => 13 + data.len(),
            Wr::PullReq { .. } => 25,
            Wr::PullResp { data, .. } => 10 + data.len(),
            Wr::Send { data } => 1 + data.len(),
            Wr::Invalidate { .. } => 5,
            Wr::Marker { .. } => 6,
        }
    }

    /// Encode into `out` (cleared first).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.clear();
        match *self {
            Wr::Push {
                region,
                offset,
                data,
            } => {
                out.push(1);
                out.extend_from_slice(&region.to_le_bytes());
                out.extend_from_slice(&offset.to_le_bytes());
                out.extend_from_slice(data);
            }
            Wr::PullReq {
                region,
                offset,
                len,
                tag,
            } => {
                out.push(2);
                out.extend_from_slice(&region.to_le_bytes());
                out.extend_from_slice(&offset.to_le_bytes());
                out.extend_from_slice(&len.to_le_bytes());
                out.extend_from_slice(&tag.to_le_bytes());
            }
            Wr::PullResp { tag, ok, data } => {
                out.push(3);
                out.extend_from_slice(&tag.to_le_bytes());
                out.push(if ok { 0 } else { 1 });
                out.extend_from_slice(data);
            }
            Wr::Send { data } => {
                out.push(4);
                out.extend_from_slice(data);
            }
            Wr::Invalidate { region } => {
                out.push(5);
                out.extend_from_slice(&region.to_le_bytes());
            }
            Wr::Marker { id, phase } => {
                out.push(6);
                out.extend_from_slice(&id.to_le_bytes());
                out.push(phase);
            }
        }
    }

    /// Parse one frame.
    pub fn decode(f: &[u8]) -> Result<Wr<'_>, BadWr> {
        let need = |n: usize| {
            if f.len() < n {
                Err(BadWr(format!("{} bytes, need {n}", f.len())))
            } else {
                Ok(())
            }
        };
        let u32_at = |i: usize| u32::from_le_bytes(f[i..i + 4].try_into().unwrap());
        let u64_at = |i: usize| u64::from_le_bytes(f[i..i + 8].try_into().unwrap());
        need(1)?;
        match f[0] {
            1 => {
                need(13)?;
                Ok(Wr::Push {
                    region: u32_at(1),
                    offset: u64_at(5),
                    data: &f[13..],
                })
            }
            2 => {
                need(25)?;
                if f.len() != 25 {
                    return Err(BadWr("PULL request with trailing bytes".into()));
                }
                Ok(Wr::PullReq {
                    region: u32_at(1),
                    offset: u64_at(5),
                    len: u32_at(13),
                    tag: u64_at(17),
                })
            }
            3 => {
                need(10)?;
                let ok = match f[9] {
                    0 => true,
                    1 => false,
                    s => return Err(BadWr(format!("PULL status {s}"))),
                };
                if !ok && f.len() != 10 {
                    return Err(BadWr("failed PULL with data".into()));
                }
                Ok(Wr::PullResp {
                    tag: u64_at(1),
                    ok,
                    data: &f[10..],
                })
            }
            4 => Ok(Wr::Send { data: &f[1..] }),
            5 if f.len() == 5 => Ok(Wr::Invalidate { region: u32_at(1) }),
            5 => Err(BadWr(format!("INVALIDATE of {} bytes, need 5", f.len()))),
            6 if f.len() == 6 && f[5] <= 2 => Ok(Wr::Marker {
                id: u32_at(1),
                phase: f[5],
            }),
            6 => Err(BadWr("malformed checkpoint MARKER".into())),
            op => Err(BadWr(format!("unknown operation {op}"))),
        }
    }
}

/// Access rights of a registered region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    pub remote_write: bool,
    pub remote_read: bool,
}

/// A user buffer registered in place: its address and length in this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UserMem {
    pub ptr: *mut u8,
    pub len: usize,
}

// SAFETY: a UserMem is an address and a length. It is dereferenced only by the NIC that
// registered it, in the process that owns the buffer, under the registration contract of
// [`Regions::register_user`]; moving the descriptor between threads changes nothing.
unsafe impl Send for UserMem {}

enum Memory {
    Owned(Vec<u8>),
    User(UserMem),
}

struct Region {
    mem: Memory,
    access: Access,
    /// Peers that may PULL a user region now (one entry per grant).
    readers: Vec<u32>,
}

impl Region {
    fn len(&self) -> usize {
        match &self.mem {
            Memory::Owned(v) => v.len(),
            Memory::User(u) => u.len,
        }
    }
}

/// The NIC's table of registered memory regions; a region's key is its index.
#[derive(Default)]
pub struct Regions {
    regions: Vec<Option<Region>>,
}

/// A remote access outside a region or its rights (the NIC drops it and counts it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccessError(pub String);

impl Regions {
    /// Register `len` zeroed bytes under the lowest free key (or `key`, if given and free).
    pub fn register(&mut self, key: Option<u32>, len: usize, access: Access) -> u32 {
        self.insert(
            key,
            Region {
                mem: Memory::Owned(vec![0; len]),
                access,
                readers: Vec::new(),
            },
        )
    }

    /// Register a user buffer in place under the lowest free key (or `key`). Remote PULLs
    /// need a [`Regions::grant`] on top; local writes ([`Regions::local_write`]) are
    /// allowed.
    ///
    /// # Safety
    /// Whenever the region is granted to a peer, and whenever the caller writes into it
    /// with [`Regions::local_write`], `mem` must be valid for reads (and writes) of
    /// `mem.len` bytes and not otherwise accessed concurrently.
    pub unsafe fn register_user(&mut self, key: Option<u32>, mem: UserMem) -> u32 {
        self.insert(
            key,
            Region {
                mem: Memory::User(mem),
                access: Access {
                    remote_write: false,
                    remote_read: true,
                },
                readers: Vec::new(),
            },
        )
    }

    fn insert(&mut self, key: Option<u32>, region: Region) -> u32 {
        let k = match key {
            Some(k) => k as usize,
            None => self
                .regions
                .iter()
                .position(Option::is_none)
                .unwrap_or(self.regions.len()),
        };
        if self.regions.len() <= k {
            self.regions.resize_with(k + 1, || None);
        }
        assert!(self.regions[k].is_none(), "region key {k} is taken");
        self.regions[k] = Some(region);
        k as u32
    }

    /// Let `peer` PULL user region `key` (once more; each grant is ended by one
    /// [`Regions::revoke`]). False if `key` is not a user region.
    pub fn grant(&mut self, key: u32, peer: u32) -> bool {
        match self.regions.get_mut(key as usize).and_then(Option::as_mut) {
            Some(
                r @ Region {
                    mem: Memory::User(_),
                    ..
                },
            ) => {
                r.readers.push(peer);
                true
            }
            _ => false,
        }
    }

    /// End one grant of user region `key` to `peer`; false if there was none.
    pub fn revoke(&mut self, key: u32, peer: u32) -> bool {
        let Some(r) = self.regions.get_mut(key as usize).and_then(Option::as_mut) else {
            return false;
        };
        match r.readers.iter().position(|&p| p == peer) {
            Some(i) => {
                r.readers.swap_remove(i);
                true
            }
            None => false,
        }
    }

    /// Whether user region `key` is granted to anyone.
    pub fn granted(&self, key: u32) -> bool {
        self.regions
            .get(key as usize)
            .and_then(Option::as_ref)
            .is_some_and(|r| !r.readers.is_empty())
    }

    /// The user buffers registered, with their grants (checkpoints carry them over).
    pub fn user_regions(&self) -> Vec<(u32, UserMem, Vec<u32>)> {
        self.regions
            .iter()
            .enumerate()
            .filter_map(|(k, r)| match r {
                Some(Region {
                    mem: Memory::User(u),
                    readers,
                    ..
                }) => Some((k as u32, *u, readers.clone())),
                _ => None,
            })
            .collect()
    }

    /// Drop a region; later remote accesses to its key fail.
    pub fn deregister(&mut self, key: u32) {
        if let Some(r) = self.regions.get_mut(key as usize) {
            *r = None;
        }
    }

    /// Bytes registered in all regions.
    /// Bytes of the NIC's own memory in all regions (user buffers are the application's).
    pub fn bytes(&self) -> usize {
        self.regions
            .iter()
            .flatten()
            .map(|r| match &r.mem {
                Memory::Owned(v) => v.len(),
                Memory::User(_) => 0,
            })
            .sum()
    }

    /// A copy of a region and its rights (checkpoints).
    pub fn snapshot(&self, key: u32) -> Option<(Vec<u8>, Access)> {
        let r = self.regions.get(key as usize)?.as_ref()?;
        match &r.mem {
            Memory::Owned(v) => Some((v.clone(), r.access)),
            Memory::User(_) => None,
        }
    }

    /// Local access to one of the NIC's own regions (no rights checked).
    pub fn local(&self, key: u32) -> &[u8] {
        match &self.regions[key as usize].as_ref().expect("registered").mem {
            Memory::Owned(v) => v,
            Memory::User(_) => panic!("region {key} is a user buffer"),
        }
    }

    /// Local access to one of the NIC's own regions (no rights checked).
    pub fn local_mut(&mut self, key: u32) -> &mut [u8] {
        match &mut self.regions[key as usize].as_mut().expect("registered").mem {
            Memory::Owned(v) => v,
            Memory::User(_) => panic!("region {key} is a user buffer"),
        }
    }

    /// Write `data` at `offset` into region `key` locally (a PULL reply landing in the
    /// buffer it was asked for), bounds checked.
    pub fn local_write(&mut self, key: u32, offset: u64, data: &[u8]) -> Result<(), AccessError> {
        let (s, e) = self.span(key, offset, data.len())?;
        match &mut self.regions[key as usize].as_mut().unwrap().mem {
            Memory::Owned(v) => v[s..e].copy_from_slice(data),
            // SAFETY: `s..e` lies inside the registered buffer (span checked it), which the
            // registration contract of `register_user` keeps valid and unshared while the
            // owner writes into it.
            Memory::User(u) => unsafe {
                std::ptr::copy_nonoverlapping(data.as_ptr(), u.ptr.add(s), data.len())
            },
        }
        Ok(())
    }

    fn span(&self, key: u32, offset: u64, len: usize) -> Result<(usize, usize), AccessError> {
        let r = self
            .regions
            .get(key as usize)
            .and_then(Option::as_ref)
            .ok_or_else(|| AccessError(format!("no region {key}")))?;
        let start = usize::try_from(offset).ok();
        match start.and_then(|s| s.checked_add(len).map(|e| (s, e))) {
            Some((s, e)) if e <= r.len() => Ok((s, e)),
            _ => Err(AccessError(format!(
                "{len} bytes at {offset} outside region {key} of {} bytes",
                r.len()
            ))),
        }
    }

    /// Apply a remote PUSH.
    pub fn remote_write(&mut self, key: u32, offset: u64, data: &[u8]) -> Result<(), AccessError> {
        let (s, e) = self.span(key, offset, data.len())?;
        let r = self.regions[key as usize].as_mut().unwrap();
        if !r.access.remote_write {
            return Err(AccessError(format!(
                "region {key} is not remotely writable"
            )));
        }
        match &mut r.mem {
            Memory::Owned(v) => v[s..e].copy_from_slice(data),
            Memory::User(_) => {
                return Err(AccessError(format!("user region {key} is not writable")))
            }
        }
        Ok(())
    }

    /// Serve a remote PULL by `peer`.
    pub fn remote_read(
        &self,
        key: u32,
        offset: u64,
        len: usize,
        peer: u32,
    ) -> Result<&[u8], AccessError> {
        let (s, e) = self.span(key, offset, len)?;
        let r = self.regions[key as usize].as_ref().unwrap();
        if !r.access.remote_read {
            return Err(AccessError(format!(
                "region {key} is not remotely readable"
            )));
        }
        match &r.mem {
            Memory::Owned(v) => Ok(&v[s..e]),
            Memory::User(_) if !r.readers.contains(&peer) => Err(AccessError(format!(
                "user region {key} is not granted to rank {peer}"
            ))),
            // SAFETY: the region is granted to `peer`, so by the contract of
            // `register_user` the buffer is valid and unmodified; `s..e` lies inside it.
            Memory::User(u) => Ok(unsafe { std::slice::from_raw_parts(u.ptr.add(s), e - s) }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_byte_vector() {
        let mut out = Vec::new();
        let cases = [
            Wr::Push {
                region: 3,
                offset: 1 << 40,
                data: b"abc",
            },
            Wr::PullReq {
                region: 1,
                offset: 8,
                len: 8,
                tag: 77,
            },
            Wr::PullResp {
                tag: 77,
                ok: true,
                data: &[1, 2],
            },
            Wr::PullResp {
                tag: 78,
                ok: false,
                data: &[],
            },
            Wr::Send { data: b"x" },
            Wr::Invalidate { region: 9 },
            Wr::Marker { id: 3, phase: 1 },
        ];
        for wr in cases {
            wr.encode(&mut out);
            assert_eq!(Wr::decode(&out).unwrap(), wr);
            assert_eq!(out.len(), wr.encoded_len());
        }
        Wr::Push {
            region: 2,
            offset: 16,
            data: &[9],
        }
        .encode(&mut out);
        assert_eq!(out, [1, 2, 0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0, 9]);
    }

    #[test]
    fn rejects_malformed() {
        for bad in [
            &[][..],
            &[0],
            &[9, 1, 2],
            &[1, 0, 0],
            &[2; 24],
            &[2; 26],
            &[3, 0, 0, 0, 0, 0, 0, 0, 0, 2],
            &[3, 0, 0, 0, 0, 0, 0, 0, 0, 1, 5],
            &[5, 0, 0, 0],
            &[5, 0, 0, 0, 0, 0],
            &[6, 0, 0, 0, 0, 3],
            &[6, 0, 0, 0, 0],
        ] {
            assert!(Wr::decode(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn regions_check_bounds_and_rights() {
        let mut r = Regions::default();
        let rw = Access {
            remote_write: true,
            remote_read: true,
        };
        let a = r.register(None, 16, rw);
        let b = r.register(
            Some(5),
            8,
            Access {
                remote_write: false,
                remote_read: true,
            },
        );
        assert_eq!((a, b), (0, 5));
        assert_eq!(r.bytes(), 24);
        r.remote_write(a, 12, &[1, 2, 3, 4]).unwrap();
        assert_eq!(&r.local(a)[12..], &[1, 2, 3, 4]);
        assert!(r.remote_write(a, 13, &[1, 2, 3, 4]).is_err());
        assert!(r.remote_write(a, u64::MAX, &[1]).is_err());
        assert!(r.remote_write(b, 0, &[1]).is_err());
        assert!(r.remote_write(4, 0, &[1]).is_err());
        assert_eq!(r.remote_read(a, 14, 2, 0).unwrap(), &[3, 4]);
        assert!(r.remote_read(a, 15, 2, 0).is_err());
        r.deregister(a);
        assert!(r.remote_read(a, 0, 1, 0).is_err());
        assert_eq!(r.register(None, 4, rw), 0);
    }

    #[test]
    fn user_regions_are_read_in_place_only_while_granted() {
        let mut r = Regions::default();
        let mut send = *b"0123456789";
        let mut recv = [0u8; 6];
        // SAFETY: both arrays outlive `r`'s uses below and are not touched meanwhile.
        let (s, d) = unsafe {
            (
                r.register_user(
                    None,
                    UserMem {
                        ptr: send.as_mut_ptr(),
                        len: send.len(),
                    },
                ),
                r.register_user(
                    None,
                    UserMem {
                        ptr: recv.as_mut_ptr(),
                        len: recv.len(),
                    },
                ),
            )
        };
        assert_eq!(r.bytes(), 0, "user buffers are not NIC memory");
        assert!(r.remote_read(s, 0, 4, 7).is_err(), "not granted yet");
        assert!(r.grant(s, 7) && r.grant(s, 7) && r.granted(s));
        assert_eq!(r.remote_read(s, 2, 4, 7).unwrap(), b"2345");
        assert!(r.remote_read(s, 2, 4, 8).is_err(), "granted to 7 only");
        assert!(r.remote_read(s, 8, 4, 7).is_err(), "out of bounds");
        assert!(
            r.remote_write(s, 0, b"x").is_err(),
            "never remotely writable"
        );
        r.local_write(d, 1, b"abcd").unwrap();
        assert!(r.local_write(d, 3, b"abcd").is_err());
        assert!(r.revoke(s, 7) && r.granted(s) && r.revoke(s, 7));
        assert!(!r.revoke(s, 7) && !r.granted(s));
        assert!(r.remote_read(s, 0, 1, 7).is_err(), "invalidated");
        assert_eq!(r.user_regions().len(), 2);
        assert!(r.snapshot(s).is_none());
        drop(r);
        assert_eq!(&recv, b"\0abcd\0");
    }
}
