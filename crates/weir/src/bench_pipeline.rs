//! `weir bench pipeline`: the stateful pipeline on one core, in memory: new connections per
//! second into a table of `--flows` entries, then packets of those established flows through
//! prerouting (connection tracking), a forward chain of `--rules` rules and postrouting.
//!
//! Packets are 64-byte UDP/IPv4 datagrams given as parsed headers (UDP tracking and the rules
//! read only the headers), in a random order over all flows so the table is exercised as by
//! real traffic, not from the cache.

use serde_json::json;
use std::net::Ipv4Addr;
use std::process::ExitCode;
use std::time::Instant;
use weir_conntrack::Config as CtConfig;
use weir_engine::stateful::{PacketCt, Stateful};
use weir_engine::{Compiled, Decision, Engine, Meta, Mode, Pkt};
use weir_lang::ir::Hook;
use weir_wire::PacketMeta;

#[derive(clap::Args)]
pub struct PipelineArgs {
    /// Concurrent flows (connection table entries).
    #[arg(long, default_value_t = 1 << 20)]
    flows: usize,
    /// Forward rules in front of the flows' accept.
    #[arg(long, default_value_t = 1000)]
    rules: usize,
    /// Seconds of established traffic.
    #[arg(long, default_value_t = 1.0)]
    seconds: f64,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

/// The forward chain: `rules` rules, each accepting UDP to one server; the flows' servers are
/// spread over all of them (so the matching rule is anywhere in the chain).
fn ruleset(rules: usize) -> String {
    let mut s = String::from("table ip f {\n  chain fwd {\n    type filter hook forward priority filter; policy drop;\n    ct state invalid drop\n");
    for i in 0..rules {
        let host = Ipv4Addr::from(u32::from_be_bytes([198, 19, 0, 0]) + i as u32);
        s.push_str(&format!(
            "    ip daddr {host} udp dport 53 counter accept\n"
        ));
    }
    s.push_str("  }\n}\n");
    s
}

fn flow(i: usize, rules: usize) -> PacketMeta {
    let src = u32::from_be_bytes([198, 18, 0, 0]) + (i as u32 >> 8) % (1 << 16);
    let r = (i % rules) as u32;
    let dst = u32::from_be_bytes([198, 19, 0, 0]) + r;
    PacketMeta::ipv4_tuple(
        src,
        dst,
        17,
        1024 + (i & 0x3fff) as u16 + (i >> 22) as u16,
        53,
    )
}

fn run(sf: &mut Stateful, pm: &PacketMeta, now: u64) -> Decision {
    let mut pc = PacketCt::default();
    for hook in [Hook::Prerouting, Hook::Forward, Hook::Postrouting] {
        let mut p = Pkt {
            frame: &[],
            pm,
            meta: Meta::with_ifnames("lan0", if hook == Hook::Prerouting { "" } else { "wan0" }),
            now_ns: now,
        };
        let d = sf.hook(hook, &mut p, &mut pc);
        if !d.is_accept() {
            return d;
        }
    }
    sf.finish(&mut pc, now)
}

pub fn pipeline(a: PipelineArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(a.flows >= 1 && a.flows <= 1 << 24, "--flows: 1..=16777216");
    anyhow::ensure!(
        a.rules >= 1 && a.rules <= 65536,
        "--rules: 1..=65536 (one server each in 198.19.0.0/16)"
    );
    let text = ruleset(a.rules);
    let rs = match weir_lang::load_str("pipeline.nft", &text) {
        Ok((rs, _)) => rs,
        Err((sm, d)) => anyhow::bail!("{}", weir_lang::diag::render_all(&d, &sm)),
    };
    let cfg = CtConfig {
        max_entries: a.flows,
        ..CtConfig::default()
    };
    let mut sf = Stateful::new(Engine::new(Compiled::build(&rs, Mode::Compiled)), cfg);
    let flows: Vec<PacketMeta> = (0..a.flows).map(|i| flow(i, a.rules)).collect();
    let now = 1_000_000_000u64;
    // new connections: the first packet of every flow, confirmed
    let t0 = Instant::now();
    let mut refused = 0usize;
    for pm in &flows {
        if !run(&mut sf, pm, now).is_accept() {
            refused += 1;
        }
    }
    let new_s = t0.elapsed().as_secs_f64();
    anyhow::ensure!(
        sf.ct.len() == a.flows && refused == 0,
        "the table holds {} of {} flows ({refused} refused): the benchmark is wrong",
        sf.ct.len(),
        a.flows
    );
    // established traffic in a fixed pseudo-random order
    let mut order: Vec<u32> = (0..a.flows as u32).collect();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in (1..order.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order.swap(i, (x % (i as u64 + 1)) as usize);
    }
    let mut n = 0usize;
    let mut dropped = 0usize;
    let t0 = Instant::now();
    'outer: loop {
        for chunk in order.chunks(65536) {
            for &i in chunk {
                if !run(&mut sf, &flows[i as usize], now + 1).is_accept() {
                    dropped += 1;
                }
            }
            n += chunk.len();
            if t0.elapsed().as_secs_f64() >= a.seconds {
                break 'outer;
            }
        }
    }
    let full_mpps = n as f64 / t0.elapsed().as_secs_f64() / 1e6;
    let new_conn_per_s = a.flows as f64 / new_s;
    let bpe = sf.ct.bytes_per_entry();
    if a.json {
        println!(
            "{}",
            json!({
                "flows": a.flows, "rules": a.rules,
                "full_mpps": full_mpps,
                "route_cache_mpps": null, "flowtable_mpps": null,
                "new_conn_per_s": new_conn_per_s, "bytes_per_entry": bpe,
                "bytes_per_entry_v6": sf.ct.bytes_per_entry_v6(),
                "packets": n, "dropped": dropped,
                "note": "route cache and flowtable fast path not implemented yet",
            })
        );
    } else {
        println!(
            "weir bench pipeline: {} flows, {} forward rules, one core, UDP/IPv4 headers",
            a.flows, a.rules
        );
        println!(
            "  new connections     {:.2} M/s ({:.0} ns each)",
            new_conn_per_s / 1e6,
            1e9 / new_conn_per_s
        );
        println!(
            "  established, full   {full_mpps:.2} Mpps ({:.0} ns per packet; prerouting + conntrack + forward + postrouting)",
            1e3 / full_mpps
        );
        println!("  route cache         not implemented yet");
        println!("  flowtable           not implemented yet");
        println!(
            "  bytes per entry     {bpe} (IPv4), {} (IPv6), index included",
            sf.ct.bytes_per_entry_v6()
        );
        println!("  dropped             {dropped} of {n}");
    }
    Ok(if dropped == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    })
}
