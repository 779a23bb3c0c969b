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
            if opts.handles && depth == 2 {
                format!("{text} # handle {}", r.handle)
            } else {
                text
            }
        })
        .collect()
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
