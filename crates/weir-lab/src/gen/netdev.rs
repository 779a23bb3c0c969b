//! The `netdev` table of a generated ruleset: `ingress` and `egress` chains bound to the
//! router's devices, with drops, marks, stateless rewrites and `fwd`.

use super::router::{Host, World, IFS};
use super::rulesets::*;
use crate::rng::Rng;

/// A match of a netdev chain (nft adds the `meta protocol` / `meta l4proto` a selector
/// needs, as in the other families).
fn netdev_match(rng: &mut Rng, w: &World, egress: bool) -> String {
    let hosts =
        |v6: bool| -> Vec<&Host> { w.hosts.iter().filter(|h| h.addr.is_ipv6() == v6).collect() };
    match rng.weighted(&[30, 12, 25, 8, 5, 5, 6, 4, 5]) {
        0 => {
            let f = *rng.pick(&["saddr", "daddr"]);
            let val = if rng.chance(75) {
                addr_value(rng, w, false).0
            } else {
                brace(&addr_set(rng, w, false, (2, 4)))
            };
            format!("ip {f} {}{val}", neg(rng, 10))
        }
        1 => format!(
            "ip6 {} {}",
            rng.pick(&["saddr", "daddr"]),
            addr_value(rng, w, true).0
        ),
        2 => {
            let p = ["tcp", "udp", "th"][rng.weighted(&[45, 45, 10])];
            let f = if rng.chance(80) { "dport" } else { "sport" };
            let val = match rng.weighted(&[60, 15, 25]) {
                0 => PORTS[rng.below(PORTS.len() as u64) as usize].to_string(),
                1 => {
                    let (a, b) = *rng.pick(&PORT_RANGES);
                    format!("{a}-{b}")
                }
                _ => brace(&port_set(rng, (2, 4))),
            };
            if p == "th" {
                format!("meta l4proto {{ tcp, udp }} th {f} {val}")
            } else {
                format!("{p} {f} {}{val}", neg(rng, 8))
            }
        }
        3 => format!(
            "meta l4proto {}",
            rng.pick(&["tcp", "udp", "icmp", "ipv6-icmp"])
        ),
        4 => rng
            .pick(&[
                "tcp flags syn",
                "tcp flags & (syn | ack) == syn",
                "tcp flags ack",
            ])
            .to_string(),
        5 => rng
            .pick(&[
                "icmp type echo-request",
                "icmpv6 type echo-request",
                "icmp type echo-reply",
            ])
            .to_string(),
        6 => rng
            .pick(&if egress {
                ["ip ttl 63", "ip ttl 64", "ip6 hoplimit 63", "ip ttl < 63"]
            } else {
                ["ip ttl 64", "ip ttl < 64", "ip6 hoplimit 64", "ip ttl 1"]
            })
            .to_string(),
        7 => {
            let hs = hosts(false);
            let h = rng.pick(&hs);
            format!("ether saddr {}", crate::topology::mac_text(&h.mac))
        }
        _ => format!("meta mark 0x{}", rng.range(1, 3)),
    }
}

/// One to three matches of a netdev rule, consistent in protocol; `ip`: at least one of them
/// needs IP (so that the rule never matches the lab's ARP barrier).
fn netdev_matches(rng: &mut Rng, w: &World, egress: bool, ip: bool) -> (Vec<String>, Req) {
    loop {
        let mut parts = Vec::new();
        let mut cons: Req = (None, None);
        for _ in 0..rng.weighted(&[15, 55, 25, 5]) {
            for _ in 0..10 {
                if try_add(&mut parts, &mut cons, netdev_match(rng, w, egress)) {
                    break;
                }
            }
        }
        if !ip || cons.0.is_some() || cons.1.is_some() {
            return (parts, cons);
        }
    }
}

/// A `netdev` table ([`Fam::Netdev`]): chains bound to the router's devices. At ingress:
/// drops, marks (`meta mark set`, then matched in the forward chain), stateless rewrites
/// (`ip daddr set`, `udp dport set`, `ether saddr set`), `fwd to DEV` (the frame leaves by
/// that device as it came) and `fwd ip to ADDR device DEV`; at egress: drops (of what the
/// router routes and of what an ingress chain forwarded) and counters. Policies accept, and
/// no rule without an IP match drops or forwards (the lab's ARP barrier must pass). Returns
/// the table and the marks its ingress chains set.
pub(super) fn netdev_table(rng: &mut Rng, w: &World) -> (GenTable, Vec<u8>) {
    let names: Vec<&str> = IFS.iter().map(|i| i.0).collect();
    let mut chains = Vec::new();
    let mut marks = Vec::new();
    let n_in = rng.weighted(&[15, 55, 30]);
    let n_out = rng.weighted(&[35, 45, 20]);
    for k in 0..n_in + n_out {
        let egress = k >= n_in;
        let dev = if egress {
            names[rng.weighted(&[25, 30, 35, 10])]
        } else {
            names[rng.weighted(&[35, 20, 35, 10])]
        };
        let others: Vec<&str> = names.iter().copied().filter(|n| *n != dev).collect();
        let mut rules = Vec::new();
        for _ in 0..rng.range(1, 4) {
            let r = if egress {
                match rng.weighted(&[55, 25, 10, 10]) {
                    0 => {
                        let (m, _) = netdev_matches(rng, w, true, true);
                        format!("{} {}", m.join(" "), rng.pick(&["drop", "counter drop"]))
                    }
                    1 => {
                        let (m, _) = netdev_matches(rng, w, true, false);
                        format!("{} counter", m.join(" ")).trim().to_string()
                    }
                    2 => {
                        // a mark set at ingress (or prerouting), at egress
                        format!(
                            "meta l4proto {{ tcp, udp, icmp, ipv6-icmp }} meta mark 0x{} drop",
                            rng.range(1, 3)
                        )
                    }
                    _ => {
                        let (m, _) = netdev_matches(rng, w, true, true);
                        format!(
                            "{} ether daddr set {}",
                            m.join(" "),
                            rng.pick(&["02:00:00:00:01:99", "02:00:00:00:02:99"])
                        )
                    }
                }
            } else {
                match rng.weighted(&[25, 25, 20, 5, 15, 10]) {
                    0 => {
                        let (m, _) = netdev_matches(rng, w, false, true);
                        format!("{} {}", m.join(" "), rng.pick(&["drop", "counter drop"]))
                    }
                    1 => {
                        let mark = rng.range(1, 3) as u8;
                        marks.push(mark);
                        let (m, _) = netdev_matches(rng, w, false, false);
                        format!("{} meta mark set 0x{mark}", m.join(" "))
                            .trim()
                            .to_string()
                    }
                    2 => {
                        let (m, _) = netdev_matches(rng, w, false, true);
                        let to = *rng.pick(&others);
                        let macs = if rng.chance(15) {
                            " ether saddr set 02:00:00:00:00:99"
                        } else {
                            ""
                        };
                        format!("{}{macs} fwd to \"{to}\"", m.join(" "))
                    }
                    3 => {
                        // to a neighbour of the DMZ: the TTL decremented, the MACs rewritten
                        if rng.chance(70) {
                            let a = *rng.pick(&["198.18.1.16", "198.18.1.32", "198.18.1.254"]);
                            format!(
                                "ip daddr {} fwd ip to {a} device \"weirdmz0\"",
                                addr_value(rng, w, false).0
                            )
                        } else {
                            let a = *rng.pick(&["2001:db8:0:2::10", "2001:db8:0:2::fe"]);
                            format!(
                                "ip6 daddr {} fwd ip6 to {a} device \"weirdmz0\"",
                                addr_value(rng, w, true).0
                            )
                        }
                    }
                    4 => rng
                        .pick(&[
                            "ip daddr 198.19.0.2 tcp dport 8080 ip daddr set 198.18.1.16 tcp dport set 80",
                            "udp dport 1000-1010 udp dport set 53",
                            "ip daddr 198.18.1.32 ip daddr set 198.18.1.16",
                            "ip daddr 198.19.7.7 ip daddr set 198.19.66.5",
                            "ip daddr 198.18.101.9 ip daddr set 198.18.100.5",
                            "ip6 daddr 2001:db8:0:2::20 ip6 daddr set 2001:db8:0:2::10",
                            "ip saddr 198.18.0.16 ip saddr set 198.18.77.7",
                            "ip saddr 198.19.7.7 ip saddr set 198.18.0.16",
                            "tcp dport 22 tcp dport set 2222",
                            "ip daddr 198.18.0.16 ether daddr set 02:00:00:00:00:99",
                        ])
                        .to_string(),
                    _ => {
                        let (m, _) = netdev_matches(rng, w, false, false);
                        format!("{} counter", m.join(" ")).trim().to_string()
                    }
                }
            };
            rules.push(r);
        }
        let prio = if egress {
            *rng.pick(&[0, 0, -10, 100])
        } else {
            *rng.pick(&[0, 0, -500, -150, 10])
        };
        chains.push(GenChain {
            name: format!("{}{k}", if egress { "out" } else { "in" }),
            base: Some(format!(
                "type filter hook {} device \"{dev}\" priority {prio}; policy accept;",
                if egress { "egress" } else { "ingress" }
            )),
            rules,
        });
    }
    marks.sort();
    marks.dedup();
    (
        GenTable {
            family: Fam::Netdev,
            name: "weirnd".into(),
            sets: Vec::new(),
            chains,
        },
        marks,
    )
}
