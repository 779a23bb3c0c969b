//! `fib` beyond nft's own tests (which run it at prerouting only): every lookup nft accepts
//! at every IP hook, in `ip` and `ip6` tables, on packets whose looked-up address is each of
//! the oracle model's (local, broadcast, anycast, in a subnet, behind a route, blackholed,
//! multicast, zero, link-local ...), evaluated by the oracle as the kernel does
//! (`oracle::fibenv::eval`) and by weir's engines asking the same model: the rule `fib FLAGS
//! RESULT VALUE` with the oracle's value must match in weir, and with another value not.

use std::net::IpAddr;
use weir_lab::oracle::compare::Weir;
use weir_lab::oracle::fibenv::{self, FibModel};
use weir_lab::oracle::gen::template;
use weir_lab::oracle::interp::{ip_checksum, pktinfo, Env, Family, Packet, ETH};
use weir_lab::rng::Rng;
use weir_lang::ir::Hook;

const TYPES: [&str; 10] = [
    "unspec",
    "unicast",
    "local",
    "broadcast",
    "anycast",
    "multicast",
    "blackhole",
    "unreachable",
    "prohibit",
    "throw",
];

fn with_addrs(p: &Packet, v6: bool, s: IpAddr, d: IpAddr) -> Packet {
    let mut q = p.clone();
    let (so, d_o) = if v6 {
        (ETH + 8, ETH + 24)
    } else {
        (ETH + 12, ETH + 16)
    };
    for (o, a) in [(so, s), (d_o, d)] {
        let b = match a {
            IpAddr::V4(a) => a.octets().to_vec(),
            IpAddr::V6(a) => a.octets().to_vec(),
        };
        q.frame[o..o + b.len()].copy_from_slice(&b);
    }
    if !v6 {
        q.frame[ETH + 10..ETH + 12].fill(0);
        let c = ip_checksum(&q.frame[ETH..ETH + 20]);
        q.frame[ETH + 10..ETH + 12].copy_from_slice(&c.to_be_bytes());
    }
    q
}

/// Values for the rule from what the oracle stored: the one that must match, and others that
/// must not (an empty name: it is neither device's).
fn values(result: &str, v: &[u8]) -> Vec<(String, bool)> {
    match result {
        "check" => {
            let yes = if v[0] == 1 { "exists" } else { "missing" };
            let no = if v[0] == 1 { "missing" } else { "exists" };
            vec![(yes.into(), true), (no.into(), false)]
        }
        "oifname" => {
            let n = v.iter().position(|&c| c == 0).unwrap_or(v.len());
            let name = String::from_utf8_lossy(&v[..n]).into_owned();
            if name.is_empty() {
                return vec![
                    ("!= \"eth0\"".into(), true),
                    ("!= \"eth1\"".into(), true),
                    ("\"lo\"".into(), false),
                ];
            }
            let other = if name == "eth1" { "eth0" } else { "eth1" };
            vec![
                (format!("\"{name}\""), true),
                (format!("\"{other}\""), false),
            ]
        }
        _ => {
            let x = u32::from_le_bytes(v[..4].try_into().unwrap());
            if result == "type" {
                let y = (x as usize + 1) % TYPES.len();
                vec![(TYPES[x as usize].into(), true), (TYPES[y].into(), false)]
            } else {
                vec![(x.to_string(), true), ((x + 1).to_string(), false)]
            }
        }
    }
}

#[test]
fn every_lookup_at_every_hook_agrees_with_the_kernels() {
    let model = std::sync::Arc::new(FibModel::default());
    let mut rng = Rng::new(0x666962);
    let mut compared = 0usize;
    let mut failures = Vec::new();
    for (fam, v6) in [("ip", false), ("ip6", true)] {
        // TCP, and for IPv6 also ICMPv6 (neighbour discovery from `::` is special)
        let mut bases = vec![template(v6, &mut rng)];
        if v6 {
            let mut icmp = bases[0].clone();
            icmp.frame[ETH + 6] = 58;
            bases.push(icmp);
        }
        let addrs = fibenv::candidates(&model, v6, 7);
        for hook in [
            Hook::Prerouting,
            Hook::Input,
            Hook::Forward,
            Hook::Output,
            Hook::Postrouting,
        ] {
            let env = Env {
                family: if v6 { Family::Ip6 } else { Family::Ip },
                hook,
                fib: Some(model.clone()),
            };
            for addr in ["saddr", "daddr"] {
                for dev in ["", " . iif", " . oif", " . mark . iif"] {
                    for result in ["oif", "oifname", "type", "check"] {
                        let flags = format!("{addr}{dev}");
                        let words: Vec<String> =
                            flags.split(" . ").map(|w| w.trim().to_string()).collect();
                        let rule = |v: &str| {
                            format!(
                                "table {fam} t {{ chain c {{ type filter hook {} priority 0; fib {flags} {result} {v} }} }}",
                                hook.name()
                            )
                        };
                        // what nft_fib_init / nft_fib_validate refuse, weir refuses
                        let Ok(_) = Weir::load(&rule("0"), hook) else {
                            continue;
                        };
                        let zero: IpAddr = if v6 {
                            "::".parse().unwrap()
                        } else {
                            "0.0.0.0".parse().unwrap()
                        };
                        let cases = addrs.iter().enumerate().flat_map(|(i, a)| {
                            let other = addrs[(i * 7 + 3) % addrs.len()];
                            bases
                                .iter()
                                .flat_map(move |b| [(b, *a, other), (b, *a, zero)])
                        });
                        for (base, a, other) in cases {
                            let (s, d) = if addr == "saddr" {
                                (a, other)
                            } else {
                                (other, a)
                            };
                            let p = with_addrs(base, v6, s, d);
                            let Ok(Some(info)) = pktinfo(&p, &env) else {
                                continue;
                            };
                            let present = result == "check";
                            let res = if present { "oif" } else { result };
                            let v = fibenv::eval(
                                &model, &env, &words, res, present, &p.frame, &info, p.mark,
                            )
                            .expect("an IP packet");
                            for (val, want) in values(result, &v) {
                                let mut w = Weir::load(&rule(&val), hook).unwrap_or_else(|e| {
                                    panic!("{}: {e}", rule(&val));
                                });
                                w.set_fib(model.clone());
                                for (m, ..) in w.matches(&p) {
                                    if m != want {
                                        failures
                                            .push(format!("{}: {s} -> {d}: weir {m}", rule(&val)));
                                    }
                                }
                                compared += 1;
                            }
                        }
                    }
                }
            }
        }
    }
    println!("fib sweep: {compared} rule and packet pairs compared");
    assert!(compared > 2000, "{compared}");
    assert!(
        failures.is_empty(),
        "{} differences, the first: {:#?}",
        failures.len(),
        &failures[..failures.len().min(10)]
    );
}
