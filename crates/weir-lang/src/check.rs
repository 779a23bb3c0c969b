//! The checker: gives the syntax tree types and meaning, reports what cannot work, and lowers it
//! into [`crate::ir`].
//!
//! Checks: families against selectors (`ip saddr` in an `ip6` table), hooks against families and
//! chain types (`type nat hook forward`), set element and map value types, undefined sets, maps,
//! chains, counters and flowtables, jumps to base chains, jump loops and the kernel's jump depth
//! limit, NAT statements in the wrong hook, ranges without `flags interval`.

use crate::ast::{self, CmpOp, Val};
use crate::diag::Diagnostic;
use crate::ir::*;
use crate::source::Span;
use crate::values::{self, describe, parse_range, parse_scalar, parse_time_ms};
use std::collections::HashMap;
use std::sync::Arc;
use weir_wire::{DataType, Field, Layer};

/// The kernel's jump stack depth (NFT_JUMP_STACK_SIZE).
pub const MAX_JUMP_DEPTH: usize = 16;

/// Check a parsed file and lower it. Errors are collected; the tables are complete only when no
/// error was reported.
pub fn check(file: &ast::File) -> (Vec<Table>, Vec<Diagnostic>) {
    let mut diags = Vec::new();
    let mut acc = Accum::default();
    acc.collect(file, &mut diags);
    let mut tables = Vec::new();
    for t in &acc.tables {
        tables.push(lower_table(t, &mut diags));
    }
    (tables, diags)
}

// ---------------------------------------------------------------------------------------------
// phase 1: gather the commands into tables (tables may be reopened, rules added later)

#[derive(Default)]
struct Accum<'a> {
    tables: Vec<TableAcc<'a>>,
}

struct TableAcc<'a> {
    family: Family,
    name: String,
    span: Span,
    chains: Vec<ChainAcc<'a>>,
    sets: Vec<(&'a ast::SetDecl, Vec<&'a ast::Elem>)>,
    flowtables: Vec<&'a ast::FlowtableDecl>,
    objs: Vec<&'a ast::ObjDecl>,
    next_handle: u64,
}

struct ChainAcc<'a> {
    name: String,
    span: Span,
    hook: Option<&'a ast::HookSpec>,
    policy: Option<&'a ast::Ident>,
    rules: Vec<(u64, &'a ast::Rule)>,
}

fn family_of(id: &Option<ast::Ident>, diags: &mut Vec<Diagnostic>) -> Family {
    match id.as_ref().map(|i| i.name.as_str()) {
        None | Some("ip") => Family::Ip,
        Some("ip6") => Family::Ip6,
        Some("inet") => Family::Inet,
        Some("arp") => Family::Arp,
        Some("bridge") => Family::Bridge,
        Some("netdev") => Family::Netdev,
        Some(other) => {
            diags.push(
                Diagnostic::error(
                    id.as_ref().unwrap().span,
                    format!("unknown family '{other}'"),
                )
                .note("families: ip, ip6, inet, arp, bridge, netdev"),
            );
            Family::Ip
        }
    }
}

impl<'a> Accum<'a> {
    fn table(&mut self, family: Family, name: &ast::Ident) -> &mut TableAcc<'a> {
        if let Some(i) = self
            .tables
            .iter()
            .position(|t| t.family == family && t.name == name.name)
        {
            return &mut self.tables[i];
        }
        self.tables.push(TableAcc {
            family,
            name: name.name.clone(),
            span: name.span,
            chains: Vec::new(),
            sets: Vec::new(),
            flowtables: Vec::new(),
            objs: Vec::new(),
            next_handle: 1,
        });
        self.tables.last_mut().unwrap()
    }

    fn find_table(
        &mut self,
        family: Family,
        name: &ast::Ident,
        diags: &mut Vec<Diagnostic>,
    ) -> Option<usize> {
        let i = self
            .tables
            .iter()
            .position(|t| t.family == family && t.name == name.name);
        if i.is_none() {
            diags.push(
                Diagnostic::error(
                    name.span,
                    format!("no table '{} {}'", family.name(), name.name),
                )
                .note("declare it first: table FAMILY NAME { ... } or add table FAMILY NAME"),
            );
        }
        i
    }

    fn collect(&mut self, file: &'a ast::File, diags: &mut Vec<Diagnostic>) {
        for c in &file.commands {
            match c {
                ast::Command::Table {
                    family,
                    name,
                    items,
                    ..
                } => {
                    let fam = family_of(family, diags);
                    let t = self.table(fam, name);
                    for it in items {
                        t.add_item(it, diags);
                    }
                }
                ast::Command::AddChain {
                    family,
                    table,
                    chain,
                } => {
                    let fam = family_of(family, diags);
                    if let Some(ti) = self.find_table(fam, table, diags) {
                        self.tables[ti].add_chain(chain, diags);
                    }
                }
                ast::Command::AddSet { family, table, set } => {
                    let fam = family_of(family, diags);
                    if let Some(ti) = self.find_table(fam, table, diags) {
                        self.tables[ti].add_set(set, diags);
                    }
                }
                ast::Command::AddRule {
                    family,
                    table,
                    chain,
                    position,
                    rule,
                } => {
                    let fam = family_of(family, diags);
                    let Some(ti) = self.find_table(fam, table, diags) else {
                        continue;
                    };
                    let t = &mut self.tables[ti];
                    let Some(ci) = t.chains.iter().position(|c| c.name == chain.name) else {
                        diags.push(Diagnostic::error(
                            chain.span,
                            format!("no chain '{}' in table {}", chain.name, t.name),
                        ));
                        continue;
                    };
                    let h = t.next_handle;
                    t.next_handle += 1;
                    let rules = &mut t.chains[ci].rules;
                    let at = match position {
                        ast::Position::End => rules.len(),
                        ast::Position::Start => 0,
                        ast::Position::Handle(v, after) => {
                            let Some(hv) = val_u64(v) else {
                                diags.push(Diagnostic::error(
                                    v.span(),
                                    "expected a rule handle (a number)",
                                ));
                                continue;
                            };
                            match rules.iter().position(|(rh, _)| *rh == hv) {
                                Some(p) => p + *after as usize,
                                None => {
                                    diags.push(Diagnostic::error(
                                        v.span(),
                                        format!("no rule with handle {hv} in chain {}", chain.name),
                                    ));
                                    continue;
                                }
                            }
                        }
                        ast::Position::Index(v, after) => {
                            let Some(iv) = val_u64(v) else {
                                diags.push(Diagnostic::error(
                                    v.span(),
                                    "expected a rule index (a number)",
                                ));
                                continue;
                            };
                            let iv = iv as usize;
                            if iv >= rules.len() {
                                diags.push(Diagnostic::error(
                                    v.span(),
                                    format!(
                                        "chain {} has {} rules; index {iv} is out of range",
                                        chain.name,
                                        rules.len()
                                    ),
                                ));
                                continue;
                            }
                            iv + *after as usize
                        }
                    };
                    rules.insert(at, (h, rule));
                }
                ast::Command::AddElement {
                    family,
                    table,
                    set,
                    elements,
                    ..
                } => {
                    let fam = family_of(family, diags);
                    let Some(ti) = self.find_table(fam, table, diags) else {
                        continue;
                    };
                    let t = &mut self.tables[ti];
                    match t.sets.iter_mut().find(|(d, _)| d.name.name == set.name) {
                        Some((_, extra)) => extra.extend(elements.iter()),
                        None => diags.push(Diagnostic::error(
                            set.span,
                            format!("no set '{}' in table {}", set.name, t.name),
                        )),
                    }
                }
                ast::Command::FlushRuleset(_) => self.tables.clear(),
                ast::Command::Flush {
                    what,
                    family,
                    table,
                    name,
                    ..
                } => {
                    let fam = family_of(family, diags);
                    let Some(ti) = self.find_table(fam, table, diags) else {
                        continue;
                    };
                    let t = &mut self.tables[ti];
                    match (what.name.as_str(), name) {
                        ("table", _) => t.chains.iter_mut().for_each(|c| c.rules.clear()),
                        ("chain", Some(n)) => {
                            match t.chains.iter_mut().find(|c| c.name == n.name) {
                                Some(c) => c.rules.clear(),
                                None => diags.push(Diagnostic::error(
                                    n.span,
                                    format!("no chain '{}'", n.name),
                                )),
                            }
                        }
                        ("set" | "map", Some(n)) => {
                            match t.sets.iter_mut().find(|(d, _)| d.name.name == n.name) {
                                // flushing a declared set drops the later-added elements; declared
                                // elements are in the declaration and cannot be removed here
                                Some((_, extra)) => extra.clear(),
                                None => diags.push(Diagnostic::error(
                                    n.span,
                                    format!("no set '{}'", n.name),
                                )),
                            }
                        }
                        _ => diags.push(Diagnostic::error(
                            what.span,
                            format!("cannot flush '{}' here", what.name),
                        )),
                    }
                }
                ast::Command::Delete {
                    what,
                    family,
                    table,
                    name,
                    handle,
                    span,
                    ..
                } => {
                    let fam = family_of(family, diags);
                    let Some(ti) = self.find_table(fam, table, diags) else {
                        continue;
                    };
                    match (what.name.as_str(), name, handle) {
                        ("table", _, _) => {
                            self.tables.remove(ti);
                        }
                        ("chain", Some(n), _) => {
                            let t = &mut self.tables[ti];
                            let before = t.chains.len();
                            t.chains.retain(|c| c.name != n.name);
                            if t.chains.len() == before {
                                diags.push(Diagnostic::error(n.span, format!("no chain '{}'", n.name)));
                            }
                        }
                        ("rule", Some(n), Some(h)) => {
                            let t = &mut self.tables[ti];
                            let hv = val_u64(h);
                            match t.chains.iter_mut().find(|c| c.name == n.name) {
                                Some(c) => {
                                    let before = c.rules.len();
                                    c.rules.retain(|(rh, _)| Some(*rh) != hv);
                                    if c.rules.len() == before {
                                        diags.push(Diagnostic::error(h.span(), "no rule with that handle"));
                                    }
                                }
                                None => diags.push(Diagnostic::error(n.span, format!("no chain '{}'", n.name))),
                            }
                        }
                        _ => diags.push(Diagnostic::error(
                            *span,
                            "only 'delete table', 'delete chain' and 'delete rule ... handle N' are supported in ruleset files",
                        )),
                    }
                }
            }
        }
    }
}

impl<'a> TableAcc<'a> {
    fn add_item(&mut self, it: &'a ast::TableItem, diags: &mut Vec<Diagnostic>) {
        match it {
            ast::TableItem::Chain(c) => self.add_chain(c, diags),
            ast::TableItem::Set(s) => self.add_set(s, diags),
            ast::TableItem::Flowtable(f) => {
                if self.flowtables.iter().any(|x| x.name.name == f.name.name) {
                    diags.push(Diagnostic::error(
                        f.name.span,
                        format!("flowtable '{}' is declared twice", f.name.name),
                    ));
                } else {
                    self.flowtables.push(f);
                }
            }
            ast::TableItem::Obj(o) => {
                if self
                    .objs
                    .iter()
                    .any(|x| x.name.name == o.name.name && x.kind.name == o.kind.name)
                {
                    diags.push(Diagnostic::error(
                        o.name.span,
                        format!("{} '{}' is declared twice", o.kind.name, o.name.name),
                    ));
                } else {
                    self.objs.push(o);
                }
            }
        }
    }

    fn add_chain(&mut self, c: &'a ast::ChainDecl, diags: &mut Vec<Diagnostic>) {
        let ci = match self.chains.iter().position(|x| x.name == c.name.name) {
            Some(i) => i,
            None => {
                self.chains.push(ChainAcc {
                    name: c.name.name.clone(),
                    span: c.name.span,
                    hook: None,
                    policy: None,
                    rules: Vec::new(),
                });
                self.chains.len() - 1
            }
        };
        let ch = &mut self.chains[ci];
        if let Some(h) = &c.hook {
            if ch.hook.is_some() {
                diags.push(Diagnostic::error(
                    h.span,
                    format!("chain '{}' already has a hook", c.name.name),
                ));
            } else {
                ch.hook = Some(h);
            }
        }
        if let Some(p) = &c.policy {
            ch.policy = Some(p);
        }
        for r in &c.rules {
            ch.rules.push((self.next_handle, r));
            self.next_handle += 1;
        }
    }

    fn add_set(&mut self, s: &'a ast::SetDecl, diags: &mut Vec<Diagnostic>) {
        if self.sets.iter().any(|(d, _)| d.name.name == s.name.name) {
            diags.push(Diagnostic::error(
                s.name.span,
                format!("set '{}' is declared twice", s.name.name),
            ));
            return;
        }
        self.sets.push((s, Vec::new()));
    }
}

fn val_u64(v: &Val) -> Option<u64> {
    match v {
        Val::Word(w, _) => values::parse_number(w).and_then(|n| u64::try_from(n).ok()),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// phase 2: lower each table

struct Cx<'d> {
    diags: &'d mut Vec<Diagnostic>,
    family: Family,
    sets: Vec<Set>,
    set_names: HashMap<String, usize>,
    chain_names: HashMap<String, usize>,
    base_chains: Vec<bool>,
    flowtables: HashMap<String, usize>,
    counters: HashMap<String, usize>,
    quotas: HashMap<String, usize>,
    /// (from chain, to chain, span) for loop detection
    edges: Vec<(usize, usize, Span)>,
    cur_chain: usize,
    cur_hook: Option<(ChainType, Hook)>,
}

fn err(cx: &mut Cx, span: Span, msg: impl Into<String>) {
    cx.diags.push(Diagnostic::error(span, msg));
}

fn lower_table(t: &TableAcc, diags: &mut Vec<Diagnostic>) -> Table {
    let mut cx = Cx {
        diags,
        family: t.family,
        sets: Vec::new(),
        set_names: HashMap::new(),
        chain_names: t
            .chains
            .iter()
            .enumerate()
            .map(|(i, c)| (c.name.clone(), i))
            .collect(),
        base_chains: t.chains.iter().map(|c| c.hook.is_some()).collect(),
        flowtables: HashMap::new(),
        counters: HashMap::new(),
        quotas: HashMap::new(),
        edges: Vec::new(),
        cur_chain: 0,
        cur_hook: None,
    };
    // named objects
    let mut counters = Vec::new();
    let mut quotas = Vec::new();
    for o in &t.objs {
        match o.kind.name.as_str() {
            "counter" => {
                let mut nc = NamedCounter {
                    name: o.name.name.clone(),
                    packets: 0,
                    bytes: 0,
                };
                let mut it = o.body.iter();
                while let Some(k) = it.next() {
                    let (Val::Word(k, ks), Some(v)) = (k, it.next()) else {
                        break;
                    };
                    let n = val_u64(v).unwrap_or(0);
                    match k.as_str() {
                        "packets" => nc.packets = n,
                        "bytes" => nc.bytes = n,
                        _ => err(
                            &mut cx,
                            *ks,
                            format!("unknown counter property '{k}' (packets, bytes)"),
                        ),
                    }
                }
                cx.counters.insert(nc.name.clone(), counters.len());
                counters.push(nc);
            }
            "quota" => {
                let words: Vec<&Val> = o.body.iter().collect();
                if let Some(q) = lower_quota_words(&mut cx, &words, o.name.span) {
                    cx.quotas.insert(o.name.name.clone(), quotas.len());
                    quotas.push((o.name.name.clone(), q));
                }
            }
            other => err(
                &mut cx,
                o.kind.span,
                format!("named '{other}' objects are not supported (counter, quota)"),
            ),
        }
    }
    // flowtables
    let mut flowtables = Vec::new();
    for f in &t.flowtables {
        let hook = match f.hook.as_ref().map(|h| h.name.as_str()) {
            Some("ingress") | None => Hook::Ingress,
            Some(other) => {
                err(
                    &mut cx,
                    f.hook.as_ref().unwrap().span,
                    format!("a flowtable hooks at ingress, not {other}"),
                );
                Hook::Ingress
            }
        };
        let priority = if f.priority.is_empty() {
            0
        } else {
            lower_priority(&mut cx, &f.priority).unwrap_or(0)
        };
        let devices = f
            .devices
            .iter()
            .map(|d| match d {
                Val::Word(w, _) | Val::Str(w, _) => w.clone(),
                other => other_text(other),
            })
            .collect();
        cx.flowtables.insert(f.name.name.clone(), flowtables.len());
        flowtables.push(Flowtable {
            name: f.name.name.clone(),
            hook,
            priority,
            devices,
        });
    }
    // sets (before rules: rules may refer to sets declared after them)
    for (i, (d, _)) in t.sets.iter().enumerate() {
        cx.set_names.insert(d.name.name.clone(), i);
    }
    for (d, extra) in &t.sets {
        let s = lower_set(&mut cx, d, extra);
        cx.sets.push(s);
    }
    // chains
    let mut chains = Vec::new();
    for (ci, c) in t.chains.iter().enumerate() {
        cx.cur_chain = ci;
        let base = c.hook.map(|h| lower_base(&mut cx, t.family, h, c.policy));
        if base.is_none() {
            if let Some(p) = c.policy {
                err(
                    &mut cx,
                    p.span,
                    format!(
                        "chain '{}' has a policy but no hook: only base chains have a policy",
                        c.name
                    ),
                );
            }
        }
        cx.cur_hook = base.as_ref().map(|b| (b.ty, b.hook));
        let mut rules = Vec::new();
        for (h, r) in &c.rules {
            if let Some(rule) = lower_rule(&mut cx, *h, r) {
                rules.push(rule);
            }
        }
        chains.push(Chain {
            name: c.name.clone(),
            base,
            rules,
            span: c.span,
        });
    }
    check_jumps(&mut cx, &chains);
    Table {
        family: t.family,
        name: t.name.clone(),
        chains,
        sets: cx.sets,
        flowtables,
        counters,
        quotas,
        span: t.span,
    }
}

fn other_text(v: &Val) -> String {
    match v {
        Val::Word(w, _) | Val::Str(w, _) => w.clone(),
        _ => String::new(),
    }
}

fn lower_priority(cx: &mut Cx, words: &[Val]) -> Option<i32> {
    let text: String = words.iter().map(other_text).collect::<Vec<_>>().join("");
    let span = words[0].span().to(words[words.len() - 1].span());
    if let Ok(n) = text.parse::<i32>() {
        return Some(n);
    }
    let named = |n: &str| -> Option<i32> {
        Some(match n {
            "raw" => -300,
            "mangle" => -150,
            "dstnat" => -100,
            "filter" => 0,
            "security" => 50,
            "srcnat" => 100,
            "out" => 100,
            _ => return None,
        })
    };
    let (name, off) = match text.find(['+', '-']) {
        Some(i) if i > 0 => {
            let off: i32 = match text[i + 1..].parse() {
                Ok(o) => o,
                Err(_) => {
                    err(cx, span, format!("'{text}' is not a priority"));
                    return None;
                }
            };
            (&text[..i], if &text[i..i + 1] == "-" { -off } else { off })
        }
        _ => (text.as_str(), 0),
    };
    match named(name) {
        Some(b) => Some(b + off),
        None => {
            cx.diags.push(
                Diagnostic::error(span, format!("'{text}' is not a priority"))
                    .note("a number, or raw, mangle, dstnat, filter, security, srcnat (optionally + or - a number)"),
            );
            None
        }
    }
}

fn lower_base(
    cx: &mut Cx,
    family: Family,
    h: &ast::HookSpec,
    policy: Option<&ast::Ident>,
) -> BaseChain {
    let ty = match h.ty.name.as_str() {
        "filter" => ChainType::Filter,
        "nat" => ChainType::Nat,
        "route" => ChainType::Route,
        other => {
            cx.diags.push(
                Diagnostic::error(h.ty.span, format!("unknown chain type '{other}'"))
                    .note("chain types: filter, nat, route"),
            );
            ChainType::Filter
        }
    };
    let hook = match Hook::from_name(&h.hook.name) {
        Some(x) => x,
        None => {
            cx.diags.push(
                Diagnostic::error(h.hook.span, format!("unknown hook '{}'", h.hook.name)).note(
                    "hooks: ingress, prerouting, input, forward, output, postrouting, egress",
                ),
            );
            Hook::Forward
        }
    };
    let allowed: &[Hook] = match family {
        Family::Ip | Family::Ip6 => &[
            Hook::Prerouting,
            Hook::Input,
            Hook::Forward,
            Hook::Output,
            Hook::Postrouting,
        ],
        Family::Inet => &[
            Hook::Ingress,
            Hook::Prerouting,
            Hook::Input,
            Hook::Forward,
            Hook::Output,
            Hook::Postrouting,
        ],
        Family::Arp => &[Hook::Input, Hook::Output],
        Family::Bridge => &[
            Hook::Prerouting,
            Hook::Input,
            Hook::Forward,
            Hook::Output,
            Hook::Postrouting,
        ],
        Family::Netdev => &[Hook::Ingress, Hook::Egress],
    };
    if !allowed.contains(&hook) {
        cx.diags.push(
            Diagnostic::error(
                h.hook.span,
                format!(
                    "hook {} does not exist in the {} family",
                    hook.name(),
                    family.name()
                ),
            )
            .note(format!(
                "{} hooks: {}",
                family.name(),
                allowed
                    .iter()
                    .map(|h| h.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        );
    }
    match ty {
        ChainType::Nat => {
            if !matches!(family, Family::Ip | Family::Ip6 | Family::Inet) {
                err(
                    cx,
                    h.ty.span,
                    format!(
                        "nat chains exist only in ip, ip6 and inet tables, not {}",
                        family.name()
                    ),
                );
            } else if !matches!(
                hook,
                Hook::Prerouting | Hook::Input | Hook::Output | Hook::Postrouting
            ) {
                cx.diags.push(
                    Diagnostic::error(
                        h.hook.span,
                        format!("a nat chain cannot hook {}", hook.name()),
                    )
                    .note(
                        "nat chains hook prerouting or output (dnat), postrouting or input (snat)",
                    ),
                );
            }
        }
        ChainType::Route => {
            if hook != Hook::Output || !matches!(family, Family::Ip | Family::Ip6 | Family::Inet) {
                err(
                    cx,
                    h.hook.span,
                    "route chains exist only at the output hook of ip, ip6 and inet tables",
                );
            }
        }
        ChainType::Filter => {}
    }
    let device = h.device.as_ref().map(other_text);
    if family == Family::Netdev && device.is_none() {
        cx.diags.push(
            Diagnostic::error(h.span, "a netdev base chain needs a device")
                .note("for example: type filter hook ingress device \"eth0\" priority 0;"),
        );
    }
    let priority = lower_priority(cx, &h.priority).unwrap_or(0);
    let policy = match policy.map(|p| p.name.as_str()) {
        None | Some("accept") => Policy::Accept,
        Some("drop") => Policy::Drop,
        Some(other) => {
            err(
                cx,
                policy.unwrap().span,
                format!("policy must be accept or drop, not '{other}'"),
            );
            Policy::Accept
        }
    };
    BaseChain {
        ty,
        hook,
        priority,
        policy,
        device,
    }
}

// ---------------------------------------------------------------------------------------------
// sets

fn lower_set(cx: &mut Cx, d: &ast::SetDecl, extra: &[&ast::Elem]) -> Set {
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
    for e in &d.key_typeof {
        if let Some(k) = lower_key(cx, e) {
            key_types.extend(k.iter().map(|p| p.dtype));
        }
    }
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
        interval,
        dynamic,
        constant,
        timeout_ms,
        size,
        elements: Vec::new(),
        span: d.span,
    };
    let elems: Vec<&ast::Elem> = d.elements.iter().chain(extra.iter().copied()).collect();
    let mut seen = std::collections::HashSet::new();
    for e in elems {
        if let Some(el) = lower_elem(cx, &set, e) {
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

fn time_val(cx: &mut Cx, v: &Val) -> Option<u64> {
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
fn comp_range(cx: &mut Cx, dt: DataType, v: &Val) -> Option<(u128, u128)> {
    let r = match v {
        Val::Word(w, _) => parse_range(dt, w),
        Val::Str(s, _) => {
            if dt == DataType::IfName {
                parse_range(dt, s)
            } else {
                Err(format!("expected a {}, found string \"{s}\"", describe(dt)))
            }
        }
        Val::Range(a, b) => match (scalar(cx, dt, a), scalar(cx, dt, b)) {
            (Some(lo), Some(hi)) if lo <= hi => Ok((lo, hi)),
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

fn scalar(cx: &mut Cx, dt: DataType, v: &Val) -> Option<u128> {
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
fn key_ranges(cx: &mut Cx, types: &[DataType], v: &Val) -> Option<Vec<(u128, u128)>> {
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

fn lower_elem(cx: &mut Cx, set: &Set, e: &ast::Elem) -> Option<Element> {
    let key = key_ranges(cx, &set.key_types, &e.key)?;
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
            // a data range is allowed for NAT address/port ranges: keep lo and hi
            let mut vals = Vec::new();
            for (lo, hi) in r {
                vals.push(lo);
                if lo != hi {
                    vals.push(hi);
                }
            }
            Some(MapValue::Value(vals))
        }
    };
    Some(Element {
        key,
        data,
        timeout_ms,
    })
}

// ---------------------------------------------------------------------------------------------
// rules

fn lower_verdict(cx: &mut Cx, v: &ast::VerdictAst) -> Option<Verdict> {
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
            cx.edges.push((cx.cur_chain, ci, *s));
            if matches!(v, ast::VerdictAst::Jump(..)) {
                Verdict::Jump(ci)
            } else {
                Verdict::Goto(ci)
            }
        }
    })
}

fn field_allowed(cx: &mut Cx, f: Field, span: Span) -> bool {
    let bad = match (cx.family, f.layer()) {
        (Family::Ip, Layer::Ip6 | Layer::Icmp6) => Some("an ip table sees only IPv4 packets"),
        (Family::Ip6, Layer::Ip4 | Layer::Icmp) => Some("an ip6 table sees only IPv6 packets"),
        (Family::Arp, l) if l != Layer::Meta && l != Layer::Link => {
            Some("an arp table sees only ARP packets")
        }
        _ => None,
    };
    if let Some(why) = bad {
        err(
            cx,
            span,
            format!("'{}' can never match here: {why}", f.name()),
        );
        return false;
    }
    true
}

fn lower_key(cx: &mut Cx, e: &ast::Expr) -> Option<Key> {
    match e {
        ast::Expr::Selector(words, span) => {
            let name = words
                .iter()
                .map(|w| w.name.as_str())
                .collect::<Vec<_>>()
                .join(" ");
            let Some(f) = Field::from_name(&name) else {
                let head = &words[0].name;
                let prefix = if head == "ct" || head == "meta" || words.len() > 1 {
                    format!("{head} ")
                } else {
                    String::new()
                };
                let known: Vec<&str> = Field::ALL
                    .iter()
                    .map(|f| f.name())
                    .filter(|n| !prefix.is_empty() && n.starts_with(&prefix))
                    .collect();
                let mut d = Diagnostic::error(*span, format!("unknown selector '{name}'"));
                if !known.is_empty() {
                    d = d.note(format!("known: {}", known.join(", ")));
                }
                cx.diags.push(d);
                return None;
            };
            if !field_allowed(cx, f, *span) {
                return None;
            }
            Some(vec![KeyPart::field(f)])
        }
        ast::Expr::Concat(parts, _) => {
            let mut out = Vec::new();
            for p in parts {
                out.extend(lower_key(cx, p)?);
            }
            Some(out)
        }
        ast::Expr::Binop(op, inner, v, span) => {
            let mut k = lower_key(cx, inner)?;
            if k.len() != 1 {
                err(
                    cx,
                    *span,
                    "a bitwise operation applies to a single value, not a concatenation",
                );
                return None;
            }
            let p = &mut k[0];
            match op {
                ast::BinOp::Shl | ast::BinOp::Shr => {
                    let n = scalar(cx, DataType::Integer(8), v)? as i8;
                    if p.shift != 0 {
                        err(cx, *span, "only one shift per value is supported");
                        return None;
                    }
                    p.shift = if *op == ast::BinOp::Shr { n } else { -n };
                    let bits =
                        p.dtype.bits() as i32 - if *op == ast::BinOp::Shr { n as i32 } else { 0 };
                    p.dtype = DataType::Integer(bits.clamp(1, 128) as u8);
                }
                _ => {
                    if p.shift != 0 {
                        err(cx, *span, "apply masks before shifts");
                        return None;
                    }
                    let m = scalar(cx, p.dtype, v)?;
                    match op {
                        ast::BinOp::And => {
                            p.and &= m;
                            p.xor &= m;
                        }
                        ast::BinOp::Or => {
                            p.and &= !m;
                            p.xor = (p.xor & !m) | m;
                        }
                        _ => p.xor ^= m,
                    }
                }
            }
            Some(k)
        }
        ast::Expr::Hash {
            kind,
            key,
            modulus,
            seed,
            offset,
            ..
        } => {
            let m = scalar(cx, DataType::Integer(32), modulus)? as u32;
            if m == 0 {
                err(cx, modulus.span(), "mod must be at least 1");
                return None;
            }
            let off = match offset {
                Some(o) => scalar(cx, DataType::Integer(32), o)? as u32,
                None => 0,
            };
            let src = if kind.name == "jhash" {
                let k = lower_key(cx, key.as_ref()?)?;
                let s = match seed {
                    Some(s) => scalar(cx, DataType::Integer(32), s)? as u32,
                    None => 0,
                };
                Source::Jhash {
                    key: k,
                    modulus: m,
                    seed: s,
                    offset: off,
                }
            } else {
                Source::Symhash {
                    modulus: m,
                    offset: off,
                }
            };
            Some(vec![KeyPart {
                src,
                and: u128::MAX,
                xor: 0,
                shift: 0,
                dtype: DataType::Integer(32),
            }])
        }
        ast::Expr::Numgen {
            mode,
            modulus,
            offset,
            ..
        } => {
            let random = match mode.name.as_str() {
                "inc" => false,
                "random" => true,
                other => {
                    err(
                        cx,
                        mode.span,
                        format!("numgen mode is inc or random, not '{other}'"),
                    );
                    return None;
                }
            };
            let m = scalar(cx, DataType::Integer(32), modulus)? as u32;
            if m == 0 {
                err(cx, modulus.span(), "mod must be at least 1");
                return None;
            }
            let off = match offset {
                Some(o) => scalar(cx, DataType::Integer(32), o)? as u32,
                None => 0,
            };
            Some(vec![KeyPart {
                src: Source::Numgen {
                    random,
                    modulus: m,
                    offset: off,
                },
                and: u128::MAX,
                xor: 0,
                shift: 0,
                dtype: DataType::Integer(32),
            }])
        }
        ast::Expr::Map(_, _, span) => {
            err(cx, *span, "a map lookup gives a value: use it after 'set' or 'to', or use 'vmap' for verdicts");
            None
        }
        ast::Expr::Const(v) => {
            err(
                cx,
                v.span(),
                "expected a selector (ip saddr, tcp dport, meta mark, ...), found a value",
            );
            None
        }
    }
}

fn named_set(cx: &mut Cx, id: &ast::Ident) -> Option<usize> {
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

/// A note listing names: `label: a, b, c`.
fn listing<'a>(label: &str, names: impl Iterator<Item = &'a str>) -> String {
    format!("{label}: {}", names.collect::<Vec<_>>().join(", "))
}

/// Types as nftables writes them: `ipv4_addr . inet_service`.
fn type_names(types: &[DataType]) -> String {
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
    let mut set = Set {
        name: String::new(),
        key_types: types.to_vec(),
        data_types: data.map(|d| d.to_vec()).unwrap_or_default(),
        is_map,
        verdict_map: verdict,
        interval: true,
        dynamic: false,
        constant: true,
        timeout_ms: None,
        size: None,
        elements: Vec::new(),
        span: Span::default(),
    };
    let mut ok = true;
    for e in elems {
        match lower_elem(cx, &set, e) {
            Some(el) => set.elements.push(el),
            None => ok = false,
        }
    }
    ok.then(|| Arc::new(set))
}

fn set_ref(cx: &mut Cx, types: &[DataType], r: &ast::SetRef, span: Span) -> Option<SetRef> {
    match r {
        ast::SetRef::Named(id) => {
            let i = named_set(cx, id)?;
            let s = &cx.sets[i];
            if s.is_map {
                err(
                    cx,
                    id.span,
                    format!("'@{}' is a map: use it with 'map' or 'vmap'", id.name),
                );
                return None;
            }
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

fn map_ref(
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
            if !types_compatible(&s.key_types, &types) {
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
                && !(!s.data_types.is_empty() && s.data_types[0] == data[0])
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
    let mut key = lower_key(cx, lhs)?;
    let types = key_types(&key);
    let (cmp, op_span) = match op {
        Some((o, s)) => (Some(o), s),
        None => (None, span),
    };
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
            // flags: `tcp flags syn,ack` means any of them set; `!=` none of them set;
            // `tcp flags syn / syn,ack` is a masked comparison
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
                    let r = key_ranges(cx, &types, v)?;
                    Some(Expr::Match(Match {
                        key,
                        negate: cmp == Some(CmpOp::Ne),
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
        span: Span::default(),
    }))
}

/// A value expression for a target of these types.
fn lower_value(cx: &mut Cx, types: &[DataType], e: &ast::Expr) -> Option<ValueExpr> {
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
            let key = lower_key(cx, k)?;
            let map = map_ref(cx, &key, m, false, types, *span)?;
            Some(ValueExpr::Map { key, map })
        }
        other => {
            let key = lower_key(cx, other)?;
            let kt = key_types(&key);
            let hashy = key.iter().all(|p| !matches!(p.src, Source::Field(_)));
            if !hashy && !types_compatible(&kt, types) {
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
    Field::MetaMark,
    Field::MetaPriority,
    Field::CtMark,
    Field::IpSaddr,
    Field::IpDaddr,
    Field::IpTtl,
    Field::IpDscp,
    Field::Ip6Saddr,
    Field::Ip6Daddr,
    Field::Ip6Hoplimit,
    Field::Ip6Dscp,
    Field::TcpSport,
    Field::TcpDport,
    Field::UdpSport,
    Field::UdpDport,
    Field::ThSport,
    Field::ThDport,
];

fn lower_quota_words(cx: &mut Cx, words: &[&Val], span: Span) -> Option<Quota> {
    let mut over = false;
    let mut i = 0;
    let text = |v: &Val| other_text(v);
    if words.first().map(|w| text(w)) == Some("over".into()) {
        over = true;
        i = 1;
    } else if words.first().map(|w| text(w)) == Some("until".into()) {
        i = 1;
    }
    let (bytes, n) = bytes_amount(cx, &words[i..], span)?;
    i += n;
    let mut used = 0;
    if words.get(i).map(|w| text(w)) == Some("used".into()) {
        used = bytes_amount(cx, &words[i + 1..], span)?.0;
    }
    Some(Quota {
        bytes,
        used,
        over,
        named: None,
    })
}

/// `N unit` or `Nunit` -> bytes, and how many words were used.
fn bytes_amount(cx: &mut Cx, words: &[&Val], span: Span) -> Option<(u64, usize)> {
    let Some(first) = words.first() else {
        err(cx, span, "expected an amount such as 100 mbytes");
        return None;
    };
    let t = other_text(first);
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, mut unit) = (t[..split].to_string(), t[split..].to_string());
    let mut used = 1;
    if unit.is_empty() {
        if let Some(u) = words.get(1) {
            let u = other_text(u);
            if u.ends_with("bytes") {
                unit = u;
                used = 2;
            }
        }
    }
    let n: u64 = match num.parse() {
        Ok(n) => n,
        Err(_) => {
            err(cx, first.span(), format!("'{t}' is not an amount of bytes"));
            return None;
        }
    };
    let mult = match unit.as_str() {
        "" | "bytes" => 1,
        "kbytes" => 1 << 10,
        "mbytes" => 1 << 20,
        "gbytes" => 1 << 30,
        other => {
            err(
                cx,
                first.span(),
                format!("unknown unit '{other}' (bytes, kbytes, mbytes, gbytes)"),
            );
            return None;
        }
    };
    Some((n.saturating_mul(mult), used))
}

fn lower_limit(
    cx: &mut Cx,
    over: bool,
    rate: &[Val],
    burst: &Option<Vec<Val>>,
    span: Span,
) -> Option<Limit> {
    let text: String = rate.iter().map(other_text).collect::<Vec<_>>().join(" ");
    let bad = |cx: &mut Cx| {
        cx.diags.push(
            Diagnostic::error(span, format!("'{text}' is not a rate"))
                .note("for example: limit rate 10/second, limit rate over 1 mbytes/second burst 64 kbytes"),
        );
    };
    let Some((amount, per)) = text.rsplit_once('/') else {
        bad(cx);
        return None;
    };
    let unit = match per.trim() {
        "second" => RateUnit::Second,
        "minute" => RateUnit::Minute,
        "hour" => RateUnit::Hour,
        "day" => RateUnit::Day,
        "week" => RateUnit::Week,
        _ => {
            bad(cx);
            return None;
        }
    };
    let amount = amount.trim();
    let (n, u) = match amount.split_once(' ') {
        Some((n, u)) => (n, u),
        None => {
            let s = amount
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(amount.len());
            (&amount[..s], &amount[s..])
        }
    };
    let Ok(n) = n.parse::<u64>() else {
        bad(cx);
        return None;
    };
    let (bytes, mult) = match u {
        "" => (false, 1),
        "bytes" => (true, 1),
        "kbytes" => (true, 1 << 10),
        "mbytes" => (true, 1 << 20),
        "gbytes" => (true, 1 << 30),
        _ => {
            bad(cx);
            return None;
        }
    };
    let burst = match burst {
        None => {
            if bytes {
                0
            } else {
                5
            }
        }
        Some(b) => {
            let refs: Vec<&Val> = b.iter().collect();
            if refs.len() == 2 && other_text(refs[1]) == "packets" {
                other_text(refs[0]).parse().unwrap_or(5)
            } else if bytes {
                bytes_amount(cx, &refs, span)?.0
            } else {
                match other_text(refs[0]).parse() {
                    Ok(n) => n,
                    Err(_) => {
                        err(cx, b[0].span(), "burst must be a number of packets");
                        return None;
                    }
                }
            }
        }
    };
    if n == 0 {
        err(
            cx,
            span,
            "a rate of 0 never lets anything through: use drop",
        );
        return None;
    }
    Some(Limit {
        rate: n.saturating_mul(mult),
        unit,
        bytes,
        burst,
        over,
    })
}

fn lower_nat(
    cx: &mut Cx,
    kind: &ast::Ident,
    family: &Option<ast::Ident>,
    addr: &Option<ast::Expr>,
    port: &Option<ast::Expr>,
    flags: &[ast::Ident],
    span: Span,
) -> Option<Expr> {
    let k = match kind.name.as_str() {
        "snat" => NatKind::Snat,
        "dnat" => NatKind::Dnat,
        "masquerade" => NatKind::Masquerade,
        _ => NatKind::Redirect,
    };
    if let Some((ty, hook)) = cx.cur_hook {
        if ty != ChainType::Nat {
            cx.diags.push(
                Diagnostic::error(span, format!("{} is only allowed in nat chains", kind.name))
                    .note("declare the chain with: type nat hook ... priority ...;"),
            );
            return None;
        }
        let ok = match k {
            NatKind::Snat | NatKind::Masquerade => matches!(hook, Hook::Postrouting | Hook::Input),
            NatKind::Dnat | NatKind::Redirect => matches!(hook, Hook::Prerouting | Hook::Output),
        };
        if !ok {
            let want = if matches!(k, NatKind::Snat | NatKind::Masquerade) {
                "postrouting or input"
            } else {
                "prerouting or output"
            };
            err(
                cx,
                span,
                format!(
                    "{} belongs in a nat chain at {want}, not {}",
                    kind.name,
                    hook.name()
                ),
            );
            return None;
        }
    }
    let mut fam: Option<u8> = match family.as_ref().map(|f| f.name.as_str()) {
        Some("ip") => Some(4),
        Some("ip6") => Some(6),
        _ => match cx.family {
            Family::Ip => Some(4),
            Family::Ip6 => Some(6),
            _ => None,
        },
    };
    let mut addr_v = None;
    let mut port_v = None;
    let mut port_range = None;
    let mut port_word: Option<(String, Span)> = None;
    if let Some(a) = addr {
        if matches!(k, NatKind::Masquerade | NatKind::Redirect) {
            err(
                cx,
                a.span(),
                format!("{} takes only a port: {} to :PORT", kind.name, kind.name),
            );
            return None;
        }
        match a {
            ast::Expr::Const(Val::Word(w, s)) => {
                // addr, addr-addr, addr:port, addr:port-port (IPv6 with a port is written [addr]:port)
                let (aw, pw) = match (w.matches(':').count(), w.rsplit_once(':')) {
                    (1, Some((x, y))) => (x.to_string(), Some(y.to_string())),
                    _ => (w.clone(), None),
                };
                if fam.is_none() {
                    fam = Some(if aw.contains(':') { 6 } else { 4 });
                }
                let dt = if fam == Some(6) {
                    DataType::Ipv6Addr
                } else {
                    DataType::Ipv4Addr
                };
                match parse_range(dt, &aw) {
                    Ok((lo, hi)) if lo == hi => addr_v = Some(ValueExpr::Const(vec![lo])),
                    Ok((lo, hi)) => addr_v = Some(ValueExpr::Range(lo, hi)),
                    Err(e) => {
                        err(cx, *s, e);
                        return None;
                    }
                }
                if let Some(p) = pw {
                    port_word = Some((p, *s));
                }
            }
            other => {
                let dt = if fam == Some(6) {
                    DataType::Ipv6Addr
                } else {
                    DataType::Ipv4Addr
                };
                // a map may give address . port
                let types: Vec<DataType> = if let ast::Expr::Map(..) = other {
                    vec![dt]
                } else {
                    vec![dt]
                };
                let v = lower_value(cx, &types, other);
                let v = match v {
                    Some(v) => v,
                    None => {
                        // retry as address . port (a concatenated map value)
                        let n = cx.diags.len();
                        let v2 = lower_value(cx, &[dt, DataType::InetService], other);
                        if v2.is_some() {
                            cx.diags.truncate(n.saturating_sub(1));
                        }
                        v2?
                    }
                };
                if fam.is_none() {
                    fam = Some(4);
                }
                addr_v = Some(v);
            }
        }
    }
    if let Some(p) = port {
        match p {
            ast::Expr::Const(v) => match comp_range(cx, DataType::InetService, v) {
                Some((lo, hi)) => port_range = Some((lo as u16, hi as u16)),
                None => return None,
            },
            other => port_v = Some(lower_value(cx, &[DataType::InetService], other)?),
        }
    }
    if let Some((pw, s)) = port_word {
        match parse_range(DataType::InetService, &pw) {
            Ok((lo, hi)) => port_range = Some((lo as u16, hi as u16)),
            Err(e) => {
                err(cx, s, e);
                return None;
            }
        }
    }
    if matches!(k, NatKind::Snat | NatKind::Dnat) && addr_v.is_none() {
        err(
            cx,
            span,
            format!(
                "{} needs an address: {} to ADDRESS[:PORT]",
                kind.name, kind.name
            ),
        );
        return None;
    }
    let mut nat = Nat {
        kind: k,
        family: fam,
        addr: addr_v,
        port: port_v,
        port_range,
        random: false,
        fully_random: false,
        persistent: false,
    };
    for f in flags {
        match f.name.as_str() {
            "random" => nat.random = true,
            "fully-random" => nat.fully_random = true,
            "persistent" => nat.persistent = true,
            _ => {}
        }
    }
    Some(Expr::Nat(nat))
}

fn lower_item(
    cx: &mut Cx,
    it: &ast::Item,
    out: &mut Vec<Expr>,
    comment: &mut Option<String>,
) -> bool {
    let e = match it {
        ast::Item::Match { lhs, op, rhs, span } => lower_match(cx, lhs, *op, rhs, *span),
        ast::Item::Vmap { key, map, span } => {
            let Some(k) = lower_key(cx, key) else {
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
                    _ => {}
                }
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
                        let code = match (k.name.as_str(), t.as_str()) {
                            ("icmp", "net-unreachable") => Some(0),
                            ("icmp", "host-unreachable") => Some(1),
                            ("icmp", "prot-unreachable") => Some(2),
                            ("icmp", "port-unreachable") => Some(3),
                            ("icmp", "net-prohibited") => Some(9),
                            ("icmp", "host-prohibited") => Some(10),
                            ("icmp", "admin-prohibited") => Some(13),
                            ("icmpv6", "no-route") => Some(0),
                            ("icmpv6", "admin-prohibited") => Some(1),
                            ("icmpv6", "addr-unreachable") => Some(3),
                            ("icmpv6", "port-unreachable") => Some(4),
                            ("icmpv6", "policy-fail") => Some(5),
                            ("icmpv6", "reject-route") => Some(6),
                            ("icmpx", "no-route") => Some(0),
                            ("icmpx", "port-unreachable") => Some(1),
                            ("icmpx", "host-unreachable") => Some(2),
                            ("icmpx", "admin-prohibited") => Some(3),
                            (_, n) => values::parse_number(n).and_then(|x| u8::try_from(x).ok()),
                        };
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
            r.map(Expr::Reject)
        }
        ast::Item::Assign {
            target,
            value,
            span,
        } => {
            let Some(tk) = lower_key(cx, target) else {
                return false;
            };
            let f = match tk.as_slice() {
                [KeyPart {
                    src: Source::Field(f),
                    ..
                }] if tk[0].is_plain() => *f,
                _ => {
                    err(cx, target.span(), "only a single field can be set");
                    return false;
                }
            };
            if !ASSIGNABLE.contains(&f) {
                cx.diags.push(
                    Diagnostic::error(target.span(), format!("'{}' cannot be set", f.name()))
                        .note(listing("settable", ASSIGNABLE.iter().map(|f| f.name()))),
                );
                return false;
            }
            let _ = span;
            lower_value(cx, &[f.datatype()], value).map(|v| Expr::Assign { field: f, value: v })
        }
        ast::Item::Nat {
            kind,
            family,
            addr,
            port,
            flags,
            span,
        } => lower_nat(cx, kind, family, addr, port, flags, *span),
        ast::Item::Notrack(_) => Some(Expr::Notrack),
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
            let Some(k) = lower_key(cx, key) else {
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
            let mut sop = SetOp {
                op: opk,
                set: si,
                key: k,
                timeout_ms,
                limit: None,
                counter: false,
                ct_count: None,
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

fn lower_rule(cx: &mut Cx, handle: u64, r: &ast::Rule) -> Option<Rule> {
    let mut exprs = Vec::new();
    let mut comment = None;
    let mut ok = true;
    for it in &r.items {
        ok &= lower_item(cx, it, &mut exprs, &mut comment);
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
    ok.then(|| Rule {
        handle,
        text: r.text.clone(),
        comment,
        span: r.span,
        exprs,
    })
}

/// Jump loops and the jump depth limit (the kernel refuses both).
fn check_jumps(cx: &mut Cx, chains: &[Chain]) {
    let n = chains.len();
    let mut adj: Vec<Vec<(usize, Span)>> = vec![Vec::new(); n];
    for &(a, b, s) in &cx.edges {
        adj[a].push((b, s));
    }
    // verdict maps, named and anonymous, jump too
    for (ci, c) in chains.iter().enumerate() {
        for r in &c.rules {
            for e in &r.exprs {
                if let Expr::Vmap { map, .. } = e {
                    let set: &Set = match map {
                        SetRef::Anon(s) => s,
                        SetRef::Named(i) => &cx.sets[*i],
                    };
                    let targets: Vec<usize> = set
                        .elements
                        .iter()
                        .filter_map(|el| match el.data {
                            Some(MapValue::Verdict(Verdict::Jump(t) | Verdict::Goto(t))) => Some(t),
                            _ => None,
                        })
                        .collect();
                    for t in targets {
                        if cx.base_chains.get(t).copied().unwrap_or(false) {
                            err(
                                cx,
                                r.span,
                                format!(
                                    "a verdict map of this rule jumps to base chain '{}'",
                                    chains[t].name
                                ),
                            );
                        }
                        adj[ci].push((t, r.span));
                    }
                }
            }
        }
    }
    // colour DFS for cycles; depth by memoised longest path (on an acyclic graph)
    let mut colour = vec![0u8; n];
    let mut depth = vec![0usize; n];
    let mut reported = false;
    fn dfs(
        v: usize,
        adj: &[Vec<(usize, Span)>],
        colour: &mut [u8],
        depth: &mut [usize],
        path: &mut Vec<usize>,
        out: &mut Option<(Span, Vec<usize>)>,
    ) {
        colour[v] = 1;
        path.push(v);
        let mut d = 0;
        for &(w, s) in &adj[v] {
            if colour[w] == 1 {
                if out.is_none() {
                    let start = path.iter().position(|&x| x == w).unwrap_or(0);
                    let mut cyc = path[start..].to_vec();
                    cyc.push(w);
                    *out = Some((s, cyc));
                }
                continue;
            }
            if colour[w] == 0 {
                dfs(w, adj, colour, depth, path, out);
            }
            d = d.max(depth[w] + 1);
        }
        depth[v] = d;
        path.pop();
        colour[v] = 2;
    }
    for v in 0..n {
        if colour[v] == 0 {
            let mut found = None;
            dfs(
                v,
                &adj,
                &mut colour,
                &mut depth,
                &mut Vec::new(),
                &mut found,
            );
            if let Some((s, cyc)) = found {
                if !reported {
                    let names: Vec<&str> = cyc.iter().map(|&i| chains[i].name.as_str()).collect();
                    err(cx, s, format!("jump loop: {}", names.join(" -> ")));
                    reported = true;
                }
            }
        }
    }
    if !reported {
        for (ci, c) in chains.iter().enumerate() {
            if c.base.is_some() && depth[ci] > MAX_JUMP_DEPTH {
                err(
                    cx,
                    c.span,
                    format!(
                        "chain '{}' jumps {} chains deep; the limit is {MAX_JUMP_DEPTH}",
                        c.name, depth[ci]
                    ),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::load_str;

    fn errors(s: &str) -> Vec<String> {
        match load_str("t.nft", s) {
            Ok(_) => vec![],
            Err((_, d)) => d.into_iter().map(|d| d.message).collect(),
        }
    }

    #[test]
    fn good_ruleset_checks() {
        let r = load_str(
            "t.nft",
            "table inet f {\n set blk { type ipv4_addr; flags interval; elements = { 198.18.0.0/16, 198.19.1.1 } }\n map svc { type inet_service : verdict; elements = { 22 : jump ssh, 80 : accept } }\n counter hits { }\n flowtable ft { hook ingress priority 0; devices = { veth0, veth1 }; }\n chain fwd { type filter hook forward priority filter; policy drop;\n  ip saddr @blk counter name hits drop\n  ct state established,related flow add @ft accept\n  tcp dport vmap @svc\n  meta l4proto udp udp dport 53 limit rate 10/second accept\n }\n chain ssh { ip saddr 198.18.0.0/15 accept; return }\n chain pre { type nat hook prerouting priority dstnat; dnat ip to jhash ip saddr mod 2 map { 0 : 198.18.1.1, 1 : 198.18.1.2 } }\n chain post { type nat hook postrouting priority srcnat; oifname \"wan*\" masquerade }\n}\n",
        );
        let (rs, _) = r
            .map_err(|(sm, d)| crate::diag::render_all(&d, &sm))
            .unwrap();
        assert_eq!(rs.summary().rules, 8);
        assert!(rs.uses_state());
    }

    #[test]
    fn family_and_hook_errors() {
        assert!(
            errors("table ip6 t { chain c { ip saddr 1.2.3.4 accept } }")[0]
                .contains("can never match")
        );
        assert!(
            errors("table ip t { chain c { type nat hook forward priority 0; } }")[0]
                .contains("nat chain cannot hook forward")
        );
        assert!(
            errors("table netdev t { chain c { type filter hook forward priority 0; } }")[0]
                .contains("does not exist")
        );
        assert!(
            errors("table netdev t { chain c { type filter hook ingress priority 0; } }")[0]
                .contains("needs a device")
        );
        assert!(errors(
            "table ip t { chain c { type filter hook forward priority 0; dnat to 1.2.3.4 } }"
        )[0]
        .contains("only allowed in nat chains"));
    }

    #[test]
    fn type_errors() {
        assert!(
            errors("table ip t { chain c { tcp dport 70000 accept } }")[0].contains("too large")
        );
        assert!(
            errors("table ip t { set s { type ipv4_addr; elements = { 1.2.3.0/24 } } }")[0]
                .contains("range or prefix")
        );
        assert!(
            errors("table ip t { set s { type ipv4_addr; elements = { 22 } } }")[0]
                .contains("not an IPv4")
        );
        assert!(errors(
            "table ip t { set s { type inet_service; } chain c { ip saddr @s accept } }"
        )[0]
        .contains("holds inet_service"));
        assert!(errors("table ip t { chain c { ip saddr @nope accept } }")[0].contains("no set"));
        assert!(errors(
            "table ip t { map m { type ipv4_addr : verdict; elements = { 1.2.3.4 : 5.6.7.8 } } }"
        )[0]
        .contains("holds verdicts"));
        assert!(errors("table ip t { chain c { ip frob 1 } }")[0].contains("unknown selector"));
    }

    #[test]
    fn jump_errors() {
        assert!(
            errors("table ip t { chain a { jump b } chain b { jump a } }")[0]
                .contains("jump loop: a -> b -> a")
        );
        assert!(errors("table ip t { chain a { jump nope } }")[0].contains("no chain"));
        assert!(errors(
            "table ip t { chain b { type filter hook input priority 0; } chain a { jump b } }"
        )[0]
        .contains("base chain"));
        assert!(errors("table ip t { chain a { accept counter } }")[0].contains("follow a verdict"));
        let mut deep = String::from(
            "table ip t { chain base { type filter hook input priority 0; jump c0 }\n",
        );
        for i in 0..20 {
            deep.push_str(&format!("chain c{i} {{ jump c{} }}\n", i + 1));
        }
        deep.push_str("chain c20 { accept } }\n");
        assert!(errors(&deep)[0].contains("deep"));
    }
}
