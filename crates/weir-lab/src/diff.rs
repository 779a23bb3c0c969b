//! The differential runner: the same ruleset and packets through the kernel router
//! ([`crate::kernel`]) and the weir model ([`crate::model`]), compared packet by packet.
//!
//! For each injected packet, [`kernel_view`] sorts what the kernel did: the frames that left
//! the router and carry the packet (same addresses, protocol and first transport bytes) are
//! its forwarded copies; copies read on the router's raw sockets mean it was delivered locally;
//! anything else the router sent (ICMP errors, TCP resets, echo replies) is the router's own
//! answer and is shown but not compared. [`compare`] then checks: forwarded or not, the output
//! interface, and the bytes of the frame (Ethernet addresses, IP addresses, TTL / hop limit,
//! IPv4 header checksum, ports, transport checksum, payload), local delivery. weir's compiled
//! classifier and its linear reference must also agree.
//!
//! A difference is *explained* when a documented model [`Variant`] (listed in
//! `KNOWN_DIFFERENCES.md` with its reason) predicts exactly what the kernel did; the others
//! count as differences. [`campaign`] runs generated rulesets and captures; each ruleset with an
//! unexplained difference is minimised (one packet, then rule by rule while the difference
//! stays) and written as a reproducer folder: `rules.nft`, `packets.pcap`, `topology.json` and
//! a `README.md` with the command that reruns it.

use crate::gen::{self, GenRuleset};
use crate::kernel::{Injection, Lab, LabOptions, Observed};
use crate::model::{prepare, EngineMode, Fate, Model, ModelState, Prediction, Prepared, Variant};
use crate::rng::Rng;
use crate::topology::{mac_text, Router, Topology};
use crate::Error;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Instant;
use weir_lang::ir;
use weir_wire::pcap::PcapWriter;
use weir_wire::{Frag, LinkType, PacketMeta, L3};

/// A documented, intentional (or acknowledged) difference between weir and the kernel.
#[derive(Clone, Copy, Debug)]
pub struct KnownDifference {
    /// The heading of its section in `KNOWN_DIFFERENCES.md`.
    pub id: &'static str,
    pub summary: &'static str,
    /// The model variant that reproduces the kernel.
    pub variant: Variant,
    /// Or a rewrite of the ruleset text into weir syntax that means what nft means (None when
    /// the text has nothing to rewrite).
    pub rewrite: Option<fn(&str) -> Option<String>>,
    /// Or a change of the compiled ruleset (false when it changes nothing).
    pub fix: Option<fn(&mut weir_engine::Compiled) -> bool>,
    /// The variant changes state that later packets see (a set an earlier packet filled, a
    /// connection it opened): a packet is then predicted again by a model that ran the
    /// packets before it with the variant too, not only from weir's state before it.
    pub replays: bool,
}

/// nft 1.0.6 merges adjacent payload matches into one compare and, doing so, turns the
/// implicit "any of these bits" test of `tcp flags ack` into an exact `tcp flags == ack`
/// (`nft --debug=netlink`: `payload load 3b @ transport header + 13 ... cmp eq 0x00f0fa10`).
/// Spell that out where `tcp flags X` and `tcp window N` are consecutive matches.
pub fn rewrite_merged_flags(text: &str) -> Option<String> {
    let mut changed = false;
    let lines: Vec<String> = text
        .lines()
        .map(|l| {
            let (indent, body) = l.split_at(l.len() - l.trim_start().len());
            let t: Vec<&str> = body.split(' ').collect();
            let mut out: Vec<String> = t.iter().map(|s| s.to_string()).collect();
            for i in 0..t.len() {
                let flags_at =
                    |j: usize| t.get(j) == Some(&"tcp") && t.get(j + 1) == Some(&"flags");
                let window_at =
                    |j: usize| t.get(j) == Some(&"tcp") && t.get(j + 1) == Some(&"window");
                if !flags_at(i) {
                    continue;
                }
                let Some(v) = t.get(i + 2) else { continue };
                let bare =
                    v.starts_with(|c: char| c.is_ascii_alphabetic()) && t.get(i + 3) != Some(&"/");
                if bare && (window_at(i + 3) || (i >= 3 && window_at(i - 3))) {
                    out[i + 1] = "flags ==".into();
                    changed = true;
                }
            }
            format!("{indent}{}", out.join(" "))
        })
        .collect();
    changed.then(|| lines.join("\n"))
}

/// iptables' `-m icmp --icmp-type` / `-m icmp6 --icmpv6-type` (xt_icmp, used through
/// nft_compat by iptables-nft too) *drops* the packet ("hotdrop") when its ICMP header is
/// shorter than 8 bytes, whatever the rule says; nft's `icmp type` (what weir's importer emits)
/// just does not match. Spell the drop out before each imported rule (lines tagged
/// `comment "iptables line N"`) with an ICMP type match: the rule's matches before it, then
/// "ICMP header shorter than 8 bytes" (IPv4 without options: `ip length < 28`; IPv6 without
/// extension headers: `ip6 length < 8`), then `drop`.
pub fn rewrite_xt_hotdrop(text: &str) -> Option<String> {
    let mut changed = false;
    let mut out = Vec::new();
    for l in text.lines() {
        if l.contains("comment \"iptables line ") {
            let (indent, body) = l.split_at(l.len() - l.trim_start().len());
            // the matches: the importer puts `counter` after them (`reject with icmp type`
            // is a statement)
            let matches = body.split(" counter").next().unwrap_or(body);
            let mut drop_at = None;
            for (sel, short) in [
                ("icmp type ", "ip hdrlength 5 ip length < 28"),
                ("icmpv6 type ", "ip6 nexthdr ipv6-icmp ip6 length < 8"),
            ] {
                let at = matches
                    .find(&format!(" {sel}"))
                    .map(|i| i + 1)
                    .or_else(|| matches.starts_with(sel).then_some(0));
                if let Some(i) = at {
                    drop_at = Some((body[..i].to_string(), short));
                    break;
                }
            }
            // `-m icmp --icmp-type any` imports as no type match at all, and xt_icmp still
            // reads the header: the drop follows the protocol match
            let any = "meta l4proto icmp ";
            if drop_at.is_none() {
                if let Some(i) = format!(" {matches} ").find(&format!(" {any}")) {
                    let end = (i + any.len()).min(body.len());
                    drop_at = Some((
                        format!("{} ", body[..end].trim_end()),
                        "ip hdrlength 5 ip length < 28",
                    ));
                }
            }
            if let Some((before, short)) = drop_at {
                out.push(format!("{indent}{before}{short} drop"));
                changed = true;
            }
        }
        out.push(l.to_string());
    }
    changed.then(|| out.join("\n"))
}

/// Every known difference. Each has a section in `KNOWN_DIFFERENCES.md` (a test checks it).
pub const KNOWN: &[KnownDifference] = &[
    KnownDifference {
        id: "fragment-transport",
        summary: "open: the kernel reads a non-first fragment's payload as its transport header, weir gives it none",
        variant: Variant { fragment_transport: true, ..Variant::WEIR },
        rewrite: None,
        fix: None,
        replays: true,
    },
    KnownDifference {
        id: "fragment-reassembly",
        summary: "intentional: with connection tracking the kernel holds fragments until their datagram is whole; weir forwards each one after its first",
        variant: Variant { holds_fragments: true, ..Variant::WEIR },
        rewrite: None,
        fix: None,
        replays: true,
    },
    KnownDifference {
        id: "malformed-transport",
        summary: "open: the kernel reads a broken transport header byte by byte, weir gives it no transport fields",
        variant: Variant { raw_transport: true, ..Variant::WEIR },
        rewrite: None,
        fix: None,
        replays: true,
    },
    KnownDifference {
        id: "nft-merges-flags",
        summary: "nft 1.0.6 bug: `tcp flags ack` next to `tcp window N` is merged into an exact compare of the flags",
        variant: Variant::WEIR,
        rewrite: Some(rewrite_merged_flags),
        fix: None,
        replays: false,
    },
    KnownDifference {
        id: "xt-icmp-hotdrop",
        summary: "iptables' icmp/icmp6 match drops a packet whose ICMP header is cut short; nft's `icmp type` (weir's import) does not match it",
        variant: Variant::WEIR,
        rewrite: Some(rewrite_xt_hotdrop),
        fix: None,
        replays: false,
    },
];

/// The text of `KNOWN_DIFFERENCES.md`.
pub const KNOWN_DIFFERENCES_MD: &str = include_str!("../KNOWN_DIFFERENCES.md");

// ---------------------------------------------------------------------------------------------
// What the kernel did
// ---------------------------------------------------------------------------------------------

/// What identifies a packet on the wire after forwarding: family, addresses, protocol and the
/// first 8 transport bytes (ports, or ICMP type/code/checksum/id).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Ident {
    v6: bool,
    saddr: u128,
    daddr: u128,
    proto: u8,
    head: Vec<u8>,
}

fn ident(frame: &[u8], link: LinkType) -> Option<Ident> {
    let pm = PacketMeta::parse(frame, link);
    if !pm.l3_ok() {
        return None;
    }
    let l4 = pm.l4_off as usize;
    let end = pm.l3_end().min(frame.len()).min(l4 + 8);
    Some(Ident {
        v6: pm.l3 == L3::Ipv6,
        saddr: pm.saddr,
        daddr: pm.daddr,
        proto: pm.l4proto,
        head: frame.get(l4..end).unwrap_or(&[]).to_vec(),
    })
}

/// What NAT does not change in a packet: family, protocol, IPv4 identification and the
/// transport bytes other than ports, ICMP identifier and checksums (TCP sequence numbers,
/// flags, options and data; UDP length and data; ICMP type, code, sequence and data). A copy
/// that left the router with other addresses or ports is the packet, translated.
fn nat_key(v6: bool, proto: u8, ip_id: Option<u16>, t: &[u8]) -> Vec<u8> {
    let mut k = vec![v6 as u8, proto];
    if let Some(id) = ip_id {
        k.extend_from_slice(&id.to_be_bytes());
    }
    let part = |a: usize, b: usize| t.get(a..b.min(t.len())).unwrap_or(&[]).to_vec();
    match proto {
        6 if t.len() >= 20 => {
            k.extend(part(4, 14));
            k.extend(part(20, t.len()));
        }
        17 if t.len() >= 8 => {
            k.extend(part(4, 6));
            k.extend(part(8, t.len()));
        }
        // ICMP errors: NAT rewrites the quoted packet too; type, code and size remain
        1 | 58 if t.len() >= 8 && is_icmp_error(v6, t[0]) => {
            k.extend(part(0, 2));
            k.extend_from_slice(&(t.len() as u32).to_be_bytes());
        }
        1 | 58 if t.len() >= 8 => {
            k.extend(part(0, 2));
            k.extend(part(6, t.len()));
        }
        // a truncated ICMP header: its checksum (an address rewrite updates ICMPv6's) and
        // what there is of the identifier may change; type, code and size remain
        1 | 58 => {
            k.extend(part(0, 2));
            k.extend_from_slice(&(t.len() as u32).to_be_bytes());
        }
        _ => k.extend_from_slice(t),
    }
    k
}

/// Whether one address of the packet (source or destination) is the same in both frames:
/// NAT rewrites one side of a packet (a header write may change a port of the other side:
/// `udp dport set 53` before `snat`).
fn one_side_kept(a: &[u8], b: &[u8]) -> bool {
    let (x, y) = (
        PacketMeta::parse(a, LinkType::Ethernet),
        PacketMeta::parse(b, LinkType::Ethernet),
    );
    x.saddr == y.saddr || x.daddr == y.daddr
}

fn is_icmp_error(v6: bool, ty: u8) -> bool {
    if v6 {
        ty < 128
    } else {
        matches!(ty, 3 | 4 | 5 | 11 | 12)
    }
}

fn frame_nat_key(frame: &[u8], link: LinkType) -> Option<Vec<u8>> {
    let pm = PacketMeta::parse(frame, link);
    if !pm.l3_ok() {
        return None;
    }
    let l3 = pm.l3_off as usize;
    let v6 = pm.l3 == L3::Ipv6;
    let ip_id = (!v6).then(|| u16::from_be_bytes([frame[l3 + 4], frame[l3 + 5]]));
    if pm.frag == Frag::Later {
        // no transport header: an address rewrite leaves all of the payload as it was
        let mut k = vec![v6 as u8, pm.l4proto, 0xff];
        k.extend_from_slice(&ip_id.unwrap_or(0).to_be_bytes());
        k.extend_from_slice(frame.get(pm.l4_off as usize..pm.l3_end().min(frame.len()))?);
        return Some(k);
    }
    let l4 = pm.l4_off as usize;
    let end = pm.l3_end().min(frame.len());
    Some(nat_key(v6, pm.l4proto, ip_id, frame.get(l4..end)?))
}

/// The kernel's handling of one packet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelView {
    /// Copies of the packet that left the router: (interface, frame).
    pub forwarded: Vec<(usize, Vec<u8>)>,
    /// The packet reached the router's own stack.
    pub local: bool,
    /// Other frames the router sent in the packet's window (its answers).
    pub other: Vec<(usize, Vec<u8>)>,
    pub skipped: bool,
}

/// Sort the frames of a packet's window.
pub fn kernel_view(p: &Prepared, ob: &Observed) -> KernelView {
    let mut v = KernelView {
        skipped: ob.skipped,
        ..KernelView::default()
    };
    let id = ident(&p.frame, LinkType::Ethernet);
    let nk = frame_nat_key(&p.frame, LinkType::Ethernet);
    for c in &ob.frames {
        let same = match &id {
            Some(i) => ident(&c.frame, LinkType::Ethernet).as_ref() == Some(i),
            None => false,
        };
        // translated: the same packet with one side (source or destination) rewritten
        let translated = nk.is_some()
            && frame_nat_key(&c.frame, LinkType::Ethernet) == nk
            && one_side_kept(&p.frame, &c.frame);
        if same || translated {
            v.forwarded.push((c.iface, c.frame.clone()))
        } else {
            v.other.push((c.iface, c.frame.clone()))
        }
    }
    if let Some(i) = &id {
        v.local = ob.local.iter().any(|l| {
            if l.v6 {
                (l.src == Some(IpAddr::V6(i.saddr.into()))
                    && l.proto == i.proto
                    && i.v6
                    && l.data.starts_with(&i.head))
                    || (i.v6 && nk.as_ref() == Some(&nat_key(true, l.proto, None, &l.data)))
            } else {
                ident(&l.data, LinkType::RawIp).as_ref() == Some(i)
                    || (nk.is_some() && frame_nat_key(&l.data, LinkType::RawIp) == nk)
            }
        });
    }
    v
}

// ---------------------------------------------------------------------------------------------
// Describing and comparing
// ---------------------------------------------------------------------------------------------

fn flag_letters(f: u8) -> String {
    let s: String = [
        (0x01, 'F'),
        (0x02, 'S'),
        (0x04, 'R'),
        (0x08, 'P'),
        (0x10, 'A'),
        (0x20, 'U'),
        (0x40, 'E'),
        (0x80, 'C'),
    ]
    .iter()
    .filter(|(b, _)| f & b != 0)
    .map(|(_, c)| *c)
    .collect();
    if s.is_empty() {
        "none".into()
    } else {
        s
    }
}

/// A one-line description of a frame: `IPv4 tcp 198.18.0.10:40000 > 198.19.7.7:80 [S] ttl 64`.
pub fn describe_frame(frame: &[u8]) -> String {
    let pm = PacketMeta::parse(frame, LinkType::Ethernet);
    let v4 = match pm.l3 {
        L3::Ipv4 => true,
        L3::Ipv6 => false,
        L3::Other(et) => {
            return format!(
                "EtherType 0x{et:04x}{}, {} bytes",
                if pm.vlan.is_some() { " (VLAN)" } else { "" },
                frame.len()
            )
        }
    };
    if let Some(m) = pm.malformed.filter(|m| m.is_l3()) {
        return format!(
            "{} malformed ({}), {} bytes",
            if v4 { "IPv4" } else { "IPv6" },
            m.reason(),
            frame.len()
        );
    }
    let a = |x: u128| crate::topology::from_bits(x, v4);
    let (s, d) = (a(pm.saddr), a(pm.daddr));
    let ttl = frame
        .get(pm.l3_off as usize + if v4 { 8 } else { 7 })
        .copied()
        .unwrap_or(0);
    let proto = match pm.l4proto {
        6 => "tcp".to_string(),
        17 => "udp".to_string(),
        1 => "icmp".to_string(),
        58 => "icmpv6".to_string(),
        p => format!("proto {p}"),
    };
    let ep = |x: IpAddr, p: u16| {
        if v4 {
            format!("{x}:{p}")
        } else {
            format!("[{x}]:{p}")
        }
    };
    let mut out = if pm.has_ports {
        format!("{proto} {} > {}", ep(s, pm.sport), ep(d, pm.dport))
    } else {
        format!("{proto} {s} > {d}")
    };
    if pm.l4proto == 6 && pm.has_l4 {
        out.push_str(&format!(" [{}]", flag_letters(pm.tcp_flags)));
    }
    if matches!(pm.l4proto, 1 | 58) && pm.has_l4 {
        let l4 = pm.l4_off as usize;
        out.push_str(&format!(
            " type {} code {}",
            frame.get(l4).copied().unwrap_or(0),
            frame.get(l4 + 1).copied().unwrap_or(0)
        ));
    }
    if pm.frag != weir_wire::Frag::None {
        out.push_str(if pm.frag == weir_wire::Frag::First {
            " first fragment"
        } else {
            " later fragment"
        });
    }
    format!(
        "{} {out} ttl {ttl} len {}",
        if v4 { "IPv4" } else { "IPv6" },
        pm.l3_len
    )
}

fn u16_at(f: &[u8], i: usize) -> Option<u16> {
    f.get(i..i + 2).map(|b| u16::from_be_bytes([b[0], b[1]]))
}

/// The header fields in which two frames of the same packet differ (empty: identical bytes).
pub fn field_diffs(weir: &[u8], kernel: &[u8]) -> Vec<String> {
    if weir == kernel {
        return Vec::new();
    }
    let mut d = Vec::new();
    if weir.len() < 14 || kernel.len() < 14 {
        return vec![format!(
            "frame lengths: weir {}, kernel {}",
            weir.len(),
            kernel.len()
        )];
    }
    if weir[..6] != kernel[..6] {
        d.push(format!(
            "ether daddr: weir {}, kernel {}",
            mac_text(&weir[..6].try_into().unwrap()),
            mac_text(&kernel[..6].try_into().unwrap())
        ));
    }
    if weir[6..12] != kernel[6..12] {
        d.push(format!(
            "ether saddr: weir {}, kernel {}",
            mac_text(&weir[6..12].try_into().unwrap()),
            mac_text(&kernel[6..12].try_into().unwrap())
        ));
    }
    let a = PacketMeta::parse(weir, LinkType::Ethernet);
    let b = PacketMeta::parse(kernel, LinkType::Ethernet);
    if a.l3 != b.l3 {
        d.push(format!("network layer: weir {:?}, kernel {:?}", a.l3, b.l3));
        return d;
    }
    if a.l3_ok() && b.l3_ok() {
        let v4 = a.l3 == L3::Ipv4;
        let ad = |x: u128| crate::topology::from_bits(x, v4);
        if a.saddr != b.saddr {
            d.push(format!(
                "source address: weir {}, kernel {}",
                ad(a.saddr),
                ad(b.saddr)
            ));
        }
        if a.daddr != b.daddr {
            d.push(format!(
                "destination address: weir {}, kernel {}",
                ad(a.daddr),
                ad(b.daddr)
            ));
        }
        let (la, lb) = (a.l3_off as usize, b.l3_off as usize);
        let ttl = if v4 { 8 } else { 7 };
        if weir.get(la + ttl) != kernel.get(lb + ttl) {
            d.push(format!(
                "{}: weir {:?}, kernel {:?}",
                if v4 { "ttl" } else { "hop limit" },
                weir.get(la + ttl),
                kernel.get(lb + ttl)
            ));
        }
        if v4 && u16_at(weir, la + 10) != u16_at(kernel, lb + 10) {
            d.push(format!(
                "ipv4 header checksum: weir {:04x?}, kernel {:04x?}",
                u16_at(weir, la + 10),
                u16_at(kernel, lb + 10)
            ));
        }
        if a.l3_len != b.l3_len {
            d.push(format!("ip length: weir {}, kernel {}", a.l3_len, b.l3_len));
        }
        if a.l4proto != b.l4proto {
            d.push(format!(
                "protocol: weir {}, kernel {}",
                a.l4proto, b.l4proto
            ));
        }
        if a.has_ports && b.has_ports && (a.sport, a.dport) != (b.sport, b.dport) {
            d.push(format!(
                "ports: weir {} > {}, kernel {} > {}",
                a.sport, a.dport, b.sport, b.dport
            ));
        }
        let csum = match a.l4proto {
            6 => Some(16),
            17 => Some(6),
            1 | 58 => Some(2),
            _ => None,
        };
        if let Some(o) = csum.filter(|_| a.has_l4 && b.has_l4) {
            let (x, y) = (
                u16_at(weir, a.l4_off as usize + o),
                u16_at(kernel, b.l4_off as usize + o),
            );
            if x != y {
                d.push(format!(
                    "transport checksum: weir {x:04x?}, kernel {y:04x?}"
                ));
            }
        }
        let pa = a.payload(weir).map(|(o, n)| &weir[o..o + n]);
        let pb = b.payload(kernel).map(|(o, n)| &kernel[o..o + n]);
        if pa != pb {
            let (x, y) = (pa.unwrap_or(&[]), pb.unwrap_or(&[]));
            let at = x
                .iter()
                .zip(y)
                .position(|(p, q)| p != q)
                .unwrap_or(x.len().min(y.len()));
            let show = |v: &[u8]| -> String {
                v.iter()
                    .skip(at)
                    .take(8)
                    .map(|b| format!("{b:02x}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            d.push(format!(
                "transport payload differs at byte {at} of {}: weir {}, kernel {}",
                x.len(),
                show(x),
                show(y)
            ));
        }
    }
    if d.is_empty() {
        let at = weir
            .iter()
            .zip(kernel)
            .position(|(x, y)| x != y)
            .unwrap_or(weir.len().min(kernel.len()));
        d.push(format!(
            "bytes differ from offset {at} (weir {} bytes, kernel {})",
            weir.len(),
            kernel.len()
        ));
    }
    d
}

fn ifname(router: &Router, i: usize) -> &str {
    router.ifaces.get(i).map(|f| f.name.as_str()).unwrap_or("?")
}

/// weir's prediction in words.
pub fn describe_prediction(router: &Router, p: &Prediction) -> String {
    match &p.fate {
        Fate::Forwarded { oif, .. } => format!(
            "forwarded out of {}{}",
            ifname(router, *oif),
            ct_note(&p.why)
        ),
        Fate::Local => format!("delivered locally{}", ct_note(&p.why)),
        Fate::Dropped => format!("not forwarded: {}", p.why),
    }
}

/// " (ct state X)" when the model's path says what connection tracking decided.
fn ct_note(why: &str) -> String {
    why.split("; ")
        .find(|s| s.starts_with("ct state "))
        .map(|s| format!(" ({s})"))
        .unwrap_or_default()
}

/// The kernel's handling in words.
pub fn describe_kernel(router: &Router, k: &KernelView) -> String {
    let mut s = match k.forwarded.len() {
        0 if k.local => "delivered locally".to_string(),
        0 => "not forwarded".to_string(),
        1 => format!("forwarded out of {}", ifname(router, k.forwarded[0].0)),
        n => format!(
            "forwarded {n} copies ({})",
            k.forwarded
                .iter()
                .map(|f| ifname(router, f.0))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    if !k.forwarded.is_empty() && k.local {
        s.push_str(" and delivered locally");
    }
    if !k.other.is_empty() {
        let o: Vec<String> = k
            .other
            .iter()
            .take(2)
            .map(|(i, f)| format!("{} on {}", describe_frame(f), ifname(router, *i)))
            .collect();
        s.push_str(&format!("; the router answered: {}", o.join("; ")));
    }
    s
}

/// Differences between weir's prediction and the kernel (empty: the same).
pub fn compare(router: &Router, p: &Prediction, k: &KernelView) -> Vec<String> {
    let mut d = Vec::new();
    match &p.fate {
        Fate::Forwarded { oif, frame } => match k.forwarded.as_slice() {
            [] => d.push(format!(
                "weir forwards it out of {}, the kernel does not",
                ifname(router, *oif)
            )),
            [(kif, kframe)] => {
                if kif != oif {
                    d.push(format!(
                        "output interface: weir {}, kernel {}",
                        ifname(router, *oif),
                        ifname(router, *kif)
                    ));
                }
                d.extend(field_diffs(frame, kframe));
            }
            many => d.push(format!("the kernel sent {} copies, weir one", many.len())),
        },
        Fate::Local => {
            if !k.local {
                d.push("weir delivers it locally, the kernel does not".into());
            }
            if !k.forwarded.is_empty() {
                d.push(format!(
                    "the kernel forwards it out of {}",
                    ifname(router, k.forwarded[0].0)
                ));
            }
        }
        Fate::Dropped => {
            if let Some((i, _)) = k.forwarded.first() {
                d.push(format!(
                    "the kernel forwards it out of {}, weir does not ({})",
                    ifname(router, *i),
                    p.why
                ));
            }
            if k.local {
                d.push(format!(
                    "the kernel delivers it locally, weir does not ({})",
                    p.why
                ));
            }
        }
    }
    if matches!(p.fate, Fate::Forwarded { .. }) && k.local {
        d.push("the kernel also delivers it locally".into());
    }
    d
}

// ---------------------------------------------------------------------------------------------
// Reports
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Status {
    Same,
    Different,
    /// Explained by the known difference(s) with this id (several: joined by `+`).
    Explained(String),
    /// Not injected (why).
    Skipped(String),
}

impl Status {
    pub fn name(&self) -> &'static str {
        match self {
            Status::Same => "same",
            Status::Different => "different",
            Status::Explained(_) => "explained",
            Status::Skipped(_) => "skipped",
        }
    }
}

#[derive(Clone, Debug)]
pub struct PacketReport {
    /// 1-based, as in Wireshark.
    pub number: usize,
    pub iif: String,
    pub packet: String,
    pub weir: String,
    pub kernel: String,
    pub status: Status,
    pub details: Vec<String>,
    /// What the kernel did: `forwarded`, `local` or `dropped` (`-` when skipped).
    pub kernel_fate: &'static str,
}

impl PacketReport {
    pub fn to_json(&self) -> Value {
        let mut o = json!({"number": self.number, "iif": self.iif, "packet": self.packet, "status": self.status.name(),
                           "weir": self.weir, "kernel": self.kernel});
        if !self.details.is_empty() {
            o["differences"] = json!(self.details);
        }
        match &self.status {
            Status::Explained(id) => o["explained_by"] = json!(id),
            Status::Skipped(why) => o["skipped"] = json!(why),
            _ => {}
        }
        o
    }

    /// Several lines of text.
    pub fn text(&self) -> String {
        let mut s = format!(
            "#{} {} (in {})\n    weir:   {}\n    kernel: {}\n",
            self.number, self.packet, self.iif, self.weir, self.kernel
        );
        for d in &self.details {
            s.push_str(&format!("    - {d}\n"));
        }
        if let Status::Explained(id) = &self.status {
            s.push_str(&format!("    explained: {id} (KNOWN_DIFFERENCES.md)\n"));
        }
        s
    }
}

/// The comparison of one ruleset and capture.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub packets: Vec<PacketReport>,
    pub late: usize,
    pub barrier_misses: usize,
    pub kernel_seconds: f64,
}

impl Report {
    fn count(&self, f: impl Fn(&Status) -> bool) -> usize {
        self.packets.iter().filter(|p| f(&p.status)).count()
    }
    pub fn injected(&self) -> usize {
        self.count(|s| !matches!(s, Status::Skipped(_)))
    }
    pub fn differences(&self) -> usize {
        self.count(|s| *s == Status::Different)
    }
    pub fn explained(&self) -> usize {
        self.count(|s| matches!(s, Status::Explained(_)))
    }
    pub fn skipped(&self) -> usize {
        self.count(|s| matches!(s, Status::Skipped(_)))
    }
    pub fn same(&self) -> usize {
        self.count(|s| *s == Status::Same)
    }
}

/// Compare a whole capture (pure: no root, testable with synthetic observations). `text` is
/// the ruleset's source, for the known differences explained by a rewrite.
pub fn compare_all(
    rs: &ir::Ruleset,
    text: Option<&str>,
    router: &Router,
    prepared: &[Prepared],
    inj: &Injection,
) -> Report {
    let mut model = Model::new(rs, router.clone());
    // the rewritten rulesets' models, built when a difference needs them
    let mut rewritten: Vec<Option<Option<(Model, usize)>>> =
        (0..KNOWN.len()).map(|_| None).collect();
    let mut rep = Report {
        late: inj.late.len(),
        barrier_misses: inj.barrier_misses,
        kernel_seconds: inj.seconds,
        ..Report::default()
    };
    for (p, ob) in prepared.iter().zip(&inj.observed) {
        let iif = ifname(router, p.iif).to_string();
        if let Some(why) = &p.skip {
            rep.packets.push(PacketReport {
                number: p.index + 1,
                iif,
                packet: "-".into(),
                weir: "-".into(),
                kernel: "-".into(),
                status: Status::Skipped(why.clone()),
                details: Vec::new(),
                kernel_fate: "-",
            });
            continue;
        }
        let kv = kernel_view(p, ob);
        // a packet is predicted again (variants) from the state before it: connections, and
        // with or without connection tracking the sets, limits and quotas
        let before = model.save();
        let pred = model.predict(p, Variant::WEIR, EngineMode::Compiled);
        let lin = model.predict(p, Variant::WEIR, EngineMode::Linear);
        let mut details = compare(router, &pred, &kv);
        if lin.fate != pred.fate {
            details.push(format!(
                "weir's compiled classifier and linear reference disagree: linear says {}",
                describe_prediction(router, &lin)
            ));
        }
        let mut status = if details.is_empty() {
            Status::Same
        } else {
            Status::Different
        };
        if status == Status::Different
            && pred.why.ends_with(crate::model::NAT_PORT_NOTE)
            && details.iter().all(|d| {
                d.starts_with("ports: ")
                    || d.starts_with("transport checksum: ")
                    // an ICMP error quotes the connection's packet, port included
                    || (d.starts_with("transport payload differs") && p.frame_is_icmp_error())
            })
        {
            status = Status::Explained("nat-random-port".into());
        }
        if status == Status::Different && lin.fate == pred.fate {
            let after = model.save();
            let cx = ExplainCx {
                before: &before,
                history: &prepared[..p.index.min(prepared.len())],
            };
            status = explain(rs, &mut model, &mut rewritten, text, router, p, &kv, &cx)
                .map(Status::Explained)
                .unwrap_or(Status::Different);
            model.restore(&after);
        }
        rep.packets.push(PacketReport {
            number: p.index + 1,
            iif,
            packet: describe_frame(&p.frame),
            weir: describe_prediction(router, &pred),
            kernel: describe_kernel(router, &kv),
            status,
            details,
            kernel_fate: if !kv.forwarded.is_empty() {
                "forwarded"
            } else if kv.local {
                "local"
            } else {
                "dropped"
            },
        });
    }
    rep
}

/// The known difference(s) whose model variant predicts what the kernel did. Variants run on
/// weir's linear reference: the compiled classifier folds some of weir's own rules into its
/// index (`th dport` implies TCP/UDP/SCTP/DCCP/UDP-Lite), which the variants change.
/// What re-predicting a packet needs: the model's state before it, and the packets before it
/// (a rewritten or replaying model runs them first).
struct ExplainCx<'a> {
    before: &'a ModelState,
    history: &'a [Prepared],
}

#[allow(clippy::too_many_arguments)]
fn explain(
    rs: &ir::Ruleset,
    model: &mut Model,
    rewritten: &mut [Option<Option<(Model, usize)>>],
    text: Option<&str>,
    router: &Router,
    p: &Prepared,
    kv: &KernelView,
    cx: &ExplainCx,
) -> Option<String> {
    // every combination of the packet-level variants, smallest first, on the ruleset as it is
    // and on each rewrite
    let n = KNOWN.len();
    let mut masks: Vec<u32> = (1..(1u32 << n)).collect();
    masks.sort_by_key(|m| (m.count_ones(), *m));
    for m in masks {
        let ks: Vec<&KnownDifference> = KNOWN
            .iter()
            .enumerate()
            .filter(|(i, _)| m & (1 << i) != 0)
            .map(|(_, k)| k)
            .collect();
        let rw: Vec<usize> = KNOWN
            .iter()
            .enumerate()
            .filter(|(i, k)| {
                m & (1 << i) != 0 && (k.rewrite.is_some() || k.fix.is_some() || k.replays)
            })
            .map(|(i, _)| i)
            .collect();
        if rw.len() > 1 {
            continue;
        }
        let mut v = Variant::WEIR;
        for k in &ks {
            v = v.union(k.variant);
        }
        let ids: Vec<&str> = ks.iter().map(|k| k.id).collect();
        let pred = match rw.first() {
            None => {
                model.restore(cx.before);
                model.predict(p, v, EngineMode::Linear)
            }
            Some(&i) => {
                let slot = &mut rewritten[i];
                if slot.is_none() {
                    *slot = Some(match (KNOWN[i].rewrite, KNOWN[i].fix) {
                        (Some(rw), _) => text
                            .and_then(rw)
                            .and_then(|t| weir_lang::load_str("rewritten.nft", &t).ok())
                            .map(|(rs, _)| (Model::new(&rs, router.clone()), 0)),
                        (None, Some(fix)) => {
                            Model::with_fix(rs, router.clone(), fix).map(|m| (m, 0))
                        }
                        (None, None) if KNOWN[i].replays => {
                            Some((Model::new(rs, router.clone()), 0))
                        }
                        (None, None) => None,
                    });
                }
                match slot.as_mut().and_then(|m| m.as_mut()) {
                    Some((alt, seen)) => {
                        // the packets before this one (with the variant when it changes
                        // state), then this one from that state: connections, and without
                        // connection tracking still sets, limits and quotas
                        let hv = if KNOWN[i].replays {
                            KNOWN[i].variant
                        } else {
                            Variant::WEIR
                        };
                        for h in cx.history.get(*seen..).unwrap_or(&[]) {
                            if h.skip.is_none() {
                                alt.predict(h, hv, EngineMode::Linear);
                            }
                        }
                        *seen = cx.history.len();
                        let st = alt.save();
                        let r = alt.predict(p, v, EngineMode::Linear);
                        alt.restore(&st);
                        r
                    }
                    None => continue,
                }
            }
        };
        if compare(router, &pred, kv).is_empty() {
            return Some(ids.join("+"));
        }
    }
    None
}

/// What a one-file diff's reproducer holds: its folder (`STEM-SECONDS` under `dir`), the
/// packets that differ, and the notes (the original capture, then each difference).
pub fn repro_parts<'p>(
    dir: &Path,
    stem: &str,
    report: &Report,
    prepared: &'p [Prepared],
    pcap: &Path,
) -> (PathBuf, Vec<&'p Prepared>, Vec<String>) {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let different = || {
        report
            .packets
            .iter()
            .filter(|r| r.status == Status::Different)
    };
    let diff = different().map(|r| &prepared[r.number - 1]).collect();
    let mut text: Vec<String> = vec![format!(
        "Packets of the original capture {} (renumbered here from 1):\n",
        pcap.display()
    )];
    text.extend(different().map(|r| r.text()));
    (dir.join(format!("{stem}-{secs}")), diff, text)
}

/// Load and run one ruleset and capture in the lab and compare.
pub fn run_case(
    lab: &mut Lab,
    rs: &ir::Ruleset,
    text: Option<&str>,
    rules_file: &Path,
    prepared: &[Prepared],
) -> Result<Report, Error> {
    lab.load(rules_file).map_err(Error::KernelRefused)?;
    let inj = lab.inject(prepared)?;
    Ok(compare_all(rs, text, lab.router(), prepared, &inj))
}

/// Write a reproducer folder: the ruleset, the packets (as injected), the topology with their
/// input interfaces, and a README with the differences and the command that reruns it.
pub fn write_reproducer(
    dir: &Path,
    rules_text: &str,
    topo: &Topology,
    router: &Router,
    pkts: &[&Prepared],
    notes: &[String],
) -> Result<PathBuf, Error> {
    let io = |e: std::io::Error| Error::System(format!("{}: {e}", dir.display()));
    std::fs::create_dir_all(dir).map_err(io)?;
    std::fs::write(dir.join("rules.nft"), rules_text).map_err(io)?;
    let f = std::fs::File::create(dir.join("packets.pcap")).map_err(io)?;
    let mut w = PcapWriter::new(std::io::BufWriter::new(f), LinkType::Ethernet)
        .map_err(|e| Error::System(format!("packets.pcap: {e}")))?;
    for p in pkts {
        w.write(p.ts_ns, &p.frame)
            .map_err(|e| Error::System(format!("packets.pcap: {e}")))?;
    }
    w.into_inner()
        .map_err(|e| Error::System(format!("packets.pcap: {e}")))?;
    let mut t = topo.clone();
    t.packets = pkts
        .iter()
        .map(|p| crate::topology::PacketIn {
            iif: ifname(router, p.iif).to_string(),
        })
        .collect();
    std::fs::write(dir.join("topology.json"), t.to_json() + "\n").map_err(io)?;
    let mut readme = String::from("# weir lab reproducer\n\nThe kernel (nftables in a network namespace) and weir disagree on this ruleset and capture.\n\n");
    for n in notes {
        readme.push_str(n);
        readme.push('\n');
    }
    readme.push_str("\nRerun (as root, in this folder):\n\n    weir lab diff --rules rules.nft --pcap packets.pcap --topology topology.json\n");
    std::fs::write(dir.join("README.md"), readme).map_err(io)?;
    Ok(dir.to_path_buf())
}

// ---------------------------------------------------------------------------------------------
// One given ruleset and capture
// ---------------------------------------------------------------------------------------------

/// The result of `weir lab diff --rules --pcap --topology`.
pub struct FileDiff {
    pub report: Report,
    pub reproducer: Option<PathBuf>,
    pub notes: Vec<String>,
}

fn render_diags(sm: &weir_lang::SourceMap, d: &[weir_lang::Diagnostic]) -> String {
    weir_lang::diag::render_all(d, sm)
}

/// The topology, its router, the capture and notes (a capture read only in part) of
/// `--pcap --topology`, checked against each other.
pub(crate) fn read_case(
    pcap: &Path,
    topology: &Path,
) -> Result<(Topology, Router, weir_wire::pcap::Capture, Vec<String>), Error> {
    let ttext = std::fs::read_to_string(topology)
        .map_err(|e| Error::Input(format!("{}: {e}", topology.display())))?;
    let topo =
        Topology::from_json(&topology.display().to_string(), &ttext).map_err(Error::Input)?;
    let router = Router::from_topology(&topo)
        .map_err(|e| Error::Input(format!("{}: {e}", topology.display())))?;
    let cap = weir_wire::pcap::read_file(pcap)
        .map_err(|e| Error::Input(format!("{}: {e}", pcap.display())))?;
    let mut notes = Vec::new();
    if let Some(e) = &cap.trailing_error {
        notes.push(format!(
            "{}: read {} packets, then: {e}",
            pcap.display(),
            cap.packets.len()
        ));
    }
    if router.packets.len() != cap.packets.len() {
        return Err(Error::Input(format!(
            "{} lists {} packets (\"packets\": one {{\"iif\"}} per packet), the capture {} has {}",
            topology.display(),
            router.packets.len(),
            pcap.display(),
            cap.packets.len()
        )));
    }
    Ok((topo, router, cap, notes))
}

/// Run one ruleset and capture through both sides. `repro_dir`: where to write a reproducer
/// when there are unexplained differences.
pub fn diff_files(
    rules: &Path,
    pcap: &Path,
    topology: &Path,
    opts: LabOptions,
    repro_dir: Option<&Path>,
) -> Result<FileDiff, Error> {
    let (topo, router, cap, notes) = read_case(pcap, topology)?;
    let rules_text = std::fs::read_to_string(rules)
        .map_err(|e| Error::Input(format!("{}: {e}", rules.display())))?;
    let rs = match weir_lang::load_file(rules) {
        Ok((rs, _)) => rs,
        Err((sm, d)) => {
            return Err(Error::Input(format!(
                "weir refuses {}:\n{}",
                rules.display(),
                render_diags(&sm, &d)
            )))
        }
    };
    let prepared = prepare(&router, &cap.packets, &router.packets);
    let mut lab = Lab::new(&router, opts)?;
    let report = run_case(&mut lab, &rs, Some(&rules_text), rules, &prepared)?;
    drop(lab);
    let mut reproducer = None;
    if report.differences() > 0 {
        if let Some(dir) = repro_dir {
            let stem = rules
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "rules".into());
            let (d, diff, text) = repro_parts(dir, &stem, &report, &prepared, pcap);
            reproducer = Some(write_reproducer(
                &d,
                &rules_text,
                &topo,
                &router,
                &diff,
                &text,
            )?);
        }
    }
    Ok(FileDiff {
        report,
        reproducer,
        notes,
    })
}

// ---------------------------------------------------------------------------------------------
// The campaign
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
pub struct CampaignOptions {
    pub rulesets: usize,
    pub seed: u64,
    /// Packets per ruleset, at most.
    pub packets: usize,
    pub lab: LabOptions,
    /// Where reproducers go (none: not written).
    pub repro_dir: Option<PathBuf>,
    /// Minimise reproducers rule by rule.
    pub minimize: bool,
    /// Progress lines on stderr.
    pub progress: bool,
}

impl Default for CampaignOptions {
    fn default() -> Self {
        CampaignOptions {
            rulesets: 50,
            seed: 1,
            packets: 40,
            lab: LabOptions::default(),
            repro_dir: None,
            minimize: true,
            progress: false,
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct CampaignReport {
    pub seed: u64,
    pub rulesets: usize,
    /// Packets injected (through both sides).
    pub packets: usize,
    /// Unexplained differences: packets, plus rulesets one side refused and the other accepted.
    pub differences: usize,
    pub explained: usize,
    pub explained_by: BTreeMap<String, usize>,
    /// What the kernel did with the packets: forwarded, delivered locally, dropped.
    pub kernel_fates: BTreeMap<&'static str, usize>,
    /// Rulesets nft or weir refused while the other accepted (counted in `differences`).
    pub load_mismatches: usize,
    pub rulesets_with_differences: Vec<usize>,
    pub late_frames: usize,
    pub barrier_misses: usize,
    pub seconds: f64,
    pub reproducers: Vec<PathBuf>,
    /// The first differences, in words.
    pub examples: Vec<String>,
    /// iptables campaign: the iptables version and backend (`iptables v1.8.9 (nf_tables)`).
    pub iptables: Option<String>,
    /// iptables campaign: generated rulesets both iptables-restore and weir's importer refused
    /// (a generator problem, not a difference).
    pub refused_both: usize,
}

impl CampaignReport {
    /// Add one ruleset's comparison (ruleset `i`) to the totals; its first difference, if any
    /// (also kept as an example, named with `label`).
    pub fn absorb<'r>(
        &mut self,
        i: usize,
        rep: &'r Report,
        label: &str,
        seed: u64,
    ) -> Option<&'r PacketReport> {
        self.packets += rep.injected();
        self.differences += rep.differences();
        self.explained += rep.explained();
        for p in &rep.packets {
            if let Status::Explained(id) = &p.status {
                *self.explained_by.entry(id.clone()).or_default() += 1;
            }
            if p.kernel_fate != "-" {
                *self.kernel_fates.entry(p.kernel_fate).or_default() += 1;
            }
        }
        self.late_frames += rep.late;
        self.barrier_misses += rep.barrier_misses;
        if rep.differences() == 0 {
            return None;
        }
        self.rulesets_with_differences.push(i);
        let first = rep.packets.iter().find(|p| p.status == Status::Different)?;
        if self.examples.len() < 10 {
            self.examples.push(format!(
                "{label}ruleset {i} (seed {seed}):\n{}",
                first.text()
            ));
        }
        Some(first)
    }

    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "rulesets": self.rulesets, "packets": self.packets, "differences": self.differences, "explained": self.explained,
            "seed": self.seed, "explained_by": self.explained_by, "kernel_fates": self.kernel_fates, "load_mismatches": self.load_mismatches,
            "rulesets_with_differences": self.rulesets_with_differences, "late_frames": self.late_frames,
            "barrier_misses": self.barrier_misses, "seconds": (self.seconds * 100.0).round() / 100.0,
            "reproducers": self.reproducers.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
        });
        if let Some(i) = &self.iptables {
            v["iptables"] = json!(i);
            v["refused_both"] = json!(self.refused_both);
        }
        v
    }
}

/// Generated ruleset `index` of a campaign and its capture (what `weir lab gen` writes).
pub fn generated(
    seed: u64,
    index: usize,
    packets: usize,
) -> (gen::World, GenRuleset, gen::GenCapture) {
    let w = gen::world();
    let mut rng = Rng::for_item(seed, index as u64);
    let g = gen::ruleset(&mut rng, &w);
    let cap = gen::capture(&mut rng, &w, packets);
    (w, g, cap)
}

/// The differential campaign: `rulesets` generated rulesets, each with its own capture.
pub fn campaign(opts: &CampaignOptions) -> Result<CampaignReport, Error> {
    let t0 = Instant::now();
    let w = gen::world();
    let mut lab = Lab::new(&w.router, opts.lab)?;
    let mut out = CampaignReport {
        seed: opts.seed,
        ..CampaignReport::default()
    };
    let rules_path = lab.scratch().join("rules.nft");
    for i in 0..opts.rulesets {
        if crate::sys::interrupted() {
            return Err(Error::Interrupted);
        }
        let (_, g, cap) = generated(opts.seed, i, opts.packets);
        let text = g.render();
        out.rulesets += 1;
        let repro_dir = opts
            .repro_dir
            .as_ref()
            .map(|d| d.join(format!("seed{}-ruleset{i}", opts.seed)));
        let rs = match weir_lang::load_str(&format!("ruleset-{i}.nft"), &text) {
            Ok((rs, _)) => rs,
            Err((sm, d)) => {
                let msg = format!(
                    "ruleset {i}: weir refuses a generated ruleset:\n{}",
                    render_diags(&sm, &d)
                );
                load_mismatch(&mut out, i, msg, &text, &w, repro_dir.as_deref())?;
                continue;
            }
        };
        std::fs::write(&rules_path, &text)
            .map_err(|e| Error::System(format!("{}: {e}", rules_path.display())))?;
        if let Err(e) = lab.load(&rules_path) {
            let msg = format!("ruleset {i}: nft refuses what weir accepts:\n{e}");
            load_mismatch(&mut out, i, msg, &text, &w, repro_dir.as_deref())?;
            continue;
        }
        let prepared = prepare(&w.router, &cap.packets, &cap.iifs);
        let inj = lab.inject(&prepared)?;
        let rep = compare_all(&rs, Some(&text), &w.router, &prepared, &inj);
        if let Some(first) = out.absorb(i, &rep, "", opts.seed) {
            if let Some(dir) = &repro_dir {
                let prefix = &prepared[..first.number];
                let (g2, single, used) = if opts.minimize {
                    minimize(&mut lab, &g, prefix)
                } else {
                    (g.clone(), None, prefix.to_vec())
                };
                let rep1: &PacketReport = match &single {
                    Some(r) => r.packets.last().unwrap_or(first),
                    None => first,
                };
                let kept = if used.len() == 1 {
                    "one packet".to_string()
                } else {
                    format!(
                        "the {} packets up to the one that differs (connection state)",
                        used.len()
                    )
                };
                let notes = vec![
                    format!(
                        "Campaign seed {}, ruleset {i} (`weir lab gen --seed {} --index {i}` regenerates the original); {} of its {} packets differed. Minimised to {kept} and {} of {} rules.\n",
                        opts.seed,
                        opts.seed,
                        rep.differences(),
                        rep.injected(),
                        g2.rule_count(),
                        g.rule_count()
                    ),
                    rep1.text(),
                ];
                let pkts: Vec<&Prepared> = used.iter().collect();
                out.reproducers.push(write_reproducer(
                    dir,
                    &g2.render(),
                    &w.topo,
                    &w.router,
                    &pkts,
                    &notes,
                )?);
            }
        }
        if opts.progress && (i + 1) % 10 == 0 {
            eprintln!(
                "weir lab: {} rulesets, {} packets, {} differences, {} explained ({:.1} s)",
                out.rulesets,
                out.packets,
                out.differences,
                out.explained,
                t0.elapsed().as_secs_f64()
            );
        }
    }
    lab.flush().map_err(Error::System)?;
    out.seconds = t0.elapsed().as_secs_f64();
    Ok(out)
}

fn load_mismatch(
    out: &mut CampaignReport,
    i: usize,
    msg: String,
    text: &str,
    w: &gen::World,
    dir: Option<&Path>,
) -> Result<(), Error> {
    out.differences += 1;
    out.load_mismatches += 1;
    out.rulesets_with_differences.push(i);
    if out.examples.len() < 10 {
        out.examples.push(msg.clone());
    }
    if let Some(d) = dir {
        out.reproducers
            .push(write_reproducer(d, text, &w.topo, &w.router, &[], &[msg])?);
    }
    Ok(())
}

/// Shrink a ruleset while the last packet of `prefix` still shows an unexplained difference:
/// alone if it does so alone, else after the packets before it (connection state). Returns the
/// smallest ruleset found, its report (None: it does not reproduce, the original is returned)
/// and the packets used (renumbered from 0).
fn minimize(
    lab: &mut Lab,
    g: &GenRuleset,
    prefix: &[Prepared],
) -> (GenRuleset, Option<Report>, Vec<Prepared>) {
    let path = lab.scratch().join("min.nft");
    let renumber = |v: &[Prepared]| -> Vec<Prepared> {
        v.iter()
            .enumerate()
            .map(|(i, p)| Prepared {
                index: i,
                ..p.clone()
            })
            .collect()
    };
    let last = prefix.len().saturating_sub(1);
    let check = |lab: &mut Lab, g: &GenRuleset, pkts: &[Prepared]| -> Option<Report> {
        let text = g.render();
        let (rs, _) = weir_lang::load_str("min.nft", &text).ok()?;
        std::fs::write(&path, &text).ok()?;
        let rep = run_case(lab, &rs, Some(&text), &path, pkts).ok()?;
        (rep.packets.last()?.status == Status::Different).then_some(rep)
    };
    let single = renumber(&prefix[last..]);
    let mut pkts = single.clone();
    let mut first = check(lab, g, &pkts);
    if first.is_none() && prefix.len() > 1 {
        pkts = renumber(prefix);
        first = check(lab, g, &pkts);
    }
    let Some(mut best_rep) = first else {
        return (g.clone(), None, renumber(prefix));
    };
    let check = |lab: &mut Lab, g: &GenRuleset| check(lab, g, &pkts);
    let mut best = g.clone();
    let mut attempts = 0;
    let mut k = best.rule_count();
    while k > 0 && attempts < 400 {
        k -= 1;
        attempts += 1;
        let cand = best.without_rule(k);
        if let Some(r) = check(lab, &cand) {
            best = cand;
            best_rep = r;
        }
    }
    let pruned = best.prune();
    if pruned != best {
        if let Some(r) = check(lab, &pruned) {
            best = pruned;
            best_rep = r;
        }
    }
    (best, Some(best_rep), pkts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{Captured, LocalCopy};
    use crate::model::Prepared;
    use std::net::Ipv4Addr;
    use weir_wire::build::{self, Builder};
    use weir_wire::pcap::Packet;

    #[test]
    fn every_known_difference_is_documented() {
        for k in KNOWN {
            assert!(
                KNOWN_DIFFERENCES_MD.contains(&format!("## {}", k.id)),
                "KNOWN_DIFFERENCES.md has no section '## {}'",
                k.id
            );
        }
    }

    fn setup(rules: &str) -> (ir::Ruleset, Router) {
        let w = gen::world();
        let (rs, _) = weir_lang::load_str("t.nft", rules).unwrap();
        (rs, w.router)
    }

    fn prep(router: &Router, frame: Vec<u8>, iif: usize) -> Prepared {
        let pk = Packet {
            ts_nanos: 0,
            orig_len: frame.len() as u32,
            data: frame,
            link: LinkType::Ethernet,
        };
        prepare(router, &[pk], &[iif]).remove(0)
    }

    /// What the kernel shows of a packet it forwards as `model` predicts weir forwards it.
    fn kernel_forwards(p: &Prepared, model: &mut Model) -> Observed {
        match model.predict(p, Variant::WEIR, EngineMode::Compiled).fate {
            Fate::Forwarded { oif, frame } => Observed {
                frames: vec![Captured {
                    iface: oif,
                    ts_ns: 0,
                    frame,
                }],
                barrier: true,
                ..Observed::default()
            },
            f => panic!("not forwarded: {f:?}"),
        }
    }

    const LAN: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 16);
    const FAR: Ipv4Addr = Ipv4Addr::new(198, 19, 7, 7);

    #[test]
    fn same_different_and_explained() {
        let (rs, router) = setup(
            r#"table inet f {
                 chain prerouting { type filter hook prerouting priority 0; policy accept;
                   oifname != "weirlan0" udp dport 99 drop }
                 chain postrouting { type filter hook postrouting priority 100; policy accept;
                   udp dport 98 drop } }"#,
        );
        let mut model = Model::new(&rs, router.clone());
        let mk = |dport| prep(&router, build::udp4(LAN, FAR, 1000, dport, b"x"), 0);
        // weir's own forwarded frame, as the kernel would show it
        let fwd = kernel_forwards;
        let a = mk(97);
        let b = mk(98);
        let c = mk(99);
        let oa = fwd(&a, &mut model);
        // b (dropped by weir): the window holds a's frame, which is not a copy of b (a's
        // payload differs too: a frame differing from b in its ports only could be b after
        // NAT)
        let mut ob = oa.clone();
        if let Some(x) = ob.frames[0].frame.last_mut() {
            *x ^= 0xff;
        }
        // c: weir forwards, the kernel drops (iifname is "" there): explained
        let oc = Observed {
            barrier: true,
            ..Observed::default()
        };
        let mut changed = oa.clone();
        changed.frames[0].frame[14 + 8] = 12; // another TTL
        let inj = Injection {
            observed: vec![oa, ob, oc, changed],
            ..Injection::default()
        };
        let mut d = mk(97);
        d.index = 3;
        let mut b2 = b.clone();
        b2.index = 1;
        let mut c2 = c.clone();
        c2.index = 2;
        let rep = compare_all(&rs, None, &router, &[a, b2, c2, d], &inj);
        assert_eq!(
            rep.packets[0].status,
            Status::Same,
            "{}",
            rep.packets[0].text()
        );
        // b's kernel frame is a's: a different packet, so not a forwarded copy of b
        assert_eq!(
            rep.packets[1].status,
            Status::Same,
            "{}",
            rep.packets[1].text()
        );
        assert!(rep.packets[1].kernel.contains("answered"));
        // the kernel compares oifname at prerouting with the empty name; so does weir
        assert_eq!(
            rep.packets[2].status,
            Status::Same,
            "{}",
            rep.packets[2].text()
        );
        assert_eq!(rep.packets[3].status, Status::Different);
        assert!(
            rep.packets[3].details.iter().any(|d| d.contains("ttl")),
            "{:?}",
            rep.packets[3].details
        );
        assert_eq!((rep.differences(), rep.explained(), rep.same()), (1, 0, 3));
        let j = rep.packets[3].to_json();
        assert_eq!(j["status"], "different");
    }

    /// Found by the campaign (seed 20261201, ruleset 234): weir passes the first fragment of a
    /// datagram that never completes, and its `add @dyn4` then drops a later packet of the
    /// same source that the kernel (which held the fragments) forwards. Only a model that ran
    /// the fragments with the kernel's reassembly explains it.
    #[test]
    fn a_fragment_the_kernel_held_changes_a_later_packet() {
        let text = r#"table inet f {
              set dyn4 { type ipv4_addr; flags dynamic, timeout; timeout 60s; }
              chain forward { type filter hook forward priority 10; policy accept;
                ct state established,related accept
                ip saddr @dyn4 counter drop
                meta l4proto udp add @dyn4 { ip saddr } } }"#;
        let (rs, router) = setup(text);
        const WAN: usize = 2;
        let b = Builder::new()
            .macs([2, 0, 0, 0, 2, 1], router.ifaces[WAN].mac)
            .ttl(63)
            .ip_id(12435);
        let first = b
            .clone()
            .fragment(0, true)
            .udp(FAR, LAN, 40107, 22, &[7; 64]);
        let later = b.fragment(9, true).ip(FAR, LAN, 17, &[8; 24]);
        let echo = build::icmp4_echo(FAR, LAN, 43246, 0, b"ping");
        let mut ps: Vec<Prepared> = [first, later, echo]
            .into_iter()
            .map(|f| prep(&router, f, WAN))
            .collect();
        for (i, p) in ps.iter_mut().enumerate() {
            p.index = i;
        }
        // the kernel's forwarded echo, as a model of the ruleset without the set would show it
        let (plain, _) = setup(
            "table inet f { chain forward { type filter hook forward priority 10; policy accept; } }",
        );
        let forwarded = kernel_forwards(&ps[2], &mut Model::new(&plain, router.clone()));
        let held = Observed {
            barrier: true,
            ..Observed::default()
        };
        let inj = Injection {
            observed: vec![held.clone(), held, forwarded],
            ..Injection::default()
        };
        let rep = compare_all(&rs, Some(text), &router, &ps, &inj);
        for p in &rep.packets {
            assert_eq!(
                p.status,
                Status::Explained("fragment-reassembly".into()),
                "{}",
                p.text()
            );
        }
        assert!(
            rep.packets[2].weir.contains("@dyn4"),
            "{}",
            rep.packets[2].text()
        );
    }

    #[test]
    fn local_delivery_is_matched_on_raw_copies() {
        let (rs, router) = setup(
            "table inet f { chain input { type filter hook input priority 0; policy accept; } }",
        );
        let me = Ipv4Addr::new(198, 18, 0, 1);
        let f = build::udp4(LAN, me, 1000, 53, b"q");
        let p = prep(&router, f.clone(), 0);
        let ob = Observed {
            local: vec![LocalCopy {
                v6: false,
                proto: 17,
                src: None,
                data: f[14..].to_vec(),
                ts_ns: 0,
            }],
            ..Observed::default()
        };
        let kv = kernel_view(&p, &ob);
        assert!(kv.local);
        let inj = Injection {
            observed: vec![ob],
            ..Injection::default()
        };
        assert_eq!(
            compare_all(&rs, None, &router, std::slice::from_ref(&p), &inj).packets[0].status,
            Status::Same
        );
        let inj = Injection {
            observed: vec![Observed::default()],
            ..Injection::default()
        };
        let rep = compare_all(&rs, None, &router, &[p], &inj);
        assert_eq!(rep.packets[0].status, Status::Different);
        assert!(rep.packets[0].details[0].contains("locally"));
    }

    /// A short ICMP header whose checksum an address rewrite changed is still the packet,
    /// translated (seed 8, ruleset 200: an ICMPv6 echo of 4 bytes, `ip6 saddr set`).
    #[test]
    fn a_short_icmp_header_translated_is_the_packet() {
        let key = |b: &[u8]| nat_key(true, 58, None, b);
        assert_eq!(key(&[0x80, 0, 0x12, 0x34]), key(&[0x80, 0, 0x12, 0x83]));
        assert_ne!(key(&[0x80, 0, 0x12, 0x34]), key(&[0x81, 0, 0x12, 0x34]));
        assert_ne!(key(&[0x80, 0, 0x12, 0x34]), key(&[0x80, 0, 0x12]));
    }

    /// A later fragment whose address a rule rewrote is still the packet (seed 11, ruleset
    /// 309: `ip saddr set` in postrouting, no connection tracking).
    #[test]
    fn a_later_fragment_translated_is_the_packet() {
        use std::net::Ipv4Addr;
        let frag = |src: Ipv4Addr, fill: u8| {
            weir_wire::build::Builder::new()
                .ip_id(7)
                .fragment(9, true)
                .ip(src, Ipv4Addr::new(198, 19, 66, 5), 17, &[fill; 24])
        };
        let (a, b) = (Ipv4Addr::new(198, 18, 0, 32), Ipv4Addr::new(198, 19, 0, 2));
        let key = |f: &[u8]| frame_nat_key(f, LinkType::Ethernet);
        assert!(key(&frag(a, 1)).is_some());
        assert_eq!(key(&frag(a, 1)), key(&frag(b, 1)));
        assert_ne!(key(&frag(a, 1)), key(&frag(b, 2)));
        assert!(one_side_kept(&frag(a, 1), &frag(b, 1)));
    }

    #[test]
    fn merged_flags_rewrite() {
        let r = rewrite_merged_flags("\t\ttcp window 64240 tcp flags ack accept\n\t\ttcp flags syn tcp window 5 drop\n\t\ttcp flags ack meta mark 1 tcp window 5").unwrap();
        assert_eq!(r, "\t\ttcp window 64240 tcp flags == ack accept\n\t\ttcp flags == syn tcp window 5 drop\n\t\ttcp flags ack meta mark 1 tcp window 5");
        assert_eq!(rewrite_merged_flags("tcp flags ack accept"), None);
        assert!(weir_lang::load_str(
            "r",
            &format!("table inet t {{ chain c {{ type filter hook forward priority 0;\n{r}\n}} }}")
        )
        .is_ok());
    }

    #[test]
    fn xt_hotdrop_rewrite() {
        let text = "table ip filter {\n\tchain FORWARD {\n\t\ttype filter hook forward priority filter; policy accept;\n\t\tip saddr 198.18.0.0/24 meta l4proto icmp icmp type != 8 counter accept comment \"iptables line 5\"\n\t\ticmp type 3 counter comment \"x\"\n\t}\n}\n";
        let r = rewrite_xt_hotdrop(text).unwrap();
        assert!(r.contains("\t\tip saddr 198.18.0.0/24 meta l4proto icmp ip hdrlength 5 ip length < 28 drop\n\t\tip saddr 198.18.0.0/24 meta l4proto icmp icmp type != 8"), "{r}");
        assert!(!r.contains("\t\tip hdrlength"), "only imported rules: {r}");
        assert!(weir_lang::load_str("r", &r).is_ok(), "{r}");
        let six =
            "\t\tmeta l4proto ipv6-icmp icmpv6 type 128 counter accept comment \"iptables line 3\"";
        assert_eq!(
            rewrite_xt_hotdrop(six).unwrap(),
            format!("\t\tmeta l4proto ipv6-icmp ip6 nexthdr ipv6-icmp ip6 length < 8 drop\n{six}")
        );
        assert_eq!(rewrite_xt_hotdrop("tcp dport 22 accept"), None);
        // `--icmp-type any`: no type match in the import; the drop follows the protocol
        let any = "\t\tip daddr != 198.19.7.7 meta l4proto icmp ip daddr 198.18.0.80-198.18.0.93 counter accept comment \"iptables line 6\"";
        assert_eq!(
            rewrite_xt_hotdrop(any).unwrap(),
            format!("\t\tip daddr != 198.19.7.7 meta l4proto icmp ip hdrlength 5 ip length < 28 drop\n{any}")
        );
        // `reject with icmp type` is a statement, not a match
        let rej = "\t\tmeta l4proto tcp counter reject with icmp type host-prohibited comment \"iptables line 8\"";
        assert_eq!(rewrite_xt_hotdrop(rej), None);
    }

    #[test]
    fn descriptions() {
        let f = build::tcp4(LAN, FAR, 40000, 80, 0x12, b"");
        assert_eq!(
            describe_frame(&f),
            "IPv4 tcp 198.18.0.16:40000 > 198.19.7.7:80 [SA] ttl 64 len 40"
        );
        let mut g = f.clone();
        g[0] = 9;
        assert!(field_diffs(&f, &g)[0].starts_with("ether daddr"));
        assert!(field_diffs(&f, &f).is_empty());
    }
}
