//! nft's JSON syntax (`nft -j`, libnftables-json), in and out.
//!
//! In ([`input`]): a `{"nftables": [...]}` document, or one rule's `expr` array, is
//! translated to nft text that the parser reads, so every check applies unchanged (the house
//! pattern of the iptables importer). Out ([`output`]): a loaded ruleset as `nft -j list
//! ruleset` writes it, built from the same canonical text the printer writes.

mod exprs;
pub mod input;
mod objects;
mod out_expr;
pub mod output;
mod stmts;
mod tables;

pub use input::{to_nft, Error};

use crate::{ast, diag::Diagnostic, ir, source::SourceMap, LoadError, Span};

/// True when a ruleset file's first non-space character is `{` (or `[`): nft's JSON.
pub fn looks_like_json(text: &str) -> bool {
    matches!(text.trim_start().chars().next(), Some('{' | '['))
}

/// Parse and check an nft JSON ruleset (named `name` in messages): translated to nft text
/// (named `NAME (as nft text)`), then loaded as [`crate::load_str_ast`] loads text.
pub fn load_str_ast(
    name: &str,
    text: &str,
) -> Result<(ir::Ruleset, ast::File, Vec<Diagnostic>), LoadError> {
    match to_nft(text) {
        Ok(nft) => crate::load_str_ast(&format!("{name} (as nft text)"), &nft),
        Err(e) => {
            let mut sources = SourceMap::new();
            let id = sources.add(name, None, text.to_string());
            Err((
                sources,
                vec![Diagnostic::error(Span::new(id, 0, 0), e.to_string())],
            ))
        }
    }
}

/// As [`load_str_ast`], from a file.
pub fn load_file_ast(
    path: &std::path::Path,
) -> Result<(ir::Ruleset, ast::File, Vec<Diagnostic>), LoadError> {
    let name = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(text) => load_str_ast(&name, &text),
        Err(e) => {
            let mut sources = SourceMap::new();
            let id = sources.add(name.clone(), None, String::new());
            Err((
                sources,
                vec![Diagnostic::error(
                    Span::new(id, 0, 0),
                    format!("cannot read {name}: {e}"),
                )],
            ))
        }
    }
}
