//! Handing fragments to the worker of their connection (several inline workers).
//!
//! The fanout program steers a packet by its addresses and ports, but a fragment by its
//! addresses alone: a later fragment carries no ports. All the fragments of a datagram thus
//! reach one worker together, often not the one whose table holds their connection. That
//! worker reads the ports in the first fragment, finds the connection's worker
//! ([`weir_conntrack::steer::worker`]) and, when it is another one, hands it the first
//! fragment and then every later fragment of the same datagram, in order, over a bounded
//! channel (the frames are copied into buffers the receiver sends back for reuse). The
//! receiving worker is woken through an eventfd in its poll set, written once per batch, and
//! runs them as if it had read them from the port.
//!
//! Over AF_XDP the kernel does not steer at all: each worker reads one receive queue of every
//! interface, and the NIC (or the sending veth) picks the queue whatever the connection. There
//! every frame is steered in software ([`Handoff::all`]): by
//! [`weir_conntrack::steer::frame_hash`], the fanout program's hash, so that connections,
//! their NAT bindings (which steer by it) and their ICMP errors stay on one worker.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::mpsc;
use std::sync::Arc;
use weir_engine::frag;
use weir_wire::{Frag, PacketMeta};

/// A frame handed over: the worker that read it (its buffer goes back there), the port it was
/// read on, and its bytes.
pub type Handed = (usize, usize, Vec<u8>);

/// Frames one worker may have waiting for it before more are dropped.
const DEPTH: usize = 4096;

/// Datagrams a worker remembers having handed over (for their later fragments).
const REMEMBERED: usize = 4096;

/// One worker's end of the channels between the workers.
struct Peer {
    tx: mpsc::SyncSender<Handed>,
    wake: Arc<OwnedFd>,
    /// Where this worker's spent buffers go back to that one.
    back: mpsc::SyncSender<Vec<u8>>,
}

/// One worker's ends: its inbox and wakeup, its spare buffers, and the other workers' ends.
pub struct Handoff {
    pub me: usize,
    rx: mpsc::Receiver<Handed>,
    wake: Arc<OwnedFd>,
    /// Buffers the other workers are done with.
    spare: mpsc::Receiver<Vec<u8>>,
    peers: Vec<Peer>,
    /// Per worker: frames were sent to it since its eventfd was last written.
    unwoken: Vec<bool>,
    /// The list `take` fills, kept between batches.
    inbox: Vec<Handed>,
    /// Datagrams whose first fragment went to another worker: where, and until when.
    sent: HashMap<frag::Key, (usize, u64)>,
    /// Steer every frame (AF_XDP), not only fragments (AF_PACKET fanout).
    pub all: bool,
    /// Frames handed to another worker, and those dropped because its inbox was full.
    pub handed: u64,
    pub full: u64,
}

fn eventfd() -> std::io::Result<Arc<OwnedFd>> {
    // SAFETY: plain eventfd(2) call; the descriptor is checked and owned below.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor nobody else owns.
    Ok(Arc::new(unsafe { OwnedFd::from_raw_fd(fd) }))
}

impl Handoff {
    /// The ends of `n` workers, in worker order.
    pub fn group(n: usize) -> std::io::Result<Vec<Handoff>> {
        let mut ends = Vec::with_capacity(n);
        let mut peers = Vec::with_capacity(n);
        for _ in 0..n {
            let (tx, rx) = mpsc::sync_channel(DEPTH);
            let (back, spare) = mpsc::sync_channel(DEPTH);
            let wake = eventfd()?;
            peers.push(Peer {
                tx,
                wake: wake.clone(),
                back,
            });
            ends.push((rx, wake, spare));
        }
        Ok(ends
            .into_iter()
            .enumerate()
            .map(|(me, (rx, wake, spare))| Handoff {
                me,
                rx,
                wake,
                spare,
                peers: peers
                    .iter()
                    .map(|p| Peer {
                        tx: p.tx.clone(),
                        wake: p.wake.clone(),
                        back: p.back.clone(),
                    })
                    .collect(),
                unwoken: vec![false; n],
                inbox: Vec::new(),
                sent: HashMap::new(),
                all: false,
                handed: 0,
                full: 0,
            })
            .collect())
    }

    /// The descriptor that becomes readable when frames wait in this worker's inbox.
    pub fn fd(&self) -> i32 {
        self.wake.as_raw_fd()
    }

    /// The worker a frame read here belongs to, when it is another one: a first fragment by
    /// its connection's ports, a later one by where its first went; with [`Handoff::all`],
    /// any other frame by its steering hash.
    pub fn owner(&mut self, pm: &PacketMeta, frame: &[u8], now: u64) -> Option<usize> {
        let n = self.peers.len() as u32;
        let by_hash = || (weir_conntrack::steer::frame_hash(pm, frame) % n.max(1)) as usize;
        match pm.frag {
            Frag::None if self.all => Some(by_hash()).filter(|&w| w != self.me),
            Frag::None => None,
            Frag::First => {
                let key = frag::Key::of(pm);
                let w = match weir_conntrack::steer::packet_tuple(pm, frame) {
                    Some(t) => weir_conntrack::steer::worker(&t, n) as usize,
                    None if self.all => by_hash(),
                    None => return None,
                };
                if w == self.me {
                    self.sent.remove(&key);
                    return None;
                }
                if self.sent.len() >= REMEMBERED {
                    self.sent.retain(|_, v| v.1 > now);
                    if self.sent.len() >= REMEMBERED {
                        self.sent.clear();
                    }
                }
                self.sent
                    .insert(key, (w, now.saturating_add(frag::Table::TIMEOUT_NS)));
                Some(w)
            }
            Frag::Later => match self.sent.get(&frag::Key::of(pm)) {
                Some(&(w, until)) if until > now => Some(w),
                _ => None,
            },
        }
    }

    /// The worker whose connections a frame belongs to by its steering hash (as the fanout
    /// and the AF_XDP steering give a connection's packets), when it is another one: for
    /// frames not read from a port (what the kernel itself sent).
    pub fn hash_owner(&self, pm: &PacketMeta, frame: &[u8]) -> Option<usize> {
        let n = self.peers.len() as u32;
        let w = (weir_conntrack::steer::frame_hash(pm, frame) % n.max(1)) as usize;
        (w != self.me).then_some(w)
    }

    /// Hand a frame read on `port` to worker `w` (dropped and counted if its inbox is full),
    /// in a buffer it gave back if there is one. [`Handoff::wake`] wakes it.
    pub fn send(&mut self, w: usize, port: usize, frame: &[u8]) {
        let mut buf = self.spare.try_recv().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(frame);
        match self.peers[w].tx.try_send((self.me, port, buf)) {
            Ok(()) => {
                self.handed += 1;
                self.unwoken[w] = true;
            }
            Err(_) => self.full += 1,
        }
    }

    /// Wake the workers frames were sent to (once per batch, not per frame).
    pub fn wake(&mut self) {
        for (w, u) in self.unwoken.iter_mut().enumerate() {
            if std::mem::take(u) {
                let one = 1u64.to_ne_bytes();
                // SAFETY: writing 8 bytes from a live buffer to an eventfd we hold open.
                unsafe { libc::write(self.peers[w].wake.as_raw_fd(), one.as_ptr().cast(), 8) };
            }
        }
    }

    /// The frames waiting for this worker (the wakeup is reset first, so a frame sent
    /// meanwhile wakes it again). Give the list back with [`Handoff::done`].
    pub fn take(&mut self) -> Vec<Handed> {
        let mut v = [0u8; 8];
        // SAFETY: reading 8 bytes into a live buffer from our own non-blocking eventfd.
        unsafe { libc::read(self.wake.as_raw_fd(), v.as_mut_ptr().cast(), 8) };
        let mut inbox = std::mem::take(&mut self.inbox);
        inbox.extend(self.rx.try_iter());
        inbox
    }

    /// Done with what [`Handoff::take`] gave: each buffer goes back to the worker that
    /// filled it, the list is kept for the next batch.
    pub fn done(&mut self, mut inbox: Vec<Handed>) {
        for (from, _, buf) in inbox.drain(..) {
            let _ = self.peers[from].back.try_send(buf);
        }
        self.inbox = inbox;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use weir_wire::build::{udp_datagram, Builder};
    use weir_wire::LinkType;

    #[test]
    fn fragments_go_to_the_worker_of_their_connection() {
        let mut ends = Handoff::group(4).unwrap();
        let (a, b) = (Ipv4Addr::new(198, 18, 0, 1), Ipv4Addr::new(198, 19, 0, 1));
        // find a flow that belongs to another worker than 0
        let (sport, l4, w) = (1000..2000u16)
            .find_map(|sp| {
                let l4 = udp_datagram(a.into(), b.into(), sp, 53, &[7; 64]);
                let whole = Builder::new().udp(a, b, sp, 53, &[7; 64]);
                let pm = PacketMeta::parse(&whole, LinkType::Ethernet);
                let t = weir_conntrack::steer::packet_tuple(&pm, &whole)?;
                let w = weir_conntrack::steer::worker(&t, 4) as usize;
                (w != 0).then_some((sp, l4, w))
            })
            .unwrap();
        let first = Builder::new()
            .ip_id(5)
            .fragment(0, true)
            .ip(a, b, 17, &l4[..40]);
        let later = Builder::new()
            .ip_id(5)
            .fragment(5, false)
            .ip(a, b, 17, &l4[40..]);
        let pm1 = PacketMeta::parse(&first, LinkType::Ethernet);
        assert_eq!(pm1.sport, sport);
        let pm2 = PacketMeta::parse(&later, LinkType::Ethernet);
        let h0 = &mut ends[0];
        // a later fragment whose first was not seen here stays here
        assert_eq!(h0.owner(&pm2, &later, 1), None);
        assert_eq!(h0.owner(&pm1, &first, 1), Some(w));
        assert_eq!(h0.owner(&pm2, &later, 2), Some(w));
        // ... until the datagram's time is up
        assert_eq!(h0.owner(&pm2, &later, 31_000_000_001), None);
        h0.send(w, 1, &first);
        h0.send(w, 1, &later);
        assert_eq!(h0.handed, 2);
        h0.wake();
        // the owner is woken, and gets them in order with their port
        let mut p = libc::pollfd {
            fd: ends[w].fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll over one live pollfd.
        assert_eq!(unsafe { libc::poll(&mut p, 1, 0) }, 1);
        let got = ends[w].take();
        assert_eq!(got, vec![(0, 1, first.clone()), (0, 1, later.clone())]);
        // SAFETY: as above.
        assert_eq!(
            unsafe { libc::poll(&mut p, 1, 0) },
            0,
            "the wakeup is reset"
        );
        // the buffers go back to worker 0, which fills them again
        ends[w].done(got);
        assert!(ends[w].inbox.is_empty() && ends[w].inbox.capacity() >= 2);
        let back = ends[0].spare.try_recv().unwrap();
        assert!(back.capacity() >= first.len());
        // a whole packet is never handed over
        let whole = Builder::new().udp(a, b, sport, 53, &[7; 64]);
        let pm = PacketMeta::parse(&whole, LinkType::Ethernet);
        assert_eq!(ends[0].owner(&pm, &whole, 1), None);
    }
}
