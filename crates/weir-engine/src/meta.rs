//! Per-packet metadata the packet itself does not carry ([`Meta`]: devices, marks, the
//! connection's view, what statements decided for the stateful layer and the router) and the
//! results statements hand on ([`NatAction`], [`Fwd`]).

use weir_lang::ir;
use weir_wire::{field::ifname_value, Field};

/// What connection tracking knows of the packet's connection, as `ct` expressions read it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CtView {
    /// 0: original, 1: reply.
    pub dir: u8,
    /// IPS_* status bits as Linux numbers them (expected 1, seen-reply 2, assured 4, confirmed 8,
    /// src-nat 16, dst-nat 32, ...).
    pub status: u32,
    /// Milliseconds until the entry times out.
    pub expiration_ms: u32,
    /// 2 (IPv4) or 10 (IPv6).
    pub l3proto: u8,
    pub protocol: u8,
    pub orig_src: u128,
    pub orig_dst: u128,
    pub orig_sport: u16,
    pub orig_dport: u16,
    pub reply_src: u128,
    pub reply_dst: u128,
    pub reply_sport: u16,
    pub reply_dport: u16,
    /// (original, reply) packets and bytes.
    pub packets: [u64; 2],
    pub bytes: [u64; 2],
    /// The connection's helper ([`crate::helper::Kind`] as u8; 0: none).
    pub helper: u8,
    /// The connection's conntrack zone.
    pub zone: weir_conntrack::Zone,
}

/// A NAT statement's result: what the stateful layer binds the new connection to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NatAction {
    pub kind: ir::NatKind,
    /// Address range (inclusive), None: keep (or the interface address for masquerade).
    pub addr: Option<(u128, u128)>,
    /// Port range (inclusive), None: keep the port if free.
    pub port: Option<(u16, u16)>,
    pub random: bool,
    pub persistent: bool,
    /// `prefix` (netmap): the address range is a prefix to map onto, the host part kept.
    pub netmap: bool,
}

/// A `fwd` statement's result (nft_fwd_netdev, nft_fwd_neigh): the packet leaves by `dev` as
/// it is, and its processing ends (the kernel returns NF_STOLEN: no later rule or chain runs).
/// The base chain ends with [`Decision::Accept`]; whoever runs the chains reads `Meta::fwd`
/// after each one and runs no further chain once it is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fwd {
    /// The output device's name as an interface-name field value
    /// ([`weir_wire::field::ifname_value`]; [`weir_wire::field::ifname_text`] gives the name
    /// back). 0 (no name) when it came from `meta oif` at a hook without an output device:
    /// no device has it, and the kernel frees such a packet.
    pub dev: u128,
    /// `fwd ip|ip6 to ADDR device DEV`: the next hop. The kernel then decrements the IPv4 TTL
    /// (`ip_decrease_ttl`, with the checksum) or the IPv6 hop limit and sends the frame to the
    /// link-layer address the neighbour table has for `addr` on `dev` (`neigh_xmit`); that is
    /// the forwarder's work, the frame is not changed here.
    pub neigh: Option<FwdNeigh>,
}

/// The next hop of `fwd ip|ip6 to ADDR device DEV`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FwdNeigh {
    /// 4 (`fwd ip`) or 6 (`fwd ip6`); the packet is of that family.
    pub family: u8,
    /// The address, as fields hold it (IPv4 in the low 32 bits).
    pub addr: u128,
}

/// Per-packet metadata the packet itself does not carry.
#[derive(Clone, Copy, Debug, Default)]
pub struct Meta {
    pub mark: u32,
    pub priority: u32,
    pub iif: u32,
    pub oif: u32,
    /// Interface names packed as field values (0: unknown).
    pub iifname: u128,
    pub oifname: u128,
    /// Connection state bits (the stateless engine sees every packet as untracked).
    pub ct_state: u32,
    pub ct_mark: u32,
    /// The packet has a connection entry (`ct` expressions other than `ct state` read `ct`).
    pub has_ct: bool,
    pub ct: CtView,
    /// A `notrack` statement ran.
    pub notrack: bool,
    /// A NAT statement ran (the last one wins, as it ends its chain).
    pub nat: Option<NatAction>,
    /// A `flow add @ft` statement ran (the flowtable's index in its table, and the table).
    pub flow_add: Option<(u16, u16)>,
    /// A `fwd` statement ran: the device (and next hop) the packet leaves by; no later chain
    /// runs for it.
    pub fwd: Option<Fwd>,
    /// A `queue` statement ran: the queue whose per-flow processing gets the packet. Set
    /// by the chains, cleared by whoever runs them (a hook's caller reads it after the
    /// hook).
    pub queue: Option<weir_lang::ir::Queue>,
    /// A `synproxy` statement took the packet (a SYN or an ACK): the stateful layer answers.
    pub synproxy: Option<weir_lang::ir::Synproxy>,
    /// The `dup` statements the base chain ran (`stateful::dup`).
    pub dups: crate::stateful::dup::Dups,
    /// A `ct helper set` statement ran: the helper (`crate::helper::Kind` as u8) a new
    /// connection gets.
    pub helper: u8,
    /// A `ct timeout set` statement ran: the object (table, index in the table's
    /// `ct_timeouts`) whose policy a new connection gets.
    pub ct_timeout: Option<(u16, u16)>,
    /// A `ct expectation set` statement ran: what a new connection expects.
    pub ct_expect: Option<weir_lang::ir::CtExpectation>,
    /// The packet's connection is new and not yet confirmed (set by the stateful layer):
    /// what `ct expectation set` requires.
    pub ct_unconfirmed: bool,
    /// `rt mtu` (nft's `NFT_RT_TCPMSS`): the TCP MSS of the packet's route, the smaller of the
    /// output route's MTU and the MTU of the route back to the source, less the IP and TCP
    /// headers (40 bytes, 60 for IPv6); 0 before routing (the expression stops the rule).
    pub rt_mss: u16,
    /// The connection's labels (`ct label`: bit N for label N), loaded with the connection
    /// and written back after each chain (`ct label set N`).
    pub ct_labels: u128,
    /// `ct [original|reply] zone set ID` before conntrack: the zone the packet is tracked
    /// in (the first such statement wins, as the kernel's template).
    pub ct_zone: Option<weir_conntrack::Zone>,
    /// Header fields written by statements (`ip daddr set ...`: stateless NAT), in order;
    /// later matches read these values, and the stateful layer writes them into the frame
    /// when the base chain ends.
    pub writes: [Option<(Field, u128)>; MAX_WRITES],
    pub nwrites: u8,
    /// The input and output devices' ARPHRD types (`meta iiftype`, `oiftype`); 0: not
    /// known, a named device taken as Ethernet (1), `lo` as loopback (772).
    pub iiftype: u16,
    pub oiftype: u16,
    /// The input and output devices' groups (`meta iifgroup` / `oifgroup`); None: not known,
    /// 0 (the kernel's default group) for a device known by name.
    pub iifgroup: Option<u32>,
    pub oifgroup: Option<u32>,
    /// The CPU the packet is processed on (`meta cpu`: the worker's).
    pub cpu: u32,
    /// The packet's trace flag (`meta nftrace`, set by `meta nftrace set 1`: the kernel's
    /// `skb->nf_trace`), kept across the packet's hooks.
    pub nftrace: bool,
    /// The owner of the packet's socket (`meta skuid` / `skgid`): a local process's packets
    /// (NFQUEUE mode: the kernel says); None without a socket (forwarded packets), where the
    /// kernel's nft_meta breaks the rule.
    pub skuid: Option<u32>,
    pub skgid: Option<u32>,
    /// The local socket the packet belongs to (`socket` keys), looked up by the stateful
    /// layer where a ruleset reads them ([`crate::socket`]); None: no socket, the rule stops.
    pub sock: Option<crate::socket::SockInfo>,
    /// A `tproxy` statement gave the packet to a transparent socket: its target (index in
    /// [`crate::compile::Compiled::tproxy`]); the packet is delivered locally.
    pub tproxy: Option<u8>,
    /// The input device's address of the packet's family (`tproxy` without an address).
    pub iif_addr: Option<u128>,
    /// The hook of the base chain running (set by the engine; `rt ipsec`).
    pub hook: Option<ir::Hook>,
    /// The next hop of the packet's route (`rt ip|ip6 nexthop`), set by the caller where the
    /// route is known and the ruleset reads it ([`Compiled::reads_nexthop`]).
    pub nexthop: Option<u128>,
    /// The packet's wall-clock time, nanoseconds since the epoch (`meta time`, `day`,
    /// `hour`); 0: unknown, the evaluation's `now_ns` is taken as it (a capture's time).
    pub wall_ns: u64,
}

/// Header writes a base chain can make before they are applied.
pub const MAX_WRITES: usize = 8;

/// A device's ARPHRD type: as given, or for a device known by name only, loopback for `lo`
/// and Ethernet otherwise (weir's ports are Ethernet); None without a device.
pub(crate) fn dev_type(index: u32, name: u128, given: u16) -> Option<u16> {
    if index == 0 && name == 0 {
        return None;
    }
    Some(match given {
        0 if name == ifname_value("lo") => 772,
        0 => 1,
        t => t,
    })
}

/// The port fields that read the same bytes (`th dport`, `tcp dport`, `udp dport` ...).
fn same_bytes(a: Field, b: Field) -> bool {
    use Field::*;
    a == b
        || (matches!(a, ThSport | TcpSport | UdpSport | SctpSport)
            && matches!(b, ThSport | TcpSport | UdpSport | SctpSport))
        || (matches!(a, ThDport | TcpDport | UdpDport | SctpDport)
            && matches!(b, ThDport | TcpDport | UdpDport | SctpDport))
}

impl Meta {
    /// The value a statement wrote to field `f` (the last write wins).
    #[inline]
    pub fn written(&self, f: Field) -> Option<u128> {
        self.writes[..self.nwrites as usize]
            .iter()
            .rev()
            .flatten()
            .find(|(g, _)| same_bytes(*g, f))
            .map(|(_, v)| *v)
    }

    pub fn with_ifnames(iif: &str, oif: &str) -> Meta {
        Meta {
            iifname: if iif.is_empty() { 0 } else { ifname_value(iif) },
            oifname: if oif.is_empty() { 0 } else { ifname_value(oif) },
            ct_state: 64,
            ..Meta::default()
        }
    }
}
