//! Joining sites over IMPI at start-up: Tsunagi's [`GridJoin`].
//!
//! A site's processes are started by the site's own launcher (Tsunagi's mpirun, the vendor
//! MPI's starter, Slurm) and know their site rank from its bootstrap. When the environment
//! names an IMPI server (`TSUNAGI_IMPI_SERVER=HOST:PORT`, `TSUNAGI_IMPI_CLIENT=K`, set by
//! `mpirun --client K --server HOST:PORT`), start-up goes on like this:
//!
//! 1. every process listens on one TCP port (its IMPI host) and publishes it in the site;
//! 2. the site's rank 0 is the IMPI client: it registers the site's hosts and procs with
//!    the server (AUTH, IMPI, COLL per label, DONE) and publishes the answers in the site;
//! 3. every process computes the job (global ranks in client order, the negotiated
//!    parameters) and connects to every host of the other sites (the higher host index
//!    connects to the lower and sends its index as a big-endian Int4, as the report says);
//! 4. the job-wide bootstrap (`GridBoot`) reports the global rank and size and a placement
//!    with a site per client; the [`ImpiDevice`] serves the other sites' ranks.
//!
//! At MPI_Finalize the devices exchange FINI; then the site's rank 0 sends FINI to the
//! server. Environment (LAM's names where LAM has one): `IMPI_AUTH_NONE`, `IMPI_AUTH_KEY`
//! (offered methods; NONE when neither is set), `TSUNAGI_IMPI_ADDR` (the IPv4 address to
//! listen on; default: the one that routes to the server), `TSUNAGI_IMPI_DATAREP`
//! (`external32`, the default, or `native` as LAM sends), `TSUNAGI_IMPI_DATALEN`,
//! `TSUNAGI_IMPI_HIWATER`, `TSUNAGI_IMPI_ACKMARK`, `TSUNAGI_IMPI_TAGUB`,
//! `TSUNAGI_IMPI_COLL_XSIZE`, `TSUNAGI_IMPI_COLL_MAXLINEAR` (the collective thresholds this
//! client offers; unset: -1, the default; the agreed values reach the collectives through
//! `tsunagi_p2p::device::grid_coll_params`).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tsunagi_p2p::boot::{Bootstrap, GridJoin, Joined, Placement};
use tsunagi_p2p::device::{DataRep, Device};
use tsunagi_p2p::{P2pError, Rank};

use crate::client::{ClientConfig, ClientStartup};
use crate::device::{HostConn, ImpiDevice};
use crate::link::{Link, LinkConfig};
use crate::params::JobParams;
use crate::startup::label;

/// How long start-up waits for the server and the other sites.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

/// Values published in the site's key-value space are cut into pieces of this many
/// characters (PMI-1 values are limited to about 1,000).
const CHUNK: usize = 800;

/// The IMPI grid join (registered in `tsunagi-transports`).
pub struct ImpiJoin;

/// The registry's instance.
pub static GRID: ImpiJoin = ImpiJoin;

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn err(msg: impl Into<String>) -> P2pError {
    P2pError::Other(msg.into())
}

fn env_num<T: std::str::FromStr>(name: &str, default: T) -> Result<T, P2pError> {
    match env(name) {
        None => Ok(default),
        Some(v) => v
            .trim()
            .parse()
            .map_err(|_| err(format!("{name}={v}: not a number"))),
    }
}

impl GridJoin for ImpiJoin {
    fn name(&self) -> &'static str {
        "impi"
    }

    fn wanted(&self) -> bool {
        env("TSUNAGI_IMPI_SERVER").is_some()
    }

    fn join(&self, site: Box<dyn Bootstrap>) -> Result<Joined, P2pError> {
        join(site)
    }
}

/// What this process tells the site about its IMPI host.
struct HostCard {
    addr: Ipv4Addr,
    port: u16,
    pid: i64,
}

fn big_endian_i32s(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_be_bytes()).collect()
}

fn mapped(addr: Ipv4Addr) -> Vec<u8> {
    let mut b = vec![0u8; 16];
    b[10] = 0xff;
    b[11] = 0xff;
    b[12..].copy_from_slice(&addr.octets());
    b
}

/// The payloads of our client: one host per process.
/// What this client contributes for C_COLL_XSIZE and C_COLL_MAXLINEAR: the user's choice
/// (`TSUNAGI_IMPI_COLL_XSIZE`, `TSUNAGI_IMPI_COLL_MAXLINEAR`; the report wants clients to
/// offer one) or -1, "the default" (1024 and 4). Every client must send the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CollChoice {
    xsize: i32,
    maxlinear: i32,
}

impl CollChoice {
    fn from_env() -> Result<CollChoice, P2pError> {
        let xsize: i32 = env_num("TSUNAGI_IMPI_COLL_XSIZE", -1)?;
        let maxlinear: i32 = env_num("TSUNAGI_IMPI_COLL_MAXLINEAR", -1)?;
        if xsize < -1 {
            return Err(err(format!(
                "TSUNAGI_IMPI_COLL_XSIZE={xsize}: must be at least 0 (or -1 for the default)"
            )));
        }
        if maxlinear < -1 {
            return Err(err(format!(
                "TSUNAGI_IMPI_COLL_MAXLINEAR={maxlinear}: must be at least 0 (or -1 for the default)"
            )));
        }
        Ok(CollChoice { xsize, maxlinear })
    }
}

fn payloads(
    cards: &[HostCard],
    cfg: LinkConfig,
    tag_ub: i32,
    coll: CollChoice,
) -> Vec<(i32, Vec<u8>)> {
    let n = cards.len() as i32;
    let hosts: Vec<u8> = cards.iter().flat_map(|c| mapped(c.addr)).collect();
    vec![
        (label::C_VERSION, vec![0; 8]),
        (label::C_NHOSTS, big_endian_i32s(&[n])),
        (label::C_NPROCS, big_endian_i32s(&[n])),
        (label::C_DATALEN, cfg.datalen.to_be_bytes().to_vec()),
        (label::C_TAGUB, big_endian_i32s(&[tag_ub])),
        (label::C_COLL_XSIZE, big_endian_i32s(&[coll.xsize])),
        (label::C_COLL_MAXLINEAR, big_endian_i32s(&[coll.maxlinear])),
        (label::H_IPV6, hosts.clone()),
        (
            label::H_PORT,
            big_endian_i32s(&cards.iter().map(|c| i32::from(c.port)).collect::<Vec<_>>()),
        ),
        (label::H_NPROCS, big_endian_i32s(&vec![1; cards.len()])),
        (
            label::H_ACKMARK,
            cards
                .iter()
                .flat_map(|_| cfg.ackmark.to_be_bytes())
                .collect(),
        ),
        (
            label::H_HIWATER,
            cards
                .iter()
                .flat_map(|_| cfg.hiwater.to_be_bytes())
                .collect(),
        ),
        (label::P_IPV6, hosts),
        (
            label::P_PID,
            cards.iter().flat_map(|c| c.pid.to_be_bytes()).collect(),
        ),
    ]
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The server's answers: label → (client mask, data).
type Answers = BTreeMap<i32, (u32, Vec<u8>)>;

/// The server's answers as one text: `nclients` then `label:mask:hex` items.
fn encode_answers(nclients: u32, answers: &Answers) -> String {
    let mut s = nclients.to_string();
    for (l, (mask, data)) in answers {
        s.push_str(&format!(";{l}:{mask}:{}", hex(data)));
    }
    s
}

fn decode_answers(s: &str) -> Option<(u32, Answers)> {
    let mut parts = s.split(';');
    let n = parts.next()?.parse().ok()?;
    let mut m = BTreeMap::new();
    for p in parts {
        let mut f = p.splitn(3, ':');
        let l = f.next()?.parse().ok()?;
        let mask = f.next()?.parse().ok()?;
        let data = unhex(f.next()?)?;
        m.insert(l, (mask, data));
    }
    Some((n, m))
}

fn put_chunked(site: &mut dyn Bootstrap, key: &str, value: &str) -> Result<(), P2pError> {
    let chunks: Vec<&str> = if value.is_empty() {
        vec![""]
    } else {
        value
            .as_bytes()
            .chunks(CHUNK)
            .map(|c| std::str::from_utf8(c).expect("ASCII"))
            .collect()
    };
    site.put(&format!("{key}-n"), &chunks.len().to_string())?;
    for (i, c) in chunks.iter().enumerate() {
        site.put(&format!("{key}-{i}"), c)?;
    }
    Ok(())
}

fn get_chunked(site: &mut dyn Bootstrap, key: &str) -> Result<Option<String>, P2pError> {
    let Some(n) = site.get(&format!("{key}-n"))? else {
        return Ok(None);
    };
    let n: usize = n.parse().map_err(|_| err(format!("{key}-n: bad count")))?;
    let mut s = String::new();
    for i in 0..n {
        s.push_str(
            &site
                .get(&format!("{key}-{i}"))?
                .ok_or_else(|| err(format!("{key}-{i} missing")))?,
        );
    }
    Ok(Some(s))
}

/// How user data crosses sites: `TSUNAGI_IMPI_DATAREP=external32` (the default: MPI's
/// portable representation, what the IMPI report asks for) or `native` (the sender's
/// packed bytes, which is what LAM/MPI 7.1 sends; every site of a job must agree).
fn data_rep() -> Result<DataRep, P2pError> {
    match env("TSUNAGI_IMPI_DATAREP").as_deref().map(str::trim) {
        None | Some("external32") => Ok(DataRep::External32),
        Some("native") => Ok(DataRep::Native),
        Some(other) => Err(err(format!(
            "TSUNAGI_IMPI_DATAREP={other}: expected external32 or native"
        ))),
    }
}

/// The address to listen on (and connect from): `TSUNAGI_IMPI_ADDR`, else the one that
/// routes to the server. `TSUNAGI_IMPI_ADDR` may list several addresses, comma-separated:
/// site rank `r` takes entry `r % n`, so that every process (each its own IMPI host) can
/// have an address of its own, which LAM needs (it tells connecting hosts apart by their
/// source address).
fn listen_address(server: SocketAddr, site_rank: usize) -> Result<Ipv4Addr, P2pError> {
    if let Some(list) = env("TSUNAGI_IMPI_ADDR") {
        let addrs: Vec<&str> = list.split(',').map(str::trim).collect();
        let a = addrs[site_rank % addrs.len()];
        return a.parse().map_err(|_| {
            err(format!(
                "TSUNAGI_IMPI_ADDR={list}: {a:?} is not an IPv4 address"
            ))
        });
    }
    let probe = UdpSocket::bind("0.0.0.0:0").map_err(|e| err(format!("UDP probe: {e}")))?;
    probe
        .connect(server)
        .map_err(|e| err(format!("no route to the IMPI server {server}: {e}")))?;
    match probe.local_addr().map(|a| a.ip()) {
        Ok(IpAddr::V4(a)) => Ok(a),
        Ok(other) => Err(err(format!(
            "the route to the IMPI server uses {other}; set TSUNAGI_IMPI_ADDR to an IPv4 address"
        ))),
        Err(e) => Err(err(format!("UDP probe: {e}"))),
    }
}

/// Site rank 0: register the site with the server; returns the connection (kept for FINI),
/// the client state and the answers.
fn register(
    server: SocketAddr,
    client: u32,
    cards: &[HostCard],
    cfg: LinkConfig,
    tag_ub: i32,
    coll: CollChoice,
) -> Result<(TcpStream, ClientStartup), P2pError> {
    let auth_key = match env("IMPI_AUTH_KEY") {
        None => None,
        Some(k) => Some(
            k.trim()
                .parse::<u64>()
                .map_err(|_| err("IMPI_AUTH_KEY must be a decimal number"))?,
        ),
    };
    let auth_none = env("IMPI_AUTH_NONE").is_some() || auth_key.is_none();
    let mut startup = ClientStartup::new(ClientConfig {
        rank: client,
        auth_none,
        auth_key,
        payloads: payloads(cards, cfg, tag_ub, coll),
    })
    .map_err(|e| err(e.to_string()))?;
    let deadline = Instant::now() + STARTUP_TIMEOUT;
    let mut stream = loop {
        match TcpStream::connect_timeout(&server, Duration::from_secs(5)) {
            Ok(s) => break s,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => return Err(err(format!("cannot reach the IMPI server {server}: {e}"))),
        }
    };
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .map_err(|e| err(e.to_string()))?;
    let mut buf = [0u8; 64 * 1024];
    while !startup.is_done() {
        let out = startup.transmit();
        if !out.is_empty() {
            stream
                .write_all(&out)
                .map_err(|e| err(format!("IMPI server {server}: {e}")))?;
        }
        match stream.read(&mut buf) {
            Ok(0) => {
                return Err(err(format!(
                    "the IMPI server {server} closed the connection during start-up \
                     (wrong client number, authentication refused, or another client failed)"
                )))
            }
            Ok(n) => startup
                .handle_input(&buf[..n])
                .map_err(|e| err(format!("IMPI server {server}: {e}")))?,
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(e) => return Err(err(format!("IMPI server {server}: {e}"))),
        }
        if Instant::now() > deadline {
            return Err(err(format!(
                "IMPI start-up through {server} did not complete within {STARTUP_TIMEOUT:?} \
                 (are all clients started?)"
            )));
        }
    }
    Ok((stream, startup))
}

fn join(mut site: Box<dyn Bootstrap>) -> Result<Joined, P2pError> {
    let server_spec = env("TSUNAGI_IMPI_SERVER").expect("wanted() checked it");
    let server = server_spec
        .trim()
        .to_socket_addrs()
        .map_err(|e| err(format!("TSUNAGI_IMPI_SERVER={server_spec}: {e}")))?
        .find(|a| a.is_ipv4())
        .ok_or_else(|| {
            err(format!(
                "TSUNAGI_IMPI_SERVER={server_spec}: no IPv4 address"
            ))
        })?;
    let client: u32 = env_num("TSUNAGI_IMPI_CLIENT", u32::MAX)?;
    if client == u32::MAX {
        return Err(err(
            "TSUNAGI_IMPI_SERVER is set but TSUNAGI_IMPI_CLIENT (this site's client number) is not",
        ));
    }
    let cfg = LinkConfig {
        datalen: env_num("TSUNAGI_IMPI_DATALEN", 65536u32)?,
        ackmark: env_num("TSUNAGI_IMPI_ACKMARK", 10u32)?,
        hiwater: env_num("TSUNAGI_IMPI_HIWATER", 20u32)?,
    };
    cfg.validate().map_err(|e| err(e.to_string()))?;
    let tag_ub: i32 = env_num("TSUNAGI_IMPI_TAGUB", i32::MAX)?;
    let coll = CollChoice::from_env()?;

    let (lr, ls) = (site.rank(), site.size());
    let addr = listen_address(server, lr as usize)?;
    let listener = TcpListener::bind(SocketAddr::new(IpAddr::V4(addr), 0))
        .map_err(|e| err(format!("listen on {addr}: {e}")))?;
    let port = listener
        .local_addr()
        .map_err(|e| err(e.to_string()))?
        .port();
    let pid = i64::from(std::process::id());
    // No spaces in key-value space values: PMI-1's wire protocol (Slurm's pmi2 plugin
    // speaks it) splits on them.
    site.put(
        &format!("tsunagi-impi-host-{lr}"),
        &format!("{addr},{port},{pid}"),
    )?;
    site.fence()?;

    // The site's rank 0 registers the site; everyone learns the outcome after a fence.
    let mut registration = None;
    if lr == 0 {
        let mut cards = Vec::with_capacity(ls);
        for r in 0..ls {
            let v = site
                .get(&format!("tsunagi-impi-host-{r}"))?
                .ok_or_else(|| err(format!("site rank {r} published no IMPI host")))?;
            let f: Vec<&str> = v.split(',').collect();
            let card = match f[..] {
                [a, p, pid] => HostCard {
                    addr: a.parse().map_err(|_| err(format!("bad host card {v}")))?,
                    port: p.parse().map_err(|_| err(format!("bad host card {v}")))?,
                    pid: pid.parse().map_err(|_| err(format!("bad host card {v}")))?,
                },
                _ => return Err(err(format!("bad host card {v}"))),
            };
            cards.push(card);
        }
        match register(server, client, &cards, cfg, tag_ub, coll) {
            Ok((stream, startup)) => {
                put_chunked(
                    site.as_mut(),
                    "tsunagi-impi-answers",
                    &encode_answers(startup.nclients(), startup.answers()),
                )?;
                registration = Some((stream, startup));
            }
            Err(e) => {
                // Tell the site why, so that every rank reports the same cause.
                // Hex: the message has spaces, which PMI-1 values cannot carry.
                put_chunked(
                    site.as_mut(),
                    "tsunagi-impi-error",
                    &hex(e.to_string().as_bytes()),
                )?;
                site.fence()?;
                return Err(e);
            }
        }
    }
    site.fence()?;
    if let Some(e) = get_chunked(site.as_mut(), "tsunagi-impi-error")? {
        let e = unhex(&e).map(|b| String::from_utf8_lossy(&b).into_owned());
        return Err(err(format!(
            "site rank 0: {}",
            e.as_deref().unwrap_or("(an unreadable error)")
        )));
    }
    let text = get_chunked(site.as_mut(), "tsunagi-impi-answers")?
        .ok_or_else(|| err("the site's rank 0 published no IMPI answers"))?;
    let (nclients, answers) =
        decode_answers(&text).ok_or_else(|| err("the IMPI answers in the site are garbled"))?;
    let params = JobParams::from_answers(nclients, &answers).map_err(|e| err(e.to_string()))?;

    // Global ranks: the clients' procs in client order.
    let k = client as usize;
    if params.client_nprocs.get(k).copied() != Some(ls as u32) {
        return Err(err(format!(
            "IMPI: client {client} registered {:?} procs but the site has {ls}",
            params.client_nprocs.get(k)
        )));
    }
    let offset: u32 = params.client_nprocs[..k].iter().sum();
    let size: usize = params.client_nprocs.iter().map(|&n| n as usize).sum();
    let me = offset + lr;

    // Placement: a site per client; a node per (client, host address).
    let mut site_of = vec![0u32; size];
    let mut node_of = vec![0u32; size];
    let mut nodes: Vec<(u32, [u8; 16])> = Vec::new();
    for h in &params.hosts {
        for r in h.ranks.clone() {
            site_of[r as usize] = h.client;
        }
    }
    for r in 0..size {
        let key = (site_of[r], params.procs[r].canonical().hostid);
        let id = match nodes.iter().position(|n| *n == key) {
            Some(i) => i,
            None => {
                nodes.push(key);
                nodes.len() - 1
            }
        };
        node_of[r] = id as u32;
    }
    let placement = Placement {
        node: node_of,
        site: site_of,
    };

    let conns = connect_hosts(&params, client, me, &listener)?;
    let table = Arc::new(params.proc_table());
    let mut with_links = Vec::with_capacity(conns.len());
    let mut peers = Vec::new();
    for (h, stream) in conns {
        let ranks: Vec<Rank> = params.hosts[h as usize].ranks.clone().collect();
        let link =
            Link::new(params.link, table.clone(), &[me], &ranks).map_err(|e| err(e.to_string()))?;
        let conn = HostConn::new(h, stream, link).map_err(|e| err(e.to_string()))?;
        peers.extend_from_slice(&ranks);
        with_links.push((conn, ranks));
    }
    let device = ImpiDevice::new(me, size, with_links, params.tag_ub, data_rep()?)?;
    tsunagi_p2p::device::set_grid_coll_params(tsunagi_p2p::device::GridCollParams {
        xsize: params.coll_xsize.max(0) as usize,
        maxlinear: params.coll_maxlinear.max(0) as usize,
    });
    let devices: Vec<(Box<dyn Device>, Vec<Rank>)> = if peers.is_empty() {
        Vec::new()
    } else {
        vec![(Box::new(device), peers)]
    };
    let job_id = format!("{}_c{client}", site.job_id());
    Ok(Joined {
        boot: Box::new(GridBoot {
            site,
            rank: me,
            size,
            placement,
            job_id,
            registration,
        }),
        devices,
    })
}

/// Connect to `to` from this host's own address (the listener's): LAM identifies a
/// connecting host by its source address, so it must be the one this host announced.
fn connect_from(listener: &TcpListener, to: SocketAddr) -> std::io::Result<TcpStream> {
    use socket2::{Domain, Protocol, Socket, Type};
    let local = listener.local_addr()?;
    let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
    s.bind(&SocketAddr::new(local.ip(), 0).into())?;
    s.connect_timeout(&to.into(), Duration::from_secs(5))?;
    Ok(s.into())
}

/// The host mesh: connect to the lower-indexed hosts of other clients, accept the higher.
fn connect_hosts(
    params: &JobParams,
    client: u32,
    me: Rank,
    listener: &TcpListener,
) -> Result<Vec<(u32, TcpStream)>, P2pError> {
    let mine = params
        .hosts
        .iter()
        .position(|h| h.ranks.contains(&me))
        .ok_or_else(|| err(format!("IMPI: no host carries global rank {me}")))?
        as u32;
    let deadline = Instant::now() + STARTUP_TIMEOUT;
    let mut conns = Vec::new();
    let mut expected = 0usize;
    for (i, h) in params.hosts.iter().enumerate() {
        let i = i as u32;
        if h.client == client {
            continue;
        }
        if i > mine {
            expected += 1;
            continue;
        }
        let ip = Ipv4Addr::new(h.addr[12], h.addr[13], h.addr[14], h.addr[15]);
        let to = SocketAddr::new(IpAddr::V4(ip), h.port as u16);
        let mut s = loop {
            match connect_from(listener, to) {
                Ok(s) => break s,
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                Err(e) => return Err(err(format!("IMPI host {i} at {to}: {e}"))),
            }
        };
        s.write_all(&(mine as i32).to_be_bytes())
            .map_err(|e| err(format!("IMPI host {i} at {to}: {e}")))?;
        conns.push((i, s));
    }
    listener
        .set_nonblocking(true)
        .map_err(|e| err(e.to_string()))?;
    while expected > 0 {
        match listener.accept() {
            Ok((mut s, from)) => {
                s.set_nonblocking(false).map_err(|e| err(e.to_string()))?;
                s.set_read_timeout(Some(Duration::from_secs(10)))
                    .map_err(|e| err(e.to_string()))?;
                let mut b = [0u8; 4];
                if s.read_exact(&mut b).is_err() {
                    continue; // not an IMPI host introducing itself: drop it
                }
                let h = i32::from_be_bytes(b);
                let valid = h > mine as i32
                    && (h as usize) < params.hosts.len()
                    && params.hosts[h as usize].client != client
                    && !conns.iter().any(|(c, _)| *c == h as u32);
                if !valid {
                    eprintln!(
                        "tsunagi: IMPI: ignored a connection from {from} announcing host {h}"
                    );
                    continue;
                }
                s.set_read_timeout(None).map_err(|e| err(e.to_string()))?;
                conns.push((h as u32, s));
                expected -= 1;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() > deadline {
                    return Err(err(format!(
                        "IMPI: {expected} hosts of other sites did not connect within \
                         {STARTUP_TIMEOUT:?}"
                    )));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(err(format!("IMPI accept: {e}"))),
        }
    }
    conns.sort_by_key(|(h, _)| *h);
    Ok(conns)
}

/// The job-wide bootstrap of a site joined over IMPI.
struct GridBoot {
    site: Box<dyn Bootstrap>,
    rank: Rank,
    size: usize,
    placement: Placement,
    job_id: String,
    /// Site rank 0: the server connection, kept open until FINI.
    registration: Option<(TcpStream, ClientStartup)>,
}

impl Bootstrap for GridBoot {
    fn name(&self) -> &'static str {
        "impi"
    }
    fn rank(&self) -> Rank {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn job_id(&self) -> &str {
        &self.job_id
    }
    fn placement(&mut self) -> Result<Option<Placement>, P2pError> {
        Ok(Some(self.placement.clone()))
    }
    fn put(&mut self, key: &str, value: &str) -> Result<(), P2pError> {
        self.site.put(key, value)
    }
    fn get(&mut self, key: &str) -> Result<Option<String>, P2pError> {
        self.site.get(key)
    }
    fn fence(&mut self) -> Result<(), P2pError> {
        self.site.fence()
    }
    fn abort(&mut self, code: i32, msg: &str) {
        self.site.abort(code, msg)
    }
    fn finalize(&mut self) -> Result<(), P2pError> {
        // Every process of the site has finished its device (FINI to the other sites)
        // before the client tells the server it is done.
        self.site.fence()?;
        if let Some((mut stream, mut startup)) = self.registration.take() {
            startup.fini().map_err(|e| err(e.to_string()))?;
            stream
                .write_all(&startup.transmit())
                .map_err(|e| err(format!("IMPI server: FINI: {e}")))?;
        }
        self.site.finalize()
    }
    fn appnum(&self) -> i32 {
        self.site.appnum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_survive_the_site_key_value_space() {
        let mut a = Answers::new();
        a.insert(label::C_NPROCS, (0b11, vec![0, 0, 0, 2, 0, 0, 0, 1]));
        a.insert(label::H_IPV6, (0b11, (0..=255).collect()));
        a.insert(label::C_VERSION, (0b11, vec![]));
        let text = encode_answers(2, &a);
        assert_eq!(decode_answers(&text), Some((2, a)));
        assert_eq!(decode_answers("2;4608:3:0g"), None, "bad hex");
        assert_eq!(decode_answers("x"), None);
        assert_eq!(decode_answers("2;4608:3"), None, "missing data");
    }

    #[test]
    fn one_host_per_process_payloads() {
        let cards = [
            HostCard {
                addr: Ipv4Addr::new(10, 0, 0, 2),
                port: 7000,
                pid: 11,
            },
            HostCard {
                addr: Ipv4Addr::new(10, 0, 0, 2),
                port: 7001,
                pid: 12,
            },
        ];
        let p = payloads(
            &cards,
            LinkConfig::default(),
            32767,
            CollChoice {
                xsize: -1,
                maxlinear: -1,
            },
        );
        let get = |l: i32| p.iter().find(|(x, _)| *x == l).unwrap().1.clone();
        assert_eq!(
            p.iter().map(|(l, _)| *l).collect::<Vec<_>>(),
            label::ALL.to_vec(),
            "every label, in the report's order"
        );
        assert_eq!(get(label::C_NHOSTS), vec![0, 0, 0, 2]);
        assert_eq!(get(label::H_NPROCS), vec![0, 0, 0, 1, 0, 0, 0, 1]);
        assert_eq!(get(label::H_PORT), vec![0, 0, 0x1b, 0x58, 0, 0, 0x1b, 0x59]);
        assert_eq!(
            get(label::P_IPV6)[..16],
            [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2]
        );
        assert_eq!(get(label::P_PID)[8..], 12i64.to_be_bytes());
    }
}
