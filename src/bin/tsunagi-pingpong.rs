//! Point-to-point latency and bandwidth between ranks 0 and 1 through the safe Rust API;
//! the same method and output as the lat/bw part of the C benchmark `npb-tests/bench/p2p.c`,
//! so the Rust API's cost over the C ABI shows. Rank 0 prints:
//!
//! ```text
//! lat <bytes> <usec>    half round-trip time of a blocking ping-pong
//! bw <bytes> <MB/s>     streaming bandwidth (window of 64 immediate sends, then an ack), MB = 10^6 B
//! ```
//!
//! Each point: a warm-up batch, a calibration batch sized to take ~0.02 s, then a
//! measured batch sized (by rank 0, sent to all) to take ~0.2 s
//! (`TSUNAGI_BENCH_TARGET_SEC` changes that). Extra ranks (n > 2)
//! only take part in the iteration-count broadcasts and barriers.
use tsunagi::request;
use tsunagi::topology::SimpleCommunicator;
use tsunagi::traits::*;

const WINDOW: usize = 64;
/// Seconds each measured point should take; `TSUNAGI_BENCH_TARGET_SEC` overrides it
/// (the tests use a tiny value to check the output quickly).
fn target_sec() -> f64 {
    std::env::var("TSUNAGI_BENCH_TARGET_SEC")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|t| *t > 0.0)
        .unwrap_or(0.2)
}
const MIN_ITERS: i64 = 5;
const MAX_ITERS: i64 = 1_000_000;
const LAT_SIZES: [usize; 6] = [0, 8, 1024, 65536, 1048576, 4194304];
const BW_SIZES: [usize; 4] = [8, 1024, 65536, 1048576];

type R<T> = Result<T, tsunagi::Error>;

fn pingpong(world: &SimpleCommunicator, buf: &mut [u8], iters: i64) -> R<()> {
    let rank = world.rank();
    let p0 = world.process_at_rank(0);
    let p1 = world.process_at_rank(1);
    for _ in 0..iters {
        if rank == 0 {
            p1.send_with_tag(&*buf, 1)?;
            p1.receive_into_with_tag(buf, 1)?;
        } else if rank == 1 {
            p0.receive_into_with_tag(buf, 1)?;
            p0.send_with_tag(&*buf, 1)?;
        }
    }
    Ok(())
}

fn stream(
    world: &SimpleCommunicator,
    sbuf: &[u8],
    rbuf: &mut [u8],
    size: usize,
    iters: i64,
) -> R<()> {
    let rank = world.rank();
    let p0 = world.process_at_rank(0);
    let p1 = world.process_at_rank(1);
    let mut empty: [u8; 0] = [];
    for _ in 0..iters {
        if rank == 0 {
            request::scope(|scope| -> R<()> {
                let mut reqs = Vec::with_capacity(WINDOW);
                for _ in 0..WINDOW {
                    reqs.push(p1.immediate_send_with_tag(scope, &sbuf[..size], 2)?);
                }
                request::wait_all(reqs)?;
                Ok(())
            })?;
            p1.receive_into_with_tag(&mut empty[..], 3)?;
        } else if rank == 1 {
            request::scope(|scope| -> R<()> {
                let mut reqs = Vec::with_capacity(WINDOW);
                for chunk in rbuf.chunks_mut(size.max(1)).take(WINDOW) {
                    let chunk = &mut chunk[..size];
                    reqs.push(p0.immediate_receive_into_with_tag(scope, chunk, 2)?);
                }
                request::wait_all(reqs)?;
                Ok(())
            })?;
            p0.send_with_tag(&empty[..], 3)?;
        }
    }
    Ok(())
}

/// Rank 0's iteration count for `target` seconds given `warm` iterations took `t`,
/// sent to every rank.
fn scale_iters(world: &SimpleCommunicator, t: f64, warm: i64, target: f64) -> R<i64> {
    let mut iters = MAX_ITERS;
    if t > 0.0 {
        let per = t / warm as f64;
        let want = target / per;
        iters = if want < MIN_ITERS as f64 {
            MIN_ITERS
        } else if want > MAX_ITERS as f64 {
            MAX_ITERS
        } else {
            want as i64
        };
    }
    if world.rank() == 0 {
        for r in 1..world.size() {
            world.process_at_rank(r).send_with_tag(&iters, 4)?;
        }
        Ok(iters)
    } else {
        Ok(world.process_at_rank(0).receive_with_tag::<i64>(4)?.0)
    }
}

fn run(world: &SimpleCommunicator) -> R<()> {
    let target = target_sec();
    let rank = world.rank();
    let max_lat = *LAT_SIZES.last().unwrap();
    let max_bw = *BW_SIZES.last().unwrap();
    // Touch every page so first-touch faults stay out of the timings.
    let mut buf = vec![b'a'; max_lat];
    let sbuf = vec![b'b'; max_bw];
    let mut rbuf = vec![b'c'; max_bw * WINDOW];

    for &sz in &LAT_SIZES {
        let warm = if sz <= 65536 { 200 } else { 10 };
        world.barrier()?;
        let t0 = tsunagi::time();
        pingpong(world, &mut buf[..sz], warm)?;
        let mut iters = scale_iters(world, tsunagi::time() - t0, warm, target / 10.0)?;
        let t0 = tsunagi::time();
        pingpong(world, &mut buf[..sz], iters)?;
        iters = scale_iters(world, tsunagi::time() - t0, iters, target)?;
        world.barrier()?;
        let t0 = tsunagi::time();
        pingpong(world, &mut buf[..sz], iters)?;
        let t = tsunagi::time() - t0;
        if rank == 0 {
            println!("lat {sz} {:.3}", t / iters as f64 / 2.0 * 1e6);
        }
    }

    for &sz in &BW_SIZES {
        let warm = if sz <= 65536 { 20 } else { 2 };
        world.barrier()?;
        let t0 = tsunagi::time();
        stream(world, &sbuf, &mut rbuf, sz, warm)?;
        let mut iters = scale_iters(world, tsunagi::time() - t0, warm, target / 10.0)?;
        let t0 = tsunagi::time();
        stream(world, &sbuf, &mut rbuf, sz, iters)?;
        iters = scale_iters(world, tsunagi::time() - t0, iters, target)?;
        world.barrier()?;
        let t0 = tsunagi::time();
        stream(world, &sbuf, &mut rbuf, sz, iters)?;
        let t = tsunagi::time() - t0;
        if rank == 0 {
            println!(
                "bw {sz} {:.2}",
                sz as f64 * WINDOW as f64 * iters as f64 / t / 1e6
            );
        }
    }
    Ok(())
}

fn main() {
    let universe = tsunagi::initialize().expect("MPI was already initialized");
    let world = universe.world();
    if world.size() < 2 {
        if world.rank() == 0 {
            eprintln!("tsunagi-pingpong: needs at least 2 ranks");
        }
        world.abort(1);
    }
    if let Err(e) = run(&world) {
        eprintln!("tsunagi-pingpong: rank {}: {e}", world.rank());
        world.abort(1);
    }
}
