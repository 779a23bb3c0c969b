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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Instant;
use weir_engine::fib::{AddrMap, Lpm};
use weir_engine::stateful::{FtDevices, PacketCt, Stateful};
use weir_engine::{Compiled, Decision, DropReason, Engine, Meta, Mode};
use weir_io::nfqueue::{self, Queue, Verdict};
use weir_lang::ir::Hook;
use weir_wire::{LinkType, PacketMeta};

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
/// (2): its source must have a route at all; `off` (0, the default).
#[derive(Deserialize, Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RpFilter {
    #[default]
    Off,
    Loose,
    Strict,
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
        v6: bool,
        typ: u8,
        code: u8,
        quote: Vec<u8>,
        to: u128,
        ct: Box<PacketCt>,
        iif: u128,
    },
}

impl NfqAnswer {
    /// The IP packet to send: a reset as it is; an ICMP or ICMPv6 error made whole from
    /// address `src` and taken through weir's output and postrouting hooks (`local_out`,
    /// attached to the connection of the packet it answers, as the kernel's `icmp_send`
    /// does). None when the hooks drop it.
    fn packet(self, sf: &mut Stateful, src: u128, now: u64) -> Option<Vec<u8>> {
        let (v6, typ, code, quote, to, ct, iif) = match self {
            NfqAnswer::Packet(pkt) => return Some(pkt),
            NfqAnswer::Icmp {
                v6,
                typ,
                code,
                quote,
                to,
                ct,
                iif,
            } => (v6, typ, code, quote, to, ct, iif),
        };
        let addr = |a: u128| weir_lab::topology::from_bits(a, !v6);
        let mut frame = weir_wire::build::Builder::new().ttl(64).icmp(
            addr(src),
            addr(to),
            typ,
            code,
            0,
            &quote,
        );
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
    let v6 = pm.l3 == weir_wire::L3::Ipv6;
    // as Linux: no answer to a segment or datagram whose checksum is wrong (the kernel may
    // have checked it already, or left it to the sender's offload)
    if matches!(pm.l4proto, 6 | 17) && !p.checksum_trusted() && !pm.transport_checksum_ok(buf) {
        return None;
    }
    match reject_answer(sf.eng.rs.reject_of(g)?, v6)? {
        RejectAnswer::Icmp(typ, code) => icmp_answerable(buf, pm).then(|| NfqAnswer::Icmp {
            v6,
            typ,
            code,
            quote: buf[..pm.l3_end().min(buf.len()).min(icmp_quote_max(v6))].to_vec(),
            to: pm.saddr,
            ct: Box::new(sf.answer_ct(pc)),
            iif,
        }),
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
    bucket: Bucket,
    peers: Arc<Mutex<PeerLimit>>,
}

impl Answers {
    fn new(workers: u16, peers: Arc<Mutex<PeerLimit>>) -> Answers {
        Answers {
            sock: None,
            failed: false,
            bucket: Bucket::new(workers),
            peers,
        }
    }

    /// Send one answer, counted in `c` (an ICMP error first through the rate limits, then
    /// made whole and through weir's output hook).
    fn send(&mut self, sf: &mut Stateful, c: &mut Counts, a: NfqAnswer, now: u64) {
        let mut src = 0;
        if let NfqAnswer::Icmp { v6, to, .. } = a {
            // (the kernel's routes are not known here: IPv6 gets the period of a host route)
            let peer = PeerLimit::shared(&self.peers).allow(to, v6, PeerLimit::SECOND, now);
            if !(peer && self.bucket.take(now)) {
                c.icmp_limited += 1;
                return;
            }
            let dst = weir_lab::topology::from_bits(to, !v6);
            src = match weir_io::raw::source_for(dst) {
                Ok(std::net::IpAddr::V4(a)) => u32::from(a) as u128,
                Ok(std::net::IpAddr::V6(a)) => u128::from(a),
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

fn parse_addr(s: &str) -> anyhow::Result<(u128, bool)> {
    let a: std::net::IpAddr = s
        .trim()
        .parse()
        .with_context(|| format!("'{s}': an IPv4 or IPv6 address"))?;
    Ok(match a {
        std::net::IpAddr::V4(a) => (u32::from(a) as u128, false),
        std::net::IpAddr::V6(a) => (u128::from(a), true),
    })
}

pub(crate) fn parse_mac(s: &str) -> anyhow::Result<[u8; 6]> {
    let b: Vec<u8> = s
        .split(':')
        .map(|x| u8::from_str_radix(x, 16))
        .collect::<Result<_, _>>()
        .with_context(|| format!("'{s}': a MAC address (02:00:00:00:00:01)"))?;
    b.try_into()
        .map_err(|_| anyhow::anyhow!("'{s}': a MAC address has six bytes"))
}

/// A route: prefix (address, length, IPv6), output port, next hop.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Route {
    pub(crate) net: u128,
    pub(crate) len: u8,
    pub(crate) v6: bool,
    pub(crate) port: usize,
    pub(crate) via: Option<u128>,
}

/// What the inline router knows of the network: its ports' addresses, routes, neighbours.
#[derive(Clone)]
pub(crate) struct Net {
    /// Per port: its own addresses.
    addrs: Vec<Vec<(u128, bool)>>,
    /// Longest prefix first.
    routes: Vec<Route>,
    /// The routes' prefixes (longest-prefix match): index in `routes`.
    fib: Lpm<usize>,
    /// Next hops by (address, IPv6): the slot of their MAC in `macs`.
    neigh: AddrMap<(u128, bool), u32>,
    /// Next hops' MACs, changed in place when a neighbour's MAC changes.
    macs: Vec<[u8; 6]>,
    /// Adjacencies: what the route cache keeps in a connection (so a cached packet needs
    /// neither the FIB nor the neighbour table, nor the reverse path filter), and the index
    /// of each.
    adjs: Vec<Adj>,
    adj_of: AddrMap<Adj, u16>,
    /// Whether connections keep their adjacency (the route cache; off only to measure it).
    pub(crate) route_cache: bool,
    /// Per port: the reverse path filter of what arrives on it.
    pub(crate) rp_filter: Vec<RpFilter>,
    /// New neighbours not learnt because the table was full.
    neigh_refused: u64,
    names: Vec<u128>,
    /// Per port: the MTU of its link (the largest IP packet it carries), read when weir
    /// starts.
    mtu: Vec<usize>,
    /// The smallest of them: a packet no larger fits every port.
    min_mtu: usize,
    /// Several workers: the neighbours any of them learnt, and the generation of it this one
    /// has merged.
    shared: Option<Arc<SharedNeigh>>,
    seen: u64,
}

/// Neighbours learnt by any inline worker (ARP reaches one worker only): each worker keeps
/// its own map for the per-frame lookup and merges this one when its generation moves.
#[derive(Default)]
struct SharedNeigh {
    map: Mutex<NeighMap>,
    gen: AtomicU64,
}

/// Neighbours by (address, IPv6), hashed with a multiply-and-fold instead of SipHash (the
/// keys are next hops of the configuration or learnt on a directly attached link, not chosen
/// by remote senders).
type NeighMap = AddrMap<(u128, bool), [u8; 6]>;

/// The most neighbours a worker learns (Linux's `gc_thresh3` bounds its table the same way):
/// a sender on a link cannot grow the table without end.
const MAX_NEIGHBOURS: usize = 65_536;

/// The most adjacencies a worker keeps for its connections (the cache holds a `u16`).
const MAX_ADJACENCIES: usize = u16::MAX as usize - 1;

impl Net {
    fn build(cfg: &Config) -> anyhow::Result<Net> {
        anyhow::ensure!(
            cfg.interface.len() >= 2,
            "inline mode: at least two [[interface]] sections"
        );
        let port_of = |name: &str| {
            cfg.interface
                .iter()
                .position(|i| i.name == name)
                .ok_or_else(|| {
                    anyhow::anyhow!("route via interface '{name}': not an [[interface]]")
                })
        };
        let mut addrs = Vec::new();
        for i in &cfg.interface {
            addrs.push(
                i.address
                    .iter()
                    .map(|a| parse_addr(a))
                    .collect::<anyhow::Result<_>>()?,
            );
        }
        let mut routes = Vec::new();
        for r in &cfg.route {
            let (a, l) = r.prefix.split_once('/').unwrap_or((&r.prefix, ""));
            let (net, v6) = parse_addr(a)?;
            let max = if v6 { 128 } else { 32 };
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
                via.is_none_or(|(_, v)| v == v6),
                "route {}: the next hop is of the other family",
                r.prefix
            );
            routes.push(Route {
                net: net & mask(len, v6),
                len,
                v6,
                port: port_of(&r.interface)?,
                via: via.map(|v| v.0),
            });
        }
        let mut seen = std::collections::HashSet::new();
        for (r, rc) in routes.iter().zip(&cfg.route) {
            anyhow::ensure!(
                seen.insert((r.net, r.len, r.v6)),
                "route {}: configured twice",
                rc.prefix
            );
        }
        let names: Vec<u128> = cfg
            .interface
            .iter()
            .map(|i| weir_wire::field::ifname_value(&i.name))
            .collect();
        let mut net = Net::new(addrs, names, routes);
        net.rp_filter = cfg.interface.iter().map(|i| i.rp_filter).collect();
        for n in &cfg.neighbour {
            let (a, v6) = parse_addr(&n.address)?;
            anyhow::ensure!(
                net.macs.len() < MAX_NEIGHBOURS || net.neigh.contains_key(&(a, v6)),
                "neighbour {}: more than {MAX_NEIGHBOURS} neighbours",
                n.address
            );
            net.set_neigh(a, v6, parse_mac(&n.mac)?);
        }
        Ok(net)
    }

    /// A router of ports (their own addresses and names) and routes, with no neighbours and
    /// no MTU yet.
    pub(crate) fn new(addrs: Vec<Vec<(u128, bool)>>, names: Vec<u128>, routes: Vec<Route>) -> Net {
        let mut net = Net {
            addrs,
            routes: Vec::new(),
            fib: Lpm::new(),
            neigh: AddrMap::default(),
            macs: Vec::new(),
            adjs: Vec::new(),
            adj_of: AddrMap::default(),
            route_cache: true,
            rp_filter: vec![RpFilter::Off; names.len()],
            neigh_refused: 0,
            mtu: vec![usize::MAX; names.len()],
            min_mtu: usize::MAX,
            names,
            shared: None,
            seen: 0,
        };
        net.set_routes(routes);
        net
    }

    /// Replace the routing table (the first of equal prefixes wins).
    fn set_routes(&mut self, mut routes: Vec<Route>) {
        routes.sort_by_key(|r| std::cmp::Reverse(r.len));
        self.fib = Lpm::new();
        for (i, r) in routes.iter().enumerate() {
            if self.fib.exact(r.net, r.len, r.v6).is_none() {
                self.fib.insert(r.net, r.len, r.v6, i);
            }
        }
        self.routes = routes;
    }

    /// The longest prefix route to a destination: its index in `routes`.
    #[inline]
    fn route(&self, dst: u128, v6: bool) -> Option<usize> {
        self.fib.get(dst, v6).copied()
    }

    /// Set a neighbour's MAC; whether it changed. A new neighbour beyond
    /// [`MAX_NEIGHBOURS`] is not learnt.
    pub(crate) fn set_neigh(&mut self, a: u128, v6: bool, mac: [u8; 6]) -> bool {
        match self.neigh.get(&(a, v6)) {
            Some(&slot) => {
                let old = std::mem::replace(&mut self.macs[slot as usize], mac);
                old != mac
            }
            None if self.macs.len() < MAX_NEIGHBOURS => {
                self.neigh.insert((a, v6), self.macs.len() as u32);
                self.macs.push(mac);
                true
            }
            None => {
                self.neigh_refused += 1;
                false
            }
        }
    }

    #[cfg(test)]
    fn with_mtu(mut self, mtu: Vec<usize>) -> Net {
        self.set_mtu(mtu);
        self
    }

    #[cfg(test)]
    fn with_shared(mut self, shared: Arc<SharedNeigh>) -> Net {
        self.shared = Some(shared);
        self
    }

    /// The routing state for `weir ctl status`.
    fn describe(&self) -> String {
        format!(
            "routes {} (prefix lengths: IPv4 {}, IPv6 {}), neighbours {} (not learnt, table full: {}), adjacencies {}",
            self.fib.len(),
            self.fib.lengths(false),
            self.fib.lengths(true),
            self.macs.len(),
            self.neigh_refused,
            self.adjs.len()
        )
    }

    /// A neighbour's MAC.
    #[cfg(test)]
    fn neigh_mac(&self, a: u128, v6: bool) -> Option<[u8; 6]> {
        self.neigh.get(&(a, v6)).map(|&s| self.macs[s as usize])
    }

    /// The reverse path filter ([`RpFilter`]) of a packet from `src` arriving on `port`, as
    /// Linux's `fib_validate_source`: whether it passes. (IPv6 link-local sources are on
    /// every link.)
    #[inline]
    fn source_valid(&self, port: usize, src: u128, v6: bool) -> bool {
        match self.rp_filter[port] {
            RpFilter::Off => true,
            _ if v6 && src >> 118 == 0xfe80 >> 6 => true,
            RpFilter::Loose => self.route(src, v6).is_some(),
            RpFilter::Strict => self
                .route(src, v6)
                .is_some_and(|ri| self.routes[ri].port == port),
        }
    }

    /// The adjacency of route `ri` for a destination (the next hop: the route's gateway, or
    /// the destination on a link) and a packet arriving on `in_port`, or the next hop that
    /// has no MAC yet.
    #[inline]
    fn adjacency(&self, in_port: usize, ri: usize, daddr: u128, v6: bool) -> Result<Adj, Fate> {
        let r = &self.routes[ri];
        let hop = r.via.unwrap_or(daddr);
        match self.neigh.get(&(hop, v6)) {
            Some(&slot) => Ok(Adj {
                in_port,
                port: r.port,
                slot,
            }),
            None => Err(Fate::NoNeighbour {
                port: r.port,
                hop,
                v6,
            }),
        }
    }

    /// The index of an adjacency, made on first use (None when [`MAX_ADJACENCIES`] are
    /// made: the connection is not cached).
    fn adj_index(&mut self, adj: Adj) -> Option<u16> {
        if let Some(&i) = self.adj_of.get(&adj) {
            return Some(i);
        }
        if self.adjs.len() >= MAX_ADJACENCIES {
            return None;
        }
        let i = self.adjs.len() as u16;
        self.adjs.push(adj);
        self.adj_of.insert(adj, i);
        Some(i)
    }

    /// Out through an adjacency (after the hooks or the flowtable): the next hop's MAC and
    /// the port's own as the source.
    #[inline]
    fn output(&self, frame: &mut [u8], adj: Adj, out_macs: &[[u8; 6]]) -> Fate {
        frame[..6].copy_from_slice(&self.macs[adj.slot as usize]);
        frame[6..12].copy_from_slice(&out_macs[adj.port]);
        Fate::Out(adj.port)
    }

    /// Whether an address is on the link of a port (a route through it with no next hop;
    /// IPv6 link-local addresses are on every link).
    fn on_link(&self, port: usize, a: u128, v6: bool) -> bool {
        (v6 && a >> 118 == 0xfe80 >> 6)
            || self.routes.iter().any(|r| {
                r.port == port && r.v6 == v6 && r.via.is_none() && a & mask(r.len, v6) == r.net
            })
    }

    /// Learn a neighbour from an ARP or neighbour discovery frame read on `port`.
    fn learn(&mut self, port: usize, frame: &[u8]) {
        if let Some((ip, mac, v6)) = arp_sender(frame)
            .map(|(a, m)| (a, m, false))
            .or_else(|| nd_sender(frame).map(|(a, m)| (a, m, true)))
        {
            if self.on_link(port, ip, v6) && self.set_neigh(ip, v6, mac) {
                if let Some(sh) = &self.shared {
                    if let Ok(mut m) = sh.map.lock() {
                        m.insert((ip, v6), mac);
                    }
                    sh.gen.fetch_add(1, Ordering::Release);
                }
            }
        }
    }

    /// Take in what the other workers learnt (an atomic load when nothing changed).
    fn sync(&mut self) {
        let Some(sh) = &self.shared else { return };
        let sh = sh.clone();
        let g = sh.gen.load(Ordering::Acquire);
        if g != self.seen {
            if let Ok(m) = sh.map.lock() {
                let learnt: Vec<_> = m.iter().map(|(k, v)| (*k, *v)).collect();
                drop(m);
                for ((a, v6), mac) in learnt {
                    self.set_neigh(a, v6, mac);
                }
            }
            self.seen = g;
        }
    }

    /// Set the ports' MTUs.
    pub(crate) fn set_mtu(&mut self, mtu: Vec<usize>) {
        self.min_mtu = mtu.iter().copied().min().unwrap_or(usize::MAX);
        self.mtu = mtu;
    }

    fn is_own(&self, a: u128, v6: bool) -> bool {
        self.addrs.iter().flatten().any(|&x| x == (a, v6))
    }
}

/// The top `len` bits of an address of the family.
fn mask(len: u8, v6: bool) -> u128 {
    weir_wire::field::prefix_mask(len, v6)
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
    net: Net,
    /// When weir last asked for a next hop's MAC (ARP request), by address.
    asked: HashMap<(u128, bool), u64>,
    /// The frames of the batch being handled that leave: (frame index, output port).
    fwd: Vec<(usize, usize)>,
    ports_names: Vec<String>,
    icmp_bucket: Bucket,
    /// Shared by the workers, as Linux's `inet_peer` is.
    icmp_peers: Arc<Mutex<PeerLimit>>,
    /// When the sockets were last polled (ns).
    polled: u64,
    /// The poll set (ports, then side sockets) and the ports' MACs, built on the first batch.
    fds: Vec<libc::pollfd>,
    macs: Arc<[[u8; 6]]>,
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
        let mut mtu = self.net.mtu.clone();
        for (m, name) in mtu.iter_mut().zip(&self.ports_names) {
            if let Ok(new) = weir_io::afpacket::mtu(name) {
                if new != *m && log {
                    eprintln!("weir: {name}: MTU {m} -> {new}");
                }
                *m = new;
            }
        }
        if mtu != self.net.mtu {
            self.net.set_mtu(mtu);
        }
    }

    /// Carry out the fate of a frame read on port `pi`: drops counted, neighbour requests,
    /// ICMP errors and fragments sent. A frame that leaves whole is counted and its output
    /// port returned, for the caller to send it. `frame` gives the frame's bytes (read only
    /// on the rare paths that need them).
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
    ) -> Option<usize> {
        match fate {
            Fate::Kernel => {}
            Fate::Hold => {
                let f = frame(self);
                if let Some(dropped) = self.held.hold(pi, f, LinkType::Ethernet, now) {
                    c.packets += dropped as u64;
                    *c.dropped.entry("fragment").or_default() += dropped as u64;
                }
            }
            Fate::Drop(why) => {
                c.packets += 1;
                *c.dropped.entry(why).or_default() += 1;
            }
            Fate::Reset(rst) => {
                c.packets += 1;
                *c.dropped.entry("reject").or_default() += 1;
                c.resets += 1;
                self.ports[pi].push(&rst);
            }
            Fate::NoNeighbour { port, hop, v6 } => {
                c.packets += 1;
                *c.dropped.entry("no-neighbour").or_default() += 1;
                let last = self.asked.entry((hop, v6)).or_insert(0);
                if now.saturating_sub(*last) >= 1_000_000_000 {
                    *last = now;
                    if let Some(src) = self.net.addrs[port].iter().find(|a| a.1 == v6).map(|a| a.0)
                    {
                        let req = if v6 {
                            nd_solicit(self.macs[port], src, hop)
                        } else {
                            arp_request(self.macs[port], src as u32, hop as u32)
                        };
                        match &mut self.arp[port] {
                            Some(a) => a.push(&req),
                            None => self.ports[port].push(&req),
                        }
                    }
                }
            }
            Fate::Out(o) => {
                c.packets += 1;
                c.accepted += 1;
                c.rewritten += rewritten as u64;
                return Some(o);
            }
            Fate::Fragments(o) => {
                c.packets += 1;
                let f = frame(self);
                let l3 = PacketMeta::parse(&f, LinkType::Ethernet).l3_off as usize;
                match weir_wire::frag::fragment_ipv4(&f, l3, self.net.mtu[o]) {
                    Some(pieces) => {
                        c.accepted += 1;
                        c.rewritten += rewritten as u64;
                        c.fragmented += 1;
                        // the frames before it in the batch leave first (no
                        // reordering within a flow)
                        for &(j, p) in &self.fwd {
                            forward_frame(&mut self.ports, pi, j, p);
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
                *c.dropped.entry(why).or_default() += 1;
                let f = frame(self);
                let err = icmp_error(&self.net, pi, self.macs[pi], &f, typ, code, info);
                match err {
                    // as Linux (`icmpv4_mask_allow`, `icmpv6_mask_allow`), path MTU
                    // discovery is not rate-limited
                    Some(e)
                        if why == "too-big"
                            || (PeerLimit::shared(&self.icmp_peers)
                                .allow_to(&self.net, &e, now)
                                && self.icmp_bucket.take(now)) =>
                    {
                        if let Some(e) = answer_out(sf, &self.net, pi, e, *ct, now) {
                            c.icmp_errors += 1;
                            self.ports[pi].push(&e)
                        }
                    }
                    Some(_) => c.icmp_limited += 1,
                    None => {}
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

    fn mac(&self) -> [u8; 6] {
        match self {
            Link::Packet(p) => p.mac,
            Link::Xdp(p) => p.mac,
        }
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

/// Copy frame `i` of port `from`'s batch into port `to`'s output.
fn forward_frame(ports: &mut [Link], from: usize, i: usize, to: usize) {
    use std::cmp::Ordering as O;
    match from.cmp(&to) {
        O::Equal => {
            let f = ports[from].frame(i).to_vec();
            ports[to].push(&f);
        }
        O::Less => {
            let (a, b) = ports.split_at_mut(to);
            b[0].push(a[from].frame(i));
        }
        O::Greater => {
            let (a, b) = ports.split_at_mut(from);
            a[to].push(b[0].frame(i));
        }
    }
}

/// The sender of an ARP request or reply for IPv4 over Ethernet: (address, MAC).
fn arp_sender(f: &[u8]) -> Option<(u128, [u8; 6])> {
    if f.get(12..14)? != [0x08, 0x06] || f.get(14..22)? != [0, 1, 8, 0, 6, 4, 0, f[21]] {
        return None;
    }
    if !matches!(f[21], 1 | 2) {
        return None;
    }
    let mac: [u8; 6] = f.get(22..28)?.try_into().ok()?;
    let ip = u32::from_be_bytes(f.get(28..32)?.try_into().ok()?);
    if ip == 0 || mac[0] & 1 == 1 {
        return None;
    }
    Some((ip as u128, mac))
}

/// The sender of an IPv6 neighbour solicitation (its source address and source link-layer
/// option) or advertisement (its target address and target link-layer option), checked as
/// RFC 4861 says a node must (hop limit 255, code 0).
fn nd_sender(f: &[u8]) -> Option<(u128, [u8; 6])> {
    if f.get(12..14)? != [0x86, 0xdd] || *f.get(20)? != 58 || *f.get(21)? != 255 {
        return None;
    }
    let icmp = f.get(54..)?;
    let (typ, code) = (*icmp.first()?, *icmp.get(1)?);
    if code != 0 || !matches!(typ, 135 | 136) {
        return None;
    }
    let target = u128::from_be_bytes(icmp.get(8..24)?.try_into().ok()?);
    let src = u128::from_be_bytes(f.get(22..38)?.try_into().ok()?);
    let (addr, want) = if typ == 135 { (src, 1) } else { (target, 2) };
    if addr == 0 || addr >> 120 == 0xff {
        return None;
    }
    // options: type, length in units of 8 bytes, value
    let mut o = icmp.get(24..)?;
    while o.len() >= 8 {
        let len = o[1] as usize * 8;
        if len == 0 || len > o.len() {
            return None;
        }
        if o[0] == want && len == 8 {
            let mac: [u8; 6] = o[2..8].try_into().ok()?;
            return (mac[0] & 1 == 0).then_some((addr, mac));
        }
        o = &o[len..];
    }
    None
}

/// A neighbour solicitation for `target` from `src` (our address and MAC on the port), to the
/// target's solicited-node multicast address.
fn nd_solicit(mac: [u8; 6], src: u128, target: u128) -> Vec<u8> {
    let t = target.to_be_bytes();
    let group = (0xff02_u128 << 112) | (0x1_ff00_0000_u128) | (target & 0xff_ffff);
    let dst_mac = [0x33, 0x33, 0xff, t[13], t[14], t[15]];
    let mut body = t.to_vec();
    body.extend_from_slice(&[1, 1]);
    body.extend_from_slice(&mac);
    weir_wire::build::Builder::new()
        .macs(mac, dst_mac)
        .ttl(255)
        .icmp(
            std::net::Ipv6Addr::from(src),
            std::net::Ipv6Addr::from(group),
            135,
            0,
            0,
            &body,
        )
}

/// An ARP request for `target` from `src` (our address and MAC on the port).
fn arp_request(mac: [u8; 6], src: u32, target: u32) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&mac);
    f.extend_from_slice(&[0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1]);
    f.extend_from_slice(&mac);
    f.extend_from_slice(&src.to_be_bytes());
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&target.to_be_bytes());
    f.resize(60, 0);
    f
}

/// What the router does with one frame it read.
pub(crate) enum Fate {
    /// Not weir's to forward (not IP, not addressed to this port's MAC, to the router itself):
    /// the kernel handles it.
    Kernel,
    Drop(&'static str),
    /// Dropped: the next hop's MAC is unknown (IPv4: weir asks for it with ARP).
    NoNeighbour {
        port: usize,
        hop: u128,
        v6: bool,
    },
    /// Rewritten in place; out of this port.
    Out(usize),
    /// Rewritten in place, larger than the MTU of this port (IPv4 without "don't fragment"):
    /// out in fragments.
    Fragments(usize),
    /// Dropped, and the sender is told with an ICMP error (type, code, and the 32 bits after
    /// the checksum: the MTU of a "fragmentation needed" or "packet too big"), quoting the
    /// packet as it is now; the error carries the packet's connection (`ct`, from
    /// [`Stateful::answer_ct`]) through the output and postrouting hooks.
    Icmp {
        why: &'static str,
        typ: u8,
        code: u8,
        info: u32,
        ct: Box<PacketCt>,
    },
    /// Rejected with `reject with tcp reset`: this frame (the reset) goes back out of the
    /// arrival port.
    Reset(Vec<u8>),
    /// A later fragment that came before the first of its datagram: held until the first
    /// passes ([`Held`]).
    Hold,
}

impl Fate {
    /// What `weir ctl trace` says of it (`names`: the ports' interfaces).
    fn describe(&self, names: &[String]) -> String {
        match self {
            Fate::Kernel => "to the kernel (not weir's to forward)".to_string(),
            Fate::Drop(why) => format!("drop ({why})"),
            Fate::Icmp { why, typ, code, .. } => {
                format!("drop ({why}; ICMP error {typ}/{code} to the sender)")
            }
            Fate::Reset(_) => "drop (reject; TCP reset to the sender)".to_string(),
            Fate::Hold => "held (a later fragment before its first)".to_string(),
            Fate::NoNeighbour { .. } => "drop (no-neighbour)".to_string(),
            Fate::Out(o) => format!("forward out {}", names[*o]),
            Fate::Fragments(o) => format!("forward out {} in fragments", names[*o]),
        }
    }
}

/// The ICMP error for a frame weir read on port `port` (back to its sender, from the router's
/// address on that port), or None where RFC 1812 (and Linux's `icmp_send`) sends none: the
/// frame is an ICMP error itself, a fragment other than the first, to or from a multicast or
/// broadcast address, or the port has no address of the family.
#[allow(clippy::too_many_arguments)]
fn icmp_error(
    net: &Net,
    port: usize,
    mac: [u8; 6],
    frame: &[u8],
    typ: u8,
    code: u8,
    info: u32,
) -> Option<Vec<u8>> {
    let pm = PacketMeta::parse(frame, LinkType::Ethernet);
    let v6 = pm.l3 == weir_wire::L3::Ipv6;
    if frame[0] & 1 == 1 || !icmp_answerable(frame, &pm) {
        return None;
    }
    let src = net.addrs[port].iter().find(|a| a.1 == v6)?.0;
    let to_ip = |a: u128| weir_wire::field::ip_addr(a, v6);
    let l3 = pm.l3_off as usize;
    let original = &frame[l3..pm.l3_end().min(frame.len())];
    let keep = icmp_quote_max(v6);
    let dst_mac: [u8; 6] = frame[6..12].try_into().ok()?;
    Some(
        weir_wire::build::Builder::new()
            .macs(mac, dst_mac)
            .ttl(64)
            .icmp(
                to_ip(src),
                to_ip(pm.saddr),
                typ,
                code,
                info,
                &original[..keep.min(original.len())],
            ),
    )
}

/// The router's answer `e` (a TCP reset, an ICMP error) to a packet read on port `pi`, out
/// through the output and postrouting hooks towards that port, as the kernel sends its own
/// (`ip_local_out`), carrying the packet's connection (`ct`, from [`Stateful::answer_ct`]):
/// NAT gives it the addresses the sender knows (for an ICMP error, quote included:
/// `nf_nat_icmp_reply_translation`), and an output chain may drop it (None).
fn answer_out(
    sf: &mut Stateful,
    net: &Net,
    pi: usize,
    mut e: Vec<u8>,
    mut ct: PacketCt,
    now: u64,
) -> Option<Vec<u8>> {
    let v6 = PacketMeta::parse(&e, LinkType::Ethernet).l3 == weir_wire::L3::Ipv6;
    let mut meta = Meta::with_ifnames("", "");
    meta.oifname = net.names[pi];
    ct.oif_addr = net.addrs[pi].iter().find(|a| a.1 == v6).map(|a| a.0);
    sf.local_out(&mut e, meta, ct, now).is_accept().then_some(e)
}

/// Linux's per-destination limit of ICMP errors (`icmpv4_xrlim_allow`, `icmpv6_xrlim_allow`:
/// `inet_peer_xrlim_allow` with `icmp_ratelimit` 1 s), checked before the router-wide
/// [`Bucket`]: a burst of 6 errors to one address, then one per second (IPv6: more for wider
/// routes, 1 s >> ((128 - prefix length) / 32)). Addresses not heard from for the length of a
/// burst are forgotten when the table is full. One for all the workers.
#[derive(Default)]
struct PeerLimit {
    peers: HashMap<(u128, bool), (u64, u64)>,
}

impl PeerLimit {
    const BURST: u64 = 6;
    const MAX: usize = 8192;
    const SECOND: u64 = 1_000_000_000;

    /// The limit shared by the workers (a worker that panicked holding it left it usable).
    fn shared(p: &Mutex<PeerLimit>) -> std::sync::MutexGuard<'_, PeerLimit> {
        p.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether an error to `dst` may leave now (`period`: ns per error); takes a token.
    fn allow(&mut self, dst: u128, v6: bool, period: u64, now: u64) -> bool {
        if self.peers.len() >= Self::MAX && !self.peers.contains_key(&(dst, v6)) {
            let keep = Self::BURST * Self::SECOND;
            self.peers
                .retain(|_, &mut (_, last)| now.saturating_sub(last) < keep);
            if self.peers.len() >= Self::MAX {
                self.peers.clear();
            }
        }
        // a new destination starts with a full burst (Linux dates a new peer a minute back)
        let e = self
            .peers
            .entry((dst, v6))
            .or_insert((Self::BURST * period, now));
        let tokens = (e.0 + now.saturating_sub(e.1)).min(Self::BURST * period);
        e.1 = now;
        if tokens >= period {
            e.0 = tokens - period;
            true
        } else {
            e.0 = tokens;
            false
        }
    }

    /// [`PeerLimit::allow`] for ICMP error frame `e` built by [`icmp_error`], with the
    /// period Linux gives its destination (IPv6: by the prefix length of the route to it).
    fn allow_to(&mut self, net: &Net, e: &[u8], now: u64) -> bool {
        let pm = PacketMeta::parse(e, LinkType::Ethernet);
        let v6 = pm.l3 == weir_wire::L3::Ipv6;
        let period = if v6 {
            let plen = net
                .route(pm.daddr, v6)
                .map_or(128, |i| net.routes[i].len as u64);
            Self::SECOND >> ((128 - plen.min(128)) >> 5)
        } else {
            Self::SECOND
        };
        self.allow(pm.daddr, v6, period, now)
    }
}

/// A token bucket for the ICMP errors weir sends (Linux's `icmp_msgs_per_sec` and
/// `icmp_msgs_burst`: 1000 per second, bursts of 50).
struct Bucket {
    tokens: f64,
    at: u64,
    rate: f64,
    burst: f64,
}

impl Bucket {
    const RATE: f64 = 1000.0;
    const BURST: f64 = 50.0;

    /// The bucket of one worker of `share`: the router's rate and burst divided among them.
    fn new(share: u16) -> Bucket {
        let share = share.max(1) as f64;
        let burst = (Bucket::BURST / share).max(1.0);
        Bucket {
            tokens: burst,
            at: 0,
            rate: Bucket::RATE / share,
            burst,
        }
    }

    fn take(&mut self, now: u64) -> bool {
        let dt = now.saturating_sub(self.at) as f64 / 1e9;
        self.at = now;
        self.tokens = (self.tokens + dt * self.rate).min(self.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Decrement the TTL (hop limit) of a frame's IP header at `l3`, updating the IPv4 header
/// checksum as Linux does.
fn dec_ttl(frame: &mut [u8], l3: usize, v6: bool) {
    if v6 {
        frame[l3 + 7] -= 1;
    } else {
        frame[l3 + 8] -= 1;
        let c = u16::from_be_bytes([frame[l3 + 10], frame[l3 + 11]]);
        frame[l3 + 10..l3 + 12]
            .copy_from_slice(&weir_lab::model::kernel_ttl_checksum(c).to_be_bytes());
    }
}

/// [`route_frame`] for a worker, `frame` parsed as `pm`: traced if a trace asks for it, and
/// whether its headers were rewritten (NAT, header writes).
#[allow(clippy::too_many_arguments)]
fn decide(
    sf: &mut Stateful,
    trace: &mut Option<Trace>,
    net: &mut Net,
    names: &[String],
    macs: &[[u8; 6]],
    frame: &mut [u8],
    pm: PacketMeta,
    pi: usize,
    devs: FtDevices,
    now: u64,
) -> (Fate, bool) {
    let traced =
        trace.is_some() && !matches!(pm.l3, weir_wire::L3::Other(_)) && trace_wants(trace, &pm);
    let before = traced.then(|| sf.eng.st.rule_hits.clone());
    let summary = traced.then(|| frame_summary(frame, names[pi].as_str()));
    let writes = sf.stats.nat_rewritten + sf.stats.header_writes;
    let fate = route_frame(sf, net, frame, pm, pi, macs[pi], macs, devs, now);
    let rewritten = sf.stats.nat_rewritten + sf.stats.header_writes != writes;
    if let (Some(before), Some(summary)) = (before, summary) {
        trace_packet(trace, sf, &summary, &before, &fate.describe(names));
    }
    (fate, rewritten)
}

/// What becomes of a packet the hooks dropped: a counted drop, or for `reject` also the
/// answer to its sender, as Linux's `nf_send_unreach` / `nf_send_reset` make it from the
/// packet as it is at the rejecting hook: an ICMP error from the router (`Fate::Icmp`, sent
/// by [`Inline::settle`], rate-limited), or a TCP reset sent back out of the arrival port
/// (`in_port`) through [`answer_out`]. No answer to a TCP or UDP packet whose checksum is
/// wrong, as Linux.
#[allow(clippy::too_many_arguments)]
fn refused(
    sf: &mut Stateful,
    net: &Net,
    in_port: usize,
    why: DropReason,
    frame: &[u8],
    pm: &PacketMeta,
    pc: &PacketCt,
    in_mac: [u8; 6],
    v6: bool,
    now: u64,
) -> Fate {
    let DropReason::Reject(g) = why else {
        return Fate::Drop(reason(why));
    };
    if matches!(pm.l4proto, 6 | 17) && !pm.transport_checksum_ok(frame) {
        return Fate::Drop("reject");
    }
    match sf.eng.rs.reject_of(g).and_then(|r| reject_answer(r, v6)) {
        Some(RejectAnswer::Icmp(typ, code)) => Fate::Icmp {
            why: "reject",
            typ,
            code,
            info: 0,
            ct: Box::new(sf.answer_ct(pc)),
        },
        Some(RejectAnswer::Reset) => {
            let sender: Option<[u8; 6]> = frame.get(6..12).and_then(|m| m.try_into().ok());
            sender
                .and_then(|to| weir_engine::answer::tcp_reset(frame, pm, in_mac, to))
                .and_then(|rst| answer_out(sf, net, in_port, rst, sf.answer_ct(pc), now))
                .map_or(Fate::Drop("reject"), Fate::Reset)
        }
        None => Fate::Drop("reject"),
    }
}

/// What a `reject` answers a packet of a family with.
enum RejectAnswer {
    /// An ICMP (IPv4) or ICMPv6 error: type and code.
    Icmp(u8, u8),
    Reset,
}

/// The answer of `reject` kind `r` to an IPv4 or IPv6 (`v6`) packet, as nft chooses it:
/// port unreachable by default; `with icmp` / `icmpv6` codes as written (None for the other
/// family: nft applies such a rule to its own family only); icmpx mapped per family.
fn reject_answer(r: &weir_lang::ir::Reject, v6: bool) -> Option<RejectAnswer> {
    use weir_lang::ir::Reject;
    let unreachable = |c4, c6| {
        Some(RejectAnswer::Icmp(
            if v6 { 1 } else { 3 },
            if v6 { c6 } else { c4 },
        ))
    };
    match *r {
        Reject::Default => unreachable(3, 4),
        Reject::Icmp(c) if !v6 => Some(RejectAnswer::Icmp(3, c)),
        Reject::Icmp6(c) if v6 => Some(RejectAnswer::Icmp(1, c)),
        // icmpx: no-route, port-unreachable, host-unreachable, admin-prohibited
        Reject::Icmpx(0) => unreachable(0, 0),
        Reject::Icmpx(1) => unreachable(3, 4),
        Reject::Icmpx(2) => unreachable(1, 3),
        Reject::Icmpx(3) => unreachable(13, 1),
        Reject::TcpReset => Some(RejectAnswer::Reset),
        _ => None,
    }
}

/// How much of a packet an ICMP error quotes: as much as fits in 576 bytes of IPv4 (RFC 1812)
/// or 1280 of IPv6.
fn icmp_quote_max(v6: bool) -> usize {
    if v6 {
        1280 - 48
    } else {
        576 - 28
    }
}

/// Whether an ICMP error may answer this packet (RFC 1812 and Linux's `icmp_send`): not an
/// ICMP error itself, not a fragment other than the first, not to or from a multicast or
/// broadcast address.
fn icmp_answerable(frame: &[u8], pm: &PacketMeta) -> bool {
    let v6 = pm.l3 == weir_wire::L3::Ipv6;
    let multicast = |a: u128| {
        if v6 {
            a >> 120 == 0xff || a == 0
        } else {
            let a = a as u32;
            a >> 28 == 0xe || a == u32::MAX || a == 0
        }
    };
    !(pm.is_icmp_error(frame)
        || pm.frag == weir_wire::Frag::Later
        || multicast(pm.saddr)
        || multicast(pm.daddr))
}

/// One frame through the router: the flowtable fast path for offloaded connections
/// (`devs`: the flowtables of the arrival port); otherwise routing (the adjacency cached in
/// the connection, or a route lookup whose adjacency is cached), the hooks, the neighbour,
/// MACs and TTL.
#[allow(clippy::too_many_arguments)]
fn route_frame(
    sf: &mut Stateful,
    net: &mut Net,
    frame: &mut [u8],
    pm: PacketMeta,
    in_port: usize,
    in_mac: [u8; 6],
    out_macs: &[[u8; 6]],
    devs: FtDevices,
    now: u64,
) -> Fate {
    route_frame_hashed(sf, net, frame, pm, in_port, in_mac, out_macs, devs, 0, now)
}

/// [`route_frame`] with the hash of the frame's tuple from [`Stateful::prefetch_index`] (0:
/// compute it), for a receive loop that prefetches connections ahead (`weir bench
/// pipeline`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn route_frame_hashed(
    sf: &mut Stateful,
    net: &mut Net,
    frame: &mut [u8],
    mut pm: PacketMeta,
    in_port: usize,
    in_mac: [u8; 6],
    out_macs: &[[u8; 6]],
    devs: FtDevices,
    hash: u64,
    now: u64,
) -> Fate {
    let v6 = match pm.l3 {
        weir_wire::L3::Ipv4 => false,
        weir_wire::L3::Ipv6 => true,
        _ => return Fate::Kernel,
    };
    if frame.get(..6) != Some(&in_mac[..]) {
        return Fate::Kernel;
    }
    if pm.malformed.is_some_and(|m| m.is_l3()) {
        return Fate::Drop("malformed");
    }
    let l3 = pm.l3_off as usize;
    if devs.0 != 0 && (pm.l3_len as usize) <= net.min_mtu {
        // (the fast path takes only TTLs above 1 and IPv4 headers without options; a packet
        // too large for some port takes the slow path, which checks the MTU)
        // (the flowtable's output is the adjacency its connection cached; a packet arriving
        // on another port than its direction's takes the slow path)
        let adjs = &net.adjs;
        let here = |i: u16| adjs.get(i as usize).is_some_and(|a| a.in_port == in_port);
        if let Some(fp) = sf.fast_path_if(frame, &mut pm, devs, hash, now, here) {
            if let Some(&adj) = net.adjs.get(fp.oif as usize) {
                dec_ttl(frame, l3, v6);
                return net.output(frame, adj, out_macs);
            }
            return Fate::Drop("no-route");
        }
    }
    let ttl_at = l3 + if v6 { 7 } else { 8 };
    let Some(&ttl) = frame.get(ttl_at) else {
        return Fate::Drop("malformed");
    };
    let too_big = pm.l3_len as usize > net.min_mtu;
    let mut pc = PacketCt {
        iif_addr: net.addrs[in_port].iter().find(|a| a.1 == v6).map(|a| a.0),
        ..PacketCt::default()
    };
    let mut meta = Meta::with_ifnames("", "");
    meta.iifname = net.names[in_port];
    if let Decision::Drop(why) =
        sf.hook_mut(Hook::Prerouting, frame, &mut pm, &mut meta, now, &mut pc)
    {
        if matches!(why, DropReason::Fragment) && pm.frag == weir_wire::Frag::Later {
            // no first fragment kept for it yet: the kernel's reassembly would wait for it
            return Fate::Hold;
        }
        return refused(sf, net, in_port, why, frame, &pm, &pc, in_mac, v6, now);
    }
    // routing after prerouting, as the kernel does (a reply to a masqueraded connection is
    // addressed to the router until connection tracking translates it back)
    if net.is_own(pm.daddr, v6) {
        return Fate::Drop("to-router");
    }
    // the route cache: the adjacency (output port and next hop) of the connection's
    // direction, found for its first packet (routes are fixed while weir runs; a reload
    // changes only the ruleset; a neighbour's new MAC changes the adjacency in place)
    let cached = if net.route_cache {
        sf.cached_route(&pc)
            .and_then(|i| net.adjs.get(i as usize).copied())
            .filter(|a| a.in_port == in_port)
    } else {
        None
    };
    // the reverse path filter, with routing (Linux's ip_route_input): a cached adjacency
    // was filtered when it was found
    if cached.is_none() && !net.source_valid(in_port, pm.saddr, v6) {
        return Fate::Drop("rp-filter");
    }
    let way = match cached {
        Some(adj) => Way::Cached(adj),
        None => match net.route(pm.daddr, v6) {
            Some(ri) => Way::Route(ri),
            None => Way::NoRoute,
        },
    };
    let port = match way {
        Way::Cached(adj) => adj.port,
        Way::Route(ri) => net.routes[ri].port,
        Way::NoRoute => {
            return icmp_fate(sf, &pc, "no-route", v6, (3, 0), (1, 0), 0);
        }
    };
    // as Linux's ip_forward: the TTL is checked and decremented after routing, before the
    // forward hook (which sees the decremented TTL)
    if ttl <= 1 {
        return icmp_fate(sf, &pc, "ttl", v6, (11, 0), (3, 0), 0);
    }
    // as Linux's ip_forward / ip6_forward, before the forward hook: a packet larger than the
    // output link's MTU is refused with "fragmentation needed" (IPv4 with "don't fragment")
    // or "packet too big" (IPv6: routers never fragment), telling the sender the MTU; other
    // IPv4 packets leave in fragments
    let mtu = net.mtu[port];
    let mtu = if v6 { mtu.max(1280) } else { mtu };
    let fragment = too_big && pm.l3_len as usize > mtu;
    if fragment && (v6 || frame[l3 + 6] & 0x40 != 0) {
        return icmp_fate(
            sf,
            &pc,
            "too-big",
            v6,
            (3, 4),
            (2, 0),
            mtu.min(u16::MAX as usize) as u32,
        );
    }
    dec_ttl(frame, l3, v6);
    pc.oif_addr = net.addrs[port].iter().find(|a| a.1 == v6).map(|a| a.0);
    for h in [Hook::Forward, Hook::Postrouting] {
        let mut meta = Meta::with_ifnames("", "");
        meta.iifname = net.names[in_port];
        meta.oifname = net.names[port];
        let d = sf.hook_mut(h, frame, &mut pm, &mut meta, now, &mut pc);
        if let Decision::Drop(why) = d {
            return refused(sf, net, in_port, why, frame, &pm, &pc, in_mac, v6, now);
        }
    }
    if let Decision::Drop(why) = sf.finish(&mut pc, now) {
        return Fate::Drop(reason(why));
    }
    // the next hop after NAT (the hooks keep `pm` parsed from the rewritten frame)
    let adj = match way {
        Way::Cached(a) => a,
        // (answered above)
        Way::NoRoute => return Fate::Drop("no-route"),
        Way::Route(ri) => match net.adjacency(in_port, ri, pm.daddr, v6) {
            Ok(a) => {
                if net.route_cache {
                    if let Some(i) = net.adj_index(a) {
                        sf.cache_route(&pc, i);
                    }
                }
                a
            }
            Err(no_neighbour) => return no_neighbour,
        },
    };
    match net.output(frame, adj, out_macs) {
        Fate::Out(o) if fragment => Fate::Fragments(o),
        f => f,
    }
}

/// The ICMP error `why` to the sender of a packet (`pc`: its connection tracking, which the
/// error carries): type and code for IPv4 and for IPv6.
fn icmp_fate(
    sf: &Stateful,
    pc: &PacketCt,
    why: &'static str,
    v6: bool,
    v4: (u8, u8),
    v6_: (u8, u8),
    info: u32,
) -> Fate {
    let (typ, code) = if v6 { v6_ } else { v4 };
    Fate::Icmp {
        why,
        typ,
        code,
        info,
        ct: Box::new(sf.answer_ct(pc)),
    }
}

/// An adjacency as the route cache keeps it: the port a connection's direction arrives on
/// (a packet of it arriving on another port is routed and filtered again, as Linux's
/// route cache keeps the input interface), the port it leaves by, and the slot of its next
/// hop's MAC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Adj {
    in_port: usize,
    port: usize,
    slot: u32,
}

/// How [`route_frame`] finds a packet's way out: the adjacency its connection cached, or a
/// route to look up.
#[derive(Clone, Copy)]
enum Way {
    Cached(Adj),
    Route(usize),
    NoRoute,
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
                v.push(il.net.describe());
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
            il.macs = il.ports.iter().map(|p| p.mac()).collect::<Vec<_>>().into();
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
        il.net.sync();
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
        // (shared: the ports' MACs are read while `il` is lent to `settle`)
        let macs = Arc::clone(&il.macs);
        let macs: &[[u8; 6]] = &macs;
        // ARP on the side sockets (AF_XDP mode): neighbours learnt from the link
        let mut ai = np;
        for (pi, a) in il.arp.iter_mut().enumerate() {
            let Some(a) = a else { continue };
            if fds[ai].revents != 0 {
                for i in 0..a.recv_batch()? {
                    il.net.learn(pi, a.frame(i));
                }
            }
            ai += 1;
        }
        // fragments other workers read for this one's connections (they were steered by
        // their addresses), in the order they were read
        if let Some(mut inbox) = il.handoff.as_mut().map(|h| h.take()) {
            for (_, pi, f) in inbox.iter_mut() {
                let pi = *pi;
                let devs = self.sf.flowtable_devices(&il.ports_names[pi]);
                let pm = PacketMeta::parse(f, LinkType::Ethernet);
                let (fate, rewritten) = decide(
                    &mut self.sf,
                    &mut self.trace,
                    &mut il.net,
                    &il.ports_names,
                    macs,
                    f,
                    pm,
                    pi,
                    devs,
                    now,
                );
                let f: &[u8] = f;
                if let Some(o) = il.settle(
                    &mut self.sf,
                    &mut self.counts,
                    pi,
                    fate,
                    rewritten,
                    now,
                    &|_| f.to_vec(),
                ) {
                    il.ports[o].push(f);
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
            let devs = self.sf.flowtable_devices(&il.ports_names[pi]);
            for i in 0..n {
                let (frame, truncated) = il.ports[pi].frame_mut(i);
                // neighbours learnt from the ARP and ND traffic on the link
                il.net.learn(pi, frame);
                let (fate, rewritten) = if truncated {
                    (Fate::Drop("truncated"), false)
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
                        &mut il.net,
                        &il.ports_names,
                        macs,
                        frame,
                        pm,
                        pi,
                        devs,
                        now,
                    )
                };
                if let Some(o) = il.settle(
                    &mut self.sf,
                    &mut self.counts,
                    pi,
                    fate,
                    rewritten,
                    now,
                    &|il| il.ports[pi].frame(i).to_vec(),
                ) {
                    il.fwd.push((i, o));
                }
            }
            for &(i, o) in &il.fwd {
                forward_frame(&mut il.ports, pi, i, o);
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
                let devs = self.sf.flowtable_devices(&il.ports_names[pi]);
                let pm = PacketMeta::parse(&f, LinkType::Ethernet);
                let (fate, rewritten) = decide(
                    &mut self.sf,
                    &mut self.trace,
                    &mut il.net,
                    &il.ports_names,
                    macs,
                    &mut f,
                    pm,
                    pi,
                    devs,
                    now,
                );
                let f: &[u8] = &f;
                let c = &mut self.counts;
                if let Some(o) =
                    il.settle(&mut self.sf, c, pi, fate, rewritten, now, &|_| f.to_vec())
                {
                    il.ports[o].push(f);
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
    let net = if inline {
        Some(Net::build(&cfg)?)
    } else {
        None
    };
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
    if let Some(net) = net {
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
        let mut net = net;
        net.shared = (n > 1).then(|| Arc::new(SharedNeigh::default()));
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
        net.set_mtu(
            cfg.interface
                .iter()
                .map(|i| weir_io::afpacket::mtu(&i.name))
                .collect::<std::io::Result<_>>()?,
        );
        let engs = engines(&rs, links.len());
        let icmp_peers = Arc::new(Mutex::new(PeerLimit::default()));
        for ((w, (ports, arp)), eng) in links.into_iter().enumerate().zip(engs) {
            let net = net.clone();
            let mut sf = stateful(eng, &cfg);
            if n > 1 {
                sf.steer = Some((n as u32, w as u32));
            }
            ws.push(Worker {
                idx: w,
                io: Io::Inline(Inline {
                    ports,
                    arp,
                    net,
                    asked: HashMap::new(),
                    fwd: Vec::new(),
                    ports_names: cfg.interface.iter().map(|i| i.name.clone()).collect(),
                    icmp_bucket: Bucket::new(n),
                    icmp_peers: Arc::clone(&icmp_peers),
                    mtu_read: now_ns(),
                    held: Held::default(),
                    polled: 0,
                    fds: Vec::new(),
                    macs: Vec::new().into(),
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
    let icmp_peers = Arc::new(Mutex::new(PeerLimit::default()));
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
            answers: Some(Answers::new(workers, Arc::clone(&icmp_peers))),
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

    #[test]
    fn icmp_errors_back_to_the_sender() {
        use std::net::Ipv4Addr;
        let net = Net::new(vec![vec![(0xc612_1e01, false)], vec![]], vec![0, 0], vec![])
            .with_mtu(vec![1500; 2]);
        let (me, host) = ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
        let (a, b) = (Ipv4Addr::new(198, 18, 30, 2), Ipv4Addr::new(198, 18, 31, 2));
        let b4 = weir_wire::build::Builder::new().macs(host, me).ttl(1);
        let f = b4.udp(a, b, 1000, 53, &[7; 700]);
        let e = icmp_error(&net, 0, me, &f, 11, 0, 0).expect("an error is due");
        let pm = PacketMeta::parse(&e, LinkType::Ethernet);
        assert_eq!((&e[..6], &e[6..12]), (&host[..], &me[..]));
        assert_eq!((pm.saddr, pm.daddr), (0xc612_1e01, u32::from(a) as u128));
        let l4 = pm.l4_off as usize;
        assert_eq!((e[l4], e[l4 + 1]), (11, 0));
        // the quote: the original IP packet, cut so that the error is 576 bytes of IP
        assert_eq!(&e[l4 + 8..], &f[14..14 + 576 - 28]);
        assert_eq!(weir_wire::checksum::checksum(&e[l4..]), 0);
        // none about an ICMP error, to a multicast or broadcast address, from a port without
        // an address of the family
        let err = b4.icmp_error(a, b, 3, 3, &f[14..], 64);
        assert!(icmp_error(&net, 0, me, &err, 11, 0, 0).is_none());
        let mc = b4.udp(a, Ipv4Addr::new(224, 0, 0, 5), 1, 2, b"");
        assert!(icmp_error(&net, 0, me, &mc, 11, 0, 0).is_none());
        let bc = b4.udp(a, Ipv4Addr::BROADCAST, 1, 2, b"");
        assert!(icmp_error(&net, 0, me, &bc, 11, 0, 0).is_none());
        assert!(icmp_error(&net, 1, me, &f, 11, 0, 0).is_none());
        // per destination: a burst of 6, then one a second; others have their own
        let mut pl = PeerLimit::default();
        let s = PeerLimit::SECOND;
        assert_eq!((0..10).filter(|_| pl.allow(1, false, s, 5)).count(), 6);
        assert!(pl.allow(2, false, s, 5) && pl.allow(1, true, s, 5));
        assert!(!pl.allow(1, false, s, 5 + s / 2));
        assert!(pl.allow(1, false, s, 5 + s + s / 2));
        assert!(!pl.allow(1, false, s, 5 + s + s / 2));
        // IPv6 to an address behind a /64: four a second
        let mut net6 = net.clone();
        net6.set_routes(vec![Route {
            net: 0x2001_0db8 << 96,
            len: 64,
            v6: true,
            port: 0,
            via: None,
        }]);
        net6.addrs[0].push((0x2001_0db8 << 96 | 1, true));
        let b6 = weir_wire::build::Builder::new().macs(host, me).ttl(1);
        let c6 = std::net::Ipv6Addr::from(0x2001_0db8u128 << 96 | 2);
        let f6 = b6.udp(c6, std::net::Ipv6Addr::from(3u128), 1, 2, b"");
        let e6 = icmp_error(&net6, 0, me, &f6, 3, 0, 0).unwrap();
        let mut pl = PeerLimit::default();
        assert_eq!((0..10).filter(|_| pl.allow_to(&net6, &e6, 7)).count(), 6);
        assert!(pl.allow_to(&net6, &e6, 7 + s / 4));
        assert!(!pl.allow_to(&net6, &e6, 7 + s / 4));
        // the rate limit: a burst of 50, then 1000 per second
        let mut bk = Bucket::new(1);
        assert_eq!((0..60).filter(|_| bk.take(1)).count(), 50);
        assert!(bk.take(1 + 1_000_000));
        assert!(!bk.take(1 + 1_000_000));
    }

    /// A masqueraded TCP connection through the inline router: its first packets take the
    /// hooks and cache their route in the connection; once `flow add` offloads it, its
    /// packets take the flowtable fast path (no chain runs) and still leave translated, with
    /// the TTL decremented and both checksums right.
    #[test]
    fn route_cache_and_flowtable_fast_path() {
        use std::net::Ipv4Addr;
        use weir_wire::build::{Builder, Tcp};
        let text = r#"table ip f {
  flowtable ft { hook ingress priority 0; devices = { lan0, wan0 }; }
  chain fwd {
    type filter hook forward priority 0; policy accept;
    ip protocol tcp ct state established flow add @ft
    tcp dport 5201 counter
  }
}
table ip nat {
  chain post { type nat hook postrouting priority srcnat; oifname "wan0" masquerade; }
}
"#;
        let mut sf = stateful_of(text);
        let (client, server, outside) = (
            Ipv4Addr::new(198, 18, 30, 2),
            Ipv4Addr::new(198, 18, 31, 2),
            Ipv4Addr::new(198, 18, 31, 1),
        );
        let route = |net: u32, port| Route {
            net: net as u128,
            len: 24,
            v6: false,
            port,
            via: None,
        };
        let mut net = Net::new(
            vec![
                vec![(0xc612_1e01, false)],
                vec![(u32::from(outside) as u128, false)],
            ],
            vec![
                weir_wire::field::ifname_value("lan0"),
                weir_wire::field::ifname_value("wan0"),
            ],
            vec![route(0xc612_1e00, 0), route(0xc612_1f00, 1)],
        )
        .with_mtu(vec![1500; 2]);
        let (cmac, smac) = ([2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 1, 2]);
        net.set_neigh(u32::from(client) as u128, false, cmac);
        net.set_neigh(u32::from(server) as u128, false, smac);
        let macs = [[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 1, 1]];
        let devs = [sf.flowtable_devices("lan0"), sf.flowtable_devices("wan0")];
        assert_ne!(devs[0].0, 0);
        // one segment through the router: its fate and the frame as it leaves
        let send = |sf: &mut Stateful, net: &mut Net, out: bool, t: Tcp, data: &[u8]| {
            let (pi, b) = if out {
                (
                    0,
                    Builder::new()
                        .macs(cmac, macs[0])
                        .tcp(client, server, &t, data),
                )
            } else {
                (
                    1,
                    Builder::new()
                        .macs(smac, macs[1])
                        .tcp(server, outside, &t, data),
                )
            };
            let mut f = b;
            let pm = PacketMeta::parse(&f, LinkType::Ethernet);
            let fate = route_frame(
                sf,
                net,
                &mut f,
                pm,
                pi,
                macs[pi],
                &macs,
                devs[pi],
                1_000_000_000,
            );
            (fate, f)
        };
        let ack = 0x10;
        let (fate, syn) = send(
            &mut sf,
            &mut net,
            true,
            Tcp::new(40000, 5201, 2).seq(1000),
            &[],
        );
        assert!(matches!(fate, Fate::Out(1)));
        let pm = PacketMeta::parse(&syn, LinkType::Ethernet);
        assert_eq!(pm.saddr, u32::from(outside) as u128, "masqueraded");
        let port = pm.sport;
        let back = |flags| Tcp::new(5201, port, flags).seq(5000).ack(1001);
        let (fate, _) = send(&mut sf, &mut net, false, back(0x12), &[]);
        assert!(matches!(fate, Fate::Out(0)), "SYN-ACK back to the client");
        let (fate, _) = send(
            &mut sf,
            &mut net,
            true,
            Tcp::new(40000, 5201, ack).seq(1001).ack(5001),
            &[],
        );
        assert!(matches!(fate, Fate::Out(1)));
        assert_eq!(
            sf.stats.offloaded, 1,
            "the established connection is offloaded"
        );
        assert_eq!(sf.stats.fast_path, 0);
        // a UDP flow (not offloaded): its first packet caches its route
        let udp = |sf: &mut Stateful, net: &mut Net| {
            let mut f = Builder::new()
                .macs(cmac, macs[0])
                .udp(client, server, 40002, 53, b"q");
            let pm = PacketMeta::parse(&f, LinkType::Ethernet);
            route_frame(
                sf,
                net,
                &mut f,
                pm,
                0,
                macs[0],
                &macs,
                devs[0],
                1_000_000_000,
            )
        };
        assert!(matches!(udp(&mut sf, &mut net), Fate::Out(1)));
        let counted = sf.eng.st.rule_hits.clone();
        // the route cache: the routes no longer match, the connection still knows its own
        let kept = net.routes.clone();
        let broken: Vec<Route> = kept
            .iter()
            .map(|r| Route {
                net: r.net ^ 0xff00,
                ..*r
            })
            .collect();
        net.set_routes(broken.clone());
        let data = Tcp::new(40000, 5201, ack | 8).seq(1001).ack(5001);
        let (fate, f) = send(&mut sf, &mut net, true, data, b"0123456789");
        assert!(matches!(fate, Fate::Out(1)), "by the cached route");
        assert_eq!(sf.stats.fast_path, 1, "through the flowtable");
        // the UDP flow's second packet: the chains, with the cached route
        assert!(
            matches!(udp(&mut sf, &mut net), Fate::Out(1)),
            "by the cached route"
        );
        assert_eq!(sf.stats.fast_path, 1);
        // (the UDP packets match no rule; the TCP ones would hit two in the chains)
        assert_eq!(
            sf.eng.st.rule_hits, counted,
            "no chain ran for the offloaded packet"
        );
        assert_eq!(&f[..12], &[smac, macs[1]].concat()[..]);
        let pm = PacketMeta::parse(&f, LinkType::Ethernet);
        assert_eq!((pm.saddr, pm.sport), (u32::from(outside) as u128, port));
        let l3 = pm.l3_off as usize;
        assert_eq!(f[l3 + 8], 63, "TTL decremented");
        assert_eq!(weir_wire::checksum::checksum(&f[l3..l3 + 20]), 0);
        let l4 = pm.l4_off as usize;
        let ph = weir_wire::checksum::pseudo_v4(
            outside.octets(),
            server.octets(),
            6,
            (f.len() - l4) as u16,
        );
        assert_eq!(weir_wire::checksum::checksum_with(ph, &f[l4..]), 0);
        // the reply direction: its first packet after the offload caches its route too
        let (fate, f) = send(&mut sf, &mut net, false, back(ack | 8), b"abc");
        assert!(matches!(fate, Fate::Out(0)));
        let pm = PacketMeta::parse(&f, LinkType::Ethernet);
        assert_eq!((pm.daddr, pm.dport), (u32::from(client) as u128, 40000));
        assert_eq!(sf.stats.fast_path, 2);
        // a new connection finds no route (the test broke them) and gets no cached one
        net.set_routes(broken);
        let (fate, _) = send(
            &mut sf,
            &mut net,
            true,
            Tcp::new(40001, 5201, 2).seq(7),
            &[],
        );
        assert!(matches!(
            fate,
            Fate::Icmp {
                why: "no-route",
                ..
            }
        ));
        // a FIN takes the connection off the flowtable, to the hooks
        net.set_routes(kept);
        let fin = Tcp::new(40000, 5201, ack | 1).seq(1011).ack(5004);
        let (fate, _) = send(&mut sf, &mut net, true, fin, &[]);
        assert!(matches!(fate, Fate::Out(1)));
        assert_eq!(sf.stats.fast_path, 2);
        assert_eq!(sf.stats.offload_teardowns, 1);
        // the cache keeps the adjacency, not the MAC: a neighbour's new MAC reaches the
        // connections that cached it (the routes broken again, so only the cache knows the
        // way)
        net.set_routes(vec![]);
        let smac2 = [2, 0, 0, 0, 1, 3];
        assert!(net.set_neigh(u32::from(server) as u128, false, smac2));
        let ack_fin = Tcp::new(40000, 5201, ack).seq(1012).ack(5004);
        let (fate, f) = send(&mut sf, &mut net, true, ack_fin.clone(), &[]);
        assert!(matches!(fate, Fate::Out(1)), "{}", fate.describe(&[]));
        assert_eq!(&f[..12], &[smac2, macs[1]].concat()[..]);
        // and a router that keeps no route cache looks every packet up
        net.route_cache = false;
        let (fate, _) = send(&mut sf, &mut net, true, ack_fin, &[]);
        assert!(matches!(
            fate,
            Fate::Icmp {
                why: "no-route",
                ..
            }
        ));
    }

    /// A packet larger than the output link's MTU: "fragmentation needed" with the MTU (IPv4
    /// with "don't fragment"), "packet too big" (IPv6), or out in fragments (other IPv4); a
    /// packet that fits goes out whole, and the other way (a larger MTU) too.
    /// A worker's engine for a ruleset text, with a default connection table.
    fn stateful_of(text: &str) -> Stateful {
        let rs = weir_lang::load_str("t.nft", text)
            .map_err(|_| "ruleset")
            .unwrap()
            .0;
        Stateful::new(engine(&rs), weir_conntrack::Config::default())
    }

    type V4Pair = (std::net::Ipv4Addr, std::net::Ipv4Addr);
    type V6Pair = (std::net::Ipv6Addr, std::net::Ipv6Addr);

    /// A router between lan0 (198.18.30.1/24, 2001:db8:30::1/64) and wan0 (198.18.31.1/24,
    /// 2001:db8:31::1/64), MTU 1500, with a client (.2 / ::2 on lan0) and a server (on wan0)
    /// as neighbours (MAC 02:00:00:00:00:09); the ports' MACs.
    fn dual_stack_net() -> (V4Pair, V6Pair, Net, [[u8; 6]; 2]) {
        use std::net::{Ipv4Addr, Ipv6Addr};
        let (c4, s4) = (Ipv4Addr::new(198, 18, 30, 2), Ipv4Addr::new(198, 18, 31, 2));
        let (c6, s6): (Ipv6Addr, Ipv6Addr) = (
            "2001:db8:30::2".parse().unwrap(),
            "2001:db8:31::2".parse().unwrap(),
        );
        let route = |net: u128, len, v6, port| Route {
            net,
            len,
            v6,
            port,
            via: None,
        };
        let mut net = Net::new(
            vec![
                vec![(0xc612_1e01, false), (u128::from(c6) - 1, true)],
                vec![(0xc612_1f01, false), (u128::from(s6) - 1, true)],
            ],
            vec![
                weir_wire::field::ifname_value("lan0"),
                weir_wire::field::ifname_value("wan0"),
            ],
            vec![
                route(0xc612_1e00, 24, false, 0),
                route(0xc612_1f00, 24, false, 1),
                route(u128::from(c6) & !0xffff_ffff_ffff_ffff, 64, true, 0),
                route(u128::from(s6) & !0xffff_ffff_ffff_ffff, 64, true, 1),
            ],
        );
        net.set_mtu(vec![1500, 1500]);
        for a in [u32::from(c4) as u128, u32::from(s4) as u128] {
            net.set_neigh(a, false, [2, 0, 0, 0, 0, 9]);
        }
        for a in [u128::from(c6), u128::from(s6)] {
            net.set_neigh(a, true, [2, 0, 0, 0, 0, 9]);
        }
        let macs = [[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 1, 1]];
        ((c4, s4), (c6, s6), net, macs)
    }

    /// `reject` answers the sender as Linux does: ICMP errors of the right type and code for
    /// each form, quoting the packet as it arrived; a TCP reset whose sequence numbers the
    /// sender accepts, and which, for a masqueraded connection, comes from the router's
    /// public address, not the client's inside one; nothing for a corrupt segment or a reset.
    /// The reset of fate `f`, checked: from `from` to `to` (address, port), TCP flags `flags`,
    /// checksums right.
    fn check_reset(f: Fate, from: (u128, u16), to: (u128, u16), flags: u8) -> Vec<u8> {
        let Fate::Reset(rst) = f else {
            panic!("no reset: {}", f.describe(&[]))
        };
        let pm = PacketMeta::parse(&rst, LinkType::Ethernet);
        assert_eq!(((pm.saddr, pm.sport), (pm.daddr, pm.dport)), (from, to));
        assert_eq!(pm.tcp_flags, flags);
        assert!(pm.transport_checksum_ok(&rst));
        assert!(pm.l3 == weir_wire::L3::Ipv6 || pm.ipv4_checksum_ok(&rst));
        rst
    }

    /// A frame through the inline router (read on port `pi`, at time 1), and for an ICMP fate
    /// the error as [`Inline::settle`] sends it (without the rate limit).
    fn route_and_answer(
        sf: &mut Stateful,
        net: &mut Net,
        macs: &[[u8; 6]],
        f: &mut [u8],
        pi: usize,
    ) -> (Fate, Option<Vec<u8>>) {
        let pm = PacketMeta::parse(f, LinkType::Ethernet);
        let fate = route_frame(sf, net, f, pm, pi, macs[pi], macs, FtDevices(0), 1);
        let err = match &fate {
            Fate::Icmp {
                typ,
                code,
                info,
                ct,
                ..
            } => icmp_error(net, pi, macs[pi], f, *typ, *code, *info)
                .and_then(|e| answer_out(sf, net, pi, e, **ct, 1)),
            _ => None,
        };
        (fate, err)
    }

    /// The neighbour table is bounded: a new neighbour beyond it is not learnt (and counted),
    /// a known one still changes its MAC.
    #[test]
    fn neighbour_table_is_bounded() {
        let (_, _, mut net, _) = dual_stack_net();
        let base = net.macs.len();
        for i in 0..(MAX_NEIGHBOURS - base) as u128 {
            assert!(net.set_neigh(0xc612_0000 + (i << 8), false, [2, 0, 0, 0, 0, 1]));
        }
        assert!(!net.set_neigh(0xc613_0001, false, [2, 0, 0, 0, 0, 1]));
        assert_eq!(net.neigh_mac(0xc613_0001, false), None);
        assert!(net.describe().contains("not learnt, table full: 1"));
        assert!(net.set_neigh(0xc612_0000, false, [2, 0, 0, 0, 0, 2]));
        assert_eq!(net.neigh_mac(0xc612_0000, false), Some([2, 0, 0, 0, 0, 2]));
    }

    /// The reverse path filter (Linux's `rp_filter`): strict wants the source routed back out
    /// of the arrival port, loose a route at all; a cached connection is not filtered again
    /// unless its packet arrives on another port, in the chains or the flowtable.
    #[test]
    fn reverse_path_filter() {
        use weir_wire::build::{Builder, Tcp};
        let text = "table inet f {
  flowtable ft { hook ingress priority 0; devices = { lan0, wan0 }; }
  chain fwd { type filter hook forward priority 0; policy accept;
    ct state established meta l4proto tcp flow add @ft } }";
        let mut sf = stateful_of(text);
        let ((c4, s4), (c6, s6), mut net, macs) = dual_stack_net();
        let spoofed = std::net::Ipv4Addr::new(198, 18, 99, 9);
        let cmac = [2, 0, 0, 0, 0, 9];
        let go = |sf: &mut Stateful, net: &mut Net, pi: usize, mut f: Vec<u8>| {
            let pm = PacketMeta::parse(&f, LinkType::Ethernet);
            let devs = sf.flowtable_devices(["lan0", "wan0"][pi]);
            let fate = route_frame(sf, net, &mut f, pm, pi, macs[pi], &macs, devs, 1);
            fate.describe(&["lan0".into(), "wan0".into()])
        };
        let udp = |pi: usize, src, dst, sport| {
            Builder::new()
                .macs(cmac, macs[pi])
                .udp(src, dst, sport, 53, b"q")
        };
        let out = "forward out wan0";
        let rpf = "drop (rp-filter)";
        // off: anything goes
        assert_eq!(go(&mut sf, &mut net, 0, udp(0, spoofed, s4, 1)), out);
        // strict: a source with no route, or one routed out of another port, is dropped
        net.rp_filter = vec![RpFilter::Strict; 2];
        assert_eq!(go(&mut sf, &mut net, 0, udp(0, spoofed, s4, 2)), rpf);
        assert_eq!(go(&mut sf, &mut net, 0, udp(0, s4, s4, 3)), rpf);
        assert_eq!(go(&mut sf, &mut net, 0, udp(0, c4, s4, 4)), out);
        let v6 = Builder::new().macs(cmac, macs[0]).udp(c6, s6, 5, 53, b"q");
        assert_eq!(go(&mut sf, &mut net, 0, v6), out);
        let v6 = Builder::new().macs(cmac, macs[0]).udp(s6, s6, 6, 53, b"q");
        assert_eq!(go(&mut sf, &mut net, 0, v6), rpf);
        // loose: a route anywhere will do; none will not
        net.rp_filter = vec![RpFilter::Loose; 2];
        assert_eq!(
            go(&mut sf, &mut net, 0, udp(0, s4, s4, 7)),
            "forward out wan0"
        );
        assert_eq!(go(&mut sf, &mut net, 0, udp(0, spoofed, s4, 8)), rpf);
        // a cached connection (sport 4, strict): its packets skip the filter, unless one
        // comes in by the other port with the same addresses
        net.rp_filter = vec![RpFilter::Strict; 2];
        assert_eq!(go(&mut sf, &mut net, 0, udp(0, c4, s4, 4)), out);
        assert_eq!(go(&mut sf, &mut net, 1, udp(1, c4, s4, 4)), rpf);
        // and in the flowtable: an offloaded TCP connection's segment from the wrong port
        let seg = |pi: usize, flags: u8, seq: u32, ack: u32| {
            Builder::new().macs(cmac, macs[pi]).tcp(
                c4,
                s4,
                &Tcp::new(40000, 80, flags).seq(seq).ack(ack),
                b"",
            )
        };
        let synack = Builder::new().macs(cmac, macs[1]).tcp(
            s4,
            c4,
            &Tcp::new(80, 40000, 0x12).seq(500).ack(101),
            b"",
        );
        assert_eq!(go(&mut sf, &mut net, 0, seg(0, 0x02, 100, 0)), out);
        assert_eq!(go(&mut sf, &mut net, 1, synack), "forward out lan0");
        assert_eq!(go(&mut sf, &mut net, 0, seg(0, 0x10, 101, 501)), out);
        let fast = sf.stats.fast_path;
        assert_eq!(go(&mut sf, &mut net, 0, seg(0, 0x10, 101, 501)), out);
        assert_eq!(sf.stats.fast_path, fast + 1, "offloaded");
        assert_eq!(go(&mut sf, &mut net, 1, seg(1, 0x10, 101, 501)), rpf);
        assert_eq!(sf.stats.fast_path, fast + 1, "not through the flowtable");
    }

    /// A later fragment that comes before its first is held, and follows the first once it
    /// has passed; held fragments that wait too long are dropped, and the table is bounded.
    #[test]
    fn later_fragments_wait_for_their_first() {
        use weir_wire::build::Builder;
        let text = "table inet f { chain fwd { type filter hook forward priority 0; policy drop; ct state new udp dport 53 accept; } }";
        let mut sf = stateful_of(text);
        let ((c4, s4), _, mut net, macs) = dual_stack_net();
        let b = || Builder::new().macs([2, 0, 0, 0, 0, 9], macs[0]).ip_id(77);
        let first = b().fragment(0, true).udp(c4, s4, 1000, 53, &[1; 64]);
        let later = b().fragment(9, false).ip(c4, s4, 17, &[2; 40]);
        let mut held = Held::default();
        let send = |sf: &mut Stateful, net: &mut Net, f: &mut Vec<u8>| {
            let pm = PacketMeta::parse(f, LinkType::Ethernet);
            route_frame(sf, net, f, pm, 0, macs[0], &macs, FtDevices(0), 1)
        };
        let mut f = later.clone();
        assert!(matches!(send(&mut sf, &mut net, &mut f), Fate::Hold));
        assert_eq!(held.hold(0, f, LinkType::Ethernet, 10), None);
        // nothing to release while the first has not passed
        let (ready, expired) = held.ready(&mut sf.frags, 20);
        assert!(ready.is_empty() && expired.is_empty() && !held.is_empty());
        let mut f = first.clone();
        assert!(matches!(send(&mut sf, &mut net, &mut f), Fate::Out(1)));
        let (ready, expired) = held.ready(&mut sf.frags, 30);
        assert_eq!((ready.len(), expired.len()), (1, 0));
        assert!(held.is_empty());
        let (pi, mut f) = ready.into_iter().next().unwrap();
        assert_eq!((pi, &f), (0, &later));
        assert!(matches!(send(&mut sf, &mut net, &mut f), Fate::Out(1)));
        // a datagram whose first never comes: dropped after the wait
        let orphan = Builder::new()
            .macs([2, 0, 0, 0, 0, 9], macs[0])
            .ip_id(78)
            .fragment(9, false)
            .ip(c4, s4, 17, &[2; 40]);
        let mut f = orphan.clone();
        assert!(matches!(send(&mut sf, &mut net, &mut f), Fate::Hold));
        assert_eq!(held.hold(0, f, LinkType::Ethernet, 100), None);
        let (ready, expired) = held.ready(&mut sf.frags, 100 + Held::WAIT_NS);
        assert_eq!((ready.len(), expired.len()), (0, 1));
        // bounded: per datagram, and in all
        for i in 0..Held::MAX_PER_DATAGRAM {
            assert_eq!(
                held.hold(0, orphan.clone(), LinkType::Ethernet, 200 + i as u64),
                None
            );
        }
        assert_eq!(
            held.hold(0, orphan.clone(), LinkType::Ethernet, 300),
            Some(1)
        );
        let mut id = 1000u16;
        while held.frames() < Held::MAX_FRAMES {
            let f = Builder::new()
                .ip_id(id)
                .fragment(9, false)
                .ip(c4, s4, 17, &[0; 8]);
            assert_eq!(held.hold(0, f, LinkType::Ethernet, 400), None);
            id += 1;
        }
        let f = Builder::new()
            .ip_id(id)
            .fragment(9, false)
            .ip(c4, s4, 17, &[0; 8]);
        assert_eq!(held.hold(0, f, LinkType::Ethernet, 400), Some(1));
        assert_eq!(held.frames(), Held::MAX_FRAMES);
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
            a.packet(sf, router, 1)
        };
        match ask(&udp, 0).2 {
            Some(NfqAnswer::Icmp {
                v6: false,
                typ: 3,
                code: 3,
                ref quote,
                to,
                ..
            }) => {
                assert_eq!(quote, &udp);
                assert_eq!(to, u32::from(c) as u128);
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
                v6: true,
                typ: 1,
                code: 1,
                ..
            })
        ));
    }

    #[test]
    fn reject_answers_the_sender() {
        use weir_wire::build::{Builder, Tcp};
        let text = r#"table inet f {
  chain fwd {
    type filter hook forward priority 0; policy accept;
    tcp dport 23 reject with tcp reset
    udp dport 9 reject
    udp dport 10 reject with icmpx admin-prohibited
    meta nfproto ipv4 udp dport 11 reject with icmp host-prohibited
    iifname "wan0" tcp sport 80 tcp flags & fin == fin reject with tcp reset
    iifname "wan0" tcp sport 81 reject with tcp reset
  }
}
table ip nat {
  chain pre {
    type nat hook prerouting priority dstnat;
    tcp dport 8080 dnat to 198.18.31.2:23
    ip daddr 198.18.31.77 udp dport 8081 dnat to 198.18.31.2:9
  }
  chain post { type nat hook postrouting priority srcnat; oifname "wan0" masquerade; }
}
"#;
        let mut sf = stateful_of(text);
        assert!(sf.eng.rs.rejects);
        let ((c4, s4), (c6, s6), mut net, macs) = dual_stack_net();
        let cmac = [2, 0, 0, 0, 0, 9];
        let send = |sf: &mut Stateful, net: &mut Net, f: &mut Vec<u8>, pi: usize| {
            route_and_answer(sf, net, &macs, f, pi).0
        };
        let b = |pi: usize| Builder::new().macs(cmac, macs[pi]);
        // ICMP errors: type and code, from the router's address on the sender's side, quoting
        // the datagram as the forward hook saw it (TTL decremented), as Linux's icmp_send
        for (dport, v6, typ, code) in [
            (9, false, 3, 3),
            (9, true, 1, 4),
            (10, false, 3, 13),
            (10, true, 1, 1),
            (11, false, 3, 10),
        ] {
            let sent = if v6 {
                b(0).udp(c6, s6, 5000, dport, b"x")
            } else {
                b(0).udp(c4, s4, 5000, dport, b"x")
            };
            let mut f = sent.clone();
            let (fate, err) = route_and_answer(&mut sf, &mut net, &macs, &mut f, 0);
            let Fate::Icmp {
                why: "reject",
                typ: t,
                code: c,
                info: 0,
                ..
            } = fate
            else {
                panic!("udp dport {dport} v6 {v6}: {}", fate.describe(&[]))
            };
            assert_eq!((t, c), (typ, code), "udp dport {dport} v6 {v6}");
            let e = err.expect("an ICMP error");
            let pm = PacketMeta::parse(&e, LinkType::Ethernet);
            let (router, client) = if v6 {
                (u128::from(c6) - 1, u128::from(c6))
            } else {
                (0xc612_1e01, u32::from(c4) as u128)
            };
            assert_eq!((pm.saddr, pm.daddr), (router, client));
            let mut at_forward = sent.clone();
            dec_ttl(&mut at_forward, 14, v6);
            let l4 = pm.l4_off as usize;
            assert_eq!((e[l4], e[l4 + 1]), (typ, code));
            assert_eq!(&e[l4 + 8..], &at_forward[14..], "the quote");
            use weir_wire::checksum::{checksum, checksum_with, pseudo_v6};
            let sum = if v6 {
                let a = |o: usize| -> [u8; 16] { e[o..o + 16].try_into().unwrap() };
                checksum_with(pseudo_v6(a(22), a(38), 58, (e.len() - l4) as u32), &e[l4..])
            } else {
                checksum(&e[l4..])
            };
            assert_eq!(sum, 0, "ICMP checksum");
        }
        // a new connection DNATed, then rejected: the error comes from the address the client
        // wrote to and quotes the datagram as the client sent it (NAT translates the error,
        // which carries the connection, as the kernel's nf_nat_icmp_reply_translation)
        let vip = std::net::Ipv4Addr::new(198, 18, 31, 77);
        let sent = b(0).udp(c4, vip, 5000, 8081, b"x");
        let mut f = sent.clone();
        let (_, err) = route_and_answer(&mut sf, &mut net, &macs, &mut f, 0);
        let e = err.expect("an ICMP error for the DNATed datagram");
        let pm = PacketMeta::parse(&e, LinkType::Ethernet);
        assert_eq!(
            (pm.saddr, pm.daddr),
            (u32::from(vip) as u128, u32::from(c4) as u128)
        );
        let l4 = pm.l4_off as usize;
        let mut at_forward = sent.clone();
        dec_ttl(&mut at_forward, 14, false);
        assert_eq!(
            &e[l4 + 8..],
            &at_forward[14..],
            "the quote, translated back"
        );
        assert_eq!(weir_wire::checksum::checksum(&e[l4..]), 0);
        assert!(pm.ipv4_checksum_ok(&e));
        // a SYN gets RST|ACK acknowledging it, from the address and port it was sent to
        let (c4a, s4a) = (u32::from(c4) as u128, u32::from(s4) as u128);
        let mut syn = b(0).tcp(c4, s4, &Tcp::new(40000, 23, 0x02).seq(7000), &[]);
        let f = send(&mut sf, &mut net, &mut syn, 0);
        let rst = check_reset(f, (s4a, 23), (c4a, 40000), 0x14);
        let l4 = PacketMeta::parse(&rst, LinkType::Ethernet).l4_off as usize;
        assert_eq!(&rst[l4 + 4..l4 + 12], &[0, 0, 0, 0, 0, 0, 0x1b, 0x59]);
        assert_eq!((&rst[..6], &rst[6..12]), (&cmac[..], &macs[0][..]));
        // IPv6, with data and an ACK: a bare RST whose sequence number is that ACK
        let mut seg = b(0).tcp(c6, s6, &Tcp::new(40001, 23, 0x18).seq(9).ack(77), b"hello");
        let f = send(&mut sf, &mut net, &mut seg, 0);
        let rst = check_reset(f, (u128::from(s6), 23), (u128::from(c6), 40001), 0x04);
        let l4 = PacketMeta::parse(&rst, LinkType::Ethernet).l4_off as usize;
        assert_eq!(&rst[l4 + 4..l4 + 8], &77u32.to_be_bytes());
        // no answer to a reset, nor to a segment whose checksum is wrong
        let mut r = b(0).tcp(c4, s4, &Tcp::new(40002, 23, 0x04), &[]);
        assert!(matches!(
            send(&mut sf, &mut net, &mut r, 0),
            Fate::Drop("reject")
        ));
        let mut bad = b(0).tcp(c4, s4, &Tcp::new(40003, 23, 0x02), &[]);
        let n = bad.len();
        bad[n - 3] ^= 0xff; // the urgent pointer, inside the checksum
        assert!(matches!(
            send(&mut sf, &mut net, &mut bad, 0),
            Fate::Drop("reject")
        ));
        // masquerade: the server's FIN to the router's address is translated back to the
        // client before forward rejects it; the reset goes to the server from the router's
        // public address and the masqueraded port (as the kernel's reset through its own
        // connection tracking), never from the client's inside address
        let mut out = b(0).tcp(c4, s4, &Tcp::new(40004, 80, 0x02).seq(100), &[]);
        assert!(matches!(send(&mut sf, &mut net, &mut out, 0), Fate::Out(1)));
        let pm = PacketMeta::parse(&out, LinkType::Ethernet);
        let (public, port) = (pm.saddr, pm.sport);
        assert_eq!(public, 0xc612_1f01);
        let to_router = |t: Tcp| {
            Builder::new().macs(cmac, macs[1]).tcp(
                s4,
                std::net::Ipv4Addr::from(public as u32),
                &t,
                &[],
            )
        };
        let mut synack = to_router(Tcp::new(80, port, 0x12).seq(5000).ack(101));
        assert!(matches!(
            send(&mut sf, &mut net, &mut synack, 1),
            Fate::Out(0)
        ));
        let mut ack = b(0).tcp(c4, s4, &Tcp::new(40004, 80, 0x10).seq(101).ack(5001), &[]);
        assert!(matches!(send(&mut sf, &mut net, &mut ack, 0), Fate::Out(1)));
        let mut f = to_router(Tcp::new(80, port, 0x11).seq(5001).ack(101));
        let f = send(&mut sf, &mut net, &mut f, 1);
        let rst = check_reset(f, (public, port), (s4a, 80), 0x04);
        let l4 = PacketMeta::parse(&rst, LinkType::Ethernet).l4_off as usize;
        assert_eq!(&rst[l4 + 4..l4 + 8], &101u32.to_be_bytes());
        // a new connection rejected after DNAT: the reset comes from the address and port the
        // client wrote to (the reset carries the new connection, whose DNAT it undoes)
        let mut syn = b(0).tcp(c4, s4, &Tcp::new(40005, 8080, 0x02).seq(1), &[]);
        let f = send(&mut sf, &mut net, &mut syn, 0);
        check_reset(f, (s4a, 8080), (c4a, 40005), 0x14);
        // a stray SYN-ACK to a masqueraded client's inside address belongs to no connection:
        // the reset answering it is tracked, finds the client's connection, leaves from the
        // public address and ends that connection, which has seen no reply (as the kernel's
        // own reset does)
        let mut out = b(0).tcp(c4, s4, &Tcp::new(40006, 81, 0x02).seq(300), &[]);
        assert!(matches!(send(&mut sf, &mut net, &mut out, 0), Fate::Out(1)));
        let pm = PacketMeta::parse(&out, LinkType::Ethernet);
        let port81 = pm.sport;
        let conns = |sf: &Stateful| sf.ct.len();
        let mut stray = Builder::new().macs(cmac, macs[1]).tcp(
            s4,
            c4,
            &Tcp::new(81, 40006, 0x12).seq(9000).ack(301),
            &[],
        );
        let before = conns(&sf);
        let pm = PacketMeta::parse(&stray, LinkType::Ethernet);
        let fate = route_frame(
            &mut sf,
            &mut net,
            &mut stray,
            pm,
            1,
            macs[1],
            &macs,
            FtDevices(0),
            1,
        );
        check_reset(fate, (public, port81), (s4a, 81), 0x04);
        let state = |sf: &Stateful, sport: u16, dport: u16| {
            sf.ct
                .iter()
                .find(|&(id, _)| {
                    let t = sf.ct.tuple(id, Dir::Original).unwrap();
                    (t.sport, t.dport) == (sport, dport)
                })
                .and_then(|(_, e)| e.tcp_state())
        };
        use weir_conntrack::{Dir, TcpState};
        assert_eq!(conns(&sf), before - 1);
        assert_eq!(state(&sf, 40006, 81), None);
        // the reset of a tracked segment carries its connection and leaves it as it was
        // (Linux's nf_ct_attach): the server's FIN above left it in FIN_WAIT, where it stays
        assert_eq!(state(&sf, 40004, 80), Some(TcpState::FinWait));
        // and through the output hook: a ruleset that drops resets there sends none
        let mut sf = stateful_of(&format!(
            "{text}\ntable inet o {{ chain out {{ type filter hook output priority 0; tcp flags rst drop; }} }}\n"
        ));
        let mut syn = b(0).tcp(c4, s4, &Tcp::new(40007, 23, 0x02), &[]);
        let pm = PacketMeta::parse(&syn, LinkType::Ethernet);
        let fate = route_frame(
            &mut sf,
            &mut net,
            &mut syn,
            pm,
            0,
            macs[0],
            &macs,
            FtDevices(0),
            1,
        );
        assert!(
            matches!(fate, Fate::Drop("reject")),
            "{}",
            fate.describe(&[])
        );
    }

    #[test]
    fn packets_larger_than_the_mtu() {
        use weir_wire::build::Builder;
        let text = "table inet f { chain fwd { type filter hook forward priority 0; counter } }";
        let mut sf = stateful_of(text);
        let ((c4, s4), (c6, s6), mut net, macs) = dual_stack_net();
        net.set_mtu(vec![1500, 1400]);
        assert_eq!(net.min_mtu, 1400);
        let mut send = |net: &mut Net, f: &mut Vec<u8>, pi: usize| {
            let pm = PacketMeta::parse(f, LinkType::Ethernet);
            route_frame(&mut sf, net, f, pm, pi, macs[pi], &macs, FtDevices(0), 1)
        };
        let b = || Builder::new().macs([2, 0, 0, 0, 0, 9], macs[0]);
        let df = b().dont_fragment().udp(c4, s4, 1, 2, &[0; 1472]);
        let mut f = df.clone();
        let Fate::Icmp {
            why: "too-big",
            typ: 3,
            code: 4,
            info: 1400,
            ..
        } = send(&mut net, &mut f, 0)
        else {
            panic!("no fragmentation needed");
        };
        // the error carries the MTU after its checksum, and quotes the packet as it came
        let e = icmp_error(&net, 0, macs[0], &f, 3, 4, 1400).unwrap();
        let pm = PacketMeta::parse(&e, LinkType::Ethernet);
        let l4 = pm.l4_off as usize;
        assert_eq!(&e[l4 + 4..l4 + 8], &[0, 0, 0x05, 0x78]);
        assert_eq!(&e[l4 + 8..l4 + 28], &df[14..34]);
        // without "don't fragment": out in fragments that fit
        let mut f = b().udp(c4, s4, 1, 2, &[0; 1472]);
        assert!(matches!(send(&mut net, &mut f, 0), Fate::Fragments(1)));
        let pieces = weir_wire::frag::fragment_ipv4(&f, 14, 1400).unwrap();
        assert_eq!(pieces.len(), 2);
        assert!(pieces.iter().all(|p| p.len() - 14 <= 1400));
        // IPv6: packet too big
        let mut f = b().udp(c6, s6, 1, 2, &[0; 1452]);
        assert!(matches!(
            send(&mut net, &mut f, 0),
            Fate::Icmp {
                why: "too-big",
                typ: 2,
                code: 0,
                info: 1400,
                ..
            }
        ));
        // what fits goes whole; the same size towards the larger MTU too
        let mut f = b().dont_fragment().udp(c4, s4, 1, 2, &[0; 1372]);
        assert!(matches!(send(&mut net, &mut f, 0), Fate::Out(1)));
        let mut f = Builder::new()
            .macs([2, 0, 0, 0, 0, 9], macs[1])
            .dont_fragment()
            .udp(s4, c4, 2, 1, &[0; 1472]);
        assert!(matches!(send(&mut net, &mut f, 1), Fate::Out(0)));
    }

    #[test]
    fn neighbour_discovery_solicits_and_learns() {
        let mac = [2, 0, 0, 0, 0, 9];
        let me: u128 = 0x2001_0db8_0031_0000_0000_0000_0000_0001;
        let host: u128 = 0x2001_0db8_0031_0000_0000_0000_00ab_cdef;
        let ns = nd_solicit(mac, me, host);
        // to the solicited-node group, hop limit 255, a valid ICMPv6 checksum
        assert_eq!(&ns[..6], &[0x33, 0x33, 0xff, 0xab, 0xcd, 0xef]);
        let pm = PacketMeta::parse(&ns, LinkType::Ethernet);
        assert_eq!(pm.daddr, 0xff02_0000_0000_0000_0000_0001_ffab_cdef);
        assert_eq!(ns[21], 255);
        let l4 = pm.l4_off as usize;
        let sum = weir_wire::checksum::checksum_with(
            weir_wire::checksum::pseudo_v6(
                me.to_be_bytes(),
                pm.daddr.to_be_bytes(),
                58,
                (ns.len() - l4) as u32,
            ),
            &ns[l4..],
        );
        assert_eq!(sum, 0);
        // what weir sends is what it learns from: the solicitation's source and its MAC
        assert_eq!(nd_sender(&ns), Some((me, mac)));
        // an advertisement: the target and the target link-layer option
        let hmac = [2, 0, 0, 0, 0, 7];
        let mut body = host.to_be_bytes().to_vec();
        body.extend_from_slice(&[2, 1]);
        body.extend_from_slice(&hmac);
        let na = weir_wire::build::Builder::new()
            .macs(hmac, mac)
            .ttl(255)
            .icmp(
                std::net::Ipv6Addr::from(host),
                std::net::Ipv6Addr::from(me),
                136,
                0,
                0x6000_0000,
                &body,
            );
        assert_eq!(nd_sender(&na), Some((host, hmac)));
        // not with another hop limit (RFC 4861), nor without the option, nor cut short
        let mut hop = na.clone();
        hop[21] = 64;
        assert_eq!(nd_sender(&hop), None);
        assert_eq!(nd_sender(&na[..na.len() - 8]), None);
        assert_eq!(nd_sender(&na[..60]), None);
        let mut net = Net::new(
            vec![vec![(me, true)]],
            vec![0],
            vec![Route {
                net: host & mask(64, true),
                len: 64,
                v6: true,
                port: 0,
                via: None,
            }],
        );
        net.set_mtu(vec![1500; 2]);
        net.learn(0, &na);
        assert_eq!(net.neigh_mac(host, true), Some(hmac));
        // several workers: what one learns, the others take in at their next batch
        let shared = Arc::new(SharedNeigh::default());
        let build = || {
            Net::new(net.addrs.clone(), vec![0], net.routes.clone())
                .with_mtu(vec![1500; 2])
                .with_shared(shared.clone())
        };
        let (mut w0, mut w1) = (build(), build());
        w1.sync();
        assert_eq!(w1.neigh_mac(host, true), None);
        w0.learn(0, &na);
        w1.sync();
        assert_eq!(w1.neigh_mac(host, true), Some(hmac));
        // learning it again changes nothing: no new generation
        let g = shared.gen.load(Ordering::Relaxed);
        w0.learn(0, &na);
        assert_eq!(shared.gen.load(Ordering::Relaxed), g);
    }

    #[test]
    fn arp_requests_and_learning() {
        let mac = [2, 0, 0, 0, 0, 9];
        let f = arp_request(mac, 0xc612_1e01, 0xc612_1e02);
        assert_eq!(f.len(), 60);
        assert_eq!(&f[..6], &[0xff; 6]);
        // what weir sends is what it learns from: sender address and MAC
        assert_eq!(arp_sender(&f), Some((0xc612_1e01, mac)));
        // not ARP, a multicast sender, a cut frame: nothing learnt
        let mut ip = f.clone();
        ip[12..14].copy_from_slice(&[0x08, 0x00]);
        assert_eq!(arp_sender(&ip), None);
        let mut mc = f.clone();
        mc[22] = 1;
        assert_eq!(arp_sender(&mc), None);
        assert_eq!(arp_sender(&f[..30]), None);
        // on-link: a route through the port with no next hop
        let net = Net::new(
            vec![vec![], vec![]],
            vec![0, 0],
            vec![Route {
                net: 0xc612_1e00,
                len: 24,
                v6: false,
                port: 1,
                via: None,
            }],
        )
        .with_mtu(vec![1500; 2]);
        assert!(net.on_link(1, 0xc612_1e02, false));
        assert!(!net.on_link(0, 0xc612_1e02, false));
        assert!(!net.on_link(1, 0xc612_1f02, false));
        assert!(!net.on_link(1, 0xc612_1e02, true));
        assert!(net.on_link(0, 0xfe80_u128 << 112 | 5, true));
        assert!(!net.on_link(0, 0x2001_0db8_u128 << 96 | 5, true));
        assert_eq!(mask(24, false), 0xffff_ff00);
        assert_eq!(mask(0, false), 0);
        assert_eq!(mask(128, true), u128::MAX);
        assert_eq!(mask(64, true), u128::MAX << 64);
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
