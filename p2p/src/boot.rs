//! Start-up as components: how a process learns who it is ([`Bootstrap`]) and how each
//! transport declares itself and comes up ([`TransportFactory`]).
//!
//! The MPI core names no transport: the program (the C library, the Rust API) hands it a
//! [`Registry`] of factories, and start-up runs every chosen factory through the same three
//! phases around two collective fences of the bootstrap:
//!
//! 1. [`TransportFactory::start`], before the first fence: create what others will attach
//!    to (a shared-memory segment, a listening socket) and publish a card with
//!    [`Bootstrap::put`];
//! 2. [`Starting::connect`], after the first fence: read the peers' cards, attach;
//! 3. [`Starting::finish`], after the second fence (every peer has attached): drop what
//!    must not outlive start-up (a segment's name) and hand over the [`Transport`].
//!
//! A transport is a new crate that implements these two traits plus one line in the
//! registry (`tsunagi-transports`).

use crate::device::Device;
use crate::{P2pError, Rank, Transport};

/// Where every rank of the job runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// Node id of every world rank (ranks with one id share memory).
    pub node: Vec<u32>,
    /// Site id of every world rank (ranks with one id are one cluster, one vendor MPI).
    pub site: Vec<u32>,
}

impl Placement {
    /// Every rank on its own site 0, nodes as given.
    pub fn one_site(node: Vec<u32>) -> Placement {
        let site = vec![0; node.len()];
        Placement { node, site }
    }
}

/// How a process finds its rank, the job's size and its peers' cards: a PMI client, a
/// singleton, later a vendor MPI or an IMPI server.
///
/// Keys and values are short printable strings (PMI limits apply: keep values under
/// ~1000 bytes or let the implementation split them).
pub trait Bootstrap: Send {
    /// A short name for messages ("pmi", "singleton").
    fn name(&self) -> &'static str;
    /// This process's world rank.
    fn rank(&self) -> Rank;
    /// Number of ranks in the job.
    fn size(&self) -> usize;
    /// An id of the job, made of `[A-Za-z0-9_-]` only, usable in file and socket names.
    fn job_id(&self) -> &str;
    /// The placement the launcher knows, if it knows one; otherwise start-up works it out
    /// by exchanging host ids.
    fn placement(&mut self) -> Result<Option<Placement>, P2pError>;
    /// Publish `value` under `key` (visible to all after the next [`Bootstrap::fence`]).
    fn put(&mut self, key: &str, value: &str) -> Result<(), P2pError>;
    /// Read what some rank published under `key` before the last fence.
    fn get(&mut self, key: &str) -> Result<Option<String>, P2pError>;
    /// Collective over the whole job: every put before it is visible to every get after.
    fn fence(&mut self) -> Result<(), P2pError>;
    /// Ask the launcher to end the whole job (best effort; the caller exits after it).
    fn abort(&mut self, code: i32, msg: &str);
    /// Tell the launcher this rank finished cleanly.
    fn finalize(&mut self) -> Result<(), P2pError>;
    /// MPI_APPNUM of this process.
    fn appnum(&self) -> i32 {
        0
    }
    /// Start processes through the launcher (MPI_Comm_spawn; PMI-1 `spawn`), with
    /// `preput` in their key-value space. `None` when this launcher cannot start
    /// processes (a singleton): the caller starts them another way.
    fn spawn(
        &mut self,
        _apps: &[SpawnApp],
        _preput: &[(String, String)],
    ) -> Option<Result<(), P2pError>> {
        None
    }
    /// Ask the launcher's name service (MPI_Publish_name and friends). `None` when the
    /// launcher has none.
    fn name_service(&mut self, _req: NameRequest<'_>) -> Option<Result<NameAnswer, P2pError>> {
        None
    }
}

/// One application of a spawn request (MPI_Comm_spawn has one, _multiple several).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpawnApp {
    pub command: String,
    pub args: Vec<String>,
    pub procs: usize,
    /// Info keys for the launcher (`host`, `wdir`, `path`).
    pub info: Vec<(String, String)>,
}

/// A request to the launcher's name service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameRequest<'a> {
    Publish { service: &'a str, port: &'a str },
    Unpublish { service: &'a str, port: &'a str },
    Lookup { service: &'a str },
}

/// The name service's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NameAnswer {
    /// Done (publish, unpublish).
    Done,
    /// The port published under the service (lookup).
    Port(String),
    /// Publish: the service is taken; unpublish: it is not published (or with another
    /// port). The reason.
    ServiceRefused(String),
    /// Lookup: nothing is published under the name. The reason.
    NotFound(String),
    /// The name service failed otherwise.
    Failed(String),
}

/// Makes a [`Bootstrap`] when the environment says this process was started by its
/// launcher (for example, the vendor MPI's starter). Tried in registry order before the
/// core's own PMI client and the singleton.
pub trait BootstrapFactory: Sync {
    /// A short name for messages.
    fn name(&self) -> &'static str;
    /// `Ok(None)` when this process was not started this way.
    fn detect(&self) -> Result<Option<Box<dyn Bootstrap>>, P2pError>;
}

/// Which peers a transport serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// The other ranks on this rank's node.
    Node,
    /// The ranks on other nodes.
    Remote,
}

/// What a factory is told when it starts.
pub struct StartInfo<'a> {
    /// This rank.
    pub rank: Rank,
    /// The job's size.
    pub size: usize,
    /// The bootstrap's job id (safe in names).
    pub job_id: &'a str,
    /// Where every rank runs.
    pub placement: &'a Placement,
    /// The peers this transport will serve (never this rank), ascending. Non-empty.
    pub peers: &'a [Rank],
}

impl StartInfo<'_> {
    /// This rank's node id.
    pub fn my_node(&self) -> u32 {
        self.placement.node[self.rank as usize]
    }
}

/// A transport's declaration: its name, the peers it serves and how it starts.
pub trait TransportFactory: Sync {
    /// The name users select it by (`TSUNAGI_INTRANODE` / `TSUNAGI_INTERNODE`).
    fn name(&self) -> &'static str;
    /// Which peers it serves.
    fn reach(&self) -> Reach;
    /// The format of the card it publishes, for documentation and error messages
    /// (`"tcp:<ip>:<port>"`; empty if it publishes none).
    fn card_format(&self) -> &'static str;
    /// Phase 1, before the first fence: create, listen, publish a card.
    fn start(
        &self,
        info: &StartInfo<'_>,
        boot: &mut dyn Bootstrap,
    ) -> Result<Box<dyn Starting>, P2pError>;
}

/// A transport on its way up (phases 2 and 3, see the module doc).
pub trait Starting: Send {
    /// Phase 2, after the first fence: read the peers' cards, attach.
    fn connect(&mut self, info: &StartInfo<'_>, boot: &mut dyn Bootstrap) -> Result<(), P2pError>;
    /// Phase 3, after the second fence: the ready transport.
    fn finish(self: Box<Self>, info: &StartInfo<'_>) -> Result<Box<dyn Transport>, P2pError>;
}

/// A job that spans sites: joins this site's processes, started by the site's own
/// bootstrap, with the other sites' into one MPI_COMM_WORLD, and brings the native
/// [`Device`]s that reach the other sites (IMPI).
pub trait GridJoin: Sync {
    /// A short name for messages ("impi").
    fn name(&self) -> &'static str;
    /// Whether this process was asked to join a grid (for example, an IMPI server address
    /// in its environment).
    fn wanted(&self) -> bool;
    /// Join. Collective over the site (every rank of `site` calls it) and, through the
    /// grid's own rendezvous, over every site.
    fn join(&self, site: Box<dyn Bootstrap>) -> Result<Joined, P2pError>;
}

/// The outcome of a [`GridJoin`].
pub struct Joined {
    /// The job-wide bootstrap: world rank and size over every site, and a placement whose
    /// `site` says which ranks are this site's. Its put/get/fence stay within the site
    /// (transports only ever serve ranks of their own site).
    pub boot: Box<dyn Bootstrap>,
    /// The devices and the world ranks each serves (the other sites' ranks).
    pub devices: Vec<(Box<dyn Device>, Vec<Rank>)>,
}

/// What a program offers the core at start-up: its transports, extra bootstraps and ways to
/// join other sites.
#[derive(Clone, Copy)]
pub struct Registry {
    /// Transports, in order of preference per [`Reach`] (the first of a reach is its
    /// default).
    pub transports: &'static [&'static dyn TransportFactory],
    /// Bootstraps tried before the core's PMI client and the singleton.
    pub bootstraps: &'static [&'static dyn BootstrapFactory],
    /// Grid joins, tried in order once the site's bootstrap is known; the first that is
    /// [`GridJoin::wanted`] joins.
    pub grids: &'static [&'static dyn GridJoin],
}

impl Registry {
    /// The transport of `reach` named `wanted`, or the first of that reach when `wanted`
    /// is empty.
    pub fn choose(
        &self,
        reach: Reach,
        wanted: &str,
    ) -> Result<&'static dyn TransportFactory, String> {
        let of_reach = || self.transports.iter().filter(|f| f.reach() == reach);
        let found = if wanted.is_empty() {
            of_reach().next()
        } else {
            of_reach().find(|f| f.name() == wanted)
        };
        found.copied().ok_or_else(|| {
            let names: Vec<&str> = of_reach().map(|f| f.name()).collect();
            let what = match reach {
                Reach::Node => "within a node",
                Reach::Remote => "between nodes",
            };
            if wanted.is_empty() {
                format!("no transport {what} is registered")
            } else {
                format!(
                    "no transport '{wanted}' {what}; registered: {}",
                    names.join(", ")
                )
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fake(&'static str, Reach);
    impl TransportFactory for Fake {
        fn name(&self) -> &'static str {
            self.0
        }
        fn reach(&self) -> Reach {
            self.1
        }
        fn card_format(&self) -> &'static str {
            ""
        }
        fn start(
            &self,
            _: &StartInfo<'_>,
            _: &mut dyn Bootstrap,
        ) -> Result<Box<dyn Starting>, P2pError> {
            Err(P2pError::Other("not started in this test".into()))
        }
    }
    static SHM: Fake = Fake("shm", Reach::Node);
    static TCP: Fake = Fake("tcp", Reach::Remote);
    static STREAM: Fake = Fake("stream", Reach::Remote);

    #[test]
    fn choose_by_reach_and_name() {
        static ALL: [&dyn TransportFactory; 3] = [&SHM, &TCP, &STREAM];
        let r = Registry {
            transports: &ALL,
            bootstraps: &[],
            grids: &[],
        };
        assert_eq!(r.choose(Reach::Node, "").unwrap().name(), "shm");
        assert_eq!(r.choose(Reach::Remote, "").unwrap().name(), "tcp");
        assert_eq!(r.choose(Reach::Remote, "stream").unwrap().name(), "stream");
        let e = r.choose(Reach::Remote, "pm").err().unwrap();
        assert!(e.contains("'pm'") && e.contains("tcp, stream"), "{e}");
        assert!(r.choose(Reach::Node, "tcp").is_err());
        let empty = Registry {
            transports: &[],
            bootstraps: &[],
            grids: &[],
        };
        assert!(empty.choose(Reach::Node, "").is_err());
    }
}

/// This host's name (MPI_Get_processor_name, and the first half of [`host_id`]).
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into our stack buffer.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) };
    if rc != 0 {
        return "localhost".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// What identifies a host in a start-up exchange of host ids: its name and its network
/// namespace (so that network namespaces on one machine count as separate hosts).
pub fn host_id() -> String {
    let ns = std::fs::read_link("/proc/self/ns/net")
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!("{}|{}", hostname(), ns)
}

/// Node ids from the ranks' host ids: ranks with one host id share a node, nodes numbered
/// in order of their first rank.
pub fn nodes_of(ids: &[String]) -> Vec<u32> {
    let mut seen: Vec<&str> = Vec::new();
    ids.iter()
        .map(|h| match seen.iter().position(|s| *s == h) {
            Some(i) => i as u32,
            None => {
                seen.push(h);
                (seen.len() - 1) as u32
            }
        })
        .collect()
}

#[cfg(test)]
mod host_tests {
    use super::*;

    #[test]
    fn host_ids_name_the_host_and_nodes_number_by_first_rank() {
        let id = host_id();
        assert!(id.starts_with(&format!("{}|", hostname())), "{id}");
        let ids: Vec<String> = ["b", "a", "b", "c"].iter().map(|s| s.to_string()).collect();
        assert_eq!(nodes_of(&ids), vec![0, 1, 0, 2]);
    }
}
