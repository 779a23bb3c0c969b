//! `queue`: the packets a `queue` statement hands over, and who takes them.
//!
//! In the kernel a `queue` verdict hands the packet to the program listening on that
//! NFQUEUE (nfqws2, for instance); when it answers `accept`, the packet goes on with the
//! hook's next base chain, and with nobody listening it is dropped (accepted with
//! `bypass`). Weir keeps the same semantics with the listener inside: a [`FlowHook`] (weir's
//! per-flow scripts, `weir_script`) given to [`Stateful::set_flow_hook`] is called right
//! where the statement ran, with the packet in place and its connection; what it asks to
//! send is kept for the caller ([`Stateful::take_queue_out`]), which sends it as the
//! router's own packets.

use super::{CtPkt, PacketCt, Stateful};
use crate::eval::{Decision, DropReason};
use weir_conntrack::{Dir, Tuple};
use weir_lang::ir::{Hook, Queue};
use weir_wire::PacketMeta;

/// The least time between two runs of the listener's timers ([`Stateful::tick`]), ns.
pub const TICK_NS: u64 = 10_000_000;

/// The connection of a queued packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueuedConn {
    /// The connection's original tuple (the same for every packet of it, whichever its
    /// direction): the key of whatever the listener keeps per connection.
    pub orig: Tuple,
    /// The packet goes in the reply direction.
    pub reply: bool,
    /// The connection's first packet (no entry yet): what was kept under this tuple
    /// belongs to an earlier connection.
    pub new: bool,
}

/// A packet handed to the listener.
pub struct Queued<'a> {
    /// The queue (for a range, the one this connection's packets go to).
    pub num: u16,
    pub hook: Hook,
    /// The frame, rewritable in place (its IP header at `pm.l3_off`).
    pub frame: &'a mut [u8],
    pub pm: &'a PacketMeta,
    /// None: not tracked (`notrack`, invalid, or a family not tracked).
    pub conn: Option<QueuedConn>,
    pub now_ns: u64,
    /// IP packets to send (the router's own: they are not queued again), in order, before
    /// this packet if it is accepted.
    pub send: &'a mut Vec<Vec<u8>>,
    /// Set by the listener when it is done with this direction of the connection for good:
    /// the connection entry keeps it, and the direction's later packets are accepted at the
    /// `queue` statement after one bit test, without a call.
    pub done: &'a mut bool,
}

/// The listener's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueVerdict {
    /// As it came.
    Accept,
    /// Changed in place (its length unchanged; a packet of another length is sent as a
    /// new one and this one dropped): accepted as it is now.
    Modified,
    Drop,
}

/// Who takes the packets of `queue` statements.
pub trait FlowHook: Send {
    /// Whether anyone listens on queue `num` (nobody: the packet is dropped, or accepted
    /// with `bypass`, as the kernel does).
    fn listens(&self, num: u16) -> bool;
    /// Take one packet.
    fn queued(&mut self, q: Queued<'_>) -> QueueVerdict;
    /// Whether the listener still acts on the connection whose original tuple is `orig`:
    /// while it does, `flow add` leaves the connection on the slow path (a flowtable's
    /// fast path would take its packets past the `queue` statements).
    fn holds(&self, orig: &weir_conntrack::Tuple) -> bool {
        let _ = orig;
        false
    }
    /// Time passes (`now_ns`, the engine's clock), between batches: the listener runs
    /// what is due (timers) and puts what it sends in `send` (IP packets, in order).
    /// Returns whether it has anything timed left (the caller should tick again soon).
    fn tick(&mut self, now_ns: u64, send: &mut Vec<Vec<u8>>) -> bool {
        let _ = (now_ns, send);
        false
    }
    /// The listener itself, for its owner to read its state (statistics) by downcasting.
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }
}

impl Stateful {
    /// Give the packets of `queue` statements to `hook` (None: nobody listens).
    pub fn set_flow_hook(&mut self, hook: Option<Box<dyn FlowHook>>) {
        self.flow_hook = hook;
        // a new listener ticks at the next call
        self.ticked = None;
        self.ticking = false;
    }

    /// The listener, to read its state (statistics) through a downcast by its owner.
    pub fn flow_hook(&self) -> Option<&dyn FlowHook> {
        self.flow_hook.as_deref()
    }

    /// Lets the listener's timers run ([`FlowHook::tick`]) if [`TICK_NS`] has passed
    /// since they last did; what they send joins the queue-out ([`Stateful::take_queue_out`]).
    /// For the workers, between batches, with the batch's clock reading. Returns whether
    /// the listener has timers (then the caller should not wait much longer than
    /// [`TICK_NS`] for packets).
    pub fn tick(&mut self, now_ns: u64) -> bool {
        if self
            .ticked
            .is_some_and(|t| now_ns.saturating_sub(t) < TICK_NS)
        {
            return self.ticking;
        }
        self.ticked = Some(now_ns);
        self.ticking = match self.flow_hook.as_mut() {
            Some(h) => h.tick(now_ns, &mut self.queue_out),
            None => false,
        };
        self.ticking
    }

    /// Whether the listener had timers when they last ran ([`Stateful::tick`]).
    pub fn ticking(&self) -> bool {
        self.ticking
    }

    /// Whether the listener (or the SYN proxy: [`Stateful::take_stack_out`], or `dup`:
    /// [`Stateful::take_dup_out`]) asked to send anything not yet taken.
    pub fn queue_out_pending(&self) -> bool {
        !self.queue_out.is_empty() || !self.stack_out.is_empty() || !self.dup_out.is_empty()
    }

    /// The packets the listener asked to send since the last call (IP packets, in order).
    pub fn take_queue_out(&mut self) -> Vec<Vec<u8>> {
        std::mem::take(&mut self.queue_out)
    }

    /// A `queue` statement ran at `hook`: the listener's decision, or the kernel's without
    /// one; None: accepted, and changed in place.
    pub(super) fn queued(
        &mut self,
        q: Queue,
        hook: Hook,
        frame: Option<&mut [u8]>,
        pm: &PacketMeta,
        pc: &PacketCt,
        now_ns: u64,
    ) -> Option<Decision> {
        self.stats.queued += 1;
        let conn = self.queued_conn(pm, pc);
        // a range of queues: one per connection, by its tuple (fanout spreads by CPU,
        // which one worker does not have: the same)
        let num = if q.last > q.first {
            let span = (q.last - q.first) as u64 + 1;
            let h = conn.map_or(0, |c| {
                let t = c.orig;
                (t.src ^ t.dst ^ ((t.sport as u128) << 16) ^ t.dport as u128 ^ t.proto as u128)
                    as u64
            });
            q.first + (h.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32).wrapping_rem(span) as u16
        } else {
            q.first
        };
        let listening = self.flow_hook.as_ref().is_some_and(|h| h.listens(num));
        let (Some(h), Some(frame)) = (self.flow_hook.as_mut().filter(|_| listening), frame) else {
            if q.bypass {
                return Some(Decision::Accept);
            }
            self.stats.queue_unheard += 1;
            return Some(Decision::Drop(DropReason::Queue(num)));
        };
        // a direction the listener is done with: one bit in the entry
        let entry = match pc.ct {
            CtPkt::Entry { id, dir, .. } => Some((id, if dir == Dir::Reply { 2u8 } else { 1 })),
            _ => None,
        };
        if let Some((id, bit)) = entry {
            if self.ct.get(id).is_some_and(|e| e.ext.queue_done & bit != 0) {
                self.stats.queue_done += 1;
                return Some(Decision::Accept);
            }
        }
        let mut done = false;
        let v = h.queued(Queued {
            num,
            hook,
            frame,
            pm,
            conn,
            now_ns,
            send: &mut self.queue_out,
            done: &mut done,
        });
        if let (true, Some((id, bit))) = (done, entry) {
            if let Some(e) = self.ct.get_mut(id) {
                e.ext.queue_done |= bit;
            }
        }
        match v {
            QueueVerdict::Accept => Some(Decision::Accept),
            QueueVerdict::Modified => {
                self.stats.queue_modified += 1;
                None
            }
            QueueVerdict::Drop => Some(Decision::Drop(DropReason::Queue(num))),
        }
    }

    fn queued_conn(&self, pm: &PacketMeta, pc: &PacketCt) -> Option<QueuedConn> {
        let _ = pm;
        match pc.ct {
            CtPkt::Entry { id, dir, .. } => Some(QueuedConn {
                orig: self.ct.tuple(id, Dir::Original)?,
                reply: dir == Dir::Reply,
                new: false,
            }),
            CtPkt::New(p) => Some(QueuedConn {
                orig: *p.orig(),
                reply: false,
                new: true,
            }),
            _ => None,
        }
    }
}

/// The queue a `queue` statement gives the packet: its number or range, or for `queue to
/// EXPR` the value's low 16 bits (`nft_queue_sreg_eval`); None when the expression finds
/// nothing (a map without the key: the rule stops).
pub(crate) fn queue_of(
    t: &crate::compile::CTable,
    e: &crate::compile::CExpr,
    p: &mut crate::eval::Pkt,
    st: &mut crate::eval::State,
) -> Option<Queue> {
    match e {
        crate::compile::CExpr::Queue(q) => Some(*q),
        crate::compile::CExpr::QueueTo {
            num,
            bypass,
            fanout,
        } => {
            let n = crate::eval::value_of(t, num, p, st)? as u16;
            Some(Queue {
                first: n,
                last: n,
                bypass: *bypass,
                fanout: *fanout,
            })
        }
        _ => None,
    }
}
