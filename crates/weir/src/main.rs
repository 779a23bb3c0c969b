//! `weir`: the command-line tool.
//!
//! `check` validates a ruleset, `replay` runs a capture through it, `import` converts other rule
//! formats to weir's nftables syntax, `bench` measures the classifier against the linear
//! reference.

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

mod bench;
mod check;
mod import;
mod lab;
mod replay;

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
        /// Ruleset file (nftables syntax).
        file: PathBuf,
        /// Print the summary as JSON.
        #[arg(long)]
        json: bool,
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
        Cmd::Check { file, json } => check::run(&file, json),
        Cmd::Replay(a) => replay::run(a),
        Cmd::Lab(a) => lab::run(a),
        Cmd::Import {
            what: ImportCmd::Classbench { file },
        } => import::classbench(&file),
        Cmd::Import {
            what: ImportCmd::Iptables(a),
        } => import::iptables(a),
        Cmd::Bench {
            what: BenchCmd::Classify(a),
        } => bench::classify(a),
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            eprintln!("weir: {e:#}");
            ExitCode::from(2)
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
