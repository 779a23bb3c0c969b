//! One `-A CHAIN ...` rule: its matches, translated in iptables' order (the ip part, then the
//! `-m` modules), its target, and the one or two nft rules (`-m multiport --ports`) it becomes.

use super::tables::{base_chain, check_chain_name, is_counters, Table};
use super::targets::{is_builtin_target, reject_with, TargetOpts};
use super::values::{
    addr, icmp_type, iface, limit_rate, mark, nat_to, num_range, num_u32, parse_limit_back,
    plain_addr, port_range, protocol, set_or_one, tcp_flags,
};
use super::{sanitize, short, SUPPORTED_MATCH_OPTS, SUPPORTED_MODULES, SUPPORTED_TARGETS};
use std::fmt::Write as _;

pub(super) enum RuleErr {
    /// Not an iptables-save rule at all (always an error).
    Fatal(String),
    /// An unsupported or invalid option (skippable).
    Unsupported(String),
}

use RuleErr::{Fatal, Unsupported};

pub(super) struct Rule {
    pub(super) chain: String,
    /// the match items, once or twice (multiport --ports)
    pub(super) variants: Vec<Vec<String>>,
    /// statements and the verdict
    pub(super) stmts: Vec<String>,
    pub(super) comment: Option<String>,
    /// the user chain of `-j`/`-g`
    pub(super) jump_to: Option<String>,
}

#[derive(Clone, Copy, PartialEq)]
pub(super) enum Proto {
    None,
    /// a protocol with ports: the nft selector word (tcp, udp, sctp, th)
    Ports(&'static str),
    Icmp,
    Icmp6,
    Other,
}

/// Parses `-A CHAIN ...`.
pub(super) fn parse_rule(words: &[String], table: &mut Table, v6: bool) -> Result<Rule, RuleErr> {
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

fn need(modules: &[String], m: &str, opt: &str) -> Result<(), RuleErr> {
    if modules.iter().any(|x| x == m) {
        Ok(())
    } else {
        Err(Unsupported(format!(
            "option '{opt}' needs '-m {m}' before it"
        )))
    }
}
