//! Values: set literals and their elements, and the values of matches (concatenations, ranges,
//! prefixes and masks, flag lists).

use super::{PResult, Parser};
use crate::ast::*;
use crate::diag::Diagnostic;
use crate::lexer::Tok;
use crate::source::Span;

impl Parser {
    /// `{ elem, elem, ... }` with newlines allowed; nested sets (from defines) are flattened.
    pub(super) fn set_literal(&mut self) -> PResult<(Vec<Elem>, Span)> {
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
                // an empty place (`{ a, , b }`: a define expanded to nothing), as nft's
                Tok::Comma => {
                    self.bump();
                    continue;
                }
                Tok::LBrace => {
                    // a set in a set (`{ $ifs : drop, lo : accept }`, a define holding a
                    // set): its elements, each with the data that follows
                    let (mut inner, _) = self.set_literal()?;
                    if self.eat(&Tok::Colon) {
                        let data = match self.peek_word() {
                            Some("accept" | "drop" | "continue" | "return" | "jump" | "goto") => {
                                MapData::Verdict(self.verdict()?)
                            }
                            _ => MapData::Value(self.val()?),
                        };
                        for e in &mut inner {
                            e.data = Some(data.clone());
                        }
                    }
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
                Some("counter" | "limit" | "quota" | "ct" | "last") => {
                    options.push(self.elem_stmt()?)
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

    /// A statement of a set's elements (`counter [packets N bytes M]`, `limit rate 1/second
    /// burst 5 packets`, `quota 500 bytes [used N bytes]`, `ct count over 20`): its keyword,
    /// and the words after it as written (None for a counter without values).
    pub(super) fn elem_stmt(&mut self) -> PResult<(Ident, Option<Val>)> {
        let k = self.ident("counter, limit, quota or ct count")?;
        let first = self.pos;
        let start = self.span();
        loop {
            match self.peek() {
                Tok::Word(w)
                    if !matches!(
                        w.as_str(),
                        "counter"
                            | "limit"
                            | "quota"
                            | "ct"
                            | "last"
                            | "timeout"
                            | "expires"
                            | "comment"
                    ) =>
                {
                    self.bump();
                }
                _ => break,
            }
        }
        if k.name == "ct"
            && !matches!(self.toks.get(first).map(|t| &t.tok), Some(Tok::Word(w)) if w == "count")
        {
            return Err(Diagnostic::error(
                k.span,
                "expected 'ct count' as a set's statement",
            ));
        }
        let text = super::preprocess::tokens_text(&self.toks[first..self.pos]);
        let v = (!text.is_empty()).then(|| Val::Word(text, start.to(self.prev_span())));
        Ok((k, v))
    }

    /// A value: atoms joined by `.` (concatenation), spaced `-` (range) and `/` (prefix or
    /// mask), or a set literal. Inside sets a `,` separates elements; on the right of a match
    /// (`flags` true) a comma list is a list of flags (`syn,ack`).
    pub(super) fn val(&mut self) -> PResult<Val> {
        self.val_concat(false)
    }

    pub(super) fn rhs_val(&mut self) -> PResult<Val> {
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

    pub(super) fn val_range(&mut self, flags: bool) -> PResult<Val> {
        let start = self.span();
        let mut a = if flags {
            self.val_flags()?
        } else {
            self.val_atom()?
        };
        // flags joined by `|` (`tcp flags == syn | ack`, `{ syn, syn | ack }`)
        if matches!(self.peek(), Tok::Pipe) && matches!(self.peek_at(1), Tok::Word(_)) {
            let mut v = match a {
                Val::List(v, _) => v,
                x => vec![x],
            };
            while self.eat(&Tok::Pipe) {
                v.push(self.val_atom()?);
            }
            a = Val::List(v, start.to(self.prev_span()));
        }
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
    pub(super) fn val_flags(&mut self) -> PResult<Val> {
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

    pub(super) fn val_atom(&mut self) -> PResult<Val> {
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
                // `[2001:db8::]/64`: the prefix after the brackets
                if let (Val::Word(a, _), Tok::Word(p)) = (&addr, self.peek().clone()) {
                    if p.starts_with('/') {
                        let end = self.bump().span;
                        return Ok(Val::Word(format!("{a}{p}"), open.to(end)));
                    }
                }
                let _ = open.to(close);
                Ok(addr)
            }
            _ => Err(self.err_expected("a value")),
        }
    }
}
