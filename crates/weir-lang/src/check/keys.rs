//! Selectors and match keys: a selector's field (or the special headers of
//! [`super::headers`]), checked against the table's family, with its masks, shifts and
//! constants folded into a [`KeyPart`]; hashes and number generators.

use super::headers::{inner_part, special_key, target_text, tunnel_of, udp_tunnel_ok};
use super::pending::dependency_clash;
use super::sets::scalar;
use super::tables::{err, Cx};
use crate::ast::{self, Val};
use crate::diag::Diagnostic;
use crate::ir::*;
use crate::source::Span;
use crate::values;
use weir_wire::{DataType, Field, Layer};

fn field_allowed(cx: &mut Cx, f: Field, span: Span) -> bool {
    // (nft reads the other version's ICMP header wherever the protocol number says it is
    // one: an IPv4 packet carrying protocol 58; so does weir)
    let bad = match (cx.family, f.layer()) {
        (Family::Ip, Layer::Ip6) => Some("an ip table sees only IPv4 packets"),
        (Family::Ip6, Layer::Ip4) => Some("an ip6 table sees only IPv6 packets"),
        (Family::Arp, l) if l != Layer::Meta && l != Layer::Link => {
            Some("an arp table sees only ARP packets")
        }
        _ => None,
    };
    if let Some(why) = bad {
        err(
            cx,
            span,
            format!("'{}' can never match here: {why}", f.name()),
        );
        return false;
    }
    // nft_socket_validate: the hooks where a packet may have a local socket
    if let (true, Some((_, h))) = (f.name().starts_with("socket "), cx.cur_hook) {
        if !matches!(h, Hook::Prerouting | Hook::Input | Hook::Output) {
            err(
                cx,
                span,
                format!(
                    "'{}' is read at the prerouting, input and output hooks, not at {}",
                    f.name(),
                    h.name()
                ),
            );
            return false;
        }
    }
    true
}

pub(super) fn lower_key(cx: &mut Cx, e: &ast::Expr) -> Option<Key> {
    match e {
        ast::Expr::Selector(words, span) => {
            let mut name = target_text(e);
            // `rt nexthop` is the table's family's next hop (or the family a match gave)
            if name == "rt nexthop" {
                let l3 = cx.l3_seen.or_else(|| {
                    match cx.eq_seen.iter().find(|(f, _)| *f == Field::MetaNfproto) {
                        Some((_, 2)) => Some(Family::Ip),
                        Some((_, 10)) => Some(Family::Ip6),
                        _ => None,
                    }
                });
                if cx.family == Family::Inet && l3.is_none() {
                    err(cx, *span, "rt nexthop in an inet table needs the family: match meta nfproto first, or write rt ip nexthop / rt ip6 nexthop");
                    return None;
                }
                let v6 = cx.family == Family::Ip6 || l3 == Some(Family::Ip6);
                name = if v6 {
                    "rt ip6 nexthop"
                } else {
                    "rt ip nexthop"
                }
                .to_string();
            }
            if let Some(k) = special_key(cx, words, *span) {
                return k;
            }
            let Some(f) = Field::from_name(&name) else {
                let head = &words[0].name;
                let prefix = if head == "ct" || head == "meta" || words.len() > 1 {
                    format!("{head} ")
                } else {
                    String::new()
                };
                let known: Vec<&str> = Field::ALL
                    .iter()
                    .map(|f| f.name())
                    .filter(|n| !prefix.is_empty() && n.starts_with(&prefix))
                    .collect();
                let mut d = Diagnostic::error(*span, format!("unknown selector '{name}'"));
                if !known.is_empty() {
                    d = d.note(format!("known: {}", known.join(", ")));
                }
                cx.diags.push(d);
                return None;
            };
            if !field_allowed(cx, f, *span) {
                return None;
            }
            // a tunnel's own header field (`vxlan vni`, `gre version`): evaluated as the
            // kernel's inner expression reads it
            if let Some(t) = tunnel_of(f) {
                if !udp_tunnel_ok(cx, t.name(), *span) {
                    return None;
                }
                cx.l4_seen = true;
                return Some(vec![inner_part(t, f)]);
            }
            if !f.evaluated() {
                cx.uneval.push(f.name());
            }
            if f == Field::UdpDport {
                cx.udp_dport_seen = true;
            }
            if let Some(why) = dependency_clash(cx, f) {
                err(
                    cx,
                    *span,
                    format!("'{}' can never match here: {why}", f.name()),
                );
                return None;
            }
            // (`th dport` reads ports of any protocol: it does not say which)
            if matches!(f.layer(), Layer::Transport(_) | Layer::Icmp | Layer::Icmp6) {
                cx.l4_seen = true;
            }
            match f.layer() {
                Layer::Ip4 | Layer::Icmp => cx.l3_seen = Some(Family::Ip),
                Layer::Ip6 | Layer::Icmp6 => cx.l3_seen = Some(Family::Ip6),
                _ => {}
            }

            match f {
                Field::MetaL4proto => cx.l4_dep = cx.l4_dep.or(Some(Family::Inet)),
                Field::IpProtocol => cx.l4_dep = Some(Family::Ip),
                Field::Ip6Nexthdr => cx.l4_dep = Some(Family::Ip6),
                _ => {}
            }
            Some(vec![KeyPart::field(f)])
        }
        ast::Expr::Concat(parts, _) => {
            let mut out = Vec::new();
            for p in parts {
                if let ast::Expr::Const(v) = p {
                    out.push(const_part(cx, v, out.len())?);
                    continue;
                }
                out.extend(lower_key(cx, p)?);
            }
            Some(out)
        }
        // two values combined (nft's bitwise with a second register)
        ast::Expr::BinopExpr(op, a, b, span) => {
            let ka = lower_key(cx, a)?;
            let kb = lower_key(cx, b)?;
            let op = match op {
                ast::BinOp::And => BitOp::And,
                ast::BinOp::Or => BitOp::Or,
                ast::BinOp::Xor => BitOp::Xor,
                // (a shift by another selector's value)
                _ => {
                    cx.uneval.push("an operation between two selectors");
                    return Some(ka);
                }
            };
            let (Ok([pa]), Ok([pb])) = (<[KeyPart; 1]>::try_from(ka), <[KeyPart; 1]>::try_from(kb))
            else {
                err(
                    cx,
                    *span,
                    "a bitwise operation applies to single values, not concatenations",
                );
                return None;
            };
            let dtype = if pa.dtype.bits() >= pb.dtype.bits() {
                pa.dtype
            } else {
                pb.dtype
            };
            Some(vec![KeyPart {
                src: Source::Binop {
                    op,
                    a: Box::new(pa),
                    b: Box::new(pb),
                },
                and: u128::MAX,
                xor: 0,
                shift: 0,
                dtype,
            }])
        }
        ast::Expr::Binop(op, inner, v, span) => {
            let mut k = lower_key(cx, inner)?;
            if k.len() != 1 {
                err(
                    cx,
                    *span,
                    "a bitwise operation applies to a single value, not a concatenation",
                );
                return None;
            }
            let p = &mut k[0];
            match op {
                ast::BinOp::Shl | ast::BinOp::Shr => {
                    let n = scalar(cx, DataType::Integer(8), v)?;
                    if n > 127 {
                        err(cx, *span, "a shift is at most 127 bits");
                        return None;
                    }
                    let n = n as i8;
                    if p.shift != 0 {
                        err(cx, *span, "only one shift per value is supported");
                        return None;
                    }
                    p.shift = if *op == ast::BinOp::Shr { n } else { -n };
                    // (a left shift widens the value, as in the kernel's 32-bit register)
                    let bits = p.dtype.bits() as i32
                        + if *op == ast::BinOp::Shr {
                            -(n as i32)
                        } else {
                            n as i32
                        };
                    // (within nft's 32-bit register, or the field's own width if wider)
                    let top = (p.dtype.bits() as i32).max(32);
                    p.dtype = DataType::Integer(bits.clamp(1, top) as u8);
                }
                _ => {
                    // a constant wider than an integer-based field sets bits of nft's
                    // 32-bit register: `ct mark set ip dscp | 0xff000000`
                    let wide = match v {
                        Val::Word(w, _) if *op != ast::BinOp::And => values::parse_number(w)
                            .filter(|&n| {
                                n >> cx.set_target_bits.min(127) == 0
                                    && p.dtype.bits() < cx.set_target_bits
                                    && n >> p.dtype.bits() != 0
                                    && values::parse_scalar(p.dtype, w).is_err()
                                    && int_based(&p.dtype)
                            }),
                        _ => None,
                    };
                    if wide.is_some() {
                        p.dtype = DataType::Integer(32);
                    }
                    let numeric = numeric_ipv4(p.dtype, v);
                    let v = numeric.as_ref().unwrap_or(v);
                    let mut m = match wide {
                        Some(n) => n,
                        None => scalar(cx, p.dtype, v)?,
                    };
                    if p.shift != 0 {
                        // a mask after a shift moves before it where that is exact:
                        // (x >> n) op m == (x op (m << n)) >> n, and (x << n) op m ==
                        // (x op (m >> n)) << n when m's low n bits are clear (any m for and)
                        let n = p.shift.unsigned_abs() as u32;
                        let moved = if n >= 128 {
                            None
                        } else if p.shift > 0 {
                            let w = p.dtype.bits() + n;
                            m.checked_shl(n).filter(|&x| w >= 128 || x >> w == 0)
                        } else {
                            let low = (1u128 << n) - 1;
                            (*op == ast::BinOp::And || m & low == 0).then_some(m >> n)
                        };
                        match moved {
                            Some(x) => m = x,
                            // (`ip dscp << 26 | 0x10`: weir's key applies its masks before
                            // the shift, so the constant is combined with the shifted value)
                            None if *op != ast::BinOp::And => {
                                let shifted = p.clone();
                                let c = KeyPart {
                                    src: Source::Const(m),
                                    and: u128::MAX,
                                    xor: 0,
                                    shift: 0,
                                    dtype: shifted.dtype,
                                };
                                *p = KeyPart {
                                    src: Source::Binop {
                                        op: if *op == ast::BinOp::Or {
                                            BitOp::Or
                                        } else {
                                            BitOp::Xor
                                        },
                                        a: Box::new(shifted),
                                        b: Box::new(c),
                                    },
                                    and: u128::MAX,
                                    xor: 0,
                                    shift: 0,
                                    dtype: p.dtype,
                                };
                                return Some(k);
                            }
                            None => {
                                err(cx, *span, "this mask after a shift cannot be applied before it: write the mask first");
                                return None;
                            }
                        }
                    }
                    match op {
                        ast::BinOp::And => {
                            p.and &= m;
                            p.xor &= m;
                        }
                        ast::BinOp::Or => {
                            p.and &= !m;
                            p.xor = (p.xor & !m) | m;
                        }
                        _ => p.xor ^= m,
                    }
                }
            }
            Some(k)
        }
        ast::Expr::Hash {
            kind,
            key,
            modulus,
            seed,
            offset,
            ..
        } => {
            let (m, off) = modulus_offset(cx, modulus, offset.as_ref())?;
            let src = if kind.name == "jhash" {
                let k = lower_key(cx, key.as_ref()?)?;
                let s = match seed {
                    Some(s) => scalar(cx, DataType::Integer(32), s)? as u32,
                    None => 0,
                };
                Source::Jhash {
                    key: k,
                    modulus: m,
                    seed: s,
                    offset: off,
                }
            } else {
                Source::Symhash {
                    modulus: m,
                    offset: off,
                }
            };
            Some(vec![KeyPart {
                src,
                and: u128::MAX,
                xor: 0,
                shift: 0,
                dtype: DataType::Integer(32),
            }])
        }
        ast::Expr::Numgen {
            mode,
            modulus,
            offset,
            ..
        } => {
            let random = match mode.name.as_str() {
                "inc" => false,
                "random" => true,
                other => {
                    err(
                        cx,
                        mode.span,
                        format!("numgen mode is inc or random, not '{other}'"),
                    );
                    return None;
                }
            };
            let (m, off) = modulus_offset(cx, modulus, offset.as_ref())?;
            Some(vec![KeyPart {
                src: Source::Numgen {
                    random,
                    modulus: m,
                    offset: off,
                },
                and: u128::MAX,
                xor: 0,
                shift: 0,
                dtype: DataType::Integer(32),
            }])
        }
        ast::Expr::Map(_, _, span) => {
            err(cx, *span, "a map lookup gives a value: use it after 'set' or 'to', or use 'vmap' for verdicts");
            None
        }
        ast::Expr::Const(v) if cx.key_hint.as_ref().is_some_and(|h| h.len() == 1) => {
            Some(vec![const_part(cx, v, 0)?])
        }
        ast::Expr::Const(v) => {
            err(
                cx,
                v.span(),
                "expected a selector (ip saddr, tcp dport, meta mark, ...), found a value",
            );
            None
        }
    }
}

/// A constant as component `i` of a key (`ip saddr . 22 @s`, `add @m { 10.2.3.4 : 1 }`):
/// typed by the named set it meets, the same value for every packet.
fn const_part(cx: &mut Cx, v: &Val, i: usize) -> Option<KeyPart> {
    let Some(dt) = cx.key_hint.as_ref().and_then(|h| h.get(i).copied()) else {
        err(
            cx,
            v.span(),
            "a constant in a key is supported with a named set only (ip saddr . 22 @s)",
        );
        return None;
    };
    let r = super::sets::key_ranges(cx, &[dt], v)?;
    let (lo, hi) = r[0];
    if lo != hi {
        err(cx, v.span(), "a key's constant is one value, not a range");
        return None;
    }
    Some(KeyPart {
        src: Source::Const(lo),
        and: u128::MAX,
        xor: 0,
        shift: 0,
        dtype: dt,
    })
}

/// A number where an IPv4 address goes, as the address it is (`0xff` is `0.0.0.255`).
pub(super) fn numeric_ipv4(dt: DataType, v: &Val) -> Option<Val> {
    let Val::Word(w, s) = v else { return None };
    if dt != DataType::Ipv4Addr {
        return None;
    }
    let n = values::ipv4_from_number(w)?;
    Some(Val::Word(
        std::net::Ipv4Addr::from(n as u32).to_string(),
        *s,
    ))
}

/// Types whose values are plain integers to nft (a DSCP, a port, a protocol, an integer).
pub(super) fn int_based(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Integer(_)
            | DataType::Mark
            | DataType::Dscp
            | DataType::InetService
            | DataType::InetProto
            | DataType::Ecn
    )
}

/// A `ct original|reply saddr|daddr` without its family in `e` (itself or a component of a
/// concatenation): nft takes the family from a single value compared with it, and refuses it
/// in a set, a map key or a concatenation ("specify either ip or ip6").
pub(super) fn bare_ct_address(e: &ast::Expr) -> Option<Span> {
    match e {
        ast::Expr::Selector(ws, sp) => {
            let w: Vec<&str> = ws.iter().map(|w| w.name.as_str()).collect();
            matches!(
                w.as_slice(),
                ["ct", "original" | "reply", "saddr" | "daddr"] | ["ct", "saddr" | "daddr"]
            )
            .then_some(*sp)
        }
        ast::Expr::Concat(es, _) => es.iter().find_map(bare_ct_address),
        _ => None,
    }
}

/// The `mod N [offset O]` of a hash or a number generator (N at least 1).
fn modulus_offset(cx: &mut Cx, modulus: &Val, offset: Option<&Val>) -> Option<(u32, u32)> {
    let m = scalar(cx, DataType::Integer(32), modulus)? as u32;
    if m == 0 {
        err(cx, modulus.span(), "mod must be at least 1");
        return None;
    }
    let off = match offset {
        Some(o) => scalar(cx, DataType::Integer(32), o)? as u32,
        None => 0,
    };
    Some((m, off))
}
