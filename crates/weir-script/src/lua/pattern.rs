//! `string.find`, `string.match`, `string.gmatch` and `string.gsub` with Lua 5.4's
//! patterns, matched here (a port of `lstrlib.c`'s matcher) so that the work counts
//! against the call's instruction budget: Lua's own C matcher cannot be interrupted (the
//! count hook runs between VM instructions only), and a pathological pattern
//! (`('.-'):rep(20) .. 'x'` over a long subject) would run for hours.
//!
//! The cost: one instruction per step of the matcher (a pattern item tried at a subject
//! position, one subject byte scanned by `%b` or a plain `find`), charged as it goes (by
//! [`STEP_CHUNK`]s), so a match that would overrun stops when the budget is spent. The
//! semantics are Lua 5.4's, errors included (`malformed pattern`, `pattern too complex`,
//! `invalid capture index`, ...), with the same limits ([`MAXCAPTURES`] captures, a
//! recursion depth of [`MAXCCALLS`]).

use std::sync::Arc;

use mlua::{Function, Lua, MultiValue, String as LuaString, Table, Value};

use super::sandbox::Budget;

/// Captures a pattern may have (Lua's `LUA_MAXCAPTURES`).
pub const MAXCAPTURES: usize = 32;
/// The matcher's recursion depth (Lua's `MAXCCALLS`).
pub const MAXCCALLS: usize = 200;
/// Matcher steps charged to the budget at once.
pub const STEP_CHUNK: u64 = 256;

const L_ESC: u8 = b'%';
const SPECIALS: &[u8] = b"^$*+?.([%-";
const CAP_UNFINISHED: isize = -1;
const CAP_POSITION: isize = -2;

fn err<T>(msg: impl Into<String>) -> mlua::Result<T> {
    Err(mlua::Error::runtime(msg.into()))
}

struct Matcher<'a> {
    src: &'a [u8],
    pat: &'a [u8],
    level: usize,
    capture: [(usize, isize); MAXCAPTURES],
    depth: usize,
    steps: u64,
    budget: &'a Budget,
}

fn match_class(c: u8, cl: u8) -> bool {
    let res = match cl.to_ascii_lowercase() {
        b'a' => c.is_ascii_alphabetic(),
        b'c' => c.is_ascii_control(),
        b'd' => c.is_ascii_digit(),
        b'g' => c.is_ascii_graphic(),
        b'l' => c.is_ascii_lowercase(),
        b'p' => c.is_ascii_punctuation(),
        // C's isspace: also \v
        b's' => c == b' ' || (9..=13).contains(&c),
        b'u' => c.is_ascii_uppercase(),
        b'w' => c.is_ascii_alphanumeric(),
        b'x' => c.is_ascii_hexdigit(),
        // deprecated, still in 5.4
        b'z' => c == 0,
        _ => return cl == c,
    };
    if cl.is_ascii_uppercase() {
        !res
    } else {
        res
    }
}

impl<'a> Matcher<'a> {
    fn new(src: &'a [u8], pat: &'a [u8], budget: &'a Budget) -> Self {
        Matcher {
            src,
            pat,
            level: 0,
            capture: [(0, 0); MAXCAPTURES],
            depth: MAXCCALLS,
            steps: 0,
            budget,
        }
    }

    /// Pattern byte `i`, 0 past the end (C's terminating NUL).
    fn p(&self, i: usize) -> u8 {
        self.pat.get(i).copied().unwrap_or(0)
    }

    fn s(&self, i: usize) -> u8 {
        self.src.get(i).copied().unwrap_or(0)
    }

    fn step(&mut self, n: u64) -> mlua::Result<()> {
        self.steps += n;
        if self.steps >= STEP_CHUNK {
            let n = std::mem::take(&mut self.steps);
            self.budget.charge(n)?;
        }
        Ok(())
    }

    /// Charges the steps not yet charged.
    fn flush(&mut self) -> mlua::Result<()> {
        let n = std::mem::take(&mut self.steps);
        self.budget.charge(n)
    }

    fn reprep(&mut self) {
        self.level = 0;
        self.depth = MAXCCALLS;
    }

    fn class_end(&self, mut p: usize) -> mlua::Result<usize> {
        let c = self.p(p);
        p += 1;
        match c {
            L_ESC => {
                if p >= self.pat.len() {
                    return err("malformed pattern (ends with '%')");
                }
                Ok(p + 1)
            }
            b'[' => {
                if self.p(p) == b'^' {
                    p += 1;
                }
                loop {
                    if p >= self.pat.len() {
                        return err("malformed pattern (missing ']')");
                    }
                    let c = self.pat[p];
                    p += 1;
                    if c == L_ESC && p < self.pat.len() {
                        p += 1;
                    }
                    if self.p(p) == b']' {
                        return Ok(p + 1);
                    }
                }
            }
            _ => Ok(p),
        }
    }

    /// `p` at the '[', `ec` at the ']' of a class.
    fn bracket(&self, c: u8, mut p: usize, ec: usize) -> bool {
        let mut sig = true;
        if self.p(p + 1) == b'^' {
            sig = false;
            p += 1;
        }
        loop {
            p += 1;
            if p >= ec {
                break;
            }
            if self.p(p) == L_ESC {
                p += 1;
                if match_class(c, self.p(p)) {
                    return sig;
                }
            } else if self.p(p + 1) == b'-' && p + 2 < ec {
                p += 2;
                if self.p(p - 2) <= c && c <= self.p(p) {
                    return sig;
                }
            } else if self.p(p) == c {
                return sig;
            }
        }
        !sig
    }

    fn single(&mut self, s: usize, p: usize, ep: usize) -> mlua::Result<bool> {
        self.step(1)?;
        if s >= self.src.len() {
            return Ok(false);
        }
        let c = self.src[s];
        Ok(match self.p(p) {
            b'.' => true,
            L_ESC => match_class(c, self.p(p + 1)),
            b'[' => self.bracket(c, p, ep - 1),
            pc => pc == c,
        })
    }

    fn balance(&mut self, mut s: usize, p: usize) -> mlua::Result<Option<usize>> {
        if p + 1 >= self.pat.len() {
            return err("malformed pattern (missing arguments to '%b')");
        }
        if s >= self.src.len() || self.src[s] != self.pat[p] {
            return Ok(None);
        }
        let (b, e) = (self.pat[p], self.pat[p + 1]);
        let mut cont = 1;
        loop {
            s += 1;
            if s >= self.src.len() {
                return Ok(None);
            }
            self.step(1)?;
            let c = self.src[s];
            if c == e {
                cont -= 1;
                if cont == 0 {
                    return Ok(Some(s + 1));
                }
            } else if c == b {
                cont += 1;
            }
        }
    }

    fn max_expand(&mut self, s: usize, p: usize, ep: usize) -> mlua::Result<Option<usize>> {
        let mut i = 0;
        while self.single(s + i, p, ep)? {
            i += 1;
        }
        loop {
            if let Some(r) = self.do_match(s + i, ep + 1)? {
                return Ok(Some(r));
            }
            if i == 0 {
                return Ok(None);
            }
            i -= 1;
        }
    }

    fn min_expand(&mut self, mut s: usize, p: usize, ep: usize) -> mlua::Result<Option<usize>> {
        loop {
            if let Some(r) = self.do_match(s, ep + 1)? {
                return Ok(Some(r));
            }
            if self.single(s, p, ep)? {
                s += 1;
            } else {
                return Ok(None);
            }
        }
    }

    fn start_capture(&mut self, s: usize, p: usize, what: isize) -> mlua::Result<Option<usize>> {
        if self.level >= MAXCAPTURES {
            return err("too many captures");
        }
        self.capture[self.level] = (s, what);
        self.level += 1;
        let r = self.do_match(s, p)?;
        if r.is_none() {
            self.level -= 1;
        }
        Ok(r)
    }

    fn end_capture(&mut self, s: usize, p: usize) -> mlua::Result<Option<usize>> {
        let Some(l) = (0..self.level)
            .rev()
            .find(|&l| self.capture[l].1 == CAP_UNFINISHED)
        else {
            return err("invalid pattern capture");
        };
        self.capture[l].1 = (s - self.capture[l].0) as isize;
        let r = self.do_match(s, p)?;
        if r.is_none() {
            self.capture[l].1 = CAP_UNFINISHED;
        }
        Ok(r)
    }

    fn check_capture(&self, l: u8) -> mlua::Result<usize> {
        let l = l as isize - b'1' as isize;
        if l < 0 || l as usize >= self.level || self.capture[l as usize].1 == CAP_UNFINISHED {
            return err(format!("invalid capture index %{}", l + 1));
        }
        Ok(l as usize)
    }

    fn match_capture(&mut self, s: usize, l: u8) -> mlua::Result<Option<usize>> {
        let l = self.check_capture(l)?;
        let (init, len) = self.capture[l];
        if len < 0 {
            return Ok(None);
        }
        let len = len as usize;
        self.step(len as u64 / 16 + 1)?;
        if self.src.len() - s >= len && self.src[init..init + len] == self.src[s..s + len] {
            return Ok(Some(s + len));
        }
        Ok(None)
    }

    fn do_match(&mut self, s: usize, p: usize) -> mlua::Result<Option<usize>> {
        if self.depth == 0 {
            return err("pattern too complex");
        }
        self.depth -= 1;
        let r = self.match_loop(s, p);
        self.depth += 1;
        r
    }

    fn match_loop(&mut self, mut s: usize, mut p: usize) -> mlua::Result<Option<usize>> {
        loop {
            self.step(1)?;
            if p >= self.pat.len() {
                return Ok(Some(s));
            }
            match self.pat[p] {
                b'(' => {
                    return if self.p(p + 1) == b')' {
                        self.start_capture(s, p + 2, CAP_POSITION)
                    } else {
                        self.start_capture(s, p + 1, CAP_UNFINISHED)
                    };
                }
                b')' => return self.end_capture(s, p + 1),
                b'$' if p + 1 == self.pat.len() => {
                    return Ok((s == self.src.len()).then_some(s));
                }
                L_ESC if self.p(p + 1) == b'b' => match self.balance(s, p + 2)? {
                    Some(e) => {
                        s = e;
                        p += 4;
                        continue;
                    }
                    None => return Ok(None),
                },
                L_ESC if self.p(p + 1) == b'f' => {
                    p += 2;
                    if self.p(p) != b'[' {
                        return err("missing '[' after '%f' in pattern");
                    }
                    let ep = self.class_end(p)?;
                    let prev = if s == 0 { 0 } else { self.src[s - 1] };
                    let cur = self.s(s);
                    if !self.bracket(prev, p, ep - 1) && self.bracket(cur, p, ep - 1) {
                        p = ep;
                        continue;
                    }
                    return Ok(None);
                }
                L_ESC if self.p(p + 1).is_ascii_digit() => {
                    match self.match_capture(s, self.p(p + 1))? {
                        Some(e) => {
                            s = e;
                            p += 2;
                            continue;
                        }
                        None => return Ok(None),
                    }
                }
                _ => {
                    let ep = self.class_end(p)?;
                    let epc = self.p(ep);
                    if !self.single(s, p, ep)? {
                        if epc == b'*' || epc == b'?' || epc == b'-' {
                            p = ep + 1;
                            continue;
                        }
                        return Ok(None);
                    }
                    match epc {
                        b'?' => {
                            if let Some(r) = self.do_match(s + 1, ep + 1)? {
                                return Ok(Some(r));
                            }
                            p = ep + 1;
                        }
                        b'+' => return self.max_expand(s + 1, p, ep),
                        b'*' => return self.max_expand(s, p, ep),
                        b'-' => return self.min_expand(s, p, ep),
                        _ => {
                            s += 1;
                            p = ep;
                        }
                    }
                }
            }
        }
    }

    /// Capture `i` of the match `s..e` (the whole match when there are none and `i` is 0).
    fn capture_value(&self, lua: &Lua, i: usize, s: usize, e: usize) -> mlua::Result<Value> {
        if i >= self.level {
            if i != 0 {
                return err(format!("invalid capture index %{}", i + 1));
            }
            return Ok(Value::String(lua.create_string(&self.src[s..e])?));
        }
        let (init, len) = self.capture[i];
        match len {
            CAP_UNFINISHED => err("unfinished capture"),
            CAP_POSITION => Ok(Value::Integer(init as i64 + 1)),
            len => Ok(Value::String(
                lua.create_string(&self.src[init..init + len as usize])?,
            )),
        }
    }

    /// The captures (the whole match if none; nothing for `find`'s, `whole` false).
    fn captures(&self, lua: &Lua, s: usize, e: usize, whole: bool) -> mlua::Result<MultiValue> {
        let n = if self.level == 0 && whole {
            1
        } else {
            self.level
        };
        (0..n).map(|i| self.capture_value(lua, i, s, e)).collect()
    }
}

/// Lua's `posrelatI`: a 1-based start position.
fn posrelat(pos: i64, len: usize) -> usize {
    if pos > 0 {
        pos as usize
    } else if pos == 0 || pos < -(len as i64) {
        1
    } else {
        (len as i64 + pos + 1) as usize
    }
}

/// Argument `n` of `fname` as a string (numbers converted, as Lua does).
fn string_arg(lua: &Lua, fname: &str, n: usize, v: Value) -> mlua::Result<LuaString> {
    let tn = v.type_name();
    match lua.coerce_string(v)? {
        Some(s) => Ok(s),
        None => err(format!(
            "bad argument #{n} to '{fname}' (string expected, got {tn})"
        )),
    }
}

fn int_arg(lua: &Lua, fname: &str, n: usize, v: Value, default: i64) -> mlua::Result<i64> {
    if v.is_nil() {
        return Ok(default);
    }
    let tn = v.type_name();
    match lua.coerce_integer(v)? {
        Some(i) => Ok(i),
        None => err(format!(
            "bad argument #{n} to '{fname}' (number expected, got {tn})"
        )),
    }
}

fn arg(args: &mut std::vec::IntoIter<Value>) -> Value {
    args.next().unwrap_or(Value::Nil)
}

/// `string.find` (`find`) and `string.match`.
fn find_aux(lua: &Lua, b: &Budget, find: bool, args: MultiValue) -> mlua::Result<MultiValue> {
    let fname = if find { "find" } else { "match" };
    let mut args = args.into_vec().into_iter();
    let s = string_arg(lua, fname, 1, arg(&mut args))?;
    let p = string_arg(lua, fname, 2, arg(&mut args))?;
    let (s, p) = (s.as_bytes(), p.as_bytes());
    let init = posrelat(int_arg(lua, fname, 3, arg(&mut args), 1)?, s.len()) - 1;
    let plain = arg(&mut args);
    if init > s.len() {
        return Ok(MultiValue::from_vec(vec![Value::Nil]));
    }
    let plain = !matches!(plain, Value::Nil | Value::Boolean(false));
    if find && (plain || !p.iter().any(|c| SPECIALS.contains(c))) {
        // a plain search: linear, charged by the bytes it may scan
        b.charge((s.len() - init) as u64 / 16 + 1)?;
        let at = if p.is_empty() {
            Some(0)
        } else {
            s[init..].windows(p.len()).position(|w| w == &p[..])
        };
        return Ok(match at {
            Some(at) => MultiValue::from_vec(vec![
                Value::Integer((init + at + 1) as i64),
                Value::Integer((init + at + p.len()) as i64),
            ]),
            None => MultiValue::from_vec(vec![Value::Nil]),
        });
    }
    let (anchor, p) = match p.first() {
        Some(b'^') => (true, &p[1..]),
        _ => (false, &p[..]),
    };
    let mut m = Matcher::new(&s, p, b);
    let mut s1 = init;
    loop {
        m.reprep();
        if let Some(e) = m.do_match(s1, 0)? {
            m.flush()?;
            if find {
                let mut out = vec![Value::Integer(s1 as i64 + 1), Value::Integer(e as i64)];
                out.extend(m.captures(lua, 0, 0, false)?);
                return Ok(MultiValue::from_vec(out));
            }
            return m.captures(lua, s1, e, true);
        }
        s1 += 1;
        if anchor || s1 > s.len() {
            break;
        }
    }
    m.flush()?;
    Ok(MultiValue::from_vec(vec![Value::Nil]))
}

/// `string.gmatch`: an iterator over a copy of the subject.
fn gmatch(lua: &Lua, b: &Arc<Budget>, args: MultiValue) -> mlua::Result<Function> {
    let mut args = args.into_vec().into_iter();
    let s = string_arg(lua, "gmatch", 1, arg(&mut args))?;
    let p = string_arg(lua, "gmatch", 2, arg(&mut args))?;
    let (s, p) = (s.as_bytes().to_vec(), p.as_bytes().to_vec());
    b.charge(s.len() as u64 / 16 + 1)?;
    let mut init = posrelat(int_arg(lua, "gmatch", 3, arg(&mut args), 1)?, s.len()) - 1;
    if init > s.len() {
        init = s.len() + 1;
    }
    let b = b.clone();
    let mut last: Option<usize> = None;
    lua.create_function_mut(move |lua, ()| {
        let mut m = Matcher::new(&s, &p, &b);
        let mut src = init;
        while src <= s.len() {
            m.reprep();
            match m.do_match(src, 0)? {
                Some(e) if Some(e) != last => {
                    m.flush()?;
                    init = e;
                    last = Some(e);
                    return m.captures(lua, src, e, true);
                }
                _ => src += 1,
            }
        }
        init = src;
        m.flush()?;
        Ok(MultiValue::new())
    })
}

/// `string.gsub`.
fn gsub(lua: &Lua, b: &Budget, args: MultiValue) -> mlua::Result<MultiValue> {
    let mut args = args.into_vec().into_iter();
    let orig = arg(&mut args);
    let src = string_arg(lua, "gsub", 1, orig.clone())?;
    let p = string_arg(lua, "gsub", 2, arg(&mut args))?;
    let (src, p) = (src.as_bytes(), p.as_bytes());
    let repl = arg(&mut args);
    let max_s = int_arg(lua, "gsub", 4, arg(&mut args), src.len() as i64 + 1)?;
    let repl_s = match &repl {
        Value::String(_) | Value::Integer(_) | Value::Number(_) => Some(
            lua.coerce_string(repl.clone())?
                .map(|s| s.as_bytes().to_vec()),
        ),
        Value::Function(_) | Value::Table(_) => None,
        v => {
            return err(format!(
                "bad argument #3 to 'gsub' (string/function/table expected, got {})",
                v.type_name()
            ))
        }
    };
    let (anchor, p) = match p.first() {
        Some(b'^') => (true, &p[1..]),
        _ => (false, &p[..]),
    };
    let mut m = Matcher::new(&src, p, b);
    let mut out: Vec<u8> = Vec::new();
    let (mut s, mut n, mut changed, mut last) = (0usize, 0i64, false, None);
    while n < max_s {
        m.reprep();
        match m.do_match(s, 0)? {
            Some(e) if Some(e) != last => {
                n += 1;
                changed |= add_value(lua, &mut m, &mut out, s, e, &repl, &repl_s)?;
                s = e;
                last = Some(e);
            }
            _ if s < src.len() => {
                out.push(src[s]);
                s += 1;
            }
            _ => break,
        }
        if anchor {
            break;
        }
    }
    m.flush()?;
    let result = if changed {
        out.extend_from_slice(&src[s..]);
        b.charge(out.len() as u64 / 16 + 1)?;
        Value::String(lua.create_string(&out)?)
    } else {
        orig
    };
    Ok(MultiValue::from_vec(vec![result, Value::Integer(n)]))
}

/// One replacement of `gsub`: whether it changed the text.
fn add_value(
    lua: &Lua,
    m: &mut Matcher<'_>,
    out: &mut Vec<u8>,
    s: usize,
    e: usize,
    repl: &Value,
    repl_s: &Option<Option<Vec<u8>>>,
) -> mlua::Result<bool> {
    let v = match (repl, repl_s) {
        (_, Some(Some(news))) => {
            m.step(news.len() as u64 / 16 + 1)?;
            let mut i = 0;
            while i < news.len() {
                let c = news[i];
                i += 1;
                if c != L_ESC {
                    out.push(c);
                    continue;
                }
                let d = news.get(i).copied().unwrap_or(0);
                i += 1;
                if d == L_ESC {
                    out.push(L_ESC);
                } else if d == b'0' {
                    out.extend_from_slice(&m.src[s..e]);
                } else if d.is_ascii_digit() {
                    match m.capture_value(lua, (d - b'1') as usize, s, e)? {
                        Value::String(c) => out.extend_from_slice(&c.as_bytes()),
                        Value::Integer(n) => out.extend_from_slice(n.to_string().as_bytes()),
                        _ => {}
                    }
                } else {
                    return err("invalid use of '%' in replacement string");
                }
            }
            return Ok(true);
        }
        (Value::Function(f), _) => {
            m.flush()?;
            f.call::<Value>(m.captures(lua, s, e, true)?)?
        }
        (Value::Table(t), _) => {
            let k = m.capture_value(lua, 0, s, e)?;
            t.get::<Value>(k)?
        }
        _ => return err("bad argument #3 to 'gsub'"),
    };
    match v {
        Value::Nil | Value::Boolean(false) => {
            out.extend_from_slice(&m.src[s..e]);
            Ok(false)
        }
        Value::String(_) | Value::Integer(_) | Value::Number(_) => {
            let tn = v.type_name();
            match lua.coerce_string(v)? {
                Some(r) => out.extend_from_slice(&r.as_bytes()),
                None => return err(format!("invalid replacement value (a {tn})")),
            }
            Ok(true)
        }
        v => err(format!("invalid replacement value (a {})", v.type_name())),
    }
}

/// Replaces `string.find`, `match`, `gmatch` and `gsub` with the counted ones.
pub(crate) fn install(lua: &Lua, string: &Table, budget: &Arc<Budget>) -> mlua::Result<()> {
    let b = budget.clone();
    string.set(
        "find",
        lua.create_function(move |lua, a: MultiValue| find_aux(lua, &b, true, a))?,
    )?;
    let b = budget.clone();
    string.set(
        "match",
        lua.create_function(move |lua, a: MultiValue| find_aux(lua, &b, false, a))?,
    )?;
    let b = budget.clone();
    string.set(
        "gmatch",
        lua.create_function(move |lua, a: MultiValue| gmatch(lua, &b, a))?,
    )?;
    let b = budget.clone();
    string.set(
        "gsub",
        lua.create_function(move |lua, a: MultiValue| gsub(lua, &b, a))?,
    )?;
    Ok(())
}
