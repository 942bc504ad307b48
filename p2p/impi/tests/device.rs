//! The IMPI device over a real TCP connection on this host, without MPI: two devices (world
//! ranks 0 and 1, each its own IMPI host) in one process, driven by hand. Short, long and
//! synchronous messages, flow control past hiwater, cancel, and FINI both ways.

use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tsunagi_impi::device::{HostConn, ImpiDevice};
use tsunagi_impi::{Link, LinkConfig, ProcId, ProcTable};
use tsunagi_p2p::device::{DataRep, Device, DeviceCancel, DeviceEvent, Envelope};

fn pair(cfg: LinkConfig) -> (ImpiDevice, ImpiDevice) {
    let table = Arc::new(
        ProcTable::new(vec![
            ProcId::ipv4(Ipv4Addr::LOCALHOST, 100),
            ProcId::ipv4(Ipv4Addr::LOCALHOST, 101),
        ])
        .unwrap(),
    );
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (b, _) = l.accept().unwrap();
    let mk = |me: u32, peer: u32, s: TcpStream| {
        let link = Link::new(cfg, table.clone(), &[me], &[peer]).unwrap();
        let conn = HostConn::new(peer, s, link).unwrap();
        ImpiDevice::new(me, 2, vec![(conn, vec![peer])], 32767, DataRep::Native).unwrap()
    };
    (mk(0, 1, a), mk(1, 0, b))
}

fn env(src: u32, dst: u32, tag: i32, len: usize) -> Envelope {
    Envelope {
        src,
        dst,
        tag,
        context: 4,
        len: len as u64,
    }
}

/// Poll both devices until `want` holds for the events collected so far (per device).
fn pump(
    d: &mut [&mut ImpiDevice; 2],
    evs: &mut [Vec<DeviceEvent>; 2],
    want: impl Fn(&[Vec<DeviceEvent>; 2]) -> bool,
) {
    let t = Instant::now();
    while !want(evs) {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "stuck; events so far: {evs:?}"
        );
        for (i, dev) in d.iter_mut().enumerate() {
            dev.poll(&mut |e| evs[i].push(e)).unwrap();
        }
    }
}

fn bytes(seed: u8, n: usize) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
}

#[test]
fn short_long_and_synchronous_messages_and_flow_control() {
    let cfg = LinkConfig {
        datalen: 1000,
        ackmark: 2,
        hiwater: 4,
    };
    let (mut a, mut b) = pair(cfg);
    let mut evs: [Vec<DeviceEvent>; 2] = Default::default();
    // 30 short standard messages back to back (past hiwater 4), one long, one synchronous.
    for i in 0..30 {
        a.send(env(0, 1, i, 10), false, bytes(i as u8, 10), i as u64)
            .unwrap();
    }
    let long = bytes(7, 5500);
    a.send(env(0, 1, 99, long.len()), false, long.clone(), 99)
        .unwrap();
    a.send(env(0, 1, 98, 3), true, vec![1, 2, 3], 98).unwrap();
    let arrived = |e: &Vec<DeviceEvent>| {
        e.iter()
            .filter(|x| matches!(x, DeviceEvent::Arrived { .. }))
            .count()
    };
    pump(&mut [&mut a, &mut b], &mut evs, |e| arrived(&e[1]) == 32);
    // In order, with their data; accept each (the long and synchronous ones need it).
    let mut ids = Vec::new();
    for (k, e) in evs[1].clone().iter().enumerate() {
        if let DeviceEvent::Arrived {
            id,
            env,
            sync,
            data,
            complete,
        } = e
        {
            ids.push(*id);
            match k {
                0..=29 => {
                    assert_eq!(
                        (env.tag, env.src, *complete, *sync),
                        (k as i32, 0, true, false)
                    );
                    assert_eq!(*data, bytes(k as u8, 10));
                }
                30 => {
                    assert_eq!(
                        (env.tag, env.len, *complete, *sync),
                        (99, 5500, false, true)
                    );
                    assert_eq!(data[..], long[..1000]);
                }
                _ => assert_eq!((env.tag, *sync, *complete), (98, true, true)),
            }
        }
    }
    // The standard short sends are complete; the long and synchronous ones wait.
    let complete = |e: &Vec<DeviceEvent>, t: u64| {
        e.iter()
            .any(|x| matches!(x, DeviceEvent::SendComplete { token } if *token == t))
    };
    assert!((0..30).all(|t| complete(&evs[0], t)));
    assert!(!complete(&evs[0], 99) && !complete(&evs[0], 98));
    for id in &ids {
        b.accept(*id).unwrap();
    }
    pump(&mut [&mut a, &mut b], &mut evs, |e| {
        complete(&e[0], 99)
            && complete(&e[0], 98)
            && e[1]
                .iter()
                .any(|x| matches!(x, DeviceEvent::Received { .. }))
    });
    let mut got = vec![0u8; 5500];
    got[..1000].copy_from_slice(&long[..1000]);
    for e in &evs[1] {
        if let DeviceEvent::Data { id, offset, data } = e {
            assert_eq!(*id, ids[30]);
            got[*offset as usize..*offset as usize + data.len()].copy_from_slice(data);
        }
    }
    assert_eq!(got, long);
}

#[test]
fn cancel_before_the_match_and_fini_both_ways() {
    let (mut a, mut b) = pair(LinkConfig::default());
    let mut evs: [Vec<DeviceEvent>; 2] = Default::default();
    a.send(env(0, 1, 5, 4), true, vec![9; 4], 1).unwrap();
    pump(&mut [&mut a, &mut b], &mut evs, |e| !e[1].is_empty());
    assert_eq!(a.cancel_send(1).unwrap(), DeviceCancel::Pending);
    pump(&mut [&mut a, &mut b], &mut evs, |e| {
        e[0].iter()
            .any(|x| matches!(x, DeviceEvent::CancelResult { .. }))
    });
    assert!(evs[0].contains(&DeviceEvent::CancelResult {
        token: 1,
        cancelled: true
    }));
    assert!(evs[1]
        .iter()
        .any(|x| matches!(x, DeviceEvent::ArrivalCancelled { .. })));
    // A finished short send cannot be cancelled.
    b.send(env(1, 0, 6, 1), false, vec![1], 7).unwrap();
    assert_eq!(b.cancel_send(7).unwrap(), DeviceCancel::NotCancelled);
    // FINI both ways: each finish waits for the other side's, so run them in two threads.
    let ta = std::thread::spawn(move || a.finish(Duration::from_secs(10)));
    let tb = std::thread::spawn(move || b.finish(Duration::from_secs(10)));
    ta.join().unwrap().unwrap();
    tb.join().unwrap().unwrap();
}

#[test]
fn a_peer_that_goes_away_is_a_failed_peer() {
    let (mut a, b) = pair(LinkConfig::default());
    drop(b);
    let t = Instant::now();
    loop {
        match a.poll(&mut |_| {}) {
            Err(e) => {
                let s = e.to_string();
                assert!(s.contains("went away") && s.contains("before FINI"), "{s}");
                break;
            }
            Ok(_) => assert!(t.elapsed() < Duration::from_secs(5), "no error"),
        }
    }
}
