//! A test rank for mpirun's integration tests (launcher/tests): speaks PMI through
//! `tsunagi_core::pmi` and then does what its arguments say.
//!
//! Arguments are actions run in order; `R:action` runs only on rank R.
//! - `exchange`: put a card, barrier, read and check every rank's card (plus a long value
//!   and the process mapping), print `exchange ok rank R of N`
//! - `barrier`, `exit=N`, `abort=N` (MPI_Abort with a message), `signal=N` (raise),
//!   `sleep=SECS`, `ignoreterm` (ignore SIGTERM), `echo` (copy stdin to stdout),
//!   `bytes` (write bytes 0..=255 to stdout), `env=NAME` (print `NAME=value`),
//!   `shm` (create /dev/shm/tsunagi-<kvsname>-test-R, as the MPI core's segments are named),
//!   `nofinalize` (exit 0 at the end without PMI finalize).
//!
//! With `PMI_TEST_DIR` set, it first writes `<dir>/rank<R>` containing `<pid> <kvsname>`, so
//! tests can check that every process is gone afterwards.

use std::io::{Read, Write};
use std::time::Duration;

use tsunagi_core::pmi::PmiClient;

fn main() {
    let mut pmi = PmiClient::from_env()
        .expect("PMI init failed")
        .expect("pmi_rank must run under a launcher");
    let (rank, size) = (pmi.rank(), pmi.size());
    let kvs = pmi.kvsname().to_string();
    if let Ok(dir) = std::env::var("PMI_TEST_DIR") {
        let tmp = format!("{dir}/.rank{rank}.tmp");
        std::fs::write(&tmp, format!("{} {kvs}", std::process::id())).unwrap();
        std::fs::rename(&tmp, format!("{dir}/rank{rank}")).unwrap();
    }
    let mut finalize = true;
    for arg in std::env::args().skip(1) {
        let action = match arg.split_once(':') {
            Some((r, a)) if r.parse::<u32>().is_ok() => {
                if r.parse::<u32>() != Ok(rank) {
                    continue;
                }
                a.to_string()
            }
            _ => arg.clone(),
        };
        let (verb, val) = action.split_once('=').unwrap_or((action.as_str(), ""));
        let num = || val.parse::<i32>().expect("numeric argument");
        match verb {
            "exchange" => {
                pmi.put(
                    &format!("card-{rank}"),
                    &format!("host=h{rank},port={}", 5000 + rank),
                )
                .unwrap();
                let long: String = (0..2500)
                    .map(|i| char::from(b'a' + ((i + rank) % 26) as u8))
                    .collect();
                pmi.put_long(&format!("long-{rank}"), &long).unwrap();
                pmi.barrier().unwrap();
                for p in 0..size {
                    let card = pmi.get(&format!("card-{p}")).unwrap();
                    assert_eq!(card, Some(format!("host=h{p},port={}", 5000 + p)));
                    let want: String = (0..2500)
                        .map(|i| char::from(b'a' + ((i + p) % 26) as u8))
                        .collect();
                    assert_eq!(pmi.get_long(&format!("long-{p}")).unwrap(), Some(want));
                }
                assert_eq!(pmi.get("no-such-key").unwrap(), None);
                assert_eq!(pmi.process_mapping().unwrap(), Some(vec![0; size as usize]));
                pmi.barrier().unwrap();
                println!("exchange ok rank {rank} of {size}");
            }
            "barrier" => pmi.barrier().unwrap(),
            "exit" => std::process::exit(num()),
            "abort" => {
                let code = num();
                pmi.abort(code, &format!("pmi_rank {rank} gives up"))
                    .unwrap();
                std::process::exit(code);
            }
            "signal" => {
                // SAFETY: raising a signal at ourselves.
                unsafe { libc::raise(num()) };
                std::thread::sleep(Duration::from_secs(30));
            }
            "sleep" => std::thread::sleep(Duration::from_secs_f64(val.parse().unwrap())),
            "ignoreterm" => {
                // SAFETY: setting a standard disposition.
                unsafe { libc::signal(libc::SIGTERM, libc::SIG_IGN) };
            }
            "echo" => {
                let mut input = Vec::new();
                std::io::stdin().read_to_end(&mut input).unwrap();
                std::io::stdout().write_all(&input).unwrap();
                std::io::stdout().flush().unwrap();
            }
            "bytes" => {
                let all: Vec<u8> = (0..=255).collect();
                std::io::stdout().write_all(&all).unwrap();
                std::io::stdout().flush().unwrap();
            }
            "env" => println!(
                "{val}={}",
                std::env::var(val).unwrap_or_else(|_| "<unset>".into())
            ),
            "shm" => {
                std::fs::write(format!("/dev/shm/tsunagi-{kvs}-test-{rank}"), b"segment").unwrap();
            }
            "nofinalize" => finalize = false,
            other => panic!("pmi_rank: unknown action {other:?}"),
        }
    }
    if finalize {
        pmi.finalize().unwrap();
    }
}
