//! Statements that send a packet elsewhere: NAT (`snat`, `dnat`, `masquerade`, `redirect`)
//! and the netdev family's `fwd`.

use super::rules::{lower_key, lower_value};
use super::sets::comp_range;
use super::tables::{err, Cx};
use crate::ast::{self, Val};
use crate::diag::Diagnostic;
use crate::ir::*;
use crate::source::Span;
use crate::values::parse_range;
use weir_wire::{DataType, Field};

pub(super) fn lower_nat(
    cx: &mut Cx,
    kind: &ast::Ident,
    family: &Option<ast::Ident>,
    addr: &Option<ast::Expr>,
    port: &Option<ast::Expr>,
    flags: &[ast::Ident],
    span: Span,
) -> Option<Expr> {
    let k = match kind.name.as_str() {
        "snat" => NatKind::Snat,
        "dnat" => NatKind::Dnat,
        "masquerade" => NatKind::Masquerade,
        _ => NatKind::Redirect,
    };
    if let Some((ty, hook)) = cx.cur_hook {
        if ty != ChainType::Nat {
            cx.diags.push(
                Diagnostic::error(span, format!("{} is only allowed in nat chains", kind.name))
                    .note("declare the chain with: type nat hook ... priority ...;"),
            );
            return None;
        }
        let ok = match k {
            NatKind::Snat => matches!(hook, Hook::Postrouting | Hook::Input),
            // (the kernel's masquerade validates postrouting only)
            NatKind::Masquerade => hook == Hook::Postrouting,
            NatKind::Dnat | NatKind::Redirect => matches!(hook, Hook::Prerouting | Hook::Output),
        };
        if !ok {
            let want = if k == NatKind::Masquerade {
                "postrouting"
            } else if k == NatKind::Snat {
                "postrouting or input"
            } else {
                "prerouting or output"
            };
            err(
                cx,
                span,
                format!(
                    "{} belongs in a nat chain at {want}, not {}",
                    kind.name,
                    hook.name()
                ),
            );
            return None;
        }
    }
    let mut fam: Option<u8> = match family.as_ref().map(|f| f.name.as_str()) {
        Some("ip") => Some(4),
        Some("ip6") => Some(6),
        _ => match cx.family {
            Family::Ip => Some(4),
            Family::Ip6 => Some(6),
            _ => None,
        },
    };
    let mut addr_v = None;
    let mut port_v = None;
    let mut port_range = None;
    let mut port_word: Option<(String, Span)> = None;
    if let Some(a) = addr {
        if matches!(k, NatKind::Masquerade | NatKind::Redirect) {
            err(
                cx,
                a.span(),
                format!("{} takes only a port: {} to :PORT", kind.name, kind.name),
            );
            return None;
        }
        match a {
            ast::Expr::Const(Val::Word(w, s)) => {
                // addr, addr-addr, addr:port, addr:port-port (IPv6 with a port is written [addr]:port)
                let (aw, pw) = match (w.matches(':').count(), w.rsplit_once(':')) {
                    (1, Some((x, y))) => (x.to_string(), Some(y.to_string())),
                    _ => (w.clone(), None),
                };
                if fam.is_none() {
                    fam = Some(if aw.contains(':') { 6 } else { 4 });
                }
                let dt = if fam == Some(6) {
                    DataType::Ipv6Addr
                } else {
                    DataType::Ipv4Addr
                };
                match parse_range(dt, &aw) {
                    Ok((lo, hi)) if lo == hi => addr_v = Some(ValueExpr::Const(vec![lo])),
                    Ok((lo, hi)) => addr_v = Some(ValueExpr::Range(lo, hi)),
                    Err(e) => {
                        err(cx, *s, e);
                        return None;
                    }
                }
                if let Some(p) = pw {
                    port_word = Some((p, *s));
                }
            }
            other => {
                let dt = if fam == Some(6) {
                    DataType::Ipv6Addr
                } else {
                    DataType::Ipv4Addr
                };
                let n0 = cx.diags.len();
                let v = match lower_value(cx, &[dt], other) {
                    Some(v) => v,
                    // a map may give address . port (a concatenated value): then the first
                    // try's errors (one per element) go
                    None => {
                        let n1 = cx.diags.len();
                        match lower_value(cx, &[dt, DataType::InetService], other) {
                            Some(v) => {
                                cx.diags.truncate(n0);
                                v
                            }
                            None => {
                                // the try with fewer errors tells (the first on a tie)
                                let (first, second) = (n1 - n0, cx.diags.len() - n1);
                                if second < first {
                                    cx.diags.drain(n0..n1);
                                } else {
                                    cx.diags.truncate(n1);
                                }
                                return None;
                            }
                        }
                    }
                };
                if fam.is_none() {
                    fam = Some(4);
                }
                addr_v = Some(v);
            }
        }
    }
    if let Some(p) = port {
        match p {
            ast::Expr::Const(v) => match comp_range(cx, DataType::InetService, v) {
                Some((lo, hi)) => port_range = Some((lo as u16, hi as u16)),
                None => return None,
            },
            other => port_v = Some(lower_value(cx, &[DataType::InetService], other)?),
        }
    }
    if let Some((pw, s)) = port_word {
        match parse_range(DataType::InetService, &pw) {
            Ok((lo, hi)) => port_range = Some((lo as u16, hi as u16)),
            Err(e) => {
                err(cx, s, e);
                return None;
            }
        }
    }
    // (`dnat to :80`: the address stays, the port changes)
    if matches!(k, NatKind::Snat | NatKind::Dnat)
        && addr_v.is_none()
        && port_v.is_none()
        && port_range.is_none()
    {
        err(
            cx,
            span,
            format!(
                "{} needs an address or a port: {} to ADDRESS[:PORT] or {} to :PORT",
                kind.name, kind.name, kind.name
            ),
        );
        return None;
    }
    let mut nat = Nat {
        kind: k,
        family: fam,
        addr: addr_v,
        port: port_v,
        port_range,
        random: false,
        fully_random: false,
        persistent: false,
        netmap: flags.iter().any(|f| f.name == "prefix"),
    };
    for f in flags {
        match f.name.as_str() {
            "random" => nat.random = true,
            "fully-random" => nat.fully_random = true,
            "persistent" => nat.persistent = true,
            _ => {}
        }
    }
    Some(Expr::Nat(nat))
}

/// `fwd to DEV`, `fwd ip|ip6 to ADDR device DEV`: only in the netdev family (nft refuses it
/// in the others: "unsupported family"), whose chains hook ingress and egress.
pub(super) fn lower_fwd(
    cx: &mut Cx,
    family: &Option<ast::Ident>,
    addr: &Option<ast::Expr>,
    dev: &ast::Expr,
    span: Span,
) -> Option<Expr> {
    if cx.family != Family::Netdev {
        cx.diags.push(
            Diagnostic::error(
                span,
                format!(
                    "'fwd' is only allowed in the netdev family (ingress and egress chains), \
                     not in the {} family",
                    cx.family.name()
                ),
            )
            .note(
                "forward from a netdev chain: table netdev NAME { chain C { type filter hook \
                 ingress device \"eth0\" priority 0; ... fwd to \"eth1\" } }",
            ),
        );
        return None;
    }
    let neigh = match (family, addr) {
        (Some(f), Some(a)) => {
            let (fam, dt) = if f.name == "ip6" {
                (6, DataType::Ipv6Addr)
            } else {
                (4, DataType::Ipv4Addr)
            };
            let v = lower_value(cx, &[dt], a)?;
            if let ValueExpr::Range(..) = v {
                err(
                    cx,
                    a.span(),
                    "fwd sends to one next hop, not to a range or prefix of addresses",
                );
                return None;
            }
            Some((fam, v))
        }
        _ => None,
    };
    let dev = lower_fwd_dev(cx, dev, "fwd")?;
    Some(Expr::Fwd(Fwd { dev, neigh }))
}

/// `dup to ADDR [device DEV]` (ip, ip6) or `dup to DEV` (netdev), its operands checked by
/// `lower_pending`: nft takes it in those families only ("unsupported family"), a device
/// alone only in netdev, an address only in ip and ip6 ("cannot specify device").
pub(super) fn lower_dup(
    cx: &mut Cx,
    operands: &[(ast::Operand, ast::Expr)],
    span: Span,
) -> Option<Expr> {
    let mut addr = operands.iter().find(|(o, _)| *o == ast::Operand::Addr);
    let mut dev = operands.iter().find(|(o, _)| *o == ast::Operand::Device);
    if addr.is_none() && matches!(cx.family, Family::Ip | Family::Ip6) {
        // (`dup to ADDR`: the parser cannot tell an address alone from a device)
        addr = dev.take();
    }
    let fam = match cx.family {
        Family::Ip => 4,
        Family::Ip6 => 6,
        Family::Netdev => 0,
        f => {
            err(
                cx,
                span,
                format!(
                    "dup: unsupported family {} (dup is for ip, ip6 and netdev tables)",
                    f.name()
                ),
            );
            return None;
        }
    };
    let addr = match (fam, addr) {
        (0, Some(_)) => {
            err(cx, span, "dup in a netdev table: cannot specify device (dup to DEV sends the frame out of DEV)");
            return None;
        }
        (0, None) => None,
        (_, None) => {
            err(
                cx,
                span,
                "dup in an ip or ip6 table needs the gateway's address: dup to ADDR [device DEV]",
            );
            return None;
        }
        (f, Some((_, a))) => {
            let dt = if f == 6 {
                DataType::Ipv6Addr
            } else {
                DataType::Ipv4Addr
            };
            let v = lower_value(cx, &[dt], a)?;
            if let ValueExpr::Range(..) = v {
                err(
                    cx,
                    a.span(),
                    "dup sends to one gateway, not to a range or prefix of addresses",
                );
                return None;
            }
            Some((f, v))
        }
    };
    let dev = match dev {
        Some((_, d)) => Some(lower_fwd_dev(cx, d, "dup")?),
        None => None,
    };
    Some(Expr::Dup(Dup { addr, dev }))
}

/// The device of `fwd` (or `dup`: `what`), as an interface-name value.
fn lower_fwd_dev(cx: &mut Cx, e: &ast::Expr, what: &str) -> Option<ValueExpr> {
    const HOW: &str = "a device is a name (\"eth0\"), meta iif or meta oif, or an inline map \
                       to device names (meta mark map { 1 : \"eth0\", 2 : \"eth1\" })";
    match e {
        ast::Expr::Const(Val::Word(..) | Val::Str(..)) => {
            match lower_value(cx, &[DataType::IfName], e)? {
                ValueExpr::Const(c) if c.len() == 1 => Some(ValueExpr::Const(c)),
                _ => {
                    err(
                        cx,
                        e.span(),
                        format!("{what} sends to one device, not to a wildcard or range of names"),
                    );
                    None
                }
            }
        }
        ast::Expr::Selector(..) => {
            let k = lower_key(cx, e)?;
            // the device of an index is the device of that name: weir keeps devices by name
            let name = match k.as_slice() {
                [p] if p.is_plain() && p.src == Source::Field(Field::MetaIif) => Field::MetaIifname,
                [p] if p.is_plain() && p.src == Source::Field(Field::MetaOif) => Field::MetaOifname,
                _ => {
                    cx.diags.push(
                        Diagnostic::error(
                            e.span(),
                            format!("{what} to: this does not give a device"),
                        )
                        .note(HOW),
                    );
                    return None;
                }
            };
            Some(ValueExpr::Key(vec![KeyPart::field(name)]))
        }
        ast::Expr::Map(_, ast::SetRef::Named(id), _) => {
            cx.diags.push(
                Diagnostic::error(
                    id.span,
                    format!(
                        "{what} to '@{}': weir takes the devices of {what} from an inline map of \
                         names only (a named map holds them as interface indices)",
                        id.name
                    ),
                )
                .note(HOW),
            );
            None
        }
        ast::Expr::Map(..) => lower_value(cx, &[DataType::IfName], e),
        _ => {
            cx.diags
                .push(Diagnostic::error(e.span(), format!("{what} sends to one device")).note(HOW));
            None
        }
    }
}
