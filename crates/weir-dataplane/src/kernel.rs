//! The kernel's side of weir: the iptables rules that queue packets to weir (NFQUEUE mode)
//! or keep the kernel's copy of inline traffic away from its own stack (inline mode),
//! installed at start and removed at exit ([`KernelRules`]), and the sysctls that must agree
//! with the mode.

use anyhow::Context;
use std::process::Command;
use weir_engine::Engine;
use weir_lang::ir::Hook;

/// Inline mode replaces the kernel's forwarding: refuse to start while the kernel forwards
/// too (both would send every packet).
pub fn check_kernel_not_forwarding() -> anyhow::Result<()> {
    for (f, what) in [
        ("/proc/sys/net/ipv4/ip_forward", "net.ipv4.ip_forward"),
        (
            "/proc/sys/net/ipv6/conf/all/forwarding",
            "net.ipv6.conf.all.forwarding",
        ),
    ] {
        anyhow::ensure!(
            std::fs::read_to_string(f).map_or(true, |v| v.trim() == "0"),
            "inline mode: the kernel forwards too ({what} = 1): set it to 0, or use mode \"nfqueue\""
        );
    }
    Ok(())
}

/// The iptables chain weir owns.
pub fn chain_name(q: u16) -> String {
    format!("WEIR-NFQ{q}")
}

/// The iptables hooks to queue: forwarded packets always, input and output when the ruleset
/// has base chains there.
pub fn kernel_hooks(eng: &Engine) -> Vec<&'static str> {
    let mut v = vec!["FORWARD"];
    if !eng.rs.hooks[Hook::Input as usize].is_empty() {
        v.push("INPUT");
    }
    if !eng.rs.hooks[Hook::Output as usize].is_empty() {
        v.push("OUTPUT");
    }
    v
}

/// [`kernel_hooks`] of a checked ruleset, without building its engine: what a change made
/// at run time needs queued.
pub fn ruleset_hooks(rs: &weir_lang::ir::Ruleset) -> Vec<&'static str> {
    let has = |h: Hook| {
        rs.tables
            .iter()
            .filter(|t| !t.flags.iter().any(|f| f == "dormant"))
            .filter(|t| {
                matches!(
                    t.family,
                    weir_lang::ir::Family::Ip
                        | weir_lang::ir::Family::Ip6
                        | weir_lang::ir::Family::Inet
                )
            })
            .flat_map(|t| &t.chains)
            .any(|c| c.base.as_ref().is_some_and(|b| b.hook == h))
    };
    let mut v = vec!["FORWARD"];
    if has(Hook::Input) {
        v.push("INPUT");
    }
    if has(Hook::Output) {
        v.push("OUTPUT");
    }
    v
}

/// An iptables command line: the tool, `-w`, the table options, the rest.
fn ipt(tool: &str, table: &[&str], args: &[&str]) -> Vec<String> {
    std::iter::once(tool)
        .chain(["-w"])
        .chain(table.iter().copied())
        .chain(args.iter().copied())
        .map(String::from)
        .collect()
}

/// The match that keeps weir's own answers (sent with [`weir_io::raw::ANSWER_MARK`], already
/// through weir's output hook) out of its queue at the output hook, and what per-flow
/// scripts send ([`weir_io::raw::SCRIPT_MARK`]) out of it at every hook.
fn skip_answers(hook: &str) -> &'static [&'static str] {
    if hook == "OUTPUT" {
        &[
            "-m",
            "mark",
            "!",
            "--mark",
            "0x77656972",
            "-m",
            "mark",
            "!",
            "--mark",
            "0x77656973",
        ]
    } else {
        &["-m", "mark", "!", "--mark", "0x77656973"]
    }
}

/// The commands that install (`add`) or remove the queueing rules: every packet at the
/// hooks, or with `scope` (a ruleset that only hands packets to scripts) only what the
/// scripts can act on ([`crate::scope`]).
pub fn kernel_rules(
    q: u16,
    workers: u16,
    hooks: &[&str],
    scope: Option<&weir_script::scope::Scope>,
    add: bool,
) -> Vec<Vec<String>> {
    let chain = chain_name(q);
    let mut cmds = Vec::new();
    for tool in ["iptables", "ip6tables"] {
        let c = |args: &[&str]| ipt(tool, &[], args);
        if add {
            cmds.push(c(&["-N", &chain]));
            let (opt, qs) = if workers > 1 {
                ("--queue-balance", format!("{q}:{}", q + workers - 1))
            } else {
                ("--queue-num", q.to_string())
            };
            let target = ["-j", "NFQUEUE", opt, &qs, "--queue-bypass"];
            let selections = match scope {
                Some(s) => crate::scope::selections(s, tool == "ip6tables"),
                None => vec![Vec::new()],
            };
            for sel in selections {
                let sel: Vec<&str> = sel.iter().map(String::as_str).collect();
                cmds.push(c(&[&["-A", &chain][..], &sel, &target].concat()));
            }
            for h in hooks {
                cmds.push(c(
                    &[&["-I", h, "1"], skip_answers(h), &["-j", &chain]].concat()
                ));
            }
        } else {
            for h in hooks {
                cmds.push(c(&[&["-D", h], skip_answers(h), &["-j", &chain]].concat()));
            }
            cmds.push(c(&["-F", &chain]));
            cmds.push(c(&["-X", &chain]));
        }
    }
    cmds
}

/// What per-flow scripts send (marked [`weir_io::raw::SCRIPT_MARK`]) is not tracked by the
/// kernel's connection tracking: an nft chain at the output hook ahead of defragmentation
/// (priority -500; defragmentation is -400, iptables' raw table -300) marks it untracked, so
/// the fragments and out-of-window segments the scripts make leave as made (with conntrack
/// loaded, the kernel would gather fragments at the output hook and send them again in
/// order).
pub fn scripts_notrack(add: bool) -> Vec<Vec<String>> {
    let mark = format!("{:#x}", weir_io::raw::SCRIPT_MARK);
    let v = |a: &[&str]| a.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    if add {
        vec![
            v(&["nft", "add", "table", "inet", "weir_scripts"]),
            v(&[
                "nft",
                "add",
                "chain",
                "inet",
                "weir_scripts",
                "out",
                "{ type filter hook output priority -500 ; }",
            ]),
            v(&[
                "nft",
                "add",
                "rule",
                "inet",
                "weir_scripts",
                "out",
                "meta",
                "mark",
                &mark,
                "notrack",
            ]),
        ]
    } else {
        vec![v(&["nft", "delete", "table", "inet", "weir_scripts"])]
    }
}

/// Inline mode: the kernel keeps ARP and neighbour discovery on weir's interfaces but leaves
/// their IP traffic to weir (AF_PACKET reads frames before netfilter; the kernel's `raw`
/// table drops its own copy, so it neither answers nor resets what weir forwards). What weir
/// hands to the kernel's stack (local delivery, marked [`weir_io::inject::INJECT_MARK`]) is
/// let in, its mark cleared (chain `WEIR-LOCAL`).
pub fn inline_kernel_rules(ifaces: &[String], add: bool) -> Vec<Vec<String>> {
    let chain = "WEIR-INLINE";
    let local = "WEIR-LOCAL";
    let mark = format!("{:#x}", weir_io::inject::INJECT_MARK);
    let family = format!(
        "{:#x}/{:#x}",
        weir_io::inject::INJECT_BASE,
        weir_io::inject::INJECT_MASK
    );
    let mut cmds = Vec::new();
    for tool in ["iptables", "ip6tables"] {
        let c = |args: &[&str]| ipt(tool, &["-t", "raw"], args);
        if add {
            cmds.push(c(&["-N", local]));
            cmds.push(c(&["-A", local, "-j", "MARK", "--set-mark", "0"]));
            cmds.push(c(&["-A", local, "-j", "ACCEPT"]));
            cmds.push(c(&["-N", chain]));
            cmds.push(c(&[
                "-A", chain, "-m", "mark", "--mark", &mark, "-j", local,
            ]));
            // handed over for a `tproxy` target: the mark stays, for weir's tproxy table and
            // route (`tproxy_kernel`)
            cmds.push(c(&[
                "-A", chain, "-m", "mark", "--mark", &family, "-j", "ACCEPT",
            ]));
            if tool == "ip6tables" {
                for nd in ["neighbour-solicitation", "neighbour-advertisement"] {
                    cmds.push(c(&[
                        "-A",
                        chain,
                        "-p",
                        "icmpv6",
                        "--icmpv6-type",
                        nd,
                        "-j",
                        "RETURN",
                    ]));
                }
            }
            cmds.push(c(&["-A", chain, "-j", "DROP"]));
            for i in ifaces {
                cmds.push(c(&["-I", "PREROUTING", "1", "-i", i, "-j", chain]));
            }
        } else {
            for i in ifaces {
                cmds.push(c(&["-D", "PREROUTING", "-i", i, "-j", chain]));
            }
            cmds.push(c(&["-F", chain]));
            cmds.push(c(&["-X", chain]));
            cmds.push(c(&["-F", local]));
            cmds.push(c(&["-X", local]));
        }
    }
    cmds
}

/// The routing table and rule preference of weir's local route for `tproxy` ("we").
pub const TPROXY_TABLE: &str = "30583";

/// Inline mode: what hands a `tproxy` packet to its transparent socket once weir has handed
/// it to the kernel (marked [`weir_io::inject::tproxy_mark`] of its target): a policy
/// route that delivers every packet marked in weir's family locally (`fwmark` → `local
/// default dev lo`), as the setups `tproxy` is written for have. The table of kernel rules
/// that run the kernel's own `tproxy` for each mark is [`tproxy_table`].
pub fn tproxy_route(add: bool) -> Vec<Vec<String>> {
    let fwmark = format!(
        "{:#x}/{:#x}",
        weir_io::inject::INJECT_BASE,
        weir_io::inject::INJECT_MASK
    );
    let mut cmds = Vec::new();
    for (fam, any) in [("-4", "0.0.0.0/0"), ("-6", "::/0")] {
        let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        if add {
            cmds.push(v(&[
                "ip",
                fam,
                "rule",
                "add",
                "fwmark",
                &fwmark,
                "lookup",
                TPROXY_TABLE,
                "pref",
                TPROXY_TABLE,
            ]));
            cmds.push(v(&[
                "ip",
                fam,
                "route",
                "add",
                "local",
                any,
                "dev",
                "lo",
                "table",
                TPROXY_TABLE,
            ]));
        } else {
            cmds.push(v(&["ip", fam, "rule", "del", "pref", TPROXY_TABLE]));
            cmds.push(v(&["ip", fam, "route", "flush", "table", TPROXY_TABLE]));
        }
    }
    cmds
}

/// The kernel's `inet weir_tproxy` table for a ruleset's `tproxy` targets (`nft -f`
/// input, replacing the table; empty targets remove it): for each, a rule at prerouting
/// (priority mangle) that runs the kernel's `tproxy` with the same target on what weir
/// handed over with the target's mark.
pub fn tproxy_table(targets: &[weir_engine::stateful::tproxy::Target]) -> String {
    let mut s = String::from("table inet weir_tproxy {}\ndelete table inet weir_tproxy\n");
    if targets.is_empty() {
        return s;
    }
    s.push_str("table inet weir_tproxy {\n\tchain prerouting {\n\t\ttype filter hook prerouting priority mangle; policy accept;\n");
    for (i, t) in targets.iter().enumerate() {
        let mark = weir_io::inject::tproxy_mark(i as u8);
        for proto in ["tcp", "udp"] {
            let fam = match t.family {
                4 => "meta nfproto ipv4 ",
                6 => "meta nfproto ipv6 ",
                _ => "",
            };
            s.push_str(&format!(
                "\t\tmeta mark {mark:#x} {fam}meta l4proto {proto} {}\n",
                t.nft()
            ));
        }
    }
    s.push_str("\t}\n}\n");
    s
}

/// Install what `tproxy` needs for `targets` ([`tproxy_route`] when there are targets, then
/// [`tproxy_table`] with `nft -f -`). The route of a family the host has turned off (IPv6
/// disabled) is warned of, not refused.
pub fn apply_tproxy(targets: &[weir_engine::stateful::tproxy::Target]) -> anyhow::Result<()> {
    use std::io::Write;
    if !targets.is_empty() {
        // (`ip rule add` adds the same rule again: the old one goes first)
        for c in tproxy_route(false) {
            let _ = Command::new(&c[0]).args(&c[1..]).output();
        }
        for c in tproxy_route(true) {
            let out = Command::new(&c[0])
                .args(&c[1..])
                .output()
                .with_context(|| format!("running {} (is iproute2 installed?)", c[0]))?;
            let err = String::from_utf8_lossy(&out.stderr);
            if !out.status.success() && !err.contains("File exists") {
                anyhow::ensure!(c[1] == "-6", "{}: {}", c.join(" "), err.trim());
                tracing::warn!(command = %c.join(" "), error = %err.trim(), "tproxy: no IPv6 route");
            }
        }
    }
    let text = tproxy_table(targets);
    let mut child = Command::new("nft")
        .args(["-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .context("running nft for the tproxy table (is nftables installed?)")?;
    child
        .stdin
        .take()
        .context("nft's input")?
        .write_all(text.as_bytes())?;
    let out = child.wait_with_output()?;
    anyhow::ensure!(
        out.status.success(),
        "the kernel's tproxy table: {}\n{text}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

/// Removes the installed kernel rules when dropped.
pub struct KernelRules {
    cmds: Vec<Vec<String>>,
}

impl Drop for KernelRules {
    fn drop(&mut self) {
        for c in &self.cmds {
            let _ = Command::new(&c[0]).args(&c[1..]).output();
        }
    }
}

pub fn install(add: Vec<Vec<String>>, del: Vec<Vec<String>>) -> anyhow::Result<KernelRules> {
    // remove leftovers of a weir that did not exit cleanly
    drop(KernelRules { cmds: del.clone() });
    let guard = KernelRules { cmds: del };
    for c in add {
        let out = Command::new(&c[0])
            .args(&c[1..])
            .output()
            .with_context(|| format!("running {} (is iptables installed?)", c[0]))?;
        anyhow::ensure!(
            out.status.success(),
            "{}: {}",
            c.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(guard)
}
