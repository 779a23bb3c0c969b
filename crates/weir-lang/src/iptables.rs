//! Import of `iptables-save` / `ip6tables-save` output.
//!
//! The importer translates the text into weir's nftables syntax (which [`crate::load_str`] then
//! parses and checks), so every feature of the language and the engine applies unchanged:
//!
//! - each `*table` (`filter`, `nat`, `raw`, `mangle`) becomes `table ip NAME` (`ip6` for
//!   ip6tables-save input), its built-in chains become base chains at the kernel's hooks and
//!   priorities, `:CHAIN POLICY [p:b]` gives the policy, user chains become regular chains;
//! - each `-A` line becomes one nft rule (two for `-m multiport --ports`, see below), in order,
//!   ending with `comment "iptables line N"` (plus the rule's own `-m comment`).
//!
//! iptables checks the "ip part" of a rule (`-s -d -i -o -p`) before its `-m` matches, and the
//! matches in order; the translation keeps that order, so stateful matches (`-m limit`) consume
//! tokens exactly when iptables would.
//!
//! `-m multiport --ports S` (source OR destination port in S) has no single-rule nft form; it
//! becomes two rules with mutually exclusive gates: `tcp sport S ...` and
//! `tcp sport != S ... tcp dport S ...`, so a packet runs the rule's statements at most once.
//!
//! Anything not supported is an error naming the line, the option and what is supported, or,
//! with [`IptOptions::skip_unsupported`], the rule is dropped and listed in
//! [`IptImport::skipped`]. No input makes the importer panic.

use self::ipset::parse_ipsets;
use self::lexer::split_words;
use self::rule::{parse_rule, RuleErr};
use self::tables::{base_chain, Table};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

mod ipset;
mod lexer;
mod rule;
mod tables;
mod targets;
mod values;

/// How to import.
#[derive(Debug, Clone, Default)]
pub struct IptOptions {
    /// Drop rules that use an unsupported option (recorded in [`IptImport::skipped`]) instead of
    /// failing.
    pub skip_unsupported: bool,
    /// The input is `ip6tables-save` output (tables become `ip6` tables).
    pub family_v6: bool,
    /// `ipset save` output: the sets named by `-m set --match-set` take their type and elements
    /// from it. Without it, referenced sets are declared empty.
    pub ipsets: Option<String>,
}

/// The result of an import.
#[derive(Debug, Clone, Default)]
pub struct IptImport {
    /// The ruleset in nft syntax.
    pub nft: String,
    /// How many `-A` rules were translated.
    pub rules: usize,
    /// Rules dropped because of `skip_unsupported`: (1-based line, why).
    pub skipped: Vec<(usize, String)>,
}

const SUPPORTED_MATCH_OPTS: &str = "-s, -d, -p, -i, -o, --sport, --dport, -m multiport \
--sports/--dports/--ports, -m state --state, -m conntrack --ctstate, -m iprange \
--src-range/--dst-range, -m set --match-set NAME src|dst, -m tcp --tcp-flags/--syn, -m icmp \
--icmp-type, -m icmp6 --icmpv6-type, -m mark --mark, -m comment --comment, -m limit \
--limit/--limit-burst, -m length --length, -j, -g, -c";
const SUPPORTED_MODULES: &str = "tcp, udp, sctp, udplite, icmp, icmp6, multiport, state, \
conntrack, iprange, set, mark, comment, limit, length";
const SUPPORTED_TARGETS: &str = "ACCEPT, DROP, REJECT, RETURN, LOG, MARK, DNAT, SNAT, \
MASQUERADE, REDIRECT, NOTRACK, CT --notrack, or a user chain of the table";
const SUPPORTED_TABLES: &str = "filter, nat, raw, mangle";

/// Import iptables-save text. `name` is used in error messages (`name:LINE: message`).
pub fn import_iptables(
    text: &str,
    name: &str,
    opts: &IptOptions,
) -> Result<IptImport, Vec<String>> {
    let mut errors = Vec::new();
    let ipsets = match &opts.ipsets {
        Some(t) => match parse_ipsets(t) {
            Ok(s) => Some(s),
            Err(e) => {
                errors.extend(e.into_iter().map(|(l, m)| format!("ipsets:{l}: {m}")));
                None
            }
        },
        None => None,
    };
    let mut out = IptImport::default();
    let mut cur: Option<Table> = None;
    // an unsupported table being skipped: its rules are dropped until COMMIT
    let mut skipping_table: Option<String> = None;
    let mut tables: Vec<Table> = Vec::new();
    let fam = if opts.family_v6 { "ip6" } else { "ip" };

    for (idx, raw) in text.lines().enumerate() {
        let ln = idx + 1;
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut err = |m: String| errors.push(format!("{name}:{ln}: {m}"));
        if let Some(t) = line.strip_prefix('*') {
            if cur.is_some() || skipping_table.is_some() {
                err("a new table starts before COMMIT of the previous one".into());
            }
            let t = t.trim();
            match t {
                "filter" | "nat" | "raw" | "mangle" => {
                    if tables.iter().any(|x| x.name == t) {
                        err(format!("table '{t}' appears twice"));
                    }
                    cur = Some(Table::new(t));
                    skipping_table = None;
                }
                _ => {
                    let why = format!("unsupported table '*{t}' (supported: {SUPPORTED_TABLES})");
                    if opts.skip_unsupported {
                        out.skipped.push((ln, why));
                        skipping_table = Some(t.to_string());
                        cur = None;
                    } else {
                        err(why);
                        skipping_table = Some(t.to_string());
                        cur = None;
                    }
                }
            }
            continue;
        }
        if line == "COMMIT" {
            if let Some(t) = cur.take() {
                tables.push(t);
            } else if skipping_table.take().is_none() {
                err("COMMIT outside a table".into());
            }
            continue;
        }
        if skipping_table.is_some() {
            if opts.skip_unsupported && (line.starts_with("-A") || line.starts_with('[')) {
                out.skipped.push((ln, "in an unsupported table".into()));
            }
            continue;
        }
        let Some(table) = cur.as_mut() else {
            err(format!(
                "'{}' outside a table (expected '*filter', '*nat', '*raw' or '*mangle' first)",
                short(line)
            ));
            continue;
        };
        if let Some(decl) = line.strip_prefix(':') {
            if let Err(m) = table.declare(decl) {
                err(m);
            }
            continue;
        }
        // `-N CHAIN` (as iptables-restore accepts it): a user chain, like `:CHAIN - [0:0]`
        if let Some(rest) = line
            .strip_prefix("-N ")
            .or(line.strip_prefix("--new-chain "))
        {
            let name = rest.trim();
            if name.split_whitespace().count() != 1 {
                err(format!("-N takes one chain name, found '{}'", short(name)));
            } else if let Err(m) = table.declare(&format!("{name} -")) {
                err(m);
            }
            continue;
        }
        let words = match split_words(line) {
            Ok(w) => w,
            Err(m) => {
                err(m);
                continue;
            }
        };
        table.line = ln;
        match parse_rule(&words, table, opts.family_v6) {
            Ok(r) => table.rules.push((ln, r)),
            Err(RuleErr::Fatal(m)) => err(m),
            Err(RuleErr::Unsupported(m)) => {
                if opts.skip_unsupported {
                    out.skipped.push((ln, m));
                } else {
                    err(m);
                }
            }
        }
    }
    if cur.is_some() || skipping_table.is_some() {
        let ln = text.lines().count().max(1);
        errors.push(format!("{name}:{ln}: the last table has no COMMIT"));
        if let Some(t) = cur.take() {
            tables.push(t);
        }
    }

    // rules that jump to chains that do not exist
    for t in &mut tables {
        let chains: BTreeSet<String> = t.chains.iter().map(|c| c.name.clone()).collect();
        let mut kept = Vec::new();
        for (ln, r) in std::mem::take(&mut t.rules) {
            if !chains.contains(&r.chain) {
                errors.push(format!(
                    "{name}:{ln}: chain '{}' is not declared in table '{}' (add ':{} - [0:0]')",
                    r.chain, t.name, r.chain
                ));
                continue;
            }
            if let Some(target) = &r.jump_to {
                if !chains.contains(target) {
                    let m =
                        format!("unsupported target '{target}' (supported: {SUPPORTED_TARGETS})");
                    if opts.skip_unsupported {
                        out.skipped.push((ln, m));
                    } else {
                        errors.push(format!("{name}:{ln}: {m}"));
                    }
                    continue;
                }
            }
            kept.push((ln, r));
        }
        t.rules = kept;
    }

    // sets
    let mut set_decls: BTreeMap<String, String> = BTreeMap::new(); // table -> text
    for t in &tables {
        let mut s = String::new();
        for (set, ln) in &t.sets {
            let ty = if opts.family_v6 {
                "ipv6_addr"
            } else {
                "ipv4_addr"
            };
            let mut elems: Vec<String> = Vec::new();
            if let Some(ipsets) = &ipsets {
                match ipsets.get(set) {
                    None => {
                        errors.push(format!(
                            "{name}:{ln}: ipset '{set}' is not in the ipset save file"
                        ));
                        continue;
                    }
                    Some(ip) => {
                        if ip.v6 != opts.family_v6 {
                            errors.push(format!(
                                "{name}:{ln}: ipset '{set}' is of family {} but the rules are {}",
                                if ip.v6 { "inet6" } else { "inet" },
                                if opts.family_v6 { "IPv6" } else { "IPv4" }
                            ));
                            continue;
                        }
                        elems = ip.elems.clone();
                    }
                }
            }
            let _ = write!(s, "\tset {set} {{ type {ty}; flags interval;");
            if !elems.is_empty() {
                let _ = write!(s, " elements = {{ {} }}", elems.join(", "));
            }
            s.push_str(" }\n");
        }
        set_decls.insert(t.name.clone(), s);
    }

    if !errors.is_empty() {
        return Err(errors);
    }

    let mut nft = String::new();
    let _ = writeln!(nft, "# imported from {} by weir", sanitize(name));
    for t in &tables {
        let _ = writeln!(nft, "table {fam} {} {{", t.name);
        if let Some(s) = set_decls.get(&t.name) {
            nft.push_str(s);
        }
        for c in &t.chains {
            let _ = writeln!(nft, "\tchain {} {{", c.name);
            if let Some((ty, hook, prio)) = base_chain(&t.name, &c.name) {
                let pol = c.policy.as_deref().unwrap_or("accept");
                let _ = writeln!(
                    nft,
                    "\t\ttype {ty} hook {hook} priority {prio}; policy {pol};"
                );
            }
            for (ln, r) in t.rules.iter().filter(|(_, r)| r.chain == c.name) {
                out.rules += 1;
                let mut comment = format!("iptables line {ln}");
                if let Some(uc) = &r.comment {
                    comment.push_str(": ");
                    comment.push_str(uc);
                }
                for variant in &r.variants {
                    let mut parts: Vec<&str> = variant.iter().map(|s| s.as_str()).collect();
                    parts.push("counter");
                    parts.extend(r.stmts.iter().map(|s| s.as_str()));
                    let _ = writeln!(nft, "\t\t{} comment \"{comment}\"", parts.join(" "));
                }
            }
            nft.push_str("\t}\n");
        }
        nft.push_str("}\n");
    }
    // the importer writes only what weir's checker accepts; what slips through (a NAT target
    // in a user chain reached from the wrong hook, ...) is an error here, not a ruleset that
    // fails to load later
    if let Err((sources, diags)) = crate::load_str("imported.nft", &nft) {
        return Err(vec![format!(
            "{name}: the translated ruleset does not check (iptables-restore would refuse it too, \
             or the importer is wrong):\n{}",
            crate::diag::render_all(&diags, &sources)
        )]);
    }
    out.nft = nft;
    Ok(out)
}

fn short(s: &str) -> String {
    let mut o: String = s.chars().take(40).collect();
    if s.chars().count() > 40 {
        o.push_str("...");
    }
    o
}

/// Make text safe inside an nft double-quoted string (no quotes, no newlines, no control chars).
fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '"' => '\'',
            c if c.is_control() => ' ',
            c => c,
        })
        .collect()
}
