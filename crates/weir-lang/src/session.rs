//! A running ruleset changed one batch at a time, as nft's transactions change the kernel's
//! (`nft -f FILE`, `nft add element ...`): the file the ruleset started from and every batch
//! applied since are checked together, in order, so a batch may name what an earlier one
//! made, rules keep their handles, and a batch that fails leaves the session as it was.
//!
//! A session replays its commands rather than editing a checked ruleset: the result is the
//! same [`ir::Ruleset`] a file with all of them would give, with the same messages
//! (`file:line:column` in the batch that is wrong).

use crate::diag::{self, Diagnostic};
use crate::{ast, check, ir, parser, LoadError, SourceMap};

/// The commands a running ruleset was made from.
#[derive(Clone, Debug)]
pub struct Session {
    sources: SourceMap,
    file: ast::File,
    /// Batches applied since the session started (or was compacted).
    pub batches: usize,
    /// The last batch's queries (`list ...`, `get element ...`), each as its words: the
    /// caller answers them once the batch is in.
    pub queries: Vec<Vec<String>>,
    /// Whether the last batch changes anything (it is not only queries).
    pub changed: bool,
    /// What the optimizer merged in the last batch (`nft -o`), as nft reports it.
    pub merged: String,
}

impl Session {
    /// A session from a ruleset file (nft syntax or nft's JSON syntax).
    pub fn load_file(
        path: &std::path::Path,
    ) -> Result<(Session, ir::Ruleset, Vec<Diagnostic>), LoadError> {
        let (rs, file, diags) = crate::load_file_ast(path)?;
        let s = Session {
            sources: rs.sources.clone(),
            file,
            batches: 0,
            queries: Vec::new(),
            changed: true,
            merged: String::new(),
        };
        Ok((s, rs, diags))
    }

    /// A session from ruleset text named `name`.
    pub fn load_str(
        name: &str,
        text: &str,
    ) -> Result<(Session, ir::Ruleset, Vec<Diagnostic>), LoadError> {
        let (rs, file, diags) = crate::load_str_ast(name, text)?;
        let s = Session {
            sources: rs.sources.clone(),
            file,
            batches: 0,
            queries: Vec::new(),
            changed: true,
            merged: String::new(),
        };
        Ok((s, rs, diags))
    }

    /// The session with batch `text` (named `name` in messages) applied after what it holds,
    /// and the ruleset that gives; the error (with every source, for the messages) when the
    /// batch does not parse or the whole does not check. `self` is unchanged either way:
    /// the caller keeps the new session only once the ruleset is running (all or nothing).
    pub fn apply(
        &self,
        name: &str,
        text: &str,
    ) -> Result<(Session, ir::Ruleset, Vec<Diagnostic>), LoadError> {
        self.apply_with(name, text, false)
    }

    /// [`Session::apply`], the batch's chains first merged by nft's optimizer when
    /// `optimize` (`nft -o`; what was merged is in the new session's `merged`).
    pub fn apply_with(
        &self,
        name: &str,
        text: &str,
        optimize: bool,
    ) -> Result<(Session, ir::Ruleset, Vec<Diagnostic>), LoadError> {
        let mut sources = self.sources.clone();
        let (mut batch, mut diags) = parser::parse_str(&mut sources, name, text);
        if diags.iter().any(|d| d.severity == diag::Severity::Error) {
            return Err((sources, diags));
        }
        let merged = if optimize {
            crate::optimize::optimize(&mut batch.commands, &sources)
        } else {
            String::new()
        };
        let changed = batch.commands.iter().any(|c| match c {
            ast::Command::Query { words, .. } => words.first().is_some_and(|w| w == "reset"),
            _ => true,
        });
        let queries = batch
            .commands
            .iter()
            .filter_map(|c| match c {
                ast::Command::Query { words, .. } => Some(words.clone()),
                _ => None,
            })
            .collect();
        let mut file = self.file.clone();
        // `reset ...`: the counters and quotas it names start again from zero
        for q in batch.commands.iter().filter_map(|c| match c {
            ast::Command::Query { words, .. } if words.first().is_some_and(|w| w == "reset") => {
                Some(words)
            }
            _ => None,
        }) {
            reset(&mut file, &q[1..]);
        }
        file.commands.extend(batch.commands);
        // (the batch's client is gone once it is in: its owned tables with it)
        if file.commands.iter().any(|c| {
            matches!(c, ast::Command::Table { items, .. }
                if items.iter().any(|i| matches!(i, ast::TableItem::Flags(f, _) if f.iter().any(|x| x.name == "owner"))))
        }) {
            file.commands.push(ast::Command::ClientGone(Default::default()));
        }
        // what came before the last `flush ruleset` is gone: not replayed again
        if let Some(i) = file
            .commands
            .iter()
            .rposition(|c| matches!(c, ast::Command::FlushRuleset(_)))
        {
            file.commands.drain(..i);
        }
        let (tables, cd) = check::check(&file);
        diags.extend(cd);
        if diags.iter().any(|d| d.severity == diag::Severity::Error) {
            return Err((sources, diags));
        }
        let rs = ir::Ruleset {
            tables,
            sources: sources.clone(),
        };
        let s = Session {
            sources,
            file,
            batches: self.batches + 1,
            queries,
            changed,
            merged,
        };
        Ok((s, rs, diags))
    }

    /// The syntax tree of every command so far (what [`crate::print::ruleset`] prints from).
    pub fn ast(&self) -> &ast::File {
        &self.file
    }

    /// A batch of only `add element` / `delete element` commands on plain named sets (not
    /// intervals, maps, timeouts, sizes or sets with statements) applied in place: the elements
    /// checked against their set's declaration alone (not the whole ruleset again), then
    /// the session and `rs` changed, and the changes returned for the engines (what
    /// fail2ban-style tools send, at a cost that does not grow with the ruleset). None when
    /// the batch is not such a batch, or is one the full path must judge (a delete of an
    /// element that is not there): the caller then applies it with [`Session::apply`].
    /// An error leaves both as they were.
    pub fn apply_elements(
        &mut self,
        rs: &mut ir::Ruleset,
        name: &str,
        text: &str,
    ) -> Option<Result<Vec<ElementEdit>, LoadError>> {
        // (parsed into the session's sources, taken out again unless the batch goes in: no
        // copy of the ruleset's text)
        let files = self.sources.files.len();
        let r = self.apply_elements_parsed(rs, name, text);
        match &r {
            Some(Ok(_)) => {
                rs.sources
                    .files
                    .extend(self.sources.files[files..].iter().cloned());
            }
            _ => self.sources.files.truncate(files),
        }
        r
    }

    fn apply_elements_parsed(
        &mut self,
        rs: &mut ir::Ruleset,
        name: &str,
        text: &str,
    ) -> Option<Result<Vec<ElementEdit>, LoadError>> {
        let (batch, diags) = parser::parse_str(&mut self.sources, name, text);
        if diags.iter().any(|d| d.severity == diag::Severity::Error) || batch.commands.is_empty() {
            return None;
        }
        // each command: (table index, set index, add, its elements lowered, the written ones)
        let mut plan: Vec<Planned> = Vec::new();
        for c in &batch.commands {
            let (family, table, set, elements, add) = match c {
                ast::Command::AddElement {
                    family,
                    table,
                    set,
                    elements,
                    ..
                } => (family, table, set, elements, true),
                ast::Command::Delete {
                    what,
                    family,
                    table,
                    name: Some(set),
                    handle: None,
                    elements,
                    destroy: false,
                    ..
                } if what.name == "element" => (family, table, set, elements, false),
                _ => return None,
            };
            let fam = family.as_ref().map_or("ip", |f| f.name.as_str());
            let ti = rs
                .tables
                .iter()
                .position(|t| t.family.name() == fam && t.name == table.name)?;
            let si = rs.tables[ti].sets.iter().position(|s| s.name == set.name)?;
            let s = &rs.tables[ti].sets[si];
            if s.is_map
                || s.interval
                || s.dynamic
                || s.timeout_ms.is_some()
                || s.size.is_some()
                || s.catchall.is_some()
                || elements.iter().any(|e| {
                    !e.options.is_empty() || matches!(&e.key, ast::Val::Word(w, _) if w == "*")
                })
            {
                return None;
            }
            let decl = self.set_decl(fam, &table.name, &set.name)?;
            if decl.counter || !decl.stmts.is_empty() || decl.auto_merge {
                return None;
            }
            // the elements checked against the declaration alone
            let mut d = decl.clone();
            d.elements.clear();
            let mini = ast::File {
                commands: vec![
                    ast::Command::Table {
                        family: family.clone(),
                        name: table.clone(),
                        items: vec![ast::TableItem::Set(d)],
                        span: table.span,
                    },
                    ast::Command::AddElement {
                        family: family.clone(),
                        table: table.clone(),
                        set: set.clone(),
                        elements: elements.clone(),
                        span: set.span,
                    },
                ],
            };
            let (tables, cd) = check::check(&mini);
            if cd.iter().any(|d| d.severity == diag::Severity::Error) {
                return Some(Err((self.sources.clone(), cd)));
            }
            let lowered = tables.first()?.sets.first()?.elements.clone();
            if lowered.len() != elements.len() {
                return None;
            }
            plan.push((ti, si, add, lowered, elements.clone()));
        }
        // every delete finds its element (else the full path says what is missing)
        let mut edits = Vec::new();
        let mut work: std::collections::HashMap<(usize, usize), Vec<ir::Element>> =
            Default::default();
        for (ti, si, add, lowered, _) in &plan {
            let cur = work
                .entry((*ti, *si))
                .or_insert_with(|| rs.tables[*ti].sets[*si].elements.clone());
            for e in lowered {
                let at = cur.iter().position(|x| x.key == e.key);
                match (add, at) {
                    (true, Some(_)) => {}
                    (true, None) => {
                        cur.push(e.clone());
                        edits.push((*ti, *si, true, e.clone()));
                    }
                    (false, Some(i)) => {
                        cur.remove(i);
                        edits.push((*ti, *si, false, e.clone()));
                    }
                    (false, None) => return None,
                }
            }
        }
        // in: the listing's written elements, the ruleset's, the history
        for (ti, si, add, _, written) in plan {
            let listed = &mut rs.tables[ti].sets[si].listed;
            for e in written {
                let k = check::gather::key_text(&e.key);
                let at = listed
                    .iter()
                    .position(|x| check::gather::key_text(&x.key) == k);
                match (add, at) {
                    (true, None) => listed.push(e),
                    (false, Some(i)) => {
                        listed.remove(i);
                    }
                    _ => {}
                }
            }
        }
        for ((ti, si), els) in work {
            rs.tables[ti].sets[si].elements = els;
        }
        self.file.commands.extend(batch.commands);
        self.batches += 1;
        self.queries.clear();
        self.changed = true;
        self.merged.clear();
        Some(Ok(edits
            .into_iter()
            .map(|(ti, si, add, element)| ElementEdit {
                family: rs.tables[ti].family,
                table: rs.tables[ti].name.clone(),
                set: rs.tables[ti].sets[si].name.clone(),
                add,
                element,
            })
            .collect()))
    }

    /// The latest declaration of a named set (a table block's, or `add set`'s).
    fn set_decl(&self, family: &str, table: &str, set: &str) -> Option<&ast::SetDecl> {
        fn fam_of(f: &Option<ast::Ident>) -> &str {
            f.as_ref().map_or("ip", |f| f.name.as_str())
        }
        self.file.commands.iter().rev().find_map(|c| match c {
            ast::Command::Table {
                family: f,
                name,
                items,
                ..
            } if fam_of(f) == family && name.name == table => items.iter().find_map(|i| match i {
                ast::TableItem::Set(d) if d.name.name == set => Some(d),
                _ => None,
            }),
            ast::Command::AddSet {
                family: f,
                table: t,
                set: d,
            } if fam_of(f) == family && t.name == table && d.name.name == set => Some(d),
            _ => None,
        })
    }
}

/// One command of an element batch: (table index, set index, add, its elements lowered,
/// the elements as written).
type Planned = (usize, usize, bool, Vec<ir::Element>, Vec<ast::Elem>);

/// An element a batch added to or deleted from a named set ([`Session::apply_elements`]):
/// what each engine does in place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ElementEdit {
    pub family: ir::Family,
    pub table: String,
    pub set: String,
    pub add: bool,
    pub element: ir::Element,
}

/// `reset WHAT [FAMILY] [TABLE [NAME]]` on the commands so far: named counters and quotas
/// (`counters`, `quotas`, `counter`, `quota`), rules' counters and quotas (`rules`, `rule`),
/// set elements' counters (`element`, `set`, `map`) back to zero.
fn reset(file: &mut ast::File, words: &[String]) {
    let Some((what, rest)) = words.split_first() else {
        return;
    };
    let fams = ["ip", "ip6", "inet", "arp", "bridge", "netdev"];
    let (fam, rest): (Option<&str>, &[String]) = match rest.first() {
        Some(f) if fams.contains(&f.as_str()) => (Some(f.as_str()), &rest[1..]),
        _ => (None, rest),
    };
    let table = rest.first().map(String::as_str);
    let name = rest.get(1).map(String::as_str);
    let ok_table = |f: &Option<ast::Ident>, t: &ast::Ident| {
        let tf = f.as_ref().map_or("ip", |i| i.name.as_str());
        fam.is_none_or(|x| x == tf) && table.is_none_or(|x| x == t.name)
    };
    let ok_name = |n: &str| name.is_none_or(|x| x == n);
    let obj_kind = match what.as_str() {
        "counters" | "counter" => Some("counter"),
        "quotas" | "quota" => Some("quota"),
        _ => None,
    };
    let rules = matches!(what.as_str(), "rules" | "rule");
    let elems = matches!(what.as_str(), "element" | "set" | "map");
    let reset_obj = |o: &mut ast::ObjDecl| {
        if obj_kind == Some(o.kind.name.as_str()) && ok_name(&o.name.name) {
            let words: Vec<&str> = o
                .body
                .iter()
                .map(|v| match v {
                    ast::Val::Word(w, _) => w.as_str(),
                    _ => "",
                })
                .collect();
            let cut = match o.kind.name.as_str() {
                "counter" => words.iter().position(|w| *w == "packets" || *w == "bytes"),
                _ => words.iter().position(|w| *w == "used"),
            };
            if let Some(i) = cut {
                o.body.truncate(i);
            }
        }
    };
    let reset_rule = |r: &mut ast::Rule| {
        for it in &mut r.items {
            match it {
                ast::Item::Counter {
                    name: None,
                    packets,
                    bytes,
                    ..
                } => (*packets, *bytes) = (None, None),
                ast::Item::Quota {
                    name: None, used, ..
                } => *used = None,
                _ => {}
            }
        }
    };
    let reset_elems = |es: &mut Vec<ast::Elem>| {
        for e in es {
            for (k, v) in &mut e.options {
                if k.name == "counter" {
                    *v = None;
                }
            }
        }
    };
    for c in &mut file.commands {
        match c {
            ast::Command::Table {
                family,
                name: t,
                items,
                ..
            } if ok_table(family, t) => {
                for it in items {
                    match it {
                        ast::TableItem::Obj(o) => reset_obj(o),
                        ast::TableItem::Chain(ch) if rules && ok_name(&ch.name.name) => {
                            ch.rules.iter_mut().for_each(reset_rule)
                        }
                        ast::TableItem::Set(st) if elems && ok_name(&st.name.name) => {
                            reset_elems(&mut st.elements)
                        }
                        _ => {}
                    }
                }
            }
            ast::Command::AddItem {
                family,
                table: t,
                item: ast::TableItem::Obj(o),
                ..
            } if ok_table(family, t) => reset_obj(o),
            ast::Command::AddChain {
                family,
                table: t,
                chain,
            } if rules && ok_table(family, t) && ok_name(&chain.name.name) => {
                chain.rules.iter_mut().for_each(reset_rule)
            }
            ast::Command::AddRule {
                family,
                table: t,
                chain,
                rule,
                ..
            } if rules && ok_table(family, t) && ok_name(&chain.name) => reset_rule(rule),
            ast::Command::AddSet {
                family,
                table: t,
                set,
            } if elems && ok_table(family, t) && ok_name(&set.name.name) => {
                reset_elems(&mut set.elements)
            }
            ast::Command::AddElement {
                family,
                table: t,
                set,
                elements,
                ..
            } if elems && ok_table(family, t) && ok_name(&set.name) => reset_elems(elements),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(rs: &ir::Ruleset) -> Vec<String> {
        rs.tables
            .iter()
            .flat_map(|t| &t.chains)
            .flat_map(|c| &c.rules)
            .map(|r| format!("{} {}", r.handle, r.text))
            .collect()
    }

    /// Batches apply in order after the file (a later one names what an earlier one made,
    /// rules keep their handles); a failing batch names its own source and leaves the
    /// session as it was.
    #[test]
    fn batches_apply_in_order_all_or_nothing() {
        let (s0, rs0, _) = Session::load_str(
            "rules.nft",
            "table inet t {\n set s { type ipv4_addr; }\n chain c {\n  ip saddr @s drop\n }\n}\n",
        )
        .unwrap();
        let first = rules(&rs0);
        let (s1, rs1, _) = s0
            .apply("b1", "add chain inet t d\nadd rule inet t d accept\nadd element inet t s { 198.18.0.1 }\n")
            .unwrap();
        assert_eq!(rules(&rs1)[0], first[0], "the file's rule keeps its handle");
        let set = &rs1.tables[0].sets[0];
        assert_eq!(set.elements.len(), 1);
        let (s2, rs2, _) = s1
            .apply(
                "b2",
                "add rule inet t c jump d\ndelete element inet t s { 198.18.0.1 }\n",
            )
            .unwrap();
        assert_eq!(rs2.tables[0].sets[0].elements.len(), 0);
        assert_eq!(s2.batches, 2);
        // a bad second command: the whole batch refused, named in the message
        let (sources, diags) = s2
            .apply(
                "b3",
                "add rule inet t c accept\nadd rule inet t nope accept\n",
            )
            .unwrap_err();
        let text = crate::diag::render_all(&diags, &sources);
        assert!(text.contains("b3:2:"), "{text}");
        // deleting what is not there is an error (nft: No such file or directory)
        assert!(s2
            .apply("b4", "delete element inet t s { 198.18.0.9 }\n")
            .is_err());
        // the session is as it was: the next batch applies after b2
        let (_, rs3, _) = s2.apply("b5", "flush chain inet t c\n").unwrap();
        assert!(rs3.tables[0]
            .chains
            .iter()
            .find(|c| c.name == "c")
            .unwrap()
            .rules
            .is_empty());
    }

    /// Element batches applied in place give what the full path gives (the ruleset and its
    /// listing); what they cannot judge alone goes to the full path; a bad element is the
    /// same error, and changes nothing.
    #[test]
    fn elements_in_place_equal_the_full_path() {
        let file = "table inet f {\n set s { type ipv4_addr; elements = { 198.18.0.1 } }\n set r { type ipv4_addr; flags interval; }\n map m { type ipv4_addr : mark; }\n chain c { ip saddr @s drop; }\n}\n";
        let (s0, rs0, _) = Session::load_str("rules.nft", file).unwrap();
        let batches = [
            "add element inet f s { 198.18.0.2, 198.18.0.3 }\n",
            "add element inet f s { 198.18.0.2 }\n",
            "delete element inet f s { 198.18.0.1 }\nadd element inet f s { 198.18.0.9 }\n",
        ];
        let (mut fast, mut fast_rs) = (s0.clone(), rs0.clone());
        let mut full = s0.clone();
        let mut full_rs;
        let opts = crate::print::Options {
            handles: true,
            ..Default::default()
        };
        for b in batches {
            let edits = fast
                .apply_elements(&mut fast_rs, "b", b)
                .expect("in place")
                .expect("applies");
            assert!(!edits.is_empty() || b.contains("198.18.0.2 }"));
            let (s, r, _) = full.apply("b", b).unwrap();
            (full, full_rs) = (s, r);
            assert_eq!(
                crate::print::ruleset(fast.ast(), &fast_rs, &opts),
                crate::print::ruleset(full.ast(), &full_rs, &opts),
                "after {b:?}"
            );
            let key = |rs: &ir::Ruleset| {
                let mut k: Vec<_> = rs.tables[0].sets[0]
                    .elements
                    .iter()
                    .map(|e| e.key.clone())
                    .collect();
                k.sort();
                k
            };
            assert_eq!(key(&fast_rs), key(&full_rs));
        }
        assert_eq!(fast.batches, full.batches);
        // not for the in-place path: intervals, maps, other commands, a missing element
        let (mut sized, mut sized_rs, _) = Session::load_str(
            "sized.nft",
            "table ip x { set s { type ipv4_addr; size 2; elements = { 198.18.0.1 } } }\n",
        )
        .unwrap();
        assert!(sized
            .apply_elements(&mut sized_rs, "b", "add element ip x s { 198.18.0.2 }\n")
            .is_none());
        for b in [
            "add element inet f r { 198.18.1.0/24 }\n",
            "add element inet f m { 198.18.0.1 : 1 }\n",
            "add rule inet f c accept\n",
            "delete element inet f s { 198.18.7.7 }\n",
        ] {
            assert!(fast.apply_elements(&mut fast_rs, "b", b).is_none(), "{b}");
        }
        // a value of the wrong type: refused as the full path refuses it, nothing changed
        let before = crate::print::ruleset(fast.ast(), &fast_rs, &opts);
        let (src, d) = fast
            .apply_elements(&mut fast_rs, "bad", "add element inet f s { nothere }\n")
            .expect("judged in place")
            .unwrap_err();
        let text = crate::diag::render_all(&d, &src);
        assert!(text.contains("bad:1:"), "{text}");
        assert_eq!(before, crate::print::ruleset(fast.ast(), &fast_rs, &opts));
        let files = fast.sources.files.len();
        assert!(fast
            .apply_elements(&mut fast_rs, "x", "add rule inet f c accept\n")
            .is_none());
        assert_eq!(
            fast.sources.files.len(),
            files,
            "a batch not taken leaves no source"
        );
    }
}
