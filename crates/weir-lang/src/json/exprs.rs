//! nft JSON expressions and statements (libnftables-json) as nft text: one JSON value of a
//! rule's `expr` array becomes the words `nft` would read for it.

use super::input::{err, R};
use serde_json::{Map, Value};

/// A JSON object as the single key it is named by and its value (`{"payload": {...}}`).
fn single<'a>(o: &'a Map<String, Value>, p: &str) -> R<(&'a str, &'a Value)> {
    let mut it = o.iter();
    match (it.next(), it.next()) {
        (Some((k, v)), None) => Ok((k.as_str(), v)),
        (None, _) => err(p, "an empty object where an expression was expected"),
        _ => err(
            p,
            format!(
                "an object with several keys ({}) where one expression was expected",
                o.keys().cloned().collect::<Vec<_>>().join(", ")
            ),
        ),
    }
}

/// The object under `key` of `v`, or an error naming `p`.
fn obj<'a>(v: &'a Value, p: &str) -> R<&'a Map<String, Value>> {
    v.as_object().map_or_else(
        || err(p, format!("expected an object, found {}", kind(v))),
        Ok,
    )
}

/// What a JSON value is, for messages.
pub(super) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A string field of an object.
pub(super) fn str_of<'a>(o: &'a Map<String, Value>, k: &str, p: &str) -> R<&'a str> {
    match o.get(k) {
        Some(Value::String(s)) => Ok(s),
        Some(v) => err(
            &format!("{p}.{k}"),
            format!("expected a string, found {}", kind(v)),
        ),
        None => err(p, format!("'{k}' is missing")),
    }
}

/// An optional string field.
pub(super) fn opt_str<'a>(o: &'a Map<String, Value>, k: &str, p: &str) -> R<Option<&'a str>> {
    match o.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(v) => err(
            &format!("{p}.{k}"),
            format!("expected a string, found {}", kind(v)),
        ),
    }
}

/// An integer field.
pub(super) fn int_of(o: &Map<String, Value>, k: &str, p: &str) -> R<i64> {
    match o.get(k) {
        Some(Value::Number(n)) if n.as_i64().is_some() => Ok(n.as_i64().unwrap_or_default()),
        Some(v) => err(
            &format!("{p}.{k}"),
            format!("expected an integer, found {}", kind(v)),
        ),
        None => err(p, format!("'{k}' is missing")),
    }
}

/// An optional integer field.
pub(super) fn opt_int(o: &Map<String, Value>, k: &str, p: &str) -> R<Option<i64>> {
    match o.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(_) => int_of(o, k, p).map(Some),
    }
}

/// A flag field: one string or an array of strings.
pub(super) fn flags_of(o: &Map<String, Value>, k: &str, p: &str) -> R<Vec<String>> {
    match o.get(k) {
        None | Some(Value::Null) => Ok(vec![]),
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, f)| match f {
                Value::String(s) => Ok(s.clone()),
                v => err(
                    &format!("{p}.{k}[{i}]"),
                    format!("expected a flag name, found {}", kind(v)),
                ),
            })
            .collect(),
        Some(v) => err(
            &format!("{p}.{k}"),
            format!("expected a flag or an array of flags, found {}", kind(v)),
        ),
    }
}

/// A string as an nft word: bare when the lexer reads it as one word, else quoted.
pub fn word(s: &str) -> String {
    // a time of day (`21:00`, `02:02:02`) is a string
    let clock = s.contains(':')
        && !s.contains("::")
        && s.matches(':').count() <= 2
        && s.chars().all(|c| c.is_ascii_digit() || c == ':');
    if clock {
        return quoted(s);
    }
    // `Linux:3.0` is a string, `fe80::1` and `bcad:dada` are words
    let colon_word = !s.contains(':')
        || s.chars()
            .all(|c| c.is_ascii_hexdigit() || matches!(c, ':' | '.' | '/' | '-'));
    let plain = !s.is_empty()
        && colon_word
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':' | '/' | '@'))
        && !s.starts_with('-');
    if plain {
        s.to_string()
    } else {
        quoted(s)
    }
}

/// A string in double quotes.
pub fn quoted(s: &str) -> String {
    format!("\"{s}\"")
}

/// A duration in milliseconds as nft writes it (`300s`, `1500ms`).
pub(super) fn ms_text(ms: i64) -> String {
    if ms % 1000 == 0 {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

fn number(n: &serde_json::Number) -> String {
    n.to_string()
}

/// The nft text of an expression (a value, a selector, a set, a map lookup, ...).
pub fn expr(v: &Value, p: &str) -> R<String> {
    match v {
        Value::Null => err(p, "null where an expression was expected"),
        Value::Bool(b) => Ok(if *b { "exists" } else { "missing" }.into()),
        Value::Number(n) => Ok(number(n)),
        Value::String(s) if s == "*" => Ok("*".into()),
        Value::String(s) => Ok(word(s)),
        // a list of flags: `established,related`
        Value::Array(a) => {
            let parts: R<Vec<String>> = a
                .iter()
                .enumerate()
                .map(|(i, x)| expr(x, &format!("{p}[{i}]")))
                .collect();
            Ok(parts?.join(","))
        }
        Value::Object(o) => {
            let (k, x) = single(o, p)?;
            let q = format!("{p}.{k}");
            object_expr(k, x, &q)
        }
    }
}

fn object_expr(k: &str, x: &Value, p: &str) -> R<String> {
    match k {
        "payload" => payload(obj(x, p)?, p),
        "exthdr" => {
            let o = obj(x, p)?;
            let name = str_of(o, "name", p)?;
            match opt_str(o, "field", p)? {
                Some(f) => Ok(format!("{name} {f}")),
                None => Ok(format!("exthdr {name}")),
            }
        }
        "tcp option" => {
            let o = obj(x, p)?;
            let head = match opt_str(o, "name", p)? {
                Some(n) => n.to_string(),
                None => {
                    let base = int_of(o, "base", p)?;
                    let (off, len) = (opt_int(o, "offset", p)?, opt_int(o, "len", p)?);
                    match (off, len) {
                        (Some(o), Some(l)) if l > 0 && !(o == 0 && l == 8) => {
                            format!("@{base},{o},{l}")
                        }
                        _ => base.to_string(),
                    }
                }
            };
            match opt_str(o, "field", p)? {
                Some(f) => Ok(format!("tcp option {head} {f}")),
                None => Ok(format!("tcp option {head}")),
            }
        }
        "ip option" | "sctp chunk" => {
            let o = obj(x, p)?;
            let name = str_of(o, "name", p)?;
            match opt_str(o, "field", p)? {
                Some(f) => Ok(format!("{k} {name} {f}")),
                None => Ok(format!("{k} {name}")),
            }
        }
        "dccp option" => {
            let o = obj(x, p)?;
            Ok(format!("dccp option {}", int_of(o, "type", p)?))
        }
        "meta" => Ok(format!("meta {}", str_of(obj(x, p)?, "key", p)?)),
        "rt" => {
            let o = obj(x, p)?;
            let key = str_of(o, "key", p)?;
            match opt_str(o, "family", p)? {
                Some(f) => Ok(format!("rt {f} {key}")),
                None => Ok(format!("rt {key}")),
            }
        }
        "ct" => {
            let o = obj(x, p)?;
            let mut w = vec!["ct".to_string()];
            if let Some(d) = opt_str(o, "dir", p)? {
                w.push(d.into());
            }
            if let Some(f) = opt_str(o, "family", p)? {
                w.push(f.into());
            }
            w.push(str_of(o, "key", p)?.into());
            Ok(w.join(" "))
        }
        "numgen" => {
            let o = obj(x, p)?;
            let mut s = format!(
                "numgen {} mod {}",
                str_of(o, "mode", p)?,
                int_of(o, "mod", p)?
            );
            if let Some(off) = opt_int(o, "offset", p)?.filter(|&o| o != 0) {
                s.push_str(&format!(" offset {off}"));
            }
            Ok(s)
        }
        "jhash" | "symhash" => {
            let o = obj(x, p)?;
            let mut s = k.to_string();
            if k == "jhash" {
                let e = o
                    .get("expr")
                    .map_or_else(|| err(p, "'expr' is missing"), Ok)?;
                s.push(' ');
                s.push_str(&expr(e, &format!("{p}.expr"))?);
            }
            s.push_str(&format!(" mod {}", int_of(o, "mod", p)?));
            if let Some(seed) = opt_int(o, "seed", p)? {
                s.push_str(&format!(" seed {seed:#x}"));
            }
            if let Some(off) = opt_int(o, "offset", p)?.filter(|&o| o != 0) {
                s.push_str(&format!(" offset {off}"));
            }
            Ok(s)
        }
        "fib" => {
            let o = obj(x, p)?;
            let flags = flags_of(o, "flags", p)?;
            Ok(format!(
                "fib {} {}",
                flags.join(" . "),
                str_of(o, "result", p)?
            ))
        }
        "osf" => {
            let o = obj(x, p)?;
            let key = str_of(o, "key", p)?;
            match opt_str(o, "ttl", p)? {
                Some(t) => Ok(format!("osf ttl {t} {key}")),
                None => Ok(format!("osf {key}")),
            }
        }
        // tunnel metadata a device attached: `{"tunnel": {"key": "path"}}`
        "tunnel" => {
            let o = obj(x, p)?;
            Ok(format!("tunnel {}", str_of(o, "key", p)?))
        }
        "socket" => {
            let o = obj(x, p)?;
            let key = str_of(o, "key", p)?;
            match opt_int(o, "level", p)? {
                Some(l) => Ok(format!("socket {key} level {l}")),
                None => Ok(format!("socket {key}")),
            }
        }
        "ipsec" => {
            let o = obj(x, p)?;
            let mut w = vec!["ipsec".to_string(), str_of(o, "dir", p)?.to_string()];
            if let Some(n) = opt_int(o, "spnum", p)? {
                if n != 0 {
                    w.push(format!("spnum {n}"));
                }
            }
            if let Some(f) = opt_str(o, "family", p)? {
                w.push(f.into());
            }
            w.push(str_of(o, "key", p)?.into());
            Ok(w.join(" "))
        }
        "concat" => {
            let a = x
                .as_array()
                .map_or_else(|| err(p, "a concatenation is an array"), Ok)?;
            let parts: R<Vec<String>> = a
                .iter()
                .enumerate()
                .map(|(i, e)| expr(e, &format!("{p}[{i}]")))
                .collect();
            Ok(parts?.join(" . "))
        }
        "set" => set(x, p),
        "map" => {
            let o = obj(x, p)?;
            let key = o.get("key").map_or_else(|| err(p, "'key' is missing"), Ok)?;
            let data = o
                .get("data")
                .map_or_else(|| err(p, "'data' is missing"), Ok)?;
            Ok(format!(
                "{} map {}",
                expr(key, &format!("{p}.key"))?,
                set_ref(data, &format!("{p}.data"))?
            ))
        }
        "prefix" => {
            let o = obj(x, p)?;
            let a = o
                .get("addr")
                .map_or_else(|| err(p, "'addr' is missing"), Ok)?;
            Ok(format!(
                "{}/{}",
                expr(a, &format!("{p}.addr"))?,
                int_of(o, "len", p)?
            ))
        }
        "range" => {
            let a = x.as_array().filter(|a| a.len() == 2).map_or_else(
                || err(p, "a range is an array of two values"),
                Ok,
            )?;
            Ok(format!(
                "{}-{}",
                expr(&a[0], &format!("{p}[0]"))?,
                expr(&a[1], &format!("{p}[1]"))?
            ))
        }
        "elem" => elem(obj(x, p)?, p),
        "&" | "|" | "^" | "<<" | ">>" => binop(k, x, p),
        "accept" | "drop" | "continue" | "return" | "jump" | "goto" => verdict(k, x, p),
        "xt" => err(
            p,
            "xt (an iptables extension nft could not translate) has no nft syntax: it cannot be read",
        ),
        _ => err(p, format!("unknown expression '{k}'")),
    }
}

/// An integer of a JSON value, when it is one.
fn int_value(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => match s.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(h, 16).ok(),
            None => s.parse().ok(),
        },
        _ => None,
    }
}

/// A binary operation: `{"|": [a, b, ...]}`, folded when every operand is a number (as nft
/// folds constants); an operation on the right of another is put in parentheses.
fn binop(k: &str, x: &Value, p: &str) -> R<String> {
    let a = x.as_array().filter(|a| a.len() >= 2).map_or_else(
        || err(p, format!("'{k}' takes an array of two or more operands")),
        Ok,
    )?;
    if let Some(ns) = a.iter().map(int_value).collect::<Option<Vec<u64>>>() {
        let r = ns[1..].iter().fold(ns[0], |acc, &n| match k {
            "&" => acc & n,
            "|" => acc | n,
            "^" => acc ^ n,
            "<<" => acc.checked_shl(n as u32).unwrap_or(0),
            _ => acc.checked_shr(n as u32).unwrap_or(0),
        });
        return Ok(format!("{r:#x}"));
    }
    // an operand that is an operation binding less tightly goes in parentheses (nft's
    // grammar: shifts, then `&`, `^`, `|`)
    let prec = |op: &str| match op {
        "<<" | ">>" => 4,
        "&" => 3,
        "^" => 2,
        _ => 1,
    };
    let inner_op = |o: &Value| match o {
        Value::Object(m) => m
            .keys()
            .find(|k| matches!(k.as_str(), "&" | "|" | "^" | "<<" | ">>"))
            .map(|k| prec(k)),
        _ => None,
    };
    let first = expr(&a[0], &format!("{p}[0]"))?;
    let mut s = match inner_op(&a[0]) {
        Some(q) if q < prec(k) => format!("({first})"),
        _ => first,
    };
    for (i, o) in a.iter().enumerate().skip(1) {
        let q = format!("{p}[{i}]");
        let t = match o {
            Value::Object(_) if inner_op(o).is_some_and(|q| q <= prec(k)) => {
                format!("({})", expr(o, &q)?)
            }
            // masks and bits in hexadecimal, as nft lists them
            Value::Number(n) if k != "<<" && k != ">>" => match n.as_u64() {
                Some(u) => format!("{u:#x}"),
                None => n.to_string(),
            },
            _ => expr(o, &q)?,
        };
        s.push_str(&format!(" {k} {t}"));
    }
    Ok(s)
}

/// A verdict (`accept`, `jump NAME`).
pub(super) fn verdict(k: &str, x: &Value, p: &str) -> R<String> {
    match k {
        "jump" | "goto" => {
            let o = obj(x, p)?;
            Ok(format!(
                "{k} {}",
                super::input::name_text(str_of(o, "target", p)?)
            ))
        }
        _ => Ok(k.to_string()),
    }
}

fn payload(o: &Map<String, Value>, p: &str) -> R<String> {
    if let Some(b) = opt_str(o, "base", p)? {
        return Ok(format!(
            "@{b},{},{}",
            int_of(o, "offset", p)?,
            int_of(o, "len", p)?
        ));
    }
    let proto = str_of(o, "protocol", p)?;
    let field = str_of(o, "field", p)?;
    match opt_str(o, "tunnel", p)? {
        Some(t) if t != proto => Ok(format!("{t} {proto} {field}")),
        _ => Ok(format!("{proto} {field}")),
    }
}

/// `{"elem": {"val": V, "timeout": T, "expires": E, "comment": C}}`: V with its options.
fn elem(o: &Map<String, Value>, p: &str) -> R<String> {
    let v = o
        .get("val")
        .map_or_else(|| err(p, "'val' is missing"), Ok)?;
    let mut s = expr(v, &format!("{p}.val"))?;
    if let Some(t) = opt_int(o, "timeout", p)? {
        s.push_str(&format!(" timeout {t}s"));
    }
    if let Some(t) = opt_int(o, "expires", p)? {
        s.push_str(&format!(" expires {t}s"));
    }
    if let Some(c) = opt_str(o, "comment", p)? {
        s.push_str(&format!(" comment {}", quoted(c)));
    }
    if let Some(c) = o.get("counter") {
        let q = format!("{p}.counter");
        s.push(' ');
        s.push_str(&super::stmts::statement_kv("counter", c, &q)?);
    }
    Ok(s)
}

/// An element of a set literal: a value, or `[key, data]` for a map.
fn set_elem(v: &Value, p: &str) -> R<String> {
    match v {
        Value::Array(a) if a.len() == 2 => Ok(format!(
            "{} : {}",
            expr(&a[0], &format!("{p}[0]"))?,
            expr(&a[1], &format!("{p}[1]"))?
        )),
        _ => expr(v, p),
    }
}

/// The elements of a set literal, comma separated.
pub(super) fn elements(v: &Value, p: &str) -> R<String> {
    match v {
        Value::Array(a) => {
            let parts: R<Vec<String>> = a
                .iter()
                .enumerate()
                .map(|(i, e)| set_elem(e, &format!("{p}[{i}]")))
                .collect();
            Ok(parts?.join(", "))
        }
        // a set of one element may be written without its array
        _ => set_elem(v, p),
    }
}

/// An anonymous set `{ a, b }` (`{"set": [...]}`).
fn set(x: &Value, p: &str) -> R<String> {
    Ok(format!("{{ {} }}", elements(x, p)?))
}

/// What a map lookup or `vmap` reads: a named set (`"@name"`) or an anonymous one.
pub(super) fn set_ref(v: &Value, p: &str) -> R<String> {
    match v {
        Value::String(s) if s.starts_with('@') => Ok(s.clone()),
        Value::String(s) => Ok(format!("@{s}")),
        Value::Object(o) if o.contains_key("set") => expr(v, p),
        _ => err(
            p,
            format!(
                "expected a set (\"@name\" or {{\"set\": [...]}}), found {}",
                kind(v)
            ),
        ),
    }
}
