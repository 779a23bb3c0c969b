//! The weir side: a model of the kernel router, in process, on the weir engine (no root).
//!
//! [`prepare`] turns the packets of a capture into the frames the lab injects (the Ethernet
//! destination becomes the router's MAC on the input interface; raw-IP packets get an Ethernet
//! header), or says why a packet is not injected. [`Model::predict`] then follows a frame
//! through the same steps as Linux's IPv4/IPv6 receive and forward paths, calling
//! [`Engine::process`] at each netfilter hook:
//!
//! 0. The arrival device's `netdev ingress` chains, on the frame as it came (link padding
//!    included): drops, marks, stateless rewrites, and `fwd to DEV` (the frame leaves by that
//!    device as it is: not routed, TTL kept) or `fwd ip to ADDR device DEV` (TTL decremented,
//!    to that neighbour's MAC); a forwarded frame then crosses the output device's `egress`
//!    chains, as `dev_queue_xmit` runs them.
//! 1. IP input checks (`ip_rcv_core` / `ipv6_rcv`): a VLAN-tagged frame (no VLAN device), a
//!    malformed network header or a bad IPv4 header checksum is dropped before any other hook.
//!    Whether the frame is the router's was decided as it arrived (`pkt_type`): an ingress
//!    `ether daddr set` does not change it.
//! 2. `prerouting` with the input interface only (the kernel has no output device yet: it
//!    compares `oifname` with the empty name).
//! 3. The routing decision ([`Router::route`]): the router's own addresses (and local
//!    broadcast / subnet-router anycast) go to `input`; other destinations by longest prefix
//!    match, no route means dropped (the kernel answers ICMP unreachable). The reverse path
//!    filter of the arrival interface (the topology's `rp_filter`, IPv4 only as in Linux)
//!    drops a packet whose source is not routed back out of it (strict) or has no route at
//!    all (loose), whether it is for the router or forwarded.
//! 4. `input` (input interface only): accepted means delivered locally. An IPv4 fragment is
//!    held for reassembly *before* `input`, an IPv6 fragment after it: neither is observable.
//! 5. Forwarding (`ip_forward` / `ip6_forward`): TTL / hop limit <= 1 is not forwarded (the
//!    kernel sends ICMP time exceeded); otherwise it is decremented (the IPv4 header checksum
//!    updated with the kernel's own arithmetic, `ip_decrease_ttl`) *before* `forward`, which
//!    sees both interfaces. Link padding after the IP packet is gone (`pskb_trim_rcsum`).
//! 6. `postrouting` with both interfaces (`ip_output` passes the input device on), then the
//!    neighbour table: no static entry
//!    for the next hop means nothing leaves in the lab's window (the kernel would ARP / ND).
//! 7. The frame that leaves: Ethernet source = the router's MAC on the output interface,
//!    destination = the next hop's MAC (one of several gateways on a link: the one its route
//!    names), then the (decremented) IP packet, through the output device's `netdev egress`
//!    chains.
//!
//! `meta mark` set in one hook is seen by the next, as `skb->mark` is. [`Variant`] selects
//! documented deviations used to explain known differences (see `KNOWN_DIFFERENCES.md`).
//!
//! Steps 0 to 7 are not the model's own: it hands the frame to
//! `weir_router::Router::route_frame`, the path `weir run` forwards with, built from the
//! topology ([`path_of`]; for IPv6 packets [`path_of_ipv6`], without the reverse path
//! filter); the model keeps the oracle's bookkeeping
//! (what is observable in the lab's window, the variants, the words of a prediction, the
//! answers of the router's own stack to what it delivers).

use crate::topology::{in_lab_range, mac_text, Dest, Mac, Router, RpFilter, MTU};
use std::net::IpAddr;
use weir_engine::stateful::{PacketCt, Stateful};
use weir_engine::{Compiled, DropReason, Engine, Mode};
use weir_lang::ir;
use weir_router as wr;
use weir_wire::pcap::Packet;
use weir_wire::{Frag, LinkType, Malformed, PacketMeta, L3};

/// A packet of the capture as the lab injects it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prepared {
    /// Position in the capture (0-based).
    pub index: usize,
    /// Input interface (index into the router's interfaces).
    pub iif: usize,
    pub ts_ns: u64,
    /// The Ethernet frame sent to the router (empty when skipped).
    pub frame: Vec<u8>,
    /// Why the packet is not injected (not IP, outside the lab ranges, too big, ...).
    pub skip: Option<String>,
}

impl Prepared {
    /// The frame is an ICMP or ICMPv6 error message.
    pub fn frame_is_icmp_error(&self) -> bool {
        let pm = PacketMeta::parse(&self.frame, LinkType::Ethernet);
        pm.is_icmp_error(&self.frame)
    }
}

/// The MAC address of the lab's peer interface `i` (the sender/receiver on that side).
pub fn peer_mac(i: usize) -> Mac {
    [0x02, 0x77, 0x6c, 0x61, 0x62, i as u8]
}

/// Turn captured packets into injected frames. `iifs` gives each packet's input interface.
pub fn prepare(router: &Router, packets: &[Packet], iifs: &[usize]) -> Vec<Prepared> {
    packets
        .iter()
        .zip(iifs)
        .enumerate()
        .map(|(index, (p, &iif))| {
            let (frame, skip) = prepare_one(router, p, iif);
            Prepared {
                index,
                iif,
                ts_ns: p.ts_nanos,
                frame: if skip.is_some() { Vec::new() } else { frame },
                skip,
            }
        })
        .collect()
}

fn prepare_one(router: &Router, p: &Packet, iif: usize) -> (Vec<u8>, Option<String>) {
    if (p.orig_len as usize) > p.data.len() {
        return (
            Vec::new(),
            Some(format!(
                "captured only in part ({} of {} bytes)",
                p.data.len(),
                p.orig_len
            )),
        );
    }
    let rmac = router.ifaces[iif].mac;
    let frame = match p.link {
        LinkType::RawIp => {
            let et: u16 = match p.data.first().map(|b| b >> 4) {
                Some(4) => 0x0800,
                Some(6) => 0x86dd,
                _ => {
                    return (
                        Vec::new(),
                        Some("raw-IP packet that is neither IPv4 nor IPv6".into()),
                    )
                }
            };
            let mut f = Vec::with_capacity(14 + p.data.len());
            f.extend_from_slice(&rmac);
            f.extend_from_slice(&peer_mac(iif));
            f.extend_from_slice(&et.to_be_bytes());
            f.extend_from_slice(&p.data);
            f
        }
        LinkType::Ethernet => {
            if p.data.len() < 14 {
                return (Vec::new(), Some("shorter than an Ethernet header".into()));
            }
            let mut f = p.data.clone();
            f[..6].copy_from_slice(&rmac);
            f
        }
    };
    if frame.len() > MTU + 14 + 8 {
        return (
            Vec::new(),
            Some(format!(
                "{} bytes: larger than the lab's {MTU}-byte MTU",
                frame.len()
            )),
        );
    }
    let pm = PacketMeta::parse(&frame, LinkType::Ethernet);
    match pm.l3 {
        L3::Ipv4 | L3::Ipv6 => {}
        L3::Other(et) if pm.vlan.is_none() => {
            return (
                Vec::new(),
                Some(format!("not IP (EtherType 0x{et:04x}): not injected")),
            );
        }
        L3::Other(_) => {}
    }
    if pm.l3_ok() {
        for (what, a) in [("source", pm.saddr), ("destination", pm.daddr)] {
            let a = crate::topology::from_bits(a, pm.l3 == L3::Ipv4);
            if !in_lab_range(a) {
                return (Vec::new(), Some(format!("{what} {a} is outside the lab ranges (198.18.0.0/15, 2001:db8::/32): not injected")));
            }
        }
    }
    (frame, None)
}

/// What happens to a packet, as the kernel would show it on the wire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Leaves the router on interface `oif` as `frame`.
    Forwarded { oif: usize, frame: Vec<u8> },
    /// Accepted by `input`: delivered to the router's own stack.
    Local,
    /// Nothing observable: dropped by a chain or by the router itself, or held.
    Dropped,
}

/// A prediction and the path that led to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prediction {
    pub fate: Fate,
    /// Human-readable path, e.g. `prerouting accept; route out of wan0 via 198.19.0.1; forward: dropped by rule "tcp dport 22 drop" (inet f forward)`.
    pub why: String,
}

/// Documented deviations of the model, each explaining a known difference (see
/// `KNOWN_DIFFERENCES.md`): with a flag set, the model does what the kernel does instead of
/// what weir does. [`Variant::WEIR`] is weir as it is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Variant {
    /// Where the kernel has no device (`oifname` in prerouting and input), it compares the
    /// empty name; weir treats the field as absent. The variant gives the engine a name that
    /// equals no interface.
    pub empty_ifname: bool,
    /// `th sport`/`th dport` read the first four bytes at the transport offset whatever the
    /// protocol (ICMP type/code and checksum); weir has them only for protocols with ports.
    pub th_any_protocol: bool,
    /// On a non-first fragment the kernel's nft still reads a transport header (`tcp dport`,
    /// `udp dport`, `th dport`, ...): for IPv4 the fragment's payload, for IPv6 the fragment
    /// header itself; weir has no transport fields there.
    pub fragment_transport: bool,
    /// A broken transport header (TCP data offset < 5 or past the end, UDP length wrong, a cut
    /// TCP/UDP/ICMP header) is still read byte by byte by the kernel, each field as long as its
    /// bytes are in the packet; weir gives such a packet no transport fields.
    pub raw_transport: bool,
    /// With connection tracking the kernel holds every fragment until its datagram is whole
    /// (`nf_defrag`); weir's virtual reassembly forwards a first fragment the chains accept,
    /// and the later ones of its datagram after it.
    pub holds_fragments: bool,
}

impl Variant {
    pub const WEIR: Variant = Variant {
        empty_ifname: false,
        th_any_protocol: false,
        fragment_transport: false,
        raw_transport: false,
        holds_fragments: false,
    };
    pub const ALL: Variant = Variant {
        empty_ifname: true,
        th_any_protocol: true,
        fragment_transport: true,
        raw_transport: true,
        holds_fragments: true,
    };

    /// Both variants' flags.
    pub fn union(self, o: Variant) -> Variant {
        Variant {
            empty_ifname: self.empty_ifname || o.empty_ifname,
            th_any_protocol: self.th_any_protocol || o.th_any_protocol,
            fragment_transport: self.fragment_transport || o.fragment_transport,
            raw_transport: self.raw_transport || o.raw_transport,
            holds_fragments: self.holds_fragments || o.holds_fragments,
        }
    }
}

/// The transport view the kernel's nft has of a packet, under the variant's flags.
fn transport_view(pm: PacketMeta, frame: &[u8], v: Variant) -> PacketMeta {
    let mut m = pm;
    if !m.l3_ok() {
        return m;
    }
    let end = m.l3_end().min(frame.len());
    let l4 = m.l4_off as usize;
    let b16 = |i: usize| (i + 2 <= end).then(|| u16::from_be_bytes([frame[i], frame[i + 1]]));
    if v.fragment_transport && m.frag == Frag::Later && l4 < end {
        // IPv6: `ipv6_find_hdr` stops at the fragment header of a non-first fragment and
        // leaves the offset there, so nft's "transport header" is the fragment header itself
        let l4 = if m.l3 == L3::Ipv6 { l4 - 8 } else { l4 };
        m.l4_off = l4 as u16;
        m.has_l4 = true;
        if let (Some(s), Some(d)) = (b16(l4), b16(l4 + 2)) {
            if matches!(m.l4proto, 6 | 17 | 33 | 132 | 136) || v.th_any_protocol {
                m.has_ports = true;
                m.sport = s;
                m.dport = d;
            }
        }
    }
    let broken = matches!(
        m.malformed,
        Some(
            Malformed::BadTcpDoff
                | Malformed::TruncatedTcp
                | Malformed::TruncatedUdp
                | Malformed::BadUdpLength
                | Malformed::TruncatedSctp
                | Malformed::TruncatedDccp
                | Malformed::TruncatedIcmp
                | Malformed::TruncatedIcmpv6
                | Malformed::TinyFragment
        )
    );
    if v.raw_transport && broken && !m.has_l4 && m.frag != Frag::Later && l4 < end {
        m.has_l4 = true;
        if let (Some(s), Some(d)) = (b16(l4), b16(l4 + 2)) {
            if matches!(m.l4proto, 6 | 17 | 33 | 132 | 136) {
                m.has_ports = true;
                m.sport = s;
                m.dport = d;
            }
        }
    }
    if v.th_any_protocol && m.has_l4 && !m.has_ports {
        if let (Some(s), Some(d)) = (b16(l4), b16(l4 + 2)) {
            m.has_ports = true;
            m.sport = s;
            m.dport = d;
        }
    }
    m
}

/// Engine mode used for a prediction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineMode {
    Compiled,
    Linear,
}

/// The weir model of the router for one ruleset: the engine with connection tracking, in
/// compiled and linear mode (each sees every packet, in order).
pub struct Model {
    pub router: Router,
    /// weir's router of the topology (its ports, routes, neighbours): the path both engines
    /// take, for IPv4 packets ([`path_of`]) and for IPv6 packets ([`path_of_ipv6`]: no
    /// reverse path filter, as in Linux).
    path: wr::Router,
    path6: wr::Router,
    compiled: Stateful,
    linear: Stateful,
}

/// The state of a model's two engines, saved to replay a packet with a variant and come back.
pub struct ModelState {
    tables: [weir_engine::stateful::Saved; 2],
}

/// Connection table size in the lab (small: the model's state is saved packet by packet).
const LAB_CT_ENTRIES: usize = 4096;

fn stateful(c: Compiled) -> Stateful {
    Stateful::new(
        Engine::new(c),
        weir_conntrack::Config {
            max_entries: LAB_CT_ENTRIES,
            ..weir_conntrack::Config::default()
        },
    )
}

/// weir's router of a lab topology: a port per interface (its MAC, addresses with their
/// subnets, the lab's MTU, its kernel ifindex, its reverse path filter), the connected and
/// static routes, the static neighbours; IPv4 fragments for the router left to the host's
/// reassembly before `input`, as the kernel does; a note of each path kept for the
/// predictions' words.
///
/// This is the path of the lab's IPv4 packets. weir's reverse path filter applies to both
/// families, Linux's `rp_filter` to IPv4 only (IPv6 has no such sysctl): the model takes IPv6
/// packets through the same router with every port's filter off ([`path_of_ipv6`]), so that
/// both sides filter what Linux filters.
pub fn path_of(router: &Router) -> wr::Router {
    path_with(router, true)
}

/// The path of the lab's IPv6 packets: [`path_of`] with every port's reverse path filter off.
pub fn path_of_ipv6(router: &Router) -> wr::Router {
    path_with(router, false)
}

/// weir's reverse path filter of a topology's interface.
pub fn rp_filter_of(f: RpFilter) -> wr::RpFilter {
    match f {
        RpFilter::Off => wr::RpFilter::Off,
        RpFilter::Strict => wr::RpFilter::Strict,
        RpFilter::Loose => wr::RpFilter::Loose,
    }
}

fn path_with(router: &Router, rp_filter: bool) -> wr::Router {
    let ports = router
        .ifaces
        .iter()
        .map(|f| {
            wr::Port::new(&f.name)
                .with_mac(weir_wire::Mac(f.mac))
                .with_mtu(MTU)
                .with_ifindex(f.ifindex)
                .with_rp_filter(if rp_filter {
                    rp_filter_of(f.rp_filter)
                } else {
                    wr::RpFilter::Off
                })
                .with_addrs(f.addrs.iter().map(|p| wr::PortAddr {
                    addr: p.addr.into(),
                    len: p.len,
                }))
        })
        .collect();
    let routes = router
        .routes
        .iter()
        .map(|r| {
            wr::Route::new(
                r.prefix.addr.into(),
                r.prefix.len,
                r.dev,
                r.via.map(Into::into),
            )
        })
        .collect();
    let mut path = wr::Router::new(
        ports,
        wr::Routes::new(routes).expect("a checked topology has each prefix once"),
    );
    for (a, mac, _) in &router.neighbors {
        path.set_neighbour((*a).into(), weir_wire::Mac(*mac));
    }
    path.set_record(true);
    path.set_host_reassembles_v4(true);
    path
}

impl Model {
    pub fn new(rs: &ir::Ruleset, router: Router) -> Model {
        Model {
            path: path_of(&router),
            path6: path_of_ipv6(&router),
            router,
            compiled: stateful(Compiled::build(rs, Mode::Compiled)),
            linear: stateful(Compiled::build(rs, Mode::Linear)),
        }
    }

    /// Save the engines' state (cheap: the lab's tables are small).
    pub fn save(&self) -> ModelState {
        ModelState {
            tables: [self.compiled.save(), self.linear.save()],
        }
    }

    pub fn restore(&mut self, s: &ModelState) {
        self.compiled.restore(&s.tables[0]);
        self.linear.restore(&s.tables[1]);
    }

    /// The model of a ruleset whose compiled form `fix` changes (None when it changes nothing):
    /// a documented deviation at the level of the whole ruleset (base chain order).
    pub fn with_fix(
        rs: &ir::Ruleset,
        router: Router,
        fix: fn(&mut Compiled) -> bool,
    ) -> Option<Model> {
        let mut c = Compiled::build(rs, Mode::Compiled);
        let mut l = Compiled::build(rs, Mode::Linear);
        if !fix(&mut c) {
            return None;
        }
        fix(&mut l);
        Some(Model {
            path: path_of(&router),
            path6: path_of_ipv6(&router),
            router,
            compiled: stateful(c),
            linear: stateful(l),
        })
    }

    fn describe(eng: &Engine, d: DropReason) -> String {
        let rule = |gid: usize| -> String {
            let Some(&(t, c, s)) = eng.rs.rule_loc.get(gid) else {
                return format!("rule #{gid}");
            };
            let tab = &eng.rs.tables[t as usize];
            let ch = &tab.chains[c as usize];
            let text = ch
                .slots
                .get(s as usize)
                .and_then(|r| r.as_ref())
                .map(|r| r.text.clone())
                .unwrap_or_default();
            format!(
                "\"{text}\" ({} {} {})",
                tab.family.name(),
                tab.name,
                ch.name
            )
        };
        match d {
            DropReason::Rule(g) => format!("dropped by rule {}", rule(g)),
            DropReason::Reject(g) => format!("rejected by rule {}", rule(g)),
            DropReason::Policy(t, c) => {
                let tab = &eng.rs.tables[t];
                format!(
                    "policy drop of {} {} {}",
                    tab.family.name(),
                    tab.name,
                    tab.chains[c].name
                )
            }
            DropReason::Malformed(m) => {
                format!("malformed ({}) and the chain's policy is drop", m.reason())
            }
            DropReason::Fragment => {
                "a later fragment whose first did not pass (virtual reassembly)".into()
            }
            DropReason::CtRefused => "the connection table refused a new entry".into(),
            DropReason::Queue(n) => {
                format!("queue {n}: dropped by its per-flow processing, or nobody listens on it")
            }
            DropReason::Replaced => "a helper sent a rewritten copy in its place".into(),
            DropReason::Synproxy => "taken by the SYN proxy (answered, or passed on)".into(),
            DropReason::SynproxyCookie => "an ACK whose SYN cookie is not good".into(),
        }
    }

    /// Predict what the router does with a prepared packet.
    pub fn predict(&mut self, p: &Prepared, variant: Variant, mode: EngineMode) -> Prediction {
        let sf = match mode {
            EngineMode::Compiled => &self.compiled,
            EngineMode::Linear => &self.linear,
        };
        let changed = sf.stats().nat_port_changed + sf.stats().nat_port_changed_packets;
        let mut pred = self.predict_inner(p, variant, mode);
        let sf = match mode {
            EngineMode::Compiled => &self.compiled,
            EngineMode::Linear => &self.linear,
        };
        if sf.stats().nat_port_changed + sf.stats().nat_port_changed_packets != changed {
            pred.why.push_str(NAT_PORT_NOTE);
        }
        pred
    }

    fn predict_inner(&mut self, p: &Prepared, variant: Variant, mode: EngineMode) -> Prediction {
        let router = &self.router;
        let sf = match mode {
            EngineMode::Compiled => &mut self.compiled,
            EngineMode::Linear => &mut self.linear,
        };
        let drop = |why: String| Prediction {
            fate: Fate::Dropped,
            why,
        };
        if p.skip.is_some() {
            return drop("not injected".into());
        }
        // 1. what is not IP never reaches the router's path (non-IP frames are not injected;
        // a VLAN-tagged one of another EtherType is not the router's)
        let pm0 = PacketMeta::parse(&p.frame, LinkType::Ethernet);
        if !matches!(pm0.l3, L3::Ipv4 | L3::Ipv6) {
            return drop(if pm0.vlan.is_some() {
                "VLAN-tagged: the router has no VLAN interface, the kernel drops it before IP"
                    .into()
            } else {
                "not IP".into()
            });
        }
        let v4 = pm0.l3 == L3::Ipv4;
        // the frame as it came: the arrival device's netdev ingress chains see all of it (a
        // `fwd to` sends it on with its link padding); the router's IP input checks come after
        // them and trim the padding (pskb_trim_rcsum)
        let mut buf: Vec<u8> = p.frame.clone();
        let pm = transport_view(pm0, &buf, variant);
        let tracks = match pm.l3 {
            L3::Ipv4 => sf.tracks_family(weir_wire::L3::Ipv4),
            _ => sf.tracks_family(weir_wire::L3::Ipv6),
        };
        if tracks && pm.l3_ok() && pm.frag != Frag::None && variant.holds_fragments {
            // nf_defrag (priority -400) holds fragments until the datagram is whole
            return drop(
                "a fragment: connection tracking holds it for reassembly before any chain".into(),
            );
        }
        // 2-7: weir's router (IPv6: with no reverse path filter, as Linux has none)
        let wpath = if v4 { &mut self.path } else { &mut self.path6 };
        wpath.absent_ifname = if variant.empty_ifname { 1 } else { 0 };
        let fate = wpath.route_frame(sf, &mut buf, pm, p.iif, wr::Rx::default(), p.ts_ns);
        let note = *wpath.note();
        // IP input, after the ingress chains: in words
        let ingress_done = match fate {
            wr::Fate::NotMine if pm0.vlan.is_some() => Some(
                "VLAN-tagged: the router has no VLAN interface, the kernel drops it before IP"
                    .to_string(),
            ),
            wr::Fate::Drop(wr::Reason::Malformed) if note.dropped_at.is_none() => {
                Some(match pm0.malformed.filter(|m| m.is_l3()) {
                    Some(m) => format!(
                        "malformed network header ({}): dropped by IP input before any hook",
                        m.reason()
                    ),
                    None => "malformed: dropped by IP input before any hook".into(),
                })
            }
            wr::Fate::Drop(wr::Reason::IpChecksum) => {
                Some("bad IPv4 header checksum: dropped by IP input before any hook".to_string())
            }
            _ => None,
        };
        if let Some(why) = ingress_done {
            return drop(why);
        }
        let dst = crate::topology::from_bits(pm.daddr, v4);
        let mut path: Vec<String> = Vec::new();
        if tracks && note.ct_state != 0 {
            let name = match note.ct_state {
                1 => "invalid",
                2 => "established",
                4 => "related",
                8 => "new",
                64 => "untracked",
                _ => "?",
            };
            path.push(format!("ct state {name}"));
        }
        let route_words = |path: &mut Vec<String>| match router.route(dst) {
            Dest::Local => path.push(format!("route: {dst} is the router's")),
            Dest::Forward { dev, nexthop } => path.push(format!(
                "route: out of {}{}",
                router.ifaces[dev].name,
                if nexthop != dst {
                    format!(" via {nexthop}")
                } else {
                    String::new()
                }
            )),
            Dest::NoRoute => {}
        };
        let chains = |path: &[String], eng: &Engine| match note.dropped_at {
            Some((h, r)) => dropped_at(path, h.name(), eng, r),
            None => Prediction {
                fate: Fate::Dropped,
                why: format!("{}; dropped", path.join("; ")),
            },
        };
        match fate {
            wr::Fate::Out { port, len } => {
                buf.truncate(len);
                let oname = &router.ifaces[port].name;
                if note.fast_path {
                    return Prediction {
                        fate: Fate::Forwarded {
                            oif: port,
                            frame: buf,
                        },
                        why: format!("flowtable fast path (offloaded connection) out of {oname}"),
                    };
                }
                let ttl_at = pm.l3_off as usize + if v4 { 8 } else { 7 };
                if buf.get(ttl_at) == p.frame.get(ttl_at) && pm.l3_ok() {
                    // the TTL as it came: no routing, the ingress chains forwarded it
                    return Prediction {
                        fate: Fate::Forwarded {
                            oif: port,
                            frame: buf,
                        },
                        why: format!(
                            "netdev ingress of {}: fwd to {oname} (the frame as it came: not routed, TTL kept)",
                            router.ifaces[p.iif].name
                        ),
                    };
                }
                route_words(&mut path);
                let nmac = mac_text(&buf[..6].try_into().expect("an Ethernet frame"));
                Prediction {
                    fate: Fate::Forwarded {
                        oif: port,
                        frame: buf,
                    },
                    why: format!(
                        "{}; forward accept; postrouting accept; to {nmac}",
                        path.join("; ")
                    ),
                }
            }
            wr::Fate::Local { .. } => {
                route_words(&mut path);
                if pm.frag != Frag::None {
                    return drop(format!(
                        "{}; {}",
                        path.join("; "),
                        if v4 {
                            "an IPv4 fragment is held for reassembly before input"
                        } else {
                            "input accept; an IPv6 fragment is held for reassembly"
                        }
                    ));
                }
                if tracks {
                    let pm = PacketMeta::parse(&buf, LinkType::Ethernet);
                    answer_locally(sf, wpath, router, &buf, &pm, p.ts_ns);
                }
                Prediction {
                    fate: Fate::Local,
                    why: format!("{}; input accept: delivered locally", path.join("; ")),
                }
            }
            wr::Fate::Icmp {
                why: wr::Reason::NoRoute,
                ..
            } => drop(format!(
                "no route to {dst} (the kernel answers ICMP unreachable)"
            )),
            wr::Fate::Icmp {
                why: wr::Reason::Ttl,
                ..
            } => {
                route_words(&mut path);
                drop(format!(
                    "{}; {} 1: not forwarded (the kernel answers ICMP time exceeded)",
                    path.join("; "),
                    if v4 { "TTL" } else { "hop limit" }
                ))
            }
            wr::Fate::Icmp {
                why: wr::Reason::TooBig,
                ..
            }
            | wr::Fate::Fragments { .. } => {
                route_words(&mut path);
                drop(format!(
                    "{}; {} bytes do not fit the {MTU}-byte MTU",
                    path.join("; "),
                    pm.l3_len
                ))
            }
            wr::Fate::NoNeighbour { port, hop, .. } => {
                route_words(&mut path);
                drop(format!(
                    "{}; no neighbour entry for {hop} on {}: the kernel would resolve it (ARP/ND), nothing leaves in the window",
                    path.join("; "),
                    router.ifaces[port].name
                ))
            }
            wr::Fate::Drop(wr::Reason::Ttl) => {
                drop(format!(
                "netdev ingress of {}: fwd ip to a neighbour with {} {}: dropped (nft_fwd_neigh)",
                router.ifaces[p.iif].name,
                if v4 { "TTL" } else { "hop limit" },
                p.frame.get(pm.l3_off as usize + if v4 { 8 } else { 7 }).copied().unwrap_or(0)
            ))
            }
            wr::Fate::Drop(wr::Reason::RpFilter) => drop(format!(
                "{}; the reverse path filter of {} (rp_filter) drops it",
                path.join("; "),
                router.ifaces[p.iif].name
            )),
            wr::Fate::Icmp { .. } | wr::Fate::Reset(_) | wr::Fate::Drop(_) => {
                if note
                    .dropped_at
                    .is_some_and(|(h, _)| !matches!(h, ir::Hook::Prerouting | ir::Hook::Ingress))
                {
                    route_words(&mut path);
                }
                chains(&path, sf.engine())
            }
            wr::Fate::Hold => drop(format!(
                "prerouting: {}",
                Self::describe(sf.engine(), DropReason::Fragment)
            )),
            wr::Fate::NotMine => drop("not the router's frame".into()),
        }
    }
}

/// Appended to a prediction whose source NAT had to change a port: Linux picks that port at
/// random (`nf_nat_l4proto_unique_tuple`), weir by a hash, so only the port can differ.
pub const NAT_PORT_NOTE: &str = "; nat: source port changed (the kernel picks it at random)";

/// A drop by a hook's chains, with the path that led there.
fn dropped_at(path: &[String], hook: &str, eng: &Engine, r: DropReason) -> Prediction {
    Prediction {
        fate: Fate::Dropped,
        why: format!("{}; {hook}: {}", path.join("; "), Model::describe(eng, r)),
    }
}

/// The router's own answer to a packet delivered to it (nothing listens in the lab's router):
/// a TCP reset, or an ICMP echo reply. It leaves through `output` and `postrouting`, so
/// connection tracking sees it: a reset ends a connection that never saw a reply, an echo
/// reply is the reply of the echo's. Only the connection table matters here; the answer itself
/// is not compared.
fn answer_locally(
    sf: &mut Stateful,
    path: &mut wr::Router,
    router: &Router,
    frame: &[u8],
    pm: &PacketMeta,
    now: u64,
) {
    let v4 = pm.l3 == L3::Ipv4;
    let (src, dst) = (
        crate::topology::from_bits(pm.daddr, v4),
        crate::topology::from_bits(pm.saddr, v4),
    );
    let l4 = pm.l4_off as usize;
    let end = pm.l3_end().min(frame.len());
    let answer = match pm.l4proto {
        6 if pm.transport_checksum_ok(frame) => {
            weir_engine::answer::tcp_reset(frame, pm, MAC0, MAC0)
        }
        1 | 58 if l4 + 8 <= end && frame[l4] == if v4 { 8 } else { 128 } => {
            let id = u16::from_be_bytes([frame[l4 + 4], frame[l4 + 5]]);
            let sq = u16::from_be_bytes([frame[l4 + 6], frame[l4 + 7]]);
            Some(weir_wire::build::Builder::new().icmp_echo(
                src,
                dst,
                false,
                id,
                sq,
                &frame[l4 + 8..end],
            ))
        }
        _ => None,
    };
    if let Some(a) = answer {
        // out of the interface its destination routes to
        if let Dest::Forward { dev, .. } = router.route(dst) {
            path.answer_out(sf, dev, a, PacketCt::default(), now);
        }
    }
}

/// The MACs of the model's own answers (never compared).
const MAC0: [u8; 6] = [2, 0, 0, 0, 0, 0];

/// The address family and addresses of a parsed IP packet.
pub fn addrs(pm: &PacketMeta) -> Option<(IpAddr, IpAddr)> {
    let v4 = match pm.l3 {
        L3::Ipv4 => true,
        L3::Ipv6 => false,
        _ => return None,
    };
    Some((
        crate::topology::from_bits(pm.saddr, v4),
        crate::topology::from_bits(pm.daddr, v4),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::Topology;
    use std::net::{Ipv4Addr, Ipv6Addr};
    use weir_wire::build::{self, Builder, Tcp};
    use weir_wire::checksum::checksum;

    fn router() -> Router {
        let t = Topology::from_json(
            "t",
            r#"{"interfaces": [
                {"name": "lan0", "mac": "02:77:65:00:00:01", "addrs": ["198.18.0.1/24", "2001:db8:0:1::1/64"]},
                {"name": "wan0", "mac": "02:77:65:00:02:01", "addrs": ["198.19.0.2/24", "2001:db8:ffff::2/64"]}],
              "routes": [{"dst": "0.0.0.0/0", "via": "198.19.0.1", "dev": "wan0"},
                         {"dst": "::/0", "via": "2001:db8:ffff::1", "dev": "wan0"}],
              "neighbors": [{"addr": "198.19.0.1", "mac": "02:00:00:00:02:01", "dev": "wan0"},
                            {"addr": "2001:db8:ffff::1", "mac": "02:00:00:00:02:01", "dev": "wan0"},
                            {"addr": "198.18.0.10", "mac": "02:00:00:00:00:10", "dev": "lan0"}]}"#,
        )
        .unwrap();
        Router::from_topology(&t).unwrap()
    }

    fn model(rules: &str) -> Model {
        let (rs, _) = weir_lang::load_str("t.nft", rules)
            .unwrap_or_else(|(sm, d)| panic!("{}", weir_lang::diag::render_all(&d, &sm)));
        Model::new(&rs, router())
    }

    fn prep(r: &Router, frame: Vec<u8>, iif: usize) -> Prepared {
        let pk = Packet {
            ts_nanos: 1,
            orig_len: frame.len() as u32,
            data: frame,
            link: LinkType::Ethernet,
        };
        prepare(r, &[pk], &[iif]).remove(0)
    }

    const LAN: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 10);
    const FAR: Ipv4Addr = Ipv4Addr::new(198, 19, 7, 7);

    #[test]
    fn forwards_with_ttl_and_macs_rewritten() {
        let mut m = model("table inet f { chain forward { type filter hook forward priority 0; policy accept; } }");
        let f = build::tcp4(LAN, FAR, 40000, 80, 0x02, b"hi");
        let p = prep(&m.router, f.clone(), 0);
        assert_eq!(
            &p.frame[..6],
            &[0x02, 0x77, 0x65, 0, 0, 1],
            "destination MAC is the router's"
        );
        let pr = m.predict(&p, Variant::WEIR, EngineMode::Compiled);
        let Fate::Forwarded { oif, frame } = pr.fate else {
            panic!("{pr:?}")
        };
        assert_eq!(oif, 1);
        assert_eq!(&frame[..6], &[2, 0, 0, 0, 2, 1]);
        assert_eq!(&frame[6..12], &[0x02, 0x77, 0x65, 0, 2, 1]);
        assert_eq!(frame[14 + 8], 63);
        assert_eq!(
            checksum(&frame[14..34]),
            0,
            "IPv4 header checksum still valid"
        );
        assert_eq!(&frame[34..], &f[34..], "transport untouched");
    }

    #[test]
    fn hooks_and_router_decisions() {
        let rules = r#"
            table inet f {
              chain prerouting { type filter hook prerouting priority -150; policy accept;
                tcp dport 22 meta mark set 7
              }
              chain forward { type filter hook forward priority 0; policy accept;
                meta mark 7 drop
                ip ttl 63 udp dport 9 drop
                oifname "wan0" udp dport 53 drop
              }
              chain input { type filter hook input priority 0; policy drop;
                tcp dport 80 accept
              }
              chain postrouting { type filter hook postrouting priority 100; policy accept;
                iifname "lan0" udp dport 54 drop
                udp dport 55 drop
              }
            }"#;
        let mut m = model(rules);
        let r = m.router.clone();
        let mut go = |f: Vec<u8>, iif: usize| {
            let p = prep(&r, f, iif);
            m.predict(&p, Variant::WEIR, EngineMode::Compiled)
        };
        // the mark set at prerouting is seen by forward
        assert_eq!(
            go(build::tcp4(LAN, FAR, 1, 22, 2, b""), 0).fate,
            Fate::Dropped
        );
        // forward sees the decremented TTL (64 - 1)
        assert_eq!(go(build::udp4(LAN, FAR, 1, 9, b""), 0).fate, Fate::Dropped);
        assert!(matches!(
            go(build::udp4(LAN, FAR, 1, 10, b""), 0).fate,
            Fate::Forwarded { .. }
        ));
        assert_eq!(go(build::udp4(LAN, FAR, 1, 53, b""), 0).fate, Fate::Dropped);
        assert_eq!(go(build::udp4(LAN, FAR, 1, 55, b""), 0).fate, Fate::Dropped);
        // postrouting sees the input interface of a forwarded packet
        assert_eq!(go(build::udp4(LAN, FAR, 1, 54, b""), 0).fate, Fate::Dropped);
        assert!(matches!(
            go(build::udp4(FAR, LAN, 1, 54, b""), 1).fate,
            Fate::Forwarded { .. }
        ));
        // to the router: input
        let me = Ipv4Addr::new(198, 18, 0, 1);
        assert_eq!(go(build::tcp4(LAN, me, 1, 80, 2, b""), 0).fate, Fate::Local);
        assert_eq!(
            go(build::tcp4(LAN, me, 1, 81, 2, b""), 0).fate,
            Fate::Dropped
        );
        assert_eq!(
            go(
                build::udp4(LAN, Ipv4Addr::new(198, 18, 0, 255), 1, 80, b""),
                0
            )
            .fate,
            Fate::Dropped
        );
        // TTL 1 is not forwarded
        let f = Builder::new().ttl(1).udp(LAN, FAR, 1, 10, b"");
        assert!(go(f, 0).why.contains("time exceeded"));
        // no neighbour entry for an on-link destination
        let pr = go(
            build::udp4(FAR, Ipv4Addr::new(198, 18, 0, 11), 1, 10, b""),
            1,
        );
        assert!(pr.why.contains("no neighbour"), "{}", pr.why);
        // bad header checksum: before any hook
        let mut f = build::udp4(LAN, FAR, 1, 10, b"");
        f[24] ^= 0xff;
        assert!(go(f, 0).why.contains("checksum"));
        // IPv6 forwarded with the hop limit decremented
        let a = Ipv6Addr::new(0x2001, 0xdb8, 0, 1, 0, 0, 0, 0x10);
        let b = Ipv6Addr::new(0x2001, 0xdb8, 0xbad, 0, 0, 0, 0, 1);
        let f = Builder::new().tcp(a, b, &Tcp::new(1, 443, 2), b"");
        let Fate::Forwarded { oif: 1, frame } = go(f.clone(), 0).fate else {
            panic!()
        };
        assert_eq!(frame[14 + 7], 63);
        assert_eq!(&frame[14 + 8..], &f[14 + 8..]);
    }

    /// The topology's rp_filter is IPv4's (Linux has none for IPv6): weir's router filters
    /// the lab's IPv4 packets with it, its IPv6 packets not.
    #[test]
    fn rp_filter_for_ipv4_only() {
        let t = Topology::from_json(
            "t",
            r#"{"interfaces": [
                {"name": "lan0", "mac": "02:77:65:00:00:01", "addrs": ["198.18.0.1/24", "2001:db8:0:1::1/64"], "rp_filter": "strict"},
                {"name": "wan0", "mac": "02:77:65:00:02:01", "addrs": ["198.19.0.2/24", "2001:db8:ffff::2/64"]}],
              "routes": [{"dst": "::/0", "via": "2001:db8:ffff::1", "dev": "wan0"},
                         {"dst": "198.19.0.0/16", "via": "198.19.0.1", "dev": "wan0"}],
              "neighbors": [{"addr": "198.19.0.1", "mac": "02:00:00:00:02:01", "dev": "wan0"},
                            {"addr": "2001:db8:ffff::1", "mac": "02:00:00:00:02:01", "dev": "wan0"}]}"#,
        )
        .unwrap();
        let r = Router::from_topology(&t).unwrap();
        let (rs, _) = weir_lang::load_str(
            "t.nft",
            "table inet f { chain forward { type filter hook forward priority 0; policy accept; } }",
        )
        .unwrap();
        let mut m = Model::new(&rs, r.clone());
        let mut go = |f: Vec<u8>| {
            let p = prep(&r, f, 0);
            m.predict(&p, Variant::WEIR, EngineMode::Compiled)
        };
        // a WAN source arriving on the strict LAN, and one with no route
        let pr = go(build::udp4(Ipv4Addr::new(198, 19, 5, 5), FAR, 1, 2, b""));
        assert!(pr.why.contains("rp_filter"), "{}", pr.why);
        let pr = go(build::udp4(Ipv4Addr::new(198, 18, 77, 7), FAR, 1, 2, b""));
        assert!(pr.why.contains("rp_filter"), "{}", pr.why);
        assert!(matches!(
            go(build::udp4(LAN, FAR, 1, 2, b"")).fate,
            Fate::Forwarded { .. }
        ));
        let far6 = Ipv6Addr::new(0x2001, 0xdb8, 0xbad, 0, 0, 0, 0, 1);
        let f = Builder::new().udp(
            far6,
            Ipv6Addr::new(0x2001, 0xdb8, 0xbad, 0, 0, 0, 0, 2),
            1,
            2,
            b"",
        );
        assert!(
            matches!(go(f).fate, Fate::Forwarded { .. }),
            "IPv6 is not filtered"
        );
    }

    #[test]
    fn what_is_not_injected() {
        let r = router();
        let arp = {
            let mut f = vec![0xff; 6];
            f.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x08, 0x06]);
            f.extend_from_slice(&[0; 28]);
            f
        };
        assert!(prep(&r, arp, 0).skip.unwrap().contains("not IP"));
        let out = build::udp4(Ipv4Addr::new(10, 0, 0, 1), FAR, 1, 2, b"");
        assert!(prep(&r, out, 0)
            .skip
            .unwrap()
            .contains("outside the lab ranges"));
        assert!(prep(&r, vec![1, 2, 3], 0).skip.is_some());
        // raw IP gets an Ethernet header
        let raw = Builder::raw().udp(LAN, FAR, 1, 2, b"x");
        let pk = Packet {
            ts_nanos: 0,
            orig_len: raw.len() as u32,
            data: raw.clone(),
            link: LinkType::RawIp,
        };
        let p = prepare(&r, &[pk], &[0]).remove(0);
        assert_eq!(p.skip, None);
        assert_eq!(&p.frame[14..], &raw[..]);
        assert_eq!(&p.frame[12..14], &[0x08, 0x00]);
    }
}
