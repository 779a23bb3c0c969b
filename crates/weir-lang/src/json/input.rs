//! nft's JSON syntax in (libnftables-json, `nft -j`): a whole `{"nftables": [...]}` document
//! or a single rule's `expr` array, translated to nft text that [`crate::load_str_ast`] reads,
//! so every check applies unchanged (as the iptables importer does).
//!
//! A document's commands (`add`, `create`, `insert`, `replace`, `flush`, `delete`, or the
//! bare objects a listing holds) are applied to a model of tables in order; the model is
//! then written out as `table` blocks. What is wrong is reported with the JSON path of the
//! value (`nftables[3].rule.expr[1].match.left`), never a panic.

use super::exprs::{expr, flags_of, int_of, opt_int, opt_str, quoted, str_of, word};
pub use super::stmts::statement;
use serde_json::{Map, Value};
use std::fmt;

/// What is wrong with a JSON ruleset, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    /// The JSON path of the value: `nftables[2].rule.expr[0].match.left`.
    pub path: String,
    pub message: String,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

pub type R<T> = Result<T, Error>;

pub fn err<T>(path: &str, message: impl Into<String>) -> R<T> {
    Err(Error {
        path: path.to_string(),
        message: message.into(),
    })
}

/// A name (table, chain, set) as nft text: bare when it is a plain word, else quoted.
pub fn name_text(n: &str) -> String {
    let plain = n
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '/' | '.'));
    if plain && !KEYWORDS.contains(&n) {
        n.to_string()
    } else {
        quoted(n)
    }
}

/// Words that cannot be a bare name.
const KEYWORDS: &[&str] = &[
    "table",
    "chain",
    "set",
    "map",
    "rule",
    "element",
    "flowtable",
    "counter",
    "quota",
    "limit",
    "ip",
    "ip6",
    "inet",
    "netdev",
    "arp",
    "bridge",
    "type",
    "hook",
    "policy",
    "priority",
];

/// A rule's `expr` array as the text of the rule.
pub fn rule(exprs: &Value, p: &str) -> R<String> {
    let Value::Array(a) = exprs else {
        return err(
            p,
            format!(
                "a rule's expr is an array, found {}",
                super::exprs::kind(exprs)
            ),
        );
    };
    let parts: R<Vec<String>> = a
        .iter()
        .enumerate()
        .map(|(i, s)| statement(s, &format!("{p}[{i}]")))
        .collect();
    Ok(parts?.join(" "))
}

/// JSON text: a `{"nftables": [...]}` document translated to nft text, or a rule's `expr`
/// array (`[{"match": ...}, {"accept": null}]`) translated to the rule's text.
pub fn to_nft(text: &str) -> R<String> {
    let v: Value = serde_json::from_str(text).map_err(|e| Error {
        path: format!("line {} column {}", e.line(), e.column()),
        message: format!("not JSON: {e}"),
    })?;
    match &v {
        Value::Array(_) => rule(&v, ""),
        _ => document(&v),
    }
}

/// A chain of the model.
#[derive(Default)]
struct Chain {
    name: String,
    head: Vec<String>,
    /// Each rule with its handle, when the document gave one.
    rules: Vec<(Option<i64>, String)>,
}

/// A set or map of the model: its declaration lines and elements.
struct Set {
    name: String,
    is_map: bool,
    decl: Vec<String>,
    elements: Vec<String>,
}

/// A table of the model.
#[derive(Default)]
struct Table {
    family: String,
    name: String,
    head: Vec<String>,
    objects: Vec<String>,
    sets: Vec<Set>,
    flowtables: Vec<String>,
    chains: Vec<Chain>,
}

#[derive(Default)]
struct Model {
    tables: Vec<Table>,
}

/// What a command does to the model.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Verb {
    Add,
    Insert,
    Replace,
    Flush,
    Delete,
}

/// A whole `{"nftables": [...]}` document as nft text.
pub fn document(v: &Value) -> R<String> {
    let Some(list) = v.get("nftables") else {
        return err(
            "",
            "expected an object with an \"nftables\" array, or a rule's expr array",
        );
    };
    let Value::Array(cmds) = list else {
        return err("nftables", "expected an array of commands and objects");
    };
    let mut m = Model::default();
    for (i, c) in cmds.iter().enumerate() {
        let p = format!("nftables[{i}]");
        let Value::Object(o) = c else {
            return err(&p, "expected an object");
        };
        for (k, x) in o {
            let q = format!("{p}.{k}");
            let verb = match k.as_str() {
                // a schema newer than nft's (and weir's) 1 is refused, as nft refuses it
                "metainfo" => {
                    if let Some(v) = x.get("json_schema_version").and_then(Value::as_u64) {
                        if v > 1 {
                            return err(&q, format!("json_schema_version {v}: this reads version 1"));
                        }
                    }
                    continue;
                }
                "add" | "create" => Some(Verb::Add),
                "insert" => Some(Verb::Insert),
                "replace" => Some(Verb::Replace),
                "flush" => Some(Verb::Flush),
                "delete" | "destroy" => Some(Verb::Delete),
                "list" | "reset" | "rename" => {
                    return err(&q, format!("'{k}' is a query or change to a running ruleset; a ruleset file cannot hold it"))
                }
                _ => None,
            };
            match verb {
                None => object(&mut m, Verb::Add, k, x, &q)?,
                Some(verb) => {
                    let Value::Object(inner) = x else {
                        return err(&q, "expected an object naming what to change");
                    };
                    for (k2, x2) in inner {
                        object(&mut m, verb, k2, x2, &format!("{q}.{k2}"))?;
                    }
                }
            }
        }
    }
    Ok(m.text())
}

fn table_of<'a>(m: &'a mut Model, o: &Map<String, Value>, key: &str, p: &str) -> R<&'a mut Table> {
    let family = opt_str(o, "family", p)?.unwrap_or("ip").to_string();
    let name = str_of(o, key, p)?.to_string();
    match m
        .tables
        .iter()
        .position(|t| t.family == family && t.name == name)
    {
        Some(i) => Ok(&mut m.tables[i]),
        None => err(p, format!("table {family} {name} is not declared before")),
    }
}

fn chain_of<'a>(t: &'a mut Table, name: &str, p: &str) -> R<&'a mut Chain> {
    let (f, tn) = (t.family.clone(), t.name.clone());
    match t.chains.iter_mut().find(|c| c.name == name) {
        Some(c) => Ok(c),
        None => err(
            p,
            format!("chain {name} of table {f} {tn} is not declared before"),
        ),
    }
}

/// A command's object applied to the model.
fn object(m: &mut Model, verb: Verb, k: &str, x: &Value, p: &str) -> R<()> {
    let empty = Map::new();
    let o = match x {
        Value::Object(o) => o,
        Value::Null if k == "ruleset" => &empty,
        _ => {
            return err(
                p,
                format!("expected an object, found {}", super::exprs::kind(x)),
            )
        }
    };
    match (k, verb) {
        ("ruleset", Verb::Flush | Verb::Delete) => {
            m.tables.clear();
            Ok(())
        }
        ("table", _) => {
            let family = opt_str(o, "family", p)?.unwrap_or("ip").to_string();
            let name = str_of(o, "name", p)?.to_string();
            let pos = m
                .tables
                .iter()
                .position(|t| t.family == family && t.name == name);
            match (verb, pos) {
                (Verb::Delete, Some(i)) => {
                    m.tables.remove(i);
                }
                (Verb::Flush, Some(i)) => {
                    let t = &mut m.tables[i];
                    for c in &mut t.chains {
                        c.rules.clear();
                    }
                    for s in &mut t.sets {
                        s.elements.clear();
                    }
                }
                (Verb::Delete | Verb::Flush, None) => {
                    return err(p, format!("table {family} {name} does not exist"))
                }
                (_, Some(_)) => {}
                (_, None) => {
                    let mut head = Vec::new();
                    let flags = flags_of(o, "flags", p)?;
                    if !flags.is_empty() {
                        head.push(format!("flags {}", flags.join(",")));
                    }
                    if let Some(c) = opt_str(o, "comment", p)? {
                        head.push(format!("comment {}", quoted(c)));
                    }
                    m.tables.push(Table {
                        family,
                        name,
                        head,
                        ..Table::default()
                    })
                }
            }
            Ok(())
        }
        ("chain", _) => {
            let t = table_of(m, o, "table", p)?;
            let name = str_of(o, "name", p)?.to_string();
            let pos = t.chains.iter().position(|c| c.name == name);
            match (verb, pos) {
                (Verb::Delete, Some(i)) => {
                    t.chains.remove(i);
                    return Ok(());
                }
                (Verb::Flush, Some(i)) => {
                    t.chains[i].rules.clear();
                    return Ok(());
                }
                (Verb::Delete | Verb::Flush, None) => {
                    return err(p, format!("chain {name} does not exist"))
                }
                _ => {}
            }
            let head = chain_head(o, p)?;
            match pos {
                Some(i) => {
                    if !head.is_empty() {
                        t.chains[i].head = head;
                    }
                }
                None => t.chains.push(Chain {
                    name,
                    head,
                    rules: vec![],
                }),
            }
            Ok(())
        }
        ("rule", _) => {
            let t = table_of(m, o, "table", p)?;
            let chain = str_of(o, "chain", p)?.to_string();
            let c = chain_of(t, &chain, p)?;
            let handle = opt_int(o, "handle", p)?;
            if verb == Verb::Delete {
                let Some(h) = handle else {
                    return err(p, "deleting a rule needs its handle");
                };
                c.rules.retain(|r| r.0 != Some(h));
                return Ok(());
            }
            let Some(exprs) = o.get("expr") else {
                return err(p, "'expr' is missing");
            };
            let mut text = rule(exprs, &format!("{p}.expr"))?;
            if let Some(cm) = opt_str(o, "comment", p)? {
                text.push_str(&format!(" comment {}", quoted(cm)));
            }
            if text.trim().is_empty() {
                return err(&format!("{p}.expr"), "a rule with no statement");
            }
            let index = opt_int(o, "index", p)?;
            // where the rule goes: after (add) or before (insert) the rule with the handle or
            // at the index; `replace` takes the rule's place
            let at = match (handle, index) {
                (Some(h), _) if verb != Verb::Add || o.contains_key("position") => Some(
                    c.rules
                        .iter()
                        .position(|r| r.0 == Some(h))
                        .map_or_else(|| err(p, format!("no rule with handle {h}")), Ok)?,
                ),
                (_, Some(i)) => {
                    let i = usize::try_from(i).unwrap_or(usize::MAX);
                    if i >= c.rules.len() {
                        return err(p, format!("no rule at index {i}"));
                    }
                    Some(i)
                }
                _ => None,
            };
            let at = match (o.get("position"), at) {
                (Some(_), None) => {
                    let h = int_of(o, "position", p)?;
                    Some(
                        c.rules
                            .iter()
                            .position(|r| r.0 == Some(h))
                            .map_or_else(|| err(p, format!("no rule with handle {h}")), Ok)?,
                    )
                }
                _ => at,
            };
            let own = if verb == Verb::Add && !o.contains_key("position") && index.is_none() {
                handle
            } else {
                None
            };
            match (verb, at) {
                (Verb::Replace, Some(i)) => c.rules[i].1 = text,
                (Verb::Replace, None) => return err(p, "replacing a rule needs its handle"),
                (Verb::Insert, Some(i)) => c.rules.insert(i, (None, text)),
                (Verb::Insert, None) => c.rules.insert(0, (None, text)),
                (_, Some(i)) => c.rules.insert(i + 1, (None, text)),
                (_, None) => c.rules.push((own, text)),
            }
            Ok(())
        }
        ("set" | "map", _) => {
            let t = table_of(m, o, "table", p)?;
            let name = str_of(o, "name", p)?.to_string();
            let pos = t.sets.iter().position(|s| s.name == name);
            match (verb, pos) {
                (Verb::Delete, Some(i)) => {
                    t.sets.remove(i);
                    return Ok(());
                }
                (Verb::Flush, Some(i)) => {
                    t.sets[i].elements.clear();
                    return Ok(());
                }
                (Verb::Delete | Verb::Flush, None) => {
                    return err(p, format!("set {name} does not exist"))
                }
                (_, Some(_)) => return Ok(()),
                _ => {}
            }
            let (decl, elements) = set_decl(k == "map", o, p)?;
            t.sets.push(Set {
                name,
                is_map: k == "map",
                decl,
                elements,
            });
            Ok(())
        }
        ("element", _) => {
            let t = table_of(m, o, "table", p)?;
            let name = str_of(o, "name", p)?.to_string();
            let Some(s) = t.sets.iter_mut().find(|s| s.name == name) else {
                return err(p, format!("set {name} is not declared before"));
            };
            let Some(e) = o.get("elem") else {
                return err(p, "'elem' is missing");
            };
            let list = elem_list(e, &format!("{p}.elem"))?;
            if verb == Verb::Delete {
                s.elements.retain(|x| !list.contains(x));
            } else {
                s.elements.extend(list);
            }
            Ok(())
        }
        ("flowtable", _) => {
            let t = table_of(m, o, "table", p)?;
            let name = str_of(o, "name", p)?;
            let mut body = Vec::new();
            if let Some(h) = opt_str(o, "hook", p)? {
                let prio = match o.get("prio") {
                    Some(v) => expr(v, &format!("{p}.prio"))?,
                    None => "0".into(),
                };
                body.push(format!("hook {h} priority {prio}"));
            }
            let devs = devices(o, p)?;
            if !devs.is_empty() {
                body.push(format!("devices = {{ {} }}", devs.join(", ")));
            }
            if verb != Verb::Delete {
                t.flowtables.push(format!(
                    "flowtable {} {{\n{}\n\t}}",
                    name_text(name),
                    body.iter()
                        .map(|b| format!("\t\t{b}"))
                        .collect::<Vec<_>>()
                        .join("\n")
                ));
            }
            Ok(())
        }
        (
            "counter" | "quota" | "limit" | "ct helper" | "ct timeout" | "ct expectation"
            | "synproxy" | "secmark",
            _,
        ) => {
            let t = table_of(m, o, "table", p)?;
            let name = str_of(o, "name", p)?;
            if verb != Verb::Delete {
                let mut body = super::objects::body(k, o, p)?;
                if let Some(c) = opt_str(o, "comment", p)? {
                    body.push_str(&format!("\n\t\tcomment {}", quoted(c)));
                }
                t.objects
                    .push(format!("{k} {} {{\n\t\t{body}\n\t}}", name_text(name)));
            }
            Ok(())
        }
        _ => err(p, format!("unknown object '{k}'")),
    }
}

/// A device list (`dev`: one name or an array) as quoted names.
fn devices(o: &Map<String, Value>, p: &str) -> R<Vec<String>> {
    Ok(match o.get("dev") {
        None | Some(Value::Null) => vec![],
        Some(Value::String(s)) => vec![quoted(s)],
        Some(Value::Array(_)) => flags_of(o, "dev", p)?.iter().map(|d| quoted(d)).collect(),
        Some(_) => {
            return err(
                &format!("{p}.dev"),
                "expected a device name or an array of them",
            )
        }
    })
}

/// A chain's declaration line(s): `type filter hook input priority 0; policy accept;`.
fn chain_head(o: &Map<String, Value>, p: &str) -> R<Vec<String>> {
    let mut head = Vec::new();
    if let Some(h) = opt_str(o, "hook", p)? {
        let ty = opt_str(o, "type", p)?.unwrap_or("filter");
        let prio = match o.get("prio") {
            Some(v) => expr(v, &format!("{p}.prio"))?,
            None => "0".into(),
        };
        let devs = devices(o, p)?;
        let dev = match devs.as_slice() {
            [] => String::new(),
            [one] => format!(" device {one}"),
            many => format!(" devices = {{ {} }}", many.join(", ")),
        };
        head.push(format!("type {ty} hook {h}{dev} priority {prio};"));
        if let Some(pol) = opt_str(o, "policy", p)? {
            head.push(format!("policy {pol};"));
        }
    }
    if let Some(c) = opt_str(o, "comment", p)? {
        head.push(format!("comment {};", quoted(c)));
    }
    Ok(head)
}

/// A set's type: a name, an array of names (a concatenation), or `{"typeof": EXPR}`.
fn type_text(v: &Value, p: &str) -> R<(bool, String)> {
    match v {
        Value::String(s) => Ok((false, s.clone())),
        Value::Array(a) => {
            let names: R<Vec<String>> = a
                .iter()
                .enumerate()
                .map(|(i, x)| match x {
                    Value::String(s) => Ok(s.clone()),
                    _ => err(&format!("{p}[{i}]"), "expected a type name"),
                })
                .collect();
            Ok((false, names?.join(" . ")))
        }
        Value::Object(o) if o.contains_key("typeof") => {
            let e = &o["typeof"];
            Ok((true, expr(e, &format!("{p}.typeof"))?))
        }
        _ => err(
            p,
            "expected a type name, an array of them, or {\"typeof\": ...}",
        ),
    }
}

/// A set element list: an array of elements (or one element).
fn elem_list(v: &Value, p: &str) -> R<Vec<String>> {
    let text = super::exprs::elements(v, p)?;
    Ok(match v {
        Value::Array(a) => a
            .iter()
            .enumerate()
            .map(|(i, e)| {
                super::exprs::elements(&Value::Array(vec![e.clone()]), &format!("{p}[{i}]"))
            })
            .collect::<R<Vec<String>>>()?,
        _ => vec![text],
    })
}

/// A set's declaration lines and elements.
fn set_decl(is_map: bool, o: &Map<String, Value>, p: &str) -> R<(Vec<String>, Vec<String>)> {
    let mut decl = Vec::new();
    let Some(ty) = o.get("type") else {
        return err(p, "'type' is missing");
    };
    let (is_typeof, key) = type_text(ty, &format!("{p}.type"))?;
    let mut line = format!("{} {key}", if is_typeof { "typeof" } else { "type" });
    if is_map {
        let Some(d) = o.get("map") else {
            return err(p, "a map's data type ('map') is missing");
        };
        let (_, data) = type_text(d, &format!("{p}.map"))?;
        line.push_str(&format!(" : {data}"));
    }
    decl.push(line);
    let flags = flags_of(o, "flags", p)?;
    if !flags.is_empty() {
        decl.push(format!("flags {}", flags.join(",")));
    }
    if let Some(t) = opt_int(o, "timeout", p)? {
        decl.push(format!("timeout {t}s"));
    }
    if let Some(t) = opt_int(o, "gc-interval", p)? {
        decl.push(format!("gc-interval {t}s"));
    }
    if let Some(n) = opt_int(o, "size", p)? {
        decl.push(format!("size {n}"));
    }
    if let Some(pol) = opt_str(o, "policy", p)? {
        decl.push(format!("policy {pol}"));
    }
    if o.contains_key("auto-merge") {
        decl.push("auto-merge".into());
    }
    if let Some(Value::Array(stmts)) = o.get("stmt") {
        for (i, s) in stmts.iter().enumerate() {
            decl.push(statement(s, &format!("{p}.stmt[{i}]"))?);
        }
    }
    if let Some(c) = opt_str(o, "comment", p)? {
        decl.push(format!("comment {}", quoted(c)));
    }
    let elements = match o.get("elem") {
        Some(e) => elem_list(e, &format!("{p}.elem"))?,
        None => vec![],
    };
    Ok((decl, elements))
}

impl Model {
    fn text(&self) -> String {
        let mut out = String::new();
        for t in &self.tables {
            out.push_str(&format!(
                "table {} {} {{\n",
                word(&t.family),
                name_text(&t.name)
            ));
            for h in &t.head {
                out.push_str(&format!("\t{h}\n"));
            }
            for o in &t.objects {
                out.push_str(&format!("\t{o}\n"));
            }
            for s in &t.sets {
                out.push_str(&format!(
                    "\t{} {} {{\n",
                    if s.is_map { "map" } else { "set" },
                    name_text(&s.name)
                ));
                for d in &s.decl {
                    out.push_str(&format!("\t\t{d}\n"));
                }
                if !s.elements.is_empty() {
                    out.push_str(&format!("\t\telements = {{ {} }}\n", s.elements.join(", ")));
                }
                out.push_str("\t}\n");
            }
            for f in &t.flowtables {
                out.push_str(&format!("\t{f}\n"));
            }
            for c in &t.chains {
                out.push_str(&format!("\tchain {} {{\n", name_text(&c.name)));
                for h in &c.head {
                    out.push_str(&format!("\t\t{h}\n"));
                }
                for (_, r) in &c.rules {
                    out.push_str(&format!("\t\t{r}\n"));
                }
                out.push_str("\t}\n");
            }
            out.push_str("}\n");
        }
        out
    }
}
