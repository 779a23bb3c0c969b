//! What the nftables rule-test conformance tests share: the `.t` files read into cases (each
//! rule in a table with its file's chains, sets and objects, as nft's `nft-test.py` builds
//! them) and listings normalised for comparison.

#![allow(dead_code)] // (each test uses its part)

use std::collections::BTreeMap;
use std::path::PathBuf;
pub const FAMILIES: [&str; 4] = ["ip", "ip6", "inet", "netdev"];

pub fn dir() -> Option<PathBuf> {
    let d = match std::env::var_os("WEIR_NFT_TESTS") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/nftables-tests"),
    };
    d.join("py").is_dir().then(|| d.join("py"))
}

/// A set or map of a test file (`!NAME SPEC`), with the elements its `?NAME ...` lines add.
#[derive(Clone, Debug)]
pub struct Set {
    pub name: String,
    pub spec: String,
    pub elements: Vec<String>,
}

impl Set {
    pub fn nft(&self) -> String {
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

pub fn quote(name: &str) -> String {
    if name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        name.to_string()
    } else {
        format!("\"{name}\"")
    }
}

/// A named object of a `%NAME type KIND [BODY]` line as a table declares it: `counter c { }`,
/// `quota q { 25 mbytes }`, `limit l { rate 400/minute }`, `ct helper h { ... }`, ...
pub fn object(line: &str) -> Option<String> {
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
pub struct Table {
    pub family: String,
    pub name: String,
    pub chains: Vec<String>,
}

#[derive(Debug)]
pub struct Case {
    pub file: String,
    pub line: usize,
    pub rule: String,
    pub ok: bool,
    /// How nft lists the rule back (the `;ok;CANONICAL` column, else the rule itself).
    pub canonical: String,
    pub text: String,
}

/// The cases of one `.t` file: each rule in each table of its family scope.
pub fn cases(file: &str, src: &str) -> Vec<Case> {
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
            let canonical = f
                .next()
                .map(|c| c.trim().to_string())
                .filter(|c| !c.is_empty())
                .unwrap_or_else(|| rule.clone());
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
                    canonical: canonical.clone(),
                    text,
                });
            }
        }
        last_was_table = is_table;
    }
    out
}

pub fn normalise(s: &str) -> String {
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

/// The `.t` files of the families weir covers (and `any`), sorted.
pub fn t_files(py: &std::path::Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = Vec::new();
    for sub in ["any", "ip", "ip6", "inet", "netdev"] {
        let Ok(rd) = std::fs::read_dir(py.join(sub)) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "t") {
                files.push(p);
            }
        }
    }
    files.sort();
    files
}
