//! nft's JSON syntax out: a loaded ruleset as `nft -j list ruleset` writes it.
//!
//! Each rule is printed by the text printer ([`crate::print::rule`], nft's canonical form
//! with constants typed by their selector), parsed again, and its syntax tree written as
//! JSON: numbers as numbers (`0x0000002a` is 42), symbols (`cs7`, `established`) and
//! addresses as strings, sets, ranges, prefixes and concatenations as nft's objects. Tables,
//! chains, sets, maps, flowtables and named objects come from the checked [`ir`]. What
//! [`super::input`] reads back from this JSON prints as the text printer printed it.

use super::out_expr::{duration_ms, expr, int, seconds, set_ref, val, verdict, word};
use crate::ast::{self, CmpOp, Expr, Item, Operand, Rhs, Val};
use crate::ir::{self, Family};
use crate::print::{self, Options};
use crate::source::SourceMap;
use serde_json::{json, Map, Value};

/// The version nft writes in `metainfo`.
const JSON_SCHEMA_VERSION: u64 = 1;

/// A rule's statements (its `expr` array) as nft lists them: protocols by number, counters
/// without values when `opts.stateless`.
pub fn rule(r: &ast::Rule, family: Family, sources: &SourceMap, opts: &Options) -> Value {
    Value::Array(rule_parts(r, family, sources, opts).0)
}

/// The statements of a rule and its comment.
fn rule_parts(
    r: &ast::Rule,
    family: Family,
    sources: &SourceMap,
    opts: &Options,
) -> (Vec<Value>, Option<String>) {
    let text = print::rule(r, family, sources, opts);
    let mut sm = SourceMap::new();
    let wrapped = format!(
        "table {} t {{\n\tchain c {{\n\t\t{text}\n\t}}\n}}\n",
        family.name()
    );
    let (file, diags) = crate::parser::parse_str(&mut sm, "rule", &wrapped);
    let parsed = file.commands.first().and_then(|c| match c {
        ast::Command::Table { items, .. } => items.iter().find_map(|i| match i {
            ast::TableItem::Chain(ch) => ch.rules.first().cloned(),
            _ => None,
        }),
        _ => None,
    });
    match parsed {
        Some(p) if diags.is_empty() => items(&p.items, &sm, opts, family),
        // the printer's text does not parse (it should): the rule as written
        _ => items(&r.items, sources, opts, family),
    }
}

pub(super) fn items(
    its: &[Item],
    src: &SourceMap,
    opts: &Options,
    family: Family,
) -> (Vec<Value>, Option<String>) {
    let mut out = Vec::new();
    let mut comment = None;
    let cx = Cx { src, opts, family };
    for it in its {
        match it {
            Item::Comment(c, _) => comment = Some(c.clone()),
            _ => out.push(item(it, &cx)),
        }
    }
    (out, comment)
}

fn words(e: &Expr) -> Vec<&str> {
    match e {
        Expr::Selector(ws, _) => ws.iter().map(|i| i.name.as_str()).collect(),
        _ => vec![],
    }
}

/// A bitmask selector: `ct state established` tests bits (`in`), not equality.
fn bitmask(e: &Expr) -> bool {
    matches!(
        words(e).as_slice(),
        ["ct", "state" | "status" | "event" | "label"] | ["tcp", "flags"]
    )
}

/// What writing an item needs besides the item.
struct Cx<'a> {
    src: &'a SourceMap,
    opts: &'a Options,
    family: Family,
}

/// Flags as nft's JSON lists them: an array.
fn flag_list(fs: &[&str]) -> Value {
    json!(fs)
}

/// `1.2.3.4:80`, `[::1]:80` or `::1`: an address and a port, as the lexer keeps them in one
/// word.
fn addr_port(e: &Expr) -> (Value, Option<Value>) {
    if let Expr::Const(Val::Word(w, _)) = e {
        if let Some(rest) = w.strip_prefix('[') {
            if let Some((a, p)) = rest.split_once("]:") {
                return (word(a), Some(word(p)));
            }
            return (word(rest.trim_end_matches(']')), None);
        }
        if w.parse::<std::net::Ipv6Addr>().is_err() && w.matches(':').count() == 1 {
            if let Some((a, p)) = w.split_once(':') {
                return (word(a), Some(word(p)));
            }
        }
    }
    (expr(e), None)
}

fn item(it: &Item, cx: &Cx<'_>) -> Value {
    let (src, opts) = (cx.src, cx.opts);
    match it {
        Item::Match { lhs, op, rhs, .. } => {
            if words(lhs) == ["ct", "count"] {
                let v = match rhs {
                    Rhs::Val(v) => val(v),
                    Rhs::Set(s) => set_ref(s),
                };
                let mut o = Map::new();
                o.insert("val".into(), v);
                if matches!(op, Some((CmpOp::Gt, _))) {
                    o.insert("inv".into(), json!(true));
                }
                return json!({ "ct count": o });
            }
            let right = match rhs {
                Rhs::Val(Val::List(vs, _)) if matches!(lhs, Expr::Binop(..)) && vs.len() > 1 => {
                    json!({ "|": vs.iter().map(val).collect::<Vec<_>>() })
                }
                Rhs::Val(v) => val(v),
                Rhs::Set(s) => set_ref(s),
            };
            let mut left = expr(lhs);
            if right.is_boolean() {
                // `fib daddr check missing` is listed as the oif lookup
                if let Some(Value::Object(f)) = left.get_mut("fib") {
                    f.insert("result".into(), json!("oif"));
                }
            }
            let op = match op {
                None => {
                    let list = matches!(rhs, Rhs::Val(Val::List(..)));
                    let hour_range =
                        words(lhs) == ["meta", "hour"] && matches!(rhs, Rhs::Val(Val::Range(..)));
                    if matches!(lhs, Expr::Binop(..)) {
                        "=="
                    } else if list || hour_range || (bitmask(lhs) && !matches!(rhs, Rhs::Set(_))) {
                        "in"
                    } else {
                        "=="
                    }
                }
                Some((CmpOp::Ne, sp)) if src.text(*sp).trim() == "!" => "!",
                Some((o, _)) => match o {
                    CmpOp::Eq => "==",
                    CmpOp::Ne => "!=",
                    CmpOp::Lt => "<",
                    CmpOp::Gt => ">",
                    CmpOp::Le => "<=",
                    CmpOp::Ge => ">=",
                },
            };
            json!({"match": {"op": op, "left": left, "right": right}})
        }
        Item::Vmap { key, map, .. } => json!({"vmap": {"key": expr(key), "data": set_ref(map)}}),
        Item::Verdict(v) => verdict(v),
        Item::Counter {
            name,
            packets,
            bytes,
            ..
        } => match name {
            Some(n) => json!({ "counter": val(n) }),
            None if opts.stateless => json!({ "counter": null }),
            None => json!({"counter": {
                "packets": packets.as_ref().map_or(json!(0), val),
                "bytes": bytes.as_ref().map_or(json!(0), val),
            }}),
        },
        Item::Log { options, .. } => {
            if options.is_empty() {
                return json!({ "log": null });
            }
            let mut o = Map::new();
            let mut flags = Vec::new();
            for (k, v) in options {
                match (k.name.as_str(), v) {
                    ("flags", Some(Val::Word(f, _))) => match f.strip_prefix("tcp ") {
                        Some(t) => flags.extend(
                            t.split([',', ' '])
                                .filter(|x| !x.is_empty())
                                .map(|x| json!(format!("tcp {x}"))),
                        ),
                        None => flags.push(json!(f)),
                    },
                    (k, Some(v)) => {
                        o.insert(k.to_string(), val(v));
                    }
                    (k, None) => {
                        o.insert(k.to_string(), Value::Null);
                    }
                }
            }
            if !flags.is_empty() {
                o.insert("flags".into(), Value::Array(flags));
            }
            json!({ "log": o })
        }
        Item::Limit {
            over, rate, burst, ..
        } => limit(*over, rate, burst.as_deref()),
        Item::Quota {
            over,
            amount,
            used,
            name,
            ..
        } => {
            if let Some(n) = name {
                return json!({ "quota": val(n) });
            }
            let mut o = Map::new();
            let (n, u) = amount_unit(amount);
            o.insert("val".into(), n);
            o.insert("val_unit".into(), json!(u));
            if let Some(us) = used {
                let (n, u) = amount_unit(us);
                o.insert("used".into(), n);
                o.insert("used_unit".into(), json!(u));
            }
            if *over {
                o.insert("inv".into(), json!(true));
            }
            json!({ "quota": o })
        }
        Item::Reject { with, .. } => match with {
            // the family's default: port unreachable
            None => {
                let ty = match cx.family {
                    Family::Ip => "icmp",
                    Family::Ip6 => "icmpv6",
                    Family::Inet | Family::Netdev => "icmpx",
                    _ => return json!({ "reject": null }),
                };
                json!({"reject": {"type": ty, "expr": "port-unreachable"}})
            }
            Some((k, _)) if k.name == "tcp" => json!({"reject": {"type": "tcp reset"}}),
            Some((k, Some(code))) => json!({"reject": {"type": k.name, "expr": val(code)}}),
            Some((k, None)) => json!({"reject": {"type": k.name}}),
        },
        Item::Assign { target, value, .. } => {
            let ws = words(target);
            let v = expr(value);
            match ws.as_slice() {
                ["ct", k @ ("helper" | "timeout" | "expectation")] => {
                    json!({ format!("ct {k}"): v })
                }
                ["meta", "secmark"] | ["secmark"] => json!({ "secmark": v }),
                _ => json!({"mangle": {"key": expr(target), "value": v}}),
            }
        }
        Item::Nat {
            kind,
            family,
            addr,
            port,
            flags,
            ..
        } => {
            let mut o = Map::new();
            if let Some(f) = family {
                o.insert("family".into(), json!(f.name));
            }
            if let Some(a) = addr {
                let (a, p) = addr_port(a);
                o.insert("addr".into(), a);
                if let Some(p) = p {
                    o.insert("port".into(), p);
                }
            }
            if let Some(p) = port {
                o.insert("port".into(), expr(p));
            }
            let mut fs: Vec<&str> = flags.iter().map(|f| f.name.as_str()).collect();
            if fs.contains(&"prefix") {
                // `snat ip prefix to ...` maps prefixes: nft's netmap
                fs.retain(|f| *f != "prefix");
                fs.push("netmap");
                o.insert("type_flags".into(), json!(["prefix"]));
            }
            if !fs.is_empty() {
                o.insert("flags".into(), flag_list(&fs));
            }
            if o.is_empty() {
                json!({ kind.name.clone(): null })
            } else {
                json!({ kind.name.clone(): o })
            }
        }
        Item::Notrack(_) => json!({ "notrack": null }),
        Item::Fwd {
            family, addr, dev, ..
        } => {
            let mut o = Map::new();
            o.insert("dev".into(), expr(dev));
            if let Some(a) = addr {
                o.insert("addr".into(), expr(a));
                o.insert(
                    "family".into(),
                    json!(family.as_ref().map_or("ip", |f| f.name.as_str())),
                );
            }
            json!({ "fwd": o })
        }
        Item::FlowAdd(ft, _) => {
            json!({"flow": {"op": "add", "flowtable": format!("@{}", ft.name)}})
        }
        Item::SetOp {
            op,
            set,
            key,
            timeout,
            stmts,
            value,
            ..
        } => {
            let mut e = expr(key);
            if let Some(t) = timeout {
                e = json!({"elem": {"val": e, "timeout": seconds(t)}});
            }
            let mut o = Map::new();
            o.insert("op".into(), json!(op.name));
            o.insert("elem".into(), e);
            if !stmts.is_empty() {
                let s: Vec<Value> = stmts.iter().map(|s| item(s, cx)).collect();
                o.insert("stmt".into(), Value::Array(s));
            }
            let at = json!(format!("@{}", set.name));
            match value {
                Some(v) => {
                    o.insert("data".into(), expr(v));
                    o.insert("map".into(), at);
                    json!({ "map": o })
                }
                None => {
                    o.insert("set".into(), at);
                    json!({ "set": o })
                }
            }
        }
        Item::Comment(c, _) => json!({ "comment": c }),
        Item::Pending {
            what,
            family,
            operands,
            span,
        } => {
            // a family is listed only where the table has several
            let fam = family
                .as_ref()
                .map(|f| f.name.as_str())
                .filter(|_| cx.family == Family::Inet);
            pending(what, fam, operands, src.text(*span))
        }
    }
}

/// `limit rate [over] N/unit [burst N packets]` or `N kbytes/second [burst N bytes]`.
fn limit(over: bool, rate: &[Val], burst: Option<&[Val]>) -> Value {
    let words: Vec<String> = rate
        .iter()
        .map(|v| match v {
            Val::Word(w, _) => w.clone(),
            _ => String::new(),
        })
        .collect();
    let joined = words.join(" ");
    let (amount, per) = joined.split_once('/').unwrap_or((&joined, "second"));
    let mut o = Map::new();
    let mut parts = amount.split_whitespace();
    let n = parts.next().map_or(json!(0), word);
    o.insert("rate".into(), n);
    if let Some(u) = parts.next() {
        o.insert("rate_unit".into(), json!(u));
        if burst.is_none() {
            o.insert("burst".into(), json!(0));
            o.insert("burst_unit".into(), json!("bytes"));
        }
    }
    o.insert("per".into(), json!(per.trim()));
    if let Some(b) = burst {
        let bn = b.first().map_or(json!(0), val);
        let unit = b.get(1).map(|u| match u {
            Val::Word(w, _) => w.clone(),
            _ => String::new(),
        });
        if bn != json!(0) {
            o.insert("burst".into(), bn);
        }
        if let Some(u) = unit.filter(|u| u != "packets") {
            o.insert("burst_unit".into(), json!(u));
        }
    }
    if over {
        o.insert("inv".into(), json!(true));
    }
    json!({ "limit": o })
}

/// `N [unit]` as its number and unit (bytes when none is written).
fn amount_unit(vs: &[Val]) -> (Value, String) {
    let n = vs.first().map_or(json!(0), val);
    let u = match vs.get(1) {
        Some(Val::Word(w, _)) => w.clone(),
        _ => "bytes".into(),
    };
    (n, u)
}

/// The statements weir parses to [`Item::Pending`]: from their operands and text.
fn pending(what: &str, family: Option<&str>, operands: &[(Operand, Expr)], text: &str) -> Value {
    let has = |w: &str| text.split([' ', ',']).any(|x| x == w);
    let find = |k: Operand| operands.iter().find(|(o, _)| *o == k).map(|(_, e)| expr(e));
    match what {
        "queue" => {
            let mut o = Map::new();
            let flags: Vec<&str> = ["bypass", "fanout"]
                .into_iter()
                .filter(|f| has(f))
                .collect();
            match flags.len() {
                0 => {}
                _ => {
                    o.insert("flags".into(), json!(flags));
                }
            }
            o.insert("num".into(), find(Operand::Queue).unwrap_or(json!(0)));
            json!({ "queue": o })
        }
        "tproxy" => {
            let mut o = Map::new();
            if let Some(f) = family {
                o.insert("family".into(), json!(f));
            }
            if let Some((_, a)) = operands.iter().find(|(o, _)| *o == Operand::Addr) {
                let (a, p) = addr_port(a);
                o.insert("addr".into(), a);
                if let Some(p) = p {
                    o.insert("port".into(), p);
                }
            }
            if let Some(p) = find(Operand::Port) {
                o.insert("port".into(), p);
            }
            json!({ "tproxy": o })
        }
        "dup" => {
            let mut o = Map::new();
            match (find(Operand::Addr), find(Operand::Device)) {
                (Some(a), d) => {
                    o.insert("addr".into(), a);
                    if let Some(d) = d {
                        o.insert("dev".into(), d);
                    }
                }
                (None, Some(d)) => {
                    o.insert("addr".into(), d);
                }
                (None, None) => {}
            }
            json!({ "dup": o })
        }
        "synproxy" => {
            if let Some(n) = find(Operand::Name) {
                return json!({ "synproxy": n });
            }
            let mut o = Map::new();
            for (op, e) in operands {
                let k = match op {
                    Operand::Int(16) => "mss",
                    Operand::Int(_) => "wscale",
                    _ => continue,
                };
                o.insert(k.into(), expr(e));
            }
            let flags: Vec<&str> = ["timestamp", "sack-perm"]
                .into_iter()
                .filter(|f| has(f))
                .collect();
            if !flags.is_empty() {
                o.insert("flags".into(), flag_list(&flags));
            }
            if o.is_empty() {
                json!({ "synproxy": null })
            } else {
                json!({ "synproxy": o })
            }
        }
        "last" => match operands.first() {
            Some((_, Expr::Const(Val::Word(w, _)))) => match duration_ms(w) {
                Some(ms) => json!({"last": {"used": ms}}),
                None => json!({ "last": null }),
            },
            _ => json!({ "last": null }),
        },
        "reset tcp option" => {
            let o = match operands.first() {
                Some((_, Expr::Const(Val::Word(w, _)))) => match int(w) {
                    Some(k) => json!({"base": k, "len": 0, "offset": 0}),
                    None => json!({ "name": w }),
                },
                _ => json!({}),
            };
            json!({"reset": {"tcp option": o}})
        }
        w => {
            // `limit name X`, `counter name MAP`, `quota name MAP`
            let head = w.split(' ').next().unwrap_or(w);
            json!({ head: find(Operand::Name).unwrap_or(Value::Null) })
        }
    }
}

/// The whole ruleset as `nft -j list ruleset` writes it.
pub fn ruleset(file: &ast::File, rs: &ir::Ruleset, opts: &Options) -> Value {
    let mut list = vec![json!({"metainfo": {
        "version": env!("CARGO_PKG_VERSION"),
        "release_name": "weir",
        "json_schema_version": JSON_SCHEMA_VERSION,
    }})];
    list.extend(super::tables::document(rs, file, opts));
    json!({ "nftables": list })
}
