//! The dependencies nft leaves out of a listing, and those it spells out.
//!
//! nft compiles a selector with the matches it implies (`tcp dport` needs `meta l4proto tcp`,
//! `icmp id` an echo type) and, when it lists the rule back, leaves out a match that the next
//! one implies and writes out one a selector needs but the rule did not say (`icmp id 22` lists
//! as `icmp type { echo-reply, echo-request } icmp id 22`).

use super::rule::selector_field;
use crate::ast::{CmpOp, Expr, Item, Rhs, Val};
use crate::ir::Family;
use crate::values;
use weir_wire::{DataType, Layer as L};

/// The words of a selector (`["meta", "l4proto"]`), or nothing for another expression.
pub(super) fn words(e: &Expr) -> Vec<&str> {
    match e {
        Expr::Selector(ws, _) => ws.iter().map(|w| w.name.as_str()).collect(),
        _ => Vec::new(),
    }
}

/// The first selector of an expression (`ip saddr` of `ip saddr . tcp dport`, of `ip dscp &
/// 0x3`).
fn head(e: &Expr) -> Option<&Expr> {
    match e {
        Expr::Concat(es, _) => es.first().and_then(head),
        Expr::Binop(_, inner, _, _) => head(inner),
        Expr::Selector(..) => Some(e),
        _ => None,
    }
}

/// The selector an item reads first: a match's or a verdict map's key.
fn item_head(it: &Item) -> Option<&Expr> {
    match it {
        Item::Match { lhs, .. } => head(lhs),
        Item::Vmap { key, .. } => head(key),
        _ => None,
    }
}

/// Whether match `dep` is a dependency that nft leaves out of the listing because what
/// follows it implies it (`meta nfproto ipv4 ip saddr 1.2.3.4` lists as `ip saddr 1.2.3.4`;
/// in an `ip` table `ip protocol tcp tcp dport 22` as `tcp dport 22`).
pub(super) fn implied(dep: &Item, rest: &[Item], family: Family) -> bool {
    let Item::Match {
        lhs: Expr::Selector(..),
        op: None | Some((CmpOp::Eq, _)),
        rhs,
        ..
    } = dep
    else {
        return false;
    };
    let dep_words = match dep {
        Item::Match { lhs, .. } => words(lhs),
        _ => return false,
    };
    // `meta iiftype ether` before any link-layer match
    if matches!(dep_words.as_slice(), ["meta", "iiftype"] | ["iiftype"])
        && matches!(rhs, Rhs::Val(Val::Word(v, _)) if v == "ether")
    {
        return rest.iter().any(|it| {
            item_head(it).is_some_and(|n| {
                selector_field(n).is_some_and(|f| f.layer() == L::Link)
                    || words(n).first() == Some(&"ether")
            })
        });
    }
    // a protocol dependency waits for its header's match past those of the network layer
    // (`meta l4proto tcp ip daddr 1.2.3.4 tcp dport 22` lists as `ip daddr 1.2.3.4 tcp
    // dport 22`), as nft keeps one pending dependency per header layer
    let l4dep = matches!(
        dep_words.as_slice(),
        ["meta", "l4proto"] | ["l4proto"] | ["ip", "protocol"] | ["ip6", "nexthdr"]
    );
    let skip = if l4dep {
        rest.iter()
            .take_while(|it| {
                matches!(it, Item::Match { .. })
                    && item_head(it).and_then(selector_field).is_some_and(|f| {
                        matches!(f.layer(), L::Ip4 | L::Ip6)
                            && !matches!(
                                words(item_head(it).unwrap()).as_slice(),
                                ["ip", "protocol"] | ["ip6", "nexthdr"]
                            )
                    })
            })
            .count()
    } else {
        0
    };
    let Some(next) = rest.get(skip) else {
        return false;
    };
    // a NAT statement whose map's key reads that protocol's header (`meta l4proto tcp dnat ip
    // to ip saddr . tcp dport map @z` lists as `dnat ip to ip saddr . tcp dport map @z`)
    // (so does a set statement's key or data: `update @s { ip saddr : ip daddr . tcp dport }`)
    if l4dep {
        let exprs: Vec<&Expr> = match next {
            Item::Nat {
                addr: Some(Expr::Map(key, _, _)),
                ..
            } => vec![key.as_ref()],
            Item::SetOp { key, value, .. } => std::iter::once(key).chain(value.as_ref()).collect(),
            _ => vec![],
        };
        if let (false, Rhs::Val(Val::Word(v, _))) = (exprs.is_empty(), rhs) {
            let parts: Vec<&Expr> = exprs
                .into_iter()
                .flat_map(|e| match e {
                    Expr::Concat(es, _) => es.iter().collect::<Vec<_>>(),
                    e => vec![e],
                })
                .collect();
            let p = values::parse_scalar(DataType::InetProto, v).ok();
            return parts.iter().any(|e| {
                matches!(selector_field(e).map(|f| f.layer()), Some(L::Transport(t)) if Some(t as u128) == p)
            });
        }
    }
    // a family's reject: `meta nfproto ipv4 reject` lists as `reject with icmp port-unreachable`
    if let Item::Reject { with, .. } = next {
        let Rhs::Val(Val::Word(v, _)) = rhs else {
            return false;
        };
        let kind = with.as_ref().map(|(k, _)| k.name.as_str());
        return match (dep_words.as_slice(), v.as_str(), kind) {
            (["meta", "nfproto"] | ["nfproto"], "ipv4", None | Some("icmp")) => true,
            (["meta", "nfproto"] | ["nfproto"], "ipv6", None | Some("icmpv6")) => true,
            (["meta", "protocol"] | ["protocol"], "ip", None | Some("icmp")) => {
                family == Family::Netdev
            }
            (["meta", "protocol"] | ["protocol"], "ip6", None | Some("icmpv6")) => {
                family == Family::Netdev
            }
            _ => false,
        };
    }
    let Some(n) = item_head(next) else {
        return false;
    };
    let nwords = words(n);
    let layer = selector_field(n).map(|f| f.layer());
    // an ICMPv6 field of one message type
    if let Rhs::Val(Val::Word(v, _)) = rhs {
        if dep_words == ["icmpv6", "type"] {
            return matches!(
                (v.as_str(), nwords.as_slice()),
                ("packet-too-big", ["icmpv6", "mtu"]) | ("nd-redirect", ["icmpv6", "daddr"])
            );
        }
    }
    let Rhs::Val(Val::Word(v, _)) = rhs else {
        return false;
    };
    let proto = |p: &str| values::parse_scalar(DataType::InetProto, p).ok();
    let of_proto = |p: u128| match layer {
        Some(L::Transport(t)) => t as u128 == p,
        Some(L::Icmp) => p == 1,
        Some(L::Icmp6) => p == 58,
        _ => false,
    };
    let v4 = matches!(layer, Some(L::Ip4 | L::Icmp));
    let v6 = matches!(layer, Some(L::Ip6 | L::Icmp6));
    // in an ip or ip6 table every transport header is of that family
    let l4 = matches!(layer, Some(L::Transport(_)));
    let ct_addr =
        nwords.first() == Some(&"ct") && nwords.iter().any(|w| matches!(*w, "saddr" | "daddr"));
    match (dep_words.as_slice(), v.as_str()) {
        (["meta", "nfproto"] | ["nfproto"], "ipv4") => v4 || ct_addr,
        (["meta", "nfproto"] | ["nfproto"], "ipv6") => v6 || ct_addr,
        (["meta", "l4proto"] | ["l4proto"], p) => proto(p).is_some_and(of_proto),
        (["ip", "protocol"], p) if family == Family::Ip => proto(p).is_some_and(of_proto),
        (["ip6", "nexthdr"], p) if family == Family::Ip6 => proto(p).is_some_and(of_proto),
        (["ether", "type"] | ["meta", "protocol"] | ["protocol"], "ip") => {
            v4 || (family == Family::Ip && l4)
        }
        (["ether", "type"] | ["meta", "protocol"] | ["protocol"], "ip6") => {
            v6 || (family == Family::Ip6 && l4)
        }
        (["ether", "type"], "vlan" | "8021q") => nwords.first().is_some_and(|w| *w == "vlan"),
        _ => false,
    }
}

/// The dependency nft writes out before `it` when the rule did not say it (`before` is what
/// the rule says ahead of `it`).
pub(super) fn added(
    it: &Item,
    before: &[Item],
    family: Family,
    numeric: bool,
) -> Option<&'static str> {
    let said = |ws: &[&str]| {
        before
            .iter()
            .any(|b| item_head(b).is_some_and(|h| words(h) == ws))
    };
    match it {
        Item::Match { lhs, .. } => {
            let w = words(head(lhs)?);
            match w.as_slice() {
                ["icmp", "id" | "sequence"] if !said(&["icmp", "type"]) => {
                    Some("icmp type { echo-reply, echo-request }")
                }
                ["icmpv6", "id" | "sequence"] if !said(&["icmpv6", "type"]) => {
                    Some("icmpv6 type { echo-request, echo-reply }")
                }
                ["icmpv6", "taddr"] if !said(&["icmpv6", "type"]) => Some(
                    "icmpv6 type { mld-listener-query, mld-listener-report, mld-listener-done, \
                     nd-neighbor-solicit, nd-neighbor-advert, nd-redirect }",
                ),
                _ => None,
            }
        }
        // a TCP reset in a table of several families needs TCP said
        Item::Reject {
            with: Some((k, _)), ..
        } if k.name == "tcp"
            && matches!(family, Family::Inet | Family::Netdev | Family::Bridge) =>
        {
            let tcp = before.iter().any(|b| {
                item_head(b).is_some_and(|h| {
                    selector_field(h).is_some_and(|f| f.layer() == L::Transport(6))
                        || (matches!(words(h).as_slice(), ["meta", "l4proto"] | ["ip", "protocol"] | ["ip6", "nexthdr"])
                            && matches!(b, Item::Match { rhs: Rhs::Val(Val::Word(v, _)), .. } if v == "tcp" || v == "6"))
                })
            });
            (!tcp).then_some(if numeric {
                "meta l4proto 6"
            } else {
                "meta l4proto tcp"
            })
        }
        _ => None,
    }
}
