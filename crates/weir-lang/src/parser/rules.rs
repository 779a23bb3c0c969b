//! Rules and their items: matches, assignments (`set`), verdict maps, set references and
//! verdicts.

use super::preprocess::tokens_text;
use super::{is_expr_head, PResult, Parser, STMT_HEADS};
use crate::ast::*;
use crate::diag::Diagnostic;
use crate::lexer::Tok;

impl Parser {
    pub(super) fn verdict(&mut self) -> PResult<VerdictAst> {
        let kw = self.ident("a verdict")?;
        Ok(match kw.name.as_str() {
            "accept" => VerdictAst::Accept(kw.span),
            "drop" => VerdictAst::Drop(kw.span),
            "continue" => VerdictAst::Continue(kw.span),
            "return" => VerdictAst::Return(kw.span),
            "jump" | "goto" => {
                let target = if matches!(self.peek(), Tok::LBrace) {
                    // an anonymous chain: its rules become a chain of the table
                    // (numbered per process, not per parse: a running ruleset's batches are
                    // parsed one by one, and their anonymous chains must not meet)
                    static ANON: std::sync::atomic::AtomicU64 =
                        std::sync::atomic::AtomicU64::new(0);
                    let n = ANON.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let name = Ident {
                        name: format!("__chain{n}"),
                        span: self.span(),
                    };
                    self.anon_count += 1;
                    let start = self.span();
                    let c = self.chain_body(name.clone(), start)?;
                    if c.hook.is_some() {
                        return Err(Diagnostic::error(
                            c.span,
                            "an anonymous chain cannot be a base chain",
                        ));
                    }
                    self.anon_chains.push(c);
                    name
                } else {
                    self.ident("a chain name")?
                };
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

    pub(super) fn rule(&mut self) -> PResult<Rule> {
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

    pub(super) fn item(&mut self) -> PResult<Item> {
        let start = self.span();
        let w = match self.peek() {
            Tok::Word(w) => w.clone(),
            _ if self.at_raw_payload() => "@".to_string(),
            _ => return Err(self.err_expected("a match or a statement")),
        };
        if STMT_HEADS.contains(&w.as_str()) {
            return self.statement(&w, start);
        }
        // `tunnel name NAME` / `tunnel name KEY map { ... }`: a tunnel object
        if w == "tunnel" && matches!(self.peek_at(1), Tok::Word(x) if x == "name") {
            self.bump();
            self.bump();
            let e = self.value_expr()?;
            return Ok(Item::Pending {
                what: "tunnel name",
                family: None,
                operands: vec![(Operand::Name, e)],
                span: start.to(self.prev_span()),
            });
        }
        if !is_expr_head(&w) && w != "@" {
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
            // `ct status ! dnat`, `tcp flags ! fin,rst`: none of these flags set
            Tok::Bang => Some(CmpOp::Ne),
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
        let bang = matches!(self.toks[self.pos.saturating_sub(1)].tok, Tok::Bang) && op.is_some();
        let rhs = match self.peek() {
            Tok::LBrace | Tok::At(_) => Rhs::Set(self.set_ref()?),
            _ => Rhs::Val(match self.rhs_val()? {
                // (as a list of flags, which `!=` reads as "none of them")
                Val::Word(w, sp) if bang => Val::List(vec![Val::Word(w, sp)], sp),
                v => v,
            }),
        };
        let (op, rhs) = singleton(&lhs, op, rhs);
        Ok(Item::Match {
            lhs,
            op,
            rhs,
            span: start.to(self.prev_span()),
        })
    }

    pub(super) fn set_ref(&mut self) -> PResult<SetRef> {
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
}

/// An anonymous set of one value compared with is that value, as nft evaluates it (`ip saddr
/// { 1.1.1.1 }` is `ip saddr 1.1.1.1`, `tcp dport != { 22 }` is `tcp dport != 22`): not a
/// concatenation, nor an element with statements; a set of flags of one value becomes an
/// exact comparison (`tcp flags { syn }` is `tcp flags == syn`, not "syn among the flags"),
/// except `ct state`'s.
fn singleton(
    lhs: &Expr,
    op: Option<(CmpOp, crate::source::Span)>,
    rhs: Rhs,
) -> (Option<(CmpOp, crate::source::Span)>, Rhs) {
    let one = match &rhs {
        Rhs::Set(SetRef::Anon(es, sp))
            if es.len() == 1
                && es[0].data.is_none()
                && es[0].options.is_empty()
                && matches!(op, None | Some((CmpOp::Eq | CmpOp::Ne, _)))
                && !matches!(lhs, Expr::Concat(..))
                && matches!(
                    es[0].key,
                    Val::Word(..) | Val::Str(..) | Val::Range(..) | Val::Prefix(..) | Val::List(..)
                ) =>
        {
            Some((es[0].key.clone(), *sp))
        }
        _ => None,
    };
    let Some((v, sp)) = one else {
        return (op, rhs);
    };
    let bitmask = match lhs {
        Expr::Selector(ws, _) => {
            let t: Vec<&str> = ws.iter().map(|w| w.name.as_str()).collect();
            weir_wire::Field::from_name(&t.join(" ")).is_some_and(|f| {
                matches!(
                    f.datatype(),
                    weir_wire::DataType::TcpFlags | weir_wire::DataType::CtStatus
                )
            })
        }
        _ => false,
    };
    let op = match op {
        None if bitmask => Some((CmpOp::Eq, sp)),
        op => op,
    };
    (op, Rhs::Val(v))
}
