//! Decode a captured host-to-host IMPI byte stream (one direction of one connection):
//! one line per packet, then a count per type. Exits 1 if the stream is not whole packets.
//!
//!   cargo run -p tsunagi-impi --example impi-decode -- FILE [--skip N] [--datalen D] [--quiet]
//!
//! `--skip 4` skips the host index a connecting host sends first.

use std::collections::BTreeMap;
use std::process::ExitCode;

use tsunagi_impi::packet::{PacketDecoder, HEADER_LEN};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut file = None;
    let mut skip = 0usize;
    let mut datalen = u32::MAX;
    let mut quiet = false;
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--skip" => {
                i += 1;
                skip = args.get(i).and_then(|s| s.parse().ok()).unwrap_or(0);
            }
            "--datalen" => {
                i += 1;
                datalen = args.get(i).and_then(|s| s.parse().ok()).unwrap_or(u32::MAX);
            }
            "--quiet" => quiet = true,
            f => file = Some(f.to_string()),
        }
        i += 1;
    }
    let Some(file) = file else {
        eprintln!("usage: impi-decode FILE [--skip N] [--datalen D] [--quiet]");
        return ExitCode::from(2);
    };
    let bytes = match std::fs::read(&file) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("impi-decode: {file}: {e}");
            return ExitCode::from(2);
        }
    };
    let mut dec = PacketDecoder::new(datalen);
    dec.push(&bytes[skip.min(bytes.len())..]);
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut at = skip;
    loop {
        match dec.next_packet() {
            Ok(Some((h, data))) => {
                if !quiet {
                    println!(
                        "@{at} {:?} len {} msglen {} src {:?} dst {:?} srqid {} drqid {} lsrank {} tag {} cid {} seq {}",
                        h.pk_type,
                        h.pk_len,
                        h.pk_msglen,
                        h.pk_src,
                        h.pk_dest,
                        h.pk_srqid,
                        h.pk_drqid,
                        h.pk_lsrank,
                        h.pk_tag,
                        h.pk_cid,
                        h.pk_seqnum
                    );
                }
                at += HEADER_LEN + data.len();
                *counts.entry(format!("{:?}", h.pk_type)).or_default() += 1;
            }
            Ok(None) => break,
            Err(e) => {
                eprintln!("impi-decode: at byte {at}: {e}");
                return ExitCode::from(1);
            }
        }
    }
    println!("{counts:?}");
    if dec.buffered() != 0 {
        eprintln!(
            "impi-decode: {} trailing bytes (a partial packet)",
            dec.buffered()
        );
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}
