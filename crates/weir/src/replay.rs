//! `weir replay`: a capture through the engine, with verdict totals and per-rule counters.

use anyhow::Context;
use serde_json::json;
use std::collections::BTreeMap;
use std::io::BufWriter;
use std::path::PathBuf;
use std::process::ExitCode;
use weir_engine::{Compiled, Decision, DropReason, Engine, Meta, Mode, Pkt};
use weir_lang::ir::Hook;
use weir_wire::pcap::{self, PcapWriter};
use weir_wire::{PacketMeta, L3};

/// The built-in example: a gateway ruleset and a capture of traffic crossing it.
pub const EXAMPLE_RULES: &str = include_str!("../../../examples/gateway.nft");
pub const EXAMPLE_PCAP: &[u8] = include_bytes!("../../../examples/gateway.pcap");
/// The example gateway's interfaces: its MAC address on each (the input interface of a frame)
/// and the routes (the output interface of a destination). See examples/README.md.
const EXAMPLE_IFACES: &[&str] = &[
    "02:77:65:00:00:01=lan0",
    "02:77:65:00:01:01=dmz0",
    "02:77:65:00:02:01=wan0",
    "198.18.0.0/24=lan0",
    "198.18.1.0/24=dmz0",
    "0.0.0.0/0=wan0",
    "2001:db8:0:1::/64=lan0",
    "2001:db8:0:2::/64=dmz0",
    "::/0=wan0",
];

#[derive(clap::Args)]
pub struct Args {
    /// Ruleset file (nftables syntax).
    #[arg(long, required_unless_present = "example")]
    rules: Option<PathBuf>,
    /// Capture to replay (pcap or pcapng; Ethernet or raw IP).
    #[arg(required_unless_present = "example")]
    input: Option<PathBuf>,
    /// Run the built-in example (a gateway ruleset and a capture of traffic crossing it).
    #[arg(long)]
    example: bool,
    /// The hook whose base chains run: ingress, prerouting, input, forward, output, postrouting.
    #[arg(long, default_value = "forward")]
    hook: String,
    /// Write the accepted packets here (pcap).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Write the dropped packets here (pcap).
    #[arg(long)]
    drops: Option<PathBuf>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Interfaces (repeatable): MAC=NAME says a frame sent to that MAC address came in on NAME;
    /// PREFIX=NAME routes that prefix out of NAME. A packet's output interface is the one of the
    /// longest prefix holding its destination; its input interface is the one of its destination
    /// MAC, or else the one of the longest prefix holding its source.
    #[arg(long = "iface", value_name = "PREFIX=NAME")]
    ifaces: Vec<String>,
    /// Input interface name for every packet (overrides --iface).
    #[arg(long)]
    iif: Option<String>,
    /// Output interface name for every packet (overrides --iface).
    #[arg(long)]
    oif: Option<String>,
    /// Print the lines of `log` statements.
    #[arg(long)]
    log: bool,
    /// Evaluate with the linear reference instead of the compiled classifier.
    #[arg(long)]
    linear: bool,
}

struct IfMap {
    v: Vec<(u8, u128, u32, String)>, // (version, network, prefix length, name)
    macs: Vec<([u8; 6], String)>,
}

fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() != 6 || parts.iter().any(|p| p.len() != 2) {
        return None;
    }
    let mut m = [0u8; 6];
    for (i, p) in parts.iter().enumerate() {
        m[i] = u8::from_str_radix(p, 16).ok()?;
    }
    Some(m)
}

impl IfMap {
    fn parse(specs: &[String]) -> anyhow::Result<IfMap> {
        let mut v = Vec::new();
        let mut macs = Vec::new();
        for s in specs {
            let (p, name) = s
                .split_once('=')
                .with_context(|| format!("--iface {s}: expected PREFIX=NAME or MAC=NAME"))?;
            anyhow::ensure!(
                name.len() <= 15 && !name.is_empty(),
                "--iface {s}: interface names are 1-15 characters"
            );
            if let Some(m) = parse_mac(p) {
                macs.push((m, name.to_string()));
                continue;
            }
            let (addr, len) = p.split_once('/').unwrap_or((p, ""));
            let ip: std::net::IpAddr = addr
                .parse()
                .with_context(|| format!("--iface {s}: '{addr}' is not an address"))?;
            let (ver, val, bits) = match ip {
                std::net::IpAddr::V4(a) => (4u8, u32::from(a) as u128, 32),
                std::net::IpAddr::V6(a) => (6u8, u128::from(a), 128),
            };
            let len: u32 = if len.is_empty() {
                bits
            } else {
                len.parse()
                    .with_context(|| format!("--iface {s}: bad prefix length"))?
            };
            anyhow::ensure!(len <= bits, "--iface {s}: prefix length over {bits}");
            anyhow::ensure!(
                name.len() <= 15 && !name.is_empty(),
                "--iface {s}: interface names are 1-15 characters"
            );
            v.push((ver, val, len, name.to_string()));
        }
        Ok(IfMap { v, macs })
    }

    fn input(&self, frame: &[u8], link: weir_wire::LinkType, ver: u8, saddr: u128) -> &str {
        if link == weir_wire::LinkType::Ethernet {
            if let Some(d) = frame.get(..6) {
                if let Some((_, n)) = self.macs.iter().find(|(m, _)| m[..] == *d) {
                    return n;
                }
            }
        }
        if ver == 0 {
            return "";
        }
        self.lookup(ver, saddr)
    }

    fn lookup(&self, ver: u8, addr: u128) -> &str {
        let bits = if ver == 4 { 32 } else { 128 };
        let mut best: Option<(u32, &str)> = None;
        for (v, net, len, name) in &self.v {
            if *v != ver {
                continue;
            }
            let shift = bits - len;
            let m = |x: u128| if shift >= 128 { 0 } else { x >> shift };
            if m(addr) == m(*net) && best.is_none_or(|(l, _)| *len > l) {
                best = Some((*len, name));
            }
        }
        best.map(|b| b.1).unwrap_or("")
    }
}

fn hook_of(s: &str) -> anyhow::Result<Hook> {
    Hook::from_name(s).with_context(|| {
        format!(
            "unknown hook '{s}' (ingress, prerouting, input, forward, output, postrouting, egress)"
        )
    })
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let hook = hook_of(&a.hook)?;
    let (rs, rules_name) = if a.example {
        match weir_lang::load_str("examples/gateway.nft", EXAMPLE_RULES) {
            Ok((rs, _)) => (rs, "examples/gateway.nft (built in)".to_string()),
            Err((sm, d)) => anyhow::bail!(
                "the built-in example does not check:\n{}",
                weir_lang::diag::render_all(&d, &sm)
            ),
        }
    } else {
        let path = a.rules.clone().unwrap();
        let Some(rs) = crate::load_rules(&path) else {
            return Ok(ExitCode::from(1));
        };
        (rs, path.display().to_string())
    };
    let (cap, cap_name) = if a.example {
        (
            pcap::read_bytes(EXAMPLE_PCAP).map_err(|e| anyhow::anyhow!("built-in capture: {e}"))?,
            "examples/gateway.pcap (built in)".to_string(),
        )
    } else {
        let p = a.input.clone().unwrap();
        (
            pcap::read_file(&p).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?,
            p.display().to_string(),
        )
    };
    let mut ifspecs = a.ifaces.clone();
    if a.example && ifspecs.is_empty() {
        ifspecs = EXAMPLE_IFACES.iter().map(|s| s.to_string()).collect();
    }
    let ifmap = IfMap::parse(&ifspecs)?;
    let stateful = rs.uses_state();
    let compiled = Compiled::build(
        &rs,
        if a.linear {
            Mode::Linear
        } else {
            Mode::Compiled
        },
    );
    let mut eng = Engine::new(compiled);

    let open =
        |p: &Option<PathBuf>| -> anyhow::Result<Option<PcapWriter<BufWriter<std::fs::File>>>> {
            match p {
                None => Ok(None),
                Some(p) => {
                    let f = std::fs::File::create(p)
                        .with_context(|| format!("cannot create {}", p.display()))?;
                    Ok(Some(
                        PcapWriter::new(BufWriter::new(f), cap.link)
                            .map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?,
                    ))
                }
            }
        };
    let mut out = open(&a.out)?;
    let mut drops = open(&a.drops)?;

    let mut accepted = 0u64;
    let mut dropped = 0u64;
    let mut bytes = 0u64;
    let mut malformed: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut drop_by: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut not_ip = 0u64;
    for pk in &cap.packets {
        let pm = PacketMeta::parse(&pk.data, pk.link);
        if let Some(m) = pm.malformed {
            *malformed.entry(m.reason()).or_default() += 1;
        }
        let (ver, is_ip) = match pm.l3 {
            L3::Ipv4 => (4, true),
            L3::Ipv6 => (6, true),
            _ => (0, false),
        };
        if !is_ip && pm.malformed.is_none() {
            not_ip += 1;
        }
        let iif = a
            .iif
            .clone()
            .unwrap_or_else(|| ifmap.input(&pk.data, pk.link, ver, pm.saddr).to_string());
        let oif = a.oif.clone().unwrap_or_else(|| {
            if is_ip {
                ifmap.lookup(ver, pm.daddr).to_string()
            } else {
                String::new()
            }
        });
        // as the kernel: no output device before routing, no input device for local output
        let (iif, oif) = match hook {
            Hook::Ingress | Hook::Prerouting | Hook::Input => (iif, String::new()),
            Hook::Output => (String::new(), oif),
            _ => (iif, oif),
        };
        let mut p = Pkt {
            frame: &pk.data,
            pm: &pm,
            meta: Meta::with_ifnames(&iif, &oif),
            now_ns: pk.ts_nanos,
        };
        bytes += p.bytes();
        let d = eng.process(hook, &mut p);
        match d {
            Decision::Accept => {
                accepted += 1;
                if let Some(w) = out.as_mut() {
                    w.write(pk.ts_nanos, &pk.data)
                        .map_err(|e| anyhow::anyhow!("writing accepted packets: {e}"))?;
                }
            }
            Decision::Drop(r) => {
                dropped += 1;
                let why = match r {
                    DropReason::Rule(_) => "rule",
                    DropReason::Reject(_) => "reject",
                    DropReason::Policy(..) => "policy",
                    DropReason::Malformed(_) => "malformed",
                };
                *drop_by.entry(why).or_default() += 1;
                if let Some(w) = drops.as_mut() {
                    w.write(pk.ts_nanos, &pk.data)
                        .map_err(|e| anyhow::anyhow!("writing dropped packets: {e}"))?;
                }
            }
        }
    }
    for w in [out, drops].into_iter().flatten() {
        w.into_inner()
            .map_err(|e| anyhow::anyhow!("flushing output: {e}"))?;
    }

    // per-rule counters in ruleset order
    let mut rules = Vec::new();
    for t in &eng.rs.tables {
        for c in &t.chains {
            for r in c.rules() {
                let (pk, by) = eng.st.rule_hits[r.gid];
                rules.push((
                    t.family.name(),
                    t.name.clone(),
                    c.name.clone(),
                    r.handle,
                    r.text.clone(),
                    pk,
                    by,
                ));
            }
        }
    }
    let total = cap.packets.len() as u64;
    if a.json {
        let rules_json: Vec<_> = rules
            .iter()
            .map(|(fam, t, c, h, text, pk, by)| json!({"table": format!("{fam} {t}"), "chain": c, "handle": h, "text": text, "packets": pk, "bytes": by}))
            .collect();
        let mut o = json!({
            "rules_file": rules_name, "capture": cap_name, "hook": hook.name(),
            "packets": total, "bytes": bytes, "accepted": accepted, "dropped": dropped,
            "drop_reasons": drop_by, "malformed": malformed, "not_ip": not_ip,
            "rules": rules_json, "log_lines": eng.st.log_count,
            "stateful_items_passed_over": eng.st.stateful_skipped,
        });
        if let Some(e) = &cap.trailing_error {
            o["capture_error"] = json!(e.to_string());
        }
        println!("{}", serde_json::to_string_pretty(&o)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("weir replay: {cap_name}");
    println!("  through the {} hook of {rules_name}", hook.name());
    println!();
    println!(
        "  packets   {total:>8}   ({})",
        crate::check::human_bytes(bytes as usize)
    );
    println!("  accepted  {accepted:>8}");
    let reasons: Vec<String> = drop_by.iter().map(|(k, v)| format!("{k} {v}")).collect();
    println!(
        "  dropped   {dropped:>8}   ({})",
        if reasons.is_empty() {
            "-".into()
        } else {
            reasons.join(", ")
        }
    );
    let mal: u64 = malformed.values().sum();
    if mal > 0 {
        let m: Vec<String> = malformed.iter().map(|(k, v)| format!("{k} {v}")).collect();
        println!("  malformed {mal:>8}   ({})", m.join(", "));
    }
    if not_ip > 0 {
        println!("  not IP    {not_ip:>8}   (IP-family chains do not see them)");
    }
    if let Some(e) = &cap.trailing_error {
        println!("  capture error after the last packet: {e}");
    }
    println!();
    let mut last = (String::new(), String::new());
    for (fam, t, c, h, text, pk, by) in &rules {
        if (format!("{fam} {t}"), c.clone()) != last {
            last = (format!("{fam} {t}"), c.clone());
            println!("  table {fam} {t} chain {c}");
            println!("  {:>6} {:>9} {:>11}  rule", "handle", "packets", "bytes");
        }
        println!("  {h:>6} {pk:>9} {by:>11}  {text}");
    }
    if eng.st.log_count > 0 {
        println!();
        println!(
            "  log statements fired {} times{}",
            eng.st.log_count,
            if a.log { ":" } else { " (--log prints them)" }
        );
        if a.log {
            for l in &eng.st.logs {
                println!("    {l}");
            }
        }
    }
    if stateful {
        println!();
        println!("  note: this ruleset uses connection tracking or NAT; this build evaluates them statelessly:");
        println!("        every packet is 'ct state untracked', and nat, notrack, flow add and set updates are");
        println!(
            "        passed over ({} times here).",
            eng.st.stateful_skipped
        );
    }
    Ok(ExitCode::SUCCESS)
}
