//! Commands and table declarations: `table`, `add`/`create`/`insert`, `flush`/`delete`/`destroy`;
//! chains (hooks, policies, rules), sets and maps, flowtables, counters and quotas.

use super::{is_family, PResult, Parser, MAX_ERRORS};
use crate::ast::*;
use crate::diag::Diagnostic;
use crate::lexer::Tok;
use crate::source::Span;

impl Parser {
    pub(super) fn file(&mut self) -> File {
        let mut f = File::default();
        loop {
            self.skip_newlines();
            if matches!(self.peek(), Tok::Eof) || self.diags.len() >= MAX_ERRORS {
                break;
            }
            match self.command() {
                Ok(c) => {
                    // a lone rule's meters and anonymous chains (`jump { ... }`): their sets
                    // and chains first, in the rule's table
                    if let Command::AddRule { family, table, .. }
                    | Command::ReplaceRule { family, table, .. } = &c
                    {
                        for set in self.meters.drain(..) {
                            f.commands.push(Command::AddSet {
                                family: family.clone(),
                                table: table.clone(),
                                set,
                            });
                        }
                        for chain in self.anon_chains.drain(..) {
                            f.commands.push(Command::AddChain {
                                family: family.clone(),
                                table: table.clone(),
                                chain,
                            });
                        }
                    }
                    self.meters.clear();
                    f.commands.push(c)
                }
                Err(d) => {
                    self.report(d);
                    self.recover();
                    if matches!(self.peek(), Tok::RBrace) {
                        self.bump();
                    }
                }
            }
            // (a table block takes its anonymous chains; a lone command cannot yet)
            if let Some(c) = self.anon_chains.first() {
                let d = Diagnostic::error(
                    c.span,
                    "an anonymous chain (jump { ... }) is supported inside a table block only",
                )
                .note("write the rule inside `table FAMILY NAME { chain ... { ... } }`, or name the chain");
                self.anon_chains.clear();
                self.report(d);
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
                let c = self.add_command(&w, start)?;
                Ok(if w == "create" {
                    Command::Create(Box::new(c), start.to(self.prev_span()))
                } else {
                    c
                })
            }
            "replace" => {
                self.bump();
                self.word_after("replace", "rule")?;
                let family = self.opt_family();
                let table = self.ident("a table name")?;
                let chain = self.ident("a chain name")?;
                if !self.eat_word("handle") {
                    return Err(self.err_expected("'handle N' (the rule to replace)"));
                }
                let handle = self.val()?;
                let rule = self.rule()?;
                Ok(Command::ReplaceRule {
                    family,
                    table,
                    chain,
                    handle,
                    rule,
                })
            }
            "rename" => {
                self.bump();
                self.word_after("rename", "chain")?;
                let family = self.opt_family();
                let table = self.ident("a table name")?;
                let chain = self.ident("a chain name")?;
                let to = self.ident("the chain's new name")?;
                Ok(Command::Rename {
                    family,
                    table,
                    chain,
                    to,
                    span: start.to(self.prev_span()),
                })
            }
            "list" | "get" | "reset" | "describe" | "monitor" => {
                // (answered after the batch: the words up to the command's end, a `{ ... }`
                // of elements kept as written)
                let mut words = Vec::new();
                let mut depth = 0;
                loop {
                    match self.peek() {
                        Tok::Eof => break,
                        Tok::Newline | Tok::Semi if depth == 0 => break,
                        Tok::RBrace if depth == 0 => break,
                        _ => {}
                    }
                    let t = self.bump();
                    match &t.tok {
                        Tok::LBrace => depth += 1,
                        Tok::RBrace => depth -= 1,
                        _ => {}
                    }
                    words.push(super::preprocess::tokens_text(std::slice::from_ref(&t)));
                }
                Ok(Command::Query {
                    words,
                    span: start.to(self.prev_span()),
                })
            }
            "flush" | "delete" | "destroy" => {
                self.bump();
                self.delete_command(&w, start)
            }
            _ => Err(
                Diagnostic::error(start, format!("expected a command, found '{w}'"))
                    .note("commands: table, add, create, insert, delete, flush, define, include"),
            ),
        }
    }

    /// An object's kind: `ct` with its second word (`ct helper`), else `what` itself.
    fn ct_kind(&mut self, what: Ident) -> PResult<Ident> {
        if what.name != "ct" {
            return Ok(what);
        }
        let sub = self.ident("helper, timeout or expectation")?;
        Ok(Ident {
            name: format!("ct {}", sub.name),
            span: what.span.to(sub.span),
        })
    }

    /// The one word that may follow `verb` (`replace rule`, `rename chain`).
    fn word_after(&mut self, verb: &str, want: &str) -> PResult<()> {
        let what = self.ident(want)?;
        if what.name != want {
            return Err(Diagnostic::error(
                what.span,
                format!("expected {want} after {verb}, found '{}'", what.name),
            ));
        }
        Ok(())
    }

    /// `add|create|insert WHAT ...` after the verb `w`.
    fn add_command(&mut self, w: &str, start: Span) -> PResult<Command> {
        let what = self.ident("table, chain, rule, set, map, element, flowtable or an object")?;
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
                        comment: None,
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
            "flowtable" | "counter" | "quota" | "limit" | "ct" | "synproxy" | "secmark"
            | "tunnel" => {
                // `add ct helper [family] TABLE NAME`: the kind's second word first
                let kind = self.ct_kind(what)?;
                let family = self.opt_family();
                let table = self.ident("a table name")?;
                let item = self.named_item(kind, start)?;
                Ok(Command::AddItem {
                    family,
                    table,
                    item,
                    span: start.to(self.prev_span()),
                })
            }
            // `add TABLE CHAIN RULE`: nft reads a rule (the `rule` is optional)
            _ if !is_family(&what.name) && matches!(self.peek(), Tok::Word(_) | Tok::Str(_)) => {
                let table = what;
                let chain = self.ident("a chain name")?;
                let rule = self.rule()?;
                Ok(Command::AddRule {
                    family: None,
                    table,
                    chain,
                    position: if w == "insert" {
                        Position::Start
                    } else {
                        Position::End
                    },
                    rule,
                })
            }
            _ => Err(Diagnostic::error(
                what.span,
                format!(
                    "expected table, chain, rule, set, map, element, flowtable or an object after {w}, found '{}'",
                    what.name
                ),
            )),
        }
    }

    /// `flush|delete|destroy WHAT ...` after the verb `w`.
    fn delete_command(&mut self, w: &str, start: Span) -> PResult<Command> {
        let what = self.ident("ruleset, table, chain, set, rule or element")?;
        if what.name == "ruleset" {
            let _ = self.opt_family_alone();
            return Ok(Command::FlushRuleset(start.to(what.span)));
        }
        let what = self.ct_kind(what)?;
        if !matches!(
            what.name.as_str(),
            "table"
                | "chain"
                | "set"
                | "map"
                | "rule"
                | "element"
                | "flowtable"
                | "counter"
                | "quota"
                | "limit"
                | "ct helper"
                | "ct timeout"
                | "ct expectation"
                | "synproxy"
                | "secmark"
                | "tunnel"
                | "counters"
                | "quotas"
        ) || (w == "flush" && !matches!(what.name.as_str(), "table" | "chain" | "set" | "map"))
        {
            return Err(Diagnostic::error(
                what.span,
                format!(
                    "expected ruleset, table, chain, set, map, rule, element, flowtable or an object after {w}, found '{}'",
                    what.name
                ),
            ));
        }
        // a table by its handle: `delete table [family] handle N`
        let by_handle = |p: &Self, at: usize| {
            matches!(p.peek_at(at), Tok::Word(x) if x == "handle")
                && matches!(p.peek_at(at + 1), Tok::Word(_))
        };
        let family = if what.name == "table" && by_handle(self, 1) {
            self.opt_family_alone()
        } else {
            self.opt_family()
        };
        let table = if what.name == "table" && by_handle(self, 0) {
            Ident {
                name: String::new(),
                span: self.span(),
            }
        } else {
            self.ident("a table name")?
        };
        let name = if what.name != "table" && !self.at_rule_end() && !self.is_word("handle") {
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
                destroy: w == "destroy",
                span,
            })
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
                items.extend(self.anon_chains.drain(..).map(TableItem::Chain));
                items.extend(self.meters.drain(..).map(TableItem::Set));
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
        let kw = self.ident("chain, set, map, flowtable, counter, quota, limit or ct helper")?;
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
            "flowtable" => Ok(Some(self.named_item(kw, start)?)),
            "counter" | "quota" | "limit" | "ct" | "synproxy" | "secmark" | "tunnel" => {
                let kw = self.ct_kind(kw)?;
                Ok(Some(self.named_item(kw, start)?))
            }
            "flags" => {
                let mut fl = vec![self.ident("a table flag (dormant)")?];
                while self.eat(&Tok::Comma) {
                    fl.push(self.ident("a table flag (dormant)")?);
                }
                Ok(Some(TableItem::Flags(fl, start.to(self.prev_span()))))
            }
            "comment" => {
                let c = self.comment_text()?;
                Ok(Some(TableItem::Comment(c, start.to(self.prev_span()))))
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

    /// A flowtable or a named object (`kind` is its keyword, `ct helper` for the ct ones):
    /// its name and body.
    pub(super) fn named_item(&mut self, kind: Ident, start: Span) -> PResult<TableItem> {
        if kind.name == "flowtable" {
            let name = self.ident("a flowtable name")?;
            return Ok(TableItem::Flowtable(self.flowtable_body(name, start)?));
        }
        if kind.name.starts_with("ct ")
            && !matches!(
                kind.name.as_str(),
                "ct helper" | "ct timeout" | "ct expectation"
            )
        {
            return Err(Diagnostic::error(
                kind.span,
                format!(
                    "expected helper, timeout or expectation, found '{}'",
                    &kind.name[3..]
                ),
            ));
        }
        let kw = kind;
        let name = self.ident("a name")?;
        let mut body = Vec::new();
        let mut comment = None;
        if matches!(self.peek(), Tok::LBrace) {
            self.bump();
            loop {
                match self.peek() {
                    Tok::RBrace => {
                        self.bump();
                        break;
                    }
                    Tok::Eof => return Err(self.err_expected("'}'")),
                    Tok::Newline | Tok::Semi | Tok::Eq => {
                        self.bump();
                    }
                    Tok::Word(w) if w == "comment" && self.is_comment_text_at(1) => {
                        let at = self.bump().span;
                        if comment.is_some() {
                            return Err(Diagnostic::error(at, "the object has a comment already"));
                        }
                        comment = Some(self.comment_text()?);
                    }
                    // a tunnel's options block (`geneve { class 0x1 ... }`), as written
                    Tok::LBrace if kw.name == "tunnel" => {
                        let first = self.pos;
                        let start = self.span();
                        let mut depth = 0;
                        loop {
                            match self.bump().tok {
                                Tok::LBrace => depth += 1,
                                Tok::RBrace => {
                                    depth -= 1;
                                    if depth == 0 {
                                        break;
                                    }
                                }
                                Tok::Eof => return Err(self.err_expected("'}'")),
                                _ => {}
                            }
                        }
                        let text = super::preprocess::tokens_text(&self.toks[first..self.pos]);
                        body.push(Val::Word(text, start.to(self.prev_span())));
                    }
                    _ => body.push(self.val()?),
                }
            }
        } else {
            // `add quota t q 25 mbytes`: the body without braces, to the command's end
            while !self.at_rule_end() {
                if self.is_word("comment") && self.is_comment_text_at(1) {
                    self.bump();
                    comment = Some(self.comment_text()?);
                } else {
                    body.push(self.val()?);
                }
            }
        }
        Ok(TableItem::Obj(ObjDecl {
            kind: kw,
            name,
            body,
            comment,
            span: start.to(self.prev_span()),
        }))
    }

    pub(super) fn chain_body(&mut self, name: Ident, start: Span) -> PResult<ChainDecl> {
        self.expect(Tok::LBrace, "'{' after the chain name")?;
        let mut hook = None;
        let mut policy = None;
        let mut comment = None;
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
                } else if self.is_word("comment") && self.is_comment_text_at(1) {
                    self.bump();
                    comment = Some(self.comment_text()?);
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
            comment,
            span: start.to(self.prev_span()),
        })
    }

    fn set_body(&mut self, name: Ident, is_map: bool, start: Span) -> PResult<SetDecl> {
        let mut d = SetDecl::new(name, is_map, start);
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
                        d.data_interval = self.eat_word("interval");
                        d.data_types = match self.object_type()? {
                            Some(o) => vec![o],
                            None => self.type_concat()?,
                        };
                    }
                }
                "typeof" => {
                    d.key_typeof = self.typeof_concat()?;
                    if self.eat(&Tok::Colon) {
                        d.data_interval = self.eat_word("interval");
                        if self.is_word("verdict") {
                            d.data_types = vec![self.ident("verdict")?];
                        } else if let Some(o) = self.object_type()? {
                            d.data_types = vec![o];
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
                "counter" | "limit" | "quota" | "ct" | "last" => {
                    self.pos -= 1;
                    let st = self.elem_stmt()?;
                    if st.0.name == "counter" {
                        d.counter = true;
                    }
                    d.stmts.push(st);
                }
                "comment" => d.comment = Some(self.comment_text()?),
                "gc-interval" => d.gc_interval = Some(self.val()?),
                "auto-merge" => d.auto_merge = true,
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

    /// The data of an object map (`: counter`, `: quota`, `: ct helper`...), as one name.
    fn object_type(&mut self) -> PResult<Option<Ident>> {
        let second = match self.peek_at(1) {
            Tok::Word(w) => w.clone(),
            _ => String::new(),
        };
        match self.peek_word() {
            Some("counter" | "quota" | "limit" | "synproxy" | "secmark" | "tunnel" | "queue") => {
                Ok(Some(self.ident("an object type")?))
            }
            Some("ct") if matches!(second.as_str(), "helper" | "timeout" | "expectation") => {
                let a = self.ident("ct")?;
                let b = self.ident("helper, timeout or expectation")?;
                Ok(Some(Ident {
                    name: format!("ct {}", b.name),
                    span: a.span.to(b.span),
                }))
            }
            _ => Ok(None),
        }
    }

    fn type_concat(&mut self) -> PResult<Vec<Ident>> {
        let mut v = vec![self.ident("a type name")?];
        while self.is_word(".") {
            self.bump();
            v.push(self.ident("a type name")?);
        }
        Ok(v)
    }

    /// `typeof` keys: selectors, hashes and number generators (`numgen random mod 2`), raw
    /// payload, with their masks and shifts, joined by '.'.
    fn typeof_concat(&mut self) -> PResult<Vec<Expr>> {
        let mut v = vec![self.binop_expr()?];
        while self.is_word(".") {
            self.bump();
            v.push(self.binop_expr()?);
        }
        Ok(v)
    }

    fn flowtable_body(&mut self, name: Ident, start: Span) -> PResult<FlowtableDecl> {
        let mut ft = FlowtableDecl {
            name,
            hook: None,
            priority: vec![],
            devices: vec![],
            counter: false,
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
                "counter" => ft.counter = true,
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
}
