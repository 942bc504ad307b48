//! Configuration of the TCP transport: the job key, the interface and port range to listen
//! on, socket buffer sizes. Everything here is pure (the environment and the interface list
//! are passed in) so that it is unit-tested without sockets.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

/// The per-job secret every new connection must present.
///
/// 128 bits, random per job when mpirun hands it over (`TSUNAGI_JOB_KEY_FD`). It keeps out
/// connections that do not belong to the job (another job's rank on a reused port, port
/// scanners, a stale process, a local user). It never travels: a connector answers the
/// acceptor's challenge with an HMAC under it (see `handshake`). Messages after the
/// handshake are neither encrypted nor signed.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct JobKey(pub [u8; 16]);

impl fmt::Debug for JobKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print a secret in full in a log.
        write!(f, "JobKey({:02x}{:02x}..)", self.0[0], self.0[1])
    }
}

impl JobKey {
    /// 32 hex digits.
    pub fn from_hex(s: &str) -> Result<JobKey, String> {
        let s = s.trim();
        if s.len() != 32 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err("TSUNAGI_JOB_KEY: expected 32 hex digits".into());
        }
        let mut k = [0u8; 16];
        for (i, b) in k.iter_mut().enumerate() {
            *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("checked hex");
        }
        Ok(JobKey(k))
    }

    /// The key as 32 hex digits (what mpirun puts in `TSUNAGI_JOB_KEY`).
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// A fresh random key (getrandom; time and pid if the kernel will not give randomness).
    pub fn random() -> JobKey {
        let mut k = [0u8; 16];
        // SAFETY: getrandom writes at most k.len() bytes into `k`.
        let got = unsafe { libc::getrandom(k.as_mut_ptr().cast(), k.len(), libc::GRND_NONBLOCK) };
        if got != k.len() as isize {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            return JobKey::derive(&format!("{t:?}-{}", std::process::id()));
        }
        JobKey(k)
    }

    /// A key derived from a job-wide string (the PMI kvsname) for launchers that do not set
    /// `TSUNAGI_JOB_KEY` (Hydra, Slurm). Every rank derives the same key; it is not secret
    /// from anyone who knows the kvsname, but still keeps other jobs' connections out.
    pub fn derive(seed: &str) -> JobKey {
        // Two FNV-1a 64 hashes with different offsets: no crypto needed for this purpose.
        let h = |offset: u64| {
            let mut h = offset;
            for b in b"tsunagi-tcp-key:".iter().chain(seed.as_bytes()) {
                h = (h ^ *b as u64).wrapping_mul(0x100_0000_01b3);
            }
            h
        };
        let mut k = [0u8; 16];
        k[..8].copy_from_slice(&h(0xcbf2_9ce4_8422_2325).to_le_bytes());
        k[8..].copy_from_slice(&h(0x6c62_272e_07bb_0142).to_le_bytes());
        JobKey(k)
    }
}

/// The job key from the inherited descriptor `fd_spec` (the value of `TSUNAGI_JOB_KEY_FD`):
/// mpirun hands each rank a sealed memfd holding the key in hex, so the key appears in no
/// process's command line or environment (`/proc/PID/environ`). Read with `pread` at offset
/// 0, so reading again gives the same key; the descriptor is made close-on-exec, so
/// programs the rank starts do not inherit it.
pub fn read_key_fd(fd_spec: &str) -> Result<JobKey, String> {
    let bad = |why: String| format!("TSUNAGI_JOB_KEY_FD={fd_spec}: {why}");
    let fd: i32 = fd_spec
        .trim()
        .parse()
        .ok()
        .filter(|&fd| fd >= 0)
        .ok_or_else(|| bad("expected a descriptor number".into()))?;
    let mut buf = [0u8; 64];
    // SAFETY: pread writes at most buf.len() bytes into `buf`; a bad descriptor is EBADF.
    let n = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n < 0 {
        return Err(bad(std::io::Error::last_os_error().to_string()));
    }
    // SAFETY: fcntl on a descriptor that pread just read from.
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    let text = std::str::from_utf8(&buf[..n as usize]).map_err(|_| bad("not hex".into()))?;
    JobKey::from_hex(text).map_err(|e| bad(e.replace("TSUNAGI_JOB_KEY: ", "")))
}

/// A sealed memfd (close-on-exec) holding `key` in hex, for [`read_key_fd`]: the launcher
/// makes it inheritable in the child it starts and names it in `TSUNAGI_JOB_KEY_FD`.
pub fn key_memfd(key: &JobKey) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let last = std::io::Error::last_os_error;
    // SAFETY: memfd_create takes a NUL-terminated name and flags; it returns a new fd.
    let fd = unsafe {
        libc::memfd_create(
            c"tsunagi-job-key".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )
    };
    if fd < 0 {
        return Err(last());
    }
    // SAFETY: a fresh descriptor that nothing else owns.
    let owned = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    let hex = key.to_hex();
    // SAFETY: writing from a live buffer of the stated length to our descriptor.
    let n = unsafe { libc::write(fd, hex.as_ptr().cast(), hex.len()) };
    if n != hex.len() as isize {
        return Err(last());
    }
    // Nobody (the rank included) can change the key after this.
    let seals = libc::F_SEAL_WRITE | libc::F_SEAL_GROW | libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL;
    // SAFETY: fcntl on our own memfd.
    if unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, seals) } != 0 {
        return Err(last());
    }
    Ok(owned)
}

/// Parse `TSUNAGI_TCP_PORTS`: `lo-hi` (inclusive) or a single port.
pub fn parse_ports(spec: &str) -> Result<(u16, u16), String> {
    let bad =
        || format!("TSUNAGI_TCP_PORTS={spec}: expected a port range lo-hi (e.g. 50000-50100)");
    let (lo, hi) = match spec.trim().split_once('-') {
        Some((a, b)) => (a.trim(), b.trim()),
        None => (spec.trim(), spec.trim()),
    };
    let lo: u16 = lo.parse().map_err(|_| bad())?;
    let hi: u16 = hi.parse().map_err(|_| bad())?;
    if lo == 0 || lo > hi {
        return Err(bad());
    }
    Ok((lo, hi))
}

/// An IPv4 interface of this host: its name and address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interface {
    pub name: String,
    pub addr: IpAddr,
}

/// This host's interfaces with an IPv4 address that are up (getifaddrs).
pub fn interfaces() -> Vec<Interface> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return out;
    }
    let mut p = head;
    while !p.is_null() {
        // SAFETY: `p` is a node of the list getifaddrs returned, valid until freeifaddrs.
        let ifa = unsafe { &*p };
        p = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_flags & libc::IFF_UP as u32 == 0 {
            continue;
        }
        // SAFETY: ifa_addr is non-null and points to a sockaddr whose family we check
        // before reading it as sockaddr_in.
        let fam = unsafe { (*ifa.ifa_addr).sa_family } as i32;
        if fam != libc::AF_INET {
            continue;
        }
        // SAFETY: family AF_INET means the address is a sockaddr_in.
        let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
        let addr = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        out.push(Interface {
            name,
            addr: IpAddr::V4(addr),
        });
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    out
}

/// Where to listen and what address to publish, from `TSUNAGI_TCP_IF` (`spec`) and the
/// host's interfaces: returns (bind address, published address).
///
/// * an address: bind to it and publish it;
/// * an interface name: bind to and publish its first IPv4 address;
/// * nothing: publish the first non-loopback IPv4 address (in a network namespace joined by
///   a veth pair, the veth's), or 127.0.0.1 on a host with no other interface, and bind to
///   that same address only: peers connect to the published address, so listening on every
///   interface would only let in connections from networks no peer uses.
pub fn choose_address(spec: Option<&str>, ifs: &[Interface]) -> Result<(IpAddr, IpAddr), String> {
    match spec.map(str::trim).filter(|s| !s.is_empty()) {
        Some(s) => {
            if let Ok(a) = s.parse::<IpAddr>() {
                return Ok((a, a));
            }
            match ifs.iter().find(|i| i.name == s) {
                Some(i) => Ok((i.addr, i.addr)),
                None => {
                    let names: Vec<&str> = ifs.iter().map(|i| i.name.as_str()).collect();
                    Err(format!(
                        "TSUNAGI_TCP_IF={s}: no such interface with an IPv4 address (have: {})",
                        names.join(", ")
                    ))
                }
            }
        }
        None => {
            let publish = ifs
                .iter()
                .find(|i| !i.addr.is_loopback())
                .map(|i| i.addr)
                .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
            Ok((publish, publish))
        }
    }
}

/// Everything the transport needs to know besides its rank and its peers.
#[derive(Clone, Debug)]
pub struct TcpConfig {
    pub key: JobKey,
    /// `TSUNAGI_TCP_IF`: interface name or address to listen on and publish.
    pub interface: Option<String>,
    /// `TSUNAGI_TCP_PORTS`: the listening port is the first free one in this range
    /// (inclusive); any free port when unset.
    pub ports: Option<(u16, u16)>,
    /// `TSUNAGI_TCP_SNDBUF` / `TSUNAGI_TCP_RCVBUF` in bytes. Unset keeps the kernel's
    /// autotuning, which setting a size switches off.
    pub sndbuf: Option<usize>,
    pub rcvbuf: Option<usize>,
    /// How long a connection may take (including retries while the peer does not listen
    /// yet) before the peer is declared failed: `TSUNAGI_TCP_CONNECT_TIMEOUT` seconds.
    pub connect_timeout: Duration,
}

impl TcpConfig {
    /// A configuration with the given key and defaults for everything else.
    pub fn new(key: JobKey) -> TcpConfig {
        TcpConfig {
            key,
            interface: None,
            ports: None,
            sndbuf: None,
            rcvbuf: None,
            connect_timeout: Duration::from_secs(30),
        }
    }

    /// From the environment (`getenv` is `std::env::var` outside tests). The key comes from
    /// the descriptor `TSUNAGI_JOB_KEY_FD` names (mpirun's way: see [`read_key_fd`]), else
    /// from `TSUNAGI_JOB_KEY`, else is derived from `key_seed` (the kvsname).
    pub fn from_env(
        getenv: impl Fn(&str) -> Option<String>,
        key_seed: &str,
    ) -> Result<TcpConfig, String> {
        let key = match (getenv("TSUNAGI_JOB_KEY_FD"), getenv("TSUNAGI_JOB_KEY")) {
            (Some(fd), _) if !fd.trim().is_empty() => read_key_fd(&fd)?,
            (_, Some(k)) if !k.is_empty() => JobKey::from_hex(&k)?,
            _ => JobKey::derive(key_seed),
        };
        let mut c = TcpConfig::new(key);
        c.interface = getenv("TSUNAGI_TCP_IF").filter(|s| !s.trim().is_empty());
        if let Some(p) = getenv("TSUNAGI_TCP_PORTS").filter(|s| !s.trim().is_empty()) {
            c.ports = Some(parse_ports(&p)?);
        }
        let size = |name: &str| -> Result<Option<usize>, String> {
            match getenv(name) {
                None => Ok(None),
                Some(v) => v
                    .trim()
                    .parse::<usize>()
                    .map(Some)
                    .map_err(|_| format!("{name}={v}: expected a size in bytes")),
            }
        };
        c.sndbuf = size("TSUNAGI_TCP_SNDBUF")?;
        c.rcvbuf = size("TSUNAGI_TCP_RCVBUF")?;
        if let Some(v) = getenv("TSUNAGI_TCP_CONNECT_TIMEOUT") {
            let s: f64 = v
                .trim()
                .parse()
                .ok()
                .filter(|s: &f64| *s > 0.0)
                .ok_or_else(|| format!("TSUNAGI_TCP_CONNECT_TIMEOUT={v}: expected seconds"))?;
            c.connect_timeout = Duration::from_secs_f64(s);
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_from_an_inherited_descriptor() {
        use std::os::fd::AsRawFd;
        let k = JobKey::random();
        let fd = key_memfd(&k).unwrap();
        let spec = fd.as_raw_fd().to_string();
        assert_eq!(read_key_fd(&spec), Ok(k));
        assert_eq!(
            read_key_fd(&spec),
            Ok(k),
            "a second read gives the same key"
        );
        // Sealed: not even its holder can rewrite it.
        // SAFETY: write from a live 1-byte buffer to our descriptor.
        let w = unsafe { libc::pwrite(fd.as_raw_fd(), b"0".as_ptr().cast(), 1, 0) };
        assert_eq!(w, -1);
        let env = |k: &str| match k {
            "TSUNAGI_JOB_KEY_FD" => Some(spec.clone()),
            "TSUNAGI_JOB_KEY" => Some("00".repeat(16)),
            _ => None,
        };
        assert_eq!(
            TcpConfig::from_env(env, "kvs").unwrap().key,
            k,
            "the fd wins"
        );
        assert!(read_key_fd("-1").is_err());
        assert!(read_key_fd("x").is_err());
        drop(fd);
        assert!(read_key_fd(&spec)
            .unwrap_err()
            .contains("TSUNAGI_JOB_KEY_FD="));
    }

    #[test]
    fn keys() {
        let k = JobKey::random();
        assert_eq!(JobKey::from_hex(&k.to_hex()), Ok(k));
        assert_ne!(JobKey::random(), k);
        assert!(JobKey::from_hex("xyz").is_err());
        assert!(JobKey::from_hex(&"g".repeat(32)).is_err());
        assert_eq!(JobKey::derive("kvs_1"), JobKey::derive("kvs_1"));
        assert_ne!(JobKey::derive("kvs_1"), JobKey::derive("kvs_2"));
        assert!(!format!("{k:?}").contains(&k.to_hex()));
    }

    #[test]
    fn ports() {
        assert_eq!(parse_ports("50000-50010"), Ok((50000, 50010)));
        assert_eq!(parse_ports(" 7000 "), Ok((7000, 7000)));
        assert!(parse_ports("10-5").is_err());
        assert!(parse_ports("0-5").is_err());
        assert!(parse_ports("a-b").is_err());
        assert!(parse_ports("1-70000").is_err());
    }

    fn ifs() -> Vec<Interface> {
        vec![
            Interface {
                name: "lo".into(),
                addr: "127.0.0.1".parse().unwrap(),
            },
            Interface {
                name: "veth1".into(),
                addr: "10.77.0.2".parse().unwrap(),
            },
            Interface {
                name: "eth1".into(),
                addr: "192.168.5.1".parse().unwrap(),
            },
        ]
    }

    #[test]
    fn address_choice() {
        // Unset: listen only where peers connect, the published address (issue 14).
        let first: IpAddr = "10.77.0.2".parse().unwrap();
        assert_eq!(choose_address(None, &ifs()), Ok((first, first)));
        assert_eq!(
            choose_address(Some("eth1"), &ifs()),
            Ok((
                "192.168.5.1".parse().unwrap(),
                "192.168.5.1".parse().unwrap()
            ))
        );
        let a: IpAddr = "10.9.9.9".parse().unwrap();
        assert_eq!(choose_address(Some("10.9.9.9"), &ifs()), Ok((a, a)));
        assert!(choose_address(Some("wlan7"), &ifs())
            .unwrap_err()
            .contains("veth1"));
        let lo_only = &ifs()[..1];
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        assert_eq!(choose_address(None, lo_only), Ok((lo, lo)));
        // The real host has at least a loopback interface.
        assert!(interfaces().iter().any(|i| i.addr.is_loopback()));
    }

    #[test]
    fn config_from_env() {
        let env = |k: &str| -> Option<String> {
            match k {
                "TSUNAGI_TCP_IF" => Some("veth1".into()),
                "TSUNAGI_TCP_PORTS" => Some("6000-6009".into()),
                "TSUNAGI_TCP_SNDBUF" => Some("1048576".into()),
                "TSUNAGI_TCP_CONNECT_TIMEOUT" => Some("2.5".into()),
                _ => None,
            }
        };
        let c = TcpConfig::from_env(env, "kvs").unwrap();
        assert_eq!(c.key, JobKey::derive("kvs"));
        assert_eq!(c.interface.as_deref(), Some("veth1"));
        assert_eq!(c.ports, Some((6000, 6009)));
        assert_eq!((c.sndbuf, c.rcvbuf), (Some(1 << 20), None));
        assert_eq!(c.connect_timeout, Duration::from_millis(2500));
        let key = JobKey::random();
        let hex = key.to_hex();
        let c =
            TcpConfig::from_env(|k| (k == "TSUNAGI_JOB_KEY").then(|| hex.clone()), "kvs").unwrap();
        assert_eq!(c.key, key);
        assert!(
            TcpConfig::from_env(|k| (k == "TSUNAGI_TCP_PORTS").then(|| "x".into()), "k").is_err()
        );
    }
}
