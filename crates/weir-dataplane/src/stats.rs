//! What weir counts, as typed structs: a worker's [`Counts`] of the packets it handled, and
//! the [`WorkerStats`] snapshot a worker gives between batches (its counts, its connection
//! table, its I/O, its ruleset's counters). Snapshots of several workers are added together
//! ([`WorkerStats::sum`]) and turned into text only at the edge: `weir ctl status`
//! ([`WorkerStats::status_line`]), `weir ctl counters` ([`RulesetStats::counters_text`]) and
//! the Prometheus metrics ([`crate::control::metrics`]).

use std::ops::AddAssign;
use weir_router::Reason;

/// Drops by reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Drops([u64; Reason::ALL.len()]);

impl Drops {
    fn slot(r: Reason) -> usize {
        Reason::ALL
            .iter()
            .position(|&x| x == r)
            .expect("every reason is in Reason::ALL")
    }

    pub fn add(&mut self, r: Reason, n: u64) {
        self.0[Self::slot(r)] += n;
    }

    pub fn get(&self, r: Reason) -> u64 {
        self.0[Self::slot(r)]
    }

    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// The reasons with drops, in the order of their names.
    pub fn iter(&self) -> impl Iterator<Item = (Reason, u64)> + '_ {
        Reason::ALL
            .iter()
            .zip(self.0)
            .filter(|(_, n)| *n > 0)
            .map(|(r, n)| (*r, n))
    }
}

impl AddAssign<&Drops> for Drops {
    fn add_assign(&mut self, o: &Drops) {
        for (a, b) in self.0.iter_mut().zip(o.0) {
            *a += b;
        }
    }
}

/// What a worker did with the packets it handled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub packets: u64,
    pub accepted: u64,
    pub rewritten: u64,
    pub dropped: Drops,
    /// ICMP errors sent to senders (TTL exceeded, no route, reject...), and those the rate
    /// limits held back.
    pub icmp_errors: u64,
    pub icmp_limited: u64,
    /// TCP resets sent for `reject with tcp reset`.
    pub resets: u64,
    /// NFQUEUE mode: answers to rejected packets that could not be sent.
    pub answers_failed: u64,
    /// Inline mode: packets forwarded in fragments (larger than the output link's MTU).
    pub fragmented: u64,
    /// Inline mode: packets for the router handed to its own stack (`input` accepted them).
    pub local: u64,
    /// Inline mode: packets the router's own stack sent, tracked as they left.
    pub host_out: u64,
    /// Packets per-flow scripts sent (split segments, fakes), and those that could not be
    /// sent (no route or neighbour inline; the raw socket refused them in NFQUEUE mode).
    pub script_sent: u64,
    pub script_unsent: u64,
    /// Inline mode: copies `dup` sent, and those that could not leave (no route, an
    /// unknown device or neighbour, dropped by the output hooks).
    pub dup_sent: u64,
    pub dup_unsent: u64,
}

impl Counts {
    /// One packet dropped for `r`.
    pub fn drop(&mut self, r: Reason) {
        self.packets += 1;
        self.dropped.add(r, 1);
    }
}

impl AddAssign<&Counts> for Counts {
    fn add_assign(&mut self, o: &Counts) {
        self.packets += o.packets;
        self.accepted += o.accepted;
        self.rewritten += o.rewritten;
        self.dropped += &o.dropped;
        self.icmp_errors += o.icmp_errors;
        self.icmp_limited += o.icmp_limited;
        self.resets += o.resets;
        self.answers_failed += o.answers_failed;
        self.fragmented += o.fragmented;
        self.local += o.local;
        self.host_out += o.host_out;
        self.script_sent += o.script_sent;
        self.script_unsent += o.script_unsent;
        self.dup_sent += o.dup_sent;
        self.dup_unsent += o.dup_unsent;
    }
}

/// One port of an inline worker.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortStats {
    pub name: String,
    /// `AF_PACKET` or `AF_XDP, XDP native|generic`.
    pub kind: String,
    pub xdp: bool,
    pub received: u64,
    pub sent: u64,
    pub truncated: u64,
    pub send_errors: u64,
    /// AF_PACKET: frames the ring had no room for.
    pub ring_drops: u64,
    /// AF_XDP: frames the kernel dropped (rx ring full, no free frame).
    pub kernel_dropped: u64,
    pub kernel_ring_full: u64,
    pub kernel_fill_empty: u64,
}

impl PortStats {
    fn text(&self) -> String {
        if self.xdp {
            format!(
                "{} ({}) received {} sent {} send errors {} kernel drops {} (rx ring full {}, no free frame {})",
                self.name,
                self.kind,
                self.received,
                self.sent,
                self.send_errors,
                self.kernel_dropped,
                self.kernel_ring_full,
                self.kernel_fill_empty
            )
        } else {
            format!(
                "{} (AF_PACKET) received {} sent {} truncated {} send errors {} ring drops {}",
                self.name,
                self.received,
                self.sent,
                self.truncated,
                self.send_errors,
                self.ring_drops
            )
        }
    }
}

/// Frames handed between inline workers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HandoffStats {
    /// Every frame another worker owns (AF_XDP), or fragments only (AF_PACKET's fanout).
    pub all: bool,
    pub handed: u64,
    /// Dropped: the other worker's inbox was full.
    pub full: u64,
}

/// Where a worker's packets come from and go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IoStats {
    Queue {
        batches: u64,
        sends: u64,
        errors: u64,
    },
    Inline {
        ports: Vec<PortStats>,
        /// The routing state (`weir_router::Router::describe`).
        router: String,
        handoff: Option<HandoffStats>,
    },
}

/// A rule's counters, with what names it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuleStat {
    /// `inet filter`.
    pub table: String,
    pub chain: String,
    pub handle: u64,
    pub text: String,
    pub packets: u64,
    pub bytes: u64,
    /// A rule with `last`: how long ago a packet last reached it (milliseconds; None:
    /// never). None for a rule without `last`.
    pub last_ms: Option<Option<u64>>,
}

/// A named object's counter (a named counter's packets, a set's elements).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NamedStat {
    pub table: String,
    pub name: String,
    pub value: u64,
}

/// The ruleset's own counters in one worker.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RulesetStats {
    /// Every rule, in ruleset order.
    pub rules: Vec<RuleStat>,
    /// Named counters' packets.
    pub counters: Vec<NamedStat>,
    /// Elements sets gained from the packet path.
    pub sets: Vec<NamedStat>,
    /// Named quotas' bytes used (one value for all workers: they share it).
    pub quotas: Vec<NamedStat>,
}

impl RulesetStats {
    /// `weir ctl counters`: a line per rule.
    pub fn counters_text(&self) -> String {
        self.rules
            .iter()
            .map(|r| {
                let last = match r.last_ms {
                    None => String::new(),
                    Some(None) => "  (last used never)".into(),
                    Some(Some(ms)) => format!("  (last used {}s ago)", ms / 1000),
                };
                format!(
                    "{:>12} {:>14}  {} {}  {}{last}\n",
                    r.packets, r.bytes, r.table, r.chain, r.text
                )
            })
            .collect()
    }

    /// Add another worker's (the same ruleset: item by item; extra items are kept).
    pub fn add(&mut self, o: &RulesetStats) {
        fn zip<T: Clone>(a: &mut Vec<T>, b: &[T], f: impl Fn(&mut T, &T)) {
            for (i, y) in b.iter().enumerate() {
                match a.get_mut(i) {
                    Some(x) => f(x, y),
                    None => a.push(y.clone()),
                }
            }
        }
        zip(&mut self.rules, &o.rules, |x, y| {
            x.packets += y.packets;
            x.bytes += y.bytes;
            // the most recent of the workers'
            x.last_ms = match (x.last_ms, y.last_ms) {
                (Some(Some(a)), Some(Some(b))) => Some(Some(a.min(b))),
                (Some(a), Some(b)) => Some(a.or(b)),
                (a, b) => a.or(b),
            };
        });
        zip(&mut self.counters, &o.counters, |x, y| x.value += y.value);
        zip(&mut self.sets, &o.sets, |x, y| x.value += y.value);
        // (the workers share a quota: each reports the same bytes, or one worker has it)
        zip(&mut self.quotas, &o.quotas, |x, y| {
            x.value = x.value.max(y.value)
        });
    }
}

/// A worker's state, taken between batches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerStats {
    pub idx: usize,
    /// `queue 7`, `inline lan0 (AF_XDP, XDP native) wan0 (...)`.
    pub io_text: String,
    pub counts: Counts,
    pub ct_entries: u64,
    pub ct_evicted: u64,
    pub ct_refused: u64,
    /// Several inline workers: source NAT replies that could not be steered back here.
    pub nat_steer_missed: Option<u64>,
    pub fragments_followed: u64,
    /// The ruleset has flowtables: connections offloaded, packets of the fast path,
    /// offloads ended by a FIN or RST.
    pub flowtable: Option<(u64, u64, u64)>,
    /// Packets of the flowtable fast path.
    pub fast_path: u64,
    pub io: IoStats,
    pub ruleset: RulesetStats,
    /// Per-flow scripts, when the worker has them.
    pub scripts: Option<ScriptsStats>,
    /// Connection-tracking helpers, when the ruleset gives connections any.
    pub helpers: Option<HelperStats>,
    /// The SYN proxy, when it saw a SYN or an ACK.
    pub synproxy: Option<SynproxyStats>,
}

/// What the SYN proxy did (`synproxy`; Linux's `/proc/net/stat/synproxy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SynproxyStats {
    /// SYNs answered with a cookie.
    pub syn_received: u64,
    /// ACKs whose cookie was good (the connection opened to the server) / not (dropped).
    pub cookie_valid: u64,
    pub cookie_invalid: u64,
    /// Good ACKs that came again before the server answered.
    pub cookie_retrans: u64,
    /// Connections opened again on their entry.
    pub conn_reopened: u64,
}

impl SynproxyStats {
    /// Of a worker's stateful layer; None when the proxy saw nothing.
    pub fn of(s: &weir_engine::stateful::StatefulStats) -> Option<SynproxyStats> {
        let x = SynproxyStats {
            syn_received: s.synproxy_syn,
            cookie_valid: s.synproxy_cookie_valid,
            cookie_invalid: s.synproxy_cookie_invalid,
            cookie_retrans: s.synproxy_cookie_retrans,
            conn_reopened: s.synproxy_reopened,
        };
        (x != SynproxyStats::default()).then_some(x)
    }

    /// The counters with their metric names and help, for the metrics and the status line.
    pub fn named(&self) -> [(&'static str, &'static str, u64); 5] {
        [
            (
                "weir_synproxy_syn_received",
                "SYNs the SYN proxy answered with a cookie.",
                self.syn_received,
            ),
            (
                "weir_synproxy_cookie_valid",
                "ACKs whose SYN cookie was good: the connection opened to the server.",
                self.cookie_valid,
            ),
            (
                "weir_synproxy_cookie_invalid",
                "ACKs whose SYN cookie was not good (dropped).",
                self.cookie_invalid,
            ),
            (
                "weir_synproxy_cookie_retrans",
                "Good ACKs that came again before the server answered.",
                self.cookie_retrans,
            ),
            (
                "weir_synproxy_conn_reopened",
                "Proxied connections opened again on their entry.",
                self.conn_reopened,
            ),
        ]
    }
}

impl std::ops::AddAssign<&SynproxyStats> for SynproxyStats {
    fn add_assign(&mut self, o: &SynproxyStats) {
        self.syn_received += o.syn_received;
        self.cookie_valid += o.cookie_valid;
        self.cookie_invalid += o.cookie_invalid;
        self.cookie_retrans += o.cookie_retrans;
        self.conn_reopened += o.conn_reopened;
    }
}

/// What connection-tracking helpers did (`ct helper set`: ftp, tftp, sip), from the stateful
/// layer's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HelperStats {
    /// Connections given a helper.
    pub connections: u64,
    /// Expectations recorded, and refused (the table of expectations full).
    pub expectations: u64,
    pub expect_refused: u64,
    /// New connections that met an expectation (`ct state related`).
    pub related: u64,
    /// Packets whose payload was rewritten for NAT; of those, sent as a copy of another
    /// length; rewrites due and not done.
    pub rewritten: u64,
    pub replaced: u64,
    pub not_rewritten: u64,
    /// Packets whose TCP sequence numbers were shifted after a rewrite.
    pub seq_adjusted: u64,
}

impl HelperStats {
    /// Of a worker's stateful layer; None when no connection had a helper.
    pub fn of(s: &weir_engine::stateful::StatefulStats) -> Option<HelperStats> {
        (s.helper_assigned > 0).then_some(HelperStats {
            connections: s.helper_assigned,
            expectations: s.helper_expectations,
            expect_refused: s.helper_expect_refused,
            related: s.helper_related,
            rewritten: s.helper_rewritten,
            replaced: s.helper_replaced,
            not_rewritten: s.helper_unmangled,
            seq_adjusted: s.seq_adjusted,
        })
    }

    /// The counters with their metric names and help, for the metrics and the status line.
    pub fn named(&self) -> [(&'static str, &'static str, u64); 8] {
        [
            ("weir_ct_helper_connections", "Connections given a helper (ct helper set).", self.connections),
            ("weir_ct_helper_expectations", "Connections helpers expected (an FTP data connection, a TFTP transfer, SIP media).", self.expectations),
            ("weir_ct_helper_expectations_refused", "Expectations refused: the table of expectations was full.", self.expect_refused),
            ("weir_ct_helper_related", "New connections that met an expectation (ct state related).", self.related),
            ("weir_ct_helper_rewritten", "Packets whose payload a helper rewrote for NAT.", self.rewritten),
            ("weir_ct_helper_replaced", "Rewritten packets of another length, sent as a rewritten copy.", self.replaced),
            ("weir_ct_helper_not_rewritten", "Packets a helper should have rewritten and did not (a fragment, a local packet changing length).", self.not_rewritten),
            ("weir_ct_helper_seq_adjusted", "TCP packets whose sequence numbers were shifted after a helper's rewrite.", self.seq_adjusted),
        ]
    }
}

impl std::ops::AddAssign<&HelperStats> for HelperStats {
    fn add_assign(&mut self, o: &HelperStats) {
        self.connections += o.connections;
        self.expectations += o.expectations;
        self.expect_refused += o.expect_refused;
        self.related += o.related;
        self.rewritten += o.rewritten;
        self.replaced += o.replaced;
        self.not_rewritten += o.not_rewritten;
        self.seq_adjusted += o.seq_adjusted;
    }
}

/// Per-flow scripts' counters ([`weir_script::ScriptStats`]) and their Lua functions'.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScriptsStats {
    pub stats: weir_script::ScriptStats,
    /// Per Lua function: calls, errors, budget and memory overruns.
    pub functions: Vec<(String, weir_script::lua::FnStats)>,
    /// Flows with state now.
    pub flows: u64,
}

impl ScriptsStats {
    /// Of one worker's scripts.
    pub fn of(s: &weir_script::Scripts) -> ScriptsStats {
        ScriptsStats {
            stats: s.stats(),
            functions: s.lua().map(|rt| rt.stats()).unwrap_or_default(),
            flows: s.flows() as u64,
        }
    }

    /// The lines of `weir ctl status`: the counters, then one per Lua function.
    pub fn status_lines(&self) -> String {
        let mut out = String::from("scripts:");
        for (name, _, v) in self.stats.named() {
            out += &format!(" {} {v}", name.trim_start_matches("weir_scripts_"));
        }
        out += &format!(
            "; flows now {}
",
            self.flows
        );
        for (name, f) in &self.functions {
            out += &format!(
                "scripts: lua function {name}: calls {} errors {} budget exceeded {} memory exceeded {}\n",
                f.calls, f.errors, f.budget_exceeded, f.memory_exceeded
            );
        }
        out
    }

    fn add(&mut self, o: &ScriptsStats) {
        self.stats += &o.stats;
        self.functions =
            weir_script::counters::sum_functions([&self.functions[..], &o.functions[..]]);
        self.flows += o.flows;
    }
}

impl WorkerStats {
    /// The worker's line of `weir ctl status`.
    pub fn status_line(&self) -> String {
        let c = &self.counts;
        let mut extra = String::new();
        if c.icmp_errors + c.icmp_limited > 0 {
            extra += &format!(
                "; ICMP errors sent {} (rate-limited {})",
                c.icmp_errors, c.icmp_limited
            );
        }
        if c.resets > 0 {
            extra += &format!("; TCP resets sent {}", c.resets);
        }
        if c.answers_failed > 0 {
            extra += &format!("; answers not sent {}", c.answers_failed);
        }
        if c.fragmented > 0 {
            extra += &format!("; forwarded in fragments {}", c.fragmented);
        }
        if let Some(x) = &self.synproxy {
            extra += &format!(
                "; synproxy: SYNs {} cookies good {} bad {} again {} reopened {}",
                x.syn_received, x.cookie_valid, x.cookie_invalid, x.cookie_retrans, x.conn_reopened
            );
        }
        if c.script_sent + c.script_unsent > 0 {
            extra += &format!(
                "; sent by scripts {} (not sent {})",
                c.script_sent, c.script_unsent
            );
        }
        if c.dup_sent + c.dup_unsent > 0 {
            extra += &format!("; dup copies {} (not sent {})", c.dup_sent, c.dup_unsent);
        }
        if c.local + c.host_out > 0 {
            extra += &format!(
                "; to the router's stack {} (from it {})",
                c.local, c.host_out
            );
        }
        format!(
            "worker {} ({}): packets {} accepted {} rewritten {} dropped {}{}{}; conntrack entries {} (evicted {}, refused {}{}), fragments followed {}{}; {}\n",
            self.idx,
            self.io_text,
            c.packets,
            c.accepted,
            c.rewritten,
            c.dropped.total(),
            c.dropped
                .iter()
                .map(|(r, n)| format!(" {}={n}", r.name()))
                .collect::<String>(),
            extra,
            self.ct_entries,
            self.ct_evicted,
            self.ct_refused,
            self.nat_steer_missed
                .map(|n| format!(", NAT replies steered to another worker {n}"))
                .unwrap_or_default(),
            self.fragments_followed,
            self.flowtable
                .map(|(o, f, t)| format!("; flowtable offloaded {o} fast path {f} teardowns {t}"))
                .unwrap_or_default()
                + &self
                    .helpers
                    .map(|h| {
                        format!(
                            "; ct helpers: connections {} expectations {} (refused {}) related {} rewritten {} (replaced {}, not rewritten {}) seq adjusted {}",
                            h.connections,
                            h.expectations,
                            h.expect_refused,
                            h.related,
                            h.rewritten,
                            h.replaced,
                            h.not_rewritten,
                            h.seq_adjusted
                        )
                    })
                    .unwrap_or_default(),
            self.io_line(),
        )
    }

    fn io_line(&self) -> String {
        match &self.io {
            IoStats::Queue {
                batches,
                sends,
                errors,
            } => format!("queue batches {batches} sends {sends} netlink errors {errors}"),
            IoStats::Inline {
                ports,
                router,
                handoff,
            } => {
                let mut v: Vec<String> = ports.iter().map(PortStats::text).collect();
                v.push(router.clone());
                if let Some(h) = handoff {
                    v.push(format!(
                        "{} handed to another worker {} (inbox full {})",
                        if h.all { "frames" } else { "fragments" },
                        h.handed,
                        h.full
                    ));
                }
                v.join("; ")
            }
        }
    }

    /// The workers' snapshots added together (what the metrics show): counts, tables and
    /// I/O summed (ports by name), the ruleset's counters item by item.
    pub fn sum(workers: &[WorkerStats]) -> Total {
        let mut t = Total::default();
        for w in workers {
            t.counts += &w.counts;
            t.ct_entries += w.ct_entries;
            t.ct_evicted += w.ct_evicted;
            t.ct_refused += w.ct_refused;
            t.fragments_followed += w.fragments_followed;
            t.fast_path += w.fast_path;
            t.ruleset.add(&w.ruleset);
            if let Some(h) = &w.helpers {
                *t.helpers.get_or_insert_with(Default::default) += h;
            }
            if let Some(x) = &w.synproxy {
                *t.synproxy.get_or_insert_with(Default::default) += x;
            }
            if let Some(sc) = &w.scripts {
                t.scripts.get_or_insert_with(Default::default).add(sc);
            }
            match &w.io {
                IoStats::Queue {
                    batches, errors, ..
                } => {
                    t.nfqueue = true;
                    t.queue_batches += batches;
                    t.queue_errors += errors;
                }
                IoStats::Inline { ports, handoff, .. } => {
                    t.inline = true;
                    for p in ports {
                        match t.ports.iter_mut().find(|(n, ..)| *n == p.name) {
                            Some(x) => {
                                x.1 += p.received;
                                x.2 += p.sent;
                            }
                            None => t.ports.push((p.name.clone(), p.received, p.sent)),
                        }
                    }
                    t.handed += handoff.map_or(0, |h| h.handed);
                }
            }
            t.workers.push((w.idx, w.io_text.clone(), w.counts.packets));
        }
        t
    }
}

/// The workers' snapshots added together.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Total {
    pub counts: Counts,
    pub ct_entries: u64,
    pub ct_evicted: u64,
    pub ct_refused: u64,
    pub fragments_followed: u64,
    pub fast_path: u64,
    pub handed: u64,
    pub ruleset: RulesetStats,
    pub nfqueue: bool,
    pub queue_batches: u64,
    pub queue_errors: u64,
    pub inline: bool,
    /// Per port: frames read and sent.
    pub ports: Vec<(String, u64, u64)>,
    /// Per worker: its index, its I/O, its packets.
    pub workers: Vec<(usize, String, u64)>,
    /// Per-flow scripts, when the workers have them.
    pub scripts: Option<ScriptsStats>,
    /// Connection-tracking helpers, when the workers' connections had any.
    pub helpers: Option<HelperStats>,
    /// The SYN proxy, when it saw anything.
    pub synproxy: Option<SynproxyStats>,
}

/// Process-wide facts: reloads, CPU time.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ProcessStats {
    pub workers: usize,
    pub up_secs: f64,
    pub reloads: u64,
    pub reload_errors: u64,
    /// CPU time since start (user, system), in seconds.
    pub cpu: (f64, f64),
}

impl ProcessStats {
    /// The process-wide lines of `weir ctl status`.
    pub fn status_head(&self) -> String {
        let (u, sy) = self.cpu;
        format!(
            "weir run: {} worker(s), up {:.1} s\nreloads {} (refused {})\ncpu {:.3} s (user {:.3} s, system {:.3} s)\n",
            self.workers, self.up_secs, self.reloads, self.reload_errors, u + sy, u, sy
        )
    }

    /// CPU time per packet handled (`packets` in all).
    pub fn per_packet(&self, packets: u64) -> String {
        let cpu = self.cpu.0 + self.cpu.1;
        format!(
            "packets {packets}, cpu {:.2} us per packet\n",
            if packets > 0 {
                cpu * 1e6 / packets as f64
            } else {
                0.0
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker(idx: usize, packets: u64) -> WorkerStats {
        let mut counts = Counts {
            packets,
            accepted: packets - 3,
            ..Counts::default()
        };
        counts.dropped.add(Reason::Rule, 2);
        counts.dropped.add(Reason::Reject, 1);
        counts.resets = 1;
        WorkerStats {
            idx,
            io_text: "queue 7".into(),
            counts,
            ct_entries: 1,
            ct_evicted: 0,
            ct_refused: 0,
            nat_steer_missed: None,
            fragments_followed: 0,
            flowtable: None,
            fast_path: 0,
            io: IoStats::Queue {
                batches: 5,
                sends: 5,
                errors: 0,
            },
            scripts: None,
            helpers: None,
            synproxy: None,
            ruleset: RulesetStats {
                rules: vec![RuleStat {
                    table: "inet filter".into(),
                    chain: "forward".into(),
                    handle: 1,
                    text: "ct state established, related counter accept".into(),
                    packets: 3,
                    bytes: 252,
                    last_ms: None,
                }],
                ..RulesetStats::default()
            },
        }
    }

    /// A rule with `last`: `weir ctl counters` says when it was last used, the most recent
    /// of the workers'.
    #[test]
    fn counters_say_when_a_rule_with_last_was_used() {
        let rule = |last_ms| RulesetStats {
            rules: vec![RuleStat {
                text: "tcp dport 22 last drop".into(),
                last_ms,
                ..RuleStat::default()
            }],
            ..RulesetStats::default()
        };
        let mut r = rule(Some(None));
        assert!(r
            .counters_text()
            .contains("tcp dport 22 last drop  (last used never)"));
        r.add(&rule(Some(Some(9_000))));
        r.add(&rule(Some(Some(4_500))));
        assert!(
            r.counters_text().contains("(last used 4s ago)"),
            "{}",
            r.counters_text()
        );
        assert!(!rule(None).counters_text().contains("last used"));
    }

    #[test]
    fn status_lines_as_weir_has_printed_them() {
        assert_eq!(
            worker(0, 7).status_line(),
            "worker 0 (queue 7): packets 7 accepted 4 rewritten 0 dropped 3 reject=1 rule=2; TCP resets sent 1; conntrack entries 1 (evicted 0, refused 0), fragments followed 0; queue batches 5 sends 5 netlink errors 0\n"
        );
    }

    /// Counters are added as integers: a count above 2^53 (where an f64 loses units) summed
    /// over two workers is exact.
    #[test]
    fn large_counts_add_exactly() {
        let big = (1u64 << 53) + 1;
        let (mut a, mut b) = (worker(0, big), worker(1, big + 2));
        a.ruleset.rules[0].bytes = big;
        b.ruleset.rules[0].bytes = big;
        let t = WorkerStats::sum(&[a, b]);
        assert_eq!(t.counts.packets, 2 * big + 2);
        assert_eq!(t.counts.packets, 18_014_398_509_481_988);
        assert_eq!(t.ruleset.rules[0].bytes, 2 * big);
        assert_eq!(t.counts.dropped.get(Reason::Rule), 4);
        assert!(t
            .ruleset
            .counters_text()
            .contains(" 18014398509481986  inet filter forward"));
    }

    /// Named counters of the workers add up; a named quota is one for all workers (they share
    /// it), so its bytes are not added twice.
    #[test]
    fn named_counters_add_and_shared_quotas_do_not() {
        let named = |v| {
            vec![NamedStat {
                table: "inet filter".into(),
                name: "n".into(),
                value: v,
            }]
        };
        let (mut a, mut b) = (worker(0, 7), worker(1, 7));
        (a.ruleset.counters, b.ruleset.counters) = (named(3), named(4));
        (a.ruleset.quotas, b.ruleset.quotas) = (named(900), named(900));
        let t = WorkerStats::sum(&[a, b]);
        assert_eq!(t.ruleset.counters[0].value, 7);
        assert_eq!(t.ruleset.quotas[0].value, 900);
    }

    /// Helpers' counters are summed over workers and shown only where connections had one.
    #[test]
    fn helper_counters_sum_and_show() {
        let mut a = worker(0, 10);
        let b = worker(1, 10);
        assert!(!a.status_line().contains("ct helpers"));
        let h = HelperStats {
            connections: 2,
            expectations: 3,
            related: 1,
            rewritten: 1,
            replaced: 1,
            seq_adjusted: 4,
            ..HelperStats::default()
        };
        a.helpers = Some(h);
        let mut c = b.clone();
        c.helpers = Some(h);
        let t = WorkerStats::sum(&[a.clone(), b, c]);
        let th = t.helpers.unwrap();
        assert_eq!(
            (th.connections, th.expectations, th.seq_adjusted),
            (4, 6, 8)
        );
        assert!(a
            .status_line()
            .contains("ct helpers: connections 2 expectations 3 (refused 0) related 1"));
    }
}
