//! A rank restarted from its checkpoint image in a new process, with real processes and
//! real UDP (127.0.0.1, 1500-byte datagrams so that large messages go as trains of
//! fragments, 2 % loss, duplication and reordering injected on both sides).
//!
//! The test starts two processes (this test binary again, running the ignored
//! `rank_process` entry point), which exchange 600 messages each way (sizes 0 to 45 KB,
//! through PM's rings). Mid-traffic, after sending 300, rank 1 takes its image
//! ([`PmTransport::checkpoint_for_restart`], rank 0 joining the checkpoint through the
//! markers) with its own progress inside, writes it to a file and waits. The test kills
//! it (SIGKILL), starts a replacement that restores the image
//! ([`PmTransport::restart`]: new socket, new port, new epoch), which announces its new
//! address with an authenticated MOVE. Rank 0 never stops. Each rank checks that every
//! message of the other arrives exactly once, in order, with its content, and they finish
//! with an exchange of DONE messages (each says it has everything), so neither leaves
//! while the other may still need it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tsunagi_p2p::{Header, Rank, Transport};
use tsunagi_pm::transport::{Faults, PmTransport, PmTransportConfig};

const MSGS: u64 = 600;
/// Rank 1 takes its image once it has sent this many messages.
const SAVE_AT: u64 = 300;
const KEY: &str = "0f1e2d3c4b5a69788796a5b4c3d2e1f0";
const EAGER: u8 = 3;
const DONE: u8 = 9;
/// Bound of each process's run, and of the test's waits.
const BOUND: Duration = Duration::from_secs(120);

fn body(owner: Rank, i: u64) -> Vec<u8> {
    let len = match i % 10 {
        0 => 40_000 + (i as usize * 37) % 5000,
        _ => (i as usize * 7919) % 3000,
    };
    (0..len)
        .map(|k| (k as u64 ^ i.wrapping_mul(31) ^ (owner as u64 * 77)) as u8)
        .collect()
}

fn config() -> PmTransportConfig {
    let mut cfg = PmTransportConfig::from_env(|_| None).unwrap();
    cfg.interface = Some("127.0.0.1".into());
    cfg.mtu = Some(1500);
    cfg.faults = Faults {
        drop: 0.02,
        duplicate: 0.02,
        reorder: 0.02,
    };
    cfg.job_key = Some(tsunagi_tcp::JobKey::from_hex(KEY).unwrap());
    cfg
}

fn write_atomically(path: &Path, data: &[u8]) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, data).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn wait_for_file(path: &Path) -> Vec<u8> {
    let start = Instant::now();
    loop {
        if let Ok(d) = std::fs::read(path) {
            return d;
        }
        assert!(
            start.elapsed() < BOUND,
            "{} did not appear in {BOUND:?}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Poll once into `inbox`; sleep on the transport's events when nothing came.
fn poll(t: &mut PmTransport, inbox: &mut Vec<(Header, Vec<u8>)>, may_sleep: bool) {
    let n = t
        .poll(&mut |_, h: &Header, p: &[u8]| inbox.push((*h, p.to_vec())))
        .unwrap();
    if n == 0 && may_sleep {
        let until = t
            .next_deadline()
            .map(|d| d.saturating_duration_since(Instant::now()))
            .unwrap_or(Duration::from_millis(5))
            .min(Duration::from_millis(5));
        t.event_source().sleep(0, until);
    }
}

/// One rank's side, in its own process. Rank 1 of the first generation stops at
/// `SAVE_AT` to be replaced.
fn run_rank(dir: &Path, me: Rank, image: Option<Vec<u8>>) {
    let peer = 1 - me;
    let cfg = config();
    let (mut t, mut next, mut got) = match image {
        Some(img) => {
            let (t, app) = PmTransport::restart(&cfg, &img).unwrap();
            let word = |i: usize| u64::from_le_bytes(app[8 * i..8 * i + 8].try_into().unwrap());
            eprintln!(
                "rank {me}: restarted at {} (generation {}), resuming after {} sent and {} \
                 received",
                t.local_addr(),
                t.generation(),
                word(0),
                word(1)
            );
            (t, word(0), word(1))
        }
        None => {
            let mut t = PmTransport::bind(me, 2, &cfg).unwrap();
            write_atomically(&dir.join(format!("card-{me}")), t.card().as_bytes());
            let card = wait_for_file(&dir.join(format!("card-{peer}")));
            let card = tsunagi_pm::parse_card(std::str::from_utf8(&card).unwrap()).unwrap();
            let one = tsunagi_pm::lids::LidWiring::single(2);
            t.set_peers(&[(peer, card)], &one).unwrap();
            (t, 0, 0)
        }
    };
    let replaceable = me == 1 && t.generation() == 0;
    let (mut done_sent, mut peer_done) = (false, false);
    let mut inbox = Vec::new();
    let start = Instant::now();
    while !(done_sent && peer_done) {
        let mut sent = false;
        if next < MSGS {
            let h = Header {
                kind: EAGER,
                src: me,
                cookie: next,
                ..Default::default()
            };
            if t.try_send(peer, &h, &body(me, next)).unwrap() {
                next += 1;
                sent = true;
            }
        } else if got == MSGS && !done_sent {
            let h = Header {
                kind: DONE,
                src: me,
                ..Default::default()
            };
            done_sent = t.try_send(peer, &h, &[]).unwrap();
            sent = done_sent;
        }
        poll(&mut t, &mut inbox, !sent);
        for (h, p) in inbox.drain(..) {
            match h.kind {
                EAGER => {
                    assert_eq!(h.cookie, got, "rank {me}: exactly once, in order");
                    assert!(p == body(peer, got), "rank {me}: content of message {got}");
                    got += 1;
                }
                DONE => {
                    assert_eq!(got, MSGS, "rank {me}: DONE before every message");
                    peer_done = true;
                }
                k => panic!("rank {me}: message kind {k}"),
            }
        }
        if replaceable && next == SAVE_AT {
            let mut app = next.to_le_bytes().to_vec();
            app.extend_from_slice(&got.to_le_bytes());
            let img = t.checkpoint_for_restart(&app).unwrap();
            eprintln!(
                "rank {me}: image of {} bytes taken after {next} sent and {got} received",
                img.len()
            );
            write_atomically(&dir.join(format!("rank-{me}.img")), &img);
            // This process is done with the network: wait to be killed.
            assert!(t.try_send(peer, &Header::default(), &[]).is_err());
            std::thread::sleep(BOUND);
            panic!("rank {me}: not killed after its image");
        }
        assert!(
            start.elapsed() < BOUND,
            "rank {me} stuck: sent {next}, received {got}, done {done_sent}/{peer_done}"
        );
    }
    let (moves, refused) = t.moves_seen();
    assert_eq!(t.moves_pending(), 0, "rank {me}: a MOVE unanswered");
    println!(
        "rank {me}: sent {next}, received {got} in order; generation {}; moves of peers \
         applied {moves}, refused {refused}",
        t.generation()
    );
    drop(t);
}

/// The entry point of the ranks' processes (run by the test below with
/// `PM_RESTART_TEST_DIR` set; without it there is nothing to do).
#[test]
#[ignore = "a rank's process for a_rank_restarts_in_a_new_process"]
fn rank_process() {
    let Ok(dir) = std::env::var("PM_RESTART_TEST_DIR") else {
        return;
    };
    let me: Rank = std::env::var("PM_RESTART_TEST_RANK")
        .unwrap()
        .parse()
        .unwrap();
    let image = std::env::var("PM_RESTART_TEST_IMAGE")
        .ok()
        .map(|p| std::fs::read(p).unwrap());
    run_rank(Path::new(&dir), me, image);
}

fn spawn(dir: &Path, rank: Rank, image: Option<&Path>, log: &str) -> Child {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([
        "--exact",
        "rank_process",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("PM_RESTART_TEST_DIR", dir)
    .env("PM_RESTART_TEST_RANK", rank.to_string())
    .stdin(Stdio::null())
    .stdout(std::fs::File::create(dir.join(format!("{log}.out"))).unwrap())
    .stderr(std::fs::File::create(dir.join(format!("{log}.err"))).unwrap());
    if let Some(i) = image {
        c.env("PM_RESTART_TEST_IMAGE", i);
    }
    c.spawn().unwrap()
}

fn logs(dir: &Path, log: &str) -> String {
    let r =
        |ext: &str| std::fs::read_to_string(dir.join(format!("{log}.{ext}"))).unwrap_or_default();
    format!(
        "--- {log} stdout\n{}--- {log} stderr\n{}",
        r("out"),
        r("err")
    )
}

/// Wait for `child` (bounded); its stdout on success.
fn finish(dir: &Path, mut child: Child, log: &str, others: &mut [Child]) -> String {
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if start.elapsed() > BOUND {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    if status.is_none_or(|s| !s.success()) {
        for o in others {
            let _ = o.kill();
            let _ = o.wait();
        }
        panic!("{log} ended with {status:?}\n{}", logs(dir, log));
    }
    std::fs::read_to_string(dir.join(format!("{log}.out"))).unwrap()
}

#[test]
fn a_rank_restarts_in_a_new_process() {
    let dir: PathBuf =
        std::env::temp_dir().join(format!("tsunagi-pm-restart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut rank0 = spawn(&dir, 0, None, "rank0");
    let mut old1 = spawn(&dir, 1, None, "rank1-old");
    // Rank 1's image appears mid-traffic; then its process goes.
    let image = dir.join("rank-1.img");
    let start = Instant::now();
    while !image.exists() {
        let ended = [
            (rank0.try_wait().unwrap(), "rank0"),
            (old1.try_wait().unwrap(), "rank1-old"),
        ];
        if let Some((s, log)) = ended.iter().find_map(|(s, l)| s.map(|s| (s, *l))) {
            let _ = rank0.kill();
            let _ = old1.kill();
            panic!("{log} ended ({s}) before the image\n{}", logs(&dir, log));
        }
        assert!(start.elapsed() < BOUND, "no image in {BOUND:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
    old1.kill().unwrap();
    assert!(!old1.wait().unwrap().success());
    let new1 = spawn(&dir, 1, Some(&image), "rank1-new");
    let out1 = finish(&dir, new1, "rank1-new", std::slice::from_mut(&mut rank0));
    let out0 = finish(&dir, rank0, "rank0", &mut []);
    eprintln!(
        "{out0}{out1}{}{}",
        logs(&dir, "rank1-old"),
        logs(&dir, "rank1-new")
    );
    assert!(
        out0.contains(
            "rank 0: sent 600, received 600 in order; generation 0; moves of peers applied 1"
        ),
        "{}",
        logs(&dir, "rank0")
    );
    assert!(
        out1.contains("rank 1: sent 600, received 600 in order; generation 1"),
        "{}",
        logs(&dir, "rank1-new")
    );
    let old = logs(&dir, "rank1-old");
    assert!(old.contains("image of"), "{old}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A MOVE is applied only when its MAC is right under the job key, it comes from the
/// address its card names, it names the epoch we know and a newer generation; a repeat of
/// the one applied is answered, not applied again.
#[test]
fn moves_are_checked() {
    use tsunagi_pm::restart::{encode_move, Move};
    let cfg = config();
    let mut a = PmTransport::bind(0, 2, &cfg).unwrap();
    let b = PmTransport::bind(1, 2, &cfg).unwrap();
    let one = tsunagi_pm::lids::LidWiring::single(2);
    let cb = tsunagi_pm::parse_card(&b.card()).unwrap();
    a.set_peers(&[(1, cb.clone())], &one).unwrap();
    // The "new process" of rank 1: a socket of its own.
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let here = sock.local_addr().unwrap();
    let card = |epoch: u32| {
        tsunagi_pm::parse_card(&format!("pm:127.0.0.1:{}:{epoch:08x}", here.port())).unwrap()
    };
    let mv = |key: &[u8], old_epoch: u32, generation: u32, epoch: u32| {
        let m = Move {
            rank: 1,
            old_epoch,
            generation,
            card: card(epoch),
        };
        let mut out = Vec::new();
        encode_move(key, &m, 0, true, &mut out);
        out
    };
    let key = tsunagi_tcp::JobKey::from_hex(KEY).unwrap().0;
    let deliver = |a: &mut PmTransport, d: &[u8]| {
        sock.send_to(d, a.local_addr()).unwrap();
        let start = Instant::now();
        let before = a.moves_seen();
        while a.moves_seen() == before && start.elapsed() < Duration::from_millis(300) {
            a.poll(&mut |_, _: &Header, _: &[u8]| {}).unwrap();
        }
        a.moves_seen()
    };
    assert_eq!(deliver(&mut a, &mv(b"wrong key", cb.epoch, 1, 5)), (0, 1));
    assert_eq!(
        deliver(&mut a, &mv(&key, cb.epoch ^ 1, 1, 5)),
        (0, 2),
        "stale epoch"
    );
    assert_eq!(
        deliver(&mut a, &mv(&key, cb.epoch, 1, 5)),
        (1, 2),
        "applied"
    );
    assert_eq!(a.destination(1), Some(here));
    // The repeat is answered (an ACK to the new address), not applied again. First what
    // `a` owes for the applied move goes out (a delayed ACK leaves at a later poll: the
    // test once waited for an answer nobody polled `a` to send) and is drained.
    let mut buf = [0u8; 256];
    sock.set_nonblocking(true).unwrap();
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(50) {
        a.poll(&mut |_, _: &Header, _: &[u8]| {}).unwrap();
    }
    while sock.recv_from(&mut buf).is_ok() {}
    assert_eq!(deliver(&mut a, &mv(&key, cb.epoch, 1, 5)), (1, 2));
    let start = Instant::now();
    let n = loop {
        match sock.recv_from(&mut buf) {
            Ok((n, _)) => break n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("receiving the answer to the repeated MOVE: {e}"),
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "no answer to the repeated MOVE in 5 s"
        );
        a.poll(&mut |_, _: &Header, _: &[u8]| {}).unwrap();
    };
    let p = tsunagi_pm::wire::decode(&buf[..n]).unwrap();
    assert_eq!((p.kind, p.src, p.dst), (tsunagi_pm::wire::Kind::Ack, 0, 1));
    // A replay of the first generation once the epoch moved on is refused.
    assert_eq!(deliver(&mut a, &mv(&key, cb.epoch, 1, 6)), (1, 3));
    drop(b);
}
