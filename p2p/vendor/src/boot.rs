//! The vendor bootstrap: a process started by the vendor's own launcher (`mpiexec.hydra`,
//! `mpirun.openmpi`, usually through `mpirun --vendor`) takes its rank, the job's size,
//! the placement and the peers' cards from the vendor MPI, so that Tsunagi's
//! MPI_COMM_WORLD is the vendor's world.
//!
//! Detected by `TSUNAGI_VENDOR`. Cards put before a fence are exchanged at the fence with
//! one MPI_Allgather of their lengths and one MPI_Allgatherv of `key NUL value NUL ...`.

use std::collections::HashMap;
use std::ffi::c_int;

use tsunagi_p2p::boot::{Bootstrap, BootstrapFactory, Placement};
use tsunagi_p2p::{P2pError, Rank};

use crate::vendor::{self, check, Vendor};

/// The vendor bootstrap's registration.
pub struct VendorBootstrapFactory;

/// The one instance to list in a registry.
pub static BOOTSTRAP: VendorBootstrapFactory = VendorBootstrapFactory;

impl BootstrapFactory for VendorBootstrapFactory {
    fn name(&self) -> &'static str {
        "vendor"
    }
    fn detect(&self) -> Result<Option<Box<dyn Bootstrap>>, P2pError> {
        let value = match std::env::var("TSUNAGI_VENDOR") {
            Ok(v) if !v.trim().is_empty() => v,
            _ => return Ok(None),
        };
        let choice = vendor::choose(&value)?;
        let v = vendor::init(&choice)?;
        Ok(Some(Box::new(VendorBootstrap::start(v)?)))
    }
}

/// A bootstrap over the vendor's MPI_COMM_WORLD.
pub struct VendorBootstrap {
    v: &'static Vendor,
    job_id: String,
    placement: Placement,
    pending: Vec<(String, String)>,
    store: HashMap<String, String>,
    finalized: bool,
}

/// Bytes of a host id in the start-up exchange.
const HOST_ID_BYTES: usize = 256;

// One host id and one numbering of nodes for every exchange of host ids (the core's too).
use tsunagi_p2p::boot::host_id;
pub use tsunagi_p2p::boot::nodes_of;

/// Encode cards as `key NUL value NUL ...` (keys and values never hold NUL).
pub fn encode_cards(cards: &[(String, String)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (k, v) in cards {
        out.extend_from_slice(k.as_bytes());
        out.push(0);
        out.extend_from_slice(v.as_bytes());
        out.push(0);
    }
    out
}

/// Inverse of [`encode_cards`], rejecting malformed input.
pub fn decode_cards(bytes: &[u8]) -> Result<Vec<(String, String)>, String> {
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    if bytes.last() != Some(&0) {
        return Err("card list not NUL-terminated".into());
    }
    let fields: Vec<&[u8]> = bytes[..bytes.len() - 1].split(|&b| b == 0).collect();
    if !fields.len().is_multiple_of(2) {
        return Err("card list with a key and no value".into());
    }
    fields
        .chunks(2)
        .map(|kv| {
            let s = |b: &[u8]| {
                std::str::from_utf8(b)
                    .map(str::to_string)
                    .map_err(|_| "card not UTF-8".to_string())
            };
            Ok((s(kv[0])?, s(kv[1])?))
        })
        .collect()
}

impl VendorBootstrap {
    fn start(v: &'static Vendor) -> Result<VendorBootstrap, P2pError> {
        // Host ids and rank 0's pid (for the job id) in one exchange.
        let mut mine = vec![0u8; HOST_ID_BYTES + 4];
        let id = host_id();
        let n = id.len().min(HOST_ID_BYTES - 1);
        mine[..n].copy_from_slice(&id.as_bytes()[..n]);
        mine[HOST_ID_BYTES..].copy_from_slice(&std::process::id().to_le_bytes());
        let mut all = vec![0u8; mine.len() * v.size];
        // SAFETY: send holds mine.len() bytes, recv holds that times the world size, as
        // MPI_Allgather of MPI_BYTE over the vendor's world requires.
        let rc = unsafe { (v.api.allgather)(mine.as_ptr(), mine.len() as c_int, all.as_mut_ptr()) };
        check(v.api, "MPI_Allgather (start-up)", rc)?;
        let ids: Vec<String> = all
            .chunks(mine.len())
            .map(|c| {
                let end = c[..HOST_ID_BYTES].iter().position(|&b| b == 0).unwrap_or(0);
                String::from_utf8_lossy(&c[..end]).into_owned()
            })
            .collect();
        let pid0 = u32::from_le_bytes(all[HOST_ID_BYTES..HOST_ID_BYTES + 4].try_into().unwrap());
        Ok(VendorBootstrap {
            v,
            job_id: format!("{}_{pid0}", v.flavor.name()),
            placement: Placement::one_site(nodes_of(&ids)),
            pending: Vec::new(),
            store: HashMap::new(),
            finalized: false,
        })
    }
}

impl Bootstrap for VendorBootstrap {
    fn name(&self) -> &'static str {
        "vendor"
    }
    fn rank(&self) -> Rank {
        self.v.rank
    }
    fn size(&self) -> usize {
        self.v.size
    }
    fn job_id(&self) -> &str {
        &self.job_id
    }
    fn placement(&mut self) -> Result<Option<Placement>, P2pError> {
        Ok(Some(self.placement.clone()))
    }
    fn put(&mut self, key: &str, value: &str) -> Result<(), P2pError> {
        if key.contains('\0') || value.contains('\0') {
            return Err(P2pError::Other(format!(
                "vendor bootstrap: NUL in card {key:?}"
            )));
        }
        self.pending.push((key.to_string(), value.to_string()));
        Ok(())
    }
    fn get(&mut self, key: &str) -> Result<Option<String>, P2pError> {
        Ok(self.store.get(key).cloned())
    }
    fn fence(&mut self) -> Result<(), P2pError> {
        let api = self.v.api;
        let mine = encode_cards(&std::mem::take(&mut self.pending));
        let len = i32::try_from(mine.len())
            .map_err(|_| P2pError::Other("vendor bootstrap: cards too large".into()))?;
        let mut lens = vec![0u8; 4 * self.v.size];
        // SAFETY: 4 bytes sent, 4 per rank received, as the buffers hold.
        let rc = unsafe { (api.allgather)(len.to_le_bytes().as_ptr(), 4, lens.as_mut_ptr()) };
        check(api, "MPI_Allgather (fence)", rc)?;
        let counts: Vec<c_int> = lens
            .chunks(4)
            .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let mut displs = Vec::with_capacity(counts.len());
        let mut total: i64 = 0;
        for &c in &counts {
            if c < 0 {
                return Err(P2pError::Other(
                    "vendor bootstrap: negative card length".into(),
                ));
            }
            displs.push(
                c_int::try_from(total)
                    .map_err(|_| P2pError::Other("vendor bootstrap: cards too large".into()))?,
            );
            total += c as i64;
        }
        if total == 0 {
            // Nobody published anything (Open MPI rejects an all-empty MPI_Allgatherv).
            return Ok(());
        }
        let mut all = vec![0u8; total as usize];
        // SAFETY: mine holds len bytes; all holds the sum of counts, with displs the
        // prefix sums, as MPI_Allgatherv requires; counts/displs have one entry per rank.
        let rc = unsafe {
            (api.allgatherv)(
                mine.as_ptr(),
                len,
                all.as_mut_ptr(),
                counts.as_ptr(),
                displs.as_ptr(),
            )
        };
        check(api, "MPI_Allgatherv (fence)", rc)?;
        for (i, &c) in counts.iter().enumerate() {
            let at = displs[i] as usize;
            let cards = decode_cards(&all[at..at + c as usize])
                .map_err(|e| P2pError::Other(format!("vendor bootstrap: rank {i}: {e}")))?;
            self.store.extend(cards);
        }
        Ok(())
    }
    fn abort(&mut self, code: i32, msg: &str) {
        if !msg.is_empty() {
            eprintln!("tsunagi: rank {} aborts the job: {msg}", self.v.rank);
        }
        // SAFETY: the vendor is initialized; MPI_Abort ends the vendor job (the vendor's
        // launcher kills every process of it).
        unsafe { (self.v.api.abort)(code) };
    }
    fn finalize(&mut self) -> Result<(), P2pError> {
        if self.finalized {
            return Ok(());
        }
        self.finalized = true;
        // SAFETY: called once, after Tsunagi's progress threads stopped; the shim completes
        // the transport's outstanding vendor requests before MPI_Finalize.
        let rc = unsafe { (self.v.api.finalize)() };
        check(self.v.api, "MPI_Finalize", rc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cards_round_trip_and_malformed_rejected() {
        let cards = vec![
            (
                "tsunagi-tcp-0".to_string(),
                "tcp:127.0.0.1:4000".to_string(),
            ),
            ("k".to_string(), String::new()),
        ];
        let b = encode_cards(&cards);
        assert_eq!(decode_cards(&b).unwrap(), cards);
        assert!(decode_cards(b"").unwrap().is_empty());
        assert!(decode_cards(b"k\0v").is_err());
        assert!(decode_cards(b"k\0").is_err());
        assert!(decode_cards(b"k\0\xff\0").is_err());
    }

    #[test]
    fn nodes_numbered_by_first_rank() {
        let ids: Vec<String> = ["b", "a", "b", "c"].iter().map(|s| s.to_string()).collect();
        assert_eq!(nodes_of(&ids), vec![0, 1, 0, 2]);
    }
}
