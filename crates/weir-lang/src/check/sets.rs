//! Sets and maps: declarations, element keys and values, ranges and timeouts.

use super::gather::val_u64;
use super::rules::{lower_key, lower_verdict, type_names};
use super::tables::{err, Cx};
use crate::ast::{self, Val};
use crate::diag::Diagnostic;
use crate::ir::*;
use crate::values::{self, describe, parse_range, parse_scalar, parse_time_ms};
use weir_wire::DataType;

pub(super) fn lower_set(cx: &mut Cx, d: &ast::SetDecl, elements: &[&ast::Elem]) -> Set {
    let mut key_types = Vec::new();
    for t in &d.key_types {
        match DataType::from_nft_name(&t.name) {
            Some(dt) => key_types.push(dt),
            None => cx.diags.push(
                Diagnostic::error(t.span, format!("unknown type '{}'", t.name))
                    .note("types: ipv4_addr, ipv6_addr, inet_service, inet_proto, ether_addr, mark, ifname, ct_state, icmp_type, icmpv6_type, tcp_flag, integer, ..."),
            ),
        }
    }
    // (a typeof key names what rules read: a tunnel's inner field needs no UDP port here)
    let udp_seen = std::mem::replace(&mut cx.udp_dport_seen, true);
    for e in &d.key_typeof {
        if let Some(k) = lower_key(cx, e) {
            key_types.extend(k.iter().map(|p| p.dtype));
        }
    }
    cx.udp_dport_seen = udp_seen;
    if key_types.is_empty() && d.key_types.is_empty() && d.key_typeof.is_empty() {
        err(
            cx,
            d.name.span,
            format!("set '{}' has no type", d.name.name),
        );
    }
    let mut verdict_map = false;
    let mut data_types = Vec::new();
    for t in &d.data_types {
        if t.name == "verdict" {
            verdict_map = true;
        } else if t.name == "queue" {
            // queue numbers, for `queue to KEY map @m`
            data_types.push(DataType::Integer(16));
            cx.uneval_sets.insert(d.name.name.clone(), "queue map");
        } else if ast::is_object_type(&t.name) {
            // an object map: its data are names of objects of that type (counters, quotas
            // and limits are evaluated: each name becomes the object's index)
            data_types.push(DataType::IfName);
            match ObjKind::from_name(&t.name) {
                Some(k) => {
                    cx.obj_maps.insert(d.name.name.clone(), k);
                }
                None => match super::tables::stmt_obj_kind(&t.name) {
                    // ct helper, ct timeout, ct expectation, synproxy: each name becomes the
                    // object's index in the table's list of its kind
                    Some(k) => {
                        cx.stmt_obj_maps.insert(d.name.name.clone(), k);
                    }
                    None => {
                        cx.uneval_sets.insert(d.name.name.clone(), "object map");
                    }
                },
            }
        } else {
            match DataType::from_nft_name(&t.name) {
                Some(dt) => data_types.push(dt),
                None => err(cx, t.span, format!("unknown type '{}'", t.name)),
            }
        }
    }
    for e in &d.data_typeof {
        if let Some(k) = lower_key(cx, e) {
            data_types.extend(k.iter().map(|p| p.dtype));
        }
    }
    if d.is_map && data_types.is_empty() && !verdict_map {
        cx.diags.push(
            Diagnostic::error(
                d.name.span,
                format!("map '{}' needs a data type", d.name.name),
            )
            .note("for example: type ipv4_addr : verdict"),
        );
    }
    if !d.is_map && (!data_types.is_empty() || verdict_map) {
        err(
            cx,
            d.name.span,
            format!("set '{}' has a data type: declare it as a map", d.name.name),
        );
    }
    let mut interval = false;
    let mut dynamic = false;
    let mut constant = false;
    let mut has_timeout_flag = false;
    for f in &d.flags {
        match f.name.as_str() {
            "interval" => interval = true,
            "dynamic" => dynamic = true,
            "constant" => constant = true,
            "timeout" => has_timeout_flag = true,
            other => cx.diags.push(
                Diagnostic::error(f.span, format!("unknown set flag '{other}'"))
                    .note("set flags: interval, timeout, constant, dynamic"),
            ),
        }
    }
    let with_stmts = d.stmts.iter().any(|(k, _)| k.name != "counter")
        || d.elements.iter().any(|e| {
            e.options
                .iter()
                .any(|(k, _)| matches!(k.name.as_str(), "limit" | "quota" | "ct"))
        });
    if with_stmts {
        cx.uneval_sets.insert(
            d.name.name.clone(),
            "statements of a set's elements (limit, quota, ct count)",
        );
    }
    let timeout_ms = d.timeout.as_ref().and_then(|v| time_val(cx, v));
    let _ = has_timeout_flag;
    let size = d.size.as_ref().and_then(|v| {
        let n = val_u64(v);
        if n.is_none() {
            err(cx, v.span(), "set size must be a number");
        }
        n
    });
    let mut set = Set {
        name: d.name.name.clone(),
        key_types,
        data_types,
        is_map: d.is_map,
        verdict_map,
        objects: cx.obj_maps.get(&d.name.name).copied(),
        interval,
        dynamic,
        constant,
        timeout_ms,
        size,
        elements: Vec::new(),
        catchall: None,
        span: d.span,
        handle: 0,
        listed: Vec::new(),
    };
    // (the declaration's elements, then those added, less those deleted: the gathering)
    let elems: Vec<&ast::Elem> = elements.to_vec();
    let mut seen = std::collections::HashSet::new();
    let obj_data = std::mem::replace(&mut cx.obj_data, cx.obj_maps.get(&set.name).copied());
    let stmt_obj_data = std::mem::replace(
        &mut cx.stmt_obj_data,
        cx.stmt_obj_maps.get(&set.name).copied(),
    );
    for e in elems {
        let el = lower_elem(cx, &set, e);
        if let Some(c) = cx.catchall.take() {
            set.catchall = Some(c);
            continue;
        }
        if let Some(el) = el {
            if !set.interval && el.key.iter().any(|(lo, hi)| lo != hi) {
                cx.diags.push(
                    Diagnostic::error(
                        e.span,
                        format!(
                            "set '{}' holds single values: this element is a range or prefix",
                            set.name
                        ),
                    )
                    .note("add 'flags interval;' to the set declaration"),
                );
                continue;
            }
            // an element given twice is one element (as nftables merges it)
            if !seen.insert(el.key.clone()) {
                continue;
            }
            set.elements.push(el);
        }
    }
    cx.obj_data = obj_data;
    cx.stmt_obj_data = stmt_obj_data;
    if set.interval && set.key_types.len() == 1 && !set.is_map {
        merge_or_refuse_overlaps(cx, &mut set, d);
    }
    if let Some(sz) = set.size {
        if set.elements.len() as u64 > sz {
            err(
                cx,
                d.name.span,
                format!(
                    "set '{}' has {} elements but size {sz}",
                    set.name,
                    set.elements.len()
                ),
            );
        }
    }
    set
}

/// A named interval set's ranges: with `auto-merge`, those that overlap or touch become one
/// (as nft lists them); without it, two that overlap are refused (nft: conflicting intervals
/// specified), the same range given twice being one element.
fn merge_or_refuse_overlaps(cx: &mut Cx, set: &mut Set, d: &ast::SetDecl) {
    let mut order: Vec<usize> = (0..set.elements.len()).collect();
    order.sort_by_key(|&i| set.elements[i].key[0]);
    if d.auto_merge {
        let mut merged: Vec<Element> = Vec::new();
        for i in order {
            let e = &set.elements[i];
            let (lo, hi) = e.key[0];
            match merged.last_mut() {
                Some(m) if lo <= m.key[0].1.saturating_add(1) => {
                    m.key[0].1 = m.key[0].1.max(hi);
                }
                _ => merged.push(e.clone()),
            }
        }
        set.elements = merged;
        return;
    }
    for w in order.windows(2) {
        let (a, b) = (set.elements[w[0]].key[0], set.elements[w[1]].key[0]);
        if b.0 <= a.1 {
            let dt = set.key_types[0];
            err(
                cx,
                d.name.span,
                format!(
                    "conflicting intervals in set '{}': {} and {} overlap",
                    set.name,
                    crate::print::value::range(dt, a.0, a.1),
                    crate::print::value::range(dt, b.0, b.1)
                ),
            );
            return;
        }
    }
}

pub(super) fn time_val(cx: &mut Cx, v: &Val) -> Option<u64> {
    match v {
        Val::Word(w, s) => match parse_time_ms(w) {
            Ok(t) => Some(t),
            Err(e) => {
                err(cx, *s, e);
                None
            }
        },
        other => {
            err(cx, other.span(), "expected a time such as 30s or 1h");
            None
        }
    }
}

/// One component value of a given type as a range.
pub(super) fn comp_range(cx: &mut Cx, dt: DataType, v: &Val) -> Option<(u128, u128)> {
    let r = match v {
        Val::Word(w, _) => parse_range(dt, w),
        // nft reads a quoted word as the symbol it quotes (`ip protocol "tcp"`, as fw4 writes)
        Val::Str(s, _) => parse_range(dt, s),
        Val::Range(a, b) => match (scalar(cx, dt, a), scalar(cx, dt, b)) {
            (Some(lo), Some(hi)) if lo <= hi => Ok((lo, hi)),
            // a time of day across midnight ("21:00"-"02:00"): nft matches outside the
            // range between them; the range comes back swapped, and a plain comparison
            // (rules.rs) negates it; in a set it stays not evaluated
            (Some(lo), Some(hi)) if dt == DataType::Hour => {
                cx.uneval.push("meta hour across midnight");
                Ok((hi, lo))
            }
            (Some(_), Some(_)) => {
                Err("the range is empty: its start is greater than its end".to_string())
            }
            _ => return None,
        },
        Val::Prefix(a, n) => {
            let base = scalar(cx, dt, a)?;
            match (&**n, dt) {
                (Val::Word(n, _), DataType::Ipv4Addr | DataType::Ipv6Addr) => {
                    values::prefix_range(dt, base, n)
                }
                _ => Err(format!(
                    "a prefix needs an address type, not {}",
                    describe(dt)
                )),
            }
        }
        Val::List(items, _) if dt.is_bitmask() => {
            let mut acc = 0u128;
            for i in items {
                acc |= scalar(cx, dt, i)?;
            }
            Ok((acc, acc))
        }
        Val::List(_, _) => Err(format!(
            "a list of values is only for flags; for several {}s write a set: {{ a, b }}",
            describe(dt)
        )),
        Val::Concat(_, _) => {
            Err("unexpected concatenation: the key has a single component".to_string())
        }
        Val::Set(_, _) => Err("unexpected set here".to_string()),
    };
    match r {
        Ok(x) => Some(x),
        Err(e) => {
            err(cx, v.span(), e);
            None
        }
    }
}

pub(super) fn scalar(cx: &mut Cx, dt: DataType, v: &Val) -> Option<u128> {
    let r = match v {
        Val::Word(w, _) => parse_scalar(dt, w),
        Val::Str(s, _) => parse_scalar(dt, s),
        Val::List(items, _) if dt.is_bitmask() => {
            let mut acc = 0u128;
            for i in items {
                acc |= scalar(cx, dt, i)?;
            }
            Ok(acc)
        }
        _ => Err(format!("expected a single {}", describe(dt))),
    };
    match r {
        Ok(x) => Some(x),
        Err(e) => {
            err(cx, v.span(), e);
            None
        }
    }
}

/// A key value (maybe concatenated) against component types.
pub(super) fn key_ranges(cx: &mut Cx, types: &[DataType], v: &Val) -> Option<Vec<(u128, u128)>> {
    let comps: Vec<&Val> = match v {
        Val::Concat(parts, _) => parts.iter().collect(),
        other => vec![other],
    };
    if comps.len() != types.len() {
        cx.diags.push(
            Diagnostic::error(
                v.span(),
                format!(
                    "expected {} component(s), found {}",
                    types.len(),
                    comps.len()
                ),
            )
            .note(format!("the key is {}", type_names(types))),
        );
        return None;
    }
    let mut out = Vec::new();
    let mut ok = true;
    for (dt, c) in types.iter().zip(comps) {
        match comp_range(cx, *dt, c) {
            Some(r) => out.push(r),
            None => ok = false,
        }
    }
    ok.then_some(out)
}

pub(super) fn lower_elem(cx: &mut Cx, set: &Set, e: &ast::Elem) -> Option<Element> {
    // `*`: the catch-all element (matches what no other element does); its data is checked,
    // and it is left in `cx.catchall` for the caller (None is returned: not an error)
    let star = matches!(&e.key, ast::Val::Word(w, _) if w == "*");
    let key = if star {
        Vec::new()
    } else {
        key_ranges(cx, &set.key_types, &e.key)?
    };
    let mut timeout_ms = None;
    for (k, v) in &e.options {
        if k.name == "timeout" {
            timeout_ms = v.as_ref().and_then(|v| time_val(cx, v));
        }
    }
    let data = match (&e.data, set.is_map) {
        (None, false) => None,
        (Some(_), false) => {
            err(
                cx,
                e.span,
                format!("'{}' is a set: its elements have no data", set.name),
            );
            return None;
        }
        (None, true) => {
            err(
                cx,
                e.span,
                format!("'{}' is a map: the element needs ': value'", set.name),
            );
            return None;
        }
        (Some(ast::MapData::Verdict(v)), true) => {
            if !set.verdict_map {
                err(
                    cx,
                    v.span(),
                    format!(
                        "map '{}' holds {} values, not verdicts",
                        set.name,
                        set.data_types
                            .iter()
                            .map(|t| describe(*t))
                            .collect::<Vec<_>>()
                            .join(" . ")
                    ),
                );
                return None;
            }
            Some(MapValue::Verdict(lower_verdict(cx, v)?))
        }
        // a ct helper, ct timeout, ct expectation or synproxy map's data: the object's index
        // in the table's list of its kind
        (Some(ast::MapData::Value(v @ (ast::Val::Str(..) | ast::Val::Word(..)))), true)
            if cx.stmt_obj_data.is_some() =>
        {
            let kind = cx.stmt_obj_data?;
            let name = super::tables::other_text(v);
            match cx.stmt_objs.get(kind).and_then(|o| o.0.get(&name)) {
                Some(&i) => Some(MapValue::Value(vec![i as u128])),
                None => {
                    err(cx, v.span(), format!("no {kind} '{name}' in this table"));
                    None
                }
            }
        }
        // a counter, quota or limit map's data: the object's index in its table's list
        (Some(ast::MapData::Value(v @ (ast::Val::Str(..) | ast::Val::Word(..)))), true)
            if cx.obj_data.is_some() =>
        {
            let kind = cx.obj_data?;
            let i = super::objects::object_index(cx, kind, v)?;
            Some(MapValue::Value(vec![i as u128]))
        }
        // an object map's data: a name (of any length; nft's are up to 255 bytes), kept by
        // the syntax tree and not evaluated
        (Some(ast::MapData::Value(ast::Val::Str(..) | ast::Val::Word(..))), true)
            if cx.uneval_sets.get(&set.name) == Some(&"object map") =>
        {
            Some(MapValue::Value(vec![0]))
        }
        (Some(ast::MapData::Value(v)), true) => {
            if set.verdict_map {
                err(
                    cx,
                    v.span(),
                    format!(
                        "map '{}' holds verdicts (accept, drop, jump CHAIN, ...)",
                        set.name
                    ),
                );
                return None;
            }
            let r = key_ranges(cx, &set.data_types, v)?;
            // a data range is allowed for NAT address/port ranges: with one, every component
            // is kept as lo, hi (2 values a component); without, one value a component
            let mut vals = Vec::new();
            let ranges = r.iter().any(|(lo, hi)| lo != hi);
            for (lo, hi) in r {
                vals.push(lo);
                if ranges {
                    vals.push(hi);
                }
            }
            Some(MapValue::Value(vals))
        }
    };
    if star {
        cx.catchall = Some(Element {
            key: Vec::new(),
            data,
            timeout_ms,
        });
        return None;
    }
    Some(Element {
        key,
        data,
        timeout_ms,
    })
}
