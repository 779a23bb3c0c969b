//! `weir lab`: the kernel as oracle (crate `weir-lab`).
//!
//! `diff` runs rulesets and captures through a real Linux router (nftables in network
//! namespaces, root only) and through weir's model of the same router, and compares them packet
//! by packet (`--iptables` / `--format iptables`: iptables-save text, loaded in the kernel with
//! iptables-restore and in weir with its importer); `gen` writes a generated ruleset, capture and topology; `predict` shows the weir
//! side alone; `cleanup` removes namespaces left by a lab run that died.
//!
//! Exit codes: 0 no unexplained difference, 1 differences (or nft refused the ruleset),
//! 2 bad input or failure, 77 the lab cannot run here (not root, `ip`/`nft`/`iptables` missing),
//! 130 interrupted (the namespaces are removed).

use anyhow::Context;
use serde_json::json;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use weir_lab::diff::{self, CampaignOptions, Status};
use weir_lab::model::{prepare, EngineMode, Model, Variant};
use weir_lab::{Error, IptBackend, LabOptions, Router, Topology, EXIT_UNAVAILABLE};

#[derive(clap::Args)]
pub struct LabArgs {
    #[command(subcommand)]
    cmd: LabCmd,
}

#[derive(clap::Subcommand)]
enum LabCmd {
    /// Compare the kernel and weir: one ruleset and capture (--rules --pcap --topology), or a
    /// campaign of generated rulesets (--rulesets N --seed S); --iptables / --format iptables:
    /// iptables-save rulesets through iptables-restore and weir's importer. Needs root.
    Diff(DiffArgs),
    /// Write generated ruleset number --index of a campaign, with its capture and topology, to a
    /// folder (no root needed).
    Gen(GenArgs),
    /// The weir side alone: what weir's model of the router does with each packet (no root).
    Predict(PredictArgs),
    /// Remove network namespaces left by lab runs that died (root).
    Cleanup,
}

#[derive(clap::Args)]
struct DiffArgs {
    /// Ruleset file (nftables syntax, or iptables-save / ip6tables-save text with --format).
    #[arg(long, requires_all = ["pcap", "topology"], conflicts_with = "rulesets", required_unless_present = "rulesets")]
    rules: Option<PathBuf>,
    /// Format of --rules: nft, iptables (iptables-save, IPv4) or ip6tables (ip6tables-save).
    /// The iptables formats are loaded in the kernel with iptables-restore / ip6tables-restore
    /// and in weir with its importer.
    #[arg(long, default_value = "nft", value_parser = ["nft", "iptables", "ip6tables"])]
    format: String,
    /// With --format iptables: an ip6tables-save file loaded alongside --rules (IPv6 rules).
    #[arg(long, requires = "rules")]
    rules6: Option<PathBuf>,
    /// The campaign generates iptables-save and ip6tables-save rulesets instead of nft ones.
    #[arg(long, requires = "rulesets")]
    iptables: bool,
    /// Which iptables loads the iptables rulesets: system (what `iptables-restore` is), nft
    /// (iptables-nft-restore) or legacy (iptables-legacy-restore).
    #[arg(long, default_value = "system", value_parser = ["system", "nft", "legacy"])]
    iptables_backend: String,
    /// Capture (pcap or pcapng, Ethernet or raw IP).
    #[arg(long, requires = "rules")]
    pcap: Option<PathBuf>,
    /// Topology (JSON): interfaces, routes, neighbors, and the input interface of each packet.
    #[arg(long, requires = "rules")]
    topology: Option<PathBuf>,
    /// Run a campaign of N generated rulesets, each with its own conversations.
    #[arg(long)]
    rulesets: Option<usize>,
    /// Seed of the campaign (the same seed reproduces the same rulesets and packets).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Packets per generated ruleset (at most).
    #[arg(long, default_value_t = 40)]
    packets: usize,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    /// How long to wait for a packet's output when the ARP barrier does not close the window (ms).
    #[arg(long, default_value_t = 30)]
    quiet_ms: u64,
    /// Where reproducers of unexplained differences are written.
    #[arg(long, default_value = "weir-lab-repro")]
    repro_dir: PathBuf,
    /// Do not write reproducers.
    #[arg(long)]
    no_repro: bool,
    /// Write reproducers without shrinking the ruleset rule by rule.
    #[arg(long)]
    no_minimize: bool,
    /// Print every packet, not only the differences.
    #[arg(long)]
    all: bool,
}

#[derive(clap::Args)]
struct GenArgs {
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Which ruleset of the campaign (0-based).
    #[arg(long, default_value_t = 0)]
    index: usize,
    #[arg(long, default_value_t = 40)]
    packets: usize,
    /// Folder to write rules.nft, packets.pcap, topology.json into (created).
    #[arg(long)]
    out: PathBuf,
}

#[derive(clap::Args)]
struct PredictArgs {
    #[arg(long)]
    rules: PathBuf,
    #[arg(long)]
    pcap: PathBuf,
    #[arg(long)]
    topology: PathBuf,
    #[arg(long)]
    json: bool,
}

/// Print a finished report (a closed pipe, as with `| head`, is not an error).
fn emit(text: &str) {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(text.as_bytes()).and_then(|_| o.flush());
}

pub fn run(a: LabArgs) -> anyhow::Result<ExitCode> {
    match a.cmd {
        LabCmd::Diff(d) => {
            weir_lab::sys::catch_interrupts();
            let ipt = d.iptables || d.format != "nft";
            let r = match (d.rulesets, ipt) {
                (Some(n), false) => campaign(&d, n),
                (Some(n), true) => ipt_campaign(&d, n),
                (None, false) if d.rules6.is_some() => {
                    eprintln!("weir lab: --rules6 goes with --format iptables");
                    return Ok(ExitCode::from(2));
                }
                (None, false) => one(&d),
                (None, true) => ipt_one(&d),
            };
            match r {
                Ok(c) => Ok(c),
                Err(Error::Unavailable(why)) => {
                    eprintln!("weir lab: skipped: {why}");
                    Ok(ExitCode::from(EXIT_UNAVAILABLE))
                }
                Err(Error::KernelRefused(msg)) => {
                    let who = if ipt { "iptables-restore" } else { "nft" };
                    eprintln!("weir lab: {who} refuses the ruleset (weir accepts it):\n{msg}");
                    Ok(ExitCode::from(1))
                }
                Err(Error::Interrupted) => {
                    eprintln!("weir lab: {}", Error::Interrupted);
                    Ok(ExitCode::from(130))
                }
                Err(e) => Err(anyhow::anyhow!("{e}")),
            }
        }
        LabCmd::Gen(g) => generate(&g),
        LabCmd::Predict(p) => predict(&p),
        LabCmd::Cleanup => {
            if let Some(why) = weir_lab::kernel::unavailable() {
                eprintln!("weir lab: skipped: {why}");
                return Ok(ExitCode::from(EXIT_UNAVAILABLE));
            }
            let removed = weir_lab::kernel::cleanup_stale();
            let mut o = format!(
                "removed {} stale namespace{}\n",
                removed.len(),
                if removed.len() == 1 { "" } else { "s" }
            );
            for n in removed {
                o.push_str(&format!("  {n}\n"));
            }
            emit(&o);
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn lab_opts(d: &DiffArgs) -> LabOptions {
    LabOptions {
        quiet: Duration::from_millis(d.quiet_ms.clamp(1, 2000)),
    }
}

fn one(d: &DiffArgs) -> Result<ExitCode, Error> {
    let (rules, pcap, topo) = (
        d.rules.as_ref().unwrap(),
        d.pcap.as_ref().unwrap(),
        d.topology.as_ref().unwrap(),
    );
    let repro = (!d.no_repro).then_some(d.repro_dir.as_path());
    let fd = diff::diff_files(rules, pcap, topo, lab_opts(d), repro)?;
    Ok(print_file_diff(d, &fd))
}

fn backend(d: &DiffArgs) -> IptBackend {
    IptBackend::parse(&d.iptables_backend).unwrap_or_default()
}

/// `--format iptables|ip6tables --rules F [--rules6 F6] --pcap --topology`.
fn ipt_one(d: &DiffArgs) -> Result<ExitCode, Error> {
    let (rules, pcap, topo) = (
        d.rules.as_ref().unwrap(),
        d.pcap.as_ref().unwrap(),
        d.topology.as_ref().unwrap(),
    );
    let (v4, v6) = match d.format.as_str() {
        "ip6tables" => {
            if d.rules6.is_some() {
                return Err(Error::Input(
                    "--rules6 goes with --format iptables (--format ip6tables: --rules is the ip6tables-save file)".into(),
                ));
            }
            (None, Some(rules.as_path()))
        }
        _ => (Some(rules.as_path()), d.rules6.as_deref()),
    };
    let repro = (!d.no_repro).then_some(d.repro_dir.as_path());
    let fd = weir_lab::ipt::diff_files(v4, v6, pcap, topo, backend(d), lab_opts(d), repro)?;
    Ok(print_file_diff(d, &fd))
}

fn print_file_diff(d: &DiffArgs, fd: &diff::FileDiff) -> ExitCode {
    let mut o = String::new();
    let (rules, pcap, topo) = (
        d.rules.as_ref().unwrap(),
        d.pcap.as_ref().unwrap(),
        d.topology.as_ref().unwrap(),
    );
    let r = &fd.report;
    if d.json {
        let obj = json!({
            "rulesets": 1, "packets": r.injected(), "differences": r.differences(), "explained": r.explained(),
            "same": r.same(), "skipped": r.skipped(), "late_frames": r.late, "barrier_misses": r.barrier_misses,
            "kernel_seconds": (r.kernel_seconds * 1000.0).round() / 1000.0,
            "rules": rules.display().to_string(), "format": d.format, "pcap": pcap.display().to_string(), "topology": topo.display().to_string(),
            "notes": fd.notes, "reproducer": fd.reproducer.as_ref().map(|p| p.display().to_string()),
            "results": r.packets.iter().map(|p| p.to_json()).collect::<Vec<_>>(),
        });
        let _ = writeln!(
            o,
            "{}",
            serde_json::to_string_pretty(&obj).unwrap_or_default()
        );
    } else {
        let _ = writeln!(
            o,
            "weir lab diff: {} + {} ({})",
            rules.display(),
            pcap.display(),
            topo.display()
        );
        for n in &fd.notes {
            let _ = writeln!(o, "  note: {n}");
        }
        o.push('\n');
        let _ = writeln!(
            o,
            "  packets {:>6}   same {}, different {}, explained {}, skipped {}",
            r.injected(),
            r.same(),
            r.differences(),
            r.explained(),
            r.skipped()
        );
        let _ = writeln!(
            o,
            "  kernel  {:.3} s; windows closed by the quiet period {}; late frames {}",
            r.kernel_seconds, r.barrier_misses, r.late
        );
        o.push('\n');
        for p in &r.packets {
            let show = d.all || matches!(p.status, Status::Different | Status::Explained(_));
            if !show {
                continue;
            }
            if let Status::Skipped(why) = &p.status {
                let _ = writeln!(o, "#{} skipped: {why}", p.number);
            } else {
                let _ = write!(o, "{}", p.text());
            }
        }
        if let Some(dir) = &fd.reproducer {
            o.push('\n');
            let _ = writeln!(o, "  reproducer: {}", dir.display());
        }
    }
    emit(&o);
    if r.differences() > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

fn campaign_opts(d: &DiffArgs, n: usize) -> CampaignOptions {
    CampaignOptions {
        rulesets: n,
        seed: d.seed,
        packets: d.packets.clamp(8, 1000),
        lab: lab_opts(d),
        repro_dir: (!d.no_repro).then(|| d.repro_dir.clone()),
        minimize: !d.no_minimize,
        progress: !d.json,
    }
}

fn campaign(d: &DiffArgs, n: usize) -> Result<ExitCode, Error> {
    let r = diff::campaign(&campaign_opts(d, n))?;
    Ok(print_campaign(d, &r))
}

fn ipt_campaign(d: &DiffArgs, n: usize) -> Result<ExitCode, Error> {
    let opts = weir_lab::ipt::IptCampaignOptions {
        campaign: campaign_opts(d, n),
        backend: backend(d),
    };
    let r = weir_lab::ipt::campaign(&opts)?;
    Ok(print_campaign(d, &r))
}

fn print_campaign(d: &DiffArgs, r: &diff::CampaignReport) -> ExitCode {
    let mut o = String::new();
    if d.json {
        let _ = writeln!(o, "{}", r.to_json());
    } else {
        let _ = writeln!(
            o,
            "weir lab diff: {} generated {}rulesets, seed {}",
            r.rulesets,
            if r.iptables.is_some() {
                "iptables "
            } else {
                ""
            },
            r.seed
        );
        if let Some(v) = &r.iptables {
            let _ = writeln!(o, "  kernel side: {v}");
        }
        o.push('\n');
        let _ = writeln!(o, "  rulesets      {:>8}", r.rulesets);
        let _ = writeln!(o, "  packets       {:>8}", r.packets);
        let _ = writeln!(
            o,
            "  differences   {:>8}{}",
            r.differences,
            if r.load_mismatches > 0 {
                format!("   ({} rulesets one side refused)", r.load_mismatches)
            } else {
                String::new()
            }
        );
        if r.refused_both > 0 {
            let _ = writeln!(o, "  refused by both {:>6}", r.refused_both);
        }
        let by: Vec<String> = r
            .explained_by
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let _ = writeln!(
            o,
            "  explained     {:>8}{}",
            r.explained,
            if by.is_empty() {
                String::new()
            } else {
                format!("   ({})", by.join(", "))
            }
        );
        let _ = writeln!(
            o,
            "  time          {:>8.1} s   (windows closed by the quiet period {}, late frames {})",
            r.seconds, r.barrier_misses, r.late_frames
        );
        for e in &r.examples {
            o.push('\n');
            let _ = write!(o, "{e}");
            if !e.ends_with('\n') {
                o.push('\n');
            }
        }
        if !r.reproducers.is_empty() {
            o.push('\n');
            let _ = writeln!(o, "  reproducers:");
            for p in &r.reproducers {
                let _ = writeln!(o, "    {}", p.display());
            }
        }
    }
    emit(&o);
    if r.differences > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

fn generate(g: &GenArgs) -> anyhow::Result<ExitCode> {
    let mut o = String::new();
    let (w, rs, cap) = diff::generated(g.seed, g.index, g.packets.clamp(8, 1000));
    let out = &g.out;
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let router = Router::from_topology(&cap.topology(&w)).map_err(|e| anyhow::anyhow!(e))?;
    let prepared = prepare(&router, &cap.packets, &router.packets);
    let pk: Vec<&weir_lab::model::Prepared> = prepared.iter().collect();
    let note = format!(
        "Generated ruleset {} of seed {} (`weir lab gen --seed {} --index {}`).",
        g.index, g.seed, g.seed, g.index
    );
    diff::write_reproducer(out, &rs.render(), &w.topo, &router, &pk, &[note])
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let _ = writeln!(
        o,
        "wrote {} (rules.nft: {} rules, packets.pcap: {} packets, topology.json)",
        out.display(),
        rs.rule_count(),
        cap.packets.len()
    );
    emit(&o);
    Ok(ExitCode::SUCCESS)
}

fn predict(p: &PredictArgs) -> anyhow::Result<ExitCode> {
    let mut o = String::new();
    let text = std::fs::read_to_string(&p.topology)
        .with_context(|| format!("cannot read {}", p.topology.display()))?;
    let topo = Topology::from_json(&p.topology.display().to_string(), &text)
        .map_err(|e| anyhow::anyhow!(e))?;
    let router = Router::from_topology(&topo)
        .map_err(|e| anyhow::anyhow!("{}: {e}", p.topology.display()))?;
    let cap = weir_wire::pcap::read_file(&p.pcap)
        .map_err(|e| anyhow::anyhow!("{}: {e}", p.pcap.display()))?;
    anyhow::ensure!(
        router.packets.len() == cap.packets.len(),
        "{} lists {} packets, the capture {} has {}",
        p.topology.display(),
        router.packets.len(),
        p.pcap.display(),
        cap.packets.len()
    );
    let Some(rs) = crate::cmd::load_rules(&p.rules) else {
        return Ok(ExitCode::from(1));
    };
    let prepared = prepare(&router, &cap.packets, &router.packets);
    let mut m = Model::new(&rs, router.clone());
    let mut rows = Vec::new();
    for pp in &prepared {
        let iif = router.ifaces[pp.iif].name.clone();
        let (packet, weir) = match &pp.skip {
            Some(why) => ("-".to_string(), format!("skipped: {why}")),
            None => {
                let pr = m.predict(pp, Variant::WEIR, EngineMode::Compiled);
                (
                    diff::describe_frame(&pp.frame),
                    diff::describe_prediction(&router, &pr),
                )
            }
        };
        rows.push((pp.index + 1, iif, packet, weir));
    }
    if p.json {
        let v: Vec<_> = rows
            .iter()
            .map(|(n, i, pk, w)| json!({"number": n, "iif": i, "packet": pk, "weir": w}))
            .collect();
        let _ = writeln!(
            o,
            "{}",
            serde_json::to_string_pretty(&json!({"packets": v}))?
        );
    } else {
        for (n, i, pk, w) in rows {
            let _ = writeln!(o, "#{n} {pk} (in {i})\n    weir: {w}");
        }
    }
    emit(&o);
    Ok(ExitCode::SUCCESS)
}
