//! The main thread between the control plane and the workers: reloads (the ruleset is
//! checked once, then every worker gets its engine), and every request asked of all the
//! workers, their typed answers rendered into one text ([`crate::control::render`]). In
//! NFQUEUE mode the netdev tables in the kernel are replaced on reload, their counters read
//! for `counters` and `metrics`, their sets changed through nft ([`crate::netdev`]).

use crate::control::{self, Reply, Request, TRACE_SECONDS};
use crate::stats::ProcessStats;
use crate::workers::Msg;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Batches after which the session is folded into its listing ([`Dispatcher::compact`]).
pub const COMPACT_AFTER: usize = 256;

pub struct Dispatcher {
    pub workers: Vec<mpsc::Sender<Msg>>,
    pub rules: PathBuf,
    /// The commands the running ruleset was made from: the file, then each `weir nft`
    /// batch applied since (a reload starts again from the file).
    pub session: weir_lang::Session,
    /// The running ruleset (what `weir nft list` prints).
    pub ruleset: weir_lang::ir::Ruleset,
    pub reloads: u64,
    pub reload_errors: u64,
    pub started: Instant,
    /// CPU time at start (user, system).
    pub cpu0: (f64, f64),
    /// The kernel queues only what the scripts act on ([`crate::scope`]): a reload keeps to
    /// rulesets that only hand packets to scripts.
    pub narrowed: bool,
    /// NFQUEUE mode (NAT refused on reload too).
    pub nfqueue: bool,
    /// The queues per-flow scripts listen on (a `queue` to another is refused on reload too).
    pub listening: std::collections::BTreeSet<u16>,
    /// NFQUEUE mode with `nfqueue.install`: the netdev tables in the kernel's nftables
    /// (replaced on reload, removed when the dispatcher goes).
    pub netdev: Option<crate::netdev::Installed>,
    /// Inline mode: weir's interfaces (chains bound to other devices are warned of).
    pub ports: Vec<String>,
    /// Inline mode: the `tproxy` targets the kernel's table has (`kernel::tproxy_table`).
    pub tproxy: Vec<weir_engine::stateful::tproxy::Target>,
    /// NFQUEUE mode with the kernel's queue rules installed: the iptables hooks they queue
    /// (those of the ruleset weir started with). A change that needs another is refused.
    pub queued_hooks: Option<Vec<&'static str>>,
}

impl Dispatcher {
    /// Load the ruleset file again, all or nothing: the text of the outcome. The batches
    /// `weir nft` applied since are dropped with the old session (as `nft -f FILE` after
    /// `flush ruleset`).
    pub fn reload(&mut self) -> String {
        let loaded = crate::daemon::load_session(&self.rules, self.nfqueue, &self.listening)
            .and_then(|(s, rs)| self.install(&rs).map(|_| (s, rs)));
        match loaded {
            Ok((s, rs)) => {
                let hub = crate::monitor::hub();
                if hub.changes() {
                    let opts = weir_lang::print::Options {
                        handles: true,
                        ..Default::default()
                    };
                    let before =
                        weir_lang::print::ruleset(self.session.ast(), &self.ruleset, &opts);
                    let after = weir_lang::print::ruleset(s.ast(), &rs, &opts);
                    hub.changed(&weir_lang::print::events::events(&before, &after));
                }
                (self.session, self.ruleset) = (s, rs);
                self.reloads += 1;
                tracing::info!(ruleset = %self.rules.display(), "reloaded");
                format!("reloaded {}\n", self.rules.display())
            }
            Err(e) => {
                self.reload_errors += 1;
                tracing::warn!(ruleset = %self.rules.display(), "reload refused, the running ruleset stays");
                format!(
                    "error: {} refused, the running ruleset stays:\n{e}",
                    self.rules.display()
                )
            }
        }
    }

    /// `weir nft`: batch `text` (named `name` in messages) applied to the running ruleset,
    /// all or nothing; with `check`, only checked against it (`nft -c`). The answer's first
    /// line is `ok` or `error`, what nft would print after it.
    pub fn nft_apply(
        &mut self,
        name: &str,
        text: &str,
        check: bool,
        echo: bool,
        optimize: bool,
    ) -> String {
        // a batch of only element changes (fail2ban's): in place, without a new engine
        if !check && !echo && !optimize {
            if let Some(r) = self.elements_in_place(name, text) {
                return r;
            }
        }
        let applied = self.batch(name, text, optimize);
        let (mut s, rs) = match applied {
            Ok(x) => x,
            Err(e) => return format!("error\n{e}"),
        };
        if let Err(e) = crate::daemon::accept(&rs, self.nfqueue, &self.listening) {
            return format!("error\n{e}");
        }
        // the batch's `list ...` commands, answered from the ruleset it makes (`reset ...`
        // from the one before: what it resets)
        let mut answers = String::new();
        if !s.queries.is_empty() {
            let text = weir_lang::print::ruleset(s.ast(), &rs, &Default::default());
            // (the ruleset before the batch is listed only when a `reset` asks for it)
            let old = std::cell::OnceCell::new();
            let old = || {
                old.get_or_init(|| {
                    weir_lang::print::ruleset(
                        self.session.ast(),
                        &self.ruleset,
                        &Default::default(),
                    )
                })
            };
            for q in &s.queries {
                let words: Vec<&str> = q.iter().map(String::as_str).collect();
                match words.split_first() {
                    Some((&"list", rest)) => {
                        let rest = if rest.is_empty() {
                            &["ruleset"][..]
                        } else {
                            rest
                        };
                        match weir_lang::print::select::select(&text, rest) {
                            Ok(t) => answers.push_str(&t),
                            Err(e) => return format!("error\nError: {e}\n"),
                        }
                    }
                    Some((&"reset", rest)) => {
                        const FAMS: [&str; 6] = ["ip", "ip6", "inet", "arp", "bridge", "netdev"];
                        // what nft prints: the objects as they were
                        let list: Vec<&str> = match rest {
                            ["rules" | "rule", more @ ..] => match more {
                                [] => vec!["ruleset"],
                                [f] if FAMS.contains(f) => vec!["ruleset", f],
                                [f, t] if FAMS.contains(f) => vec!["table", f, t],
                                [f, t, c, ..] if FAMS.contains(f) => vec!["chain", f, t, c],
                                [t] => vec!["table", t],
                                [t, c, ..] => vec!["chain", t, c],
                            },
                            ["element", ..] => {
                                match weir_lang::print::select::get_element(
                                    self.session.ast(),
                                    &self.ruleset,
                                    rest,
                                ) {
                                    Ok(t) => {
                                        answers.push_str(&t);
                                        continue;
                                    }
                                    Err(e) => return format!("error\nError: {e}\n"),
                                }
                            }
                            r => r.to_vec(),
                        };
                        match weir_lang::print::select::select(old(), &list) {
                            Ok(t) => answers.push_str(&t),
                            Err(e) => return format!("error\nError: {e}\n"),
                        }
                    }
                    Some((&"get", rest)) => {
                        match weir_lang::print::select::get_element(s.ast(), &rs, rest) {
                            Ok(t) => answers.push_str(&t),
                            Err(e) => return format!("error\nError: {e}\n"),
                        }
                    }
                    _ => {
                        return format!(
                            "error\nError: `{}` is not answered inside a batch yet\n",
                            q.join(" ")
                        )
                    }
                }
            }
        }
        // (only queries: nothing to install)
        if check || !s.changed {
            return ok_reply(&s.merged, &answers);
        }
        if let Err(e) = self.install(&rs) {
            self.reload_errors += 1;
            return format!("error\n{e}");
        }
        let hub = crate::monitor::hub();
        if echo || hub.changes() {
            // what the batch added, as `nft -e` prints it (with handles); what it changed,
            // for `nft monitor`
            let opts = weir_lang::print::Options {
                handles: true,
                ..Default::default()
            };
            let before = weir_lang::print::ruleset(self.session.ast(), &self.ruleset, &opts);
            let after = weir_lang::print::ruleset(s.ast(), &rs, &opts);
            if echo {
                answers.insert_str(0, &weir_lang::print::select::echo(&before, &after));
            }
            if hub.changes() {
                hub.changed(&weir_lang::print::events::events(&before, &after));
            }
        }
        let merged = std::mem::take(&mut s.merged);
        (self.session, self.ruleset) = (s, rs);
        self.reloads += 1;
        tracing::info!(batch = %name, "applied");
        if self.session.batches >= COMPACT_AFTER {
            self.compact();
        }
        ok_reply(&merged, &answers)
    }

    /// [`weir_lang::Session::apply_elements`] for a running weir: the elements checked
    /// against their set alone, the session and ruleset changed, each worker's engine
    /// changed in place (its packets wait only for the elements themselves). None when the
    /// batch is not only element changes of plain sets (or something listens to `nft
    /// monitor`, or the set is in a table the kernel's nftables runs): the full path then.
    fn elements_in_place(&mut self, name: &str, text: &str) -> Option<String> {
        if weir_lang::json::looks_like_json(text) || crate::monitor::hub().changes() {
            return None;
        }
        if self.netdev.is_some()
            && self
                .ruleset
                .tables
                .iter()
                .any(|t| t.family == weir_lang::ir::Family::Netdev)
        {
            return None;
        }
        let edits = match self.session.apply_elements(&mut self.ruleset, name, text)? {
            Ok(e) => e,
            Err((sources, diags)) => {
                return Some(format!(
                    "error\n{}",
                    weir_lang::diag::render_all(&diags, &sources)
                ))
            }
        };
        let acks: Vec<_> = self
            .workers
            .iter()
            .map(|w| {
                let (tx, rx) = mpsc::channel();
                let _ = w.send(Msg::Elements(edits.clone(), tx));
                rx
            })
            .collect();
        for a in acks {
            let _ = a.recv_timeout(Duration::from_secs(5));
        }
        self.reloads += 1;
        tracing::info!(batch = %name, elements = edits.len(), "applied in place");
        if self.session.batches >= COMPACT_AFTER {
            self.compact();
        }
        Some("ok\n".to_string())
    }

    /// The session and ruleset batch `text` (nft text or nft's JSON syntax) makes of the
    /// running one, or the error nft would print.
    fn batch(
        &self,
        name: &str,
        text: &str,
        optimize: bool,
    ) -> Result<(weir_lang::Session, weir_lang::ir::Ruleset), String> {
        if weir_lang::json::looks_like_json(text) {
            self.json_batch(name, text)
        } else {
            self.session
                .apply_with(name, text, optimize)
                .map(|(s, rs, _)| (s, rs))
                .map_err(|(sources, diags)| weir_lang::diag::render_all(&diags, &sources))
        }
    }

    /// `weir ctl diff FILE`: batch `text` checked against the running ruleset, and what
    /// applying it would change, as listing lines removed (`-`) and added (`+`) within their
    /// table and chain; the running ruleset untouched.
    pub fn nft_diff(&mut self, name: &str, text: &str) -> String {
        let applied = self.batch(name, text, false);
        let (s, rs) = match applied {
            Ok(x) => x,
            Err(e) => return format!("error\n{e}"),
        };
        let opts = weir_lang::print::Options {
            stateless: true,
            ..Default::default()
        };
        let before = weir_lang::print::ruleset(self.session.ast(), &self.ruleset, &opts);
        let after = weir_lang::print::ruleset(s.ast(), &rs, &opts);
        format!("ok\n{}", weir_lang::print::select::diff(&before, &after))
    }

    /// Fold the session's history (the file and every batch, each batch checked after all
    /// of them) into the running ruleset's listing, so that batches stay cheap however many
    /// came before (fail2ban adds an element per ban). Kept only when the listing loads back
    /// to the same listing; rule handles are numbered afresh, as after a JSON batch.
    fn compact(&mut self) {
        let opts = weir_lang::print::Options::default();
        let text = weir_lang::print::ruleset(self.session.ast(), &self.ruleset, &opts);
        match weir_lang::Session::load_str("(running ruleset)", &text) {
            Ok((s, rs, _)) if weir_lang::print::ruleset(s.ast(), &rs, &opts) == text => {
                tracing::info!(batches = self.session.batches, "session compacted");
                // (the engines keep running: the same ruleset)
                (self.session, self.ruleset) = (s, rs);
            }
            _ => tracing::warn!(
                "the running ruleset's listing does not load back the same: not compacted"
            ),
        }
    }

    /// A batch in nft's JSON syntax (`nft -j -f`, what libnftables users such as firewalld
    /// send): its commands after the running ruleset's own JSON listing, the whole translated
    /// to nft text and loaded as the new session (rule handles numbered afresh). An error's
    /// JSON path counts the batch's commands from 0.
    fn json_batch(
        &self,
        name: &str,
        text: &str,
    ) -> Result<(weir_lang::Session, weir_lang::ir::Ruleset), String> {
        use weir_lang::json::{input, output};
        let batch: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("{name}: not JSON: {e}\n"))?;
        let Some(cmds) = batch.get("nftables").and_then(|v| v.as_array()) else {
            return Err(format!("{name}: expected {{\"nftables\": [...]}}\n"));
        };
        let opts = weir_lang::print::Options::default();
        let listing = output::ruleset(self.session.ast(), &self.ruleset, &opts);
        let mut items: Vec<serde_json::Value> = listing
            .get("nftables")
            .and_then(|v| v.as_array())
            .cloned()
            .unwrap_or_default();
        let base = items.len();
        items.extend(cmds.iter().cloned());
        let doc = serde_json::json!({ "nftables": items });
        let nft = input::document(&doc).map_err(|e| {
            // (the path's index as the batch counts it)
            let path = match e
                .path
                .strip_prefix("nftables[")
                .and_then(|r| r.split_once(']'))
            {
                Some((i, rest)) => match i.parse::<usize>() {
                    Ok(i) if i >= base => format!("nftables[{}]{rest}", i - base),
                    _ => e.path.clone(),
                },
                None => e.path.clone(),
            };
            format!("{name}: {path}: {}\n", e.message)
        })?;
        weir_lang::Session::load_str(&format!("{name} (as nft text)"), &nft)
            .map(|(s, rs, _)| (s, rs))
            .map_err(|(sources, diags)| weir_lang::diag::render_all(&diags, &sources))
    }

    /// `weir nft list ruleset`: the running ruleset as `nft list ruleset` prints it
    /// (`json`: as `nft -j` does).
    pub fn nft_list(&self, opts: &weir_lang::print::Options, json: bool) -> String {
        if json {
            let v = weir_lang::json::output::ruleset(self.session.ast(), &self.ruleset, opts);
            return format!("ok\n{v}\n");
        }
        format!(
            "ok\n{}",
            weir_lang::print::ruleset(self.session.ast(), &self.ruleset, opts)
        )
    }

    /// Make `rs` the running ruleset: the kernel's side first (the netdev tables in one
    /// transaction, `tproxy`'s table), then every worker gets its engine (connections,
    /// counters and set elements kept). A refusal changes nothing.
    fn install(&mut self, rs: &weir_lang::ir::Ruleset) -> Result<(), String> {
        // the kernel's netdev tables first, in one transaction: refused, nothing changed
        if self.nfqueue {
            crate::netdev::warn_unrun(rs, self.netdev.is_some());
        } else {
            crate::netdev::warn_unbound(rs, &self.ports);
        }
        if let Some(q) = &self.queued_hooks {
            let need = crate::kernel::ruleset_hooks(rs);
            let missing: Vec<&str> = need.iter().filter(|h| !q.contains(h)).copied().collect();
            if !missing.is_empty() {
                return Err(format!(
                    "error: the kernel queues to weir only at the hooks of the ruleset it started with ({}); this one has base chains at {} too: add a base chain there to the ruleset file and restart weir (or run inline)\n",
                    q.join(", ").to_lowercase(),
                    missing.join(", ").to_lowercase()
                ));
            }
        }
        if self.narrowed {
            crate::scope::scripts_only(rs).map_err(|why| {
                format!("error: the kernel queues only what the scripts act on (weir started with a ruleset that only hands packets to scripts), and this one does more: {why}; restart weir to run it\n")
            })?;
        }
        if let Some(inst) = &mut self.netdev {
            let tables = crate::netdev::render_ruleset(rs, inst.queue())
                .map_err(|e| format!("error: {e}\n"))?;
            inst.replace(&tables)?;
        }
        // the kernel's tproxy table for the new targets (their marks are by index)
        let targets = weir_engine::stateful::tproxy::targets(rs).unwrap_or_default();
        if !self.nfqueue && targets != self.tproxy {
            crate::kernel::apply_tproxy(&targets).map_err(|e| format!("error: {e:#}\n"))?;
            self.tproxy = targets;
        }
        let acks: Vec<_> = self
            .workers
            .iter()
            .zip(crate::daemon::engines(rs, self.workers.len()))
            .map(|(w, eng)| {
                let (tx, rx) = mpsc::channel();
                let _ = w.send(Msg::Reload(Box::new(eng), tx));
                rx
            })
            .collect();
        for a in acks {
            let _ = a.recv_timeout(Duration::from_secs(5));
        }
        Ok(())
    }

    /// The process's own facts now.
    pub fn process(&self) -> ProcessStats {
        let (u, sy) = crate::daemon::cpu_seconds();
        ProcessStats {
            workers: self.workers.len(),
            up_secs: self.started.elapsed().as_secs_f64(),
            reloads: self.reloads,
            reload_errors: self.reload_errors,
            cpu: (u - self.cpu0.0, sy - self.cpu0.1),
        }
    }

    /// Ask every worker; the answers in worker order.
    fn ask_all(&self, req: &Request) -> Vec<mpsc::Receiver<Reply>> {
        self.workers
            .iter()
            .map(|tx| {
                let (rtx, rrx) = mpsc::channel();
                let _ = tx.send(Msg::Ask(req.clone(), rtx));
                rrx
            })
            .collect()
    }

    /// A line of the control socket (or a scrape): parsed, asked, answered on `reply`.
    pub fn dispatch(&mut self, words: Vec<String>, reply: mpsc::Sender<String>) {
        let w: Vec<&str> = words.iter().map(String::as_str).collect();
        let req = match Request::parse(&w) {
            Ok(r) => r,
            Err(e) => {
                let _ = reply.send(e);
                return;
            }
        };
        match &req {
            Request::Reload => {
                let _ = reply.send(self.reload());
                return;
            }
            Request::NftBatch {
                name,
                text,
                check,
                echo,
                diff,
                optimize,
            } => {
                let _ = reply.send(if *diff {
                    self.nft_diff(name, text)
                } else {
                    self.nft_apply(name, text, *check, *echo, *optimize)
                });
                return;
            }
            Request::NftList {
                json,
                stateless,
                numeric,
                handles,
            } => {
                let opts = weir_lang::print::Options {
                    stateless: *stateless,
                    numeric_proto: *numeric,
                    handles: *handles,
                };
                let _ = reply.send(self.nft_list(&opts, *json));
                return;
            }
            _ => {}
        }
        let kernel = self.netdev.as_ref().map(|n| n.tables()).unwrap_or_default();
        // a set of a netdev table that runs in the kernel is the kernel's
        if let Some(r) = crate::netdev::set_request(&kernel, &req) {
            let _ = reply.send(r);
            return;
        }
        let rxs = self.ask_all(&req);
        let process = self.process();
        let trace = matches!(req, Request::Trace(..));
        let senders = self.workers.clone();
        // gathered on a thread of its own: a trace may wait for its packets
        std::thread::spawn(move || {
            let mut answers: Vec<Reply> = if trace {
                gather_trace(&req, &rxs, &senders)
            } else {
                rxs.iter()
                    .map(|r| {
                        r.recv_timeout(Duration::from_secs(5))
                            .unwrap_or_else(|_| Reply::Error("a worker did not answer".into()))
                    })
                    .collect()
            };
            // the kernel's counters of the netdev rules, read only when they are shown; on
            // the first worker's snapshot (every worker has 0 for them: weir never runs them),
            // so the sum has them once
            if matches!(req, Request::Counters | Request::Metrics) && !kernel.is_empty() {
                match crate::netdev::read_counters(&kernel) {
                    Ok(k) => {
                        if let Some(Reply::Stats(s)) =
                            answers.iter_mut().find(|a| matches!(a, Reply::Stats(_)))
                        {
                            k.apply(&mut s.ruleset);
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "reading the kernel's counters of the netdev tables")
                    }
                }
            }
            let _ = reply.send(control::render(&req, &process, &answers));
        });
    }
}

/// A trace runs on every worker (a connection's packets reach one of them); it ends when N
/// packets were traced in all, every worker finished, or the time is up.
fn gather_trace(
    req: &Request,
    rxs: &[mpsc::Receiver<Reply>],
    senders: &[mpsc::Sender<Msg>],
) -> Vec<Reply> {
    let Request::Trace(n, _) = req else {
        return Vec::new();
    };
    let until = Instant::now() + Duration::from_secs(TRACE_SECONDS + 5);
    let mut got: Vec<Option<Reply>> = vec![None; rxs.len()];
    let traced = |got: &[Option<Reply>]| -> usize {
        got.iter()
            .flatten()
            .map(|a| match a {
                Reply::Trace(v) => v.len(),
                _ => 0,
            })
            .sum()
    };
    loop {
        for (g, r) in got.iter_mut().zip(rxs) {
            if g.is_none() {
                *g = r.try_recv().ok();
            }
        }
        if got.iter().all(Option::is_some) || traced(&got) >= *n || Instant::now() >= until {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    for s in senders {
        let _ = s.send(Msg::TraceStop);
    }
    for (g, r) in got.iter_mut().zip(rxs) {
        if g.is_none() {
            *g = r.recv_timeout(Duration::from_millis(500)).ok();
        }
    }
    got.into_iter().flatten().collect()
}

/// A batch's answer: `ok`, the optimizer's report for stderr when there is one (`ok +LEN`,
/// then LEN bytes), then what goes to stdout.
fn ok_reply(stderr: &str, stdout: &str) -> String {
    if stderr.is_empty() {
        format!("ok\n{stdout}")
    } else {
        format!("ok +{}\n{stderr}{stdout}", stderr.len())
    }
}
