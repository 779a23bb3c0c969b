//! Whole rulesets as `nft list ruleset` prints them (nftables' shell-test dumps), rule by rule
//! in context: each rule of a base chain is tried alone in its table, with the table's sets,
//! maps, objects and other chains (their rules left out), so that what the rule reads (a named
//! set, a map, a counter object) is there as the ruleset has it. Its packets come from the
//! rule's own bytecode, which the kernel's `nft --debug=netlink` prints.

use crate::oracle::bytecode::{parse_file, Block};
use std::collections::HashMap;

/// One rule of a dump, in the table text it is tried in.
#[derive(Clone, Debug)]
pub struct DumpRule {
    /// `FILE:LINE` of the rule in the dump.
    pub at: String,
    pub family: String,
    pub table: String,
    pub chain: String,
    pub rule: String,
    /// The rule's table with every other rule left out, and no other table.
    pub text: String,
}

/// The indentation (tabs) of a line.
fn depth(l: &str) -> usize {
    l.bytes().take_while(|&b| b == b'\t').count()
}

/// Split a dump into its rules (those of every chain, base or regular), each in its table.
pub fn rules(file: &str, src: &str) -> Vec<DumpRule> {
    let lines: Vec<&str> = src.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i];
        let Some(head) = l.strip_prefix("table ") else {
            i += 1;
            continue;
        };
        // the table: from here to the closing brace at depth 0
        let start = i;
        let mut end = i + 1;
        while end < lines.len() && lines[end] != "}" {
            end += 1;
        }
        let mut w = head.split_whitespace();
        let family = w.next().unwrap_or("").to_string();
        let table = w.next().unwrap_or("").trim_matches('"').to_string();
        // the rules: in a chain block, lines at depth 2 after the chain's declarations, with
        // their continuation lines (depth 3 and more)
        let mut rule_spans: Vec<(usize, usize, String)> = Vec::new(); // (first, last, chain)
        let mut chain: Option<String> = None;
        let mut j = start + 1;
        while j < end {
            let t = lines[j];
            if depth(t) == 1 {
                chain = t
                    .trim()
                    .strip_prefix("chain ")
                    .map(|c| c.trim_end_matches('{').trim().trim_matches('"').to_string());
                j += 1;
                continue;
            }
            if let (Some(c), 2) = (&chain, depth(t)) {
                let body = t.trim();
                let declaration = body.starts_with("type ")
                    || body.starts_with("policy ")
                    || body.starts_with("comment ")
                    || body.starts_with("devices ")
                    || body.starts_with("device ")
                    || body.starts_with("flags ");
                if !declaration && !body.is_empty() {
                    let mut k = j;
                    while k + 1 < end && depth(lines[k + 1]) >= 3 {
                        k += 1;
                    }
                    rule_spans.push((j, k, c.clone()));
                    j = k + 1;
                    continue;
                }
            }
            j += 1;
        }
        for (first, last, c) in &rule_spans {
            let mut text = String::new();
            for (n, t) in lines.iter().enumerate().take(end + 1).skip(start) {
                let in_a_rule = rule_spans.iter().any(|(a, b, _)| (*a..=*b).contains(&n));
                if in_a_rule && !(*first..=*last).contains(&n) {
                    continue;
                }
                text.push_str(t);
                text.push('\n');
            }
            let rule = lines[*first..=*last]
                .iter()
                .map(|t| t.trim())
                .collect::<Vec<_>>()
                .join(" ");
            out.push(DumpRule {
                at: format!("{file}:{}", first + 1),
                family: family.clone(),
                table: table.clone(),
                chain: c.clone(),
                rule,
                text,
            });
        }
        i = end + 1;
    }
    out
}

/// The table text the kernel loads: netdev devices renamed to the lab's `eth0`.
pub fn kernel_devices(text: &str) -> String {
    text.lines()
        .map(|l| {
            let t = l.trim_start();
            let ind = &l[..l.len() - t.len()];
            if let Some(rest) = t.strip_prefix("devices = {") {
                let tail = rest.split_once('}').map_or("", |x| x.1);
                format!("{ind}devices = {{ eth0 }}{tail}")
            } else if t.starts_with("type ") && t.contains(" device ") {
                // `type filter hook ingress device "lo" priority ...`
                let (a, b) = t.split_once(" device ").unwrap_or((t, ""));
                let after = b.split_once(' ').map_or("", |x| x.1);
                format!("{ind}{a} device eth0 {after}")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// The hooks a regular chain is tried at, made a base chain (netdev or not, the chain's
/// declaration), in order.
pub const REGULAR_AS_BASE: &[(bool, &str)] = &[
    (
        false,
        "type filter hook prerouting priority 0; policy accept;",
    ),
    (false, "type filter hook input priority 0; policy accept;"),
    (false, "type filter hook forward priority 0; policy accept;"),
    (false, "type filter hook output priority 0; policy accept;"),
    (false, "type nat hook prerouting priority 0; policy accept;"),
    (
        false,
        "type nat hook postrouting priority 0; policy accept;",
    ),
    (
        true,
        "type filter hook ingress device eth0 priority 0; policy accept;",
    ),
];

/// The text with chain `chain` declared a base chain (`spec` its first line); the verdict
/// maps' jumps and gotos to it become `accept` (nothing may jump to a base chain).
pub fn as_base(text: &str, chain: &str, spec: &str) -> String {
    let mut out = String::new();
    let text = retarget(text, chain);
    for l in text.lines() {
        out.push_str(l);
        out.push('\n');
        let t = l.trim();
        if let Some(rest) = t.strip_prefix("chain ") {
            if rest.trim_end_matches('{').trim().trim_matches('"') == chain {
                out.push_str("\t\t");
                out.push_str(spec);
                out.push('\n');
            }
        }
    }
    out
}

/// `jump CHAIN` / `goto CHAIN` (the name whole, quoted or not) replaced by `accept`.
fn retarget(text: &str, chain: &str) -> String {
    let mut out = text.to_string();
    for verb in ["jump", "goto"] {
        for name in [chain.to_string(), format!("\"{chain}\"")] {
            let pat = format!("{verb} {name}");
            let mut res = String::new();
            let mut rest = out.as_str();
            while let Some(i) = rest.find(&pat) {
                let after = &rest[i + pat.len()..];
                let whole = !after
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '-' || c == '.');
                res.push_str(&rest[..i]);
                res.push_str(if whole { "accept" } else { &pat });
                rest = after;
            }
            res.push_str(rest);
            out = res;
        }
    }
    out
}

/// The bytecode block of the one rule of `text` from `nft --debug=netlink -c` output: the
/// anonymous sets declared for it and its expressions, as a `.t.payload` block titled `rule`.
pub fn block_from_debug(
    debug: &str,
    family: &str,
    table: &str,
    chain: &str,
    rule: &str,
) -> Option<Block> {
    let header = format!("{family} {table} {chain}");
    let lines: Vec<&str> = debug.lines().collect();
    let at = lines.iter().position(|l| l.trim_end() == header)?;
    // the anonymous sets just before it (not the elements of a named set before them)
    let anon = |p: &str| p.starts_with("__set") || p.starts_with("__map");
    let mut run = at;
    while run > 0 && (anon(lines[run - 1]) || lines[run - 1].starts_with('\t')) {
        run -= 1;
    }
    let first = (run..at).find(|&k| anon(lines[k])).unwrap_or(at);
    let mut text = format!("# {rule}\n");
    for l in &lines[first..=at] {
        text.push_str(l);
        text.push('\n');
    }
    for l in &lines[at + 1..] {
        if !l.starts_with("  [") {
            break;
        }
        text.push_str(l);
        text.push('\n');
    }
    parse_file(&text).into_iter().next()
}

/// The blocks map `compare_in` looks a rule's block up in.
pub fn blocks_of(b: Block) -> HashMap<(String, String), Block> {
    let mut m = HashMap::new();
    m.insert((b.family.clone(), b.rule.clone()), b);
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    const DUMP: &str = "table inet filter {\n\tset blocked {\n\t\ttype ipv4_addr\n\t\telements = { 198.18.0.9 }\n\t}\n\n\tchain input {\n\t\ttype filter hook input priority filter; policy accept;\n\t\tip saddr @blocked drop\n\t\ttcp dport { 22,\n\t\t\t     80 } accept\n\t}\n\n\tchain other {\n\t\tcounter\n\t}\n}\ntable netdev n {\n\tchain ingress {\n\t\ttype filter hook ingress device \"lo\" priority filter; policy accept;\n\t}\n}\n";

    #[test]
    fn a_dump_is_split_into_its_rules() {
        let r = rules("d.nft", DUMP);
        assert_eq!(r.len(), 3);
        assert_eq!(r[0].rule, "ip saddr @blocked drop");
        assert_eq!(r[0].chain, "input");
        assert_eq!(r[1].rule, "tcp dport { 22, 80 } accept");
        assert_eq!(r[1].at, "d.nft:10");
        assert_eq!(r[2].chain, "other");
        // the rule alone, the set kept
        assert!(r[0].text.contains("elements = { 198.18.0.9 }"));
        assert!(!r[0].text.contains("accept\n\t}") || !r[0].text.contains("tcp dport"));
        assert!(!r[1].text.contains("@blocked drop"));
        assert!(!r[1].text.contains("table netdev"));
        let b = as_base(
            "table ip t {\n\tmap m {\n\t\ttype ifname : verdict\n\t\telements = { \"a\" : jump c, \"b\" : jump c2 }\n\t}\n\tchain c {\n\t\tcounter\n\t}\n}\n",
            "c",
            "type filter hook prerouting priority 0; policy accept;",
        );
        assert!(b.contains("\"a\" : accept, \"b\" : jump c2"), "{b}");
        assert!(
            b.contains("chain c {\n\t\ttype filter hook prerouting"),
            "{b}"
        );
        let k = kernel_devices(DUMP);
        assert!(
            k.contains("hook ingress device eth0 priority filter"),
            "{k}"
        );
    }

    #[test]
    fn a_block_is_read_from_nft_debug_output() {
        let debug = "inet (null) (null) use 0 type filter hook input prio 0\nblocked filter 0\n\telement 0912c6c6  : 0 [end]\n__set%d filter 3 size 2\n__set%d filter 0\n\telement 00001600  : 0 [end]\telement 00005000  : 0 [end]\ninet filter input\n  [ meta load l4proto => reg 1 ]\n  [ cmp eq reg 1 0x00000006 ]\n  [ payload load 2b @ transport header + 2 => reg 1 ]\n  [ lookup reg 1 set __set%d ]\n  [ immediate reg 0 accept ]\n";
        let b = block_from_debug(
            debug,
            "inet",
            "filter",
            "input",
            "tcp dport { 22, 80 } accept",
        )
        .expect("a block");
        assert_eq!(b.family, "inet");
        assert_eq!(b.exprs.len(), 5);
        assert_eq!(b.sets.len(), 1);
    }
}
