//! Blocking set-up of connections between worlds: ports, the roots' handshake, the
//! all-pairs mesh, and the name service.
//!
//! * A **port** (`MPI_Open_port`) is a listening socket; its name is
//!   `tsunagi:<host>:<port>:<token>` with a random 128-bit token in hex. Only a process
//!   that knows the name can connect: the connecting root sends the token first, and the
//!   accepting root drops connections that do not.
//! * The **roots** then talk over that connection in length-prefixed messages
//!   ([`send_msg`], [`recv_msg`]): their groups' mesh addresses, the context-id offers.
//! * The **mesh**: every process of both groups opens a listener of its own for the
//!   operation ([`MeshListener`]); each process of the connecting group connects to every
//!   process of the accepting group and introduces itself (token, its rank in its group).
//!   A connect completes in the listener's backlog, so the two sides cannot deadlock.
//! * The **name service** (`MPI_Publish_name` ...) is a directory of files, one per
//!   service (`TSUNAGI_NAME_DIR`, default `/tmp/tsunagi-names-<uid>`): separately started
//!   jobs on one host (or on hosts sharing that directory) find each other's ports.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs, UdpSocket};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Bytes of a port's token.
pub const TOKEN_BYTES: usize = 16;

/// A port's secret.
pub type Token = [u8; TOKEN_BYTES];

/// Largest set-up message accepted.
const MAX_SETUP_MSG: u64 = 64 << 20;

/// What a connecting root says before its token.
const HELLO: &[u8; 8] = b"TSNGDYN1";

/// A fresh random token (from the kernel).
pub fn random_token() -> io::Result<Token> {
    let mut t = [0u8; TOKEN_BYTES];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut t)?;
    Ok(t)
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

/// The address other hosts reach this one at: `TSUNAGI_DYN_HOST`, else the address of
/// the interface of the default route, else the loopback address.
pub fn advertised_host() -> String {
    if let Ok(h) = std::env::var("TSUNAGI_DYN_HOST") {
        if !h.is_empty() {
            return h;
        }
    }
    // A connected UDP socket sends nothing; it only asks the kernel for a route.
    UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| {
            s.connect("192.0.2.1:9")?;
            s.local_addr()
        })
        .map(|a| a.ip().to_string())
        .unwrap_or_else(|_| "127.0.0.1".into())
}

/// A parsed port name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortName {
    pub host: String,
    pub port: u16,
    pub token: Token,
}

impl PortName {
    /// Parse `tsunagi:<host>:<port>:<token hex>` (the host may be an IPv6 address in
    /// brackets).
    pub fn parse(s: &str) -> Option<PortName> {
        let rest = s.strip_prefix("tsunagi:")?;
        let (rest, token) = rest.rsplit_once(':')?;
        let (host, port) = rest.rsplit_once(':')?;
        let token: Token = unhex(token)?.try_into().ok()?;
        if host.is_empty() {
            return None;
        }
        Some(PortName {
            host: host.to_string(),
            port: port.parse().ok()?,
            token,
        })
    }

    fn addrs(&self) -> io::Result<Vec<SocketAddr>> {
        let host = self.host.trim_start_matches('[').trim_end_matches(']');
        Ok((host, self.port).to_socket_addrs()?.collect())
    }
}

impl std::fmt::Display for PortName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "tsunagi:{}:{}:{}",
            self.host,
            self.port,
            hex(&self.token)
        )
    }
}

/// An open port: a listener and its token.
pub struct Port {
    listener: TcpListener,
    pub name: PortName,
}

impl Port {
    /// Listen on every interface, on a port the kernel picks.
    pub fn open() -> io::Result<Port> {
        let listener = TcpListener::bind("0.0.0.0:0")?;
        let port = listener.local_addr()?.port();
        Ok(Port {
            listener,
            name: PortName {
                host: advertised_host(),
                port,
                token: random_token()?,
            },
        })
    }

    /// Wait for a connecting root that knows the token (others are dropped) and answer
    /// it. No time limit (MPI_Comm_accept waits for its partner), but `give_up` is asked
    /// every 20 ms: a reason ends the wait with an error (a spawned job that died).
    pub fn accept_root(
        &self,
        give_up: &mut dyn FnMut() -> Option<String>,
    ) -> io::Result<TcpStream> {
        self.listener.set_nonblocking(true)?;
        loop {
            let mut s = match self.listener.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if let Some(why) = give_up() {
                        return Err(io::Error::other(why));
                    }
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            s.set_nonblocking(false)?;
            s.set_read_timeout(Some(Duration::from_secs(30)))?;
            let mut hello = [0u8; HELLO.len() + TOKEN_BYTES];
            if s.read_exact(&mut hello).is_err()
                || &hello[..HELLO.len()] != HELLO
                || hello[HELLO.len()..] != self.name.token
            {
                continue;
            }
            s.write_all(b"ok")?;
            s.set_read_timeout(None)?;
            let _ = s.set_nodelay(true);
            return Ok(s);
        }
    }
}

/// Connect to the root accepting on `name`, retrying refused connections until
/// `timeout` (the acceptor may not have opened its port yet).
pub fn connect_root(name: &PortName, timeout: Duration) -> io::Result<TcpStream> {
    let end = Instant::now() + timeout;
    loop {
        let mut last = io::Error::new(io::ErrorKind::NotFound, "no address for the host");
        for a in name.addrs()? {
            match TcpStream::connect_timeout(&a, Duration::from_secs(5)) {
                Ok(mut s) => {
                    let _ = s.set_nodelay(true);
                    s.write_all(HELLO)?;
                    s.write_all(&name.token)?;
                    let mut ok = [0u8; 2];
                    s.set_read_timeout(Some(Duration::from_secs(30)))?;
                    s.read_exact(&mut ok)?;
                    s.set_read_timeout(None)?;
                    if &ok != b"ok" {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            "the port answered with something else",
                        ));
                    }
                    return Ok(s);
                }
                Err(e) => last = e,
            }
        }
        if Instant::now() >= end {
            return Err(last);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Send one length-prefixed message.
pub fn send_msg(s: &mut TcpStream, b: &[u8]) -> io::Result<()> {
    s.write_all(&(b.len() as u64).to_le_bytes())?;
    s.write_all(b)
}

/// Receive one length-prefixed message (refusing absurd lengths).
pub fn recv_msg(s: &mut TcpStream) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 8];
    s.read_exact(&mut len)?;
    let len = u64::from_le_bytes(len);
    if len > MAX_SETUP_MSG {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("set-up message of {len} bytes"),
        ));
    }
    let mut b = vec![0u8; len as usize];
    s.read_exact(&mut b)?;
    Ok(b)
}

/// One process's listener for one connect/accept's mesh.
pub struct MeshListener {
    listener: TcpListener,
    /// `host:port` as the other group reaches it.
    pub addr: String,
}

impl MeshListener {
    pub fn open() -> io::Result<MeshListener> {
        let listener = TcpListener::bind("0.0.0.0:0")?;
        let port = listener.local_addr()?.port();
        let host = advertised_host();
        let addr = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        Ok(MeshListener { listener, addr })
    }

    /// Accept one stream from each of the `n` processes of the connecting group; they
    /// introduce themselves with `token` and their rank. Returns the streams by rank.
    pub fn accept_all(&self, n: usize, token: &Token) -> io::Result<Vec<TcpStream>> {
        let mut got: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
        let mut have = 0;
        while have < n {
            let (mut s, _) = self.listener.accept()?;
            s.set_read_timeout(Some(Duration::from_secs(60)))?;
            let mut intro = [0u8; TOKEN_BYTES + 4];
            if s.read_exact(&mut intro).is_err() || intro[..TOKEN_BYTES] != token[..] {
                continue;
            }
            let r = u32::from_le_bytes(intro[TOKEN_BYTES..].try_into().expect("4")) as usize;
            if r >= n || got[r].is_some() {
                continue;
            }
            s.set_read_timeout(None)?;
            got[r] = Some(s);
            have += 1;
        }
        Ok(got.into_iter().map(|s| s.expect("all present")).collect())
    }
}

/// Connect to every listener of the accepting group (`addrs` by rank) as process `me`.
pub fn connect_all(addrs: &[String], me: u32, token: &Token) -> io::Result<Vec<TcpStream>> {
    addrs
        .iter()
        .map(|a| {
            let end = Instant::now() + Duration::from_secs(60);
            let mut s = loop {
                match TcpStream::connect(a.as_str()) {
                    Ok(s) => break s,
                    Err(e) if Instant::now() >= end => return Err(e),
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            };
            s.write_all(token)?;
            s.write_all(&me.to_le_bytes())?;
            Ok(s)
        })
        .collect()
}

/// Encode a list of strings (mesh addresses) as one message.
pub fn encode_strings(v: &[String]) -> Vec<u8> {
    let mut out = Vec::new();
    for s in v {
        out.extend_from_slice(&(s.len() as u32).to_le_bytes());
        out.extend_from_slice(s.as_bytes());
    }
    out
}

/// Decode [`encode_strings`]; None when malformed.
pub fn decode_strings(mut b: &[u8]) -> Option<Vec<String>> {
    let mut v = Vec::new();
    while !b.is_empty() {
        let n = u32::from_le_bytes(b.get(..4)?.try_into().ok()?) as usize;
        let s = b.get(4..4 + n)?;
        v.push(String::from_utf8(s.to_vec()).ok()?);
        b = &b[4 + n..];
    }
    Some(v)
}

/// The name service's directory.
pub fn name_dir() -> PathBuf {
    match std::env::var_os("TSUNAGI_NAME_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        // SAFETY: getuid cannot fail.
        _ => PathBuf::from(format!("/tmp/tsunagi-names-{}", unsafe { libc::getuid() })),
    }
}

fn service_file(service: &str) -> PathBuf {
    // The service name, hex-encoded: any string is a valid file name then.
    name_dir().join(format!("svc-{}", hex(service.as_bytes())))
}

/// Why a name-service call failed.
#[derive(Debug, PartialEq, Eq)]
pub enum NameError {
    /// Publish: the service is published already. Unpublish: it is not published (or
    /// under another port).
    Service(String),
    /// Lookup: nothing published under the name.
    Name(String),
    /// The directory could not be used.
    Io(String),
}

/// Publish `port` under `service` (refused if the service is published already).
pub fn publish(service: &str, port: &str) -> Result<(), NameError> {
    let dir = name_dir();
    std::fs::create_dir_all(&dir).map_err(|e| NameError::Io(format!("{}: {e}", dir.display())))?;
    let path = service_file(service);
    // Written aside, then linked into place: a lookup never sees half a name, and link
    // fails if the service exists.
    let tmp = dir.join(format!(
        ".tmp-{}-{}",
        std::process::id(),
        hex(&random_token().map_err(|e| NameError::Io(e.to_string()))?)
    ));
    std::fs::write(&tmp, port).map_err(|e| NameError::Io(format!("{}: {e}", tmp.display())))?;
    let r = std::fs::hard_link(&tmp, &path);
    let _ = std::fs::remove_file(&tmp);
    match r {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(NameError::Service(format!(
            "the service name {service:?} is published already"
        ))),
        Err(e) => Err(NameError::Io(format!("{}: {e}", path.display()))),
    }
}

/// Withdraw `service` published with `port`.
pub fn unpublish(service: &str, port: &str) -> Result<(), NameError> {
    let path = service_file(service);
    match std::fs::read_to_string(&path) {
        Ok(p) if p == port => std::fs::remove_file(&path)
            .map_err(|e| NameError::Io(format!("{}: {e}", path.display()))),
        Ok(_) => Err(NameError::Service(format!(
            "the service name {service:?} is published with another port"
        ))),
        Err(_) => Err(NameError::Service(format!(
            "the service name {service:?} is not published"
        ))),
    }
}

/// The port published under `service`.
pub fn lookup(service: &str) -> Result<String, NameError> {
    std::fs::read_to_string(service_file(service))
        .map_err(|_| NameError::Name(format!("no port is published under {service:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_names_round_trip_and_malformed_ones_are_refused() {
        let p = PortName {
            host: "10.1.2.3".into(),
            port: 4567,
            token: [0xab; TOKEN_BYTES],
        };
        assert_eq!(PortName::parse(&p.to_string()), Some(p.clone()));
        let v6 = PortName {
            host: "[fe80::1]".into(),
            ..p.clone()
        };
        assert_eq!(PortName::parse(&v6.to_string()), Some(v6));
        for bad in [
            "",
            "tsunagi:",
            "10.1.2.3:4567",
            "tsunagi:h:1:abc",
            "tsunagi:h:99999:00112233445566778899aabbccddeeff",
            "tsunagi::1:00112233445566778899aabbccddeeff",
            "tsunagi:h:1:00112233445566778899aabbccddeeffaa",
            "tsunagi:h:1:zz112233445566778899aabbccddeeff",
        ] {
            assert_eq!(PortName::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn roots_meet_only_with_the_token_and_meshes_connect_every_pair() {
        let port = Port::open().unwrap();
        let mut name = port.name.clone();
        name.host = "127.0.0.1".into();
        let good = name.clone();
        let mut wrong = name.clone();
        wrong.token[0] ^= 1;
        let t = std::thread::spawn(move || {
            // A stranger first: dropped, and the real partner still gets through.
            let _ = connect_root(&wrong, Duration::from_millis(10));
            let mut s = connect_root(&good, Duration::from_secs(5)).unwrap();
            send_msg(&mut s, b"from connector").unwrap();
            recv_msg(&mut s).unwrap()
        });
        let mut s = port.accept_root(&mut || None).unwrap();
        assert_eq!(recv_msg(&mut s).unwrap(), b"from connector");
        send_msg(&mut s, b"from acceptor").unwrap();
        assert_eq!(t.join().unwrap(), b"from acceptor");

        let token = random_token().unwrap();
        let ls: Vec<MeshListener> = (0..3).map(|_| MeshListener::open().unwrap()).collect();
        let addrs: Vec<String> = ls
            .iter()
            .map(|l| format!("127.0.0.1:{}", l.addr.rsplit_once(':').unwrap().1))
            .collect();
        let conns: Vec<_> = (0..2u32)
            .map(|me| {
                let a = addrs.clone();
                std::thread::spawn(move || connect_all(&a, me, &token).unwrap())
            })
            .collect();
        for l in &ls {
            let streams = l.accept_all(2, &token).unwrap();
            assert_eq!(streams.len(), 2);
        }
        for c in conns {
            assert_eq!(c.join().unwrap().len(), 3);
        }
        let v = vec!["a".to_string(), String::new(), "127.0.0.1:5".into()];
        assert_eq!(decode_strings(&encode_strings(&v)), Some(v));
        assert_eq!(decode_strings(&[5, 0, 0, 0, b'x']), None);
    }

    #[test]
    fn names_publish_once_and_look_up_until_unpublished() {
        let dir = std::env::temp_dir().join(format!("tsunagi-names-test-{}", std::process::id()));
        std::env::set_var("TSUNAGI_NAME_DIR", &dir);
        let svc = "ocean/model 1";
        assert!(matches!(lookup(svc), Err(NameError::Name(_))));
        publish(svc, "tsunagi:h:1:00").unwrap();
        assert!(matches!(publish(svc, "x"), Err(NameError::Service(_))));
        assert_eq!(lookup(svc).unwrap(), "tsunagi:h:1:00");
        assert!(matches!(
            unpublish(svc, "other"),
            Err(NameError::Service(_))
        ));
        unpublish(svc, "tsunagi:h:1:00").unwrap();
        assert!(matches!(
            unpublish(svc, "tsunagi:h:1:00"),
            Err(NameError::Service(_))
        ));
        assert!(matches!(lookup(svc), Err(NameError::Name(_))));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
