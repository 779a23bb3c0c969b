//! The Prometheus metrics: the workers' snapshots added together ([`crate::stats::Total`]),
//! encoded in the OpenMetrics text format by `prometheus-client` ([`render`]), served over
//! HTTP by `tiny_http` ([`serve`]: `GET /metrics`). Counters are encoded as integers, so they
//! stay exact past 2^53.

use crate::control::CtlRequest;
use crate::stats::{ProcessStats, Total};
use anyhow::Context;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::sync::mpsc;

/// A label value as the text format needs it (prometheus-client writes values as given).
fn esc(t: &str) -> String {
    t.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

type Labels = Vec<(&'static str, String)>;

/// One scrape's values.
#[derive(Debug)]
struct Snapshot {
    process: ProcessStats,
    total: Total,
}

/// A family: name (without `_total`), help, kind, and its series.
type FamilyOf = (&'static str, &'static str, MetricType, Vec<(Labels, Value)>);

/// A family of series of one kind.
enum Value {
    Counter(u64),
    CounterF(f64),
    Gauge(i64),
}

impl Snapshot {
    /// Every family: name (without `_total`), help, kind, and its series.
    fn families(&self) -> Vec<FamilyOf> {
        use MetricType::{Counter as C, Gauge as G};
        use Value::{Counter, CounterF, Gauge};
        let t = &self.total;
        let p = &self.process;
        let c = &t.counts;
        let one = |v: u64| vec![(Labels::new(), Counter(v))];
        let mut f = vec![
            ("weir_reloads", "Ruleset reloads.", C, one(p.reloads)),
            (
                "weir_reload_errors",
                "Reloads refused (the ruleset had errors).",
                C,
                one(p.reload_errors),
            ),
            (
                "weir_cpu_seconds",
                "CPU time of weir.",
                C,
                vec![
                    (vec![("mode", "user".into())], CounterF(p.cpu.0)),
                    (vec![("mode", "system".into())], CounterF(p.cpu.1)),
                ],
            ),
            (
                "weir_workers",
                "Worker threads (one queue each).",
                G,
                vec![(Labels::new(), Gauge(p.workers as i64))],
            ),
            ("weir_packets", "Packets handled.", C, one(c.packets)),
            ("weir_accepted", "Packets accepted.", C, one(c.accepted)),
            (
                "weir_rewritten",
                "Packets rewritten (NAT, header writes).",
                C,
                one(c.rewritten),
            ),
            (
                "weir_fast_path",
                "Packets forwarded by the flowtable fast path (no chains, no connection tracking).",
                C,
                one(t.fast_path),
            ),
            (
                "weir_fragments_followed",
                "Later IP fragments that followed their datagram's first (virtual reassembly).",
                C,
                one(t.fragments_followed),
            ),
            (
                "weir_handed",
                "Frames handed to the worker of their connection (several inline workers: fragments; over AF_XDP every frame another worker owns).",
                C,
                one(t.handed),
            ),
            (
                "weir_forwarded_in_fragments",
                "Packets larger than the output link's MTU forwarded in fragments.",
                C,
                one(c.fragmented),
            ),
            (
                "weir_dropped",
                "Packets dropped, by reason.",
                C,
                c.dropped
                    .iter()
                    .map(|(r, n)| (vec![("reason", r.name().to_string())], Counter(n)))
                    .collect(),
            ),
        ];
        if let Some(h) = &t.helpers {
            for (name, help, v) in h.named() {
                f.push((name, help, C, one(v)));
            }
        }
        if let Some(x) = &t.synproxy {
            for (name, help, v) in x.named() {
                f.push((name, help, C, one(v)));
            }
        }
        if let Some(sc) = &t.scripts {
            for (name, help, v) in sc.stats.named() {
                f.push((name, help, C, one(v)));
            }
            f.push((
                "weir_scripts_flows_live",
                "Flows the per-flow scripts keep state for now.",
                G,
                vec![(Labels::new(), Gauge(sc.flows as i64))],
            ));
            f.push((
                "weir_scripts_unsent",
                "Packets the scripts made that could not be sent (no route, no neighbour, a send error).",
                C,
                one(c.script_unsent),
            ));
            type FnField = fn(&weir_script::lua::FnStats) -> u64;
            let per_fn: [(&'static str, &'static str, FnField); 4] = [
                (
                    "weir_scripts_lua_function_calls",
                    "Calls of each Lua function.",
                    |s| s.calls,
                ),
                (
                    "weir_scripts_lua_function_errors",
                    "Calls of each Lua function that raised an error.",
                    |s| s.errors,
                ),
                (
                    "weir_scripts_lua_function_budget_exceeded",
                    "Calls of each Lua function stopped by the instruction budget.",
                    |s| s.budget_exceeded,
                ),
                (
                    "weir_scripts_lua_function_memory_exceeded",
                    "Calls of each Lua function stopped by the memory limit.",
                    |s| s.memory_exceeded,
                ),
            ];
            for (name, help, get) in per_fn {
                f.push((
                    name,
                    help,
                    C,
                    sc.functions
                        .iter()
                        .map(|(n, s)| (vec![("function", esc(n))], Counter(get(s))))
                        .collect(),
                ));
            }
        }
        let rule = |r: &crate::stats::RuleStat| -> Labels {
            vec![
                ("table", esc(&r.table)),
                ("chain", esc(&r.chain)),
                ("handle", r.handle.to_string()),
                ("rule", esc(&r.text)),
            ]
        };
        let rs = &t.ruleset;
        f.push((
            "weir_rule_packets",
            "Packets that matched each rule.",
            C,
            rs.rules
                .iter()
                .map(|r| (rule(r), Counter(r.packets)))
                .collect(),
        ));
        f.push((
            "weir_rule_bytes",
            "Bytes that matched each rule.",
            C,
            rs.rules
                .iter()
                .map(|r| (rule(r), Counter(r.bytes)))
                .collect(),
        ));
        f.push((
            "weir_named_counter_packets",
            "Named counters.",
            C,
            rs.counters
                .iter()
                .map(|n| {
                    (
                        vec![("table", esc(&n.table)), ("counter", esc(&n.name))],
                        Counter(n.value),
                    )
                })
                .collect(),
        ));
        f.push((
            "weir_named_quota_bytes",
            "Bytes named quotas have used.",
            G,
            rs.quotas
                .iter()
                .map(|n| {
                    (
                        vec![("table", esc(&n.table)), ("quota", esc(&n.name))],
                        Gauge(n.value as i64),
                    )
                })
                .collect(),
        ));
        f.push((
            "weir_set_elements",
            "Elements sets gained from the packet path.",
            G,
            rs.sets
                .iter()
                .map(|n| {
                    (
                        vec![("table", esc(&n.table)), ("set", esc(&n.name))],
                        Gauge(n.value as i64),
                    )
                })
                .collect(),
        ));
        f.push((
            "weir_conntrack_entries",
            "Connection tracking entries.",
            G,
            vec![(Labels::new(), Gauge(t.ct_entries as i64))],
        ));
        f.push((
            "weir_conntrack_evicted",
            "Unassured entries evicted from a full table.",
            C,
            one(t.ct_evicted),
        ));
        f.push((
            "weir_conntrack_refused",
            "New connections refused (table full).",
            C,
            one(t.ct_refused),
        ));
        if t.nfqueue {
            f.push((
                "weir_nfqueue_batches",
                "Receive batches.",
                C,
                one(t.queue_batches),
            ));
            f.push((
                "weir_nfqueue_errors",
                "Netlink errors.",
                C,
                one(t.queue_errors),
            ));
        }
        if t.inline {
            f.push((
                "weir_port_frames",
                "Frames read and sent per port.",
                C,
                t.ports
                    .iter()
                    .flat_map(|(name, rx, tx)| {
                        [("in", *rx), ("out", *tx)].map(|(dir, v)| {
                            (
                                vec![("port", esc(name)), ("dir", dir.to_string())],
                                Counter(v),
                            )
                        })
                    })
                    .collect(),
            ));
            f.push((
                "weir_local_delivered",
                "Packets for the router handed to its own stack (input accepted them).",
                C,
                one(c.local),
            ));
            f.push((
                "weir_host_sent",
                "Packets the router's own stack sent, tracked as they left.",
                C,
                one(c.host_out),
            ));
            f.push((
                "weir_icmp_errors",
                "ICMP errors for dropped packets: sent, or held back by the rate limit.",
                C,
                vec![
                    (vec![("result", "sent".into())], Counter(c.icmp_errors)),
                    (vec![("result", "limited".into())], Counter(c.icmp_limited)),
                ],
            ));
        }
        f.push((
            "weir_worker_packets",
            "Packets per worker.",
            C,
            t.workers
                .iter()
                .map(|(i, io, n)| {
                    (
                        vec![("worker", i.to_string()), ("io", esc(io))],
                        Counter(*n),
                    )
                })
                .collect(),
        ));
        f
    }
}

impl Collector for Snapshot {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        fn put(v: Value, m: prometheus_client::encoding::MetricEncoder) -> std::fmt::Result {
            match v {
                Value::Counter(n) => ConstCounter::new(n).encode(m),
                Value::CounterF(x) => ConstCounter::new(x).encode(m),
                Value::Gauge(n) => ConstGauge::new(n).encode(m),
            }
        }
        for (name, help, kind, mut series) in self.families() {
            let mut fam = encoder.encode_descriptor(name, help, None, kind)?;
            if series.len() == 1 && series[0].0.is_empty() {
                // one series without labels
                let (_, v) = series.remove(0);
                put(v, fam)?;
                continue;
            }
            for (labels, v) in series {
                put(v, fam.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}

/// The OpenMetrics text of a scrape.
pub fn render(process: &ProcessStats, total: &Total) -> String {
    let mut reg = Registry::default();
    reg.register_collector(Box::new(Snapshot {
        process: *process,
        total: total.clone(),
    }));
    let mut out = String::new();
    if prometheus_client::encoding::text::encode(&mut out, &reg).is_err() {
        return "# the metrics could not be encoded\n".into();
    }
    out
}

/// The content type of [`render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Serve `GET /metrics` on `addr`: each scrape asks the dispatcher, which asks the workers
/// (between batches).
pub fn serve(addr: &str, tx: mpsc::Sender<CtlRequest>) -> anyhow::Result<()> {
    let server = tiny_http::Server::http(addr)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| format!("metrics address {addr}"))?;
    std::thread::Builder::new()
        .name("weir-metrics".into())
        .spawn(move || {
            for req in server.incoming_requests() {
                let path = req.url().split('?').next().unwrap_or("").to_string();
                let resp = if req.method() != &tiny_http::Method::Get {
                    text(405, "GET /metrics\n".into(), "text/plain")
                } else if path == "/metrics" || path == "/" {
                    let (rtx, rrx) = mpsc::channel();
                    let _ = tx.send((vec!["metrics".into()], rtx));
                    match rrx.recv_timeout(std::time::Duration::from_secs(5)) {
                        Ok(b) => text(200, b, CONTENT_TYPE),
                        Err(_) => text(503, "the dataplane did not answer\n".into(), "text/plain"),
                    }
                } else {
                    text(404, "GET /metrics\n".into(), "text/plain")
                };
                let _ = req.respond(resp);
            }
        })?;
    Ok(())
}

fn text(code: u16, body: String, ctype: &str) -> tiny_http::Response<std::io::Cursor<Vec<u8>>> {
    let mut r = tiny_http::Response::from_string(body).with_status_code(code);
    if let Ok(h) = tiny_http::Header::from_bytes(&b"Content-Type"[..], ctype.as_bytes()) {
        r.add_header(h);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{RuleStat, RulesetStats};

    #[test]
    fn openmetrics_with_exact_integers_and_escaped_labels() {
        let mut total = Total::default();
        total.counts.packets = (1 << 53) + 1;
        total.ruleset = RulesetStats {
            rules: vec![RuleStat {
                table: "inet filter".into(),
                chain: "input".into(),
                handle: 1,
                text: "iifname \"lo\" accept".into(),
                packets: 3,
                bytes: 180,
                last_ms: None,
            }],
            ..RulesetStats::default()
        };
        let out = render(&ProcessStats::default(), &total);
        assert!(
            out.contains("# TYPE weir_packets counter\nweir_packets_total 9007199254740993\n"),
            "{out}"
        );
        assert!(
            out.contains("# HELP weir_packets Packets handled.\n"),
            "{out}"
        );
        assert!(out.contains(
            "weir_rule_packets_total{table=\"inet filter\",chain=\"input\",handle=\"1\",rule=\"iifname \\\"lo\\\" accept\"} 3\n"
        ), "{out}");
        assert!(out.ends_with("# EOF\n"));
    }
}
