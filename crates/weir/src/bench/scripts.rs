//! `weir bench scripts`: what per-flow scripts cost weir in NFQUEUE mode, per queued packet
//! and per megabyte, on one forwarded TCP transfer through a three-namespace veth lab,
//!
//! ```text
//!   weirbsc (client, iperf3 -c) --veth-- weirbsr (router: weir in NFQUEUE mode) --veth-- weirbss (server, iperf3 -s)
//! ```
//!
//! with segmentation offloads off on every veth (`ethtool -K DEV tso off gso off gro off`), so
//! that packets are MTU-sized. weir's ruleset queues every packet of the transfer to the
//! scripts (`tcp dport 5201 queue num 200` and `tcp sport 5201 queue num 200` in a postrouting
//! chain of priority 101); queue 200's profile has, in turn: no instance (`weir_none`), a
//! no-op Lua function on every packet of both directions (`weir_noop_lua`), nfqws2's seed
//! profile as weir's native actions (`weir_seed_native`: `multisplit:payload=all` and
//! `fake:ip_ttl=1:badsum:blob=0x10000000:payload=all`, which split and forge every outgoing
//! data packet), and the same as one Lua function for weir's API that has the native actions
//! do the work (`weir_seed_lua`: `seed:payload=all`, whose body is
//! `pkt:desync("multisplit:payload=all")` then
//! `pkt:desync("fake:ip_ttl=1:badsum:blob=0x10000000:payload=all")`). Every instance has
//! `out_range` and `in_range` `a`. Last, `weir_kernel_rules`: the seed profile acting on the
//! first 4 packets of each connection only (`out_range = "-n4"`, `filter_tcp = "5201"`), so
//! that weir installs kernel rules queueing only those (`connbytes`, see
//! `weir_dataplane::scope`): its figures are the packets queued per connection and
//! direction (iperf3 makes two connections; at most N + 3 = 7 each way is the target) and
//! weir's CPU as a share of one core over the transfer (`weir_kernel_rules_cpu_pct`).
//!
//! With `--peer PATH_TO_NFQWS2`, the same lab with nfqws2 as the NFQUEUE listener instead
//! (kernel rules `iptables -t mangle -A POSTROUTING -p tcp --dport 5201 -m mark ! --mark
//! 0x40000000/0x40000000 -j NFQUEUE --queue-num 200` and the same for `--sport`; the mark is
//! nfqws2's own, on what it sends): no Lua function (`peer_none`), a no-op Lua function
//! (`peer_noop_lua`), the seed profile (`peer_seed`), all with `--in-range=a`.
//!
//! The figure: the listener's CPU time (user + system, `/proc/PID/stat`) over the transfer,
//! divided by the packets the kernel queued to it over the same window (the sum of
//! `id_sequence` in the router namespace's `/proc/net/netfilter/nfnetlink_queue`), and by the
//! megabytes iperf3's server received.
//!
//! Everything lives in namespaces named `weirbs*` with addresses in 198.18.0.0/15; every
//! process started is killed by its PID and the namespaces are deleted when the run ends
//! (also on an error). Every wait is bounded.

use super::lab::{ip, nsx, process_ticks, run, tempdir, RemoveDir};
use anyhow::{bail, Context};
use serde_json::{json, Value};
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const NS_C: &str = "weirbsc";
const NS_R: &str = "weirbsr";
const NS_S: &str = "weirbss";
const SERVER: &str = "198.18.51.2";
/// The queue of weir's own kernel rules (`[nfqueue] queue`).
const WEIR_QUEUE: u32 = 9;
/// The queue of the scripts' profile, and nfqws2's `--qnum`.
const SCRIPT_QUEUE: u32 = 200;
/// nfqws2's default `--fwmark`, set on what it sends.
const PEER_MARK: &str = "0x40000000/0x40000000";
/// `weir_kernel_rules`: the packets of each connection's outgoing direction the profile
/// acts on (`out_range = "-nN"`).
const KERNEL_RULES_N: u64 = 4;
/// How long a listener may take to start.
const START_LIMIT: Duration = Duration::from_secs(60);

/// Every configuration, in the order they are printed.
const CONFIGS: [&str; 8] = [
    "weir_none",
    "weir_noop_lua",
    "weir_seed_native",
    "weir_seed_lua",
    "weir_kernel_rules",
    "peer_none",
    "peer_noop_lua",
    "peer_seed",
];

#[derive(clap::Args)]
pub struct ScriptsArgs {
    /// An nfqws2 binary: also measure it as the NFQUEUE listener, on the same lab.
    #[arg(long, value_name = "PATH_TO_NFQWS2")]
    peer: Option<PathBuf>,
    /// zapret2's Lua directory (zapret-lib.lua, zapret-antidpi.lua), for --peer's seed
    /// profile.
    #[arg(long, value_name = "DIR", default_value = "../shared/zapret2/lua")]
    peer_lua: PathBuf,
    /// The transfer's length per configuration (iperf3 -t), seconds.
    #[arg(long, default_value_t = 5)]
    duration: u32,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

/// The lab: three namespaces, two veth pairs, one idle process in the router's namespace
/// (its `/proc/PID/net` shows that namespace's queues).
struct Lab {
    anchor: Child,
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = self.anchor.kill();
        let _ = self.anchor.wait();
        del_namespaces();
    }
}

fn del_namespaces() {
    for ns in [NS_C, NS_R, NS_S] {
        let _ = Command::new("ip")
            .args(["netns", "del", ns])
            .stderr(Stdio::null())
            .status();
    }
}

impl Lab {
    fn up() -> anyhow::Result<Lab> {
        del_namespaces();
        for ns in [NS_C, NS_R, NS_S] {
            ip(&["netns", "add", ns])?;
        }
        let anchor = nsx(NS_R, &["sleep", "100000"])
            .stdin(Stdio::null())
            .spawn()
            .context("starting an idle process in the router's namespace")?;
        let lab = Lab { anchor };
        ip(&[
            "link", "add", "weirbsc0", "netns", NS_C, "type", "veth", "peer", "name", "weirbsr0",
            "netns", NS_R,
        ])?;
        ip(&[
            "link", "add", "weirbsr1", "netns", NS_R, "type", "veth", "peer", "name", "weirbss0",
            "netns", NS_S,
        ])?;
        for ns in [NS_C, NS_R, NS_S] {
            run(nsx(
                ns,
                &[
                    "sysctl",
                    "-qw",
                    "net.ipv6.conf.all.disable_ipv6=1",
                    "net.ipv6.conf.default.disable_ipv6=1",
                ],
            ))?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        for (ns, dev, addr) in [
            (NS_C, "weirbsc0", "198.18.50.2/24"),
            (NS_R, "weirbsr0", "198.18.50.1/24"),
            (NS_R, "weirbsr1", "198.18.51.1/24"),
            (NS_S, "weirbss0", "198.18.51.2/24"),
        ] {
            ip(&["-n", ns, "addr", "add", addr, "dev", dev])?;
            run(nsx(
                ns,
                &[
                    "ethtool", "-K", dev, "tso", "off", "gso", "off", "gro", "off",
                ],
            ))?;
            ip(&["-n", ns, "link", "set", dev, "up"])?;
        }
        ip(&["-n", NS_C, "route", "add", "default", "via", "198.18.50.1"])?;
        ip(&["-n", NS_S, "route", "add", "default", "via", "198.18.51.1"])?;
        run(nsx(NS_R, &["sysctl", "-qw", "net.ipv4.ip_forward=1"]))?;
        Ok(lab)
    }

    /// Packets queued so far in the router's namespace: the sum of every queue's
    /// `id_sequence`, and whether queue `q` has a listener bound.
    fn queued(&self, q: u32) -> (u64, bool) {
        let path = format!("/proc/{}/net/netfilter/nfnetlink_queue", self.anchor.id());
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let mut sum = 0;
        let mut bound = false;
        for l in text.lines() {
            let f: Vec<u64> = l
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            if f.len() >= 8 {
                sum += f[7];
                bound |= f[0] == u64::from(q);
            }
        }
        (sum, bound)
    }
}

/// A process we started; on drop, SIGTERM by its PID, then SIGKILL after 5 s.
struct Proc {
    child: Child,
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = Command::new("kill")
                .args(["-TERM", &self.child.id().to_string()])
                .stderr(Stdio::null())
                .status();
            if let Ok(None) = wait_timeout(&mut self.child, Duration::from_secs(5)) {
                let _ = self.child.kill();
            }
        }
        let _ = self.child.wait();
    }
}

fn wait_timeout(c: &mut Child, limit: Duration) -> std::io::Result<Option<ExitStatus>> {
    let t = Instant::now();
    loop {
        if let Some(st) = c.try_wait()? {
            return Ok(Some(st));
        }
        if t.elapsed() > limit {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether something listens on TCP port 5201 in namespace `ns` (`ss` inside it).
fn listening(ns: &str) -> bool {
    nsx(ns, &["ss", "-Hltn", "sport = :5201"])
        .output()
        .is_ok_and(|o| !String::from_utf8_lossy(&o.stdout).trim().is_empty())
}

/// What one configuration measured.
#[derive(Clone, Copy, Debug, Default)]
struct Figures {
    us: f64,
    /// The listener's CPU over the transfer, in percent of one core.
    cpu_pct: f64,
    us_per_mb: f64,
    packets: u64,
    mbytes: f64,
    mbit_s: f64,
}

/// weir's ruleset: every packet of the transfer, both directions, to queue 200.
const WEIR_RULES: &str = "table inet weirbs {
  chain post {
    type filter hook postrouting priority 101; policy accept;
    tcp dport 5201 queue num 200
    tcp sport 5201 queue num 200
  }
}
";

/// `weir_seed_lua`'s function: nfqws2's seed profile for weir's Lua API, the native actions
/// doing the work (as `weir_seed_native`'s two instances, in the same order).
const SEED_LUA: &str = "function seed(pkt, args)
  pkt:desync(\"multisplit:payload=all\")
  pkt:desync(\"fake:ip_ttl=1:badsum:blob=0x10000000:payload=all\")
end
";

/// weir's configuration for `config` (its scripts section differs).
fn weir_config(dir: &Path, config: &str) -> String {
    // every configuration but weir_kernel_rules measures every packet queued: the kernel
    // rules are not narrowed to what the profile acts on
    let mut s = format!(
        "ruleset = \"rules.nft\"\nmode = \"nfqueue\"\n[nfqueue]\nqueue = {WEIR_QUEUE}\n\
         narrow = {}\n[control]\nsocket = \"{}/weir.sock\"\n[metrics]\naddress = \"\"\n[scripts]\n",
        config == "weir_kernel_rules",
        dir.display()
    );
    match config {
        "weir_noop_lua" => s += "lua = [\"noop.lua\"]\n",
        "weir_seed_lua" => s += "lua = [\"seed.lua\"]\n",
        _ => {}
    }
    s += &format!("[[scripts.profile]]\nqueue = {SCRIPT_QUEUE}\nname = \"bench\"\n");
    let instances: &[&str] = match config {
        "weir_noop_lua" => &["noop:payload=all:dir=any"],
        "weir_seed_native" | "weir_kernel_rules" => &[
            "multisplit:payload=all",
            "fake:ip_ttl=1:badsum:blob=0x10000000:payload=all",
        ],
        "weir_seed_lua" => &["seed:payload=all"],
        _ => &[],
    };
    let ranges = if config == "weir_kernel_rules" {
        s += "filter_tcp = \"5201\"\n";
        format!("out_range = \"-n{KERNEL_RULES_N}\"\nin_range = \"x\"\n")
    } else {
        "out_range = \"a\"\nin_range = \"a\"\n".to_string()
    };
    for d in instances {
        s += &format!("[[scripts.profile.instance]]\ndesync = \"{d}\"\n{ranges}");
    }
    s
}

/// Starts weir (`weir_*`) or nfqws2 (`peer_*`) in the router's namespace and waits until it
/// listens.
fn start_listener(
    a: &ScriptsArgs,
    lab: &Lab,
    dir: &Path,
    config: &str,
) -> anyhow::Result<(Proc, u32)> {
    let log = dir.join(format!("{config}.log"));
    let err = dir.join(format!("{config}.err"));
    let (mut c, queue) = if let Some(peer) = config.strip_prefix("peer_").and(a.peer.as_ref()) {
        let lua = std::fs::canonicalize(&a.peer_lua)
            .with_context(|| format!("--peer-lua {}", a.peer_lua.display()))?;
        let mut args = vec![format!("--qnum={SCRIPT_QUEUE}"), "--in-range=a".into()];
        match config {
            "peer_noop_lua" => {
                args.push("--lua-init=function noop(ctx, desync) end".into());
                args.push("--lua-desync=noop:payload=all".into());
            }
            "peer_seed" => {
                args.insert(
                    1,
                    format!("--lua-init=@{}", lua.join("zapret-lib.lua").display()),
                );
                args.insert(
                    2,
                    format!("--lua-init=@{}", lua.join("zapret-antidpi.lua").display()),
                );
                args.push("--lua-desync=multisplit:payload=all".into());
                args.push("--lua-desync=fake:ip_ttl=1:badsum:blob=0x10000000:payload=all".into());
            }
            _ => {}
        }
        for (flag, port) in [("--dport", "5201"), ("--sport", "5201")] {
            run(nsx(
                NS_R,
                &[
                    "iptables",
                    "-t",
                    "mangle",
                    "-A",
                    "POSTROUTING",
                    "-p",
                    "tcp",
                    flag,
                    port,
                    "-m",
                    "mark",
                    "!",
                    "--mark",
                    PEER_MARK,
                    "-j",
                    "NFQUEUE",
                    "--queue-num",
                    &SCRIPT_QUEUE.to_string(),
                ],
            ))?;
        }
        let mut c = nsx(NS_R, &[peer.to_str().context("--peer: not UTF-8")?]);
        c.args(&args);
        (c, SCRIPT_QUEUE)
    } else {
        std::fs::write(dir.join("rules.nft"), WEIR_RULES)?;
        std::fs::write(dir.join("noop.lua"), "function noop(pkt, args) end\n")?;
        std::fs::write(dir.join("seed.lua"), SEED_LUA)?;
        let cfg = dir.join("weir.toml");
        std::fs::write(&cfg, weir_config(dir, config))?;
        let exe = std::env::current_exe()?;
        let c = nsx(
            NS_R,
            &[
                exe.to_str().unwrap_or("weir"),
                "run",
                "--config",
                cfg.to_str().unwrap_or_default(),
            ],
        );
        (c, WEIR_QUEUE)
    };
    c.stdin(Stdio::null())
        .stdout(std::fs::File::create(&log)?)
        .stderr(std::fs::File::create(&err)?);
    let mut p = Proc {
        child: c.spawn().context("starting the listener")?,
    };
    let weir = config.starts_with("weir");
    let t = Instant::now();
    loop {
        let ready = if weir {
            std::fs::read_to_string(&log).is_ok_and(|s| s.contains("ready"))
        } else {
            lab.queued(queue).1
        };
        if ready {
            break;
        }
        if let Ok(Some(st)) = p.child.try_wait() {
            bail!(
                "the listener exited ({st}): {}{}",
                std::fs::read_to_string(&err).unwrap_or_default().trim(),
                std::fs::read_to_string(&log).unwrap_or_default().trim()
            );
        }
        if t.elapsed() > START_LIMIT {
            bail!("the listener did not start within {START_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // nfqws2 binds its queue before its Lua is loaded: give it a moment
    if !weir {
        std::thread::sleep(Duration::from_millis(300));
        if let Ok(Some(st)) = p.child.try_wait() {
            bail!(
                "nfqws2 exited ({st}): {}",
                std::fs::read_to_string(&err).unwrap_or_default().trim()
            );
        }
    }
    Ok((p, queue))
}

/// One configuration: the listener, a one-shot iperf3 server, the transfer.
fn measure(a: &ScriptsArgs, lab: &Lab, dir: &Path, config: &str) -> anyhow::Result<Figures> {
    let clk = clock_ticks()?;
    let (listener, _queue) = start_listener(a, lab, dir, config)?;
    let pid = listener.child.id();
    let server = Proc {
        child: nsx(NS_S, &["iperf3", "-s", "-1", "-B", SERVER])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting iperf3 -s")?,
    };
    let t = Instant::now();
    while !listening(NS_S) {
        if t.elapsed() > Duration::from_secs(10) {
            bail!("iperf3 -s did not listen within 10 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out_path = dir.join(format!("{config}.iperf3.json"));
    let (q0, _) = lab.queued(0);
    let t0 = process_ticks(pid);
    let mut client = Proc {
        child: nsx(
            NS_C,
            &[
                "iperf3",
                "-c",
                SERVER,
                "-t",
                &a.duration.to_string(),
                "-J",
                "--connect-timeout",
                "3000",
            ],
        )
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path)?)
        .stderr(Stdio::null())
        .spawn()
        .context("starting iperf3 -c")?,
    };
    let limit = Duration::from_secs(u64::from(a.duration) + 30);
    let st = wait_timeout(&mut client.child, limit)?;
    let t1 = process_ticks(pid);
    let (q1, _) = lab.queued(0);
    let text = std::fs::read_to_string(&out_path).unwrap_or_default();
    let Some(st) = st else {
        bail!("iperf3 -c did not finish within {limit:?}");
    };
    let j: Value = serde_json::from_str(&text)
        .with_context(|| format!("iperf3 -c ({st}) printed no JSON: {}", text.trim()))?;
    if let Some(e) = j.get("error") {
        bail!("iperf3 -c failed ({st}): {e}");
    }
    let end = &j["end"]["sum_received"];
    let bytes = end["bytes"].as_f64().unwrap_or(0.0);
    let secs = end["seconds"].as_f64().unwrap_or(0.0);
    if bytes <= 0.0 {
        bail!("iperf3 transferred nothing");
    }
    // the listener must still be alive: its CPU time is read from its /proc entry
    let mut listener = listener;
    if let Ok(Some(st)) = listener.child.try_wait() {
        bail!("the listener exited during the transfer ({st})");
    }
    drop(listener);
    drop(server);
    if config.starts_with("peer") {
        run(nsx(
            NS_R,
            &["iptables", "-t", "mangle", "-F", "POSTROUTING"],
        ))?;
    }
    let packets = q1.saturating_sub(q0);
    let cpu_us = ((t1.0 + t1.1).saturating_sub(t0.0 + t0.1)) as f64 * 1e6 / clk;
    let mbytes = bytes / 1e6;
    let f = Figures {
        us: if packets > 0 {
            cpu_us / packets as f64
        } else {
            0.0
        },
        us_per_mb: cpu_us / mbytes,
        cpu_pct: if secs > 0.0 {
            cpu_us / (secs * 1e6) * 100.0
        } else {
            0.0
        },
        packets,
        mbytes,
        mbit_s: if secs > 0.0 {
            bytes * 8.0 / secs / 1e6
        } else {
            0.0
        },
    };
    if packets == 0 {
        bail!("no packet was queued");
    }
    eprintln!(
        "{config:<17} {:>8.2} us/pkt {:>9.1} us/MB  {:>9} packets  {:>8.1} MB  {:>7.0} Mbit/s",
        f.us, f.us_per_mb, f.packets, f.mbytes, f.mbit_s
    );
    Ok(f)
}

/// Clock ticks per second (`getconf CLK_TCK`).
fn clock_ticks() -> anyhow::Result<f64> {
    let t: f64 = run(Command::new("getconf").arg("CLK_TCK"))?
        .trim()
        .parse()
        .context("getconf CLK_TCK")?;
    anyhow::ensure!(t > 0.0, "CLK_TCK {t}");
    Ok(t)
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

pub fn scripts(a: ScriptsArgs) -> anyhow::Result<ExitCode> {
    if std::fs::metadata("/proc/self").map_or(true, |m| m.uid() != 0) {
        bail!("weir bench scripts needs root (network namespaces, NFQUEUE)");
    }
    let mut tools = vec!["ip", "ethtool", "iperf3", "ss", "getconf", "kill"];
    if a.peer.is_some() {
        tools.push("iptables");
    }
    for t in tools {
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
        (1..=600).contains(&a.duration),
        "--duration: 1 to 600 seconds"
    );
    if let Some(p) = &a.peer {
        anyhow::ensure!(p.is_file(), "--peer {}: no such file", p.display());
        for f in ["zapret-lib.lua", "zapret-antidpi.lua"] {
            anyhow::ensure!(
                a.peer_lua.join(f).is_file(),
                "--peer-lua {}: no {f} there",
                a.peer_lua.display()
            );
        }
    }
    let dir = tempdir()?;
    let _rm = RemoveDir(dir.clone());
    eprintln!(
        "# weir bench scripts: one iperf3 transfer of {} s per configuration, offloads off{}",
        a.duration,
        if a.peer.is_some() {
            ", weir and nfqws2"
        } else {
            ""
        }
    );
    let lab = Lab::up()?;
    let mut out = serde_json::Map::new();
    let mut packets = serde_json::Map::new();
    let mut mbytes = serde_json::Map::new();
    let mut rows = Vec::new();
    for config in CONFIGS {
        let f = if config.starts_with("peer") && a.peer.is_none() {
            None
        } else {
            Some(
                measure(&a, &lab, &dir, config)
                    .with_context(|| format!("configuration {config}"))?,
            )
        };
        if config.starts_with("peer") && a.peer.is_none() {
            continue;
        }
        out.insert(format!("{config}_us"), json!(f.map(|f| round3(f.us))));
        out.insert(
            format!("{config}_us_per_mb"),
            json!(f.map(|f| round3(f.us_per_mb))),
        );
        if config == "weir_kernel_rules" {
            // iperf3's two connections (control and data), each direction
            out.insert(
                "weir_kernel_rules_queued_per_conn_dir".into(),
                json!(f.map(|f| round3(f.packets as f64 / 4.0))),
            );
            out.insert("weir_kernel_rules_n".into(), json!(KERNEL_RULES_N));
            out.insert(
                "weir_kernel_rules_cpu_pct".into(),
                json!(f.map(|f| round3(f.cpu_pct))),
            );
        }
        packets.insert(config.into(), json!(f.map(|f| f.packets)));
        mbytes.insert(config.into(), json!(f.map(|f| round3(f.mbytes))));
        rows.push((config, f));
    }
    drop(lab);
    out.insert("packets".into(), Value::Object(packets));
    out.insert("mbytes".into(), Value::Object(mbytes));
    out.insert("duration_s".into(), json!(a.duration));
    let mut notes = vec![
        "CPU: the listener's user + system time (/proc/PID/stat) over the transfer; packets: \
         what the kernel queued to it over the same window (nfnetlink_queue id_sequence); MB: \
         what iperf3's server received (10^6 bytes)"
            .to_string(),
        "weir_seed_lua: one Lua function doing weir_seed_native's two actions with pkt:desync \
         (the native code does the work)"
            .to_string(),
        "one iperf3 TCP transfer client -> server per configuration, segmentation offloads off \
         on every veth; every packet of both directions queued; out_range and in_range a"
            .to_string(),
        format!(
            "weir_kernel_rules: the seed profile on the first {KERNEL_RULES_N} packets of each \
             connection (out_range -n{KERNEL_RULES_N}, in_range x): weir's kernel rules queue only \
             those (connbytes); queued_per_conn_dir = packets queued / (2 connections x 2 \
             directions), target at most N + 3; cpu_pct = weir's CPU over the transfer in % of \
             one core"
        ),
    ];
    if a.peer.is_some() {
        notes.push(format!(
            "peer: nfqws2 behind iptables -t mangle POSTROUTING NFQUEUE rules for --dport and \
             --sport 5201, skipping its own mark {PEER_MARK}, --in-range=a"
        ));
    }
    out.insert("notes".into(), json!(notes));
    if a.json {
        println!("{}", Value::Object(out));
    } else {
        let mut o = std::io::stdout().lock();
        writeln!(
            o,
            "{:<17} {:>10} {:>12} {:>10} {:>9} {:>8} {:>7}",
            "configuration", "us/pkt", "us/MB", "packets", "MB", "Mbit/s", "cpu %"
        )?;
        for (config, f) in rows {
            match f {
                Some(f) => writeln!(
                    o,
                    "{config:<17} {:>10.2} {:>12.1} {:>10} {:>9.1} {:>8.0} {:>7.2}",
                    f.us, f.us_per_mb, f.packets, f.mbytes, f.mbit_s, f.cpu_pct
                )?,
                None => writeln!(o, "{config:<17} {:>10}", "-")?,
            }
        }
        for n in notes {
            writeln!(o, "# {n}")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
