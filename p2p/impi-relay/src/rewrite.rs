//! The start-up session through the relay, sans-IO: bytes of one client's connection to the
//! IMPI server in, the bytes to forward out, plus the host endpoints the relay must expose.
//!
//! A client registers its hosts with two labels: `H_IPV6` (16 bytes per host, its address)
//! and `H_PORT` (Int4 per host, its listening port). The server hands both, unchanged, to
//! every client, and every host connects to the hosts of the other clients at those
//! endpoints. Behind a relay those are private endpoints nobody outside can reach, so the
//! relay rewrites exactly these two labels on their way to the server: every host's address
//! becomes the relay's public address and its port a port the relay listens on for that
//! host and forwards to its private endpoint ([`Expose`]). Nothing else changes: the
//! lengths stay the same, the other labels (the per-proc `P_IPV6` host ids too: an
//! identifier, not a route) pass verbatim, the server's answers pass verbatim (checked),
//! and the endpoints run the IMPI protocol as without a relay.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use tsunagi_impi::startup::{label, ClientExpect, ClientMsg, ServerExpect, ServerMsg, AUTH_KEY};

/// A host of a client that the relay must make reachable: connections to the relay's
/// `public_port` go to `private`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expose {
    pub client: u32,
    pub host: usize,
    pub private: SocketAddr,
    pub public_port: u16,
}

/// Why a start-up stream cannot be relayed (the driver closes both connections).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RelayError {
    /// The bytes are not a valid start-up message.
    Startup(String),
    /// A host label out of order or inconsistent.
    Hosts(String),
    /// The driver could not listen for a host.
    Listen(String),
}

impl std::fmt::Display for RelayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RelayError::Startup(s) | RelayError::Hosts(s) | RelayError::Listen(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for RelayError {}

#[derive(Clone, Copy, Debug, Default)]
struct Host {
    addr: Option<IpAddr>,
    port: Option<u16>,
    public_port: Option<u16>,
    exposed: bool,
}

/// One client's start-up connection through the relay.
pub struct StartupSession {
    public: Ipv4Addr,
    from_client: Vec<u8>,
    from_server: Vec<u8>,
    client_expect: ClientExpect,
    server_expect: ServerExpect,
    /// The client sent AUTH and the server's choice is still to come.
    auth_pending: bool,
    client: Option<u32>,
    hosts: Vec<Host>,
}

fn mapped(a: Ipv4Addr) -> [u8; 16] {
    a.to_ipv6_mapped().octets()
}

fn unmapped(b: &[u8]) -> IpAddr {
    let a = Ipv6Addr::from(<[u8; 16]>::try_from(b).expect("16 bytes"));
    match a.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(a),
    }
}

impl StartupSession {
    /// A session whose hosts will appear at `public` (the relay's address every site can
    /// reach).
    pub fn new(public: Ipv4Addr) -> StartupSession {
        StartupSession {
            public,
            from_client: Vec::new(),
            from_server: Vec::new(),
            client_expect: ClientExpect::Command,
            server_expect: ServerExpect::AuthChoice,
            auth_pending: false,
            client: None,
            hosts: Vec::new(),
        }
    }

    /// The client's number, once it said it.
    pub fn client(&self) -> Option<u32> {
        self.client
    }

    /// Bytes from the client: returns the bytes to send to the server (complete messages,
    /// host labels rewritten) and the hosts to expose. `listen(client, host)` is asked once
    /// per host for the public port that will forward to it (the driver binds a listener).
    pub fn client_bytes(
        &mut self,
        bytes: &[u8],
        listen: &mut dyn FnMut(u32, usize) -> Result<u16, String>,
    ) -> Result<(Vec<u8>, Vec<Expose>), RelayError> {
        self.from_client.extend_from_slice(bytes);
        let mut out = Vec::new();
        let mut exposed = Vec::new();
        let mut used = 0;
        loop {
            let rest = &self.from_client[used..];
            let decoded = ClientMsg::decode(rest, self.client_expect)
                .map_err(|e| RelayError::Startup(format!("from the client: {e}")))?;
            let Some((msg, n)) = decoded else { break };
            let raw = rest[..n].to_vec();
            used += n;
            self.client_expect = ClientExpect::Command;
            match msg {
                ClientMsg::Auth { .. } => {
                    self.auth_pending = true;
                    out.extend_from_slice(&raw);
                }
                ClientMsg::Impi { rank } => {
                    if rank < 0 {
                        return Err(RelayError::Startup(format!(
                            "from the client: IMPI rank {rank}"
                        )));
                    }
                    self.client = Some(rank as u32);
                    out.extend_from_slice(&raw);
                }
                ClientMsg::Coll { label, data }
                    if label == label::H_IPV6 || label == label::H_PORT =>
                {
                    let data = self.rewrite(label, &data, listen, &mut exposed)?;
                    out.extend_from_slice(&ClientMsg::Coll { label, data }.encode());
                }
                _ => out.extend_from_slice(&raw),
            }
        }
        self.from_client.drain(..used);
        Ok((out, exposed))
    }

    /// Bytes from the server: returned unchanged once they form complete, valid messages
    /// (the session follows the authentication exchange to know when the client's bare key
    /// comes).
    pub fn server_bytes(&mut self, bytes: &[u8]) -> Result<Vec<u8>, RelayError> {
        self.from_server.extend_from_slice(bytes);
        let mut used = 0;
        loop {
            let rest = &self.from_server[used..];
            let decoded = ServerMsg::decode(rest, self.server_expect)
                .map_err(|e| RelayError::Startup(format!("from the server: {e}")))?;
            let Some((msg, n)) = decoded else { break };
            used += n;
            self.server_expect = ServerExpect::Command;
            if let ServerMsg::AuthChoice { which, .. } = msg {
                if !self.auth_pending {
                    return Err(RelayError::Startup(
                        "from the server: an authentication answer before AUTH".into(),
                    ));
                }
                self.auth_pending = false;
                if which == AUTH_KEY {
                    self.client_expect = ClientExpect::Key;
                }
            }
        }
        Ok(self.from_server.drain(..used).collect())
    }

    fn rewrite(
        &mut self,
        label: i32,
        data: &[u8],
        listen: &mut dyn FnMut(u32, usize) -> Result<u16, String>,
        exposed: &mut Vec<Expose>,
    ) -> Result<Vec<u8>, RelayError> {
        let client = self.client.ok_or_else(|| {
            RelayError::Hosts("a host label before the client said its number (IMPI)".into())
        })?;
        let width = if label == label::H_IPV6 { 16 } else { 4 };
        if !data.len().is_multiple_of(width) || data.is_empty() {
            return Err(RelayError::Hosts(format!(
                "label 0x{label:x}: {} bytes is not a whole number of {width}-byte entries",
                data.len()
            )));
        }
        let n = data.len() / width;
        if self.hosts.is_empty() {
            self.hosts = vec![Host::default(); n];
        } else if self.hosts.len() != n {
            return Err(RelayError::Hosts(format!(
                "label 0x{label:x} has {n} hosts, the other host label {}",
                self.hosts.len()
            )));
        }
        let mut out = Vec::with_capacity(data.len());
        for (i, entry) in data.chunks(width).enumerate() {
            let host = &mut self.hosts[i];
            if label == label::H_IPV6 {
                if host.addr.is_some() {
                    return Err(RelayError::Hosts("H_IPV6 sent twice".into()));
                }
                host.addr = Some(unmapped(entry));
                out.extend_from_slice(&mapped(self.public));
            } else {
                if host.port.is_some() {
                    return Err(RelayError::Hosts("H_PORT sent twice".into()));
                }
                let p = i32::from_be_bytes(entry.try_into().expect("4 bytes"));
                let p = u16::try_from(p).ok().filter(|&p| p != 0).ok_or_else(|| {
                    RelayError::Hosts(format!("host {i}: port {p} is not a TCP port"))
                })?;
                host.port = Some(p);
                let public = match host.public_port {
                    Some(pp) => pp,
                    None => listen(client, i).map_err(RelayError::Listen)?,
                };
                host.public_port = Some(public);
                out.extend_from_slice(&i32::from(public).to_be_bytes());
            }
            if let (Some(a), Some(p), Some(pp), false) =
                (host.addr, host.port, host.public_port, host.exposed)
            {
                host.exposed = true;
                exposed.push(Expose {
                    client,
                    host: i,
                    private: SocketAddr::new(a, p),
                    public_port: pp,
                });
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tsunagi_impi::startup::AUTH_NONE;

    fn coll(label: i32, data: Vec<u8>) -> Vec<u8> {
        ClientMsg::Coll { label, data }.encode()
    }

    fn hosts(addrs: &[[u8; 4]]) -> Vec<u8> {
        addrs
            .iter()
            .flat_map(|a| mapped(Ipv4Addr::from(*a)))
            .collect()
    }

    fn ports(p: &[i32]) -> Vec<u8> {
        p.iter().flat_map(|x| x.to_be_bytes()).collect()
    }

    #[test]
    fn host_labels_are_rewritten_to_the_relay_and_everything_else_passes() {
        let public = Ipv4Addr::new(10, 112, 5, 1);
        let mut s = StartupSession::new(public);
        let mut asked = Vec::new();
        let mut listen = |c: u32, h: usize| {
            asked.push((c, h));
            Ok(40000 + h as u16)
        };
        let mut input = ClientMsg::Auth { mask: 1 }.encode();
        input.extend(ClientMsg::Impi { rank: 1 }.encode());
        input.extend(coll(label::C_NHOSTS, ports(&[2])));
        input.extend(coll(
            label::H_IPV6,
            hosts(&[[10, 110, 5, 2], [10, 110, 5, 3]]),
        ));
        input.extend(coll(label::H_PORT, ports(&[5001, 5002])));
        let pids = coll(label::P_IPV6, hosts(&[[10, 110, 5, 2], [10, 110, 5, 3]]));
        input.extend(pids.clone());
        input.extend(ClientMsg::Done.encode());
        // Fed a byte at a time: messages leave only when whole.
        let mut out = Vec::new();
        let mut exposed = Vec::new();
        for b in &input {
            let (o, e) = s
                .client_bytes(std::slice::from_ref(b), &mut listen)
                .unwrap();
            out.extend(o);
            exposed.extend(e);
        }
        assert_eq!(out.len(), input.len(), "the rewrite keeps every length");
        let mut want = ClientMsg::Auth { mask: 1 }.encode();
        want.extend(ClientMsg::Impi { rank: 1 }.encode());
        want.extend(coll(label::C_NHOSTS, ports(&[2])));
        want.extend(coll(
            label::H_IPV6,
            hosts(&[[10, 112, 5, 1], [10, 112, 5, 1]]),
        ));
        want.extend(coll(label::H_PORT, ports(&[40000, 40001])));
        want.extend(pids);
        want.extend(ClientMsg::Done.encode());
        assert_eq!(out, want);
        assert_eq!(asked, vec![(1, 0), (1, 1)]);
        assert_eq!(
            exposed,
            vec![
                Expose {
                    client: 1,
                    host: 0,
                    private: "10.110.5.2:5001".parse().unwrap(),
                    public_port: 40000
                },
                Expose {
                    client: 1,
                    host: 1,
                    private: "10.110.5.3:5002".parse().unwrap(),
                    public_port: 40001
                },
            ]
        );
        assert_eq!(s.client(), Some(1));
    }

    #[test]
    fn ports_before_addresses_and_the_key_after_the_servers_choice() {
        let mut s = StartupSession::new(Ipv4Addr::new(192, 0, 2, 1));
        let mut listen = |_: u32, h: usize| Ok(50000 + h as u16);
        let (o, _) = s
            .client_bytes(&ClientMsg::Auth { mask: 3 }.encode(), &mut listen)
            .unwrap();
        assert_eq!(o.len(), 12);
        // The server chooses KEY: the client's next 8 bytes are the bare key.
        let choice = ServerMsg::AuthChoice {
            which: AUTH_KEY,
            len: 8,
        }
        .encode();
        assert_eq!(s.server_bytes(&choice).unwrap(), choice);
        let key = ClientMsg::Key(0x4955_5448_0000_0001).encode();
        assert_eq!(s.client_bytes(&key, &mut listen).unwrap().0, key);
        let mut input = ClientMsg::Impi { rank: 0 }.encode();
        input.extend(coll(label::H_PORT, ports(&[7000])));
        let (_, e) = s.client_bytes(&input, &mut listen).unwrap();
        assert!(e.is_empty(), "no address yet");
        let (_, e) = s
            .client_bytes(&coll(label::H_IPV6, hosts(&[[172, 16, 0, 9]])), &mut listen)
            .unwrap();
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].private, "172.16.0.9:7000".parse().unwrap());
        assert_eq!(e[0].public_port, 50000);
        // Server answers pass verbatim, cut anywhere.
        let answer = ServerMsg::Coll {
            label: label::H_PORT,
            mask: 3,
            data: ports(&[1, 2]),
        }
        .encode();
        let (a, b) = answer.split_at(5);
        let mut got = s.server_bytes(a).unwrap();
        got.extend(s.server_bytes(b).unwrap());
        assert_eq!(got, answer);
    }

    #[test]
    fn malformed_streams_are_refused() {
        let mut listen = |_: u32, _: usize| Ok(1u16);
        let public = Ipv4Addr::LOCALHOST;
        // Not a command.
        let mut s = StartupSession::new(public);
        assert!(s.client_bytes(b"GET / HTTP/1.1\r\n", &mut listen).is_err());
        // Host labels before the client's number.
        let mut s = StartupSession::new(public);
        assert!(matches!(
            s.client_bytes(&coll(label::H_PORT, ports(&[5])), &mut listen),
            Err(RelayError::Hosts(_))
        ));
        // Ragged entries, a port out of range, host counts that disagree, a label twice.
        let imp = ClientMsg::Impi { rank: 0 }.encode();
        for bad in [
            coll(label::H_IPV6, vec![0; 15]),
            coll(label::H_PORT, ports(&[70000])),
            coll(label::H_PORT, ports(&[0])),
            [
                coll(label::H_PORT, ports(&[5])),
                coll(label::H_IPV6, vec![0; 32]),
            ]
            .concat(),
            [
                coll(label::H_PORT, ports(&[5])),
                coll(label::H_PORT, ports(&[6])),
            ]
            .concat(),
        ] {
            let mut s = StartupSession::new(public);
            s.client_bytes(&imp, &mut listen).unwrap();
            assert!(s.client_bytes(&bad, &mut listen).is_err(), "{bad:?}");
        }
        // A listener that cannot be made.
        let mut s = StartupSession::new(public);
        s.client_bytes(&imp, &mut listen).unwrap();
        let mut fail = |_: u32, _: usize| Err("no ports".to_string());
        assert_eq!(
            s.client_bytes(&coll(label::H_PORT, ports(&[5])), &mut fail),
            Err(RelayError::Listen("no ports".into()))
        );
        // The server: an authentication answer nobody asked for; garbage.
        let mut s = StartupSession::new(public);
        let choice = ServerMsg::AuthChoice {
            which: AUTH_NONE,
            len: 0,
        };
        assert!(s.server_bytes(&choice.encode()).is_err());
        let mut s = StartupSession::new(public);
        s.client_bytes(&ClientMsg::Auth { mask: 1 }.encode(), &mut listen)
            .unwrap();
        s.server_bytes(&choice.encode()).unwrap();
        assert!(s.server_bytes(&[0xff; 16]).is_err());
    }
}
