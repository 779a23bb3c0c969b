//! One rule in nft's canonical form, from its syntax tree: selectors with their `meta`
//! (`meta mark`, but `iifname`), operators as symbols (`&`, `|`, `!=`), constants re-typed by
//! the selector they meet, statements with nft's defaults spelt out (`burst 5 packets`) or
//! left out (`log level warn`).

use super::{bits, deps, quote, value, Options};
use crate::ast::{self, BinOp, CmpOp, Expr, Item, MapData, Rhs, Val, VerdictAst};
use crate::ir::Family;
use crate::source::{SourceMap, Span};
use crate::values;
use std::cell::Cell;
use weir_wire::{DataType, Field};

/// Metadata keys nft prints without `meta` in front.
const UNQUALIFIED: &[&str] = &["iif", "oif", "iifname", "oifname", "iifgroup", "oifgroup"];

/// What printing a rule needs besides the rule: the source text (for what is printed as
/// written) and the options.
pub(super) struct Ctx<'a> {
    pub src: &'a SourceMap,
    pub opts: Options,
    /// Integers of the selector being printed are in hexadecimal (`ip frag-off 0xde`, raw
    /// payload), as nft's header templates say for these fields.
    pub hex: Cell<bool>,
    /// The components of the concatenation being printed that are raw payload, which nft
    /// lists in hexadecimal (`ip saddr . @ih,32,32 { 1.1.1.1 . 0x14 }`).
    pub hex_parts: std::cell::RefCell<Vec<bool>>,
}

/// The source text of a span, whitespace collapsed.
fn raw(src: &Ctx<'_>, span: Span) -> String {
    src.src
        .text(span)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// A rule of a table of `family` as nft lists it.
pub fn rule(r: &ast::Rule, family: Family, sources: &SourceMap, opts: &Options) -> String {
    let cx = Ctx {
        src: sources,
        opts: *opts,
        hex: Cell::new(false),
        hex_parts: Default::default(),
    };
    let src = &cx;
    let mut parts = Vec::new();
    let mut comment = None;
    let mut l3: Option<u8> = match family {
        Family::Ip => Some(4),
        Family::Ip6 => Some(6),
        _ => None,
    };
    // the transport protocols a `meta l4proto` match said, for raw payload at @th
    let mut l4: Option<Vec<String>> = None;
    for (i, it) in r.items.iter().enumerate() {
        if let Item::Comment(c, _) = it {
            comment = Some(c.clone());
            continue;
        }
        if let Item::Match { lhs, rhs, .. } = it {
            if let Some(f) = selector_field(lhs) {
                match f.layer() {
                    weir_wire::Layer::Ip4 | weir_wire::Layer::Icmp => l3 = Some(4),
                    weir_wire::Layer::Ip6 | weir_wire::Layer::Icmp6 => l3 = Some(6),
                    _ => {}
                }
            }
            match (deps::words(lhs).as_slice(), rhs) {
                (["meta", "nfproto"] | ["meta", "protocol"], Rhs::Val(Val::Word(v, _))) => {
                    match v.as_str() {
                        "ipv4" | "ip" => l3 = Some(4),
                        "ipv6" | "ip6" => l3 = Some(6),
                        _ => {}
                    }
                }
                (["meta", "l4proto"], Rhs::Val(Val::Word(v, _))) => l4 = Some(vec![v.clone()]),
                (["meta", "l4proto"], Rhs::Set(ast::SetRef::Anon(es, _))) => {
                    l4 = Some(es.iter().map(|e| val_text(&e.key, src)).collect())
                }
                _ => {}
            }
        }
        let rest = &r.items[i + 1..];
        // `meta l4proto tcp @th,16,16 22` is `tcp dport 22`
        let before_raw_port = rest.first().is_some_and(|n| raw_port(n).is_some());
        if deps::implied(it, rest, family) || (before_raw_port && l4_single(it).is_some()) {
            continue;
        }
        if let Some(d) = deps::added(it, &r.items[..i], family, opts.numeric_proto) {
            if !parts.iter().any(|p| p == d) {
                // a statement's dependency leads the rule, a match's comes right before it
                if matches!(it, Item::Reject { .. }) {
                    parts.insert(0, d.to_string());
                } else {
                    parts.push(d.to_string());
                }
            }
        }
        let prev_l4 = i
            .checked_sub(1)
            .and_then(|p| l4_single(&r.items[p]))
            .map(|p| vec![p.to_string()]);
        let ctx_l4 = prev_l4.as_deref().or(l4.as_deref());
        parts.push(match ctx_l4.and_then(|p| raw_transport(it, p)) {
            Some(s) => s,
            None => item(it, l3, family, src),
        });
    }
    if let Some(c) = comment {
        parts.push(format!("comment \"{c}\""));
    }
    parts.join(" ")
}

/// The protocol of `meta l4proto P` when it is one protocol with ports.
fn l4_single(it: &Item) -> Option<&'static str> {
    let Item::Match {
        lhs,
        op: None | Some((CmpOp::Eq, _)),
        rhs: Rhs::Val(Val::Word(v, _)),
        ..
    } = it
    else {
        return None;
    };
    if deps::words(lhs) != ["meta", "l4proto"] {
        return None;
    }
    l4_name(v)
}

/// `sport` or `dport` for a match on the transport ports as raw payload (`@th,16,16 22`).
fn raw_port(it: &Item) -> Option<&'static str> {
    let Item::Match { lhs, .. } = it else {
        return None;
    };
    match deps::words(lhs).as_slice() {
        ["@th", "0", "16"] => Some("sport"),
        ["@th", "16", "16"] => Some("dport"),
        _ => None,
    }
}

/// A match on the transport ports as raw payload (`@th,16,16 22`) as nft lists it where the
/// protocol is known: `tcp dport 22` after one protocol, `th dport 22` after several.
fn raw_transport(it: &Item, protos: &[String]) -> Option<String> {
    let field = raw_port(it)?;
    let Item::Match { op, rhs, .. } = it else {
        return None;
    };
    let base = match protos {
        [p] => l4_name(p)?,
        ps if ps.iter().all(|p| l4_name(p).is_some()) => "th",
        _ => return None,
    };
    let sel = format!("{base} {field}");
    let o = match op.map(|o| o.0) {
        Some(CmpOp::Ne) => "!= ",
        _ => "",
    };
    let r = match rhs {
        Rhs::Set(ast::SetRef::Anon(es, _)) => {
            let items: Option<Vec<String>> = es
                .iter()
                .map(|e| match &e.key {
                    Val::Word(v, _) => values::parse_number(v).map(|n| n.to_string()),
                    _ => None,
                })
                .collect();
            format!("{{ {} }}", items?.join(", "))
        }
        Rhs::Val(Val::Word(v, _)) => values::parse_number(v)?.to_string(),
        _ => return None,
    };
    Some(format!("{sel} {o}{r}"))
}

/// A transport protocol with ports, by name or number, as nft names it.
fn l4_name(p: &str) -> Option<&'static str> {
    Some(match values::parse_scalar(DataType::InetProto, p).ok()? {
        6 => "tcp",
        17 => "udp",
        33 => "dccp",
        132 => "sctp",
        136 => "udplite",
        _ => return None,
    })
}

fn selector_words(words: &[ast::Ident]) -> String {
    let w: Vec<&str> = words.iter().map(|w| w.name.as_str()).collect();
    if let Some(raw) = w.first().filter(|h| h.starts_with('@')) {
        // raw payload: @base,offset,length
        let _ = raw;
        return w.join(",");
    }
    if w.first() == Some(&"fib") && w.len() >= 3 {
        return format!("fib {} {}", w[1..w.len() - 1].join(" . "), w[w.len() - 1]);
    }
    if w.len() == 5 && w[0] == "tcp" && w[1] == "option" && w[2].starts_with('@') {
        return format!("tcp option {}", w[2..].join(","));
    }
    if w.len() >= 3 && w[0] == "tcp" && w[1] == "option" && w[2] == "sack0" {
        let mut v = w.clone();
        v[2] = "sack";
        return v.join(" ");
    }
    // `spnum 0` is the default nft leaves out; `meta secpath` is nft's older name
    if w.first() == Some(&"ipsec") {
        if let Some(i) = w.iter().position(|x| *x == "spnum") {
            if w.get(i + 1)
                .is_some_and(|n| values::parse_number(n) == Some(0))
            {
                let mut v = w.clone();
                v.drain(i..i + 2);
                return v.join(" ");
            }
        }
    }
    match w.as_slice() {
        ["meta", "secpath"] | ["secpath"] => "meta ipsec".to_string(),
        // the protocol is the same in both directions
        ["ct", "original" | "reply", "protocol"] => "ct protocol".to_string(),
        ["meta", k] if UNQUALIFIED.contains(k) => k.to_string(),
        [k] if !UNQUALIFIED.contains(k) => format!("meta {k}"),
        _ => w.join(" "),
    }
}

pub(super) fn selector_field(e: &Expr) -> Option<Field> {
    match e {
        Expr::Selector(ws, _) => Field::from_name(
            &ws.iter()
                .map(|w| w.name.as_str())
                .collect::<Vec<_>>()
                .join(" "),
        ),
        _ => None,
    }
}

/// The types of an expression's value, one per component of a concatenation (`None` where
/// the printer does not know it).
fn expr_types(e: &Expr) -> Vec<Option<DataType>> {
    match e {
        Expr::Selector(ws, _) => {
            let w: Vec<&str> = ws.iter().map(|w| w.name.as_str()).collect();
            let special = match w.as_slice() {
                ["tcp", "option", "mptcp", "subtype"] => Some(DataType::MptcpSubtype),
                ["ipsec", _, .., "reqid" | "spi"] => Some(DataType::Integer(32)),
                // a tunnel's inner packet: the inner field's type
                ["vxlan" | "geneve" | "gre" | "gretap", inner @ ..] if inner.len() >= 2 => {
                    Field::from_name(&inner.join(" ")).map(|f| f.datatype())
                }
                _ => bits::raw_bits(e)
                    .filter(|(_, len)| *len <= 128)
                    .map(|(_, len)| DataType::Integer(len as u8)),
            };
            vec![special.or_else(|| selector_field(e).map(|f| f.datatype()))]
        }
        // (raw payload in a concatenation keeps its values as written: nft lists them in
        // hexadecimal, which the component's type cannot say)
        Expr::Concat(es, _) => es
            .iter()
            .flat_map(|e| match bits::raw_bits(e) {
                Some(_) => vec![None],
                None => expr_types(e),
            })
            .collect(),
        Expr::Binop(_, inner, _, _) | Expr::BinopExpr(_, inner, _, _) => expr_types(inner),
        Expr::Hash { .. } | Expr::Numgen { .. } => vec![Some(DataType::Integer(32))],
        Expr::Map(..) | Expr::Const(_) => vec![None],
    }
}

fn binop(op: BinOp) -> &'static str {
    match op {
        BinOp::And => "&",
        BinOp::Or => "|",
        BinOp::Xor => "^",
        BinOp::Shl => "<<",
        BinOp::Shr => ">>",
    }
}

/// An expression as nft prints it, constants typed by `ty` where they stand alone.
pub(super) fn expr_text(e: &Expr, src: &Ctx<'_>) -> String {
    expr_typed(e, None, src)
}

fn expr_typed(e: &Expr, ty: Option<DataType>, src: &Ctx<'_>) -> String {
    match e {
        Expr::Selector(ws, _) => selector_words(ws),
        Expr::Concat(es, _) => es
            .iter()
            .map(|x| expr_text(x, src))
            .collect::<Vec<_>>()
            .join(" . "),
        Expr::Binop(op, inner, v, _) => {
            let t = expr_types(inner).first().copied().flatten();
            let shift = matches!(op, BinOp::Shl | BinOp::Shr);
            let left = match &**inner {
                Expr::Binop(iop, ..) if shift && !matches!(iop, BinOp::Shl | BinOp::Shr) => {
                    format!("({})", expr_text(inner, src))
                }
                _ => expr_text(inner, src),
            };
            // a shift's amount is a plain number; a value combined with a shifted one is an
            // integer nft prints in hexadecimal
            let after_shift = matches!(&**inner, Expr::Binop(BinOp::Shl | BinOp::Shr, ..));
            let r = match (t, v) {
                (Some(dt), v) if bits::is_bitmask(dt) && bits::flag_bits(dt, v).is_some() => {
                    bits::union(dt, bits::flag_bits(dt, v).unwrap_or(0), true)
                }
                (Some(dt), Val::Word(w, _)) if after_shift => values::parse_scalar(dt, w)
                    .map(|n| format!("0x{n:x}"))
                    .unwrap_or_else(|_| w.clone()),
                _ => val(if shift { None } else { t }, v, src),
            };
            format!("{left} {} {r}", binop(*op))
        }
        Expr::BinopExpr(op, a, b, _) => {
            format!("{} {} {}", expr_text(a, src), binop(*op), expr_text(b, src))
        }
        Expr::Hash {
            kind,
            key,
            modulus,
            seed,
            offset,
            ..
        } => {
            let mut s = kind.name.clone();
            if let Some(k) = key {
                s.push(' ');
                s.push_str(&expr_text(k, src));
            }
            s.push_str(&format!(" mod {}", val_text(modulus, src)));
            if let Some(v) = seed {
                let t = val_text(v, src);
                match values::parse_number(&t) {
                    Some(n) => s.push_str(&format!(" seed 0x{n:x}")),
                    None => s.push_str(&format!(" seed {t}")),
                }
            }
            if let Some(v) = offset {
                s.push_str(&format!(" offset {}", val_text(v, src)));
            }
            s
        }
        Expr::Numgen {
            mode,
            modulus,
            offset,
            ..
        } => {
            let mut s = format!("numgen {} mod {}", mode.name, val_text(modulus, src));
            if let Some(v) = offset {
                s.push_str(&format!(" offset {}", val_text(v, src)));
            }
            s
        }
        Expr::Map(k, m, _) => {
            let kt = expr_types(k);
            format!("{} map {}", expr_text(k, src), set_ref(&kt, ty, m, src))
        }
        Expr::Const(v) => val(ty, v, src),
    }
}

/// A value as written (whitespace collapsed).
pub(super) fn val_text(v: &Val, src: &Ctx<'_>) -> String {
    match v {
        Val::Word(w, _) => w.clone(),
        Val::Str(s, _) => format!("\"{s}\""),
        _ => raw(src, v.span()),
    }
}

/// One value as nft prints it, protocols by number where the options say so.
fn fmt(src: &Ctx<'_>, dt: DataType, v: u128) -> String {
    if dt == DataType::InetProto && src.opts.numeric_proto {
        return v.to_string();
    }
    if src.hex.get() && matches!(dt, DataType::Integer(_)) {
        return format!("0x{v:x}");
    }
    value::format(dt, v)
}

/// An inclusive range as nft prints it (see [`value::range`]).
fn fmt_range(src: &Ctx<'_>, dt: DataType, lo: u128, hi: u128) -> String {
    if lo != hi && dt == DataType::InetProto && src.opts.numeric_proto {
        return format!("{lo}-{hi}");
    }
    if lo != hi && src.hex.get() && matches!(dt, DataType::Integer(_)) {
        return format!("0x{lo:x}-0x{hi:x}");
    }
    if lo == hi {
        return fmt(src, dt, lo);
    }
    value::range(dt, lo, hi)
}

/// A constant of type `dt`; a number where an IPv4 address goes is the address it is (nft
/// lists `ip saddr & 0xff` as `& 0.0.0.255`).
fn scalar(dt: DataType, w: &str) -> Option<u128> {
    values::parse_scalar(dt, w).ok().or_else(|| {
        (dt == DataType::Ipv4Addr)
            .then(|| values::ipv4_from_number(w))
            .flatten()
    })
}

fn word(src: &Ctx<'_>, dt: DataType, w: &str) -> Option<String> {
    if let Some(v) = scalar(dt, w) {
        return Some(fmt(src, dt, v));
    }
    if let Some((base, len)) = w.split_once('/') {
        let b = values::parse_scalar(dt, base).ok()?;
        let (lo, hi) = values::prefix_range(dt, b, len).ok()?;
        if !matches!(dt, DataType::Ipv4Addr | DataType::Ipv6Addr) {
            // an integer prefix is a mask: `meta mark 0xffffff00/24`
            let mask = !(hi - lo) & (u128::MAX >> (128 - dt.bits()));
            return Some(format!("& {} == {}", fmt(src, dt, mask), fmt(src, dt, lo)));
        }
        return Some(fmt_range(src, dt, lo, hi));
    }
    if w.contains('-') {
        let (lo, hi) = values::parse_range(dt, w).ok()?;
        // written as a range, listed as one (not as a prefix)
        if lo != hi && matches!(dt, DataType::Ipv4Addr | DataType::Ipv6Addr) {
            return Some(format!("{}-{}", fmt(src, dt, lo), fmt(src, dt, hi)));
        }
        return Some(fmt_range(src, dt, lo, hi));
    }
    None
}

/// A constant typed `ty` as nft prints it.
fn val(ty: Option<DataType>, v: &Val, src: &Ctx<'_>) -> String {
    let Some(dt) = ty else {
        return match v {
            Val::Set(es, _) => elems(&[], None, es, src),
            Val::Concat(vs, _) => vs
                .iter()
                .map(|x| val(None, x, src))
                .collect::<Vec<_>>()
                .join(" . "),
            Val::Range(a, b) => format!("{}-{}", val(None, a, src), val(None, b, src)),
            _ => val_text(v, src),
        };
    };
    match v {
        // names nft keeps as written: interfaces by name, dates and times of day
        Val::Word(w, _) if dt == DataType::IfIndex && values::parse_number(w).is_none() => {
            format!("\"{w}\"")
        }
        Val::Str(s, _) if matches!(dt, DataType::IfIndex | DataType::Date) => {
            format!("\"{s}\"")
        }
        Val::Word(w, _) if dt == DataType::Devgroup && w == "default" => "\"default\"".into(),
        Val::Str(s, _) if dt == DataType::Devgroup => format!("\"{s}\""),
        Val::Word(w, _) => word(src, dt, w).unwrap_or_else(|| w.clone()),
        Val::Str(s, _) => match dt {
            DataType::IfName | DataType::Str16 => format!("\"{s}\""),
            _ => word(src, dt, s).unwrap_or_else(|| format!("\"{s}\"")),
        },
        Val::Range(a, b) => format!("{}-{}", val(ty, a, src), val(ty, b, src)),
        Val::Prefix(a, n) => {
            let base = val_text(a, src);
            let len = val_text(n, src);
            word(src, dt, &format!("{base}/{len}")).unwrap_or_else(|| format!("{base}/{len}"))
        }
        Val::List(vs, _) => {
            let mut acc = 0u128;
            for x in vs {
                match x {
                    Val::Word(w, _) => match values::parse_scalar(dt, w) {
                        Ok(n) => acc |= n,
                        Err(_) => return raw(src, v.span()),
                    },
                    _ => return raw(src, v.span()),
                }
            }
            fmt(src, dt, acc)
        }
        // an address . port a NAT map gives
        Val::Concat(vs, _) => vs
            .iter()
            .enumerate()
            .map(|(i, x)| {
                let t = match dt {
                    DataType::Ipv4Addr | DataType::Ipv6Addr if i > 0 => Some(DataType::InetService),
                    _ => ty,
                };
                val(t, x, src)
            })
            .collect::<Vec<_>>()
            .join(" . "),
        Val::Set(es, _) => elems(&[Some(dt)], None, es, src),
    }
}

/// A key of possibly several components, each typed.
fn key(tys: &[Option<DataType>], v: &Val, src: &Ctx<'_>) -> String {
    match v {
        Val::Word(w, _) if w == "*" => "*".to_string(),
        Val::Concat(vs, _) if tys.len() > 1 => vs
            .iter()
            .enumerate()
            .map(|(i, x)| {
                let hex = src.hex_parts.borrow().get(i).copied().unwrap_or(false);
                let was = src.hex.replace(src.hex.get() || hex);
                let s = val(tys.get(i).copied().flatten(), x, src);
                src.hex.set(was);
                s
            })
            .collect::<Vec<_>>()
            .join(" . "),
        _ => val(tys.first().copied().flatten(), v, src),
    }
}

fn verdict(v: &VerdictAst) -> String {
    match v {
        VerdictAst::Accept(_) => "accept".into(),
        VerdictAst::Drop(_) => "drop".into(),
        VerdictAst::Continue(_) => "continue".into(),
        VerdictAst::Return(_) => "return".into(),
        VerdictAst::Jump(c, _) => format!("jump {}", quote(&c.name)),
        VerdictAst::Goto(c, _) => format!("goto {}", quote(&c.name)),
    }
}

/// The elements of a named set or map as declared (`elements = { ... }`), keys typed
/// `tys`, data `data`: in their order, with their options, never merged.
/// A named set's elements as written, each as nft lists it (the caller wraps them).
pub(super) fn declared_elems(
    tys: &[Option<DataType>],
    data: Option<DataType>,
    es: &[ast::Elem],
    src: &Ctx<'_>,
) -> Vec<String> {
    elem_items(tys, data, es, src)
}

/// `{ a, b : c, ... }`: keys typed `tys`, map data typed `data`.
fn elems(
    tys: &[Option<DataType>],
    data: Option<DataType>,
    es: &[ast::Elem],
    src: &Ctx<'_>,
) -> String {
    if let Some(merged) = merged_intervals(tys, data, es, src) {
        return merged;
    }
    elem_list(tys, data, es, src)
}

fn elem_list(
    tys: &[Option<DataType>],
    data: Option<DataType>,
    es: &[ast::Elem],
    src: &Ctx<'_>,
) -> String {
    format!("{{ {} }}", elem_items(tys, data, es, src).join(", "))
}

fn elem_items(
    tys: &[Option<DataType>],
    data: Option<DataType>,
    es: &[ast::Elem],
    src: &Ctx<'_>,
) -> Vec<String> {
    es.iter()
        .map(|e| {
            // a map's key range that is a prefix is listed as one, as in sets
            let mut s = match tys {
                [Some(dt)]
                    if e.data.is_some() && !matches!(dt, DataType::IfName | DataType::Str16) =>
                {
                    match range_of(*dt, &e.key) {
                        Some((lo, hi, true)) => fmt_range(src, *dt, lo, hi),
                        _ => key(tys, &e.key, src),
                    }
                }
                _ => key(tys, &e.key, src),
            };
            if matches!(e.key, Val::List(..)) {
                // flags together in one element: nft lists `fin | ack`
                s = s.replace(',', " | ");
            }
            for (k, v) in &e.options {
                s.push(' ');
                s.push_str(&k.name);
                if k.name == "counter" {
                    // its values as written (nft lists them), else zero
                    if !src.opts.stateless {
                        match v {
                            Some(v) => s.push_str(&format!(" {}", val_text(v, src))),
                            None => s.push_str(" packets 0 bytes 0"),
                        }
                    }
                    continue;
                }
                if let Some(v) = v {
                    s.push(' ');
                    s.push_str(&match k.name.as_str() {
                        "timeout" | "expires" => time(v, src),
                        "comment" => format!("\"{}\"", val_text(v, src).trim_matches('"')),
                        "limit" | "quota" => value::byte_units(&val_text(v, src)),
                        _ => val_text(v, src),
                    });
                }
            }
            match &e.data {
                Some(MapData::Verdict(v)) => s.push_str(&format!(" : {}", verdict(v))),
                Some(MapData::Value(v)) => s.push_str(&format!(" : {}", data_val(data, v, src))),
                None => {}
            }
            s
        })
        .collect()
}

/// A map's data: a host prefix (`1.1.2.69/32`, an interval of data of one address) as nft
/// lists it, not as the address.
fn data_val(data: Option<DataType>, v: &Val, src: &Ctx<'_>) -> String {
    if let (Some(dt @ (DataType::Ipv4Addr | DataType::Ipv6Addr)), Val::Word(w, _)) = (data, v) {
        if let Some((a, n)) = w.split_once('/') {
            // (a prefix of data is listed as one: `192.168.4.2/31`)
            if n.parse::<u32>().is_ok_and(|n| n <= dt.bits()) {
                return format!(
                    "{}/{n}",
                    val(data, &Val::Word(a.to_string(), v.span()), src)
                );
            }
        }
    }
    val(data, v, src)
}

/// A value as the range of numbers it stands for.
fn range_of(dt: DataType, v: &Val) -> Option<(u128, u128, bool)> {
    match v {
        Val::Word(w, _) => {
            if let Ok(x) = values::parse_scalar(dt, w) {
                return Some((x, x, false));
            }
            if let Some((base, len)) = w.split_once('/') {
                let b = values::parse_scalar(dt, base).ok()?;
                let (lo, hi) = values::prefix_range(dt, b, len).ok()?;
                return Some((lo, hi, true));
            }
            let (lo, hi) = values::parse_range(dt, w).ok()?;
            Some((lo, hi, true))
        }
        Val::Range(a, b) => {
            let (lo, _, _) = range_of(dt, a)?;
            let (_, hi, _) = range_of(dt, b)?;
            Some((lo, hi, true))
        }
        _ => None,
    }
}

/// The elements of an anonymous interval set as nft keeps them: overlapping and adjacent
/// ranges merged (`{ 33-55, 56-88 }` is `{ 33-88 }`). None when the set has no range, or
/// anything but plain keys of one known type.
fn merged_intervals(
    tys: &[Option<DataType>],
    data: Option<DataType>,
    es: &[ast::Elem],
    src: &Ctx<'_>,
) -> Option<String> {
    let [Some(dt)] = tys else {
        return None;
    };
    if data.is_some() || matches!(dt, DataType::IfName | DataType::Str16) {
        return None;
    }
    let mut rs = Vec::new();
    let mut any_range = false;
    for e in es {
        if e.data.is_some() || !e.options.is_empty() {
            return None;
        }
        let (lo, hi, r) = range_of(*dt, &e.key)?;
        any_range |= r;
        rs.push((lo, hi));
    }
    if !any_range {
        return None;
    }
    rs.sort();
    let mut out: Vec<(u128, u128)> = Vec::new();
    for (lo, hi) in rs {
        match out.last_mut() {
            Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
            _ => out.push((lo, hi)),
        }
    }
    let items: Vec<String> = out
        .into_iter()
        .map(|(lo, hi)| fmt_range(src, *dt, lo, hi))
        .collect();
    Some(format!("{{ {} }}", items.join(", ")))
}

fn time(v: &Val, src: &Ctx<'_>) -> String {
    let t = val_text(v, src);
    match values::parse_time_ms(&t) {
        Ok(ms) => value::duration(ms as u128),
        Err(_) => t,
    }
}

fn set_ref(
    tys: &[Option<DataType>],
    data: Option<DataType>,
    r: &ast::SetRef,
    src: &Ctx<'_>,
) -> String {
    match r {
        ast::SetRef::Named(id) => format!("@{}", quote(&id.name)),
        ast::SetRef::Anon(es, _) => elems(tys, data, es, src),
    }
}

/// A byte count with the largest unit that divides it (`1 kbytes`, `1025 bytes`).
fn bytes(n: u128) -> String {
    for (u, m) in [
        ("gbytes", 1u128 << 30),
        ("mbytes", 1 << 20),
        ("kbytes", 1 << 10),
    ] {
        if n >= m && n.is_multiple_of(m) {
            return format!("{} {u}", n / m);
        }
    }
    format!("{n} bytes")
}

fn byte_unit(u: &str) -> Option<u128> {
    Some(match u {
        "bytes" => 1,
        "kbytes" => 1 << 10,
        "mbytes" => 1 << 20,
        "gbytes" => 1 << 30,
        _ => return None,
    })
}

/// `N unit` (no spaces needed) as a byte count.
fn parse_bytes(s: &str) -> Option<u128> {
    let d = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let n: u128 = s[..d].parse().ok()?;
    let u = s[d..].trim();
    Some(n * if u.is_empty() { 1 } else { byte_unit(u)? })
}

fn limit(over: bool, rate: &[Val], burst: Option<&Vec<Val>>, src: &Ctx<'_>) -> Option<String> {
    let r: String = rate.iter().map(|v| val_text(v, src)).collect();
    let (amount, unit) = r.split_once('/')?;
    if !["second", "minute", "hour", "day", "week"].contains(&unit) {
        return None;
    }
    let over = if over { "over " } else { "" };
    let b: Option<String> = burst.map(|b| b.iter().map(|v| val_text(v, src)).collect());
    if amount.chars().all(|c| c.is_ascii_digit()) {
        let burst = match &b {
            Some(b) => b.strip_suffix("packets").unwrap_or(b).parse::<u64>().ok()?,
            None => 5,
        };
        return Some(format!(
            "limit rate {over}{amount}/{unit} burst {burst} packets"
        ));
    }
    let n = parse_bytes(amount)?;
    let mut s = format!("limit rate {over}{}/{unit}", bytes(n));
    if let Some(b) = b {
        let bn = parse_bytes(&b)?;
        if bn > 0 {
            s.push_str(&format!(" burst {}", bytes(bn)));
        }
    }
    Some(s)
}

fn log(options: &[(ast::Ident, Option<Val>)], src: &Ctx<'_>) -> String {
    let get = |k: &str| {
        options
            .iter()
            .find(|(n, _)| n.name == k)
            .map(|(_, v)| v.as_ref().map(|v| val_text(v, src)).unwrap_or_default())
    };
    let mut s = "log".to_string();
    if let Some(p) = get("prefix") {
        let p = p.trim_matches('"');
        s.push_str(&format!(" prefix \"{p}\""));
    }
    if let Some(l) = get("level") {
        if l != "warn" {
            s.push_str(&format!(" level {l}"));
        }
    }
    for k in ["group", "snaplen", "queue-threshold"] {
        if let Some(v) = get(k) {
            s.push_str(&format!(" {k} {v}"));
        }
    }
    let flags: Vec<String> = options
        .iter()
        .filter(|(n, _)| n.name == "flags")
        .map(|(_, v)| v.as_ref().map(|v| raw(src, v.span())).unwrap_or_default())
        .collect();
    if !flags.is_empty() {
        let all = flags.iter().any(|f| f == "all")
            || (["ip options", "ether", "skuid"]
                .iter()
                .all(|f| flags.iter().any(|x| x == f))
                && flags.iter().any(|x| {
                    x.starts_with("tcp") && x.contains("sequence") && x.contains("options")
                }));
        if all {
            s.push_str(" flags all");
        } else {
            // in nft's order: tcp, ip options, skuid, ether
            let rank = |f: &String| match f.as_str() {
                t if t.starts_with("tcp") => 0,
                "ip options" => 1,
                "skuid" => 2,
                "ether" => 3,
                _ => 4,
            };
            let mut flags = flags;
            flags.sort_by_key(rank);
            for f in flags {
                s.push_str(&format!(" flags {f}"));
            }
        }
    }
    s
}

fn item(it: &Item, l3: Option<u8>, family: Family, src: &Ctx<'_>) -> String {
    match it {
        Item::Match { lhs, op, rhs, .. } => {
            let tys = raw_parts_hex(lhs, src);
            src.hex.set(bits::is_hex(binop_base(lhs)));
            let s = match_text(lhs, *op, rhs, &tys, l3, family, src);
            src.hex.set(false);
            src.hex_parts.borrow_mut().clear();
            s
        }
        Item::Vmap { key: k, map, .. } => {
            let tys = raw_parts_hex(k, src);
            let s = format!(
                "{} vmap {}",
                expr_text(k, src),
                set_ref(&tys, None, map, src)
            );
            src.hex_parts.borrow_mut().clear();
            s
        }
        Item::Verdict(v) => verdict(v),
        _ => statement(it, l3, family, src),
    }
}

/// The selector under masks and shifts (`ip frag-off` of `ip frag-off & 0x1fff`).
fn binop_base(e: &Expr) -> &Expr {
    match e {
        Expr::Binop(_, inner, _, _) => binop_base(inner),
        e => e,
    }
}

fn match_text(
    lhs: &Expr,
    op: Option<(CmpOp, Span)>,
    rhs: &Rhs,
    tys: &[Option<DataType>],
    l3: Option<u8>,
    family: Family,
    src: &Ctx<'_>,
) -> String {
    {
        {
            let bang = op.is_some_and(|(_, sp)| src.src.text(sp) == "!");
            if let Some(dt) = tys
                .first()
                .copied()
                .flatten()
                .filter(|d| bits::is_bitmask(*d))
            {
                if let Some(s) = bits::bitmask_match(dt, lhs, op, rhs, bang, src) {
                    return s;
                }
            }
            if let Some(s) = bits::raw_sub_byte(lhs, op, rhs) {
                return s;
            }
            if let Some(s) = masked_prefix(lhs, op, rhs, tys) {
                return s;
            }
            if let Expr::Selector(ws, _) = lhs {
                // `ct count [over] N` (the parser gives `>` for over)
                if ws.len() == 2 && ws[0].name == "ct" && ws[1].name == "count" {
                    let over = matches!(op, Some((CmpOp::Gt, _)));
                    let n = match rhs {
                        Rhs::Val(v) => val_text(v, src),
                        Rhs::Set(_) => String::new(),
                    };
                    return format!("ct count {}{n}", if over { "over " } else { "" });
                }
            }
            // `x ^ A == B` is `x == A ^ B`
            if let (
                Expr::Binop(BinOp::Xor, inner, Val::Word(a, _), _),
                None | Some((CmpOp::Eq | CmpOp::Ne, _)),
                Rhs::Val(Val::Word(b, _)),
            ) = (lhs, op, rhs)
            {
                if let (Some(dt), Some(a), Some(b)) = (
                    tys.first().copied().flatten(),
                    values::parse_number(a),
                    values::parse_number(b),
                ) {
                    let ne = matches!(op, Some((CmpOp::Ne, _)));
                    return format!(
                        "{} {}{}",
                        expr_text(inner, src),
                        if ne { "!= " } else { "" },
                        fmt(src, dt, a ^ b)
                    );
                }
            }
            let l = expr_text(lhs, src);
            let o = match op.map(|o| o.0) {
                Some(CmpOp::Ne) if bang => "! ",
                // (nft lists a masked value's comparison with its `==`)
                None if matches!(lhs, Expr::Binop(..)) && matches!(rhs, Rhs::Val(_)) => "== ",
                None => "",
                Some(CmpOp::Eq) if matches!(lhs, Expr::Binop(..)) => "== ",
                Some(CmpOp::Eq) => "",
                Some(CmpOp::Ne) => "!= ",
                Some(CmpOp::Lt) => "< ",
                Some(CmpOp::Gt) => "> ",
                Some(CmpOp::Le) => "<= ",
                Some(CmpOp::Ge) => ">= ",
            };
            let r = match rhs {
                Rhs::Val(v) => key(tys, v, src),
                Rhs::Set(s) => set_ref(tys, None, s, src),
            };
            // flags that must all be clear: nft lists `ct state != established | related`
            let r = if o == "!= " && matches!(rhs, Rhs::Val(Val::List(..))) && !r.contains(' ') {
                r.replace(',', " | ")
            } else {
                r
            };
            let mut l = inet_ct_address(l, family, l3);
            // `fib daddr oif exists` is nft's fib check
            if l.starts_with("fib ") && (r == "exists" || r == "missing") {
                if let Some(head) = l
                    .strip_suffix(" oif")
                    .or_else(|| l.strip_suffix(" oifname"))
                {
                    l = format!("{head} check");
                }
            }
            format!("{l} {o}{r}")
        }
    }
}

/// `ct original saddr` after a match that gives the family, in a table of several, as nft
/// lists it: `ct original ip saddr`.
fn inet_ct_address(l: String, family: Family, l3: Option<u8>) -> String {
    let w: Vec<&str> = l.split(' ').collect();
    let fam = match l3 {
        Some(4) => "ip",
        Some(6) => "ip6",
        _ => return l,
    };
    match w.as_slice() {
        ["ct", dir @ ("original" | "reply"), a @ ("saddr" | "daddr")] if family == Family::Inet => {
            format!("ct {dir} {fam} {a}")
        }
        // `rt nexthop` lists with its family everywhere
        ["rt", "nexthop"] => format!("rt {fam} nexthop"),
        _ => l,
    }
}

/// A statement (anything but a match, a verdict map or a verdict) as nft lists it.
fn statement(it: &Item, l3: Option<u8>, family: Family, src: &Ctx<'_>) -> String {
    let text = statement_text(it, l3, family, src);
    const BY_MAP: [&str; 7] = [
        "counter name ",
        "quota name ",
        "limit name ",
        "synproxy name ",
        "ct helper set ",
        "ct timeout set ",
        "ct expectation set ",
    ];
    if BY_MAP.iter().any(|p| text.starts_with(p)) {
        quote_object_names(&text)
    } else {
        text
    }
}

/// An object map written in a rule (`limit name tcp dport map { 80 : http-traffic }`) with
/// its objects' names quoted, as nft lists them (`80 : "http-traffic"`).
fn quote_object_names(text: &str) -> String {
    let (Some(open), Some(close)) = (text.find("map {"), text.rfind('}')) else {
        return text.to_string();
    };
    let body = &text[open + 5..close];
    let items: Vec<String> = body
        .split(',')
        .map(|it| match it.split_once(" : ") {
            Some((k, v)) => {
                let v = v.trim();
                let v = if v.starts_with('"') {
                    v.to_string()
                } else {
                    format!("\"{v}\"")
                };
                format!("{} : {v}", k.trim())
            }
            None => it.trim().to_string(),
        })
        .collect();
    format!(
        "{}map {{ {} }}{}",
        &text[..open],
        items.join(", "),
        &text[close + 1..]
    )
}

fn statement_text(it: &Item, l3: Option<u8>, family: Family, src: &Ctx<'_>) -> String {
    let opts = &src.opts;
    match it {
        Item::Match { .. } | Item::Vmap { .. } | Item::Verdict(_) => item(it, l3, family, src),
        Item::Counter {
            name,
            packets,
            bytes,
            ..
        } => match name {
            Some(n) => format!("counter name {}", val_text(n, src)),
            None if opts.stateless => "counter".to_string(),
            None => format!(
                "counter packets {} bytes {}",
                packets
                    .as_ref()
                    .map(|v| val_text(v, src))
                    .unwrap_or("0".into()),
                bytes
                    .as_ref()
                    .map(|v| val_text(v, src))
                    .unwrap_or("0".into())
            ),
        },
        Item::Log { options, .. } => log(options, src),
        Item::Limit {
            over,
            rate,
            burst,
            span,
        } => limit(*over, rate, burst.as_ref(), src).unwrap_or_else(|| raw(src, *span)),
        Item::Quota {
            over,
            amount,
            used,
            name,
            span,
        } => {
            if let Some(n) = name {
                return format!("quota name {}", val_text(n, src));
            }
            let a: String = amount.iter().map(|v| val_text(v, src)).collect();
            let Some(n) = parse_bytes(&a) else {
                return raw(src, *span);
            };
            let mut s = format!("quota {}{}", if *over { "over " } else { "" }, bytes(n));
            if let Some(u) = used {
                let t: String = u.iter().map(|v| val_text(v, src)).collect();
                if let Some(un) = parse_bytes(&t) {
                    if un > 0 {
                        s.push_str(&format!(" used {}", bytes(un)));
                    }
                }
            }
            s
        }
        Item::Reject { with, span } => {
            reject(with.as_ref(), l3, family, src).unwrap_or_else(|| raw(src, *span))
        }
        Item::Assign { target, value, .. } => {
            let t = expr_types(target).first().copied().flatten();
            src.hex.set(bits::is_hex(target));
            let s = format!(
                "{} set {}",
                expr_text(target, src),
                expr_typed(value, t, src)
            );
            src.hex.set(false);
            s
        }
        Item::Nat {
            kind,
            family: nat_family,
            addr,
            port,
            flags,
            span,
        } => {
            let fam = nat_family.as_ref().map(|f| f.name.as_str());
            let v6 = match fam {
                Some("ip6") => true,
                Some("ip") => false,
                _ => l3 == Some(6),
            };
            let at = if v6 {
                DataType::Ipv6Addr
            } else {
                DataType::Ipv4Addr
            };
            let mut s = kind.name.clone();
            // in a table of several families nft names the address's family
            let fam = fam.or(match (family, addr, l3) {
                (Family::Inet, Some(_), Some(4)) => Some("ip"),
                (Family::Inet, Some(_), Some(6)) => Some("ip6"),
                _ => None,
            });
            if let Some(f) = fam {
                s.push(' ');
                s.push_str(f);
            }
            if flags.iter().any(|f| f.name == "prefix") {
                s.push_str(" prefix");
            }
            // an address range as nft lists it: a prefix where it is one
            let range = match addr {
                Some(Expr::Const(v)) => range_of(at, v).filter(|r| r.0 != r.1),
                _ => None,
            };
            let a = match range {
                Some((lo, hi, _)) if v6 && port.is_some() => Some(format!(
                    "{}]-[{}",
                    value::format(at, lo),
                    value::format(at, hi)
                )),
                Some((lo, hi, _)) => Some(value::range(at, lo, hi)),
                None => addr.as_ref().map(|a| expr_typed(a, Some(at), src)),
            };
            let p = port
                .as_ref()
                .map(|p| expr_typed(p, Some(DataType::InetService), src));
            match (a, p) {
                (Some(a), Some(p)) if v6 && matches!(addr, Some(Expr::Const(_))) => {
                    s.push_str(&format!(" to [{a}]:{p}"))
                }
                (Some(a), Some(p)) => s.push_str(&format!(" to {a}:{p}")),
                (Some(a), None) => s.push_str(&format!(" to {a}")),
                (None, Some(p)) => s.push_str(&format!(" to :{p}")),
                (None, None) => {}
            }
            if flags.iter().any(|f| f.name != "prefix") {
                // in the order nft lists them
                const ORDER: [&str; 3] = ["random", "fully-random", "persistent"];
                let mut f: Vec<&str> = flags
                    .iter()
                    .map(|f| f.name.as_str())
                    .filter(|f| *f != "prefix")
                    .collect();
                f.sort_by_key(|x| ORDER.iter().position(|o| o == x).unwrap_or(ORDER.len()));
                s.push(' ');
                s.push_str(&f.join(","));
            }
            let _ = span;
            s
        }
        Item::Notrack(_) => "notrack".to_string(),
        Item::Fwd {
            family, addr, dev, ..
        } => match (family, addr) {
            (Some(f), Some(a)) => format!(
                "fwd {} to {} device {}",
                f.name,
                expr_typed(
                    a,
                    Some(if f.name == "ip6" {
                        DataType::Ipv6Addr
                    } else {
                        DataType::Ipv4Addr
                    }),
                    src
                ),
                expr_typed(dev, Some(DataType::IfName), src)
            ),
            _ => format!("fwd to {}", expr_typed(dev, Some(DataType::IfName), src)),
        },
        Item::FlowAdd(ft, _) => format!("flow add @{}", quote(&ft.name)),
        Item::SetOp {
            op,
            set,
            key: k,
            timeout,
            stmts,
            value,
            ..
        } => {
            let mut s = format!("{} @{} {{ {}", op.name, quote(&set.name), expr_text(k, src));
            if let Some(t) = timeout {
                s.push_str(&format!(" timeout {}", time(t, src)));
            }
            for st in stmts {
                s.push(' ');
                match st {
                    // nft lists a set statement's counter without values
                    Item::Counter { name: None, .. } => s.push_str("counter"),
                    _ => s.push_str(&item(st, l3, family, src)),
                }
            }
            if let Some(v) = value {
                s.push_str(&format!(" : {}", expr_text(v, src)));
            }
            s.push_str(" }");
            s
        }
        Item::Comment(c, _) => format!("comment \"{c}\""),
        // nft lists `last` without the time it was last used
        Item::Pending { what: "last", .. } => "last".to_string(),
        Item::Pending {
            what: "queue",
            operands,
            span,
            ..
        } => {
            // `queue [flags bypass,fanout] to N`, the older `num N bypass` words as flags
            let text = raw(src, *span);
            let flags: Vec<&str> = ["bypass", "fanout"]
                .into_iter()
                .filter(|f| text.split([' ', ',']).any(|w| w == *f))
                .collect();
            let mut s = "queue".to_string();
            if !flags.is_empty() {
                s.push_str(&format!(" flags {}", flags.join(",")));
            }
            let to = operands
                .iter()
                .find(|(o, _)| *o == ast::Operand::Queue)
                .map(|(_, e)| expr_typed(e, Some(DataType::Integer(16)), src))
                .unwrap_or_else(|| "0".into());
            s.push_str(&format!(" to {to}"));
            s
        }
        Item::Pending {
            what: "tproxy",
            family: fam,
            operands,
            ..
        } => {
            // the family is said only where the table has several
            let mut s = "tproxy".to_string();
            if let Some(f) = fam.as_ref().filter(|_| family == Family::Inet) {
                s.push_str(&format!(" {}", f.name));
            }
            let v6 = fam.as_ref().map_or(l3 == Some(6), |f| f.name == "ip6");
            let mut to = String::new();
            for (o, e) in operands {
                match o {
                    ast::Operand::Addr if v6 => to.push_str(&format!(
                        "[{}]",
                        expr_typed(e, Some(DataType::Ipv6Addr), src)
                    )),
                    ast::Operand::Addr => {
                        to.push_str(&expr_typed(e, Some(DataType::Ipv4Addr), src))
                    }
                    _ => to.push_str(&format!(
                        ":{}",
                        expr_typed(e, Some(DataType::InetService), src)
                    )),
                }
            }
            s.push_str(&format!(" to {to}"));
            s
        }
        Item::Pending {
            what: "dup",
            operands,
            ..
        } => {
            // `dup to ADDR device DEV` / `dup to DEV`, constants typed (map keys too)
            let mut s = "dup to".to_string();
            for (o, e) in operands {
                // (`dup to 192.168.2.1`: an address alone, in an ip or ip6 table)
                let addr_alone =
                    matches!(e, Expr::Const(Val::Word(w, _)) if w.contains(['.', ':']));
                let t = match o {
                    ast::Operand::Addr | ast::Operand::Device
                        if addr_alone || *o == ast::Operand::Addr =>
                    {
                        if l3 == Some(6) {
                            DataType::Ipv6Addr
                        } else {
                            DataType::Ipv4Addr
                        }
                    }
                    _ => DataType::IfName,
                };
                if *o == ast::Operand::Device && operands.len() > 1 {
                    s.push_str(" device");
                }
                s.push(' ');
                s.push_str(&expr_typed(e, Some(t), src));
            }
            s
        }
        Item::Pending {
            what: "reset tcp option",
            operands,
            span,
            ..
        } => match operands.first() {
            Some((_, Expr::Const(Val::Word(w, _)))) => {
                let name = values::parse_number(w)
                    .and_then(crate::check::tcp_option_name)
                    .unwrap_or(w.as_str());
                format!("reset tcp option {name}")
            }
            _ => raw(src, *span),
        },
        Item::Pending { span, .. } => raw(src, *span),
    }
}

/// `reject` as nft lists it: the family's default type left out (`reject with icmp
/// port-unreachable` is `reject` in an ip table), a type of the family a dependency gave
/// spelt out (`meta nfproto ipv4 reject` is `reject with icmp port-unreachable` in inet),
/// codes by name.
fn reject(
    with: Option<&(ast::Ident, Option<Val>)>,
    l3: Option<u8>,
    family: Family,
    src: &Ctx<'_>,
) -> Option<String> {
    let multi = matches!(family, Family::Inet | Family::Netdev | Family::Bridge);
    let (kind, code) = match with {
        None if multi => match l3 {
            Some(4) => ("icmp", 3),
            Some(6) => ("icmpv6", 4),
            _ => return Some("reject".into()),
        },
        None => return Some("reject".into()),
        Some((k, _)) if k.name == "tcp" => return Some("reject with tcp reset".into()),
        Some((k, v)) => {
            let t = val_text(v.as_ref()?, src);
            let code = values::reject_code(&k.name, &t)?;
            (k.name.as_str(), code)
        }
    };
    let default = match (family, kind) {
        (Family::Ip, "icmp") => code == 3,
        (Family::Ip6, "icmpv6") => code == 4,
        (_, "icmpx") if multi => code == 1,
        _ => false,
    };
    if default {
        return Some("reject".into());
    }
    let name = values::REJECT_CODES
        .iter()
        .find(|(k, _, c)| *k == kind && *c == code)
        .map(|(_, n, _)| n.to_string())
        .unwrap_or_else(|| code.to_string());
    Some(format!("reject with {kind} {name}"))
}

/// An address masked by a prefix's mask and compared with an address of that prefix, as nft
/// lists it: `ip saddr & 255.255.0.0 == 255.255.0.0` is `ip saddr 255.255.0.0/16`.
fn masked_prefix(
    lhs: &Expr,
    op: Option<(CmpOp, Span)>,
    rhs: &Rhs,
    tys: &[Option<DataType>],
) -> Option<String> {
    let (Expr::Binop(BinOp::And, inner, Val::Word(m, _), _), Rhs::Val(Val::Word(v, _))) =
        (lhs, rhs)
    else {
        return None;
    };
    let dt = tys.first().copied().flatten()?;
    if !matches!(dt, DataType::Ipv4Addr | DataType::Ipv6Addr) {
        return None;
    }
    let bits = dt.bits();
    let all = u128::MAX >> (128 - bits);
    let mask = scalar(dt, m)?;
    let val = scalar(dt, v)?;
    let len = mask.count_ones();
    let prefix_mask = if len == 0 { 0 } else { all & !(all >> len) };
    if mask != prefix_mask || val & !mask != 0 {
        return None;
    }
    let o = match op.map(|o| o.0) {
        None | Some(CmpOp::Eq) => "",
        Some(CmpOp::Ne) => "!= ",
        _ => return None,
    };
    Some(format!(
        "{} {o}{}/{len}",
        selector_words_of(inner)?,
        value::format(dt, val)
    ))
}

fn selector_words_of(e: &Expr) -> Option<String> {
    match e {
        Expr::Selector(ws, _) => Some(selector_words(ws)),
        _ => None,
    }
}

/// The component types of a key, raw payload in a concatenation typed as an integer of its
/// width and marked to print in hexadecimal (`src.hex_parts`).
fn raw_parts_hex(e: &Expr, src: &Ctx<'_>) -> Vec<Option<DataType>> {
    let Expr::Concat(es, _) = e else {
        return expr_types(e);
    };
    let mut tys = Vec::new();
    let mut hex = Vec::new();
    for c in es {
        match bits::raw_bits(c).filter(|(_, len)| *len <= 128) {
            Some((_, len)) => {
                tys.push(Some(DataType::Integer(len as u8)));
                hex.push(true);
            }
            None => {
                let t = expr_types(c);
                hex.extend(t.iter().map(|_| false));
                tys.extend(t);
            }
        }
    }
    *src.hex_parts.borrow_mut() = hex;
    tys
}
