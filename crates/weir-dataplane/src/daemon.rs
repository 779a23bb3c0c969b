//! `weir run`: the daemon. It reads the configuration, loads the ruleset, opens every queue
//! or port (errors before anything starts), installs its kernel rules, starts the workers
//! and the control and metrics threads, tells systemd it is ready, and serves signals
//! (SIGHUP: reload; SIGINT, SIGTERM: stop) and control requests until it stops; then it
//! removes what it installed and reports. In NFQUEUE mode the ruleset's netdev tables are
//! installed in the kernel's nftables ([`crate::netdev`]).

use crate::config::{Config, Mode};
use crate::control::{self, CtlRequest};
use crate::dispatcher::Dispatcher;
use crate::kernel;
use crate::netdev;
use crate::stats::WorkerStats;
use crate::workers::inline::{Held, Inline};
use crate::workers::links::{xdp_workers, Link};
use crate::workers::nfqueue::{copy_range, Answers, IfNames, Nfq};
use crate::workers::{handoff::Handoff, now_ns, Io, Msg, State, Worker};
use anyhow::Context;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Instant;
use weir_engine::stateful::Stateful;
use weir_engine::{Compiled, Engine, Mode as EngineMode};
use weir_io::nfqueue::{self, Queue};

/// Set by SIGINT / SIGTERM (or a worker that fails): everything stops.
pub static STOP: AtomicBool = AtomicBool::new(false);
/// Set by SIGHUP: reload the ruleset.
pub static RELOAD: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

extern "C" fn on_hup(_: libc::c_int) {
    RELOAD.store(true, Ordering::Relaxed);
}

fn install_signals() {
    // SAFETY: the handlers only store to atomics (async-signal-safe); sigaction is given
    // a fully initialised struct. SA_RESTART is not set, so a blocking poll returns EINTR
    // and the loop sees the flag at once.
    unsafe {
        for (sig, h) in [
            (libc::SIGINT, on_stop as extern "C" fn(libc::c_int)),
            (libc::SIGTERM, on_stop),
            (libc::SIGHUP, on_hup),
        ] {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = h as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// CPU time of this process (user, system), in seconds.
pub fn cpu_seconds() -> (f64, f64) {
    // SAFETY: getrusage fills the zeroed rusage struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_SELF and a live struct.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    (t(ru.ru_utime), t(ru.ru_stime))
}

/// Load and check the ruleset; the errors as text. In NFQUEUE mode NAT and `synproxy` are
/// refused.
pub fn load(
    path: &Path,
    nfqueue: bool,
    listening: &std::collections::BTreeSet<u16>,
) -> Result<weir_lang::ir::Ruleset, String> {
    load_session(path, nfqueue, listening).map(|(_, rs)| rs)
}

/// [`load`], with the session the ruleset's changes at run time start from (`weir nft`).
pub fn load_session(
    path: &Path,
    nfqueue: bool,
    listening: &std::collections::BTreeSet<u16>,
) -> Result<(weir_lang::Session, weir_lang::ir::Ruleset), String> {
    let (session, rs) = match weir_lang::Session::load_file(path) {
        Ok((s, rs, _)) => (s, rs),
        Err((sources, diags)) => return Err(weir_lang::diag::render_all(&diags, &sources)),
    };
    accept(&rs, nfqueue, listening)?;
    Ok((session, rs))
}

/// What a loaded ruleset must also be to run: evaluated whole, its `tproxy` targets few
/// enough, its queues listened on, its `meta cgroup` answerable; in NFQUEUE mode without
/// NAT and the statements only a router can run. The error as text.
pub fn accept(
    rs: &weir_lang::ir::Ruleset,
    nfqueue: bool,
    listening: &std::collections::BTreeSet<u16>,
) -> Result<(), String> {
    rs.refuse_unevaluated()?;
    weir_engine::stateful::tproxy::targets(rs).map_err(|e| format!("error: {e}\n"))?;
    if let Some(e) = queue_unheard(rs, listening) {
        return Err(e);
    }
    if let Some(e) = cgroup_classids(rs, &net_cls_mounts()) {
        return Err(e);
    }
    if nfqueue {
        if let Some(e) = nat_in_nfqueue_mode(rs) {
            return Err(e);
        }
    }
    Ok(())
}

/// The host's net_cls cgroup (v1) mounts, from `/proc/self/mounts`.
fn net_cls_mounts() -> Vec<String> {
    std::fs::read_to_string("/proc/self/mounts")
        .unwrap_or_default()
        .lines()
        .filter(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            w.get(2) == Some(&"cgroup")
                && w.get(3)
                    .is_some_and(|o| o.split(',').any(|x| x == "net_cls"))
        })
        .map(|l| l.split_whitespace().nth(1).unwrap_or("").to_string())
        .collect()
}

/// `meta cgroup` is a socket's net_cls class id, 0 unless a net_cls hierarchy (cgroup v1)
/// gives it another, which neither sock_diag nor NFQUEUE tells: where one is mounted
/// (`mounts`), a rule reading it is refused, naming the rule.
fn cgroup_classids(rs: &weir_lang::ir::Ruleset, mounts: &[String]) -> Option<String> {
    if mounts.is_empty() {
        return None;
    }
    for t in &rs.tables {
        for c in &t.chains {
            for r in &c.rules {
                if r.exprs
                    .iter()
                    .any(|e| e.reads(&|f| f == weir_wire::Field::MetaCgroup))
                {
                    return Some(format!(
                        "error: `{}` (table {} {}, chain {}): meta cgroup with a net_cls hierarchy mounted ({}): weir cannot learn sockets' class ids (sock_diag and NFQUEUE do not give them); only on hosts without net_cls, where every class id is 0\n",
                        r.text,
                        t.family.name(),
                        t.name,
                        c.name,
                        mounts.join(", ")
                    ));
                }
            }
        }
    }
    None
}

/// `queue` hands packets to weir's per-flow scripts (`[scripts]`): a queue nobody listens on
/// would drop what it is given (as the kernel does), so a statement naming one without
/// `bypass` is refused, naming the rule.
fn queue_unheard(
    rs: &weir_lang::ir::Ruleset,
    listening: &std::collections::BTreeSet<u16>,
) -> Option<String> {
    for t in &rs.tables {
        for c in &t.chains {
            for r in &c.rules {
                for e in &r.exprs {
                    let nums: Vec<u16> = match e {
                        weir_lang::ir::Expr::Queue(q) if !q.bypass => (q.first..=q.last).collect(),
                        weir_lang::ir::Expr::QueueTo {
                            num, bypass: false, ..
                        } => match queue_numbers(t, num) {
                            Some(v) => v,
                            None => {
                                return Some(format!(
                                    "error: `{}` (table {} {}, chain {}): the queue is computed from the packet and may be one nobody listens on, so its packets would be dropped; give the expression a bound (`mod N`), or queue with bypass\n",
                                    r.text,
                                    t.family.name(),
                                    t.name,
                                    c.name
                                ))
                            }
                        },
                        _ => continue,
                    };
                    if let Some(n) = nums.into_iter().find(|n| !listening.contains(n)) {
                        return Some(format!(
                            "error: `{}` (table {} {}, chain {}): no [[scripts.profile]] listens on queue {n}, so its packets would be dropped; add one with queue = {n}, or queue with bypass\n",
                            r.text,
                            t.family.name(),
                            t.name,
                            c.name
                        ));
                    }
                }
            }
        }
    }
    None
}

/// The queues `queue to EXPR` may give: a constant, a hash's or a counter's range (`mod N
/// offset O`), a map's values; None when they cannot be bounded.
fn queue_numbers(t: &weir_lang::ir::Table, num: &weir_lang::ir::ValueExpr) -> Option<Vec<u16>> {
    use weir_lang::ir::{MapValue, SetRef, Source, ValueExpr};
    match num {
        ValueExpr::Const(v) => Some(vec![*v.first()? as u16]),
        ValueExpr::Key(k) if k.len() == 1 && k[0].is_plain() => match k[0].src {
            Source::Jhash {
                modulus, offset, ..
            }
            | Source::Symhash { modulus, offset }
            | Source::Numgen {
                modulus, offset, ..
            } => Some(
                (offset as u64..offset as u64 + modulus as u64)
                    .map(|n| n as u16)
                    .collect(),
            ),
            _ => None,
        },
        ValueExpr::Map { map, .. } => {
            let set = match map {
                SetRef::Named(i) => t.sets.get(*i)?,
                SetRef::Anon(s) => s,
            };
            // (a named map may change at run time: its elements now, at least)
            set.elements
                .iter()
                .chain(set.catchall.iter())
                .map(|e| match &e.data {
                    Some(MapValue::Value(v)) => v.first().map(|n| *n as u16),
                    _ => None,
                })
                .collect()
        }
        _ => None,
    }
}

/// `synproxy` with connection tracking picking up mid-stream ACKs (`tcp_loose`, Linux's
/// default): a client's ACK then makes a new connection instead of being `ct state invalid`,
/// so it never reaches a `synproxy` written after `ct state invalid` and goes to the server,
/// which answers it with a reset. Linux's documentation says to turn `tcp_loose` off; the
/// warning names the first such rule.
fn synproxy_loose(rs: &weir_lang::ir::Ruleset, tcp_loose: bool) -> Option<String> {
    if !tcp_loose {
        return None;
    }
    rs.tables.iter().find_map(|t| {
        t.chains.iter().find_map(|c| {
            c.rules.iter().find_map(|r| {
                r.exprs
                    .iter()
                    .any(|e| e.is_or_chooses(&|e| matches!(e, weir_lang::ir::Expr::Synproxy(_))))
                    .then(|| {
                        format!(
                            "`{}` (table {} {}, chain {}): synproxy with [conntrack] tcp_loose = true: a client's ACK is taken for a new connection rather than `ct state invalid`, and may miss the proxy; set tcp_loose = false (Linux: nf_conntrack_tcp_loose=0)",
                            r.text,
                            t.family.name(),
                            t.name,
                            c.name
                        )
                    })
            })
        })
    })
}

/// In NFQUEUE mode the kernel routes a packet before weir sees it (at FORWARD, or INPUT for
/// the router's own addresses) and does not route it again after the verdict: a translated
/// destination would go where the old one went, and replies to a translated source would be
/// delivered to the router itself. So NAT is refused there, naming the first NAT rule; and
/// so are the statements that send packets of their own (`synproxy`, `dup`), which only the
/// router can route.
fn nat_in_nfqueue_mode(rs: &weir_lang::ir::Ruleset) -> Option<String> {
    use weir_lang::ir::Expr;
    /// What is refused: its name, which expressions are it, why.
    type Refused = (&'static str, fn(&Expr) -> bool, &'static str);
    let refused: [Refused; 5] = [
        (
            "synproxy",
            |e| matches!(e, Expr::Synproxy(_)),
            "the SYN proxy sends packets of its own and rewrites every packet of the connections it opens, which only a router does",
        ),
        (
            "tproxy",
            |e| matches!(e, Expr::Tproxy(_)),
            "the kernel gives the packet to its socket before it queues it to weir, so only the kernel's own tproxy can",
        ),
        (
            "IPsec state (meta ipsec, ipsec in|out, rt ipsec)",
            |e| {
                e.reads(&|f| {
                    matches!(f, weir_wire::Field::MetaIpsec | weir_wire::Field::MetaSecpath | weir_wire::Field::RtIpsec)
                        || f.name().starts_with("ipsec ")
                })
            },
            "the kernel decrypts IPsec and keeps each packet's security path, which NFQUEUE does not pass on",
        ),
        (
            "dup",
            |e| matches!(e, Expr::Dup(_)),
            "the copy is routed to its gateway and sent by the router, which only inline mode does",
        ),
        (
            "NAT",
            |e| matches!(e, Expr::Nat(_)),
            "the kernel routes packets before it queues them to weir and does not route them again, so translated packets would go astray",
        ),
    ];
    for t in &rs.tables {
        for c in &t.chains {
            for r in &c.rules {
                for (what, is, why) in &refused {
                    if r.exprs.iter().any(|e| e.is_or_chooses(is)) {
                        return Some(format!(
                            "error: {what} in nfqueue mode: `{}` (table {} {}, chain {}): {why}. Use mode = \"inline\" (weir routes), or the kernel's own {what} beside weir's filtering.\n",
                            r.text,
                            t.family.name(),
                            t.name,
                            c.name
                        ));
                    }
                }
            }
        }
    }
    None
}

fn engine(rs: &weir_lang::ir::Ruleset) -> Engine {
    Engine::new(Compiled::build(rs, EngineMode::Compiled))
}

/// The engines of `n` workers for a ruleset: each its own counters, sets and connections, all
/// one set of rate limiters and quotas (as the kernel's are one for all CPUs). A single
/// worker keeps them in its own state, without a lock.
pub fn engines(rs: &weir_lang::ir::Ruleset, n: usize) -> Vec<Engine> {
    let mut es: Vec<Engine> = (0..n).map(|_| engine(rs)).collect();
    if let (true, Some(first)) = (n > 1, es.first()) {
        let shared = weir_engine::eval::Shared::new(&first.rs);
        for e in &mut es {
            e.share(shared.clone());
        }
    }
    es
}

/// A worker's engine with its own connection table, and its own per-flow scripts.
fn stateful(eng: Engine, cfg: &Config) -> anyhow::Result<Stateful> {
    let mut sf = Stateful::new(
        eng,
        weir_conntrack::Config {
            max_entries: cfg.conntrack.max_entries,
            tcp_loose: cfg.conntrack.tcp_loose,
            ..weir_conntrack::Config::default()
        },
    );
    if let Some(s) = cfg.scripts()? {
        sf.set_flow_hook(Some(Box::new(s)));
    }
    sf.set_osf(cfg.osf_db()?);
    // the kernel's sockets (`socket` keys, `tproxy`): without sock_diag, none
    match crate::sockets::KernelSockets::open() {
        Ok(s) => sf.set_sockets(Some(std::sync::Arc::new(s))),
        Err(e) => tracing::warn!(error = %e, "sock_diag: socket and tproxy find no socket"),
    }
    Ok(sf)
}

fn state(idx: usize, sf: Stateful) -> State {
    State {
        idx,
        sf,
        counts: Default::default(),
        trace: None,
    }
}

/// What `weir run` is asked.
pub struct RunOptions {
    /// The configuration file.
    pub config: PathBuf,
    /// Print the kernel rules weir would install, and exit.
    pub print_kernel_rules: bool,
}

/// Run the dataplane until a signal stops it.
pub fn run(opts: RunOptions) -> anyhow::Result<()> {
    let (cfg, rules) = Config::read(&opts.config)?;
    let inline = cfg.mode == Mode::Inline;
    let listening = cfg.script_queues();
    let (session, rs) = match load_session(&rules, !inline, &listening) {
        Ok(x) => x,
        Err(e) => {
            eprint!("{e}");
            anyhow::bail!("{}: the ruleset has errors", rules.display());
        }
    };
    let workers = cfg.worker_count();
    let hooks = kernel::kernel_hooks(&engine(&rs));
    let router = if inline { Some(cfg.router()?) } else { None };
    // NFQUEUE mode: the netdev tables run in the kernel's nftables (refused here, before
    // anything starts, when they cannot be written back)
    let installing = !inline && cfg.nfqueue.install;
    if !inline {
        netdev::warn_unrun(&rs, installing);
    } else {
        netdev::warn_unbound(&rs, &cfg.interface_names());
        if let Some(w) = synproxy_loose(&rs, cfg.conntrack.tcp_loose) {
            tracing::warn!("{w}");
        }
    }
    let netdev_tables = if installing {
        netdev::render_ruleset(&rs, cfg.nfqueue.queue).map_err(|e| anyhow::anyhow!(e))?
    } else {
        Vec::new()
    };
    // a ruleset that only hands packets to scripts: the kernel queues only what they need
    let mut why_not_narrowed = None;
    let scope = if !inline && cfg.nfqueue.narrow && cfg.scripts.is_some() {
        match crate::scope::scripts_only(&rs) {
            Ok(()) => cfg.scripts()?.map(|s| s.scope()),
            Err(why) => {
                why_not_narrowed = Some(why);
                None
            }
        }
    } else {
        None
    };
    let narrowed = match (&scope, &why_not_narrowed) {
        (Some(_), _) => Some(
            "the ruleset only hands packets to scripts: the kernel queues only what their profiles can act on".to_string(),
        ),
        (None, Some(why)) => Some(format!(
            "the kernel queues every packet (the ruleset does more than hand packets to scripts: {why})"
        )),
        _ => None,
    };
    if opts.print_kernel_rules {
        let tproxy = weir_engine::stateful::tproxy::targets(&rs).unwrap_or_default();
        let cmds = if inline {
            let mut cmds = kernel::inline_kernel_rules(&cfg.interface_names(), true);
            if !tproxy.is_empty() {
                cmds.extend(kernel::tproxy_route(true));
            }
            cmds
        } else {
            if let Some(n) = &narrowed {
                println!("# {n}");
            }
            let mut cmds =
                kernel::kernel_rules(cfg.nfqueue.queue, workers, &hooks, scope.as_ref(), true);
            if !listening.is_empty() {
                cmds.extend(kernel::scripts_notrack(true));
            }
            cmds
        };
        for c in cmds {
            // as a shell reads it: arguments with spaces or shell characters quoted
            let words: Vec<String> = c
                .iter()
                .map(|a| {
                    if a.contains(|ch: char| ch.is_whitespace() || ";{}!*&|<>'\"$".contains(ch))
                        && a != "!"
                    {
                        format!("'{}'", a.replace('\'', "'\\''"))
                    } else {
                        a.clone()
                    }
                })
                .collect();
            println!("{}", words.join(" "));
        }
        if inline && !tproxy.is_empty() {
            println!("nft -f - <<'EOF'");
            print!("{}", kernel::tproxy_table(&tproxy));
            println!("EOF");
        }
        if !netdev_tables.is_empty() {
            println!("nft -f - <<'EOF'");
            for l in netdev::script(&[], &netdev_tables) {
                println!("{}", l.text);
            }
            println!("EOF");
        }
        return Ok(());
    }
    install_signals();
    // every queue bound first (errors before anything starts), then the kernel rules: no
    // packet is queued before weir listens
    let (ws, _turnarounds) = match router {
        Some(router) => inline_workers(&cfg, &rs, router)?,
        None => (nfqueue_workers(&cfg, &rs)?, Vec::new()),
    };
    // the netdev tables before the queueing rules: a refusal leaves nothing to undo
    let netdev = if installing {
        Some(netdev::Installed::start(cfg.nfqueue.queue, &netdev_tables)?)
    } else {
        None
    };
    let _kernel = if inline {
        let names = cfg.interface_names();
        // (weir's tproxy table and route, installed by `apply_tproxy` when the ruleset has
        // targets, go with the rest)
        let mut del = kernel::inline_kernel_rules(&names, false);
        del.extend(kernel::tproxy_route(false));
        del.push(
            ["nft", "delete", "table", "inet", "weir_tproxy"]
                .map(String::from)
                .to_vec(),
        );
        let k = kernel::install(kernel::inline_kernel_rules(&names, true), del)?;
        let targets = weir_engine::stateful::tproxy::targets(&rs).unwrap_or_default();
        if !targets.is_empty() {
            kernel::apply_tproxy(&targets)?;
        }
        Some(k)
    } else if cfg.nfqueue.install {
        let q = cfg.nfqueue.queue;
        let scripts = !listening.is_empty();
        let with_notrack = |mut cmds: Vec<Vec<String>>, add: bool| {
            if scripts {
                cmds.extend(kernel::scripts_notrack(add));
            }
            cmds
        };
        Some(kernel::install(
            with_notrack(
                kernel::kernel_rules(q, workers, &hooks, scope.as_ref(), true),
                true,
            ),
            with_notrack(
                kernel::kernel_rules(q, workers, &hooks, scope.as_ref(), false),
                false,
            ),
        )?)
    } else {
        None
    };
    let (ctl_tx, ctl_rx) = mpsc::channel::<CtlRequest>();
    if let Some(p) = &cfg.control.socket {
        control::serve_socket(p.clone(), ctl_tx.clone())?;
    }
    if !cfg.metrics.address.is_empty() {
        control::metrics::serve(&cfg.metrics.address, ctl_tx)?;
    }
    let mut senders = Vec::new();
    let mut threads = Vec::new();
    for w in ws {
        let (tx, rx) = mpsc::channel::<Msg>();
        senders.push(tx);
        threads.push(
            std::thread::Builder::new()
                .name(format!("weir-worker-{}", w.state.idx))
                .spawn(move || w.run(rx))
                .context("starting a worker thread")?,
        );
    }
    let mut d = Dispatcher {
        workers: senders,
        rules,
        session,
        ruleset: rs.clone(),
        reloads: 0,
        reload_errors: 0,
        started: Instant::now(),
        cpu0: cpu_seconds(),
        nfqueue: !inline,
        tproxy: weir_engine::stateful::tproxy::targets(&rs).unwrap_or_default(),
        queued_hooks: (!inline && cfg.nfqueue.install).then(|| hooks.clone()),
        listening,
        netdev,
        narrowed: scope.is_some(),
        ports: if inline {
            cfg.interface_names()
        } else {
            Vec::new()
        },
    };
    if let Some(n) = &narrowed {
        println!("weir run: {n}");
    }
    println!(
        "weir run: {} {} ({} worker{}; {}), ruleset {}; ready",
        cfg.mode.name(),
        if inline {
            cfg.interface_names().join(" ")
        } else if workers > 1 {
            format!("{}-{}", cfg.nfqueue.queue, cfg.nfqueue.queue + workers - 1)
        } else {
            cfg.nfqueue.queue.to_string()
        },
        workers,
        if workers > 1 { "s" } else { "" },
        hooks.join(", "),
        d.rules.display()
    );
    let _ = std::io::stdout().flush();
    crate::notify::ready();
    tracing::info!(mode = cfg.mode.name(), workers, "ready");
    while !STOP.load(Ordering::Relaxed) {
        if RELOAD.swap(false, Ordering::Relaxed) {
            crate::notify::reloading();
            let r = d.reload();
            if r.starts_with("error") {
                eprint!("{r}");
            } else {
                print!("{r}");
            }
            crate::notify::ready();
        }
        match ctl_rx.recv_timeout(std::time::Duration::from_millis(100)) {
            Ok((w, reply)) => d.dispatch(w, reply),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                std::thread::sleep(std::time::Duration::from_millis(100))
            }
        }
    }
    crate::notify::stopping();
    let process = d.process();
    let mut stats: Vec<WorkerStats> = Vec::new();
    let mut report = process.status_head();
    for t in threads {
        match t.join() {
            Ok(s) => {
                report.push_str(&s.status_line());
                stats.push(s);
            }
            Err(_) => report.push_str("a worker panicked\n"),
        }
    }
    if let Some(sc) = &WorkerStats::sum(&stats).scripts {
        report.push_str(&sc.status_lines());
    }
    report.push_str(&process.per_packet(stats.iter().map(|s| s.counts.packets).sum()));
    eprint!("{report}");
    if let Some(p) = &cfg.control.socket {
        let _ = std::fs::remove_file(p);
    }
    // the kernel's netdev tables go with weir
    drop(d);
    Ok(())
}

/// One worker per NFQUEUE queue.
fn nfqueue_workers(cfg: &Config, rs: &weir_lang::ir::Ruleset) -> anyhow::Result<Vec<Worker>> {
    let workers = cfg.worker_count();
    let icmp_peers = Arc::new(Mutex::new(weir_router::ratelimit::PeerLimit::default()));
    // the kernel routes: its tables answer `fib` (without them, no route is found)
    let fib = match crate::kernel_fib::KernelFib::start() {
        Ok(f) => Some(f as Arc<dyn weir_engine::Fib>),
        Err(e) => {
            tracing::warn!("the kernel's routes not read (fib finds no route): {e}");
            None
        }
    };
    let mut ws = Vec::new();
    let expects = Arc::new(weir_conntrack::SharedExpectations::default());
    for (i, eng) in (0..workers).zip(engines(rs, workers as usize)) {
        let mut sf = stateful(eng, cfg)?;
        sf.set_fib(fib.clone());
        if workers > 1 {
            // (the kernel balances the queues by the packet's own tuple: an expected
            // connection may reach another worker than its master's)
            sf.ct_mut().share_expectations(expects.clone(), i as u32);
        }
        let copy = copy_range(cfg.nfqueue.copy, &sf);
        let queue = Queue::open(
            cfg.nfqueue.queue + i,
            &nfqueue::Options {
                max_len: cfg.nfqueue.max_len,
                fail_open: cfg.nfqueue.fail_open,
                batch: cfg.nfqueue.batch,
                copy_range: copy,
            },
        )?;
        ws.push(Worker {
            state: state(i as usize, sf),
            io: Io::Nfq(Box::new(Nfq {
                queue,
                ifs: IfNames::default(),
                copy_mode: cfg.nfqueue.copy,
                copy,
                answers: Answers::new(weir_router::IcmpLimits::new(
                    workers,
                    Arc::clone(&icmp_peers),
                )),
            })),
        });
    }
    Ok(ws)
}

/// The inline workers: their ports (AF_XDP or AF_PACKET, a fanout or a queue each with
/// several workers), each a copy of the router; and, with local delivery, the programs on
/// the interfaces that turn the frames weir hands to the kernel around (kept while weir
/// runs).
fn inline_workers(
    cfg: &Config,
    rs: &weir_lang::ir::Ruleset,
    mut router: weir_router::Router,
) -> anyhow::Result<(Vec<Worker>, Vec<weir_io::inject::Turnaround>)> {
    kernel::check_kernel_not_forwarding()?;
    let n = cfg.worker_count();
    // per worker, its ports (and in AF_XDP mode the ARP side sockets)
    let mut links: Vec<(Vec<Link>, Vec<Option<weir_io::afpacket::Port>>)> = Vec::new();
    if n == 1 {
        let mut ports = Vec::new();
        let mut arp = Vec::new();
        for i in &cfg.interface {
            let l = Link::open(&i.name, cfg.io, cfg.nfqueue.batch)?;
            arp.push(match l {
                Link::Xdp(_) => Some(weir_io::afpacket::Port::open(&i.name, 64)?),
                Link::Packet(_) => None,
            });
            ports.push(l);
        }
        links.push((ports, arp));
    } else if let Some(xdp) = xdp_workers(cfg, n)? {
        links = xdp;
    } else {
        let prog = weir_io::steer::program();
        links.resize_with(n as usize, || (Vec::new(), Vec::new()));
        // the sockets of an interface join its group in worker order: member w is worker w
        for i in &cfg.interface {
            let mut group = None;
            for (ports, arp) in links.iter_mut() {
                let p = crate::workers::links::open_ring(&i.name)?;
                group = Some(p.join_fanout(group, &prog)?);
                ports.push(Link::Packet(Box::new(p)));
                arp.push(None);
            }
        }
    }
    // weir's own frames are marked (a monitor of what the kernel sends skips them), and its
    // AF_PACKET ports skip what it hands back to the kernel
    // and what they send goes straight to the driver, as AF_XDP's does, unless the
    // interface says `qdisc = true` (tc shaping, taps such as tcpdump)
    for (ports, arp) in &links {
        for (p, i) in ports.iter().zip(&cfg.interface) {
            if let Link::Packet(p) = p {
                p.set_mark(weir_io::afpacket::TX_MARK)?;
                p.take_outgoing(weir_io::inject::INJECT_MARK, false)?;
                p.bypass_qdisc(!i.qdisc)?;
            }
        }
        for a in arp.iter().flatten() {
            a.set_mark(weir_io::afpacket::TX_MARK)?;
        }
    }
    let generic = links
        .iter()
        .flat_map(|(p, _)| p)
        .find(|l| matches!(l, Link::Xdp(x) if x.program.mode == "generic"));
    let mut turnarounds = Vec::new();
    if cfg.local_delivery {
        if let Some(g) = generic {
            // (a frame handed back would enter generic XDP again and come back to weir)
            tracing::warn!(interface = g.name(), "XDP in generic mode: packets for the router cannot be handed to the kernel; local delivery is off");
        } else {
            for i in &cfg.interface {
                match weir_io::inject::Turnaround::attach(&i.name) {
                    Ok(t) => turnarounds.push(t),
                    Err(e) => {
                        tracing::warn!(interface = %i.name, error = %e, "local delivery is off");
                        turnarounds.clear();
                        break;
                    }
                }
            }
        }
    }
    let local = cfg.local_delivery && turnarounds.len() == cfg.interface.len();
    router.set_local_delivery(local);
    if local {
        // an AF_PACKET port's own socket also reads what the kernel sends from it (an AF_XDP
        // port needs a monitor socket for that)
        for l in links.iter().flat_map(|(p, _)| p) {
            if let Link::Packet(p) = l {
                p.take_outgoing(weir_io::inject::INJECT_MARK, true)?;
            }
        }
    }
    let shared = (n > 1).then(|| Arc::new(weir_router::SharedNeighbours::default()));
    let xdp_steer = links
        .first()
        .is_some_and(|(p, _)| p.iter().any(|l| matches!(l, Link::Xdp(_))));
    let mut hands = if n > 1 {
        Handoff::group(n as usize)?
    } else {
        Vec::new()
    }
    .into_iter()
    .map(|mut h| {
        // AF_XDP: the queue does not follow the connection, every frame is steered here
        h.all = xdp_steer;
        h
    });
    let mtus = cfg
        .interface
        .iter()
        .map(|i| weir_io::afpacket::mtu(&i.name))
        .collect::<std::io::Result<Vec<_>>>()?;
    let engs = engines(rs, links.len());
    let expects = Arc::new(weir_conntrack::SharedExpectations::default());
    let icmp_peers = Arc::new(Mutex::new(weir_router::ratelimit::PeerLimit::default()));
    let mut ws = Vec::new();
    for ((w, (ports, arp)), eng) in links.into_iter().enumerate().zip(engs) {
        let mut router = router.clone();
        for (pi, l) in ports.iter().enumerate() {
            router.set_mac(pi, l.mac());
            router.set_mtu(pi, mtus[pi]);
        }
        if let Some(sh) = &shared {
            router.neighbours_mut().share(sh.clone());
        }
        router.icmp = weir_router::IcmpLimits::new(n, Arc::clone(&icmp_peers));
        let mut sf = stateful(eng, cfg)?;
        if n > 1 {
            sf.set_steer(Some((n as u32, w as u32)));
            // (a connection is steered by its own tuple: an expected one may reach another
            // worker than its master's)
            sf.ct_mut().share_expectations(expects.clone(), w as u32);
        }
        let mut inject = Vec::new();
        let mut monitor = Vec::new();
        for i in &cfg.interface {
            inject.push(if local {
                Some(weir_io::inject::Injector::open(&i.name)?)
            } else {
                None
            });
            monitor.push(
                if local && w == 0 && matches!(ports[monitor.len()], Link::Xdp(_)) {
                    Some(weir_io::afpacket::Port::open_monitor(
                        &i.name,
                        64,
                        weir_io::inject::INJECT_MARK,
                    )?)
                } else {
                    None
                },
            );
        }
        ws.push(Worker {
            state: state(w, sf),
            io: Io::Inline(Box::new(Inline {
                ports,
                arp,
                router,
                fwd: Vec::new(),
                rx_csum: cfg
                    .interface
                    .iter()
                    .map(|i| crate::workers::links::rx_checksums(&i.name))
                    .collect(),
                ports_names: cfg.interface_names(),
                mtu_read: now_ns(),
                held: Held::default(),
                polled: 0,
                fds: Vec::new(),
                handoff: hands.next(),
                inject,
                inject_tproxy: Vec::new(),
                monitor,
            })),
        });
    }
    Ok((ws, turnarounds))
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_engine::Meta;
    use weir_lang::ir::Hook;
    use weir_wire::{LinkType, PacketMeta};

    /// A ruleset with `queue` to a queue no `[[scripts.profile]]` listens on is refused,
    /// naming the rule and the queue (its packets would be dropped); with `bypass`, or with
    /// every queue of its range listened on, it loads.
    #[test]
    fn queue_nobody_listens_on_is_refused_naming_the_rule() {
        let dir = std::env::temp_dir().join(format!("weir-queue-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("q.nft");
        let text = "table inet z {\n chain post {\n  type filter hook postrouting priority 101\n  tcp dport 443 queue num 200-201\n }\n}\n";
        std::fs::write(&p, text).unwrap();
        let none = std::collections::BTreeSet::new();
        let e = load(&p, true, &none).unwrap_err();
        assert!(
            e.contains("tcp dport 443 queue num 200-201")
                && e.contains("inet z, chain post")
                && e.contains("listens on queue 200"),
            "{e}"
        );
        let one: std::collections::BTreeSet<u16> = [200].into();
        let e = load(&p, true, &one).unwrap_err();
        assert!(e.contains("listens on queue 201"), "{e}");
        let both: std::collections::BTreeSet<u16> = [200, 201].into();
        assert!(load(&p, true, &both).is_ok());
        std::fs::write(&p, text.replace("queue num 200-201", "queue num 7 bypass")).unwrap();
        assert!(
            load(&p, true, &none).is_ok(),
            "bypass: accepted when nobody listens"
        );
        // a queue computed per packet: every queue it can give is checked
        let two: std::collections::BTreeSet<u16> = [200, 201].into();
        for (q, ok, missing) in [
            ("queue to symhash mod 2 offset 200", true, ""),
            (
                "queue to symhash mod 3 offset 200",
                false,
                "listens on queue 202",
            ),
            ("queue to tcp sport map { 1 : 200, 2 : 201 }", true, ""),
            (
                "queue to tcp sport map { 1 : 200, 2 : 9 }",
                false,
                "listens on queue 9",
            ),
            (
                "queue to jhash ip saddr mod 65536",
                false,
                "listens on queue 0",
            ),
            ("queue flags bypass to jhash ip saddr mod 65536", true, ""),
        ] {
            std::fs::write(&p, text.replace("queue num 200-201", q)).unwrap();
            match load(&p, true, &two) {
                Ok(_) => assert!(ok, "{q}: loaded"),
                Err(e) => assert!(!ok && e.contains(missing), "{q}: {e}"),
            }
        }
        std::fs::remove_dir_all(&dir).ok();
    }

    /// `meta cgroup` is refused, naming the rule and the mount, where a net_cls hierarchy
    /// is mounted (class ids weir cannot learn); without one it loads.
    #[test]
    fn meta_cgroup_is_refused_with_net_cls_mounted() {
        let (rs, _) = weir_lang::load_str(
            "t.nft",
            "table inet t { chain c { type filter hook output priority 0; meta cgroup 1048577 accept; } }",
        )
        .unwrap();
        assert!(rs.refuse_unevaluated().is_ok());
        assert!(cgroup_classids(&rs, &[]).is_none());
        let e = cgroup_classids(&rs, &["/sys/fs/cgroup/net_cls".to_string()]).unwrap();
        assert!(
            e.contains("meta cgroup 1048577 accept") && e.contains("/sys/fs/cgroup/net_cls"),
            "{e}"
        );
        let (other, _) = weir_lang::load_str(
            "t.nft",
            "table inet t { chain c { type filter hook output priority 0; meta mark 1 accept; } }",
        )
        .unwrap();
        assert!(cgroup_classids(&other, &["/x".to_string()]).is_none());
    }

    /// `synproxy` with `tcp_loose` on is warned about, naming the rule; off, or without
    /// `synproxy`, it is not.
    #[test]
    fn synproxy_with_tcp_loose_is_warned_about() {
        let (rs, _) = weir_lang::load_str(
            "t.nft",
            "table inet sp { chain fwd { type filter hook forward priority 0;
               tcp dport 80 ct state invalid,untracked synproxy mss 1460 } }",
        )
        .unwrap();
        let w = synproxy_loose(&rs, true).expect("a warning");
        assert!(
            w.contains("tcp dport 80")
                && w.contains("inet sp, chain fwd")
                && w.contains("tcp_loose = false"),
            "{w}"
        );
        assert_eq!(synproxy_loose(&rs, false), None);
        let (rs, _) = weir_lang::load_str(
            "t.nft",
            "table inet sp { chain fwd { type filter hook forward priority 0; accept } }",
        )
        .unwrap();
        assert_eq!(synproxy_loose(&rs, true), None);
    }

    /// The workers' engines (`engines`, also what a reload sends them) admit what one
    /// `limit` admits between them, not once each.
    #[test]
    fn workers_share_one_limit() {
        let (rs, _) = weir_lang::load_str(
            "t.nft",
            "table ip f { chain fwd { type filter hook forward priority 0; policy accept;
               limit rate over 1/second burst 2 packets drop } }",
        )
        .unwrap();
        let f = weir_wire::build::udp4(
            "198.18.0.1".parse().unwrap(),
            "198.19.0.1".parse().unwrap(),
            1000,
            53,
            b"x",
        );
        let pm = PacketMeta::parse(&f, LinkType::Ethernet);
        let mut es = engines(&rs, 2);
        let passed = (0..8)
            .filter(|i| {
                let mut p = weir_engine::Pkt {
                    conns: None,
                    frame: &f,
                    pm: &pm,
                    meta: &mut Meta::default(),
                    now_ns: 0,
                };
                es[i % 2].process(Hook::Forward, &mut p).is_accept()
            })
            .count();
        assert_eq!(passed, 2);
    }
}
