//! Correctness ping-pong between rank pairs (0,1), (2,3), ... over message sizes from 0
//! to 4 MiB; the partner checks a checksum, transforms the data and sends it back, and
//! the initiator checks the transformed data. A rank without a partner plays against
//! itself. Every rank prints one line.
use tsunagi::traits::*;

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn checksum(data: &[u8]) -> u64 {
    // Fletcher-64 style, position sensitive.
    let (mut a, mut b) = (0u64, 0u64);
    for &d in data {
        a = (a + d as u64) % 0xffff_fffb;
        b = (b + a) % 0xffff_fffb;
    }
    (b << 32) | a
}

fn sizes() -> Vec<usize> {
    let mut v = vec![0, 1, 3, 7, 8, 100, 1000];
    let mut s = 1024;
    while s <= 4 << 20 {
        v.push(s);
        v.push(s + 13);
        s *= 4;
    }
    v.push(4 << 20);
    v.retain(|&s| s <= 4 << 20);
    v
}

fn main() {
    let universe = tsunagi::initialize().expect("MPI was already initialized");
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    let partner_rank = if (rank ^ 1) < size { rank ^ 1 } else { rank };
    let partner = world.process_at_rank(partner_rank);
    let initiator = rank <= partner_rank;
    let mut bytes_moved = 0usize;
    let sizes = sizes();

    for (i, &len) in sizes.iter().enumerate() {
        let tag = i as i32;
        if partner_rank == rank {
            // Against myself: post the receive, then send.
            let data = pattern(len, i as u64);
            let mut back = vec![0u8; len];
            tsunagi::request::scope(|scope| {
                let r = partner
                    .immediate_receive_into_with_tag(scope, &mut back[..], tag)
                    .expect("irecv");
                partner.send_with_tag(&data[..], tag).expect("send");
                let st = r.wait().expect("wait");
                assert_eq!(st.count_of::<u8>(), Some(len as i64));
            });
            assert_eq!(checksum(&back), checksum(&data), "self ping of {len} bytes");
            bytes_moved += len;
        } else if initiator {
            let data = pattern(len, i as u64 + 1000 * rank as u64);
            let sum = checksum(&data);
            partner.send_with_tag(&data[..], tag).expect("send data");
            partner.send_with_tag(&sum, tag).expect("send checksum");
            let mut back = vec![0u8; len];
            let st = partner
                .receive_into_with_tag(&mut back[..], tag)
                .expect("receive");
            assert_eq!(st.source_rank(), partner_rank);
            assert_eq!(st.bytes(), len);
            let want: Vec<u8> = data.iter().map(|b| b.wrapping_add(1)).collect();
            if back != want {
                eprintln!("ping_pong: FAILED on rank {rank}: {len} bytes came back wrong");
                std::process::exit(1);
            }
            bytes_moved += 2 * len;
        } else {
            // Receive a message of unknown length, check it, transform, return it.
            let (mut data, st) = partner
                .receive_vec_with_tag::<u8>(tag)
                .expect("receive data");
            assert_eq!(st.tag(), tag);
            let (sum, _) = partner
                .receive_with_tag::<u64>(tag)
                .expect("receive checksum");
            if data.len() != len || checksum(&data) != sum {
                eprintln!(
                    "ping_pong: FAILED on rank {rank}: got {} bytes (expected {len}), checksum mismatch",
                    data.len()
                );
                std::process::exit(1);
            }
            for b in &mut data {
                *b = b.wrapping_add(1);
            }
            partner.send_with_tag(&data[..], tag).expect("send back");
            bytes_moved += 2 * len;
        }
    }
    world.barrier().expect("barrier");
    println!(
        "ping_pong: rank {rank} with partner {partner_rank}: {} sizes up to {} bytes, {bytes_moved} bytes checked OK",
        sizes.len(),
        sizes.iter().max().unwrap()
    );
}
