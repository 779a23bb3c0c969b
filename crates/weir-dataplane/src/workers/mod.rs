//! The workers: one thread each, its own engine (connection table, counters, sets) and its
//! own I/O ([`Io`]: an NFQUEUE queue, or inline ports), which answer the control plane
//! between batches with typed replies ([`Worker::answer`]).

pub mod handoff;
pub mod inline;
pub mod links;
pub mod nfqueue;

use crate::control::{ConnRow, Reply, Request, SetElement};
use crate::stats::{Counts, IoStats, NamedStat, RuleStat, RulesetStats, WorkerStats};
use crate::trace::{self, Trace};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use weir_engine::stateful::Stateful;
use weir_engine::Engine;

/// The clock of the dataplane (monotonic, ns).
/// CLOCK_REALTIME less CLOCK_MONOTONIC ([`now_ns`]): what the engine adds to `now_ns` for
/// `meta time`, `day` and `hour` (set again each batch: the wall clock may be stepped).
pub fn wall_offset() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime fills the live timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    let real = ts.tv_sec * 1_000_000_000 + ts.tv_nsec;
    real - now_ns() as i64
}

/// The CPU this thread runs on now (`meta cpu`).
pub fn this_cpu() -> u32 {
    // SAFETY: sched_getcpu takes no arguments; it returns -1 on failure.
    let c = unsafe { libc::sched_getcpu() };
    c.max(0) as u32
}

pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime fills the live timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// What a worker keeps whatever its I/O: its engine, its counts, a trace in progress.
pub struct State {
    pub idx: usize,
    pub sf: Stateful,
    pub counts: Counts,
    pub trace: Option<Trace>,
}

/// Where a worker's packets come from and go.
pub enum Io {
    Nfq(Box<nfqueue::Nfq>),
    Inline(Box<inline::Inline>),
}

/// A worker.
pub struct Worker {
    pub state: State,
    pub io: Io,
}

/// What the dispatcher asks a worker.
pub enum Msg {
    /// A request of `weir ctl`, answered with one reply (a trace: when it ends).
    Ask(Request, mpsc::Sender<Reply>),
    /// End the trace in progress now (it answers with what it has).
    TraceStop,
    /// Take this engine (a reload), and say so.
    Reload(Box<Engine>, mpsc::Sender<()>),
    /// Add and delete these elements of named sets in place (a batch of only element
    /// changes: no new engine), and say so.
    Elements(Vec<weir_lang::session::ElementEdit>, mpsc::Sender<()>),
}

impl Worker {
    /// The worker thread: requests between batches until weir stops; returns its
    /// statistics.
    pub fn run(mut self, rx: mpsc::Receiver<Msg>) -> WorkerStats {
        while !crate::daemon::STOP.load(Ordering::Relaxed) {
            while let Ok(m) = rx.try_recv() {
                match m {
                    Msg::Ask(Request::Trace(n, f), reply) => {
                        // a new trace replaces one in progress (which gets what it has)
                        self.end_trace(true);
                        self.state.trace = Some(Trace::new(n, f, reply));
                    }
                    Msg::Ask(req, reply) => {
                        let _ = reply.send(self.answer(&req, now_ns()));
                    }
                    Msg::TraceStop => self.end_trace(true),
                    Msg::Reload(eng, reply) => {
                        let old = self.state.sf.reload(*eng);
                        let _ = reply.send(());
                        // (freed off the packet path)
                        let _ = std::thread::Builder::new()
                            .name("weir-free".into())
                            .spawn(move || drop(old));
                    }
                    Msg::Elements(edits, reply) => {
                        for e in edits {
                            let Ok((ti, si)) = self.find_set(e.family.name(), &e.table, &e.set)
                            else {
                                continue;
                            };
                            let rs = &mut self.state.sf.engine_mut().rs;
                            if e.add {
                                rs.add_element(ti, si, e.element);
                            } else {
                                rs.remove_element(ti, si, &e.element.key);
                            }
                        }
                        let _ = reply.send(());
                    }
                }
            }
            self.end_trace(false);
            let r = match &mut self.io {
                Io::Nfq(q) => q.step(&mut self.state),
                Io::Inline(il) => il.step(&mut self.state),
            };
            if let Err(e) = r {
                tracing::error!(worker = self.state.idx, io = %self.io_text(), error = %e, "worker stopped");
                crate::daemon::STOP.store(true, Ordering::Relaxed);
            }
        }
        self.end_trace(true);
        self.stats(now_ns())
    }

    /// Send the trace's report when it is complete, has timed out, or `now` is set.
    fn end_trace(&mut self, now: bool) {
        if self.state.trace.as_ref().is_some_and(|t| now || t.done()) {
            if let Some(t) = self.state.trace.take() {
                t.finish();
            }
        }
    }

    /// What the worker's I/O is, in words.
    fn io_text(&self) -> String {
        match &self.io {
            Io::Nfq(q) => format!("queue {}", q.queue.num()),
            Io::Inline(il) => format!(
                "inline {}",
                il.ports
                    .iter()
                    .map(|p| format!("{} ({})", p.name(), p.kind()))
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
        }
    }

    /// A request of the control plane, answered between batches.
    pub fn answer(&mut self, req: &Request, now: u64) -> Reply {
        match req {
            Request::Status | Request::Metrics | Request::Counters => {
                Reply::Stats(Box::new(self.stats(now)))
            }
            Request::CtCount(f) => Reply::Count(self.ct_matching(f).len() as u64),
            Request::CtFlush(f) => {
                let ids = self.ct_matching(f);
                for &id in &ids {
                    self.state.sf.ct_mut().remove(id);
                }
                Reply::Flushed(ids.len() as u64)
            }
            Request::CtList(max, f) => Reply::Conns(self.ct_list(*max, f, now)),
            Request::SetAdd {
                family,
                table,
                set,
                element,
            } => self.set_change(true, family, table, set, element, now),
            Request::SetDel {
                family,
                table,
                set,
                element,
            } => self.set_change(false, family, table, set, element, now),
            Request::SetList { family, table, set } => match self.set_list(family, table, set, now)
            {
                Ok(v) => Reply::SetElements(v),
                Err(e) => Reply::Error(e),
            },
            Request::Reload
            | Request::Trace(..)
            | Request::NftBatch { .. }
            | Request::NftList { .. } => Reply::Error("not a worker's request".into()),
        }
    }

    /// The worker's statistics now.
    pub fn stats(&mut self, now: u64) -> WorkerStats {
        let sf = &self.state.sf;
        let st = sf.ct().stats();
        let io = match &mut self.io {
            Io::Nfq(q) => IoStats::Queue {
                batches: q.queue.stats.batches,
                sends: q.queue.stats.sends,
                errors: q.queue.stats.errors,
            },
            Io::Inline(il) => IoStats::Inline {
                ports: il.ports.iter_mut().map(|p| p.stats()).collect(),
                router: il.router.describe(),
                handoff: il.handoff.as_ref().map(|h| crate::stats::HandoffStats {
                    all: h.all,
                    handed: h.handed,
                    full: h.full,
                }),
            },
        };
        let s = &sf.stats();
        WorkerStats {
            idx: self.state.idx,
            io_text: self.io_text(),
            counts: self.state.counts,
            ct_entries: sf.ct().len() as u64,
            ct_evicted: st.evicted,
            ct_refused: st.refused,
            nat_steer_missed: sf.steer().map(|_| s.nat_steer_missed),
            fragments_followed: s.fragments_followed,
            flowtable: sf.has_flowtables().then_some((
                s.offloaded,
                s.fast_path,
                s.offload_teardowns,
            )),
            fast_path: s.fast_path,
            io,
            ruleset: ruleset_stats(sf, now),
            scripts: sf
                .flow_hook()
                .and_then(|h| h.as_any())
                .and_then(|a| a.downcast_ref::<weir_script::Scripts>())
                .map(crate::stats::ScriptsStats::of),
            helpers: crate::stats::HelperStats::of(s),
            synproxy: crate::stats::SynproxyStats::of(s),
        }
    }

    /// Connections the filter matches.
    fn ct_matching(&self, f: &crate::control::Filter) -> Vec<weir_conntrack::EntryId> {
        let ct = &self.state.sf.ct();
        ct.iter()
            .filter_map(|(id, _)| {
                let o = ct.tuple(id, weir_conntrack::Dir::Original)?;
                let r = ct.tuple(id, weir_conntrack::Dir::Reply)?;
                f.matches(&[o, r]).then_some(id)
            })
            .collect()
    }

    fn ct_list(&self, max: usize, f: &crate::control::Filter, now: u64) -> Vec<ConnRow> {
        let ct = &self.state.sf.ct();
        let mut rows = Vec::new();
        for id in self.ct_matching(f).into_iter().take(max) {
            let (Some(e), Some(o), Some(r)) = (
                ct.get(id),
                ct.tuple(id, weir_conntrack::Dir::Original),
                ct.tuple(id, weir_conntrack::Dir::Reply),
            ) else {
                continue;
            };
            rows.push(ConnRow(format!(
                "proto {} {} -> {} | reply {} -> {} | {:?} timeout {} s mark {}",
                o.proto,
                trace::endpoint(o.src, o.sport, o.v6),
                trace::endpoint(o.dst, o.dport, o.v6),
                trace::endpoint(r.src, r.sport, r.v6),
                trace::endpoint(r.dst, r.dport, r.v6),
                e.tcp_state(),
                e.timeout_remaining(now).as_secs(),
                e.mark
            )));
        }
        rows
    }

    /// The table and set a `set` command names.
    fn find_set(&self, fam: &str, table: &str, set: &str) -> Result<(usize, usize), String> {
        let rs = self.state.sf.ruleset();
        let ti = rs
            .tables
            .iter()
            .position(|t| t.family.name() == fam && t.name == table)
            .ok_or_else(|| format!("no table {fam} {table}"))?;
        let si = rs.tables[ti]
            .set_names
            .iter()
            .position(|n| n == set)
            .ok_or_else(|| format!("no set {set} in table {fam} {table}"))?;
        Ok((ti, si))
    }

    /// `set list`: the elements of a set beside its static ones (what the packet path and
    /// `set add` added).
    fn set_list(&self, fam: &str, table: &str, set: &str, now: u64) -> Result<Vec<String>, String> {
        let (ti, si) = self.find_set(fam, table, set)?;
        let eng = &self.state.sf.engine();
        let types = eng.rs.tables[ti].ir.sets[si].key_types.clone();
        let mut out = Vec::new();
        if let Some(d) = eng.st.dynset(ti, si) {
            for (k, packets, bytes, exp) in d.elements(now) {
                let key: Vec<String> = k
                    .iter()
                    .zip(&types)
                    .map(|(v, dt)| weir_lang::values::format_value(*dt, *v))
                    .collect();
                let mut l = key.join(" . ");
                if exp != 0 {
                    l.push_str(&format!(
                        " expires {} s",
                        exp.saturating_sub(now) / 1_000_000_000
                    ));
                }
                l.push_str(&format!(" packets {packets} bytes {bytes}"));
                out.push(l);
            }
        }
        Ok(out)
    }

    /// `set add|del FAMILY TABLE SET ELEMENT [timeout T]`; a concatenation is written
    /// `a . b`.
    fn set_change(
        &mut self,
        add: bool,
        fam: &str,
        table: &str,
        set: &str,
        element: &SetElement,
        now: u64,
    ) -> Reply {
        match self.set_change_inner(add, fam, table, set, element, now) {
            Ok(w) => Reply::SetChanged(w),
            Err(e) => Reply::Error(e),
        }
    }

    fn set_change_inner(
        &mut self,
        add: bool,
        fam: &str,
        table: &str,
        set: &str,
        element: &SetElement,
        now: u64,
    ) -> Result<&'static str, String> {
        let (ti, si) = self.find_set(fam, table, set)?;
        let eng = self.state.sf.engine_mut();
        let decl = &eng.rs.tables[ti].ir.sets[si];
        let types = decl.key_types.clone();
        let (timeout_ms, size) = (decl.timeout_ms, decl.size);
        let text = &element.text;
        let parts: Vec<&str> = text.split(" . ").map(str::trim).collect();
        if parts.len() != types.len() || text.is_empty() {
            return Err(format!(
                "set {set} takes {} value(s) joined by ' . '",
                types.len()
            ));
        }
        let mut key = Vec::new();
        for (p, dt) in parts.iter().zip(&types) {
            key.push(weir_lang::values::parse_scalar(*dt, p)?);
        }
        if !add {
            return if eng.st.dynset_remove(ti, si, &key) {
                Ok("deleted")
            } else {
                Err(format!("{text}: not an element added at run time"))
            };
        }
        let ms = match &element.timeout {
            Some(t) => Some(weir_lang::values::parse_time_ms(t)?),
            None => timeout_ms,
        };
        let expires = ms.map_or(0, |ms| now + ms * 1_000_000);
        let size = size.map_or(weir_engine::eval::DYNSET_DEFAULT_SIZE, |s| s as usize);
        if eng.st.dynset_add(ti, si, key, expires, size) {
            Ok("added")
        } else {
            Err(format!("set {set} is full ({size} elements)"))
        }
    }
}

/// The ruleset's own counters in a worker: its rules, named counters and quotas, run-time sets.
fn ruleset_stats(sf: &Stateful, now: u64) -> RulesetStats {
    let eng = &sf.engine();
    let mut out = RulesetStats::default();
    for (ti, t) in eng.rs.tables.iter().enumerate() {
        let table = format!("{} {}", t.family.name(), t.name);
        for ch in &t.chains {
            for r in ch.rules() {
                let (packets, bytes) = eng.st.rule_hits[r.gid];
                let last_ms = r
                    .exprs
                    .iter()
                    .any(|e| matches!(e, weir_engine::compile::CExpr::Last))
                    .then(|| {
                        let at = eng.st.rule_last.get(r.gid).copied().unwrap_or(0);
                        (at != 0).then(|| now.saturating_sub(at) / 1_000_000)
                    });
                out.rules.push(RuleStat {
                    table: table.clone(),
                    chain: ch.name.clone(),
                    handle: r.handle,
                    text: r.text.clone(),
                    packets,
                    bytes,
                    last_ms,
                });
            }
        }
        for (si, name) in t.set_names.iter().enumerate() {
            let n = eng.st.dynset(ti, si).map_or(0, |d| d.len_at(now));
            out.sets.push(NamedStat {
                table: table.clone(),
                name: name.clone(),
                value: n as u64,
            });
        }
        for (qi, (name, _)) in t.ir.quotas.iter().enumerate() {
            if let Some(used) = weir_engine::objects::quota_used(eng, ti, qi) {
                out.quotas.push(NamedStat {
                    table: table.clone(),
                    name: name.clone(),
                    value: used,
                });
            }
        }
        for (ci, nc) in t.ir.counters.iter().enumerate() {
            if let Some(&(pk, _)) = eng.st.named_counters.get(ti).and_then(|v| v.get(ci)) {
                out.counters.push(NamedStat {
                    table: table.clone(),
                    name: nc.name.clone(),
                    value: pk,
                });
            }
        }
    }
    out
}
