//! `weir-router`: the path a frame takes through a router, written once, sans-IO.
//!
//! A [`Router`] holds what a router knows of its network — its [`Port`]s (names, MACs, own
//! addresses, MTUs, reverse path filters), its routing table ([`Routes`], longest prefix
//! first), its neighbours ([`Neighbours`], configured or learnt from ARP and neighbour
//! discovery) and the adjacencies its connections cached ([`Adjacencies`]) — and takes one
//! frame at a time through the hooks of a ruleset ([`weir_engine::stateful::Stateful`]) the way
//! Linux's receive and forward paths do ([`Router::route_frame`]):
//!
//! 1. the arrival device's `netdev ingress` chains (early drops, marks, stateless rewrites;
//!    `fwd to` sends the frame out of another device at once, through that device's egress
//!    chains, as Linux's `dev_queue_xmit` does);
//! 2. IP input checks (a frame for another host's MAC, a broken network header); link padding
//!    dropped;
//! 3. the flowtable fast path for offloaded connections (their cached adjacency, TTL, MACs);
//!    as Linux's flowtable (at the ingress hook, before `ip_rcv`), it does not verify the IPv4
//!    header checksum, and updates it incrementally;
//! 4. the IPv4 header checksum (`ip_rcv`), then `prerouting` (connection tracking, destination NAT);
//! 5. routing: the router's own addresses to `input` (local delivery), else the adjacency
//!    cached in the connection (the route cache), or the reverse path filter, the FIB and the
//!    neighbour table;
//! 6. TTL and MTU (ICMP time exceeded, fragmentation needed / packet too big, or fragments),
//!    the TTL decrement, `forward`, `postrouting` (source NAT), confirmation;
//! 7. the next hop's MAC, and the output device's `netdev egress` chains.
//!
//! One typed [`Fate`] comes out. The router's own packets (ICMP errors, TCP resets) leave
//! through `output`, `postrouting` and egress, carrying the connection they answer
//! ([`Router::icmp_answer`], [`Router::answer_out`]). The I/O is the caller's: `weir run`
//! (AF_XDP, AF_PACKET), `weir replay` (captures), `weir bench pipeline` and the kernel lab's
//! model all call this one path.

pub mod adj;
pub mod arp;
pub mod dup;
pub mod fate;
pub mod fib;
pub mod host_fib;
pub mod mutants;
pub mod nd;
pub mod neigh;
mod path;
pub mod port;
pub mod ratelimit;
pub mod routes;
pub mod sent;
pub mod unres;

pub use adj::{Adj, Adjacencies};
pub use dup::DupStats;
pub use fate::{Fate, Reason};
pub use host_fib::RouterFib;
pub use neigh::{Neighbours, SharedNeighbours};
pub use path::{IcmpAnswer, Rx, RxCsum};
pub use port::{Port, PortAddr, RpFilter};
pub use ratelimit::IcmpLimits;
pub use routes::{Route, RouteError, Routes};
pub use sent::SentStats;

use weir_engine::compile::HookEntry;
use weir_engine::stateful::{FtDevices, Stateful};
use weir_engine::Meta;
use weir_lang::ir::Hook;
use weir_wire::{Addr, Family, Mac};

/// What a router is and knows, and the state its path keeps (neighbours learnt, adjacencies
/// made, ICMP rate limits).
#[derive(Clone)]
pub struct Router {
    ports: Vec<Port>,
    routes: Routes,
    neigh: Neighbours,
    adjs: Adjacencies,
    /// Connections keep their adjacency (the route cache; off only to measure it).
    route_cache: bool,
    /// Offloaded connections take the flowtable fast path (off only to measure the path
    /// without it).
    fast_path: bool,
    /// Packets to the router's addresses cross `input` and are delivered ([`Fate::Local`]);
    /// off: they are dropped as [`Reason::ToRouter`].
    local_delivery: bool,
    /// The smallest MTU of the ports: a packet no larger fits any.
    min_mtu: usize,
    /// The router's addresses on no port (as on Linux's loopback).
    locals: Vec<Addr>,
    /// Every address of [`Router::is_local`] (the ports' and `locals`), flat: one scan.
    local_addrs: Vec<Addr>,
    /// A next hop whose MAC is not known: the router asks for it and the caller keeps the
    /// packet until the answer ([`Fate::NoNeighbour`], [`unres`]), or, off, it leaves with
    /// its destination MAC as it came (a capture replayed without its neighbours).
    resolve: bool,
    /// What a missing interface name compares as in rules (0: absent, as weir has it; the
    /// lab's model of the kernel gives a value no interface has, the empty name).
    pub absent_ifname: u128,
    /// The ICMP rate limits (this worker's share of them).
    pub icmp: IcmpLimits,
    /// The ruleset's device-bound chains and flowtables, per port, for the ruleset they were
    /// found in.
    bound: Bound,
    /// Keep a note of each frame's path ([`Router::note`]).
    record: bool,
    note: PathNote,
    /// IPv4 fragments for the router are left to the host's reassembly before `input` (a
    /// model of the kernel's own input path; see [`Router::set_host_reassembles_v4`]).
    host_reassembles_v4: bool,
    /// The routes and addresses `fib` expressions ask ([`host_fib::RouterFib`]), installed on
    /// the `Stateful` the path runs.
    fib: std::sync::Arc<dyn weir_engine::Fib>,
    /// Frames waiting for their next hop's MAC ([`unres`]).
    unres: unres::Unresolved,
}

/// What the last frame's path was, for a caller that explains it (the kernel lab's model):
/// kept only when asked ([`Router::set_record`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct PathNote {
    /// The hook whose chains dropped or rejected the packet, and why.
    pub dropped_at: Option<(Hook, weir_engine::DropReason)>,
    /// `ct state` as the chains after connection tracking saw it at prerouting (0: the
    /// packet did not get there).
    pub ct_state: u32,
    /// Whether the fast path forwarded it.
    pub fast_path: bool,
}

/// A ruleset's chains and flowtables bound to the router's ports.
#[derive(Clone, Default)]
struct Bound {
    ruleset: u64,
    ingress: Vec<Vec<HookEntry>>,
    egress: Vec<Vec<HookEntry>>,
    flowtables: Vec<FtDevices>,
    /// What every frame's path reads of its arrival and output ports, one small record per
    /// port (one load instead of four, on the flowtable's fast path).
    hot: Vec<Hot>,
}

/// A port as the first and last steps of a frame's path see it.
#[derive(Clone, Copy, Default)]
struct Hot {
    mac: Option<Mac>,
    /// It has netdev ingress / egress chains.
    ingress: bool,
    egress: bool,
    flowtables: FtDevices,
}

impl Router {
    /// A router of these ports and routes, with no neighbours yet.
    pub fn new(ports: Vec<Port>, routes: Routes) -> Router {
        let mut r = Router {
            ports,
            routes,
            neigh: Neighbours::default(),
            adjs: Adjacencies::default(),
            route_cache: true,
            fast_path: true,
            local_delivery: true,
            min_mtu: usize::MAX,
            locals: Vec::new(),
            local_addrs: Vec::new(),
            resolve: true,
            absent_ifname: 0,
            icmp: IcmpLimits::default(),
            bound: Bound {
                ruleset: u64::MAX,
                ..Bound::default()
            },
            record: false,
            note: PathNote::default(),
            host_reassembles_v4: false,
            fib: std::sync::Arc::new(host_fib::RouterFib::new(&[], &[], &Routes::default())),
            unres: Default::default(),
        };
        r.min_mtu = r.ports.iter().map(|p| p.mtu).min().unwrap_or(usize::MAX);
        r.index_locals();
        r
    }

    fn index_locals(&mut self) {
        let mut all: Vec<Addr> = self.ports.iter().flat_map(|p| p.local_addrs()).collect();
        all.extend(self.locals.iter().copied());
        all.sort_unstable_by_key(|a| (a.family() as u8, a.bits()));
        all.dedup();
        self.local_addrs = all;
        self.fib = std::sync::Arc::new(host_fib::RouterFib::new(
            &self.ports,
            &self.locals,
            &self.routes,
        ));
    }

    /// Give `sf` this router's routes and addresses for `fib` expressions, unless it has
    /// them (one pointer comparison).
    #[inline]
    pub fn install_fib(&self, sf: &mut Stateful) {
        let mine = std::sync::Arc::as_ptr(&self.fib) as *const ();
        if sf.fib().map(|f| std::sync::Arc::as_ptr(f) as *const ()) != Some(mine) {
            sf.set_fib(Some(self.fib.clone()));
        }
    }

    pub fn ports(&self) -> &[Port] {
        &self.ports
    }

    pub fn port(&self, i: usize) -> &Port {
        &self.ports[i]
    }

    /// The port of an interface name.
    pub fn port_named(&self, name: &str) -> Option<usize> {
        self.ports.iter().position(|p| p.name == name)
    }

    pub fn routes(&self) -> &Routes {
        &self.routes
    }

    /// Replace the routing table (connections keep the adjacencies they cached).
    pub fn set_routes(&mut self, routes: Routes) {
        self.routes = routes;
        self.index_locals();
    }

    pub fn neighbours(&self) -> &Neighbours {
        &self.neigh
    }

    pub fn neighbours_mut(&mut self) -> &mut Neighbours {
        &mut self.neigh
    }

    pub fn adjacencies(&self) -> &Adjacencies {
        &self.adjs
    }

    /// Set a neighbour's MAC (configured); whether it changed.
    pub fn set_neighbour(&mut self, a: Addr, mac: Mac) -> bool {
        self.neigh.set(a, mac)
    }

    /// Keep (or not) each connection's adjacency: the route cache.
    pub fn set_route_cache(&mut self, on: bool) {
        self.route_cache = on;
    }

    /// Keep a note of each frame's path ([`Router::note`]), for a caller that explains it.
    pub fn set_record(&mut self, on: bool) {
        self.record = on;
    }

    /// The note of the last frame's path (see [`Router::set_record`]).
    pub fn note(&self) -> &PathNote {
        &self.note
    }

    /// As Linux's `ip_local_deliver` reassembles an IPv4 datagram before its `input` hook, an
    /// IPv4 fragment for the router is handed over ([`Fate::Local`]) without crossing
    /// `input`: the host's own reassembly and filter take it. For the lab's model of a
    /// kernel router, which filters whole datagrams; weir's own dataplane filters each
    /// fragment at `input` with its datagram's first (virtual reassembly) and leaves this off.
    pub fn set_host_reassembles_v4(&mut self, on: bool) {
        self.host_reassembles_v4 = on;
    }

    /// Take offloaded connections through the flowtable fast path (on), or every packet
    /// through the hooks (off: to measure the path without it).
    pub fn set_fast_path(&mut self, on: bool) {
        self.fast_path = on;
    }

    /// Deliver packets for the router's own addresses after `input` ([`Fate::Local`]), or
    /// drop them ([`Reason::ToRouter`]).
    pub fn set_local_delivery(&mut self, on: bool) {
        self.local_delivery = on;
    }

    /// A port's MAC (known once its link is open).
    pub fn set_mac(&mut self, port: usize, mac: Mac) {
        self.ports[port].mac = Some(mac);
        if let Some(h) = self.bound.hot.get_mut(port) {
            h.mac = Some(mac);
        }
    }

    /// A port's MTU changed.
    pub fn set_mtu(&mut self, port: usize, mtu: usize) {
        self.ports[port].mtu = mtu;
        self.min_mtu = self.ports.iter().map(|p| p.mtu).min().unwrap_or(usize::MAX);
    }

    /// The smallest MTU of the ports.
    pub fn min_mtu(&self) -> usize {
        self.min_mtu
    }

    /// Whether an address is the router's own (or a local broadcast / subnet-router anycast
    /// address of one of its subnets).
    pub fn is_local(&self, a: Addr) -> bool {
        self.local_addrs.contains(&a)
    }

    /// The router's addresses on no port (as on Linux's loopback): packets to them are
    /// delivered too.
    pub fn set_locals(&mut self, locals: Vec<Addr>) {
        self.locals = locals;
        self.index_locals();
    }

    /// Ask for unknown next hops (on), or let packets to them leave with their destination
    /// MAC as it came (off: a capture replayed without its neighbours).
    pub fn set_resolve_neighbours(&mut self, on: bool) {
        self.resolve = on;
    }

    /// Learn a neighbour from an ARP or neighbour discovery frame read on `port` (only
    /// hosts on that port's links).
    pub fn learn(&mut self, port: usize, frame: &[u8]) {
        if let Some((a, mac)) = arp::sender(frame).or_else(|| nd::sender(frame)) {
            if self.routes.on_link(port, a) {
                self.neigh.learn(a, mac);
            }
        }
    }

    /// The ARP request or neighbour solicitation asking for an unknown next hop from `port`
    /// (at most once a second per address; None when the port has no address of its
    /// family or no MAC).
    pub fn solicit(&mut self, port: usize, hop: Addr, now: u64) -> Option<Vec<u8>> {
        let p = &self.ports[port];
        let (mac, src) = (p.mac?, p.addr(hop.family())?);
        if !self.neigh.ask(hop, now) {
            return None;
        }
        Some(match hop.family() {
            Family::Ipv4 => arp::request(mac, src.bits() as u32, hop.bits() as u32),
            Family::Ipv6 => nd::solicit(mac, src.bits(), hop.bits()),
        })
    }

    /// The routing state for `weir ctl status`.
    pub fn describe(&self) -> String {
        format!(
            "routes {} (prefix lengths: IPv4 {}, IPv6 {}), neighbours {} (not learnt, table full: {}), adjacencies {}",
            self.routes.len(),
            self.routes.lengths(Family::Ipv4),
            self.routes.lengths(Family::Ipv6),
            self.neigh.len(),
            self.neigh.refused(),
            self.adjs.len()
        )
    }

    /// The flowtables of a port's device (for a caller that prefetches ahead).
    pub fn flowtables(&mut self, sf: &Stateful, port: usize) -> FtDevices {
        self.bind(sf);
        self.bound.flowtables[port]
    }

    /// Find the ruleset's device-bound chains and flowtables for each port again when the
    /// ruleset changed (one comparison when it did not).
    #[inline(always)]
    fn bind(&mut self, sf: &Stateful) {
        if self.bound.ruleset != sf.ruleset_id() {
            self.rebind(sf);
        }
    }

    #[inline(never)]
    fn rebind(&mut self, sf: &Stateful) {
        let names = self.ports.iter().map(|p| p.name.as_str());
        self.bound = Bound {
            ruleset: sf.ruleset_id(),
            ingress: names
                .clone()
                .map(|n| sf.device_chains(Hook::Ingress, n))
                .collect(),
            egress: names
                .clone()
                .map(|n| sf.device_chains(Hook::Egress, n))
                .collect(),
            flowtables: names.map(|n| sf.flowtable_devices(n)).collect(),
            hot: Vec::new(),
        };
        let b = &self.bound;
        self.bound.hot = (0..self.ports.len())
            .map(|i| Hot {
                mac: self.ports[i].mac,
                ingress: !b.ingress[i].is_empty(),
                egress: !b.egress[i].is_empty(),
                flowtables: b.flowtables[i],
            })
            .collect();
    }

    /// The metadata of a packet at a hook: its input and output ports (None: no device
    /// there) and its mark.
    /// `rt mtu` for a packet leaving by `port` (nft's `get_tcpmss`): the smaller of the port's
    /// MTU and the MTU of the route back to the packet's source, less the IP and TCP headers;
    /// 536 when that leaves nothing.
    fn tcp_mss(&self, port: usize, pm: &weir_wire::PacketMeta) -> u16 {
        let mut mtu = self.ports[port].mtu;
        if let Some(src) = weir_wire::Addr::src_of(pm) {
            if let Some(ri) = self.routes.lookup(src) {
                mtu = mtu.min(self.ports[self.routes.get(ri).port].mtu);
            }
        }
        weir_engine::fib::tcp_mss(mtu, pm.l3 == weir_wire::L3::Ipv6)
    }

    fn meta(&self, iif: Option<usize>, oif: Option<usize>, mark: u32) -> Meta {
        let mut m = Meta::with_ifnames("", "");
        m.iifname = iif.map_or(self.absent_ifname, |p| self.ports[p].name_value);
        m.oifname = oif.map_or(self.absent_ifname, |p| self.ports[p].name_value);
        m.iif = iif.map_or(0, |p| self.ports[p].ifindex);
        m.oif = oif.map_or(0, |p| self.ports[p].ifindex);
        m.iifgroup = iif.map(|p| self.ports[p].group);
        m.oifgroup = oif.map(|p| self.ports[p].group);
        m.mark = mark;
        m
    }
}
