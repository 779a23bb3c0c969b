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
}
