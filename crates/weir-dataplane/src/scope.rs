//! NFQUEUE mode when the ruleset does nothing but hand packets to per-flow scripts (as
//! nfqws2 is used): the kernel queues only what the scripts' profiles can act on
//! ([`weir_script::scope::Scope`]) rather than every packet. For each profile, the
//! protocols and remote ports it takes and the first N packets of each connection's
//! direction (`-m connbytes --connbytes 1:N --connbytes-mode packets`, N the largest packet
//! bound of the instances' ranges), at least the reply's first packet (the SYN/ACK: the
//! reply's sequence, its TTL for `autottl`), and TCP FIN and RST in both directions (so
//! weir's connection state ends with the connection). The rest never leaves the kernel.
//!
//! That is only the same as queueing everything when no rule could decide anything for the
//! packets not queued: [`scripts_only`] checks the ruleset (policies accept; no statement
//! but `queue`, `accept`, `counter`, `log`, `limit`, `quota` and the chain verdicts), and
//! names the rule that prevents it. Counters then count only the packets queued. A reload
//! keeps the kernel's rules, so a ruleset that is not scripts-only is refused on reload
//! while they are narrowed (restart weir to change it).

use weir_lang::ir::{Expr, Policy, Ruleset, Verdict};
use weir_script::scope::{Scope, Selector, L4};

/// Whether the ruleset only hands packets to scripts; Err names what else it does.
pub fn scripts_only(rs: &Ruleset) -> Result<(), String> {
    let mut queues = false;
    for t in &rs.tables {
        for c in &t.chains {
            let what = |x: &str| {
                format!(
                    "table {} {}, chain {}: {x}",
                    t.family.name(),
                    t.name,
                    c.name
                )
            };
            if c.base.as_ref().is_some_and(|b| b.policy != Policy::Accept) {
                return Err(what("policy drop"));
            }
            for r in &c.rules {
                for e in &r.exprs {
                    let ok = match e {
                        Expr::Queue(_) => {
                            queues = true;
                            true
                        }
                        Expr::Match(_)
                        | Expr::CtCount { .. }
                        | Expr::Counter { .. }
                        | Expr::Log(_)
                        | Expr::Limit(_)
                        | Expr::Quota(_)
                        | Expr::ObjRef(_) => true,
                        Expr::Verdict(v) => !matches!(v, Verdict::Drop),
                        _ => false,
                    };
                    if !ok {
                        return Err(what(&format!("`{}`", r.text)));
                    }
                }
            }
        }
    }
    if queues {
        Ok(())
    } else {
        Err("no rule queues to scripts".into())
    }
}

/// The most ports or ranges one `multiport` match takes (a range counts twice).
const MULTIPORT: usize = 15;

/// The port lists (`80,443,1000:2000`) of `-m multiport`, in as many matches as needed;
/// None when they cannot be written (a negated list too long for one match: then every
/// port is queued).
fn port_lists(ranges: &[(u16, u16)], negated: bool) -> Option<Vec<String>> {
    let mut lists = Vec::new();
    let (mut cur, mut weight) = (Vec::new(), 0);
    for &(a, b) in ranges {
        let w = if a == b { 1 } else { 2 };
        if weight + w > MULTIPORT {
            lists.push(std::mem::take(&mut cur).join(","));
            weight = 0;
        }
        cur.push(if a == b {
            a.to_string()
        } else {
            format!("{a}:{b}")
        });
        weight += w;
    }
    if !cur.is_empty() {
        lists.push(cur.join(","));
    }
    if negated && lists.len() > 1 {
        return None;
    }
    Some(lists)
}

/// The matches of one selector for `tool` (None: not for this family), each an alternative
/// (several port lists), with `dir` ("--dports" / "--sports" / "--ports") for the ports.
fn l4_matches(sel: &Selector, v6: bool, dir: &str) -> Option<Vec<Vec<String>>> {
    if sel.v6.is_some_and(|s| s != v6) {
        return None;
    }
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    Some(match &sel.l4 {
        L4::Any => vec![Vec::new()],
        L4::Icmp => vec![s(&["-p", if v6 { "ipv6-icmp" } else { "icmp" }])],
        L4::Proto(p) => vec![s(&["-p", &p.to_string()])],
        L4::Ports(p, ports) => {
            let proto = s(&["-p", if *p == 6 { "tcp" } else { "udp" }]);
            match ports
                .as_ref()
                .and_then(|ps| Some((port_lists(ps.ranges(), ps.negated())?, ps.negated())))
            {
                None => vec![proto],
                Some((lists, neg)) => lists
                    .into_iter()
                    .map(|l| {
                        let mut m = proto.clone();
                        m.extend(s(&["-m", "multiport"]));
                        if neg {
                            m.push("!".into());
                        }
                        m.extend(s(&[dir, &l]));
                        m
                    })
                    .collect(),
            }
        }
    })
}

/// `-m connbytes` for the first `n` packets of `dir` ("original" / "reply").
fn connbytes(n: Option<u64>, dir: &str) -> Vec<String> {
    match n {
        None => Vec::new(),
        Some(n) => [
            "-m",
            "connbytes",
            "--connbytes",
            &format!("1:{n}"),
            "--connbytes-dir",
            dir,
            "--connbytes-mode",
            "packets",
        ]
        .iter()
        .map(|x| x.to_string())
        .collect(),
    }
}

/// The rules of `chain` (each the arguments after `-A CHAIN`, before `-j`) that select what
/// the scope needs, for IPv4 or IPv6.
pub fn selections(scope: &Scope, v6: bool) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = Vec::new();
    let mut push = |r: Vec<String>| {
        if !out.contains(&r) {
            out.push(r);
        }
    };
    let ctdir = |d: &str| -> Vec<String> {
        ["-m", "conntrack", "--ctdir", d]
            .iter()
            .map(|x| x.to_string())
            .collect()
    };
    for sel in &scope.selectors {
        for (dir, ports, n, cb) in [
            ("ORIGINAL", "--dports", sel.orig, "original"),
            ("REPLY", "--sports", sel.reply, "reply"),
        ] {
            if n == Some(0) {
                continue;
            }
            for m in l4_matches(sel, v6, ports).into_iter().flatten() {
                push([ctdir(dir), m, connbytes(n, cb)].concat());
            }
        }
        // FIN and RST end the connection in weir's table too (when not all is queued)
        let tcp = matches!(sel.l4, L4::Any | L4::Ports(6, _));
        if tcp && (sel.orig.is_some() || sel.reply.is_some()) {
            let alts = match &sel.l4 {
                L4::Any => {
                    if sel.v6.is_some_and(|s| s != v6) {
                        Vec::new()
                    } else {
                        vec![vec!["-p".to_string(), "tcp".to_string()]]
                    }
                }
                _ => l4_matches(sel, v6, "--ports").unwrap_or_default(),
            };
            for m in alts {
                for flag in ["FIN", "RST"] {
                    let mut r = m.clone();
                    r.extend(["--tcp-flags", flag, flag].iter().map(|x| x.to_string()));
                    push(r);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_script::profile::filter::Ports;

    fn rs(text: &str) -> Ruleset {
        weir_lang::load_str("t.nft", text).expect("ruleset loads").0
    }

    #[test]
    fn only_queueing_rulesets_are_scripts_only() {
        let ok = rs("table inet z { chain c { type filter hook forward priority 0; policy accept;\n ct state established accept\n tcp dport 443 counter queue num 1\n limit rate 5/second log prefix \"q\" queue num 2 bypass\n jump d\n }\n chain d { udp dport 9 queue num 3\n return\n }\n}\n");
        assert_eq!(scripts_only(&ok), Ok(()));
        for (text, want) in [
            ("table inet z { chain c { type filter hook forward priority 0; policy drop;\n tcp dport 443 queue num 1\n }\n}\n", "policy drop"),
            ("table inet z { chain c { type filter hook forward priority 0;\n tcp dport 22 drop\n tcp dport 443 queue num 1\n }\n}\n", "`tcp dport 22 drop`"),
            ("table inet z { chain c { type filter hook forward priority 0;\n meta mark set 1\n tcp dport 443 queue num 1\n }\n}\n", "`meta mark set 1`"),
            ("table inet z { chain c { type filter hook forward priority 0;\n tcp dport 443 accept\n }\n}\n", "no rule queues"),
        ] {
            let e = scripts_only(&rs(text)).unwrap_err();
            assert!(e.contains(want), "{e} (want {want})");
        }
    }

    #[test]
    fn port_lists_split_at_fifteen_and_negated_lists_stay_whole() {
        let many: Vec<(u16, u16)> = (1..=20).map(|p| (p, p)).collect();
        let l = port_lists(&many, false).unwrap();
        assert_eq!(l.len(), 2);
        assert_eq!(l[0].split(',').count(), 15);
        assert_eq!(l[1], "16,17,18,19,20");
        // a range counts twice
        let ranges: Vec<(u16, u16)> = (0..8).map(|i| (i * 10, i * 10 + 5)).collect();
        assert_eq!(port_lists(&ranges, false).unwrap().len(), 2);
        assert_eq!(port_lists(&many, true), None);
        assert_eq!(
            port_lists(&[(80, 80), (443, 443)], true).unwrap(),
            vec!["80,443"]
        );
    }

    fn sel(l4: L4, orig: Option<u64>, reply: Option<u64>) -> Scope {
        Scope {
            selectors: vec![Selector {
                v6: None,
                l4,
                orig,
                reply,
            }],
        }
    }

    #[test]
    fn selections_bound_each_direction_and_add_fin_and_rst() {
        let ports = Ports::parse("443,8000-8080").unwrap();
        let s = sel(L4::Ports(6, Some(ports)), Some(6), Some(1));
        let r: Vec<String> = selections(&s, false).iter().map(|r| r.join(" ")).collect();
        assert_eq!(
            r,
            [
                "-m conntrack --ctdir ORIGINAL -p tcp -m multiport --dports 443,8000:8080 -m connbytes --connbytes 1:6 --connbytes-dir original --connbytes-mode packets",
                "-m conntrack --ctdir REPLY -p tcp -m multiport --sports 443,8000:8080 -m connbytes --connbytes 1:1 --connbytes-dir reply --connbytes-mode packets",
                "-p tcp -m multiport --ports 443,8000:8080 --tcp-flags FIN FIN",
                "-p tcp -m multiport --ports 443,8000:8080 --tcp-flags RST RST",
            ]
        );
        // no bound: every packet of those ports, no FIN/RST rules needed
        let s = sel(L4::Ports(17, None), None, None);
        let r: Vec<String> = selections(&s, true).iter().map(|r| r.join(" ")).collect();
        assert_eq!(
            r,
            [
                "-m conntrack --ctdir ORIGINAL -p udp",
                "-m conntrack --ctdir REPLY -p udp"
            ]
        );
        // an outgoing bound of 0 (`x`): only the reply's first packet
        let s = sel(L4::Icmp, Some(0), Some(1));
        let r: Vec<String> = selections(&s, true).iter().map(|r| r.join(" ")).collect();
        assert_eq!(
            r,
            ["-m conntrack --ctdir REPLY -p ipv6-icmp -m connbytes --connbytes 1:1 --connbytes-dir reply --connbytes-mode packets"]
        );
        // IPv4 only: nothing for ip6tables
        let mut s = sel(L4::Any, Some(3), Some(1));
        s.selectors[0].v6 = Some(false);
        assert!(selections(&s, true).is_empty());
        assert_eq!(selections(&s, false).len(), 4);
    }
}
