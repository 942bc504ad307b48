//! `tsunagi-impi-relay`: the command line (see the crate doc).

use std::net::{Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::process::ExitCode;

use clap::Parser;
use tsunagi_impi_relay::{Config, Relay};

/// An IMPI relay for private networks: sites give it as their IMPI server; their hosts
/// appear at the relay's public address, and the relay forwards each host pair's
/// connection to the private host.
///
/// Prints `listening ADDR:PORT` on stdout once ready.
#[derive(Parser)]
#[command(name = "tsunagi-impi-relay", version)]
struct Cli {
    /// Where sites reach the relay instead of the server (`ADDR:PORT`, port 0 for any).
    #[arg(long, default_value = "0.0.0.0:0")]
    listen: SocketAddr,
    /// The IMPI server (`HOST:PORT`).
    #[arg(long)]
    server: String,
    /// The relay's address that every site can reach: relayed hosts appear there.
    #[arg(long)]
    public: Ipv4Addr,
    /// Say what is relayed on stderr.
    #[arg(long, short)]
    verbose: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let server = match cli
        .server
        .to_socket_addrs()
        .map(|mut a| a.find(|a| a.is_ipv4()))
    {
        Ok(Some(a)) => a,
        Ok(None) => {
            eprintln!(
                "tsunagi-impi-relay: --server {}: no IPv4 address",
                cli.server
            );
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("tsunagi-impi-relay: --server {}: {e}", cli.server);
            return ExitCode::from(2);
        }
    };
    let relay = match Relay::bind(Config {
        listen: cli.listen,
        server,
        public: cli.public,
        verbose: cli.verbose,
    }) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tsunagi-impi-relay: listen on {}: {e}", cli.listen);
            return ExitCode::FAILURE;
        }
    };
    match relay.local_addr() {
        Ok(a) => println!("listening {a}"),
        Err(e) => {
            eprintln!("tsunagi-impi-relay: {e}");
            return ExitCode::FAILURE;
        }
    }
    use std::io::Write;
    let _ = std::io::stdout().flush();
    match relay.serve() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tsunagi-impi-relay: {e}");
            ExitCode::FAILURE
        }
    }
}
