//! `weir run --config FILE`: the live dataplane, and `weir ctl`: its control socket.
//!
//! Mode `nfqueue` (the one built so far): the kernel routes and forwards; a rule in weir's own
//! iptables chain queues the packets of the hooks the ruleset uses to an NFQUEUE queue, and
//! weir runs each through its stateful engine (its own connection tracking, the ruleset's
//! base chains of the hooks the packet crosses) and answers with a verdict, and the rewritten
//! packet when NAT or a header write changed it. Verdicts are batched (one `send` per
//! received batch); the queue fails open when full, and the kernel rule bypasses the queue
//! (accepts) while weir is not bound to it.
//!
//! SIGHUP or `weir ctl reload` loads the ruleset file again, all or nothing: a file with
//! errors is refused (the errors are printed and returned) and the running ruleset stays.
//! Connection tracking, named counters and packet-path set elements survive a reload.
//! SIGINT/SIGTERM end weir cleanly: the kernel rules it installed are removed.

use anyhow::Context;
use serde::Deserialize;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Instant;
use weir_engine::stateful::{PacketCt, Stateful};
use weir_engine::{Compiled, Decision, DropReason, Engine, Meta, Mode};
use weir_io::nfqueue::{self, Queue, Verdict};
use weir_lang::ir::Hook;
use weir_router::{Fate, IcmpAnswer, Port, PortAddr, Reason, Route, Router, Routes, Rx};
use weir_wire::{Addr, LinkType, Mac, PacketMeta};

#[derive(clap::Args)]
pub struct RunArgs {
    /// The configuration file (TOML; see README "Running weir").
    #[arg(long)]
    config: PathBuf,
    /// Print the kernel rules weir installs for the configuration, and exit.
    #[arg(long)]
    print_kernel_rules: bool,
}

#[derive(clap::Args)]
pub struct CtlArgs {
    /// The control socket (the `control.socket` of the configuration).
    #[arg(long, default_value = "/run/weir.sock")]
    socket: PathBuf,
    /// status | reload | counters | ct count | ct list [N] | ct flush
    #[arg(required = true, num_args = 1..)]
    command: Vec<String>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct Config {
    /// The ruleset file (relative to the configuration file).
    ruleset: PathBuf,
    /// `nfqueue` (the kernel forwards, weir gives verdicts).
    mode: String,
    #[serde(default)]
    nfqueue: NfqConfig,
    #[serde(default)]
    control: ControlConfig,
    #[serde(default)]
    conntrack: CtConfig,
    #[serde(default)]
    metrics: MetricsConfig,
    /// Inline mode: the interfaces weir forwards between.
    #[serde(default)]
    interface: Vec<IfaceConfig>,
    /// Inline mode: the routing table.
    #[serde(default)]
    route: Vec<RouteConfig>,
    /// Inline mode: next hops' MAC addresses.
    #[serde(default)]
    neighbour: Vec<NeighConfig>,
    /// Inline mode: how frames are read and written: `auto` (AF_XDP where the kernel allows
    /// it, AF_PACKET otherwise), `xdp` or `afpacket`.
    #[serde(default = "default_io")]
    io: String,
    /// Inline mode: worker threads (one per core). With more than one, each interface is
    /// read by an AF_PACKET fanout group whose BPF program sends both directions of a
    /// connection to the same worker.
    #[serde(default = "one")]
    workers: u16,
}

fn one() -> u16 {
    1
}

fn default_io() -> String {
    "auto".into()
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct IfaceConfig {
    name: String,
    /// The router's own addresses on it (packets to them are the kernel's; masquerade uses
    /// the first).
    #[serde(default)]
    address: Vec<String>,
    /// Reverse path filtering of the packets arriving on it (Linux's `rp_filter`).
    #[serde(default)]
    rp_filter: RpFilter,
}

/// Reverse path filtering (anti-spoofing, BCP 38), as Linux's `rp_filter` sysctl: `strict`
/// (1): a packet's source must be routed back out of the interface it came in on; `loose`
/// (2): its source must have a route at all; `off` (0, the default). See
/// [`weir_router::RpFilter`].
#[derive(Deserialize, Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RpFilter {
    #[default]
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

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct RouteConfig {
    prefix: String,
    interface: String,
    /// The next hop (absent: the destination is on the link).
    via: Option<String>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct NeighConfig {
    address: String,
    mac: String,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, default)]
struct MetricsConfig {
    /// Where Prometheus scrapes `/metrics` ("" turns it off).
    address: String,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            address: "127.0.0.1:9560".into(),
        }
    }
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, default)]
struct NfqConfig {
    queue: u16,
    /// Worker threads, one queue each (`queue` .. `queue + workers - 1`); the kernel spreads
    /// connections over them by address (`--queue-balance`: both directions of a connection
    /// reach the same worker).
    workers: u16,
    /// Install (and remove at exit) the iptables rules that queue the packets.
    install: bool,
    fail_open: bool,
    max_len: u32,
    batch: usize,
    /// `auto` (headers only unless the ruleset rewrites packets), `headers` or `packet`.
    copy: String,
}

impl Default for NfqConfig {
    fn default() -> Self {
        NfqConfig {
            queue: 0,
            workers: 1,
            install: true,
            fail_open: true,
            max_len: 4096,
            batch: 64,
            copy: "auto".into(),
        }
    }
}

#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields, default)]
struct ControlConfig {
    socket: Option<PathBuf>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, default)]
struct CtConfig {
    max_entries: usize,
}

impl Default for CtConfig {
    fn default() -> Self {
        CtConfig {
            max_entries: 262_144,
        }
    }
}

static STOP: AtomicBool = AtomicBool::new(false);
static RELOAD: AtomicBool = AtomicBool::new(false);

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

fn read_config(path: &Path) -> anyhow::Result<(Config, PathBuf)> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the configuration {}", path.display()))?;
    let cfg: Config =
        toml::from_str(&text).with_context(|| format!("configuration {}", path.display()))?;
    anyhow::ensure!(
        cfg.mode == "nfqueue" || cfg.mode == "inline",
        "{}: mode '{}': \"nfqueue\" (the kernel forwards) or \"inline\" (weir forwards, AF_PACKET)",
        path.display(),
        cfg.mode
    );
    let base = path.parent().unwrap_or(Path::new("."));
    let rules = base.join(&cfg.ruleset);
    Ok((cfg, rules))
}

/// Load and check the ruleset; the errors as text.
fn load(path: &Path, nfqueue: bool) -> Result<weir_lang::ir::Ruleset, String> {
    let rs = match weir_lang::load_file(path) {
        Ok((rs, _)) => rs,
        Err((sources, diags)) => return Err(weir_lang::diag::render_all(&diags, &sources)),
    };
    if nfqueue {
        if let Some(e) = nat_in_nfqueue_mode(&rs) {
            return Err(e);
        }
    }
    Ok(rs)
}

/// In NFQUEUE mode the kernel routes a packet before weir sees it (at FORWARD, or INPUT for
/// the router's own addresses) and does not route it again after the verdict: a translated
/// destination would go where the old one went, and replies to a translated source would be
/// delivered to the router itself. So NAT is refused there, naming the first NAT rule.
fn nat_in_nfqueue_mode(rs: &weir_lang::ir::Ruleset) -> Option<String> {
    for t in &rs.tables {
        for c in &t.chains {
            for r in &c.rules {
                if r.exprs
                    .iter()
                    .any(|e| matches!(e, weir_lang::ir::Expr::Nat(_)))
                {
                    return Some(format!(
                        "error: NAT in nfqueue mode: `{}` (table {} {}, chain {}): the kernel routes packets before it queues them to weir and does not route them again, so translated packets would go astray. Use mode = \"inline\" (weir routes), or the kernel's own NAT beside weir's filtering.\n",
                        r.text,
                        t.family.name(),
                        t.name,
                        c.name
                    ));
                }
            }
        }
    }
    None
}

/// A worker's engine with its own connection table.
fn stateful(eng: Engine, cfg: &Config) -> Stateful {
    Stateful::new(
        eng,
        weir_conntrack::Config {
            max_entries: cfg.conntrack.max_entries,
            ..weir_conntrack::Config::default()
        },
    )
}

fn engine(rs: &weir_lang::ir::Ruleset) -> Engine {
    Engine::new(Compiled::build(rs, Mode::Compiled))
}

/// The engines of `n` workers for a ruleset: each its own counters, sets and connections, all
/// one set of rate limiters and quotas (as the kernel's are one for all CPUs). A single
/// worker keeps them in its own state, without a lock.
fn engines(rs: &weir_lang::ir::Ruleset, n: usize) -> Vec<Engine> {
    let mut es: Vec<Engine> = (0..n).map(|_| engine(rs)).collect();
    if let (true, Some(first)) = (n > 1, es.first()) {
        let shared = weir_engine::eval::Shared::new(&first.rs);
        for e in &mut es {
            e.share(shared.clone());
        }
    }
    es
}

/// Bytes of a queued packet copied to weir when only its headers are read: IPv4 or IPv6 with
/// extension headers and a TCP header with options fit.
const HEADER_COPY: u16 = 256;

/// Whether the ruleset may change packets (NAT, header writes): then weir needs them whole.
fn rewrites(sf: &Stateful) -> bool {
    sf.nat_v4
        || sf.nat_v6
        || sf.eng.rs.tables.iter().any(|t| {
            t.ir.chains.iter().any(|c| {
                c.rules.iter().any(|r| {
                    r.exprs
                        .iter()
                        .any(|e| matches!(e, weir_lang::ir::Expr::Assign { .. }))
                })
            })
        })
}

fn copy_range(mode: &str, sf: &Stateful) -> u16 {
    match mode {
        "packet" => 0xffff,
        "headers" if !rewrites(sf) => HEADER_COPY,
        "auto" if !rewrites(sf) => HEADER_COPY,
        _ => 0xffff,
    }
}

/// The iptables chain weir owns.
fn chain_name(q: u16) -> String {
    format!("WEIR-NFQ{q}")
}

/// The iptables hooks to queue: forwarded packets always, input and output when the ruleset
/// has base chains there.
fn kernel_hooks(eng: &Engine) -> Vec<&'static str> {
    let mut v = vec!["FORWARD"];
    if !eng.rs.hooks[Hook::Input as usize].is_empty() {
        v.push("INPUT");
    }
    if !eng.rs.hooks[Hook::Output as usize].is_empty() {
        v.push("OUTPUT");
    }
    v
}

/// An iptables command line: the tool, `-w`, the table options, the rest.
fn ipt(tool: &str, table: &[&str], args: &[&str]) -> Vec<String> {
    std::iter::once(tool)
        .chain(["-w"])
        .chain(table.iter().copied())
        .chain(args.iter().copied())
        .map(String::from)
        .collect()
}

/// The match that keeps weir's own answers (sent with [`weir_io::raw::ANSWER_MARK`], already
/// through weir's output hook) out of its queue at the output hook.
fn skip_answers(hook: &str) -> &'static [&'static str] {
    if hook == "OUTPUT" {
        &["-m", "mark", "!", "--mark", "0x77656972"]
    } else {
        &[]
    }
}

/// The commands that install (`add`) or remove the queueing rules.
fn kernel_rules(q: u16, workers: u16, hooks: &[&str], add: bool) -> Vec<Vec<String>> {
    let chain = chain_name(q);
    let mut cmds = Vec::new();
    for tool in ["iptables", "ip6tables"] {
        let c = |args: &[&str]| ipt(tool, &[], args);
        if add {
            cmds.push(c(&["-N", &chain]));
            let (opt, qs) = if workers > 1 {
                ("--queue-balance", format!("{q}:{}", q + workers - 1))
            } else {
                ("--queue-num", q.to_string())
            };
            cmds.push(c(&[
                "-A",
                &chain,
                "-j",
                "NFQUEUE",
                opt,
                &qs,
                "--queue-bypass",
            ]));
            for h in hooks {
                cmds.push(c(
                    &[&["-I", h, "1"], skip_answers(h), &["-j", &chain]].concat()
                ));
            }
        } else {
            for h in hooks {
                cmds.push(c(&[&["-D", h], skip_answers(h), &["-j", &chain]].concat()));
            }
            cmds.push(c(&["-F", &chain]));
            cmds.push(c(&["-X", &chain]));
        }
    }
    cmds
}

/// Inline mode: the kernel keeps ARP and neighbour discovery on weir's interfaces but leaves
/// their IP traffic to weir (AF_PACKET reads frames before netfilter; the kernel's `raw`
/// table drops its own copy, so it neither answers nor resets what weir forwards).
fn inline_kernel_rules(ifaces: &[String], add: bool) -> Vec<Vec<String>> {
    let chain = "WEIR-INLINE";
    let mut cmds = Vec::new();
    for tool in ["iptables", "ip6tables"] {
        let c = |args: &[&str]| ipt(tool, &["-t", "raw"], args);
        if add {
            cmds.push(c(&["-N", chain]));
            if tool == "ip6tables" {
                for nd in ["neighbour-solicitation", "neighbour-advertisement"] {
                    cmds.push(c(&[
                        "-A",
                        chain,
                        "-p",
                        "icmpv6",
                        "--icmpv6-type",
                        nd,
                        "-j",
                        "RETURN",
                    ]));
                }
            }
            cmds.push(c(&["-A", chain, "-j", "DROP"]));
            for i in ifaces {
                cmds.push(c(&["-I", "PREROUTING", "1", "-i", i, "-j", chain]));
            }
        } else {
            for i in ifaces {
                cmds.push(c(&["-D", "PREROUTING", "-i", i, "-j", chain]));
            }
            cmds.push(c(&["-F", chain]));
            cmds.push(c(&["-X", chain]));
        }
    }
    cmds
}

/// Removes the installed kernel rules when dropped.
struct KernelRules {
    cmds: Vec<Vec<String>>,
}

impl Drop for KernelRules {
    fn drop(&mut self) {
        for c in &self.cmds {
            let _ = Command::new(&c[0]).args(&c[1..]).output();
        }
    }
}

fn install(add: Vec<Vec<String>>, del: Vec<Vec<String>>) -> anyhow::Result<KernelRules> {
    // remove leftovers of a weir that did not exit cleanly
    drop(KernelRules { cmds: del.clone() });
    let guard = KernelRules { cmds: del };
    for c in add {
        let out = Command::new(&c[0])
            .args(&c[1..])
            .output()
            .with_context(|| format!("running {} (is iptables installed?)", c[0]))?;
        anyhow::ensure!(
            out.status.success(),
            "{}: {}",
            c.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(guard)
}

/// Interface names by index, as the engine's packed name values (cached per index).
#[derive(Default)]
struct IfNames(HashMap<u32, u128>);

impl IfNames {
    fn value(&mut self, idx: u32) -> u128 {
        if idx == 0 {
            return 0;
        }
        *self.0.entry(idx).or_insert_with(|| {
            let name = Self::lookup(idx);
            if name.is_empty() {
                0
            } else {
                weir_wire::field::ifname_value(&name)
            }
        })
    }

    fn lookup(idx: u32) -> String {
        {
            let mut buf = [0 as libc::c_char; libc::IF_NAMESIZE];
            // SAFETY: if_indextoname writes at most IF_NAMESIZE bytes into `buf`.
            let p = unsafe { libc::if_indextoname(idx, buf.as_mut_ptr()) };
            if p.is_null() {
                return String::new();
            }
            // SAFETY: on success the buffer holds a NUL-terminated name.
            unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
                .to_string_lossy()
                .into_owned()
        }
    }
}

#[derive(Default)]
struct Counts {
    packets: u64,
    accepted: u64,
    rewritten: u64,
    dropped: HashMap<&'static str, u64>,
    /// Inline mode: ICMP errors sent to senders (TTL exceeded, no route), and those the rate
    /// limit held back.
    icmp_errors: u64,
    icmp_limited: u64,
    /// TCP resets sent for `reject with tcp reset`.
    resets: u64,
    /// NFQUEUE mode: answers to rejected packets that could not be sent.
    answers_failed: u64,
    /// Inline mode: packets forwarded in fragments (larger than the output link's MTU).
    fragmented: u64,
}

fn reason(r: DropReason) -> &'static str {
    match r {
        DropReason::Rule(_) => "rule",
        DropReason::Reject(_) => "reject",
        DropReason::Policy(..) => "policy",
        DropReason::Malformed(_) => "malformed",
        DropReason::Fragment => "fragment",
        DropReason::CtRefused => "ct-refused",
    }
}

fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime fills the live timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CPU time of this process (user, system), in seconds.
fn cpu_seconds() -> (f64, f64) {
    // SAFETY: getrusage fills the zeroed rusage struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_SELF and a live struct.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    (t(ru.ru_utime), t(ru.ru_stime))
}

/// One queued packet through weir, in place: the verdict, whether weir changed the bytes, and
/// for a rejected packet the answer weir sends its sender.
fn process(
    sf: &mut Stateful,
    p: &nfqueue::Packet,
    buf: &mut [u8],
    ifs: &mut IfNames,
    now: u64,
) -> (Decision, bool, Option<NfqAnswer>) {
    let writes = sf.stats.nat_rewritten + sf.stats.header_writes;
    let wire = p.cap_len.map_or(buf.len(), |c| c as usize);
    let mut pm = PacketMeta::parse_captured(buf, LinkType::RawIp, wire);
    let (iif, oif) = (ifs.value(p.indev), ifs.value(p.outdev));
    let hooks: &[Hook] = match p.hook {
        0 => &[Hook::Prerouting],
        1 => &[Hook::Prerouting, Hook::Input],
        2 => &[Hook::Prerouting, Hook::Forward, Hook::Postrouting],
        3 => &[Hook::Output, Hook::Postrouting],
        _ => &[Hook::Postrouting],
    };
    let mut pc = PacketCt::default();
    for &h in hooks {
        let mut meta = Meta::with_ifnames("", "");
        match h {
            Hook::Prerouting | Hook::Input => meta.iifname = iif,
            Hook::Output => meta.oifname = oif,
            _ => (meta.iifname, meta.oifname) = (iif, oif),
        }
        meta.mark = p.mark;
        let d = sf.hook_mut(h, buf, &mut pm, &mut meta, now, &mut pc);
        if let Decision::Drop(why) = d {
            let answer = match why {
                DropReason::Reject(g) => nfq_answer(sf, g, buf, &pm, &pc, p, iif, now),
                _ => None,
            };
            return (d, false, answer);
        }
    }
    let d = sf.finish(&mut pc, now);
    (
        d,
        sf.stats.nat_rewritten + sf.stats.header_writes != writes,
        None,
    )
}

/// What weir sends itself in NFQUEUE mode for a rejected packet (through
/// [`weir_io::raw::Answerer`]: the kernel routes it).
enum NfqAnswer {
    /// A whole IP packet: a TCP reset, already through weir's output and postrouting hooks.
    Packet(Vec<u8>),
    /// An ICMP or ICMPv6 error (type, code) quoting the packet as the rejecting hook saw it,
    /// to its sender, carrying the packet's connection (`ct`, as [`Stateful::answer_ct`]);
    /// made whole once the rate limits let it go ([`NfqAnswer::packet`]), from the source
    /// address the kernel would give it, and taken through weir's output hook (`iif`: the
    /// name value of the interface it leaves by, the packet's input interface).
    Icmp {
        typ: u8,
        code: u8,
        quote: Vec<u8>,
        to: Addr,
        ct: Box<PacketCt>,
        iif: u128,
    },
}

impl NfqAnswer {
    /// The IP packet to send: a reset as it is; an ICMP or ICMPv6 error made whole from
    /// address `src` and taken through weir's output and postrouting hooks (`local_out`,
    /// attached to the connection of the packet it answers, as the kernel's `icmp_send`
    /// does). None when the hooks drop it.
    fn packet(self, sf: &mut Stateful, src: Addr, now: u64) -> Option<Vec<u8>> {
        let (typ, code, quote, to, ct, iif) = match self {
            NfqAnswer::Packet(pkt) => return Some(pkt),
            NfqAnswer::Icmp {
                typ,
                code,
                quote,
                to,
                ct,
                iif,
            } => (typ, code, quote, to, ct, iif),
        };
        let none = Mac::default();
        let mut frame =
            weir_engine::answer::icmp_error(src, to, typ, code, 0, &quote, (none, none));
        let mut meta = Meta::with_ifnames("", "");
        meta.oifname = iif;
        sf.local_out(&mut frame, meta, *ct, now)
            .is_accept()
            .then(|| frame[14..].to_vec())
    }
}

/// The answer to queue packet `p` rejected by rule `g` (`buf`, `pm`, `pc`: the packet at the
/// rejecting hook; `iif`: the name value of its input interface, where a reset leaves), as
/// [`refused`] makes it in inline mode.
#[allow(clippy::too_many_arguments)]
fn nfq_answer(
    sf: &mut Stateful,
    g: usize,
    buf: &[u8],
    pm: &PacketMeta,
    pc: &PacketCt,
    p: &nfqueue::Packet,
    iif: u128,
    now: u64,
) -> Option<NfqAnswer> {
    use weir_engine::answer::{self, RejectAnswer};
    // as Linux: no answer to a segment or datagram whose checksum is wrong (the kernel may
    // have checked it already, or left it to the sender's offload)
    let why = DropReason::Reject(g);
    match answer::refused_answer(&sf.eng.rs, why, buf, pm, p.checksum_trusted())? {
        RejectAnswer::Icmp(typ, code) => {
            if !answer::icmp_answerable(buf, pm) {
                return None;
            }
            let v6 = pm.l3 == weir_wire::L3::Ipv6;
            Some(NfqAnswer::Icmp {
                typ,
                code,
                quote: buf[..pm.l3_end().min(buf.len()).min(answer::icmp_quote_max(v6))].to_vec(),
                to: Addr::src_of(pm)?,
                ct: Box::new(sf.answer_ct(pc)),
                iif,
            })
        }
        RejectAnswer::Reset => {
            let mut rst = weir_engine::answer::tcp_reset(buf, pm, [0; 6], [0; 6])?;
            let mut meta = Meta::with_ifnames("", "");
            meta.oifname = iif;
            let apc = sf.answer_ct(pc);
            let sent = sf.local_out(&mut rst, meta, apc, now).is_accept();
            sent.then(|| NfqAnswer::Packet(rst[14..].to_vec()))
        }
    }
}

/// NFQUEUE mode: the raw sockets that send the answers to rejected packets (opened with the
/// first one), and the ICMP rate limit of this worker.
struct Answers {
    sock: Option<weir_io::raw::Answerer>,
    failed: bool,
    limits: weir_router::IcmpLimits,
}

impl Answers {
    fn new(limits: weir_router::IcmpLimits) -> Answers {
        Answers {
            sock: None,
            failed: false,
            limits,
        }
    }

    /// Send one answer, counted in `c` (an ICMP error first through the rate limits, then
    /// made whole and through weir's output hook).
    fn send(&mut self, sf: &mut Stateful, c: &mut Counts, a: NfqAnswer, now: u64) {
        let mut src = Addr::v4(0);
        if let NfqAnswer::Icmp { to, .. } = a {
            // (the kernel's routes are not known here: IPv6 gets the period of a host route)
            if !self.limits.allow(to, None, now) {
                c.icmp_limited += 1;
                return;
            }
            src = match weir_io::raw::source_for(to.ip()) {
                Ok(a) => Addr::from(a),
                Err(_) => {
                    // no route back: the kernel sends nothing either
                    c.answers_failed += 1;
                    return;
                }
            };
        }
        let Some(pkt) = a.packet(sf, src, now) else {
            return;
        };
        if self.sock.is_none() && !self.failed {
            match weir_io::raw::Answerer::open() {
                Ok(s) => self.sock = Some(s),
                Err(e) => {
                    eprintln!(
                        "weir: cannot open raw sockets to answer rejected packets ({e}); they are dropped without an answer"
                    );
                    self.failed = true;
                }
            }
        }
        let Some(s) = &self.sock else {
            c.answers_failed += 1;
            return;
        };
        let is_icmp = {
            let pm = PacketMeta::parse(&pkt, LinkType::RawIp);
            matches!(pm.l4proto, 1 | 58)
        };
        match s.send_packet(&pkt) {
            Ok(()) if is_icmp => c.icmp_errors += 1,
            Ok(()) => c.resets += 1,
            Err(_) => c.answers_failed += 1,
        }
    }
}

type CtlRequest = (Vec<String>, mpsc::Sender<String>);

/// How long `weir ctl trace` waits for its packets.
const TRACE_SECONDS: u64 = 30;

/// One line about a frame the inline router read (for traces).
fn frame_summary(frame: &[u8], port: &str) -> String {
    let pm = PacketMeta::parse(frame, LinkType::Ethernet);
    let v6 = pm.l3 == weir_wire::L3::Ipv6;
    format!(
        "in {port}: proto {} {} -> {} len {}",
        pm.l4proto,
        endpoint(pm.saddr, pm.sport, v6),
        endpoint(pm.daddr, pm.dport, v6),
        pm.len
    )
}

/// One line about a queued packet (for traces).
fn packet_summary(p: &nfqueue::Packet, payload: &[u8]) -> String {
    let pm = PacketMeta::parse_captured(
        payload,
        LinkType::RawIp,
        p.cap_len.map_or(payload.len(), |c| c as usize),
    );
    let v6 = pm.l3 == weir_wire::L3::Ipv6;
    let hook = ["prerouting", "input", "forward", "output", "postrouting"]
        .get(p.hook as usize)
        .unwrap_or(&"?");
    format!(
        "{hook}: proto {} {} -> {} len {} (in ifindex {}, out ifindex {})",
        pm.l4proto,
        endpoint(pm.saddr, pm.sport, v6),
        endpoint(pm.daddr, pm.dport, v6),
        pm.len,
        p.indev,
        p.outdev
    )
}

fn control_thread(path: PathBuf, tx: mpsc::Sender<CtlRequest>) -> anyhow::Result<()> {
    let _ = std::fs::remove_file(&path);
    let l =
        UnixListener::bind(&path).with_context(|| format!("control socket {}", path.display()))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("control socket {}", path.display()))?;
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let tx = tx.clone();
            let _ = serve(s, &tx);
        }
    });
    Ok(())
}

/// Prometheus text exposition on `addr` (`GET /metrics`): each scrape asks the dataplane
/// loop, which answers between batches.
fn metrics_thread(addr: &str, tx: mpsc::Sender<CtlRequest>) -> anyhow::Result<()> {
    let l = std::net::TcpListener::bind(addr).with_context(|| format!("metrics address {addr}"))?;
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let _ = scrape(s, &tx);
        }
    });
    Ok(())
}

fn scrape(s: std::net::TcpStream, tx: &mpsc::Sender<CtlRequest>) -> std::io::Result<()> {
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))?;
    let mut r = BufReader::new(&s);
    let mut first = String::new();
    r.read_line(&mut first)?;
    // the rest of the request head
    let mut line = String::new();
    while r.read_line(&mut line)? > 2 {
        line.clear();
    }
    let path = first.split_whitespace().nth(1).unwrap_or("");
    let (status, body) = if path == "/metrics" || path == "/" {
        let (rtx, rrx) = mpsc::channel();
        let _ = tx.send((vec!["metrics".into()], rtx));
        match rrx.recv_timeout(std::time::Duration::from_secs(5)) {
            Ok(b) => ("200 OK", b),
            Err(_) => (
                "503 Service Unavailable",
                "the dataplane did not answer\n".into(),
            ),
        }
    } else {
        ("404 Not Found", "GET /metrics\n".into())
    };
    (&s).write_all(
        format!(
            "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
}

fn serve(s: UnixStream, tx: &mpsc::Sender<CtlRequest>) -> std::io::Result<()> {
    let mut line = String::new();
    BufReader::new(&s).read_line(&mut line)?;
    let words: Vec<String> = line.split_whitespace().map(String::from).collect();
    let (rtx, rrx) = mpsc::channel();
    if tx.send((words, rtx)).is_err() {
        return Ok(());
    }
    let reply = rrx
        .recv_timeout(std::time::Duration::from_secs(TRACE_SECONDS + 10))
        .unwrap_or_else(|_| "error: no answer from the dataplane\n".into());
    (&s).write_all(reply.as_bytes())
}

/// A `weir ctl trace` in progress: the next packets the filter matches, with the rules they
/// hit and their verdict.
struct Trace {
    filter: Filter,
    left: usize,
    seen: usize,
    out: String,
    reply: mpsc::Sender<String>,
    until: Instant,
}

/// Add a traced packet to the trace: the rules whose counters it moved, its verdict.
fn trace_packet(
    trace: &mut Option<Trace>,
    sf: &Stateful,
    summary: &str,
    before: &[(u64, u64)],
    verdict: &str,
) {
    let Some(t) = trace.as_mut() else { return };
    t.seen += 1;
    t.left = t.left.saturating_sub(1);
    t.out.push_str(&format!("#{} {summary}\n", t.seen));
    for tb in &sf.eng.rs.tables {
        for c in &tb.chains {
            for r in c.rules() {
                let hits = sf.eng.st.rule_hits.get(r.gid).map_or(0, |h| h.0);
                if hits > before.get(r.gid).map_or(0, |h| h.0) {
                    t.out.push_str(&format!(
                        "  rule {} {} {} handle {}: {}\n",
                        tb.family.name(),
                        tb.name,
                        c.name,
                        r.handle,
                        r.text
                    ));
                }
            }
        }
    }
    t.out.push_str(&format!("  verdict {verdict}\n"));
}

/// A verdict as a trace shows it.
fn verdict_text(d: Decision, changed: bool) -> String {
    match d {
        Decision::Accept if changed => "accept (rewritten)".into(),
        Decision::Accept => "accept".into(),
        Decision::Drop(r) => format!("drop ({})", reason(r)),
    }
}

/// Whether a trace is on and wants this packet.
fn trace_wants(trace: &Option<Trace>, pm: &PacketMeta) -> bool {
    trace.as_ref().is_some_and(|t| {
        t.filter.matches(&[weir_conntrack::Tuple {
            src: pm.saddr,
            dst: pm.daddr,
            sport: pm.sport,
            dport: pm.dport,
            proto: pm.l4proto,
            v6: pm.l3 == weir_wire::L3::Ipv6,
        }])
    })
}

fn parse_addr(s: &str) -> anyhow::Result<Addr> {
    s.parse::<Addr>()
        .map_err(|_| anyhow::anyhow!("'{s}': an IPv4 or IPv6 address"))
}

fn parse_mac(s: &str) -> anyhow::Result<Mac> {
    s.parse::<Mac>().map_err(anyhow::Error::from)
}

/// One of the router's addresses, with the length of its subnet when given
/// (`198.18.30.1/24`): a subnet's directed broadcast and subnet-router anycast address are
/// then the router's too.
fn parse_port_addr(s: &str) -> anyhow::Result<PortAddr> {
    let (a, l) = s.split_once('/').unwrap_or((s, ""));
    let addr = parse_addr(a)?;
    let max = addr.family().bits();
    if l.is_empty() {
        return Ok(PortAddr::host(addr));
    }
    let len = l
        .parse()
        .ok()
        .filter(|&x| x <= max)
        .with_context(|| format!("address {s}: prefix length 0 to {max}"))?;
    Ok(PortAddr { addr, len })
}

/// The inline router of a configuration: its ports (their MACs and MTUs are the links',
/// filled in when the links are open), its routes and the configured neighbours.
fn router_of(cfg: &Config) -> anyhow::Result<Router> {
    anyhow::ensure!(
        cfg.interface.len() >= 2,
        "inline mode: at least two [[interface]] sections"
    );
    let port_of = |name: &str| {
        cfg.interface
            .iter()
            .position(|i| i.name == name)
            .ok_or_else(|| anyhow::anyhow!("route via interface '{name}': not an [[interface]]"))
    };
    let mut ports = Vec::new();
    for i in &cfg.interface {
        let addrs = i
            .address
            .iter()
            .map(|a| parse_port_addr(a))
            .collect::<anyhow::Result<Vec<_>>>()?;
        ports.push(
            Port::new(&i.name)
                .with_addrs(addrs)
                .with_rp_filter(i.rp_filter.into()),
        );
    }
    let mut routes = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for r in &cfg.route {
        let (a, l) = r.prefix.split_once('/').unwrap_or((&r.prefix, ""));
        let net = parse_addr(a)?;
        let max = net.family().bits();
        let len: u8 = if l.is_empty() {
            max
        } else {
            l.parse()
                .ok()
                .filter(|&x| x <= max)
                .with_context(|| format!("route {}: prefix length 0 to {max}", r.prefix))?
        };
        let via = r.via.as_deref().map(parse_addr).transpose()?;
        anyhow::ensure!(
            via.is_none_or(|v| v.family() == net.family()),
            "route {}: the next hop is of the other family",
            r.prefix
        );
        let route = Route::new(net, len, port_of(&r.interface)?, via);
        anyhow::ensure!(
            seen.insert((route.net, route.len)),
            "route {}: configured twice",
            r.prefix
        );
        routes.push(route);
    }
    let routes = Routes::new(routes).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut router = Router::new(ports, routes);
    for n in &cfg.neighbour {
        let a = parse_addr(&n.address)?;
        anyhow::ensure!(
            router.neighbours().fits(a),
            "neighbour {}: more than {} neighbours",
            n.address,
            weir_router::neigh::MAX_NEIGHBOURS
        );
        router.set_neighbour(a, parse_mac(&n.mac)?);
    }
    // packets to the router's own addresses are dropped until they can be handed to the
    // kernel's stack
    router.set_local_delivery(false);
    Ok(router)
}

/// The receive queues of an interface (1 when sysfs does not say).
fn rx_queues(name: &str) -> usize {
    std::fs::read_dir(format!("/sys/class/net/{name}/queues"))
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
                .count()
        })
        .unwrap_or(1)
}

/// Several workers over AF_XDP: every interface needs one receive queue per worker; worker
/// `w` reads queue `w` of each (the XDP program sends a queue's frames to its socket) and
/// steers in software what belongs to another worker ([`crate::handoff`]). None: use
/// AF_PACKET with a fanout (`io = "auto"` on interfaces without one queue per worker, or
/// `io = "afpacket"`).
#[allow(clippy::type_complexity)]
fn xdp_workers(
    cfg: &Config,
    n: u16,
) -> anyhow::Result<Option<Vec<(Vec<Link>, Vec<Option<weir_io::afpacket::Port>>)>>> {
    if cfg.io == "afpacket" {
        return Ok(None);
    }
    if let Some(i) = cfg
        .interface
        .iter()
        .find(|i| rx_queues(&i.name) != n as usize)
    {
        let q = rx_queues(&i.name);
        anyhow::ensure!(
            cfg.io != "xdp",
            "workers = {n} with io = \"xdp\": {} has {q} receive queue(s), and each worker reads one queue of every interface: give it {n} (`ethtool -L {} combined {n}`, or `rx {n} tx {n}` on a veth), or use io = \"afpacket\" (or \"auto\"), whose fanout steers flows to workers",
            i.name,
            i.name
        );
        eprintln!("weir run: {n} workers: {} has {q} receive queue(s), not one per worker: AF_PACKET rings with a fanout steering flows to workers", i.name);
        return Ok(None);
    }
    let mut links: Vec<(Vec<Link>, Vec<Option<weir_io::afpacket::Port>>)> =
        (0..n).map(|_| (Vec::new(), Vec::new())).collect();
    for i in &cfg.interface {
        let mut prog = None;
        for (w, (ports, arp)) in links.iter_mut().enumerate() {
            let p = match weir_io::xdp::Port::open_queue(
                &i.name,
                cfg.nfqueue.batch,
                w as u32,
                n as u32,
                prog.clone(),
            ) {
                Ok(p) => p,
                Err(e) if cfg.io == "xdp" => return Err(e.into()),
                Err(e) => {
                    eprintln!(
                        "weir run: {}: AF_XDP not available ({e}); using AF_PACKET",
                        i.name
                    );
                    return Ok(None);
                }
            };
            prog = Some(p.program.clone());
            ports.push(Link::Xdp(Box::new(p)));
            // ARP and neighbour discovery go to the kernel: worker 0 reads them on a side
            // socket and shares what it learns; the others send their requests on the port
            arp.push(if w == 0 {
                Some(weir_io::afpacket::Port::open(&i.name, 64)?)
            } else {
                None
            });
        }
    }
    Ok(Some(links))
}

/// The inline router's ports and tables.
struct Inline {
    ports: Vec<Link>,
    /// AF_XDP mode: per port, an AF_PACKET socket for ARP only (the XDP program passes ARP
    /// to the kernel; weir learns neighbours from it and sends its requests).
    arp: Vec<Option<weir_io::afpacket::Port>>,
    /// The path of a frame: ports, routes, neighbours, adjacencies, ICMP limits.
    router: Router,
    /// The frames of the batch being handled that leave: (frame index, output port, length).
    fwd: Vec<(usize, usize, usize)>,
    ports_names: Vec<String>,
    /// When the sockets were last polled (ns).
    polled: u64,
    /// The poll set (ports, then side sockets), built on the first batch.
    fds: Vec<libc::pollfd>,
    /// Several workers: this one's ends of the fragment handoff.
    handoff: Option<crate::handoff::Handoff>,
    /// When the ports' MTUs were last read (ns).
    mtu_read: u64,
    /// Later fragments waiting for their first.
    held: Held,
}

/// Later fragments held until their first has passed, tagged with the port they came in
/// on.
type Held = weir_engine::frag::Held<usize>;

/// How often inline mode reads its ports' MTUs again (`ip link set ... mtu` while it runs).
const MTU_PERIOD_NS: u64 = 1_000_000_000;

impl Inline {
    /// Read the ports' MTUs again if [`MTU_PERIOD_NS`] has passed; a change takes effect for
    /// the next packet (and is logged by worker `log`). A port whose MTU cannot be read keeps
    /// the last one.
    fn refresh_mtu(&mut self, now: u64, log: bool) {
        if now.saturating_sub(self.mtu_read) < MTU_PERIOD_NS {
            return;
        }
        self.mtu_read = now;
        for (pi, name) in self.ports_names.iter().enumerate() {
            if let Ok(new) = weir_io::afpacket::mtu(name) {
                let m = self.router.port(pi).mtu;
                if new != m {
                    if log {
                        eprintln!("weir: {name}: MTU {m} -> {new}");
                    }
                    self.router.set_mtu(pi, new);
                }
            }
        }
    }

    /// Carry out the fate of a frame read on port `pi`: drops counted, neighbour requests,
    /// ICMP errors and fragments sent. A frame that leaves whole is counted and its output
    /// port and length returned, for the caller to send it. `frame` gives the frame's bytes
    /// (read only on the rare paths that need them).
    #[allow(clippy::too_many_arguments)]
    fn settle(
        &mut self,
        sf: &mut Stateful,
        c: &mut Counts,
        pi: usize,
        fate: Fate,
        rewritten: bool,
        now: u64,
        frame: &dyn Fn(&Inline) -> Vec<u8>,
    ) -> Option<(usize, usize)> {
        match fate {
            Fate::NotMine => {}
            Fate::Hold => {
                let f = frame(self);
                if let Some(dropped) = self.held.hold(pi, f, LinkType::Ethernet, now) {
                    c.packets += dropped as u64;
                    *c.dropped.entry("fragment").or_default() += dropped as u64;
                }
            }
            Fate::Drop(why) => {
                c.packets += 1;
                *c.dropped.entry(why.name()).or_default() += 1;
            }
            Fate::Local { .. } => {
                // (local delivery is off: the router drops such packets as to-router)
                c.packets += 1;
                *c.dropped.entry(Reason::ToRouter.name()).or_default() += 1;
            }
            Fate::Reset(rst) => {
                c.packets += 1;
                *c.dropped.entry("reject").or_default() += 1;
                c.resets += 1;
                self.ports[pi].push(&rst);
            }
            Fate::NoNeighbour { port, hop } => {
                c.packets += 1;
                *c.dropped.entry("no-neighbour").or_default() += 1;
                if let Some(req) = self.router.solicit(port, hop, now) {
                    match &mut self.arp[port] {
                        Some(a) => a.push(&req),
                        None => self.ports[port].push(&req),
                    }
                }
            }
            Fate::Out { port, len } => {
                c.packets += 1;
                c.accepted += 1;
                c.rewritten += rewritten as u64;
                return Some((port, len));
            }
            Fate::Fragments { port: o, len } => {
                c.packets += 1;
                let f = frame(self);
                let f = &f[..len.min(f.len())];
                let l3 = PacketMeta::parse(f, LinkType::Ethernet).l3_off as usize;
                match weir_wire::frag::fragment_ipv4(f, l3, self.router.port(o).mtu) {
                    Some(pieces) => {
                        c.accepted += 1;
                        c.rewritten += rewritten as u64;
                        c.fragmented += 1;
                        // the frames before it in the batch leave first (no
                        // reordering within a flow)
                        for &(j, p, n) in &self.fwd {
                            forward_frame(&mut self.ports, pi, j, p, n);
                        }
                        self.fwd.clear();
                        for piece in &pieces {
                            self.ports[o].push(piece);
                        }
                    }
                    None => *c.dropped.entry("too-big").or_default() += 1,
                }
            }
            Fate::Icmp {
                why,
                typ,
                code,
                info,
                ct,
            } => {
                c.packets += 1;
                *c.dropped.entry(why.name()).or_default() += 1;
                let f = frame(self);
                match self
                    .router
                    .icmp_answer(sf, pi, &f, why, typ, code, info, *ct, now)
                {
                    IcmpAnswer::Send(e) => {
                        c.icmp_errors += 1;
                        self.ports[pi].push(&e)
                    }
                    IcmpAnswer::Limited => c.icmp_limited += 1,
                    IcmpAnswer::None => {}
                }
            }
        }
        None
    }
}

/// One port of the inline router: AF_PACKET or AF_XDP.
enum Link {
    Packet(Box<weir_io::afpacket::Port>),
    Xdp(Box<weir_io::xdp::Port>),
}

impl Link {
    /// Open interface `name` as `io` says (`auto`: AF_XDP, else AF_PACKET).
    fn open(name: &str, io: &str, batch: usize) -> anyhow::Result<Link> {
        if io != "afpacket" {
            let queues = rx_queues(name);
            let r = if queues > 1 {
                Err(anyhow::anyhow!(
                    "{name} has {queues} receive queues and weir reads queue 0 only: set one with `ethtool -L {name} combined 1`, or io = \"afpacket\""
                ))
            } else {
                weir_io::xdp::Port::open(name, batch)
                    .map(|p| Link::Xdp(Box::new(p)))
                    .map_err(anyhow::Error::from)
            };
            match r {
                Ok(l) => return Ok(l),
                Err(e) if io == "xdp" => return Err(e),
                Err(e) => {
                    eprintln!("weir run: {name}: AF_XDP not available ({e}); using AF_PACKET")
                }
            }
        }
        Ok(Link::Packet(Box::new(weir_io::afpacket::Port::open_ring(
            name,
        )?)))
    }

    fn name(&self) -> &str {
        match self {
            Link::Packet(p) => &p.name,
            Link::Xdp(p) => &p.name,
        }
    }

    fn mac(&self) -> Mac {
        Mac(match self {
            Link::Packet(p) => p.mac,
            Link::Xdp(p) => p.mac,
        })
    }

    fn fd(&self) -> i32 {
        match self {
            Link::Packet(p) => p.fd(),
            Link::Xdp(p) => p.fd(),
        }
    }

    fn kind(&self) -> String {
        match self {
            Link::Packet(_) => "AF_PACKET, TPACKET_V3 ring".into(),
            Link::Xdp(p) => format!("AF_XDP, XDP {}", p.program.mode),
        }
    }

    fn recv_batch(&mut self) -> std::io::Result<usize> {
        match self {
            Link::Packet(p) => p.recv_batch(),
            Link::Xdp(p) => p.recv_batch(),
        }
    }

    fn frame_mut(&mut self, i: usize) -> (&mut [u8], bool) {
        match self {
            Link::Packet(p) => p.frame_mut(i),
            Link::Xdp(p) => p.frame_mut(i),
        }
    }

    fn frame(&self, i: usize) -> &[u8] {
        match self {
            Link::Packet(p) => p.frame(i),
            Link::Xdp(p) => p.frame(i),
        }
    }

    fn recv_done(&mut self) {
        match self {
            Link::Packet(p) => p.recv_done(),
            Link::Xdp(p) => p.recv_done(),
        }
    }

    fn push(&mut self, f: &[u8]) {
        match self {
            Link::Packet(p) => p.push(f),
            Link::Xdp(p) => p.push(f),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Link::Packet(p) => p.flush(),
            Link::Xdp(p) => p.flush(),
        }
    }

    /// (received, sent) frames.
    fn counts(&self) -> (u64, u64) {
        match self {
            Link::Packet(p) => (p.stats.received, p.stats.sent),
            Link::Xdp(p) => (p.stats.received, p.stats.sent),
        }
    }

    fn stats(&mut self) -> String {
        match self {
            Link::Packet(p) => {
                let drops = p.ring_drops();
                format!(
                    "{} (AF_PACKET) received {} sent {} truncated {} send errors {} ring drops {}",
                    p.name,
                    p.stats.received,
                    p.stats.sent,
                    p.stats.truncated,
                    p.stats.send_errors,
                    drops
                )
            }
            Link::Xdp(p) => {
                p.refresh_stats();
                format!(
                    "{} ({}) received {} sent {} send errors {} kernel drops {} (rx ring full {}, no free frame {})",
                    p.name,
                    format_args!("AF_XDP, XDP {}", p.program.mode),
                    p.stats.received,
                    p.stats.sent,
                    p.stats.send_errors,
                    p.stats.kernel_dropped,
                    p.stats.kernel_ring_full,
                    p.stats.kernel_fill_empty
                )
            }
        }
    }
}

/// Copy frame `i` of port `from`'s batch (its first `len` bytes) into port `to`'s output.
fn forward_frame(ports: &mut [Link], from: usize, i: usize, to: usize, len: usize) {
    use std::cmp::Ordering as O;
    let cut = |f: &[u8]| -> usize { len.min(f.len()) };
    match from.cmp(&to) {
        O::Equal => {
            let f = ports[from].frame(i);
            let f = f[..cut(f)].to_vec();
            ports[to].push(&f);
        }
        O::Less => {
            let (a, b) = ports.split_at_mut(to);
            let f = a[from].frame(i);
            b[0].push(&f[..cut(f)]);
        }
        O::Greater => {
            let (a, b) = ports.split_at_mut(from);
            let f = b[0].frame(i);
            a[to].push(&f[..cut(f)]);
        }
    }
}

/// [`Router::route_frame`] for a worker, `frame` read on port `pi` and parsed as `pm`:
/// traced if a trace asks for it, and whether its headers were rewritten (NAT, header
/// writes).
#[allow(clippy::too_many_arguments)]
fn decide(
    sf: &mut Stateful,
    trace: &mut Option<Trace>,
    router: &mut Router,
    names: &[String],
    frame: &mut [u8],
    pm: PacketMeta,
    pi: usize,
    now: u64,
) -> (Fate, bool) {
    let traced =
        trace.is_some() && !matches!(pm.l3, weir_wire::L3::Other(_)) && trace_wants(trace, &pm);
    let before = traced.then(|| sf.eng.st.rule_hits.clone());
    let summary = traced.then(|| frame_summary(frame, names[pi].as_str()));
    let writes = sf.stats.nat_rewritten + sf.stats.header_writes;
    let fate = router.route_frame(sf, frame, pm, pi, Rx::default(), now);
    let rewritten = sf.stats.nat_rewritten + sf.stats.header_writes != writes;
    if let (Some(before), Some(summary)) = (before, summary) {
        trace_packet(trace, sf, &summary, &before, &fate.describe(names));
    }
    (fate, rewritten)
}

/// A worker: one queue, its own connection table and engine state (the kernel sends both
/// directions of a connection to the same queue).
struct Worker {
    idx: usize,
    io: Io,
    trace: Option<Trace>,
    sf: Stateful,
    counts: Counts,
    ifs: IfNames,
    copy_mode: String,
    copy: u16,
    /// NFQUEUE mode: the answers to rejected packets.
    answers: Option<Answers>,
}

/// What the dispatcher asks a worker.
enum Msg {
    Ctl(Vec<String>, mpsc::Sender<String>),
    Reload(Box<Engine>, mpsc::Sender<String>),
}

/// Where a worker's packets come from and go.
enum Io {
    Nfq(Queue),
    Inline(Inline),
}

impl Io {
    fn describe(&self) -> String {
        match self {
            Io::Nfq(q) => format!("queue {}", q.num()),
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

    fn stats(&mut self) -> String {
        match self {
            Io::Nfq(q) => format!(
                "queue batches {} sends {} netlink errors {}",
                q.stats.batches, q.stats.sends, q.stats.errors
            ),
            Io::Inline(il) => {
                let mut v: Vec<String> = il.ports.iter_mut().map(|p| p.stats()).collect();
                v.push(il.router.describe());
                if let Some(h) = &il.handoff {
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
}

impl Worker {
    fn status(&mut self) -> String {
        let c = &self.counts;
        let mut drops: Vec<_> = c.dropped.iter().collect();
        drops.sort();
        format!(
            "worker {} ({}): packets {} accepted {} rewritten {} dropped {}{}{}; conntrack entries {} (evicted {}, refused {}{}), fragments followed {}{}; {}\n",
            self.idx,
            self.io.describe(),
            c.packets,
            c.accepted,
            c.rewritten,
            c.dropped.values().sum::<u64>(),
            drops
                .iter()
                .map(|(k, v)| format!(" {k}={v}"))
                .collect::<String>(),
            if c.icmp_errors + c.icmp_limited > 0 {
                format!(
                    "; ICMP errors sent {} (rate-limited {})",
                    c.icmp_errors, c.icmp_limited
                )
            } else {
                String::new()
            } + &if c.resets > 0 {
                format!("; TCP resets sent {}", c.resets)
            } else {
                String::new()
            } + &if c.answers_failed > 0 {
                format!("; answers not sent {}", c.answers_failed)
            } else {
                String::new()
            } + &if c.fragmented > 0 {
                format!("; forwarded in fragments {}", c.fragmented)
            } else {
                String::new()
            },
            self.sf.ct.len(),
            self.sf.ct.stats().evicted,
            self.sf.ct.stats().refused,
            if self.sf.steer.is_some() {
                format!(
                    ", NAT replies steered to another worker {}",
                    self.sf.stats.nat_steer_missed
                )
            } else {
                String::new()
            },
            self.sf.stats.fragments_followed,
            if self.sf.flowtables.is_empty() {
                String::new()
            } else {
                let st = &self.sf.stats;
                format!(
                    "; flowtable offloaded {} fast path {} teardowns {}",
                    st.offloaded, st.fast_path, st.offload_teardowns
                )
            },
            self.io.stats(),
        )
    }

    fn step(&mut self) -> std::io::Result<()> {
        match self.io {
            Io::Nfq(_) => self.step_nfq(),
            Io::Inline(_) => self.step_inline(),
        }
    }

    /// Inline: wait for frames on any port, route each, send what goes out of each port in
    /// one call.
    fn step_inline(&mut self) -> std::io::Result<()> {
        let Io::Inline(il) = &mut self.io else {
            return Ok(());
        };
        // the poll set and the MACs are the same for every batch: built once
        if il.fds.is_empty() {
            il.fds = il
                .ports
                .iter()
                .map(|p| p.fd())
                .chain(il.arp.iter().flatten().map(|a| a.fd()))
                .chain(il.handoff.as_ref().map(|h| h.fd()))
                .map(|fd| libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                })
                .collect();
        }
        il.refresh_mtu(now_ns(), self.idx == 0);
        let mut fds = std::mem::take(&mut il.fds);
        for f in fds.iter_mut() {
            f.revents = 0;
        }
        let r = self.step_inline_with(&mut fds);
        if let Io::Inline(il) = &mut self.io {
            il.fds = fds;
        }
        r
    }

    /// One batch of [`Worker::step_inline`] over the poll set `fds` (ports, then side
    /// sockets).
    fn step_inline_with(&mut self, fds: &mut [libc::pollfd]) -> std::io::Result<()> {
        let Io::Inline(il) = &mut self.io else {
            return Ok(());
        };
        let np = il.ports.len();
        il.router.neighbours_mut().sync();
        // AF_XDP frames are in the RX ring already: wait in poll only when every ring is
        // empty; while they are busy, look at the other sockets (the ARP/ND side sockets,
        // AF_PACKET ports) without waiting, at most once a millisecond
        let mut ready = false;
        for p in il.ports.iter_mut() {
            if let Link::Xdp(x) = p {
                ready |= x.recv_batch()? > 0;
            }
        }
        let now = now_ns();
        if !ready || now.saturating_sub(il.polled) >= 1_000_000 {
            il.polled = now;
            let wait = if ready { 0 } else { 100 };
            // SAFETY: poll over live pollfds of our own sockets.
            let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, wait) };
            if r <= 0 && !ready {
                return Ok(());
            }
        }
        for (pi, p) in il.ports.iter().enumerate() {
            if let Link::Xdp(x) = p {
                if x.batch_len() > 0 {
                    fds[pi].revents |= libc::POLLIN;
                }
            }
        }
        let now = if ready { now } else { now_ns() };
        // ARP on the side sockets (AF_XDP mode): neighbours learnt from the link
        let mut ai = np;
        for (pi, a) in il.arp.iter_mut().enumerate() {
            let Some(a) = a else { continue };
            if fds[ai].revents != 0 {
                for i in 0..a.recv_batch()? {
                    il.router.learn(pi, a.frame(i));
                }
            }
            ai += 1;
        }
        // fragments other workers read for this one's connections (they were steered by
        // their addresses), in the order they were read
        if let Some(mut inbox) = il.handoff.as_mut().map(|h| h.take()) {
            for (_, pi, f) in inbox.iter_mut() {
                let pi = *pi;
                let pm = PacketMeta::parse(f, LinkType::Ethernet);
                let (fate, rewritten) = decide(
                    &mut self.sf,
                    &mut self.trace,
                    &mut il.router,
                    &il.ports_names,
                    f,
                    pm,
                    pi,
                    now,
                );
                let f: &[u8] = f;
                if let Some((o, len)) = il.settle(
                    &mut self.sf,
                    &mut self.counts,
                    pi,
                    fate,
                    rewritten,
                    now,
                    &|_| f.to_vec(),
                ) {
                    il.ports[o].push(&f[..len.min(f.len())]);
                }
            }
            if let Some(h) = il.handoff.as_mut() {
                h.done(inbox);
            }
        }
        for pi in 0..np {
            if fds[pi].revents == 0 {
                continue;
            }
            let n = match &mut il.ports[pi] {
                Link::Xdp(x) if x.batch_len() > 0 => x.batch_len(),
                p => p.recv_batch()?,
            };
            il.fwd.clear();
            for i in 0..n {
                let (frame, truncated) = il.ports[pi].frame_mut(i);
                // neighbours learnt from the ARP and ND traffic on the link
                il.router.learn(pi, frame);
                let (fate, rewritten) = if truncated {
                    (Fate::Drop(Reason::Truncated), false)
                } else {
                    let pm = PacketMeta::parse(frame, LinkType::Ethernet);
                    if let Some(h) = il.handoff.as_mut() {
                        // a fragment of another worker's connection goes to it (with
                        // AF_XDP, any frame of another worker's connection)
                        if h.all || pm.frag != weir_wire::Frag::None {
                            if let Some(w) = h.owner(&pm, frame, now) {
                                h.send(w, pi, frame);
                                // later fragments of its datagram held here follow it there
                                if pm.frag == weir_wire::Frag::First && !il.held.is_empty() {
                                    let key = weir_engine::frag::Key::of(&pm);
                                    for (hp, hf) in il.held.take(&key) {
                                        h.send(w, hp, &hf);
                                    }
                                }
                                continue;
                            }
                        }
                    }
                    decide(
                        &mut self.sf,
                        &mut self.trace,
                        &mut il.router,
                        &il.ports_names,
                        frame,
                        pm,
                        pi,
                        now,
                    )
                };
                if let Some((o, len)) = il.settle(
                    &mut self.sf,
                    &mut self.counts,
                    pi,
                    fate,
                    rewritten,
                    now,
                    &|il| il.ports[pi].frame(i).to_vec(),
                ) {
                    il.fwd.push((i, o, len));
                }
            }
            for &(i, o, len) in &il.fwd {
                forward_frame(&mut il.ports, pi, i, o, len);
            }
            // (the list names frames of this port's batch: nobody else may send them)
            il.fwd.clear();
            il.ports[pi].recv_done();
        }
        // later fragments that came before their first: those whose first has passed
        // follow it now (after it), those that waited too long are dropped
        if !il.held.is_empty() {
            let (ready, expired) = il.held.ready(&mut self.sf.frags, now);
            let expired = expired.len();
            if expired > 0 {
                self.counts.packets += expired as u64;
                *self.counts.dropped.entry("fragment").or_default() += expired as u64;
            }
            for (pi, mut f) in ready {
                let pm = PacketMeta::parse(&f, LinkType::Ethernet);
                let (fate, rewritten) = decide(
                    &mut self.sf,
                    &mut self.trace,
                    &mut il.router,
                    &il.ports_names,
                    &mut f,
                    pm,
                    pi,
                    now,
                );
                let f: &[u8] = &f;
                let c = &mut self.counts;
                if let Some((o, len)) =
                    il.settle(&mut self.sf, c, pi, fate, rewritten, now, &|_| f.to_vec())
                {
                    il.ports[o].push(&f[..len.min(f.len())]);
                }
            }
        }
        if let Some(h) = il.handoff.as_mut() {
            h.wake();
        }
        for p in il.ports.iter_mut() {
            p.flush()?;
        }
        for a in il.arp.iter_mut().flatten() {
            a.flush()?;
        }
        self.sf.ct.gc(now, 64);
        Ok(())
    }

    /// NFQUEUE: receive a batch, decide every packet, send the verdicts.
    fn step_nfq(&mut self) -> std::io::Result<()> {
        let Io::Nfq(q) = &mut self.io else {
            return Ok(());
        };
        let want = copy_range(&self.copy_mode, &self.sf);
        if want != self.copy {
            // a reloaded ruleset rewrites packets (or no longer does)
            q.set_copy_range(want)?;
            self.copy = want;
        }
        q.recv_batch(100)?;
        let now = now_ns();
        let mut rewritten: Vec<(u32, Vec<u8>)> = Vec::new();
        let mut verdicts: Vec<(u32, Verdict)> = Vec::new();
        for (p, payload) in q.packets_mut() {
            let traced = self.trace.is_some()
                && trace_wants(
                    &self.trace,
                    &PacketMeta::parse_captured(
                        payload,
                        LinkType::RawIp,
                        p.cap_len.map_or(payload.len(), |c| c as usize),
                    ),
                );
            let before = traced.then(|| self.sf.eng.st.rule_hits.clone());
            let summary = traced.then(|| packet_summary(&p, payload));
            let (dec, changed, answer) = process(&mut self.sf, &p, payload, &mut self.ifs, now);
            if let (Some(before), Some(summary)) = (before, summary) {
                let v = verdict_text(dec, changed);
                trace_packet(&mut self.trace, &self.sf, &summary, &before, &v);
            }
            let c = &mut self.counts;
            c.packets += 1;
            match dec {
                Decision::Accept => {
                    c.accepted += 1;
                    if changed {
                        c.rewritten += 1;
                        rewritten.push((p.id, payload.to_vec()));
                    }
                    verdicts.push((p.id, Verdict::Accept));
                }
                Decision::Drop(r) => {
                    *c.dropped.entry(reason(r)).or_default() += 1;
                    verdicts.push((p.id, Verdict::Drop));
                }
            }
            if let (Some(a), Some(ans)) = (answer, self.answers.as_mut()) {
                ans.send(&mut self.sf, c, a, now);
            }
        }
        for &(id, v) in &verdicts {
            let payload = rewritten
                .iter()
                .find(|(i, _)| *i == id)
                .map(|(_, b)| b.as_slice());
            q.verdict(id, v, payload, None);
        }
        q.flush()?;
        self.sf.ct.gc(now, 64);
        Ok(())
    }

    /// The worker thread: requests between batches until weir stops; returns its status.
    fn run(mut self, rx: mpsc::Receiver<Msg>) -> String {
        while !STOP.load(Ordering::Relaxed) {
            while let Ok(m) = rx.try_recv() {
                match m {
                    Msg::Ctl(w, reply) if w.first().map(String::as_str) == Some("trace") => {
                        self.start_trace(&w[1..], reply)
                    }
                    Msg::Ctl(w, _) if w.first().map(String::as_str) == Some("trace-stop") => {
                        self.end_trace(true)
                    }
                    Msg::Ctl(w, reply) => {
                        let _ = reply.send(self.ctl(&w, now_ns()));
                    }
                    Msg::Reload(eng, reply) => {
                        self.sf.reload(*eng);
                        let _ = reply.send("ok".into());
                    }
                }
            }
            self.end_trace(false);
            if let Err(e) = self.step() {
                eprintln!("weir: worker {} ({}): {e}", self.idx, self.io.describe());
                STOP.store(true, Ordering::Relaxed);
            }
        }
        self.end_trace(true);
        self.status()
    }

    fn counters(&self) -> String {
        let mut s = String::new();
        for t in &self.sf.eng.rs.tables {
            for c in &t.chains {
                for r in c.rules() {
                    let (pk, by) = self.sf.eng.st.rule_hits[r.gid];
                    s.push_str(&format!(
                        "{pk:>12} {by:>14}  {} {} {}  {}\n",
                        t.family.name(),
                        t.name,
                        c.name,
                        r.text
                    ));
                }
            }
        }
        s
    }

    fn start_trace(&mut self, w: &[String], reply: mpsc::Sender<String>) {
        let w: Vec<&str> = w.iter().map(String::as_str).collect();
        let (n, f) = match w.first().and_then(|n| n.parse::<usize>().ok()) {
            Some(n) => (n.max(1), &w[1..]),
            None => (10, &w[..]),
        };
        match Filter::parse(f) {
            Ok(filter) => {
                // a new trace replaces one in progress (which gets what it has)
                self.end_trace(true);
                self.trace = Some(Trace {
                    filter,
                    left: n,
                    seen: 0,
                    out: String::new(),
                    reply,
                    until: Instant::now() + std::time::Duration::from_secs(TRACE_SECONDS),
                });
            }
            Err(e) => {
                let _ = reply.send(format!("error: {e}\n"));
            }
        }
    }

    /// Send the trace's report when it is complete, has timed out, or `now` is set.
    fn end_trace(&mut self, now: bool) {
        let done = self
            .trace
            .as_ref()
            .is_some_and(|t| now || t.left == 0 || Instant::now() >= t.until);
        if done {
            let t = self.trace.take().expect("checked");
            let mut out = t.out;
            if t.left > 0 {
                out.push_str(&format!(
                    "(trace ended after {} packet(s): none more matched within {TRACE_SECONDS} s)\n",
                    t.seen
                ));
            }
            let _ = t.reply.send(out);
        }
    }

    /// Connections the filter matches.
    fn ct_matching(&self, f: &Filter) -> Vec<weir_conntrack::EntryId> {
        self.sf
            .ct
            .iter()
            .filter_map(|(id, _)| {
                let o = self.sf.ct.tuple(id, weir_conntrack::Dir::Original)?;
                let r = self.sf.ct.tuple(id, weir_conntrack::Dir::Reply)?;
                f.matches(&[o, r]).then_some(id)
            })
            .collect()
    }

    /// `set add|del|list FAMILY TABLE SET [ELEMENT [timeout T]]`: the elements of a set beside
    /// its static ones (what the packet path and this command added).
    fn set_cmd(
        &mut self,
        op: &str,
        fam: &str,
        table: &str,
        set: &str,
        rest: &[&str],
        now: u64,
    ) -> Result<String, String> {
        let eng = &mut self.sf.eng;
        let ti = eng
            .rs
            .tables
            .iter()
            .position(|t| t.family.name() == fam && t.name == table)
            .ok_or_else(|| format!("no table {fam} {table}"))?;
        let t = &eng.rs.tables[ti];
        let si = t
            .set_names
            .iter()
            .position(|n| n == set)
            .ok_or_else(|| format!("no set {set} in table {fam} {table}"))?;
        let decl = &t.ir.sets[si];
        let types = decl.key_types.clone();
        let (timeout_ms, size) = (decl.timeout_ms, decl.size);
        if op == "list" {
            let mut out = String::new();
            if let Some(d) = eng.st.dynset(ti, si) {
                for (k, packets, bytes, exp) in d.elements(now) {
                    let key: Vec<String> = k
                        .iter()
                        .zip(&types)
                        .map(|(v, dt)| weir_lang::values::format_value(*dt, *v))
                        .collect();
                    out.push_str(&key.join(" . "));
                    if exp != 0 {
                        out.push_str(&format!(
                            " expires {} s",
                            exp.saturating_sub(now) / 1_000_000_000
                        ));
                    }
                    out.push_str(&format!(" packets {packets} bytes {bytes}\n"));
                }
            }
            return Ok(out);
        }
        // ELEMENT [timeout T]; a concatenation is written `a . b`
        let (elem, timeout) = match rest {
            [e @ .., "timeout", t] => (e, Some(*t)),
            e => (e, None),
        };
        let text = elem.join(" ");
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
        if op == "del" {
            return if eng.st.dynset_remove(ti, si, &key) {
                Ok("deleted\n".into())
            } else {
                Err(format!("{text}: not an element added at run time"))
            };
        }
        let ms = match timeout {
            Some(t) => Some(weir_lang::values::parse_time_ms(t)?),
            None => timeout_ms,
        };
        let expires = ms.map_or(0, |ms| now + ms * 1_000_000);
        let size = size.map_or(weir_engine::eval::DYNSET_DEFAULT_SIZE, |s| s as usize);
        if eng.st.dynset_add(ti, si, key, expires, size) {
            Ok("added\n".into())
        } else {
            Err(format!("set {set} is full ({size} elements)"))
        }
    }

    /// Prometheus text format.
    fn metrics(&self, now: u64) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let c = &self.counts;
        let mut metric = |name: &str, kind: &str, help: &str, rows: Vec<(String, f64)>| {
            let _ = writeln!(s, "# HELP weir_{name} {help}\n# TYPE weir_{name} {kind}");
            for (labels, v) in rows {
                let _ = writeln!(s, "weir_{name}{labels} {v}");
            }
        };
        let one = |v: u64| vec![(String::new(), v as f64)];
        metric(
            "packets_total",
            "counter",
            "Packets handled.",
            one(c.packets),
        );
        metric(
            "accepted_total",
            "counter",
            "Packets accepted.",
            one(c.accepted),
        );
        metric(
            "rewritten_total",
            "counter",
            "Packets rewritten (NAT, header writes).",
            one(c.rewritten),
        );
        metric(
            "fast_path_total",
            "counter",
            "Packets forwarded by the flowtable fast path (no chains, no connection tracking).",
            one(self.sf.stats.fast_path),
        );
        metric(
            "fragments_followed_total",
            "counter",
            "Later IP fragments that followed their datagram's first (virtual reassembly).",
            one(self.sf.stats.fragments_followed),
        );
        let handed = match &self.io {
            Io::Inline(Inline {
                handoff: Some(h), ..
            }) => h.handed,
            _ => 0,
        };
        metric(
            "handed_total",
            "counter",
            "Frames handed to the worker of their connection (several inline workers: fragments; over AF_XDP every frame another worker owns).",
            one(handed),
        );
        metric(
            "forwarded_in_fragments_total",
            "counter",
            "Packets larger than the output link's MTU forwarded in fragments.",
            one(c.fragmented),
        );
        let mut drops: Vec<_> = c.dropped.iter().collect();
        drops.sort();
        metric(
            "dropped_total",
            "counter",
            "Packets dropped, by reason.",
            drops
                .iter()
                .map(|(r, v)| (format!("{{reason=\"{r}\"}}"), **v as f64))
                .collect(),
        );
        let esc = |t: &str| t.replace('\\', "\\\\").replace('"', "\\\"");
        let mut rp = Vec::new();
        let mut rb = Vec::new();
        let mut sets = Vec::new();
        let mut named = Vec::new();
        for (ti, t) in self.sf.eng.rs.tables.iter().enumerate() {
            for ch in &t.chains {
                for r in ch.rules() {
                    let (pk, by) = self.sf.eng.st.rule_hits[r.gid];
                    let l = format!(
                        "{{table=\"{} {}\",chain=\"{}\",handle=\"{}\",rule=\"{}\"}}",
                        t.family.name(),
                        esc(&t.name),
                        esc(&ch.name),
                        r.handle,
                        esc(&r.text)
                    );
                    rp.push((l.clone(), pk as f64));
                    rb.push((l, by as f64));
                }
            }
            for (si, name) in t.set_names.iter().enumerate() {
                let n = self.sf.eng.st.dynset(ti, si).map_or(0, |d| d.len_at(now));
                sets.push((
                    format!(
                        "{{table=\"{} {}\",set=\"{}\"}}",
                        t.family.name(),
                        esc(&t.name),
                        esc(name)
                    ),
                    n as f64,
                ));
            }
            for (ci, nc) in t.ir.counters.iter().enumerate() {
                if let Some(&(pk, _)) = self
                    .sf
                    .eng
                    .st
                    .named_counters
                    .get(ti)
                    .and_then(|v| v.get(ci))
                {
                    named.push((
                        format!(
                            "{{table=\"{} {}\",counter=\"{}\"}}",
                            t.family.name(),
                            esc(&t.name),
                            esc(&nc.name)
                        ),
                        pk as f64,
                    ));
                }
            }
        }
        metric(
            "rule_packets_total",
            "counter",
            "Packets that matched each rule.",
            rp,
        );
        metric(
            "rule_bytes_total",
            "counter",
            "Bytes that matched each rule.",
            rb,
        );
        metric(
            "named_counter_packets_total",
            "counter",
            "Named counters.",
            named,
        );
        metric(
            "set_elements",
            "gauge",
            "Elements sets gained from the packet path.",
            sets,
        );
        let st = self.sf.ct.stats();
        metric(
            "conntrack_entries",
            "gauge",
            "Connection tracking entries.",
            one(self.sf.ct.len() as u64),
        );
        metric(
            "conntrack_evicted_total",
            "counter",
            "Unassured entries evicted from a full table.",
            one(st.evicted),
        );
        metric(
            "conntrack_refused_total",
            "counter",
            "New connections refused (table full).",
            one(st.refused),
        );
        match &self.io {
            Io::Nfq(q) => {
                metric(
                    "nfqueue_batches_total",
                    "counter",
                    "Receive batches.",
                    one(q.stats.batches),
                );
                metric(
                    "nfqueue_errors_total",
                    "counter",
                    "Netlink errors.",
                    one(q.stats.errors),
                );
            }
            Io::Inline(il) => {
                let mut rows = Vec::new();
                for p in &il.ports {
                    let (rx, tx) = p.counts();
                    for (dir, v) in [("in", rx), ("out", tx)] {
                        rows.push((
                            format!("{{port=\"{}\",dir=\"{dir}\"}}", esc(p.name())),
                            v as f64,
                        ));
                    }
                }
                metric(
                    "port_frames_total",
                    "counter",
                    "Frames read and sent per port.",
                    rows,
                );
                metric(
                    "icmp_errors_total",
                    "counter",
                    "ICMP errors for dropped packets: sent, or held back by the rate limit.",
                    vec![
                        ("{result=\"sent\"}".into(), self.counts.icmp_errors as f64),
                        (
                            "{result=\"limited\"}".into(),
                            self.counts.icmp_limited as f64,
                        ),
                    ],
                );
            }
        }
        metric(
            "worker_packets_total",
            "counter",
            "Packets per worker.",
            vec![(
                format!(
                    "{{worker=\"{}\",io=\"{}\"}}",
                    self.idx,
                    esc(&self.io.describe())
                ),
                c.packets as f64,
            )],
        );
        s
    }

    fn ctl(&mut self, w: &[String], now: u64) -> String {
        match w.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
            ["metrics"] => self.metrics(now),
            ["status"] => self.status(),
            ["counters"] => self.counters(),
            ["ct", "count", f @ ..] => match Filter::parse(f) {
                Ok(f) => format!("{}\n", self.ct_matching(&f).len()),
                Err(e) => format!("error: {e}\n"),
            },
            ["set", op @ ("add" | "del" | "list"), fam, table, set, rest @ ..] => {
                match self.set_cmd(op, fam, table, set, rest, now) {
                    Ok(s) => s,
                    Err(e) => format!("error: {e}\n"),
                }
            }
            ["ct", "flush", f @ ..] => match Filter::parse(f) {
                Ok(f) => {
                    let ids = self.ct_matching(&f);
                    for &id in &ids {
                        self.sf.ct.remove(id);
                    }
                    format!("flushed {} entries\n", ids.len())
                }
                Err(e) => format!("error: {e}\n"),
            },
            ["ct", "list", rest @ ..] => {
                let (max, f) = match rest.first().and_then(|n| n.parse::<usize>().ok()) {
                    Some(n) => (n, &rest[1..]),
                    None => (100, rest),
                };
                let f = match Filter::parse(f) {
                    Ok(f) => f,
                    Err(e) => return format!("error: {e}\n"),
                };
                let mut s = String::new();
                for id in self.ct_matching(&f).into_iter().take(max) {
                    let (Some(e), Some(o), Some(r)) = (
                        self.sf.ct.get(id),
                        self.sf.ct.tuple(id, weir_conntrack::Dir::Original),
                        self.sf.ct.tuple(id, weir_conntrack::Dir::Reply),
                    ) else {
                        continue;
                    };
                    s.push_str(&format!(
                        "proto {} {} -> {} | reply {} -> {} | {:?} timeout {} s mark {}\n",
                        o.proto,
                        endpoint(o.src, o.sport, o.v6),
                        endpoint(o.dst, o.dport, o.v6),
                        endpoint(r.src, r.sport, r.v6),
                        endpoint(r.dst, r.dport, r.v6),
                        e.tcp_state(),
                        e.timeout_remaining(now).as_secs(),
                        e.mark
                    ));
                }
                s
            }
            _ => {
                "error: commands: status | reload | counters | metrics | ct count|list [N]|flush [proto P] [addr A] [port N] | trace [N] [proto P] [addr A] [port N] | set add|del FAMILY TABLE SET ELEMENT [timeout T] | set list FAMILY TABLE SET\n"
                    .into()
            }
        }
    }
}

/// Which connections or packets a `ct` or `trace` command means: `proto P`, `addr A` (source
/// or destination, either direction), `port N` (likewise); all that are given must hold.
#[derive(Clone, Debug, Default)]
struct Filter {
    proto: Option<u8>,
    addr: Option<(u128, bool)>,
    port: Option<u16>,
}

impl Filter {
    fn parse(w: &[&str]) -> Result<Filter, String> {
        let mut f = Filter::default();
        let mut i = 0;
        while i < w.len() {
            let v = w
                .get(i + 1)
                .ok_or_else(|| format!("'{}' needs a value", w[i]))?;
            match w[i] {
                "proto" => {
                    f.proto = Some(match *v {
                        "tcp" => 6,
                        "udp" => 17,
                        "icmp" => 1,
                        "icmpv6" => 58,
                        n => n
                            .parse()
                            .map_err(|_| format!("proto {n}: tcp, udp, icmp or a number"))?,
                    })
                }
                "addr" => {
                    let a: std::net::IpAddr = v
                        .parse()
                        .map_err(|_| format!("addr {v}: an IPv4 or IPv6 address"))?;
                    f.addr = Some(match a {
                        std::net::IpAddr::V4(a) => (u32::from(a) as u128, false),
                        std::net::IpAddr::V6(a) => (u128::from(a), true),
                    });
                }
                "port" => f.port = Some(v.parse().map_err(|_| format!("port {v}: 0-65535"))?),
                other => return Err(format!("unknown filter '{other}' (proto, addr, port)")),
            }
            i += 2;
        }
        Ok(f)
    }

    /// Against the tuples of one direction or both.
    fn matches(&self, ts: &[weir_conntrack::Tuple]) -> bool {
        self.proto.is_none_or(|p| ts.iter().any(|t| t.proto == p))
            && self
                .addr
                .is_none_or(|(a, v6)| ts.iter().any(|t| t.v6 == v6 && (t.src == a || t.dst == a)))
            && self
                .port
                .is_none_or(|p| ts.iter().any(|t| t.sport == p || t.dport == p))
    }
}

fn endpoint(a: u128, port: u16, v6: bool) -> String {
    if v6 {
        format!("[{}]:{port}", std::net::Ipv6Addr::from(a))
    } else {
        format!("{}:{port}", std::net::Ipv4Addr::from(a as u32))
    }
}

pub fn run(a: RunArgs) -> anyhow::Result<ExitCode> {
    let (cfg, rules) = read_config(&a.config)?;
    let rs = match load(&rules, cfg.mode != "inline") {
        Ok(rs) => rs,
        Err(e) => {
            eprint!("{e}");
            anyhow::bail!("{}: the ruleset has errors", rules.display());
        }
    };
    let inline = cfg.mode == "inline";
    anyhow::ensure!(
        inline || cfg.workers == 1,
        "workers: inline mode only (nfqueue mode: nfqueue.workers, one queue each)"
    );
    let workers = if inline {
        cfg.workers
    } else {
        cfg.nfqueue.workers
    };
    if inline {
        anyhow::ensure!((1..=64).contains(&workers), "workers: 1 to 64");
    } else {
        anyhow::ensure!(
            (1..=64).contains(&workers) && cfg.nfqueue.queue.checked_add(workers - 1).is_some(),
            "nfqueue.workers: 1 to 64 (queues {} and up)",
            cfg.nfqueue.queue
        );
    }
    anyhow::ensure!(
        matches!(cfg.nfqueue.copy.as_str(), "auto" | "headers" | "packet"),
        "nfqueue.copy: auto, headers or packet"
    );
    let hooks = kernel_hooks(&engine(&rs));
    let router = if inline { Some(router_of(&cfg)?) } else { None };
    if a.print_kernel_rules && inline {
        let names: Vec<String> = cfg.interface.iter().map(|i| i.name.clone()).collect();
        for c in inline_kernel_rules(&names, true) {
            println!("{}", c.join(" "));
        }
        return Ok(ExitCode::SUCCESS);
    }
    if a.print_kernel_rules {
        for c in kernel_rules(cfg.nfqueue.queue, workers, &hooks, true) {
            println!("{}", c.join(" "));
        }
        return Ok(ExitCode::SUCCESS);
    }
    install_signals();
    // every queue bound first (errors before anything starts), then the kernel rules: no
    // packet is queued before weir listens
    let mut ws = Vec::new();
    if let Some(router) = router {
        for (f, what) in [
            ("/proc/sys/net/ipv4/ip_forward", "net.ipv4.ip_forward"),
            (
                "/proc/sys/net/ipv6/conf/all/forwarding",
                "net.ipv6.conf.all.forwarding",
            ),
        ] {
            anyhow::ensure!(
                std::fs::read_to_string(f).map_or(true, |v| v.trim() == "0"),
                "inline mode: the kernel forwards too ({what} = 1): set it to 0, or use mode \"nfqueue\""
            );
        }
        anyhow::ensure!(
            matches!(cfg.io.as_str(), "auto" | "xdp" | "afpacket"),
            "io: auto, xdp or afpacket"
        );
        let n = workers;
        // per worker, its ports (and in AF_XDP mode the ARP side sockets)
        let mut links: Vec<(Vec<Link>, Vec<Option<weir_io::afpacket::Port>>)> = Vec::new();
        if n == 1 {
            let mut ports = Vec::new();
            let mut arp = Vec::new();
            for i in &cfg.interface {
                let l = Link::open(&i.name, &cfg.io, cfg.nfqueue.batch)?;
                arp.push(match l {
                    Link::Xdp(_) => Some(weir_io::afpacket::Port::open(&i.name, 64)?),
                    Link::Packet(_) => None,
                });
                ports.push(l);
            }
            links.push((ports, arp));
        } else if let Some(xdp) = xdp_workers(&cfg, n)? {
            links = xdp;
        } else {
            let prog = weir_io::steer::program();
            links.resize_with(n as usize, || (Vec::new(), Vec::new()));
            // the sockets of an interface join its group in worker order: member w is worker w
            for i in &cfg.interface {
                let mut group = None;
                for (ports, arp) in links.iter_mut() {
                    let p = weir_io::afpacket::Port::open_ring(&i.name)?;
                    group = Some(p.join_fanout(group, &prog)?);
                    ports.push(Link::Packet(Box::new(p)));
                    arp.push(None);
                }
            }
        }
        let shared = (n > 1).then(|| Arc::new(weir_router::SharedNeighbours::default()));
        let xdp_steer = links
            .first()
            .is_some_and(|(p, _)| p.iter().any(|l| matches!(l, Link::Xdp(_))));
        let mut hands = if n > 1 {
            crate::handoff::Handoff::group(n as usize)?
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
        let engs = engines(&rs, links.len());
        let icmp_peers = Arc::new(Mutex::new(weir_router::ratelimit::PeerLimit::default()));
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
            let mut sf = stateful(eng, &cfg);
            if n > 1 {
                sf.steer = Some((n as u32, w as u32));
            }
            ws.push(Worker {
                idx: w,
                io: Io::Inline(Inline {
                    ports,
                    arp,
                    router,
                    fwd: Vec::new(),
                    ports_names: cfg.interface.iter().map(|i| i.name.clone()).collect(),
                    mtu_read: now_ns(),
                    held: Held::default(),
                    polled: 0,
                    fds: Vec::new(),
                    handoff: hands.next(),
                }),
                trace: None,
                sf,
                counts: Counts::default(),
                ifs: IfNames::default(),
                copy_mode: String::new(),
                copy: 0,
                answers: None,
            });
        }
    }
    let queues = if inline { 0 } else { workers };
    let icmp_peers = Arc::new(Mutex::new(weir_router::ratelimit::PeerLimit::default()));
    for (i, eng) in (0..queues).zip(engines(&rs, queues as usize)) {
        let sf = stateful(eng, &cfg);
        let copy = copy_range(&cfg.nfqueue.copy, &sf);
        let q = Queue::open(
            cfg.nfqueue.queue + i,
            &nfqueue::Options {
                max_len: cfg.nfqueue.max_len,
                fail_open: cfg.nfqueue.fail_open,
                batch: cfg.nfqueue.batch,
                copy_range: copy,
            },
        )?;
        ws.push(Worker {
            idx: i as usize,
            io: Io::Nfq(q),
            trace: None,
            sf,
            counts: Counts::default(),
            ifs: IfNames::default(),
            copy_mode: cfg.nfqueue.copy.clone(),
            copy,
            answers: Some(Answers::new(weir_router::IcmpLimits::new(
                workers,
                Arc::clone(&icmp_peers),
            ))),
        });
    }
    let _kernel = if inline {
        let names: Vec<String> = cfg.interface.iter().map(|i| i.name.clone()).collect();
        Some(install(
            inline_kernel_rules(&names, true),
            inline_kernel_rules(&names, false),
        )?)
    } else if cfg.nfqueue.install {
        let q = cfg.nfqueue.queue;
        Some(install(
            kernel_rules(q, workers, &hooks, true),
            kernel_rules(q, workers, &hooks, false),
        )?)
    } else {
        None
    };
    let (ctl_tx, ctl_rx) = mpsc::channel::<CtlRequest>();
    if let Some(p) = &cfg.control.socket {
        control_thread(p.clone(), ctl_tx.clone())?;
    }
    if !cfg.metrics.address.is_empty() {
        metrics_thread(&cfg.metrics.address, ctl_tx)?;
    }
    let mut senders = Vec::new();
    let mut threads = Vec::new();
    for w in ws {
        let (tx, rx) = mpsc::channel::<Msg>();
        senders.push(tx);
        threads.push(
            std::thread::Builder::new()
                .name(format!("weir-worker-{}", w.idx))
                .spawn(move || w.run(rx))
                .context("starting a worker thread")?,
        );
    }
    let mut d = Dispatcher {
        workers: senders,
        rules,
        reloads: 0,
        reload_errors: 0,
        started: Instant::now(),
        cpu0: cpu_seconds(),
        nfqueue: !inline,
    };
    println!(
        "weir run: {} {} ({} worker{}; {}), ruleset {}; ready",
        cfg.mode,
        if inline {
            cfg.interface
                .iter()
                .map(|i| i.name.as_str())
                .collect::<Vec<_>>()
                .join(" ")
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
    while !STOP.load(Ordering::Relaxed) {
        if RELOAD.swap(false, Ordering::Relaxed) {
            let r = d.reload();
            if r.starts_with("error") {
                eprint!("{r}");
            } else {
                print!("{r}");
            }
        }
        match ctl_rx.recv_timeout(std::time::Duration::from_millis(100)) {
            Ok((w, reply)) => d.dispatch(w, reply),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                std::thread::sleep(std::time::Duration::from_millis(100))
            }
        }
    }
    let mut report = d.header();
    let mut lines = String::new();
    for t in threads {
        lines.push_str(&t.join().unwrap_or_else(|_| "a worker panicked\n".into()));
    }
    report.push_str(&lines);
    report.push_str(&per_packet(d.cpu0, &lines));
    eprint!("{report}");
    if let Some(p) = &cfg.control.socket {
        let _ = std::fs::remove_file(p);
    }
    Ok(ExitCode::SUCCESS)
}

/// CPU time per packet handled since `cpu0`, from the workers' status lines.
fn per_packet(cpu0: (f64, f64), workers: &str) -> String {
    let packets: u64 = workers
        .lines()
        .filter_map(|l| {
            let i = l.find(": packets ")?;
            l[i + 10..].split_whitespace().next()?.parse::<u64>().ok()
        })
        .sum();
    let (u, sy) = cpu_seconds();
    let cpu = (u - cpu0.0) + (sy - cpu0.1);
    format!(
        "packets {packets}, cpu {:.2} us per packet\n",
        if packets > 0 {
            cpu * 1e6 / packets as f64
        } else {
            0.0
        }
    )
}

/// The main thread between the control socket and the workers: reloads (the ruleset is
/// checked once, then every worker gets its engine), and every request asked of all workers
/// with their answers merged.
struct Dispatcher {
    workers: Vec<mpsc::Sender<Msg>>,
    rules: PathBuf,
    reloads: u64,
    reload_errors: u64,
    started: Instant,
    cpu0: (f64, f64),
    /// NFQUEUE mode (NAT refused on reload too).
    nfqueue: bool,
}

impl Dispatcher {
    fn reload(&mut self) -> String {
        match load(&self.rules, self.nfqueue) {
            Ok(rs) => {
                let acks: Vec<_> = self
                    .workers
                    .iter()
                    .zip(engines(&rs, self.workers.len()))
                    .map(|(w, eng)| {
                        let (tx, rx) = mpsc::channel();
                        let _ = w.send(Msg::Reload(Box::new(eng), tx));
                        rx
                    })
                    .collect();
                for a in acks {
                    let _ = a.recv_timeout(std::time::Duration::from_secs(5));
                }
                self.reloads += 1;
                format!("reloaded {}\n", self.rules.display())
            }
            Err(e) => {
                self.reload_errors += 1;
                format!(
                    "error: {} refused, the running ruleset stays:\n{e}",
                    self.rules.display()
                )
            }
        }
    }

    /// Process-wide lines of `status`.
    fn header(&self) -> String {
        let (u, sy) = cpu_seconds();
        let (u, sy) = (u - self.cpu0.0, sy - self.cpu0.1);
        format!(
            "weir run: {} worker(s), up {:.1} s\nreloads {} (refused {})\ncpu {:.3} s (user {:.3} s, system {:.3} s)\n",
            self.workers.len(),
            self.started.elapsed().as_secs_f64(),
            self.reloads,
            self.reload_errors,
            u + sy,
            u,
            sy
        )
    }

    /// Ask every worker; the answers in worker order.
    fn ask_all(&self, w: &[String]) -> Vec<mpsc::Receiver<String>> {
        self.workers
            .iter()
            .map(|tx| {
                let (rtx, rrx) = mpsc::channel();
                let _ = tx.send(Msg::Ctl(w.to_vec(), rtx));
                rrx
            })
            .collect()
    }

    fn dispatch(&mut self, w: Vec<String>, reply: mpsc::Sender<String>) {
        let words: Vec<&str> = w.iter().map(String::as_str).collect();
        if words.as_slice() == ["reload"] {
            let _ = reply.send(self.reload());
            return;
        }
        if words.first() == Some(&"trace") {
            self.dispatch_trace(&w, reply);
            return;
        }
        let wait = std::time::Duration::from_secs(5);
        let rxs = self.ask_all(&w);
        let cpu0 = (words.as_slice() == ["status"]).then_some(self.cpu0);
        let head = match words.as_slice() {
            ["status"] => Some(self.header()),
            ["metrics"] => Some(self.process_metrics()),
            _ => None,
        };
        let kind = match words.as_slice() {
            ["counters"] => Merge::Counters,
            ["metrics"] => Merge::Metrics,
            ["ct", "count", ..] => Merge::Sum,
            ["ct", "flush", ..] => Merge::Flushed,
            ["set", "add" | "del", ..] => Merge::Same,
            _ => Merge::Concat,
        };
        // gathered on a thread of its own: a trace may wait for its packets
        std::thread::spawn(move || {
            let answers: Vec<String> = rxs
                .into_iter()
                .map(|r| {
                    r.recv_timeout(wait)
                        .unwrap_or_else(|_| "error: a worker did not answer\n".into())
                })
                .collect();
            let mut out = head.unwrap_or_default();
            let merged = merge(kind, &answers);
            out.push_str(&merged);
            if let Some(cpu0) = cpu0 {
                out.push_str(&per_packet(cpu0, &merged));
            }
            let _ = reply.send(out);
        });
    }

    /// A trace runs on every worker (a connection's packets reach one of them); it ends when
    /// N packets were traced in all, every worker finished, or the time is up.
    fn dispatch_trace(&self, w: &[String], reply: mpsc::Sender<String>) {
        let n: usize = w.get(1).and_then(|n| n.parse().ok()).unwrap_or(10).max(1);
        let rxs = self.ask_all(w);
        let senders = self.workers.clone();
        std::thread::spawn(move || {
            let until = Instant::now() + std::time::Duration::from_secs(TRACE_SECONDS + 5);
            let mut got: Vec<Option<String>> = vec![None; rxs.len()];
            let traced = |got: &[Option<String>]| -> usize {
                got.iter()
                    .flatten()
                    .map(|a| a.lines().filter(|l| l.starts_with('#')).count())
                    .sum()
            };
            loop {
                for (g, r) in got.iter_mut().zip(&rxs) {
                    if g.is_none() {
                        *g = r.try_recv().ok();
                    }
                }
                if got.iter().all(Option::is_some) || traced(&got) >= n || Instant::now() >= until {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            for s in &senders {
                let (tx, _) = mpsc::channel();
                let _ = s.send(Msg::Ctl(vec!["trace-stop".into()], tx));
            }
            for (g, r) in got.iter_mut().zip(&rxs) {
                if g.is_none() {
                    *g = r.recv_timeout(std::time::Duration::from_millis(500)).ok();
                }
            }
            let answers: Vec<String> = got.into_iter().flatten().collect();
            if let Some(e) = answers.iter().find(|a| a.starts_with("error")) {
                let _ = reply.send(e.clone());
                return;
            }
            let mut out: String = answers
                .iter()
                .flat_map(|a| a.lines())
                .filter(|l| !l.starts_with("(trace ended"))
                .map(|l| format!("{l}\n"))
                .collect();
            let seen = out.lines().filter(|l| l.starts_with('#')).count();
            if seen < n {
                out.push_str(&format!(
                    "(trace ended after {seen} packet(s): no more matched within {TRACE_SECONDS} s)\n"
                ));
            }
            let _ = reply.send(out);
        });
    }

    fn process_metrics(&self) -> String {
        let (u, sy) = cpu_seconds();
        format!(
            "# HELP weir_reloads_total Ruleset reloads.\n# TYPE weir_reloads_total counter\nweir_reloads_total {}\n# HELP weir_reload_errors_total Reloads refused (the ruleset had errors).\n# TYPE weir_reload_errors_total counter\nweir_reload_errors_total {}\n# HELP weir_cpu_seconds_total CPU time of weir.\n# TYPE weir_cpu_seconds_total counter\nweir_cpu_seconds_total{{mode=\"user\"}} {}\nweir_cpu_seconds_total{{mode=\"system\"}} {}\n# HELP weir_workers Worker threads (one queue each).\n# TYPE weir_workers gauge\nweir_workers {}\n",
            self.reloads,
            self.reload_errors,
            u - self.cpu0.0,
            sy - self.cpu0.1,
            self.workers.len()
        )
    }
}

#[derive(Clone, Copy)]
enum Merge {
    /// The workers' texts one after the other.
    Concat,
    /// One answer when all agree.
    Same,
    /// Numbers summed.
    Sum,
    /// "flushed N entries", N summed.
    Flushed,
    /// Per-rule counter lines summed line by line (every worker runs the same ruleset).
    Counters,
    /// Prometheus series summed by name and labels (`HELP`/`TYPE` lines once).
    Metrics,
}

/// A line after its first two words.
fn after_two_words(l: &str) -> &str {
    let mut t = l.trim_start();
    for _ in 0..2 {
        t = t
            .trim_start_matches(|c: char| !c.is_whitespace())
            .trim_start();
    }
    t
}

fn merge(kind: Merge, answers: &[String]) -> String {
    if let Some(e) = answers.iter().find(|a| a.starts_with("error")) {
        return e.clone();
    }
    match kind {
        Merge::Concat => answers.concat(),
        Merge::Same => {
            if answers.windows(2).all(|w| w[0] == w[1]) {
                answers.first().cloned().unwrap_or_default()
            } else {
                answers.concat()
            }
        }
        Merge::Sum => format!(
            "{}\n",
            answers
                .iter()
                .map(|a| a.trim().parse::<u64>().unwrap_or(0))
                .sum::<u64>()
        ),
        Merge::Flushed => format!(
            "flushed {} entries\n",
            answers
                .iter()
                .filter_map(|a| a.split_whitespace().nth(1)?.parse::<u64>().ok())
                .sum::<u64>()
        ),
        Merge::Counters => {
            let mut lines: Vec<(u64, u64, String)> = Vec::new();
            for a in answers {
                for (i, l) in a.lines().enumerate() {
                    let mut it = l.split_whitespace();
                    let (pk, by) = (
                        it.next().and_then(|v| v.parse().ok()).unwrap_or(0u64),
                        it.next().and_then(|v| v.parse().ok()).unwrap_or(0u64),
                    );
                    let rest = after_two_words(l);
                    match lines.get_mut(i) {
                        Some(x) => {
                            x.0 += pk;
                            x.1 += by;
                        }
                        None => lines.push((pk, by, rest.to_string())),
                    }
                }
            }
            lines
                .into_iter()
                .map(|(pk, by, rest)| format!("{pk:>12} {by:>14}  {rest}\n"))
                .collect()
        }
        Merge::Metrics => {
            let mut order: Vec<String> = Vec::new();
            let mut sums: HashMap<String, f64> = HashMap::new();
            for a in answers {
                for l in a.lines() {
                    if l.starts_with('#') {
                        if !order.iter().any(|o| o == l) {
                            order.push(l.to_string());
                        }
                        continue;
                    }
                    let Some((key, v)) = l.rsplit_once(' ') else {
                        continue;
                    };
                    let v: f64 = v.parse().unwrap_or(0.0);
                    match sums.get_mut(key) {
                        Some(x) => *x += v,
                        None => {
                            sums.insert(key.to_string(), v);
                            order.push(key.to_string());
                        }
                    }
                }
            }
            order
                .into_iter()
                .map(|k| match sums.get(&k) {
                    Some(v) => format!("{k} {v}\n"),
                    None => format!("{k}\n"),
                })
                .collect()
        }
    }
}

pub fn ctl(a: CtlArgs) -> anyhow::Result<ExitCode> {
    let mut s = UnixStream::connect(&a.socket)
        .with_context(|| format!("control socket {} (is weir running?)", a.socket.display()))?;
    s.write_all(format!("{}\n", a.command.join(" ")).as_bytes())?;
    s.shutdown(std::net::Shutdown::Write)?;
    let mut out = String::new();
    std::io::Read::read_to_string(&mut s, &mut out)?;
    print!("{out}");
    Ok(if out.starts_with("error") {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn answers_of_workers_merge() {
        let a = format!(
            "{:>12} {:>14}  inet f fwd  tcp dport 80 accept\n{:>12} {:>14}  inet f fwd  drop\n",
            3, 300, 1, 60
        );
        let b = format!(
            "{:>12} {:>14}  inet f fwd  tcp dport 80 accept\n{:>12} {:>14}  inet f fwd  drop\n",
            2, 200, 0, 0
        );
        let m = merge(Merge::Counters, &[a, b]);
        assert_eq!(
            m,
            format!(
                "{:>12} {:>14}  inet f fwd  tcp dport 80 accept\n{:>12} {:>14}  inet f fwd  drop\n",
                5, 500, 1, 60
            )
        );
        let m = merge(
            Merge::Metrics,
            &[
                "# TYPE weir_packets_total counter\nweir_packets_total 3\nweir_x{a=\"b c\"} 1\n"
                    .into(),
                "# TYPE weir_packets_total counter\nweir_packets_total 4\nweir_x{a=\"b c\"} 2\n"
                    .into(),
            ],
        );
        assert_eq!(
            m,
            "# TYPE weir_packets_total counter\nweir_packets_total 7\nweir_x{a=\"b c\"} 3\n"
        );
        assert_eq!(merge(Merge::Sum, &["2\n".into(), "5\n".into()]), "7\n");
        assert_eq!(
            merge(
                Merge::Flushed,
                &["flushed 2 entries\n".into(), "flushed 1 entries\n".into()]
            ),
            "flushed 3 entries\n"
        );
        assert_eq!(
            merge(Merge::Same, &["added\n".into(), "added\n".into()]),
            "added\n"
        );
        assert!(merge(Merge::Concat, &["x\n".into(), "error: no\n".into()]).starts_with("error"));
    }

    /// A worker's engine for a ruleset text, with a default connection table.
    fn stateful_of(text: &str) -> Stateful {
        let rs = weir_lang::load_str("t.nft", text)
            .map_err(|_| "ruleset")
            .unwrap()
            .0;
        Stateful::new(engine(&rs), weir_conntrack::Config::default())
    }

    #[test]
    fn nfqueue_answers_rejected_packets() {
        use std::net::{Ipv4Addr, Ipv6Addr};
        use weir_io::nfqueue::{SKB_CSUMNOTREADY, SKB_CSUM_NOTVERIFIED};
        use weir_wire::build::{Builder, Tcp};
        let text = r#"table inet f {
  chain fwd {
    type filter hook forward priority 0; policy accept;
    tcp dport 23 reject with tcp reset
    udp dport 9 reject
    ip6 daddr 2001:db8::4 reject with icmpv6 admin-prohibited
  }
  chain out { type filter hook output priority 0; tcp sport 7 tcp flags & rst == rst drop; }
}
"#;
        let mut sf = stateful_of(text);
        let mut ifs = IfNames::default();
        let (c, s) = (Ipv4Addr::new(198, 18, 20, 2), Ipv4Addr::new(198, 18, 21, 2));
        // a forwarded packet as the queue gives it
        fn queued(payload: &[u8], skb_info: u32) -> nfqueue::Packet<'_> {
            nfqueue::Packet {
                id: 1,
                hw_protocol: 0x0800,
                hook: 2,
                mark: 0,
                indev: 0,
                outdev: 0,
                payload,
                cap_len: None,
                skb_info,
            }
        }
        let mut ask = |payload: &[u8], skb_info: u32| {
            let mut buf = payload.to_vec();
            process(&mut sf, &queued(payload, skb_info), &mut buf, &mut ifs, 1)
        };
        // a SYN whose checksum the sender's offload fills in later: answered with RST|ACK
        // from the address and port it was sent to
        let mut syn = Builder::raw().tcp(c, s, &Tcp::new(40000, 23, 0x02).seq(7), &[]);
        let n = syn.len();
        syn[n - 3] ^= 0xff; // (inside the checksum: as a partial checksum, not the real one)
        let (d, _, a) = ask(&syn, SKB_CSUMNOTREADY);
        assert!(matches!(d, Decision::Drop(DropReason::Reject(_))));
        let Some(NfqAnswer::Packet(rst)) = a else {
            panic!("no reset")
        };
        let pm = PacketMeta::parse(&rst, LinkType::RawIp);
        assert_eq!(
            (pm.saddr, pm.daddr),
            (u32::from(s) as u128, u32::from(c) as u128)
        );
        assert_eq!((pm.sport, pm.dport, pm.tcp_flags), (23, 40000, 0x14));
        assert!(pm.transport_checksum_ok(&rst) && pm.ipv4_checksum_ok(&rst));
        // the same segment not yet verified by anybody: its checksum is wrong, no answer
        assert!(ask(&syn, SKB_CSUM_NOTVERIFIED).2.is_none());
        // the reset passes weir's output hook, which may drop it
        let syn7 = Builder::raw().tcp(c, s, &Tcp::new(40001, 7, 0x02), &[]);
        let mut sf7 = stateful_of(&text.replace("tcp dport 23 reject", "tcp dport 7 reject"));
        let mut buf = syn7.clone();
        let p = queued(&syn7, 0);
        let (d, _, a) = process(&mut sf7, &p, &mut buf, &mut IfNames::default(), 1);
        assert!(matches!(d, Decision::Drop(DropReason::Reject(_))) && a.is_none());
        // ICMP errors quote the packet as it arrived, to its sender, from the address the
        // kernel picks, through weir's output hook carrying the packet's connection
        let udp = Builder::raw().udp(c, s, 5000, 9, b"x");
        let router = u32::from(Ipv4Addr::new(198, 18, 20, 1)) as u128;
        let whole = |sf: &mut Stateful, a: Option<NfqAnswer>| {
            let a = a.expect("an ICMP answer");
            assert!(matches!(a, NfqAnswer::Icmp { .. }));
            a.packet(sf, Addr::v4(router as u32), 1)
        };
        match ask(&udp, 0).2 {
            Some(NfqAnswer::Icmp {
                typ: 3,
                code: 3,
                ref quote,
                to,
                ..
            }) => {
                assert_eq!(quote, &udp);
                assert_eq!(to, Addr::from(c));
            }
            _ => panic!("no port unreachable"),
        }
        let mut sfw = stateful_of(text);
        let mut buf = udp.clone();
        let (_, _, a) = process(
            &mut sfw,
            &queued(&udp, 0),
            &mut buf,
            &mut IfNames::default(),
            1,
        );
        let e = whole(&mut sfw, a).expect("the error passes an output hook that lets it");
        let pm = PacketMeta::parse(&e, LinkType::RawIp);
        assert_eq!((pm.saddr, pm.daddr), (router, u32::from(c) as u128));
        assert!(pm.ipv4_checksum_ok(&e));
        let l4 = pm.l4_off as usize;
        assert_eq!((e[l4], e[l4 + 1]), (3, 3));
        assert_eq!(weir_wire::checksum::checksum(&e[l4..]), 0);
        assert_eq!(&e[l4 + 8..], &udp[..]);
        // an output chain that drops related ICMP (the error carries the connection) stops it
        let mut sfo = stateful_of(&format!(
            "{text}\ntable inet o {{ chain out {{ type filter hook output priority 0; meta l4proto icmp ct state related drop; }} }}\n"
        ));
        let mut buf = udp.clone();
        let (_, _, a) = process(
            &mut sfo,
            &queued(&udp, 0),
            &mut buf,
            &mut IfNames::default(),
            1,
        );
        assert!(whole(&mut sfo, a).is_none(), "dropped by the output hook");
        let (c6, s6): (Ipv6Addr, Ipv6Addr) = (
            "2001:db8::2".parse().unwrap(),
            "2001:db8::4".parse().unwrap(),
        );
        let udp6 = Builder::raw().udp(c6, s6, 5000, 53, b"x");
        assert!(matches!(
            ask(&udp6, 0).2,
            Some(NfqAnswer::Icmp {
                typ: 1,
                code: 1,
                to,
                ..
            }) if to == Addr::from(c6)
        ));
    }

    #[test]
    fn filters_parse_and_match() {
        let f = Filter::parse(&["proto", "udp", "addr", "198.18.0.1", "port", "53"]).unwrap();
        let t = weir_conntrack::Tuple {
            src: u32::from(std::net::Ipv4Addr::new(198, 18, 0, 1)) as u128,
            dst: 7,
            sport: 40000,
            dport: 53,
            proto: 17,
            v6: false,
        };
        assert!(f.matches(&[t]));
        assert!(!f.matches(&[weir_conntrack::Tuple { proto: 6, ..t }]));
        assert!(!f.matches(&[weir_conntrack::Tuple { dport: 54, ..t }]));
        assert!(!f.matches(&[weir_conntrack::Tuple { v6: true, ..t }]));
        assert!(Filter::parse(&["proto"]).is_err());
        assert!(Filter::parse(&["port", "70000"]).is_err());
        assert!(Filter::parse(&["colour", "red"]).is_err());
    }
}
