//! nft's JSON syntax (`nft -j`) against nftables' own rule tests: each rule of the `ip`,
//! `ip6`, `inet`, `netdev` (and `any`) `.t.json` files, in the tables its `.t` file builds.
//!
//! (a) JSON in: the rule's JSON, translated by `weir_lang::json::input`, loads and prints
//!     (`print::rule`, stateless, protocols by number) exactly as its text form prints;
//! (b) JSON out: `weir_lang::json::output` of the text rule equals the JSON nft lists
//!     (`.t.json.output`, else `.t.json`), compared as JSON values with the elements of
//!     anonymous sets sorted (nft lists them in the kernel's order);
//! (c) round trip: JSON out, read back in, prints as the text printer prints the rule.
//!
//! The counts are printed with the exceptions and their reasons; the test fails below the
//! floors (a ratchet) and is skipped, with a message, without `../shared/nftables-tests`.
//! `WEIR_JSON_SHOW=a|b|c` prints every exception of that kind.

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// (a): JSON rules that load and print as their text form, at least.
const IN_FLOOR: usize = 4_183;
/// (b): rules whose JSON out is nft's, at least.
const OUT_FLOOR: usize = 4_165;
/// (c): rules whose JSON out reads back to the same text, at least.
const ROUND_FLOOR: usize = 4_179;

const FAMILIES: [&str; 4] = ["ip", "ip6", "inet", "netdev"];

fn dir() -> Option<PathBuf> {
    let d = match std::env::var_os("WEIR_NFT_TESTS") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/nftables-tests"),
    };
    d.join("py").is_dir().then(|| d.join("py"))
}

/// A set or map of a test file (`!NAME SPEC`), with the elements its `?NAME ...` lines add.
#[derive(Clone, Debug)]
struct Set {
    name: String,
    spec: String,
    elements: Vec<String>,
}

impl Set {
    fn nft(&self) -> String {
        let is_map = self.spec.contains(" : ");
        // "type T [flags F] [timeout T] [size N] [policy P]": one statement per keyword
        let mut stmts: Vec<String> = Vec::new();
        for w in self.spec.split_whitespace() {
            if matches!(
                w,
                "type" | "typeof" | "flags" | "timeout" | "size" | "policy"
            ) {
                stmts.push(w.to_string());
            } else if let Some(last) = stmts.last_mut() {
                last.push(' ');
                last.push_str(w);
            }
        }
        let mut s = format!(
            "  {} {} {{\n",
            if is_map { "map" } else { "set" },
            quote(&self.name)
        );
        for st in stmts {
            s.push_str(&format!("    {st};\n"));
        }
        if !self.elements.is_empty() {
            s.push_str(&format!(
                "    elements = {{ {} }}\n",
                self.elements.join(", ")
            ));
        }
        s.push_str("  }\n");
        s
    }
}

fn quote(name: &str) -> String {
    if name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        name.to_string()
    } else {
        format!("\"{name}\"")
    }
}

/// A named object of a `%NAME type KIND [BODY]` line as a table declares it: `counter c { }`,
/// `quota q { 25 mbytes }`, `limit l { rate 400/minute }`, `ct helper h { ... }`, ...
fn object(line: &str) -> Option<String> {
    let (name, spec) = line.split_once(' ')?;
    let spec = spec.trim().strip_prefix("type ")?;
    let (kind, body) = match spec.find('{') {
        Some(i) => (
            spec[..i].trim(),
            spec[i + 1..].trim().trim_end_matches('}').trim(),
        ),
        None => {
            let two = ["ct helper", "ct timeout", "ct expectation"];
            match two.iter().find(|k| spec.starts_with(*k)) {
                Some(k) => (*k, spec[k.len()..].trim()),
                None => spec.split_once(' ').unwrap_or((spec, "")),
            }
        }
    };
    Some(format!("  {kind} {} {{ {body} }}\n", quote(name)))
}

/// One table of a `*FAMILY;TABLE;CHAINS` line.
#[derive(Clone, Debug)]
struct Table {
    family: String,
    name: String,
    chains: Vec<String>,
}

#[derive(Debug)]
struct Case {
    file: String,
    line: usize,
    rule: String,
    ok: bool,
    text: String,
}

/// The cases of one `.t` file: each rule in each table of its family scope.
fn cases(file: &str, src: &str) -> Vec<Case> {
    let mut chains: BTreeMap<String, String> = BTreeMap::new();
    let mut tables: Vec<Table> = Vec::new();
    let mut last_was_table = false;
    let mut sets: Vec<Set> = Vec::new();
    let mut objects: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for (i, raw) in src.lines().enumerate() {
        let line = raw.trim_end();
        if line.is_empty() || line.starts_with('#') || line.starts_with('-') {
            continue;
        }
        let is_table = line.starts_with('*');
        if let Some(rest) = line.strip_prefix(':') {
            if let Some((name, spec)) = rest.split_once(';') {
                chains.insert(name.to_string(), spec.to_string());
            }
        } else if let Some(rest) = line.strip_prefix('*') {
            if !last_was_table {
                tables.clear();
                sets.clear();
                objects.clear();
            }
            let f: Vec<&str> = rest.split(';').collect();
            if f.len() == 3 {
                tables.push(Table {
                    family: f[0].to_string(),
                    name: f[1].to_string(),
                    chains: f[2].split(',').map(str::to_string).collect(),
                });
            }
        } else if let Some(rest) = line.strip_prefix('%') {
            // a named object nft accepts (those it refuses are left out)
            if let Some((body, "ok")) = rest.rsplit_once(';') {
                if let Some(o) = object(body) {
                    objects.push(o);
                }
            }
        } else if let Some(rest) = line.strip_prefix('!') {
            if !rest.ends_with(";ok") {
                last_was_table = false;
                continue;
            }
            let body = rest.rsplit_once(';').map_or(rest, |(b, _)| b);
            if let Some((name, spec)) = body.split_once(' ') {
                sets.push(Set {
                    name: name.to_string(),
                    spec: spec.to_string(),
                    elements: Vec::new(),
                });
            }
        } else if let Some(rest) = line.strip_prefix('?') {
            if !rest.ends_with(";ok") {
                last_was_table = false;
                continue;
            }
            let body = rest.rsplit_once(';').map_or(rest, |(b, _)| b);
            if let Some((name, elems)) = body.split_once(' ') {
                if let Some(s) = sets.iter_mut().find(|s| s.name == name) {
                    s.elements.push(elems.to_string());
                }
            }
        } else {
            // RULE;ok[;CANONICAL] or RULE;fail
            let mut f = line.splitn(3, ';');
            let rule = f.next().unwrap_or_default().trim().to_string();
            let ok = match f.next().map(str::trim) {
                Some("ok") => true,
                Some("fail") => false,
                _ => {
                    last_was_table = is_table;
                    continue;
                }
            };
            for t in tables
                .iter()
                .filter(|t| FAMILIES.contains(&t.family.as_str()))
            {
                let mut text = format!("table {} {} {{\n", t.family, quote(&t.name));
                for s in &sets {
                    text.push_str(&s.nft());
                }
                for o in &objects {
                    text.push_str(o);
                }
                for c in &t.chains {
                    let spec = chains.get(c).cloned().unwrap_or_default();
                    text.push_str(&format!(
                        "  chain {} {{\n    {spec};\n    {rule}\n  }}\n",
                        quote(c)
                    ));
                }
                text.push_str("}\n");
                out.push(Case {
                    file: file.to_string(),
                    line: i + 1,
                    rule: rule.clone(),
                    ok,
                    text,
                });
            }
        }
        last_was_table = is_table;
    }
    out
}

/// The rules of a `.t.json` file: `# RULE` then the JSON array of its statements.
fn json_rules(text: &str) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    let mut cur: Option<(String, String)> = None;
    let mut flush = |cur: &mut Option<(String, String)>| {
        if let Some((rule, body)) = cur.take() {
            if let Ok(v) = serde_json::from_str::<Value>(&body) {
                out.insert(rule, v);
            }
        }
    };
    for line in text.lines() {
        if let Some(rule) = line.strip_prefix("# ") {
            flush(&mut cur);
            cur = Some((rule.trim().to_string(), String::new()));
        } else if let Some((_, body)) = cur.as_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    flush(&mut cur);
    out
}

/// The first rule of a loaded case, with its table's family.
fn first_rule<'a>(
    rs: &weir_lang::ir::Ruleset,
    file: &'a weir_lang::ast::File,
) -> Option<(&'a weir_lang::ast::Rule, weir_lang::ir::Family)> {
    use weir_lang::ast::{Command, TableItem};
    for (c, t) in file.commands.iter().zip(&rs.tables) {
        if let Command::Table { items, .. } = c {
            for it in items {
                if let TableItem::Chain(ch) = it {
                    if let Some(r) = ch.rules.first() {
                        return Some((r, t.family));
                    }
                }
            }
        }
    }
    None
}

const OPTS: weir_lang::print::Options = weir_lang::print::Options {
    stateless: true,
    numeric_proto: true,
};

/// A case's first rule as the text printer prints it, or the first error.
fn load_print(text: &str) -> Result<String, String> {
    match std::panic::catch_unwind(|| weir_lang::load_str_ast("t.nft", text)) {
        Err(_) => Err("panicked".into()),
        Ok(Err((_, diags))) => Err(diags
            .iter()
            .find(|d| d.severity == weir_lang::diag::Severity::Error)
            .map(|d| d.message.clone())
            .unwrap_or_default()),
        Ok(Ok((rs, file, _))) => match first_rule(&rs, &file) {
            Some((r, fam)) => Ok(weir_lang::print::rule(r, fam, &rs.sources, &OPTS)),
            None => Err("no rule".into()),
        },
    }
}

/// A JSON value with the members of every anonymous set sorted.
fn sorted_sets(v: &Value) -> Value {
    match v {
        Value::Array(a) => Value::Array(a.iter().map(sorted_sets).collect()),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, x)| {
                    let mut x = sorted_sets(x);
                    if k == "set" {
                        if let Value::Array(a) = &mut x {
                            a.sort_by_key(|e| e.to_string());
                        }
                    }
                    (k.clone(), x)
                })
                .collect(),
        ),
        _ => v.clone(),
    }
}

/// A listing with its whitespace normalised and the elements of each `{ ... }` sorted (nft
/// lists a set's elements in the kernel's order, which says nothing of the rule).
fn normalise(s: &str) -> String {
    fn group(chars: &mut std::iter::Peekable<std::str::Chars>) -> String {
        let mut items = Vec::new();
        let mut cur = String::new();
        while let Some(c) = chars.next() {
            match c {
                '{' => cur.push_str(&group(chars)),
                '}' => break,
                ',' => items.push(std::mem::take(&mut cur)),
                c => cur.push(c),
            }
        }
        items.push(cur);
        let mut items: Vec<String> = items
            .iter()
            .map(|i| i.split_whitespace().collect::<Vec<_>>().join(" "))
            .filter(|i| !i.is_empty())
            .collect();
        items.sort();
        format!("{{ {} }}", items.join(", "))
    }
    let mut out = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '{' {
            out.push_str(&group(&mut chars));
        } else {
            out.push(c);
        }
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Two printed rules are the same but for the order of set elements (nft lists them in the
/// kernel's order; JSON out lists them as the printer does, JSON in as the JSON does).
fn same_rule(a: &str, b: &str) -> bool {
    normalise(a) == normalise(b)
}

/// The case's text with its rule replaced by `rule`.
fn with_rule(c: &Case, rule: &str) -> String {
    c.text
        .replace(&format!("    {}\n", c.rule), &format!("    {rule}\n"))
}

#[test]
fn nft_json_rule_tests() {
    let Some(py) = dir() else {
        println!(
            "skipped: nftables' tests not found (../shared/nftables-tests or $WEIR_NFT_TESTS)"
        );
        return;
    };
    let mut files: Vec<PathBuf> = Vec::new();
    for sub in ["any", "ip", "ip6", "inet", "netdev"] {
        let Ok(rd) = std::fs::read_dir(py.join(sub)) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "t") && p.with_extension("t.json").is_file() {
                files.push(p);
            }
        }
    }
    files.sort();
    let show = std::env::var("WEIR_JSON_SHOW").unwrap_or_default();
    let (mut total, mut text_loads) = (0, 0);
    let (mut in_ok, mut out_ok, mut round_ok) = (0, 0, 0);
    let mut no_json = 0;
    let mut ex: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for p in &files {
        let src = std::fs::read_to_string(p).unwrap();
        let name = p.strip_prefix(&py).unwrap_or(p).display().to_string();
        let jin = json_rules(&std::fs::read_to_string(p.with_extension("t.json")).unwrap());
        let jout = json_rules(
            &std::fs::read_to_string(p.with_extension("t.json.output")).unwrap_or_default(),
        );
        for c in cases(&name, &src).into_iter().filter(|c| c.ok) {
            let Some(json) = jin.get(&c.rule) else {
                no_json += 1;
                continue;
            };
            total += 1;
            let at = format!("{}:{}: {}", c.file, c.line, c.rule);
            let Ok(printed) = load_print(&c.text) else {
                continue;
            };
            text_loads += 1;
            // (a) JSON in
            match weir_lang::json::input::rule(json, "expr") {
                Err(e) => ex.entry("a").or_default().push(format!("{at}\n    {e}")),
                Ok(rule) => match load_print(&with_rule(&c, &rule)) {
                    Ok(jp) if same_rule(&jp, &printed) => in_ok += 1,
                    Ok(jp) => ex.entry("a").or_default().push(format!(
                        "{at}\n    json as text: {rule}\n    printed: {jp}\n    text printed: {printed}"
                    )),
                    Err(e) => ex
                        .entry("a")
                        .or_default()
                        .push(format!("{at}\n    json as text: {rule}\n    refused: {e}")),
                },
            }
            // (b) JSON out, (c) round trip
            let (rs, file, _) = weir_lang::load_str_ast("t.nft", &c.text).unwrap();
            let (r, fam) = first_rule(&rs, &file).unwrap();
            let out = weir_lang::json::output::rule(r, fam, &rs.sources, &OPTS);
            let want = jout.get(&c.rule).unwrap_or(json);
            if sorted_sets(&out) == sorted_sets(want) {
                out_ok += 1;
            } else {
                ex.entry("b").or_default().push(format!(
                    "{at}\n    weir: {out}\n    nft:  {}",
                    sorted_sets(want)
                ));
            }
            match weir_lang::json::input::rule(&out, "expr") {
                Err(e) => ex
                    .entry("c")
                    .or_default()
                    .push(format!("{at}\n    {out}\n    {e}")),
                Ok(rule) => match load_print(&with_rule(&c, &rule)) {
                    Ok(jp) if same_rule(&jp, &printed) => round_ok += 1,
                    Ok(jp) => ex.entry("c").or_default().push(format!(
                        "{at}\n    back as text: {rule}\n    printed: {jp}\n    text printed: {printed}"
                    )),
                    Err(e) => ex
                        .entry("c")
                        .or_default()
                        .push(format!("{at}\n    back as text: {rule}\n    refused: {e}")),
                },
            }
        }
    }
    let pct = |n: usize| 100.0 * n as f64 / text_loads.max(1) as f64;
    println!(
        "nft's JSON rule tests ({} files): {total} rules with JSON ({no_json} without), {text_loads} of them load as text",
        files.len()
    );
    println!(
        "(a) JSON in, printed as the text form: {in_ok} of {text_loads} ({:.1}%)",
        pct(in_ok)
    );
    println!(
        "(b) JSON out equal to nft's JSON: {out_ok} of {text_loads} ({:.1}%)",
        pct(out_ok)
    );
    println!(
        "(c) JSON out, in again, printed the same: {round_ok} of {text_loads} ({:.1}%)",
        pct(round_ok)
    );
    for (k, list) in &ex {
        let mut seen = std::collections::BTreeSet::new();
        let list: Vec<&String> = list
            .iter()
            .filter(|e| seen.insert(e.lines().next().unwrap_or_default().to_string()))
            .collect();
        let n = if show.contains(k) { list.len() } else { 5 };
        println!(
            "exceptions ({k}): {} (first {}; WEIR_JSON_SHOW={k} for all)",
            list.len(),
            n.min(list.len())
        );
        for e in list.iter().take(n) {
            println!("  {e}");
        }
    }
    assert!(
        total > 1000,
        "only {total} JSON rules found: the files changed?"
    );
    assert!(
        in_ok >= IN_FLOOR,
        "(a) {in_ok} below the floor of {IN_FLOOR}"
    );
    assert!(
        out_ok >= OUT_FLOOR,
        "(b) {out_ok} below the floor of {OUT_FLOOR}"
    );
    assert!(
        round_ok >= ROUND_FLOOR,
        "(c) {round_ok} below the floor of {ROUND_FLOOR}"
    );
}
