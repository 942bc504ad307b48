//! The job's parameters from the server's COLL answers: what every client computes after
//! start-up (the minimums, the agreed collective thresholds, the hosts and procs in global
//! order), with the report's consistency rules checked.

use std::collections::BTreeMap;
use std::fmt;

use crate::link::{LinkConfig, ProcTable};
use crate::packet::ProcId;
use crate::startup::label;

/// Default of C_COLL_XSIZE when a client sends -1.
pub const DEFAULT_COLL_XSIZE: i32 = 1024;
/// Default of C_COLL_MAXLINEAR when a client sends -1.
pub const DEFAULT_COLL_MAXLINEAR: i32 = 4;
/// The smallest C_TAGUB a client may send.
pub const MIN_TAGUB: i32 = 32767;

/// One IMPI host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Host {
    /// Its client.
    pub client: u32,
    /// H_IPV6.
    pub addr: [u8; 16],
    /// H_PORT.
    pub port: i32,
    /// Global ranks of its procs (consecutive).
    pub ranks: std::ops::Range<u32>,
}

/// Everything start-up decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobParams {
    /// Number of clients.
    pub nclients: u32,
    /// The IMPI version every pair uses (only 0.0 exists).
    pub version: (u32, u32),
    /// Procs per client.
    pub client_nprocs: Vec<u32>,
    /// Minimum C_DATALEN, ackmark and hiwater: what every link uses.
    pub link: LinkConfig,
    /// Minimum C_TAGUB (MPI_TAG_UB of the job).
    pub tag_ub: i32,
    /// Agreed C_COLL_XSIZE (-1 replaced by the default).
    pub coll_xsize: i32,
    /// Agreed C_COLL_MAXLINEAR (-1 replaced by the default).
    pub coll_maxlinear: i32,
    /// Hosts in global order.
    pub hosts: Vec<Host>,
    /// Procs in global-rank order.
    pub procs: Vec<ProcId>,
}

/// Why the answers do not make a job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamsError(pub String);

impl fmt::Display for ParamsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IMPI start-up: {}", self.0)
    }
}

impl std::error::Error for ParamsError {}

fn err<T>(s: String) -> Result<T, ParamsError> {
    Err(ParamsError(s))
}

/// Split a payload into `size`-byte items.
fn items(data: &[u8], size: usize, what: &str) -> Result<Vec<[u8; 16]>, ParamsError> {
    if !data.len().is_multiple_of(size) {
        return err(format!(
            "{what}: {} bytes is not a multiple of {size}",
            data.len()
        ));
    }
    Ok(data
        .chunks(size)
        .map(|c| {
            let mut v = [0u8; 16];
            v[..size].copy_from_slice(c);
            v
        })
        .collect())
}

fn int4s(data: &[u8], what: &str) -> Result<Vec<i32>, ParamsError> {
    Ok(items(data, 4, what)?
        .iter()
        .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        .collect())
}

impl JobParams {
    /// Compute the job from the answers (label → (client_mask, data)) to every label of
    /// [`label::ALL`].
    pub fn from_answers(
        nclients: u32,
        answers: &BTreeMap<i32, (u32, Vec<u8>)>,
    ) -> Result<JobParams, ParamsError> {
        let full = if nclients >= 32 {
            u32::MAX
        } else {
            (1u32 << nclients) - 1
        };
        let get = |l: i32, what: &str| -> Result<&[u8], ParamsError> {
            match answers.get(&l) {
                None => err(format!("no answer for {what}")),
                Some((mask, _)) if *mask != full => err(format!(
                    "{what}: client mask 0x{mask:x}, every one of {nclients} clients must send it"
                )),
                Some((_, d)) => Ok(d),
            }
        };
        let per_client = |l: i32, what: &str| -> Result<Vec<i32>, ParamsError> {
            let v = int4s(get(l, what)?, what)?;
            if v.len() != nclients as usize {
                return err(format!("{what}: {} values for {nclients} clients", v.len()));
            }
            Ok(v)
        };

        // C_VERSION: variable length per client, so only the whole can be checked: every
        // client must list 0.0, the one version that exists.
        let versions = get(label::C_VERSION, "C_VERSION")?;
        let pairs = items(versions, 8, "C_VERSION")?;
        let zeros = pairs.iter().filter(|p| p[..8] == [0; 8]).count();
        if zeros != nclients as usize {
            return err(format!(
                "C_VERSION: {zeros} of {nclients} clients list version 0.0 (mandatory)"
            ));
        }

        let nhosts = per_client(label::C_NHOSTS, "C_NHOSTS")?;
        let nprocs = per_client(label::C_NPROCS, "C_NPROCS")?;
        if let Some(c) = nhosts.iter().position(|&n| n < 1) {
            return err(format!("C_NHOSTS: client {c} has {} hosts", nhosts[c]));
        }
        if let Some(c) = nprocs.iter().position(|&n| n < 1) {
            return err(format!("C_NPROCS: client {c} has {} procs", nprocs[c]));
        }
        let datalen = per_client(label::C_DATALEN, "C_DATALEN")?
            .into_iter()
            .map(|v| v as u32)
            .min()
            .unwrap_or(0);
        if datalen == 0 {
            return err("C_DATALEN: a client sent 0 (at least 1)".into());
        }
        let tagubs = per_client(label::C_TAGUB, "C_TAGUB")?;
        if let Some(c) = tagubs.iter().position(|&t| t < MIN_TAGUB) {
            return err(format!(
                "C_TAGUB: client {c} sent {} (at least {MIN_TAGUB})",
                tagubs[c]
            ));
        }
        let agreed = |l: i32, what: &str, default: i32| -> Result<i32, ParamsError> {
            let v: Vec<i32> = per_client(l, what)?
                .into_iter()
                .map(|x| if x == -1 { default } else { x })
                .collect();
            if v.iter().any(|&x| x != v[0]) {
                return err(format!(
                    "{what}: clients disagree ({v:?}, -1 meaning {default})"
                ));
            }
            Ok(v[0])
        };
        let coll_xsize = agreed(label::C_COLL_XSIZE, "C_COLL_XSIZE", DEFAULT_COLL_XSIZE)?;
        let coll_maxlinear = agreed(
            label::C_COLL_MAXLINEAR,
            "C_COLL_MAXLINEAR",
            DEFAULT_COLL_MAXLINEAR,
        )?;

        let total_hosts: usize = nhosts.iter().map(|&n| n as usize).sum();
        let total_procs: usize = nprocs.iter().map(|&n| n as usize).sum();
        let per_host = |l: i32, what: &str| -> Result<Vec<i32>, ParamsError> {
            let v = int4s(get(l, what)?, what)?;
            if v.len() != total_hosts {
                return err(format!(
                    "{what}: {} values for {total_hosts} hosts",
                    v.len()
                ));
            }
            Ok(v)
        };
        let addrs = items(get(label::H_IPV6, "H_IPV6")?, 16, "H_IPV6")?;
        if addrs.len() != total_hosts {
            return err(format!(
                "H_IPV6: {} addresses for {total_hosts} hosts",
                addrs.len()
            ));
        }
        let ports = per_host(label::H_PORT, "H_PORT")?;
        let host_nprocs = per_host(label::H_NPROCS, "H_NPROCS")?;
        let ackmark = per_host(label::H_ACKMARK, "H_ACKMARK")?
            .into_iter()
            .map(|v| v as u32)
            .min()
            .unwrap_or(0);
        let hiwater = per_host(label::H_HIWATER, "H_HIWATER")?
            .into_iter()
            .map(|v| v as u32)
            .min()
            .unwrap_or(0);
        if ackmark < 1 || ackmark > hiwater {
            return err(format!(
                "flow control: need 1 <= ackmark ({ackmark}) <= hiwater ({hiwater})"
            ));
        }

        let mut hosts = Vec::with_capacity(total_hosts);
        let mut h = 0usize;
        let mut rank = 0u32;
        for (c, (&nh, &np)) in nhosts.iter().zip(&nprocs).enumerate() {
            let mut sum = 0i64;
            for _ in 0..nh {
                let n = host_nprocs[h];
                if n < 1 {
                    return err(format!("H_NPROCS: host {h} has {n} procs"));
                }
                sum += i64::from(n);
                hosts.push(Host {
                    client: c as u32,
                    addr: addrs[h],
                    port: ports[h],
                    ranks: rank..rank + n as u32,
                });
                rank += n as u32;
                h += 1;
            }
            if sum != i64::from(np) {
                return err(format!(
                    "client {c}: its hosts carry {sum} procs, C_NPROCS says {np}"
                ));
            }
        }

        let pids = items(get(label::P_PID, "P_PID")?, 8, "P_PID")?;
        let ids = items(get(label::P_IPV6, "P_IPV6")?, 16, "P_IPV6")?;
        if pids.len() != total_procs || ids.len() != total_procs {
            return err(format!(
                "P_IPV6/P_PID: {} and {} values for {total_procs} procs",
                ids.len(),
                pids.len()
            ));
        }
        let procs: Vec<ProcId> = ids
            .iter()
            .zip(&pids)
            .map(|(id, p)| ProcId {
                hostid: *id,
                pid: i64::from_be_bytes(p[..8].try_into().expect("8")),
            })
            .collect();
        // Two procs with one identity could not be told apart on the wire.
        ProcTable::new(procs.clone()).map_err(|e| ParamsError(e.to_string()))?;

        Ok(JobParams {
            nclients,
            version: (0, 0),
            client_nprocs: nprocs.iter().map(|&n| n as u32).collect(),
            link: LinkConfig {
                datalen,
                ackmark,
                hiwater,
            },
            tag_ub: *tagubs.iter().min().expect("at least one client"),
            coll_xsize,
            coll_maxlinear,
            hosts,
            procs,
        })
    }

    /// The proc table for the links.
    pub fn proc_table(&self) -> ProcTable {
        ProcTable::new(self.procs.clone()).expect("checked in from_answers")
    }
}
