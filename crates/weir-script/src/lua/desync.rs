//! `pkt:desync(spec, args)`: weir's native desync actions ([`crate::desync`]) called from
//! Lua, on the packet of the call as it is now.
//!
//! ```lua
//! function seed(pkt, args)
//!   pkt:desync("multisplit", {pos = "1,midsld", payload = "all"})
//!   pkt:desync("fake:ip_ttl=1:badsum:blob=0x10000000:payload=all")
//! end
//! ```
//!
//! - `spec` is an action's name, optionally with arguments in the configuration's (nfqws2's
//!   `--lua-desync`) syntax: `"multisplit:pos=1,midsld:nodrop"`. `args`, optional, is a
//!   table of more arguments: string or number values, `true` for a flag (`badsum = true`
//!   or `badsum = ""`), `false` or nil for none; string keys only, and no NUL in a key or
//!   a value.
//! - The arguments are parsed ([`Action::parse`]) the first time a (spec, args) pair is
//!   seen and kept, up to [`DESYNC_CACHE`] pairs (then parsed on every call); a table's
//!   order does not matter; a call whose action is kept allocates nothing to find it. An
//!   unknown action or a bad argument raises a Lua error (the call fails as any other:
//!   counted, the packet passed unchanged, nothing sent).
//! - `payload=` (default `known`) and `dir=` (default `out`) filter as for an instance: a
//!   packet they do not take is left alone (returns `VERDICT_PASS`, 0).
//! - The action sees the packet with the script's changes so far, its payload type, the
//!   markers detected when the packet came (relative markers such as `midsld` resolve
//!   against them, as for native instances, even when a change moved the bytes), the TTL
//!   last seen from the server (autottl) and the `[scripts] blobs` (and the default
//!   `fake_default_*` ones).
//! - What it sends joins `pkt:send`'s list, in order (at most [`MAX_SEND`] packets per call
//!   in all: past that the call fails). Its verdict joins the call's as an instance's joins
//!   the profile's: drop (as `pkt:drop()`) over modify (the packet replaced, as by
//!   `pkt:set_payload`) over pass. It returns the action's verdict as a number
//!   (`VERDICT_PASS`, `VERDICT_MODIFY`, `VERDICT_DROP`, as nfqws2's functions return) and
//!   how many packets it queued.
//! - Each call charges [`DESYNC_COST`] instructions to the call's budget: the Rust work is
//!   not otherwise counted, and this bounds how many actions one call runs.

use std::collections::HashMap;

use mlua::{String as LuaString, Table, Value};

use super::packet::{locate, PktState, MAX_PACKET, MAX_SEND};
use crate::config::split_desync;
use crate::desync::{self, Action, Input, Verdict};
use crate::profile::PayloadFilter;

/// Distinct (spec, args) pairs whose parsed action is kept.
pub const DESYNC_CACHE: usize = 1024;

/// The instructions each `pkt:desync` call charges to the budget.
pub const DESYNC_COST: u64 = 1000;

/// An action with its filters, parsed.
pub(crate) struct Prepared {
    action: Action,
    payload: PayloadFilter,
    /// Takes outgoing packets, incoming ones.
    dir: (bool, bool),
}

/// Parsed actions (or the error their arguments gave), by their key: the spec alone when
/// there is no table, else the spec, a NUL, and the table's pairs sorted (`k` 0x01 `v` NUL).
#[derive(Default)]
pub(crate) struct ActionCache {
    map: HashMap<Vec<u8>, Result<Prepared, String>>,
    /// Buffers for a table's key, kept to spare allocations.
    raw: Vec<u8>,
    spans: Vec<(usize, usize)>,
    key: Vec<u8>,
}

impl ActionCache {
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

/// Appends a table value as an argument's value to `out`; false when there is none (`false`
/// or nil).
fn arg_value(out: &mut Vec<u8>, k: &[u8], v: &Value) -> mlua::Result<bool> {
    use std::io::Write;
    match v {
        Value::String(s) => {
            let b = s.as_bytes();
            if b.contains(&0) {
                return Err(mlua::Error::runtime(format!(
                    "desync: argument {} has a NUL",
                    String::from_utf8_lossy(k)
                )));
            }
            out.extend_from_slice(&b);
        }
        Value::Integer(n) => write!(out, "{n}")?,
        Value::Number(x) if x.fract() == 0.0 && x.abs() < 1e15 => write!(out, "{}", *x as i64)?,
        Value::Number(x) => write!(out, "{x}")?,
        Value::Boolean(true) => {}
        Value::Boolean(false) | Value::Nil => return Ok(false),
        other => {
            return Err(mlua::Error::runtime(format!(
                "desync: argument {} is a {}, not a string, number or boolean",
                String::from_utf8_lossy(k),
                other.type_name()
            )))
        }
    }
    Ok(true)
}

impl ActionCache {
    /// Makes `self.key` the key of (`spec`, `t`): each pair written as `k` 0x01 `v` into
    /// `raw`, the pairs sorted, joined after `spec` and a NUL, each ended by a NUL. No
    /// allocation once the buffers have grown.
    fn table_key(&mut self, spec: &[u8], t: &Table) -> mlua::Result<()> {
        self.raw.clear();
        self.spans.clear();
        for kv in t.pairs::<Value, Value>() {
            let (k, v) = kv?;
            let Value::String(k) = k else {
                return Err(mlua::Error::runtime(format!(
                    "desync: an argument named by a {}, not a string",
                    k.type_name()
                )));
            };
            let k = k.as_bytes();
            if k.is_empty() || k.contains(&0) || k.contains(&1) {
                return Err(mlua::Error::runtime(format!(
                    "desync: argument name {:?}",
                    String::from_utf8_lossy(&k)
                )));
            }
            let at = self.raw.len();
            self.raw.extend_from_slice(&k);
            self.raw.push(1);
            if arg_value(&mut self.raw, &k, &v)? {
                self.spans.push((at, self.raw.len()));
            } else {
                self.raw.truncate(at);
            }
        }
        let raw = &self.raw;
        self.spans
            .sort_unstable_by(|a, b| raw[a.0..a.1].cmp(&raw[b.0..b.1]));
        self.key.clear();
        self.key.extend_from_slice(spec);
        self.key.push(0);
        for &(a, b) in &self.spans {
            self.key.extend_from_slice(&raw[a..b]);
            self.key.push(0);
        }
        Ok(())
    }
}

/// The table's arguments back from a key made by [`ActionCache::table_key`].
fn key_args(key: &[u8]) -> Result<Vec<(String, String)>, String> {
    let text = |b: &[u8]| {
        std::str::from_utf8(b)
            .map(str::to_string)
            .map_err(|_| "an argument is not UTF-8".to_string())
    };
    let Some(at) = key.iter().position(|&b| b == 0) else {
        return Ok(Vec::new());
    };
    key[at + 1..]
        .split(|&b| b == 0)
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let sep = kv.iter().position(|&b| b == 1).unwrap_or(kv.len());
            Ok((text(&kv[..sep])?, text(kv.get(sep + 1..).unwrap_or(&[]))?))
        })
        .collect()
}

/// Parses `spec` with `extra` arguments after its own.
fn prepare(spec: &str, extra: Vec<(String, String)>) -> Result<Prepared, String> {
    let (name, mut args) = split_desync(spec)?;
    args.extend(extra);
    let mut take = |k: &str| {
        let mut r = None;
        while let Some(i) = args.iter().position(|(a, _)| a == k) {
            r = Some(args.remove(i).1);
        }
        r
    };
    let payload = match take("payload") {
        Some(v) => PayloadFilter::parse(&v)?,
        None => desync::defaults(&name).0,
    };
    let dir = match take("dir").as_deref() {
        None => match desync::defaults(&name).1 {
            crate::scripts::Direction::Out => (true, false),
            crate::scripts::Direction::In => (false, true),
            crate::scripts::Direction::Any => (true, true),
        },
        Some("out") => (true, false),
        Some("in") => (false, true),
        Some("any") => (true, true),
        Some(o) => return Err(format!("{name}: dir={o}: out, in or any")),
    };
    if name == "oob" {
        // it needs the whole connection from its SYN and its own cutoff: an instance's
        return Err(
            "oob: runs as an instance only (it shifts the connection's numbers from the SYN on)"
                .into(),
        );
    }
    let action = Action::parse(&name, &args).map_err(|e| e.to_string())?;
    Ok(Prepared {
        action,
        payload,
        dir,
    })
}

/// `pkt:desync(spec, args)`.
pub(crate) fn call(
    p: &mut PktState,
    spec: &LuaString,
    args: Option<Table>,
) -> mlua::Result<(i64, i64)> {
    p.budget.charge(DESYNC_COST)?;
    let spec_b = spec.as_bytes();
    if spec_b.contains(&0) {
        return Err(mlua::Error::runtime("desync: a NUL in the action"));
    }
    let cache = &mut p.actions;
    let key: &[u8] = match &args {
        Some(t) => {
            cache.table_key(&spec_b, t)?;
            &cache.key
        }
        None => &spec_b,
    };
    let fresh;
    let prepared = match cache.map.get(key) {
        Some(r) => r,
        None => {
            let r = std::str::from_utf8(&spec_b)
                .map_err(|_| "the action is not UTF-8".to_string())
                .and_then(|spec_s| prepare(spec_s, key_args(key)?))
                .map_err(|e| format!("desync {}: {e}", String::from_utf8_lossy(&spec_b)));
            if cache.map.len() < DESYNC_CACHE {
                let k = key.to_vec();
                cache.map.entry(k).or_insert(r)
            } else {
                fresh = r;
                &fresh
            }
        }
    };
    let prepared = match prepared {
        Ok(a) => a,
        Err(e) => return Err(mlua::Error::runtime(e.clone())),
    };
    let v = &p.view;
    let takes = if v.outgoing {
        prepared.dir.0
    } else {
        prepared.dir.1
    };
    if !takes || !prepared.payload.accepts(v.ptype) {
        return Ok((0, 0));
    }
    let out = desync::apply(
        &prepared.action,
        &Input {
            packet: &v.packet,
            ptype: v.ptype,
            markers: v.markers,
            incoming_ttl: v.incoming_ttl,
        },
        &p.blobs,
    );
    if p.send.len() + out.send.len() > MAX_SEND {
        return Err(mlua::Error::runtime(format!(
            "desync {}: {} packets to send, {} queued already: at most {MAX_SEND} per call",
            prepared.action.name(),
            out.send.len(),
            p.send.len()
        )));
    }
    let n = out.send.len() as i64;
    p.send.extend(out.send);
    let i = match out.verdict {
        Verdict::Pass => 0,
        Verdict::Modify => {
            p.touch();
            if let Some(m) = out.modified.filter(|m| m.len() <= MAX_PACKET) {
                let (l4proto, l4, pay) = locate(&m);
                let v = &mut p.view;
                v.packet = m;
                v.l4proto = l4proto;
                v.l4_offset = l4;
                v.payload_offset = pay;
            }
            1
        }
        Verdict::Drop => {
            p.drop = true;
            2
        }
    };
    Ok((i, n))
}
