//! `weir`: the command-line tool, a thin layer of commands over the library crates.
//!
//! [`cmd`]: `check` validates a ruleset, `replay` runs a capture through it (router mode:
//! `weir_router`), `import` converts other rule formats to weir's nftables syntax, `lab` runs
//! the kernel as an oracle (`weir_lab`), `run` and `ctl` are the dataplane
//! (`weir_dataplane`). [`bench`]: the benchmarks.

use clap::{Parser, Subcommand};
use cmd::RulesFormat;
use std::path::PathBuf;
use std::process::ExitCode;

mod bench;
mod cmd;

use bench::{
    classify as bench_classify, iptables as bench_ipt, lab as bench_lab, nft as bench_nft,
    pipeline as bench_pipeline, scripts as bench_scripts,
};
use cmd::{check, import, lab, replay, run};

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
        /// Ruleset file (nftables syntax, text or JSON, or iptables-save output with --format
        /// iptables).
        file: PathBuf,
        /// Print the summary as JSON; with --print, the ruleset in nft's JSON syntax (as `nft -j
        /// list ruleset` writes it).
        #[arg(long)]
        json: bool,
        /// Print the ruleset as `nft list ruleset` prints it, instead of the summary.
        #[arg(long)]
        print: bool,
        /// With --print: counters without their values (`nft -s`).
        #[arg(long, short = 's', requires = "print")]
        stateless: bool,
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
    /// nft's command line against a running weir (`-f FILE`, `-c`, `list ruleset`, command
    /// words); installed as `nft` (a symlink), a drop-in for the tools that exec nft.
    Nft {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        args: Vec<String>,
    },
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
    Classify(bench_classify::ClassifyArgs),
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
    /// Per-flow scripts in NFQUEUE mode on a veth lab (root): weir's CPU time per queued
    /// packet and per MB of one forwarded TCP transfer, with no instance, a no-op Lua function
    /// and nfqws2's seed profile as native actions; with --peer, nfqws2 on the same lab.
    Scripts(bench_scripts::ScriptsArgs),
    /// What a change through `weir nft` costs a running weir with a large ruleset: one `add
    /// element` and a chain flush with 100 rules (the batch checked, the engines built, each
    /// worker's switch), and `list ruleset`.
    Nft(bench_nft::NftArgs),
}

fn main() -> ExitCode {
    // SAFETY: restoring the default action of SIGPIPE at start-up, before any thread exists,
    // so that `weir ... | head` ends quietly like other command-line tools instead of
    // panicking on a broken pipe.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    // as `nft` (a symlink to weir): nft's command line, whatever it is
    let argv: Vec<String> = std::env::args().collect();
    if argv.first().map(|a| std::path::Path::new(a).file_name())
        == Some(Some(std::ffi::OsStr::new("nft")))
    {
        return cmd::nft::main(&argv[1..]);
    }
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Check {
            file,
            json,
            print,
            stateless,
            format,
        } => {
            if print {
                check::print(&file, stateless, json, &format)
            } else {
                check::run(&file, json, &format)
            }
        }
        Cmd::Replay(a) => replay::run(a),
        Cmd::Lab(a) => lab::run(a),
        Cmd::Run(a) => run::run(a),
        Cmd::Ctl(a) => run::ctl(a),
        Cmd::Nft { args } => return cmd::nft::main(&args),
        Cmd::Import {
            what: ImportCmd::Classbench { file },
        } => import::classbench(&file),
        Cmd::Import {
            what: ImportCmd::Iptables(a),
        } => import::iptables(a),
        Cmd::Bench {
            what: BenchCmd::Classify(a),
        } => bench_classify::classify(a),
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
        Cmd::Bench {
            what: BenchCmd::Scripts(a),
        } => bench_scripts::scripts(a),
        Cmd::Bench {
            what: BenchCmd::Nft(a),
        } => bench_nft::nft(a),
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            eprintln!("weir: {e:#}");
            ExitCode::from(2)
        }
    }
}
