//! The weir side: a model of the kernel router, in process, on the weir engine (no root).
//!
//! [`prepare`] turns the packets of a capture into the frames the lab injects (the Ethernet
//! destination becomes the router's MAC on the input interface; raw-IP packets get an Ethernet
//! header), or says why a packet is not injected. [`Model::predict`] then follows a frame
//! through the same steps as Linux's IPv4/IPv6 receive and forward paths, calling
//! [`Engine::process`] at each netfilter hook:
//!
//! 1. IP input checks (`ip_rcv_core` / `ipv6_rcv`): a VLAN-tagged frame (no VLAN device), a
//!    malformed network header or a bad IPv4 header checksum is dropped before any hook.
//! 2. `prerouting` with the input interface only (the kernel has no output device yet: it
//!    compares `oifname` with the empty name).
//! 3. The routing decision ([`Router::route`]): the router's own addresses (and local
//!    broadcast / subnet-router anycast) go to `input`; other destinations by longest prefix
//!    match, no route means dropped (the kernel answers ICMP unreachable).
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
//!    destination = the next hop's MAC, then the (decremented) IP packet.
//!
//! `meta mark` set in one hook is seen by the next, as `skb->mark` is. [`Variant`] selects
//! documented deviations used to explain known differences (see `KNOWN_DIFFERENCES.md`).

use crate::topology::{in_lab_range, mac_text, Dest, Mac, Router, MTU};
use std::net::IpAddr;
use weir_conntrack::Conntrack;
use weir_engine::stateful::{CtExt, PacketCt, Stateful, StatefulStats};
use weir_engine::{Compiled, Decision, DropReason, Engine, Meta, Mode};
use weir_lang::ir::{self, Hook};
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
    compiled: Stateful,
    linear: Stateful,
}

/// The state of a model's two engines, saved to replay a packet with a variant and come back.
pub struct ModelState {
    tables: [Saved; 2],
}

/// What a packet changes in one engine: connections, statistics, the virtual reassembly, the
/// ruleset's state (counters, limits, quotas, sets filled from the packet path, `ct count`
/// lists) and the NAT port generator.
#[derive(Clone)]
struct Saved {
    ct: Conntrack<CtExt>,
    stats: StatefulStats,
    frags: weir_engine::frag::Table,
    st: weir_engine::eval::State,
    nat_rng: u64,
}

impl Saved {
    fn of(sf: &Stateful) -> Saved {
        Saved {
            ct: sf.ct.clone(),
            stats: sf.stats,
            frags: sf.frags.clone(),
            st: sf.eng.st.clone(),
            nat_rng: sf.nat_rng,
        }
    }

    fn put(&self, sf: &mut Stateful) {
        sf.ct = self.ct.clone();
        sf.stats = self.stats;
        sf.frags = self.frags.clone();
        sf.eng.st = self.st.clone();
        sf.nat_rng = self.nat_rng;
    }
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

/// IPv4 TTL decrement exactly as Linux's `ip_decrease_ttl` does it on a little-endian CPU:
/// the checksum's raw 16-bit value plus `htons(0x0100)`, plus one on carry past 0xfffe (so
/// 0xffff never appears). Returns the new checksum field value (big-endian number).
pub fn kernel_ttl_checksum(check_be: u16) -> u16 {
    let raw = check_be.swap_bytes() as u32; // the u16 as a little-endian CPU loads it
    let mut c = raw + 0x0100u16.to_be() as u32;
    c += (c >= 0xffff) as u32;
    (c as u16).swap_bytes()
}

impl Model {
    pub fn new(rs: &ir::Ruleset, router: Router) -> Model {
        Model {
            router,
            compiled: stateful(Compiled::build(rs, Mode::Compiled)),
            linear: stateful(Compiled::build(rs, Mode::Linear)),
        }
    }

    /// Save the engines' state (cheap: the lab's tables are small).
    pub fn save(&self) -> ModelState {
        ModelState {
            tables: [Saved::of(&self.compiled), Saved::of(&self.linear)],
        }
    }

    pub fn restore(&mut self, s: &ModelState) {
        s.tables[0].put(&mut self.compiled);
        s.tables[1].put(&mut self.linear);
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
        }
    }

    /// Predict what the router does with a prepared packet.
    pub fn predict(&mut self, p: &Prepared, variant: Variant, mode: EngineMode) -> Prediction {
        let sf = match mode {
            EngineMode::Compiled => &self.compiled,
            EngineMode::Linear => &self.linear,
        };
        let changed = sf.stats.nat_port_changed + sf.stats.nat_port_changed_packets;
        let mut pred = self.predict_inner(p, variant, mode);
        let sf = match mode {
            EngineMode::Compiled => &self.compiled,
            EngineMode::Linear => &self.linear,
        };
        if sf.stats.nat_port_changed + sf.stats.nat_port_changed_packets != changed {
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
        let pm = PacketMeta::parse(&p.frame, LinkType::Ethernet);
        if pm.vlan.is_some() {
            return drop(
                "VLAN-tagged: the router has no VLAN interface, the kernel drops it before IP"
                    .into(),
            );
        }
        if !matches!(pm.l3, L3::Ipv4 | L3::Ipv6) {
            return drop("not IP".into());
        }
        if let Some(m) = pm.malformed.filter(|m| m.is_l3()) {
            return drop(format!(
                "malformed network header ({}): dropped by IP input before any hook",
                m.reason()
            ));
        }
        let v4 = pm.l3 == L3::Ipv4;
        if v4 && !pm.ipv4_checksum_ok(&p.frame) {
            return drop("bad IPv4 header checksum: dropped by IP input before any hook".into());
        }
        // IP input trims link padding after the IP packet before any hook (pskb_trim_rcsum)
        let mut buf: Vec<u8> = p.frame[..pm.l3_end().min(p.frame.len())].to_vec();
        let mut pm = transport_view(PacketMeta::parse(&buf, LinkType::Ethernet), &buf, variant);
        // 1b. the flowtable's ingress hook: offloaded connections skip everything else
        let in_name = router.ifaces[p.iif].name.clone();
        if let Some(fp) = sf.fast_path(&mut buf, &mut pm, &in_name, p.ts_ns) {
            let dev = fp.oif as usize;
            decrement_ttl(&mut buf, pm.l3_off as usize, v4);
            let dst = crate::topology::from_bits(pm.daddr, v4);
            let nexthop = match router.route(dst) {
                Dest::Forward { nexthop, .. } => nexthop,
                _ => dst,
            };
            let oname = &router.ifaces[dev].name;
            let Some(nmac) = router.neighbor(nexthop, dev) else {
                return drop(format!(
                    "flowtable fast path out of {oname}; no neighbour entry for {nexthop}"
                ));
            };
            buf[..6].copy_from_slice(&nmac);
            buf[6..12].copy_from_slice(&router.ifaces[dev].mac);
            return Prediction {
                fate: Fate::Forwarded {
                    oif: dev,
                    frame: buf,
                },
                why: format!("flowtable fast path (offloaded connection) out of {oname}"),
            };
        }
        let iif = p.iif;
        let iname = router.ifaces[iif].name.as_str();
        let missing: u128 = if variant.empty_ifname { 1 } else { 0 };
        let mut path: Vec<String> = Vec::new();
        let mut meta = Meta::with_ifnames(iname, "");
        meta.iif = router.ifaces[iif].ifindex;
        meta.oifname = missing;
        // 2. prerouting
        let tracks = match pm.l3 {
            L3::Ipv4 => sf.track_v4,
            _ => sf.track_v6,
        };
        if tracks && pm.frag != Frag::None && variant.holds_fragments {
            // nf_defrag (priority -400) holds fragments until the datagram is whole
            return drop(
                "a fragment: connection tracking holds it for reassembly before any chain".into(),
            );
        }
        let mut pc = PacketCt {
            iif_addr: iface_addr(router, iif, v4),
            ..PacketCt::default()
        };
        let mut meta = meta;
        let d = sf.hook_mut(
            Hook::Prerouting,
            &mut buf,
            &mut pm,
            &mut meta,
            p.ts_ns,
            &mut pc,
        );
        let frame: &[u8] = &buf;
        let pkt = PktView { meta };
        match d {
            Decision::Accept => {}
            Decision::Drop(r) => {
                reset_if_rejected(sf, router, r, &buf, &pc, p.ts_ns);
                return drop(format!("prerouting: {}", Self::describe(&sf.eng, r)));
            }
        }
        let mark = pkt.meta.mark;
        if tracks {
            let st = pkt.meta.ct_state;
            let name = match st {
                1 => "invalid",
                2 => "established",
                4 => "related",
                8 => "new",
                64 => "untracked",
                _ => "?",
            };
            path.push(format!("ct state {name}"));
        }
        let dst = crate::topology::from_bits(pm.daddr, v4);
        // 3. routing
        match router.route(dst) {
            Dest::Local => {
                path.push(format!("route: {dst} is the router's"));
                if v4 && pm.frag != Frag::None {
                    return drop(format!(
                        "{}; an IPv4 fragment is held for reassembly before input",
                        path.join("; ")
                    ));
                }
                let mut meta = Meta::with_ifnames(iname, "");
                meta.iif = router.ifaces[iif].ifindex;
                meta.oifname = missing;
                meta.mark = mark;
                let mut meta = meta;
                let mut local = frame.to_vec();
                let mut pm = pm;
                match sf.hook_mut(
                    Hook::Input,
                    &mut local,
                    &mut pm,
                    &mut meta,
                    p.ts_ns,
                    &mut pc,
                ) {
                    Decision::Accept => {}
                    Decision::Drop(r) => {
                        reset_if_rejected(sf, router, r, &local, &pc, p.ts_ns);
                        return dropped_at(&path, "input", &sf.eng, r);
                    }
                }
                if let Decision::Drop(r) = sf.finish(&mut pc, p.ts_ns) {
                    return dropped_at(&path, "input", &sf.eng, r);
                }
                if pm.frag != Frag::None {
                    return drop(format!(
                        "{}; input accept; an IPv6 fragment is held for reassembly",
                        path.join("; ")
                    ));
                }
                if tracks {
                    answer_locally(sf, router, &local, &pm, p.ts_ns);
                }
                Prediction {
                    fate: Fate::Local,
                    why: format!("{}; input accept: delivered locally", path.join("; ")),
                }
            }
            Dest::NoRoute => drop(format!(
                "no route to {dst} (the kernel answers ICMP unreachable)"
            )),
            Dest::Forward { dev, nexthop } => {
                let oname = router.ifaces[dev].name.as_str();
                path.push(format!(
                    "route: out of {oname}{}",
                    if nexthop != dst {
                        format!(" via {nexthop}")
                    } else {
                        String::new()
                    }
                ));
                // 5. forwarding: TTL first, then the decrement, then the forward hook
                let l3 = pm.l3_off as usize;
                let ttl_at = l3 + if v4 { 8 } else { 7 };
                let ttl = frame[ttl_at];
                if ttl <= 1 {
                    return drop(format!(
                        "{}; {} {ttl}: not forwarded (the kernel answers ICMP time exceeded)",
                        path.join("; "),
                        if v4 { "TTL" } else { "hop limit" }
                    ));
                }
                if pm.l3_len as usize > MTU {
                    return drop(format!(
                        "{}; {} bytes do not fit the {MTU}-byte MTU",
                        path.join("; "),
                        pm.l3_len
                    ));
                }
                let mut out: Vec<u8> = frame[..pm.l3_end().min(frame.len())].to_vec();
                decrement_ttl(&mut out, l3, v4);
                let mut opm =
                    transport_view(PacketMeta::parse(&out, LinkType::Ethernet), &out, variant);
                let mut meta = Meta::with_ifnames(iname, oname);
                meta.iif = router.ifaces[iif].ifindex;
                meta.oif = router.ifaces[dev].ifindex;
                meta.mark = mark;
                let d = sf.hook_mut(
                    Hook::Forward,
                    &mut out,
                    &mut opm,
                    &mut meta,
                    p.ts_ns,
                    &mut pc,
                );
                let pkt = PktView { meta };
                match d {
                    Decision::Accept => {}
                    Decision::Drop(r) => {
                        reset_if_rejected(sf, router, r, &out, &pc, p.ts_ns);
                        return dropped_at(&path, "forward", &sf.eng, r);
                    }
                }
                // ip_output / ip6_output pass the input device to postrouting too
                let mut meta = Meta::with_ifnames(iname, oname);
                meta.iif = router.ifaces[iif].ifindex;
                meta.oif = router.ifaces[dev].ifindex;
                meta.mark = pkt.meta.mark;
                pc.oif_addr = iface_addr(router, dev, v4);
                match sf.hook_mut(
                    Hook::Postrouting,
                    &mut out,
                    &mut opm,
                    &mut meta,
                    p.ts_ns,
                    &mut pc,
                ) {
                    Decision::Accept => {}
                    Decision::Drop(r) => return dropped_at(&path, "postrouting", &sf.eng, r),
                }
                // confirmed at the end of postrouting, before the neighbour lookup
                if let Decision::Drop(r) = sf.finish(&mut pc, p.ts_ns) {
                    return dropped_at(&path, "postrouting", &sf.eng, r);
                }
                // the route cache; a connection just put in a flowtable learns the route of
                // its other direction now, as `flow add` looks both up
                sf.cache_route(&pc, dev as u16);
                if let (Some(routes), Some((o, r, dir))) = (sf.offloaded(&pc), sf.conn(&pc)) {
                    let other = 1 - dir as usize;
                    if !routes[other] {
                        // the other direction's packets go to this direction's source
                        let back = if other == 0 { r.src } else { o.src };
                        if let Dest::Forward { dev: d2, .. } =
                            router.route(crate::topology::from_bits(back, v4))
                        {
                            let od = if other == 0 {
                                weir_conntrack::Dir::Original
                            } else {
                                weir_conntrack::Dir::Reply
                            };
                            sf.cache_route_dir(&pc, od, d2 as u16);
                        }
                    }
                }
                let Some(nmac) = router.neighbor(nexthop, dev) else {
                    return drop(format!(
                        "{}; no neighbour entry for {nexthop} on {oname}: the kernel would resolve it (ARP/ND), nothing leaves in the window",
                        path.join("; ")
                    ));
                };
                out[..6].copy_from_slice(&nmac);
                out[6..12].copy_from_slice(&router.ifaces[dev].mac);
                Prediction {
                    fate: Fate::Forwarded {
                        oif: dev,
                        frame: out,
                    },
                    why: format!(
                        "{}; forward accept; postrouting accept; to {}",
                        path.join("; "),
                        mac_text(&nmac)
                    ),
                }
            }
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

/// The forwarding TTL / hop-limit decrement, with the kernel's IPv4 checksum arithmetic.
fn decrement_ttl(frame: &mut [u8], l3: usize, v4: bool) {
    let at = l3 + if v4 { 8 } else { 7 };
    frame[at] -= 1;
    if v4 {
        let c = u16::from_be_bytes([frame[l3 + 10], frame[l3 + 11]]);
        frame[l3 + 10..l3 + 12].copy_from_slice(&kernel_ttl_checksum(c).to_be_bytes());
    }
}

/// What the model keeps of a packet after a hook (its metadata: the mark).
struct PktView {
    meta: Meta,
}

/// The router's own answer to a packet delivered to it (nothing listens in the lab's router):
/// a TCP reset, or an ICMP echo reply. It leaves through `output` and `postrouting`, so
/// connection tracking sees it: a reset ends a connection that never saw a reply, an echo
/// reply is the reply of the echo's. Only the connection table matters here; the answer itself
/// is not compared.
fn answer_locally(sf: &mut Stateful, router: &Router, frame: &[u8], pm: &PacketMeta, now: u64) {
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
        send_locally(sf, router, a, PacketCt::default(), now);
    }
}

/// The MACs of the model's own answers (never compared).
const MAC0: [u8; 6] = [2, 0, 0, 0, 0, 0];

/// A packet dropped by `reject with tcp reset` (`frame`: as it was at the rejecting hook;
/// `pc`: its connection context) is answered by a reset that leaves through `output` and
/// `postrouting` (Linux's `nf_send_reset`), carrying the packet's connection; a reset
/// answering a packet without one is tracked, and may close a connection of its own.
fn reset_if_rejected(
    sf: &mut Stateful,
    router: &Router,
    r: DropReason,
    frame: &[u8],
    pc: &PacketCt,
    now: u64,
) {
    let DropReason::Reject(g) = r else {
        return;
    };
    if !matches!(sf.eng.rs.reject_of(g), Some(ir::Reject::TcpReset)) {
        return;
    }
    let pm = PacketMeta::parse(frame, LinkType::Ethernet);
    if !pm.transport_checksum_ok(frame) {
        return;
    }
    if let Some(rst) = weir_engine::answer::tcp_reset(frame, &pm, MAC0, MAC0) {
        let apc = sf.answer_ct(pc);
        send_locally(sf, router, rst, apc, now);
    }
}

/// The router's own packet through `output` and `postrouting`, out of the interface its
/// destination routes to.
fn send_locally(
    sf: &mut Stateful,
    router: &Router,
    mut frame: Vec<u8>,
    mut pc: PacketCt,
    now: u64,
) {
    let pm = PacketMeta::parse(&frame, LinkType::Ethernet);
    let v4 = pm.l3 == L3::Ipv4;
    let mut meta = Meta::with_ifnames("", "");
    if let Dest::Forward { dev, .. } = router.route(crate::topology::from_bits(pm.daddr, v4)) {
        meta = Meta::with_ifnames("", &router.ifaces[dev].name);
        meta.oif = router.ifaces[dev].ifindex;
        pc.oif_addr = iface_addr(router, dev, v4);
    }
    sf.local_out(&mut frame, meta, pc, now);
}

/// The first address of an interface in a family (masquerade, redirect), as a field value.
fn iface_addr(router: &Router, i: usize, v4: bool) -> Option<u128> {
    router.ifaces[i]
        .addrs
        .iter()
        .find(|p| p.addr.is_ipv4() == v4)
        .map(|p| match p.addr {
            IpAddr::V4(a) => u32::from(a) as u128,
            IpAddr::V6(a) => u128::from(a),
        })
}

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
    fn kernel_checksum_arithmetic() {
        // agrees with a full recomputation except for the one's-complement zero it never makes
        for c in [0x0000u16, 0x1234, 0xfeff, 0xff00, 0xfffe, 0xffff, 0x00ff] {
            let k = kernel_ttl_checksum(c);
            let rfc = weir_wire::checksum::update16(c, 0x4006, 0x3f06);
            assert!(
                k == rfc || (k == 0 && rfc == 0xffff) || (k == 0xffff && rfc == 0),
                "{c:04x}: {k:04x} vs {rfc:04x}"
            );
            assert_ne!(k, 0xffff);
        }
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
