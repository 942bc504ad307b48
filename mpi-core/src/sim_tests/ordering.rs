//! Order across transports: control messages and data overtaking envelopes and each
//! other (a transport with separate control lanes), and wildcard receives fed by two
//! transports of different speed, which must still match each sender's messages in order.

use super::*;

/// A transport made of several simulated ones: envelopes (EAGER, RTS) on lane 0, every
/// other message round robin on the control lanes, so that control messages and data
/// overtake envelopes and each other (as a transport with a separate control channel
/// would let them). Each lane keeps its own FIFO order.
struct Lanes {
    envelopes: SimTransport,
    control: Vec<SimTransport>,
    next: usize,
}

impl Transport for Lanes {
    fn name(&self) -> &'static str {
        "lanes"
    }
    fn eager_limit(&self) -> usize {
        self.envelopes.eager_limit()
    }
    fn max_payload(&self) -> usize {
        self.control.iter().map(|t| t.max_payload()).min().unwrap()
    }
    fn single_copy(&self, peer: Rank) -> bool {
        self.envelopes.single_copy(peer)
    }
    fn try_send(&mut self, peer: Rank, hdr: &Header, payload: &[u8]) -> Result<bool, P2pError> {
        if hdr.kind == EAGER || hdr.kind == RTS {
            return self.envelopes.try_send(peer, hdr, payload);
        }
        let k = self.next % self.control.len();
        let sent = self.control[k].try_send(peer, hdr, payload)?;
        if sent {
            self.next += 1;
        }
        Ok(sent)
    }
    fn poll(&mut self, sink: &mut Sink<'_>) -> Result<usize, P2pError> {
        let mut n = 0;
        for t in self.control.iter_mut() {
            n += t.poll(sink)?;
        }
        Ok(n + self.envelopes.poll(sink)?)
    }
    fn read_remote(&mut self, peer: Rank, addr: u64, dst: &mut [u8]) -> Result<(), P2pError> {
        self.envelopes.read_remote(peer, addr, dst)
    }
    fn event_source(&self) -> Arc<dyn EventSource> {
        self.envelopes.event_source()
    }
}

#[test]
fn control_messages_overtaking_data_and_envelopes() {
    for sc in [SingleCopy::Off, SingleCopy::Read, SingleCopy::Refuse] {
        control_overtaking(sc);
    }
}

fn control_overtaking(sc: SingleCopy) {
    // Envelopes are slow; control and data fast with jitter over three lanes.
    let n = 3;
    let f = Fabric::new(
        n,
        11,
        vec![
            TransportConfig::new("env")
                .limits(64, 64)
                .link(6, 4, 4)
                .single_copy(sc),
            TransportConfig::new("c1").limits(40, 40).link(0, 5, 3),
            TransportConfig::new("c2").limits(40, 40).link(1, 5, 3),
            TransportConfig::new("c3").limits(40, 40).link(0, 9, 3),
        ],
    );
    f.record(true);
    let fc = f.clone();
    let mut job = Job::with_routers(f, move |me| {
        let mut r = Router::new(n);
        r.add(Box::new(SelfTransport::new(me)), &[me]);
        let peers: Vec<Rank> = (0..n as Rank).filter(|&p| p != me).collect();
        let lanes = Lanes {
            envelopes: fc.transport(me, 0),
            control: (1..4).map(|t| fc.transport(me, t)).collect(),
            next: me as usize,
        };
        r.add(Box::new(lanes), &peers);
        r
    });
    // Ranks 0 and 2 send to 1 a mix of eager, synchronous and streamed messages, with
    // the receives posted before part of them arrive; 1 sends the same mix to 0.
    let sizes = [300usize, 8, 1000, 64, 65, 0, 777, 12];
    let mut msgs = Vec::new();
    for k in 0..24u64 {
        msgs.push(fill(200 + k, sizes[k as usize % 8]));
    }
    let mut bufs: Vec<Vec<u8>> = (0..48).map(|_| vec![0u8; 1000]).collect();
    let mut recvs = Vec::new();
    for (i, b) in bufs.iter_mut().enumerate().take(20) {
        let src = if i % 2 == 0 { 0 } else { 2 };
        recvs.push(job.irecv(1, src, 3, b));
    }
    let mut sends = Vec::new();
    for (k, m) in msgs.iter().enumerate() {
        let mode = if k % 4 == 1 {
            SendMode::Synchronous
        } else {
            SendMode::Standard
        };
        sends.push((0, job.isend_on(CommId::WORLD, 0, 1, 3, m, mode)));
        sends.push((2, job.isend_on(CommId::WORLD, 2, 1, 3, m, mode)));
        // Envelopes the other way, for control messages from 1 to overtake.
        sends.push((1, job.isend_on(CommId::WORLD, 1, 0, 4, m, mode)));
        job.step();
    }
    job.steps(10);
    for (i, b) in bufs.iter_mut().enumerate().skip(20) {
        let src = if i % 2 == 0 { 0 } else { 2 };
        recvs.push(job.irecv(1, src, 3, b));
    }
    for (i, &r) in recvs.iter().enumerate() {
        let st = job.wait(1, r);
        let m = &msgs[i / 2];
        assert_eq!(
            (st.bytes, st.source),
            (m.len(), if i % 2 == 0 { 0 } else { 2 })
        );
        assert_eq!(
            &bufs[i][..m.len()],
            &m[..],
            "message {} from {}",
            i / 2,
            st.source
        );
    }
    let mut back: Vec<Vec<u8>> = (0..msgs.len()).map(|_| vec![0u8; 1000]).collect();
    for (m, b) in msgs.iter().zip(back.iter_mut()) {
        let r = job.irecv(0, 1, 4, b);
        assert_eq!(job.wait(0, r).bytes, m.len());
        assert_eq!(&b[..m.len()], &m[..]);
    }
    for &(at, s) in &sends {
        job.wait(at, s);
    }
    // What the test wanted to provoke did happen.
    let tr = job.fabric.trace();
    let overtook = |later: fn(u8) -> bool, earlier: fn(u8) -> bool| {
        tr.iter().enumerate().any(|(i, d)| {
            later(d.header.kind)
                && tr[i + 1..].iter().any(|e| {
                    earlier(e.header.kind) && e.src == d.src && e.dst == d.dst && e.seq < d.seq
                })
        })
    };
    let envelope = |k: u8| k == EAGER || k == RTS;
    assert!(
        overtook(|k| k == CTS || k == SYNC_ACK || k == FIN, envelope),
        "{sc:?}: no control message overtook an envelope"
    );
    if sc == SingleCopy::Read {
        assert!(overtook(|k| k == FIN, envelope), "{sc:?}: no FIN overtook");
        assert_eq!(count_kind(&tr, DATA), 0);
    } else {
        assert!(
            overtook(|k| k == DATA, envelope),
            "{sc:?}: no DATA overtook an envelope"
        );
        assert!(
            overtook(|k| k == DATA, |k| k == DATA),
            "{sc:?}: no DATA chunk overtook another"
        );
    }
}

#[test]
fn wildcard_receives_across_two_transports_keep_mpi_order() {
    // Rank 1 reaches 0 over a fast transport, rank 2 over a slow jittery one.
    let f = Fabric::new(
        3,
        5,
        vec![
            TransportConfig::new("near")
                .limits(64, 128)
                .single_copy(SingleCopy::Read)
                .link(0, 1, 4),
            TransportConfig::new("far").limits(128, 200).link(4, 6, 2),
        ],
    );
    f.record(true);
    let mut job = Job::new(f, |a, b| if a.max(b) == 2 { 1 } else { 0 });
    const K: usize = 30;
    let mut msgs = HashMap::new();
    for src in [1u32, 2] {
        for k in 0..K {
            let len = [4usize, 100, 300, 16, 0, 129][k % 6].max(4);
            let mut m = fill((src as u64) << 32 | k as u64, len);
            m[..4].copy_from_slice(&((src << 16) | k as u32).to_le_bytes());
            msgs.insert((src, k), m);
        }
    }
    // Half of the receives are posted before anything is sent (posted queue), half after
    // (unexpected queue); tags alternate so that ANY_TAG matters.
    let mut bufs: Vec<Vec<u8>> = (0..2 * K).map(|_| vec![0u8; 300]).collect();
    let (first, rest) = bufs.split_at_mut(K);
    let mut recvs = Vec::new();
    for b in first.iter_mut() {
        recvs.push(job.irecv(0, ANY_SOURCE, ANY_TAG, b));
    }
    let mut sends = Vec::new();
    for k in 0..K {
        for src in [1u32, 2] {
            let tag = (k % 3) as i32;
            let m = &msgs[&(src, k)];
            sends.push((src, job.isend(src, 0, tag, m)));
        }
        job.step();
    }
    job.steps(40);
    for b in rest.iter_mut() {
        recvs.push(job.irecv(0, ANY_SOURCE, ANY_TAG, b));
    }
    let mut order = Vec::new();
    for (i, &r) in recvs.iter().enumerate() {
        let st = job.wait(0, r);
        let id = u32::from_le_bytes(bufs[i][..4].try_into().unwrap());
        let (src, k) = (id >> 16, (id & 0xffff) as usize);
        assert_eq!((st.source, st.tag), (src as i32, (k % 3) as i32));
        let m = &msgs[&(src, k)];
        assert_eq!((st.bytes, &bufs[i][..m.len()]), (m.len(), &m[..]));
        order.push((src, k));
    }
    for &(at, s) in &sends {
        job.wait(at, s);
    }
    for src in [1u32, 2] {
        let ks: Vec<usize> = order.iter().filter(|o| o.0 == src).map(|o| o.1).collect();
        assert_eq!(
            ks,
            (0..K).collect::<Vec<_>>(),
            "messages from rank {src} in order"
        );
    }
    // Both transports carried traffic and the far one's messages were overtaken.
    let tr = job.fabric.trace();
    assert!(tr.iter().any(|d| d.transport == 0) && tr.iter().any(|d| d.transport == 1));
    let envelopes: Vec<&Delivery> = tr
        .iter()
        .filter(|d| d.dst == 0 && (d.header.kind == EAGER || d.header.kind == RTS))
        .collect();
    assert!(
        envelopes.windows(2).any(|w| w[0].seq > w[1].seq),
        "no envelope overtook another across transports"
    );
    assert_ne!(
        order[..K].iter().filter(|o| o.0 == 1).count(),
        K,
        "sources interleave"
    );
}

#[test]
fn wildcard_source_with_a_fixed_tag_skips_other_tags() {
    let mut job = one_transport(3, 64, 128, SingleCopy::Off);
    let (a, b, c) = (fill(20, 8), fill(21, 8), fill(22, 200));
    let s1 = job.isend(1, 0, 1, &a);
    let s2 = job.isend(2, 0, 2, &b);
    let s3 = job.isend(2, 0, 1, &c);
    job.settle();
    let mut x = vec![0u8; 200];
    let mut y = vec![0u8; 200];
    let r1 = job.irecv(0, ANY_SOURCE, 2, &mut x);
    let r2 = job.irecv(0, 2, ANY_TAG, &mut y);
    assert_eq!(job.wait(0, r1).source, 2);
    let st = job.wait(0, r2);
    assert_eq!((st.source, st.tag, st.bytes), (2, 1, 200));
    assert_eq!((&x[..8], &y[..]), (&b[..], &c[..]));
    let mut z = vec![0u8; 8];
    let r3 = job.irecv(0, ANY_SOURCE, ANY_TAG, &mut z);
    assert_eq!(job.wait(0, r3).source, 1);
    assert_eq!(z, a);
    for (at, s) in [(1, s1), (2, s2), (2, s3)] {
        job.wait(at, s);
    }
}
