//! A simulated native device for unit tests of the request layer: in-memory mailboxes,
//! with IMPI's protocol shape (first part announced, the rest after the receiver accepts,
//! synchronous and long sends completed by the receiver's acknowledgement, cancel asked of
//! the receiver). No threads, no sockets; deliveries happen in the order of the calls, one
//! [`SimDevice::poll`] at a time, so tests are deterministic.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::device::{DataRep, Device, DeviceCancel, DeviceCaps, DeviceEvent, Envelope};
use crate::futex::LocalDoorbell;
use crate::{EventSource, P2pError, Rank};

#[derive(Debug)]
enum Wire {
    /// A message's first part (the whole message when `first.len() == env.len`).
    First {
        env: Envelope,
        sync: bool,
        first: Vec<u8>,
        token: u64,
    },
    /// The receiver matched the message (sent for synchronous and long ones).
    Ack {
        token: u64,
        arrival: u64,
    },
    /// More of a long message, for the receiver's arrival id.
    Rest {
        arrival: u64,
        offset: u64,
        data: Vec<u8>,
        last: bool,
    },
    /// The sender asks to cancel its message `token`.
    Cancel {
        src: Rank,
        token: u64,
    },
    CancelAnswer {
        token: u64,
        cancelled: bool,
    },
}

/// One mailbox per rank: (sender, message) in arrival order.
type Mailboxes = Vec<VecDeque<(Rank, Wire)>>;

/// The shared mailboxes of a simulated device fabric.
#[derive(Clone)]
pub struct DeviceFabric {
    boxes: Arc<Mutex<Mailboxes>>,
    first_len: usize,
    rep: DataRep,
}

impl DeviceFabric {
    /// A fabric for world ranks `0..n`; messages longer than `first_len` bytes are long.
    pub fn new(n: usize, first_len: usize) -> DeviceFabric {
        DeviceFabric {
            boxes: Arc::new(Mutex::new((0..n).map(|_| VecDeque::new()).collect())),
            first_len,
            rep: DataRep::Native,
        }
    }

    /// The same fabric whose devices carry data in `rep` (the core converts).
    pub fn with_rep(mut self, rep: DataRep) -> DeviceFabric {
        self.rep = rep;
        self
    }

    /// The device of world rank `me`.
    pub fn device(&self, me: Rank) -> SimDevice {
        SimDevice {
            me,
            fabric: self.clone(),
            sends: HashMap::new(),
            arrivals: HashMap::new(),
            next_arrival: 1,
            events: VecDeque::new(),
            bell: LocalDoorbell::new(),
            finished: false,
        }
    }

    /// Messages of any kind waiting in mailboxes.
    pub fn in_flight(&self) -> usize {
        self.boxes
            .lock()
            .expect("boxes")
            .iter()
            .map(|b| b.len())
            .sum()
    }

    fn post(&self, from: Rank, to: Rank, w: Wire) {
        self.boxes.lock().expect("boxes")[to as usize].push_back((from, w));
    }
}

struct SimSend {
    dst: Rank,
    /// The bytes after the first part (long messages).
    rest: Vec<u8>,
    /// Sent before the rest.
    first_len: usize,
}

struct SimArrival {
    src: Rank,
    token: u64,
    /// Needs an acknowledgement when accepted.
    acked: bool,
    matched: bool,
}

/// One rank's end of a [`DeviceFabric`].
pub struct SimDevice {
    me: Rank,
    fabric: DeviceFabric,
    /// Sends not complete yet.
    sends: HashMap<u64, SimSend>,
    arrivals: HashMap<u64, SimArrival>,
    next_arrival: u64,
    events: VecDeque<DeviceEvent>,
    bell: Arc<LocalDoorbell>,
    finished: bool,
}

impl Device for SimDevice {
    fn name(&self) -> &'static str {
        "sim-device"
    }

    fn caps(&self) -> DeviceCaps {
        DeviceCaps {
            data_rep: self.fabric.rep,
            tag_ub: 32767,
            timers: false,
        }
    }

    fn send(
        &mut self,
        env: Envelope,
        sync: bool,
        mut data: Vec<u8>,
        token: u64,
    ) -> Result<(), P2pError> {
        if self.sends.contains_key(&token) {
            return Err(P2pError::Other(format!("sim device: token {token} in use")));
        }
        let first_len = data.len().min(self.fabric.first_len);
        let rest = data.split_off(first_len);
        let long = !rest.is_empty();
        self.fabric.post(
            self.me,
            env.dst,
            Wire::First {
                env,
                sync: sync || long,
                first: data,
                token,
            },
        );
        if sync || long {
            self.sends.insert(
                token,
                SimSend {
                    dst: env.dst,
                    rest,
                    first_len,
                },
            );
        } else {
            self.events.push_back(DeviceEvent::SendComplete { token });
        }
        Ok(())
    }

    fn accept(&mut self, id: u64) -> Result<(), P2pError> {
        let a = self
            .arrivals
            .get_mut(&id)
            .ok_or_else(|| P2pError::Other(format!("sim device: no arrival {id}")))?;
        if a.matched {
            return Err(P2pError::Other(format!("sim device: {id} accepted twice")));
        }
        a.matched = true;
        if a.acked {
            self.fabric.post(
                self.me,
                a.src,
                Wire::Ack {
                    token: a.token,
                    arrival: id,
                },
            );
        }
        Ok(())
    }

    fn cancel_send(&mut self, token: u64) -> Result<DeviceCancel, P2pError> {
        match self.sends.get(&token) {
            None => Ok(DeviceCancel::NotCancelled),
            Some(s) => {
                self.fabric.post(
                    self.me,
                    s.dst,
                    Wire::Cancel {
                        src: self.me,
                        token,
                    },
                );
                Ok(DeviceCancel::Pending)
            }
        }
    }

    fn poll(&mut self, sink: &mut dyn FnMut(DeviceEvent)) -> Result<usize, P2pError> {
        let mine: Vec<(Rank, Wire)> = {
            let mut boxes = self.fabric.boxes.lock().expect("boxes");
            boxes[self.me as usize].drain(..).collect()
        };
        for (from, w) in mine {
            self.handle(from, w);
        }
        let n = self.events.len();
        for ev in self.events.drain(..) {
            sink(ev);
        }
        Ok(n)
    }

    fn event_source(&self) -> Arc<dyn EventSource> {
        self.bell.clone()
    }

    fn finish(&mut self, _timeout: Duration) -> Result<(), P2pError> {
        self.finished = true;
        Ok(())
    }
}

impl SimDevice {
    fn handle(&mut self, from: Rank, w: Wire) {
        match w {
            Wire::First {
                env,
                sync,
                first,
                token,
            } => {
                let id = self.next_arrival;
                self.next_arrival += 1;
                let complete = first.len() as u64 == env.len;
                self.arrivals.insert(
                    id,
                    SimArrival {
                        src: from,
                        token,
                        acked: sync,
                        matched: false,
                    },
                );
                self.events.push_back(DeviceEvent::Arrived {
                    id,
                    env,
                    sync,
                    data: first,
                    complete,
                });
            }
            Wire::Ack { token, arrival } => {
                if let Some(s) = self.sends.remove(&token) {
                    if !s.rest.is_empty() {
                        let chunk = self.fabric.first_len.max(1);
                        let n = s.rest.len().div_ceil(chunk);
                        for (i, part) in s.rest.chunks(chunk).enumerate() {
                            self.fabric.post(
                                self.me,
                                s.dst,
                                Wire::Rest {
                                    arrival,
                                    offset: (s.first_len + i * chunk) as u64,
                                    data: part.to_vec(),
                                    last: i + 1 == n,
                                },
                            );
                        }
                    }
                    self.events.push_back(DeviceEvent::SendComplete { token });
                }
            }
            Wire::Rest {
                arrival,
                offset,
                data,
                last,
            } => {
                self.events.push_back(DeviceEvent::Data {
                    id: arrival,
                    offset,
                    data,
                });
                if last {
                    self.arrivals.remove(&arrival);
                    self.events.push_back(DeviceEvent::Received { id: arrival });
                }
            }
            Wire::Cancel { src, token } => {
                let found = self
                    .arrivals
                    .iter()
                    .find(|(_, a)| a.src == src && a.token == token && !a.matched)
                    .map(|(&id, _)| id);
                if let Some(id) = found {
                    self.arrivals.remove(&id);
                    self.events.push_back(DeviceEvent::ArrivalCancelled { id });
                }
                self.fabric.post(
                    self.me,
                    src,
                    Wire::CancelAnswer {
                        token,
                        cancelled: found.is_some(),
                    },
                );
            }
            Wire::CancelAnswer { token, cancelled } => {
                if cancelled {
                    self.sends.remove(&token);
                }
                self.events
                    .push_back(DeviceEvent::CancelResult { token, cancelled });
            }
        }
    }
}
