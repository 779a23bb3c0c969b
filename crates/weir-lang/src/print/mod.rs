//! The printer: a checked ruleset as `nft list ruleset` prints it (tables, their sets, maps,
//! flowtables and chains, and each rule in nft's canonical form: `meta mark 0x0000002a`, `ct
//! state established,related`, `limit rate 10/second burst 5 packets`...). `weir check
//! --print` uses it; so will the listing of a running ruleset.
//!
//! Rules print from the syntax tree, their constants re-typed by the selector they meet
//! ([`value`]); the structure (chains with their hooks and priorities, sets with their typed
//! elements) from the checked [`ir`]. What the printer does not know how to put in canonical
//! form it prints as written, whitespace normalised.

mod anon;
mod bits;
mod deps;
pub mod events;
mod objects;
mod rule;
pub mod select;
pub mod value;

use crate::ast;
use crate::ir::{self, Family, Hook, MapValue, Verdict};
use crate::source::{SourceMap, Span};
use std::collections::HashMap;

pub use rule::rule;

/// What to print.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// Without counter values (`nft -s`): `counter`, not `counter packets 0 bytes 0`.
    pub stateless: bool,
    /// Protocols as numbers (`nft -n`'s `ip protocol 6`, as nft's own rule tests list them),
    /// not names (`tcp`).
    pub numeric_proto: bool,
    /// Each rule with its handle (`nft -a`: `... # handle 4`).
    pub handles: bool,
}

/// A priority as nft prints it: a standard name within 10 of the number (`filter`, `mangle -
/// 10`, `srcnat + 10`), else the number.
pub fn priority(family: Family, hook: Hook, prio: i32) -> String {
    let names: &[(&str, i32)] = match family {
        Family::Netdev => &[("filter", 0)],
        Family::Bridge => &[("filter", -200), ("out", 100), ("srcnat", 300)],
        Family::Arp => &[("filter", 0)],
        _ => &[
            ("raw", -300),
            ("mangle", -150),
            ("dstnat", -100),
            ("filter", 0),
            ("security", 50),
            ("srcnat", 100),
        ],
    };
    for (n, v) in names {
        let ok_hook = match *n {
            "dstnat" => matches!(hook, Hook::Prerouting | Hook::Output),
            "srcnat" => matches!(hook, Hook::Postrouting | Hook::Input),
            _ => true,
        };
        let off = prio - v;
        if ok_hook && off.abs() <= 10 {
            return match off {
                0 => n.to_string(),
                o if o > 0 => format!("{n} + {o}"),
                o => format!("{n} - {}", -o),
            };
        }
    }
    prio.to_string()
}

fn verdict(t: &ir::Table, v: Verdict) -> String {
    let name = |i: usize| t.chains.get(i).map(|c| quote(&c.name)).unwrap_or_default();
    match v {
        Verdict::Accept => "accept".into(),
        Verdict::Drop => "drop".into(),
        Verdict::Continue => "continue".into(),
        Verdict::Return => "return".into(),
        Verdict::Jump(i) => format!("jump {}", name(i)),
        Verdict::Goto(i) => format!("goto {}", name(i)),
    }
}

/// A name as nft prints it: bare when it is a plain word, else quoted.
pub fn quote(name: &str) -> String {
    let plain = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '/' | '.'));
    if plain {
        name.to_string()
    } else {
        format!("\"{name}\"")
    }
}

/// The set declarations and rules of a parsed file, found by their spans.
#[derive(Default)]
struct Decls<'a> {
    rules: HashMap<Span, &'a ast::Rule>,
    sets: HashMap<(String, String), &'a ast::SetDecl>,
    objs: HashMap<String, Vec<&'a ast::ObjDecl>>,
    chains: HashMap<(String, String), &'a ast::ChainDecl>,
    flowtables: HashMap<(String, String), &'a ast::FlowtableDecl>,
    /// Each table's `flags` and `comment`, by family and name.
    tables: HashMap<(String, String), (Vec<String>, Option<String>)>,
}

/// A table's key in [`Decls`]: its family and name (`inet t`).
fn tkey(family: &Option<ast::Ident>, table: &ast::Ident) -> String {
    format!(
        "{} {}",
        family.as_ref().map_or("ip", |f| f.name.as_str()),
        table.name
    )
}

fn decls(file: &ast::File) -> Decls<'_> {
    let mut d = Decls::default();
    // (`create ...` declares as the `add` it holds)
    let commands = file.commands.iter().map(|c| match c {
        ast::Command::Create(inner, _) => &**inner,
        c => c,
    });
    for c in commands {
        match c {
            ast::Command::Table {
                family,
                name,
                items,
                ..
            } => {
                let fam = family.as_ref().map_or("ip", |f| f.name.as_str());
                let tk = format!("{fam} {}", name.name);
                let meta = d
                    .tables
                    .entry((fam.to_string(), name.name.clone()))
                    .or_default();
                for it in items {
                    match it {
                        ast::TableItem::Flags(fl, _) => {
                            for f in fl {
                                if !meta.0.contains(&f.name) {
                                    meta.0.push(f.name.clone());
                                }
                            }
                        }
                        ast::TableItem::Comment(c, _) => meta.1 = Some(c.clone()),
                        _ => {}
                    }
                }
                for it in items {
                    match it {
                        ast::TableItem::Chain(ch) => {
                            d.chains.insert((tk.clone(), ch.name.name.clone()), ch);
                            for r in &ch.rules {
                                d.rules.insert(r.span, r);
                            }
                        }
                        ast::TableItem::Set(s) => {
                            d.sets.insert((tk.clone(), s.name.name.clone()), s);
                        }
                        ast::TableItem::Obj(o) => d.objs.entry(tk.clone()).or_default().push(o),
                        ast::TableItem::Flowtable(f) => {
                            d.flowtables.insert((tk.clone(), f.name.name.clone()), f);
                        }
                        ast::TableItem::Flags(..) | ast::TableItem::Comment(..) => {}
                    }
                }
            }
            ast::Command::AddChain {
                chain,
                table,
                family,
            } => {
                if chain.comment.is_some()
                    || !d
                        .chains
                        .contains_key(&(tkey(family, table), chain.name.name.clone()))
                {
                    d.chains
                        .insert((tkey(family, table), chain.name.name.clone()), chain);
                }
                for r in &chain.rules {
                    d.rules.insert(r.span, r);
                }
            }
            ast::Command::AddRule { rule, .. } => {
                d.rules.insert(rule.span, rule);
            }
            ast::Command::AddSet { table, set, family } => {
                d.sets
                    .insert((tkey(family, table), set.name.name.clone()), set);
            }
            ast::Command::AddItem {
                family,
                table,
                item: ast::TableItem::Flowtable(f),
                ..
            } => {
                d.flowtables
                    .insert((tkey(family, table), f.name.name.clone()), f);
            }
            _ => {}
        }
    }
    d
}

/// The whole ruleset as `nft list ruleset` prints it. `file` is what `rs` was checked from.
pub fn ruleset(file: &ast::File, rs: &ir::Ruleset, opts: &Options) -> String {
    let d = decls(file);
    let mut out = String::new();
    for t in &rs.tables {
        table(&mut out, t, &d, &rs.sources, opts);
    }
    out
}

fn table(out: &mut String, t: &ir::Table, d: &Decls<'_>, src: &SourceMap, opts: &Options) {
    let handle = |h: u64| {
        if opts.handles {
            format!(" # handle {h}")
        } else {
            String::new()
        }
    };
    out.push_str(&format!(
        "table {} {} {{{}\n",
        t.family.name(),
        quote(&t.name),
        handle(t.handle)
    ));
    if !t.flags.is_empty() {
        out.push_str(&format!("\tflags {}\n", t.flags.join(",")));
    }
    if let Some(c) = &t.comment {
        out.push_str(&format!("\tcomment \"{c}\"\n"));
    }
    if !t.flags.is_empty() || t.comment.is_some() {
        out.push('\n');
    }
    let mut blocks: Vec<String> = Vec::new();
    let tk = format!("{} {}", t.family.name(), t.name);
    for (h, o) in &t.objects {
        let cx = rule::Ctx {
            src,
            opts: *opts,
            hex: std::cell::Cell::new(false),
            hex_parts: Default::default(),
        };
        let mut b = format!(
            "\t{} {} {{{}\n",
            o.kind.name,
            quote(&o.name.name),
            handle(*h)
        );
        if let Some(c) = &o.comment {
            b.push_str(&format!("\t\tcomment \"{c}\"\n"));
        }
        for line in objects::body(o, t.family, &cx) {
            b.push_str(&format!("\t\t{line}\n"));
        }
        b.push_str("\t}\n");
        blocks.push(b);
    }
    for s in &t.sets {
        let cx = rule::Ctx {
            src,
            opts: *opts,
            hex: std::cell::Cell::new(false),
            hex_parts: Default::default(),
        };
        blocks.push(set(
            t,
            s,
            d.sets.get(&(tk.clone(), s.name.clone())),
            &cx,
            &handle(s.handle),
        ));
    }
    for f in &t.flowtables {
        let devs: Vec<String> = f.devices.iter().map(|x| format!("\"{x}\"")).collect();
        let mut b = format!(
            "\tflowtable {} {{{}\n\t\thook {} priority {}\n",
            quote(&f.name),
            handle(f.handle),
            f.hook.name(),
            priority(t.family, f.hook, f.priority),
        );
        if !devs.is_empty() {
            b.push_str(&format!("\t\tdevices = {{ {} }}\n", devs.join(", ")));
        }
        if d.flowtables
            .get(&(tk.clone(), f.name.clone()))
            .is_some_and(|x| x.counter)
        {
            b.push_str("\t\tcounter\n");
        }
        b.push_str("\t}\n");
        blocks.push(b);
    }
    for c in &t.chains {
        if anon::is_anonymous(&c.name) {
            continue;
        }
        let mut b = format!("\tchain {} {{{}\n", quote(&c.name), handle(c.handle));
        if let Some(cm) = &c.comment {
            b.push_str(&format!("\t\tcomment \"{cm}\"\n"));
        }
        if let Some(base) = &c.base {
            let ty = match base.ty {
                ir::ChainType::Filter => "filter",
                ir::ChainType::Nat => "nat",
                ir::ChainType::Route => "route",
            };
            let dev = match base.devices.as_slice() {
                [] => String::new(),
                [one] => format!(" device \"{one}\""),
                many => format!(
                    " devices = {{ {} }}",
                    many.iter()
                        .map(|x| format!("\"{x}\""))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            b.push_str(&format!(
                "\t\ttype {ty} hook {}{dev} priority {}; policy {};\n",
                base.hook.name(),
                priority(t.family, base.hook, base.priority),
                match base.policy {
                    ir::Policy::Accept => "accept",
                    ir::Policy::Drop => "drop",
                }
            ));
        }
        for text in anon::chain_rules(t, c, d, src, opts, 2) {
            b.push_str(&format!("\t\t{text}\n"));
        }
        b.push_str("\t}\n");
        blocks.push(b);
    }
    out.push_str(&blocks.join("\n"));
    out.push_str("}\n");
}

fn set(
    t: &ir::Table,
    s: &ir::Set,
    decl: Option<&&ast::SetDecl>,
    src: &rule::Ctx<'_>,
    handle: &str,
) -> String {
    let mut b = format!(
        "\t{} {} {{{handle}\n",
        if s.is_map { "map" } else { "set" },
        quote(&s.name)
    );
    // (a meter's set is listed with its key's types)
    let typeof_ = decl.filter(|d| !d.key_typeof.is_empty() && !d.meter);
    let ty = |ts: &[weir_wire::DataType]| {
        ts.iter()
            .map(|x| x.nft_name())
            .collect::<Vec<_>>()
            .join(" . ")
    };
    match typeof_ {
        Some(d) => {
            let k: Vec<String> = d
                .key_typeof
                .iter()
                .map(|e| rule::expr_text(e, src))
                .collect();
            let mut line = format!("\t\ttypeof {}", k.join(" . "));
            if s.is_map {
                if d.data_interval {
                    line.push_str(" : interval");
                } else {
                    line.push_str(" :");
                }
                if d.data_typeof.is_empty() {
                    line.push_str(&format!(" {}", data_type(s, decl)));
                } else {
                    let v: Vec<String> = d
                        .data_typeof
                        .iter()
                        .map(|e| rule::expr_text(e, src))
                        .collect();
                    line.push_str(&format!(" {}", v.join(" . ")));
                }
            }
            b.push_str(&line);
            b.push('\n');
        }
        None => {
            let mut line = format!("\t\ttype {}", ty(&s.key_types));
            if s.is_map {
                let iv = if decl.is_some_and(|d| d.data_interval) {
                    "interval "
                } else {
                    ""
                };
                line.push_str(&format!(" : {iv}{}", data_type(s, decl)));
            }
            b.push_str(&line);
            b.push('\n');
        }
    }
    let declared = s.listed.as_slice();
    let catchall = |e: &ast::Elem| matches!(&e.key, ast::Val::Word(w, _) if w == "*");
    let as_declared = !declared.is_empty()
        && declared.iter().filter(|e| !catchall(e)).count() == s.elements.len();
    // the kernel gives a set declared dynamic without a size one of 65535 (as do meters)
    // (so does a set, not a map, a rule adds to or updates from the packet path: nft makes
    // it dynamic, evaluate.c's stmt_evaluate_set)
    let updated = !s.is_map
        && t
        .chains
        .iter()
        .flat_map(|c| &c.rules)
        .flat_map(|r| &r.exprs)
        .any(|e| matches!(e, ir::Expr::SetOp(op) if t.sets.get(op.set).is_some_and(|x| x.name == s.name)));
    let declared_dynamic =
        updated || decl.is_some_and(|d| d.meter || d.flags.iter().any(|f| f.name == "dynamic"));
    if let Some(n) = s.size.or(declared_dynamic.then_some(65535)) {
        // nft gives the number of elements the kernel holds
        let count = if as_declared {
            declared.len()
        } else {
            s.elements.len()
        };
        if count > 0 {
            b.push_str(&format!("\t\tsize {n}\t# count {count}\n"));
        } else {
            b.push_str(&format!("\t\tsize {n}\n"));
        }
    }
    if let Some(p) = decl.and_then(|d| d.policy.as_ref()) {
        b.push_str(&format!("\t\tpolicy {}\n", p.name));
    }
    let mut flags = Vec::new();
    if s.constant {
        flags.push("constant");
    }
    if s.interval {
        flags.push("interval");
    }
    if s.dynamic || updated {
        flags.push("dynamic");
    }
    // nft lists the timeout flag when it was given (a set's timeout alone does not list it)
    let timeout_flag = match decl {
        Some(d) => d.flags.iter().any(|f| f.name == "timeout"),
        None => s.timeout_ms.is_some(),
    };
    if timeout_flag {
        flags.push("timeout");
    }
    if !flags.is_empty() {
        b.push_str(&format!("\t\tflags {}\n", flags.join(",")));
    }
    match decl {
        Some(d) if !d.stmts.is_empty() => {
            let st: Vec<String> = d
                .stmts
                .iter()
                .map(|(k, v)| match v {
                    // (nft lists a set's statements stateless: `counter`)
                    Some(_) if k.name == "counter" => k.name.clone(),
                    Some(v) => format!("{} {}", k.name, value::byte_units(&rule::val_text(v, src))),
                    None => k.name.clone(),
                })
                .collect();
            b.push_str(&format!("\t\t{}\n", st.join(" ")));
        }
        Some(d) if d.counter => b.push_str("\t\tcounter\n"),
        _ => {}
    }
    if let Some(ms) = s.timeout_ms {
        b.push_str(&format!("\t\ttimeout {}\n", value::duration(ms as u128)));
    }
    if let Some(g) = decl.and_then(|d| d.gc_interval.as_ref()) {
        b.push_str(&format!("\t\tgc-interval {}\n", rule::val_text(g, src)));
    }
    if decl.is_some_and(|d| d.auto_merge) {
        b.push_str("\t\tauto-merge\n");
    }
    if let Some(c) = decl.and_then(|d| d.comment.as_ref()) {
        b.push_str(&format!("\t\tcomment \"{c}\"\n"));
    }
    if as_declared {
        // as declared: their order, counters and comments; raw payload (`typeof @ih,32,32`)
        // as written (nft lists it in hexadecimal)
        let raw: Vec<bool> = match decl {
            Some(d) if d.key_typeof.len() == s.key_types.len() => d
                .key_typeof
                .iter()
                .map(|e| matches!(e, ast::Expr::Selector(w, _) if w.first().is_some_and(|i| i.name.starts_with('@'))))
                .collect(),
            _ => vec![false; s.key_types.len()],
        };
        let tys: Vec<_> = s
            .key_types
            .iter()
            .zip(&raw)
            .map(|(&t, &r)| (!r).then_some(t))
            .collect();
        let data = s
            .data_types
            .first()
            .copied()
            .filter(|_| s.data_types.len() == 1);
        // a set's statements (`counter`, `limit ...`) are each element's, listed with it
        let set_stmts: &[(ast::Ident, Option<ast::Val>)] = decl.map_or(&[], |d| &d.stmts);
        let with_stmts: Vec<ast::Elem>;
        let declared = if set_stmts.is_empty() {
            declared
        } else {
            let stmt_kw = ["counter", "limit", "quota", "ct", "last"];
            with_stmts = declared
                .iter()
                .map(|e| {
                    let mut e = e.clone();
                    if !e
                        .options
                        .iter()
                        .any(|(k, _)| stmt_kw.contains(&k.name.as_str()))
                    {
                        e.options.extend(set_stmts.iter().cloned());
                    }
                    e
                })
                .collect();
            &with_stmts
        };
        // nft lists a set's elements sorted by key (but a concatenation of ranges in the
        // kernel's order)
        let sorted: Vec<ast::Elem>;
        let declared = if s.interval && s.key_types.len() > 1 {
            declared
        } else {
            let mut v: Vec<(Vec<u128>, &ast::Elem)> = declared
                .iter()
                .map(|e| (sort_key(&s.key_types, &e.key), e))
                .collect();
            v.sort_by(|a, b| a.0.cmp(&b.0));
            sorted = v.into_iter().map(|(_, e)| e.clone()).collect();
            &sorted
        };
        let items = rule::declared_elems(&tys, data, declared, src);
        let force = declared
            .iter()
            .any(|e| e.options.iter().any(|(k, _)| k.name == "comment"));
        b.push_str(&format!(
            "\t\telements = {}\n",
            wrap_elements(s, decl, &items, force)
        ));
    } else if !s.elements.is_empty() {
        let es: Vec<String> = s.elements.iter().map(|e| element(t, s, e)).collect();
        b.push_str(&format!(
            "\t\telements = {}\n",
            wrap_elements(s, decl, &es, false)
        ));
    }
    b.push_str("\t}\n");
    b
}

/// An element's key as nft sorts a listing by it: each component's (lowest) value; the
/// catch-all last.
fn sort_key(tys: &[weir_wire::DataType], key: &ast::Val) -> Vec<u128> {
    fn low(dt: weir_wire::DataType, v: &ast::Val) -> u128 {
        match v {
            ast::Val::Word(w, _) | ast::Val::Str(w, _) if w == "*" => u128::MAX,
            ast::Val::Word(w, _) | ast::Val::Str(w, _) => {
                crate::values::parse_range(dt, w).map_or(u128::MAX, |r| r.0)
            }
            ast::Val::Range(a, _) | ast::Val::Prefix(a, _) => low(dt, a),
            _ => u128::MAX,
        }
    }
    match key {
        ast::Val::Concat(parts, _) => parts.iter().zip(tys).map(|(p, &dt)| low(dt, p)).collect(),
        k => vec![tys.first().map_or(u128::MAX, |&dt| low(dt, k))],
    }
}

/// A named set's elements in braces, lines broken where nft breaks them
/// (`calculate_delim`): every element on its own line for maps, sets with timeouts,
/// comments, statements or concatenated keys; else five numbers, two IPv4 addresses (or ct
/// states), or one of anything else per line.
fn wrap_elements(
    s: &ir::Set,
    decl: Option<&&ast::SetDecl>,
    items: &[String],
    force: bool,
) -> String {
    use weir_wire::DataType as D;
    let flag = |n: &str| decl.is_some_and(|d| d.flags.iter().any(|f| f.name == n));
    let force = force
        || s.is_map
        || s.objects.is_some()
        || s.timeout_ms.is_some()
        || flag("timeout")
        || s.key_types.len() > 1
        || decl.is_some_and(|d| !d.stmts.is_empty() || d.counter);
    let per_line = if force {
        1
    } else {
        match s.key_types.first() {
            Some(
                D::Integer(..)
                | D::NfProto
                | D::InetProto
                | D::InetService
                | D::TcpFlags
                | D::DccpType
                | D::Mark
                | D::IfIndex
                | D::ClassId
                | D::Uid
                | D::Gid
                | D::CtDir,
            ) => 5,
            Some(D::Ipv4Addr | D::CtState | D::CtStatus | D::PktType) => 2,
            _ => 1,
        }
    };
    let mut out = String::from("{ ");
    for (i, it) in items.iter().enumerate() {
        if i > 0 {
            if i % per_line == 0 {
                out.push_str(",\n\t\t\t     ");
            } else {
                out.push_str(", ");
            }
        }
        out.push_str(it);
    }
    out.push_str(" }");
    out
}

fn data_type(s: &ir::Set, decl: Option<&&ast::SetDecl>) -> String {
    // an object map: `counter`, `quota`, `ct helper`...
    if let Some(o) = decl
        .and_then(|d| d.data_types.first())
        .filter(|o| ast::is_object_type(&o.name))
    {
        return o.name.clone();
    }
    if s.verdict_map {
        "verdict".to_string()
    } else {
        s.data_types
            .iter()
            .map(|x| x.nft_name())
            .collect::<Vec<_>>()
            .join(" . ")
    }
}

pub(super) fn element(t: &ir::Table, s: &ir::Set, e: &ir::Element) -> String {
    let key: Vec<String> = e
        .key
        .iter()
        .zip(&s.key_types)
        .map(|(&(lo, hi), &dt)| value::range(dt, lo, hi))
        .collect();
    let mut text = key.join(" . ");
    if let Some(ms) = e.timeout_ms {
        text.push_str(&format!(" timeout {}", value::duration(ms as u128)));
    }
    match &e.data {
        Some(MapValue::Verdict(v)) => text.push_str(&format!(" : {}", verdict(t, *v))),
        Some(MapValue::Value(vs)) => {
            // with a range among them, each component is lo, hi
            let v: Vec<String> = if !s.data_types.is_empty() && vs.len() == 2 * s.data_types.len() {
                vs.chunks(2)
                    .zip(&s.data_types)
                    .map(|(r, &dt)| value::range(dt, r[0], r[1]))
                    .collect()
            } else {
                vs.iter()
                    .zip(&s.data_types)
                    .map(|(&v, &dt)| value::format(dt, v))
                    .collect()
            };
            text.push_str(&format!(" : {}", v.join(" . ")));
        }
        None => {}
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn print(text: &str, opts: &Options) -> String {
        let (rs, file, _) = crate::load_str_ast("t.nft", text).expect("loads");
        ruleset(&file, &rs, opts)
    }

    /// What weir prints loads again and prints the same: the printer speaks the language.
    /// (As nft's: an anonymous set whose elements merged into one is listed as a set, `ip
    /// saddr { 198.18.0.0/23 }`, and read back as that one value.)
    #[test]
    fn printed_ruleset_loads_and_prints_the_same() {
        let text = include_str!("../../../../examples/gateway.nft");
        let opts = Options::default();
        let once = print(text, &opts);
        let twice = print(&once, &opts);
        // (a rule's `{ X }` without `,` or ` : ` is X)
        let unbraced = |t: &str| {
            t.lines()
                .map(|l| {
                    let mut l = l.to_string();
                    if l.trim_start().starts_with("elements") {
                        return l + "\n";
                    }
                    let mut from = 0;
                    while let Some(a) = l[from..].find(" { ").map(|a| a + from) {
                        let Some(b) = l[a + 3..].find(" }").map(|b| b + a + 3) else {
                            break;
                        };
                        let inner = l[a + 3..b].to_string();
                        if inner.contains([',', '{']) || inner.contains(" : ") {
                            from = a + 3;
                            continue;
                        }
                        l.replace_range(a..b + 2, &format!(" {inner}"));
                        from = a + 1;
                    }
                    l + "\n"
                })
                .collect::<String>()
        };
        assert_eq!(unbraced(&once), twice);
        assert_eq!(twice, print(&twice, &opts));
        assert!(once.contains("type filter hook input priority filter; policy drop;"));
    }

    /// What nft's listings hold beyond rules: a table's flags and comments, anonymous
    /// chains inline, catch-all elements, object maps.
    #[test]
    fn listing_keeps_declarations() {
        let text = "table inet t {\n flags dormant\n comment \"c0\"\n quota q { over 10 bytes }\n map m { type ipv4_addr : quota; elements = { 1.1.1.1 : \"q\" } }\n set s { type ipv4_addr; size 8; flags interval; auto-merge; comment \"c1\"; elements = { 1.1.1.1, * } }\n chain c {\n  comment \"c2\"\n  type filter hook input priority 0; policy accept;\n  tcp dport 22 jump { counter accept }\n  quota name ip saddr map @m\n }\n}\n";
        let (rs, file, _) = crate::load_str_ast("t.nft", text).expect("loads");
        let out = ruleset(&file, &rs, &Options::default());
        for want in [
            "\tflags dormant\n\tcomment \"c0\"\n",
            "type ipv4_addr : quota",
            "size 8\t# count 2",
            "auto-merge\n\t\tcomment \"c1\"",
            "elements = { 1.1.1.1, * }",
            "chain c {\n\t\tcomment \"c2\"\n",
            "tcp dport 22 jump {\n\t\t\tcounter packets 0 bytes 0 accept\n\t\t}",
        ] {
            assert!(out.contains(want), "{want:?}\nnot in\n{out}");
        }
        assert!(!out.contains("__chain"), "{out}");
        // (a dormant table and an object map are evaluated)
        let u = rs.unevaluated();
        assert!(u.is_empty(), "{u:?}");
    }

    #[test]
    fn rules_print_in_nft_canonical_form() {
        let text = "table inet t {\n set s { type ipv4_addr; flags interval; elements = { 10.0.0.0/8, 192.168.1.1 } }\n chain c {\n  type filter hook forward priority 10; policy accept;\n  meta nfproto ipv4 ip saddr 10.1.2.3 mark 0x2a counter packets 3 bytes 4 accept\n  ct state new,established, related ct mark xor 0x3 != 0x1 drop\n  tcp dport {telnet, http} limit rate 400/minute log level warn prefix x\n  meta length { 33-55, 56-88, 100-120 } ct expiration 1m-1h ct status ! dnat\n  iif \"lo\" ip protocol 6 meta l4proto 58 ip saddr @s\n }\n}\n";
        let out = print(
            text,
            &Options {
                stateless: false,
                numeric_proto: true,
                handles: false,
            },
        );
        for want in [
            "priority filter + 10; policy accept;",
            "ip saddr 10.1.2.3 meta mark 0x0000002a counter packets 3 bytes 4 accept",
            "ct state established,related,new ct mark != 0x00000002 drop",
            "tcp dport { 23, 80 } limit rate 400/minute burst 5 packets log prefix \"x\"",
            "meta length { 33-88, 100-120 } ct expiration 60s-3600s ct status ! dnat",
            "iif \"lo\" ip protocol 6 meta l4proto 58 ip saddr @s",
            "elements = { 10.0.0.0/8, 192.168.1.1 }",
        ] {
            assert!(out.contains(want), "{want}\nnot in\n{out}");
        }
    }
}
