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
const IN_FLOOR: usize = 4_189;
/// (b): rules whose JSON out is nft's, at least.
const OUT_FLOOR: usize = 4_166;
/// (c): rules whose JSON out reads back to the same text, at least.
const ROUND_FLOOR: usize = 4_182;

mod common;
use common::*;

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
    handles: false,
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
    let files: Vec<PathBuf> = t_files(&py)
        .into_iter()
        .filter(|p| p.with_extension("t.json").is_file())
        .collect();
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

/// `weir_lang::load_file` (what `weir run` and its reloads call) reads a JSON file as
/// `weir check` does, not only the CLI's own loader.
#[test]
fn load_file_reads_json() {
    let json = r#"{"nftables": [
        {"table": {"family": "inet", "name": "t"}},
        {"chain": {"family": "inet", "table": "t", "name": "c", "type": "filter",
                   "hook": "input", "prio": 0, "policy": "accept"}},
        {"rule": {"family": "inet", "table": "t", "chain": "c",
                  "expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "tcp",
                  "field": "dport"}}, "right": 22}}, {"accept": null}]}}
    ]}"#;
    let path = std::env::temp_dir().join(format!("weir-json-{}.json", std::process::id()));
    std::fs::write(&path, json).unwrap();
    let loaded = weir_lang::load_file(&path);
    let _ = std::fs::remove_file(&path);
    let (rs, _) =
        loaded.unwrap_or_else(|(sm, d)| panic!("{}", weir_lang::diag::render_all(&d, &sm)));
    assert_eq!(rs.summary().rules, 1);
}
