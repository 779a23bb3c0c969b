//! Statements weir checks but does not evaluate yet (`queue`, `tproxy`, `dup`, `synproxy`),
//! and the dependencies between a rule's matches that nft checks (`meta nfproto ipv6` then an
//! IPv4 field).

use super::rules::lower_value;
use super::sets::scalar;
use super::tables::{err, Cx};
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
            (None, _) => Some("match the transport protocol first (meta l4proto tcp tproxy ...)"),
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
    // a named limit the table declares
    if what == "limit name" {
        if let Some((_, ast::Expr::Const(v @ (Val::Word(..) | Val::Str(..))))) = operands.first() {
            let name = super::tables::other_text(v);
            if !cx.limits.contains(&name) {
                err(cx, v.span(), format!("no limit '{name}' in this table"));
                return false;
            }
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
            O::Device => DataType::IfName,
            O::Int(n) => DataType::Integer(*n),
            O::Name => continue,
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
