//! What becomes of a frame the router read: [`Fate`], and why a dropped one was dropped
//! ([`Reason`]).

use weir_engine::stateful::PacketCt;
use weir_engine::DropReason;
use weir_wire::Addr;

/// Why the router dropped a packet (what `weir ctl status` and the metrics count).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    /// A rule's `drop`.
    Rule,
    /// A rule's `reject` (answered, or not when no answer is due).
    Reject,
    /// A base chain's drop policy.
    Policy,
    /// A broken network header (or the chain's policy for one).
    Malformed,
    /// A later fragment whose first did not pass, or a first too short.
    Fragment,
    /// Connection tracking refused a new entry (full table, no NAT port).
    CtRefused,
    /// No route to the destination.
    NoRoute,
    /// The TTL (hop limit) ran out.
    Ttl,
    /// Larger than the output link's MTU, and not to be fragmented.
    TooBig,
    /// The reverse path filter.
    RpFilter,
    /// The next hop's MAC is not known yet.
    NoNeighbour,
    /// Addressed to the router itself, where the router does not deliver locally.
    ToRouter,
    /// Cut short by the capture (larger than the receive buffer).
    Truncated,
    /// A wrong IPv4 header checksum: IP input drops it before any hook.
    IpChecksum,
    /// `fwd to` a device that is not one of the router's ports.
    FwdUnknown,
    /// A super-frame (a sender's segmentation offload) the receiver cannot cut.
    Offload,
    /// `queue`: its per-flow processing dropped it, or nobody listens on the queue.
    Queue,
    /// A connection-tracking helper's NAT rewrite changed its length: a rewritten copy left in
    /// its place (counted with what scripts send).
    Replaced,
    /// Taken by the SYN proxy (`synproxy`): answered, or passed on as its own packets.
    Synproxy,
    /// An ACK whose SYN cookie the proxy did not make (or too old).
    SynproxyCookie,
}

impl Reason {
    /// Every reason, in the order of their names.
    pub const ALL: [Reason; 20] = [
        Reason::CtRefused,
        Reason::Fragment,
        Reason::FwdUnknown,
        Reason::IpChecksum,
        Reason::Malformed,
        Reason::NoNeighbour,
        Reason::NoRoute,
        Reason::Offload,
        Reason::Policy,
        Reason::Queue,
        Reason::Reject,
        Reason::Replaced,
        Reason::RpFilter,
        Reason::Rule,
        Reason::Synproxy,
        Reason::SynproxyCookie,
        Reason::ToRouter,
        Reason::TooBig,
        Reason::Truncated,
        Reason::Ttl,
    ];

    /// The name counters and logs use.
    pub fn name(self) -> &'static str {
        match self {
            Reason::Rule => "rule",
            Reason::Reject => "reject",
            Reason::Policy => "policy",
            Reason::Malformed => "malformed",
            Reason::Fragment => "fragment",
            Reason::CtRefused => "ct-refused",
            Reason::NoRoute => "no-route",
            Reason::Ttl => "ttl",
            Reason::TooBig => "too-big",
            Reason::RpFilter => "rp-filter",
            Reason::NoNeighbour => "no-neighbour",
            Reason::ToRouter => "to-router",
            Reason::Truncated => "truncated",
            Reason::IpChecksum => "ip-checksum",
            Reason::FwdUnknown => "fwd-unknown-device",
            Reason::Offload => "offload",
            Reason::Queue => "queue",
            Reason::Replaced => "replaced",
            Reason::Synproxy => "synproxy",
            Reason::SynproxyCookie => "synproxy-cookie",
        }
    }

    /// The reason of a drop by the engine.
    pub fn of(d: DropReason) -> Reason {
        match d {
            DropReason::Rule(_) => Reason::Rule,
            DropReason::Reject(_) => Reason::Reject,
            DropReason::Policy(..) => Reason::Policy,
            DropReason::Malformed(_) => Reason::Malformed,
            DropReason::Fragment => Reason::Fragment,
            DropReason::CtRefused => Reason::CtRefused,
            DropReason::Queue(_) => Reason::Queue,
            DropReason::Replaced => Reason::Replaced,
            DropReason::Synproxy => Reason::Synproxy,
            DropReason::SynproxyCookie => Reason::SynproxyCookie,
        }
    }
}

/// What the router does with one frame it read.
#[derive(Debug)]
pub enum Fate {
    /// Not the router's to route (not IP, or sent to another host's MAC): left to the host,
    /// which sees the frame as it came.
    NotMine,
    /// For the router itself: accepted by the `input` hook. The frame (its first `len`
    /// bytes, link padding dropped) is to be handed to the host's own stack.
    Local {
        len: usize,
        /// A `tproxy` statement gave the packet (or its connection) to a transparent socket:
        /// the target (`weir_engine::stateful::tproxy::Target`, by index), for the host's
        /// stack to give it to that socket.
        tproxy: Option<u8>,
    },
    Drop(Reason),
    /// The next hop's MAC is not known. [`crate::Router::solicit`] makes the ARP request or
    /// neighbour solicitation that asks for it; [`crate::Router::hold_unresolved`] keeps the
    /// frame (its first `len` bytes, with its mark) until the answer, as the kernel queues it
    /// (`len` 0: not to be kept, dropped: a `fwd` to a neighbour). `ct`: the packet's
    /// connection, for the ICMP error sent when the next hop never answers.
    NoNeighbour {
        port: usize,
        hop: Addr,
        len: usize,
        mark: u32,
        ct: Box<PacketCt>,
    },
    /// Rewritten in place; out of `port`: its first `len` bytes (link padding dropped).
    Out {
        port: usize,
        len: usize,
    },
    /// Rewritten in place, larger than the MTU of `port` (IPv4 without "don't fragment"):
    /// out in fragments ([`weir_wire::frag::fragment_ipv4`]).
    Fragments {
        port: usize,
        len: usize,
    },
    /// Dropped, and the sender is told with an ICMP error (type, code, and the 32 bits after
    /// the checksum: the MTU of a "fragmentation needed" or "packet too big"), quoting the
    /// packet as it is now; the error carries the packet's connection (`ct`, from
    /// [`weir_engine::stateful::Stateful::answer_ct`]) through the output and postrouting
    /// hooks ([`crate::Router::icmp_answer`]).
    Icmp {
        why: Reason,
        typ: u8,
        code: u8,
        info: u32,
        ct: Box<PacketCt>,
    },
    /// Rejected with `reject with tcp reset`: this frame (the reset, already through the
    /// output, postrouting and egress hooks) goes back out of the arrival port.
    Reset(Vec<u8>),
    /// A later fragment that came before the first of its datagram: to be held until the
    /// first passes ([`weir_engine::frag::Held`]).
    Hold,
}

impl Fate {
    /// What `weir ctl trace` says of it (`names`: the ports' interfaces).
    pub fn describe(&self, names: &[String]) -> String {
        let name = |p: &usize| names.get(*p).map_or("?", |s| s.as_str()).to_string();
        match self {
            Fate::NotMine => "to the kernel (not weir's to forward)".to_string(),
            Fate::Local { .. } => "to the router itself (input accepted)".to_string(),
            Fate::Drop(why) => format!("drop ({})", why.name()),
            Fate::Icmp { why, typ, code, .. } => {
                format!(
                    "drop ({}; ICMP error {typ}/{code} to the sender)",
                    why.name()
                )
            }
            Fate::Reset(_) => "drop (reject; TCP reset to the sender)".to_string(),
            Fate::Hold => "held (a later fragment before its first)".to_string(),
            Fate::NoNeighbour { .. } => "drop (no-neighbour)".to_string(),
            Fate::Out { port, .. } => format!("forward out {}", name(port)),
            Fate::Fragments { port, .. } => format!("forward out {} in fragments", name(port)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_once_in_the_order_of_names() {
        let names: Vec<&str> = Reason::ALL.iter().map(|r| r.name()).collect();
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(names, sorted);
        // every variant is there (the match is exhaustive, so a new one must be added)
        for r in Reason::ALL {
            let again = match r {
                Reason::Rule
                | Reason::Reject
                | Reason::Policy
                | Reason::Malformed
                | Reason::Fragment
                | Reason::CtRefused
                | Reason::NoRoute
                | Reason::Ttl
                | Reason::TooBig
                | Reason::RpFilter
                | Reason::NoNeighbour
                | Reason::ToRouter
                | Reason::Truncated
                | Reason::IpChecksum
                | Reason::FwdUnknown
                | Reason::Offload
                | Reason::Queue
                | Reason::Replaced
                | Reason::Synproxy
                | Reason::SynproxyCookie => r,
            };
            assert_eq!(again, r);
        }
        assert_eq!(Reason::ALL.len(), 20);
    }
}
