//! The parser: tokens to [`ast::File`].
//!
//! `include "file"` and `define NAME = value` are expanded on the token stream before parsing
//! (`$NAME` splices the defined tokens), so the grammar proper never sees them. The parser
//! recovers at the end of a line: one bad rule is reported and the rest of the file is still
//! checked, so a user sees all the errors at once.

pub use self::preprocess::tokens_text;
use self::preprocess::Preprocessor;
use crate::ast::*;
use crate::diag::Diagnostic;
use crate::lexer::{Tok, Token};
use crate::source::{SourceMap, Span};
use std::collections::HashMap;
use std::path::Path;

mod commands;
mod exprs;
mod literals;
mod preprocess;
mod rules;
mod statements;
#[cfg(test)]
mod tests;

const MAX_INCLUDE_DEPTH: usize = 16;
const MAX_ERRORS: usize = 50;

/// Words that start an expression (a selector or a value generator), besides the bare
/// metadata keys of [`BARE_META`]: see [`is_expr_head`].
const EXPR_HEADS: &[&str] = &[
    "ip", "ip6", "tcp", "udp", "udplite", "sctp", "dccp", "th", "icmp", "icmpv6", "ether", "vlan",
    "meta", "ct", "jhash", "symhash", "numgen", "ah", "esp", "comp", "igmp", "hbh", "rt", "rt0",
    "rt2", "srh", "frag", "dst", "mh", "exthdr", "vxlan", "geneve", "gre", "gretap", "fib",
    "socket", "osf", "ipsec", "tunnel",
];

/// Whether `w` starts an expression: a selector's protocol word, a bare metadata key, a
/// hash or number generator.
fn is_expr_head(w: &str) -> bool {
    EXPR_HEADS.contains(&w) || BARE_META.contains(&w)
}

/// Metadata keys nft reads without `meta` in front (`iifname`, `skuid`, ...).
pub(crate) const BARE_META: &[&str] = &[
    "iifname",
    "oifname",
    "iif",
    "oif",
    "mark",
    "l4proto",
    "nfproto",
    "pkttype",
    "priority",
    "length",
    "protocol",
    "iiftype",
    "oiftype",
    "skuid",
    "skgid",
    "nftrace",
    "rtclassid",
    "cpu",
    "iifgroup",
    "oifgroup",
    "cgroup",
    "time",
    "day",
    "hour",
];

/// Tunnel headers whose inner packet a selector can read (`vxlan ip saddr`).
pub(crate) const TUNNELS: &[&str] = &["vxlan", "geneve", "gre", "gretap"];

/// The fields of an SCTP chunk (`sctp chunk data tsn`).
const SCTP_CHUNK_FIELDS: &[&str] = &[
    "type",
    "flags",
    "length",
    "tsn",
    "stream",
    "ssn",
    "ppid",
    "init-tag",
    "a-rwnd",
    "num-outbound-streams",
    "num-inbound-streams",
    "initial-tsn",
    "cum-tsn-ack",
    "num-gap-ack-blocks",
    "num-dup-tsns",
    "lowest-tsn",
    "seqno",
    "new-cum-tsn",
];

/// The fields of a TCP option (`tcp option maxseg size`).
const TCP_OPTION_FIELDS: &[&str] = &[
    "kind", "length", "size", "count", "left", "right", "tsval", "tsecr", "subtype",
];

/// Words that start a statement.
const STMT_HEADS: &[&str] = &[
    "accept",
    "drop",
    "continue",
    "return",
    "jump",
    "goto",
    "counter",
    "log",
    "limit",
    "quota",
    "reject",
    "snat",
    "dnat",
    "masquerade",
    "redirect",
    "notrack",
    "fwd",
    "flow",
    "add",
    "update",
    "meter",
    "set",
    "delete",
    "comment",
    "queue",
    "tproxy",
    "dup",
    "synproxy",
    "last",
    "reset",
];

fn is_family(w: &str) -> bool {
    matches!(w, "ip" | "ip6" | "inet" | "arp" | "bridge" | "netdev")
}

/// Read a ruleset file (and its includes) and parse it.
pub fn parse_file(sources: &mut SourceMap, path: &Path) -> (File, Vec<Diagnostic>) {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let id = sources.add(path.display().to_string(), Some(path), text);
            parse_source(sources, id)
        }
        Err(e) => (
            File::default(),
            vec![Diagnostic::error(
                Span::new(u32::MAX, 0, 0),
                format!("cannot read {}: {e}", path.display()),
            )],
        ),
    }
}

/// Parse text already added to the source map.
pub fn parse_source(sources: &mut SourceMap, file: u32) -> (File, Vec<Diagnostic>) {
    let mut pre = Preprocessor {
        sources,
        defines: HashMap::new(),
        diags: Vec::new(),
    };
    let mut toks = Vec::new();
    pre.expand_file(file, 0, &mut toks);
    let mut diags = std::mem::take(&mut pre.diags);
    let mut p = Parser {
        toks,
        pos: 0,
        diags: Vec::new(),
        anon_chains: Vec::new(),
        meters: Vec::new(),
        anon_count: 0,
    };
    let f = p.file();
    diags.extend(p.diags);
    (f, diags)
}

/// Parse a string as a ruleset (for tests and generated rulesets).
pub fn parse_str(sources: &mut SourceMap, name: &str, text: &str) -> (File, Vec<Diagnostic>) {
    let id = sources.add(name, None, text.to_string());
    parse_source(sources, id)
}

struct Parser {
    toks: Vec<Token>,
    pos: usize,
    diags: Vec<Diagnostic>,
    /// Anonymous chains (`jump { ... }`) parsed in the current table item, named
    /// `__chainN` as nft names them, added to the table after it.
    anon_chains: Vec<crate::ast::ChainDecl>,
    /// The sets of the `meter` statements of the rule being parsed.
    meters: Vec<crate::ast::SetDecl>,
    anon_count: usize,
}

type PResult<T> = Result<T, Diagnostic>;

impl Parser {
    fn peek(&self) -> &Tok {
        &self.toks[self.pos].tok
    }

    fn peek_at(&self, n: usize) -> &Tok {
        let i = (self.pos + n).min(self.toks.len() - 1);
        &self.toks[i].tok
    }

    fn span(&self) -> Span {
        self.toks[self.pos].span
    }

    fn prev_span(&self) -> Span {
        self.toks[self.pos.saturating_sub(1)].span
    }

    fn bump(&mut self) -> Token {
        let t = self.toks[self.pos].clone();
        if self.pos < self.toks.len() - 1 {
            self.pos += 1;
        }
        t
    }

    fn is_word(&self, w: &str) -> bool {
        matches!(self.peek(), Tok::Word(x) if x == w)
    }

    fn peek_word(&self) -> Option<&str> {
        match self.peek() {
            Tok::Word(w) => Some(w),
            _ => None,
        }
    }

    fn eat_word(&mut self, w: &str) -> bool {
        if self.is_word(w) {
            self.bump();
            true
        } else {
            false
        }
    }

    fn eat(&mut self, t: &Tok) -> bool {
        if self.peek() == t {
            self.bump();
            true
        } else {
            false
        }
    }

    fn err_expected(&self, what: &str) -> Diagnostic {
        Diagnostic::error(
            self.span(),
            format!("expected {what}, found {}", self.peek().describe()),
        )
    }

    fn expect(&mut self, t: Tok, what: &str) -> PResult<Span> {
        if *self.peek() == t {
            Ok(self.bump().span)
        } else {
            Err(self.err_expected(what))
        }
    }

    fn ident(&mut self, what: &str) -> PResult<Ident> {
        match self.peek().clone() {
            Tok::Word(w) => {
                let s = self.bump().span;
                Ok(Ident { name: w, span: s })
            }
            Tok::Str(w) => {
                let s = self.bump().span;
                Ok(Ident { name: w, span: s })
            }
            _ => Err(self.err_expected(what)),
        }
    }

    /// A comment's text: a quoted string or, as nft's grammar allows, one word.
    fn comment_text(&mut self) -> PResult<String> {
        match self.peek().clone() {
            Tok::Str(c) | Tok::Word(c) => {
                self.bump();
                Ok(c)
            }
            _ => Err(self.err_expected("a comment (a quoted string)")),
        }
    }

    fn is_comment_text_at(&self, n: usize) -> bool {
        matches!(self.peek_at(n), Tok::Str(_) | Tok::Word(_))
    }

    fn skip_newlines(&mut self) {
        while matches!(self.peek(), Tok::Newline | Tok::Semi) {
            self.bump();
        }
    }

    fn at_rule_end(&self) -> bool {
        matches!(
            self.peek(),
            Tok::Newline | Tok::Semi | Tok::RBrace | Tok::Eof
        )
    }

    /// Skip to the end of the current line (error recovery), staying inside the current block.
    fn recover(&mut self) {
        let mut depth = 0i32;
        loop {
            match self.peek() {
                Tok::Eof => return,
                Tok::Newline | Tok::Semi if depth <= 0 => return,
                Tok::RBrace if depth <= 0 => return,
                Tok::LBrace => depth += 1,
                Tok::RBrace => depth -= 1,
                _ => {}
            }
            self.bump();
        }
    }

    fn report(&mut self, d: Diagnostic) {
        if self.diags.len() < MAX_ERRORS {
            self.diags.push(d);
        }
    }
}
