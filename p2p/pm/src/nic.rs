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
//! * `4` SEND: data (the rest), placed by the receiver into its shared receive queue.

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

struct Region {
    mem: Vec<u8>,
    access: Access,
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
        self.regions[k] = Some(Region {
            mem: vec![0; len],
            access,
        });
        k as u32
    }

    /// Drop a region; later remote accesses to its key fail.
    pub fn deregister(&mut self, key: u32) {
        if let Some(r) = self.regions.get_mut(key as usize) {
            *r = None;
        }
    }

    /// Bytes registered in all regions.
    pub fn bytes(&self) -> usize {
        self.regions.iter().flatten().map(|r| r.mem.len()).sum()
    }

    /// A copy of a region and its rights (checkpoints).
    pub fn snapshot(&self, key: u32) -> Option<(Vec<u8>, Access)> {
        let r = self.regions.get(key as usize)?.as_ref()?;
        Some((r.mem.clone(), r.access))
    }

    /// Local access (no rights checked).
    pub fn local(&self, key: u32) -> &[u8] {
        &self.regions[key as usize].as_ref().expect("registered").mem
    }

    /// Local access (no rights checked).
    pub fn local_mut(&mut self, key: u32) -> &mut [u8] {
        &mut self.regions[key as usize].as_mut().expect("registered").mem
    }

    fn span(&self, key: u32, offset: u64, len: usize) -> Result<(usize, usize), AccessError> {
        let r = self
            .regions
            .get(key as usize)
            .and_then(Option::as_ref)
            .ok_or_else(|| AccessError(format!("no region {key}")))?;
        let start = usize::try_from(offset).ok();
        match start.and_then(|s| s.checked_add(len).map(|e| (s, e))) {
            Some((s, e)) if e <= r.mem.len() => Ok((s, e)),
            _ => Err(AccessError(format!(
                "{len} bytes at {offset} outside region {key} of {} bytes",
                r.mem.len()
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
        r.mem[s..e].copy_from_slice(data);
        Ok(())
    }

    /// Serve a remote PULL.
    pub fn remote_read(&self, key: u32, offset: u64, len: usize) -> Result<&[u8], AccessError> {
        let (s, e) = self.span(key, offset, len)?;
        let r = self.regions[key as usize].as_ref().unwrap();
        if !r.access.remote_read {
            return Err(AccessError(format!(
                "region {key} is not remotely readable"
            )));
        }
        Ok(&r.mem[s..e])
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
        ];
        for wr in cases {
            wr.encode(&mut out);
            assert_eq!(Wr::decode(&out).unwrap(), wr);
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
        assert_eq!(r.remote_read(a, 14, 2).unwrap(), &[3, 4]);
        assert!(r.remote_read(a, 15, 2).is_err());
        r.deregister(a);
        assert!(r.remote_read(a, 0, 1).is_err());
        assert_eq!(r.register(None, 4, rw), 0);
    }
}
