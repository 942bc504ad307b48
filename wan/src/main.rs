//! `tsunagi-wan`: the command line of the wide-area link emulator (see the crate doc and
//! `docs/wan.md`).

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tsunagi_wan::probe;
use tsunagi_wan::relay::{Mapping, Relay};
use tsunagi_wan::router::{self, Net, RouterConfig};
use tsunagi_wan::LinkParams;

/// A wide-area link emulator in user space: one-way delay, jitter and a bandwidth limit per
/// direction, byte order kept.
///
/// A LINK spec is `delay=5ms,jitter=1ms,rate=100Mbit,queue=4MiB` (every key optional;
/// rate in bit/s with `bit` or bytes/s with `B`, e.g. `10MB`).
#[derive(Parser)]
#[command(name = "tsunagi-wan", version)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// TCP relay: accept on LISTEN, connect to TARGET, shape both directions.
    Relay {
        /// `LISTEN_ADDR:PORT=TARGET_ADDR:PORT`; repeat for several ports.
        #[arg(long = "map", required = true)]
        maps: Vec<String>,
        /// The link from the connecting side to the target.
        #[arg(long, default_value = "")]
        link: String,
        /// The link back (default: the same as --link).
        #[arg(long)]
        back: Option<String>,
    },
    /// TUN router: shape every IP packet read from DEV by its (source site, destination
    /// site) and write it back when due. Set up by scripts/wan-netns.
    Router {
        /// The TUN device (created if it does not exist; usually made persistent first with
        /// `ip tuntap add dev DEV mode tun`).
        #[arg(long, default_value = "wan0")]
        dev: String,
        /// A site's network, e.g. `10.78.1.0/24`; repeat, site i = i-th (from 0).
        #[arg(long = "site", required = true)]
        sites: Vec<String>,
        /// The link of every direction between sites.
        #[arg(long, default_value = "")]
        link: String,
        /// `I-J:LINK` gives the direction from site I to site J its own link.
        #[arg(long = "pair")]
        pairs: Vec<String>,
    },
    /// TCP echo server (for `ping`).
    Echo {
        #[arg(long)]
        listen: SocketAddr,
    },
    /// Round trips to an echo server: prints min, median and max in microseconds and the
    /// one-way estimate (median / 2).
    Ping {
        #[arg(long)]
        to: SocketAddr,
        #[arg(long, default_value_t = 20)]
        count: usize,
        #[arg(long, default_value_t = 8)]
        size: usize,
    },
}

fn link(spec: &str, what: &str) -> Result<LinkParams, String> {
    LinkParams::parse(spec).map_err(|e| format!("{what}: {e}"))
}

fn main_inner() -> Result<(), String> {
    match Cli::parse().cmd {
        Cmd::Relay {
            maps,
            link: l,
            back,
        } => {
            let fwd = link(&l, "--link")?;
            let rev = match back {
                Some(b) => link(&b, "--back")?,
                None => fwd,
            };
            let maps = maps
                .iter()
                .map(|m| Mapping::parse(m).map_err(|e| format!("--map {e}")))
                .collect::<Result<Vec<_>, _>>()?;
            let relay = Relay::bind(&maps, fwd, rev).map_err(|e| e.to_string())?;
            for (m, a) in maps.iter().zip(relay.local_addrs()) {
                eprintln!("tsunagi-wan: relaying {a} -> {}", m.target);
            }
            relay.serve();
            Ok(())
        }
        Cmd::Router {
            dev,
            sites,
            link: l,
            pairs,
        } => {
            let sites = sites
                .iter()
                .map(|s| Net::parse(s).map_err(|e| format!("--site {e}")))
                .collect::<Result<Vec<_>, _>>()?;
            let mut map = HashMap::new();
            for p in &pairs {
                let (ij, spec) = p
                    .split_once(':')
                    .ok_or_else(|| format!("--pair {p:?}: expected I-J:LINK"))?;
                let (i, j) = ij
                    .split_once('-')
                    .and_then(|(i, j)| Some((i.trim().parse().ok()?, j.trim().parse().ok()?)))
                    .filter(|&(i, j): &(usize, usize)| i < sites.len() && j < sites.len())
                    .ok_or_else(|| {
                        format!(
                            "--pair {p:?}: I-J must name two of the {} sites",
                            sites.len()
                        )
                    })?;
                map.insert((i, j), link(spec, "--pair")?);
            }
            let cfg = RouterConfig {
                sites,
                default: link(&l, "--link")?,
                pairs: map,
            };
            router::run(&dev, cfg).map_err(|e| format!("TUN device {dev}: {e}"))
        }
        Cmd::Echo { listen } => {
            let l = TcpListener::bind(listen).map_err(|e| format!("listen on {listen}: {e}"))?;
            probe::echo(l);
            Ok(())
        }
        Cmd::Ping { to, count, size } => {
            if count == 0 {
                return Err("--count must be at least 1".into());
            }
            let rtts = probe::ping(to, count, size).map_err(|e| format!("ping {to}: {e}"))?;
            let us = |d: std::time::Duration| d.as_secs_f64() * 1e6;
            let med = probe::median(&rtts);
            println!(
                "rtt_us min {:.0} median {:.0} max {:.0} one_way_us {:.0}",
                us(*rtts.iter().min().expect("count >= 1")),
                us(med),
                us(*rtts.iter().max().expect("count >= 1")),
                us(med) / 2.0
            );
            Ok(())
        }
    }
}

fn main() -> ExitCode {
    match main_inner() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tsunagi-wan: {e}");
            ExitCode::from(2)
        }
    }
}
