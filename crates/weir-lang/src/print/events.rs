//! What changed between two listings of a running ruleset (each with handles, `-a`), as
//! `nft monitor` prints the kernel's events: `add table|chain|set|map|flowtable ...`, `add
//! rule ... # handle N`, `add element ... { ... }`, and `delete ...` for what went (rules by
//! handle, elements by value). Deletions first, innermost first; then additions, outermost
//! first, in listing order.

use std::collections::{BTreeMap, BTreeSet};

/// One listing taken apart: tables, their blocks (chains, sets, ...) with handles, rules
/// with handles, set elements.
#[derive(Default)]
struct Parts {
    tables: Vec<String>,
    /// (table, block "KIND NAME") in order.
    blocks: Vec<(String, String)>,
    /// (table, chain) -> rules as listed (with ` # handle N`).
    rules: BTreeMap<(String, String), Vec<String>>,
    /// (table, "set|map NAME") -> elements.
    elements: BTreeMap<(String, String), Vec<String>>,
}

fn strip_handle(l: &str) -> &str {
    l.split(" # handle ").next().unwrap_or(l)
}

/// The elements of `elements = { a, b : c, ... }`, split at the commas between elements
/// (not those inside braces or quotes).
fn split_elements(body: &str) -> Vec<String> {
    let mut out = Vec::new();
    let (mut depth, mut quoted, mut cur) = (0i32, false, String::new());
    for c in body.chars() {
        match c {
            '"' => quoted = !quoted,
            '{' if !quoted => depth += 1,
            '}' if !quoted => depth -= 1,
            ',' if !quoted && depth == 0 => {
                let e = cur.split_whitespace().collect::<Vec<_>>().join(" ");
                if !e.is_empty() {
                    out.push(e);
                }
                cur.clear();
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    let e = cur.split_whitespace().collect::<Vec<_>>().join(" ");
    if !e.is_empty() {
        out.push(e);
    }
    out
}

fn parts(text: &str) -> Parts {
    let mut p = Parts::default();
    let (mut table, mut block) = (String::new(), String::new());
    let mut elems: Option<String> = None;
    for l in text.lines() {
        if let Some(e) = elems.as_mut() {
            e.push(' ');
            e.push_str(l.trim());
            if l.trim_end().ends_with('}') {
                let body = elems.take().unwrap_or_default();
                let body = body.trim().trim_end_matches('}');
                p.elements
                    .entry((table.clone(), block.clone()))
                    .or_default()
                    .extend(split_elements(body));
            }
            continue;
        }
        if let Some(t) = l.strip_prefix("table ") {
            table = strip_handle(t).trim_end_matches(" {").trim().to_string();
            block.clear();
            p.tables.push(table.clone());
        } else if l.starts_with('\t') && !l.starts_with("\t\t") && l.trim_end().ends_with('{')
            || l.starts_with('\t') && !l.starts_with("\t\t") && l.contains(" { # handle ")
        {
            block = strip_handle(l.trim()).trim_end_matches(" {").to_string();
            p.blocks.push((table.clone(), block.clone()));
        } else if let Some(rest) = l.strip_prefix("\t\telements = {") {
            if rest.trim_end().ends_with('}') {
                let body = rest.trim().trim_end_matches('}');
                p.elements
                    .entry((table.clone(), block.clone()))
                    .or_default()
                    .extend(split_elements(body));
            } else {
                elems = Some(rest.to_string());
            }
        } else if l.starts_with("\t\t") && l.contains(" # handle ") && block.starts_with("chain ") {
            p.rules
                .entry((table.clone(), block.clone()))
                .or_default()
                .push(l.trim().to_string());
        }
    }
    p
}

/// The events that take listing `before` to listing `after` (both listed with handles).
pub fn events(before: &str, after: &str) -> String {
    let (a, b) = (parts(before), parts(after));
    let mut out = String::new();
    let handle = |r: &str| r.rsplit(" # handle ").next().unwrap_or("").to_string();
    let tables_b: BTreeSet<&String> = b.tables.iter().collect();
    let blocks_b: BTreeSet<&(String, String)> = b.blocks.iter().collect();
    // deletions: elements, rules, blocks, tables
    for ((t, blk), es) in &a.elements {
        if !blocks_b.contains(&(t.clone(), blk.clone())) {
            continue;
        }
        let now: BTreeSet<&String> = b
            .elements
            .get(&(t.clone(), blk.clone()))
            .map(|v| v.iter().collect())
            .unwrap_or_default();
        let gone: Vec<&str> = es
            .iter()
            .filter(|e| !now.contains(e))
            .map(|e| e.as_str())
            .collect();
        if !gone.is_empty() {
            let name = blk.split_once(' ').map_or(blk.as_str(), |x| x.1);
            out.push_str(&format!(
                "delete element {t} {name} {{ {} }}\n",
                gone.join(", ")
            ));
        }
    }
    for ((t, c), rs) in &a.rules {
        if !blocks_b.contains(&(t.clone(), c.clone())) {
            continue;
        }
        let now: BTreeSet<String> = b
            .rules
            .get(&(t.clone(), c.clone()))
            .map(|v| v.iter().map(|r| handle(r)).collect())
            .unwrap_or_default();
        let chain = c.strip_prefix("chain ").unwrap_or(c);
        for r in rs {
            if !now.contains(&handle(r)) {
                out.push_str(&format!("delete rule {t} {chain} handle {}\n", handle(r)));
            }
        }
    }
    for (t, blk) in a.blocks.iter().rev() {
        if !blocks_b.contains(&(t.clone(), blk.clone())) {
            let (kind, name) = blk.split_once(' ').unwrap_or((blk, ""));
            out.push_str(&format!("delete {kind} {t} {name}\n"));
        }
    }
    let tables_a: BTreeSet<&String> = a.tables.iter().collect();
    for t in a.tables.iter().rev() {
        if !tables_b.contains(t) {
            out.push_str(&format!("delete table {t}\n"));
        }
    }
    // additions: tables, blocks, rules, elements
    for t in &b.tables {
        if !tables_a.contains(t) {
            out.push_str(&format!("add table {t}\n"));
        }
    }
    let blocks_a: BTreeSet<&(String, String)> = a.blocks.iter().collect();
    for (t, blk) in &b.blocks {
        if !blocks_a.contains(&(t.clone(), blk.clone())) {
            let (kind, name) = blk.split_once(' ').unwrap_or((blk, ""));
            out.push_str(&format!("add {kind} {t} {name}\n"));
        }
    }
    for (t, blk) in &b.blocks {
        let key = (t.clone(), blk.clone());
        if let Some(rs) = b.rules.get(&key) {
            let old: BTreeSet<String> = a
                .rules
                .get(&key)
                .map(|v| v.iter().map(|r| handle(r)).collect())
                .unwrap_or_default();
            let chain = blk.strip_prefix("chain ").unwrap_or(blk);
            for r in rs {
                if !old.contains(&handle(r)) {
                    out.push_str(&format!("add rule {t} {chain} {r}\n"));
                }
            }
        }
        if let Some(es) = b.elements.get(&key) {
            let old: BTreeSet<&String> = a
                .elements
                .get(&key)
                .map(|v| v.iter().collect())
                .unwrap_or_default();
            let new: Vec<&str> = es
                .iter()
                .filter(|e| !old.contains(e))
                .map(|e| e.as_str())
                .collect();
            if !new.is_empty() {
                let name = blk.split_once(' ').map_or(blk.as_str(), |x| x.1);
                out.push_str(&format!(
                    "add element {t} {name} {{ {} }}\n",
                    new.join(", ")
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listing(text: &str) -> String {
        let (rs, file, _) = crate::load_str_ast("t.nft", text).expect("loads");
        let opts = crate::print::Options {
            handles: true,
            ..Default::default()
        };
        crate::print::ruleset(&file, &rs, &opts)
    }

    /// Each kind of change comes out as nft's monitor prints it, and nothing that did not
    /// change.
    #[test]
    fn changes_as_nft_monitor_prints_them() {
        let a = listing(
            "table inet f {\n set s { type ipv4_addr; elements = { 198.18.0.1, 198.18.0.2 } }\n chain c { type filter hook input priority 0; ip saddr @s drop\n tcp dport 22 accept\n }\n}\ntable ip old { chain x { } }\n",
        );
        assert_eq!(events(&a, &a), "");
        let b = listing(
            "table inet f {\n set s { type ipv4_addr; elements = { 198.18.0.2, 198.18.0.3 } }\n chain c { type filter hook input priority 0; ip saddr @s drop\n }\n chain d { }\n}\ntable ip new { }\n",
        );
        let e = events(&a, &b);
        let want = [
            "delete element inet f s { 198.18.0.1 }",
            "delete rule inet f c handle 4",
            "delete chain ip old x",
            "delete table ip old",
            "add table ip new",
            "add chain inet f d",
            "add element inet f s { 198.18.0.3 }",
        ];
        for w in want {
            assert!(e.lines().any(|l| l == w), "{w:?} not in:\n{e}");
        }
        assert_eq!(e.lines().count(), want.len(), "{e}");
    }
}
