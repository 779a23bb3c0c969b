//! nftables' rule tests against the kernel, packet by packet.
//!
//! Each `;ok` rule of `../shared/nftables-tests/py` is loaded alone in its table (with the
//! file's sets and chains, as `nft-test.py` builds it) into a router namespace with Debian's
//! `nft`; the packets the bytecode oracle generates for it (hits, misses, variants) are sent
//! into the router's `eth0` from a second namespace; a chain of the lab at the device's
//! ingress sets `meta nftrace set 1`, and the kernel's trace events (`trace`) say, for each
//! packet, whether it reached the rule's chain and whether the rule ran to its end. Weir's
//! engine runs the same table on the same packet with the metadata the kernel had (input
//! device `eth0` index 2, output `eth1` index 3, mark 0, the packet untracked, the wall clock
//! of the moment it was sent), and the two answers are compared. The rule is not changed: its
//! verdict and statements act in the kernel as written.
//!
//! The router: `eth0` (index 2, 02:00:00:00:00:01, the address the generated frames are for)
//! and `eth1` (index 3), veths to the sender's namespace; forwarding on, reverse-path filter
//! off, everything untracked (`notrack` at priority -300). Rules at `prerouting` and `ingress`
//! see every frame the kernel takes in; for `input`, every address is made local (`local
//! default dev lo`); for `forward` and `postrouting`, the default route leaves by `eth1`.
//! Not reached from outside (left out, counted): `output` and `egress` chains, NAT chains
//! (they see tracked packets only), the `bridge` and `arp` families.

pub mod dumps;
mod osf;
mod trace;

use crate::kernel::{self, NS_PREFIX};
use crate::oracle::compare::{case_block, case_packets, first_hook, unknown_reason, Weir};
use crate::oracle::fibenv::FibModel;
use crate::oracle::gen;
use crate::oracle::interp::{ifname, Conn, Ct, Env, Family, Packet};
use crate::rng::Rng;
use crate::sys;
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::os::fd::OwnedFd;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};
use trace::{Event, Kind, Traces};
use weir_engine::fib::rtn;
use weir_lang::ir::Hook;

/// The lab's own tables: the trace chains at the router's ingress and output; and (for
/// filter chains: NAT chains see tracked packets only) the untracking chains.
const LAB_RULES: &str = "table netdev weirtrace {\n  chain tracing {\n    type filter hook ingress device eth0 priority -1000; policy accept;\n    meta nftrace set 1\n  }\n}\ntable inet weirtraceout {\n  chain tracing {\n    type filter hook output priority -1000; policy accept;\n    meta nftrace set 1\n  }\n}\n";
const LAB_NOTRACK: &str = "table inet weirnotrack {\n  chain pre {\n    type filter hook prerouting priority -300; policy accept;\n    notrack\n  }\n  chain out {\n    type filter hook output priority -300; policy accept;\n    notrack\n  }\n}\n";

/// The router's routing, as the kernel has it in `forward` mode (the lab configures the
/// namespace from it and weir's `fib` answers from it): eth0 198.18.0.1/24 and
/// 2001:db8::1/64, eth1 198.18.1.1/24 and 2001:db8:1::1/64 (with their link-local
/// addresses, from their MACs), the default route by eth1, a prefix behind eth0 (for
/// reverse-path lookups), a blackhole, a prohibit and an unreachable route.
pub fn lab_fib() -> FibModel {
    FibModel::from_lists(
        &[(1, "lo"), (2, "eth0"), (3, "eth1")],
        &[
            ("127.0.0.1", 8, 1),
            ("::1", 128, 1),
            ("198.18.0.1", 24, 2),
            ("2001:db8::1", 64, 2),
            ("fe80::ff:fe00:1", 64, 2),
            ("198.18.1.1", 24, 3),
            ("2001:db8:1::1", 64, 3),
            ("fe80::ff:fe00:3", 64, 3),
        ],
        &[
            ("198.18.100.0", 24, rtn::UNICAST, 2, Some("198.18.0.2")),
            ("2001:db8:100::", 40, rtn::UNICAST, 2, Some("2001:db8::2")),
            ("0.0.0.0", 0, rtn::UNICAST, 3, Some("198.18.1.2")),
            ("::", 0, rtn::UNICAST, 3, Some("2001:db8:1::2")),
            ("198.18.200.0", 24, rtn::BLACKHOLE, 0, None),
            ("2001:db8:dead::", 48, rtn::BLACKHOLE, 0, None),
            ("198.18.201.0", 24, rtn::PROHIBIT, 0, None),
            ("2001:db8:beef::", 48, rtn::PROHIBIT, 0, None),
            ("198.18.202.0", 24, rtn::UNREACHABLE, 0, None),
            ("2001:db8:bad::", 48, rtn::UNREACHABLE, 0, None),
        ],
    )
}

/// The frame that closes each round: an Ethernet frame of the local experimental EtherType
/// with a sequence number, traced at ingress like the rest.
fn barrier(seq: u32) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 0x01, 0x02, 0, 0, 0, 0, 0x02, 0x88, 0xb5];
    f.extend(b"weirpy");
    f.extend(seq.to_be_bytes());
    f.resize(60, 0);
    f
}

/// What the kernel did with one packet at the rule's chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KernelSaw {
    /// The packet did not reach the chain (dropped before the hook, routed elsewhere).
    NotReached,
    /// It reached the chain; Some(verdict) when the rule ran to its end.
    Reached(Option<String>),
}

/// A packet the kernel and weir disagree on.
#[derive(Clone, Debug)]
pub struct Difference {
    pub at: String,
    pub family: String,
    pub rule: String,
    pub frame: Vec<u8>,
    pub kernel: Option<String>,
    /// Weir's answer, compiled and linear.
    pub weir: Vec<bool>,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hex: String = self.frame.iter().map(|b| format!("{b:02x}")).collect();
        write!(
            f,
            "{} {} `{}`: kernel {}, weir {:?}\n      frame {hex}",
            self.at,
            self.family,
            self.rule,
            match &self.kernel {
                Some(v) => format!("matched ({v})"),
                None => "did not match".into(),
            },
            self.weir
        )
    }
}

/// The figures of a run.
#[derive(Debug, Default)]
pub struct Report {
    pub rules_compared: usize,
    /// Rules the kernel matched at least one packet of.
    pub rules_hit: usize,
    pub packets: usize,
    pub packets_matching: usize,
    /// Sent packets that did not reach the rule's chain in the kernel.
    pub packets_not_reached: usize,
    pub skipped: BTreeMap<String, usize>,
    /// Later fragments the kernel matched and weir did not: the kernel's fast payload path
    /// (`nft_payload_fast_eval`, aligned loads of 1, 2 or 4 bytes) reads a later fragment's
    /// data as its transport header, where `nft_payload_eval` (and weir) see none. A kernel
    /// bug (a fix adding the `fragoff` check was posted to netfilter-devel); not a difference.
    pub fast_path_fragments: usize,
    /// Rules of regular chains tried in their chain made a base chain.
    pub regular_as_base: usize,
    /// IPv4 fragments at the input hook: the kernel evaluates the datagram they are
    /// reassembled into (`ip_local_deliver`), not compared.
    pub packets_reassembled: usize,
    pub differences: Vec<Difference>,
}

impl Report {
    fn skip(&mut self, why: impl Into<String>) {
        *self.skipped.entry(why.into()).or_default() += 1;
    }

    /// Print the figures, the reasons rules were not compared and the first `show` differing
    /// rules; then check the differences against an exceptions file (`FILE:LINE reason` per
    /// line, `#` comments): an error names the differences it does not list, and, when
    /// `whole` (a full run), the listed rules that no longer differ and a count of rules
    /// compared under `floor`.
    pub fn finish(
        &self,
        label: &str,
        elapsed_s: f64,
        exceptions: &std::path::Path,
        show: usize,
        whole: bool,
        floor: usize,
    ) -> Result<(), String> {
        let skipped: usize = self.skipped.values().sum();
        println!(
            "kernel lab ({label}): {} rules compared ({} of regular chains made base chains; {} matched by the kernel at least once), {} packets ({} matching), {} not reaching the rule's chain, {} later fragments matched by the kernel's fast payload path only, {} IPv4 fragments reassembled before the input hook, {} differences; {skipped} rules not compared; {elapsed_s:.1} s",
            self.rules_compared,
            self.regular_as_base,
            self.rules_hit,
            self.packets,
            self.packets_matching,
            self.packets_not_reached,
            self.fast_path_fragments,
            self.packets_reassembled,
            self.differences.len(),
        );
        let mut top: Vec<_> = self.skipped.iter().collect();
        top.sort_by_key(|t| std::cmp::Reverse(*t.1));
        println!("rules not compared, by reason:");
        for (why, n) in top.iter().take(30) {
            println!("  {n:5}  {why}");
        }
        let listed: std::collections::BTreeSet<String> = std::fs::read_to_string(exceptions)
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .filter_map(|l| l.split_whitespace().next().map(str::to_string))
            .collect();
        let differ_at: std::collections::BTreeSet<String> =
            self.differences.iter().map(|d| d.at.clone()).collect();
        println!(
            "differences ({} packets, {} rules; first {show} rules shown):",
            self.differences.len(),
            differ_at.len()
        );
        let mut shown = std::collections::BTreeSet::new();
        for d in &self.differences {
            if shown.len() >= show && !shown.contains(&d.at) {
                continue;
            }
            if shown.insert(d.at.clone()) {
                println!("  {d}");
            }
        }
        let file = exceptions.display();
        let unlisted: Vec<&String> = differ_at.difference(&listed).collect();
        if !unlisted.is_empty() {
            return Err(format!("differences not in {file}: {unlisted:?}"));
        }
        if whole {
            let stale: Vec<&String> = listed.difference(&differ_at).collect();
            if !stale.is_empty() {
                return Err(format!(
                    "listed in {file} but no longer different: {stale:?}"
                ));
            }
            if self.rules_compared < floor {
                return Err(format!(
                    "{} rules compared, below the floor of {floor}",
                    self.rules_compared
                ));
            }
        }
        Ok(())
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Routes {
    /// Default route by eth1.
    Forward,
    /// Every address local.
    Local,
}

/// The router and sender namespaces, the sending socket and the trace subscription.
pub struct PyLab {
    // field order is drop order: sockets first, then the namespaces
    tx: OwnedFd,
    /// Raw IPv4 and IPv6 sockets in the router, for the `output` hook.
    raw: [OwnedFd; 2],
    /// A netlink socket in the router, for conntrack requests.
    ctnl: OwnedFd,
    ct_seq: u32,
    /// Every chain sees tracked packets (each the first of its connection), not only NAT
    /// chains.
    pub tracked: bool,
    traces: Traces,
    router_ns: File,
    routes: Routes,
    seq: u32,
    /// The lab's OS fingerprints in the kernel, once an `osf` rule needed them (the error:
    /// why they could not be loaded).
    osf: Option<Result<osf::Osf, String>>,
    names: Vec<String>,
}

impl Drop for PyLab {
    fn drop(&mut self) {
        for n in self.names.iter().rev() {
            let _ = kernel::run(
                Command::new("ip").args(["netns", "del", n]),
                None,
                "ip netns del",
            );
        }
    }
}

impl PyLab {
    /// Build the namespaces (root, `ip`, `nft` needed; [`kernel::unavailable`] says why not).
    pub fn new() -> Result<PyLab, String> {
        if let Some(why) = kernel::unavailable() {
            return Err(why);
        }
        kernel::cleanup_stale();
        static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let id = format!(
            "{NS_PREFIX}{}-py{}",
            std::process::id(),
            SEQ.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
        );
        let (r, s) = (format!("{id}-r"), format!("{id}-s"));
        let ip = |args: &[&str], stdin: Option<&str>| {
            kernel::run(Command::new("ip").args(args), stdin, "ip")
        };
        ip(&["netns", "add", &r], None)?;
        ip(&["netns", "add", &s], None).inspect_err(|_| {
            let _ = ip(&["netns", "del", &r], None);
        })?;
        // from here on, Drop removes both
        let open = |n: &str| File::open(format!("/run/netns/{n}")).map_err(|e| format!("{n}: {e}"));
        let (router_ns, sender_ns) = (open(&r)?, open(&s)?);
        let sysctls = |ns: &File, list: &[(&str, &str)]| {
            sys::in_netns(ns, || {
                for (k, v) in list {
                    sys::sysctl(k, v)?;
                }
                Ok(())
            })
            .map_err(|e| format!("sysctl: {e}"))
        };
        // the sender says nothing of its own (no IPv6: no router or neighbour solicitations)
        sysctls(
            &sender_ns,
            &[
                ("net.ipv6.conf.all.disable_ipv6", "1"),
                ("net.ipv6.conf.default.disable_ipv6", "1"),
            ],
        )?;
        sysctls(
            &router_ns,
            &[
                ("net.ipv4.ip_forward", "1"),
                ("net.ipv4.conf.all.rp_filter", "0"),
                ("net.ipv4.conf.default.rp_filter", "0"),
                ("net.ipv4.conf.all.accept_local", "1"),
                ("net.ipv4.conf.default.accept_local", "1"),
                ("net.ipv4.conf.all.route_localnet", "1"),
                ("net.ipv4.conf.default.route_localnet", "1"),
                ("net.ipv4.conf.all.send_redirects", "0"),
                ("net.ipv4.conf.default.send_redirects", "0"),
                ("net.ipv6.conf.all.forwarding", "1"),
                ("net.ipv6.conf.default.forwarding", "1"),
                ("net.ipv6.conf.all.accept_dad", "0"),
                ("net.ipv6.conf.default.accept_dad", "0"),
            ],
        )?;
        let n = |ns: &str, rest: &str| format!("ip -n {ns} {rest}");
        let script = [
            n(&r, &format!("link add eth0 index 2 address 02:00:00:00:00:01 mtu 9000 type veth peer name weirpy0 netns {s} address 02:00:00:00:00:02 mtu 9000")),
            n(&r, &format!("link add eth1 index 3 address 02:00:00:00:00:03 mtu 9000 type veth peer name weirpy1 netns {s} address 02:00:00:00:00:04 mtu 9000")),
            n(&r, "link set lo up"),
            n(&r, "link set eth0 up"),
            n(&r, "link set eth1 up"),
            n(&s, "link set weirpy0 up"),
            n(&s, "link set weirpy1 up"),
            // the next hop's addresses known for good: nothing waits for ARP or ND
            n(&r, "neigh add 198.18.1.2 lladdr 02:00:00:00:00:04 dev eth1 nud permanent"),
            n(&r, "-6 neigh add 2001:db8:1::2 lladdr 02:00:00:00:00:04 dev eth1 nud permanent"),
        ];
        // addresses and routes from the model weir's fib answers from (the link-local
        // addresses the kernel makes itself)
        let script: Vec<String> = script
            .into_iter()
            .chain(
                lab_fib()
                    .ip_commands()
                    .into_iter()
                    .filter(|c| c.starts_with("ip ") && !c.contains(" fe80:"))
                    .map(|c| format!("ip -n {r} {}", &c[3..])),
            )
            .collect();
        for line in &script {
            let args: Vec<&str> = line.split_whitespace().skip(1).collect();
            ip(&args, None)?;
        }
        let tx = sys::in_netns(&sender_ns, || sys::packet_socket("weirpy0"))
            .map_err(|e| format!("packet socket: {e}"))?;
        let traces = sys::in_netns(&router_ns, Traces::open).map_err(|e| format!("traces: {e}"))?;
        let raw = sys::in_netns(&router_ns, || {
            Ok([sys::raw_send_socket(false)?, sys::raw_send_socket(true)?])
        })
        .map_err(|e| format!("raw sockets: {e}"))?;
        let ctnl = sys::in_netns(&router_ns, || sys::nfnetlink_group_socket(0))
            .map_err(|e| format!("netlink: {e}"))?;
        let lab = PyLab {
            tx,
            raw,
            ctnl,
            ct_seq: 0,
            tracked: false,
            traces,
            router_ns,
            routes: Routes::Forward,
            seq: 0,
            osf: None,
            names: vec![r, s],
        };
        // conntrack (for NAT chains) takes the generated packets whatever their checksums
        // (the module is there once a ruleset that tracks is loaded)
        lab.nft(&format!("{LAB_RULES}{LAB_NOTRACK}"))
            .map_err(|e| format!("the lab's rules: {e}"))?;
        sys::in_netns(&lab.router_ns, || {
            sys::sysctl("net.netfilter.nf_conntrack_checksum", "0")
        })
        .map_err(|e| format!("sysctl: {e}"))?;
        Ok(lab)
    }

    /// Run `nft -f -` in the router (with TZ=UTC: nft turns a rule's times of day into UTC).
    fn nft(&self, text: &str) -> Result<String, String> {
        let text = text.to_string();
        sys::in_netns(&self.router_ns, || {
            kernel::run(
                Command::new("nft").args(["-f", "-"]).env("TZ", "UTC"),
                Some(&text),
                "nft",
            )
            .map_err(std::io::Error::other)
        })
        .map_err(|e| e.to_string())
    }

    /// `nft --debug=netlink -f -` in the router: the bytecode of a ruleset, loaded (a check
    /// with `-c` leaves out the validation the kernel does at commit: a NAT statement in a
    /// filter chain passes it).
    fn nft_bytecode(&self, text: &str) -> Result<String, String> {
        let text = text.to_string();
        sys::in_netns(&self.router_ns, || {
            kernel::run(
                Command::new("nft")
                    .args(["--debug=netlink", "-f", "-"])
                    .env("TZ", "UTC"),
                Some(&text),
                "nft",
            )
            .map_err(std::io::Error::other)
        })
        .map_err(|e| e.to_string())
    }

    /// Compare one rule of a ruleset dump in its table ([`dumps::rules`]).
    pub fn compare_dump_rule(
        &mut self,
        r: &mut Report,
        d: &dumps::DumpRule,
        seed: u64,
        rounds: usize,
    ) -> Result<(), String> {
        if d.text.contains("\tflowtable ") {
            r.skip("a flowtable: this kernel has no nf_flow_table");
            return Ok(());
        }
        let mut text = dumps::kernel_devices(&d.text);
        let base =
            chain_named(&text, &d.chain).is_some_and(|(_, spec)| first_hook(&spec).is_some());
        // a regular chain becomes a base chain of its own, at the first hook where the kernel
        // takes the rule (a filter hook, else a NAT one)
        let candidates: Vec<String> = if base {
            vec![text.clone()]
        } else {
            dumps::REGULAR_AS_BASE
                .iter()
                .filter(|(fam, _)| *fam == (d.family == "netdev"))
                .map(|(_, spec)| dumps::as_base(&text, &d.chain, spec))
                .collect()
        };
        let mut debug = Err(String::new());
        for t in candidates {
            // (loaded as a replacement of the whole ruleset: the running one may hold a table
            // of the same name; the case is loaded again, with the lab's tables, to be run)
            debug = self.nft_bytecode(&format!("flush ruleset\n{}", kernel_text(&t)));
            if debug.is_ok() {
                text = t;
                break;
            }
        }
        if !base && debug.is_ok() {
            r.regular_as_base += 1;
        }
        let debug = match debug {
            Ok(o) => o,
            Err(e) => {
                let first = e.lines().find(|l| l.contains("Error")).unwrap_or("refused");
                let first: String = first
                    .split("Error:")
                    .last()
                    .unwrap_or("")
                    .trim()
                    .chars()
                    .take(50)
                    .collect();
                if std::env::var_os("WEIR_PY_SKIPS").is_some() {
                    println!("nft refuses {} `{}`: {e}", d.at, d.rule);
                }
                r.skip(format!("nft 1.0.6 does not load it here: {first}"));
                return Ok(());
            }
        };
        let blocks = dumps::block_from_debug(&debug, &d.family, &d.table, &d.chain, &d.rule)
            .map(dumps::blocks_of)
            .unwrap_or_default();
        self.compare_in(
            r,
            &d.at,
            &d.rule,
            &text,
            Some(&d.chain),
            &blocks,
            seed,
            rounds,
        )
    }

    fn set_routes(&mut self, want: Routes) -> Result<(), String> {
        if self.routes == want {
            return Ok(());
        }
        let verb = if want == Routes::Local { "add" } else { "del" };
        for (v, dst) in [("-4", "0.0.0.0/0"), ("-6", "::/0")] {
            kernel::run(
                Command::new("ip").args([
                    "-n",
                    &self.names[0],
                    v,
                    "route",
                    verb,
                    "local",
                    dst,
                    "dev",
                    "lo",
                    "table",
                    "local",
                ]),
                None,
                "ip route",
            )?;
        }
        self.routes = want;
        Ok(())
    }

    /// Routes out of eth0 for `dup`'s gateways, in the local table ahead of the lab's local
    /// catch-all (`verb`: "add" or "del").
    fn gateway_routes(&mut self, gateways: &[std::net::IpAddr], verb: &str) -> Result<(), String> {
        for g in gateways {
            let (v, dst) = match g {
                std::net::IpAddr::V4(a) => ("-4", format!("{a}/32")),
                std::net::IpAddr::V6(a) => ("-6", format!("{a}/128")),
            };
            kernel::run(
                Command::new("ip").args([
                    "-n",
                    &self.names[0],
                    v,
                    "route",
                    verb,
                    "unicast",
                    &dst,
                    "dev",
                    "eth0",
                    "table",
                    "local",
                ]),
                None,
                "ip route",
            )?;
        }
        Ok(())
    }

    /// Send frames and read what the kernel did with each at chain `table`/`chain`. Frames go
    /// in by `eth0` (AF_PACKET from the sender), or with `local` out of the router itself (raw
    /// sockets: the IP packet, to the `output` hook). Each frame is followed by a barrier
    /// frame, and the trace events between two barriers are the frame's (the sender is pinned
    /// to one CPU, whose backlog takes frames in order); of those, only the events of the
    /// packet itself count (its trace id: an ICMP error the kernel sends meanwhile is
    /// another packet).
    fn send(
        &mut self,
        frames: &[Vec<u8>],
        table: &str,
        chain: &str,
        local: bool,
        flush_ct: bool,
    ) -> Result<Vec<Sent>, String> {
        let start_table = if local { "weirtraceout" } else { "weirtrace" };
        let show = std::env::var_os("WEIR_PY_EVENTS").is_some();
        let mut out: Vec<Sent> = Vec::with_capacity(frames.len());
        for f in frames {
            // what came before this frame (the router's own packets, a loaded ruleset's
            // first packets) is not its
            if flush_ct {
                self.flush_conntrack()?;
            }
            self.traces
                .read(0)
                .map_err(|e| format!("traces: {e} (events lost)"))?;
            let at = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            let sent = if local {
                ip_packet(f).is_some_and(|(v6, dst)| {
                    sys::send_ip(&self.raw[v6 as usize], &f[14..], dst).is_ok()
                })
            } else {
                sys::send(&self.tx, f).is_ok()
            };
            let mut s = Sent {
                saw: KernelSaw::NotReached,
                at,
                nh: Vec::new(),
                iif: None,
                oif: None,
                ct: (None, None, None),
            };
            if sent {
                let events = self.barrier(local)?;
                if show {
                    let hex: String = f.iter().map(|b| format!("{b:02x}")).collect();
                    println!("frame {hex}");
                }
                let mut id = None;
                for e in &events {
                    if show {
                        println!(
                            "event {:08x} {} {} {:?} {:?} {} mark {:?} nh {:02x?} th {:02x?}",
                            e.id,
                            e.table,
                            e.chain,
                            e.kind,
                            e.handle,
                            e.verdict_name(),
                            e.mark,
                            e.nh,
                            e.th
                        );
                    }
                    // the lab's rule, with the packet's headers, comes first (events of
                    // packets of the router's own may come between)
                    if id.is_none()
                        && e.table == start_table
                        && e.kind == Kind::Rule
                        && e.handle.is_some()
                    {
                        // (a check of the order; the kernel leaves the headers out now and
                        // then, for an IPv6 fragment sent out)
                        let ours = e.nh.is_empty()
                            || if local {
                                addresses_of(f, e)
                            } else {
                                headers_of(f, e)
                            };
                        if !ours {
                            // another packet (the router's own: an MLD report, a
                            // neighbour solicitation)
                            continue;
                        }
                        id = Some(e.id);
                        s.nh = e.nh.clone();
                        continue;
                    }
                    if id != Some(e.id) || e.table != table || e.chain != chain {
                        continue;
                    }
                    if s.saw == KernelSaw::NotReached {
                        s.iif = e.iif;
                        s.oif = e.oif;
                        s.ct = (e.ct_state, e.ct_dir, e.ct_status);
                    }
                    match e.kind {
                        // a rule's end (the kernel sends one without a handle when the
                        // chain's rules are done)
                        Kind::Rule if e.handle.is_some() => {
                            s.saw = KernelSaw::Reached(Some(e.verdict_name()))
                        }
                        Kind::Rule | Kind::Policy | Kind::Return => {
                            if s.saw == KernelSaw::NotReached {
                                s.saw = KernelSaw::Reached(None)
                            }
                        }
                        Kind::Other(_) => {}
                    }
                }
            }
            if show {
                println!("kernel {:?} ct {:?}", s.saw, s.ct);
            }
            out.push(s);
        }
        Ok(out)
    }

    /// Empty the router's connection table (`conntrack -F`: IPCTNL_MSG_CT_DELETE, no tuple).
    fn flush_conntrack(&mut self) -> Result<(), String> {
        self.ct_seq = self.ct_seq.wrapping_add(1);
        let mut m = Vec::with_capacity(20);
        m.extend(20u32.to_ne_bytes());
        m.extend(((1u16 << 8) | 2).to_ne_bytes()); // NFNL_SUBSYS_CTNETLINK, IPCTNL_MSG_CT_DELETE
        m.extend((1u16 | 4).to_ne_bytes()); // NLM_F_REQUEST | NLM_F_ACK
        m.extend(self.ct_seq.to_ne_bytes());
        m.extend(0u32.to_ne_bytes());
        m.extend([0u8, 0, 0, 0]); // nfgenmsg: AF_UNSPEC, version 0
        match sys::nfnetlink_request(&self.ctnl, &m) {
            // nothing to flush
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
            r => r.map_err(|e| format!("conntrack flush: {e}")),
        }
    }

    /// Send a barrier and return the trace events that came before its own.
    fn barrier(&mut self, local: bool) -> Result<Vec<Event>, String> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let bar = barrier(seq);
        let start_table = if local { "weirtraceout" } else { "weirtrace" };
        if local {
            // 198.18.1.1 -> 198.18.1.2, protocol 253 (experimental), "weirpy" and the
            // sequence; the kernel sets the length and the checksum
            let mut p = vec![
                0x45, 0, 0, 0, 0, 1, 0, 0, 64, 253, 0, 0, 198, 18, 1, 1, 198, 18, 1, 2,
            ];
            p.extend(&bar[14..24]);
            sys::send_ip(&self.raw[0], &p, "198.18.1.2".parse().unwrap())
        } else {
            sys::send(&self.tx, &bar)
        }
        // (a rule under test may refuse it, as it may refuse any packet: its trace at the lab's
        // chain, which runs first, comes all the same)
        .ok();
        let is_bar = |e: &Event| {
            e.table == start_table
                && if local {
                    e.nh.get(9) == Some(&253) && e.th.get(6..10) == Some(&seq.to_be_bytes())
                } else {
                    e.ll.get(12..14) == Some(&[0x88, 0xb5])
                        && e.nh.get(6..10) == Some(&seq.to_be_bytes())
                }
        };
        let mut events: Vec<Event> = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            let got = self
                .traces
                .read(100)
                .map_err(|e| format!("traces: {e} (events lost)"))?;
            for e in got {
                if is_bar(&e) {
                    // what follows the barrier's first event is the barrier's
                    return Ok(events);
                }
                events.push(e);
            }
            if Instant::now() > deadline {
                return Err("the barrier's trace never came".into());
            }
        }
    }
}

/// What became of one frame sent.
struct Sent {
    saw: KernelSaw,
    /// When it was sent (ns since the epoch).
    at: u64,
    /// The network header as the kernel's trace showed it (raw sockets: the kernel sets the
    /// IPv4 total length and checksum, the IPv6 payload length).
    nh: Vec<u8>,
    /// The devices the rule's chain saw.
    iif: Option<u32>,
    oif: Option<u32>,
    /// The packet's connection as the kernel's trace showed it at the rule's chain: `ct
    /// state` bits, direction, status.
    ct: (Option<u32>, Option<u8>, Option<u32>),
}

/// The connection weir is told the packet has: the kernel's (from its trace). No state: no
/// entry (`ct state invalid`); 64: untracked; else new, established or related, by direction.
fn conn_of(ct: (Option<u32>, Option<u8>, Option<u32>)) -> Conn {
    let (state, dir, status) = ct;
    let base = match state {
        Some(64) => return Conn::Untracked,
        Some(8) => 2,
        Some(2) => 0,
        Some(4) => 1,
        _ => return Conn::Invalid,
    };
    let info = if base != 2 && dir == Some(1) {
        base + 3
    } else {
        base
    };
    Conn::Tracked(Ct {
        info,
        status: status.unwrap_or(0),
        mark: 0,
        expiration_ms: 0,
    })
}

/// The IP version and destination of a frame's IP packet, when it has one a raw socket can
/// send.
fn ip_packet(f: &[u8]) -> Option<(bool, std::net::IpAddr)> {
    match f.get(12..14)? {
        [0x08, 0x00] if f.len() >= 34 && f[14] >> 4 == 4 && (f[14] & 0xf) >= 5 => {
            let d: [u8; 4] = f[30..34].try_into().ok()?;
            Some((false, std::net::IpAddr::from(d)))
        }
        [0x86, 0xdd] if f.len() >= 54 && f[14] >> 4 == 6 => {
            let d: [u8; 16] = f[38..54].try_into().ok()?;
            Some((true, std::net::IpAddr::from(d)))
        }
        _ => None,
    }
}

/// Whether a trace event at `output` is of a frame's packet (its addresses and protocol).
fn addresses_of(f: &[u8], e: &Event) -> bool {
    let ip = &f[14..];
    match ip.first().map(|b| b >> 4) {
        Some(4) => ip.get(12..20) == e.nh.get(12..20) && ip.get(9) == e.nh.get(9),
        Some(6) => ip.get(6..40) == e.nh.get(6..40),
        _ => false,
    }
}

/// Whether a trace event's headers are those of a frame (its link-layer header and the first
/// bytes after it, as far as the event has them).
fn headers_of(f: &[u8], e: &Event) -> bool {
    let ll = e.ll.len().min(14);
    if f.len() < 14 || f[..ll] != e.ll[..ll] {
        return false;
    }
    let nh = &f[14..];
    let n = e.nh.len().min(nh.len());
    // the transport header too (the network header the trace holds is 40 bytes at most:
    // frames that differ in their IPv6 extension headers only are told apart by it)
    nh[..n] == e.nh[..n]
        && (e.th.is_empty() || nh.windows(e.th.len()).any(|w| w == e.th.as_slice()))
}

/// An IPv4 packet with a fragment offset, or an IPv6 packet whose fragment header (after
/// the usual extension headers) has one.
fn later_fragment(f: &[u8]) -> bool {
    match f.get(12..14) {
        Some([0x08, 0x00]) => f
            .get(20..22)
            .is_some_and(|b| u16::from_be_bytes([b[0], b[1]]) & 0x1fff != 0),
        Some([0x86, 0xdd]) => {
            let (mut nh, mut o) = (f.get(20).copied().unwrap_or(59), 54usize);
            for _ in 0..8 {
                match nh {
                    44 => {
                        return f
                            .get(o + 2..o + 4)
                            .is_some_and(|b| u16::from_be_bytes([b[0], b[1]]) >> 3 != 0)
                    }
                    0 | 43 | 60 => {
                        let (Some(&n), Some(&l)) = (f.get(o), f.get(o + 1)) else {
                            return false;
                        };
                        nh = n;
                        o += (l as usize + 1) * 8;
                    }
                    51 => {
                        let (Some(&n), Some(&l)) = (f.get(o), f.get(o + 1)) else {
                            return false;
                        };
                        nh = n;
                        o += (l as usize + 2) * 4;
                    }
                    _ => return false,
                }
            }
            false
        }
        _ => false,
    }
}

/// An IPv4 packet with more fragments to come or a fragment offset.
fn ipv4_fragment(f: &[u8]) -> bool {
    f.get(12..14) == Some(&[0x08, 0x00])
        && f.get(20..22)
            .is_some_and(|b| u16::from_be_bytes([b[0], b[1]]) & 0x3fff != 0)
}

/// The CPU the calling thread runs on (the lab pins its sender).
fn current_cpu() -> u32 {
    // SAFETY: sched_getcpu takes nothing and returns a CPU number or -1.
    let c = unsafe { libc::sched_getcpu() };
    c.max(0) as u32
}

/// Rules whose outcome depends on what came before (rates, quotas, counters of packets,
/// random numbers, sets a rule adds to): loaded afresh for each packet on both sides.
fn stateful(rule: &str) -> bool {
    [
        "limit", "quota", "numgen", "random", "ct count", "add @", "update @", "delete @", "last",
    ]
    .iter()
    .any(|w| rule.contains(w))
}

/// The addresses a `dup to` statement may send to (those of its map too), each once.
fn dup_gateways(rule: &str) -> Vec<std::net::IpAddr> {
    let Some((_, rest)) = rule.split_once("dup to ") else {
        return Vec::new();
    };
    let mut out: Vec<std::net::IpAddr> = Vec::new();
    for w in rest.split(|c: char| c.is_whitespace() || matches!(c, '{' | '}' | ',')) {
        if let Ok(a) = w.parse() {
            if !out.contains(&a) {
                out.push(a);
            }
        }
    }
    out
}

/// The case's table for the kernel: netdev chains on the lab's `eth0`.
/// Table and chain names unquoted (nft 1.0.6 takes no quoted name there; the `.t` names are
/// plain identifiers).
fn kernel_text(text: &str) -> String {
    let unquote = |l: &str| {
        let t = l.trim_start();
        if t.starts_with("table ") || t.starts_with("chain ") {
            l.replace('"', "")
        } else {
            l.to_string()
        }
    };
    text.lines()
        .map(unquote)
        .collect::<Vec<_>>()
        .join("\n")
        .replace("device lo ", "device eth0 ")
        .replace("device \"lo\"", "device eth0")
}

/// The table's family and name (`table inet test-inet {`).
fn table_of(text: &str) -> (String, String) {
    let mut w = text.split_whitespace().skip(1);
    let fam = w.next().unwrap_or("").to_string();
    let name = w.next().unwrap_or("").trim_matches('"').to_string();
    (fam, name)
}

/// The first chain's name and its spec line.
fn first_chain(text: &str) -> Option<(String, String)> {
    chain_named(text, "")
}

/// A chain's name and its first line (its `type ... hook ...` line when it is a base chain)
/// by name ("": the first chain).
fn chain_named(text: &str, want: &str) -> Option<(String, String)> {
    let mut lines = text.lines();
    while let Some(l) = lines.next() {
        if let Some(rest) = l.trim().strip_prefix("chain ") {
            let name = rest
                .trim_end_matches('{')
                .trim()
                .trim_matches('"')
                .to_string();
            if want.is_empty() || name == want {
                return Some((name, lines.next()?.trim().to_string()));
            }
        }
    }
    None
}

impl PyLab {
    /// Compare one case (`file:line`, the rule, the table text, the file's blocks).
    #[allow(clippy::too_many_arguments)]
    pub fn compare_case(
        &mut self,
        r: &mut Report,
        at: &str,
        rule: &str,
        text: &str,
        blocks: &HashMap<(String, String), crate::oracle::bytecode::Block>,
        seed: u64,
        rounds: usize,
    ) -> Result<(), String> {
        self.compare_in(r, at, rule, text, None, blocks, seed, rounds)
    }

    /// Compare one rule of a table text, in its chain `chain` (None: the first chain).
    #[allow(clippy::too_many_arguments)]
    pub fn compare_in(
        &mut self,
        r: &mut Report,
        at: &str,
        rule: &str,
        text: &str,
        chain: Option<&str>,
        blocks: &HashMap<(String, String), crate::oracle::bytecode::Block>,
        seed: u64,
        rounds: usize,
    ) -> Result<(), String> {
        let (fam_name, table) = table_of(text);
        let Some(family) = Family::from_name(&fam_name) else {
            r.skip(format!("family {fam_name}"));
            return Ok(());
        };
        let found = match chain {
            Some(c) => chain_named(text, c),
            None => first_chain(text),
        };
        let Some((chain, spec)) = found else {
            r.skip("no chain");
            return Ok(());
        };
        let Some(hook) = first_hook(&spec) else {
            r.skip("a regular chain (reached by jumps only)");
            return Ok(());
        };
        match hook {
            Hook::Egress => {
                r.skip(format!("{hook:?} chain: not reached by packets sent in"));
                return Ok(());
            }
            Hook::Input if rule.contains("fib ") => {
                r.skip("fib at input: the lab makes every address local there");
                return Ok(());
            }
            _ => {}
        }
        // a NAT chain sees the first packet of a connection: tracked, the table flushed
        // before each packet
        let nat = spec.contains("type nat") || self.tracked;
        let env = Env {
            family,
            hook,
            fib: Some(std::sync::Arc::new(lab_fib())),
        };
        let load_weir = || {
            // nft runs with TZ=UTC here: its times of day are weir's (no shift); the
            // sender is pinned: its CPU processes the packets
            Weir::load(text, hook).map(|mut w| {
                w.cpu = current_cpu();
                w.set_fib(std::sync::Arc::new(lab_fib()));
                w
            })
        };
        let mut weir = match load_weir() {
            Ok(mut w) if rule.contains("osf ") => {
                // the lab's fingerprints, in the kernel and in weir
                if let Err(e) = self.osf.get_or_insert_with(osf::Osf::load) {
                    r.skip(format!("osf: {e}"));
                    return Ok(());
                }
                w.set_osf(std::sync::Arc::new(osf::Osf::db()));
                w
            }
            Ok(w) => w,
            Err(m) if m.starts_with("weir does not evaluate") => {
                let what: Vec<&str> = m.split_whitespace().take(6).collect();
                r.skip(what.join(" "));
                return Ok(());
            }
            Err(e) => {
                if std::env::var_os("WEIR_PY_SKIPS").is_some() {
                    println!("weir refuses {at} `{rule}`: {e}");
                }
                r.skip("weir does not load the rule");
                return Ok(());
            }
        };
        // alone: the ruleset is replaced whole, in one transaction
        let notrack = if nat { "" } else { LAB_NOTRACK };
        let ktext = format!("flush ruleset\n{LAB_RULES}{notrack}{}", kernel_text(text));
        if let Err(e) = self.nft(&ktext) {
            let first = e
                .lines()
                .find(|l| l.contains("Error"))
                .unwrap_or("refused")
                .split("Error:")
                .last()
                .unwrap_or("")
                .trim()
                .chars()
                .take(60)
                .collect::<String>();
            if std::env::var_os("WEIR_PY_SKIPS").is_some() {
                println!("nft refuses {at} {fam_name} `{rule}`: {e}");
            }
            let why = if first.starts_with("No such file or directory") {
                // (nft's words when the kernel has no module for an expression: nft_queue,
                // nft_synproxy ... are not built into this kernel)
                "the kernel here lacks the expression's module (ENOENT)".to_string()
            } else {
                format!("nft 1.0.6 does not load it here: {first}")
            };
            r.skip(why);
            return Ok(());
        }
        let local = hook == Hook::Output;
        self.set_routes(if hook == Hook::Input {
            Routes::Local
        } else {
            Routes::Forward
        })?;
        // the oracle's packets; plain ones when it has no block for the rule
        let packets: Vec<Packet> = match case_block(blocks, &fam_name, family, rule, text, at) {
            Ok((b, _)) if unknown_reason(&b, &env).is_none() => {
                case_packets(&b, &env, seed, at, &fam_name, rule, rounds).0
            }
            _ => {
                let mut rng = Rng::for_item(seed, at.len() as u64);
                vec![
                    gen::template(false, &mut rng),
                    gen::template(true, &mut rng),
                ]
            }
        };
        let mut frames: Vec<Vec<u8>> = Vec::new();
        for p in packets {
            if p.frame.len() >= 14 && !frames.contains(&p.frame) {
                frames.push(p.frame);
            }
        }
        if rule.contains("osf ") {
            // SYNs made for the lab's fingerprints, between a generated packet's addresses
            let like = frames
                .iter()
                .find(|f| !osf::syns(f).is_empty())
                .cloned()
                .unwrap_or_else(|| {
                    let mut rng = Rng::for_item(seed, at.len() as u64);
                    gen::template(false, &mut rng).frame
                });
            frames.extend(osf::syns(&like));
        }
        let fresh = stateful(rule);
        // `dup to ADDR` where every address is local: the copy would come back by `lo` and
        // be duplicated again without end (the kernel's own loop); its gateways leave by eth0
        let gateways = match hook {
            Hook::Input => dup_gateways(rule),
            _ => Vec::new(),
        };
        self.gateway_routes(&gateways, "add")?;
        let saw = if fresh {
            let mut all = Vec::new();
            for f in &frames {
                self.nft(&ktext)?;
                all.extend(self.send(std::slice::from_ref(f), &table, &chain, local, nat)?);
            }
            Ok(all)
        } else {
            self.send(&frames, &table, &chain, local, nat)
        };
        self.gateway_routes(&gateways, "del")?;
        let saw = saw?;
        r.rules_compared += 1;
        let mut hit = false;
        for (mut f, sent) in frames.into_iter().zip(saw) {
            let KernelSaw::Reached(kmatch) = sent.saw else {
                r.packets_not_reached += 1;
                continue;
            };
            // an IPv4 fragment to be delivered locally is reassembled before the input hook
            // (ip_local_deliver): the kernel's rule sees the whole datagram, or nothing
            if hook == Hook::Input && ipv4_fragment(&f) {
                r.packets_reassembled += 1;
                continue;
            }
            if fresh {
                if let Ok(w) = load_weir() {
                    weir = w;
                }
            }
            // what the kernel evaluated: a raw socket's packet with the lengths and the
            // checksum the kernel set
            if local && sent.nh.len() <= f.len() - 14 {
                f[14..14 + sent.nh.len()].copy_from_slice(&sent.nh);
            }
            let dev = |i: Option<u32>, default: u32| {
                let i = i.unwrap_or(default);
                (
                    i,
                    ifname(
                        ["", "lo", "eth0", "eth1"]
                            .get(i as usize)
                            .copied()
                            .unwrap_or(""),
                    ),
                )
            };
            // the devices the kernel's chain had (a forwarded packet has its input device at
            // postrouting too)
            weir.devices = Some((sent.iif.is_some(), sent.oif.is_some()));
            let (iif_index, iif) = dev(sent.iif, 2);
            let (oif_index, oif) = dev(sent.oif, 3);
            let p = Packet {
                frame: f,
                mark: 0,
                priority: 0,
                iif,
                oif,
                iif_index,
                oif_index,
                // no conntrack at ingress (ct state invalid there); untracked after it
                conn: conn_of(sent.ct),
                wall_ns: sent.at,
            };
            let w: Vec<bool> = weir.matches(&p).into_iter().map(|a| a.0).collect();
            r.packets += 1;
            r.packets_matching += kmatch.is_some() as usize;
            hit |= kmatch.is_some();
            if w.iter().any(|&m| m != kmatch.is_some()) {
                if kmatch.is_some() && later_fragment(&p.frame) {
                    r.fast_path_fragments += 1;
                    continue;
                }
                r.differences.push(Difference {
                    at: at.to_string(),
                    family: fam_name.clone(),
                    rule: rule.to_string(),
                    frame: p.frame,
                    kernel: kmatch,
                    weir: w,
                });
            }
        }
        r.rules_hit += hit as usize;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_text_helpers() {
        let t = "table netdev \"test-netdev\" {\n  chain ingress {\n    type filter hook ingress device lo priority 0;\n    tcp dport 22\n  }\n}\n";
        assert_eq!(table_of(t), ("netdev".into(), "test-netdev".into()));
        let (c, spec) = first_chain(t).unwrap();
        assert_eq!(c, "ingress");
        assert!(spec.starts_with("type filter hook ingress"));
        assert!(kernel_text(t).contains("device eth0 priority"));
        assert!(stateful("limit rate 1/second"));
        assert!(!stateful("tcp dport 22"));
        let b = barrier(7);
        assert_eq!(&b[12..14], &[0x88, 0xb5]);
        assert_eq!(&b[20..24], &7u32.to_be_bytes());
    }
}
