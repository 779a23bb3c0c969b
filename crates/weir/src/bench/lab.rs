//! `weir bench lab`: forwarded 64-byte UDP packets through a three-namespace veth lab,
//!
//! ```text
//!   weirbg (generator, --gen-cpu) --veth-- weirbf (router + filter, --fw-cpu) --veth-- weirbs (sink)
//! ```
//!
//! with the kernel forwarding (no rules; iptables with N linear FORWARD rules; nftables with N
//! linear rules; nftables with one set of N addresses) and with weir forwarding in inline mode
//! under the same N linear rules, for several N. Every packet matches only the last rule.
//!
//! The method is ../shared/bench/kernel-baseline.sh's: a one-core AF_PACKET generator
//! (`PACKET_QDISC_BYPASS`, `sendmmsg`, 60-byte frames = 64 on the wire, UDP from `--sources`
//! addresses in turn); the router's ingress veth in NAPI mode with GRO on, its NAPI work in one
//! *threaded* NAPI kernel thread pinned to `--fw-cpu`; the sink's veth sends its (cheap, L2)
//! drop to the generator's core with RPS. Forwarded packets are the sink's received packets.
//! CPU time per forwarded packet: for the kernel, the NAPI thread's run time
//! (`/proc/PID/schedstat`); for weir, its process's user + system time (the run time of all
//! its threads), and, reported beside it, what the kernel's NAPI thread spent on the same
//! packets (receiving them for weir's socket and dropping the kernel's own copy).
//!
//! Everything lives in namespaces named `weirb*` with addresses in 198.18.0.0/15, and is removed
//! when the run ends (also on an error).

use anyhow::{bail, Context};
use serde_json::json;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

const NS_GEN: &str = "weirbg";
const NS_FW: &str = "weirbf";
const NS_SINK: &str = "weirbs";
/// Traffic sources: 198.19.240.0 + i.
const SRC_BASE: [u8; 4] = [198, 19, 240, 0];
/// A host behind the sink; static neighbour of the router. Its MAC is not the sink's, so the
/// sink counts each frame and drops it at L2.
const DST_IP: &str = "198.18.1.100";
const DST_MAC: &str = "02:77:62:00:00:64";
/// Every mode, in the order they run.
const MODES: [&str; 5] = [
    "kernel_norules",
    "iptables",
    "nft_linear",
    "nft_set",
    "weir",
];
/// Also measured on request: weir inline over AF_PACKET (TPACKET_V3 ring) instead of AF_XDP.
const EXTRA_MODES: [&str; 1] = ["weir_afpacket"];

#[derive(clap::Args)]
pub struct LabArgs {
    /// The rule counts N.
    #[arg(long, value_delimiter = ',', default_values_t = [1u32, 1000, 10000, 50000])]
    n: Vec<u32>,
    /// The modes to run (kernel_norules, iptables, nft_linear, nft_set, weir; also
    /// weir_afpacket: weir over AF_PACKET instead of AF_XDP).
    #[arg(long, value_delimiter = ',', default_values_t = MODES.map(String::from))]
    modes: Vec<String>,
    /// Measurement window per repetition, seconds.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Traffic before the window, seconds.
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Repetitions per (mode, N); the median is reported.
    #[arg(long, default_value_t = 1)]
    reps: usize,
    /// Distinct source addresses in the traffic (1 to 4096, a power of two).
    #[arg(long, default_value_t = 256)]
    sources: u32,
    #[arg(long, default_value_t = 0)]
    gen_cpu: usize,
    #[arg(long, default_value_t = 1)]
    fw_cpu: usize,
    /// Nice of the generator's and weir's autogroups and of the kernel's NAPI thread.
    #[arg(long, default_value_t = -10)]
    nice: i32,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    /// Also draw CPU time per forwarded packet against N, one line per mode (log-log), as an
    /// SVG chart in this file.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
}

/// The hidden generator (run by `weir bench lab` inside the generator's namespace).
#[derive(clap::Args)]
pub struct GenArgs {
    #[arg(long)]
    iface: String,
    #[arg(long)]
    dst_mac: String,
    #[arg(long)]
    sources: u32,
    #[arg(long)]
    seconds: f64,
    #[arg(long, default_value_t = 256)]
    batch: usize,
}

pub(crate) fn run(mut cmd: impl std::borrow::BorrowMut<Command>) -> anyhow::Result<String> {
    let cmd = cmd.borrow_mut();
    let out = cmd
        .output()
        .with_context(|| format!("running {:?}", cmd.get_program()))?;
    if !out.status.success() {
        bail!(
            "{:?} {:?} failed: {}",
            cmd.get_program(),
            cmd.get_args().collect::<Vec<_>>(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub(crate) fn ip(args: &[&str]) -> anyhow::Result<String> {
    run(Command::new("ip").args(args))
}

/// A command inside namespace `ns`.
pub(crate) fn nsx(ns: &str, args: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).args(args);
    c
}

/// Make the command's process the leader of a new session (so of a new autogroup, which the
/// scheduler weighs against the machine's other sessions) with that autogroup's nice set.
fn own_autogroup(c: &mut Command, nice: i32) {
    let text = format!("{nice}\0");
    // SAFETY: between fork and exec only async-signal-safe calls are made (setsid, open,
    // write, close) on data prepared before the fork.
    unsafe {
        c.pre_exec(move || {
            libc::setsid();
            let fd = libc::open(
                c"/proc/self/autogroup".as_ptr(),
                libc::O_WRONLY | libc::O_CLOEXEC,
            );
            if fd >= 0 {
                libc::write(fd, text.as_ptr() as *const libc::c_void, text.len() - 1);
                libc::close(fd);
            }
            Ok(())
        });
    }
}

/// This weir binary with `args`, in namespace `ns`, pinned to `cpu`, in an autogroup of its
/// own with nice `nice`.
fn weir_on(ns: &str, cpu: usize, nice: i32, args: &[&str]) -> anyhow::Result<Command> {
    let exe = std::env::current_exe()?;
    let cpu = cpu.to_string();
    let mut c = nsx(ns, &["taskset", "-c", &cpu, exe.to_str().unwrap_or("weir")]);
    c.args(args).stdin(Stdio::null());
    own_autogroup(&mut c, nice);
    Ok(c)
}

/// Run time in nanoseconds of one thread (`/proc/PID/schedstat`, first field).
fn thread_ns(path: &Path) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Run time of every thread of a process.
fn process_ns(pid: u32) -> u64 {
    let Ok(d) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    d.flatten()
        .map(|t| thread_ns(&t.path().join("schedstat")))
        .sum()
}

/// A process's user and system time, from `/proc/PID/stat`
/// (fields 14 and 15, clock ticks, all threads): the pair (user, system).
pub(crate) fn process_ticks(pid: u32) -> (u64, u64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // the command name (field 2) may hold spaces: count from the closing parenthesis
    let rest = text.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|x| x.parse().ok())
        .collect();
    match f[..] {
        [u, s] => (u, s),
        _ => (0, 0),
    }
}

/// An interface's counter from a namespace's `/proc/PID/net/dev`: field `i` after the name
/// (0 rx bytes, 1 rx packets, 3 rx drops, 8 tx bytes, 9 tx packets, 11 tx drops).
fn dev_counter(pid: u32, name: &str, i: usize) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/net/dev")).unwrap_or_default();
    text.lines()
        .find_map(|l| {
            let (n, rest) = l.split_once(':')?;
            (n.trim() == name).then(|| rest.split_whitespace().nth(i)?.parse().ok())?
        })
        .unwrap_or(0)
}

/// The lab: three namespaces, two veth pairs, one idle process per namespace (its
/// `/proc/PID/net` shows that namespace's counters), the NAPI thread of the router's ingress.
struct Lab {
    anchors: Vec<Child>,
    gen_pid: u32,
    fw_pid: u32,
    sink_pid: u32,
    napi: u32,
    fw_mac: String,
}

impl Drop for Lab {
    fn drop(&mut self) {
        for a in &mut self.anchors {
            let _ = a.kill();
            let _ = a.wait();
        }
        for ns in [NS_GEN, NS_FW, NS_SINK] {
            let _ = Command::new("ip")
                .args(["netns", "del", ns])
                .stderr(Stdio::null())
                .status();
        }
    }
}

fn napi_threads(prefix: &str) -> Vec<u32> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.starts_with(prefix)) {
            v.push(pid);
        }
    }
    v
}

impl Lab {
    fn up(a: &LabArgs, kernel_forwards: bool) -> anyhow::Result<Lab> {
        for ns in [NS_GEN, NS_FW, NS_SINK] {
            let _ = Command::new("ip")
                .args(["netns", "del", ns])
                .stderr(Stdio::null())
                .status();
        }
        let mut lab = Lab {
            anchors: Vec::new(),
            gen_pid: 0,
            fw_pid: 0,
            sink_pid: 0,
            napi: 0,
            fw_mac: String::new(),
        };
        for ns in [NS_GEN, NS_FW, NS_SINK] {
            ip(&["netns", "add", ns])?;
        }
        for ns in [NS_GEN, NS_FW, NS_SINK] {
            let c = nsx(ns, &["sleep", "100000"])
                .stdin(Stdio::null())
                .spawn()
                .context("starting an idle process in a namespace")?;
            lab.anchors.push(c);
        }
        lab.gen_pid = lab.anchors[0].id();
        lab.fw_pid = lab.anchors[1].id();
        lab.sink_pid = lab.anchors[2].id();
        ip(&[
            "link", "add", "weirbg0", "netns", NS_GEN, "type", "veth", "peer", "name", "weirbf0",
            "netns", NS_FW,
        ])?;
        ip(&[
            "link", "add", "weirbf1", "netns", NS_FW, "type", "veth", "peer", "name", "weirbs0",
            "netns", NS_SINK,
        ])?;
        for ns in [NS_GEN, NS_FW, NS_SINK] {
            run(nsx(
                ns,
                &[
                    "sysctl",
                    "-qw",
                    "net.ipv6.conf.all.disable_ipv6=1",
                    "net.ipv6.conf.default.disable_ipv6=1",
                    "net.ipv4.conf.all.rp_filter=0",
                    "net.ipv4.conf.default.rp_filter=0",
                    "net.ipv4.ip_forward=0",
                ],
            ))?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        ip(&[
            "-n",
            NS_GEN,
            "addr",
            "add",
            "198.18.0.1/24",
            "dev",
            "weirbg0",
        ])?;
        ip(&[
            "-n",
            NS_FW,
            "addr",
            "add",
            "198.18.0.2/24",
            "dev",
            "weirbf0",
        ])?;
        ip(&[
            "-n",
            NS_FW,
            "addr",
            "add",
            "198.18.1.1/24",
            "dev",
            "weirbf1",
        ])?;
        ip(&[
            "-n",
            NS_SINK,
            "addr",
            "add",
            "198.18.1.2/24",
            "dev",
            "weirbs0",
        ])?;
        let fwd = format!("net.ipv4.ip_forward={}", kernel_forwards as u8);
        run(nsx(NS_FW, &["sysctl", "-qw", &fwd]))?;
        for (ns, d) in [
            (NS_GEN, "weirbg0"),
            (NS_FW, "weirbf0"),
            (NS_FW, "weirbf1"),
            (NS_SINK, "weirbs0"),
        ] {
            ip(&["-n", ns, "link", "set", d, "up"])?;
        }
        ip(&[
            "-n",
            NS_FW,
            "route",
            "add",
            "198.19.0.0/16",
            "via",
            "198.18.0.1",
            "dev",
            "weirbf0",
        ])?;
        ip(&[
            "-n",
            NS_FW,
            "neigh",
            "replace",
            DST_IP,
            "lladdr",
            DST_MAC,
            "dev",
            "weirbf1",
            "nud",
            "permanent",
        ])?;
        // the router's ingress in NAPI mode (GRO on, TSO/GSO off at the sender), nothing
        // aggregated (no UDP GRO forwarding)
        run(nsx(
            NS_GEN,
            &["ethtool", "-K", "weirbg0", "tso", "off", "gso", "off"],
        ))?;
        if run(nsx(
            NS_FW,
            &[
                "ethtool",
                "-K",
                "weirbf0",
                "gro",
                "on",
                "rx-gro-list",
                "off",
                "rx-udp-gro-forwarding",
                "off",
            ],
        ))
        .is_err()
        {
            run(nsx(NS_FW, &["ethtool", "-K", "weirbf0", "gro", "on"]))?;
        }
        // threaded NAPI: the one new napi/weirbf0-* kernel thread, pinned to the router's core
        let before = napi_threads("napi/weirbf0-");
        run(nsx(
            NS_FW,
            &["sh", "-c", "echo 1 > /sys/class/net/weirbf0/threaded"],
        ))?;
        let mut napi = None;
        for _ in 0..50 {
            napi = napi_threads("napi/weirbf0-")
                .into_iter()
                .find(|p| !before.contains(p));
            if napi.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        lab.napi = napi.context("no threaded NAPI kernel thread appeared for weirbf0")?;
        run(Command::new("taskset").args(["-pc", &a.fw_cpu.to_string(), &lab.napi.to_string()]))?;
        run(Command::new("renice").args(["-n", &a.nice.to_string(), "-p", &lab.napi.to_string()]))?;
        // the sink's L2 drop runs on the generator's core (RPS)
        let rps = format!(
            "printf '%x' {} > /sys/class/net/weirbs0/queues/rx-0/rps_cpus",
            1u64 << a.gen_cpu
        );
        run(nsx(NS_SINK, &["sh", "-c", &rps]))?;
        lab.fw_mac = run(nsx(NS_FW, &["cat", "/sys/class/net/weirbf0/address"]))?
            .trim()
            .to_string();
        Ok(lab)
    }
}

/// Filler addresses no packet carries: 198.19.0.0, 198.19.0.1, ...
fn filler(i: u32) -> String {
    format!("198.19.{}.{}", i / 256, i % 256)
}

fn source(i: u32) -> String {
    format!("198.19.{}.{}", 240 + i / 256, i % 256)
}

/// The prefix covering the traffic's `nsrc` sources.
fn source_net(nsrc: u32) -> String {
    format!("198.19.240.0/{}", 32 - nsrc.trailing_zeros())
}

/// N linear rules: N - 1 for filler addresses, the last for the traffic's prefix, each
/// written by `rule` between `head` and `tail`.
fn linear(n: u32, nsrc: u32, head: &str, rule: impl Fn(&str) -> String, tail: &str) -> String {
    let mut s = String::from(head);
    for i in 0..n - 1 {
        s.push_str(&rule(&format!("{}/32", filler(i))));
    }
    s.push_str(&rule(&source_net(nsrc)));
    s.push_str(tail);
    s
}

/// The N linear nftables rules (weir loads the same text).
fn nft_linear(n: u32, nsrc: u32) -> String {
    linear(
        n,
        nsrc,
        "table ip weirb {\n chain forward {\n  type filter hook forward priority filter; policy drop;\n",
        |a| format!("  ip saddr {a} ct state new,established,related accept\n"),
        " }\n}\n",
    )
}

/// One set of N addresses, the traffic's among them; one rule. The traffic uses min(N, nsrc)
/// sources.
fn nft_set(n: u32, nsrc: u32) -> String {
    let s = nsrc.min(n);
    let mut t = String::from(
        "table ip weirb {\n set allowed { type ipv4_addr; }\n chain forward {\n  type filter hook forward priority filter; policy drop;\n  ip saddr @allowed accept\n }\n}\n",
    );
    let all: Vec<String> = (0..n - s).map(filler).chain((0..s).map(source)).collect();
    for chunk in all.chunks(1000) {
        t.push_str(&format!(
            "add element ip weirb allowed {{ {} }}\n",
            chunk.join(", ")
        ));
    }
    t
}

fn iptables_linear(n: u32, nsrc: u32) -> String {
    linear(
        n,
        nsrc,
        "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n",
        |a| format!("-A FORWARD -s {a} -m state --state NEW,ESTABLISHED,RELATED -j ACCEPT\n"),
        "COMMIT\n",
    )
}

fn weir_config(dir: &Path, io: &str) -> String {
    format!(
        r#"ruleset = "rules.nft"
mode = "inline"
io = "{io}"
[nfqueue]
batch = 256
[control]
socket = "{}/weir.sock"
[metrics]
address = ""
[[interface]]
name = "weirbf0"
address = ["198.18.0.2"]
[[interface]]
name = "weirbf1"
address = ["198.18.1.1"]
[[route]]
prefix = "198.19.0.0/16"
interface = "weirbf0"
via = "198.18.0.1"
[[route]]
prefix = "198.18.1.0/24"
interface = "weirbf1"
[[neighbour]]
address = "{DST_IP}"
mac = "{DST_MAC}"
"#,
        dir.display()
    )
}

/// One repetition's figures.
#[derive(Clone, Copy, Debug, Default)]
struct Sample {
    pps: f64,
    /// CPU per forwarded packet: the kernel's NAPI thread, or weir's process.
    us: f64,
    /// weir only: the NAPI thread's CPU per forwarded packet.
    kernel_us: f64,
    offered_pps: f64,
}

struct Snap {
    t: Instant,
    sink_rx: u64,
    /// The generator's transmitted and dropped frames.
    offered: u64,
    napi_ns: u64,
    weir_ns: u64,
    /// weir's user and system clock ticks.
    weir_ticks: (u64, u64),
}

/// A running weir (inline) in the router's namespace; stopped when dropped.
struct WeirProc {
    child: Child,
}

impl Drop for WeirProc {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the pid of our own child, which has not been reaped yet.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// One (mode, N): a fresh lab, the rules, `reps` windows of traffic.
fn measure(a: &LabArgs, mode: &str, n: u32, dir: &Path) -> anyhow::Result<(Sample, String)> {
    let weir = mode.starts_with("weir");
    let lab = Lab::up(a, !weir)?;
    let nsrc = if mode == "nft_set" {
        a.sources.min(n)
    } else {
        a.sources
    };
    let rules = dir.join("rules.nft");
    let t0 = Instant::now();
    let mut note = String::new();
    let mut weir_proc = None;
    match mode {
        "kernel_norules" => {}
        "iptables" => {
            std::fs::write(&rules, iptables_linear(n, nsrc))?;
            let f = std::fs::File::open(&rules)?;
            run(nsx(NS_FW, &["iptables-restore"]).stdin(f))?;
            note = run(Command::new("iptables").arg("-V"))?.trim().to_string();
        }
        "nft_linear" | "nft_set" => {
            let text = if mode == "nft_set" {
                nft_set(n, nsrc)
            } else {
                nft_linear(n, nsrc)
            };
            std::fs::write(&rules, text)?;
            run(nsx(
                NS_FW,
                &["nft", "-f", rules.to_str().unwrap_or_default()],
            ))?;
        }
        "weir" | "weir_afpacket" => {
            std::fs::write(&rules, nft_linear(n, nsrc))?;
            let cfg = dir.join("weir.toml");
            let io = if mode == "weir" { "xdp" } else { "afpacket" };
            std::fs::write(&cfg, weir_config(dir, io))?;
            let log = dir.join("weir.log");
            let mut c = weir_on(
                NS_FW,
                a.fw_cpu,
                a.nice,
                &["run", "--config", cfg.to_str().unwrap_or_default()],
            )?;
            c.stdout(std::fs::File::create(&log)?)
                .stderr(std::fs::File::create(dir.join("weir.err"))?);
            let mut p = WeirProc { child: c.spawn()? };
            let t = Instant::now();
            loop {
                if std::fs::read_to_string(&log).is_ok_and(|s| s.contains("ready")) {
                    break;
                }
                if let Ok(Some(st)) = p.child.try_wait() {
                    bail!(
                        "weir exited ({st}): {}",
                        std::fs::read_to_string(dir.join("weir.err")).unwrap_or_default()
                    );
                }
                if t.elapsed() > Duration::from_secs(300) {
                    bail!("weir did not start within 300 s");
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            weir_proc = Some(p);
        }
        m => bail!("unknown mode {m} (one of {})", MODES.join(", ")),
    }
    let load_s = t0.elapsed().as_secs_f64();
    let wpid = weir_proc.as_ref().map(|p| p.child.id());
    let snap = || Snap {
        t: Instant::now(),
        sink_rx: dev_counter(lab.sink_pid, "weirbs0", 1),
        offered: dev_counter(lab.gen_pid, "weirbg0", 9) + dev_counter(lab.gen_pid, "weirbg0", 11),
        napi_ns: thread_ns(&PathBuf::from(format!("/proc/{}/schedstat", lab.napi))),
        weir_ns: wpid.map_or(0, process_ns),
        weir_ticks: wpid.map_or((0, 0), process_ticks),
    };
    let mut samples = Vec::new();
    for _ in 0..a.reps.max(1) {
        let secs = a.warmup + a.duration + 30.0;
        let mut g = weir_on(
            NS_GEN,
            a.gen_cpu,
            a.nice,
            &[
                "bench",
                "lab-gen",
                "--iface",
                "weirbg0",
                "--dst-mac",
                &lab.fw_mac,
                "--sources",
                &nsrc.to_string(),
                "--seconds",
                &secs.to_string(),
            ],
        )?;
        g.stdout(Stdio::null());
        let mut gen = g.spawn().context("starting the generator")?;
        std::thread::sleep(Duration::from_secs_f64(a.warmup));
        let s0 = snap();
        std::thread::sleep(Duration::from_secs_f64(a.duration));
        let s1 = snap();
        // SAFETY: kill(2) on our own child's pid, not yet reaped.
        unsafe { libc::kill(gen.id() as i32, libc::SIGTERM) };
        let _ = gen.wait();
        let el = (s1.t - s0.t).as_secs_f64();
        let fwd = s1.sink_rx.saturating_sub(s0.sink_rx) as f64;
        let napi = s1.napi_ns.saturating_sub(s0.napi_ns) as f64;
        let wns = s1.weir_ns.saturating_sub(s0.weir_ns) as f64;
        let per = |ns: f64| if fwd > 0.0 { ns / fwd / 1e3 } else { 0.0 };
        let (du, ds) = (
            s1.weir_ticks.0.saturating_sub(s0.weir_ticks.0),
            s1.weir_ticks.1.saturating_sub(s0.weir_ticks.1),
        );
        let sys_share = if du + ds > 0 {
            ds as f64 / (du + ds) as f64
        } else {
            0.0
        };
        let s = Sample {
            pps: fwd / el,
            us: per(if weir { wns } else { napi }),
            kernel_us: if weir { per(napi) } else { 0.0 },
            offered_pps: s1.offered.saturating_sub(s0.offered) as f64 / el,
        };
        eprintln!(
            "{mode:<15} N={n:<6} fwd {:>9.0} pps  {:>9.2} us/pkt{}  offered {:>9.0} pps  (load {load_s:.1} s)",
            s.pps,
            s.us,
            if weir {
                format!(
                    " ({:.0}% system; + kernel NAPI {:.2})",
                    sys_share * 100.0,
                    s.kernel_us
                )
            } else {
                String::new()
            },
            s.offered_pps
        );
        samples.push(s);
    }
    if weir && samples.iter().all(|s| s.pps == 0.0) {
        bail!(
            "weir forwarded nothing (see {})",
            dir.join("weir.err").display()
        );
    }
    drop(weir_proc);
    drop(lab);
    std::thread::sleep(Duration::from_millis(500));
    let m = Sample {
        pps: median(samples.iter().map(|s| s.pps).collect()),
        us: median(samples.iter().map(|s| s.us).collect()),
        kernel_us: median(samples.iter().map(|s| s.kernel_us).collect()),
        offered_pps: median(samples.iter().map(|s| s.offered_pps).collect()),
    };
    Ok((m, note))
}

pub fn lab(a: LabArgs) -> anyhow::Result<ExitCode> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("weir bench lab needs root (network namespaces, threaded NAPI)");
    }
    for t in [
        "ip",
        "nft",
        "iptables",
        "iptables-restore",
        "ethtool",
        "taskset",
        "renice",
    ] {
        anyhow::ensure!(
            Command::new("sh")
                .args(["-c", &format!("command -v {t}")])
                .stdout(Stdio::null())
                .status()?
                .success(),
            "missing command: {t}"
        );
    }
    anyhow::ensure!(
        a.sources.is_power_of_two() && a.sources <= 4096,
        "--sources: a power of two, at most 4096"
    );
    for &n in &a.n {
        anyhow::ensure!(
            (1..=61441).contains(&n),
            "N must be in 1..61441 (filler addresses), got {n}"
        );
    }
    for m in &a.modes {
        anyhow::ensure!(
            MODES.contains(&m.as_str()) || EXTRA_MODES.contains(&m.as_str()),
            "unknown mode {m}"
        );
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    anyhow::ensure!(
        a.gen_cpu < cpus && a.fw_cpu < cpus,
        "need CPUs {} and {}",
        a.gen_cpu,
        a.fw_cpu
    );
    if let Some(p) = &a.svg {
        super::chart::check_path(p)?;
    }
    let dir = tempdir()?;
    let _rm = RemoveDir(dir.clone());
    eprintln!(
        "# weir bench lab: N={:?} modes={:?} window {} s, warm-up {} s, {} rep(s), {} sources, generator cpu {}, router cpu {}",
        a.n, a.modes, a.duration, a.warmup, a.reps, a.sources, a.gen_cpu, a.fw_cpu
    );
    let mut out = serde_json::Map::new();
    out.insert("n".into(), json!(a.n));
    let mut notes = Vec::new();
    let mut series = Vec::new();
    for mode in MODES.iter().chain(&EXTRA_MODES).copied() {
        if !a.modes.iter().any(|m| m == mode) {
            continue;
        }
        let mut pps = Vec::new();
        let mut us = Vec::new();
        let mut kus = Vec::new();
        let mut offered = Vec::new();
        for &n in &a.n {
            let (s, note) =
                measure(&a, mode, n, &dir).with_context(|| format!("mode {mode}, N = {n}"))?;
            if !note.is_empty() && !notes.contains(&note) {
                notes.push(note);
            }
            pps.push((s.pps).round());
            us.push((s.us * 1000.0).round() / 1000.0);
            kus.push((s.kernel_us * 1000.0).round() / 1000.0);
            offered.push(s.offered_pps.round());
        }
        series.push(chart_series(mode, false, &a.n, &us));
        if mode.starts_with("weir") {
            series.push(chart_series(mode, true, &a.n, &kus));
        }
        out.insert(format!("{mode}_pps"), json!(pps));
        out.insert(format!("{mode}_us_per_pkt"), json!(us));
        out.insert(format!("{mode}_offered_pps"), json!(offered));
        if mode.starts_with("weir") {
            out.insert(format!("{mode}_kernel_us_per_pkt"), json!(kus));
        }
    }
    out.insert("notes".into(), json!(notes));
    if a.json {
        println!("{}", serde_json::Value::Object(out));
    } else {
        let mut o = std::io::stdout().lock();
        writeln!(
            o,
            "{:<15} {}",
            "mode",
            a.n.iter()
                .map(|n| format!("{:>22}", format!("N={n}")))
                .collect::<String>()
        )?;
        for mode in MODES.iter().chain(&EXTRA_MODES) {
            let (Some(p), Some(u)) = (
                out.get(&format!("{mode}_pps")),
                out.get(&format!("{mode}_us_per_pkt")),
            ) else {
                continue;
            };
            let cell = |i: usize| {
                format!(
                    "{:>10.0} pps {:>6.2} us",
                    p[i].as_f64().unwrap_or(0.0),
                    u[i].as_f64().unwrap_or(0.0)
                )
            };
            writeln!(
                o,
                "{mode:<15} {}",
                (0..a.n.len())
                    .map(|i| format!("{:>22}", cell(i)))
                    .collect::<String>()
            )?;
        }
        if let Some(k) = out.get("weir_kernel_us_per_pkt") {
            writeln!(
                o,
                "{:<15} {}",
                "weir kernel us",
                (0..a.n.len())
                    .map(|i| format!("{:>22.2}", k[i].as_f64().unwrap_or(0.0)))
                    .collect::<String>()
            )?;
        }
    }
    if let Some(p) = &a.svg {
        super::chart::write(p, &chart(&a, series))?;
        eprintln!("weir bench lab: chart written to {}", p.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// One line of the `--svg` chart: a mode's CPU time per forwarded packet (`kernel`: for a weir
/// mode, its kernel NAPI thread's), as printed (rounded to the nanosecond); a point where
/// nothing was forwarded (0) is left out.
fn chart_series(mode: &str, kernel: bool, n: &[u32], us: &[f64]) -> super::chart::Series {
    let (label, color) = match (mode, kernel) {
        ("kernel_norules", _) => ("kernel, no rules", 6),
        ("iptables", _) => ("kernel, iptables: N linear rules", 1),
        ("nft_linear", _) => ("kernel, nftables: N linear rules", 4),
        ("nft_set", _) => ("kernel, nftables: one set of N addresses", 2),
        ("weir", false) => ("weir inline (AF_XDP): N linear rules", 0),
        ("weir", true) => ("kernel NAPI thread under weir (AF_XDP)", 5),
        ("weir_afpacket", false) => ("weir inline (AF_PACKET): N linear rules", 3),
        (_, true) => ("kernel NAPI thread under weir (AF_PACKET)", 7),
        _ => (mode, 6),
    };
    super::chart::Series {
        label: label.into(),
        color,
        points: n.iter().zip(us).map(|(&n, &u)| (n as f64, u)).collect(),
    }
}

/// The chart of `--svg`.
fn chart(a: &LabArgs, series: Vec<super::chart::Series>) -> super::chart::Chart {
    super::chart::Chart {
        title: "weir bench lab: CPU time per forwarded packet against the number of rules".into(),
        notes: vec![
            format!(
                "64-byte UDP from {} sources through a veth lab, the router on one core; \
                 every packet matches only the last of N rules",
                a.sources
            ),
            format!(
                "kernel: its threaded NAPI thread's run time; weir: its process's user + system \
                 time; {} s window, median of {}",
                a.duration,
                a.reps.max(1)
            ),
            super::chart::measured_on(),
        ],
        x_label: "rules (N)".into(),
        y_label: "CPU µs per forwarded packet".into(),
        series,
    }
}

pub(crate) fn tempdir() -> anyhow::Result<PathBuf> {
    let d = std::env::temp_dir().join(format!("weirb-{}", std::process::id()));
    std::fs::create_dir_all(&d)?;
    Ok(d)
}

pub(crate) struct RemoveDir(pub(crate) PathBuf);

impl Drop for RemoveDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The generator: UDP frames of 60 bytes (64 on the wire) from `sources` addresses in turn,
/// `sendmmsg` in batches on an AF_PACKET socket that skips the qdisc, for `seconds` or until
/// killed.
pub fn gen(a: GenArgs) -> anyhow::Result<ExitCode> {
    const LEN: usize = 60;
    let dst = a.dst_mac.parse::<weir_wire::Mac>()?.0;
    let port = weir_io::afpacket::Port::open_tx(&a.iface)?;
    let dip: [u8; 4] = DST_IP.parse::<std::net::Ipv4Addr>()?.octets();
    let nsrc = a.sources.clamp(1, 65536) as usize;
    let mut frames = vec![0u8; nsrc * LEN];
    for (i, f) in frames.chunks_mut(LEN).enumerate() {
        f[..6].copy_from_slice(&dst);
        f[6..12].copy_from_slice(&port.mac);
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        let src = (u32::from_be_bytes(SRC_BASE) + i as u32).to_be_bytes();
        let ip = &mut f[14..34];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&((LEN - 14) as u16).to_be_bytes());
        ip[4..6].copy_from_slice(&(i as u16).to_be_bytes());
        ip[8] = 64;
        ip[9] = 17;
        ip[12..16].copy_from_slice(&src);
        ip[16..20].copy_from_slice(&dip);
        let c = weir_wire::checksum::checksum(ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        f[34..36].copy_from_slice(&1024u16.to_be_bytes());
        f[36..38].copy_from_slice(&9u16.to_be_bytes());
        f[38..40].copy_from_slice(&((LEN - 34) as u16).to_be_bytes());
        f[42..].fill(0x6b);
    }
    let batch = a.batch.clamp(1, 1024);
    let mut port = port;
    let end = Instant::now() + Duration::from_secs_f64(a.seconds);
    let mut idx = 0usize;
    let mut refs: Vec<&[u8]> = Vec::with_capacity(batch);
    while Instant::now() < end {
        refs.clear();
        for _ in 0..batch {
            refs.push(&frames[idx * LEN..(idx + 1) * LEN]);
            idx = (idx + 1) % nsrc;
        }
        port.send_batch(&refs)?;
    }
    println!(
        "sent {} send errors {}",
        port.stats.sent, port.stats.send_errors
    );
    Ok(ExitCode::SUCCESS)
}
