//! `weir check`.

use std::path::Path;
use std::process::ExitCode;
use weir_engine::{Compiled, Mode};

/// `weir check --print`: the ruleset as `nft list ruleset` prints it, or with `json` as `nft
/// -j list ruleset` writes it (nftables syntax, text or JSON, only).
pub fn print(
    file: &Path,
    stateless: bool,
    json: bool,
    format: &crate::cmd::RulesFormat,
) -> anyhow::Result<ExitCode> {
    let fmt = format.format.as_deref().unwrap_or("nft");
    if fmt != "nft" && fmt != "json" {
        anyhow::bail!(
            "--print reads nftables syntax: convert first (weir import iptables FILE > rules.nft)"
        );
    }
    match crate::cmd::load_ast(file, fmt == "json") {
        Ok((rs, ast, _)) => {
            if json {
                // as nft -j: protocols by number, as nft's JSON lists them
                let opts = weir_lang::print::Options {
                    stateless,
                    numeric_proto: true,
                    handles: false,
                };
                let doc = weir_lang::json::output::ruleset(&ast, &rs, &opts);
                println!("{}", serde_json::to_string_pretty(&doc)?);
            } else {
                let opts = weir_lang::print::Options {
                    stateless,
                    numeric_proto: false,
                    handles: false,
                };
                print!("{}", weir_lang::print::ruleset(&ast, &rs, &opts));
            }
            Ok(ExitCode::SUCCESS)
        }
        Err((sources, diags)) => {
            eprint!("{}", weir_lang::diag::render_all(&diags, &sources));
            Ok(ExitCode::from(1))
        }
    }
}

pub fn run(file: &Path, json: bool, format: &crate::cmd::RulesFormat) -> anyhow::Result<ExitCode> {
    let Some(rs) = crate::cmd::load_rules_as(file, format) else {
        return Ok(ExitCode::from(1));
    };
    let s = rs.summary();
    let c = Compiled::build(&rs, Mode::Compiled);
    let mem = c.memory_bytes();
    let ms = c.build_ns as f64 / 1e6;
    if json {
        println!(
            "{}",
            serde_json::json!({
                "file": file.display().to_string(),
                "tables": s.tables, "chains": s.chains, "base_chains": s.base_chains,
                "rules": s.rules, "sets": s.sets, "elements": s.elements,
                "anonymous_elements": s.anon_elements, "flowtables": s.flowtables,
                "compile_ms": ms, "memory_bytes": mem, "stateful": rs.uses_state(),
                "not_evaluated": rs.unevaluated(),
            })
        );
        return Ok(ExitCode::SUCCESS);
    }
    println!("{}: ok", file.display());
    println!("  tables      {}", s.tables);
    println!("  chains      {} ({} base)", s.chains, s.base_chains);
    println!("  rules       {}", s.rules);
    println!(
        "  sets/maps   {} ({} elements; {} more in inline sets)",
        s.sets, s.elements, s.anon_elements
    );
    if s.flowtables > 0 {
        println!("  flowtables  {}", s.flowtables);
    }
    println!("  compiled in {ms:.1} ms, {} of memory", human_bytes(mem));
    let parts: Vec<String> = c
        .memory_breakdown()
        .iter()
        .filter(|p| p.1 > 0)
        .map(|(n, b)| format!("{n} {}", human_bytes(*b)))
        .collect();
    println!("              ({})", parts.join(", "));
    for t in &rs.tables {
        for ch in &t.chains {
            if let Some(b) = &ch.base {
                println!(
                    "  {} {} {}: hook {} priority {} policy {}, {} rules",
                    t.family.name(),
                    t.name,
                    ch.name,
                    b.hook.name(),
                    b.priority,
                    match b.policy {
                        weir_lang::ir::Policy::Accept => "accept",
                        weir_lang::ir::Policy::Drop => "drop",
                    },
                    ch.rules.len()
                );
            }
        }
    }
    if rs.uses_state() {
        println!("  note: uses connection tracking or NAT (ct, nat, flow, dynamic sets): checked, evaluated by the stateful engine");
    }
    let u = rs.unevaluated();
    if !u.is_empty() {
        println!(
            "  not evaluated yet ({}; weir run and weir replay refuse the ruleset):",
            u.len()
        );
        for l in &u {
            println!("    {l}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn human_bytes(b: usize) -> String {
    if b >= 10 << 20 {
        format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
    } else if b >= 10 << 10 {
        format!("{:.1} KiB", b as f64 / 1024.0)
    } else {
        format!("{b} bytes")
    }
}
