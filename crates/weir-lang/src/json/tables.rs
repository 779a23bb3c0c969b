//! JSON out: the structure of a ruleset (tables, named objects, sets and maps, flowtables,
//! chains) as `nft -j list ruleset` lists it. The text printer's listing is parsed again, so
//! set elements and object bodies are in canonical form; hooks and priorities come from the
//! checked [`ir`].

use super::out_expr::{elem, int, val, word};
use crate::ast::{self, Val};
use crate::ir::{self, ChainType, Policy};
use crate::print::Options;
use crate::source::SourceMap;
use serde_json::{json, Map, Value};

/// The whole ruleset: its canonical listing parsed again, with the IR beside it.
pub(super) fn document(rs: &ir::Ruleset, file: &ast::File, opts: &Options) -> Vec<Value> {
    let text = crate::print::ruleset(file, rs, opts);
    let mut sm = SourceMap::new();
    let (listed, _) = crate::parser::parse_str(&mut sm, "listing", &text);
    let mut out = Vec::new();
    let mut handle = 0u64;
    let mut next = || {
        handle += 1;
        handle
    };
    for (t, c) in rs.tables.iter().zip(&listed.commands) {
        let ast::Command::Table { items, .. } = c else {
            continue;
        };
        let fam = t.family.name();
        let mut tm = Map::new();
        tm.insert("family".into(), json!(fam));
        tm.insert("name".into(), json!(t.name));
        tm.insert("handle".into(), json!(next()));
        for it in items {
            match it {
                ast::TableItem::Flags(fl, _) => {
                    let fl: Vec<&str> = fl.iter().map(|f| f.name.as_str()).collect();
                    tm.insert("flags".into(), json!(fl));
                }
                ast::TableItem::Comment(c, _) => {
                    tm.insert("comment".into(), json!(c));
                }
                _ => {}
            }
        }
        out.push(json!({ "table": tm }));
        for it in items {
            if let ast::TableItem::Obj(o) = it {
                let (k, body) = object(o);
                let mut m = Map::new();
                m.insert("family".into(), json!(fam));
                m.insert("name".into(), json!(o.name.name));
                m.insert("table".into(), json!(t.name));
                m.insert("handle".into(), json!(next()));
                m.extend(body);
                out.push(json!({ k: m }));
            }
        }
        for it in items {
            if let ast::TableItem::Set(s) = it {
                let irs = t.sets.iter().find(|x| x.name == s.name.name);
                let mut m = Map::new();
                m.insert("family".into(), json!(fam));
                m.insert("name".into(), json!(s.name.name));
                m.insert("table".into(), json!(t.name));
                m.insert("type".into(), set_type(&s.key_types, &s.key_typeof));
                m.insert("handle".into(), json!(next()));
                if s.is_map {
                    m.insert("map".into(), set_type(&s.data_types, &s.data_typeof));
                }
                if let Some(p) = &s.policy {
                    m.insert("policy".into(), json!(p.name));
                }
                let flags: Vec<&str> = s.flags.iter().map(|f| f.name.as_str()).collect();
                if !flags.is_empty() {
                    m.insert("flags".into(), json!(flags));
                }
                if let Some(ms) = irs.and_then(|x| x.timeout_ms) {
                    m.insert("timeout".into(), json!(ms / 1000));
                }
                if let Some(n) = irs.and_then(|x| x.size) {
                    m.insert("size".into(), json!(n));
                }
                if let Some(c) = &s.comment {
                    m.insert("comment".into(), json!(c));
                }
                if s.auto_merge {
                    m.insert("auto-merge".into(), json!(true));
                }
                if !s.elements.is_empty() {
                    m.insert(
                        "elem".into(),
                        Value::Array(s.elements.iter().map(elem).collect()),
                    );
                }
                out.push(json!({ if s.is_map { "map" } else { "set" }: m }));
            }
        }
        for f in &t.flowtables {
            out.push(json!({"flowtable": {
                "family": fam, "name": f.name, "table": t.name, "handle": next(),
                "hook": f.hook.name(), "prio": f.priority, "dev": f.devices,
            }}));
        }
        let decls: Vec<&ast::ChainDecl> = items
            .iter()
            .filter_map(|i| match i {
                ast::TableItem::Chain(c) => Some(c),
                _ => None,
            })
            .collect();
        for ch in &t.chains {
            let mut m = Map::new();
            m.insert("family".into(), json!(fam));
            m.insert("table".into(), json!(t.name));
            m.insert("name".into(), json!(ch.name));
            m.insert("handle".into(), json!(next()));
            if let Some(b) = &ch.base {
                let ty = match b.ty {
                    ChainType::Filter => "filter",
                    ChainType::Nat => "nat",
                    ChainType::Route => "route",
                };
                m.insert("type".into(), json!(ty));
                m.insert("hook".into(), json!(b.hook.name()));
                m.insert("prio".into(), json!(b.priority));
                match b.devices.as_slice() {
                    [] => {}
                    [d] => {
                        m.insert("dev".into(), json!(d));
                    }
                    ds => {
                        m.insert("dev".into(), json!(ds));
                    }
                }
                let pol = match b.policy {
                    Policy::Accept => "accept",
                    Policy::Drop => "drop",
                };
                m.insert("policy".into(), json!(pol));
            }
            let decl = decls.iter().find(|d| d.name.name == ch.name);
            if let Some(c) = decl.and_then(|d| d.comment.as_ref()) {
                m.insert("comment".into(), json!(c));
            }
            out.push(json!({ "chain": m }));
            let Some(decl) = decl else {
                continue;
            };
            for r in &decl.rules {
                let (exprs, comment) = super::output::items(&r.items, &sm, opts, t.family);
                let mut m = Map::new();
                m.insert("family".into(), json!(fam));
                m.insert("table".into(), json!(t.name));
                m.insert("chain".into(), json!(ch.name));
                m.insert("handle".into(), json!(next()));
                if let Some(c) = comment {
                    m.insert("comment".into(), json!(c));
                }
                m.insert("expr".into(), Value::Array(exprs));
                out.push(json!({ "rule": m }));
            }
        }
    }
    out
}

/// A set's key or data type: a name, an array of names, or `{"typeof": EXPR}`.
fn set_type(types: &[ast::Ident], typeof_: &[ast::Expr]) -> Value {
    if !typeof_.is_empty() {
        let e: Vec<Value> = typeof_.iter().map(super::out_expr::expr).collect();
        let e = if e.len() == 1 {
            e.into_iter().next().unwrap_or(Value::Null)
        } else {
            json!({ "concat": e })
        };
        return json!({ "typeof": e });
    }
    let names: Vec<&str> = types
        .iter()
        .map(|i| i.name.as_str())
        .filter(|n| *n != ".")
        .collect();
    match names.as_slice() {
        [one] => json!(one),
        _ => json!(names),
    }
}

fn words(body: &[Val]) -> Vec<String> {
    body.iter()
        .map(|v| match v {
            Val::Word(w, _) | Val::Str(w, _) => w.clone(),
            _ => String::new(),
        })
        .collect()
}

/// A named object's kind (as nft's JSON names it) and fields.
fn object(o: &ast::ObjDecl) -> (String, Map<String, Value>) {
    let w = words(&o.body);
    let kind = o.kind.name.clone();
    let mut m = Map::new();
    let at = |k: &str| w.iter().position(|x| x == k).and_then(|i| w.get(i + 1));
    let num = |s: Option<&String>| s.and_then(|s| int(s)).map_or(json!(0), |n| json!(n));
    match kind.as_str() {
        "counter" => {
            m.insert("packets".into(), num(at("packets")));
            m.insert("bytes".into(), num(at("bytes")));
        }
        "quota" => {
            let over = w.first().is_some_and(|x| x == "over");
            let rest = if over { &w[1..] } else { &w[..] };
            m.insert("bytes".into(), json!(bytes(rest.first(), rest.get(1))));
            if let Some(i) = rest.iter().position(|x| x == "used") {
                m.insert(
                    "used".into(),
                    json!(bytes(rest.get(i + 1), rest.get(i + 2))),
                );
            }
            if over {
                m.insert("inv".into(), json!(true));
            }
        }
        "limit" => {
            let over = w.iter().any(|x| x == "over");
            let rest: Vec<&String> = w.iter().filter(|x| *x != "rate" && *x != "over").collect();
            let joined = rest
                .iter()
                .take_while(|x| **x != "burst")
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(" ");
            let (amount, per) = joined.split_once('/').unwrap_or((&joined, "second"));
            let mut a = amount.split_whitespace();
            m.insert("rate".into(), a.next().map_or(json!(0), word));
            m.insert("per".into(), json!(per.trim()));
            if let Some(u) = a.next() {
                m.insert("rate_unit".into(), json!(u));
            }
            if let Some(b) = at("burst") {
                m.insert("burst".into(), word(b));
            }
            if over {
                m.insert("inv".into(), json!(true));
            }
        }
        "synproxy" => {
            if let Some(v) = at("mss") {
                m.insert("mss".into(), word(v));
            }
            if let Some(v) = at("wscale") {
                m.insert("wscale".into(), word(v));
            }
            let flags: Vec<&String> = w
                .iter()
                .filter(|x| *x == "timestamp" || *x == "sack-perm")
                .collect();
            if !flags.is_empty() {
                m.insert("flags".into(), json!(flags));
            }
        }
        k if k == "ct" || k.starts_with("ct ") => {
            // `ct helper|timeout|expectation NAME { ... }`: the body's keywords and values
            for (k, v) in w.iter().zip(w.iter().skip(1)) {
                if matches!(
                    k.as_str(),
                    "type" | "protocol" | "l3proto" | "dport" | "size"
                ) {
                    m.insert(k.clone(), word(v));
                }
            }
        }
        _ => {
            for v in &o.body {
                m.insert("value".into(), val(v));
            }
        }
    }
    (kind, m)
}

/// `N unit` in bytes.
fn bytes(n: Option<&String>, unit: Option<&String>) -> u64 {
    let n = n.and_then(|s| int(s)).unwrap_or(0);
    let mul = match unit.map(String::as_str) {
        Some("kbytes") => 1 << 10,
        Some("mbytes") => 1 << 20,
        Some("gbytes") => 1 << 30,
        _ => 1,
    };
    n * mul
}
