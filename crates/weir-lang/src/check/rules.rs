//! Rules: verdicts, selectors and match keys, set and map references, values, statements
//! (quota, limit, ...; NAT and `fwd` are in [`super::redirect`]); the jump loop and depth
//! checks are in [`super::jumps`].

use super::headers::{target_text, TUNNEL_NAMES};
pub(super) use super::keys::lower_key;
use super::keys::{bare_ct_address, int_based, numeric_ipv4};
use super::limits::{lower_limit, lower_quota_words};
use super::pending::{lower_pending, reject_clash};
use super::redirect::{lower_fwd, lower_nat};
use super::sets::{key_ranges, lower_elem, scalar, time_val};
use super::tables::{err, other_text, Cx};
use crate::ast::{self, CmpOp, Val};
use crate::diag::Diagnostic;
use crate::ir::*;
use crate::source::Span;
use crate::values;
use std::sync::Arc;
use weir_wire::{DataType, Field};

pub(super) fn lower_verdict(cx: &mut Cx, v: &ast::VerdictAst) -> Option<Verdict> {
    Some(match v {
        ast::VerdictAst::Accept(_) => Verdict::Accept,
        ast::VerdictAst::Drop(_) => Verdict::Drop,
        ast::VerdictAst::Continue(_) => Verdict::Continue,
        ast::VerdictAst::Return(_) => Verdict::Return,
        ast::VerdictAst::Jump(t, s) | ast::VerdictAst::Goto(t, s) => {
            let Some(&ci) = cx.chain_names.get(&t.name) else {
                let known: Vec<&String> = cx.chain_names.keys().collect();
                cx.diags.push(
                    Diagnostic::error(t.span, format!("no chain '{}' in this table", t.name))
                        .note(listing("chains", known.iter().map(|s| s.as_str()))),
                );
                return None;
            };
            if cx.base_chains[ci] {
                err(
                    cx,
                    t.span,
                    format!(
                        "'{}' is a base chain: jump and goto can only target regular chains",
                        t.name
                    ),
                );
                return None;
            }
            if let Some(from) = cx.cur_chain {
                cx.edges.push((from, ci, *s));
            }
            if matches!(v, ast::VerdictAst::Jump(..)) {
                Verdict::Jump(ci)
            } else {
                Verdict::Goto(ci)
            }
        }
    })
}

/// The key types of a named set, if there is one by that name.
fn named_types(cx: &Cx, id: &ast::Ident) -> Option<Vec<weir_wire::DataType>> {
    cx.set_names
        .get(&id.name)
        .map(|&i| cx.sets[i].key_types.clone())
}

fn named_set(cx: &mut Cx, id: &ast::Ident) -> Option<usize> {
    if let Some(&what) = cx.uneval_sets.get(&id.name) {
        cx.uneval.push(what);
    }
    match cx.set_names.get(&id.name) {
        Some(&i) => Some(i),
        None => {
            let known: Vec<&str> = cx.set_names.keys().map(|s| s.as_str()).collect();
            let mut d = Diagnostic::error(
                id.span,
                format!("no set or map '@{}' in this table", id.name),
            );
            if !known.is_empty() {
                d = d.note(format!("declared: {}", known.join(", ")));
            }
            cx.diags.push(d);
            None
        }
    }
}

fn types_compatible(a: &[DataType], b: &[DataType]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x == y
                || (matches!(x, DataType::Integer(_) | DataType::Mark)
                    && matches!(y, DataType::Integer(_) | DataType::Mark)
                    && x.bits() == y.bits())
                || (matches!(x, DataType::Integer(_)) && matches!(y, DataType::Integer(_)))
        })
}

/// Whether a value of types `from` can be stored in a field of types `to` as nft stores it:
/// an integer-based value (a DSCP, a port, a protocol, an integer) into a mark or an integer
/// at least as wide, zero-extended (`meta mark set ip dscp`).
fn widens_to(from: &[DataType], to: &[DataType]) -> bool {
    matches!((from, to), ([f], [t]) if int_based(f)
        && matches!(t, DataType::Mark | DataType::Integer(_))
        && f.bits() <= t.bits())
}

/// A note listing names: `label: a, b, c`.
fn listing<'a>(label: &str, names: impl Iterator<Item = &'a str>) -> String {
    format!("{label}: {}", names.collect::<Vec<_>>().join(", "))
}

/// Types as nftables writes them: `ipv4_addr . inet_service`.
pub(super) fn type_names(types: &[DataType]) -> String {
    types
        .iter()
        .map(|t| t.nft_name())
        .collect::<Vec<_>>()
        .join(" . ")
}

fn key_types(k: &Key) -> Vec<DataType> {
    k.iter().map(|p| p.dtype).collect()
}

/// An anonymous set of elements typed by the key.
fn anon_set(
    cx: &mut Cx,
    types: &[DataType],
    elems: &[ast::Elem],
    is_map: bool,
    data: Option<&[DataType]>,
    verdict: bool,
) -> Option<Arc<Set>> {
    // `{ }` (or `{ $empty }`): nft refuses an empty anonymous set
    let empty = |e: &ast::Elem| matches!(&e.key, ast::Val::Set(v, _) if v.is_empty());
    if elems.iter().all(empty) {
        let span = elems.first().map_or(Span::default(), |e| e.span);
        err(cx, span, "an empty set: nothing to match against");
        return None;
    }
    let mut set = Set {
        name: String::new(),
        key_types: types.to_vec(),
        data_types: data.map(|d| d.to_vec()).unwrap_or_default(),
        is_map,
        verdict_map: verdict,
        objects: cx.obj_data.filter(|_| is_map),
        interval: true,
        dynamic: false,
        constant: true,
        timeout_ms: None,
        size: None,
        elements: Vec::new(),
        catchall: None,
        span: Span::default(),
        handle: 0,
        listed: Vec::new(),
    };
    let mut ok = true;
    for e in elems {
        match lower_elem(cx, &set, e) {
            Some(el) => set.elements.push(el),
            None if cx.catchall.is_some() => set.catchall = cx.catchall.take(),
            None => ok = false,
        }
    }
    // a map's keys may not overlap: which data would a key in both get? (nft: conflicting
    // intervals specified; a set's overlapping elements are merged instead)
    if ok && is_map && types.len() == 1 {
        let mut spans: Vec<(u128, u128, Span)> = set
            .elements
            .iter()
            .zip(
                elems
                    .iter()
                    .filter(|e| !matches!(&e.key, Val::Word(w, _) if w == "*")),
            )
            .map(|(el, e)| (el.key[0].0, el.key[0].1, e.span))
            .collect();
        spans.sort_by_key(|x| (x.0, x.1));
        if let Some(w) = spans.windows(2).find(|w| w[1].0 <= w[0].1) {
            cx.diags.push(
                Diagnostic::error(
                    w[1].2,
                    "conflicting intervals: this key overlaps another of the map",
                )
                .note("a key of a map has one value; split the ranges so they do not overlap"),
            );
            return None;
        }
    }
    ok.then(|| Arc::new(set))
}

fn set_ref(cx: &mut Cx, types: &[DataType], r: &ast::SetRef, span: Span) -> Option<SetRef> {
    match r {
        ast::SetRef::Named(id) => {
            let i = named_set(cx, id)?;
            let s = &cx.sets[i];
            // (a map in a match tests its keys, as nft's lookup does)
            if !s.key_types.is_empty() && !types_compatible(&s.key_types, types) {
                let have = type_names(&s.key_types);
                let want = type_names(types);
                err(
                    cx,
                    span,
                    format!("set '@{}' holds {have}, but the key is {want}", id.name),
                );
                return None;
            }
            Some(SetRef::Named(i))
        }
        ast::SetRef::Anon(elems, _) => Some(SetRef::Anon(anon_set(
            cx, types, elems, false, None, false,
        )?)),
    }
}

pub(super) fn map_ref(
    cx: &mut Cx,
    key: &Key,
    r: &ast::SetRef,
    verdict: bool,
    data: &[DataType],
    span: Span,
) -> Option<SetRef> {
    let types = key_types(key);
    match r {
        ast::SetRef::Named(id) => {
            let i = named_set(cx, id)?;
            let s = &cx.sets[i];
            if !s.is_map {
                err(cx, id.span, format!("'@{}' is a set, not a map", id.name));
                return None;
            }
            if verdict != s.verdict_map {
                err(
                    cx,
                    id.span,
                    if verdict {
                        format!("'@{}' maps to values: use 'map', not 'vmap'", id.name)
                    } else {
                        format!("'@{}' maps to verdicts: use 'vmap'", id.name)
                    },
                );
                return None;
            }
            // a shifted value keeps the type and width of what was shifted to nft
            // (`meta mark >> 8 & 0xf vmap @m` with m keyed by mark)
            let shifted = matches!((key.as_slice(), s.key_types.as_slice()),
                ([p], [t @ (DataType::Mark | DataType::Integer(_))])
                    if p.shift != 0 && matches!(p.dtype, DataType::Integer(_)) && p.dtype.bits() <= t.bits());
            if shifted && !types_compatible(&s.key_types, &types) {
                // (the engine's lookup is keyed by the set's own type: not evaluated yet)
                cx.uneval
                    .push("a shifted value looked up in a map of a wider type");
            } else if !types_compatible(&s.key_types, &types) {
                err(
                    cx,
                    span,
                    format!(
                        "map '@{}' is keyed by {}, but the key is {}",
                        id.name,
                        type_names(&s.key_types),
                        type_names(&types)
                    ),
                );
                return None;
            }
            if !verdict
                && !data.is_empty()
                && !types_compatible(&s.data_types, data)
                && (s.data_types.is_empty() || s.data_types[0] != data[0])
            {
                err(
                    cx,
                    id.span,
                    format!(
                        "map '@{}' gives {}, but {} is needed here",
                        id.name,
                        type_names(&s.data_types),
                        type_names(data)
                    ),
                );
                return None;
            }
            Some(SetRef::Named(i))
        }
        ast::SetRef::Anon(elems, _) => Some(SetRef::Anon(anon_set(
            cx,
            &types,
            elems,
            true,
            Some(data),
            verdict,
        )?)),
    }
}

fn lower_match(
    cx: &mut Cx,
    lhs: &ast::Expr,
    op: Option<(CmpOp, Span)>,
    rhs: &ast::Rhs,
    span: Span,
) -> Option<Expr> {
    // ct count [over] N
    if let ast::Expr::Selector(w, _) = lhs {
        if w.len() == 2 && w[0].name == "ct" && w[1].name == "count" {
            let ast::Rhs::Val(v) = rhs else {
                err(cx, rhs.span(), "ct count takes a number");
                return None;
            };
            let n = scalar(cx, DataType::Integer(32), v)? as u32;
            return Some(Expr::CtCount {
                count: n,
                over: matches!(op, Some((CmpOp::Gt, _))),
            });
        }
    }
    // `fib daddr oif exists`: whether the lookup finds a route (nft's fib check)
    if let (ast::Expr::Selector(w, sp), ast::Rhs::Val(ast::Val::Word(v, _))) = (lhs, rhs) {
        if w.first().is_some_and(|h| h.name == "fib")
            && w.last()
                .is_some_and(|l| l.name == "oif" || l.name == "oifname")
            && (v == "exists" || v == "missing")
        {
            let mut w = w.clone();
            if let Some(l) = w.last_mut() {
                l.name = "check".into();
            }
            return lower_match(cx, &ast::Expr::Selector(w, *sp), op, rhs, span);
        }
    }
    cx.key_hint = match rhs {
        ast::Rhs::Set(ast::SetRef::Named(id)) => named_types(cx, id),
        _ => None,
    };
    let key = lower_key(cx, lhs);
    cx.key_hint = None;
    let mut key = key?;
    let types = key_types(&key);
    let (cmp, op_span) = match op {
        Some((o, s)) => (Some(o), s),
        None => (None, span),
    };
    // `ct label N` (bit N set) and `!=`, compared with one label: evaluated (no label is ever
    // set, `ct label set` is not evaluated); other forms stay not evaluated
    if key.len() == 1
        && key[0].is_plain()
        && key[0].src == Source::Field(Field::CtLabel)
        && matches!(cmp, None | Some(CmpOp::Eq | CmpOp::Ne))
        && matches!(rhs, ast::Rhs::Val(Val::Word(..)))
        && cx.uneval.last() == Some(&Field::CtLabel.name())
    {
        // bit N of the connection's labels, as nft compiles it (`& 1 << N`, `!= 0`)
        cx.uneval.pop();
        if let ast::Rhs::Val(v) = rhs {
            let n = scalar(cx, types[0], v)?;
            if n > 127 {
                err(cx, v.span(), "a connection label is a number from 0 to 127");
                return None;
            }
            key[0].and = 1u128 << n;
            key[0].shift = n as i8;
            return Some(Expr::Match(Match {
                key,
                negate: cmp != Some(CmpOp::Ne),
                set: point_set(&types, vec![(0, 0)]),
            }));
        }
    }
    match rhs {
        ast::Rhs::Set(r) => {
            let negate = match cmp {
                None | Some(CmpOp::Eq) => false,
                Some(CmpOp::Ne) => true,
                Some(_) => {
                    err(cx, op_span, "only == and != compare with a set");
                    return None;
                }
            };
            let set = set_ref(cx, &types, r, rhs.span())?;
            Some(Expr::Match(Match { key, negate, set }))
        }
        ast::Rhs::Val(v) => {
            let single = key.len() == 1;
            let dt = types[0];
            // a masked IPv4 address compared with a number (`ip saddr & 0xff == 1`: nft
            // reads numbers as addresses, as inet_aton does)
            let numeric;
            let v = match numeric_ipv4(dt, v) {
                Some(a) if single && !key[0].is_plain() => {
                    numeric = a;
                    &numeric
                }
                _ => v,
            };
            // flags: `tcp flags syn,ack` means any of them set; `!=` none of them set;
            // `tcp flags syn / syn,ack` is a masked comparison
            // (`!` makes its one flag a list of one: `tcp flags & (fin | syn) ! syn`; a
            // masked value compared with a parenthesized list, `== (syn | ack)`, is fine)
            if single
                && dt.is_bitmask()
                && !key[0].is_plain()
                && cmp == Some(CmpOp::Ne)
                && matches!(v, Val::List(items, _) if items.len() == 1)
            {
                err(cx, v.span(), "a list of flags tests the field itself (tcp flags ! fin,rst), not a masked value");
                return None;
            }
            if single && dt.is_bitmask() && key[0].is_plain() {
                match (cmp, v) {
                    // nftables: `tcp flags != syn` (one flag) is an exact inequality; with a
                    // list, none of the flags set
                    (None, Val::Word(..) | Val::List(..)) | (Some(CmpOp::Ne), Val::List(..)) => {
                        let flags = scalar(cx, dt, v)?;
                        key[0].and = flags;
                        return Some(Expr::Match(Match {
                            key,
                            negate: cmp.is_none(),
                            set: point_set(&types, vec![(0, 0)]),
                        }));
                    }
                    (None | Some(CmpOp::Eq) | Some(CmpOp::Ne), Val::Prefix(val, mask)) => {
                        let value = scalar(cx, dt, val)?;
                        let m = scalar(cx, dt, mask)?;
                        key[0].and = m;
                        return Some(Expr::Match(Match {
                            key,
                            negate: cmp == Some(CmpOp::Ne),
                            set: point_set(&types, vec![(value & m, value & m)]),
                        }));
                    }
                    _ => {}
                }
            }
            match cmp {
                Some(CmpOp::Lt | CmpOp::Gt | CmpOp::Le | CmpOp::Ge) => {
                    if !single {
                        err(
                            cx,
                            op_span,
                            "< and > compare single values, not concatenations",
                        );
                        return None;
                    }
                    let x = scalar(cx, dt, v)?;
                    let max = if dt.bits() >= 128 {
                        u128::MAX
                    } else {
                        (1u128 << dt.bits()) - 1
                    };
                    let r = match cmp.unwrap() {
                        CmpOp::Lt if x == 0 => None,
                        CmpOp::Lt => Some((0, x - 1)),
                        CmpOp::Le => Some((0, x)),
                        CmpOp::Gt if x >= max => None,
                        CmpOp::Gt => Some((x + 1, max)),
                        _ => Some((x, max)),
                    };
                    let Some(r) = r else {
                        err(cx, v.span(), "this comparison can never be true");
                        return None;
                    };
                    Some(Expr::Match(Match {
                        key,
                        negate: false,
                        set: point_set(&types, vec![r]),
                    }))
                }
                _ => {
                    let before = cx.uneval.len();
                    let r = key_ranges(cx, &types, v)?;
                    let mut negate = cmp == Some(CmpOp::Ne);
                    // a time of day across midnight ("21:00"-"02:00"), compared alone: nft
                    // matches outside the range between them, both ends excluded (`range
                    // neq 02:00 21:00`); the ranges came back swapped
                    if single
                        && cx.uneval.len() == before + 1
                        && cx.uneval.last() == Some(&"meta hour across midnight")
                    {
                        cx.uneval.pop();
                        negate = !negate;
                    }
                    Some(Expr::Match(Match {
                        key,
                        negate,
                        set: point_set(&types, r),
                    }))
                }
            }
        }
    }
}

fn point_set(types: &[DataType], key: Vec<(u128, u128)>) -> SetRef {
    SetRef::Anon(Arc::new(Set {
        name: String::new(),
        key_types: types.to_vec(),
        data_types: vec![],
        is_map: false,
        verdict_map: false,
        objects: None,
        interval: true,
        dynamic: false,
        constant: true,
        timeout_ms: None,
        size: None,
        elements: vec![Element {
            key,
            data: None,
            timeout_ms: None,
        }],
        catchall: None,
        span: Span::default(),
        handle: 0,
        listed: Vec::new(),
    }))
}

/// A value expression for a target of these types.
pub(super) fn lower_value(cx: &mut Cx, types: &[DataType], e: &ast::Expr) -> Option<ValueExpr> {
    match e {
        ast::Expr::Const(v) => {
            let r = key_ranges(cx, types, v)?;
            if r.iter().any(|(lo, hi)| lo != hi) {
                if r.len() == 1 {
                    return Some(ValueExpr::Range(r[0].0, r[0].1));
                }
                err(cx, v.span(), "a range is not a single value");
                return None;
            }
            Some(ValueExpr::Const(r.into_iter().map(|x| x.0).collect()))
        }
        ast::Expr::Map(k, m, span) => {
            if let Some(sp) = bare_ct_address(k) {
                err(cx, sp, "specify either ip or ip6 for the address: ct original ip saddr, ct reply ip6 daddr, ...");
                return None;
            }
            let key = lower_key(cx, k)?;
            let map = map_ref(cx, &key, m, false, types, *span)?;
            Some(ValueExpr::Map { key, map })
        }
        other => {
            let key = lower_key(cx, other)?;
            let kt = key_types(&key);
            let hashy = key.iter().all(|p| !matches!(p.src, Source::Field(_)));
            if hashy && types.iter().map(|t| t.bits()).sum::<u32>() > 32 {
                // the kernel refuses a 32-bit register written into a wider field (ENODATA)
                err(
                    cx,
                    other.span(),
                    format!(
                        "a hash or number generator gives a 32-bit number, not {}: use it as \
                         the key of a map (jhash ip saddr mod 2 map {{ 0 : ..., 1 : ... }})",
                        type_names(types)
                    ),
                );
                return None;
            }
            if !hashy && !types_compatible(&kt, types) && !widens_to(&kt, types) {
                err(
                    cx,
                    other.span(),
                    format!(
                        "this gives {}, but {} is needed",
                        type_names(&kt),
                        type_names(types)
                    ),
                );
                return None;
            }
            Some(ValueExpr::Key(key))
        }
    }
}

const ASSIGNABLE: &[Field] = &[
    Field::EtherSaddr,
    Field::EtherDaddr,
    Field::MetaMark,
    Field::MetaPriority,
    Field::CtMark,
    Field::MetaNftrace,
    // `ct zone set` (before conntrack: the zone the packet is tracked in)
    Field::CtZone,
    Field::CtOriginalZone,
    Field::CtReplyZone,
    Field::IpSaddr,
    Field::IpDaddr,
    Field::IpTtl,
    Field::IpDscp,
    Field::IpEcn,
    Field::IpId,
    Field::IpProtocol,
    Field::Ip6Saddr,
    Field::Ip6Daddr,
    Field::Ip6Hoplimit,
    Field::Ip6Dscp,
    Field::Ip6Ecn,
    Field::Ip6Flowlabel,
    Field::TcpFlags,
    Field::TcpSport,
    Field::TcpDport,
    Field::UdpSport,
    Field::UdpDport,
    Field::ThSport,
    Field::ThDport,
    // header fields written in place, their checksum updated (weir_engine::nat's writer)
    Field::IpVersion,
    Field::IpHdrlength,
    Field::IpLength,
    Field::IpFragOff,
    Field::IpChecksum,
    Field::Ip6Length,
    Field::Ip6Nexthdr,
    Field::TcpSequence,
    Field::TcpAckseq,
    Field::TcpDoff,
    Field::TcpWindow,
    Field::TcpChecksum,
    Field::TcpUrgptr,
    Field::UdpLength,
    Field::UdpChecksum,
    Field::IcmpType,
    Field::IcmpCode,
    Field::IcmpChecksum,
    Field::Icmp6Type,
    Field::Icmp6Code,
    Field::Icmp6Checksum,
];

/// A `queue` statement's number or range and flags (checked by `lower_pending`); None when
/// an expression computes the number.
fn queue(operands: &[(ast::Operand, ast::Expr)]) -> Option<Queue> {
    let has = |f: &str| {
        operands.iter().any(|(o, e)| {
            *o == ast::Operand::Flag && matches!(e, ast::Expr::Const(Val::Word(w, _)) if w == f)
        })
    };
    let num = |v: &Val| match v {
        Val::Word(w, _) => values::parse_scalar(DataType::Integer(16), w)
            .ok()
            .map(|n| n as u16),
        _ => None,
    };
    let (first, last) = match operands.iter().find(|(o, _)| *o == ast::Operand::Queue) {
        None => (0, 0),
        Some((_, ast::Expr::Const(v @ Val::Word(w, _)))) => match w.split_once('-') {
            Some(_) => {
                let (a, b) = values::parse_range(DataType::Integer(16), w).ok()?;
                let _ = v;
                (a as u16, b as u16)
            }
            None => (num(v)?, num(v)?),
        },
        Some((_, ast::Expr::Const(Val::Range(a, b)))) => (num(a)?, num(b)?),
        Some(_) => return None,
    };
    Some(Queue {
        first,
        last,
        bypass: has("bypass"),
        fanout: has("fanout"),
    })
}

fn lower_item(
    cx: &mut Cx,
    it: &ast::Item,
    out: &mut Vec<Expr>,
    comment: &mut Option<String>,
) -> bool {
    let e = match it {
        ast::Item::Pending {
            what,
            family,
            operands,
            span,
        } => {
            if let Some(kind) = super::objects::objref_kind(what) {
                return match operands.first() {
                    Some((_, e)) => match super::objects::lower_objref(cx, kind, e) {
                        Some(x) => {
                            out.push(x);
                            true
                        }
                        None => false,
                    },
                    None => false,
                };
            }
            if !lower_pending(cx, what, family.as_ref(), operands, *span) {
                return false;
            }
            match *what {
                "queue" => match queue(operands) {
                    Some(q) => Some(Expr::Queue(q)),
                    None => super::pending::queue_to(cx, operands),
                },
                "reset tcp option" => Some(
                    match operands.first() {
                        Some((_, ast::Expr::Const(Val::Word(w, _)))) => {
                            super::headers::tcp_option_kind(w)
                        }
                        _ => None,
                    }
                    .map_or(Expr::Unevaluated(what), Expr::ResetTcpOption),
                ),
                "synproxy" => super::pending::synproxy(cx, operands, *span),
                "last" => Some(Expr::Last {
                    used_ms: operands.iter().find_map(|(_, e)| match e {
                        ast::Expr::Const(v) => values::parse_time_ms(&other_text(v)).ok(),
                        _ => None,
                    }),
                }),
                "dup" => super::redirect::lower_dup(cx, operands, *span),
                "tproxy" => super::pending::tproxy(cx, family.as_ref(), operands, *span),
                _ => Some(Expr::Unevaluated(what)),
            }
        }
        ast::Item::Match { lhs, op, rhs, span } => {
            if matches!(rhs, ast::Rhs::Set(_)) || matches!(lhs, ast::Expr::Concat(..)) {
                if let Some(sp) = bare_ct_address(lhs) {
                    err(cx, sp, "specify either ip or ip6 for the address: ct original ip saddr, ct reply ip6 daddr, ...");
                    return false;
                }
            }
            let e = lower_match(cx, lhs, *op, rhs, *span);
            // a set of several transport protocols
            if let (ast::Expr::Selector(..), None, ast::Rhs::Set(ast::SetRef::Anon(es, _))) =
                (lhs, op, rhs)
            {
                let t = target_text(lhs);
                if matches!(
                    t.as_str(),
                    "meta l4proto" | "l4proto" | "ip protocol" | "ip6 nexthdr"
                ) && es.len() > 1
                {
                    cx.proto_set_seen = true;
                }
            }
            // an equality with one value, that later matches of the rule depend on
            if let (ast::Expr::Selector(..), None, ast::Rhs::Val(Val::Word(w, _))) = (lhs, op, rhs)
            {
                if let Some(f) = Field::from_name(&target_text(lhs)) {
                    if let Ok(v) = values::parse_scalar(f.datatype(), w) {
                        cx.eq_seen.push((f, v));
                    }
                }
            }
            e
        }
        ast::Item::Vmap { key, map, span } => {
            cx.key_hint = match map {
                ast::SetRef::Named(id) => named_types(cx, id),
                _ => None,
            };
            let k = lower_key(cx, key);
            cx.key_hint = None;
            let Some(k) = k else {
                return false;
            };
            map_ref(cx, &k, map, true, &[], *span).map(|m| {
                // edges for loop detection through verdict maps
                let elems: Vec<Verdict> = match &m {
                    SetRef::Anon(s) => s
                        .elements
                        .iter()
                        .filter_map(|e| match e.data {
                            Some(MapValue::Verdict(v)) => Some(v),
                            _ => None,
                        })
                        .collect(),
                    SetRef::Named(_) => vec![],
                };
                let _ = elems;
                Expr::Vmap { key: k, map: m }
            })
        }
        ast::Item::Verdict(v) => lower_verdict(cx, v).map(Expr::Verdict),
        ast::Item::Counter { name, .. } => match name {
            None => Some(Expr::Counter { named: None }),
            Some(n) => {
                let nm = other_text(n);
                match cx.counters.get(&nm) {
                    Some(&i) => Some(Expr::Counter { named: Some(i) }),
                    None => {
                        cx.diags.push(
                            Diagnostic::error(n.span(), format!("no counter '{nm}' in this table"))
                                .note("declare it: counter NAME { }"),
                        );
                        None
                    }
                }
            }
        },
        ast::Item::Log { options, span } => {
            let mut log = Log {
                prefix: None,
                level: None,
                group: None,
            };
            for (k, v) in options {
                let t = v.as_ref().map(other_text).unwrap_or_default();
                match k.name.as_str() {
                    "prefix" => log.prefix = Some(t),
                    "level" => {
                        if ![
                            "emerg", "alert", "crit", "err", "warn", "notice", "info", "debug",
                            "audit",
                        ]
                        .contains(&t.as_str())
                        {
                            err(cx, *span, format!("unknown log level '{t}' (emerg, alert, crit, err, warn, notice, info, debug, audit)"));
                            return false;
                        }
                        log.level = Some(t)
                    }
                    "group" => log.group = t.parse().ok(),
                    "flags" => {
                        let known = |f: &str| match f.split_once(' ') {
                            Some(("ip", o)) => o == "options",
                            Some(("tcp", fs)) => {
                                fs.split(' ').all(|x| matches!(x, "sequence" | "options"))
                            }
                            _ => matches!(f, "all" | "ether" | "skuid"),
                        };
                        if !known(&t) {
                            err(cx, *span, format!("unknown log flags '{t}' (all, ether, skuid, ip options, tcp sequence,options)"));
                            return false;
                        }
                    }
                    _ => {}
                }
            }
            // nft: a log to a group (nflog) takes no level or flags; level audit takes nothing
            let has = |k: &str| options.iter().any(|(o, _)| o.name == k);
            let why = if has("group") && (has("level") || has("flags")) {
                Some("a log to a group (nflog) takes no level and no flags")
            } else if log.level.as_deref() == Some("audit") && options.len() > 1 {
                Some("log level audit takes no other option")
            } else if (has("snaplen") || has("queue-threshold")) && !has("group") {
                Some("snaplen and queue-threshold are options of a log to a group")
            } else {
                None
            };
            if let Some(why) = why {
                err(cx, *span, why);
                return false;
            }
            Some(Expr::Log(log))
        }
        ast::Item::Limit {
            over,
            rate,
            burst,
            span,
        } => lower_limit(cx, *over, rate, burst, *span).map(Expr::Limit),
        ast::Item::Quota {
            over,
            amount,
            used,
            name,
            span,
        } => {
            if let Some(n) = name {
                let nm = other_text(n);
                match cx.quotas.get(&nm) {
                    Some(&i) => Some(Expr::Quota(Quota {
                        bytes: 0,
                        used: 0,
                        over: false,
                        named: Some(i),
                    })),
                    None => {
                        err(cx, n.span(), format!("no quota '{nm}' in this table"));
                        None
                    }
                }
            } else {
                let mut words: Vec<&Val> = amount.iter().collect();
                let u;
                if let Some(us) = used {
                    u = Val::Word("used".into(), *span);
                    words.push(&u);
                    words.extend(us.iter());
                }
                lower_quota_words(cx, &words, *span).map(|mut q| {
                    q.over = *over;
                    Expr::Quota(q)
                })
            }
        }
        ast::Item::Reject { with, span } => {
            if let Some((ty, hook)) = cx.cur_hook {
                if ty == ChainType::Nat
                    || !matches!(
                        hook,
                        Hook::Input
                            | Hook::Forward
                            | Hook::Output
                            | Hook::Prerouting
                            | Hook::Ingress
                    )
                {
                    err(
                        cx,
                        *span,
                        format!("reject is not allowed at the {} hook", hook.name()),
                    );
                    return false;
                }
            }
            let r = match with {
                None => Some(Reject::Default),
                Some((k, v)) => match k.name.as_str() {
                    "tcp" => Some(Reject::TcpReset),
                    "icmp" | "icmpv6" | "icmpx" => {
                        let t = v.as_ref().map(other_text).unwrap_or_default();
                        let code = values::reject_code(&k.name, &t);
                        match code {
                            None => {
                                err(cx, *span, format!("unknown {} reject type '{t}'", k.name));
                                None
                            }
                            Some(c) => Some(match k.name.as_str() {
                                "icmp" => Reject::Icmp(c),
                                "icmpv6" => Reject::Icmp6(c),
                                _ => Reject::Icmpx(c),
                            }),
                        }
                    }
                    other => {
                        err(
                            cx,
                            k.span,
                            format!("reject with icmp, icmpv6, icmpx or tcp reset, not '{other}'"),
                        );
                        None
                    }
                },
            };
            if let Some(why) = r.as_ref().and_then(|r| reject_clash(cx, r)) {
                err(cx, *span, why);
                return false;
            }
            r.map(Expr::Reject)
        }
        ast::Item::Assign {
            target,
            value,
            span,
        } => {
            // secmark: `meta secmark set "OBJECT"` names a secmark object of the table;
            // `ct secmark set meta secmark` and back copy the label. Not evaluated yet.
            fn words(e: &ast::Expr) -> Vec<&str> {
                match e {
                    ast::Expr::Selector(ws, _) => ws.iter().map(|w| w.name.as_str()).collect(),
                    _ => Vec::new(),
                }
            }
            match (words(target).as_slice(), words(value).as_slice()) {
                (["ct", "secmark"], ["meta", "secmark"])
                | (["meta", "secmark"], ["ct", "secmark"]) => {
                    out.push(Expr::Unevaluated("ct secmark"));
                    return true;
                }
                (["meta", "secmark"], []) => {
                    if let ast::Expr::Const(v @ (Val::Str(..) | Val::Word(..))) = value {
                        let name = other_text(v);
                        if values::parse_number(&name).is_none() {
                            if !cx.secmarks.contains(&name) {
                                err(cx, v.span(), format!("no secmark '{name}' in this table"));
                                return false;
                            }
                            out.push(Expr::Unevaluated("meta secmark set"));
                            return true;
                        }
                    }
                }
                _ => {}
            }
            // ct helper set "NAME": a helper object of the table (evaluated later)
            if let ast::Expr::Selector(ws, _) = target {
                let obj = match ws.as_slice() {
                    [c, k] if c.name == "ct" => match k.name.as_str() {
                        "helper" => Some("ct helper set"),
                        "timeout" => Some("ct timeout set"),
                        "expectation" => Some("ct expectation set"),
                        _ => None,
                    },
                    _ => None,
                };
                if let Some(what) = obj {
                    // the object a map picks, for each packet
                    if let ast::Expr::Map(..) = value {
                        let kind = what.trim_end_matches(" set");
                        return match super::objects::lower_obj_stmt(cx, kind, value) {
                            Some(e) => {
                                out.push(e);
                                true
                            }
                            None => false,
                        };
                    }
                    let name = match value {
                        ast::Expr::Const(v) => other_text(v),
                        _ => String::new(),
                    };
                    let known = if what == "ct helper set" {
                        cx.ct_helpers.contains(&name)
                    } else {
                        cx.ct_objects.contains(&name)
                    };
                    if !known {
                        let kind = what.trim_end_matches(" set");
                        err(
                            cx,
                            value.span(),
                            format!("no {kind} '{name}' in this table"),
                        );
                        return false;
                    }
                    if let Some((helper, l4proto)) = (what == "ct helper set")
                        .then(|| cx.ct_helper_kinds.get(&name).cloned())
                        .flatten()
                    {
                        out.push(Expr::CtHelper { helper, l4proto });
                        return true;
                    }
                    if what == "ct timeout set" {
                        if let Some(&obj) = cx.ct_timeouts.get(&name) {
                            let l4proto = cx.ct_timeout_protos[obj];
                            out.push(Expr::CtTimeout { obj, l4proto });
                            return true;
                        }
                    }
                    if what == "ct expectation set" {
                        if let Some(&x) = cx.ct_expects.get(&name) {
                            out.push(Expr::CtExpect(x));
                            return true;
                        }
                    }
                    out.push(Expr::Unevaluated(what));
                    return true;
                }
                if ws.len() == 2 && ws[0].name == "ct" && ws[1].name == "helper" {
                    let name = match value {
                        ast::Expr::Const(v) => other_text(v),
                        _ => String::new(),
                    };
                    if !cx.ct_helpers.contains(&name) {
                        err(
                            cx,
                            value.span(),
                            format!("no ct helper '{name}' in this table"),
                        );
                        return false;
                    }
                    out.push(Expr::Unevaluated("ct helper set"));
                    return true;
                }
            }
            let Some(tk) = lower_key(cx, target) else {
                return false;
            };
            let f = match tk.as_slice() {
                [KeyPart {
                    src: Source::Field(f),
                    ..
                }] if tk[0].is_plain() => *f,
                // `tcp option maxseg size set ...`: a TCP option's field
                [KeyPart {
                    src: Source::Exthdr { proto: 6, .. },
                    ..
                }] => Field::TcpOptionField,
                // a tunnel's inner packet: not written (nft refuses it too)
                [KeyPart {
                    src: Source::Inner { tunnel, .. },
                    ..
                }] => {
                    err(
                        cx,
                        target.span(),
                        format!(
                            "the inner packet of a {} tunnel cannot be set",
                            tunnel.name()
                        ),
                    );
                    return false;
                }
                // `@th,16,16 set ...`: raw payload
                [KeyPart {
                    src: Source::Raw { .. },
                    ..
                }] => Field::RawPayload,
                _ => {
                    err(cx, target.span(), "only a single field can be set");
                    return false;
                }
            };
            if let Some(t) = cx.uneval.iter().find(|w| TUNNEL_NAMES.contains(w)) {
                err(
                    cx,
                    target.span(),
                    format!("the inner packet of a {t} tunnel cannot be set"),
                );
                return false;
            }
            // statements on what the engine does not evaluate yet
            if !f.evaluated() {
                let ok = match f {
                    Field::TcpOptionField => {
                        target_text(target).starts_with("tcp option maxseg size")
                    }
                    Field::MetaSecmark | Field::CtEvent | Field::CtLabel | Field::RawPayload => {
                        true
                    }
                    _ => false,
                };
                if !ok {
                    err(
                        cx,
                        target.span(),
                        format!("'{}' cannot be set", target_text(target)),
                    );
                    return false;
                }
                let Some(v) = lower_value(cx, &[tk[0].dtype], value) else {
                    return false;
                };
                // `ct event set ...` (nft_ct's NFT_CT_EVENTMASK): which conntrack events the
                // connection reports to event listeners (`conntrack -E`); weir keeps no event
                // stream, and no packet's fate depends on it: nothing to do (the rule goes on)
                if f == Field::CtEvent {
                    cx.uneval.retain(|w| *w != "ct event");
                    return true;
                }
                // `ct label set N`: bit N added to the connection's labels
                if f == Field::CtLabel && matches!(v, crate::ir::ValueExpr::Const(_)) {
                    out.push(Expr::Assign { field: f, value: v });
                    cx.uneval.retain(|w| *w != "ct label");
                    return true;
                }
                if let (
                    Field::TcpOptionField,
                    Source::Exthdr {
                        kind, offset, len, ..
                    },
                ) = (f, &tk[0].src)
                {
                    if matches!(*len, 2 | 4) && !cx.uneval.contains(&"rt mtu") {
                        out.push(Expr::SetTcpOption {
                            kind: *kind,
                            offset: *offset,
                            len: *len,
                            value: v,
                        });
                        cx.uneval.retain(|w| *w != "tcp option");
                        return true;
                    }
                }
                // `@th,16,16 set 80`: raw payload (values up to 64 bits)
                if let (Field::RawPayload, Source::Raw { base, offset, len }) = (f, &tk[0].src) {
                    if *len <= 64 {
                        out.push(Expr::SetRaw {
                            base: *base,
                            offset: *offset,
                            len: *len,
                            value: v,
                        });
                        return true;
                    }
                }
                out.push(Expr::Unevaluated(match f {
                    Field::RawPayload => "raw payload write over 64 bits",
                    Field::TcpOptionField => "tcp option maxseg size set",
                    Field::CtLabel => "ct label set",
                    _ => f.name(),
                }));
                cx.uneval.retain(|w| *w != "tcp option" && *w != "ct label");
                return true;
            }
            if !ASSIGNABLE.contains(&f)
                && f.is_header()
                && f != Field::ThSport
                && f != Field::ThDport
            {
                // a header write weir does not make yet (`ip checksum set 1`, `ip length set 0`)
                if lower_value(cx, &[f.datatype()], value).is_none() {
                    return false;
                }
                out.push(Expr::Unevaluated(f.name()));
                return true;
            }
            if !ASSIGNABLE.contains(&f) {
                cx.diags.push(
                    Diagnostic::error(target.span(), format!("'{}' cannot be set", f.name()))
                        .note(listing("settable", ASSIGNABLE.iter().map(|f| f.name()))),
                );
                return false;
            }
            let _ = span;
            cx.set_target_bits = f.datatype().bits();
            let v = lower_value(cx, &[f.datatype()], value);
            cx.set_target_bits = 0;
            let Some(v) = v else {
                return false;
            };
            if let ValueExpr::Range(..) = v {
                // nft cannot write a range either (it stops: "unknown expression type range")
                err(
                    cx,
                    value.span(),
                    format!("'{} set' takes one value, not a range or prefix", f.name()),
                );
                return false;
            }
            Some(Expr::Assign { field: f, value: v })
        }
        ast::Item::Nat {
            kind,
            family,
            addr,
            port,
            flags,
            span,
        } => {
            let n = lower_nat(cx, kind, family, addr, port, flags, *span);
            if let Some(Expr::Nat(nat)) = &n {
                if let Some(why) = super::pending::nat_clash(cx, nat, family.is_some()) {
                    err(cx, *span, why);
                    return false;
                }
            }
            n
        }
        ast::Item::Notrack(_) => Some(Expr::Notrack),
        ast::Item::Fwd {
            family,
            addr,
            dev,
            span,
        } => lower_fwd(cx, family, addr, dev, *span),
        ast::Item::FlowAdd(id, _) => match cx.flowtables.get(&id.name) {
            Some(&i) => Some(Expr::FlowAdd(i)),
            None => {
                err(
                    cx,
                    id.span,
                    format!("no flowtable '@{}' in this table", id.name),
                );
                None
            }
        },
        ast::Item::SetOp {
            op,
            set,
            key,
            timeout,
            stmts,
            value,
            span,
        } => {
            let opk = match op.name.as_str() {
                "add" => SetOpKind::Add,
                "update" => SetOpKind::Update,
                _ => SetOpKind::Delete,
            };
            let Some(si) = named_set(cx, set) else {
                return false;
            };
            cx.key_hint = Some(cx.sets[si].key_types.clone());
            let k = lower_key(cx, key);
            cx.key_hint = None;
            let Some(k) = k else {
                return false;
            };
            let st = &cx.sets[si];
            if !types_compatible(&st.key_types, &key_types(&k)) {
                let (a, b) = (type_names(&st.key_types), type_names(&key_types(&k)));
                err(
                    cx,
                    *span,
                    format!("set '@{}' holds {a}, but the key is {b}", set.name),
                );
                return false;
            }
            let timeout_ms = match timeout {
                Some(t) => time_val(cx, t),
                None => None,
            };
            // a map's element is stored with its value (`update @m { ip saddr : ct mark }`),
            // as nft_dynset's sreg_data: the value a new element gets
            let (is_map, data) = (cx.sets[si].is_map, cx.sets[si].data_types.clone());
            let mut value_expr = None;
            match (value, is_map) {
                (Some(v), true) => {
                    let lowered = if data.is_empty() {
                        None
                    } else {
                        lower_value(cx, &data, v)
                    };
                    let Some(lowered) = lowered else {
                        if data.is_empty() {
                            err(
                                cx,
                                v.span(),
                                format!(
                                    "'@{}' maps to verdicts: a rule cannot store one",
                                    set.name
                                ),
                            );
                        }
                        return false;
                    };
                    // a value looked up in a map, or a range: not evaluated yet
                    if !matches!(lowered, ValueExpr::Const(_) | ValueExpr::Key(_)) {
                        out.push(Expr::Unevaluated("update of a map with a value"));
                        return true;
                    }
                    value_expr = Some(lowered);
                }
                (Some(v), false) => {
                    err(
                        cx,
                        v.span(),
                        format!("'@{}' is a set: its elements have no value", set.name),
                    );
                    return false;
                }
                (None, true) if opk != SetOpKind::Delete => {
                    err(
                        cx,
                        *span,
                        format!(
                            "'@{}' is a map: give the value to store, {{ key : value }}",
                            set.name
                        ),
                    );
                    return false;
                }
                _ => {}
            }
            let mut sop = SetOp {
                op: opk,
                set: si,
                key: k,
                timeout_ms,
                limit: None,
                counter: false,
                ct_count: None,
                data: value_expr,
            };
            for s in stmts {
                match s {
                    ast::Item::Match { lhs, op, rhs, span } => {
                        match lower_match(cx, lhs, *op, rhs, *span) {
                            Some(Expr::CtCount { count, over }) => {
                                sop.ct_count = Some((count, over))
                            }
                            Some(_) => {
                                err(
                                    cx,
                                    *span,
                                    "a set element takes 'ct count', 'limit', 'counter' or \
                                     'quota' here",
                                );
                                return false;
                            }
                            None => return false,
                        }
                    }
                    ast::Item::Limit {
                        over,
                        rate,
                        burst,
                        span,
                    } => sop.limit = lower_limit(cx, *over, rate, burst, *span),
                    ast::Item::Counter { .. } => sop.counter = true,
                    _ => {}
                }
            }
            Some(Expr::SetOp(sop))
        }
        ast::Item::Comment(c, _) => {
            *comment = Some(c.clone());
            return true;
        }
    };
    match e {
        Some(e) => {
            out.push(e);
            true
        }
        None => false,
    }
}

pub(super) fn lower_rule(cx: &mut Cx, handle: u64, r: &ast::Rule) -> Option<Rule> {
    let mut exprs = Vec::new();
    let mut comment = None;
    let mut ok = true;
    cx.uneval.clear();
    cx.udp_dport_seen = false;
    cx.l4_dep = None;
    cx.l4_seen = false;
    cx.l3_seen = None;
    cx.proto_set_seen = false;
    cx.eq_seen.clear();
    for it in &r.items {
        ok &= lower_item(cx, it, &mut exprs, &mut comment);
    }
    // what the rule reads that the engine does not evaluate yet (`meta hour`, `tcp option`,
    // ...), listed once each in front
    let mut uneval = std::mem::take(&mut cx.uneval);
    let mut seen = std::collections::HashSet::new();
    uneval.retain(|w| seen.insert(*w));
    for (i, what) in uneval.into_iter().enumerate() {
        if !exprs
            .iter()
            .any(|e| matches!(e, Expr::Unevaluated(w) if *w == what))
        {
            exprs.insert(i, Expr::Unevaluated(what));
        }
    }
    // a verdict must be the last statement
    if let Some(pos) = exprs.iter().position(|e| matches!(e, Expr::Verdict(_))) {
        if pos + 1 < exprs.len() {
            let sp = r
                .items
                .iter()
                .find(|i| matches!(i, ast::Item::Verdict(_)))
                .map(|i| i.span())
                .unwrap_or(r.span);
            cx.diags.push(
                Diagnostic::error(sp, "nothing can follow a verdict in a rule")
                    .note("move the verdict (accept, drop, jump, ...) to the end of the rule"),
            );
            ok = false;
        }
    }
    // NAT and fwd end the rule in nft: it refuses anything after them ("Statement after
    // terminal statement has no effect")
    type Terminal = (
        fn(&Expr) -> bool,
        fn(&ast::Item) -> bool,
        &'static str,
        &'static str,
    );
    let terminals: [Terminal; 2] = [
        (
            |e| matches!(e, Expr::Nat(_)),
            |i| matches!(i, ast::Item::Nat { .. }),
            "nothing can follow snat, dnat, masquerade or redirect in a rule",
            "NAT ends the rule (the packet is accepted): move counters before it",
        ),
        (
            |e| matches!(e, Expr::Fwd(_)),
            |i| matches!(i, ast::Item::Fwd { .. }),
            "nothing can follow 'fwd' in a rule",
            "fwd sends the packet out and ends its processing: move it to the end of the rule",
        ),
    ];
    for (is_expr, is_item, msg, note) in terminals {
        if let Some(pos) = exprs.iter().position(is_expr) {
            if ok && pos + 1 < exprs.len() {
                let sp = r
                    .items
                    .iter()
                    .find(|i| is_item(i))
                    .map(|i| i.span())
                    .unwrap_or(r.span);
                cx.diags.push(Diagnostic::error(sp, msg).note(note));
                ok = false;
            }
        }
    }
    ok.then(|| Rule {
        handle,
        text: r.text.clone(),
        comment,
        span: r.span,
        exprs,
    })
}
