//! Tables and chains: the built-in chains of each table (hook and priority), `:CHAIN POLICY`
//! declarations and the chain names nft accepts.

use super::rule::Rule;
use super::short;
use std::collections::BTreeMap;

/// The built-in chains: (chain type, hook, priority) per table and chain.
pub(super) fn base_chain(
    table: &str,
    chain: &str,
) -> Option<(&'static str, &'static str, &'static str)> {
    Some(match (table, chain) {
        ("filter", "INPUT") => ("filter", "input", "filter"),
        ("filter", "FORWARD") => ("filter", "forward", "filter"),
        ("filter", "OUTPUT") => ("filter", "output", "filter"),
        ("nat", "PREROUTING") => ("nat", "prerouting", "dstnat"),
        ("nat", "INPUT") => ("nat", "input", "srcnat"),
        ("nat", "OUTPUT") => ("nat", "output", "dstnat"),
        ("nat", "POSTROUTING") => ("nat", "postrouting", "srcnat"),
        ("raw", "PREROUTING") => ("filter", "prerouting", "raw"),
        ("raw", "OUTPUT") => ("filter", "output", "raw"),
        ("mangle", "PREROUTING") => ("filter", "prerouting", "mangle"),
        ("mangle", "INPUT") => ("filter", "input", "mangle"),
        ("mangle", "FORWARD") => ("filter", "forward", "mangle"),
        ("mangle", "OUTPUT") => ("filter", "output", "mangle"),
        ("mangle", "POSTROUTING") => ("filter", "postrouting", "mangle"),
        _ => return None,
    })
}

pub(super) struct Chain {
    pub(super) name: String,
    pub(super) policy: Option<String>,
}

pub(super) struct Table {
    pub(super) name: String,
    pub(super) chains: Vec<Chain>,
    pub(super) rules: Vec<(usize, Rule)>,
    /// named sets used, with the first line that uses them
    pub(super) sets: BTreeMap<String, usize>,
    /// the line being parsed (for `sets`)
    pub(super) line: usize,
}

impl Table {
    pub(super) fn new(name: &str) -> Table {
        Table {
            name: name.to_string(),
            chains: Vec::new(),
            rules: Vec::new(),
            sets: BTreeMap::new(),
            line: 0,
        }
    }

    /// `:NAME POLICY [p:b]`
    pub(super) fn declare(&mut self, decl: &str) -> Result<(), String> {
        let mut it = decl.split_whitespace();
        let cname = it.next().unwrap_or("");
        let policy = it.next().unwrap_or("-");
        if let Some(c) = it.next() {
            if !is_counters(c) {
                return Err(format!("unexpected '{}' after the chain policy", short(c)));
            }
        }
        if it.next().is_some() {
            return Err("too many words in a chain declaration".into());
        }
        check_chain_name(cname)?;
        if self.chains.iter().any(|c| c.name == cname) {
            return Err(format!("chain '{cname}' is declared twice"));
        }
        let builtin = base_chain(&self.name, cname).is_some();
        let policy = match (policy, builtin) {
            ("-", false) => None,
            ("ACCEPT", true) => Some("accept".to_string()),
            ("DROP", true) => Some("drop".to_string()),
            ("-", true) => Some("accept".to_string()),
            (p, true) => {
                return Err(format!(
                    "unsupported policy '{}' for built-in chain {cname} (supported: ACCEPT, DROP)",
                    short(p)
                ))
            }
            (p, false) => {
                return Err(format!(
                    "user chain '{cname}' has policy '{}' (user chains have '-'; the built-in chains of table '{}' are {})",
                    short(p),
                    self.name,
                    builtin_names(&self.name)
                ))
            }
        };
        self.chains.push(Chain {
            name: cname.to_string(),
            policy,
        });
        Ok(())
    }
}

fn builtin_names(table: &str) -> &'static str {
    match table {
        "filter" => "INPUT, FORWARD, OUTPUT",
        "nat" => "PREROUTING, INPUT, OUTPUT, POSTROUTING",
        "raw" => "PREROUTING, OUTPUT",
        _ => "PREROUTING, INPUT, FORWARD, OUTPUT, POSTROUTING",
    }
}

/// Words nft gives a meaning to where a chain name is expected.
const RESERVED: &[&str] = &[
    "accept", "drop", "continue", "return", "jump", "goto", "queue", "chain", "table", "set",
    "map", "type", "hook", "policy", "priority", "counter", "comment", "flags", "elements",
];

pub(super) fn check_chain_name(n: &str) -> Result<(), String> {
    if n.is_empty() {
        return Err("a chain declaration without a name".into());
    }
    let ok = n.len() <= 64
        && n.bytes()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
        && n.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.'));
    if !ok || RESERVED.contains(&n) {
        return Err(format!(
            "unsupported chain name '{}' (supported: a letter or '_' then letters, digits, '_', '-', '.'; not an nft keyword)",
            short(n)
        ));
    }
    Ok(())
}

pub(super) fn is_counters(s: &str) -> bool {
    let Some(inner) = s.strip_prefix('[').and_then(|s| s.strip_suffix(']')) else {
        return false;
    };
    match inner.split_once(':') {
        Some((a, b)) => {
            !a.is_empty()
                && !b.is_empty()
                && a.bytes().all(|c| c.is_ascii_digit())
                && b.bytes().all(|c| c.is_ascii_digit())
        }
        None => false,
    }
}
