//! Phase 1: gather the commands into tables (tables may be reopened, rules added later).
//!
//! `table`, `add` (chains, sets, rules, elements), `flush` and `delete` commands are collected
//! per table and chain, in file order, before anything is lowered, so a rule may name a set or
//! chain declared further down.

use crate::ast::{self, Val};
use crate::diag::Diagnostic;
use crate::ir::*;
use crate::source::Span;
use crate::values;

#[derive(Default)]
pub(super) struct Accum<'a> {
    pub(super) tables: Vec<TableAcc<'a>>,
}

pub(super) struct TableAcc<'a> {
    pub(super) family: Family,
    pub(super) name: String,
    pub(super) span: Span,
    pub(super) chains: Vec<ChainAcc<'a>>,
    pub(super) sets: Vec<(&'a ast::SetDecl, Vec<&'a ast::Elem>)>,
    pub(super) flowtables: Vec<&'a ast::FlowtableDecl>,
    pub(super) objs: Vec<&'a ast::ObjDecl>,
    /// `flags dormant`: the table's chains do not run.
    pub(super) dormant: bool,
    next_handle: u64,
}

pub(super) struct ChainAcc<'a> {
    pub(super) name: String,
    pub(super) span: Span,
    pub(super) hook: Option<&'a ast::HookSpec>,
    pub(super) policy: Option<&'a ast::Ident>,
    pub(super) rules: Vec<(u64, &'a ast::Rule)>,
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
            dormant: false,
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

    pub(super) fn collect(&mut self, file: &'a ast::File, diags: &mut Vec<Diagnostic>) {
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
                                // (every element, declared or added)
                                Some((_, elems)) => elems.clear(),
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
                    elements,
                    span,
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
                        ("set" | "map", Some(n), _) => {
                            let t = &mut self.tables[ti];
                            let before = t.sets.len();
                            t.sets.retain(|(d, _)| d.name.name != n.name);
                            if t.sets.len() == before {
                                diags.push(Diagnostic::error(n.span, format!("no set '{}'", n.name)));
                            }
                        }
                        // the elements with these keys (nft: No such file or directory when
                        // one is not in the set)
                        ("element", Some(n), _) => {
                            let t = &mut self.tables[ti];
                            let Some((_, elems)) = t.sets.iter_mut().find(|(d, _)| d.name.name == n.name) else {
                                diags.push(Diagnostic::error(n.span, format!("no set '{}'", n.name)));
                                continue;
                            };
                            for e in elements {
                                let k = key_text(&e.key);
                                match elems.iter().position(|x| key_text(&x.key) == k) {
                                    Some(i) => {
                                        elems.remove(i);
                                    }
                                    None => diags.push(Diagnostic::error(
                                        e.span,
                                        format!("no element {k} in set '{}'", n.name),
                                    )),
                                }
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
                            "only 'delete table|chain|set|map|element' and 'delete rule ... handle N' are supported in ruleset files",
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
            ast::TableItem::Comment(..) => {}
            ast::TableItem::Flags(fl, _) => {
                for f in fl {
                    match f.name.as_str() {
                        "dormant" => self.dormant = true,
                        "owner" | "persist" => {}
                        _ => diags.push(Diagnostic::error(
                            f.span,
                            format!("unknown table flag '{}' (dormant, owner, persist)", f.name),
                        )),
                    }
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
        self.sets.push((s, s.elements.iter().collect()));
    }
}

pub(super) fn val_u64(v: &Val) -> Option<u64> {
    match v {
        Val::Word(w, _) => values::parse_number(w).and_then(|n| u64::try_from(n).ok()),
        _ => None,
    }
}

/// An element's key as text, spans left out (`delete element` finds the elements to remove
/// by it).
pub(super) fn key_text(v: &Val) -> String {
    match v {
        Val::Word(w, _) | Val::Str(w, _) => w.clone(),
        Val::Range(a, b) => format!("{}-{}", key_text(a), key_text(b)),
        Val::Prefix(a, b) => format!("{}/{}", key_text(a), key_text(b)),
        Val::List(v, _) => v.iter().map(key_text).collect::<Vec<_>>().join(","),
        Val::Concat(v, _) => v.iter().map(key_text).collect::<Vec<_>>().join(" . "),
        Val::Set(v, _) => format!(
            "{{ {} }}",
            v.iter()
                .map(|e| key_text(&e.key))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}
