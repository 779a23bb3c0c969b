//! `weir import`: other rule formats to weir's nftables syntax.

use std::fmt::Write;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use weir_classify::classbench::{parse_rules, CbRule};

/// One ClassBench rule as an nftables rule (without indentation).
///
/// Ports become `th sport/dport`, which in nftables applies to packets with a transport header
/// carrying ports (TCP, UDP, UDP-Lite, SCTP, DCCP); ClassBench compares the numbers of any
/// packet. The two agree on every packet whose protocol has ports.
pub fn classbench_rule(r: &CbRule) -> String {
    let mut s = String::new();
    if r.src.1 > 0 {
        let _ = write!(s, "ip saddr {}/{} ", Ipv4Addr::from(r.src.0), r.src.1);
    }
    if r.dst.1 > 0 {
        let _ = write!(s, "ip daddr {}/{} ", Ipv4Addr::from(r.dst.0), r.dst.1);
    }
    if r.proto.1 == 0xff {
        let _ = write!(s, "meta l4proto {} ", r.proto.0);
    }
    for (name, (lo, hi)) in [("sport", r.sport), ("dport", r.dport)] {
        if (lo, hi) != (0, 65535) {
            if lo == hi {
                let _ = write!(s, "th {name} {lo} ");
            } else {
                let _ = write!(s, "th {name} {lo}-{hi} ");
            }
        }
    }
    s.push_str("accept");
    s
}

/// A ClassBench file as an nftables ruleset: one table, one forward chain, one rule a line.
pub fn classbench_ruleset(rules: &[CbRule], source: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# imported from {source} by weir import classbench: {} rules, first match wins",
        rules.len()
    );
    let _ = writeln!(out, "table ip classbench {{");
    let _ = writeln!(out, "    chain forward {{");
    let _ = writeln!(
        out,
        "        type filter hook forward priority filter; policy drop;"
    );
    for r in rules {
        let _ = writeln!(out, "        {}", classbench_rule(r));
    }
    let _ = writeln!(out, "    }}");
    let _ = writeln!(out, "}}");
    out
}

pub fn classbench(file: &Path) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", file.display()))?;
    match parse_rules(&text) {
        Ok(rules) => {
            print!(
                "{}",
                classbench_ruleset(&rules, &file.display().to_string())
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("{}: {e}", file.display());
            Ok(ExitCode::from(1))
        }
    }
}

#[derive(clap::Args)]
pub struct IptArgs {
    /// iptables-save output, or - for standard input.
    file: PathBuf,
    /// The input is ip6tables-save output.
    #[arg(long)]
    v6: bool,
    /// `ipset save` output for the sets named by `-m set --match-set`.
    #[arg(long)]
    ipsets: Option<PathBuf>,
    /// Drop rules with unsupported options (a warning each, and a count) instead of failing.
    #[arg(long)]
    skip_unsupported: bool,
}

pub fn read_input(p: &Path) -> anyhow::Result<String> {
    if p.as_os_str() == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)?;
        Ok(s)
    } else {
        std::fs::read_to_string(p).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", p.display()))
    }
}

/// Translate iptables-save text, printing skipped-rule warnings and errors on stderr; None when
/// it has errors.
pub fn import_text(
    text: &str,
    name: &str,
    v6: bool,
    ipsets: Option<String>,
    skip_unsupported: bool,
) -> Option<String> {
    let opts = weir_lang::iptables::IptOptions {
        skip_unsupported,
        family_v6: v6,
        ipsets,
    };
    match weir_lang::iptables::import_iptables(text, name, &opts) {
        Ok(imp) => {
            for (line, why) in &imp.skipped {
                eprintln!("{name}:{line}: warning: rule skipped: {why}");
            }
            if !imp.skipped.is_empty() {
                eprintln!("{} rule(s) skipped", imp.skipped.len());
            }
            Some(imp.nft)
        }
        Err(errors) => {
            for e in &errors {
                eprintln!("{e}");
            }
            eprintln!(
                "{} error{} in {name}",
                errors.len(),
                if errors.len() == 1 { "" } else { "s" }
            );
            None
        }
    }
}

/// `weir import iptables`: print the translation, warnings for skipped rules on stderr.
pub fn iptables(a: IptArgs) -> anyhow::Result<ExitCode> {
    let text = read_input(&a.file)?;
    let ipsets = match &a.ipsets {
        Some(p) => Some(read_input(p)?),
        None => None,
    };
    let name = a.file.display().to_string();
    match import_text(&text, &name, a.v6, ipsets, a.skip_unsupported) {
        Some(nft) => {
            print!("{nft}");
            Ok(ExitCode::SUCCESS)
        }
        None => Ok(ExitCode::from(1)),
    }
}
