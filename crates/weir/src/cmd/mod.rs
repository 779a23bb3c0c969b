//! The commands of `weir`, one module each, and what they share: reading a ruleset in the
//! format `--format` names.

pub mod check;
pub mod import;
pub mod lab;
pub mod nft;
pub mod replay;
pub mod run;

use std::path::PathBuf;

/// How a ruleset file is written (`--format`), for the commands that load one.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct RulesFormat {
    /// Format of the ruleset file: nft (default; a file that starts with `{` is read as nft's
    /// JSON syntax), json (nft's JSON syntax, `nft -j`), iptables (iptables-save output) or
    /// ip6tables (ip6tables-save output), imported as `weir import iptables` does.
    #[arg(long, value_name = "nft|json|iptables|ip6tables")]
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
        fmt @ ("nft" | "json") => {
            if f.ipsets.is_some() || f.skip_unsupported {
                eprintln!("weir: --ipsets and --skip-unsupported go with --format iptables");
                return None;
            }
            return report(
                path,
                load_ast(path, fmt == "json").map(|(rs, _, w)| (rs, w)),
            );
        }
        "iptables" => false,
        "ip6tables" => true,
        other => {
            eprintln!("weir: unknown format '{other}' (nft, json, iptables or ip6tables)");
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

/// Parse and check a ruleset file with its syntax tree: nft's JSON syntax when `json` or
/// when the file's first non-space character is `{`, else nftables text.
pub fn load_ast(
    path: &std::path::Path,
    json: bool,
) -> Result<
    (
        weir_lang::ir::Ruleset,
        weir_lang::ast::File,
        Vec<weir_lang::Diagnostic>,
    ),
    weir_lang::LoadError,
> {
    // (weir_lang::load_file_ast reads a file that starts with `{` as JSON by itself)
    if json {
        weir_lang::json::load_file_ast(path)
    } else {
        weir_lang::load_file_ast(path)
    }
}

/// Load and check a ruleset (nftables text, or nft's JSON syntax when the file starts with
/// `{`), printing the diagnostics; None when it has errors.
pub fn load_rules(path: &std::path::Path) -> Option<weir_lang::ir::Ruleset> {
    report(path, load_ast(path, false).map(|(rs, _, w)| (rs, w)))
}

/// A loaded ruleset with its warnings printed, or its errors printed and None.
fn report(
    path: &std::path::Path,
    loaded: Result<(weir_lang::ir::Ruleset, Vec<weir_lang::Diagnostic>), weir_lang::LoadError>,
) -> Option<weir_lang::ir::Ruleset> {
    match loaded {
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
