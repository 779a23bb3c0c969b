//! The comparison: one rule of a `.t` file loaded alone in its table (with the file's sets and
//! chains, as `nft-test.py` builds it) and evaluated by weir's engine at the chain's hook, and
//! the rule's bytecode evaluated by the oracle, on the same generated packets. "Matched" is,
//! on both sides, "the rule ran to its end": the kernel did not break out of it, weir counted
//! a hit for it (`State::rule_hits`, which counts what reaches the rule's verdict or end).

use super::bytecode::{parse_file, Base, Block, CmpOp, Expr};
use super::gen;
use super::interp::{self, deliverable, Conn, Env, Family, NatOut, Outcome, Packet, OWN_MAC};
use crate::rng::Rng;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use weir_engine::{Compiled, CtView, Engine, Meta, Mode, Pkt};
use weir_lang::ir::{Hook, NatKind};
use weir_wire::{LinkType, PacketMeta};

/// The blocks of every `.t.payload*` file next to a `.t` file (bridge and arp left out),
/// by (family, rule text); the first block of each.
pub fn blocks_for(t_file: &Path) -> HashMap<(String, String), Block> {
    let mut out = HashMap::new();
    let (Some(dir), Some(name)) = (t_file.parent(), t_file.file_name()) else {
        return out;
    };
    let prefix = format!("{}.payload", name.to_string_lossy());
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with(&prefix))
                })
                .filter(|p| {
                    let n = p.to_string_lossy();
                    !n.ends_with(".bridge") && !n.ends_with(".arp")
                })
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    for f in files {
        let src = std::fs::read_to_string(&f).unwrap_or_default();
        for b in parse_file(&src) {
            out.entry((b.family.clone(), b.rule.clone())).or_insert(b);
        }
    }
    out
}

/// The hook of the first chain of a case's table text (`... hook input ...`).
pub fn first_hook(text: &str) -> Option<Hook> {
    let mut w = text.split_whitespace();
    while let Some(x) = w.next() {
        if x == "hook" {
            let h = w.next()?.trim_end_matches(';');
            return Some(match h {
                "ingress" => Hook::Ingress,
                "prerouting" => Hook::Prerouting,
                "input" => Hook::Input,
                "forward" => Hook::Forward,
                "output" => Hook::Output,
                "postrouting" => Hook::Postrouting,
                "egress" => Hook::Egress,
                _ => return None,
            });
        }
    }
    None
}

/// The `meta` keys the oracle evaluates (at this hook).
fn meta_known(key: &str, env: &Env) -> bool {
    match key {
        "l4proto" | "nfproto" | "protocol" | "mark" | "priority" | "len" | "iif" | "oif"
        | "iifname" | "oifname" | "iiftype" | "oiftype" | "time" | "day" | "hour" | "secpath"
        | "tunnel path" | "rtclassid" | "sdif" | "sdifname" | "iifgroup" | "oifgroup" | "cpu"
        | "skuid" | "skgid" | "cgroup" | "nftrace" => true,
        "pkttype" => env.has_in(),
        _ => false,
    }
}

/// Why a rule is not compared, or None when the oracle knows its whole block.
pub fn unknown_reason(b: &Block, env: &Env) -> Option<String> {
    if let Some(e) = &b.error {
        return Some(match e.strip_prefix("unknown: ") {
            Some(r) => r.split_whitespace().take(2).collect::<Vec<_>>().join(" "),
            None => "block not read".into(),
        });
    }
    for e in &b.exprs {
        let r = match e {
            Expr::Unknown(k) => {
                let k0 = k.split_whitespace().next().unwrap_or("");
                match k0 {
                    "meta" | "ct" | "exthdr" | "rt" | "fib" => {
                        k.split_whitespace().take(2).collect::<Vec<_>>().join(" ")
                    }
                    _ => k0.to_string(),
                }
            }
            Expr::Meta { key, .. } if !meta_known(key, env) => {
                format!("meta {key}")
            }
            Expr::MetaSet { key, .. } if key != "mark" && key != "priority" => {
                format!("meta set {key}")
            }
            Expr::Ct { key, .. }
                if !matches!(
                    key.as_str(),
                    "state"
                        | "direction"
                        | "status"
                        | "mark"
                        | "expiration"
                        | "l3protocol"
                        | "protocol"
                        | "label"
                        | "zone"
                        | "zone original"
                        | "zone reply"
                        | "bytes"
                        | "bytes original"
                        | "bytes reply"
                        | "packets"
                        | "packets original"
                        | "packets reply"
                        | "avgpkt"
                        | "avgpkt original"
                        | "avgpkt reply"
                        | "protocol original"
                        | "protocol reply"
                        | "l3protocol original"
                        | "l3protocol reply"
                        | "src original"
                        | "src reply"
                        | "dst original"
                        | "dst reply"
                        | "src_ip original"
                        | "src_ip reply"
                        | "dst_ip original"
                        | "dst_ip reply"
                        | "src_ip6 original"
                        | "src_ip6 reply"
                        | "dst_ip6 original"
                        | "dst_ip6 reply"
                        | "proto_src original"
                        | "proto_src reply"
                        | "proto_dst original"
                        | "proto_dst reply"
                ) =>
            {
                format!("ct {key}")
            }
            Expr::Payload {
                base: super::bytecode::Base::Link,
                ..
            } if !env.has_link() => "link header at a hook without one".into(),
            Expr::Verdict(v)
                if !matches!(v.as_str(), "accept" | "drop" | "continue" | "return") =>
            {
                "jump/goto verdict".into()
            }
            Expr::Lookup {
                dreg: Some(0), set, ..
            } if b.sets[*set].elems.iter().any(|e| {
                matches!(&e.data, Some(super::bytecode::ElemData::Verdict(v))
                        if !matches!(v.as_str(), "accept" | "drop" | "continue" | "return"))
            }) =>
            {
                "jump/goto verdict".into()
            }
            Expr::Lookup { set, .. }
                if b.sets[*set].elems.is_empty() && b.sets[*set].named.is_none() =>
            {
                "empty set".into()
            }
            _ => continue,
        };
        return Some(r);
    }
    None
}

/// Weir's side: the engines (compiled and linear) of a case's table.
pub struct Weir {
    engines: Vec<Engine>,
    hook: Hook,
    /// Weir's wall clock ahead of the kernel's ([`tz_shift_ns`]).
    pub wall_shift_ns: u64,
    /// The CPU the packet is processed on (`meta cpu`).
    pub cpu: u32,
    /// Whether the packet has an input and an output device; None: as the hook has them
    /// ([`Env::has_in`], [`Env::has_out`]). (A forwarded packet has its input device at
    /// `postrouting`, a locally sent one none.)
    pub devices: Option<(bool, bool)>,
}

/// nft-test.py runs nft with `TZ=UTC-2`: nft turns a date (`meta time "2019-07-01
/// 00:00:00"`) and a time of day (`meta hour "17:00"`) of the rule's text into UTC, two hours
/// earlier, while weir reads them as UTC; weir's clock is then two hours ahead of the kernel's
/// for such a rule (a number of seconds, `meta time 12341234`, and `meta day` are not moved).
pub fn tz_shift_ns(rule: &str) -> u64 {
    let b = rule.as_bytes();
    let date = (0..b.len().saturating_sub(5)).any(|i| {
        b[i] == b'"' && b[i + 1..i + 5].iter().all(u8::is_ascii_digit) && b[i + 5] == b'-'
    });
    if rule.contains("hour") || date {
        7_200_000_000_000
    } else {
        0
    }
}

impl Weir {
    pub fn load(text: &str, hook: Hook) -> Result<Weir, String> {
        let (rs, _) = weir_lang::load_str("t.nft", text).map_err(|(_, d)| {
            d.first()
                .map(|d| d.message.clone())
                .unwrap_or_else(|| "refused".into())
        })?;
        // what weir loads but does not evaluate yet (it refuses to run such a ruleset)
        for t in &rs.tables {
            for c in &t.chains {
                for r in &c.rules {
                    for e in &r.exprs {
                        if let weir_lang::ir::Expr::Unevaluated(what) = e {
                            return Err(format!("weir does not evaluate {what}"));
                        }
                    }
                }
            }
        }
        Ok(Weir {
            engines: vec![
                Engine::new(Compiled::build(&rs, Mode::Compiled)),
                Engine::new(Compiled::build(&rs, Mode::Linear)),
            ],
            hook,
            wall_shift_ns: 0,
            cpu: 0,
            devices: None,
        })
    }

    /// The routing table the engines' `fib` asks (the oracle's model: both sides look up
    /// the same routes).
    pub fn set_fib(&mut self, fib: std::sync::Arc<dyn weir_engine::Fib>) {
        for e in &mut self.engines {
            e.st.fib = Some(weir_engine::fib::FibTable(fib.clone()));
        }
    }

    /// The OS fingerprints the engines' `osf` asks.
    pub fn set_osf(&mut self, db: std::sync::Arc<weir_engine::osf::OsfDb>) {
        for e in &mut self.engines {
            e.st.osf = Some(db.clone());
        }
    }

    /// Whether the rule ran to its end on the packet, in each mode, and the packet's mark and
    /// its connection's mark afterwards.
    #[allow(clippy::type_complexity)]
    pub fn matches(&mut self, p: &Packet) -> Vec<(bool, u32, u32, u32, Option<NatOut>, Vec<u8>)> {
        let pm = PacketMeta::parse(&p.frame, LinkType::Ethernet);
        let env = Env {
            family: Family::Netdev,
            hook: self.hook,
            fib: None,
        };
        let name = |has: bool, n: &[u8; 16]| if has { u128::from_be_bytes(*n) } else { 0 };
        let (has_in, has_out) = self.devices.unwrap_or((env.has_in(), env.has_out()));
        let mut out = Vec::new();
        for e in &mut self.engines {
            let before: u64 = e.st.rule_hits.iter().map(|h| h.0).sum();
            let mut meta = Meta {
                mark: p.mark,
                priority: p.priority,
                iif: if has_in { p.iif_index } else { 0 },
                oif: if has_out { p.oif_index } else { 0 },
                iifname: name(has_in, &p.iif),
                oifname: name(has_out, &p.oif),
                ct_state: p.conn.state_bits(),
                wall_ns: p.wall_ns.wrapping_add(self.wall_shift_ns),
                cpu: self.cpu,
                // `rt mtu` after routing: the labs' links are 1,500 bytes both ways
                rt_mss: if has_out {
                    if pm.l3 == weir_wire::L3::Ipv6 {
                        1440
                    } else {
                        1460
                    }
                } else {
                    0
                },
                ..Meta::default()
            };
            if let Conn::Tracked(c) = p.conn {
                meta.has_ct = true;
                meta.ct_mark = c.mark;
                // IPS_CONFIRMED (8) not set: the connection's first packet, before it leaves
                meta.ct_unconfirmed = c.status & 8 == 0;
                meta.ct = CtView {
                    dir: (c.info >= 3) as u8,
                    status: c.status,
                    expiration_ms: c.expiration_ms,
                    l3proto: if pm.l3 == weir_wire::L3::Ipv6 { 10 } else { 2 },
                    protocol: pm.l4proto,
                    ..CtView::default()
                };
                let info = interp::pktinfo(p, &env).ok().flatten();
                super::ctkeys::fill_view(&c, p, info.as_ref(), &mut meta.ct);
            }
            let mut pkt = Pkt {
                frame: &p.frame,
                pm: &pm,
                meta: &mut meta,
                now_ns: 1_000_000_000,
                conns: None,
            };
            e.process(self.hook, &mut pkt);
            let after: u64 = e.st.rule_hits.iter().map(|h| h.0).sum();
            // the header writes of the chain, applied as weir's stateful layer applies them
            let mut frame = p.frame.clone();
            let mut fpm = pm;
            for (f, v) in pkt.meta.writes[..pkt.meta.nwrites as usize]
                .iter()
                .flatten()
            {
                if weir_engine::nat::set_header_field(&mut frame, &fpm, *f, *v) {
                    fpm = PacketMeta::parse(&frame, fpm.link);
                }
            }
            let nat = pkt.meta.nat.map(|n| NatOut {
                kind: match n.kind {
                    NatKind::Snat => "snat",
                    NatKind::Dnat => "dnat",
                    NatKind::Masquerade => "masquerade",
                    NatKind::Redirect => "redirect",
                }
                .to_string(),
                addr: n.addr,
                port: n.port,
            });
            out.push((
                after > before,
                pkt.meta.mark,
                pkt.meta.ct_mark,
                pkt.meta.priority,
                nat,
                frame,
            ));
        }
        out
    }
}

/// What a rule did to a packet: whether it matched, and the marks it set (when it sets them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    pub matched: bool,
    pub mark: Option<u32>,
    pub ct_mark: Option<u32>,
    pub priority: Option<u32>,
    /// The translation a NAT statement asked for (None: none), when the rule has one.
    pub nat: Option<Option<NatOut>>,
    /// The frame after the rule's header writes, its checksum fields left out (the oracle
    /// does not update checksums).
    pub frame: Option<Vec<u8>>,
}

impl std::fmt::Display for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", if self.matched { "match" } else { "no match" })?;
        if let Some(m) = self.mark {
            write!(f, " mark {m:#x}")?;
        }
        if let Some(m) = self.ct_mark {
            write!(f, " ct mark {m:#x}")?;
        }
        if let Some(m) = self.priority {
            write!(f, " priority {m:#x}")?;
        }
        if let Some(n) = &self.nat {
            write!(f, " nat {n:?}")?;
        }
        if let Some(fr) = &self.frame {
            let hex: String = fr.iter().map(|b| format!("{b:02x}")).collect();
            write!(f, " frame {hex}")?;
        }
        Ok(())
    }
}

/// One difference between the oracle and weir.
#[derive(Clone, Debug)]
pub struct Difference {
    pub at: String,
    pub rule: String,
    pub family: String,
    pub packet: Packet,
    pub oracle: Answer,
    /// The bytecode, one expression a line.
    pub bytecode: String,
    /// Compiled, linear.
    pub weir: Vec<Answer>,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hex: String = self
            .packet
            .frame
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        write!(
            f,
            "{} ({}): {}\n    packet {hex} mark {:#x} priority {:#x} conn {:?} iif {:?} oif {:?} wall {}ns\n    kernel (oracle): {}, weir (compiled, linear): {}",
            self.at,
            self.family,
            self.rule,
            self.packet.mark,
            self.packet.priority,
            self.packet.conn,
            String::from_utf8_lossy(&self.packet.iif).trim_end_matches('\0'),
            String::from_utf8_lossy(&self.packet.oif).trim_end_matches('\0'),
            self.packet.wall_ns,
            self.oracle,
            self.weir
                .iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )?;
        if std::env::var_os("WEIR_ORACLE_BYTECODE").is_some() {
            write!(f, "{}", self.bytecode)?;
        }
        Ok(())
    }
}

/// The figures of a run.
#[derive(Debug, Default)]
pub struct Report {
    pub rules_compared: usize,
    /// Rules compared with the block of another family ([`borrow`]).
    pub borrowed: usize,
    pub rules_with_hit: usize,
    pub packets: usize,
    pub packets_matching: usize,
    /// Generated packets the kernel would not deliver to the hook (bad IPv4 header ...).
    pub packets_undeliverable: usize,
    pub differences: Vec<Difference>,
    /// Rules not compared, by reason.
    pub skipped: BTreeMap<String, usize>,
}

impl Report {
    pub fn skip(&mut self, why: impl Into<String>) {
        *self.skipped.entry(why.into()).or_default() += 1;
    }
}

/// The block of another family of the same rule, when its meaning is the same in `family`:
/// an `inet` block in an `ip` or `ip6` table (an inet chain evaluates IPv4 packets as an ip
/// chain does); an `inet` block in a `netdev` table with its `meta nfproto` checks turned into
/// the `meta protocol` checks nft puts there; a block of any family that reads no header (nft
/// compiles such a rule alike in every family: no protocol dependency).
pub fn borrow(
    blocks: &HashMap<(String, String), Block>,
    family: Family,
    rule: &str,
) -> Option<Block> {
    let get = |f: &str| blocks.get(&(f.to_string(), rule.to_string()));
    let neutral = |b: &Block| {
        b.error.is_none()
            && !b.exprs.iter().any(|e| {
                matches!(
                    e,
                    // (transport-header and inner loads read the same bytes in every family:
                    // the `meta l4proto` before them says which)
                    Expr::Payload {
                        base: Base::Link | Base::Network,
                        ..
                    } | Expr::PayloadWrite { .. }
                        | Expr::Exthdr {
                            kind: super::bytecode::ExtKind::Ipv6,
                            ..
                        }
                )
            })
    };
    if matches!(family, Family::Ip | Family::Ip6) {
        if let Some(b) = get("inet") {
            return Some(b.clone());
        }
    }
    // (a rule that reads `meta nfproto` itself keeps it: 5 in a netdev chain)
    if family == Family::Netdev && !rule.contains("nfproto") {
        if let Some(b) = get("inet") {
            let mut b = b.clone();
            let mut ok = true;
            for i in 0..b.exprs.len() {
                if let Expr::Meta { key, dreg } = &b.exprs[i] {
                    if key == "nfproto" {
                        let dreg = *dreg;
                        let next = b.exprs.get_mut(i + 1);
                        match next {
                            Some(Expr::Cmp {
                                op: super::bytecode::CmpOp::Eq,
                                sreg,
                                data,
                            }) if *sreg == dreg && data.len() == 1 && matches!(data[0], 2 | 10) => {
                                *data = if data[0] == 2 {
                                    vec![0x08, 0x00]
                                } else {
                                    vec![0x86, 0xdd]
                                };
                            }
                            _ => ok = false,
                        }
                        b.exprs[i] = Expr::Meta {
                            key: "protocol".into(),
                            dreg,
                        };
                    }
                }
            }
            if ok {
                return Some(b);
            }
        }
    }
    for f in ["ip", "ip6", "inet", "netdev"] {
        if let Some(b) = get(f) {
            if neutral(b) {
                return Some(b.clone());
            }
        }
    }
    // an `ip` (`ip6`) block in an `inet` or `netdev` table: nft puts `meta nfproto ipv4`
    // (`meta protocol ip`) before a rule that reads the network header; one that reads only
    // the transport header (after `meta l4proto`) is the same in every family
    for (f, nfproto, ethertype) in [("ip", 2u8, [0x08u8, 0x00]), ("ip6", 10, [0x86, 0xdd])] {
        let Some(b) = get(f) else {
            continue;
        };
        // (some `.payload.inet` files label their blocks `ip6`: one that starts with the
        // inet dependency is the inet block)
        if family == Family::Inet
            && b.error.is_none()
            && matches!(b.exprs.first(), Some(Expr::Meta { key, dreg: 4 }) if key == "nfproto")
            && matches!(b.exprs.get(1), Some(Expr::Cmp { op: CmpOp::Eq, sreg: 4, data }) if data == &[nfproto])
        {
            return Some(b.clone());
        }
        if b.error.is_some()
            || b.exprs.iter().any(|e| {
                matches!(
                    e,
                    Expr::Payload {
                        base: Base::Link,
                        ..
                    }
                ) || matches!(e, Expr::Meta { key, .. } if key == "nfproto" || key == "protocol")
            })
        {
            continue;
        }
        let network = b.exprs.iter().any(|e| {
            matches!(
                e,
                Expr::Payload {
                    base: Base::Network,
                    ..
                } | Expr::PayloadWrite {
                    base: Base::Network,
                    ..
                } | Expr::Exthdr {
                    kind: super::bytecode::ExtKind::Ipv6,
                    ..
                }
            )
        });
        let dep = match (family, network) {
            (Family::Inet, true) => vec![
                Expr::Meta {
                    key: "nfproto".into(),
                    dreg: 4,
                },
                Expr::Cmp {
                    op: CmpOp::Eq,
                    sreg: 4,
                    data: vec![nfproto],
                },
            ],
            (Family::Netdev, true) => vec![
                Expr::Meta {
                    key: "protocol".into(),
                    dreg: 4,
                },
                Expr::Cmp {
                    op: CmpOp::Eq,
                    sreg: 4,
                    data: ethertype.to_vec(),
                },
            ],
            (Family::Inet | Family::Netdev | Family::Ip | Family::Ip6, false) => vec![],
            _ => continue,
        };
        let mut b = b.clone();
        b.exprs.splice(0..0, dep);
        return Some(b);
    }
    None
}

/// Compare one case (`file:line`, the table text with the rule, its family's block).
#[allow(clippy::too_many_arguments)]
pub fn compare_case(
    r: &mut Report,
    at: &str,
    rule: &str,
    text: &str,
    blocks: &HashMap<(String, String), Block>,
    seed: u64,
    rounds: usize,
) {
    let fam_name = text.split_whitespace().nth(1).unwrap_or("").to_string();
    let Some(family) = Family::from_name(&fam_name) else {
        return r.skip("family");
    };
    let Some(hook) = first_hook(text) else {
        return r.skip("no base chain");
    };
    if hook == Hook::Egress {
        return r.skip("egress hook");
    }
    let env = Env {
        family,
        hook,
        fib: None,
    };
    let mut weir = match Weir::load(text, hook) {
        Ok(w) => w,
        Err(m) if m.starts_with("weir does not evaluate") => {
            let what: Vec<&str> = m.split_whitespace().take(6).collect();
            return r.skip(what.join(" "));
        }
        Err(_) => return r.skip("weir does not load the rule"),
    };
    weir.wall_shift_ns = tz_shift_ns(rule);
    weir.set_fib(env.fib_model());
    let (b, borrowed) = match case_block(blocks, &fam_name, family, rule, text, at) {
        Ok(b) => b,
        Err(why) => return r.skip(why),
    };
    if let Some(why) = unknown_reason(&b, &env) {
        return r.skip(format!("oracle: {why}"));
    }
    let (packets, any_hit) = case_packets(&b, &env, seed, at, &fam_name, rule, rounds);
    let b = &b;
    r.rules_compared += 1;
    r.rules_with_hit += any_hit as usize;
    r.borrowed += borrowed as usize;
    for p in packets {
        // ip_rcv drops what is for another host before the IP hooks
        let other_host = p.frame[0] & 1 == 0 && p.frame[..6] != OWN_MAC;
        // netdev ingress sees every frame; the IP hooks what ip_rcv / ipv6_rcv let through
        let seen = family == Family::Netdev || (deliverable(&p) && !(other_host && env.has_in()));
        if !seen {
            r.packets_undeliverable += 1;
            if std::env::var_os("WEIR_ORACLE_UNDELIVERABLE").is_some() {
                println!("undeliverable: {at} {fam_name} {rule}");
            }
            continue;
        }
        let t = interp::eval(b, &p, &env);
        let oracle = match t.outcome {
            Outcome::Match => true,
            Outcome::Break(_) | Outcome::NotSeen => false,
            Outcome::Unknown(_) => {
                r.packets_undeliverable += 1;
                continue;
            }
        };
        r.packets += 1;
        // a limit, quota, numgen or set counts what it saw: each packet comes to the rule
        // first
        let fresh = b.exprs.iter().any(|e| match e {
            Expr::Limit { .. } | Expr::Quota { .. } | Expr::Numgen { .. } => true,
            // a quota or limit object, named or from an object map
            Expr::Objref { kind: 2 | 4, .. }
            | Expr::Lookup {
                objref: Some(2 | 4),
                ..
            } => true,
            Expr::Stmt { kind, .. } => kind == "dynset",
            _ => false,
        });
        if fresh {
            if let Ok(w) = Weir::load(text, hook) {
                weir = w;
                weir.wall_shift_ns = tz_shift_ns(rule);
                weir.set_fib(env.fib_model());
            }
        }
        let sets_mark = b
            .exprs
            .iter()
            .any(|e| matches!(e, Expr::MetaSet { key, .. } if key == "mark"));
        let sets_prio = b
            .exprs
            .iter()
            .any(|e| matches!(e, Expr::MetaSet { key, .. } if key == "priority"));
        let has_nat = b.exprs.iter().any(|e| matches!(e, Expr::Nat { .. }));
        let sets_ct = matches!(p.conn, Conn::Tracked(_))
            && b.exprs.iter().any(|e| matches!(e, Expr::CtSetMark { .. }));
        let ct_before = match p.conn {
            Conn::Tracked(c) => c.mark,
            _ => 0,
        };
        let writes = b
            .exprs
            .iter()
            .any(|e| matches!(e, Expr::PayloadWrite { .. }));
        let oracle = Answer {
            matched: oracle,
            mark: (oracle && sets_mark).then_some(t.mark),
            ct_mark: (oracle && sets_ct).then_some(t.ct_mark.unwrap_or(ct_before)),
            priority: (oracle && sets_prio).then_some(t.priority),
            nat: (oracle && has_nat).then(|| t.nat.clone()),
            frame: (oracle && writes)
                .then(|| without_checksums(t.written.as_ref().unwrap_or(&p.frame))),
        };
        let w: Vec<Answer> = weir
            .matches(&p)
            .into_iter()
            .map(|(m, mark, ct, prio, nat, frame)| Answer {
                nat: (m && has_nat).then_some(nat),
                matched: m,
                mark: (m && sets_mark).then_some(mark),
                ct_mark: (m && sets_ct).then_some(ct),
                priority: (m && sets_prio).then_some(prio),
                frame: (m && writes).then(|| without_checksums(&frame)),
            })
            .collect();
        r.packets_matching += oracle.matched as usize;
        if std::env::var_os("WEIR_ORACLE_PACKETS").is_some() {
            let hex: String = p.frame.iter().map(|b| format!("{b:02x}")).collect();
            println!(
                "packet: {at} {fam_name} {rule}: {} (weir {}) {hex} wall {}",
                oracle,
                w.first().map_or(String::new(), |a| a.to_string()),
                p.wall_ns
            );
        }
        if w.iter().any(|a| *a != oracle) {
            r.differences.push(Difference {
                at: at.to_string(),
                rule: rule.to_string(),
                family: fam_name.clone(),
                packet: p,
                oracle,
                bytecode: b.exprs.iter().map(|e| format!("\n      {e:?}")).collect(),
                weir: w,
            });
        }
    }
}

/// The bytecode block of a case: its family's, or one borrowed ([`borrow`]; the flag says
/// so), with the table's named sets filled in; or why there is none.
pub fn case_block(
    blocks: &HashMap<(String, String), Block>,
    fam_name: &str,
    family: Family,
    rule: &str,
    text: &str,
    at: &str,
) -> Result<(Block, bool), String> {
    let (b, borrowed) = match blocks.get(&(fam_name.to_string(), rule.to_string())) {
        Some(b) => (b.clone(), false),
        None => match borrow(blocks, family, rule) {
            Some(b) => (b, true),
            None => {
                if std::env::var_os("WEIR_ORACLE_NOBLOCK").is_some() {
                    println!("no block: {at} {fam_name} {rule}");
                }
                return Err("no payload block for the family".into());
            }
        },
    };
    let mut b = b;
    if b.sets.iter().any(|s| s.named.is_some()) {
        super::sets::fill(&mut b, text).map_err(|why| format!("oracle: {why}"))?;
    }
    Ok((b, borrowed))
}

/// The packets a case is tried on (seeded by the case): for each of `rounds` hit packets,
/// its misses, its variants and itself; plain IPv4 and IPv6 packets when no hit is found
/// (the second value says whether one was). Duplicates next to each other are dropped.
pub fn case_packets(
    b: &Block,
    env: &Env,
    seed: u64,
    at: &str,
    fam_name: &str,
    rule: &str,
    rounds: usize,
) -> (Vec<Packet>, bool) {
    let mut rng = Rng::for_item(seed, fxhash(at) ^ fxhash(fam_name));
    let mut packets: Vec<Packet> = Vec::new();
    let mut any_hit = false;
    for _ in 0..rounds {
        if let Some(h) = gen::hit(b, env, &mut rng) {
            any_hit = true;
            packets.extend(gen::misses(b, env, &h, &mut rng));
            packets.extend(gen::variants(&h));
            packets.push(h.packet);
        }
    }
    if !any_hit {
        if std::env::var_os("WEIR_ORACLE_NOHIT").is_some() {
            println!("no hit: {at} {fam_name} {rule}");
        }
        // what the oracle says of plain packets is compared all the same
        packets.push(gen::template(false, &mut rng));
        packets.push(gen::template(true, &mut rng));
    }
    packets.dedup();
    (packets, any_hit)
}

/// A frame with its IPv4 header checksum and its TCP / UDP / ICMP checksum zeroed (the
/// oracle writes bytes, weir updates checksums as it writes).
fn without_checksums(f: &[u8]) -> Vec<u8> {
    let mut f = f.to_vec();
    let pm = PacketMeta::parse(&f, LinkType::Ethernet);
    let mut zero = |o: usize| {
        if o + 2 <= f.len() {
            f[o] = 0;
            f[o + 1] = 0;
        }
    };
    if pm.l3 == weir_wire::L3::Ipv4 {
        zero(pm.l3_off as usize + 10);
    }
    let l4 = pm.l4_off as usize;
    if l4 > 0 {
        match pm.l4proto {
            6 => zero(l4 + 16),
            17 | 136 => zero(l4 + 6),
            1 | 58 => zero(l4 + 2),
            _ => {}
        }
    }
    f
}

/// A stable hash of a string (FNV-1a), for per-rule seeds.
fn fxhash(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}
