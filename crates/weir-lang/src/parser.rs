//! The parser: tokens to [`ast::File`].
//!
//! `include "file"` and `define NAME = value` are expanded on the token stream before parsing
//! (`$NAME` splices the defined tokens), so the grammar proper never sees them. The parser
//! recovers at the end of a line: one bad rule is reported and the rest of the file is still
//! checked, so a user sees all the errors at once.

use crate::ast::*;
use crate::diag::Diagnostic;
use crate::lexer::{lex, Tok, Token};
use crate::source::{SourceMap, Span};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

const MAX_INCLUDE_DEPTH: usize = 16;
const MAX_ERRORS: usize = 50;

/// Words that start an expression (a selector or a value generator).
const EXPR_HEADS: &[&str] = &[
    "ip", "ip6", "tcp", "udp", "udplite", "sctp", "dccp", "th", "icmp", "icmpv6", "ether", "vlan",
    "meta", "ct", "iifname", "oifname", "iif", "oif", "mark", "l4proto", "nfproto", "pkttype",
    "priority", "length", "protocol", "jhash", "symhash", "numgen",
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
    "flow",
    "add",
    "update",
    "delete",
    "comment",
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

struct Preprocessor<'a> {
    sources: &'a mut SourceMap,
    defines: HashMap<String, Vec<Token>>,
    diags: Vec<Diagnostic>,
}

impl Preprocessor<'_> {
    fn expand_file(&mut self, file: u32, depth: usize, out: &mut Vec<Token>) {
        let text = self.sources.file(file).text.clone();
        let (toks, diags) = lex(file, &text);
        self.diags.extend(diags);
        let mut i = 0;
        let at_line_start = |out: &Vec<Token>| {
            matches!(
                out.last().map(|t| &t.tok),
                None | Some(Tok::Newline) | Some(Tok::Semi) | Some(Tok::LBrace) | Some(Tok::RBrace)
            )
        };
        while i < toks.len() {
            let t = &toks[i];
            match &t.tok {
                Tok::Eof => break,
                Tok::Word(w) if w == "include" && at_line_start(out) => {
                    match toks.get(i + 1).map(|t| &t.tok) {
                        Some(Tok::Str(name)) => {
                            let span = t.span.to(toks[i + 1].span);
                            self.include(file, name, span, depth, out);
                            i += 2;
                        }
                        _ => {
                            self.diags.push(
                                Diagnostic::error(t.span, "include needs a file name")
                                    .note("expected: include \"file.nft\""),
                            );
                            i += 1;
                        }
                    }
                }
                Tok::Word(w) if (w == "define" || w == "redefine") && at_line_start(out) => {
                    i = self.define(&toks, i);
                }
                Tok::Word(w) if w == "undefine" && at_line_start(out) => {
                    if let Some(Token {
                        tok: Tok::Word(n), ..
                    }) = toks.get(i + 1)
                    {
                        self.defines.remove(n);
                    }
                    i += 2;
                }
                Tok::Var(name) => {
                    match self.defines.get(name) {
                        Some(body) => out.extend(body.iter().cloned()),
                        None => {
                            self.diags.push(
                                Diagnostic::error(t.span, format!("undefined variable '${name}'"))
                                    .note("define it first: define NAME = value"),
                            );
                            // keep a placeholder so the parser can go on
                            out.push(Token {
                                tok: Tok::Word(format!("${name}")),
                                span: t.span,
                            });
                        }
                    }
                    i += 1;
                }
                _ => {
                    out.push(t.clone());
                    i += 1;
                }
            }
        }
        out.push(Token {
            tok: Tok::Newline,
            span: toks.last().map(|t| t.span).unwrap_or_default(),
        });
        if depth == 0 {
            out.push(toks.last().cloned().unwrap_or(Token {
                tok: Tok::Eof,
                span: Span::new(file, 0, 0),
            }));
        }
    }

    fn include(&mut self, from: u32, name: &str, span: Span, depth: usize, out: &mut Vec<Token>) {
        if depth >= MAX_INCLUDE_DEPTH {
            self.diags.push(Diagnostic::error(
                span,
                format!("includes nested deeper than {MAX_INCLUDE_DEPTH} (an include loop?)"),
            ));
            return;
        }
        let base: PathBuf = self
            .sources
            .file(from)
            .path
            .as_ref()
            .and_then(|p| p.parent().map(|d| d.to_path_buf()))
            .unwrap_or_else(|| PathBuf::from("."));
        let path = if Path::new(name).is_absolute() {
            PathBuf::from(name)
        } else {
            base.join(name)
        };
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let id = self
                    .sources
                    .add(path.display().to_string(), Some(&path), text);
                self.expand_file(id, depth + 1, out);
            }
            Err(e) => self.diags.push(Diagnostic::error(
                span,
                format!("cannot include {}: {e}", path.display()),
            )),
        }
    }

    /// `define NAME = tokens...` up to the end of the line (braces may span lines).
    fn define(&mut self, toks: &[Token], start: usize) -> usize {
        let mut i = start + 1;
        let name = match toks.get(i) {
            Some(Token {
                tok: Tok::Word(n), ..
            }) => n.clone(),
            _ => {
                self.diags.push(
                    Diagnostic::error(toks[start].span, "define needs a name")
                        .note("expected: define NAME = value"),
                );
                return skip_line(toks, i);
            }
        };
        i += 1;
        if !matches!(toks.get(i).map(|t| &t.tok), Some(Tok::Eq)) {
            let sp = toks.get(i).map(|t| t.span).unwrap_or(toks[start].span);
            self.diags.push(
                Diagnostic::error(sp, format!("expected '=' after define {name}"))
                    .note("expected: define NAME = value"),
            );
            return skip_line(toks, i);
        }
        i += 1;
        let mut body = Vec::new();
        let mut depth = 0i32;
        while i < toks.len() {
            match &toks[i].tok {
                Tok::Eof => break,
                Tok::Newline | Tok::Semi if depth <= 0 => break,
                Tok::Newline => {
                    i += 1;
                    continue;
                }
                Tok::LBrace => depth += 1,
                Tok::RBrace => depth -= 1,
                _ => {}
            }
            if let Tok::Var(v) = &toks[i].tok {
                match self.defines.get(v) {
                    Some(b) => body.extend(b.iter().cloned()),
                    None => self.diags.push(Diagnostic::error(
                        toks[i].span,
                        format!("undefined variable '${v}'"),
                    )),
                }
            } else {
                body.push(toks[i].clone());
            }
            i += 1;
        }
        if body.is_empty() {
            self.diags.push(Diagnostic::error(
                toks[start].span,
                format!("define {name} has no value"),
            ));
        }
        self.defines.insert(name, body);
        i
    }
}

/// Tokens back to text, one space between them (none before ',' and ')', none after '(').
pub fn tokens_text(toks: &[Token]) -> String {
    let mut s = String::new();
    let mut prev_open = true;
    for t in toks {
        let piece = match &t.tok {
            Tok::Word(w) => w.clone(),
            Tok::Str(x) => format!("\"{x}\""),
            Tok::Var(v) => format!("${v}"),
            Tok::At(v) => format!("@{v}"),
            Tok::LBrace => "{".into(),
            Tok::RBrace => "}".into(),
            Tok::LParen => "(".into(),
            Tok::RParen => ")".into(),
            Tok::LBracket => "[".into(),
            Tok::RBracket => "]".into(),
            Tok::Semi => ";".into(),
            Tok::Newline | Tok::Eof => continue,
            Tok::Comma => ",".into(),
            Tok::Colon => ":".into(),
            Tok::Eq => "=".into(),
            Tok::EqEq => "==".into(),
            Tok::Ne => "!=".into(),
            Tok::Lt => "<".into(),
            Tok::Gt => ">".into(),
            Tok::Le => "<=".into(),
            Tok::Ge => ">=".into(),
            Tok::Amp => "&".into(),
            Tok::Pipe => "|".into(),
            Tok::Caret => "^".into(),
            Tok::Bang => "!".into(),
            Tok::Shl => "<<".into(),
            Tok::Shr => ">>".into(),
        };
        let glue = matches!(t.tok, Tok::Comma | Tok::RParen | Tok::RBracket);
        if !s.is_empty() && !glue && !prev_open {
            s.push(' ');
        }
        prev_open = matches!(t.tok, Tok::LParen | Tok::LBracket);
        s.push_str(&piece);
    }
    s
}

fn skip_line(toks: &[Token], mut i: usize) -> usize {
    while i < toks.len() && !matches!(toks[i].tok, Tok::Newline | Tok::Semi | Tok::Eof) {
        i += 1;
    }
    i
}

struct Parser {
    toks: Vec<Token>,
    pos: usize,
    diags: Vec<Diagnostic>,
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

    fn file(&mut self) -> File {
        let mut f = File::default();
        loop {
            self.skip_newlines();
            if matches!(self.peek(), Tok::Eof) || self.diags.len() >= MAX_ERRORS {
                break;
            }
            match self.command() {
                Ok(c) => f.commands.push(c),
                Err(d) => {
                    self.report(d);
                    self.recover();
                    if matches!(self.peek(), Tok::RBrace) {
                        self.bump();
                    }
                }
            }
        }
        f
    }

    fn opt_family(&mut self) -> Option<Ident> {
        if let Tok::Word(w) = self.peek() {
            if is_family(w) && matches!(self.peek_at(1), Tok::Word(_) | Tok::Str(_)) {
                return self.ident("a family").ok();
            }
        }
        None
    }

    fn command(&mut self) -> PResult<Command> {
        let start = self.span();
        let w = match self.peek_word() {
            Some(w) => w.to_string(),
            None => return Err(self.err_expected("a command (table, add, flush, ...)")),
        };
        match w.as_str() {
            "table" => {
                self.bump();
                self.table(start)
            }
            "add" | "create" | "insert" => {
                self.bump();
                let what = self.ident("table, chain, rule, set, map or element")?;
                match what.name.as_str() {
                    "table" => self.table(start),
                    "chain" => {
                        let family = self.opt_family();
                        let table = self.ident("a table name")?;
                        let name = self.ident("a chain name")?;
                        let chain = if matches!(self.peek(), Tok::LBrace) {
                            self.chain_body(name, start)?
                        } else {
                            ChainDecl {
                                name,
                                hook: None,
                                policy: None,
                                rules: vec![],
                                span: start.to(self.prev_span()),
                            }
                        };
                        Ok(Command::AddChain {
                            family,
                            table,
                            chain,
                        })
                    }
                    "rule" => {
                        let family = self.opt_family();
                        let table = self.ident("a table name")?;
                        let chain = self.ident("a chain name")?;
                        let after = w != "insert";
                        let position = if self.eat_word("position") || self.eat_word("handle") {
                            Position::Handle(self.val()?, after)
                        } else if self.eat_word("index") {
                            Position::Index(self.val()?, after)
                        } else if after {
                            Position::End
                        } else {
                            Position::Start
                        };
                        let rule = self.rule()?;
                        Ok(Command::AddRule {
                            family,
                            table,
                            chain,
                            position,
                            rule,
                        })
                    }
                    "set" | "map" => {
                        let family = self.opt_family();
                        let table = self.ident("a table name")?;
                        let name = self.ident("a set name")?;
                        let set = self.set_body(name, what.name == "map", start)?;
                        Ok(Command::AddSet { family, table, set })
                    }
                    "element" => {
                        let family = self.opt_family();
                        let table = self.ident("a table name")?;
                        let set = self.ident("a set name")?;
                        let (elements, _) = self.set_literal()?;
                        Ok(Command::AddElement {
                            family,
                            table,
                            set,
                            elements,
                            span: start.to(self.prev_span()),
                        })
                    }
                    _ => Err(Diagnostic::error(
                        what.span,
                        format!("expected table, chain, rule, set, map or element after {w}, found '{}'", what.name),
                    )),
                }
            }
            "flush" | "delete" | "destroy" => {
                self.bump();
                let what = self.ident("ruleset, table, chain, set, rule or element")?;
                if what.name == "ruleset" {
                    let _ = self.opt_family_alone();
                    return Ok(Command::FlushRuleset(start.to(what.span)));
                }
                if !matches!(
                    what.name.as_str(),
                    "table" | "chain" | "set" | "map" | "rule" | "element"
                ) {
                    return Err(Diagnostic::error(
                        what.span,
                        format!(
                            "expected ruleset, table, chain, set, map, rule or element, found '{}'",
                            what.name
                        ),
                    ));
                }
                let family = self.opt_family();
                let table = self.ident("a table name")?;
                let name = if what.name != "table" && !self.at_rule_end() {
                    Some(self.ident("a name")?)
                } else {
                    None
                };
                let mut handle = None;
                let mut elements = Vec::new();
                if self.eat_word("handle") {
                    handle = Some(self.val()?);
                }
                if matches!(self.peek(), Tok::LBrace) {
                    elements = self.set_literal()?.0;
                }
                let span = start.to(self.prev_span());
                if w == "flush" {
                    Ok(Command::Flush {
                        what,
                        family,
                        table,
                        name,
                        span,
                    })
                } else {
                    Ok(Command::Delete {
                        what,
                        family,
                        table,
                        name,
                        handle,
                        elements,
                        span,
                    })
                }
            }
            _ => Err(
                Diagnostic::error(start, format!("expected a command, found '{w}'"))
                    .note("commands: table, add, create, insert, delete, flush, define, include"),
            ),
        }
    }

    fn opt_family_alone(&mut self) -> Option<Ident> {
        if let Some(w) = self.peek_word() {
            if is_family(w) {
                return self.ident("a family").ok();
            }
        }
        None
    }

    fn table(&mut self, start: Span) -> PResult<Command> {
        let family = self.opt_family();
        let name = self.ident("a table name")?;
        let mut items = Vec::new();
        if matches!(self.peek(), Tok::LBrace) {
            self.bump();
            loop {
                self.skip_newlines();
                match self.peek() {
                    Tok::RBrace => {
                        self.bump();
                        break;
                    }
                    Tok::Eof => {
                        return Err(Diagnostic::error(
                            name.span,
                            format!("table {} is not closed", name.name),
                        )
                        .note("expected '}' before the end of the file"))
                    }
                    _ => {}
                }
                match self.table_item() {
                    Ok(Some(it)) => items.push(it),
                    Ok(None) => {}
                    Err(d) => {
                        self.report(d);
                        self.recover();
                    }
                }
                if self.diags.len() >= MAX_ERRORS {
                    break;
                }
            }
        }
        Ok(Command::Table {
            family,
            name,
            items,
            span: start.to(self.prev_span()),
        })
    }

    fn table_item(&mut self) -> PResult<Option<TableItem>> {
        let start = self.span();
        let kw = self.ident("chain, set, map, flowtable, counter or quota")?;
        match kw.name.as_str() {
            "chain" => {
                let name = self.ident("a chain name")?;
                Ok(Some(TableItem::Chain(self.chain_body(name, start)?)))
            }
            "set" | "map" => {
                let name = self.ident("a set name")?;
                Ok(Some(TableItem::Set(self.set_body(
                    name,
                    kw.name == "map",
                    start,
                )?)))
            }
            "flowtable" => {
                let name = self.ident("a flowtable name")?;
                Ok(Some(TableItem::Flowtable(
                    self.flowtable_body(name, start)?,
                )))
            }
            "counter" | "quota" | "limit" => {
                let name = self.ident("a name")?;
                let mut body = Vec::new();
                if matches!(self.peek(), Tok::LBrace) {
                    self.bump();
                    loop {
                        match self.peek() {
                            Tok::RBrace => {
                                self.bump();
                                break;
                            }
                            Tok::Eof => return Err(self.err_expected("'}'")),
                            Tok::Newline | Tok::Semi => {
                                self.bump();
                            }
                            _ => body.push(self.val()?),
                        }
                    }
                }
                Ok(Some(TableItem::Obj(ObjDecl {
                    kind: kw,
                    name,
                    body,
                    span: start.to(self.prev_span()),
                })))
            }
            "flags" | "comment" => {
                // table flags / comment: accepted and ignored
                while !self.at_rule_end() {
                    self.bump();
                }
                Ok(None)
            }
            _ => Err(Diagnostic::error(
                kw.span,
                format!(
                    "expected chain, set, map, flowtable, counter or quota, found '{}'",
                    kw.name
                ),
            )),
        }
    }

    fn chain_body(&mut self, name: Ident, start: Span) -> PResult<ChainDecl> {
        self.expect(Tok::LBrace, "'{' after the chain name")?;
        let mut hook = None;
        let mut policy = None;
        let mut rules = Vec::new();
        loop {
            self.skip_newlines();
            match self.peek() {
                Tok::RBrace => {
                    self.bump();
                    break;
                }
                Tok::Eof => {
                    return Err(Diagnostic::error(
                        name.span,
                        format!("chain {} is not closed", name.name),
                    )
                    .note("expected '}' before the end of the file"))
                }
                _ => {}
            }
            let res: PResult<()> = (|| {
                if self.is_word("type") {
                    let s = self.bump().span;
                    let ty = self.ident("a chain type (filter, nat, route)")?;
                    if !self.eat_word("hook") {
                        return Err(self.err_expected("'hook'"));
                    }
                    let h = self.ident("a hook name")?;
                    let mut device = None;
                    if self.eat_word("device") || self.eat_word("devices") {
                        self.eat(&Tok::Eq);
                        device = Some(self.val()?);
                    }
                    if !self.eat_word("priority") {
                        return Err(self.err_expected("'priority'"));
                    }
                    let mut prio = Vec::new();
                    while !self.at_rule_end() {
                        prio.push(self.val_atom()?);
                    }
                    if prio.is_empty() {
                        return Err(self.err_expected("a priority"));
                    }
                    hook = Some(HookSpec {
                        ty,
                        hook: h,
                        device,
                        priority: prio,
                        span: s.to(self.prev_span()),
                    });
                } else if self.is_word("policy") {
                    self.bump();
                    policy = Some(self.ident("accept or drop")?);
                } else if self.is_word("comment") && matches!(self.peek_at(1), Tok::Str(_)) {
                    self.bump();
                    self.bump();
                } else if self.is_word("devices") || self.is_word("device") {
                    self.bump();
                    self.eat(&Tok::Eq);
                    let _ = self.val()?;
                } else {
                    rules.push(self.rule()?);
                }
                if !self.at_rule_end() {
                    return Err(self.err_expected("end of line or ';'"));
                }
                Ok(())
            })();
            if let Err(d) = res {
                self.report(d);
                self.recover();
            }
            if self.diags.len() >= MAX_ERRORS {
                break;
            }
        }
        Ok(ChainDecl {
            name,
            hook,
            policy,
            rules,
            span: start.to(self.prev_span()),
        })
    }

    fn set_body(&mut self, name: Ident, is_map: bool, start: Span) -> PResult<SetDecl> {
        let mut d = SetDecl {
            name,
            is_map,
            key_types: vec![],
            key_typeof: vec![],
            data_types: vec![],
            data_typeof: vec![],
            flags: vec![],
            elements: vec![],
            timeout: None,
            size: None,
            policy: None,
            counter: false,
            span: start,
        };
        self.expect(Tok::LBrace, "'{' after the set name")?;
        loop {
            self.skip_newlines();
            if matches!(self.peek(), Tok::RBrace) {
                self.bump();
                break;
            }
            if matches!(self.peek(), Tok::Eof) {
                return Err(self.err_expected("'}'"));
            }
            let kw = self.ident("type, typeof, flags, elements, timeout, size or policy")?;
            match kw.name.as_str() {
                "type" => {
                    d.key_types = self.type_concat()?;
                    if self.eat(&Tok::Colon) {
                        d.data_types = self.type_concat()?;
                    }
                }
                "typeof" => {
                    d.key_typeof = self.typeof_concat()?;
                    if self.eat(&Tok::Colon) {
                        if self.is_word("verdict") {
                            d.data_types = vec![self.ident("verdict")?];
                        } else {
                            d.data_typeof = self.typeof_concat()?;
                        }
                    }
                }
                "flags" => loop {
                    d.flags.push(self.ident("a set flag")?);
                    if !self.eat(&Tok::Comma) {
                        break;
                    }
                },
                "elements" => {
                    self.expect(Tok::Eq, "'=' after elements")?;
                    let (e, _) = self.set_literal()?;
                    d.elements.extend(e);
                }
                "timeout" => d.timeout = Some(self.val()?),
                "size" => d.size = Some(self.val()?),
                "policy" => d.policy = Some(self.ident("performance or memory")?),
                "counter" => d.counter = true,
                "comment" | "gc-interval" => {
                    self.val()?;
                }
                "auto-merge" => {}
                _ => {
                    return Err(Diagnostic::error(
                        kw.span,
                        format!("unknown set property '{}'", kw.name),
                    )
                    .note("expected one of: type, typeof, flags, elements, timeout, size, policy, counter, comment"))
                }
            }
        }
        d.span = start.to(self.prev_span());
        Ok(d)
    }

    fn type_concat(&mut self) -> PResult<Vec<Ident>> {
        let mut v = vec![self.ident("a type name")?];
        while self.is_word(".") {
            self.bump();
            v.push(self.ident("a type name")?);
        }
        Ok(v)
    }

    fn typeof_concat(&mut self) -> PResult<Vec<Expr>> {
        let mut v = vec![self.selector()?];
        while self.is_word(".") {
            self.bump();
            v.push(self.selector()?);
        }
        Ok(v)
    }

    fn flowtable_body(&mut self, name: Ident, start: Span) -> PResult<FlowtableDecl> {
        let mut ft = FlowtableDecl {
            name,
            hook: None,
            priority: vec![],
            devices: vec![],
            span: start,
        };
        self.expect(Tok::LBrace, "'{' after the flowtable name")?;
        loop {
            self.skip_newlines();
            if matches!(self.peek(), Tok::RBrace) {
                self.bump();
                break;
            }
            if matches!(self.peek(), Tok::Eof) {
                return Err(self.err_expected("'}'"));
            }
            let kw = self.ident("hook, devices, counter or flags")?;
            match kw.name.as_str() {
                "hook" => {
                    ft.hook = Some(self.ident("ingress")?);
                    if self.eat_word("priority") {
                        while !self.at_rule_end() {
                            ft.priority.push(self.val_atom()?);
                        }
                    }
                }
                "devices" => {
                    self.expect(Tok::Eq, "'=' after devices")?;
                    if matches!(self.peek(), Tok::LBrace) {
                        let (els, _) = self.set_literal()?;
                        ft.devices.extend(els.into_iter().map(|e| e.key));
                    } else {
                        ft.devices.push(self.val()?);
                    }
                }
                "counter" => {}
                "flags" => {
                    self.ident("offload")?;
                }
                _ => {
                    return Err(Diagnostic::error(
                        kw.span,
                        format!("unknown flowtable property '{}'", kw.name),
                    )
                    .note("expected one of: hook, devices, counter, flags"))
                }
            }
        }
        ft.span = start.to(self.prev_span());
        Ok(ft)
    }

    /// `{ elem, elem, ... }` with newlines allowed; nested sets (from defines) are flattened.
    fn set_literal(&mut self) -> PResult<(Vec<Elem>, Span)> {
        let open = self.expect(Tok::LBrace, "'{'")?;
        let mut elems = Vec::new();
        loop {
            while matches!(self.peek(), Tok::Newline) {
                self.bump();
            }
            match self.peek() {
                Tok::RBrace => {
                    let close = self.bump().span;
                    return Ok((elems, open.to(close)));
                }
                Tok::Eof => {
                    return Err(Diagnostic::error(open, "set is not closed").note("expected '}'"))
                }
                Tok::LBrace => {
                    let (inner, _) = self.set_literal()?;
                    elems.extend(inner);
                }
                _ => elems.push(self.elem()?),
            }
            while matches!(self.peek(), Tok::Newline) {
                self.bump();
            }
            match self.peek() {
                Tok::Comma => {
                    self.bump();
                }
                Tok::RBrace => {}
                _ => return Err(self.err_expected("',' or '}' in the set")),
            }
        }
    }

    fn elem(&mut self) -> PResult<Elem> {
        let start = self.span();
        let key = self.val()?;
        let mut data = None;
        let mut options = Vec::new();
        loop {
            match self.peek_word() {
                Some("timeout") | Some("expires") | Some("comment") => {
                    let k = self.ident("")?;
                    let v = self.val()?;
                    options.push((k, Some(v)));
                }
                Some("counter") => {
                    let k = self.ident("")?;
                    let mut parts = Vec::new();
                    while self.is_word("packets") || self.is_word("bytes") {
                        self.bump();
                        parts.push(self.val()?);
                    }
                    options.push((k, None));
                }
                _ => break,
            }
        }
        if self.eat(&Tok::Colon) {
            data = Some(match self.peek_word() {
                Some("accept" | "drop" | "continue" | "return" | "jump" | "goto") => {
                    MapData::Verdict(self.verdict()?)
                }
                _ => MapData::Value(self.val()?),
            });
        }
        Ok(Elem {
            key,
            data,
            options,
            span: start.to(self.prev_span()),
        })
    }

    /// A value: atoms joined by `.` (concatenation), spaced `-` (range) and `/` (prefix or
    /// mask), or a set literal. Inside sets a `,` separates elements; on the right of a match
    /// (`flags` true) a comma list is a list of flags (`syn,ack`).
    fn val(&mut self) -> PResult<Val> {
        self.val_concat(false)
    }

    fn rhs_val(&mut self) -> PResult<Val> {
        self.val_concat(true)
    }

    fn val_concat(&mut self, flags: bool) -> PResult<Val> {
        let start = self.span();
        let mut parts = vec![self.val_range(flags)?];
        while self.is_word(".") {
            self.bump();
            parts.push(self.val_range(flags)?);
        }
        Ok(if parts.len() == 1 {
            parts.pop().unwrap()
        } else {
            Val::Concat(parts, start.to(self.prev_span()))
        })
    }

    fn val_range(&mut self, flags: bool) -> PResult<Val> {
        let a = if flags {
            self.val_flags()?
        } else {
            self.val_atom()?
        };
        if self.is_word("-") {
            self.bump();
            let b = self.val_atom()?;
            return Ok(Val::Range(Box::new(a), Box::new(b)));
        }
        if self.is_word("/") {
            self.bump();
            let b = self.val_flags()?;
            return Ok(Val::Prefix(Box::new(a), Box::new(b)));
        }
        Ok(a)
    }

    /// A single value or a comma list of flags (`syn,ack`).
    fn val_flags(&mut self) -> PResult<Val> {
        let start = self.span();
        let first = self.val_atom()?;
        if !matches!(self.peek(), Tok::Comma) {
            return Ok(first);
        }
        let mut v = vec![first];
        while matches!(self.peek(), Tok::Comma) && matches!(self.peek_at(1), Tok::Word(_)) {
            self.bump();
            v.push(self.val_atom()?);
        }
        Ok(Val::List(v, start.to(self.prev_span())))
    }

    fn val_atom(&mut self) -> PResult<Val> {
        match self.peek().clone() {
            Tok::Word(w) => {
                let s = self.bump().span;
                Ok(Val::Word(w, s))
            }
            Tok::Str(w) => {
                let s = self.bump().span;
                Ok(Val::Str(w, s))
            }
            Tok::LBrace => {
                let (e, s) = self.set_literal()?;
                Ok(Val::Set(e, s))
            }
            Tok::LParen => {
                // ( a | b | c ): a union of flags
                let open = self.bump().span;
                let mut v = vec![self.val_atom()?];
                while self.eat(&Tok::Pipe) || self.eat(&Tok::Comma) {
                    v.push(self.val_atom()?);
                }
                let close = self.expect(Tok::RParen, "')'")?;
                Ok(if v.len() == 1 {
                    v.pop().unwrap()
                } else {
                    Val::List(v, open.to(close))
                })
            }
            Tok::LBracket => {
                // [2001:db8::1]:80 or [2001:db8::1]
                let open = self.bump().span;
                let addr = self.val_atom()?;
                let close = self.expect(Tok::RBracket, "']'")?;
                let _ = open.to(close);
                Ok(addr)
            }
            _ => Err(self.err_expected("a value")),
        }
    }

    fn verdict(&mut self) -> PResult<VerdictAst> {
        let kw = self.ident("a verdict")?;
        Ok(match kw.name.as_str() {
            "accept" => VerdictAst::Accept(kw.span),
            "drop" => VerdictAst::Drop(kw.span),
            "continue" => VerdictAst::Continue(kw.span),
            "return" => VerdictAst::Return(kw.span),
            "jump" | "goto" => {
                let target = self.ident("a chain name")?;
                let sp = kw.span.to(target.span);
                if kw.name == "jump" {
                    VerdictAst::Jump(target, sp)
                } else {
                    VerdictAst::Goto(target, sp)
                }
            }
            _ => {
                return Err(Diagnostic::error(
                    kw.span,
                    format!("expected a verdict, found '{}'", kw.name),
                )
                .note("verdicts: accept, drop, continue, return, jump CHAIN, goto CHAIN"))
            }
        })
    }

    fn rule(&mut self) -> PResult<Rule> {
        let start = self.span();
        let first = self.pos;
        let mut items = Vec::new();
        while !self.at_rule_end() {
            items.push(self.item()?);
        }
        Ok(Rule {
            items,
            span: start.to(self.prev_span()),
            text: tokens_text(&self.toks[first..self.pos]),
        })
    }

    fn item(&mut self) -> PResult<Item> {
        let start = self.span();
        let w = match self.peek() {
            Tok::Word(w) => w.clone(),
            _ => return Err(self.err_expected("a match or a statement")),
        };
        if STMT_HEADS.contains(&w.as_str()) {
            return self.statement(&w, start);
        }
        if !EXPR_HEADS.contains(&w.as_str()) {
            return Err(Diagnostic::error(
                start,
                format!("expected a match or a statement, found '{w}'"),
            )
            .note("a match starts with a selector (ip, ip6, tcp, udp, th, icmp, icmpv6, meta, ct, iifname, oifname, mark, ...); a statement is accept, drop, counter, log, limit, reject, jump, snat, dnat, ..."));
        }
        let lhs = self.expr()?;
        if let Expr::Selector(ws, sp) = &lhs {
            if ws.len() == 2 && ws[0].name == "ct" && ws[1].name == "count" {
                let over = self.eat_word("over");
                let op_span = self.prev_span();
                let v = self.val_atom()?;
                return Ok(Item::Match {
                    lhs: lhs.clone(),
                    op: Some((if over { CmpOp::Gt } else { CmpOp::Le }, op_span)),
                    rhs: Rhs::Val(v),
                    span: sp.to(self.prev_span()),
                });
            }
        }
        if self.eat_word("set") {
            let value = self.value_expr()?;
            return Ok(Item::Assign {
                target: lhs,
                value,
                span: start.to(self.prev_span()),
            });
        }
        if self.eat_word("vmap") {
            let map = self.set_ref()?;
            return Ok(Item::Vmap {
                key: lhs,
                map,
                span: start.to(self.prev_span()),
            });
        }
        let op = match self.peek() {
            Tok::EqEq => Some(CmpOp::Eq),
            Tok::Ne => Some(CmpOp::Ne),
            Tok::Lt => Some(CmpOp::Lt),
            Tok::Gt => Some(CmpOp::Gt),
            Tok::Le => Some(CmpOp::Le),
            Tok::Ge => Some(CmpOp::Ge),
            Tok::Word(w) => match w.as_str() {
                "eq" => Some(CmpOp::Eq),
                "ne" => Some(CmpOp::Ne),
                "lt" => Some(CmpOp::Lt),
                "gt" => Some(CmpOp::Gt),
                "le" => Some(CmpOp::Le),
                "ge" => Some(CmpOp::Ge),
                _ => None,
            },
            _ => None,
        };
        let op = op.map(|o| (o, self.bump().span));
        if self.at_rule_end() {
            return Err(Diagnostic::error(
                lhs.span(),
                "a selector needs a value to compare with",
            )
            .note("for example: ip saddr 198.18.0.0/15, tcp dport { 22, 80 }, ct state established,related"));
        }
        let rhs = match self.peek() {
            Tok::LBrace | Tok::At(_) => Rhs::Set(self.set_ref()?),
            _ => Rhs::Val(self.rhs_val()?),
        };
        Ok(Item::Match {
            lhs,
            op,
            rhs,
            span: start.to(self.prev_span()),
        })
    }

    fn set_ref(&mut self) -> PResult<SetRef> {
        match self.peek().clone() {
            Tok::At(name) => {
                let s = self.bump().span;
                Ok(SetRef::Named(Ident { name, span: s }))
            }
            Tok::LBrace => {
                let (e, s) = self.set_literal()?;
                Ok(SetRef::Anon(e, s))
            }
            _ => Err(self.err_expected("a set: '@name' or '{ ... }'")),
        }
    }

    /// A selector: the protocol word and its field words.
    fn selector(&mut self) -> PResult<Expr> {
        let head = self.ident("a selector")?;
        let mut words = vec![head.clone()];
        match head.name.as_str() {
            "iifname" | "oifname" | "iif" | "oif" | "mark" | "l4proto" | "nfproto" | "pkttype"
            | "priority" | "length" | "protocol" => {}
            "ct" => {
                let w = self.ident("a ct key (state, mark, status, original, reply, ...)")?;
                let dir = matches!(w.name.as_str(), "original" | "reply");
                words.push(w);
                if dir {
                    words.push(self.ident("a ct key")?);
                }
            }
            _ => {
                words.push(self.ident(&format!("a {} field", head.name))?);
            }
        }
        let span = head.span.to(self.prev_span());
        Ok(Expr::Selector(words, span))
    }

    /// A primary expression: selector or generator, then binary operators and concatenations.
    fn expr(&mut self) -> PResult<Expr> {
        let start = self.span();
        let mut parts = vec![self.binop_expr()?];
        while self.is_word(".") {
            self.bump();
            parts.push(self.binop_expr()?);
        }
        let e = if parts.len() == 1 {
            parts.pop().unwrap()
        } else {
            Expr::Concat(parts, start.to(self.prev_span()))
        };
        if self.is_word("map") {
            self.bump();
            let m = self.set_ref()?;
            return Ok(Expr::Map(Box::new(e), m, start.to(self.prev_span())));
        }
        Ok(e)
    }

    fn binop_expr(&mut self) -> PResult<Expr> {
        let start = self.span();
        let mut e = self.primary()?;
        loop {
            let op = match self.peek() {
                Tok::Amp => BinOp::And,
                Tok::Pipe => BinOp::Or,
                Tok::Caret => BinOp::Xor,
                Tok::Shl => BinOp::Shl,
                Tok::Shr => BinOp::Shr,
                _ => break,
            };
            self.bump();
            let v = self.val_atom()?;
            e = Expr::Binop(op, Box::new(e), v, start.to(self.prev_span()));
        }
        Ok(e)
    }

    fn primary(&mut self) -> PResult<Expr> {
        let start = self.span();
        match self.peek_word() {
            Some("jhash") | Some("symhash") => {
                let kind = self.ident("")?;
                let key = if kind.name == "jhash" {
                    Some(Box::new(self.hash_key()?))
                } else {
                    None
                };
                if !self.eat_word("mod") {
                    return Err(self.err_expected("'mod'"));
                }
                let modulus = self.val_atom()?;
                let mut seed = None;
                let mut offset = None;
                loop {
                    if self.eat_word("seed") {
                        seed = Some(self.val_atom()?);
                    } else if self.eat_word("offset") {
                        offset = Some(self.val_atom()?);
                    } else {
                        break;
                    }
                }
                Ok(Expr::Hash {
                    kind,
                    key,
                    modulus,
                    seed,
                    offset,
                    span: start.to(self.prev_span()),
                })
            }
            Some("numgen") => {
                self.bump();
                let mode = self.ident("inc or random")?;
                if !self.eat_word("mod") {
                    return Err(self.err_expected("'mod'"));
                }
                let modulus = self.val_atom()?;
                let offset = if self.eat_word("offset") {
                    Some(self.val_atom()?)
                } else {
                    None
                };
                Ok(Expr::Numgen {
                    mode,
                    modulus,
                    offset,
                    span: start.to(self.prev_span()),
                })
            }
            Some(w) if EXPR_HEADS.contains(&w) => self.selector(),
            _ => Err(self.err_expected("a selector (ip saddr, tcp dport, meta mark, ...)")),
        }
    }

    /// The key of `jhash`: selectors joined by `.` (no `map` suffix).
    fn hash_key(&mut self) -> PResult<Expr> {
        let start = self.span();
        let mut parts = vec![self.selector()?];
        while self.is_word(".") {
            self.bump();
            parts.push(self.selector()?);
        }
        Ok(if parts.len() == 1 {
            parts.pop().unwrap()
        } else {
            Expr::Concat(parts, start.to(self.prev_span()))
        })
    }

    /// A value-producing expression (after `set` or `to`): a selector expression, a generator,
    /// a map lookup or a constant.
    fn value_expr(&mut self) -> PResult<Expr> {
        match self.peek_word() {
            Some(w) if EXPR_HEADS.contains(&w) => self.expr(),
            _ => Ok(Expr::Const(self.val()?)),
        }
    }

    fn statement(&mut self, w: &str, start: Span) -> PResult<Item> {
        match w {
            "accept" | "drop" | "continue" | "return" | "jump" | "goto" => {
                Ok(Item::Verdict(self.verdict()?))
            }
            "counter" => {
                self.bump();
                let mut name = None;
                let mut packets = None;
                let mut bytes = None;
                loop {
                    if self.eat_word("name") {
                        name = Some(self.val_atom()?);
                    } else if self.eat_word("packets") {
                        packets = Some(self.val_atom()?);
                    } else if self.eat_word("bytes") {
                        bytes = Some(self.val_atom()?);
                    } else {
                        break;
                    }
                }
                Ok(Item::Counter {
                    name,
                    packets,
                    bytes,
                    span: start.to(self.prev_span()),
                })
            }
            "log" => {
                self.bump();
                let mut options = Vec::new();
                loop {
                    match self.peek_word() {
                        Some("prefix" | "level" | "group" | "snaplen" | "queue-threshold") => {
                            let k = self.ident("")?;
                            let v = self.val_atom()?;
                            options.push((k, Some(v)));
                        }
                        Some("flags") => {
                            let k = self.ident("")?;
                            let v = self.val_flags()?;
                            options.push((k, Some(v)));
                        }
                        _ => break,
                    }
                }
                Ok(Item::Log {
                    options,
                    span: start.to(self.prev_span()),
                })
            }
            "limit" => {
                self.bump();
                if !self.eat_word("rate") {
                    return Err(self.err_expected("'rate'"));
                }
                let over = self.eat_word("over");
                self.eat_word("until");
                let mut rate = Vec::new();
                while let Some(w) = self.peek_word() {
                    if w == "burst" || STMT_HEADS.contains(&w) || EXPR_HEADS.contains(&w) {
                        break;
                    }
                    rate.push(self.val_atom()?);
                }
                if rate.is_empty() {
                    return Err(self.err_expected("a rate such as 10/second"));
                }
                let burst = if self.eat_word("burst") {
                    let mut b = vec![self.val_atom()?];
                    if matches!(self.peek_word(), Some(u) if u.ends_with("bytes") || u == "packets")
                    {
                        b.push(self.val_atom()?);
                    }
                    Some(b)
                } else {
                    None
                };
                Ok(Item::Limit {
                    over,
                    rate,
                    burst,
                    span: start.to(self.prev_span()),
                })
            }
            "quota" => {
                self.bump();
                if self.eat_word("name") {
                    let n = self.val_atom()?;
                    return Ok(Item::Quota {
                        over: false,
                        amount: vec![],
                        used: None,
                        name: Some(n),
                        span: start.to(self.prev_span()),
                    });
                }
                let over = self.eat_word("over");
                self.eat_word("until");
                let mut amount = vec![self.val_atom()?];
                if matches!(self.peek_word(), Some(u) if u.ends_with("bytes")) {
                    amount.push(self.val_atom()?);
                }
                let used = if self.eat_word("used") {
                    let mut u = vec![self.val_atom()?];
                    if matches!(self.peek_word(), Some(u) if u.ends_with("bytes")) {
                        u.push(self.val_atom()?);
                    }
                    Some(u)
                } else {
                    None
                };
                Ok(Item::Quota {
                    over,
                    amount,
                    used,
                    name: None,
                    span: start.to(self.prev_span()),
                })
            }
            "reject" => {
                self.bump();
                let with = if self.eat_word("with") {
                    let kind = self.ident("icmp, icmpv6, icmpx or tcp")?;
                    let v = if kind.name == "tcp" {
                        if !self.eat_word("reset") {
                            return Err(self.err_expected("'reset'"));
                        }
                        None
                    } else {
                        self.eat_word("type");
                        Some(self.val_atom()?)
                    };
                    Some((kind, v))
                } else {
                    None
                };
                Ok(Item::Reject {
                    with,
                    span: start.to(self.prev_span()),
                })
            }
            "snat" | "dnat" | "masquerade" | "redirect" => {
                let kind = self.ident("")?;
                let family = if matches!(self.peek_word(), Some("ip" | "ip6"))
                    && (matches!(self.peek_at(1), Tok::Word(w) if w == "to"))
                {
                    Some(self.ident("")?)
                } else {
                    None
                };
                let mut addr = None;
                let mut port = None;
                let has_to = self.eat_word("to");
                if has_to || matches!(kind.name.as_str(), "snat" | "dnat") {
                    if matches!(self.peek(), Tok::Colon) {
                        self.bump();
                        port = Some(Expr::Const(self.val_range(false)?));
                    } else if !self.at_rule_end() {
                        let a = self.value_expr()?;
                        addr = Some(a);
                        if self.eat(&Tok::Colon) {
                            port = Some(self.value_expr()?);
                        }
                    }
                    if addr.is_none() && port.is_none() {
                        return Err(self.err_expected("an address or :port after 'to'"));
                    }
                }
                let mut flags = Vec::new();
                while matches!(
                    self.peek_word(),
                    Some("random" | "persistent" | "fully-random")
                ) {
                    flags.push(self.ident("")?);
                    self.eat(&Tok::Comma);
                }
                Ok(Item::Nat {
                    kind,
                    family,
                    addr,
                    port,
                    flags,
                    span: start.to(self.prev_span()),
                })
            }
            "notrack" => Ok(Item::Notrack(self.bump().span)),
            "flow" => {
                self.bump();
                if !(self.eat_word("add") || self.eat_word("offload")) {
                    return Err(self.err_expected("'add' or 'offload'"));
                }
                match self.peek().clone() {
                    Tok::At(n) => {
                        let s = self.bump().span;
                        Ok(Item::FlowAdd(Ident { name: n, span: s }, start.to(s)))
                    }
                    _ => Err(self.err_expected("a flowtable: '@name'")),
                }
            }
            "add" | "update" | "delete" => {
                let op = self.ident("")?;
                let set = match self.peek().clone() {
                    Tok::At(n) => {
                        let s = self.bump().span;
                        Ident { name: n, span: s }
                    }
                    _ => return Err(self.err_expected("a set: '@name'")),
                };
                self.expect(Tok::LBrace, "'{'")?;
                let key = self.expr()?;
                let mut timeout = None;
                let mut stmts = Vec::new();
                loop {
                    if self.eat_word("timeout") {
                        timeout = Some(self.val_atom()?);
                    } else if matches!(self.peek_word(), Some("limit" | "counter" | "quota")) {
                        let w = self.peek_word().unwrap().to_string();
                        let s = self.span();
                        stmts.push(self.statement(&w, s)?);
                    } else if self.peek_word() == Some("ct") {
                        // `ct count [over] N`: a per-element connection limit
                        stmts.push(self.item()?);
                    } else {
                        break;
                    }
                }
                self.expect(Tok::RBrace, "'}'")?;
                Ok(Item::SetOp {
                    op,
                    set,
                    key,
                    timeout,
                    stmts,
                    span: start.to(self.prev_span()),
                })
            }
            "comment" => {
                self.bump();
                match self.peek().clone() {
                    Tok::Str(s) => {
                        let sp = self.bump().span;
                        Ok(Item::Comment(s, start.to(sp)))
                    }
                    _ => Err(self.err_expected("a quoted comment")),
                }
            }
            _ => Err(self.err_expected("a statement")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> (File, Vec<Diagnostic>, SourceMap) {
        let mut sm = SourceMap::new();
        let (f, d) = parse_str(&mut sm, "t.nft", s);
        (f, d, sm)
    }

    #[test]
    fn table_chain_rules() {
        let (f, d, _) = parse(
            "define lan = 198.18.0.0/24\n\
             table inet filter {\n\
               set allowed { type ipv4_addr . inet_service; flags interval; elements = { 1.2.3.4 . 22, 10.0.0.0/8 . 80-90 } }\n\
               chain forward {\n\
                 type filter hook forward priority 0; policy drop;\n\
                 ct state established,related accept\n\
                 ip saddr $lan tcp dport { 22, 80 } counter accept\n\
                 ip saddr . tcp dport @allowed accept\n\
                 tcp flags & (syn|ack) == syn limit rate 10/second burst 5 packets accept\n\
                 meta mark set 0x10 ip daddr vmap { 1.1.1.1 : drop, 2.2.2.2 : jump other }\n\
                 dnat ip to ip saddr map { 198.18.0.1 : 198.19.0.1 }\n\
               }\n\
               chain other { return }\n\
             }\n",
        );
        assert!(d.is_empty(), "{d:?}");
        let Command::Table { items, .. } = &f.commands[0] else {
            panic!()
        };
        assert_eq!(items.len(), 3);
        let TableItem::Chain(c) = &items[1] else {
            panic!()
        };
        assert_eq!(c.rules.len(), 6);
        assert!(c.hook.is_some());
        assert_eq!(c.rules[1].items.len(), 4);
    }

    #[test]
    fn errors_are_collected_and_located() {
        let (_, d, sm) =
            parse("table ip t {\n chain c {\n  ip saddr\n  bogus thing\n  accept\n }\n}\n");
        assert_eq!(d.len(), 2, "{d:?}");
        let r = d[0].render(&sm);
        assert!(r.starts_with("t.nft:3:3: error:"), "{r}");
        assert!(r.contains("^^^^^^^^"), "{r}");
        assert!(d[1].render(&sm).starts_with("t.nft:4:3:"));
    }

    #[test]
    fn add_commands() {
        let (f, d, _) = parse(
            "add table ip t\nadd chain ip t c { type filter hook input priority filter + 10; }\nadd rule ip t c tcp dport 22 drop\ninsert rule t c position 3 accept\nadd element ip t s { 1.2.3.4 }\nflush ruleset\n",
        );
        assert!(d.is_empty(), "{d:?}");
        assert_eq!(f.commands.len(), 6);
    }

    #[test]
    fn undefined_variable() {
        let (_, d, _) = parse("table ip t { chain c { ip saddr $nope accept } }");
        assert_eq!(d.len(), 1);
        assert!(d[0].message.contains("$nope"));
    }
}
