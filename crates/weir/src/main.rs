//! `weir`: the command-line tool.
//!
//! `check` validates a ruleset, `replay` runs a capture through it, `import` converts other rule
//! formats to weir's nftables syntax, `bench` measures the classifier against the linear
//! reference.

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

mod bench;
mod bench_ipt;
mod bench_lab;
mod bench_pipeline;
mod check;
mod handoff;
mod import;
mod lab;
mod replay;
mod run;

#[derive(Parser)]
#[command(
    name = "weir",
    version,
    about = "weir: packet filter, NAT and L4 load balancer dataplane"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Check a ruleset: print a summary and exit 0, or the errors and exit 1.
    Check {
        /// Ruleset file (nftables syntax, or iptables-save output with --format iptables).
        file: PathBuf,
        /// Print the summary as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        format: RulesFormat,
    },
    /// Run every packet of a pcap/pcapng capture through the base chains of one hook.
    Replay(replay::Args),
    /// Convert another rule format to weir's nftables syntax (printed on stdout).
    Import {
        #[command(subcommand)]
        what: ImportCmd,
    },
    /// The kernel as oracle: differential tests against nftables in network namespaces.
    Lab(lab::LabArgs),
    /// The live dataplane (mode nfqueue: the kernel forwards, weir gives verdicts).
    Run(run::RunArgs),
    /// Talk to a running weir over its control socket.
    Ctl(run::CtlArgs),
    /// Benchmarks.
    Bench {
        #[command(subcommand)]
        what: BenchCmd,
    },
}

#[derive(Subcommand)]
enum ImportCmd {
    /// A ClassBench rule file (first line wins; addresses, ports and protocol; flags ignored).
    Classbench { file: PathBuf },
    /// iptables-save / ip6tables-save output (or - for stdin), one nft rule per iptables rule.
    Iptables(import::IptArgs),
}

#[derive(Subcommand)]
enum BenchCmd {
    /// Compiled classifier vs the linear reference on a rule set and a ClassBench trace.
    Classify(bench::ClassifyArgs),
    /// Print the classic large iptables ruleset: N `-A FORWARD -s ADDR -m state --state
    /// NEW,ESTABLISHED,RELATED -j ACCEPT` rules, policy DROP (iptables-save format).
    GenIptables(bench_ipt::GenArgs),
    /// That ruleset imported, for several N: compiled vs linear Mpps through the whole engine
    /// with traffic matching the last rule, and the import and compile times.
    Iptables(bench_ipt::IptBenchArgs),
    /// The stateful pipeline on one core: new connections per second, established packets
    /// through conntrack and the chains, bytes per connection entry.
    Pipeline(bench_pipeline::PipelineArgs),
    /// A SYN flood of distinct connections through a bounded connection table, with
    /// established connections checked throughout.
    Synflood(bench_pipeline::SynfloodArgs),
    /// Forwarded 64-byte UDP on a veth lab (root): the kernel with no rules, iptables and
    /// nftables with N linear rules, nftables with a set of N addresses, weir inline with the
    /// N linear rules; packets per second and CPU time per packet.
    Lab(bench_lab::LabArgs),
    /// (internal) the traffic generator of `weir bench lab`.
    #[command(hide = true)]
    LabGen(bench_lab::GenArgs),
}

fn main() -> ExitCode {
    // SAFETY: restoring the default action of SIGPIPE at start-up, before any thread exists,
    // so that `weir ... | head` ends quietly like other command-line tools instead of
    // panicking on a broken pipe.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Check { file, json, format } => check::run(&file, json, &format),
        Cmd::Replay(a) => replay::run(a),
        Cmd::Lab(a) => lab::run(a),
        Cmd::Run(a) => run::run(a),
        Cmd::Ctl(a) => run::ctl(a),
        Cmd::Import {
            what: ImportCmd::Classbench { file },
        } => import::classbench(&file),
        Cmd::Import {
            what: ImportCmd::Iptables(a),
        } => import::iptables(a),
        Cmd::Bench {
            what: BenchCmd::Classify(a),
        } => bench::classify(a),
        Cmd::Bench {
            what: BenchCmd::GenIptables(a),
        } => bench_ipt::gen(a),
        Cmd::Bench {
            what: BenchCmd::Iptables(a),
        } => bench_ipt::bench(a),
        Cmd::Bench {
            what: BenchCmd::Pipeline(a),
        } => bench_pipeline::pipeline(a),
        Cmd::Bench {
            what: BenchCmd::Synflood(a),
        } => bench_pipeline::synflood(a),
        Cmd::Bench {
            what: BenchCmd::Lab(a),
        } => bench_lab::lab(a),
        Cmd::Bench {
            what: BenchCmd::LabGen(a),
        } => bench_lab::gen(a),
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            eprintln!("weir: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// How a ruleset file is written (`--format`), for the commands that load one.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct RulesFormat {
    /// Format of the ruleset file: nft (default), iptables (iptables-save output) or ip6tables
    /// (ip6tables-save output), imported as `weir import iptables` does.
    #[arg(long, value_name = "nft|iptables|ip6tables")]
    pub format: Option<String>,
    /// With --format iptables: `ipset save` output for the sets of `-m set --match-set`.
    #[arg(long)]
    pub ipsets: Option<PathBuf>,
    /// With --format iptables: drop rules with unsupported options (a warning each) instead of
    /// failing.
    #[arg(long)]
    pub skip_unsupported: bool,
}

/// Load a ruleset in the given format, printing the diagnostics; None when it has errors.
pub fn load_rules_as(path: &std::path::Path, f: &RulesFormat) -> Option<weir_lang::ir::Ruleset> {
    let v6 = match f.format.as_deref().unwrap_or("nft") {
        "nft" => {
            if f.ipsets.is_some() || f.skip_unsupported {
                eprintln!("weir: --ipsets and --skip-unsupported go with --format iptables");
                return None;
            }
            return load_rules(path);
        }
        "iptables" => false,
        "ip6tables" => true,
        other => {
            eprintln!("weir: unknown format '{other}' (nft, iptables or ip6tables)");
            return None;
        }
    };
    let name = path.display().to_string();
    let read = |p: &std::path::Path| match import::read_input(p) {
        Ok(t) => Some(t),
        Err(e) => {
            eprintln!("weir: {e:#}");
            None
        }
    };
    let text = read(path)?;
    let ipsets = match &f.ipsets {
        Some(p) => Some(read(p)?),
        None => None,
    };
    let nft = import::import_text(&text, &name, v6, ipsets, f.skip_unsupported)?;
    match weir_lang::load_str(&format!("{name} (imported)"), &nft) {
        Ok((rs, _)) => Some(rs),
        Err((sources, diags)) => {
            eprint!("{}", weir_lang::diag::render_all(&diags, &sources));
            eprintln!(
                "{name}: the imported ruleset does not check (an importer bug: please report it)"
            );
            None
        }
    }
}

/// Load and check a ruleset, printing the diagnostics; None when it has errors.
pub fn load_rules(path: &std::path::Path) -> Option<weir_lang::ir::Ruleset> {
    match weir_lang::load_file(path) {
        Ok((rs, warnings)) => {
            if !warnings.is_empty() {
                eprint!("{}", weir_lang::diag::render_all(&warnings, &rs.sources));
            }
            Some(rs)
        }
        Err((sources, diags)) => {
            eprint!("{}", weir_lang::diag::render_all(&diags, &sources));
            let n = diags
                .iter()
                .filter(|d| d.severity == weir_lang::diag::Severity::Error)
                .count();
            eprintln!(
                "{n} error{} in {}",
                if n == 1 { "" } else { "s" },
                path.display()
            );
            None
        }
    }
}
