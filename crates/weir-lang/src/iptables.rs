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

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};

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

/// The built-in chains: (chain type, hook, priority) per table and chain.
fn base_chain(table: &str, chain: &str) -> Option<(&'static str, &'static str, &'static str)> {
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

struct Chain {
    name: String,
    policy: Option<String>,
}

struct Table {
    name: String,
    chains: Vec<Chain>,
    rules: Vec<(usize, Rule)>,
    /// named sets used, with the first line that uses them
    sets: BTreeMap<String, usize>,
    /// the line being parsed (for `sets`)
    line: usize,
}

impl Table {
    fn new(name: &str) -> Table {
        Table {
            name: name.to_string(),
            chains: Vec::new(),
            rules: Vec::new(),
            sets: BTreeMap::new(),
            line: 0,
        }
    }

    /// `:NAME POLICY [p:b]`
    fn declare(&mut self, decl: &str) -> Result<(), String> {
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

fn check_chain_name(n: &str) -> Result<(), String> {
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

fn is_counters(s: &str) -> bool {
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

/// Split a rule line like a shell would (double quotes group; `\` escapes inside them).
fn split_words(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        None => return Err("unterminated '\"'".into()),
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(e) => cur.push(e),
                            None => return Err("unterminated '\"'".into()),
                        },
                        Some(x) => cur.push(x),
                    }
                }
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    Ok(words)
}

enum RuleErr {
    /// Not an iptables-save rule at all (always an error).
    Fatal(String),
    /// An unsupported or invalid option (skippable).
    Unsupported(String),
}

use RuleErr::{Fatal, Unsupported};

struct Rule {
    chain: String,
    /// the match items, once or twice (multiport --ports)
    variants: Vec<Vec<String>>,
    /// statements and the verdict
    stmts: Vec<String>,
    comment: Option<String>,
    /// the user chain of `-j`/`-g`
    jump_to: Option<String>,
}

#[derive(Clone, Copy, PartialEq)]
enum Proto {
    None,
    /// a protocol with ports: the nft selector word (tcp, udp, sctp, th)
    Ports(&'static str),
    Icmp,
    Icmp6,
    Other,
}

/// Parses `-A CHAIN ...`.
fn parse_rule(words: &[String], table: &mut Table, v6: bool) -> Result<Rule, RuleErr> {
    let mut i = 0;
    if words.first().is_some_and(|w| is_counters(w)) {
        i += 1;
    }
    match words.get(i).map(|s| s.as_str()) {
        Some("-A") | Some("--append") => {}
        Some(w) => {
            return Err(Fatal(format!(
                "expected '-A CHAIN ...', ':CHAIN POLICY', COMMIT or '*table', found '{}'",
                short(w)
            )))
        }
        None => return Err(Fatal("an empty rule".into())),
    }
    let chain = words
        .get(i + 1)
        .ok_or_else(|| Fatal("-A without a chain name".into()))?
        .clone();
    i += 2;
    let sel = if v6 { "ip6" } else { "ip" };
    let mut ip_part: Vec<String> = Vec::new();
    let mut matches: Vec<String> = Vec::new();
    let mut ports_or: Option<(usize, String, String)> = None; // (position in matches, gate set, proto)
    let mut stmts: Vec<String> = Vec::new();
    let mut comment: Option<String> = None;
    let mut jump_to = None;
    let mut proto = Proto::None;
    let mut modules: Vec<String> = Vec::new();
    let mut target: Option<(String, bool)> = None; // (name, goto)
    let mut tgt_opts: Vec<(bool, String, Vec<String>)> = Vec::new();
    let mut seen_p = false;
    // iptables refuses a negated -s/-d when -s or -d is a list of addresses
    let (mut addr_negated, mut addr_list) = (false, false);

    let mut neg = false;
    while i < words.len() {
        let w = words[i].as_str();
        i += 1;
        if w == "!" {
            if neg {
                return Err(Unsupported("'! !' (double negation)".into()));
            }
            neg = true;
            continue;
        }
        // one argument, with the old `-s ! x` negation form
        let arg = |neg: &mut bool, i: &mut usize| -> Result<String, RuleErr> {
            if words.get(*i).map(|s| s.as_str()) == Some("!") {
                *neg = true;
                *i += 1;
            }
            let a = words
                .get(*i)
                .ok_or_else(|| Unsupported(format!("option '{w}' needs a value")))?;
            *i += 1;
            Ok(a.clone())
        };
        if target.is_some() {
            // target options
            if !w.starts_with('-') {
                return Err(Unsupported(format!(
                    "unexpected '{}' after the target",
                    short(w)
                )));
            }
            let mut vals = Vec::new();
            while let Some(v) = words.get(i) {
                if v.starts_with("--") || v == "!" {
                    break;
                }
                vals.push(v.clone());
                i += 1;
            }
            tgt_opts.push((neg, w.to_string(), vals));
            neg = false;
            continue;
        }
        let n = neg;
        neg = false;
        let op = |n: bool| if n { "!= " } else { "" };
        match w {
            "-s" | "--source" | "--src" | "-d" | "--destination" | "--dst" => {
                let mut n = n;
                let a = arg(&mut n, &mut i)?;
                let dir = if w.starts_with("-s") || w.starts_with("--s") {
                    "saddr"
                } else {
                    "daddr"
                };
                let list: Result<Vec<String>, String> = a.split(',').map(|x| addr(x, v6)).collect();
                let list = list.map_err(|e| Unsupported(format!("option '{w}': {e}")))?;
                addr_negated |= n;
                addr_list |= list.len() > 1;
                if addr_negated && addr_list {
                    // iptables expands lists into one rule per address pair, so a negation
                    // would mean "not a OR not b": iptables refuses it
                    return Err(Unsupported(format!(
                        "option '{w}': '!' with several addresses (iptables refuses it: '!' is not allowed with multiple source or destination IP addresses)"
                    )));
                }
                if list.iter().any(|x| x == "*") {
                    // 0.0.0.0/0: matches everything (or nothing, negated)
                    if n {
                        return Err(Unsupported(format!("option '! {w} 0/0' never matches")));
                    }
                    continue;
                }
                ip_part.push(format!("{sel} {dir} {}{}", op(n), set_or_one(&list)));
            }
            "-p" | "--protocol" => {
                let mut n = n;
                let a = arg(&mut n, &mut i)?;
                if seen_p {
                    return Err(Unsupported("'-p' given twice".into()));
                }
                seen_p = true;
                let (nft, p) = protocol(&a, v6).map_err(Unsupported)?;
                if let Some(nft) = nft {
                    ip_part.push(format!("meta l4proto {}{nft}", op(n)));
                    if !n {
                        proto = p;
                    }
                } else if n {
                    return Err(Unsupported("'! -p all' never matches".into()));
                }
            }
            "-i" | "--in-interface" | "-o" | "--out-interface" => {
                let mut n = n;
                let a = arg(&mut n, &mut i)?;
                let input = w == "-i" || w == "--in-interface";
                // as iptables: no output interface before routing, no input one on output
                match (input, chain.as_str()) {
                    (false, "PREROUTING" | "INPUT") | (true, "OUTPUT" | "POSTROUTING") => {
                        return Err(Unsupported(format!(
                            "'{w}' cannot be used in chain {chain}"
                        )))
                    }
                    _ => {}
                }
                let f = if input { "iifname" } else { "oifname" };
                ip_part.push(format!(
                    "{f} {}\"{}\"",
                    op(n),
                    iface(&a).map_err(Unsupported)?
                ));
            }
            "-f" | "--fragment" => {
                return Err(Unsupported(format!(
                    "unsupported option '{w}' (supported: {SUPPORTED_MATCH_OPTS})"
                )))
            }
            "-m" | "--match" => {
                let a = arg(&mut false, &mut i)?;
                match a.as_str() {
                    "tcp" | "udp" | "sctp" | "udplite" => {
                        let want = match a.as_str() {
                            "tcp" => "tcp",
                            "udp" => "udp",
                            "sctp" => "sctp",
                            _ => "th",
                        };
                        if proto != Proto::Ports(want) {
                            return Err(Unsupported(format!("'-m {a}' needs '-p {a}' before it")));
                        }
                    }
                    "icmp" | "icmp6" | "icmpv6" | "multiport" | "state" | "conntrack"
                    | "iprange" | "set" | "mark" | "comment" | "limit" | "length" => {}
                    _ => {
                        return Err(Unsupported(format!(
                            "unsupported match '-m {}' (supported: {SUPPORTED_MODULES})",
                            short(&a)
                        )))
                    }
                }
                modules.push(a);
            }
            "--sport" | "--source-port" | "--dport" | "--destination-port" => {
                let mut n = n;
                let a = arg(&mut n, &mut i)?;
                let Proto::Ports(p) = proto else {
                    return Err(Unsupported(format!(
                        "option '{w}' needs '-p tcp', '-p udp', '-p sctp' or '-p udplite'"
                    )));
                };
                let dir = if w == "--sport" || w == "--source-port" {
                    "sport"
                } else {
                    "dport"
                };
                let r = port_range(&a).map_err(|e| Unsupported(format!("option '{w}': {e}")))?;
                matches.push(format!("{p} {dir} {}{r}", op(n)));
            }
            "--sports" | "--source-ports" | "--dports" | "--destination-ports" | "--ports" => {
                let mut n = n;
                let a = arg(&mut n, &mut i)?;
                need(&modules, "multiport", w)?;
                let Proto::Ports(p) = proto else {
                    return Err(Unsupported(format!(
                        "option '{w}' needs '-p tcp', '-p udp', '-p sctp' or '-p udplite'"
                    )));
                };
                let list: Result<Vec<String>, String> = a.split(',').map(port_range).collect();
                let list = list.map_err(|e| Unsupported(format!("option '{w}': {e}")))?;
                if list.len() > 15 {
                    return Err(Unsupported(format!(
                        "option '{w}': more than 15 ports (multiport's limit)"
                    )));
                }
                let set = set_or_one(&list);
                if w == "--ports" {
                    if n {
                        matches.push(format!("{p} sport != {set} {p} dport != {set}"));
                    } else {
                        if ports_or.is_some() {
                            return Err(Unsupported("'--ports' given twice".into()));
                        }
                        ports_or = Some((matches.len(), set, p.to_string()));
                    }
                } else {
                    let dir = if w.starts_with("--s") {
                        "sport"
                    } else {
                        "dport"
                    };
                    matches.push(format!("{p} {dir} {}{set}", op(n)));
                }
            }
            "--state" | "--ctstate" => {
                let mut n = n;
                let a = arg(&mut n, &mut i)?;
                need(
                    &modules,
                    if w == "--state" { "state" } else { "conntrack" },
                    w,
                )?;
                let mut states = Vec::new();
                for s in a.split(',') {
                    let st = match s {
                        "NEW" => "new",
                        "ESTABLISHED" => "established",
                        "RELATED" => "related",
                        "INVALID" => "invalid",
                        "UNTRACKED" => "untracked",
                        _ => {
                            return Err(Unsupported(format!(
                                "option '{w}': unsupported state '{}' (supported: NEW, ESTABLISHED, RELATED, INVALID, UNTRACKED)",
                                short(s)
                            )))
                        }
                    };
                    if !states.contains(&st) {
                        states.push(st);
                    }
                }
                matches.push(format!("ct state {}{}", op(n), states.join(",")));
            }
            "--src-range" | "--dst-range" => {
                let mut n = n;
                let a = arg(&mut n, &mut i)?;
                need(&modules, "iprange", w)?;
                let (lo, hi) = a.split_once('-').ok_or_else(|| {
                    Unsupported(format!("option '{w}': '{}' is not a range a-b", short(&a)))
                })?;
                let lo =
                    plain_addr(lo, v6).map_err(|e| Unsupported(format!("option '{w}': {e}")))?;
                let hi =
                    plain_addr(hi, v6).map_err(|e| Unsupported(format!("option '{w}': {e}")))?;
                if lo.1 > hi.1 {
                    return Err(Unsupported(format!(
                        "option '{w}': empty range '{}'",
                        short(&a)
                    )));
                }
                let dir = if w == "--src-range" { "saddr" } else { "daddr" };
                matches.push(format!("{sel} {dir} {}{}-{}", op(n), lo.0, hi.0));
            }
            "--match-set" | "--set" => {
                let mut n = n;
                let sname = arg(&mut n, &mut i)?;
                let flags = arg(&mut n, &mut i)?;
                need(&modules, "set", w)?;
                let ok = !sname.is_empty()
                    && sname.len() <= 31
                    && sname
                        .bytes()
                        .next()
                        .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
                    && sname
                        .bytes()
                        .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-');
                if !ok {
                    return Err(Unsupported(format!(
                        "option '{w}': unsupported set name '{}' (supported: letters, digits, '_', '-')",
                        short(&sname)
                    )));
                }
                let dir = match flags.as_str() {
                    "src" => "saddr",
                    "dst" => "daddr",
                    _ => {
                        return Err(Unsupported(format!(
                            "option '{w}': unsupported flags '{}' (supported: src, dst)",
                            short(&flags)
                        )))
                    }
                };
                table.sets.entry(sname.clone()).or_insert(table.line);
                matches.push(format!("{sel} {dir} {}@{sname}", op(n)));
            }
            "--tcp-flags" | "--syn" => {
                let (mask, comp, n) = if w == "--syn" {
                    (tcp_flags("SYN,RST,ACK,FIN"), tcp_flags("SYN"), n)
                } else {
                    let mut n = n;
                    let m = arg(&mut n, &mut i)?;
                    let c = arg(&mut n, &mut i)?;
                    (tcp_flags(&m), tcp_flags(&c), n)
                };
                if proto != Proto::Ports("tcp") {
                    return Err(Unsupported(format!("option '{w}' needs '-p tcp'")));
                }
                let mask = mask.map_err(|e| Unsupported(format!("option '{w}': {e}")))?;
                let comp = comp.map_err(|e| Unsupported(format!("option '{w}': {e}")))?;
                // the kernel compares `flags & mask == comp` as given (xt_tcp): a comp with
                // bits outside the mask never matches, so it is not masked here
                matches.push(format!(
                    "tcp flags & {:#04x} {} {:#04x}",
                    mask,
                    if n { "!=" } else { "==" },
                    comp
                ));
            }
            "--icmp-type" | "--icmpv6-type" => {
                let mut n = n;
                let a = arg(&mut n, &mut i)?;
                let (sel, want) = if w == "--icmp-type" {
                    ("icmp", Proto::Icmp)
                } else {
                    ("icmpv6", Proto::Icmp6)
                };
                if proto != want {
                    return Err(Unsupported(format!("option '{w}' needs '-p {sel}'")));
                }
                let (t, c) = icmp_type(&a, sel == "icmpv6")
                    .map_err(|e| Unsupported(format!("option '{w}': {e}")))?;
                match (t, c, n) {
                    (None, _, false) => {}
                    (None, _, true) => {
                        return Err(Unsupported(format!("option '! {w} any' never matches")))
                    }
                    (Some(t), None, _) => matches.push(format!("{sel} type {}{t}", op(n))),
                    (Some(t), Some(c), false) => {
                        matches.push(format!("{sel} type {t} {sel} code {c}"))
                    }
                    (Some(_), Some(_), true) => {
                        return Err(Unsupported(format!(
                            "option '! {w} TYPE/CODE' (supported: a negated type without code)"
                        )))
                    }
                }
            }
            "--mark" => {
                let mut n = n;
                let a = arg(&mut n, &mut i)?;
                need(&modules, "mark", w)?;
                let (v, m) = mark(&a).map_err(|e| Unsupported(format!("option '{w}': {e}")))?;
                let cmp = if n { "!=" } else { "==" };
                match m {
                    None | Some(0xffff_ffff) => matches.push(format!("meta mark {cmp} {v:#x}")),
                    // xt_mark compares `mark & mask == value` as given: a value with bits
                    // outside the mask never matches, so it is not masked here
                    Some(m) => matches.push(format!("meta mark & {m:#x} {cmp} {v:#x}")),
                }
            }
            "--comment" => {
                let a = arg(&mut false, &mut i)?;
                need(&modules, "comment", w)?;
                let c = sanitize(&a);
                comment = Some(match comment.take() {
                    Some(old) => format!("{old}; {c}"),
                    None => c,
                });
            }
            "--limit" | "--limit-burst" => {
                need(&modules, "limit", w)?;
                if n {
                    return Err(Unsupported(format!("option '! {w}'")));
                }
                let a = arg(&mut false, &mut i)?;
                // rate and burst are collected into one limit statement
                let (mut rate, mut burst) = match matches.last() {
                    Some(l)
                        if l.starts_with("limit rate ")
                            && modules.last().map(|s| s.as_str()) == Some("limit") =>
                    {
                        let l = matches.pop().unwrap_or_default();
                        parse_limit_back(&l)
                    }
                    _ => ("3/hour".to_string(), 5),
                };
                if w == "--limit" {
                    rate = limit_rate(&a).map_err(|e| Unsupported(format!("option '{w}': {e}")))?;
                } else {
                    burst = a
                        .parse::<u32>()
                        .ok()
                        .filter(|b| *b > 0 && *b <= 10_000)
                        .ok_or_else(|| {
                            Unsupported(format!(
                                "option '{w}': '{}' is not a burst (1-10000)",
                                short(&a)
                            ))
                        })?;
                }
                matches.push(format!("limit rate {rate} burst {burst} packets"));
            }
            "--length" => {
                let mut n = n;
                let a = arg(&mut n, &mut i)?;
                need(&modules, "length", w)?;
                let r =
                    num_range(&a, 0xffff).map_err(|e| Unsupported(format!("option '{w}': {e}")))?;
                matches.push(format!("meta length {}{r}", op(n)));
            }
            "-c" | "--set-counters" => {
                arg(&mut false, &mut i)?;
                arg(&mut false, &mut i)?;
            }
            "-j" | "--jump" | "-g" | "--goto" => {
                if n {
                    return Err(Unsupported(format!("'! {w}'")));
                }
                let a = arg(&mut false, &mut i)?;
                target = Some((a, w == "-g" || w == "--goto"));
            }
            _ => {
                let what = if w.starts_with('-') { "option" } else { "word" };
                return Err(Unsupported(format!(
                    "unsupported {what} '{}' (supported: {SUPPORTED_MATCH_OPTS})",
                    short(w)
                )));
            }
        }
    }
    if neg {
        return Err(Unsupported("a '!' at the end of the rule".into()));
    }

    // the target
    if let Some((t, goto)) = target {
        let mut opts = TargetOpts {
            opts: tgt_opts,
            target: t.clone(),
        };
        let tn = table.name.clone();
        let nat_only = |what: &str| -> Result<(), RuleErr> {
            if tn != "nat" {
                return Err(Unsupported(format!(
                    "target {what} is only valid in the nat table"
                )));
            }
            // the built-in chains each target is usable from (user chains are checked with
            // the whole ruleset)
            let ok: &[&str] = match what {
                "SNAT" => &["POSTROUTING", "INPUT"],
                "MASQUERADE" => &["POSTROUTING"],
                _ => &["PREROUTING", "OUTPUT"],
            };
            if base_chain("nat", &chain).is_some() && !ok.contains(&chain.as_str()) {
                return Err(Unsupported(format!(
                    "target {what} is only usable from {}, not {chain}",
                    ok.join(" or ")
                )));
            }
            Ok(())
        };
        if goto && is_builtin_target(&t) {
            return Err(Unsupported(format!("'-g {t}': goto needs a user chain")));
        }
        match t.as_str() {
            "ACCEPT" => stmts.push("accept".into()),
            "DROP" => stmts.push("drop".into()),
            "RETURN" => stmts.push("return".into()),
            "REJECT" => {
                let with = opts.take1("--reject-with")?;
                let s = reject_with(with.as_deref(), v6, proto)?;
                stmts.push(s);
            }
            "LOG" => {
                let mut s = String::from("log");
                if let Some(p) = opts.take1("--log-prefix")? {
                    let p: String = sanitize(&p).chars().take(127).collect();
                    let _ = write!(s, " prefix \"{p}\"");
                }
                if let Some(l) = opts.take1("--log-level")? {
                    let lv = match l.as_str() {
                        "0" | "emerg" => "emerg",
                        "1" | "alert" => "alert",
                        "2" | "crit" => "crit",
                        "3" | "err" | "error" => "err",
                        "4" | "warn" | "warning" => "warn",
                        "5" | "notice" => "notice",
                        "6" | "info" => "info",
                        "7" | "debug" => "debug",
                        _ => {
                            return Err(Unsupported(format!(
                                "LOG --log-level '{}' (supported: 0-7 or emerg..debug)",
                                short(&l)
                            )))
                        }
                    };
                    let _ = write!(s, " level {lv}");
                }
                stmts.push(s);
            }
            "MARK" => {
                let s = if let Some(a) = opts.take1("--set-xmark")? {
                    let (v, m) =
                        mark(&a).map_err(|e| Unsupported(format!("MARK --set-xmark: {e}")))?;
                    let m = m.unwrap_or(0xffff_ffff);
                    if m == 0xffff_ffff {
                        format!("meta mark set {v:#x}")
                    } else {
                        format!("meta mark set meta mark & {:#x} ^ {v:#x}", !m)
                    }
                } else if let Some(a) = opts.take1("--set-mark")? {
                    let (v, m) =
                        mark(&a).map_err(|e| Unsupported(format!("MARK --set-mark: {e}")))?;
                    let m = m.unwrap_or(0xffff_ffff);
                    if m == 0xffff_ffff {
                        format!("meta mark set {v:#x}")
                    } else {
                        format!("meta mark set meta mark & {:#x} | {v:#x}", !m)
                    }
                } else if let Some(a) = opts.take1("--and-mark")? {
                    let v =
                        num_u32(&a).map_err(|e| Unsupported(format!("MARK --and-mark: {e}")))?;
                    format!("meta mark set meta mark & {v:#x}")
                } else if let Some(a) = opts.take1("--or-mark")? {
                    let v = num_u32(&a).map_err(|e| Unsupported(format!("MARK --or-mark: {e}")))?;
                    format!("meta mark set meta mark | {v:#x}")
                } else if let Some(a) = opts.take1("--xor-mark")? {
                    let v =
                        num_u32(&a).map_err(|e| Unsupported(format!("MARK --xor-mark: {e}")))?;
                    format!("meta mark set meta mark ^ {v:#x}")
                } else {
                    return Err(Unsupported(
                        "MARK needs --set-xmark, --set-mark, --and-mark, --or-mark or --xor-mark"
                            .into(),
                    ));
                };
                stmts.push(s);
            }
            "DNAT" | "SNAT" => {
                nat_only(&t)?;
                let key = if t == "DNAT" {
                    "--to-destination"
                } else {
                    "--to-source"
                };
                let to = opts
                    .take1(key)?
                    .ok_or_else(|| Unsupported(format!("{t} needs {key}")))?;
                let to = nat_to(&to, v6).map_err(|e| Unsupported(format!("{t} {key}: {e}")))?;
                let mut s = format!("{} to {to}", t.to_lowercase());
                s.push_str(&opts.nat_flags()?);
                stmts.push(s);
            }
            "MASQUERADE" | "REDIRECT" => {
                nat_only(&t)?;
                let mut s = t.to_lowercase();
                if let Some(p) = opts.take1("--to-ports")? {
                    if !matches!(proto, Proto::Ports(_)) {
                        return Err(Unsupported(format!(
                            "{t} --to-ports needs '-p tcp', '-p udp', '-p sctp' or '-p udplite'"
                        )));
                    }
                    let r = num_range(&p.replace(':', "-"), 0xffff)
                        .map_err(|e| Unsupported(format!("{t} --to-ports: {e}")))?;
                    let _ = write!(s, " to :{r}");
                }
                s.push_str(&opts.nat_flags()?);
                stmts.push(s);
            }
            "NOTRACK" => {
                if tn != "raw" {
                    return Err(Unsupported(
                        "target NOTRACK is only valid in the raw table".into(),
                    ));
                }
                stmts.push("notrack".into());
            }
            "CT" => {
                if tn != "raw" {
                    return Err(Unsupported(
                        "target CT is only valid in the raw table".into(),
                    ));
                }
                if !opts.flag("--notrack") {
                    return Err(Unsupported(
                        "target CT: only 'CT --notrack' is supported".into(),
                    ));
                }
                stmts.push("notrack".into());
            }
            _ if is_builtin_target(&t)
                || t.chars().all(|c| c.is_ascii_uppercase() || c == '_')
                    && !table.chains.iter().any(|c| c.name == t) =>
            {
                return Err(Unsupported(format!(
                    "unsupported target '{}' (supported: {SUPPORTED_TARGETS})",
                    short(&t)
                )));
            }
            _ => {
                check_chain_name(&t).map_err(|_| {
                    Unsupported(format!(
                        "unsupported target '{}' (supported: {SUPPORTED_TARGETS})",
                        short(&t)
                    ))
                })?;
                if base_chain(&table.name, &t).is_some() {
                    return Err(Unsupported(format!(
                        "cannot jump to the built-in chain '{t}'"
                    )));
                }
                stmts.push(format!("{} {t}", if goto { "goto" } else { "jump" }));
                jump_to = Some(t.clone());
            }
        }
        opts.finish()?;
    }

    // the match variants
    let mut variants = Vec::new();
    match ports_or {
        None => {
            let mut v = ip_part;
            v.extend(matches);
            variants.push(v);
        }
        Some((pos, set, p)) => {
            let mut a = ip_part.clone();
            a.push(format!("{p} sport {set}"));
            a.extend(matches.iter().cloned());
            variants.push(a);
            let mut b = ip_part;
            b.push(format!("{p} sport != {set}"));
            let mut rest = matches;
            rest.insert(pos.min(rest.len()), format!("{p} dport {set}"));
            b.extend(rest);
            variants.push(b);
        }
    }
    Ok(Rule {
        chain,
        variants,
        stmts,
        comment,
        jump_to,
    })
}

fn is_builtin_target(t: &str) -> bool {
    matches!(
        t,
        "ACCEPT"
            | "DROP"
            | "RETURN"
            | "REJECT"
            | "LOG"
            | "MARK"
            | "DNAT"
            | "SNAT"
            | "MASQUERADE"
            | "REDIRECT"
            | "NOTRACK"
            | "CT"
            | "QUEUE"
            | "NFQUEUE"
            | "TCPMSS"
            | "CONNMARK"
            | "ULOG"
            | "NFLOG"
            | "TOS"
            | "DSCP"
            | "TTL"
            | "HL"
            | "TEE"
            | "CLASSIFY"
            | "SET"
            | "TPROXY"
            | "CHECKSUM"
            | "NETMAP"
            | "AUDIT"
            | "SECMARK"
            | "CONNSECMARK"
            | "TRACE"
            | "IDLETIMER"
            | "LED"
            | "RATEEST"
            | "SYNPROXY"
            | "HMARK"
            | "CLUSTERIP"
            | "ECN"
    )
}

fn need(modules: &[String], m: &str, opt: &str) -> Result<(), RuleErr> {
    if modules.iter().any(|x| x == m) {
        Ok(())
    } else {
        Err(Unsupported(format!(
            "option '{opt}' needs '-m {m}' before it"
        )))
    }
}

struct TargetOpts {
    opts: Vec<(bool, String, Vec<String>)>,
    target: String,
}

impl TargetOpts {
    fn take1(&mut self, key: &str) -> Result<Option<String>, RuleErr> {
        let Some(pos) = self.opts.iter().position(|(_, k, _)| k == key) else {
            return Ok(None);
        };
        let (n, k, v) = self.opts.remove(pos);
        if n {
            return Err(Unsupported(format!("'! {k}' for target {}", self.target)));
        }
        if v.len() != 1 {
            return Err(Unsupported(format!(
                "{} {k} needs exactly one value",
                self.target
            )));
        }
        if self.opts.iter().any(|(_, k2, _)| k2 == key) {
            return Err(Unsupported(format!("{} {k} given twice", self.target)));
        }
        Ok(v.into_iter().next())
    }

    fn flag(&mut self, key: &str) -> bool {
        match self
            .opts
            .iter()
            .position(|(n, k, v)| k == key && !n && v.is_empty())
        {
            Some(p) => {
                self.opts.remove(p);
                true
            }
            None => false,
        }
    }

    fn nat_flags(&mut self) -> Result<String, RuleErr> {
        let mut f = Vec::new();
        if self.flag("--random") {
            f.push("random");
        }
        if self.flag("--random-fully") {
            f.push("fully-random");
        }
        if self.flag("--persistent") {
            f.push("persistent");
        }
        Ok(if f.is_empty() {
            String::new()
        } else {
            format!(" {}", f.join(","))
        })
    }

    fn finish(self) -> Result<(), RuleErr> {
        if let Some((_, k, _)) = self.opts.first() {
            let sup = match self.target.as_str() {
                "REJECT" => "--reject-with",
                "LOG" => "--log-prefix, --log-level",
                "MARK" => "--set-xmark, --set-mark, --and-mark, --or-mark, --xor-mark",
                "DNAT" => "--to-destination, --random, --persistent",
                "SNAT" => "--to-source, --random, --random-fully, --persistent",
                "MASQUERADE" | "REDIRECT" => "--to-ports, --random",
                "CT" => "--notrack",
                _ => "none",
            };
            return Err(Unsupported(format!(
                "unsupported option '{}' for target {} (supported: {sup})",
                short(k),
                self.target
            )));
        }
        Ok(())
    }
}

fn reject_with(with: Option<&str>, v6: bool, proto: Proto) -> Result<String, RuleErr> {
    let w = with.unwrap_or(if v6 {
        "icmp6-port-unreachable"
    } else {
        "icmp-port-unreachable"
    });
    let s = match (v6, w) {
        (_, "tcp-reset" | "tcp-rst") => {
            if proto != Proto::Ports("tcp") {
                return Err(Unsupported(
                    "REJECT --reject-with tcp-reset needs '-p tcp'".into(),
                ));
            }
            "reject with tcp reset"
        }
        (false, "icmp-net-unreachable" | "net-unreach") => "reject with icmp type net-unreachable",
        (false, "icmp-host-unreachable" | "host-unreach") => {
            "reject with icmp type host-unreachable"
        }
        (false, "icmp-port-unreachable" | "port-unreach") => {
            "reject with icmp type port-unreachable"
        }
        (false, "icmp-proto-unreachable" | "proto-unreach") => {
            "reject with icmp type prot-unreachable"
        }
        (false, "icmp-net-prohibited" | "net-prohib") => "reject with icmp type net-prohibited",
        (false, "icmp-host-prohibited" | "host-prohib") => "reject with icmp type host-prohibited",
        (false, "icmp-admin-prohibited" | "admin-prohib") => {
            "reject with icmp type admin-prohibited"
        }
        (true, "icmp6-no-route" | "no-route") => "reject with icmpv6 type no-route",
        (true, "icmp6-adm-prohibited" | "adm-prohibited") => {
            "reject with icmpv6 type admin-prohibited"
        }
        (true, "icmp6-addr-unreachable" | "addr-unreach") => {
            "reject with icmpv6 type addr-unreachable"
        }
        (true, "icmp6-port-unreachable" | "port-unreach") => {
            "reject with icmpv6 type port-unreachable"
        }
        (true, "icmp6-policy-fail" | "policy-fail") => "reject with icmpv6 type policy-fail",
        (true, "icmp6-reject-route" | "reject-route") => "reject with icmpv6 type reject-route",
        _ => {
            let sup = if v6 {
                "icmp6-no-route, icmp6-adm-prohibited, icmp6-addr-unreachable, icmp6-port-unreachable, icmp6-policy-fail, icmp6-reject-route, tcp-reset"
            } else {
                "icmp-net-unreachable, icmp-host-unreachable, icmp-port-unreachable, icmp-proto-unreachable, icmp-net-prohibited, icmp-host-prohibited, icmp-admin-prohibited, tcp-reset"
            };
            return Err(Unsupported(format!(
                "REJECT --reject-with '{}' (supported: {sup})",
                short(w)
            )));
        }
    };
    Ok(s.to_string())
}

/// An address or network, normalised (host bits cleared, /32 and /128 dropped). `*` for 0/0.
fn addr(s: &str, v6: bool) -> Result<String, String> {
    let (a, p) = match s.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (s, None),
    };
    let max = if v6 { 128 } else { 32 };
    let plen: u32 = match p {
        None => max,
        Some(p) => match p.parse::<u32>() {
            Ok(n) if n <= max => n,
            _ => {
                // a dotted netmask (v4 only)
                let m: Ipv4Addr = if v6 { None } else { p.parse().ok() }
                    .ok_or_else(|| format!("'{}' is not a prefix length", short(p)))?;
                let m = u32::from(m);
                if m.leading_ones() + m.trailing_zeros() != 32 {
                    return Err(format!("'{}' is not a contiguous netmask", short(p)));
                }
                m.leading_ones()
            }
        },
    };
    if v6 {
        let ip: Ipv6Addr = a
            .parse()
            .map_err(|_| format!("'{}' is not an IPv6 address", short(a)))?;
        if plen == 0 {
            return Ok("*".into());
        }
        let mask = if plen == 128 {
            u128::MAX
        } else {
            !(u128::MAX >> plen)
        };
        let net = Ipv6Addr::from(u128::from(ip) & mask);
        Ok(if plen == 128 {
            net.to_string()
        } else {
            format!("{net}/{plen}")
        })
    } else {
        let ip: Ipv4Addr = a
            .parse()
            .map_err(|_| format!("'{}' is not an IPv4 address", short(a)))?;
        if plen == 0 {
            return Ok("*".into());
        }
        let mask = if plen == 32 {
            u32::MAX
        } else {
            !(u32::MAX >> plen)
        };
        let net = Ipv4Addr::from(u32::from(ip) & mask);
        Ok(if plen == 32 {
            net.to_string()
        } else {
            format!("{net}/{plen}")
        })
    }
}

/// A plain address (for ranges): its text and its numeric value.
fn plain_addr(s: &str, v6: bool) -> Result<(String, u128), String> {
    if v6 {
        let ip: Ipv6Addr = s
            .parse()
            .map_err(|_| format!("'{}' is not an IPv6 address", short(s)))?;
        Ok((ip.to_string(), u128::from(ip)))
    } else {
        let ip: Ipv4Addr = s
            .parse()
            .map_err(|_| format!("'{}' is not an IPv4 address", short(s)))?;
        Ok((ip.to_string(), u32::from(ip) as u128))
    }
}

fn set_or_one(list: &[String]) -> String {
    if list.len() == 1 {
        list[0].clone()
    } else {
        format!("{{ {} }}", list.join(", "))
    }
}

/// `-p`: (nft l4proto value or None for "all", the protocol class).
fn protocol(p: &str, v6: bool) -> Result<(Option<String>, Proto), String> {
    let lower = p.to_ascii_lowercase();
    let num = match lower.as_str() {
        "all" | "0" if !v6 || lower == "all" => return Ok((None, Proto::None)),
        "tcp" => 6,
        "udp" => 17,
        "icmp" => 1,
        "icmpv6" | "ipv6-icmp" | "icmp6" => 58,
        "sctp" => 132,
        "udplite" => 136,
        "dccp" => 33,
        "esp" => 50,
        "ah" => 51,
        "gre" => 47,
        "ipip" | "ipencap" => 4,
        "ospf" => 89,
        "vrrp" => 112,
        "igmp" => 2,
        "pim" => 103,
        n => match n.parse::<u8>() {
            Ok(x) => x,
            Err(_) => {
                return Err(format!(
                    "unsupported protocol '{}' (supported: all, tcp, udp, icmp, icmpv6, sctp, udplite, dccp, esp, ah, gre, ipip, ospf, vrrp, igmp, pim, or a number 0-255)",
                    short(p)
                ))
            }
        },
    };
    let class = match num {
        6 => Proto::Ports("tcp"),
        17 => Proto::Ports("udp"),
        132 => Proto::Ports("sctp"),
        136 => Proto::Ports("th"),
        1 => Proto::Icmp,
        58 => Proto::Icmp6,
        _ => Proto::Other,
    };
    let name = match num {
        6 => "tcp".to_string(),
        17 => "udp".to_string(),
        1 => "icmp".to_string(),
        58 => "icmpv6".to_string(),
        n => n.to_string(),
    };
    Ok((Some(name), class))
}

fn iface(s: &str) -> Result<String, String> {
    let (base, wild) = match s.strip_suffix('+') {
        Some(b) => (b, true),
        None => (s, false),
    };
    if base.len() > 15
        || !base
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.' | b':' | b'@'))
    {
        return Err(format!(
            "unsupported interface name '{}' (supported: up to 15 letters, digits, '_', '-', '.', ':', '@', optionally ending in '+')",
            short(s)
        ));
    }
    Ok(if wild {
        format!("{base}*")
    } else {
        base.to_string()
    })
}

fn port_num(s: &str) -> Result<u32, String> {
    s.parse::<u16>()
        .map(u32::from)
        .map_err(|_| format!("'{}' is not a port number", short(s)))
}

/// `a`, `a:b`, `:b`, `a:` (also `a-b`) to nft `a` or `a-b`.
fn port_range(s: &str) -> Result<String, String> {
    let split = s.split_once(':').or_else(|| s.split_once('-'));
    match split {
        None => Ok(port_num(s)?.to_string()),
        Some((a, b)) => {
            let lo = if a.is_empty() { 0 } else { port_num(a)? };
            let hi = if b.is_empty() { 65535 } else { port_num(b)? };
            if lo > hi {
                return Err(format!("empty port range '{}'", short(s)));
            }
            Ok(if lo == hi {
                lo.to_string()
            } else {
                format!("{lo}-{hi}")
            })
        }
    }
}

fn num_range(s: &str, max: u32) -> Result<String, String> {
    let num = |x: &str| -> Result<u32, String> {
        x.parse::<u32>()
            .ok()
            .filter(|n| *n <= max)
            .ok_or_else(|| format!("'{}' is not a number 0-{max}", short(x)))
    };
    let split = s.split_once(':').or_else(|| s.split_once('-'));
    match split {
        None => Ok(num(s)?.to_string()),
        Some((a, b)) => {
            let lo = if a.is_empty() { 0 } else { num(a)? };
            let hi = if b.is_empty() { max } else { num(b)? };
            if lo > hi {
                return Err(format!("empty range '{}'", short(s)));
            }
            Ok(if lo == hi {
                lo.to_string()
            } else {
                format!("{lo}-{hi}")
            })
        }
    }
}

fn num_u32(s: &str) -> Result<u32, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u32::from_str_radix(h, 16),
        None => s.parse::<u32>(),
    };
    r.map_err(|_| format!("'{}' is not a 32-bit number", short(s)))
}

fn mark(s: &str) -> Result<(u32, Option<u32>), String> {
    match s.split_once('/') {
        Some((v, m)) => Ok((num_u32(v)?, Some(num_u32(m)?))),
        None => Ok((num_u32(s)?, None)),
    }
}

fn tcp_flags(s: &str) -> Result<u8, String> {
    let mut v = 0u8;
    for f in s.split(',') {
        v |= match f.to_ascii_uppercase().as_str() {
            "FIN" => 0x01,
            "SYN" => 0x02,
            "RST" => 0x04,
            "PSH" => 0x08,
            "ACK" => 0x10,
            "URG" => 0x20,
            // iptables knows these six (libxt_tcp): ALL is 0x3f, ECE and CWR have no name
            "ALL" => 0x3f,
            "NONE" => 0,
            _ => {
                return Err(format!(
                    "unknown TCP flag '{}' (supported: FIN, SYN, RST, PSH, ACK, URG, ALL, NONE)",
                    short(f)
                ))
            }
        };
    }
    Ok(v)
}

/// iptables' ICMP type names: (type, code); `(None, _)` for "any".
fn icmp_type(s: &str, v6: bool) -> Result<(Option<u8>, Option<u8>), String> {
    // ip6tables' libxt_icmp6 has no "any" (iptables' libxt_icmp has)
    if s == "any" && !v6 {
        return Ok((None, None));
    }
    if let Some((t, c)) = s.split_once('/') {
        let t = t
            .parse::<u8>()
            .map_err(|_| format!("'{}' is not an ICMP type", short(t)))?;
        let c = c
            .parse::<u8>()
            .map_err(|_| format!("'{}' is not an ICMP code", short(c)))?;
        return Ok((Some(t), Some(c)));
    }
    if let Ok(t) = s.parse::<u8>() {
        return Ok((Some(t), None));
    }
    const V4: &[(&str, u8, Option<u8>)] = &[
        ("echo-reply", 0, None),
        ("pong", 0, None),
        ("destination-unreachable", 3, None),
        ("network-unreachable", 3, Some(0)),
        ("host-unreachable", 3, Some(1)),
        ("protocol-unreachable", 3, Some(2)),
        ("port-unreachable", 3, Some(3)),
        ("fragmentation-needed", 3, Some(4)),
        ("source-route-failed", 3, Some(5)),
        ("network-unknown", 3, Some(6)),
        ("host-unknown", 3, Some(7)),
        ("network-prohibited", 3, Some(9)),
        ("host-prohibited", 3, Some(10)),
        ("TOS-network-unreachable", 3, Some(11)),
        ("TOS-host-unreachable", 3, Some(12)),
        ("communication-prohibited", 3, Some(13)),
        ("host-precedence-violation", 3, Some(14)),
        ("precedence-cutoff", 3, Some(15)),
        ("source-quench", 4, None),
        ("redirect", 5, None),
        ("network-redirect", 5, Some(0)),
        ("host-redirect", 5, Some(1)),
        ("TOS-network-redirect", 5, Some(2)),
        ("TOS-host-redirect", 5, Some(3)),
        ("echo-request", 8, None),
        ("ping", 8, None),
        ("router-advertisement", 9, None),
        ("router-solicitation", 10, None),
        ("time-exceeded", 11, None),
        ("ttl-exceeded", 11, None),
        ("ttl-zero-during-transit", 11, Some(0)),
        ("ttl-zero-during-reassembly", 11, Some(1)),
        ("parameter-problem", 12, None),
        ("ip-header-bad", 12, Some(0)),
        ("required-option-missing", 12, Some(1)),
        ("timestamp-request", 13, None),
        ("timestamp-reply", 14, None),
        ("address-mask-request", 17, None),
        ("address-mask-reply", 18, None),
    ];
    const V6: &[(&str, u8, Option<u8>)] = &[
        ("destination-unreachable", 1, None),
        ("no-route", 1, Some(0)),
        ("communication-prohibited", 1, Some(1)),
        ("beyond-scope", 1, Some(2)),
        ("address-unreachable", 1, Some(3)),
        ("port-unreachable", 1, Some(4)),
        ("failed-policy", 1, Some(5)),
        ("reject-route", 1, Some(6)),
        ("packet-too-big", 2, None),
        ("time-exceeded", 3, None),
        ("ttl-exceeded", 3, None),
        ("ttl-zero-during-transit", 3, Some(0)),
        ("ttl-zero-during-reassembly", 3, Some(1)),
        ("parameter-problem", 4, None),
        ("bad-header", 4, Some(0)),
        ("unknown-header-type", 4, Some(1)),
        ("unknown-option", 4, Some(2)),
        ("echo-request", 128, None),
        ("ping", 128, None),
        ("echo-reply", 129, None),
        ("pong", 129, None),
        ("router-solicitation", 133, None),
        ("router-advertisement", 134, None),
        ("neighbour-solicitation", 135, None),
        ("neighbor-solicitation", 135, None),
        ("neighbour-advertisement", 136, None),
        ("neighbor-advertisement", 136, None),
        ("redirect", 137, None),
    ];
    let table = if v6 { V6 } else { V4 };
    table
        .iter()
        .find(|(n, _, _)| n.eq_ignore_ascii_case(s))
        .map(|&(_, t, c)| (Some(t), c))
        .ok_or_else(|| {
            format!(
                "unknown ICMP type '{}' (a name, a number or TYPE/CODE)",
                short(s)
            )
        })
}

fn limit_rate(s: &str) -> Result<String, String> {
    let (n, unit) = s.split_once('/').unwrap_or((s, "sec"));
    let n: u32 = n
        .parse()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("'{}' is not a rate such as 10/sec", short(s)))?;
    let u = match unit {
        "s" | "sec" | "second" => "second",
        "m" | "min" | "minute" => "minute",
        "h" | "hour" => "hour",
        "d" | "day" => "day",
        _ => {
            return Err(format!(
                "unknown rate unit '{}' (supported: sec, min, hour, day)",
                short(unit)
            ))
        }
    };
    Ok(format!("{n}/{u}"))
}

fn parse_limit_back(l: &str) -> (String, u32) {
    // "limit rate R burst B packets"
    let w: Vec<&str> = l.split_whitespace().collect();
    let rate = w
        .get(2)
        .map(|s| s.to_string())
        .unwrap_or_else(|| "3/hour".into());
    let burst = w.get(4).and_then(|b| b.parse().ok()).unwrap_or(5);
    (rate, burst)
}

/// DNAT/SNAT `--to-*`: `a`, `a-b`, `a:p`, `a:p-q`, `a-b:p-q` (v6: `[a]:p`).
fn nat_to(s: &str, v6: bool) -> Result<String, String> {
    let (addrs, ports) = if v6 {
        if let Some(rest) = s.strip_prefix('[') {
            let (a, after) = rest
                .split_once(']')
                .ok_or_else(|| format!("'{}' has no ']'", short(s)))?;
            match after.strip_prefix(':') {
                Some(p) => (a, Some(p)),
                None if after.is_empty() => (a, None),
                None => return Err(format!("'{}' is not [address]:port", short(s))),
            }
        } else {
            (s, None)
        }
    } else {
        match s.split_once(':') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        }
    };
    let mut out = String::new();
    if !addrs.is_empty() {
        let (lo, hi) = match addrs.split_once('-') {
            Some((a, b)) => (a, Some(b)),
            None => (addrs, None),
        };
        let lo = plain_addr(lo, v6)?;
        out.push_str(&lo.0);
        if let Some(hi) = hi {
            let hi = plain_addr(hi, v6)?;
            if hi.1 < lo.1 {
                return Err(format!("empty address range '{}'", short(addrs)));
            }
            out.push('-');
            out.push_str(&hi.0);
        }
        if v6 && ports.is_some() {
            return Err("an IPv6 address with a port (supported: IPv6 without port)".into());
        }
    }
    if let Some(p) = ports {
        let r = num_range(p, 0xffff)?;
        out.push(':');
        out.push_str(&r);
    }
    if out.is_empty() {
        return Err("an empty address".into());
    }
    Ok(out)
}

struct Ipset {
    v6: bool,
    elems: Vec<String>,
}

/// `ipset save` text: `create NAME hash:ip|hash:net|bitmap:ip [family inet|inet6] ...` and
/// `add NAME ELEM [options]`.
fn parse_ipsets(text: &str) -> Result<BTreeMap<String, Ipset>, Vec<(usize, String)>> {
    let mut sets: BTreeMap<String, Ipset> = BTreeMap::new();
    let mut errs = Vec::new();
    for (idx, raw) in text.lines().enumerate() {
        let ln = idx + 1;
        let w: Vec<&str> = raw.split_whitespace().collect();
        match w.as_slice() {
            [] => {}
            [c, ..] if c.starts_with('#') => {}
            ["create" | "-N" | "-exist", name, ty, rest @ ..] => {
                if !matches!(*ty, "hash:ip" | "hash:net" | "bitmap:ip") {
                    errs.push((ln, format!(
                        "ipset '{}' has unsupported type '{}' (supported: hash:ip, hash:net, bitmap:ip)",
                        short(name), short(ty)
                    )));
                    continue;
                }
                let v6 = rest.windows(2).any(|p| p[0] == "family" && p[1] == "inet6");
                sets.insert(
                    name.to_string(),
                    Ipset {
                        v6,
                        elems: Vec::new(),
                    },
                );
            }
            ["add" | "-A", name, elem, rest @ ..] => {
                let Some(set) = sets.get_mut(*name) else {
                    errs.push((
                        ln,
                        format!("'add' to ipset '{}' before its 'create'", short(name)),
                    ));
                    continue;
                };
                if rest.contains(&"nomatch") {
                    errs.push((ln, "unsupported element option 'nomatch'".into()));
                    continue;
                }
                let e = match elem.split_once('-') {
                    Some((a, b)) => match (plain_addr(a, set.v6), plain_addr(b, set.v6)) {
                        (Ok(a), Ok(b)) if a.1 <= b.1 => Ok(format!("{}-{}", a.0, b.0)),
                        (Ok(_), Ok(_)) => Err(format!("empty range '{}'", short(elem))),
                        (Err(e), _) | (_, Err(e)) => Err(e),
                    },
                    None => addr(elem, set.v6).map(|a| {
                        if a == "*" {
                            if set.v6 {
                                "::/0".to_string()
                            } else {
                                "0.0.0.0/0".to_string()
                            }
                        } else {
                            a
                        }
                    }),
                };
                match e {
                    Ok(e) => set.elems.push(e),
                    Err(e) => errs.push((ln, e)),
                }
            }
            [c, ..] => errs.push((
                ln,
                format!(
                "unsupported ipset line '{}' (supported: create NAME TYPE ..., add NAME ELEMENT)",
                short(c)
            ),
            )),
        }
    }
    if errs.is_empty() {
        Ok(sets)
    } else {
        Err(errs)
    }
}
