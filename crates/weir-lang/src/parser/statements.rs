//! Statements: verdicts, `counter`, `log`, `limit`, `quota`, `reject`, NAT, `notrack`, `fwd`,
//! `flow`, set updates and `comment`.

use super::{is_expr_head, PResult, Parser, STMT_HEADS};
use crate::ast::*;
use crate::lexer::Tok;
use crate::source::Span;

impl Parser {
    /// What follows a dynamic set statement's key: `timeout T` and the element's statements
    /// (`limit`, `counter`, `quota`, `ct count [over] N`).
    fn elem_timeout_stmts(&mut self) -> PResult<(Option<Val>, Vec<Item>)> {
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
        Ok((timeout, stmts))
    }

    pub(super) fn statement(&mut self, w: &str, start: Span) -> PResult<Item> {
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
                        // `counter name tcp dport map { 443 : "c1" }`: the object a map
                        // picks (checked, not evaluated yet)
                        if self.peek_word().is_some_and(is_expr_head) {
                            let e = self.value_expr()?;
                            return Ok(Item::Pending {
                                what: "counter name map",
                                family: None,
                                operands: vec![(Operand::Name, e)],
                                span: start.to(self.prev_span()),
                            });
                        }
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
                            // `flags all|ether|skuid`, `flags ip options`, `flags tcp
                            // sequence,options`: one option, its words joined
                            let k = self.ident("")?;
                            let st = self.span();
                            let mut text = String::new();
                            let head = self.ident(
                                "a log flag (all, ether, skuid, ip options, tcp sequence,options)",
                            )?;
                            text.push_str(&head.name);
                            if matches!(head.name.as_str(), "ip" | "tcp") {
                                loop {
                                    let f = self.ident("options or sequence")?;
                                    text.push(' ');
                                    text.push_str(&f.name);
                                    if !self.eat(&Tok::Comma) {
                                        break;
                                    }
                                }
                            }
                            options.push((k, Some(Val::Word(text, st.to(self.prev_span())))));
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
                if self.eat_word("name") {
                    // a named limit object, or a map giving one by name
                    let e = self.value_expr()?;
                    return Ok(Item::Pending {
                        what: "limit name",
                        family: None,
                        operands: vec![(Operand::Name, e)],
                        span: start.to(self.prev_span()),
                    });
                }
                if !self.eat_word("rate") {
                    return Err(self.err_expected("'rate'"));
                }
                let over = self.eat_word("over");
                self.eat_word("until");
                let mut rate = Vec::new();
                while let Some(w) = self.peek_word() {
                    if w == "burst" || STMT_HEADS.contains(&w) || is_expr_head(w) {
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
                    if self.peek_word().is_some_and(is_expr_head) {
                        // `quota name tcp dport map { 443 : "q1" }`: the object chosen by a map
                        let e = self.value_expr()?;
                        return Ok(Item::Pending {
                            what: "quota name map",
                            family: None,
                            operands: vec![(Operand::Name, e)],
                            span: start.to(self.prev_span()),
                        });
                    }
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
                // `dnat ip addr . port to MAP`: nft's older spelling of a map giving both
                let addr_port = |p: &Self, at: usize| {
                    matches!(p.peek_at(at), Tok::Word(w) if w == "addr")
                        && matches!(p.peek_at(at + 1), Tok::Word(w) if w == ".")
                        && matches!(p.peek_at(at + 2), Tok::Word(w) if w == "port")
                        && matches!(p.peek_at(at + 3), Tok::Word(w) if w == "to")
                };
                let family = if matches!(self.peek_word(), Some("ip" | "ip6"))
                    && (matches!(self.peek_at(1), Tok::Word(w) if w == "to" || w == "prefix")
                        || addr_port(self, 1))
                {
                    Some(self.ident("")?)
                } else {
                    None
                };
                if addr_port(self, 0) {
                    for _ in 0..3 {
                        self.bump();
                    }
                }
                let mut addr = None;
                let mut port = None;
                let mut flags = Vec::new();
                // `snat ip prefix to ...`: addresses mapped prefix to prefix (netmap)
                if self.is_word("prefix") {
                    flags.push(self.ident("")?);
                }
                let has_to = self.eat_word("to");
                if has_to || matches!(kind.name.as_str(), "snat" | "dnat") {
                    if matches!(self.peek(), Tok::Colon) {
                        self.bump();
                        port = Some(if self.peek_word().is_some_and(is_expr_head) {
                            self.value_expr()?
                        } else {
                            Expr::Const(self.val_range(false)?)
                        });
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
            "queue" | "tproxy" | "dup" | "synproxy" | "last" | "reset" => self.pending(w, start),
            "fwd" => {
                // nft: `fwd to DEV`, `fwd ip|ip6 to ADDR device DEV`
                self.bump();
                let family = if matches!(self.peek_word(), Some("ip" | "ip6")) {
                    Some(self.ident("")?)
                } else {
                    None
                };
                if !self.eat_word("to") {
                    return Err(self.err_expected(if family.is_some() {
                        "'to'"
                    } else {
                        "'to', 'ip' or 'ip6'"
                    }));
                }
                if self.at_rule_end() {
                    return Err(self.err_expected(if family.is_some() {
                        "an address"
                    } else {
                        "a device"
                    }));
                }
                let first = self.value_expr()?;
                let (addr, dev) = if family.is_some() {
                    if !self.eat_word("device") {
                        return Err(self.err_expected("'device'"));
                    }
                    if self.at_rule_end() {
                        return Err(self.err_expected("a device"));
                    }
                    (Some(first), self.value_expr()?)
                } else {
                    (None, first)
                };
                Ok(Item::Fwd {
                    family,
                    addr,
                    dev,
                    span: start.to(self.prev_span()),
                })
            }
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
            // nft's older spelling: `set add|update|delete KEY [timeout T] @NAME`
            "set" => {
                self.bump();
                let op = self.ident("add, update or delete")?;
                if !matches!(op.name.as_str(), "add" | "update" | "delete") {
                    return Err(crate::diag::Diagnostic::error(
                        op.span,
                        format!(
                            "expected add, update or delete after set, found '{}'",
                            op.name
                        ),
                    ));
                }
                let key = self.expr()?;
                let timeout = if self.eat_word("timeout") {
                    Some(self.val_atom()?)
                } else {
                    None
                };
                let set = match self.peek().clone() {
                    Tok::At(n) => {
                        let s = self.bump().span;
                        Ident { name: n, span: s }
                    }
                    _ => return Err(self.err_expected("a set: '@name'")),
                };
                Ok(Item::SetOp {
                    op,
                    set,
                    key,
                    timeout,
                    stmts: vec![],
                    value: None,
                    span: start.to(self.prev_span()),
                })
            }
            "meter" => {
                // `meter NAME [size N] { KEY [timeout T] STMT... }`: nft's older spelling of
                // a dynamic set and `add @NAME { KEY ... }`
                let kw = self.ident("")?;
                let name = self.ident("a meter name")?;
                let size = if self.eat_word("size") {
                    Some(self.val()?)
                } else {
                    None
                };
                self.expect(Tok::LBrace, "'{'")?;
                let key = self.expr()?;
                let (timeout, stmts) = self.elem_timeout_stmts()?;
                self.expect(Tok::RBrace, "'}'")?;
                let span = start.to(self.prev_span());
                let mut flags = vec![Ident {
                    name: "dynamic".into(),
                    span: kw.span,
                }];
                if timeout.is_some() {
                    flags.push(Ident {
                        name: "timeout".into(),
                        span: kw.span,
                    });
                }
                let key_typeof = match &key {
                    Expr::Concat(parts, _) => parts.clone(),
                    k => vec![k.clone()],
                };
                self.meters.push(SetDecl {
                    key_typeof,
                    flags,
                    size,
                    meter: true,
                    ..SetDecl::new(name.clone(), false, span)
                });
                Ok(Item::SetOp {
                    // (nft lists a meter with a timeout as an update, others as an add)
                    op: Ident {
                        name: if timeout.is_some() { "update" } else { "add" }.into(),
                        span: kw.span,
                    },
                    set: name,
                    key,
                    timeout,
                    stmts,
                    value: None,
                    span,
                })
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
                // a constant key (`add @m { 10.2.3.4 : 0x2 }`) or a selector
                let key = match self.peek() {
                    Tok::Word(w) if !super::is_expr_head(w) => Expr::Const(self.val()?),
                    Tok::Str(_) => Expr::Const(self.val()?),
                    _ => self.expr()?,
                };
                let (timeout, stmts) = self.elem_timeout_stmts()?;
                let value = if self.eat(&Tok::Colon) {
                    Some(self.value_expr()?)
                } else {
                    None
                };
                self.expect(Tok::RBrace, "'}'")?;
                Ok(Item::SetOp {
                    op,
                    set,
                    key,
                    timeout,
                    stmts,
                    value,
                    span: start.to(self.prev_span()),
                })
            }
            "comment" => {
                self.bump();
                let c = self.comment_text()?;
                Ok(Item::Comment(c, start.to(self.prev_span())))
            }
            _ => Err(self.err_expected("a statement")),
        }
    }

    /// `queue [flags F,..] [num N[-M] | to EXPR]` (and the older `queue num N bypass
    /// fanout`), `tproxy [ip|ip6] to [ADDR][:PORT]`, `dup to ADDR [device DEV]` / `dup to
    /// DEV`, `synproxy [mss N] [wscale N] [timestamp] [sack-perm]` / `synproxy name NAME`.
    fn pending(&mut self, w: &str, start: Span) -> PResult<Item> {
        self.bump();
        let mut operands = Vec::new();
        let mut family = None;
        let what: &'static str = match w {
            "queue" => {
                let mut flags: Vec<String> = Vec::new();
                let mut target = false;
                loop {
                    match self.peek_word() {
                        Some("flags") => {
                            self.bump();
                            loop {
                                let f = self.ident("a queue flag (bypass, fanout)")?;
                                if !matches!(f.name.as_str(), "bypass" | "fanout") {
                                    return Err(crate::diag::Diagnostic::error(
                                        f.span,
                                        format!("unknown queue flag '{}' (bypass, fanout)", f.name),
                                    ));
                                }
                                operands.push((
                                    Operand::Flag,
                                    Expr::Const(Val::Word(f.name.clone(), f.span)),
                                ));
                                flags.push(f.name);
                                if !self.eat(&Tok::Comma) {
                                    break;
                                }
                            }
                        }
                        Some("bypass" | "fanout") => {
                            let f = self.ident("a queue flag")?;
                            operands.push((
                                Operand::Flag,
                                Expr::Const(Val::Word(f.name.clone(), f.span)),
                            ));
                            flags.push(f.name);
                        }
                        Some("num") if !target => {
                            self.bump();
                            operands.push((Operand::Queue, Expr::Const(self.val_range(false)?)));
                            target = true;
                        }
                        Some("to") if !target => {
                            self.bump();
                            let e = self.value_expr()?;
                            if !matches!(e, Expr::Const(_)) && flags.iter().any(|f| f == "fanout") {
                                return Err(crate::diag::Diagnostic::error(
                                    e.span(),
                                    "fanout spreads over a range of queues; a queue computed by an expression cannot fan out",
                                ));
                            }
                            operands.push((Operand::Queue, e));
                            target = true;
                        }
                        _ => break,
                    }
                }
                "queue"
            }
            "tproxy" => {
                if matches!(self.peek_word(), Some("ip" | "ip6")) {
                    family = Some(self.ident("")?);
                }
                if !self.eat_word("to") {
                    return Err(self.err_expected("'to'"));
                }
                if self.eat(&Tok::Colon) {
                    operands.push((Operand::Port, self.value_expr()?));
                } else {
                    operands.push((Operand::Addr, self.value_expr()?));
                    if self.eat(&Tok::Colon) {
                        operands.push((Operand::Port, self.value_expr()?));
                    }
                }
                "tproxy"
            }
            "dup" => {
                if !self.eat_word("to") {
                    return Err(self.err_expected("'to'"));
                }
                let first = self.value_expr()?;
                if self.eat_word("device") {
                    operands.push((Operand::Addr, first));
                    operands.push((Operand::Device, self.value_expr()?));
                } else {
                    operands.push((Operand::Device, first));
                }
                "dup"
            }
            // `last [used never|TIME]`: when a rule last matched
            "last" => {
                if self.eat_word("used") && !self.eat_word("never") {
                    operands.push((Operand::Duration, Expr::Const(self.val_atom()?)));
                }
                "last"
            }
            // `reset tcp option NAME|KIND`: the option's bytes turned into NOPs
            "reset" => {
                if !(self.eat_word("tcp") && self.eat_word("option")) {
                    return Err(self.err_expected("'tcp option'"));
                }
                let o = self.ident("a TCP option")?;
                operands.push((Operand::TcpOption, Expr::Const(Val::Word(o.name, o.span))));
                "reset tcp option"
            }
            _ => {
                if self.eat_word("name") {
                    operands.push((Operand::Name, self.value_expr()?));
                } else {
                    loop {
                        match self.peek_word() {
                            Some("mss") => {
                                self.bump();
                                operands.push((Operand::Int(16), Expr::Const(self.val_atom()?)));
                            }
                            Some("wscale") => {
                                self.bump();
                                operands.push((Operand::Int(4), Expr::Const(self.val_atom()?)));
                            }
                            Some(f @ ("timestamp" | "sack-perm")) => {
                                let f = f.to_string();
                                self.bump();
                                let sp = self.prev_span();
                                operands.push((Operand::Flag, Expr::Const(Val::Word(f, sp))));
                            }
                            _ => break,
                        }
                    }
                }
                "synproxy"
            }
        };
        Ok(Item::Pending {
            what,
            family,
            operands,
            span: start.to(self.prev_span()),
        })
    }
}
