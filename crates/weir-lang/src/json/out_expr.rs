//! JSON out: values and expressions of a rule's syntax tree (parsed from the printer's
//! canonical text, so constants are already typed as nft lists them) as nft's JSON.

use crate::ast::{BinOp, Elem, Expr, MapData, SetRef, Val, VerdictAst};
use crate::parser::{BARE_META, TUNNELS};
use serde_json::{json, Map, Value};

/// Header names whose fields are IPv6 extension headers (`hbh nexthdr`).
const EXTHDRS: &[&str] = &["hbh", "rt0", "rt2", "srh", "frag", "dst", "mh"];
/// Fields of the IPv6 routing header (`rt type`), not of the routing expression.
const RT_HDR_FIELDS: &[&str] = &["nexthdr", "hdrlength", "type", "seg-left"];

/// An integer written in decimal or hexadecimal.
pub(super) fn int(w: &str) -> Option<u64> {
    match w.strip_prefix("0x") {
        Some(h) if !h.is_empty() => u64::from_str_radix(h, 16).ok(),
        Some(_) => None,
        None if !w.is_empty() && w.bytes().all(|b| b.is_ascii_digit()) => w.parse().ok(),
        None => None,
    }
}

/// A word that is an address or a number (a range's or a prefix's end).
fn addr_or_int(w: &str) -> bool {
    int(w).is_some()
        || w.parse::<std::net::IpAddr>().is_ok()
        || (w.contains(':') && w.chars().all(|c| c.is_ascii_hexdigit() || c == ':'))
}

/// One word as a JSON value: numbers as numbers, `a-b` a range, `a/n` a prefix, else the
/// word as a string.
pub(super) fn word(w: &str) -> Value {
    if let Some(n) = int(w) {
        return json!(n);
    }
    match w {
        "exists" => return json!(true),
        "missing" => return json!(false),
        _ => {}
    }
    // a duration (`30s`, `1m7s`) in seconds
    if w.bytes().any(|b| b.is_ascii_alphabetic())
        && w.bytes().next().is_some_and(|b| b.is_ascii_digit())
    {
        if let Some(ms) = duration_ms(w) {
            return json!(ms / 1000);
        }
    }
    if let Some((a, l)) = w.split_once('/') {
        if let (true, Some(n)) = (addr_or_int(a), int(l)) {
            if w.parse::<std::net::IpAddr>().is_err() {
                return json!({"prefix": {"addr": word(a), "len": n}});
            }
        }
    }
    if w.parse::<std::net::IpAddr>().is_err() {
        // a range of numbers or IPv4 addresses (IPv6 ranges are spaced)
        if let Some((a, b)) = w.split_once('-') {
            let dur = |x: &str| {
                x.bytes().next().is_some_and(|b| b.is_ascii_digit()) && duration_ms(x).is_some()
            };
            if (addr_or_int(a) || dur(a)) && (addr_or_int(b) || dur(b)) {
                return json!({"range": [word(a), word(b)]});
            }
        }
    }
    Value::String(w.to_string())
}

/// A value of the syntax tree.
pub(super) fn val(v: &Val) -> Value {
    match v {
        Val::Word(w, _) => word(w),
        Val::Str(s, _) => Value::String(s.clone()),
        Val::Range(a, b) => json!({"range": [val(a), val(b)]}),
        Val::Prefix(a, b) => {
            let len = val(b);
            json!({"prefix": {"addr": val(a), "len": len}})
        }
        Val::List(vs, _) => {
            if vs.len() == 1 {
                val(&vs[0])
            } else {
                Value::Array(vs.iter().map(val).collect())
            }
        }
        Val::Concat(vs, _) => json!({"concat": vs.iter().map(val).collect::<Vec<_>>()}),
        Val::Set(es, _) => json!({"set": es.iter().map(elem).collect::<Vec<_>>()}),
    }
}

/// A set element: the key, `[key, data]` in a map, with its options in `{"elem": ...}`.
pub(super) fn elem(e: &Elem) -> Value {
    let mut key = match &e.key {
        // flags together: `syn | ack`
        Val::List(vs, _) if vs.len() > 1 => json!({ "|": vs.iter().map(val).collect::<Vec<_>>() }),
        k => val(k),
    };
    if !e.options.is_empty() {
        let mut o = Map::new();
        o.insert("val".into(), key);
        for (k, v) in &e.options {
            let x = match (k.name.as_str(), v) {
                ("timeout" | "expires", Some(v)) => seconds(v),
                ("counter", _) => json!({"packets": 0, "bytes": 0}),
                (_, Some(v)) => val(v),
                (_, None) => Value::Null,
            };
            o.insert(k.name.clone(), x);
        }
        key = json!({ "elem": o });
    }
    match &e.data {
        None => key,
        Some(MapData::Value(v)) => json!([key, val(v)]),
        Some(MapData::Verdict(v)) => json!([key, verdict(v)]),
    }
}

/// A duration (`30s`, `1h`) in seconds.
pub(super) fn seconds(v: &Val) -> Value {
    match v {
        Val::Word(w, _) => match duration_ms(w) {
            Some(ms) => json!(ms / 1000),
            None => word(w),
        },
        _ => val(v),
    }
}

/// A duration written `1d2h3m4s5ms` in milliseconds.
pub(super) fn duration_ms(w: &str) -> Option<u64> {
    let mut total = 0u64;
    let mut num = String::new();
    let mut chars = w.chars().peekable();
    let mut any = false;
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            num.push(c);
            continue;
        }
        let n: u64 = num.parse().ok()?;
        num.clear();
        let unit = match c {
            'd' => 86_400_000,
            'h' => 3_600_000,
            'm' if chars.peek() == Some(&'s') => {
                chars.next();
                1
            }
            'm' => 60_000,
            's' => 1000,
            _ => return None,
        };
        total += n * unit;
        any = true;
    }
    if !num.is_empty() {
        total += num.parse::<u64>().ok()? * 1000;
        any = true;
    }
    any.then_some(total)
}

pub(super) fn verdict(v: &VerdictAst) -> Value {
    match v {
        VerdictAst::Accept(_) => json!({"accept": null}),
        VerdictAst::Drop(_) => json!({"drop": null}),
        VerdictAst::Continue(_) => json!({"continue": null}),
        VerdictAst::Return(_) => json!({"return": null}),
        VerdictAst::Jump(n, _) => json!({"jump": {"target": n.name}}),
        VerdictAst::Goto(n, _) => json!({"goto": {"target": n.name}}),
    }
}

/// A set reference: `"@name"` or `{"set": [...]}`.
pub(super) fn set_ref(s: &SetRef) -> Value {
    match s {
        SetRef::Named(n) => Value::String(format!("@{}", n.name)),
        SetRef::Anon(es, _) => json!({"set": es.iter().map(elem).collect::<Vec<_>>()}),
    }
}

fn op_name(op: BinOp) -> &'static str {
    match op {
        BinOp::And => "&",
        BinOp::Or => "|",
        BinOp::Xor => "^",
        BinOp::Shl => "<<",
        BinOp::Shr => ">>",
    }
}

/// An expression.
pub(super) fn expr(e: &Expr) -> Value {
    match e {
        Expr::Selector(ws, _) => {
            let words: Vec<&str> = ws.iter().map(|i| i.name.as_str()).collect();
            selector(&words)
        }
        Expr::Concat(es, _) => json!({"concat": es.iter().map(expr).collect::<Vec<_>>()}),
        Expr::Binop(op, l, r, _) => {
            let k = op_name(*op);
            let right = match r {
                Val::List(vs, _) if vs.len() > 1 => {
                    json!({ "|": vs.iter().map(val).collect::<Vec<_>>() })
                }
                _ => val(r),
            };
            // `a | b | c` is one operation of three operands, as nft lists it
            let mut left = expr(l);
            if let Some(Value::Array(a)) = left.get_mut(k) {
                if matches!(op, BinOp::Or | BinOp::And | BinOp::Xor) {
                    a.push(right);
                    return left;
                }
            }
            json!({ k: [left, right] })
        }
        Expr::BinopExpr(op, l, r, _) => json!({ op_name(*op): [expr(l), expr(r)] }),
        Expr::Hash {
            kind,
            key,
            modulus,
            seed,
            offset,
            ..
        } => {
            let mut o = Map::new();
            o.insert("mod".into(), val(modulus));
            if let Some(k) = key {
                o.insert("expr".into(), expr(k));
            }
            if let Some(s) = seed {
                o.insert("seed".into(), val(s));
            }
            if let Some(off) = offset {
                o.insert("offset".into(), val(off));
            }
            json!({ kind.name.clone(): o })
        }
        Expr::Numgen {
            mode,
            modulus,
            offset,
            ..
        } => {
            let mut o = Map::new();
            o.insert("mode".into(), json!(mode.name));
            o.insert("mod".into(), val(modulus));
            o.insert("offset".into(), offset.as_ref().map_or(json!(0), val));
            json!({ "numgen": o })
        }
        Expr::Map(k, s, _) => json!({"map": {"key": expr(k), "data": set_ref(s)}}),
        Expr::Const(v) => val(v),
    }
}

/// A selector's words as nft's JSON expression.
pub(super) fn selector(w: &[&str]) -> Value {
    match w {
        [m] if BARE_META.contains(m) => json!({"meta": {"key": m}}),
        ["meta", k] => json!({"meta": {"key": k}}),
        ["exthdr", n] => json!({"exthdr": {"name": n}}),
        ["tcp", "option", n, rest @ ..] => {
            let mut o = Map::new();
            match int(n) {
                Some(k) => {
                    o.insert("base".into(), json!(k));
                    o.insert("len".into(), json!(8));
                    o.insert("offset".into(), json!(0));
                }
                None => {
                    o.insert("name".into(), json!(n));
                }
            }
            if let [f] = rest {
                o.insert("field".into(), json!(f));
            }
            json!({ "tcp option": o })
        }
        ["ip", "option", n, rest @ ..] | ["sctp", "chunk", n, rest @ ..] => {
            let k = format!("{} {}", w[0], w[1]);
            let mut o = Map::new();
            o.insert("name".into(), json!(n));
            if let [f] = rest {
                o.insert("field".into(), json!(f));
            }
            json!({ k: o })
        }
        ["dccp", "option", n] => json!({"dccp option": {"type": word(n)}}),
        ["ct", rest @ ..] => {
            let mut o = Map::new();
            let mut rest = rest;
            if let [d @ ("original" | "reply"), r @ ..] = rest {
                o.insert("dir".into(), json!(d));
                rest = r;
            }
            o.insert("key".into(), json!(rest.join(" ")));
            json!({ "ct": o })
        }
        ["rt", f @ ("ip" | "ip6"), k] => json!({"rt": {"key": k, "family": f}}),
        ["rt", f] if !RT_HDR_FIELDS.contains(f) => json!({"rt": {"key": f}}),
        [h, f] if EXTHDRS.contains(h) || *h == "rt" => {
            json!({"exthdr": {"name": h, "field": f}})
        }
        ["fib", rest @ ..] if !rest.is_empty() => {
            let (result, flags) = rest.split_last().unwrap_or((&"", &[]));
            json!({"fib": {"result": result, "flags": flags}})
        }
        ["osf", "ttl", t, k] => json!({"osf": {"key": k, "ttl": t}}),
        ["osf", k] => json!({"osf": {"key": k}}),
        ["socket", k, rest @ ..] => match rest {
            ["level", l] => json!({"socket": {"key": k, "level": word(l)}}),
            _ => json!({"socket": {"key": k}}),
        },
        ["ipsec", dir, rest @ ..] => {
            let mut o = Map::new();
            o.insert("dir".into(), json!(dir));
            let mut rest = rest;
            o.insert("spnum".into(), json!(0));
            if let ["spnum", n, r @ ..] = rest {
                o.insert("spnum".into(), word(n));
                rest = r;
            }
            if let [f @ ("ip" | "ip6"), r @ ..] = rest {
                o.insert("family".into(), json!(f));
                rest = r;
            }
            o.insert("key".into(), json!(rest.join(" ")));
            json!({ "ipsec": o })
        }
        [t, rest @ ..] if TUNNELS.contains(t) && rest.len() == 2 => {
            json!({"payload": {"protocol": rest[0], "field": rest[1], "tunnel": t}})
        }
        [t @ ("vxlan" | "geneve"), f] => {
            json!({"payload": {"protocol": t, "field": f, "tunnel": t}})
        }
        [b, off, len] if b.starts_with('@') => json!({"payload": {
            "base": &b[1..], "offset": word(off), "len": word(len)
        }}),
        [proto, field] => json!({"payload": {"protocol": proto, "field": field}}),
        _ => Value::String(w.join(" ")),
    }
}
