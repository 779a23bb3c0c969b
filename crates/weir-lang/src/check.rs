//! The checker: gives the syntax tree types and meaning, reports what cannot work, and lowers it
//! into [`crate::ir`].
//!
//! Checks: families against selectors (`ip saddr` in an `ip6` table), hooks against families and
//! chain types (`type nat hook forward`), set element and map value types, undefined sets, maps,
//! chains, counters and flowtables, jumps to base chains, jump loops and the kernel's jump depth
//! limit, NAT statements in the wrong hook, ranges without `flags interval`.

use self::gather::Accum;
use self::tables::lower_table;
use crate::ast;
use crate::diag::Diagnostic;
use crate::ir::Table;

pub(crate) mod gather;
mod headers;
mod jumps;
mod keys;
pub(crate) use headers::tcp_option_name;
mod ctobj;
mod limits;
mod objects;
mod pending;
mod redirect;
mod rules;
mod sets;
mod tables;
#[cfg(test)]
mod tests;

/// The kernel's jump stack depth (NFT_JUMP_STACK_SIZE).
pub const MAX_JUMP_DEPTH: usize = 16;

/// Check a parsed file and lower it. Errors are collected; the tables are complete only when no
/// error was reported.
pub fn check(file: &ast::File) -> (Vec<Table>, Vec<Diagnostic>) {
    let mut diags = Vec::new();
    let mut acc = Accum::default();
    acc.collect(file, &mut diags);
    let mut tables = Vec::new();
    for t in &acc.tables {
        tables.push(lower_table(t, &mut diags));
    }
    (tables, diags)
}
