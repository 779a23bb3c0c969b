//! Random stateless rulesets ([`ruleset`]) and their structured form ([`GenRuleset`]: nft
//! text, one rule less, pruning): the match, verdict-map, set, NAT and netdev table generators, and
//! the protocol requirements that keep every rule acceptable to nft.

use super::nat::nat_table;
use super::netdev::netdev_table;
use super::router::{Host, World, IFS};
use crate::rng::Rng;
use crate::topology::addr_bits;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fam {
    Ip,
    Ip6,
    Inet,
    /// Chains bound to devices (ingress, egress): both IP versions.
    Netdev,
}

impl Fam {
    pub fn name(self) -> &'static str {
        match self {
            Fam::Ip => "ip",
            Fam::Ip6 => "ip6",
            Fam::Inet => "inet",
            Fam::Netdev => "netdev",
        }
    }
    pub(super) fn v4(self) -> bool {
        self != Fam::Ip6
    }
    pub(super) fn v6(self) -> bool {
        self != Fam::Ip
    }
}

/// A named set or map: its header word (`set`/`map`), name and body lines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GenSet {
    pub kind: &'static str,
    pub name: String,
    pub lines: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GenChain {
    pub name: String,
    /// `type filter hook forward priority 0; policy drop;` for base chains.
    pub base: Option<String>,
    pub rules: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GenTable {
    pub family: Fam,
    pub name: String,
    pub sets: Vec<GenSet>,
    pub chains: Vec<GenChain>,
}

/// A generated ruleset, kept structured so that a reproducer can be minimised rule by rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GenRuleset {
    pub tables: Vec<GenTable>,
}

impl GenRuleset {
    /// nft text (one rule per line, as nft 1.0 wants).
    pub fn render(&self) -> String {
        let mut s = String::new();
        for t in &self.tables {
            s.push_str(&format!("table {} {} {{\n", t.family.name(), t.name));
            for set in &t.sets {
                s.push_str(&format!("\t{} {} {{\n", set.kind, set.name));
                for l in &set.lines {
                    s.push_str(&format!("\t\t{l}\n"));
                }
                s.push_str("\t}\n");
            }
            for c in &t.chains {
                s.push_str(&format!("\tchain {} {{\n", c.name));
                if let Some(b) = &c.base {
                    s.push_str(&format!("\t\t{b}\n"));
                }
                for r in &c.rules {
                    s.push_str(&format!("\t\t{r}\n"));
                }
                s.push_str("\t}\n");
            }
            s.push_str("}\n");
        }
        s
    }

    pub fn rule_count(&self) -> usize {
        self.tables
            .iter()
            .flat_map(|t| &t.chains)
            .map(|c| c.rules.len())
            .sum()
    }

    /// The ruleset without its `k`-th rule (in rendering order).
    pub fn without_rule(&self, mut k: usize) -> GenRuleset {
        let mut g = self.clone();
        for t in &mut g.tables {
            for c in &mut t.chains {
                if k < c.rules.len() {
                    c.rules.remove(k);
                    return g;
                }
                k -= c.rules.len();
            }
        }
        g
    }

    /// Drop named sets no rule refers to, empty user chains nothing jumps to, and tables left
    /// without chains (semantics unchanged).
    pub fn prune(&self) -> GenRuleset {
        let mut g = self.clone();
        for t in &mut g.tables {
            let text: String = t
                .chains
                .iter()
                .flat_map(|c| c.rules.iter())
                .cloned()
                .collect::<Vec<_>>()
                .join("\n");
            t.sets.retain(|s| {
                text.split(|c: char| c.is_whitespace())
                    .any(|w| w == format!("@{}", s.name))
            });
            let maps: String = t
                .sets
                .iter()
                .flat_map(|s| s.lines.iter())
                .cloned()
                .collect::<Vec<_>>()
                .join("\n");
            let refs = |n: &str| {
                [text.as_str(), maps.as_str()].iter().any(|tx| {
                    let w: Vec<&str> = tx
                        .split(|c: char| c.is_whitespace() || c == ',' || c == '}')
                        .collect();
                    w.windows(2)
                        .any(|p| (p[0] == "jump" || p[0] == "goto") && p[1] == n)
                })
            };
            t.chains
                .retain(|c| c.base.is_some() || !c.rules.is_empty() || refs(&c.name));
        }
        g.tables.retain(|t| !t.chains.is_empty());
        g
    }
}

pub(crate) const PORTS: [u16; 12] = [22, 25, 53, 80, 123, 443, 993, 3306, 5432, 8080, 9100, 1001];
pub(crate) const PORT_RANGES: [(u16, u16); 6] = [
    (1000, 1010),
    (8000, 8999),
    (1024, 65535),
    (32768, 60999),
    (20, 25),
    (440, 450),
];

struct Ctx<'a> {
    w: &'a World,
    fam: Fam,
    hook: &'static str,
    /// Chains this chain may jump or goto.
    targets: Vec<String>,
    s4: bool,
    s6: bool,
    ports: bool,
    c4: bool,
    /// The concatenated interval set `@ci` (ipv4_addr . inet_service, flags interval) exists.
    ci: bool,
    /// The named verdict map `@vm` exists and this is the base forward chain (the map jumps
    /// to user chains, so only that chain may use it without a loop).
    vm: bool,
    /// The ruleset uses connection tracking (`ct` matches).
    ct: bool,
}

/// A connection-tracking match.
fn ct_item(rng: &mut Rng) -> String {
    match rng.weighted(&[30, 20, 10, 8, 8, 8, 6, 5, 5]) {
        0 => format!(
            "ct state {}",
            rng.pick(&["new", "established", "related", "invalid", "untracked"])
        ),
        1 => format!(
            "ct state {}",
            rng.pick(&[
                "established,related",
                "new,established",
                "invalid,untracked",
                "{ established, related }",
                "{ new, invalid }",
            ])
        ),
        2 => format!(
            "ct state != {}",
            rng.pick(&["established", "new", "invalid"])
        ),
        3 => format!("ct direction {}", rng.pick(&["original", "reply"])),
        4 => format!(
            "ct status {}",
            rng.pick(&["seen-reply", "assured", "confirmed"])
        ),
        5 => format!("ct mark {}", rng.pick(&["0", "0x1", "!= 0x1"])),
        6 => format!(
            "ct original packets {}",
            rng.pick(&["1", "2", "< 3", "> 2", "1-2"])
        ),
        7 => format!("ct protocol {}", rng.pick(&["tcp", "udp", "icmp"])),
        _ => format!("ct reply packets {}", rng.pick(&["0", "1", ">= 1"])),
    }
}

pub(crate) fn disjoint(cands: Vec<(String, u128, u128)>, max: usize) -> Vec<String> {
    let mut out: Vec<(String, u128, u128)> = Vec::new();
    for c in cands {
        if out.len() >= max {
            break;
        }
        if out.iter().all(|o| c.2 < o.1 || c.1 > o.2) {
            out.push(c);
        }
    }
    out.into_iter().map(|c| c.0).collect()
}

pub(crate) fn prefix_interval(p: &str) -> (u128, u128) {
    let pr = crate::topology::Prefix::parse(p).expect("generated prefix");
    let (lo, _) = addr_bits(pr.network().addr);
    let (hi, _) = addr_bits(pr.last());
    (lo, hi)
}

/// An address value of one family: text and covered interval.
pub(super) fn addr_value(rng: &mut Rng, w: &World, v6: bool) -> (String, u128, u128) {
    let hosts: Vec<&Host> = w.hosts.iter().filter(|h| h.addr.is_ipv6() == v6).collect();
    match rng.weighted(&[40, 30, 12, 12]) {
        0 => {
            let h = rng.pick(&hosts).addr;
            let (v, _) = addr_bits(h);
            (h.to_string(), v, v)
        }
        1 => {
            let n = if v6 {
                *rng.pick(&w.nets6)
            } else {
                *rng.pick(&w.nets4)
            };
            let (lo, hi) = prefix_interval(n);
            (n.to_string(), lo, hi)
        }
        2 => {
            // a small prefix around a host
            let h = rng.pick(&hosts).addr;
            let len = if v6 {
                *rng.pick(&[64u8, 120, 124, 127])
            } else {
                *rng.pick(&[26u8, 28, 30, 31])
            };
            let p = crate::topology::Prefix { addr: h, len }.network();
            let s = p.to_string();
            let (lo, hi) = prefix_interval(&s);
            (s, lo, hi)
        }
        _ => {
            let h = rng.pick(&hosts).addr;
            let (v, _) = addr_bits(h);
            let lo = v.saturating_sub(rng.below(8) as u128);
            let hi = v + 1 + rng.below(20) as u128;
            let a = crate::topology::from_bits(lo, !v6);
            let b = crate::topology::from_bits(hi, !v6);
            (format!("{a}-{b}"), lo, hi)
        }
    }
}

pub(super) fn addr_set(rng: &mut Rng, w: &World, v6: bool, (lo, hi): (u64, u64)) -> Vec<String> {
    let n = rng.range(lo, hi) as usize;
    let cands = (0..n * 3).map(|_| addr_value(rng, w, v6)).collect();
    disjoint(cands, n)
}

fn port_value(rng: &mut Rng) -> (String, u128, u128) {
    if rng.chance(75) {
        let p = *rng.pick(&PORTS);
        (p.to_string(), p as u128, p as u128)
    } else {
        let (a, b) = *rng.pick(&PORT_RANGES);
        (format!("{a}-{b}"), a as u128, b as u128)
    }
}

pub(super) fn port_set(rng: &mut Rng, (lo, hi): (u64, u64)) -> Vec<String> {
    let n = rng.range(lo, hi) as usize;
    let cands = (0..n * 3).map(|_| port_value(rng)).collect();
    disjoint(cands, n)
}

pub(super) fn brace(v: &[String]) -> String {
    format!("{{ {} }}", v.join(", "))
}

pub(super) fn neg(rng: &mut Rng, pct: u64) -> &'static str {
    if rng.chance(pct) {
        "!= "
    } else {
        ""
    }
}

/// Pick the IP version of a match in this table: None when the family has none.
fn pick_v6(rng: &mut Rng, fam: Fam) -> bool {
    match fam {
        Fam::Ip => false,
        Fam::Ip6 => true,
        Fam::Inet | Fam::Netdev => rng.chance(40),
    }
}

fn ifname_match(rng: &mut Rng, c: &Ctx) -> String {
    // the kernel has no output device at prerouting/input (and no input device at output);
    // a few rules test that anyway
    let (iif_ok, oif_ok) = match c.hook {
        "prerouting" | "input" => (true, false),
        "output" => (false, true),
        _ => (true, true),
    };
    let odd = rng.chance(4);
    let word = match (iif_ok, oif_ok) {
        (true, true) => *rng.pick(&["iifname", "oifname"]),
        (true, false) => {
            if odd {
                "oifname"
            } else {
                "iifname"
            }
        }
        (false, _) => {
            if odd {
                "iifname"
            } else {
                "oifname"
            }
        }
    };
    let names: Vec<&str> = IFS.iter().map(|i| i.0).collect();
    let v = match rng.weighted(&[60, 20, 12, 8]) {
        0 => format!("\"{}\"", rng.pick(&names)),
        1 => {
            let a = *rng.pick(&names);
            let b = *rng.pick(&names);
            if a == b {
                format!("{{ \"{a}\" }}")
            } else {
                format!("{{ \"{a}\", \"{b}\" }}")
            }
        }
        2 => format!("\"{}\"", rng.pick(&["weir*", "weirl*", "weirw*", "weird*"])),
        _ => format!("\"{}\"", rng.pick(&["weirnone0", "eth0"])),
    };
    format!("{word} {}{v}", neg(rng, 15))
}

fn match_item(rng: &mut Rng, c: &Ctx) -> String {
    let w = c.w;
    if c.ct && rng.chance(25) {
        return ct_item(rng);
    }
    loop {
        let k = rng.weighted(&[26, 24, 8, 12, 8, 6, 8, 5, 3, 3, 2, 2, 6, 5, 6]);
        let s = match k {
            0 => {
                let v6 = pick_v6(rng, c.fam);
                let kw = if v6 { "ip6" } else { "ip" };
                let f = *rng.pick(&["saddr", "daddr"]);
                let n = neg(rng, 12);
                let named = if v6 { c.s6 } else { c.s4 };
                let val = match rng.weighted(&[60, 25, if named { 20 } else { 0 }]) {
                    0 => addr_value(rng, w, v6).0,
                    1 => brace(&addr_set(rng, w, v6, (2, 4))),
                    _ => (if v6 { "@s6" } else { "@s4" }).to_string(),
                };
                format!("{kw} {f} {n}{val}")
            }
            1 => {
                let p = ["tcp", "udp", "th"][rng.weighted(&[45, 35, 20])];
                let f = if rng.chance(75) { "dport" } else { "sport" };
                let n = neg(rng, 12);
                let val = match rng.weighted(&[55, 15, 20, if c.ports { 10 } else { 0 }]) {
                    0 => PORTS[rng.below(PORTS.len() as u64) as usize].to_string(),
                    1 => {
                        let (a, b) = *rng.pick(&PORT_RANGES);
                        format!("{a}-{b}")
                    }
                    2 => brace(&port_set(rng, (2, 4))),
                    _ => "@ports".to_string(),
                };
                format!("{p} {f} {n}{val}")
            }
            2 => match rng.below(3) {
                0 => format!(
                    "meta l4proto {}{}",
                    neg(rng, 10),
                    rng.pick(&[
                        "tcp",
                        "udp",
                        "icmp",
                        "ipv6-icmp",
                        "{ tcp, udp }",
                        "{ icmp, ipv6-icmp }"
                    ])
                ),
                1 if c.fam.v4() => format!(
                    "ip protocol {}{}",
                    neg(rng, 10),
                    rng.pick(&["tcp", "udp", "icmp", "{ tcp, udp }"])
                ),
                _ if c.fam.v6() => format!(
                    "ip6 nexthdr {}{}",
                    neg(rng, 10),
                    rng.pick(&["tcp", "udp", "ipv6-icmp", "{ tcp, udp }"])
                ),
                _ => continue,
            },
            3 => ifname_match(rng, c),
            4 => rng
                .pick(&[
                    "tcp flags syn",
                    "tcp flags == syn",
                    "tcp flags & (syn | ack) == syn",
                    "tcp flags & (syn | ack) == (syn | ack)",
                    "tcp flags syn / syn,ack",
                    "tcp flags & (fin | rst) != 0",
                    "tcp flags != rst",
                    "tcp flags { syn, ack }",
                    "tcp flags ack",
                    "tcp flags & ack == 0",
                    "tcp flags fin,rst",
                    "tcp flags == 0x0",
                ])
                .to_string(),
            5 => {
                let v6 = pick_v6(rng, c.fam);
                if v6 {
                    rng.pick(&[
                        "icmpv6 type echo-request",
                        "icmpv6 type { echo-request, echo-reply }",
                        "icmpv6 type != echo-reply",
                        "icmpv6 type { destination-unreachable, packet-too-big, time-exceeded }",
                        "icmpv6 code 4",
                    ])
                    .to_string()
                } else {
                    rng.pick(&[
                        "icmp type echo-request",
                        "icmp type { echo-request, echo-reply }",
                        "icmp type != echo-reply",
                        "icmp type destination-unreachable",
                        "icmp code 3",
                    ])
                    .to_string()
                }
            }
            6 => match rng.below(5) {
                0 => format!("meta mark 0x{}", rng.range(0, 3)),
                1 => format!("meta mark != 0x{}", rng.range(0, 3)),
                2 => "meta mark { 0x1, 0x3 }".to_string(),
                3 => "meta mark & 0x2 == 0x2".to_string(),
                _ => format!("mark {}", rng.range(1, 3)),
            },
            7 => {
                let v6 = pick_v6(rng, c.fam);
                if !v6 && c.c4 && rng.chance(50) {
                    "ip saddr . tcp dport @c4".to_string()
                } else {
                    let kw = if v6 { "ip6" } else { "ip" };
                    let f = *rng.pick(&["saddr", "daddr"]);
                    let p = *rng.pick(&["tcp", "udp"]);
                    let hosts: Vec<&Host> =
                        w.hosts.iter().filter(|h| h.addr.is_ipv6() == v6).collect();
                    let mut el: Vec<String> = (0..rng.range(1, 3))
                        .map(|_| format!("{} . {}", rng.pick(&hosts).addr, rng.pick(&PORTS)))
                        .collect();
                    el.sort();
                    el.dedup();
                    format!("{kw} {f} . {p} dport {}{}", neg(rng, 8), brace(&el))
                }
            }
            8 => {
                if pick_v6(rng, c.fam) {
                    rng.pick(&[
                        "ip6 hoplimit 63",
                        "ip6 hoplimit { 63, 127 }",
                        "ip6 hoplimit > 62",
                        "ip6 hoplimit != 64",
                        "ip6 hoplimit 1",
                    ])
                    .to_string()
                } else {
                    rng.pick(&[
                        "ip ttl 63",
                        "ip ttl != 63",
                        "ip ttl 1-62",
                        "ip ttl < 64",
                        "ip ttl 1",
                        "ip ttl { 1, 63 }",
                    ])
                    .to_string()
                }
            }
            9 => {
                if c.fam.v4() && rng.chance(40) {
                    rng.pick(&["ip length < 60", "ip length 40-100", "ip length > 100"])
                        .to_string()
                } else {
                    rng.pick(&[
                        "meta length 40-100",
                        "meta length > 120",
                        "meta length < 70",
                        "meta length != 60",
                    ])
                    .to_string()
                }
            }
            10 if c.fam == Fam::Inet => format!("meta nfproto {}", rng.pick(&["ipv4", "ipv6"])),
            11 => rng
                .pick(&[
                    "ip dscp 0",
                    "ip dscp != cs1",
                    "ip6 dscp 0",
                    "ip dscp { cs1, af41 }",
                    "ip6 dscp ef",
                ])
                .to_string(),
            12 => rng
                .pick(&[
                    "ip hdrlength 5",
                    "ip hdrlength != 5",
                    "ip frag-off & 0x1fff != 0",
                    "ip frag-off & 0x2000 == 0x2000",
                    "ip id 1",
                    "ip version 4",
                    "tcp window 64240",
                    "tcp doff 5",
                    "tcp doff < 5",
                    "tcp sequence < 1000000",
                    "udp length < 20",
                    "udp length > 100",
                    "icmp id 7",
                    "icmp sequence 0",
                    "icmpv6 id 7",
                    "ip6 flowlabel 0",
                    "ip6 length > 100",
                    "ether type ip6",
                    "ether saddr 02:00:00:00:02:01",
                    "ether daddr 02:77:65:00:00:01",
                    "meta protocol ip",
                    "meta protocol ip6",
                ])
                .to_string(),
            13 => {
                let v6 = pick_v6(rng, c.fam);
                match rng.below(5) {
                    0 if !v6 && c.ci => "ip saddr . tcp dport @ci".to_string(),
                    0 | 1 => {
                        let nets = if v6 { &w.nets6 } else { &w.nets4 };
                        let mut el: Vec<String> = Vec::new();
                        let mut used: Vec<&str> = Vec::new();
                        for _ in 0..rng.range(1, 3) {
                            let n = *rng.pick(nets);
                            if used.iter().any(|u| {
                                let (a, b) = prefix_interval(u);
                                let (x, y) = prefix_interval(n);
                                !(y < a || x > b)
                            }) {
                                continue;
                            }
                            used.push(n);
                            el.push(format!("{n} . {}", port_value(rng).0));
                        }
                        let kw = if v6 { "ip6" } else { "ip" };
                        format!(
                            "{kw} {} . {} dport {}",
                            rng.pick(&["saddr", "daddr"]),
                            rng.pick(&["tcp", "udp"]),
                            brace(&el)
                        )
                    }
                    2 => {
                        let names: Vec<&str> = IFS.iter().map(|i| i.0).collect();
                        let mut el: Vec<String> = (0..rng.range(1, 3))
                            .map(|_| format!("\"{}\" . \"{}\"", rng.pick(&names), rng.pick(&names)))
                            .collect();
                        el.sort();
                        el.dedup();
                        if c.hook == "forward" || c.hook == "postrouting" {
                            format!("iifname . oifname {}", brace(&el))
                        } else {
                            continue;
                        }
                    }
                    3 => {
                        let mut el: Vec<String> = (0..rng.range(1, 3))
                            .map(|_| {
                                format!("{} . {}", rng.pick(&["tcp", "udp"]), rng.pick(&PORTS))
                            })
                            .collect();
                        el.sort();
                        el.dedup();
                        format!("meta l4proto . th dport {}", brace(&el))
                    }
                    _ => {
                        let (a, b) = if v6 {
                            (*rng.pick(&w.nets6), *rng.pick(&w.nets6))
                        } else {
                            (*rng.pick(&w.nets4), *rng.pick(&w.nets4))
                        };
                        let kw = if v6 { "ip6" } else { "ip" };
                        format!("{kw} saddr . {kw} daddr {}{{ {a} . {b} }}", neg(rng, 10))
                    }
                }
            }
            14 => match extra_item(rng, c) {
                Some(s) => s,
                None => continue,
            },
            _ => continue,
        };
        // family fit: `ip` selectors only where IPv4 is seen, `ip6`/`icmpv6` where IPv6 is
        let is_v6_sel =
            s.starts_with("ip6 ") || s.starts_with("icmpv6 ") || s.starts_with("exthdr ");
        let is_v4_sel = (s.starts_with("ip ") || s.starts_with("icmp ")) && !is_v6_sel;
        if (is_v4_sel && !c.fam.v4()) || (is_v6_sel && !c.fam.v6()) {
            continue;
        }
        return s;
    }
}

/// Constructs evaluated since the first campaigns (issue "Bring your ruleset unchanged (2)"):
/// route lookups (`fib`, at the hooks the kernel allows them: the router's own routes on
/// weir's side, the kernel's on the other), TCP options, IPv6 extension headers, raw payload,
/// the input device's type.
fn extra_item(rng: &mut Rng, c: &Ctx) -> Option<String> {
    let early = matches!(c.hook, "prerouting" | "input" | "forward");
    let s = match rng.below(5) {
        0 if early => *rng.pick(&[
            "fib saddr . iif oif missing",
            "fib saddr . iif oif exists",
            "fib saddr oif exists",
            "fib daddr type local",
            "fib daddr type != local",
            "fib daddr type { local, broadcast, multicast }",
            "fib daddr . iif type local",
            "fib daddr oif missing",
            "fib saddr . iif oif 0",
        ]),
        1 => *rng.pick(&[
            "tcp option maxseg size 1460",
            "tcp option maxseg size < 1400",
            "tcp option sack-perm exists",
            "tcp option window exists",
            "tcp option timestamp missing",
        ]),
        2 => *rng.pick(&[
            "exthdr hbh exists",
            "exthdr frag exists",
            "exthdr dst missing",
            "exthdr rt exists",
        ]),
        3 => *rng.pick(&[
            "@th,16,16 22",
            "@th,0,16 != 53",
            "@nh,72,8 6",
            "@nh,96,32 0xc6120001",
            "@th,104,8 & 0x02 == 0x02",
        ]),
        4 if early => *rng.pick(&[
            "meta iiftype ether",
            "meta iiftype != loopback",
            "@ll,96,16 0x0800",
            "meta pkttype host",
            "meta pkttype { broadcast, multicast }",
        ]),
        _ => return None,
    };
    Some(s.to_string())
}

fn vmap(rng: &mut Rng, c: &Ctx) -> Option<String> {
    let verdict = |rng: &mut Rng| -> String {
        let mut opts: Vec<String> = vec!["accept".into(), "drop".into(), "continue".into()];
        if let Some(t) = (!c.targets.is_empty()).then(|| rng.pick(&c.targets).clone()) {
            opts.push(format!("jump {t}"));
            opts.push(format!("goto {t}"));
            opts.push(format!("jump {t}"));
        }
        rng.pick(&opts).clone()
    };
    let k = rng.weighted(&[
        30,
        15,
        15,
        15,
        10,
        if c.vm { 20 } else { 0 },
        if c.fam.v4() { 8 } else { 0 },
    ]);
    Some(match k {
        0 | 1 => {
            let p = if k == 0 { "tcp" } else { "udp" };
            let ports = port_set(rng, (1, 3));
            let el: Vec<String> = ports
                .iter()
                .map(|p| format!("{p} : {}", verdict(rng)))
                .collect();
            format!("{p} dport vmap {}", brace(&el))
        }
        2 => {
            let v6 = pick_v6(rng, c.fam);
            let kw = if v6 { "ip6" } else { "ip" };
            let addrs = addr_set(rng, c.w, v6, (1, 3));
            let el: Vec<String> = addrs
                .iter()
                .map(|a| format!("{a} : {}", verdict(rng)))
                .collect();
            format!("{kw} {} vmap {}", rng.pick(&["saddr", "daddr"]), brace(&el))
        }
        3 => {
            if c.hook == "postrouting" || c.hook == "output" {
                return None;
            }
            let mut names: Vec<&str> = IFS.iter().map(|i| i.0).collect();
            names.truncate(rng.range(1, 4) as usize);
            let el: Vec<String> = names
                .iter()
                .map(|n| format!("\"{n}\" : {}", verdict(rng)))
                .collect();
            format!("iifname vmap {}", brace(&el))
        }
        4 => {
            let el: Vec<String> = ["tcp", "udp"]
                .iter()
                .map(|p| format!("{p} : {}", verdict(rng)))
                .collect();
            format!("meta l4proto vmap {}", brace(&el))
        }
        5 => "tcp dport vmap @vm".to_string(),
        _ => {
            let hosts: Vec<&Host> = c.w.hosts.iter().filter(|h| h.addr.is_ipv4()).collect();
            let mut keys: Vec<String> = (0..rng.range(1, 3))
                .map(|_| format!("{} . {}", rng.pick(&hosts).addr, rng.pick(&PORTS)))
                .collect();
            keys.sort();
            keys.dedup();
            let el: Vec<String> = keys
                .iter()
                .map(|k| format!("{k} : {}", verdict(rng)))
                .collect();
            format!("ip saddr . tcp dport vmap {}", brace(&el))
        }
    })
}

/// What a rule's item requires of the packet, as nft's dependency checker sees it: the IP
/// version (`Some(true)`: IPv6) and the transport protocol. nft refuses a rule whose items
/// require two different ones ("conflicting protocols specified"), weir accepts it (see the
/// report), so the generator keeps rules consistent.
pub(super) type Req = (Option<bool>, Option<u8>);

/// The transport requirement of a protocol set (`meta l4proto { tcp, udp }`).
const ANY_OF: u8 = 255;

fn proto_num(w: &str) -> Option<u8> {
    match w {
        "tcp" => Some(6),
        "udp" => Some(17),
        "icmp" => Some(1),
        "ipv6-icmp" => Some(58),
        _ => None,
    }
}

pub(super) fn req_of(s: &str) -> Option<Req> {
    let t: Vec<&str> = s.split_whitespace().collect();
    let mut r: Req = (None, None);
    let add = |r: &mut Req, v6: Option<bool>, l4: Option<u8>| -> Option<()> {
        if let Some(v) = v6 {
            if r.0.is_some_and(|x| x != v) {
                return None;
            }
            r.0 = Some(v);
        }
        if let Some(p) = l4 {
            if r.1.is_some_and(|x| x != p) {
                return None;
            }
            r.1 = Some(p);
        }
        Some(())
    };
    for i in 0..t.len() {
        let prev = if i > 0 { t[i - 1] } else { "" };
        let prev2 = if i > 1 { t[i - 2] } else { "" };
        let next = t.get(i + 1).copied().unwrap_or("");
        // a selector keyword is followed by a field name, not a value
        let sel = matches!(
            next,
            "saddr"
                | "daddr"
                | "protocol"
                | "ttl"
                | "length"
                | "dscp"
                | "ecn"
                | "nexthdr"
                | "hoplimit"
                | "sport"
                | "dport"
                | "flags"
                | "type"
                | "code"
                | "hdrlength"
                | "frag-off"
                | "id"
                | "version"
                | "window"
                | "doff"
                | "sequence"
                | "flowlabel"
                | "checksum"
                | "option"
        ) && !matches!(prev, "l4proto" | "protocol" | "nexthdr" | "with");
        match t[i] {
            "ip" if sel => add(&mut r, Some(false), None)?,
            "ip6" if sel => add(&mut r, Some(true), None)?,
            "icmp" if sel => add(&mut r, Some(false), Some(1))?,
            "icmpv6" if sel => add(&mut r, Some(true), Some(58))?,
            "tcp" if sel => add(&mut r, None, Some(6))?,
            "udp" if sel => add(&mut r, None, Some(17))?,
            // values that name a network protocol: `meta protocol ip6`, `ether type ip`
            "ip" | "ip6"
                if (prev == "protocol" && prev2 == "meta")
                    || (prev == "type" && prev2 == "ether") =>
            {
                add(&mut r, Some(t[i] == "ip6"), None)?
            }
            "protocol" | "nexthdr" | "l4proto" if proto_num(next).is_some() => {
                add(&mut r, None, proto_num(next))?
            }
            // a protocol set: nft then refuses any item that needs one protocol
            "protocol" | "nexthdr" | "l4proto" if next == "{" => add(&mut r, None, Some(ANY_OF))?,
            "nfproto" => add(&mut r, Some(next == "ipv6"), None)?,
            // an IPv6 extension header
            "exthdr" => add(&mut r, Some(true), None)?,
            "with" if next == "tcp" => add(&mut r, None, Some(6))?,
            "with" if next == "icmp" => add(&mut r, Some(false), None)?,
            "with" if next == "icmpv6" => add(&mut r, Some(true), None)?,
            _ => {}
        }
    }
    Some(r)
}

fn merge(a: Req, b: Req) -> Option<Req> {
    let v = match (a.0, b.0) {
        (Some(x), Some(y)) if x != y => return None,
        (x, y) => x.or(y),
    };
    let p = match (a.1, b.1) {
        (Some(x), Some(y)) if x != y => return None,
        (x, y) => x.or(y),
    };
    Some((v, p))
}

/// Add `item` to a rule if it fits the rule's protocol requirements. (nft also refuses
/// `icmp id` next to an `icmp type` that has no id: "incompatible icmp match"; the generator
/// keeps the two apart.)
pub(super) fn try_add(parts: &mut Vec<String>, cons: &mut Req, item: String) -> bool {
    let has_id =
        |s: &str| s.contains("icmp id") || s.contains("icmp sequence") || s.contains("icmpv6 id");
    let has_type = |s: &str| s.contains("icmp type") || s.contains("icmpv6 type");
    if (has_id(&item) && parts.iter().any(|p| has_type(p)))
        || (has_type(&item) && parts.iter().any(|p| has_id(p)))
    {
        return false;
    }
    match req_of(&item).and_then(|r| merge(*cons, r)) {
        Some(c) => {
            *cons = c;
            parts.push(item);
            true
        }
        None => false,
    }
}

/// One rule for a chain of `hook` (`user` for user chains).
fn rule(rng: &mut Rng, c: &Ctx, user: bool) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cons: Req = (None, None);
    // realistic templates first: zone to zone, networks and published services
    if !user && c.hook == "forward" && rng.chance(25) {
        let names: Vec<&str> = IFS.iter().map(|i| i.0).collect();
        let v = *rng.pick(&["accept", "accept", "accept", "drop", "counter accept"]);
        return match rng.below(4) {
            0 | 1 => format!(
                "iifname \"{}\" oifname \"{}\" {v}",
                rng.pick(&names),
                rng.pick(&names)
            ),
            2 => {
                let v6 = pick_v6(rng, c.fam);
                let n = if v6 {
                    *rng.pick(&c.w.nets6)
                } else {
                    *rng.pick(&c.w.nets4)
                };
                format!(
                    "{} {} {n} {v}",
                    if v6 { "ip6" } else { "ip" },
                    rng.pick(&["saddr", "daddr"])
                )
            }
            _ => format!(
                "meta l4proto {{ tcp, udp }} th dport {} {v}",
                brace(&port_set(rng, (2, 4)))
            ),
        };
    }
    if c.hook == "prerouting" && rng.chance(70) {
        let m = match_item(rng, c);
        return format!("{m} meta mark set 0x{}", rng.range(1, 3));
    }
    let add_match = |rng: &mut Rng, parts: &mut Vec<String>, cons: &mut Req| {
        for _ in 0..20 {
            if try_add(parts, cons, match_item(rng, c)) {
                return;
            }
        }
    };
    let nmatch = rng.weighted(&[8, 45, 35, 12]);
    for _ in 0..nmatch {
        add_match(rng, &mut parts, &mut cons);
    }
    // MSS clamping (`rt mtu` only after routing: forward and postrouting base chains)
    if !user && matches!(c.hook, "forward" | "postrouting") && rng.chance(8) {
        let clamp = rng.pick(&[
            "tcp option maxseg size set rt mtu",
            "tcp flags syn tcp option maxseg size set rt mtu",
            "tcp option maxseg size set 1300",
        ]);
        try_add(&mut parts, &mut cons, clamp.to_string());
    }
    let stmt = rng.weighted(&[60, 25, 15]);
    match stmt {
        1 => parts.push("counter".into()),
        2 => {
            if rng.chance(25) {
                let m = if rng.chance(50) {
                    let ports = port_set(rng, (1, 3))
                        .into_iter()
                        .filter(|p| !p.contains('-'))
                        .collect::<Vec<_>>();
                    let el: Vec<String> = ports
                        .iter()
                        .map(|p| format!("{p} : 0x{}", rng.range(1, 3)))
                        .collect();
                    format!(
                        "meta mark set {} dport map {}",
                        rng.pick(&["tcp", "udp"]),
                        brace(&el)
                    )
                } else {
                    let v6 = pick_v6(rng, c.fam);
                    let el: Vec<String> = addr_set(rng, c.w, v6, (1, 3))
                        .iter()
                        .map(|a| format!("{a} : 0x{}", rng.range(1, 3)))
                        .collect();
                    format!(
                        "meta mark set {} saddr map {}",
                        if v6 { "ip6" } else { "ip" },
                        brace(&el)
                    )
                };
                if !m.ends_with("map {  }") && !try_add(&mut parts, &mut cons, m) {
                    parts.push(format!("meta mark set 0x{}", rng.range(1, 3)));
                }
            } else {
                parts.push(format!("meta mark set 0x{}", rng.range(1, 3)));
            }
            if rng.chance(30) {
                add_match(rng, &mut parts, &mut cons);
            }
        }
        _ => {}
    }
    let (w_acc, w_drop, w_none, w_ret, w_jump, w_vmap, w_rej, w_cont) = match (c.hook, user) {
        (_, true) => (25, 20, 12, 15, 10, 6, 3, 2),
        ("forward", false) => (40, 20, 12, 2, 12, 8, 3, 2),
        ("prerouting", _) => (15, 10, 60, 0, 0, 3, 0, 5),
        ("postrouting", _) => (20, 20, 50, 0, 0, 3, 0, 2),
        ("input", _) => (35, 25, 20, 0, 0, 5, 5, 2),
        _ => (50, 10, 40, 0, 0, 0, 0, 0),
    };
    let w_jump = if c.targets.is_empty() { 0 } else { w_jump };
    let v = match rng.weighted(&[w_acc, w_drop, w_none, w_ret, w_jump, w_vmap, w_rej, w_cont]) {
        0 => Some("accept".to_string()),
        1 => Some("drop".to_string()),
        2 => None,
        3 => Some("return".to_string()),
        4 => {
            let t = rng.pick(&c.targets).clone();
            Some(if rng.chance(70) {
                format!("jump {t}")
            } else {
                format!("goto {t}")
            })
        }
        5 => vmap(rng, c),
        6 => Some(
            rng.pick(&match c.fam {
                Fam::Inet | Fam::Netdev => vec![
                    "reject",
                    "reject with icmpx type admin-prohibited",
                    "reject with tcp reset",
                ],
                Fam::Ip => vec![
                    "reject",
                    "reject with icmp type host-prohibited",
                    "reject with tcp reset",
                ],
                Fam::Ip6 => vec![
                    "reject",
                    "reject with icmpv6 type admin-prohibited",
                    "reject with tcp reset",
                ],
            })
            .to_string(),
        ),
        _ => Some("continue".to_string()),
    };
    if let Some(mut v) = v {
        if v == "reject with tcp reset" && cons.1 != Some(6) {
            v = if cons.1.is_none() {
                "meta l4proto tcp reject with tcp reset".into()
            } else {
                "reject".into()
            };
        }
        if !try_add(&mut parts, &mut cons, v) {
            parts.push("drop".into());
        }
    }
    if parts.is_empty() {
        parts.push("counter".into());
    }
    parts.join(" ")
}

fn set_defs(
    rng: &mut Rng,
    w: &World,
    fam: Fam,
    ctx_sets: &mut (bool, bool, bool, bool, bool, bool),
    users: &[String],
) -> Vec<GenSet> {
    let mut sets = Vec::new();
    if fam.v4() && rng.chance(55) {
        let el = addr_set(rng, w, false, (1, 5));
        sets.push(GenSet {
            kind: "set",
            name: "s4".into(),
            lines: vec![
                "type ipv4_addr".into(),
                "flags interval".into(),
                format!("elements = {}", brace(&el)),
            ],
        });
        ctx_sets.0 = true;
    }
    if fam.v6() && rng.chance(45) {
        let el = addr_set(rng, w, true, (1, 4));
        sets.push(GenSet {
            kind: "set",
            name: "s6".into(),
            lines: vec![
                "type ipv6_addr".into(),
                "flags interval".into(),
                format!("elements = {}", brace(&el)),
            ],
        });
        ctx_sets.1 = true;
    }
    if rng.chance(45) {
        let el = port_set(rng, (1, 4));
        sets.push(GenSet {
            kind: "set",
            name: "ports".into(),
            lines: vec![
                "type inet_service".into(),
                "flags interval".into(),
                format!("elements = {}", brace(&el)),
            ],
        });
        ctx_sets.2 = true;
    }
    if fam.v4() && rng.chance(40) {
        let hosts: Vec<&Host> = w.hosts.iter().filter(|h| h.addr.is_ipv4()).collect();
        let mut el: Vec<String> = (0..rng.range(1, 5))
            .map(|_| format!("{} . {}", rng.pick(&hosts).addr, rng.pick(&PORTS)))
            .collect();
        el.sort();
        el.dedup();
        sets.push(GenSet {
            kind: "set",
            name: "c4".into(),
            lines: vec![
                "type ipv4_addr . inet_service".into(),
                format!("elements = {}", brace(&el)),
            ],
        });
        ctx_sets.3 = true;
    }
    if fam.v4() && rng.chance(25) {
        // concatenation with intervals: disjoint networks, each with a port or a range
        let nets = addr_set(rng, w, false, (1, 3));
        let el: Vec<String> = nets
            .iter()
            .map(|n| format!("{n} . {}", port_value(rng).0))
            .collect();
        sets.push(GenSet {
            kind: "set",
            name: "ci".into(),
            lines: vec![
                "type ipv4_addr . inet_service".into(),
                "flags interval".into(),
                format!("elements = {}", brace(&el)),
            ],
        });
        ctx_sets.5 = true;
    }
    if rng.chance(40) {
        let ports = port_set(rng, (1, 4))
            .into_iter()
            .filter(|p| !p.contains('-'))
            .collect::<Vec<_>>();
        if !ports.is_empty() {
            let el: Vec<String> = ports
                .iter()
                .map(|p| {
                    let mut v: Vec<String> = vec!["accept".into(), "drop".into()];
                    for u in users {
                        v.push(format!("jump {u}"));
                    }
                    format!("{p} : {}", rng.pick(&v))
                })
                .collect();
            sets.push(GenSet {
                kind: "map",
                name: "vm".into(),
                lines: vec![
                    "type inet_service : verdict".into(),
                    format!("elements = {}", brace(&el)),
                ],
            });
            ctx_sets.4 = true;
        }
    }
    sets
}

/// A random stateless ruleset for the campaign's router.
pub fn ruleset(rng: &mut Rng, w: &World) -> GenRuleset {
    let fam = [Fam::Inet, Fam::Ip, Fam::Ip6][rng.weighted(&[60, 22, 18])];
    let nusers = rng.weighted(&[35, 30, 20, 15]);
    let users: Vec<String> = (1..=nusers).map(|i| format!("u{i}")).collect();
    let mut flags = (false, false, false, false, false, false);
    let sets = set_defs(rng, w, fam, &mut flags, &users);
    let (s4, s6, ports, c4, vm, ci) = flags;
    let ct = rng.chance(55);
    let ctx = |hook: &'static str, targets: Vec<String>| Ctx {
        w,
        fam,
        hook,
        targets,
        s4,
        s6,
        ports,
        c4,
        ci,
        vm: false,
        ct,
    };
    let mut chains = Vec::new();
    // forward: the main chain
    let fwd_policy = if rng.chance(45) { "drop" } else { "accept" };
    let c = Ctx {
        vm,
        ..ctx("forward", users.clone())
    };
    let n = rng.range(3, 14);
    let mut rules: Vec<String> = Vec::new();
    // no flowtables: this kernel is built without CONFIG_NF_FLOW_TABLE (nft refuses them), so
    // the fast path is tested against weir's own slow path (weir-engine tests/flowtable.rs)
    let flow = false;
    if flow {
        rules.push(
            rng.pick(&[
                "meta l4proto { tcp, udp } flow add @ft",
                "ct state established flow add @ft",
                "ip protocol tcp flow add @ft",
            ])
            .to_string(),
        );
    }
    // the classic stateful firewall's first rules
    if ct && rng.chance(60) {
        rules.push("ct state established,related accept".into());
    }
    if ct && rng.chance(45) {
        rules.push(format!(
            "ct state invalid {}",
            rng.pick(&["drop", "counter drop"])
        ));
    }
    rules.extend((0..n).map(|_| rule(rng, &c, false)));
    // sets filled from the packet path, and rules that look them up
    let mut dyn_sets = Vec::new();
    if rng.chance(25) {
        for (v6, name, ty, kw, icmp) in [
            (false, "dyn4", "ipv4_addr", "ip", "icmp"),
            (true, "dyn6", "ipv6_addr", "ip6", "icmpv6"),
        ] {
            if (v6 && !fam.v6()) || (!v6 && !fam.v4()) {
                continue;
            }
            dyn_sets.push(GenSet {
                kind: "set",
                name: name.into(),
                lines: vec![
                    format!("type {ty};"),
                    "flags dynamic, timeout;".into(),
                    "timeout 60s;".into(),
                ],
            });
            let learn = [
                format!("meta l4proto udp add @{name} {{ {kw} saddr }}"),
                format!("tcp flags syn update @{name} {{ {kw} saddr }}"),
                format!("meta l4proto {icmp} add @{name} {{ {kw} daddr }}"),
                format!("udp dport 53 delete @{name} {{ {kw} saddr }}"),
                format!("add @{name} {{ {kw} saddr }} counter"),
            ];
            let look = [
                format!("{kw} daddr @{name} accept"),
                format!("{kw} saddr @{name} counter drop"),
                format!("{kw} saddr != @{name} tcp dport 22 drop"),
                format!("{kw} saddr @{name} meta mark set 0x3"),
            ];
            for r in [rng.pick(&learn).clone(), rng.pick(&look).clone()] {
                let at = rng.below(rules.len() as u64 + 1) as usize;
                rules.insert(at, r);
            }
        }
    }
    // connection limits (nft_connlimit): per rule, and per source in a dynamic set
    if ct && rng.chance(12) {
        let n = rng.pick(&[0u32, 1, 1, 2, 3]);
        let over = if rng.chance(70) { "over " } else { "" };
        let verdict = if over.is_empty() { "accept" } else { "drop" };
        let r = if rng.chance(50) || !fam.v4() {
            format!("ct state new ct count {over}{n} counter {verdict}")
        } else {
            dyn_sets.push(GenSet {
                kind: "set",
                name: "perhost".into(),
                lines: vec![
                    "type ipv4_addr;".into(),
                    "size 1024;".into(),
                    "flags dynamic;".into(),
                ],
            });
            let proto = rng.pick(&["", "meta l4proto tcp ", "meta l4proto udp "]);
            format!("ct state new {proto}add @perhost {{ ip saddr ct count {over}{n} }} counter {verdict}")
        };
        let at = rng.below(rules.len() as u64 + 1) as usize;
        rules.insert(at, r);
    }
    chains.push(GenChain {
        name: "forward".into(),
        base: Some(format!(
            "type filter hook forward priority {}; policy {fwd_policy};",
            rng.pick(&[0, 0, 0, -10, 10])
        )),
        rules,
    });
    if ct && rng.chance(20) {
        // a raw chain before connection tracking: what it sees, and notrack
        let mut rules = vec![
            format!(
                "{} notrack",
                rng.pick(&["udp dport { 53, 123 }", "meta l4proto icmp", "tcp dport 22"])
            ),
            format!(
                "ct state {} counter",
                rng.pick(&["invalid", "untracked", "new"])
            ),
        ];
        if rng.chance(50) {
            // conntrack zones: the LAN's connections in a zone of their own (both ways, or
            // the original direction only: replies from the WAN stay in zone 0), a zone from
            // a map, a second `ct zone set` that does not count (the first one wins); the
            // forward chain reads them back
            let z = rng.range(1, 9);
            let set = rng
                .pick(&[
                    format!("iifname {{ \"weirlan0\", \"weirwan0\" }} ct zone set {z}"),
                    format!("iifname \"weirlan0\" ct original zone set {z}"),
                    format!("iifname \"weirlan0\" ct zone set {z}"),
                    format!(
                        "ct zone set iifname map {{ \"weirlan0\" : {z}, \"weirdmz0\" : {} }}",
                        z + 1
                    ),
                    format!("ct zone set {z} ct zone set {}", z + 1),
                ])
                .clone();
            let at = rng.below(rules.len() as u64 + 1) as usize;
            rules.insert(at, set);
            if let Some(fwd) = chains.iter_mut().find(|c| c.name == "forward") {
                let read = rng
                    .pick(&[
                        format!("ct zone {z} counter"),
                        format!("ct original zone {z} ct reply zone 0 counter"),
                        format!("ct zone != {z} ct state new counter"),
                        format!("ct zone {{ {z}, {} }} meta mark set 0x{z:x} counter", z + 1),
                    ])
                    .clone();
                fwd.rules.insert(0, read);
            }
        }
        chains.push(GenChain {
            name: "raw".into(),
            base: Some("type filter hook prerouting priority raw; policy accept;".into()),
            rules,
        });
    }
    for (i, u) in users.iter().enumerate() {
        let c = ctx("forward", users[i + 1..].to_vec());
        let n = rng.range(1, 6);
        chains.push(GenChain {
            name: u.clone(),
            base: None,
            rules: (0..n).map(|_| rule(rng, &c, true)).collect(),
        });
    }
    for (hook, pct, prios, drop_pct, nmax) in [
        ("prerouting", 55, &[-150, -150, 0, -300][..], 8, 4),
        ("input", 35, &[0][..], 45, 5),
        ("postrouting", 40, &[100, 300, 0][..], 10, 4),
        ("output", 10, &[0][..], 0, 2),
    ] {
        if !rng.chance(pct) {
            continue;
        }
        let c = ctx(hook, Vec::new());
        let pol = if rng.chance(drop_pct) {
            "drop"
        } else {
            "accept"
        };
        let n = rng.range(1, nmax);
        chains.push(GenChain {
            name: hook.into(),
            base: Some(format!(
                "type filter hook {hook} priority {}; policy {pol};",
                rng.pick(prios)
            )),
            rules: (0..n).map(|_| rule(rng, &c, false)).collect(),
        });
    }
    // stateless NAT: header writes in prerouting / postrouting chains
    for ch in chains.iter_mut() {
        if !matches!(ch.name.as_str(), "prerouting" | "postrouting") || !rng.chance(35) {
            continue;
        }
        let mut cands = Vec::new();
        if fam.v4() {
            if ch.name == "prerouting" {
                cands.push(
                    "ip daddr 198.19.0.2 tcp dport 8080 ip daddr set 198.18.1.16 tcp dport set 80"
                        .to_string(),
                );
                cands
                    .push("iifname \"weirwan0\" udp dport 53 ip daddr set 198.18.1.83".to_string());
                cands.push("udp dport 1000-1010 udp dport set 53".to_string());
            } else {
                cands.push(
                    "oifname \"weirwan0\" ip saddr 198.18.0.0/24 ip saddr set 198.19.0.2"
                        .to_string(),
                );
                cands.push("tcp sport 80 tcp sport set 8080".to_string());
            }
        }
        if fam.v6() {
            if ch.name == "prerouting" {
                cands.push(
                    "ip6 daddr 2001:db8:ffff::2 tcp dport 443 ip6 daddr set 2001:db8:0:2::10"
                        .to_string(),
                );
            } else {
                cands.push("oifname \"weirwan0\" ip6 saddr 2001:db8:0:1::/64 ip6 saddr set 2001:db8:ffff::2".to_string());
            }
        }
        let r = rng.pick(&cands).clone();
        let at = rng.below(ch.rules.len() as u64 + 1) as usize;
        ch.rules.insert(at, r);
    }
    let mut sets = sets;
    sets.extend(dyn_sets);
    if flow {
        sets.push(GenSet {
            kind: "flowtable",
            name: "ft".into(),
            lines: vec![
                "hook ingress priority 0;".into(),
                format!(
                    "devices = {{ {} }};",
                    IFS.iter().map(|i| i.0).collect::<Vec<_>>().join(", ")
                ),
            ],
        });
    }
    let mut tables = vec![GenTable {
        family: fam,
        name: "weirf".into(),
        sets,
        chains,
    }];
    if rng.chance(30) {
        let fam2 = *rng.pick(&[Fam::Inet, Fam::Ip, Fam::Ip6]);
        let c = Ctx {
            w,
            fam: fam2,
            hook: "forward",
            targets: Vec::new(),
            s4: false,
            s6: false,
            ports: false,
            c4: false,
            ci: false,
            vm: false,
            ct,
        };
        let pol = if rng.chance(20) { "drop" } else { "accept" };
        let n = rng.range(1, 4);
        tables.push(GenTable {
            family: fam2,
            name: "weirg".into(),
            sets: Vec::new(),
            chains: vec![GenChain {
                name: "forward".into(),
                base: Some(format!(
                    "type filter hook forward priority {}; policy {pol};",
                    rng.pick(&[-20, 20, 0])
                )),
                rules: (0..n).map(|_| rule(rng, &c, false)).collect(),
            }],
        });
    }
    if ct && rng.chance(50) {
        tables.push(nat_table(rng, fam));
    }
    if rng.chance(30) {
        let (t, marks) = netdev_table(rng, w);
        // the marks the ingress chains set, read by the forward chain
        let fwd = &mut tables[0].chains[0];
        for m in marks {
            if rng.chance(70) {
                let v = *rng.pick(&["drop", "accept", "counter drop", "counter"]);
                let at = rng.below(fwd.rules.len() as u64 + 1) as usize;
                fwd.rules.insert(at, format!("meta mark 0x{m} {v}"));
            }
        }
        tables.push(t);
    }
    GenRuleset { tables }
}
