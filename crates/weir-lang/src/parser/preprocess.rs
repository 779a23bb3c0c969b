//! The preprocessor: `include "file"` and `define NAME = value` are expanded on the token
//! stream (`$NAME` splices the defined tokens) before the grammar sees it; and tokens back to text.

use super::MAX_INCLUDE_DEPTH;
use crate::diag::Diagnostic;
use crate::lexer::{lex, Tok, Token};
use crate::source::{SourceMap, Span};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub(super) struct Preprocessor<'a> {
    pub(super) sources: &'a mut SourceMap,
    pub(super) defines: HashMap<String, Vec<Token>>,
    pub(super) diags: Vec<Diagnostic>,
}

impl Preprocessor<'_> {
    pub(super) fn expand_file(&mut self, file: u32, depth: usize, out: &mut Vec<Token>) {
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
                // `log prefix "... $name ..."`: nft puts the defines' values in the string
                Tok::Str(text)
                    if text.contains('$')
                        && matches!(out.last(), Some(Token { tok: Tok::Word(w), .. }) if w == "prefix") =>
                {
                    let mut s = String::new();
                    let mut rest = text.as_str();
                    while let Some(at) = rest.find('$') {
                        s.push_str(&rest[..at]);
                        let after = &rest[at + 1..];
                        let n = after
                            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                            .unwrap_or(after.len());
                        match self.defines.get(&after[..n]) {
                            Some(body) if n > 0 => {
                                for b in body {
                                    match &b.tok {
                                        Tok::Str(v) | Tok::Word(v) => s.push_str(v),
                                        _ => {}
                                    }
                                }
                            }
                            _ => s.push_str(&rest[at..at + 1 + n]),
                        }
                        rest = &after[n..];
                    }
                    s.push_str(rest);
                    out.push(Token {
                        tok: Tok::Str(s),
                        span: t.span,
                    });
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
        // a name with wildcards includes every file it matches, in name order, and none
        // when it matches none (nft's glob: `include "/etc/nftables.d/*.nft"`)
        let paths = if name.contains(['*', '?', '[']) {
            glob(&path)
        } else {
            vec![path]
        };
        for path in paths {
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
        // `define` of a name defined already: nft wants `redefine`
        if matches!(&toks[start].tok, Tok::Word(w) if w == "define")
            && self.defines.contains_key(&name)
        {
            self.diags.push(
                Diagnostic::error(toks[i].span, format!("'{name}' is defined already"))
                    .note("redefine NAME = value changes it"),
            );
            return skip_line(toks, i);
        }
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

/// The files a path with wildcards (`*`, `?`, `[...]` in any component) matches, sorted, as
/// glob(3) gives them to nft; directories are left out of the last component's matches, and
/// hidden files match only a pattern that starts with a dot.
fn glob(pattern: &Path) -> Vec<PathBuf> {
    let mut found = vec![PathBuf::new()];
    let comps: Vec<_> = pattern.components().collect();
    for (i, c) in comps.iter().enumerate() {
        let last = i + 1 == comps.len();
        let part = c.as_os_str().to_string_lossy();
        let mut next = Vec::new();
        for base in &found {
            if !part.contains(['*', '?', '[']) {
                next.push(base.join(c.as_os_str()));
                continue;
            }
            let dir = if base.as_os_str().is_empty() {
                Path::new(".")
            } else {
                base
            };
            let Ok(rd) = std::fs::read_dir(dir) else {
                continue;
            };
            let mut names: Vec<String> = rd
                .flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| wildcard(part.as_bytes(), n.as_bytes()))
                .filter(|n| !n.starts_with('.') || part.starts_with('.'))
                .collect();
            names.sort();
            next.extend(names.into_iter().map(|n| base.join(n)));
        }
        if last {
            next.retain(|p| p.is_file());
        }
        found = next;
    }
    found
}

/// Whether `name` matches the shell wildcard `pat` (`*`, `?`, `[abc]`, `[a-z]`, `[!a]`).
fn wildcard(pat: &[u8], name: &[u8]) -> bool {
    match pat.first() {
        None => name.is_empty(),
        Some(b'*') => (0..=name.len()).any(|i| wildcard(&pat[1..], &name[i..])),
        Some(b'?') => !name.is_empty() && wildcard(&pat[1..], &name[1..]),
        Some(b'[') => {
            let Some(end) = pat.iter().skip(2).position(|&b| b == b']').map(|e| e + 2) else {
                return name.first() == Some(&b'[') && wildcard(&pat[1..], &name[1..]);
            };
            let Some(&ch) = name.first() else {
                return false;
            };
            let (neg, set) = match pat[1] {
                b'!' | b'^' => (true, &pat[2..end]),
                _ => (false, &pat[1..end]),
            };
            let mut hit = false;
            let mut j = 0;
            while j < set.len() {
                if j + 2 < set.len() && set[j + 1] == b'-' {
                    hit |= (set[j]..=set[j + 2]).contains(&ch);
                    j += 3;
                } else {
                    hit |= set[j] == ch;
                    j += 1;
                }
            }
            hit != neg && wildcard(&pat[end + 1..], &name[1..])
        }
        Some(&c) => name.first() == Some(&c) && wildcard(&pat[1..], &name[1..]),
    }
}
