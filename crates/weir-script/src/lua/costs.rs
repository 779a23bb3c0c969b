//! What Lua's own C functions cost against the instruction budget.
//!
//! The count hook runs between VM instructions, so a C function runs uncounted however long
//! it takes: `string.rep('x', 1e8)` is one instruction. The functions whose work grows
//! with their arguments are wrapped: each call is charged, before it runs, in proportion
//! to the work its arguments ask for (one instruction per [`BYTES_PER_INSTRUCTION`] bytes
//! made or scanned, one per value pushed or element moved), and a call the budget cannot
//! pay is not made (the budget error ends the call, as the hook's does). The pattern
//! functions (`find`, `match`, `gmatch`, `gsub`) are reimplemented and charged per step
//! instead (see [`super::pattern`]).
//!
//! | function | charged |
//! | --- | --- |
//! | `string.rep(s, n, sep)` | the result's bytes (at least `n`'s worth: it loops `n` times) |
//! | `string.format`, `sub`, `upper`, `lower`, `reverse`, `char` | the result's bytes, after the call, gathered by [`PAY_CHUNK`] bytes |
//! | `string.byte(s, i, j)`, `utf8.char(...)` | one per value (`string.byte(s, i)`: its wrapper's instructions) |
//! | `string.pack`, `packsize` | `fmt`'s bytes, the sizes written in it and the string arguments' bytes |
//! | `string.unpack(fmt, s)` | `fmt`'s and `s`'s bytes |
//! | `utf8.len`, `utf8.offset` | the subject's bytes |
//! | `utf8.codepoint(s, i, j)` | one per byte of the range |
//! | `table.concat(t, sep, i, j)` | one per element, plus the bytes of the (raw) string elements and separators |
//! | `table.unpack(t, i, j)` | one per value |
//! | `table.insert(t, pos, v)`, `table.remove(t, pos)` | one per element moved (`#t - pos`) |
//! | `table.move(a, f, e, t)` | one per element |
//! | `table.sort(t)` | `n log2 n` for `n = #t` (a Lua comparator is counted as it runs) |
//! | `load(s)`, `tonumber(s)` | `s`'s bytes |
//! | `os.date(fmt)` | 64x `fmt`'s bytes |
//! | `collectgarbage()` ("collect", "step") | the state's memory in use / 64 |
//!
//! Not counted by size: the operators (one VM instruction however long their operands:
//! `..` copies both, `==`, `<` and `<=` between long strings compare them byte by byte),
//! reading a file (`io.open(...):read("a")`: the script directory's files, at most
//! [`super::sandbox::MAX_OPENS`] opens per call) and the other functions (constant or
//! logarithmic time). A `__tostring` or other metamethod written in Lua is counted as Lua.

use std::sync::Arc;

use mlua::{Function, Lua, MultiValue, Table, Value};

use super::sandbox::Budget;

/// Bytes made or scanned per instruction charged.
pub const BYTES_PER_INSTRUCTION: u64 = 16;

fn bytes(n: u64) -> u64 {
    n / BYTES_PER_INSTRUCTION + 1
}

fn len_of(v: Option<&Value>) -> u64 {
    match v {
        Some(Value::String(s)) => s.as_bytes().len() as u64,
        Some(Value::Integer(_) | Value::Number(_)) => 24,
        _ => 0,
    }
}

fn int_of(v: Option<&Value>) -> Option<i64> {
    match v {
        Some(Value::Integer(i)) => Some(*i),
        Some(Value::Number(x)) if x.is_finite() => Some(*x as i64),
        Some(Value::String(s)) => s.to_str().ok()?.trim().parse().ok(),
        _ => None,
    }
}

fn raw_len(v: Option<&Value>) -> i64 {
    match v {
        Some(Value::Table(t)) => t.raw_len() as i64,
        Some(Value::String(s)) => s.as_bytes().len() as i64,
        _ => 0,
    }
}

/// The number of positions in `i..=j` (0 if empty), saturating.
fn span(i: i64, j: i64) -> u64 {
    if j < i {
        0
    } else {
        (j as i128 - i as i128 + 1).min(u64::MAX as i128) as u64
    }
}

/// Lua's `posrelatI` and `getendpos` over a string of `len` bytes: the range `i..=j`.
fn str_range(len: i64, i: Option<i64>, j: Option<i64>, default_j: i64) -> (i64, i64) {
    let i = match i.unwrap_or(1) {
        i if i > 0 => i,
        0 => 1,
        i if i < -len => 1,
        i => len + i + 1,
    };
    let j = match j.unwrap_or(default_j) {
        j if j > len => len,
        j if j >= 0 => j,
        j if j < -len => 0,
        j => len + j + 1,
    };
    (i, j)
}

/// The sum of the numbers written in a `string.pack` format (the sizes it asks for).
fn sizes_in(fmt: &[u8]) -> u64 {
    let (mut total, mut cur) = (0u64, 0u64);
    for &c in fmt {
        if c.is_ascii_digit() {
            cur = cur.saturating_mul(10).saturating_add((c - b'0') as u64);
        } else {
            total = total.saturating_add(cur);
            cur = 0;
        }
    }
    total.saturating_add(cur)
}

type Cost = fn(&Lua, &[Value]) -> u64;

fn cost_rep(_: &Lua, a: &[Value]) -> u64 {
    let n = int_of(a.get(1)).unwrap_or(0).max(0) as u64;
    // (Lua loops `n` times even over empty strings)
    bytes(n.saturating_mul(len_of(a.first()) + len_of(a.get(2)))).max(bytes(n))
}

fn cost_len(_: &Lua, a: &[Value]) -> u64 {
    bytes(len_of(a.first()))
}

fn cost_byte(_: &Lua, a: &[Value]) -> u64 {
    let len = raw_len(a.first());
    let i = int_of(a.get(1));
    let (i, j) = str_range(len, i, int_of(a.get(2)), i.unwrap_or(1));
    span(i, j) + 1
}

fn cost_args(_: &Lua, a: &[Value]) -> u64 {
    a.len() as u64 + 1
}

fn cost_pack(_: &Lua, a: &[Value]) -> u64 {
    let fmt = match a.first() {
        Some(Value::String(s)) => sizes_in(&s.as_bytes()),
        _ => 0,
    };
    let args: u64 = a.iter().map(|v| len_of(Some(v))).sum();
    bytes(
        fmt.saturating_add(args)
            .saturating_add(len_of(a.first()) * 16),
    ) + a.len() as u64
}

fn cost_unpack(_: &Lua, a: &[Value]) -> u64 {
    bytes(len_of(a.get(1))) + len_of(a.first())
}

fn cost_codepoint(_: &Lua, a: &[Value]) -> u64 {
    let len = raw_len(a.first());
    let i = int_of(a.get(1));
    let (i, j) = str_range(len, i, int_of(a.get(2)), i.unwrap_or(1));
    span(i, j) + 1
}

fn cost_concat(_: &Lua, a: &[Value]) -> u64 {
    let Some(Value::Table(t)) = a.first() else {
        return 1;
    };
    let sep = len_of(a.get(1));
    let i = int_of(a.get(2)).unwrap_or(1);
    let j = int_of(a.get(3)).unwrap_or(t.raw_len() as i64);
    let n = span(i, j);
    // (past 64Ki elements the count alone is charged: that is already a budget's worth)
    let mut total = 0u64;
    if n <= 1 << 16 {
        for k in i..=j {
            total += len_of(t.raw_get::<Value>(k).ok().as_ref()) + sep;
        }
    }
    n.saturating_add(bytes(total))
}

fn cost_unpack_t(_: &Lua, a: &[Value]) -> u64 {
    let i = int_of(a.get(1)).unwrap_or(1);
    let j = int_of(a.get(2)).unwrap_or_else(|| raw_len(a.first()));
    span(i, j) + 1
}

fn cost_insert(_: &Lua, a: &[Value]) -> u64 {
    if a.len() < 3 {
        return 1;
    }
    let n = raw_len(a.first());
    span(int_of(a.get(1)).unwrap_or(n + 1), n) + 1
}

fn cost_remove(_: &Lua, a: &[Value]) -> u64 {
    let n = raw_len(a.first());
    span(int_of(a.get(1)).unwrap_or(n), n) + 1
}

fn cost_move(_: &Lua, a: &[Value]) -> u64 {
    span(int_of(a.get(1)).unwrap_or(1), int_of(a.get(2)).unwrap_or(0)) + 1
}

fn cost_sort(_: &Lua, a: &[Value]) -> u64 {
    let n = raw_len(a.first()).max(1) as u64;
    n * (64 - n.leading_zeros() as u64) + 1
}

fn cost_load(_: &Lua, a: &[Value]) -> u64 {
    bytes(len_of(a.first()))
}

fn cost_date(_: &Lua, a: &[Value]) -> u64 {
    bytes(64 * len_of(a.first()))
}

fn cost_gc(lua: &Lua, a: &[Value]) -> u64 {
    match a.first() {
        None | Some(Value::Nil) => lua.used_memory() as u64 / 64 + 1,
        Some(Value::String(s)) if matches!(&*s.as_bytes(), b"collect" | b"step") => {
            lua.used_memory() as u64 / 64 + 1
        }
        _ => 1,
    }
}

/// `f` charged `cost(args)` before each call.
///
/// Called from Rust, the C function cannot tell its name: its argument errors say `'?'`,
/// put back as `name`. (Neither can it tell the script's line: the messages of errors
/// raised by the wrapped functions have no position.)
fn charged(
    lua: &Lua,
    b: &Arc<Budget>,
    name: &'static str,
    f: Function,
    cost: Cost,
) -> mlua::Result<Function> {
    let b = b.clone();
    lua.create_function(move |lua, a: MultiValue| {
        let a = a.into_vec();
        b.charge(cost(lua, &a))?;
        f.call::<MultiValue>(MultiValue::from_vec(a))
            .map_err(|e| match e {
                mlua::Error::RuntimeError(m) if m.contains(" to '?'") => {
                    mlua::Error::RuntimeError(m.replacen(" to '?'", &format!(" to '{name}'"), 1))
                }
                e => e,
            })
    })
}

fn wrap(
    lua: &Lua,
    b: &Arc<Budget>,
    t: &Table,
    names: &[&'static str],
    cost: Cost,
) -> mlua::Result<()> {
    for &k in names {
        if let Value::Function(f) = t.get::<Value>(k)? {
            t.set(k, charged(lua, b, k, f, cost)?)?;
        }
    }
    Ok(())
}

/// Bytes the Lua-side wrappers of the hot string functions gather before charging them.
pub const PAY_CHUNK: u64 = 4096;

/// The hot, cheap functions are wrapped in Lua (a Rust call costs about 0.2 us, more than
/// they do): they run, then pay for what they made (their result's bytes), gathered and
/// charged by [`PAY_CHUNK`] bytes (what a call leaves unpaid is paid by the next ones).
/// Their work is bounded by the strings that exist already (the memory limit), so one call
/// overruns by at most that. `string.byte` with a range goes to the Rust wrapper (charged
/// before: it may push a value per byte).
const LUA_SIDE: &str = r#"
local pay_rust, byte_range, string = ...
local sub, byte, char, format = string.sub, string.byte, string.char, string.format
local upper, lower, reverse = string.upper, string.lower, string.reverse
local pending = 0
local function paid(r)
  pending = pending + #r
  if pending >= CHUNK then
    local p = pending
    pending = 0
    pay_rust(p)
  end
  return r
end
string.sub = function(...) return paid(sub(...)) end
string.char = function(...) return paid(char(...)) end
string.format = function(...) return paid(format(...)) end
string.upper = function(...) return paid(upper(...)) end
string.lower = function(...) return paid(lower(...)) end
string.reverse = function(...) return paid(reverse(...)) end
string.byte = function(s, i, j, ...)
  if j == nil then return byte(s, i) end
  return byte_range(s, i, j, ...)
end
"#;

/// Wraps the library's functions in `g` (before the sandbox's own Lua wrappers are made,
/// which take `load` and `collectgarbage` as they are then).
pub(crate) fn install(lua: &Lua, g: &Table, b: &Arc<Budget>) -> mlua::Result<()> {
    let string: Table = g.get("string")?;
    let table: Table = g.get("table")?;
    // weir's matcher for the pattern functions
    super::pattern::install(lua, &string, b)?;
    wrap(lua, b, &string, &["rep"], cost_rep)?;
    let bb = b.clone();
    let pay = lua.create_function(move |_, n: u64| bb.charge(n / BYTES_PER_INSTRUCTION))?;
    let byte_range = charged(lua, b, "byte", string.get("byte")?, cost_byte)?;
    let code = LUA_SIDE.replace("CHUNK", &PAY_CHUNK.to_string());
    lua.load(code)
        .set_name("=costs")
        .call::<()>((pay, byte_range, string.clone()))?;
    wrap(lua, b, &table, &["concat"], cost_concat)?;
    wrap(lua, b, &string, &["pack", "packsize"], cost_pack)?;
    wrap(lua, b, &string, &["unpack"], cost_unpack)?;
    let utf8: Table = g.get("utf8")?;
    wrap(lua, b, &utf8, &["char"], cost_args)?;
    wrap(lua, b, &utf8, &["len", "offset"], cost_len)?;
    wrap(lua, b, &utf8, &["codepoint"], cost_codepoint)?;
    wrap(lua, b, &table, &["unpack"], cost_unpack_t)?;
    wrap(lua, b, &table, &["insert"], cost_insert)?;
    wrap(lua, b, &table, &["remove"], cost_remove)?;
    wrap(lua, b, &table, &["move"], cost_move)?;
    wrap(lua, b, &table, &["sort"], cost_sort)?;
    wrap(lua, b, g, &["load", "tonumber"], cost_load)?;
    wrap(lua, b, g, &["collectgarbage"], cost_gc)?;
    let os: Table = g.get("os")?;
    wrap(lua, b, &os, &["date"], cost_date)?;
    Ok(())
}
