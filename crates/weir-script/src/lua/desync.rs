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
//!   or `badsum = ""`), `false` or nil for none. Only string keys.
//! - The arguments are parsed ([`Action::parse`]) the first time a (spec, args) pair is
//!   seen and kept, up to [`DESYNC_CACHE`] pairs (then parsed on every call); a table's
//!   order does not matter. An unknown action or a bad argument raises a Lua error (the
//!   call fails as any other: counted, the packet passed unchanged, nothing sent).
//! - `payload=` (default `known`) and `dir=` (default `out`) filter as for an instance: a
//!   packet they do not take is left alone (`"pass"`, 0).
//! - The action sees the packet with the script's changes so far, its payload type, the
//!   markers detected when the packet came (relative markers such as `midsld` resolve
//!   against them, as for native instances, even when a change moved the bytes), the TTL
//!   last seen from the server (autottl) and the `[scripts] blobs` (and the default
//!   `fake_default_*` ones).
//! - What it sends joins `pkt:send`'s list, in order (at most [`MAX_SEND`] packets per call
//!   in all: past that the call fails). Its verdict joins the call's as an instance's joins
//!   the profile's: drop (as `pkt:drop()`) over modify (the packet replaced, as by
//!   `pkt:set_payload`) over pass. It returns the verdict (`"pass"`, `"modify"`, `"drop"`)
//!   and how many packets it queued.
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
}

impl ActionCache {
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

/// A table value as an argument's value (None: no argument).
fn arg_value(k: &str, v: Value) -> mlua::Result<Option<String>> {
    Ok(match v {
        Value::String(s) => Some(s.to_str()?.to_string()),
        Value::Integer(n) => Some(n.to_string()),
        Value::Number(x) if x.fract() == 0.0 && x.abs() < 1e15 => Some((x as i64).to_string()),
        Value::Number(x) => Some(x.to_string()),
        Value::Boolean(true) => Some(String::new()),
        Value::Boolean(false) | Value::Nil => None,
        other => {
            return Err(mlua::Error::runtime(format!(
                "desync: argument {k} is a {}, not a string, number or boolean",
                other.type_name()
            )))
        }
    })
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
        None => PayloadFilter::Known,
    };
    let dir = match take("dir").as_deref() {
        None | Some("out") => (true, false),
        Some("in") => (false, true),
        Some("any") => (true, true),
        Some(o) => return Err(format!("{name}: dir={o}: out, in or any")),
    };
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
) -> mlua::Result<(LuaString, i64)> {
    p.budget.charge(DESYNC_COST)?;
    let spec_b = spec.as_bytes();
    if spec_b.contains(&0) {
        return Err(mlua::Error::runtime("desync: a NUL in the action"));
    }
    let mut owned_key = None;
    let mut extra = Vec::new();
    if let Some(t) = args {
        for kv in t.pairs::<Value, Value>() {
            let (k, v) = kv?;
            let Value::String(k) = k else {
                return Err(mlua::Error::runtime(format!(
                    "desync: an argument named by a {}, not a string",
                    k.type_name()
                )));
            };
            let k = k.to_str()?.to_string();
            if let Some(v) = arg_value(&k, v)? {
                extra.push((k, v));
            }
        }
        extra.sort();
        let mut key = spec_b.to_vec();
        key.push(0);
        for (k, v) in &extra {
            key.extend_from_slice(k.as_bytes());
            key.push(1);
            key.extend_from_slice(v.as_bytes());
            key.push(0);
        }
        owned_key = Some(key);
    }
    let key: &[u8] = owned_key.as_deref().unwrap_or(&spec_b[..]);
    let fresh;
    let prepared = match p.actions.map.get(key) {
        Some(r) => r,
        None => {
            let spec_s = std::str::from_utf8(&spec_b[..])
                .map_err(|_| mlua::Error::runtime("desync: the action is not UTF-8"))?;
            let r = prepare(spec_s, extra).map_err(|e| format!("desync {spec_s}: {e}"));
            if p.actions.map.len() < DESYNC_CACHE {
                p.actions.map.insert(key.to_vec(), r);
                &p.actions.map[key]
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
        return Ok((p.verdict_names[0].clone(), 0));
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
    Ok((p.verdict_names[i].clone(), n))
}
