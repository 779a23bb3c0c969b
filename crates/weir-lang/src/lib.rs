//! `weir-lang`: the weir rule language.
//!
//! The pipeline is text → [`lexer`] → [`parser`] ([`ast`], with spans) → [`check`] (types,
//! names, hooks, families, loops) → [`ir`], the checked ruleset the engine compiles. Every error
//! is a [`diag::Diagnostic`] that renders as `file:line:column`, the line, and a caret.
//!
//! The syntax is nftables' (see `docs/language.md` for what is covered); `iptables-save` and
//! ClassBench files are imported into the same [`ir`].

pub mod ast;
pub mod check;
pub mod diag;
pub mod iptables;
pub mod ir;
pub mod json;
pub mod lexer;
pub mod optimize;
pub mod parser;
pub mod print;
pub mod session;
pub mod source;
pub mod values;

pub use diag::Diagnostic;
pub use session::Session;
pub use source::{SourceMap, Span};

/// A ruleset that failed to load: its sources (for the messages) and what is wrong.
pub type LoadError = (SourceMap, Vec<Diagnostic>);

/// Parse and check a ruleset file. On success the warnings (if any) come with the ruleset.
pub fn load_file(path: &std::path::Path) -> Result<(ir::Ruleset, Vec<Diagnostic>), LoadError> {
    load_file_ast(path).map(|(rs, _, d)| (rs, d))
}

/// Parse and check ruleset text (named `name` in messages).
pub fn load_str(name: &str, text: &str) -> Result<(ir::Ruleset, Vec<Diagnostic>), LoadError> {
    load_str_ast(name, text).map(|(rs, _, d)| (rs, d))
}

/// As [`load_file`], with the syntax tree the ruleset was checked from (what
/// [`print::ruleset`] prints the rules from). A file whose first character is `{` is nft's
/// JSON syntax ([`json::load_file_ast`]), so every loader (`weir check`, `replay`, `run` and
/// its reloads) reads both.
pub fn load_file_ast(
    path: &std::path::Path,
) -> Result<(ir::Ruleset, ast::File, Vec<Diagnostic>), LoadError> {
    if std::fs::read_to_string(path).is_ok_and(|t| json::looks_like_json(&t)) {
        return json::load_file_ast(path);
    }
    let mut sources = SourceMap::new();
    let (file, mut diags) = parser::parse_file(&mut sources, path);
    finish(sources, file, &mut diags)
}

/// As [`load_str`], with the syntax tree.
pub fn load_str_ast(
    name: &str,
    text: &str,
) -> Result<(ir::Ruleset, ast::File, Vec<Diagnostic>), LoadError> {
    let mut sources = SourceMap::new();
    let (file, mut diags) = parser::parse_str(&mut sources, name, text);
    finish(sources, file, &mut diags)
}

fn finish(
    sources: SourceMap,
    file: ast::File,
    diags: &mut Vec<Diagnostic>,
) -> Result<(ir::Ruleset, ast::File, Vec<Diagnostic>), LoadError> {
    if diags.iter().any(|d| d.severity == diag::Severity::Error) {
        return Err((sources, std::mem::take(diags)));
    }
    let (tables, cd) = check::check(&file);
    diags.extend(cd);
    if diags.iter().any(|d| d.severity == diag::Severity::Error) {
        return Err((sources, std::mem::take(diags)));
    }
    Ok((ir::Ruleset { tables, sources }, file, std::mem::take(diags)))
}
