//! `weir import`: other rule formats to weir's nftables syntax.

use std::fmt::Write;
use std::net::Ipv4Addr;
use std::path::Path;
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
