//! The lexer: text to tokens with spans.
//!
//! nftables values are written in many shapes (`10.0.0.0/8`, `1024-65535`, `2001:db8::1`,
//! `aa:bb:cc:dd:ee:ff`, `1.2.3.4:80`, `10/second`, `echo-request`, `eth*`), so the lexer keeps
//! such runs together as one [`Tok::Word`] and the checker reads the word by the type the
//! context expects. A `:` joins a word only when the run around it looks like an address
//! (hexadecimal digits, dots and colons), so `22:accept` in a verdict map still splits.
//! Newlines end rules, so they are tokens; `\` at the end of a line continues it; `#` starts a
//! comment.

use crate::diag::Diagnostic;
use crate::source::{FileId, Span};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tok {
    /// A bare word: keyword, name, number, address, range, prefix...
    Word(String),
    /// A double-quoted string (quotes removed).
    Str(String),
    /// `$name`
    Var(String),
    /// `@name`
    At(String),
    LBrace,
    RBrace,
    LParen,
    RParen,
    LBracket,
    RBracket,
    Semi,
    Newline,
    Comma,
    Colon,
    Eq,
    EqEq,
    Ne,
    Lt,
    Gt,
    Le,
    Ge,
    Amp,
    Pipe,
    Caret,
    Bang,
    Shl,
    Shr,
    Eof,
}

impl Tok {
    /// How the token reads in an error message.
    pub fn describe(&self) -> String {
        match self {
            Tok::Word(w) => format!("'{w}'"),
            Tok::Str(s) => format!("string \"{s}\""),
            Tok::Var(v) => format!("'${v}'"),
            Tok::At(v) => format!("'@{v}'"),
            Tok::LBrace => "'{'".into(),
            Tok::RBrace => "'}'".into(),
            Tok::LParen => "'('".into(),
            Tok::RParen => "')'".into(),
            Tok::LBracket => "'['".into(),
            Tok::RBracket => "']'".into(),
            Tok::Semi => "';'".into(),
            Tok::Newline => "end of line".into(),
            Tok::Comma => "','".into(),
            Tok::Colon => "':'".into(),
            Tok::Eq => "'='".into(),
            Tok::EqEq => "'=='".into(),
            Tok::Ne => "'!='".into(),
            Tok::Lt => "'<'".into(),
            Tok::Gt => "'>'".into(),
            Tok::Le => "'<='".into(),
            Tok::Ge => "'>='".into(),
            Tok::Amp => "'&'".into(),
            Tok::Pipe => "'|'".into(),
            Tok::Caret => "'^'".into(),
            Tok::Bang => "'!'".into(),
            Tok::Shl => "'<<'".into(),
            Tok::Shr => "'>>'".into(),
            Tok::Eof => "end of file".into(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Token {
    pub tok: Tok,
    pub span: Span,
}

fn is_word_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'/' | b'-' | b'*' | b'+')
}

fn is_addr_char(c: u8) -> bool {
    c.is_ascii_hexdigit() || c == b'.' || c == b':'
}

/// Split a file into tokens. Errors (an unterminated string, a stray character) are returned as
/// diagnostics; lexing continues after them so that several can be reported at once.
pub fn lex(file: FileId, text: &str) -> (Vec<Token>, Vec<Diagnostic>) {
    let b = text.as_bytes();
    let mut toks = Vec::new();
    let mut diags = Vec::new();
    let mut i = 0;
    let sp = |lo: usize, hi: usize| Span::new(file, lo, hi);
    while i < b.len() {
        let c = b[i];
        let start = i;
        match c {
            b' ' | b'\t' | b'\r' => {
                i += 1;
            }
            b'\\' if b.get(i + 1) == Some(&b'\n') => {
                i += 2;
            }
            b'\\' if b.get(i + 1) == Some(&b'\r') && b.get(i + 2) == Some(&b'\n') => {
                i += 3;
            }
            b'\n' => {
                toks.push(Token {
                    tok: Tok::Newline,
                    span: sp(i, i + 1),
                });
                i += 1;
            }
            b'#' => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'"' => {
                i += 1;
                let s = i;
                while i < b.len() && b[i] != b'"' && b[i] != b'\n' {
                    i += 1;
                }
                if i >= b.len() || b[i] != b'"' {
                    diags.push(
                        Diagnostic::error(sp(start, i), "unterminated string")
                            .note("expected a closing '\"' on the same line"),
                    );
                } else {
                    toks.push(Token {
                        tok: Tok::Str(text[s..i].to_string()),
                        span: sp(start, i + 1),
                    });
                    i += 1;
                }
            }
            // `@"a quoted name"`: a set whose name nft had to quote
            b'@' if b.get(i + 1) == Some(&b'"') => {
                let s = i + 2;
                match text[s..].find('"') {
                    Some(n) if n > 0 => {
                        toks.push(Token {
                            tok: Tok::At(text[s..s + n].to_string()),
                            span: sp(start, s + n + 1),
                        });
                        i = s + n + 1;
                    }
                    _ => {
                        diags.push(Diagnostic::error(
                            sp(start, s),
                            "expected a quoted set name after '@\"'",
                        ));
                        i = s;
                    }
                }
            }
            b'$' | b'@' => {
                i += 1;
                let s = i;
                // (set names as nft's identifiers: letters, digits, _ - and, after '@', / .)
                while i < b.len()
                    && (b[i].is_ascii_alphanumeric()
                        || b[i] == b'_'
                        || b[i] == b'-'
                        || (c == b'@'
                            && (b[i] == b'/'
                                || (b[i] == b'.'
                                    && b.get(i + 1).is_some_and(|n| n.is_ascii_alphanumeric())))))
                {
                    i += 1;
                }
                if s == i {
                    diags.push(Diagnostic::error(
                        sp(start, i),
                        format!("expected a name after '{}'", c as char),
                    ));
                } else {
                    let name = text[s..i].to_string();
                    toks.push(Token {
                        tok: if c == b'$' {
                            Tok::Var(name)
                        } else {
                            Tok::At(name)
                        },
                        span: sp(start, i),
                    });
                }
            }
            b'{' | b'}' | b'(' | b')' | b'[' | b']' | b';' | b',' | b'&' | b'|' | b'^' => {
                let tok = match c {
                    b'{' => Tok::LBrace,
                    b'}' => Tok::RBrace,
                    b'(' => Tok::LParen,
                    b')' => Tok::RParen,
                    b'[' => Tok::LBracket,
                    b']' => Tok::RBracket,
                    b';' => Tok::Semi,
                    b',' => Tok::Comma,
                    b'&' => Tok::Amp,
                    b'|' => Tok::Pipe,
                    _ => Tok::Caret,
                };
                toks.push(Token {
                    tok,
                    span: sp(i, i + 1),
                });
                i += 1;
            }
            b'=' | b'!' | b'<' | b'>' => {
                let next = b.get(i + 1).copied();
                let (tok, n) = match (c, next) {
                    (b'=', Some(b'=')) => (Tok::EqEq, 2),
                    (b'=', _) => (Tok::Eq, 1),
                    (b'!', Some(b'=')) => (Tok::Ne, 2),
                    (b'!', _) => (Tok::Bang, 1),
                    (b'<', Some(b'=')) => (Tok::Le, 2),
                    (b'<', Some(b'<')) => (Tok::Shl, 2),
                    (b'<', _) => (Tok::Lt, 1),
                    (b'>', Some(b'=')) => (Tok::Ge, 2),
                    (b'>', Some(b'>')) => (Tok::Shr, 2),
                    _ => (Tok::Gt, 1),
                };
                toks.push(Token {
                    tok,
                    span: sp(i, i + n),
                });
                i += n;
            }
            b':' if b.get(i + 1) == Some(&b':') => {
                // an IPv6 address starting with "::"
                i = lex_word(b, i);
                toks.push(Token {
                    tok: Tok::Word(text[start..i].to_string()),
                    span: sp(start, i),
                });
            }
            b':' => {
                toks.push(Token {
                    tok: Tok::Colon,
                    span: sp(i, i + 1),
                });
                i += 1;
            }
            c if is_word_char(c) => {
                i = lex_word(b, i);
                toks.push(Token {
                    tok: Tok::Word(text[start..i].to_string()),
                    span: sp(start, i),
                });
            }
            _ => {
                // a stray byte: report it whole (it may be the start of a UTF-8 sequence)
                let ch = text[i..].chars().next().unwrap_or('?');
                let n = ch.len_utf8().max(1);
                diags.push(Diagnostic::error(
                    sp(i, i + n),
                    format!("unexpected character '{}'", ch.escape_default()),
                ));
                i += n;
            }
        }
    }
    toks.push(Token {
        tok: Tok::Eof,
        span: sp(b.len(), b.len()),
    });
    (toks, diags)
}

/// Scan a word from `i`; returns the end offset.
fn lex_word(b: &[u8], mut i: usize) -> usize {
    let start = i;
    loop {
        while i < b.len() && is_word_char(b[i]) {
            i += 1;
        }
        // a ':' continues the word only inside an address-like run: everything so far and
        // everything up to the next delimiter is hex digits, dots and colons (IPv6, MAC,
        // addr:port); `1.2.3.4:80-90` keeps the port range too.
        if i < b.len() && b[i] == b':' {
            let so_far = &b[start..i];
            let mut j = i + 1;
            while j < b.len() && (is_word_char(b[j]) || b[j] == b':') {
                j += 1;
            }
            let after = &b[i + 1..j];
            let addr_like = |s: &[u8]| s.iter().all(|&c| is_addr_char(c) || c == b'-' || c == b'/');
            let so_far_ok = so_far.iter().all(|&c| is_addr_char(c) || c == b'/');
            if so_far_ok && !after.is_empty() && addr_like(after) {
                i = j;
                continue;
            }
            if so_far.is_empty() && after.first() == Some(&b':') {
                i = j;
                continue;
            }
            // an IPv6 address followed by `:verdict` with no space (`aaaa:::accept`): the
            // longest run before a ':' that is an address
            if so_far_ok && !after.is_empty() {
                let cut = (0..after.len())
                    .rev()
                    .filter(|&k| after[k] == b':' && addr_like(&after[..k]))
                    .find(|&k| is_ipv6(&b[start..i + 1 + k]));
                if let Some(k) = cut {
                    return i + 1 + k;
                }
            }
        }
        // `::dddd:` before a map's data: the address without its last ':'
        if i >= 2 && b[i - 1] == b':' && b[i - 2] != b':' && is_ipv6(&b[start..i - 1]) {
            return i - 1;
        }
        return i;
    }
}

fn is_ipv6(s: &[u8]) -> bool {
    std::str::from_utf8(s).is_ok_and(|t| t.parse::<std::net::Ipv6Addr>().is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<Tok> {
        let (t, d) = lex(0, s);
        assert!(d.is_empty(), "{d:?}");
        t.into_iter().map(|t| t.tok).collect()
    }

    #[test]
    fn values_stay_whole() {
        assert_eq!(
            words("ip saddr 10.0.0.0/8 tcp dport 1024-65535"),
            vec![
                Tok::Word("ip".into()),
                Tok::Word("saddr".into()),
                Tok::Word("10.0.0.0/8".into()),
                Tok::Word("tcp".into()),
                Tok::Word("dport".into()),
                Tok::Word("1024-65535".into()),
                Tok::Eof
            ]
        );
        assert_eq!(
            words("2001:db8::1/64")[0],
            Tok::Word("2001:db8::1/64".into())
        );
        assert_eq!(words("::1")[0], Tok::Word("::1".into()));
        assert_eq!(words("1.2.3.4:80-90")[0], Tok::Word("1.2.3.4:80-90".into()));
        assert_eq!(
            words("aa:bb:cc:dd:ee:ff")[0],
            Tok::Word("aa:bb:cc:dd:ee:ff".into())
        );
    }

    #[test]
    fn colon_splits_verdicts() {
        assert_eq!(
            words("22:accept"),
            vec![
                Tok::Word("22".into()),
                Tok::Colon,
                Tok::Word("accept".into()),
                Tok::Eof
            ]
        );
        assert_eq!(words("type ipv4_addr : verdict")[2], Tok::Colon);
    }

    #[test]
    fn operators_and_comments() {
        assert_eq!(
            words("a != b # c\n@s $v"),
            vec![
                Tok::Word("a".into()),
                Tok::Ne,
                Tok::Word("b".into()),
                Tok::Newline,
                Tok::At("s".into()),
                Tok::Var("v".into()),
                Tok::Eof
            ]
        );
    }

    #[test]
    fn errors_do_not_stop() {
        let (t, d) = lex(0, "\"abc\n€ x");
        assert_eq!(d.len(), 2);
        assert!(t.iter().any(|t| t.tok == Tok::Word("x".into())));
    }
}
