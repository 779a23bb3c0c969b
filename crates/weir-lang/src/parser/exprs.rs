//! Expressions: selectors, hash and number generators (`jhash`, `symhash`, `numgen`), binary
//! operators and the value expressions of `set` and `to`.

use super::{
    is_expr_head, PResult, Parser, BARE_META, SCTP_CHUNK_FIELDS, TCP_OPTION_FIELDS, TUNNELS,
};
use crate::ast::*;
use crate::diag::Diagnostic;
use crate::lexer::Tok;

impl Parser {
    /// A selector: the protocol word and its field words.
    pub(super) fn selector(&mut self) -> PResult<Expr> {
        let head = self.ident("a selector")?;
        let mut words = vec![head.clone()];
        match head.name.as_str() {
            h if BARE_META.contains(&h) => {}
            // the inner packet of a tunnel: `vxlan ip saddr`
            h if TUNNELS.contains(&h)
                && self
                    .peek_word()
                    .is_some_and(|w| is_expr_head(w) && !TUNNELS.contains(&w)) =>
            {
                if let Expr::Selector(inner, _) = self.selector()? {
                    words.extend(inner);
                }
            }
            "sctp" if self.is_word("chunk") => {
                words.push(self.ident("chunk")?);
                words.push(self.ident("an SCTP chunk type (data, init, ...)")?);
                if self
                    .peek_word()
                    .is_some_and(|w| SCTP_CHUNK_FIELDS.contains(&w))
                {
                    words.push(self.ident("")?);
                }
            }
            // raw TCP option bytes: `tcp option @255,8,8`
            "tcp" if self.is_word("option") && matches!(self.peek_at(1), Tok::At(_)) => {
                words.push(self.ident("option")?);
                if let Expr::Selector(raw, _) = self.raw_option()? {
                    words.extend(raw);
                }
            }
            // a segment of the routing header: `srh sid[1]`
            "srh" if self.is_word("sid") && matches!(self.peek_at(1), Tok::LBracket) => {
                let sid = self.ident("")?;
                self.bump();
                let n = self.ident("a segment number")?;
                let close = self.expect(Tok::RBracket, "']'")?;
                words.push(Ident {
                    name: format!("sid[{}]", n.name),
                    span: sid.span.to(close),
                });
            }
            // `ip option ra value`: an IPv4 option's field
            "ip" if self.is_word("option") => {
                words.push(self.ident("option")?);
                words.push(self.ident("an IP option (lsrr, rr, ssrr, ra)")?);
                if matches!(
                    self.peek_word(),
                    Some("type" | "length" | "value" | "ptr" | "addr")
                ) {
                    words.push(self.ident("")?);
                }
            }
            "tcp" if self.is_word("option") => {
                words.push(self.ident("option")?);
                words.push(self.ident(
                    "a TCP option (maxseg, window, sack-perm, sack, timestamp, ... or a number)",
                )?);
                if self
                    .peek_word()
                    .is_some_and(|w| TCP_OPTION_FIELDS.contains(&w))
                {
                    words.push(self.ident("")?);
                }
            }
            "ct" => {
                let w = self.ident("a ct key (state, mark, status, original, reply, ...)")?;
                let dir = matches!(w.name.as_str(), "original" | "reply");
                words.push(w);
                if dir {
                    let k = self.ident("a ct key")?;
                    // `ct original ip saddr`
                    let fam = matches!(k.name.as_str(), "ip" | "ip6");
                    words.push(k);
                    if fam {
                        words.push(self.ident("saddr or daddr")?);
                    }
                }
            }
            // `fib saddr . iif oif`: the lookup's flags joined by '.', then what it gives
            "fib" => {
                loop {
                    words.push(self.ident("saddr, daddr, mark, iif or oif")?);
                    if self.is_word(".")
                        && matches!(self.peek_at(1), Tok::Word(w) if matches!(w.as_str(), "saddr" | "daddr" | "mark" | "iif" | "oif"))
                    {
                        self.bump();
                        continue;
                    }
                    break;
                }
                words.push(self.ident("oif, oifname, type or check")?);
            }
            // `osf [ttl loose|skip] name|version`
            "osf" => {
                if self.is_word("ttl") {
                    words.push(self.ident("")?);
                    words.push(self.ident("loose or skip")?);
                }
                words.push(self.ident("name or version")?);
            }
            // `ipsec in|out [spnum N] reqid|spi|ip saddr|...`
            "ipsec" => {
                words.push(self.ident("in or out")?);
                if self.is_word("spnum") {
                    words.push(self.ident("")?);
                    words.push(self.ident("a policy number")?);
                }
                let k = self.ident("reqid, spi, ip saddr, ip daddr, ip6 saddr or ip6 daddr")?;
                let fam = matches!(k.name.as_str(), "ip" | "ip6");
                words.push(k);
                if fam {
                    words.push(self.ident("saddr or daddr")?);
                }
            }
            // `rt ip nexthop`, `rt ip6 nexthop`
            "rt" if matches!(self.peek_word(), Some("ip" | "ip6")) => {
                words.push(self.ident("")?);
                words.push(self.ident("nexthop")?);
            }
            _ => {
                words.push(self.ident(&format!("a {} field", head.name))?);
            }
        }
        let span = head.span.to(self.prev_span());
        Ok(Expr::Selector(words, span))
    }

    /// A primary expression: selector or generator, then binary operators and concatenations.
    pub(super) fn expr(&mut self) -> PResult<Expr> {
        let start = self.span();
        let mut parts = vec![self.binop_expr()?];
        while self.is_word(".") {
            self.bump();
            // a constant component (`ip saddr . 22`, `ip saddr . "lo"`)
            let constant = match self.peek() {
                Tok::Word(w) => !is_expr_head(w),
                Tok::Str(_) => true,
                _ => false,
            };
            if constant {
                parts.push(Expr::Const(self.val_atom()?));
                continue;
            }
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

    pub(super) fn binop_expr(&mut self) -> PResult<Expr> {
        self.binop_prec(0)
    }

    /// Operators binding at least as tightly as `min`, left to right; a constant operand
    /// folds the tighter operators after it, an expression operand (`| meta mark & 0xffff`)
    /// takes them.
    fn binop_prec(&mut self, min: u8) -> PResult<Expr> {
        let start = self.span();
        let mut e = self.primary()?;
        while let Some(op) = self.binop() {
            if precedence(op) < min {
                break;
            }
            self.bump();
            let expr_operand = match self.peek() {
                Tok::Word(w) => is_expr_head(w),
                Tok::At(_) => self.at_raw_payload(),
                Tok::LParen => matches!(self.peek_at(1), Tok::Word(w) if is_expr_head(w)),
                _ => false,
            };
            if expr_operand {
                let r = self.binop_prec(precedence(op) + 1)?;
                e = Expr::BinopExpr(op, Box::new(e), Box::new(r), start.to(self.prev_span()));
                continue;
            }
            let v = self.const_operand(op)?;
            e = Expr::Binop(op, Box::new(e), v, start.to(self.prev_span()));
        }
        Ok(e)
    }

    /// The constant on the right of `op`, with the operators that bind tighter than `op`
    /// folded into it, as in nft's grammar (shifts, then `&`, then `^`, then `|`): `ip dscp &
    /// 0x0f << 1` masks with 0x1e, `ip dscp | 1 << 20` sets 0x100000.
    fn const_operand(&mut self, op: BinOp) -> PResult<Val> {
        let start = self.span();
        let mut v = self.val_atom()?;
        while let Some(next) = self.binop() {
            if precedence(next) <= precedence(op)
                || matches!(self.peek_at(1), Tok::Word(w) if is_expr_head(w))
            {
                break;
            }
            self.bump();
            let r = self.const_operand(next)?;
            v = fold(next, &v, &r, start.to(self.prev_span()))?;
        }
        Ok(v)
    }

    /// Raw payload `@base,offset,length` (`@th,16,16`): its three words, the base with its `@`.
    pub(super) fn raw_payload(&mut self) -> PResult<Expr> {
        let start = self.span();
        let Tok::At(base) = self.peek().clone() else {
            return Err(self.err_expected("@ll, @nh, @th or @ih"));
        };
        self.bump();
        let mut words = vec![Ident {
            name: format!("@{base}"),
            span: start,
        }];
        for what in ["an offset in bits", "a length in bits"] {
            self.expect(Tok::Comma, "','")?;
            words.push(self.ident(what)?);
        }
        Ok(Expr::Selector(words, start.to(self.prev_span())))
    }

    /// `@KIND,offset,length` after `tcp option`: the option's kind with its `@`, the offset
    /// and the length in bits.
    fn raw_option(&mut self) -> PResult<Expr> {
        let start = self.span();
        let Tok::At(kind) = self.peek().clone() else {
            return Err(self.err_expected("@KIND,OFFSET,LENGTH"));
        };
        self.bump();
        let mut words = vec![Ident {
            name: format!("@{kind}"),
            span: start,
        }];
        for what in ["an offset in bits", "a length in bits"] {
            self.expect(Tok::Comma, "','")?;
            words.push(self.ident(what)?);
        }
        Ok(Expr::Selector(words, start.to(self.prev_span())))
    }

    /// True at `@ll,` / `@nh,` / `@th,` / `@ih,`.
    pub(super) fn at_raw_payload(&self) -> bool {
        matches!(self.peek(), Tok::At(b) if matches!(b.as_str(), "ll" | "nh" | "th" | "ih"))
            && matches!(self.peek_at(1), Tok::Comma)
    }

    fn primary(&mut self) -> PResult<Expr> {
        let start = self.span();
        if self.at_raw_payload() {
            return self.raw_payload();
        }
        // `(meta mark | 0x10) << 8`
        if matches!(self.peek(), Tok::LParen) {
            self.bump();
            let e = self.binop_prec(0)?;
            self.expect(Tok::RParen, "')'")?;
            return Ok(e);
        }
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
            Some(w) if is_expr_head(w) => self.selector(),
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
    /// The binary operator at the cursor, if any: `&`, `|`, `^`, `<<`, `>>` or nft's words
    /// for them (`and`, `or`, `xor`, `lshift`, `rshift`).
    fn binop(&self) -> Option<BinOp> {
        Some(match self.peek() {
            Tok::Amp => BinOp::And,
            Tok::Pipe => BinOp::Or,
            Tok::Caret => BinOp::Xor,
            Tok::Shl => BinOp::Shl,
            Tok::Shr => BinOp::Shr,
            Tok::Word(w) => match w.as_str() {
                "and" => BinOp::And,
                "or" => BinOp::Or,
                "xor" => BinOp::Xor,
                "lshift" => BinOp::Shl,
                "rshift" => BinOp::Shr,
                _ => return None,
            },
            _ => return None,
        })
    }

    pub(super) fn value_expr(&mut self) -> PResult<Expr> {
        // `(meta mark | 0x10) << 8`: a parenthesized expression
        let paren_expr = matches!(self.peek(), Tok::LParen)
            && matches!(self.peek_at(1), Tok::Word(w) if is_expr_head(w));
        match self.peek_word() {
            _ if paren_expr => self.expr(),
            Some(w) if is_expr_head(w) => self.expr(),
            _ => {
                let start = self.span();
                let mut v = self.rhs_val()?; // (a list of flags: ct event set new,destroy)
                                             // constant operands are folded, as nft folds them (`meta mark set 0xffffffc8
                                             // xor 0x16` is `meta mark set 0xffffffde`); a selector after the operator
                                             // takes the left side (`ct mark set 0x1 or ct mark`: the operators are
                                             // commutative)
                while let Some(op) = self.binop() {
                    let op_span = self.bump().span;
                    if self.peek_word().is_some_and(is_expr_head) {
                        if matches!(op, BinOp::Shl | BinOp::Shr) {
                            return Err(Diagnostic::error(
                                op_span,
                                "a shift needs the selector on its left",
                            ));
                        }
                        let sel = self.binop_expr()?;
                        return Ok(Expr::Binop(
                            op,
                            Box::new(sel),
                            v,
                            start.to(self.prev_span()),
                        ));
                    }
                    let r = self.val_atom()?;
                    v = fold(op, &v, &r, start.to(self.prev_span()))?;
                }
                Ok(Expr::Const(v))
            }
        }
    }
}

/// How tightly an operator binds, in nft's grammar.
fn precedence(op: BinOp) -> u8 {
    match op {
        BinOp::Shl | BinOp::Shr => 4,
        BinOp::And => 3,
        BinOp::Xor => 2,
        BinOp::Or => 1,
    }
}

/// `a OP b` over two integer constants (decimal or hex), as a hex word.
fn fold(op: BinOp, a: &Val, b: &Val, span: crate::source::Span) -> PResult<Val> {
    let int = |v: &Val| -> Option<u64> {
        let Val::Word(w, _) = v else { return None };
        match w.strip_prefix("0x").or_else(|| w.strip_prefix("0X")) {
            Some(h) => u64::from_str_radix(h, 16).ok(),
            None => w.parse().ok(),
        }
    };
    let (Some(x), Some(y)) = (int(a), int(b)) else {
        return Err(Diagnostic::error(
            span,
            "an operator between constants needs two integers",
        ));
    };
    let r = match op {
        BinOp::And => x & y,
        BinOp::Or => x | y,
        BinOp::Xor => x ^ y,
        BinOp::Shl => x.checked_shl(y as u32).unwrap_or(0),
        BinOp::Shr => x.checked_shr(y as u32).unwrap_or(0),
    };
    Ok(Val::Word(format!("{r:#x}"), span))
}
