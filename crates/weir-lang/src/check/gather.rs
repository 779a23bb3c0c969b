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
    /// The last table handle given (the kernel numbers tables per namespace, never again).
    table_handles: u64,
}

pub(super) struct TableAcc<'a> {
    pub(super) family: Family,
    pub(super) name: String,
    pub(super) span: Span,
    pub(super) handle: u64,
    pub(super) chains: Vec<ChainAcc<'a>>,
    pub(super) sets: Vec<(&'a ast::SetDecl, Elems<'a>)>,
    pub(super) set_handles: Vec<u64>,
    pub(super) flowtables: Vec<&'a ast::FlowtableDecl>,
    pub(super) flowtable_handles: Vec<u64>,
    pub(super) objs: Vec<&'a ast::ObjDecl>,
    pub(super) obj_handles: Vec<u64>,
    /// `flags dormant`: the table's chains do not run.
    pub(super) dormant: bool,
    /// The table's flags and comment, as declared (for the listing).
    pub(super) flags: Vec<String>,
    pub(super) comment: Option<String>,
    /// The last handle given in the table: chains, sets, flowtables, objects and rules
    /// share it, as the kernel's `table->hgenerator`.
    next_handle: u64,
}

/// A set's elements in the order they came, found by key (sets of a million elements are
/// gathered again at every batch).
#[derive(Default)]
pub(super) struct Elems<'a> {
    pub(super) list: Vec<&'a ast::Elem>,
    by_key: std::collections::HashMap<String, usize>,
}

impl<'a> Elems<'a> {
    fn get(&self, k: &str) -> Option<&'a ast::Elem> {
        self.by_key.get(k).map(|&i| self.list[i])
    }
    fn push(&mut self, k: String, e: &'a ast::Elem) {
        self.by_key.insert(k, self.list.len());
        self.list.push(e);
    }
    fn clear(&mut self) {
        self.list.clear();
        self.by_key.clear();
    }
    /// Remove the elements with these keys; the keys not there are returned.
    fn remove<'b>(&mut self, keys: &[(String, &'b ast::Elem)]) -> Vec<&'b ast::Elem> {
        let mut gone = std::collections::HashSet::new();
        let mut missing = Vec::new();
        for (k, e) in keys {
            match self.by_key.remove(k) {
                Some(i) => {
                    gone.insert(i);
                }
                None => missing.push(*e),
            }
        }
        if !gone.is_empty() {
            let mut i = 0;
            self.list.retain(|_| {
                i += 1;
                !gone.contains(&(i - 1))
            });
            self.by_key = self
                .list
                .iter()
                .enumerate()
                .map(|(i, e)| (key_text(&e.key), i))
                .collect();
        }
        missing
    }
}

pub(super) struct ChainAcc<'a> {
    pub(super) name: String,
    pub(super) span: Span,
    pub(super) handle: u64,
    pub(super) hook: Option<&'a ast::HookSpec>,
    pub(super) policy: Option<&'a ast::Ident>,
    pub(super) comment: Option<&'a str>,
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

/// What an `add` names is there already: refused by `create` (nft: File exists).
fn exists(diags: &mut Vec<Diagnostic>, span: Span, what: String) {
    diags.push(
        Diagnostic::error(
            span,
            format!("File exists: {what} is there already (create refuses it)"),
        )
        .note("`add` leaves what is there as it is; `create` wants it new"),
    );
}

/// What a `delete` names is not there (nft: No such file or directory); `destroy` says
/// nothing.
fn missing(diags: &mut Vec<Diagnostic>, destroy: bool, span: Span, what: String) {
    if !destroy {
        diags.push(Diagnostic::error(span, format!("no {what}")));
    }
}

/// The name of an `ident` without its span (for comparing declarations).
fn names(v: &[ast::Ident]) -> Vec<&str> {
    v.iter().map(|i| i.name.as_str()).collect()
}

/// A hook as declared, without spans: a chain declared again must name the same type, hook
/// and device (its priority may be written another way: `filter` or `0`).
fn hook_key(h: &ast::HookSpec) -> String {
    format!(
        "{} {} {:?}",
        h.ty.name,
        h.hook.name,
        h.device.as_ref().map(key_text),
    )
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
        self.table_handles += 1;
        self.tables.push(TableAcc {
            family,
            name: name.name.clone(),
            span: name.span,
            handle: self.table_handles,
            chains: Vec::new(),
            sets: Vec::new(),
            set_handles: Vec::new(),
            flowtables: Vec::new(),
            flowtable_handles: Vec::new(),
            objs: Vec::new(),
            obj_handles: Vec::new(),
            dormant: false,
            flags: Vec::new(),
            comment: None,
            next_handle: 0,
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

    /// The table a command names, which must be there.
    fn table_mut(
        &mut self,
        family: &Option<ast::Ident>,
        table: &ast::Ident,
        diags: &mut Vec<Diagnostic>,
    ) -> Option<&mut TableAcc<'a>> {
        let fam = family_of(family, diags);
        let ti = self.find_table(fam, table, diags)?;
        Some(&mut self.tables[ti])
    }

    /// `create ...`: refused when what it names is there (else it runs as `add`).
    fn create_conflict(&self, c: &ast::Command, diags: &mut Vec<Diagnostic>) -> bool {
        let mut d = Vec::new();
        let find = |family: &Option<ast::Ident>, name: &ast::Ident, d: &mut Vec<Diagnostic>| {
            let fam = family_of(family, d);
            self.tables
                .iter()
                .find(|t| t.family == fam && t.name == name.name)
        };
        let conflict = match c {
            ast::Command::Table { family, name, .. } => {
                find(family, name, &mut d).map(|t| format!("table {} {}", t.family.name(), t.name))
            }
            ast::Command::AddChain {
                family,
                table,
                chain,
            } => find(family, table, &mut d)
                .filter(|t| t.chains.iter().any(|c| c.name == chain.name.name))
                .map(|_| format!("chain '{}'", chain.name.name)),
            ast::Command::AddSet { family, table, set } => find(family, table, &mut d)
                .filter(|t| t.sets.iter().any(|(s, _)| s.name.name == set.name.name))
                .map(|_| format!("set '{}'", set.name.name)),
            ast::Command::AddElement {
                family,
                table,
                set,
                elements,
                ..
            } => find(family, table, &mut d).and_then(|t| {
                let (_, have) = t.sets.iter().find(|(s, _)| s.name.name == set.name)?;
                elements.iter().find_map(|e| {
                    let k = key_text(&e.key);
                    have.get(&k)
                        .map(|_| format!("element {k} in set '{}'", set.name))
                })
            }),
            ast::Command::AddItem {
                family,
                table,
                item,
                ..
            } => find(family, table, &mut d).and_then(|t| match item {
                ast::TableItem::Obj(o) => t
                    .objs
                    .iter()
                    .any(|x| x.kind.name == o.kind.name && x.name.name == o.name.name)
                    .then(|| format!("{} '{}'", o.kind.name, o.name.name)),
                ast::TableItem::Flowtable(f) => t
                    .flowtables
                    .iter()
                    .any(|x| x.name.name == f.name.name)
                    .then(|| format!("flowtable '{}'", f.name.name)),
                _ => None,
            }),
            _ => None,
        };
        match conflict {
            Some(what) => {
                exists(diags, command_span(c), what);
                true
            }
            None => false,
        }
    }

    pub(super) fn collect(&mut self, file: &'a ast::File, diags: &mut Vec<Diagnostic>) {
        for c in &file.commands {
            self.command(c, diags);
        }
    }

    fn command(&mut self, c: &'a ast::Command, diags: &mut Vec<Diagnostic>) {
        match c {
            ast::Command::Create(inner, _) => {
                if !self.create_conflict(inner, diags) {
                    self.command(inner, diags);
                }
            }
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
            ast::Command::AddItem {
                family,
                table,
                item,
                ..
            } => {
                let fam = family_of(family, diags);
                if let Some(ti) = self.find_table(fam, table, diags) {
                    self.tables[ti].add_item(item, diags);
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
                let Some(t) = self.table_mut(family, table, diags) else {
                    return;
                };
                let Some(ci) = t.chains.iter().position(|c| c.name == chain.name) else {
                    diags.push(Diagnostic::error(
                        chain.span,
                        format!("no chain '{}' in table {}", chain.name, t.name),
                    ));
                    return;
                };
                let rules = &t.chains[ci].rules;
                let at = match position {
                    ast::Position::End => rules.len(),
                    ast::Position::Start => 0,
                    ast::Position::Handle(v, after) => {
                        let Some(hv) = val_u64(v) else {
                            diags.push(Diagnostic::error(
                                v.span(),
                                "expected a rule handle (a number)",
                            ));
                            return;
                        };
                        match rules.iter().position(|(rh, _)| *rh == hv) {
                            Some(p) => p + *after as usize,
                            None => {
                                diags.push(Diagnostic::error(
                                    v.span(),
                                    format!("no rule with handle {hv} in chain {}", chain.name),
                                ));
                                return;
                            }
                        }
                    }
                    ast::Position::Index(v, after) => {
                        let Some(iv) = val_u64(v) else {
                            diags.push(Diagnostic::error(
                                v.span(),
                                "expected a rule index (a number)",
                            ));
                            return;
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
                            return;
                        }
                        iv + *after as usize
                    }
                };
                let h = t.handle();
                t.chains[ci].rules.insert(at, (h, rule));
            }
            ast::Command::ReplaceRule {
                family,
                table,
                chain,
                handle,
                rule,
            } => {
                let Some(t) = self.table_mut(family, table, diags) else {
                    return;
                };
                let Some(c) = t.chains.iter_mut().find(|c| c.name == chain.name) else {
                    diags.push(Diagnostic::error(
                        chain.span,
                        format!("no chain '{}' in table {}", chain.name, t.name),
                    ));
                    return;
                };
                let hv = val_u64(handle);
                match c.rules.iter_mut().find(|(h, _)| Some(*h) == hv) {
                    // (the kernel gives the new rule the old one's place, and a new handle)
                    Some(r) => r.1 = rule,
                    None => diags.push(Diagnostic::error(
                        handle.span(),
                        format!("no rule with that handle in chain {}", chain.name),
                    )),
                }
            }
            ast::Command::Rename {
                family,
                table,
                chain,
                to,
                ..
            } => {
                let Some(t) = self.table_mut(family, table, diags) else {
                    return;
                };
                if t.chains.iter().any(|c| c.name == to.name) {
                    exists(diags, to.span, format!("chain '{}'", to.name));
                    return;
                }
                match t.chains.iter_mut().find(|c| c.name == chain.name) {
                    Some(c) => c.name = to.name.clone(),
                    None => diags.push(Diagnostic::error(
                        chain.span,
                        format!("no chain '{}'", chain.name),
                    )),
                }
            }
            ast::Command::AddElement {
                family,
                table,
                set,
                elements,
                ..
            } => {
                let Some(t) = self.table_mut(family, table, diags) else {
                    return;
                };
                match t.sets.iter_mut().find(|(d, _)| d.name.name == set.name) {
                    Some((_, have)) => add_elements(have, elements, diags),
                    None => diags.push(Diagnostic::error(
                        set.span,
                        format!("no set '{}' in table {}", set.name, t.name),
                    )),
                }
            }
            ast::Command::Query { .. } => {}
            ast::Command::ClientGone(_) => {
                self.tables.retain(|t| {
                    !t.flags.iter().any(|f| f == "owner") || t.flags.iter().any(|f| f == "persist")
                });
                for t in &mut self.tables {
                    t.flags.retain(|f| f != "owner");
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
                let Some(t) = self.table_mut(family, table, diags) else {
                    return;
                };
                match (what.name.as_str(), name) {
                    ("table", _) => t.chains.iter_mut().for_each(|c| c.rules.clear()),
                    ("chain", Some(n)) => match t.chains.iter_mut().find(|c| c.name == n.name) {
                        Some(c) => c.rules.clear(),
                        None => {
                            diags.push(Diagnostic::error(n.span, format!("no chain '{}'", n.name)))
                        }
                    },
                    ("set" | "map", Some(n)) => {
                        let want_map = what.name == "map";
                        match t.sets.iter_mut().find(|(d, _)| d.name.name == n.name) {
                            // (every element, declared or added)
                            Some((d, elems)) if d.is_map == want_map => elems.clear(),
                            _ => diags.push(Diagnostic::error(
                                n.span,
                                format!("no {} '{}'", what.name, n.name),
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
                destroy,
                span,
            } => self.delete(
                what,
                family,
                table,
                name.as_ref(),
                handle.as_ref(),
                elements,
                *destroy,
                *span,
                diags,
            ),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn delete(
        &mut self,
        what: &ast::Ident,
        family: &Option<ast::Ident>,
        table: &ast::Ident,
        name: Option<&ast::Ident>,
        handle: Option<&Val>,
        elements: &[ast::Elem],
        destroy: bool,
        span: Span,
        diags: &mut Vec<Diagnostic>,
    ) {
        let fam = family_of(family, diags);
        let hv = handle.and_then(val_u64);
        if handle.is_some() && hv.is_none() {
            diags.push(Diagnostic::error(span, "expected a handle (a number)"));
            return;
        }
        if what.name == "table" {
            let found = self.tables.iter().position(|t| {
                (family.is_none() || t.family == fam)
                    && match hv {
                        Some(h) => t.handle == h,
                        None => t.family == fam && t.name == table.name,
                    }
            });
            match found {
                Some(i) => {
                    self.tables.remove(i);
                }
                None => missing(
                    diags,
                    destroy,
                    span,
                    format!("table '{} {}'", fam.name(), table.name),
                ),
            }
            return;
        }
        let Some(ti) = self
            .tables
            .iter()
            .position(|t| t.family == fam && t.name == table.name)
        else {
            missing(
                diags,
                destroy,
                table.span,
                format!("table '{} {}'", fam.name(), table.name),
            );
            return;
        };
        let t = &mut self.tables[ti];
        // what the command names: by name, or by handle
        let named = |n: &str, h: u64| match (name, hv) {
            (_, Some(want)) => h == want,
            (Some(x), None) => x.name == n,
            (None, None) => false,
        };
        let label = || match (name, hv) {
            (Some(n), _) => format!("{} '{}'", what.name, n.name),
            (None, Some(h)) => format!("{} with handle {h}", what.name),
            _ => what.name.clone(),
        };
        match what.name.as_str() {
            "chain" => match t.chains.iter().position(|c| named(&c.name, c.handle)) {
                Some(i) => {
                    t.chains.remove(i);
                }
                None => missing(diags, destroy, span, label()),
            },
            "set" | "map" => {
                // (`delete set` removes a map too: one kind of object in the kernel)
                match (0..t.sets.len()).find(|&i| named(&t.sets[i].0.name.name, t.set_handles[i])) {
                    Some(i) => {
                        t.sets.remove(i);
                        t.set_handles.remove(i);
                    }
                    None => missing(diags, destroy, span, label()),
                }
            }
            "flowtable" => match (0..t.flowtables.len())
                .find(|&i| named(&t.flowtables[i].name.name, t.flowtable_handles[i]))
            {
                Some(i) => {
                    t.flowtables.remove(i);
                    t.flowtable_handles.remove(i);
                }
                None => missing(diags, destroy, span, label()),
            },
            "element" => {
                let Some(n) = name else {
                    diags.push(Diagnostic::error(span, "delete element needs a set name"));
                    return;
                };
                let Some((_, elems)) = t.sets.iter_mut().find(|(d, _)| d.name.name == n.name)
                else {
                    missing(diags, destroy, n.span, format!("set '{}'", n.name));
                    return;
                };
                // the elements with these keys (nft: No such file or directory when one is
                // not in the set; destroy: none asked)
                let keys: Vec<(String, &ast::Elem)> =
                    elements.iter().map(|e| (key_text(&e.key), e)).collect();
                for e in elems.remove(&keys) {
                    missing(
                        diags,
                        destroy,
                        e.span,
                        format!("element {} in set '{}'", key_text(&e.key), n.name),
                    );
                }
            }
            "rule" => {
                let (Some(n), Some(h)) = (name, hv) else {
                    diags.push(Diagnostic::error(
                        span,
                        "delete rule needs its chain and handle: delete rule TABLE CHAIN handle N",
                    ));
                    return;
                };
                match t.chains.iter_mut().find(|c| c.name == n.name) {
                    Some(c) => {
                        let before = c.rules.len();
                        c.rules.retain(|(rh, _)| *rh != h);
                        if c.rules.len() == before {
                            missing(
                                diags,
                                destroy,
                                handle.map_or(span, |v| v.span()),
                                format!("rule with handle {h} in chain '{}'", n.name),
                            );
                        }
                    }
                    None => missing(diags, destroy, n.span, format!("chain '{}'", n.name)),
                }
            }
            // named objects: `delete counter t c`, `delete ct helper t h`, by handle too
            kind => {
                let kind = match kind {
                    "counters" => "counter",
                    "quotas" => "quota",
                    k => k,
                };
                match (0..t.objs.len()).find(|&i| {
                    t.objs[i].kind.name == kind && named(&t.objs[i].name.name, t.obj_handles[i])
                }) {
                    Some(i) => {
                        t.objs.remove(i);
                        t.obj_handles.remove(i);
                    }
                    None => missing(diags, destroy, span, label()),
                }
            }
        }
    }
}

/// A command's place in the source (for messages about the whole command).
fn command_span(c: &ast::Command) -> Span {
    match c {
        ast::Command::Table { span, .. }
        | ast::Command::AddElement { span, .. }
        | ast::Command::AddItem { span, .. }
        | ast::Command::Flush { span, .. }
        | ast::Command::Delete { span, .. }
        | ast::Command::Rename { span, .. }
        | ast::Command::Query { span, .. }
        | ast::Command::Create(_, span)
        | ast::Command::ClientGone(span)
        | ast::Command::FlushRuleset(span) => *span,
        ast::Command::AddChain { chain, .. } => chain.span,
        ast::Command::AddSet { set, .. } => set.span,
        ast::Command::AddRule { rule, .. } | ast::Command::ReplaceRule { rule, .. } => rule.span,
    }
}

/// `add element`: elements already there stay (a map's element with other data is refused,
/// as the kernel's EEXIST).
fn add_elements<'a>(have: &mut Elems<'a>, elements: &'a [ast::Elem], diags: &mut Vec<Diagnostic>) {
    for e in elements {
        let k = key_text(&e.key);
        match have.get(&k) {
            Some(old) => {
                let data = |x: &ast::Elem| x.data.as_ref().map(data_text);
                if data(old) != data(e) {
                    diags.push(Diagnostic::error(
                        e.span,
                        format!("element {k} is in the map already, with other data"),
                    ));
                }
            }
            None => have.push(k, e),
        }
    }
}

/// A map element's data as text, spans left out.
fn data_text(d: &ast::MapData) -> String {
    match d {
        ast::MapData::Value(v) => key_text(v),
        ast::MapData::Verdict(v) => match v {
            ast::VerdictAst::Accept(_) => "accept".into(),
            ast::VerdictAst::Drop(_) => "drop".into(),
            ast::VerdictAst::Continue(_) => "continue".into(),
            ast::VerdictAst::Return(_) => "return".into(),
            ast::VerdictAst::Jump(c, _) => format!("jump {}", c.name),
            ast::VerdictAst::Goto(c, _) => format!("goto {}", c.name),
        },
    }
}

impl<'a> TableAcc<'a> {
    /// The table's next handle (chains, sets, flowtables, objects and rules share them).
    fn handle(&mut self) -> u64 {
        self.next_handle += 1;
        self.next_handle
    }

    fn add_item(&mut self, it: &'a ast::TableItem, diags: &mut Vec<Diagnostic>) {
        match it {
            ast::TableItem::Chain(c) => self.add_chain(c, diags),
            ast::TableItem::Set(s) => self.add_set(s, diags),
            ast::TableItem::Flowtable(f) => {
                // declared again: the kernel adds the new devices to the one there
                if !self.flowtables.iter().any(|x| x.name.name == f.name.name) {
                    let h = self.handle();
                    self.flowtables.push(f);
                    self.flowtable_handles.push(h);
                }
            }
            ast::TableItem::Comment(c, _) => self.comment = Some(c.clone()),
            ast::TableItem::Flags(fl, _) => {
                for f in fl {
                    match f.name.as_str() {
                        "dormant" | "owner" | "persist" => {
                            if f.name == "dormant" {
                                self.dormant = true;
                            }
                            if !self.flags.contains(&f.name) {
                                self.flags.push(f.name.clone());
                            }
                        }
                        _ => diags.push(Diagnostic::error(
                            f.span,
                            format!("unknown table flag '{}' (dormant, owner, persist)", f.name),
                        )),
                    }
                }
            }
            ast::TableItem::Obj(o) => {
                // declared again: the new declaration updates it (a quota's limit...), as
                // the kernel's object update
                match self
                    .objs
                    .iter()
                    .position(|x| x.name.name == o.name.name && x.kind.name == o.kind.name)
                {
                    Some(i) => self.objs[i] = o,
                    None => {
                        let h = self.handle();
                        self.objs.push(o);
                        self.obj_handles.push(h);
                    }
                }
            }
        }
    }

    fn add_chain(&mut self, c: &'a ast::ChainDecl, diags: &mut Vec<Diagnostic>) {
        let ci = match self.chains.iter().position(|x| x.name == c.name.name) {
            Some(i) => i,
            None => {
                let handle = self.handle();
                self.chains.push(ChainAcc {
                    name: c.name.name.clone(),
                    span: c.name.span,
                    handle,
                    hook: None,
                    policy: None,
                    comment: None,
                    rules: Vec::new(),
                });
                self.chains.len() - 1
            }
        };
        if let Some(h) = &c.hook {
            let ch = &mut self.chains[ci];
            match ch.hook {
                Some(old) if hook_key(old) != hook_key(h) => diags.push(Diagnostic::error(
                    h.span,
                    format!("chain '{}' already has another hook", c.name.name),
                )),
                Some(_) => {}
                None if !ch.rules.is_empty() => diags.push(Diagnostic::error(
                    h.span,
                    format!(
                        "chain '{}' is a regular chain: it cannot become a base chain",
                        c.name.name
                    ),
                )),
                None => ch.hook = Some(h),
            }
        }
        if let Some(p) = &c.policy {
            self.chains[ci].policy = Some(p);
        }
        if let Some(cm) = &c.comment {
            self.chains[ci].comment = Some(cm.as_str());
        }
        for r in &c.rules {
            let h = self.handle();
            self.chains[ci].rules.push((h, r));
        }
    }

    fn add_set(&mut self, s: &'a ast::SetDecl, diags: &mut Vec<Diagnostic>) {
        if let Some(i) = self
            .sets
            .iter()
            .position(|(d, _)| d.name.name == s.name.name)
        {
            // declared again: the same set (its elements added), or refused (nft: File
            // exists)
            let d = self.sets[i].0;
            // (`dynamic` aside: the kernel's set has it once a rule updates it from the
            // packet path, so its own listing declares it)
            fn flags(x: &ast::SetDecl) -> Vec<&str> {
                let mut f = names(&x.flags);
                f.retain(|n| *n != "dynamic");
                f.sort();
                f
            }
            let same = d.is_map == s.is_map
                && names(&d.key_types) == names(&s.key_types)
                && names(&d.data_types) == names(&s.data_types)
                && d.key_typeof.len() == s.key_typeof.len()
                && flags(d) == flags(s);
            if !same {
                diags.push(Diagnostic::error(
                    s.name.span,
                    format!(
                        "{} '{}' exists already, declared otherwise",
                        if d.is_map { "map" } else { "set" },
                        s.name.name
                    ),
                ));
                return;
            }
            add_elements(&mut self.sets[i].1, &s.elements, diags);
            return;
        }
        let h = self.handle();
        let mut elems = Elems::default();
        add_elements(&mut elems, &s.elements, diags);
        self.sets.push((s, elems));
        self.set_handles.push(h);
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
pub(crate) fn key_text(v: &Val) -> String {
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
