//! `weir bench pipeline` and `weir bench synflood`: the stateful pipeline on one core, in
//! memory, with 64-byte UDP/IPv4 frames (parsed for every packet).
//!
//! `weir run`'s inline router (its `route_frame`, FIB, neighbours and adjacencies) forwards
//! `--flows` concurrent connections from 198.18.0.0/16 clients to servers that `--rules`
//! forward rules accept (the matching rule is anywhere in the chain). Its FIB holds
//! `--routes` prefixes. The frames come from a NIC (`--link virtual`: from a veth, each
//! asked whether its checksum was left to offload). Measured side by side in one run:
//!
//! - new connections per second (first packets: conntrack, chains, FIB, confirm);
//! - established packets through the full path (prerouting with conntrack, the FIB and
//!   neighbour lookups, forward chain, postrouting), the route cache turned off;
//! - the same through the route cache (the adjacency, output port and next hop, cached in
//!   the connection entry: no FIB or neighbour lookup);
//! - the flowtable fast path (`flow add @ft`: no chains, no conntrack update).

use serde_json::json;
use std::fmt::Write;
use std::net::Ipv4Addr;
use std::process::ExitCode;
use std::time::Instant;
use weir_conntrack::Config as CtConfig;
use weir_engine::stateful::{PacketCt, Stateful};
use weir_engine::{Compiled, Engine, Meta, Mode};
use weir_lang::ir::Hook;
use weir_router::{Fate, Port, PortAddr, Route, Router, Routes, Rx, RxCsum};
use weir_wire::build::Builder;
use weir_wire::{Addr, LinkType, Mac, PacketMeta};

/// Where the frames are read, as far as their checksums go (`weir_router::RxCsum`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Link {
    /// A NIC: frames from the wire, whose checksums are whole; `weir run` does not look
    /// (`weir_dataplane::workers::links::rx_checksums`).
    Nic,
    /// A veth or a paravirtual NIC over AF_XDP: each TCP / UDP frame is asked whether its
    /// checksum is partial (its sender on this host left it to offload).
    Virtual,
}

/// The reverse path filter of the clients' port (`weir_router::RpFilter`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum RpFilter {
    Off,
    Loose,
    Strict,
}

impl From<RpFilter> for weir_router::RpFilter {
    fn from(f: RpFilter) -> Self {
        match f {
            RpFilter::Off => weir_router::RpFilter::Off,
            RpFilter::Loose => weir_router::RpFilter::Loose,
            RpFilter::Strict => weir_router::RpFilter::Strict,
        }
    }
}

#[derive(clap::Args)]
pub struct PipelineArgs {
    /// Concurrent flows (connection table entries).
    #[arg(long, default_value_t = 1 << 20)]
    flows: usize,
    /// Forward rules (one server each).
    #[arg(long, default_value_t = 1000)]
    rules: usize,
    /// FIB prefixes.
    #[arg(long, default_value_t = 10000)]
    routes: usize,
    /// The reverse path filter of the clients' port (`lan0`): a second FIB lookup for every
    /// packet the route cache does not know.
    #[arg(long, value_enum, default_value = "off")]
    rp_filter: RpFilter,
    /// The link the frames are read from.
    #[arg(long, value_enum, default_value = "nic")]
    link: Link,
    /// Seconds of established traffic per path.
    #[arg(long, default_value_t = 1.0)]
    seconds: f64,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    /// Measure one path only (for profiling; the others are reported as NaN / null).
    #[arg(long, value_enum)]
    only: Option<Path>,
}

/// The router of `weir run` (`weir_router`: its ports, FIB, neighbours and adjacencies) with
/// `n` distinct routes: /24s, /28s and /32s of 198.19.0.0/16, plus a default route, each via
/// one of 250 gateways on `wan0`'s link (198.18.255.0/24); clients on `lan0`
/// (198.18.0.0/16), whose reverse path filter is `rp`.
fn router(n: usize, rp: RpFilter) -> Router {
    let a = |o: [u8; 4]| Addr::v4(u32::from_be_bytes(o));
    let gw = |i: usize| Addr::v4(u32::from_be_bytes([198, 18, 255, 0]) + (i % 250) as u32 + 1);
    let mut routes = vec![
        Route::new(a([198, 18, 0, 0]), 16, 0, None),
        Route::new(a([198, 18, 255, 0]), 24, 1, None),
        Route::new(a([0, 0, 0, 0]), 0, 1, Some(gw(0))),
    ];
    // /24s, /28s and /32s of 198.19.0.0/16 in turn (the shorter ones run out first)
    let mut seen: std::collections::HashSet<(Addr, u8)> =
        routes.iter().map(|r| (r.net, r.len)).collect();
    let want = routes.len() + n;
    let mut i = 0usize;
    while routes.len() < want {
        let len = [24u8, 28, 32][i % 3];
        let net = Addr::v4(
            u32::from_be_bytes([198, 19, 0, 0]) + (((i / 3) as u32) << (32 - len) & 0xffff),
        );
        if seen.insert((net, len)) {
            routes.push(Route::new(net, len, 1, Some(gw(i))));
        }
        i += 1;
    }
    let ports = vec![
        Port::new("lan0")
            .with_mac(MACS[0])
            .with_mtu(1500)
            .with_rp_filter(rp.into())
            .with_addrs([PortAddr::host(a([198, 18, 0, 254]))]),
        Port::new("wan0")
            .with_mac(MACS[1])
            .with_mtu(1500)
            .with_addrs([PortAddr::host(a([198, 18, 255, 254]))]),
    ];
    let mut net = Router::new(ports, Routes::new(routes).expect("distinct routes"));
    for i in 0..250 {
        net.set_neighbour(gw(i), Mac([2, 0, 0, 0, 1, i as u8]));
    }
    net
}

/// The ports' own MACs; frames arrive on `lan0` (port 0) addressed to it.
const MACS: [Mac; 2] = [Mac([2, 0, 0, 0, 0, 1]), Mac([2, 0, 0, 0, 0, 2])];

/// The forward chain: `rules` rules accepting UDP to one server each (the flows' servers are
/// spread over all of them); `flow` puts established connections in a flowtable first.
fn ruleset(rules: usize, flow: bool) -> String {
    let mut s = String::from("table ip f {\n");
    if flow {
        s.push_str("  flowtable ft { hook ingress priority 0; devices = { lan0, wan0 }; }\n");
    }
    s.push_str("  chain fwd {\n    type filter hook forward priority filter; policy drop;\n");
    if flow {
        s.push_str("    ct state established meta l4proto udp flow add @ft\n");
    }
    s.push_str("    ct state invalid drop\n");
    for i in 0..rules {
        let host = Ipv4Addr::from(u32::from_be_bytes([198, 19, 0, 0]) + i as u32);
        let _ = writeln!(s, "    ip daddr {host} udp dport 53 counter accept");
    }
    s.push_str("    ip saddr 198.19.0.0/16 udp sport 53 accept\n  }\n}\n");
    s
}

/// Flow `i`: a client in 198.18.0.0/16, a server that rule `i % rules` accepts.
fn flow(i: usize, rules: usize) -> (u32, u32, u16) {
    let src = u32::from_be_bytes([198, 18, 0, 0]) + (i as u32 >> 8) % (1 << 16);
    let dst = u32::from_be_bytes([198, 19, 0, 0]) + (i % rules) as u32;
    (src, dst, 1024 + (i & 0x3fff) as u16 + (i >> 22) as u16)
}

/// The receive buffer: a 64-byte frame written for flow `i` as a NIC would write it (the
/// frame is in the cache, as after DDIO; only the connection table is cold).
struct Frames {
    rules: usize,
    /// What the receive path knows of the frames' checksums.
    csum: RxCsum,
    reply: bool,
    buf: [u8; FRAME],
}

const FRAME: usize = 64;

impl Frames {
    fn new(_n: usize, rules: usize, reply: bool, link: Link) -> Frames {
        let mut buf = [0u8; FRAME];
        let f = Builder::new().macs([2, 0, 0, 0, 0, 9], MACS[0].0).udp(
            Ipv4Addr::new(198, 18, 0, 1),
            Ipv4Addr::new(198, 19, 0, 1),
            1,
            53,
            &[0; 22],
        );
        buf.copy_from_slice(&f[..FRAME]);
        let csum = match link {
            Link::Nic => RxCsum::Complete,
            Link::Virtual => RxCsum::Unknown,
        };
        Frames {
            rules,
            csum,
            reply,
            buf,
        }
    }
    /// Write flow `i`'s datagram (UDP checksum 0, IPv4 header checksum computed).
    fn get(&mut self, i: usize) -> &mut [u8] {
        let (c, s, p) = flow(i, self.rules);
        let (src, dst, sp, dp) = if self.reply {
            (s, c, 53, p)
        } else {
            (c, s, p, 53)
        };
        let b = &mut self.buf;
        // (a router rewrites a frame's MACs: a frame forwarded in place is addressed again)
        b[..6].copy_from_slice(&MACS[0].0);
        b[22] = 64;
        b[24..26].copy_from_slice(&[0, 0]);
        b[26..30].copy_from_slice(&src.to_be_bytes());
        b[30..34].copy_from_slice(&dst.to_be_bytes());
        b[34..36].copy_from_slice(&sp.to_be_bytes());
        b[36..38].copy_from_slice(&dp.to_be_bytes());
        b[40..42].copy_from_slice(&[0, 0]);
        let c = weir_wire::checksum::checksum(&b[14..34]);
        b[24..26].copy_from_slice(&c.to_be_bytes());
        &mut self.buf
    }
}

#[derive(Clone, Copy, PartialEq, clap::ValueEnum)]
enum Path {
    Full,
    RouteCache,
    Flowtable,
}

/// One packet through the router (`weir run`'s inline path: the flowtable, or routing, the
/// hooks and the neighbour); whether it leaves by `wan0`.
#[inline]
fn forward(sf: &mut Stateful, net: &mut Router, frame: &mut [u8], csum: RxCsum, now: u64) -> bool {
    let pm = PacketMeta::parse(frame, LinkType::Ethernet);
    forward_parsed(sf, net, frame, pm, 0, csum, now)
}

/// [`forward`] for a frame already parsed (as the receive loop does for its batch), with its
/// tuple's hash from the prefetch.
#[inline]
fn forward_parsed(
    sf: &mut Stateful,
    net: &mut Router,
    frame: &mut [u8],
    pm: PacketMeta,
    hash: u64,
    csum: RxCsum,
    now: u64,
) -> bool {
    matches!(
        net.route_frame(sf, frame, pm, 0, Rx { hash, csum }, now),
        Fate::Out { port: 1, .. }
    )
}

fn shuffled(n: usize) -> Vec<u32> {
    let mut order: Vec<u32> = (0..n as u32).collect();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in (1..order.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order.swap(i, (x % (i as u64 + 1)) as usize);
    }
    order
}

struct Run {
    mpps: f64,
    packets: usize,
    dropped: usize,
    secs: f64,
    /// Where in the flow order the next window starts.
    next: usize,
}

/// Established traffic in a fixed pseudo-random order over all flows, for `secs`.
/// Measurement windows per path, interleaved with the other paths'.
const ROUNDS: usize = 10;

/// The prefetch distance of the pipeline (packets between its stages).
const DIST: usize = 4;

fn measure(
    sf: &mut Stateful,
    net: &mut Router,
    fr: &mut Frames,
    order: &[u32],
    start: usize,
    secs: f64,
    path: Path,
) -> Run {
    let mut n = 0usize;
    let mut dropped = 0usize;
    // A rolling software pipeline (as DPDK applications do): while packet k is processed,
    // packet k+3d's index slot, packet k+2d's entry head and packet k+d's entry tail (unless
    // offloaded) are being fetched, so their cache misses overlap without bursts that
    // exhaust the core's line fill buffers.
    const L: usize = 4 * DIST;
    let mut ring = [[0u8; FRAME]; L];
    let mut pms = [PacketMeta::default(); L];
    let mut hs = [0u64; L];
    let receive = |i: usize,
                   fr: &mut Frames,
                   ring: &mut [[u8; FRAME]; L],
                   pms: &mut [PacketMeta; L],
                   hs: &mut [u64; L],
                   sf: &Stateful| {
        let slot = i % L;
        ring[slot].copy_from_slice(fr.get(order[(start + i) % order.len()] as usize));
        let pm = PacketMeta::parse(&ring[slot], LinkType::Ethernet);
        pms[slot] = pm;
        hs[slot] = sf.prefetch_index(&pm);
    };
    // the full path: every packet looks its route and neighbour up
    net.set_route_cache(path != Path::Full);
    net.set_fast_path(path == Path::Flowtable);
    let t0 = Instant::now();
    for i in 0..3 * DIST {
        receive(i, fr, &mut ring, &mut pms, &mut hs, sf);
        if i >= DIST {
            sf.prefetch_entry(hs[(i - DIST) % L]);
        }
    }
    for &h in &hs[..DIST] {
        sf.prefetch_rest(h);
    }
    let mut k = 0usize;
    loop {
        receive(k + 3 * DIST, fr, &mut ring, &mut pms, &mut hs, sf);
        sf.prefetch_entry(hs[(k + 2 * DIST) % L]);
        sf.prefetch_rest(hs[(k + DIST) % L]);
        let cur = k % L;
        if !forward_parsed(
            sf,
            net,
            &mut ring[cur],
            pms[cur],
            hs[cur],
            fr.csum,
            2_000_000_000,
        ) {
            dropped += 1;
        }
        n += 1;
        k += 1;
        if k.is_multiple_of(65536) && t0.elapsed().as_secs_f64() >= secs {
            break;
        }
    }
    Run {
        mpps: n as f64 / t0.elapsed().as_secs_f64() / 1e6,
        packets: n,
        dropped,
        secs: t0.elapsed().as_secs_f64(),
        next: start + k,
    }
}

fn build(rules: usize, flow: bool, flows: usize) -> anyhow::Result<Stateful> {
    let text = ruleset(rules, flow);
    let rs = match weir_lang::load_str("pipeline.nft", &text) {
        Ok((rs, _)) => rs,
        Err((sm, d)) => anyhow::bail!("{}", weir_lang::diag::render_all(&d, &sm)),
    };
    let cfg = CtConfig {
        max_entries: flows,
        ..CtConfig::default()
    };
    Ok(Stateful::new(
        Engine::new(Compiled::build(&rs, Mode::Compiled)),
        cfg,
    ))
}

/// The first packet of every flow through the router (every one must make a connection);
/// returns connections per second.
fn new_connections(
    sf: &mut Stateful,
    net: &mut Router,
    fr: &mut Frames,
    flows: usize,
) -> anyhow::Result<f64> {
    net.set_route_cache(true);
    net.set_fast_path(true);
    let t0 = Instant::now();
    let mut refused = 0usize;
    for i in 0..flows {
        let csum = fr.csum;
        if !forward(sf, net, fr.get(i), csum, 1_000_000_000) {
            refused += 1;
        }
    }
    let s = t0.elapsed().as_secs_f64();
    anyhow::ensure!(
        sf.ct().len() == flows && refused == 0,
        "the table holds {} of {} flows ({refused} refused): the benchmark is wrong",
        sf.ct().len(),
        flows
    );
    Ok(flows as f64 / s)
}

pub fn pipeline(a: PipelineArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        a.flows >= 4 * DIST && a.flows <= 1 << 24,
        "--flows: {}..=16777216 (the packets in flight)",
        4 * DIST
    );
    anyhow::ensure!(
        a.rules >= 1 && a.rules <= 65536,
        "--rules: 1..=65536 (one server each in 198.19.0.0/16)"
    );
    anyhow::ensure!(a.routes >= 1 && a.routes <= 60000, "--routes: 1..=60000");
    let mut net = router(a.routes, a.rp_filter);
    let order = shuffled(a.flows);
    let mut new_conn_per_s = 0.0;
    let mut bpe = (0, 0);
    let none = || Run {
        mpps: f64::NAN,
        packets: 0,
        dropped: 0,
        secs: 0.0,
        next: 0,
    };
    let mut out = vec![none(), none(), none()];
    // the route cache against the full path, window by window (adjacent windows see the
    // same machine): their median is the speedup reported
    let mut ratios: Vec<f64> = Vec::new();
    let want = |p: Path| a.only.is_none_or(|o| o == p);
    // The full path and the route cache share one table (the same ruleset and connections);
    // their windows alternate, so that the machine's drift (other tenants, frequency) falls
    // on both alike. The flowtable's table is built once that one is freed: one table in
    // memory at a time, as a router has.
    if want(Path::Full) || want(Path::RouteCache) {
        let mut sf = build(a.rules, false, a.flows)?;
        let mut fr = Frames::new(a.flows, a.rules, false, a.link);
        // (the route of each connection is cached from its first packet; the full path
        // ignores it)
        new_conn_per_s = new_connections(&mut sf, &mut net, &mut fr, a.flows)?;
        bpe = (sf.ct().bytes_per_entry(), sf.ct().bytes_per_entry_v6());
        for _ in 0..ROUNDS {
            let mut pair = [f64::NAN; 2];
            for (k, path) in [(0, Path::Full), (1, Path::RouteCache)] {
                if !want(path) {
                    continue;
                }
                let t = &mut out[k];
                let r = measure(
                    &mut sf,
                    &mut net,
                    &mut fr,
                    &order,
                    t.next,
                    a.seconds / ROUNDS as f64,
                    path,
                );
                t.packets += r.packets;
                t.dropped += r.dropped;
                t.secs += r.secs;
                t.next = r.next;
                pair[k] = r.mpps;
            }
            ratios.push(pair[1] / pair[0]);
        }
    }
    if want(Path::Flowtable) {
        let mut sf = build(a.rules, true, a.flows)?;
        let mut fr = Frames::new(a.flows, a.rules, false, a.link);
        let ncs = new_connections(&mut sf, &mut net, &mut fr, a.flows)?;
        if new_conn_per_s == 0.0 {
            new_conn_per_s = ncs;
            bpe = (sf.ct().bytes_per_entry(), sf.ct().bytes_per_entry_v6());
        }
        // the answers make the connections established: `flow add` offloads them
        let mut rep = Frames::new(a.flows, a.rules, true, a.link);
        for i in 0..a.flows {
            let f = rep.get(i);
            let mut pm = PacketMeta::parse(f, LinkType::Ethernet);
            let mut pc = PacketCt::default();
            let mut meta = Meta::with_ifnames("wan0", "");
            for hook in [Hook::Prerouting, Hook::Forward, Hook::Postrouting] {
                sf.hook_mut(hook, f, &mut pm, &mut meta, 1_000_000_001, &mut pc);
                meta.oifname = Meta::with_ifnames("", "lan0").oifname;
            }
        }
        anyhow::ensure!(
            sf.stats().offloaded as usize == a.flows,
            "{} of {} flows offloaded: the benchmark is wrong",
            sf.stats().offloaded,
            a.flows
        );
        let r = measure(
            &mut sf,
            &mut net,
            &mut fr,
            &order,
            0,
            a.seconds,
            Path::Flowtable,
        );
        anyhow::ensure!(
            sf.stats().fast_path as usize >= r.packets - r.dropped,
            "packets missed the fast path"
        );
        out[2] = r;
    }
    for t in &mut out {
        if t.secs > 0.0 {
            t.mpps = t.packets as f64 / t.secs / 1e6;
        }
    }
    let dropped: usize = out.iter().map(|r| r.dropped).sum();
    let (full, rc, ft) = (out[0].mpps, out[1].mpps, out[2].mpps);
    ratios.retain(|r| r.is_finite());
    ratios.sort_by(f64::total_cmp);
    let rc_speedup = ratios.get(ratios.len() / 2).copied().unwrap_or(f64::NAN);
    if a.json {
        println!(
            "{}",
            json!({
                "flows": a.flows, "rules": a.rules, "routes": a.routes,
                "rp_filter": format!("{:?}", a.rp_filter).to_lowercase(),
                "link": format!("{:?}", a.link).to_lowercase(),
                "full_mpps": full, "route_cache_mpps": rc, "flowtable_mpps": ft,
                "new_conn_per_s": new_conn_per_s, "bytes_per_entry": bpe.0,
                "bytes_per_entry_v6": bpe.1,
                "route_cache_speedup": rc_speedup, "flowtable_speedup": ft / full,
                "packets": out.iter().map(|r| r.packets).sum::<usize>(), "dropped": dropped,
            })
        );
    } else {
        println!(
            "weir bench pipeline: {} flows, {} forward rules, {} routes, rp_filter {:?} on lan0 ({:?}); one core, 64-byte UDP/IPv4 frames",
            a.flows, a.rules, a.routes, a.rp_filter, a.link
        );
        println!(
            "  new connections     {:>7.2} M/s  ({:.0} ns each)",
            new_conn_per_s / 1e6,
            1e9 / new_conn_per_s
        );
        for (name, m) in [("full path", full), ("route cache", rc), ("flowtable", ft)] {
            println!(
                "  {name:<19} {m:>7.2} Mpps ({:.0} ns per packet, {:.2}x the full path)",
                1e3 / m,
                m / full
            );
        }
        println!(
            "  route cache         {rc_speedup:.3}x the full path, median of {} paired windows",
            ratios.len()
        );
        println!(
            "  bytes per entry     {} (IPv4), {} (IPv6), hash index included",
            bpe.0, bpe.1
        );
        println!("  dropped             {dropped}");
    }
    Ok(if dropped == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    })
}

#[derive(clap::Args)]
pub struct SynfloodArgs {
    /// SYNs of distinct connections.
    #[arg(long, default_value_t = 10_000_000)]
    syns: usize,
    /// Connection table size.
    #[arg(long, default_value_t = 1 << 20)]
    table: usize,
    /// Established connections that must keep working through the flood.
    #[arg(long, default_value_t = 1000)]
    established: usize,
    #[arg(long)]
    json: bool,
}

/// A SYN flood of distinct connections through a bounded table, with established connections
/// exchanging packets throughout: memory stays bounded, the established connections keep
/// working, evicted and refused counts are reported.
pub fn synflood(a: SynfloodArgs) -> anyhow::Result<ExitCode> {
    use weir_wire::build::{tcp_flags as tf, Tcp};
    anyhow::ensure!(
        a.table >= 2 && a.established < a.table,
        "--established < --table"
    );
    let rs = weir_lang::load_str(
        "flood.nft",
        "table ip f { chain fwd { type filter hook forward priority 0; policy drop;
            ct state established,related accept
            ct state new tcp flags syn tcp dport 80 accept } }",
    )
    .map_err(|(sm, d)| anyhow::anyhow!("{}", weir_lang::diag::render_all(&d, &sm)))?
    .0;
    let mut sf = Stateful::new(
        Engine::new(Compiled::build(&rs, Mode::Compiled)),
        CtConfig {
            max_entries: a.table,
            ..CtConfig::default()
        },
    );
    let s = 1_000_000_000u64;
    let one = |sf: &mut Stateful, f: &mut [u8], now: u64| -> bool {
        let mut pm = PacketMeta::parse(f, LinkType::Ethernet);
        let mut pc = PacketCt::default();
        let mut meta = Meta::with_ifnames("lan0", "wan0");
        for hook in [Hook::Prerouting, Hook::Forward, Hook::Postrouting] {
            if !sf
                .hook_mut(hook, f, &mut pm, &mut meta, now, &mut pc)
                .is_accept()
            {
                return false;
            }
        }
        sf.finish(&mut pc, now).is_accept()
    };
    let client = |i: usize| Ipv4Addr::from(u32::from_be_bytes([198, 18, 0, 0]) + i as u32 % 65536);
    let server = Ipv4Addr::new(198, 19, 0, 80);
    // established connections: handshake, then data after 2 s (assured)
    for i in 0..a.established {
        let c = client(i);
        let p = 10000 + (i / 65536) as u16;
        let mut f = Builder::new().tcp(c, server, &Tcp::new(p, 80, tf::SYN).seq(1), &[]);
        one(&mut sf, &mut f, s);
        let mut f = Builder::new().tcp(
            server,
            c,
            &Tcp::new(80, p, tf::SYN | tf::ACK).seq(9).ack(2),
            &[],
        );
        one(&mut sf, &mut f, s);
        let mut f = Builder::new().tcp(c, server, &Tcp::new(p, 80, tf::ACK).seq(2).ack(10), &[]);
        one(&mut sf, &mut f, s);
    }
    let t0 = Instant::now();
    let mut est_ok = 0usize;
    let mut est_total = 0usize;
    let mut flood_dropped = 0usize;
    for k in 0..a.syns {
        // a distinct connection: source address and port from k
        let src = u32::from_be_bytes([198, 18, 0, 0]) + (k as u32 >> 14) % 65536;
        let port = 20000 + (k & 0x3fff) as u16;
        let mut f = Builder::new().tcp(
            Ipv4Addr::from(src),
            server,
            &Tcp::new(port, 80, tf::SYN),
            &[],
        );
        if !one(&mut sf, &mut f, s + 1 + k as u64) {
            flood_dropped += 1;
        }
        if k % 10_000 == 0 {
            // every established connection still passes, both ways
            for i in 0..a.established.min(100) {
                let j = (k / 10_000 * 100 + i) % a.established;
                let (c, p) = (client(j), 10000 + (j / 65536) as u16);
                let mut f =
                    Builder::new().tcp(c, server, &Tcp::new(p, 80, tf::ACK).seq(2).ack(10), &[]);
                est_total += 1;
                est_ok += one(&mut sf, &mut f, s + 1 + k as u64) as usize;
            }
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    let st = sf.ct().stats();
    let mem = sf.ct().len() * sf.ct().bytes_per_entry();
    if a.json {
        println!(
            "{}",
            json!({
                "syns": a.syns, "table": a.table, "entries": sf.ct().len(),
                "evicted": st.evicted, "refused": st.refused, "flood_dropped": flood_dropped,
                "established": a.established, "established_checks": est_total,
                "established_ok": est_ok, "seconds": secs, "syns_per_s": a.syns as f64 / secs,
                "table_bytes": mem,
            })
        );
    } else {
        println!(
            "weir bench synflood: {} SYNs of distinct connections through a {}-entry table, {} established connections",
            a.syns, a.table, a.established
        );
        println!(
            "  entries at the end   {} (bounded by the table)",
            sf.ct().len()
        );
        println!("  evicted (unassured)  {}", st.evicted);
        println!("  refused              {}", st.refused);
        println!("  SYNs dropped         {flood_dropped}");
        println!("  established checks   {est_ok} of {est_total} passed");
        println!(
            "  {:.2} M SYN/s, {:.1} MiB of entries",
            a.syns as f64 / secs / 1e6,
            mem as f64 / (1 << 20) as f64
        );
    }
    Ok(if est_ok == est_total && sf.ct().len() <= a.table {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    })
}
