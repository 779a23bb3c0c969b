//! nft JSON statements (the members of a rule's `expr` array) as nft text.

use super::exprs::{
    expr, flags_of, int_of, kind, ms_text, opt_int, opt_str, quoted, set_ref, str_of, verdict,
};
use super::input::{err, R};
use serde_json::{Map, Value};

/// One statement (`{"match": {...}}`, `{"accept": null}`, ...) as nft text.
pub fn statement(v: &Value, p: &str) -> R<String> {
    let Value::Object(o) = v else {
        return err(p, format!("expected a statement object, found {}", kind(v)));
    };
    let mut it = o.iter();
    let (Some((k, x)), None) = (it.next(), it.next()) else {
        return err(p, "a statement is an object with one key");
    };
    statement_kv(k, x, &format!("{p}.{k}"))
}

fn obj<'a>(v: &'a Value, p: &str) -> R<&'a Map<String, Value>> {
    v.as_object().map_or_else(
        || err(p, format!("expected an object, found {}", kind(v))),
        Ok,
    )
}

fn get<'a>(o: &'a Map<String, Value>, k: &str, p: &str) -> R<&'a Value> {
    o.get(k)
        .map_or_else(|| err(p, format!("'{k}' is missing")), Ok)
}

fn sub(o: &Map<String, Value>, k: &str, p: &str) -> R<String> {
    expr(get(o, k, p)?, &format!("{p}.{k}"))
}

fn inv(o: &Map<String, Value>) -> bool {
    matches!(o.get("inv"), Some(Value::Bool(true)))
}

/// A byte count with its unit (`1 kbytes`) as JSON gives it (`val` and `val_unit`).
fn amount(o: &Map<String, Value>, k: &str, unit: &str, p: &str) -> R<String> {
    let n = int_of(o, k, p)?;
    Ok(match opt_str(o, unit, p)? {
        Some(u) => format!("{n} {u}"),
        None => format!("{n} bytes"),
    })
}

/// An address for `to`: IPv6 addresses in brackets when a port follows.
fn nat_addr(v: &Value, port: bool, p: &str) -> R<String> {
    let bracket = |s: &str| {
        if port && s.contains(':') {
            format!("[{s}]")
        } else {
            s.to_string()
        }
    };
    match v {
        Value::String(s) => Ok(bracket(s)),
        Value::Object(o) if o.len() == 1 && o.contains_key("range") => {
            match o.get("range").and_then(Value::as_array).map(Vec::as_slice) {
                Some([Value::String(a), Value::String(b)]) => {
                    Ok(format!("{}-{}", bracket(a), bracket(b)))
                }
                _ => expr(v, p),
            }
        }
        _ => expr(v, p),
    }
}

/// True when `==` must be written: the left side is an operation or a bitmask.
fn exact(lv: &Value, left: &str) -> bool {
    let op = lv.as_object().is_some_and(|o| {
        o.keys()
            .any(|k| matches!(k.as_str(), "&" | "|" | "^" | "<<" | ">>"))
    });
    op || matches!(
        left.rsplit(' ').next(),
        Some("flags" | "state" | "status" | "event")
    )
}

/// Selectors whose values are strings (interface and OS names): their constants quoted.
fn string_typed(left: &str) -> bool {
    matches!(
        left.rsplit(' ').next(),
        Some(
            "iifname"
                | "oifname"
                | "ibrname"
                | "obrname"
                | "ibriport"
                | "obriport"
                | "sdifname"
                | "iifkind"
                | "oifkind"
        )
    ) || left.starts_with("osf ")
}

/// An address (or a number): left bare where names are quoted.
fn address_like(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_digit()) || s.contains(':')
}

/// A value whose strings are quoted (a string, or a set of them).
fn strings_quoted(v: &Value, p: &str) -> R<String> {
    match v {
        Value::String(s) if !address_like(s) => Ok(quoted(s)),
        Value::Object(o) if o.len() == 1 && o.contains_key("set") => match &o["set"] {
            Value::Array(a) => {
                let parts: R<Vec<String>> = a
                    .iter()
                    .enumerate()
                    .map(|(i, e)| strings_quoted(e, &format!("{p}.set[{i}]")))
                    .collect();
                Ok(format!("{{ {} }}", parts?.join(", ")))
            }
            _ => expr(v, p),
        },
        _ => expr(v, p),
    }
}

/// A map lookup whose data are names (objects, devices): `KEY map { K : "name", ... }`.
fn map_of_names(x: &Value, p: &str) -> R<String> {
    let Some(m) = x.get("map").and_then(Value::as_object) else {
        return expr(x, p);
    };
    let (Some(key), Some(Value::Object(d))) = (m.get("key"), m.get("data")) else {
        return expr(x, p);
    };
    let Some(Value::Array(elems)) = d.get("set") else {
        return expr(x, p);
    };
    let mut parts = Vec::new();
    for (i, e) in elems.iter().enumerate() {
        let q = format!("{p}.map.data.set[{i}]");
        match e.as_array().map(Vec::as_slice) {
            Some([k, v]) => parts.push(format!(
                "{} : {}",
                expr(k, &format!("{q}[0]"))?,
                strings_quoted(v, &format!("{q}[1]"))?
            )),
            _ => parts.push(expr(e, &q)?),
        }
    }
    Ok(format!(
        "{} map {{ {} }}",
        expr(key, &format!("{p}.map.key"))?,
        parts.join(", ")
    ))
}

/// A named object's reference (`"cnt1"`) or a map choosing one: `name "cnt1"` / `name EXPR`.
fn objref(x: &Value, p: &str) -> R<String> {
    match x {
        Value::String(s) => Ok(format!("name {}", quoted(s))),
        _ => Ok(format!("name {}", map_of_names(x, p)?)),
    }
}

/// A statement given as its key and value.
pub(super) fn statement_kv(k: &str, x: &Value, p: &str) -> R<String> {
    match k {
        "match" => {
            let o = obj(x, p)?;
            let lv = get(o, "left", p)?;
            let mut left = sub(o, "left", p)?;
            let rv = get(o, "right", p)?;
            let op = str_of(o, "op", p)?;
            if let Value::Bool(b) = rv {
                // existence: `exthdr frag exists`, `tcp option sack missing`, `fib daddr
                // check missing`
                if lv.get("fib").is_some() {
                    if let Some((head, _)) = left.rsplit_once(' ') {
                        left = format!("{head} check");
                    }
                }
                let what = if *b { "exists" } else { "missing" };
                return Ok(match op {
                    "!=" => format!("{left} != {what}"),
                    _ => format!("{left} {what}"),
                });
            }
            let q = format!("{p}.right");
            let right = if string_typed(&left) {
                strings_quoted(rv, &q)?
            } else {
                expr(rv, &q)?
            };
            match op {
                "in" => Ok(format!("{left} {right}")),
                // `==` is the implicit operator but on a bitmask (`tcp flags == syn` is not
                // `tcp flags syn`) and after an operator
                "==" if !exact(lv, &left) => Ok(format!("{left} {right}")),
                "==" | "!=" | "<" | ">" | "<=" | ">=" | "!" => Ok(format!("{left} {op} {right}")),
                "&" => Ok(format!("{left} & {right} != 0")),
                _ => err(&format!("{p}.op"), format!("unknown operator '{op}'")),
            }
        }
        "accept" | "drop" | "continue" | "return" | "jump" | "goto" => verdict(k, x, p),
        "mangle" => {
            let o = obj(x, p)?;
            let value = match get(o, "value", p)? {
                // flags set together: `ct event set new | related`
                Value::Array(a) => {
                    let parts: R<Vec<String>> = a
                        .iter()
                        .enumerate()
                        .map(|(i, e)| expr(e, &format!("{p}.value[{i}]")))
                        .collect();
                    parts?.join(" | ")
                }
                _ => sub(o, "value", p)?,
            };
            Ok(format!("{} set {value}", sub(o, "key", p)?))
        }
        "vmap" => {
            let o = obj(x, p)?;
            Ok(format!(
                "{} vmap {}",
                sub(o, "key", p)?,
                set_ref(get(o, "data", p)?, &format!("{p}.data"))?
            ))
        }
        "counter" => match x {
            Value::Null => Ok("counter".into()),
            Value::Object(o) if o.contains_key("packets") || o.contains_key("bytes") => {
                let mut s = "counter".to_string();
                if let Some(n) = opt_int(o, "packets", p)? {
                    s.push_str(&format!(" packets {n}"));
                }
                if let Some(n) = opt_int(o, "bytes", p)? {
                    s.push_str(&format!(" bytes {n}"));
                }
                Ok(s)
            }
            _ => Ok(format!("counter {}", objref(x, p)?)),
        },
        "limit" => match x {
            Value::Object(o) if o.contains_key("rate") => {
                let mut s = "limit rate ".to_string();
                if inv(o) {
                    s.push_str("over ");
                }
                let rate = int_of(o, "rate", p)?;
                let per = opt_str(o, "per", p)?.unwrap_or("second");
                match opt_str(o, "rate_unit", p)? {
                    Some(u) if u != "packets" => s.push_str(&format!("{rate} {u}/{per}")),
                    _ => s.push_str(&format!("{rate}/{per}")),
                }
                if let Some(b) = opt_int(o, "burst", p)? {
                    if b != 0 {
                        let u = opt_str(o, "burst_unit", p)?.unwrap_or("packets");
                        s.push_str(&format!(" burst {b} {u}"));
                    }
                }
                Ok(s)
            }
            _ => Ok(format!("limit {}", objref(x, p)?)),
        },
        "quota" => match x {
            Value::Object(o) if o.contains_key("val") => {
                let mut s = "quota ".to_string();
                if inv(o) {
                    s.push_str("over ");
                }
                s.push_str(&amount(o, "val", "val_unit", p)?);
                if o.contains_key("used") {
                    s.push_str(&format!(" used {}", amount(o, "used", "used_unit", p)?));
                }
                Ok(s)
            }
            _ => Ok(format!("quota {}", objref(x, p)?)),
        },
        "ct count" => {
            let o = obj(x, p)?;
            let over = if inv(o) { "over " } else { "" };
            Ok(format!("ct count {over}{}", int_of(o, "val", p)?))
        }
        "log" => log(x, p),
        "reject" => match x {
            Value::Null => Ok("reject".into()),
            _ => {
                let o = obj(x, p)?;
                match opt_str(o, "type", p)? {
                    None => Ok("reject".into()),
                    Some("tcp reset") => Ok("reject with tcp reset".into()),
                    Some(t) => {
                        let code = match o.get("expr") {
                            Some(e) => expr(e, &format!("{p}.expr"))?,
                            None => "port-unreachable".into(),
                        };
                        Ok(format!("reject with {t} {code}"))
                    }
                }
            }
        },
        "snat" | "dnat" | "masquerade" | "redirect" => nat(k, x, p),
        "notrack" => Ok("notrack".into()),
        "queue" => {
            let mut s = "queue".to_string();
            if let Value::Object(o) = x {
                let flags = flags_of(o, "flags", p)?;
                if !flags.is_empty() {
                    s.push_str(&format!(" flags {}", flags.join(",")));
                }
                if let Some(n) = o.get("num") {
                    let q = format!("{p}.num");
                    let t = expr(n, &q)?;
                    let constant = matches!(n, Value::Number(_))
                        || n.as_object().is_some_and(|r| r.contains_key("range"));
                    s.push_str(&format!(" {} {t}", if constant { "num" } else { "to" }));
                }
            }
            Ok(s)
        }
        "dup" => {
            let o = obj(x, p)?;
            match (o.get("addr"), opt_str(o, "dev", p)?) {
                (Some(a), Some(d)) => Ok(format!(
                    "dup to {} device {}",
                    expr(a, &format!("{p}.addr"))?,
                    quoted(d)
                )),
                (Some(a @ Value::String(_)), None) => {
                    Ok(format!("dup to {}", strings_quoted(a, &format!("{p}.addr"))?))
                }
                (Some(a), None) => Ok(format!("dup to {}", map_of_names(a, &format!("{p}.addr"))?)),
                (None, Some(d)) => Ok(format!("dup to {}", quoted(d))),
                (None, None) if o.contains_key("map") => {
                    Ok(format!("dup to {}", map_of_names(x, p)?))
                }
                (None, None) => err(p, "dup needs 'addr' or 'dev'"),
            }
        }
        "fwd" => {
            let o = obj(x, p)?;
            let dev = match get(o, "dev", p)? {
                Value::String(s) => quoted(s),
                d => expr(d, &format!("{p}.dev"))?,
            };
            match o.get("addr") {
                Some(a) => {
                    let fam = opt_str(o, "family", p)?.unwrap_or("ip");
                    Ok(format!(
                        "fwd {fam} to {} device {dev}",
                        expr(a, &format!("{p}.addr"))?
                    ))
                }
                None => Ok(format!("fwd to {dev}")),
            }
        }
        "tproxy" => {
            let o = obj(x, p)?;
            let mut s = "tproxy".to_string();
            if let Some(f) = opt_str(o, "family", p)? {
                s.push_str(&format!(" {f}"));
            }
            s.push_str(" to ");
            let port = o.get("port");
            if let Some(a) = o.get("addr") {
                s.push_str(&nat_addr(a, port.is_some(), &format!("{p}.addr"))?);
            }
            if let Some(pt) = port {
                s.push_str(&format!(":{}", expr(pt, &format!("{p}.port"))?));
            }
            Ok(s)
        }
        "synproxy" => match x {
            Value::Null => Ok("synproxy".into()),
            Value::Object(o) if !o.contains_key("map") => {
                let mut s = "synproxy".to_string();
                if let Some(m) = opt_int(o, "mss", p)? {
                    s.push_str(&format!(" mss {m}"));
                }
                if let Some(w) = opt_int(o, "wscale", p)? {
                    s.push_str(&format!(" wscale {w}"));
                }
                for f in flags_of(o, "flags", p)? {
                    s.push_str(&format!(" {f}"));
                }
                Ok(s)
            }
            _ => Ok(format!("synproxy {}", objref(x, p)?)),
        },
        "set" | "map" => {
            let o = obj(x, p)?;
            let op = str_of(o, "op", p)?;
            let name = set_ref(get(o, k, p)?, &format!("{p}.{k}"))?;
            let mut e = sub(o, "elem", p)?;
            if let Some(Value::Array(stmts)) = o.get("stmt") {
                for (i, s) in stmts.iter().enumerate() {
                    e.push(' ');
                    e.push_str(&statement(s, &format!("{p}.stmt[{i}]"))?);
                }
            }
            if k == "map" {
                e.push_str(&format!(" : {}", sub(o, "data", p)?));
            }
            Ok(format!("{op} {name} {{ {e} }}"))
        }
        "flow" => {
            let o = obj(x, p)?;
            let op = opt_str(o, "op", p)?.unwrap_or("add");
            let ft = str_of(o, "flowtable", p)?;
            let ft = ft.strip_prefix('@').unwrap_or(ft);
            Ok(format!("flow {op} @{ft}"))
        }
        "ct helper" | "ct timeout" | "ct expectation" => match x {
            Value::String(s) => Ok(format!("{k} set {}", quoted(s))),
            _ => Ok(format!("{k} set {}", map_of_names(x, p)?)),
        },
        "secmark" => match x {
            Value::String(s) => Ok(format!("meta secmark set {}", quoted(s))),
            _ => Ok(format!("meta secmark set {}", expr(x, p)?)),
        },
        "last" => match x {
            Value::Object(o) => match opt_int(o, "used", p)? {
                Some(ms) => Ok(format!("last used {}", ms_text(ms))),
                None => Ok("last".into()),
            },
            _ => Ok("last".into()),
        },
        "reset" => {
            let o = obj(x, p)?;
            let t = expr(&Value::Object(o.clone()), p)?;
            Ok(format!("reset {t}"))
        }
        "xt" => err(
            p,
            "xt (an iptables extension nft could not translate) has no nft syntax: it cannot be read",
        ),
        _ => err(p, format!("unknown statement '{k}'")),
    }
}

fn log(x: &Value, p: &str) -> R<String> {
    let mut s = "log".to_string();
    let Value::Object(o) = x else {
        return Ok(s);
    };
    if let Some(pre) = opt_str(o, "prefix", p)? {
        s.push_str(&format!(" prefix {}", quoted(pre)));
    }
    for k in ["group", "snaplen", "queue-threshold"] {
        if let Some(n) = opt_int(o, k, p)? {
            s.push_str(&format!(" {k} {n}"));
        }
    }
    if let Some(l) = opt_str(o, "level", p)? {
        s.push_str(&format!(" level {l}"));
    }
    let flags = flags_of(o, "flags", p)?;
    let tcp: Vec<&str> = flags
        .iter()
        .filter_map(|f| f.strip_prefix("tcp "))
        .collect();
    if !tcp.is_empty() {
        s.push_str(&format!(" flags tcp {}", tcp.join(",")));
    }
    for f in flags.iter().filter(|f| !f.starts_with("tcp ")) {
        s.push_str(&format!(" flags {f}"));
    }
    Ok(s)
}

fn nat(k: &str, x: &Value, p: &str) -> R<String> {
    let mut s = k.to_string();
    let Value::Object(o) = x else {
        return Ok(s);
    };
    let fam = opt_str(o, "family", p)?;
    if let Some(f) = fam {
        s.push_str(&format!(" {f}"));
    }
    let tf = flags_of(o, "type_flags", p)?;
    if tf.iter().any(|f| f == "prefix") {
        s.push_str(" prefix");
    } else if tf.iter().any(|f| f == "interval") && !tf.iter().any(|f| f == "concat") {
        s.push_str(" interval");
    }
    let port = o.get("port");
    if let Some(a) = o.get("addr") {
        s.push_str(&format!(
            " to {}",
            nat_addr(a, port.is_some(), &format!("{p}.addr"))?
        ));
        if let Some(pt) = port {
            s.push_str(&format!(":{}", expr(pt, &format!("{p}.port"))?));
        }
    } else if let Some(pt) = port {
        s.push_str(&format!(" to :{}", expr(pt, &format!("{p}.port"))?));
    }
    // `netmap` is what `prefix` means for nft; weir's parser reads `prefix` alone
    let flags: Vec<String> = flags_of(o, "flags", p)?
        .into_iter()
        .filter(|f| f != "netmap" || !tf.iter().any(|t| t == "prefix"))
        .collect();
    if !flags.is_empty() {
        s.push_str(&format!(" {}", flags.join(",")));
    }
    Ok(s)
}
