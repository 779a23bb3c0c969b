//! Anonymous chains (`jump { ... }`), which the parser names `__chainN` as nft does: listed
//! inline in the rule that jumps to them, as `nft list ruleset` prints them, not as chains of
//! their own.

use super::{rule, Decls, Options};
use crate::ir;
use crate::source::SourceMap;

/// True for the name the parser gives an anonymous chain (`__chain0`).
pub(super) fn is_anonymous(name: &str) -> bool {
    name.strip_prefix("__chain")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The rules of chain `c` as nft lists them, each anonymous chain it jumps to written inline
/// (`depth` tabs in front of each rule, for the lines of those chains).
pub(super) fn chain_rules(
    t: &ir::Table,
    c: &ir::Chain,
    d: &Decls<'_>,
    src: &SourceMap,
    opts: &Options,
    depth: usize,
) -> Vec<String> {
    c.rules
        .iter()
        .map(|r| {
            let text = match d.rules.get(&r.span) {
                Some(a) => rule(a, t.family, src, opts),
                None => r.text.clone(),
            };
            let text = inline(&text, t, d, src, opts, depth);
            let text = nat_family(text, t, d);
            if opts.handles && depth == 2 {
                format!("{text} # handle {}", r.handle)
            } else {
                text
            }
        })
        .collect()
}

/// In an `ip` or `ip6` table nft names a NAT statement's family only when its map gives an
/// address and a port, or a range: `dnat ip to numgen inc mod 2 map @m` lists as `dnat to
/// numgen inc mod 2 map @m` when `m` maps to single addresses.
fn nat_family(text: String, t: &ir::Table, d: &Decls<'_>) -> String {
    if !matches!(t.family, ir::Family::Ip | ir::Family::Ip6) {
        return text;
    }
    let fam = t.family.name();
    let words: Vec<&str> = text.split(' ').collect();
    let Some(i) = words
        .windows(3)
        .position(|w| matches!(w[0], "dnat" | "snat") && w[1] == fam && w[2] == "to")
    else {
        return text;
    };
    // the named map it reads
    let Some(m) = words[i..]
        .windows(2)
        .find(|w| w[0] == "map" && w[1].starts_with('@'))
        .map(|w| w[1].trim_start_matches('@').trim_matches('"'))
    else {
        return text;
    };
    let Some(set) = t.sets.iter().find(|s| s.name == m) else {
        return text;
    };
    let tk = format!("{} {}", t.family.name(), t.name);
    let interval = d
        .sets
        .get(&(tk, set.name.clone()))
        .is_some_and(|decl| decl.data_interval);
    if set.data_types.len() != 1 || interval {
        return text;
    }
    let mut w: Vec<&str> = words;
    w.remove(i + 1);
    w.join(" ")
}

/// `text` with each `jump __chainN` / `goto __chainN` replaced by the chain's rules in braces.
fn inline(
    text: &str,
    t: &ir::Table,
    d: &Decls<'_>,
    src: &SourceMap,
    opts: &Options,
    depth: usize,
) -> String {
    if depth > 16 {
        return text.to_string();
    }
    let words: Vec<&str> = text.split(' ').collect();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let w = words[i];
        if matches!(w, "jump" | "goto") && i + 1 < words.len() && is_anonymous(words[i + 1]) {
            if let Some(ci) = t.chain(words[i + 1]) {
                let pad = "\t".repeat(depth + 1);
                let mut s = format!("{w} {{\n");
                for r in chain_rules(t, &t.chains[ci], d, src, opts, depth + 1) {
                    s.push_str(&format!("{pad}{r}\n"));
                }
                s.push_str(&"\t".repeat(depth));
                s.push('}');
                out.push(s);
                i += 2;
                continue;
            }
        }
        out.push(w.to_string());
        i += 1;
    }
    out.join(" ")
}
