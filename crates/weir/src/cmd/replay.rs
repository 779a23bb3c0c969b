//! `weir replay`: a capture through the engine, with verdict totals and per-rule counters.

use anyhow::Context;
use serde_json::json;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::collections::VecDeque;
use std::io::BufWriter;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use weir_conntrack::Config as CtConfig;
use weir_engine::frag::Held;
use weir_engine::stateful::{PacketCt, Stateful};
use weir_engine::{Compiled, Decision, DropReason, Engine, Meta, Mode, Pkt};
use weir_lang::ir::Hook;
use weir_router::fib::Lpm;
use weir_router::{Fate, Port, PortAddr, Reason, Route, Router, Routes, Rx};
use weir_wire::pcap::{self, PcapWriter};
use weir_wire::{Addr, Family, Frag, LinkType, Mac, PacketMeta, L3};

/// The built-in example: a gateway ruleset and a capture of traffic crossing it.
pub const EXAMPLE_RULES: &str = include_str!("../../../../examples/gateway.nft");
pub const EXAMPLE_PCAP: &[u8] = include_bytes!("../../../../examples/gateway.pcap");
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
/// The example gateway's own addresses per interface (masquerade takes wan0's), see
/// examples/README.md and the drawing in examples/gateway.nft.
const EXAMPLE_IFACE_ADDRS: &[&str] = &[
    "lan0=198.18.0.1",
    "lan0=2001:db8:0:1::1",
    "dmz0=198.18.1.1",
    "dmz0=2001:db8:0:2::1",
    "wan0=198.19.0.2",
];

#[derive(clap::Args)]
pub struct Args {
    /// Ruleset file (nftables syntax, or iptables-save output with --format iptables).
    #[arg(long, required_unless_present = "example")]
    rules: Option<PathBuf>,
    #[command(flatten)]
    format: crate::cmd::RulesFormat,
    /// Capture to replay (pcap or pcapng; Ethernet or raw IP).
    #[arg(required_unless_present = "example")]
    input: Option<PathBuf>,
    /// Run the built-in example (a gateway ruleset and a capture of traffic crossing it).
    #[arg(long)]
    example: bool,
    /// The hook whose base chains run: ingress, prerouting, input, forward, output,
    /// postrouting; or `router`: each packet crosses a router's hooks as netfilter orders
    /// them, prerouting (conntrack, destination NAT), then input when its destination (after
    /// DNAT) is a --local address or else forward, then postrouting (source NAT, masquerade),
    /// with NAT applied to the packets (--out writes them translated). Without --hook: router
    /// when the ruleset uses connection tracking or NAT (a `ct` expression, `notrack`, a NAT
    /// statement or a nat chain), forward otherwise.
    #[arg(long)]
    hook: Option<String>,
    /// The router's own addresses (repeatable): a packet to one of them goes to input instead
    /// of forward (router mode). Every --iface-addr address is local too.
    #[arg(long = "local", value_name = "ADDR")]
    locals: Vec<IpAddr>,
    /// An interface's address (repeatable, one per family): masquerade uses the output
    /// interface's, redirect the input interface's (router mode).
    #[arg(long = "iface-addr", value_name = "NAME=ADDR")]
    iface_addrs: Vec<String>,
    /// Write the accepted packets here (pcap), as they leave (translated by NAT in router
    /// mode).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Write the dropped packets here (pcap), as they arrived.
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

/// Interfaces by destination MAC (input) and by prefix (routes), as given with `--iface`.
struct IfMap {
    /// Longest-prefix match: the index of the interface name in `names` (the last of equal
    /// prefixes wins).
    routes: Lpm<usize>,
    names: Vec<String>,
    /// The prefixes as given, in order.
    prefixes: Vec<(Addr, u8, String)>,
    macs: Vec<(Mac, String)>,
}

impl IfMap {
    fn parse(specs: &[String]) -> anyhow::Result<IfMap> {
        let mut routes = Lpm::new();
        let mut names = Vec::new();
        let mut prefixes = Vec::new();
        let mut macs = Vec::new();
        for s in specs {
            let (p, name) = s
                .split_once('=')
                .with_context(|| format!("--iface {s}: expected PREFIX=NAME or MAC=NAME"))?;
            anyhow::ensure!(
                name.len() <= 15 && !name.is_empty(),
                "--iface {s}: interface names are 1-15 characters"
            );
            if let Ok(m) = p.parse::<Mac>() {
                macs.push((m, name.to_string()));
                continue;
            }
            let (net, len) = parse_prefix(p).with_context(|| format!("--iface {s}"))?;
            routes.insert(net, len, names.len());
            names.push(name.to_string());
            prefixes.push((net, len, name.to_string()));
        }
        Ok(IfMap {
            routes,
            names,
            prefixes,
            macs,
        })
    }

    fn input(&self, frame: &[u8], link: weir_wire::LinkType, addr: Option<IpAddr>) -> &str {
        if link == weir_wire::LinkType::Ethernet {
            if let Some(d) = Mac::dst_of(frame) {
                if let Some((_, n)) = self.macs.iter().find(|(m, _)| *m == d) {
                    return n;
                }
            }
        }
        addr.map_or("", |a| self.lookup(a))
    }

    /// The interface of the longest prefix holding an address ("" when none does).
    fn lookup(&self, addr: IpAddr) -> &str {
        self.routes
            .get(addr.into())
            .map_or("", |&i| self.names[i].as_str())
    }
}

/// A prefix `ADDR/LEN` (or an address alone: a host prefix).
fn parse_prefix(p: &str) -> anyhow::Result<(Addr, u8)> {
    let (a, l) = p.split_once('/').unwrap_or((p, ""));
    let a: Addr = a
        .parse()
        .map_err(|_| anyhow::anyhow!("'{a}' is not an address"))?;
    let max = a.family().bits();
    let len = if l.is_empty() {
        max
    } else {
        l.parse()
            .ok()
            .filter(|&x| x <= max)
            .with_context(|| format!("prefix length 0 to {max}"))?
    };
    Ok((a.masked(len), len))
}

/// The router a capture crosses in router mode: a port per interface the options name (its
/// MAC from `MAC=NAME`, its addresses from `--iface-addr`), and a nameless one for what they
/// do not place; routes from `PREFIX=NAME` (the last of equal prefixes wins), and default
/// routes out of the nameless port for a family without one (`--oif`: every route out of
/// it); `--local` addresses on no port. It does not resolve neighbours: a frame leaves
/// with its destination MAC as it came, and with the output port's MAC where `MAC=NAME`
/// gives it.
fn replay_router(
    ifmap: &IfMap,
    if_addrs: &[(String, Addr)],
    locals: &[Addr],
    iif: Option<&str>,
    oif: Option<&str>,
) -> Router {
    let mut names: Vec<String> = Vec::new();
    let mut add = |n: &str| {
        if !names.iter().any(|x| x == n) {
            names.push(n.to_string());
        }
    };
    for n in ifmap.names.iter().chain(ifmap.macs.iter().map(|(_, n)| n)) {
        add(n);
    }
    for (n, _) in if_addrs {
        add(n);
    }
    for n in iif.into_iter().chain(oif) {
        add(n);
    }
    add("");
    let port_of = |n: &str| names.iter().position(|x| x == n).unwrap_or(names.len() - 1);
    let ports = names
        .iter()
        .map(|n| {
            let mut p = Port::new(n).with_addrs(
                if_addrs
                    .iter()
                    .filter(|(m, _)| m == n)
                    .map(|(_, a)| PortAddr::host(*a)),
            );
            if let Some((m, _)) = ifmap.macs.iter().find(|(_, m)| m == n) {
                p = p.with_mac(*m);
            }
            p
        })
        .collect();
    let mut routes: Vec<Route> = Vec::new();
    if let Some(o) = oif {
        for a in [Addr::v4(0), Addr::v6(0)] {
            routes.push(Route::new(a, 0, port_of(o), None));
        }
    } else {
        for (net, len, n) in &ifmap.prefixes {
            let r = Route::new(*net, *len, port_of(n), None);
            routes.retain(|q| (q.net, q.len) != (r.net, r.len));
            routes.push(r);
        }
        for (f, a) in [(Family::Ipv4, Addr::v4(0)), (Family::Ipv6, Addr::v6(0))] {
            if !routes.iter().any(|r| r.len == 0 && r.net.family() == f) {
                routes.push(Route::new(a, 0, names.len() - 1, None));
            }
        }
    }
    let mut r = Router::new(ports, Routes::new(routes).expect("prefixes made unique"));
    r.set_locals(locals.to_vec());
    r.set_resolve_neighbours(false);
    r
}

/// What replaying a packet came to: accepted, and the frames that leave (none: the packet as
/// it came, for a single hook's replay); dropped, and why; or held (a later fragment before
/// its first).
enum Outcome {
    Accept(Vec<Vec<u8>>),
    Drop(&'static str),
    Hold,
}

/// A drop's name in the replay's counts (`conntrack-full` where `weir run` says
/// `ct-refused`).
fn replay_reason(r: Reason) -> &'static str {
    match r {
        Reason::CtRefused => "conntrack-full",
        r => r.name(),
    }
}

/// The router's fate of a frame as the replay counts it: what leaves (the frame as it leaves:
/// TTL decremented, translated, its link padding gone; in fragments where the output port's
/// MTU wants them; delivered to the router itself), or why not.
fn replay_fate(fate: Fate, frame: Vec<u8>, net: &Router) -> Outcome {
    match fate {
        // (not IP: no IP hook sees it; IP to another host's MAC: the kernel's, as it came)
        Fate::NotMine => Outcome::Accept(Vec::new()),
        Fate::Local { len, .. } | Fate::Out { len, .. } => {
            let mut f = frame;
            f.truncate(len);
            Outcome::Accept(vec![f])
        }
        Fate::Fragments { port, len } => {
            let f = &frame[..len.min(frame.len())];
            let pm = PacketMeta::parse(f, LinkType::Ethernet);
            match weir_wire::frag::fragment_ipv4(f, pm.l3_off as usize, net.port(port).mtu) {
                Some(pieces) => Outcome::Accept(pieces),
                None => Outcome::Drop(Reason::TooBig.name()),
            }
        }
        Fate::Drop(r) => Outcome::Drop(replay_reason(r)),
        Fate::NoNeighbour { .. } => Outcome::Drop(Reason::NoNeighbour.name()),
        Fate::Icmp { why, .. } => Outcome::Drop(replay_reason(why)),
        Fate::Reset(_) => Outcome::Drop(Reason::Reject.name()),
        Fate::Hold => Outcome::Hold,
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
    let hook_arg = a.hook.clone();
    let explicit_router = hook_arg.as_deref() == Some("router");
    let hook = match hook_arg.as_deref() {
        None | Some("router") => Hook::Forward,
        Some(h) => hook_of(h)?,
    };
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
        let Some(rs) = crate::cmd::load_rules_as(&path, &a.format) else {
            return Ok(ExitCode::from(1));
        };
        if let Err(e) = rs.refuse_unevaluated() {
            eprintln!("weir replay: {e}");
            return Ok(ExitCode::from(1));
        }
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
    let router = explicit_router || (hook_arg.is_none() && stateful);
    let mut addr_specs = a.iface_addrs.clone();
    if a.example && addr_specs.is_empty() {
        addr_specs = EXAMPLE_IFACE_ADDRS.iter().map(|s| s.to_string()).collect();
    }
    // (interface, address)
    let mut if_addrs: Vec<(String, Addr)> = Vec::new();
    for s in &addr_specs {
        let (name, ad) = s
            .split_once('=')
            .with_context(|| format!("--iface-addr {s}: expected NAME=ADDR"))?;
        let ip: IpAddr = ad
            .parse()
            .with_context(|| format!("--iface-addr {s}: '{ad}' is not an address"))?;
        if_addrs.push((name.to_string(), ip.into()));
    }
    let locals: Vec<Addr> = a.locals.iter().map(|x| Addr::from(*x)).collect();
    let mut net = replay_router(
        &ifmap,
        &if_addrs,
        &locals,
        a.iif.as_deref(),
        a.oif.as_deref(),
    );
    let compiled = Compiled::build(
        &rs,
        if a.linear {
            Mode::Linear
        } else {
            Mode::Compiled
        },
    );
    let mut sf = Stateful::new(Engine::new(compiled), CtConfig::default());

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
    // later fragments that came before their first wait for it (1 s of capture time at
    // most), as the kernel's reassembly does, tagged with their own timestamps; a released
    // one is replayed right after its first, at the first's time
    let mut held: Held<u64> = Held::default();
    let mut queue: VecDeque<(Cow<[u8]>, LinkType, u64, bool)> = VecDeque::new();
    let mut lost: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut released_n = 0u64;
    let mut pkts = cap.packets.iter();
    loop {
        if queue.is_empty() {
            match pkts.next() {
                Some(pk) => queue.push_back((Cow::Borrowed(&pk.data), pk.link, pk.ts_nanos, false)),
                None => {
                    lost.extend(held.clear());
                    if lost.is_empty() {
                        break;
                    }
                }
            }
        }
        for (ts, f) in lost.drain(..) {
            dropped += 1;
            *drop_by.entry("fragment").or_default() += 1;
            if let Some(w) = drops.as_mut() {
                w.write(ts, &f)
                    .map_err(|e| anyhow::anyhow!("writing dropped packets: {e}"))?;
            }
        }
        let Some((data, link, ts, released)) = queue.pop_front() else {
            continue;
        };
        let pm = PacketMeta::parse(&data[..], link);
        if let Some(m) = pm.malformed {
            *malformed.entry(m.reason()).or_default() += 1;
        }
        let is_ip = matches!(pm.l3, L3::Ipv4 | L3::Ipv6);
        let (src, dst) = if is_ip {
            let v4 = pm.l3 == L3::Ipv4;
            let _ = v4;
            (
                Addr::src_of(&pm).map(Addr::ip),
                Addr::dst_of(&pm).map(Addr::ip),
            )
        } else {
            (None, None)
        };
        if !is_ip && pm.malformed.is_none() {
            not_ip += 1;
        }
        let iif = a
            .iif
            .clone()
            .unwrap_or_else(|| ifmap.input(&data[..], link, src).to_string());
        let oif = a
            .oif
            .clone()
            .unwrap_or_else(|| dst.map_or(String::new(), |d| ifmap.lookup(d).to_string()));
        // as the kernel: no output device before routing, no input device for local output
        let (iif, oif) = match hook {
            Hook::Ingress | Hook::Prerouting | Hook::Input => (iif, String::new()),
            Hook::Output => (String::new(), oif),
            _ => (iif, oif),
        };
        let outcome = if router {
            let mut frame = data.to_vec();
            bytes += Pkt {
                frame: &frame,
                pm: &pm,
                meta: &mut Meta::default(),
                now_ns: 0,
                conns: None,
            }
            .bytes();
            let in_port = net.port_named(&iif).unwrap_or(net.ports().len() - 1);
            let fate = net.route_frame(&mut sf, &mut frame, pm, in_port, Rx::default(), ts);
            // what the router sent of its own for the frame (the SYN proxy's segments, the
            // copies `dup` made): out with the accepted packets, before it
            let mut st = weir_router::SentStats::default();
            let mut sent = net.dup_out(&mut sf, ts, &mut weir_router::DupStats::default());
            sent.extend(net.stack_out(&mut sf, ts, &mut st));
            for (_, f) in sent {
                if let Some(w) = out.as_mut() {
                    w.write(ts, &f)
                        .map_err(|e| anyhow::anyhow!("writing accepted packets: {e}"))?;
                }
            }
            replay_fate(fate, frame, &net)
        } else {
            let mut p = Pkt {
                frame: &data[..],
                pm: &pm,
                meta: &mut Meta::with_ifnames(&iif, &oif),
                now_ns: ts,
                conns: None,
            };
            bytes += p.bytes();
            let mut pc = PacketCt::default();
            let mut d = Decision::Accept;
            if !matches!(hook, Hook::Prerouting | Hook::Output) {
                d = sf.track_only(&mut p, &mut pc);
            }
            if d.is_accept() {
                d = sf.hook(hook, &mut p, &mut pc);
            }
            if d.is_accept() {
                d = sf.finish(&mut pc, ts);
            }
            match d {
                Decision::Accept => Outcome::Accept(Vec::new()),
                Decision::Drop(DropReason::Fragment) if pm.frag == Frag::Later => Outcome::Hold,
                Decision::Drop(r) => Outcome::Drop(replay_reason(Reason::of(r))),
            }
        };
        match outcome {
            Outcome::Accept(frames) => {
                accepted += 1;
                if let Some(w) = out.as_mut() {
                    if frames.is_empty() {
                        w.write(ts, &data[..])
                    } else {
                        frames.iter().try_for_each(|f| w.write(ts, f))
                    }
                    .map_err(|e| anyhow::anyhow!("writing accepted packets: {e}"))?;
                }
            }
            Outcome::Hold if !released => {
                if held.hold(ts, data.to_vec(), link, ts).is_some() {
                    lost.push((ts, data.to_vec()));
                }
            }
            Outcome::Hold | Outcome::Drop(_) => {
                dropped += 1;
                let why = match outcome {
                    Outcome::Drop(why) => why,
                    _ => "fragment",
                };
                *drop_by.entry(why).or_default() += 1;
                if let Some(w) = drops.as_mut() {
                    w.write(ts, &data[..])
                        .map_err(|e| anyhow::anyhow!("writing dropped packets: {e}"))?;
                }
            }
        }
        if !held.is_empty() {
            let (ready, expired) = held.ready(sf.frags_mut(), ts);
            for (_, f) in ready {
                released_n += 1;
                queue.push_back((Cow::Owned(f), link, ts, true));
            }
            lost.extend(expired);
        }
    }
    for w in [out, drops].into_iter().flatten() {
        w.into_inner()
            .map_err(|e| anyhow::anyhow!("flushing output: {e}"))?;
    }

    // per-rule counters in ruleset order
    let mut rules = Vec::new();
    for t in &sf.ruleset().tables {
        for c in &t.chains {
            for r in c.rules() {
                let (pk, by) = sf.engine().st.rule_hits[r.gid];
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
            "rules_file": rules_name, "capture": cap_name, "hook": if router { "router" } else { hook.name() },
            "packets": total, "bytes": bytes, "accepted": accepted, "dropped": dropped,
            "drop_reasons": drop_by, "malformed": malformed, "not_ip": not_ip,
            "rules": rules_json, "log_lines": sf.engine().st.log_count,
            "stateful_items_passed_over": sf.engine().st.stateful_skipped,
            "ct_confirmed": sf.stats().confirmed, "ct_entries": sf.ct().len(),
            "nat_not_applied": sf.stats().nat_not_applied,
            "nat_bindings": sf.stats().nat_bound, "nat_rewrites": sf.stats().nat_rewritten,
            "nat_dropped": sf.stats().nat_no_port + sf.stats().nat_no_address,
            "fragments_followed": sf.stats().fragments_followed,
            "fragments_dropped": sf.stats().fragments - released_n,
            "fragments_held": released_n,
        });
        if let Some(e) = &cap.trailing_error {
            o["capture_error"] = json!(e.to_string());
        }
        println!("{}", serde_json::to_string_pretty(&o)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("weir replay: {cap_name}");
    if router {
        println!("  through the hooks of a router (prerouting, forward or input, postrouting) of {rules_name}");
    } else {
        println!("  through the {} hook of {rules_name}", hook.name());
    }
    println!();
    println!(
        "  packets   {total:>8}   ({})",
        crate::cmd::check::human_bytes(bytes as usize)
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
    if sf.engine().st.log_count > 0 {
        println!();
        println!(
            "  log statements fired {} times{}",
            sf.engine().st.log_count,
            if a.log { ":" } else { " (--log prints them)" }
        );
        if a.log {
            for l in &sf.engine().st.logs {
                println!("    {l}");
            }
        }
    }
    if stateful {
        println!();
        println!(
            "  connection tracking: {} connections confirmed, {} entries now; fragments: {} followed their first ({} after waiting for it), {} dropped (no first passed, or a first too short for its transport header)",
            sf.stats().confirmed,
            sf.ct().len(),
            sf.stats().fragments_followed,
            released_n,
            sf.stats().fragments - released_n
        );
        if router {
            println!(
                "  NAT: {} bindings, {} packet rewrites, {} new connections dropped (no free port or address)",
                sf.stats().nat_bound,
                sf.stats().nat_rewritten,
                sf.stats().nat_no_port + sf.stats().nat_no_address
            );
        } else {
            println!(
                "  note: one hook alone does not translate packets ({} NAT rewrites not applied; --hook router does)",
                sf.stats().nat_not_applied
            );
        }
        println!(
            "  stateful items passed over (flow add outside router mode...): {}.",
            sf.engine().st.stateful_skipped
        );
    }
    Ok(ExitCode::SUCCESS)
}
