//! The TCP relay on loopback: byte order and content through jitter, and the delay it adds
//! (one-way delay within 10 % of the setting, measured by round trips).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use tsunagi_wan::relay::{Mapping, Relay};
use tsunagi_wan::{probe, LinkParams};

fn relay_to_echo(spec: &str) -> std::net::SocketAddr {
    let echo = TcpListener::bind("127.0.0.1:0").unwrap();
    let target = echo.local_addr().unwrap();
    std::thread::spawn(move || probe::echo(echo));
    let map = Mapping::parse(&format!("127.0.0.1:0={target}")).unwrap();
    let p = LinkParams::parse(spec).unwrap();
    let relay = Relay::bind(&[map], p, p).unwrap();
    let addr = relay.local_addrs()[0];
    std::thread::spawn(move || relay.serve());
    addr
}

#[test]
fn one_way_delay_is_within_ten_percent_of_the_setting() {
    for ms in [5u64, 10] {
        let addr = relay_to_echo(&format!("delay={ms}ms"));
        let rtts = probe::ping(addr, 15, 8).unwrap();
        // The fastest round trip: the relay never delivers early; slower ones carry the
        // scheduling delays of a loaded machine.
        let one_way = rtts.iter().min().unwrap().as_secs_f64() / 2.0;
        let want = ms as f64 / 1000.0;
        assert!(
            (one_way - want).abs() <= 0.1 * want,
            "one-way {one_way:.6} s for a setting of {want} s"
        );
    }
}

#[test]
fn bytes_arrive_whole_and_in_order_through_jitter_and_a_rate_limit() {
    let addr = relay_to_echo("delay=2ms,jitter=2ms,rate=80Mbit");
    let mut s = TcpStream::connect(addr).unwrap();
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    let mut w = s.try_clone().unwrap();
    let d2 = data.clone();
    let t = Instant::now();
    let writer = std::thread::spawn(move || {
        w.write_all(&d2).unwrap();
        w.shutdown(std::net::Shutdown::Write).unwrap();
    });
    let mut back = Vec::new();
    s.read_to_end(&mut back).unwrap();
    writer.join().unwrap();
    let took = t.elapsed();
    assert_eq!(back.len(), data.len());
    assert!(back == data, "bytes reordered or changed");
    // 3 MB at 10 MB/s each way (the echo's way back overlaps): at least 0.3 s.
    assert!(
        took >= Duration::from_millis(290),
        "rate limit not applied: {took:?}"
    );
    assert!(took < Duration::from_secs(5), "far too slow: {took:?}");
}
