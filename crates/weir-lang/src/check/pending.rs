//! The operands of statements that parse to `ast::Item::Pending` (`queue`, `tproxy`, `dup`,
//! `synproxy`), checked as nft checks them (lowered where weir evaluates them),
//! and the dependencies between a rule's matches that nft checks (`meta nfproto ipv6` then an
//! IPv4 field).

use super::rules::lower_value;
use super::sets::scalar;
use super::tables::{err, other_text, Cx};
use crate::ast::{self, Val};
use crate::ir::*;
use crate::source::Span;
use crate::values;
use weir_wire::{DataType, Field, Layer};

/// Why field `f` can never match after the rule's earlier equalities (nft refuses such
/// rules: the dependency it would add contradicts them): `meta nfproto ipv6` then an IPv4
/// field, `icmp type 2` then `icmp mtu` (which needs destination-unreachable).
pub(super) fn dependency_clash(cx: &Cx, f: Field) -> Option<String> {
    let seen = |g: Field| cx.eq_seen.iter().find(|(h, _)| *h == g).map(|x| x.1);
    match (seen(Field::MetaNfproto), f.layer()) {
        (Some(10), Layer::Ip4) => return Some("the rule matched meta nfproto ipv6".into()),
        (Some(2), Layer::Ip6) => return Some("the rule matched meta nfproto ipv4".into()),
        _ => {}
    }
    // a VLAN header after another ether type (nft: conflicting protocols specified)
    if f.name().starts_with("vlan ") {
        if let Some(t) = seen(Field::EtherType).filter(|&t| t != 0x8100 && t != 0x88a8) {
            return Some(format!(
                "the rule matched ether type 0x{t:04x}, not a VLAN tag"
            ));
        }
    }
    // a transport header after a set of protocols (nft: conflicting protocols specified)
    if cx.proto_set_seen && matches!(f.layer(), Layer::Transport(_)) {
        return Some("the rule matched a set of transport protocols; match one (or use th)".into());
    }
    let need = match f {
        Field::IcmpMtu => Some((Field::IcmpType, 3)),
        Field::IcmpGateway => Some((Field::IcmpType, 5)),
        Field::Icmp6Mtu => Some((Field::Icmp6Type, 2)),
        _ => None,
    };
    match need {
        Some((g, want)) => seen(g).filter(|&v| v != want).map(|v| {
            format!(
                "'{}' is only in {} {want} messages, the rule matched {v}",
                f.name(),
                g.name()
            )
        }),
        None => None,
    }
}

/// Check the operands of a statement weir does not evaluate yet (`queue`, `tproxy`, `dup`,
/// `synproxy`) as nft would.
pub(super) fn lower_pending(
    cx: &mut Cx,
    what: &str,
    family: Option<&ast::Ident>,
    operands: &[(ast::Operand, ast::Expr)],
    span: Span,
) -> bool {
    use ast::Operand as O;
    let fam = family.map(|f| f.name.as_str());
    match (what, fam, cx.family) {
        ("tproxy", Some("ip6"), Family::Ip) | ("tproxy", Some("ip"), Family::Ip6) => {
            err(
                cx,
                span,
                format!(
                    "tproxy {} in an {} table",
                    fam.unwrap_or(""),
                    cx.family.name()
                ),
            );
            return false;
        }
        ("tproxy", None, Family::Inet) if operands.iter().any(|(o, _)| *o == O::Addr) => {
            err(cx, span, "tproxy to an address in an inet table needs its family: tproxy ip to ... or tproxy ip6 to ...");
            return false;
        }
        _ => {}
    }
    if what == "tproxy" {
        // nft: tproxy needs the transport protocol matched first, in the family it sends to
        let clash = match (cx.l4_dep, fam) {
            // a transport header's field (`tcp dport 80`) matches its protocol too
            (None, _) if !cx.l4_seen => {
                Some("match the transport protocol first (meta l4proto tcp tproxy ...)")
            }
            (Some(Family::Ip), Some("ip6")) | (Some(Family::Ip6), Some("ip")) => {
                Some("the protocol match and tproxy name different families")
            }
            _ => None,
        };
        if let Some(why) = clash {
            err(cx, span, format!("tproxy: {why}"));
            return false;
        }
    }
    for (o, e) in operands {
        // `tproxy ip to 192.0.2.1:50080`: the address and the port in one word
        if let (O::Addr, ast::Expr::Const(Val::Word(w, sp))) = (o, e) {
            if let (1, Some((a, p))) = (w.matches(':').count(), w.rsplit_once(':')) {
                let dt = if fam == Some("ip6") {
                    DataType::Ipv6Addr
                } else {
                    DataType::Ipv4Addr
                };
                for (dt, v) in [(dt, a), (DataType::InetService, p)] {
                    if let Err(m) = values::parse_range(dt, v) {
                        err(cx, *sp, m);
                        return false;
                    }
                }
                continue;
            }
        }
        let dt = match o {
            O::Addr => match (fam, cx.family) {
                (Some("ip"), _) | (None, Family::Ip) => DataType::Ipv4Addr,
                (Some("ip6"), _) | (None, Family::Ip6) => DataType::Ipv6Addr,
                // (netdev / inet `dup to ADDR device DEV`: the address says)
                _ => match e {
                    ast::Expr::Const(Val::Word(w, _)) if w.contains(':') => DataType::Ipv6Addr,
                    _ => DataType::Ipv4Addr,
                },
            },
            O::Port => DataType::InetService,
            O::Queue => DataType::Integer(16),
            O::Flag => continue,
            O::Device => DataType::IfName,
            O::Int(n) => DataType::Integer(*n),
            O::Name => {
                // an object a map picks: the map's key is checked, its names are not yet
                if let ast::Expr::Map(k, _, _) = e {
                    if super::rules::lower_key(cx, k).is_none() {
                        return false;
                    }
                }
                continue;
            }
            O::Duration => {
                if let ast::Expr::Const(v) = e {
                    if super::sets::time_val(cx, v).is_none() {
                        return false;
                    }
                }
                continue;
            }
            O::TcpOption => {
                let w = match e {
                    ast::Expr::Const(Val::Word(w, _)) => w.as_str(),
                    _ => "",
                };
                if !super::headers::tcp_option_known(w) {
                    err(cx, e.span(), format!("unknown TCP option '{w}' (a number 0-255 or a name: maxseg, window, sack-perm, sack, timestamp, mptcp, ...)"));
                    return false;
                }
                continue;
            }
        };
        if *o == O::Queue {
            // a queue number computed by a hash or a counter: at most 65535 with its offset
            if let ast::Expr::Hash {
                modulus, offset, ..
            }
            | ast::Expr::Numgen {
                modulus, offset, ..
            } = e
            {
                let m = scalar(cx, DataType::Integer(32), modulus);
                let off = offset
                    .as_ref()
                    .map_or(Some(0), |o| scalar(cx, DataType::Integer(32), o));
                match (m, off) {
                    (Some(m), Some(off)) if m + off <= 65536 => {}
                    (Some(_), Some(_)) => {
                        err(
                            cx,
                            e.span(),
                            "queue numbers are 0-65535: the modulus and the offset reach past them",
                        );
                        return false;
                    }
                    _ => return false,
                }
            }
        }
        if lower_value(cx, &[dt], e).is_none() {
            return false;
        }
    }
    true
}

/// Why a `reject` contradicts the rule's family or earlier matches (nft refuses it): ICMP
/// for IPv6 packets or ICMPv6 for IPv4 ones, a TCP reset for another protocol.
pub(super) fn reject_clash(cx: &Cx, r: &Reject) -> Option<String> {
    let seen = |g: Field| cx.eq_seen.iter().find(|(h, _)| *h == g).map(|x| x.1);
    // the packets' IP version: the table's, or what the rule matched
    let v6 = match cx.family {
        Family::Ip => Some(false),
        Family::Ip6 => Some(true),
        _ => match (seen(Field::MetaNfproto), seen(Field::MetaProtocol)) {
            (Some(10), _) | (_, Some(0x86dd)) => Some(true),
            (Some(2), _) | (_, Some(0x0800)) => Some(false),
            _ => None,
        },
    };
    let v6 = v6.or(match cx.l4_dep {
        Some(Family::Ip) => Some(false),
        Some(Family::Ip6) => Some(true),
        _ => None,
    });
    match (r, v6) {
        (Reject::Icmp(_), Some(true)) => {
            return Some(
                "reject with icmp answers IPv4 packets; these are IPv6 (icmpv6 or icmpx)".into(),
            )
        }
        (Reject::Icmp6(_), Some(false)) => {
            return Some(
                "reject with icmpv6 answers IPv6 packets; these are IPv4 (icmp or icmpx)".into(),
            )
        }
        _ => {}
    }
    if *r == Reject::TcpReset {
        let proto = seen(Field::MetaL4proto)
            .or(seen(Field::IpProtocol))
            .or(seen(Field::Ip6Nexthdr));
        if proto.is_some_and(|p| p != 6) {
            return Some(
                "reject with tcp reset answers TCP packets; the rule matched another protocol"
                    .into(),
            );
        }
    }
    None
}

/// Why a NAT statement contradicts what the rule matched (nft refuses it): a port without
/// the transport protocol matched first; in an inet table, an address whose family neither
/// the statement (`dnat ip to`) nor the rule's address matches (`ip daddr ...`) gives.
pub(super) fn nat_clash(cx: &Cx, nat: &Nat, family_given: bool) -> Option<String> {
    // a map giving address . port sets a port too
    let map_port = match &nat.addr {
        Some(ValueExpr::Map { map, .. }) => {
            let s = match map {
                SetRef::Named(i) => cx.sets.get(*i),
                SetRef::Anon(a) => Some(&**a),
            };
            s.is_some_and(|s| s.data_types.len() > 1)
        }
        _ => false,
    };
    if (nat.port.is_some() || nat.port_range.is_some() || map_port)
        && !cx.l4_seen
        && cx.l4_dep.is_none()
    {
        return Some(
            "NAT to a port needs the transport protocol matched first (meta l4proto tcp ...)"
                .into(),
        );
    }
    if cx.family == Family::Inet && !family_given && nat.addr.is_some() {
        let want = match nat.family {
            Some(6) => Family::Ip6,
            _ => Family::Ip,
        };
        // (the family the rule's matches give: an IPv4 or IPv6 field, or meta nfproto)
        let nfproto = match cx.eq_seen.iter().find(|(f, _)| *f == Field::MetaNfproto) {
            Some((_, 2)) => Some(Family::Ip),
            Some((_, 10)) => Some(Family::Ip6),
            _ => None,
        };
        if cx.l3_seen.or(nfproto) != Some(want) {
            return Some(format!(
                "in an inet table NAT to an address needs its family: {} to ...",
                if want == Family::Ip6 {
                    "dnat ip6 / snat ip6"
                } else {
                    "dnat ip / snat ip"
                }
            ));
        }
    }
    None
}

/// A `synproxy` statement: its settings, or the named object's (a name a map picks is not
/// evaluated yet). nft's kernel takes it at the input and forward hooks only.
pub(super) fn synproxy(
    cx: &mut Cx,
    operands: &[(ast::Operand, ast::Expr)],
    span: Span,
) -> Option<Expr> {
    use crate::ir::Synproxy as S;
    if let Some((ty, hook)) = cx.cur_hook {
        if ty != ChainType::Filter || !matches!(hook, Hook::Input | Hook::Forward) {
            err(
                cx,
                span,
                format!(
                    "synproxy runs at the input and forward hooks of filter chains, not at {}",
                    hook.name()
                ),
            );
            return None;
        }
    }
    if !matches!(cx.family, Family::Ip | Family::Ip6 | Family::Inet) {
        err(cx, span, "synproxy is for ip, ip6 and inet tables");
        return None;
    }
    let mut s = S::default();
    for (o, e) in operands {
        let word = match e {
            ast::Expr::Const(v @ (Val::Word(..) | Val::Str(..))) => Some(other_text(v)),
            _ => None,
        };
        match (o, word) {
            (ast::Operand::Name, Some(n)) => match cx.synproxies.get(&n) {
                Some(x) => return Some(Expr::Synproxy(*x)),
                None => {
                    err(cx, e.span(), format!("no synproxy '{n}' in this table"));
                    return None;
                }
            },
            (ast::Operand::Name, None) => {
                return super::objects::lower_obj_stmt(cx, "synproxy", e);
            }
            (ast::Operand::Int(16), Some(w)) => {
                s.mss = values::parse_scalar(DataType::Integer(16), &w).ok()? as u16;
                s.flags |= S::MSS;
            }
            (ast::Operand::Int(_), Some(w)) => {
                s.wscale = values::parse_scalar(DataType::Integer(8), &w).ok()? as u8;
                s.flags |= S::WSCALE;
            }
            (ast::Operand::Flag, Some(f)) if f == "timestamp" => s.flags |= S::TIMESTAMP,
            (ast::Operand::Flag, Some(f)) if f == "sack-perm" => s.flags |= S::SACK_PERM,
            _ => return Some(Expr::Unevaluated("synproxy")),
        }
    }
    Some(Expr::Synproxy(s))
}

/// `queue to EXPR` (flags as `queue`'s): the number computed per packet.
pub(super) fn queue_to(cx: &mut Cx, operands: &[(ast::Operand, ast::Expr)]) -> Option<Expr> {
    let flag = |f: &str| {
        operands.iter().any(|(o, e)| {
            *o == ast::Operand::Flag && matches!(e, ast::Expr::Const(Val::Word(w, _)) if w == f)
        })
    };
    let (_, e) = operands.iter().find(|(o, _)| *o == ast::Operand::Queue)?;
    let num = lower_value(cx, &[DataType::Integer(16)], e)?;
    Some(Expr::QueueTo {
        num,
        bypass: flag("bypass"),
        fanout: flag("fanout"),
    })
}

/// `tproxy [ip|ip6] to [ADDR][:PORT]` (operands checked by [`lower_pending`]): its family,
/// address and port as values. nft's kernel takes it at the prerouting hook only.
pub(super) fn tproxy(
    cx: &mut Cx,
    family: Option<&ast::Ident>,
    operands: &[(ast::Operand, ast::Expr)],
    span: Span,
) -> Option<Expr> {
    use ast::Operand as O;
    if let Some((_, hook)) = cx.cur_hook {
        if hook != Hook::Prerouting {
            err(
                cx,
                span,
                format!(
                    "tproxy runs at the prerouting hook only, not at {}",
                    hook.name()
                ),
            );
            return None;
        }
    }
    let fam = match (family.map(|f| f.name.as_str()), cx.family) {
        (Some("ip6"), _) | (None, Family::Ip6) => 6,
        (Some("ip"), _) | (None, Family::Ip) => 4,
        (None, Family::Inet) => 0,
        (_, f) => {
            err(
                cx,
                span,
                format!("tproxy is for ip, ip6 and inet tables, not {}", f.name()),
            );
            return None;
        }
    };
    let addr_dt = if fam == 6 {
        DataType::Ipv6Addr
    } else {
        DataType::Ipv4Addr
    };
    let mut t = Tproxy {
        family: fam,
        addr: None,
        port: None,
    };
    let one = |cx: &mut Cx, dt: DataType, e: &ast::Expr| -> Option<ValueExpr> {
        let v = lower_value(cx, &[dt], e)?;
        if let ValueExpr::Range(..) = v {
            err(
                cx,
                e.span(),
                "tproxy sends to one address and port, not a range",
            );
            return None;
        }
        Some(v)
    };
    for (o, e) in operands {
        match (o, e) {
            // `192.0.2.1:50080` in one word
            (O::Addr, ast::Expr::Const(Val::Word(w, _)))
                if fam != 6 && w.matches(':').count() == 1 =>
            {
                let (a, p) = w.rsplit_once(':')?;
                t.addr = Some(ValueExpr::Const(vec![
                    values::parse_scalar(addr_dt, a).ok()?
                ]));
                t.port = Some(ValueExpr::Const(vec![values::parse_scalar(
                    DataType::InetService,
                    p,
                )
                .ok()?]));
            }
            (O::Addr, e) => t.addr = Some(one(cx, addr_dt, e)?),
            (O::Port, e) => t.port = Some(one(cx, DataType::InetService, e)?),
            _ => return Some(Expr::Unevaluated("tproxy")),
        }
    }
    Some(Expr::Tproxy(t))
}
