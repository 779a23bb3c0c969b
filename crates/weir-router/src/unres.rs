//! Packets waiting for their next hop's link-layer address (Linux's neighbour queue,
//! `arp_queue`): a forwarded packet whose next hop the neighbour table does not know yet is
//! kept, not dropped, while the router asks for it; when the answer comes the packet leaves
//! (through the output port's egress chains), as the kernel's `neigh_resolve_output` sends
//! what it queued. As the kernel: at most [`HOP_BYTES`] per next hop (the oldest goes first,
//! `unres_qlen_bytes`), the question asked again each second, three times
//! (`mcast_solicit`, `retrans_time`), then what waits is dropped and each sender told
//! (ICMP host unreachable, ICMPv6 address unreachable, as the kernel's `neigh_invalidate`
//! reports them). What is dropped is counted by the caller as `Reason::NoNeighbour`.

use crate::{Fate, Router};
use std::collections::VecDeque;
use weir_engine::stateful::PacketCt;
use weir_engine::stateful::Stateful;
use weir_wire::{Addr, LinkType, PacketMeta};

/// The bytes that may wait for one next hop (Linux's default `unres_qlen_bytes`).
pub const HOP_BYTES: usize = 212_992;
/// The frames that may wait for all next hops together.
pub const MAX_FRAMES: usize = 4096;
/// How long a question waits for its answer before it is asked again (`retrans_time`).
pub const ASK_NS: u64 = 1_000_000_000;
/// How many times it is asked (`mcast_solicit`).
pub const ASKS: u8 = 3;

/// One frame waiting: its bytes, the port it came in by, its mark (the egress chains read
/// it), its connection (the ICMP error carries it).
#[derive(Clone, Debug)]
struct Frame {
    bytes: Vec<u8>,
    in_port: usize,
    mark: u32,
    ct: PacketCt,
}

/// The frames waiting for one next hop.
#[derive(Clone, Debug)]
struct Wait {
    port: usize,
    hop: Addr,
    /// When the router last asked, and how many times.
    asked_at: u64,
    asks: u8,
    frames: VecDeque<Frame>,
    bytes: usize,
}

/// The frames waiting for their next hops (a router's, per worker).
#[derive(Clone, Debug, Default)]
pub struct Unresolved {
    waits: Vec<Wait>,
    frames: usize,
}

/// What [`Router::release_unresolved`] gives back.
#[derive(Debug, Default)]
pub struct Released {
    /// Frames whose next hop is now known: the port they came in by, their fate
    /// (`Fate::Out`, `Fate::Fragments`, or a drop by the egress chains) and their bytes.
    pub ready: Vec<(usize, Fate, Vec<u8>)>,
    /// Questions to ask again: the port, the ARP request or neighbour solicitation.
    pub asks: Vec<(usize, Vec<u8>)>,
    /// Frames dropped: their next hop did not answer.
    pub dropped: u64,
    /// Of those, the ones whose sender is told (not the router's own, nor an ICMP error):
    /// the port they came in by, their bytes, their connection, for
    /// [`Router::icmp_answer`] with [`UNREACHABLE_V4`] / [`UNREACHABLE_V6`].
    pub unreachable: Vec<(usize, Vec<u8>, PacketCt)>,
}

/// The ICMP error for a next hop that never answered: host unreachable.
pub const UNREACHABLE_V4: (u8, u8) = (3, 1);
/// ICMPv6: address unreachable.
pub const UNREACHABLE_V6: (u8, u8) = (1, 3);

impl Router {
    /// Keep a frame ([`Fate::NoNeighbour`]: its first `len` bytes, its mark) until its next
    /// hop `hop` on `port` is known. The number of frames dropped to make room (the oldest
    /// waiting for that hop; or this one when [`MAX_FRAMES`] wait).
    #[allow(clippy::too_many_arguments)]
    pub fn hold_unresolved(
        &mut self,
        port: usize,
        hop: Addr,
        frame: &[u8],
        in_port: usize,
        mark: u32,
        ct: PacketCt,
        now: u64,
    ) -> u64 {
        let u = &mut self.unres;
        if u.frames >= MAX_FRAMES {
            return 1;
        }
        let i = match u.waits.iter().position(|w| w.port == port && w.hop == hop) {
            Some(i) => i,
            None => {
                u.waits.push(Wait {
                    port,
                    hop,
                    asked_at: now,
                    asks: 1,
                    frames: VecDeque::new(),
                    bytes: 0,
                });
                u.waits.len() - 1
            }
        };
        let w = &mut u.waits[i];
        let mut dropped = 0;
        while !w.frames.is_empty() && w.bytes + frame.len() > HOP_BYTES {
            if let Some(f) = w.frames.pop_front() {
                w.bytes -= f.bytes.len();
                u.frames -= 1;
                dropped += 1;
            }
        }
        w.bytes += frame.len();
        w.frames.push_back(Frame {
            bytes: frame.to_vec(),
            in_port,
            mark,
            ct,
        });
        u.frames += 1;
        dropped
    }

    /// Whether frames wait for a next hop (a caller checks it before
    /// [`Router::release_unresolved`]).
    pub fn unresolved(&self) -> usize {
        self.unres.frames
    }

    /// The frames whose next hop is known now, made ready to leave (MACs, the output port's
    /// egress chains); questions asked again; frames whose next hop did not answer after
    /// [`ASKS`] questions dropped.
    pub fn release_unresolved(&mut self, sf: &mut Stateful, now: u64) -> Released {
        let mut r = Released::default();
        let mut waits = std::mem::take(&mut self.unres.waits);
        waits.retain_mut(|w| {
            if let Some(slot) = self.neigh.slot(w.hop) {
                for f in w.frames.drain(..) {
                    self.unres.frames -= 1;
                    let mut bytes = f.bytes;
                    let mut pm = PacketMeta::parse(&bytes, LinkType::Ethernet);
                    let mtu = self.ports[w.port].mtu;
                    let mtu = if pm.l3 == weir_wire::L3::Ipv6 {
                        mtu.max(1280)
                    } else {
                        mtu
                    };
                    let adj = crate::adj::Adj {
                        in_port: f.in_port,
                        port: w.port,
                        slot,
                    };
                    let len = bytes.len();
                    let fragment = pm.l3_len as usize > mtu;
                    let fate =
                        self.output(sf, &mut bytes, &mut pm, adj, f.mark, len, fragment, now);
                    r.ready.push((f.in_port, fate, bytes));
                }
                return false;
            }
            if now.saturating_sub(w.asked_at) < ASK_NS {
                return true;
            }
            if w.asks >= ASKS {
                r.dropped += w.frames.len() as u64;
                self.unres.frames -= w.frames.len();
                for f in w.frames.drain(..) {
                    let pm = PacketMeta::parse(&f.bytes, LinkType::Ethernet);
                    // (a packet the router sent itself, or SNAT made its: nobody to tell)
                    if weir_wire::Addr::src_of(&pm).is_some_and(|a| !self.is_local(a)) {
                        r.unreachable.push((f.in_port, f.bytes, f.ct));
                    }
                }
                return false;
            }
            w.asks += 1;
            w.asked_at = now;
            if let Some(q) = self.solicit(w.port, w.hop, now) {
                r.asks.push((w.port, q));
            }
            true
        });
        self.unres.waits = waits;
        r
    }
}
