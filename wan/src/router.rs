//! The TUN router driver: network namespaces route their wide-area traffic into a TUN device
//! (see `scripts/wan-netns`); this loop reads each IP packet, puts it through the [`Pipe`] of
//! its (source site, destination site) direction, and writes it back into the device when it
//! is due, where the kernel forwards it on to its destination. Every protocol crosses it
//! unchanged (IMPI's server and host connections, ssh, ping) and the bandwidth limit is
//! shared by all traffic of a site pair, as on a real wide-area link. A packet that finds
//! the pair's queue full is dropped, as a router does; TCP recovers.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use crate::shaper::{LinkParams, Pipe};

/// An IPv4 network `a.b.c.d/len`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Net {
    pub addr: u32,
    pub len: u8,
}

impl Net {
    pub fn parse(s: &str) -> Result<Net, String> {
        let (a, l) = s.split_once('/').unwrap_or((s, "32"));
        let addr: Ipv4Addr = a
            .trim()
            .parse()
            .map_err(|_| format!("{s:?}: not an IPv4 network (a.b.c.d/len)"))?;
        let len: u8 = l
            .trim()
            .parse()
            .ok()
            .filter(|&n| n <= 32)
            .ok_or_else(|| format!("{s:?}: bad prefix length"))?;
        Ok(Net {
            addr: u32::from(addr) & mask(len),
            len,
        })
    }

    pub fn contains(&self, ip: u32) -> bool {
        ip & mask(self.len) == self.addr
    }
}

fn mask(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - len)
    }
}

/// What the router knows: the sites' networks (site i = `sites[i]`), the link of every
/// direction (`pairs`, else `default`).
#[derive(Clone, Debug)]
pub struct RouterConfig {
    pub sites: Vec<Net>,
    pub default: LinkParams,
    pub pairs: HashMap<(usize, usize), LinkParams>,
}

/// A direction: (source site, destination site), `None` for addresses outside every site.
type Key = (Option<usize>, Option<usize>);

/// The sans-IO core of the router: packets and time in, due packets out.
pub struct Router {
    cfg: RouterConfig,
    pipes: HashMap<Key, Pipe<Vec<u8>>>,
    /// Packets dropped on a full queue, per direction.
    pub dropped: HashMap<Key, u64>,
}

impl Router {
    pub fn new(cfg: RouterConfig) -> Router {
        Router {
            cfg,
            pipes: HashMap::new(),
            dropped: HashMap::new(),
        }
    }

    fn site_of(&self, ip: u32) -> Option<usize> {
        self.cfg.sites.iter().position(|n| n.contains(ip))
    }

    /// The direction of an IP packet (IPv4 addresses; anything else goes by `default`).
    pub fn classify(&self, pkt: &[u8]) -> Key {
        if pkt.len() >= 20 && pkt[0] >> 4 == 4 {
            let src = u32::from_be_bytes(pkt[12..16].try_into().expect("4 bytes"));
            let dst = u32::from_be_bytes(pkt[16..20].try_into().expect("4 bytes"));
            (self.site_of(src), self.site_of(dst))
        } else {
            (None, None)
        }
    }

    /// A packet read from the device at `now`: queued (true) or dropped.
    pub fn input(&mut self, now: Duration, pkt: Vec<u8>) -> bool {
        let key = self.classify(&pkt);
        let params = match key {
            (Some(a), Some(b)) => self.cfg.pairs.get(&(a, b)).copied(),
            _ => None,
        }
        .unwrap_or(self.cfg.default);
        let seed = self.pipes.len() as u64 * 7919 + 1;
        let pipe = self
            .pipes
            .entry(key)
            .or_insert_with(|| Pipe::new(params, seed));
        let len = pkt.len();
        match pipe.offer(now, pkt, len) {
            Ok(_) => true,
            Err(_) => {
                *self.dropped.entry(key).or_default() += 1;
                false
            }
        }
    }

    /// The earliest due time of any queued packet.
    pub fn next_due(&self) -> Option<Duration> {
        self.pipes.values().filter_map(|p| p.next_due()).min()
    }

    /// Every packet due at `now`.
    pub fn output(&mut self, now: Duration, out: &mut Vec<Vec<u8>>) {
        for p in self.pipes.values_mut() {
            while let Some(pkt) = p.pop_due(now) {
                out.push(pkt);
            }
        }
    }
}

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TUN: libc::c_short = 0x0001;
const IFF_NO_PI: libc::c_short = 0x1000;

#[repr(C)]
struct IfReq {
    name: [libc::c_char; 16],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// Attach to (or create) the TUN device `name`, non-blocking, without packet information.
pub fn open_tun(name: &str) -> std::io::Result<OwnedFd> {
    if name.is_empty() || name.len() > 15 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{name:?}: a device name has 1 to 15 characters"),
        ));
    }
    // SAFETY: a constant NUL-terminated path; the returned descriptor is checked.
    let fd = unsafe {
        libc::open(
            c"/dev/net/tun".as_ptr(),
            libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a descriptor we just opened and own from here on.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut req = IfReq {
        name: [0; 16],
        flags: IFF_TUN | IFF_NO_PI,
        _pad: [0; 22],
    };
    for (d, s) in req.name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    // SAFETY: TUNSETIFF reads a `struct ifreq` (name, then the flags union) that `req`
    // lays out with C representation and the kernel's size (40 bytes).
    if unsafe { libc::ioctl(owned.as_raw_fd(), TUNSETIFF, &mut req as *mut IfReq) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(owned)
}

/// Route packets through the device until an I/O error ends the loop.
pub fn run(dev: &str, cfg: RouterConfig) -> std::io::Result<()> {
    let tun = open_tun(dev)?;
    let fd = tun.as_raw_fd();
    let epoch = Instant::now();
    let mut router = Router::new(cfg);
    let mut buf = vec![0u8; 65536];
    let mut due = Vec::new();
    loop {
        let now = epoch.elapsed();
        let timeout = router.next_due().map(|d| d.saturating_sub(now));
        let ts = timeout.map(|t| libc::timespec {
            tv_sec: t.as_secs() as libc::time_t,
            tv_nsec: t.subsec_nanos() as libc::c_long,
        });
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd; the timespec (if any) lives across the call.
        let r = unsafe {
            libc::ppoll(
                &mut pfd,
                1,
                ts.as_ref().map_or(std::ptr::null(), |t| t as *const _),
                std::ptr::null(),
            )
        };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        loop {
            // SAFETY: `buf` has `buf.len()` writable bytes.
            let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                match e.kind() {
                    std::io::ErrorKind::WouldBlock => break,
                    std::io::ErrorKind::Interrupted => continue,
                    _ => return Err(e),
                }
            }
            if n == 0 {
                break;
            }
            router.input(epoch.elapsed(), buf[..n as usize].to_vec());
        }
        router.output(epoch.elapsed(), &mut due);
        for pkt in due.drain(..) {
            // SAFETY: `pkt` is a readable buffer of `pkt.len()` bytes. A failed write loses
            // one packet, which TCP retransmits.
            unsafe { libc::write(fd, pkt.as_ptr().cast(), pkt.len()) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(src: [u8; 4], dst: [u8; 4], len: usize) -> Vec<u8> {
        let mut p = vec![0u8; len];
        p[0] = 0x45;
        p[12..16].copy_from_slice(&src);
        p[16..20].copy_from_slice(&dst);
        p
    }

    #[test]
    fn each_site_pair_direction_has_its_own_link() {
        let mut pairs = HashMap::new();
        pairs.insert((1, 0), LinkParams::parse("delay=20ms").unwrap());
        let mut r = Router::new(RouterConfig {
            sites: vec![
                Net::parse("10.1.0.0/16").unwrap(),
                Net::parse("10.2.0.0/16").unwrap(),
            ],
            default: LinkParams::parse("delay=5ms").unwrap(),
            pairs,
        });
        let ms = Duration::from_millis;
        let a_to_b = packet([10, 1, 0, 2], [10, 2, 0, 2], 100);
        let b_to_a = packet([10, 2, 0, 2], [10, 1, 0, 2], 100);
        assert_eq!(r.classify(&a_to_b), (Some(0), Some(1)));
        assert_eq!(r.classify(&[0x60; 40]), (None, None));
        assert_eq!(r.classify(&[0x45; 4]), (None, None));
        assert!(r.input(ms(0), a_to_b.clone()));
        assert!(r.input(ms(0), b_to_a.clone()));
        assert_eq!(r.next_due(), Some(ms(5)));
        let mut out = Vec::new();
        r.output(ms(4), &mut out);
        assert!(out.is_empty());
        r.output(ms(5), &mut out);
        assert_eq!(out, vec![a_to_b]);
        out.clear();
        r.output(ms(19), &mut out);
        assert!(out.is_empty());
        r.output(ms(20), &mut out);
        assert_eq!(out, vec![b_to_a]);
    }

    #[test]
    fn a_full_queue_drops_packets() {
        let mut r = Router::new(RouterConfig {
            sites: vec![
                Net::parse("10.1.0.0/24").unwrap(),
                Net::parse("10.2.0.0/24").unwrap(),
            ],
            default: LinkParams::parse("rate=1MB,queue=3000").unwrap(),
            pairs: HashMap::new(),
        });
        let p = packet([10, 1, 0, 2], [10, 2, 0, 9], 1000);
        let accepted = (0..10)
            .filter(|_| r.input(Duration::ZERO, p.clone()))
            .count();
        assert_eq!(accepted, 3); // 3000 bytes of queue
        assert_eq!(r.dropped[&(Some(0), Some(1))], 7);
        assert!(Net::parse("10.1.0.0/33").is_err());
        assert!(Net::parse("10.1.0/24").is_err());
    }
}
